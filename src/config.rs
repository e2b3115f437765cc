//! berth's configuration: defaults, then a TOML file (`--config FILE`),
//! then `BERTH_*` environment variables, then command-line flags.
//!
//! Every setting has a working default, so `berth serve` needs nothing. Any
//! setting can come from the environment: `BERTH_` and the setting's path
//! in upper case, with `__` between sections (`BERTH_PROVISIONER__WORKERS=4`,
//! `BERTH_PROVIDER__SIM__FAILURE_RATE=0.3`, `BERTH_PROVIDER__KIND=sim`); a
//! value is read as TOML when it parses as a TOML value (numbers, booleans,
//! arrays) and as a string otherwise. The top-level settings also have
//! short names: `BERTH_LISTEN`, `BERTH_DATA_DIR`, `BERTH_DATABASE_URL`,
//! `BERTH_CONTROLLER_URL`, `BERTH_WEBHOOK_SECRET`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::engine::broker::{Bucket, RateLimits};
use crate::engine::config::ProvisionerConfig;
use crate::providers::manual::ManualConfig;
use crate::providers::sim::SimConfig;
use crate::tls::TlsConfig;

/// Where `berth serve` listens unless told otherwise (Juju's API port).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:17070";

/// Which cloud berth provisions on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// The simulated cloud (the default; no account needed).
    #[default]
    Sim,
    /// Amazon EC2.
    Ec2,
}

impl ProviderKind {
    /// The name the provider of this kind reports
    /// ([`crate::contracts::provider::Provider::name`]), known before it is opened.
    pub fn name(self) -> &'static str {
        match self {
            ProviderKind::Sim => "sim",
            ProviderKind::Ec2 => "ec2",
        }
    }
}

/// `[provider]`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProviderConfig {
    pub kind: ProviderKind,
    pub sim: SimConfig,
    /// `[provider.ec2]`, read by the EC2 provider.
    pub ec2: Option<toml::Table>,
    /// `[provider.limits]`: the rate the broker calls the provider at.
    pub limits: LimitsConfig,
}

/// One token bucket: `burst` calls at once, refilled at `per_second`.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BucketConfig {
    pub burst: u32,
    pub per_second: f64,
}

/// `[provider.limits]`: the token buckets the broker paces its calls
/// with, each replacing the provider's default for its kind (EC2: AWS's
/// published limits; the simulated cloud: none, paced only once it
/// throttles). `launch`, `terminate` and `describe` are request tokens,
/// one per API request a call makes (an EC2 launch call makes one
/// RunInstances per instance); `instances` are the instances launch calls
/// ask for, one token each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    pub launch: Option<BucketConfig>,
    pub instances: Option<BucketConfig>,
    pub terminate: Option<BucketConfig>,
    pub describe: Option<BucketConfig>,
}

/// The largest burst a limit may name.
pub const MOST_BURST: u32 = 1_000_000;

impl LimitsConfig {
    fn each(&self) -> [(&'static str, Option<BucketConfig>); 4] {
        [
            ("launch", self.launch),
            ("instances", self.instances),
            ("terminate", self.terminate),
            ("describe", self.describe),
        ]
    }

    /// # Errors
    ///
    /// A sentence naming the limit that cannot work.
    pub fn validate(&self) -> Result<(), String> {
        for (name, bucket) in self.each() {
            let Some(bucket) = bucket else { continue };
            if bucket.burst == 0 || bucket.burst > MOST_BURST {
                return Err(format!(
                    "provider.limits.{name}.burst is {}: expected 1 to {MOST_BURST}",
                    bucket.burst
                ));
            }
            if !(bucket.per_second.is_finite() && bucket.per_second >= LEAST_PER_SECOND) {
                return Err(format!(
                    "provider.limits.{name}.per_second is {}: expected a number of at least \
                     {LEAST_PER_SECOND} (a call every {} s)",
                    bucket.per_second,
                    1.0 / LEAST_PER_SECOND
                ));
            }
        }
        Ok(())
    }

    /// `defaults` with each limit this names in its place.
    pub fn over(&self, defaults: RateLimits) -> RateLimits {
        let bucket = |b: Option<BucketConfig>, default: Option<Bucket>| {
            b.map(|b| Bucket {
                capacity: f64::from(b.burst),
                per_second: b.per_second,
            })
            .or(default)
        };
        RateLimits {
            launch: bucket(self.launch, defaults.launch),
            instances: bucket(self.instances, defaults.instances),
            terminate: bucket(self.terminate, defaults.terminate),
            describe: bucket(self.describe, defaults.describe),
        }
    }
}

/// `[api]`: limits of the HTTP API.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiConfig {
    /// How many event streams (`GET /v1/events`) may be open at once; the
    /// server lowers it to what its file-descriptor limit allows.
    pub max_event_streams: usize,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            max_event_streams: crate::api::MAX_EVENT_STREAMS,
        }
    }
}

/// The slowest refill a request bucket may have: one call every 1,000 s.
pub const LEAST_PER_SECOND: f64 = 0.001;

impl ApiConfig {
    /// # Errors
    ///
    /// A sentence naming the setting that cannot work.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_event_streams == 0 {
            return Err("api.max_event_streams must be at least 1".into());
        }
        Ok(())
    }
}

/// The whole configuration.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub listen: SocketAddr,
    /// `None`: `$BERTH_DATA_DIR`, else `$XDG_DATA_HOME/berth`, else
    /// `~/.local/share/berth`.
    pub data_dir: Option<PathBuf>,
    /// `None`: SQLite `berth.db` in the data directory.
    pub database_url: Option<String>,
    /// Where machine agents reach this controller; `None`: `http://` (or
    /// `https://` with TLS) and the listen address.
    pub controller_url: Option<String>,
    /// The shared secret providers sign webhooks with; `None`: the
    /// model's, made by the first controller on the store and kept there
    /// (and written to `<data-dir>/webhook.secret`).
    #[serde(deserialize_with = "secret_text")]
    pub webhook_secret: Option<String>,
    pub provider: ProviderConfig,
    pub provisioner: ProvisionerConfig,
    /// `[manual]`: existing hosts enlisted over SSH.
    pub manual: ManualConfig,
    /// `[api]`: limits of the HTTP API.
    pub api: ApiConfig,
    /// `[tls]`: HTTPS, on by default when `listen` is not loopback.
    pub tls: TlsConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: DEFAULT_LISTEN
                .parse()
                .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 17070))),
            data_dir: None,
            database_url: None,
            controller_url: None,
            webhook_secret: None,
            provider: ProviderConfig::default(),
            provisioner: ProvisionerConfig::default(),
            manual: ManualConfig::default(),
            api: ApiConfig::default(),
            tls: TlsConfig::default(),
        }
    }
}

/// Why the configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{origin}: {message}")]
    Invalid { origin: String, message: String },
}

/// A secret setting's text. Anything else is refused without the value
/// in the message, which goes to the terminal and the logs.
fn secret_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match toml::Value::deserialize(d)? {
        toml::Value::String(text) => Ok(Some(text)),
        other => Err(serde::de::Error::custom(format!(
            "webhook_secret must be a string (in quotes), not a {}; the value is not shown, as it is a secret",
            other.type_str()
        ))),
    }
}

/// The environment's short names for top-level settings, each a text
/// taken as it is (a secret of digits stays a string).
const SHORT_NAMES: [(&str, &str); 5] = [
    ("BERTH_LISTEN", "listen"),
    ("BERTH_DATA_DIR", "data_dir"),
    ("BERTH_DATABASE_URL", "database_url"),
    ("BERTH_CONTROLLER_URL", "controller_url"),
    ("BERTH_WEBHOOK_SECRET", "webhook_secret"),
];

/// The fewest characters a webhook secret given in the configuration
/// may have (the one the controller makes has 64).
pub const LEAST_WEBHOOK_SECRET: usize = 16;

/// Variables that are not settings (the CLI's own).
const NOT_SETTINGS: [&str; 5] = [
    "BERTH_CONFIG",
    "BERTH_URL",
    "BERTH_TOKEN",
    "BERTH_LOG",
    "BERTH_CA_CERT",
];

impl Config {
    /// Loads the configuration: defaults, then `file`, then `env` (pairs of
    /// name and value, normally `std::env::vars()`).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the file or variable and what is wrong.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let mut table = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_path_buf(),
                    source,
                })?;
                text.parse::<toml::Table>()
                    .map_err(|e| ConfigError::Invalid {
                        origin: path.display().to_string(),
                        message: e.to_string(),
                    })?
            }
            None => toml::Table::new(),
        };
        let mut overridden = Vec::new();
        for (name, value) in env {
            if let Some(meant) = one_underscore_short(&name) {
                return Err(ConfigError::Invalid {
                    origin: name.clone(),
                    message: format!(
                        "{name} is not a setting: a setting in a section is named \
                         BERTH_SECTION__KEY, with two underscores between them ({meant})"
                    ),
                });
            }
            let Some(path) = env_path(&name) else {
                continue;
            };
            let text_setting =
                matches!(path.as_slice(), [key] if SHORT_NAMES.iter().any(|(_, k)| k == key));
            let value = match text_setting {
                true => toml::Value::String(value),
                false => env_value(&value),
            };
            set_path(&mut table, &path, value).map_err(|message| ConfigError::Invalid {
                origin: name.clone(),
                message,
            })?;
            overridden.push(name);
        }
        let origin = match (file, overridden.is_empty()) {
            (Some(path), true) => path.display().to_string(),
            (Some(path), false) => format!("{} (with {})", path.display(), overridden.join(", ")),
            (None, false) => overridden.join(", "),
            (None, true) => "defaults".to_string(),
        };
        let config: Config =
            toml::Value::Table(table)
                .try_into()
                .map_err(|e: toml::de::Error| ConfigError::Invalid {
                    origin: origin.clone(),
                    message: e.to_string(),
                })?;
        config
            .validate()
            .map_err(|message| ConfigError::Invalid { origin, message })?;
        Ok(config)
    }

    /// # Errors
    ///
    /// A sentence naming the setting that cannot work.
    pub fn validate(&self) -> Result<(), String> {
        self.provisioner.validate()?;
        self.provider.sim.validate()?;
        self.provider.limits.validate()?;
        self.api.validate()?;
        self.tls.validate(self.listen)?;
        if let Some(url) = &self.controller_url {
            if self.tls.serves_tls(self.listen) && url.trim().starts_with("http://") {
                return Err(format!(
                    "controller_url {url:?} is plain HTTP, but this controller serves HTTPS (TLS \
                     is on for listen {}): agents could not check in; use https://",
                    self.listen
                ));
            }
        }
        let (beat, down_after) = (
            self.provider.sim.heartbeat_interval_ms,
            self.provisioner.agent_down_after_s,
        );
        // A heartbeat stored less than a quarter of agent_down_after_s
        // before is not written again (see SimConfig).
        if self.provider.kind == ProviderKind::Sim
            && down_after > 0
            && beat.saturating_mul(4) >= down_after.saturating_mul(3_000)
        {
            return Err(format!(
                "provider.sim.heartbeat_interval_ms is {beat}: the simulated agents must report \
                 more often than three quarters of provisioner.agent_down_after_s \
                 ({down_after} s), or live agents would be shown down"
            ));
        }
        // A real agent (an EC2 instance's) reports every
        // DEFAULT_INTERVAL_SECS: the same three quarters.
        let agents_beat = crate::cli::agent::DEFAULT_INTERVAL_SECS;
        if self.provider.kind != ProviderKind::Sim
            && down_after > 0
            && agents_beat.saturating_mul(4) >= down_after.saturating_mul(3)
        {
            return Err(format!(
                "provisioner.agent_down_after_s is {down_after}: the machine agents report every \
                 {agents_beat} s, so live agents would be shown down; give more than {} s, or 0 to \
                 turn the check off",
                agents_beat * 4 / 3
            ));
        }
        if let Some(secret) = &self.webhook_secret {
            let length = secret.trim().chars().count();
            if length < LEAST_WEBHOOK_SECRET {
                return Err(format!(
                    "webhook_secret has {length} characters: anyone could sign webhooks with so \
                     short a secret; give at least {LEAST_WEBHOOK_SECRET}, or leave it out for the \
                     controller to make one (the value is not shown, as it is a secret)"
                ));
            }
        }
        self.manual.validate()?;
        if self.provider.kind == ProviderKind::Ec2 && self.provider.ec2.is_none() {
            return Err("provider.kind is \"ec2\" but there is no [provider.ec2] section".into());
        }
        Ok(())
    }

    /// The data directory: the setting, else `$XDG_DATA_HOME/berth`, else
    /// `~/.local/share/berth`.
    pub fn data_dir(&self) -> PathBuf {
        default_data_dir(self.data_dir.as_deref())
    }

    /// The database URL: the setting, else `<data-dir>/berth.db`.
    pub fn database_url(&self) -> String {
        self.database_url
            .clone()
            .unwrap_or_else(|| self.data_dir().join("berth.db").display().to_string())
    }
}

/// The data directory as the CLI and the server agree on it: `explicit`,
/// else `$BERTH_DATA_DIR`, else `$XDG_DATA_HOME/berth`, else
/// `~/.local/share/berth`.
pub fn default_data_dir(explicit: Option<&Path>) -> PathBuf {
    if let Some(dir) = explicit {
        return dir.to_path_buf();
    }
    if let Some(dir) = std::env::var_os("BERTH_DATA_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("berth");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".local").join("share").join("berth")
}

/// The setting a `BERTH_*` variable names, as a path of keys.
fn env_path(name: &str) -> Option<Vec<String>> {
    if NOT_SETTINGS.contains(&name) {
        return None;
    }
    if let Some((_, key)) = SHORT_NAMES.iter().find(|(var, _)| *var == name) {
        return Some(vec![key.to_string()]);
    }
    let rest = name.strip_prefix("BERTH_")?;
    if !rest.contains("__") {
        return None;
    }
    Some(
        rest.split("__")
            .map(|part| part.to_ascii_lowercase())
            .collect(),
    )
}

/// The sections a `BERTH_SECTION__KEY` variable may name.
const SECTIONS: [&str; 5] = ["PROVIDER", "PROVISIONER", "API", "TLS", "MANUAL"];

/// For a variable that names a section and a key with one underscore
/// between them (`BERTH_PROVISIONER_WORKERS`, which would be ignored), the
/// name it was meant to have (`BERTH_PROVISIONER__WORKERS`).
fn one_underscore_short(name: &str) -> Option<String> {
    let rest = name.strip_prefix("BERTH_")?;
    if rest.contains("__") || NOT_SETTINGS.contains(&name) {
        return None;
    }
    let (section, key) = SECTIONS.iter().find_map(|section| {
        let key = rest.strip_prefix(section)?.strip_prefix('_')?;
        (!key.is_empty()).then_some((section, key))
    })?;
    Some(format!("BERTH_{section}__{key}"))
}

/// A variable's value: TOML if it parses as a TOML value, else a string.
fn env_value(raw: &str) -> toml::Value {
    format!("value = {raw}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("value"))
        .unwrap_or_else(|| toml::Value::String(raw.to_string()))
}

fn set_path(table: &mut toml::Table, path: &[String], value: toml::Value) -> Result<(), String> {
    let Some((last, parents)) = path.split_last() else {
        return Err("empty setting name".into());
    };
    let mut current = table;
    for key in parents {
        let entry = current
            .entry(key.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        current = entry
            .as_table_mut()
            .ok_or_else(|| format!("{key} is not a section"))?;
    }
    current.insert(last.clone(), value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn file(text: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), text).unwrap();
        file
    }

    #[test]
    fn provider_limits_replace_the_defaults_they_name() {
        let f = file(
            "[provider.limits]\nlaunch = { burst = 200, per_second = 50.0 }\ninstances = { burst = 20, per_second = 0.5 }\n",
        );
        let config = Config::load(Some(f.path()), env(&[])).unwrap();
        let limits = config.provider.limits.over(RateLimits::ec2());
        let bucket = |capacity, per_second| {
            Some(Bucket {
                capacity,
                per_second,
            })
        };
        assert_eq!(limits.launch, bucket(200.0, 50.0));
        assert_eq!(limits.instances, bucket(20.0, 0.5));
        assert_eq!(limits.terminate, RateLimits::ec2().terminate);
        assert_eq!(limits.describe, RateLimits::ec2().describe);
        assert_eq!(
            Config::default()
                .provider
                .limits
                .over(RateLimits::default()),
            RateLimits::default()
        );
        let from_env = Config::load(
            None,
            env(&[
                ("BERTH_PROVIDER__LIMITS__DESCRIBE__BURST", "7"),
                ("BERTH_PROVIDER__LIMITS__DESCRIBE__PER_SECOND", "1.5"),
            ]),
        )
        .unwrap();
        assert_eq!(
            from_env
                .provider
                .limits
                .over(RateLimits::default())
                .describe,
            bucket(7.0, 1.5)
        );
    }

    #[test]
    fn provider_limits_that_cannot_work_are_refused() {
        for (text, message) in [
            (
                "launch = { burst = 0, per_second = 1.0 }",
                "provider.limits.launch.burst is 0: expected 1 to 1000000",
            ),
            (
                "terminate = { burst = 2000000, per_second = 1.0 }",
                "provider.limits.terminate.burst is 2000000: expected 1 to 1000000",
            ),
            (
                "instances = { burst = 5, per_second = 0.0 }",
                "provider.limits.instances.per_second is 0: expected a number of at least 0.001",
            ),
            (
                "describe = { burst = 5, per_second = nan }",
                "provider.limits.describe.per_second is NaN: expected a number of at least 0.001",
            ),
            ("launch = { burst = 5 }", "missing field `per_second`"),
            (
                "launch = { burst = 5, per_second = 1.0, extra = 1 }",
                "unknown field `extra`",
            ),
            (
                "runs = { burst = 5, per_second = 1.0 }",
                "unknown field `runs`",
            ),
        ] {
            let f = file(&format!("[provider.limits]\n{text}\n"));
            let error = Config::load(Some(f.path()), env(&[]))
                .unwrap_err()
                .to_string();
            assert!(error.contains(message), "{text}: {error}");
        }
    }

    #[test]
    fn a_plain_http_controller_url_is_refused_when_the_controller_serves_https() {
        let e = Config::load(
            None,
            env(&[
                ("BERTH_LISTEN", "0.0.0.0:17070"),
                ("BERTH_CONTROLLER_URL", "http://controller.invalid:17070"),
            ]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("controller_url \"http://controller.invalid:17070\" is plain HTTP"),
            "{e}"
        );
        for (listen, url, tls) in [
            ("0.0.0.0:17070", "https://controller.invalid:17070", "true"),
            (
                "127.0.0.1:17070",
                "http://controller.invalid:17070",
                "false",
            ),
        ] {
            Config::load(
                None,
                env(&[
                    ("BERTH_LISTEN", listen),
                    ("BERTH_CONTROLLER_URL", url),
                    ("BERTH_TLS__ENABLED", tls),
                ]),
            )
            .unwrap_or_else(|e| panic!("{listen} {url}: {e}"));
        }
        let e = Config::load(
            None,
            env(&[
                ("BERTH_CONTROLLER_URL", "http://controller.invalid:17070"),
                ("BERTH_TLS__ENABLED", "true"),
            ]),
        )
        .unwrap_err();
        assert!(e.to_string().contains("use https://"), "{e}");
    }

    #[test]
    fn with_nothing_given_every_setting_has_its_default() {
        let config = Config::load(None, env(&[])).unwrap();
        assert_eq!(config, Config::default());
        assert_eq!(config.listen.to_string(), "127.0.0.1:17070");
        assert_eq!(config.provider.kind, ProviderKind::Sim);
        assert_eq!(config.provider.sim.zones, vec!["sim-a", "sim-b", "sim-c"]);
        assert_eq!(config.provisioner.workers, 16);
    }

    #[test]
    fn a_file_sets_what_it_names_and_leaves_the_rest() {
        let f = file(
            "listen = \"127.0.0.1:9999\"\n[provider]\nkind = \"sim\"\n[provider.sim]\nzones = [\"a\", \"b\"]\nfailure_rate = 0.25\n[provisioner]\nworkers = 4\nharvest_mode = \"destroyed\"\n",
        );
        let config = Config::load(Some(f.path()), env(&[])).unwrap();
        assert_eq!(config.listen.port(), 9999);
        assert_eq!(config.provider.sim.zones, vec!["a", "b"]);
        assert_eq!(config.provider.sim.failure_rate, 0.25);
        assert_eq!(config.provisioner.workers, 4);
        assert_eq!(config.provisioner.attempts, 10);
        assert_eq!(
            config.provisioner.harvest_mode,
            crate::engine::config::HarvestMode::Destroyed
        );
    }

    #[test]
    fn the_event_stream_limit_is_a_setting_and_zero_is_refused() {
        let f = file("[api]\nmax_event_streams = 500\n");
        let config = Config::load(Some(f.path()), env(&[])).unwrap();
        assert_eq!(config.api.max_event_streams, 500);
        let e = Config::load(None, env(&[("BERTH_API__MAX_EVENT_STREAMS", "0")])).unwrap_err();
        assert!(
            e.to_string()
                .contains("api.max_event_streams must be at least 1"),
            "{e}"
        );
        let e = Config::load(None, env(&[("BERTH_API__MAX_EVENT_STREAMS", "-3")])).unwrap_err();
        assert!(
            e.to_string().contains("BERTH_API__MAX_EVENT_STREAMS"),
            "{e}"
        );
    }

    #[test]
    fn environment_variables_override_the_file() {
        let f = file("[provisioner]\nworkers = 4\n");
        let config = Config::load(
            Some(f.path()),
            env(&[
                ("BERTH_PROVISIONER__WORKERS", "8"),
                ("BERTH_PROVIDER__SIM__FAILURE_RATE", "0.3"),
                ("BERTH_LISTEN", "127.0.0.1:1234"),
                ("BERTH_DATA_DIR", "/tmp/berth-test"),
                ("BERTH_URL", "http://ignored"),
                ("PATH", "/usr/bin"),
            ]),
        )
        .unwrap();
        assert_eq!(config.provisioner.workers, 8);
        assert_eq!(config.provider.sim.failure_rate, 0.3);
        assert_eq!(config.listen.port(), 1234);
        assert_eq!(config.data_dir(), PathBuf::from("/tmp/berth-test"));
        assert_eq!(config.database_url(), "/tmp/berth-test/berth.db");
    }

    #[test]
    fn an_unknown_setting_is_refused_by_name() {
        let f = file("[provisioner]\nwrokers = 4\n");
        let err = Config::load(Some(f.path()), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `wrokers`"), "{err}");
    }

    #[test]
    fn a_section_variable_with_one_underscore_is_refused_naming_the_one_meant() {
        let err = Config::load(None, env(&[("BERTH_PROVISIONER_WORKERS", "4")]))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "BERTH_PROVISIONER_WORKERS: BERTH_PROVISIONER_WORKERS is not a setting: a setting in \
             a section is named BERTH_SECTION__KEY, with two underscores between them \
             (BERTH_PROVISIONER__WORKERS)"
        );
        for name in [
            "BERTH_TLS_ENABLED",
            "BERTH_PROVIDER_KIND",
            "BERTH_API_MAX_EVENT_STREAMS",
        ] {
            assert!(Config::load(None, env(&[(name, "1")])).is_err(), "{name}");
        }
        // The command line's own variables, and others of berth's, are not
        // settings and are left alone.
        for name in [
            "BERTH_URL",
            "BERTH_TOKEN",
            "BERTH_AGENT_PASSWORD",
            "BERTH_TEST_POSTGRES_URL",
        ] {
            assert!(Config::load(None, env(&[(name, "x")])).is_ok(), "{name}");
        }
    }

    #[test]
    fn a_short_or_empty_webhook_secret_is_refused_without_showing_it() {
        for (secret, length) in [("", 0), ("   ", 0), ("s3cret", 6)] {
            let err = Config::load(None, env(&[("BERTH_WEBHOOK_SECRET", secret)]))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(&format!(
                    "webhook_secret has {length} characters: anyone could sign"
                )),
                "{err}"
            );
            if !secret.trim().is_empty() {
                assert!(!err.contains(secret), "{err}");
            }
        }
        let config =
            Config::load(None, env(&[("BERTH_WEBHOOK_SECRET", "sixteen-chars-ok")])).unwrap();
        assert_eq!(config.webhook_secret.as_deref(), Some("sixteen-chars-ok"));
    }

    #[test]
    fn real_agents_are_not_shown_down_between_their_heartbeats() {
        let ec2 = "[provider]\nkind = \"ec2\"\n[provider.ec2]\nregion = \"us-east-1\"\n";
        let f = file(&format!("{ec2}[provisioner]\nagent_down_after_s = 20\n"));
        let err = Config::load(Some(f.path()), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "provisioner.agent_down_after_s is 20: the machine agents report every 30 s"
            ),
            "{err}"
        );
        let f = file(&format!("{ec2}[provisioner]\nagent_down_after_s = 0\n"));
        assert!(Config::load(Some(f.path()), env(&[])).is_ok());
        let f = file(&format!("{ec2}[provisioner]\nagent_down_after_s = 41\n"));
        assert!(Config::load(Some(f.path()), env(&[])).is_ok());
    }

    #[test]
    fn limits_too_slow_to_pace_and_manual_timeouts_below_their_floor_are_refused() {
        let f = file("[provider.limits]\nlaunch = { burst = 1, per_second = 1e-20 }\n");
        let err = Config::load(Some(f.path()), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("provider.limits.launch.per_second is 0.00000000000000000001: expected a number of at least 0.001"),
            "{err}"
        );
        let f = file("[manual]\nsession_timeout_s = 5\n");
        let err = Config::load(Some(f.path()), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("manual.session_timeout_s is 5: it must be at least 10"),
            "{err}"
        );
        let f = file("[manual]\nconnect_timeout_s = 0\n");
        assert!(Config::load(Some(f.path()), env(&[])).is_err());
        let f = file("[provisioner]\nbootstrap_timeout_s = 0\n");
        let err = Config::load(Some(f.path()), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("provisioner.bootstrap_timeout_s must be at least 1"),
            "{err}"
        );
    }

    #[test]
    fn a_wrongly_typed_variable_names_the_variable() {
        let err = Config::load(None, env(&[("BERTH_PROVISIONER__WORKERS", "many")]))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("BERTH_PROVISIONER__WORKERS:"), "{err}");
    }

    #[test]
    fn settings_that_cannot_work_are_refused() {
        let err = Config::load(None, env(&[("BERTH_PROVISIONER__WORKERS", "0")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("provisioner.workers must be at least 1"),
            "{err}"
        );
        let f = file("[provider]\nkind = \"ec2\"\n");
        let err = Config::load(Some(f.path()), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("no [provider.ec2] section"), "{err}");
        let slow = env(&[("BERTH_PROVIDER__SIM__HEARTBEAT_INTERVAL_MS", "100000")]);
        let err = Config::load(None, slow).unwrap_err().to_string();
        assert!(
            err.contains("provider.sim.heartbeat_interval_ms is 100000")
                && err.contains("agent_down_after_s (120 s)"),
            "{err}"
        );
        // Just under three quarters of the default 120 s: accepted.
        let brisk = env(&[("BERTH_PROVIDER__SIM__HEARTBEAT_INTERVAL_MS", "89999")]);
        assert!(Config::load(None, brisk).is_ok());
    }

    #[test]
    fn a_secret_of_digits_is_a_string_and_a_wrong_type_is_refused_without_showing_it() {
        let digits = "1234567890123456";
        let config = Config::load(None, env(&[("BERTH_WEBHOOK_SECRET", digits)])).unwrap();
        assert_eq!(config.webhook_secret.as_deref(), Some(digits));
        let nested = env(&[
            ("BERTH_WEBHOOK_SECRET", "9876543210987654"),
            ("BERTH_DATA_DIR", "42"),
        ]);
        let config = Config::load(None, nested).unwrap();
        assert_eq!(config.data_dir, Some(PathBuf::from("42")));
        let f = file("webhook_secret = 24681357\n");
        let err = Config::load(Some(f.path()), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("webhook_secret must be a string"), "{err}");
        assert!(!err.contains("24681357"), "the secret is shown: {err}");
    }

    #[test]
    fn a_missing_file_is_named() {
        let err = Config::load(Some(Path::new("/nonexistent/berth.toml")), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("cannot read /nonexistent/berth.toml"),
            "{err}"
        );
    }

    #[test]
    fn environment_values_are_toml_when_they_parse_and_strings_otherwise() {
        assert_eq!(env_value("4"), toml::Value::Integer(4));
        assert_eq!(env_value("true"), toml::Value::Boolean(true));
        assert_eq!(
            env_value("[\"a\", \"b\"]").as_array().map(Vec::len),
            Some(2)
        );
        assert_eq!(env_value("sim"), toml::Value::String("sim".into()));
        assert_eq!(
            env_value("127.0.0.1:80"),
            toml::Value::String("127.0.0.1:80".into())
        );
    }

    /// Settings by section, as a configuration file names them.
    const SETTINGS: [(&str, &[&str]); 10] = [
        (
            "",
            &[
                "listen",
                "data_dir",
                "database_url",
                "controller_url",
                "webhook_secret",
            ],
        ),
        ("provider", &["kind"]),
        ("provider.limits.launch", &["burst", "per_second"]),
        ("provider.limits.instances", &["burst", "per_second"]),
        ("provider.limits.terminate", &["burst", "per_second"]),
        ("provider.limits.describe", &["burst", "per_second"]),
        (
            "provider.sim",
            &[
                "zones",
                "catalogue",
                "start_delay_ms",
                "agent_delay_ms",
                "failure_rate",
                "seed",
                "capacity",
                "outages",
                "heartbeat_interval_ms",
                "launch_batch",
            ],
        ),
        (
            "provider.ec2",
            &[
                "region",
                "endpoint_url",
                "subnet_ids",
                "subnet_id",
                "security_group_ids",
                "key_name",
                "agent_binary_url",
                "image_has_agent",
                "images",
            ],
        ),
        (
            "provisioner",
            &[
                "workers",
                "attempts",
                "backoff_initial_ms",
                "backoff_max_ms",
                "bootstrap_timeout_s",
                "bootstrap_attempts",
                "harvest_mode",
                "call_timeout_s",
                "reconcile_interval_s",
                "agent_down_after_s",
                "max_machine_actors",
            ],
        ),
        ("api", &["max_event_streams"]),
    ];

    /// A TOML value of any kind, with the edges numbers and strings have.
    fn toml_value() -> impl Strategy<Value = String> {
        let scalar = prop_oneof![
            any::<i64>().prop_map(|n| n.to_string()),
            Just("0".to_string()),
            Just("-1".to_string()),
            any::<f64>().prop_map(|f| format!("{f:?}")),
            Just("nan".to_string()),
            Just("-inf".to_string()),
            any::<bool>().prop_map(|b| b.to_string()),
            "\\PC{0,12}".prop_map(|s| format!("{s:?}")),
            Just("\"sim\"".to_string()),
            Just("\"ec2\"".to_string()),
            Just("\"127.0.0.1:0\"".to_string()),
            Just("\"http://controller.invalid\"".to_string()),
        ];
        prop_oneof![
            4 => scalar.clone(),
            1 => proptest::collection::vec(scalar.clone(), 0..4)
                .prop_map(|v| format!("[{}]", v.join(", "))),
            1 => proptest::collection::vec(("[a-z-]{1,6}", scalar), 0..3).prop_map(|v| {
                let pairs: Vec<String> =
                    v.iter().map(|(k, x)| format!("\"{k}\" = {x}")).collect();
                format!("{{ {} }}", pairs.join(", "))
            }),
        ]
    }

    /// A configuration file of known and unknown settings, right and wrong.
    fn config_text() -> impl Strategy<Value = String> {
        let line = (
            0..SETTINGS.len(),
            any::<prop::sample::Index>(),
            toml_value(),
        )
            .prop_map(|(section, key, value)| {
                let (name, keys) = SETTINGS[section];
                (name, format!("{} = {value}", key.get(keys)))
            });
        proptest::collection::vec(line, 0..8).prop_map(|lines| {
            let mut sections: std::collections::BTreeMap<&str, Vec<String>> =
                std::collections::BTreeMap::new();
            for (section, line) in lines {
                sections.entry(section).or_default().push(line);
            }
            let mut text = String::new();
            for (section, lines) in sections {
                if !section.is_empty() {
                    text.push_str(&format!("[{section}]\n"));
                }
                for line in lines {
                    text.push_str(&line);
                    text.push('\n');
                }
            }
            text
        })
    }

    /// What berth does with a configuration it accepted: the EC2 section
    /// is parsed too, and the derived paths computed.
    fn use_config(config: &Config) {
        let _ = config.database_url();
        let _ = config.provider.limits.over(RateLimits::ec2());
        #[cfg(feature = "ec2")]
        if let Some(table) = &config.provider.ec2 {
            let _ = crate::providers::ec2::Ec2Config::from_table(table);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn any_configuration_file_is_accepted_or_refused_without_panicking(text in config_text()) {
            let f = file(&text);
            if let Ok(config) = Config::load(Some(f.path()), env(&[])) {
                use_config(&config);
            }
        }

        #[test]
        fn arbitrary_text_as_a_configuration_file_never_panics(text in "\\PC{0,200}") {
            let f = file(&text);
            let _ = Config::load(Some(f.path()), env(&[]));
        }

        #[test]
        fn any_environment_is_accepted_or_refused_without_panicking(
            vars in proptest::collection::vec(
                (
                    prop_oneof![
                        "BERTH_[A-Z_]{0,30}",
                        Just("BERTH_PROVISIONER__WORKERS".to_string()),
                        Just("BERTH_PROVIDER__SIM__FAILURE_RATE".to_string()),
                        Just("BERTH_PROVIDER__KIND".to_string()),
                        Just("BERTH_LISTEN".to_string()),
                        Just("BERTH_API__MAX_EVENT_STREAMS".to_string()),
                    ],
                    prop_oneof![toml_value(), "\\PC{0,16}"],
                ),
                0..5,
            )
        ) {
            if let Ok(config) = Config::load(None, vars) {
                use_config(&config);
            }
        }
    }
}

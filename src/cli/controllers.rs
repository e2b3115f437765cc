//! Saved controllers, as Juju keeps `controllers.yaml`: `berth login`
//! checks that a controller answers with the token given, then keeps its
//! URL, token and (for an `https://` controller with its own CA) CA
//! certificate in `controllers.toml` in the user's configuration
//! directory (`$XDG_CONFIG_HOME/berth`, else `~/.config/berth`; the file
//! readable by its owner only). Later commands talk to the current one
//! without flags; `berth controllers` lists them and `berth switch` picks
//! one. `--url`, `--token` and `BERTH_URL` / `BERTH_TOKEN` still win.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use serde::{Deserialize, Serialize};

use crate::cli::client::{Client, TrustedCa};
use crate::cli::error::CliError;
use crate::cli::{token, Io, DEFAULT_URL};

/// The file, in the configuration directory, that holds the saved
/// controllers.
pub const CONTROLLERS_FILE: &str = "controllers.toml";

/// The longest controller name.
const MAX_NAME_LEN: usize = 64;

/// The user's configuration directory for berth: `$XDG_CONFIG_HOME/berth`,
/// else `~/.config/berth`.
pub fn config_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")))
        .unwrap_or_else(|| PathBuf::from(".config"));
    base.join("berth")
}

/// Where the saved controllers are kept.
pub fn controllers_path() -> PathBuf {
    config_dir().join(CONTROLLERS_FILE)
}

/// The saved controllers and which one is current.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Controllers {
    /// The controller commands use when no URL is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<String>,
    /// By name.
    #[serde(default)]
    pub controllers: BTreeMap<String, SavedController>,
}

/// One saved controller.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedController {
    /// `http://host:port`.
    pub url: String,
    /// The admin token.
    pub token: String,
    /// The PEM CA certificate an `https://` controller is verified with,
    /// when it was given or found at login.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_cert: Option<String>,
}

impl std::fmt::Debug for SavedController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SavedController")
            .field("url", &self.url)
            .field("token", &"<redacted>")
            .field("ca_cert", &self.ca_cert.is_some())
            .finish()
    }
}

impl Controllers {
    /// Reads `path`; a missing file is no controllers.
    ///
    /// # Errors
    ///
    /// [`CliError::File`] naming the file when it cannot be read or is not
    /// what `berth login` writes, or names a current controller it does not
    /// hold.
    pub fn load(path: &Path) -> Result<Controllers, CliError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Controllers::default()),
            Err(e) => {
                return Err(CliError::File(format!(
                    "cannot read {}: {e}",
                    path.display()
                )))
            }
        };
        let bad = |why: String| {
            CliError::File(format!(
                "{} is not a saved-controllers file ({why}); fix it or remove it and run 'berth login' again",
                path.display()
            ))
        };
        let controllers: Controllers = toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
        if let Some(current) = &controllers.current {
            if !controllers.controllers.contains_key(current) {
                return Err(bad(format!(
                    "the current controller {current:?} is not in it"
                )));
            }
        }
        Ok(controllers)
    }

    /// Writes the controllers to `path`, readable by its owner only, in
    /// its directory (created readable by its owner only); the old file is
    /// replaced whole, never half-written.
    ///
    /// # Errors
    ///
    /// [`CliError::File`] naming what could not be written.
    pub fn save(&self, path: &Path) -> Result<(), CliError> {
        let failed = |what: &Path, e: std::io::Error| {
            CliError::File(format!("cannot write {}: {e}", what.display()))
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        create_private_dir(dir).map_err(|e| failed(dir, e))?;
        let text = toml::to_string(self)
            .map_err(|e| CliError::File(format!("cannot write {}: {e}", path.display())))?;
        let partial = path.with_extension("toml.partial");
        write_private(&partial, text.as_bytes()).map_err(|e| failed(&partial, e))?;
        std::fs::rename(&partial, path).map_err(|e| failed(path, e))
    }

    /// The current controller, with its name.
    pub fn current(&self) -> Option<(&str, &SavedController)> {
        let name = self.current.as_deref()?;
        self.controllers.get(name).map(|saved| (name, saved))
    }

    /// The saved controller at `url`, if one is.
    pub fn at_url(&self, url: &str) -> Option<&SavedController> {
        let url = normalize_url(url);
        self.controllers
            .values()
            .find(|saved| normalize_url(&saved.url) == url)
    }
}

fn normalize_url(url: &str) -> &str {
    url.trim().trim_end_matches('/')
}

/// Whether any address of `url` (one, or several separated by commas, as
/// `--url` takes them) is reached over HTTPS, so that a CA certificate is
/// wanted for it.
pub fn names_https(url: &str) -> bool {
    url.split(',').any(|one| one.trim().starts_with("https://"))
}

/// Refuses a CA certificate given for `url` when no address in it is
/// `https://`: over plain HTTP it would verify nothing, and a user who gave
/// it would think the controller verified.
///
/// # Errors
///
/// [`CliError::Usage`] naming the certificate and the URL.
pub fn ca_cert_used(url: &str, ca_cert: Option<&Path>) -> Result<(), CliError> {
    match ca_cert {
        Some(ca) if !names_https(url) => Err(CliError::Usage(format!(
            "the CA certificate {} (--ca-cert or BERTH_CA_CERT) verifies https:// controllers, \
             and {url} is plain HTTP: give the controller's https:// URL, or leave the CA out",
            ca.display()
        ))),
        _ => Ok(()),
    }
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    // A file left by an older, laxer write keeps its mode on open: set it.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    file.write_all(bytes)?;
    file.sync_all()
}

/// Checks a controller name: letters, digits, `.`, `_` and `-`, starting
/// with a letter or digit, at most 64 characters.
///
/// # Errors
///
/// [`CliError::Usage`] saying what a name may hold.
pub fn check_name(name: &str) -> Result<(), CliError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(CliError::Usage(format!(
            "invalid controller name {name:?}: expected letters, digits, '.', '_' and '-', \
             starting with a letter or digit, at most {MAX_NAME_LEN} characters"
        )))
    }
}

/// The name a controller is saved under when none is given: its host and
/// port (`127.0.0.1-17070`).
pub fn default_name(url: &str) -> String {
    let rest = normalize_url(url)
        .split_once("://")
        .map_or(url, |(_, rest)| rest);
    let authority = rest.split('/').next().unwrap_or(rest);
    let mut name = String::with_capacity(authority.len());
    for c in authority.chars() {
        let c = if c.is_ascii_alphanumeric() || c == '.' {
            c
        } else {
            '-'
        };
        // One dash for a run of other characters (`[::1]:80` is `1-80`).
        if c != '-' || !name.ends_with('-') {
            name.push(c);
        }
    }
    name.trim_matches('-').to_string()
}

/// Where a command's controller comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub url: String,
    /// The token to use ahead of the data directory's file.
    pub token: Option<String>,
    /// What `berth login` kept of the certificate to verify it with.
    pub saved_ca: SavedCa,
}

/// What `berth login` kept of the CA a controller is verified with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SavedCa {
    /// The controller is not saved.
    NotSaved,
    /// Saved without a CA: it verified with the public roots, and is
    /// verified with them from then on.
    PublicRoots,
    /// Saved with this CA certificate (PEM).
    Pem(String),
}

impl SavedCa {
    fn of(saved: Option<&SavedController>) -> SavedCa {
        match saved {
            None => SavedCa::NotSaved,
            Some(SavedController {
                ca_cert: Some(pem), ..
            }) => SavedCa::Pem(pem.clone()),
            Some(_) => SavedCa::PublicRoots,
        }
    }
}

/// The controller a command talks to: `--url` / `BERTH_URL` when given
/// (with the token saved for that URL, if any), else the current saved
/// controller, else the local default. `--token` / `BERTH_TOKEN` wins
/// over a saved token.
///
/// # Errors
///
/// [`CliError::File`] when the saved controllers are needed and cannot be
/// read.
pub fn resolve(
    url: Option<&str>,
    token: Option<&str>,
    controllers_file: &Path,
) -> Result<Target, CliError> {
    let given_token = token
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    if let Some(url) = url {
        // The saved controllers are only read when a URL needs them.
        let saved = if names_https(url) || given_token.is_none() {
            Controllers::load(controllers_file)?.at_url(url).cloned()
        } else {
            None
        };
        return Ok(Target {
            url: url.to_string(),
            token: given_token.or_else(|| saved.as_ref().map(|saved| saved.token.clone())),
            saved_ca: SavedCa::of(saved.as_ref()),
        });
    }
    let controllers = Controllers::load(controllers_file)?;
    Ok(match controllers.current() {
        Some((_, saved)) => Target {
            url: saved.url.clone(),
            token: given_token.or_else(|| Some(saved.token.clone())),
            saved_ca: SavedCa::of(Some(saved)),
        },
        None => Target {
            url: DEFAULT_URL.to_string(),
            token: given_token,
            saved_ca: SavedCa::NotSaved,
        },
    })
}

/// The CA certificate an `https://` controller is verified with: the one
/// given (`--ca-cert` / `BERTH_CA_CERT`), else what `berth login` saved
/// with the controller (its CA, or the public roots it was verified
/// with), else for a controller not saved the data directory's `ca.crt`
/// (the local controller's own CA) when there is one; `None`: the public
/// roots.
///
/// # Errors
///
/// [`CliError::File`] when the given file cannot be read.
pub fn trusted_ca(
    given: Option<&Path>,
    saved: &SavedCa,
    data_dir: &Path,
) -> Result<Option<TrustedCa>, CliError> {
    if let Some(path) = given {
        return TrustedCa::read(path, "--ca-cert").map(Some);
    }
    match saved {
        SavedCa::Pem(pem) => {
            return Ok(Some(TrustedCa {
                pem: pem.as_bytes().to_vec(),
                origin: "the CA certificate saved by 'berth login'".into(),
            }))
        }
        SavedCa::PublicRoots => return Ok(None),
        SavedCa::NotSaved => {}
    }
    let local = data_dir.join(crate::tls::CA_CERT_FILE);
    if local.is_file() {
        return TrustedCa::read(&local, "the data directory's").map(Some);
    }
    Ok(None)
}

/// `berth login`.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct LoginArgs {
    /// The controller's address: http://host:port or https://host:port
    /// (with --ca-cert FILE when its certificate is from its own CA).
    #[arg(value_name = "URL")]
    pub controller_url: String,
    /// The name to save it under (default: its host and port).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
}

/// `berth switch`.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct SwitchArgs {
    /// A saved controller's name.
    #[arg(value_name = "NAME")]
    pub name: String,
}

/// Checks that the controller at `args.controller_url` answers `token`
/// (else the data directory's admin token), then saves it and makes it
/// current. Nothing is saved when the check fails.
///
/// # Errors
///
/// A bad name or URL, no token, the controller unreachable or refusing
/// the token, a name already saved for another URL, or the file.
pub fn login(
    args: &LoginArgs,
    token: Option<&str>,
    ca_cert: Option<&Path>,
    data_dir: &Path,
    controllers_file: &Path,
    io: &mut Io<'_>,
) -> Result<(), CliError> {
    let url = normalize_url(&args.controller_url).to_string();
    let name = args.name.clone().unwrap_or_else(|| default_name(&url));
    check_name(&name)?;
    ca_cert_used(&url, ca_cert)?;
    crate::cli::client::check_url(&url)?;
    let token = token::discover(token, data_dir)?;
    let ca = if names_https(&url) {
        trusted_ca(ca_cert, &SavedCa::NotSaved, data_dir)?
    } else {
        None
    };
    let client = Client::with_ca(&url, Some(token.clone()), ca.as_ref())?;
    let status: serde_json::Value = client.get("/v1/status")?;
    let uuid = status["model"]["controller"]
        .as_str()
        .ok_or_else(|| CliError::Protocol {
            url: url.clone(),
            reason: "its status names no controller".into(),
        })?
        .to_string();
    let mut controllers = Controllers::load(controllers_file)?;
    if let Some(existing) = controllers.controllers.get(&name) {
        if normalize_url(&existing.url) != url {
            return Err(CliError::Usage(format!(
                "a controller named {name:?} is saved for {}: choose another name with --name",
                existing.url
            )));
        }
    }
    controllers.controllers.insert(
        name.clone(),
        SavedController {
            url: url.clone(),
            token,
            ca_cert: ca.map(|ca| String::from_utf8_lossy(&ca.pem).into_owned()),
        },
    );
    controllers.current = Some(name.clone());
    controllers.save(controllers_file)?;
    writeln!(
        io.out,
        "logged in to {name} at {url} (controller {uuid}); it is now the current controller"
    )?;
    Ok(())
}

/// Lists the saved controllers, the current one marked `*`.
///
/// # Errors
///
/// The file cannot be read, or output cannot be written.
pub fn list(controllers_file: &Path, io: &mut Io<'_>) -> Result<(), CliError> {
    let controllers = Controllers::load(controllers_file)?;
    if controllers.controllers.is_empty() {
        writeln!(
            io.out,
            "no saved controllers: add one with 'berth login URL --token TOKEN'"
        )?;
        return Ok(());
    }
    let names: Vec<String> = controllers
        .controllers
        .keys()
        .map(|name| {
            let current = controllers.current.as_deref() == Some(name.as_str());
            format!("{name}{}", if current { "*" } else { "" })
        })
        .collect();
    let width = names
        .iter()
        .map(String::len)
        .max()
        .unwrap_or(0)
        .max("Controller".len());
    writeln!(io.out, "{:<width$}  URL", "Controller")?;
    for (name, saved) in names.iter().zip(controllers.controllers.values()) {
        writeln!(io.out, "{name:<width$}  {}", saved.url)?;
    }
    Ok(())
}

/// Makes `args.name` the current controller.
///
/// # Errors
///
/// [`CliError::Usage`] for a name that is not saved (naming those that
/// are); the file.
pub fn switch(args: &SwitchArgs, controllers_file: &Path, io: &mut Io<'_>) -> Result<(), CliError> {
    let mut controllers = Controllers::load(controllers_file)?;
    let Some(saved) = controllers.controllers.get(&args.name) else {
        let known: Vec<&str> = controllers.controllers.keys().map(String::as_str).collect();
        return Err(CliError::Usage(if known.is_empty() {
            format!(
                "no controller named {:?}: none is saved; add one with 'berth login'",
                args.name
            )
        } else {
            format!(
                "no controller named {:?}: expected one of {}",
                args.name,
                known.join(", ")
            )
        }));
    };
    let url = saved.url.clone();
    controllers.current = Some(args.name.clone());
    controllers.save(controllers_file)?;
    writeln!(io.out, "current controller: {} at {url}", args.name)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn saved(url: &str, token: &str) -> SavedController {
        SavedController {
            url: url.to_string(),
            token: token.to_string(),
            ca_cert: None,
        }
    }

    fn two() -> Controllers {
        Controllers {
            current: Some("b".into()),
            controllers: BTreeMap::from([
                ("a".to_string(), saved("http://127.0.0.1:1001", "token-a")),
                ("b".to_string(), saved("http://127.0.0.1:1002", "token-b")),
            ]),
        }
    }

    #[test]
    fn saved_controllers_round_trip_and_only_their_owner_can_read_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config/berth").join(CONTROLLERS_FILE);
        two().save(&path).unwrap();
        assert_eq!(Controllers::load(&path).unwrap(), two());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&path), 0o600);
            assert_eq!(mode(path.parent().unwrap()), 0o700);
        }
        assert!(!path.with_extension("toml.partial").exists());
    }

    #[test]
    fn a_missing_file_is_no_controllers_and_a_bad_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CONTROLLERS_FILE);
        assert_eq!(Controllers::load(&path).unwrap(), Controllers::default());
        for bad in [
            "current = 3",
            "[controllers.a]\nurl = \"http://h:1\"\n",
            "current = \"x\"\n[controllers.a]\nurl = \"http://h:1\"\ntoken = \"t\"\n",
            "not toml at all [",
        ] {
            std::fs::write(&path, bad).unwrap();
            let e = Controllers::load(&path).unwrap_err().to_string();
            assert!(e.contains("is not a saved-controllers file"), "{bad}: {e}");
            assert!(e.contains(&path.display().to_string()), "{e}");
        }
    }

    #[test]
    fn flags_win_then_the_current_controller_then_the_local_default() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CONTROLLERS_FILE);
        let target = |url: Option<&str>, token: Option<&str>| resolve(url, token, &path).unwrap();
        // Nothing saved: the local default, the token only if given.
        assert_eq!(
            target(None, None),
            Target {
                url: DEFAULT_URL.into(),
                token: None,
                saved_ca: SavedCa::NotSaved
            }
        );
        two().save(&path).unwrap();
        // The current controller, with its token unless one is given.
        assert_eq!(
            target(None, None),
            Target {
                url: "http://127.0.0.1:1002".into(),
                token: Some("token-b".into()),
                saved_ca: SavedCa::PublicRoots
            }
        );
        assert_eq!(target(None, Some("given")).token.as_deref(), Some("given"));
        // A URL given: the token saved for that URL, else none.
        assert_eq!(
            target(Some("http://127.0.0.1:1001/"), None),
            Target {
                url: "http://127.0.0.1:1001/".into(),
                token: Some("token-a".into()),
                saved_ca: SavedCa::PublicRoots
            }
        );
        assert_eq!(
            target(Some("http://127.0.0.1:9"), None),
            Target {
                url: "http://127.0.0.1:9".into(),
                token: None,
                saved_ca: SavedCa::NotSaved
            }
        );
        assert_eq!(
            target(Some("http://127.0.0.1:1001"), Some(" given "))
                .token
                .as_deref(),
            Some("given")
        );
    }

    #[test]
    fn the_ca_given_wins_then_the_saved_one_then_the_data_directorys() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        // Nothing anywhere: the public roots.
        let not_saved = &SavedCa::NotSaved;
        assert_eq!(trusted_ca(None, not_saved, &data).unwrap(), None);
        std::fs::write(data.join(crate::tls::CA_CERT_FILE), "local").unwrap();
        let local = trusted_ca(None, not_saved, &data).unwrap().unwrap();
        assert_eq!(local.pem, b"local");
        assert!(
            local.origin.starts_with("the data directory's"),
            "{}",
            local.origin
        );
        let saved_pem = &SavedCa::Pem("saved".into());
        let saved = trusted_ca(None, saved_pem, &data).unwrap().unwrap();
        assert_eq!(saved.pem, b"saved");
        // Saved without a CA: the public roots it was verified with, not a
        // data directory's CA that appeared since.
        assert_eq!(
            trusted_ca(None, &SavedCa::PublicRoots, &data).unwrap(),
            None
        );
        let file = dir.path().join("given.pem");
        std::fs::write(&file, "given").unwrap();
        let given = trusted_ca(Some(&file), saved_pem, &data).unwrap().unwrap();
        assert_eq!(given.pem, b"given");
        assert_eq!(given.origin, format!("--ca-cert {}", file.display()));
        let missing =
            trusted_ca(Some(&dir.path().join("missing.pem")), not_saved, &data).unwrap_err();
        assert!(
            missing
                .to_string()
                .starts_with("cannot read the CA certificate"),
            "{missing}"
        );
    }

    #[test]
    fn a_saved_ca_comes_with_its_controller() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CONTROLLERS_FILE);
        let mut controllers = two();
        controllers.controllers.insert(
            "tls".into(),
            SavedController {
                url: "https://controller.invalid:17070".into(),
                token: "token-t".into(),
                ca_cert: Some("PEM".into()),
            },
        );
        controllers.save(&path).unwrap();
        let by_url = resolve(
            Some("https://controller.invalid:17070/"),
            Some("given"),
            &path,
        )
        .unwrap();
        assert_eq!(by_url.saved_ca, SavedCa::Pem("PEM".into()));
        assert_eq!(by_url.token.as_deref(), Some("given"));
        controllers.current = Some("tls".into());
        controllers.save(&path).unwrap();
        let current = resolve(None, None, &path).unwrap();
        assert_eq!(current.saved_ca, SavedCa::Pem("PEM".into()));
        assert_eq!(Controllers::load(&path).unwrap(), controllers);
    }

    #[test]
    fn names_are_checked_and_default_to_host_and_port() {
        for good in ["prod", "127.0.0.1-17070", "a_b.c-d", "X1"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "-x", "a b", "a/b", "ü", &"x".repeat(65)] {
            let e = check_name(bad).unwrap_err().to_string();
            assert!(e.starts_with("invalid controller name"), "{e}");
        }
        assert_eq!(default_name("http://127.0.0.1:17070"), "127.0.0.1-17070");
        assert_eq!(
            default_name("http://controller.invalid:8/"),
            "controller.invalid-8"
        );
        assert_eq!(default_name("http://[::1]:17070"), "1-17070");
    }

    #[test]
    fn a_bad_url_is_refused_before_the_token_is_looked_for() {
        // No token anywhere: a good URL would be refused for that.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CONTROLLERS_FILE);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut io = Io {
            out: &mut out,
            err: &mut err,
            tty: false,
        };
        let args = LoginArgs {
            controller_url: "127.0.0.1:17070".into(),
            name: Some("local".into()),
        };
        let refused = login(&args, None, None, dir.path(), &path, &mut io).unwrap_err();
        assert_eq!(refused.exit_code(), 2, "{refused}");
        assert!(
            refused.to_string().starts_with("invalid controller URL"),
            "{refused}"
        );
        let mut session = crate::cli::Session::new("127.0.0.1:17070", None, dir.path().into());
        let refused = session.client().unwrap_err();
        assert_eq!(refused.exit_code(), 2, "{refused}");
        assert!(
            refused.to_string().starts_with("invalid controller URL"),
            "{refused}"
        );
        assert!(!path.exists(), "nothing saved");
    }

    #[test]
    fn switch_picks_a_saved_controller_and_names_the_others_when_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CONTROLLERS_FILE);
        two().save(&path).unwrap();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut io = Io {
            out: &mut out,
            err: &mut err,
            tty: false,
        };
        switch(&SwitchArgs { name: "a".into() }, &path, &mut io).unwrap();
        assert_eq!(
            Controllers::load(&path).unwrap().current.as_deref(),
            Some("a")
        );
        let e = switch(&SwitchArgs { name: "c".into() }, &path, &mut io).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no controller named \"c\": expected one of a, b"
        );
        assert_eq!(
            Controllers::load(&path).unwrap().current.as_deref(),
            Some("a")
        );
        list(&path, &mut io).unwrap();
        let printed = String::from_utf8(out).unwrap();
        assert!(
            printed.contains("a*          http://127.0.0.1:1001"),
            "{printed}"
        );
        assert!(
            printed.contains("b           http://127.0.0.1:1002"),
            "{printed}"
        );
    }

    #[test]
    fn the_token_never_shows_in_debug_output() {
        let shown = format!("{:?}", saved("http://h:1", "secret-token"));
        assert!(!shown.contains("secret-token"), "{shown}");
    }
}

//! `[provider.ec2]`: where the EC2 provider launches, and from which
//! images.
//!
//! ```toml
//! [provider.ec2]
//! region = "us-east-1"
//! endpoint_url = "http://127.0.0.1:5000"   # optional: moto, LocalStack, a VPC endpoint
//! subnet_ids = ["subnet-0a1b2c3d"]          # optional: at most one per zone
//! security_group_ids = ["sg-0a1b2c3d"]      # optional
//! key_name = "ops"                          # optional
//! agent_binary_url = "https://example.com/berth"  # where instances download berth
//! image_has_agent = false                   # or: the images carry /usr/local/bin/berth
//! price_list = "/srv/aws/AmazonEC2-us-east-1.csv"  # optional: AWS's offer file, for today's prices
//!
//! [provider.ec2.images]                     # optional: else looked up
//! "ubuntu@22.04/amd64" = "ami-0123456789abcdef0"
//!
//! [provider.ec2.image_lookup]               # optional: these are the defaults
//! owner = "099720109477"
//! name_pattern = "ubuntu/images/hvm-ssd*/ubuntu-{series}-{version}-{arch}-server-*"
//! ```
//!
//! [`Ec2Config::from_table`] parses the section once; what it returns is
//! valid, so the provider never checks it again.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

use crate::domain::base::Base;
use crate::domain::constraints::Arch;
use crate::domain::instance_types::HourlyPrice;
use crate::providers::ec2::prices::{read_price_list, PriceListError};

/// Canonical's AWS account: the owner of the official Ubuntu images.
pub const CANONICAL_OWNER: &str = "099720109477";

/// The name of Canonical's Ubuntu server images, with `{series}` (`jammy`),
/// `{version}` (`22.04`) and `{arch}` (`amd64`) to fill in; `*` is EC2's
/// wildcard.
pub const UBUNTU_NAME_PATTERN: &str =
    "ubuntu/images/hvm-ssd*/ubuntu-{series}-{version}-{arch}-server-*";

/// `[provider.ec2]`, as written.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    region: String,
    #[serde(default)]
    endpoint_url: Option<String>,
    #[serde(default)]
    subnet_id: Option<String>,
    #[serde(default)]
    subnet_ids: Vec<String>,
    #[serde(default)]
    security_group_ids: Vec<String>,
    #[serde(default)]
    key_name: Option<String>,
    #[serde(default)]
    agent_binary_url: Option<String>,
    #[serde(default)]
    image_has_agent: bool,
    #[serde(default)]
    price_list: Option<String>,
    #[serde(default)]
    images: BTreeMap<String, String>,
    #[serde(default)]
    image_lookup: Option<RawImageLookup>,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawImageLookup {
    #[serde(default)]
    owner: Option<String>,
    #[serde(default)]
    name_pattern: Option<String>,
}

/// Which image a machine of one base and architecture boots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ImageKey {
    pub base: Base,
    pub arch: Arch,
}

impl fmt::Display for ImageKey {
    /// `ubuntu@22.04/amd64`, as the `[provider.ec2.images]` keys are
    /// written.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.base, self.arch.as_str())
    }
}

/// How images are found when `[provider.ec2.images]` names none for a base
/// and architecture: the newest (by creation date) available image of
/// `owner` whose name matches `name_pattern`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageLookup {
    pub owner: String,
    /// With `{series}`, `{version}` and `{arch}` to fill in.
    pub name_pattern: String,
}

impl Default for ImageLookup {
    fn default() -> Self {
        ImageLookup {
            owner: CANONICAL_OWNER.to_string(),
            name_pattern: UBUNTU_NAME_PATTERN.to_string(),
        }
    }
}

impl ImageLookup {
    /// The name filter for `key`, or `None` when the base has no series
    /// name to put in it.
    pub fn name_for(&self, key: ImageKey) -> Option<String> {
        let series = key.base.series()?;
        Some(
            self.name_pattern
                .replace("{series}", series)
                .replace("{version}", &key.base.version().to_string())
                .replace("{arch}", key.arch.as_str()),
        )
    }
}

/// The EC2 provider's settings, valid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ec2Config {
    pub region: String,
    /// Where the EC2 API is, instead of the region's public endpoint.
    pub endpoint_url: Option<String>,
    /// Subnets to launch into; when given, only their zones are used.
    pub subnet_ids: Vec<String>,
    pub security_group_ids: Vec<String>,
    pub key_name: Option<String>,
    /// Where new instances download the `berth` binary from, when their
    /// image does not have it at `/usr/local/bin/berth`.
    pub agent_binary_url: Option<String>,
    /// The operator's word that the images carry the berth binary at
    /// `/usr/local/bin/berth`, so no `agent_binary_url` is needed.
    pub image_has_agent: bool,
    /// Each instance type's hourly price from AWS's price list
    /// (`price_list`, read when the configuration is); empty without one,
    /// when the embedded catalogue's prices are used.
    pub prices: BTreeMap<String, HourlyPrice>,
    /// Images named in the configuration, by base and architecture.
    pub images: BTreeMap<ImageKey, String>,
    pub image_lookup: ImageLookup,
}

/// Why `[provider.ec2]` cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Ec2ConfigError {
    #[error("invalid [provider.ec2] section: {0}")]
    Invalid(String),
    #[error("provider.ec2.region must not be empty: expected a region such as \"us-east-1\"")]
    EmptyRegion,
    #[error(
        "provider.ec2.endpoint_url {0:?} is not a URL: expected http://host:port or https://host"
    )]
    EndpointUrl(String),
    #[error(
        "provider.ec2.subnet_id and provider.ec2.subnet_ids are both set: expected one of them"
    )]
    SubnetTwice,
    #[error("invalid {setting} {value:?}: expected an id starting with {prefix:?}")]
    BadId {
        setting: &'static str,
        value: String,
        prefix: &'static str,
    },
    #[error("provider.ec2.key_name must not be empty")]
    EmptyKeyName,
    #[error("provider.ec2.agent_binary_url {0:?} is not a URL: expected http:// or https://")]
    AgentBinaryUrl(String),
    #[error("invalid key {0:?} in [provider.ec2.images]: expected <base>/<arch>, such as \"ubuntu@22.04/amd64\"")]
    ImageKey(String),
    #[error("provider.ec2.image_lookup.{0} must not be empty")]
    EmptyLookup(&'static str),
    #[error("provider.ec2.price_list: {0}")]
    PriceList(#[from] PriceListError),
}

fn check_id(
    setting: &'static str,
    value: &str,
    prefix: &'static str,
) -> Result<(), Ec2ConfigError> {
    let rest = value.strip_prefix(prefix).unwrap_or("");
    if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(Ec2ConfigError::BadId {
            setting,
            value: value.to_string(),
            prefix,
        });
    }
    Ok(())
}

fn is_url(value: &str) -> bool {
    let rest = value
        .strip_prefix("http://")
        .or_else(|| value.strip_prefix("https://"));
    rest.is_some_and(|r| !r.is_empty() && !r.chars().any(|c| c.is_whitespace() || c.is_control()))
}

fn parse_image_key(key: &str) -> Option<ImageKey> {
    let (base, arch) = key.rsplit_once('/')?;
    Some(ImageKey {
        base: base.parse().ok()?,
        arch: Arch::parse(arch)?,
    })
}

impl Ec2Config {
    /// A configuration for `region` with every other setting at its
    /// default.
    pub fn for_region(region: impl Into<String>) -> Ec2Config {
        Ec2Config {
            region: region.into(),
            endpoint_url: None,
            subnet_ids: Vec::new(),
            security_group_ids: Vec::new(),
            key_name: None,
            agent_binary_url: None,
            image_has_agent: false,
            prices: BTreeMap::new(),
            images: BTreeMap::new(),
            image_lookup: ImageLookup::default(),
        }
    }

    /// Parses `[provider.ec2]`.
    ///
    /// # Errors
    ///
    /// [`Ec2ConfigError`] naming the setting and what it should be: an
    /// unknown or mistyped setting, an empty region, an endpoint or agent
    /// URL that is not `http(s)://`, ids without their `subnet-`, `sg-` or
    /// `ami-` prefix, both `subnet_id` and `subnet_ids`, an image key that
    /// is not `<base>/<arch>`, or an empty lookup setting.
    pub fn from_table(table: &toml::Table) -> Result<Ec2Config, Ec2ConfigError> {
        let raw: RawConfig = toml::Value::Table(table.clone())
            .try_into()
            .map_err(|e: toml::de::Error| Ec2ConfigError::Invalid(e.message().to_string()))?;
        let region = raw.region.trim().to_string();
        if region.is_empty() {
            return Err(Ec2ConfigError::EmptyRegion);
        }
        if let Some(url) = &raw.endpoint_url {
            if !is_url(url) {
                return Err(Ec2ConfigError::EndpointUrl(url.clone()));
            }
        }
        let subnet_ids = match (raw.subnet_id, raw.subnet_ids) {
            (Some(_), ids) if !ids.is_empty() => return Err(Ec2ConfigError::SubnetTwice),
            (Some(id), _) => vec![id],
            (None, ids) => ids,
        };
        for id in &subnet_ids {
            check_id("subnet id", id, "subnet-")?;
        }
        for id in &raw.security_group_ids {
            check_id("security group id", id, "sg-")?;
        }
        if raw.key_name.as_deref().is_some_and(|k| k.trim().is_empty()) {
            return Err(Ec2ConfigError::EmptyKeyName);
        }
        if let Some(url) = &raw.agent_binary_url {
            if !is_url(url) {
                return Err(Ec2ConfigError::AgentBinaryUrl(url.clone()));
            }
        }
        let prices = match &raw.price_list {
            Some(path) if path.trim().is_empty() => {
                return Err(Ec2ConfigError::Invalid(
                    "price_list must not be empty: expected the path of AWS's EC2 offer file"
                        .into(),
                ))
            }
            Some(path) => read_price_list(std::path::Path::new(path), &region)?,
            None => BTreeMap::new(),
        };
        let mut images = BTreeMap::new();
        for (key, image) in raw.images {
            let parsed = parse_image_key(&key).ok_or(Ec2ConfigError::ImageKey(key))?;
            check_id("image id", &image, "ami-")?;
            images.insert(parsed, image);
        }
        let mut image_lookup = ImageLookup::default();
        if let Some(lookup) = raw.image_lookup {
            if let Some(owner) = lookup.owner {
                if owner.trim().is_empty() {
                    return Err(Ec2ConfigError::EmptyLookup("owner"));
                }
                image_lookup.owner = owner;
            }
            if let Some(pattern) = lookup.name_pattern {
                if pattern.trim().is_empty() {
                    return Err(Ec2ConfigError::EmptyLookup("name_pattern"));
                }
                image_lookup.name_pattern = pattern;
            }
        }
        Ok(Ec2Config {
            region,
            endpoint_url: raw.endpoint_url,
            subnet_ids,
            security_group_ids: raw.security_group_ids,
            key_name: raw.key_name,
            agent_binary_url: raw.agent_binary_url,
            image_has_agent: raw.image_has_agent,
            prices,
            images,
            image_lookup,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Ec2Config, Ec2ConfigError> {
        Ec2Config::from_table(&text.parse::<toml::Table>().unwrap())
    }

    #[test]
    fn a_price_list_is_read_at_once_and_a_bad_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.csv");
        std::fs::write(
            &path,
            "\"FormatVersion\",\"v1.0\"\n\"SKU\",\"TermType\",\"Unit\",\"PricePerUnit\",\"Currency\",\
             \"Instance Type\",\"Tenancy\",\"Operating System\",\"Pre Installed S/W\"\n\
             \"S\",\"OnDemand\",\"Hrs\",\"0.0500000000\",\"USD\",\"t3.medium\",\"Shared\",\"Linux\",\"NA\"\n",
        )
        .unwrap();
        let config = parse(&format!(
            "region = \"us-east-1\"\nprice_list = {:?}",
            path.display().to_string()
        ))
        .unwrap();
        assert_eq!(
            config.prices.get("t3.medium").map(ToString::to_string),
            Some("0.05".to_string())
        );
        let missing =
            parse("region = \"us-east-1\"\nprice_list = \"/nonexistent.csv\"").unwrap_err();
        assert!(
            missing.to_string().starts_with(
                "provider.ec2.price_list: cannot read the EC2 price list /nonexistent.csv"
            ),
            "{missing}"
        );
        assert!(parse("region = \"us-east-1\"\nprice_list = \" \"").is_err());
    }

    fn key(base: &str, arch: Arch) -> ImageKey {
        ImageKey {
            base: base.parse().unwrap(),
            arch,
        }
    }

    #[test]
    fn a_region_alone_is_a_whole_configuration() {
        assert_eq!(
            parse("region = \"us-east-1\"").unwrap(),
            Ec2Config::for_region("us-east-1")
        );
    }

    #[test]
    fn every_setting_is_read() {
        let config = parse(
            r#"
            region = "eu-west-1"
            endpoint_url = "http://127.0.0.1:5000"
            subnet_ids = ["subnet-0a1b", "subnet-0c2d"]
            security_group_ids = ["sg-01"]
            key_name = "ops"
            agent_binary_url = "https://example.com/berth"
            image_has_agent = true
            [images]
            "ubuntu@22.04/amd64" = "ami-0123456789abcdef0"
            "ubuntu@24.04/edge/arm64" = "ami-0f"
            [image_lookup]
            owner = "self"
            name_pattern = "berth-{series}-{arch}-*"
            "#,
        )
        .unwrap();
        assert_eq!(config.region, "eu-west-1");
        assert_eq!(
            config.endpoint_url.as_deref(),
            Some("http://127.0.0.1:5000")
        );
        assert_eq!(config.subnet_ids, vec!["subnet-0a1b", "subnet-0c2d"]);
        assert_eq!(config.security_group_ids, vec!["sg-01"]);
        assert_eq!(config.key_name.as_deref(), Some("ops"));
        assert_eq!(
            config.agent_binary_url.as_deref(),
            Some("https://example.com/berth")
        );
        assert!(config.image_has_agent);
        assert_eq!(
            config.images.get(&key("ubuntu@22.04", Arch::Amd64)),
            Some(&"ami-0123456789abcdef0".to_string())
        );
        assert_eq!(
            config.images.get(&key("ubuntu@24.04/edge", Arch::Arm64)),
            Some(&"ami-0f".to_string())
        );
        assert_eq!(config.image_lookup.owner, "self");
        assert_eq!(
            config
                .image_lookup
                .name_for(key("ubuntu@22.04", Arch::Arm64))
                .as_deref(),
            Some("berth-jammy-arm64-*")
        );
    }

    #[test]
    fn one_subnet_id_is_a_list_of_one_and_both_forms_together_are_refused() {
        let config = parse("region = \"r\"\nsubnet_id = \"subnet-1\"").unwrap();
        assert_eq!(config.subnet_ids, vec!["subnet-1"]);
        assert_eq!(
            parse("region = \"r\"\nsubnet_id = \"subnet-1\"\nsubnet_ids = [\"subnet-2\"]"),
            Err(Ec2ConfigError::SubnetTwice)
        );
    }

    #[test]
    fn the_default_lookup_finds_canonicals_server_images() {
        let lookup = ImageLookup::default();
        assert_eq!(lookup.owner, "099720109477");
        assert_eq!(
            lookup.name_for(key("ubuntu@22.04", Arch::Amd64)).as_deref(),
            Some("ubuntu/images/hvm-ssd*/ubuntu-jammy-22.04-amd64-server-*")
        );
        assert_eq!(
            lookup.name_for(key("ubuntu@24.04", Arch::Arm64)).as_deref(),
            Some("ubuntu/images/hvm-ssd*/ubuntu-noble-24.04-arm64-server-*")
        );
    }

    #[test]
    fn an_image_key_prints_as_it_is_written() {
        assert_eq!(
            key("ubuntu@22.04", Arch::Amd64).to_string(),
            "ubuntu@22.04/amd64"
        );
    }

    #[test]
    fn an_unknown_setting_is_refused_by_name() {
        let err = parse("region = \"r\"\nsubnet = \"subnet-1\"").unwrap_err();
        assert!(
            matches!(&err, Ec2ConfigError::Invalid(m) if m.contains("unknown field `subnet`")),
            "{err}"
        );
    }

    #[test]
    fn a_missing_region_is_refused() {
        let err = parse("endpoint_url = \"http://localhost:5000\"").unwrap_err();
        assert!(
            matches!(&err, Ec2ConfigError::Invalid(m) if m.contains("missing field `region`")),
            "{err}"
        );
        assert_eq!(parse("region = \"  \""), Err(Ec2ConfigError::EmptyRegion));
    }

    #[test]
    fn urls_must_be_http_or_https() {
        assert_eq!(
            parse("region = \"r\"\nendpoint_url = \"127.0.0.1:5000\""),
            Err(Ec2ConfigError::EndpointUrl("127.0.0.1:5000".into()))
        );
        assert_eq!(
            parse("region = \"r\"\nagent_binary_url = \"ftp://x/berth\""),
            Err(Ec2ConfigError::AgentBinaryUrl("ftp://x/berth".into()))
        );
        assert!(parse("region = \"r\"\nendpoint_url = \"https://ec2.example\"").is_ok());
    }

    #[test]
    fn ids_need_their_prefix() {
        assert_eq!(
            parse("region = \"r\"\nsubnet_ids = [\"sub-1\"]"),
            Err(Ec2ConfigError::BadId {
                setting: "subnet id",
                value: "sub-1".into(),
                prefix: "subnet-"
            })
        );
        assert_eq!(
            parse("region = \"r\"\nsecurity_group_ids = [\"sg-\"]"),
            Err(Ec2ConfigError::BadId {
                setting: "security group id",
                value: "sg-".into(),
                prefix: "sg-"
            })
        );
        assert_eq!(
            parse("region = \"r\"\n[images]\n\"ubuntu@22.04/amd64\" = \"img-1\""),
            Err(Ec2ConfigError::BadId {
                setting: "image id",
                value: "img-1".into(),
                prefix: "ami-"
            })
        );
    }

    #[test]
    fn an_image_key_must_be_a_base_and_an_arch() {
        for bad in ["ubuntu@22.04", "ubuntu@22.04/x86_64", "plan9@4/amd64"] {
            assert_eq!(
                parse(&format!("region = \"r\"\n[images]\n\"{bad}\" = \"ami-1\"")),
                Err(Ec2ConfigError::ImageKey(bad.into())),
                "{bad}"
            );
        }
    }

    #[test]
    fn empty_names_are_refused() {
        assert_eq!(
            parse("region = \"r\"\nkey_name = \"\""),
            Err(Ec2ConfigError::EmptyKeyName)
        );
        assert_eq!(
            parse("region = \"r\"\n[image_lookup]\nowner = \"\""),
            Err(Ec2ConfigError::EmptyLookup("owner"))
        );
        assert_eq!(
            parse("region = \"r\"\n[image_lookup]\nname_pattern = \" \""),
            Err(Ec2ConfigError::EmptyLookup("name_pattern"))
        );
    }
}

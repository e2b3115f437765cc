//! Charms: what an application runs, as far as berth needs to know it.
//!
//! A charm is read from Juju's charm layout (the reading from disk is in
//! `crate::charms`; everything here works on text and values):
//!
//! - `metadata.yaml` becomes a [`CharmMeta`]: the charm's name, whether it
//!   is a subordinate, its `provides` / `requires` / `peers` endpoints, and
//!   the bases it supports (old-style `series: [jammy]` or the newer
//!   `bases: [{name: ubuntu, channel: "22.04"}]`). Juju's rules hold: a
//!   subordinate requires at least one relation with `scope: container`;
//!   every charm implicitly provides `juju-info`, and the `juju` / `juju-*`
//!   names are reserved, so declaring `juju-info` is an error.
//! - `config.yaml` becomes a [`CharmConfig`]: typed options with defaults,
//!   against which an application's `--config k=v` settings are checked
//!   ([`CharmConfig::validate`]).
//! - A [`Charm`] joins both to its identity, a [`CharmUrl`] such as
//!   `local:wordpress-0` (a charm directory) or `ch:wordpress-0` (a charm
//!   named on the command line, with no metadata of its own), and chooses
//!   an application's base ([`Charm::choose_base`]).
//! - [`infer_relation`] finds the one relation `integrate A B` means, with
//!   Juju's rules and error messages.
//!
//! Metadata and config serialize to JSON in the same shape they are read
//! in, and deserializing checks every rule again, so what the store gives
//! back is as valid as what was parsed.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::domain::base::{Base, BaseError};
use crate::domain::names::{ApplicationName, InvalidApplicationName};
use crate::domain::words::{checked_name, text_conversions, word_enum};

/// The endpoint (and interface) every charm provides without declaring it.
pub const JUJU_INFO: &str = "juju-info";

/// Why charm metadata, charm config or application settings are not
/// acceptable. Messages use Juju's words where Juju has them.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CharmError {
    /// The text is not YAML (the message carries the line and column).
    #[error("invalid YAML: {0}")]
    Yaml(String),
    /// A metadata field is missing or has the wrong shape. `field` is a
    /// path such as `provides.db.scope`; `got` is the value as JSON, or
    /// `nothing`.
    #[error("metadata: {field}: expected {expected}, got {got}")]
    MetadataField {
        field: String,
        expected: &'static str,
        got: String,
    },
    #[error("{0:?} is not a valid charm name")]
    InvalidName(String),
    #[error("charm {charm:?} has an invalid relation name: {source}")]
    InvalidEndpointName {
        charm: String,
        #[source]
        source: InvalidEndpointName,
    },
    #[error("charm {charm:?} using a reserved relation name: {endpoint:?}")]
    ReservedRelationName { charm: String, endpoint: String },
    #[error("charm {charm:?} relation {endpoint:?} using a reserved interface: {interface:?}")]
    ReservedInterface {
        charm: String,
        endpoint: String,
        interface: String,
    },
    #[error("charm {charm:?} using a duplicated relation name: {endpoint:?}")]
    DuplicatedRelationName { charm: String, endpoint: String },
    #[error("subordinate charm {0:?} lacks \"requires\" relation with container scope")]
    SubordinateWithoutContainerRelation(String),
    #[error("charm {charm:?} declares invalid series: {series:?}")]
    InvalidSeries { charm: String, series: String },
    #[error("charm {charm:?} declares an invalid base: {source}")]
    InvalidBase {
        charm: String,
        #[source]
        source: BaseError,
    },
    #[error("charm {0:?} declares both series and bases: declare only bases")]
    SeriesAndBases(String),
    /// `config.yaml` is empty or has no `options` key.
    #[error("invalid config: empty configuration")]
    EmptyConfig,
    /// A config field is missing or has the wrong shape (`options.port.type`).
    #[error("invalid config: {field}: expected {expected}, got {got}")]
    ConfigField {
        field: String,
        expected: &'static str,
        got: String,
    },
    #[error(
        "invalid config: option {option:?} has unknown type {kind:?}: expected string, int, float, boolean or secret"
    )]
    UnknownOptionType { option: String, kind: String },
    #[error("invalid config default: option {option:?} expected {expected}, got {got}")]
    InvalidDefault {
        option: String,
        expected: OptionType,
        got: String,
    },
    #[error("unknown option {0:?}")]
    UnknownOption(String),
    /// A setting's value does not parse as its option's type. `got` is the
    /// value as given, quoted.
    #[error("option {option:?} expected {expected}, got {got:?}")]
    WrongType {
        option: String,
        expected: OptionType,
        got: String,
    },
    #[error(
        "base {:?} not supported by charm, the charm supported bases are: {}",
        .base.to_string(),
        join_bases(.supported)
    )]
    UnsupportedBase { base: Base, supported: Vec<Base> },
    /// A charm rebuilt from stored parts whose URL names another charm.
    #[error("charm URL {url:?} does not match the charm's name {name:?}")]
    UrlMismatch { url: String, name: String },
}

fn join_bases(bases: &[Base]) -> String {
    bases
        .iter()
        .map(Base::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// How a value is described in a "got ..." message: as JSON, or `nothing`.
fn describe(value: Option<&Value>) -> String {
    match value {
        None => "nothing".to_string(),
        Some(value) => value.to_string(),
    }
}

/// Parses YAML text into a JSON value, the common form of charm documents.
///
/// The text is read as YAML's own value first, which refuses a key given
/// twice in one map (a JSON map would silently keep the last).
fn yaml_to_value(text: &str) -> Result<Value, CharmError> {
    let yaml: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(text).map_err(|e| CharmError::Yaml(e.to_string()))?;
    serde_json::to_value(yaml).map_err(|e| CharmError::Yaml(e.to_string()))
}

// ---------------------------------------------------------------------------
// Endpoint names, scopes and roles.

/// The name of a charm's relation endpoint (`db`, `website`, `juju-info`),
/// valid by Juju's rule `[a-z][a-z0-9]*([_-][a-z0-9]+)*`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct EndpointName(String);

/// A string that is not an endpoint name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a valid endpoint name: expected lowercase letters and digits, starting with a letter, in parts joined by \"-\" or \"_\""
)]
pub struct InvalidEndpointName(pub String);

impl EndpointName {
    fn is_valid(s: &str) -> bool {
        let lower_alnum = |part: &str| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        };
        s.starts_with(|c: char| c.is_ascii_lowercase()) && s.split(['-', '_']).all(lower_alnum)
    }

    /// `juju-info`, the endpoint every charm provides.
    pub fn juju_info() -> EndpointName {
        EndpointName(JUJU_INFO.to_string())
    }
}

checked_name!(EndpointName, InvalidEndpointName);

word_enum! {
    /// Which units of two related applications see each other.
    #[derive(
        Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
    )]
    #[serde(rename_all = "lowercase")]
    pub enum Scope {
        /// Every unit of one side with every unit of the other.
        #[default]
        Global => "global",
        /// Only units in the same container (on the same machine): how a
        /// subordinate joins its principal.
        Container => "container",
    }
}

word_enum! {
    /// Which side of a relation an endpoint is on.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
    #[serde(rename_all = "lowercase")]
    pub enum Role {
        Provider => "provider",
        Requirer => "requirer",
        Peer => "peer",
    }
}

impl Role {
    /// The metadata.yaml key that declares endpoints of this role.
    fn metadata_key(self) -> &'static str {
        match self {
            Role::Provider => "provides",
            Role::Requirer => "requires",
            Role::Peer => "peers",
        }
    }
}

/// One declared relation endpoint: what it speaks and how widely.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Relation {
    /// The protocol both sides must speak (`mysql`, `http`, `juju-info`).
    pub interface: String,
    pub scope: Scope,
    /// How many relations the endpoint may join at once; `None` (Juju's
    /// `limit` absent or 0) for no limit. Enforced when relations are added.
    pub limit: Option<u32>,
    /// Juju's `optional`: informational only, kept so metadata round-trips.
    pub optional: bool,
}

impl Relation {
    /// A global relation on `interface` with no limit: the shorthand
    /// `db: mysql` in metadata.yaml.
    pub fn global(interface: &str) -> Relation {
        Relation {
            interface: interface.to_string(),
            scope: Scope::Global,
            limit: None,
            optional: false,
        }
    }

    /// The implicit `juju-info` provider every charm has.
    fn juju_info() -> Relation {
        Relation::global(JUJU_INFO)
    }

    fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("interface".into(), Value::from(self.interface.clone()));
        map.insert("scope".into(), Value::from(self.scope.as_str()));
        if let Some(limit) = self.limit {
            map.insert("limit".into(), Value::from(limit));
        }
        map.insert("optional".into(), Value::from(self.optional));
        Value::Object(map)
    }
}

/// A charm's endpoint with its name and role (see [`CharmMeta::endpoints`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CharmEndpoint {
    pub name: EndpointName,
    pub role: Role,
    pub relation: Relation,
}

impl CharmEndpoint {
    /// Whether this is the `juju-info` provider Juju adds to every charm.
    pub fn is_implicit(&self) -> bool {
        self.name.as_str() == JUJU_INFO
            && self.relation.interface == JUJU_INFO
            && self.role == Role::Provider
    }
}

// ---------------------------------------------------------------------------
// metadata.yaml

/// A charm's metadata: identity, kind, endpoints and supported bases.
///
/// Only [`CharmMeta::parse_yaml`], deserialization and
/// [`CharmMeta::principal`] make one, so every value obeys Juju's rules.
/// It serializes to JSON in the shape of metadata.yaml (relations in their
/// long form, bases as `ubuntu@22.04` strings) and deserializes through the
/// same checks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Value", into = "Value")]
pub struct CharmMeta {
    /// Charm names follow the rules of application names, and an
    /// application deployed without a name takes its charm's.
    name: ApplicationName,
    summary: String,
    description: String,
    /// A subordinate has no machines of its own: its units run beside the
    /// units of the principals it is related to.
    subordinate: bool,
    provides: BTreeMap<EndpointName, Relation>,
    requires: BTreeMap<EndpointName, Relation>,
    peers: BTreeMap<EndpointName, Relation>,
    /// The bases the charm declares, most preferred first, without
    /// repeats; empty when it declares none, which means any base.
    bases: Vec<Base>,
}

/// Reads the fields of one metadata or config map, naming each field by
/// its path in errors.
struct Fields<'a> {
    map: &'a Map<String, Value>,
    /// The path of `map` itself, `""` at the top or `provides.db.`.
    prefix: String,
    /// Makes the error for a field of the wrong shape.
    error: fn(String, &'static str, String) -> CharmError,
}

impl<'a> Fields<'a> {
    fn metadata(map: &'a Map<String, Value>, prefix: String) -> Fields<'a> {
        Fields {
            map,
            prefix,
            error: |field, expected, got| CharmError::MetadataField {
                field,
                expected,
                got,
            },
        }
    }

    fn config(map: &'a Map<String, Value>, prefix: String) -> Fields<'a> {
        Fields {
            map,
            prefix,
            error: |field, expected, got| CharmError::ConfigField {
                field,
                expected,
                got,
            },
        }
    }

    fn fail(&self, key: &str, expected: &'static str) -> CharmError {
        (self.error)(
            format!("{}{key}", self.prefix),
            expected,
            describe(self.map.get(key)),
        )
    }

    /// The field's value, treating `null` as absent (YAML's `key:`).
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|value| !value.is_null())
    }

    fn string(&self, key: &str) -> Result<Option<String>, CharmError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(self.fail(key, "string")),
        }
    }

    fn bool(&self, key: &str) -> Result<Option<bool>, CharmError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(self.fail(key, "true or false")),
        }
    }

    fn map(&self, key: &str) -> Result<Option<&'a Map<String, Value>>, CharmError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(map)),
            Some(_) => Err(self.fail(key, "map")),
        }
    }

    fn list(&self, key: &str) -> Result<Option<&'a Vec<Value>>, CharmError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(list)) => Ok(Some(list)),
            Some(_) => Err(self.fail(key, "list")),
        }
    }
}

/// Whether `endpoint` (a relation name or interface) is reserved for Juju
/// in a charm called `charm`: `juju` and `juju-*` are, except in charms
/// whose own names start with `juju-`.
fn reserved(charm: &str, endpoint: &str) -> bool {
    !charm.starts_with("juju-") && (endpoint == "juju" || endpoint.starts_with("juju-"))
}

impl CharmMeta {
    /// The metadata of a charm known only by its name (`deploy wordpress`):
    /// a principal with no endpoints of its own, runnable on any base.
    pub fn principal(name: ApplicationName) -> CharmMeta {
        CharmMeta {
            name,
            summary: String::new(),
            description: String::new(),
            subordinate: false,
            provides: BTreeMap::new(),
            requires: BTreeMap::new(),
            peers: BTreeMap::new(),
            bases: Vec::new(),
        }
    }

    /// Parses the text of a metadata.yaml.
    ///
    /// Keys berth does not use (`maintainer`, `tags`, `storage`, ...) are
    /// ignored. `summary` and `description` may be left out.
    ///
    /// # Errors
    ///
    /// - [`CharmError::Yaml`] for text that is not YAML;
    /// - [`CharmError::MetadataField`] for a missing `name` or a field of
    ///   the wrong shape;
    /// - [`CharmError::InvalidName`], [`CharmError::InvalidEndpointName`];
    /// - [`CharmError::InvalidSeries`], [`CharmError::InvalidBase`],
    ///   [`CharmError::SeriesAndBases`];
    /// - Juju's checks: [`CharmError::ReservedRelationName`] (which is what
    ///   declaring `juju-info` gives), [`CharmError::ReservedInterface`],
    ///   [`CharmError::DuplicatedRelationName`],
    ///   [`CharmError::SubordinateWithoutContainerRelation`].
    pub fn parse_yaml(text: &str) -> Result<CharmMeta, CharmError> {
        CharmMeta::from_value(yaml_to_value(text)?)
    }

    fn from_value(value: Value) -> Result<CharmMeta, CharmError> {
        let Value::Object(doc) = value else {
            return Err(CharmError::MetadataField {
                field: "(top level)".to_string(),
                expected: "map",
                got: describe(Some(&value).filter(|v| !v.is_null())),
            });
        };
        let fields = Fields::metadata(&doc, String::new());
        let Some(name) = fields.string("name")? else {
            return Err(fields.fail("name", "string"));
        };
        let name = ApplicationName::parse(name)
            .map_err(|InvalidApplicationName(name)| CharmError::InvalidName(name))?;
        let charm = name.as_str();
        let subordinate = fields.bool("subordinate")?.unwrap_or(false);
        let provides = parse_relations(charm, &fields, Role::Provider)?;
        let requires = parse_relations(charm, &fields, Role::Requirer)?;
        let peers = parse_relations(charm, &fields, Role::Peer)?;
        let bases = parse_bases(charm, &fields)?;
        let meta = CharmMeta {
            summary: fields.string("summary")?.unwrap_or_default(),
            description: fields.string("description")?.unwrap_or_default(),
            name,
            subordinate,
            provides,
            requires,
            peers,
            bases,
        };
        meta.check()?;
        Ok(meta)
    }

    /// Juju's checks of relations (`Meta.Check`), in Juju's order.
    fn check(&self) -> Result<(), CharmError> {
        let charm = self.name.as_str();
        let mut seen: Vec<&EndpointName> = Vec::new();
        for (role, relations) in [
            (Role::Provider, &self.provides),
            (Role::Requirer, &self.requires),
            (Role::Peer, &self.peers),
        ] {
            for (name, relation) in relations {
                // A subordinate's container-scoped requirements may use the
                // reserved names: that is how it asks for `juju-info`.
                let may_use_reserved = self.subordinate
                    && role == Role::Requirer
                    && relation.scope == Scope::Container;
                if !may_use_reserved && reserved(charm, name.as_str()) {
                    return Err(CharmError::ReservedRelationName {
                        charm: charm.to_string(),
                        endpoint: name.to_string(),
                    });
                }
                if role != Role::Requirer && reserved(charm, &relation.interface) {
                    return Err(CharmError::ReservedInterface {
                        charm: charm.to_string(),
                        endpoint: name.to_string(),
                        interface: relation.interface.clone(),
                    });
                }
                if seen.contains(&name) {
                    return Err(CharmError::DuplicatedRelationName {
                        charm: charm.to_string(),
                        endpoint: name.to_string(),
                    });
                }
                seen.push(name);
            }
        }
        let has_container_requirement = self
            .requires
            .values()
            .any(|relation| relation.scope == Scope::Container);
        if self.subordinate && !has_container_requirement {
            return Err(CharmError::SubordinateWithoutContainerRelation(
                charm.to_string(),
            ));
        }
        Ok(())
    }

    pub fn name(&self) -> &ApplicationName {
        &self.name
    }

    pub fn summary(&self) -> &str {
        &self.summary
    }

    pub fn description(&self) -> &str {
        &self.description
    }

    pub fn is_subordinate(&self) -> bool {
        self.subordinate
    }

    /// The declared `provides` endpoints (without the implicit `juju-info`;
    /// see [`CharmMeta::endpoints`]).
    pub fn provides(&self) -> &BTreeMap<EndpointName, Relation> {
        &self.provides
    }

    pub fn requires(&self) -> &BTreeMap<EndpointName, Relation> {
        &self.requires
    }

    pub fn peers(&self) -> &BTreeMap<EndpointName, Relation> {
        &self.peers
    }

    /// The declared bases, most preferred first; empty means any base.
    pub fn bases(&self) -> &[Base] {
        &self.bases
    }

    /// Whether the charm runs on `base`: it declares no bases, or declares
    /// the same release (at any risk).
    pub fn supports(&self, base: &Base) -> bool {
        self.bases.is_empty() || self.bases.iter().any(|b| b.is_compatible(base))
    }

    /// Every endpoint of the charm, the implicit `juju-info` provider
    /// included: peers, then providers, then requirers, each by name.
    pub fn endpoints(&self) -> Vec<CharmEndpoint> {
        let declared = [
            (Role::Peer, &self.peers),
            (Role::Provider, &self.provides),
            (Role::Requirer, &self.requires),
        ];
        let mut endpoints: Vec<CharmEndpoint> = declared
            .into_iter()
            .flat_map(|(role, relations)| {
                relations.iter().map(move |(name, relation)| CharmEndpoint {
                    name: name.clone(),
                    role,
                    relation: relation.clone(),
                })
            })
            .collect();
        endpoints.push(CharmEndpoint {
            name: EndpointName::juju_info(),
            role: Role::Provider,
            relation: Relation::juju_info(),
        });
        endpoints
    }
}

/// Reads `provides`, `requires` or `peers`: a map from endpoint name to an
/// interface name (`db: mysql`) or a map with `interface` and optionally
/// `scope`, `limit` and `optional`.
fn parse_relations(
    charm: &str,
    fields: &Fields<'_>,
    role: Role,
) -> Result<BTreeMap<EndpointName, Relation>, CharmError> {
    let key = role.metadata_key();
    let Some(declared) = fields.map(key)? else {
        return Ok(BTreeMap::new());
    };
    let mut relations = BTreeMap::new();
    for (name, value) in declared {
        let endpoint = EndpointName::parse(name.clone()).map_err(|source| {
            CharmError::InvalidEndpointName {
                charm: charm.to_string(),
                source,
            }
        })?;
        let path = format!("{key}.{name}");
        let relation = match value {
            Value::String(interface) if !interface.is_empty() => Relation::global(interface),
            Value::Object(map) => parse_relation(&Fields::metadata(map, format!("{path}.")))?,
            other => {
                return Err(CharmError::MetadataField {
                    field: path,
                    expected: "an interface name or a map with \"interface\"",
                    got: describe(Some(other)),
                })
            }
        };
        relations.insert(endpoint, relation);
    }
    Ok(relations)
}

fn parse_relation(fields: &Fields<'_>) -> Result<Relation, CharmError> {
    let interface = match fields.string("interface")? {
        Some(interface) if !interface.is_empty() => interface,
        _ => return Err(fields.fail("interface", "an interface name")),
    };
    let scope = match fields.get("scope") {
        None => Scope::Global,
        Some(Value::String(s)) if s == "global" => Scope::Global,
        Some(Value::String(s)) if s == "container" => Scope::Container,
        Some(_) => return Err(fields.fail("scope", "\"global\" or \"container\"")),
    };
    let limit = match fields.get("limit") {
        None => None,
        Some(Value::Number(n)) => match n.as_u64().map(u32::try_from) {
            Some(Ok(0)) => None,
            Some(Ok(limit)) => Some(limit),
            _ => return Err(fields.fail("limit", "a whole number from 0")),
        },
        Some(_) => return Err(fields.fail("limit", "a whole number from 0")),
    };
    Ok(Relation {
        interface,
        scope,
        limit,
        optional: fields.bool("optional")?.unwrap_or(false),
    })
}

/// Reads the supported bases from `series` (old style: series names) or
/// `bases` (new style: maps with `name` and `channel`, as in Juju's v2
/// metadata and charmcraft's manifest.yaml, or `ubuntu@22.04` strings).
/// `architectures` in a base map is accepted and ignored.
fn parse_bases(charm: &str, fields: &Fields<'_>) -> Result<Vec<Base>, CharmError> {
    let series = fields.list("series")?;
    let bases = fields.list("bases")?;
    let mut parsed = Vec::new();
    match (series, bases) {
        (Some(_), Some(_)) => return Err(CharmError::SeriesAndBases(charm.to_string())),
        (Some(series), None) => {
            for (i, value) in series.iter().enumerate() {
                let Value::String(name) = value else {
                    return Err(CharmError::MetadataField {
                        field: format!("series[{i}]"),
                        expected: "a series name",
                        got: describe(Some(value)),
                    });
                };
                let base = Base::from_series(name).map_err(|_| CharmError::InvalidSeries {
                    charm: charm.to_string(),
                    series: name.clone(),
                })?;
                parsed.push(base);
            }
        }
        (None, Some(bases)) => {
            for (i, value) in bases.iter().enumerate() {
                parsed.push(parse_base(charm, i, value)?);
            }
        }
        (None, None) => {}
    }
    let mut unique: Vec<Base> = Vec::new();
    for base in parsed {
        if !unique.contains(&base) {
            unique.push(base);
        }
    }
    Ok(unique)
}

fn parse_base(charm: &str, i: usize, value: &Value) -> Result<Base, CharmError> {
    let written = match value {
        Value::String(base) => base.clone(),
        Value::Object(map) => {
            let fields = Fields::metadata(map, format!("bases[{i}]."));
            let Some(name) = fields.string("name")? else {
                return Err(fields.fail("name", "an operating system name such as \"ubuntu\""));
            };
            // YAML reads an unquoted 22.04 as a number, and 20.10 as 20.1:
            // a channel must be quoted.
            let channel = match fields.get("channel") {
                Some(Value::String(channel)) => channel.clone(),
                _ => return Err(fields.fail("channel", "a quoted channel such as \"22.04\"")),
            };
            format!("{name}@{channel}")
        }
        other => {
            return Err(CharmError::MetadataField {
                field: format!("bases[{i}]"),
                expected: "a map with \"name\" and \"channel\"",
                got: describe(Some(other)),
            })
        }
    };
    written.parse().map_err(|source| CharmError::InvalidBase {
        charm: charm.to_string(),
        source,
    })
}

impl TryFrom<Value> for CharmMeta {
    type Error = CharmError;

    fn try_from(value: Value) -> Result<Self, Self::Error> {
        CharmMeta::from_value(value)
    }
}

impl From<CharmMeta> for Value {
    fn from(meta: CharmMeta) -> Value {
        let relations = |relations: &BTreeMap<EndpointName, Relation>| {
            Value::Object(
                relations
                    .iter()
                    .map(|(name, relation)| (name.to_string(), relation.to_value()))
                    .collect(),
            )
        };
        let mut map = Map::new();
        map.insert("name".into(), Value::from(meta.name.as_str()));
        map.insert("summary".into(), Value::from(meta.summary.clone()));
        map.insert("description".into(), Value::from(meta.description.clone()));
        map.insert("subordinate".into(), Value::from(meta.subordinate));
        map.insert("provides".into(), relations(&meta.provides));
        map.insert("requires".into(), relations(&meta.requires));
        map.insert("peers".into(), relations(&meta.peers));
        map.insert(
            "bases".into(),
            Value::Array(
                meta.bases
                    .iter()
                    .map(|base| Value::from(base.to_string()))
                    .collect(),
            ),
        );
        Value::Object(map)
    }
}

// ---------------------------------------------------------------------------
// config.yaml

word_enum! {
    /// The type of a charm config option, as written in config.yaml.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
    #[serde(rename_all = "lowercase")]
    pub enum OptionType {
        String => "string",
        Int => "int",
        Float => "float",
        Boolean => "boolean",
        /// A reference to a Juju secret: a `secret:` URI, or empty.
        Secret => "secret",
    }
}

impl OptionType {
    /// The typed value of `text` as given on the command line
    /// (`--config port=8080`), or `None` if it is not one of this type.
    ///
    /// Booleans take Go's words, as Juju does: `true`, `True`, `TRUE`, `t`,
    /// `T`, `1` and their `false` counterparts. Floats must be finite.
    fn value_of(self, text: &str) -> Option<Value> {
        match self {
            OptionType::String => Some(Value::from(text)),
            OptionType::Secret => is_secret_uri(text).then(|| Value::from(text)),
            OptionType::Int => text.parse::<i64>().ok().map(Value::from),
            OptionType::Float => text
                .parse::<f64>()
                .ok()
                .filter(|f| f.is_finite())
                .map(Value::from),
            OptionType::Boolean => match text {
                "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(Value::Bool(true)),
                "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(Value::Bool(false)),
                _ => None,
            },
        }
    }

    /// The typed value of a YAML or JSON `value` (a default, or a stored
    /// setting), or `None` if it is not one of this type. A float option
    /// takes whole numbers too.
    fn coerce(self, value: &Value) -> Option<Value> {
        match (self, value) {
            (OptionType::String, Value::String(_)) => Some(value.clone()),
            (OptionType::Secret, Value::String(s)) if is_secret_uri(s) => Some(value.clone()),
            (OptionType::Int, Value::Number(n)) if n.is_i64() => Some(value.clone()),
            (OptionType::Float, Value::Number(n)) => n.as_f64().map(Value::from),
            (OptionType::Boolean, Value::Bool(_)) => Some(value.clone()),
            _ => None,
        }
    }
}

/// Whether `s` may be the value of a secret option: empty (no secret), or
/// a URI with the `secret` scheme (`secret:coh2uo2ji6m0ue9a7tj0`).
fn is_secret_uri(s: &str) -> bool {
    s.is_empty()
        || s.strip_prefix("secret:")
            .is_some_and(|rest| !rest.is_empty())
}

/// One option a charm accepts.
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigOption {
    kind: OptionType,
    /// Always of `kind`'s type; `None` when config.yaml gives no default.
    default: Option<Value>,
    description: String,
}

impl ConfigOption {
    pub fn kind(&self) -> OptionType {
        self.kind
    }

    pub fn default(&self) -> Option<&Value> {
        self.default.as_ref()
    }

    pub fn description(&self) -> &str {
        &self.description
    }
}

/// An application's charm settings: option name to typed value. They
/// serialize to JSON as they are.
pub type Settings = BTreeMap<String, Value>;

/// The options a charm accepts, from its config.yaml.
///
/// A charm without a config.yaml has no options ([`CharmConfig::default`]).
/// It serializes to JSON in the shape of config.yaml and deserializes
/// through the same checks.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Value", into = "Value")]
pub struct CharmConfig {
    options: BTreeMap<String, ConfigOption>,
}

impl CharmConfig {
    /// Parses the text of a config.yaml: an `options` map from option name
    /// to `type` (string, int, float, boolean or secret; string when left
    /// out), `default` and `description`.
    ///
    /// # Errors
    ///
    /// - [`CharmError::Yaml`] for text that is not YAML;
    /// - [`CharmError::EmptyConfig`] for an empty document or one without
    ///   an `options` key (`options:` with nothing under it is fine);
    /// - [`CharmError::ConfigField`] for a field of the wrong shape;
    /// - [`CharmError::UnknownOptionType`];
    /// - [`CharmError::InvalidDefault`] for a default not of the option's
    ///   type (an empty string is accepted for string and secret options).
    pub fn parse_yaml(text: &str) -> Result<CharmConfig, CharmError> {
        CharmConfig::from_value(yaml_to_value(text)?)
    }

    fn from_value(value: Value) -> Result<CharmConfig, CharmError> {
        let doc = match value {
            Value::Null => return Err(CharmError::EmptyConfig),
            Value::Object(doc) => doc,
            other => {
                return Err(CharmError::ConfigField {
                    field: "(top level)".to_string(),
                    expected: "map with \"options\"",
                    got: describe(Some(&other)),
                })
            }
        };
        if !doc.contains_key("options") {
            return Err(CharmError::EmptyConfig);
        }
        let fields = Fields::config(&doc, String::new());
        let mut options = BTreeMap::new();
        for (name, value) in fields.map("options")?.into_iter().flatten() {
            let path = format!("options.{name}");
            let Value::Object(map) = value else {
                return Err(CharmError::ConfigField {
                    field: path,
                    expected: "map",
                    got: describe(Some(value)),
                });
            };
            let option = Fields::config(map, format!("{path}."));
            let kind = match option.string("type")? {
                None => OptionType::String,
                Some(kind) => {
                    OptionType::parse(&kind).ok_or_else(|| CharmError::UnknownOptionType {
                        option: name.clone(),
                        kind,
                    })?
                }
            };
            let default = match option.get("default") {
                None => None,
                Some(value) => {
                    Some(
                        kind.coerce(value)
                            .ok_or_else(|| CharmError::InvalidDefault {
                                option: name.clone(),
                                expected: kind,
                                got: value.to_string(),
                            })?,
                    )
                }
            };
            let description = option.string("description")?.unwrap_or_default();
            options.insert(
                name.clone(),
                ConfigOption {
                    kind,
                    default,
                    description,
                },
            );
        }
        Ok(CharmConfig { options })
    }

    pub fn options(&self) -> &BTreeMap<String, ConfigOption> {
        &self.options
    }

    pub fn option(&self, name: &str) -> Option<&ConfigOption> {
        self.options.get(name)
    }

    /// Checks settings given as text (`--config port=8080`) against the
    /// options and returns them typed.
    ///
    /// # Errors
    ///
    /// [`CharmError::UnknownOption`] for a name the charm does not have;
    /// [`CharmError::WrongType`] for a value that is not of the option's
    /// type (`option "port" expected int, got "abc"`). Settings are checked
    /// in name order, and the first bad one is reported.
    ///
    /// # Guarantees
    ///
    /// Every returned value is of its option's type: a JSON string, an
    /// integer, a finite number or a boolean.
    pub fn validate(&self, settings: &BTreeMap<String, String>) -> Result<Settings, CharmError> {
        settings
            .iter()
            .map(|(name, text)| {
                let option = self
                    .options
                    .get(name)
                    .ok_or_else(|| CharmError::UnknownOption(name.clone()))?;
                let value = option
                    .kind
                    .value_of(text)
                    .ok_or_else(|| CharmError::WrongType {
                        option: name.clone(),
                        expected: option.kind,
                        got: text.clone(),
                    })?;
                Ok((name.clone(), value))
            })
            .collect()
    }

    /// The default of every option that has one.
    pub fn defaults(&self) -> Settings {
        self.options
            .iter()
            .filter_map(|(name, option)| Some((name.clone(), option.default.clone()?)))
            .collect()
    }
}

impl TryFrom<Value> for CharmConfig {
    type Error = CharmError;

    fn try_from(value: Value) -> Result<Self, Self::Error> {
        CharmConfig::from_value(value)
    }
}

impl From<CharmConfig> for Value {
    fn from(config: CharmConfig) -> Value {
        let options = config
            .options
            .into_iter()
            .map(|(name, option)| {
                let mut map = Map::new();
                map.insert("type".into(), Value::from(option.kind.as_str()));
                map.insert("description".into(), Value::from(option.description));
                if let Some(default) = option.default {
                    map.insert("default".into(), default);
                }
                (name, Value::Object(map))
            })
            .collect();
        let mut doc = Map::new();
        doc.insert("options".into(), Value::Object(options));
        Value::Object(doc)
    }
}

// ---------------------------------------------------------------------------
// Charm identity.

word_enum! {
    /// Where a charm came from.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
    #[serde(rename_all = "lowercase")]
    pub enum Namespace {
        /// A charm directory on the deployer's disk: `local:`.
        Local => "local",
        /// A charm named on the command line, as if from Charmhub: `ch:`.
        #[serde(rename = "ch")]
        Charmhub => "ch",
    }
}

/// The identity of a charm in the store, `<namespace>:<name>-<revision>`
/// (`local:wordpress-0`, `ch:mysql-3`), as in the store's `/charms` tree.
///
/// The name-revision split is unambiguous because no hyphen-separated part
/// of a charm name is all digits.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct CharmUrl {
    namespace: Namespace,
    name: ApplicationName,
    revision: u32,
}

/// A string that is not a charm URL.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid charm URL {0:?}: expected <local|ch>:<name>-<revision>, such as local:wordpress-0"
)]
pub struct InvalidCharmUrl(pub String);

impl CharmUrl {
    pub fn new(namespace: Namespace, name: ApplicationName, revision: u32) -> CharmUrl {
        CharmUrl {
            namespace,
            name,
            revision,
        }
    }

    pub fn namespace(&self) -> Namespace {
        self.namespace
    }

    pub fn name(&self) -> &ApplicationName {
        &self.name
    }

    pub fn revision(&self) -> u32 {
        self.revision
    }

    /// The same charm at another revision.
    pub fn with_revision(self, revision: u32) -> CharmUrl {
        CharmUrl { revision, ..self }
    }
}

impl fmt::Display for CharmUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}-{}", self.namespace, self.name, self.revision)
    }
}

impl FromStr for CharmUrl {
    type Err = InvalidCharmUrl;

    /// Parses `<local|ch>:<name>-<revision>`, the revision without leading
    /// zeros.
    ///
    /// # Errors
    ///
    /// [`InvalidCharmUrl`] for any other string.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidCharmUrl(s.to_string());
        let (namespace, rest) = s.split_once(':').ok_or_else(invalid)?;
        let namespace = Namespace::parse(namespace).ok_or_else(invalid)?;
        let (name, revision) = rest.rsplit_once('-').ok_or_else(invalid)?;
        let digits = !revision.is_empty() && revision.bytes().all(|b| b.is_ascii_digit());
        if !digits || (revision.len() > 1 && revision.starts_with('0')) {
            return Err(invalid());
        }
        let revision = revision.parse().map_err(|_| invalid())?;
        let name = name.parse().map_err(|_| invalid())?;
        Ok(CharmUrl::new(namespace, name, revision))
    }
}

text_conversions!(CharmUrl);

/// A parsed charm and the digest the store keeps with it: what a deploy
/// records, whether the charm came from a directory or by name.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedCharm {
    pub charm: Charm,
    /// Lowercase hex sha256: of the directory's contents for a local charm
    /// (see `charms::load_charm_dir`), of the name for a name-only charm. Equal
    /// digests mean the same charm, so deploying it again needs no new
    /// revision.
    pub sha256: String,
}

/// A charm: its identity, metadata and config options.
#[derive(Clone, Debug, PartialEq)]
pub struct Charm {
    /// Always names `meta`'s charm.
    url: CharmUrl,
    meta: CharmMeta,
    config: CharmConfig,
}

impl Charm {
    /// A charm read from its metadata and config, at `revision` in
    /// `namespace`; its URL takes the name from the metadata.
    pub fn new(namespace: Namespace, revision: u32, meta: CharmMeta, config: CharmConfig) -> Charm {
        Charm {
            url: CharmUrl::new(namespace, meta.name.clone(), revision),
            meta,
            config,
        }
    }

    /// The charm `deploy <name>` means when given no directory:
    /// `ch:<name>-0`, a principal with no endpoints but the implicit
    /// `juju-info`, no config options, and any base.
    pub fn name_only(name: ApplicationName) -> Charm {
        Charm::new(
            Namespace::Charmhub,
            0,
            CharmMeta::principal(name),
            CharmConfig::default(),
        )
    }

    /// A charm rebuilt from its stored parts.
    ///
    /// # Errors
    ///
    /// [`CharmError::UrlMismatch`] when `url` names another charm than
    /// `meta`.
    pub fn from_parts(
        url: CharmUrl,
        meta: CharmMeta,
        config: CharmConfig,
    ) -> Result<Charm, CharmError> {
        if url.name != meta.name {
            return Err(CharmError::UrlMismatch {
                url: url.to_string(),
                name: meta.name.to_string(),
            });
        }
        Ok(Charm { url, meta, config })
    }

    pub fn url(&self) -> &CharmUrl {
        &self.url
    }

    pub fn name(&self) -> &ApplicationName {
        &self.meta.name
    }

    pub fn meta(&self) -> &CharmMeta {
        &self.meta
    }

    pub fn config(&self) -> &CharmConfig {
        &self.config
    }

    pub fn is_subordinate(&self) -> bool {
        self.meta.subordinate
    }

    /// The same charm at another revision (the store numbers the
    /// revisions of a name).
    pub fn with_revision(self, revision: u32) -> Charm {
        Charm {
            url: self.url.with_revision(revision),
            ..self
        }
    }

    /// The base of an application deployed from this charm.
    ///
    /// - A requested base is used if the charm supports it (declares no
    ///   bases, or declares the same release at any risk).
    /// - With none requested, berth's default base ([`Base::DEFAULT`]) is
    ///   used if the charm supports it, and otherwise the first base the
    ///   charm declares (its most preferred).
    ///
    /// # Errors
    ///
    /// [`CharmError::UnsupportedBase`], naming the supported bases, when
    /// the requested base is not supported.
    pub fn choose_base(&self, requested: Option<Base>) -> Result<Base, CharmError> {
        match requested {
            Some(base) if self.meta.supports(&base) => Ok(base),
            Some(base) => Err(CharmError::UnsupportedBase {
                base,
                supported: self.meta.bases.clone(),
            }),
            None if self.meta.supports(&Base::DEFAULT) => Ok(Base::DEFAULT),
            None => Ok(self.meta.bases.first().copied().unwrap_or(Base::DEFAULT)),
        }
    }
}

// ---------------------------------------------------------------------------
// Relation inference for `integrate`.

/// One side of `integrate`: an application, and optionally one of its
/// endpoints (`wordpress`, `wordpress:db`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EndpointSpec {
    pub application: ApplicationName,
    pub endpoint: Option<EndpointName>,
}

impl fmt::Display for EndpointSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.endpoint {
            None => write!(f, "{}", self.application),
            Some(endpoint) => write!(f, "{}:{}", self.application, endpoint),
        }
    }
}

/// [`EndpointSpec`]'s grammar as a regular expression, as the API document
/// states it: `wordpress` or `wordpress:db`.
pub const ENDPOINT_SPEC_PATTERN: &str = concat!(
    "^",
    crate::domain::names::application_name_pattern!(),
    "(:[a-z][a-z0-9]*([_-][a-z0-9]+)*)?$"
);

impl FromStr for EndpointSpec {
    type Err = RelationError;

    /// Parses `<application>` or `<application>:<endpoint>`.
    ///
    /// # Errors
    ///
    /// [`RelationError::InvalidEndpoint`] for an empty part, an invalid
    /// application name or an invalid endpoint name.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || RelationError::InvalidEndpoint(s.to_string());
        let (application, endpoint) = match s.split_once(':') {
            None => (s, None),
            Some((application, endpoint)) => (application, Some(endpoint)),
        };
        let application = application.parse().map_err(|_| invalid())?;
        let endpoint = endpoint
            .map(|endpoint| endpoint.parse().map_err(|_| invalid()))
            .transpose()?;
        Ok(EndpointSpec {
            application,
            endpoint,
        })
    }
}

/// An endpoint of an application, printed `wordpress:db`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub application: ApplicationName,
    pub name: EndpointName,
    pub role: Role,
    pub relation: Relation,
}

impl Endpoint {
    /// Whether this is the implicit `juju-info` provider.
    pub fn is_implicit(&self) -> bool {
        self.name.as_str() == JUJU_INFO
            && self.relation.interface == JUJU_INFO
            && self.role == Role::Provider
    }

    /// Juju's `CanRelateTo`: two applications, one providing and one
    /// requiring the same interface.
    fn can_relate_to(&self, other: &Endpoint) -> bool {
        let roles_match = matches!(
            (self.role, other.role),
            (Role::Provider, Role::Requirer) | (Role::Requirer, Role::Provider)
        );
        self.application != other.application
            && roles_match
            && self.relation.interface == other.relation.interface
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.application, self.name)
    }
}

/// The relation `integrate` will add.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InferredRelation {
    pub requirer: Endpoint,
    pub provider: Endpoint,
    /// `Container` when either endpoint declares container scope: the
    /// relation then joins only units on the same machine.
    pub scope: Scope,
}

impl InferredRelation {
    /// Juju's relation key, requirer first: `wordpress:db mysql:server`.
    pub fn key(&self) -> String {
        format!("{} {}", self.requirer, self.provider)
    }

    pub fn interface(&self) -> &str {
        &self.requirer.relation.interface
    }
}

impl fmt::Display for InferredRelation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key())
    }
}

/// Why `integrate` cannot tell which relation is meant, in Juju's words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RelationError {
    #[error("invalid endpoint {0:?}")]
    InvalidEndpoint(String),
    #[error("application {application:?} has no {endpoint:?} relation")]
    NoSuchEndpoint {
        application: String,
        endpoint: String,
    },
    #[error("no relations found")]
    NoRelations,
    /// `query` is the two sides as given; `candidates` the relation keys
    /// they could mean, sorted.
    #[error("ambiguous relation: {query:?} could refer to {}", quote_join(.candidates))]
    Ambiguous {
        query: String,
        candidates: Vec<String>,
    },
}

fn quote_join(items: &[String]) -> String {
    items
        .iter()
        .map(|item| format!("{item:?}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The non-peer endpoints of `meta` that `spec` may mean.
fn spec_endpoints(spec: &EndpointSpec, meta: &CharmMeta) -> Result<Vec<Endpoint>, RelationError> {
    let all = meta.endpoints();
    if let Some(wanted) = &spec.endpoint {
        if !all.iter().any(|endpoint| &endpoint.name == wanted) {
            return Err(RelationError::NoSuchEndpoint {
                application: spec.application.to_string(),
                endpoint: wanted.to_string(),
            });
        }
    }
    Ok(all
        .into_iter()
        .filter(|endpoint| endpoint.role != Role::Peer)
        .filter(|endpoint| spec.endpoint.as_ref().is_none_or(|w| &endpoint.name == w))
        .map(|endpoint| Endpoint {
            application: spec.application.clone(),
            name: endpoint.name,
            role: endpoint.role,
            relation: endpoint.relation,
        })
        .collect())
}

/// Finds the one relation `integrate a b` means (Juju's `InferEndpoints`).
///
/// Each side is an application (optionally with an endpoint) and the
/// metadata of its charm. A candidate pairs a provider on one side with a
/// requirer of the same interface on the other (the implicit `juju-info`
/// provider included); a container-scoped candidate also needs a
/// subordinate on at least one side. If several candidates remain, those
/// using the implicit `juju-info` are dropped, so a subordinate that
/// requires both `juju-info` and something the principal declares joins on
/// the declared one.
///
/// # Errors
///
/// - [`RelationError::NoSuchEndpoint`] when a named endpoint does not exist;
/// - [`RelationError::NoRelations`] when nothing pairs up (including an
///   application with itself: those are peer relations, made by the charm);
/// - [`RelationError::Ambiguous`] when more than one relation remains,
///   listing every candidate.
pub fn infer_relation(
    a: (&EndpointSpec, &CharmMeta),
    b: (&EndpointSpec, &CharmMeta),
) -> Result<InferredRelation, RelationError> {
    let (a_spec, a_meta) = a;
    let (b_spec, b_meta) = b;
    let a_endpoints = spec_endpoints(a_spec, a_meta)?;
    let b_endpoints = spec_endpoints(b_spec, b_meta)?;
    let has_subordinate = a_meta.subordinate || b_meta.subordinate;
    let mut candidates = Vec::new();
    for ea in &a_endpoints {
        for eb in &b_endpoints {
            let container =
                ea.relation.scope == Scope::Container || eb.relation.scope == Scope::Container;
            if !ea.can_relate_to(eb) || (container && !has_subordinate) {
                continue;
            }
            let (requirer, provider) = if ea.role == Role::Requirer {
                (ea.clone(), eb.clone())
            } else {
                (eb.clone(), ea.clone())
            };
            candidates.push(InferredRelation {
                requirer,
                provider,
                scope: if container {
                    Scope::Container
                } else {
                    Scope::Global
                },
            });
        }
    }
    if candidates.len() > 1 {
        let explicit: Vec<&InferredRelation> = candidates
            .iter()
            .filter(|c| !c.requirer.is_implicit() && !c.provider.is_implicit())
            .collect();
        if let [only] = explicit.as_slice() {
            return Ok((*only).clone());
        }
        let mut keys: Vec<String> = candidates.iter().map(InferredRelation::key).collect();
        keys.sort();
        return Err(RelationError::Ambiguous {
            query: format!("{a_spec} {b_spec}"),
            candidates: keys,
        });
    }
    candidates.pop().ok_or(RelationError::NoRelations)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn meta(text: &str) -> CharmMeta {
        CharmMeta::parse_yaml(text).unwrap()
    }

    fn meta_error(text: &str) -> String {
        CharmMeta::parse_yaml(text).unwrap_err().to_string()
    }

    fn config(text: &str) -> CharmConfig {
        CharmConfig::parse_yaml(text).unwrap()
    }

    fn config_error(text: &str) -> String {
        CharmConfig::parse_yaml(text).unwrap_err().to_string()
    }

    fn base(s: &str) -> Base {
        s.parse().unwrap()
    }

    fn endpoint(s: &str) -> EndpointName {
        s.parse().unwrap()
    }

    fn settings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const WORDPRESS: &str = "
name: wordpress
summary: Blog engine
description: A blog.
provides:
  website:
    interface: http
requires:
  db:
    interface: mysql
    limit: 1
peers:
  loadbalancer: reversenginx
series: [jammy, focal]
";

    const MYSQL: &str = "
name: mysql
summary: Database
provides:
  db: mysql
  db-admin:
    interface: mysql-root
";

    const NTP: &str = "
name: ntp
summary: Network time for the principal's machine
subordinate: true
requires:
  juju-info:
    interface: juju-info
    scope: container
provides:
  ntpmaster: ntp
";

    const TELEGRAF: &str = "
name: telegraf
subordinate: true
requires:
  juju-info:
    interface: juju-info
    scope: container
  mysql:
    interface: mysql-root
    scope: container
provides:
  prometheus-client: prometheus
";

    // Endpoint names.

    #[test]
    fn endpoint_names_are_lowercase_parts_joined_by_hyphens_or_underscores() {
        for s in ["db", "website", "juju-info", "db_admin", "a1", "x-2-y"] {
            assert_eq!(endpoint(s).as_str(), s);
        }
    }

    #[test]
    fn endpoint_names_breaking_juju_rule_are_refused() {
        for s in [
            "",
            "Db",
            "1db",
            "-db",
            "db-",
            "db--admin",
            "db_",
            "db.admin",
            "db admin",
            "_db",
        ] {
            assert_eq!(
                s.parse::<EndpointName>().unwrap_err(),
                InvalidEndpointName(s.to_string()),
                "{s:?}"
            );
        }
    }

    // metadata.yaml

    #[test]
    fn a_principal_charm_reads_its_endpoints_and_series() {
        let m = meta(WORDPRESS);
        assert_eq!(m.name().as_str(), "wordpress");
        assert_eq!(m.summary(), "Blog engine");
        assert_eq!(m.description(), "A blog.");
        assert!(!m.is_subordinate());
        assert_eq!(m.provides()[&endpoint("website")], Relation::global("http"));
        assert_eq!(
            m.requires()[&endpoint("db")],
            Relation {
                interface: "mysql".into(),
                scope: Scope::Global,
                limit: Some(1),
                optional: false,
            }
        );
        assert_eq!(
            m.peers()[&endpoint("loadbalancer")],
            Relation::global("reversenginx")
        );
        assert_eq!(m.bases(), &[base("ubuntu@22.04"), base("ubuntu@20.04")]);
    }

    #[test]
    fn the_short_relation_form_is_a_global_relation_on_that_interface() {
        let m = meta(MYSQL);
        assert_eq!(m.provides()[&endpoint("db")], Relation::global("mysql"));
        assert_eq!(
            m.provides()[&endpoint("db-admin")],
            Relation::global("mysql-root")
        );
    }

    #[test]
    fn a_limit_of_zero_means_no_limit_and_optional_is_kept() {
        let m = meta("name: a\nrequires:\n  db: {interface: mysql, limit: 0, optional: true}\n");
        assert_eq!(
            m.requires()[&endpoint("db")],
            Relation {
                interface: "mysql".into(),
                scope: Scope::Global,
                limit: None,
                optional: true,
            }
        );
    }

    #[test]
    fn a_subordinate_like_ntp_requires_juju_info_with_container_scope() {
        let m = meta(NTP);
        assert!(m.is_subordinate());
        assert_eq!(
            m.requires()[&endpoint("juju-info")],
            Relation {
                interface: "juju-info".into(),
                scope: Scope::Container,
                limit: None,
                optional: false,
            }
        );
    }

    #[test]
    fn a_subordinate_needs_a_container_scoped_requirement() {
        assert_eq!(
            meta_error("name: logger\nsubordinate: true\nrequires:\n  host: juju-info-like\n"),
            r#"subordinate charm "logger" lacks "requires" relation with container scope"#
        );
        assert_eq!(
            meta_error("name: logger\nsubordinate: true\n"),
            r#"subordinate charm "logger" lacks "requires" relation with container scope"#
        );
        assert_eq!(
            meta_error(
                "name: logger\nsubordinate: true\nprovides:\n  x: {interface: y, scope: container}\n"
            ),
            r#"subordinate charm "logger" lacks "requires" relation with container scope"#
        );
    }

    #[test]
    fn every_charm_implicitly_provides_juju_info() {
        for m in [meta(WORDPRESS), meta(MYSQL), meta(NTP)] {
            let implicit: Vec<CharmEndpoint> = m
                .endpoints()
                .into_iter()
                .filter(CharmEndpoint::is_implicit)
                .collect();
            assert_eq!(
                implicit,
                vec![CharmEndpoint {
                    name: EndpointName::juju_info(),
                    role: Role::Provider,
                    relation: Relation::global("juju-info"),
                }],
                "{}",
                m.name()
            );
            assert!(!m.provides().contains_key(&EndpointName::juju_info()));
        }
    }

    #[test]
    fn endpoints_list_peers_providers_requirers_then_juju_info() {
        let names: Vec<(String, Role)> = meta(WORDPRESS)
            .endpoints()
            .into_iter()
            .map(|e| (e.name.to_string(), e.role))
            .collect();
        assert_eq!(
            names,
            vec![
                ("loadbalancer".to_string(), Role::Peer),
                ("website".to_string(), Role::Provider),
                ("db".to_string(), Role::Requirer),
                ("juju-info".to_string(), Role::Provider),
            ]
        );
    }

    #[test]
    fn declaring_juju_info_is_using_a_reserved_name() {
        assert_eq!(
            meta_error("name: app\nprovides:\n  juju-info: juju-info\n"),
            r#"charm "app" using a reserved relation name: "juju-info""#
        );
        assert_eq!(
            meta_error("name: app\nrequires:\n  juju-info: juju-info\n"),
            r#"charm "app" using a reserved relation name: "juju-info""#
        );
        assert_eq!(
            meta_error("name: app\npeers:\n  juju: cluster\n"),
            r#"charm "app" using a reserved relation name: "juju""#
        );
    }

    #[test]
    fn a_principal_may_not_require_juju_info_even_with_container_scope() {
        assert_eq!(
            meta_error(
                "name: app\nrequires:\n  juju-info: {interface: juju-info, scope: container}\n"
            ),
            r#"charm "app" using a reserved relation name: "juju-info""#
        );
    }

    #[test]
    fn providing_or_peering_on_a_reserved_interface_is_refused() {
        assert_eq!(
            meta_error("name: app\nprovides:\n  info: juju-info\n"),
            r#"charm "app" relation "info" using a reserved interface: "juju-info""#
        );
        assert_eq!(
            meta_error("name: app\npeers:\n  cluster: juju\n"),
            r#"charm "app" relation "cluster" using a reserved interface: "juju""#
        );
    }

    #[test]
    fn requiring_a_reserved_interface_under_another_name_is_allowed() {
        let m = meta("name: app\nrequires:\n  host: juju-info\n");
        assert_eq!(
            m.requires()[&endpoint("host")],
            Relation::global("juju-info")
        );
    }

    #[test]
    fn charms_named_juju_something_may_use_reserved_names() {
        let m = meta("name: juju-gui\nprovides:\n  juju-api: juju-api\n");
        assert_eq!(
            m.provides()[&endpoint("juju-api")],
            Relation::global("juju-api")
        );
    }

    #[test]
    fn a_relation_name_may_appear_in_only_one_of_provides_requires_and_peers() {
        assert_eq!(
            meta_error("name: app\nprovides:\n  db: mysql\nrequires:\n  db: pgsql\n"),
            r#"charm "app" using a duplicated relation name: "db""#
        );
        assert_eq!(
            meta_error("name: app\nrequires:\n  db: mysql\npeers:\n  db: pgsql\n"),
            r#"charm "app" using a duplicated relation name: "db""#
        );
    }

    #[test]
    fn endpoint_names_in_metadata_must_be_valid() {
        assert_eq!(
            meta_error("name: app\nprovides:\n  Web_Site: http\n"),
            r#"charm "app" has an invalid relation name: "Web_Site" is not a valid endpoint name: expected lowercase letters and digits, starting with a letter, in parts joined by "-" or "_""#
        );
    }

    #[test]
    fn a_charm_needs_a_valid_name() {
        assert_eq!(
            meta_error("summary: nameless\n"),
            "metadata: name: expected string, got nothing"
        );
        assert_eq!(
            meta_error("name: 42\n"),
            "metadata: name: expected string, got 42"
        );
        assert_eq!(
            meta_error("name: Word_Press\n"),
            r#""Word_Press" is not a valid charm name"#
        );
        assert_eq!(
            meta_error("name: app-2\n"),
            r#""app-2" is not a valid charm name"#
        );
    }

    #[test]
    fn empty_or_non_map_metadata_is_refused() {
        assert_eq!(
            meta_error(""),
            "metadata: (top level): expected map, got nothing"
        );
        assert_eq!(
            meta_error("- a\n- b\n"),
            r#"metadata: (top level): expected map, got ["a","b"]"#
        );
    }

    #[test]
    fn bad_yaml_is_reported_with_its_line() {
        let err = meta_error("name: app\nprovides:\n  db: [mysql\n");
        assert!(err.starts_with("invalid YAML: "), "{err}");
        assert!(err.contains("line 4"), "{err}");
        let err = meta_error("name: app\n  summary: x\n");
        assert!(err.contains("line 2"), "{err}");
    }

    #[test]
    fn duplicate_yaml_keys_are_refused() {
        let err = meta_error("name: app\nprovides:\n  db: mysql\n  db: pgsql\n");
        assert!(err.starts_with("invalid YAML: "), "{err}");
        assert!(err.contains("duplicate"), "{err}");
    }

    #[test]
    fn fields_of_the_wrong_shape_are_named_by_their_path() {
        for (text, message) in [
            (
                "name: a\nsubordinate: yes please\n",
                r#"metadata: subordinate: expected true or false, got "yes please""#,
            ),
            (
                "name: a\nprovides: [db]\n",
                r#"metadata: provides: expected map, got ["db"]"#,
            ),
            (
                "name: a\nprovides:\n  db: 5\n",
                r#"metadata: provides.db: expected an interface name or a map with "interface", got 5"#,
            ),
            (
                "name: a\nprovides:\n  db: \"\"\n",
                r#"metadata: provides.db: expected an interface name or a map with "interface", got """#,
            ),
            (
                "name: a\nrequires:\n  db: {scope: global}\n",
                "metadata: requires.db.interface: expected an interface name, got nothing",
            ),
            (
                "name: a\nrequires:\n  db: {interface: mysql, scope: machine}\n",
                r#"metadata: requires.db.scope: expected "global" or "container", got "machine""#,
            ),
            (
                "name: a\nrequires:\n  db: {interface: mysql, limit: -1}\n",
                "metadata: requires.db.limit: expected a whole number from 0, got -1",
            ),
            (
                "name: a\nrequires:\n  db: {interface: mysql, limit: many}\n",
                r#"metadata: requires.db.limit: expected a whole number from 0, got "many""#,
            ),
            (
                "name: a\nrequires:\n  db: {interface: mysql, optional: maybe}\n",
                r#"metadata: requires.db.optional: expected true or false, got "maybe""#,
            ),
            (
                "name: a\nsummary: [x]\n",
                r#"metadata: summary: expected string, got ["x"]"#,
            ),
            (
                "name: a\nseries: jammy\n",
                r#"metadata: series: expected list, got "jammy""#,
            ),
            (
                "name: a\nseries: [22]\n",
                "metadata: series[0]: expected a series name, got 22",
            ),
        ] {
            assert_eq!(meta_error(text), message, "{text}");
        }
    }

    #[test]
    fn unknown_metadata_keys_are_ignored() {
        let m = meta(
            "name: app\nmaintainer: someone\ntags: [web]\nstorage:\n  data: {type: filesystem}\n",
        );
        assert_eq!(m, CharmMeta::principal("app".parse().unwrap()));
    }

    #[test]
    fn old_style_series_become_bases() {
        let m = meta("name: app\nseries: [noble, jammy, focal]\n");
        assert_eq!(
            m.bases(),
            &[
                base("ubuntu@24.04"),
                base("ubuntu@22.04"),
                base("ubuntu@20.04")
            ]
        );
    }

    #[test]
    fn an_unknown_series_is_invalid() {
        assert_eq!(
            meta_error("name: app\nseries: [jammy, kubernetes]\n"),
            r#"charm "app" declares invalid series: "kubernetes""#
        );
    }

    #[test]
    fn new_style_bases_are_names_and_channels() {
        let m = meta(
            "name: app\nbases:\n  - name: ubuntu\n    channel: \"22.04\"\n  - {name: ubuntu, channel: 24.04/stable, architectures: [amd64]}\n",
        );
        assert_eq!(m.bases(), &[base("ubuntu@22.04"), base("ubuntu@24.04")]);
    }

    #[test]
    fn bases_may_also_be_written_as_base_strings() {
        let m = meta("name: app\nbases: [ubuntu@22.04, ubuntu@24.04/edge]\n");
        assert_eq!(
            m.bases(),
            &[base("ubuntu@22.04"), base("ubuntu@24.04/edge")]
        );
    }

    #[test]
    fn repeated_bases_are_kept_once_in_first_order() {
        let m = meta("name: app\nbases: [ubuntu@22.04, ubuntu@24.04, ubuntu@22.04/stable]\n");
        assert_eq!(m.bases(), &[base("ubuntu@22.04"), base("ubuntu@24.04")]);
    }

    #[test]
    fn an_unquoted_channel_is_refused_with_a_hint() {
        assert_eq!(
            meta_error("name: app\nbases:\n  - {name: ubuntu, channel: 22.04}\n"),
            r#"metadata: bases[0].channel: expected a quoted channel such as "22.04", got 22.04"#
        );
        assert_eq!(
            meta_error("name: app\nbases:\n  - {name: ubuntu}\n"),
            r#"metadata: bases[0].channel: expected a quoted channel such as "22.04", got nothing"#
        );
    }

    #[test]
    fn invalid_bases_are_refused_with_the_reason() {
        assert_eq!(
            meta_error("name: app\nbases:\n  - {name: centos, channel: \"7\"}\n"),
            r#"charm "app" declares an invalid base: unknown base "centos@7": expected an ubuntu or debian base"#
        );
        assert_eq!(
            meta_error("name: app\nbases:\n  - {name: ubuntu, channel: \"99.04\"}\n"),
            r#"charm "app" declares an invalid base: unknown base "ubuntu@99.04""#
        );
        assert_eq!(
            meta_error("name: app\nbases:\n  - {channel: \"22.04\"}\n"),
            r#"metadata: bases[0].name: expected an operating system name such as "ubuntu", got nothing"#
        );
        assert_eq!(
            meta_error("name: app\nbases: [7]\n"),
            r#"metadata: bases[0]: expected a map with "name" and "channel", got 7"#
        );
    }

    #[test]
    fn series_and_bases_together_are_refused() {
        assert_eq!(
            meta_error("name: app\nseries: [jammy]\nbases: [ubuntu@22.04]\n"),
            r#"charm "app" declares both series and bases: declare only bases"#
        );
    }

    #[test]
    fn a_charm_without_bases_supports_every_base() {
        let m = meta(MYSQL);
        assert!(m.bases().is_empty());
        assert!(m.supports(&base("ubuntu@20.04")));
        assert!(m.supports(&base("ubuntu@24.04/edge")));
    }

    #[test]
    fn a_charm_supports_its_bases_at_any_risk() {
        let m = meta(WORDPRESS);
        assert!(m.supports(&base("ubuntu@22.04/edge")));
        assert!(!m.supports(&base("ubuntu@24.04")));
    }

    #[test]
    fn metadata_round_trips_through_json() {
        for text in [WORDPRESS, MYSQL, NTP, TELEGRAF] {
            let m = meta(text);
            let json = serde_json::to_string(&m).unwrap();
            assert_eq!(serde_json::from_str::<CharmMeta>(&json).unwrap(), m);
        }
    }

    #[test]
    fn metadata_serializes_in_the_long_form() {
        let json = serde_json::to_value(meta(NTP)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "name": "ntp",
                "summary": "Network time for the principal's machine",
                "description": "",
                "subordinate": true,
                "provides": {"ntpmaster": {"interface": "ntp", "scope": "global", "optional": false}},
                "requires": {"juju-info": {"interface": "juju-info", "scope": "container", "optional": false}},
                "peers": {},
                "bases": [],
            })
        );
    }

    #[test]
    fn stored_metadata_is_checked_again_when_read_back() {
        let err =
            serde_json::from_str::<CharmMeta>(r#"{"name": "x", "subordinate": true}"#).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"subordinate charm "x" lacks "requires" relation with container scope"#
        );
    }

    // config.yaml

    const CONFIG: &str = r#"
options:
  port:
    type: int
    default: 80
    description: Port to listen on
  ratio:
    type: float
    default: 1
  debug:
    type: boolean
    default: false
  title:
    default: My Blog
  password:
    type: secret
  motd:
    type: string
    description: Message of the day
"#;

    #[test]
    fn config_options_have_types_defaults_and_descriptions() {
        let c = config(CONFIG);
        let port = c.option("port").unwrap();
        assert_eq!(port.kind(), OptionType::Int);
        assert_eq!(port.default(), Some(&Value::from(80)));
        assert_eq!(port.description(), "Port to listen on");
        assert_eq!(
            c.option("ratio").unwrap().default(),
            Some(&Value::from(1.0))
        );
        assert_eq!(
            c.option("debug").unwrap().default(),
            Some(&Value::from(false))
        );
        assert_eq!(c.option("password").unwrap().kind(), OptionType::Secret);
        assert_eq!(c.option("motd").unwrap().default(), None);
        assert_eq!(c.options().len(), 6);
    }

    #[test]
    fn an_option_without_a_type_is_a_string() {
        let c = config(CONFIG);
        let title = c.option("title").unwrap();
        assert_eq!(title.kind(), OptionType::String);
        assert_eq!(title.default(), Some(&Value::from("My Blog")));
    }

    #[test]
    fn defaults_are_the_options_that_have_one() {
        let expected: Settings = [
            ("debug", Value::from(false)),
            ("port", Value::from(80)),
            ("ratio", Value::from(1.0)),
            ("title", Value::from("My Blog")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(config(CONFIG).defaults(), expected);
    }

    #[test]
    fn an_empty_config_is_refused_as_in_juju() {
        assert_eq!(config_error(""), "invalid config: empty configuration");
        assert_eq!(
            config_error("other: 1\n"),
            "invalid config: empty configuration"
        );
    }

    #[test]
    fn an_options_key_with_nothing_under_it_means_no_options() {
        assert_eq!(config("options:\n"), CharmConfig::default());
        assert_eq!(config("options: {}\n"), CharmConfig::default());
    }

    #[test]
    fn an_unknown_option_type_is_refused() {
        assert_eq!(
            config_error("options:\n  x:\n    type: list\n"),
            r#"invalid config: option "x" has unknown type "list": expected string, int, float, boolean or secret"#
        );
    }

    #[test]
    fn a_default_of_the_wrong_type_is_refused() {
        for (text, message) in [
            (
                "options:\n  port: {type: int, default: \"80\"}\n",
                r#"invalid config default: option "port" expected int, got "80""#,
            ),
            (
                "options:\n  port: {type: int, default: 1.5}\n",
                r#"invalid config default: option "port" expected int, got 1.5"#,
            ),
            (
                "options:\n  debug: {type: boolean, default: \"yes\"}\n",
                r#"invalid config default: option "debug" expected boolean, got "yes""#,
            ),
            (
                "options:\n  ratio: {type: float, default: \"x\"}\n",
                r#"invalid config default: option "ratio" expected float, got "x""#,
            ),
            (
                "options:\n  name: {type: string, default: 8}\n",
                r#"invalid config default: option "name" expected string, got 8"#,
            ),
            (
                "options:\n  pw: {type: secret, default: hunter2}\n",
                r#"invalid config default: option "pw" expected secret, got "hunter2""#,
            ),
        ] {
            assert_eq!(config_error(text), message, "{text}");
        }
    }

    #[test]
    fn empty_string_defaults_are_accepted_for_strings_and_secrets() {
        let c = config(
            "options:\n  a: {type: string, default: \"\"}\n  b: {type: secret, default: \"\"}\n",
        );
        assert_eq!(c.option("a").unwrap().default(), Some(&Value::from("")));
        assert_eq!(c.option("b").unwrap().default(), Some(&Value::from("")));
    }

    #[test]
    fn config_fields_of_the_wrong_shape_are_named_by_their_path() {
        for (text, message) in [
            (
                "options: [a]\n",
                r#"invalid config: options: expected map, got ["a"]"#,
            ),
            (
                "options:\n  port: int\n",
                r#"invalid config: options.port: expected map, got "int""#,
            ),
            (
                "options:\n  port: {type: 5}\n",
                "invalid config: options.port.type: expected string, got 5",
            ),
            (
                "options:\n  port: {description: [a]}\n",
                r#"invalid config: options.port.description: expected string, got ["a"]"#,
            ),
            (
                "[options]\n",
                r#"invalid config: (top level): expected map with "options", got ["options"]"#,
            ),
        ] {
            assert_eq!(config_error(text), message, "{text}");
        }
    }

    #[test]
    fn bad_config_yaml_is_reported_with_its_line() {
        let err = config_error("options:\n  port: {type: int\n");
        assert!(err.starts_with("invalid YAML: "), "{err}");
        assert!(err.contains("line 3"), "{err}");
    }

    #[test]
    fn settings_are_validated_into_typed_values() {
        let typed = config(CONFIG)
            .validate(&settings(&[
                ("port", "8080"),
                ("ratio", "0.5"),
                ("debug", "true"),
                ("title", "Hello, world"),
                ("password", "secret:coh2uo2ji6m0ue9a7tj0"),
                ("motd", ""),
            ]))
            .unwrap();
        assert_eq!(
            serde_json::to_value(&typed).unwrap(),
            serde_json::json!({
                "debug": true,
                "motd": "",
                "password": "secret:coh2uo2ji6m0ue9a7tj0",
                "port": 8080,
                "ratio": 0.5,
                "title": "Hello, world",
            })
        );
    }

    #[test]
    fn an_unknown_setting_is_refused() {
        assert_eq!(
            config(CONFIG)
                .validate(&settings(&[("x", "1")]))
                .unwrap_err()
                .to_string(),
            r#"unknown option "x""#
        );
        assert_eq!(
            CharmConfig::default()
                .validate(&settings(&[("port", "1")]))
                .unwrap_err(),
            CharmError::UnknownOption("port".into())
        );
    }

    #[test]
    fn int_settings_must_be_whole_numbers() {
        let c = config(CONFIG);
        for (text, value) in [
            ("0", 0),
            ("-7", -7),
            ("+5", 5),
            ("9223372036854775807", i64::MAX),
        ] {
            assert_eq!(
                c.validate(&settings(&[("port", text)])).unwrap()["port"],
                Value::from(value)
            );
        }
        for text in ["abc", "", "1.5", "1e3", " 1", "9223372036854775808"] {
            assert_eq!(
                c.validate(&settings(&[("port", text)]))
                    .unwrap_err()
                    .to_string(),
                format!("option \"port\" expected int, got {text:?}")
            );
        }
    }

    #[test]
    fn float_settings_must_be_finite_numbers() {
        let c = config(CONFIG);
        for (text, value) in [("0.25", 0.25), ("3", 3.0), ("-1e3", -1000.0)] {
            assert_eq!(
                c.validate(&settings(&[("ratio", text)])).unwrap()["ratio"],
                Value::from(value)
            );
        }
        for text in ["half", "", "NaN", "inf", "-infinity"] {
            assert_eq!(
                c.validate(&settings(&[("ratio", text)]))
                    .unwrap_err()
                    .to_string(),
                format!("option \"ratio\" expected float, got {text:?}")
            );
        }
    }

    #[test]
    fn boolean_settings_take_go_boolean_words() {
        let c = config(CONFIG);
        for (text, value) in [
            ("true", true),
            ("True", true),
            ("TRUE", true),
            ("t", true),
            ("T", true),
            ("1", true),
            ("false", false),
            ("False", false),
            ("FALSE", false),
            ("f", false),
            ("F", false),
            ("0", false),
        ] {
            assert_eq!(
                c.validate(&settings(&[("debug", text)])).unwrap()["debug"],
                Value::from(value),
                "{text}"
            );
        }
        for text in ["yes", "no", "on", "", "tRuE"] {
            assert_eq!(
                c.validate(&settings(&[("debug", text)]))
                    .unwrap_err()
                    .to_string(),
                format!("option \"debug\" expected boolean, got {text:?}")
            );
        }
    }

    #[test]
    fn string_settings_take_any_text() {
        let c = config(CONFIG);
        for text in ["", "x", "80", "a=b", "ünïcode"] {
            assert_eq!(
                c.validate(&settings(&[("title", text)])).unwrap()["title"],
                Value::from(text)
            );
        }
    }

    #[test]
    fn secret_settings_are_secret_uris_or_empty() {
        let c = config(CONFIG);
        for text in ["secret:coh2uo2ji6m0ue9a7tj0", ""] {
            assert_eq!(
                c.validate(&settings(&[("password", text)])).unwrap()["password"],
                Value::from(text)
            );
        }
        for text in ["hunter2", "secret:", "https://example.com"] {
            assert_eq!(
                c.validate(&settings(&[("password", text)]))
                    .unwrap_err()
                    .to_string(),
                format!("option \"password\" expected secret, got {text:?}")
            );
        }
    }

    #[test]
    fn the_first_bad_setting_in_name_order_is_reported() {
        let err = config(CONFIG)
            .validate(&settings(&[("port", "x"), ("debug", "x"), ("zzz", "1")]))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"option "debug" expected boolean, got "x""#
        );
    }

    #[test]
    fn config_round_trips_through_json() {
        let c = config(CONFIG);
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<CharmConfig>(&json).unwrap(), c);
        assert_eq!(
            serde_json::to_value(config("options:\n  port: {type: int, default: 80}\n")).unwrap(),
            serde_json::json!({"options": {"port": {"type": "int", "description": "", "default": 80}}})
        );
    }

    // Charm URLs and charms.

    #[test]
    fn charm_urls_print_namespace_name_and_revision() {
        let name: ApplicationName = "wordpress".parse().unwrap();
        assert_eq!(
            CharmUrl::new(Namespace::Local, name.clone(), 0).to_string(),
            "local:wordpress-0"
        );
        assert_eq!(
            CharmUrl::new(Namespace::Charmhub, name, 12).to_string(),
            "ch:wordpress-12"
        );
    }

    #[test]
    fn charm_urls_parse_back() {
        for s in ["local:wordpress-0", "ch:my-app-3", "ch:app2b-10"] {
            let url: CharmUrl = s.parse().unwrap();
            assert_eq!(url.to_string(), s);
        }
        let url: CharmUrl = "ch:my-app-3".parse().unwrap();
        assert_eq!(url.namespace(), Namespace::Charmhub);
        assert_eq!(url.name().as_str(), "my-app");
        assert_eq!(url.revision(), 3);
    }

    #[test]
    fn malformed_charm_urls_are_refused() {
        for s in [
            "wordpress",
            "wordpress-0",
            "cs:wordpress-0",
            "local:wordpress",
            "local:wordpress-",
            "local:-0",
            "local:wordpress-01",
            "local:wordpress--1",
            "local:Word-0",
            "local:wordpress-4294967296",
        ] {
            assert_eq!(
                s.parse::<CharmUrl>().unwrap_err().to_string(),
                format!(
                    "invalid charm URL {s:?}: expected <local|ch>:<name>-<revision>, such as local:wordpress-0"
                ),
                "{s}"
            );
        }
    }

    #[test]
    fn charm_urls_serialize_as_strings() {
        let url: CharmUrl = "local:wordpress-2".parse().unwrap();
        assert_eq!(
            serde_json::to_string(&url).unwrap(),
            r#""local:wordpress-2""#
        );
        assert_eq!(
            serde_json::from_str::<CharmUrl>(r#""local:wordpress-2""#).unwrap(),
            url
        );
    }

    #[test]
    fn a_local_charm_takes_its_url_from_its_metadata() {
        let charm = Charm::new(Namespace::Local, 0, meta(WORDPRESS), CharmConfig::default());
        assert_eq!(charm.url().to_string(), "local:wordpress-0");
        assert_eq!(charm.name().as_str(), "wordpress");
        assert_eq!(
            charm.clone().with_revision(4).url().to_string(),
            "local:wordpress-4"
        );
    }

    #[test]
    fn a_name_only_charm_is_a_principal_with_nothing_but_juju_info() {
        let charm = Charm::name_only("wordpress".parse().unwrap());
        assert_eq!(charm.url().to_string(), "ch:wordpress-0");
        assert!(!charm.is_subordinate());
        assert!(charm.meta().bases().is_empty());
        assert!(charm.config().options().is_empty());
        let endpoints = charm.meta().endpoints();
        assert_eq!(endpoints.len(), 1);
        assert!(endpoints[0].is_implicit());
    }

    #[test]
    fn a_charm_is_rebuilt_from_stored_parts_only_if_its_url_matches() {
        let m = meta(MYSQL);
        let url: CharmUrl = "local:mysql-3".parse().unwrap();
        let charm = Charm::from_parts(url.clone(), m.clone(), CharmConfig::default()).unwrap();
        assert_eq!(charm.url(), &url);
        let other: CharmUrl = "local:wordpress-3".parse().unwrap();
        assert_eq!(
            Charm::from_parts(other, m, CharmConfig::default())
                .unwrap_err()
                .to_string(),
            r#"charm URL "local:wordpress-3" does not match the charm's name "mysql""#
        );
    }

    // Choosing a base.

    fn charm(text: &str) -> Charm {
        Charm::new(Namespace::Local, 0, meta(text), CharmConfig::default())
    }

    #[test]
    fn a_requested_base_the_charm_supports_is_used() {
        let c = charm("name: app\nbases: [ubuntu@22.04, ubuntu@24.04]\n");
        assert_eq!(
            c.choose_base(Some(base("ubuntu@22.04"))),
            Ok(base("ubuntu@22.04"))
        );
        assert_eq!(
            c.choose_base(Some(base("ubuntu@22.04/edge"))),
            Ok(base("ubuntu@22.04/edge"))
        );
    }

    #[test]
    fn a_requested_base_the_charm_does_not_support_is_refused_with_the_supported_ones() {
        let c = charm("name: app\nbases: [ubuntu@22.04, ubuntu@24.04]\n");
        assert_eq!(
            c.choose_base(Some(base("ubuntu@20.04")))
                .unwrap_err()
                .to_string(),
            r#"base "ubuntu@20.04" not supported by charm, the charm supported bases are: ubuntu@22.04, ubuntu@24.04"#
        );
    }

    #[test]
    fn without_a_request_the_default_base_is_used_when_supported() {
        assert_eq!(charm(MYSQL).choose_base(None), Ok(Base::DEFAULT));
        let c = charm("name: app\nseries: [jammy, noble]\n");
        assert_eq!(c.choose_base(None), Ok(Base::DEFAULT));
    }

    #[test]
    fn without_a_request_an_unsupported_default_gives_the_first_declared_base() {
        assert_eq!(charm(WORDPRESS).choose_base(None), Ok(base("ubuntu@22.04")));
    }

    #[test]
    fn a_charm_without_bases_takes_any_requested_base() {
        let c = Charm::name_only("app".parse().unwrap());
        assert_eq!(
            c.choose_base(Some(base("ubuntu@20.04"))),
            Ok(base("ubuntu@20.04"))
        );
    }

    // Relation inference.

    fn spec(s: &str) -> EndpointSpec {
        s.parse().unwrap()
    }

    fn infer(
        a: &str,
        a_meta: &CharmMeta,
        b: &str,
        b_meta: &CharmMeta,
    ) -> Result<InferredRelation, RelationError> {
        infer_relation((&spec(a), a_meta), (&spec(b), b_meta))
    }

    #[test]
    fn endpoint_specs_are_an_application_and_an_optional_endpoint() {
        assert_eq!(
            spec("wordpress"),
            EndpointSpec {
                application: "wordpress".parse().unwrap(),
                endpoint: None
            }
        );
        assert_eq!(spec("wordpress:db").endpoint, Some(endpoint("db")));
        assert_eq!(spec("wordpress:db").to_string(), "wordpress:db");
        for s in ["", ":db", "wordpress:", "Word:db", "wordpress:Db", "a:b:c"] {
            assert_eq!(
                s.parse::<EndpointSpec>().unwrap_err().to_string(),
                format!("invalid endpoint {s:?}"),
                "{s}"
            );
        }
    }

    #[test]
    fn a_principal_requiring_db_joins_one_providing_it() {
        let (wordpress, mysql) = (meta(WORDPRESS), meta(MYSQL));
        let relation = infer("wordpress", &wordpress, "mysql", &mysql).unwrap();
        assert_eq!(relation.key(), "wordpress:db mysql:db");
        assert_eq!(relation.interface(), "mysql");
        assert_eq!(relation.scope, Scope::Global);
        assert_eq!(relation.requirer.role, Role::Requirer);
        assert_eq!(relation.provider.role, Role::Provider);
        assert_eq!(relation.requirer.relation.limit, Some(1));
        let reversed = infer("mysql", &mysql, "wordpress", &wordpress).unwrap();
        assert_eq!(reversed, relation);
    }

    #[test]
    fn a_subordinate_joins_any_principal_through_implicit_juju_info() {
        let (ntp, mysql) = (meta(NTP), meta(MYSQL));
        let relation = infer("mysql", &mysql, "ntp", &ntp).unwrap();
        assert_eq!(relation.key(), "ntp:juju-info mysql:juju-info");
        assert_eq!(relation.scope, Scope::Container);
        assert!(relation.provider.is_implicit());
        let name_only = Charm::name_only("blog".parse().unwrap());
        let relation = infer("ntp", &ntp, "blog", name_only.meta()).unwrap();
        assert_eq!(relation.key(), "ntp:juju-info blog:juju-info");
        assert_eq!(relation.scope, Scope::Container);
    }

    #[test]
    fn an_explicit_relation_is_preferred_over_implicit_juju_info() {
        // telegraf requires juju-info and mysql-root; mysql provides both
        // (juju-info implicitly), so the declared interface wins.
        let (telegraf, mysql) = (meta(TELEGRAF), meta(MYSQL));
        let relation = infer("telegraf", &telegraf, "mysql", &mysql).unwrap();
        assert_eq!(relation.key(), "telegraf:mysql mysql:db-admin");
        assert_eq!(relation.scope, Scope::Container);
    }

    #[test]
    fn a_named_endpoint_narrows_the_candidates() {
        let (telegraf, mysql) = (meta(TELEGRAF), meta(MYSQL));
        let relation = infer("telegraf:juju-info", &telegraf, "mysql", &mysql).unwrap();
        assert_eq!(relation.key(), "telegraf:juju-info mysql:juju-info");
        let relation = infer("wordpress", &meta(WORDPRESS), "mysql:db", &mysql).unwrap();
        assert_eq!(relation.key(), "wordpress:db mysql:db");
    }

    #[test]
    fn a_named_endpoint_that_does_not_exist_is_reported() {
        assert_eq!(
            infer("wordpress:cache", &meta(WORDPRESS), "mysql", &meta(MYSQL))
                .unwrap_err()
                .to_string(),
            r#"application "wordpress" has no "cache" relation"#
        );
    }

    #[test]
    fn two_principals_with_nothing_in_common_have_no_relations() {
        let a = meta("name: a\nprovides:\n  web: http\n");
        let b = meta("name: b\nprovides:\n  web: http\n");
        assert_eq!(infer("a", &a, "b", &b), Err(RelationError::NoRelations));
        assert_eq!(RelationError::NoRelations.to_string(), "no relations found");
    }

    #[test]
    fn a_principal_may_require_juju_info_globally() {
        let a = meta("name: a\nrequires:\n  host: juju-info\n");
        let b = meta("name: b\n");
        let relation = infer("a", &a, "b", &b).unwrap();
        assert_eq!(relation.key(), "a:host b:juju-info");
        assert_eq!(relation.scope, Scope::Global);
    }

    #[test]
    fn a_container_scoped_relation_needs_a_subordinate_on_one_side() {
        let principal_container =
            meta("name: c\nrequires:\n  logs: {interface: syslog, scope: container}\n");
        let provider = meta("name: d\nprovides:\n  logs: syslog\n");
        assert_eq!(
            infer("c", &principal_container, "d", &provider),
            Err(RelationError::NoRelations)
        );
    }

    #[test]
    fn a_peer_endpoint_is_not_a_candidate_for_integrate() {
        let a = meta("name: a\npeers:\n  ring: cluster\n");
        let b = meta("name: b\nrequires:\n  ring: cluster\n");
        assert_eq!(
            infer("a:ring", &a, "b", &b),
            Err(RelationError::NoRelations)
        );
    }

    #[test]
    fn an_application_does_not_relate_to_itself() {
        let wordpress = meta(WORDPRESS);
        let loopback = meta("name: loop\nprovides:\n  out: x\nrequires:\n  in: x\n");
        assert_eq!(
            infer("loop", &loopback, "loop", &loopback),
            Err(RelationError::NoRelations)
        );
        assert_eq!(
            infer("wordpress", &wordpress, "wordpress", &wordpress),
            Err(RelationError::NoRelations)
        );
    }

    #[test]
    fn several_explicit_candidates_are_ambiguous_and_listed_in_order() {
        let app = meta("name: app\nrequires:\n  primary: mysql\n  replica: mysql\n");
        let err = infer("app", &app, "mysql", &meta(MYSQL)).unwrap_err();
        assert_eq!(
            err,
            RelationError::Ambiguous {
                query: "app mysql".into(),
                candidates: vec!["app:primary mysql:db".into(), "app:replica mysql:db".into()],
            }
        );
        assert_eq!(
            err.to_string(),
            r#"ambiguous relation: "app mysql" could refer to "app:primary mysql:db"; "app:replica mysql:db""#
        );
    }

    #[test]
    fn an_ambiguous_relation_lists_implicit_candidates_too() {
        let sub = meta(
            "name: sub\nsubordinate: true\nrequires:\n  juju-info: {interface: juju-info, scope: container}\n  host-a: {interface: juju-info, scope: container}\n",
        );
        let err = infer("sub", &sub, "mysql", &meta(MYSQL)).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"ambiguous relation: "sub mysql" could refer to "sub:host-a mysql:juju-info"; "sub:juju-info mysql:juju-info""#
        );
    }

    #[test]
    fn inferred_relations_print_their_key() {
        let relation = infer("wordpress", &meta(WORDPRESS), "mysql", &meta(MYSQL)).unwrap();
        assert_eq!(relation.to_string(), "wordpress:db mysql:db");
    }

    proptest! {
        #[test]
        fn the_documented_endpoint_pattern_agrees_with_the_parser(
            s in "[a-z0-9:_-]{0,8}|[a-z][a-z0-9-]{0,6}(:[a-z0-9_-]{0,8}){0,2}"
        ) {
            let matches = regex::Regex::new(ENDPOINT_SPEC_PATTERN).unwrap().is_match(&s);
            prop_assert_eq!(matches, s.parse::<EndpointSpec>().is_ok(), "{:?}", s);
        }

        #[test]
        fn the_metadata_parser_never_panics(s in any::<String>()) {
            let _ = CharmMeta::parse_yaml(&s);
            let _ = CharmConfig::parse_yaml(&s);
        }

        #[test]
        fn int_settings_round_trip_through_their_text(n in any::<i64>()) {
            let c = config("options:\n  n: {type: int}\n");
            let typed = c.validate(&settings(&[("n", &n.to_string())])).unwrap();
            prop_assert_eq!(&typed["n"], &Value::from(n));
        }

        #[test]
        fn valid_endpoint_names_parse_and_print_the_same(
            s in "[a-z][a-z0-9]{0,5}([_-][a-z0-9]{1,4}){0,3}"
        ) {
            prop_assert_eq!(s.parse::<EndpointName>().map(|e| e.to_string()), Ok(s.clone()));
        }

        #[test]
        fn charm_urls_round_trip(
            name in "[a-z][a-z0-9]{0,6}(-[a-z0-9]{0,3}[a-z][a-z0-9]{0,3}){0,2}",
            revision in any::<u32>(),
            local in any::<bool>(),
        ) {
            let namespace = if local { Namespace::Local } else { Namespace::Charmhub };
            let url = CharmUrl::new(namespace, name.parse().unwrap(), revision);
            prop_assert_eq!(url.to_string().parse::<CharmUrl>(), Ok(url));
        }
    }
}

//! Placement directives: where `deploy --to`, `add-unit --to` and
//! `add-machine` put a unit or a machine, bypassing berth's own choice.
//!
//! The grammar is Juju's (`core/instance/placement.go` and the `--to`
//! parsing of its `deploy` and `add-unit` commands), narrowed to what berth
//! supports:
//!
//! | written            | [`Placement`]                         |
//! |--------------------|---------------------------------------|
//! | `3`, `0/lxd/1`     | an existing machine or container      |
//! | `lxd`              | a new container on a new machine      |
//! | `lxd:3`            | a new container on machine 3          |
//! | `ssh:[user@]host[:port]` | an existing host, enlisted over SSH |
//! | `zone=us-east-1a`  | a provider directive, `key=value`     |
//! | `maas2.name`       | a provider-specific machine name      |
//! | `place-in=3`       | a new container on machine 3 (the placement spec's co-location) |
//! | `place-with=db`    | a new container on the least loaded machine running a unit of `db` |
//! | `scale-with=db`    | (deploy only) a new container beside every unit of `db`, now and later |
//!
//! `--to` takes a comma-separated list of these, one per unit
//! ([`parse_to_list`]). Every directive prints back in the form it was
//! parsed from.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::domain::names::{ApplicationName, ContainerType, MachineId, MachineIdError};
use crate::domain::words::text_conversions;

/// Container types Juju knows that berth does not support, so that asking
/// for one gets a clearer answer than "unknown scope".
const UNSUPPORTED_CONTAINER_TYPES: [&str; 2] = ["kvm", "lxc"];

/// The key of the one provider directive berth itself understands.
const ZONE_KEY: &str = "zone";

/// The placement spec's co-location directives.
const PLACE_IN_KEY: &str = "place-in";
const PLACE_WITH_KEY: &str = "place-with";
const SCALE_WITH_KEY: &str = "scale-with";

/// Where to put a unit or a new machine.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Placement {
    /// An existing machine or container: `3`, `0/lxd/1`.
    Machine(MachineId),
    /// A new lxd container: on a new machine (`lxd`), or on the existing
    /// machine numbered `host` (`lxd:3`). Containers do not nest, so the
    /// host is always a machine, never a container.
    NewContainer { host: Option<u64> },
    /// An existing host brought under berth's management over SSH:
    /// `ssh:ubuntu@10.0.0.3`.
    Ssh(SshTarget),
    /// A directive for the provider, `key=value`. berth understands `zone`
    /// (start the instance in that availability zone); other keys are
    /// passed to the provider, which refuses those it does not know.
    Provider(ProviderDirective),
    /// A provider-specific machine name, such as the hostname of a MAAS
    /// node to acquire.
    Hostname(Hostname),
    /// `place-in=3`: a new container on machine 3, as `lxd:3`.
    PlaceIn { host: u64 },
    /// `place-with=db`: a new container on the machine running a unit of
    /// `db` that holds the fewest units, chosen when the unit is added.
    PlaceWith(ApplicationName),
    /// `scale-with=db`, on deploy only: a unit in a new container beside
    /// every unit of `db`, then and whenever `db` gains or loses a unit.
    ScaleWith(ApplicationName),
}

/// What the model's provider can carry out of the placement directives,
/// so that a directive it cannot honour is refused before anything is
/// written (never an instance launched in its place).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlacementSupport<'a> {
    /// The provider's name, for messages.
    pub provider: &'a str,
    /// Whether it can start lxd containers on its machines.
    pub containers: bool,
    /// Why no host can be enlisted with `ssh:` (its agent would be told an
    /// address of the controller no host can reach); `None` when one can.
    pub ssh_refused: Option<&'a str>,
}

/// A placement directive that parses but that berth cannot honour with
/// the model's provider.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UnsupportedPlacement {
    #[error(
        "cannot honour placement {placement:?}: provider {provider:?} cannot start lxd containers"
    )]
    Containers { placement: String, provider: String },
    #[error(
        "cannot honour placement {placement:?}: provider {provider:?} cannot place on a named host \
         (expected a machine id, lxd[:<machine>] or zone=<zone>)"
    )]
    Hostname { placement: String, provider: String },
    #[error(
        "cannot honour placement {placement:?}: provider {provider:?} does not know the directive \
         {key:?} (the provider's only directive is zone=<zone>)"
    )]
    Directive {
        placement: String,
        provider: String,
        key: String,
    },
    #[error("cannot honour placement {placement:?}: {why}")]
    Ssh { placement: String, why: String },
}

impl Placement {
    /// Whether berth can carry this directive out with the model's
    /// provider.
    ///
    /// # Errors
    ///
    /// [`UnsupportedPlacement`], naming the directive and what the
    /// provider lacks.
    pub fn check_supported(
        &self,
        support: PlacementSupport<'_>,
    ) -> Result<(), UnsupportedPlacement> {
        let placement = self.to_string();
        let provider = support.provider.to_string();
        match self {
            Placement::Machine(_) => Ok(()),
            Placement::NewContainer { .. }
            | Placement::PlaceIn { .. }
            | Placement::PlaceWith(_)
            | Placement::ScaleWith(_)
                if support.containers =>
            {
                Ok(())
            }
            Placement::NewContainer { .. }
            | Placement::PlaceIn { .. }
            | Placement::PlaceWith(_)
            | Placement::ScaleWith(_) => Err(UnsupportedPlacement::Containers {
                placement,
                provider,
            }),
            // Enlisting an existing host works beside any cloud, when its
            // agent can reach the controller.
            Placement::Ssh(_) => match support.ssh_refused {
                None => Ok(()),
                Some(why) => Err(UnsupportedPlacement::Ssh {
                    placement,
                    why: why.to_string(),
                }),
            },
            Placement::Hostname(_) => Err(UnsupportedPlacement::Hostname {
                placement,
                provider,
            }),
            Placement::Provider(directive) if directive.key() == ZONE_KEY => Ok(()),
            Placement::Provider(directive) => Err(UnsupportedPlacement::Directive {
                placement,
                provider,
                key: directive.key().to_string(),
            }),
        }
    }
}

/// Why a string is not a placement directive, in Juju's words where Juju
/// has them.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("placement directive is empty")]
    Empty,
    /// A scope separator with nothing before it: `:3`.
    #[error("placement scope missing")]
    ScopeMissing,
    #[error("invalid value {value:?} for \"lxd\" scope: expected machine-id")]
    InvalidContainerHost { value: String },
    #[error(
        "invalid value {value:?} for \"lxd\" scope: expected the machine-id of a machine, not of a container"
    )]
    ContainerHostIsContainer { value: String },
    #[error("invalid value {value:?} for \"ssh\" scope: expected [user@]host[:port]")]
    InvalidSshTarget { value: String },
    #[error("invalid placement scope {0:?}: containers other than lxd are not supported")]
    UnsupportedContainer(String),
    #[error("invalid placement scope {0:?}: expected lxd or ssh")]
    UnknownScope(String),
    #[error("invalid value {value:?} for \"place-in\": expected the machine-id of a machine")]
    InvalidPlaceIn { value: String },
    #[error("invalid value {value:?} for {key:?}: expected an application name")]
    InvalidApplication { key: String, value: String },
    #[error("invalid placement directive {0:?}: expected <key>=<value>")]
    InvalidProviderDirective(String),
    #[error(transparent)]
    MachineId(#[from] MachineIdError),
    #[error("invalid hostname {0:?}")]
    InvalidHostname(String),
    #[error(
        "invalid placement directive {0:?}: expected a machine-id, lxd, lxd:<machine-id>, ssh:[user@]host[:port], <key>=<value> or a hostname"
    )]
    Unrecognised(String),
    /// A `--to` list with an empty entry: `4,5,,`.
    #[error("invalid --to parameter {0:?}")]
    EmptyToEntry(String),
    /// One entry of a `--to` list that is not a directive.
    #[error("invalid --to parameter {entry:?}: {source}")]
    InvalidToEntry {
        entry: String,
        #[source]
        source: Box<PlacementError>,
    },
}

impl Placement {
    /// The availability zone this directive asks for, if it asks for one.
    pub fn zone(&self) -> Option<&str> {
        match self {
            Placement::Provider(directive) if directive.key() == ZONE_KEY => {
                Some(directive.value())
            }
            _ => None,
        }
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::Machine(id) => write!(f, "{id}"),
            Placement::NewContainer { host: None } => write!(f, "{}", ContainerType::Lxd),
            Placement::NewContainer { host: Some(host) } => {
                write!(f, "{}:{host}", ContainerType::Lxd)
            }
            Placement::Ssh(target) => write!(f, "ssh:{target}"),
            Placement::Provider(directive) => write!(f, "{directive}"),
            Placement::Hostname(name) => write!(f, "{name}"),
            Placement::PlaceIn { host } => write!(f, "{PLACE_IN_KEY}={host}"),
            Placement::PlaceWith(application) => write!(f, "{PLACE_WITH_KEY}={application}"),
            Placement::ScaleWith(application) => write!(f, "{SCALE_WITH_KEY}={application}"),
        }
    }
}

impl FromStr for Placement {
    type Err = PlacementError;

    /// Parses one directive (see the module documentation for the forms).
    ///
    /// A `key=value` directive is recognised before scopes, so a value may
    /// hold a colon; otherwise everything before the first colon is the
    /// scope.
    ///
    /// # Errors
    ///
    /// - [`PlacementError::Empty`] for an empty string;
    /// - [`PlacementError::ScopeMissing`] for `:3`;
    /// - [`PlacementError::InvalidContainerHost`] and
    ///   [`PlacementError::ContainerHostIsContainer`] for `lxd:x` and
    ///   `lxd:0/lxd/1`;
    /// - [`PlacementError::InvalidSshTarget`] for `ssh:` without a host;
    /// - [`PlacementError::UnsupportedContainer`] for `kvm`, `kvm:1`, `lxc`;
    /// - [`PlacementError::UnknownScope`] for any other scope (`foo:1`);
    /// - [`PlacementError::InvalidProviderDirective`] for `=x`, `zone=`;
    /// - [`PlacementError::MachineId`] for a malformed machine id (`00`,
    ///   `0/lxd`);
    /// - [`PlacementError::Unrecognised`] for anything else.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() {
            return Err(PlacementError::Empty);
        }
        let colon = s.find(':');
        if let Some(equals) = s.find('=') {
            if colon.is_none_or(|colon| equals < colon) {
                let (key, value) = s.split_at(equals);
                let value = &value[1..];
                match key {
                    PLACE_IN_KEY => return parse_place_in(value),
                    PLACE_WITH_KEY | SCALE_WITH_KEY => {
                        let application =
                            value
                                .parse()
                                .map_err(|_| PlacementError::InvalidApplication {
                                    key: key.to_string(),
                                    value: value.to_string(),
                                })?;
                        return Ok(if key == PLACE_WITH_KEY {
                            Placement::PlaceWith(application)
                        } else {
                            Placement::ScaleWith(application)
                        });
                    }
                    _ => return s.parse().map(Placement::Provider),
                }
            }
        }
        if let Some((scope, value)) = s.split_once(':') {
            return parse_scoped(scope, value);
        }
        if s == ContainerType::Lxd.as_str() {
            return Ok(Placement::NewContainer { host: None });
        }
        if UNSUPPORTED_CONTAINER_TYPES.contains(&s) {
            return Err(PlacementError::UnsupportedContainer(s.to_string()));
        }
        if looks_like_machine_id(s) {
            return Ok(Placement::Machine(s.parse()?));
        }
        s.parse()
            .map(Placement::Hostname)
            .map_err(|_| PlacementError::Unrecognised(s.to_string()))
    }
}

/// Parses the machine of `place-in=<machine>`: a machine, not a container.
fn parse_place_in(value: &str) -> Result<Placement, PlacementError> {
    let host: MachineId = value.parse().map_err(|_| PlacementError::InvalidPlaceIn {
        value: value.to_string(),
    })?;
    if host.is_container() {
        return Err(PlacementError::InvalidPlaceIn {
            value: value.to_string(),
        });
    }
    Ok(Placement::PlaceIn {
        host: host.host_number(),
    })
}

/// Parses `scope:value`, `scope` being what came before the first colon.
fn parse_scoped(scope: &str, value: &str) -> Result<Placement, PlacementError> {
    match scope {
        "" => Err(PlacementError::ScopeMissing),
        "lxd" => {
            let host: MachineId =
                value
                    .parse()
                    .map_err(|_| PlacementError::InvalidContainerHost {
                        value: value.to_string(),
                    })?;
            if host.is_container() {
                return Err(PlacementError::ContainerHostIsContainer {
                    value: value.to_string(),
                });
            }
            Ok(Placement::NewContainer {
                host: Some(host.host_number()),
            })
        }
        "ssh" => value
            .parse()
            .map(Placement::Ssh)
            .map_err(|_| PlacementError::InvalidSshTarget {
                value: value.to_string(),
            }),
        other if UNSUPPORTED_CONTAINER_TYPES.contains(&other) => {
            Err(PlacementError::UnsupportedContainer(other.to_string()))
        }
        other => Err(PlacementError::UnknownScope(other.to_string())),
    }
}

/// Whether a bare directive is meant as a machine id: only machine ids hold
/// a `/`, and a name of digits alone would be taken for one (`00`).
fn looks_like_machine_id(s: &str) -> bool {
    s.contains('/') || s.bytes().all(|b| b.is_ascii_digit())
}

/// Parses the value of `--to`: comma-separated directives, one per unit, in
/// unit order.
///
/// # Guarantees
///
/// An empty string gives an empty list (no placement, as in Juju). Every
/// directive in the result printed and joined with commas parses back to
/// the same list.
///
/// # Errors
///
/// [`PlacementError::EmptyToEntry`] (`invalid --to parameter "4,5,,"`) when
/// an entry is empty; [`PlacementError::InvalidToEntry`], naming the entry
/// and the reason, when an entry is not a directive.
pub fn parse_to_list(s: &str) -> Result<Vec<Placement>, PlacementError> {
    if s.is_empty() {
        return Ok(Vec::new());
    }
    let entries: Vec<&str> = s.split(',').collect();
    if entries.iter().any(|entry| entry.is_empty()) {
        return Err(PlacementError::EmptyToEntry(s.to_string()));
    }
    entries
        .into_iter()
        .map(|entry| {
            entry
                .parse()
                .map_err(|source| PlacementError::InvalidToEntry {
                    entry: entry.to_string(),
                    source: Box::new(source),
                })
        })
        .collect()
}

/// The application a `scale-with=` directive among `placements` names:
/// the deployed application follows its units.
pub fn scale_with(placements: &[Placement]) -> Option<&ApplicationName> {
    placements.iter().find_map(|p| match p {
        Placement::ScaleWith(leader) => Some(leader),
        _ => None,
    })
}

/// Whether `s` is a DNS name by RFC 1123: dot-separated labels of letters,
/// digits and inner hyphens, up to 63 bytes each and 253 in all.
fn is_dns_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// The target of an `ssh:` directive: an optional user, a host name or IP
/// address, and an optional port (`ubuntu@10.0.0.3:2222`,
/// `root@[fe80::1]:2222`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SshTarget {
    /// The login user; `None` leaves it to SSH's configuration.
    user: Option<String>,
    host: String,
    /// `None`: SSH's own (22, unless its configuration says otherwise).
    port: Option<u16>,
}

impl SshTarget {
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn port(&self) -> Option<u16> {
        self.port
    }

    /// Whether `other` names the same host (whatever user or port reaches
    /// it): a host is enlisted once.
    pub fn same_host(&self, other: &SshTarget) -> bool {
        self.host.eq_ignore_ascii_case(&other.host)
    }
}

impl fmt::Display for SshTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(user) = &self.user {
            write!(f, "{user}@")?;
        }
        match self.port {
            Some(port) if self.host.contains(':') => write!(f, "[{}]:{port}", self.host),
            Some(port) => write!(f, "{}:{port}", self.host),
            None => f.write_str(&self.host),
        }
    }
}

/// Splits `host[:port]` (`[v6-address]:port` when the address has colons;
/// a bare IPv6 address has no port).
fn split_port(s: &str) -> Option<(&str, Option<u16>)> {
    let port = |p: &str| -> Option<u16> {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) || p.starts_with('0') {
            return None;
        }
        p.parse().ok()
    };
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after {
            "" => Some((host, None)),
            _ => Some((host, Some(port(after.strip_prefix(':')?)?))),
        };
    }
    match s.matches(':').count() {
        1 => {
            let (host, p) = s.split_once(':')?;
            Some((host, Some(port(p)?)))
        }
        _ => Some((s, None)),
    }
}

/// Whether `s` is a portable user name: letters, digits, `.`, `_` and `-`,
/// not starting with `-`.
fn is_user_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('-')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl FromStr for SshTarget {
    type Err = PlacementError;

    /// Parses `[user@]host[:port]`, the host a DNS name or an IP address
    /// (in brackets when it has a port and colons of its own).
    ///
    /// # Errors
    ///
    /// [`PlacementError::InvalidSshTarget`] when the user, host or port is
    /// empty or malformed.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (user, host_port) = match s.split_once('@') {
            Some((user, host)) => (Some(user), host),
            None => (None, s),
        };
        let (host, port) = split_port(host_port).unwrap_or(("", None));
        let user_ok = user.is_none_or(is_user_name);
        let host_ok = is_dns_name(host) || host.parse::<IpAddr>().is_ok();
        if user_ok && host_ok {
            Ok(SshTarget {
                user: user.map(str::to_string),
                host: host.to_string(),
                port,
            })
        } else {
            Err(PlacementError::InvalidSshTarget {
                value: s.to_string(),
            })
        }
    }
}

/// A provider placement directive, `key=value`: `zone=us-east-1a`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProviderDirective {
    /// Lowercase letters, digits and hyphens, starting with a letter.
    key: String,
    /// Not empty; no whitespace, control characters or commas (a comma
    /// would split a `--to` list).
    value: String,
}

impl ProviderDirective {
    /// `zone=<name>`: start the instance in availability zone `name`.
    ///
    /// # Errors
    ///
    /// [`PlacementError::InvalidProviderDirective`] when `name` is not a
    /// valid value (empty, or holding whitespace or a comma).
    pub fn zone(name: &str) -> Result<ProviderDirective, PlacementError> {
        format!("{ZONE_KEY}={name}").parse()
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn value(&self) -> &str {
        &self.value
    }
}

impl fmt::Display for ProviderDirective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.key, self.value)
    }
}

impl FromStr for ProviderDirective {
    type Err = PlacementError;

    /// Parses `key=value`, splitting at the first `=`.
    ///
    /// # Errors
    ///
    /// [`PlacementError::InvalidProviderDirective`] when the key or the
    /// value breaks the rules on [`ProviderDirective`]'s fields.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || PlacementError::InvalidProviderDirective(s.to_string());
        let (key, value) = s.split_once('=').ok_or_else(invalid)?;
        let key_ok = key.starts_with(|c: char| c.is_ascii_lowercase())
            && key
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        let value_ok = !value.is_empty()
            && value
                .chars()
                .all(|c| !c.is_whitespace() && !c.is_control() && c != ',');
        if key_ok && value_ok {
            Ok(ProviderDirective {
                key: key.to_string(),
                value: value.to_string(),
            })
        } else {
            Err(invalid())
        }
    }
}

/// A provider-specific machine name, such as a MAAS node's hostname: a DNS
/// name that the placement grammar does not read as something else (a
/// machine id such as `12`, or a container type such as `lxd`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Hostname(String);

impl Hostname {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Hostname {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for Hostname {
    type Err = PlacementError;

    /// # Errors
    ///
    /// [`PlacementError::InvalidHostname`] when `s` is not a DNS name, or is
    /// one the placement grammar reads otherwise.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let taken = looks_like_machine_id(s)
            || s == ContainerType::Lxd.as_str()
            || UNSUPPORTED_CONTAINER_TYPES.contains(&s);
        if is_dns_name(s) && !taken {
            Ok(Hostname(s.to_string()))
        } else {
            Err(PlacementError::InvalidHostname(s.to_string()))
        }
    }
}

text_conversions!(Placement);

#[cfg(test)]
mod tests {
    use super::*;

    fn support(containers: bool) -> PlacementSupport<'static> {
        PlacementSupport {
            provider: "sim",
            containers,
            ssh_refused: None,
        }
    }

    fn check(directive: &str, containers: bool) -> Result<(), String> {
        directive
            .parse::<Placement>()
            .unwrap()
            .check_supported(support(containers))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn co_location_directives_parse_print_back_and_need_containers() {
        assert_eq!(
            "place-in=3".parse::<Placement>(),
            Ok(Placement::PlaceIn { host: 3 })
        );
        assert_eq!(
            "place-with=db".parse::<Placement>(),
            Ok(Placement::PlaceWith("db".parse().unwrap()))
        );
        assert_eq!(
            "scale-with=db".parse::<Placement>(),
            Ok(Placement::ScaleWith("db".parse().unwrap()))
        );
        for directive in ["place-in=3", "place-with=db", "scale-with=db"] {
            let placement: Placement = directive.parse().unwrap();
            assert_eq!(placement.to_string(), directive);
            assert_eq!(check(directive, true), Ok(()));
            assert_eq!(
                check(directive, false),
                Err(format!(
                    "cannot honour placement {directive:?}: provider \"sim\" cannot start lxd containers"
                ))
            );
        }
        for (bad, message) in [
            (
                "place-in=0/lxd/1",
                r#"invalid value "0/lxd/1" for "place-in": expected the machine-id of a machine"#,
            ),
            (
                "place-in=x",
                r#"invalid value "x" for "place-in": expected the machine-id of a machine"#,
            ),
            (
                "place-with=Not_An_App",
                r#"invalid value "Not_An_App" for "place-with": expected an application name"#,
            ),
        ] {
            assert_eq!(
                bad.parse::<Placement>().unwrap_err().to_string(),
                message,
                "{bad}"
            );
        }
        assert_eq!(
            parse_to_list("place-with=db,place-in=1").unwrap(),
            vec![
                Placement::PlaceWith("db".parse().unwrap()),
                Placement::PlaceIn { host: 1 }
            ]
        );
    }

    #[test]
    fn machines_zones_and_containers_where_the_provider_has_them_are_honoured() {
        for directive in ["3", "0/lxd/1", "zone=sim-a", "lxd", "lxd:2"] {
            assert_eq!(check(directive, true), Ok(()), "{directive}");
        }
    }

    #[test]
    fn containers_on_a_provider_without_them_are_refused() {
        assert_eq!(
            check("lxd:1", false),
            Err(
                "cannot honour placement \"lxd:1\": provider \"sim\" cannot start lxd containers"
                    .into()
            )
        );
    }

    #[test]
    fn hostnames_and_unknown_directives_are_refused_naming_what_works() {
        assert_eq!(check("ssh:ubuntu@host.invalid", false), Ok(()));
        assert_eq!(
            check("no-such-host.example", true),
            Err("cannot honour placement \"no-such-host.example\": provider \"sim\" cannot place on a named host (expected a machine id, lxd[:<machine>] or zone=<zone>)".into())
        );
        assert_eq!(
            check("foo=bar", true),
            Err("cannot honour placement \"foo=bar\": provider \"sim\" does not know the directive \"foo\" (the provider's only directive is zone=<zone>)".into())
        );
    }
    use proptest::prelude::*;

    fn placement(s: &str) -> Placement {
        s.parse().unwrap()
    }

    fn placement_error(s: &str) -> String {
        s.parse::<Placement>().unwrap_err().to_string()
    }

    #[test]
    fn a_machine_id_places_on_that_existing_machine() {
        assert_eq!(placement("3"), Placement::Machine(MachineId::new(3)));
        assert_eq!(placement("0"), Placement::Machine(MachineId::new(0)));
    }

    #[test]
    fn a_container_id_places_in_that_existing_container() {
        assert_eq!(
            placement("0/lxd/1"),
            Placement::Machine(MachineId::lxd_container(0, 1))
        );
    }

    #[test]
    fn lxd_alone_asks_for_a_new_container_on_a_new_machine() {
        assert_eq!(placement("lxd"), Placement::NewContainer { host: None });
    }

    #[test]
    fn lxd_with_a_machine_asks_for_a_new_container_on_that_machine() {
        assert_eq!(
            placement("lxd:3"),
            Placement::NewContainer { host: Some(3) }
        );
    }

    #[test]
    fn the_lxd_scope_needs_a_machine_id_in_juju_words() {
        assert_eq!(
            placement_error("lxd:x"),
            r#"invalid value "x" for "lxd" scope: expected machine-id"#
        );
        assert_eq!(
            placement_error("lxd:"),
            r#"invalid value "" for "lxd" scope: expected machine-id"#
        );
        assert_eq!(
            placement_error("lxd:01"),
            r#"invalid value "01" for "lxd" scope: expected machine-id"#
        );
        assert_eq!(
            placement_error("lxd:lxd:0"),
            r#"invalid value "lxd:0" for "lxd" scope: expected machine-id"#
        );
    }

    #[test]
    fn a_new_container_cannot_go_inside_a_container() {
        assert_eq!(
            placement_error("lxd:0/lxd/1"),
            r#"invalid value "0/lxd/1" for "lxd" scope: expected the machine-id of a machine, not of a container"#
        );
    }

    #[test]
    fn a_zone_directive_asks_for_an_availability_zone() {
        let p = placement("zone=us-east-1a");
        assert_eq!(p.zone(), Some("us-east-1a"));
        assert_eq!(
            p,
            Placement::Provider(ProviderDirective::zone("us-east-1a").unwrap())
        );
        match p {
            Placement::Provider(directive) => {
                assert_eq!(directive.key(), "zone");
                assert_eq!(directive.value(), "us-east-1a");
            }
            other => panic!("expected a provider directive, got {other:?}"),
        }
    }

    #[test]
    fn other_key_value_directives_are_left_to_the_provider() {
        let p = placement("system-id=abc123");
        assert_eq!(p.zone(), None);
        match p {
            Placement::Provider(directive) => {
                assert_eq!(directive.key(), "system-id");
                assert_eq!(directive.value(), "abc123");
            }
            other => panic!("expected a provider directive, got {other:?}"),
        }
    }

    #[test]
    fn a_key_value_directive_is_read_before_any_scope_so_its_value_may_hold_a_colon() {
        let p = placement("zone=nova:host1");
        assert_eq!(p.zone(), Some("nova:host1"));
    }

    #[test]
    fn a_key_value_directive_needs_a_lowercase_key_and_a_value() {
        for s in [
            "=a", "zone=", "Zone=a", "1zone=a", "zone=a b", "zo ne=a", "zone=\t",
        ] {
            assert_eq!(
                placement_error(s),
                format!("invalid placement directive {s:?}: expected <key>=<value>"),
                "{s:?}"
            );
        }
    }

    #[test]
    fn a_zone_name_cannot_hold_a_comma() {
        assert_eq!(
            ProviderDirective::zone("a,b").unwrap_err().to_string(),
            r#"invalid placement directive "zone=a,b": expected <key>=<value>"#
        );
    }

    #[test]
    fn ssh_places_on_an_existing_host() {
        match placement("ssh:ubuntu@10.10.0.3") {
            Placement::Ssh(target) => {
                assert_eq!(target.user(), Some("ubuntu"));
                assert_eq!(target.host(), "10.10.0.3");
            }
            other => panic!("expected ssh, got {other:?}"),
        }
        match placement("ssh:host.example.com") {
            Placement::Ssh(target) => {
                assert_eq!(target.user(), None);
                assert_eq!(target.host(), "host.example.com");
            }
            other => panic!("expected ssh, got {other:?}"),
        }
    }

    #[test]
    fn an_ssh_host_may_be_an_ipv6_address() {
        match placement("ssh:ubuntu@fe80::1") {
            Placement::Ssh(target) => {
                assert_eq!(target.host(), "fe80::1");
                assert_eq!(target.port(), None);
            }
            other => panic!("expected ssh, got {other:?}"),
        }
    }

    #[test]
    fn an_ssh_target_may_name_a_port() {
        for (written, host, port) in [
            ("ssh:root@127.0.0.1:2222", "127.0.0.1", Some(2222)),
            ("ssh:host.example.com:22", "host.example.com", Some(22)),
            ("ssh:root@[fe80::1]:2222", "fe80::1", Some(2222)),
            ("ssh:[fe80::1]", "fe80::1", None),
        ] {
            match placement(written) {
                Placement::Ssh(target) => {
                    assert_eq!((target.host(), target.port()), (host, port), "{written}");
                }
                other => panic!("expected ssh, got {other:?}"),
            }
        }
        assert_eq!(
            placement("ssh:root@[fe80::1]:2222").to_string(),
            "ssh:root@[fe80::1]:2222"
        );
        assert_eq!(
            placement("ssh:root@127.0.0.1:2222").to_string(),
            "ssh:root@127.0.0.1:2222"
        );
        let a: SshTarget = "ubuntu@Host.example:2222".parse().unwrap();
        let b: SshTarget = "root@host.example".parse().unwrap();
        assert!(a.same_host(&b));
    }

    #[test]
    fn the_ssh_scope_needs_a_host_a_sound_user_and_a_port_number() {
        for value in [
            "",
            "user@",
            "@host",
            "bad host",
            "-x@host",
            "a@b@c",
            "host-",
            "host:",
            "host:0",
            "host:65536",
            "host:22x",
            "host:022",
            "[fe80::1]:",
            "[fe80::1",
            "[]:22",
        ] {
            assert_eq!(
                placement_error(&format!("ssh:{value}")),
                format!("invalid value {value:?} for \"ssh\" scope: expected [user@]host[:port]"),
                "{value:?}"
            );
        }
    }

    #[test]
    fn a_bare_name_is_a_provider_specific_hostname() {
        match placement("maas2.name") {
            Placement::Hostname(name) => assert_eq!(name.as_str(), "maas2.name"),
            other => panic!("expected a hostname, got {other:?}"),
        }
        assert_eq!(placement("1a"), Placement::Hostname("1a".parse().unwrap()));
    }

    #[test]
    fn a_scope_separator_with_no_scope_is_a_missing_scope() {
        assert_eq!(placement_error(":3"), "placement scope missing");
        assert_eq!(placement_error(":"), "placement scope missing");
    }

    #[test]
    fn containers_other_than_lxd_are_not_supported() {
        for (s, scope) in [
            ("kvm:1", "kvm"),
            ("kvm", "kvm"),
            ("lxc:0", "lxc"),
            ("lxc", "lxc"),
        ] {
            assert_eq!(
                placement_error(s),
                format!(
                    "invalid placement scope {scope:?}: containers other than lxd are not supported"
                )
            );
        }
    }

    #[test]
    fn an_unknown_scope_is_refused() {
        assert_eq!(
            placement_error("foo:1"),
            r#"invalid placement scope "foo": expected lxd or ssh"#
        );
        assert_eq!(
            placement_error("#:3"),
            r##"invalid placement scope "#": expected lxd or ssh"##
        );
    }

    #[test]
    fn a_malformed_machine_id_is_refused_as_a_machine_id() {
        assert_eq!(
            placement_error("0/lxd"),
            r#""0/lxd" is not a valid machine id"#
        );
        assert_eq!(placement_error("00"), r#""00" is not a valid machine id"#);
        assert_eq!(
            placement_error("0/kvm/1"),
            r#""0/kvm/1" is not a valid machine id: container type "kvm" is not supported, expected lxd"#
        );
    }

    #[test]
    fn a_string_of_no_known_form_is_refused_with_the_forms_expected() {
        for s in ["bad name", "-x", "a_b", "é", "host.", " 1"] {
            assert_eq!(
                placement_error(s),
                format!(
                    "invalid placement directive {s:?}: expected a machine-id, lxd, lxd:<machine-id>, ssh:[user@]host[:port], <key>=<value> or a hostname"
                ),
                "{s:?}"
            );
        }
    }

    #[test]
    fn an_empty_directive_is_refused() {
        assert_eq!(placement_error(""), "placement directive is empty");
    }

    #[test]
    fn a_hostname_is_never_one_the_grammar_reads_otherwise() {
        for s in ["12", "lxd", "kvm", "lxc"] {
            assert_eq!(
                s.parse::<Hostname>().unwrap_err().to_string(),
                format!("invalid hostname {s:?}")
            );
        }
    }

    #[test]
    fn every_directive_prints_in_the_form_it_was_parsed_from() {
        for s in [
            "3",
            "0/lxd/1",
            "lxd",
            "lxd:3",
            "ssh:ubuntu@10.10.0.3",
            "ssh:host",
            "zone=us-east-1a",
            "system-id=x=y",
            "maas2.name",
        ] {
            assert_eq!(placement(s).to_string(), s);
        }
    }

    #[test]
    fn placements_serialize_as_their_string() {
        let p = placement("lxd:3");
        assert_eq!(serde_json::to_string(&p).unwrap(), r#""lxd:3""#);
        assert_eq!(serde_json::from_str::<Placement>(r#""lxd:3""#).unwrap(), p);
        let err = serde_json::from_str::<Placement>(r#"":3""#).unwrap_err();
        assert_eq!(err.to_string(), "placement scope missing");
    }

    // --to lists.

    #[test]
    fn a_to_list_gives_one_directive_per_unit_in_order() {
        assert_eq!(
            parse_to_list("123,lxd:1,1/lxd/2,foo,zone=us-east-1a").unwrap(),
            vec![
                Placement::Machine(MachineId::new(123)),
                Placement::NewContainer { host: Some(1) },
                Placement::Machine(MachineId::lxd_container(1, 2)),
                Placement::Hostname("foo".parse().unwrap()),
                Placement::Provider(ProviderDirective::zone("us-east-1a").unwrap()),
            ]
        );
    }

    #[test]
    fn an_empty_to_list_places_nothing() {
        assert_eq!(parse_to_list(""), Ok(vec![]));
    }

    #[test]
    fn a_to_list_with_an_empty_entry_is_refused_whole_in_juju_words() {
        for s in ["4,5,,", ",1", "1,,2", "1,", ","] {
            assert_eq!(
                parse_to_list(s).unwrap_err().to_string(),
                format!("invalid --to parameter {s:?}")
            );
        }
    }

    #[test]
    fn a_bad_entry_in_a_to_list_is_named_with_its_reason() {
        assert_eq!(
            parse_to_list("1,#:foo").unwrap_err().to_string(),
            r##"invalid --to parameter "#:foo": invalid placement scope "#": expected lxd or ssh"##
        );
        assert_eq!(
            parse_to_list("kvm:1").unwrap_err().to_string(),
            r#"invalid --to parameter "kvm:1": invalid placement scope "kvm": containers other than lxd are not supported"#
        );
        assert_eq!(
            parse_to_list("0,lxd:x").unwrap_err().to_string(),
            r#"invalid --to parameter "lxd:x": invalid value "x" for "lxd" scope: expected machine-id"#
        );
    }

    // Properties.

    fn placements() -> impl Strategy<Value = Placement> {
        let machine = prop_oneof![
            any::<u64>().prop_map(MachineId::new),
            (any::<u64>(), 0..u64::MAX).prop_map(|(h, k)| MachineId::lxd_container(h, k)),
        ]
        .prop_map(Placement::Machine);
        let container = any::<Option<u64>>().prop_map(|host| Placement::NewContainer { host });
        let host = prop_oneof![
            "[a-z0-9]([a-z0-9-]{0,6}[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]{0,6}[a-z0-9])?){0,2}",
            any::<IpAddr>().prop_map(|ip| ip.to_string()),
        ];
        let ssh =
            (proptest::option::of("[a-z_][a-z0-9_.-]{0,8}"), host).prop_map(|(user, host)| {
                let written = match user {
                    Some(user) => format!("{user}@{host}"),
                    None => host,
                };
                Placement::Ssh(written.parse().unwrap())
            });
        let provider = ("[a-z][a-z0-9-]{0,8}", "[!-+\\--~]{1,12}").prop_map(|(key, value)| {
            Placement::Provider(format!("{key}={value}").parse().unwrap())
        });
        let hostname = "[a-z][a-z0-9-]{0,6}[a-z0-9](\\.[a-z0-9]{1,5}){0,2}"
            .prop_filter_map("names a container type", |s| s.parse().ok())
            .prop_map(Placement::Hostname);
        prop_oneof![machine, container, ssh, provider, hostname]
    }

    proptest! {
        #[test]
        fn placements_round_trip_through_display(p in placements()) {
            prop_assert_eq!(p.to_string().parse::<Placement>(), Ok(p));
        }

        #[test]
        fn to_lists_round_trip_through_display(list in prop::collection::vec(placements(), 1..5)) {
            let written: Vec<String> = list.iter().map(|p| p.to_string()).collect();
            prop_assert_eq!(parse_to_list(&written.join(",")), Ok(list));
        }

        #[test]
        fn the_placement_parsers_never_panic_on_any_string(s in any::<String>()) {
            let _ = s.parse::<Placement>();
            let _ = parse_to_list(&s);
        }

        #[test]
        fn whatever_parses_as_a_placement_prints_as_it_was_written(
            s in "[0-9a-z/:@=#.-]{0,16}"
        ) {
            if let Ok(p) = s.parse::<Placement>() {
                prop_assert_eq!(p.to_string(), s);
            }
        }
    }
}

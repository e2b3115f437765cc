//! Names of the things berth manages: machine ids, unit names, application
//! names, and the container types that appear inside machine ids.
//!
//! Each name is parsed once, with Juju's rules, into a type that can only
//! hold a valid name: [`MachineId`] (`0`, `4`, `0/lxd/1`), [`UnitName`]
//! (`wordpress/7`) and [`ApplicationName`] (`wordpress`, `my-app`). They
//! print back in the form they were parsed from, serialize as that string,
//! and order the way a person reads them (machine `2` before `10`), so they
//! serve as map keys and in sorted status output.

use std::fmt;
use std::num::NonZeroU64;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::domain::words::{checked_name, text_conversions, word_enum};

/// A number as ids write it (no leading zeros), up to 20 digits: a
/// little more than a `u64` holds, so the pattern never refuses an id the
/// parser takes.
macro_rules! number_pattern {
    () => {
        "(0|[1-9][0-9]{0,19})"
    };
}

/// [`ApplicationName`]'s rule without anchors, to build patterns from.
macro_rules! application_name_pattern {
    () => {
        "[a-z][a-z0-9]*(-[a-z0-9]*[a-z][a-z0-9]*)*"
    };
}
pub(crate) use application_name_pattern;

/// [`ApplicationName`]'s rule as a regular expression, as the API document
/// states it.
pub const APPLICATION_NAME_PATTERN: &str = concat!("^", application_name_pattern!(), "$");

/// [`MachineId`]'s grammar as a regular expression: `4` or `4/lxd/0`.
pub const MACHINE_ID_PATTERN: &str =
    concat!("^", number_pattern!(), "(/lxd/", number_pattern!(), ")?$");

/// [`UnitName`]'s grammar as a regular expression: `wordpress/7`.
pub const UNIT_NAME_PATTERN: &str = concat!(
    "^",
    application_name_pattern!(),
    "/",
    number_pattern!(),
    "$"
);

/// A comma-separated list of application names: `wordpress,mysql`.
pub const APPLICATION_LIST_PATTERN: &str = concat!(
    "^",
    application_name_pattern!(),
    "(,",
    application_name_pattern!(),
    ")*$"
);

/// A comma-separated list of unit names: `wordpress/0,mysql/3`.
pub const UNIT_LIST_PATTERN: &str = concat!(
    "^",
    application_name_pattern!(),
    "/",
    number_pattern!(),
    "(,",
    application_name_pattern!(),
    "/",
    number_pattern!(),
    ")*$"
);

/// Machine numbers and ranges of them, comma-separated: `1-100,205`.
pub const MACHINE_RANGES_PATTERN: &str = concat!(
    "^",
    number_pattern!(),
    "(-",
    number_pattern!(),
    ")?(,",
    number_pattern!(),
    "(-",
    number_pattern!(),
    ")?)*$"
);

word_enum! {
    /// The kind of container a machine can be, or host.
    ///
    /// `None` is only meaningful in the `container` constraint (`container=none`
    /// asks for a machine that is not a container); machine ids and placement
    /// directives only ever name `lxd`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
    #[serde(rename_all = "lowercase")]
    pub enum ContainerType {
        None => "none",
        Lxd => "lxd",
    }
    /// A container type that berth does not know, in Juju's words.
    error InvalidContainerType("invalid container type {0:?}");
}

/// Whether `s` is a decimal number in Juju's form: `0`, or digits without a
/// leading zero. (`u64::from_str` alone would also take `+1` and `01`.)
pub(crate) fn parse_number(s: &str) -> Option<u64> {
    let digits_only = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let leading_zero = s.len() > 1 && s.starts_with('0');
    if digits_only && !leading_zero {
        s.parse().ok()
    } else {
        None
    }
}

/// The id of a machine: a machine (`4`) or an lxd container on one
/// (`4/lxd/0`).
///
/// Containers nest at most one level and are always lxd, so the id is a host
/// number and, for a container, the container's number on that host.
///
/// Ids order numerically, host first and a host before its containers:
/// `1 < 1/lxd/0 < 1/lxd/2 < 2 < 10`.
///
/// A container's number is at most 2^64 − 2 (the store keeps it in a
/// signed 64-bit column, so below 2^63).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct MachineId {
    host: u64,
    /// The lxd container's number on `host`, plus one; `None` for the
    /// host itself. (Plus one, so that `None` takes no room of its own:
    /// an id is 16 bytes, not 24, and a controller holds millions.)
    container: Option<NonZeroU64>,
}

/// Why a string is not a machine id, in Juju's words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MachineIdError {
    #[error("{0:?} is not a valid machine id")]
    Invalid(String),
    #[error(
        "{id:?} is not a valid machine id: container type {kind:?} is not supported, expected lxd"
    )]
    UnsupportedContainer { id: String, kind: String },
    #[error("{0:?} is not a valid machine id: containers inside containers are not supported")]
    Nested(String),
}

impl MachineId {
    /// Machine number `number` (not a container).
    pub const fn new(number: u64) -> MachineId {
        MachineId {
            host: number,
            container: None,
        }
    }

    /// The `k`-th lxd container on machine `host`: `host/lxd/k`.
    ///
    /// # Panics
    ///
    /// If `k` is 2^64 − 1, the one number a container cannot have.
    pub const fn lxd_container(host: u64, k: u64) -> MachineId {
        match NonZeroU64::new(k.wrapping_add(1)) {
            Some(container) => MachineId {
                host,
                container: Some(container),
            },
            None => panic!("a container's number is at most 2^64 - 2"),
        }
    }

    /// The number of the machine, or of the machine hosting this container.
    pub fn host_number(&self) -> u64 {
        self.host
    }

    /// The container's number on its host; `None` for a machine.
    pub fn container_number(&self) -> Option<u64> {
        self.container.map(|k| k.get() - 1)
    }

    /// The machine hosting this container; `None` for a machine.
    pub fn parent(&self) -> Option<MachineId> {
        self.container.map(|_| MachineId::new(self.host))
    }

    pub fn is_container(&self) -> bool {
        self.container.is_some()
    }

    /// `Lxd` for a container, `None` for a machine (as in the `container`
    /// constraint, where `none` means "not a container").
    pub fn container_type(&self) -> ContainerType {
        match self.container {
            Some(_) => ContainerType::Lxd,
            None => ContainerType::None,
        }
    }
}

impl fmt::Display for MachineId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.container_number() {
            None => write!(f, "{}", self.host),
            Some(k) => write!(f, "{}/{}/{}", self.host, ContainerType::Lxd, k),
        }
    }
}

impl FromStr for MachineId {
    type Err = MachineIdError;

    /// Parses `N` or `N/lxd/K`, numbers without leading zeros.
    ///
    /// # Errors
    ///
    /// `Invalid` for anything else in Juju's grammar (`0/lxd`, `00`,
    /// `0/lxd/01`, `-1`); `UnsupportedContainer` for a well-formed id with
    /// another container type (`0/kvm/1`); `Nested` for a container inside a
    /// container (`0/lxd/1/lxd/2`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || MachineIdError::Invalid(s.to_string());
        let mut parts = s.split('/');
        let host = parts.next().and_then(parse_number).ok_or_else(invalid)?;
        // Juju's grammar: a number, then any number of `/<type>/<number>`.
        let rest: Vec<&str> = parts.collect();
        let pairs = rest.chunks_exact(2);
        if !pairs.remainder().is_empty() {
            return Err(invalid());
        }
        let mut containers = Vec::new();
        for pair in pairs {
            let [kind, number] = pair else {
                return Err(invalid());
            };
            let kind_ok = !kind.is_empty() && kind.bytes().all(|b| b.is_ascii_lowercase());
            match (kind_ok, parse_number(number)) {
                (true, Some(number)) if number < u64::MAX => containers.push((*kind, number)),
                _ => return Err(invalid()),
            }
        }
        if let Some((kind, _)) = containers
            .iter()
            .find(|(kind, _)| *kind != ContainerType::Lxd.as_str())
        {
            return Err(MachineIdError::UnsupportedContainer {
                id: s.to_string(),
                kind: kind.to_string(),
            });
        }
        match containers.as_slice() {
            [] => Ok(MachineId::new(host)),
            [(_, k)] => Ok(MachineId::lxd_container(host, *k)),
            _ => Err(MachineIdError::Nested(s.to_string())),
        }
    }
}

text_conversions!(MachineId);

/// The name of an application, valid by Juju's rules: lowercase letters,
/// digits and hyphens, starting with a letter, and every hyphen-separated
/// part holding at least one letter (`wordpress`, `my-app`, `app-2b`; not
/// `burble-1`, `-app`, `my--app`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ApplicationName(String);

/// A string that is not an application name, in Juju's words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a valid application name")]
pub struct InvalidApplicationName(pub String);

impl ApplicationName {
    /// Juju's `^[a-z][a-z0-9]*(-[a-z0-9]*[a-z][a-z0-9]*)*$`, without a regex.
    fn is_valid(s: &str) -> bool {
        let mut parts = s.split('-');
        let first_ok = parts.next().is_some_and(|first| {
            first.starts_with(|c: char| c.is_ascii_lowercase())
                && first
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        });
        first_ok
            && parts.all(|part| {
                part.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                    && part.bytes().any(|b| b.is_ascii_lowercase())
            })
    }

    /// The name of this application's unit number `number`.
    pub fn unit(&self, number: u64) -> UnitName {
        UnitName::new(self.clone(), number)
    }
}

checked_name!(ApplicationName, InvalidApplicationName);

/// The name of a unit: its application and its number, `wordpress/7`.
///
/// Names order by application, then numerically by unit number
/// (`app/2 < app/10`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct UnitName {
    application: ApplicationName,
    number: u64,
}

/// A string that is not a unit name, in Juju's words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a valid unit name")]
pub struct InvalidUnitName(pub String);

impl UnitName {
    pub fn new(application: ApplicationName, number: u64) -> UnitName {
        UnitName {
            application,
            number,
        }
    }

    pub fn application(&self) -> &ApplicationName {
        &self.application
    }

    pub fn number(&self) -> u64 {
        self.number
    }
}

impl fmt::Display for UnitName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.application, self.number)
    }
}

impl FromStr for UnitName {
    type Err = InvalidUnitName;

    /// Parses `<application>/<number>`, the number without leading zeros.
    ///
    /// # Errors
    ///
    /// [`InvalidUnitName`] when there is no `/`, the application name is
    /// invalid, or the number is not a number in Juju's form.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidUnitName(s.to_string());
        let (application, number) = s.split_once('/').ok_or_else(invalid)?;
        let application = application.parse().map_err(|_| invalid())?;
        let number = parse_number(number).ok_or_else(invalid)?;
        Ok(UnitName::new(application, number))
    }
}

text_conversions!(UnitName);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Whether `pattern` and `parses` agree on `s`: the pattern takes every
    /// string the parser takes, and the parser every string the pattern
    /// takes but for numbers too big for a `u64`.
    fn agree(pattern: &str, s: &str, parses: bool) -> Result<(), TestCaseError> {
        let matches = regex::Regex::new(pattern).unwrap().is_match(s);
        prop_assert!(!parses || matches, "{s:?} parses but {pattern} refuses it");
        let too_big = s
            .split(|c: char| !c.is_ascii_digit())
            .any(|digits| digits.len() >= 20);
        prop_assert!(
            !matches || parses || too_big,
            "{s:?} matches {pattern} but does not parse"
        );
        Ok(())
    }

    proptest! {
        #[test]
        fn the_documented_patterns_agree_with_the_parsers(
            s in "[a-z0-9/-]{0,6}|[a-z][a-z0-9-]{0,8}(/(0|[1-9]|0[0-9]|[1-9][0-9]{0,20}|x))?|(0|1|01|[1-9][0-9]{0,20})(/(lxd|kvm|)(/([0-9]{1,3}|))?){0,2}"
        ) {
            agree(APPLICATION_NAME_PATTERN, &s, s.parse::<ApplicationName>().is_ok())?;
            agree(MACHINE_ID_PATTERN, &s, s.parse::<MachineId>().is_ok())?;
            agree(UNIT_NAME_PATTERN, &s, s.parse::<UnitName>().is_ok())?;
        }
    }

    #[test]
    fn container_types_parse_and_print_the_same_words() {
        for kind in [ContainerType::None, ContainerType::Lxd] {
            assert_eq!(kind.as_str().parse::<ContainerType>(), Ok(kind));
        }
    }

    #[test]
    fn an_unknown_container_type_is_refused_in_juju_words() {
        let err = "foo".parse::<ContainerType>().unwrap_err();
        assert_eq!(err.to_string(), r#"invalid container type "foo""#);
    }

    // Machine ids.

    fn machine(s: &str) -> MachineId {
        s.parse().unwrap()
    }

    fn machine_error(s: &str) -> String {
        s.parse::<MachineId>().unwrap_err().to_string()
    }

    #[test]
    fn a_machine_id_is_a_number() {
        assert_eq!(machine("0"), MachineId::new(0));
        assert_eq!(machine("4"), MachineId::new(4));
        assert_eq!(machine("1234"), MachineId::new(1234));
    }

    #[test]
    fn a_container_id_is_a_host_then_lxd_then_a_number() {
        assert_eq!(machine("0/lxd/1"), MachineId::lxd_container(0, 1));
        assert_eq!(machine("12/lxd/10"), MachineId::lxd_container(12, 10));
    }

    #[test]
    fn a_container_id_without_a_number_is_not_a_machine_id() {
        assert_eq!(
            machine_error("0/lxd"),
            r#""0/lxd" is not a valid machine id"#
        );
        assert_eq!(
            machine_error("0/lxd/"),
            r#""0/lxd/" is not a valid machine id"#
        );
    }

    #[test]
    fn machine_numbers_have_no_leading_zeros() {
        assert_eq!(machine_error("00"), r#""00" is not a valid machine id"#);
        assert_eq!(machine_error("01"), r#""01" is not a valid machine id"#);
        assert_eq!(
            machine_error("0/lxd/01"),
            r#""0/lxd/01" is not a valid machine id"#
        );
    }

    #[test]
    fn machine_numbers_are_plain_digits() {
        for s in [
            "", "-1", "+1", " 1", "1 ", "a", "1a", "0x1", "/lxd/1", "1//1",
        ] {
            assert_eq!(
                machine_error(s),
                format!("{s:?} is not a valid machine id"),
                "{s:?}"
            );
        }
    }

    #[test]
    fn a_machine_number_too_large_for_u64_is_not_a_machine_id() {
        assert_eq!(
            machine_error("18446744073709551616"),
            r#""18446744073709551616" is not a valid machine id"#
        );
        assert_eq!(machine("18446744073709551615"), MachineId::new(u64::MAX));
    }

    #[test]
    fn containers_other_than_lxd_are_not_supported() {
        assert_eq!(
            machine_error("0/kvm/1"),
            r#""0/kvm/1" is not a valid machine id: container type "kvm" is not supported, expected lxd"#
        );
    }

    #[test]
    fn a_container_type_in_a_machine_id_is_lowercase_letters() {
        assert_eq!(
            machine_error("0/LXD/1"),
            r#""0/LXD/1" is not a valid machine id"#
        );
        assert_eq!(
            machine_error("0/l1/1"),
            r#""0/l1/1" is not a valid machine id"#
        );
    }

    #[test]
    fn containers_nest_at_most_one_level() {
        assert_eq!(
            machine_error("0/lxd/1/lxd/2"),
            r#""0/lxd/1/lxd/2" is not a valid machine id: containers inside containers are not supported"#
        );
    }

    #[test]
    fn a_container_knows_its_parent_and_type() {
        let id = machine("3/lxd/2");
        assert_eq!(id.parent(), Some(MachineId::new(3)));
        assert!(id.is_container());
        assert_eq!(id.container_type(), ContainerType::Lxd);
        assert_eq!(id.host_number(), 3);
        assert_eq!(id.container_number(), Some(2));
    }

    #[test]
    fn container_numbers_go_up_to_two_to_the_64_less_two() {
        let last = machine("1/lxd/18446744073709551614");
        assert_eq!(last.container_number(), Some(u64::MAX - 1));
        assert_eq!(last.to_string(), "1/lxd/18446744073709551614");
        assert_eq!(machine("1/lxd/0").container_number(), Some(0));
        assert_eq!(
            machine_error("1/lxd/18446744073709551615"),
            r#""1/lxd/18446744073709551615" is not a valid machine id"#
        );
        // An id is 16 bytes: a controller holds one for each of millions
        // of machines, units and instances.
        assert_eq!(std::mem::size_of::<MachineId>(), 16);
    }

    #[test]
    fn a_machine_has_no_parent_and_is_not_a_container() {
        let id = machine("3");
        assert_eq!(id.parent(), None);
        assert!(!id.is_container());
        assert_eq!(id.container_type(), ContainerType::None);
        assert_eq!(id.host_number(), 3);
        assert_eq!(id.container_number(), None);
    }

    #[test]
    fn the_kth_container_on_a_host_prints_as_host_lxd_k() {
        assert_eq!(MachineId::lxd_container(4, 7).to_string(), "4/lxd/7");
        assert_eq!(MachineId::new(4).to_string(), "4");
    }

    #[test]
    fn machine_ids_order_numerically_with_containers_after_their_host() {
        let mut ids: Vec<MachineId> = ["10", "2", "1/lxd/10", "1", "1/lxd/2", "0"]
            .iter()
            .map(|s| machine(s))
            .collect();
        ids.sort();
        let printed: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
        assert_eq!(printed, ["0", "1", "1/lxd/2", "1/lxd/10", "2", "10"]);
    }

    #[test]
    fn machine_ids_serialize_as_their_string() {
        let id = MachineId::lxd_container(0, 1);
        assert_eq!(serde_json::to_string(&id).unwrap(), r#""0/lxd/1""#);
        assert_eq!(
            serde_json::from_str::<MachineId>(r#""0/lxd/1""#).unwrap(),
            id
        );
        let err = serde_json::from_str::<MachineId>(r#""0/lxd""#).unwrap_err();
        assert_eq!(err.to_string(), r#""0/lxd" is not a valid machine id"#);
    }

    #[test]
    fn machine_ids_work_as_map_keys() {
        let mut map = std::collections::BTreeMap::new();
        map.insert(machine("10"), "b");
        map.insert(machine("2"), "a");
        assert_eq!(map.keys().next(), Some(&MachineId::new(2)));
        let json = serde_json::to_string(&map).unwrap();
        assert_eq!(json, r#"{"2":"a","10":"b"}"#);
    }

    // Application names.

    fn application_error(s: &str) -> String {
        s.parse::<ApplicationName>().unwrap_err().to_string()
    }

    #[test]
    fn application_names_are_lowercase_words_joined_by_hyphens() {
        for s in [
            "wordpress",
            "my-app",
            "a",
            "mysql2",
            "app-2b",
            "a-b-c",
            "x-1y2",
        ] {
            let name: ApplicationName = s.parse().unwrap();
            assert_eq!(name.as_str(), s);
        }
    }

    #[test]
    fn every_hyphen_separated_part_of_an_application_name_needs_a_letter() {
        assert_eq!(
            application_error("burble-1"),
            r#""burble-1" is not a valid application name"#
        );
        assert_eq!(
            application_error("my-app-42"),
            r#""my-app-42" is not a valid application name"#
        );
    }

    #[test]
    fn an_application_name_starts_with_a_letter() {
        for s in ["1app", "-app", "", "-"] {
            assert_eq!(
                application_error(s),
                format!("{s:?} is not a valid application name")
            );
        }
    }

    #[test]
    fn an_application_name_has_no_empty_parts_or_other_characters() {
        for s in [
            "my--app", "app-", "My-app", "my_app", "my app", "app/0", "café",
        ] {
            assert_eq!(
                application_error(s),
                format!("{s:?} is not a valid application name"),
                "{s:?}"
            );
        }
    }

    #[test]
    fn application_names_serialize_as_their_string() {
        let name: ApplicationName = "my-app".parse().unwrap();
        assert_eq!(serde_json::to_string(&name).unwrap(), r#""my-app""#);
        assert_eq!(
            serde_json::from_str::<ApplicationName>(r#""my-app""#).unwrap(),
            name
        );
        let err = serde_json::from_str::<ApplicationName>(r#""burble-1""#).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#""burble-1" is not a valid application name"#
        );
    }

    // Unit names.

    fn unit_error(s: &str) -> String {
        s.parse::<UnitName>().unwrap_err().to_string()
    }

    #[test]
    fn a_unit_name_is_an_application_and_a_number() {
        let unit: UnitName = "app/7".parse().unwrap();
        assert_eq!(unit.application().as_str(), "app");
        assert_eq!(unit.number(), 7);
        assert_eq!(unit.to_string(), "app/7");
        let unit: UnitName = "my-app/0".parse().unwrap();
        assert_eq!(unit.application().as_str(), "my-app");
        assert_eq!(unit.number(), 0);
    }

    #[test]
    fn a_unit_name_needs_a_number_after_the_slash() {
        for s in ["x", "app", "app/", "app/x", "app/-1", "app/+1", "app/1/2"] {
            assert_eq!(
                unit_error(s),
                format!("{s:?} is not a valid unit name"),
                "{s:?}"
            );
        }
    }

    #[test]
    fn a_unit_number_has_no_leading_zeros() {
        assert_eq!(unit_error("app/01"), r#""app/01" is not a valid unit name"#);
    }

    #[test]
    fn a_unit_name_needs_a_valid_application_name() {
        assert_eq!(
            unit_error("burble-1/0"),
            r#""burble-1/0" is not a valid unit name"#
        );
        assert_eq!(unit_error("/0"), r#""/0" is not a valid unit name"#);
    }

    #[test]
    fn an_application_names_its_units() {
        let app: ApplicationName = "wordpress".parse().unwrap();
        assert_eq!(app.unit(3).to_string(), "wordpress/3");
    }

    #[test]
    fn unit_names_order_by_application_then_numerically() {
        let mut units: Vec<UnitName> = ["b/1", "a/10", "a/2", "a-b/0"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        units.sort();
        let printed: Vec<String> = units.iter().map(|u| u.to_string()).collect();
        assert_eq!(printed, ["a/2", "a/10", "a-b/0", "b/1"]);
    }

    #[test]
    fn unit_names_serialize_as_their_string() {
        let unit: UnitName = "app/7".parse().unwrap();
        assert_eq!(serde_json::to_string(&unit).unwrap(), r#""app/7""#);
        assert_eq!(
            serde_json::from_str::<UnitName>(r#""app/7""#).unwrap(),
            unit
        );
        let err = serde_json::from_str::<UnitName>(r#""x""#).unwrap_err();
        assert_eq!(err.to_string(), r#""x" is not a valid unit name"#);
    }

    // Properties.

    /// Valid application names, built from Juju's regex.
    fn application_names() -> impl Strategy<Value = String> {
        "[a-z][a-z0-9]{0,8}(-[a-z0-9]{0,3}[a-z][a-z0-9]{0,3}){0,3}"
    }

    fn machine_ids() -> impl Strategy<Value = MachineId> {
        prop_oneof![
            any::<u64>().prop_map(MachineId::new),
            (any::<u64>(), 0..u64::MAX).prop_map(|(h, k)| MachineId::lxd_container(h, k)),
        ]
    }

    proptest! {
        #[test]
        fn machine_ids_round_trip_through_display(id in machine_ids()) {
            prop_assert_eq!(id.to_string().parse::<MachineId>(), Ok(id));
        }

        #[test]
        fn machine_ids_order_as_their_numbers(a in machine_ids(), b in machine_ids()) {
            let key = |id: &MachineId| (id.host_number(), id.container_number());
            prop_assert_eq!(a.cmp(&b), key(&a).cmp(&key(&b)));
        }

        #[test]
        fn application_names_round_trip_through_display(s in application_names()) {
            let name: ApplicationName = s.parse().unwrap();
            prop_assert_eq!(name.to_string(), s);
        }

        #[test]
        fn unit_names_round_trip_through_display(s in application_names(), n in any::<u64>()) {
            let unit = UnitName::new(s.parse().unwrap(), n);
            prop_assert_eq!(unit.to_string().parse::<UnitName>(), Ok(unit));
        }

        #[test]
        fn name_parsers_never_panic_on_any_string(s in any::<String>()) {
            let _ = s.parse::<MachineId>();
            let _ = s.parse::<ApplicationName>();
            let _ = s.parse::<UnitName>();
        }

        #[test]
        fn name_parsers_never_panic_on_near_miss_strings(s in "[0-9a-z/-]{0,16}") {
            // Whatever parses prints back as the same string.
            if let Ok(id) = s.parse::<MachineId>() {
                prop_assert_eq!(id.to_string(), s.clone());
            }
            if let Ok(name) = s.parse::<ApplicationName>() {
                prop_assert_eq!(name.to_string(), s.clone());
            }
            if let Ok(unit) = s.parse::<UnitName>() {
                prop_assert_eq!(unit.to_string(), s);
            }
        }
    }
}

//! Names of the things berth manages: machine ids, unit names, application
//! names, and the container types that appear inside machine ids.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The kind of container a machine can be, or host.
///
/// `None` is only meaningful in the `container` constraint (`container=none`
/// asks for a machine that is not a container); machine ids and placement
/// directives only ever name `lxd`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContainerType {
    None,
    Lxd,
}

impl ContainerType {
    pub fn as_str(self) -> &'static str {
        match self {
            ContainerType::None => "none",
            ContainerType::Lxd => "lxd",
        }
    }
}

impl fmt::Display for ContainerType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A container type that berth does not know, in Juju's words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid container type {0:?}")]
pub struct InvalidContainerType(pub String);

impl FromStr for ContainerType {
    type Err = InvalidContainerType;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(ContainerType::None),
            "lxd" => Ok(ContainerType::Lxd),
            other => Err(InvalidContainerType(other.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

//! Constraints: what a user asks of the machines that will host their units.
//!
//! The vocabulary and the behaviour are Juju's. A [`Constraints`] value holds
//! every key in one of three states ([`Setting`]): *unset* (inherit), *empty*
//! (`mem=`: berth's default, and do not inherit) or a value (`mem=0` means
//! "do not filter on this key").

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::domain::names::ContainerType;

/// How one constraint key is set. The seeds give each state its own meaning.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Setting<T> {
    /// Not given: inherit from the next, more general level.
    #[default]
    Unset,
    /// Given with no value (`mem=`): use berth's default, do not inherit.
    Empty,
    /// Given with a value.
    Value(T),
}

impl<T> Setting<T> {
    pub fn is_unset(&self) -> bool {
        matches!(self, Setting::Unset)
    }

    /// The value, if one was given.
    pub fn value(&self) -> Option<&T> {
        match self {
            Setting::Value(v) => Some(v),
            _ => None,
        }
    }

    /// This setting, or `fallback` where this one is unset.
    pub fn or_inherit(&self, fallback: &Setting<T>) -> Setting<T>
    where
        T: Clone,
    {
        match self {
            Setting::Unset => fallback.clone(),
            set => set.clone(),
        }
    }
}

/// A minimum quantity: a number, or `max` (the largest the catalogue has).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Amount {
    AtLeast(u64),
    Max,
}

/// A processor architecture, in Juju's vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    Amd64,
    Arm64,
    Ppc64el,
    S390x,
    Riscv64,
}

impl Arch {
    pub const ALL: [Arch; 5] = [
        Arch::Amd64,
        Arch::Arm64,
        Arch::Ppc64el,
        Arch::S390x,
        Arch::Riscv64,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Arch::Amd64 => "amd64",
            Arch::Arm64 => "arm64",
            Arch::Ppc64el => "ppc64el",
            Arch::S390x => "s390x",
            Arch::Riscv64 => "riscv64",
        }
    }

    pub fn parse(s: &str) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| a.as_str() == s)
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of a list that may be negated with a leading `^`
/// (`spaces=db,^dmz`, `tags=ssd,^spot`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ListItem {
    pub name: String,
    /// `true` for `^name`: the machine must *not* have this.
    pub excluded: bool,
}

/// Everything a user can ask of a machine. Sizes are in MiB.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Constraints {
    pub arch: Setting<Arch>,
    pub container: Setting<ContainerType>,
    pub mem: Setting<Amount>,
    pub cores: Setting<Amount>,
    pub cpu_power: Setting<Amount>,
    pub root_disk: Setting<Amount>,
    pub root_disk_source: Setting<String>,
    pub instance_type: Setting<String>,
    pub virt_type: Setting<String>,
    pub tags: Setting<Vec<ListItem>>,
    pub zones: Setting<Vec<String>>,
    pub spaces: Setting<Vec<ListItem>>,
    pub allocate_public_ip: Setting<bool>,
    pub image_id: Setting<String>,
}

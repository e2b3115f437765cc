//! Constraints: what a user asks of the machines that will host their units.
//!
//! The vocabulary and the behaviour are Juju's. A [`Constraints`] value holds
//! every key in one of three states ([`Setting`]): *unset* (inherit), *empty*
//! (`mem=`: berth's default, and do not inherit) or a value (`mem=0` means
//! "do not filter on this key").
//!
//! # Syntax
//!
//! Space-separated `key=value` pairs, split at the first `=`; `\ ` escapes a
//! space inside a value (and `\\` a backslash). Sizes are MiB with optional
//! binary suffixes `M`, `G`, `T`, `P` (`mem=1.5G` is 1536 MiB, rounded up);
//! lists are comma-separated, and in `tags` and `spaces` a leading `^`
//! excludes. `mem`, `cores`, `cpu-power`, `root-disk` and `storage` also
//! take `max`.
//! The 2012 spec's names are aliases: `cpu` (in ECU: `cpu=2` is
//! `cpu-power=200`), `ec2-instance-type`, `ec2-zone`; `cpu-cores` is an alias
//! of `cores`.
//!
//! # Canonical form
//!
//! [`Constraints`] prints its keys in the fixed order of [`Key::ALL`], sizes
//! as `<MiB>M`, and that string parses back to the same value. It is the form
//! berth stores, serves and shows.
//!
//! Defaults (`cores=1`, `mem=2G`, ...) are not part of a `Constraints` value:
//! they are applied when an instance type is chosen (see
//! [`crate::domain::instance_types`]).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::domain::names::ContainerType;
use crate::domain::words::{text_conversions, word_enum};

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

word_enum! {
    /// A processor architecture, in Juju's vocabulary.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
    #[serde(rename_all = "lowercase")]
    pub enum Arch {
        Amd64 => "amd64",
        Arm64 => "arm64",
        Ppc64el => "ppc64el",
        S390x => "s390x",
        Riscv64 => "riscv64",
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
///
/// Serialized as its canonical string (`mem=4096M cores=2`), the same form
/// the API, the store and `status` use.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
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
    /// The cloud's role for the instance: on EC2 the name of an IAM
    /// instance profile.
    pub instance_role: Setting<String>,
    /// The least persistent disk the machine must have (`storage=50G`, or
    /// `max`); see [`crate::domain::instance_types::Requirements`] for how
    /// it meets `root-disk`.
    pub storage: Setting<Amount>,
}

word_enum! {
    /// A constraint key, declared (and so in [`Key::ALL`]) in the order the
    /// canonical form prints them.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
    #[serde(rename_all = "kebab-case")]
    pub enum Key {
        Arch => "arch",
        Container => "container",
        Mem => "mem",
        Cores => "cores",
        CpuPower => "cpu-power",
        RootDisk => "root-disk",
        RootDiskSource => "root-disk-source",
        InstanceType => "instance-type",
        VirtType => "virt-type",
        Tags => "tags",
        Zones => "zones",
        Spaces => "spaces",
        AllocatePublicIp => "allocate-public-ip",
        ImageId => "image-id",
        InstanceRole => "instance-role",
        Storage => "storage",
    }
}

impl Key {
    /// The key a name (canonical or alias) stands for, and how its value is
    /// read.
    fn lookup(name: &str) -> Option<(Key, ValueForm)> {
        let key = match name {
            "cpu-cores" => Key::Cores,
            "cpu" => return Some((Key::CpuPower, ValueForm::Ecu)),
            "ec2-instance-type" => Key::InstanceType,
            "ec2-zone" => Key::Zones,
            other => Key::parse(other)?,
        };
        Some((key, ValueForm::Native))
    }
}

/// How a value is written: in the key's own unit, or (the `cpu` alias) in
/// ECU, which is a hundredth of cpu-power.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ValueForm {
    Native,
    Ecu,
}

/// Why a constraints string was refused. The messages are Juju's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConstraintsError {
    /// A word with no `=` (or nothing before it).
    #[error("malformed constraint {0:?}")]
    Malformed(String),
    /// A key berth does not know.
    #[error("unknown constraint {0:?}")]
    Unknown(String),
    /// A known key with a value it cannot take; `key` is the name as the
    /// user wrote it.
    #[error("bad {key:?} constraint: {problem}")]
    Bad { key: String, problem: Problem },
}

/// What was wrong with one constraint's value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("must be a non-negative float with optional M/G/T/P suffix")]
    Size,
    #[error("must be a non-negative integer")]
    Integer,
    #[error("must be a non-negative float")]
    Float,
    #[error("{0:?} not recognized")]
    Arch(String),
    #[error("invalid container type {0:?}")]
    Container(String),
    #[error("must be \"true\" or \"false\"")]
    Bool,
    #[error("{0:?} is not a valid list: entries must be non-empty")]
    EmptyListEntry(String),
    #[error("{0:?} is not a valid zone list: zones cannot be excluded")]
    ExcludedZone(String),
    /// Juju's rule for space names: lowercase letters and digits, in
    /// words joined by single hyphens.
    #[error("{0:?} is not a valid space name")]
    SpaceName(String),
    #[error("already set")]
    AlreadySet,
}

impl Constraints {
    /// Parses one constraints string, such as `mem=4G cores=2`.
    ///
    /// # Errors
    ///
    /// [`ConstraintsError`] for a malformed word, an unknown key, a bad value
    /// or a key given twice (aliases included).
    pub fn parse(s: &str) -> Result<Constraints, ConstraintsError> {
        Constraints::parse_args([s])
    }

    /// Parses constraints given as several arguments (`mem=4G` `cores=2`,
    /// or whole strings); a key set in one argument may not be set again in
    /// another.
    ///
    /// # Errors
    ///
    /// As [`Constraints::parse`].
    pub fn parse_args<I, S>(args: I) -> Result<Constraints, ConstraintsError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut constraints = Constraints::default();
        let mut seen = Vec::new();
        for arg in args {
            for word in split_words(arg.as_ref()) {
                let (name, raw) = word
                    .split_once('=')
                    .filter(|(name, _)| !name.is_empty())
                    .ok_or_else(|| ConstraintsError::Malformed(word.clone()))?;
                let (key, form) =
                    Key::lookup(name).ok_or_else(|| ConstraintsError::Unknown(name.to_string()))?;
                let bad = |problem| ConstraintsError::Bad {
                    key: name.to_string(),
                    problem,
                };
                if seen.contains(&key) {
                    return Err(bad(Problem::AlreadySet));
                }
                seen.push(key);
                constraints.set(key, form, raw).map_err(bad)?;
            }
        }
        Ok(constraints)
    }

    fn set(&mut self, key: Key, form: ValueForm, raw: &str) -> Result<(), Problem> {
        match key {
            Key::Arch => {
                self.arch = setting(raw, |v| {
                    Arch::parse(v).ok_or_else(|| Problem::Arch(v.into()))
                })?
            }
            Key::Container => {
                self.container =
                    setting(raw, |v| v.parse().map_err(|_| Problem::Container(v.into())))?
            }
            Key::Mem => self.mem = setting(raw, parse_size)?,
            Key::Cores => self.cores = setting(raw, parse_count)?,
            Key::CpuPower if form == ValueForm::Ecu => self.cpu_power = setting(raw, parse_ecu)?,
            Key::CpuPower => self.cpu_power = setting(raw, parse_count)?,
            Key::RootDisk => self.root_disk = setting(raw, parse_size)?,
            Key::RootDiskSource => self.root_disk_source = setting(raw, text)?,
            Key::InstanceType => self.instance_type = setting(raw, text)?,
            Key::VirtType => self.virt_type = setting(raw, text)?,
            Key::Tags => self.tags = setting(raw, parse_list)?,
            Key::Zones => self.zones = setting(raw, parse_zones)?,
            Key::Spaces => self.spaces = setting(raw, parse_spaces)?,
            Key::AllocatePublicIp => self.allocate_public_ip = setting(raw, parse_bool)?,
            Key::ImageId => self.image_id = setting(raw, text)?,
            Key::InstanceRole => self.instance_role = setting(raw, text)?,
            Key::Storage => self.storage = setting(raw, parse_size)?,
        }
        Ok(())
    }

    /// True when no key is set at all (every key inherits).
    pub fn is_unset(&self) -> bool {
        self.keys().is_empty()
    }

    /// The keys that are set (empty or with a value), in canonical order.
    pub fn keys(&self) -> Vec<Key> {
        Key::ALL
            .into_iter()
            .filter(|k| !self.is_unset_key(*k))
            .collect()
    }

    fn is_unset_key(&self, key: Key) -> bool {
        match key {
            Key::Arch => self.arch.is_unset(),
            Key::Container => self.container.is_unset(),
            Key::Mem => self.mem.is_unset(),
            Key::Cores => self.cores.is_unset(),
            Key::CpuPower => self.cpu_power.is_unset(),
            Key::RootDisk => self.root_disk.is_unset(),
            Key::RootDiskSource => self.root_disk_source.is_unset(),
            Key::InstanceType => self.instance_type.is_unset(),
            Key::VirtType => self.virt_type.is_unset(),
            Key::Tags => self.tags.is_unset(),
            Key::Zones => self.zones.is_unset(),
            Key::Spaces => self.spaces.is_unset(),
            Key::AllocatePublicIp => self.allocate_public_ip.is_unset(),
            Key::ImageId => self.image_id.is_unset(),
            Key::InstanceRole => self.instance_role.is_unset(),
            Key::Storage => self.storage.is_unset(),
        }
    }

    /// The keys set here that a provider does not support: they are kept,
    /// the provider ignores them, and the caller reports them as warnings
    /// (see [`unsupported_warning`]).
    pub fn unsupported(&self, supported: &[Key]) -> Vec<Key> {
        self.keys()
            .into_iter()
            .filter(|k| !supported.contains(k))
            .collect()
    }
}

/// The warning shown for a key that the active provider ignores.
pub fn unsupported_warning(key: Key, provider: &str) -> String {
    format!(
        "constraint {:?} is not supported by provider {provider:?} and is ignored",
        key.as_str()
    )
}

/// Collapses model and application constraints into the one value a new
/// unit snapshots: every key not set on the application comes from the
/// model.
///
/// # Guarantees
///
/// A key set on the application (including set empty, `mem=`) always wins;
/// merging with unset constraints on either side changes nothing.
pub fn merge(model: &Constraints, application: &Constraints) -> Constraints {
    Constraints {
        arch: application.arch.or_inherit(&model.arch),
        container: application.container.or_inherit(&model.container),
        mem: application.mem.or_inherit(&model.mem),
        cores: application.cores.or_inherit(&model.cores),
        cpu_power: application.cpu_power.or_inherit(&model.cpu_power),
        root_disk: application.root_disk.or_inherit(&model.root_disk),
        root_disk_source: application
            .root_disk_source
            .or_inherit(&model.root_disk_source),
        instance_type: application.instance_type.or_inherit(&model.instance_type),
        virt_type: application.virt_type.or_inherit(&model.virt_type),
        tags: application.tags.or_inherit(&model.tags),
        zones: application.zones.or_inherit(&model.zones),
        spaces: application.spaces.or_inherit(&model.spaces),
        allocate_public_ip: application
            .allocate_public_ip
            .or_inherit(&model.allocate_public_ip),
        image_id: application.image_id.or_inherit(&model.image_id),
        instance_role: application.instance_role.or_inherit(&model.instance_role),
        storage: application.storage.or_inherit(&model.storage),
    }
}

/// Splits a constraints string into words at unescaped spaces, resolving
/// `\ ` to a space and `\\` to a backslash.
fn split_words(s: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if matches!(chars.peek(), Some(' ') | Some('\\')) => {
                word.extend(chars.next());
            }
            c if c.is_whitespace() => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// `""` is [`Setting::Empty`]; anything else is parsed by `parse`.
fn setting<T>(
    raw: &str,
    parse: impl FnOnce(&str) -> Result<T, Problem>,
) -> Result<Setting<T>, Problem> {
    if raw.is_empty() {
        Ok(Setting::Empty)
    } else {
        parse(raw).map(Setting::Value)
    }
}

fn text(raw: &str) -> Result<String, Problem> {
    Ok(raw.to_string())
}

/// A non-negative decimal number: digits with at most one point. Rejects
/// signs, exponents, `inf` and `NaN`, which a plain float parse would take.
fn parse_decimal(raw: &str) -> Option<f64> {
    let digits = raw.bytes().filter(u8::is_ascii_digit).count();
    let points = raw.bytes().filter(|b| *b == b'.').count();
    if digits == 0 || points > 1 || digits + points != raw.len() {
        return None;
    }
    raw.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// Rounds a non-negative finite value up to a whole number, if it fits.
fn ceil_to_u64(value: f64) -> Option<u64> {
    let up = value.ceil();
    // 2^64 is exactly representable; anything at or past it does not fit.
    (up < 18_446_744_073_709_551_616.0).then_some(up as u64)
}

fn parse_size(raw: &str) -> Result<Amount, Problem> {
    if raw == "max" {
        return Ok(Amount::Max);
    }
    let (number, multiplier) = match raw.as_bytes().last() {
        Some(b'M') => (&raw[..raw.len() - 1], 1.0),
        Some(b'G') => (&raw[..raw.len() - 1], 1024.0),
        Some(b'T') => (&raw[..raw.len() - 1], 1024.0 * 1024.0),
        Some(b'P') => (&raw[..raw.len() - 1], 1024.0 * 1024.0 * 1024.0),
        _ => (raw, 1.0),
    };
    parse_decimal(number)
        .and_then(|v| ceil_to_u64(v * multiplier))
        .map(Amount::AtLeast)
        .ok_or(Problem::Size)
}

fn parse_count(raw: &str) -> Result<Amount, Problem> {
    if raw == "max" {
        return Ok(Amount::Max);
    }
    if !raw.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Problem::Integer);
    }
    raw.parse()
        .map(Amount::AtLeast)
        .map_err(|_| Problem::Integer)
}

/// The `cpu` alias: ECU, a float, each ECU being 100 cpu-power.
fn parse_ecu(raw: &str) -> Result<Amount, Problem> {
    if raw == "max" {
        return Ok(Amount::Max);
    }
    parse_decimal(raw)
        .and_then(|v| ceil_to_u64(v * 100.0))
        .map(Amount::AtLeast)
        .ok_or(Problem::Float)
}

fn parse_bool(raw: &str) -> Result<bool, Problem> {
    match raw {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(Problem::Bool),
    }
}

fn parse_list(raw: &str) -> Result<Vec<ListItem>, Problem> {
    raw.split(',')
        .map(|entry| {
            let (name, excluded) = match entry.strip_prefix('^') {
                Some(name) => (name, true),
                None => (entry, false),
            };
            if name.is_empty() {
                return Err(Problem::EmptyListEntry(raw.to_string()));
            }
            Ok(ListItem {
                name: name.to_string(),
                excluded,
            })
        })
        .collect()
}

/// A list of space names (`db,^dmz`), each valid by Juju's rule.
fn parse_spaces(raw: &str) -> Result<Vec<ListItem>, Problem> {
    let spaces = parse_list(raw)?;
    match spaces.iter().find(|s| !is_space_name(&s.name)) {
        Some(bad) => Err(Problem::SpaceName(bad.name.clone())),
        None => Ok(spaces),
    }
}

/// Juju's `names.IsValidSpace`: `[a-z0-9]+(-[a-z0-9]+)*`.
fn is_space_name(name: &str) -> bool {
    !name.is_empty()
        && name.split('-').all(|word| {
            !word.is_empty()
                && word
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}

fn parse_zones(raw: &str) -> Result<Vec<String>, Problem> {
    raw.split(',')
        .map(|zone| match zone {
            "" => Err(Problem::EmptyListEntry(raw.to_string())),
            z if z.starts_with('^') => Err(Problem::ExcludedZone(raw.to_string())),
            z => Ok(z.to_string()),
        })
        .collect()
}

/// Writes a value so that [`split_words`] reads it back unchanged.
fn write_escaped(f: &mut fmt::Formatter<'_>, value: &str) -> fmt::Result {
    for c in value.chars() {
        match c {
            ' ' => f.write_str("\\ ")?,
            '\\' => f.write_str("\\\\")?,
            c => fmt::Write::write_char(f, c)?,
        }
    }
    Ok(())
}

impl fmt::Display for Amount {
    /// Counts print as plain numbers; sizes are printed by the caller with
    /// their `M` suffix.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Amount::AtLeast(n) => write!(f, "{n}"),
            Amount::Max => f.write_str("max"),
        }
    }
}

impl fmt::Display for ListItem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.excluded {
            f.write_str("^")?;
        }
        f.write_str(&self.name)
    }
}

impl fmt::Display for Constraints {
    /// The canonical form: set keys in [`Key::ALL`] order, sizes in MiB.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for key in self.keys() {
            if !first {
                f.write_str(" ")?;
            }
            first = false;
            write!(f, "{key}=")?;
            let value = match key {
                Key::Arch => self.arch.value().map(|v| v.to_string()),
                Key::Container => self.container.value().map(|v| v.to_string()),
                Key::Mem => self.mem.value().map(size_text),
                Key::Cores => self.cores.value().map(|v| v.to_string()),
                Key::CpuPower => self.cpu_power.value().map(|v| v.to_string()),
                Key::RootDisk => self.root_disk.value().map(size_text),
                Key::RootDiskSource => self.root_disk_source.value().cloned(),
                Key::InstanceType => self.instance_type.value().cloned(),
                Key::VirtType => self.virt_type.value().cloned(),
                Key::Tags => self.tags.value().map(|v| list_text(v)),
                Key::Zones => self.zones.value().map(|v| v.join(",")),
                Key::Spaces => self.spaces.value().map(|v| list_text(v)),
                Key::AllocatePublicIp => self.allocate_public_ip.value().map(|v| v.to_string()),
                Key::ImageId => self.image_id.value().cloned(),
                Key::InstanceRole => self.instance_role.value().cloned(),
                Key::Storage => self.storage.value().map(size_text),
            };
            if let Some(value) = value {
                write_escaped(f, &value)?;
            }
        }
        Ok(())
    }
}

fn size_text(amount: &Amount) -> String {
    match amount {
        Amount::AtLeast(mib) => format!("{mib}M"),
        Amount::Max => "max".to_string(),
    }
}

fn list_text(items: &[ListItem]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

impl std::str::FromStr for Constraints {
    type Err = ConstraintsError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Constraints::parse(s)
    }
}

text_conversions!(Constraints);

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Constraints {
        Constraints::parse(s).unwrap()
    }

    fn error(s: &str) -> String {
        Constraints::parse(s).unwrap_err().to_string()
    }

    #[test]
    fn mem_with_a_g_suffix_is_stored_in_mib_and_printed_canonically() {
        let c = parse("mem=4G");
        assert_eq!(c.mem, Setting::Value(Amount::AtLeast(4096)));
        assert_eq!(c.to_string(), "mem=4096M");
    }

    #[test]
    fn fractional_sizes_round_up_to_whole_mib() {
        assert_eq!(parse("mem=1.5G").mem, Setting::Value(Amount::AtLeast(1536)));
        assert_eq!(parse("mem=0.1").mem, Setting::Value(Amount::AtLeast(1)));
        assert_eq!(
            parse("root-disk=1.0001M").root_disk,
            Setting::Value(Amount::AtLeast(2))
        );
    }

    #[test]
    fn every_size_suffix_is_binary() {
        assert_eq!(parse("mem=3").mem, Setting::Value(Amount::AtLeast(3)));
        assert_eq!(parse("mem=3M").mem, Setting::Value(Amount::AtLeast(3)));
        assert_eq!(
            parse("mem=3G").mem,
            Setting::Value(Amount::AtLeast(3 * 1024))
        );
        assert_eq!(
            parse("mem=3T").mem,
            Setting::Value(Amount::AtLeast(3 * 1024 * 1024))
        );
        assert_eq!(
            parse("root-disk=2P").root_disk,
            Setting::Value(Amount::AtLeast(2 * 1024 * 1024 * 1024))
        );
    }

    #[test]
    fn canonical_form_orders_keys_the_same_way_whatever_the_input_order() {
        assert_eq!(parse("cores=2 mem=4G").to_string(), "mem=4096M cores=2");
        assert_eq!(
            parse("image-id=ami-1 zones=a,b arch=arm64 cpu-power=300 tags=ssd,^spot").to_string(),
            "arch=arm64 cpu-power=300 tags=ssd,^spot zones=a,b image-id=ami-1"
        );
    }

    #[test]
    fn every_key_is_understood() {
        let c = parse(
            "arch=amd64 container=lxd mem=1G cores=2 cpu-power=100 root-disk=8G root-disk-source=ebs \
             instance-type=m5.large virt-type=hvm tags=a,^b zones=z1,z2 spaces=db,^dmz \
             allocate-public-ip=true image-id=ami-0123 instance-role=agents storage=50G",
        );
        assert_eq!(c.keys(), Key::ALL.to_vec());
        assert_eq!(c.arch, Setting::Value(Arch::Amd64));
        assert_eq!(c.container, Setting::Value(ContainerType::Lxd));
        assert_eq!(c.cores, Setting::Value(Amount::AtLeast(2)));
        assert_eq!(c.cpu_power, Setting::Value(Amount::AtLeast(100)));
        assert_eq!(c.root_disk, Setting::Value(Amount::AtLeast(8192)));
        assert_eq!(c.root_disk_source, Setting::Value("ebs".into()));
        assert_eq!(c.instance_type, Setting::Value("m5.large".into()));
        assert_eq!(c.virt_type, Setting::Value("hvm".into()));
        assert_eq!(
            c.spaces,
            Setting::Value(vec![
                ListItem {
                    name: "db".into(),
                    excluded: false
                },
                ListItem {
                    name: "dmz".into(),
                    excluded: true
                },
            ])
        );
        assert_eq!(c.zones, Setting::Value(vec!["z1".into(), "z2".into()]));
        assert_eq!(c.allocate_public_ip, Setting::Value(true));
        assert_eq!(c.image_id, Setting::Value("ami-0123".into()));
        assert_eq!(c.instance_role, Setting::Value("agents".into()));
        assert_eq!(c.storage, Setting::Value(Amount::AtLeast(50 * 1024)));
        assert_eq!(parse(&c.to_string()), c);
    }

    #[test]
    fn cpu_cores_is_an_alias_of_cores() {
        assert_eq!(parse("cpu-cores=4"), parse("cores=4"));
    }

    #[test]
    fn cpu_in_ecu_means_a_hundred_cpu_power_each() {
        assert_eq!(parse("cpu=2"), parse("cpu-power=200"));
        assert_eq!(
            parse("cpu=1.5").cpu_power,
            Setting::Value(Amount::AtLeast(150))
        );
        assert_eq!(parse("cpu=2").to_string(), "cpu-power=200");
    }

    #[test]
    fn the_2012_ec2_names_are_aliases() {
        assert_eq!(
            parse("ec2-instance-type=m1.small"),
            parse("instance-type=m1.small")
        );
        assert_eq!(parse("ec2-zone=us-east-1a"), parse("zones=us-east-1a"));
    }

    #[test]
    fn max_is_accepted_for_mem_cores_cpu_power_and_root_disk() {
        let c = parse("mem=max cores=max cpu-power=max root-disk=max");
        assert_eq!(c.mem, Setting::Value(Amount::Max));
        assert_eq!(c.cores, Setting::Value(Amount::Max));
        assert_eq!(c.cpu_power, Setting::Value(Amount::Max));
        assert_eq!(c.root_disk, Setting::Value(Amount::Max));
        assert_eq!(
            c.to_string(),
            "mem=max cores=max cpu-power=max root-disk=max"
        );
    }

    #[test]
    fn an_empty_value_is_set_empty_not_unset() {
        let c = parse("mem= arch=");
        assert_eq!(c.mem, Setting::Empty);
        assert_eq!(c.arch, Setting::Empty);
        assert_eq!(c.cores, Setting::Unset);
        assert_eq!(c.to_string(), "arch= mem=");
    }

    #[test]
    fn zero_is_a_value_distinct_from_empty_and_unset() {
        let c = parse("mem=0 cores=0");
        assert_eq!(c.mem, Setting::Value(Amount::AtLeast(0)));
        assert_eq!(c.cores, Setting::Value(Amount::AtLeast(0)));
        assert_eq!(c.to_string(), "mem=0M cores=0");
    }

    #[test]
    fn an_escaped_space_stays_inside_the_value() {
        let c = parse(r"image-id=my\ image mem=1G");
        assert_eq!(c.image_id, Setting::Value("my image".into()));
        assert_eq!(c.to_string(), r"mem=1024M image-id=my\ image");
        assert_eq!(parse(&c.to_string()), c);
    }

    #[test]
    fn a_value_is_split_from_its_key_at_the_first_equals_sign() {
        assert_eq!(parse("image-id=a=b").image_id, Setting::Value("a=b".into()));
    }

    #[test]
    fn extra_whitespace_between_words_is_ignored() {
        assert_eq!(parse("  mem=1G \t cores=1  "), parse("mem=1G cores=1"));
        assert!(parse("").is_unset());
        assert_eq!(parse("").to_string(), "");
    }

    #[test]
    fn a_word_without_an_equals_sign_is_malformed() {
        assert_eq!(error("cheese"), r#"malformed constraint "cheese""#);
        assert_eq!(error("=4G"), r#"malformed constraint "=4G""#);
    }

    #[test]
    fn an_unknown_key_is_named_in_the_error() {
        assert_eq!(error("cheese=edam"), r#"unknown constraint "cheese""#);
    }

    #[test]
    fn bad_sizes_are_refused_with_the_expected_form() {
        for bad in [
            "mem=-1",
            "mem=1X",
            "mem=G",
            "mem=1.2.3G",
            "mem=inf",
            "mem=NaN",
            "mem=1e3",
            "mem=4g",
            "mem=+1",
        ] {
            assert_eq!(
                error(bad),
                r#"bad "mem" constraint: must be a non-negative float with optional M/G/T/P suffix"#,
                "{bad}"
            );
        }
        assert_eq!(
            error("root-disk=big"),
            r#"bad "root-disk" constraint: must be a non-negative float with optional M/G/T/P suffix"#
        );
    }

    #[test]
    fn a_size_too_large_to_hold_is_refused() {
        assert!(error("mem=99999999999999999999P").starts_with(r#"bad "mem" constraint"#));
    }

    #[test]
    fn bad_counts_are_refused_as_non_negative_integers() {
        for bad in ["cores=-1", "cores=1.5", "cores=two", "cores=inf"] {
            assert_eq!(
                error(bad),
                r#"bad "cores" constraint: must be a non-negative integer"#,
                "{bad}"
            );
        }
        assert_eq!(
            error("cpu-power=x"),
            r#"bad "cpu-power" constraint: must be a non-negative integer"#
        );
        assert_eq!(
            error("cpu-cores=x"),
            r#"bad "cpu-cores" constraint: must be a non-negative integer"#
        );
        assert_eq!(
            error("cpu=NaN"),
            r#"bad "cpu" constraint: must be a non-negative float"#
        );
    }

    #[test]
    fn an_unknown_arch_is_not_recognized() {
        assert_eq!(
            error("arch=cheese"),
            r#"bad "arch" constraint: "cheese" not recognized"#
        );
        for arch in Arch::ALL {
            assert_eq!(parse(&format!("arch={arch}")).arch, Setting::Value(arch));
        }
    }

    #[test]
    fn an_unknown_container_type_is_invalid() {
        assert_eq!(
            error("container=foo"),
            r#"bad "container" constraint: invalid container type "foo""#
        );
        assert_eq!(
            parse("container=none").container,
            Setting::Value(ContainerType::None)
        );
    }

    #[test]
    fn allocate_public_ip_takes_only_true_or_false() {
        assert_eq!(
            parse("allocate-public-ip=false").allocate_public_ip,
            Setting::Value(false)
        );
        assert_eq!(
            error("allocate-public-ip=yes"),
            r#"bad "allocate-public-ip" constraint: must be "true" or "false""#
        );
    }

    #[test]
    fn instance_role_is_a_name_kept_as_given() {
        let c = parse("instance-role=berth-agents mem=2G");
        assert_eq!(c.instance_role, Setting::Value("berth-agents".into()));
        assert_eq!(c.to_string(), "mem=2048M instance-role=berth-agents");
        assert_eq!(parse("instance-role=").instance_role, Setting::Empty);
        assert_eq!(
            error("instance-role=a instance-role=b"),
            r#"bad "instance-role" constraint: already set"#
        );
    }

    #[test]
    fn space_names_follow_jujus_rule() {
        for bad in ["42_space", "Db", "db-", "-db", "a--b", "d.b", "%inv#alid"] {
            assert_eq!(
                error(&format!("spaces=ok,^{bad}")),
                format!(r#"bad "spaces" constraint: {bad:?} is not a valid space name"#)
            );
        }
        let c = parse("spaces=db,^dmz-2,42");
        assert_eq!(c.to_string(), "spaces=db,^dmz-2,42");
    }

    #[test]
    fn lists_refuse_empty_entries() {
        assert_eq!(
            error("tags=a,,b"),
            r#"bad "tags" constraint: "a,,b" is not a valid list: entries must be non-empty"#
        );
        assert_eq!(
            error("spaces=^"),
            r#"bad "spaces" constraint: "^" is not a valid list: entries must be non-empty"#
        );
        assert_eq!(
            error("zones=a,"),
            r#"bad "zones" constraint: "a," is not a valid list: entries must be non-empty"#
        );
    }

    #[test]
    fn zones_cannot_be_excluded() {
        assert_eq!(
            error("zones=^a"),
            r#"bad "zones" constraint: "^a" is not a valid zone list: zones cannot be excluded"#
        );
    }

    #[test]
    fn a_key_given_twice_in_one_string_is_already_set() {
        assert_eq!(
            error("mem=1G mem=2G"),
            r#"bad "mem" constraint: already set"#
        );
    }

    #[test]
    fn a_key_given_twice_through_an_alias_is_already_set() {
        assert_eq!(
            error("cpu=1 cpu-power=100"),
            r#"bad "cpu-power" constraint: already set"#
        );
        assert_eq!(
            error("cores=1 cpu-cores=1"),
            r#"bad "cpu-cores" constraint: already set"#
        );
        assert_eq!(
            error("zones=a ec2-zone=b"),
            r#"bad "ec2-zone" constraint: already set"#
        );
    }

    #[test]
    fn a_key_given_twice_across_arguments_is_already_set() {
        let err = Constraints::parse_args(["mem=1G cores=2", "mem=2G"]).unwrap_err();
        assert_eq!(err.to_string(), r#"bad "mem" constraint: already set"#);
        let ok = Constraints::parse_args(["mem=1G", "cores=2"]).unwrap();
        assert_eq!(ok.to_string(), "mem=1024M cores=2");
    }

    #[test]
    fn merge_takes_every_key_the_application_leaves_unset_from_the_model() {
        // The 2012 spec's footnote: model `ec2-zone=a mem=1G`, service `mem=2G`.
        let model = parse("ec2-zone=a mem=1G");
        let application = parse("mem=2G");
        assert_eq!(merge(&model, &application).to_string(), "mem=2048M zones=a");
    }

    #[test]
    fn an_empty_application_key_blocks_inheritance_from_the_model() {
        let merged = merge(&parse("mem=8G cores=4"), &parse("mem="));
        assert_eq!(merged.mem, Setting::Empty);
        assert_eq!(merged.cores, Setting::Value(Amount::AtLeast(4)));
    }

    #[test]
    fn a_key_unset_on_both_sides_stays_unset() {
        assert_eq!(
            merge(&parse("mem=1G"), &parse("cores=2")).arch,
            Setting::Unset
        );
    }

    #[test]
    fn keys_a_provider_does_not_support_are_kept_and_reported() {
        let c = parse("mem=1G virt-type=kvm spaces=db");
        assert_eq!(
            c.unsupported(&[Key::Mem, Key::Cores]),
            vec![Key::VirtType, Key::Spaces]
        );
        assert_eq!(c.virt_type, Setting::Value("kvm".into()));
        assert_eq!(
            unsupported_warning(Key::VirtType, "sim"),
            r#"constraint "virt-type" is not supported by provider "sim" and is ignored"#
        );
    }

    #[test]
    fn constraints_serialize_as_their_canonical_string() {
        let c = parse("cores=2 mem=4G");
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(json, r#""mem=4096M cores=2""#);
        assert_eq!(serde_json::from_str::<Constraints>(&json).unwrap(), c);
        let bad = serde_json::from_str::<Constraints>(r#""mem=lots""#).unwrap_err();
        assert!(
            bad.to_string().contains("must be a non-negative float"),
            "{bad}"
        );
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// The canonical `key=value` word of every set key.
        fn words_by_key(c: &Constraints) -> std::collections::BTreeMap<Key, String> {
            split_words(&c.to_string())
                .into_iter()
                .map(|word| {
                    let name = word.split_once('=').map_or(word.as_str(), |(name, _)| name);
                    (Key::lookup(name).map(|(key, _)| key).unwrap(), word.clone())
                })
                .collect()
        }

        fn setting_of<T: Clone + std::fmt::Debug + 'static>(
            value: impl Strategy<Value = T> + 'static,
        ) -> BoxedStrategy<Setting<T>> {
            prop_oneof![
                Just(Setting::Unset),
                Just(Setting::Empty),
                value.prop_map(Setting::Value)
            ]
            .boxed()
        }

        fn amount() -> impl Strategy<Value = Amount> {
            prop_oneof![Just(Amount::Max), (0u64..1 << 40).prop_map(Amount::AtLeast)]
        }

        fn word() -> impl Strategy<Value = String> {
            "[a-zA-Z0-9 .=\\\\_-]{1,12}"
        }

        fn name() -> impl Strategy<Value = String> {
            "[a-z0-9][a-z0-9.-]{0,8}"
        }

        fn list() -> impl Strategy<Value = Vec<ListItem>> {
            list_of(name())
        }

        fn list_of(names: impl Strategy<Value = String>) -> impl Strategy<Value = Vec<ListItem>> {
            prop::collection::vec(
                (names, any::<bool>()).prop_map(|(name, excluded)| ListItem { name, excluded }),
                1..4,
            )
        }

        fn space_name() -> impl Strategy<Value = String> {
            "[a-z0-9]{1,4}(-[a-z0-9]{1,4}){0,2}"
        }

        prop_compose! {
            fn constraints()(
                arch in setting_of(prop::sample::select(Arch::ALL.to_vec())),
                container in setting_of(prop::sample::select(vec![ContainerType::None, ContainerType::Lxd])),
                mem in setting_of(amount()),
                cores in setting_of(amount()),
                cpu_power in setting_of(amount()),
                root_disk in setting_of(amount()),
                root_disk_source in setting_of(word()),
                instance_type in setting_of(word()),
                virt_type in setting_of(word()),
                tags in setting_of(list()),
                zones in setting_of(prop::collection::vec(name(), 1..4)),
                spaces in setting_of(list_of(space_name())),
                allocate_public_ip in setting_of(any::<bool>()),
                image_id in setting_of(word()),
                instance_role in setting_of(word()),
                storage in setting_of(amount()),
            ) -> Constraints {
                Constraints {
                    arch, container, mem, cores, cpu_power, root_disk, root_disk_source,
                    instance_type, virt_type, tags, zones, spaces, allocate_public_ip, image_id,
                    instance_role, storage,
                }
            }
        }

        proptest! {
            #[test]
            fn the_canonical_form_parses_back_to_the_same_constraints(c in constraints()) {
                let printed = c.to_string();
                prop_assert_eq!(Constraints::parse(&printed), Ok(c));
            }

            #[test]
            fn printing_a_parsed_canonical_form_gives_it_back_unchanged(c in constraints()) {
                let printed = c.to_string();
                let reparsed = Constraints::parse(&printed).unwrap();
                prop_assert_eq!(reparsed.to_string(), printed);
            }

            #[test]
            fn merge_lets_the_application_win_and_fills_the_rest_from_the_model(model in constraints(), app in constraints()) {
                let merged = merge(&model, &app);
                let (merged_words, model_words, app_words) = (words_by_key(&merged), words_by_key(&model), words_by_key(&app));
                for key in Key::ALL {
                    let expected = app_words.get(&key).or_else(|| model_words.get(&key));
                    prop_assert_eq!(merged_words.get(&key), expected, "key {}", key);
                }
            }

            #[test]
            fn merging_with_nothing_changes_nothing(c in constraints()) {
                let none = Constraints::default();
                prop_assert_eq!(merge(&none, &c), c.clone());
                prop_assert_eq!(merge(&c, &none), c);
            }

            #[test]
            fn an_application_with_every_key_set_ignores_the_model(model in constraints(), app in constraints()) {
                let full = Constraints::parse(&Key::ALL.iter().map(|k| format!("{k}=")).collect::<Vec<_>>().join(" ")).unwrap();
                let app_full = merge(&full, &app);
                prop_assert_eq!(merge(&model, &app_full), app_full);
            }

            #[test]
            fn arbitrary_input_never_panics_the_parser(s in "\\PC{0,64}") {
                let _ = Constraints::parse(&s);
            }

            #[test]
            fn every_key_with_an_arbitrary_value_parses_or_names_that_key(
                key in prop::sample::select(Key::ALL.to_vec()),
                value in "[ -~]{0,10}",
            ) {
                let input = format!("{key}={}", value.replace('\\', "\\\\").replace(' ', "\\ "));
                match Constraints::parse(&input) {
                    Ok(c) => prop_assert_eq!(c.keys(), vec![key]),
                    Err(ConstraintsError::Bad { key: named, .. }) => prop_assert_eq!(named, key.as_str()),
                    Err(other) => prop_assert!(false, "unexpected error {other}"),
                }
            }
        }
    }
}

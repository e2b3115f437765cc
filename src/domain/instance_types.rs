//! Instance types: the catalogue of machine shapes a cloud offers, and the
//! choice of the one that fits a machine's constraints at the least cost.
//!
//! This module owns
//! - [`InstanceType`] and [`Catalogue`], loadable from CSV in the format of
//!   `src/data/ec2-us-east-1-instance-types.csv`, which is embedded as the
//!   default ([`Catalogue::embedded`]);
//! - [`defaults`]: berth's default constraints, in one place;
//! - [`Requirements`]: a machine's constraints resolved for selection
//!   (defaults applied, `Setting`s collapsed) — the one place where `Unset`,
//!   `Empty` and `0` get their meaning for instance-type choice;
//! - [`select`]: the least-waste choice.
//!
//! # Vocabulary
//!
//! Juju's `cores` constraint counts vCPUs on EC2, so it is compared with an
//! instance type's [`InstanceType::vcpus`] (the CSV's `vcpus` column), not
//! with its physical cores. `cpu-power` is compared with the catalogue's
//! `cpu_power` column (100 per vCPU on EC2), `mem` with `mem_mib`.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Mutex, OnceLock};

use crate::domain::constraints::{Amount, Arch, Constraints, ListItem, Setting};
use crate::domain::machine::MachineRole;
use crate::domain::names::ContainerType;
use crate::domain::words::word_enum;

pub mod defaults {
    //! Berth's defaults for instance-type choice. They are applied by
    //! [`Requirements::resolve`](super::Requirements::resolve) and nowhere else.
    //!
    //! | key | default | applies when |
    //! | --- | --- | --- |
    //! | `cores` | [`CORES`] | neither `cores` nor `instance-type` is given |
    //! | `mem` | [`WORKLOAD_MEM_MIB`], or [`CONTROLLER_MEM_MIB`] for controllers | neither `mem` nor `instance-type` is given |
    //! | `arch` | [`ARCH`] | neither `arch` nor `instance-type` is given |
    //!
    //! "Given" means set to a value: a key that is unset, or set empty
    //! (`mem=`), takes the default. `mem=0` (and likewise `cores=0`,
    //! `cpu-power=0`) is a value: it means "do not filter on this key", so no
    //! default applies either.
    //!
    //! `root-disk=max` and `storage=max` ask for [`MAX_ROOT_DISK_MIB`].
    //! `storage` defaults to [`STORAGE_MIB`]. Other keys have no default:
    //! left out, they do not filter.

    use crate::domain::constraints::Arch;

    /// Default minimum vCPU count (Juju's `cores`).
    pub const CORES: u64 = 1;
    /// Default minimum memory of a workload machine, in MiB (2G).
    pub const WORKLOAD_MEM_MIB: u64 = 2 * 1024;
    /// Default minimum memory of a controller machine, in MiB (3.5G).
    pub const CONTROLLER_MEM_MIB: u64 = 3584;
    /// Default architecture.
    pub const ARCH: Arch = Arch::Amd64;
    /// The size `root-disk=max` asks for, in MiB: the largest EBS volume
    /// (16 TiB), since every type's root disk is an EBS volume sized at
    /// launch.
    pub const MAX_ROOT_DISK_MIB: u64 = 16 * 1024 * 1024;
    /// Default least persistent disk (`storage`), in MiB: the placement
    /// document's 4G.
    pub const STORAGE_MIB: u64 = 4 * 1024;
}

// ---------------------------------------------------------------------------
// Prices
// ---------------------------------------------------------------------------

/// An on-demand price, in millionths of a US dollar per hour.
///
/// Kept as an integer so that prices compare exactly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HourlyPrice(u64);

impl HourlyPrice {
    /// Decimal places a price may have.
    const DECIMALS: u32 = 6;

    pub const fn from_micro_usd(micro_usd: u64) -> HourlyPrice {
        HourlyPrice(micro_usd)
    }

    pub const fn micro_usd(self) -> u64 {
        self.0
    }
}

/// A price that is not a decimal number of dollars.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid price {0:?}: expected US dollars per hour with at most 6 decimal places")]
pub struct InvalidPrice(pub String);

impl FromStr for HourlyPrice {
    type Err = InvalidPrice;

    /// Parses `0.0188`, `12`, `125.58182`; refuses signs, exponents and more
    /// than six decimal places.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_fixed_point(s, HourlyPrice::DECIMALS)
            .map(HourlyPrice)
            .ok_or_else(|| InvalidPrice(s.to_string()))
    }
}

impl fmt::Display for HourlyPrice {
    /// Dollars, without trailing zeros: `0.0188`, `12`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scale = 10u64.pow(HourlyPrice::DECIMALS);
        let (whole, mut frac) = (self.0 / scale, self.0 % scale);
        if frac == 0 {
            return write!(f, "{whole}");
        }
        let mut width = HourlyPrice::DECIMALS as usize;
        while frac % 10 == 0 {
            frac /= 10;
            width -= 1;
        }
        write!(f, "{whole}.{frac:0width$}")
    }
}

impl serde::Serialize for HourlyPrice {
    /// As the decimal text `Display` writes (`"0.0416"`), so that JSON
    /// readers get the exact price, not a float's approximation.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for HourlyPrice {
    /// From the decimal text [`Serialize`](serde::Serialize) writes.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl std::ops::Add for HourlyPrice {
    type Output = HourlyPrice;

    /// Saturates: no model costs `u64::MAX` millionths of a dollar.
    fn add(self, other: HourlyPrice) -> HourlyPrice {
        HourlyPrice(self.0.saturating_add(other.0))
    }
}

impl std::iter::Sum for HourlyPrice {
    fn sum<I: Iterator<Item = HourlyPrice>>(iter: I) -> HourlyPrice {
        iter.fold(HourlyPrice::default(), |a, b| a + b)
    }
}

/// `digits[.digits]` as an integer scaled by `10^decimals`, or `None` if the
/// text is not such a number, has more decimal places, or overflows.
fn parse_fixed_point(s: &str, decimals: u32) -> Option<u64> {
    let (whole, frac) = match s.split_once('.') {
        Some((w, f)) => (w, f),
        None => (s, ""),
    };
    let all_digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty()
        || !all_digits(whole)
        || !all_digits(frac)
        || (s.contains('.') && frac.is_empty())
        || frac.len() > decimals as usize
    {
        return None;
    }
    let mut value: u64 = whole.parse().ok()?;
    for _ in 0..decimals {
        value = value.checked_mul(10)?;
    }
    if !frac.is_empty() {
        let pad = decimals - frac.len() as u32;
        let frac_value: u64 = frac.parse::<u64>().ok()?.checked_mul(10u64.pow(pad))?;
        value = value.checked_add(frac_value)?;
    }
    Some(value)
}

// ---------------------------------------------------------------------------
// Tags
// ---------------------------------------------------------------------------

word_enum! {
    /// A tag a catalogue type can carry, matched by the `tags` constraint.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum Tag {
        /// A burstable-performance type (t2, t3, ...).
        Burstable => "burstable",
        /// A type EC2 lists as current generation.
        CurrentGeneration => "current-generation",
        /// A bare-metal type.
        BareMetal => "bare-metal",
        /// A type with at least one GPU.
        Gpu => "gpu",
    }
}

impl Tag {
    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// A set of [`Tag`]s, as bits, so that matching costs no allocation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TagSet(u8);

impl TagSet {
    pub const EMPTY: TagSet = TagSet(0);

    pub fn with(self, tag: Tag) -> TagSet {
        TagSet(self.0 | tag.bit())
    }

    pub fn contains(self, tag: Tag) -> bool {
        self.0 & tag.bit() != 0
    }

    fn contains_all(self, other: TagSet) -> bool {
        self.0 & other.0 == other.0
    }

    fn intersects(self, other: TagSet) -> bool {
        self.0 & other.0 != 0
    }

    pub fn iter(self) -> impl Iterator<Item = Tag> {
        Tag::ALL.into_iter().filter(move |t| self.contains(*t))
    }
}

impl FromIterator<Tag> for TagSet {
    fn from_iter<I: IntoIterator<Item = Tag>>(iter: I) -> Self {
        iter.into_iter().fold(TagSet::EMPTY, TagSet::with)
    }
}

// ---------------------------------------------------------------------------
// Instance types and the catalogue
// ---------------------------------------------------------------------------

/// One machine shape a cloud offers, with its price.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct InstanceType {
    /// The cloud's name for it, e.g. `m5.large`; unique in a catalogue.
    pub name: String,
    pub arch: Arch,
    /// Virtual CPUs. Juju's `cores` constraint counts these on EC2.
    pub vcpus: u64,
    /// Physical cores. Informational only: no constraint reads it, because
    /// `cores` means vCPUs.
    pub physical_cores: u64,
    /// Abstract CPU power for the `cpu-power` constraint (100 per vCPU).
    pub cpu_power: u64,
    pub mem_mib: u64,
    /// Sustained clock speed in MHz, where published.
    pub clock_mhz: Option<u64>,
    pub gpus: u64,
    /// Local instance-store size in GB; 0 for EBS-only types. The root disk
    /// is always an EBS volume sized at launch, so this does not bear on
    /// `root-disk`.
    pub instance_storage_gb: u64,
    pub price: HourlyPrice,
    pub tags: TagSet,
    /// The virtualisation type, where the catalogue states one (`hvm` for
    /// every type loaded from the EC2 CSV). A `virt-type` constraint only
    /// matches types that state the same value.
    pub virt_type: Option<String>,
}

impl InstanceType {
    /// The most persistent disk an instance of this type can have, in MiB:
    /// an EBS volume of up to [`defaults::MAX_ROOT_DISK_MIB`] (every type in
    /// the catalogue boots from EBS). Its instance store, if any, does not
    /// count: it is lost when the instance stops.
    pub fn persistent_storage_mib(&self) -> u64 {
        defaults::MAX_ROOT_DISK_MIB
    }

    /// Whether this type is at least `floor` in every dimension a
    /// constraint can ask for: memory, vCPUs, CPU power, and GPUs.
    ///
    /// Local instance storage is not one of them (no constraint selects it,
    /// and the root disk is sized per launch), so naming an old type that
    /// happened to carry instance storage does not force a storage type.
    fn covers(&self, floor: &InstanceType) -> bool {
        self.mem_mib >= floor.mem_mib
            && self.vcpus >= floor.vcpus
            && self.cpu_power >= floor.cpu_power
            && self.gpus >= floor.gpus
    }
}

/// The instance types one cloud region offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Catalogue {
    types: Vec<InstanceType>,
    /// Position in `types` by name, so a named `instance-type` is found
    /// without a scan.
    by_name: HashMap<String, usize>,
    /// What [`select`] chose for the requirements it was asked about.
    chosen: Choices,
}

/// The most choices a catalogue remembers; when full it forgets them all
/// (so requirements that vary without end cost a scan each, as before).
const CHOICES_REMEMBERED: usize = 4096;

/// [`select`]'s choices by requirements. A catalogue never changes once
/// built, so neither does a choice, and an engine launching thousands of
/// machines with the same constraints asks the same question each time: a
/// scan of the whole catalogue, otherwise. A remembered choice is not part
/// of the catalogue's value: a clone starts with none, and any two are
/// equal.
#[derive(Default)]
struct Choices(Mutex<HashMap<Requirements, Result<usize, SelectError>>>);

impl Choices {
    fn get(&self, requirements: &Requirements) -> Option<Result<usize, SelectError>> {
        self.0.lock().ok()?.get(requirements).cloned()
    }

    fn remember(&self, requirements: &Requirements, choice: &Result<usize, SelectError>) {
        if let Ok(mut choices) = self.0.lock() {
            if choices.len() >= CHOICES_REMEMBERED {
                choices.clear();
            }
            choices.insert(requirements.clone(), choice.clone());
        }
    }
}

impl Clone for Choices {
    fn clone(&self) -> Self {
        Choices::default()
    }
}

impl PartialEq for Choices {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Choices {}

impl fmt::Debug for Choices {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Choices")
    }
}

/// The columns of a catalogue CSV, in the order berth writes them.
pub const CSV_COLUMNS: [&str; 13] = [
    "instance_type",
    "arch",
    "vcpus",
    "cores",
    "cpu_power",
    "mem_mib",
    "clock_ghz",
    "burstable",
    "current_generation",
    "gpus",
    "bare_metal",
    "instance_storage_gb",
    "hourly_usd",
];

/// The virt type of every type in the EC2 CSV (it has no column for it).
const EC2_VIRT_TYPE: &str = "hvm";

static EMBEDDED_CSV: &str = include_str!("../data/ec2-us-east-1-instance-types.csv");
static EMBEDDED: OnceLock<Result<Catalogue, CatalogueError>> = OnceLock::new();

/// Why a catalogue could not be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CatalogueError {
    /// The text is not well-formed CSV (e.g. a row with the wrong number of
    /// fields).
    #[error("line {line}: malformed CSV: {reason}")]
    Malformed { line: u64, reason: String },
    /// The header lacks a column berth needs.
    #[error("line 1: missing column {column:?}; expected the columns {}", CSV_COLUMNS.join(","))]
    MissingColumn { column: &'static str },
    /// A field does not hold what its column should.
    #[error("line {line}, column {column}: expected {expected}, found {value:?}")]
    BadValue {
        line: u64,
        column: &'static str,
        value: String,
        expected: &'static str,
    },
    /// Two rows name the same instance type.
    #[error("line {line}, column instance_type: duplicate instance type {name:?} (first on line {first_line})")]
    DuplicateRow {
        line: u64,
        first_line: u64,
        name: String,
    },
    /// Two hand-built types share a name.
    #[error("duplicate instance type {0:?}")]
    DuplicateName(String),
    /// A hand-built type has an empty name.
    #[error("an instance type needs a name")]
    EmptyName,
}

impl Catalogue {
    /// A catalogue of the given types.
    ///
    /// # Errors
    /// [`CatalogueError::DuplicateName`] if two types share a name,
    /// [`CatalogueError::EmptyName`] if one has none.
    pub fn new(types: Vec<InstanceType>) -> Result<Catalogue, CatalogueError> {
        let mut by_name = HashMap::with_capacity(types.len());
        for (i, t) in types.iter().enumerate() {
            if t.name.is_empty() {
                return Err(CatalogueError::EmptyName);
            }
            if by_name.insert(t.name.clone(), i).is_some() {
                return Err(CatalogueError::DuplicateName(t.name.clone()));
            }
        }
        Ok(Catalogue {
            types,
            by_name,
            chosen: Choices::default(),
        })
    }

    /// Parses a catalogue in the format of
    /// `src/data/ec2-us-east-1-instance-types.csv`: a header row naming the
    /// [`CSV_COLUMNS`] (in any order; other columns are ignored), then one
    /// row per type. Every type gets virt type `hvm`, and the tags its
    /// `burstable`, `current_generation`, `bare_metal` and `gpus` columns
    /// imply.
    ///
    /// # Errors
    /// A [`CatalogueError`] naming the line (1 is the header) and, for a bad
    /// field, the column and what it should hold.
    pub fn from_csv(text: &str) -> Result<Catalogue, CatalogueError> {
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(true)
            .from_reader(text.as_bytes());
        let header = reader.headers().map_err(malformed)?.clone();
        let mut index = [0usize; CSV_COLUMNS.len()];
        for (slot, column) in index.iter_mut().zip(CSV_COLUMNS) {
            *slot = header
                .iter()
                .position(|h| h == column)
                .ok_or(CatalogueError::MissingColumn { column })?;
        }

        let mut types = Vec::new();
        let mut lines = Vec::new();
        for record in reader.records() {
            let record = record.map_err(malformed)?;
            let line = record.position().map_or(0, |p| p.line());
            let row = Row {
                record: &record,
                index: &index,
                line,
            };
            types.push(row.instance_type()?);
            lines.push(line);
        }

        let mut first_line_of: HashMap<&str, u64> = HashMap::with_capacity(types.len());
        for (t, &line) in types.iter().zip(&lines) {
            if let Some(&first_line) = first_line_of.get(t.name.as_str()) {
                return Err(CatalogueError::DuplicateRow {
                    line,
                    first_line,
                    name: t.name.clone(),
                });
            }
            first_line_of.insert(&t.name, line);
        }
        Catalogue::new(types)
    }

    /// The embedded EC2 us-east-1 catalogue (1,340 types), parsed on first
    /// use and shared afterwards.
    ///
    /// # Errors
    /// Only if the embedded CSV is broken, which the tests rule out; callers
    /// may treat it as a start-up failure.
    pub fn embedded() -> Result<&'static Catalogue, &'static CatalogueError> {
        EMBEDDED
            .get_or_init(|| Catalogue::from_csv(EMBEDDED_CSV))
            .as_ref()
    }

    pub fn types(&self) -> &[InstanceType] {
        &self.types
    }

    pub fn get(&self, name: &str) -> Option<&InstanceType> {
        self.by_name.get(name).map(|&i| &self.types[i])
    }

    pub fn len(&self) -> usize {
        self.types.len()
    }

    pub fn is_empty(&self) -> bool {
        self.types.is_empty()
    }
}

fn malformed(err: csv::Error) -> CatalogueError {
    let line = err.position().map_or(0, |p| p.line());
    let reason = match err.kind() {
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => format!("expected {expected_len} fields, found {len}"),
        csv::ErrorKind::Utf8 { err, .. } => format!("invalid UTF-8 in field {}", err.field() + 1),
        _ => err.to_string(),
    };
    CatalogueError::Malformed { line, reason }
}

/// One CSV row being turned into an [`InstanceType`].
struct Row<'a> {
    record: &'a csv::StringRecord,
    /// Field position of each of [`CSV_COLUMNS`] in this file.
    index: &'a [usize; CSV_COLUMNS.len()],
    line: u64,
}

impl Row<'_> {
    fn field(&self, column: &'static str) -> &str {
        CSV_COLUMNS
            .iter()
            .position(|c| *c == column)
            .and_then(|i| self.record.get(self.index[i]))
            .unwrap_or("")
    }

    fn parse<T>(
        &self,
        column: &'static str,
        expected: &'static str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<T, CatalogueError> {
        let value = self.field(column);
        parse(value).ok_or_else(|| CatalogueError::BadValue {
            line: self.line,
            column,
            value: value.to_string(),
            expected,
        })
    }

    fn whole(&self, column: &'static str, expected: &'static str) -> Result<u64, CatalogueError> {
        self.parse(column, expected, |s| {
            if s.bytes().all(|b| b.is_ascii_digit()) {
                s.parse().ok()
            } else {
                None
            }
        })
    }

    fn flag(&self, column: &'static str) -> Result<bool, CatalogueError> {
        self.parse(column, "true or false", |s| match s {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        })
    }

    fn instance_type(&self) -> Result<InstanceType, CatalogueError> {
        let name = self.parse(
            "instance_type",
            "an instance type name (not empty, no spaces)",
            |s| (!s.is_empty() && !s.contains(char::is_whitespace)).then(|| s.to_string()),
        )?;
        let arch = self.parse(
            "arch",
            "an architecture (amd64, arm64, ppc64el, s390x or riscv64)",
            Arch::parse,
        )?;
        let vcpus = self.whole("vcpus", "a whole number of vCPUs")?;
        let physical_cores = self.whole("cores", "a whole number of cores")?;
        let cpu_power = self.whole("cpu_power", "a whole number")?;
        let mem_mib = self.whole("mem_mib", "a whole number of MiB")?;
        let clock_mhz = self.parse(
            "clock_ghz",
            "a clock speed in GHz with at most 3 decimal places, or nothing",
            |s| match s {
                "" => Some(None),
                s => parse_fixed_point(s, 3).map(Some),
            },
        )?;
        let burstable = self.flag("burstable")?;
        let current_generation = self.flag("current_generation")?;
        let gpus = self.whole("gpus", "a whole number of GPUs")?;
        let bare_metal = self.flag("bare_metal")?;
        let instance_storage_gb = self.whole("instance_storage_gb", "a whole number of GB")?;
        let price = self.parse(
            "hourly_usd",
            "a price in US dollars with at most 6 decimal places",
            |s| s.parse::<HourlyPrice>().ok(),
        )?;

        let tags = [
            (burstable, Tag::Burstable),
            (current_generation, Tag::CurrentGeneration),
            (bare_metal, Tag::BareMetal),
            (gpus > 0, Tag::Gpu),
        ]
        .into_iter()
        .filter_map(|(has, tag)| has.then_some(tag))
        .collect();

        Ok(InstanceType {
            name,
            arch,
            vcpus,
            physical_cores,
            cpu_power,
            mem_mib,
            clock_mhz,
            gpus,
            instance_storage_gb,
            price,
            tags,
            virt_type: Some(EC2_VIRT_TYPE.to_string()),
        })
    }
}

// ---------------------------------------------------------------------------
// Requirements: constraints resolved for one machine
// ---------------------------------------------------------------------------

/// A machine's constraints resolved for instance-type choice: berth's
/// [`defaults`] applied, and every key either a requirement or absent.
///
/// Size keys hold `None` for "no filter", never `Some(AtLeast(0))` when
/// built by [`Requirements::resolve`]. The keys after `tags` do not choose
/// the type; they are carried through for the provider.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Requirements {
    /// `None`: any architecture (only when an instance type is named, which
    /// then fixes it).
    pub arch: Option<Arch>,
    /// Minimum memory in MiB, or `max`.
    pub mem: Option<Amount>,
    /// Minimum vCPUs, or `max`.
    pub cores: Option<Amount>,
    pub cpu_power: Option<Amount>,
    pub instance_type: Option<String>,
    pub virt_type: Option<String>,
    /// Tags the type must (or, with `excluded`, must not) carry.
    pub tags: Vec<ListItem>,
    /// Root-disk size in MiB for the provider to request; never filters,
    /// because every type boots from an EBS volume sized at launch.
    pub root_disk_mib: Option<u64>,
    pub root_disk_source: Option<String>,
    pub container: Option<ContainerType>,
    /// Empty: any zone.
    pub zones: Vec<String>,
    pub spaces: Vec<ListItem>,
    pub allocate_public_ip: Option<bool>,
    pub image_id: Option<String>,
    /// The cloud's role for the instance (EC2: an IAM instance profile's
    /// name).
    pub instance_role: Option<String>,
    /// The least persistent disk asked for with `storage`, in MiB; `None`:
    /// the default, [`defaults::STORAGE_MIB`]. It rules out the types that
    /// cannot have that much persistent disk
    /// ([`InstanceType::persistent_storage_mib`]) and, when given, is
    /// provided on the root volume: `root_disk_mib` is the larger of
    /// `root-disk` and `storage`.
    pub storage_mib: Option<u64>,
}

impl Requirements {
    /// Resolves `constraints` for a machine of `role`, applying
    /// [`defaults`].
    ///
    /// At this point `Unset` and `Empty` mean the same (berth's default, if
    /// the key has one; otherwise no requirement): they differ only when
    /// constraints are inherited, which happens before. A size of `0` means
    /// "no filter and no default".
    pub fn resolve(constraints: &Constraints, role: MachineRole) -> Requirements {
        let instance_type = constraints.instance_type.value().cloned();
        let named = instance_type.is_some();
        let default_mem = match role {
            MachineRole::Workload => defaults::WORKLOAD_MEM_MIB,
            MachineRole::Controller => defaults::CONTROLLER_MEM_MIB,
        };
        let size = |setting: &Setting<Amount>, default: Option<u64>| match setting {
            Setting::Value(Amount::AtLeast(0)) => None,
            Setting::Value(amount) => Some(*amount),
            Setting::Unset | Setting::Empty => default.map(Amount::AtLeast),
        };
        let unless_named = |default: u64| (!named).then_some(default);

        let storage_mib = match constraints.storage {
            Setting::Value(Amount::AtLeast(0)) | Setting::Unset | Setting::Empty => None,
            Setting::Value(Amount::AtLeast(n)) => Some(n),
            Setting::Value(Amount::Max) => Some(defaults::MAX_ROOT_DISK_MIB),
        };
        let root_disk_mib = match constraints.root_disk {
            Setting::Value(Amount::AtLeast(0)) | Setting::Unset | Setting::Empty => None,
            Setting::Value(Amount::AtLeast(n)) => Some(n),
            Setting::Value(Amount::Max) => Some(defaults::MAX_ROOT_DISK_MIB),
        };
        Requirements {
            arch: match constraints.arch {
                Setting::Value(arch) => Some(arch),
                Setting::Unset | Setting::Empty => (!named).then_some(defaults::ARCH),
            },
            mem: size(&constraints.mem, unless_named(default_mem)),
            cores: size(&constraints.cores, unless_named(defaults::CORES)),
            cpu_power: size(&constraints.cpu_power, None),
            instance_type,
            virt_type: constraints.virt_type.value().cloned(),
            tags: constraints.tags.value().cloned().unwrap_or_default(),
            root_disk_mib: root_disk_mib.max(storage_mib),
            root_disk_source: constraints.root_disk_source.value().cloned(),
            container: constraints.container.value().copied(),
            zones: constraints.zones.value().cloned().unwrap_or_default(),
            spaces: constraints.spaces.value().cloned().unwrap_or_default(),
            allocate_public_ip: constraints.allocate_public_ip.value().copied(),
            image_id: constraints.image_id.value().cloned(),
            instance_role: constraints.instance_role.value().cloned(),
            storage_mib,
        }
    }
}

impl fmt::Display for Requirements {
    /// The requirements as constraints, in the canonical key order (`arch
    /// container mem cores cpu-power root-disk root-disk-source
    /// instance-type virt-type tags zones spaces allocate-public-ip
    /// image-id`), sizes as `<MiB>M`, absent keys left out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sep = "";
        let mut key = |f: &mut fmt::Formatter<'_>, k: &str| {
            let r = write!(f, "{sep}{k}=");
            sep = " ";
            r
        };
        let amount = |f: &mut fmt::Formatter<'_>, a: Amount, unit: &str| match a {
            Amount::AtLeast(n) => write!(f, "{n}{unit}"),
            Amount::Max => f.write_str("max"),
        };
        let list = |f: &mut fmt::Formatter<'_>, items: &[ListItem]| {
            for (i, item) in items.iter().enumerate() {
                let comma = if i == 0 { "" } else { "," };
                let caret = if item.excluded { "^" } else { "" };
                write!(f, "{comma}{caret}{}", item.name)?;
            }
            Ok(())
        };

        if let Some(arch) = self.arch {
            key(f, "arch")?;
            write!(f, "{arch}")?;
        }
        if let Some(container) = self.container {
            key(f, "container")?;
            write!(f, "{container}")?;
        }
        if let Some(mem) = self.mem {
            key(f, "mem")?;
            amount(f, mem, "M")?;
        }
        if let Some(cores) = self.cores {
            key(f, "cores")?;
            amount(f, cores, "")?;
        }
        if let Some(power) = self.cpu_power {
            key(f, "cpu-power")?;
            amount(f, power, "")?;
        }
        if let Some(disk) = self.root_disk_mib {
            key(f, "root-disk")?;
            write!(f, "{disk}M")?;
        }
        if let Some(source) = &self.root_disk_source {
            key(f, "root-disk-source")?;
            f.write_str(source)?;
        }
        if let Some(name) = &self.instance_type {
            key(f, "instance-type")?;
            f.write_str(name)?;
        }
        if let Some(virt) = &self.virt_type {
            key(f, "virt-type")?;
            f.write_str(virt)?;
        }
        if !self.tags.is_empty() {
            key(f, "tags")?;
            list(f, &self.tags)?;
        }
        if !self.zones.is_empty() {
            key(f, "zones")?;
            f.write_str(&self.zones.join(","))?;
        }
        if !self.spaces.is_empty() {
            key(f, "spaces")?;
            list(f, &self.spaces)?;
        }
        if let Some(public) = self.allocate_public_ip {
            key(f, "allocate-public-ip")?;
            write!(f, "{public}")?;
        }
        if let Some(image) = &self.image_id {
            key(f, "image-id")?;
            f.write_str(image)?;
        }
        if let Some(role) = &self.instance_role {
            key(f, "instance-role")?;
            f.write_str(role)?;
        }
        if let Some(storage) = self.storage_mib {
            key(f, "storage")?;
            write!(f, "{storage}M")?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Selection
// ---------------------------------------------------------------------------

/// Why no instance type was chosen.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    /// `instance-type` names a type the catalogue does not have.
    #[error("invalid instance type {0:?}")]
    InvalidInstanceType(String),
    /// No type meets the requirements. `constraints` is the resolved
    /// requirements in canonical constraint form (defaults included).
    #[error("no instance type satisfies constraints {constraints:?}")]
    NoMatch { constraints: String },
}

/// Chooses the instance type for a machine with these requirements.
///
/// # Guarantees
/// A type is a *candidate* if
/// - its arch is `arch` (when set) and that of the named `instance-type`
///   (when set);
/// - its memory, vCPUs and CPU power are at least the `mem`, `cores` and
///   `cpu-power` minimums, and — when an `instance-type` is named — at least
///   the named type's memory, vCPUs, CPU power, GPUs and instance storage
///   (so generic constraints can raise, never lower, a named type);
/// - it carries every tag in `tags` and none of the `^`-excluded ones;
/// - its virt type equals `virt-type` (when set).
///
/// `root-disk` never rules a type out (the root volume is sized at launch)
/// and the pass-through keys do not bear on the choice.
///
/// Among the candidates the result is the first in this order:
/// 1. for each of `mem`, `cores`, `cpu-power` that is `max`, in that order:
///    the largest value first. So `max` means the largest the catalogue has
///    among the types that meet the other requirements.
/// 2. the named `instance-type` itself, if it is a candidate: when it
///    already meets the generic constraints it is tighter than they are and
///    wins, even if a cheaper type would cover it;
/// 3. the cheapest, then the least memory, then the least CPU power, then
///    the fewest vCPUs, then the name (so the choice is deterministic).
///
/// Runs in one pass over the catalogue without allocating, except to build
/// an error, the first time it is asked about a set of requirements; the
/// catalogue remembers the choice and answers it again without a scan.
///
/// # Errors
/// [`SelectError::InvalidInstanceType`] if the named type is not in the
/// catalogue; [`SelectError::NoMatch`] if there is no candidate.
pub fn select<'c>(
    requirements: &Requirements,
    catalogue: &'c Catalogue,
) -> Result<&'c InstanceType, SelectError> {
    let choice = match catalogue.chosen.get(requirements) {
        Some(choice) => choice,
        None => {
            let choice = select_index_among(requirements, catalogue, |_| true);
            catalogue.chosen.remember(requirements, &choice);
            choice
        }
    };
    choice.map(|i| &catalogue.types[i])
}

/// [`select`] among the catalogue's types that `offered` accepts (the
/// named `instance-type` still sets the floor, from the whole catalogue).
fn select_among<'c>(
    requirements: &Requirements,
    catalogue: &'c Catalogue,
    offered: impl Fn(&InstanceType) -> bool,
) -> Result<&'c InstanceType, SelectError> {
    select_index_among(requirements, catalogue, offered).map(|i| &catalogue.types[i])
}

/// [`select_among`], as the chosen type's position in the catalogue.
fn select_index_among(
    requirements: &Requirements,
    catalogue: &Catalogue,
    offered: impl Fn(&InstanceType) -> bool,
) -> Result<usize, SelectError> {
    let named = match &requirements.instance_type {
        Some(name) => match catalogue.by_name.get(name) {
            Some(&i) => Some(i),
            None => return Err(SelectError::InvalidInstanceType(name.clone())),
        },
        None => None,
    };
    let matcher = Matcher::new(requirements, named.map(|i| &catalogue.types[i]));

    let mut best: Option<(usize, &InstanceType)> = None;
    if matcher.satisfiable {
        for (i, candidate) in catalogue.types.iter().enumerate() {
            if !matcher.accepts(candidate) || !offered(candidate) {
                continue;
            }
            let better = match best {
                None => true,
                Some((j, incumbent)) => {
                    matcher.rank(candidate, named == Some(i), incumbent, named == Some(j))
                        == Ordering::Less
                }
            };
            if better {
                best = Some((i, candidate));
            }
        }
    }
    best.map(|(i, _)| i).ok_or_else(|| SelectError::NoMatch {
        constraints: requirements.to_string(),
    })
}

/// Why no instance type was chosen for a launch in one zone.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ZoneSelectError {
    /// Nothing in the catalogue fits, in any zone: retrying cannot help.
    #[error(transparent)]
    NoFit(#[from] SelectError),
    /// Types fit, but the zone offers none of them (or not the named
    /// one): another zone may.
    #[error(
        "instance type {cheapest} is not offered in zone {zone}, nor is any other \
         that satisfies the constraints"
    )]
    NotOffered { cheapest: String, zone: String },
}

/// Chooses the instance type for a launch in `zone`, of which `offered`
/// says whether it can take a type now: the cheapest fit ([`select`]) if
/// the zone offers it, else the cheapest fit the zone offers, so that the
/// machine keeps its place in the zone spread rather than moving on.
///
/// # Guarantees
///
/// The result is one [`select`] would choose from the zone's offered
/// types alone; a named `instance-type` that the zone does not offer is
/// never replaced by another type.
///
/// # Errors
///
/// [`ZoneSelectError::NoFit`] if no type in the catalogue fits;
/// [`ZoneSelectError::NotOffered`] if types fit but none is offered here.
pub fn select_for_zone<'c>(
    requirements: &Requirements,
    catalogue: &'c Catalogue,
    zone: &str,
    offered: impl Fn(&str) -> bool,
) -> Result<&'c InstanceType, ZoneSelectError> {
    let cheapest = select(requirements, catalogue)?;
    if offered(&cheapest.name) {
        return Ok(cheapest);
    }
    let not_offered = || ZoneSelectError::NotOffered {
        cheapest: cheapest.name.clone(),
        zone: zone.to_string(),
    };
    if let Some(named) = &requirements.instance_type {
        if !offered(named) {
            return Err(not_offered());
        }
    }
    select_among(requirements, catalogue, |t| offered(&t.name)).map_err(|_| not_offered())
}

/// [`select`] for a workload machine with these constraints.
///
/// # Errors
/// As [`select`].
pub fn select_for_workload<'c>(
    constraints: &Constraints,
    catalogue: &'c Catalogue,
) -> Result<&'c InstanceType, SelectError> {
    select(
        &Requirements::resolve(constraints, MachineRole::Workload),
        catalogue,
    )
}

/// One requirement as a test of an instance type, named by the constraint
/// it comes from: what an explanation counts, one by one.
pub struct Filter<'r> {
    /// The constraint as the user would write it: `mem=16G`, `arch=arm64`.
    pub constraint: String,
    test: Box<dyn Fn(&InstanceType) -> bool + 'r>,
}

impl fmt::Debug for Filter<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Filter")
            .field("constraint", &self.constraint)
            .finish_non_exhaustive()
    }
}

impl Filter<'_> {
    /// Whether `t` passes this requirement.
    pub fn accepts(&self, t: &InstanceType) -> bool {
        (self.test)(t)
    }
}

/// A size in MiB as a constraint value: `16G`, `3.75G`, `1740M`.
pub fn size_text(mib: u64) -> String {
    if mib != 0 && mib.is_multiple_of(1024) {
        format!("{}G", mib / 1024)
    } else if mib >= 1024 && (mib * 100).is_multiple_of(1024) {
        let hundredths = mib * 100 / 1024;
        let text = format!("{}.{:02}", hundredths / 100, hundredths % 100);
        format!("{}G", text.trim_end_matches('0'))
    } else {
        format!("{mib}M")
    }
}

/// The requirements that choose a type, one [`Filter`] each, in the order
/// an explanation applies them: `arch`, `mem`, `cores`, `cpu-power`,
/// `instance-type`, `tags`, `virt-type`, `storage`. Only keys that
/// require something are listed (berth's defaults included).
///
/// # Guarantees
///
/// A type passes every filter exactly when [`select`] counts it a
/// candidate.
///
/// # Errors
///
/// [`SelectError::InvalidInstanceType`] if the named type is not in the
/// catalogue.
pub fn filters<'r>(
    req: &'r Requirements,
    catalogue: &'r Catalogue,
) -> Result<Vec<Filter<'r>>, SelectError> {
    fn filter<'r>(constraint: String, test: impl Fn(&InstanceType) -> bool + 'r) -> Filter<'r> {
        Filter {
            constraint,
            test: Box::new(test),
        }
    }
    let mut out = Vec::new();
    if let Some(arch) = req.arch {
        out.push(filter(format!("arch={arch}"), move |t| t.arch == arch));
    }
    if let Some(Amount::AtLeast(mib)) = req.mem {
        out.push(filter(format!("mem={}", size_text(mib)), move |t| {
            t.mem_mib >= mib
        }));
    }
    if let Some(Amount::AtLeast(n)) = req.cores {
        out.push(filter(format!("cores={n}"), move |t| t.vcpus >= n));
    }
    if let Some(Amount::AtLeast(n)) = req.cpu_power {
        out.push(filter(format!("cpu-power={n}"), move |t| t.cpu_power >= n));
    }
    if let Some(name) = &req.instance_type {
        let floor = catalogue
            .get(name)
            .ok_or_else(|| SelectError::InvalidInstanceType(name.clone()))?;
        out.push(filter(format!("instance-type={name}"), move |t| {
            t.arch == floor.arch && t.covers(floor)
        }));
    }
    if !req.tags.is_empty() {
        let matcher = Matcher::new(req, None);
        let text = req
            .tags
            .iter()
            .map(|i| format!("{}{}", if i.excluded { "^" } else { "" }, i.name))
            .collect::<Vec<_>>()
            .join(",");
        let known = req
            .tags
            .iter()
            .all(|i| i.excluded || Tag::parse(&i.name).is_some());
        out.push(filter(format!("tags={text}"), move |t| {
            known
                && t.tags.contains_all(matcher.required_tags)
                && !t.tags.intersects(matcher.excluded_tags)
        }));
    }
    if let Some(virt) = req.virt_type.as_deref() {
        out.push(filter(format!("virt-type={virt}"), move |t| {
            t.virt_type.as_deref() == Some(virt)
        }));
    }
    let storage = req.storage_mib.unwrap_or(defaults::STORAGE_MIB);
    out.push(filter(
        format!("storage={}", size_text(storage)),
        move |t| t.persistent_storage_mib() >= storage,
    ));
    Ok(out)
}

/// [`Requirements`] compiled into plain comparisons for the selection pass.
struct Matcher<'r> {
    arch: Option<Arch>,
    min_mem: u64,
    min_vcpus: u64,
    min_cpu_power: u64,
    /// The named instance type, which candidates must cover.
    floor: Option<&'r InstanceType>,
    required_tags: TagSet,
    excluded_tags: TagSet,
    virt_type: Option<&'r str>,
    /// The least persistent disk, in MiB.
    min_storage: u64,
    /// Which size keys are `max`.
    max_mem: bool,
    max_cores: bool,
    max_cpu_power: bool,
    /// False when the requirements contradict themselves before any type is
    /// looked at (a required tag no type can carry, or an arch different
    /// from the named type's).
    satisfiable: bool,
}

impl<'r> Matcher<'r> {
    fn new(req: &'r Requirements, floor: Option<&'r InstanceType>) -> Matcher<'r> {
        let minimum = |a: Option<Amount>| match a {
            Some(Amount::AtLeast(n)) => n,
            Some(Amount::Max) | None => 0,
        };
        let mut required_tags = TagSet::EMPTY;
        let mut excluded_tags = TagSet::EMPTY;
        let mut satisfiable = true;
        for item in &req.tags {
            match (Tag::parse(&item.name), item.excluded) {
                (Some(tag), false) => required_tags = required_tags.with(tag),
                (Some(tag), true) => excluded_tags = excluded_tags.with(tag),
                // No catalogue type carries a tag berth does not know.
                (None, false) => satisfiable = false,
                (None, true) => {}
            }
        }
        let arch = match (req.arch, floor) {
            (Some(a), Some(t)) if a != t.arch => {
                satisfiable = false;
                Some(a)
            }
            (Some(a), _) => Some(a),
            (None, Some(t)) => Some(t.arch),
            (None, None) => None,
        };
        Matcher {
            arch,
            min_mem: minimum(req.mem),
            min_vcpus: minimum(req.cores),
            min_cpu_power: minimum(req.cpu_power),
            floor,
            required_tags,
            excluded_tags,
            virt_type: req.virt_type.as_deref(),
            min_storage: req.storage_mib.unwrap_or(defaults::STORAGE_MIB),
            max_mem: req.mem == Some(Amount::Max),
            max_cores: req.cores == Some(Amount::Max),
            max_cpu_power: req.cpu_power == Some(Amount::Max),
            satisfiable,
        }
    }

    fn accepts(&self, t: &InstanceType) -> bool {
        self.arch.is_none_or(|a| a == t.arch)
            && t.mem_mib >= self.min_mem
            && t.vcpus >= self.min_vcpus
            && t.cpu_power >= self.min_cpu_power
            && self.floor.is_none_or(|floor| t.covers(floor))
            && t.tags.contains_all(self.required_tags)
            && !t.tags.intersects(self.excluded_tags)
            && self
                .virt_type
                .is_none_or(|v| t.virt_type.as_deref() == Some(v))
            && t.persistent_storage_mib() >= self.min_storage
    }

    /// `Less` if `a` is preferred to `b` (see [`select`] for the order).
    fn rank(&self, a: &InstanceType, a_named: bool, b: &InstanceType, b_named: bool) -> Ordering {
        let largest = |wanted: bool, x: u64, y: u64| {
            if wanted {
                y.cmp(&x)
            } else {
                Ordering::Equal
            }
        };
        largest(self.max_mem, a.mem_mib, b.mem_mib)
            .then(largest(self.max_cores, a.vcpus, b.vcpus))
            .then(largest(self.max_cpu_power, a.cpu_power, b.cpu_power))
            .then(b_named.cmp(&a_named))
            .then(a.price.cmp(&b.price))
            .then(a.mem_mib.cmp(&b.mem_mib))
            .then(a.cpu_power.cmp(&b.cpu_power))
            .then(a.vcpus.cmp(&b.vcpus))
            .then_with(|| a.name.cmp(&b.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1024;

    /// A type with 100 CPU power per vCPU, as on EC2, no tags, `hvm`.
    fn itype(name: &str, arch: Arch, vcpus: u64, mem_mib: u64, micro_usd: u64) -> InstanceType {
        InstanceType {
            name: name.to_string(),
            arch,
            vcpus,
            physical_cores: vcpus,
            cpu_power: 100 * vcpus,
            mem_mib,
            clock_mhz: None,
            gpus: 0,
            instance_storage_gb: 0,
            price: HourlyPrice::from_micro_usd(micro_usd),
            tags: TagSet::EMPTY,
            virt_type: Some("hvm".to_string()),
        }
    }

    fn amd(name: &str, vcpus: u64, mem_mib: u64, micro_usd: u64) -> InstanceType {
        itype(name, Arch::Amd64, vcpus, mem_mib, micro_usd)
    }

    fn catalogue(types: Vec<InstanceType>) -> Catalogue {
        Catalogue::new(types).unwrap()
    }

    /// The four m1 types, as the embedded CSV has them.
    fn m1_catalogue() -> Catalogue {
        let with_storage = |mut t: InstanceType, gb| {
            t.instance_storage_gb = gb;
            t
        };
        catalogue(vec![
            with_storage(amd("m1.small", 1, 1740, 44_000), 160),
            with_storage(amd("m1.medium", 1, 3788, 87_000), 410),
            with_storage(amd("m1.large", 2, 7680, 175_000), 840),
            with_storage(amd("m1.xlarge", 4, 15360, 350_000), 1680),
        ])
    }

    #[test]
    fn a_catalogue_asked_more_questions_than_it_remembers_still_answers_each_right() {
        let cat = m1_catalogue();
        let clone = cat.clone();
        for round in 0..2 {
            for mib in 0..(CHOICES_REMEMBERED as u64 + 100) {
                let cons = Constraints::parse(&format!("mem={mib}M")).unwrap();
                let req = workload(&cons);
                let scanned = select_index_among(&req, &cat, |_| true).map(|i| &cat.types[i]);
                assert_eq!(select(&req, &cat), scanned, "mem={mib}M, round {round}");
            }
        }
        assert!(cat.chosen.0.lock().unwrap().len() <= CHOICES_REMEMBERED);
        // A clone made before remembers nothing, and equals the original.
        assert!(clone.chosen.0.lock().unwrap().is_empty());
        assert_eq!(clone, cat);
    }

    fn workload(cons: &Constraints) -> Requirements {
        Requirements::resolve(cons, MachineRole::Workload)
    }

    /// The name `select_for_workload` picks, or its error message.
    fn pick(cons: &Constraints, cat: &Catalogue) -> Result<String, String> {
        select_for_workload(cons, cat)
            .map(|t| t.name.clone())
            .map_err(|e| e.to_string())
    }

    fn at_least(n: u64) -> Setting<Amount> {
        Setting::Value(Amount::AtLeast(n))
    }

    fn named(name: &str) -> Setting<String> {
        Setting::Value(name.to_string())
    }

    fn items(spec: &[&str]) -> Vec<ListItem> {
        spec.iter()
            .map(|s| match s.strip_prefix('^') {
                Some(name) => ListItem {
                    name: name.to_string(),
                    excluded: true,
                },
                None => ListItem {
                    name: s.to_string(),
                    excluded: false,
                },
            })
            .collect()
    }

    /// The name `select_for_zone` picks in zone `z` offering `types`.
    fn pick_in_zone(cons: &Constraints, cat: &Catalogue, types: &[&str]) -> Result<String, String> {
        select_for_zone(&workload(cons), cat, "z", |t| types.contains(&t))
            .map(|t| t.name.clone())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_zone_offering_the_cheapest_fit_gets_it() {
        let cat = m1_catalogue();
        let cons = Constraints {
            mem: at_least(3 * G),
            ..Constraints::default()
        };
        assert_eq!(
            pick_in_zone(&cons, &cat, &["m1.medium", "m1.large"]),
            Ok("m1.medium".into())
        );
    }

    #[test]
    fn a_zone_without_the_cheapest_fit_gets_its_own_cheapest_fit() {
        let cat = m1_catalogue();
        let cons = Constraints {
            mem: at_least(3 * G),
            ..Constraints::default()
        };
        assert_eq!(
            pick_in_zone(&cons, &cat, &["m1.small", "m1.xlarge"]),
            Ok("m1.xlarge".into())
        );
    }

    #[test]
    fn a_zone_offering_no_fit_is_a_zone_failure_naming_the_cheapest_fit() {
        let cat = m1_catalogue();
        let cons = Constraints {
            mem: at_least(3 * G),
            ..Constraints::default()
        };
        let err = select_for_zone(&workload(&cons), &cat, "z", |t| t == "m1.small").unwrap_err();
        assert_eq!(
            err,
            ZoneSelectError::NotOffered {
                cheapest: "m1.medium".into(),
                zone: "z".into()
            }
        );
        assert_eq!(
            err.to_string(),
            "instance type m1.medium is not offered in zone z, nor is any other that satisfies the constraints"
        );
    }

    #[test]
    fn a_named_type_the_zone_does_not_offer_is_never_replaced() {
        let cat = m1_catalogue();
        let cons = Constraints {
            instance_type: named("m1.small"),
            ..Constraints::default()
        };
        assert!(matches!(
            select_for_zone(&workload(&cons), &cat, "z", |t| t != "m1.small"),
            Err(ZoneSelectError::NotOffered { .. })
        ));
    }

    #[test]
    fn nothing_fitting_anywhere_is_no_fit_whatever_the_zone_offers() {
        let cat = m1_catalogue();
        let cons = Constraints {
            mem: at_least(1000 * G),
            ..Constraints::default()
        };
        assert!(matches!(
            select_for_zone(&workload(&cons), &cat, "z", |_| true),
            Err(ZoneSelectError::NoFit(SelectError::NoMatch { .. }))
        ));
    }

    fn tagged(mut t: InstanceType, tags: &[Tag]) -> InstanceType {
        t.tags = tags.iter().copied().collect();
        t
    }

    // --- the issue's examples -------------------------------------------

    #[test]
    fn mem_3g_with_4g_and_6g_types_picks_the_4g_one() {
        let cat = catalogue(vec![
            amd("six", 2, 6 * G, 50_000),
            amd("four", 2, 4 * G, 50_000),
            amd("two", 2, 2 * G, 10_000),
        ]);
        let cons = Constraints {
            mem: at_least(3 * G),
            ..Constraints::default()
        };
        assert_eq!(pick(&cons, &cat), Ok("four".to_string()));
    }

    #[test]
    fn mem_8g_with_instance_type_m1_small_gives_m1_xlarge() {
        let cons = Constraints {
            mem: at_least(8 * G),
            instance_type: named("m1.small"),
            ..Constraints::default()
        };
        assert_eq!(pick(&cons, &m1_catalogue()), Ok("m1.xlarge".to_string()));
    }

    #[test]
    fn cores_1_with_instance_type_m1_large_gives_m1_large() {
        let cons = Constraints {
            cores: at_least(1),
            instance_type: named("m1.large"),
            ..Constraints::default()
        };
        assert_eq!(pick(&cons, &m1_catalogue()), Ok("m1.large".to_string()));
    }

    #[test]
    fn the_m1_examples_use_the_m1_rows_of_the_embedded_catalogue() {
        let embedded = Catalogue::embedded().unwrap();
        for t in m1_catalogue().types() {
            let row = embedded.get(&t.name).unwrap();
            let comparable = InstanceType {
                tags: TagSet::EMPTY,
                ..row.clone()
            };
            assert_eq!(&comparable, t);
        }
    }

    // --- ordering ---------------------------------------------------------

    #[test]
    fn the_cheapest_satisfying_type_wins() {
        let cat = catalogue(vec![
            amd("dear", 2, 4 * G, 30_000),
            amd("cheap", 8, 32 * G, 20_000),
            amd("too-small", 1, G, 1_000),
        ]);
        assert_eq!(pick(&Constraints::default(), &cat), Ok("cheap".to_string()));
    }

    #[test]
    fn at_equal_price_the_least_memory_wins() {
        let cat = catalogue(vec![
            amd("more", 1, 8 * G, 20_000),
            amd("less", 4, 4 * G, 20_000),
        ]);
        assert_eq!(pick(&Constraints::default(), &cat), Ok("less".to_string()));
    }

    #[test]
    fn at_equal_price_and_memory_the_least_cpu_power_wins() {
        let mut strong = amd("strong", 1, 4 * G, 20_000);
        strong.cpu_power = 300;
        let mut weak = amd("weak", 4, 4 * G, 20_000);
        weak.cpu_power = 200;
        let cat = catalogue(vec![strong, weak]);
        assert_eq!(pick(&Constraints::default(), &cat), Ok("weak".to_string()));
    }

    #[test]
    fn at_equal_price_memory_and_cpu_power_the_fewest_cores_win() {
        let mut many = amd("many", 4, 4 * G, 20_000);
        many.cpu_power = 200;
        let mut few = amd("few", 2, 4 * G, 20_000);
        few.cpu_power = 200;
        let cat = catalogue(vec![many, few]);
        assert_eq!(pick(&Constraints::default(), &cat), Ok("few".to_string()));
    }

    #[test]
    fn a_full_tie_goes_to_the_first_name() {
        let cat = catalogue(vec![amd("b", 2, 4 * G, 20_000), amd("a", 2, 4 * G, 20_000)]);
        assert_eq!(pick(&Constraints::default(), &cat), Ok("a".to_string()));
    }

    // --- sizes --------------------------------------------------------------

    #[test]
    fn sizes_are_minimums_that_an_exact_fit_meets() {
        let mut exact = amd("exact", 3, 3 * G, 40_000);
        exact.cpu_power = 250;
        let mut short_power = amd("short-power", 3, 3 * G, 10_000);
        short_power.cpu_power = 249;
        let cat = catalogue(vec![
            exact,
            short_power,
            amd("short-mem", 3, 3 * G - 1, 10_000),
            amd("short-cores", 2, 3 * G, 10_000),
        ]);
        let cons = Constraints {
            mem: at_least(3 * G),
            cores: at_least(3),
            cpu_power: at_least(250),
            ..Constraints::default()
        };
        assert_eq!(pick(&cons, &cat), Ok("exact".to_string()));
    }

    #[test]
    fn cores_counts_vcpus_not_physical_cores() {
        let mut hyperthreaded = amd("hyperthreaded", 2, 4 * G, 20_000);
        hyperthreaded.physical_cores = 1;
        let cat = catalogue(vec![hyperthreaded]);
        let cons = Constraints {
            cores: at_least(2),
            ..Constraints::default()
        };
        assert_eq!(pick(&cons, &cat), Ok("hyperthreaded".to_string()));
    }

    #[test]
    fn mem_max_picks_the_most_memory_among_types_meeting_the_other_constraints() {
        let cat = catalogue(vec![
            amd("small", 2, 4 * G, 10_000),
            amd("big", 2, 16 * G, 90_000),
            amd("big-one-core", 1, 64 * G, 90_000),
            itype("big-arm", Arch::Arm64, 2, 128 * G, 90_000),
        ]);
        let cons = Constraints {
            mem: Setting::Value(Amount::Max),
            cores: at_least(2),
            ..Constraints::default()
        };
        assert_eq!(pick(&cons, &cat), Ok("big".to_string()));
    }

    #[test]
    fn among_types_with_the_most_memory_the_usual_order_applies() {
        let cat = catalogue(vec![
            amd("dear", 2, 16 * G, 90_000),
            amd("cheap", 8, 16 * G, 80_000),
        ]);
        let cons = Constraints {
            mem: Setting::Value(Amount::Max),
            ..Constraints::default()
        };
        assert_eq!(pick(&cons, &cat), Ok("cheap".to_string()));
    }

    #[test]
    fn cores_max_picks_the_most_vcpus() {
        let cat = catalogue(vec![
            amd("wide", 16, 4 * G, 90_000),
            amd("narrow", 2, 64 * G, 10_000),
        ]);
        let cons = Constraints {
            cores: Setting::Value(Amount::Max),
            ..Constraints::default()
        };
        assert_eq!(pick(&cons, &cat), Ok("wide".to_string()));
    }

    #[test]
    fn cpu_power_max_picks_the_most_cpu_power() {
        let mut fast = amd("fast", 2, 4 * G, 90_000);
        fast.cpu_power = 900;
        let cat = catalogue(vec![fast, amd("slow", 4, 4 * G, 10_000)]);
        let cons = Constraints {
            cpu_power: Setting::Value(Amount::Max),
            ..Constraints::default()
        };
        assert_eq!(pick(&cons, &cat), Ok("fast".to_string()));
    }

    #[test]
    fn with_several_max_keys_memory_is_maximised_first_then_cores() {
        let cat = catalogue(vec![
            amd("most-cores", 32, 16 * G, 10_000),
            amd("most-mem-few-cores", 2, 64 * G, 10_000),
            amd("most-mem-more-cores", 4, 64 * G, 90_000),
        ]);
        let cons = Constraints {
            mem: Setting::Value(Amount::Max),
            cores: Setting::Value(Amount::Max),
            ..Constraints::default()
        };
        assert_eq!(pick(&cons, &cat), Ok("most-mem-more-cores".to_string()));
    }

    // --- defaults -------------------------------------------------------

    #[test]
    fn a_workload_machine_defaults_to_2g_one_core_and_amd64() {
        let req = workload(&Constraints::default());
        assert_eq!(req.mem, Some(Amount::AtLeast(2048)));
        assert_eq!(req.cores, Some(Amount::AtLeast(1)));
        assert_eq!(req.arch, Some(Arch::Amd64));
        assert_eq!(req.cpu_power, None);
    }

    #[test]
    fn a_controller_machine_defaults_to_3584m() {
        let req = Requirements::resolve(&Constraints::default(), MachineRole::Controller);
        assert_eq!(req.mem, Some(Amount::AtLeast(3584)));
        assert_eq!(req.cores, Some(Amount::AtLeast(1)));
        assert_eq!(req.arch, Some(Arch::Amd64));
    }

    #[test]
    fn the_default_memory_rules_out_smaller_types() {
        let cat = catalogue(vec![amd("1g", 1, G, 5_000), amd("2g", 1, 2 * G, 9_000)]);
        assert_eq!(pick(&Constraints::default(), &cat), Ok("2g".to_string()));
    }

    #[test]
    fn the_default_arch_rules_out_cheaper_arm64_types() {
        let cat = catalogue(vec![
            itype("arm", Arch::Arm64, 2, 4 * G, 5_000),
            amd("intel", 2, 4 * G, 9_000),
        ]);
        assert_eq!(pick(&Constraints::default(), &cat), Ok("intel".to_string()));
    }

    #[test]
    fn an_explicit_arch_replaces_the_default() {
        let cat = catalogue(vec![
            itype("arm", Arch::Arm64, 2, 4 * G, 9_000),
            amd("intel", 2, 4 * G, 5_000),
        ]);
        let cons = Constraints {
            arch: Setting::Value(Arch::Arm64),
            ..Constraints::default()
        };
        assert_eq!(pick(&cons, &cat), Ok("arm".to_string()));
    }

    #[test]
    fn an_empty_key_takes_berths_default() {
        let cons = Constraints {
            arch: Setting::Empty,
            mem: Setting::Empty,
            cores: Setting::Empty,
            ..Constraints::default()
        };
        assert_eq!(workload(&cons), workload(&Constraints::default()));
    }

    #[test]
    fn a_zero_size_neither_filters_nor_takes_the_default() {
        let cons = Constraints {
            mem: at_least(0),
            cores: at_least(0),
            cpu_power: at_least(0),
            ..Constraints::default()
        };
        let req = workload(&cons);
        assert_eq!((req.mem, req.cores, req.cpu_power), (None, None, None));
        let cat = catalogue(vec![amd("tiny", 1, 512, 1_000), amd("2g", 1, 2 * G, 9_000)]);
        assert_eq!(pick(&cons, &cat), Ok("tiny".to_string()));
    }

    #[test]
    fn a_given_size_replaces_its_default_only() {
        let cons = Constraints {
            mem: at_least(512),
            ..Constraints::default()
        };
        let req = workload(&cons);
        assert_eq!(req.mem, Some(Amount::AtLeast(512)));
        assert_eq!(req.cores, Some(Amount::AtLeast(1)));
    }

    #[test]
    fn naming_an_instance_type_drops_the_size_and_arch_defaults() {
        let cons = Constraints {
            instance_type: named("m1.small"),
            ..Constraints::default()
        };
        let req = Requirements::resolve(&cons, MachineRole::Controller);
        assert_eq!((req.arch, req.mem, req.cores), (None, None, None));
        assert_eq!(pick(&cons, &m1_catalogue()), Ok("m1.small".to_string()));
    }

    // --- instance-type ----------------------------------------------------

    #[test]
    fn a_named_type_wins_over_a_cheaper_type_that_covers_it() {
        let cat = catalogue(vec![
            amd("old", 1, 2 * G, 50_000),
            amd("new", 2, 4 * G, 20_000),
        ]);
        let cons = Constraints {
            instance_type: named("old"),
            mem: at_least(G),
            ..Constraints::default()
        };
        assert_eq!(pick(&cons, &cat), Ok("old".to_string()));
    }

    #[test]
    fn generic_constraints_tighter_than_the_named_type_choose_the_cheapest_that_covers_it() {
        let cat = catalogue(vec![
            amd("named", 2, 2 * G, 10_000),
            amd("fewer-cores", 1, 8 * G, 20_000),
            amd("covers-dear", 4, 8 * G, 90_000),
            amd("covers", 2, 8 * G, 40_000),
        ]);
        let cons = Constraints {
            instance_type: named("named"),
            mem: at_least(8 * G),
            ..Constraints::default()
        };
        assert_eq!(pick(&cons, &cat), Ok("covers".to_string()));
    }

    #[test]
    fn a_covering_type_must_match_the_named_types_gpus_but_not_its_instance_storage() {
        let mut named_type = amd("named", 2, 2 * G, 10_000);
        named_type.gpus = 1;
        named_type.instance_storage_gb = 100;
        let mut no_gpu = amd("no-gpu", 2, 8 * G, 20_000);
        no_gpu.instance_storage_gb = 100;
        let mut no_disk = amd("no-disk", 2, 8 * G, 20_000);
        no_disk.gpus = 1;
        let mut both = amd("both", 2, 8 * G, 60_000);
        both.gpus = 2;
        both.instance_storage_gb = 200;
        let cat = catalogue(vec![named_type, no_gpu, no_disk, both]);
        let cons = Constraints {
            instance_type: named("named"),
            mem: at_least(8 * G),
            ..Constraints::default()
        };
        assert_eq!(pick(&cons, &cat), Ok("no-disk".to_string()));
    }

    #[test]
    fn a_covering_type_has_the_named_types_arch() {
        let cat = catalogue(vec![
            itype("named", Arch::Arm64, 2, 2 * G, 10_000),
            amd("intel", 2, 8 * G, 20_000),
            itype("arm", Arch::Arm64, 2, 8 * G, 30_000),
        ]);
        let cons = Constraints {
            instance_type: named("named"),
            mem: at_least(8 * G),
            ..Constraints::default()
        };
        assert_eq!(pick(&cons, &cat), Ok("arm".to_string()));
    }

    #[test]
    fn an_arch_different_from_the_named_types_matches_nothing() {
        let cons = Constraints {
            instance_type: named("m1.small"),
            arch: Setting::Value(Arch::Arm64),
            ..Constraints::default()
        };
        assert_eq!(
            pick(&cons, &m1_catalogue()),
            Err(
                r#"no instance type satisfies constraints "arch=arm64 instance-type=m1.small""#
                    .to_string()
            )
        );
    }

    #[test]
    fn max_is_tighter_than_a_named_type() {
        let cons = Constraints {
            instance_type: named("m1.medium"),
            mem: Setting::Value(Amount::Max),
            ..Constraints::default()
        };
        assert_eq!(pick(&cons, &m1_catalogue()), Ok("m1.xlarge".to_string()));
    }

    #[test]
    fn an_instance_type_not_in_the_catalogue_is_refused_in_juju_words() {
        let cons = Constraints {
            instance_type: named("x"),
            ..Constraints::default()
        };
        assert_eq!(
            select_for_workload(&cons, &m1_catalogue()),
            Err(SelectError::InvalidInstanceType("x".to_string()))
        );
        assert_eq!(
            pick(&cons, &m1_catalogue()),
            Err(r#"invalid instance type "x""#.to_string())
        );
    }

    // --- keys that do not size the type -----------------------------------

    #[test]
    fn root_disk_never_filters_but_is_carried_for_the_provider() {
        let cons = Constraints {
            root_disk: at_least(10_000_000),
            ..Constraints::default()
        };
        assert_eq!(workload(&cons).root_disk_mib, Some(10_000_000));
        assert_eq!(pick(&cons, &m1_catalogue()), Ok("m1.medium".to_string()));
    }

    #[test]
    fn root_disk_max_asks_for_the_largest_ebs_volume() {
        let cons = Constraints {
            root_disk: Setting::Value(Amount::Max),
            ..Constraints::default()
        };
        assert_eq!(workload(&cons).root_disk_mib, Some(16 * 1024 * 1024));
    }

    #[test]
    fn root_disk_zero_or_empty_asks_for_the_providers_default() {
        for root_disk in [at_least(0), Setting::Empty, Setting::Unset] {
            let cons = Constraints {
                root_disk,
                ..Constraints::default()
            };
            assert_eq!(workload(&cons).root_disk_mib, None);
        }
    }

    fn tag_catalogue() -> Catalogue {
        catalogue(vec![
            tagged(
                amd("burst", 2, 4 * G, 10_000),
                &[Tag::Burstable, Tag::CurrentGeneration],
            ),
            tagged(amd("steady", 2, 4 * G, 20_000), &[Tag::CurrentGeneration]),
            tagged(amd("gpu", 2, 4 * G, 30_000), &[Tag::Gpu]),
        ])
    }

    fn with_tags(spec: &[&str]) -> Constraints {
        Constraints {
            tags: Setting::Value(items(spec)),
            ..Constraints::default()
        }
    }

    #[test]
    fn a_required_tag_keeps_only_types_that_carry_it() {
        assert_eq!(
            pick(&with_tags(&["gpu"]), &tag_catalogue()),
            Ok("gpu".to_string())
        );
    }

    #[test]
    fn an_excluded_tag_drops_types_that_carry_it() {
        assert_eq!(
            pick(&with_tags(&["^burstable"]), &tag_catalogue()),
            Ok("steady".to_string())
        );
    }

    #[test]
    fn required_and_excluded_tags_combine() {
        assert_eq!(
            pick(
                &with_tags(&["current-generation", "^burstable"]),
                &tag_catalogue()
            ),
            Ok("steady".to_string())
        );
    }

    #[test]
    fn a_required_tag_no_type_can_carry_matches_nothing() {
        assert_eq!(
            pick(&with_tags(&["ssd"]), &tag_catalogue()),
            Err(
                r#"no instance type satisfies constraints "arch=amd64 mem=2048M cores=1 tags=ssd""#
                    .to_string()
            )
        );
    }

    #[test]
    fn excluding_an_unknown_tag_excludes_nothing() {
        assert_eq!(
            pick(&with_tags(&["^ssd"]), &tag_catalogue()),
            Ok("burst".to_string())
        );
    }

    #[test]
    fn virt_type_matches_only_types_that_state_it() {
        let mut unstated = amd("unstated", 2, 4 * G, 10_000);
        unstated.virt_type = None;
        let mut pv = amd("pv", 2, 4 * G, 20_000);
        pv.virt_type = Some("pv".to_string());
        let cat = catalogue(vec![unstated, pv, amd("hvm", 2, 4 * G, 30_000)]);
        let with_virt = |v: &str| Constraints {
            virt_type: named(v),
            ..Constraints::default()
        };
        assert_eq!(pick(&with_virt("hvm"), &cat), Ok("hvm".to_string()));
        assert_eq!(pick(&with_virt("pv"), &cat), Ok("pv".to_string()));
        assert_eq!(
            pick(&Constraints::default(), &cat),
            Ok("unstated".to_string())
        );
    }

    fn everything() -> Constraints {
        Constraints {
            arch: Setting::Value(Arch::Amd64),
            container: Setting::Value(ContainerType::Lxd),
            mem: at_least(4 * G),
            cores: at_least(2),
            cpu_power: at_least(200),
            root_disk: at_least(16 * G),
            root_disk_source: named("gp3"),
            instance_type: named("m1.large"),
            virt_type: named("hvm"),
            tags: Setting::Value(items(&["current-generation", "^gpu"])),
            zones: Setting::Value(vec!["us-east-1a".to_string(), "us-east-1b".to_string()]),
            spaces: Setting::Value(items(&["db", "^dmz"])),
            allocate_public_ip: Setting::Value(true),
            image_id: named("ami-0abc"),
            instance_role: named("berth-agents"),
            storage: Setting::Unset,
        }
    }

    #[test]
    fn keys_that_do_not_choose_the_type_are_carried_through() {
        let req = workload(&everything());
        assert_eq!(req.container, Some(ContainerType::Lxd));
        assert_eq!(req.root_disk_source.as_deref(), Some("gp3"));
        assert_eq!(req.zones, vec!["us-east-1a", "us-east-1b"]);
        assert_eq!(req.spaces, items(&["db", "^dmz"]));
        assert_eq!(req.allocate_public_ip, Some(true));
        assert_eq!(req.image_id.as_deref(), Some("ami-0abc"));
        assert_eq!(req.instance_role.as_deref(), Some("berth-agents"));
        assert_eq!(req.root_disk_mib, Some(16 * G));
    }

    #[test]
    fn keys_that_do_not_choose_the_type_do_not_change_the_choice() {
        let mut cons = everything();
        cons.tags = Setting::Unset;
        assert_eq!(pick(&cons, &m1_catalogue()), Ok("m1.large".to_string()));
    }

    #[test]
    fn unset_pass_through_keys_resolve_to_nothing() {
        let req = workload(&Constraints::default());
        assert_eq!(req.container, None);
        assert_eq!(req.root_disk_source, None);
        assert!(req.zones.is_empty());
        assert!(req.spaces.is_empty());
        assert!(req.tags.is_empty());
        assert_eq!(req.allocate_public_ip, None);
        assert_eq!(req.image_id, None);
        assert_eq!(req.virt_type, None);
        assert_eq!(req.instance_type, None);
    }

    // --- errors and printing ------------------------------------------------

    #[test]
    fn no_match_quotes_the_resolved_constraints() {
        let cons = Constraints {
            mem: at_least(1024 * G),
            ..Constraints::default()
        };
        assert_eq!(
            select_for_workload(&cons, &m1_catalogue()),
            Err(SelectError::NoMatch {
                constraints: "arch=amd64 mem=1048576M cores=1".to_string()
            })
        );
        assert_eq!(
            pick(&cons, &m1_catalogue()),
            Err(
                r#"no instance type satisfies constraints "arch=amd64 mem=1048576M cores=1""#
                    .to_string()
            )
        );
    }

    #[test]
    fn an_empty_catalogue_matches_nothing() {
        assert_eq!(
            pick(&Constraints::default(), &catalogue(vec![])),
            Err(
                r#"no instance type satisfies constraints "arch=amd64 mem=2048M cores=1""#
                    .to_string()
            )
        );
    }

    #[test]
    fn storage_defaults_to_4g_rules_out_what_no_disk_can_hold_and_sizes_the_root_volume() {
        let default = workload(&Constraints::default());
        assert_eq!((default.storage_mib, default.root_disk_mib), (None, None));
        let req = workload(&Constraints::parse("storage=50G root-disk=20G").unwrap());
        assert_eq!(req.storage_mib, Some(50 * G));
        assert_eq!(req.root_disk_mib, Some(50 * G), "the larger of the two");
        let req = workload(&Constraints::parse("storage=10G root-disk=20G").unwrap());
        assert_eq!(req.root_disk_mib, Some(20 * G));
        let req = workload(&Constraints::parse("storage=max").unwrap());
        assert_eq!(req.storage_mib, Some(defaults::MAX_ROOT_DISK_MIB));
        assert_eq!(req.root_disk_mib, Some(defaults::MAX_ROOT_DISK_MIB));
        assert_eq!(
            pick(&Constraints::parse("storage=max").unwrap(), &m1_catalogue()),
            pick(&Constraints::default(), &m1_catalogue())
        );
        // More than the largest EBS volume: no type has that much
        // persistent disk (an instance store is not persistent).
        assert_eq!(
            pick(&Constraints::parse("storage=17T").unwrap(), &m1_catalogue()),
            Err(
                r#"no instance type satisfies constraints "arch=amd64 mem=2048M cores=1 root-disk=17825792M storage=17825792M""#
                    .to_string()
            )
        );
    }

    #[test]
    fn requirements_print_in_the_canonical_key_order() {
        assert_eq!(
            workload(&everything()).to_string(),
            "arch=amd64 container=lxd mem=4096M cores=2 cpu-power=200 root-disk=16384M \
             root-disk-source=gp3 instance-type=m1.large virt-type=hvm \
             tags=current-generation,^gpu zones=us-east-1a,us-east-1b spaces=db,^dmz \
             allocate-public-ip=true image-id=ami-0abc instance-role=berth-agents"
        );
    }

    #[test]
    fn max_prints_as_max() {
        let cons = Constraints {
            mem: Setting::Value(Amount::Max),
            cores: Setting::Value(Amount::Max),
            cpu_power: Setting::Value(Amount::Max),
            ..Constraints::default()
        };
        assert_eq!(
            workload(&cons).to_string(),
            "arch=amd64 mem=max cores=max cpu-power=max"
        );
    }

    // --- the embedded catalogue ---------------------------------------------

    #[test]
    fn the_embedded_catalogue_has_all_1340_types() {
        assert_eq!(Catalogue::embedded().unwrap().len(), 1340);
    }

    #[test]
    fn the_embedded_catalogue_is_parsed_once_and_shared() {
        let a = Catalogue::embedded().unwrap();
        let b = Catalogue::embedded().unwrap();
        assert!(std::ptr::eq(a, b));
    }

    /// CSV: `t3a.small,amd64,2,1,200,2048,2.2,true,true,0,false,0,0.0188`,
    /// the cheapest amd64 type with at least 2 GiB.
    #[test]
    fn default_constraints_pick_t3a_small_from_the_embedded_catalogue() {
        let cat = Catalogue::embedded().unwrap();
        let t = select_for_workload(&Constraints::default(), cat).unwrap();
        assert_eq!(t.name, "t3a.small");
        assert_eq!((t.arch, t.vcpus, t.mem_mib), (Arch::Amd64, 2, 2048));
        assert_eq!(t.price.to_string(), "0.0188");
    }

    /// CSV: `t3a.medium,amd64,2,1,200,4096,2.2,true,true,0,false,0,0.0376`.
    #[test]
    fn a_controller_gets_t3a_medium_from_the_embedded_catalogue() {
        let cat = Catalogue::embedded().unwrap();
        let req = Requirements::resolve(&Constraints::default(), MachineRole::Controller);
        assert_eq!(select(&req, cat).unwrap().name, "t3a.medium");
    }

    /// CSV: `t4g.small,arm64,2,2,200,2048,2.5,true,true,0,false,0,0.0168`.
    #[test]
    fn arm64_defaults_pick_t4g_small_from_the_embedded_catalogue() {
        let cat = Catalogue::embedded().unwrap();
        let cons = Constraints {
            arch: Setting::Value(Arch::Arm64),
            ..Constraints::default()
        };
        assert_eq!(pick(&cons, cat), Ok("t4g.small".to_string()));
    }

    #[test]
    fn an_embedded_row_is_read_field_by_field() {
        let t = Catalogue::embedded().unwrap().get("t3a.small").unwrap();
        assert_eq!(
            t,
            &InstanceType {
                name: "t3a.small".to_string(),
                arch: Arch::Amd64,
                vcpus: 2,
                physical_cores: 1,
                cpu_power: 200,
                mem_mib: 2048,
                clock_mhz: Some(2200),
                gpus: 0,
                instance_storage_gb: 0,
                price: HourlyPrice::from_micro_usd(18_800),
                tags: [Tag::Burstable, Tag::CurrentGeneration]
                    .into_iter()
                    .collect(),
                virt_type: Some("hvm".to_string()),
            }
        );
    }

    /// Counted in the CSV: 59 rows with `gpus` > 0, 141 with `bare_metal`
    /// true, every one of them named `*metal*`.
    #[test]
    fn gpu_and_bare_metal_columns_become_tags() {
        let cat = Catalogue::embedded().unwrap();
        let tagged = |tag| cat.types().iter().filter(move |t| t.tags.contains(tag));
        assert_eq!(tagged(Tag::Gpu).count(), 59);
        assert!(tagged(Tag::Gpu).all(|t| t.gpus > 0));
        assert_eq!(tagged(Tag::BareMetal).count(), 141);
        assert!(tagged(Tag::BareMetal).all(|t| t.name.contains("metal")));
        assert_eq!(cat.get("m1.small").unwrap().tags, TagSet::EMPTY);
    }

    // --- loading CSV --------------------------------------------------------

    const HEADER: &str = "instance_type,arch,vcpus,cores,cpu_power,mem_mib,clock_ghz,burstable,current_generation,gpus,bare_metal,instance_storage_gb,hourly_usd";
    const GOOD_ROW: &str = "m5.large,amd64,2,1,200,8192,3.1,false,true,0,false,0,0.096";

    fn load(rows: &[&str]) -> Result<Catalogue, String> {
        let text = std::iter::once(HEADER)
            .chain(rows.iter().copied())
            .collect::<Vec<_>>()
            .join("\n");
        Catalogue::from_csv(&text).map_err(|e| e.to_string())
    }

    #[test]
    fn a_good_row_loads_with_its_tags_and_virt_type() {
        let cat = load(&[
            GOOD_ROW,
            "p3.2xlarge,amd64,8,4,800,62464,,false,true,1,false,0,3.06",
        ])
        .unwrap();
        let m5 = cat.get("m5.large").unwrap();
        assert_eq!(m5.clock_mhz, Some(3100));
        assert_eq!(m5.tags, TagSet::EMPTY.with(Tag::CurrentGeneration));
        assert_eq!(m5.virt_type.as_deref(), Some("hvm"));
        let p3 = cat.get("p3.2xlarge").unwrap();
        assert_eq!(p3.clock_mhz, None);
        assert_eq!(p3.price, HourlyPrice::from_micro_usd(3_060_000));
        assert_eq!(
            p3.tags,
            [Tag::CurrentGeneration, Tag::Gpu].into_iter().collect()
        );
    }

    #[test]
    fn columns_may_come_in_any_order_and_extra_columns_are_ignored() {
        let text = "note,hourly_usd,instance_storage_gb,bare_metal,gpus,current_generation,burstable,clock_ghz,mem_mib,cpu_power,cores,vcpus,arch,instance_type\n\
                    hi,0.5,0,false,0,true,false,,4096,200,1,2,arm64,x.large";
        let cat = Catalogue::from_csv(text).unwrap();
        let t = cat.get("x.large").unwrap();
        assert_eq!(
            (t.arch, t.vcpus, t.physical_cores, t.mem_mib),
            (Arch::Arm64, 2, 1, 4096)
        );
        assert_eq!(t.price, HourlyPrice::from_micro_usd(500_000));
    }

    #[test]
    fn a_bad_number_names_its_line_and_column() {
        assert_eq!(
            load(&[
                GOOD_ROW,
                "m5.xlarge,amd64,4,2,400,16G,3.1,false,true,0,false,0,0.192"
            ])
            .unwrap_err(),
            r#"line 3, column mem_mib: expected a whole number of MiB, found "16G""#
        );
    }

    #[test]
    fn a_negative_count_is_refused() {
        assert_eq!(
            load(&["m5.large,amd64,-2,1,200,8192,3.1,false,true,0,false,0,0.096"]).unwrap_err(),
            r#"line 2, column vcpus: expected a whole number of vCPUs, found "-2""#
        );
    }

    #[test]
    fn an_unknown_arch_is_refused() {
        assert_eq!(
            load(&["m5.large,x86_64,2,1,200,8192,3.1,false,true,0,false,0,0.096"]).unwrap_err(),
            r#"line 2, column arch: expected an architecture (amd64, arm64, ppc64el, s390x or riscv64), found "x86_64""#
        );
    }

    #[test]
    fn a_flag_must_be_true_or_false() {
        assert_eq!(
            load(&["m5.large,amd64,2,1,200,8192,3.1,yes,true,0,false,0,0.096"]).unwrap_err(),
            r#"line 2, column burstable: expected true or false, found "yes""#
        );
    }

    #[test]
    fn a_price_with_too_many_decimals_is_refused() {
        assert_eq!(
            load(&["m5.large,amd64,2,1,200,8192,3.1,false,true,0,false,0,0.0000001"]).unwrap_err(),
            r#"line 2, column hourly_usd: expected a price in US dollars with at most 6 decimal places, found "0.0000001""#
        );
    }

    #[test]
    fn a_missing_price_is_refused() {
        assert_eq!(
            load(&["m5.large,amd64,2,1,200,8192,3.1,false,true,0,false,0,"]).unwrap_err(),
            r#"line 2, column hourly_usd: expected a price in US dollars with at most 6 decimal places, found """#
        );
    }

    #[test]
    fn a_bad_clock_speed_is_refused() {
        assert_eq!(
            load(&["m5.large,amd64,2,1,200,8192,fast,false,true,0,false,0,0.096"]).unwrap_err(),
            r#"line 2, column clock_ghz: expected a clock speed in GHz with at most 3 decimal places, or nothing, found "fast""#
        );
    }

    #[test]
    fn an_empty_name_is_refused() {
        assert_eq!(
            load(&[",amd64,2,1,200,8192,3.1,false,true,0,false,0,0.096"]).unwrap_err(),
            r#"line 2, column instance_type: expected an instance type name (not empty, no spaces), found """#
        );
    }

    #[test]
    fn a_row_with_too_few_fields_is_refused_with_its_line() {
        assert_eq!(
            load(&[GOOD_ROW, "m5.xlarge,amd64,4"]).unwrap_err(),
            "line 3: malformed CSV: expected 13 fields, found 3"
        );
    }

    #[test]
    fn a_missing_column_is_named() {
        let text = HEADER.replace(",hourly_usd", "") + "\n";
        assert_eq!(
            Catalogue::from_csv(&text).unwrap_err(),
            CatalogueError::MissingColumn {
                column: "hourly_usd"
            }
        );
        assert!(Catalogue::from_csv(&text)
            .unwrap_err()
            .to_string()
            .starts_with(
                r#"line 1: missing column "hourly_usd"; expected the columns instance_type,arch,"#
            ));
    }

    #[test]
    fn an_empty_text_lacks_every_column() {
        assert_eq!(
            Catalogue::from_csv("").unwrap_err(),
            CatalogueError::MissingColumn {
                column: "instance_type"
            }
        );
    }

    #[test]
    fn a_header_alone_is_an_empty_catalogue() {
        assert!(load(&[]).unwrap().is_empty());
    }

    #[test]
    fn a_duplicate_row_names_both_lines() {
        assert_eq!(
            load(&[GOOD_ROW, GOOD_ROW]).unwrap_err(),
            r#"line 3, column instance_type: duplicate instance type "m5.large" (first on line 2)"#
        );
    }

    #[test]
    fn a_hand_built_catalogue_refuses_duplicate_and_empty_names() {
        assert_eq!(
            Catalogue::new(vec![amd("a", 1, G, 1), amd("a", 2, G, 1)]),
            Err(CatalogueError::DuplicateName("a".to_string()))
        );
        assert_eq!(
            Catalogue::new(vec![amd("", 1, G, 1)]),
            Err(CatalogueError::EmptyName)
        );
    }

    // --- prices ---------------------------------------------------------------

    #[test]
    fn prices_parse_exactly_to_millionths_of_a_dollar() {
        assert_eq!("0.0188".parse(), Ok(HourlyPrice::from_micro_usd(18_800)));
        assert_eq!("12".parse(), Ok(HourlyPrice::from_micro_usd(12_000_000)));
        assert_eq!(
            "125.58182".parse(),
            Ok(HourlyPrice::from_micro_usd(125_581_820))
        );
        assert_eq!("0.000001".parse(), Ok(HourlyPrice::from_micro_usd(1)));
    }

    #[test]
    fn malformed_prices_are_refused() {
        for bad in [
            "",
            ".5",
            "5.",
            "-1",
            "+1",
            "1e3",
            "0.0000001",
            "1.2.3",
            " 1",
            "99999999999999999999",
        ] {
            assert_eq!(
                bad.parse::<HourlyPrice>(),
                Err(InvalidPrice(bad.to_string())),
                "{bad:?}"
            );
        }
        assert_eq!(
            InvalidPrice("x".to_string()).to_string(),
            r#"invalid price "x": expected US dollars per hour with at most 6 decimal places"#
        );
    }

    #[test]
    fn prices_print_without_trailing_zeros() {
        assert_eq!(HourlyPrice::from_micro_usd(18_800).to_string(), "0.0188");
        assert_eq!(HourlyPrice::from_micro_usd(12_000_000).to_string(), "12");
        assert_eq!(HourlyPrice::from_micro_usd(1).to_string(), "0.000001");
        assert_eq!(HourlyPrice::from_micro_usd(0).to_string(), "0");
    }

    #[test]
    fn tags_parse_and_print_the_same_words() {
        for tag in Tag::ALL {
            assert_eq!(Tag::parse(tag.as_str()), Some(tag));
        }
        assert_eq!(Tag::parse("ssd"), None);
    }

    // --- properties -----------------------------------------------------------

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn arb_type(i: usize) -> impl Strategy<Value = InstanceType> {
            (
                prop_oneof![Just(Arch::Amd64), Just(Arch::Arm64)],
                1u64..5,
                0u64..5,
                prop::sample::select(vec![512u64, 1024, 2048, 3584, 4096]),
                0u64..3,
                prop::sample::select(vec![0u64, 100]),
                1u64..5,
                0u8..16,
                prop::option::of(Just("hvm".to_string())),
            )
                .prop_map(
                    move |(arch, vcpus, power, mem, gpus, storage, price, tag_bits, virt)| {
                        InstanceType {
                            name: format!("t{i}"),
                            arch,
                            vcpus,
                            physical_cores: vcpus,
                            cpu_power: power * 100,
                            mem_mib: mem,
                            clock_mhz: None,
                            gpus,
                            instance_storage_gb: storage,
                            price: HourlyPrice::from_micro_usd(price * 1000),
                            tags: Tag::ALL
                                .into_iter()
                                .filter(|t| tag_bits & t.bit() != 0)
                                .collect(),
                            virt_type: virt,
                        }
                    },
                )
        }

        fn arb_catalogue() -> impl Strategy<Value = Catalogue> {
            (0usize..8)
                .prop_flat_map(|n| (0..n).map(arb_type).collect::<Vec<_>>())
                .prop_map(|types| Catalogue::new(types).unwrap())
        }

        fn arb_amount(unit: u64) -> impl Strategy<Value = Setting<Amount>> {
            prop_oneof![
                Just(Setting::Unset),
                Just(Setting::Empty),
                Just(Setting::Value(Amount::Max)),
                (0u64..6).prop_map(move |n| Setting::Value(Amount::AtLeast(n * unit))),
            ]
        }

        fn arb_tags() -> impl Strategy<Value = Setting<Vec<ListItem>>> {
            let item = (
                prop::sample::select(vec![
                    "burstable",
                    "current-generation",
                    "bare-metal",
                    "gpu",
                    "ssd",
                ]),
                any::<bool>(),
            )
                .prop_map(|(name, excluded)| ListItem {
                    name: name.to_string(),
                    excluded,
                });
            prop_oneof![
                Just(Setting::Unset),
                prop::collection::vec(item, 0..3).prop_map(Setting::Value),
            ]
        }

        fn arb_constraints() -> impl Strategy<Value = Constraints> {
            (
                prop_oneof![
                    Just(Setting::Unset),
                    Just(Setting::Empty),
                    Just(Setting::Value(Arch::Amd64)),
                    Just(Setting::Value(Arch::Arm64)),
                ],
                arb_amount(700),
                arb_amount(1),
                arb_amount(100),
                arb_amount(1000),
                prop_oneof![
                    3 => Just(Setting::Unset),
                    // Names past the catalogue's end are unknown.
                    2 => (0usize..10).prop_map(|i| Setting::Value(format!("t{i}"))),
                ],
                prop_oneof![
                    Just(Setting::Unset),
                    Just(Setting::Value("hvm".to_string())),
                    Just(Setting::Value("pv".to_string())),
                ],
                arb_tags(),
            )
                .prop_map(
                    |(arch, mem, cores, cpu_power, root_disk, instance_type, virt_type, tags)| {
                        Constraints {
                            arch,
                            mem,
                            cores,
                            cpu_power,
                            root_disk,
                            instance_type,
                            virt_type,
                            tags,
                            ..Constraints::default()
                        }
                    },
                )
        }

        fn arb_role() -> impl Strategy<Value = MachineRole> {
            prop_oneof![Just(MachineRole::Workload), Just(MachineRole::Controller)]
        }

        /// Whether `t` meets every requirement, written out key by key.
        fn satisfies(req: &Requirements, cat: &Catalogue, t: &InstanceType) -> bool {
            let min_ok = |want: Option<Amount>, have: u64| match want {
                Some(Amount::AtLeast(n)) => have >= n,
                Some(Amount::Max) | None => true,
            };
            let floor_ok = match &req.instance_type {
                None => true,
                Some(name) => cat.get(name).is_some_and(|f| {
                    t.arch == f.arch
                        && t.mem_mib >= f.mem_mib
                        && t.vcpus >= f.vcpus
                        && t.cpu_power >= f.cpu_power
                        && t.gpus >= f.gpus
                }),
            };
            let tags_ok = req.tags.iter().all(|item| {
                let has = t.tags.iter().any(|tag| tag.as_str() == item.name);
                has != item.excluded
            });
            req.arch.is_none_or(|a| a == t.arch)
                && min_ok(req.mem, t.mem_mib)
                && min_ok(req.cores, t.vcpus)
                && min_ok(req.cpu_power, t.cpu_power)
                && floor_ok
                && tags_ok
                && req
                    .virt_type
                    .as_ref()
                    .is_none_or(|v| t.virt_type.as_ref() == Some(v))
        }

        /// The documented choice, computed the slow way: filter, narrow to
        /// the largest value of each `max` key in turn, prefer the named type,
        /// then sort by (price, mem, cpu-power, vcpus, name).
        fn expected(req: &Requirements, cat: &Catalogue) -> Option<String> {
            let mut candidates: Vec<&InstanceType> = cat
                .types()
                .iter()
                .filter(|t| satisfies(req, cat, t))
                .collect();
            let narrow = |cands: &mut Vec<&InstanceType>, key: fn(&InstanceType) -> u64| {
                if let Some(top) = cands.iter().map(|t| key(t)).max() {
                    cands.retain(|t| key(t) == top);
                }
            };
            if req.mem == Some(Amount::Max) {
                narrow(&mut candidates, |t| t.mem_mib);
            }
            if req.cores == Some(Amount::Max) {
                narrow(&mut candidates, |t| t.vcpus);
            }
            if req.cpu_power == Some(Amount::Max) {
                narrow(&mut candidates, |t| t.cpu_power);
            }
            if let Some(name) = &req.instance_type {
                if candidates.iter().any(|t| &t.name == name) {
                    return Some(name.clone());
                }
            }
            candidates.sort_by_key(|t| (t.price, t.mem_mib, t.cpu_power, t.vcpus, t.name.clone()));
            candidates.first().map(|t| t.name.clone())
        }

        proptest! {
            #[test]
            fn select_never_returns_a_type_that_violates_the_constraints(
                cat in arb_catalogue(),
                cons in arb_constraints(),
                role in arb_role(),
            ) {
                let req = Requirements::resolve(&cons, role);
                if let Ok(t) = select(&req, &cat) {
                    prop_assert!(satisfies(&req, &cat, t), "{} does not satisfy {req}", t.name);
                }
            }

            #[test]
            fn select_never_returns_a_pricier_type_than_needed(
                cat in arb_catalogue(),
                cons in arb_constraints(),
                role in arb_role(),
            ) {
                let req = Requirements::resolve(&cons, role);
                if let Ok(chosen) = select(&req, &cat) {
                    let named = req.instance_type.as_deref() == Some(chosen.name.as_str());
                    let has_max = [req.mem, req.cores, req.cpu_power].contains(&Some(Amount::Max));
                    if !named && !has_max {
                        for t in cat.types().iter().filter(|t| satisfies(&req, &cat, t)) {
                            let better = (t.price, t.mem_mib, t.cpu_power, t.vcpus, &t.name)
                                < (chosen.price, chosen.mem_mib, chosen.cpu_power, chosen.vcpus, &chosen.name);
                            prop_assert!(!better, "{} beats {} for {req}", t.name, chosen.name);
                        }
                    }
                }
            }

            #[test]
            fn a_remembered_choice_is_the_one_a_scan_makes(
                cat in arb_catalogue(),
                asked in proptest::collection::vec((arb_constraints(), arb_role()), 1..6),
            ) {
                // Each question twice, interleaved, of one catalogue.
                for _ in 0..2 {
                    for (cons, role) in &asked {
                        let req = Requirements::resolve(cons, *role);
                        let scanned = select_index_among(&req, &cat, |_| true)
                            .map(|i| cat.types()[i].name.clone());
                        prop_assert_eq!(select(&req, &cat).map(|t| t.name.clone()), scanned);
                    }
                }
            }

            #[test]
            fn select_makes_the_documented_choice(
                cat in arb_catalogue(),
                cons in arb_constraints(),
                role in arb_role(),
            ) {
                let req = Requirements::resolve(&cons, role);
                let got = select(&req, &cat);
                match &req.instance_type {
                    Some(name) if cat.get(name).is_none() => {
                        prop_assert_eq!(got, Err(SelectError::InvalidInstanceType(name.clone())));
                    }
                    _ => match expected(&req, &cat) {
                        Some(name) => prop_assert_eq!(got.map(|t| t.name.clone()), Ok(name)),
                        None => prop_assert_eq!(
                            got,
                            Err(SelectError::NoMatch { constraints: req.to_string() })
                        ),
                    },
                }
            }

            #[test]
            fn the_filters_together_accept_exactly_the_candidates(
                cat in arb_catalogue(),
                cons in arb_constraints(),
                role in arb_role(),
            ) {
                let req = Requirements::resolve(&cons, role);
                if let Ok(filters) = filters(&req, &cat) {
                    for t in cat.types() {
                        let all = filters.iter().all(|f| f.accepts(t));
                        let floor = req.instance_type.as_ref().and_then(|n| cat.get(n));
                        let matcher = Matcher::new(&req, floor);
                        let candidate = matcher.satisfiable && matcher.accepts(t);
                        prop_assert_eq!(all, candidate, "{} for {}", t.name, req);
                    }
                };
            }

            #[test]
            fn a_price_prints_as_it_parses(micro in 0u64..10_000_000_000) {
                let price = HourlyPrice::from_micro_usd(micro);
                prop_assert_eq!(price.to_string().parse::<HourlyPrice>(), Ok(price));
            }
        }
    }
}

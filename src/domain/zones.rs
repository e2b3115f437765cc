//! Zone choice: the ordered list of availability zones a machine should try.
//!
//! This module owns three things:
//!
//! - the *distribution group* of a machine ([`DistributionGroup`]): the
//!   machines its zone spread is computed against. Controllers form one group;
//!   any other machine's group is every machine hosting units of any of the
//!   same applications;
//! - the [`ZoneCensus`], the per-zone machine counts, kept incrementally (one
//!   [`ZoneCensus::add`] or [`ZoneCensus::remove`] per placement) so that a
//!   decision reads counts instead of rescanning every machine;
//! - [`order_zones`], the pure decision: fewest members of the machine's group
//!   first, then fewest machines overall, then name. Unavailable zones, zones
//!   that already refused this machine and zones outside its `zones`
//!   constraint are never in the answer; a `zone=` placement allows exactly
//!   one zone.
//!
//! The engine tries the zones in the returned order. When a zone refuses for
//! zone-specific reasons it adds that zone to the machine's failed set and
//! tries the next one at once, without sleeping.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::domain::constraints::Setting;
use crate::domain::machine::MachineRole;

/// Whether a zone may receive new machines.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ZoneHealth {
    Available,
    /// Reported unavailable by the provider, or disabled by an administrator.
    Unavailable {
        /// Shown to users in errors, so it should say who disabled the zone
        /// and why.
        reason: String,
    },
}

/// An availability zone as the provider (or an administrator) reports it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Zone {
    pub name: String,
    pub health: ZoneHealth,
}

impl Zone {
    /// A zone that may receive new machines.
    pub fn available(name: impl Into<String>) -> Zone {
        Zone {
            name: name.into(),
            health: ZoneHealth::Available,
        }
    }

    /// A zone that must not receive new machines, and why.
    pub fn unavailable(name: impl Into<String>, reason: impl Into<String>) -> Zone {
        Zone {
            name: name.into(),
            health: ZoneHealth::Unavailable {
                reason: reason.into(),
            },
        }
    }

    pub fn is_available(&self) -> bool {
        self.health == ZoneHealth::Available
    }
}

/// What a machine is, as far as zone spreading cares: its role and the
/// applications whose units it hosts.
///
/// The census counts machines by their whole `Occupant` value, which is what
/// keeps group counts exact (see [`ZoneCensus`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Occupant {
    pub role: MachineRole,
    pub applications: BTreeSet<String>,
}

impl Occupant {
    pub fn new<I, S>(role: MachineRole, applications: I) -> Occupant
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Occupant {
            role,
            applications: applications.into_iter().map(Into::into).collect(),
        }
    }

    /// A controller hosting units of `applications` (usually none).
    pub fn controller<I, S>(applications: I) -> Occupant
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Occupant::new(MachineRole::Controller, applications)
    }

    /// A machine that is not a controller, hosting units of `applications`.
    pub fn workload<I, S>(applications: I) -> Occupant
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Occupant::new(MachineRole::Workload, applications)
    }

    /// The occupant as one word, as the store's zone census keys it:
    /// `workload:mysql,wordpress`, `controller:`. Application names hold
    /// neither `:` nor `,`.
    pub fn key(&self) -> String {
        let applications: Vec<&str> = self.applications.iter().map(String::as_str).collect();
        format!("{}:{}", self.role.as_str(), applications.join(","))
    }

    /// The occupant a [`Occupant::key`] names; `None` for anything else.
    pub fn from_key(key: &str) -> Option<Occupant> {
        let (role, applications) = key.split_once(':')?;
        Some(Occupant::new(
            MachineRole::parse(role)?,
            applications.split(',').filter(|a| !a.is_empty()),
        ))
    }

    /// The distribution group of a machine like this one.
    ///
    /// # Guarantees
    ///
    /// A controller's group is [`DistributionGroup::Controllers`], whatever
    /// units it hosts. Any other machine's group is the set of its
    /// applications; a machine that hosts no units yet gets the empty set, a
    /// group with no members, so its zones are ordered by the number of
    /// machines they hold (as Juju does for a machine with no group).
    pub fn group(&self) -> DistributionGroup {
        match self.role {
            MachineRole::Controller => DistributionGroup::Controllers,
            MachineRole::Workload => DistributionGroup::Applications(self.applications.clone()),
        }
    }
}

impl fmt::Display for Occupant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let role = match self.role {
            MachineRole::Controller => "controller",
            MachineRole::Workload => "machine",
        };
        if self.applications.is_empty() {
            write!(f, "{role} hosting no units")
        } else {
            let apps: Vec<&str> = self.applications.iter().map(String::as_str).collect();
            write!(f, "{role} hosting {}", apps.join(", "))
        }
    }
}

/// The machines a new machine's zone spread is computed against.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DistributionGroup {
    /// Every controller.
    Controllers,
    /// Every machine (controllers included) hosting units of *any* of these
    /// applications. Empty for a machine that hosts no units: nobody is a
    /// member, and the spread falls back to machines overall.
    Applications(BTreeSet<String>),
}

impl DistributionGroup {
    /// Whether an existing machine is a member of this group.
    pub fn contains(&self, occupant: &Occupant) -> bool {
        match self {
            DistributionGroup::Controllers => occupant.role == MachineRole::Controller,
            DistributionGroup::Applications(apps) => !apps.is_disjoint(&occupant.applications),
        }
    }
}

/// Machines per zone, maintained one placement at a time.
///
/// # Guarantees
///
/// [`ZoneCensus::group_count`] is exact: a machine hosting two of a group's
/// applications counts once. To keep it so without scanning machines, the
/// census counts machines per zone by their whole [`Occupant`] value (role
/// plus exact application set) and indexes those values by application; a
/// group count sums the counts of the distinct occupant kinds that are
/// members. Its cost grows with the number of distinct kinds that share an
/// application with the group, not with the number of machines.
///
/// A census built from the same placements, in any order, compares equal:
/// zones and kinds whose count falls to zero are forgotten.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ZoneCensus {
    /// Machines and controllers per zone, so totals cost one lookup.
    tallies: BTreeMap<String, Tally>,
    /// How many machines of exactly this kind each zone holds. Keyed by the
    /// whole occupant so that removal can be checked exactly and no machine
    /// is ever counted twice in one group.
    kinds: BTreeMap<Occupant, BTreeMap<String, usize>>,
    /// The kinds (keys of `kinds`) that host each application: the index
    /// that lets a group count visit only the relevant kinds.
    kinds_by_application: BTreeMap<String, BTreeSet<Occupant>>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Tally {
    machines: usize,
    controllers: usize,
}

/// A census change that does not match what the census holds.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CensusError {
    #[error("cannot remove a {occupant} from zone {zone:?}: no such machine is counted there")]
    NotCounted { zone: String, occupant: Occupant },
}

impl ZoneCensus {
    pub fn new() -> ZoneCensus {
        ZoneCensus::default()
    }

    /// Counts one more machine like `occupant` in `zone`.
    pub fn add(&mut self, zone: &str, occupant: &Occupant) {
        self.add_many(zone, occupant, 1);
    }

    /// Counts `count` more machines like `occupant` in `zone`.
    pub fn add_many(&mut self, zone: &str, occupant: &Occupant, count: usize) {
        if count == 0 {
            return;
        }
        let tally = self.tallies.entry(zone.to_string()).or_default();
        tally.machines += count;
        if occupant.role == MachineRole::Controller {
            tally.controllers += count;
        }
        if !self.kinds.contains_key(occupant) {
            for app in &occupant.applications {
                self.kinds_by_application
                    .entry(app.clone())
                    .or_default()
                    .insert(occupant.clone());
            }
        }
        *self
            .kinds
            .entry(occupant.clone())
            .or_default()
            .entry(zone.to_string())
            .or_default() += count;
    }

    /// Counts one machine like `occupant` fewer in `zone`.
    ///
    /// # Errors
    ///
    /// [`CensusError::NotCounted`] if the census holds no machine of exactly
    /// this kind (role and application set) in `zone`; the census is then
    /// left unchanged.
    pub fn remove(&mut self, zone: &str, occupant: &Occupant) -> Result<(), CensusError> {
        let not_counted = || CensusError::NotCounted {
            zone: zone.to_string(),
            occupant: occupant.clone(),
        };
        let per_zone = self.kinds.get_mut(occupant).ok_or_else(not_counted)?;
        let count = per_zone.get_mut(zone).ok_or_else(not_counted)?;
        // Counts of zero are never stored, so a count here is at least one.
        if *count > 1 {
            *count -= 1;
        } else {
            per_zone.remove(zone);
        }
        if per_zone.is_empty() {
            self.kinds.remove(occupant);
            for app in &occupant.applications {
                if let Some(kinds) = self.kinds_by_application.get_mut(app) {
                    kinds.remove(occupant);
                    if kinds.is_empty() {
                        self.kinds_by_application.remove(app);
                    }
                }
            }
        }
        // `kinds` held this machine, so the tally counts it too.
        if let Some(tally) = self.tallies.get_mut(zone) {
            tally.machines = tally.machines.saturating_sub(1);
            if occupant.role == MachineRole::Controller {
                tally.controllers = tally.controllers.saturating_sub(1);
            }
            if tally.machines == 0 {
                self.tallies.remove(zone);
            }
        }
        Ok(())
    }

    /// How many machines `zone` holds.
    pub fn machines(&self, zone: &str) -> usize {
        self.tallies.get(zone).map_or(0, |t| t.machines)
    }

    /// How many machines in `zone` are members of `group`, each counted once.
    pub fn group_count(&self, zone: &str, group: &DistributionGroup) -> usize {
        match group {
            DistributionGroup::Controllers => self.tallies.get(zone).map_or(0, |t| t.controllers),
            DistributionGroup::Applications(apps) => self
                .member_kinds(apps)
                .filter_map(|kind| self.kinds.get(kind).and_then(|z| z.get(zone)))
                .sum(),
        }
    }

    /// Members of `group` per zone; zones holding none are absent.
    pub fn group_counts(&self, group: &DistributionGroup) -> BTreeMap<&str, usize> {
        let mut counts = BTreeMap::new();
        match group {
            DistributionGroup::Controllers => {
                for (zone, tally) in &self.tallies {
                    if tally.controllers > 0 {
                        counts.insert(zone.as_str(), tally.controllers);
                    }
                }
            }
            DistributionGroup::Applications(apps) => {
                for kind in self.member_kinds(apps) {
                    for (zone, n) in self.kinds.get(kind).into_iter().flatten() {
                        *counts.entry(zone.as_str()).or_insert(0) += n;
                    }
                }
            }
        }
        counts
    }

    /// The distinct kinds hosting any of `apps`, each once.
    fn member_kinds<'a>(
        &'a self,
        apps: &'a BTreeSet<String>,
    ) -> impl Iterator<Item = &'a Occupant> {
        apps.iter()
            .filter_map(|app| self.kinds_by_application.get(app))
            .flatten()
            .collect::<BTreeSet<&Occupant>>()
            .into_iter()
    }
}

impl<'a> Extend<(&'a str, &'a Occupant)> for ZoneCensus {
    fn extend<I: IntoIterator<Item = (&'a str, &'a Occupant)>>(&mut self, placements: I) {
        for (zone, occupant) in placements {
            self.add(zone, occupant);
        }
    }
}

impl<'a> FromIterator<(&'a str, &'a Occupant)> for ZoneCensus {
    fn from_iter<I: IntoIterator<Item = (&'a str, &'a Occupant)>>(placements: I) -> Self {
        let mut census = ZoneCensus::new();
        census.extend(placements);
        census
    }
}

/// Everything [`order_zones`] needs to decide for one machine.
#[derive(Clone, Copy, Debug)]
pub struct ZoneRequest<'a> {
    /// The zones and their health. A name listed twice is one zone, and it is
    /// unavailable if any of its entries says so.
    pub zones: &'a [Zone],
    /// The machines already placed, or reserved for machines being started.
    /// It must not count the machine being decided.
    pub census: &'a ZoneCensus,
    /// The machine's distribution group.
    pub group: &'a DistributionGroup,
    /// Zones that already refused this machine for zone-specific reasons;
    /// they are not tried again.
    pub failed: &'a BTreeSet<String>,
    /// The machine's `zones` constraint. Unset, empty (`zones=`) or an empty
    /// list allows every zone.
    pub zones_constraint: &'a Setting<Vec<String>>,
    /// The zone named by a `zone=` placement directive, if any.
    pub placement: Option<&'a str>,
}

/// Why a zone is not in the answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Exclusion {
    Unavailable { reason: String },
    OutsideConstraint,
    AlreadyFailed,
}

/// A zone left out of the answer, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExcludedZone {
    pub zone: String,
    pub why: Exclusion,
}

impl fmt::Display for ExcludedZone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.why {
            Exclusion::Unavailable { reason } => {
                write!(f, "{:?} is unavailable ({reason})", self.zone)
            }
            Exclusion::OutsideConstraint => {
                write!(f, "{:?} is not in the zones constraint", self.zone)
            }
            Exclusion::AlreadyFailed => write!(f, "{:?} already refused this machine", self.zone),
        }
    }
}

/// Why no zone can be offered to a machine.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ZoneError {
    #[error("zone {zone:?} not found; available zones: {}", list_or_none(.available))]
    PlacementZoneNotFound {
        zone: String,
        /// The zones that could have been named instead, by name.
        available: Vec<String>,
    },
    #[error("zone {zone:?} is unavailable: {reason}")]
    PlacementZoneUnavailable { zone: String, reason: String },
    #[error(
        "placement zone {zone:?} is not allowed by the zones constraint; expected one of: {}",
        list_or_none(.allowed)
    )]
    PlacementOutsideConstraint {
        zone: String,
        /// The constraint's zones, sorted and without duplicates.
        allowed: Vec<String>,
    },
    #[error(
        "zone {zone:?} already refused this machine, and its zone= placement allows no other zone"
    )]
    PlacementZoneFailed { zone: String },
    #[error("no zone left to try: {}", describe_exclusions(.excluded, .unknown_in_constraint))]
    NoZoneLeft {
        /// Every known zone, by name, with the reason it was left out.
        excluded: Vec<ExcludedZone>,
        /// Names in the zones constraint that match no known zone, sorted:
        /// usually the cause when the constraint excluded everything.
        unknown_in_constraint: Vec<String>,
    },
}

impl ZoneError {
    /// Whether the machine's own directions rule out every zone the cloud
    /// has, so that waiting cannot help: a `zone=` placement naming a zone
    /// the cloud lacks or the `zones` constraint forbids, or a `zones`
    /// constraint that names only zones the cloud lacks.
    pub fn is_permanent(&self) -> bool {
        match self {
            ZoneError::PlacementZoneNotFound { .. }
            | ZoneError::PlacementOutsideConstraint { .. } => true,
            ZoneError::PlacementZoneUnavailable { .. } | ZoneError::PlacementZoneFailed { .. } => {
                false
            }
            ZoneError::NoZoneLeft {
                excluded,
                unknown_in_constraint,
            } => {
                !unknown_in_constraint.is_empty()
                    && excluded
                        .iter()
                        .all(|z| z.why == Exclusion::OutsideConstraint)
            }
        }
    }
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

fn describe_exclusions(excluded: &[ExcludedZone], unknown: &[String]) -> String {
    let mut text = if excluded.is_empty() {
        "no availability zones are known".to_string()
    } else {
        excluded
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !unknown.is_empty() {
        let quoted: Vec<String> = unknown.iter().map(|z| format!("{z:?}")).collect();
        text.push_str("; the zones constraint names unknown zones: ");
        text.push_str(&quoted.join(", "));
    }
    text
}

/// The zones a machine should try, best first.
///
/// # Guarantees
///
/// Without a placement, the answer is exactly the known zones that are
/// available, allowed by the `zones` constraint and not in the failed set,
/// each once, ordered by the number of members of `group` they hold, then by
/// the number of machines they hold, then by name. With a `zone=` placement,
/// the answer is that one zone.
///
/// # Errors
///
/// - [`ZoneError::PlacementZoneNotFound`]: the placement names a zone that is
///   not known.
/// - [`ZoneError::PlacementZoneUnavailable`]: the placement names an
///   unavailable zone.
/// - [`ZoneError::PlacementOutsideConstraint`]: the placement names a zone the
///   `zones` constraint does not allow.
/// - [`ZoneError::PlacementZoneFailed`]: the placement's zone already refused
///   this machine.
/// - [`ZoneError::NoZoneLeft`]: without a placement, every zone was excluded
///   (or none is known); the error lists each zone and why.
pub fn order_zones(request: &ZoneRequest<'_>) -> Result<Vec<String>, ZoneError> {
    let zones = health_by_name(request.zones);
    let allowed: Option<BTreeSet<&str>> = match request.zones_constraint.value() {
        Some(list) if !list.is_empty() => Some(list.iter().map(String::as_str).collect()),
        _ => None,
    };

    if let Some(zone) = request.placement {
        return placed_zone(zone, &zones, allowed.as_ref(), request.failed);
    }

    let group_counts = request.census.group_counts(request.group);
    let mut candidates: Vec<(usize, usize, &str)> = Vec::new();
    let mut excluded = Vec::new();
    for (&name, &health) in &zones {
        let why = if let ZoneHealth::Unavailable { reason } = health {
            Some(Exclusion::Unavailable {
                reason: reason.clone(),
            })
        } else if allowed.as_ref().is_some_and(|a| !a.contains(name)) {
            Some(Exclusion::OutsideConstraint)
        } else if request.failed.contains(name) {
            Some(Exclusion::AlreadyFailed)
        } else {
            None
        };
        match why {
            Some(why) => excluded.push(ExcludedZone {
                zone: name.to_string(),
                why,
            }),
            None => candidates.push((
                group_counts.get(name).copied().unwrap_or(0),
                request.census.machines(name),
                name,
            )),
        }
    }

    if candidates.is_empty() {
        let unknown_in_constraint = allowed
            .into_iter()
            .flatten()
            .filter(|name| !zones.contains_key(name))
            .map(str::to_string)
            .collect();
        return Err(ZoneError::NoZoneLeft {
            excluded,
            unknown_in_constraint,
        });
    }
    candidates.sort_unstable();
    Ok(candidates
        .into_iter()
        .map(|(_, _, name)| name.to_string())
        .collect())
}

/// One entry per zone name; a zone listed twice is unavailable if either
/// entry says so, because placing a machine in a zone someone disabled is
/// the worse mistake.
fn health_by_name(zones: &[Zone]) -> BTreeMap<&str, &ZoneHealth> {
    let mut by_name: BTreeMap<&str, &ZoneHealth> = BTreeMap::new();
    for zone in zones {
        let entry = by_name.entry(zone.name.as_str()).or_insert(&zone.health);
        if **entry == ZoneHealth::Available {
            *entry = &zone.health;
        }
    }
    by_name
}

fn placed_zone(
    zone: &str,
    zones: &BTreeMap<&str, &ZoneHealth>,
    allowed: Option<&BTreeSet<&str>>,
    failed: &BTreeSet<String>,
) -> Result<Vec<String>, ZoneError> {
    match zones.get(zone) {
        None => Err(ZoneError::PlacementZoneNotFound {
            zone: zone.to_string(),
            available: zones
                .iter()
                .filter(|&(_, health)| **health == ZoneHealth::Available)
                .map(|(&name, _)| name.to_string())
                .collect(),
        }),
        Some(ZoneHealth::Unavailable { reason }) => Err(ZoneError::PlacementZoneUnavailable {
            zone: zone.to_string(),
            reason: reason.clone(),
        }),
        Some(ZoneHealth::Available) => {
            if let Some(allowed) = allowed.filter(|a| !a.contains(zone)) {
                return Err(ZoneError::PlacementOutsideConstraint {
                    zone: zone.to_string(),
                    allowed: allowed.iter().map(|z| z.to_string()).collect(),
                });
            }
            if failed.contains(zone) {
                return Err(ZoneError::PlacementZoneFailed {
                    zone: zone.to_string(),
                });
            }
            Ok(vec![zone.to_string()])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_occupant_reads_back_from_its_key_and_nothing_else_does() {
        for occupant in [
            Occupant::workload(["wordpress", "mysql"]),
            Occupant::workload(Vec::<String>::new()),
            Occupant::controller(["ha"]),
        ] {
            assert_eq!(Occupant::from_key(&occupant.key()), Some(occupant));
        }
        assert_eq!(
            Occupant::workload(["wordpress", "mysql"]).key(),
            "workload:mysql,wordpress"
        );
        for bad in ["", "workload", "robot:mysql", ":mysql"] {
            assert_eq!(Occupant::from_key(bad), None, "{bad}");
        }
    }

    use proptest::prelude::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn zones(list: &[&str]) -> Vec<Zone> {
        list.iter().map(|name| Zone::available(*name)).collect()
    }

    fn apps(list: &[&str]) -> DistributionGroup {
        DistributionGroup::Applications(list.iter().map(|s| s.to_string()).collect())
    }

    /// A request with no failures, no constraint and no placement.
    fn request<'a>(
        zones: &'a [Zone],
        census: &'a ZoneCensus,
        group: &'a DistributionGroup,
    ) -> ZoneRequest<'a> {
        static NO_FAILURES: BTreeSet<String> = BTreeSet::new();
        static NO_CONSTRAINT: Setting<Vec<String>> = Setting::Unset;
        ZoneRequest {
            zones,
            census,
            group,
            failed: &NO_FAILURES,
            zones_constraint: &NO_CONSTRAINT,
            placement: None,
        }
    }

    /// Places `count` machines like `occupant` one after another, each in the
    /// first zone of the order, and returns the zones chosen.
    fn place_in_turn(
        zones: &[Zone],
        census: &mut ZoneCensus,
        occupant: &Occupant,
        count: usize,
    ) -> Vec<String> {
        let group = occupant.group();
        let mut chosen = Vec::new();
        for _ in 0..count {
            let order = order_zones(&request(zones, census, &group)).unwrap();
            census.add(&order[0], occupant);
            chosen.push(order[0].clone());
        }
        chosen
    }

    // --- distribution groups -------------------------------------------

    #[test]
    fn a_controller_belongs_to_the_controllers_group_whatever_it_hosts() {
        let controller = Occupant::controller(["wordpress"]);
        assert_eq!(controller.group(), DistributionGroup::Controllers);
    }

    #[test]
    fn a_workload_machine_s_group_is_the_set_of_its_applications() {
        let machine = Occupant::workload(["wordpress", "mysql"]);
        assert_eq!(machine.group(), apps(&["mysql", "wordpress"]));
    }

    #[test]
    fn the_controllers_group_holds_every_controller_and_nothing_else() {
        let group = DistributionGroup::Controllers;
        assert!(group.contains(&Occupant::controller(Vec::<String>::new())));
        assert!(group.contains(&Occupant::controller(["wordpress"])));
        assert!(!group.contains(&Occupant::workload(Vec::<String>::new())));
        assert!(!group.contains(&Occupant::workload(["wordpress"])));
    }

    #[test]
    fn an_application_group_holds_every_machine_hosting_any_of_its_applications() {
        let group = apps(&["wordpress", "mysql"]);
        assert!(group.contains(&Occupant::workload(["wordpress"])));
        assert!(group.contains(&Occupant::workload(["mysql", "haproxy"])));
        assert!(group.contains(&Occupant::controller(["mysql"])));
        assert!(!group.contains(&Occupant::workload(["haproxy"])));
        assert!(!group.contains(&Occupant::controller(Vec::<String>::new())));
    }

    #[test]
    fn a_machine_hosting_no_units_has_a_group_with_no_members() {
        let group = Occupant::workload(Vec::<String>::new()).group();
        assert_eq!(group, apps(&[]));
        assert!(!group.contains(&Occupant::workload(Vec::<String>::new())));
        assert!(!group.contains(&Occupant::workload(["wordpress"])));
    }

    // --- the census -----------------------------------------------------

    #[test]
    fn the_census_counts_machines_and_group_members_per_zone() {
        let mut census = ZoneCensus::new();
        census.add("a", &Occupant::workload(["wordpress"]));
        census.add("a", &Occupant::workload(["mysql"]));
        census.add("a", &Occupant::controller(Vec::<String>::new()));
        census.add("b", &Occupant::workload(["wordpress"]));
        assert_eq!(census.machines("a"), 3);
        assert_eq!(census.machines("b"), 1);
        assert_eq!(census.machines("c"), 0);
        assert_eq!(census.group_count("a", &apps(&["wordpress"])), 1);
        assert_eq!(census.group_count("a", &apps(&["wordpress", "mysql"])), 2);
        assert_eq!(census.group_count("a", &DistributionGroup::Controllers), 1);
        assert_eq!(census.group_count("b", &DistributionGroup::Controllers), 0);
    }

    #[test]
    fn a_machine_hosting_two_of_a_group_s_applications_counts_once() {
        let mut census = ZoneCensus::new();
        census.add("a", &Occupant::workload(["wordpress", "mysql"]));
        census.add("a", &Occupant::workload(["wordpress"]));
        let group = apps(&["wordpress", "mysql"]);
        assert_eq!(census.group_count("a", &group), 2);
        assert_eq!(census.group_counts(&group), BTreeMap::from([("a", 2)]));
    }

    #[test]
    fn a_controller_hosting_units_counts_in_both_groups() {
        let mut census = ZoneCensus::new();
        census.add("a", &Occupant::controller(["dashboard"]));
        assert_eq!(census.group_count("a", &DistributionGroup::Controllers), 1);
        assert_eq!(census.group_count("a", &apps(&["dashboard"])), 1);
        assert_eq!(census.machines("a"), 1);
    }

    #[test]
    fn group_counts_leave_out_zones_holding_no_members() {
        let mut census = ZoneCensus::new();
        census.add("a", &Occupant::workload(["wordpress"]));
        census.add("b", &Occupant::workload(["mysql"]));
        census.add("c", &Occupant::controller(Vec::<String>::new()));
        assert_eq!(
            census.group_counts(&apps(&["wordpress"])),
            BTreeMap::from([("a", 1)])
        );
        assert_eq!(
            census.group_counts(&DistributionGroup::Controllers),
            BTreeMap::from([("c", 1)])
        );
    }

    #[test]
    fn removing_every_machine_gives_back_an_empty_census() {
        let wordpress = Occupant::workload(["wordpress", "mysql"]);
        let controller = Occupant::controller(Vec::<String>::new());
        let mut census = ZoneCensus::new();
        census.add("a", &wordpress);
        census.add("a", &controller);
        census.add("b", &wordpress);
        census.remove("a", &wordpress).unwrap();
        census.remove("b", &wordpress).unwrap();
        census.remove("a", &controller).unwrap();
        assert_eq!(census, ZoneCensus::new());
    }

    #[test]
    fn a_census_does_not_depend_on_the_order_of_placements() {
        let one = Occupant::workload(["wordpress"]);
        let two = Occupant::controller(["mysql"]);
        let forwards: ZoneCensus = [("a", &one), ("b", &two), ("a", &two)]
            .into_iter()
            .collect();
        let backwards: ZoneCensus = [("a", &two), ("b", &two), ("a", &one)]
            .into_iter()
            .collect();
        assert_eq!(forwards, backwards);
        let mut added_and_removed = forwards.clone();
        added_and_removed.add("c", &one);
        assert_ne!(added_and_removed, forwards);
        added_and_removed.remove("c", &one).unwrap();
        assert_eq!(added_and_removed, forwards);
    }

    #[test]
    fn removing_a_machine_the_census_does_not_hold_is_an_error_and_changes_nothing() {
        let mut census = ZoneCensus::new();
        census.add("a", &Occupant::workload(["wordpress"]));
        census.add("a", &Occupant::controller(Vec::<String>::new()));
        let before = census.clone();

        let err = census
            .remove("a", &Occupant::workload(["wordpress", "mysql"]))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"cannot remove a machine hosting mysql, wordpress from zone "a": no such machine is counted there"#
        );
        let err = census
            .remove("b", &Occupant::workload(["wordpress"]))
            .unwrap_err();
        assert_eq!(
            err,
            CensusError::NotCounted {
                zone: "b".to_string(),
                occupant: Occupant::workload(["wordpress"]),
            }
        );
        let err = census
            .remove("a", &Occupant::workload(Vec::<String>::new()))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"cannot remove a machine hosting no units from zone "a": no such machine is counted there"#
        );
        assert_eq!(census, before);
    }

    // --- ordering -------------------------------------------------------

    #[test]
    fn zones_with_fewer_group_members_come_first() {
        let zones = zones(&["a", "b", "c"]);
        let mut census = ZoneCensus::new();
        census.add("a", &Occupant::workload(["wordpress"]));
        census.add("a", &Occupant::workload(["wordpress"]));
        census.add("b", &Occupant::workload(["wordpress"]));
        let group = apps(&["wordpress"]);
        let order = order_zones(&request(&zones, &census, &group)).unwrap();
        assert_eq!(order, names(&["c", "b", "a"]));
    }

    #[test]
    fn between_equal_group_counts_the_zone_with_fewer_machines_comes_first() {
        let zones = zones(&["a", "b", "c"]);
        let mut census = ZoneCensus::new();
        census.add("a", &Occupant::workload(["mysql"]));
        census.add("a", &Occupant::workload(["mysql"]));
        census.add("c", &Occupant::workload(["mysql"]));
        let group = apps(&["wordpress"]);
        let order = order_zones(&request(&zones, &census, &group)).unwrap();
        assert_eq!(order, names(&["b", "c", "a"]));
    }

    #[test]
    fn group_members_outweigh_machines_overall() {
        let zones = zones(&["a", "b"]);
        let mut census = ZoneCensus::new();
        census.add("a", &Occupant::workload(["wordpress"]));
        for _ in 0..5 {
            census.add("b", &Occupant::workload(["mysql"]));
        }
        let group = apps(&["wordpress"]);
        let order = order_zones(&request(&zones, &census, &group)).unwrap();
        assert_eq!(order, names(&["b", "a"]));
    }

    #[test]
    fn between_equal_counts_zones_are_ordered_by_name() {
        let zones = zones(&["c", "a", "b"]);
        let census = ZoneCensus::new();
        let group = apps(&["wordpress"]);
        let order = order_zones(&request(&zones, &census, &group)).unwrap();
        assert_eq!(order, names(&["a", "b", "c"]));
    }

    #[test]
    fn a_machine_counts_against_the_group_if_it_hosts_any_of_the_applications() {
        let zones = zones(&["a", "b"]);
        let mut census = ZoneCensus::new();
        census.add("a", &Occupant::workload(["mysql", "haproxy"]));
        census.add("b", &Occupant::workload(["haproxy"]));
        census.add("b", &Occupant::workload(["haproxy"]));
        // The new machine hosts wordpress and mysql: the machine in "a" hosts
        // mysql and is a member; the two in "b" are not.
        let group = Occupant::workload(["wordpress", "mysql"]).group();
        let order = order_zones(&request(&zones, &census, &group)).unwrap();
        assert_eq!(order, names(&["b", "a"]));
    }

    #[test]
    fn nine_machines_of_one_application_spread_three_to_a_zone() {
        let zones = zones(&["a", "b", "c"]);
        let mut census = ZoneCensus::new();
        let wordpress = Occupant::workload(["wordpress"]);
        let chosen = place_in_turn(&zones, &mut census, &wordpress, 9);
        assert_eq!(
            chosen,
            names(&["a", "b", "c", "a", "b", "c", "a", "b", "c"])
        );
        let group = wordpress.group();
        for zone in ["a", "b", "c"] {
            assert_eq!(census.group_count(zone, &group), 3);
            assert_eq!(census.machines(zone), 3);
        }
    }

    #[test]
    fn a_second_application_spreads_one_to_a_zone_even_when_zones_are_unequal() {
        let zones = zones(&["a", "b", "c"]);
        let mut census = ZoneCensus::new();
        for _ in 0..5 {
            census.add("a", &Occupant::workload(["mysql"]));
        }
        census.add("b", &Occupant::workload(["mysql"]));
        let wordpress = Occupant::workload(["wordpress"]);
        let chosen = place_in_turn(&zones, &mut census, &wordpress, 3);
        // "c" is emptiest; then "b" (1 machine) before "a" (5), even though
        // "c" then holds as few machines as "b".
        assert_eq!(chosen, names(&["c", "b", "a"]));
        let group = wordpress.group();
        for zone in ["a", "b", "c"] {
            assert_eq!(census.group_count(zone, &group), 1);
        }
        assert_eq!(census.machines("a"), 6);
        assert_eq!(census.machines("b"), 2);
        assert_eq!(census.machines("c"), 1);
    }

    #[test]
    fn controllers_spread_among_themselves() {
        let zones = zones(&["a", "b", "c"]);
        let mut census = ZoneCensus::new();
        // "c" is crowded with workloads, but holds no controller.
        for _ in 0..4 {
            census.add("c", &Occupant::workload(["wordpress"]));
        }
        census.add("a", &Occupant::controller(Vec::<String>::new()));
        let controller = Occupant::controller(Vec::<String>::new());
        let chosen = place_in_turn(&zones, &mut census, &controller, 2);
        assert_eq!(chosen, names(&["b", "c"]));
        for zone in ["a", "b", "c"] {
            assert_eq!(census.group_count(zone, &DistributionGroup::Controllers), 1);
        }
    }

    #[test]
    fn a_machine_with_no_units_goes_where_machines_are_fewest() {
        let zones = zones(&["a", "b", "c"]);
        let mut census = ZoneCensus::new();
        census.add("a", &Occupant::workload(["wordpress"]));
        census.add("b", &Occupant::controller(Vec::<String>::new()));
        census.add("b", &Occupant::workload(Vec::<String>::new()));
        let group = Occupant::workload(Vec::<String>::new()).group();
        let order = order_zones(&request(&zones, &census, &group)).unwrap();
        assert_eq!(order, names(&["c", "a", "b"]));
    }

    #[test]
    fn machines_in_zones_the_provider_no_longer_lists_are_ignored() {
        let zones = zones(&["a", "b"]);
        let mut census = ZoneCensus::new();
        census.add("gone", &Occupant::workload(["wordpress"]));
        census.add("a", &Occupant::workload(["wordpress"]));
        let group = apps(&["wordpress"]);
        let order = order_zones(&request(&zones, &census, &group)).unwrap();
        assert_eq!(order, names(&["b", "a"]));
    }

    // --- exclusions -----------------------------------------------------

    #[test]
    fn an_unavailable_zone_is_never_chosen_even_when_it_is_emptiest() {
        let zones = vec![
            Zone::available("a"),
            Zone::unavailable("b", "disabled by admin"),
            Zone::available("c"),
        ];
        let mut census = ZoneCensus::new();
        census.add("a", &Occupant::workload(["wordpress"]));
        census.add("c", &Occupant::workload(["wordpress"]));
        census.add("c", &Occupant::workload(["wordpress"]));
        let group = apps(&["wordpress"]);
        let order = order_zones(&request(&zones, &census, &group)).unwrap();
        assert_eq!(order, names(&["a", "c"]));
    }

    #[test]
    fn a_zone_listed_twice_is_offered_once_and_is_unavailable_if_either_entry_says_so() {
        let zones = vec![
            Zone::available("a"),
            Zone::available("b"),
            Zone::unavailable("b", "disabled by admin"),
            Zone::available("a"),
        ];
        let census = ZoneCensus::new();
        let group = apps(&["wordpress"]);
        let order = order_zones(&request(&zones, &census, &group)).unwrap();
        assert_eq!(order, names(&["a"]));
    }

    #[test]
    fn zones_that_already_refused_the_machine_are_not_tried_again() {
        let zones = zones(&["a", "b", "c"]);
        let census = ZoneCensus::new();
        let group = apps(&["wordpress"]);
        let failed = BTreeSet::from(["a".to_string()]);
        let order = order_zones(&ZoneRequest {
            failed: &failed,
            ..request(&zones, &census, &group)
        })
        .unwrap();
        assert_eq!(order, names(&["b", "c"]));
    }

    #[test]
    fn after_a_refusal_the_next_zone_in_the_order_is_tried() {
        let zones = zones(&["a", "b", "c"]);
        let mut census = ZoneCensus::new();
        census.add("a", &Occupant::workload(["wordpress"]));
        let group = apps(&["wordpress"]);
        let first = order_zones(&request(&zones, &census, &group)).unwrap();
        assert_eq!(first, names(&["b", "c", "a"]));
        let failed = BTreeSet::from([first[0].clone()]);
        let second = order_zones(&ZoneRequest {
            failed: &failed,
            ..request(&zones, &census, &group)
        })
        .unwrap();
        assert_eq!(second, names(&["c", "a"]));
    }

    #[test]
    fn the_zones_constraint_limits_the_zones_offered() {
        let zones = zones(&["a", "b", "c"]);
        let census = ZoneCensus::new();
        let group = apps(&["wordpress"]);
        let constraint = Setting::Value(names(&["c", "a", "a"]));
        let order = order_zones(&ZoneRequest {
            zones_constraint: &constraint,
            ..request(&zones, &census, &group)
        })
        .unwrap();
        assert_eq!(order, names(&["a", "c"]));
    }

    #[test]
    fn an_empty_or_unset_zones_constraint_allows_every_zone() {
        let zones = zones(&["a", "b"]);
        let census = ZoneCensus::new();
        let group = apps(&["wordpress"]);
        for constraint in [Setting::Unset, Setting::Empty, Setting::Value(Vec::new())] {
            let order = order_zones(&ZoneRequest {
                zones_constraint: &constraint,
                ..request(&zones, &census, &group)
            })
            .unwrap();
            assert_eq!(order, names(&["a", "b"]));
        }
    }

    // --- placement ------------------------------------------------------

    #[test]
    fn a_zone_placement_is_honoured_even_in_the_most_crowded_zone() {
        let zones = zones(&["a", "b"]);
        let mut census = ZoneCensus::new();
        census.add("b", &Occupant::workload(["wordpress"]));
        let group = apps(&["wordpress"]);
        let order = order_zones(&ZoneRequest {
            placement: Some("b"),
            ..request(&zones, &census, &group)
        })
        .unwrap();
        assert_eq!(order, names(&["b"]));
    }

    #[test]
    fn a_zone_placement_inside_the_zones_constraint_is_honoured() {
        let zones = zones(&["a", "b", "c"]);
        let census = ZoneCensus::new();
        let group = apps(&["wordpress"]);
        let constraint = Setting::Value(names(&["b", "c"]));
        let order = order_zones(&ZoneRequest {
            placement: Some("c"),
            zones_constraint: &constraint,
            ..request(&zones, &census, &group)
        })
        .unwrap();
        assert_eq!(order, names(&["c"]));
    }

    // --- errors ---------------------------------------------------------

    #[test]
    fn a_placement_naming_an_unknown_zone_lists_the_available_zones() {
        let zones = vec![
            Zone::available("b"),
            Zone::available("a"),
            Zone::unavailable("c", "disabled by admin"),
        ];
        let census = ZoneCensus::new();
        let group = apps(&["wordpress"]);
        let err = order_zones(&ZoneRequest {
            placement: Some("x"),
            ..request(&zones, &census, &group)
        })
        .unwrap_err();
        assert_eq!(
            err,
            ZoneError::PlacementZoneNotFound {
                zone: "x".to_string(),
                available: names(&["a", "b"]),
            }
        );
        assert_eq!(
            err.to_string(),
            r#"zone "x" not found; available zones: a, b"#
        );
    }

    #[test]
    fn a_placement_naming_an_unknown_zone_says_so_when_no_zone_is_available() {
        let zones = vec![Zone::unavailable("a", "down")];
        let census = ZoneCensus::new();
        let group = apps(&["wordpress"]);
        let err = order_zones(&ZoneRequest {
            placement: Some("x"),
            ..request(&zones, &census, &group)
        })
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"zone "x" not found; available zones: none"#
        );
    }

    #[test]
    fn a_placement_naming_an_unavailable_zone_gives_the_reason() {
        let zones = vec![
            Zone::available("a"),
            Zone::unavailable("b", "disabled by admin: power work"),
        ];
        let census = ZoneCensus::new();
        let group = apps(&["wordpress"]);
        let err = order_zones(&ZoneRequest {
            placement: Some("b"),
            ..request(&zones, &census, &group)
        })
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"zone "b" is unavailable: disabled by admin: power work"#
        );
    }

    #[test]
    fn a_placement_outside_the_zones_constraint_is_refused() {
        let zones = zones(&["a", "b", "c"]);
        let census = ZoneCensus::new();
        let group = apps(&["wordpress"]);
        let constraint = Setting::Value(names(&["c", "b"]));
        let err = order_zones(&ZoneRequest {
            placement: Some("a"),
            zones_constraint: &constraint,
            ..request(&zones, &census, &group)
        })
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"placement zone "a" is not allowed by the zones constraint; expected one of: b, c"#
        );
    }

    #[test]
    fn a_placement_zone_that_already_refused_the_machine_leaves_nothing_to_try() {
        let zones = zones(&["a", "b"]);
        let census = ZoneCensus::new();
        let group = apps(&["wordpress"]);
        let failed = BTreeSet::from(["a".to_string()]);
        let err = order_zones(&ZoneRequest {
            placement: Some("a"),
            failed: &failed,
            ..request(&zones, &census, &group)
        })
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"zone "a" already refused this machine, and its zone= placement allows no other zone"#
        );
    }

    #[test]
    fn when_every_zone_is_excluded_the_error_says_which_and_why() {
        let zones = vec![
            Zone::available("a"),
            Zone::unavailable("b", "disabled by admin"),
            Zone::available("c"),
            Zone::available("d"),
        ];
        let census = ZoneCensus::new();
        let group = apps(&["wordpress"]);
        let failed = BTreeSet::from(["a".to_string(), "d".to_string()]);
        let constraint = Setting::Value(names(&["a", "b", "d", "z"]));
        let err = order_zones(&ZoneRequest {
            failed: &failed,
            zones_constraint: &constraint,
            ..request(&zones, &census, &group)
        })
        .unwrap_err();
        assert_eq!(
            err,
            ZoneError::NoZoneLeft {
                excluded: vec![
                    ExcludedZone {
                        zone: "a".to_string(),
                        why: Exclusion::AlreadyFailed,
                    },
                    ExcludedZone {
                        zone: "b".to_string(),
                        why: Exclusion::Unavailable {
                            reason: "disabled by admin".to_string(),
                        },
                    },
                    ExcludedZone {
                        zone: "c".to_string(),
                        why: Exclusion::OutsideConstraint,
                    },
                    ExcludedZone {
                        zone: "d".to_string(),
                        why: Exclusion::AlreadyFailed,
                    },
                ],
                unknown_in_constraint: names(&["z"]),
            }
        );
        assert_eq!(
            err.to_string(),
            concat!(
                r#"no zone left to try: "a" already refused this machine, "#,
                r#""b" is unavailable (disabled by admin), "#,
                r#""c" is not in the zones constraint, "#,
                r#""d" already refused this machine; "#,
                r#"the zones constraint names unknown zones: "z""#
            )
        );
    }

    #[test]
    fn when_no_zone_is_known_the_error_says_so() {
        let census = ZoneCensus::new();
        let group = apps(&["wordpress"]);
        let err = order_zones(&request(&[], &census, &group)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no zone left to try: no availability zones are known"
        );
    }

    // --- properties -----------------------------------------------------

    /// Occupants drawn from applications other than "target", and plain
    /// controllers and empty machines.
    fn other_occupant() -> impl Strategy<Value = Occupant> {
        let app = prop::sample::select(vec!["mysql", "haproxy", "redis", "nginx"]);
        (
            prop::bool::weighted(0.1),
            prop::collection::btree_set(app, 0..3),
        )
            .prop_map(|(controller, apps)| {
                let role = if controller {
                    MachineRole::Controller
                } else {
                    MachineRole::Workload
                };
                Occupant::new(role, apps)
            })
    }

    fn zone_name() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["a", "b", "c", "d", "e", "f"]).prop_map(str::to_string)
    }

    fn zone() -> impl Strategy<Value = Zone> {
        (zone_name(), prop::bool::weighted(0.7)).prop_map(|(name, up)| {
            if up {
                Zone::available(name)
            } else {
                Zone::unavailable(name, "down")
            }
        })
    }

    fn any_occupant() -> impl Strategy<Value = Occupant> {
        let app = prop::sample::select(vec!["wordpress", "mysql", "haproxy", "redis"]);
        (any::<bool>(), prop::collection::btree_set(app, 0..3)).prop_map(|(controller, apps)| {
            let role = if controller {
                MachineRole::Controller
            } else {
                MachineRole::Workload
            };
            Occupant::new(role, apps)
        })
    }

    fn any_group() -> impl Strategy<Value = DistributionGroup> {
        prop_oneof![
            Just(DistributionGroup::Controllers),
            prop::collection::btree_set(
                prop::sample::select(vec!["wordpress", "mysql", "haproxy", "redis"])
                    .prop_map(str::to_string),
                0..3
            )
            .prop_map(DistributionGroup::Applications),
        ]
    }

    proptest! {
        #[test]
        fn repeated_choice_keeps_every_zone_within_one_member_of_the_others(
            zone_count in 1usize..7,
            down in prop::collection::vec(prop::bool::weighted(0.2), 7),
            others in prop::collection::vec((0usize..7, other_occupant()), 0..40),
            controller in any::<bool>(),
            new_machines in 0usize..40,
        ) {
            let zones: Vec<Zone> = (0..zone_count)
                .map(|i| {
                    let name = format!("zone-{i}");
                    // Keep the first zone up so that there is somewhere to go.
                    if i > 0 && down[i] { Zone::unavailable(name, "down") } else { Zone::available(name) }
                })
                .collect();
            let mut census = ZoneCensus::new();
            for (i, occupant) in &others {
                let occupant = if controller {
                    Occupant::workload(occupant.applications.iter().cloned())
                } else {
                    occupant.clone()
                };
                census.add(&format!("zone-{}", i % zone_count), &occupant);
            }
            // New machines of an application nobody hosts yet, or new
            // controllers; either way the others are not in their group.
            let newcomer = if controller {
                Occupant::controller(Vec::<String>::new())
            } else {
                Occupant::workload(["target"])
            };
            place_in_turn(&zones, &mut census, &newcomer, new_machines);

            let group = newcomer.group();
            let up: Vec<usize> = zones
                .iter()
                .filter(|z| z.is_available())
                .map(|z| census.group_count(&z.name, &group))
                .collect();
            let most = up.iter().copied().max().unwrap_or(0);
            let least = up.iter().copied().min().unwrap_or(0);
            prop_assert!(most - least <= 1, "group counts {:?}", up);
            prop_assert_eq!(up.iter().sum::<usize>(), new_machines);
            for zone in zones.iter().filter(|z| !z.is_available()) {
                prop_assert_eq!(census.group_count(&zone.name, &group), 0);
            }
        }

        #[test]
        fn the_answer_is_exactly_the_eligible_zones_once_each_in_order(
            zones in prop::collection::vec(zone(), 0..8),
            placed in prop::collection::vec((zone_name(), any_occupant()), 0..30),
            group in any_group(),
            failed in prop::collection::btree_set(zone_name(), 0..4),
            constraint in prop::option::of(prop::collection::vec(zone_name(), 0..4)),
            placement in prop::option::of(zone_name()),
        ) {
            let census: ZoneCensus = placed.iter().map(|(z, o)| (z.as_str(), o)).collect();
            let constraint = constraint.map_or(Setting::Unset, Setting::Value);
            let answer = order_zones(&ZoneRequest {
                zones: &zones,
                census: &census,
                group: &group,
                failed: &failed,
                zones_constraint: &constraint,
                placement: placement.as_deref(),
            });

            let allowed: Option<BTreeSet<&String>> = constraint
                .value()
                .filter(|list| !list.is_empty())
                .map(|list| list.iter().collect());
            let eligible: BTreeSet<&String> = zones
                .iter()
                .map(|z| &z.name)
                .filter(|name| zones.iter().filter(|z| &&z.name == name).all(Zone::is_available))
                .filter(|name| !failed.contains(*name))
                .filter(|name| allowed.as_ref().is_none_or(|a| a.contains(name)))
                .collect();

            match (answer, placement) {
                (Ok(order), Some(zone)) => {
                    prop_assert_eq!(order, vec![zone.clone()]);
                    prop_assert!(eligible.contains(&zone));
                }
                (Err(_), Some(zone)) => prop_assert!(!eligible.contains(&zone)),
                (Ok(order), None) => {
                    let offered: BTreeSet<&String> = order.iter().collect();
                    prop_assert_eq!(offered.len(), order.len(), "duplicates in {:?}", order);
                    prop_assert_eq!(offered, eligible);
                    let keys: Vec<(usize, usize, &String)> = order
                        .iter()
                        .map(|z| (census.group_count(z, &group), census.machines(z), z))
                        .collect();
                    let mut sorted = keys.clone();
                    sorted.sort();
                    prop_assert_eq!(keys, sorted);
                }
                (Err(err), None) => {
                    prop_assert!(eligible.is_empty());
                    prop_assert!(matches!(err, ZoneError::NoZoneLeft { .. }), "{}", err);
                }
            }
        }

        #[test]
        fn census_counts_match_a_count_over_every_machine(
            placed in prop::collection::vec((zone_name(), any_occupant()), 0..40),
            removals in prop::collection::vec(any::<prop::sample::Index>(), 0..20),
            group in any_group(),
        ) {
            let mut machines = placed.clone();
            let mut census: ZoneCensus = placed.iter().map(|(z, o)| (z.as_str(), o)).collect();
            for index in removals {
                if machines.is_empty() {
                    break;
                }
                let (zone, occupant) = machines.remove(index.index(machines.len()));
                prop_assert_eq!(census.remove(&zone, &occupant), Ok(()));
            }
            let rebuilt: ZoneCensus = machines.iter().map(|(z, o)| (z.as_str(), o)).collect();
            prop_assert_eq!(&census, &rebuilt);
            for zone in ["a", "b", "c", "d", "e", "f"] {
                let here = machines.iter().filter(|(z, _)| z == zone);
                prop_assert_eq!(census.machines(zone), here.clone().count());
                let members = here.filter(|(_, o)| group.contains(o)).count();
                prop_assert_eq!(census.group_count(zone, &group), members);
                prop_assert_eq!(
                    census.group_counts(&group).get(zone).copied().unwrap_or(0),
                    members
                );
            }
        }
    }
}

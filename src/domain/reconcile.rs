//! Reconciliation planning: what the engine does when it compares the
//! store's machines with the instances a provider reports. Pure: the
//! engine reads both sides and acts on the plan.
//!
//! Three rules, in the order the engine applies them:
//!
//! - An instance tagged for this controller that no machine records, and
//!   that is not the launch in flight of a machine still starting, is a
//!   *stray*: stop it before starting anything new ("stop unknown
//!   instances before starting pending ones": if an instance was started
//!   and its id never recorded, a second one must not be started for the
//!   same machine).
//! - At start-up, an instance tagged for a machine that is `starting` or
//!   `dying` with no instance recorded is that machine's launch, lost with
//!   the old engine: it is *adopted*, not launched again.
//! - A machine whose recorded instance the provider no longer has has
//!   *vanished*: the engine shows it down, or finishes its stop.
//!
//! Beside them, a machine whose instance the provider now reports at other
//! addresses (EC2 gives a public address after the launch, or an elastic
//! one later) is *readdressed*: the engine records what the provider says.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, RandomState};

use hashbrown::HashTable;

use crate::domain::instance::{is_manual_instance, ListedInstance};
use crate::domain::machine::{MachineRole, MachineState};
use crate::domain::names::MachineId;
use crate::domain::texts::Texts;

/// What a reconciliation needs of a machine, and no more: a start-up
/// with 100,000 machines reads this for each of them, and full records
/// only for the machines that get an actor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineSummary {
    pub id: MachineId,
    pub state: MachineState,
    pub role: MachineRole,
    /// Its instance id, zone and addresses.
    texts: Texts<3>,
}

impl MachineSummary {
    pub fn new(
        id: MachineId,
        state: MachineState,
        role: MachineRole,
        instance_id: Option<&str>,
        zone: Option<&str>,
        addresses: &str,
    ) -> MachineSummary {
        MachineSummary {
            id,
            state,
            role,
            texts: Texts::new([instance_id, zone, Some(addresses)]),
        }
    }

    pub fn instance_id(&self) -> Option<&str> {
        self.texts.get(0)
    }

    pub fn zone(&self) -> Option<&str> {
        self.texts.get(1)
    }

    /// Its instance's addresses as stored: comma-separated, the preferred
    /// first.
    pub fn addresses(&self) -> &str {
        self.texts.get(2).unwrap_or_default()
    }
}

/// What a comparison of the store with the provider's list found.
#[derive(Debug, Default, PartialEq)]
pub struct ReconciliationPlan {
    /// Instances with this controller's tags that no machine claims (or a
    /// second instance of a machine that has one), sorted: to stop.
    pub strays: Vec<String>,
    /// Instances launched for machines that have not recorded them yet (a
    /// launch in flight when the engine stopped), by machine: to take over.
    pub adopt: HashMap<MachineId, String>,
    /// Machines whose recorded instance the provider no longer has.
    pub vanished: HashMap<MachineId, Vanished>,
    /// Machines whose instance the provider reports at other addresses
    /// than those stored: the machine, its instance and the addresses, in
    /// machine order.
    pub readdressed: Vec<(MachineId, String, Vec<String>)>,
}

/// Whether a machine in `state` may have a launch whose instance it has
/// not recorded yet.
fn may_have_unrecorded_launch(state: MachineState) -> bool {
    matches!(state, MachineState::Starting | MachineState::Dying)
}

/// Whether a machine in `state` with a recorded instance expects the
/// provider to still have it.
fn expects_its_instance(state: MachineState) -> bool {
    matches!(
        state,
        MachineState::AwaitingAgent
            | MachineState::Started
            | MachineState::Stopping
            | MachineState::Relaunching
    )
}

/// Compares the store's machines with the provider's instances, as the
/// engine does when it starts: a launch lost with the old engine is
/// adopted by its machine.
///
/// # Guarantees
///
/// No instance that a machine records as its own is ever a stray; an
/// instance is adopted only by the machine its tag names, and at most one
/// per machine.
///
/// # Panics
///
/// With more than 4,294,967,296 instances: places in the list are kept
/// in four bytes.
pub fn plan_reconciliation(
    machines: &[MachineSummary],
    instances: &[ListedInstance],
) -> ReconciliationPlan {
    Comparison::of_all(machines, instances).finish().0
}

/// A comparison of the provider's instances with the store's machines,
/// the machines looked at one at a time as they are read, so that none
/// need be held: with a million machines, their summaries were 168 MB
/// held beside the provider's list for the whole comparison. What it
/// keeps of the machines is only what the plan says of them (and the
/// machines that record no instance yet and may have launched one).
pub struct Comparison<'a> {
    instances: Cow<'a, [ListedInstance]>,
    /// The last place in `instances` of each live instance's id, hashed by
    /// the id.
    listed: HashTable<u32>,
    hashes: RandomState,
    /// Whether a machine records the instance at each place (marked at
    /// the last live place of its id).
    recorded: Vec<bool>,
    /// The machines that record no instance and may have launched one
    /// they have not recorded, with their state: by id, as the last
    /// machine of that id looked at is.
    launching: HashMap<MachineId, MachineState>,
    readdressed: Vec<(MachineId, String, Vec<String>)>,
    vanished: HashMap<MachineId, Vanished>,
}

/// A machine whose recorded instance the provider does not list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vanished {
    /// The machine's state when it was read.
    pub state: MachineState,
    /// The instance it records.
    pub instance: String,
}

impl<'a> Comparison<'a> {
    /// A comparison of machines, to come, with `instances`.
    ///
    /// # Panics
    ///
    /// With more than 4,294,967,296 instances.
    pub fn of(instances: impl Into<Cow<'a, [ListedInstance]>>) -> Comparison<'a> {
        let instances = instances.into();
        let hashes = RandomState::new();
        let mut listed: HashTable<u32> = HashTable::with_capacity(instances.len());
        for (at, instance) in instances.iter().enumerate() {
            if instance.state.is_gone() {
                continue;
            }
            let id = instance.id();
            let hash = hashes.hash_one(id);
            match listed.find_mut(hash, |&other| instances[other as usize].id() == id) {
                Some(last) => *last = place(at),
                None => {
                    listed.insert_unique(hash, place(at), |&other| {
                        hashes.hash_one(instances[other as usize].id())
                    });
                }
            }
        }
        Comparison {
            recorded: vec![false; instances.len()],
            instances,
            listed,
            hashes,
            launching: HashMap::new(),
            readdressed: Vec::new(),
            vanished: HashMap::new(),
        }
    }

    /// A comparison of `machines`, every one looked at, with `instances`.
    fn of_all(machines: &[MachineSummary], instances: &'a [ListedInstance]) -> Comparison<'a> {
        let mut comparison = Comparison::of(instances);
        for machine in machines {
            comparison.look_at(machine);
        }
        comparison
    }

    /// The last live place of the instance `id` in the list.
    fn listed_at(&self, id: &str) -> Option<usize> {
        self.listed
            .find(self.hashes.hash_one(id), |&at| {
                self.instances[at as usize].id() == id
            })
            .map(|&at| at as usize)
    }

    /// Compares `machine` with the instances.
    pub fn look_at(&mut self, machine: &MachineSummary) {
        if machine.instance_id().is_none() && may_have_unrecorded_launch(machine.state) {
            self.launching.insert(machine.id, machine.state);
        } else if !self.launching.is_empty() {
            self.launching.remove(&machine.id);
        }
        let Some(instance) = machine.instance_id() else {
            return;
        };
        match self.listed_at(instance) {
            Some(at) => {
                self.recorded[at] = true;
                let listed = &self.instances[at];
                // An instance that reports no address keeps the last ones
                // known.
                if !listed.addresses().is_empty() && machine.addresses() != listed.addresses() {
                    self.readdressed.push((
                        machine.id,
                        instance.to_string(),
                        listed.address_list(),
                    ));
                }
            }
            // No cloud lists an enlisted host: its agent's heartbeats say
            // whether it lives.
            None if expects_its_instance(machine.state) && !is_manual_instance(instance) => {
                self.vanished.insert(
                    machine.id,
                    Vanished {
                        state: machine.state,
                        instance: instance.to_string(),
                    },
                );
            }
            None => {}
        }
    }

    /// The plan, once every machine has been looked at, and the instances
    /// compared.
    pub fn finish(mut self) -> (ReconciliationPlan, Cow<'a, [ListedInstance]>) {
        let mut plan = ReconciliationPlan {
            readdressed: std::mem::take(&mut self.readdressed),
            vanished: std::mem::take(&mut self.vanished),
            ..ReconciliationPlan::default()
        };
        for (at, instance) in self.instances.iter().enumerate() {
            if instance.state.is_gone() {
                continue;
            }
            let last = self.listed_at(instance.id()).unwrap_or(at);
            if self.recorded[last] {
                continue;
            }
            match instance.machine {
                Some(machine)
                    if self.launching.contains_key(&machine)
                        && !plan.adopt.contains_key(&machine) =>
                {
                    plan.adopt.insert(machine, instance.id().to_string());
                }
                _ => plan.strays.push(instance.id().to_string()),
            }
        }
        plan.readdressed.sort_by_key(|(id, _, _)| *id);
        plan.strays.sort();
        (plan, self.instances)
    }

    /// As [`Comparison::finish`], for a reconciliation while the engine
    /// runs: the strays are those of [`periodic_strays`], less the
    /// launches in flight.
    pub fn finish_periodic(self) -> (ReconciliationPlan, Cow<'a, [ListedInstance]>) {
        let launching: HashSet<MachineId> = self
            .launching
            .iter()
            .filter(|(_, state)| **state == MachineState::Starting)
            .map(|(id, _)| *id)
            .collect();
        let (mut plan, instances) = self.finish();
        let in_flight: HashSet<&str> = instances
            .iter()
            .filter(|i| i.machine.is_some_and(|m| launching.contains(&m)))
            .map(|i| i.id())
            .collect();
        plan.strays.retain(|id| !in_flight.contains(id.as_str()));
        (plan, instances)
    }
}

/// `at`, a place in the instances' list, in four bytes.
fn place(at: usize) -> u32 {
    u32::try_from(at)
        .unwrap_or_else(|_| panic!("a reconciliation compares at most 4,294,967,296 instances"))
}

/// The strays of a periodic reconciliation, while the engine runs: as
/// [`plan_reconciliation`]'s, less the launches in flight (an instance
/// tagged for a machine that is `starting` with no instance recorded),
/// whose machines' actors will record them.
pub fn periodic_strays(machines: &[MachineSummary], instances: &[ListedInstance]) -> Vec<String> {
    Comparison::of_all(machines, instances)
        .finish_periodic()
        .0
        .strays
}

/// What decides whether the instances `candidates` names are
/// [`periodic_strays`]: the candidates and the other instances tagged for
/// a candidate's machine, in `instances`' order, and those machines.
/// Against the machines that record one of those instances or are one of
/// those machines, each candidate comes out a stray or not as it does
/// against every machine.
pub fn deciding_strays(
    candidates: &[String],
    instances: &[ListedInstance],
) -> (Vec<ListedInstance>, Vec<MachineId>) {
    let wanted: HashSet<&str> = candidates.iter().map(String::as_str).collect();
    let claimed: HashSet<MachineId> = instances
        .iter()
        .filter(|i| wanted.contains(i.id()))
        .filter_map(|i| i.machine)
        .collect();
    let deciding = instances
        .iter()
        .filter(|i| wanted.contains(i.id()) || i.machine.is_some_and(|m| claimed.contains(&m)))
        .cloned()
        .collect();
    (deciding, claimed.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::instance::InstanceState;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn machine(id: u64, state: MachineState, instance: Option<&str>) -> MachineSummary {
        machine_at(id, state, instance, "")
    }

    /// A machine whose instance's stored addresses are `addresses`.
    fn machine_at(
        id: u64,
        state: MachineState,
        instance: Option<&str>,
        addresses: &str,
    ) -> MachineSummary {
        MachineSummary::new(
            MachineId::new(id),
            state,
            MachineRole::Workload,
            instance,
            None,
            addresses,
        )
    }

    fn instance(id: &str, machine: Option<u64>, state: InstanceState) -> ListedInstance {
        instance_at(id, machine, state, "")
    }

    /// An instance listed at `addresses`.
    fn instance_at(
        id: &str,
        machine: Option<u64>,
        state: InstanceState,
        addresses: &str,
    ) -> ListedInstance {
        ListedInstance::new(id, machine.map(MachineId::new), state, addresses)
    }

    #[test]
    fn an_instance_that_lost_its_machine_to_another_is_decided_with_that_one() {
        // A dying machine adopts the first of two launches tagged for it;
        // the second is a stray only because of the first.
        let machines = [machine(0, MachineState::Dying, None)];
        let instances = [
            instance("i-a", Some(0), InstanceState::Running),
            instance("i-b", Some(0), InstanceState::Running),
        ];
        assert_eq!(periodic_strays(&machines, &instances), ["i-b"]);
        let (deciding, named) = deciding_strays(&["i-b".to_string()], &instances);
        let ids: Vec<&str> = deciding.iter().map(|i| i.id()).collect();
        assert_eq!(ids, ["i-a", "i-b"]);
        assert_eq!(named, [MachineId::new(0)]);
        assert_eq!(periodic_strays(&machines, &deciding), ["i-b"]);
    }

    #[test]
    fn an_instance_reported_at_other_addresses_readdresses_its_machine() {
        let known = machine_at(0, MachineState::Started, Some("i-0"), "10.0.0.5");
        let same = machine(1, MachineState::Started, Some("i-1"));
        let listed = vec![
            instance_at(
                "i-0",
                Some(0),
                InstanceState::Running,
                "203.0.113.9,10.0.0.5",
            ),
            instance("i-1", Some(1), InstanceState::Running),
        ];
        let plan = plan_reconciliation(&[known.clone(), same.clone()], &listed);
        assert_eq!(
            plan.readdressed,
            [(
                MachineId::new(0),
                "i-0".to_string(),
                vec!["203.0.113.9".to_string(), "10.0.0.5".to_string()]
            )]
        );
        // The same addresses, or none reported: nothing to record.
        let known = machine_at(
            0,
            MachineState::Started,
            Some("i-0"),
            "203.0.113.9,10.0.0.5",
        );
        assert!(plan_reconciliation(&[known, same], &listed)
            .readdressed
            .is_empty());
    }

    #[test]
    fn an_instance_no_machine_claims_is_a_stray() {
        let machines = [machine(0, MachineState::Started, Some("i-0"))];
        let instances = [
            instance("i-0", Some(0), InstanceState::Running),
            instance("i-9", None, InstanceState::Running),
            instance("i-8", Some(7), InstanceState::Running),
        ];
        let plan = plan_reconciliation(&machines, &instances);
        assert_eq!(plan.strays, ["i-8", "i-9"]);
        assert!(plan.adopt.is_empty());
        assert!(plan.vanished.is_empty());
    }

    #[test]
    fn a_starting_machines_unrecorded_launch_is_adopted_once() {
        let machines = [
            machine(0, MachineState::Starting, None),
            machine(1, MachineState::Dying, None),
        ];
        let instances = [
            instance("i-1", Some(0), InstanceState::Pending),
            instance("i-2", Some(0), InstanceState::Running),
            instance("i-3", Some(1), InstanceState::Running),
        ];
        let plan = plan_reconciliation(&machines, &instances);
        assert_eq!(plan.adopt[&MachineId::new(0)], "i-1");
        assert_eq!(plan.adopt[&MachineId::new(1)], "i-3");
        assert_eq!(plan.strays, ["i-2"]);
    }

    #[test]
    fn a_pending_machines_tagged_instance_is_a_stray_not_adopted() {
        let machines = [machine(0, MachineState::Pending, None)];
        let instances = [instance("i-1", Some(0), InstanceState::Running)];
        let plan = plan_reconciliation(&machines, &instances);
        assert!(plan.adopt.is_empty());
        assert_eq!(plan.strays, ["i-1"]);
    }

    #[test]
    fn a_recorded_instance_the_provider_lost_has_vanished() {
        let machines = [
            machine(0, MachineState::Started, Some("i-0")),
            machine(1, MachineState::Stopping, Some("i-1")),
            machine(2, MachineState::AwaitingAgent, Some("i-2")),
            machine(3, MachineState::Down, Some("i-3")),
        ];
        let instances = [instance("i-2", Some(2), InstanceState::Terminated)];
        let plan = plan_reconciliation(&machines, &instances);
        let vanished: BTreeSet<u64> = plan.vanished.keys().map(|m| m.host_number()).collect();
        // Down is already shown down: nothing to do for it.
        assert_eq!(vanished, BTreeSet::from([0, 1, 2]));
        assert!(plan.strays.is_empty());
    }

    #[test]
    fn an_enlisted_host_is_never_vanished_for_the_cloud_not_listing_it() {
        let machines = [
            machine(0, MachineState::Started, Some("manual:host.invalid")),
            machine(1, MachineState::Started, Some("i-1")),
        ];
        let plan = plan_reconciliation(&machines, &[]);
        let vanished: BTreeSet<u64> = plan.vanished.keys().map(|m| m.host_number()).collect();
        assert_eq!(vanished, BTreeSet::from([1]));
    }

    #[test]
    fn terminated_instances_are_neither_strays_nor_adopted() {
        let machines = [machine(0, MachineState::Starting, None)];
        let instances = [
            instance("i-1", Some(0), InstanceState::Terminated),
            instance("i-2", None, InstanceState::ShuttingDown),
        ];
        let plan = plan_reconciliation(&machines, &instances);
        assert_eq!(plan, ReconciliationPlan::default());
    }

    #[test]
    fn a_periodic_reconciliation_leaves_launches_in_flight_alone() {
        let machines = [
            machine(0, MachineState::Starting, None),
            machine(1, MachineState::Pending, None),
        ];
        let instances = [
            instance("i-1", Some(0), InstanceState::Pending),
            instance("i-2", Some(1), InstanceState::Running),
            instance("i-3", None, InstanceState::Running),
        ];
        assert_eq!(periodic_strays(&machines, &instances), ["i-2", "i-3"]);
    }

    fn any_state() -> impl Strategy<Value = MachineState> {
        prop::sample::select(MachineState::ALL.to_vec())
    }

    fn any_instance_state() -> impl Strategy<Value = InstanceState> {
        prop::sample::select(InstanceState::ALL.to_vec())
    }

    /// Addresses a machine or an instance may have: none, or one of two.
    fn any_addresses() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["", "192.0.2.1", "192.0.2.1,192.0.2.2"]).prop_map(String::from)
    }

    /// Up to 12 machines, each maybe recording one of 16 instance ids (two
    /// machines may record the same), and up to 16 instances (unique ids),
    /// each maybe tagged for one of 14 machine numbers (some of which do
    /// not exist); each with some addresses or none.
    fn world() -> impl Strategy<Value = (Vec<MachineSummary>, Vec<ListedInstance>)> {
        let machines = prop::collection::vec(
            (any_state(), prop::option::of(0u8..16), any_addresses()),
            0..12,
        )
        .prop_map(|specs| {
            specs
                .into_iter()
                .enumerate()
                .map(|(n, (state, instance, addresses))| {
                    let id = instance.map(|i| format!("i-{i}"));
                    machine_at(n as u64, state, id.as_deref(), &addresses)
                })
                .collect::<Vec<_>>()
        });
        let instances = prop::collection::btree_map(
            0u8..16,
            (
                prop::option::of(0u64..14),
                any_instance_state(),
                any_addresses(),
            ),
            0..16,
        )
        .prop_map(|specs| {
            specs
                .into_iter()
                .map(|(i, (machine, state, addresses))| {
                    instance_at(&format!("i-{i}"), machine, state, &addresses)
                })
                .collect::<Vec<_>>()
        });
        (machines, instances)
    }

    /// The plan made the plain way: each rule as it reads, every machine
    /// and every instance looked at for each question.
    fn plan_by_every_pair(
        machines: &[MachineSummary],
        instances: &[ListedInstance],
    ) -> ReconciliationPlan {
        let live = || instances.iter().filter(|i| !i.state.is_gone());
        let mut plan = ReconciliationPlan::default();
        for instance in live() {
            if machines
                .iter()
                .any(|m| m.instance_id() == Some(instance.id()))
            {
                continue;
            }
            let claim = machines
                .iter()
                .rev()
                .find(|m| Some(m.id) == instance.machine)
                .filter(|m| {
                    m.instance_id().is_none()
                        && may_have_unrecorded_launch(m.state)
                        && !plan.adopt.contains_key(&m.id)
                });
            match claim {
                Some(machine) => {
                    plan.adopt.insert(machine.id, instance.id().to_string());
                }
                None => plan.strays.push(instance.id().to_string()),
            }
        }
        for machine in machines {
            let Some(id) = machine.instance_id() else {
                continue;
            };
            match live().rfind(|i| i.id() == id) {
                Some(listed)
                    if !listed.addresses().is_empty()
                        && listed.addresses() != machine.addresses() =>
                {
                    plan.readdressed
                        .push((machine.id, id.to_string(), listed.address_list()));
                }
                Some(_) => {}
                None if expects_its_instance(machine.state) && !is_manual_instance(id) => {
                    plan.vanished.insert(
                        machine.id,
                        Vanished {
                            state: machine.state,
                            instance: id.to_string(),
                        },
                    );
                }
                None => {}
            }
        }
        plan.readdressed.sort_by_key(|(id, _, _)| *id);
        plan.strays.sort();
        plan
    }

    proptest! {
        #[test]
        fn a_planned_reconciliation_never_stops_an_instance_a_machine_owns(
            (machines, instances) in world()
        ) {
            let owned: HashSet<&str> =
                machines.iter().filter_map(|m| m.instance_id()).collect();
            let plan = plan_reconciliation(&machines, &instances);
            for stray in plan.strays.iter().chain(&periodic_strays(&machines, &instances)) {
                prop_assert!(!owned.contains(stray.as_str()), "{stray} is owned");
            }
            for (machine, adopted) in &plan.adopt {
                let tagged: Vec<Option<MachineId>> =
                    instances.iter().filter(|i| i.id() == adopted).map(|i| i.machine).collect();
                prop_assert_eq!(tagged, vec![Some(*machine)]);
                prop_assert!(!owned.contains(adopted.as_str()));
                prop_assert!(!plan.strays.contains(adopted));
            }
        }

        #[test]
        fn strays_decided_on_the_deciding_machines_are_those_of_every_machine(
            (machines, instances) in world(),
            pick in proptest::collection::vec(any::<bool>(), 0..40),
        ) {
            // Any candidates: the strays of every machine, and others.
            let candidates: Vec<String> = instances
                .iter()
                .zip(pick.iter().chain(std::iter::repeat(&true)))
                .filter(|(_, picked)| **picked)
                .map(|(i, _)| i.id().to_string())
                .collect();
            let (deciding, named) = deciding_strays(&candidates, &instances);
            let ids: HashSet<&str> = deciding.iter().map(|i| i.id()).collect();
            let read: Vec<MachineSummary> = machines
                .iter()
                .filter(|m| {
                    named.contains(&m.id)
                        || m.instance_id().is_some_and(|i| ids.contains(i))
                })
                .cloned()
                .collect();
            let of = |strays: Vec<String>| -> Vec<String> {
                strays.into_iter().filter(|s| candidates.contains(s)).collect()
            };
            prop_assert_eq!(
                of(periodic_strays(&read, &deciding)),
                of(periodic_strays(&machines, &instances))
            );
        }

        #[test]
        fn the_plan_is_the_one_made_by_looking_at_every_pair(
            (machines, instances) in world()
        ) {
            prop_assert_eq!(
                plan_reconciliation(&machines, &instances),
                plan_by_every_pair(&machines, &instances)
            );
        }

        #[test]
        fn periodic_strays_are_the_plans_less_the_launches_in_flight(
            (machines, instances) in world()
        ) {
            let in_flight = |stray: &String| {
                instances.iter().any(|i| {
                    i.id() == stray
                        && machines.iter().any(|m| {
                            Some(m.id) == i.machine
                                && m.instance_id().is_none()
                                && m.state == MachineState::Starting
                        })
                })
            };
            let expected: Vec<String> = plan_by_every_pair(&machines, &instances)
                .strays
                .into_iter()
                .filter(|stray| !in_flight(stray))
                .collect();
            prop_assert_eq!(periodic_strays(&machines, &instances), expected);
        }

        #[test]
        fn the_plan_is_the_same_whatever_order_the_machines_come_in(
            (machines, instances) in world()
        ) {
            // In id order, the machines are found in the list itself;
            // in any other, through a map.
            let mut in_order = machines.clone();
            in_order.sort_by_key(|m| m.id);
            let mut reversed = in_order.clone();
            reversed.reverse();
            prop_assert_eq!(
                plan_reconciliation(&in_order, &instances),
                plan_reconciliation(&reversed, &instances)
            );
        }

        #[test]
        fn every_live_instance_is_owned_adopted_or_a_stray(
            (machines, instances) in world()
        ) {
            let owned: HashSet<&str> =
                machines.iter().filter_map(|m| m.instance_id()).collect();
            let plan = plan_reconciliation(&machines, &instances);
            let adopted: HashSet<&str> = plan.adopt.values().map(String::as_str).collect();
            for instance in instances.iter().filter(|i| !i.state.is_gone()) {
                let id = instance.id();
                let places = [owned.contains(id), adopted.contains(id), plan.strays.iter().any(|s| s == id)];
                prop_assert_eq!(places.iter().filter(|p| **p).count(), 1, "{}", id);
            }
        }
    }
}

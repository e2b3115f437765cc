//! The ZoneTracker actor: the zones, their health, and how many machines of
//! each distribution group each zone holds. It answers which zone a machine
//! should try and reserves that zone in the same step, so that machines
//! started at the same moment still spread.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use actix::prelude::*;

use crate::domain::names::MachineId;
use crate::domain::zones::{order_zones, Occupant, Zone, ZoneCensus, ZoneRequest};
use crate::engine::protocol::{
    ChooseZone, Place, Release, SetZones, WatchRestarts, ZoneTrackerRestarted,
};
use crate::engine::supervision::{hooks, kinds};

/// The zone tracker's state. Rebuilt from the store by the provisioner
/// (which sends [`SetZones`] and [`Place`]) whenever it starts.
#[derive(Default)]
pub struct ZoneTracker {
    zones: Vec<Zone>,
    census: ZoneCensus,
    /// Where each counted machine is, so that a release removes exactly
    /// what was added.
    placed: HashMap<MachineId, (Arc<str>, Arc<Occupant>)>,
    /// One copy of each zone name and each distinct occupant, shared by
    /// the machines placed with it (the machines of one application share
    /// one occupant, however many there are).
    zone_names: HashSet<Arc<str>>,
    occupants: HashSet<Arc<Occupant>>,
    /// Told when the tracker restarts, to refill it.
    restarts: Option<Recipient<ZoneTrackerRestarted>>,
}

impl Actor for ZoneTracker {
    type Context = Context<Self>;
}

impl Supervised for ZoneTracker {
    fn restarting(&mut self, _ctx: &mut Context<Self>) {
        // The provisioner re-sends the zones and placements after any
        // restart, its own or (told here) the tracker's.
        let restarts = self.restarts.take();
        *self = ZoneTracker::default();
        if let Some(provisioner) = &restarts {
            provisioner.do_send(ZoneTrackerRestarted);
        }
        self.restarts = restarts;
    }
}

impl Handler<WatchRestarts> for ZoneTracker {
    type Result = ();

    fn handle(&mut self, msg: WatchRestarts, _ctx: &mut Context<Self>) {
        self.restarts = Some(msg.0);
    }
}

impl ZoneTracker {
    fn count(&mut self, machine: MachineId, zone: String, occupant: Arc<Occupant>) {
        self.release(&machine);
        self.census.add(&zone, &occupant);
        let zone = match self.zone_names.get(zone.as_str()) {
            Some(name) => Arc::clone(name),
            None => {
                let name: Arc<str> = zone.into();
                self.zone_names.insert(Arc::clone(&name));
                name
            }
        };
        let occupant = match self.occupants.get(&*occupant) {
            Some(shared) => Arc::clone(shared),
            None => {
                self.occupants.insert(Arc::clone(&occupant));
                occupant
            }
        };
        self.placed.insert(machine, (zone, occupant));
    }

    fn release(&mut self, machine: &MachineId) {
        if let Some((zone, occupant)) = self.placed.remove(machine) {
            // Counted by `count`, so the census holds it.
            let _ = self.census.remove(&zone, &occupant);
        }
    }
}

impl Handler<SetZones> for ZoneTracker {
    type Result = ();

    fn handle(&mut self, msg: SetZones, _ctx: &mut Context<Self>) {
        self.zones = msg
            .0
            .into_iter()
            .map(|z| match z.unavailable_reason() {
                None => Zone::available(z.name),
                Some(reason) => Zone::unavailable(z.name, reason),
            })
            .collect();
    }
}

impl Handler<Place> for ZoneTracker {
    type Result = ();

    fn handle(&mut self, msg: Place, _ctx: &mut Context<Self>) {
        self.count(msg.machine, msg.zone, msg.occupant);
    }
}

impl Handler<Release> for ZoneTracker {
    type Result = ();

    fn handle(&mut self, msg: Release, _ctx: &mut Context<Self>) {
        self.release(&msg.machine);
    }
}

impl Handler<ChooseZone> for ZoneTracker {
    type Result = Result<String, String>;

    fn handle(&mut self, msg: ChooseZone, _ctx: &mut Context<Self>) -> Self::Result {
        hooks::checkpoint(kinds::ZONE_TRACKER);
        // The machine's own earlier reservation must not count against it.
        self.release(&msg.machine);
        let group = msg.occupant.group();
        let order = order_zones(&ZoneRequest {
            zones: &self.zones,
            census: &self.census,
            group: &group,
            failed: &msg.failed,
            zones_constraint: &msg.zones_constraint,
            placement: msg.placement_zone.as_deref(),
        })
        .map_err(|e| e.to_string())?;
        let zone = order
            .into_iter()
            .next()
            .ok_or_else(|| "no availability zone is left to try".to_string())?;
        self.count(msg.machine, zone.clone(), Arc::new(msg.occupant));
        Ok(zone)
    }
}

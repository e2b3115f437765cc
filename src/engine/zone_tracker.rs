//! The ZoneTracker actor: the zones and their health, and the door through
//! which machines choose their zone.
//!
//! The census of who is in which zone lives in the store
//! ([`crate::store::census`]), shared by every controller on the database:
//! a [`ChooseZone`] is answered by one store operation that reads the
//! census, picks the zone by the domain's rule, writes the machine's
//! choice and counts it, so that machines started at the same moment, by
//! this controller or another, still spread.

use actix::prelude::*;

use crate::domain::zones::Zone;
use crate::engine::protocol::{ChooseZone, SetZones, WatchRestarts, ZoneTrackerRestarted};
use crate::engine::supervision::{hooks, kinds};
use crate::store::census::{ZoneChoice, ZoneChosen};
use crate::store::zones::ZoneRecord;
use crate::store::{Store, StoreError};

/// The zone tracker's state: the zones as the provisioner last sent them
/// ([`SetZones`], whenever it starts and whenever they change).
pub struct ZoneTracker {
    store: Store,
    zones: Vec<Zone>,
    /// Told when the tracker restarts, to refill it.
    restarts: Option<Recipient<ZoneTrackerRestarted>>,
}

impl ZoneTracker {
    pub fn new(store: Store) -> ZoneTracker {
        ZoneTracker {
            store,
            zones: Vec::new(),
            restarts: None,
        }
    }
}

impl Actor for ZoneTracker {
    type Context = Context<Self>;
}

impl Supervised for ZoneTracker {
    fn restarting(&mut self, _ctx: &mut Context<Self>) {
        // The provisioner re-sends the zones after any restart, its own or
        // (told here) the tracker's.
        self.zones.clear();
        if let Some(provisioner) = &self.restarts {
            provisioner.do_send(ZoneTrackerRestarted);
        }
    }
}

impl Handler<WatchRestarts> for ZoneTracker {
    type Result = ();

    fn handle(&mut self, msg: WatchRestarts, _ctx: &mut Context<Self>) {
        self.restarts = Some(msg.0);
    }
}

impl Handler<SetZones> for ZoneTracker {
    type Result = ();

    fn handle(&mut self, msg: SetZones, _ctx: &mut Context<Self>) {
        self.zones = msg.0.iter().map(ZoneRecord::zone).collect();
    }
}

impl Handler<ChooseZone> for ZoneTracker {
    type Result = ResponseFuture<Result<ZoneChosen, StoreError>>;

    fn handle(&mut self, msg: ChooseZone, _ctx: &mut Context<Self>) -> Self::Result {
        hooks::checkpoint(kinds::ZONE_TRACKER);
        let store = self.store.clone();
        let choice = ZoneChoice {
            id: msg.machine,
            occupant: msg.occupant,
            zones: self.zones.clone(),
            failed: msg.failed,
            zones_constraint: msg.zones_constraint,
            placement_zone: msg.placement_zone,
            clear_retry_at: msg.clear_retry_at,
        };
        Box::pin(async move {
            store
                .choose_zone_from(msg.current, msg.stored, choice)
                .await
        })
    }
}

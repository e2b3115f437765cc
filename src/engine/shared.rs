//! What every engine actor shares: the store, the provider, the other
//! actors' addresses and the engine's settings.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;

use crate::contracts::provider::{ControllerContact, Provider};
use crate::domain::instance_types::HourlyPrice;
use crate::engine::broker::ProviderBroker;
use crate::engine::config::HarvestMode;
use crate::engine::leases::LeaseClock;
use crate::engine::manual_broker::ManualBroker;
use crate::engine::zone_tracker::ZoneTracker;
use crate::metrics::Metrics;
use crate::store::Store;

/// What every engine actor shares: the store, the provider and the other
/// actors' addresses.
pub struct Shared {
    pub store: Store,
    /// Read-only uses only (catalogue, offerings); calls go through the
    /// broker.
    pub provider: Arc<dyn Provider>,
    pub broker: Addr<ProviderBroker>,
    /// Existing hosts enlisted over SSH (`ssh:` machines).
    pub manual: Addr<ManualBroker>,
    pub zones: Addr<ZoneTracker>,
    pub harvest: HarvestMode,
    pub controller_uuid: String,
    pub model_uuid: String,
    pub model_name: String,
    /// Where machine agents reach the controller, and its CA.
    pub controller: ControllerContact,
    pub reconcile_interval: Duration,
    pub agent_down_after: Duration,
    /// The most machine actors alive at once.
    pub max_machine_actors: usize,
    /// `[provisioner] max_hourly_price`: no instance costing more is
    /// launched.
    pub price_ceiling: HourlyPrice,
    /// Updated by the actors, rendered by the API's `/metrics`.
    pub metrics: Arc<Metrics>,
    /// Whether this controller's leases can be trusted now (see
    /// [`crate::store::leases`]).
    pub leases: Arc<LeaseClock>,
}

impl Shared {
    /// Whether this controller holds a live lease on `record`'s machine,
    /// as read from the store.
    pub fn holds(&self, record: &crate::store::records::MachineRecord) -> bool {
        record
            .lease
            .as_ref()
            .is_some_and(|lease| lease.is_held_by(self.store.holder(), crate::store::now_ms()))
    }
}

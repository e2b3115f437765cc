//! The provisioning engine: actix actors that make sure every machine that
//! is not dead has an instance with a connected agent, and that dead
//! machines and stray instances are cleaned up.
//!
//! - [`provisioner`]: the `Provisioner` (reconciles at start and follows
//!   the change log) and the `ContainerProvisioner` (one per host with
//!   containers), both supervised.
//! - [`machine`]: the `MachineActor`, one per machine that is not settled.
//! - [`zone_tracker`]: the `ZoneTracker`, the zones, and zone choices
//!   made against the store's census.
//! - [`broker`]: the `ProviderBroker`, the only door to a cloud.
//! - [`manual_broker`]: the `ManualBroker`, the only door to existing
//!   hosts enlisted over SSH.
//! - [`protocol`]: every message between them, with the table of who
//!   sends which to whom.
//! - [`shared`]: what every actor holds (the store, the provider, the
//!   other actors' addresses).
//! - [`config`]: the `[provisioner]` settings.
//! - [`leases`]: how long this controller's leases can be trusted; the
//!   provisioner claims, renews and releases them (the provisioning lock,
//!   [`crate::store::leases`]), so several controllers share one store.
//! - [`supervision`]: every actor restarted after a panic, on the same
//!   address, its state rebuilt.
//!
//! The actors decide nothing themselves: the lifecycle's transitions are
//! the domain's ([`crate::domain::machine`]), applied and written by the
//! store's one writer ([`crate::store::lifecycle`]); reconciliation plans,
//! the zone spread and instance-type choice are pure functions of the
//! domain too.
//!
//! Start it with [`Engine::start`] inside an actix `System`; the returned
//! [`Engine`] is the controller's side of [`ControllerLink`] (provider
//! webhooks and agent check-ins arrive through it).

pub mod broker;
pub mod config;
pub mod leases;
pub mod machine;
pub mod manual_broker;
pub mod protocol;
pub mod provisioner;
pub mod shared;
pub mod supervision;
pub mod zone_tracker;

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use async_trait::async_trait;

use crate::contracts::provider::{
    ControllerContact, ControllerLink, InstanceStateChange, Provider,
};
use crate::contracts::secrets::Secret;
use crate::domain::names::MachineId;
use crate::engine::broker::{ProviderBroker, RateLimits};
use crate::engine::config::ProvisionerConfig;
use crate::engine::leases::LeaseClock;
use crate::engine::manual_broker::ManualBroker;
use crate::engine::protocol::{GetLiveActors, ProviderReport, ReconcileNow, WatchRestarts};
use crate::engine::provisioner::Provisioner;
use crate::engine::shared::Shared;
use crate::engine::supervision::{kinds, Restart};
use crate::engine::zone_tracker::ZoneTracker;
use crate::metrics::Metrics;
use crate::providers::manual::{ManualConfig, ManualHosts};
use crate::store::{Store, StoreError};

/// A running engine.
#[derive(Clone)]
pub struct Engine {
    provisioner: Addr<Provisioner>,
    shared: Arc<Shared>,
}

impl Engine {
    /// Starts the engine's actors on the current actix system and attaches
    /// the provider to it.
    ///
    /// # Errors
    ///
    /// [`StoreError`] if the model cannot be read.
    pub fn start(
        store: Store,
        provider: Arc<dyn Provider>,
        config: &ProvisionerConfig,
        limits: RateLimits,
        controller: ControllerContact,
        metrics: Arc<Metrics>,
        manual: &ManualConfig,
    ) -> Result<Engine, StoreError> {
        let model = store.model()?;
        // Every transition, the engine's and the API's alike, is applied
        // with this policy by the store's one writer.
        store.set_policy(config.policy());
        let observed = metrics.clone();
        let observer: broker::CallObserver = Arc::new(move |cost, took, ok| {
            let kind = cost.kind.as_str();
            observed.observe_provider_call(kind, took.as_secs_f64(), ok);
            observed.count_provider_requests(kind, cost.requests);
        });
        let leases = Arc::new(LeaseClock::new(config.lease_ttl()));
        let broker = supervision::start(
            kinds::PROVIDER_BROKER,
            Restart::OnPanic,
            metrics.clone(),
            ProviderBroker::new(
                provider.clone(),
                limits,
                config.workers,
                config.call_timeout(),
                Some(observer),
            )
            .fenced(leases.clone()),
        );
        let zones = supervision::start(
            kinds::ZONE_TRACKER,
            Restart::OnPanicOrStop,
            metrics.clone(),
            ZoneTracker::new(store.clone()),
        );
        let manual = supervision::start(
            kinds::MANUAL_BROKER,
            Restart::OnPanic,
            metrics.clone(),
            ManualBroker::new(ManualHosts::new(manual, &model.uuid)).fenced(leases.clone()),
        );
        let shared = Arc::new(Shared {
            store,
            provider: provider.clone(),
            broker,
            manual,
            zones,
            harvest: config.harvest_mode,
            controller_uuid: model.controller_uuid,
            model_uuid: model.uuid,
            model_name: model.name,
            controller,
            reconcile_interval: Duration::from_secs(config.reconcile_interval_s),
            agent_down_after: Duration::from_secs(config.agent_down_after_s),
            max_machine_actors: config.max_machine_actors.max(1),
            price_ceiling: config.price_ceiling(),
            metrics,
            leases,
        });
        let provisioner = supervision::start(
            kinds::PROVISIONER,
            Restart::OnPanicOrStop,
            shared.metrics.clone(),
            Provisioner::new(shared.clone()),
        );
        // A restarted zone tracker has forgotten the zones and who is in
        // them: the provisioner starts again from the store to refill it.
        shared
            .zones
            .do_send(WatchRestarts(provisioner.clone().recipient()));
        let engine = Engine {
            provisioner,
            shared,
        };
        provider.attach(engine.link());
        Ok(engine)
    }

    /// Compares the provider's instances with the store now, instead of at
    /// the next interval.
    pub fn reconcile_now(&self) {
        self.provisioner.do_send(ReconcileNow);
    }

    /// How many machine actors are alive.
    pub async fn live_actors(&self) -> usize {
        self.provisioner.send(GetLiveActors).await.unwrap_or(0)
    }

    pub fn store(&self) -> &Store {
        &self.shared.store
    }

    pub fn provider(&self) -> &Arc<dyn Provider> {
        &self.shared.provider
    }

    /// The engine's side of [`ControllerLink`], for the API's webhook and
    /// agent routes.
    pub fn link(&self) -> Arc<dyn ControllerLink> {
        Arc::new(EngineLink {
            provisioner: self.provisioner.clone(),
            store: self.shared.store.clone(),
            heard_within: self.shared.agent_down_after / 4,
        })
    }
}

/// What a provider (and the API) holds of the engine: the provisioner's
/// address and the store, not the engine's shared state (which holds the
/// provider), so that nothing keeps itself alive.
pub struct EngineLink {
    provisioner: Addr<Provisioner>,
    store: Store,
    /// A simulated agent's heartbeat stored less than this long ago is
    /// not written again: a quarter of the time after which a silent
    /// agent is shown down, so that an agent reporting at least every
    /// three quarters of it never looks silent.
    heard_within: Duration,
}

#[async_trait]
impl ControllerLink for EngineLink {
    async fn instance_changed(&self, change: InstanceStateChange) {
        self.provisioner.do_send(ProviderReport(change));
    }

    async fn agent_connect(
        &self,
        machine: MachineId,
        one_time_password: Secret,
    ) -> Result<(), String> {
        // The same check-in as the HTTP route's, early agents' wait included.
        self.store
            .agent_connect(machine, one_time_password)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    async fn agents_alive(&self, machines: Vec<MachineId>) {
        if let Err(e) = self.store.agents_alive(machines, self.heard_within).await {
            log::warn!("cannot record the simulated agents' heartbeats: {e}");
        }
    }
}

//! The provider contract: what the engine asks of a cloud and what a cloud
//! reports back.
//!
//! A provider only does what a cloud does: list its zones and instance
//! types, launch, list and terminate instances. Every decision (which type,
//! which zone, when to retry) is the engine's. The engine reaches a provider
//! only through its `ProviderBroker` actor, which rate-limits, batches and
//! isolates the calls; a provider reaches the controller only through
//! [`ControllerLink`].

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::contracts::secrets::Secret;
use crate::domain::base::Base;
use crate::domain::constraints::Key;
use crate::domain::instance::{Instance, InstanceState, ListedInstance};
use crate::domain::instance_types::{Catalogue, Requirements};
use crate::domain::names::MachineId;

/// The tags berth puts on every instance it launches. Instances without
/// them are never touched.
pub mod tags {
    /// The controller that owns the instance; strays are looked for only
    /// among this controller's instances.
    pub const CONTROLLER: &str = "berth-controller";
    pub const MODEL: &str = "berth-model";
    pub const MACHINE: &str = "berth-machine";
    pub const NAME: &str = "Name";
}

/// What the machine agent on a new instance needs to check in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentBootstrap {
    /// Where the agent reaches the controller (`http://host:port`).
    pub controller_url: String,
    /// The PEM CA certificate the agent verifies an `https://` controller
    /// with; `None` for plain HTTP or a certificate from a public CA.
    pub ca_cert: Option<String>,
    /// Exchanged once for the machine's permanent credential.
    pub one_time_password: Secret,
}

/// How machine agents reach the controller and verify it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ControllerContact {
    /// `http://host:port` or `https://host:port`.
    pub url: String,
    /// The PEM CA certificate of an `https://` controller's own CA.
    pub ca_cert: Option<String>,
}

impl ControllerContact {
    /// A controller at `url` that agents verify, if at all, with the
    /// public roots.
    pub fn at(url: impl Into<String>) -> ControllerContact {
        ControllerContact {
            url: url.into(),
            ca_cert: None,
        }
    }
}

/// One instance to launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchRequest {
    pub machine: MachineId,
    pub zone: String,
    /// Chosen by the engine from the provider's catalogue.
    pub instance_type: String,
    pub base: Base,
    /// The machine's resolved constraints: root disk, image id, public IP,
    /// spaces and the rest the provider may honour.
    pub requirements: Requirements,
    pub agent: AgentBootstrap,
    /// Identical for every retry of the same attempt, so a repeated call
    /// cannot start a second instance (EC2's ClientToken).
    pub client_token: String,
    /// berth's tags (see [`tags`]), put on the instance and its volumes.
    pub tags: BTreeMap<String, String>,
    /// For a container: the host machine's instance.
    pub host_instance: Option<String>,
}

/// How a provider call failed, which decides what the engine does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailureClass {
    /// The zone cannot take this launch now (capacity, type not offered
    /// there): try the next zone at once.
    ZoneSpecific,
    /// May pass (throttling, a network error, an internal error): back off.
    Transient,
    /// Will not pass by retrying (no such image, nothing fits).
    Permanent,
    /// The provider refused our credentials or permissions: stop this
    /// provider's work rather than burn every machine's attempts.
    Unauthorized,
}

/// A failed provider call, in the provider's own words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ProviderError {
    pub class: FailureClass,
    pub message: String,
}

impl ProviderError {
    pub fn new(class: FailureClass, message: impl Into<String>) -> ProviderError {
        ProviderError {
            class,
            message: message.into(),
        }
    }
}

/// An instance's state changed, as a provider reports it (a webhook, or the
/// simulated cloud's notifications).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceStateChange {
    pub instance_id: String,
    pub state: InstanceState,
    /// When the provider saw the change (ms since the epoch), so that late,
    /// out-of-order deliveries can be recognised.
    pub at_ms: i64,
}

/// The controller, as a provider sees it: where instance changes are
/// reported and where (simulated) machine agents check in. The same code
/// serves the HTTP webhook and agent routes.
#[async_trait]
pub trait ControllerLink: Send + Sync {
    async fn instance_changed(&self, change: InstanceStateChange);
    /// A machine agent presents its one-time password.
    async fn agent_connect(
        &self,
        machine: MachineId,
        one_time_password: Secret,
    ) -> Result<(), String>;

    /// Simulated agents that are alive, reported together (real agents
    /// send their own authenticated heartbeats to the API).
    async fn agents_alive(&self, _machines: Vec<MachineId>) {}
}

/// A zone as the provider reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderZone {
    pub name: String,
    pub available: bool,
    /// Why the zone is unavailable, in the provider's words (empty when it
    /// is available).
    pub reason: String,
}

/// A cloud.
#[async_trait]
pub trait Provider: Send + Sync {
    /// `sim`, `ec2`, ...
    fn name(&self) -> &str;

    /// The constraint keys this provider honours; others are kept and
    /// reported as warnings.
    fn supported_constraints(&self) -> &[Key];

    /// The instance types this provider offers (with prices).
    fn catalogue(&self) -> &Catalogue;

    /// Whether `instance_type` can be launched in `zone`.
    fn offers(&self, _zone: &str, _instance_type: &str) -> bool {
        true
    }

    /// The most launches one [`Provider::launch`] call may carry.
    fn max_launch_batch(&self) -> usize {
        1
    }

    /// How many of the cloud's API requests one [`Provider::launch`] call
    /// of `launches` makes, each of which the cloud's request bucket
    /// counts: one by default (the batch is one request); EC2 sends one
    /// RunInstances per launch. The broker takes this many launch tokens
    /// for the call.
    fn launch_requests(&self, _launches: usize) -> usize {
        1
    }

    /// Whether this provider can start lxd containers on its instances.
    fn supports_containers(&self) -> bool {
        false
    }

    /// Lets the provider report instance changes (and, for the simulated
    /// cloud, agent check-ins) to the controller.
    fn attach(&self, _link: Arc<dyn ControllerLink>) {}

    /// The availability zones and their health.
    async fn zones(&self) -> Result<Vec<ProviderZone>, ProviderError>;

    /// Launches instances, one result per request, in request order. A
    /// request whose client token was seen before returns that instance
    /// instead of a new one.
    async fn launch(&self, requests: Vec<LaunchRequest>) -> Vec<Result<Instance, ProviderError>>;

    /// Terminates instances, one result per id; terminating an instance
    /// that is already gone succeeds.
    async fn terminate(&self, instance_ids: Vec<String>) -> Vec<Result<(), ProviderError>>;

    /// Every instance tagged with this controller's id that is not yet
    /// terminated.
    async fn instances(&self, controller_uuid: &str) -> Result<Vec<Instance>, ProviderError>;

    /// [`Provider::instances`] as a reconciliation compares them. A
    /// provider that keeps its instances at hand makes these without
    /// making each whole [`Instance`] first.
    async fn listed_instances(
        &self,
        controller_uuid: &str,
    ) -> Result<Vec<ListedInstance>, ProviderError> {
        let instances = self.instances(controller_uuid).await?;
        Ok(instances.iter().map(ListedInstance::of).collect())
    }

    /// Those of [`Provider::instances`] that `ids` names, in any order;
    /// an id the provider does not list is left out.
    async fn instances_named(
        &self,
        controller_uuid: &str,
        ids: Vec<String>,
    ) -> Result<Vec<Instance>, ProviderError> {
        let wanted: HashSet<String> = ids.into_iter().collect();
        let instances = self.instances(controller_uuid).await?;
        Ok(instances
            .into_iter()
            .filter(|instance| wanted.contains(&instance.id))
            .collect())
    }
}

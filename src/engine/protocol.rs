//! The engine's actor protocol: every message the engine's actors send
//! one another, in one place. Commands are imperative (`StartInstance`,
//! `Retry`), events past tense (`InstanceStarted`, `InstanceFailed`),
//! queries `Get*`. Each actor's handlers live with the actor.
//!
//! | message | from | to | what it causes |
//! |---|---|---|---|
//! | [`StartInstance`] | Provisioner | MachineActor | a pending machine asks the ZoneTracker for a zone, then launches |
//! | [`ChooseZone`] | MachineActor | ZoneTracker | choose the zone from the store's census and write it |
//! | [`Launch`] | MachineActor | ProviderBroker | one instance launched (batched, rate-limited) |
//! | [`InstanceStarted`] | ProviderBroker | MachineActor | the machine waits for its agent |
//! | [`InstanceFailed`] | ProviderBroker | MachineActor | next zone, backoff, provisioning error, or a wait for the provider |
//! | [`Terminate`] | MachineActor, Provisioner | ProviderBroker | instances stopped (a removed machine's, strays) |
//! | [`Enlist`] | MachineActor (an `ssh:` machine) | ManualBroker | an existing host read, checked and given an agent |
//! | [`HostEnlisted`] | ManualBroker | MachineActor | the machine waits for its agent, with the host's hardware and base |
//! | [`Unenlist`] | MachineActor (an `ssh:` machine) | ManualBroker | the host's agent stopped and removed; the host keeps running |
//! | [`ListInstances`], [`ListZones`] | Provisioner | ProviderBroker | what the provider has, for reconciliation |
//! | [`DescribeInstances`] | Provisioner | ProviderBroker | the whole instances of the launches a reconciliation adopts |
//! | [`Retry`] | administrator (`retry-provisioning`, seen in the change log by the Provisioner) | MachineActor | a machine that was in error starts again |
//! | [`Reconcile`] | Provisioner (change-log follower) | MachineActor | the machine as someone else left it; the actor decides again |
//! | [`Gone`] | Provisioner | MachineActor | the machine was removed; its zone is released and the actor stops |
//! | [`InstanceChanged`] | Provisioner (webhooks, reconciliation) | MachineActor | a stopped instance finishes a stop, or shows the machine down |
//! | [`ActorStopped`] | MachineActor | Provisioner | room for a waiting machine's actor |
//! | [`Shutdown`] | Provisioner (restarting) | MachineActor, ContainerProvisioner | stop without releasing anything |
//! | [`SetZones`] | Provisioner | ZoneTracker | the zones and their health |
//! | [`ProviderReport`] | the engine's link (webhooks, the simulated cloud) | Provisioner | an instance's new state, passed to its machine's actor |
//! | [`ReconcileNow`] | operator, tests | Provisioner | a reconciliation with the provider now |
//! | [`GetLiveActors`] | metrics, tests | Provisioner | how many machine actors are alive |
//! | [`WatchRestarts`] | the engine, at start | ZoneTracker | whom to tell when it restarts |
//! | [`ZoneTrackerRestarted`] | ZoneTracker (after a panic) | Provisioner | the provisioner starts again from the store, refilling the tracker |
//!
//! Inside one actor, and so not here: the MachineActor's lifecycle timers;
//! the Provisioner's change-log batches and `SpawnContainer` (from a
//! ContainerProvisioner); a ContainerProvisioner's `AddContainer` and
//! `HostReady` (from the Provisioner).

use std::collections::BTreeSet;

use actix::prelude::*;

use crate::contracts::provider::{InstanceStateChange, LaunchRequest, ProviderError, ProviderZone};
use crate::domain::constraints::Setting;
use crate::domain::instance::{Instance, InstanceState, ListedInstance};
use crate::domain::machine::{Machine, MachineState};
use crate::domain::names::MachineId;
use crate::domain::placement::SshTarget;
use crate::domain::zones::Occupant;
use crate::engine::leases::Fence;
use crate::providers::manual::{EnlistRequest, Enlisted};
use crate::store::census::ZoneChosen;
use crate::store::machines::EngineMachine;
use crate::store::zones::ZoneRecord;
use crate::store::StoreError;

// To the MachineActor.

/// MachineActor → Provisioner, when the actor stops.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ActorStopped {
    pub machine: MachineId,
    /// Which actor of this machine stopped (a newer one may exist).
    pub serial: u64,
    pub state: Option<MachineState>,
}

/// Provisioner → MachineActor: this pending machine needs an instance.
/// The actor asks the ZoneTracker for a zone, then the ProviderBroker for
/// an instance there.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StartInstance;

/// ProviderBroker → MachineActor: the launch succeeded; the machine waits
/// for its agent.
#[derive(Message)]
#[rtype(result = "()")]
pub struct InstanceStarted(pub Instance);

/// ProviderBroker → MachineActor: the launch failed. By the error's class
/// the machine tries the next zone at once, retries after a backoff, is in
/// error, or (credentials refused) waits for the provider.
#[derive(Message)]
#[rtype(result = "()")]
pub struct InstanceFailed(pub ProviderError);

/// Administrator (`retry-provisioning`, through the API and the
/// Provisioner) → MachineActor: the machine, in provisioning error, was
/// made eligible again (the store has it pending, with any new
/// constraints); read it afresh and start it.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Retry;

/// Provisioner → MachineActor: the store changed this machine (someone
/// other than the engine did it: a user's remove, an agent's check-in).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Reconcile(pub EngineMachine);

/// Provisioner → MachineActor: the machine was removed from the store.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Gone;

/// Provisioner → MachineActor: the provider reported a change of one of
/// this machine's instances (a webhook, or a reconciliation found it
/// gone). It names the instance: the machine may have moved on to another
/// since the report was made.
#[derive(Message)]
#[rtype(result = "()")]
pub struct InstanceChanged {
    pub instance_id: String,
    pub state: InstanceState,
}

/// Provisioner → MachineActor and ContainerProvisioner: stop without
/// releasing anything (the provisioner is being rebuilt from the store).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Shutdown;

// To the ProviderBroker.

/// MachineActor → ProviderBroker: launch one instance (batched with others
/// ready at the same moment). The answer comes back as a message:
/// [`InstanceStarted`] or [`InstanceFailed`].
#[derive(Message)]
#[rtype(result = "()")]
pub struct Launch {
    pub request: LaunchRequest,
    pub started: Recipient<InstanceStarted>,
    pub failed: Recipient<InstanceFailed>,
}

/// MachineActor → ManualBroker: enlist an existing host over SSH. The
/// answer comes back as [`HostEnlisted`] or [`InstanceFailed`].
#[derive(Message)]
#[rtype(result = "()")]
pub struct Enlist {
    pub request: EnlistRequest,
    pub enlisted: Recipient<HostEnlisted>,
    pub failed: Recipient<InstanceFailed>,
}

/// ManualBroker → MachineActor: the host runs the machine's agent.
#[derive(Message)]
#[rtype(result = "()")]
pub struct HostEnlisted(pub Enlisted);

/// MachineActor → ManualBroker: stop and remove a machine's agent from its
/// host (never the host itself).
#[derive(Message)]
#[rtype(result = "Result<(), ProviderError>")]
pub struct Unenlist {
    pub machine: MachineId,
    pub target: SshTarget,
}

/// Engine → ZoneTracker: tell this recipient whenever the tracker is
/// restarted.
#[derive(Message)]
#[rtype(result = "()")]
pub struct WatchRestarts(pub Recipient<ZoneTrackerRestarted>);

/// ZoneTracker → Provisioner: the tracker restarted empty.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ZoneTrackerRestarted;

/// Terminate instances.
#[derive(Message)]
#[rtype(result = "Vec<Result<(), ProviderError>>")]
pub struct Terminate {
    pub instances: Vec<String>,
    /// The lease the call is made under: the machine's whose instance it
    /// is, or the reconciliation job's for strays. Not sent unless held.
    pub fence: Fence,
}

/// The controller's instances, as the provider lists them, with what a
/// reconciliation compares.
#[derive(Message)]
#[rtype(result = "Result<Vec<ListedInstance>, ProviderError>")]
pub struct ListInstances {
    pub controller_uuid: String,
}

/// The controller's instances that `ids` names, whole (those the provider
/// does not list are left out).
#[derive(Message)]
#[rtype(result = "Result<Vec<Instance>, ProviderError>")]
pub struct DescribeInstances {
    pub controller_uuid: String,
    pub ids: Vec<String>,
}

/// The provider's zones.
#[derive(Message)]
#[rtype(result = "Result<Vec<ProviderZone>, ProviderError>")]
pub struct ListZones;

// To the ZoneTracker.

/// Sent by the provisioner when the zones or their health change.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetZones(pub Vec<ZoneRecord>);

/// Asked by a machine actor: choose its zone from the store's census and
/// write the choice (the machine goes on to `starting`), or say why no
/// zone can take it.
#[derive(Message)]
#[rtype(result = "Result<ZoneChosen, StoreError>")]
pub struct ChooseZone {
    pub machine: MachineId,
    /// The machine as the actor holds it.
    pub current: Machine,
    /// The state the store holds it in, which the choice's write checks:
    /// `current`'s, or `pending` for a new machine the actor took to
    /// `allocating` without writing it (the choice writes both steps).
    pub stored: MachineState,
    pub occupant: Occupant,
    /// Whether the machine has a retry time stored, to clear.
    pub clear_retry_at: bool,
    /// Zones that refused this machine in this round.
    pub failed: BTreeSet<String>,
    pub zones_constraint: Setting<Vec<String>>,
    pub placement_zone: Option<String>,
}

// To the Provisioner.

/// A provider reported an instance's new state (webhook or notification).
#[derive(Message)]
#[rtype(result = "()")]
pub struct ProviderReport(pub InstanceStateChange);

/// Run a reconciliation with the provider now.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ReconcileNow;

/// How many machine actors are alive (for metrics and tests).
#[derive(Message)]
#[rtype(result = "usize")]
pub struct GetLiveActors;

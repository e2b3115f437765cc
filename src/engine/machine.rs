//! The MachineActor: one per machine that is not settled. It holds the
//! machine's lifecycle record, turns every message into an event of the
//! lifecycle table ([`crate::domain::machine`]), writes the resulting
//! machine to the store, and only then performs the effect.
//!
//! # Guarantees
//!
//! - Write before act: a launch happens only after the store says the
//!   machine is `starting` with a fresh one-time password's hash, so a
//!   restarted engine knows a launch may be in flight.
//! - One transition at a time: each store write holds the actor's mailbox
//!   (`ctx.wait`) until it is done.
//! - Nothing is overwritten: saves name the state they started from; if a
//!   user (remove, retry) or an agent moved the machine meanwhile, the actor
//!   reloads it and decides again from what is stored.
//! - A settled machine (started, down, in error) needs no actor: the actor
//!   stops and tells the provisioner.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;

use crate::domain::hardware::Hardware;
use crate::domain::instance_types::{select, Catalogue, Requirements};
use crate::domain::machine::{
    is_settled, transition, Effect, Event, FailureKind, Jitter, Machine, MachineState,
};
use crate::domain::names::MachineId;
use crate::domain::placement::Placement;
use crate::domain::zones::Occupant;
use crate::engine::broker::{Launch, Terminate};
use crate::engine::zone_tracker::{ChooseZone, Release};
use crate::engine::Shared;
use crate::providers::{
    tags, AgentBootstrap, FailureClass, Instance, InstanceState, LaunchRequest, ProviderError,
    Secret,
};
use crate::store::agents::{hash_secret, new_secret};
use crate::store::machines::{EngineMachine, MachineUpdate};
use crate::store::records::MachineRecord;
use crate::store::{now_ms, StoreError};

/// How long to wait before trying again after the store failed a write.
const STORE_RETRY: Duration = Duration::from_secs(1);
/// While the provider refuses our credentials, how often a parked machine
/// looks again.
const REFUSED_RETRY: Duration = Duration::from_secs(30);

/// Where a container goes: its host's instance and zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    pub instance_id: String,
    pub zone: String,
}

/// Told to the provisioner when a machine actor stops.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ActorStopped {
    pub machine: MachineId,
    /// Which actor of this machine stopped (a newer one may exist).
    pub serial: u64,
    pub state: Option<MachineState>,
}

/// The store changed this machine (someone other than the engine did it).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Reconcile(pub EngineMachine);

/// The machine was removed from the store.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Gone;

/// The provider reported a change of this machine's instance.
#[derive(Message)]
#[rtype(result = "()")]
pub struct InstanceChanged(pub InstanceState);

/// A timer of the lifecycle fired.
#[derive(Message)]
#[rtype(result = "()")]
struct Timer(Event);

pub struct MachineActor {
    id: MachineId,
    record: MachineRecord,
    applications: BTreeSet<String>,
    machine: Machine,
    shared: Arc<Shared>,
    provisioner: Recipient<ActorStopped>,
    host: Option<Host>,
    /// The pending bootstrap or retry timer, cancelled when the machine
    /// moves on.
    timer: Option<SpawnHandle>,
    /// An instance the provider already has for this machine (a launch in
    /// flight when the engine stopped): taken over instead of launching
    /// another.
    adopt: Option<Instance>,
    /// Tells this actor apart from later actors of the same machine.
    serial: u64,
    /// Whether the store holds a retry time for this machine, so that a
    /// save clears it only when there is one to clear (and a settled
    /// machine is not written again for nothing).
    retry_at_stored: bool,
    /// The provider said this machine's instance went while the actor was
    /// busy (its agent may have checked in meanwhile): if the machine turns
    /// out started, it is shown down before the actor stops.
    lost: Option<InstanceState>,
}

impl MachineActor {
    pub fn new(
        machine: EngineMachine,
        shared: Arc<Shared>,
        provisioner: Recipient<ActorStopped>,
        host: Option<Host>,
    ) -> MachineActor {
        MachineActor {
            id: machine.record.id,
            retry_at_stored: machine.record.retry_at_ms.is_some(),
            lost: None,
            machine: machine.record.machine.clone(),
            record: machine.record,
            applications: machine.applications,
            shared,
            provisioner,
            host,
            timer: None,
            adopt: None,
            serial: 0,
        }
    }

    /// Numbers this actor, so that its provisioner can tell it from a later
    /// actor of the same machine.
    pub fn numbered(mut self, serial: u64) -> MachineActor {
        self.serial = serial;
        self
    }

    /// Takes over `instance`, launched for this machine before a restart.
    pub fn adopting(mut self, instance: Instance) -> MachineActor {
        self.adopt = Some(instance);
        self
    }

    fn occupant(&self) -> Occupant {
        Occupant::new(self.record.role, self.applications.iter().cloned())
    }

    fn jitter() -> Jitter {
        Jitter::new(rand::random::<f64>() * 0.999).unwrap_or(Jitter::NONE)
    }

    fn cancel_timer(&mut self, ctx: &mut Context<Self>) {
        if let Some(timer) = self.timer.take() {
            ctx.cancel_future(timer);
        }
    }

    /// Applies one event: decide, write, then act.
    fn step(
        &mut self,
        event: Event,
        extra: MachineUpdate,
        error: Option<String>,
        ctx: &mut Context<Self>,
    ) {
        let Ok(step) = transition(&self.machine, &event, &self.shared.policy, Self::jitter())
        else {
            log::debug!(
                "machine {}: {:?} does not apply in state {}",
                self.id,
                event,
                self.machine.state
            );
            self.settle_if_done(ctx);
            return;
        };
        let mut next = step.next;
        if let (Some(message), None) = (error, &next.lifecycle.last_error) {
            next.lifecycle.last_error = Some(message);
        }
        let effect = step.effect;
        let mut update = extra;
        let mut password = None;
        match &effect {
            Effect::LaunchInstance { .. } => {
                let secret = new_secret();
                update.otp_hash = Some(hash_secret(secret.expose()));
                password = Some(secret);
            }
            Effect::ScheduleRetry { after } => {
                let after_ms = i64::try_from(after.as_millis()).unwrap_or(i64::MAX);
                update.retry_at_ms = Some(now_ms().saturating_add(after_ms));
            }
            _ => {
                update.clear_retry_at =
                    next.state != MachineState::Retrying && self.retry_at_stored;
            }
        }
        if next.state != self.machine.state || next.lifecycle != self.machine.lifecycle {
            self.cancel_timer(ctx);
        }
        if next.state == MachineState::Dead {
            // Dead is never stored: the machine goes from the store instead.
            self.machine = next;
            self.perform(effect, None, ctx);
            return;
        }
        if next == self.machine && update == MachineUpdate::default() {
            self.perform(effect, password, ctx);
            return;
        }
        let (retry_at_saved, retry_at_cleared) =
            (update.retry_at_ms.is_some(), update.clear_retry_at);
        let store = self.shared.store.clone();
        let (id, expected, saved) = (self.id, self.machine.state, next.clone());
        ctx.wait(
            async move { store.save_machine(id, expected, saved, update).await }
                .into_actor(self)
                .map(move |result, actor, ctx| match result {
                    Ok(()) => {
                        actor.machine = next;
                        if retry_at_saved {
                            actor.retry_at_stored = true;
                        } else if retry_at_cleared {
                            actor.retry_at_stored = false;
                        }
                        actor.perform(effect, password, ctx);
                    }
                    Err(StoreError::Conflict(_)) => actor.reload_then(Some(event), ctx),
                    Err(StoreError::NotFound(_)) => actor.gone(ctx),
                    Err(e) => {
                        log::error!(
                            "machine {}: cannot save {}: {e}; trying again",
                            actor.id,
                            expected
                        );
                        ctx.run_later(STORE_RETRY, move |actor, ctx| {
                            actor.step(event, MachineUpdate::default(), None, ctx)
                        });
                    }
                }),
        );
    }

    /// Reads the machine again (someone else changed it) and, if given,
    /// applies `event` to what is stored.
    fn reload_then(&mut self, event: Option<Event>, ctx: &mut Context<Self>) {
        let store = self.shared.store.clone();
        let id = self.id;
        ctx.wait(
            async move {
                store
                    .blocking(move |s| s.engine_machines(Some(&[id])))
                    .await
            }
            .into_actor(self)
            .map(move |result, actor, ctx| match result {
                Ok(mut found) if !found.is_empty() => {
                    let fresh = found.remove(0);
                    actor.adopt(fresh, ctx);
                    actor.step(
                        event.unwrap_or(Event::Resume),
                        MachineUpdate::default(),
                        None,
                        ctx,
                    );
                }
                Ok(_) => actor.gone(ctx),
                Err(e) => {
                    log::error!("machine {}: cannot reload: {e}; trying again", actor.id);
                    ctx.run_later(STORE_RETRY, move |actor, ctx| actor.reload_then(event, ctx));
                }
            }),
        );
    }

    fn adopt(&mut self, fresh: EngineMachine, ctx: &mut Context<Self>) {
        self.cancel_timer(ctx);
        self.retry_at_stored = fresh.record.retry_at_ms.is_some();
        self.machine = fresh.record.machine.clone();
        self.record = fresh.record;
        self.applications = fresh.applications;
    }

    /// The machine left the store: release its zone and stop.
    fn gone(&mut self, ctx: &mut Context<Self>) {
        self.shared.zones.do_send(Release { machine: self.id });
        ctx.stop();
    }

    fn settle_if_done(&mut self, ctx: &mut Context<Self>) {
        if self.machine.state == MachineState::Started {
            if let Some(state) = self.lost.take() {
                let message = lost_instance_message(
                    self.machine.lifecycle.instance_id.as_deref().unwrap_or("?"),
                    state,
                );
                self.step(
                    Event::AgentLost,
                    MachineUpdate::default(),
                    Some(message),
                    ctx,
                );
                return;
            }
        }
        if is_settled(self.machine.state) && self.timer.is_none() {
            ctx.stop();
        }
    }

    fn perform(&mut self, effect: Effect, password: Option<Secret>, ctx: &mut Context<Self>) {
        match effect {
            Effect::None | Effect::ReplaceConstraints(_) => self.settle_if_done(ctx),
            Effect::ChooseZone { exclude } => self.choose_zone(exclude, ctx),
            Effect::LaunchInstance { zone } => match password {
                Some(password) => self.launch(zone, password, ctx),
                None => log::error!(
                    "machine {}: a launch without a password was asked for",
                    self.id
                ),
            },
            Effect::WatchBootstrap { after } => {
                self.timer = Some(ctx.notify_later(Timer(Event::BootstrapTimedOut), after));
            }
            Effect::ScheduleRetry { after } => {
                self.timer = Some(ctx.notify_later(Timer(Event::RetryDue), after));
            }
            Effect::TerminateInstance { instance_id } => self.terminate(instance_id, ctx),
            Effect::RemoveFromState => {
                let store = self.shared.store.clone();
                let id = self.id;
                ctx.wait(
                    async move { store.delete_machine(id).await }
                        .into_actor(self)
                        .map(|result, actor, ctx| match result {
                            Ok(()) => actor.gone(ctx),
                            Err(e) => {
                                log::error!(
                                    "machine {}: cannot remove: {e}; trying again",
                                    actor.id
                                );
                                ctx.run_later(STORE_RETRY, |actor, ctx| {
                                    actor.perform(Effect::RemoveFromState, None, ctx)
                                });
                            }
                        }),
                );
            }
        }
    }

    fn choose_zone(&mut self, exclude: Vec<String>, ctx: &mut Context<Self>) {
        if let Some(host) = &self.host {
            // A container lives in its host's zone.
            let zone = host.zone.clone();
            self.step(
                Event::ZoneChosen { zone },
                MachineUpdate::default(),
                None,
                ctx,
            );
            return;
        }
        let request = ChooseZone {
            machine: self.id,
            occupant: self.occupant(),
            failed: exclude.into_iter().collect(),
            zones_constraint: self.record.constraints.zones.clone(),
            placement_zone: self
                .record
                .placement
                .as_ref()
                .and_then(Placement::zone)
                .map(str::to_string),
        };
        ctx.wait(
            self.shared.zones.send(request).into_actor(self).map(
                |answer, actor, ctx| match answer {
                    Ok(Ok(zone)) => actor.step(
                        Event::ZoneChosen { zone },
                        MachineUpdate::default(),
                        None,
                        ctx,
                    ),
                    Ok(Err(why)) => actor.step(
                        Event::NoZoneAvailable,
                        MachineUpdate::default(),
                        Some(why),
                        ctx,
                    ),
                    Err(e) => {
                        log::error!("machine {}: the zone tracker did not answer: {e}", actor.id);
                        ctx.run_later(STORE_RETRY, |actor, ctx| {
                            actor.step(Event::Resume, MachineUpdate::default(), None, ctx)
                        });
                    }
                },
            ),
        );
    }

    fn launch_request(&self, zone: &str, password: Secret) -> Result<LaunchRequest, ProviderError> {
        let requirements = Requirements::resolve(&self.record.constraints, self.record.role);
        let provider = &self.shared.provider;
        let catalogue = provider.catalogue();
        let mut chosen = select(&requirements, catalogue)
            .map_err(|e| ProviderError::new(FailureClass::Permanent, e.to_string()))?;
        if !provider.offers(zone, &chosen.name) {
            // The cheapest fit is not offered here (or is out of capacity
            // for now): take the cheapest fit this zone offers, so that the
            // machine keeps its place in the zone spread.
            let offered = Catalogue::new(
                catalogue
                    .types()
                    .iter()
                    .filter(|t| provider.offers(zone, &t.name))
                    .cloned()
                    .collect(),
            )
            .map_err(|e| ProviderError::new(FailureClass::Permanent, e.to_string()))?;
            let here = select(&requirements, &offered).map_err(|_| {
                ProviderError::new(
                    FailureClass::ZoneSpecific,
                    format!(
                        "instance type {} is not offered in zone {zone}, nor is any other \
                         that satisfies the constraints",
                        chosen.name
                    ),
                )
            })?;
            chosen = catalogue.get(&here.name).ok_or_else(|| {
                ProviderError::new(
                    FailureClass::Permanent,
                    format!("instance type {} left the catalogue", here.name),
                )
            })?;
        }
        let life = &self.machine.lifecycle;
        let mut instance_tags = std::collections::BTreeMap::new();
        instance_tags.insert(
            tags::CONTROLLER.to_string(),
            self.shared.controller_uuid.clone(),
        );
        instance_tags.insert(tags::MODEL.to_string(), self.shared.model_uuid.clone());
        instance_tags.insert(tags::MACHINE.to_string(), self.id.to_string());
        instance_tags.insert(
            tags::NAME.to_string(),
            format!("berth-{}-machine-{}", self.shared.model_name, self.id),
        );
        Ok(LaunchRequest {
            machine: self.id,
            zone: zone.to_string(),
            instance_type: chosen.name.clone(),
            base: self.record.base,
            requirements,
            agent: AgentBootstrap {
                controller_url: self.shared.controller_url.clone(),
                one_time_password: password,
            },
            client_token: format!(
                "{}-{}-{}-{}-{}",
                self.shared.controller_uuid,
                self.id,
                life.attempts_used,
                life.bootstrap_timeouts,
                zone
            ),
            tags: instance_tags,
            host_instance: self.host.as_ref().map(|h| h.instance_id.clone()),
        })
    }

    fn launch(&mut self, zone: String, password: Secret, ctx: &mut Context<Self>) {
        self.shared.metrics.provisioning_attempt();
        let request = match self.launch_request(&zone, password) {
            Ok(request) => request,
            Err(e) => return self.launch_failed(e, ctx),
        };
        let root_disk = request.requirements.root_disk_mib;
        let broker = self.shared.broker.clone();
        ctx.wait(
            async move { broker.send(Launch(request)).await }
                .into_actor(self)
                .map(move |answer, actor, ctx| match answer {
                    Ok(Ok(instance)) => actor.launched(instance, root_disk, ctx),
                    Ok(Err(e)) => actor.launch_failed(e, ctx),
                    Err(e) => actor.launch_failed(
                        ProviderError::new(
                            FailureClass::Transient,
                            format!("the provider broker did not answer: {e}"),
                        ),
                        ctx,
                    ),
                }),
        );
    }

    fn launched(&mut self, instance: Instance, root_disk: Option<u64>, ctx: &mut Context<Self>) {
        self.lost = None;
        let hardware = match self
            .shared
            .provider
            .catalogue()
            .get(&instance.instance_type)
        {
            Some(t) => Hardware::of(t, &instance.zone, root_disk),
            None => instance.hardware.clone(),
        };
        let update = MachineUpdate {
            instance_type: Some(instance.instance_type.clone()),
            hardware: Some(hardware.to_string()),
            ..MachineUpdate::default()
        };
        self.step(
            Event::InstanceStarted {
                instance_id: instance.id,
            },
            update,
            None,
            ctx,
        );
    }

    fn launch_failed(&mut self, error: ProviderError, ctx: &mut Context<Self>) {
        self.shared.metrics.provisioning_error();
        self.shared.zones.do_send(Release { machine: self.id });
        let kind = match error.class {
            FailureClass::ZoneSpecific => FailureKind::ZoneSpecific,
            FailureClass::Transient => FailureKind::Transient,
            FailureClass::Permanent => FailureKind::Permanent,
            FailureClass::Unauthorized => {
                // Not the machine's fault: keep its attempts, show why it
                // waits, and look again later.
                self.park(error.message, ctx);
                return;
            }
        };
        log::info!(
            "machine {}: launch failed ({kind:?}): {}",
            self.id,
            error.message
        );
        self.step(
            Event::InstanceFailed {
                kind,
                message: error.message,
            },
            MachineUpdate::default(),
            None,
            ctx,
        );
    }

    /// Leaves the machine where it is with `message` shown, and resumes
    /// later.
    fn park(&mut self, message: String, ctx: &mut Context<Self>) {
        let mut parked = self.machine.clone();
        parked.lifecycle.last_error = Some(format!("waiting for the provider: {message}"));
        let store = self.shared.store.clone();
        let (id, expected) = (self.id, self.machine.state);
        ctx.wait(
            async move {
                store
                    .save_machine(id, expected, parked, MachineUpdate::default())
                    .await
            }
            .into_actor(self)
            .map(|_, _, _| ()),
        );
        self.timer = Some(ctx.notify_later(Timer(Event::Resume), REFUSED_RETRY));
    }

    fn terminate(&mut self, instance_id: String, ctx: &mut Context<Self>) {
        if !self.shared.harvest.harvests_destroyed() && self.machine.state == MachineState::Stopping
        {
            // The operator stops instances in this harvest mode.
            log::info!(
                "machine {}: leaving instance {instance_id} running (harvest mode)",
                self.id
            );
            self.step(Event::InstanceStopped, MachineUpdate::default(), None, ctx);
            return;
        }
        let broker = self.shared.broker.clone();
        ctx.wait(
            async move { broker.send(Terminate(vec![instance_id])).await }
                .into_actor(self)
                .map(|answer, actor, ctx| {
                    let result = match answer {
                        Ok(mut results) => results.pop().unwrap_or(Ok(())),
                        Err(e) => Err(ProviderError::new(FailureClass::Transient, e.to_string())),
                    };
                    match result {
                        Ok(()) => {
                            actor.shared.zones.do_send(Release { machine: actor.id });
                            actor.step(Event::InstanceStopped, MachineUpdate::default(), None, ctx);
                        }
                        Err(e) => actor.step(
                            Event::StopFailed { message: e.message },
                            MachineUpdate::default(),
                            None,
                            ctx,
                        ),
                    }
                }),
        );
    }
}

impl Actor for MachineActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if let Some(instance) = self.adopt.take() {
            log::info!(
                "machine {}: adopting instance {} found at the provider",
                self.id,
                instance.id
            );
            let root_disk = self
                .record
                .constraints
                .root_disk
                .value()
                .and_then(|a| match a {
                    crate::domain::constraints::Amount::AtLeast(n) if *n > 0 => Some(*n),
                    _ => None,
                });
            self.launched(instance, root_disk, ctx);
            return;
        }
        let first = if self.machine.state == MachineState::Pending {
            Event::StartInstance
        } else {
            Event::Resume
        };
        self.step(first, MachineUpdate::default(), None, ctx);
    }

    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        self.provisioner.do_send(ActorStopped {
            machine: self.id,
            serial: self.serial,
            state: Some(self.machine.state),
        });
    }
}

impl Handler<Timer> for MachineActor {
    type Result = ();

    fn handle(&mut self, msg: Timer, ctx: &mut Context<Self>) {
        self.timer = None;
        self.step(msg.0, MachineUpdate::default(), None, ctx);
    }
}

impl Handler<Reconcile> for MachineActor {
    type Result = ();

    fn handle(&mut self, msg: Reconcile, ctx: &mut Context<Self>) {
        if msg.0.record.machine == self.machine
            && msg.0.record.constraints == self.record.constraints
        {
            return;
        }
        self.adopt(msg.0, ctx);
        self.step(Event::Resume, MachineUpdate::default(), None, ctx);
    }
}

impl Handler<Gone> for MachineActor {
    type Result = ();

    fn handle(&mut self, _msg: Gone, ctx: &mut Context<Self>) {
        self.gone(ctx);
    }
}

impl Handler<InstanceChanged> for MachineActor {
    type Result = ();

    fn handle(&mut self, msg: InstanceChanged, ctx: &mut Context<Self>) {
        if !msg.0.is_gone() {
            return;
        }
        match self.machine.state {
            MachineState::Stopping | MachineState::Relaunching => {
                self.step(Event::InstanceStopped, MachineUpdate::default(), None, ctx)
            }
            MachineState::AwaitingAgent => {
                // The instance went before its agent checked in: no need to
                // wait out the bootstrap timeout. (If the agent did check in
                // meanwhile, the save conflicts and the machine is started:
                // then `lost` shows it down.)
                self.lost = Some(msg.0);
                let message = format!(
                    "instance {} was {} before its agent checked in",
                    self.machine.lifecycle.instance_id.as_deref().unwrap_or("?"),
                    msg.0.as_str()
                );
                self.step(
                    Event::BootstrapTimedOut,
                    MachineUpdate::default(),
                    Some(message),
                    ctx,
                )
            }
            MachineState::Started => {
                self.lost = Some(msg.0);
                self.settle_if_done(ctx);
            }
            _ => {}
        }
    }
}

/// What status says of a machine whose instance the provider stopped or
/// terminated behind berth's back.
pub fn lost_instance_message(instance_id: &str, state: InstanceState) -> String {
    let what = if state.is_gone() {
        "terminated"
    } else {
        "stopped"
    };
    format!("instance {instance_id} was {what} by the provider")
}

/// Whether a stored machine needs an actor: anything not settled, and a
/// machine being removed.
pub fn needs_actor(record: &MachineRecord) -> bool {
    !is_settled(record.state())
}

//! The MachineActor: one per machine that is not settled. It holds the
//! machine's lifecycle record and turns every message into an event of the
//! lifecycle table ([`crate::domain::machine`]), which the store's one
//! writer ([`crate::store::lifecycle`]) applies and writes; only then does
//! the actor perform the effect.
//!
//! # Guarantees
//!
//! - Write before act: a launch happens only after the store says the
//!   machine is `starting` with a fresh one-time password's hash, so a
//!   restarted engine knows a launch may be in flight.
//! - One transition at a time: each store write holds the actor's mailbox
//!   (`ctx.wait`) until it is done. A launch does not: its answer comes
//!   back as [`InstanceStarted`] or [`InstanceFailed`]; a change made by
//!   someone else meanwhile makes the answer's write conflict, and the
//!   answer is applied to the machine as stored.
//! - Nothing is overwritten: saves name the state they started from; if a
//!   user (remove, retry) or an agent moved the machine meanwhile, the actor
//!   reloads it and decides again from what is stored.
//! - One step is written with the next: a pending machine told to start
//!   goes to `allocating` in the actor only, and the zone choice that
//!   follows writes it from `pending` to `starting` (or, with no zone, to
//!   its retry or error) in one save. Nothing outside the store is touched
//!   in between, so an engine that stops there finds the machine pending
//!   and starts it again; every deploy's machine is saved once less.
//! - A settled machine (started, down, in error) needs no actor: the actor
//!   stops and tells the provisioner.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;

use crate::contracts::provider::{
    tags, AgentBootstrap, FailureClass, LaunchRequest, ProviderError,
};
use crate::contracts::secrets::Secret;
use crate::domain::explain::{explain, Explanation, Question, ZoneFacts};
use crate::domain::hardware::Hardware;
use crate::domain::instance::{is_manual_instance, Instance, InstanceState, MANUAL_ZONE};
use crate::domain::instance_types::{select_for_zone, Requirements, ZoneSelectError};
use crate::domain::machine::{
    accepting_states, is_settled, Effect, Event, FailureKind, Machine, MachineState,
};
use crate::domain::names::MachineId;
use crate::domain::placement::{Placement, SshTarget};
use crate::domain::zones::Occupant;
use crate::engine::leases::Fence;
use crate::engine::protocol::{
    ActorStopped, ChooseZone, Enlist, Gone, HostEnlisted, InstanceChanged, InstanceFailed,
    InstanceStarted, Launch, Reconcile, Retry, Shutdown, StartInstance, Terminate, Unenlist,
};
use crate::engine::shared::Shared;
use crate::engine::supervision::{hooks, kinds};
use crate::providers::manual::{EnlistRequest, Enlisted};
use crate::store::census::ZoneChosen;
use crate::store::lifecycle::{Applied, MachineEvent, MachineUpdate};
use crate::store::machines::EngineMachine;
use crate::store::records::MachineRecord;
use crate::store::StoreError;

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

/// MachineActor → itself: a timer of the lifecycle fired. `serial` tells
/// a timer that was cancelled after it fired from the one that is due.
#[derive(Message)]
#[rtype(result = "()")]
struct Timer {
    event: Event,
    serial: u64,
}

/// What the actor remembers of a launch in flight.
struct Launching {
    /// The root disk asked for, to describe the instance's hardware.
    root_disk: Option<u64>,
}

pub struct MachineActor {
    id: MachineId,
    record: MachineRecord,
    applications: BTreeSet<String>,
    machine: Machine,
    shared: Arc<Shared>,
    provisioner: Recipient<ActorStopped>,
    host: Option<Host>,
    /// The pending bootstrap or retry timer and its serial, cancelled
    /// when the machine moves on.
    timer: Option<(SpawnHandle, u64)>,
    timer_serial: u64,
    /// A launch is in flight: its answer is awaited as a message.
    launching: Option<Launching>,

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
    /// It panicked and was restarted: it reads its machine afresh and
    /// carries on from what is stored.
    restarted: bool,
    /// The state the store holds the machine in while `machine` is a step
    /// ahead of it: a new machine told to start is taken to `allocating`
    /// here only, and its zone choice writes both steps (one save fewer
    /// for every machine a deploy starts). `None` when the two agree.
    stored_behind: Option<MachineState>,
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
            timer_serial: 0,
            launching: None,
            adopt: None,
            serial: 0,
            restarted: false,
            stored_behind: None,
        }
    }

    /// Numbers this actor, so that its provisioner can tell it from a later
    /// actor of the same machine.
    pub fn numbered(mut self, serial: u64) -> MachineActor {
        self.serial = serial;
        self
    }

    /// Whether the machine waits for [`StartInstance`].
    pub fn is_pending(&self) -> bool {
        self.machine.state == MachineState::Pending && self.adopt.is_none()
    }

    /// Takes over `instance`, launched for this machine before a restart.
    pub fn adopting(mut self, instance: Instance) -> MachineActor {
        self.adopt = Some(instance);
        self
    }

    fn occupant(&self) -> Occupant {
        Occupant::new(self.record.role, self.applications.iter().cloned())
    }

    fn cancel_timer(&mut self, ctx: &mut Context<Self>) {
        if let Some((timer, _)) = self.timer.take() {
            ctx.cancel_future(timer);
        }
    }

    fn set_timer(&mut self, event: Event, after: Duration, ctx: &mut Context<Self>) {
        self.cancel_timer(ctx);
        self.timer_serial += 1;
        let serial = self.timer_serial;
        let handle = ctx.notify_later(Timer { event, serial }, after);
        self.timer = Some((handle, serial));
    }

    /// Applies one event: the store's writer decides and, if anything
    /// changes, writes; then the actor acts.
    fn step(
        &mut self,
        event: Event,
        extra: MachineUpdate,
        message: Option<String>,
        ctx: &mut Context<Self>,
    ) {
        // What the step records beside the state (an instance's type,
        // price, hardware and addresses; an enlisted host's base; the
        // status message), for a save tried again after a store error.
        let again = (extra.clone(), message.clone());
        let request = MachineEvent {
            id: self.id,
            event: event.clone(),
            message,
            update: MachineUpdate {
                // Kept by the writer while the machine is retrying.
                clear_retry_at: self.retry_at_stored,
                ..extra
            },
        };
        let decided = match self.shared.store.decide(&self.machine, request) {
            Ok(decided) => decided,
            Err(why) => {
                log::debug!("machine {}: {why}", self.id);
                self.settle_if_done(ctx);
                return;
            }
        };
        if !decided.needs_write() {
            self.applied(decided.into_applied(), ctx);
            return;
        }
        if self.writes_with_zone(&event) {
            self.stored_behind = Some(self.machine.state);
            self.applied(decided.into_applied(), ctx);
            return;
        }
        let decided = decided.stored_as(self.stored_state());
        let store = self.shared.store.clone();
        ctx.wait(
            async move { store.commit(decided).await }
                .into_actor(self)
                .map(move |result, actor, ctx| match result {
                    Ok(applied) => {
                        actor.stored_behind = None;
                        actor.applied(applied, ctx)
                    }
                    Err(StoreError::Conflict(_)) => actor.reload_then(Some(event), ctx),
                    Err(StoreError::NotFound(_)) => actor.gone(ctx),
                    Err(e) => {
                        log::error!(
                            "machine {}: cannot save {}: {e}; trying again",
                            actor.id,
                            actor.machine.state
                        );
                        let (extra, message) = again;
                        ctx.run_later(STORE_RETRY, move |actor, ctx| {
                            actor.step(event, extra, message, ctx)
                        });
                    }
                }),
        );
    }

    /// The state the store holds the machine in: a step behind `machine`
    /// while a new machine's start waits to be written with its zone.
    fn stored_state(&self) -> MachineState {
        self.stored_behind.unwrap_or(self.machine.state)
    }

    /// Whether `event` takes the machine to `allocating` and is left to be
    /// written with the zone choice that follows at once: a pending
    /// machine told to start, with no retry time stored (which the step
    /// would clear). Whatever comes next (a zone, none, a panic and a
    /// read of the store) starts from the stored `pending` just as well.
    fn writes_with_zone(&self, event: &Event) -> bool {
        matches!(event, Event::StartInstance)
            && self.machine.state == MachineState::Pending
            && self.stored_behind.is_none()
            && !self.retry_at_stored
    }

    /// The store wrote (or had nothing to write for) an event: take the
    /// machine it left, then act.
    fn applied(&mut self, applied: Applied, ctx: &mut Context<Self>) {
        if applied.next != self.machine {
            self.cancel_timer(ctx);
        }
        self.retry_at_stored = match applied.effect {
            Effect::ScheduleRetry { .. } => true,
            _ => applied.next.state == MachineState::Retrying && self.retry_at_stored,
        };
        self.machine = applied.next;
        self.perform(applied.effect, applied.password, ctx);
    }

    /// Reads the machine afresh from the store and hands it to `then`; a
    /// machine no longer stored is gone, and a failed read is tried again.
    fn read_again<F>(&mut self, then: F, ctx: &mut Context<Self>)
    where
        F: FnOnce(&mut Self, EngineMachine, &mut Context<Self>) + Clone + 'static,
    {
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
                Ok(found)
                    if found
                        .first()
                        .is_some_and(|m| !actor.shared.holds(&m.record)) =>
                {
                    actor.lease_lost(ctx)
                }
                Ok(mut found) if !found.is_empty() => then(actor, found.remove(0), ctx),
                Ok(_) => actor.gone(ctx),
                Err(e) => {
                    log::error!("machine {}: cannot read it: {e}; trying again", actor.id);
                    ctx.run_later(STORE_RETRY, move |actor, ctx| actor.read_again(then, ctx));
                }
            }),
        );
    }

    /// Reads the machine again (someone else changed it) and applies
    /// `event`, or [`Event::Resume`], to what is stored.
    fn reload_then(&mut self, event: Option<Event>, ctx: &mut Context<Self>) {
        self.read_again(
            move |actor, fresh, ctx| {
                actor.adopt(fresh, ctx);
                // An event the stored state no longer takes (a zone chosen
                // for a machine that another life of this actor has since
                // sent to retry, say) is dropped, and the machine carries
                // on from where it is: dropped alone, it would leave the
                // machine waiting with no timer.
                let event = event
                    .filter(|e| accepting_states(e.kind()).contains(&actor.machine.state))
                    .unwrap_or(Event::Resume);
                actor.step(event, MachineUpdate::default(), None, ctx);
            },
            ctx,
        );
    }

    fn adopt(&mut self, fresh: EngineMachine, ctx: &mut Context<Self>) {
        self.cancel_timer(ctx);
        self.stored_behind = None;
        self.retry_at_stored = fresh.record.retry_at_ms.is_some();
        self.machine = fresh.record.machine.clone();
        self.record = fresh.record;
        self.applications = fresh.applications;
    }

    /// This controller no longer holds the machine's lease (it ran out,
    /// and another controller may be working on it): stop without acting.
    fn lease_lost(&mut self, ctx: &mut Context<Self>) {
        log::warn!(
            "machine {}: this controller no longer holds its lease; leaving it to the controller that does",
            self.id
        );
        ctx.stop();
    }

    /// The machine left the store: release its zone and stop.
    fn gone(&mut self, ctx: &mut Context<Self>) {
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
                self.set_timer(Event::BootstrapTimedOut, after, ctx);
            }
            Effect::ScheduleRetry { after } => self.set_timer(Event::RetryDue, after, ctx),
            Effect::TerminateInstance { instance_id } => self.terminate(instance_id, ctx),
            // The writer removed the machine in the same transaction.
            Effect::RemoveFromState => self.gone(ctx),
        }
    }

    /// The existing host this machine is, when it was placed with `ssh:`.
    fn manual_target(&self) -> Option<SshTarget> {
        match &self.record.placement {
            Some(Placement::Ssh(target)) => Some(target.clone()),
            _ => None,
        }
    }

    fn choose_zone(&mut self, exclude: Vec<String>, ctx: &mut Context<Self>) {
        if self.manual_target().is_some() {
            // An existing host is in no cloud zone.
            self.step(
                Event::ZoneChosen {
                    zone: MANUAL_ZONE.to_string(),
                },
                MachineUpdate::default(),
                None,
                ctx,
            );
            return;
        }
        if self.id.is_container() {
            // A container lives in its host's zone, and nowhere else.
            let event = match &self.host {
                Some(host) if exclude.contains(&host.zone) => Event::NoZoneAvailable {
                    reason: self.host_zone_refused(&host.zone),
                    permanent: true,
                },
                Some(host) => Event::ZoneChosen {
                    zone: host.zone.clone(),
                },
                // Let go without its host only to be removed: never
                // launched as a machine of its own.
                None => Event::NoZoneAvailable {
                    reason: format!("machine {}: its host is not started", self.id),
                    permanent: true,
                },
            };
            self.step(event, MachineUpdate::default(), None, ctx);
            return;
        }
        let request = ChooseZone {
            machine: self.id,
            current: self.machine.clone(),
            stored: self.stored_state(),
            occupant: self.occupant(),
            clear_retry_at: self.retry_at_stored,
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
                    // Written and counted: the machine is starting.
                    Ok(Ok(ZoneChosen::Chosen(applied))) => {
                        actor.stored_behind = None;
                        actor.applied(applied, ctx)
                    }
                    Ok(Ok(ZoneChosen::NoZone { reason, permanent })) => actor.step(
                        Event::NoZoneAvailable { reason, permanent },
                        MachineUpdate::default(),
                        None,
                        ctx,
                    ),
                    Ok(Err(StoreError::Conflict(_))) => actor.reload_then(None, ctx),
                    Ok(Err(StoreError::NotFound(_))) => actor.gone(ctx),
                    Ok(Err(e)) => actor.resume_later(&format!("cannot choose its zone: {e}"), ctx),
                    Err(e) => {
                        actor.resume_later(&format!("the zone tracker did not answer: {e}"), ctx)
                    }
                },
            ),
        );
    }

    /// Why a container cannot be launched once its host's `zone` refused
    /// it: no other zone can take it.
    fn host_zone_refused(&self, zone: &str) -> String {
        let life = &self.machine.lifecycle;
        let cause = life
            .zones_failed
            .iter()
            .find(|r| r.zone == zone && !r.reason.is_empty())
            .map(|r| r.reason.as_str())
            .or(life.last_error.as_deref())
            .unwrap_or("refused");
        format!(
            "machine {}: its host's zone {zone} cannot take it: {cause}",
            self.id
        )
    }

    /// Something failed on the way (`why`): the machine carries on from
    /// where it is after [`STORE_RETRY`].
    fn resume_later(&mut self, why: &str, ctx: &mut Context<Self>) {
        log::error!("machine {}: {why}; trying again", self.id);
        ctx.run_later(STORE_RETRY, |actor, ctx| {
            actor.step(Event::Resume, MachineUpdate::default(), None, ctx)
        });
    }

    /// The explanation of where `requirements` fit, zones aside: which
    /// constraint ruled out the last types, and the nearest fits.
    fn explained(&self, requirements: &Requirements) -> Explanation {
        explain(&Question {
            requirements,
            catalogue: self.shared.provider.catalogue(),
            price_ceiling: Some(self.shared.price_ceiling),
            zones: ZoneFacts {
                zones: &[],
                offers: &|_, _| true,
                refusals: &[],
                placement: None,
            },
        })
    }

    fn launch_request(&self, zone: &str, password: Secret) -> Result<LaunchRequest, ProviderError> {
        let requirements = Requirements::resolve(&self.record.constraints, self.record.role);
        let provider = &self.shared.provider;
        let chosen = select_for_zone(&requirements, provider.catalogue(), zone, |t| {
            provider.offers(zone, t)
        })
        .map_err(|e| match e {
            ZoneSelectError::NoFit(_) => ProviderError::new(
                FailureClass::Permanent,
                format!("{e}: {}", self.explained(&requirements).summary()),
            ),
            ZoneSelectError::NotOffered { .. } => {
                ProviderError::new(FailureClass::ZoneSpecific, e.to_string())
            }
        })?;
        let ceiling = self.shared.price_ceiling;
        if self.host.is_none() && chosen.price > ceiling {
            let nearest = self
                .explained(&requirements)
                .nearest_fits
                .first()
                .map(|fit| format!(" (instead of {}: {fit})", fit.instead_of))
                .unwrap_or_default();
            return Err(ProviderError::new(
                FailureClass::Permanent,
                format!(
                    "instance type {} costs ${}/hour, above the ceiling of ${ceiling}/hour \
                     ([provisioner] max_hourly_price): relax the constraints or raise \
                     max_hourly_price{nearest}",
                    chosen.name, chosen.price,
                ),
            ));
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
                controller_url: self.shared.controller.url.clone(),
                ca_cert: self.shared.controller.ca_cert.clone(),
                one_time_password: password,
            },
            client_token: life.client_token(&self.shared.controller_uuid, self.id, zone),
            tags: instance_tags,
            host_instance: self.host.as_ref().map(|h| h.instance_id.clone()),
        })
    }

    fn launch(&mut self, zone: String, password: Secret, ctx: &mut Context<Self>) {
        if !self.shared.leases.trusts_machine(self.id) {
            // Paused or cut off past the lease: another controller may
            // be launching this machine already.
            return self.lease_lost(ctx);
        }
        self.shared.metrics.provisioning_attempt();
        if let Some(target) = self.manual_target() {
            return self.enlist(target, password, ctx);
        }
        let request = match self.launch_request(&zone, password) {
            Ok(request) => request,
            Err(e) => return self.launch_failed(e, ctx),
        };
        self.launching = Some(Launching {
            root_disk: request.requirements.root_disk_mib,
        });
        let me = ctx.address();
        let taken = self.shared.broker.send(Launch {
            request,
            started: me.clone().recipient(),
            failed: me.recipient(),
        });
        self.unless_taken(taken, ctx);
    }

    /// A launch (or enlistment) the broker never took, because it panicked
    /// on it or is gone, fails transiently instead of leaving the machine
    /// waiting for an answer that cannot come.
    fn unless_taken(
        &mut self,
        taken: impl std::future::Future<Output = Result<(), MailboxError>> + 'static,
        ctx: &mut Context<Self>,
    ) {
        ctx.spawn(taken.into_actor(self).map(|taken, actor, ctx| {
            if let Err(e) = taken {
                if actor.launching.take().is_some() {
                    actor.launch_failed(
                        ProviderError::new(
                            FailureClass::Transient,
                            format!("the broker did not take the launch ({e})"),
                        ),
                        ctx,
                    );
                }
            }
        }));
    }

    /// Enlists the existing host this machine is, instead of launching an
    /// instance: never a cloud instance for an `ssh:` machine.
    fn enlist(&mut self, target: SshTarget, password: Secret, ctx: &mut Context<Self>) {
        // A machine with units must run their base; an empty machine takes
        // the host's.
        let base = (!self.applications.is_empty()).then_some(self.record.base);
        let request = EnlistRequest {
            machine: self.id,
            target,
            constraints: self.record.constraints.clone(),
            base,
            agent: AgentBootstrap {
                controller_url: self.shared.controller.url.clone(),
                ca_cert: self.shared.controller.ca_cert.clone(),
                one_time_password: password,
            },
        };
        self.launching = Some(Launching { root_disk: None });
        let me = ctx.address();
        let taken = self.shared.manual.send(Enlist {
            request,
            enlisted: me.clone().recipient(),
            failed: me.recipient(),
        });
        self.unless_taken(taken, ctx);
    }

    /// A launch answered: the root disk it asked for, if any.
    fn launch_answered(&mut self) -> Option<u64> {
        let launching = self.launching.take()?;
        launching.root_disk.filter(|disk| *disk > 0)
    }

    fn launched(&mut self, instance: Instance, root_disk: Option<u64>, ctx: &mut Context<Self>) {
        self.lost = None;
        let launched_type = self
            .shared
            .provider
            .catalogue()
            .get(&instance.instance_type);
        let hardware = match launched_type {
            Some(t) => Hardware::of(t, &instance.zone, root_disk),
            None => instance.hardware.clone(),
        };
        // A container's host pays for it.
        let hourly_price = launched_type
            .filter(|_| self.host.is_none())
            .map(|t| t.price);
        let update = MachineUpdate {
            instance_type: Some(instance.instance_type.clone()),
            hourly_price,
            hardware: Some(hardware.to_string()),
            addresses: Some(instance.addresses.clone()),
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
        let store = self.shared.store.clone();
        let (id, current) = (self.id, self.machine.clone());
        let message = format!("waiting for the provider: {message}");
        ctx.wait(
            async move { store.note_machine(id, current, message).await }
                .into_actor(self)
                .map(|_, _, _| ()),
        );
        self.set_timer(Event::Resume, REFUSED_RETRY, ctx);
    }

    /// Stops and removes an enlisted host's agent; the host keeps running.
    /// A host that cannot be reached or refuses berth (gone, its key
    /// changed) is tried [`AGENT_REMOVAL_TRIES`] times; then the machine
    /// goes without its agent removed, and the log says so, rather than
    /// wait in `stopping` for a host that may never come back.
    fn unenlist(&mut self, target: SshTarget, ctx: &mut Context<Self>) {
        let manual = self.shared.manual.clone();
        let machine = self.id;
        let host = target.host().to_string();
        ctx.wait(
            async move { manual.send(Unenlist { machine, target }).await }
                .into_actor(self)
                .map(move |answer, actor, ctx| {
                    let result = answer.unwrap_or_else(|e| {
                        Err(ProviderError::new(FailureClass::Transient, e.to_string()))
                    });
                    let tries = actor.machine.lifecycle.stop_failures.saturating_add(1);
                    let result = match result {
                        Err(e)
                            if e.class == FailureClass::Permanent
                                && tries >= AGENT_REMOVAL_TRIES =>
                        {
                            log::warn!(
                                "machine {}: giving up removing its agent from {host} after \
                                 {tries} tries ({}); the machine goes, and if the host comes \
                                 back, stop and remove that agent there",
                                actor.id,
                                e.message
                            );
                            Ok(())
                        }
                        other => other,
                    };
                    actor.stopped_or_not(result, ctx);
                }),
        );
    }

    fn stopped_or_not(&mut self, result: Result<(), ProviderError>, ctx: &mut Context<Self>) {
        match result {
            Ok(()) => {
                self.step(Event::InstanceStopped, MachineUpdate::default(), None, ctx);
            }
            Err(e) => self.step(
                Event::StopFailed { message: e.message },
                MachineUpdate::default(),
                None,
                ctx,
            ),
        }
    }

    fn terminate(&mut self, instance_id: String, ctx: &mut Context<Self>) {
        if !self.shared.leases.trusts_machine(self.id) {
            return self.lease_lost(ctx);
        }
        if is_manual_instance(&instance_id) {
            match self.manual_target() {
                Some(target) => return self.unenlist(target, ctx),
                None => {
                    // Not placed with ssh: nothing to reach it by; the
                    // host was never berth's to stop.
                    log::warn!(
                        "machine {}: no ssh target for {instance_id}; leaving the host alone",
                        self.id
                    );
                    return self.stopped_or_not(Ok(()), ctx);
                }
            }
        }
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
        let machine = self.id;
        ctx.wait(
            async move {
                broker
                    .send(Terminate {
                        instances: vec![instance_id],
                        fence: Fence::Machines(vec![machine]),
                    })
                    .await
            }
            .into_actor(self)
            .map(|answer, actor, ctx| {
                let result = match answer {
                    Ok(mut results) => results.pop().unwrap_or(Ok(())),
                    Err(e) => Err(ProviderError::new(FailureClass::Transient, e.to_string())),
                };
                match result {
                    Err(e)
                        if actor.id.is_container()
                            && actor.machine.state == MachineState::Stopping =>
                    {
                        actor.stopped_with_host_or_not(e, ctx)
                    }
                    result => actor.stopped_or_not(result, ctx),
                }
            }),
        );
    }

    /// A container being removed whose instance the provider could not
    /// stop (`error`): if its host is gone, or being removed too, the
    /// container's instance ends with the host's and the stop counts as
    /// done; otherwise it failed, and is tried again.
    fn stopped_with_host_or_not(&mut self, error: ProviderError, ctx: &mut Context<Self>) {
        let Some(host) = self.id.parent() else {
            return self.stopped_or_not(Err(error), ctx);
        };
        let store = self.shared.store.clone();
        ctx.wait(
            async move { store.blocking(move |s| s.machine(&host)).await }
                .into_actor(self)
                .map(move |found, actor, ctx| {
                    let host_leaving = match found {
                        Ok(record) => matches!(
                            record.state(),
                            MachineState::Dying | MachineState::Stopping | MachineState::Dead
                        ),
                        Err(StoreError::NotFound(_)) => true,
                        Err(_) => false,
                    };
                    if !host_leaving {
                        return actor.stopped_or_not(Err(error), ctx);
                    }
                    log::info!(
                        "machine {}: cannot stop its instance ({}); it ends with its host {host}, \
                         which is being removed",
                        actor.id,
                        error.message
                    );
                    actor.stopped_or_not(Ok(()), ctx);
                }),
        );
    }
}

impl Actor for MachineActor {
    type Context = Context<Self>;

    /// An adopted launch is taken over; a machine resumed from the store
    /// asks again for whatever was in flight. A pending machine waits for
    /// [`StartInstance`].
    fn started(&mut self, ctx: &mut Context<Self>) {
        if std::mem::take(&mut self.restarted) {
            self.read_again(
                |actor, fresh, ctx| {
                    actor.adopt(fresh, ctx);
                    // A pending machine was already told to start (the
                    // message may be what it panicked on).
                    let event = match actor.machine.state {
                        MachineState::Pending => Event::StartInstance,
                        _ => Event::Resume,
                    };
                    actor.step(event, MachineUpdate::default(), None, ctx);
                },
                ctx,
            );
            return;
        }
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
        if self.machine.state != MachineState::Pending {
            self.step(Event::Resume, MachineUpdate::default(), None, ctx);
        }
    }

    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        self.provisioner.do_send(ActorStopped {
            machine: self.id,
            serial: self.serial,
            state: Some(self.stored_state()),
        });
    }
}

/// After a panic the actor keeps its mailbox and reads its machine again.
impl Supervised for MachineActor {
    fn restarting(&mut self, _ctx: &mut Context<Self>) {
        // The context dropped the timer and any store write in flight; an
        // answer to a launch in flight still arrives, as a message.
        self.timer = None;
        self.restarted = true;
    }
}

impl Handler<StartInstance> for MachineActor {
    type Result = ();

    fn handle(&mut self, _msg: StartInstance, ctx: &mut Context<Self>) {
        hooks::checkpoint(kinds::MACHINE);
        if self.machine.state == MachineState::Pending && self.launching.is_none() {
            self.step(Event::StartInstance, MachineUpdate::default(), None, ctx);
        }
    }
}

impl Handler<InstanceStarted> for MachineActor {
    type Result = ();

    fn handle(&mut self, msg: InstanceStarted, ctx: &mut Context<Self>) {
        let root_disk = self.launch_answered();
        self.launched(msg.0, root_disk, ctx);
    }
}

impl Handler<HostEnlisted> for MachineActor {
    type Result = ();

    fn handle(&mut self, msg: HostEnlisted, ctx: &mut Context<Self>) {
        self.launch_answered();
        self.lost = None;
        let Enlisted { instance, base } = msg.0;
        let update = MachineUpdate {
            hardware: Some(instance.hardware.to_string()),
            addresses: Some(instance.addresses.clone()),
            // An empty machine takes the host's base; a machine with units
            // was checked to run theirs.
            base: (base != self.record.base).then_some(base),
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
}

impl Handler<InstanceFailed> for MachineActor {
    type Result = ();

    fn handle(&mut self, msg: InstanceFailed, ctx: &mut Context<Self>) {
        self.launch_answered();
        self.launch_failed(msg.0, ctx);
    }
}

impl Handler<Retry> for MachineActor {
    type Result = ();

    fn handle(&mut self, _msg: Retry, ctx: &mut Context<Self>) {
        if self.launching.is_some() {
            // Already on its way: the retry is done.
            return;
        }
        log::info!("machine {}: retried by an administrator", self.id);
        self.read_again(
            |actor, fresh, ctx| {
                if fresh.record.machine != actor.machine
                    || fresh.record.constraints != actor.record.constraints
                {
                    actor.adopt(fresh, ctx);
                }
                if actor.machine.state == MachineState::Pending {
                    actor.step(Event::StartInstance, MachineUpdate::default(), None, ctx);
                } else {
                    actor.settle_if_done(ctx);
                }
            },
            ctx,
        );
    }
}

impl Handler<Timer> for MachineActor {
    type Result = ();

    fn handle(&mut self, msg: Timer, ctx: &mut Context<Self>) {
        // A timer cancelled after it fired is no longer this one.
        if self.timer.as_ref().map(|(_, serial)| *serial) != Some(msg.serial) {
            return;
        }
        self.timer = None;
        self.step(msg.event, MachineUpdate::default(), None, ctx);
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
        if self.launching.is_some() {
            // The launch's answer is written only if the machine is still
            // starting; if someone moved it meanwhile (a remove), that
            // write conflicts and the answer is applied to the machine as
            // stored (a removed machine's new instance is stopped).
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

impl Handler<Shutdown> for MachineActor {
    type Result = ();

    fn handle(&mut self, _msg: Shutdown, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

impl Handler<InstanceChanged> for MachineActor {
    type Result = ();

    fn handle(&mut self, msg: InstanceChanged, ctx: &mut Context<Self>) {
        if !msg.state.is_gone() {
            return;
        }
        if self.machine.lifecycle.instance_id.as_deref() != Some(msg.instance_id.as_str()) {
            // An instance the machine had before (a report that arrived
            // late, a reconciliation's listing made before a relaunch):
            // the one it has now is not the one reported gone.
            log::debug!(
                "machine {}: instance {} was {}, but the machine is on {} now",
                self.id,
                msg.instance_id,
                msg.state.as_str(),
                self.machine
                    .lifecycle
                    .instance_id
                    .as_deref()
                    .unwrap_or("none")
            );
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
                self.lost = Some(msg.state);
                let message = format!(
                    "instance {} was {} before its agent checked in",
                    msg.instance_id,
                    msg.state.as_str()
                );
                self.step(
                    Event::BootstrapTimedOut,
                    MachineUpdate::default(),
                    Some(message),
                    ctx,
                )
            }
            MachineState::Started => {
                self.lost = Some(msg.state);
                self.settle_if_done(ctx);
            }
            _ => {}
        }
    }
}

/// How many times an enlisted host that cannot be reached, or refuses
/// berth, is asked to remove the machine's agent before the machine goes
/// without. The backoff between tries (`[provisioner] backoff_*`) makes
/// that about a minute with the defaults (0.5 s doubling to 30 s), for a
/// host that was only rebooting to come back.
pub const AGENT_REMOVAL_TRIES: u32 = 8;

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

//! The Provisioner actor (Juju's compute provisioner) and the
//! ContainerProvisioner.
//!
//! On start, and on every restart, the Provisioner reads a summary of every
//! machine (`Store::machine_summaries`) and the provider's list of this
//! controller's instances and reconciles them: strays are stopped first
//! ("stop unknown instances before starting pending ones": if we started an
//! instance and then failed to record its id, we must not start a second one
//! for the same machine), launches that were in flight are adopted, and
//! every machine that is not settled goes in line for a MachineActor (at
//! most `max_machine_actors` live at once; each machine's full record is
//! read when its turn comes). Then it follows the change log for changes it did not
//! make itself (reading the machines changed, except new ones, which wait
//! in line as their creation describes them), and every
//! `reconcile_interval_s` compares the provider's
//! list with the store again, because webhooks can be lost. That periodic
//! comparison lists the instances first and then looks at each machine as
//! the store hands it over (`Store::each_machine_summary`), so that it
//! never holds every machine's summary; what it finds vanished or stray is
//! asked of the provider again by id before anything is done about it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use actix::prelude::*;

use crate::domain::instance::{Instance, InstanceState, ListedInstance};
use crate::domain::machine::{is_settled, needs_actor, Event, Machine, MachineState};
use crate::domain::names::MachineId;
use crate::domain::reconcile::{
    deciding_strays, periodic_strays, plan_reconciliation, Comparison, MachineSummary,
    ReconciliationPlan, Vanished,
};
use crate::engine::leases::{is_mine, Fence};
use crate::engine::machine::{lost_instance_message, Host, MachineActor};
use crate::engine::protocol::{
    ActorStopped, DescribeInstances, GetLiveActors, Gone, InstanceChanged, ListInstances,
    ListZones, ProviderReport, Reconcile, ReconcileNow, Retry, SetZones, Shutdown, StartInstance,
    Terminate, ZoneTrackerRestarted,
};
use crate::engine::shared::Shared;
use crate::engine::supervision::{self, hooks, kinds, Restart};
use crate::store::leases::RECONCILE_JOB;
use crate::store::lifecycle::MachineEvent;
use crate::store::machines::EngineMachine;
use crate::store::records::MachineRecord;
use crate::store::zones::ZoneRecord;
use crate::store::{millis, now_ms, Entity, Origin, StoreError};

/// Change-log entries read at once while following the log.
const CHANGES_PER_READ: i64 = 10_000;
/// Waiting machines are admitted in reads of at least this many (fewer when
/// fewer wait or few actors are allowed), so that freed room is filled in a
/// few large reads.
const ADMIT_AT_LEAST: usize = 512;
/// How long to wait before retrying after the store or provider failed
/// during reconciliation.
const RECONCILE_RETRY: Duration = Duration::from_secs(2);
/// How long stopped actors' leases gather before they are let go together.
const RELEASE_EVERY: Duration = Duration::from_millis(20);

/// What the change-log follower found.
#[derive(Message)]
#[rtype(result = "()")]
struct StoreChanged {
    machines: Vec<EngineMachine>,
    removed: Vec<MachineId>,
    /// Machines an administrator retried (`retry-provisioning`): their
    /// actors hear it as [`Retry`].
    retried: HashSet<MachineId>,
    /// The zones, when they changed: applied before the machines, so that
    /// a machine never chooses from zones older than its own revision.
    zones: Option<Vec<ZoneRecord>>,
    /// Machines of this controller's share whose only change was their
    /// creation. Their records are not read: a new machine is pending and
    /// held by no one, so it waits in line as it is and is read when its
    /// lease is claimed (a deploy of 100,000 units read each new machine
    /// twice).
    created: Vec<MachineId>,
    /// The machines among `machines` that need an actor and are this
    /// controller's to work on (its share, or ones it held): only these get
    /// an actor here, those it does not hold after waiting in line for
    /// their lease to be claimed.
    wanted: HashSet<MachineId>,
}

/// A machine that needs an actor but waits for room, with what the
/// reconciliation found for it.
struct Waiting {
    id: MachineId,
    /// Boxed: most waiting machines adopt nothing, and an instance inline
    /// would make every entry of a long queue as big as one.
    adopt: Option<Box<Instance>>,
    vanished: bool,
    /// When it was put in line.
    since: std::time::Instant,
    /// Whether this controller may claim it whoever's share it is (it was
    /// found unheld twice in a row, or this controller holds it).
    anyone: bool,
    /// Whether an administrator retried it: its actor hears [`Retry`].
    retried: bool,
}

impl Waiting {
    /// A machine the change log named, in line from now, to be claimed
    /// when its turn comes if it is this controller's share.
    fn changed(id: MachineId, retried: bool) -> Waiting {
        Waiting {
            id,
            adopt: None,
            vanished: false,
            since: std::time::Instant::now(),
            anyone: false,
            retried,
        }
    }
}

pub struct Provisioner {
    shared: Arc<Shared>,
    /// The live machine actors, with the serial each was started with.
    actors: HashMap<MachineId, (u64, Addr<MachineActor>)>,
    /// Machines waiting for an actor, oldest first. At most
    /// `max_machine_actors` actors live at once; machines beyond that wait
    /// as ids and are read again from the store when room frees up, so a
    /// deploy of 100,000 machines holds a few thousand in memory, not all of
    /// them. The broker's own limits keep far fewer launches in flight.
    waiting: VecDeque<Waiting>,
    /// The ids in `waiting`, and those being read to be admitted.
    queued: HashSet<MachineId>,
    /// Whether a read of waiting machines is under way.
    admitting: bool,
    next_serial: u64,
    containers: HashMap<MachineId, Addr<ContainerProvisioner>>,
    /// Bumped on every (re)start, so that work of an earlier life that
    /// finishes late is recognised and dropped.
    generation: u64,
    /// Machines whose actors stopped, whose leases are to be let go.
    releasing: Vec<MachineId>,
    /// Whether taking over unheld machines is under way.
    taking_over: bool,
    /// The live controllers sharing the store (this one included), by
    /// holder: each claims first the machines that hash to it
    /// ([`is_mine`]). Shared with the change-log follower.
    peers: Arc<std::sync::RwLock<Vec<String>>>,
    /// Machines nobody held at the last look: at the next look, any
    /// controller takes those still unheld, whoever's they hash to.
    unheld_before: HashSet<MachineId>,
}

impl Provisioner {
    pub fn new(shared: Arc<Shared>) -> Provisioner {
        Provisioner {
            shared,
            actors: HashMap::new(),
            waiting: VecDeque::new(),
            queued: HashSet::new(),
            admitting: false,
            next_serial: 0,
            containers: HashMap::new(),
            generation: 0,
            releasing: Vec::new(),
            taking_over: false,
            peers: Arc::default(),
            unheld_before: HashSet::new(),
        }
    }

    /// Whether machine `id` is this controller's to claim first.
    fn is_mine(&self, id: MachineId) -> bool {
        let peers = self.peers.read().unwrap_or_else(PoisonError::into_inner);
        is_mine(&peers, self.shared.store.holder(), id)
    }

    fn spawn_actor(
        &mut self,
        machine: EngineMachine,
        adopt: Option<Instance>,
        ctx: &mut Context<Self>,
    ) {
        self.spawn_actor_for(machine, adopt, false, ctx);
    }

    /// Starts a machine's actor (a container's, through its host's
    /// ContainerProvisioner), or puts it in line when there is no room;
    /// `retried`: an administrator's retry, told to the actor as [`Retry`].
    fn spawn_actor_for(
        &mut self,
        machine: EngineMachine,
        adopt: Option<Instance>,
        retried: bool,
        ctx: &mut Context<Self>,
    ) {
        let id = machine.record.id;
        if self.actors.contains_key(&id) {
            return;
        }
        if id.parent().is_none() && self.actors.len() >= self.shared.max_machine_actors {
            self.wait_for_actor(id, adopt, false);
            return;
        }
        if let Some(host) = id.parent() {
            let shared = self.shared.clone();
            let provisioner = ctx.address();
            let pen = self.containers.entry(host).or_insert_with(|| {
                let metrics = shared.metrics.clone();
                supervision::start(
                    kinds::CONTAINER_PROVISIONER,
                    Restart::OnPanic,
                    metrics,
                    ContainerProvisioner::new(host, shared, provisioner),
                )
            });
            pen.do_send(AddContainer(machine));
            return;
        }
        let actor = MachineActor::new(
            machine,
            self.shared.clone(),
            ctx.address().recipient(),
            None,
        );
        let actor = match adopt {
            Some(instance) => actor.adopting(instance),
            None => actor,
        };
        self.launch_actor(id, actor, retried);
    }

    /// Puts a machine in line for an actor; its record is read when its
    /// turn comes.
    fn wait_for_actor(&mut self, id: MachineId, adopt: Option<Instance>, vanished: bool) {
        self.wait_in_line(id, adopt, vanished, false);
    }

    /// [`Provisioner::wait_for_actor`]; `anyone`: this controller may claim
    /// the machine even if it is another's share.
    fn wait_in_line(
        &mut self,
        id: MachineId,
        adopt: Option<Instance>,
        vanished: bool,
        anyone: bool,
    ) {
        self.line_up(Waiting {
            id,
            adopt: adopt.map(Box::new),
            vanished,
            since: std::time::Instant::now(),
            anyone,
            retried: false,
        });
    }

    /// Puts `waiting` in line, unless its machine is in line already.
    fn line_up(&mut self, waiting: Waiting) {
        if self.queued.insert(waiting.id) {
            self.waiting.push_back(waiting);
            self.report_actors();
        }
    }

    /// Whether a machine in line may be claimed now: this controller's
    /// share, one it holds, one it may take whoever's it is, or one that
    /// has waited two renewals without its controller claiming it.
    fn may_claim(&self, waiting: &Waiting) -> bool {
        waiting.anyone
            || self.is_mine(waiting.id)
            || self.shared.leases.trusts_machine(waiting.id)
            || waiting.since.elapsed() >= self.shared.leases.renew_every() * 2
    }

    /// Starts a machine's actor; a pending machine is then told to start
    /// its instance ([`StartInstance`]), or, after an administrator's
    /// retry, to [`Retry`].
    fn launch_actor(&mut self, id: MachineId, actor: MachineActor, retried: bool) {
        self.next_serial += 1;
        let serial = self.next_serial;
        let pending = actor.is_pending();
        let address = supervision::start(
            kinds::MACHINE,
            Restart::OnPanic,
            self.shared.metrics.clone(),
            actor.numbered(serial),
        );
        if retried {
            address.do_send(Retry);
        } else if pending {
            address.do_send(StartInstance);
        }
        self.actors.insert(id, (serial, address));
        self.report_actors();
    }

    /// Forgets actor `serial` of `id`, unless a newer actor has taken its
    /// place, and lets waiting machines into the room it leaves.
    fn forget(&mut self, id: MachineId, serial: u64, ctx: &mut Context<Self>) {
        if self.actors.get(&id).is_some_and(|(s, _)| *s == serial) {
            self.actors.remove(&id);
            self.release_lease(id, ctx);
            self.report_actors();
            self.admit_waiting(ctx);
        }
    }

    /// Lets go of a machine's lease once this controller has no work for
    /// it (its actor stopped: settled, gone, or it found the lease lost;
    /// or it was claimed from the line and found settled), so that whoever
    /// next has work for it can claim it and the renewals keep only the
    /// leases of machines being worked on. Released in batches.
    fn release_lease(&mut self, id: MachineId, ctx: &mut Context<Self>) {
        self.shared.leases.released(id);
        self.releasing.push(id);
        if self.releasing.len() > 1 {
            return;
        }
        ctx.run_later(RELEASE_EVERY, |act, ctx| {
            let mut ids = std::mem::take(&mut act.releasing);
            // A machine that has work here again keeps its lease.
            ids.retain(|id| !act.actors.contains_key(id) && !act.queued.contains(id));
            let store = act.shared.store.clone();
            ctx.spawn(
                async move {
                    if let Err(e) = store.release_machines(ids).await {
                        // They run out by themselves.
                        log::warn!("provisioner: cannot release machines' leases: {e}");
                    }
                }
                .into_actor(act),
            );
        });
    }

    /// Reads waiting machines afresh from the store and starts their
    /// actors, as many as there is room for.
    fn admit_waiting(&mut self, ctx: &mut Context<Self>) {
        let most = self.shared.max_machine_actors;
        let room = most.saturating_sub(self.actors.len());
        let worth_a_read = ADMIT_AT_LEAST
            .min(self.waiting.len())
            .min((most / 4).max(1));
        if self.admitting || self.waiting.is_empty() || room < worth_a_read {
            return;
        }
        let mut admitted = HashMap::new();
        let mut later = Vec::new();
        while admitted.len() < room {
            let Some(next) = self.waiting.pop_front() else {
                break;
            };
            // Removed meanwhile: no longer queued.
            if !self.queued.contains(&next.id) {
                continue;
            }
            if self.may_claim(&next) {
                admitted.insert(next.id, next);
            } else {
                // Another controller's share, for now: it is looked at
                // again at the next renewal.
                later.push(next);
            }
        }
        self.waiting.extend(later);
        if self.waiting.is_empty() {
            // The queue of a large deploy gives its room back.
            self.waiting.shrink_to_fit();
        }
        if admitted.is_empty() {
            return;
        }
        self.admitting = true;
        let ids: Vec<MachineId> = admitted.keys().copied().collect();
        let store = self.shared.store.clone();
        let generation = self.generation;
        let leases = self.shared.leases.clone();
        ctx.spawn(
            async move {
                // Only the machines no other controller is working on.
                let claimed = store.claim_machines(ids, leases.ttl()).await?;
                leases.claimed(&claimed);
                store
                    .blocking(move |s| s.engine_machines(Some(&claimed)))
                    .await
            }
            .into_actor(self)
            .map(move |result, act, ctx| {
                if act.generation != generation {
                    return;
                }
                act.admitting = false;
                let machines = match result {
                    Ok(machines) => machines,
                    Err(e) => {
                        // Back in line; the next freed room tries again.
                        log::warn!("provisioner: cannot read waiting machines: {e}");
                        act.waiting.extend(admitted.into_values());
                        return;
                    }
                };
                for machine in machines {
                    let id = machine.record.id;
                    let Some(entry) = admitted.remove(&id) else {
                        continue;
                    };
                    act.queued.remove(&id);
                    if !needs_actor(machine.record.state()) {
                        // Settled while it waited (its agent checked in,
                        // say): claimed for nothing, so let go now rather
                        // than renewed for as long as this controller runs.
                        act.release_lease(id, ctx);
                        continue;
                    }
                    // The instance it records, as just read: it waited
                    // without an actor, so nothing has moved it on.
                    let vanished = machine
                        .record
                        .instance_id()
                        .filter(|_| entry.vanished)
                        .map(str::to_string);
                    act.spawn_actor_for(machine, entry.adopt.map(|a| *a), entry.retried, ctx);
                    if let Some(instance) = vanished {
                        if let Some((_, actor)) = act.actors.get(&id) {
                            actor.do_send(InstanceChanged {
                                instance_id: instance,
                                state: InstanceState::Terminated,
                            });
                        }
                    }
                }
                // Not claimed (another controller holds it) or not
                // found (removed from the store meanwhile).
                for id in admitted.into_keys() {
                    act.queued.remove(&id);
                }
                if act.queued.is_empty() {
                    act.queued.shrink_to_fit();
                }
                act.report_actors();
                act.admit_waiting(ctx);
            }),
        );
    }

    fn report_actors(&self) {
        let metrics = &self.shared.metrics;
        metrics.set_queue_depth("machine_actors", self.actors.len());
        metrics.set_queue_depth("machines_waiting_for_an_actor", self.queued.len());
    }

    /// Reads everything and reconciles it with the provider; then starts
    /// the actors and the change-log follower.
    fn rebuild(&mut self, ctx: &mut Context<Self>) {
        self.generation += 1;
        // A new start from the store: whatever the last one left in flight
        // (an admission, a takeover's survey) answers as stale and is
        // dropped, so none of it may keep its flag set or its machines
        // marked as in line, where they would never be lined up again.
        // The start lines every unsettled machine up afresh.
        self.admitting = false;
        self.taking_over = false;
        self.waiting.clear();
        self.queued.clear();
        let generation = self.generation;
        let shared = self.shared.clone();
        let shared_peers = self.peers.clone();
        let work = async move {
            let zones = shared
                .broker
                .send(ListZones)
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
            shared
                .store
                .set_provider_zones(zones)
                .await
                .map_err(|e| e.to_string())?;
            // A store written by an older berth is counted afresh once.
            shared
                .store
                .count_zone_census_unless_current()
                .await
                .map_err(|e| e.to_string())?;
            let revision = shared.store.revision();
            let zones = shared
                .store
                .blocking(|s| s.zones())
                .await
                .map_err(|e| e.to_string())?;
            let (machines, instances) = read_machines_and_instances(&shared).await?;
            let (reconciler, peers) = take_part(&shared).await.map_err(|e| e.to_string())?;
            *shared_peers.write().unwrap_or_else(PoisonError::into_inner) = peers;
            let mut plan = plan_reconciliation(&machines, &instances);
            // Strays are stopped by the controller that holds the
            // reconciliation job, and only when a second look agrees.
            let candidates = if reconciler && shared.harvest.harvests_strays() {
                std::mem::take(&mut plan.strays)
            } else {
                Vec::new()
            };
            let strays = confirm_strays(&shared, candidates, &instances).await?;
            drop(instances);
            let adopted = adopted_instances(&shared, &plan.adopt).await?;
            let survey = Survey {
                machines,
                plan,
                adopted,
                strays,
            };
            Ok::<_, String>((revision, zones, survey, reconciler))
        };
        ctx.wait(work.into_actor(self).map(move |result, act, ctx| {
            if act.generation != generation {
                return;
            }
            match result {
                Ok((revision, zones, survey, reconciler)) => {
                    act.shared.leases.job(RECONCILE_JOB, reconciler);
                    act.shared.zones.do_send(SetZones(zones));
                    act.start_from(revision, survey, ctx);
                }
                Err(e) => {
                    log::error!(
                        "provisioner: cannot read the state or the provider: {e}; trying again"
                    );
                    ctx.run_later(RECONCILE_RETRY, |act, ctx| act.rebuild(ctx));
                }
            }
        }));
    }

    fn start_from(&mut self, revision: i64, survey: Survey, ctx: &mut Context<Self>) {
        let Survey {
            machines,
            plan,
            mut adopted,
            strays,
        } = survey;
        self.record_addresses(plan.readdressed, ctx);
        let broker = self.shared.broker.clone();
        let stop_strays = async move {
            if !strays.is_empty() {
                log::info!(
                    "provisioner: stopping {} stray instance(s): {}",
                    strays.len(),
                    strays.join(", ")
                );
                let stop = Terminate {
                    instances: strays,
                    fence: Fence::Job(RECONCILE_JOB),
                };
                for result in broker.send(stop).await.unwrap_or_default() {
                    if let Err(e) = result {
                        log::warn!("provisioner: cannot stop a stray instance: {e}");
                    }
                }
            }
        };
        let vanished = plan.vanished;
        ctx.wait(stop_strays.into_actor(self).map(move |(), act, ctx| {
            let mut lost = Vec::new();
            for machine in machines {
                let id = machine.id;
                if !is_settled(machine.state) {
                    // Every actor's record is read when its turn comes, so
                    // the start never holds every full record at once.
                    act.wait_for_actor(id, adopted.remove(&id), vanished.contains_key(&id));
                } else if let Some(gone) = vanished.get(&id) {
                    lost.push((id, gone.instance.clone()));
                } else if machine.state == MachineState::Started {
                    act.host_ready(id, machine.instance_id(), machine.zone());
                }
            }
            act.lose_instances(lost, ctx);
            act.admit_waiting(ctx);
            act.follow(revision, ctx);
            act.shared.metrics.reconciled();
        }));
    }

    /// Marks down the settled machines whose instances (each given with
    /// its machine) are gone, reading their records first: a machine that
    /// has moved on to another instance since is left alone.
    fn lose_instances(&mut self, gone: Vec<(MachineId, String)>, ctx: &mut Context<Self>) {
        if gone.is_empty() {
            return;
        }
        let ids: Vec<MachineId> = gone.iter().map(|(id, _)| *id).collect();
        let gone: HashMap<MachineId, String> = gone.into_iter().collect();
        let store = self.shared.store.clone();
        ctx.spawn(
            async move { store.blocking(move |s| s.engine_machines(Some(&ids))).await }
                .into_actor(self)
                .map(move |result, act, ctx| match result {
                    Ok(machines) => {
                        for machine in machines {
                            let on_it = machine.record.instance_id()
                                == gone.get(&machine.record.id).map(String::as_str);
                            if on_it && machine.record.state() == MachineState::Started {
                                act.lost_instance(machine, InstanceState::Terminated, ctx);
                            }
                        }
                    }
                    Err(e) => log::warn!(
                        "provisioner: cannot read machines whose instances are gone: {e}"
                    ),
                }),
        );
    }

    /// A started machine whose instance the provider stopped or terminated
    /// behind berth's back: shown `down`, with the reason.
    fn lost_instance(
        &mut self,
        machine: EngineMachine,
        state: InstanceState,
        ctx: &mut Context<Self>,
    ) {
        let record = machine.record;
        let message = lost_instance_message(record.instance_id().unwrap_or("?"), state);
        self.mark_down(record.id, record.machine, message, ctx);
    }

    /// Shows a started machine `down` with `message`, through the store's
    /// writer (if the machine is still as the engine read it).
    fn mark_down(
        &mut self,
        id: MachineId,
        current: Machine,
        message: String,
        ctx: &mut Context<Self>,
    ) {
        let store = self.shared.store.clone();
        let request = MachineEvent {
            message: Some(message),
            ..MachineEvent::new(id, Event::AgentLost)
        };
        ctx.spawn(
            async move { store.apply(current, request).await }
                .into_actor(self)
                .map(move |result, _, _| {
                    if let Err(e) = result {
                        log::warn!("provisioner: cannot mark machine {id} down: {e}");
                    }
                }),
        );
    }

    /// Lets a started host's containers be provisioned.
    fn host_ready(&self, host: MachineId, instance: Option<&str>, zone: Option<&str>) {
        if let (Some(pen), Some(instance), Some(zone)) =
            (self.containers.get(&host), instance, zone)
        {
            pen.do_send(HostReady(Host {
                instance_id: instance.to_string(),
                zone: zone.to_string(),
            }));
        }
    }

    /// Machine `id` left the store: a container waiting for its host is
    /// let go, and a host's ContainerProvisioner stops (the host's row goes
    /// only after its containers' rows).
    fn container_gone(&mut self, id: MachineId) {
        match id.parent() {
            Some(host) => {
                if let Some(pen) = self.containers.get(&host) {
                    pen.do_send(ContainerGone(id));
                }
            }
            None => {
                if let Some(pen) = self.containers.remove(&id) {
                    pen.do_send(Shutdown);
                }
            }
        }
    }

    /// Follows the change log from `revision`, for changes the engine did
    /// not make.
    fn follow(&mut self, revision: i64, ctx: &mut Context<Self>) {
        let store = self.shared.store.clone();
        let me = ctx.address();
        let generation = self.generation;
        let peers = self.peers.clone();
        ctx.spawn(
            async move {
                let mut since = revision;
                let mut head = store.watch_revision();
                loop {
                    let changes = match store
                        .blocking(move |s| s.changes_since(since, CHANGES_PER_READ))
                        .await
                    {
                        Ok(changes) => changes,
                        Err(e) => return Err(e),
                    };
                    let Some(last) = changes.last() else {
                        if head.changed().await.is_err() {
                            return Ok(());
                        }
                        continue;
                    };
                    since = last.revision;
                    let mut ids = Vec::new();
                    let mut seen = HashSet::new();
                    // Of `ids`, those whose only change here is their
                    // creation.
                    let mut new_only = HashSet::new();
                    let mut removed = Vec::new();
                    let mut retried = HashSet::new();
                    let mut zones_changed = false;
                    for change in &changes {
                        match change.entity {
                            Entity::Zone => zones_changed = true,
                            Entity::Machine if change.origin != Origin::Engine => {
                                let Ok(id) = change.id.parse::<MachineId>() else {
                                    continue;
                                };
                                if change.change == crate::store::ChangeKind::Removed {
                                    removed.push(id);
                                    continue;
                                }
                                if change.is_retry() {
                                    retried.insert(id);
                                }
                                if seen.insert(id) {
                                    ids.push(id);
                                    if change.is_new_machine() {
                                        new_only.insert(id);
                                    }
                                } else {
                                    new_only.remove(&id);
                                }
                            }
                            _ => {}
                        }
                    }
                    let mut created = Vec::new();
                    if !new_only.is_empty() {
                        let removed: HashSet<MachineId> = removed.iter().copied().collect();
                        ids.retain(|id| {
                            if !new_only.contains(id) {
                                return true;
                            }
                            // A machine created and removed since the last
                            // read is gone already.
                            if !removed.contains(id) {
                                created.push(*id);
                            }
                            false
                        });
                    }
                    if ids.is_empty() && created.is_empty() && removed.is_empty() && !zones_changed
                    {
                        continue;
                    }
                    let zones = if zones_changed {
                        Some(store.blocking(|s| s.zones()).await?)
                    } else {
                        None
                    };
                    // A batch of new machines alone has none to read.
                    let machines = if ids.is_empty() {
                        Vec::new()
                    } else {
                        store
                            .blocking(move |s| s.engine_machines(Some(&ids)))
                            .await?
                    };
                    // Those needing work that no other controller holds,
                    // and that hash to this one, are this one's to do:
                    // they wait in line and are claimed at admission; the
                    // sweep takes any a controller leaves unclaimed.
                    let now = now_ms();
                    let wanted: HashSet<MachineId> = {
                        let peers = peers.read().unwrap_or_else(PoisonError::into_inner);
                        let wanted = machines
                            .iter()
                            .filter(|m| needs_actor(m.record.state()))
                            .filter(|m| match &m.record.lease {
                                Some(lease) if lease.holder == store.holder() => true,
                                Some(lease) if lease.is_live(now) => false,
                                _ => is_mine(&peers, store.holder(), m.record.id),
                            })
                            .map(|m| m.record.id)
                            .collect();
                        created.retain(|id| is_mine(&peers, store.holder(), *id));
                        wanted
                    };
                    if me
                        .send(StoreChanged {
                            machines,
                            created,
                            removed,
                            retried,
                            zones,
                            wanted,
                        })
                        .await
                        .is_err()
                    {
                        return Ok(());
                    }
                }
            }
            .into_actor(self)
            .map(move |result: Result<(), StoreError>, act, ctx| {
                if act.generation != generation {
                    return;
                }
                if let Err(e) = result {
                    // Stop: the supervisor restarts the provisioner, which
                    // rebuilds everything from the store.
                    log::error!("provisioner: lost the change log: {e}; restarting");
                    ctx.stop();
                }
            }),
        );
    }

    fn reconcile_with_provider(&mut self, ctx: &mut Context<Self>) {
        if !self.shared.leases.holds_job(RECONCILE_JOB) {
            // Another controller holds the reconciliation job.
            return;
        }
        let shared = self.shared.clone();
        let generation = self.generation;
        let work = async move {
            let instances = list_instances(&shared).await?;
            let (mut plan, instances) = shared
                .store
                .blocking(move |s| {
                    let mut comparison = Comparison::of(instances);
                    s.each_machine_summary(|machine| comparison.look_at(&machine))?;
                    // Launches in flight are not strays: their machines'
                    // actors will record them (and nothing is adopted
                    // while they run).
                    Ok(comparison.finish_periodic())
                })
                .await
                .map_err(|e| e.to_string())?;
            let candidates = if shared.harvest.harvests_strays() {
                std::mem::take(&mut plan.strays)
            } else {
                Vec::new()
            };
            let (vanished, candidates) =
                listed_again(&shared, std::mem::take(&mut plan.vanished), candidates).await?;
            let strays = confirm_strays(&shared, candidates, &instances).await?;
            Ok::<_, String>((plan.readdressed, vanished, strays))
        };
        ctx.spawn(work.into_actor(self).map(move |result, act, ctx| {
            if act.generation != generation {
                return;
            }
            let (readdressed, vanished, strays) = match result {
                Ok(found) => found,
                Err(e) => return log::warn!("provisioner: periodic reconciliation failed: {e}"),
            };
            act.record_addresses(readdressed, ctx);
            if !strays.is_empty() {
                log::info!(
                    "provisioner: stopping {} stray instance(s): {}",
                    strays.len(),
                    strays.join(", ")
                );
                act.shared.broker.do_send(Terminate {
                    instances: strays,
                    fence: Fence::Job(RECONCILE_JOB),
                });
            }
            let mut lost = Vec::new();
            for (id, machine) in vanished {
                match act.actors.get(&id) {
                    Some((_, actor)) => actor.do_send(InstanceChanged {
                        instance_id: machine.instance.clone(),
                        state: InstanceState::Terminated,
                    }),
                    None if machine.state == MachineState::Started => {
                        lost.push((id, machine.instance.clone()))
                    }
                    None => {}
                }
            }
            act.lose_instances(lost, ctx);
        }));
    }

    /// Records the addresses the provider now reports for machines'
    /// instances (a public address given after the launch, an elastic
    /// address associated later).
    fn record_addresses(
        &self,
        readdressed: Vec<(MachineId, String, Vec<String>)>,
        ctx: &mut Context<Self>,
    ) {
        if readdressed.is_empty() {
            return;
        }
        let store = self.shared.store.clone();
        ctx.spawn(
            async move {
                match store.set_addresses(readdressed).await {
                    Ok(0) => {}
                    Ok(n) => log::info!("provisioner: recorded new addresses of {n} machine(s)"),
                    Err(e) => log::warn!("provisioner: cannot record machines' addresses: {e}"),
                }
            }
            .into_actor(self),
        );
    }

    /// Renews this controller's leases and the reconciliation job's, stops
    /// the actors of machines whose lease was lost, and takes over the
    /// machines nobody holds (those of a controller that stopped renewing).
    fn keep_leases(&mut self, ctx: &mut Context<Self>) {
        let began = std::time::Instant::now();
        // Actors started after this point were claimed after the renewal
        // began: the renewal's answer does not speak for them.
        let serial_mark = self.next_serial;
        let shared = self.shared.clone();
        let generation = self.generation;
        // With more machines in line than it has room for actors, this
        // controller could start none it took over any sooner, and the
        // machines unheld would be mostly its own line: it looks again once
        // the line is shorter.
        let sweep = self.waiting.len() < self.shared.max_machine_actors;
        let work = async move {
            let renewed = shared.store.renew_leases(shared.leases.ttl()).await?;
            let (reconciler, peers) = take_part(&shared).await?;
            let unheld = if sweep {
                shared
                    .store
                    .blocking(|s| s.unheld_machines(now_ms()))
                    .await?
            } else {
                Vec::new()
            };
            Ok::<_, StoreError>((renewed, reconciler, peers, unheld))
        };
        ctx.spawn(work.into_actor(self).map(move |result, act, ctx| {
            if act.generation != generation {
                return;
            }
            let (renewed, reconciler, peers, unheld) = match result {
                Ok(found) => found,
                Err(e) => {
                    // The lease clock runs out if this goes on: the broker
                    // then refuses to act until a renewal succeeds.
                    log::warn!("provisioner: cannot renew leases: {e}");
                    return;
                }
            };
            let was_reconciler = act.shared.leases.holds_job(RECONCILE_JOB);
            act.shared
                .leases
                .renewed(began, &renewed.machines, &renewed.jobs);
            act.shared.leases.job(RECONCILE_JOB, reconciler);
            if reconciler != was_reconciler {
                log::info!(
                    "provisioner: {} the reconciliation job",
                    if reconciler {
                        "took"
                    } else {
                        "no longer holds"
                    }
                );
            }
            let lost: Vec<MachineId> = act
                .actors
                .iter()
                .filter(|(id, (serial, _))| {
                    *serial <= serial_mark && !renewed.machines.contains(id)
                })
                .map(|(id, _)| *id)
                .collect();
            for id in lost {
                if let Some((_, actor)) = act.actors.remove(&id) {
                    log::warn!("machine {id}: this controller's lease ran out; leaving it");
                    actor.do_send(Shutdown);
                }
            }
            act.report_actors();
            *act.peers.write().unwrap_or_else(PoisonError::into_inner) = peers;
            let fresh: Vec<(MachineId, MachineState)> = unheld
                .into_iter()
                .filter(|(id, _)| !act.actors.contains_key(id) && !act.queued.contains(id))
                .collect();
            let before = std::mem::replace(
                &mut act.unheld_before,
                fresh.iter().map(|(id, _)| *id).collect(),
            );
            let claimable = fresh
                .into_iter()
                .filter(|(id, _)| act.is_mine(*id) || before.contains(id))
                .collect();
            act.take_over(claimable, ctx);
            // Machines left in line for their own controller are looked at
            // again.
            act.admit_waiting(ctx);
        }));
    }

    /// Puts machines nobody holds in line for actors (their leases are
    /// claimed at admission). A machine that may have a launch in flight
    /// (its controller stopped while it was starting) first has the
    /// provider's instances searched for it by its tags, so that the
    /// launch is adopted instead of made again.
    fn take_over(&mut self, machines: Vec<(MachineId, MachineState)>, ctx: &mut Context<Self>) {
        if machines.is_empty() || self.taking_over {
            return;
        }
        log::info!(
            "provisioner: taking over {} machine(s) no controller holds",
            machines.len()
        );
        let launching = machines
            .iter()
            .any(|(_, state)| matches!(state, MachineState::Starting | MachineState::Dying));
        if !launching {
            for (id, _) in machines {
                self.wait_in_line(id, None, false, true);
            }
            self.admit_waiting(ctx);
            return;
        }
        self.taking_over = true;
        let shared = self.shared.clone();
        let generation = self.generation;
        let survey = async move {
            let (summaries, instances) = read_machines_and_instances(&shared).await?;
            let plan = plan_reconciliation(&summaries, &instances);
            drop(instances);
            let adopted = adopted_instances(&shared, &plan.adopt).await?;
            Ok::<_, String>((plan.vanished, adopted))
        };
        ctx.spawn(survey.into_actor(self).map(move |result, act, ctx| {
            if act.generation != generation {
                return;
            }
            act.taking_over = false;
            let (vanished, mut adopted) = match result {
                Ok(found) => found,
                Err(e) => return log::warn!("provisioner: cannot take machines over: {e}"),
            };
            for (id, _) in machines {
                if act.actors.contains_key(&id) {
                    continue;
                }
                let adopt = adopted.remove(&id);
                if let Some(instance) = &adopt {
                    log::info!(
                        "machine {id}: taking over the launch of {} from a controller that stopped",
                        instance.id
                    );
                }
                act.wait_in_line(id, adopt, vanished.contains_key(&id), true);
            }
            act.admit_waiting(ctx);
        }));
    }

    fn check_heartbeats(&mut self, ctx: &mut Context<Self>) {
        let after = self.shared.agent_down_after;
        if after.is_zero() || !self.shared.leases.holds_job(RECONCILE_JOB) {
            return;
        }
        let before = now_ms() - millis(after);
        let store = self.shared.store.clone();
        ctx.spawn(
            async move {
                let silent = store.blocking(move |s| s.silent_agents(before)).await?;
                // Written only if still silent: a heartbeat since the read
                // keeps its machine started.
                store
                    .agents_lost(silent, before, "agent is not responding".into())
                    .await
            }
            .into_actor(self)
            .map(|result, _, _| match result {
                Ok(down) if !down.is_empty() => {
                    log::info!(
                        "provisioner: {} machine(s) down: agent is not responding",
                        down.len()
                    );
                }
                Ok(_) => {}
                Err(e) => log::warn!("provisioner: cannot check agents' heartbeats: {e}"),
            }),
        );
    }
}

/// Says this controller is alive, takes or keeps the reconciliation job's
/// lease (true if held), and reads which controllers are alive.
async fn take_part(shared: &Shared) -> Result<(bool, Vec<String>), StoreError> {
    let ttl = shared.leases.ttl();
    shared.store.announce(ttl).await?;
    let reconciler = shared.store.hold_job(RECONCILE_JOB, ttl).await?;
    let peers = shared
        .store
        .blocking(|s| s.live_controllers(now_ms()))
        .await?;
    Ok((reconciler, peers))
}

/// What the start-up reconciliation found: the machines it compared, its
/// plan, and the strays it confirmed. The instances compared are let go
/// once the plan is made.
struct Survey {
    machines: Vec<MachineSummary>,
    plan: ReconciliationPlan,
    /// The whole instances of the launches the plan adopts, by machine.
    adopted: HashMap<MachineId, Instance>,
    /// Instances to stop (empty unless this controller holds the
    /// reconciliation job and harvests strays).
    strays: Vec<String>,
}

/// The whole instances of the launches `adopt` names (machine and
/// instance id), asked of the provider by id: the listing a
/// reconciliation compares holds only what the comparison needs. A launch
/// the provider no longer lists is left out; its machine's actor goes on
/// as for a machine with none listed.
async fn adopted_instances(
    shared: &Shared,
    adopt: &HashMap<MachineId, String>,
) -> Result<HashMap<MachineId, Instance>, String> {
    if adopt.is_empty() {
        return Ok(HashMap::new());
    }
    let machine_of: HashMap<&str, MachineId> = adopt
        .iter()
        .map(|(machine, instance)| (instance.as_str(), *machine))
        .collect();
    let instances = describe_instances(shared, adopt.values().cloned().collect()).await?;
    Ok(instances
        .into_iter()
        .filter_map(|instance| {
            let machine = *machine_of.get(instance.id.as_str())?;
            Some((machine, instance))
        })
        .collect())
}

/// The `candidates` for stopping that are strays still when the machines
/// are read again after the provider listed its instances. At start-up
/// the first read came before the listing, so an instance another
/// controller launched in between looks like nobody's; by the second read
/// its machine says it is starting (the launch is written before it is
/// made) or has recorded it. (A periodic reconciliation reads the
/// machines after the listing, and a launch made since is in no listing
/// it compares; the second read still sees machines that changed while
/// the first went through them.)
///
/// The second read takes only the machines that decide it
/// ([`deciding_strays`]), so each candidate comes out as it would against
/// every machine. (Every machine again, with 100,000 of them, was a 19 MB
/// array and its strings, while the first read's were still held.)
async fn confirm_strays(
    shared: &Shared,
    candidates: Vec<String>,
    instances: &[ListedInstance],
) -> Result<Vec<String>, String> {
    if candidates.is_empty() {
        return Ok(candidates);
    }
    let (deciding, machine_ids) = deciding_strays(&candidates, instances);
    let instance_ids: Vec<String> = deciding.iter().map(|i| i.id().to_string()).collect();
    let machines = shared
        .store
        .blocking(move |s| s.machine_summaries_of(&instance_ids, &machine_ids))
        .await
        .map_err(|e| e.to_string())?;
    let still: HashSet<String> = periodic_strays(&machines, &deciding).into_iter().collect();
    Ok(candidates
        .into_iter()
        .filter(|id| still.contains(id))
        .collect())
}

/// Every instance of this controller at the provider, as a reconciliation
/// compares them.
async fn list_instances(shared: &Shared) -> Result<Vec<ListedInstance>, String> {
    shared
        .broker
        .send(ListInstances {
            controller_uuid: shared.controller_uuid.clone(),
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
}

/// The instances of this controller that `ids` names, whole, as the
/// provider describes them (those it does not list are left out).
async fn describe_instances(shared: &Shared, ids: Vec<String>) -> Result<Vec<Instance>, String> {
    shared
        .broker
        .send(DescribeInstances {
            controller_uuid: shared.controller_uuid.clone(),
            ids,
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
}

/// Of a periodic reconciliation's `vanished` machines and stray
/// `candidates`, those the provider still says so of when asked again by
/// id: the machines whose instance it still does not list live, and the
/// candidates it still lists live.
///
/// The listing was made before the machines were read, so a machine that
/// recorded a new launch in between records an instance the listing
/// lacks, and an instance stopped in between (its machine then removed)
/// is listed as live with no machine recording it.
async fn listed_again(
    shared: &Shared,
    mut vanished: HashMap<MachineId, Vanished>,
    mut candidates: Vec<String>,
) -> Result<(HashMap<MachineId, Vanished>, Vec<String>), String> {
    if vanished.is_empty() && candidates.is_empty() {
        return Ok((vanished, candidates));
    }
    let ids = vanished
        .values()
        .map(|machine| machine.instance.clone())
        .chain(candidates.iter().cloned())
        .collect();
    let live: HashSet<String> = describe_instances(shared, ids)
        .await?
        .into_iter()
        .filter(|instance| !instance.state.is_gone())
        .map(|instance| instance.id)
        .collect();
    vanished.retain(|_, machine| !live.contains(&machine.instance));
    candidates.retain(|id| live.contains(id));
    Ok((vanished, candidates))
}

/// Every machine in the store, and every instance of this controller at the
/// provider: what a reconciliation compares.
async fn read_machines_and_instances(
    shared: &Shared,
) -> Result<(Vec<MachineSummary>, Vec<ListedInstance>), String> {
    let machines = shared
        .store
        .blocking(|s| s.machine_summaries())
        .await
        .map_err(|e| e.to_string())?;
    let instances = list_instances(shared).await?;
    Ok((machines, instances))
}

impl Actor for Provisioner {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.rebuild(ctx);
        ctx.run_interval(self.shared.leases.renew_every(), |act, ctx| {
            act.keep_leases(ctx)
        });
        let interval = self.shared.reconcile_interval;
        if !interval.is_zero() {
            ctx.run_interval(interval, |act, ctx| act.reconcile_with_provider(ctx));
        }
        let after = self.shared.agent_down_after;
        if !after.is_zero() {
            ctx.run_interval(after / 2, |act, ctx| act.check_heartbeats(ctx));
        }
    }
}

impl Supervised for Provisioner {
    fn restarting(&mut self, _ctx: &mut Context<Self>) {
        // Start again from the store, as after a process restart: stop the
        // machine actors of the old life and forget them.
        for (_, (_, actor)) in self.actors.drain() {
            actor.do_send(Shutdown);
        }
        self.waiting.clear();
        self.queued.clear();
        self.admitting = false;
        self.taking_over = false;
        // Their flush was dropped with the old context: the leases of
        // settled machines stay held (and renewed) until the next stop.
        self.releasing.clear();
        for (_, pen) in self.containers.drain() {
            pen.do_send(Shutdown);
        }
    }
}

impl Handler<ZoneTrackerRestarted> for Provisioner {
    type Result = ();

    fn handle(&mut self, _msg: ZoneTrackerRestarted, ctx: &mut Context<Self>) {
        log::warn!("provisioner: the zone tracker restarted; starting again from the store");
        // Stopping restarts the provisioner (its supervisor's rule), which
        // reads the store again and refills the tracker.
        ctx.stop();
    }
}

impl Handler<ActorStopped> for Provisioner {
    type Result = ();

    fn handle(&mut self, msg: ActorStopped, ctx: &mut Context<Self>) {
        // Only the stopped actor's entry: a replacement may already exist.
        self.forget(msg.machine, msg.serial, ctx);
    }
}

impl Handler<StoreChanged> for Provisioner {
    type Result = ();

    fn handle(&mut self, msg: StoreChanged, ctx: &mut Context<Self>) {
        hooks::checkpoint(kinds::PROVISIONER);
        if let Some(zones) = msg.zones {
            // First: the tracker handles its messages in order, so every
            // zone choice below sees these zones.
            self.shared.zones.do_send(SetZones(zones));
        }
        for id in msg.removed {
            self.queued.remove(&id);
            if let Some((_, actor)) = self.actors.remove(&id) {
                actor.do_send(Gone);
            }
            self.container_gone(id);
        }
        let mut lined_up = false;
        for machine in msg.machines {
            let id = machine.record.id;
            if machine.record.state() == MachineState::Started {
                self.host_ready(
                    id,
                    machine.record.instance_id(),
                    machine.record.machine.lifecycle.zone.as_deref(),
                );
            }
            if self.queued.contains(&id) {
                // Read afresh when its turn comes.
                continue;
            }
            let held = self.shared.holds(&machine.record);
            if !held && !msg.wanted.contains(&id) {
                // Another controller works on it now.
                if let Some((_, actor)) = self.actors.remove(&id) {
                    log::info!("machine {id}: another controller holds it now");
                    actor.do_send(Shutdown);
                    self.report_actors();
                }
                continue;
            }
            let retried = msg.retried.contains(&id);
            match self.actors.get(&id).cloned() {
                Some((_, actor)) if retried => actor.do_send(Retry),
                Some((serial, actor)) => {
                    // The actor may be stopping (settled) as this arrives:
                    // then the change is not lost, a new actor takes it.
                    let retained = machine.clone();
                    ctx.spawn(actor.send(Reconcile(machine)).into_actor(self).map(
                        move |delivered, act, ctx| {
                            if delivered.is_err() {
                                act.forget(id, serial, ctx);
                                if needs_actor(retained.record.state()) {
                                    act.spawn_actor(retained, None, ctx);
                                }
                            }
                        },
                    ));
                }
                None if !needs_actor(machine.record.state()) => {}
                None if held => self.spawn_actor_for(machine, None, retried, ctx),
                None => {
                    // Claimed when its turn comes: a controller holds
                    // leases only on the machines it works on now, so a
                    // long line costs its renewals nothing.
                    self.line_up(Waiting::changed(id, retried));
                    lined_up = true;
                }
            }
        }
        for id in msg.created {
            // One that the start's read of every machine found after its
            // creation is in line already, or has an actor.
            if !self.queued.contains(&id) && !self.actors.contains_key(&id) {
                self.line_up(Waiting::changed(id, false));
                lined_up = true;
            }
        }
        if lined_up {
            self.admit_waiting(ctx);
        }
    }
}

impl Handler<ProviderReport> for Provisioner {
    type Result = ();

    fn handle(&mut self, msg: ProviderReport, ctx: &mut Context<Self>) {
        let change = msg.0;
        // Only departures matter: a launch's result already says an
        // instance runs, and the agent's check-in says it works. So
        // duplicate and late deliveries of other states change nothing.
        if !matches!(
            change.state,
            InstanceState::Stopping
                | InstanceState::Stopped
                | InstanceState::ShuttingDown
                | InstanceState::Terminated
        ) {
            return;
        }
        let store = self.shared.store.clone();
        let instance = change.instance_id.clone();
        ctx.spawn(
            async move {
                store
                    .blocking(move |s| s.engine_machines_by_instance(&instance))
                    .await
            }
            .into_actor(self)
            .map(move |found, act, ctx| {
                let Ok(Some(machine)) = found else { return };
                let id = machine.record.id;
                if heard_since(&machine.record, change.at_ms) {
                    // Late (deliveries come out of order): the agent was
                    // heard after the provider saw the instance go, so it
                    // runs again (an instance stopped and started).
                    log::info!(
                        "machine {id}: a report of instance {} {} at {} ms is older than its \
                         agent's last heartbeat; passed over",
                        change.instance_id,
                        change.state.as_str(),
                        change.at_ms
                    );
                    return;
                }
                match act.actors.get(&id).cloned() {
                    Some((serial, actor)) => {
                        // If the actor stopped meanwhile, do its part.
                        ctx.spawn(
                            actor
                                .send(InstanceChanged {
                                    instance_id: change.instance_id.clone(),
                                    state: change.state,
                                })
                                .into_actor(act)
                                .map(move |delivered, act, ctx| {
                                    if delivered.is_err() {
                                        act.forget(id, serial, ctx);
                                        if machine.record.state() == MachineState::Started {
                                            act.lost_instance(machine, change.state, ctx);
                                        }
                                    }
                                }),
                        );
                    }
                    None if machine.record.state() == MachineState::Started => {
                        act.lost_instance(machine, change.state, ctx);
                    }
                    None => {
                        // Waiting for an actor: it hears of this when it starts.
                        if let Some(waiting) = act.waiting.iter_mut().find(|w| w.id == id) {
                            waiting.vanished = true;
                        }
                    }
                }
            }),
        );
    }
}

/// Whether `record`'s agent was heard after `at_ms`, when a provider saw
/// its instance go.
fn heard_since(record: &MachineRecord, at_ms: i64) -> bool {
    record.last_heartbeat_ms.is_some_and(|heard| heard > at_ms)
}

impl Handler<ReconcileNow> for Provisioner {
    type Result = ();

    fn handle(&mut self, _msg: ReconcileNow, ctx: &mut Context<Self>) {
        self.reconcile_with_provider(ctx);
    }
}

impl Handler<GetLiveActors> for Provisioner {
    type Result = usize;

    fn handle(&mut self, _msg: GetLiveActors, _ctx: &mut Context<Self>) -> usize {
        self.actors.len()
    }
}

/// ContainerProvisioner → Provisioner: start a container's MachineActor
/// (the host is up, or the container is being removed).
#[derive(Message)]
#[rtype(result = "()")]
struct SpawnContainer {
    machine: EngineMachine,
    /// `None` for a container being removed while its host is not up.
    host: Option<Host>,
}

impl Handler<SpawnContainer> for Provisioner {
    type Result = ();

    fn handle(&mut self, msg: SpawnContainer, ctx: &mut Context<Self>) {
        let id = msg.machine.record.id;
        if self.actors.contains_key(&id) {
            return;
        }
        let actor = MachineActor::new(
            msg.machine,
            self.shared.clone(),
            ctx.address().recipient(),
            msg.host,
        );
        self.launch_actor(id, actor, false);
    }
}

/// The ContainerProvisioner: one per host machine with containers. It holds
/// the host's containers until the host is started, then has them
/// provisioned through the provider's container support. A container being
/// removed is not held (`goes_without_host`).
pub struct ContainerProvisioner {
    host: MachineId,
    shared: Arc<Shared>,
    provisioner: Addr<Provisioner>,
    waiting: Vec<EngineMachine>,
    ready: Option<Host>,
    /// It panicked and was restarted: the containers waiting are read
    /// again from the store.
    restarted: bool,
}

impl ContainerProvisioner {
    fn new(
        host: MachineId,
        shared: Arc<Shared>,
        provisioner: Addr<Provisioner>,
    ) -> ContainerProvisioner {
        ContainerProvisioner {
            host,
            shared,
            provisioner,
            waiting: Vec::new(),
            ready: None,
            restarted: false,
        }
    }

    /// Lets every waiting container go once the host is up, and those
    /// that need no host at once.
    fn release(&mut self) {
        let host = self.ready.clone();
        let (go, wait): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|m| host.is_some() || goes_without_host(m.record.state()));
        self.waiting = wait;
        for machine in go {
            self.provisioner.do_send(SpawnContainer {
                machine,
                host: host.clone(),
            });
        }
    }
}

/// Whether a container in `state` goes ahead without waiting for its host
/// to be started. One being removed (`stopping`, or `dying` with its
/// launch's answer lost) needs only its instance stopped, which ends with
/// the host's anyway; held, it would wait for ever for a host that is being
/// removed too, or is down. One to be launched, relaunched or watched
/// waits for its host.
fn goes_without_host(state: MachineState) -> bool {
    matches!(state, MachineState::Stopping | MachineState::Dying)
}

impl Supervised for ContainerProvisioner {
    fn restarting(&mut self, _ctx: &mut Context<Self>) {
        // The containers waiting and whether the host is up are read again
        // from the store when the actor starts (the message it panicked on
        // may have been a container's).
        self.ready = None;
        self.restarted = true;
    }
}

impl Actor for ContainerProvisioner {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if !self.shared.provider.supports_containers() {
            log::warn!(
                "machine {}: provider {} cannot start containers",
                self.host,
                self.shared.provider.name()
            );
        }
        if std::mem::take(&mut self.restarted) {
            let store = self.shared.store.clone();
            let host = self.host;
            ctx.spawn(
                async move {
                    store
                        .blocking(move |s| {
                            let ids = s.container_ids(&host)?;
                            s.engine_machines(Some(&ids))
                        })
                        .await
                }
                .into_actor(self)
                .map(|found, act, _| match found {
                    Ok(containers) => {
                        for container in containers {
                            let known = act
                                .waiting
                                .iter()
                                .any(|m| m.record.id == container.record.id);
                            if needs_actor(container.record.state()) && !known {
                                act.waiting.push(container);
                            }
                        }
                        act.release();
                    }
                    Err(e) => log::error!(
                        "machine {}: cannot read its containers after a restart: {e}",
                        act.host
                    ),
                }),
            );
        }
        // The host may already be up (containers added to a running machine).
        let store = self.shared.store.clone();
        let host = self.host;
        ctx.spawn(
            async move { store.blocking(move |s| s.machine(&host)).await }
                .into_actor(self)
                .map(|found, act, _| {
                    if let Ok(record) = found {
                        if let (MachineState::Started, Some(instance), Some(zone)) = (
                            record.state(),
                            record.instance_id(),
                            record.machine.lifecycle.zone.as_deref(),
                        ) {
                            act.ready = Some(Host {
                                instance_id: instance.to_string(),
                                zone: zone.to_string(),
                            });
                            act.release();
                        }
                    }
                }),
        );
    }
}

/// Provisioner → ContainerProvisioner: a container of this host needs an
/// actor; one to be launched waits until the host is started. Its record
/// replaces any held for it (a container waiting to be launched may since
/// have been removed).
#[derive(Message)]
#[rtype(result = "()")]
struct AddContainer(EngineMachine);

/// Provisioner → ContainerProvisioner: a container of this host left the
/// store; if it waits, it is let go.
#[derive(Message)]
#[rtype(result = "()")]
struct ContainerGone(MachineId);

/// Provisioner → ContainerProvisioner: the host is started (its instance
/// and zone); waiting containers go ahead.
#[derive(Message)]
#[rtype(result = "()")]
struct HostReady(Host);

impl Handler<AddContainer> for ContainerProvisioner {
    type Result = ();

    fn handle(&mut self, msg: AddContainer, _ctx: &mut Context<Self>) {
        hooks::checkpoint(kinds::CONTAINER_PROVISIONER);
        let id = msg.0.record.id;
        self.waiting.retain(|m| m.record.id != id);
        self.waiting.push(msg.0);
        self.release();
    }
}

impl Handler<ContainerGone> for ContainerProvisioner {
    type Result = ();

    fn handle(&mut self, msg: ContainerGone, _ctx: &mut Context<Self>) {
        self.waiting.retain(|m| m.record.id != msg.0);
    }
}

impl Handler<HostReady> for ContainerProvisioner {
    type Result = ();

    fn handle(&mut self, msg: HostReady, _ctx: &mut Context<Self>) {
        self.ready = Some(msg.0);
        self.release();
    }
}

impl Handler<Shutdown> for ContainerProvisioner {
    type Result = ();

    fn handle(&mut self, _msg: Shutdown, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

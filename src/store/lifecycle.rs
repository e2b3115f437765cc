//! The one writer of a machine's life.
//!
//! Every change of a machine's lifecycle state goes through here: the
//! engine's events ([`Store::apply`]), an agent's check-in and heartbeat,
//! over HTTP or from the simulated cloud ([`Store::agent_connect`],
//! [`Store::agent_heartbeat`], [`Store::agents_alive`]), and the user's
//! `remove-machine` and `retry-provisioning` (through `apply_tx` inside
//! their own transactions). Each applies the domain's [`transition`] with
//! the controller's configured [`Policy`] (see [`Store::set_policy`]),
//! performs the store's part of the effect (a fresh one-time password for
//! a launch, the time of the next retry, replaced constraints, removal of
//! a dead machine), writes the machine in one statement and appends the
//! change to the change log.
//!
//! # Errors
//!
//! An event that the lifecycle does not accept in the machine's state is
//! always [`StoreError::Conflict`] (HTTP 409), worded by [`illegal`] for
//! the operation that asked, and nothing is written. (The engine, which
//! decides from the machine it holds, gets [`ApplyError::Illegal`]
//! instead, before anything is queued.) An engine's save of a machine that
//! someone else moved meanwhile is a conflict too: the engine reads the
//! machine again and decides anew.

use std::time::Duration;

use diesel::prelude::*;

use crate::contracts::secrets::{hash_secret, new_secret, secret_matches, Secret};
use crate::domain::base::Base;
use crate::domain::constraints::Constraints;
use crate::domain::instance_types::HourlyPrice;
use crate::domain::machine::{
    retry_cause, retry_message, transition, Effect, Event, EventKind, IllegalTransition, Jitter,
    Machine, MachineState, Policy,
};
use crate::domain::names::MachineId;
use crate::store::census;
use crate::store::db::{per_backend, Conn};
use crate::store::machine_save::SaveRow;
use crate::store::records::{stored, MachineLease, MachineRecord, MachineRow};
use crate::store::schema::{machines, units};
use crate::store::together::{AgentCheckIn, EngineSave};
use crate::store::writer::Tx;
use crate::store::{millis, now_ms, ChangeKind, Entity, Origin, Store, StoreError};

/// How long an agent that checks in before its machine's instance is
/// recorded is held while the engine records it (usually a commit away),
/// before it is told to come back later.
pub const EARLY_AGENT_WAIT: Duration = Duration::from_secs(5);

/// One machine, read in a store operation's transaction.
pub(crate) fn load_machine(tx: &mut Tx<'_>, id: &MachineId) -> Result<MachineRecord, StoreError> {
    let row: Option<MachineRow> = machines::table
        .find(id.to_string())
        .select(MachineRow::as_select())
        .get_result(tx.conn)
        .optional()?;
    row.ok_or_else(|| StoreError::NotFound(format!("machine {id} not found")))?
        .try_into()
}

/// One event of a machine's lifecycle, to apply and write.
#[derive(Clone, Debug, PartialEq)]
pub struct MachineEvent {
    pub id: MachineId,
    pub event: Event,
    /// Shown as the status message when the transition leaves none: why
    /// the event happened, in the words of whoever saw it.
    pub message: Option<String>,
    /// Fields written beside the lifecycle (instance type, hardware,
    /// whether a retry time is stored and must be cleared).
    pub update: MachineUpdate,
}

impl MachineEvent {
    /// `event` for machine `id`, with nothing else to write.
    pub fn new(id: MachineId, event: Event) -> MachineEvent {
        MachineEvent {
            id,
            event,
            message: None,
            update: MachineUpdate::default(),
        }
    }
}

/// What the writer did: the machine now stored (or removed, when `dead`)
/// and the effect the engine is to perform.
#[derive(Clone, Debug, PartialEq)]
pub struct Applied {
    pub next: Machine,
    pub effect: Effect,
    /// For a launch: the fresh one-time password whose hash was stored
    /// with the machine, to hand to the new instance's agent.
    pub password: Option<Secret>,
}

/// Why the engine's event was not written.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ApplyError {
    /// The lifecycle does not accept the event in the state the engine
    /// holds: nothing was written, and nothing needs to be.
    #[error(transparent)]
    Illegal(#[from] IllegalTransition),
    /// The store refused or failed the write: [`StoreError::Conflict`] if
    /// someone else moved the machine meanwhile, [`StoreError::NotFound`]
    /// if it has gone.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// An engine's event decided by [`Store::decide`], ready to
/// [`Store::commit`].
#[derive(Debug)]
pub struct Decided {
    id: MachineId,
    /// The state it was decided from, which the write checks.
    expected: MachineState,
    decision: Decision,
}

impl Decided {
    /// Whether anything is to be written: a change, or a removal.
    pub fn needs_write(&self) -> bool {
        !self.decision.unchanged || self.decision.applied.next.state == MachineState::Dead
    }

    /// The result, for an event that needs no write (or whose write the
    /// engine leaves to the next step, see [`Decided::stored_as`]).
    pub fn into_applied(self) -> Applied {
        self.decision.applied
    }

    /// The same decision, written only if the store still holds the
    /// machine in `stored`: for an engine whose machine ran ahead of the
    /// store by a step it did not write (a pending machine taken to
    /// `allocating` while its zone is chosen, written with the choice).
    #[must_use]
    pub fn stored_as(mut self, stored: MachineState) -> Decided {
        self.expected = stored;
        self
    }
}

/// A decided event, ready to write.
#[derive(Debug)]
pub(super) struct Decision {
    pub(super) applied: Applied,
    pub(super) update: MachineUpdate,
    /// Neither the lifecycle nor any other field changes: nothing to write.
    pub(super) unchanged: bool,
    /// Whether the machine keeps the instance it was decided from.
    pub(super) instance: Instance,
}

/// The one conflict of the lifecycle: `event` is not accepted by machine
/// `id` in the state it is in, worded for the operation that asked.
pub fn illegal(id: MachineId, cause: &IllegalTransition) -> StoreError {
    let message = match cause {
        IllegalTransition::NotAllowed { state, event } => match event {
            EventKind::Retry => format!(
                "machine {id} is not in provisioning error (it is {state}): only machines in error can be retried"
            ),
            EventKind::Destroy => format!("cannot remove machine {id}: {cause}"),
            EventKind::AgentConnected if *state == MachineState::Starting => format!(
                "machine {id} is still starting: its instance is not recorded yet; try again"
            ),
            _ => format!("machine {id}: {cause}"),
        },
        IllegalTransition::MissingRecord { .. } => format!("machine {id}: {cause}"),
    };
    StoreError::Conflict(message)
}

/// Applies `event` to `current` and works out the store's part of the
/// effect. Pure but for the fresh one-time password of a launch.
pub(super) fn decide(
    current: &Machine,
    request: MachineEvent,
    policy: &Policy,
    jitter: Jitter,
    now_ms: i64,
) -> Result<Decision, IllegalTransition> {
    let MachineEvent {
        id,
        event,
        message,
        mut update,
    } = request;
    let step = transition(current, &event, policy, jitter)?;
    let mut next = step.next;
    match (message, &next.lifecycle.last_error) {
        (Some(message), None) => next.lifecycle.last_error = Some(message),
        // The engine saw why the agent never came (its instance went):
        // that, not the timeout the lifecycle supposes.
        (Some(message), Some(_)) if matches!(event, Event::BootstrapTimedOut) => {
            next.lifecycle.last_error = Some(format!(
                "{message} (attempt {} of {})",
                next.lifecycle.bootstrap_timeouts, policy.bootstrap_attempts
            ));
        }
        _ => {}
    }
    let mut password = None;
    match &step.effect {
        Effect::LaunchInstance { .. } => {
            let secret = new_secret();
            update.otp_hash = Some(hash_secret(secret.expose()));
            // From `starting`, the launch resumes one already sent.
            update.keeps_earlier_otp = current.state == MachineState::Starting;
            password = Some(secret);
        }
        Effect::ScheduleRetry { after } => {
            update.retry_at_ms = Some(now_ms.saturating_add(millis(*after)));
            if next.state == MachineState::Retrying {
                // Status says why and when, in Juju's words.
                let cause = next.lifecycle.last_error.as_deref().map(retry_cause);
                let left = policy
                    .backoff
                    .attempts
                    .get()
                    .saturating_sub(next.lifecycle.attempts_used);
                next.lifecycle.last_error = Some(retry_message(
                    id,
                    cause.unwrap_or("unknown cause"),
                    *after,
                    left,
                ));
            }
        }
        Effect::ReplaceConstraints(constraints) => {
            update.constraints = Some(Constraints::clone(constraints));
        }
        _ => {}
    }
    if next.state == MachineState::Retrying {
        // Its retry time stays until the retry is due.
        update.clear_retry_at = false;
    }
    let unchanged = next == *current && update == MachineUpdate::default();
    let instance = if next.lifecycle.instance_id == current.lifecycle.instance_id {
        Instance::Kept
    } else {
        Instance::Written
    };
    Ok(Decision {
        applied: Applied {
            next,
            effect: step.effect,
            password,
        },
        update,
        unchanged,
        instance,
    })
}

/// Writes a decision: the machine, or its removal when it is dead. With
/// a `fence` (a controller's holder id), only while that controller holds
/// the machine's lease.
pub(super) fn write(
    tx: &mut Tx<'_>,
    id: MachineId,
    expected: Option<MachineState>,
    decision: &Decision,
    fence: Option<&str>,
) -> Result<(), StoreError> {
    let next = &decision.applied.next;
    if next.state == MachineState::Dead {
        if let Some(holder) = fence {
            check_lease(tx, &id, holder)?;
        }
        // Dead is never stored: the machine goes instead.
        delete_machine_rows(tx, &id)
    } else if decision.unchanged {
        Ok(())
    } else {
        save_machine(
            tx,
            &id,
            expected,
            next,
            &decision.update,
            fence,
            decision.instance,
        )
    }
}

/// The conflict of a controller writing a machine whose lease it does not
/// hold (it ran out and another controller may have taken it).
fn lease_lost(id: &MachineId, holder: Option<String>) -> StoreError {
    StoreError::Conflict(match holder {
        Some(holder) => format!("machine {id} is held by controller {holder}"),
        None => format!("machine {id} is held by no controller: its lease ran out"),
    })
}

/// Fails unless controller `holder` holds a live lease on machine `id`.
fn check_lease(tx: &mut Tx<'_>, id: &MachineId, holder: &str) -> Result<(), StoreError> {
    let lease: Option<(Option<String>, Option<i64>)> = machines::table
        .find(id.to_string())
        .select((machines::lease_holder, machines::lease_expires_ms))
        .get_result(tx.conn)
        .optional()?;
    let Some((held_by, until)) = lease else {
        return Err(StoreError::NotFound(format!("machine {id} not found")));
    };
    match MachineLease::of(held_by.clone(), until) {
        Some(lease) if lease.is_held_by(holder, tx.now_ms) => Ok(()),
        _ => Err(lease_lost(id, held_by.filter(|h| h != holder))),
    }
}

fn policy_of(store_policy: &std::sync::RwLock<Policy>) -> Policy {
    match store_policy.read() {
        Ok(policy) => *policy,
        Err(poisoned) => *poisoned.into_inner(),
    }
}

pub(super) fn jitter() -> Jitter {
    Jitter::new(rand::random::<f64>() * 0.999).unwrap_or(Jitter::NONE)
}

/// Applies `request` to `current`, a machine already read in this
/// transaction (or, for the engine inside another store operation, the
/// machine as the engine holds it, with `expected` its state), and writes
/// it, fenced by `fence`'s lease when given.
///
/// # Errors
///
/// As [`Store::commit`]; an event `current` does not accept is a conflict.
pub(crate) fn apply_to(
    tx: &mut Tx<'_>,
    current: &Machine,
    expected: Option<MachineState>,
    request: MachineEvent,
    policy: &Policy,
    fence: Option<&str>,
) -> Result<Applied, StoreError> {
    let id = request.id;
    let decision =
        decide(current, request, policy, jitter(), tx.now_ms).map_err(|e| illegal(id, &e))?;
    write(tx, id, expected, &decision, fence)?;
    Ok(decision.applied)
}

/// Applies one lifecycle event to a machine as stored, inside a store
/// operation's transaction (the user's remove and retry, agents'
/// check-ins).
///
/// # Errors
///
/// [`StoreError::NotFound`]; [`StoreError::Conflict`] for an event the
/// machine's state does not accept (see [`illegal`]).
pub(crate) fn apply_tx(
    tx: &mut Tx<'_>,
    request: MachineEvent,
    policy: &Policy,
) -> Result<Applied, StoreError> {
    let current = load_machine(tx, &request.id)?.machine;
    apply_to(tx, &current, None, request, policy, None)
}

/// Deletes a machine and the units on it, and logs the removal (nothing
/// when it is already gone).
pub(crate) fn delete_machine_rows(tx: &mut Tx<'_>, id: &MachineId) -> Result<(), StoreError> {
    census::release(tx, &id.to_string())?;
    diesel::delete(units::table.filter(units::machine_id.eq(id.to_string()))).execute(tx.conn)?;
    let gone = diesel::delete(machines::table.find(id.to_string())).execute(tx.conn)?;
    if gone > 0 {
        tx.record(Entity::Machine, id.to_string(), ChangeKind::Removed, "");
    }
    Ok(())
}

/// What one try of an agent's check-in found.
pub(crate) enum CheckIn {
    Connected(Secret),
    /// The instance runs but the engine has not recorded it yet: nothing
    /// was changed and the password still works.
    NotYet(StoreError),
}

/// What a check-in does, decided from its machine as read.
pub(super) enum CheckInStep {
    /// Nothing to write: the answer.
    Answer(Result<CheckIn, StoreError>),
    /// The machine, in `state` as read, is to be saved as `decision`, and
    /// the agent given `credential`.
    Save {
        state: MachineState,
        decision: Box<Decision>,
        credential: Secret,
    },
    /// The password is spent, and the agent names the credential it chose:
    /// a check-in made before whose answer it never got, if the machine
    /// holds that credential (see [`CheckInProof`]).
    Repeated { chosen: Secret },
}

/// What an agent checks in with: its one-time password and, if it chose
/// one, the credential it asks the controller to keep. An agent that
/// chooses its credential can write it down before it checks in, and ask
/// again with the same password and credential when the answer to its
/// check-in was lost (the controller restarted after committing it, the
/// connection broke): the controller answers as it did, without a second
/// transition. Without the credential, a spent password is refused.
#[derive(Clone, Debug)]
pub struct CheckInProof {
    pub password: Secret,
    pub chosen: Option<Secret>,
}

impl CheckInProof {
    /// A password alone: the controller makes the credential.
    pub fn password(password: Secret) -> CheckInProof {
        CheckInProof {
            password,
            chosen: None,
        }
    }
}

/// Decides machine `id`'s check-in with `proof` from `row`, its machine
/// as read (`None`: it has gone), at `now_ms`.
pub(super) fn check_in_step(
    row: Option<MachineRow>,
    id: MachineId,
    proof: &CheckInProof,
    policy: &Policy,
    now_ms: i64,
) -> CheckInStep {
    let Some(row) = row else {
        return CheckInStep::Answer(Err(StoreError::NotFound(format!("machine {id} not found"))));
    };
    // One password's hash, or several a space apart (a launch resumed
    // under the same client token keeps the earlier).
    let valid = row.otp_hash.as_deref().is_some_and(|hashes| {
        hashes
            .split(' ')
            .any(|hash| secret_matches(proof.password.expose(), hash))
    });
    if !valid {
        let checked_in = row.otp_hash.is_none()
            && matches!(
                MachineState::parse(&row.state),
                Some(MachineState::Started | MachineState::Down)
            );
        return match &proof.chosen {
            Some(chosen) if checked_in => CheckInStep::Repeated {
                chosen: chosen.clone(),
            },
            _ => CheckInStep::Answer(Err(spent(id))),
        };
    }
    let record = match MachineRecord::try_from(row) {
        Ok(record) => record,
        Err(e) => return CheckInStep::Answer(Err(e)),
    };
    let credential = proof.chosen.clone().unwrap_or_else(new_secret);
    let request = MachineEvent {
        update: MachineUpdate {
            // The exchange and the transition in one statement.
            credential_hash: Some(hash_secret(credential.expose())),
            heartbeat_ms: Some(now_ms),
            ..MachineUpdate::default()
        },
        ..MachineEvent::new(id, Event::AgentConnected)
    };
    match decide(&record.machine, request, policy, jitter(), now_ms) {
        Ok(decision) => CheckInStep::Save {
            state: record.state(),
            decision: Box::new(decision),
            credential,
        },
        Err(e) => CheckInStep::Answer(refused_check_in(record.state(), illegal(id, &e))),
    }
}

/// Machine `id`'s password does not open it.
fn spent(id: MachineId) -> StoreError {
    StoreError::Unauthorized(format!(
        "machine {id}: the one-time password is wrong or was already used"
    ))
}

/// A check-in refused with `e` by a machine in `state`: one still starting
/// may take it later.
fn refused_check_in(state: MachineState, e: StoreError) -> Result<CheckIn, StoreError> {
    if state == MachineState::Starting {
        Ok(CheckIn::NotYet(e))
    } else {
        Err(e)
    }
}

/// One try of machine `id`'s check-in, on its own.
///
/// # Errors
///
/// As [`Store::agent_connect`].
pub(super) fn agent_connect_tx(
    tx: &mut Tx<'_>,
    id: MachineId,
    proof: &CheckInProof,
    policy: &Policy,
) -> Result<CheckIn, StoreError> {
    tx.set_origin(Origin::Agent);
    let key = id.to_string();
    // On each backend's own connection: through `Conn` the statement's
    // text is written out afresh on every call, and every agent checks in.
    let row: Option<MachineRow> = per_backend!(tx.conn, c => machines::table
        .find(&key)
        .select(MachineRow::as_select())
        .get_result(c)
        .optional()?);
    match check_in_step(row, id, proof, policy, tx.now_ms) {
        CheckInStep::Answer(answer) => answer,
        CheckInStep::Repeated { chosen } => {
            let held: Option<String> = per_backend!(tx.conn, c => machines::table
                .find(&key)
                .select(machines::credential_hash)
                .get_result(c)?);
            if held.is_some_and(|hash| secret_matches(chosen.expose(), &hash)) {
                Ok(CheckIn::Connected(chosen))
            } else {
                Err(spent(id))
            }
        }
        CheckInStep::Save {
            state,
            decision,
            credential,
        } => match write(tx, id, None, &decision, None) {
            Ok(()) => Ok(CheckIn::Connected(credential)),
            Err(e) => refused_check_in(state, e),
        },
    }
}

impl Store {
    /// Sets the lifecycle policy every transition is applied with (the
    /// `[provisioner]` settings); every handle on this store shares it.
    /// Until it is set, [`Policy::default`].
    pub fn set_policy(&self, policy: Policy) {
        match self.policy.write() {
            Ok(mut current) => *current = policy,
            Err(poisoned) => *poisoned.into_inner() = policy,
        }
    }

    /// The lifecycle policy in force.
    pub fn policy(&self) -> Policy {
        policy_of(&self.policy)
    }

    /// The engine applies one of its events to a machine, as it last saved
    /// or read it (`current`), and writes the result before acting on it:
    /// [`Store::decide`], then [`Store::commit`] if there is anything to
    /// write. Origin: the engine.
    ///
    /// # Errors
    ///
    /// As [`Store::decide`] and [`Store::commit`].
    pub async fn apply(
        &self,
        current: Machine,
        request: MachineEvent,
    ) -> Result<Applied, ApplyError> {
        let decided = self.decide(&current, request)?;
        if !decided.needs_write() {
            return Ok(decided.decision.applied);
        }
        Ok(self.commit_fenced(decided, None).await?)
    }

    /// The first half of [`Store::apply`], without waiting: the transition
    /// from `current` with the store's policy and the store's part of its
    /// effect (a launch's one-time password, a retry's time), ready to
    /// commit. An actor uses it to act at once on an event that changes
    /// nothing.
    ///
    /// # Errors
    ///
    /// [`IllegalTransition`] if the lifecycle does not accept the event in
    /// `current`'s state: nothing is to be written.
    pub fn decide(
        &self,
        current: &Machine,
        request: MachineEvent,
    ) -> Result<Decided, IllegalTransition> {
        let id = request.id;
        let decision = decide(current, request, &self.policy(), jitter(), now_ms())?;
        Ok(Decided {
            id,
            expected: current.state,
            decision,
        })
    }

    /// The second half of [`Store::apply`] for a machine's actor: writes a
    /// decided event if the stored machine is still in the state it was
    /// decided from and this controller still holds its lease.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`] if the machine has gone;
    /// [`StoreError::Conflict`] if someone else (a user's remove or retry,
    /// an agent) moved it meanwhile, or this controller no longer holds
    /// its lease: the engine reads it again and decides anew.
    pub async fn commit(&self, decided: Decided) -> Result<Applied, StoreError> {
        let holder = self.holder().to_string();
        self.commit_fenced(decided, Some(holder)).await
    }

    async fn commit_fenced(
        &self,
        decided: Decided,
        fence: Option<String>,
    ) -> Result<Applied, StoreError> {
        let Decided {
            id,
            expected,
            decision,
        } = decided;
        match (fence, self.guard.is_some()) {
            (Some(fence), false) => {
                let save = EngineSave::new(id, expected, decision, fence);
                self.writer.save(save).await
            }
            (fence, _) => {
                self.write(move |tx| {
                    tx.set_origin(Origin::Engine);
                    write(tx, id, Some(expected), &decision, fence.as_deref())?;
                    Ok(decision.applied)
                })
                .await
            }
        }
    }

    /// Sets the message `status` shows for a machine without changing its
    /// state, if it is still in `expected` (a machine waiting on the
    /// provider says why).
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`]; [`StoreError::Conflict`] if the machine
    /// moved meanwhile.
    pub async fn note_machine(
        &self,
        id: MachineId,
        expected: Machine,
        message: String,
    ) -> Result<(), StoreError> {
        let holder = self.holder().to_string();
        self.write(move |tx| {
            tx.set_origin(Origin::Engine);
            let mut noted = expected.clone();
            noted.lifecycle.last_error = Some(message);
            save_machine(
                tx,
                &id,
                Some(expected.state),
                &noted,
                &MachineUpdate::default(),
                Some(&holder),
                Instance::Kept,
            )
        })
        .await
    }

    /// A machine agent exchanges its one-time password for the machine's
    /// permanent credential, and the machine is started. The password works
    /// once. Both the HTTP check-in and the simulated cloud's agents come
    /// here.
    ///
    /// An agent can come before the engine has recorded its instance (the
    /// machine is still `starting`): it is held, trying again after each
    /// commit, for up to [`EARLY_AGENT_WAIT`].
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`]; [`StoreError::Unauthorized`] for a wrong
    /// or already used password; [`StoreError::Conflict`] (nothing
    /// changed, the password still works) if the machine does not accept
    /// an agent now, or is still starting after the wait.
    pub async fn agent_connect(
        &self,
        id: MachineId,
        one_time_password: Secret,
    ) -> Result<Secret, StoreError> {
        self.agent_check_in(id, CheckInProof::password(one_time_password))
            .await
    }

    /// [`Store::agent_connect`] with `proof`: a credential the agent chose
    /// is the one kept, and a check-in repeated with the same password and
    /// credential after its answer was lost is answered as it was.
    ///
    /// # Errors
    ///
    /// As [`Store::agent_connect`].
    pub async fn agent_check_in(
        &self,
        id: MachineId,
        proof: CheckInProof,
    ) -> Result<Secret, StoreError> {
        let mut head = self.watch_revision();
        let give_up = tokio::time::Instant::now() + EARLY_AGENT_WAIT;
        loop {
            let policy = self.policy();
            let proof = proof.clone();
            let tried = if self.guard.is_some() {
                self.write(move |tx| agent_connect_tx(tx, id, &proof, &policy))
                    .await?
            } else {
                let check_in = AgentCheckIn::new(id, proof, policy);
                self.writer.check_in(check_in).await?
            };
            match tried {
                CheckIn::Connected(credential) => return Ok(credential),
                CheckIn::NotYet(why) => {
                    let waited = tokio::time::timeout_at(give_up, head.changed()).await;
                    if !matches!(waited, Ok(Ok(()))) {
                        return Err(why);
                    }
                }
            }
        }
    }

    /// A machine agent says it is alive; a machine shown `down` is started
    /// again.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`]; [`StoreError::Unauthorized`] for a wrong
    /// credential.
    pub async fn agent_heartbeat(
        &self,
        id: MachineId,
        credential: Secret,
    ) -> Result<MachineState, StoreError> {
        let policy = self.policy();
        self.write(move |tx| {
            tx.set_origin(Origin::Agent);
            let record = load_machine(tx, &id)?;
            let stored_hash: Option<String> = machines::table
                .find(id.to_string())
                .select(machines::credential_hash)
                .get_result(tx.conn)?;
            if !stored_hash.is_some_and(|hash| secret_matches(credential.expose(), &hash)) {
                return Err(StoreError::Unauthorized(format!(
                    "machine {id}: wrong agent credential"
                )));
            }
            diesel::update(machines::table.find(id.to_string()))
                .set(machines::last_heartbeat_ms.eq(tx.now_ms))
                .execute(tx.conn)?;
            if record.state() == MachineState::Down {
                let request = MachineEvent::new(id, Event::AgentConnected);
                let applied = apply_to(tx, &record.machine, None, request, &policy, None)?;
                return Ok(applied.next.state);
            }
            Ok(record.state())
        })
        .await
    }

    /// Agents the provider vouches for (the simulated cloud's) are alive:
    /// their heartbeat time is now, unless one was stored less than
    /// `heard_within` ago (a check-in a moment before, say: the row is not
    /// written again for nothing), and those shown `down` are started
    /// again.
    ///
    /// Each [`VOUCHED_PER_WRITE`] machines are a write of their own. A
    /// write runs in a savepoint, and on SQLite the writer keeps what that
    /// savepoint would undo in memory until it ends (the writer's
    /// `temp_store` is `MEMORY`; see [`crate::store::db`]): one write for
    /// every machine a cloud vouches for would hold a copy of every page
    /// of the machines table at once (40 MB with 100,000 machines). The
    /// writes are queued together, so they still share the writer's
    /// batches.
    ///
    /// A heartbeat kept this way is at most `heard_within` older than the
    /// agent's last, so an agent reporting every `interval` looks silent
    /// only after `interval + heard_within`: the caller keeps that under
    /// the time after which a silent agent is shown down.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] only; unknown machines are ignored. The
    /// writes before a failed one stay.
    pub async fn agents_alive(
        &self,
        ids: Vec<MachineId>,
        heard_within: Duration,
    ) -> Result<(), StoreError> {
        let policy = self.policy();
        let heard_within = millis(heard_within);
        self.write_in_chunks(&ids, move |tx, keys| {
            tx.set_origin(Origin::Agent);
            let heard_since = tx.now_ms.saturating_sub(heard_within);
            diesel::update(
                machines::table.filter(machines::id.eq_any(keys)).filter(
                    machines::last_heartbeat_ms
                        .is_null()
                        .or(machines::last_heartbeat_ms.le(heard_since)),
                ),
            )
            .set(machines::last_heartbeat_ms.eq(tx.now_ms))
            .execute(tx.conn)?;
            let down: Vec<String> = machines::table
                .filter(machines::id.eq_any(keys))
                .filter(machines::state.eq(MachineState::Down.as_str()))
                .select(machines::id)
                .load(tx.conn)?;
            for id in down {
                let id: MachineId = stored("machine id", &id)?;
                apply_tx(tx, MachineEvent::new(id, Event::AgentConnected), &policy)?;
            }
            Ok(Vec::<()>::new())
        })
        .await?;
        Ok(())
    }

    /// Machines `ids`, read as silent since `before_ms`, are shown down
    /// with `message`: those still `started` and still unheard since then
    /// when the write comes (a heartbeat between the read and the write
    /// keeps its machine started). Returns those shown down.
    ///
    /// # Errors
    ///
    /// The store's.
    pub async fn agents_lost(
        &self,
        ids: Vec<MachineId>,
        before_ms: i64,
        message: String,
    ) -> Result<Vec<MachineId>, StoreError> {
        let policy = self.policy();
        self.write_in_chunks(&ids, move |tx, keys| {
            let silent: Vec<String> = machines::table
                .filter(machines::id.eq_any(keys))
                .filter(machines::state.eq(MachineState::Started.as_str()))
                .filter(machines::last_heartbeat_ms.lt(before_ms))
                .select(machines::id)
                .load(tx.conn)?;
            let mut down = Vec::with_capacity(silent.len());
            for id in silent {
                let id: MachineId = stored("machine id", &id)?;
                let lost = MachineEvent {
                    message: Some(message.clone()),
                    ..MachineEvent::new(id, Event::AgentLost)
                };
                apply_tx(tx, lost, &policy)?;
                down.push(id);
            }
            Ok(down)
        })
        .await
    }

    /// `write` of machines `ids`, [`VOUCHED_PER_WRITE`] of them (as keys)
    /// to a write, the writes queued together; what each gives, in order.
    async fn write_in_chunks<T, F>(&self, ids: &[MachineId], write: F) -> Result<Vec<T>, StoreError>
    where
        T: Send + 'static,
        F: Fn(&mut Tx<'_>, &[String]) -> Result<Vec<T>, StoreError> + Clone + Send + 'static,
    {
        let writes = ids.chunks(VOUCHED_PER_WRITE).map(|chunk| {
            let keys: Vec<String> = chunk.iter().map(ToString::to_string).collect();
            let write = write.clone();
            self.write(move |tx| write(tx, &keys))
        });
        let written = futures_util::future::try_join_all(writes).await?;
        Ok(written.into_iter().flatten().collect())
    }
}

/// How many machines [`Store::agents_alive`] and [`Store::agents_lost`]
/// write in one write (and one statement).
pub const VOUCHED_PER_WRITE: usize = 1000;

/// Fields that change beside the lifecycle record when the engine (or a
/// user operation) saves a machine.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MachineUpdate {
    pub constraints: Option<Constraints>,
    /// An enlisted host's own base, for a machine that had none of its
    /// units' to meet.
    pub base: Option<Base>,
    pub instance_type: Option<String>,
    /// What the instance costs an hour (not for a container).
    pub hourly_price: Option<HourlyPrice>,
    pub hardware: Option<String>,
    /// The instance's addresses, the preferred first.
    pub addresses: Option<Vec<String>>,
    /// A fresh one-time password's hash, for a launch.
    pub otp_hash: Option<String>,
    /// The launch repeats one already sent, under the same client token
    /// (a launch in flight resumed after a restart): the cloud answers it
    /// with the instance the first one started, if it did, whose agent
    /// has the first password. That one stays valid beside the fresh one
    /// until the agent checks in (with at most two others between).
    pub keeps_earlier_otp: bool,
    pub retry_at_ms: Option<i64>,
    pub clear_retry_at: bool,
    /// The agent exchanged its one-time password: the password's hash goes
    /// and this credential's hash takes its place, in the same statement
    /// as the transition to `started`.
    pub credential_hash: Option<String>,
    /// When the agent was last heard from, if it was just now.
    pub heartbeat_ms: Option<i64>,
    /// The zone census's kind the machine is now counted as (its zone
    /// was just chosen; see [`crate::store::census`]).
    pub spread_kind: Option<String>,
}

/// Whether a save keeps the instance the machine was read or decided with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Instance {
    /// It does, as far as the caller knows.
    Kept,
    /// It may not: a new instance, or none.
    Written,
}

/// Writes a machine's lifecycle (and any extra fields) in one statement
/// and logs the change, if the machine is still in `expected` (when given): the check is the UPDATE's own `WHERE`, so a save costs one
/// statement, and only a save that changed nothing looks at why.
///
/// On SQLite, a save that keeps the machine's `instance` is written first
/// in the shape that leaves `instance_id` (and so its index) alone,
/// guarded by that instance; if that matches no row, the save is written
/// whole, as any other save is, before anything looks at why. Either way
/// the machine ends as `machine`.
///
/// # Errors
///
/// [`StoreError::NotFound`] if the machine has gone;
/// [`StoreError::Conflict`] if it is no longer in `expected`.
fn save_machine(
    tx: &mut Tx<'_>,
    id: &MachineId,
    expected: Option<MachineState>,
    machine: &Machine,
    update: &MachineUpdate,
    fence: Option<&str>,
    instance: Instance,
) -> Result<(), StoreError> {
    if releases_zone(expected, machine) {
        census::release(tx, &id.to_string())?;
    }
    let row = SaveRow::of(id, machine, update);
    let mut found = 0;
    if let (Conn::Sqlite(conn), Instance::Kept) = (&mut *tx.conn, instance) {
        found = row
            .save::<true>(expected, machine, update, fence, tx.now_ms)
            .execute(conn)?;
    }
    if found == 0 {
        let save = row.save::<false>(expected, machine, update, fence, tx.now_ms);
        found = per_backend!(tx.conn, conn => save.execute(conn)?);
    }
    if found == 0 {
        return Err(why_not_saved(tx, id, expected, fence)?);
    }
    record_save(tx, row.key(), machine);
    Ok(())
}

/// Whether a save of `machine`, stored in `expected`, takes it out of the
/// zone census: it loses its zone. (Pending and allocating machines never
/// hold one.)
pub(super) fn releases_zone(expected: Option<MachineState>, machine: &Machine) -> bool {
    let may_hold_zone = !matches!(
        expected,
        Some(MachineState::Pending | MachineState::Allocating)
    );
    machine.lifecycle.zone.is_none() && may_hold_zone
}

/// Why a save of machine `id` matched no row: its lease (with a `fence`),
/// its state (with an `expected` one), or it has gone.
///
/// # Errors
///
/// The database's, reading the machine.
fn why_not_saved(
    tx: &mut Tx<'_>,
    id: &MachineId,
    expected: Option<MachineState>,
    fence: Option<&str>,
) -> Result<StoreError, StoreError> {
    if let Some(holder) = fence {
        if let Err(refused) = check_lease(tx, id, holder) {
            return Ok(refused);
        }
    }
    let current: Option<String> = match expected {
        None => None,
        Some(_) => machines::table
            .find(id.to_string())
            .select(machines::state)
            .get_result(tx.conn)
            .optional()?,
    };
    Ok(match (current, expected) {
        (Some(state), Some(expected)) => StoreError::Conflict(format!(
            "machine {id} is {state}, not {expected}: it changed meanwhile"
        )),
        _ => StoreError::NotFound(format!("machine {id} not found")),
    })
}

/// Logs a machine's save.
pub(super) fn record_save(tx: &mut Tx<'_>, key: &str, machine: &Machine) {
    let mut detail = format!("state={}", machine.state);
    if let Some(zone) = &machine.lifecycle.zone {
        detail.push_str(&format!(" zone={zone}"));
    }
    tx.record(Entity::Machine, key, ChangeKind::Updated, detail);
}

//! The writes the writer makes many at once on PostgreSQL, where every
//! statement is a round trip: the machine actors' saves ([`EngineSave`])
//! and zone choices ([`ZoneChoiceRequest`]), and agents' check-ins
//! ([`AgentCheckIn`]).
//!
//! Each comes to the writer as data rather than as a closure, so that a
//! batch can gather them: the saves go in one statement
//! ([`SaveMachines`]); the zone choices are made one after another from
//! the batch's copy of the census, then saved in one statement and counted
//! in one more; the check-ins read their machines in one statement and
//! save them in another. What a gathered write cannot settle (a save
//! whose machine moved, a check-in whose transition is not a plain save)
//! runs on its own, through the same path as on SQLite, and says why.

use std::collections::{BTreeMap, HashMap, HashSet};

use diesel::prelude::*;

use crate::domain::machine::{Machine, MachineState, Policy};
use crate::domain::names::MachineId;
use crate::store::census::{self, choose_zone_tx, pick_zone, zone_event, ZoneChoice, ZoneChosen};
use crate::store::lifecycle::{
    agent_connect_tx, check_in_step, decide, illegal, jitter, record_save, releases_zone, write,
    Applied, CheckIn, CheckInProof, CheckInStep, Decision, MachineUpdate,
};
use crate::store::machine_save::{SaveMachines, SaveRow};
use crate::store::records::MachineRow;
use crate::store::schema::machines;
use crate::store::writer::Tx;
use crate::store::{Origin, StoreError};

/// A write the writer gathers, which concerns one machine: a batch takes
/// one of each kind per machine.
pub(crate) trait OnMachine {
    fn machine_id(&self) -> MachineId;
}

/// A machine actor's decided event, fenced by its controller's lease.
pub(crate) struct EngineSave {
    id: MachineId,
    expected: MachineState,
    decision: Decision,
    fence: String,
}

impl EngineSave {
    /// The save of `decision`, decided from `expected`, while controller
    /// `fence` holds the machine's lease.
    pub(super) fn new(
        id: MachineId,
        expected: MachineState,
        decision: Decision,
        fence: String,
    ) -> EngineSave {
        EngineSave {
            id,
            expected,
            decision,
            fence,
        }
    }

    /// Writes it on its own.
    ///
    /// # Errors
    ///
    /// As [`crate::store::Store::commit`].
    pub(crate) fn write(&self, tx: &mut Tx<'_>) -> Result<(), StoreError> {
        tx.set_origin(Origin::Engine);
        write(
            tx,
            self.id,
            Some(self.expected),
            &self.decision,
            Some(&self.fence),
        )
    }

    /// What the engine is told once it is committed.
    pub(crate) fn into_applied(self) -> Applied {
        self.decision.applied
    }
}

/// One try of an agent's check-in with its one-time password.
pub(crate) struct AgentCheckIn {
    id: MachineId,
    proof: CheckInProof,
    policy: Policy,
}

impl AgentCheckIn {
    pub(super) fn new(id: MachineId, proof: CheckInProof, policy: Policy) -> AgentCheckIn {
        AgentCheckIn { id, proof, policy }
    }

    /// Tries it on its own.
    ///
    /// # Errors
    ///
    /// As [`crate::store::Store::agent_connect`].
    pub(crate) fn run(&self, tx: &mut Tx<'_>) -> Result<CheckIn, StoreError> {
        agent_connect_tx(tx, self.id, &self.proof, &self.policy)
    }
}

/// A machine actor's zone choice for its machine, as it holds it.
pub(crate) struct ZoneChoiceRequest {
    current: Machine,
    /// The state the store holds the machine in: `current`'s, or
    /// `pending` for a machine the engine took to `allocating` unwritten.
    stored: MachineState,
    choice: ZoneChoice,
    policy: Policy,
    holder: String,
}

impl ZoneChoiceRequest {
    /// The choice `choice` for `current`, stored as `stored`, with
    /// `policy`, while controller `holder` holds the machine's lease.
    pub(super) fn new(
        current: Machine,
        stored: MachineState,
        choice: ZoneChoice,
        policy: Policy,
        holder: String,
    ) -> ZoneChoiceRequest {
        ZoneChoiceRequest {
            current,
            stored,
            choice,
            policy,
            holder,
        }
    }

    /// Chooses and writes the zone on its own.
    ///
    /// # Errors
    ///
    /// As [`crate::store::Store::choose_zone`].
    pub(crate) fn run(&self, tx: &mut Tx<'_>) -> Result<ZoneChosen, StoreError> {
        choose_zone_tx(
            tx,
            &self.current,
            self.stored,
            &self.choice,
            &self.policy,
            &self.holder,
        )
    }
}

impl OnMachine for EngineSave {
    fn machine_id(&self) -> MachineId {
        self.id
    }
}

impl OnMachine for AgentCheckIn {
    fn machine_id(&self) -> MachineId {
        self.id
    }
}

impl OnMachine for ZoneChoiceRequest {
    fn machine_id(&self) -> MachineId {
        self.choice.id
    }
}

/// A save that may be written with others: not a removal, not one that
/// takes the machine out of the zone census, and one that changes
/// something.
struct PlainSave<'a> {
    id: MachineId,
    expected: MachineState,
    next: &'a Machine,
    update: &'a MachineUpdate,
    fence: Option<&'a str>,
}

impl<'a> PlainSave<'a> {
    fn of(
        id: MachineId,
        expected: MachineState,
        decision: &'a Decision,
        fence: Option<&'a str>,
    ) -> Option<PlainSave<'a>> {
        let next = &decision.applied.next;
        let plain = next.state != MachineState::Dead
            && !decision.unchanged
            && !releases_zone(Some(expected), next);
        plain.then_some(PlainSave {
            id,
            expected,
            next,
            update: &decision.update,
            fence,
        })
    }
}

/// What [`save_machines`] does when its statement did not write every save.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Unwritten {
    /// The others stand.
    Skip,
    /// Nothing stands: what was written is undone (the saves were decided
    /// in turn, each counting the ones before it).
    UndoAll,
}

/// The savepoint [`Unwritten::UndoAll`] undoes to.
const GATHERED_SAVEPOINT: &str = "berth_gathered";

/// Writes the plain saves among `candidates` (each its position and its
/// save, if plain), of distinct machines, in one statement, and logs each
/// one written, as `origin`'s. Returns the positions of those written; one
/// that was not wrote nothing (and with [`Unwritten::UndoAll`], neither
/// did any other).
///
/// # Errors
///
/// The database's; on SQLite, which binds no arrays, an invariant error.
fn save_machines<'a>(
    tx: &mut Tx<'_>,
    candidates: impl IntoIterator<Item = (usize, Option<PlainSave<'a>>)>,
    origin: Origin,
    unwritten: Unwritten,
) -> Result<HashSet<usize>, StoreError> {
    use diesel::connection::SimpleConnection;
    let (at, saves): (Vec<usize>, Vec<PlainSave>) = candidates
        .into_iter()
        .filter_map(|(at, save)| Some((at, save?)))
        .unzip();
    if saves.is_empty() {
        return Ok(HashSet::new());
    }
    let now = tx.now_ms;
    let conn = tx.conn.postgres("machine saves are written together")?;
    let rows: Vec<SaveRow> = saves
        .iter()
        .map(|s| SaveRow::of(&s.id, s.next, s.update))
        .collect();
    let statements: Vec<_> = rows
        .iter()
        .zip(&saves)
        .map(|(row, s)| row.save::<false>(Some(s.expected), s.next, s.update, s.fence, now))
        .collect();
    if unwritten == Unwritten::UndoAll {
        conn.batch_execute(&format!("SAVEPOINT {GATHERED_SAVEPOINT}"))?;
    }
    let written: HashSet<String> = SaveMachines::of(&statements, now)
        .run(conn)?
        .into_iter()
        .collect();
    if unwritten == Unwritten::UndoAll && written.len() < rows.len() {
        conn.batch_execute(&format!("ROLLBACK TO SAVEPOINT {GATHERED_SAVEPOINT}"))?;
        return Ok(HashSet::new());
    }
    tx.set_origin(origin);
    Ok(rows
        .iter()
        .zip(&saves)
        .zip(at)
        .filter(|((row, _), _)| written.contains(row.key()))
        .map(|((row, s), at)| {
            record_save(tx, row.key(), s.next);
            at
        })
        .collect())
}

/// Writes engine saves of distinct machines in one statement, those that
/// are plain (see [`PlainSave`]). Returns, for each, whether it was
/// written: one that was not wrote nothing, and [`EngineSave::write`] on
/// its own writes it or tells why not.
///
/// # Errors
///
/// As [`save_machines`].
pub(crate) fn save_together(
    tx: &mut Tx<'_>,
    saves: &[&EngineSave],
) -> Result<Vec<bool>, StoreError> {
    let candidates = saves.iter().enumerate().map(|(at, s)| {
        let plain = PlainSave::of(s.id, s.expected, &s.decision, Some(&s.fence));
        (at, plain)
    });
    let written = save_machines(tx, candidates, Origin::Engine, Unwritten::Skip)?;
    Ok((0..saves.len()).map(|at| written.contains(&at)).collect())
}

/// Tries check-ins of distinct machines together: their machines are read
/// in one statement and those to be started saved in one more. Returns,
/// for each, its answer, or `None` for one to try on its own (its
/// transition is not a plain save, or its machine moved); only those
/// answered `Connected` wrote anything.
///
/// # Errors
///
/// The database's, as [`save_machines`].
pub(crate) fn check_in_together(
    tx: &mut Tx<'_>,
    check_ins: &[&AgentCheckIn],
) -> Result<Vec<Option<Result<CheckIn, StoreError>>>, StoreError> {
    let keys: Vec<String> = check_ins.iter().map(|c| c.id.to_string()).collect();
    // One array bound on PostgreSQL, whatever the number of machines.
    let read: Vec<MachineRow> = machines::table
        .filter(machines::id.eq_any(&keys))
        .select(MachineRow::as_select())
        .load(tx.conn)?;
    let mut rows: HashMap<String, MachineRow> =
        read.into_iter().map(|row| (row.id.clone(), row)).collect();
    let now = tx.now_ms;
    let steps: Vec<CheckInStep> = check_ins
        .iter()
        .zip(&keys)
        .map(|(c, key)| check_in_step(rows.remove(key), c.id, &c.proof, &c.policy, now))
        .collect();
    let candidates = steps
        .iter()
        .zip(check_ins)
        .enumerate()
        .map(|(at, (step, c))| {
            let plain = match step {
                CheckInStep::Save {
                    state, decision, ..
                } => PlainSave::of(c.id, *state, decision, None),
                CheckInStep::Answer(_) | CheckInStep::Repeated { .. } => None,
            };
            (at, plain)
        });
    let written = save_machines(tx, candidates, Origin::Agent, Unwritten::Skip)?;
    Ok(steps
        .into_iter()
        .enumerate()
        .map(|(at, step)| match step {
            CheckInStep::Answer(answer) => Some(answer),
            CheckInStep::Save { credential, .. } if written.contains(&at) => {
                Some(Ok(CheckIn::Connected(credential)))
            }
            // A repeated check-in reads the credential held: on its own.
            CheckInStep::Save { .. } | CheckInStep::Repeated { .. } => None,
        })
        .collect())
}

/// Chooses zones for machines (distinct ones) together: each choice in
/// turn from the batch's copy of the census, counting the ones before it;
/// then the machines chosen for are saved in one statement and counted in
/// one more. Returns, for each, its answer (a zone, no zone, or an event
/// the machine does not accept), or `None` for one to make on its own.
/// Only those answered with a zone wrote anything. If any save was not
/// written (its machine moved), the choices after it counted a machine
/// that is not there: nothing stands, and every choice to be saved is
/// made on its own.
///
/// # Errors
///
/// The database's, as [`save_machines`] and [`census::count_many`].
pub(crate) fn choose_zones_together(
    tx: &mut Tx<'_>,
    requests: &[&ZoneChoiceRequest],
) -> Result<Vec<Option<Result<ZoneChosen, StoreError>>>, StoreError> {
    /// What one choice came to before anything is written.
    enum Step {
        Answer(Result<ZoneChosen, StoreError>),
        Save {
            zone: String,
            decision: Box<Decision>,
        },
    }
    let mut census = census::read(tx)?;
    let now = tx.now_ms;
    let steps: Vec<Step> = requests
        .iter()
        .map(|r| {
            let zone = match pick_zone(&census, &r.choice) {
                Ok(zone) => zone,
                Err(no_zone) => return Step::Answer(Ok(no_zone.into())),
            };
            let event = zone_event(&r.choice, &zone);
            match decide(&r.current, event, &r.policy, jitter(), now) {
                Ok(decision) => {
                    census.add_many(&zone, &r.choice.occupant, 1);
                    Step::Save {
                        zone,
                        decision: Box::new(decision),
                    }
                }
                Err(e) => Step::Answer(Err(illegal(r.choice.id, &e))),
            }
        })
        .collect();
    let candidates = steps
        .iter()
        .zip(requests)
        .enumerate()
        .map(|(at, (step, r))| {
            let plain = match step {
                Step::Save { decision, .. } => {
                    PlainSave::of(r.choice.id, r.stored, decision, Some(&r.holder))
                }
                Step::Answer(_) => None,
            };
            (at, plain)
        });
    let written = save_machines(tx, candidates, Origin::Engine, Unwritten::UndoAll)?;
    let mut counts: BTreeMap<(String, String), i64> = BTreeMap::new();
    for (at, (step, r)) in steps.iter().zip(requests).enumerate() {
        if let (Step::Save { zone, .. }, true) = (step, written.contains(&at)) {
            *counts
                .entry((r.choice.occupant.key(), zone.clone()))
                .or_default() += 1;
        }
    }
    census::count_many(tx, &counts)?;
    // The copy counted every choice; it stays only if each was written.
    let chosen = steps
        .iter()
        .filter(|step| matches!(step, Step::Save { .. }))
        .count();
    *tx.census() = (written.len() == chosen).then_some(census);
    Ok(steps
        .into_iter()
        .enumerate()
        .map(|(at, step)| match step {
            Step::Answer(answer) => Some(answer),
            Step::Save { decision, .. } if written.contains(&at) => {
                Some(Ok(ZoneChosen::Chosen(decision.applied)))
            }
            Step::Save { .. } => None,
        })
        .collect())
}

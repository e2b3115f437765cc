//! The write path: one thread owns the write connection and commits every
//! queued operation in one transaction (group commit).
//!
//! Callers hand over a closure and wait for its result; they never know
//! whether they were batched. Each operation runs in its own savepoint, so
//! one failing operation rolls back only its own writes, and its change-log
//! entries are dropped with them. On PostgreSQL, where every statement is
//! a round trip, the machine actors' saves (`Writer::save`) and zone
//! choices (`Writer::choose_zone`) and agents' check-ins
//! (`Writer::check_in`) come as data instead, and a batch does each kind
//! together before its other operations (see `crate::store::together`).
//! Revisions are assigned to the batch's entries just before the commit,
//! by bumping the `log_head` row inside the transaction: the row lock
//! orders concurrent committers (several controllers on one PostgreSQL),
//! so the log never has a gap or a reorder.
//! On PostgreSQL a batch first takes an advisory lock, so that concurrent
//! batches take their turns before they lock any row and cannot deadlock.
//!
//! When the database goes away (a PostgreSQL restart, a dropped
//! connection), the batch fails with [`StoreError::Connect`] (503 at the
//! API) and the writer drops its connection. Each later batch first opens
//! a new one; while that fails, the batch fails the same way at once, so
//! callers hear "unavailable" rather than wait, and the first batch after
//! the database is back commits normally.
//!
//! On PostgreSQL a commit that grew the log also sends `NOTIFY berth_changes` with the new head revision, so
//! that every other controller's follower wakes (see
//! [`crate::store::listener`]).

use std::collections::HashSet;
use std::sync::Arc;
use std::thread;

use diesel::prelude::*;
use tokio::sync::{mpsc, oneshot, watch};

use crate::domain::zones::ZoneCensus;
use crate::store::census::ZoneChosen;
use crate::store::change_log::{now_ms, ChangeKind, Entity, Origin};
use crate::store::checkpointer::{self, Nudge};
use crate::store::db::{
    insert_in_kept_sizes, kept_sqlite_statement, Conn, Manager, ROWS_PER_INSERT,
};
use crate::store::error::StoreError;
use crate::store::lifecycle::{Applied, CheckIn};
use crate::store::schema::{changes, log_head};
use crate::store::together::{
    check_in_together, choose_zones_together, save_together, AgentCheckIn, EngineSave, OnMachine,
    ZoneChoiceRequest,
};

/// The PostgreSQL channel every commit that grew the log is announced on,
/// with the new head revision as its payload.
pub const CHANGES_CHANNEL: &str = "berth_changes";

/// The advisory lock a PostgreSQL batch holds from its start to its commit
/// (`berth-wr` in ASCII), so that the batches of several controllers never
/// interleave their row locks.
const WRITERS_LOCK: i64 = 0x6265_7274_682d_7772;

/// The most operations committed in one transaction.
pub const MAX_BATCH: usize = 1024;

/// How many operations may wait for the writer before callers are held
/// back (backpressure instead of unbounded memory).
pub const WRITE_QUEUE_CAPACITY: usize = 16 * 1024;

/// A change-log entry made by an operation, before it has a revision.
#[derive(Clone, Debug)]
struct PendingChange {
    entity: Entity,
    entity_id: String,
    change: ChangeKind,
    detail: String,
    origin: Origin,
}

/// What an operation sees: the connection, inside the batch's transaction,
/// and the change log to append to.
pub struct Tx<'a> {
    pub conn: &'a mut Conn,
    /// The batch's clock reading, so every row of one batch has one time.
    pub now_ms: i64,
    changes: &'a mut Vec<PendingChange>,
    /// Who the operation acts for; stamped on its change-log entries.
    origin: Origin,
    /// The zone census as this batch last read or counted it (see
    /// [`crate::store::census`]): no other writer can change it until the
    /// batch commits. `None` until it is read, and again after anything
    /// that may have changed it otherwise, or undone a count.
    census: &'a mut Option<ZoneCensus>,
}

impl Tx<'_> {
    /// The batch's copy of the zone census (see the field).
    pub(crate) fn census(&mut self) -> &mut Option<ZoneCensus> {
        self.census
    }

    /// Stamps this operation's later change-log entries as made by `origin`
    /// (the default is [`Origin::User`]).
    pub fn set_origin(&mut self, origin: Origin) {
        self.origin = origin;
    }

    /// Appends an entry to the change log; it gets its revision at commit.
    pub fn record(
        &mut self,
        entity: Entity,
        entity_id: impl Into<String>,
        change: ChangeKind,
        detail: impl Into<String>,
    ) {
        self.changes.push(PendingChange {
            entity,
            entity_id: entity_id.into(),
            change,
            detail: detail.into(),
            origin: self.origin,
        });
    }
}

/// A change an operation recorded, as a trial reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    pub entity: Entity,
    pub entity_id: String,
    pub change: ChangeKind,
}

impl Tx<'_> {
    /// The change log's revision this operation sees: the last committed
    /// one plus what the batch's earlier operations recorded.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] if the head cannot be read.
    pub fn revision(&mut self) -> Result<i64, StoreError> {
        let head: i64 = log_head::table
            .find(1)
            .select(log_head::revision)
            .get_result(self.conn)?;
        Ok(head + i64::try_from(self.changes.len()).unwrap_or(i64::MAX))
    }

    /// Runs `op` in a savepoint, then `look` (which sees what `op` left and
    /// the changes it recorded), then `keep`, which decides: `Ok(true)`
    /// keeps what `op` wrote, `Ok(false)` undoes it (a rehearsal), and an
    /// error undoes it and is returned.
    ///
    /// # Errors
    ///
    /// `op`'s, `look`'s or `keep`'s error; nothing `op` wrote stays.
    pub fn trial<T, U>(
        &mut self,
        op: impl FnOnce(&mut Tx<'_>) -> Result<T, StoreError>,
        look: impl FnOnce(&mut Tx<'_>, &T, &[Recorded]) -> Result<U, StoreError>,
        keep: impl FnOnce(&U) -> Result<bool, StoreError>,
    ) -> Result<(T, U), StoreError> {
        let Tx {
            conn,
            now_ms,
            changes,
            origin,
            census,
        } = self;
        let mark = changes.len();
        let mut outcome = None;
        let mut kept = false;
        let ran = conn.transaction::<(), StoreError, _>(|conn| {
            let mut inner = Tx {
                conn,
                now_ms: *now_ms,
                changes,
                origin: *origin,
                census,
            };
            let value = op(&mut inner)?;
            let recorded: Vec<Recorded> = inner.changes[mark..]
                .iter()
                .map(|c| Recorded {
                    entity: c.entity,
                    entity_id: c.entity_id.clone(),
                    change: c.change,
                })
                .collect();
            let seen = look(&mut inner, &value, &recorded)?;
            kept = keep(&seen)?;
            outcome = Some((value, seen));
            if kept {
                Ok(())
            } else {
                // Any error rolls the savepoint back; the outcome says
                // this one was asked for.
                Err(StoreError::Conflict("rehearsed".into()))
            }
        });
        if !kept {
            changes.truncate(mark);
            // What the trial counted is undone with it.
            **census = None;
        }
        match (ran, outcome) {
            (Ok(()), Some(outcome)) => Ok(outcome),
            (Err(_), Some(outcome)) if !kept => Ok(outcome),
            (Err(e), _) => Err(e),
            (Ok(()), None) => Err(StoreError::Invariant("a trial ran nothing".into())),
        }
    }
}

/// An operation waiting for the writer, with the way back to its caller.
trait Job: Send {
    /// Runs the operation; an `Err` makes the writer roll back its savepoint.
    fn run(&mut self, tx: &mut Tx<'_>) -> Result<(), StoreError>;
    /// Hands the caller its result once the batch has committed (or not).
    fn finish(self: Box<Self>, commit: Result<(), StoreError>);
    /// The engine's save this job is, if it is one (see [`Writer::save`]).
    fn engine_save(&self) -> Option<&EngineSave> {
        None
    }
    /// The agent's check-in this job is, if it is one (see
    /// [`Writer::check_in`]).
    fn check_in(&self) -> Option<&AgentCheckIn> {
        None
    }
    /// The zone choice this job is, if it is one (see
    /// [`Writer::choose_zone`]).
    fn zone_choice(&self) -> Option<&ZoneChoiceRequest> {
        None
    }
    /// The job was done with others of its kind, and this is its outcome
    /// (see [`gather`]); [`Job::run`] is not called.
    fn done_together(&mut self, _outcome: Gathered) {}
    /// Whether [`Job::run`] may be called again once what it wrote is
    /// undone, with the same outcome for the same database: it writes only
    /// through the transaction and keeps nothing of a run but its result.
    /// Such jobs in a row share one savepoint (see [`run_in_turn`]).
    fn runs_again(&self) -> bool {
        false
    }
}

/// The outcome of a job done with others of its kind.
enum Gathered {
    /// An engine save was written.
    Saved,
    /// A check-in's answer.
    CheckedIn(Result<CheckIn, StoreError>),
    /// A zone choice's answer.
    ZoneChosen(Result<ZoneChosen, StoreError>),
}

/// Keeps an operation's outcome as the job's result; an error is also the
/// operation's failure, for the writer to undo its writes.
fn keep_outcome<T>(
    result: &mut Option<Result<T, StoreError>>,
    outcome: Result<T, StoreError>,
) -> Result<(), StoreError> {
    let failed = outcome.as_ref().err().cloned();
    *result = Some(outcome);
    failed.map_or(Ok(()), Err)
}

/// What the caller is told: the operation's result once its batch has
/// committed, or the commit's error.
fn answer<T>(
    commit: Result<(), StoreError>,
    result: Option<Result<T, StoreError>>,
) -> Result<T, StoreError> {
    match (commit, result) {
        (Ok(()), Some(result)) => result,
        (Err(e), _) => Err(e),
        (Ok(()), None) => Err(StoreError::WriterGone),
    }
}

struct TypedJob<T, F> {
    op: Option<F>,
    result: Option<Result<T, StoreError>>,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> Job for TypedJob<T, F>
where
    T: Send,
    F: FnOnce(&mut Tx<'_>) -> Result<T, StoreError> + Send,
{
    fn run(&mut self, tx: &mut Tx<'_>) -> Result<(), StoreError> {
        let Some(op) = self.op.take() else {
            return Ok(());
        };
        keep_outcome(&mut self.result, op(tx))
    }

    fn finish(self: Box<Self>, commit: Result<(), StoreError>) {
        // The caller may have stopped waiting; the write stands regardless.
        let _ = self.reply.send(answer(commit, self.result));
    }
}

/// An engine's save, queued as data (see [`Writer::save`]).
struct EngineSaveJob {
    save: EngineSave,
    result: Option<Result<(), StoreError>>,
    reply: oneshot::Sender<Result<Applied, StoreError>>,
}

impl Job for EngineSaveJob {
    fn run(&mut self, tx: &mut Tx<'_>) -> Result<(), StoreError> {
        keep_outcome(&mut self.result, self.save.write(tx))
    }

    fn finish(self: Box<Self>, commit: Result<(), StoreError>) {
        let EngineSaveJob {
            save,
            result,
            reply,
        } = *self;
        let _ = reply.send(answer(commit, result).map(|()| save.into_applied()));
    }

    fn engine_save(&self) -> Option<&EngineSave> {
        Some(&self.save)
    }

    fn runs_again(&self) -> bool {
        true
    }

    fn done_together(&mut self, outcome: Gathered) {
        if let Gathered::Saved = outcome {
            self.result = Some(Ok(()));
        }
    }
}

/// An agent's check-in, queued as data (see [`Writer::check_in`]).
struct CheckInJob {
    check_in: AgentCheckIn,
    result: Option<Result<CheckIn, StoreError>>,
    reply: oneshot::Sender<Result<CheckIn, StoreError>>,
}

impl Job for CheckInJob {
    fn run(&mut self, tx: &mut Tx<'_>) -> Result<(), StoreError> {
        keep_outcome(&mut self.result, self.check_in.run(tx))
    }

    fn finish(self: Box<Self>, commit: Result<(), StoreError>) {
        let _ = self.reply.send(answer(commit, self.result));
    }

    fn check_in(&self) -> Option<&AgentCheckIn> {
        Some(&self.check_in)
    }

    fn runs_again(&self) -> bool {
        true
    }

    fn done_together(&mut self, outcome: Gathered) {
        if let Gathered::CheckedIn(answer) = outcome {
            self.result = Some(answer);
        }
    }
}

/// A machine actor's zone choice, queued as data (see
/// [`Writer::choose_zone`]).
struct ZoneChoiceJob {
    request: ZoneChoiceRequest,
    result: Option<Result<ZoneChosen, StoreError>>,
    reply: oneshot::Sender<Result<ZoneChosen, StoreError>>,
}

impl Job for ZoneChoiceJob {
    fn run(&mut self, tx: &mut Tx<'_>) -> Result<(), StoreError> {
        keep_outcome(&mut self.result, self.request.run(tx))
    }

    fn finish(self: Box<Self>, commit: Result<(), StoreError>) {
        let _ = self.reply.send(answer(commit, self.result));
    }

    fn zone_choice(&self) -> Option<&ZoneChoiceRequest> {
        Some(&self.request)
    }

    fn runs_again(&self) -> bool {
        true
    }

    fn done_together(&mut self, outcome: Gathered) {
        if let Gathered::ZoneChosen(answer) = outcome {
            self.result = Some(answer);
        }
    }
}

/// The handle callers use to submit writes.
#[derive(Clone)]
pub struct Writer {
    queue: mpsc::Sender<Box<dyn Job>>,
}

impl Writer {
    /// Starts the writer thread on its own connection, which `manager`
    /// replaces if it is lost. `head` is told the change log's revision
    /// after every commit.
    pub fn spawn(
        conn: Conn,
        manager: Manager,
        head: Arc<watch::Sender<i64>>,
    ) -> Result<Writer, StoreError> {
        let (queue, jobs) = mpsc::channel(WRITE_QUEUE_CAPACITY);
        let checkpoints = if manager.url().is_sqlite() {
            Some(checkpointer::spawn(Manager::readers(
                manager.url().clone(),
            ))?)
        } else {
            None
        };
        thread::Builder::new()
            .name("berth-store-writer".into())
            .spawn(move || write_loop(conn, manager, jobs, &head, checkpoints.as_ref()))
            .map_err(|e| StoreError::Connect(format!("cannot start the writer thread: {e}")))?;
        Ok(Writer { queue })
    }

    /// Queues `job` and waits for its answer on `result`.
    async fn submit<T>(
        &self,
        job: Box<dyn Job>,
        result: oneshot::Receiver<Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.queue
            .send(job)
            .await
            .map_err(|_| StoreError::WriterGone)?;
        result.await.map_err(|_| StoreError::WriterGone)?
    }

    /// Runs `op` in the next batch and returns its result once committed.
    ///
    /// # Errors
    ///
    /// The operation's own error (its writes are rolled back), or the
    /// commit's error, or [`StoreError::WriterGone`] if the writer stopped.
    pub async fn write<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Tx<'_>) -> Result<T, StoreError> + Send + 'static,
    {
        let (reply, result) = oneshot::channel();
        let job: Box<dyn Job> = Box::new(TypedJob {
            op: Some(op),
            result: None,
            reply,
        });
        self.submit(job, result).await
    }

    /// Saves a machine for its actor in the next batch: what
    /// [`Writer::write`] with [`EngineSave::write`] would do, but as data,
    /// so that on PostgreSQL the batch's saves go in one statement.
    ///
    /// # Errors
    ///
    /// As [`EngineSave::write`], or the commit's error, or
    /// [`StoreError::WriterGone`] if the writer stopped.
    pub(crate) async fn save(&self, save: EngineSave) -> Result<Applied, StoreError> {
        let (reply, result) = oneshot::channel();
        let job: Box<dyn Job> = Box::new(EngineSaveJob {
            save,
            result: None,
            reply,
        });
        self.submit(job, result).await
    }

    /// Tries an agent's check-in in the next batch: what [`Writer::write`]
    /// with [`AgentCheckIn::run`] would do, but as data, so that on
    /// PostgreSQL the batch's check-ins go together.
    ///
    /// # Errors
    ///
    /// As [`AgentCheckIn::run`], or the commit's error, or
    /// [`StoreError::WriterGone`] if the writer stopped.
    pub(crate) async fn check_in(&self, check_in: AgentCheckIn) -> Result<CheckIn, StoreError> {
        let (reply, result) = oneshot::channel();
        let job: Box<dyn Job> = Box::new(CheckInJob {
            check_in,
            result: None,
            reply,
        });
        self.submit(job, result).await
    }

    /// Chooses and writes a machine's zone in the next batch: what
    /// [`Writer::write`] with [`ZoneChoiceRequest::run`] would do, but as
    /// data, so that on PostgreSQL the batch's choices go together.
    ///
    /// # Errors
    ///
    /// As [`ZoneChoiceRequest::run`], or the commit's error, or
    /// [`StoreError::WriterGone`] if the writer stopped.
    pub(crate) async fn choose_zone(
        &self,
        request: ZoneChoiceRequest,
    ) -> Result<ZoneChosen, StoreError> {
        let (reply, result) = oneshot::channel();
        let job: Box<dyn Job> = Box::new(ZoneChoiceJob {
            request,
            result: None,
            reply,
        });
        self.submit(job, result).await
    }

    /// [`Writer::write`] for callers outside an async runtime.
    ///
    /// # Errors
    ///
    /// As [`Writer::write`].
    pub fn write_blocking<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Tx<'_>) -> Result<T, StoreError> + Send + 'static,
    {
        let (reply, result) = oneshot::channel();
        let job: Box<dyn Job> = Box::new(TypedJob {
            op: Some(op),
            result: None,
            reply,
        });
        self.queue
            .blocking_send(job)
            .map_err(|_| StoreError::WriterGone)?;
        result.blocking_recv().map_err(|_| StoreError::WriterGone)?
    }
}

fn write_loop(
    conn: Conn,
    manager: Manager,
    mut jobs: mpsc::Receiver<Box<dyn Job>>,
    head: &watch::Sender<i64>,
    checkpoints: Option<&Nudge>,
) {
    let mut batch: Vec<Box<dyn Job>> = Vec::with_capacity(MAX_BATCH);
    let mut conn = Some(conn);
    while let Some(first) = jobs.blocking_recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        if conn.is_none() {
            match manager.connect() {
                Ok(fresh) => {
                    log::info!("store writer: connected to the database again");
                    conn = Some(fresh);
                }
                Err(e) => log::warn!("store writer: cannot reconnect to the database: {e}"),
            }
        }
        let committed = match conn.as_mut() {
            Some(c) => commit_batch(c, &mut batch),
            None => Err(StoreError::Connect(
                "the database is unavailable; try again shortly".into(),
            )),
        };
        if let Err(e) = &committed {
            let lost = e.is_unavailable() || conn.as_mut().is_some_and(connection_is_broken);
            if lost && conn.take().is_some() {
                log::warn!("store writer: lost the database connection ({e}); will reconnect");
            }
        }
        if let Ok(Some(revision)) = &committed {
            advance_head(head, *revision);
        }
        if committed.is_ok() {
            if let Some(checkpoints) = checkpoints {
                checkpoints.committed();
            }
        }
        let outcome = committed.map(|_| ());
        for job in batch.drain(..) {
            job.finish(outcome.clone());
        }
    }
}

/// Moves the head to `revision` unless it is already there or past it:
/// another controller's later commit may have been heard first.
pub(crate) fn advance_head(head: &watch::Sender<i64>, revision: i64) {
    head.send_if_modified(|current| {
        if revision > *current {
            *current = revision;
            true
        } else {
            false
        }
    });
}

/// Whether `conn` can no longer be used (the server closed it).
fn connection_is_broken(conn: &mut Conn) -> bool {
    use diesel::r2d2::R2D2Connection;
    conn.is_broken() || conn.ping().is_err()
}

/// The savepoint each operation of a batch runs in (or each run of
/// operations, see [`run_in_turn`]). One name serves every operation:
/// between two operations the last one's savepoint is released and the
/// next opened (`RELEASE ...; SAVEPOINT ...`, on PostgreSQL in a single
/// round trip), and a failed operation's `ROLLBACK TO` leaves the savepoint
/// open for the next. diesel's own savepoint per operation took two round
/// trips.
const OPEN_OPERATION: &str = "SAVEPOINT berth_operation";
const RELEASE_OPERATION: &str = "RELEASE SAVEPOINT berth_operation";
const UNDO_OPERATION: &str = "ROLLBACK TO SAVEPOINT berth_operation";

kept_sqlite_statement!(
    /// Opens the operation's savepoint, on SQLite.
    OpenOperation = OPEN_OPERATION
);
kept_sqlite_statement!(
    /// Releases the last operation's savepoint, on SQLite.
    ReleaseOperation = RELEASE_OPERATION
);
kept_sqlite_statement!(
    /// Undoes the operation's writes, keeping its savepoint open, on
    /// SQLite.
    UndoOperation = UNDO_OPERATION
);

/// A step of the savepoint each operation of a batch runs in.
#[derive(Clone, Copy)]
enum OperationStep {
    /// The batch's first operation begins.
    Open,
    /// The last operation's writes stand; the next begins.
    Next,
    /// The operation's writes are undone; the savepoint stays open for the
    /// next.
    Undo,
}

/// Takes `step` of the operations' savepoint: on SQLite with statements
/// the connection keeps prepared, on PostgreSQL in one round trip (which
/// for [`OperationStep::Open`] first takes the writers' turn).
fn operation_savepoint(conn: &mut Conn, step: OperationStep) -> Result<(), StoreError> {
    use diesel::connection::SimpleConnection;
    match conn {
        Conn::Sqlite(c) => {
            match step {
                OperationStep::Open => OpenOperation.execute(c)?,
                OperationStep::Next => {
                    ReleaseOperation.execute(c)?;
                    OpenOperation.execute(c)?
                }
                OperationStep::Undo => UndoOperation.execute(c)?,
            };
        }
        Conn::Postgres(c) => {
            let sql = match step {
                // Several controllers' writers take their turns before
                // touching any row. Without it, two batches that both touch
                // a machine (a check-in through one, a save by its holder)
                // and then both need `log_head` deadlock; PostgreSQL breaks
                // each deadlock by failing one operation, and the two
                // batches went on failing each other's operations for
                // minutes. The lock also makes the zone census one
                // controller's at a time.
                OperationStep::Open => {
                    format!("SELECT pg_advisory_xact_lock({WRITERS_LOCK}); {OPEN_OPERATION}")
                }
                OperationStep::Next => format!("{RELEASE_OPERATION}; {OPEN_OPERATION}"),
                OperationStep::Undo => UNDO_OPERATION.to_string(),
            };
            c.batch_execute(&sql)?;
        }
    }
    Ok(())
}

/// Runs every job of the batch in one transaction and appends their
/// change-log entries. Returns the new head revision if the log grew.
fn commit_batch(conn: &mut Conn, batch: &mut [Box<dyn Job>]) -> Result<Option<i64>, StoreError> {
    let now = now_ms();
    conn.transaction::<_, StoreError, _>(|conn| {
        operation_savepoint(conn, OperationStep::Open)?;
        let mut pending = Vec::new();
        let mut census = None;
        let (done, savepoint_used) = match conn {
            Conn::Postgres(_) => gather(conn, now, batch, &mut pending, &mut census)?,
            Conn::Sqlite(_) => (vec![false; batch.len()], false),
        };
        let mut turn = Turn {
            conn,
            now,
            pending: &mut pending,
            census: &mut census,
            savepoint_used,
        };
        run_in_turn(&mut turn, batch, &done)?;
        append_changes(conn, now, pending)
    })
}

/// What the jobs of a batch run in, one after another.
struct Turn<'a> {
    conn: &'a mut Conn,
    now: i64,
    pending: &'a mut Vec<PendingChange>,
    census: &'a mut Option<ZoneCensus>,
    /// Whether the open savepoint holds writes that stand.
    savepoint_used: bool,
}

impl Turn<'_> {
    /// Runs `jobs` in one savepoint: `Ok(true)` if every one succeeded,
    /// and their writes stand; `Ok(false)` if one failed (the jobs after
    /// it not run), and all their writes are undone.
    fn run_together(&mut self, jobs: &mut [Box<dyn Job>]) -> Result<bool, StoreError> {
        if self.savepoint_used {
            operation_savepoint(self.conn, OperationStep::Next)?;
        }
        let mark = self.pending.len();
        let mut tx = Tx {
            conn: self.conn,
            now_ms: self.now,
            changes: self.pending,
            origin: Origin::User,
            census: self.census,
        };
        let all = jobs.iter_mut().all(|job| job.run(&mut tx).is_ok());
        self.savepoint_used = all;
        if !all {
            self.undo(mark)?;
        }
        Ok(all)
    }

    /// Undoes the open savepoint's writes and the changes noted since
    /// `mark`, and keeps the savepoint open for what comes next.
    fn undo(&mut self, mark: usize) -> Result<(), StoreError> {
        self.pending.truncate(mark);
        // The batch's copy of the census may count what was undone.
        *self.census = None;
        operation_savepoint(self.conn, OperationStep::Undo)
    }
}

/// Runs the jobs of `batch` not `done`, in order, each in a savepoint of
/// its own, so that a failed job's writes are undone and no other's. Jobs
/// that run again ([`Job::runs_again`]) in a row share one: with SQLite a
/// savepoint per job cost the writer 13 % of its time in a deploy of
/// 100,000 units (the statements, and the copies of the pages each job
/// changed). If one of them fails, all their writes are undone and they
/// run again, each in its own.
fn run_in_turn(
    turn: &mut Turn<'_>,
    batch: &mut [Box<dyn Job>],
    done: &[bool],
) -> Result<(), StoreError> {
    let mut at = 0;
    while at < batch.len() {
        if done[at] {
            at += 1;
            continue;
        }
        let in_row = batch[at..]
            .iter()
            .zip(&done[at..])
            .take_while(|(job, done)| job.runs_again() && !**done)
            .count();
        let end = at + in_row.max(1);
        if in_row > 1 && turn.run_together(&mut batch[at..end])? {
            at = end;
            continue;
        }
        for job in &mut batch[at..end] {
            turn.run_together(std::slice::from_mut(job))?;
        }
        at = end;
    }
    Ok(())
}

/// Does the batch's engine saves, zone choices and check-ins, each kind
/// together (see [`crate::store::together`]), in the savepoint the batch
/// has just opened, before its other operations: they were all queued at
/// once, so any order is one their callers could have seen. Saves go
/// first, so that an agent's check-in queued beside its machine's save
/// finds the instance recorded. Returns which jobs are done, and whether the
/// savepoint holds writes. Each kind takes only one job per machine; the
/// rest, and what a gathered write leaves unsettled, run on their own in
/// the batch's order. A database error undoes what was gathered, and
/// every job then runs on its own.
fn gather(
    conn: &mut Conn,
    now: i64,
    batch: &mut [Box<dyn Job>],
    pending: &mut Vec<PendingChange>,
    census: &mut Option<ZoneCensus>,
) -> Result<(Vec<bool>, bool), StoreError> {
    let mut outcomes: Vec<Option<Gathered>> = Vec::new();
    outcomes.resize_with(batch.len(), || None);
    let mut tx = Tx {
        conn,
        now_ms: now,
        changes: pending,
        origin: Origin::User,
        census,
    };
    let gathered = (|| -> Result<(), StoreError> {
        let (at, saves) = of_kind(batch, |job| job.engine_save());
        if !saves.is_empty() {
            for (at, written) in at.into_iter().zip(save_together(&mut tx, &saves)?) {
                outcomes[at] = written.then_some(Gathered::Saved);
            }
        }
        let (at, requests) = of_kind(batch, |job| job.zone_choice());
        if !requests.is_empty() {
            for (at, answer) in at
                .into_iter()
                .zip(choose_zones_together(&mut tx, &requests)?)
            {
                outcomes[at] = answer.map(Gathered::ZoneChosen);
            }
        }
        let (at, check_ins) = of_kind(batch, |job| job.check_in());
        if !check_ins.is_empty() {
            for (at, answer) in at.into_iter().zip(check_in_together(&mut tx, &check_ins)?) {
                outcomes[at] = answer.map(Gathered::CheckedIn);
            }
        }
        Ok(())
    })();
    if let Err(e) = gathered {
        log::warn!("store writer: cannot write machines together ({e}); writing each alone");
        pending.clear();
        *census = None;
        operation_savepoint(conn, OperationStep::Undo)?;
        return Ok((vec![false; batch.len()], false));
    }
    let wrote = !pending.is_empty();
    let done = batch
        .iter_mut()
        .zip(outcomes)
        .map(|(job, outcome)| match outcome {
            Some(outcome) => {
                job.done_together(outcome);
                true
            }
            None => false,
        })
        .collect();
    Ok((done, wrote))
}

/// The batch's jobs of one kind (those `kind` gives), the first for each
/// machine: their positions in the batch, and what they are.
fn of_kind<'b, T: OnMachine + ?Sized>(
    batch: &'b [Box<dyn Job>],
    kind: impl Fn(&'b dyn Job) -> Option<&'b T>,
) -> (Vec<usize>, Vec<&'b T>) {
    let mut machines = HashSet::new();
    batch
        .iter()
        .enumerate()
        .filter_map(|(at, job)| Some((at, kind(job.as_ref())?)))
        .filter(|(_, write)| machines.insert(write.machine_id()))
        .unzip()
}

/// A change-log row as written: a tuple of columns and values rather than
/// a derived `Insertable`, whose columns diesel takes on SQLite for ones
/// that might be left to their defaults, and inserts row by row.
type ChangeRow = (
    diesel::dsl::Eq<changes::revision, i64>,
    diesel::dsl::Eq<changes::entity, &'static str>,
    diesel::dsl::Eq<changes::entity_id, String>,
    diesel::dsl::Eq<changes::change, &'static str>,
    diesel::dsl::Eq<changes::detail, String>,
    diesel::dsl::Eq<changes::origin, &'static str>,
    diesel::dsl::Eq<changes::at_ms, i64>,
);

fn append_changes(
    conn: &mut Conn,
    now: i64,
    pending: Vec<PendingChange>,
) -> Result<Option<i64>, StoreError> {
    if pending.is_empty() {
        return Ok(None);
    }
    let count = i64::try_from(pending.len())
        .map_err(|_| StoreError::Invariant("batch too large".into()))?;
    diesel::update(log_head::table.find(1))
        .set(log_head::revision.eq(log_head::revision + count))
        .execute(conn)?;
    let last: i64 = log_head::table
        .find(1)
        .select(log_head::revision)
        .get_result(conn)?;
    let first = last - count + 1;
    let rows: Vec<ChangeRow> = pending
        .into_iter()
        .zip(first..)
        .map(|(c, revision)| {
            (
                changes::revision.eq(revision),
                changes::entity.eq(c.entity.as_str()),
                changes::entity_id.eq(c.entity_id),
                changes::change.eq(c.change.as_str()),
                changes::detail.eq(c.detail),
                changes::origin.eq(c.origin.as_str()),
                changes::at_ms.eq(now),
            )
        })
        .collect();
    match conn {
        Conn::Sqlite(c) => insert_in_kept_sizes(c, changes::table, rows)?,
        // Chunked so no statement exceeds the bound-parameter limit.
        Conn::Postgres(c) => {
            for chunk in rows.chunks(ROWS_PER_INSERT) {
                diesel::insert_into(changes::table)
                    .values(chunk)
                    .execute(c)?;
            }
        }
    }
    if let Conn::Postgres(c) = conn {
        // Delivered to the listeners when (and only if) this commits.
        diesel::sql_query(format!("NOTIFY {CHANGES_CHANNEL}, '{last}'")).execute(c)?;
    }
    Ok(Some(last))
}

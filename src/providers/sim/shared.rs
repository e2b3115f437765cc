//! The ledger in a PostgreSQL database, shared by the simulated clouds of
//! several controllers: one cloud, as EC2 is one cloud to every controller
//! that calls it.
//!
//! # How the clouds agree
//!
//! Each open cloud keeps the same in-memory index as with a file, and
//! brings it up to date from the database before it uses it:
//!
//! - every row carries a `version` from one sequence, set again by every
//!   change. A cloud reads the rows whose version is above the highest it
//!   has seen ([`SharedLedger::read`]);
//! - a cloud that will change the ledger first takes a transaction-level
//!   advisory lock ([`SharedLedger::lock_and_read`]), reads what changed,
//!   decides (ids, capacity, client tokens) on an index no other cloud can
//!   change meanwhile, and commits its writes with the lock
//!   ([`SharedLedger::write`]). Writers are serialized, so versions grow in
//!   commit order and a reader never misses a row;
//! - the generator's position is in `sim_meta` as with a file, so the
//!   clouds draw one sequence of instance ids between them.
//!
//! A controller that dies holding the lock loses its connection, and the
//! server ends its transaction; a paused one is ended after
//! [`crate::store::db::POSTGRES_IDLE_IN_TRANSACTION`] idle in it.
//!
//! What happens later (instances start, agents check in) is driven by
//! whichever cloud launched the instance; the other clouds take up what a
//! dead one left (see `SimProvider`'s driver and [`ORPHAN_GRACE_MS`]).

use diesel::connection::SimpleConnection;
use diesel::dsl::sql;
use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Bool, Text};
use diesel::PgConnection;

use crate::providers::sim::error::SimError;
use crate::providers::sim::file::{parse_rng, sim_instances, sim_meta, to_i64, Row, RNG_KEY};
use crate::providers::sim::records::{Batch, Record, RngPosition, Values};
use crate::store::db::POSTGRES_IDLE_IN_TRANSACTION;

/// How long past its due time an instance's start or its agent's check-in
/// waits for the cloud that launched it before another cloud does it: long
/// enough for a live cloud's own driver, short against a lease.
pub const ORPHAN_GRACE_MS: i64 = 3_000;

/// The advisory lock every writer holds (`berth-sim` in ASCII).
const LEDGER_LOCK: i64 = 0x6265_7274_682d_7369;

const SCHEMA: &str = "
    CREATE SEQUENCE IF NOT EXISTS sim_instances_version;
    CREATE TABLE IF NOT EXISTS sim_instances (
        seq BIGINT PRIMARY KEY NOT NULL,
        id TEXT NOT NULL UNIQUE,
        tags TEXT NOT NULL,
        zone TEXT NOT NULL,
        instance_type TEXT NOT NULL,
        state TEXT NOT NULL,
        hardware TEXT NOT NULL,
        client_token TEXT UNIQUE,
        host_instance TEXT,
        agent_machine TEXT,
        one_time_password TEXT,
        agent TEXT NOT NULL,
        launched_at_ms BIGINT NOT NULL,
        changed_at_ms BIGINT NOT NULL,
        version BIGINT NOT NULL DEFAULT nextval('sim_instances_version')
    );
    CREATE INDEX IF NOT EXISTS sim_instances_by_version ON sim_instances (version);
    CREATE TABLE IF NOT EXISTS sim_meta (
        key TEXT PRIMARY KEY NOT NULL,
        value TEXT NOT NULL
    );
";

/// What changed in the database since a cloud last looked.
pub(super) struct Update {
    /// New rows, and rows changed since (whole), in version order.
    pub records: Vec<Record>,
    pub rng: Option<RngPosition>,
}

/// One cloud's connection to the shared ledger.
pub(super) struct SharedLedger {
    url: String,
    /// Dropped after a failure, and made again by the next call.
    conn: Option<PgConnection>,
    /// The highest row version read.
    seen: i64,
    /// Whether a transaction holding the lock is open.
    locked: bool,
}

impl SharedLedger {
    /// Connects to the database at `url`, makes the ledger's tables if
    /// missing, and reads the whole ledger.
    ///
    /// # Errors
    ///
    /// [`SimError::SharedLedger`] naming what failed.
    pub fn open(url: &str) -> Result<(SharedLedger, Update), SimError> {
        let mut ledger = SharedLedger {
            url: url.to_string(),
            conn: None,
            seen: 0,
            locked: false,
        };
        let conn = ledger.conn().map_err(SimError::SharedLedger)?;
        // Several controllers starting at once would race to make the
        // tables: one at a time.
        conn.batch_execute(&format!(
            "BEGIN; SELECT pg_advisory_xact_lock({LEDGER_LOCK}); {SCHEMA} COMMIT;"
        ))
        .map_err(|e| SimError::SharedLedger(format!("cannot make the ledger's tables: {e}")))?;
        let update = ledger.read().map_err(SimError::SharedLedger)?;
        Ok((ledger, update))
    }

    fn conn(&mut self) -> Result<&mut PgConnection, String> {
        if self.conn.is_none() {
            let mut conn = PgConnection::establish(&self.url)
                .map_err(|e| format!("cannot connect to the shared ledger: {e}"))?;
            conn.batch_execute(&format!(
                "SET idle_in_transaction_session_timeout = {}",
                POSTGRES_IDLE_IN_TRANSACTION.as_millis()
            ))
            .map_err(|e| format!("cannot set up the shared ledger's connection: {e}"))?;
            self.conn = Some(conn);
        }
        self.conn
            .as_mut()
            .ok_or_else(|| "no connection to the shared ledger".to_string())
    }

    /// Forgets the connection after a failure: it may be broken.
    fn fail(&mut self, what: &str, e: impl std::fmt::Display) -> String {
        self.conn = None;
        self.locked = false;
        format!("{what}: {e}")
    }

    /// The rows changed since the last read, without the lock.
    ///
    /// # Errors
    ///
    /// The database's.
    pub fn read(&mut self) -> Result<Update, String> {
        let seen = self.seen;
        let read = {
            let conn = self.conn()?;
            read_since(conn, seen)
        };
        match read {
            Ok((update, newest)) => {
                self.seen = self.seen.max(newest);
                Ok(update)
            }
            Err(e) => Err(self.fail("cannot read the shared ledger", e)),
        }
    }

    /// Takes the writers' lock in a new transaction, then reads what
    /// changed. The lock is held until [`SharedLedger::write`] or
    /// [`SharedLedger::unlock`].
    ///
    /// # Errors
    ///
    /// The database's; no lock is held then.
    pub fn lock_and_read(&mut self) -> Result<Update, String> {
        self.unlock();
        let locked = self.conn()?.batch_execute(&format!(
            "BEGIN; SELECT pg_advisory_xact_lock({LEDGER_LOCK});"
        ));
        if let Err(e) = locked {
            return Err(self.fail("cannot lock the shared ledger", e));
        }
        self.locked = true;
        let read = self.read();
        if read.is_err() {
            self.unlock();
        }
        read
    }

    /// Ends the transaction [`SharedLedger::lock_and_read`] opened, writing
    /// nothing.
    pub fn unlock(&mut self) {
        if !std::mem::take(&mut self.locked) {
            return;
        }
        let rolled_back = self.conn().and_then(|c| {
            c.batch_execute("ROLLBACK")
                .map_err(|e| format!("cannot let go of the shared ledger's lock: {e}"))
        });
        if let Err(e) = rolled_back {
            log::warn!("{e}");
            self.conn = None;
        }
    }

    /// Writes `batch` and commits, letting go of the lock.
    ///
    /// # Errors
    ///
    /// Refused without the lock (what the batch was decided on may be out
    /// of date); otherwise the database's, and nothing was written.
    pub fn write(&mut self, batch: &Batch) -> Result<(), String> {
        if !self.locked {
            return Err("the shared ledger was not locked for this change".to_string());
        }
        let written = {
            let conn = self.conn()?;
            write_batch(conn, batch).and_then(|()| conn.batch_execute("COMMIT"))
        };
        self.locked = false;
        if let Err(e) = written {
            let reason = format!("cannot write to the shared ledger: {e}");
            // The transaction failed: roll it back, or drop the connection.
            if self
                .conn
                .as_mut()
                .is_none_or(|c| c.batch_execute("ROLLBACK").is_err())
            {
                self.conn = None;
            }
            return Err(reason);
        }
        Ok(())
    }
}

/// The most rows one statement of [`read_since`] reads. Bounded, the read
/// is planned as a walk of the version index from `seen` whatever the
/// table's statistics say; unbounded, a table that grew since it was last
/// analyzed was planned as a scan and sort of every row, on every read.
const READ_CHUNK: i64 = 4096;

fn read_since(conn: &mut PgConnection, seen: i64) -> QueryResult<(Update, i64)> {
    let mut rows: Vec<(Row, i64)> = Vec::new();
    let mut newest = seen;
    loop {
        let chunk: Vec<(Row, i64)> = sim_instances::table
            .filter(sql::<Bool>("version > ").bind::<BigInt, _>(newest))
            .order(sql::<BigInt>("version"))
            .limit(READ_CHUNK)
            .select((Row::as_select(), sql::<BigInt>("version")))
            .load(conn)?;
        let full = chunk.len() as i64 == READ_CHUNK;
        newest = chunk.last().map_or(newest, |(_, v)| *v);
        rows.extend(chunk);
        if !full {
            break;
        }
    }
    let mut values = Values::default();
    let records = rows
        .into_iter()
        .map(|(row, _)| row.into_record(&mut values))
        .collect::<Result<Vec<_>, String>>()
        .map_err(|e| diesel::result::Error::DeserializationError(e.into()))?;
    let rng = sim_meta::table
        .filter(sim_meta::key.eq(RNG_KEY))
        .select(sim_meta::value)
        .first::<String>(conn)
        .optional()?
        .and_then(|text| parse_rng(&text));
    Ok((Update { records, rng }, newest))
}

/// Rows per INSERT statement, well under PostgreSQL's limit of bound
/// parameters per statement (65,535).
const INSERT_CHUNK: usize = 1000;

fn write_batch(conn: &mut PgConnection, batch: &Batch) -> QueryResult<()> {
    let rows: Vec<Row> = batch.inserts.iter().map(Row::from_record).collect();
    for chunk in rows.chunks(INSERT_CHUNK) {
        diesel::insert_into(sim_instances::table)
            .values(chunk)
            .execute(conn)?;
    }
    if !batch.changes.is_empty() {
        let seqs: Vec<i64> = batch.changes.iter().map(|c| to_i64(c.seq)).collect();
        let states: Vec<&str> = batch.changes.iter().map(|c| c.state.as_str()).collect();
        let agents: Vec<&str> = batch.changes.iter().map(|c| c.agent.as_str()).collect();
        let times: Vec<i64> = batch.changes.iter().map(|c| c.changed_at_ms).collect();
        diesel::sql_query(
            "UPDATE sim_instances AS s \
             SET state = v.state, agent = v.agent, changed_at_ms = v.changed_at_ms, \
                 version = nextval('sim_instances_version') \
             FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[]) \
                 AS v(seq, state, agent, changed_at_ms) \
             WHERE s.seq = v.seq",
        )
        .bind::<Array<BigInt>, _>(seqs)
        .bind::<Array<Text>, _>(states)
        .bind::<Array<Text>, _>(agents)
        .bind::<Array<BigInt>, _>(times)
        .execute(conn)?;
    }
    if let Some(rng) = batch.rng {
        diesel::insert_into(sim_meta::table)
            .values((
                sim_meta::key.eq(RNG_KEY),
                sim_meta::value.eq(format!("{}:{}", rng.seed, rng.word_pos)),
            ))
            .on_conflict(sim_meta::key)
            .do_update()
            .set(sim_meta::value.eq(format!("{}:{}", rng.seed, rng.word_pos)))
            .execute(conn)?;
    }
    Ok(())
}

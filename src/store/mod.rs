//! The store: berth's single source of truth, in diesel over SQLite (the
//! embedded default) or PostgreSQL.
//!
//! Every change is one transaction that also appends to the change log, so
//! the whole state is introspectable and globally ordered by revision; the
//! engine's actors rebuild themselves from it after any restart, and clients
//! can follow the log from any revision. Writes go through a single writer
//! that commits whatever is queued in one transaction ([`writer`]); reads
//! use a pool and never wait for the writer.
//!
//! Single rows are read with `get_result`, not `first`: `first` adds a
//! bound `LIMIT`, which makes SQLite prepare the cached statement again on
//! every run (it was a seventh of the writer's time when adding units).

pub mod agents;
pub mod applications;
pub mod db;
pub mod machines;
pub mod model;
pub mod records;
pub mod schema;
pub mod units;
pub mod writer;
pub mod zones;

pub(crate) use model::model_constraints_tx;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use diesel::prelude::*;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::domain::words::word_enum;
use crate::store::db::{Conn, DatabaseUrl, Pool};
use crate::store::schema::{changes, log_head};
use crate::store::writer::{Tx, Writer};

/// Connections kept for readers (status, the event stream, the engine).
pub const READ_POOL_SIZE: u32 = 8;

/// Why a store operation failed. The first group is the caller's doing and
/// changes nothing; the rest are faults of the store itself.
#[derive(Clone, Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("invalid database url {0:?}: expected postgres://... or a SQLite file path")]
    BadUrl(String),
    #[error("cannot connect to the database: {0}")]
    Connect(String),
    #[error("cannot migrate the database: {0}")]
    Migration(String),
    #[error("database error")]
    Database(#[source] Arc<diesel::result::Error>),
    #[error("stored data is inconsistent: {0}")]
    Invariant(String),
    #[error("the store's writer has stopped")]
    WriterGone,
}

impl From<diesel::result::Error> for StoreError {
    fn from(e: diesel::result::Error) -> StoreError {
        StoreError::Database(Arc::new(e))
    }
}

impl From<r2d2::Error> for StoreError {
    fn from(e: r2d2::Error) -> StoreError {
        StoreError::Connect(e.to_string())
    }
}

word_enum! {
    /// The kinds of thing the change log speaks of.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
    #[serde(rename_all = "lowercase")]
    pub enum Entity {
        Model => "model",
        Charm => "charm",
        Application => "application",
        Unit => "unit",
        Machine => "machine",
        Relation => "relation",
        Zone => "zone",
    }
}

word_enum! {
    /// What happened to an entity.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
    #[serde(rename_all = "lowercase")]
    pub enum ChangeKind {
        Created => "created",
        Updated => "updated",
        Removed => "removed",
    }
}

word_enum! {
    /// Who made a change. The engine follows the log for changes it did not
    /// make itself.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
    #[serde(rename_all = "lowercase")]
    pub enum Origin {
        /// A user, through the API or the command line.
        User => "user",
        /// The provisioning engine.
        Engine => "engine",
        /// A machine agent (check-in, heartbeats).
        Agent => "agent",
        /// A provider's report (webhooks, reconciliation).
        Provider => "provider",
    }
}

/// One entry of the change log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub revision: i64,
    pub entity: Entity,
    pub id: String,
    pub change: ChangeKind,
    /// What changed, in a few words (`state=allocating zone=sim-a`).
    pub detail: String,
    pub origin: Origin,
    pub at_ms: i64,
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Runs a blocking store read (and whatever is done with what it read) off
/// the event loop. Unlike [`Store::blocking`], a failure to run says why.
///
/// # Errors
///
/// The read's own error; a read whose thread panicked is
/// [`StoreError::Invariant`] (a bug), and one that could not be scheduled
/// is [`StoreError::Connect`] (overloaded).
pub async fn blocking<T, F>(f: F) -> Result<T, StoreError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, StoreError> + Send + 'static,
{
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        if e.is_panic() {
            StoreError::Invariant("a store read panicked".into())
        } else {
            StoreError::Connect("the store read was cancelled".into())
        }
    })?
}

/// The store: a writer for changes and a pool for reads.
#[derive(Clone)]
pub struct Store {
    url: DatabaseUrl,
    pool: Pool,
    writer: Writer,
    /// The change log's latest revision, updated after every commit, so
    /// followers wake without polling.
    head: watch::Receiver<i64>,
}

impl Store {
    /// Opens (creating if need be) the store at `url`, bringing its schema
    /// up to date.
    ///
    /// # Errors
    ///
    /// [`StoreError::Connect`] or [`StoreError::Migration`].
    pub fn open(url: &DatabaseUrl) -> Result<Store, StoreError> {
        if let DatabaseUrl::Sqlite(path) = url {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| {
                    StoreError::Connect(format!("cannot create {}: {e}", dir.display()))
                })?;
            }
        }
        let manager = db::Manager::new(url.clone());
        let mut write_conn = manager
            .connect()
            .map_err(|e| StoreError::Connect(format!("{url}: {e}")))?;
        db::run_migrations(&mut write_conn)?;
        model::ensure_model(&mut write_conn)?;
        let revision: i64 = log_head::table
            .find(1)
            .select(log_head::revision)
            .get_result(&mut write_conn)?;
        let (head_tx, head) = watch::channel(revision);
        let writer = Writer::spawn(write_conn, head_tx)?;
        let pool = db::pool(url, READ_POOL_SIZE)?;
        Ok(Store {
            url: url.clone(),
            pool,
            writer,
            head,
        })
    }

    pub fn url(&self) -> &DatabaseUrl {
        &self.url
    }

    /// Runs a read on a pooled connection. Blocking: async callers wrap it
    /// in `spawn_blocking`.
    ///
    /// # Errors
    ///
    /// The read's own error, or [`StoreError::Connect`] if no connection
    /// could be had.
    pub fn read<T>(
        &self,
        f: impl FnOnce(&mut Conn) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut conn = self.pool.get()?;
        f(&mut conn)
    }

    /// Runs blocking store work (reads) on tokio's blocking threads, for
    /// callers on an event loop.
    ///
    /// # Errors
    ///
    /// The work's own error, or [`StoreError::WriterGone`] if the runtime
    /// is shutting down.
    pub async fn blocking<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
    {
        let store = self.clone();
        tokio::task::spawn_blocking(move || work(&store))
            .await
            .map_err(|_| StoreError::WriterGone)?
    }

    /// Runs a write in the writer's next batch (see [`writer`]).
    ///
    /// # Errors
    ///
    /// As [`Writer::write`].
    pub async fn write<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Tx<'_>) -> Result<T, StoreError> + Send + 'static,
    {
        self.writer.write(op).await
    }

    /// [`Store::write`] for callers outside an async runtime.
    ///
    /// # Errors
    ///
    /// As [`Writer::write`].
    pub fn write_blocking<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Tx<'_>) -> Result<T, StoreError> + Send + 'static,
    {
        self.writer.write_blocking(op)
    }

    /// Waits until every write queued before this call is committed.
    ///
    /// # Errors
    ///
    /// [`StoreError::WriterGone`] if the writer has stopped.
    pub async fn flush(&self) -> Result<(), StoreError> {
        self.write(|_| Ok(())).await
    }

    /// The change log's latest committed revision.
    pub fn revision(&self) -> i64 {
        *self.head.borrow()
    }

    /// A receiver that changes whenever the log grows.
    pub fn watch_revision(&self) -> watch::Receiver<i64> {
        self.head.clone()
    }

    /// Change-log entries after `since`, oldest first, at most `limit`.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`], or [`StoreError::Invariant`] for an entry
    /// this version cannot read.
    pub fn changes_since(&self, since: i64, limit: i64) -> Result<Vec<Change>, StoreError> {
        self.read(|conn| {
            let rows: Vec<(i64, String, String, String, String, String, i64)> = changes::table
                .select((
                    changes::revision,
                    changes::entity,
                    changes::entity_id,
                    changes::change,
                    changes::detail,
                    changes::origin,
                    changes::at_ms,
                ))
                .filter(changes::revision.gt(since))
                .order(changes::revision.asc())
                .limit(limit)
                .load(conn)?;
            rows.into_iter()
                .map(|(revision, entity, id, change, detail, origin, at_ms)| {
                    Ok(Change {
                        revision,
                        entity: Entity::parse(&entity).ok_or_else(|| {
                            StoreError::Invariant(format!("unknown entity {entity:?}"))
                        })?,
                        id,
                        change: ChangeKind::parse(&change).ok_or_else(|| {
                            StoreError::Invariant(format!("unknown change {change:?}"))
                        })?,
                        detail,
                        origin: Origin::parse(&origin).ok_or_else(|| {
                            StoreError::Invariant(format!("unknown origin {origin:?}"))
                        })?,
                        at_ms,
                    })
                })
                .collect()
        })
    }
}

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
//!
//! - [`lifecycle`]: the one writer of a machine's life: every change of a
//!   machine's state, whoever causes it, goes through it.
//! - [`machines`], [`units`], [`applications`], [`model`], [`zones`]: the
//!   user's operations, each one transaction.
//! - [`plans`]: a command rehearsed (what it would change, undone or
//!   kept by a check), and the hourly budgets.
//! - [`credentials`]: the admin token's hash; the model's secrets.
//! - [`census`]: the zone census, so that controllers placing at once
//!   spread machines as one.
//! - [`leases`]: the provisioning lock (each machine's lease) and the
//!   cluster-wide jobs' leases, for several controllers on one database;
//!   [`listener`]: hearing the other controllers' commits.
//! - the status snapshot and delta reads are written in
//!   [`crate::status::snapshot`], beside the rest of status.
//! - [`change_log`], [`writer`]: the change log's vocabulary and the single
//!   writer with group commit; [`checkpointer`]: SQLite's log copied into
//!   its file beside the writer; [`error`]: [`StoreError`].
//! - [`db`], [`schema`], [`records`]: connections, the diesel schema and
//!   rows turned into domain types.

pub mod applications;
pub mod census;
pub mod change_log;
pub mod checkpointer;
pub mod credentials;
pub mod db;
pub mod error;
pub mod leases;
pub mod lifecycle;
pub mod listener;
mod machine_save;
pub mod machines;
pub mod model;
pub mod plans;
pub mod records;
pub mod schema;
mod together;
pub mod units;
pub mod writer;
pub mod zones;

pub use change_log::{millis, now_ms, Change, ChangeKind, Entity, Origin};
pub use error::StoreError;
pub(crate) use model::model_constraints_tx;

use std::sync::Arc;

use diesel::prelude::*;

use tokio::sync::watch;

use crate::store::db::{Conn, DatabaseUrl, Pool};
use crate::store::schema::{changes, log_head};
use crate::store::writer::{Tx, Writer};

/// Ids per statement that lists them (`IN (...)`), under SQLite's
/// bound-parameter limit.
pub(crate) const IDS_PER_STATEMENT: usize = 500;

/// Connections kept for readers (status, the event stream, the engine).
pub const READ_POOL_SIZE: u32 = 8;

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
    /// The lifecycle policy every transition is applied with, shared by
    /// every handle (see [`Store::set_policy`]).
    policy: Arc<std::sync::RwLock<crate::domain::machine::Policy>>,
    /// Who this store's controller is among the controllers sharing the
    /// database: the holder of its leases. New at every open, so a controller that comes
    /// back is a new holder and never mistakes a lease it lost for its own.
    holder: Arc<str>,
    /// Wraps every write of this handle ([`Store::guarded`]): plans,
    /// budgets and `if_revision`.
    guard: Option<Arc<plans::Guard>>,
}

/// A new controller identity: the host's name, the process id and a
/// random part (`web-1-4242-9f2c61d0`).
fn new_holder_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "controller".to_string());
    format!(
        "{host}-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

/// Why berth cannot write the SQLite database at `path` (or create it,
/// and the journal files beside it, in its directory), if it cannot:
/// SQLite itself says only "unable to open database file", or opens the
/// file read-only.
fn cannot_write_sqlite(path: &std::path::Path) -> Option<String> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let file = path.exists().then_some(path);
    file.into_iter().chain([dir]).find_map(|target| {
        writable(target).err().map(|e| {
            format!(
                "{} cannot be written ({e}); berth needs to write its database there",
                target.display()
            )
        })
    })
}

/// Whether this process may write `path` (a read-only file system says
/// so even to root).
#[cfg(unix)]
fn writable(path: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: access reads the NUL-terminated path and nothing else.
    if unsafe { libc::access(c_path.as_ptr(), libc::W_OK) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(unix))]
fn writable(_path: &std::path::Path) -> std::io::Result<()> {
    Ok(())
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
            // Checked first: SQLite opens a file it cannot write read-only
            // without a word, and whether it then fails (and how) depends
            // on what the last controller left beside it.
            if let Some(why) = cannot_write_sqlite(path) {
                return Err(StoreError::Connect(format!("{url}: {why}")));
            }
        }
        let manager = db::Manager::new(url.clone());
        // Why a SQLite file cannot be written was said above.
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
        let head_tx = Arc::new(head_tx);
        let holder: Arc<str> = new_holder_id().into();
        let writer = Writer::spawn(write_conn, manager, head_tx.clone())?;
        let pool = db::pool(url, READ_POOL_SIZE)?;
        if let DatabaseUrl::Postgres(postgres) = url {
            listener::spawn(postgres.clone(), head_tx).map_err(|e| {
                StoreError::Connect(format!("cannot start the change listener: {e}"))
            })?;
        }
        Ok(Store {
            url: url.clone(),
            pool,
            writer,
            head,
            policy: Arc::default(),
            holder,
            guard: None,
        })
    }

    pub fn url(&self) -> &DatabaseUrl {
        &self.url
    }

    /// This controller's identity among those sharing the database: the
    /// holder of its leases.
    pub fn holder(&self) -> &str {
        &self.holder
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
        match self.guard.clone() {
            None => self.writer.write(op).await,
            Some(guard) => {
                self.writer
                    .write(move |tx| plans::guarded(tx, &guard, op))
                    .await
            }
        }
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

    /// The change log's latest revision as the database holds it now,
    /// which another controller's commits may have moved past
    /// [`Store::revision`] before this one has heard of them.
    ///
    /// # Errors
    ///
    /// The database's.
    pub fn stored_revision(&self) -> Result<i64, StoreError> {
        self.read(|conn| {
            Ok(log_head::table
                .find(1)
                .select(log_head::revision)
                .get_result(conn)?)
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_in_a_writable_directory_can_be_written_named_bare_or_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("berth.db");
        assert_eq!(cannot_write_sqlite(&path), None);
        std::fs::write(&path, b"").unwrap();
        assert_eq!(cannot_write_sqlite(&path), None);
        // A bare name is in the working directory, not in "".
        assert_eq!(cannot_write_sqlite(std::path::Path::new("berth.db")), None);
    }

    #[test]
    fn a_database_where_nothing_can_be_written_says_where_and_why() {
        let why = cannot_write_sqlite(std::path::Path::new("/no-such-dir-here/berth.db"))
            .expect("an absent directory cannot be written");
        assert!(
            why.starts_with("/no-such-dir-here cannot be written ("),
            "{why}"
        );
        assert!(
            why.ends_with("berth needs to write its database there"),
            "{why}"
        );
    }
}

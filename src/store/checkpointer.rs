//! SQLite's write-ahead log copied into the database file beside the
//! writer, not inside its commits.
//!
//! By default SQLite checkpoints in the connection that commits, once the
//! log holds a thousand pages: the store's one writer stopped every few
//! batches to copy the log into the file and wait for it to reach the
//! disk, a tenth of its time in a large deploy. After each commit the
//! writer now nudges the checkpointer thread, which waits
//! [`CHECKPOINT_AFTER`] so that one checkpoint covers the commits of that
//! moment, then runs a passive checkpoint on its own connection. A passive
//! checkpoint never blocks the writer or a reader: it copies what no
//! reader still needs, and the rest at the next one.
//!
//! The writer still checkpoints itself, but only once the log holds
//! [`WRITER_CHECKPOINT_PAGES`] (see [`crate::store::db::Manager::connect`]).
//! SQLite starts the log again from its beginning only when a writer's
//! transaction begins with all of it copied, which a checkpoint from
//! beside a busy writer never leaves: without the writer's own, the log of
//! one 100,000-unit deploy grew past 800 MB. Finding most of the log
//! already copied, the writer's checkpoint is short, and the log stays
//! near that size.
//!
//! The thread ends with the writer (its nudges' sender dropped). A failed
//! checkpoint is logged and the connection opened again at the next
//! nudge; the log is still whole, so nothing is lost, it only grows until
//! a checkpoint succeeds (SQLite checkpoints it when the last connection
//! closes, and at the next start).

use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError};
use std::thread;
use std::time::Duration;

use diesel::connection::SimpleConnection;

use crate::store::db::{Conn, Manager};
use crate::store::error::StoreError;

/// How long the checkpointer waits after a nudge before it checkpoints,
/// so that the commits of that moment share one checkpoint (and one
/// `fsync` of the database file).
pub const CHECKPOINT_AFTER: Duration = Duration::from_millis(200);

/// How many pages of log the writer lets grow before it checkpoints
/// itself (SQLite's `wal_autocheckpoint`; its default is 1,000).
pub const WRITER_CHECKPOINT_PAGES: u32 = 8192;

/// What the writer holds to nudge the checkpointer after a commit.
pub struct Nudge(SyncSender<()>);

impl Nudge {
    /// Tells the checkpointer the log has grown. Never waits: a nudge
    /// already waiting covers this one.
    pub fn committed(&self) {
        let _ = self.0.try_send(());
    }
}

/// Starts the checkpointer thread for the SQLite database `manager`
/// connects to, on a connection of its own.
///
/// # Errors
///
/// [`StoreError::Connect`] if the thread cannot be started.
pub fn spawn(manager: Manager) -> Result<Nudge, StoreError> {
    let (nudge, nudges) = sync_channel(1);
    thread::Builder::new()
        .name("berth-store-checkpointer".into())
        .spawn(move || checkpoint_loop(&manager, &nudges))
        .map_err(|e| StoreError::Connect(format!("cannot start the checkpointer thread: {e}")))?;
    Ok(Nudge(nudge))
}

fn checkpoint_loop(manager: &Manager, nudges: &Receiver<()>) {
    let mut conn: Option<Conn> = None;
    while nudges.recv().is_ok() {
        thread::sleep(CHECKPOINT_AFTER);
        // The commits made while it waited are covered by this checkpoint.
        match nudges.try_recv() {
            Ok(()) | Err(TryRecvError::Empty) => {}
            Err(TryRecvError::Disconnected) => return,
        }
        if conn.is_none() {
            match manager.connect() {
                Ok(fresh) => conn = Some(fresh),
                Err(e) => {
                    log::warn!("store checkpointer: cannot connect to the database: {e}");
                    continue;
                }
            }
        }
        if let Some(Conn::Sqlite(c)) = conn.as_mut() {
            if let Err(e) = c.batch_execute("PRAGMA wal_checkpoint(PASSIVE)") {
                log::warn!("store checkpointer: the checkpoint failed ({e}); will connect again");
                conn = None;
            }
        }
    }
}

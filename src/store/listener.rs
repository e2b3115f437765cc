//! Hearing the other controllers' commits (PostgreSQL only).
//!
//! Every commit that grows the change log sends `NOTIFY berth_changes` with
//! the new head revision ([`crate::store::writer`]). One thread per store
//! keeps a connection that `LISTEN`s on that channel and moves the store's
//! head when it hears a later revision, so that the engine's change-log
//! follower, the status cache and event streams wake on any controller's
//! commit as they do on their own.
//!
//! The connection is asked for notifications without a round trip every
//! [`NOTIFY_POLL`]; every [`HEAD_CHECK`] it also reads the head itself,
//! which notices a lost connection (and then connects again) and anything
//! sent while it was away. The thread ends when nothing watches the head
//! any more (every handle on the store is dropped).
//!
//! Revisions are assigned under the `log_head` row lock, so a revision
//! heard here means every earlier one is committed too: the head can be
//! moved to it directly.

use std::sync::Arc;
use std::time::{Duration, Instant};

use diesel::prelude::*;
use diesel::PgConnection;
use tokio::sync::watch;

use crate::store::schema::log_head;
use crate::store::writer::{advance_head, CHANGES_CHANNEL};

/// How often the connection is asked for notifications it has received.
pub const NOTIFY_POLL: Duration = Duration::from_millis(10);
/// How often the head is read from the database regardless.
pub const HEAD_CHECK: Duration = Duration::from_secs(2);
/// How long to wait before connecting again after the database went away.
const RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// Starts the listener thread for the PostgreSQL database at `url`.
///
/// # Errors
///
/// The thread could not be started.
pub fn spawn(url: String, head: Arc<watch::Sender<i64>>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("berth-store-listener".into())
        .spawn(move || listen(&url, &head))
        .map(|_| ())
}

fn listen(url: &str, head: &watch::Sender<i64>) {
    while !head.is_closed() {
        match PgConnection::establish(url) {
            Ok(mut conn) => {
                if let Err(e) = follow(&mut conn, head) {
                    log::warn!("store listener: lost the database ({e}); connecting again");
                }
            }
            Err(e) => log::debug!("store listener: cannot connect: {e}"),
        }
        std::thread::sleep(RECONNECT_DELAY);
    }
}

/// Listens on one connection until it fails or nothing watches the head.
fn follow(conn: &mut PgConnection, head: &watch::Sender<i64>) -> QueryResult<()> {
    diesel::sql_query(format!("LISTEN {CHANGES_CHANNEL}")).execute(conn)?;
    let mut checked = Instant::now() - HEAD_CHECK;
    while !head.is_closed() {
        if checked.elapsed() >= HEAD_CHECK {
            let revision: i64 = log_head::table
                .find(1)
                .select(log_head::revision)
                .get_result(conn)?;
            advance_head(head, revision);
            checked = Instant::now();
        }
        let mut heard = None;
        for notification in conn.notifications_iter() {
            let notification = notification?;
            if let Ok(revision) = notification.payload.parse::<i64>() {
                heard = heard.max(Some(revision));
            }
        }
        if let Some(revision) = heard {
            advance_head(head, revision);
        }
        std::thread::sleep(NOTIFY_POLL);
    }
    Ok(())
}

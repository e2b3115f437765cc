//! Waiting for a condition instead of sleeping: [`eventually`] checks a
//! condition until it holds, and gives up with a message naming what was
//! awaited and what was last seen. [`until`] does the same for the store's
//! status, waking on each change of the change log instead of polling;
//! [`throughout`] checks that a condition keeps holding.
//!
//! The patience is a bound, not a timing assertion: long enough for
//! anything the tests wait for, so a test that reaches it has failed.

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use berth::status::snapshot::StatusSnapshot;
use berth::store::Store;
use tokio::sync::watch;
use tokio::time::Instant;

/// How long a test waits for the engine before it gives up.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// How often [`eventually`] checks a condition it cannot be woken for.
const POLL: Duration = Duration::from_millis(10);

/// Checks `check` until it answers `Ok`, and returns that answer. `Err`
/// carries what was seen instead; the last one is shown if `patience` runs
/// out.
///
/// # Panics
///
/// When `patience` runs out: "gave up waiting for {what}".
pub async fn eventually<T, E, F, Fut>(what: &str, patience: Duration, check: F) -> T
where
    E: Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    wait(what, patience, None, check).await
}

/// Like [`eventually`], checking again on each change of the change log
/// rather than on a timer.
pub async fn eventually_on_change<T, E, F, Fut>(
    store: &Store,
    what: &str,
    patience: Duration,
    check: F,
) -> T
where
    E: Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    wait(what, patience, Some(store.watch_revision()), check).await
}

async fn wait<T, E, F, Fut>(
    what: &str,
    patience: Duration,
    mut changes: Option<watch::Receiver<i64>>,
    mut check: F,
) -> T
where
    E: Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let deadline = Instant::now() + patience;
    loop {
        if let Some(changes) = &mut changes {
            changes.borrow_and_update();
        }
        let seen = match check().await {
            Ok(done) => return done,
            Err(seen) => seen,
        };
        let woken = async {
            match &mut changes {
                Some(changes) => {
                    let _ = changes.changed().await;
                }
                None => tokio::time::sleep(POLL).await,
            }
        };
        tokio::select! {
            () = woken => {}
            () = tokio::time::sleep_until(deadline) => {
                panic!("gave up after {patience:?} waiting for {what}; last seen: {seen:#?}")
            }
        }
    }
}

/// Waits until `done` holds for the store's status, waking on every change
/// of the change log; gives up after [`PATIENCE`].
pub async fn until(
    store: &Store,
    what: &str,
    done: impl Fn(&StatusSnapshot) -> bool,
) -> StatusSnapshot {
    until_within(PATIENCE, store, what, done).await
}

/// [`until`], giving up after `patience`.
pub async fn until_within(
    patience: Duration,
    store: &Store,
    what: &str,
    done: impl Fn(&StatusSnapshot) -> bool,
) -> StatusSnapshot {
    eventually_on_change(store, what, patience, || async {
        let status = store.blocking(|s| s.status()).await.unwrap();
        if done(&status) {
            Ok(status)
        } else {
            Err(machine_states(&status))
        }
    })
    .await
}

/// Checks, on every change of the change log for `period`, that `holds`
/// stays true of the store's status.
///
/// # Panics
///
/// As soon as it does not: "{what} stopped holding".
pub async fn throughout(
    period: Duration,
    store: &Store,
    what: &str,
    holds: impl Fn(&StatusSnapshot) -> bool,
) {
    let mut changes = store.watch_revision();
    let end = Instant::now() + period;
    loop {
        changes.borrow_and_update();
        let status = store.blocking(|s| s.status()).await.unwrap();
        assert!(
            holds(&status),
            "{what} stopped holding: {:#?}",
            machine_states(&status)
        );
        tokio::select! {
            _ = changes.changed() => {}
            () = tokio::time::sleep_until(end) => return,
        }
    }
}

/// Each machine's id, state and last error: what a failed wait shows.
fn machine_states(status: &StatusSnapshot) -> Vec<(String, String, Option<String>)> {
    status
        .machines
        .iter()
        .map(|m| {
            (
                m.id.to_string(),
                format!("{:?}", m.state()),
                m.machine.lifecycle.last_error.clone(),
            )
        })
        .collect()
}

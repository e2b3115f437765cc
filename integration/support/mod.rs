//! What the integration tests share: stores on both backends, and moto's
//! EC2 server.

pub mod controller;
pub mod engine_steps;
#[cfg(feature = "ec2")]
pub mod moto;
pub mod postgres;

use berth::store::db::DatabaseUrl;
use berth::store::Store;

/// A store on a fresh SQLite file; the directory lives as long as the guard.
pub fn sqlite_store() -> (Store, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let url = DatabaseUrl::Sqlite(dir.path().join("berth.db"));
    (Store::open(&url).expect("open sqlite store"), dir)
}

/// A store on a fresh database of the test PostgreSQL server.
pub fn postgres_store() -> (Store, ()) {
    let url = DatabaseUrl::parse(&postgres::fresh_database()).expect("postgres url");
    (Store::open(&url).expect("open postgres store"), ())
}

/// Runs each named `async fn(Store)` once on SQLite and once on
/// PostgreSQL, as `sqlite::name` and `postgres::name`.
#[macro_export]
macro_rules! on_both_backends {
    ($($test:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    let (store, _guard) = $crate::support::sqlite_store();
                    super::$test(store).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    let (store, _guard) = $crate::support::postgres_store();
                    super::$test(store).await;
                }
            )*
        }
    };
}

/// A charm directory in Juju's layout, for deploy tests.
pub fn charm_dir(metadata: &str, config: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temporary directory");
    std::fs::write(dir.path().join("metadata.yaml"), metadata).expect("write metadata.yaml");
    if let Some(config) = config {
        std::fs::write(dir.path().join("config.yaml"), config).expect("write config.yaml");
    }
    dir
}

/// How long a test waits for the engine before it gives up: long enough
/// for anything the tests wait for, so a test that needs it has failed.
pub const PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

/// Waits until `done` holds for the store's status, waking on every change
/// of the change log; gives up after [`PATIENCE`].
pub async fn until(
    store: &Store,
    what: &str,
    done: impl Fn(&berth::status::snapshot::StatusSnapshot) -> bool,
) -> berth::status::snapshot::StatusSnapshot {
    until_within(PATIENCE, store, what, done).await
}

/// [`until`], giving up after `patience`.
pub async fn until_within(
    patience: std::time::Duration,
    store: &Store,
    what: &str,
    done: impl Fn(&berth::status::snapshot::StatusSnapshot) -> bool,
) -> berth::status::snapshot::StatusSnapshot {
    let mut head = store.watch_revision();
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        head.borrow_and_update();
        let status = store.blocking(|s| s.status()).await.unwrap();
        if done(&status) {
            return status;
        }
        tokio::select! {
            _ = head.changed() => {}
            _ = tokio::time::sleep_until(deadline) => panic!(
                "gave up waiting for {what}: {:#?}",
                status
                    .machines
                    .iter()
                    .map(|m| (m.id.to_string(), m.state(), m.machine.lifecycle.last_error.clone()))
                    .collect::<Vec<_>>()
            ),
        }
    }
}

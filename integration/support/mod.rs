//! What the integration tests share: the one way to start berth
//! ([`app::spawn_app`]), waiting for conditions ([`eventually`]), stores on
//! both backends, moto's EC2 server, and a headless Chromium for the
//! dashboard ([`webdriver`]).

pub mod app;
pub mod controller;
pub mod engine_steps;
pub mod eventually;
pub mod load;
#[cfg(feature = "ec2")]
pub mod moto;
#[cfg(feature = "ec2")]
pub mod moto_api;
pub mod postgres;
pub mod sshd;
pub mod webdriver;

pub use eventually::{eventually, throughout, until, until_within, PATIENCE};

use std::collections::BTreeSet;

use berth::engine::config::ProvisionerConfig;
use berth::providers::sim::SimProvider;
use berth::store::Store;
use serde_json::{json, Value};

use app::{Backend, Site};

/// Held by the tests that load the machine most (several controller
/// processes, or hundreds of connections against one), so that they take
/// turns instead of starving each other of the two cores: starved, a
/// client's keep-alive connection can sit past the server's keep-alive and
/// be closed under its next request.
pub async fn heavy_test() -> tokio::sync::MutexGuard<'static, ()> {
    HEAVY.lock().await
}

/// [`heavy_test`] for a test that is not async.
pub fn heavy_test_blocking() -> tokio::sync::MutexGuard<'static, ()> {
    HEAVY.blocking_lock()
}

static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A store on a fresh SQLite file; the directory lives as long as the site.
pub fn sqlite_store() -> (Store, Site) {
    let site = Site::new(Backend::Sqlite);
    (site.open_store(), site)
}

/// A store on a fresh database of the test PostgreSQL server.
pub fn postgres_store() -> (Store, Site) {
    let site = Site::new(Backend::Postgres);
    (site.open_store(), site)
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

/// Runs each named test, a function of the [`app::Backend`] it runs on,
/// once on SQLite and once on PostgreSQL, as `sqlite::name` and
/// `postgres::name`: those under `actix` are `async` and run in an actix
/// system (as an engine needs); those under `plain` are not, and make the
/// systems they need themselves.
#[macro_export]
macro_rules! on_each_backend {
    (actix: [$($test:ident),* $(,)?], plain: [$($plain:ident),* $(,)?] $(,)?) => {
        mod sqlite {
            $(
                #[actix_web::test]
                async fn $test() {
                    super::$test($crate::support::app::Backend::Sqlite).await;
                }
            )*
            $(
                #[test]
                fn $plain() {
                    super::$plain($crate::support::app::Backend::Sqlite);
                }
            )*
        }
        mod postgres {
            $(
                #[actix_web::test]
                async fn $test() {
                    super::$test($crate::support::app::Backend::Postgres).await;
                }
            )*
            $(
                #[test]
                fn $plain() {
                    super::$plain($crate::support::app::Backend::Postgres);
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

/// The engine's settings for tests: short backoffs, a short provider call
/// timeout and no periodic reconciliation.
pub fn fast_provisioner() -> ProvisionerConfig {
    ProvisionerConfig {
        backoff_initial_ms: 5,
        backoff_max_ms: 40,
        call_timeout_s: 2,
        reconcile_interval_s: 0,
        ..ProvisionerConfig::default()
    }
}

/// The ids of the simulated cloud's instances that are not gone.
pub fn live_instances(sim: &SimProvider) -> BTreeSet<String> {
    sim.ledger()
        .into_iter()
        .filter(|entry| !entry.state.is_gone())
        .map(|entry| entry.id)
        .collect()
}

/// Every machine and container of a status document, with its id, once
/// there are `count` and all are started; otherwise, for [`eventually`],
/// how many are and which are not.
pub fn all_started(status: &Value, count: usize) -> Result<Vec<(String, Value)>, String> {
    let mut machines = Vec::new();
    for (id, machine) in status["machines"].as_object().cloned().unwrap_or_default() {
        machines.push((id, machine.clone()));
        for (id, container) in machine["containers"]
            .as_object()
            .cloned()
            .unwrap_or_default()
        {
            machines.push((id, container));
        }
    }
    let waiting: Vec<String> = machines
        .iter()
        .filter(|(_, m)| m["juju-status"]["current"] != "started")
        .map(|(id, m)| format!("{id}: {} {}", m["juju-status"], m["machine-status"]))
        .collect();
    if machines.len() == count && waiting.is_empty() {
        Ok(machines)
    } else {
        Err(format!(
            "{} of {} started; waiting: {:?}",
            machines.len() - waiting.len(),
            machines.len(),
            waiting.iter().take(5).collect::<Vec<_>>()
        ))
    }
}

/// Asserts that each of `machines` has an instance of its own and that the
/// simulated cloud runs exactly those.
pub fn assert_one_live_instance_each(machines: &[(String, Value)], sim: &SimProvider) {
    let instances: BTreeSet<String> = machines
        .iter()
        .map(|(_, m)| m["instance-id"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(instances.len(), machines.len(), "{machines:?}");
    assert_eq!(live_instances(sim), instances);
}

/// An EC2 instance state-change notification, as EventBridge delivers it.
pub fn ec2_event(instance: &str, state: &str) -> String {
    json!({
        "version": "0",
        "id": "7bf73129-1428-4cd3-a780-95db273d1602",
        "detail-type": "EC2 Instance State-change Notification",
        "source": "aws.ec2",
        "account": "123456789012",
        "time": "2026-11-21T05:00:00Z",
        "region": "us-east-1",
        "resources": [format!("arn:aws:ec2:us-east-1:123456789012:instance/{instance}")],
        "detail": {"instance-id": instance, "state": state},
    })
    .to_string()
}

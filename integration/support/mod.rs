//! What the integration tests share: the one way to start berth
//! ([`app::spawn_app`]), waiting for conditions ([`eventually`]), stores on
//! both backends, moto's EC2 server, and a headless Chromium for the
//! dashboard ([`webdriver`]).

pub mod app;
pub mod controller;
pub mod engine_steps;
pub mod eventually;
#[cfg(feature = "ec2")]
pub mod moto;
pub mod postgres;
pub mod sshd;
pub mod webdriver;

pub use eventually::{eventually, throughout, until, until_within, PATIENCE};

use berth::store::Store;

use app::{Backend, Site};

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

//! The store going away under a running controller: PostgreSQL restarted
//! in the middle of a deploy. While it is away every request is answered
//! 503 with a clear error; once it is back, every connection (the
//! writer's included) is replaced and the deploy finishes with nothing
//! lost or duplicated.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use berth::engine::config::ProvisionerConfig;
use berth::providers::sim::SimConfig;
use berth::store::db::DatabaseUrl;

use crate::support::app::{spawn_app_with, Backend, Options, Site};
use crate::support::postgres::OwnServer;
use crate::support::{all_started, assert_one_live_instance_each, eventually};

const UNITS: usize = 500;

#[actix_web::test]
async fn a_postgres_restart_mid_deploy_answers_503_meanwhile_and_loses_nothing() {
    let server = OwnServer::start();
    let site = Site::on(DatabaseUrl::parse(&server.url()).unwrap());
    let app = spawn_app_with(Options {
        site: Some(site),
        ..Options::engine(
            Backend::Postgres,
            SimConfig {
                start_delay_ms: 200,
                ..SimConfig::default()
            },
            ProvisionerConfig::default(),
        )
    })
    .await;
    let deployed = app
        .deploy(&json!({"charm": "wordpress", "num_units": UNITS}))
        .await;
    assert_eq!(deployed.status(), StatusCode::CREATED);

    server.stop();
    let stopped = Instant::now();
    // While it is away, reads and writes alike are refused as unavailable,
    // promptly.
    let asked = Instant::now();
    let status = app.status().await;
    assert_eq!(status.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = status.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("database")),
        "{body}"
    );
    let add = app.add_machines(&json!({})).await;
    assert_eq!(add.status(), StatusCode::SERVICE_UNAVAILABLE);
    let answered_in = asked.elapsed();
    assert!(
        answered_in < Duration::from_secs(15),
        "two requests took {answered_in:?} to be refused"
    );
    let body: Value = add.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("database")),
        "{body}"
    );
    eprintln!("while the database was away, two requests were refused in {answered_in:?}");
    let away = Duration::from_secs(3).saturating_sub(stopped.elapsed());
    actix_web::rt::time::sleep(away).await;
    server.resume();
    let resumed = Instant::now();

    let started = eventually(
        "every machine started after the restart",
        Duration::from_secs(180),
        || async { all_started(&app.status_json().await, UNITS) },
    )
    .await;
    eprintln!(
        "{UNITS} machines started {:.1}s after the database came back",
        resumed.elapsed().as_secs_f64()
    );
    // Each on its own instance, and the cloud runs exactly those.
    assert_one_live_instance_each(&started, app.sim());
}

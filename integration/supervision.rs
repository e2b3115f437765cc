//! Supervision shown, not claimed: a panic injected into each kind of
//! engine actor during a deploy (through the `test-hooks` feature, which
//! the test command turns on). Every actor is restarted on its address,
//! the restarts are counted in `/metrics`, and the deploy still completes
//! with nothing lost or duplicated: every machine started, each on its own
//! instance, and the cloud runs exactly those.

use serde_json::{json, Value};

use berth::engine::config::ProvisionerConfig;
use berth::engine::supervision::{hooks, kinds};
use berth::providers::sim::SimConfig;

use crate::support::app::{spawn_app_with, Backend, Options};
use crate::support::{
    all_started, assert_one_live_instance_each, eventually, fast_provisioner, PATIENCE,
};

const KINDS: [&str; 5] = [
    kinds::PROVISIONER,
    kinds::ZONE_TRACKER,
    kinds::PROVIDER_BROKER,
    kinds::CONTAINER_PROVISIONER,
    kinds::MACHINE,
];

async fn every_kind_of_actor_panics_once_and_the_deploy_still_completes(backend: Backend) {
    // Armed for this thread, which runs this test's actors (and no one
    // else's).
    for kind in KINDS {
        hooks::arm(kind, 1);
    }
    let app = spawn_app_with(Options::engine(
        backend,
        SimConfig::default(),
        ProvisionerConfig {
            // A provisioner restarted around a launch replaces its machine
            // actors; on a loaded machine the simulated agent may give up
            // (it tries three times) before the new actor has taken the
            // launch's answer. The engine's answer to an agent that never
            // checks in is to relaunch after the bootstrap timeout: short
            // here, so that path completes the deploy within the test.
            bootstrap_timeout_s: 10,
            ..fast_provisioner()
        },
    ))
    .await;
    let deployed = app
        .deploy(&json!({"charm": "wordpress", "num_units": 8}))
        .await;
    assert!(deployed.status().is_success());
    for _ in 0..2 {
        let added = app.add_machines(&json!({"placement": "lxd:0"})).await;
        assert!(added.status().is_success());
    }
    let machines = eventually("all 10 machines started", PATIENCE, || async {
        all_started(&app.status_json().await, 10)
    })
    .await;
    for kind in KINDS {
        assert_eq!(hooks::pending(kind), 0, "the {kind} actor's panic fired");
    }
    // Each machine on its own instance, and the cloud runs exactly those.
    assert_one_live_instance_each(&machines, app.sim());
    // Each restart is counted.
    let metrics = app.metrics().await.text().await.unwrap();
    for kind in KINDS {
        let line = format!("berth_actor_restarts_total{{actor=\"{kind}\"}} ");
        let count: u64 = metrics
            .lines()
            .find_map(|l| l.strip_prefix(&line))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no restarts counted for {kind}:\n{metrics}"));
        assert!(count >= 1, "{kind}: {count}");
    }
    let _: Value = app.status_json().await;
}

crate::on_each_backend!(
    actix: [every_kind_of_actor_panics_once_and_the_deploy_still_completes],
    plain: [],
);

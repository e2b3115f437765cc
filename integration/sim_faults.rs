//! Faults set on the simulated cloud at run time, through
//! `/v1/sim/faults`: the routes themselves (without an engine), and, with
//! an engine running, a bounded deploy under each fault that must settle:
//! every machine started, or in a provisioning error that names the cause;
//! none in a zone that is down; throttling never an error.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use berth::charms::resolve;
use berth::contracts::provider::{
    ControllerLink, LaunchRequest, Provider, ProviderError, ProviderZone,
};
use berth::domain::constraints::{Constraints, Key};
use berth::domain::instance::Instance;
use berth::domain::instance_types::Catalogue;
use berth::domain::machine::MachineState;
use berth::engine::broker::{Bucket, RateLimits};
use berth::engine::config::ProvisionerConfig;
use berth::providers::sim::{AgentState, FaultSet, SimConfig, SimProvider, Throttle};
use berth::status::snapshot::StatusSnapshot;
use berth::store::applications::DeployRequest;
use berth::store::machines::AddMachines;
use reqwest::{Response, StatusCode};
use serde_json::{json, Value};

use crate::support::app::{spawn_app, spawn_app_with, Backend, Cloud, Options, Site, TestApp};
use crate::support::{eventually, fast_provisioner, until, PATIENCE};

async fn json_of(response: Response) -> Value {
    response.json().await.unwrap()
}

/// Asserts a JSON error response and returns its message.
async fn error_of(response: Response, status: StatusCode) -> String {
    assert_eq!(response.status(), status);
    let body = json_of(response).await;
    body["error"]["message"].as_str().unwrap().to_string()
}

/// The faults in force, as `GET` shows them.
async fn faults_of(app: &TestApp) -> Value {
    let response = app.faults().await;
    assert_eq!(response.status(), StatusCode::OK);
    json_of(response).await
}

fn healthy() -> Value {
    json!({
        "zones_down": [],
        "zone_capacity": {},
        "failure_rate": 0.0,
        "hang": false,
        "silent_agents": 0.0,
    })
}

/// An API on a simulated cloud whose configuration has sim-c down.
async fn with_sim_c_out() -> TestApp {
    spawn_app_with(Options {
        cloud: Cloud::Sim(SimConfig {
            outages: vec!["sim-c".into()],
            ..SimConfig::default()
        }),
        ..Options::default()
    })
    .await
}

#[tokio::test]
async fn the_configurations_faults_are_shown_replaced_and_cleared() {
    let app = with_sim_c_out().await;
    let mut expected = healthy();
    expected["zones_down"] = json!(["sim-c"]);
    assert_eq!(faults_of(&app).await, expected);

    let set = json!({
        "zones_down": ["sim-b"],
        "zone_capacity": {"sim-a": 3},
        "failure_rate": 0.3,
        "hang": false,
        "throttle": {"burst": 5, "per_second": 2.0},
        "silent_agents": 0.1,
    });
    let response = app.set_faults(&set).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(json_of(response).await, set);
    assert_eq!(faults_of(&app).await, set);

    // A set replaces the one before it as a whole.
    let response = app.set_faults(&json!({"failure_rate": 0.5})).await;
    let mut expected = healthy();
    expected["failure_rate"] = json!(0.5);
    assert_eq!(json_of(response).await, expected);

    let response = app.clear_faults().await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(json_of(response).await, healthy());
    assert_eq!(faults_of(&app).await, healthy());
}

/// The zones the controller shows and places machines by follow the
/// faults as soon as they are set: a zone taken down shows unavailable,
/// and one of the configuration's outages, cleared, is available again.
#[tokio::test]
async fn the_zones_follow_the_faults_as_they_are_set() {
    let app = with_sim_c_out().await;
    let available = |zones: Value| -> Vec<(String, bool)> {
        zones
            .as_array()
            .unwrap()
            .iter()
            .map(|z| {
                (
                    z["name"].as_str().unwrap().to_string(),
                    z["available"].as_bool().unwrap(),
                )
            })
            .collect()
    };
    let expect = |down: &[&str]| -> Vec<(String, bool)> {
        ["sim-a", "sim-b", "sim-c"]
            .iter()
            .map(|z| (z.to_string(), !down.contains(z)))
            .collect()
    };
    app.set_faults(&json!({"zones_down": ["sim-b"]})).await;
    assert_eq!(
        available(json_of(app.zones().await).await),
        expect(&["sim-b"])
    );
    app.clear_faults().await;
    assert_eq!(available(json_of(app.zones().await).await), expect(&[]));
}

#[tokio::test]
async fn bad_fault_sets_are_400_and_change_nothing() {
    let app = spawn_app().await;
    let before = json!({
        "zones_down": ["sim-a"],
        "zone_capacity": {},
        "failure_rate": 0.25,
        "hang": false,
        "silent_agents": 0.0,
    });
    assert_eq!(app.set_faults(&before).await.status(), StatusCode::OK);
    let cases = [
        (json!({"zone_down": ["sim-b"]}), "unknown field `zone_down`"),
        (
            json!({"failure_rate": 1.5}),
            "failure_rate is 1.5: expected a number between 0 and 1",
        ),
        (
            json!({"failure_rate": -0.1}),
            "failure_rate is -0.1: expected a number between 0 and 1",
        ),
        (
            json!({"silent_agents": 2}),
            "silent_agents is 2: expected a number between 0 and 1",
        ),
        (
            json!({"zone_capacity": {"sim-a": -1}}),
            "invalid value: integer `-1`",
        ),
        (
            json!({"zones_down": ["sim-z"]}),
            "zones_down names zone \"sim-z\", which the simulated cloud does not have; \
             expected one of sim-a, sim-b, sim-c",
        ),
        (
            json!({"zone_capacity": {"nowhere": 1}}),
            "zone_capacity names zone \"nowhere\"",
        ),
        (
            json!({"zones_down": ["sim-b", "sim-b"]}),
            "zone \"sim-b\" is listed twice in zones_down",
        ),
        (
            json!({"throttle": {"burst": 0, "per_second": 1}}),
            "throttle.burst is 0: expected at least 1",
        ),
        (
            json!({"throttle": {"burst": 1, "per_second": 0}}),
            "throttle.per_second is 0: expected a number above 0",
        ),
        (
            json!({"throttle": {"burst": 1, "per_second": 1, "jitter": 1}}),
            "unknown field `jitter`",
        ),
        (json!({"hang": "yes"}), "invalid type: string \"yes\""),
    ];
    for (body, expected) in cases {
        let message = error_of(app.set_faults(&body).await, StatusCode::BAD_REQUEST).await;
        assert!(message.contains(expected), "{body}: {message}");
        assert_eq!(faults_of(&app).await, before, "{body}");
    }
    let message = error_of(
        app.send_raw(reqwest::Method::PUT, "/v1/sim/faults", "{\"hang\":")
            .await,
        StatusCode::BAD_REQUEST,
    )
    .await;
    assert!(message.starts_with("invalid request body"), "{message}");
    assert_eq!(faults_of(&app).await, before);
}

/// A cloud that is not the simulated one: it names itself `ec2` and has
/// nothing.
struct Elsewhere;

#[async_trait]
impl Provider for Elsewhere {
    fn name(&self) -> &str {
        "ec2"
    }
    fn supported_constraints(&self) -> &[Key] {
        &[]
    }
    fn catalogue(&self) -> &Catalogue {
        Catalogue::embedded().unwrap()
    }
    async fn zones(&self) -> Result<Vec<ProviderZone>, ProviderError> {
        Ok(Vec::new())
    }
    async fn launch(&self, requests: Vec<LaunchRequest>) -> Vec<Result<Instance, ProviderError>> {
        unreachable!("nothing launches: {} requests", requests.len())
    }
    async fn terminate(&self, ids: Vec<String>) -> Vec<Result<(), ProviderError>> {
        ids.iter().map(|_| Ok(())).collect()
    }
    async fn instances(&self, _controller: &str) -> Result<Vec<Instance>, ProviderError> {
        Ok(Vec::new())
    }
}

#[tokio::test]
async fn another_provider_has_no_faults_to_set() {
    let app = spawn_app_with(Options {
        cloud: Cloud::Given {
            provider: Arc::new(Elsewhere),
            limits: RateLimits::default(),
        },
        ..Options::default()
    })
    .await;
    let expected = "the provider is ec2, not the simulated cloud; it has no faults to set";
    assert_eq!(
        error_of(app.faults().await, StatusCode::NOT_FOUND).await,
        expected
    );
    assert_eq!(
        error_of(
            app.set_faults(&json!({"hang": true})).await,
            StatusCode::NOT_FOUND
        )
        .await,
        expected
    );
    assert_eq!(
        error_of(app.clear_faults().await, StatusCode::NOT_FOUND).await,
        expected
    );
}

// With an engine.

fn provisioner() -> ProvisionerConfig {
    ProvisionerConfig {
        call_timeout_s: 1,
        ..fast_provisioner()
    }
}

async fn spawn_engine(config: ProvisionerConfig) -> TestApp {
    let app = spawn_app_with(Options::engine(
        Backend::Sqlite,
        SimConfig::default(),
        config,
    ))
    .await;
    started(&app, app.sim()).await;
    app
}

/// Waits for the engine's start, which asks the cloud for its zones and
/// its instances: once it has both, faults set from here on meet
/// machines, not the start.
async fn started(app: &TestApp, sim: &SimProvider) {
    until(app.store(), "zones recorded", |s| s.zones.len() == 3).await;
    eventually(
        "the engine's start to list the instances",
        PATIENCE,
        || async {
            let counts = sim.call_counts();
            if counts.admitted >= 2 {
                Ok(())
            } else {
                Err(counts)
            }
        },
    )
    .await;
}

async fn set(app: &TestApp, faults: Value) {
    let response = app.set_faults(&faults).await;
    assert_eq!(response.status(), StatusCode::OK, "{faults}");
}

async fn deploy(app: &TestApp, name: &str, units: u32) {
    app.store()
        .deploy(DeployRequest {
            application: name.parse().unwrap(),
            charm: resolve(name).unwrap(),
            base: None,
            constraints: Constraints::default(),
            units,
            placement: Vec::new(),
            settings: BTreeMap::new(),
        })
        .await
        .unwrap();
}

fn last_error(status: &StatusSnapshot, i: usize) -> String {
    status.machines[i]
        .machine
        .lifecycle
        .last_error
        .clone()
        .unwrap_or_default()
}

/// Waits until all `count` machines are started or in a provisioning
/// error, checking on every change that none is in error for throttling.
async fn settled(app: &TestApp, count: usize) -> StatusSnapshot {
    until(app.store(), "every machine settled", |s| {
        for m in &s.machines {
            let error = m.machine.lifecycle.last_error.as_deref().unwrap_or("");
            assert!(
                !(m.state() == MachineState::ProvisioningError
                    && error.contains("RequestLimitExceeded")),
                "machine {} in error for throttling: {error}",
                m.id
            );
        }
        s.machines.len() == count
            && s.machines.iter().all(|m| {
                matches!(
                    m.state(),
                    MachineState::Started | MachineState::ProvisioningError
                )
            })
    })
    .await
}

fn zones_of(status: &StatusSnapshot) -> BTreeMap<String, usize> {
    let mut zones = BTreeMap::new();
    for m in &status.machines {
        if m.state() == MachineState::Started {
            *zones
                .entry(m.machine.lifecycle.zone.clone().unwrap_or_default())
                .or_insert(0) += 1;
        }
    }
    zones
}

fn all_started(status: &StatusSnapshot) -> bool {
    status
        .machines
        .iter()
        .all(|m| m.state() == MachineState::Started)
}

#[actix_web::test]
async fn with_a_zone_down_nine_units_start_in_the_other_zones() {
    let app = spawn_engine(provisioner()).await;
    set(&app, json!({"zones_down": ["sim-b"]})).await;
    deploy(&app, "wordpress", 9).await;
    let status = settled(&app, 9).await;
    assert!(all_started(&status), "{:?}", status.machines);
    let zones = zones_of(&status);
    assert_eq!(zones.get("sim-b"), None, "{zones:?}");
    assert_eq!(zones.values().sum::<usize>(), 9);
    // The cloud reports the zone down.
    let provider_zones = app.sim().zones().await.unwrap();
    assert!(
        provider_zones
            .iter()
            .any(|z| z.name == "sim-b" && !z.available),
        "{provider_zones:?}"
    );
}

#[actix_web::test]
async fn a_zone_set_down_stops_the_machines_running_there() {
    let app = spawn_engine(provisioner()).await;
    deploy(&app, "wordpress", 3).await;
    let status = settled(&app, 3).await;
    assert_eq!(
        zones_of(&status),
        BTreeMap::from([
            ("sim-a".to_string(), 1),
            ("sim-b".to_string(), 1),
            ("sim-c".to_string(), 1),
        ])
    );
    set(&app, json!({"zones_down": ["sim-b"]})).await;
    let status = until(app.store(), "the machine in sim-b down", |s| {
        s.machines.iter().all(|m| {
            let in_b = m.machine.lifecycle.zone.as_deref() == Some("sim-b");
            m.state()
                == if in_b {
                    MachineState::Down
                } else {
                    MachineState::Started
                }
        })
    })
    .await;
    let i = status
        .machines
        .iter()
        .position(|m| m.state() == MachineState::Down)
        .unwrap();
    let message = last_error(&status, i);
    assert!(message.contains("stopped by the provider"), "{message}");
}

#[actix_web::test]
async fn with_zone_capacity_machines_go_where_there_is_room() {
    let app = spawn_engine(provisioner()).await;
    set(&app, json!({"zone_capacity": {"sim-a": 1, "sim-b": 0}})).await;
    deploy(&app, "wordpress", 6).await;
    let status = settled(&app, 6).await;
    assert!(all_started(&status));
    assert_eq!(
        zones_of(&status),
        BTreeMap::from([("sim-a".to_string(), 1), ("sim-c".to_string(), 5)])
    );
}

#[actix_web::test]
async fn with_every_launch_failing_a_machine_retries_and_starts_once_cleared() {
    let config = ProvisionerConfig {
        attempts: 10_000,
        ..provisioner()
    };
    let app = spawn_engine(config).await;
    set(&app, json!({"failure_rate": 1.0})).await;
    app.store()
        .add_machines(AddMachines::default())
        .await
        .unwrap();
    let status = until(app.store(), "retrying", |s| {
        s.machines.len() == 1
            && s.machines[0].machine.lifecycle.attempts_used >= 2
            && s.machines[0].state() != MachineState::ProvisioningError
    })
    .await;
    let message = last_error(&status, 0);
    assert!(message.contains("simulated transient failure"), "{message}");
    assert_eq!(app.clear_faults().await.status(), StatusCode::OK);
    let status = settled(&app, 1).await;
    assert!(all_started(&status));
}

#[actix_web::test]
async fn with_half_of_launches_failing_nine_units_all_start() {
    let config = ProvisionerConfig {
        attempts: 50,
        ..provisioner()
    };
    let app = spawn_engine(config).await;
    set(&app, json!({"failure_rate": 0.5})).await;
    deploy(&app, "wordpress", 9).await;
    let status = settled(&app, 9).await;
    assert!(all_started(&status), "{:?}", status.machines);
    let attempts: u32 = status
        .machines
        .iter()
        .map(|m| m.machine.lifecycle.attempts_used)
        .sum();
    assert!(attempts > 0, "no launch failed");
}

#[actix_web::test]
async fn with_calls_hanging_machines_end_in_an_error_naming_the_timeout_and_start_once_cleared() {
    let config = ProvisionerConfig {
        attempts: 2,
        ..provisioner()
    };
    let app = spawn_engine(config).await;
    set(&app, json!({"hang": true})).await;
    deploy(&app, "wordpress", 6).await;
    let status = settled(&app, 6).await;
    for (i, m) in status.machines.iter().enumerate() {
        assert_eq!(m.state(), MachineState::ProvisioningError);
        let message = last_error(&status, i);
        assert!(
            message.contains("did not answer a launch call within 1s"),
            "{message}"
        );
    }
    assert!(app.sim().ledger().is_empty(), "a hanging launch launched");
    assert_eq!(app.clear_faults().await.status(), StatusCode::OK);
    app.store().retry_all(None).await.unwrap();
    let status = until(app.store(), "6 started", |s| {
        s.machines.len() == 6 && all_started(s)
    })
    .await;
    assert_eq!(zones_of(&status).values().sum::<usize>(), 6);
}

#[actix_web::test]
async fn throttled_the_broker_paces_itself_and_no_machine_fails_for_it() {
    let app = spawn_engine(provisioner()).await;
    set(&app, json!({"throttle": {"burst": 1, "per_second": 2}})).await;
    deploy(&app, "wordpress", 9).await;
    let status = settled(&app, 9).await;
    assert!(all_started(&status), "{:?}", status.machines);
    let counts = app.sim().call_counts();
    // The broker slows down when refused: refusals stay a small share of
    // the calls, and most of them come before it knows the limit.
    assert!(counts.refused <= counts.admitted / 2 + 2, "{counts:?}");
    // Through the throttle, launches, then a second deploy after the first
    // settled: the broker no longer hammers.
    let before = app.sim().call_counts();
    deploy(&app, "mysql", 6).await;
    let status = settled(&app, 15).await;
    assert!(all_started(&status), "{:?}", status.machines);
    let after = app.sim().call_counts();
    let (made, refused) = (
        after.admitted - before.admitted,
        after.refused - before.refused,
    );
    assert!(refused <= made / 2 + 1, "{made} made, {refused} refused");
}

#[actix_web::test]
async fn with_silent_agents_every_machine_settles_after_the_bootstrap_timeout() {
    let config = ProvisionerConfig {
        bootstrap_timeout_s: 1,
        bootstrap_attempts: 3,
        ..provisioner()
    };
    let app = spawn_engine(config).await;
    set(&app, json!({"silent_agents": 0.4})).await;
    deploy(&app, "wordpress", 6).await;
    let status = settled(&app, 6).await;
    for (i, m) in status.machines.iter().enumerate() {
        if m.state() == MachineState::ProvisioningError {
            let message = last_error(&status, i);
            assert!(message.contains("did not check in"), "{message}");
        }
    }
    let ledger = app.sim().ledger();
    let silent = ledger
        .iter()
        .filter(|e| e.agent == AgentState::Silent)
        .count();
    assert!(silent > 0, "no agent was silent: {ledger:?}");
    // Each silent instance was replaced: more launches than machines.
    assert!(ledger.len() > 6, "{}", ledger.len());
    // Nothing silent is left running.
    assert!(ledger
        .iter()
        .filter(|e| e.agent == AgentState::Silent)
        .all(|e| e.state.is_gone()));
}

/// The simulated cloud, one launch a call: every machine's launch is a
/// call of its own, so that a deploy makes as many calls as it has
/// machines.
struct OneAtATime(Arc<SimProvider>);

#[async_trait]
impl Provider for OneAtATime {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn supported_constraints(&self) -> &[Key] {
        self.0.supported_constraints()
    }
    fn catalogue(&self) -> &Catalogue {
        self.0.catalogue()
    }
    fn supports_containers(&self) -> bool {
        self.0.supports_containers()
    }
    fn attach(&self, link: Arc<dyn ControllerLink>) {
        self.0.attach(link)
    }
    async fn zones(&self) -> Result<Vec<ProviderZone>, ProviderError> {
        self.0.zones().await
    }
    async fn launch(&self, requests: Vec<LaunchRequest>) -> Vec<Result<Instance, ProviderError>> {
        self.0.launch(requests).await
    }
    async fn terminate(&self, ids: Vec<String>) -> Vec<Result<(), ProviderError>> {
        self.0.terminate(ids).await
    }
    async fn instances(&self, controller: &str) -> Result<Vec<Instance>, ProviderError> {
        self.0.instances(controller).await
    }
}

#[actix_web::test]
async fn throttled_one_launch_a_call_the_broker_learns_the_limit_and_keeps_under_it() {
    let site = Site::new(Backend::Sqlite);
    let sim = site.open_sim(SimConfig::default());
    let app = spawn_app_with(Options {
        site: Some(site),
        cloud: Cloud::Given {
            provider: Arc::new(OneAtATime(sim.clone())),
            limits: RateLimits::default(),
        },
        engine: Some(ProvisionerConfig {
            attempts: 50,
            ..provisioner()
        }),
        ..Options::default()
    })
    .await;
    started(&app, &sim).await;
    sim.set_faults(FaultSet {
        throttle: Some(Throttle {
            burst: 2,
            per_second: 4.0,
        }),
        ..FaultSet::default()
    })
    .await
    .unwrap();
    // Ten launches: the first ones meet the limit unknown.
    deploy(&app, "wordpress", 10).await;
    let status = settled(&app, 10).await;
    assert!(all_started(&status), "{:?}", status.machines);
    let first = sim.call_counts();
    // Ten more: the broker paces them to the limit it learned (without
    // pacing, more than twice as many calls are refused as made).
    deploy(&app, "mysql", 10).await;
    let status = settled(&app, 20).await;
    assert!(all_started(&status), "{:?}", status.machines);
    let second = sim.call_counts();
    let (made, refused) = (
        second.admitted - first.admitted,
        second.refused - first.refused,
    );
    assert!(made >= 10, "{made}");
    assert!(refused * 4 <= made, "{made} made, {refused} refused");
}

/// The launch calls the engine made, from `/metrics`.
async fn launch_calls(app: &TestApp) -> u64 {
    let text = app.metrics().await.text().await.unwrap();
    text.lines()
        .filter(|l| l.starts_with("berth_provider_calls_total{kind=\"launch\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// A paced broker on a cloud whose launch call carries up to five: with
/// tokens to spare, the launches of a deploy still go in full batches, not
/// in half-empty ones that spend the bucket's burst.
#[actix_web::test]
async fn a_paced_broker_sends_a_deploys_launches_in_full_batches() {
    let site = Site::new(Backend::Sqlite);
    let sim = site.open_sim(SimConfig {
        launch_batch: 5,
        ..SimConfig::default()
    });
    let app = spawn_app_with(Options {
        site: Some(site),
        cloud: Cloud::Given {
            provider: sim.clone(),
            limits: RateLimits {
                launch: Some(Bucket {
                    capacity: 100.0,
                    per_second: 50.0,
                }),
                ..RateLimits::default()
            },
        },
        engine: Some(provisioner()),
        ..Options::default()
    })
    .await;
    started(&app, &sim).await;
    deploy(&app, "wordpress", 60).await;
    let status = settled(&app, 60).await;
    assert!(all_started(&status), "{:?}", status.machines);
    // Twenty machines in each of the three zones: four full calls each,
    // and at most one partial call per zone.
    let calls = launch_calls(&app).await;
    assert!((12..=15).contains(&calls), "{calls} launch calls");
}

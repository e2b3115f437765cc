//! The provisioning engine, through the store, the engine's actors and the
//! simulated cloud, on both backends: each test is a function of the
//! [`Backend`] it runs on, and [`on_each_backend!`] runs it on SQLite and on
//! PostgreSQL.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use berth::charms::resolve;
use berth::contracts::provider::ProviderZone;
use berth::contracts::provider::{
    tags, ControllerLink, FailureClass, InstanceStateChange, LaunchRequest, Provider, ProviderError,
};
use berth::domain::constraints::{Constraints, Key};
use berth::domain::instance::{Instance, InstanceState};
use berth::domain::instance_types::Catalogue;
use berth::domain::machine::{is_settled, MachineState};
use berth::domain::names::{ApplicationName, MachineId};
use berth::domain::placement::parse_to_list;
use berth::engine::broker::RateLimits;
use berth::engine::config::ProvisionerConfig;
use berth::providers::sim::{SimConfig, SimProvider};
use berth::status::snapshot::StatusSnapshot;
use berth::store::applications::DeployRequest;
use berth::store::change_log::ChangeKind;
use berth::store::machines::AddMachines;
use berth::store::records::MachineRecord;
use berth::store::Store;

use crate::on_each_backend;
use crate::support::app::{spawn_app_with, Backend, Cloud, Options, Site, TestApp};
use crate::support::{
    engine_steps, eventually, fast_provisioner, live_instances, throughout, until, PATIENCE,
};

/// An app with the engine on `config` over the simulated cloud on `sim`.
async fn spawn_engine(backend: Backend, sim: SimConfig, config: ProvisionerConfig) -> TestApp {
    spawn_app_with(Options::engine(backend, sim, config)).await
}

/// An app with the engine (fast settings) over `site`'s simulated cloud
/// with `sim`: a later life of an engine that ran there before.
async fn spawn_engine_on(site: &Site, sim: SimConfig) -> TestApp {
    spawn_app_with(Options {
        site: Some(site.clone()),
        cloud: Cloud::Sim(sim),
        engine: Some(fast_provisioner()),
        ..Options::default()
    })
    .await
}

fn app(name: &str) -> ApplicationName {
    name.parse().unwrap()
}

async fn deploy(store: &Store, name: &str, units: u32, constraints: &str, to: &str) {
    store
        .deploy(DeployRequest {
            application: app(name),
            charm: resolve(name).unwrap(),
            base: None,
            constraints: Constraints::parse(constraints).unwrap(),
            units,
            placement: parse_to_list(to).unwrap(),
            settings: BTreeMap::new(),
        })
        .await
        .unwrap();
}

fn all_in(status: &StatusSnapshot, states: &[MachineState]) -> bool {
    status.machines.iter().all(|m| states.contains(&m.state()))
}

fn all_started(count: usize) -> impl Fn(&StatusSnapshot) -> bool {
    move |s| s.machines.len() == count && all_in(s, &[MachineState::Started])
}

/// Machines per zone, for the units of `application`.
fn zones_of(status: &StatusSnapshot, application: &str) -> BTreeMap<String, usize> {
    let machines: BTreeSet<MachineId> = status
        .units
        .iter()
        .filter(|u| u.application.as_str() == application)
        .filter_map(|u| u.machine)
        .collect();
    let mut counts = BTreeMap::new();
    for m in status.machines.iter().filter(|m| machines.contains(&m.id)) {
        *counts
            .entry(m.machine.lifecycle.zone.clone().unwrap_or_default())
            .or_insert(0) += 1;
    }
    counts
}

/// The machine's last error message, or nothing.
fn last_error(machine: &MachineRecord) -> String {
    machine
        .machine
        .lifecycle
        .last_error
        .clone()
        .unwrap_or_default()
}

async fn nine_units_spread_three_per_zone_and_a_second_applications_three_one_per_zone(
    backend: Backend,
) {
    let app = spawn_engine(backend, SimConfig::default(), fast_provisioner()).await;
    deploy(app.store(), "wordpress", 9, "", "").await;
    let status = until(app.store(), "9 started", all_started(9)).await;
    let expected: BTreeMap<String, usize> = [("sim-a", 3), ("sim-b", 3), ("sim-c", 3)]
        .into_iter()
        .map(|(z, n)| (z.to_string(), n))
        .collect();
    assert_eq!(zones_of(&status, "wordpress"), expected);
    deploy(app.store(), "mysql", 3, "", "").await;
    let status = until(app.store(), "12 started", all_started(12)).await;
    let one_each: BTreeMap<String, usize> = [("sim-a", 1), ("sim-b", 1), ("sim-c", 1)]
        .into_iter()
        .map(|(z, n)| (z.to_string(), n))
        .collect();
    assert_eq!(zones_of(&status, "mysql"), one_each);
    // Every machine has exactly one live instance, and it is the recorded one.
    let recorded: BTreeSet<String> = status
        .machines
        .iter()
        .filter_map(|m| m.instance_id().map(str::to_string))
        .collect();
    let live = live_instances(app.sim());
    assert_eq!(recorded, live);
    assert!(status
        .machines
        .iter()
        .all(|m| m.instance_type.as_deref() == Some("t3a.small")));
    assert!(status.machines.iter().all(|m| m
        .hardware
        .as_deref()
        .is_some_and(|h| h.contains("mem=2048M"))));
}

async fn settled_machines_keep_no_actor_alive(backend: Backend) {
    let app = spawn_engine(backend, SimConfig::default(), fast_provisioner()).await;
    deploy(app.store(), "wordpress", 5, "", "").await;
    until(app.store(), "5 started", all_started(5)).await;
    eventually("every machine actor to stop", PATIENCE, || async {
        match app.engine().live_actors().await {
            0 => Ok(()),
            alive => Err(format!("{alive} actors alive")),
        }
    })
    .await;
}

/// An engine with room for 3 machine actors, whose simulated agents check
/// in after 30 ms, so that a deploy of more machines makes a line.
async fn engine_with_room_for_three_actors(backend: Backend) -> TestApp {
    let sim = SimConfig {
        agent_delay_ms: 30,
        ..SimConfig::default()
    };
    let config = ProvisionerConfig {
        max_machine_actors: 3,
        ..fast_provisioner()
    };
    spawn_engine(backend, sim, config).await
}

async fn machines_beyond_the_actor_limit_wait_their_turn_and_all_start(backend: Backend) {
    let app = engine_with_room_for_three_actors(backend).await;
    deploy(app.store(), "wordpress", 12, "", "").await;
    let engine = app.engine().clone();
    let watcher = actix_web::rt::spawn(async move {
        let mut most = 0;
        loop {
            most = most.max(engine.live_actors().await);
            tokio::time::sleep(Duration::from_millis(2)).await;
            if most > 3 {
                return most;
            }
        }
    });
    let status = until(app.store(), "12 started", all_started(12)).await;
    assert!(
        !watcher.is_finished(),
        "more than 3 machine actors were alive at once"
    );
    watcher.abort();
    let four_each: BTreeMap<String, usize> = [("sim-a", 4), ("sim-b", 4), ("sim-c", 4)]
        .into_iter()
        .map(|(z, n)| (z.to_string(), n))
        .collect();
    assert_eq!(zones_of(&status, "wordpress"), four_each);
}

/// A controller holds leases only on the machines it works on: those
/// waiting for an actor are claimed when their turn comes, so a long line
/// costs the renewals nothing.
async fn machines_waiting_their_turn_hold_no_lease(backend: Backend) {
    let app = engine_with_room_for_three_actors(backend).await;
    // Once a first machine has started, the engine follows the change log:
    // the deploy below reaches it there, not in its first read.
    deploy(app.store(), "mysql", 1, "", "").await;
    until(app.store(), "1 started", all_started(1)).await;
    deploy(app.store(), "wordpress", 12, "", "").await;
    let mut most_leased = 0;
    let mut samples = 0;
    loop {
        let status = app.store().status().unwrap();
        let now = berth::store::now_ms();
        let leased = status
            .machines
            .iter()
            .filter(|m| !is_settled(m.state()))
            .filter(|m| m.lease.as_ref().is_some_and(|l| l.is_live(now)))
            .count();
        most_leased = most_leased.max(leased);
        samples += 1;
        if all_started(13)(&status) {
            break;
        }
        assert!(samples < 20_000, "the 13 machines did not start");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(
        most_leased >= 1,
        "no lease was ever seen ({samples} samples)"
    );
    assert!(
        most_leased <= 3,
        "{most_leased} unsettled machines leased at once, with room for 3 actors"
    );
}

/// A machine made while the engine runs is taken up from the change log,
/// not left for the sweep of unheld machines, which runs with each lease
/// renewal (here every twenty minutes).
async fn a_machine_made_while_the_engine_runs_starts_without_waiting_for_a_sweep(backend: Backend) {
    let config = ProvisionerConfig {
        lease_ttl_s: 3600,
        ..fast_provisioner()
    };
    let app = spawn_engine(backend, SimConfig::default(), config).await;
    // Once a first machine has started, the engine follows the change log.
    deploy(app.store(), "mysql", 1, "", "").await;
    until(app.store(), "1 started", all_started(1)).await;
    deploy(app.store(), "wordpress", 6, "", "").await;
    app.store()
        .add_machines(AddMachines::default())
        .await
        .unwrap();
    until(app.store(), "8 started", all_started(8)).await;
}

async fn zones_known(store: &Store) {
    until(store, "zones recorded", |s| s.zones.len() == 3).await;
}

async fn a_zone_disabled_by_an_administrator_gets_no_new_machines(backend: Backend) {
    let app = spawn_engine(backend, SimConfig::default(), fast_provisioner()).await;
    zones_known(app.store()).await;
    app.store()
        .set_zone_enabled("sim-c".into(), false)
        .await
        .unwrap();
    // The engine hears of it through the change log before the deploy's
    // machines (a later revision).
    deploy(app.store(), "wordpress", 6, "", "").await;
    let status = until(app.store(), "6 started", all_started(6)).await;
    let zones = zones_of(&status, "wordpress");
    assert_eq!(zones.get("sim-c"), None, "{zones:?}");
    assert_eq!(zones.get("sim-a"), Some(&3));
    assert_eq!(zones.get("sim-b"), Some(&3));
}

async fn a_zone_out_of_capacity_sends_machines_to_the_next_zone(backend: Backend) {
    let mut sim = SimConfig::default();
    sim.capacity.insert("sim-a".into(), 1);
    let app = spawn_engine(backend, sim, fast_provisioner()).await;
    deploy(app.store(), "wordpress", 6, "", "").await;
    let status = until(app.store(), "6 started", all_started(6)).await;
    let zones = zones_of(&status, "wordpress");
    assert_eq!(zones.get("sim-a"), Some(&1), "{zones:?}");
    assert_eq!(zones.values().sum::<usize>(), 6);
    // A zone refusal moves on at once and does not use up an attempt.
    assert!(status
        .machines
        .iter()
        .all(|m| m.machine.lifecycle.attempts_used == 0));
}

async fn an_explicit_zone_placement_is_honoured(backend: Backend) {
    let app = spawn_engine(backend, SimConfig::default(), fast_provisioner()).await;
    deploy(
        app.store(),
        "wordpress",
        3,
        "",
        "zone=sim-b,zone=sim-b,zone=sim-b",
    )
    .await;
    let status = until(app.store(), "3 started", all_started(3)).await;
    assert_eq!(zones_of(&status, "wordpress").get("sim-b"), Some(&3));
}

async fn a_zone_the_cloud_does_not_have_is_an_error_within_one_attempt(backend: Backend) {
    let app = spawn_engine(backend, SimConfig::default(), fast_provisioner()).await;
    zones_known(app.store()).await;
    deploy(app.store(), "wordpress", 1, "", "zone=no-such-zone").await;
    deploy(app.store(), "mysql", 1, "zones=sim-x", "").await;
    let status = until(app.store(), "both in error", |s| {
        s.machines.len() == 2 && all_in(s, &[MachineState::ProvisioningError])
    })
    .await;
    for machine in &status.machines {
        // Said at the first try, not after the retries ran out.
        assert_eq!(machine.machine.lifecycle.attempts_used, 0);
    }
    let messages: Vec<String> = status.machines.iter().map(last_error).collect();
    assert!(
        messages[0].contains("zone \"no-such-zone\" not found; available zones: sim-a"),
        "{messages:?}"
    );
    assert!(
        messages[1].contains("the zones constraint names unknown zones: \"sim-x\""),
        "{messages:?}"
    );
    assert!(live_instances(app.sim()).is_empty());
}

async fn unsatisfiable_constraints_end_in_an_error_and_retry_with_new_constraints_starts_the_machine(
    backend: Backend,
) {
    let app = spawn_engine(backend, SimConfig::default(), fast_provisioner()).await;
    deploy(app.store(), "wordpress", 1, "mem=100000G", "").await;
    let status = until(app.store(), "provisioning error", |s| {
        s.machines.len() == 1 && all_in(s, &[MachineState::ProvisioningError])
    })
    .await;
    let machine = &status.machines[0];
    assert_eq!(machine.instance_id(), None);
    let message = last_error(machine);
    assert!(
        message.contains("no instance type satisfies constraints"),
        "{message}"
    );
    assert!(message.contains("mem=102400000M"), "{message}");
    assert!(live_instances(app.sim()).is_empty());
    app.store()
        .retry(
            vec![machine.id],
            Some(Constraints::parse("mem=2G").unwrap()),
        )
        .await
        .unwrap();
    let status = until(app.store(), "started after retry", all_started(1)).await;
    assert_eq!(status.machines[0].constraints.to_string(), "mem=2048M");
}

async fn a_missing_image_is_a_permanent_failure_and_is_not_retried(backend: Backend) {
    let app = spawn_engine(backend, SimConfig::default(), fast_provisioner()).await;
    deploy(app.store(), "wordpress", 1, "image-id=ami-missing-123", "").await;
    let status = until(app.store(), "provisioning error", |s| {
        s.machines.len() == 1 && all_in(s, &[MachineState::ProvisioningError])
    })
    .await;
    let life = &status.machines[0].machine.lifecycle;
    assert_eq!(life.attempts_used, 0, "a permanent failure uses no retries");
    assert!(
        life.last_error
            .as_deref()
            .unwrap_or_default()
            .contains("ami-missing-123"),
        "{life:?}"
    );
}

async fn with_thirty_percent_transient_failures_every_machine_ends_started(backend: Backend) {
    let sim = SimConfig {
        failure_rate: 0.3,
        seed: 7,
        ..SimConfig::default()
    };
    let app = spawn_engine(backend, sim, fast_provisioner()).await;
    deploy(app.store(), "wordpress", 30, "", "").await;
    let status = until(app.store(), "30 started", all_started(30)).await;
    let attempts: u32 = status
        .machines
        .iter()
        .map(|m| m.machine.lifecycle.attempts_used)
        .sum();
    assert!(
        attempts > 0,
        "some launches should have failed and been counted"
    );
    assert_eq!(live_instances(app.sim()).len(), 30);
}

async fn a_stray_instance_with_berths_tags_is_stopped_and_others_are_left_alone(backend: Backend) {
    let config = ProvisionerConfig {
        reconcile_interval_s: 0,
        ..fast_provisioner()
    };
    let app = spawn_engine(backend, SimConfig::default(), config).await;
    let controller = app.store().model().unwrap().controller_uuid;
    let mut ours = BTreeMap::new();
    ours.insert(tags::CONTROLLER.to_string(), controller);
    ours.insert(tags::MACHINE.to_string(), "42".to_string());
    let stray = app
        .sim()
        .create_untracked_instance(ours, "sim-a", "t3a.small")
        .await
        .unwrap();
    let foreign = app
        .sim()
        .create_untracked_instance(BTreeMap::new(), "sim-a", "t3a.small")
        .await
        .unwrap();
    zones_known(app.store()).await;
    app.engine().reconcile_now();
    eventually("the stray instance to stop", PATIENCE, || async {
        let live = live_instances(app.sim());
        if live.contains(&stray.id) {
            Err(live)
        } else {
            Ok(())
        }
    })
    .await;
    assert!(live_instances(app.sim()).contains(&foreign.id));
}

async fn an_instance_terminated_behind_berths_back_shows_the_machine_down(backend: Backend) {
    let app = spawn_engine(backend, SimConfig::default(), fast_provisioner()).await;
    deploy(app.store(), "wordpress", 1, "", "").await;
    let status = until(app.store(), "started", all_started(1)).await;
    let instance = status.machines[0].instance_id().unwrap().to_string();
    app.sim().stop_behind_back(&instance).await.unwrap();
    let status = until(app.store(), "down", |s| all_in(s, &[MachineState::Down])).await;
    let message = last_error(&status.machines[0]);
    assert!(
        message.contains(&instance) && message.contains("terminated"),
        "{message}"
    );
}

async fn a_container_is_started_on_its_host_once_the_host_is_up(backend: Backend) {
    let app = spawn_engine(backend, SimConfig::default(), fast_provisioner()).await;
    deploy(app.store(), "wordpress", 2, "", "lxd").await;
    let status = until(app.store(), "host and container started", |s| {
        s.machines.len() == 3 && all_in(s, &[MachineState::Started])
    })
    .await;
    let ids: Vec<String> = status.machines.iter().map(|m| m.id.to_string()).collect();
    assert_eq!(ids, vec!["0", "0/lxd/0", "1"]);
    let host = &status.machines[0];
    let container = &status.machines[1];
    assert_eq!(
        container.machine.lifecycle.zone,
        host.machine.lifecycle.zone
    );
    let entry = app
        .sim()
        .ledger()
        .into_iter()
        .find(|e| Some(e.id.as_str()) == container.instance_id())
        .unwrap();
    assert_eq!(entry.host_instance.as_deref(), host.instance_id());
    // Each machine, host and container alike, is first written when its
    // zone is chosen: from pending to starting, never logged allocating.
    let changes = app.store().changes_since(0, 1000).unwrap();
    let host_zone = host.machine.lifecycle.zone.as_deref().unwrap();
    for id in &ids {
        let updates: Vec<&str> = changes
            .iter()
            .filter(|c| &c.id == id && c.change == ChangeKind::Updated)
            .map(|c| c.detail.as_str())
            .collect();
        let first = updates.first().copied().unwrap_or_default();
        if id.contains("lxd") {
            assert_eq!(first, format!("state=starting zone={host_zone}"));
        } else {
            assert!(
                first.starts_with("state=starting zone=sim-"),
                "{id}: {updates:?}"
            );
        }
        assert!(
            !updates.iter().any(|u| u.contains("allocating")),
            "{id}: {updates:?}"
        );
    }
}

async fn removing_a_started_machine_stops_its_instance_and_removes_it(backend: Backend) {
    let app = spawn_engine(backend, SimConfig::default(), fast_provisioner()).await;
    app.store()
        .add_machines(AddMachines::default())
        .await
        .unwrap();
    until(app.store(), "started", all_started(1)).await;
    app.store()
        .remove_machine("0".parse().unwrap(), false)
        .await
        .unwrap();
    until(app.store(), "removed", |s| s.machines.is_empty()).await;
    assert!(live_instances(app.sim()).is_empty());
}

async fn an_agent_that_never_checks_in_is_relaunched_and_then_the_machine_is_in_error(
    backend: Backend,
) {
    let sim = SimConfig {
        agent_delay_ms: 3_600_000,
        ..SimConfig::default()
    };
    let config = ProvisionerConfig {
        bootstrap_timeout_s: 1,
        bootstrap_attempts: 2,
        ..fast_provisioner()
    };
    let app = spawn_engine(backend, sim, config).await;
    app.store()
        .add_machines(AddMachines::default())
        .await
        .unwrap();
    let status = until(app.store(), "provisioning error", |s| {
        all_in(s, &[MachineState::ProvisioningError])
    })
    .await;
    let machine = &status.machines[0];
    assert_eq!(machine.instance_id(), None);
    assert_eq!(machine.machine.lifecycle.bootstrap_timeouts, 2);
    let message = last_error(machine);
    assert!(message.contains("did not check in"), "{message}");
    // Two instances were launched, and both are gone.
    assert_eq!(app.sim().ledger().len(), 2);
    assert!(live_instances(app.sim()).is_empty());

    // retry-provisioning begins a new round: its launches are new to the
    // cloud, not answered with the last round's terminated instances.
    app.store().retry(vec![machine.id], None).await.unwrap();
    let status = until(app.store(), "provisioning error again", |s| {
        all_in(s, &[MachineState::ProvisioningError])
            && s.machines[0].machine.lifecycle.provisioning_rounds == 1
    })
    .await;
    assert_eq!(status.machines[0].machine.lifecycle.bootstrap_timeouts, 2);
    assert_eq!(app.sim().ledger().len(), 4);
    assert!(live_instances(app.sim()).is_empty());
}

/// The methods of a wrapper of the simulated cloud (in its `inner` field)
/// that answer as the cloud does: its name, constraints, catalogue and
/// launch batch, and where it reports.
macro_rules! what_the_simulated_cloud_says {
    () => {
        fn name(&self) -> &str {
            self.inner.name()
        }
        fn supported_constraints(&self) -> &[Key] {
            self.inner.supported_constraints()
        }
        fn catalogue(&self) -> &Catalogue {
            self.inner.catalogue()
        }
        fn max_launch_batch(&self) -> usize {
            self.inner.max_launch_batch()
        }
        fn attach(&self, link: Arc<dyn ControllerLink>) {
            self.inner.attach(link)
        }
    };
}

/// A provider that misbehaves for one machine and is the simulated cloud
/// for the rest.
struct Misbehaving {
    inner: Arc<SimProvider>,
    victim: MachineId,
    how: Misbehaviour,
}

#[derive(Clone, Copy)]
enum Misbehaviour {
    Panic,
    Hang,
    /// Every launch answers after a delay.
    Slow(Duration),
    /// The victim's launch is made at the cloud, and its answer never
    /// comes back.
    AnswerLost,
}

#[async_trait]
impl Provider for Misbehaving {
    what_the_simulated_cloud_says!();
    async fn zones(&self) -> Result<Vec<ProviderZone>, ProviderError> {
        self.inner.zones().await
    }
    async fn launch(&self, requests: Vec<LaunchRequest>) -> Vec<Result<Instance, ProviderError>> {
        match self.how {
            Misbehaviour::Slow(delay) => tokio::time::sleep(delay).await,
            Misbehaviour::Panic if requests.iter().any(|r| r.machine == self.victim) => {
                panic!("the provider fell over launching machine {}", self.victim)
            }
            Misbehaviour::Hang if requests.iter().any(|r| r.machine == self.victim) => {
                std::future::pending::<()>().await
            }
            Misbehaviour::AnswerLost if requests.iter().any(|r| r.machine == self.victim) => {
                self.inner.launch(requests).await;
                return std::future::pending().await;
            }
            _ => {}
        }
        self.inner.launch(requests).await
    }
    async fn terminate(&self, ids: Vec<String>) -> Vec<Result<(), ProviderError>> {
        self.inner.terminate(ids).await
    }
    async fn instances(&self, controller: &str) -> Result<Vec<Instance>, ProviderError> {
        self.inner.instances(controller).await
    }
}

/// The simulated cloud, whose next listing of instances can be made to
/// answer with one taken earlier: as a cloud's answer is when the engine
/// reads its machines after it listed the instances, and machines record
/// launches or are removed in between.
struct ListsLate {
    inner: Arc<SimProvider>,
    earlier: std::sync::Mutex<Option<Vec<Instance>>>,
    /// How many listings answered with the earlier one.
    late_answers: std::sync::atomic::AtomicUsize,
    /// The instances of every terminate call, in order.
    terminated: std::sync::Mutex<Vec<String>>,
}

impl ListsLate {
    /// The next listing answers with `instances`.
    fn answer_next_listing_with(&self, instances: Vec<Instance>) {
        *self.earlier.lock().unwrap() = Some(instances);
    }

    fn late_answers(&self) -> usize {
        self.late_answers.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn terminated(&self) -> Vec<String> {
        self.terminated.lock().unwrap().clone()
    }
}

#[async_trait]
impl Provider for ListsLate {
    what_the_simulated_cloud_says!();
    async fn zones(&self) -> Result<Vec<ProviderZone>, ProviderError> {
        self.inner.zones().await
    }
    async fn launch(&self, requests: Vec<LaunchRequest>) -> Vec<Result<Instance, ProviderError>> {
        self.inner.launch(requests).await
    }
    async fn terminate(&self, ids: Vec<String>) -> Vec<Result<(), ProviderError>> {
        self.terminated.lock().unwrap().extend(ids.iter().cloned());
        self.inner.terminate(ids).await
    }
    async fn instances(&self, controller: &str) -> Result<Vec<Instance>, ProviderError> {
        let earlier = self.earlier.lock().unwrap().take();
        match earlier {
            Some(instances) => {
                self.late_answers
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok(instances)
            }
            None => self.inner.instances(controller).await,
        }
    }
    async fn instances_named(
        &self,
        controller: &str,
        ids: Vec<String>,
    ) -> Result<Vec<Instance>, ProviderError> {
        self.inner.instances_named(controller, ids).await
    }
}

/// An app with the engine (no periodic reconciliation but the one asked
/// for) over a cloud that [`ListsLate`]; and that cloud.
async fn spawn_listing_late(backend: Backend) -> (TestApp, Arc<ListsLate>) {
    let site = Site::new(backend);
    let provider = Arc::new(ListsLate {
        inner: site.open_sim(SimConfig::default()),
        earlier: std::sync::Mutex::new(None),
        late_answers: std::sync::atomic::AtomicUsize::new(0),
        terminated: std::sync::Mutex::new(Vec::new()),
    });
    let app = spawn_app_with(Options {
        site: Some(site),
        cloud: Cloud::Given {
            provider: provider.clone(),
            limits: RateLimits::default(),
        },
        engine: Some(ProvisionerConfig {
            reconcile_interval_s: 0,
            ..fast_provisioner()
        }),
        ..Options::default()
    })
    .await;
    (app, provider)
}

/// Asks for a reconciliation and waits until its listing was answered
/// with the earlier one, and a while after for what it decided.
async fn reconcile_with_the_earlier_listing(app: &TestApp, cloud: &ListsLate) {
    app.engine().reconcile_now();
    eventually("the listing to be answered", PATIENCE, || async {
        match cloud.late_answers() {
            1 => Ok(()),
            n => Err(n),
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
}

async fn a_launch_recorded_after_the_cloud_listed_its_instances_is_not_taken_for_vanished(
    backend: Backend,
) {
    let (app, cloud) = spawn_listing_late(backend).await;
    let controller = app.store().model().unwrap().controller_uuid;
    // The cloud lists nothing; then the machine launches and records its
    // instance before the reconciliation reads the machines.
    let before = cloud.inner.instances(&controller).await.unwrap();
    assert!(before.is_empty());
    deploy(app.store(), "wordpress", 1, "", "").await;
    until(app.store(), "started", all_started(1)).await;
    cloud.answer_next_listing_with(before);
    reconcile_with_the_earlier_listing(&app, &cloud).await;
    throughout(
        Duration::from_secs(1),
        app.store(),
        "the machine started",
        all_started(1),
    )
    .await;
}

async fn an_instance_stopped_after_the_cloud_listed_it_is_not_stopped_again(backend: Backend) {
    let (app, cloud) = spawn_listing_late(backend).await;
    let controller = app.store().model().unwrap().controller_uuid;
    app.store()
        .add_machines(AddMachines::default())
        .await
        .unwrap();
    let status = until(app.store(), "started", all_started(1)).await;
    let instance = status.machines[0].instance_id().unwrap().to_string();
    // The cloud lists the instance live; then its machine is removed and
    // the instance stopped before the reconciliation reads the machines.
    let listed = cloud.inner.instances(&controller).await.unwrap();
    assert_eq!(listed.len(), 1);
    app.store()
        .remove_machine(status.machines[0].id, false)
        .await
        .unwrap();
    until(app.store(), "removed", |s| s.machines.is_empty()).await;
    assert!(live_instances(&cloud.inner).is_empty());
    assert_eq!(cloud.terminated(), std::slice::from_ref(&instance));
    cloud.answer_next_listing_with(listed);
    reconcile_with_the_earlier_listing(&app, &cloud).await;
    assert_eq!(cloud.terminated(), [instance]);
}

/// The simulated cloud, whose launches wait until the test opens the gate.
struct GatedLaunches {
    inner: Arc<SimProvider>,
    /// No permits until opened; a launch takes one and gives it straight
    /// back, so once open the gate stays open.
    gate: tokio::sync::Semaphore,
}

impl GatedLaunches {
    /// Lets every launch, waiting or to come, go ahead.
    fn open(&self) {
        self.gate.add_permits(1);
    }
}

#[async_trait]
impl Provider for GatedLaunches {
    what_the_simulated_cloud_says!();
    async fn zones(&self) -> Result<Vec<ProviderZone>, ProviderError> {
        self.inner.zones().await
    }
    async fn launch(&self, requests: Vec<LaunchRequest>) -> Vec<Result<Instance, ProviderError>> {
        drop(self.gate.acquire().await);
        self.inner.launch(requests).await
    }
    async fn terminate(&self, ids: Vec<String>) -> Vec<Result<(), ProviderError>> {
        self.inner.terminate(ids).await
    }
    async fn instances(&self, controller: &str) -> Result<Vec<Instance>, ProviderError> {
        self.inner.instances(controller).await
    }
}

/// A machine that settles while it waits in line for an actor is claimed
/// when its turn comes, found settled, and let go: the controller keeps
/// no lease on it to renew for as long as it runs.
///
/// One actor is allowed, and the first machine's launch waits at the gate,
/// so the line moves only once the test opens it. The machine in line is
/// settled by writes made as the engine's own, which the engine's follower
/// of the change log passes over: it stays in line as it was created, and
/// is read only when admitted.
async fn a_machine_settled_while_waiting_for_an_actor_is_claimed_and_let_go(backend: Backend) {
    let site = Site::new(backend);
    let cloud = Arc::new(GatedLaunches {
        inner: site.open_sim(SimConfig::default()),
        gate: tokio::sync::Semaphore::new(0),
    });
    let config = ProvisionerConfig {
        max_machine_actors: 1,
        // No renewal (nor its sweep of unheld machines), and no launch
        // abandoned at the gate, while the test runs.
        lease_ttl_s: 3600,
        call_timeout_s: 3600,
        ..fast_provisioner()
    };
    let app = spawn_app_with(Options {
        site: Some(site),
        cloud: Cloud::Given {
            provider: cloud.clone(),
            limits: RateLimits::default(),
        },
        engine: Some(config),
        ..Options::default()
    })
    .await;
    let store = app.store();
    // The first machine's actor takes the only room.
    store.add_machines(AddMachines::default()).await.unwrap();
    until(store, "the first machine launching", |s| {
        s.machines.len() == 1 && all_in(s, &[MachineState::Starting])
    })
    .await;
    // The second waits in line and settles there; the third waits behind it.
    let settled = store.add_machines(AddMachines::default()).await.unwrap()[0];
    engine_steps::fail_provisioning(store, settled, "no capacity in sim-a").await;
    store.add_machines(AddMachines::default()).await.unwrap();
    cloud.open();
    // With room for one actor, the third is admitted only after the
    // second was.
    until(store, "the first and the third started", |s| {
        s.machines
            .iter()
            .filter(|m| m.state() == MachineState::Started)
            .count()
            == 2
    })
    .await;
    eventually("every machine's lease to be let go", PATIENCE, || async {
        let leased: Vec<String> = store
            .status()
            .unwrap()
            .machines
            .iter()
            .filter(|m| m.lease.is_some())
            .map(|m| format!("{} ({})", m.id, m.state()))
            .collect();
        if leased.is_empty() {
            Ok(())
        } else {
            Err(leased)
        }
    })
    .await;
}

/// The simulated cloud, except that every zone refuses containers: their
/// launches fail zone-specifically, as for want of capacity.
struct RefusesContainers {
    inner: Arc<SimProvider>,
    /// How many container launches were asked for.
    container_launches: std::sync::atomic::AtomicUsize,
}

#[async_trait]
impl Provider for RefusesContainers {
    what_the_simulated_cloud_says!();
    fn supports_containers(&self) -> bool {
        self.inner.supports_containers()
    }
    async fn zones(&self) -> Result<Vec<ProviderZone>, ProviderError> {
        self.inner.zones().await
    }
    async fn launch(&self, requests: Vec<LaunchRequest>) -> Vec<Result<Instance, ProviderError>> {
        let mut answers = Vec::with_capacity(requests.len());
        for request in requests {
            if request.host_instance.is_some() {
                self.container_launches
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                answers.push(Err(ProviderError::new(
                    FailureClass::ZoneSpecific,
                    format!("InsufficientContainerCapacity: no room in {}", request.zone),
                )));
            } else {
                answers.extend(self.inner.launch(vec![request]).await);
            }
        }
        answers
    }
    async fn terminate(&self, ids: Vec<String>) -> Vec<Result<(), ProviderError>> {
        self.inner.terminate(ids).await
    }
    async fn instances(&self, controller: &str) -> Result<Vec<Instance>, ProviderError> {
        self.inner.instances(controller).await
    }
}

/// A container lives in its host's zone and nowhere else: when that zone
/// refuses it, it ends in a provisioning error saying so, after one launch,
/// rather than choosing the same zone again and again.
async fn a_container_its_hosts_zone_refuses_is_a_provisioning_error_after_one_launch(
    backend: Backend,
) {
    let site = Site::new(backend);
    let cloud = Arc::new(RefusesContainers {
        inner: site.open_sim(SimConfig::default()),
        container_launches: std::sync::atomic::AtomicUsize::new(0),
    });
    let app = spawn_app_with(Options {
        site: Some(site),
        cloud: Cloud::Given {
            provider: cloud.clone(),
            limits: RateLimits::default(),
        },
        engine: Some(fast_provisioner()),
        ..Options::default()
    })
    .await;
    deploy(app.store(), "wordpress", 1, "", "lxd").await;
    let status = until(app.store(), "host started, container in error", |s| {
        s.machines.iter().map(|m| m.state()).collect::<Vec<_>>()
            == vec![MachineState::Started, MachineState::ProvisioningError]
    })
    .await;
    let (host, container) = (&status.machines[0], &status.machines[1]);
    let zone = host.machine.lifecycle.zone.as_deref().unwrap();
    assert_eq!(
        last_error(container),
        format!(
            "machine {}: its host's zone {zone} cannot take it: \
             InsufficientContainerCapacity: no room in {zone}",
            container.id
        )
    );
    assert_eq!(
        cloud
            .container_launches
            .load(std::sync::atomic::Ordering::SeqCst),
        1
    );
}

/// An app with the engine on `config` over a provider that misbehaves as
/// `how` for machine `victim`; and the simulated cloud behind it.
async fn spawn_misbehaving(
    backend: Backend,
    victim: &str,
    how: Misbehaviour,
    config: ProvisionerConfig,
) -> (TestApp, Arc<SimProvider>) {
    let site = Site::new(backend);
    let sim = site.open_sim(SimConfig::default());
    let provider = Arc::new(Misbehaving {
        inner: sim.clone(),
        victim: victim.parse().unwrap(),
        how,
    });
    let app = spawn_app_with(Options {
        site: Some(site),
        cloud: Cloud::Given {
            provider,
            limits: RateLimits::default(),
        },
        engine: Some(config),
        ..Options::default()
    })
    .await;
    (app, sim)
}

async fn one_bad_machine_does_not_stop_the_others(backend: Backend, how: Misbehaviour) {
    let config = ProvisionerConfig {
        call_timeout_s: 1,
        attempts: 2,
        ..fast_provisioner()
    };
    let (app, _sim) = spawn_misbehaving(backend, "2", how, config).await;
    let store = app.store();
    deploy(store, "wordpress", 6, "", "").await;
    let status = until(store, "the others started and the victim in error", |s| {
        s.machines.len() == 6
            && s.machines.iter().all(|m| {
                if m.id.to_string() == "2" {
                    m.state() == MachineState::ProvisioningError
                } else {
                    m.state() == MachineState::Started
                }
            })
    })
    .await;
    let victim = status
        .machines
        .iter()
        .find(|m| m.id.to_string() == "2")
        .unwrap();
    assert!(victim.machine.lifecycle.last_error.is_some());
}

async fn a_panicking_provider_call_for_one_machine_lets_the_others_finish(backend: Backend) {
    one_bad_machine_does_not_stop_the_others(backend, Misbehaviour::Panic).await;
}

async fn a_hanging_provider_call_for_one_machine_lets_the_others_finish(backend: Backend) {
    one_bad_machine_does_not_stop_the_others(backend, Misbehaviour::Hang).await;
}

async fn a_machine_removed_while_its_instance_is_starting_leaks_no_instance(backend: Backend) {
    let (app, sim) = spawn_misbehaving(
        backend,
        "0",
        Misbehaviour::Slow(Duration::from_millis(300)),
        fast_provisioner(),
    )
    .await;
    let store = app.store();
    store.add_machines(AddMachines::default()).await.unwrap();
    until(store, "starting", |s| {
        all_in(s, &[MachineState::Starting]) && !s.machines.is_empty()
    })
    .await;
    store
        .remove_machine("0".parse().unwrap(), false)
        .await
        .unwrap();
    until(store, "removed", |s| s.machines.is_empty()).await;
    eventually("the instance launched to be stopped", PATIENCE, || async {
        let ledger = sim.ledger();
        if ledger.is_empty() || !live_instances(&sim).is_empty() {
            Err(ledger)
        } else {
            Ok(())
        }
    })
    .await;
    assert_eq!(sim.ledger().len(), 1);
    assert_eq!(sim.ledger()[0].state, InstanceState::Terminated);
}

/// An app with the engine (fast settings) over `site`'s simulated cloud on
/// `sim`, seen through a provider that misbehaves as `how` for machine 0.
async fn spawn_misbehaving_on(site: &Site, sim: &Arc<SimProvider>, how: Misbehaviour) -> TestApp {
    let provider = Arc::new(Misbehaving {
        inner: sim.clone(),
        victim: MachineId::new(0),
        how,
    });
    spawn_app_with(Options {
        site: Some(site.clone()),
        cloud: Cloud::Given {
            provider,
            limits: RateLimits::default(),
        },
        engine: Some(fast_provisioner()),
        ..Options::default()
    })
    .await
}

fn a_launch_whose_answer_was_lost_is_adopted_whole_when_the_engine_starts_again(backend: Backend) {
    let site = &Site::new(backend);
    // First life: the launch lands at the cloud, its answer never comes,
    // and the engine stops with the machine starting and no instance
    // recorded. (The agent would check in only much later.)
    in_a_system_then_kill(move || async move {
        let sim = site.open_sim(SimConfig {
            agent_delay_ms: 600_000,
            ..SimConfig::default()
        });
        let app = spawn_misbehaving_on(site, &sim, Misbehaviour::AnswerLost).await;
        app.store()
            .add_machines(AddMachines::default())
            .await
            .unwrap();
        eventually("the launch to land", PATIENCE, || async {
            match sim.ledger().len() {
                1 => Ok(()),
                n => Err(n),
            }
        })
        .await;
        let status = app.store().status().unwrap();
        assert_eq!(status.machines[0].state(), MachineState::Starting);
        assert_eq!(status.machines[0].instance_id(), None);
    });
    // Second life: any launch for the machine would panic, so it can only
    // start on the instance the cloud has.
    in_a_system_then_kill(move || async move {
        let sim = site.open_sim(SimConfig {
            agent_delay_ms: 300,
            ..SimConfig::default()
        });
        let app = spawn_misbehaving_on(site, &sim, Misbehaviour::Panic).await;
        let status = until(app.store(), "started", all_started(1)).await;
        let ledger = sim.ledger();
        assert_eq!(ledger.len(), 1, "nothing launched again: {ledger:?}");
        let (machine, landed) = (&status.machines[0], &ledger[0]);
        assert_eq!(machine.instance_id(), Some(landed.id.as_str()));
        // Recorded whole, as the cloud describes it.
        assert_eq!(
            machine.machine.lifecycle.zone.as_deref(),
            Some(&*landed.zone)
        );
        assert_eq!(
            machine.instance_type.as_deref(),
            Some(&*landed.instance_type)
        );
        let hardware = machine.hardware.as_deref().unwrap_or_default();
        assert!(hardware.contains("cores="), "{hardware}");
        assert_eq!(
            machine.addresses,
            berth::providers::sim::addresses_of(&landed.id)
        );
    });
}

/// Runs `work` in an actix system of its own, then drops the system
/// without a graceful shutdown: every actor and timer simply stops.
fn in_a_system_then_kill<F: std::future::Future<Output = ()>>(work: impl FnOnce() -> F) {
    let system = actix::System::new();
    system.block_on(work());
    drop(system);
}

fn an_engine_killed_mid_deploy_and_started_again_ends_with_exactly_one_instance_per_machine(
    backend: Backend,
) {
    let site = &Site::new(backend);
    // First life: deploy 40 units with slow starts and kill the engine
    // while launches are in flight.
    let sim_config = SimConfig {
        start_delay_ms: 20,
        agent_delay_ms: 50,
        failure_rate: 0.2,
        ..SimConfig::default()
    };
    let sim_config = &sim_config;
    in_a_system_then_kill(move || async move {
        let app = spawn_engine_on(site, sim_config.clone()).await;
        deploy(app.store(), "wordpress", 40, "", "").await;
        until(app.store(), "some started", |s| {
            let started = s
                .machines
                .iter()
                .filter(|m| m.state() == MachineState::Started)
                .count();
            (5..40).contains(&started)
        })
        .await;
    });
    // Second life: same store, same cloud ledger.
    in_a_system_then_kill(move || async move {
        let app = spawn_engine_on(site, sim_config.clone()).await;
        let status = until(app.store(), "40 started", all_started(40)).await;
        let recorded: Vec<String> = status
            .machines
            .iter()
            .filter_map(|m| m.instance_id().map(str::to_string))
            .collect();
        let unique: BTreeSet<String> = recorded.iter().cloned().collect();
        assert_eq!(unique.len(), 40, "every machine has its own instance");
        // Strays from the first life are stopped; wait for the last of them.
        eventually(
            "the live instances to be the recorded ones",
            PATIENCE,
            || async {
                let live = live_instances(app.sim());
                if live == unique {
                    Ok(())
                } else {
                    Err(format!("live {live:?} != recorded {unique:?}"))
                }
            },
        )
        .await;
        // No machine ever had two live instances at once in the ledger's
        // final state.
        let mut per_machine: BTreeMap<String, usize> = BTreeMap::new();
        for entry in app
            .sim()
            .ledger()
            .into_iter()
            .filter(|e| !e.state.is_gone())
        {
            *per_machine
                .entry(entry.machine.map(|m| m.to_string()).unwrap_or_default())
                .or_default() += 1;
        }
        assert!(per_machine.values().all(|n| *n == 1), "{per_machine:?}");
    });
}

fn an_instance_terminated_while_the_engine_was_stopped_shows_its_machine_down_at_start(
    backend: Backend,
) {
    let site = &Site::new(backend);
    let mut instance = String::new();
    let found = &mut instance;
    in_a_system_then_kill(move || async move {
        let app = spawn_engine_on(site, SimConfig::default()).await;
        deploy(app.store(), "wordpress", 2, "", "").await;
        let status = until(app.store(), "started", all_started(2)).await;
        *found = status.machines[0].instance_id().unwrap().to_string();
    });
    let instance = &instance;
    // While no engine runs, the cloud loses one instance.
    in_a_system_then_kill(move || async move {
        let sim = site.open_sim(SimConfig::default());
        sim.stop_behind_back(instance).await.unwrap();
    });
    in_a_system_then_kill(move || async move {
        let app = spawn_engine_on(site, SimConfig::default()).await;
        let status = until(app.store(), "one down, one started", |s| {
            s.machines.iter().map(|m| m.state()).collect::<Vec<_>>()
                == vec![MachineState::Down, MachineState::Started]
        })
        .await;
        let message = last_error(&status.machines[0]);
        assert!(message.contains(instance.as_str()), "{message}");
    });
}

/// An engine started again knows nothing of a host that started in its
/// last life: removing the host with --force (its container going to
/// `stopping` with it) removes the container too, without waiting for a
/// host that is being removed to start.
fn a_host_removed_with_force_after_the_engine_started_again_takes_its_container_along(
    backend: Backend,
) {
    let site = &Site::new(backend);
    in_a_system_then_kill(move || async move {
        let app = spawn_engine_on(site, SimConfig::default()).await;
        deploy(app.store(), "wordpress", 1, "", "lxd").await;
        until(app.store(), "host and container started", all_started(2)).await;
    });
    in_a_system_then_kill(move || async move {
        let app = spawn_engine_on(site, SimConfig::default()).await;
        app.store()
            .remove_machine(MachineId::new(0), true)
            .await
            .unwrap();
        until(app.store(), "host and container removed", |s| {
            s.machines.is_empty()
        })
        .await;
        assert!(live_instances(app.sim()).is_empty());
    });
}

/// A provider's report that an instance went, delivered after the agent
/// on it was heard again (it stopped and started, and the webhook came
/// late), is passed over; one newer than the last heartbeat shows the
/// machine down.
async fn a_late_report_of_an_instance_going_is_passed_over_once_its_agent_was_heard(
    backend: Backend,
) {
    let sim = SimConfig {
        heartbeat_interval_ms: 3_600_000,
        ..SimConfig::default()
    };
    let app = spawn_engine(backend, sim, fast_provisioner()).await;
    app.store()
        .add_machines(AddMachines::default())
        .await
        .unwrap();
    let status = until(app.store(), "started", all_started(1)).await;
    let record = &status.machines[0];
    let instance = record.instance_id().unwrap().to_string();
    let heard = record.last_heartbeat_ms.expect("the check-in's heartbeat");
    let report = |at_ms: i64| InstanceStateChange {
        instance_id: instance.clone(),
        state: InstanceState::Stopped,
        at_ms,
    };
    app.engine()
        .link()
        .instance_changed(report(heard - 1_000))
        .await;
    // The report has been handled once a later one has.
    let marker = app.store().revision();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        app.store().revision(),
        marker,
        "nothing written for a late report"
    );
    assert_eq!(
        app.store().machine(&record.id).unwrap().state(),
        MachineState::Started
    );
    app.engine()
        .link()
        .instance_changed(report(heard + 1_000))
        .await;
    until(app.store(), "down", |s| all_in(s, &[MachineState::Down])).await;
}

async fn a_machine_whose_agent_falls_silent_is_shown_down_and_a_heartbeat_brings_it_back(
    backend: Backend,
) {
    // The simulated agents report only once an hour here.
    let sim = SimConfig {
        heartbeat_interval_ms: 3_600_000,
        ..SimConfig::default()
    };
    let config = ProvisionerConfig {
        agent_down_after_s: 1,
        ..fast_provisioner()
    };
    let app = spawn_engine(backend, sim, config).await;
    app.store()
        .add_machines(AddMachines::default())
        .await
        .unwrap();
    until(app.store(), "started", all_started(1)).await;
    let status = until(app.store(), "down", |s| all_in(s, &[MachineState::Down])).await;
    assert_eq!(
        status.machines[0].machine.lifecycle.last_error.as_deref(),
        Some("agent is not responding")
    );
    app.store()
        .agents_alive(vec!["0".parse().unwrap()], Duration::from_millis(250))
        .await
        .unwrap();
    let status = until(app.store(), "started again", all_started(1)).await;
    // Why it was down no longer holds, nor is shown.
    assert_eq!(status.machines[0].machine.lifecycle.last_error, None);
}

async fn the_simulated_agents_heartbeats_keep_their_machines_started(backend: Backend) {
    let sim = SimConfig {
        heartbeat_interval_ms: 200,
        ..SimConfig::default()
    };
    let config = ProvisionerConfig {
        agent_down_after_s: 1,
        ..fast_provisioner()
    };
    let app = spawn_engine(backend, sim, config).await;
    app.store()
        .add_machines(AddMachines {
            count: 3,
            ..AddMachines::default()
        })
        .await
        .unwrap();
    until(app.store(), "started", all_started(3)).await;
    // Three times the down threshold: without heartbeats they would be down.
    throughout(
        Duration::from_secs(3),
        app.store(),
        "every machine started",
        all_started(3),
    )
    .await;
}

async fn no_instance_above_the_price_ceiling_is_launched(backend: Backend) {
    use berth::domain::instance_types::{select_for_workload, Catalogue};
    let catalogue = Catalogue::embedded().unwrap();
    let fit = |c: &str| select_for_workload(&Constraints::parse(c).unwrap(), catalogue).unwrap();
    let (small, large) = (fit("mem=4G"), fit("mem=8G"));
    assert!(small.price < large.price);
    // The ceiling is the small type's price: it is allowed, to the cent.
    let config = ProvisionerConfig {
        max_hourly_price: small.price.to_string().parse().unwrap(),
        ..fast_provisioner()
    };
    let app = spawn_engine(backend, SimConfig::default(), config).await;
    deploy(app.store(), "small", 1, "mem=4G", "").await;
    deploy(app.store(), "large", 1, "mem=8G", "").await;
    deploy(app.store(), "huge", 1, "mem=max", "").await;
    let status = until(app.store(), "one started, two refused", |s| {
        s.machines.len() == 3
            && s.machines
                .iter()
                .filter(|m| m.state() == MachineState::ProvisioningError)
                .count()
                == 2
            && s.machines
                .iter()
                .any(|m| m.state() == MachineState::Started)
    })
    .await;
    let started: Vec<&MachineRecord> = status
        .machines
        .iter()
        .filter(|m| m.state() == MachineState::Started)
        .collect();
    assert_eq!(
        started[0].instance_type.as_deref(),
        Some(small.name.as_str())
    );
    for machine in status
        .machines
        .iter()
        .filter(|m| m.state() == MachineState::ProvisioningError)
    {
        let message = last_error(machine);
        assert!(
            message.contains("[provisioner] max_hourly_price")
                && message.contains(&format!("above the ceiling of ${}/hour", small.price)),
            "{message}"
        );
        assert_eq!(machine.machine.lifecycle.attempts_used, 0, "{message}");
        assert_eq!(machine.instance_id(), None);
    }
    let refused_large = status
        .machines
        .iter()
        .any(|m| last_error(m).contains(&format!("{} costs ${}/hour", large.name, large.price)));
    assert!(refused_large, "{:#?}", status.machines);
    // Only the one within the ceiling runs in the cloud.
    assert_eq!(live_instances(app.sim()).len(), 1);
}

async fn mem_max_under_the_default_price_ceiling_is_a_provisioning_error_naming_the_setting(
    backend: Backend,
) {
    let app = spawn_engine(backend, SimConfig::default(), fast_provisioner()).await;
    // berth add-machine --constraints mem=max
    app.store()
        .add_machines(AddMachines {
            constraints: Constraints::parse("mem=max").unwrap(),
            ..AddMachines::default()
        })
        .await
        .unwrap();
    let status = until(app.store(), "provisioning error", |s| {
        s.machines.len() == 1 && all_in(s, &[MachineState::ProvisioningError])
    })
    .await;
    let message = last_error(&status.machines[0]);
    assert!(
        message.contains("above the ceiling of $10/hour ([provisioner] max_hourly_price)"),
        "{message}"
    );
    // The nearest fit under the ceiling is the largest memory there:
    // not the cheapest type, which mem=max never chooses.
    assert!(
        message.contains("(instead of mem=max: mem=") && message.ends_with("/h)"),
        "{message}"
    );
    assert!(!message.contains("zones are known"), "{message}");
    assert!(live_instances(app.sim()).is_empty());
}

async fn each_max_takes_the_most_the_cloud_offers_under_a_raised_ceiling(backend: Backend) {
    use berth::domain::instance_types::{select_for_workload, Catalogue};
    let catalogue = Catalogue::embedded().unwrap();
    let best = |c: &str| {
        select_for_workload(&Constraints::parse(c).unwrap(), catalogue)
            .unwrap()
            .name
            .clone()
    };
    let config = ProvisionerConfig {
        max_hourly_price: 1000.0,
        ..fast_provisioner()
    };
    let app = spawn_engine(backend, SimConfig::default(), config).await;
    let asked = [
        "mem=max",
        "cores=max",
        "cpu-power=max",
        "root-disk=max",
        "storage=max",
    ];
    for (i, constraints) in asked.iter().enumerate() {
        deploy(app.store(), &format!("app{i}"), 1, constraints, "").await;
    }
    let status = until(app.store(), "5 started", all_started(5)).await;
    let mut by_constraints: BTreeMap<String, &MachineRecord> = BTreeMap::new();
    for machine in &status.machines {
        by_constraints.insert(machine.constraints.to_string(), machine);
    }
    for size in ["mem=max", "cores=max", "cpu-power=max"] {
        let machine = by_constraints[size];
        assert_eq!(
            machine.instance_type.as_deref(),
            Some(best(size).as_str()),
            "{size}"
        );
    }
    // The largest EBS volume, 16 TiB, on the cheapest type.
    for disk in ["root-disk=max", "storage=max"] {
        let machine = by_constraints[disk];
        assert!(
            machine
                .hardware
                .as_deref()
                .unwrap_or_default()
                .contains("root-disk=16777216M"),
            "{disk}: {:?}",
            machine.hardware
        );
        assert_eq!(machine.instance_type.as_deref(), Some(best("").as_str()));
    }
}

async fn the_tightest_constraint_wins_over_a_named_instance_type(backend: Backend) {
    // The placement document's example, on a cloud of m1 types only:
    // m1.small is named, mem=8G asks for more than it has, and the
    // cheapest m1 with 8G is m1.xlarge.
    let dir = tempfile::tempdir().unwrap();
    let catalogue = dir.path().join("m1.csv");
    std::fs::write(
        &catalogue,
        "instance_type,arch,vcpus,cores,cpu_power,mem_mib,clock_ghz,burstable,current_generation,gpus,bare_metal,instance_storage_gb,hourly_usd\n\
         m1.large,amd64,2,2,200,7680,,false,false,0,false,840,0.175\n\
         m1.medium,amd64,1,1,100,3788,,false,false,0,false,410,0.087\n\
         m1.small,amd64,1,1,100,1740,,false,false,0,false,160,0.044\n\
         m1.xlarge,amd64,4,4,400,15360,,false,false,0,false,1680,0.35\n",
    )
    .unwrap();
    let sim = SimConfig {
        catalogue: Some(catalogue),
        ..SimConfig::default()
    };
    let app = spawn_engine(backend, sim, fast_provisioner()).await;
    deploy(app.store(), "big", 1, "mem=8G instance-type=m1.small", "").await;
    deploy(app.store(), "small", 1, "instance-type=m1.small", "").await;
    let status = until(app.store(), "2 started", all_started(2)).await;
    let types: Vec<Option<&str>> = status
        .machines
        .iter()
        .map(|m| m.instance_type.as_deref())
        .collect();
    assert_eq!(types, [Some("m1.xlarge"), Some("m1.small")]);
}

async fn storage_sizes_the_root_disk_and_more_than_any_disk_is_an_error(backend: Backend) {
    let app = spawn_engine(backend, SimConfig::default(), fast_provisioner()).await;
    deploy(app.store(), "data", 1, "storage=50G", "").await;
    deploy(app.store(), "hoard", 1, "storage=17T", "").await;
    let status = until(app.store(), "one started, one in error", |s| {
        s.machines.len() == 2
            && all_in(s, &[MachineState::Started, MachineState::ProvisioningError])
    })
    .await;
    let (started, failed) = (&status.machines[0], &status.machines[1]);
    assert_eq!(started.state(), MachineState::Started);
    assert!(
        started
            .hardware
            .as_deref()
            .unwrap_or_default()
            .contains("root-disk=51200M"),
        "{:?}",
        started.hardware
    );
    assert_eq!(failed.state(), MachineState::ProvisioningError);
    let message = last_error(failed);
    assert!(
        message.contains("no instance type satisfies constraints")
            && message.contains("storage=17825792M"),
        "{message}"
    );
    assert_eq!(live_instances(app.sim()).len(), 1);
}

on_each_backend! {
    actix: [
        nine_units_spread_three_per_zone_and_a_second_applications_three_one_per_zone,
        settled_machines_keep_no_actor_alive,
        machines_beyond_the_actor_limit_wait_their_turn_and_all_start,
        machines_waiting_their_turn_hold_no_lease,
        a_machine_made_while_the_engine_runs_starts_without_waiting_for_a_sweep,
        a_zone_disabled_by_an_administrator_gets_no_new_machines,
        a_zone_out_of_capacity_sends_machines_to_the_next_zone,
        an_explicit_zone_placement_is_honoured,
        a_zone_the_cloud_does_not_have_is_an_error_within_one_attempt,
        unsatisfiable_constraints_end_in_an_error_and_retry_with_new_constraints_starts_the_machine,
        a_missing_image_is_a_permanent_failure_and_is_not_retried,
        no_instance_above_the_price_ceiling_is_launched,
        storage_sizes_the_root_disk_and_more_than_any_disk_is_an_error,
        the_tightest_constraint_wins_over_a_named_instance_type,
        each_max_takes_the_most_the_cloud_offers_under_a_raised_ceiling,
        mem_max_under_the_default_price_ceiling_is_a_provisioning_error_naming_the_setting,
        with_thirty_percent_transient_failures_every_machine_ends_started,
        a_stray_instance_with_berths_tags_is_stopped_and_others_are_left_alone,
        an_instance_terminated_behind_berths_back_shows_the_machine_down,
        a_container_is_started_on_its_host_once_the_host_is_up,
        removing_a_started_machine_stops_its_instance_and_removes_it,
        an_agent_that_never_checks_in_is_relaunched_and_then_the_machine_is_in_error,
        a_panicking_provider_call_for_one_machine_lets_the_others_finish,
        a_hanging_provider_call_for_one_machine_lets_the_others_finish,
        a_machine_removed_while_its_instance_is_starting_leaks_no_instance,
        a_machine_whose_agent_falls_silent_is_shown_down_and_a_heartbeat_brings_it_back,
        the_simulated_agents_heartbeats_keep_their_machines_started,
        a_launch_recorded_after_the_cloud_listed_its_instances_is_not_taken_for_vanished,
        an_instance_stopped_after_the_cloud_listed_it_is_not_stopped_again,
        a_machine_settled_while_waiting_for_an_actor_is_claimed_and_let_go,
        a_late_report_of_an_instance_going_is_passed_over_once_its_agent_was_heard,
        a_container_its_hosts_zone_refuses_is_a_provisioning_error_after_one_launch,
    ],
    plain: [
        an_engine_killed_mid_deploy_and_started_again_ends_with_exactly_one_instance_per_machine,
        an_instance_terminated_while_the_engine_was_stopped_shows_its_machine_down_at_start,
        a_launch_whose_answer_was_lost_is_adopted_whole_when_the_engine_starts_again,
        a_host_removed_with_force_after_the_engine_started_again_takes_its_container_along,
    ],
}

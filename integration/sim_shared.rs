//! The simulated cloud's shared ledger, on a real PostgreSQL server: two
//! clouds opened on one database are one cloud (instances listed, adopted by
//! client token and terminated across them, one sequence of ids, zone
//! capacity counted across them), and what a cloud that is gone left to do
//! (starts, agent check-ins) is done by the other.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use berth::contracts::provider::{
    tags, AgentBootstrap, ControllerLink, InstanceStateChange, LaunchRequest, Provider,
};
use berth::contracts::secrets::Secret;
use berth::domain::instance::InstanceState;
use berth::domain::instance_types::Requirements;
use berth::domain::names::MachineId;
use berth::providers::sim::{AgentState, FaultSet, SimConfig, SimProvider, ORPHAN_GRACE_MS};

use crate::support::{eventually, postgres};

const CONTROLLER: &str = "controller-1";

fn config(start_delay_ms: u64) -> SimConfig {
    SimConfig {
        start_delay_ms,
        agent_delay_ms: 0,
        ..SimConfig::default()
    }
}

async fn open(database: &str, start_delay_ms: u64) -> SimProvider {
    let url = database.to_string();
    tokio::task::spawn_blocking(move || SimProvider::open_shared(config(start_delay_ms), &url))
        .await
        .unwrap()
        .expect("open the shared cloud")
}

fn request(machine: u64, zone: &str) -> LaunchRequest {
    LaunchRequest {
        machine: MachineId::new(machine),
        zone: zone.to_string(),
        instance_type: "t3.large".to_string(),
        base: "ubuntu@22.04".parse().unwrap(),
        requirements: Requirements::default(),
        agent: AgentBootstrap {
            controller_url: "http://controller.invalid:17070".to_string(),
            ca_cert: None,
            one_time_password: Secret::new(format!("otp-{machine}")),
        },
        client_token: format!("token-{machine}"),
        tags: BTreeMap::from([
            (tags::CONTROLLER.to_string(), CONTROLLER.to_string()),
            (tags::MACHINE.to_string(), machine.to_string()),
        ]),
        host_instance: None,
    }
}

/// The agents that checked in through a link.
#[derive(Default)]
struct Agents(Mutex<Vec<(MachineId, String)>>);

#[async_trait]
impl ControllerLink for Agents {
    async fn instance_changed(&self, _change: InstanceStateChange) {}

    async fn agent_connect(&self, machine: MachineId, password: Secret) -> Result<(), String> {
        self.0
            .lock()
            .unwrap()
            .push((machine, password.expose().to_string()));
        Ok(())
    }
}

async fn launch_ids(cloud: &SimProvider, requests: Vec<LaunchRequest>) -> Vec<String> {
    cloud
        .launch(requests)
        .await
        .into_iter()
        .map(|r| r.expect("launched").id)
        .collect()
}

/// The ids of the instances `cloud` lists as the controller's.
async fn listed_ids(cloud: &SimProvider) -> BTreeSet<String> {
    cloud
        .instances(CONTROLLER)
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.id)
        .collect()
}

/// More instances than one read of the ledger takes: a cloud opened on
/// them, and one that was open while they were launched, each read all.
#[tokio::test]
async fn a_ledger_larger_than_one_read_is_read_whole() {
    const INSTANCES: u64 = 4_500;
    let database = postgres::fresh_database();
    let (a, b) = (open(&database, 0).await, open(&database, 0).await);
    let launched: BTreeSet<String> =
        launch_ids(&a, (0..INSTANCES).map(|m| request(m, "sim-a")).collect())
            .await
            .into_iter()
            .collect();
    assert_eq!(launched.len() as u64, INSTANCES);
    let c = open(&database, 0).await;
    assert_eq!(c.ledger().len() as u64, INSTANCES);
    for (cloud, listed) in [("b", listed_ids(&b).await), ("c", listed_ids(&c).await)] {
        // Compared whole only once the counts agree, to keep a failure short.
        assert_eq!(listed.len(), launched.len(), "cloud {cloud}");
        assert!(listed == launched, "cloud {cloud} lists other instances");
    }
}

#[tokio::test]
async fn two_clouds_on_one_database_are_one_cloud() {
    let database = postgres::fresh_database();
    let (a, b) = (open(&database, 0).await, open(&database, 0).await);
    let from_a = launch_ids(&a, (0..3).map(|m| request(m, "sim-a")).collect()).await;

    // B lists A's instances, and a launch B repeats (a controller taking a
    // machine over) is A's instance, not a new one.
    let listed = listed_ids(&b).await;
    assert_eq!(listed, from_a.iter().cloned().collect());
    let adopted = launch_ids(&b, vec![request(1, "sim-a")]).await;
    assert_eq!(adopted, [from_a[1].clone()]);

    // New launches on either draw from one sequence: no id twice.
    let from_b = launch_ids(&b, (3..6).map(|m| request(m, "sim-b")).collect()).await;
    let more_a = launch_ids(&a, (6..8).map(|m| request(m, "sim-c")).collect()).await;
    let all: BTreeSet<&String> = from_a.iter().chain(&from_b).chain(&more_a).collect();
    assert_eq!(all.len(), 8);

    // B terminates one of A's: A no longer lists it.
    assert!(b.terminate(vec![from_a[0].clone()]).await[0].is_ok());
    let listed = listed_ids(&a).await;
    assert_eq!(listed.len(), 7);
    assert!(!listed.contains(&from_a[0]));
    assert_eq!(a.ledger().len(), 8);
    assert_eq!(b.ledger().len(), 8);
}

#[tokio::test]
async fn zone_capacity_is_counted_across_clouds_launching_at_once() {
    let database = postgres::fresh_database();
    let (a, b) = (open(&database, 0).await, open(&database, 0).await);
    for cloud in [&a, &b] {
        let mut faults = FaultSet::default();
        faults.zone_capacity.insert("sim-a".to_string(), 5);
        cloud.set_faults(faults).await.unwrap();
    }
    let (from_a, from_b) = tokio::join!(
        a.launch((0..5).map(|m| request(m, "sim-a")).collect()),
        b.launch((5..10).map(|m| request(m, "sim-a")).collect()),
    );
    let launched = from_a.iter().chain(&from_b).filter(|r| r.is_ok()).count();
    let refused: Vec<String> = from_a
        .iter()
        .chain(&from_b)
        .filter_map(|r| r.as_ref().err().map(|e| e.message.clone()))
        .collect();
    assert_eq!(launched, 5, "{refused:?}");
    assert!(refused
        .iter()
        .all(|m| m.starts_with("InsufficientInstanceCapacity")));
}

#[tokio::test]
async fn what_a_cloud_left_undone_is_done_by_another() {
    const START_DELAY_MS: u64 = 1_000;
    let database = postgres::fresh_database();
    // One cloud starts its instances and is gone before their agents
    // check in (no controller was attached to hear them)...
    let first = open(&database, START_DELAY_MS).await;
    let mut ids = launch_ids(&first, (0..2).map(|m| request(m, "sim-a")).collect()).await;
    eventually(
        "the first cloud's instances to run",
        Duration::from_secs(30),
        || async {
            let running = first
                .ledger()
                .iter()
                .filter(|e| e.state == InstanceState::Running)
                .count();
            if running == 2 {
                Ok(())
            } else {
                Err(running)
            }
        },
    )
    .await;
    drop(first);
    // ... another is gone before its instances start.
    let second = open(&database, START_DELAY_MS).await;
    ids.extend(launch_ids(&second, (2..4).map(|m| request(m, "sim-b")).collect()).await);
    drop(second);

    let link = Arc::new(Agents::default());
    let survivor = open(&database, START_DELAY_MS).await;
    survivor.attach(link.clone());
    // Overdue by the grace: the survivor starts them and checks their
    // agents in, once each.
    let started = std::time::Instant::now();
    eventually(
        "the agents left to check in",
        Duration::from_secs(60),
        || async {
            let heard = link.0.lock().unwrap().len();
            if heard == 4 {
                Ok(())
            } else {
                Err(heard)
            }
        },
    )
    .await;
    eprintln!("taken up after {:?}", started.elapsed());
    assert!(
        started.elapsed() < Duration::from_millis(START_DELAY_MS + 3 * ORPHAN_GRACE_MS as u64),
        "taken up after {:?}",
        started.elapsed()
    );
    let mut heard = link.0.lock().unwrap().clone();
    heard.sort();
    let expected: Vec<(MachineId, String)> = (0..4)
        .map(|m| (MachineId::new(m), format!("otp-{m}")))
        .collect();
    assert_eq!(heard, expected);
    eventually(
        "the check-ins recorded",
        Duration::from_secs(10),
        || async {
            let ledger = survivor.ledger();
            let done = ledger.iter().all(|e| {
                ids.contains(&e.id)
                    && e.state == InstanceState::Running
                    && e.agent == AgentState::Connected
            });
            if done && ledger.len() == 4 {
                Ok(())
            } else {
                Err(ledger.len())
            }
        },
    )
    .await;
    // Nothing is delivered twice.
    tokio::time::sleep(Duration::from_millis(2 * ORPHAN_GRACE_MS as u64)).await;
    assert_eq!(link.0.lock().unwrap().len(), 4);
}

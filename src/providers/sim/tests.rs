//! The simulated cloud's behaviour, through the `Provider` trait and its
//! administrative methods.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::*;
use crate::contracts::provider::AgentBootstrap;
use crate::contracts::secrets::Secret;
use crate::domain::instance_types::Requirements;
use crate::domain::names::MachineId;

const CONTROLLER: &str = "controller-1";

/// What a test link heard, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Heard {
    Changed(String, InstanceState),
    Agent(MachineId, String),
}

/// A controller that records what it hears and refuses the first
/// `refusals` check-ins.
struct Recorder {
    tx: mpsc::UnboundedSender<Heard>,
    refusals: AtomicU32,
    changes: Mutex<Vec<InstanceStateChange>>,
}

#[async_trait]
impl ControllerLink for Recorder {
    async fn instance_changed(&self, change: InstanceStateChange) {
        let _ = self
            .tx
            .send(Heard::Changed(change.instance_id.clone(), change.state));
        self.changes.lock().unwrap().push(change);
    }

    async fn agent_connect(&self, machine: MachineId, password: Secret) -> Result<(), String> {
        let _ = self
            .tx
            .send(Heard::Agent(machine, password.expose().to_string()));
        let refused = self
            .refusals
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if refused {
            Err("invalid one-time password".to_string())
        } else {
            Ok(())
        }
    }
}

fn recorder(refusals: u32) -> (Arc<Recorder>, mpsc::UnboundedReceiver<Heard>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let link = Arc::new(Recorder {
        tx,
        refusals: AtomicU32::new(refusals),
        changes: Mutex::new(Vec::new()),
    });
    (link, rx)
}

async fn hear(rx: &mut mpsc::UnboundedReceiver<Heard>) -> Heard {
    tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .expect("nothing heard")
        .expect("the link is gone")
}

/// Waits, a millisecond at a time, until `done` holds.
async fn eventually(mut done: impl FnMut() -> bool) {
    for _ in 0..10_000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("the condition never held");
}

fn machine_tags(machine: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (tags::CONTROLLER.to_string(), CONTROLLER.to_string()),
        (tags::MODEL.to_string(), "model-1".to_string()),
        (tags::MACHINE.to_string(), machine.to_string()),
        (tags::NAME.to_string(), format!("berth-machine-{machine}")),
    ])
}

fn request(machine: u64, zone: &str) -> LaunchRequest {
    LaunchRequest {
        machine: MachineId::new(machine),
        zone: zone.to_string(),
        instance_type: "t3.large".to_string(),
        base: "ubuntu@22.04".parse().unwrap(),
        requirements: Requirements::default(),
        agent: AgentBootstrap {
            controller_url: "http://127.0.0.1:17070".to_string(),
            ca_cert: None,
            one_time_password: Secret::new(format!("otp-{machine}")),
        },
        client_token: format!("token-{machine}"),
        tags: machine_tags(&machine.to_string()),
        host_instance: None,
    }
}

fn container(host: u64, k: u64, host_instance: &str) -> LaunchRequest {
    let machine = MachineId::lxd_container(host, k);
    LaunchRequest {
        machine,
        instance_type: String::new(),
        client_token: format!("token-{machine}"),
        tags: machine_tags(&machine.to_string()),
        host_instance: Some(host_instance.to_string()),
        agent: AgentBootstrap {
            controller_url: "http://127.0.0.1:17070".to_string(),
            ca_cert: None,
            one_time_password: Secret::new(format!("otp-{machine}")),
        },
        ..request(host, "ignored")
    }
}

fn sim(config: SimConfig) -> SimProvider {
    SimProvider::open(config, None).unwrap()
}

fn ok_id(result: &Result<Instance, ProviderError>) -> String {
    result.as_ref().unwrap().id.clone()
}

/// Runs `sql` on the ledger file at `path` behind the cloud's back. A
/// dropped cloud lets go of its file from its own thread: this waits for
/// it, as a second cloud opening the file would.
fn edit_ledger_file(path: &std::path::Path, sql: &str) {
    use diesel::connection::SimpleConnection;
    use diesel::Connection;

    diesel::SqliteConnection::establish(&path.to_string_lossy())
        .unwrap()
        .batch_execute(&format!("PRAGMA busy_timeout = 10000; {sql}"))
        .unwrap();
}

fn t3_large(zone: &str) -> Hardware {
    let catalogue = Catalogue::embedded().unwrap();
    Hardware::of(catalogue.get("t3.large").unwrap(), zone, None)
}

#[tokio::test]
async fn a_launch_gives_a_pending_instance_with_its_type_hardware_and_machine() {
    let cloud = sim(SimConfig::default());
    let results = cloud.launch(vec![request(4, "sim-b")]).await;
    let instance = results[0].clone().unwrap();
    assert!(instance.id.starts_with("i-"), "{}", instance.id);
    assert_eq!(instance.id.len(), 19, "{}", instance.id);
    assert!(instance.id[2..].bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(
        instance,
        Instance {
            id: instance.id.clone(),
            machine: Some(MachineId::new(4)),
            zone: "sim-b".to_string(),
            instance_type: "t3.large".to_string(),
            state: InstanceState::Pending,
            hardware: t3_large("sim-b"),
            addresses: addresses_of(&instance.id),
        }
    );
    // From the documentation ranges: one IPv4 address, one IPv6 address.
    let v4: std::net::Ipv4Addr = instance.addresses[0].parse().unwrap();
    assert_eq!(v4.octets()[..3], [192, 0, 2]);
    assert!(v4.octets()[3] >= 1 && v4.octets()[3] <= 254);
    let v6: std::net::Ipv6Addr = instance.addresses[1].parse().unwrap();
    assert_eq!(v6.segments()[..2], [0x2001, 0xdb8]);
    let ledger = cloud.ledger();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].client_token.as_deref(), Some("token-4"));
    assert_eq!(ledger[0].tags, Tags::from(machine_tags("4")));
    assert_eq!(ledger[0].agent, AgentState::Waiting);
    assert_eq!(ledger[0].host_instance, None);
}

#[tokio::test]
async fn the_requested_root_disk_is_part_of_the_hardware() {
    let cloud = sim(SimConfig::default());
    let mut r = request(0, "sim-a");
    r.requirements.root_disk_mib = Some(32768);
    let instance = cloud.launch(vec![r]).await.remove(0).unwrap();
    assert_eq!(instance.hardware.root_disk_mib, Some(32768));
}

#[tokio::test]
async fn seeded_runs_are_repeatable() {
    let config = SimConfig {
        failure_rate: 0.5,
        seed: 42,
        ..SimConfig::default()
    };
    let requests: Vec<LaunchRequest> = (0..40)
        .map(|m| request(m, ["sim-a", "sim-b", "sim-c"][m as usize % 3]))
        .collect();
    let first = sim(config.clone()).launch(requests.clone()).await;
    let second = sim(config.clone()).launch(requests.clone()).await;
    assert_eq!(first, second);
    let failures = first.iter().filter(|r| r.is_err()).count();
    assert!(failures > 0 && failures < 40, "{failures} of 40 failed");

    let other_seed = sim(SimConfig { seed: 43, ..config }).launch(requests).await;
    assert_ne!(first, other_seed);
}

#[tokio::test]
async fn the_ids_do_not_depend_on_the_failure_rate() {
    let requests: Vec<LaunchRequest> = (0..20).map(|m| request(m, "sim-a")).collect();
    let unlucky = sim(SimConfig {
        failure_rate: 0.5,
        ..SimConfig::default()
    })
    .launch(requests.clone())
    .await;
    let lucky = sim(SimConfig::default()).launch(requests).await;
    let mut succeeded = 0;
    for (u, l) in unlucky.iter().zip(&lucky) {
        if let Ok(instance) = u {
            assert_eq!(instance.id, ok_id(l));
            succeeded += 1;
        }
    }
    assert!(
        succeeded > 0 && succeeded < 20,
        "{succeeded} of 20 succeeded"
    );
}

#[tokio::test]
async fn a_repeated_client_token_returns_the_first_instance() {
    let cloud = sim(SimConfig::default());
    let first = cloud.launch(vec![request(0, "sim-a")]).await;
    let again = cloud.launch(vec![request(0, "sim-b")]).await;
    assert_eq!(first, again);
    assert_eq!(again[0].as_ref().unwrap().zone, "sim-a");

    let within_one_call = cloud
        .launch(vec![request(1, "sim-a"), request(1, "sim-a")])
        .await;
    assert_eq!(within_one_call[0], within_one_call[1]);
    assert_eq!(cloud.ledger().len(), 2);
}

#[tokio::test]
async fn a_zone_at_capacity_refuses_with_a_zone_specific_error() {
    let cloud = sim(SimConfig {
        capacity: BTreeMap::from([("sim-a".to_string(), 2)]),
        ..SimConfig::default()
    });
    let results = cloud
        .launch(vec![
            request(0, "sim-a"),
            request(1, "sim-a"),
            request(2, "sim-a"),
        ])
        .await;
    assert!(results[0].is_ok() && results[1].is_ok());
    assert_eq!(
        results[2],
        Err(ProviderError::new(
            FailureClass::ZoneSpecific,
            "InsufficientInstanceCapacity: We currently do not have sufficient t3.large \
             capacity in the Availability Zone you requested (sim-a). Our system will be \
             working on provisioning additional capacity."
        ))
    );
    assert!(cloud.launch(vec![request(3, "sim-b")]).await[0].is_ok());

    // Terminating frees a place; raising the capacity adds one.
    cloud.terminate(vec![ok_id(&results[0])]).await;
    assert!(cloud.launch(vec![request(2, "sim-a")]).await[0].is_ok());
    assert!(cloud.launch(vec![request(4, "sim-a")]).await[0].is_err());
    cloud.set_capacity("sim-a", Some(3)).unwrap();
    assert!(cloud.launch(vec![request(4, "sim-a")]).await[0].is_ok());
    cloud.set_capacity("sim-a", None).unwrap();
    assert!(cloud.launch(vec![request(5, "sim-a")]).await[0].is_ok());
}

#[tokio::test]
async fn an_outage_refuses_launches_and_is_reported_by_zones() {
    let cloud = sim(SimConfig {
        outages: vec!["sim-c".to_string()],
        ..SimConfig::default()
    });
    let zone = |name: &str, available: bool, reason: &str| ProviderZone {
        name: name.to_string(),
        available,
        reason: reason.to_string(),
    };
    assert_eq!(
        cloud.zones().await.unwrap(),
        [
            zone("sim-a", true, ""),
            zone("sim-b", true, ""),
            zone("sim-c", false, OUTAGE_REASON),
        ]
    );
    assert_eq!(
        cloud.launch(vec![request(0, "sim-c")]).await[0],
        Err(ProviderError::new(
            FailureClass::ZoneSpecific,
            "zone sim-c is unavailable"
        ))
    );

    cloud.set_outage("sim-c", false).unwrap();
    cloud.set_outage("sim-a", true).unwrap();
    assert_eq!(
        cloud.zones().await.unwrap(),
        [
            zone("sim-a", false, OUTAGE_REASON),
            zone("sim-b", true, ""),
            zone("sim-c", true, ""),
        ]
    );
    assert!(cloud.launch(vec![request(0, "sim-c")]).await[0].is_ok());
}

#[tokio::test]
async fn an_unknown_zone_or_instance_type_fails_permanently() {
    let cloud = sim(SimConfig::default());
    let mut unknown_type = request(1, "sim-a");
    unknown_type.instance_type = "x9.huge".to_string();
    let results = cloud.launch(vec![request(0, "sim-z"), unknown_type]).await;
    assert_eq!(
        results,
        [
            Err(ProviderError::new(
                FailureClass::Permanent,
                "InvalidParameterValue: Invalid availability zone: [sim-z]"
            )),
            Err(ProviderError::new(
                FailureClass::Permanent,
                "InvalidInstanceType: The instance type 'x9.huge' does not exist in this cloud"
            )),
        ]
    );
    assert_eq!(cloud.ledger(), []);
}

#[tokio::test]
async fn a_failure_rate_of_one_fails_every_launch_transiently() {
    let cloud = sim(SimConfig {
        failure_rate: 1.0,
        ..SimConfig::default()
    });
    let results = cloud
        .launch((0..10).map(|m| request(m, "sim-a")).collect())
        .await;
    let expected = ProviderError::new(
        FailureClass::Transient,
        "InternalError: simulated transient failure",
    );
    assert_eq!(results, vec![Err(expected); 10]);
    assert_eq!(cloud.ledger(), []);
    assert!(matches!(
        cloud.set_failure_rate(1.5),
        Err(SimError::FailureRate(_))
    ));
}

#[tokio::test]
async fn a_missing_image_fails_permanently() {
    let cloud = sim(SimConfig::default());
    let mut missing = request(0, "sim-a");
    missing.requirements.image_id = Some("ami-missing-0123".to_string());
    let mut present = request(1, "sim-a");
    present.requirements.image_id = Some("ami-0abc".to_string());
    let results = cloud.launch(vec![missing, present]).await;
    assert_eq!(
        results[0],
        Err(ProviderError::new(
            FailureClass::Permanent,
            "InvalidAMIID.NotFound: The image id '[ami-missing-0123]' does not exist"
        ))
    );
    assert!(results[1].is_ok());
}

#[tokio::test]
async fn the_checks_come_in_ec2s_order() {
    // An unknown type in a zone in outage fails for the zone; a missing
    // image with an unknown type fails for the type.
    let cloud = sim(SimConfig {
        outages: vec!["sim-b".to_string()],
        failure_rate: 1.0,
        ..SimConfig::default()
    });
    let mut in_outage = request(0, "sim-b");
    in_outage.instance_type = "x9.huge".to_string();
    let mut unknown_type = request(1, "sim-a");
    unknown_type.instance_type = "x9.huge".to_string();
    unknown_type.requirements.image_id = Some("ami-missing".to_string());
    let mut missing_image = request(2, "sim-a");
    missing_image.requirements.image_id = Some("ami-missing".to_string());
    let classes: Vec<FailureClass> = cloud
        .launch(vec![
            in_outage,
            unknown_type,
            missing_image,
            request(3, "sim-a"),
        ])
        .await
        .into_iter()
        .map(|r| r.unwrap_err().class)
        .collect();
    assert_eq!(
        classes,
        [
            FailureClass::ZoneSpecific,
            FailureClass::Permanent,
            FailureClass::Permanent,
            FailureClass::Transient,
        ]
    );
}

#[tokio::test]
async fn the_agent_checks_in_with_the_password_given_at_launch() {
    let cloud = sim(SimConfig::default());
    let (link, mut heard) = recorder(0);
    cloud.attach(link);
    let id = ok_id(&cloud.launch(vec![request(7, "sim-a")]).await[0]);
    assert_eq!(
        hear(&mut heard).await,
        Heard::Changed(id.clone(), InstanceState::Running)
    );
    assert_eq!(
        hear(&mut heard).await,
        Heard::Agent(MachineId::new(7), "otp-7".to_string())
    );
    eventually(|| cloud.ledger()[0].agent == AgentState::Connected).await;
    assert_eq!(cloud.ledger()[0].state, InstanceState::Running);
    assert_eq!(cloud.backlog(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_start_and_agent_delays_are_honoured() {
    let cloud = sim(SimConfig {
        start_delay_ms: 5000,
        agent_delay_ms: 3000,
        ..SimConfig::default()
    });
    let (link, mut heard) = recorder(0);
    cloud.attach(link);
    let t0 = Instant::now();
    let id = ok_id(&cloud.launch(vec![request(0, "sim-a")]).await[0]);
    assert_eq!(
        hear(&mut heard).await,
        Heard::Changed(id, InstanceState::Running)
    );
    assert_eq!(t0.elapsed(), Duration::from_millis(5000));
    assert_eq!(
        hear(&mut heard).await,
        Heard::Agent(MachineId::new(0), "otp-0".to_string())
    );
    assert_eq!(t0.elapsed(), Duration::from_millis(8000));
}

#[tokio::test(start_paused = true)]
async fn an_instance_stays_pending_until_its_start_delay_has_passed() {
    let cloud = sim(SimConfig {
        start_delay_ms: 5000,
        ..SimConfig::default()
    });
    cloud.launch(vec![request(0, "sim-a")]).await;
    tokio::time::sleep(Duration::from_millis(4999)).await;
    assert_eq!(cloud.ledger()[0].state, InstanceState::Pending);
    tokio::time::sleep(Duration::from_millis(1)).await;
    eventually(|| cloud.ledger()[0].state == InstanceState::Running).await;
}

#[tokio::test(start_paused = true)]
async fn a_refused_agent_tries_again_then_gives_up() {
    let cloud = sim(SimConfig::default());
    let (link, mut heard) = recorder(u32::MAX);
    cloud.attach(link);
    let t0 = Instant::now();
    let id = ok_id(&cloud.launch(vec![request(0, "sim-a")]).await[0]);
    assert_eq!(
        hear(&mut heard).await,
        Heard::Changed(id, InstanceState::Running)
    );
    let check_in = Heard::Agent(MachineId::new(0), "otp-0".to_string());
    for attempt in 0..AGENT_ATTEMPTS {
        assert_eq!(hear(&mut heard).await, check_in);
        assert_eq!(t0.elapsed(), AGENT_RETRY_DELAY * attempt);
    }
    eventually(|| cloud.ledger()[0].agent == AgentState::Refused).await;
    tokio::time::sleep(AGENT_RETRY_DELAY * 10).await;
    assert!(heard.try_recv().is_err());
}

#[tokio::test(start_paused = true)]
async fn an_agent_refused_once_checks_in_on_its_next_attempt() {
    let cloud = sim(SimConfig::default());
    let (link, mut heard) = recorder(1);
    cloud.attach(link);
    cloud.launch(vec![request(0, "sim-a")]).await;
    hear(&mut heard).await;
    hear(&mut heard).await;
    hear(&mut heard).await;
    eventually(|| cloud.ledger()[0].agent == AgentState::Connected).await;
}

#[tokio::test]
async fn changes_before_a_link_is_attached_are_kept_for_it() {
    let cloud = sim(SimConfig::default());
    let id = ok_id(&cloud.launch(vec![request(0, "sim-a")]).await[0]);
    // The instance runs whether anyone listens or not.
    eventually(|| cloud.ledger()[0].state == InstanceState::Running).await;
    assert_eq!(cloud.ledger()[0].agent, AgentState::Waiting);

    let (link, mut heard) = recorder(0);
    cloud.attach(link);
    assert_eq!(
        hear(&mut heard).await,
        Heard::Changed(id, InstanceState::Running)
    );
    assert_eq!(
        hear(&mut heard).await,
        Heard::Agent(MachineId::new(0), "otp-0".to_string())
    );
}

#[tokio::test]
async fn terminating_is_idempotent_and_reported_once() {
    let cloud = sim(SimConfig::default());
    let (link, mut heard) = recorder(0);
    cloud.attach(link.clone());
    let id = ok_id(&cloud.launch(vec![request(0, "sim-a")]).await[0]);
    hear(&mut heard).await;
    hear(&mut heard).await;

    let results = cloud
        .terminate(vec![id.clone(), id.clone(), "i-unknown".to_string()])
        .await;
    assert_eq!(results, [Ok(()), Ok(()), Ok(())]);
    assert_eq!(cloud.terminate(vec![id.clone()]).await, [Ok(())]);
    assert_eq!(
        hear(&mut heard).await,
        Heard::Changed(id.clone(), InstanceState::Terminated)
    );
    eventually(|| cloud.backlog() == 0).await;
    assert!(heard.try_recv().is_err());
    assert_eq!(cloud.ledger()[0].state, InstanceState::Terminated);
    assert_eq!(cloud.instances(CONTROLLER).await.unwrap(), []);

    // The termination is reported as later than the start, even within
    // the same millisecond.
    let changes = link.changes.lock().unwrap().clone();
    assert_eq!(changes.len(), 2);
    assert!(changes[1].at_ms > changes[0].at_ms, "{changes:?}");
}

#[tokio::test(start_paused = true)]
async fn a_terminated_pending_instance_never_runs_nor_checks_in() {
    let cloud = sim(SimConfig {
        start_delay_ms: 1000,
        ..SimConfig::default()
    });
    let (link, mut heard) = recorder(0);
    cloud.attach(link);
    let id = ok_id(&cloud.launch(vec![request(0, "sim-a")]).await[0]);
    cloud.terminate(vec![id.clone()]).await;
    assert_eq!(
        hear(&mut heard).await,
        Heard::Changed(id, InstanceState::Terminated)
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(cloud.backlog(), 0);
    assert!(heard.try_recv().is_err());
    assert_eq!(cloud.ledger()[0].state, InstanceState::Terminated);
}

#[tokio::test]
async fn instances_lists_this_controllers_live_instances() {
    let cloud = sim(SimConfig::default());
    let results = cloud
        .launch(vec![request(0, "sim-a"), request(1, "sim-b")])
        .await;
    let mut other = request(2, "sim-c");
    other
        .tags
        .insert(tags::CONTROLLER.to_string(), "controller-2".to_string());
    cloud.launch(vec![other]).await;
    let stray = cloud
        .create_untracked_instance(machine_tags("9"), "sim-c", "t3.micro")
        .await
        .unwrap();
    cloud.terminate(vec![ok_id(&results[0])]).await;

    let ids: Vec<String> = cloud
        .instances(CONTROLLER)
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(ids, [ok_id(&results[1]), stray.id.clone()]);
    assert_eq!(stray.machine, Some(MachineId::new(9)));
    assert_eq!(stray.state, InstanceState::Running);
}

#[tokio::test]
async fn the_listing_a_reconciliation_compares_and_the_instances_named_are_the_listed_ones() {
    let cloud = sim(SimConfig::default());
    let results = cloud
        .launch(vec![
            request(0, "sim-a"),
            request(1, "sim-b"),
            request(3, "sim-a"),
        ])
        .await;
    let mut other = request(2, "sim-c");
    other
        .tags
        .insert(tags::CONTROLLER.to_string(), "controller-2".to_string());
    let theirs = ok_id(&cloud.launch(vec![other]).await[0]);
    cloud.terminate(vec![ok_id(&results[0])]).await;

    let whole = cloud.instances(CONTROLLER).await.unwrap();
    assert_eq!(whole.len(), 2);
    let listed = cloud.listed_instances(CONTROLLER).await.unwrap();
    let expected: Vec<ListedInstance> = whole.iter().map(ListedInstance::of).collect();
    assert_eq!(listed, expected);
    assert_eq!(listed[0].address_list(), whole[0].addresses);

    // Only this controller's listed instances, whole, whatever else is
    // named.
    let named = cloud
        .instances_named(
            CONTROLLER,
            vec![
                ok_id(&results[2]),
                ok_id(&results[0]),
                theirs,
                "i-nonesuch".to_string(),
            ],
        )
        .await
        .unwrap();
    assert_eq!(named, [whole[1].clone()]);
}

#[tokio::test]
async fn an_untracked_instance_runs_without_an_agent_and_is_reported() {
    let cloud = sim(SimConfig::default());
    let (link, mut heard) = recorder(0);
    cloud.attach(link);
    let stray = cloud
        .create_untracked_instance(machine_tags("3"), "sim-b", "t3.micro")
        .await
        .unwrap();
    assert_eq!(
        hear(&mut heard).await,
        Heard::Changed(stray.id.clone(), InstanceState::Running)
    );
    let entry = cloud.ledger().remove(0);
    assert_eq!(
        (entry.agent, entry.client_token, &*entry.zone),
        (AgentState::None, None, "sim-b")
    );
    assert!(matches!(
        cloud
            .create_untracked_instance(BTreeMap::new(), "sim-z", "t3.micro")
            .await,
        Err(SimError::UnknownZone { .. })
    ));
    assert!(matches!(
        cloud
            .create_untracked_instance(BTreeMap::new(), "sim-a", "x9.huge")
            .await,
        Err(SimError::UnknownInstanceType(_))
    ));
}

#[tokio::test]
async fn an_instance_stopped_behind_berths_back_is_reported_terminated() {
    let cloud = sim(SimConfig::default());
    let (link, mut heard) = recorder(0);
    cloud.attach(link);
    let id = ok_id(&cloud.launch(vec![request(0, "sim-a")]).await[0]);
    hear(&mut heard).await;
    hear(&mut heard).await;
    cloud.stop_behind_back(&id).await.unwrap();
    assert_eq!(
        hear(&mut heard).await,
        Heard::Changed(id, InstanceState::Terminated)
    );
    assert_eq!(cloud.instances(CONTROLLER).await.unwrap(), []);
    let err = cloud.stop_behind_back("i-nope").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "no instance \"i-nope\" in the simulated cloud"
    );
}

#[tokio::test(start_paused = true)]
async fn containers_need_a_running_host() {
    let cloud = sim(SimConfig {
        start_delay_ms: 1000,
        capacity: BTreeMap::from([("sim-b".to_string(), 1)]),
        ..SimConfig::default()
    });
    let (link, mut heard) = recorder(0);
    cloud.attach(link);
    let host = ok_id(&cloud.launch(vec![request(1, "sim-b")]).await[0]);

    let early = cloud.launch(vec![container(1, 0, &host)]).await;
    assert_eq!(
        early[0],
        Err(ProviderError::new(
            FailureClass::Transient,
            format!("host instance {host} is not running yet (pending)")
        ))
    );
    let unknown = cloud.launch(vec![container(2, 0, "i-0000")]).await;
    assert_eq!(
        unknown[0],
        Err(ProviderError::new(
            FailureClass::Transient,
            "host instance i-0000 is not running yet: the cloud does not know it"
        ))
    );

    assert_eq!(
        hear(&mut heard).await,
        Heard::Changed(host.clone(), InstanceState::Running)
    );
    let results = cloud
        .launch(vec![container(1, 0, &host), container(1, 1, &host)])
        .await;
    let first = results[0].clone().unwrap();
    assert_eq!(
        first,
        Instance {
            id: format!("{host}-lxd-0"),
            machine: Some(MachineId::lxd_container(1, 0)),
            zone: "sim-b".to_string(),
            instance_type: String::new(),
            state: InstanceState::Pending,
            hardware: t3_large("sim-b"),
            addresses: addresses_of(&first.id),
        }
    );
    assert_ne!(
        addresses_of(&first.id),
        addresses_of(&format!("{host}-lxd-1"))
    );
    assert_eq!(ok_id(&results[1]), format!("{host}-lxd-1"));
    assert_eq!(
        cloud.ledger()[1].host_instance.as_deref(),
        Some(host.as_str())
    );

    // Containers take no capacity; they cannot nest.
    let nested = cloud.launch(vec![container(1, 2, &first.id)]).await;
    assert_eq!(
        nested[0].as_ref().unwrap_err().class,
        FailureClass::Permanent
    );

    // Terminating the host terminates its containers, first.
    cloud.terminate(vec![host.clone()]).await;
    let mut terminated = Vec::new();
    while terminated.len() < 3 {
        if let Heard::Changed(id, InstanceState::Terminated) = hear(&mut heard).await {
            terminated.push(id);
        }
    }
    assert_eq!(
        terminated,
        [
            format!("{host}-lxd-0"),
            format!("{host}-lxd-1"),
            host.clone()
        ]
    );
    let late = cloud.launch(vec![container(1, 3, &host)]).await;
    assert_eq!(
        late[0],
        Err(ProviderError::new(
            FailureClass::Permanent,
            format!("host instance {host} is terminated: it will not run again")
        ))
    );
}

#[tokio::test]
async fn the_ledger_survives_reopening_the_same_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let config = SimConfig {
        seed: 5,
        ..SimConfig::default()
    };
    let cloud = SimProvider::open(config.clone(), Some(path.clone())).unwrap();
    let first = cloud
        .launch(vec![
            request(0, "sim-a"),
            request(1, "sim-b"),
            request(2, "sim-c"),
        ])
        .await;
    eventually(|| {
        cloud
            .ledger()
            .iter()
            .all(|e| e.state == InstanceState::Running)
    })
    .await;
    cloud.terminate(vec![ok_id(&first[1])]).await;
    let before = cloud.ledger();
    let listed = cloud.instances(CONTROLLER).await.unwrap();
    drop(cloud);

    let reopened = SimProvider::open(config.clone(), Some(path)).unwrap();
    assert_eq!(reopened.ledger(), before);
    assert_eq!(reopened.instances(CONTROLLER).await.unwrap(), listed);
    // Tokens are remembered, and the generator goes on where it stopped.
    let again = reopened.launch(vec![request(0, "sim-b")]).await;
    assert_eq!(ok_id(&again[0]), ok_id(&first[0]));
    assert_eq!(again[0].as_ref().unwrap().state, InstanceState::Running);
    let next = reopened.launch(vec![request(3, "sim-a")]).await;

    let uninterrupted = sim(config);
    uninterrupted
        .launch(vec![
            request(0, "sim-a"),
            request(1, "sim-b"),
            request(2, "sim-c"),
        ])
        .await;
    let expected = uninterrupted.launch(vec![request(3, "sim-a")]).await;
    assert_eq!(ok_id(&next[0]), ok_id(&expected[0]));
}

#[tokio::test(start_paused = true)]
async fn after_a_restart_pending_instances_start_and_agents_check_in() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let config = SimConfig {
        start_delay_ms: 1000,
        ..SimConfig::default()
    };
    let cloud = SimProvider::open(config.clone(), Some(path.clone())).unwrap();
    let id = ok_id(&cloud.launch(vec![request(0, "sim-a")]).await[0]);
    drop(cloud);

    let reopened = SimProvider::open(config, Some(path)).unwrap();
    // The ledger is read behind the open, off the runtime, whose paused
    // clock would otherwise run ahead to the listener's time-out.
    assert_eq!(reopened.ledger().len(), 1);
    let (link, mut heard) = recorder(0);
    reopened.attach(link);
    assert_eq!(
        hear(&mut heard).await,
        Heard::Changed(id, InstanceState::Running)
    );
    assert_eq!(
        hear(&mut heard).await,
        Heard::Agent(MachineId::new(0), "otp-0".to_string())
    );
}

#[tokio::test]
async fn a_cloud_dropped_with_work_in_flight_lets_go_of_its_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    for round in 0..5 {
        let cloud = SimProvider::open(SimConfig::default(), Some(path.clone())).unwrap();
        let (link, _heard) = recorder(0);
        cloud.attach(link);
        let results = cloud
            .launch((0..50).map(|m| request(round * 100 + m, "sim-a")).collect())
            .await;
        assert!(results.iter().all(Result::is_ok));
        tokio::task::yield_now().await;
        drop(cloud);
    }
    let cloud = SimProvider::open(SimConfig::default(), Some(path)).unwrap();
    assert_eq!(cloud.ledger().len(), 5 * 50);
}

#[tokio::test]
async fn a_ledger_file_whose_instances_cannot_be_read_fails_every_call_that_needs_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let cloud = SimProvider::open(SimConfig::default(), Some(path.clone())).unwrap();
    assert!(cloud.launch(vec![request(0, "sim-a")]).await[0].is_ok());
    drop(cloud);
    edit_ledger_file(&path, "UPDATE sim_instances SET state = 'exploded'");

    // The file opens; its instances are read behind, and found unreadable.
    let cloud = SimProvider::open(SimConfig::default(), Some(path.clone())).unwrap();
    let expected = format!(
        "cannot read the simulated cloud's ledger {}: ",
        path.display()
    );
    let err = cloud.instances(CONTROLLER).await.unwrap_err();
    assert!(err.message.starts_with(&expected), "{err:?}");
    assert_eq!(err.class, FailureClass::Transient);
    let launched = cloud.launch(vec![request(1, "sim-a")]).await;
    let err = launched[0].as_ref().unwrap_err();
    assert!(err.message.starts_with(&expected), "{err:?}");
    assert_eq!(cloud.ledger(), []);
}

#[tokio::test]
async fn a_ledger_file_with_two_instances_of_one_id_is_refused_with_the_id() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let cloud = SimProvider::open(SimConfig::default(), Some(path.clone())).unwrap();
    let launched = cloud
        .launch(vec![request(0, "sim-a"), request(1, "sim-a")])
        .await;
    let first = ok_id(&launched[0]);
    assert!(launched[1].is_ok());
    drop(cloud);
    // The file has no index of its own that refuses a second instance
    // with the same id.
    edit_ledger_file(
        &path,
        &format!("UPDATE sim_instances SET id = '{first}' WHERE seq = 1"),
    );

    let cloud = SimProvider::open(SimConfig::default(), Some(path.clone())).unwrap();
    let err = cloud.instances(CONTROLLER).await.unwrap_err();
    assert_eq!(
        err.message,
        format!(
            "cannot read the simulated cloud's ledger {}: instance id {first} is held by two instances",
            path.display()
        )
    );
    assert_eq!(cloud.ledger(), []);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_backed_cloud_works_on_a_multi_threaded_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let cloud =
        SimProvider::open(SimConfig::default(), Some(dir.path().join("ledger.sqlite"))).unwrap();
    let (link, mut heard) = recorder(0);
    cloud.attach(link);
    let results = cloud
        .launch((0..3).map(|m| request(m, "sim-a")).collect())
        .await;
    assert!(results.iter().all(Result::is_ok));
    let mut agents = Vec::new();
    while agents.len() < 3 {
        if let Heard::Agent(machine, _) = hear(&mut heard).await {
            agents.push(machine);
        }
    }
    agents.sort();
    assert_eq!(
        agents,
        [MachineId::new(0), MachineId::new(1), MachineId::new(2)]
    );
}

#[test]
fn the_cloud_runs_under_actix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    actix::System::new().block_on(async move {
        let cloud = SimProvider::open(SimConfig::default(), Some(path)).unwrap();
        let (link, mut heard) = recorder(0);
        cloud.attach(link);
        let id = ok_id(&cloud.launch(vec![request(0, "sim-a")]).await[0]);
        assert_eq!(
            hear(&mut heard).await,
            Heard::Changed(id, InstanceState::Running)
        );
        assert_eq!(
            hear(&mut heard).await,
            Heard::Agent(MachineId::new(0), "otp-0".to_string())
        );
    });
}

#[test]
fn the_cloud_works_without_a_runtime_of_its_callers() {
    let cloud = Arc::new(sim(SimConfig::default()));
    let (link, mut heard) = recorder(0);
    cloud.attach(link);
    // A runtime on another thread drives the calls; the cloud's own clock
    // started on a thread of its own at attach.
    let caller = Arc::clone(&cloud);
    let results = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(caller.launch(vec![request(0, "sim-a")]))
    })
    .join()
    .unwrap();
    assert_eq!(
        heard.blocking_recv(),
        Some(Heard::Changed(ok_id(&results[0]), InstanceState::Running))
    );
    assert_eq!(
        heard.blocking_recv(),
        Some(Heard::Agent(MachineId::new(0), "otp-0".to_string()))
    );
}

#[test]
fn opening_checks_the_settings() {
    let err = SimProvider::open(
        SimConfig {
            failure_rate: 2.0,
            ..SimConfig::default()
        },
        None,
    )
    .err()
    .unwrap();
    assert_eq!(
        err.to_string(),
        "invalid [provider.sim] settings: failure_rate is 2: expected a number between 0 and 1"
    );
}

#[test]
fn a_catalogue_file_replaces_the_embedded_catalogue() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("types.csv");
    std::fs::write(
        &path,
        "instance_type,arch,vcpus,cores,cpu_power,mem_mib,clock_ghz,burstable,\
         current_generation,gpus,bare_metal,instance_storage_gb,hourly_usd\n\
         sim.small,amd64,1,1,100,2048,2.5,false,true,0,false,0,0.01\n\
         sim.large,amd64,4,2,400,8192,2.5,false,true,0,false,0,0.04\n",
    )
    .unwrap();
    let cloud = sim(SimConfig {
        catalogue: Some(path.clone()),
        ..SimConfig::default()
    });
    let names: Vec<&str> = cloud
        .catalogue()
        .types()
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(names, ["sim.small", "sim.large"]);
    assert!(cloud.offers("sim-a", "sim.large"));
    assert!(!cloud.offers("sim-a", "t3.large"));
    assert!(!cloud.offers("sim-z", "sim.large"));

    let missing = dir.path().join("none.csv");
    let err = SimProvider::open(
        SimConfig {
            catalogue: Some(missing.clone()),
            ..SimConfig::default()
        },
        None,
    )
    .err()
    .unwrap();
    assert!(matches!(err, SimError::CatalogueRead { .. }), "{err}");

    std::fs::write(&path, "instance_type\nx\n").unwrap();
    let err = SimProvider::open(
        SimConfig {
            catalogue: Some(path.clone()),
            ..SimConfig::default()
        },
        None,
    )
    .err()
    .unwrap();
    assert_eq!(
        err.to_string(),
        format!(
            "invalid catalogue {}: line 1: missing column \"arch\"; expected the columns {}",
            path.display(),
            crate::domain::instance_types::CSV_COLUMNS.join(",")
        )
    );
}

#[test]
fn administrative_calls_name_a_configured_zone() {
    let cloud = sim(SimConfig::default());
    let err = cloud.set_outage("sim-z", true).unwrap_err();
    assert_eq!(
        err.to_string(),
        "no zone \"sim-z\" in the simulated cloud: expected one of sim-a, sim-b, sim-c"
    );
    assert!(cloud.set_capacity("sim-z", Some(1)).is_err());
}

#[test]
fn the_cloud_describes_itself() {
    let cloud = sim(SimConfig::default());
    assert_eq!(cloud.name(), "sim");
    // The controller names the cloud before it has opened it.
    assert_eq!(cloud.name(), crate::config::ProviderKind::Sim.name());
    assert_eq!(cloud.max_launch_batch(), MAX_LAUNCH_BATCH);
    let like_ec2 = sim(SimConfig {
        launch_batch: 5,
        ..SimConfig::default()
    });
    assert_eq!(like_ec2.max_launch_batch(), 5);
    for wrong in [0, MAX_LAUNCH_BATCH + 1] {
        let config = SimConfig {
            launch_batch: wrong,
            ..SimConfig::default()
        };
        assert_eq!(
            config.validate(),
            Err(format!(
                "launch_batch is {wrong}: expected 1 to {MAX_LAUNCH_BATCH}"
            ))
        );
    }
    assert!(cloud.supports_containers());
    assert_eq!(
        cloud.catalogue().len(),
        Catalogue::embedded().unwrap().len()
    );
    let unsupported: Vec<Key> = Key::ALL
        .into_iter()
        .filter(|k| !cloud.supported_constraints().contains(k))
        .collect();
    assert_eq!(unsupported, [Key::VirtType, Key::Spaces, Key::InstanceRole]);
}

#[tokio::test]
async fn a_zone_set_down_stops_what_runs_there_and_refuses_launches() {
    let cloud = sim(SimConfig::default());
    let (link, mut heard) = recorder(0);
    cloud.attach(link);
    let in_b = ok_id(&cloud.launch(vec![request(1, "sim-b")]).await[0]);
    let in_a = ok_id(&cloud.launch(vec![request(2, "sim-a")]).await[0]);
    eventually(|| {
        cloud
            .ledger()
            .iter()
            .all(|e| e.agent == AgentState::Connected)
    })
    .await;
    let faults = FaultSet {
        zones_down: ["sim-b".to_string()].into(),
        ..FaultSet::default()
    };
    assert_eq!(cloud.set_faults(faults.clone()).await.unwrap(), faults);
    assert_eq!(cloud.faults(), faults);
    loop {
        if hear(&mut heard).await == Heard::Changed(in_b.clone(), InstanceState::Stopped) {
            break;
        }
    }
    let states: BTreeMap<String, InstanceState> = cloud
        .ledger()
        .into_iter()
        .map(|e| (e.id, e.state))
        .collect();
    assert_eq!(states[&in_b], InstanceState::Stopped);
    assert_eq!(states[&in_a], InstanceState::Running);
    let zones = cloud.zones().await.unwrap();
    assert!(!zones.iter().find(|z| z.name == "sim-b").unwrap().available);
    let refused = cloud.launch(vec![request(3, "sim-b")]).await;
    assert_eq!(
        refused[0].as_ref().unwrap_err().class,
        FailureClass::ZoneSpecific
    );
    // Cleared, the zone takes launches again; what stopped stays stopped.
    cloud.set_faults(FaultSet::default()).await.unwrap();
    assert!(cloud.launch(vec![request(3, "sim-b")]).await[0].is_ok());
    assert_eq!(cloud.ledger()[0].state, InstanceState::Stopped);
}

#[tokio::test]
async fn a_fault_set_that_does_not_validate_changes_nothing() {
    let cloud = sim(SimConfig::default());
    let before = FaultSet {
        failure_rate: 0.5,
        ..FaultSet::default()
    };
    cloud.set_faults(before.clone()).await.unwrap();
    let bad = [
        FaultSet {
            failure_rate: 1.5,
            ..FaultSet::default()
        },
        FaultSet {
            zones_down: ["sim-z".to_string()].into(),
            hang: true,
            ..FaultSet::default()
        },
        FaultSet {
            throttle: Some(Throttle {
                burst: 0,
                per_second: 1.0,
            }),
            ..FaultSet::default()
        },
    ];
    for faults in bad {
        let err = cloud.set_faults(faults).await.unwrap_err();
        assert!(matches!(err, SimError::Faults(_)), "{err}");
        assert_eq!(cloud.faults(), before);
    }
    // Not hanging: this answers.
    assert_eq!(cloud.zones().await.unwrap().len(), 3);
}

#[tokio::test]
async fn the_configurations_faults_are_the_opening_set_and_clearing_ends_them() {
    let cloud = sim(SimConfig {
        outages: vec!["sim-c".into()],
        failure_rate: 1.0,
        ..SimConfig::default()
    });
    assert_eq!(
        cloud.faults().zones_down,
        ["sim-c".to_string()].into_iter().collect()
    );
    assert_eq!(cloud.faults().failure_rate, 1.0);
    let failed = cloud.launch(vec![request(0, "sim-a")]).await;
    assert_eq!(
        failed[0].as_ref().unwrap_err().class,
        FailureClass::Transient
    );
    cloud.set_faults(FaultSet::default()).await.unwrap();
    assert!(cloud.faults().is_healthy());
    assert!(cloud.launch(vec![request(0, "sim-a")]).await[0].is_ok());
}

#[tokio::test]
async fn throttled_calls_are_refused_as_request_limit_exceeded_until_the_bucket_refills() {
    let cloud = sim(SimConfig::default());
    cloud
        .set_faults(FaultSet {
            throttle: Some(Throttle {
                burst: 2,
                per_second: 20.0,
            }),
            ..FaultSet::default()
        })
        .await
        .unwrap();
    assert!(cloud.zones().await.is_ok());
    assert!(cloud.instances(CONTROLLER).await.is_ok());
    let refused = cloud.launch(vec![request(0, "sim-a")]).await;
    let error = refused[0].as_ref().unwrap_err();
    assert_eq!(error.class, FailureClass::Transient);
    assert!(error.message.contains("RequestLimitExceeded"), "{error}");
    assert_eq!(
        cloud.call_counts(),
        CallCounts {
            admitted: 2,
            refused: 1
        }
    );
    // A refused launch launched nothing.
    assert!(cloud.ledger().is_empty());
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert!(cloud.launch(vec![request(0, "sim-a")]).await[0].is_ok());
}

#[tokio::test]
async fn hanging_calls_answer_once_the_hang_is_cleared() {
    let cloud = Arc::new(sim(SimConfig::default()));
    cloud
        .set_faults(FaultSet {
            hang: true,
            ..FaultSet::default()
        })
        .await
        .unwrap();
    let timed_out = tokio::time::timeout(Duration::from_millis(50), cloud.zones()).await;
    assert!(timed_out.is_err(), "a hanging call answered");
    let waiting = tokio::spawn({
        let cloud = cloud.clone();
        async move { cloud.launch(vec![request(0, "sim-a")]).await }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!waiting.is_finished());
    cloud.set_faults(FaultSet::default()).await.unwrap();
    let launched = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the call answered")
        .unwrap();
    assert!(launched[0].is_ok());
}

#[tokio::test]
async fn silent_agents_never_check_in() {
    let cloud = sim(SimConfig::default());
    let (link, mut heard) = recorder(0);
    cloud.attach(link);
    cloud
        .set_faults(FaultSet {
            silent_agents: 1.0,
            ..FaultSet::default()
        })
        .await
        .unwrap();
    let silent = ok_id(&cloud.launch(vec![request(1, "sim-a")]).await[0]);
    cloud.set_faults(FaultSet::default()).await.unwrap();
    let talking = ok_id(&cloud.launch(vec![request(2, "sim-a")]).await[0]);
    let mut agents = Vec::new();
    while agents.is_empty() {
        if let Heard::Agent(machine, _) = hear(&mut heard).await {
            agents.push(machine);
        }
    }
    assert_eq!(agents, [MachineId::new(2)]);
    eventually(|| cloud.ledger()[1].agent == AgentState::Connected).await;
    let ledger = cloud.ledger();
    assert_eq!(
        (ledger[0].id.clone(), ledger[0].agent),
        (silent, AgentState::Silent)
    );
    assert_eq!(ledger[0].state, InstanceState::Running);
    assert_eq!(ledger[1].id, talking);
}

#[tokio::test]
async fn the_ids_a_seed_gives_do_not_depend_on_silent_agents() {
    let ids = |silent: f64| async move {
        let cloud = sim(SimConfig::default());
        cloud
            .set_faults(FaultSet {
                silent_agents: silent,
                ..FaultSet::default()
            })
            .await
            .unwrap();
        let results = cloud
            .launch((0..5).map(|m| request(m, "sim-a")).collect())
            .await;
        results.iter().map(ok_id).collect::<Vec<_>>()
    };
    assert_eq!(ids(0.0).await, ids(0.5).await);
}

#[tokio::test]
async fn a_change_waits_only_for_the_check_ins_of_its_own_instance() {
    let (link, mut rx) = recorder(0);
    let link: Arc<dyn ControllerLink> = link;
    let events = Events::new();
    let check_in = |id: &str, machine: u64| Outgoing::AgentCheckIn {
        id: id.to_string(),
        machine: MachineId::new(machine),
        password: Secret::new(format!("pw-{id}")),
        attempt: 1,
    };
    let changed = |id: &str| {
        Outgoing::Changed(InstanceStateChange {
            instance_id: id.to_string(),
            state: InstanceState::Running,
            at_ms: 1,
        })
    };
    let batch = vec![
        check_in("i-a", 1),
        changed("i-b"),
        check_in("i-c", 3),
        changed("i-a"),
        check_in("i-d", 4),
    ];
    let outcomes = deliver(&events, &link, batch).await;
    assert_eq!(outcomes.len(), 3);
    let mut heard = Vec::new();
    while let Ok(h) = rx.try_recv() {
        heard.push(h);
    }
    let agent = |machine: u64, id: &str| Heard::Agent(MachineId::new(machine), format!("pw-{id}"));
    assert_eq!(
        heard,
        vec![
            // Another instance's change does not wait for i-a's agent...
            Heard::Changed("i-b".into(), InstanceState::Running),
            // ... i-a's own change does, and i-c's agent comes with it.
            agent(1, "i-a"),
            agent(3, "i-c"),
            Heard::Changed("i-a".into(), InstanceState::Running),
            agent(4, "i-d"),
        ]
    );
}

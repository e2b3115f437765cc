//! The EC2 provider through the real engine, against moto's EC2 server
//! (see [`crate::support::moto`]).
//!
//! Nothing boots in moto, so no agent checks in by itself: the tests read
//! each instance's user data back from moto (DescribeInstanceAttribute),
//! take the one-time password from it, and check in with it as the agent
//! would. The bootstrap timeout is long, so nothing is relaunched meanwhile.
//!
//! The region is ca-central-1, whose zone ca-central-1d (in moto's data,
//! as in AWS's) does not offer t3a.medium, the cheapest type for `mem=4G`
//! elsewhere: so the cheapest type differs by zone.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_ec2::types::{
    Filter, InstanceType as Ec2InstanceType, LocationType, ResourceType, Tag, TagSpecification,
};
use aws_sdk_ec2::Client;
use berth::charms::resolve;
use berth::contracts::provider::{tags, Provider};
use berth::contracts::secrets::Secret;
use berth::domain::constraints::{Arch, Constraints};
use berth::domain::instance_types::Catalogue;
use berth::domain::machine::MachineState;
use berth::domain::names::MachineId;
use berth::engine::broker::RateLimits;
use berth::engine::config::ProvisionerConfig;
use berth::engine::Engine;
use berth::providers::ec2::{Ec2Config, Ec2Provider};
use berth::status::snapshot::StatusSnapshot;
use berth::store::applications::DeployRequest;
use berth::store::machines::AddMachines;
use berth::store::Store;

use crate::support::app::{spawn_app_with, Backend, Cloud, Options, Site, TestApp};
use crate::support::moto_api::{
    self, any_image, live, moto_client, moto_instances, sdk_config, MotoInstance, REGION,
};
use crate::support::{eventually, moto, until_within};

/// What instances are told to reach: never contacted (the tests check
/// agents in themselves), and not loopback, which EC2 launches refuse.
const CONTROLLER_URL: &str = "http://controller.invalid:17070";
/// Long enough for anything these tests wait for; a test that needs it
/// has failed.
const PATIENCE: Duration = Duration::from_secs(90);

fn provisioner() -> ProvisionerConfig {
    ProvisionerConfig {
        backoff_initial_ms: 20,
        backoff_max_ms: 200,
        call_timeout_s: 30,
        // No agent boots in moto: the tests check in for them.
        bootstrap_timeout_s: 3600,
        reconcile_interval_s: 0,
        ..ProvisionerConfig::default()
    }
}

async fn open_provider(client: &Client) -> Arc<Ec2Provider> {
    let table: toml::Table = format!(
        "region = \"{REGION}\"\nendpoint_url = \"{}\"\nimage_has_agent = true\n[images]\n\"ubuntu@24.04/amd64\" = \"{}\"\n",
        moto::endpoint(),
        any_image(client).await
    )
    .parse()
    .unwrap();
    let config = Ec2Config::from_table(&table).unwrap();
    Arc::new(
        Ec2Provider::open_with(config, &sdk_config().await)
            .await
            .expect("open the EC2 provider on moto"),
    )
}

/// An app with the engine over `provider`, with AWS's rate limits, on
/// `site` (an earlier app's) or a new SQLite one.
async fn spawn_ec2(provider: Arc<dyn Provider>, site: Option<Site>) -> TestApp {
    spawn_app_with(Options {
        site,
        cloud: Cloud::Given {
            provider,
            limits: RateLimits::ec2(),
        },
        engine: Some(provisioner()),
        controller_url: Some(CONTROLLER_URL.to_string()),
        ..Options::default()
    })
    .await
}

async fn deploy(store: &Store, name: &str, units: u32, constraints: &str) {
    store
        .deploy(DeployRequest {
            application: name.parse().unwrap(),
            charm: resolve(name).unwrap(),
            base: None,
            constraints: Constraints::parse(constraints).unwrap(),
            units,
            placement: Vec::new(),
            settings: BTreeMap::new(),
        })
        .await
        .unwrap();
}

fn all_in(count: usize, state: MachineState) -> impl Fn(&StatusSnapshot) -> bool {
    move |s| s.machines.len() == count && s.machines.iter().all(|m| m.state() == state)
}

/// Waits until moto's instances of `controller` satisfy `done`.
async fn until_moto(
    client: &Client,
    controller: &str,
    what: &str,
    done: impl Fn(&[MotoInstance]) -> bool,
) -> Vec<MotoInstance> {
    eventually(what, PATIENCE, || async {
        let instances = moto_instances(client, controller).await;
        if done(&instances) {
            Ok(instances)
        } else {
            Err(instances)
        }
    })
    .await
}

/// Checks in `machine`'s agent with the password from its instance's
/// user data, as `berth agent` would.
async fn check_in(client: &Client, engine: &Engine, machine: MachineId, instance: &str) {
    let password = moto_api::agent_password(client, machine, instance).await;
    engine
        .link()
        .agent_connect(machine, Secret::new(password))
        .await
        .unwrap_or_else(|e| panic!("machine {machine} checks in: {e}"));
}

async fn check_in_all(client: &Client, engine: &Engine, store: &Store) {
    let status = store.blocking(|s| s.status()).await.unwrap();
    for m in &status.machines {
        if m.state() == MachineState::AwaitingAgent {
            check_in(client, engine, m.id, m.instance_id().unwrap()).await;
        }
    }
}

/// Checks every waiting agent in, then waits until `count` machines are
/// started.
async fn check_in_until_started(
    client: &Client,
    engine: &Engine,
    store: &Store,
    count: usize,
) -> StatusSnapshot {
    check_in_all(client, engine, store).await;
    until_within(
        PATIENCE,
        store,
        &format!("{count} started"),
        all_in(count, MachineState::Started),
    )
    .await
}

/// The cheapest type for `mem=4G` (amd64, at least 1 vCPU) among the types
/// moto offers in each zone that berth's catalogue prices: worked out here
/// from the offerings, not by berth's choice.
async fn cheapest_4g_per_zone(client: &Client) -> BTreeMap<String, String> {
    let catalogue = Catalogue::embedded().unwrap();
    let mut offered: HashMap<String, Vec<String>> = HashMap::new();
    let mut pages = client
        .describe_instance_type_offerings()
        .location_type(LocationType::AvailabilityZone)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        for o in page.unwrap().instance_type_offerings() {
            offered
                .entry(o.location().unwrap().to_string())
                .or_default()
                .push(o.instance_type().unwrap().as_str().to_string());
        }
    }
    offered
        .into_iter()
        .map(|(zone, types)| {
            let best = types
                .iter()
                .filter_map(|t| catalogue.get(t))
                .filter(|t| t.arch == Arch::Amd64 && t.mem_mib >= 4096 && t.vcpus >= 1)
                .min_by_key(|t| (t.price, t.mem_mib, t.cpu_power, t.vcpus, t.name.clone()))
                .unwrap();
            (zone, best.name.clone())
        })
        .collect()
}

#[actix_web::test]
async fn containers_are_refused_on_ec2_before_anything_is_written() {
    let client = moto_client().await;
    let provider = open_provider(&client).await;
    let app = spawn_ec2(provider, None).await;
    let before = app.store().revision();
    for response in [
        app.add_machines(&serde_json::json!({"placement": "lxd"}))
            .await,
        app.deploy(&serde_json::json!({"charm": "wordpress", "to": "lxd:0"}))
            .await,
    ] {
        assert_eq!(response.status(), reqwest::StatusCode::BAD_REQUEST);
        let body: serde_json::Value = response.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.ends_with("provider \"ec2\" cannot start lxd containers"),
            "{message}"
        );
    }
    assert_eq!(app.store().revision(), before);
    assert!(app.store().machines().unwrap().is_empty());
}

#[actix_web::test]
async fn six_4g_units_over_three_zones_get_the_cheapest_type_each_zone_offers() {
    let client = moto_client().await;
    let provider = open_provider(&client).await;
    let app = spawn_ec2(provider, None).await;
    let (store, engine) = (app.store(), app.engine());
    let controller = store.model().unwrap().controller_uuid;

    deploy(store, "wordpress", 6, "mem=4G").await;
    let status = until_within(
        PATIENCE,
        store,
        "6 awaiting their agents",
        all_in(6, MachineState::AwaitingAgent),
    )
    .await;

    let expected = cheapest_4g_per_zone(&client).await;
    assert_eq!(expected.len(), 3);
    assert_ne!(
        expected.values().collect::<BTreeSet<_>>().len(),
        1,
        "the zones should differ in their cheapest type: {expected:?}"
    );
    let instances = moto_instances(&client, &controller).await;
    assert_eq!(instances.len(), 6, "{instances:#?}");
    let mut per_zone: BTreeMap<String, usize> = BTreeMap::new();
    for instance in &instances {
        *per_zone.entry(instance.zone.clone()).or_default() += 1;
        assert_eq!(
            Some(&instance.instance_type),
            expected.get(&instance.zone),
            "{instance:#?}"
        );
        let machine = status
            .machines
            .iter()
            .find(|m| m.instance_id() == Some(instance.id.as_str()))
            .expect("every instance is a machine's");
        let model = store.model().unwrap();
        let expected_tags = BTreeMap::from([
            (tags::CONTROLLER.to_string(), controller.clone()),
            (tags::MODEL.to_string(), model.uuid.clone()),
            (tags::MACHINE.to_string(), machine.id.to_string()),
            (
                tags::NAME.to_string(),
                format!("berth-{}-machine-{}", model.name, machine.id),
            ),
        ]);
        assert_eq!(instance.tags, expected_tags);
        assert_eq!(
            machine.instance_type.as_deref(),
            Some(instance.instance_type.as_str())
        );
        // Where the machine is, as EC2 reports it.
        assert!(!instance.addresses.is_empty(), "{instance:#?}");
        assert_eq!(machine.addresses, instance.addresses);
    }
    assert_eq!(
        per_zone.values().copied().collect::<Vec<_>>(),
        vec![2, 2, 2]
    );
    // The volumes carry berth's tags too.
    let volumes = client
        .describe_volumes()
        .filters(
            Filter::builder()
                .name(format!("tag:{}", tags::CONTROLLER))
                .values(&controller)
                .build(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(volumes.volumes().len(), 6);

    // The agents check in with the passwords from the user data.
    check_in_until_started(&client, engine, store, 6).await;

    // Status shows each machine's addresses and since when it is started.
    let status = app.status_json().await;
    for instance in &instances {
        let (_, machine) = status["machines"]
            .as_object()
            .unwrap()
            .iter()
            .find(|(_, m)| m["instance-id"] == instance.id.as_str())
            .unwrap();
        assert_eq!(machine["dns-name"], instance.addresses[0].as_str());
        assert_eq!(
            machine["ip-addresses"],
            serde_json::json!(instance.addresses)
        );
        assert_eq!(machine["juju-status"]["current"], "started");
        let since = machine["juju-status"]["since"].as_str().unwrap();
        assert!(
            berth::api::webhooks::parse_rfc3339_ms(since).is_some(),
            "{since}"
        );
    }
}

#[actix_web::test]
async fn a_removed_machines_instance_is_terminated_and_a_stray_is_stopped() {
    let client = moto_client().await;
    let provider = open_provider(&client).await;
    let app = spawn_ec2(provider, None).await;
    let (store, engine) = (app.store(), app.engine());
    let controller = store.model().unwrap().controller_uuid;

    store
        .add_machines(AddMachines {
            count: 2,
            ..AddMachines::default()
        })
        .await
        .unwrap();
    until_within(
        PATIENCE,
        store,
        "2 awaiting",
        all_in(2, MachineState::AwaitingAgent),
    )
    .await;
    let status = check_in_until_started(&client, engine, store, 2).await;
    let removed = status
        .machines
        .iter()
        .find(|m| m.id.to_string() == "0")
        .unwrap();
    let removed_instance = removed.instance_id().unwrap().to_string();

    store
        .remove_machine("0".parse().unwrap(), false)
        .await
        .unwrap();
    until_within(PATIENCE, store, "machine 0 removed", |s| {
        s.machines.len() == 1 && s.machines[0].id.to_string() == "1"
    })
    .await;
    let instances = moto_instances(&client, &controller).await;
    let gone = instances.iter().find(|i| i.id == removed_instance).unwrap();
    assert_eq!(gone.state, "terminated");

    // An instance with this controller's tag that no machine claims,
    // started behind berth's back.
    let image = any_image(&client).await;
    let stray = client
        .run_instances()
        .image_id(image)
        .instance_type(Ec2InstanceType::from("t3.micro"))
        .min_count(1)
        .max_count(1)
        .tag_specifications(
            TagSpecification::builder()
                .resource_type(ResourceType::Instance)
                .tags(
                    Tag::builder()
                        .key(tags::CONTROLLER)
                        .value(&controller)
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
    let stray = stray.instances()[0].instance_id().unwrap().to_string();
    engine.reconcile_now();
    let instances = until_moto(&client, &controller, "the stray terminated", |all| {
        all.iter().any(|i| i.id == stray && i.state == "terminated")
    })
    .await;
    // The remaining machine's instance is left alone.
    let kept: Vec<&str> = live(&instances).iter().map(|i| i.id.as_str()).collect();
    let status = store.blocking(|s| s.status()).await.unwrap();
    assert_eq!(kept, vec![status.machines[0].instance_id().unwrap()]);
    assert_eq!(status.machines[0].state(), MachineState::Started);
}

/// A controller on moto with one machine, checked in and started.
async fn one_started_machine(client: &Client) -> (TestApp, StatusSnapshot) {
    let provider = open_provider(client).await;
    let app = spawn_ec2(provider, None).await;
    let (store, engine) = (app.store(), app.engine());
    store.add_machines(AddMachines::default()).await.unwrap();
    until_within(
        PATIENCE,
        store,
        "awaiting",
        all_in(1, MachineState::AwaitingAgent),
    )
    .await;
    let status = check_in_until_started(client, engine, store, 1).await;
    (app, status)
}

#[actix_web::test]
async fn an_instance_stopped_behind_berths_back_shows_its_machine_down() {
    let client = moto_client().await;
    let (app, status) = one_started_machine(&client).await;
    let (store, engine) = (app.store(), app.engine());
    let instance = status.machines[0].instance_id().unwrap().to_string();

    client
        .terminate_instances()
        .instance_ids(&instance)
        .send()
        .await
        .unwrap();
    engine.reconcile_now();
    let status = until_within(PATIENCE, store, "down", all_in(1, MachineState::Down)).await;
    assert_eq!(
        status.machines[0].machine.lifecycle.last_error.as_deref(),
        Some(format!("instance {instance} was terminated by the provider").as_str())
    );
}

#[actix_web::test]
async fn an_elastic_address_associated_later_becomes_the_machines_dns_name() {
    let client = moto_client().await;
    let (app, status) = one_started_machine(&client).await;
    let (store, engine) = (app.store(), app.engine());
    let instance = status.machines[0].instance_id().unwrap().to_string();
    let launched = status.machines[0].addresses.clone();
    assert!(!launched.is_empty());

    // An elastic address associated behind berth's back: the next
    // reconciliation records what EC2 now reports.
    let allocated = client
        .allocate_address()
        .domain(aws_sdk_ec2::types::DomainType::Vpc)
        .send()
        .await
        .unwrap();
    let public = allocated.public_ip().unwrap().to_string();
    client
        .associate_address()
        .instance_id(&instance)
        .allocation_id(allocated.allocation_id().unwrap())
        .send()
        .await
        .unwrap();
    let reported = moto_instances(&client, &store.model().unwrap().controller_uuid)
        .await
        .into_iter()
        .find(|i| i.id == instance)
        .unwrap()
        .addresses;
    assert_eq!(reported.first(), Some(&public), "{reported:?}");
    engine.reconcile_now();
    let status = until_within(PATIENCE, store, "the new address", |s: &StatusSnapshot| {
        s.machines[0].addresses.first() == Some(&public)
    })
    .await;
    assert_eq!(status.machines[0].addresses, reported);
    assert_eq!(status.machines[0].state(), MachineState::Started);
    assert_eq!(
        app.status_json().await["machines"]["0"]["dns-name"],
        public.as_str()
    );
}

/// Runs `work` in an actix system of its own, then drops the system: every
/// actor and timer of that engine simply stops.
fn in_a_system<F: std::future::Future<Output = ()>>(work: impl FnOnce() -> F) {
    let system = actix::System::new();
    system.block_on(work());
    drop(system);
}

#[test]
fn a_restarted_controller_adopts_its_instances_instead_of_launching_new_ones() {
    let site = Site::new(Backend::Sqlite);
    let first_site = site.clone();
    // First life: launch 3 machines, let one agent check in, then stop.
    let before = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = before.clone();
    in_a_system(move || async move {
        let client = moto_client().await;
        let provider = open_provider(&client).await;
        let app = spawn_ec2(provider, Some(first_site)).await;
        let (store, engine) = (app.store(), app.engine());
        let controller = store.model().unwrap().controller_uuid;
        deploy(store, "mysql", 3, "").await;
        let status = until_within(
            PATIENCE,
            store,
            "3 awaiting",
            all_in(3, MachineState::AwaitingAgent),
        )
        .await;
        let first = &status.machines[0];
        check_in(&client, engine, first.id, first.instance_id().unwrap()).await;
        until_within(PATIENCE, store, "one started", |s| {
            s.machines
                .iter()
                .filter(|m| m.state() == MachineState::Started)
                .count()
                == 1
        })
        .await;
        *seen.lock().unwrap() = moto_instances(&client, &controller)
            .await
            .into_iter()
            .map(|i| (i.id, i.state))
            .collect();
    });
    let before = before.lock().unwrap().clone();
    assert_eq!(before.len(), 3);
    // Second life: same store, same moto, a new provider and engine.
    in_a_system(move || async move {
        let client = moto_client().await;
        let provider = open_provider(&client).await;
        let app = spawn_ec2(provider, Some(site)).await;
        let (store, engine) = (app.store(), app.engine());
        let controller = store.model().unwrap().controller_uuid;
        engine.reconcile_now();
        let status = check_in_until_started(&client, engine, store, 3).await;
        let after: Vec<(String, String)> = moto_instances(&client, &controller)
            .await
            .into_iter()
            .map(|i| (i.id, i.state))
            .collect();
        assert_eq!(after, before, "no instance was launched or stopped");
        let recorded: BTreeSet<String> = status
            .machines
            .iter()
            .map(|m| m.instance_id().unwrap().to_string())
            .collect();
        let existing: BTreeSet<String> = before.iter().map(|(id, _)| id.clone()).collect();
        assert_eq!(recorded, existing);
    });
}

#[actix_web::test]
async fn the_default_image_lookup_finds_canonicals_image_in_moto() {
    // moto carries two of Canonical's images, among them xenial's.
    let client = moto_client().await;
    let table: toml::Table = format!(
        "region = \"{REGION}\"\nendpoint_url = \"{}\"\nimage_has_agent = true\n",
        moto::endpoint()
    )
    .parse()
    .unwrap();
    let config = Ec2Config::from_table(&table).unwrap();
    let provider = Arc::new(
        Ec2Provider::open_with(config, &sdk_config().await)
            .await
            .unwrap(),
    );
    let app = spawn_ec2(provider, None).await;
    let store = app.store();
    let controller = store.model().unwrap().controller_uuid;
    // Machine 0 asks for a root disk; machine 1 for more storage than
    // that, which the root volume provides.
    for constraints in ["root-disk=20G", "root-disk=20G storage=30G"] {
        store
            .add_machines(AddMachines {
                base: Some("ubuntu@16.04".parse().unwrap()),
                constraints: Constraints::parse(constraints).unwrap(),
                ..AddMachines::default()
            })
            .await
            .unwrap();
    }
    until_within(
        PATIENCE,
        store,
        "awaiting",
        all_in(2, MachineState::AwaitingAgent),
    )
    .await;
    let instances = moto_instances(&client, &controller).await;
    let mut sizes = BTreeMap::new();
    for launched in &instances {
        let described = client
            .describe_instances()
            .instance_ids(&launched.id)
            .send()
            .await
            .unwrap();
        let instance = &described.reservations()[0].instances()[0];
        assert_eq!(instance.image_id(), Some("ami-785db401"));
        let volume = instance.block_device_mappings()[0]
            .ebs()
            .and_then(|e| e.volume_id())
            .unwrap()
            .to_string();
        let volumes = client
            .describe_volumes()
            .volume_ids(volume)
            .send()
            .await
            .unwrap();
        sizes.insert(
            launched.tags[tags::MACHINE].clone(),
            volumes.volumes()[0].size(),
        );
    }
    assert_eq!(
        sizes,
        BTreeMap::from([("0".to_string(), Some(20)), ("1".to_string(), Some(30))])
    );
}

#[actix_web::test]
async fn a_missing_image_id_puts_the_machine_in_error_without_an_instance() {
    let client = moto_client().await;
    let provider = open_provider(&client).await;
    let app = spawn_ec2(provider, None).await;
    let store = app.store();
    let controller = store.model().unwrap().controller_uuid;
    store
        .add_machines(AddMachines {
            constraints: Constraints::parse("image-id=ami-0ffffffffffffffff").unwrap(),
            ..AddMachines::default()
        })
        .await
        .unwrap();
    let status = until_within(
        PATIENCE,
        store,
        "error",
        all_in(1, MachineState::ProvisioningError),
    )
    .await;
    let message = status.machines[0]
        .machine
        .lifecycle
        .last_error
        .clone()
        .unwrap();
    assert!(message.contains("InvalidAMIID.NotFound"), "{message}");
    assert!(moto_instances(&client, &controller).await.is_empty());
}

/// EC2 answers that moto cannot give: a zone out of capacity for one type.
mod scripted {
    use std::collections::{HashMap, HashSet};

    use aws_sdk_ec2::config::http::HttpResponse;
    use aws_sdk_ec2::config::retry::RetryConfig;
    use aws_sdk_ec2::operation::describe_availability_zones::DescribeAvailabilityZonesOutput;
    use aws_sdk_ec2::operation::describe_images::DescribeImagesOutput;
    use aws_sdk_ec2::operation::describe_instances::DescribeInstancesOutput;
    use aws_sdk_ec2::operation::run_instances::RunInstancesOutput;
    use aws_sdk_ec2::types::{
        AvailabilityZone, AvailabilityZoneState, Image, Instance as Ec2Instance, Placement,
    };
    use aws_smithy_mocks::{mock, mock_client, RuleMode};
    use aws_smithy_runtime_api::http::StatusCode;
    use aws_smithy_types::body::SdkBody;
    use berth::providers::ec2::RegionFacts;

    use super::*;

    const IMAGE: &str = "ami-0123456789abcdef0";

    fn no_capacity() -> HttpResponse {
        HttpResponse::new(
            StatusCode::try_from(500).unwrap(),
            SdkBody::from(
                "<Response><Errors><Error><Code>InsufficientInstanceCapacity</Code><Message>We currently do not have sufficient t3a.medium capacity in the Availability Zone you requested (zone-a).</Message></Error></Errors><RequestID>1</RequestID></Response>",
            ),
        )
    }

    #[actix_web::test]
    async fn a_zone_out_of_capacity_sends_the_machine_on_and_its_next_launch_there_takes_another_type(
    ) {
        let zones = mock!(Client::describe_availability_zones).then_output(|| {
            let zone = |name: &str| {
                AvailabilityZone::builder()
                    .zone_name(name)
                    .state(AvailabilityZoneState::Available)
                    .build()
            };
            DescribeAvailabilityZonesOutput::builder()
                .availability_zones(zone("zone-a"))
                .availability_zones(zone("zone-b"))
                .build()
        });
        let listing = mock!(Client::describe_instances)
            .then_output(|| DescribeInstancesOutput::builder().build());
        let images = mock!(Client::describe_images).then_output(|| {
            DescribeImagesOutput::builder()
                .images(
                    Image::builder()
                        .image_id(IMAGE)
                        .root_device_name("/dev/sda1")
                        .build(),
                )
                .build()
        });
        let full = mock!(Client::run_instances)
            .match_requests(|r| {
                r.placement().and_then(|p| p.availability_zone()) == Some("zone-a")
                    && r.instance_type().map(|t| t.as_str()) == Some("t3a.medium")
            })
            .then_http_response(no_capacity);
        let runs = mock!(Client::run_instances).then_compute_output(|r| {
            let zone = r.placement().and_then(|p| p.availability_zone()).unwrap();
            let kind = r.instance_type().unwrap().as_str();
            RunInstancesOutput::builder()
                .instances(
                    Ec2Instance::builder()
                        .instance_id(format!("i-{zone}-{kind}"))
                        .instance_type(r.instance_type().cloned().unwrap())
                        .placement(Placement::builder().availability_zone(zone).build())
                        .build(),
                )
                .build()
        });
        let client = mock_client!(
            aws_sdk_ec2,
            RuleMode::MatchAny,
            [&zones, &listing, &images, &full, &runs],
            |b| b.retry_config(RetryConfig::disabled())
        );
        let types: HashSet<String> = ["t3a.medium", "t3.medium"]
            .into_iter()
            .map(String::from)
            .collect();
        let facts = RegionFacts {
            instance_types: types.clone(),
            offerings: HashMap::from([
                ("zone-a".to_string(), types.clone()),
                ("zone-b".to_string(), types),
            ]),
            subnets: Default::default(),
        };
        let mut config = Ec2Config::for_region(REGION);
        config.image_has_agent = true;
        config.images.insert(
            berth::providers::ec2::ImageKey {
                base: berth::domain::base::Base::DEFAULT,
                arch: Arch::Amd64,
            },
            IMAGE.to_string(),
        );
        let provider = Arc::new(Ec2Provider::from_facts(config, client, facts).unwrap());
        let app = spawn_ec2(provider.clone(), None).await;
        let store = app.store();

        // The first machine goes to the emptiest zone, zone-a, which is
        // full: it moves on to zone-b at once.
        deploy(store, "wordpress", 1, "mem=4G").await;
        let status = until_within(
            PATIENCE,
            store,
            "1 awaiting",
            all_in(1, MachineState::AwaitingAgent),
        )
        .await;
        let first = &status.machines[0];
        assert_eq!(first.machine.lifecycle.zone.as_deref(), Some("zone-b"));
        assert_eq!(first.instance_id(), Some("i-zone-b-t3a.medium"));
        assert_eq!(full.num_calls(), 1);
        assert!(!provider.offers("zone-a", "t3a.medium"));
        assert!(provider.offers("zone-b", "t3a.medium"));

        // The second unit's machine goes to zone-a, now the zone with
        // fewer wordpress machines, with the cheapest type zone-a still
        // offers.
        store
            .add_units("wordpress".parse().unwrap(), 1, Vec::new())
            .await
            .unwrap();
        let status = until_within(
            PATIENCE,
            store,
            "2 awaiting",
            all_in(2, MachineState::AwaitingAgent),
        )
        .await;
        let second = status.machines.iter().find(|m| m.id != first.id).unwrap();
        assert_eq!(second.machine.lifecycle.zone.as_deref(), Some("zone-a"));
        assert_eq!(second.instance_id(), Some("i-zone-a-t3.medium"));
        assert_eq!(full.num_calls(), 1);
    }
}

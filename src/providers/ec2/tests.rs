//! The EC2 provider against scripted EC2 answers (aws-smithy-mocks), for
//! what a real or emulated EC2 cannot be made to do on demand: refuse
//! capacity in one zone, throttle, refuse credentials, fail part of a
//! batch.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Actor;
use aws_sdk_ec2::config::http::HttpResponse;
use aws_sdk_ec2::config::retry::RetryConfig;
use aws_sdk_ec2::operation::describe_availability_zones::DescribeAvailabilityZonesOutput;
use aws_sdk_ec2::operation::describe_images::DescribeImagesOutput;
use aws_sdk_ec2::operation::describe_instance_type_offerings::DescribeInstanceTypeOfferingsOutput;
use aws_sdk_ec2::operation::describe_instance_types::DescribeInstanceTypesOutput;
use aws_sdk_ec2::operation::describe_instances::DescribeInstancesOutput;
use aws_sdk_ec2::operation::run_instances::{RunInstancesInput, RunInstancesOutput};
use aws_sdk_ec2::operation::terminate_instances::TerminateInstancesOutput;
use aws_sdk_ec2::types::{
    AvailabilityZone, AvailabilityZoneMessage, AvailabilityZoneState, Image,
    Instance as Ec2Instance, InstanceState as Ec2State, InstanceStateName, InstanceTypeInfo,
    InstanceTypeOffering, Placement as Ec2Placement, Reservation, ResourceType, Tag as Ec2Tag,
};
use aws_sdk_ec2::Client;
use aws_smithy_mocks::{mock, mock_client, Rule, RuleMode};
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;

use super::*;
use crate::contracts::provider::AgentBootstrap;
use crate::contracts::secrets::Secret;
use crate::domain::base::Base;
use crate::domain::instance_types::Requirements;
use crate::engine::broker::{ProviderBroker, RateLimits};
use crate::engine::protocol::{InstanceFailed, InstanceStarted, Launch};

const CONTROLLER: &str = "0b7e5c1e-1111-4222-8333-444455556666";
const IMAGE: &str = "ami-0123456789abcdef0";

/// An EC2 error as EC2 sends it.
fn ec2_error(status: u16, code: &str, message: &str) -> HttpResponse {
    HttpResponse::new(
        StatusCode::try_from(status).unwrap(),
        SdkBody::from(format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors><RequestID>ea966190-f9aa-478e-9ede-example</RequestID></Response>"
        )),
    )
}

fn client(rules: &[&Rule]) -> Client {
    mock_client!(aws_sdk_ec2, RuleMode::MatchAny, rules, |b| b
        .retry_config(RetryConfig::disabled()))
}

/// A region's configuration whose images carry the agent.
fn region_config() -> Ec2Config {
    Ec2Config {
        image_has_agent: true,
        ..Ec2Config::for_region("us-east-1")
    }
}

fn config() -> Ec2Config {
    let mut config = region_config();
    config.images.insert(
        ImageKey {
            base: Base::DEFAULT,
            arch: crate::domain::constraints::Arch::Amd64,
        },
        IMAGE.to_string(),
    );
    config
}

fn set(items: &[&str]) -> HashSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn facts() -> RegionFacts {
    RegionFacts {
        instance_types: set(&["t3a.medium", "t3.medium", "m5.large", "x9.unpriced"]),
        offerings: HashMap::from([
            (
                "us-east-1a".to_string(),
                set(&["t3a.medium", "t3.medium", "m5.large"]),
            ),
            ("us-east-1b".to_string(), set(&["t3a.medium", "m5.large"])),
        ]),
        subnets: BTreeMap::new(),
    }
}

fn provider_with(config: Ec2Config, facts: RegionFacts, rules: &[&Rule]) -> Ec2Provider {
    Ec2Provider::from_facts(config, client(rules), facts).unwrap()
}

fn provider(rules: &[&Rule]) -> Ec2Provider {
    provider_with(config(), facts(), rules)
}

fn request(machine: &str, zone: &str, instance_type: &str) -> LaunchRequest {
    let tags = BTreeMap::from([
        (tags::CONTROLLER.to_string(), CONTROLLER.to_string()),
        (tags::MODEL.to_string(), "model-uuid".to_string()),
        (tags::MACHINE.to_string(), machine.to_string()),
        (tags::NAME.to_string(), format!("berth-m-machine-{machine}")),
    ]);
    LaunchRequest {
        machine: machine.parse().unwrap(),
        zone: zone.to_string(),
        instance_type: instance_type.to_string(),
        base: Base::DEFAULT,
        requirements: Requirements::default(),
        agent: AgentBootstrap {
            controller_url: "http://controller.invalid:17070".to_string(),
            ca_cert: None,
            one_time_password: Secret::new(format!("otp{machine}")),
        },
        client_token: format!("{CONTROLLER}-{machine}-0-0-{zone}"),
        tags,
        host_instance: None,
    }
}

/// DescribeImages of our image: it exists, booting from /dev/sda1.
fn image_exists() -> Rule {
    mock!(Client::describe_images)
        .match_requests(|r| r.image_ids() == [IMAGE.to_string()])
        .then_output(|| {
            DescribeImagesOutput::builder()
                .images(
                    Image::builder()
                        .image_id(IMAGE)
                        .root_device_name("/dev/sda1")
                        .build(),
                )
                .build()
        })
}

/// The instance id RunInstances gives the machine named in the request's
/// tags: `i-000...0<machine>`.
fn id_for(input: &RunInstancesInput) -> String {
    let machine = input
        .tag_specifications()
        .iter()
        .flat_map(|s| s.tags())
        .find(|t| t.key() == Some(tags::MACHINE))
        .and_then(|t| t.value())
        .unwrap_or("x");
    format!("i-{machine:0>17}")
}

/// RunInstances that starts what it is asked for, pending.
fn runs() -> Rule {
    mock!(Client::run_instances).then_compute_output(|input| {
        RunInstancesOutput::builder()
            .instances(
                Ec2Instance::builder()
                    .instance_id(id_for(input))
                    .instance_type(input.instance_type().cloned().unwrap())
                    .placement(
                        Ec2Placement::builder()
                            .availability_zone(
                                input
                                    .placement()
                                    .and_then(|p| p.availability_zone())
                                    .unwrap_or(""),
                            )
                            .build(),
                    )
                    .state(Ec2State::builder().name(InstanceStateName::Pending).build())
                    .build(),
            )
            .build()
    })
}

/// RunInstances that answers, with an instance id only, the requests
/// `matches` accepts.
fn runs_if(matches: impl Fn(&RunInstancesInput) -> bool + Send + Sync + 'static) -> Rule {
    mock!(Client::run_instances)
        .match_requests(matches)
        .then_compute_output(|input| {
            RunInstancesOutput::builder()
                .instances(Ec2Instance::builder().instance_id(id_for(input)).build())
                .build()
        })
}

fn tags_of(input: &RunInstancesInput, resource: ResourceType) -> BTreeMap<String, String> {
    input
        .tag_specifications()
        .iter()
        .filter(|s| s.resource_type() == Some(&resource))
        .flat_map(|s| s.tags())
        .map(|t| {
            (
                t.key().unwrap_or("").to_string(),
                t.value().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn user_data_of(input: &RunInstancesInput) -> String {
    let encoded = input.user_data().unwrap_or("");
    String::from_utf8(aws_smithy_types::base64::decode(encoded).unwrap()).unwrap()
}

#[test]
fn the_client_token_is_the_hex_sha256_of_the_engines_token() {
    let token = client_token("abc");
    assert_eq!(
        token,
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    let long = client_token(&"x".repeat(500));
    assert_eq!(long.len(), 64);
    assert!(long.is_ascii());
    assert_ne!(client_token("a"), client_token("b"));
}

#[test]
fn the_provider_is_named_as_its_configuration_kind() {
    // The controller names the cloud before it has opened it.
    assert_eq!(
        provider(&[]).name(),
        crate::config::ProviderKind::Ec2.name()
    );
}

#[test]
fn the_catalogue_is_the_embedded_one_restricted_to_the_regions_types() {
    let p = provider(&[]);
    let names: HashSet<&str> = p
        .catalogue()
        .types()
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(
        names,
        HashSet::from(["t3a.medium", "t3.medium", "m5.large"])
    );
    assert_eq!(
        p.catalogue().get("t3a.medium").map(|t| t.price.to_string()),
        Catalogue::embedded()
            .unwrap()
            .get("t3a.medium")
            .map(|t| t.price.to_string())
    );
}

#[test]
fn a_configured_price_list_replaces_the_catalogues_prices_of_the_types_it_lists() {
    let mut config = config();
    config
        .prices
        .insert("t3.medium".to_string(), "0.05".parse().unwrap());
    let p = provider_with(config, facts(), &[]);
    assert_eq!(
        p.catalogue().get("t3.medium").map(|t| t.price.to_string()),
        Some("0.05".to_string())
    );
    // A type the list does not name keeps the catalogue's price.
    assert_eq!(
        p.catalogue().get("m5.large").map(|t| t.price),
        Catalogue::embedded()
            .unwrap()
            .get("m5.large")
            .map(|t| t.price)
    );
}

#[test]
fn a_type_is_offered_only_in_the_zones_that_offer_it() {
    let p = provider(&[]);
    assert!(p.offers("us-east-1a", "t3.medium"));
    assert!(!p.offers("us-east-1b", "t3.medium"));
    assert!(!p.offers("us-east-1z", "t3a.medium"));
    assert!(!p.offers("us-east-1a", "x9.unpriced") || p.catalogue().get("x9.unpriced").is_none());
}

#[test]
fn a_type_marked_unavailable_comes_back_after_the_named_interval() {
    let p = provider(&[]);
    let now = Instant::now();
    p.mark_unavailable_at("us-east-1a", "t3a.medium", now);
    assert!(!p.offers_at("us-east-1a", "t3a.medium", now));
    assert!(!p.offers_at(
        "us-east-1a",
        "t3a.medium",
        now + UNAVAILABLE_FOR - Duration::from_secs(1)
    ));
    assert!(p.offers_at("us-east-1b", "t3a.medium", now));
    assert!(p.offers_at("us-east-1a", "t3.medium", now));
    assert!(p.offers_at(
        "us-east-1a",
        "t3a.medium",
        now + UNAVAILABLE_FOR + Duration::from_secs(1)
    ));
    assert_eq!(UNAVAILABLE_FOR, Duration::from_secs(300));
}

#[test]
fn ec2_honours_what_it_can_and_leaves_the_rest_as_warnings() {
    let p = provider(&[]);
    let keys = p.supported_constraints();
    for key in [
        Key::Spaces,
        Key::VirtType,
        Key::Container,
        Key::RootDiskSource,
    ] {
        assert!(!keys.contains(&key), "{key:?}");
    }
    for key in [
        Key::Arch,
        Key::Mem,
        Key::Cores,
        Key::CpuPower,
        Key::RootDisk,
        Key::InstanceType,
        Key::Tags,
        Key::Zones,
        Key::AllocatePublicIp,
        Key::ImageId,
        Key::InstanceRole,
        Key::Storage,
    ] {
        assert!(keys.contains(&key), "{key:?}");
    }
    assert_eq!(p.name(), "ec2");
    assert_eq!(p.max_launch_batch(), 5);
    assert!(!p.supports_containers());
}

#[tokio::test]
async fn a_launch_is_one_run_instances_with_zone_type_image_tags_user_data_and_hashed_token() {
    let run = mock!(Client::run_instances)
        .match_requests(|r| {
            let expected_tags = BTreeMap::from([
                (tags::CONTROLLER.to_string(), CONTROLLER.to_string()),
                (tags::MODEL.to_string(), "model-uuid".to_string()),
                (tags::MACHINE.to_string(), "4".to_string()),
                (tags::NAME.to_string(), "berth-m-machine-4".to_string()),
            ]);
            let user_data = user_data_of(r);
            r.image_id() == Some(IMAGE)
                && r.instance_type().map(|t| t.as_str()) == Some("t3a.medium")
                && r.min_count() == Some(1)
                && r.max_count() == Some(1)
                && r.placement().and_then(|p| p.availability_zone()) == Some("us-east-1a")
                && r.client_token()
                    == Some(client_token(&format!("{CONTROLLER}-4-0-0-us-east-1a")).as_str())
                && tags_of(r, ResourceType::Instance) == expected_tags
                && tags_of(r, ResourceType::Volume) == expected_tags
                && user_data.starts_with("#cloud-config\n")
                && user_data::password_in(&user_data) == Some("otp4")
                && user_data.contains("BERTH_MACHINE=4\n")
                && user_data.contains("BERTH_CONTROLLER_URL=http://controller.invalid:17070\n")
                && r.block_device_mappings().is_empty()
                && r.network_interfaces().is_empty()
                && r.subnet_id().is_none()
        })
        .then_compute_output(|input| {
            RunInstancesOutput::builder()
                .instances(
                    Ec2Instance::builder()
                        .instance_id(id_for(input))
                        .instance_type(input.instance_type().cloned().unwrap())
                        .placement(
                            Ec2Placement::builder()
                                .availability_zone("us-east-1a")
                                .build(),
                        )
                        .state(Ec2State::builder().name(InstanceStateName::Pending).build())
                        .build(),
                )
                .build()
        });
    let images = image_exists();
    let p = provider(&[&run, &images]);
    let results = p
        .launch(vec![request("4", "us-east-1a", "t3a.medium")])
        .await;
    let instance = results.into_iter().next().unwrap().unwrap();
    assert_eq!(instance.id, "i-00000000000000004");
    assert_eq!(instance.machine, Some("4".parse().unwrap()));
    assert_eq!(instance.zone, "us-east-1a");
    assert_eq!(instance.instance_type, "t3a.medium");
    assert_eq!(instance.state, InstanceState::Pending);
    assert_eq!(instance.hardware.mem_mib, Some(4096));
    assert_eq!(instance.hardware.zone.as_deref(), Some("us-east-1a"));
    assert_eq!(run.num_calls(), 1);
}

#[tokio::test]
async fn root_disk_sizes_the_images_root_device_in_whole_gib() {
    let run = runs_if(|r| {
        let mapping = r.block_device_mappings();
        mapping.len() == 1
            && mapping[0].device_name() == Some("/dev/sda1")
            && mapping[0].ebs().and_then(|e| e.volume_size()) == Some(11)
            && mapping[0].ebs().and_then(|e| e.delete_on_termination()) == Some(true)
    });
    let images = image_exists();
    let p = provider(&[&run, &images]);
    let mut req = request("1", "us-east-1a", "t3a.medium");
    req.requirements.root_disk_mib = Some(10 * 1024 + 1);
    let instance = p.launch(vec![req]).await.remove(0).unwrap();
    assert_eq!(instance.hardware.root_disk_mib, Some(10 * 1024 + 1));
    assert_eq!(instance.zone, "us-east-1a");
    assert_eq!(run.num_calls(), 1);
}

#[tokio::test]
async fn instance_role_names_the_instance_profile_and_auto_is_refused() {
    let run = runs_if(|r| {
        r.iam_instance_profile().and_then(|p| p.name()) == Some("berth-agents")
            && r.iam_instance_profile().and_then(|p| p.arn()).is_none()
    });
    let images = image_exists();
    let p = provider(&[&run, &images]);
    let mut req = request("1", "us-east-1a", "t3a.medium");
    req.requirements.instance_role = Some("berth-agents".to_string());
    p.launch(vec![req]).await.remove(0).unwrap();
    assert_eq!(run.num_calls(), 1);

    let mut auto = request("2", "us-east-1a", "t3a.medium");
    auto.requirements.instance_role = Some("auto".to_string());
    let refused = p.launch(vec![auto]).await.remove(0).unwrap_err();
    assert_eq!(refused.class, FailureClass::Permanent);
    assert!(
        refused
            .message
            .starts_with("instance-role=auto is not supported"),
        "{refused:?}"
    );
    assert_eq!(run.num_calls(), 1, "nothing launched for auto");
}

#[tokio::test]
async fn a_launch_without_instance_role_names_no_profile() {
    let run = runs_if(|r| r.iam_instance_profile().is_none());
    let images = image_exists();
    let p = provider(&[&run, &images]);
    p.launch(vec![request("1", "us-east-1a", "t3a.medium")])
        .await
        .remove(0)
        .unwrap();
    assert_eq!(run.num_calls(), 1);
}

#[tokio::test]
async fn allocate_public_ip_goes_on_the_primary_network_interface_with_the_groups() {
    let run = runs_if(|r| {
        let interfaces = r.network_interfaces();
        interfaces.len() == 1
            && interfaces[0].device_index() == Some(0)
            && interfaces[0].associate_public_ip_address() == Some(true)
            && interfaces[0].groups() == ["sg-0abc".to_string()]
            && interfaces[0].subnet_id().is_none()
            && r.security_group_ids().is_empty()
            && r.key_name() == Some("ops")
    });
    let images = image_exists();
    let mut config = config();
    config.security_group_ids = vec!["sg-0abc".to_string()];
    config.key_name = Some("ops".to_string());
    let p = provider_with(config, facts(), &[&run, &images]);
    let mut req = request("2", "us-east-1a", "t3a.medium");
    req.requirements.allocate_public_ip = Some(true);
    assert!(p.launch(vec![req]).await.remove(0).is_ok());
    assert_eq!(run.num_calls(), 1);
}

#[tokio::test]
async fn with_subnets_a_launch_uses_its_zones_subnet_and_other_zones_are_unavailable() {
    let run = runs_if(|r| {
        r.subnet_id() == Some("subnet-0a") && r.security_group_ids() == ["sg-01".to_string()]
    });
    let zones = mock!(Client::describe_availability_zones).then_output(|| {
        DescribeAvailabilityZonesOutput::builder()
            .availability_zones(
                AvailabilityZone::builder()
                    .zone_name("us-east-1a")
                    .state(AvailabilityZoneState::Available)
                    .build(),
            )
            .availability_zones(
                AvailabilityZone::builder()
                    .zone_name("us-east-1b")
                    .state(AvailabilityZoneState::Available)
                    .build(),
            )
            .build()
    });
    let images = image_exists();
    let mut config = config();
    config.subnet_ids = vec!["subnet-0a".to_string()];
    config.security_group_ids = vec!["sg-01".to_string()];
    let mut facts = facts();
    facts
        .subnets
        .insert("us-east-1a".to_string(), "subnet-0a".to_string());
    let p = provider_with(config, facts, &[&run, &zones, &images]);
    let zones = p.zones().await.unwrap();
    assert_eq!(
        zones,
        vec![
            ProviderZone {
                name: "us-east-1a".into(),
                available: true,
                reason: String::new()
            },
            ProviderZone {
                name: "us-east-1b".into(),
                available: false,
                reason: "no configured subnet is in this zone".into()
            },
        ]
    );
    let results = p
        .launch(vec![
            request("1", "us-east-1a", "t3a.medium"),
            request("2", "us-east-1b", "t3a.medium"),
        ])
        .await;
    assert!(results[0].is_ok());
    let refused = results[1].clone().unwrap_err();
    assert_eq!(refused.class, FailureClass::ZoneSpecific);
    assert_eq!(run.num_calls(), 1);
}

#[tokio::test]
async fn a_batch_is_one_run_instances_per_machine_and_can_partly_succeed() {
    let refused = mock!(Client::run_instances)
        .match_requests(|r| {
            r.client_token() == Some(client_token(&format!("{CONTROLLER}-2-0-0-us-east-1a")).as_str())
        })
        .then_http_response(|| {
            ec2_error(
                500,
                "InsufficientInstanceCapacity",
                "We currently do not have sufficient t3a.medium capacity in the Availability Zone you requested (us-east-1a).",
            )
        });
    let run = runs();
    let images = image_exists();
    let p = provider(&[&refused, &run, &images]);
    let results = p
        .launch(vec![
            request("1", "us-east-1a", "t3a.medium"),
            request("2", "us-east-1a", "t3a.medium"),
            request("3", "us-east-1a", "t3a.medium"),
        ])
        .await;
    assert_eq!(results.len(), 3);
    assert_eq!(results[0].as_ref().unwrap().id, "i-00000000000000001");
    let error = results[1].clone().unwrap_err();
    assert_eq!(error.class, FailureClass::ZoneSpecific);
    assert!(
        error.message.starts_with(
            "InsufficientInstanceCapacity: We currently do not have sufficient t3a.medium capacity"
        ),
        "{}",
        error.message
    );
    assert_eq!(results[2].as_ref().unwrap().id, "i-00000000000000003");
    assert_eq!(refused.num_calls(), 1);
    assert_eq!(run.num_calls(), 2);
    // The image was checked once for the whole batch.
    assert_eq!(images.num_calls(), 1);
    // The type is out in that zone for a while, and only there.
    assert!(!p.offers("us-east-1a", "t3a.medium"));
    assert!(p.offers("us-east-1a", "t3.medium"));
    assert!(p.offers("us-east-1b", "t3a.medium"));
    assert!(p.offers_at(
        "us-east-1a",
        "t3a.medium",
        Instant::now() + UNAVAILABLE_FOR + Duration::from_secs(1)
    ));
}

#[tokio::test]
async fn a_type_not_supported_in_the_zone_is_zone_specific_and_marked() {
    let refused = mock!(Client::run_instances).then_http_response(|| {
        ec2_error(
            400,
            "Unsupported",
            "Your requested instance type (m5.large) is not supported in your requested Availability Zone (us-east-1b). Please retry your request by not specifying an Availability Zone or choosing us-east-1a.",
        )
    });
    let images = image_exists();
    let p = provider(&[&refused, &images]);
    let error = p
        .launch(vec![request("1", "us-east-1b", "m5.large")])
        .await
        .remove(0)
        .unwrap_err();
    assert_eq!(error.class, FailureClass::ZoneSpecific);
    assert!(error
        .message
        .starts_with("Unsupported: Your requested instance type (m5.large)"));
    assert!(!p.offers("us-east-1b", "m5.large"));
    assert!(p.offers("us-east-1a", "m5.large"));
}

#[tokio::test]
async fn an_address_shortage_moves_on_without_marking_the_type() {
    let refused = mock!(Client::run_instances).then_http_response(|| {
        ec2_error(
            400,
            "InsufficientFreeAddressesInSubnet",
            "The specified subnet does not have enough free addresses.",
        )
    });
    let images = image_exists();
    let p = provider(&[&refused, &images]);
    let error = p
        .launch(vec![request("1", "us-east-1a", "t3a.medium")])
        .await
        .remove(0)
        .unwrap_err();
    assert_eq!(error.class, FailureClass::ZoneSpecific);
    assert!(p.offers("us-east-1a", "t3a.medium"));
}

#[tokio::test]
async fn throttling_is_transient_with_its_code_in_the_message() {
    let throttled = mock!(Client::run_instances)
        .then_http_response(|| ec2_error(503, "RequestLimitExceeded", "Request limit exceeded."));
    let images = image_exists();
    let p = provider(&[&throttled, &images]);
    let error = p
        .launch(vec![request("1", "us-east-1a", "t3a.medium")])
        .await
        .remove(0)
        .unwrap_err();
    assert_eq!(
        error,
        ProviderError::new(
            FailureClass::Transient,
            "RequestLimitExceeded: Request limit exceeded."
        )
    );
    assert!(p.offers("us-east-1a", "t3a.medium"));
}

#[actix_web::test]
async fn the_broker_retries_a_throttled_launch_with_the_same_client_token() {
    let token = client_token(&format!("{CONTROLLER}-1-0-0-us-east-1a"));
    let expected = token.clone();
    let run = mock!(Client::run_instances)
        .match_requests(move |r| r.client_token() == Some(expected.as_str()))
        .sequence()
        .http_response(|| ec2_error(503, "RequestLimitExceeded", "Request limit exceeded."))
        .times(2)
        .output(|| {
            RunInstancesOutput::builder()
                .instances(
                    Ec2Instance::builder()
                        .instance_id("i-0000000000000000a")
                        .build(),
                )
                .build()
        })
        .build();
    let images = image_exists();
    let p: Arc<dyn Provider> = Arc::new(provider(&[&run, &images]));
    let broker =
        ProviderBroker::new(p, RateLimits::ec2(), 4, Duration::from_secs(30), None).start();
    let (answer, answered) = tokio::sync::oneshot::channel();
    let listener = LaunchListener(Some(answer)).start();
    broker.do_send(Launch {
        request: request("1", "us-east-1a", "t3a.medium"),
        started: listener.clone().recipient(),
        failed: listener.recipient(),
    });
    let instance = answered.await.unwrap().unwrap();
    assert_eq!(instance.id, "i-0000000000000000a");
    assert_eq!(run.num_calls(), 3);
}

#[tokio::test]
async fn refused_credentials_and_permissions_are_unauthorized() {
    for (code, status) in [
        ("AuthFailure", 401),
        ("UnauthorizedOperation", 403),
        ("OptInRequired", 401),
    ] {
        let refused = mock!(Client::run_instances).then_http_response(move || {
            ec2_error(
                status,
                code,
                "You are not authorized to perform this operation.",
            )
        });
        let images = image_exists();
        let p = provider(&[&refused, &images]);
        let error = p
            .launch(vec![request("1", "us-east-1a", "t3a.medium")])
            .await
            .remove(0)
            .unwrap_err();
        assert_eq!(error.class, FailureClass::Unauthorized, "{code}");
        assert_eq!(
            error.message,
            format!("{code}: You are not authorized to perform this operation.")
        );
    }
}

#[tokio::test]
async fn refused_credentials_at_open_say_what_could_not_be_read() {
    let refused = mock!(Client::describe_instance_types).then_http_response(|| {
        ec2_error(
            401,
            "AuthFailure",
            "AWS was not able to validate the provided access credentials",
        )
    });
    let error = Ec2Provider::open_with_client(config(), client(&[&refused]))
        .await
        .err()
        .unwrap();
    match &error {
        Ec2Error::Api { source, .. } => assert_eq!(source.class, FailureClass::Unauthorized),
        other => panic!("{other}"),
    }
    assert_eq!(
        error.to_string(),
        "cannot list the region's instance types: AuthFailure: AWS was not able to validate the provided access credentials"
    );
}

#[tokio::test]
async fn a_missing_image_fails_a_batch_permanently_after_one_question() {
    let missing = mock!(Client::describe_images).then_http_response(|| {
        ec2_error(
            400,
            "InvalidAMIID.NotFound",
            "The image id '[ami-0ffffffffffffffff]' does not exist",
        )
    });
    let run = runs();
    let p = provider(&[&missing, &run]);
    let batch: Vec<LaunchRequest> = ["1", "2"]
        .into_iter()
        .map(|m| {
            let mut req = request(m, "us-east-1a", "t3a.medium");
            req.requirements.image_id = Some("ami-0ffffffffffffffff".to_string());
            req
        })
        .collect();
    for result in p.launch(batch).await {
        let error = result.unwrap_err();
        assert_eq!(error.class, FailureClass::Permanent);
        assert_eq!(
            error.message,
            "InvalidAMIID.NotFound: The image id '[ami-0ffffffffffffffff]' does not exist"
        );
    }
    assert_eq!(missing.num_calls(), 1);
    assert_eq!(run.num_calls(), 0);
}

#[tokio::test]
async fn the_image_id_constraint_overrides_the_configured_image() {
    let other = mock!(Client::describe_images)
        .match_requests(|r| r.image_ids() == ["ami-0bbbbbbbbbbbbbbbb".to_string()])
        .then_output(|| {
            DescribeImagesOutput::builder()
                .images(
                    Image::builder()
                        .image_id("ami-0bbbbbbbbbbbbbbbb")
                        .root_device_name("/dev/xvda")
                        .build(),
                )
                .build()
        });
    let run = runs_if(|r| r.image_id() == Some("ami-0bbbbbbbbbbbbbbbb"));
    let p = provider(&[&other, &run]);
    let mut req = request("1", "us-east-1a", "t3a.medium");
    req.requirements.image_id = Some("ami-0bbbbbbbbbbbbbbbb".to_string());
    assert!(p.launch(vec![req]).await.remove(0).is_ok());
    assert_eq!(run.num_calls(), 1);
}

#[tokio::test]
async fn without_a_configured_image_the_newest_match_of_the_owner_is_used_and_cached() {
    let lookup = mock!(Client::describe_images)
        .match_requests(|r| {
            r.owners() == ["099720109477".to_string()]
                && r.filters().iter().any(|f| {
                    f.name() == Some("name")
                        && f.values()
                            == ["ubuntu/images/hvm-ssd*/ubuntu-noble-24.04-amd64-server-*"
                                .to_string()]
                })
                && r.filters()
                    .iter()
                    .any(|f| f.name() == Some("state") && f.values() == ["available".to_string()])
        })
        .then_output(|| {
            let image = |id: &str, date: &str| {
                Image::builder()
                    .image_id(id)
                    .creation_date(date)
                    .root_device_name("/dev/sda1")
                    .build()
            };
            DescribeImagesOutput::builder()
                .images(image("ami-0old", "2024-04-23T10:00:00.000Z"))
                .images(image("ami-0new", "2025-11-02T08:30:00.000Z"))
                .images(image("ami-0mid", "2025-01-15T00:00:00.000Z"))
                .build()
        });
    let describe = mock!(Client::describe_images)
        .match_requests(|r| r.image_ids() == ["ami-0new".to_string()])
        .then_output(|| {
            DescribeImagesOutput::builder()
                .images(
                    Image::builder()
                        .image_id("ami-0new")
                        .root_device_name("/dev/sda1")
                        .build(),
                )
                .build()
        });
    let run = runs_if(|r| r.image_id() == Some("ami-0new"));
    let p = provider_with(region_config(), facts(), &[&lookup, &describe, &run]);
    assert!(p
        .launch(vec![request("1", "us-east-1a", "t3a.medium")])
        .await[0]
        .is_ok());
    assert!(p
        .launch(vec![request("2", "us-east-1a", "t3a.medium")])
        .await[0]
        .is_ok());
    assert_eq!(lookup.num_calls(), 1);
    assert_eq!(describe.num_calls(), 1);
    assert_eq!(run.num_calls(), 2);
}

#[tokio::test]
async fn a_lookup_that_finds_nothing_fails_permanently_naming_owner_and_pattern() {
    let lookup =
        mock!(Client::describe_images).then_output(|| DescribeImagesOutput::builder().build());
    let p = provider_with(region_config(), facts(), &[&lookup]);
    let error = p
        .launch(vec![request("1", "us-east-1a", "t3a.medium")])
        .await
        .remove(0)
        .unwrap_err();
    assert_eq!(error.class, FailureClass::Permanent);
    assert_eq!(
        error.message,
        "no image for ubuntu@24.04/amd64: owner 099720109477 has no available image named \
         \"ubuntu/images/hvm-ssd*/ubuntu-noble-24.04-amd64-server-*\"; set one in [provider.ec2.images]"
    );
}

#[tokio::test]
async fn a_repeated_client_token_returns_the_first_instance_without_a_second_call() {
    let run = runs();
    let images = image_exists();
    let p = provider(&[&run, &images]);
    let first = p
        .launch(vec![request("1", "us-east-1a", "t3a.medium")])
        .await;
    let again = p
        .launch(vec![request("1", "us-east-1a", "t3a.medium")])
        .await;
    assert_eq!(first[0].as_ref().unwrap(), again[0].as_ref().unwrap());
    assert_eq!(run.num_calls(), 1);
}

#[tokio::test]
async fn containers_and_unknown_types_fail_permanently_without_a_call() {
    let run = runs();
    let images = image_exists();
    let p = provider(&[&run, &images]);
    let mut container = request("0/lxd/0", "us-east-1a", "t3a.medium");
    container.host_instance = Some("i-0host".to_string());
    let results = p
        .launch(vec![container, request("1", "us-east-1a", "x9.unpriced")])
        .await;
    for result in &results {
        assert_eq!(result.as_ref().unwrap_err().class, FailureClass::Permanent);
    }
    assert_eq!(
        results[1].as_ref().unwrap_err().message,
        "InvalidInstanceType: x9.unpriced is not an instance type of region us-east-1"
    );
    assert_eq!(run.num_calls(), 0);
}

#[tokio::test]
async fn an_instance_ec2_no_longer_knows_counts_as_terminated() {
    let all = mock!(Client::terminate_instances)
        .match_requests(|r| r.instance_ids().len() == 3)
        .then_http_response(|| {
            ec2_error(
                400,
                "InvalidInstanceID.NotFound",
                "The instance ID 'i-0000000000000002' does not exist",
            )
        });
    let rest = mock!(Client::terminate_instances)
        .match_requests(|r| {
            r.instance_ids()
                == [
                    "i-0000000000000001".to_string(),
                    "i-0000000000000003".to_string(),
                ]
        })
        .then_output(|| TerminateInstancesOutput::builder().build());
    let p = provider(&[&all, &rest]);
    let ids: Vec<String> = (1..=3).map(|i| format!("i-000000000000000{i}")).collect();
    assert_eq!(p.terminate(ids).await, vec![Ok(()), Ok(()), Ok(())]);
    assert_eq!(all.num_calls(), 1);
    assert_eq!(rest.num_calls(), 1);
}

#[tokio::test]
async fn a_not_found_that_names_no_id_is_settled_one_id_at_a_time() {
    let all = mock!(Client::terminate_instances)
        .match_requests(|r| r.instance_ids().len() == 2)
        .then_http_response(|| {
            ec2_error(
                400,
                "InvalidInstanceID.NotFound",
                "Some instances do not exist",
            )
        });
    let gone = mock!(Client::terminate_instances)
        .match_requests(|r| r.instance_ids() == ["i-0a".to_string()])
        .then_http_response(|| {
            ec2_error(
                400,
                "InvalidInstanceID.NotFound",
                "Some instances do not exist",
            )
        });
    let live = mock!(Client::terminate_instances)
        .match_requests(|r| r.instance_ids() == ["i-0b".to_string()])
        .then_output(|| TerminateInstancesOutput::builder().build());
    let p = provider(&[&all, &gone, &live]);
    assert_eq!(
        p.terminate(vec!["i-0a".to_string(), "i-0b".to_string()])
            .await,
        vec![Ok(()), Ok(())]
    );
    assert_eq!(live.num_calls(), 1);
}

#[tokio::test]
async fn a_refused_termination_fails_every_id_of_the_call() {
    let refused = mock!(Client::terminate_instances).then_http_response(|| {
        ec2_error(
            403,
            "UnauthorizedOperation",
            "You are not authorized to perform this operation.",
        )
    });
    let p = provider(&[&refused]);
    let results = p
        .terminate(vec!["i-0a".to_string(), "i-0b".to_string()])
        .await;
    assert_eq!(results.len(), 2);
    for result in results {
        assert_eq!(result.unwrap_err().class, FailureClass::Unauthorized);
    }
}

#[tokio::test]
async fn termination_sends_at_most_a_thousand_ids_a_call() {
    let calls = mock!(Client::terminate_instances)
        .match_requests(|r| r.instance_ids().len() <= TERMINATE_BATCH)
        .then_output(|| TerminateInstancesOutput::builder().build());
    let p = provider(&[&calls]);
    let ids: Vec<String> = (0..1500).map(|i| format!("i-{i:017x}")).collect();
    let results = p.terminate(ids).await;
    assert_eq!(results.len(), 1500);
    assert!(results.iter().all(Result::is_ok));
    assert_eq!(calls.num_calls(), 2);
}

fn described(id: &str, machine: Option<&str>, state: InstanceStateName) -> Ec2Instance {
    let mut builder = Ec2Instance::builder()
        .instance_id(id)
        .instance_type(aws_sdk_ec2::types::InstanceType::from("t3a.medium"))
        .placement(
            Ec2Placement::builder()
                .availability_zone("us-east-1b")
                .build(),
        )
        .state(Ec2State::builder().name(state).build())
        .tags(
            Ec2Tag::builder()
                .key(tags::CONTROLLER)
                .value(CONTROLLER)
                .build(),
        );
    if let Some(machine) = machine {
        builder = builder.tags(Ec2Tag::builder().key(tags::MACHINE).value(machine).build());
    }
    builder.build()
}

#[tokio::test]
async fn instances_are_this_controllers_on_every_page_without_the_terminated() {
    let filtered = |r: &aws_sdk_ec2::operation::describe_instances::DescribeInstancesInput| {
        let has = |name: &str, values: &[&str]| {
            r.filters().iter().any(|f| {
                f.name() == Some(name)
                    && f.values().iter().map(String::as_str).collect::<Vec<_>>() == values
            })
        };
        has("tag:berth-controller", &[CONTROLLER])
            && has(
                "instance-state-name",
                &["pending", "running", "shutting-down", "stopping", "stopped"],
            )
    };
    let first = mock!(Client::describe_instances)
        .match_requests(move |r| filtered(r) && r.next_token().is_none())
        .then_output(|| {
            DescribeInstancesOutput::builder()
                .reservations(
                    Reservation::builder()
                        .instances(described("i-01", Some("0"), InstanceStateName::Running))
                        .instances(described("i-02", None, InstanceStateName::Pending))
                        .build(),
                )
                .next_token("page-2")
                .build()
        });
    let second = mock!(Client::describe_instances)
        .match_requests(move |r| filtered(r) && r.next_token() == Some("page-2"))
        .then_output(|| {
            DescribeInstancesOutput::builder()
                .reservations(
                    Reservation::builder()
                        .instances(described("i-03", Some("2"), InstanceStateName::Stopped))
                        .instances(described("i-04", Some("3"), InstanceStateName::Terminated))
                        .build(),
                )
                .build()
        });
    let p = provider(&[&first, &second]);
    let instances = p.instances(CONTROLLER).await.unwrap();
    let seen: Vec<(&str, Option<String>, InstanceState)> = instances
        .iter()
        .map(|i| (i.id.as_str(), i.machine.map(|m| m.to_string()), i.state))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("i-01", Some("0".to_string()), InstanceState::Running),
            ("i-02", None, InstanceState::Pending),
            ("i-03", Some("2".to_string()), InstanceState::Stopped),
        ]
    );
    assert_eq!(instances[0].zone, "us-east-1b");
    assert_eq!(instances[0].instance_type, "t3a.medium");
    assert_eq!(instances[0].hardware.mem_mib, Some(4096));
    assert_eq!(first.num_calls(), 1);
    assert_eq!(second.num_calls(), 1);
}

#[tokio::test]
async fn a_failed_listing_is_classified() {
    let throttled = mock!(Client::describe_instances)
        .then_http_response(|| ec2_error(503, "RequestLimitExceeded", "Request limit exceeded."));
    let p = provider(&[&throttled]);
    let error = p.instances(CONTROLLER).await.unwrap_err();
    assert_eq!(error.class, FailureClass::Transient);
    assert!(error.message.starts_with("RequestLimitExceeded"));
}

#[tokio::test]
async fn zones_are_the_regions_availability_zones_healthy_when_available() {
    let zones = mock!(Client::describe_availability_zones).then_output(|| {
        DescribeAvailabilityZonesOutput::builder()
            .availability_zones(
                AvailabilityZone::builder()
                    .zone_name("us-east-1b")
                    .zone_type("availability-zone")
                    .state(AvailabilityZoneState::Impaired)
                    .messages(
                        AvailabilityZoneMessage::builder()
                            .message("power event")
                            .build(),
                    )
                    .build(),
            )
            .availability_zones(
                AvailabilityZone::builder()
                    .zone_name("us-east-1a")
                    .zone_type("availability-zone")
                    .state(AvailabilityZoneState::Available)
                    .build(),
            )
            .availability_zones(
                AvailabilityZone::builder()
                    .zone_name("us-east-1-bos-1a")
                    .zone_type("local-zone")
                    .state(AvailabilityZoneState::Available)
                    .build(),
            )
            .build()
    });
    let p = provider(&[&zones]);
    assert_eq!(
        p.zones().await.unwrap(),
        vec![
            ProviderZone {
                name: "us-east-1a".into(),
                available: true,
                reason: String::new()
            },
            ProviderZone {
                name: "us-east-1b".into(),
                available: false,
                reason: "EC2 reports the zone impaired: power event".into()
            },
        ]
    );
}

#[tokio::test]
async fn opening_reads_every_page_of_instance_types_and_offerings() {
    let types_page = |names: &[&str], next: Option<&str>| {
        let mut out =
            DescribeInstanceTypesOutput::builder().set_next_token(next.map(str::to_string));
        for name in names {
            out = out.instance_types(
                InstanceTypeInfo::builder()
                    .instance_type(aws_sdk_ec2::types::InstanceType::from(*name))
                    .build(),
            );
        }
        out.build()
    };
    let types_1 = mock!(Client::describe_instance_types)
        .match_requests(|r| r.next_token().is_none() && r.max_results() == Some(100))
        .then_output(move || types_page(&["t3a.medium", "m5.large"], Some("t-2")));
    let types_2 = mock!(Client::describe_instance_types)
        .match_requests(|r| r.next_token() == Some("t-2"))
        .then_output(move || types_page(&["t3.medium"], None));
    let offering = |t: &str, zone: &str| {
        InstanceTypeOffering::builder()
            .instance_type(aws_sdk_ec2::types::InstanceType::from(t))
            .location(zone)
            .build()
    };
    let offers_1 = mock!(Client::describe_instance_type_offerings)
        .match_requests(|r| {
            r.next_token().is_none() && r.location_type() == Some(&LocationType::AvailabilityZone)
        })
        .then_output(move || {
            DescribeInstanceTypeOfferingsOutput::builder()
                .instance_type_offerings(offering("t3a.medium", "us-east-1a"))
                .instance_type_offerings(offering("m5.large", "us-east-1a"))
                .next_token("o-2")
                .build()
        });
    let offers_2 = mock!(Client::describe_instance_type_offerings)
        .match_requests(|r| r.next_token() == Some("o-2"))
        .then_output(move || {
            DescribeInstanceTypeOfferingsOutput::builder()
                .instance_type_offerings(offering("t3.medium", "us-east-1b"))
                .build()
        });
    let p = Ec2Provider::open_with_client(
        config(),
        client(&[&types_1, &types_2, &offers_1, &offers_2]),
    )
    .await
    .unwrap();
    assert_eq!(p.catalogue().len(), 3);
    assert!(p.offers("us-east-1a", "m5.large"));
    assert!(p.offers("us-east-1b", "t3.medium"));
    assert!(!p.offers("us-east-1b", "t3a.medium"));
    assert_eq!(types_2.num_calls(), 1);
    assert_eq!(offers_2.num_calls(), 1);
}

#[tokio::test]
async fn a_subnet_the_region_does_not_have_is_refused_at_open() {
    let types = mock!(Client::describe_instance_types)
        .then_output(|| DescribeInstanceTypesOutput::builder().build());
    let offers = mock!(Client::describe_instance_type_offerings)
        .then_output(|| DescribeInstanceTypeOfferingsOutput::builder().build());
    let subnets = mock!(Client::describe_subnets).then_output(|| {
        aws_sdk_ec2::operation::describe_subnets::DescribeSubnetsOutput::builder().build()
    });
    let mut config = config();
    config.subnet_ids = vec!["subnet-0gone".to_string()];
    let error = Ec2Provider::open_with_client(config, client(&[&types, &offers, &subnets]))
        .await
        .err()
        .unwrap();
    assert_eq!(
        error.to_string(),
        "subnet subnet-0gone was not found in the region"
    );
}

/// Hears a launch's answer, as a machine actor would.
struct LaunchListener(Option<tokio::sync::oneshot::Sender<Result<Instance, ProviderError>>>);

impl actix::Actor for LaunchListener {
    type Context = actix::Context<Self>;
}

impl actix::Handler<InstanceStarted> for LaunchListener {
    type Result = ();

    fn handle(&mut self, msg: InstanceStarted, _ctx: &mut actix::Context<Self>) {
        if let Some(answer) = self.0.take() {
            let _ = answer.send(Ok(msg.0));
        }
    }
}

impl actix::Handler<InstanceFailed> for LaunchListener {
    type Result = ();

    fn handle(&mut self, msg: InstanceFailed, _ctx: &mut actix::Context<Self>) {
        if let Some(answer) = self.0.take() {
            let _ = answer.send(Err(msg.0));
        }
    }
}

#[tokio::test]
async fn a_launch_with_a_loopback_controller_url_is_refused_before_any_call() {
    let run = mock!(Client::run_instances).then_output(|| RunInstancesOutput::builder().build());
    let p = provider_with(config(), facts(), &[&run]);
    let mut loopback = request("1", "us-east-1a", "t3a.medium");
    loopback.agent.controller_url = "http://127.0.0.1:17070".to_string();
    let error = p.launch(vec![loopback]).await.remove(0).unwrap_err();
    assert_eq!(error.class, FailureClass::Permanent);
    assert!(
        error
            .message
            .starts_with("controller_url \"http://127.0.0.1:17070\" names a loopback address"),
        "{}",
        error.message
    );
    assert_eq!(run.num_calls(), 0);
}

#[tokio::test]
async fn without_an_agent_binary_nothing_is_launched() {
    let run = mock!(Client::run_instances).then_output(|| RunInstancesOutput::builder().build());
    let mut without = config();
    without.image_has_agent = false;
    let p = provider_with(without, facts(), &[&run]);
    let results = p
        .launch(vec![
            request("1", "us-east-1a", "t3a.medium"),
            request("2", "us-east-1a", "t3a.medium"),
        ])
        .await;
    assert_eq!(results.len(), 2);
    for result in results {
        let error = result.unwrap_err();
        assert_eq!(error.class, FailureClass::Permanent);
        assert!(
            error.message.contains("provider.ec2.agent_binary_url"),
            "{}",
            error.message
        );
    }
    assert_eq!(run.num_calls(), 0);
}

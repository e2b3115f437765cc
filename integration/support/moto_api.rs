//! Looking at moto's EC2 server as a test does: the SDK client, the
//! instances with berth's tags, and an agent's one-time password from its
//! instance's user data (nothing boots in moto, so tests check agents in
//! themselves).

use std::collections::BTreeMap;

use aws_config::BehaviorVersion;
use aws_sdk_ec2::config::{Credentials, Region};
use aws_sdk_ec2::types::{Filter, InstanceAttributeName};
use aws_sdk_ec2::Client;
use berth::contracts::provider::tags;
use berth::domain::names::MachineId;
use berth::providers::ec2::user_data;

use crate::support::moto;

/// The region the tests use. Its zone ca-central-1d (in moto's data, as in
/// AWS's) does not offer t3a.medium, the cheapest type for `mem=4G`
/// elsewhere.
pub const REGION: &str = "ca-central-1";

/// The SDK's configuration with moto's test credentials.
pub async fn sdk_config() -> aws_config::SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .credentials_provider(Credentials::new(
            "testing",
            "testing",
            None,
            None,
            "berth-tests",
        ))
        .region(Region::new(REGION))
        .load()
        .await
}

/// A client of moto for the test's own look.
pub async fn moto_client() -> Client {
    let sdk = sdk_config().await;
    let config = aws_sdk_ec2::config::Builder::from(&sdk)
        .endpoint_url(moto::endpoint())
        .build();
    Client::from_conf(config)
}

/// Some image moto has; which one does not matter, as nothing boots.
pub async fn any_image(client: &Client) -> String {
    let images = client
        .describe_images()
        .owners("099720109477")
        .send()
        .await
        .unwrap();
    images.images()[0].image_id().unwrap().to_string()
}

/// An instance as moto has it.
#[derive(Debug, Clone)]
pub struct MotoInstance {
    pub id: String,
    pub zone: String,
    pub instance_type: String,
    pub state: String,
    pub tags: BTreeMap<String, String>,
    /// Public, then private, as moto reports them.
    pub addresses: Vec<String>,
}

/// Every instance moto has with this controller's tag, in any state.
pub async fn moto_instances(client: &Client, controller: &str) -> Vec<MotoInstance> {
    let found = client
        .describe_instances()
        .filters(
            Filter::builder()
                .name(format!("tag:{}", tags::CONTROLLER))
                .values(controller)
                .build(),
        )
        .send()
        .await
        .unwrap();
    let mut instances: Vec<MotoInstance> = found
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .map(|i| MotoInstance {
            id: i.instance_id().unwrap().to_string(),
            zone: i
                .placement()
                .and_then(|p| p.availability_zone())
                .unwrap_or("")
                .to_string(),
            instance_type: i.instance_type().unwrap().as_str().to_string(),
            state: i
                .state()
                .and_then(|s| s.name())
                .unwrap()
                .as_str()
                .to_string(),
            tags: i
                .tags()
                .iter()
                .map(|t| {
                    (
                        t.key().unwrap().to_string(),
                        t.value().unwrap_or("").to_string(),
                    )
                })
                .collect(),
            addresses: [i.public_ip_address(), i.private_ip_address()]
                .into_iter()
                .flatten()
                .map(str::to_string)
                .collect(),
        })
        .collect();
    instances.sort_by(|a, b| a.id.cmp(&b.id));
    instances
}

pub fn live(instances: &[MotoInstance]) -> Vec<&MotoInstance> {
    instances
        .iter()
        .filter(|i| i.state != "terminated" && i.state != "shutting-down")
        .collect()
}

/// The one-time password in the user data moto keeps for `machine`'s
/// instance `instance`, which `berth agent` would check in with.
pub async fn agent_password(client: &Client, machine: MachineId, instance: &str) -> String {
    let attribute = client
        .describe_instance_attribute()
        .instance_id(instance)
        .attribute(InstanceAttributeName::UserData)
        .send()
        .await
        .unwrap();
    let encoded = attribute.user_data().and_then(|v| v.value()).unwrap();
    let text = String::from_utf8(aws_smithy_types::base64::decode(encoded).unwrap()).unwrap();
    assert!(
        text.contains(&format!("BERTH_MACHINE={machine}\n")),
        "{text}"
    );
    // A restarted agent checks in with the credential it kept there.
    assert!(
        text.contains(&format!(
            " --credential-file {}\n",
            user_data::AGENT_CREDENTIAL_FILE
        )),
        "{text}"
    );
    user_data::password_in(&text)
        .expect("a password in the user data")
        .to_string()
}

//! The Amazon EC2 provider (cargo feature `ec2`, on by default).
//!
//! It launches, lists and terminates EC2 instances through the AWS SDK,
//! in one region, with credentials from the standard AWS chain
//! (environment, profile, SSO, instance role); berth stores none.
//! `endpoint_url` points it at another EC2 API (moto, LocalStack, a VPC
//! endpoint). The settings are [`Ec2Config`] (`[provider.ec2]`).
//!
//! - [`config`]: `[provider.ec2]`, parsed once.
//! - [`errors`]: EC2's error codes as [`FailureClass`]es.
//! - [`user_data`]: the cloud-init that starts the machine agent.
//! - [`preflight`]: what instances need (a reachable controller URL, an
//!   agent binary), checked at start and before the first launch.
//! - [`prices`]: AWS's price list (the offer file), when `price_list` names
//!   one.
//!
//! # What it reads at open
//!
//! [`Ec2Provider::open`] lists the region's instance types
//! (DescribeInstanceTypes) and where each is offered
//! (DescribeInstanceTypeOfferings by availability zone), both paginated,
//! and the configured subnets' zones (DescribeSubnets). The catalogue is
//! berth's embedded one (prices included, or AWS's price list's when
//! configured) restricted to the types the region has; [`Provider::offers`] says whether a type is offered in a
//! zone and not refused there lately.
//!
//! # Launching
//!
//! One RunInstances per machine, with MinCount = MaxCount = 1, the zone
//! (Placement, and the zone's subnet when subnets are configured), the
//! type, the image, the root volume's size (`root-disk`, as a block device
//! mapping on the image's root device), the public IP choice
//! (`allocate-public-ip`, on the primary network interface), berth's tags
//! on the instance and its volumes, the user data, and a ClientToken: the
//! SHA-256 of the engine's client token, in hex (64 characters, EC2's
//! limit), so that a repeated call returns the first call's instance
//! instead of starting another. The provider also remembers the tokens it
//! launched for an hour, so a repeat within the process costs no call.
//!
//! ## Why one RunInstances per machine
//!
//! The broker hands over launches of the same zone, type, base and image
//! that are ready together as one [`Provider::launch`] call (up to
//! [`MAX_LAUNCH_BATCH`]). One RunInstances with MaxCount = N would start
//! them in one request, but every instance of it gets the same user data,
//! and each machine's user data carries its own machine id and one-time
//! password. Sharing one user data would mean handing each instance a
//! password it fetches later, proven only by a secret all N instances
//! share, so any of them could take another's identity; making that safe
//! needs AWS's signed instance identity documents, which nothing here can
//! test. So a batch is sent as N RunInstances calls at once, each with
//! its own user data and ClientToken, and each request gets its own
//! result, in request order: a batch can partly succeed. The batch still
//! saves work: the image is looked up and checked once for all of it.
//! A batch is at most RunInstances' burst of 5 requests, and the broker
//! takes one launch token per RunInstances it makes
//! ([`Provider::launch_requests`]), so the broker's launch bucket counts
//! what AWS's request bucket counts; what throttling remains is retried by
//! the broker with the same ClientTokens.
//!
//! # Images
//!
//! A machine boots the image its `image-id` constraint names, else the
//! one `[provider.ec2.images]` names for its base and architecture, else
//! the newest (by CreationDate) available image of
//! `image_lookup.owner` (Canonical's account by default) whose name matches
//! `image_lookup.name_pattern` (`ubuntu/images/hvm-ssd*/ubuntu-<series>-<version>-<arch>-server-*`).
//! Lookups and each image's root device name are cached for the life of
//! the provider. An image that does not exist fails the launch
//! permanently.
//!
//! # Failures
//!
//! See [`errors`] for the classes. A refusal of a type in a zone
//! (capacity, not offered) also marks that type unavailable in that zone
//! for [`UNAVAILABLE_FOR`]: the engine moves the machine to the next zone
//! at once, and meanwhile chooses another type for launches in that zone.
//!
//! # Instances
//!
//! [`Provider::instances`] is DescribeInstances filtered on the
//! `berth-controller` tag and on every state but `terminated`, paginated;
//! stopped instances are reported `stopped`, so that an instance stopped
//! or terminated behind berth's back shows in status (with the EventBridge
//! webhook, which the API turns into instance changes).
//! TerminateInstances takes up to [`TERMINATE_BATCH`] ids a call; an id
//! EC2 no longer knows counts as terminated.
//!
//! # Caveats
//!
//! - No containers: `container=lxd` machines fail permanently.
//! - `spaces`, `virt-type` and `root-disk-source` are not honoured (they
//!   are reported as warnings), nor is the image's risk: `ubuntu@24.04/edge`
//!   is looked up like `ubuntu@24.04`.
//! - Instances that AWS stops are reported `stopped`; berth does not
//!   start them again.

pub mod config;
pub mod errors;
pub mod preflight;
pub mod prices;
pub mod user_data;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use aws_sdk_ec2::config::retry::RetryConfig;
use aws_sdk_ec2::config::{BehaviorVersion, Region};
use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_sdk_ec2::types::{
    BlockDeviceMapping, EbsBlockDevice, Filter, IamInstanceProfileSpecification,
    InstanceNetworkInterfaceSpecification, InstanceStateName, InstanceType as Ec2InstanceType,
    LocationType, Placement, ResourceType, Tag, TagSpecification,
};
use aws_sdk_ec2::Client;
use sha2::{Digest, Sha256};

use crate::contracts::provider::ProviderZone;
use crate::contracts::provider::{tags, FailureClass, LaunchRequest, Provider, ProviderError};
use crate::domain::constraints::Key;
use crate::domain::hardware::Hardware;
use crate::domain::instance::{Instance, InstanceState};
use crate::domain::instance_types::{Catalogue, CatalogueError};
use crate::domain::names::MachineId;

pub use config::{Ec2Config, Ec2ConfigError, ImageKey, ImageLookup};

/// The most launches one [`Provider::launch`] call carries: RunInstances'
/// burst in AWS's published request limits.
pub const MAX_LAUNCH_BATCH: usize = 5;

/// The most instance ids one TerminateInstances call carries (AWS's limit).
pub const TERMINATE_BATCH: usize = 1000;

/// How long a type refused in a zone (capacity, not offered) is not
/// launched there again.
pub const UNAVAILABLE_FOR: Duration = Duration::from_secs(5 * 60);

/// How long the provider remembers the instance it launched for a client
/// token, so that a repeated launch returns it without calling EC2.
pub const LAUNCH_MEMORY: Duration = Duration::from_secs(60 * 60);

/// The most client tokens remembered at once.
const LAUNCH_MEMORY_ENTRIES: usize = 10_000;

/// DescribeInstanceTypes' largest page.
const INSTANCE_TYPES_PAGE: i32 = 100;
/// DescribeInstanceTypeOfferings' and DescribeInstances' largest page.
const LARGE_PAGE: i32 = 1000;

/// The constraint keys EC2 honours. `container` (no lxd here), `spaces`,
/// `virt-type` and `root-disk-source` are not among them.
const SUPPORTED_CONSTRAINTS: [Key; 12] = [
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
];

/// The `instance-role` with which Juju makes a role of its own; berth
/// attaches only instance profiles that exist.
const AUTO_ROLE: &str = "auto";

/// Every instance state but `terminated`, for DescribeInstances' filter.
const LIVE_STATES: [&str; 5] = ["pending", "running", "shutting-down", "stopping", "stopped"];

/// Why the EC2 provider could not open.
#[derive(Debug, thiserror::Error)]
pub enum Ec2Error {
    #[error(transparent)]
    Config(#[from] Ec2ConfigError),
    #[error("the embedded catalogue is broken: {0}")]
    Catalogue(#[source] CatalogueError),
    #[error("cannot {what}: {source}")]
    Api {
        what: &'static str,
        #[source]
        source: ProviderError,
    },
    #[error("subnet {0} was not found in the region")]
    UnknownSubnet(String),
    #[error("subnets {first} and {second} are both in zone {zone}: expected at most one subnet per zone")]
    TwoSubnetsInZone {
        zone: String,
        first: String,
        second: String,
    },
}

/// EC2's ClientToken for an engine's client token: its SHA-256 in hex,
/// 64 ASCII characters (EC2's limit), the same for the same token.
pub fn client_token(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Locks `mutex`, taking over its value if a holder panicked: every value
/// kept under these locks is a cache that is whole after any one write.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the provider learnt of the region at open.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RegionFacts {
    /// The instance types the region has.
    pub instance_types: HashSet<String>,
    /// The instance types each zone offers.
    pub offerings: HashMap<String, HashSet<String>>,
    /// The configured subnet of each zone.
    pub subnets: BTreeMap<String, String>,
}

/// What a launch needs of its image.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ImageInfo {
    id: String,
    root_device: Option<String>,
}

/// One launch, ready to send.
struct Prepared {
    request: LaunchRequest,
    image: ImageInfo,
}

/// The EC2 provider. See the [module documentation](self).
pub struct Ec2Provider {
    client: Client,
    config: Ec2Config,
    catalogue: Catalogue,
    facts: RegionFacts,
    /// Types refused in a zone, and until when: by zone, then type, so
    /// that `offers` looks up without allocating.
    unavailable: Mutex<HashMap<String, HashMap<String, Instant>>>,
    /// Images found by lookup, by base and architecture.
    looked_up: Mutex<HashMap<ImageKey, String>>,
    /// Images checked to exist, with their root device.
    images: Mutex<HashMap<String, ImageInfo>>,
    /// The instance launched for each client token, and when.
    launched: Mutex<HashMap<String, (Instance, Instant)>>,
    /// Set once the agent binary is known to be there (see
    /// [`preflight::check_agent_binary`]); checked again until it is.
    agent_binary_checked: tokio::sync::OnceCell<()>,
}

impl Ec2Provider {
    /// Opens the provider for `config` with credentials from the standard
    /// AWS chain, and reads the region (see the module documentation).
    ///
    /// # Errors
    ///
    /// [`Ec2Error::Api`] when EC2 cannot be reached or refuses the calls
    /// (no credentials included), [`Ec2Error::UnknownSubnet`] and
    /// [`Ec2Error::TwoSubnetsInZone`] for unusable subnets.
    pub async fn open(config: Ec2Config) -> Result<Ec2Provider, Ec2Error> {
        let sdk = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new(config.region.clone()))
            .load()
            .await;
        Ec2Provider::open_with(config, &sdk).await
    }

    /// Like [`Ec2Provider::open`], with the credentials (and other SDK
    /// settings) of `sdk`; the region and endpoint are still `config`'s.
    ///
    /// # Errors
    ///
    /// As [`Ec2Provider::open`].
    pub async fn open_with(
        config: Ec2Config,
        sdk: &aws_config::SdkConfig,
    ) -> Result<Ec2Provider, Ec2Error> {
        let mut builder = aws_sdk_ec2::config::Builder::from(sdk)
            .region(Region::new(config.region.clone()))
            .retry_config(RetryConfig::standard());
        if let Some(url) = &config.endpoint_url {
            builder = builder.endpoint_url(url);
        }
        let client = Client::from_conf(builder.build());
        Ec2Provider::open_with_client(config, client).await
    }

    /// Opens the provider on an existing client.
    ///
    /// # Errors
    ///
    /// As [`Ec2Provider::open`].
    pub async fn open_with_client(
        config: Ec2Config,
        client: Client,
    ) -> Result<Ec2Provider, Ec2Error> {
        let facts = read_region(&client, &config).await?;
        Ec2Provider::from_facts(config, client, facts)
    }

    /// A provider that knows `facts` of its region without asking.
    ///
    /// # Errors
    ///
    /// [`Ec2Error::Catalogue`] only.
    pub fn from_facts(
        config: Ec2Config,
        client: Client,
        facts: RegionFacts,
    ) -> Result<Ec2Provider, Ec2Error> {
        let embedded = Catalogue::embedded().map_err(|e| Ec2Error::Catalogue(e.clone()))?;
        let catalogue = Catalogue::new(
            embedded
                .types()
                .iter()
                .filter(|t| facts.instance_types.contains(&t.name))
                .cloned()
                .map(|mut t| {
                    if let Some(price) = config.prices.get(&t.name) {
                        t.price = *price;
                    }
                    t
                })
                .collect(),
        )
        .map_err(Ec2Error::Catalogue)?;
        let unpriced = facts
            .instance_types
            .iter()
            .filter(|t| embedded.get(t).is_none())
            .count();
        let listed = catalogue
            .types()
            .iter()
            .filter(|t| config.prices.contains_key(&t.name))
            .count();
        log::info!(
            "ec2 {}: {} instance types with prices in {} zones ({unpriced} types without a price are not used; {listed} priced from the configured price list)",
            config.region,
            catalogue.len(),
            facts.offerings.len()
        );
        Ok(Ec2Provider {
            client,
            config,
            catalogue,
            facts,
            unavailable: Mutex::new(HashMap::new()),
            looked_up: Mutex::new(HashMap::new()),
            images: Mutex::new(HashMap::new()),
            launched: Mutex::new(HashMap::new()),
            agent_binary_checked: tokio::sync::OnceCell::new(),
        })
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn config(&self) -> &Ec2Config {
        &self.config
    }

    /// Whether `zone` offers `instance_type` and has not refused it within
    /// [`UNAVAILABLE_FOR`] of `now`.
    pub fn offers_at(&self, zone: &str, instance_type: &str, now: Instant) -> bool {
        let offered = self
            .facts
            .offerings
            .get(zone)
            .is_some_and(|types| types.contains(instance_type));
        if !offered {
            return false;
        }
        let mut unavailable = lock(&self.unavailable);
        let Some(refused) = unavailable.get_mut(zone) else {
            return true;
        };
        match refused.get(instance_type) {
            Some(until) if *until > now => false,
            Some(_) => {
                refused.remove(instance_type);
                true
            }
            None => true,
        }
    }

    /// Marks `instance_type` unavailable in `zone` for [`UNAVAILABLE_FOR`]
    /// from `now`.
    pub fn mark_unavailable_at(&self, zone: &str, instance_type: &str, now: Instant) {
        log::info!(
            "ec2: not launching {instance_type} in {zone} for {}s",
            UNAVAILABLE_FOR.as_secs()
        );
        lock(&self.unavailable)
            .entry(zone.to_string())
            .or_default()
            .insert(instance_type.to_string(), now + UNAVAILABLE_FOR);
    }

    /// The image for machines of `key`: the configured one, else the
    /// newest match of the lookup (cached).
    async fn image_for(&self, key: ImageKey) -> Result<String, ProviderError> {
        if let Some(image) = self.config.images.get(&key) {
            return Ok(image.clone());
        }
        if let Some(image) = lock(&self.looked_up).get(&key) {
            return Ok(image.clone());
        }
        let lookup = &self.config.image_lookup;
        let Some(name) = lookup.name_for(key) else {
            return Err(ProviderError::new(
                FailureClass::Permanent,
                format!(
                    "no image for {key}: its base has no series name to look it up by; \
                     set one in [provider.ec2.images]"
                ),
            ));
        };
        let found = self
            .client
            .describe_images()
            .owners(&lookup.owner)
            .filters(Filter::builder().name("name").values(&name).build())
            .filters(Filter::builder().name("state").values("available").build())
            .send()
            .await
            .map_err(|e| errors::provider_error("DescribeImages", &e))?;
        let newest = found
            .images()
            .iter()
            .filter_map(|image| Some((image.creation_date().unwrap_or(""), image.image_id()?)))
            .max();
        let Some((_, image)) = newest else {
            return Err(ProviderError::new(
                FailureClass::Permanent,
                format!(
                    "no image for {key}: owner {} has no available image named {name:?}; \
                     set one in [provider.ec2.images]",
                    lookup.owner
                ),
            ));
        };
        log::info!("ec2: {key} boots {image} ({name})");
        lock(&self.looked_up).insert(key, image.to_string());
        Ok(image.to_string())
    }

    /// Checks that `image` exists and learns its root device (cached).
    async fn image_info(&self, image: &str) -> Result<ImageInfo, ProviderError> {
        if let Some(info) = lock(&self.images).get(image) {
            return Ok(info.clone());
        }
        let found = self
            .client
            .describe_images()
            .image_ids(image)
            .send()
            .await
            .map_err(|e| errors::provider_error("DescribeImages", &e))?;
        let Some(described) = found.images().iter().find(|i| i.image_id() == Some(image)) else {
            return Err(ProviderError::new(
                FailureClass::Permanent,
                format!("InvalidAMIID.NotFound: The image id '[{image}]' does not exist"),
            ));
        };
        let info = ImageInfo {
            id: image.to_string(),
            root_device: described.root_device_name().map(str::to_string),
        };
        lock(&self.images).insert(image.to_string(), info.clone());
        Ok(info)
    }

    /// Everything a request needs before RunInstances: its image.
    /// `seen` holds this batch's images (or why there is none) by what
    /// chose them, so that a batch asks EC2 about its image once even when
    /// the answer is an error.
    async fn prepare(
        &self,
        request: LaunchRequest,
        seen: &mut HashMap<(Option<String>, ImageKey), Result<ImageInfo, ProviderError>>,
    ) -> Result<Prepared, ProviderError> {
        if let Some(host) = &request.host_instance {
            return Err(ProviderError::new(
                FailureClass::Permanent,
                format!("the ec2 provider cannot start containers (on {host})"),
            ));
        }
        // Before anything is asked of EC2: an instance told to reach a
        // loopback controller could only time out.
        preflight::check_controller_url(Some(&request.agent.controller_url), "")
            .map_err(|e| ProviderError::new(FailureClass::Permanent, e.to_string()))?;
        let Some(instance_type) = self.catalogue.get(&request.instance_type) else {
            return Err(ProviderError::new(
                FailureClass::Permanent,
                format!(
                    "InvalidInstanceType: {} is not an instance type of region {}",
                    request.instance_type, self.config.region
                ),
            ));
        };
        let key = ImageKey {
            base: request.base,
            arch: instance_type.arch,
        };
        let named = request.requirements.image_id.clone();
        let image = match seen.get(&(named.clone(), key)) {
            Some(found) => found.clone(),
            None => {
                let found = match &named {
                    Some(image) => self.image_info(image).await,
                    None => match self.image_for(key).await {
                        Ok(image) => self.image_info(&image).await,
                        Err(e) => Err(e),
                    },
                };
                seen.insert((named, key), found.clone());
                found
            }
        }?;
        Ok(Prepared { request, image })
    }

    fn remembered(&self, token: &str) -> Option<Instance> {
        let launched = lock(&self.launched);
        launched
            .get(token)
            .filter(|(_, at)| at.elapsed() < LAUNCH_MEMORY)
            .map(|(instance, _)| instance.clone())
    }

    fn remember(&self, token: String, instance: Instance) {
        let mut launched = lock(&self.launched);
        launched.retain(|_, (_, at)| at.elapsed() < LAUNCH_MEMORY);
        if launched.len() >= LAUNCH_MEMORY_ENTRIES {
            if let Some(oldest) = launched
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(token, _)| token.clone())
            {
                launched.remove(&oldest);
            }
        }
        launched.insert(token, (instance, Instant::now()));
    }

    /// One RunInstances for one machine.
    async fn run_one(&self, prepared: Prepared) -> Result<Instance, ProviderError> {
        let Prepared { request, image } = prepared;
        let token = client_token(&request.client_token);
        if let Some(instance) = self.remembered(&token) {
            return Ok(instance);
        }
        let subnet = self.facts.subnets.get(&request.zone);
        if !self.config.subnet_ids.is_empty() && subnet.is_none() {
            return Err(ProviderError::new(
                FailureClass::ZoneSpecific,
                format!(
                    "no configured subnet is in zone {}: add one to provider.ec2.subnet_ids",
                    request.zone
                ),
            ));
        }
        if request.requirements.instance_role.as_deref() == Some(AUTO_ROLE) {
            return Err(ProviderError::new(
                FailureClass::Permanent,
                "instance-role=auto is not supported: berth does not create IAM roles; name an \
                 existing instance profile (instance-role=<name>)"
                    .to_string(),
            ));
        }
        let user_data = user_data::cloud_config(
            &request.agent.controller_url,
            request.machine,
            request.agent.one_time_password.expose(),
            self.config.agent_binary_url.as_deref(),
            request.agent.ca_cert.as_deref(),
        )
        .map_err(|e| ProviderError::new(FailureClass::Permanent, e.to_string()))?;
        let mut call = self
            .client
            .run_instances()
            .image_id(&image.id)
            .instance_type(Ec2InstanceType::from(request.instance_type.as_str()))
            .min_count(1)
            .max_count(1)
            .client_token(&token)
            .placement(
                Placement::builder()
                    .availability_zone(&request.zone)
                    .build(),
            )
            .user_data(aws_smithy_types::base64::encode(user_data.as_bytes()))
            .set_key_name(self.config.key_name.clone())
            .set_iam_instance_profile(request.requirements.instance_role.as_ref().map(|name| {
                IamInstanceProfileSpecification::builder()
                    .name(name)
                    .build()
            }));
        for resource in [ResourceType::Instance, ResourceType::Volume] {
            let mut spec = TagSpecification::builder().resource_type(resource);
            for (key, value) in &request.tags {
                spec = spec.tags(Tag::builder().key(key).value(value).build());
            }
            call = call.tag_specifications(spec.build());
        }
        match request.requirements.allocate_public_ip {
            Some(public) => {
                // A public IP choice lives on the primary interface, which
                // then carries the subnet and security groups too.
                call = call.network_interfaces(
                    InstanceNetworkInterfaceSpecification::builder()
                        .device_index(0)
                        .associate_public_ip_address(public)
                        .delete_on_termination(true)
                        .set_subnet_id(subnet.cloned())
                        .set_groups(
                            (!self.config.security_group_ids.is_empty())
                                .then(|| self.config.security_group_ids.clone()),
                        )
                        .build(),
                );
            }
            None => {
                call = call.set_subnet_id(subnet.cloned()).set_security_group_ids(
                    (!self.config.security_group_ids.is_empty())
                        .then(|| self.config.security_group_ids.clone()),
                );
            }
        }
        if let Some(mib) = request.requirements.root_disk_mib {
            let Some(device) = &image.root_device else {
                return Err(ProviderError::new(
                    FailureClass::Permanent,
                    format!(
                        "image {} names no root device, so root-disk cannot be set",
                        image.id
                    ),
                ));
            };
            let gib = i32::try_from(mib.div_ceil(1024)).unwrap_or(i32::MAX);
            call = call.block_device_mappings(
                BlockDeviceMapping::builder()
                    .device_name(device)
                    .ebs(
                        EbsBlockDevice::builder()
                            .volume_size(gib)
                            .delete_on_termination(true)
                            .build(),
                    )
                    .build(),
            );
        }
        let output = match call.send().await {
            Ok(output) => output,
            Err(e) => {
                let error = errors::provider_error("RunInstances", &e);
                if let Some(code) = errors::code_of(&e) {
                    let message = e.message().unwrap_or("");
                    if error.class == FailureClass::ZoneSpecific
                        && errors::marks_type_unavailable(code, message)
                    {
                        self.mark_unavailable_at(
                            &request.zone,
                            &request.instance_type,
                            Instant::now(),
                        );
                    }
                }
                return Err(error);
            }
        };
        let Some(started) = output.instances().first() else {
            return Err(ProviderError::new(
                FailureClass::Transient,
                "RunInstances answered without an instance",
            ));
        };
        let mut instance = self.instance_of(started).ok_or_else(|| {
            ProviderError::new(
                FailureClass::Transient,
                "RunInstances answered with an instance without an id",
            )
        })?;
        if instance.zone.is_empty() {
            instance.zone = request.zone.clone();
        }
        instance.machine = Some(request.machine);
        instance.instance_type = request.instance_type.clone();
        instance.hardware = match self.catalogue.get(&request.instance_type) {
            Some(t) => Hardware::of(t, &instance.zone, request.requirements.root_disk_mib),
            None => instance.hardware,
        };
        log::info!(
            "ec2: machine {} is instance {} ({} in {})",
            request.machine,
            instance.id,
            instance.instance_type,
            instance.zone
        );
        self.remember(token, instance.clone());
        Ok(instance)
    }

    /// An EC2 instance as berth sees it.
    fn instance_of(&self, described: &aws_sdk_ec2::types::Instance) -> Option<Instance> {
        let id = described.instance_id()?.to_string();
        let zone = described
            .placement()
            .and_then(|p| p.availability_zone())
            .unwrap_or("")
            .to_string();
        let instance_type = described
            .instance_type()
            .map(|t| t.as_str().to_string())
            .unwrap_or_default();
        let machine = described
            .tags()
            .iter()
            .find(|t| t.key() == Some(tags::MACHINE))
            .and_then(|t| t.value())
            .and_then(|v| v.parse::<MachineId>().ok());
        let state = match described.state().and_then(|s| s.name()) {
            Some(InstanceStateName::Running) => InstanceState::Running,
            Some(InstanceStateName::ShuttingDown) => InstanceState::ShuttingDown,
            Some(InstanceStateName::Terminated) => InstanceState::Terminated,
            Some(InstanceStateName::Stopping) => InstanceState::Stopping,
            Some(InstanceStateName::Stopped) => InstanceState::Stopped,
            _ => InstanceState::Pending,
        };
        let hardware = match self.catalogue.get(&instance_type) {
            Some(t) => Hardware::of(t, &zone, None),
            None => Hardware {
                zone: (!zone.is_empty()).then(|| zone.clone()),
                ..Hardware::default()
            },
        };
        Some(Instance {
            id,
            machine,
            zone,
            instance_type,
            state,
            hardware,
            addresses: [
                described.public_ip_address(),
                described.private_ip_address(),
            ]
            .into_iter()
            .flatten()
            .map(str::to_string)
            .collect(),
        })
    }

    /// Terminates one chunk of at most [`TERMINATE_BATCH`] ids.
    async fn terminate_chunk(&self, ids: &[String]) -> Vec<Result<(), ProviderError>> {
        let mut results: Vec<Option<Result<(), ProviderError>>> = vec![None; ids.len()];
        // Each round settles at least one id, or all of them.
        loop {
            let pending: Vec<usize> = (0..ids.len()).filter(|&i| results[i].is_none()).collect();
            if pending.is_empty() {
                break;
            }
            let call = self
                .client
                .terminate_instances()
                .set_instance_ids(Some(pending.iter().map(|&i| ids[i].clone()).collect()))
                .send()
                .await;
            let e = match call {
                Ok(_) => {
                    for i in pending {
                        results[i] = Some(Ok(()));
                    }
                    break;
                }
                Err(e) => e,
            };
            let error = errors::provider_error("TerminateInstances", &e);
            let code = errors::code_of(&e).unwrap_or("");
            let message = e.message().unwrap_or("");
            let named: Vec<usize> = pending
                .iter()
                .copied()
                .filter(|&i| mentions(message, &ids[i]))
                .collect();
            let settled = match code {
                // Gone already: that is what was asked for.
                "InvalidInstanceID.NotFound" => Some(Ok(())),
                "InvalidInstanceID.Malformed" => Some(Err(ProviderError::new(
                    FailureClass::Permanent,
                    error.message.clone(),
                ))),
                _ => None,
            };
            match settled {
                Some(outcome) if !named.is_empty() => {
                    for i in named {
                        results[i] = Some(outcome.clone());
                    }
                }
                Some(outcome) if pending.len() == 1 => {
                    results[pending[0]] = Some(outcome);
                }
                Some(_) => {
                    // EC2 did not say which: ask about each on its own.
                    for i in pending {
                        let single = Box::pin(self.terminate_chunk(&ids[i..=i])).await;
                        results[i] = single.into_iter().next();
                    }
                }
                None => {
                    for i in pending {
                        results[i] = Some(Err(error.clone()));
                    }
                }
            }
        }
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(ProviderError::new(
                        FailureClass::Transient,
                        "TerminateInstances gave no answer for this instance",
                    ))
                })
            })
            .collect()
    }
}

/// Whether `message` names instance `id` as a whole word.
fn mentions(message: &str, id: &str) -> bool {
    message
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .any(|word| word == id)
}

/// Reads what the provider needs of the region (see the module
/// documentation).
async fn read_region(client: &Client, config: &Ec2Config) -> Result<RegionFacts, Ec2Error> {
    let api = |what| move |source| Ec2Error::Api { what, source };
    let mut facts = RegionFacts::default();
    let mut pages = client
        .describe_instance_types()
        .max_results(INSTANCE_TYPES_PAGE)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page
            .map_err(|e| errors::provider_error("DescribeInstanceTypes", &e))
            .map_err(api("list the region's instance types"))?;
        facts.instance_types.extend(
            page.instance_types()
                .iter()
                .filter_map(|t| t.instance_type())
                .map(|t| t.as_str().to_string()),
        );
    }
    let mut pages = client
        .describe_instance_type_offerings()
        .location_type(LocationType::AvailabilityZone)
        .max_results(LARGE_PAGE)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page
            .map_err(|e| errors::provider_error("DescribeInstanceTypeOfferings", &e))
            .map_err(api("list where instance types are offered"))?;
        for offering in page.instance_type_offerings() {
            if let (Some(t), Some(zone)) = (offering.instance_type(), offering.location()) {
                facts
                    .offerings
                    .entry(zone.to_string())
                    .or_default()
                    .insert(t.as_str().to_string());
            }
        }
    }
    if !config.subnet_ids.is_empty() {
        let found = client
            .describe_subnets()
            .set_subnet_ids(Some(config.subnet_ids.clone()))
            .send()
            .await
            .map_err(|e| errors::provider_error("DescribeSubnets", &e))
            .map_err(api("find the configured subnets"))?;
        for id in &config.subnet_ids {
            let zone = found
                .subnets()
                .iter()
                .find(|s| s.subnet_id() == Some(id))
                .and_then(|s| s.availability_zone())
                .ok_or_else(|| Ec2Error::UnknownSubnet(id.clone()))?;
            if let Some(first) = facts.subnets.insert(zone.to_string(), id.clone()) {
                return Err(Ec2Error::TwoSubnetsInZone {
                    zone: zone.to_string(),
                    first,
                    second: id.clone(),
                });
            }
        }
    }
    Ok(facts)
}

#[async_trait]
impl Provider for Ec2Provider {
    fn name(&self) -> &str {
        "ec2"
    }

    fn supported_constraints(&self) -> &[Key] {
        &SUPPORTED_CONSTRAINTS
    }

    fn catalogue(&self) -> &Catalogue {
        &self.catalogue
    }

    fn offers(&self, zone: &str, instance_type: &str) -> bool {
        self.offers_at(zone, instance_type, Instant::now())
    }

    fn max_launch_batch(&self) -> usize {
        MAX_LAUNCH_BATCH
    }

    /// One RunInstances per launch (see the module's notes on batches).
    fn launch_requests(&self, launches: usize) -> usize {
        launches
    }

    /// DescribeAvailabilityZones: the region's availability zones (not
    /// local or wavelength zones), healthy when `available` and, with
    /// subnets configured, holding one of them.
    async fn zones(&self) -> Result<Vec<ProviderZone>, ProviderError> {
        let output = self
            .client
            .describe_availability_zones()
            .send()
            .await
            .map_err(|e| errors::provider_error("DescribeAvailabilityZones", &e))?;
        let mut zones: Vec<ProviderZone> = output
            .availability_zones()
            .iter()
            .filter(|z| z.zone_type().is_none_or(|t| t == "availability-zone"))
            .filter_map(|z| {
                let name = z.zone_name()?.to_string();
                let state = z.state().map_or("unknown", |s| s.as_str());
                let (available, reason) = if state != "available" {
                    let said: Vec<&str> = z.messages().iter().filter_map(|m| m.message()).collect();
                    let mut reason = format!("EC2 reports the zone {state}");
                    if !said.is_empty() {
                        reason = format!("{reason}: {}", said.join("; "));
                    }
                    (false, reason)
                } else if !self.config.subnet_ids.is_empty()
                    && !self.facts.subnets.contains_key(&name)
                {
                    (false, "no configured subnet is in this zone".to_string())
                } else {
                    (true, String::new())
                };
                Some(ProviderZone {
                    name,
                    available,
                    reason,
                })
            })
            .collect();
        zones.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(zones)
    }

    /// One RunInstances per request, all at once (see the module
    /// documentation for why); the image is resolved once per batch.
    async fn launch(&self, requests: Vec<LaunchRequest>) -> Vec<Result<Instance, ProviderError>> {
        if let Err(e) = self
            .agent_binary_checked
            .get_or_try_init(|| preflight::check_agent_binary(&self.config))
            .await
        {
            let class = match e.is_transient() {
                true => FailureClass::Transient,
                false => FailureClass::Permanent,
            };
            let refused = ProviderError::new(class, e.to_string());
            return requests.iter().map(|_| Err(refused.clone())).collect();
        }
        let mut prepared = Vec::with_capacity(requests.len());
        let mut seen = HashMap::new();
        for request in requests {
            prepared.push(self.prepare(request, &mut seen).await);
        }
        let runs = prepared.into_iter().map(|p| async move {
            match p {
                Ok(p) => self.run_one(p).await,
                Err(e) => Err(e),
            }
        });
        futures_util::future::join_all(runs).await
    }

    async fn terminate(&self, instance_ids: Vec<String>) -> Vec<Result<(), ProviderError>> {
        let mut results = Vec::with_capacity(instance_ids.len());
        for chunk in instance_ids.chunks(TERMINATE_BATCH) {
            results.extend(self.terminate_chunk(chunk).await);
        }
        results
    }

    async fn instances(&self, controller_uuid: &str) -> Result<Vec<Instance>, ProviderError> {
        let mut pages = self
            .client
            .describe_instances()
            .filters(
                Filter::builder()
                    .name(format!("tag:{}", tags::CONTROLLER))
                    .values(controller_uuid)
                    .build(),
            )
            .filters(
                Filter::builder()
                    .name("instance-state-name")
                    .set_values(Some(LIVE_STATES.iter().map(|s| s.to_string()).collect()))
                    .build(),
            )
            .max_results(LARGE_PAGE)
            .into_paginator()
            .send();
        let mut instances = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| errors::provider_error("DescribeInstances", &e))?;
            for reservation in page.reservations() {
                instances.extend(
                    reservation
                        .instances()
                        .iter()
                        .filter_map(|i| self.instance_of(i))
                        .filter(|i| i.state != InstanceState::Terminated),
                );
            }
        }
        Ok(instances)
    }
}

//! The simulated cloud: berth's embedded default provider.
//!
//! A real provider, not a test double. It keeps its own ledger of instances
//! (in memory, or in an SQLite file of its own that outlives a controller
//! restart, as a real cloud would), has zones and a catalogue, and behaves
//! like a cloud: instances start `pending`, run after a configurable delay,
//! and their machine agents check in with the one-time password they were
//! launched with. Launches fail the way EC2's do — a zone out or full
//! (zone-specific), an unknown type or image (permanent), or at random at a
//! configurable rate (transient) — drawn from a seeded generator, so a run
//! can be repeated exactly. It starts lxd containers on its instances.
//!
//! - [`config`]: `[provider.sim]`, [`SimConfig`].
//! - [`faults`]: the faults an administrator sets while it runs,
//!   [`FaultSet`]: zones down, zone capacity, transient failures, calls
//!   that hang or are throttled, agents that never check in.
//! - `ledger`: the instances, indexed in memory (in a `chunked` list,
//!   which grows without moving them); `file`: their SQLite file (read on
//!   a thread of its own once the cloud has opened, while calls wait for
//!   it: a starting controller reads its own state meanwhile);
//!   `shared`: their PostgreSQL tables, shared by several controllers'
//!   clouds ([`SimProvider::open_shared`]).
//! - `events`: the timeline of starts and check-ins, the reports still to be
//!   delivered, and the one task that works through them.
//!
//! # Conventions
//!
//! - An `image-id` starting with [`MISSING_IMAGE_PREFIX`] (`ami-missing`)
//!   names an image that does not exist: the launch fails permanently. Any
//!   other image id exists.
//! - Instance ids are `i-` and 17 hex digits from the seeded generator;
//!   containers are `<host id>-lxd-<n>`, numbered per host from 0.
//! - A container is placed in its host's zone and takes no zone capacity;
//!   its hardware is its instance type's, or its host's when the type is not
//!   in the catalogue.
//!
//! # Reports
//!
//! State changes (`running`, `terminated`) go to [`ControllerLink::instance_changed`]
//! and agent check-ins to [`ControllerLink::agent_connect`], in the order
//! they happened, from one background task (see `events` for where it
//! runs). Changes that happen before [`Provider::attach`] are kept and
//! delivered once a link is attached. An agent the controller refuses tries
//! [`AGENT_ATTEMPTS`] times, [`AGENT_RETRY_DELAY`] apart, then gives up.
//!
//! # Caveats
//!
//! - The fault set given at run time ([`SimProvider::set_faults`]) is not
//!   stored: a reopened cloud takes its outages, capacity and failure rate
//!   from its configuration again.
//! - The ledger file holds each waiting agent's one-time password, as a
//!   cloud holds an instance's user data.
//! - A ledger file belongs to one open cloud at a time (see
//!   [`LEDGER_LOCK_WAIT`]). A shared ledger is for several; each cloud
//!   keeps its own faults, throttle and hang (they are the controller's
//!   view of the cloud), though a zone taken down stops that zone's
//!   instances for all.
//! - A client token seen before returns the earlier instance even if the
//!   rest of the request differs (EC2 would refuse with
//!   `IdempotentParameterMismatch`).

mod chunked;
pub mod config;
mod error;
mod events;
pub mod faults;
mod file;
mod ledger;
mod records;
mod shared;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::time::Instant;

use crate::contracts::provider::ProviderZone;
use crate::contracts::provider::{
    tags, ControllerLink, FailureClass, InstanceStateChange, LaunchRequest, Provider, ProviderError,
};
use crate::contracts::secrets::Secret;
use crate::domain::constraints::Key;
use crate::domain::hardware::Hardware;
use crate::domain::instance::{Instance, InstanceState, ListedInstance};
use crate::domain::instance_types::Catalogue;
use crate::domain::names::MachineId;
use crate::providers::sim::events::{lock, Due, Events, Outgoing};
use crate::providers::sim::faults::RequestBucket;
use crate::providers::sim::file::LedgerFile;
use crate::providers::sim::ledger::{Backing, Ledger};
use crate::providers::sim::records::{tagged_machine, Batch, Change, Record, RngPosition};
use crate::providers::sim::shared::SharedLedger;

pub use config::SimConfig;
pub use error::SimError;
pub use faults::{CallCounts, FaultSet, Throttle};
pub use records::{addresses_of, AgentState, LedgerEntry, Tags};
pub use shared::ORPHAN_GRACE_MS;

/// The most launches one call carries (and the default of
/// `[provider.sim] launch_batch`).
pub const MAX_LAUNCH_BATCH: usize = 500;

/// How many times a refused agent tries to check in.
pub const AGENT_ATTEMPTS: u32 = 3;

/// How long a refused agent waits before it tries again.
pub const AGENT_RETRY_DELAY: Duration = Duration::from_secs(1);

/// Image ids starting with this name images that do not exist.
pub const MISSING_IMAGE_PREFIX: &str = "ami-missing";

/// Why `zones()` reports a zone in outage unavailable.
pub const OUTAGE_REASON: &str = "simulated outage";

/// How long opening a ledger file waits for a previous owner to close it:
/// a cloud just dropped may still be finishing a write.
pub const LEDGER_LOCK_WAIT: Duration = Duration::from_secs(2);

/// How long the background task waits before retrying a ledger write that
/// failed (a full disk, say).
const LEDGER_RETRY_DELAY: Duration = Duration::from_secs(1);

/// The most events or reports the background task handles in one round.
const DRIVER_BATCH: usize = 1000;

/// How often a cloud on a shared ledger reads what the others wrote, and
/// takes up the starts and check-ins a dead cloud left.
const SHARED_POLL: Duration = Duration::from_millis(500);

/// Every constraint key but `spaces`, `virt-type` and `instance-role`,
/// which the simulated cloud has no notion of.
const SUPPORTED_CONSTRAINTS: [Key; 13] = [
    Key::Arch,
    Key::Container,
    Key::Mem,
    Key::Cores,
    Key::CpuPower,
    Key::RootDisk,
    Key::RootDiskSource,
    Key::InstanceType,
    Key::Tags,
    Key::Zones,
    Key::AllocatePublicIp,
    Key::ImageId,
    Key::Storage,
];

/// The catalogue, embedded (shared, parsed once) or the cloud's own.
enum CatalogueSource {
    Embedded(&'static Catalogue),
    Owned(Catalogue),
}

impl CatalogueSource {
    /// The catalogue `config` names, or the embedded one.
    fn of(config: &SimConfig) -> Result<CatalogueSource, SimError> {
        Ok(match &config.catalogue {
            None => CatalogueSource::Embedded(
                Catalogue::embedded().map_err(|e| SimError::EmbeddedCatalogue(e.clone()))?,
            ),
            Some(path) => CatalogueSource::Owned(read_catalogue(path)?),
        })
    }

    fn get(&self) -> &Catalogue {
        match self {
            CatalogueSource::Embedded(c) => c,
            CatalogueSource::Owned(c) => c,
        }
    }
}

/// What never changes after open.
struct Settings {
    zones: Vec<String>,
    catalogue: CatalogueSource,
    start_delay: Duration,
    agent_delay: Duration,
    seed: u64,
    /// Whether ledger work touches a file or a database (and so runs on a
    /// blocking thread).
    stored: bool,
    /// Whether the ledger is shared with other clouds.
    shared: bool,
    /// How often connected agents report that they are alive.
    heartbeat_interval: Duration,
    /// The most launches one call carries.
    launch_batch: usize,
}

/// What an administrator may change at run time: the faults in force,
/// and the throttle's bucket and counts.
struct Knobs {
    faults: FaultSet,
    /// The bucket of `faults.throttle`.
    bucket: Option<RequestBucket>,
    counts: CallCounts,
}

/// What launches and terminations change, under one lock.
struct State {
    ledger: Ledger,
    /// Draws instance ids and transient failures.
    rng: ChaCha8Rng,
    /// Draws which agents are silent: a generator of its own, so that
    /// the ids and failures a seed gives do not depend on the faults set.
    fault_rng: ChaCha8Rng,
    /// On a shared ledger: the agents whose check-in this cloud took up
    /// and is still trying, so that it is taken up once at a time (one
    /// that gives up leaves the set, and is taken up again).
    taken_up: HashSet<String>,
}

/// Whether a ledger call changes the ledger: on a shared ledger, a change
/// is decided under the writers' lock.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Write,
}

/// Where a cloud keeps its ledger besides memory.
enum LedgerPlace {
    Memory,
    File(PathBuf),
    /// A PostgreSQL database's URL.
    Shared(String),
}

/// What the generator of silent agents is seeded with, beside the seed.
const FAULT_SEED_SALT: u64 = 0x5ee0_fa17;

/// The message of a call refused for want of a throttle token, in EC2's
/// words.
pub const THROTTLED_MESSAGE: &str = "RequestLimitExceeded: Request limit exceeded.";

struct Inner {
    settings: Settings,
    /// Its own lock, so `zones()` never waits for a ledger write.
    knobs: Mutex<Knobs>,
    /// Whether provider calls hang: they wait until this is false.
    hang: tokio::sync::watch::Sender<bool>,
    state: Mutex<State>,
    /// Shared with the background task, which holds the rest of the cloud
    /// only while it works on the ledger, never while it waits for the
    /// controller: a dropped cloud closes its ledger file promptly.
    events: Arc<Events>,
    /// Set once the ledger's instances are read: `Err` with why, if they
    /// could not be.
    ledger_read: std::sync::OnceLock<Result<(), String>>,
}

/// The simulated cloud. See the [module documentation](self).
pub struct SimProvider {
    inner: Arc<Inner>,
}

impl SimProvider {
    /// Every zone and whether it is up, as [`Provider::zones`] answers,
    /// without the faults that hold or throttle calls: what the controller
    /// records once an administrator changes the faults.
    pub fn zone_report(&self) -> Vec<ProviderZone> {
        let knobs = lock(&self.inner.knobs);
        self.inner
            .settings
            .zones
            .iter()
            .map(|zone| {
                let out = knobs.faults.zones_down.contains(zone);
                ProviderZone {
                    name: zone.clone(),
                    available: !out,
                    reason: if out { OUTAGE_REASON } else { "" }.to_string(),
                }
            })
            .collect()
    }

    /// Opens the simulated cloud described by `config`, with its ledger in
    /// the SQLite file `ledger_path` (created if missing; instances already
    /// there are taken up where they were) or, without a path, in memory.
    ///
    /// Instances the ledger holds as `pending` start again after the start
    /// delay, and agents that had not checked in try again after the agent
    /// delay, as they would after a controller restart.
    ///
    /// # Errors
    ///
    /// [`SimError::Config`] for settings [`SimConfig::validate`] refuses;
    /// [`SimError::CatalogueRead`] / [`SimError::Catalogue`] for a
    /// catalogue file that cannot be read or parsed;
    /// [`SimError::Ledger`] / [`SimError::LedgerInUse`] for the ledger
    /// file. Its instances are read after the cloud opens, and its calls
    /// wait for them; if they cannot be read
    /// ([`SimError::LedgerRead`]), every call that needs them fails with
    /// that error, and the error is logged.
    pub fn open(config: SimConfig, ledger_path: Option<PathBuf>) -> Result<SimProvider, SimError> {
        let catalogue = CatalogueSource::of(&config)?;
        let place = ledger_path.map_or(LedgerPlace::Memory, LedgerPlace::File);
        SimProvider::build(config, catalogue, place)
    }

    /// Opens the simulated cloud described by `config` with its ledger in
    /// the PostgreSQL database at `database_url`, shared with every other
    /// cloud opened on it: several controllers on one database see one
    /// cloud. Instances another cloud launched are listed, adopted by
    /// client token and terminated here like this cloud's own, and the
    /// starts and check-ins a dead cloud left are taken up after
    /// [`ORPHAN_GRACE_MS`].
    ///
    /// # Errors
    ///
    /// As [`SimProvider::open`]; [`SimError::SharedLedger`] for the
    /// database.
    pub fn open_shared(config: SimConfig, database_url: &str) -> Result<SimProvider, SimError> {
        let catalogue = CatalogueSource::of(&config)?;
        SimProvider::build(
            config,
            catalogue,
            LedgerPlace::Shared(database_url.to_string()),
        )
    }

    /// Like [`SimProvider::open`], with `catalogue` instead of the one
    /// `config` names.
    ///
    /// # Errors
    ///
    /// As [`SimProvider::open`], less the catalogue's.
    pub fn open_with_catalogue(
        config: SimConfig,
        catalogue: Catalogue,
        ledger_path: Option<PathBuf>,
    ) -> Result<SimProvider, SimError> {
        let place = ledger_path.map_or(LedgerPlace::Memory, LedgerPlace::File);
        SimProvider::build(config, CatalogueSource::Owned(catalogue), place)
    }

    fn build(
        config: SimConfig,
        catalogue: CatalogueSource,
        place: LedgerPlace,
    ) -> Result<SimProvider, SimError> {
        config.validate().map_err(SimError::Config)?;
        let stored = !matches!(place, LedgerPlace::Memory);
        let shared = matches!(place, LedgerPlace::Shared(_));
        // A ledger file's instances are read after the cloud opens (see
        // `read_behind`); until then it holds none, and its calls wait.
        let empty = || Ledger::new(Vec::new(), Backing::Memory);
        let (ledger, position, to_read) = match place {
            LedgerPlace::File(path) => {
                let opened = LedgerFile::open(&path, LEDGER_LOCK_WAIT)?;
                (empty(), opened.rng, Some(opened.file))
            }
            LedgerPlace::Shared(url) => {
                let (ledger, update) = SharedLedger::open(&url)?;
                (
                    Ledger::new(update.records, Backing::Shared(ledger)),
                    update.rng,
                    None,
                )
            }
            LedgerPlace::Memory => (empty(), None, None),
        };
        let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
        if let Some(position) = position.filter(|p| p.seed == config.seed) {
            rng.set_word_pos(position.word_pos);
        }
        let inner = Inner {
            settings: Settings {
                zones: config.zones.clone(),
                catalogue,
                start_delay: config.start_delay(),
                agent_delay: config.agent_delay(),
                seed: config.seed,
                stored,
                shared,
                heartbeat_interval: Duration::from_millis(config.heartbeat_interval_ms),
                launch_batch: config.launch_batch,
            },
            knobs: Mutex::new(Knobs {
                faults: FaultSet::from_config(&config),
                bucket: None,
                counts: CallCounts::default(),
            }),
            hang: tokio::sync::watch::Sender::new(false),
            state: Mutex::new(State {
                ledger,
                rng,
                fault_rng: ChaCha8Rng::seed_from_u64(config.seed ^ FAULT_SEED_SALT),
                taken_up: HashSet::new(),
            }),
            events: Arc::new(Events::new()),
            ledger_read: std::sync::OnceLock::new(),
        };
        let inner = Arc::new(inner);
        match to_read {
            Some(file) => Inner::read_behind(&inner, file)?,
            None => {
                let _ = inner.ledger_read.set(Ok(()));
                inner.resume();
            }
        }
        Ok(SimProvider { inner })
    }

    /// Takes `zone` out (`true`) or brings it back.
    ///
    /// # Errors
    ///
    /// [`SimError::UnknownZone`].
    pub fn set_outage(&self, zone: &str, out: bool) -> Result<(), SimError> {
        self.inner.check_zone(zone)?;
        let mut knobs = lock(&self.inner.knobs);
        if out {
            knobs.faults.zones_down.insert(zone.to_string());
        } else {
            knobs.faults.zones_down.remove(zone);
        }
        Ok(())
    }

    /// Sets the most live instances `zone` holds; `None`: unlimited.
    /// Instances already there stay.
    ///
    /// # Errors
    ///
    /// [`SimError::UnknownZone`].
    pub fn set_capacity(&self, zone: &str, capacity: Option<usize>) -> Result<(), SimError> {
        self.inner.check_zone(zone)?;
        let mut knobs = lock(&self.inner.knobs);
        match capacity {
            Some(n) => knobs
                .faults
                .zone_capacity
                .insert(zone.to_string(), u32::try_from(n).unwrap_or(u32::MAX)),
            None => knobs.faults.zone_capacity.remove(zone),
        };
        Ok(())
    }

    /// Sets the share of launches that fail transiently.
    ///
    /// # Errors
    ///
    /// [`SimError::FailureRate`] outside 0..=1.
    pub fn set_failure_rate(&self, rate: f64) -> Result<(), SimError> {
        config::check_failure_rate(rate).map_err(SimError::FailureRate)?;
        lock(&self.inner.knobs).faults.failure_rate = rate;
        Ok(())
    }

    /// The faults in force.
    pub fn faults(&self) -> FaultSet {
        lock(&self.inner.knobs).faults.clone()
    }

    /// The cloud's zones, in order.
    pub fn zone_names(&self) -> &[String] {
        &self.inner.settings.zones
    }

    /// Replaces the faults in force with `faults` and returns them. The
    /// instances running or starting in a zone that is down stop, and
    /// their stop is reported like any other change; a new or changed
    /// throttle starts with a full bucket (the same one keeps its tokens);
    /// calls hanging answer once `hang` is off.
    ///
    /// # Errors
    ///
    /// [`SimError::Faults`] for a set [`FaultSet::validate`] refuses
    /// (nothing changes); [`SimError::LedgerWrite`] if the stops could not
    /// be recorded (the faults are in force).
    pub async fn set_faults(&self, faults: FaultSet) -> Result<FaultSet, SimError> {
        faults
            .validate(&self.inner.settings.zones)
            .map_err(SimError::Faults)?;
        let down = faults.zones_down.clone();
        {
            let mut knobs = lock(&self.inner.knobs);
            let same_throttle = knobs.bucket.as_ref().map(RequestBucket::limit) == faults.throttle;
            if !same_throttle {
                knobs.bucket = faults
                    .throttle
                    .map(|limit| RequestBucket::new(limit, Instant::now()));
            }
            knobs.faults = faults.clone();
        }
        self.inner.hang.send_replace(faults.hang);
        if !down.is_empty() {
            let now_ms = wall_ms();
            let reports = Arc::clone(&self.inner)
                .run(Access::Write, move |_, state| {
                    stop_in_zones(state, &down, now_ms)
                })
                .await
                .map_err(|e| SimError::LedgerWrite(e.message))?
                .map_err(SimError::LedgerWrite)?;
            if !reports.is_empty() {
                self.inner
                    .events
                    .send_all(reports.into_iter().map(Outgoing::Changed));
                self.inner.ensure_driver();
            }
        }
        Ok(faults)
    }

    /// How many provider calls were answered, and how many refused by the
    /// throttle.
    pub fn call_counts(&self) -> CallCounts {
        lock(&self.inner.knobs).counts
    }

    /// Starts an instance behind berth's back, as someone with the cloud's
    /// console might: already running, without an agent, with whatever
    /// `tags` (berth's, for a stray). Its start is reported like any other
    /// change.
    ///
    /// # Errors
    ///
    /// [`SimError::UnknownZone`], [`SimError::UnknownInstanceType`], or
    /// [`SimError::LedgerWrite`].
    pub async fn create_untracked_instance(
        &self,
        tags: BTreeMap<String, String>,
        zone: &str,
        instance_type: &str,
    ) -> Result<Instance, SimError> {
        self.inner.check_zone(zone)?;
        let hardware = match self.inner.settings.catalogue.get().get(instance_type) {
            Some(t) => Hardware::of(t, zone, None),
            None => return Err(SimError::UnknownInstanceType(instance_type.to_string())),
        };
        let (zone, instance_type): (Arc<str>, Arc<str>) = (zone.into(), instance_type.into());
        let now_ms = wall_ms();
        let tags = Tags::from(tags);
        let created = Arc::clone(&self.inner)
            .run(Access::Write, move |settings, state| {
                let id = new_id(&mut state.rng, &state.ledger, &HashSet::new());
                let record = Record {
                    seq: state.ledger.next_seq(),
                    entry: LedgerEntry {
                        id: id.clone(),
                        machine: tagged_machine(&tags),
                        tags,
                        zone,
                        instance_type,
                        state: InstanceState::Running,
                        hardware: Arc::new(hardware),
                        client_token: None,
                        host_instance: None,
                        launched_at_ms: now_ms,
                        agent: AgentState::None,
                    },
                    agent_machine: None,
                    password: None,
                    changed_at_ms: now_ms,
                };
                let instance = record.entry.instance();
                let batch = Batch {
                    inserts: vec![record],
                    changes: Vec::new(),
                    rng: Some(position(settings, &state.rng)),
                };
                state.ledger.commit(batch).map(|()| instance)
            })
            .await
            .map_err(|e| SimError::LedgerWrite(e.message))?
            .map_err(SimError::LedgerWrite)?;
        self.inner
            .events
            .send_all([Outgoing::Changed(InstanceStateChange {
                instance_id: created.id.clone(),
                state: InstanceState::Running,
                at_ms: now_ms,
            })]);
        self.inner.ensure_driver();
        Ok(created)
    }

    /// The cloud terminates `instance_id` (and the containers on it) on its
    /// own, as when a host fails or a spot instance is reclaimed, and
    /// reports it. Stopping an instance already gone changes nothing.
    ///
    /// # Errors
    ///
    /// [`SimError::UnknownInstance`], or [`SimError::LedgerWrite`].
    pub async fn stop_behind_back(&self, instance_id: &str) -> Result<(), SimError> {
        let id = instance_id.to_string();
        let known = Arc::clone(&self.inner)
            .run(Access::Read, move |_, state| {
                state.ledger.get(&id).is_some()
            })
            .await
            .map_err(|e| SimError::LedgerWrite(e.message))?;
        if !known {
            return Err(SimError::UnknownInstance(instance_id.to_string()));
        }
        let results = self.terminate(vec![instance_id.to_string()]).await;
        match results.into_iter().next() {
            Some(Err(e)) => Err(SimError::LedgerWrite(e.message)),
            _ => Ok(()),
        }
    }

    /// Every instance the cloud ever started, in launch order (on a shared
    /// ledger, as the database has it now); none if the ledger file could
    /// not be read. Waits for a ledger write in progress, and for the
    /// ledger to be read; for tests and benchmarks.
    pub fn ledger(&self) -> Vec<LedgerEntry> {
        self.inner
            .with_state(Access::Read, |_, state| {
                state.ledger.records().map(|r| r.entry.clone()).collect()
            })
            .unwrap_or_default()
    }

    /// Scheduled events and reports not yet delivered: 0 once the cloud
    /// has nothing left to do or say.
    pub fn backlog(&self) -> usize {
        self.inner.events.backlog()
    }
}

impl Drop for SimProvider {
    fn drop(&mut self) {
        self.inner.events.close();
    }
}

fn read_catalogue(path: &Path) -> Result<Catalogue, SimError> {
    let text = std::fs::read_to_string(path).map_err(|source| SimError::CatalogueRead {
        path: path.to_path_buf(),
        source,
    })?;
    Catalogue::from_csv(&text).map_err(|source| SimError::Catalogue {
        path: path.to_path_buf(),
        source,
    })
}

/// Wall-clock milliseconds since the epoch.
fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The time of a record's next change: now, but always after its last, so
/// that the controller can order one instance's reports.
fn next_change_ms(record: &Record, now_ms: i64) -> i64 {
    now_ms.max(record.changed_at_ms.saturating_add(1))
}

fn position(settings: &Settings, rng: &ChaCha8Rng) -> RngPosition {
    RngPosition {
        seed: settings.seed,
        word_pos: rng.get_word_pos(),
    }
}

/// A fresh instance id: `i-` and 17 hex digits, unused so far.
fn new_id(rng: &mut ChaCha8Rng, ledger: &Ledger, planned: &HashSet<String>) -> String {
    const MASK: u128 = (1 << 68) - 1;
    loop {
        let id = format!("i-{:017x}", rng.random::<u128>() & MASK);
        if !ledger.contains_id(&id) && !planned.contains(&id) {
            return id;
        }
    }
}

/// A ledger on `file` holding what the file holds: its instances read
/// back and indexed.
///
/// # Errors
///
/// As [`LedgerFile::read_records`]; [`SimError::LedgerRead`] too if two
/// of its instances hold one id or client token.
fn read_ledger(mut file: LedgerFile) -> Result<Ledger, SimError> {
    let path = file.path().to_path_buf();
    let started = std::time::Instant::now();
    let records = file.read_records()?;
    let count = records.len();
    let read = started.elapsed();
    let ledger = Ledger::new(records, Backing::File(file));
    if let Some(reason) = ledger.key_held_twice() {
        return Err(SimError::LedgerRead { path, reason });
    }
    log::debug!(
        "simulated cloud: {count} instances read from {} in {:.1} ms, indexed in {:.1} ms",
        path.display(),
        read.as_secs_f64() * 1e3,
        (started.elapsed() - read).as_secs_f64() * 1e3,
    );
    Ok(ledger)
}

fn permanent(message: String) -> ProviderError {
    ProviderError::new(FailureClass::Permanent, message)
}

fn transient(message: String) -> ProviderError {
    ProviderError::new(FailureClass::Transient, message)
}

fn zone_specific(message: String) -> ProviderError {
    ProviderError::new(FailureClass::ZoneSpecific, message)
}

/// One launch call's decisions, before they are committed.
struct LaunchPlan<'a> {
    settings: &'a Settings,
    faults: &'a FaultSet,
    now_ms: i64,
    records: Vec<Record>,
    ids: HashSet<String>,
    /// Client token to index in `records`, for a token repeated within the
    /// call.
    tokens: HashMap<String, usize>,
    /// Instances this call adds to each zone.
    extra_live: HashMap<String, usize>,
    /// Containers this call adds to each host.
    extra_containers: HashMap<String, u64>,
}

enum Planned {
    Existing(Instance),
    New(usize),
    Failed(ProviderError),
}

impl LaunchPlan<'_> {
    fn plan(&mut self, state: &mut State, request: LaunchRequest) -> Planned {
        if let Some(existing) = state.ledger.by_token(&request.client_token) {
            return Planned::Existing(existing.entry.instance());
        }
        if let Some(&i) = self.tokens.get(&request.client_token) {
            return Planned::New(i);
        }
        let planned = match &request.host_instance {
            None => self.plan_instance(state, &request),
            Some(host) => self.plan_container(state, &request, host),
        };
        match planned {
            Ok((id, zone, hardware)) => {
                let tags = Tags::from(request.tags);
                let agent = if self.silent_agent(state) {
                    AgentState::Silent
                } else {
                    AgentState::Waiting
                };
                let record = Record {
                    seq: state.ledger.next_seq() + self.records.len() as u64,
                    entry: LedgerEntry {
                        id: id.clone(),
                        machine: tagged_machine(&tags),
                        tags,
                        zone,
                        instance_type: request.instance_type.as_str().into(),
                        state: InstanceState::Pending,
                        hardware: Arc::new(hardware),
                        client_token: Some(request.client_token.clone()),
                        host_instance: request.host_instance,
                        launched_at_ms: self.now_ms,
                        agent,
                    },
                    agent_machine: Some(request.machine),
                    password: Some(request.agent.one_time_password),
                    changed_at_ms: self.now_ms,
                };
                let i = self.records.len();
                self.tokens.insert(request.client_token, i);
                self.ids.insert(id);
                self.records.push(record);
                Planned::New(i)
            }
            Err(e) => Planned::Failed(e),
        }
    }

    /// The id, zone and hardware of a new instance, or why not, checked in
    /// the order EC2 would: the zone, its health and capacity, the type,
    /// the image, then chance.
    fn plan_instance(
        &mut self,
        state: &mut State,
        request: &LaunchRequest,
    ) -> Result<(String, Arc<str>, Hardware), ProviderError> {
        let zone = &request.zone;
        if !self.settings.zones.contains(zone) {
            return Err(permanent(format!(
                "InvalidParameterValue: Invalid availability zone: [{zone}]"
            )));
        }
        if self.faults.zones_down.contains(zone) {
            return Err(zone_specific(format!("zone {zone} is unavailable")));
        }
        let extra = self.extra_live.get(zone).copied().unwrap_or(0);
        if let Some(&capacity) = self.faults.zone_capacity.get(zone) {
            if state.ledger.live_in_zone(zone) + extra >= capacity as usize {
                return Err(zone_specific(format!(
                    "InsufficientInstanceCapacity: We currently do not have sufficient {} \
                     capacity in the Availability Zone you requested ({zone}). Our system will \
                     be working on provisioning additional capacity.",
                    request.instance_type
                )));
            }
        }
        let Some(instance_type) = self.settings.catalogue.get().get(&request.instance_type) else {
            return Err(permanent(format!(
                "InvalidInstanceType: The instance type '{}' does not exist in this cloud",
                request.instance_type
            )));
        };
        check_image(request)?;
        // The id is drawn before the luck, so that which id a request gets
        // does not depend on the failure rate.
        let id = new_id(&mut state.rng, &state.ledger, &self.ids);
        self.check_luck(state)?;
        let hardware = Hardware::of(instance_type, zone, request.requirements.root_disk_mib);
        *self.extra_live.entry(zone.clone()).or_insert(0) += 1;
        Ok((id, zone.as_str().into(), hardware))
    }

    /// A container on `host`: the host must be a running instance.
    fn plan_container(
        &mut self,
        state: &mut State,
        request: &LaunchRequest,
        host: &str,
    ) -> Result<(String, Arc<str>, Hardware), ProviderError> {
        let Some(host_record) = state.ledger.get(host) else {
            return Err(transient(format!(
                "host instance {host} is not running yet: the cloud does not know it"
            )));
        };
        let host_entry = &host_record.entry;
        if host_entry.host_instance.is_some() {
            return Err(permanent(format!(
                "host instance {host} is a container: containers inside containers are not \
                 supported"
            )));
        }
        match host_entry.state {
            InstanceState::Running => {}
            s if s.is_gone() => {
                return Err(permanent(format!(
                    "host instance {host} is {}: it will not run again",
                    s.as_str()
                )))
            }
            s => {
                return Err(transient(format!(
                    "host instance {host} is not running yet ({})",
                    s.as_str()
                )))
            }
        }
        let zone = host_entry.zone.clone();
        let host_hardware = host_entry.hardware.clone();
        check_image(request)?;
        self.check_luck(state)?;
        let root_disk = request.requirements.root_disk_mib;
        let hardware = match self.settings.catalogue.get().get(&request.instance_type) {
            Some(t) => Hardware::of(t, &zone, root_disk),
            None => Hardware {
                root_disk_mib: root_disk.or(host_hardware.root_disk_mib),
                zone: Some(zone.to_string()),
                ..Hardware::clone(&host_hardware)
            },
        };
        let made = self.extra_containers.entry(host.to_string()).or_insert(0);
        let id = format!("{host}-lxd-{}", state.ledger.containers_made(host) + *made);
        *made += 1;
        Ok((id, zone, hardware))
    }

    fn check_luck(&self, state: &mut State) -> Result<(), ProviderError> {
        // Drawn whatever the rate, so that the draws that follow do not
        // depend on it.
        let draw: f64 = state.rng.random();
        if draw < self.faults.failure_rate {
            return Err(transient(
                "InternalError: simulated transient failure".to_string(),
            ));
        }
        Ok(())
    }
}

impl LaunchPlan<'_> {
    /// Whether a new instance's agent stays silent. Drawn only while some
    /// agents are, from the faults' own generator.
    fn silent_agent(&self, state: &mut State) -> bool {
        if self.faults.silent_agents <= 0.0 {
            return false;
        }
        let draw: f64 = state.fault_rng.random();
        draw < self.faults.silent_agents
    }
}

/// Fails for an image id naming a missing image (see the module's
/// conventions).
fn check_image(request: &LaunchRequest) -> Result<(), ProviderError> {
    match &request.requirements.image_id {
        Some(image) if image.starts_with(MISSING_IMAGE_PREFIX) => Err(permanent(format!(
            "InvalidAMIID.NotFound: The image id '[{image}]' does not exist"
        ))),
        _ => Ok(()),
    }
}

/// Launches `requests` against `state` and commits them in one write.
/// Returns the results in request order and the ids of the new instances.
fn launch_in(
    settings: &Settings,
    faults: &FaultSet,
    state: &mut State,
    requests: Vec<LaunchRequest>,
    now_ms: i64,
) -> (Vec<Result<Instance, ProviderError>>, Vec<String>) {
    let rng_before = state.rng.clone();
    let mut plan = LaunchPlan {
        settings,
        faults,
        now_ms,
        records: Vec::new(),
        ids: HashSet::new(),
        tokens: HashMap::new(),
        extra_live: HashMap::new(),
        extra_containers: HashMap::new(),
    };
    let planned: Vec<Planned> = requests
        .into_iter()
        .map(|request| plan.plan(state, request))
        .collect();
    let ids: Vec<String> = plan.records.iter().map(|r| r.entry.id.clone()).collect();
    let moved = state.rng.get_word_pos() != rng_before.get_word_pos();
    let batch = Batch {
        inserts: plan.records,
        changes: Vec::new(),
        rng: moved.then(|| position(settings, &state.rng)),
    };
    let committed = state.ledger.commit(batch);
    if let Err(reason) = &committed {
        // Nothing was recorded, so nothing was drawn: a retry sees the same
        // ids and the same luck.
        state.rng = rng_before;
        log::error!("the simulated cloud could not record launches: {reason}");
    }
    let results = planned
        .into_iter()
        .map(|p| match (p, &committed) {
            (Planned::Existing(instance), _) => Ok(instance),
            (Planned::Failed(e), _) => Err(e),
            (Planned::New(i), Ok(())) => ids
                .get(i)
                .and_then(|id| state.ledger.get(id))
                .map(|r| r.entry.instance())
                .ok_or_else(|| transient("InternalError: the launch was not recorded".into())),
            (Planned::New(_), Err(reason)) => Err(transient(format!(
                "InternalError: the cloud could not record the instance: {reason}"
            ))),
        })
        .collect();
    match committed {
        Ok(()) => (results, ids),
        Err(_) => (results, Vec::new()),
    }
}

/// Terminates `ids` and the containers on them in one write. Returns, per
/// id, whether it failed, and the changes to report.
fn terminate_in(
    state: &mut State,
    ids: &[String],
    now_ms: i64,
) -> (Vec<Option<String>>, Vec<InstanceStateChange>) {
    let mut changes = Vec::new();
    let mut reports = Vec::new();
    let mut touched = HashSet::new();
    let mut needed = Vec::with_capacity(ids.len());
    let mut end = |record: &Record, changes: &mut Vec<Change>| {
        if record.entry.state.is_gone() || !touched.insert(record.seq) {
            return false;
        }
        let at = next_change_ms(record, now_ms);
        changes.push(Change {
            seq: record.seq,
            state: InstanceState::Terminated,
            agent: record.entry.agent,
            changed_at_ms: at,
        });
        reports.push(InstanceStateChange {
            instance_id: record.entry.id.clone(),
            state: InstanceState::Terminated,
            at_ms: at,
        });
        true
    };
    for id in ids {
        let Some(record) = state.ledger.get(id) else {
            needed.push(false);
            continue;
        };
        // Containers go first, as they would on a host shutting down.
        for container in state.ledger.containers_on(id) {
            end(container, &mut changes);
        }
        needed.push(end(record, &mut changes));
    }
    let batch = Batch {
        changes,
        ..Batch::default()
    };
    match state.ledger.commit(batch) {
        Ok(()) => (vec![None; ids.len()], reports),
        Err(reason) => {
            log::error!("the simulated cloud could not record terminations: {reason}");
            let failed = needed
                .into_iter()
                .map(|n| n.then(|| reason.clone()))
                .collect();
            (failed, Vec::new())
        }
    }
}

/// Stops the instances (and containers) starting or running in `zones`,
/// in one write, and returns the changes to report.
///
/// # Errors
///
/// The ledger's; nothing is stopped then.
fn stop_in_zones(
    state: &mut State,
    zones: &BTreeSet<String>,
    now_ms: i64,
) -> Result<Vec<InstanceStateChange>, String> {
    let mut changes = Vec::new();
    let mut reports = Vec::new();
    for record in state.ledger.records() {
        let entry = &record.entry;
        if !zones.contains(&*entry.zone)
            || !matches!(entry.state, InstanceState::Pending | InstanceState::Running)
        {
            continue;
        }
        let at = next_change_ms(record, now_ms);
        changes.push(Change {
            seq: record.seq,
            state: InstanceState::Stopped,
            agent: entry.agent,
            changed_at_ms: at,
        });
        reports.push(InstanceStateChange {
            instance_id: entry.id.clone(),
            state: InstanceState::Stopped,
            at_ms: at,
        });
    }
    state.ledger.commit(Batch {
        changes,
        ..Batch::default()
    })?;
    Ok(reports)
}

/// What the due events did.
struct Progress {
    reports: Vec<Outgoing>,
    /// Instances now running whose agents will check in.
    agents_later: Vec<Due>,
    /// Agents checking in now.
    agents_now: Vec<Outgoing>,
}

/// Applies due events: pending instances run, agents due try to check in.
///
/// # Errors
///
/// The ledger's, with the events to try again.
fn apply_due(
    state: &mut State,
    due: Vec<Due>,
    now_ms: i64,
) -> Result<Progress, (String, Vec<Due>)> {
    let mut changes = Vec::new();
    let mut progress = Progress {
        reports: Vec::new(),
        agents_later: Vec::new(),
        agents_now: Vec::new(),
    };
    let mut started = HashSet::new();
    for d in &due {
        match d {
            Due::Start { id } => {
                let Some(record) = state.ledger.get(id) else {
                    continue;
                };
                // A start taken up from another cloud may also be due here.
                if record.entry.state != InstanceState::Pending || !started.insert(record.seq) {
                    continue;
                }
                let at = next_change_ms(record, now_ms);
                changes.push(Change {
                    seq: record.seq,
                    state: InstanceState::Running,
                    agent: record.entry.agent,
                    changed_at_ms: at,
                });
                progress
                    .reports
                    .push(Outgoing::Changed(InstanceStateChange {
                        instance_id: id.clone(),
                        state: InstanceState::Running,
                        at_ms: at,
                    }));
                if record.entry.agent == AgentState::Waiting {
                    progress.agents_later.push(Due::AgentCheckIn {
                        id: id.clone(),
                        attempt: 1,
                    });
                }
            }
            Due::AgentCheckIn { id, attempt } => {
                if let Some(agent) = waiting_agent(state, id, *attempt) {
                    progress.agents_now.push(agent);
                }
            }
        }
    }
    let batch = Batch {
        changes,
        ..Batch::default()
    };
    match state.ledger.commit(batch) {
        Ok(()) => Ok(progress),
        Err(reason) => Err((reason, due)),
    }
}

/// The check-in of `id`'s agent, if it is running and waiting.
fn waiting_agent(state: &State, id: &str, attempt: u32) -> Option<Outgoing> {
    let record = state.ledger.get(id)?;
    let waiting =
        record.entry.state == InstanceState::Running && record.entry.agent == AgentState::Waiting;
    match (waiting, record.agent_machine, &record.password) {
        (true, Some(machine), Some(password)) => Some(Outgoing::AgentCheckIn {
            id: id.to_string(),
            machine,
            password: password.clone(),
            attempt,
        }),
        _ => None,
    }
}

impl Inner {
    /// Runs `f` on the state: on a blocking thread when it may touch the
    /// ledger file and a runtime is at hand, here otherwise.
    ///
    /// # Guarantees
    ///
    /// Takes the cloud by value and, on a blocking thread, lets go of it
    /// there: a caller awaiting the result holds no reference, so a
    /// dropped cloud closes its ledger file even while the thread that
    /// awaits is busy (say, opening the same file again).
    ///
    /// # Errors
    ///
    /// A transient error if the blocking task panicked or its runtime shut
    /// down.
    async fn run<T, F>(self: Arc<Self>, access: Access, f: F) -> Result<T, ProviderError>
    where
        F: FnOnce(&Settings, &mut State) -> T + Send + 'static,
        T: Send + 'static,
    {
        if self.settings.stored && tokio::runtime::Handle::try_current().is_ok() {
            let inner = self;
            tokio::task::spawn_blocking(move || inner.with_state(access, f))
                .await
                .map_err(|e| transient(format!("InternalError: {e}")))?
        } else {
            self.with_state(access, f)
        }
    }

    /// What every provider call goes through first: it waits while calls
    /// hang, then takes a throttle token or is refused.
    ///
    /// # Errors
    ///
    /// A transient `RequestLimitExceeded` error when the throttle has no
    /// token.
    async fn admit(&self) -> Result<(), ProviderError> {
        let mut hang = self.hang.subscribe();
        // The sender lives as long as the cloud, so this only ends when
        // calls stop hanging.
        let _ = hang.wait_for(|hanging| !*hanging).await;
        let mut knobs = lock(&self.knobs);
        let admitted = match &mut knobs.bucket {
            Some(bucket) => bucket.try_take(Instant::now()),
            None => true,
        };
        if admitted {
            knobs.counts.admitted += 1;
            Ok(())
        } else {
            knobs.counts.refused += 1;
            Err(transient(THROTTLED_MESSAGE.to_string()))
        }
    }

    /// Runs `f` on the state, once the ledger has been read. On a shared
    /// ledger, what other clouds wrote is read first, under the writers'
    /// lock for a [`Access::Write`], and the lock is let go after.
    ///
    /// # Errors
    ///
    /// A transient error naming why, if the ledger could not be read.
    fn with_state<T>(
        &self,
        access: Access,
        f: impl FnOnce(&Settings, &mut State) -> T,
    ) -> Result<T, ProviderError> {
        let mut state = lock(&self.state);
        match self.ledger_read.get() {
            Some(Ok(())) => {}
            Some(Err(e)) => return Err(transient(e.clone())),
            // The reader let go of the state without saying: it panicked.
            None => {
                return Err(transient(
                    "the simulated cloud's ledger could not be read".into(),
                ))
            }
        }
        self.catch_up(&mut state, access);
        let out = f(&self.settings, &mut state);
        if let Some(shared) = state.ledger.shared() {
            shared.unlock();
        }
        Ok(out)
    }

    /// Reads `file`'s instances into the ledger on a thread of its own, at
    /// a lower priority, holding the state from before this returns until
    /// they are indexed: the cloud opens at once (with a million instances
    /// the ledger takes seconds to read, which a starting controller
    /// spends reading its own state), and its calls wait for the ledger.
    /// Then schedules what the ledger says is still to happen.
    ///
    /// # Errors
    ///
    /// [`SimError::Ledger`] if the thread cannot be started.
    fn read_behind(inner: &Arc<Inner>, file: LedgerFile) -> Result<(), SimError> {
        let (held, holding) = std::sync::mpsc::channel();
        let cloud = Arc::clone(inner);
        let path = file.path().to_path_buf();
        std::thread::Builder::new()
            .name("sim-ledger".into())
            .spawn(move || {
                let mut state = lock(&cloud.state);
                let _ = held.send(());
                crate::priority::give_way(crate::priority::BACKGROUND);
                let read = match read_ledger(file) {
                    Ok(ledger) => {
                        state.ledger = ledger;
                        Ok(())
                    }
                    Err(e) => {
                        log::error!("{e}");
                        Err(e.to_string())
                    }
                };
                if read.is_ok() {
                    cloud.resume_from(&state);
                }
                let _ = cloud.ledger_read.set(read);
            })
            .map_err(|e| SimError::Ledger {
                path,
                reason: format!("cannot start the thread that reads it: {e}"),
            })?;
        // The thread holds the state before the cloud is handed out.
        let _ = holding.recv();
        Ok(())
    }

    /// Brings a shared ledger's index up to date. If the database cannot be
    /// read, the cloud works from what it read last: reads answer from it,
    /// and changes fail when they are written (no lock was taken).
    fn catch_up(&self, state: &mut State, access: Access) {
        let Some(shared) = state.ledger.shared() else {
            return;
        };
        let update = match access {
            Access::Read => shared.read(),
            Access::Write => shared.lock_and_read(),
        };
        match update {
            Ok(update) => {
                state.ledger.absorb(update.records);
                if let Some(position) = update.rng.filter(|p| p.seed == self.settings.seed) {
                    state.rng.set_word_pos(position.word_pos);
                }
            }
            Err(e) => log::warn!("the simulated cloud works from what it read last: {e}"),
        }
    }

    /// On a shared ledger: reads what other clouds wrote, and schedules now
    /// the starts and check-ins overdue by [`ORPHAN_GRACE_MS`], which the
    /// cloud that launched them did not do (it is gone).
    async fn take_up_orphans(self: Arc<Self>) {
        let start_ms = i64::try_from(self.settings.start_delay.as_millis()).unwrap_or(i64::MAX);
        let agent_ms = i64::try_from(self.settings.agent_delay.as_millis()).unwrap_or(i64::MAX);
        let now_ms = wall_ms();
        let events = Arc::clone(&self.events);
        let found = self
            .run(Access::Read, move |_, state| {
                let mut due = Vec::new();
                let mut agents = Vec::new();
                for record in state.ledger.records() {
                    let entry = &record.entry;
                    let overdue = |since: i64, delay: i64| {
                        since.saturating_add(delay).saturating_add(ORPHAN_GRACE_MS) <= now_ms
                    };
                    match (entry.state, entry.agent) {
                        (InstanceState::Pending, _) if overdue(entry.launched_at_ms, start_ms) => {
                            due.push(Due::Start {
                                id: entry.id.clone(),
                            });
                        }
                        (InstanceState::Running, AgentState::Waiting)
                            if overdue(record.changed_at_ms, agent_ms)
                                && !state.taken_up.contains(&entry.id) =>
                        {
                            agents.push(entry.id.clone());
                        }
                        _ => {}
                    }
                }
                for id in &agents {
                    state.taken_up.insert(id.clone());
                }
                due.extend(
                    agents
                        .into_iter()
                        .map(|id| Due::AgentCheckIn { id, attempt: 1 }),
                );
                due
            })
            .await;
        match found {
            Ok(due) if !due.is_empty() => {
                log::info!(
                    "the simulated cloud takes up {} overdue starts and check-ins",
                    due.len()
                );
                events.schedule_all(Instant::now(), due);
            }
            Ok(_) => {}
            Err(e) => log::warn!("the simulated cloud cannot read the shared ledger: {e}"),
        }
    }

    fn check_zone(&self, zone: &str) -> Result<(), SimError> {
        if self.settings.zones.iter().any(|z| z == zone) {
            Ok(())
        } else {
            Err(SimError::UnknownZone {
                zone: zone.to_string(),
                known: self.settings.zones.join(", "),
            })
        }
    }

    /// Schedules what the ledger says is still to happen: pending instances
    /// start, waiting agents check in.
    fn resume(&self) {
        self.resume_from(&lock(&self.state));
    }

    /// [`Inner::resume`] from `state`, already held.
    fn resume_from(&self, state: &State) {
        if self.settings.shared {
            // Other clouds may be driving them: what is overdue is taken up
            // by `take_up_orphans`.
            return;
        }
        let now = Instant::now();
        let mut starts = Vec::new();
        let mut agents = Vec::new();
        for record in state.ledger.records() {
            let id = record.entry.id.clone();
            match (record.entry.state, record.entry.agent) {
                (InstanceState::Pending, _) => starts.push(Due::Start { id }),
                (InstanceState::Running, AgentState::Waiting) => {
                    agents.push(Due::AgentCheckIn { id, attempt: 1 });
                }
                _ => {}
            }
        }
        self.events
            .schedule_all(now + self.settings.start_delay, starts);
        self.events
            .schedule_all(now + self.settings.agent_delay, agents);
    }

    /// The machines whose agents checked in and whose instances run; none
    /// while the ledger is being read (its reader holds the state, and
    /// this is called on the event loop).
    fn connected_agents(&self) -> Vec<MachineId> {
        if !matches!(self.ledger_read.get(), Some(Ok(()))) {
            return Vec::new();
        }
        lock(&self.state)
            .ledger
            .records()
            .filter(|r| {
                r.entry.agent == AgentState::Connected && r.entry.state == InstanceState::Running
            })
            .filter_map(|r| r.entry.machine)
            .collect()
    }

    fn ensure_driver(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        let events = Arc::clone(&self.events);
        self.events.spawn_driver(move || drive(weak, events));
    }

    async fn process_due(self: Arc<Self>, due: Vec<Due>, now: Instant) {
        let agents_at = now + self.settings.agent_delay;
        let events = Arc::clone(&self.events);
        let now_ms = wall_ms();
        let outcome = self
            .run(Access::Write, move |_, state| apply_due(state, due, now_ms))
            .await;
        match outcome {
            Ok(Ok(progress)) => {
                events.send_all(progress.reports);
                events.schedule_all(agents_at, progress.agents_later);
                events.send_all(progress.agents_now);
            }
            Ok(Err((reason, due))) => {
                log::error!("the simulated cloud could not record instance changes: {reason}");
                events.schedule_all(Instant::now() + LEDGER_RETRY_DELAY, due);
            }
            Err(e) => log::error!("the simulated cloud lost instance changes: {e}"),
        }
    }

    /// Drops the agent check-ins whose instance went away since they were
    /// queued.
    async fn still_wanted(self: Arc<Self>, batch: Vec<Outgoing>) -> Vec<Outgoing> {
        let kept = self
            .run(Access::Read, move |_, state| {
                batch
                    .into_iter()
                    .filter(|item| match item {
                        Outgoing::Changed(_) => true,
                        Outgoing::AgentCheckIn { id, attempt, .. } => {
                            waiting_agent(state, id, *attempt).is_some()
                        }
                    })
                    .collect::<Vec<_>>()
            })
            .await;
        kept.unwrap_or_else(|e| {
            log::error!("the simulated cloud lost reports: {e}");
            Vec::new()
        })
    }

    async fn record_agents(self: Arc<Self>, outcomes: Vec<(String, AgentState)>) {
        let recorded = self
            .run(Access::Write, move |settings, state| {
                let changes = outcomes
                    .iter()
                    .filter_map(|(id, agent)| {
                        // On a shared ledger an agent that gave up tries
                        // again later, as a real one would: the controller
                        // that refused it may not have taken its machine
                        // over from a dead one yet.
                        if settings.shared && *agent == AgentState::Refused {
                            state.taken_up.remove(id);
                            return None;
                        }
                        let r = state.ledger.get(id)?;
                        // A check-in taken up twice (a shared ledger's) may
                        // be refused the second time: it stays connected.
                        if r.entry.agent == AgentState::Connected {
                            return None;
                        }
                        Some(Change {
                            seq: r.seq,
                            state: r.entry.state,
                            agent: *agent,
                            changed_at_ms: r.changed_at_ms,
                        })
                    })
                    .collect();
                state.ledger.commit(Batch {
                    changes,
                    ..Batch::default()
                })
            })
            .await;
        match recorded {
            Ok(Ok(())) => {}
            Ok(Err(reason)) => {
                log::error!("the simulated cloud could not record agent check-ins: {reason}")
            }
            Err(e) => log::error!("the simulated cloud lost agent check-ins: {e}"),
        }
    }
}

/// Delivers `batch` to the controller, each instance's reports in their
/// order. Agents are separate machines: check-ins from different
/// instances are delivered together, as their agents would arrive, and
/// instance changes go at their place in the order; a change waits only
/// for the check-ins of its own instance queued before it, not for every
/// check-in before it (that cut a deploy's check-ins into runs of one).
/// Returns the agents that checked in or gave up; refused agents with
/// attempts left are scheduled to try again.
async fn deliver(
    events: &Events,
    link: &Arc<dyn ControllerLink>,
    batch: Vec<Outgoing>,
) -> Vec<(String, AgentState)> {
    let mut outcomes = Vec::new();
    let mut run: Vec<(String, MachineId, Secret, u32)> = Vec::new();
    for item in batch {
        match item {
            Outgoing::Changed(change) => {
                if run.iter().any(|(queued, ..)| *queued == change.instance_id) {
                    check_in_all(events, link, std::mem::take(&mut run), &mut outcomes).await;
                }
                link.instance_changed(change).await;
            }
            Outgoing::AgentCheckIn {
                id,
                machine,
                password,
                attempt,
            } => {
                if run.iter().any(|(queued, ..)| *queued == id) {
                    check_in_all(events, link, std::mem::take(&mut run), &mut outcomes).await;
                }
                run.push((id, machine, password, attempt));
            }
        }
    }
    check_in_all(events, link, run, &mut outcomes).await;
    outcomes
}

/// Delivers a run of check-ins from different instances at once, and
/// records their outcomes in the run's order.
async fn check_in_all(
    events: &Events,
    link: &Arc<dyn ControllerLink>,
    run: Vec<(String, MachineId, Secret, u32)>,
    outcomes: &mut Vec<(String, AgentState)>,
) {
    if run.is_empty() {
        return;
    }
    let (agents, calls): (Vec<_>, Vec<_>) = run
        .into_iter()
        .map(|(id, machine, password, attempt)| {
            (
                (id, machine, attempt),
                link.agent_connect(machine, password),
            )
        })
        .unzip();
    let answers = futures_util::future::join_all(calls).await;
    for ((id, machine, attempt), answer) in agents.into_iter().zip(answers) {
        match answer {
            Ok(()) => outcomes.push((id, AgentState::Connected)),
            Err(reason) if attempt < AGENT_ATTEMPTS => {
                log::info!(
                    "the agent of machine {machine} on {id} was refused \
                     (attempt {attempt} of {AGENT_ATTEMPTS}): {reason}"
                );
                events.schedule(
                    Instant::now() + AGENT_RETRY_DELAY,
                    Due::AgentCheckIn {
                        id,
                        attempt: attempt + 1,
                    },
                );
            }
            Err(reason) => {
                log::warn!(
                    "the agent of machine {machine} on {id} gives up after \
                     {AGENT_ATTEMPTS} refusals: {reason}"
                );
                outcomes.push((id, AgentState::Refused));
            }
        }
    }
}

/// The background task: applies due events, delivers reports once a link
/// is attached, and sleeps until the next event or a wake-up. Holds the
/// cloud weakly, upgrading only for ledger work, and stops once the cloud
/// is dropped.
async fn drive(cloud: Weak<Inner>, events: Arc<Events>) {
    let interval = match cloud.upgrade() {
        Some(inner) => inner.settings.heartbeat_interval,
        None => return,
    };
    let shared = cloud.upgrade().is_some_and(|inner| inner.settings.shared);
    let mut next_heartbeat = Instant::now() + interval;
    let mut next_poll = Instant::now() + SHARED_POLL;
    loop {
        if events.is_closed() {
            return;
        }
        let now = Instant::now();
        if shared && now >= next_poll {
            next_poll = now + SHARED_POLL;
            let Some(inner) = cloud.upgrade() else {
                return;
            };
            inner.take_up_orphans().await;
            continue;
        }
        if now >= next_heartbeat {
            next_heartbeat = now + interval;
            if let Some(link) = events.link() {
                let Some(inner) = cloud.upgrade() else {
                    return;
                };
                let alive = inner.connected_agents();
                drop(inner);
                if !alive.is_empty() {
                    link.agents_alive(alive).await;
                }
            }
            continue;
        }
        // A batch of due events and then a batch of reports, in turn:
        // while a deploy keeps starts coming due, reports (agents' check-
        // ins among them) are not held back until the starts run out.
        let due = events.take_due(now, DRIVER_BATCH);
        let applied = !due.is_empty();
        if applied {
            let Some(inner) = cloud.upgrade() else {
                return;
            };
            inner.process_due(due, now).await;
        }
        if let Some(link) = events.link() {
            let batch = events.take_outgoing(DRIVER_BATCH);
            if !batch.is_empty() {
                let Some(inner) = cloud.upgrade() else {
                    return;
                };
                let batch = inner.still_wanted(batch).await;
                let outcomes = deliver(&events, &link, batch).await;
                if !outcomes.is_empty() {
                    let Some(inner) = cloud.upgrade() else {
                        return;
                    };
                    inner.record_agents(outcomes).await;
                }
                continue;
            }
        }
        if applied {
            continue;
        }
        let wake = events.wake();
        let mut at = events
            .next_at()
            .map_or(next_heartbeat, |at| at.min(next_heartbeat));
        if shared {
            at = at.min(next_poll);
        }
        tokio::select! {
            () = tokio::time::sleep_until(at) => {}
            () = wake.notified() => {}
        }
    }
}

#[async_trait]
impl Provider for SimProvider {
    fn name(&self) -> &str {
        "sim"
    }

    fn supported_constraints(&self) -> &[Key] {
        &SUPPORTED_CONSTRAINTS
    }

    fn catalogue(&self) -> &Catalogue {
        self.inner.settings.catalogue.get()
    }

    fn offers(&self, zone: &str, instance_type: &str) -> bool {
        self.inner.settings.zones.iter().any(|z| z == zone)
            && self.catalogue().get(instance_type).is_some()
    }

    fn max_launch_batch(&self) -> usize {
        self.inner.settings.launch_batch
    }

    fn supports_containers(&self) -> bool {
        true
    }

    /// Replaces any earlier link; reports kept until now go to this one.
    fn attach(&self, link: Arc<dyn ControllerLink>) {
        self.inner.events.attach(link);
        self.inner.ensure_driver();
    }

    async fn zones(&self) -> Result<Vec<ProviderZone>, ProviderError> {
        self.inner.ensure_driver();
        self.inner.admit().await?;
        Ok(self.zone_report())
    }

    /// Launches in one ledger write. Takes any number of requests, though
    /// the broker sends at most [`MAX_LAUNCH_BATCH`].
    async fn launch(&self, requests: Vec<LaunchRequest>) -> Vec<Result<Instance, ProviderError>> {
        let count = requests.len();
        if let Err(e) = self.inner.admit().await {
            return vec![Err(e); count];
        }
        let faults = lock(&self.inner.knobs).faults.clone();
        let now = Instant::now();
        let now_ms = wall_ms();
        let outcome = Arc::clone(&self.inner)
            .run(Access::Write, move |settings, state| {
                launch_in(settings, &faults, state, requests, now_ms)
            })
            .await;
        match outcome {
            Ok((results, started)) => {
                let at = now + self.inner.settings.start_delay;
                self.inner
                    .events
                    .schedule_all(at, started.into_iter().map(|id| Due::Start { id }));
                self.inner.ensure_driver();
                results
            }
            Err(e) => vec![Err(e); count],
        }
    }

    async fn terminate(&self, instance_ids: Vec<String>) -> Vec<Result<(), ProviderError>> {
        let count = instance_ids.len();
        if let Err(e) = self.inner.admit().await {
            return vec![Err(e); count];
        }
        let now_ms = wall_ms();
        let outcome = Arc::clone(&self.inner)
            .run(Access::Write, move |_, state| {
                terminate_in(state, &instance_ids, now_ms)
            })
            .await;
        match outcome {
            Ok((failed, reports)) => {
                self.inner
                    .events
                    .send_all(reports.into_iter().map(Outgoing::Changed));
                self.inner.ensure_driver();
                failed
                    .into_iter()
                    .map(|f| match f {
                        None => Ok(()),
                        Some(reason) => Err(transient(format!(
                            "InternalError: the cloud could not record the termination: {reason}"
                        ))),
                    })
                    .collect()
            }
            Err(e) => vec![Err(e); count],
        }
    }

    async fn instances(&self, controller_uuid: &str) -> Result<Vec<Instance>, ProviderError> {
        self.listed(controller_uuid, |r| r.entry.instance()).await
    }

    async fn listed_instances(
        &self,
        controller_uuid: &str,
    ) -> Result<Vec<ListedInstance>, ProviderError> {
        self.listed(controller_uuid, |r| {
            ListedInstance::new(
                &r.entry.id,
                r.entry.machine,
                r.entry.state,
                &addresses_of(&r.entry.id).join(","),
            )
        })
        .await
    }

    async fn instances_named(
        &self,
        controller_uuid: &str,
        ids: Vec<String>,
    ) -> Result<Vec<Instance>, ProviderError> {
        let uuid = controller_uuid.to_string();
        self.read_call(move |state| {
            ids.iter()
                .filter_map(|id| state.ledger.get(id))
                .filter(|r| is_listed_for(r, &uuid))
                .map(|r| r.entry.instance())
                .collect()
        })
        .await
    }
}

impl SimProvider {
    /// A call that only reads: admitted as every call is, then `read` of
    /// the state.
    async fn read_call<T: Send + 'static>(
        &self,
        read: impl FnOnce(&State) -> T + Send + 'static,
    ) -> Result<T, ProviderError> {
        self.inner.ensure_driver();
        self.inner.admit().await?;
        Arc::clone(&self.inner)
            .run(Access::Read, move |_, state| read(state))
            .await
    }

    /// `make` of each instance the cloud lists for the controller
    /// `controller_uuid`, in launch order: a listing call.
    async fn listed<T: Send + 'static>(
        &self,
        controller_uuid: &str,
        make: fn(&Record) -> T,
    ) -> Result<Vec<T>, ProviderError> {
        let uuid = controller_uuid.to_string();
        self.read_call(move |state| {
            // Into a list of the size counted first: with a million
            // instances, a list grown by doubling left its smaller copies
            // behind.
            let listed = || state.ledger.records().filter(|r| is_listed_for(r, &uuid));
            let mut list = Vec::with_capacity(listed().count());
            list.extend(listed().map(make));
            list
        })
        .await
    }
}

/// Whether the cloud lists `record` among the instances of the controller
/// `uuid`: tagged for it and not terminated.
fn is_listed_for(record: &Record, uuid: &str) -> bool {
    record.entry.state != InstanceState::Terminated
        && record.entry.tags.get(tags::CONTROLLER) == Some(uuid)
}

#[cfg(test)]
mod tests;

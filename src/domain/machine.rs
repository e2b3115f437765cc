//! The machine lifecycle: the states a machine goes through from the moment
//! it is recorded until it is removed, every transition between them, and
//! how each state reads in `status`.
//!
//! The engine runs one `MachineActor` per unsettled machine. The actor holds
//! a [`Machine`] (its [`MachineState`] plus a small [`Lifecycle`] record of
//! attempts, zones and errors), turns each message it receives into an
//! [`Event`], asks [`transition`] what to do, writes the resulting machine to
//! the store and only then performs the returned [`Effect`]. Everything in
//! this module is a pure decision: no clocks, no randomness (backoff jitter
//! is an input, [`Jitter`]), no I/O.
//!
//! # The states, and why these
//!
//! Juju's per-machine redesign walks Pending → RequestingZone → Provisioning
//! → Running → Stopping → Removing. berth keeps that spine (as `pending`,
//! `allocating`, `starting`, `started`, `stopping`, `dead`) and adds the
//! states the seeds make necessary:
//!
//! - `awaiting-agent`: the bootstrap watch needs a state in which an
//!   instance exists but its agent has not checked in, so a timeout can
//!   terminate it and launch again.
//! - `retrying`: a transient failure waits out its backoff delay somewhere
//!   that is neither "in error" (the user need not act) nor "allocating"
//!   (nothing is in flight).
//! - `provisioning-error`: the settled failure that `retry-provisioning`
//!   leaves, as in Juju.
//! - `down`: the agent checked in once and its heartbeats have stopped.
//! - `dying`: destroyed while a launch is in flight. The instance id is not
//!   known yet, so nothing can be terminated; when the launch answers, the
//!   instance is stopped (or, if the launch failed, the machine just goes).
//! - `relaunching`: the old instance of a machine whose agent never checked
//!   in is being terminated before a new one is launched (stop unknown
//!   instances before starting new ones, so one machine never holds two).
//!
//! # The table
//!
//! Every pair not listed is an [`IllegalTransition`]. `resume` (the actor was
//! rebuilt from the store, and whatever was in flight is lost) is accepted in
//! every state; see [`Event::Resume`].
//!
//! | state              | event                          | next state           | effect                  |
//! |--------------------|--------------------------------|----------------------|-------------------------|
//! | pending            | start-instance                 | allocating           | choose a zone           |
//! | allocating         | zone-chosen                    | starting             | launch in that zone     |
//! | allocating         | no-zone-available              | retrying / error     | schedule retry / none   |
//! | starting           | instance-started               | awaiting-agent       | watch bootstrap         |
//! | starting           | instance-failed (zone)         | allocating           | choose another zone     |
//! | starting           | instance-failed (transient)    | retrying / error     | schedule retry / none   |
//! | starting           | instance-failed (permanent)    | provisioning-error   | none                    |
//! | retrying           | retry-due                      | allocating           | choose a zone           |
//! | awaiting-agent     | agent-connected                | started              | none                    |
//! | awaiting-agent     | bootstrap-timed-out            | relaunching          | terminate instance      |
//! | relaunching        | instance-stopped               | allocating / error   | choose a zone / none    |
//! | started, down      | agent-connected                | started              | none                    |
//! | started, down      | agent-lost                     | down                 | none                    |
//! | provisioning-error | retry-provisioning             | pending              | replace constraints?    |
//! | no instance yet¹   | destroy                        | dead                 | remove from state       |
//! | starting           | destroy                        | dying                | none                    |
//! | has an instance²   | destroy                        | stopping             | terminate instance      |
//! | relaunching        | destroy                        | stopping             | none (already stopping) |
//! | dying, stopping    | destroy                        | (same)               | none                    |
//! | dying              | instance-started               | stopping             | terminate instance      |
//! | dying              | instance-failed (any)          | dead                 | remove from state       |
//! | stopping           | instance-stopped               | dead                 | remove from state       |
//! | stopping, relaunching | stop-failed                 | (same)               | schedule retry          |
//! | stopping, relaunching | retry-due                   | (same)               | terminate instance      |
//!
//! ¹ pending, allocating, retrying, provisioning-error.
//! ² awaiting-agent, started, down.

use std::num::NonZeroU32;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::domain::constraints::Constraints;
use crate::domain::names::MachineId;
use crate::domain::words::word_enum;

word_enum! {
    /// Whether a machine is a controller (Juju's `manage-model` job) or hosts
    /// workloads. Controllers form their own distribution group and get a
    /// larger default memory.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
    #[serde(rename_all = "lowercase")]
    pub enum MachineRole {
        Controller => "controller",
        Workload => "workload",
    }
}

word_enum! {
    /// Where a machine is in its life, as berth stores it and as the engine
    /// drives it. The words of [`MachineState::as_str`] are what the store
    /// persists (and serde writes); they are stable. The states are
    /// declared, and so listed in [`MachineState::ALL`], in the order of the
    /// lifecycle.
    ///
    /// What each state means to someone reading `status` (the two status words
    /// come from [`machine_status`]):
    #[derive(
        Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
    )]
    #[serde(rename_all = "kebab-case")]
    pub enum MachineState {
        /// Recorded and waiting for the provisioner to take it up; no instance
        /// has been asked for yet. Shows `pending` / `pending`.
        #[default]
        Pending => "pending",
        /// The provisioner is choosing an availability zone for it (after a
        /// zone refused it, the next one). Shows `allocating` / `pending`.
        Allocating => "allocating",
        /// The cloud has been asked for an instance in the chosen zone and has
        /// not answered yet. Shows `allocating` / `pending`.
        Starting => "starting",
        /// A launch failed for a reason that may pass (throttling, capacity,
        /// a network error); berth waits a backoff delay and tries again by
        /// itself. The message says what failed. Shows `allocating` / `pending`.
        Retrying => "retrying",
        /// The instance is running; berth is waiting for its agent to check in.
        /// If it does not within the bootstrap timeout, the instance is replaced.
        /// Shows `running` / `pending`.
        AwaitingAgent => "awaiting-agent",
        /// The agent did not check in in time: its instance is being terminated
        /// so that a fresh one can be launched (or, past the bootstrap attempt
        /// limit, so the machine can be marked in error). Shows `allocating` /
        /// `pending`.
        Relaunching => "relaunching",
        /// The agent has checked in: the machine is up and hosting its units.
        /// Shows `running` / `started`.
        Started => "started",
        /// The agent checked in once but its heartbeats have stopped. berth
        /// leaves the instance alone; the state returns to started when the
        /// agent reconnects. Shows `running` / `down`.
        Down => "down",
        /// berth gave up starting an instance: the message is the cloud's
        /// reason. The machine has no instance. Run `retry-provisioning` (after
        /// fixing the cause, or with new constraints) to try again. Shows
        /// `provisioning error` / `error`.
        ProvisioningError => "provisioning-error",
        /// Removed while its instance was being launched. When the launch
        /// answers, the new instance is stopped and the machine removed. Shows
        /// `stopping` / `stopped`.
        Dying => "dying",
        /// Removed; its instance is being terminated, then the machine goes.
        /// Shows `stopping` / `stopped`.
        Stopping => "stopping",
        /// Gone: no instance, and the record is being deleted. A status taken at
        /// the wrong moment may show it as `stopped` / `stopped`.
        Dead => "dead",
    }
    /// A stored machine state that berth does not know.
    error InvalidMachineState(
        "unknown machine state {0:?} (expected one of {list})",
        list = join(MachineState::ALL.iter().map(|s| s.as_str()))
    );
}

word_enum! {
    /// Juju's life of an entity: alive until someone asks for its removal,
    /// dying while it is being taken apart, dead when nothing is left to do but
    /// delete the record.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
    #[serde(rename_all = "lowercase")]
    pub enum Life {
        Alive => "alive",
        Dying => "dying",
        Dead => "dead",
    }
    /// A life word that is not `alive`, `dying` or `dead`.
    error InvalidLife("unknown life {0:?} (expected alive, dying or dead)");
}

/// The life of a machine in `state`: dying once it has been destroyed and
/// until its instance is gone, dead after.
pub fn life(state: MachineState) -> Life {
    match state {
        MachineState::Dying | MachineState::Stopping => Life::Dying,
        MachineState::Dead => Life::Dead,
        _ => Life::Alive,
    }
}

/// Whether a machine in `state` needs no live actor: nothing is in flight
/// and nothing will happen to it until something from outside (a user, or
/// the agent's presence) changes it.
///
/// `dead` counts as settled because the engine deletes the record in the
/// same store transaction that would write `dead`; a `dead` row found on
/// start-up is handled by [`Event::Resume`].
pub fn is_settled(state: MachineState) -> bool {
    matches!(
        state,
        MachineState::Started
            | MachineState::Down
            | MachineState::ProvisioningError
            | MachineState::Dead
    )
}

/// Whether the engine must keep an actor for a machine in `state`: one
/// that is not settled has something in flight or due (a launch, a timer,
/// a termination), and a machine being removed needs its instance stopped.
pub fn needs_actor(state: MachineState) -> bool {
    !is_settled(state)
}

/// The two words `status` shows for a machine, in Juju's vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MachineStatus {
    /// The instance, as `machine-status`: `pending`, `allocating`,
    /// `running`, `provisioning error`, `stopping` or `stopped`.
    pub machine_status: &'static str,
    /// The machine agent, as `juju-status`: `pending`, `started`, `down`,
    /// `error` or `stopped`.
    pub juju_status: &'static str,
}

/// How a machine in `state` shows in `status`. The message beside these
/// words is [`Lifecycle::last_error`].
pub fn machine_status(state: MachineState) -> MachineStatus {
    let (machine_status, juju_status) = match state {
        MachineState::Pending => ("pending", "pending"),
        MachineState::Allocating
        | MachineState::Starting
        | MachineState::Retrying
        | MachineState::Relaunching => ("allocating", "pending"),
        MachineState::AwaitingAgent => ("running", "pending"),
        MachineState::Started => ("running", "started"),
        MachineState::Down => ("running", "down"),
        MachineState::ProvisioningError => ("provisioning error", "error"),
        MachineState::Dying | MachineState::Stopping => ("stopping", "stopped"),
        MachineState::Dead => ("stopped", "stopped"),
    };
    MachineStatus {
        machine_status,
        juju_status,
    }
}

/// Why a launch failed, as the provider classifies it. The class decides
/// what berth does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// This zone cannot take the instance now (no capacity for the type,
    /// zone impaired, type not offered there): try the next zone at once,
    /// without using up an attempt.
    ZoneSpecific,
    /// Might work if tried again later anywhere (throttling, a timeout, a
    /// 5xx): one attempt used, retry after a backoff delay.
    Transient,
    /// Cannot work until something changes (no instance type fits, the
    /// image is missing, credentials refused): provisioning error at once.
    Permanent,
}

/// The inputs of the lifecycle: the messages a `MachineActor` receives,
/// each named after what it reports or asks.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// Provisioner → actor: this pending machine needs an instance.
    StartInstance,
    /// ZoneTracker → actor: launch in this zone.
    ZoneChosen { zone: String },
    /// ZoneTracker → actor: no zone can take the machine. `permanent` when
    /// waiting cannot help (a `zone=` placement or `zones` constraint that
    /// names no zone the cloud has): a provisioning error at once, in the
    /// tracker's words. Otherwise (every zone unhealthy or already failed
    /// this round) a transient failure.
    NoZoneAvailable { reason: String, permanent: bool },
    /// ProviderBroker → actor: the launch succeeded with this instance.
    InstanceStarted { instance_id: String },
    /// ProviderBroker → actor: the launch failed.
    InstanceFailed {
        kind: FailureKind,
        /// The provider's words, shown to the user in `status`.
        message: String,
    },
    /// API → actor: the machine agent checked in (first time with its
    /// one-time password, or again after being down).
    AgentConnected,
    /// Presence monitor → actor: the agent's heartbeats stopped.
    AgentLost,
    /// Bootstrap timer → actor: the agent did not check in in time.
    BootstrapTimedOut,
    /// Backoff timer → actor: the delay after a failure is over.
    RetryDue,
    /// API (`retry-provisioning`, alias `resolved`) → actor: try a machine
    /// in error again, optionally with new constraints.
    Retry {
        /// Boxed: constraints are large and this event is rare.
        constraints: Option<Box<Constraints>>,
    },
    /// API (`remove-machine`) → actor: remove this machine and its instance.
    Destroy,
    /// ProviderBroker → actor: the instance is terminated.
    InstanceStopped,
    /// ProviderBroker → actor: terminating the instance failed.
    StopFailed { message: String },
    /// Engine → actor: the actor was (re)built from the store. Whatever was
    /// in flight before (a zone request, a launch, a timer, a termination)
    /// is lost and must be asked for again.
    Resume,
}

word_enum! {
    /// An [`Event`] without its data: what error messages and the table name.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum EventKind {
        StartInstance => "start-instance",
        ZoneChosen => "zone-chosen",
        NoZoneAvailable => "no-zone-available",
        InstanceStarted => "instance-started",
        InstanceFailed => "instance-failed",
        AgentConnected => "agent-connected",
        AgentLost => "agent-lost",
        BootstrapTimedOut => "bootstrap-timed-out",
        RetryDue => "retry-due",
        Retry => "retry-provisioning",
        Destroy => "destroy",
        InstanceStopped => "instance-stopped",
        StopFailed => "stop-failed",
        Resume => "resume",
    }
}

impl Event {
    pub fn kind(&self) -> EventKind {
        match self {
            Event::StartInstance => EventKind::StartInstance,
            Event::ZoneChosen { .. } => EventKind::ZoneChosen,
            Event::NoZoneAvailable { .. } => EventKind::NoZoneAvailable,
            Event::InstanceStarted { .. } => EventKind::InstanceStarted,
            Event::InstanceFailed { .. } => EventKind::InstanceFailed,
            Event::AgentConnected => EventKind::AgentConnected,
            Event::AgentLost => EventKind::AgentLost,
            Event::BootstrapTimedOut => EventKind::BootstrapTimedOut,
            Event::RetryDue => EventKind::RetryDue,
            Event::Retry { .. } => EventKind::Retry,
            Event::Destroy => EventKind::Destroy,
            Event::InstanceStopped => EventKind::InstanceStopped,
            Event::StopFailed { .. } => EventKind::StopFailed,
            Event::Resume => EventKind::Resume,
        }
    }
}

/// What the engine must do after writing a transition to the store.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Nothing; wait for the next message.
    None,
    /// Ask the ZoneTracker for a zone, leaving out the zones that already
    /// refused this machine in this round.
    ChooseZone { exclude: Vec<String> },
    /// Ask the provider for an instance in this zone.
    LaunchInstance { zone: String },
    /// Start the bootstrap timer: send [`Event::BootstrapTimedOut`] after
    /// this long unless the agent checks in first.
    WatchBootstrap { after: Duration },
    /// Ask the provider to terminate this instance.
    TerminateInstance { instance_id: String },
    /// Send [`Event::RetryDue`] after this long.
    ScheduleRetry { after: Duration },
    /// Store these as the machine's constraints (before it is provisioned
    /// again).
    ReplaceConstraints(Box<Constraints>),
    /// Delete the machine from the store.
    RemoveFromState,
}

/// Exponential backoff for transient launch failures: the delay starts at
/// `initial`, doubles after every failure, never exceeds `max`, and "equal
/// jitter" takes away up to half of it so that many machines failing at
/// once do not retry in step.
///
/// The default, 500 ms doubling to 30 s with 10 attempts, gives delays of
/// 0.5, 1, 2, 4, 8, 16, 30, 30 and 30 s (before jitter) between the ten
/// tries: about two minutes of trying before the machine shows an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The delay after the first failure.
    pub initial: Duration,
    /// No delay is longer than this. An `initial` above it means every delay
    /// is `max`.
    pub max: Duration,
    /// How many launches may be tried before the machine is in error. At
    /// least one, so the limit is never "zero tries" (a machine that can
    /// never be started).
    pub attempts: NonZeroU32,
}

const TEN: NonZeroU32 = match NonZeroU32::new(10) {
    Some(n) => n,
    None => NonZeroU32::MIN,
};

const THREE: NonZeroU32 = match NonZeroU32::new(3) {
    Some(n) => n,
    None => NonZeroU32::MIN,
};

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(500),
            max: Duration::from_secs(30),
            attempts: TEN,
        }
    }
}

impl Backoff {
    /// The delay to wait after the `failures`-th failure (counting from 1;
    /// 0 is treated as 1).
    ///
    /// # Guarantees
    ///
    /// For a fixed `jitter`, the delay never decreases as `failures` grows,
    /// and it is never above `max`. With `Jitter::NONE` it is exactly
    /// `min(initial × 2^(failures−1), max)`; any jitter takes away at most
    /// half of that.
    pub fn delay(&self, failures: u32, jitter: Jitter) -> Duration {
        let mut base = self.initial;
        for _ in 1..failures {
            if base >= self.max {
                break;
            }
            base = base.saturating_mul(2);
        }
        let capped = base.min(self.max);
        let nanos = capped.as_nanos();
        let factor = 1.0 - jitter.value() / 2.0;
        // `as` from f64 to an integer saturates; `min` keeps rounding from
        // ever pushing the delay above `capped`.
        let jittered = ((nanos as f64 * factor) as u128).min(nanos);
        duration_from_nanos(jittered)
    }
}

fn duration_from_nanos(nanos: u128) -> Duration {
    const NANOS_PER_SEC: u128 = 1_000_000_000;
    let secs = u64::try_from(nanos / NANOS_PER_SEC).unwrap_or(u64::MAX);
    // The remainder is below one second, so it fits and does not carry.
    let sub = u32::try_from(nanos % NANOS_PER_SEC).unwrap_or(0);
    Duration::new(secs, sub)
}

/// A random fraction in `[0, 1)`, drawn by the engine and passed in so that
/// the decisions here stay pure.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct Jitter(f64);

/// A jitter value outside `[0, 1)`.
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
#[error("jitter must be a number from 0 up to (not including) 1, got {0}")]
pub struct JitterOutOfRange(pub f64);

impl Jitter {
    /// No jitter: the full delay.
    pub const NONE: Jitter = Jitter(0.0);

    /// # Errors
    ///
    /// [`JitterOutOfRange`] unless `0 <= value < 1` (NaN is refused).
    pub fn new(value: f64) -> Result<Jitter, JitterOutOfRange> {
        if (0.0..1.0).contains(&value) {
            Ok(Jitter(value))
        } else {
            Err(JitterOutOfRange(value))
        }
    }

    pub fn value(self) -> f64 {
        self.0
    }
}

/// The knobs of the lifecycle, read once from configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Retries of transient launch failures (and of failed terminations,
    /// which are retried without limit at the same delays).
    pub backoff: Backoff,
    /// How long a launched instance has for its agent to check in.
    pub bootstrap_timeout: Duration,
    /// How many instances may be launched and time out before the machine
    /// is in error.
    pub bootstrap_attempts: NonZeroU32,
}

impl Default for Policy {
    /// The default backoff, a 10-minute bootstrap timeout (berth's
    /// `bootstrap_timeout_s = 600`) and three bootstrap attempts.
    fn default() -> Self {
        Policy {
            backoff: Backoff::default(),
            bootstrap_timeout: Duration::from_secs(600),
            bootstrap_attempts: THREE,
        }
    }
}

/// The bookkeeping that goes with a machine's state, stored beside it.
/// [`transition`] is the only thing that changes it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lifecycle {
    /// Launches that failed transiently (or found no zone) since the machine
    /// was last made eligible; at `Backoff::attempts` the machine is in
    /// error. Zone-specific failures do not count.
    pub attempts_used: u32,
    /// Zones that refused the machine in the current round, with the
    /// cloud's words, left out when the next zone is chosen so that a zone
    /// failure moves on instead of going round in circles. They stay while
    /// the machine waits to retry or is in error (the words are what
    /// explanations show) and are cleared when a new round begins.
    pub zones_failed: Vec<ZoneRefusal>,
    /// The zone of the launch in flight or of the instance; needed to mark
    /// that zone failed, and to launch again on resume.
    pub zone: Option<String>,
    /// The provider's id of the machine's instance, once known; needed to
    /// terminate it. `None` whenever the machine has no instance, so a
    /// machine in error never has one.
    pub instance_id: Option<String>,
    /// Instances whose agent did not check in in time; at
    /// `Policy::bootstrap_attempts` the machine is in error.
    pub bootstrap_timeouts: u32,
    /// Failed terminations of the current instance; only sets the delay
    /// before the next try (terminating is never given up).
    pub stop_failures: u32,
    /// The last failure, in the provider's words: the status message.
    pub last_error: Option<String>,
    /// How many times `retry-provisioning` began the machine's
    /// provisioning again. Part of each launch's client token, which is
    /// otherwise made of counters a retry sets back to zero: without it a
    /// new round would repeat the first round's tokens, and the cloud
    /// would answer them with that round's instances, long terminated.
    pub provisioning_rounds: u32,
}

impl Lifecycle {
    /// The client token of the launch of `machine` into `zone` now, for
    /// the cloud to make the launch idempotent: the same for the same
    /// launch (one resumed after a restart, or a call repeated after a
    /// timeout, gets its instance back, never a second), and new for each
    /// new launch: each failed attempt, each relaunch after an agent did
    /// not check in, each zone, each round of `retry-provisioning`.
    pub fn client_token(&self, controller: &str, machine: MachineId, zone: &str) -> String {
        let (attempts, timeouts) = (self.attempts_used, self.bootstrap_timeouts);
        match self.provisioning_rounds {
            // The form tokens had before rounds were counted, so that a
            // launch in flight across an upgrade keeps its token.
            0 => format!("{controller}-{machine}-{attempts}-{timeouts}-{zone}"),
            round => format!("{controller}-{machine}-r{round}-{attempts}-{timeouts}-{zone}"),
        }
    }
}

/// A zone that refused a machine, and the cloud's words for why.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZoneRefusal {
    pub zone: String,
    /// Empty when not known (a record written before reasons were kept).
    pub reason: String,
}

impl ZoneRefusal {
    pub fn new(zone: impl Into<String>, reason: impl Into<String>) -> ZoneRefusal {
        ZoneRefusal {
            zone: zone.into(),
            reason: reason.into(),
        }
    }
}

impl std::fmt::Display for ZoneRefusal {
    /// `az-a` or `az-a: no capacity`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.reason.is_empty() {
            f.write_str(&self.zone)
        } else {
            write!(f, "{}: {}", self.zone, self.reason)
        }
    }
}

/// A machine as the lifecycle sees it: where it is, and its bookkeeping.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    pub state: MachineState,
    pub lifecycle: Lifecycle,
}

impl Machine {
    /// A machine just recorded: pending, nothing tried yet.
    pub fn new() -> Machine {
        Machine::default()
    }
}

/// The outcome of one legal event: the machine to store, then the effect to
/// perform.
#[derive(Clone, Debug, PartialEq)]
pub struct Transition {
    pub next: Machine,
    pub effect: Effect,
}

/// An event the lifecycle does not accept in the machine's state.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IllegalTransition {
    /// The table has no row for this state and event. For `retry-provisioning`
    /// on a machine not in error, the API answers 409 conflict.
    #[error(
        "{event} is not allowed when a machine is {state} (only when it is {expected})",
        expected = expected_states(.event)
    )]
    NotAllowed {
        state: MachineState,
        event: EventKind,
    },
    /// The row exists but the stored record lacks what it needs (an
    /// instance id to terminate, a zone to mark failed). Only a damaged
    /// record gets here.
    #[error(
        "a machine that is {state} has no {missing} recorded, so {event} cannot be carried out"
    )]
    MissingRecord {
        state: MachineState,
        event: EventKind,
        missing: &'static str,
    },
}

impl IllegalTransition {
    pub fn state(&self) -> MachineState {
        match self {
            IllegalTransition::NotAllowed { state, .. }
            | IllegalTransition::MissingRecord { state, .. } => *state,
        }
    }

    pub fn event(&self) -> EventKind {
        match self {
            IllegalTransition::NotAllowed { event, .. }
            | IllegalTransition::MissingRecord { event, .. } => *event,
        }
    }
}

/// The states in which the table accepts events of this kind.
pub fn accepting_states(event: EventKind) -> &'static [MachineState] {
    use MachineState as S;
    match event {
        EventKind::StartInstance => &[S::Pending],
        EventKind::ZoneChosen | EventKind::NoZoneAvailable => &[S::Allocating],
        EventKind::InstanceStarted | EventKind::InstanceFailed => &[S::Starting, S::Dying],
        EventKind::AgentConnected => &[S::AwaitingAgent, S::Started, S::Down],
        EventKind::AgentLost => &[S::Started, S::Down],
        EventKind::BootstrapTimedOut => &[S::AwaitingAgent],
        EventKind::RetryDue => &[S::Retrying, S::Relaunching, S::Stopping],
        EventKind::Retry => &[S::ProvisioningError],
        EventKind::Destroy => &[
            S::Pending,
            S::Allocating,
            S::Starting,
            S::Retrying,
            S::AwaitingAgent,
            S::Relaunching,
            S::Started,
            S::Down,
            S::ProvisioningError,
            S::Dying,
            S::Stopping,
        ],
        EventKind::InstanceStopped | EventKind::StopFailed => &[S::Relaunching, S::Stopping],
        EventKind::Resume => &MachineState::ALL,
    }
}

/// Applies `event` to `machine`: the lifecycle's whole decision.
///
/// `jitter` is used only when the outcome schedules a retry.
///
/// # Errors
///
/// [`IllegalTransition::NotAllowed`] when the table has no row for the
/// machine's state and the event (the machine is left as it was: the caller
/// keeps its old value). [`IllegalTransition::MissingRecord`] when the row
/// needs an instance id or zone that the record lacks.
///
/// # Guarantees
///
/// - `attempts_used` never exceeds `policy.backoff.attempts` and
///   `bootstrap_timeouts` never exceeds `policy.bootstrap_attempts` (for
///   records that started within them).
/// - A machine in `provisioning-error` or without a live instance has no
///   `instance_id`; one in `provisioning-error` has a `last_error`.
/// - A zone-specific failure uses no attempt; a permanent one goes straight
///   to `provisioning-error`.
pub fn transition(
    machine: &Machine,
    event: &Event,
    policy: &Policy,
    jitter: Jitter,
) -> Result<Transition, IllegalTransition> {
    use Event as E;
    use MachineState as S;

    let state = machine.state;
    let kind = event.kind();
    let mut life = machine.lifecycle.clone();
    let missing = |what: &'static str| IllegalTransition::MissingRecord {
        state,
        event: kind,
        missing: what,
    };
    let instance = |life: &Lifecycle| life.instance_id.clone().ok_or(missing("instance id"));

    let (next, effect) = match (state, event) {
        // Provisioning.
        (S::Pending, E::StartInstance) => {
            life.zones_failed.clear();
            (S::Allocating, choose_zone(&life))
        }
        (S::Allocating, E::ZoneChosen { zone }) => {
            life.zone = Some(zone.clone());
            (S::Starting, Effect::LaunchInstance { zone: zone.clone() })
        }
        (S::Allocating, E::NoZoneAvailable { reason, permanent }) => {
            if *permanent {
                provisioning_error(&mut life, reason.clone())
            } else {
                let message = no_zone_message(&life.zones_failed, reason);
                transient_failure(&mut life, policy, jitter, message)
            }
        }
        (S::Starting, E::InstanceStarted { instance_id }) => {
            life.instance_id = Some(instance_id.clone());
            (
                S::AwaitingAgent,
                Effect::WatchBootstrap {
                    after: policy.bootstrap_timeout,
                },
            )
        }
        (S::Starting, E::InstanceFailed { kind, message }) => match kind {
            FailureKind::ZoneSpecific => {
                let zone = life.zone.take().ok_or(missing("zone"))?;
                if !life.zones_failed.iter().any(|r| r.zone == zone) {
                    life.zones_failed
                        .push(ZoneRefusal::new(zone, message.clone()));
                }
                life.last_error = Some(message.clone());
                (S::Allocating, choose_zone(&life))
            }
            FailureKind::Transient => transient_failure(&mut life, policy, jitter, message.clone()),
            FailureKind::Permanent => provisioning_error(&mut life, message.clone()),
        },
        (S::Retrying, E::RetryDue) => {
            // A new round: every zone may be tried again. "Retrying in"
            // no longer holds.
            life.zones_failed.clear();
            life.last_error = None;
            (S::Allocating, choose_zone(&life))
        }

        // The bootstrap watch.
        (S::AwaitingAgent, E::AgentConnected) => {
            life.last_error = None;
            (S::Started, Effect::None)
        }
        (S::AwaitingAgent, E::BootstrapTimedOut) => {
            let instance_id = instance(&life)?;
            life.bootstrap_timeouts = life.bootstrap_timeouts.saturating_add(1);
            life.last_error = Some(format!(
                "machine agent did not check in within {} (attempt {} of {})",
                human(policy.bootstrap_timeout),
                life.bootstrap_timeouts,
                policy.bootstrap_attempts
            ));
            (S::Relaunching, Effect::TerminateInstance { instance_id })
        }
        (S::Relaunching, E::InstanceStopped) => {
            life.instance_id = None;
            life.zone = None;
            life.stop_failures = 0;
            if life.bootstrap_timeouts >= policy.bootstrap_attempts.get() {
                let message = format!(
                    "machine agent did not check in within {} after {} attempts",
                    human(policy.bootstrap_timeout),
                    life.bootstrap_timeouts
                );
                provisioning_error(&mut life, message)
            } else {
                life.zones_failed.clear();
                (S::Allocating, choose_zone(&life))
            }
        }

        // Presence of a started machine's agent.
        (S::Started | S::Down, E::AgentConnected) => {
            // Heard again: why it was down no longer holds.
            life.last_error = None;
            (S::Started, Effect::None)
        }
        (S::Started | S::Down, E::AgentLost) => (S::Down, Effect::None),

        // retry-provisioning.
        (S::ProvisioningError, E::Retry { constraints }) => {
            life = Lifecycle {
                provisioning_rounds: life.provisioning_rounds.saturating_add(1),
                ..Lifecycle::default()
            };
            let effect = match constraints {
                Some(constraints) => Effect::ReplaceConstraints(constraints.clone()),
                None => Effect::None,
            };
            (S::Pending, effect)
        }

        // Removal.
        (S::Pending | S::Allocating | S::Retrying | S::ProvisioningError, E::Destroy) => {
            life.zone = None;
            (S::Dead, Effect::RemoveFromState)
        }
        (S::Starting, E::Destroy) => (S::Dying, Effect::None),
        (S::AwaitingAgent | S::Started | S::Down, E::Destroy) => {
            let instance_id = instance(&life)?;
            (S::Stopping, Effect::TerminateInstance { instance_id })
        }
        (S::Relaunching, E::Destroy) => (S::Stopping, Effect::None),
        (S::Dying | S::Stopping, E::Destroy) => (state, Effect::None),
        (S::Dying, E::InstanceStarted { instance_id }) => {
            life.instance_id = Some(instance_id.clone());
            let instance_id = instance_id.clone();
            (S::Stopping, Effect::TerminateInstance { instance_id })
        }
        (S::Dying, E::InstanceFailed { .. }) => {
            life.zone = None;
            (S::Dead, Effect::RemoveFromState)
        }
        (S::Stopping, E::InstanceStopped) => {
            life.instance_id = None;
            life.zone = None;
            life.stop_failures = 0;
            (S::Dead, Effect::RemoveFromState)
        }
        (S::Stopping | S::Relaunching, E::StopFailed { message }) => {
            life.stop_failures = life.stop_failures.saturating_add(1);
            life.last_error = Some(message.clone());
            let after = policy.backoff.delay(life.stop_failures, jitter);
            (state, Effect::ScheduleRetry { after })
        }
        (S::Stopping | S::Relaunching, E::RetryDue) => {
            let instance_id = instance(&life)?;
            (state, Effect::TerminateInstance { instance_id })
        }

        // Resuming from the store: ask again for whatever was in flight.
        (S::Pending | S::Started | S::Down | S::ProvisioningError, E::Resume) => {
            (state, Effect::None)
        }
        (S::Allocating, E::Resume) => (state, choose_zone(&life)),
        // The lost launch may have started an instance whose id was never
        // recorded. It carries berth's tags but belongs to no machine, so the
        // stray sweep stops it; the engine must sweep before relaunching.
        (S::Starting, E::Resume) => {
            let zone = life.zone.clone().ok_or(missing("zone"))?;
            (state, Effect::LaunchInstance { zone })
        }
        (S::Retrying, E::Resume) => {
            let after = policy.backoff.delay(life.attempts_used, jitter);
            (state, Effect::ScheduleRetry { after })
        }
        // The timer's start time is not stored: the agent gets a full
        // timeout again, never less than it was promised.
        (S::AwaitingAgent, E::Resume) => (
            state,
            Effect::WatchBootstrap {
                after: policy.bootstrap_timeout,
            },
        ),
        (S::Relaunching | S::Stopping, E::Resume) => {
            let instance_id = instance(&life)?;
            (state, Effect::TerminateInstance { instance_id })
        }
        // The launch was lost with the old actor; any instance it made is a
        // stray, and the sweep stops it.
        (S::Dying, E::Resume) => {
            life.zone = None;
            (S::Dead, Effect::RemoveFromState)
        }
        (S::Dead, E::Resume) => (S::Dead, Effect::RemoveFromState),

        _ => return Err(IllegalTransition::NotAllowed { state, event: kind }),
    };

    Ok(Transition {
        next: Machine {
            state: next,
            lifecycle: life,
        },
        effect,
    })
}

fn choose_zone(life: &Lifecycle) -> Effect {
    Effect::ChooseZone {
        exclude: life.zones_failed.iter().map(|r| r.zone.clone()).collect(),
    }
}

/// One more attempt used: retry after a delay, or give up at the limit.
fn transient_failure(
    life: &mut Lifecycle,
    policy: &Policy,
    jitter: Jitter,
    message: String,
) -> (MachineState, Effect) {
    life.attempts_used = life.attempts_used.saturating_add(1);
    life.zone = None;
    // The round's refusals stay while the machine waits (explanations
    // show them); the next round clears them when it begins.
    if life.attempts_used >= policy.backoff.attempts.get() {
        return provisioning_error(life, message);
    }
    life.last_error = Some(message);
    let after = policy.backoff.delay(life.attempts_used, jitter);
    (MachineState::Retrying, Effect::ScheduleRetry { after })
}

/// What status says of machine `id` waiting to retry, in Juju's words:
/// `failed to start machine 3 (throttled), retrying in 4s (7 more
/// attempts)`.
pub fn retry_message(id: MachineId, cause: &str, after: Duration, attempts_left: u32) -> String {
    let after = if after < Duration::from_secs(1) {
        format!("{}ms", after.as_millis())
    } else if after.subsec_millis() == 0 {
        format!("{}s", after.as_secs())
    } else {
        format!("{:.1}s", after.as_secs_f64())
    };
    let attempts = match attempts_left {
        1 => "1 more attempt".to_string(),
        n => format!("{n} more attempts"),
    };
    format!("failed to start machine {id} ({cause}), retrying in {after} ({attempts})")
}

/// The cause inside a [`retry_message`] (any other message is its own
/// cause), so that a message is never wrapped twice.
pub fn retry_cause(message: &str) -> &str {
    message
        .strip_prefix("failed to start machine ")
        .and_then(|rest| rest.split_once(" ("))
        .and_then(|(_, rest)| rest.rsplit_once("), retrying in "))
        .map_or(message, |(cause, _)| cause)
}

fn provisioning_error(life: &mut Lifecycle, message: String) -> (MachineState, Effect) {
    // The last round's refusals stay, for explanations; retrying starts
    // afresh.
    life.zone = None;
    life.instance_id = None;
    life.last_error = Some(message);
    (MachineState::ProvisioningError, Effect::None)
}

/// The cause of a round that found no zone: the zones that refused the
/// machine, each with its reason, or else the tracker's reason.
fn no_zone_message(failed: &[ZoneRefusal], reason: &str) -> String {
    if failed.is_empty() {
        if reason.is_empty() {
            "no availability zone is available".to_string()
        } else {
            format!("no availability zone is available: {reason}")
        }
    } else {
        let refusals: Vec<String> = failed.iter().map(ToString::to_string).collect();
        format!(
            "no availability zone is available (refused this round: {})",
            refusals.join("; ")
        )
    }
}

/// `1200 s` as `20m`, `90 s` as `90s`, `500 ms` as `500ms`.
fn human(d: Duration) -> String {
    let secs = d.as_secs();
    if d.subsec_nanos() != 0 || secs == 0 {
        format!("{}ms", d.as_millis())
    } else if secs.is_multiple_of(3600) {
        format!("{}h", secs / 3600)
    } else if secs.is_multiple_of(60) {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}

fn join<'a>(words: impl Iterator<Item = &'a str>) -> String {
    words.collect::<Vec<_>>().join(", ")
}

fn expected_states(event: &EventKind) -> String {
    or_list(accepting_states(*event))
}

/// `a`, `a or b`, `a, b or c`.
fn or_list(states: &[MachineState]) -> String {
    match states.split_last() {
        None => String::new(),
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} or {last}", join(rest.iter().map(|s| s.as_str()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_message_says_why_when_and_how_many_more_in_jujus_words() {
        let id = MachineId::new(3);
        assert_eq!(
            retry_message(id, "throttled", Duration::from_secs(4), 7),
            "failed to start machine 3 (throttled), retrying in 4s (7 more attempts)"
        );
        assert_eq!(
            retry_message(id, "x", Duration::from_millis(500), 1),
            "failed to start machine 3 (x), retrying in 500ms (1 more attempt)"
        );
        assert_eq!(
            retry_message(id, "x", Duration::from_millis(2500), 2),
            "failed to start machine 3 (x), retrying in 2.5s (2 more attempts)"
        );
    }

    #[test]
    fn a_retry_messages_cause_is_found_again_even_with_parentheses() {
        let id = MachineId::new(12);
        for cause in ["throttled", "no capacity (zone a), try later", ""] {
            let message = retry_message(id, cause, Duration::from_secs(1), 3);
            assert_eq!(retry_cause(&message), cause);
        }
        assert_eq!(retry_cause("plain failure"), "plain failure");
    }
    use crate::domain::constraints::{Amount, Setting};

    use proptest::prelude::*;

    #[test]
    fn only_unsettled_machines_need_an_actor() {
        for state in MachineState::ALL {
            assert_eq!(needs_actor(state), !is_settled(state), "{state}");
        }
        assert!(needs_actor(MachineState::Stopping));
        assert!(needs_actor(MachineState::Pending));
        assert!(!needs_actor(MachineState::Started));
        assert!(!needs_actor(MachineState::ProvisioningError));
    }

    fn policy() -> Policy {
        Policy::default()
    }

    fn in_state(state: MachineState) -> Machine {
        Machine {
            state,
            lifecycle: Lifecycle::default(),
        }
    }

    /// A well-formed machine in `state`: an instance id where the state has
    /// an instance, a zone where a launch is in flight, an error message in
    /// error.
    fn well_formed(state: MachineState) -> Machine {
        use MachineState as S;
        let mut machine = in_state(state);
        let life = &mut machine.lifecycle;
        match state {
            S::Starting | S::Dying => life.zone = Some("az-a".into()),
            S::AwaitingAgent | S::Relaunching | S::Started | S::Down | S::Stopping => {
                life.zone = Some("az-a".into());
                life.instance_id = Some("i-1".into());
            }
            S::ProvisioningError => life.last_error = Some("boom".into()),
            _ => {}
        }
        machine
    }

    fn apply(machine: &Machine, event: Event) -> Transition {
        match transition(machine, &event, &policy(), Jitter::NONE) {
            Ok(t) => t,
            Err(e) => panic!("{} + {:?} should be allowed: {e}", machine.state, event),
        }
    }

    fn failed(kind: FailureKind, message: &str) -> Event {
        Event::InstanceFailed {
            kind,
            message: message.into(),
        }
    }

    fn no_zone(reason: &str) -> Event {
        Event::NoZoneAvailable {
            reason: reason.into(),
            permanent: false,
        }
    }

    /// Zones that refused the machine, for no stated reason.
    fn refused(zones: &[&str]) -> Vec<ZoneRefusal> {
        zones.iter().map(|z| ZoneRefusal::new(*z, "")).collect()
    }

    fn chosen(zone: &str) -> Event {
        Event::ZoneChosen { zone: zone.into() }
    }

    fn started(id: &str) -> Event {
        Event::InstanceStarted {
            instance_id: id.into(),
        }
    }

    /// One example of every event, with every failure kind.
    fn sample_events() -> Vec<Event> {
        vec![
            Event::StartInstance,
            chosen("az-b"),
            no_zone(""),
            started("i-2"),
            failed(FailureKind::ZoneSpecific, "zone full"),
            failed(FailureKind::Transient, "throttled"),
            failed(FailureKind::Permanent, "no image"),
            Event::AgentConnected,
            Event::AgentLost,
            Event::BootstrapTimedOut,
            Event::RetryDue,
            Event::Retry { constraints: None },
            Event::Destroy,
            Event::InstanceStopped,
            Event::StopFailed {
                message: "api down".into(),
            },
            Event::Resume,
        ]
    }

    /// The table, written out again independently of `transition`.
    fn allowed(state: MachineState, event: EventKind) -> bool {
        use EventKind as E;
        use MachineState as S;
        let pairs: &[(S, E)] = &[
            (S::Pending, E::StartInstance),
            (S::Pending, E::Destroy),
            (S::Allocating, E::ZoneChosen),
            (S::Allocating, E::NoZoneAvailable),
            (S::Allocating, E::Destroy),
            (S::Starting, E::InstanceStarted),
            (S::Starting, E::InstanceFailed),
            (S::Starting, E::Destroy),
            (S::Retrying, E::RetryDue),
            (S::Retrying, E::Destroy),
            (S::AwaitingAgent, E::AgentConnected),
            (S::AwaitingAgent, E::BootstrapTimedOut),
            (S::AwaitingAgent, E::Destroy),
            (S::Relaunching, E::InstanceStopped),
            (S::Relaunching, E::StopFailed),
            (S::Relaunching, E::RetryDue),
            (S::Relaunching, E::Destroy),
            (S::Started, E::AgentConnected),
            (S::Started, E::AgentLost),
            (S::Started, E::Destroy),
            (S::Down, E::AgentConnected),
            (S::Down, E::AgentLost),
            (S::Down, E::Destroy),
            (S::ProvisioningError, E::Retry),
            (S::ProvisioningError, E::Destroy),
            (S::Dying, E::InstanceStarted),
            (S::Dying, E::InstanceFailed),
            (S::Dying, E::Destroy),
            (S::Stopping, E::InstanceStopped),
            (S::Stopping, E::StopFailed),
            (S::Stopping, E::RetryDue),
            (S::Stopping, E::Destroy),
        ];
        event == E::Resume || pairs.contains(&(state, event))
    }

    // ---- the table as a whole ----

    #[test]
    fn every_pair_outside_the_table_is_an_error_and_every_pair_in_it_is_not() {
        for state in MachineState::ALL {
            for event in sample_events() {
                let result = transition(&well_formed(state), &event, &policy(), Jitter::NONE);
                if allowed(state, event.kind()) {
                    assert!(result.is_ok(), "{state} + {event:?}: {result:?}");
                } else {
                    assert_eq!(
                        result,
                        Err(IllegalTransition::NotAllowed {
                            state,
                            event: event.kind()
                        }),
                        "{state} + {event:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_sample_events_cover_every_event_kind() {
        let kinds: Vec<EventKind> = sample_events().iter().map(Event::kind).collect();
        for kind in EventKind::ALL {
            assert!(kinds.contains(&kind), "{kind} has no sample");
        }
    }

    #[test]
    fn accepting_states_agrees_with_the_table() {
        for kind in EventKind::ALL {
            let expected: Vec<MachineState> = MachineState::ALL
                .into_iter()
                .filter(|s| allowed(*s, kind))
                .collect();
            assert_eq!(accepting_states(kind).to_vec(), expected, "{kind}");
        }
    }

    #[test]
    fn a_dead_machine_accepts_nothing_but_resume() {
        for event in sample_events() {
            let result = transition(
                &in_state(MachineState::Dead),
                &event,
                &policy(),
                Jitter::NONE,
            );
            assert_eq!(result.is_ok(), event == Event::Resume, "{event:?}");
        }
    }

    #[test]
    fn an_illegal_transition_names_the_state_the_event_and_where_it_is_allowed() {
        let err = transition(
            &in_state(MachineState::Started),
            &Event::Retry { constraints: None },
            &policy(),
            Jitter::NONE,
        )
        .unwrap_err();
        assert_eq!(err.state(), MachineState::Started);
        assert_eq!(err.event(), EventKind::Retry);
        assert_eq!(
            err.to_string(),
            "retry-provisioning is not allowed when a machine is started \
             (only when it is provisioning-error)"
        );
    }

    #[test]
    fn an_illegal_transition_lists_several_accepting_states_with_or() {
        let err = transition(
            &in_state(MachineState::Pending),
            &Event::AgentLost,
            &policy(),
            Jitter::NONE,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "agent-lost is not allowed when a machine is pending (only when it is started or down)"
        );
        let err = transition(
            &in_state(MachineState::Pending),
            &Event::RetryDue,
            &policy(),
            Jitter::NONE,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "retry-due is not allowed when a machine is pending \
             (only when it is retrying, relaunching or stopping)"
        );
    }

    // ---- provisioning ----

    #[test]
    fn start_instance_moves_a_pending_machine_to_allocating_and_asks_for_a_zone() {
        let t = apply(&Machine::new(), Event::StartInstance);
        assert_eq!(t.next.state, MachineState::Allocating);
        assert_eq!(t.effect, Effect::ChooseZone { exclude: vec![] });
    }

    #[test]
    fn a_chosen_zone_starts_a_launch_there() {
        let t = apply(&in_state(MachineState::Allocating), chosen("az-a"));
        assert_eq!(t.next.state, MachineState::Starting);
        assert_eq!(t.next.lifecycle.zone.as_deref(), Some("az-a"));
        assert_eq!(
            t.effect,
            Effect::LaunchInstance {
                zone: "az-a".into()
            }
        );
    }

    #[test]
    fn a_started_instance_is_recorded_and_the_bootstrap_watch_begins() {
        let t = apply(&well_formed(MachineState::Starting), started("i-9"));
        assert_eq!(t.next.state, MachineState::AwaitingAgent);
        assert_eq!(t.next.lifecycle.instance_id.as_deref(), Some("i-9"));
        assert_eq!(
            t.effect,
            Effect::WatchBootstrap {
                after: Duration::from_secs(600)
            }
        );
    }

    #[test]
    fn the_agent_checking_in_makes_the_machine_started_and_clears_the_message() {
        let mut machine = well_formed(MachineState::AwaitingAgent);
        machine.lifecycle.last_error = Some("throttled".into());
        let t = apply(&machine, Event::AgentConnected);
        assert_eq!(t.next.state, MachineState::Started);
        assert_eq!(t.next.lifecycle.last_error, None);
        assert_eq!(t.effect, Effect::None);
    }

    #[test]
    fn a_retry_that_falls_due_no_longer_says_it_is_to_come() {
        let mut machine = well_formed(MachineState::Retrying);
        machine.lifecycle.last_error =
            Some("failed to start machine 0 (throttled), retrying in 4s (7 more attempts)".into());
        let t = apply(&machine, Event::RetryDue);
        assert_eq!(t.next.state, MachineState::Allocating);
        assert_eq!(t.next.lifecycle.last_error, None);
    }

    #[test]
    fn a_down_machine_heard_again_is_started_without_the_reason_it_was_down() {
        let mut machine = well_formed(MachineState::Down);
        machine.lifecycle.last_error = Some("agent is not responding".into());
        let t = apply(&machine, Event::AgentConnected);
        assert_eq!(t.next.state, MachineState::Started);
        assert_eq!(t.next.lifecycle.last_error, None);
    }

    #[test]
    fn a_zone_failure_moves_to_the_next_zone_at_once_without_using_an_attempt() {
        let mut machine = well_formed(MachineState::Starting);
        machine.lifecycle.attempts_used = 2;
        machine.lifecycle.zones_failed = refused(&["az-c"]);
        let t = apply(&machine, failed(FailureKind::ZoneSpecific, "no capacity"));
        assert_eq!(t.next.state, MachineState::Allocating);
        assert_eq!(t.next.lifecycle.attempts_used, 2);
        assert_eq!(t.next.lifecycle.zone, None);
        assert_eq!(t.next.lifecycle.last_error.as_deref(), Some("no capacity"));
        assert_eq!(
            t.effect,
            Effect::ChooseZone {
                exclude: vec!["az-c".into(), "az-a".into()]
            }
        );
    }

    #[test]
    fn a_zone_failure_without_a_recorded_zone_is_a_missing_record() {
        let err = transition(
            &in_state(MachineState::Starting),
            &failed(FailureKind::ZoneSpecific, "x"),
            &policy(),
            Jitter::NONE,
        )
        .unwrap_err();
        assert_eq!(
            err,
            IllegalTransition::MissingRecord {
                state: MachineState::Starting,
                event: EventKind::InstanceFailed,
                missing: "zone"
            }
        );
        assert_eq!(
            err.to_string(),
            "a machine that is starting has no zone recorded, so instance-failed cannot be carried out"
        );
    }

    #[test]
    fn no_zone_left_counts_as_a_transient_failure_and_starts_a_new_round() {
        let mut machine = in_state(MachineState::Allocating);
        machine.lifecycle.zones_failed = refused(&["az-a", "az-b"]);
        let t = apply(&machine, no_zone(""));
        assert_eq!(t.next.state, MachineState::Retrying);
        assert_eq!(t.next.lifecycle.attempts_used, 1);
        // Kept while it waits, for explanations.
        assert_eq!(t.next.lifecycle.zones_failed, refused(&["az-a", "az-b"]));
        assert_eq!(
            t.next.lifecycle.last_error.as_deref(),
            Some("no availability zone is available (refused this round: az-a; az-b)")
        );
        assert_eq!(
            t.effect,
            Effect::ScheduleRetry {
                after: Duration::from_millis(500)
            }
        );
    }

    #[test]
    fn a_zone_no_cloud_has_is_a_provisioning_error_at_once_in_the_trackers_words() {
        let t = apply(
            &in_state(MachineState::Allocating),
            Event::NoZoneAvailable {
                reason: "zone \"no-such-zone\" not found; available zones: az-a".into(),
                permanent: true,
            },
        );
        assert_eq!(t.next.state, MachineState::ProvisioningError);
        assert_eq!(t.next.lifecycle.attempts_used, 0);
        assert_eq!(
            t.next.lifecycle.last_error.as_deref(),
            Some("zone \"no-such-zone\" not found; available zones: az-a")
        );
    }

    #[test]
    fn a_round_of_refusals_keeps_each_zones_reason() {
        let mut machine = well_formed(MachineState::Starting);
        machine = apply(&machine, failed(FailureKind::ZoneSpecific, "no capacity")).next;
        machine = apply(&machine, chosen("az-b")).next;
        machine = apply(
            &machine,
            failed(FailureKind::ZoneSpecific, "type not offered"),
        )
        .next;
        assert_eq!(
            machine.lifecycle.zones_failed,
            vec![
                ZoneRefusal::new("az-a", "no capacity"),
                ZoneRefusal::new("az-b", "type not offered")
            ]
        );
        let t = apply(&machine, no_zone("every zone refused"));
        assert_eq!(
            t.next.lifecycle.last_error.as_deref(),
            Some(
                "no availability zone is available (refused this round: az-a: no capacity; \
                 az-b: type not offered)"
            )
        );
    }

    #[test]
    fn no_healthy_zone_at_all_says_so() {
        let t = apply(&in_state(MachineState::Allocating), no_zone(""));
        assert_eq!(
            t.next.lifecycle.last_error.as_deref(),
            Some("no availability zone is available")
        );
    }

    #[test]
    fn a_transient_failure_uses_an_attempt_and_schedules_a_retry_with_backoff() {
        let mut machine = well_formed(MachineState::Starting);
        machine.lifecycle.attempts_used = 2;
        machine.lifecycle.zones_failed = refused(&["az-c"]);
        let t = apply(&machine, failed(FailureKind::Transient, "throttled"));
        assert_eq!(t.next.state, MachineState::Retrying);
        assert_eq!(t.next.lifecycle.attempts_used, 3);
        assert_eq!(t.next.lifecycle.zones_failed, refused(&["az-c"]));
        assert_eq!(t.next.lifecycle.zone, None);
        assert_eq!(t.next.lifecycle.last_error.as_deref(), Some("throttled"));
        assert_eq!(
            t.effect,
            Effect::ScheduleRetry {
                after: Duration::from_secs(2)
            }
        );
    }

    #[test]
    fn the_retry_delay_takes_the_jitter_given() {
        let machine = well_formed(MachineState::Starting);
        let jitter = Jitter::new(0.5).unwrap();
        let t = transition(
            &machine,
            &failed(FailureKind::Transient, "throttled"),
            &policy(),
            jitter,
        )
        .unwrap();
        assert_eq!(
            t.effect,
            Effect::ScheduleRetry {
                after: Duration::from_millis(375)
            }
        );
    }

    #[test]
    fn a_due_retry_starts_a_new_round_with_every_zone() {
        let mut machine = in_state(MachineState::Retrying);
        machine.lifecycle.zones_failed = refused(&["az-a"]);
        let t = apply(&machine, Event::RetryDue);
        assert_eq!(t.next.state, MachineState::Allocating);
        assert!(t.next.lifecycle.zones_failed.is_empty());
        assert_eq!(t.effect, Effect::ChooseZone { exclude: vec![] });
    }

    #[test]
    fn the_last_allowed_attempt_failing_puts_the_machine_in_error_with_the_providers_message() {
        let mut machine = well_formed(MachineState::Starting);
        machine.lifecycle.attempts_used = 9;
        let t = apply(
            &machine,
            failed(FailureKind::Transient, "RequestLimitExceeded"),
        );
        assert_eq!(t.next.state, MachineState::ProvisioningError);
        assert_eq!(t.next.lifecycle.attempts_used, 10);
        assert_eq!(
            t.next.lifecycle.last_error.as_deref(),
            Some("RequestLimitExceeded")
        );
        assert_eq!(t.next.lifecycle.instance_id, None);
        assert_eq!(t.effect, Effect::None);
    }

    #[test]
    fn ten_transient_failures_in_a_row_end_in_error_after_nine_retries() {
        let mut machine = Machine::new();
        let mut retries = 0;
        machine = apply(&machine, Event::StartInstance).next;
        loop {
            machine = apply(&machine, chosen("az-a")).next;
            let t = apply(&machine, failed(FailureKind::Transient, "throttled"));
            machine = t.next;
            if machine.state == MachineState::ProvisioningError {
                break;
            }
            retries += 1;
            machine = apply(&machine, Event::RetryDue).next;
        }
        assert_eq!(retries, 9);
        assert_eq!(machine.lifecycle.attempts_used, 10);
    }

    #[test]
    fn zone_failures_never_exhaust_the_attempts() {
        let mut machine = apply(&Machine::new(), Event::StartInstance).next;
        for i in 0..50 {
            machine = apply(&machine, chosen(&format!("az-{i}"))).next;
            machine = apply(&machine, failed(FailureKind::ZoneSpecific, "full")).next;
        }
        assert_eq!(machine.state, MachineState::Allocating);
        assert_eq!(machine.lifecycle.attempts_used, 0);
        assert_eq!(machine.lifecycle.zones_failed.len(), 50);
    }

    #[test]
    fn a_permanent_failure_goes_straight_to_provisioning_error() {
        let mut machine = well_formed(MachineState::Starting);
        machine.lifecycle.zones_failed = refused(&["az-c"]);
        let t = apply(
            &machine,
            failed(FailureKind::Permanent, "no instance type matches mem=9999G"),
        );
        assert_eq!(t.next.state, MachineState::ProvisioningError);
        assert_eq!(t.next.lifecycle.attempts_used, 0);
        assert_eq!(t.next.lifecycle.zone, None);
        assert_eq!(t.next.lifecycle.zones_failed, refused(&["az-c"]));
        assert_eq!(
            t.next.lifecycle.last_error.as_deref(),
            Some("no instance type matches mem=9999G")
        );
        assert_eq!(t.effect, Effect::None);
    }

    // ---- the bootstrap watch ----

    #[test]
    fn a_bootstrap_timeout_terminates_the_instance_and_counts_the_attempt() {
        let t = apply(
            &well_formed(MachineState::AwaitingAgent),
            Event::BootstrapTimedOut,
        );
        assert_eq!(t.next.state, MachineState::Relaunching);
        assert_eq!(t.next.lifecycle.bootstrap_timeouts, 1);
        assert_eq!(
            t.next.lifecycle.last_error.as_deref(),
            Some("machine agent did not check in within 10m (attempt 1 of 3)")
        );
        assert_eq!(
            t.effect,
            Effect::TerminateInstance {
                instance_id: "i-1".into()
            }
        );
    }

    #[test]
    fn once_the_unbooted_instance_is_stopped_a_new_one_is_launched() {
        let mut machine = well_formed(MachineState::Relaunching);
        machine.lifecycle.bootstrap_timeouts = 1;
        machine.lifecycle.zones_failed = refused(&["az-c"]);
        let t = apply(&machine, Event::InstanceStopped);
        assert_eq!(t.next.state, MachineState::Allocating);
        assert_eq!(t.next.lifecycle.instance_id, None);
        assert_eq!(t.next.lifecycle.zone, None);
        assert_eq!(t.effect, Effect::ChooseZone { exclude: vec![] });
    }

    #[test]
    fn bootstrap_timeouts_relaunch_until_the_limit_then_the_machine_is_in_error() {
        let mut machine = apply(&Machine::new(), Event::StartInstance).next;
        let mut launches = 0;
        loop {
            machine = apply(&machine, chosen("az-a")).next;
            machine = apply(&machine, started(&format!("i-{launches}"))).next;
            launches += 1;
            machine = apply(&machine, Event::BootstrapTimedOut).next;
            machine = apply(&machine, Event::InstanceStopped).next;
            if machine.state == MachineState::ProvisioningError {
                break;
            }
            assert_eq!(machine.state, MachineState::Allocating);
        }
        assert_eq!(launches, 3);
        assert_eq!(machine.lifecycle.bootstrap_timeouts, 3);
        assert_eq!(machine.lifecycle.instance_id, None);
        assert_eq!(
            machine.lifecycle.last_error.as_deref(),
            Some("machine agent did not check in within 10m after 3 attempts")
        );
    }

    #[test]
    fn a_failed_termination_is_retried_after_a_delay_without_limit() {
        for state in [MachineState::Relaunching, MachineState::Stopping] {
            let mut machine = well_formed(state);
            let mut delays = vec![];
            for n in 1..=12u32 {
                let t = apply(
                    &machine,
                    Event::StopFailed {
                        message: "api down".into(),
                    },
                );
                assert_eq!(t.next.state, state);
                assert_eq!(t.next.lifecycle.stop_failures, n);
                assert_eq!(t.next.lifecycle.last_error.as_deref(), Some("api down"));
                match t.effect {
                    Effect::ScheduleRetry { after } => delays.push(after.as_millis()),
                    other => panic!("{state}: expected a scheduled retry, got {other:?}"),
                }
                let t = apply(&t.next, Event::RetryDue);
                assert_eq!(t.next.state, state);
                assert_eq!(
                    t.effect,
                    Effect::TerminateInstance {
                        instance_id: "i-1".into()
                    }
                );
                machine = t.next;
            }
            assert_eq!(
                delays,
                [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000, 30000, 30000, 30000],
                "{state}"
            );
            let t = apply(&machine, Event::InstanceStopped);
            assert_eq!(t.next.lifecycle.stop_failures, 0, "{state}");
        }
    }

    // ---- presence ----

    #[test]
    fn an_agent_whose_heartbeats_stop_shows_down_and_comes_back_when_it_reconnects() {
        let t = apply(&well_formed(MachineState::Started), Event::AgentLost);
        assert_eq!(t.next.state, MachineState::Down);
        assert_eq!(machine_status(t.next.state).juju_status, "down");
        let t = apply(&t.next, Event::AgentConnected);
        assert_eq!(t.next.state, MachineState::Started);
        assert_eq!(t.effect, Effect::None);
    }

    #[test]
    fn repeated_presence_reports_change_nothing() {
        let started = well_formed(MachineState::Started);
        assert_eq!(apply(&started, Event::AgentConnected).next, started);
        let down = well_formed(MachineState::Down);
        assert_eq!(apply(&down, Event::AgentLost).next, down);
    }

    // ---- retry-provisioning ----

    #[test]
    fn retry_makes_a_machine_in_error_pending_again_with_a_fresh_record() {
        let mut machine = well_formed(MachineState::ProvisioningError);
        machine.lifecycle.attempts_used = 10;
        machine.lifecycle.bootstrap_timeouts = 3;
        let t = apply(&machine, Event::Retry { constraints: None });
        let mut fresh = Machine::new();
        fresh.lifecycle.provisioning_rounds = 1;
        assert_eq!(t.next, fresh);
        assert_eq!(t.effect, Effect::None);
    }

    #[test]
    fn a_new_round_of_provisioning_never_repeats_a_launchs_client_token() {
        // A first round: two failed attempts, then an agent that never
        // checked in three times, each launch with its own token.
        let id = MachineId::new(7);
        let mut life = Lifecycle::default();
        let mut first_round = Vec::new();
        for (attempts, timeouts) in [(0, 0), (1, 0), (2, 0), (2, 1), (2, 2)] {
            life.attempts_used = attempts;
            life.bootstrap_timeouts = timeouts;
            first_round.push(life.client_token("c", id, "az-a"));
        }
        assert_eq!(first_round[0], "c-7-0-0-az-a", "the form before rounds");
        // retry-provisioning sets the counters back to zero: the next
        // round's launches must still be new to the cloud.
        let mut machine = well_formed(MachineState::ProvisioningError);
        machine.lifecycle = life;
        let retried = apply(&machine, Event::Retry { constraints: None }).next;
        let second = retried.lifecycle.client_token("c", id, "az-a");
        assert_eq!(second, "c-7-r1-0-0-az-a");
        assert!(!first_round.contains(&second));
        let mut again = retried.clone();
        again.state = MachineState::ProvisioningError;
        let third = apply(&again, Event::Retry { constraints: None }).next;
        assert_eq!(
            third.lifecycle.client_token("c", id, "az-a"),
            "c-7-r2-0-0-az-a"
        );
    }

    #[test]
    fn retry_with_constraints_asks_for_them_to_replace_the_machines() {
        let constraints = Constraints {
            mem: Setting::Value(Amount::AtLeast(2048)),
            ..Constraints::default()
        };
        let t = apply(
            &well_formed(MachineState::ProvisioningError),
            Event::Retry {
                constraints: Some(Box::new(constraints.clone())),
            },
        );
        assert_eq!(t.next.state, MachineState::Pending);
        assert_eq!(t.effect, Effect::ReplaceConstraints(Box::new(constraints)));
    }

    #[test]
    fn retry_is_a_conflict_for_every_machine_not_in_error() {
        for state in MachineState::ALL {
            let result = transition(
                &well_formed(state),
                &Event::Retry { constraints: None },
                &policy(),
                Jitter::NONE,
            );
            if state == MachineState::ProvisioningError {
                assert!(result.is_ok());
            } else {
                assert_eq!(
                    result,
                    Err(IllegalTransition::NotAllowed {
                        state,
                        event: EventKind::Retry
                    })
                );
            }
        }
    }

    // ---- removal ----

    #[test]
    fn destroying_a_machine_never_provisioned_removes_it_directly() {
        use MachineState as S;
        for state in [S::Pending, S::Allocating, S::Retrying, S::ProvisioningError] {
            let t = apply(&well_formed(state), Event::Destroy);
            assert_eq!(t.next.state, S::Dead, "{state}");
            assert_eq!(t.effect, Effect::RemoveFromState, "{state}");
        }
    }

    #[test]
    fn destroying_a_machine_while_its_instance_starts_ends_with_that_instance_stopped() {
        let t = apply(&well_formed(MachineState::Starting), Event::Destroy);
        assert_eq!(t.next.state, MachineState::Dying);
        assert_eq!(t.effect, Effect::None);
        let t = apply(&t.next, started("i-7"));
        assert_eq!(t.next.state, MachineState::Stopping);
        assert_eq!(t.next.lifecycle.instance_id.as_deref(), Some("i-7"));
        assert_eq!(
            t.effect,
            Effect::TerminateInstance {
                instance_id: "i-7".into()
            }
        );
        let t = apply(&t.next, Event::InstanceStopped);
        assert_eq!(t.next.state, MachineState::Dead);
        assert_eq!(t.next.lifecycle.instance_id, None);
        assert_eq!(t.effect, Effect::RemoveFromState);
    }

    #[test]
    fn destroying_a_machine_whose_launch_then_fails_removes_it_directly() {
        for kind in [
            FailureKind::ZoneSpecific,
            FailureKind::Transient,
            FailureKind::Permanent,
        ] {
            let t = apply(&well_formed(MachineState::Dying), failed(kind, "x"));
            assert_eq!(t.next.state, MachineState::Dead);
            assert_eq!(t.effect, Effect::RemoveFromState);
        }
    }

    #[test]
    fn destroying_a_machine_with_an_instance_terminates_it() {
        use MachineState as S;
        for state in [S::AwaitingAgent, S::Started, S::Down] {
            let t = apply(&well_formed(state), Event::Destroy);
            assert_eq!(t.next.state, S::Stopping, "{state}");
            assert_eq!(
                t.effect,
                Effect::TerminateInstance {
                    instance_id: "i-1".into()
                }
            );
        }
    }

    #[test]
    fn destroying_a_relaunching_machine_lets_the_termination_in_flight_finish_it() {
        let t = apply(&well_formed(MachineState::Relaunching), Event::Destroy);
        assert_eq!(t.next.state, MachineState::Stopping);
        assert_eq!(t.effect, Effect::None);
        let t = apply(&t.next, Event::InstanceStopped);
        assert_eq!(t.next.state, MachineState::Dead);
        assert_eq!(t.effect, Effect::RemoveFromState);
    }

    #[test]
    fn destroying_twice_changes_nothing() {
        for state in [MachineState::Dying, MachineState::Stopping] {
            let machine = well_formed(state);
            let t = apply(&machine, Event::Destroy);
            assert_eq!(t.next, machine);
            assert_eq!(t.effect, Effect::None);
        }
    }

    #[test]
    fn destroying_a_machine_with_no_recorded_instance_id_is_a_missing_record() {
        let err = transition(
            &in_state(MachineState::Started),
            &Event::Destroy,
            &policy(),
            Jitter::NONE,
        )
        .unwrap_err();
        assert_eq!(
            err,
            IllegalTransition::MissingRecord {
                state: MachineState::Started,
                event: EventKind::Destroy,
                missing: "instance id"
            }
        );
    }

    // ---- resume ----

    #[test]
    fn resume_asks_again_for_whatever_was_in_flight() {
        use MachineState as S;
        let cases = [
            (S::Pending, S::Pending, Effect::None),
            (
                S::Allocating,
                S::Allocating,
                Effect::ChooseZone { exclude: vec![] },
            ),
            (
                S::Starting,
                S::Starting,
                Effect::LaunchInstance {
                    zone: "az-a".into(),
                },
            ),
            (
                S::AwaitingAgent,
                S::AwaitingAgent,
                Effect::WatchBootstrap {
                    after: Duration::from_secs(600),
                },
            ),
            (
                S::Relaunching,
                S::Relaunching,
                Effect::TerminateInstance {
                    instance_id: "i-1".into(),
                },
            ),
            (S::Started, S::Started, Effect::None),
            (S::Down, S::Down, Effect::None),
            (S::ProvisioningError, S::ProvisioningError, Effect::None),
            (S::Dying, S::Dead, Effect::RemoveFromState),
            (
                S::Stopping,
                S::Stopping,
                Effect::TerminateInstance {
                    instance_id: "i-1".into(),
                },
            ),
            (S::Dead, S::Dead, Effect::RemoveFromState),
        ];
        for (from, to, effect) in cases {
            let t = apply(&well_formed(from), Event::Resume);
            assert_eq!((t.next.state, t.effect), (to, effect), "{from}");
        }
    }

    #[test]
    fn resume_while_retrying_schedules_the_retry_again() {
        let mut machine = in_state(MachineState::Retrying);
        machine.lifecycle.attempts_used = 4;
        let t = apply(&machine, Event::Resume);
        assert_eq!(t.next, machine);
        assert_eq!(
            t.effect,
            Effect::ScheduleRetry {
                after: Duration::from_secs(4)
            }
        );
    }

    // ---- backoff and jitter ----

    #[test]
    fn the_default_backoff_doubles_from_half_a_second_to_thirty_seconds() {
        let backoff = Backoff::default();
        let delays: Vec<u128> = (1..=10)
            .map(|n| backoff.delay(n, Jitter::NONE).as_millis())
            .collect();
        assert_eq!(
            delays,
            [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000, 30000]
        );
        assert_eq!(backoff.attempts.get(), 10);
    }

    #[test]
    fn failure_zero_waits_as_long_as_the_first() {
        let backoff = Backoff::default();
        assert_eq!(backoff.delay(0, Jitter::NONE), Duration::from_millis(500));
    }

    #[test]
    fn jitter_takes_away_at_most_half_the_delay() {
        let backoff = Backoff::default();
        let jitter = Jitter::new(0.999_999).unwrap();
        let d = backoff.delay(7, jitter);
        assert!(
            d > Duration::from_secs(15) && d < Duration::from_secs(30),
            "{d:?}"
        );
    }

    #[test]
    fn a_huge_failure_count_does_not_overflow() {
        let backoff = Backoff {
            initial: Duration::from_secs(1),
            max: Duration::MAX,
            attempts: NonZeroU32::MIN,
        };
        assert_eq!(backoff.delay(u32::MAX, Jitter::NONE), Duration::MAX);
    }

    #[test]
    fn an_initial_delay_above_the_max_is_capped() {
        let backoff = Backoff {
            initial: Duration::from_secs(60),
            max: Duration::from_secs(30),
            attempts: TEN,
        };
        assert_eq!(backoff.delay(1, Jitter::NONE), Duration::from_secs(30));
    }

    #[test]
    fn jitter_outside_zero_to_one_is_refused() {
        for bad in [-0.1, 1.0, 1.5, f64::NAN, f64::INFINITY] {
            assert!(Jitter::new(bad).is_err(), "{bad}");
        }
        assert_eq!(
            Jitter::new(1.0).unwrap_err().to_string(),
            "jitter must be a number from 0 up to (not including) 1, got 1"
        );
        assert_eq!(Jitter::new(0.0), Ok(Jitter::NONE));
    }

    // ---- status, life, settledness, words ----

    #[test]
    fn each_state_shows_juju_status_words() {
        use MachineState as S;
        let expected = [
            (S::Pending, "pending", "pending"),
            (S::Allocating, "allocating", "pending"),
            (S::Starting, "allocating", "pending"),
            (S::Retrying, "allocating", "pending"),
            (S::AwaitingAgent, "running", "pending"),
            (S::Relaunching, "allocating", "pending"),
            (S::Started, "running", "started"),
            (S::Down, "running", "down"),
            (S::ProvisioningError, "provisioning error", "error"),
            (S::Dying, "stopping", "stopped"),
            (S::Stopping, "stopping", "stopped"),
            (S::Dead, "stopped", "stopped"),
        ];
        for (state, machine, agent) in expected {
            assert_eq!(
                machine_status(state),
                MachineStatus {
                    machine_status: machine,
                    juju_status: agent
                },
                "{state}"
            );
        }
    }

    #[test]
    fn only_started_down_error_and_dead_machines_are_settled() {
        let settled: Vec<MachineState> = MachineState::ALL
            .into_iter()
            .filter(|s| is_settled(*s))
            .collect();
        assert_eq!(
            settled,
            [
                MachineState::Started,
                MachineState::Down,
                MachineState::ProvisioningError,
                MachineState::Dead
            ]
        );
    }

    #[test]
    fn a_machine_is_dying_from_destroy_until_its_instance_is_gone() {
        for state in MachineState::ALL {
            let expected = match state {
                MachineState::Dying | MachineState::Stopping => Life::Dying,
                MachineState::Dead => Life::Dead,
                _ => Life::Alive,
            };
            assert_eq!(life(state), expected, "{state}");
        }
    }

    #[test]
    fn machine_states_parse_and_print_the_same_stable_words() {
        for state in MachineState::ALL {
            assert_eq!(state.as_str().parse::<MachineState>(), Ok(state));
            assert_eq!(
                serde_json::to_string(&state).unwrap(),
                format!("\"{}\"", state.as_str())
            );
        }
        assert_eq!(MachineState::AwaitingAgent.as_str(), "awaiting-agent");
        assert_eq!(
            MachineState::ProvisioningError.as_str(),
            "provisioning-error"
        );
    }

    #[test]
    fn an_unknown_machine_state_is_refused_with_the_known_ones() {
        let err = "running".parse::<MachineState>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown machine state \"running\" (expected one of pending, allocating, starting, \
             retrying, awaiting-agent, relaunching, started, down, provisioning-error, dying, \
             stopping, dead)"
        );
    }

    #[test]
    fn lives_parse_and_print_the_same_words() {
        for life in Life::ALL {
            assert_eq!(life.as_str().parse::<Life>(), Ok(life));
            assert_eq!(
                serde_json::to_string(&life).unwrap(),
                format!("\"{}\"", life.as_str())
            );
        }
        assert_eq!(
            "undead".parse::<Life>().unwrap_err().to_string(),
            "unknown life \"undead\" (expected alive, dying or dead)"
        );
    }

    #[test]
    fn a_machine_round_trips_through_json() {
        let mut machine = well_formed(MachineState::Relaunching);
        machine.lifecycle.bootstrap_timeouts = 2;
        machine.lifecycle.zones_failed = refused(&["az-b"]);
        let json = serde_json::to_string(&machine).unwrap();
        assert_eq!(serde_json::from_str::<Machine>(&json).unwrap(), machine);
    }

    #[test]
    fn durations_in_messages_read_like_a_person_wrote_them() {
        assert_eq!(human(Duration::from_secs(1200)), "20m");
        assert_eq!(human(Duration::from_secs(7200)), "2h");
        assert_eq!(human(Duration::from_secs(90)), "90s");
        assert_eq!(human(Duration::from_millis(1500)), "1500ms");
        assert_eq!(human(Duration::ZERO), "0ms");
    }

    // ---- properties ----

    /// Every event, with `destroy` rare: it leads to `dead`, which accepts
    /// nothing, so a frequent one would keep sequences from going deep.
    fn any_event() -> impl Strategy<Value = Event> {
        let kind = prop_oneof![
            Just(FailureKind::ZoneSpecific),
            Just(FailureKind::Transient),
            Just(FailureKind::Permanent),
        ];
        prop_oneof![
            8 => Just(Event::StartInstance),
            8 => (0..4u8).prop_map(|z| Event::ZoneChosen {
                zone: format!("az-{z}")
            }),
            8 => Just(no_zone("")),
            8 => (0..100u32).prop_map(|i| Event::InstanceStarted {
                instance_id: format!("i-{i}")
            }),
            8 => kind.prop_map(|kind| Event::InstanceFailed {
                kind,
                message: "failed".into()
            }),
            8 => Just(Event::AgentConnected),
            8 => Just(Event::AgentLost),
            8 => Just(Event::BootstrapTimedOut),
            8 => Just(Event::RetryDue),
            8 => Just(Event::Retry { constraints: None }),
            1 => Just(Event::Destroy),
            8 => Just(Event::InstanceStopped),
            8 => Just(Event::StopFailed {
                message: "failed".into()
            }),
            8 => Just(Event::Resume),
        ]
    }

    fn any_policy() -> impl Strategy<Value = Policy> {
        (1..6u32, 1..4u32).prop_map(|(attempts, bootstrap)| Policy {
            backoff: Backoff {
                attempts: NonZeroU32::new(attempts).unwrap_or(NonZeroU32::MIN),
                ..Backoff::default()
            },
            bootstrap_timeout: Duration::from_secs(60),
            bootstrap_attempts: NonZeroU32::new(bootstrap).unwrap_or(NonZeroU32::MIN),
        })
    }

    fn has_instance(state: MachineState) -> bool {
        use MachineState as S;
        matches!(
            state,
            S::AwaitingAgent | S::Relaunching | S::Started | S::Down | S::Stopping
        )
    }

    proptest! {
        #[test]
        fn random_event_sequences_keep_every_invariant(
            policy in any_policy(),
            steps in prop::collection::vec((any_event(), 0.0..1.0f64), 0..200),
        ) {
            let mut machine = Machine::new();
            for (event, jitter) in steps {
                let jitter = Jitter::new(jitter).unwrap();
                match transition(&machine, &event, &policy, jitter) {
                    Ok(t) => {
                        if let Effect::ScheduleRetry { after } = t.effect {
                            prop_assert!(after <= policy.backoff.max);
                        }
                        machine = t.next;
                    }
                    Err(e) => {
                        // A machine built only by transitions is never damaged.
                        prop_assert!(
                            matches!(e, IllegalTransition::NotAllowed { .. }),
                            "{e}"
                        );
                    }
                }
                let life = &machine.lifecycle;
                prop_assert!(life.attempts_used <= policy.backoff.attempts.get());
                prop_assert!(life.bootstrap_timeouts <= policy.bootstrap_attempts.get());
                prop_assert_eq!(life.instance_id.is_some(), has_instance(machine.state));
                if machine.state == MachineState::ProvisioningError {
                    prop_assert!(life.last_error.is_some());
                }
            }
        }

        #[test]
        fn backoff_delay_never_decreases_with_more_failures_and_never_exceeds_max(
            initial_ms in 0..5_000u64,
            max_ms in 0..120_000u64,
            jitter in 0.0..1.0f64,
            n in 0..80u32,
        ) {
            let backoff = Backoff {
                initial: Duration::from_millis(initial_ms),
                max: Duration::from_millis(max_ms),
                attempts: TEN,
            };
            let jitter = Jitter::new(jitter).unwrap();
            let a = backoff.delay(n, jitter);
            let b = backoff.delay(n + 1, jitter);
            prop_assert!(a <= b, "{a:?} > {b:?}");
            prop_assert!(b <= backoff.max);
        }
    }
}

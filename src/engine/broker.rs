//! The ProviderBroker actor: the only door to a cloud.
//!
//! Every provider call goes through here, which
//! - rate-limits with a token bucket per call kind ([`RateLimits`]), a
//!   call taking one token per API request it makes
//!   ([`Provider::launch_requests`]: EC2 makes one RunInstances per
//!   instance),
//! - bounds the calls in flight (`workers`),
//! - combines launches that are ready at the same moment into one call of
//!   up to `Provider::max_launch_batch` requests, grouped so that one call
//!   carries only launches the provider can make together (same zone,
//!   type, base and image); once the launch bucket is paced, sends only as
//!   many calls as it has tokens for, full batches first, and lets the
//!   rest gather into fuller batches until the next token (where a fuller
//!   batch costs no more tokens, a partial one gathers for `GATHER`
//!   even while tokens are plentiful),
//! - takes a launch call's instance tokens too (one per instance, as AWS
//!   counts RunInstances' resources) when an instance bucket is set,
//! - retries throttling with backoff instead of failing the machines, and
//!   paces itself to the provider's own limit: a throttled call slows its
//!   kind's bucket (or, for a kind without one, gives it one at half the
//!   rate it was being called at), and calls that go through speed it up
//!   again, back to the configured limit (`TokenBucket::slow_down`,
//!   `TokenBucket::speed_up`),
//! - gives every call a timeout, and runs it as its own task so that a
//!   provider that panics or hangs fails that call (as a transient error)
//!   and nothing else,
//! - after an authentication or permission error, stops sending work to
//!   the provider (answering every call with that one error) except for a
//!   probe now and then, until a call succeeds again.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::prelude::*;
use tokio::sync::{oneshot, Semaphore};

use crate::contracts::provider::{
    FailureClass, LaunchRequest, Provider, ProviderError, ProviderZone,
};
use crate::domain::instance::{Instance, ListedInstance};
use crate::domain::words::word_enum;
use crate::engine::leases::{Fence, LeaseClock};
use crate::engine::protocol::{
    DescribeInstances, InstanceFailed, InstanceStarted, Launch, ListInstances, ListZones, Terminate,
};
use crate::engine::supervision::{hooks, kinds};

/// Throttled calls are tried this many more times before the error is
/// passed on.
const THROTTLE_RETRIES: u32 = 20;
/// The first wait after a throttling error; it doubles.
const THROTTLE_BACKOFF: Duration = Duration::from_millis(500);
/// The longest wait after a throttling error, beside the bucket's own.
const THROTTLE_BACKOFF_MAX: Duration = Duration::from_secs(4);
/// While the provider refuses our credentials, one call in this long is let
/// through to find out whether they work again.
const UNAUTHORIZED_PROBE_INTERVAL: Duration = Duration::from_secs(30);
/// A throttled kind is never slowed below this many calls a second.
const SLOWEST_RATE: f64 = 0.1;
/// Each call that goes through speeds a slowed bucket up by at least this
/// factor...
const SPEED_UP: f64 = 1.05;
/// ... or by half for each second since its rate last changed, whichever
/// is more (at most doubling it): a bucket slowed to a few calls a second
/// recovers in seconds, not in minutes of calls at that pace.
const SPEED_UP_PER_SECOND: f64 = 0.5;
/// A kind without a configured limit that was throttled is unlimited again
/// once its rate is back above this, and above [`UNLIMITED_OVER_SLOWED`]
/// times the rate its last throttle left it at.
const UNLIMITED_ABOVE: f64 = 100.0;
/// See [`UNLIMITED_ABOVE`]: a kind refused at 200 calls a second is not
/// unpaced at 101 only to be refused again.
const UNLIMITED_OVER_SLOWED: f64 = 4.0;
/// A throttled kind is slowed at most once in this long: a cloud whose
/// bucket a burst emptied refuses calls at any pace until it refills, and
/// halving for each of those refusals took a kind from 100 calls a second
/// to one in 150 ms. Refusals between spend the tokens and nothing more.
const SLOW_DOWN_SPACING: Duration = Duration::from_secs(1);
/// How far back the calls of a kind are counted to tell the rate it is
/// being called at.
const RATE_WINDOW: Duration = Duration::from_secs(1);

/// A token bucket: `capacity` calls at once, refilled at `per_second`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bucket {
    pub capacity: f64,
    pub per_second: f64,
}

/// The rate limits of one provider: a bucket of request tokens per kind
/// of call (each call takes one), and a bucket of instance tokens (each
/// instance a launch call asks for takes one, as AWS's RunInstances
/// resource bucket counts them). `None`: unlimited.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RateLimits {
    pub launch: Option<Bucket>,
    pub instances: Option<Bucket>,
    pub terminate: Option<Bucket>,
    pub describe: Option<Bucket>,
}

impl RateLimits {
    /// AWS's published EC2 defaults: RunInstances requests 5 and 2/s,
    /// instances launched 1,000 and 2/s, TerminateInstances requests 100
    /// and 5/s, non-mutating calls 100 and 20/s.
    pub fn ec2() -> RateLimits {
        RateLimits {
            launch: Some(Bucket {
                capacity: 5.0,
                per_second: 2.0,
            }),
            instances: Some(Bucket {
                capacity: 1000.0,
                per_second: 2.0,
            }),
            terminate: Some(Bucket {
                capacity: 100.0,
                per_second: 5.0,
            }),
            describe: Some(Bucket {
                capacity: 100.0,
                per_second: 20.0,
            }),
        }
    }
}

/// A token bucket's state. Callers reserve a token and are told how long
/// to wait for it, so concurrent callers queue fairly.
#[derive(Debug)]
struct TokenBucket {
    limit: Bucket,
    tokens: f64,
    at: Instant,
    /// When the provider's throttling last slowed it.
    slowed_at: Option<Instant>,
    /// When its rate last changed, slowed or sped up.
    changed_at: Instant,
    /// The rate the last throttle left it at.
    slowed_to: f64,
}

impl TokenBucket {
    fn new(limit: Bucket) -> TokenBucket {
        TokenBucket {
            limit,
            tokens: limit.capacity,
            at: Instant::now(),
            slowed_at: None,
            changed_at: Instant::now(),
            slowed_to: limit.per_second,
        }
    }

    /// Takes a token (perhaps one not yet refilled) and returns the wait
    /// until it is there.
    #[cfg(test)]
    fn reserve(&mut self, now: Instant) -> Duration {
        self.reserve_many(1.0, now)
    }

    /// The tokens there at `now`, without taking any (below zero while
    /// callers wait for tokens they reserved).
    fn available(&self, now: Instant) -> f64 {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        (self.tokens + elapsed * self.limit.per_second).min(self.limit.capacity)
    }

    /// Takes `count` tokens (perhaps not yet refilled) and returns the
    /// wait until they are there.
    fn reserve_many(&mut self, count: f64, now: Instant) -> Duration {
        self.tokens = self.available(now);
        self.at = now;
        self.tokens -= count;
        if self.tokens >= 0.0 || self.limit.per_second <= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.limit.per_second)
        }
    }

    /// The provider said we are too fast: spend everything.
    fn drain(&mut self) {
        self.tokens = self.tokens.min(0.0);
    }

    /// The provider said we are too fast: halve the rate (or the rate
    /// calls were being made at, `observed`, if that is lower, but no
    /// lower than a quarter of the rate: calls spaced out by retries'
    /// waits do not show the pace that was refused), never below
    /// [`SLOWEST_RATE`], with no bursts until it recovers; and spend
    /// everything.
    fn slow_down(&mut self, observed: f64, now: Instant) {
        let rate = self.limit.per_second;
        self.limit.per_second = (rate.min(observed.max(rate / 4.0)) / 2.0).max(SLOWEST_RATE);
        self.changed_at = now;
        self.slowed_to = self.limit.per_second;
        self.limit.capacity = 1.0;
        self.tokens = self.tokens.min(self.limit.capacity);
        self.drain();
    }

    /// A call went through: a bucket slowed by [`TokenBucket::slow_down`]
    /// speeds up by [`SPEED_UP`] or [`SPEED_UP_PER_SECOND`], up to
    /// `configured` (its bursts too, once its rate is back). Returns
    /// whether a bucket with nothing configured is fast enough to be
    /// dropped.
    fn speed_up(&mut self, configured: Option<Bucket>, now: Instant) -> bool {
        let waited = now.saturating_duration_since(self.changed_at).as_secs_f64();
        let factor = (1.0 + SPEED_UP_PER_SECOND * waited).clamp(SPEED_UP, 2.0);
        let faster = self.limit.per_second * factor;
        self.changed_at = now;
        match configured {
            Some(limit) => {
                if faster >= limit.per_second {
                    self.limit = limit;
                } else {
                    self.limit.per_second = faster;
                }
                false
            }
            None => {
                self.limit.per_second = faster;
                faster > UNLIMITED_ABOVE.max(UNLIMITED_OVER_SLOWED * self.slowed_to)
            }
        }
    }
}

/// When the last calls of one kind were let through, to tell the rate it
/// is being called at.
#[derive(Debug, Default)]
struct RecentCalls(VecDeque<Instant>);

impl RecentCalls {
    fn record(&mut self, now: Instant) {
        self.0.push_back(now);
        self.forget_before(now);
    }

    fn forget_before(&mut self, now: Instant) {
        while let Some(first) = self.0.front() {
            if now.saturating_duration_since(*first) > RATE_WINDOW {
                self.0.pop_front();
            } else {
                break;
            }
        }
    }

    /// Calls a second over the last [`RATE_WINDOW`]; at least 1.
    fn rate(&mut self, now: Instant) -> f64 {
        self.forget_before(now);
        (self.0.len() as f64 / RATE_WINDOW.as_secs_f64()).max(1.0)
    }
}

word_enum! {
    /// A kind of provider call, each rate-limited on its own.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum CallKind {
        Launch => "launch",
        Terminate => "terminate",
        Describe => "describe",
    }
}

/// What one provider call spends: a kind's request tokens, one per API
/// request the call makes (a launch on EC2 makes one per instance, see
/// [`Provider::launch_requests`]), and the instance tokens of a launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallCost {
    pub kind: CallKind,
    pub requests: usize,
    pub instances: usize,
}

impl CallCost {
    /// A call that is one request and launches nothing.
    fn one(kind: CallKind) -> CallCost {
        CallCost {
            kind,
            requests: 1,
            instances: 0,
        }
    }
}

/// Told about every provider call: what it cost, how long it took, and
/// whether it succeeded (for `/metrics`).
pub type CallObserver = Arc<dyn Fn(CallCost, Duration, bool) + Send + Sync>;

/// The rate limits in force, per kind: the configured ones, as the
/// provider's throttling has slowed them, and one for each kind without a
/// configured limit that the provider throttled.
#[derive(Debug, Default)]
struct Buckets {
    configured: BTreeMap<CallKind, Bucket>,
    active: BTreeMap<CallKind, TokenBucket>,
    recent: BTreeMap<CallKind, RecentCalls>,
    /// Instance tokens, which launches take one per instance asked for.
    instances: Option<TokenBucket>,
}

impl Buckets {
    fn new(limits: RateLimits) -> Buckets {
        let mut buckets = Buckets::default();
        for (kind, limit) in [
            (CallKind::Launch, limits.launch),
            (CallKind::Terminate, limits.terminate),
            (CallKind::Describe, limits.describe),
        ] {
            if let Some(limit) = limit {
                buckets.configured.insert(kind, limit);
                buckets.active.insert(kind, TokenBucket::new(limit));
            }
        }
        buckets.instances = limits.instances.map(TokenBucket::new);
        buckets
    }

    /// Takes a call's request tokens and instance tokens, and returns the
    /// wait until they are all there.
    fn reserve_call(&mut self, cost: CallCost, now: Instant) -> Duration {
        let CallCost {
            kind,
            requests,
            instances,
        } = cost;
        let recent = self.recent.entry(kind).or_default();
        for _ in 0..requests {
            recent.record(now);
        }
        let call = self
            .active
            .get_mut(&kind)
            .map_or(Duration::ZERO, |b| b.reserve_many(requests as f64, now));
        let launched = match (&mut self.instances, instances) {
            (Some(bucket), n) if n > 0 => bucket.reserve_many(n as f64, now),
            _ => Duration::ZERO,
        };
        call.max(launched)
    }

    /// What `kind`'s bucket holds at `now`; `None` while `kind` is
    /// unpaced.
    fn ready(&self, kind: CallKind, now: Instant) -> Option<Ready> {
        let bucket = self.active.get(&kind)?;
        let available = bucket.available(now);
        let whole = available.max(0.0).floor();
        let next = if bucket.limit.per_second > 0.0 {
            Duration::from_secs_f64((whole + 1.0 - available) / bucket.limit.per_second)
        } else {
            Duration::from_secs(1)
        };
        Some(Ready {
            tokens: whole as usize,
            next,
            capacity: bucket.limit.capacity,
        })
    }

    /// The provider throttled a call of `kind` that was sent at `sent`.
    /// A call sent before the last slow-down was sent at the old pace,
    /// and one refused within [`SLOW_DOWN_SPACING`] of it may have met a
    /// bucket still empty: its refusal spends the tokens but slows nothing
    /// further, so a burst of refusals halves the rate once, not once
    /// each.
    fn throttled(&mut self, kind: CallKind, sent: Instant, now: Instant) {
        let observed = self.recent.entry(kind).or_default().rate(now);
        let bucket = self.active.entry(kind).or_insert_with(|| {
            TokenBucket::new(Bucket {
                capacity: 1.0,
                per_second: observed,
            })
        });
        let recently = |slowed: Instant| {
            sent < slowed || now.saturating_duration_since(slowed) < SLOW_DOWN_SPACING
        };
        if bucket.slowed_at.is_some_and(recently) {
            bucket.drain();
            return;
        }
        bucket.slow_down(observed, now);
        bucket.slowed_at = Some(now);
        log::info!(
            "provider throttled a {} call: pacing {} calls at {:.2}/s",
            kind.as_str(),
            kind.as_str(),
            bucket.limit.per_second
        );
    }

    /// A call of `kind` sent at `sent` went through without being
    /// throttled, at `now`. A call sent before the last slow-down went at
    /// the old pace and says nothing of the new one: it speeds nothing
    /// up (else the calls already in flight when a bucket is made unpace
    /// it again at once).
    fn answered(&mut self, kind: CallKind, sent: Instant, now: Instant) {
        let configured = self.configured.get(&kind).copied();
        let Some(bucket) = self.active.get_mut(&kind) else {
            return;
        };
        if configured == Some(bucket.limit) || bucket.slowed_at.is_some_and(|s| sent < s) {
            return;
        }
        if bucket.speed_up(configured, now) {
            self.active.remove(&kind);
            log::info!("provider takes {} calls unpaced again", kind.as_str());
        }
    }

    /// The rate of `kind`'s bucket, if it has one.
    #[cfg(test)]
    fn rate(&self, kind: CallKind) -> Option<f64> {
        self.active.get(&kind).map(|b| b.limit.per_second)
    }
}

/// What a bucket holds: the calls that can go now, when one more can, and
/// its burst.
struct Ready {
    tokens: usize,
    next: Duration,
    capacity: f64,
}

/// What the broker shares with the tasks that make the calls.
struct Gate {
    provider: Arc<dyn Provider>,
    in_flight: Semaphore,
    buckets: Mutex<Buckets>,
    timeout: Duration,
    /// Set after an authentication error: the message, and when a probe
    /// was last let through.
    refused: Mutex<Option<(ProviderError, Instant)>>,
    observer: Option<CallObserver>,
    /// This controller's leases: launches and terminations are sent only
    /// while they can be trusted.
    fence: Option<Arc<LeaseClock>>,
    /// The request tokens of launch calls sent by the broker that have
    /// not yet taken them, which the tokens ready now are already
    /// promised to.
    launches_unadmitted: AtomicUsize,
}

fn is_throttling(error: &ProviderError) -> bool {
    error.class == FailureClass::Transient
        && ["RequestLimitExceeded", "Throttling", "RequestThrottled"]
            .iter()
            .any(|code| error.message.contains(code))
}

/// What the answers of a batched call say of the call: a throttling among
/// them (the provider asks berth to slow down, whatever else it said),
/// else the first failure.
fn batch_error<T>(results: &[Result<T, ProviderError>]) -> Option<&ProviderError> {
    let mut failures = results.iter().filter_map(|r| r.as_ref().err());
    let first = failures.next()?;
    Some(
        std::iter::once(first)
            .chain(failures)
            .find(|e| is_throttling(e))
            .unwrap_or(first),
    )
}

impl Gate {
    /// Refuses a launch or termination while this controller's leases
    /// cannot be trusted (it was paused or cut off from the store past
    /// their renewal): another controller may be working on its machines.
    fn check_fence(&self, fence: Option<&Fence>) -> Result<(), ProviderError> {
        match (&self.fence, fence) {
            (Some(clock), Some(fence)) if !clock.trusts(fence) => Err(ProviderError::new(
                FailureClass::Transient,
                "this controller does not hold the lease (it ran out before the call was \
                 sent); another controller may be working on it now",
            )),
            _ => Ok(()),
        }
    }

    /// Waits for the tokens a call costs; returns the refusal instead if
    /// the provider is refusing our credentials and this is not a probe.
    /// Either way a launch call's tokens are no longer promised to it.
    async fn admit(&self, cost: CallCost) -> Result<(), ProviderError> {
        if cost.kind == CallKind::Launch {
            let _ =
                self.launches_unadmitted
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                        Some(n.saturating_sub(cost.requests))
                    });
        }
        if let Ok(mut refused) = self.refused.lock() {
            if let Some((error, last_probe)) = refused.as_mut() {
                if last_probe.elapsed() < UNAUTHORIZED_PROBE_INTERVAL {
                    return Err(error.clone());
                }
                *last_probe = Instant::now();
            }
        }
        let wait = match self.buckets.lock() {
            Ok(mut buckets) => buckets.reserve_call(cost, Instant::now()),
            Err(_) => Duration::ZERO,
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        Ok(())
    }

    /// The request tokens a launch call of `launches` costs.
    fn launch_requests(&self, launches: usize) -> usize {
        self.provider.launch_requests(launches).max(1)
    }

    fn throttled(&self, kind: CallKind, sent: Instant) {
        if let Ok(mut buckets) = self.buckets.lock() {
            buckets.throttled(kind, sent, Instant::now());
        }
    }

    fn answered(&self, kind: CallKind, sent: Instant) {
        if let Ok(mut buckets) = self.buckets.lock() {
            buckets.answered(kind, sent, Instant::now());
        }
    }

    fn outcome(&self, cost: CallCost, started: Instant, error: Option<&ProviderError>) {
        if let Some(observer) = &self.observer {
            observer(cost, started.elapsed(), error.is_none());
        }
        if let Ok(mut refused) = self.refused.lock() {
            match error {
                Some(e) if e.class == FailureClass::Unauthorized => {
                    if refused.is_none() {
                        log::error!(
                            "provider refused berth's credentials; pausing its work: {}",
                            e.message
                        );
                    }
                    *refused = Some((e.clone(), Instant::now()));
                }
                Some(_) => {}
                None => {
                    if refused.take().is_some() {
                        log::info!("provider accepts berth's credentials again");
                    }
                }
            }
        }
    }

    /// Runs one provider call under the gate: the tokens it costs, a slot,
    /// a timeout, panic isolation, and throttling retries. `first_error` picks the error out of the
    /// call's result (for calls with one result each).
    async fn call<T, F, Fut>(
        self: Arc<Self>,
        cost: CallCost,
        fence: Option<Fence>,
        make: F,
        first_error: fn(&T) -> Option<&ProviderError>,
    ) -> Result<T, ProviderError>
    where
        T: 'static,
        F: Fn(Arc<dyn Provider>) -> Fut,
        Fut: Future<Output = T> + 'static,
    {
        let _slot = self.in_flight.acquire().await.map_err(|_| {
            ProviderError::new(
                FailureClass::Transient,
                "the provider broker is shutting down",
            )
        })?;
        let kind = cost.kind;
        let mut backoff = THROTTLE_BACKOFF;
        let mut tries = 0;
        loop {
            self.admit(cost).await?;
            // Checked once the call may go, as late as can be.
            self.check_fence(fence.as_ref())?;
            let started = Instant::now();
            let call = make(self.provider.clone());
            let timeout = self.timeout;
            // Its own task: a panic there is a JoinError here, not a crash.
            let result = match tokio::task::spawn_local(tokio::time::timeout(timeout, call)).await {
                Ok(Ok(value)) => Ok(value),
                Ok(Err(_)) => Err(ProviderError::new(
                    FailureClass::Transient,
                    format!(
                        "the provider did not answer a {} call within {timeout:?}",
                        kind.as_str()
                    ),
                )),
                Err(join) => Err(ProviderError::new(
                    FailureClass::Transient,
                    format!(
                        "the provider failed during a {} call: {join}",
                        kind.as_str()
                    ),
                )),
            };
            let error = match &result {
                Ok(value) => first_error(value).cloned(),
                Err(e) => Some(e.clone()),
            };
            self.outcome(cost, started, error.as_ref());
            let throttled = error.as_ref().is_some_and(is_throttling);
            if throttled {
                self.throttled(kind, started);
            } else {
                self.answered(kind, started);
            }
            match error {
                Some(_) if throttled && tries < THROTTLE_RETRIES => {
                    tries += 1;
                    log::warn!(
                        "provider throttled a {} call; trying again in {backoff:?}",
                        kind.as_str()
                    );
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(THROTTLE_BACKOFF_MAX);
                }
                _ => return result,
            }
        }
    }
}

/// How long a launch may wait for others to fill its batch while the
/// launch bucket is paced and a fuller batch costs no more tokens: about
/// one token's time at EC2's pace, nothing beside a cloud's launch.
const GATHER: Duration = Duration::from_millis(20);

/// A launch waiting for the next flush, with the way back to its machine.
struct Waiting {
    request: LaunchRequest,
    reply: oneshot::Sender<Result<Instance, ProviderError>>,
    arrived: Instant,
}

/// The broker actor.
pub struct ProviderBroker {
    gate: Arc<Gate>,
    max_batch: usize,
    /// Launches waiting for the next flush.
    pending: Vec<Waiting>,
    flush_scheduled: bool,
    /// Launches wait for the launch bucket to refill: a flush is due then.
    waiting_for_tokens: bool,
}

impl ProviderBroker {
    pub fn new(
        provider: Arc<dyn Provider>,
        limits: RateLimits,
        workers: usize,
        timeout: Duration,
        observer: Option<CallObserver>,
    ) -> ProviderBroker {
        let max_batch = provider.max_launch_batch().max(1);
        ProviderBroker {
            gate: Arc::new(Gate {
                provider,
                in_flight: Semaphore::new(workers.max(1)),
                buckets: Mutex::new(Buckets::new(limits)),
                timeout,
                refused: Mutex::new(None),
                observer,
                fence: None,
                launches_unadmitted: AtomicUsize::new(0),
            }),
            max_batch,
            pending: Vec::new(),
            flush_scheduled: false,
            waiting_for_tokens: false,
        }
    }

    /// Sends launches and terminations only while `clock` trusts this
    /// controller's leases.
    pub fn fenced(mut self, clock: Arc<LeaseClock>) -> ProviderBroker {
        if let Some(gate) = Arc::get_mut(&mut self.gate) {
            gate.fence = Some(clock);
        }
        self
    }

    /// Sends the waiting launches, grouped and in batches: as many
    /// batches as the launch bucket has tokens for now, fullest first.
    /// The rest wait for the next token, gathering the launches that
    /// arrive meanwhile, so that a paced broker sends full batches rather
    /// than a queue of small ones each waiting for a token of its own.
    /// Where a batch costs one token however full it is, a partial batch
    /// of a paced broker also waits until its oldest launch has gathered
    /// for [`GATHER`], even while tokens are plentiful: a burst spent on
    /// half-empty batches is not there for the full ones.
    fn flush(&mut self, ctx: &mut Context<Self>, waited: bool) {
        let now = Instant::now();
        let mut groups: BTreeMap<String, Vec<Waiting>> = BTreeMap::new();
        for waiting in self.pending.drain(..) {
            let request = &waiting.request;
            let key = format!(
                "{}|{}|{}|{:?}|{:?}",
                request.zone,
                request.instance_type,
                request.base,
                request.requirements.image_id,
                request.host_instance
            );
            groups.entry(key).or_default().push(waiting);
        }
        let mut batches = Vec::new();
        for (_, mut group) in groups {
            while !group.is_empty() {
                batches.push(
                    group
                        .drain(..group.len().min(self.max_batch))
                        .collect::<Vec<_>>(),
                );
            }
        }
        // Fullest first; a stable sort keeps the groups' order otherwise.
        batches.sort_by_key(|batch| std::cmp::Reverse(batch.len()));
        let ready = self
            .gate
            .buckets
            .lock()
            .ok()
            .and_then(|buckets| buckets.ready(CallKind::Launch, now));
        let mut later = Vec::new();
        let mut next_flush = Duration::ZERO;
        if let Some(ready) = ready {
            let promised = self.gate.launches_unadmitted.load(Ordering::SeqCst);
            let mut free = ready.tokens.saturating_sub(promised);
            let gathering_saves = self.gate.launch_requests(self.max_batch) < self.max_batch;
            // Where a fuller batch costs more, a partial batch goes as it
            // is while the bucket is at least half full; below that only
            // a full one goes at once, and a partial one after waiting for
            // a token, gathering launches meanwhile.
            let plentiful = free as f64 >= ready.capacity / 2.0;
            let mut sending = Vec::new();
            let mut gathering: Option<Duration> = None;
            for batch in batches {
                let full = batch.len() >= self.max_batch;
                let cost = self.gate.launch_requests(batch.len());
                let age = batch
                    .iter()
                    .map(|w| now.saturating_duration_since(w.arrived))
                    .max()
                    .unwrap_or_default();
                let due = if gathering_saves {
                    full || age >= GATHER
                } else {
                    full || plentiful || waited
                };
                if free >= cost && due {
                    free -= cost;
                    sending.push(batch);
                } else {
                    if free >= cost && gathering_saves {
                        let left = GATHER.saturating_sub(age);
                        gathering = Some(gathering.map_or(left, |g| g.min(left)));
                    }
                    later.push(batch);
                }
            }
            // Something moves after every wait for tokens, or a bucket
            // that never refills (or holds less than one call costs)
            // would hold launches for ever; admission waits for its
            // tokens.
            if sending.is_empty() && waited && gathering.is_none() && !later.is_empty() {
                sending.push(later.remove(0));
            }
            batches = sending;
            next_flush = gathering.map_or(ready.next, |g| g.min(ready.next));
        }
        for batch in batches {
            let cost = self.gate.launch_requests(batch.len());
            self.gate
                .launches_unadmitted
                .fetch_add(cost, Ordering::SeqCst);
            let batch = batch.into_iter().map(|w| (w.request, w.reply)).collect();
            actix::spawn(launch_batch(self.gate.clone(), batch));
        }
        self.pending.extend(later.into_iter().flatten());
        if !self.pending.is_empty() {
            self.waiting_for_tokens = true;
            ctx.run_later(next_flush.max(Duration::from_millis(1)), |broker, ctx| {
                broker.waiting_for_tokens = false;
                broker.flush(ctx, true);
            });
        }
    }
}

/// Sends one batch of launches. If the call fails as a whole (the provider
/// panicked, hung or refused the call) and carried several launches, each
/// is tried again on its own, so that one bad request cannot fail the
/// others.
async fn launch_batch(
    gate: Arc<Gate>,
    batch: Vec<(
        LaunchRequest,
        oneshot::Sender<Result<Instance, ProviderError>>,
    )>,
) {
    let (requests, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
    let count = requests.len();
    let fence = Fence::Machines(requests.iter().map(|r| r.machine).collect());
    // Each attempt of the call takes a copy; the requests themselves are
    // kept for one call each if the batch fails as a whole.
    let requests = Arc::new(requests);
    let sent = Arc::clone(&requests);
    let result = gate
        .clone()
        .call(
            CallCost {
                kind: CallKind::Launch,
                requests: gate.launch_requests(count),
                instances: count,
            },
            Some(fence),
            move |provider| {
                let requests = Vec::clone(&sent);
                async move { provider.launch(requests).await }
            },
            |results: &Vec<Result<Instance, ProviderError>>| batch_error(results),
        )
        .await;
    let mut results = match result {
        Ok(results) => results,
        // Not after throttling: one call each would only ask the provider
        // more often.
        Err(e) if count > 1 && e.class != FailureClass::Unauthorized && !is_throttling(&e) => {
            log::warn!(
                "a batch of {count} launches failed as a whole ({e}); trying each on its own"
            );
            let requests = Arc::try_unwrap(requests).unwrap_or_else(|shared| (*shared).clone());
            let singles = requests.into_iter().zip(replies).map(|(request, reply)| {
                let gate = gate.clone();
                async move { Box::pin(launch_batch(gate, vec![(request, reply)])).await }
            });
            futures_util::future::join_all(singles).await;
            return;
        }
        Err(e) => vec![Err(e); count],
    };
    // A provider that answers fewer results than requests leaves the rest
    // failed, never silently dropped.
    results.resize_with(count, || {
        Err(ProviderError::new(
            FailureClass::Transient,
            "the provider gave no answer for this launch",
        ))
    });
    for (reply, result) in replies.into_iter().zip(results) {
        let _ = reply.send(result);
    }
}

impl Actor for ProviderBroker {
    type Context = Context<Self>;
}

impl Supervised for ProviderBroker {
    fn restarting(&mut self, _ctx: &mut Context<Self>) {
        // Launches not yet sent are abandoned: their machines hear a
        // transient failure and try again. Calls in flight run on.
        self.pending.clear();
        self.flush_scheduled = false;
        self.waiting_for_tokens = false;
    }
}

impl Handler<Launch> for ProviderBroker {
    type Result = ();

    fn handle(&mut self, msg: Launch, ctx: &mut Context<Self>) {
        hooks::checkpoint(kinds::PROVIDER_BROKER);
        let (reply, answer) = oneshot::channel();
        self.pending.push(Waiting {
            request: msg.request,
            reply,
            arrived: Instant::now(),
        });
        if self.waiting_for_tokens {
            // The flush due when the launch bucket refills sends it.
        } else if self.pending.len() >= self.max_batch {
            self.flush(ctx, false);
        } else if !self.flush_scheduled {
            self.flush_scheduled = true;
            // Everything that arrives before this runs joins the batch.
            ctx.run_later(Duration::ZERO, |broker, ctx| {
                broker.flush_scheduled = false;
                broker.flush(ctx, false);
            });
        }
        let (started, failed) = (msg.started, msg.failed);
        actix::spawn(async move {
            let result = answer.await.unwrap_or_else(|_| {
                Err(ProviderError::new(
                    FailureClass::Transient,
                    "the launch was abandoned",
                ))
            });
            // A machine actor that stopped meanwhile hears nothing: its
            // instance, if any, is a stray for the next sweep.
            match result {
                Ok(instance) => started.do_send(InstanceStarted(instance)),
                Err(error) => failed.do_send(InstanceFailed(error)),
            }
        });
    }
}

impl Handler<Terminate> for ProviderBroker {
    type Result = ResponseFuture<Vec<Result<(), ProviderError>>>;

    fn handle(&mut self, msg: Terminate, _ctx: &mut Context<Self>) -> Self::Result {
        let gate = self.gate.clone();
        let Terminate {
            instances: ids,
            fence,
        } = msg;
        let count = ids.len();
        Box::pin(async move {
            let result = gate
                .call(
                    CallCost::one(CallKind::Terminate),
                    Some(fence),
                    move |provider| {
                        let ids = ids.clone();
                        async move { provider.terminate(ids).await }
                    },
                    |results: &Vec<Result<(), ProviderError>>| batch_error(results),
                )
                .await;
            let mut results = result.unwrap_or_else(|e| vec![Err(e); count]);
            results.resize_with(count, || {
                Err(ProviderError::new(
                    FailureClass::Transient,
                    "the provider gave no answer for this instance",
                ))
            });
            results
        })
    }
}

/// A describing call through `gate`: one `Describe` token, under no
/// fence, its answer as the provider gives it.
fn describe<T, F, Fut>(gate: Arc<Gate>, make: F) -> ResponseFuture<Result<T, ProviderError>>
where
    T: 'static,
    F: Fn(Arc<dyn Provider>) -> Fut + 'static,
    Fut: Future<Output = Result<T, ProviderError>> + 'static,
{
    Box::pin(async move {
        gate.call(
            CallCost::one(CallKind::Describe),
            None,
            make,
            |result: &Result<T, ProviderError>| result.as_ref().err(),
        )
        .await
        .and_then(|inner| inner)
    })
}

impl Handler<ListInstances> for ProviderBroker {
    type Result = ResponseFuture<Result<Vec<ListedInstance>, ProviderError>>;

    fn handle(&mut self, msg: ListInstances, _ctx: &mut Context<Self>) -> Self::Result {
        describe(self.gate.clone(), move |provider| {
            let controller = msg.controller_uuid.clone();
            async move { provider.listed_instances(&controller).await }
        })
    }
}

impl Handler<DescribeInstances> for ProviderBroker {
    type Result = ResponseFuture<Result<Vec<Instance>, ProviderError>>;

    fn handle(&mut self, msg: DescribeInstances, _ctx: &mut Context<Self>) -> Self::Result {
        describe(self.gate.clone(), move |provider| {
            let (controller, ids) = (msg.controller_uuid.clone(), msg.ids.clone());
            async move { provider.instances_named(&controller, ids).await }
        })
    }
}

impl Handler<ListZones> for ProviderBroker {
    type Result = ResponseFuture<Result<Vec<ProviderZone>, ProviderError>>;

    fn handle(&mut self, _msg: ListZones, _ctx: &mut Context<Self>) -> Self::Result {
        describe(self.gate.clone(), |provider| async move {
            provider.zones().await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_with_a_throttled_answer_among_others_is_a_throttled_call() {
        let transient = |m: &str| ProviderError::new(FailureClass::Transient, m);
        for code in [
            "RequestLimitExceeded",
            "Throttling",
            "ThrottlingException",
            "RequestThrottled",
        ] {
            assert!(is_throttling(&transient(code)), "{code}");
        }
        assert!(!is_throttling(&transient("InternalError")));
        let answers: Vec<Result<(), ProviderError>> = vec![
            Ok(()),
            Err(transient("InternalError: try again")),
            Err(transient("RequestThrottled: slow down")),
        ];
        assert_eq!(
            batch_error(&answers).map(|e| e.message.as_str()),
            Some("RequestThrottled: slow down")
        );
        assert_eq!(
            batch_error(&answers[..2]).map(|e| e.message.as_str()),
            Some("InternalError: try again")
        );
        assert!(batch_error(&answers[..1]).is_none());
    }

    #[tokio::test]
    async fn a_launch_refused_for_our_credentials_keeps_no_tokens_promised() {
        let sim = crate::providers::sim::SimProvider::open(Default::default(), None).unwrap();
        let broker = ProviderBroker::new(
            Arc::new(sim),
            RateLimits::default(),
            1,
            Duration::from_secs(5),
            None,
        );
        let gate = broker.gate;
        *gate.refused.lock().unwrap() = Some((
            ProviderError::new(FailureClass::Unauthorized, "AuthFailure"),
            Instant::now(),
        ));
        // What a flush promises a batch before its call is made.
        let cost = CallCost {
            kind: CallKind::Launch,
            requests: 1,
            instances: 1,
        };
        gate.launches_unadmitted.fetch_add(1, Ordering::SeqCst);
        let refused = gate.admit(cost).await.unwrap_err();
        assert_eq!(refused.class, FailureClass::Unauthorized);
        assert_eq!(gate.launches_unadmitted.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_bucket_lets_its_capacity_through_at_once_then_paces_at_its_rate() {
        let mut bucket = TokenBucket::new(Bucket {
            capacity: 5.0,
            per_second: 2.0,
        });
        let now = bucket.at;
        for _ in 0..5 {
            assert_eq!(bucket.reserve(now), Duration::ZERO);
        }
        assert_eq!(bucket.reserve(now), Duration::from_millis(500));
        assert_eq!(bucket.reserve(now), Duration::from_millis(1000));
    }

    #[test]
    fn a_bucket_refills_with_time_up_to_its_capacity() {
        let mut bucket = TokenBucket::new(Bucket {
            capacity: 2.0,
            per_second: 1.0,
        });
        let start = bucket.at;
        bucket.reserve(start);
        bucket.reserve(start);
        assert_eq!(
            bucket.reserve(start + Duration::from_secs(10)),
            Duration::ZERO
        );
        assert_eq!(
            bucket.reserve(start + Duration::from_secs(10)),
            Duration::ZERO
        );
        assert!(bucket.reserve(start + Duration::from_secs(10)) > Duration::ZERO);
    }

    fn launch_of(requests: usize, instances: usize) -> CallCost {
        CallCost {
            kind: CallKind::Launch,
            requests,
            instances,
        }
    }

    #[test]
    fn a_launch_takes_a_request_token_for_each_request_it_makes() {
        // EC2's RunInstances bucket; a batch of five is five requests.
        let mut buckets = Buckets::new(RateLimits::ec2());
        let now = Instant::now();
        assert_eq!(buckets.reserve_call(launch_of(5, 5), now), Duration::ZERO);
        // The burst is spent: the next five requests wait 2.5 s at 2/s.
        assert_eq!(
            buckets.reserve_call(launch_of(5, 5), now),
            Duration::from_millis(2500)
        );
        // A provider whose batch is one request takes one token for it.
        let mut buckets = Buckets::new(RateLimits::ec2());
        for _ in 0..5 {
            assert_eq!(buckets.reserve_call(launch_of(1, 5), now), Duration::ZERO);
        }
        assert_eq!(
            buckets.reserve_call(launch_of(1, 5), now),
            Duration::from_millis(500)
        );
    }

    #[test]
    fn a_launch_takes_an_instance_token_for_each_instance_it_asks_for() {
        let mut buckets = Buckets::new(RateLimits {
            launch: Some(Bucket {
                capacity: 100.0,
                per_second: 100.0,
            }),
            instances: Some(Bucket {
                capacity: 10.0,
                per_second: 2.0,
            }),
            ..RateLimits::default()
        });
        let now = Instant::now();
        // Two calls of five instances each spend the ten instance tokens.
        for _ in 0..2 {
            assert_eq!(buckets.reserve_call(launch_of(1, 5), now), Duration::ZERO);
        }
        // The next five wait for five tokens at two a second.
        assert_eq!(
            buckets.reserve_call(launch_of(1, 5), now),
            Duration::from_millis(2500)
        );
        // Other calls take no instance tokens.
        assert_eq!(
            buckets.reserve_call(CallCost::one(CallKind::Describe), now),
            Duration::ZERO
        );
        // EC2's published instance bucket is configured by default.
        assert_eq!(
            RateLimits::ec2().instances,
            Some(Bucket {
                capacity: 1000.0,
                per_second: 2.0,
            })
        );
    }

    #[test]
    fn a_drained_bucket_makes_the_next_caller_wait() {
        let mut bucket = TokenBucket::new(Bucket {
            capacity: 100.0,
            per_second: 20.0,
        });
        bucket.drain();
        assert!(bucket.reserve(bucket.at) > Duration::ZERO);
    }

    #[test]
    fn a_throttled_kind_without_a_limit_gets_one_at_half_the_rate_it_was_called_at() {
        let mut buckets = Buckets::new(RateLimits::default());
        let now = Instant::now();
        for _ in 0..8 {
            assert_eq!(
                buckets.reserve_call(CallCost::one(CallKind::Launch), now),
                Duration::ZERO
            );
        }
        assert_eq!(buckets.rate(CallKind::Launch), None);
        buckets.throttled(CallKind::Launch, now, now);
        assert_eq!(buckets.rate(CallKind::Launch), Some(4.0));
        // Spent: the next call waits a quarter of a second.
        assert_eq!(
            buckets.reserve_call(CallCost::one(CallKind::Launch), now),
            Duration::from_millis(250)
        );
        // Other kinds are not paced.
        assert_eq!(
            buckets.reserve_call(CallCost::one(CallKind::Describe), now),
            Duration::ZERO
        );
        assert_eq!(buckets.rate(CallKind::Describe), None);
    }

    #[test]
    fn refusals_of_calls_sent_before_a_slow_down_do_not_slow_it_again() {
        let mut buckets = Buckets::new(RateLimits {
            launch: Some(Bucket {
                capacity: 10.0,
                per_second: 40.0,
            }),
            ..RateLimits::default()
        });
        let sent = Instant::now();
        // Called at 40 a second, as configured.
        for _ in 0..40 {
            buckets.reserve_call(CallCost::one(CallKind::Launch), sent);
        }
        let now = sent + Duration::from_millis(100);
        buckets.throttled(CallKind::Launch, sent, now);
        assert_eq!(buckets.rate(CallKind::Launch), Some(20.0));
        // Nine more calls sent with the first come back refused.
        for _ in 0..9 {
            buckets.throttled(CallKind::Launch, sent, now + Duration::from_millis(5));
        }
        assert_eq!(buckets.rate(CallKind::Launch), Some(20.0));
        // Nor does one sent after it and refused within a second.
        let soon = now + Duration::from_millis(50);
        buckets.throttled(CallKind::Launch, soon, soon);
        assert_eq!(buckets.rate(CallKind::Launch), Some(20.0));
        // One sent after it and refused a second later, with calls made
        // at the new pace meanwhile, slows it again.
        for i in 1..=20 {
            let at = now + Duration::from_millis(50 * i);
            buckets.reserve_call(CallCost::one(CallKind::Launch), at);
        }
        let later = now + SLOW_DOWN_SPACING;
        buckets.throttled(CallKind::Launch, later, later);
        assert_eq!(buckets.rate(CallKind::Launch), Some(10.0));
    }

    #[test]
    fn each_throttle_halves_the_rate_down_to_the_slowest() {
        let mut buckets = Buckets::new(RateLimits::ec2());
        let mut now = Instant::now();
        // Called slowly, the configured rate is what is halved.
        buckets.reserve_call(CallCost::one(CallKind::Launch), now);
        buckets.throttled(CallKind::Launch, now, now);
        assert_eq!(buckets.rate(CallKind::Launch), Some(0.5));
        // Refused again at once: once a second at most.
        buckets.throttled(CallKind::Launch, now, now);
        assert_eq!(buckets.rate(CallKind::Launch), Some(0.5));
        for _ in 0..10 {
            now += SLOW_DOWN_SPACING;
            buckets.throttled(CallKind::Launch, now, now);
        }
        assert_eq!(buckets.rate(CallKind::Launch), Some(SLOWEST_RATE));
    }

    #[test]
    fn calls_that_go_through_bring_a_slowed_bucket_back_to_its_limit() {
        let mut buckets = Buckets::new(RateLimits::ec2());
        let now = Instant::now();
        buckets.throttled(CallKind::Launch, now, now);
        let slowed = buckets.rate(CallKind::Launch).unwrap();
        buckets.answered(CallKind::Launch, now, now);
        let faster = buckets.rate(CallKind::Launch).unwrap();
        assert!((faster - slowed * SPEED_UP).abs() < 1e-9, "{faster}");
        for _ in 0..100 {
            buckets.answered(CallKind::Launch, now, now);
        }
        assert_eq!(
            buckets.active[&CallKind::Launch].limit,
            RateLimits::ec2().launch.unwrap()
        );
    }

    #[test]
    fn a_bucket_slowed_to_the_slowest_recovers_in_seconds_of_calls() {
        let mut buckets = Buckets::new(RateLimits::ec2());
        let mut now = Instant::now();
        for _ in 0..12 {
            now += SLOW_DOWN_SPACING;
            buckets.throttled(CallKind::Launch, now, now);
        }
        assert_eq!(buckets.rate(CallKind::Launch), Some(SLOWEST_RATE));
        // Calls at the pace the bucket allows, each going through.
        let started = now;
        let configured = RateLimits::ec2().launch.unwrap();
        while buckets.active[&CallKind::Launch].limit != configured {
            let rate = buckets.rate(CallKind::Launch).unwrap();
            let sent = now;
            now += Duration::from_secs_f64(1.0 / rate);
            buckets.answered(CallKind::Launch, sent, now);
            assert!(now - started < Duration::from_secs(60), "still slow");
        }
        // At 5% a call alone it took over three minutes (0.1/s to 2/s).
        assert!(
            now - started < Duration::from_secs(30),
            "{:?}",
            now - started
        );
    }

    #[test]
    fn calls_in_flight_when_a_kind_is_throttled_do_not_unpace_it_again() {
        let mut buckets = Buckets::new(RateLimits::default());
        let sent = Instant::now();
        // Called at 400 a second; refused: paced at 200.
        for _ in 0..400 {
            buckets.reserve_call(CallCost::one(CallKind::Launch), sent);
        }
        let now = sent + Duration::from_millis(10);
        buckets.throttled(CallKind::Launch, sent, now);
        assert_eq!(buckets.rate(CallKind::Launch), Some(200.0));
        // The calls sent with the refused one come back through.
        for _ in 0..100 {
            buckets.answered(CallKind::Launch, sent, now);
        }
        assert_eq!(buckets.rate(CallKind::Launch), Some(200.0));
        // Calls sent since speed it up, and unpace it only well above
        // the pace that was refused.
        let later = now + Duration::from_millis(5);
        buckets.answered(CallKind::Launch, later, later);
        let rate = buckets.rate(CallKind::Launch).unwrap();
        assert!(rate > 200.0 && rate < 800.0, "{rate}");
        let mut calls = 0;
        while buckets.rate(CallKind::Launch).is_some() {
            buckets.answered(CallKind::Launch, later, later);
            calls += 1;
            assert!(calls < 1000, "never unpaced");
        }
        // 4 × 200 / s reached at 5 % a call.
        assert!((25..=30).contains(&calls), "{calls}");
    }

    #[test]
    fn a_kind_without_a_limit_is_unpaced_again_once_it_is_fast() {
        let mut buckets = Buckets::new(RateLimits::default());
        let now = Instant::now();
        buckets.throttled(CallKind::Terminate, now, now);
        assert_eq!(buckets.rate(CallKind::Terminate), Some(0.5));
        let mut calls = 0;
        while buckets.rate(CallKind::Terminate).is_some() {
            buckets.answered(CallKind::Terminate, now, now);
            calls += 1;
            assert!(calls < 1000, "never unpaced");
        }
        // From 0.5/s to 100/s at 5% a call.
        assert!((100..=120).contains(&calls), "{calls}");
    }

    #[test]
    fn request_limit_exceeded_is_throttling_and_capacity_is_not() {
        let throttled =
            ProviderError::new(FailureClass::Transient, "RequestLimitExceeded: slow down");
        let capacity =
            ProviderError::new(FailureClass::ZoneSpecific, "InsufficientInstanceCapacity");
        assert!(is_throttling(&throttled));
        assert!(!is_throttling(&capacity));
    }
}

//! The engine's counters, gauges and histograms, and their rendering in
//! Prometheus' text format for `GET /metrics`.
//!
//! The engine updates a shared [`Metrics`] as it works; the API renders it
//! at scrape time, adding the machines by state, which it reads from the
//! store then. Updates are atomic operations on fixed storage: no lock is
//! taken on the hot path except the first time a call kind or a queue name
//! is seen (a short write lock to add its slot).
//!
//! Label values are `&'static str` on purpose: names come from the code, not
//! from data, so the number of series is bounded by construction.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use crate::domain::instance_types::HourlyPrice;

/// The upper bounds (seconds) of the provider-call latency buckets: from a
/// quick API call to a launch that waits for a slow cloud.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// The Prometheus names, so tests and dashboards can refer to them.
pub mod names {
    pub const PROVISIONING_ATTEMPTS: &str = "berth_provisioning_attempts_total";
    pub const PROVISIONING_ERRORS: &str = "berth_provisioning_errors_total";
    pub const PROVIDER_CALLS: &str = "berth_provider_calls_total";
    pub const PROVIDER_REQUESTS: &str = "berth_provider_requests_total";
    pub const PROVIDER_CALL_DURATION: &str = "berth_provider_call_duration_seconds";
    pub const QUEUE_DEPTH: &str = "berth_queue_depth";
    pub const MACHINES: &str = "berth_machines";
    pub const MODEL_HOURLY_COST: &str = "berth_model_hourly_cost_dollars";
    pub const API_OVERLOADED: &str = "berth_api_overloaded_total";
    pub const RECONCILIATIONS: &str = "berth_reconciliations_total";
    pub const ACTOR_RESTARTS: &str = "berth_actor_restarts_total";
}

/// One histogram: a count per bucket (not cumulative; rendering adds them
/// up), a total count and a sum.
#[derive(Debug, Default)]
struct Histogram {
    buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    count: AtomicU64,
    /// The sum in microseconds: an integer can be added atomically, and a
    /// microsecond is finer than any provider call.
    sum_micros: AtomicU64,
}

impl Histogram {
    fn observe(&self, seconds: f64) {
        let seconds = if seconds.is_finite() && seconds > 0.0 {
            seconds
        } else {
            0.0
        };
        // The count first, and the bucket after it with Release: a scrape
        // that sees the bucket's increment sees the count's, so no bucket
        // it shows is above the count (`+Inf`).
        self.count.fetch_add(1, Ordering::Relaxed);
        if let Some(i) = LATENCY_BUCKETS.iter().position(|&le| seconds <= le) {
            self.buckets[i].fetch_add(1, Ordering::Release);
        }
        // `as` saturates for floats: a huge value cannot wrap.
        let micros = (seconds * 1e6).round() as u64;
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }
}

/// What is kept for one kind of provider call.
#[derive(Debug, Default)]
struct ProviderCall {
    ok: AtomicU64,
    failed: AtomicU64,
    /// The cloud API requests the calls made (more than the calls where
    /// one call is several requests, as an EC2 launch batch is).
    requests: AtomicU64,
    latency: Histogram,
}

/// A set of slots keyed by static names, in first-seen order.
#[derive(Debug)]
struct Family<T> {
    slots: RwLock<Vec<(&'static str, Arc<T>)>>,
}

impl<T> Default for Family<T> {
    fn default() -> Self {
        Family {
            slots: RwLock::new(Vec::new()),
        }
    }
}

impl<T: Default> Family<T> {
    /// The slot for `name`, made on first use.
    fn get(&self, name: &'static str) -> Arc<T> {
        {
            let slots = self.slots.read().unwrap_or_else(PoisonError::into_inner);
            if let Some((_, slot)) = slots.iter().find(|(n, _)| *n == name) {
                return Arc::clone(slot);
            }
        }
        let mut slots = self.slots.write().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, slot)) = slots.iter().find(|(n, _)| *n == name) {
            return Arc::clone(slot);
        }
        let slot = Arc::new(T::default());
        slots.push((name, Arc::clone(&slot)));
        slot
    }

    /// Every slot, sorted by name so the output is stable.
    fn snapshot(&self) -> Vec<(&'static str, Arc<T>)> {
        let mut slots = self
            .slots
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        slots.sort_by_key(|(name, _)| *name);
        slots
    }
}

/// The registry the engine updates and `/metrics` renders.
#[derive(Debug, Default)]
pub struct Metrics {
    provisioning_attempts: AtomicU64,
    provisioning_errors: AtomicU64,
    provider_calls: Family<ProviderCall>,
    queue_depths: Family<AtomicI64>,
    /// Requests the API refused with 503 because it was at its limit.
    api_overloaded: AtomicU64,
    /// Times the provisioner finished reconciling the store with the
    /// provider at start (1 after the first start is complete).
    reconciliations: AtomicU64,
    /// Actors restarted after a panic, by kind.
    actor_restarts: Family<AtomicU64>,
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics::default()
    }

    /// The engine asked a provider for an instance.
    pub fn provisioning_attempt(&self) {
        self.provisioning_attempts.fetch_add(1, Ordering::Relaxed);
    }

    /// A launch failed (whatever the engine does next).
    pub fn provisioning_error(&self) {
        self.provisioning_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// One provider call of `kind` (`launch`, `terminate`, `zones`, ...)
    /// took `seconds` and succeeded or not.
    pub fn observe_provider_call(&self, kind: &'static str, seconds: f64, ok: bool) {
        let call = self.provider_calls.get(kind);
        if ok {
            call.ok.fetch_add(1, Ordering::Relaxed);
        } else {
            call.failed.fetch_add(1, Ordering::Relaxed);
        }
        call.latency.observe(seconds);
    }

    /// A provider call of `kind` made `requests` of the cloud's API
    /// requests.
    pub fn count_provider_requests(&self, kind: &'static str, requests: usize) {
        let requests = u64::try_from(requests).unwrap_or(u64::MAX);
        self.provider_calls
            .get(kind)
            .requests
            .fetch_add(requests, Ordering::Relaxed);
    }

    /// How many items wait in the queue (or mailbox) `name` now.
    pub fn set_queue_depth(&self, name: &'static str, depth: usize) {
        let depth = i64::try_from(depth).unwrap_or(i64::MAX);
        self.queue_depths.get(name).store(depth, Ordering::Relaxed);
    }

    /// The provisioner finished its start-up reconciliation: every machine
    /// that needs an actor has one, and strays were dealt with.
    pub fn reconciled(&self) {
        self.reconciliations.fetch_add(1, Ordering::Relaxed);
    }

    /// An actor of `kind` panicked and was restarted.
    pub fn actor_restarted(&self, kind: &'static str) {
        self.actor_restarts
            .get(kind)
            .fetch_add(1, Ordering::Relaxed);
    }

    /// How many times actors of `kind` were restarted after a panic.
    pub fn actor_restarts(&self, kind: &'static str) -> u64 {
        self.actor_restarts.get(kind).load(Ordering::Relaxed)
    }

    /// The API refused a request because it was overloaded.
    pub fn api_overloaded(&self) {
        self.api_overloaded.fetch_add(1, Ordering::Relaxed);
    }

    /// Everything, in Prometheus' text exposition format (version 0.0.4).
    /// `machines` is the number of machines in each state, read from the
    /// store by the caller; every state should be present, zeros included,
    /// so that a series does not vanish when its count drops to zero.
    /// `hourly_cost` is what the model's instances cost an hour, read from
    /// the store the same way.
    pub fn render(&self, machines: &[(&str, u64)], hourly_cost: HourlyPrice) -> String {
        let mut out = String::new();
        header(
            &mut out,
            names::MODEL_HOURLY_COST,
            "gauge",
            "What the model's instances cost an hour, in US dollars, as priced at launch.",
        );
        let _ = writeln!(out, "{} {hourly_cost}", names::MODEL_HOURLY_COST);
        header(
            &mut out,
            names::MACHINES,
            "gauge",
            "Machines by lifecycle state.",
        );
        for (state, count) in machines {
            let _ = writeln!(out, "{}{{state=\"{state}\"}} {count}", names::MACHINES);
        }

        header(
            &mut out,
            names::PROVISIONING_ATTEMPTS,
            "counter",
            "Instances the engine asked a provider to start.",
        );
        let _ = writeln!(
            out,
            "{} {}",
            names::PROVISIONING_ATTEMPTS,
            self.provisioning_attempts.load(Ordering::Relaxed)
        );
        header(
            &mut out,
            names::PROVISIONING_ERRORS,
            "counter",
            "Instance launches that failed.",
        );
        let _ = writeln!(
            out,
            "{} {}",
            names::PROVISIONING_ERRORS,
            self.provisioning_errors.load(Ordering::Relaxed)
        );

        let calls = self.provider_calls.snapshot();
        header(
            &mut out,
            names::PROVIDER_CALLS,
            "counter",
            "Provider calls by kind and outcome.",
        );
        for (kind, call) in &calls {
            for (outcome, n) in [("ok", &call.ok), ("error", &call.failed)] {
                let _ = writeln!(
                    out,
                    "{}{{kind=\"{kind}\",outcome=\"{outcome}\"}} {}",
                    names::PROVIDER_CALLS,
                    n.load(Ordering::Relaxed)
                );
            }
        }
        header(
            &mut out,
            names::PROVIDER_REQUESTS,
            "counter",
            "Cloud API requests made by provider calls, by kind (an EC2 launch call makes one RunInstances per instance).",
        );
        for (kind, call) in &calls {
            let _ = writeln!(
                out,
                "{}{{kind=\"{kind}\"}} {}",
                names::PROVIDER_REQUESTS,
                call.requests.load(Ordering::Relaxed)
            );
        }
        header(
            &mut out,
            names::PROVIDER_CALL_DURATION,
            "histogram",
            "Provider call latency in seconds, by kind.",
        );
        for (kind, call) in &calls {
            render_histogram(&mut out, names::PROVIDER_CALL_DURATION, kind, &call.latency);
        }

        header(
            &mut out,
            names::QUEUE_DEPTH,
            "gauge",
            "Items waiting in the engine's queues.",
        );
        for (name, depth) in self.queue_depths.snapshot() {
            let _ = writeln!(
                out,
                "{}{{queue=\"{name}\"}} {}",
                names::QUEUE_DEPTH,
                depth.load(Ordering::Relaxed)
            );
        }

        header(
            &mut out,
            names::API_OVERLOADED,
            "counter",
            "API requests refused with 503 because a limit was reached.",
        );
        let _ = writeln!(
            out,
            "{} {}",
            names::API_OVERLOADED,
            self.api_overloaded.load(Ordering::Relaxed)
        );

        header(
            &mut out,
            names::RECONCILIATIONS,
            "counter",
            "Start-up reconciliations of the store with the provider that completed.",
        );
        let _ = writeln!(
            out,
            "{} {}",
            names::RECONCILIATIONS,
            self.reconciliations.load(Ordering::Relaxed)
        );

        header(
            &mut out,
            names::ACTOR_RESTARTS,
            "counter",
            "Engine actors restarted after a panic, by kind.",
        );
        for (kind, n) in self.actor_restarts.snapshot() {
            let _ = writeln!(
                out,
                "{}{{actor=\"{kind}\"}} {}",
                names::ACTOR_RESTARTS,
                n.load(Ordering::Relaxed)
            );
        }
        out
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn render_histogram(out: &mut String, name: &str, kind: &str, h: &Histogram) {
    // The buckets before the count, with Acquire: see `Histogram::observe`.
    let mut cumulative = 0;
    for (le, n) in LATENCY_BUCKETS.iter().zip(&h.buckets) {
        cumulative += n.load(Ordering::Acquire);
        let _ = writeln!(
            out,
            "{name}_bucket{{kind=\"{kind}\",le=\"{le}\"}} {cumulative}"
        );
    }
    let count = h.count.load(Ordering::Relaxed);
    let _ = writeln!(out, "{name}_bucket{{kind=\"{kind}\",le=\"+Inf\"}} {count}");
    let sum = h.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
    let _ = writeln!(out, "{name}_sum{{kind=\"{kind}\"}} {sum}");
    let _ = writeln!(out, "{name}_count{{kind=\"{kind}\"}} {count}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<&str> {
        text.lines().filter(|l| !l.starts_with('#')).collect()
    }

    #[test]
    fn counters_start_at_zero_and_count_up() {
        let metrics = Metrics::new();
        metrics.provisioning_attempt();
        metrics.provisioning_attempt();
        metrics.provisioning_error();
        let text = metrics.render(&[], HourlyPrice::default());
        let lines = lines(&text);
        assert!(lines.contains(&"berth_provisioning_attempts_total 2"));
        assert!(lines.contains(&"berth_provisioning_errors_total 1"));
        assert!(lines.contains(&"berth_api_overloaded_total 0"));
    }

    #[test]
    fn provider_calls_are_counted_by_kind_and_outcome() {
        let metrics = Metrics::new();
        metrics.observe_provider_call("launch", 0.2, true);
        metrics.observe_provider_call("launch", 3.0, false);
        metrics.observe_provider_call("zones", 0.001, true);
        metrics.count_provider_requests("launch", 5);
        metrics.count_provider_requests("launch", 3);
        let text = metrics.render(&[], HourlyPrice::default());
        let lines = lines(&text);
        assert!(lines.contains(&"berth_provider_requests_total{kind=\"launch\"} 8"));
        assert!(lines.contains(&"berth_provider_requests_total{kind=\"zones\"} 0"));
        assert!(lines.contains(&"berth_provider_calls_total{kind=\"launch\",outcome=\"ok\"} 1"));
        assert!(lines.contains(&"berth_provider_calls_total{kind=\"launch\",outcome=\"error\"} 1"));
        assert!(lines.contains(&"berth_provider_calls_total{kind=\"zones\",outcome=\"ok\"} 1"));
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_end_with_the_count() {
        let metrics = Metrics::new();
        metrics.observe_provider_call("launch", 0.2, true);
        metrics.observe_provider_call("launch", 3.0, true);
        metrics.observe_provider_call("launch", 100.0, true);
        let text = metrics.render(&[], HourlyPrice::default());
        let lines = lines(&text);
        let d = "berth_provider_call_duration_seconds";
        assert!(lines.contains(&format!("{d}_bucket{{kind=\"launch\",le=\"0.1\"}} 0").as_str()));
        assert!(lines.contains(&format!("{d}_bucket{{kind=\"launch\",le=\"0.25\"}} 1").as_str()));
        assert!(lines.contains(&format!("{d}_bucket{{kind=\"launch\",le=\"5\"}} 2").as_str()));
        assert!(lines.contains(&format!("{d}_bucket{{kind=\"launch\",le=\"30\"}} 2").as_str()));
        assert!(lines.contains(&format!("{d}_bucket{{kind=\"launch\",le=\"+Inf\"}} 3").as_str()));
        assert!(lines.contains(&format!("{d}_sum{{kind=\"launch\"}} 103.2").as_str()));
        assert!(lines.contains(&format!("{d}_count{{kind=\"launch\"}} 3").as_str()));
    }

    #[test]
    fn a_negative_or_nan_latency_counts_as_zero() {
        let metrics = Metrics::new();
        metrics.observe_provider_call("zones", -1.0, true);
        metrics.observe_provider_call("zones", f64::NAN, true);
        let text = metrics.render(&[], HourlyPrice::default());
        let d = "berth_provider_call_duration_seconds";
        assert!(text.contains(&format!("{d}_bucket{{kind=\"zones\",le=\"0.005\"}} 2")));
        assert!(text.contains(&format!("{d}_sum{{kind=\"zones\"}} 0\n")));
    }

    #[test]
    fn queue_depth_is_a_gauge_that_keeps_the_last_value() {
        let metrics = Metrics::new();
        metrics.set_queue_depth("provisioner", 7);
        metrics.set_queue_depth("provisioner", 3);
        metrics.set_queue_depth("broker", 0);
        let text = metrics.render(&[], HourlyPrice::default());
        let lines = lines(&text);
        assert!(lines.contains(&"berth_queue_depth{queue=\"provisioner\"} 3"));
        assert!(lines.contains(&"berth_queue_depth{queue=\"broker\"} 0"));
    }

    #[test]
    fn machines_by_state_are_rendered_as_given() {
        let metrics = Metrics::new();
        let text = metrics.render(&[("pending", 2), ("started", 0)], "1.25".parse().unwrap());
        let lines = lines(&text);
        assert!(lines.contains(&"berth_machines{state=\"pending\"} 2"));
        assert!(lines.contains(&"berth_machines{state=\"started\"} 0"));
        assert!(lines.contains(&"berth_model_hourly_cost_dollars 1.25"));
    }

    #[test]
    fn every_metric_has_help_and_type_lines() {
        let text = Metrics::new().render(&[], HourlyPrice::default());
        for name in [
            names::MACHINES,
            names::MODEL_HOURLY_COST,
            names::PROVISIONING_ATTEMPTS,
            names::PROVISIONING_ERRORS,
            names::PROVIDER_CALLS,
            names::PROVIDER_REQUESTS,
            names::PROVIDER_CALL_DURATION,
            names::QUEUE_DEPTH,
            names::API_OVERLOADED,
        ] {
            assert!(text.contains(&format!("# HELP {name} ")), "{name}");
            assert!(text.contains(&format!("# TYPE {name} ")), "{name}");
        }
    }

    #[test]
    fn a_scrape_while_calls_are_observed_never_shows_a_bucket_above_the_count() {
        use std::sync::atomic::AtomicBool;
        let histogram = Arc::new(Histogram::default());
        let stop = Arc::new(AtomicBool::new(false));
        let observers: Vec<_> = (0..2)
            .map(|_| {
                let (histogram, stop) = (Arc::clone(&histogram), Arc::clone(&stop));
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        histogram.observe(0.001);
                    }
                })
            })
            .collect();
        let mut uneven = Vec::new();
        for _ in 0..20_000 {
            let mut text = String::new();
            render_histogram(&mut text, "d", "launch", &histogram);
            let values: Vec<u64> = text
                .lines()
                .filter(|line| line.starts_with("d_bucket"))
                .map(|line| line.rsplit(' ').next().unwrap().parse().unwrap())
                .collect();
            // Cumulative buckets, the last (+Inf) being the count.
            if values.windows(2).any(|pair| pair[0] > pair[1]) {
                uneven.push(values);
            }
        }
        stop.store(true, Ordering::Relaxed);
        for observer in observers {
            observer.join().unwrap();
        }
        assert!(
            uneven.is_empty(),
            "{} of 20000 scrapes uneven, the first {:?}",
            uneven.len(),
            uneven.first()
        );
    }

    #[test]
    fn updates_from_many_threads_are_all_counted() {
        let metrics = Arc::new(Metrics::new());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let metrics = Arc::clone(&metrics);
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        metrics.observe_provider_call("launch", 0.01, true);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let text = metrics.render(&[], HourlyPrice::default());
        assert!(text.contains("berth_provider_calls_total{kind=\"launch\",outcome=\"ok\"} 4000"));
    }
}

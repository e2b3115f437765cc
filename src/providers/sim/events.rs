//! What the simulated cloud does later, and what it has still to tell the
//! controller: a timeline of due events (an instance starts, an agent checks
//! in), an outbox of reports and check-ins, and the start of the one task
//! that works through both.
//!
//! # Where the task runs
//!
//! The task is spawned on the tokio runtime of whoever first needs it
//! (actix's current-thread runtime in the engine, the test's runtime in
//! tests, so paused time applies). Without a runtime, it gets a thread of
//! its own with a small current-thread runtime. If its runtime shuts down,
//! the next call that needs it spawns it again; the events themselves live
//! here, not in the task, so none are lost.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::contracts::provider::{ControllerLink, InstanceStateChange};
use crate::contracts::secrets::Secret;
use crate::domain::names::MachineId;

/// Something the cloud does at a given time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Due {
    /// A pending instance starts running.
    Start { id: String },
    /// The instance's machine agent tries to check in (`attempt` counts
    /// from 1).
    AgentCheckIn { id: String, attempt: u32 },
}

/// Something for the controller, delivered in order once a link is attached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Outgoing {
    Changed(InstanceStateChange),
    AgentCheckIn {
        id: String,
        machine: MachineId,
        password: Secret,
        attempt: u32,
    },
}

#[derive(Debug)]
struct Timed {
    at: Instant,
    /// Keeps events due at the same time in the order they were scheduled.
    order: u64,
    due: Due,
}

impl PartialEq for Timed {
    fn eq(&self, other: &Timed) -> bool {
        (self.at, self.order) == (other.at, other.order)
    }
}

impl Eq for Timed {}

impl PartialOrd for Timed {
    fn partial_cmp(&self, other: &Timed) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Timed {
    fn cmp(&self, other: &Timed) -> Ordering {
        (self.at, self.order).cmp(&(other.at, other.order))
    }
}

/// Due events, earliest first.
#[derive(Debug, Default)]
pub(super) struct Timeline {
    heap: BinaryHeap<Reverse<Timed>>,
    next_order: u64,
}

impl Timeline {
    pub fn push(&mut self, at: Instant, due: Due) {
        let order = self.next_order;
        self.next_order += 1;
        self.heap.push(Reverse(Timed { at, order, due }));
    }

    pub fn next_at(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse(t)| t.at)
    }

    /// Removes and returns up to `max` events due at or before `now`, in
    /// time order.
    pub fn take_due(&mut self, now: Instant, max: usize) -> Vec<Due> {
        let mut due = Vec::new();
        while due.len() < max {
            match self.heap.peek() {
                Some(Reverse(t)) if t.at <= now => {}
                _ => break,
            }
            if let Some(Reverse(t)) = self.heap.pop() {
                due.push(t.due);
            }
        }
        due
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }
}

/// The timeline, the outbox, the link, and the driver's bookkeeping.
pub(super) struct Events {
    timeline: Mutex<Timeline>,
    outbox: Mutex<VecDeque<Outgoing>>,
    link: RwLock<Option<Arc<dyn ControllerLink>>>,
    /// Wakes the driver when something is scheduled, queued or attached,
    /// or when the cloud closes.
    wake: Arc<Notify>,
    /// Whether a driver task exists, so that exactly one is spawned.
    driver_alive: Arc<AtomicBool>,
    /// Set when the cloud is dropped; the driver then stops.
    closed: AtomicBool,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded values stay consistent even if a holder panicked: every
    // change to them is a single push or pop.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Events {
    pub fn new() -> Events {
        Events {
            timeline: Mutex::new(Timeline::default()),
            outbox: Mutex::new(VecDeque::new()),
            link: RwLock::new(None),
            wake: Arc::new(Notify::new()),
            driver_alive: Arc::new(AtomicBool::new(false)),
            closed: AtomicBool::new(false),
        }
    }

    pub fn schedule(&self, at: Instant, due: Due) {
        lock(&self.timeline).push(at, due);
        self.wake.notify_one();
    }

    pub fn schedule_all(&self, at: Instant, due: impl IntoIterator<Item = Due>) {
        {
            let mut timeline = lock(&self.timeline);
            for d in due {
                timeline.push(at, d);
            }
        }
        self.wake.notify_one();
    }

    pub fn send_all(&self, items: impl IntoIterator<Item = Outgoing>) {
        lock(&self.outbox).extend(items);
        self.wake.notify_one();
    }

    pub fn take_due(&self, now: Instant, max: usize) -> Vec<Due> {
        lock(&self.timeline).take_due(now, max)
    }

    pub fn next_at(&self) -> Option<Instant> {
        lock(&self.timeline).next_at()
    }

    pub fn take_outgoing(&self, max: usize) -> Vec<Outgoing> {
        let mut outbox = lock(&self.outbox);
        let n = outbox.len().min(max);
        outbox.drain(..n).collect()
    }

    /// Events scheduled and reports not yet delivered.
    pub fn backlog(&self) -> usize {
        lock(&self.timeline).len() + lock(&self.outbox).len()
    }

    pub fn attach(&self, link: Arc<dyn ControllerLink>) {
        let mut slot = self.link.write().unwrap_or_else(PoisonError::into_inner);
        *slot = Some(link);
        drop(slot);
        self.wake.notify_one();
    }

    pub fn link(&self) -> Option<Arc<dyn ControllerLink>> {
        self.link
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub fn wake(&self) -> Arc<Notify> {
        Arc::clone(&self.wake)
    }

    pub fn close(&self) {
        self.closed.store(true, AtomicOrdering::SeqCst);
        self.wake.notify_one();
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(AtomicOrdering::SeqCst)
    }

    /// Spawns the driver that `make` builds, unless one is alive.
    pub fn spawn_driver<F>(&self, make: impl FnOnce() -> F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        if self.driver_alive.swap(true, AtomicOrdering::SeqCst) {
            return;
        }
        // Dropped when the task ends or is dropped unpolled (its runtime
        // shut down), so that the next call spawns a new one.
        let guard = AliveGuard(Arc::clone(&self.driver_alive));
        let driver = make();
        let task = async move {
            let _guard = guard;
            driver.await;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                drop(handle.spawn(task));
            }
            Err(_) => {
                let spawned = std::thread::Builder::new()
                    .name("berth-sim-cloud".to_string())
                    .spawn(move || {
                        match tokio::runtime::Builder::new_current_thread()
                            .enable_time()
                            .build()
                        {
                            Ok(runtime) => runtime.block_on(task),
                            Err(e) => {
                                log::error!("the simulated cloud cannot start its clock: {e}")
                            }
                        }
                    });
                if let Err(e) = spawned {
                    log::error!("the simulated cloud cannot start its clock: {e}");
                }
            }
        }
    }
}

struct AliveGuard(Arc<AtomicBool>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.store(false, AtomicOrdering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn start(id: &str) -> Due {
        Due::Start { id: id.into() }
    }

    #[test]
    fn the_timeline_gives_due_events_in_time_then_schedule_order() {
        let t0 = Instant::now();
        let mut timeline = Timeline::default();
        timeline.push(t0 + Duration::from_millis(20), start("late"));
        timeline.push(t0, start("first"));
        timeline.push(t0 + Duration::from_millis(10), start("middle"));
        timeline.push(t0, start("second"));
        assert_eq!(timeline.next_at(), Some(t0));
        assert_eq!(
            timeline.take_due(t0 + Duration::from_millis(10), 10),
            [start("first"), start("second"), start("middle")]
        );
        assert_eq!(timeline.take_due(t0 + Duration::from_millis(19), 10), []);
        assert_eq!(timeline.len(), 1);
        assert_eq!(
            timeline.take_due(t0 + Duration::from_millis(20), 10),
            [start("late")]
        );
        assert_eq!(timeline.next_at(), None);
    }

    #[test]
    fn the_timeline_hands_out_at_most_the_asked_number() {
        let t0 = Instant::now();
        let mut timeline = Timeline::default();
        for i in 0..5 {
            timeline.push(t0, start(&i.to_string()));
        }
        assert_eq!(timeline.take_due(t0, 2), [start("0"), start("1")]);
        assert_eq!(timeline.len(), 3);
    }

    #[test]
    fn without_a_runtime_the_driver_gets_a_thread_of_its_own() {
        let events = Events::new();
        let (tx, rx) = std::sync::mpsc::channel();
        events.spawn_driver(move || async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            let _ = tx.send(std::thread::current().name().map(String::from));
        });
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(10)),
            Ok(Some("berth-sim-cloud".to_string()))
        );
    }

    #[tokio::test]
    async fn only_one_driver_runs_and_a_finished_one_is_replaced() {
        let events = Events::new();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let gate = Arc::new(Notify::new());
        for n in 0..3 {
            let (tx, gate) = (tx.clone(), Arc::clone(&gate));
            events.spawn_driver(move || async move {
                gate.notified().await;
                let _ = tx.send(n);
            });
        }
        gate.notify_one();
        assert_eq!(rx.recv().await, Some(0));
        // The guard is dropped once the task has finished.
        while events.driver_alive.load(AtomicOrdering::SeqCst) {
            tokio::task::yield_now().await;
        }
        events.spawn_driver(move || async move {
            let _ = tx.send(3);
        });
        assert_eq!(rx.recv().await, Some(3));
    }
}

//! Supervision that survives panics. actix's own `Supervisor` restarts an
//! actor that *stops*; a panic in a handler unwinds through it and the
//! actor is gone for good, its address dead. [`start`] runs an actor under
//! a supervisor that also catches a panic anywhere in the actor (a
//! handler, `started`, a future it waits on), logs it, counts it in
//! `/metrics` (`berth_actor_restarts_total{actor=...}`), and restarts the
//! actor on the same mailbox: its address stays valid, queued messages are
//! kept, and [`Supervised::restarting`] rebuilds its state (from the store,
//! for the actors that keep any).
//!
//! An actor that panics [`MAX_RESTARTS`] times within [`RESTART_WINDOW`] is
//! not restarted again: it is stopped, which its peers see as for any
//! stopped actor.
//!
//! Tests make an actor panic with `hooks::arm` (compiled only for tests
//! and the `test-hooks` feature); every engine actor calls
//! [`hooks::checkpoint`] where it handles its main messages.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use actix::dev::ContextFut;
use actix::prelude::*;

use crate::metrics::Metrics;

/// The most restarts within [`RESTART_WINDOW`] before an actor is given up.
pub const MAX_RESTARTS: usize = 10;
pub const RESTART_WINDOW: Duration = Duration::from_secs(60);

/// The name of each kind of engine actor, as logs and metrics give it.
pub mod kinds {
    pub const PROVISIONER: &str = "provisioner";
    pub const ZONE_TRACKER: &str = "zone-tracker";
    pub const PROVIDER_BROKER: &str = "provider-broker";
    pub const MANUAL_BROKER: &str = "manual-broker";
    pub const CONTAINER_PROVISIONER: &str = "container-provisioner";
    pub const MACHINE: &str = "machine";
}

/// When a supervised actor is started again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restart {
    /// After a panic only: an actor that stops of its own accord (a
    /// machine actor whose machine settled) is done.
    OnPanic,
    /// After a panic, and after it stops while anyone holds its address
    /// (actix's own supervisor's rule, for the engine's long-lived actors).
    OnPanicOrStop,
}

/// Starts `actor` under a supervisor that restarts it after a panic.
pub fn start<A>(kind: &'static str, restart: Restart, metrics: Arc<Metrics>, actor: A) -> Addr<A>
where
    A: Supervised + Actor<Context = Context<A>>,
{
    let ctx = Context::new();
    let address = ctx.address();
    let fut = ctx.into_future(actor);
    actix::spawn(PanicSupervisor {
        fut,
        kind,
        restart,
        metrics,
        restarts: Vec::new(),
    });
    address
}

struct PanicSupervisor<A>
where
    A: Supervised + Actor<Context = Context<A>>,
{
    fut: ContextFut<A, Context<A>>,
    kind: &'static str,
    restart: Restart,
    metrics: Arc<Metrics>,
    /// When it was restarted lately, for the give-up rule.
    restarts: Vec<Instant>,
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_string())
}

impl<A> Future for PanicSupervisor<A>
where
    A: Supervised + Actor<Context = Context<A>>,
{
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<()> {
        let this = &mut *self;
        loop {
            let polled = catch_unwind(AssertUnwindSafe(|| Pin::new(&mut this.fut).poll(cx)));
            match polled {
                Ok(Poll::Pending) => return Poll::Pending,
                // Stopped of its own accord: restart while anyone holds
                // its address, as actix's supervisor does, if asked to.
                Ok(Poll::Ready(())) => {
                    if this.restart == Restart::OnPanic || !this.fut.restart() {
                        return Poll::Ready(());
                    }
                }
                Err(payload) => {
                    let now = Instant::now();
                    this.restarts
                        .retain(|at| now.duration_since(*at) < RESTART_WINDOW);
                    this.restarts.push(now);
                    let why = panic_text(payload.as_ref());
                    if this.restarts.len() > MAX_RESTARTS {
                        log::error!(
                            "{} actor panicked ({why}) {} times within {:?}: giving up on it",
                            this.kind,
                            this.restarts.len(),
                            RESTART_WINDOW
                        );
                        return Poll::Ready(());
                    }
                    log::error!("{} actor panicked ({why}); restarting it", this.kind);
                    this.metrics.actor_restarted(this.kind);
                    if !this.fut.restart() {
                        return Poll::Ready(());
                    }
                }
            }
        }
    }
}

/// Panics on demand, for tests of supervision. What a test arms holds
/// for the thread it armed it on: the engine's actors run on the thread of
/// the actix system that started them, so tests running side by side, each
/// with its own system, do not disturb one another.
pub mod hooks {
    #[cfg(any(test, feature = "test-hooks"))]
    use std::cell::RefCell;
    #[cfg(any(test, feature = "test-hooks"))]
    use std::collections::HashMap;

    #[cfg(any(test, feature = "test-hooks"))]
    thread_local! {
        static ARMED: RefCell<HashMap<&'static str, u32>> = RefCell::new(HashMap::new());
    }

    /// Makes the next `times` checkpoints of actors of `kind` on this
    /// thread panic.
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn arm(kind: &'static str, times: u32) {
        ARMED.with(|armed| armed.borrow_mut().insert(kind, times));
    }

    /// How many armed panics of `kind` are still to fire on this thread.
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn pending(kind: &'static str) -> u32 {
        ARMED.with(|armed| armed.borrow().get(kind).copied().unwrap_or(0))
    }

    /// Panics if a test armed a panic for actors of `kind`; nothing
    /// otherwise (and nothing at all outside tests).
    #[inline]
    pub fn checkpoint(kind: &'static str) {
        #[cfg(any(test, feature = "test-hooks"))]
        {
            let fire = ARMED.with(|armed| match armed.borrow_mut().get_mut(kind) {
                Some(left) if *left > 0 => {
                    *left -= 1;
                    true
                }
                _ => false,
            });
            if fire {
                panic!("a panic injected into the {kind} actor");
            }
        }
        #[cfg(not(any(test, feature = "test-hooks")))]
        let _ = kind;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts the messages it handled; panics on `Boom`.
    #[derive(Default)]
    struct Counter {
        handled: u32,
        restarts: u32,
    }

    impl Actor for Counter {
        type Context = Context<Self>;
    }

    impl Supervised for Counter {
        fn restarting(&mut self, _ctx: &mut Context<Self>) {
            self.restarts += 1;
        }
    }

    #[derive(Message)]
    #[rtype(result = "(u32, u32)")]
    struct Count;

    #[derive(Message)]
    #[rtype(result = "()")]
    struct Boom;

    impl Handler<Count> for Counter {
        type Result = MessageResult<Count>;
        fn handle(&mut self, _: Count, _: &mut Context<Self>) -> MessageResult<Count> {
            self.handled += 1;
            MessageResult((self.handled, self.restarts))
        }
    }

    impl Handler<Boom> for Counter {
        type Result = ();
        fn handle(&mut self, _: Boom, _: &mut Context<Self>) {
            panic!("boom");
        }
    }

    #[actix_web::test]
    async fn a_panicking_actor_is_restarted_on_its_address_and_counted() {
        let metrics = Arc::new(Metrics::new());
        let counter = start(
            "counter",
            Restart::OnPanic,
            metrics.clone(),
            Counter::default(),
        );
        assert_eq!(counter.send(Count).await.unwrap(), (1, 0));
        assert!(
            counter.send(Boom).await.is_err(),
            "the panicking call has no answer"
        );
        // Same address, state kept as `restarting` left it.
        assert_eq!(counter.send(Count).await.unwrap(), (2, 1));
        assert_eq!(metrics.actor_restarts("counter"), 1);
        assert!(metrics
            .render(&[], Default::default())
            .contains("berth_actor_restarts_total{actor=\"counter\"} 1"));
    }

    #[actix_web::test]
    async fn an_actor_that_keeps_panicking_is_given_up() {
        let metrics = Arc::new(Metrics::new());
        let counter = start(
            "counter",
            Restart::OnPanic,
            metrics.clone(),
            Counter::default(),
        );
        for _ in 0..=MAX_RESTARTS {
            let _ = counter.send(Boom).await;
        }
        assert!(
            counter.send(Count).await.is_err(),
            "given up after {MAX_RESTARTS}"
        );
        assert_eq!(metrics.actor_restarts("counter"), MAX_RESTARTS as u64);
    }

    #[actix_web::test]
    async fn an_armed_checkpoint_panics_as_often_as_armed_on_its_thread_only() {
        hooks::arm("test-kind", 2);
        assert!(std::panic::catch_unwind(|| hooks::checkpoint("test-kind")).is_err());
        assert_eq!(hooks::pending("test-kind"), 1);
        let other = std::thread::spawn(|| {
            hooks::checkpoint("test-kind");
            hooks::pending("test-kind")
        });
        assert_eq!(other.join().unwrap(), 0, "another thread is not armed");
        assert!(std::panic::catch_unwind(|| hooks::checkpoint("test-kind")).is_err());
        hooks::checkpoint("test-kind");
    }
}

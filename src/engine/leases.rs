//! This controller's side of the provisioning lock: how long the leases it
//! last renewed can be trusted, by its own monotonic clock.
//!
//! The store fences every save of a machine by its lease
//! ([`crate::store::leases`]), but a cloud call cannot be fenced by the
//! database. So before launching or terminating, the engine asks the
//! [`LeaseClock`]: after a renewal that began at `t`, every lease this
//! controller holds runs at least until `t + ttl` by the database's
//! reckoning, and the clock trusts them until `t + ttl - margin`. A
//! controller that was paused (`SIGSTOP`, a long GC-like stall, a frozen
//! VM) past that point finds its clock run out when it wakes, and acts on
//! nothing until a renewal says which leases are still its own.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Whether this controller's leases can still be trusted.
#[derive(Debug)]
pub struct LeaseClock {
    ttl: Duration,
    /// Until when the last renewal's leases hold, less the margin.
    trusted_until: Mutex<Instant>,
}

impl LeaseClock {
    /// A clock for leases of `ttl`, trusted from now as if just renewed:
    /// leases claimed from here on run at least `ttl` from their claim.
    pub fn new(ttl: Duration) -> LeaseClock {
        let clock = LeaseClock {
            ttl,
            trusted_until: Mutex::new(Instant::now()),
        };
        clock.renewed(Instant::now());
        clock
    }

    /// Room left for clocks that disagree a little and for the time a
    /// cloud call takes to leave: a fifth of the lease.
    fn margin(&self) -> Duration {
        self.ttl / 5
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How often leases are renewed: every third of their length, so one
    /// late renewal does not lose them.
    pub fn renew_every(&self) -> Duration {
        self.ttl / 3
    }

    /// A renewal that began at `began` succeeded.
    pub fn renewed(&self, began: Instant) {
        let until = began + self.ttl - self.margin();
        let mut trusted = self
            .trusted_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if until > *trusted {
            *trusted = until;
        }
    }

    /// Whether the leases can be acted on now.
    pub fn is_trusted(&self) -> bool {
        let trusted = self
            .trusted_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Instant::now() < *trusted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_clock_is_trusted_and_renews_every_third_of_the_lease() {
        let clock = LeaseClock::new(Duration::from_secs(15));
        assert!(clock.is_trusted());
        assert_eq!(clock.renew_every(), Duration::from_secs(5));
    }

    #[test]
    fn a_clock_not_renewed_for_longer_than_the_lease_less_its_margin_runs_out() {
        let clock = LeaseClock::new(Duration::from_millis(50));
        std::thread::sleep(Duration::from_millis(45));
        assert!(!clock.is_trusted(), "40 ms of trust for a 50 ms lease");
        clock.renewed(Instant::now());
        assert!(clock.is_trusted());
    }

    #[test]
    fn an_older_renewal_finishing_late_never_shortens_the_trust() {
        let clock = LeaseClock::new(Duration::from_millis(500));
        let old = Instant::now();
        std::thread::sleep(Duration::from_millis(20));
        clock.renewed(Instant::now());
        let trusted = *clock.trusted_until.lock().unwrap();
        clock.renewed(old);
        assert_eq!(*clock.trusted_until.lock().unwrap(), trusted);
    }
}

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

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::domain::names::MachineId;

/// What a cloud call acts for: the leases that must be trusted for it to
/// be sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fence {
    /// Machines' launches or instances: each machine's lease.
    Machines(Vec<MachineId>),
    /// A cluster-wide job's work (stopping strays): the job's lease.
    Job(&'static str),
}

/// Which leases this controller holds, and whether they can still be
/// trusted.
#[derive(Debug)]
pub struct LeaseClock {
    ttl: Duration,
    state: Mutex<Held>,
}

#[derive(Debug)]
struct Held {
    /// Until when the last renewal's leases hold, less the margin.
    trusted_until: Instant,
    /// The machines held, with when each was last claimed.
    machines: HashMap<MachineId, Instant>,
    /// The jobs held.
    jobs: HashSet<String>,
}

impl LeaseClock {
    /// A clock for leases of `ttl`, trusted from now as if just renewed:
    /// leases claimed from here on run at least `ttl` from their claim.
    pub fn new(ttl: Duration) -> LeaseClock {
        let now = Instant::now();
        LeaseClock {
            ttl,
            state: Mutex::new(Held {
                trusted_until: now + ttl - ttl / 5,
                machines: HashMap::new(),
                jobs: HashSet::new(),
            }),
        }
    }

    fn held(&self) -> MutexGuard<'_, Held> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
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

    /// The store says these machines' leases were just claimed.
    pub fn claimed(&self, machines: &[MachineId]) {
        let now = Instant::now();
        let mut held = self.held();
        for id in machines {
            held.machines.insert(*id, now);
        }
    }

    /// A job's lease was taken or kept (`true`), or is another's.
    pub fn job(&self, job: &str, holds: bool) {
        let mut held = self.held();
        if holds {
            held.jobs.insert(job.to_string());
        } else {
            held.jobs.remove(job);
        }
    }

    /// Whether this controller holds job `job`'s lease, as last taken or
    /// renewed.
    pub fn holds_job(&self, job: &str) -> bool {
        self.held().jobs.contains(job)
    }

    /// A renewal that began at `began` kept `machines` and `jobs`: every
    /// other lease it did not keep is lost, unless it was claimed after
    /// the renewal began (the renewal could not speak for it).
    pub fn renewed(&self, began: Instant, machines: &HashSet<MachineId>, jobs: &[String]) {
        let until = began + self.ttl - self.margin();
        let mut held = self.held();
        if until > held.trusted_until {
            held.trusted_until = until;
        }
        held.machines
            .retain(|id, claimed| machines.contains(id) || *claimed >= began);
        for id in machines {
            held.machines.entry(*id).or_insert(began);
        }
        held.jobs = jobs.iter().cloned().collect();
    }

    /// Whether the leases can be acted on now at all.
    pub fn is_trusted(&self) -> bool {
        Instant::now() < self.held().trusted_until
    }

    /// Whether `fence`'s leases are held and can be trusted now.
    pub fn trusts(&self, fence: &Fence) -> bool {
        let held = self.held();
        if Instant::now() >= held.trusted_until {
            return false;
        }
        match fence {
            Fence::Machines(ids) => ids.iter().all(|id| held.machines.contains_key(id)),
            Fence::Job(job) => held.jobs.contains(*job),
        }
    }

    /// Whether machine `id`'s lease is held and can be trusted now.
    pub fn trusts_machine(&self, id: MachineId) -> bool {
        self.trusts(&Fence::Machines(vec![id]))
    }

    /// Forgets machine `id`'s lease (its actor stopped and let it go).
    pub fn released(&self, id: MachineId) {
        self.held().machines.remove(&id);
    }
}

/// Whether machine `id` is `me`'s to claim first among the live
/// controllers `peers` (rendezvous hashing: every controller computes the
/// same owner from the same list, and a controller joining or leaving
/// moves only its own share). With no other controller alive, every
/// machine is this one's.
pub fn is_mine(peers: &[String], me: &str, id: MachineId) -> bool {
    if peers.len() <= 1 {
        return true;
    }
    let machine = id.to_string();
    let weight = |peer: &str| {
        // FNV-1a over the peer and the machine (stable across processes),
        // then mixed (splitmix64's finalizer): FNV alone barely moves its
        // top bits for machines whose ids differ in the last digit, which
        // would hand out machines in runs of ten.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in peer.bytes().chain([b'/']).chain(machine.bytes()) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        hash = (hash ^ (hash >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        hash = (hash ^ (hash >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        hash ^ (hash >> 31)
    };
    peers
        .iter()
        .max_by_key(|peer| (weight(peer), peer.as_str()))
        .is_some_and(|owner| owner == me)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn each_machine_has_exactly_one_owner_and_the_shares_are_near_even() {
        let peers: Vec<String> = ["a-1-x", "b-2-y", "c-3-z"].map(String::from).to_vec();
        let mut shares = [0usize; 3];
        for n in 0..3000 {
            let owners: Vec<usize> = (0..3)
                .filter(|k| is_mine(&peers, &peers[*k], MachineId::new(n)))
                .collect();
            assert_eq!(owners.len(), 1, "machine {n}: {owners:?}");
            shares[owners[0]] += 1;
        }
        assert!(
            shares.iter().all(|s| (800..=1200).contains(s)),
            "{shares:?}"
        );
        // Even a short run of consecutive machines is shared out.
        let first_sixty: BTreeSet<usize> = (0..60)
            .map(|n| {
                (0..3)
                    .find(|k| is_mine(&peers, &peers[*k], MachineId::new(n)))
                    .unwrap()
            })
            .collect();
        assert_eq!(first_sixty.len(), 3);
        let runs = (1..60)
            .filter(|n| {
                let owner =
                    |n: u64| (0..3).find(|k| is_mine(&peers, &peers[*k], MachineId::new(n)));
                owner(*n) == owner(n - 1)
            })
            .count();
        assert!(runs < 35, "{runs} of 59 neighbours share an owner");
    }

    #[test]
    fn alone_every_machine_is_mine_and_a_leaving_peer_moves_only_its_share() {
        assert!(is_mine(&[], "a", MachineId::new(1)));
        assert!(is_mine(&["a".to_string()], "a", MachineId::new(1)));
        let three: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let two: Vec<String> = ["a", "b"].map(String::from).to_vec();
        for n in 0..500 {
            let id = MachineId::new(n);
            if is_mine(&three, "a", id) {
                assert!(is_mine(&two, "a", id), "machine {n} moved from a");
            }
        }
    }

    fn ids(n: &[u64]) -> Vec<MachineId> {
        n.iter().map(|n| MachineId::new(*n)).collect()
    }

    #[test]
    fn a_fresh_clock_is_trusted_but_holds_nothing_until_a_claim() {
        let clock = LeaseClock::new(Duration::from_secs(15));
        assert!(clock.is_trusted());
        assert_eq!(clock.renew_every(), Duration::from_secs(5));
        assert!(!clock.trusts_machine(MachineId::new(1)));
        clock.claimed(&ids(&[1, 2]));
        assert!(clock.trusts(&Fence::Machines(ids(&[1, 2]))));
        assert!(!clock.trusts(&Fence::Machines(ids(&[1, 3]))));
        assert!(!clock.trusts(&Fence::Job("reconcile")));
        clock.job("reconcile", true);
        assert!(clock.trusts(&Fence::Job("reconcile")));
        clock.job("reconcile", false);
        assert!(!clock.trusts(&Fence::Job("reconcile")));
    }

    #[test]
    fn a_clock_not_renewed_for_longer_than_the_lease_less_its_margin_trusts_nothing() {
        let clock = LeaseClock::new(Duration::from_millis(50));
        clock.claimed(&ids(&[1]));
        std::thread::sleep(Duration::from_millis(45));
        assert!(!clock.is_trusted(), "40 ms of trust for a 50 ms lease");
        assert!(!clock.trusts_machine(MachineId::new(1)));
        let kept: HashSet<MachineId> = ids(&[1]).into_iter().collect();
        clock.renewed(Instant::now(), &kept, &[]);
        assert!(clock.trusts_machine(MachineId::new(1)));
    }

    #[test]
    fn a_renewal_loses_what_it_did_not_keep_but_not_what_was_claimed_since_it_began() {
        let clock = LeaseClock::new(Duration::from_secs(15));
        clock.claimed(&ids(&[1, 2]));
        let began = Instant::now();
        std::thread::sleep(Duration::from_millis(2));
        clock.claimed(&ids(&[3]));
        let kept: HashSet<MachineId> = ids(&[1]).into_iter().collect();
        clock.renewed(began, &kept, &["reconcile".to_string()]);
        assert!(clock.trusts_machine(MachineId::new(1)));
        assert!(!clock.trusts_machine(MachineId::new(2)), "lost to another");
        assert!(clock.trusts_machine(MachineId::new(3)), "claimed after");
        assert!(clock.trusts(&Fence::Job("reconcile")));
        clock.released(MachineId::new(1));
        assert!(!clock.trusts_machine(MachineId::new(1)));
    }

    #[test]
    fn an_older_renewal_finishing_late_never_shortens_the_trust() {
        let clock = LeaseClock::new(Duration::from_millis(500));
        let old = Instant::now();
        std::thread::sleep(Duration::from_millis(20));
        clock.renewed(Instant::now(), &HashSet::new(), &[]);
        let trusted = clock.held().trusted_until;
        clock.renewed(old, &HashSet::new(), &[]);
        assert_eq!(clock.held().trusted_until, trusted);
    }
}

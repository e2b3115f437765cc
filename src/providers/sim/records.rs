//! The simulated cloud's records: an instance as the ledger keeps it, its
//! agent's state and tags, and the batches of changes the ledger commits.
//! Shared by the in-memory ledger and its file.

use std::collections::{BTreeMap, HashSet};
use std::hash::Hash;
use std::sync::Arc;

use serde::{Serialize, Serializer};

use crate::contracts::provider::tags;
use crate::contracts::secrets::Secret;
use crate::domain::hardware::Hardware;
use crate::domain::instance::{Instance, InstanceState};
use crate::domain::names::MachineId;
use crate::domain::words::word_enum;

word_enum! {
    /// Where an instance's simulated machine agent stands.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
    #[serde(rename_all = "kebab-case")]
    pub enum AgentState {
        /// No agent: an instance created behind berth's back.
        None => "none",
        /// The agent has not checked in yet.
        Waiting => "waiting",
        /// The controller accepted the agent's one-time password.
        Connected => "connected",
        /// The controller refused the agent every time it tried.
        Refused => "refused",
        /// The agent never checks in (a fault set on the cloud).
        Silent => "silent",
    }
}

/// An instance's tags, as a list sorted by key: instances carry a few,
/// and a map would allocate room for eleven for each of them. Keys and
/// values are shared strings, so that the instances a ledger holds share
/// the keys and the values they have in common (the controller's and the
/// model's) instead of each holding copies (`Tags::share_with`).
/// Serialized as a map.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tags(Vec<(Arc<str>, Arc<str>)>);

impl Tags {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*self.0[i].1)
    }

    /// Takes `other`'s copy of each key and value that is the same in
    /// both, so that the two hold one.
    pub(super) fn share_with(&mut self, other: &Tags) {
        let same = |mine: &mut Arc<str>, theirs: &Arc<str>| {
            if *mine == *theirs {
                *mine = Arc::clone(theirs);
            }
        };
        for (key, value) in &mut self.0 {
            if let Ok(i) = other.0.binary_search_by(|(k, _)| k.cmp(key)) {
                let (their_key, their_value) = &other.0[i];
                same(key, their_key);
                same(value, their_value);
            }
        }
    }
}

impl From<BTreeMap<String, String>> for Tags {
    fn from(map: BTreeMap<String, String>) -> Tags {
        // A map iterates in key order, so the list is sorted.
        Tags(
            map.into_iter()
                .map(|(k, v)| (Arc::from(k), Arc::from(v)))
                .collect(),
        )
    }
}

impl Serialize for Tags {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(k, v)| (&**k, &**v)))
    }
}

/// One instance as the simulated cloud records it. Its zone, instance
/// type and hardware are shared: a ledger keeps one copy of each value
/// for all the instances that have it (the ledger takes a record's copies
/// for its own as it takes the record in).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LedgerEntry {
    pub id: String,
    /// The machine named by the instance's `berth-machine` tag.
    pub machine: Option<MachineId>,
    pub tags: Tags,
    #[serde(serialize_with = "shared")]
    pub zone: Arc<str>,
    #[serde(serialize_with = "shared")]
    pub instance_type: Arc<str>,
    pub state: InstanceState,
    #[serde(serialize_with = "shared")]
    pub hardware: Arc<Hardware>,
    /// The launch's client token; `None` for an instance created behind
    /// berth's back.
    pub client_token: Option<String>,
    /// For a container: the instance it runs on.
    pub host_instance: Option<String>,
    /// Wall-clock milliseconds since the epoch.
    pub launched_at_ms: i64,
    pub agent: AgentState,
}

/// Serializes a shared value as the value itself.
fn shared<T: Serialize + ?Sized, S: Serializer>(
    value: &Arc<T>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    (**value).serialize(serializer)
}

/// The simulated cloud's addresses of instance `id`, from the
/// documentation ranges (RFC 5737's 192.0.2.0/24, RFC 3849's
/// 2001:db8::/32) and derived from the id (FNV-1a), so that they stay the
/// same across restarts: an IPv4 address (254 of them, shared at scale)
/// and an IPv6 address of its own.
pub fn addresses_of(id: &str) -> Vec<String> {
    let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    let host = hash % 254 + 1;
    let [a, b, c, d] = [48, 32, 16, 0].map(|shift| (hash >> shift) as u16);
    let v6 = std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 0, a, b, c, d);
    vec![format!("192.0.2.{host}"), v6.to_string()]
}

impl LedgerEntry {
    pub fn instance(&self) -> Instance {
        Instance {
            id: self.id.clone(),
            machine: self.machine,
            zone: self.zone.to_string(),
            instance_type: self.instance_type.to_string(),
            state: self.state,
            hardware: Hardware::clone(&self.hardware),
            addresses: addresses_of(&self.id),
        }
    }
}

/// The machine a set of tags names, if any.
pub(super) fn tagged_machine(tags: &Tags) -> Option<MachineId> {
    tags.get(tags::MACHINE).and_then(|m| m.parse().ok())
}

/// One copy of each zone, instance type and hardware that records hold.
/// There are few of them (a zone's instances of one type mostly have the
/// same hardware), and a million records each holding its own took
/// 128 MB more. Records read back are made with the kept copies, and a
/// ledger makes every record it takes in (a launch's too) hold its own.
#[derive(Default)]
pub(super) struct Values {
    names: HashSet<Arc<str>>,
    hardware: HashSet<Arc<Hardware>>,
}

impl Values {
    /// The kept copy of a zone's or an instance type's `name`.
    pub fn name(&mut self, name: &str) -> Arc<str> {
        kept_copy(&mut self.names, name, || Arc::from(name))
    }

    /// The kept copy of `hardware`.
    pub fn hardware(&mut self, hardware: Hardware) -> Arc<Hardware> {
        kept_copy(&mut self.hardware, &hardware, || Arc::new(hardware.clone()))
    }

    /// Makes `record` hold the kept copy of each of its shared values,
    /// keeping its own where there is none yet.
    pub fn share(&mut self, record: &mut Record) {
        let entry = &mut record.entry;
        take_kept(&mut self.names, &mut entry.zone);
        take_kept(&mut self.names, &mut entry.instance_type);
        take_kept(&mut self.hardware, &mut entry.hardware);
    }
}

/// The copy of `value` in `kept`, or a new one `make` makes, kept there.
fn kept_copy<T: Eq + Hash + ?Sized>(
    kept: &mut HashSet<Arc<T>>,
    value: &T,
    make: impl FnOnce() -> Arc<T>,
) -> Arc<T> {
    if let Some(copy) = kept.get(value) {
        return Arc::clone(copy);
    }
    let copy = make();
    kept.insert(Arc::clone(&copy));
    copy
}

/// Replaces `value` by the copy of it in `kept`, or keeps it there.
fn take_kept<T: Eq + Hash + ?Sized>(kept: &mut HashSet<Arc<T>>, value: &mut Arc<T>) {
    let copy = kept_copy(kept, value, || Arc::clone(value));
    *value = copy;
}

/// A ledger entry with what only the cloud itself sees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Record {
    /// Launch order; the ledger lists instances in it.
    pub seq: u64,
    pub entry: LedgerEntry,
    /// The machine the agent checks in as (the launch request's machine,
    /// which is what the instance's user data would carry).
    pub agent_machine: Option<MachineId>,
    /// The agent's one-time password, kept as a cloud keeps user data, so
    /// that the agent still checks in after a controller restart.
    pub password: Option<Secret>,
    /// When the state last changed (ms since the epoch); later reports of
    /// the same instance always carry a later time.
    pub changed_at_ms: i64,
}

impl Record {
    /// Whether the instance takes a place in its zone's capacity.
    pub(super) fn holds_capacity(&self) -> bool {
        self.entry.host_instance.is_none() && !self.entry.state.is_gone()
    }
}

/// A change to one recorded instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Change {
    pub seq: u64,
    pub state: InstanceState,
    pub agent: AgentState,
    pub changed_at_ms: i64,
}

/// The generator's position, stored with every launch so that a reopened
/// cloud goes on where it stopped instead of repeating ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RngPosition {
    pub seed: u64,
    pub word_pos: u128,
}

/// One transaction's worth of writes.
#[derive(Debug, Default)]
pub(super) struct Batch {
    pub inserts: Vec<Record>,
    pub changes: Vec<Change>,
    pub rng: Option<RngPosition>,
}

impl Batch {
    pub fn is_empty(&self) -> bool {
        self.inserts.is_empty() && self.changes.is_empty() && self.rng.is_none()
    }
}

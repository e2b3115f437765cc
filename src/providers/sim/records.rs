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

/// An instance's tags: its keys in order, each with the value it has in
/// common with the records around it or a value of its own. Serialized as
/// a map.
///
/// A ledger's instances carry the same few keys, and most values are the
/// same from one launch to the next (the controller's, the model's), so
/// the keys and those values are a shape records share
/// (`Tags::share_with`); what is a record's own (its machine, its name) is
/// one string of netstrings (`6:123456`). A million records held each its
/// own list of four pairs of shared strings and two strings of its own,
/// 208 bytes of heap, where one string of its own values takes 48.
#[derive(Clone, Default)]
pub struct Tags {
    shape: TagShape,
    /// The values of the keys the shape does not give, in key order, each
    /// written as a netstring (`<length>:<value>`).
    own: Box<str>,
}

/// The keys of a set of tags in order, each with the value every record
/// of the shape has (`Some`) or `None` where each has its own.
type TagShape = Arc<[(Arc<str>, Option<Arc<str>>)]>;

impl Tags {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// The tags in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries().map(|(key, _, value)| (&**key, value))
    }

    /// Each key in order, with the value the shape gives it (if it gives
    /// one) and its value.
    fn entries(&self) -> impl Iterator<Item = (&Arc<str>, Option<&Arc<str>>, &str)> {
        let mut own = OwnValues(&self.own);
        self.shape.iter().map(move |(key, common)| {
            let value = match common {
                Some(value) => &**value,
                None => own.next().unwrap_or_default(),
            };
            (key, common.as_ref(), value)
        })
    }

    /// Shares with `other` (the record before) what the two have in
    /// common: its shape, when the values it gives are this record's and
    /// no other value is the same in both; otherwise a shape of their own
    /// that gives each value that is the same in both (`other`'s copy).
    pub(super) fn share_with(&mut self, other: &Tags) {
        if Arc::ptr_eq(&self.shape, &other.shape) {
            return;
        }
        let fits = other.gives_what_it_has_in_common_with(self);
        if self.gives_what_it_has_in_common_with(other) {
            // Its own values stay as they are (records read back share
            // before the ledger takes them in, and the first of a run
            // gives nothing to share); it takes `other`'s shape when that
            // gives the same.
            if fits {
                self.shape = Arc::clone(&other.shape);
            }
            return;
        }
        let shape = if fits {
            Arc::clone(&other.shape)
        } else {
            self.shape_in_common_with(other)
        };
        let own = own_values(
            self.iter()
                .zip(shape.iter())
                .filter(|(_, (_, common))| common.is_none())
                .map(|((_, value), _)| value),
        );
        *self = Tags { shape, own };
    }

    /// Whether these tags' shape gives the values they have in common
    /// with `other`, the same keys in the same order, and only those.
    fn gives_what_it_has_in_common_with(&self, other: &Tags) -> bool {
        self.shape.len() == other.shape.len()
            && self.entries().zip(other.iter()).all(
                |((key, common, value), (their_key, their_value))| {
                    // A value the shape gives is the same; one it does
                    // not give differs, or sharing it would save more.
                    &**key == their_key && common.is_some() == (value == their_value)
                },
            )
    }

    /// A shape of these tags' keys that gives each value that is the same
    /// in `other` (`other`'s copy).
    fn shape_in_common_with(&self, other: &Tags) -> TagShape {
        let shape: Vec<(Arc<str>, Option<Arc<str>>)> = self
            .iter()
            .map(|(key, value)| {
                match other.entries().find(|(their_key, ..)| &***their_key == key) {
                    Some((their_key, common, their_value)) => {
                        let common = (value == their_value)
                            .then(|| common.cloned().unwrap_or_else(|| Arc::from(value)));
                        (Arc::clone(their_key), common)
                    }
                    None => (Arc::from(key), None),
                }
            })
            .collect();
        Arc::from(shape)
    }
}

/// `values` as one string of netstrings.
fn own_values<'v>(values: impl Iterator<Item = &'v str>) -> Box<str> {
    let mut own = String::new();
    for value in values {
        own.push_str(&value.len().to_string());
        own.push(':');
        own.push_str(value);
    }
    own.into_boxed_str()
}

/// The values in a string of netstrings, in order.
struct OwnValues<'t>(&'t str);

impl<'t> Iterator for OwnValues<'t> {
    type Item = &'t str;

    fn next(&mut self) -> Option<&'t str> {
        let (length, rest) = self.0.split_once(':')?;
        let length: usize = length.parse().ok()?;
        let value = rest.get(..length)?;
        self.0 = &rest[length..];
        Some(value)
    }
}

impl PartialEq for Tags {
    fn eq(&self, other: &Tags) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for Tags {}

impl std::fmt::Debug for Tags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl From<BTreeMap<String, String>> for Tags {
    fn from(map: BTreeMap<String, String>) -> Tags {
        // A map iterates in key order, so the keys are sorted.
        let own = own_values(map.values().map(String::as_str));
        let shape: Vec<(Arc<str>, Option<Arc<str>>)> =
            map.into_keys().map(|key| (Arc::from(key), None)).collect();
        Tags {
            shape: Arc::from(shape),
            own,
        }
    }
}

impl Serialize for Tags {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
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

/// Asserts that the tags of four records in a row, the first three of one
/// model and the last of another, each of its own machine, share what a
/// run of launches shares: from the second on, one copy of the
/// controller's tag, and of the model's while it stays the same; never the
/// machine's.
#[cfg(test)]
pub(super) fn assert_shared_as_a_run(tags: [&Tags; 4]) {
    let shared =
        |a: &Tags, b: &Tags, key: &str| std::ptr::eq(a.get(key).unwrap(), b.get(key).unwrap());
    assert!(shared(tags[1], tags[2], "berth-controller"));
    assert!(shared(tags[2], tags[3], "berth-controller"));
    assert!(shared(tags[1], tags[2], "berth-model"));
    assert!(!shared(tags[2], tags[3], "berth-model"));
    assert!(!shared(tags[1], tags[2], "berth-machine"));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(pairs: &[(&str, &str)]) -> Tags {
        Tags::from(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        )
    }

    fn launch(machine: &str) -> Tags {
        tags(&[
            ("Name", &format!("berth-m-machine-{machine}")),
            ("berth-controller", "c-1"),
            ("berth-machine", machine),
            ("berth-model", "m-1"),
        ])
    }

    #[test]
    fn a_record_in_a_run_holds_only_its_own_values() {
        let first = launch("0");
        let mut second = launch("1");
        second.share_with(&first);
        let mut third = launch("22");
        third.share_with(&second);
        // The second finds what it has in common with the first; the
        // third takes the second's shape as it is.
        assert!(Arc::ptr_eq(&second.shape, &third.shape));
        assert_eq!(&*third.own, "18:berth-m-machine-222:22");
        assert_eq!(third, launch("22"));
        assert_eq!(third.get("berth-controller"), Some("c-1"));
        assert_eq!(third.get("berth-machine"), Some("22"));
        assert_eq!(third.get("Name"), Some("berth-m-machine-22"));
        assert_eq!(third.get("nothing"), None);
        assert_eq!(
            serde_json::to_string(&third).unwrap(),
            r#"{"Name":"berth-m-machine-22","berth-controller":"c-1","berth-machine":"22","berth-model":"m-1"}"#
        );
    }

    #[test]
    fn a_record_shaped_alike_takes_the_shape_and_keeps_its_own_values() {
        // Two runs shaped alike (as a ledger read back, then taken in).
        let (first, mut second) = (launch("0"), launch("1"));
        second.share_with(&first);
        let (other_first, mut other_second) = (launch("0"), launch("1"));
        other_second.share_with(&other_first);
        let mut third = launch("2");
        third.share_with(&other_second);
        let own = third.own.as_ptr();
        third.share_with(&second);
        assert!(Arc::ptr_eq(&third.shape, &second.shape));
        assert_eq!(
            third.own.as_ptr(),
            own,
            "its own values are not copied again"
        );
        assert_eq!(third, launch("2"));
    }

    #[test]
    fn a_record_whose_shape_gives_what_is_common_keeps_it() {
        // The second of a run, shared once, is shared again with the
        // first (whose shape gives nothing): nothing is made anew.
        let first = launch("0");
        let mut second = launch("1");
        second.share_with(&first);
        let (shape, own) = (Arc::clone(&second.shape), second.own.as_ptr());
        second.share_with(&first);
        assert!(Arc::ptr_eq(&second.shape, &shape));
        assert_eq!(second.own.as_ptr(), own);
        assert_eq!(second, launch("1"));
    }

    #[test]
    fn a_record_that_differs_from_the_shape_gets_a_shape_of_its_own() {
        let first = launch("0");
        let mut second = launch("1");
        second.share_with(&first);
        // Another model: the controller is still shared, the model not.
        let mut other_model = tags(&[
            ("Name", "berth-m-machine-2"),
            ("berth-controller", "c-1"),
            ("berth-machine", "2"),
            ("berth-model", "m-2"),
        ]);
        let before = other_model.clone();
        other_model.share_with(&second);
        assert!(!Arc::ptr_eq(&other_model.shape, &second.shape));
        assert_eq!(other_model, before);
        assert!(std::ptr::eq(
            other_model.get("berth-controller").unwrap(),
            second.get("berth-controller").unwrap()
        ));
        // Other keys altogether: nothing in common, and nothing lost.
        let mut stray = tags(&[("owner", "someone")]);
        stray.share_with(&second);
        assert_eq!(stray, tags(&[("owner", "someone")]));
        // A value that was the record's own and is now the same as the
        // one before is shared from then on.
        let mut same_name = launch("1");
        same_name.share_with(&second);
        assert_eq!(same_name, launch("1"));
        assert_eq!(&*same_name.own, "");
    }

    #[test]
    fn values_with_colons_digits_or_nothing_read_back_as_they_were() {
        let odd = [
            ("a", ""),
            ("b", "12:34"),
            ("c", "3:x"),
            ("d", "ünïcode ✓"),
            ("e", ":"),
        ];
        let read = tags(&odd);
        assert_eq!(read.iter().collect::<Vec<_>>(), odd);
        let mut shared = tags(&odd);
        shared.share_with(&tags(&[("a", ""), ("b", "other"), ("c", "3:x")]));
        assert_eq!(shared.iter().collect::<Vec<_>>(), odd);
        assert_eq!(Tags::default().iter().count(), 0);
        assert_eq!(Tags::default(), tags(&[]));
    }
}

//! The simulated cloud's ledger: every instance it ever started, indexed in
//! memory and, when the cloud has a ledger file or a shared ledger,
//! mirrored there.
//!
//! # Guarantees
//!
//! Every change goes through [`Ledger::commit`], which writes the file or
//! the shared ledger first (one transaction) and touches the in-memory
//! index only when that transaction committed. So the index never holds
//! what was not written, and a failed write changes nothing. A shared
//! ledger's index also takes in what other clouds wrote
//! ([`Ledger::absorb`]).

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;

use hashbrown::HashTable;

use crate::providers::sim::chunked::Chunked;
use crate::providers::sim::file::LedgerFile;
use crate::providers::sim::records::{AgentState, Batch, Change, Record, Values};
use crate::providers::sim::shared::SharedLedger;

/// Where the ledger is kept besides memory.
pub(super) enum Backing {
    Memory,
    File(LedgerFile),
    Shared(SharedLedger),
}

/// Records found by a key they hold (an instance id, a client token): a
/// table of positions in the ledger's records, hashed by the key, so that
/// a million keys are not held twice.
struct KeyIndex {
    positions: HashTable<usize>,
    key: fn(&Record) -> Option<&str>,
}

impl KeyIndex {
    fn new(key: fn(&Record) -> Option<&str>, capacity: usize) -> KeyIndex {
        KeyIndex {
            positions: HashTable::with_capacity(capacity),
            key,
        }
    }

    /// Where the record with `key` is among `records`.
    fn find(&self, records: &Chunked<Record>, hashes: &RandomState, key: &str) -> Option<usize> {
        let holds = holding(records, self.key, key);
        self.positions.find(hashes.hash_one(key), holds).copied()
    }

    /// Indexes the record at `at` of `records` by its key, if it has one
    /// (in place of another record with the same key).
    fn insert(&mut self, records: &Chunked<Record>, hashes: &RandomState, at: usize) {
        let Some(key) = records.get(at).and_then(self.key) else {
            return;
        };
        let key_of = self.key;
        let hash = hashes.hash_one(key);
        match self.positions.find_mut(hash, holding(records, key_of, key)) {
            Some(position) => *position = at,
            None => {
                let rehash = |&other: &usize| {
                    hashes.hash_one(records.get(other).and_then(key_of).unwrap_or_default())
                };
                self.positions.insert_unique(hash, at, rehash);
            }
        }
    }

    /// Indexes every one of `records` again, after positions moved.
    fn rebuild(&mut self, records: &Chunked<Record>, hashes: &RandomState) {
        self.positions.clear();
        for at in 0..records.len() {
            self.insert(records, hashes, at);
        }
    }
}

/// Whether the record at a position among `records` holds `key` (by
/// `key_of`).
fn holding<'r>(
    records: &'r Chunked<Record>,
    key_of: fn(&Record) -> Option<&str>,
    key: &'r str,
) -> impl Fn(&usize) -> bool + 'r {
    move |&at| records.get(at).and_then(key_of) == Some(key)
}

/// Lets go of the one-time password of an agent that has connected: it is
/// spent (the file keeps it, as a cloud keeps user data), and a million of
/// them are 64 MB.
fn forget_spent_password(record: &mut Record) {
    if record.entry.agent == AgentState::Connected {
        record.password = None;
    }
}

/// The in-memory index, and the file behind it.
pub(super) struct Ledger {
    /// Every record, in `seq` order (records are never removed, and each
    /// new one has the next `seq`): in chunks, so that a new record never
    /// moves the million before it.
    by_seq: Chunked<Record>,
    /// Instance id to record.
    ids: KeyIndex,
    /// Client token to record, for idempotent launches.
    tokens: KeyIndex,
    hashes: RandomState,
    /// Live, non-container instances per zone, for capacity.
    live_in_zone: HashMap<Arc<str>, usize>,
    values: Values,
    /// Each host's containers (`seq`s), ever made; their count numbers
    /// the next one.
    containers: HashMap<String, Vec<u64>>,
    next_seq: u64,
    backing: Backing,
}

impl Ledger {
    /// A ledger holding `records` (read back from `backing`, in any
    /// order; of records with the same `seq`, the last is kept).
    pub fn new(mut records: Vec<Record>, backing: Backing) -> Ledger {
        // In launch order, each indexed where it lies: the list read
        // becomes the ledger's, so that a million records are not moved
        // into a second list while the first is still held. A file is
        // read in launch order and is not sorted again (a stable sort
        // takes a buffer of half the list, 120 MB of a million records);
        // a shared ledger is read in the order of its rows' last changes.
        if !records.is_sorted_by_key(|r| r.seq) {
            records.sort_by_key(|r| r.seq);
        }
        records.dedup_by(|later, kept| {
            let same = later.seq == kept.seq;
            if same {
                std::mem::swap(later, kept);
            }
            same
        });
        // Sized for what is read back, so that a million records are not
        // hashed again each time a map doubles.
        let tokens = records
            .iter()
            .filter(|r| r.entry.client_token.is_some())
            .count();
        let mut ledger = Ledger {
            ids: KeyIndex::new(|r| Some(&r.entry.id), records.len()),
            tokens: KeyIndex::new(|r| r.entry.client_token.as_deref(), tokens),
            by_seq: Chunked::from_vec(records),
            hashes: RandomState::new(),
            live_in_zone: HashMap::new(),
            values: Values::default(),
            containers: HashMap::new(),
            next_seq: 0,
            backing,
        };
        for at in 0..ledger.by_seq.len() {
            ledger.take_in(at);
        }
        ledger
    }

    /// An instance id or client token that two records hold, if any. The
    /// cloud never makes two, and its ledger file keeps no index of its
    /// own that would refuse them, so a file read back is checked here.
    pub fn key_held_twice(&self) -> Option<String> {
        let with_tokens = self
            .by_seq
            .iter()
            .filter(|r| r.entry.client_token.is_some())
            .count();
        if self.ids.positions.len() == self.by_seq.len()
            && self.tokens.positions.len() == with_tokens
        {
            return None;
        }
        let mut ids = HashSet::new();
        let mut tokens = HashSet::new();
        self.by_seq.iter().find_map(|r| {
            if !ids.insert(r.entry.id.as_str()) {
                return Some(format!(
                    "instance id {} is held by two instances",
                    r.entry.id
                ));
            }
            let token = r.entry.client_token.as_deref()?;
            (!tokens.insert(token))
                .then(|| format!("client token {token} is held by two instances"))
        })
    }

    pub fn get(&self, id: &str) -> Option<&Record> {
        let at = self.ids.find(&self.by_seq, &self.hashes, id)?;
        self.by_seq.get(at)
    }

    pub fn by_token(&self, token: &str) -> Option<&Record> {
        let at = self.tokens.find(&self.by_seq, &self.hashes, token)?;
        self.by_seq.get(at)
    }

    fn position(&self, seq: u64) -> Option<usize> {
        let at = self.by_seq.partition_point(|r| r.seq < seq);
        self.by_seq.get(at).filter(|r| r.seq == seq).map(|_| at)
    }

    fn at(&self, seq: u64) -> Option<&Record> {
        self.position(seq).map(|i| &self.by_seq[i])
    }

    pub fn contains_id(&self, id: &str) -> bool {
        self.get(id).is_some()
    }

    pub fn live_in_zone(&self, zone: &str) -> usize {
        self.live_in_zone.get(zone).copied().unwrap_or(0)
    }

    pub fn containers_made(&self, host: &str) -> u64 {
        self.containers.get(host).map_or(0, |c| c.len() as u64)
    }

    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Every record, in launch order.
    pub fn records(&self) -> impl Iterator<Item = &Record> {
        self.by_seq.iter()
    }

    /// The live containers on `host`.
    pub fn containers_on<'a>(&'a self, host: &str) -> impl Iterator<Item = &'a Record> + 'a {
        self.containers
            .get(host)
            .into_iter()
            .flatten()
            .filter_map(|&seq| self.at(seq))
            .filter(|r| !r.entry.state.is_gone())
    }

    /// Writes `batch` to the file in one transaction, then to the index.
    ///
    /// # Errors
    ///
    /// The file's error, in which case nothing changed.
    pub fn commit(&mut self, batch: Batch) -> Result<(), String> {
        if batch.is_empty() {
            return Ok(());
        }
        match &mut self.backing {
            Backing::Memory => {}
            Backing::File(file) => file.write(&batch).map_err(|e| e.to_string())?,
            Backing::Shared(shared) => shared.write(&batch)?,
        }
        for record in batch.inserts {
            self.insert(record);
        }
        for change in batch.changes {
            self.apply(&change);
        }
        Ok(())
    }

    /// The shared ledger, if this is one.
    pub fn shared(&mut self) -> Option<&mut SharedLedger> {
        match &mut self.backing {
            Backing::Shared(shared) => Some(shared),
            _ => None,
        }
    }

    /// Takes in records another cloud wrote or changed: new ones are
    /// added, known ones take the state, agent and time they have now.
    pub fn absorb(&mut self, records: Vec<Record>) {
        let mut new = Vec::new();
        for record in records {
            if self.position(record.seq).is_some() {
                self.apply(&Change {
                    seq: record.seq,
                    state: record.entry.state,
                    agent: record.entry.agent,
                    changed_at_ms: record.changed_at_ms,
                });
            } else {
                new.push(record);
            }
        }
        // Read in the order of their last changes: added in launch order.
        new.sort_by_key(|r| r.seq);
        for record in new {
            self.insert(record);
        }
    }

    fn insert(&mut self, record: Record) {
        let seq = record.seq;
        match self.by_seq.last() {
            Some(last) if last.seq >= seq => {
                // Out of order (not how launches are made): keep the order,
                // and index again the records that moved.
                let i = self.by_seq.partition_point(|r| r.seq < seq);
                if self.by_seq.get(i).is_some_and(|r| r.seq == seq) {
                    self.by_seq[i] = record;
                } else {
                    self.by_seq.insert(i, record);
                }
                self.take_in_place(i);
                self.ids.rebuild(&self.by_seq, &self.hashes);
                self.tokens.rebuild(&self.by_seq, &self.hashes);
            }
            _ => {
                self.by_seq.push(record);
                self.take_in(self.by_seq.len() - 1);
            }
        }
    }

    /// Takes in the record at `at`, the last of those indexed so far:
    /// indexes it by id and token, and counts it.
    fn take_in(&mut self, at: usize) {
        self.take_in_place(at);
        self.ids.insert(&self.by_seq, &self.hashes, at);
        self.tokens.insert(&self.by_seq, &self.hashes, at);
    }

    /// What taking in the record at `at` does besides indexing it: lets go
    /// of a spent password, shares tags with the record before it and
    /// values with every record, and counts it by host and zone.
    fn take_in_place(&mut self, at: usize) {
        let Some((last, record)) = self.by_seq.with_previous_mut(at) else {
            return;
        };
        forget_spent_password(record);
        self.values.share(record);
        // Launches in a row carry the same controller's and model's tags:
        // one copy of them serves all.
        if let Some(last) = last {
            record.entry.tags.share_with(&last.entry.tags);
        }
        let record = &*record;
        self.next_seq = self.next_seq.max(record.seq + 1);
        if let Some(host) = &record.entry.host_instance {
            self.containers
                .entry(host.clone())
                .or_default()
                .push(record.seq);
        }
        if record.holds_capacity() {
            *self
                .live_in_zone
                .entry(record.entry.zone.clone())
                .or_insert(0) += 1;
        }
    }

    fn apply(&mut self, change: &Change) {
        let Some(i) = self.position(change.seq) else {
            return;
        };
        let record = &mut self.by_seq[i];
        let held = record.holds_capacity();
        record.entry.state = change.state;
        record.entry.agent = change.agent;
        record.changed_at_ms = change.changed_at_ms;
        forget_spent_password(record);
        if held && !record.holds_capacity() {
            if let Some(live) = self.live_in_zone.get_mut(&record.entry.zone) {
                *live = live.saturating_sub(1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contracts::secrets::Secret;
    use crate::domain::hardware::Hardware;
    use crate::domain::instance::InstanceState;
    use std::collections::BTreeMap;

    use crate::providers::sim::records::{
        assert_shared_as_a_run, tagged_machine, AgentState, LedgerEntry, Tags,
    };

    fn record(seq: u64, id: &str, zone: &str, host: Option<&str>) -> Record {
        Record {
            seq,
            entry: LedgerEntry {
                id: id.into(),
                machine: None,
                tags: Tags::default(),
                zone: zone.into(),
                instance_type: "t3.micro".into(),
                state: InstanceState::Pending,
                hardware: Arc::new(Hardware::default()),
                client_token: Some(format!("token-{id}")),
                host_instance: host.map(String::from),
                launched_at_ms: 0,
                agent: AgentState::Waiting,
            },
            agent_machine: None,
            password: None,
            changed_at_ms: 0,
        }
    }

    #[test]
    fn records_hold_one_copy_of_each_zone_instance_type_and_hardware() {
        // Each record is made with copies of its own, read back and
        // launched alike.
        let read = (0..3)
            .map(|seq| record(seq, &format!("i-{seq}"), "a", None))
            .collect();
        let mut ledger = Ledger::new(read, Backing::Memory);
        let launched = vec![record(3, "i-3", "a", None), record(4, "i-4", "b", None)];
        ledger
            .commit(Batch {
                inserts: launched,
                ..Batch::default()
            })
            .unwrap();
        let records: Vec<&LedgerEntry> = ledger.records().map(|r| &r.entry).collect();
        let first = records[0];
        for entry in &records[1..4] {
            assert!(Arc::ptr_eq(&entry.zone, &first.zone), "{}", entry.id);
            assert!(Arc::ptr_eq(&entry.instance_type, &first.instance_type));
            assert!(Arc::ptr_eq(&entry.hardware, &first.hardware));
        }
        let other_zone = records[4];
        assert_eq!(&*other_zone.zone, "b");
        assert!(Arc::ptr_eq(&other_zone.instance_type, &first.instance_type));
        assert_eq!(ledger.live_in_zone("a"), 4);
        assert_eq!(ledger.live_in_zone("b"), 1);
    }

    #[test]
    fn of_records_read_back_with_the_same_seq_the_last_is_kept() {
        let ledger = Ledger::new(
            vec![
                record(1, "i-1a", "a", None),
                record(0, "i-0", "a", None),
                record(1, "i-1b", "b", None),
            ],
            Backing::Memory,
        );
        let ids: Vec<&str> = ledger.records().map(|r| r.entry.id.as_str()).collect();
        assert_eq!(ids, ["i-0", "i-1b"]);
        assert!(ledger.get("i-1a").is_none());
        assert_eq!(ledger.get("i-1b").map(|r| r.seq), Some(1));
        assert_eq!(ledger.by_token("token-i-1b").map(|r| r.seq), Some(1));
        assert_eq!(ledger.live_in_zone("a"), 1);
        assert_eq!(ledger.live_in_zone("b"), 1);
        assert_eq!(ledger.next_seq(), 2);
    }

    #[test]
    fn records_read_back_out_of_order_are_kept_in_launch_order() {
        let ledger = Ledger::new(
            vec![
                record(2, "i-3", "a", None),
                record(0, "i-1", "a", None),
                record(1, "i-2", "b", None),
            ],
            Backing::Memory,
        );
        let ids: Vec<&str> = ledger.records().map(|r| r.entry.id.as_str()).collect();
        assert_eq!(ids, vec!["i-1", "i-2", "i-3"]);
        assert_eq!(ledger.get("i-3").map(|r| r.seq), Some(2));
        assert_eq!(ledger.get("i-4").map(|r| r.seq), None);
        assert_eq!(ledger.next_seq(), 3);
    }

    #[test]
    fn an_id_or_token_held_by_two_records_is_named() {
        let distinct = |n: u64| -> Vec<Record> {
            (0..n)
                .map(|seq| record(seq, &format!("i-{seq}"), "a", None))
                .collect()
        };
        assert_eq!(
            Ledger::new(distinct(100), Backing::Memory).key_held_twice(),
            None
        );
        let mut untokened = distinct(100);
        for r in &mut untokened {
            r.entry.client_token = None;
        }
        assert_eq!(
            Ledger::new(untokened, Backing::Memory).key_held_twice(),
            None
        );

        let mut same_id = distinct(100);
        same_id[57].entry.id = "i-12".into();
        assert_eq!(
            Ledger::new(same_id, Backing::Memory).key_held_twice(),
            Some("instance id i-12 is held by two instances".to_string())
        );
        let mut same_token = distinct(100);
        same_token[80].entry.client_token = Some("token-i-3".into());
        assert_eq!(
            Ledger::new(same_token, Backing::Memory).key_held_twice(),
            Some("client token token-i-3 is held by two instances".to_string())
        );
    }

    #[test]
    fn records_are_found_by_id_and_token_however_they_arrive() {
        let n = 1000_u64;
        // Read back in a scrambled order (as a shared ledger's rows come,
        // by their last change), then more taken in out of order.
        let scrambled = (0..n).map(|k| (k * 7919) % n).filter(|seq| seq % 10 != 3);
        let mut ledger = Ledger::new(
            scrambled
                .map(|seq| record(seq, &format!("i-{seq}"), "a", None))
                .collect(),
            Backing::Memory,
        );
        ledger.absorb(
            (0..n)
                .rev()
                .filter(|seq| seq % 10 == 3)
                .map(|seq| record(seq, &format!("i-{seq}"), "a", None))
                .collect(),
        );
        for seq in 0..n {
            let id = format!("i-{seq}");
            assert_eq!(ledger.get(&id).map(|r| r.seq), Some(seq), "{id}");
            assert!(ledger.contains_id(&id));
            let token = format!("token-{id}");
            assert_eq!(ledger.by_token(&token).map(|r| r.seq), Some(seq), "{token}");
        }
        assert!(ledger.get(&format!("i-{n}")).is_none());
        assert!(ledger.by_token("i-1").is_none());
        let seqs: Vec<u64> = ledger.records().map(|r| r.seq).collect();
        assert_eq!(seqs, (0..n).collect::<Vec<_>>());
    }

    #[test]
    fn a_connected_agents_password_is_let_go_and_a_waiting_ones_kept() {
        let with_password = |seq: u64, agent: AgentState| {
            let mut r = record(seq, &format!("i-{seq}"), "a", None);
            r.entry.agent = agent;
            r.password = Some(Secret::new(format!("password-{seq}")));
            r
        };
        let mut ledger = Ledger::new(
            vec![
                with_password(0, AgentState::Waiting),
                with_password(1, AgentState::Connected),
                with_password(2, AgentState::Waiting),
            ],
            Backing::Memory,
        );
        let has_password = |ledger: &Ledger, id: &str| ledger.get(id).unwrap().password.is_some();
        assert!(has_password(&ledger, "i-0"));
        assert!(!has_password(&ledger, "i-1"));
        ledger
            .commit(Batch {
                changes: vec![Change {
                    seq: 0,
                    state: InstanceState::Running,
                    agent: AgentState::Connected,
                    changed_at_ms: 5,
                }],
                ..Batch::default()
            })
            .unwrap();
        assert!(!has_password(&ledger, "i-0"));
        assert!(has_password(&ledger, "i-2"));
    }

    #[test]
    fn tags_are_found_by_key_and_serialized_as_a_map() {
        let tags = Tags::from(BTreeMap::from([
            ("juju-model".to_string(), "m".to_string()),
            ("berth-machine".to_string(), "4".to_string()),
        ]));
        assert_eq!(tags.get("berth-machine"), Some("4"));
        assert_eq!(tags.get("juju-model"), Some("m"));
        assert_eq!(tags.get("name"), None);
        assert_eq!(tagged_machine(&tags), "4".parse().ok());
        assert_eq!(
            serde_json::to_string(&tags).unwrap(),
            r#"{"berth-machine":"4","juju-model":"m"}"#
        );
        assert_eq!(Tags::default().get("berth-machine"), None);
    }

    #[test]
    fn records_in_a_row_share_the_tags_they_have_in_common() {
        let tagged = |seq: u64, machine: &str, model: &str| {
            let mut r = record(seq, &format!("i-{seq}"), "a", None);
            r.entry.tags = Tags::from(BTreeMap::from([
                ("berth-controller".to_string(), "c-1".to_string()),
                ("berth-machine".to_string(), machine.to_string()),
                ("berth-model".to_string(), model.to_string()),
            ]));
            r
        };
        let ledger = Ledger::new(
            vec![
                tagged(0, "0", "m-1"),
                tagged(1, "1", "m-1"),
                tagged(2, "2", "m-1"),
                tagged(3, "3", "m-2"),
            ],
            Backing::Memory,
        );
        let tags: Vec<&Tags> = ledger.records().map(|r| &r.entry.tags).collect();
        // The first of a run keeps its own copies; from the second on,
        // one copy of what they have in common serves all.
        assert_shared_as_a_run(std::array::from_fn(|i| tags[i]));
        // What each says is its own.
        let read: Vec<(Option<&str>, Option<&str>)> = tags
            .iter()
            .map(|t| (t.get("berth-machine"), t.get("berth-model")))
            .collect();
        assert_eq!(
            read,
            [
                (Some("0"), Some("m-1")),
                (Some("1"), Some("m-1")),
                (Some("2"), Some("m-1")),
                (Some("3"), Some("m-2"))
            ]
        );
    }

    #[test]
    fn agent_and_instance_states_read_back_what_they_print() {
        for a in AgentState::ALL {
            assert_eq!(AgentState::parse(a.as_str()), Some(a));
        }
        for s in InstanceState::ALL {
            assert_eq!(InstanceState::parse(s.as_str()), Some(s));
        }
        assert_eq!(InstanceState::parse("exploded"), None);
        assert_eq!(AgentState::parse("asleep"), None);
    }

    #[test]
    fn only_live_instances_that_are_not_containers_hold_capacity() {
        let mut ledger = Ledger::new(
            vec![
                record(0, "i-1", "a", None),
                record(1, "i-2", "a", None),
                record(2, "i-1-lxd-0", "a", Some("i-1")),
            ],
            Backing::Memory,
        );
        assert_eq!(ledger.live_in_zone("a"), 2);
        assert_eq!(ledger.containers_made("i-1"), 1);
        assert_eq!(ledger.next_seq(), 3);
        ledger
            .commit(Batch {
                changes: vec![Change {
                    seq: 0,
                    state: InstanceState::Terminated,
                    agent: AgentState::Waiting,
                    changed_at_ms: 5,
                }],
                ..Batch::default()
            })
            .unwrap();
        assert_eq!(ledger.live_in_zone("a"), 1);
        assert_eq!(
            ledger.get("i-1").map(|r| (r.entry.state, r.changed_at_ms)),
            Some((InstanceState::Terminated, 5))
        );
        assert_eq!(
            ledger.by_token("token-i-2").map(|r| r.entry.id.as_str()),
            Some("i-2")
        );
        assert_eq!(
            ledger
                .containers_on("i-1")
                .map(|r| r.entry.id.as_str())
                .collect::<Vec<_>>(),
            ["i-1-lxd-0"]
        );
    }
}

//! The change log's vocabulary: what changed ([`Entity`], [`ChangeKind`]),
//! who changed it ([`Origin`]), and one entry ([`Change`]). Every store
//! write appends entries; the engine, the status document and event
//! streams follow them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::domain::words::word_enum;

word_enum! {
    /// The kinds of thing the change log speaks of.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
    #[serde(rename_all = "lowercase")]
    pub enum Entity {
        Model => "model",
        Charm => "charm",
        Application => "application",
        Unit => "unit",
        Machine => "machine",
        Relation => "relation",
        Zone => "zone",
    }
}

word_enum! {
    /// What happened to an entity.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
    #[serde(rename_all = "lowercase")]
    pub enum ChangeKind {
        Created => "created",
        Updated => "updated",
        Removed => "removed",
    }
}

word_enum! {
    /// Who made a change. The engine follows the log for changes it did not
    /// make itself.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
    #[serde(rename_all = "lowercase")]
    pub enum Origin {
        /// A user, through the API or the command line.
        User => "user",
        /// The provisioning engine.
        Engine => "engine",
        /// A machine agent (check-in, heartbeats).
        Agent => "agent",
        /// A provider's report (webhooks, reconciliation).
        Provider => "provider",
    }
}

/// One entry of the change log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub revision: i64,
    pub entity: Entity,
    pub id: String,
    pub change: ChangeKind,
    /// What changed, in a few words (`state=allocating zone=sim-a`).
    pub detail: String,
    pub origin: Origin,
    pub at_ms: i64,
}

impl Change {
    /// Whether this is an administrator's `retry-provisioning` of a
    /// machine: a user's update that left the machine pending. (The only
    /// user event the lifecycle takes to `pending` is a retry, and the
    /// writer describes the machine it leaves as `state=pending`.)
    pub fn is_retry(&self) -> bool {
        self.entity == Entity::Machine
            && self.origin == Origin::User
            && self.change == ChangeKind::Updated
            && self.detail == "state=pending"
    }

    /// Whether this is a machine's creation: a new machine is pending and
    /// held by no controller, whatever its kind (the writer describes
    /// every new machine as `state=pending`, and never gives a machine's
    /// id to another).
    pub fn is_new_machine(&self) -> bool {
        self.entity == Entity::Machine
            && self.change == ChangeKind::Created
            && self.detail == "state=pending"
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(millis)
        .unwrap_or(0)
}

/// `duration` in whole milliseconds, as the store keeps times (the
/// longest durations held at `i64::MAX`).
pub fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

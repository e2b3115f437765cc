//! The change log's vocabulary: what changed ([`Entity`], [`ChangeKind`]),
//! who changed it ([`Origin`]), and one entry ([`Change`]). Every store
//! write appends entries; the engine, the status document and event
//! streams follow them.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// The kinds of thing the change log speaks of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Entity {
    Model,
    Charm,
    Application,
    Unit,
    Machine,
    Relation,
    Zone,
}

impl Entity {
    pub fn as_str(self) -> &'static str {
        match self {
            Entity::Model => "model",
            Entity::Charm => "charm",
            Entity::Application => "application",
            Entity::Unit => "unit",
            Entity::Machine => "machine",
            Entity::Relation => "relation",
            Entity::Zone => "zone",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Entity> {
        [
            Entity::Model,
            Entity::Charm,
            Entity::Application,
            Entity::Unit,
            Entity::Machine,
            Entity::Relation,
            Entity::Zone,
        ]
        .into_iter()
        .find(|e| e.as_str() == s)
    }
}

/// What happened to an entity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    Created,
    Updated,
    Removed,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Created => "created",
            ChangeKind::Updated => "updated",
            ChangeKind::Removed => "removed",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<ChangeKind> {
        [
            ChangeKind::Created,
            ChangeKind::Updated,
            ChangeKind::Removed,
        ]
        .into_iter()
        .find(|c| c.as_str() == s)
    }
}

/// Who made a change. The engine follows the log for changes it did not
/// make itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// A user, through the API or the command line.
    User,
    /// The provisioning engine.
    Engine,
    /// A machine agent (check-in, heartbeats).
    Agent,
    /// A provider's report (webhooks, reconciliation).
    Provider,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::User => "user",
            Origin::Engine => "engine",
            Origin::Agent => "agent",
            Origin::Provider => "provider",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Origin> {
        [
            Origin::User,
            Origin::Engine,
            Origin::Agent,
            Origin::Provider,
        ]
        .into_iter()
        .find(|o| o.as_str() == s)
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
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

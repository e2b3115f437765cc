//! Instances as a provider reports them: what berth knows of a cloud's
//! machines without asking the cloud anything. Pure data, shared by the
//! provider contract, the engine's planning and the simulated cloud.

use serde::{Deserialize, Serialize};

use crate::domain::hardware::Hardware;
use crate::domain::names::MachineId;
use crate::domain::texts::Texts;
use crate::domain::words::word_enum;

word_enum! {
    /// The provider's state of an instance.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
    #[serde(rename_all = "kebab-case")]
    pub enum InstanceState {
        Pending => "pending",
        Running => "running",
        Stopping => "stopping",
        Stopped => "stopped",
        ShuttingDown => "shutting-down",
        Terminated => "terminated",
    }
}

impl InstanceState {
    /// Whether the instance is gone or going (it will not run again).
    pub fn is_gone(self) -> bool {
        matches!(
            self,
            InstanceState::ShuttingDown | InstanceState::Terminated
        )
    }
}

/// How the instance id of an existing host enlisted over SSH starts:
/// `manual:10.0.0.3`. No cloud reports these; their machines' liveness is
/// their agents' heartbeats.
pub const MANUAL_INSTANCE_PREFIX: &str = "manual:";

/// The zone an enlisted host's machine shows: hosts are not in the cloud's
/// availability zones.
pub const MANUAL_ZONE: &str = "manual";

/// Whether `instance_id` is an enlisted host rather than a cloud instance.
pub fn is_manual_instance(instance_id: &str) -> bool {
    instance_id.starts_with(MANUAL_INSTANCE_PREFIX)
}

/// An instance as the provider reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instance {
    pub id: String,
    /// The machine named by the instance's `berth-machine` tag.
    pub machine: Option<MachineId>,
    pub zone: String,
    pub instance_type: String,
    pub state: InstanceState,
    pub hardware: Hardware,
    /// Its addresses, the preferred first: the public address when it has
    /// one, then the private ones.
    #[serde(default)]
    pub addresses: Vec<String>,
}

/// What a reconciliation compares of a listed instance, and no more. A
/// controller with a million machines lists a million instances every
/// minute or so; their hardware, type and zone would hold three times the
/// memory. The whole [`Instance`] is asked for only for the launches a
/// reconciliation adopts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedInstance {
    /// The machine named by the instance's `berth-machine` tag.
    pub machine: Option<MachineId>,
    pub state: InstanceState,
    /// Its id and addresses.
    texts: Texts<2>,
}

impl ListedInstance {
    /// An instance listed with `id`, tagged for `machine`, in `state`, at
    /// `addresses` (the preferred first, comma-separated).
    pub fn new(
        id: &str,
        machine: Option<MachineId>,
        state: InstanceState,
        addresses: &str,
    ) -> ListedInstance {
        ListedInstance {
            machine,
            state,
            texts: Texts::new([Some(id), Some(addresses)]),
        }
    }

    /// What a reconciliation compares of `instance`.
    pub fn of(instance: &Instance) -> ListedInstance {
        ListedInstance::new(
            &instance.id,
            instance.machine,
            instance.state,
            &instance.addresses.join(","),
        )
    }

    pub fn id(&self) -> &str {
        self.texts.get(0).unwrap_or_default()
    }

    /// Its addresses, the preferred first, comma-separated (as a machine's
    /// are stored).
    pub fn addresses(&self) -> &str {
        self.texts.get(1).unwrap_or_default()
    }

    /// Its addresses one by one, the preferred first.
    pub fn address_list(&self) -> Vec<String> {
        let addresses = self.addresses();
        if addresses.is_empty() {
            return Vec::new();
        }
        addresses.split(',').map(str::to_string).collect()
    }
}

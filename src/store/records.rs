//! Rows as diesel reads them, and the domain records the rest of berth
//! sees. Stored text is parsed back into domain types here, once; a value
//! that does not parse is a [`StoreError::Invariant`], never a panic.

use std::str::FromStr;

use diesel::prelude::*;
use serde::Serialize;

use crate::domain::base::Base;
use crate::domain::constraints::Constraints;
use crate::domain::instance_types::HourlyPrice;
use crate::domain::machine::{Lifecycle, Machine, MachineRole, MachineState, ZoneRefusal};
use crate::domain::names::{ApplicationName, MachineId, UnitName};
use crate::domain::placement::Placement;
use crate::store::schema::{applications, machines, model, relations, units};
use crate::store::StoreError;

/// Parses a stored string, naming the column if it does not parse.
pub(crate) fn stored<T: FromStr>(column: &str, value: &str) -> Result<T, StoreError>
where
    T::Err: std::fmt::Display,
{
    value
        .parse()
        .map_err(|e| StoreError::Invariant(format!("{column} {value:?}: {e}")))
}

/// A machine's stored role (`MachineRole` is read by its own `parse`, not
/// `FromStr`).
pub(crate) fn stored_role(role: &str) -> Result<MachineRole, StoreError> {
    MachineRole::parse(role).ok_or_else(|| StoreError::Invariant(format!("machine role {role:?}")))
}

/// [`stored`] for a nullable column.
pub(crate) fn stored_optional<T: FromStr>(
    column: &str,
    value: Option<&str>,
) -> Result<Option<T>, StoreError>
where
    T::Err: std::fmt::Display,
{
    value.map(|v| stored(column, v)).transpose()
}

pub(crate) fn to_i64(value: u64) -> Result<i64, StoreError> {
    i64::try_from(value).map_err(|_| StoreError::Invalid(format!("{value} is too large")))
}

#[derive(Queryable, Selectable, Clone, Debug)]
#[diesel(table_name = model)]
pub(crate) struct ModelRow {
    pub name: String,
    pub uuid: String,
    pub controller_uuid: String,
    pub constraints: String,
}

/// The model this controller manages.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ModelRecord {
    pub name: String,
    pub uuid: String,
    pub controller_uuid: String,
    pub constraints: Constraints,
}

impl TryFrom<ModelRow> for ModelRecord {
    type Error = StoreError;

    fn try_from(row: ModelRow) -> Result<Self, StoreError> {
        Ok(ModelRecord {
            constraints: stored("model constraints", &row.constraints)?,
            name: row.name,
            uuid: row.uuid,
            controller_uuid: row.controller_uuid,
        })
    }
}

#[derive(Queryable, Selectable, Clone, Debug)]
#[diesel(table_name = applications)]
pub(crate) struct ApplicationRow {
    pub name: String,
    pub charm_url: String,
    pub base: String,
    pub constraints: String,
    pub subordinate: bool,
    pub settings: String,
    pub life: String,
    pub scale_with: Option<String>,
}

/// An application as stored.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ApplicationRecord {
    pub name: ApplicationName,
    pub charm_url: String,
    pub base: Base,
    pub constraints: Constraints,
    pub subordinate: bool,
    pub settings: serde_json::Value,
    pub life: String,
    /// The application it was deployed to scale with (`--to
    /// scale-with=db`): it keeps a unit beside every unit of that one.
    pub scale_with: Option<ApplicationName>,
}

impl TryFrom<ApplicationRow> for ApplicationRecord {
    type Error = StoreError;

    fn try_from(row: ApplicationRow) -> Result<Self, StoreError> {
        Ok(ApplicationRecord {
            name: stored("application name", &row.name)?,
            base: stored("application base", &row.base)?,
            constraints: stored("application constraints", &row.constraints)?,
            settings: serde_json::from_str(&row.settings)
                .map_err(|e| StoreError::Invariant(format!("settings of {}: {e}", row.name)))?,
            charm_url: row.charm_url,
            subordinate: row.subordinate,
            life: row.life,
            scale_with: row
                .scale_with
                .as_deref()
                .map(|leader| stored("application name", leader))
                .transpose()?,
        })
    }
}

#[derive(Queryable, Selectable, Clone, Debug)]
#[diesel(table_name = units)]
pub(crate) struct UnitRow {
    pub name: String,
    pub application: String,
    pub base: String,
    pub constraints: String,
    pub machine_id: Option<String>,
    pub principal: Option<String>,
    pub agent_status: String,
    pub workload_status: String,
    pub created_at_ms: i64,
}

/// A unit as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UnitRecord {
    pub name: UnitName,
    pub application: ApplicationName,
    pub base: Base,
    /// The constraints snapshot taken when the unit was added.
    pub constraints: Constraints,
    pub machine: Option<MachineId>,
    /// For a subordinate unit, the principal it was created for.
    pub principal: Option<UnitName>,
    pub agent_status: String,
    pub workload_status: String,
    /// When the unit was added (ms since the epoch).
    pub created_at_ms: i64,
}

impl TryFrom<UnitRow> for UnitRecord {
    type Error = StoreError;

    fn try_from(row: UnitRow) -> Result<Self, StoreError> {
        Ok(UnitRecord {
            name: stored("unit name", &row.name)?,
            application: stored("unit application", &row.application)?,
            base: stored("unit base", &row.base)?,
            constraints: stored("unit constraints", &row.constraints)?,
            machine: stored_optional("unit machine", row.machine_id.as_deref())?,
            principal: stored_optional("unit principal", row.principal.as_deref())?,
            agent_status: row.agent_status,
            workload_status: row.workload_status,
            created_at_ms: row.created_at_ms,
        })
    }
}

#[derive(Queryable, Selectable, Clone, Debug)]
#[diesel(table_name = machines)]
pub(crate) struct MachineRow {
    pub id: String,
    pub base: String,
    pub constraints: String,
    pub placement: Option<String>,
    pub role: String,
    pub state: String,
    pub instance_id: Option<String>,
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    pub hardware: Option<String>,
    pub status_message: String,
    pub attempts: i32,
    pub zones_failed: String,
    pub bootstrap_attempts: i32,
    pub stop_failures: i32,
    pub otp_hash: Option<String>,
    pub retry_at_ms: Option<i64>,
    pub last_heartbeat_ms: Option<i64>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub addresses: String,
    pub status_since_ms: Option<i64>,
    pub lease_holder: Option<String>,
    pub lease_expires_ms: Option<i64>,
    pub hourly_price: Option<String>,
    pub provisioning_rounds: i32,
}

/// A machine as stored: its intent (base, constraints, placement), its
/// lifecycle, and what the cloud gave it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MachineRecord {
    pub id: MachineId,
    pub base: Base,
    pub constraints: Constraints,
    pub placement: Option<Placement>,
    pub role: MachineRole,
    /// The lifecycle state and its bookkeeping (attempts, zone, instance id,
    /// last error), exactly as the engine's transition function uses it.
    pub machine: Machine,
    pub instance_type: Option<String>,
    /// What the instance costs an hour, as the cloud priced its type at
    /// launch; `None` without an instance of its own (a container's host
    /// pays, an enlisted host is not the cloud's).
    pub hourly_price: Option<HourlyPrice>,
    /// What the instance has: `arch=amd64 cores=2 mem=8192M availability-zone=a`.
    pub hardware: Option<String>,
    /// Whether a one-time password is waiting to be exchanged by the agent.
    pub awaiting_check_in: bool,
    pub retry_at_ms: Option<i64>,
    pub last_heartbeat_ms: Option<i64>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    /// The instance's addresses as the provider reports them, the
    /// preferred (public, else private) first; empty without an instance.
    pub addresses: Vec<String>,
    /// When the machine entered its state (ms since the epoch).
    pub status_since_ms: i64,
    /// The controller working on the machine, if one holds its lease.
    pub lease: Option<MachineLease>,
}

/// A controller's lease on a machine: the provisioning lock. Only its
/// holder works on the machine, and only until the lease runs out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MachineLease {
    pub holder: String,
    pub expires_ms: i64,
}

impl MachineLease {
    /// The lease the two columns describe, if both are set.
    pub(crate) fn of(holder: Option<String>, expires_ms: Option<i64>) -> Option<MachineLease> {
        Some(MachineLease {
            holder: holder?,
            expires_ms: expires_ms?,
        })
    }

    /// Whether the lease still binds at `now_ms`.
    pub fn is_live(&self, now_ms: i64) -> bool {
        self.expires_ms >= now_ms
    }

    /// Whether controller `holder` holds it and it still binds at `now_ms`.
    pub fn is_held_by(&self, holder: &str, now_ms: i64) -> bool {
        self.holder == holder && self.is_live(now_ms)
    }
}

impl MachineRecord {
    pub fn state(&self) -> MachineState {
        self.machine.state
    }

    pub fn instance_id(&self) -> Option<&str> {
        self.machine.lifecycle.instance_id.as_deref()
    }
}

fn stored_u32(column: &str, value: i32) -> Result<u32, StoreError> {
    u32::try_from(value).map_err(|_| StoreError::Invariant(format!("{column} {value} is negative")))
}

impl TryFrom<MachineRow> for MachineRecord {
    type Error = StoreError;

    fn try_from(row: MachineRow) -> Result<Self, StoreError> {
        let lifecycle = Lifecycle {
            attempts_used: stored_u32("attempts", row.attempts)?,
            zones_failed: zone_refusals(&row.zones_failed)?,
            zone: row.zone,
            instance_id: row.instance_id,
            bootstrap_timeouts: stored_u32("bootstrap_attempts", row.bootstrap_attempts)?,
            stop_failures: stored_u32("stop_failures", row.stop_failures)?,
            provisioning_rounds: stored_u32("provisioning_rounds", row.provisioning_rounds)?,
            last_error: Some(row.status_message).filter(|m| !m.is_empty()),
        };
        Ok(MachineRecord {
            id: stored("machine id", &row.id)?,
            base: stored("machine base", &row.base)?,
            constraints: stored("machine constraints", &row.constraints)?,
            placement: stored_optional("machine placement", row.placement.as_deref())?,
            role: stored_role(&row.role)?,
            machine: Machine {
                state: stored("machine state", &row.state)?,
                lifecycle,
            },
            instance_type: row.instance_type,
            hourly_price: stored_optional("machine hourly price", row.hourly_price.as_deref())?,
            hardware: row.hardware,
            awaiting_check_in: row.otp_hash.is_some(),
            retry_at_ms: row.retry_at_ms,
            last_heartbeat_ms: row.last_heartbeat_ms,
            created_at_ms: row.created_at_ms,
            updated_at_ms: row.updated_at_ms,
            addresses: split_list(&row.addresses),
            status_since_ms: row.status_since_ms.unwrap_or(row.created_at_ms),
            lease: MachineLease::of(row.lease_holder, row.lease_expires_ms),
        })
    }
}

/// Splits a stored comma-separated list; the empty string is no items.
/// The zones that refused a machine this round, as stored: a JSON list of
/// `{"zone", "reason"}`, or (as records were written before reasons were
/// kept) a comma-separated list of zones.
fn zone_refusals(stored: &str) -> Result<Vec<ZoneRefusal>, StoreError> {
    if stored.starts_with('[') {
        serde_json::from_str(stored)
            .map_err(|e| StoreError::Invariant(format!("zones_failed {stored:?}: {e}")))
    } else {
        Ok(split_list(stored)
            .into_iter()
            .map(|zone| ZoneRefusal::new(zone, ""))
            .collect())
    }
}

/// [`zone_refusals`] as stored: empty when there are none.
pub(crate) fn stored_zone_refusals(refusals: &[ZoneRefusal]) -> String {
    if refusals.is_empty() {
        String::new()
    } else {
        serde_json::to_string(refusals).unwrap_or_default()
    }
}

pub(crate) fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .filter(|z| !z.is_empty())
        .map(str::to_string)
        .collect()
}

/// A relation as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Queryable, Selectable)]
#[diesel(table_name = relations)]
pub struct RelationRecord {
    /// Juju's relation key, requirer first: `"wordpress:db mysql:db"`.
    pub key: String,
    pub app1: String,
    pub endpoint1: String,
    pub app2: String,
    pub endpoint2: String,
    pub interface: String,
    /// `global` or `container`.
    pub scope: String,
}

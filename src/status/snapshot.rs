//! The status snapshot: everything `status` shows, read in one transaction
//! so that it is consistent with one revision of the change log; and the
//! lighter reads the status document is kept by ([`StatusDelta`]: the whole
//! state once, then what changed after a revision).
//!
//! The reads are [`Store`] methods written here, beside the types they
//! return, so that the store itself knows nothing of status: this module
//! reads the store's tables, never the reverse.

use diesel::prelude::*;
use serde::Serialize;

use crate::domain::instance_types::HourlyPrice;
use crate::domain::machine::MachineState;
use crate::domain::names::{ApplicationName, MachineId, UnitName};
use crate::status::cores;
use crate::store::db::Conn;
use crate::store::machines::in_key_order;
use crate::store::model::read_model;
use crate::store::records::{stored, stored_optional};
use crate::store::records::{
    ApplicationRecord, ApplicationRow, MachineRecord, MachineRow, ModelRecord, RelationRecord,
    UnitRecord, UnitRow,
};
use crate::store::schema::{applications, changes, log_head, machines, relations, units, zones};
use crate::store::zones::ZoneRecord;
use crate::store::{Entity, Store, StoreError};

/// Ids per `IN (...)` list, well under SQLite's bound-parameter limit.
const IDS_PER_READ: usize = 500;

/// The whole state at one revision.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StatusSnapshot {
    /// The change log's revision this snapshot reflects; a client that
    /// follows `/v1/events?since=revision` misses nothing.
    pub revision: i64,
    pub model: ModelRecord,
    /// In id order: 2 before 10, hosts before their containers.
    pub machines: Vec<MachineRecord>,
    pub applications: Vec<ApplicationRecord>,
    /// By application, then number.
    pub units: Vec<UnitRecord>,
    pub relations: Vec<RelationRecord>,
    pub zones: Vec<ZoneRecord>,
}

/// A machine as status shows it. Base and constraints are the stored
/// canonical text, not parsed again: status reads every machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineShown {
    pub id: MachineId,
    pub state: MachineState,
    pub instance_id: Option<String>,
    pub instance_type: Option<String>,
    /// What its instance costs an hour; `None` without an instance of its
    /// own.
    pub hourly_price: Option<HourlyPrice>,
    /// `ubuntu@22.04`
    pub base: String,
    /// Canonical; empty when none are set.
    pub constraints: String,
    pub hardware: Option<String>,
    /// The provider's last error; empty when there is none.
    pub message: String,
    /// The instance's addresses, the preferred first.
    pub addresses: Vec<String>,
    /// When the machine entered its state (ms since the epoch).
    pub since_ms: i64,
}

impl MachineShown {
    /// What status shows of a whole record.
    pub fn of(machine: &MachineRecord) -> MachineShown {
        MachineShown {
            id: machine.id,
            state: machine.state(),
            instance_id: machine.instance_id().map(str::to_string),
            instance_type: machine.instance_type.clone(),
            hourly_price: machine.hourly_price,
            base: machine.base.to_string(),
            constraints: machine.constraints.to_string(),
            hardware: machine.hardware.clone(),
            message: machine
                .machine
                .lifecycle
                .last_error
                .clone()
                .unwrap_or_default(),
            addresses: machine.addresses.clone(),
            since_ms: machine.status_since_ms,
        }
    }
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = machines)]
struct MachineShownRow {
    id: String,
    state: String,
    instance_id: Option<String>,
    instance_type: Option<String>,
    hourly_price: Option<String>,
    base: String,
    constraints: String,
    hardware: Option<String>,
    status_message: String,
    addresses: String,
    status_since_ms: Option<i64>,
    created_at_ms: i64,
}

impl TryFrom<MachineShownRow> for MachineShown {
    type Error = StoreError;

    fn try_from(row: MachineShownRow) -> Result<Self, StoreError> {
        Ok(MachineShown {
            id: stored("machine id", &row.id)?,
            state: stored("machine state", &row.state)?,
            instance_id: row.instance_id,
            instance_type: row.instance_type,
            hourly_price: stored_optional("machine hourly price", row.hourly_price.as_deref())?,
            base: row.base,
            constraints: row.constraints,
            hardware: row.hardware,
            message: row.status_message,
            addresses: crate::store::records::split_list(&row.addresses),
            since_ms: row.status_since_ms.unwrap_or(row.created_at_ms),
        })
    }
}

/// A unit as status shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitShown {
    pub name: UnitName,
    pub machine: Option<MachineId>,
    /// For a subordinate unit, the principal it was created for.
    pub principal: Option<UnitName>,
    pub agent_status: String,
    pub workload_status: String,
    /// When the unit was added (ms since the epoch).
    pub created_at_ms: i64,
}

impl UnitShown {
    /// What status shows of a whole record.
    pub fn of(unit: &UnitRecord) -> UnitShown {
        UnitShown {
            name: unit.name.clone(),
            machine: unit.machine,
            principal: unit.principal.clone(),
            agent_status: unit.agent_status.clone(),
            workload_status: unit.workload_status.clone(),
            created_at_ms: unit.created_at_ms,
        }
    }
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = units)]
struct UnitShownRow {
    name: String,
    machine_id: Option<String>,
    principal: Option<String>,
    agent_status: String,
    workload_status: String,
    created_at_ms: i64,
}

impl TryFrom<UnitShownRow> for UnitShown {
    type Error = StoreError;

    fn try_from(row: UnitShownRow) -> Result<Self, StoreError> {
        Ok(UnitShown {
            name: stored("unit name", &row.name)?,
            machine: stored_optional("unit machine", row.machine_id.as_deref())?,
            principal: stored_optional("unit principal", row.principal.as_deref())?,
            agent_status: row.agent_status,
            workload_status: row.workload_status,
            created_at_ms: row.created_at_ms,
        })
    }
}

/// What changed after a revision: each changed entity as it now is, or
/// `None` where it was removed. Only what status shows is included (not
/// charms or zones).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatusDelta {
    /// The revision the delta brings a reader up to.
    pub revision: i64,
    /// The model, if it changed.
    pub model: Option<ModelRecord>,
    pub machines: Vec<(MachineId, Option<MachineShown>)>,
    pub applications: Vec<(ApplicationName, Option<ApplicationRecord>)>,
    pub units: Vec<(UnitName, Option<UnitShown>)>,
    pub relations: Vec<(String, Option<RelationRecord>)>,
}

impl StatusDelta {
    /// The delta that brings an empty document to `snapshot`.
    pub fn of(snapshot: &StatusSnapshot) -> StatusDelta {
        StatusDelta {
            revision: snapshot.revision,
            model: Some(snapshot.model.clone()),
            machines: snapshot
                .machines
                .iter()
                .map(|m| (m.id, Some(MachineShown::of(m))))
                .collect(),
            applications: snapshot
                .applications
                .iter()
                .map(|a| (a.name.clone(), Some(a.clone())))
                .collect(),
            units: snapshot
                .units
                .iter()
                .map(|u| (u.name.clone(), Some(UnitShown::of(u))))
                .collect(),
            relations: snapshot
                .relations
                .iter()
                .map(|r| (r.key.clone(), Some(r.clone())))
                .collect(),
        }
    }
}

fn head_revision(conn: &mut Conn) -> Result<i64, StoreError> {
    Ok(log_head::table
        .find(1)
        .select(log_head::revision)
        .get_result(conn)?)
}

/// Reads the rows whose keys are `ids`, `IDS_PER_READ` at a time, and pairs
/// every key with its row or `None`.
fn rows_by_key<K: Clone, R>(
    ids: Vec<(K, String)>,
    mut read: impl FnMut(&[String]) -> Result<Vec<(String, R)>, StoreError>,
) -> Result<Vec<(K, Option<R>)>, StoreError> {
    let mut out = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(IDS_PER_READ) {
        let keys: Vec<String> = chunk.iter().map(|(_, key)| key.clone()).collect();
        let mut found: std::collections::HashMap<String, R> = read(&keys)?.into_iter().collect();
        out.extend(
            chunk
                .iter()
                .map(|(id, key)| (id.clone(), found.remove(key))),
        );
    }
    Ok(out)
}

fn read_delta(conn: &mut Conn, since: i64, most: usize) -> Result<Option<StatusDelta>, StoreError> {
    let revision = head_revision(conn)?;
    let mut delta = StatusDelta {
        revision,
        ..StatusDelta::default()
    };
    if revision <= since {
        return Ok(Some(delta));
    }
    let limit = i64::try_from(most.saturating_add(1)).unwrap_or(i64::MAX);
    let changed: Vec<(String, String)> = changes::table
        .select((changes::entity, changes::entity_id))
        .filter(changes::revision.gt(since))
        .filter(changes::revision.le(revision))
        .limit(limit)
        .load(conn)?;
    if changed.len() > most {
        return Ok(None);
    }
    // An entity changes several times in a busy moment; read it once.
    let mut seen = std::collections::HashSet::with_capacity(changed.len());
    let changed: Vec<(String, String)> = changed
        .into_iter()
        .filter(|key| seen.insert(key.clone()))
        .collect();
    let mut machine_ids = Vec::new();
    let mut application_names = Vec::new();
    let mut unit_names = Vec::new();
    let mut relation_keys = Vec::new();
    for (entity, id) in changed {
        match Entity::parse(&entity) {
            Some(Entity::Model) => {
                delta.model = Some(read_model(conn)?);
            }
            Some(Entity::Machine) => {
                machine_ids.push((stored::<MachineId>("machine id", &id)?, id))
            }
            Some(Entity::Application) => {
                application_names.push((stored::<ApplicationName>("application name", &id)?, id));
            }
            Some(Entity::Unit) => unit_names.push((stored::<UnitName>("unit name", &id)?, id)),
            Some(Entity::Relation) => relation_keys.push((id.clone(), id)),
            Some(Entity::Charm | Entity::Zone) => {}
            None => return Err(StoreError::Invariant(format!("unknown entity {entity:?}"))),
        }
    }
    delta.machines = rows_by_key(machine_ids, |ids| {
        machines::table
            .select(MachineShownRow::as_select())
            .filter(machines::id.eq_any(ids))
            .load(conn)?
            .into_iter()
            .map(|row| Ok((row.id.clone(), MachineShown::try_from(row)?)))
            .collect()
    })?;
    delta.applications = rows_by_key(application_names, |names| {
        applications::table
            .select(ApplicationRow::as_select())
            .filter(applications::name.eq_any(names))
            .load(conn)?
            .into_iter()
            .map(|row| Ok((row.name.clone(), ApplicationRecord::try_from(row)?)))
            .collect()
    })?;
    delta.units = rows_by_key(unit_names, |names| {
        units::table
            .select(UnitShownRow::as_select())
            .filter(units::name.eq_any(names))
            .load(conn)?
            .into_iter()
            .map(|row| Ok((row.name.clone(), UnitShown::try_from(row)?)))
            .collect()
    })?;
    delta.relations = rows_by_key(relation_keys, |keys| {
        Ok(relations::table
            .select(RelationRecord::as_select())
            .filter(relations::key.eq_any(keys))
            .load(conn)?
            .into_iter()
            .map(|relation: RelationRecord| (relation.key.clone(), relation))
            .collect())
    })?;
    Ok(Some(delta))
}

/// One reader's share of a whole read on SQLite: the rows of a table
/// whose `rowid`s fall in the `index`th of `of` equal ranges, so that the
/// shares, joined in order, are the rows in the order a whole read gives.
#[derive(Clone, Copy)]
struct Share {
    index: u64,
    of: u64,
}

impl Share {
    const WHOLE: Share = Share { index: 0, of: 1 };

    /// The SQL condition that selects the share of `table`'s rows.
    fn condition(
        self,
        conn: &mut Conn,
        table: &str,
    ) -> Result<diesel::expression::SqlLiteral<diesel::sql_types::Bool>, StoreError> {
        if self.of == 1 {
            return Ok(diesel::dsl::sql("TRUE"));
        }
        #[derive(QueryableByName)]
        struct Last {
            #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::BigInt>)]
            rowid: Option<i64>,
        }
        let last = diesel::sql_query(format!("SELECT MAX(rowid) AS rowid FROM {table}"))
            .get_result::<Last>(conn)?
            .rowid
            .unwrap_or(0);
        let last = u64::try_from(last).unwrap_or(0);
        let bound = |k: u64| u128::from(last) * u128::from(k) / u128::from(self.of);
        Ok(diesel::dsl::sql(&format!(
            "rowid > {} AND rowid <= {}",
            bound(self.index),
            bound(self.index + 1)
        )))
    }

    /// How many of `count` rows the share is expected to hold.
    fn room(self, count: i64) -> usize {
        let count = usize::try_from(count).unwrap_or(0);
        let of = usize::try_from(self.of).unwrap_or(1);
        count / of + count % of
    }
}

/// Machines and units as status shows them, with the revision they were
/// read at.
struct MachinesAndUnits {
    revision: i64,
    machines: Vec<(MachineId, Option<MachineShown>)>,
    units: Vec<(UnitName, Option<UnitShown>)>,
}

/// The machines and units of `share`, read in one snapshot. The lists are
/// of the exact size (counted in the same snapshot) when the share is the
/// whole: with a million machines, lists grown by doubling would copy
/// each several times and hold the old copy beside the new while they
/// move.
fn read_machines_and_units(conn: &mut Conn, share: Share) -> Result<MachinesAndUnits, StoreError> {
    let revision = head_revision(conn)?;
    let machine_count: i64 = machines::table.count().get_result(conn)?;
    let mut machines = Vec::with_capacity(share.room(machine_count));
    for row in machines::table
        .select(MachineShownRow::as_select())
        .filter(share.condition(conn, "machines")?)
        .load_iter::<MachineShownRow, diesel::connection::DefaultLoadingMode>(conn)?
    {
        let machine = MachineShown::try_from(row?)?;
        machines.push((machine.id, Some(machine)));
    }
    let unit_count: i64 = units::table.count().get_result(conn)?;
    let mut units = Vec::with_capacity(share.room(unit_count));
    for row in units::table
        .select(UnitShownRow::as_select())
        .filter(share.condition(conn, "units")?)
        .load_iter::<UnitShownRow, diesel::connection::DefaultLoadingMode>(conn)?
    {
        let unit = UnitShown::try_from(row?)?;
        units.push((unit.name.clone(), Some(unit)));
    }
    Ok(MachinesAndUnits {
        revision,
        machines,
        units,
    })
}

/// Everything status shows but machines and units, as the delta that
/// brings an empty document up to the store's head (`machines` and
/// `units` left empty).
fn read_shown_rest(conn: &mut Conn) -> Result<StatusDelta, StoreError> {
    let revision = head_revision(conn)?;
    let model = read_model(conn)?;
    let applications = applications::table
        .select(ApplicationRow::as_select())
        .load(conn)?
        .into_iter()
        .map(|row| {
            let application = ApplicationRecord::try_from(row)?;
            Ok((application.name.clone(), Some(application)))
        })
        .collect::<Result<_, StoreError>>()?;
    let relations = relations::table
        .select(RelationRecord::as_select())
        .load(conn)?
        .into_iter()
        .map(|relation: RelationRecord| (relation.key.clone(), Some(relation)))
        .collect();
    Ok(StatusDelta {
        revision,
        model: Some(model),
        applications,
        relations,
        ..StatusDelta::default()
    })
}

/// Everything status shows, as the delta that brings an empty document up
/// to the store's head.
fn read_shown(conn: &mut Conn) -> Result<StatusDelta, StoreError> {
    let whole = read_machines_and_units(conn, Share::WHOLE)?;
    let rest = read_shown_rest(conn)?;
    Ok(StatusDelta {
        machines: whole.machines,
        units: whole.units,
        ..rest
    })
}

/// `rest` with the machines and units of `shares`, joined in order, if all
/// were read at `rest`'s revision; `None` if not.
fn one_state(rest: StatusDelta, shares: Vec<MachinesAndUnits>) -> Option<StatusDelta> {
    if shares.iter().any(|share| share.revision != rest.revision) {
        return None;
    }
    let (machines, units): (Vec<_>, Vec<_>) = shares
        .into_iter()
        .map(|share| (share.machines, share.units))
        .unzip();
    Some(StatusDelta {
        machines: joined(machines),
        units: joined(units),
        ..rest
    })
}

/// `shares`, each list moved into one list of their joint length, each
/// share let go as soon as it is moved.
fn joined<T>(shares: Vec<Vec<T>>) -> Vec<T> {
    let mut all = Vec::with_capacity(shares.iter().map(Vec::len).sum());
    for share in shares {
        all.extend(share);
    }
    all
}

/// Runs `read` in one read-only transaction that sees one snapshot of the
/// store on both backends.
fn in_snapshot<T>(
    conn: &mut Conn,
    read: impl FnOnce(&mut Conn) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    conn.transaction(|conn| {
        if matches!(conn, Conn::Postgres(_)) {
            // One snapshot for every statement, not one each.
            diesel::sql_query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                .execute(conn)?;
        }
        read(conn)
    })
}

fn read_snapshot(conn: &mut Conn) -> Result<StatusSnapshot, StoreError> {
    let revision = head_revision(conn)?;
    let model = read_model(conn)?;
    let machine_rows: Vec<MachineRow> = machines::table
        .select(MachineRow::as_select())
        .order((
            machines::host_number.asc(),
            machines::container_number.asc(),
        ))
        .load(conn)?;
    let application_rows: Vec<ApplicationRow> = applications::table
        .select(ApplicationRow::as_select())
        .order(applications::name.asc())
        .load(conn)?;
    let unit_rows: Vec<UnitRow> = units::table
        .select(UnitRow::as_select())
        .order((units::application.asc(), units::number.asc()))
        .load(conn)?;
    let relations = relations::table
        .select(RelationRecord::as_select())
        .order(relations::key.asc())
        .load(conn)?;
    let zones = zones::table
        .select(ZoneRecord::as_select())
        .order(zones::name.asc())
        .load(conn)?;
    let mut machines = machine_rows
        .into_iter()
        .map(MachineRecord::try_from)
        .collect::<Result<Vec<_>, _>>()?;
    // NULL container numbers sort differently on the two backends; the
    // domain order is the one that counts.
    in_key_order(&mut machines, |m| m.id);
    Ok(StatusSnapshot {
        revision,
        model,
        machines,
        applications: application_rows
            .into_iter()
            .map(ApplicationRecord::try_from)
            .collect::<Result<_, _>>()?,
        units: unit_rows
            .into_iter()
            .map(UnitRecord::try_from)
            .collect::<Result<_, _>>()?,
        relations,
        zones,
    })
}

impl Store {
    /// Reads the whole state at one revision. Readers never wait for the
    /// writer: SQLite's WAL and PostgreSQL's snapshots keep them apart.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] or [`StoreError::Invariant`].
    pub fn status(&self) -> Result<StatusSnapshot, StoreError> {
        self.read(|conn| in_snapshot(conn, read_snapshot))
    }

    /// Everything status shows, at one revision, as the delta that brings an
    /// empty document up to it. Lighter than [`Store::status`]: base and
    /// constraints stay text.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] or [`StoreError::Invariant`].
    pub fn status_shown(&self) -> Result<StatusDelta, StoreError> {
        self.read(|conn| in_snapshot(conn, read_shown))
    }

    /// As [`Store::status_shown`], on SQLite read in `readers` shares at
    /// once, each on a connection and a thread of its own, for a controller
    /// that starts with many machines while nothing writes. The shares are
    /// one state if they were read at one revision (every change status
    /// shows moves the revision in the same transaction); if a write came
    /// between them, `None`, and the caller reads the state whole. On
    /// PostgreSQL the state is read whole.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] or [`StoreError::Invariant`].
    pub fn status_shown_in_shares(
        &self,
        readers: usize,
    ) -> Result<Option<StatusDelta>, StoreError> {
        if !self.url().is_sqlite() || readers < 2 {
            return self.status_shown().map(Some);
        }
        let of = u64::try_from(readers).unwrap_or(1);
        let shares = cores::in_order((0..of).collect(), |index| {
            vec![self.read(|conn| {
                in_snapshot(conn, |conn| {
                    read_machines_and_units(conn, Share { index, of })
                })
            })]
        })
        .into_iter()
        .collect::<Result<Vec<_>, StoreError>>()?;
        let rest = self.read(|conn| in_snapshot(conn, read_shown_rest))?;
        Ok(one_state(rest, shares))
    }

    /// What status shows that changed after revision `since`, read at one
    /// revision; `None` when the log holds more than `most` changes after
    /// `since` (reading the whole state is then cheaper).
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] or [`StoreError::Invariant`].
    pub fn status_delta(&self, since: i64, most: usize) -> Result<Option<StatusDelta>, StoreError> {
        self.read(|conn| in_snapshot(conn, |conn| read_delta(conn, since, most)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(revision: i64, machines: &[u64]) -> MachinesAndUnits {
        MachinesAndUnits {
            revision,
            machines: machines
                .iter()
                .map(|&n| (MachineId::new(n), None))
                .collect(),
            units: Vec::new(),
        }
    }

    #[test]
    fn shares_read_at_one_revision_join_in_order_and_others_are_refused() {
        let rest = StatusDelta {
            revision: 7,
            ..StatusDelta::default()
        };
        let joined = one_state(rest.clone(), vec![share(7, &[0, 1]), share(7, &[2])]).unwrap();
        assert_eq!(joined.revision, 7);
        assert_eq!(
            joined.machines,
            [0, 1, 2].map(|n| (MachineId::new(n), None))
        );
        assert_eq!(
            one_state(rest.clone(), vec![share(7, &[0]), share(8, &[1])]),
            None
        );
        assert_eq!(one_state(rest, vec![share(6, &[0])]), None);
    }
}

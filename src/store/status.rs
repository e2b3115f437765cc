//! The status snapshot: everything `status` shows, read in one transaction
//! so that it is consistent with one revision of the change log.

use diesel::prelude::*;
use serde::Serialize;

use crate::domain::names::{ApplicationName, MachineId, UnitName};
use crate::store::db::Conn;
use crate::store::records::stored;
use crate::store::records::{
    ApplicationRecord, ApplicationRow, MachineRecord, MachineRow, ModelRecord, ModelRow,
    UnitRecord, UnitRow,
};
use crate::store::schema::{
    applications, changes, log_head, machines, model, relations, units, zones,
};
use crate::store::zones::ZoneRecord;
use crate::store::{Entity, Store, StoreError};

/// Ids per `IN (...)` list, well under SQLite's bound-parameter limit.
const IDS_PER_READ: usize = 500;

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

/// What changed after a revision: each changed entity as it now is, or
/// `None` where it was removed. Only what status shows is included (not
/// charms or zones).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatusDelta {
    /// The revision the delta brings a reader up to.
    pub revision: i64,
    /// The model, if it changed.
    pub model: Option<ModelRecord>,
    pub machines: Vec<(MachineId, Option<MachineRecord>)>,
    pub applications: Vec<(ApplicationName, Option<ApplicationRecord>)>,
    pub units: Vec<(UnitName, Option<UnitRecord>)>,
    pub relations: Vec<(String, Option<RelationRecord>)>,
}

fn head_revision(conn: &mut Conn) -> Result<i64, StoreError> {
    Ok(log_head::table
        .find(1)
        .select(log_head::revision)
        .first(conn)?)
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
                let row: ModelRow = model::table
                    .find(1)
                    .select(ModelRow::as_select())
                    .first(conn)?;
                delta.model = Some(row.try_into()?);
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
            .select(MachineRow::as_select())
            .filter(machines::id.eq_any(ids))
            .load(conn)?
            .into_iter()
            .map(|row| Ok((row.id.clone(), MachineRecord::try_from(row)?)))
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
            .select(UnitRow::as_select())
            .filter(units::name.eq_any(names))
            .load(conn)?
            .into_iter()
            .map(|row| Ok((row.name.clone(), UnitRecord::try_from(row)?)))
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
    let model: ModelRow = model::table
        .find(1)
        .select(ModelRow::as_select())
        .first(conn)?;
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
    machines.sort_by_key(|m| m.id);
    Ok(StatusSnapshot {
        revision,
        model: model.try_into()?,
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

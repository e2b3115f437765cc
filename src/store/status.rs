//! The status snapshot: everything `status` shows, read in one transaction
//! so that it is consistent with one revision of the change log.

use diesel::prelude::*;
use serde::Serialize;

use crate::store::db::Conn;
use crate::store::records::{
    ApplicationRecord, ApplicationRow, MachineRecord, MachineRow, ModelRecord, ModelRow,
    UnitRecord, UnitRow,
};
use crate::store::schema::{applications, log_head, machines, model, relations, units, zones};
use crate::store::zones::ZoneRecord;
use crate::store::{Store, StoreError};

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

fn read_snapshot(conn: &mut Conn) -> Result<StatusSnapshot, StoreError> {
    let revision: i64 = log_head::table
        .find(1)
        .select(log_head::revision)
        .first(conn)?;
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
        self.read(|conn| {
            conn.transaction(|conn| {
                if matches!(conn, Conn::Postgres(_)) {
                    // One snapshot for every statement, not one each.
                    diesel::sql_query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                        .execute(conn)?;
                }
                read_snapshot(conn)
            })
        })
    }
}

//! The machine save: the one statement that writes a machine's lifecycle
//! and the fields beside it, for one machine ([`SaveMachine`]) or, on
//! PostgreSQL, for many at once ([`SaveMachines`]).
//!
//! Each form has one shape whatever it changes, so a connection prepares
//! it once and keeps it; on SQLite a save that keeps the machine's
//! instance has a second shape of its own, which leaves the index of
//! instance ids alone. [`SaveRow`] renders a save's values once; both
//! forms bind them as they are.

use diesel::pg::Pg;
use diesel::prelude::*;

use crate::domain::machine::{Machine, MachineState};
use crate::domain::names::MachineId;
use crate::store::lifecycle::MachineUpdate;
use crate::store::records::stored_zone_refusals;

/// The machine save: one `UPDATE` of one shape whatever it changes (and a
/// second with `KEEPS_INSTANCE`), so the connection prepares each once and
/// keeps it. diesel's own `UPDATE`s are never kept in its statement cache
/// (their `SET` lists vary), and preparing the save again for every
/// transition was most of its cost.
///
/// Columns every save writes are bound as they are. The others come in
/// pairs: `keep_*` leaves the column alone when true, otherwise it becomes
/// the value (which may be `NULL`, to clear it). `expected_state`, when
/// given, is the state the machine must still be in.
///
/// `KEEPS_INSTANCE` is a second shape, for a save that keeps the machine's
/// instance: `instance_id` is left out of the `SET` list and the machine
/// must still have that instance. SQLite rewrites the entry of every index
/// on a column the `SET` list names, whatever its value, and the index of
/// instance ids is in random order: a save naming `instance_id` dirtied a
/// page of it for every machine saved. (PostgreSQL leaves an index alone
/// when its columns keep their values, and has no need of this shape.)
pub(super) struct SaveMachine<'a, const KEEPS_INSTANCE: bool = false> {
    id: &'a str,
    expected_state: Option<&'a str>,
    state: &'a str,
    instance_id: Option<&'a str>,
    zone: Option<&'a str>,
    status_message: &'a str,
    attempts: i32,
    zones_failed: &'a str,
    bootstrap_attempts: i32,
    stop_failures: i32,
    provisioning_rounds: i32,
    updated_at_ms: i64,
    constraints: Option<&'a str>,
    base: Option<&'a str>,
    instance_type: Kept<&'a str>,
    hourly_price: Kept<&'a str>,
    hardware: Kept<&'a str>,
    addresses: Kept<&'a str>,
    otp_hash: Kept<&'a str>,
    /// The new `otp_hash` goes beside the stored one (see
    /// [`MachineUpdate::keeps_earlier_otp`]).
    otp_keeps_earlier: bool,
    retry_at_ms: Kept<i64>,
    credential_hash: Option<&'a str>,
    last_heartbeat_ms: Option<i64>,
    spread_kind: Option<&'a str>,
    /// Whether the save is not fenced by a lease; when it is, `holder`
    /// must hold the machine's lease, live at `now_ms`.
    unfenced: bool,
    holder: &'a str,
    now_ms: i64,
}

/// The stored one-time password hashes a new one goes beside: all of them
/// while there are at most three (each 64 hex digits, a space apart), else
/// the first alone. The first is the one that matters: a launch resumed
/// under its client token is answered with the instance the first call
/// started, whose agent has the first password. So a launch resumed again
/// and again keeps at most four, the first always among them.
const EARLIER_OTPS: &str =
    "CASE WHEN length(otp_hash) < 3 * 65 THEN otp_hash ELSE substr(otp_hash, 1, 64) END";

/// A nullable column a save may leave alone (`keep`) or set (`value`,
/// `None` clearing it).
pub(super) struct Kept<T> {
    keep: bool,
    value: Option<T>,
}

impl<T> Kept<T> {
    /// `None` keeps the column; `Some(value)` sets it.
    fn from(change: Option<Option<T>>) -> Self {
        match change {
            None => Kept {
                keep: true,
                value: None,
            },
            Some(value) => Kept { keep: false, value },
        }
    }
}

impl<const KEEPS_INSTANCE: bool> diesel::query_builder::QueryId
    for SaveMachine<'_, KEEPS_INSTANCE>
{
    // One prepared statement for each shape.
    type QueryId = SaveMachine<'static, KEEPS_INSTANCE>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<DB, const KEEPS_INSTANCE: bool> diesel::query_builder::QueryFragment<DB>
    for SaveMachine<'_, KEEPS_INSTANCE>
where
    DB: diesel::backend::Backend
        + diesel::sql_types::HasSqlType<diesel::sql_types::Text>
        + diesel::sql_types::HasSqlType<diesel::sql_types::Integer>
        + diesel::sql_types::HasSqlType<diesel::sql_types::BigInt>
        + diesel::sql_types::HasSqlType<diesel::sql_types::Bool>,
    str: diesel::serialize::ToSql<diesel::sql_types::Text, DB>,
    i32: diesel::serialize::ToSql<diesel::sql_types::Integer, DB>,
    i64: diesel::serialize::ToSql<diesel::sql_types::BigInt, DB>,
    bool: diesel::serialize::ToSql<diesel::sql_types::Bool, DB>,
    for<'x> Option<&'x str>:
        diesel::serialize::ToSql<diesel::sql_types::Nullable<diesel::sql_types::Text>, DB>,
    Option<i64>:
        diesel::serialize::ToSql<diesel::sql_types::Nullable<diesel::sql_types::BigInt>, DB>,
{
    fn walk_ast<'b>(
        &'b self,
        mut out: diesel::query_builder::AstPass<'_, 'b, DB>,
    ) -> QueryResult<()> {
        use diesel::sql_types::{BigInt, Bool, Integer, Nullable, Text};
        out.push_sql("UPDATE machines SET state = ");
        out.push_bind_param::<Text, _>(self.state)?;
        if !KEEPS_INSTANCE {
            out.push_sql(", instance_id = ");
            out.push_bind_param::<Nullable<Text>, _>(&self.instance_id)?;
        }
        out.push_sql(", zone = ");
        out.push_bind_param::<Nullable<Text>, _>(&self.zone)?;
        out.push_sql(", status_message = ");
        out.push_bind_param::<Text, _>(self.status_message)?;
        out.push_sql(", attempts = ");
        out.push_bind_param::<Integer, _>(&self.attempts)?;
        out.push_sql(", zones_failed = ");
        out.push_bind_param::<Text, _>(self.zones_failed)?;
        out.push_sql(", bootstrap_attempts = ");
        out.push_bind_param::<Integer, _>(&self.bootstrap_attempts)?;
        out.push_sql(", stop_failures = ");
        out.push_bind_param::<Integer, _>(&self.stop_failures)?;
        out.push_sql(", provisioning_rounds = ");
        out.push_bind_param::<Integer, _>(&self.provisioning_rounds)?;
        out.push_sql(", updated_at_ms = ");
        out.push_bind_param::<BigInt, _>(&self.updated_at_ms)?;
        // Every right-hand side reads the row as it was, so `state` here
        // is the state before this save: the time moves only when the
        // state does.
        out.push_sql(", status_since_ms = CASE WHEN state = ");
        out.push_bind_param::<Text, _>(self.state)?;
        out.push_sql(" THEN status_since_ms ELSE ");
        out.push_bind_param::<BigInt, _>(&self.updated_at_ms)?;
        out.push_sql(" END");
        out.push_sql(", constraints = COALESCE(");
        out.push_bind_param::<Nullable<Text>, _>(&self.constraints)?;
        out.push_sql(", constraints), base = COALESCE(");
        out.push_bind_param::<Nullable<Text>, _>(&self.base)?;
        out.push_sql(", base)");
        out.push_sql(", otp_hash = CASE WHEN ");
        out.push_bind_param::<Bool, _>(&self.otp_hash.keep)?;
        out.push_sql(" THEN otp_hash WHEN ");
        out.push_bind_param::<Bool, _>(&self.otp_keeps_earlier)?;
        out.push_sql(&format!(
            " AND otp_hash IS NOT NULL THEN {EARLIER_OTPS} || ' ' || "
        ));
        out.push_bind_param::<Nullable<Text>, _>(&self.otp_hash.value)?;
        out.push_sql(" ELSE ");
        out.push_bind_param::<Nullable<Text>, _>(&self.otp_hash.value)?;
        out.push_sql(" END");
        for (column, kept) in [
            ("instance_type", &self.instance_type),
            ("hourly_price", &self.hourly_price),
            ("hardware", &self.hardware),
        ] {
            out.push_sql(", ");
            out.push_sql(column);
            out.push_sql(" = CASE WHEN ");
            out.push_bind_param::<Bool, _>(&kept.keep)?;
            out.push_sql(" THEN ");
            out.push_sql(column);
            out.push_sql(" ELSE ");
            out.push_bind_param::<Nullable<Text>, _>(&kept.value)?;
            out.push_sql(" END");
        }
        out.push_sql(", addresses = CASE WHEN ");
        out.push_bind_param::<Bool, _>(&self.addresses.keep)?;
        out.push_sql(" THEN addresses ELSE ");
        out.push_bind_param::<Text, _>(self.addresses.value.unwrap_or_default())?;
        out.push_sql(" END");
        out.push_sql(", retry_at_ms = CASE WHEN ");
        out.push_bind_param::<Bool, _>(&self.retry_at_ms.keep)?;
        out.push_sql(" THEN retry_at_ms ELSE ");
        out.push_bind_param::<Nullable<BigInt>, _>(&self.retry_at_ms.value)?;
        out.push_sql(" END, credential_hash = COALESCE(");
        out.push_bind_param::<Nullable<Text>, _>(&self.credential_hash)?;
        out.push_sql(", credential_hash), last_heartbeat_ms = COALESCE(");
        out.push_bind_param::<Nullable<BigInt>, _>(&self.last_heartbeat_ms)?;
        out.push_sql(", last_heartbeat_ms), spread_kind = COALESCE(");
        out.push_bind_param::<Nullable<Text>, _>(&self.spread_kind)?;
        out.push_sql(", spread_kind) WHERE id = ");
        out.push_bind_param::<Text, _>(self.id)?;
        if KEEPS_INSTANCE {
            out.push_sql(" AND instance_id IS NOT DISTINCT FROM ");
            out.push_bind_param::<Nullable<Text>, _>(&self.instance_id)?;
        }
        out.push_sql(" AND state = COALESCE(");
        out.push_bind_param::<Nullable<Text>, _>(&self.expected_state)?;
        out.push_sql(", state)");
        // One shape fenced or not, so one prepared statement serves both.
        out.push_sql(" AND (");
        out.push_bind_param::<Bool, _>(&self.unfenced)?;
        out.push_sql(" OR (lease_holder = ");
        out.push_bind_param::<Text, _>(self.holder)?;
        out.push_sql(" AND lease_expires_ms >= ");
        out.push_bind_param::<BigInt, _>(&self.now_ms)?;
        out.push_sql("))");
        Ok(())
    }
}

impl<Conn, const KEEPS_INSTANCE: bool> RunQueryDsl<Conn> for SaveMachine<'_, KEEPS_INSTANCE> {}

pub(super) fn saturating_i32(value: u32) -> i32 {
    i32::try_from(value).unwrap_or(i32::MAX)
}

/// The text a save writes that the machine and its update do not hold as
/// it is stored: rendered once, then borrowed by [`SaveRow::save`].
pub(super) struct SaveRow {
    key: String,
    zones_failed: String,
    constraints: Option<String>,
    addresses: Option<String>,
    base: Option<String>,
    hourly_price: Option<String>,
}

impl SaveRow {
    pub(super) fn of(id: &MachineId, machine: &Machine, update: &MachineUpdate) -> SaveRow {
        SaveRow {
            key: id.to_string(),
            zones_failed: stored_zone_refusals(&machine.lifecycle.zones_failed),
            constraints: update.constraints.as_ref().map(ToString::to_string),
            addresses: update.addresses.as_ref().map(|a| a.join(",")),
            base: update.base.as_ref().map(ToString::to_string),
            hourly_price: update.hourly_price.as_ref().map(ToString::to_string),
        }
    }

    /// The machine's id, as stored.
    pub(super) fn key(&self) -> &str {
        &self.key
    }

    /// The save of `machine` with `update`, if it is still in `expected`
    /// (when given) and, with a `fence`, while that controller holds its
    /// lease at `now_ms`; with `KEEPS_INSTANCE`, only if the machine's
    /// instance is still `machine`'s, which it leaves as it is.
    pub(super) fn save<'a, const KEEPS_INSTANCE: bool>(
        &'a self,
        expected: Option<MachineState>,
        machine: &'a Machine,
        update: &'a MachineUpdate,
        fence: Option<&'a str>,
        now_ms: i64,
    ) -> SaveMachine<'a, KEEPS_INSTANCE> {
        let life = &machine.lifecycle;
        let has_instance = life.instance_id.is_some();
        // No instance, so nothing it was: clear what the last one had.
        let of_instance = |value: Option<&'a str>| -> Kept<&'a str> {
            Kept::from(match (value, has_instance) {
                (Some(v), _) => Some(Some(v)),
                (None, false) => Some(None),
                (None, true) => None,
            })
        };
        SaveMachine {
            id: &self.key,
            expected_state: expected.map(MachineState::as_str),
            state: machine.state.as_str(),
            instance_id: life.instance_id.as_deref(),
            zone: life.zone.as_deref(),
            status_message: life.last_error.as_deref().unwrap_or_default(),
            attempts: saturating_i32(life.attempts_used),
            zones_failed: &self.zones_failed,
            bootstrap_attempts: saturating_i32(life.bootstrap_timeouts),
            stop_failures: saturating_i32(life.stop_failures),
            provisioning_rounds: saturating_i32(life.provisioning_rounds),
            updated_at_ms: now_ms,
            constraints: self.constraints.as_deref(),
            base: self.base.as_deref(),
            instance_type: of_instance(update.instance_type.as_deref()),
            hourly_price: of_instance(self.hourly_price.as_deref()),
            hardware: of_instance(update.hardware.as_deref()),
            addresses: of_instance(self.addresses.as_deref()),
            otp_hash: Kept::from(match (&update.otp_hash, &update.credential_hash) {
                (Some(otp), _) => Some(Some(otp.as_str())),
                (None, Some(_)) => Some(None),
                (None, None) => None,
            }),
            otp_keeps_earlier: update.keeps_earlier_otp,
            retry_at_ms: Kept::from(
                (update.retry_at_ms.is_some() || update.clear_retry_at)
                    .then_some(update.retry_at_ms),
            ),
            credential_hash: update.credential_hash.as_deref(),
            last_heartbeat_ms: update.heartbeat_ms,
            spread_kind: update.spread_kind.as_deref(),
            unfenced: fence.is_none(),
            holder: fence.unwrap_or_default(),
            now_ms,
        }
    }
}

/// Many machines' saves in one PostgreSQL statement: each column's values
/// go as one array, `unnest` turns the arrays back into rows, and the
/// `UPDATE` joins them to the machines by id. Each row is written exactly
/// as [`SaveMachine`] writes it, under the same conditions; `RETURNING`
/// names the machines that met them. The ids must be distinct (a row
/// joined twice would be written once).
pub(super) struct SaveMachines<'a> {
    now_ms: i64,
    id: Vec<&'a str>,
    expected_state: Vec<Option<&'a str>>,
    state: Vec<&'a str>,
    instance_id: Vec<Option<&'a str>>,
    zone: Vec<Option<&'a str>>,
    status_message: Vec<&'a str>,
    attempts: Vec<i32>,
    zones_failed: Vec<&'a str>,
    bootstrap_attempts: Vec<i32>,
    stop_failures: Vec<i32>,
    provisioning_rounds: Vec<i32>,
    constraints: Vec<Option<&'a str>>,
    base: Vec<Option<&'a str>>,
    /// `instance_type`, `hourly_price`, `hardware`, `otp_hash`, each a
    /// keep flag and a value per row.
    kept_text: [(Vec<bool>, Vec<Option<&'a str>>); 4],
    otp_keeps_earlier: Vec<bool>,
    keep_addresses: Vec<bool>,
    addresses: Vec<&'a str>,
    keep_retry_at_ms: Vec<bool>,
    retry_at_ms: Vec<Option<i64>>,
    credential_hash: Vec<Option<&'a str>>,
    last_heartbeat_ms: Vec<Option<i64>>,
    spread_kind: Vec<Option<&'a str>>,
    unfenced: Vec<bool>,
    holder: Vec<&'a str>,
}

/// The columns of [`SaveMachines`]'s `keep`/value pairs of nullable text,
/// in the order of its `kept_text`.
const KEPT_TEXT_COLUMNS: [&str; 4] = ["instance_type", "hourly_price", "hardware", "otp_hash"];

impl<'a> SaveMachines<'a> {
    /// The saves of `rows`, all at the time `now_ms`.
    pub(super) fn of(rows: &[SaveMachine<'a>], now_ms: i64) -> SaveMachines<'a> {
        let column = |f: &dyn Fn(&SaveMachine<'a>) -> Option<&'a str>| {
            rows.iter().map(f).collect::<Vec<_>>()
        };
        let kept = |f: &dyn for<'r> Fn(&'r SaveMachine<'a>) -> &'r Kept<&'a str>| {
            (
                rows.iter().map(|r| f(r).keep).collect::<Vec<_>>(),
                rows.iter().map(|r| f(r).value).collect::<Vec<_>>(),
            )
        };
        SaveMachines {
            now_ms,
            id: rows.iter().map(|r| r.id).collect(),
            expected_state: column(&|r| r.expected_state),
            state: rows.iter().map(|r| r.state).collect(),
            instance_id: column(&|r| r.instance_id),
            zone: column(&|r| r.zone),
            status_message: rows.iter().map(|r| r.status_message).collect(),
            attempts: rows.iter().map(|r| r.attempts).collect(),
            zones_failed: rows.iter().map(|r| r.zones_failed).collect(),
            bootstrap_attempts: rows.iter().map(|r| r.bootstrap_attempts).collect(),
            stop_failures: rows.iter().map(|r| r.stop_failures).collect(),
            provisioning_rounds: rows.iter().map(|r| r.provisioning_rounds).collect(),
            constraints: column(&|r| r.constraints),
            base: column(&|r| r.base),
            kept_text: [
                kept(&|r| &r.instance_type),
                kept(&|r| &r.hourly_price),
                kept(&|r| &r.hardware),
                kept(&|r| &r.otp_hash),
            ],
            otp_keeps_earlier: rows.iter().map(|r| r.otp_keeps_earlier).collect(),
            keep_addresses: rows.iter().map(|r| r.addresses.keep).collect(),
            addresses: rows
                .iter()
                .map(|r| r.addresses.value.unwrap_or_default())
                .collect(),
            keep_retry_at_ms: rows.iter().map(|r| r.retry_at_ms.keep).collect(),
            retry_at_ms: rows.iter().map(|r| r.retry_at_ms.value).collect(),
            credential_hash: column(&|r| r.credential_hash),
            last_heartbeat_ms: rows.iter().map(|r| r.last_heartbeat_ms).collect(),
            spread_kind: column(&|r| r.spread_kind),
            unfenced: rows.iter().map(|r| r.unfenced).collect(),
            holder: rows.iter().map(|r| r.holder).collect(),
        }
    }

    /// Writes the saves; returns the ids of the machines written.
    ///
    /// # Errors
    ///
    /// The database's.
    pub(super) fn run(self, conn: &mut PgConnection) -> QueryResult<Vec<String>> {
        self.load(conn)
    }
}

impl diesel::query_builder::QueryId for SaveMachines<'_> {
    type QueryId = SaveMachines<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl diesel::query_builder::Query for SaveMachines<'_> {
    type SqlType = diesel::sql_types::Text;
}

impl diesel::query_builder::QueryFragment<Pg> for SaveMachines<'_> {
    fn walk_ast<'b>(
        &'b self,
        mut out: diesel::query_builder::AstPass<'_, 'b, Pg>,
    ) -> QueryResult<()> {
        use diesel::sql_types::{Array, BigInt, Bool, Integer, Nullable, Text};
        // Every right-hand side reads `m`, the row as it was.
        out.push_sql(
            "UPDATE machines AS m SET state = v.state, instance_id = v.instance_id, \
             zone = v.zone, status_message = v.status_message, attempts = v.attempts, \
             zones_failed = v.zones_failed, bootstrap_attempts = v.bootstrap_attempts, \
             stop_failures = v.stop_failures, provisioning_rounds = v.provisioning_rounds, \
             updated_at_ms = ",
        );
        out.push_bind_param::<BigInt, _>(&self.now_ms)?;
        out.push_sql(
            ", status_since_ms = CASE WHEN m.state = v.state THEN m.status_since_ms ELSE ",
        );
        out.push_bind_param::<BigInt, _>(&self.now_ms)?;
        out.push_sql(
            " END, constraints = COALESCE(v.constraints, m.constraints), \
             base = COALESCE(v.base, m.base)",
        );
        for column in KEPT_TEXT_COLUMNS {
            let earlier = match column {
                "otp_hash" => format!(
                    " WHEN v.otp_keeps_earlier AND m.otp_hash IS NOT NULL \
                     THEN {} || ' ' || v.otp_hash",
                    EARLIER_OTPS.replace("otp_hash", "m.otp_hash")
                ),
                _ => String::new(),
            };
            out.push_sql(&format!(
                ", {column} = CASE WHEN v.keep_{column} THEN m.{column}{earlier} \
                 ELSE v.{column} END"
            ));
        }
        out.push_sql(
            ", addresses = CASE WHEN v.keep_addresses THEN m.addresses ELSE v.addresses END, \
             retry_at_ms = CASE WHEN v.keep_retry_at_ms THEN m.retry_at_ms ELSE v.retry_at_ms END, \
             credential_hash = COALESCE(v.credential_hash, m.credential_hash), \
             last_heartbeat_ms = COALESCE(v.last_heartbeat_ms, m.last_heartbeat_ms), \
             spread_kind = COALESCE(v.spread_kind, m.spread_kind) FROM unnest(",
        );
        out.push_bind_param::<Array<Text>, _>(&self.id)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Nullable<Text>>, _>(&self.expected_state)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Text>, _>(&self.state)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Nullable<Text>>, _>(&self.instance_id)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Nullable<Text>>, _>(&self.zone)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Text>, _>(&self.status_message)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Integer>, _>(&self.attempts)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Text>, _>(&self.zones_failed)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Integer>, _>(&self.bootstrap_attempts)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Integer>, _>(&self.stop_failures)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Integer>, _>(&self.provisioning_rounds)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Nullable<Text>>, _>(&self.constraints)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Nullable<Text>>, _>(&self.base)?;
        for (keep, value) in &self.kept_text {
            out.push_sql(", ");
            out.push_bind_param::<Array<Bool>, _>(keep)?;
            out.push_sql(", ");
            out.push_bind_param::<Array<Nullable<Text>>, _>(value)?;
        }
        out.push_sql(", ");
        out.push_bind_param::<Array<Bool>, _>(&self.otp_keeps_earlier)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Bool>, _>(&self.keep_addresses)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Text>, _>(&self.addresses)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Bool>, _>(&self.keep_retry_at_ms)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Nullable<BigInt>>, _>(&self.retry_at_ms)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Nullable<Text>>, _>(&self.credential_hash)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Nullable<BigInt>>, _>(&self.last_heartbeat_ms)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Nullable<Text>>, _>(&self.spread_kind)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Bool>, _>(&self.unfenced)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Text>, _>(&self.holder)?;
        out.push_sql(
            ") AS v(id, expected_state, state, instance_id, zone, status_message, attempts, \
             zones_failed, bootstrap_attempts, stop_failures, provisioning_rounds, constraints, \
             base",
        );
        for column in KEPT_TEXT_COLUMNS {
            out.push_sql(&format!(", keep_{column}, {column}"));
        }
        out.push_sql(
            ", otp_keeps_earlier, keep_addresses, addresses, keep_retry_at_ms, retry_at_ms, credential_hash, \
             last_heartbeat_ms, spread_kind, unfenced, holder) \
             WHERE m.id = v.id AND m.state = COALESCE(v.expected_state, m.state) \
             AND (v.unfenced OR (m.lease_holder = v.holder AND m.lease_expires_ms >= ",
        );
        out.push_bind_param::<BigInt, _>(&self.now_ms)?;
        out.push_sql(")) RETURNING m.id");
        Ok(())
    }
}

impl<Conn> RunQueryDsl<Conn> for SaveMachines<'_> {}

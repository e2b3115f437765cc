//! Machine operations: add-machine, remove-machine, retry-provisioning, and
//! the engine's own writes (transitions, instance details, agent check-in).

use diesel::prelude::*;

use crate::domain::base::Base;
use crate::domain::constraints::{merge, Constraints};
use crate::domain::machine::{
    transition, Effect, Event, Jitter, Machine, MachineRole, MachineState, Policy,
};
use crate::domain::names::{ContainerType, MachineId};
use crate::domain::placement::Placement;
use crate::store::db::Conn;
use crate::store::records::{stored, to_i64, MachineRecord, MachineRow};
use crate::store::schema::{machines, model, units};
use crate::store::writer::Tx;
use crate::store::{model_constraints_tx, ChangeKind, Entity, Origin, Store, StoreError};

/// What `add-machine` asks for. The default is one workload machine of the
/// default base with the model's constraints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddMachines {
    /// Combined with the model's constraints (the model fills what these
    /// leave unset).
    pub constraints: Constraints,
    pub base: Option<Base>,
    pub placement: Option<Placement>,
    pub count: u32,
    pub role: Option<MachineRole>,
}

impl Default for AddMachines {
    fn default() -> Self {
        AddMachines {
            constraints: Constraints::default(),
            base: None,
            placement: None,
            count: 1,
            role: None,
        }
    }
}

/// Where a new machine goes: a fresh top-level machine, or a container on
/// an existing one.
pub(crate) enum NewMachine<'a> {
    TopLevel { placement: Option<&'a Placement> },
    Container { host: MachineId },
}

pub(crate) fn load_machine(tx: &mut Tx<'_>, id: &MachineId) -> Result<MachineRecord, StoreError> {
    let row: Option<MachineRow> = machines::table
        .find(id.to_string())
        .select(MachineRow::as_select())
        .get_result(tx.conn)
        .optional()?;
    row.ok_or_else(|| StoreError::NotFound(format!("machine {id} not found")))?
        .try_into()
}

/// Takes the next top-level machine number. The update comes first so that
/// its row lock orders concurrent writers (several controllers sharing one
/// PostgreSQL database never hand out one number twice).
fn next_machine_number(tx: &mut Tx<'_>) -> Result<u64, StoreError> {
    diesel::update(model::table.find(1))
        .set(model::next_machine.eq(model::next_machine + 1))
        .execute(tx.conn)?;
    let next: i64 = model::table
        .find(1)
        .select(model::next_machine)
        .get_result(tx.conn)?;
    u64::try_from(next - 1).map_err(|_| StoreError::Invariant(format!("next machine {next}")))
}

fn next_container_number(tx: &mut Tx<'_>, host: &MachineId) -> Result<u64, StoreError> {
    let key = host.to_string();
    diesel::update(machines::table.find(&key))
        .set(machines::next_container.eq(machines::next_container + 1))
        .execute(tx.conn)?;
    let next: i64 = machines::table
        .find(&key)
        .select(machines::next_container)
        .get_result(tx.conn)?;
    u64::try_from(next - 1).map_err(|_| StoreError::Invariant(format!("next container {next}")))
}

/// Checks that `host` can take a new container.
pub(crate) fn check_container_host(
    tx: &mut Tx<'_>,
    host: &MachineId,
) -> Result<MachineRecord, StoreError> {
    let record = load_machine(tx, host)?;
    if record.id.is_container() {
        return Err(StoreError::Invalid(format!(
            "machine {host} is a container and cannot host containers"
        )));
    }
    if matches!(
        record.state(),
        MachineState::Dying | MachineState::Stopping | MachineState::Dead
    ) {
        return Err(StoreError::Conflict(format!(
            "machine {host} is being removed"
        )));
    }
    Ok(record)
}

/// Inserts one new machine, pending, and records it in the change log.
pub(crate) fn create_machine(
    tx: &mut Tx<'_>,
    kind: NewMachine<'_>,
    base: &Base,
    constraints: &Constraints,
    role: MachineRole,
) -> Result<MachineId, StoreError> {
    let (id, parent, placement) = match kind {
        NewMachine::TopLevel { placement } => (
            MachineId::new(next_machine_number(tx)?),
            None,
            placement.map(ToString::to_string),
        ),
        NewMachine::Container { host } => {
            let k = next_container_number(tx, &host)?;
            (
                MachineId::lxd_container(host.host_number(), k),
                Some(host.to_string()),
                None,
            )
        }
    };
    diesel::insert_into(machines::table)
        .values((
            machines::id.eq(id.to_string()),
            machines::host_number.eq(to_i64(id.host_number())?),
            machines::container_number.eq(id.container_number().map(to_i64).transpose()?),
            machines::parent_id.eq(parent),
            machines::container_type.eq(id.is_container().then(|| ContainerType::Lxd.to_string())),
            machines::base.eq(base.to_string()),
            machines::constraints.eq(constraints.to_string()),
            machines::placement.eq(placement),
            machines::role.eq(role.as_str()),
            machines::state.eq(MachineState::Pending.as_str()),
            machines::created_at_ms.eq(tx.now_ms),
            machines::updated_at_ms.eq(tx.now_ms),
        ))
        .execute(tx.conn)?;
    tx.record(
        Entity::Machine,
        id.to_string(),
        ChangeKind::Created,
        "state=pending",
    );
    Ok(id)
}

fn add_machines_tx(tx: &mut Tx<'_>, request: &AddMachines) -> Result<Vec<MachineId>, StoreError> {
    if request.count == 0 {
        return Err(StoreError::Invalid(
            "the number of machines must be at least 1".into(),
        ));
    }
    let constraints = merge(&model_constraints_tx(tx)?, &request.constraints);
    let base = request.base.unwrap_or_default();
    let role = request.role.unwrap_or(MachineRole::Workload);
    let mut added = Vec::new();
    for _ in 0..request.count {
        let id = match &request.placement {
            Some(Placement::Machine(id)) => {
                return Err(StoreError::Invalid(format!(
                    "machine-id {id} cannot be specified when adding machines"
                )))
            }
            Some(Placement::NewContainer { host: Some(host) }) => {
                let host = MachineId::new(*host);
                check_container_host(tx, &host)?;
                create_machine(
                    tx,
                    NewMachine::Container { host },
                    &base,
                    &constraints,
                    role,
                )?
            }
            Some(Placement::NewContainer { host: None }) => {
                // The host is made without a unit: it takes the model's
                // constraints.
                let model = model_constraints_tx(tx)?;
                let host = create_machine(
                    tx,
                    NewMachine::TopLevel { placement: None },
                    &base,
                    &model,
                    role,
                )?;
                create_machine(
                    tx,
                    NewMachine::Container { host },
                    &base,
                    &constraints,
                    role,
                )?
            }
            placement => create_machine(
                tx,
                NewMachine::TopLevel {
                    placement: placement.as_ref(),
                },
                &base,
                &constraints,
                role,
            )?,
        };
        added.push(id);
    }
    Ok(added)
}

/// Units (by name) hosted on a machine or on its containers.
fn hosted_units(tx: &mut Tx<'_>, id: &MachineId) -> Result<Vec<String>, StoreError> {
    let mut ids = vec![id.to_string()];
    ids.extend(child_machines(tx, id)?);
    Ok(units::table
        .filter(units::machine_id.eq_any(&ids))
        .filter(units::principal.is_null())
        .select(units::name)
        .order(units::name.asc())
        .load(tx.conn)?)
}

fn child_machines(tx: &mut Tx<'_>, id: &MachineId) -> Result<Vec<String>, StoreError> {
    Ok(machines::table
        .filter(machines::parent_id.eq(id.to_string()))
        .select(machines::id)
        .load(tx.conn)?)
}

/// Applies the lifecycle's `destroy` to one machine (not its containers):
/// a machine that never had an instance goes at once; one with an instance
/// is left stopping (or dying) for the engine to stop it.
fn destroy_machine(tx: &mut Tx<'_>, id: &MachineId) -> Result<(), StoreError> {
    let record = load_machine(tx, id)?;
    let step = transition(
        &record.machine,
        &Event::Destroy,
        &Policy::default(),
        Jitter::NONE,
    )
    .map_err(|e| StoreError::Conflict(format!("cannot remove machine {id}: {e}")))?;
    diesel::delete(units::table.filter(units::machine_id.eq(id.to_string()))).execute(tx.conn)?;
    if step.effect == Effect::RemoveFromState {
        delete_machine_row(tx, id)
    } else {
        save_machine_tx(tx, id, &step.next, &MachineUpdate::default())
    }
}

pub(crate) fn delete_machine_row(tx: &mut Tx<'_>, id: &MachineId) -> Result<(), StoreError> {
    diesel::delete(machines::table.find(id.to_string())).execute(tx.conn)?;
    tx.record(Entity::Machine, id.to_string(), ChangeKind::Removed, "");
    Ok(())
}

fn remove_machine_tx(tx: &mut Tx<'_>, id: &MachineId, force: bool) -> Result<(), StoreError> {
    load_machine(tx, id)?;
    let hosted = hosted_units(tx, id)?;
    let containers = child_machines(tx, id)?;
    if !force {
        if !hosted.is_empty() {
            return Err(StoreError::Conflict(format!(
                "machine {id} is hosting units {}: remove them first, or use --force",
                hosted.join(", ")
            )));
        }
        if !containers.is_empty() {
            return Err(StoreError::Conflict(format!(
                "machine {id} is hosting containers {}: remove them first, or use --force",
                containers.join(", ")
            )));
        }
    }
    for unit in &hosted {
        crate::store::units::delete_unit_rows(tx, unit)?;
    }
    for container in containers {
        destroy_machine(tx, &stored("machine id", &container)?)?;
    }
    destroy_machine(tx, id)
}

fn retry_tx(
    tx: &mut Tx<'_>,
    ids: &[MachineId],
    constraints: Option<&Constraints>,
) -> Result<Vec<MachineId>, StoreError> {
    for id in ids {
        let record = load_machine(tx, id)?;
        let event = Event::Retry {
            constraints: constraints.cloned().map(Box::new),
        };
        let step = transition(&record.machine, &event, &Policy::default(), Jitter::NONE).map_err(|_| {
            StoreError::Conflict(format!(
                "machine {id} is not in provisioning error (it is {}): only machines in error can be retried",
                record.state()
            ))
        })?;
        let update = MachineUpdate {
            constraints: constraints.cloned(),
            clear_retry_at: true,
            ..MachineUpdate::default()
        };
        save_machine_tx(tx, id, &step.next, &update)?;
    }
    Ok(ids.to_vec())
}

/// Fields that change beside the lifecycle record when the engine (or a
/// user operation) saves a machine.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MachineUpdate {
    pub constraints: Option<Constraints>,
    pub instance_type: Option<String>,
    pub hardware: Option<String>,
    /// A fresh one-time password's hash, for a launch.
    pub otp_hash: Option<String>,
    pub retry_at_ms: Option<i64>,
    pub clear_retry_at: bool,
    /// The agent exchanged its one-time password: the password's hash goes
    /// and this credential's hash takes its place, in the same statement
    /// as the transition to `started`.
    pub credential_hash: Option<String>,
    /// When the agent was last heard from, if it was just now.
    pub heartbeat_ms: Option<i64>,
}

/// The machine save: one `UPDATE` of one shape whatever it changes, so the
/// connection prepares it once and keeps it. diesel's own `UPDATE`s are
/// never kept in its statement cache (their `SET` lists vary), and
/// preparing the save again for every transition was most of its cost.
///
/// Columns every save writes are bound as they are. The others come in
/// pairs: `keep_*` leaves the column alone when true, otherwise it becomes
/// the value (which may be `NULL`, to clear it). `expected_state`, when
/// given, is the state the machine must still be in.
struct SaveMachine<'a> {
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
    updated_at_ms: i64,
    constraints: Option<&'a str>,
    instance_type: Kept<&'a str>,
    hardware: Kept<&'a str>,
    otp_hash: Kept<&'a str>,
    retry_at_ms: Kept<i64>,
    credential_hash: Option<&'a str>,
    last_heartbeat_ms: Option<i64>,
}

/// A nullable column a save may leave alone (`keep`) or set (`value`,
/// `None` clearing it).
struct Kept<T> {
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

impl diesel::query_builder::QueryId for SaveMachine<'_> {
    type QueryId = SaveMachine<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<DB> diesel::query_builder::QueryFragment<DB> for SaveMachine<'_>
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
        out.push_sql(", instance_id = ");
        out.push_bind_param::<Nullable<Text>, _>(&self.instance_id)?;
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
        out.push_sql(", updated_at_ms = ");
        out.push_bind_param::<BigInt, _>(&self.updated_at_ms)?;
        out.push_sql(", constraints = COALESCE(");
        out.push_bind_param::<Nullable<Text>, _>(&self.constraints)?;
        out.push_sql(", constraints)");
        for (column, kept) in [
            ("instance_type", &self.instance_type),
            ("hardware", &self.hardware),
            ("otp_hash", &self.otp_hash),
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
        out.push_sql(", retry_at_ms = CASE WHEN ");
        out.push_bind_param::<Bool, _>(&self.retry_at_ms.keep)?;
        out.push_sql(" THEN retry_at_ms ELSE ");
        out.push_bind_param::<Nullable<BigInt>, _>(&self.retry_at_ms.value)?;
        out.push_sql(" END, credential_hash = COALESCE(");
        out.push_bind_param::<Nullable<Text>, _>(&self.credential_hash)?;
        out.push_sql(", credential_hash), last_heartbeat_ms = COALESCE(");
        out.push_bind_param::<Nullable<BigInt>, _>(&self.last_heartbeat_ms)?;
        out.push_sql(", last_heartbeat_ms) WHERE id = ");
        out.push_bind_param::<Text, _>(self.id)?;
        out.push_sql(" AND state = COALESCE(");
        out.push_bind_param::<Nullable<Text>, _>(&self.expected_state)?;
        out.push_sql(", state)");
        Ok(())
    }
}

impl<Conn> RunQueryDsl<Conn> for SaveMachine<'_> {}

fn saturating_i32(value: u32) -> i32 {
    i32::try_from(value).unwrap_or(i32::MAX)
}

/// Writes a machine's lifecycle (and any extra fields) in one statement and
/// logs the change.
pub(crate) fn save_machine_tx(
    tx: &mut Tx<'_>,
    id: &MachineId,
    machine: &Machine,
    update: &MachineUpdate,
) -> Result<(), StoreError> {
    save_machine_from(tx, id, None, machine, update)
}

/// [`save_machine_tx`], but only if the machine is still in `expected`
/// (when given): the check is the UPDATE's own `WHERE`, so a save costs one
/// statement, and only a save that changed nothing looks at why.
///
/// # Errors
///
/// [`StoreError::NotFound`] if the machine has gone;
/// [`StoreError::Conflict`] if it is no longer in `expected`.
pub(crate) fn save_machine_from(
    tx: &mut Tx<'_>,
    id: &MachineId,
    expected: Option<MachineState>,
    machine: &Machine,
    update: &MachineUpdate,
) -> Result<(), StoreError> {
    let life = &machine.lifecycle;
    let key = id.to_string();
    let has_instance = life.instance_id.is_some();
    let zones_failed = life.zones_failed.join(",");
    let constraints = update.constraints.as_ref().map(ToString::to_string);
    let save = SaveMachine {
        id: &key,
        expected_state: expected.map(MachineState::as_str),
        state: machine.state.as_str(),
        instance_id: life.instance_id.as_deref(),
        zone: life.zone.as_deref(),
        status_message: life.last_error.as_deref().unwrap_or_default(),
        attempts: saturating_i32(life.attempts_used),
        zones_failed: &zones_failed,
        bootstrap_attempts: saturating_i32(life.bootstrap_timeouts),
        stop_failures: saturating_i32(life.stop_failures),
        updated_at_ms: tx.now_ms,
        constraints: constraints.as_deref(),
        // No instance, so nothing it was: clear what the last one had.
        instance_type: Kept::from(match (&update.instance_type, has_instance) {
            (Some(t), _) => Some(Some(t.as_str())),
            (None, false) => Some(None),
            (None, true) => None,
        }),
        hardware: Kept::from(match (&update.hardware, has_instance) {
            (Some(h), _) => Some(Some(h.as_str())),
            (None, false) => Some(None),
            (None, true) => None,
        }),
        otp_hash: Kept::from(match (&update.otp_hash, &update.credential_hash) {
            (Some(otp), _) => Some(Some(otp.as_str())),
            (None, Some(_)) => Some(None),
            (None, None) => None,
        }),
        retry_at_ms: Kept::from(
            (update.retry_at_ms.is_some() || update.clear_retry_at).then_some(update.retry_at_ms),
        ),
        credential_hash: update.credential_hash.as_deref(),
        last_heartbeat_ms: update.heartbeat_ms,
    };
    let found = match tx.conn {
        Conn::Sqlite(conn) => save.execute(conn)?,
        Conn::Postgres(conn) => save.execute(conn)?,
    };
    if found == 0 {
        let current: Option<String> = match expected {
            None => None,
            Some(_) => machines::table
                .find(&key)
                .select(machines::state)
                .get_result(tx.conn)
                .optional()?,
        };
        return Err(match (current, expected) {
            (Some(state), Some(expected)) => StoreError::Conflict(format!(
                "machine {id} is {state}, not {expected}: it changed meanwhile"
            )),
            _ => StoreError::NotFound(format!("machine {id} not found")),
        });
    }
    let mut detail = format!("state={}", machine.state);
    if let Some(zone) = &life.zone {
        detail.push_str(&format!(" zone={zone}"));
    }
    tx.record(Entity::Machine, key, ChangeKind::Updated, detail);
    Ok(())
}

impl Store {
    /// `add-machine`: `count` new machines (or containers), pending.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for a count of zero or a machine-id
    /// placement; [`StoreError::NotFound`] for an unknown container host.
    pub async fn add_machines(&self, request: AddMachines) -> Result<Vec<MachineId>, StoreError> {
        self.write(move |tx| add_machines_tx(tx, &request)).await
    }

    /// `remove-machine`: a machine that never had an instance (and its
    /// units, with `force`) is removed at once; one with an instance is left
    /// stopping, and the engine removes it once the instance is gone.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`]; [`StoreError::Conflict`] when the machine
    /// hosts units or containers and `force` is not given.
    pub async fn remove_machine(&self, id: MachineId, force: bool) -> Result<(), StoreError> {
        self.write(move |tx| remove_machine_tx(tx, &id, force))
            .await
    }

    /// `retry-provisioning`: machines in provisioning error become pending
    /// again, optionally with new constraints. All or nothing.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`]; [`StoreError::Conflict`] if any machine is
    /// not in provisioning error (and then none is changed).
    pub async fn retry(
        &self,
        ids: Vec<MachineId>,
        constraints: Option<Constraints>,
    ) -> Result<Vec<MachineId>, StoreError> {
        self.write(move |tx| retry_tx(tx, &ids, constraints.as_ref()))
            .await
    }

    /// `retry-provisioning --all`: every machine in provisioning error.
    ///
    /// # Errors
    ///
    /// As [`Store::retry`].
    pub async fn retry_all(
        &self,
        constraints: Option<Constraints>,
    ) -> Result<Vec<MachineId>, StoreError> {
        self.write(move |tx| {
            let ids: Vec<String> = machines::table
                .filter(machines::state.eq(MachineState::ProvisioningError.as_str()))
                .select(machines::id)
                .load(tx.conn)?;
            let ids = ids
                .iter()
                .map(|id| stored("machine id", id))
                .collect::<Result<Vec<MachineId>, _>>()?;
            retry_tx(tx, &ids, constraints.as_ref())
        })
        .await
    }

    /// The engine saves a machine after a transition, before acting on it,
    /// if the machine is still in the state `expected` that the transition
    /// started from.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`] if the machine has gone;
    /// [`StoreError::Conflict`] if someone else (a user's remove or retry)
    /// moved it meanwhile: the engine reloads it and decides again.
    pub async fn save_machine(
        &self,
        id: MachineId,
        expected: MachineState,
        machine: Machine,
        update: MachineUpdate,
    ) -> Result<(), StoreError> {
        self.write(move |tx| {
            tx.set_origin(Origin::Engine);
            save_machine_from(tx, &id, Some(expected), &machine, &update)
        })
        .await
    }

    /// The engine removes a machine whose instance is gone (its lifecycle
    /// said `remove from state`).
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] only; removing a machine already gone is
    /// not an error.
    pub async fn delete_machine(&self, id: MachineId) -> Result<(), StoreError> {
        self.write(move |tx| {
            tx.set_origin(Origin::Engine);
            diesel::delete(units::table.filter(units::machine_id.eq(id.to_string())))
                .execute(tx.conn)?;
            let gone = diesel::delete(machines::table.find(id.to_string())).execute(tx.conn)?;
            if gone > 0 {
                tx.record(Entity::Machine, id.to_string(), ChangeKind::Removed, "");
            }
            Ok(())
        })
        .await
    }

    /// One machine.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`].
    pub fn machine(&self, id: &MachineId) -> Result<MachineRecord, StoreError> {
        self.read(|conn| {
            let row: Option<MachineRow> = machines::table
                .find(id.to_string())
                .select(MachineRow::as_select())
                .get_result(conn)
                .optional()?;
            row.ok_or_else(|| StoreError::NotFound(format!("machine {id} not found")))?
                .try_into()
        })
    }

    /// Every machine, in id order (2 before 10, hosts before their
    /// containers).
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] or [`StoreError::Invariant`].
    pub fn machines(&self) -> Result<Vec<MachineRecord>, StoreError> {
        self.read(|conn| {
            let rows: Vec<MachineRow> = machines::table
                .select(MachineRow::as_select())
                .order((
                    machines::host_number.asc(),
                    machines::container_number.asc(),
                ))
                .load(conn)?;
            let mut records = rows
                .into_iter()
                .map(MachineRecord::try_from)
                .collect::<Result<Vec<_>, _>>()?;
            records.sort_by_key(|m| m.id);
            Ok(records)
        })
    }
}

/// A machine with the applications whose units it hosts: what the engine
/// needs to place it in its distribution group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineMachine {
    pub record: MachineRecord,
    pub applications: std::collections::BTreeSet<String>,
}

/// What a reconciliation needs of a machine, and no more: a start-up
/// with 100,000 machines reads this for each of them, and full records
/// only for the machines that get an actor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineSummary {
    pub id: MachineId,
    pub state: MachineState,
    pub role: MachineRole,
    pub instance_id: Option<String>,
    pub zone: Option<String>,
    /// The applications of its units. Machines with the same set share
    /// one copy.
    pub applications: std::sync::Arc<std::collections::BTreeSet<String>>,
}

/// The applications of the units on each machine, from `(machine, application)`
/// rows of units (a unit without a machine has none).
fn applications_by_machine(
    placements: Vec<(Option<String>, String)>,
) -> std::collections::HashMap<String, std::collections::BTreeSet<String>> {
    let mut by_machine: std::collections::HashMap<String, std::collections::BTreeSet<String>> =
        std::collections::HashMap::new();
    for (machine, application) in placements {
        if let Some(machine) = machine {
            by_machine.entry(machine).or_default().insert(application);
        }
    }
    by_machine
}

/// Most ids one `IN (...)` list carries (SQLite's parameter limit is 32766).
const IDS_PER_QUERY: usize = 1000;

impl Store {
    /// Machines (all of them, or those with the given ids) with the
    /// applications of the units on them.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] or [`StoreError::Invariant`].
    pub fn engine_machines(
        &self,
        ids: Option<&[MachineId]>,
    ) -> Result<Vec<EngineMachine>, StoreError> {
        self.read(|conn| {
            let (rows, placements): (Vec<MachineRow>, Vec<(Option<String>, String)>) = match ids {
                None => (
                    machines::table.select(MachineRow::as_select()).load(conn)?,
                    units::table
                        .select((units::machine_id, units::application))
                        .load(conn)?,
                ),
                Some(ids) => {
                    let keys: Vec<String> = ids.iter().map(ToString::to_string).collect();
                    let mut rows = Vec::new();
                    let mut placements = Vec::new();
                    for chunk in keys.chunks(IDS_PER_QUERY) {
                        rows.extend(
                            machines::table
                                .filter(machines::id.eq_any(chunk))
                                .select(MachineRow::as_select())
                                .load::<MachineRow>(conn)?,
                        );
                        placements.extend(
                            units::table
                                .filter(units::machine_id.eq_any(chunk))
                                .select((units::machine_id, units::application))
                                .load::<(Option<String>, String)>(conn)?,
                        );
                    }
                    (rows, placements)
                }
            };
            let mut by_machine = applications_by_machine(placements);
            let mut machines = rows
                .into_iter()
                .map(|row| {
                    let applications = by_machine.remove(&row.id).unwrap_or_default();
                    Ok(EngineMachine {
                        record: MachineRecord::try_from(row)?,
                        applications,
                    })
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            machines.sort_by_key(|m| m.record.id);
            Ok(machines)
        })
    }

    /// Every machine, in id order, as a reconciliation sees it.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] or [`StoreError::Invariant`].
    pub fn machine_summaries(&self) -> Result<Vec<MachineSummary>, StoreError> {
        use std::collections::{BTreeSet, HashSet};
        use std::sync::Arc;
        type Row = (String, String, String, Option<String>, Option<String>);
        self.read(|conn| {
            let rows: Vec<Row> = machines::table
                .select((
                    machines::id,
                    machines::state,
                    machines::role,
                    machines::instance_id,
                    machines::zone,
                ))
                .load(conn)?;
            let placements: Vec<(Option<String>, String)> = units::table
                .select((units::machine_id, units::application))
                .load(conn)?;
            let mut by_machine = applications_by_machine(placements);
            let mut shared: HashSet<Arc<BTreeSet<String>>> = HashSet::new();
            let mut summaries = rows
                .into_iter()
                .map(|(id, state, role, instance_id, zone)| {
                    let applications = by_machine.remove(&id).unwrap_or_default();
                    let applications = match shared.get(&applications) {
                        Some(same) => Arc::clone(same),
                        None => {
                            let new = Arc::new(applications);
                            shared.insert(Arc::clone(&new));
                            new
                        }
                    };
                    Ok(MachineSummary {
                        id: stored("machine id", &id)?,
                        state: stored("machine state", &state)?,
                        role: MachineRole::parse(&role).ok_or_else(|| {
                            StoreError::Invariant(format!("machine role {role:?}"))
                        })?,
                        instance_id,
                        zone,
                        applications,
                    })
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            summaries.sort_by_key(|m| m.id);
            Ok(summaries)
        })
    }

    /// The machine that holds `instance_id`, if any.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] or [`StoreError::Invariant`].
    pub fn machine_by_instance(
        &self,
        instance_id: &str,
    ) -> Result<Option<MachineRecord>, StoreError> {
        self.read(|conn| {
            let row: Option<MachineRow> = machines::table
                .filter(machines::instance_id.eq(instance_id))
                .select(MachineRow::as_select())
                .get_result(conn)
                .optional()?;
            row.map(MachineRecord::try_from).transpose()
        })
    }

    /// The machine that holds `instance_id`, with its applications.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] or [`StoreError::Invariant`].
    pub fn engine_machines_by_instance(
        &self,
        instance_id: &str,
    ) -> Result<Option<EngineMachine>, StoreError> {
        let Some(record) = self.machine_by_instance(instance_id)? else {
            return Ok(None);
        };
        Ok(self.engine_machines(Some(&[record.id]))?.into_iter().next())
    }

    /// Started machines whose agent was last heard from before `before_ms`.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] or [`StoreError::Invariant`].
    pub fn silent_agents(&self, before_ms: i64) -> Result<Vec<MachineRecord>, StoreError> {
        self.read(|conn| {
            let rows: Vec<MachineRow> = machines::table
                .filter(machines::state.eq(MachineState::Started.as_str()))
                .filter(machines::last_heartbeat_ms.lt(before_ms))
                .select(MachineRow::as_select())
                .load(conn)?;
            rows.into_iter().map(MachineRecord::try_from).collect()
        })
    }
}

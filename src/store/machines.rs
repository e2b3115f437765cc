//! Machine operations: add-machine, remove-machine, retry-provisioning, and
//! the engine's own writes (transitions, instance details, agent check-in).

use std::collections::{BTreeMap, BTreeSet};

use diesel::prelude::*;

use crate::domain::base::Base;
use crate::domain::constraints::{merge, Constraints};
use crate::domain::machine::{Event, MachineRole, MachineState, Policy};
use crate::domain::names::{ApplicationName, ContainerType, MachineId};
use crate::domain::placement::{Placement, SshTarget};
use crate::domain::reconcile::MachineSummary;
use crate::store::db::{per_backend, AmongKeys, KEYS_PER_LIST, ROWS_PER_INSERT};
use crate::store::lifecycle::{apply_tx, load_machine, MachineEvent, MachineUpdate};
use crate::store::records::{stored, stored_role, to_i64, MachineRecord, MachineRow};
use crate::store::schema::{machines, model, units};
use crate::store::units::load_application;
use crate::store::writer::Tx;
use crate::store::{
    model_constraints_tx, ChangeKind, Entity, Store, StoreError, IDS_PER_STATEMENT,
};

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

/// Takes the next `count` top-level machine numbers and returns the first.
/// The update comes first so that its row lock orders concurrent writers
/// (several controllers sharing one PostgreSQL database never hand out one
/// number twice).
fn reserve_machine_numbers(tx: &mut Tx<'_>, count: u32) -> Result<u64, StoreError> {
    diesel::update(model::table.find(1))
        .set(model::next_machine.eq(model::next_machine + i64::from(count)))
        .execute(tx.conn)?;
    let next: i64 = model::table
        .find(1)
        .select(model::next_machine)
        .get_result(tx.conn)?;
    u64::try_from(next - i64::from(count))
        .map_err(|_| StoreError::Invariant(format!("next machine {next}")))
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
    if let Some(Placement::Ssh(target)) = &record.placement {
        return Err(StoreError::Invalid(format!(
            "machine {host} is the existing host {} enlisted over ssh; berth cannot start containers on it",
            target.host()
        )));
    }
    Ok(record)
}

/// `place-with=<application>`: of the machines running a unit of
/// `application` (a unit in a container counts for its host) that can host
/// a container, the one with the fewest units, then the lowest id.
///
/// # Errors
///
/// [`StoreError::NotFound`] for an unknown application;
/// [`StoreError::Invalid`] if none of its units' machines can host a
/// container.
fn least_loaded_host_of(
    tx: &mut Tx<'_>,
    application: &ApplicationName,
) -> Result<MachineId, StoreError> {
    load_application(tx, application)?;
    let placed: Vec<(String, Option<String>)> = units::table
        .filter(units::machine_id.is_not_null())
        .select((units::application, units::machine_id))
        .load(tx.conn)?;
    let mut load: BTreeMap<MachineId, usize> = BTreeMap::new();
    let mut hosts = BTreeSet::new();
    for (app, machine) in placed {
        let Some(machine) = machine else { continue };
        let host = MachineId::new(stored::<MachineId>("machine id", &machine)?.host_number());
        *load.entry(host).or_default() += 1;
        if app == application.as_str() {
            hosts.insert(host);
        }
    }
    let mut refused = Vec::new();
    let mut candidates: Vec<(usize, MachineId)> = Vec::new();
    for host in hosts {
        match check_container_host(tx, &host) {
            Ok(_) => candidates.push((load.get(&host).copied().unwrap_or(0), host)),
            Err(e) => refused.push(e.to_string()),
        }
    }
    candidates.sort();
    match candidates.first() {
        Some((_, host)) => Ok(*host),
        None if refused.is_empty() => Err(StoreError::Invalid(format!(
            "cannot place with application {:?}: it has no units on machines yet",
            application.as_str()
        ))),
        None => Err(StoreError::Invalid(format!(
            "cannot place with application {:?}: none of its machines can host a container ({})",
            application.as_str(),
            refused.join("; ")
        ))),
    }
}

/// Refuses to enlist a host that a machine of the model already is
/// (whatever user or port reached it).
fn check_not_enlisted(tx: &mut Tx<'_>, target: &SshTarget) -> Result<(), StoreError> {
    let enlisted: Vec<(String, Option<String>)> = machines::table
        .filter(machines::placement.like("ssh:%"))
        .select((machines::id, machines::placement))
        .load(tx.conn)?;
    for (id, placement) in enlisted {
        let same = placement
            .and_then(|p| p.parse::<Placement>().ok())
            .is_some_and(|p| matches!(p, Placement::Ssh(other) if other.same_host(target)));
        if same {
            return Err(StoreError::Conflict(format!(
                "host {} is already enlisted as machine {id}",
                target.host()
            )));
        }
    }
    Ok(())
}

/// The row of a new machine, pending.
fn new_machine_row(
    id: MachineId,
    parent: Option<String>,
    placement: Option<String>,
    base: &Base,
    constraints: &Constraints,
    role: MachineRole,
    now_ms: i64,
) -> Result<NewMachineRow, StoreError> {
    Ok((
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
        machines::created_at_ms.eq(now_ms),
        machines::updated_at_ms.eq(now_ms),
    ))
}

/// What [`new_machine_row`] makes.
type NewMachineRow = (
    diesel::dsl::Eq<machines::id, String>,
    diesel::dsl::Eq<machines::host_number, i64>,
    diesel::dsl::Eq<machines::container_number, Option<i64>>,
    diesel::dsl::Eq<machines::parent_id, Option<String>>,
    diesel::dsl::Eq<machines::container_type, Option<String>>,
    diesel::dsl::Eq<machines::base, String>,
    diesel::dsl::Eq<machines::constraints, String>,
    diesel::dsl::Eq<machines::placement, Option<String>>,
    diesel::dsl::Eq<machines::role, &'static str>,
    diesel::dsl::Eq<machines::state, &'static str>,
    diesel::dsl::Eq<machines::created_at_ms, i64>,
    diesel::dsl::Eq<machines::updated_at_ms, i64>,
);

/// Records a new machine in the change log.
pub(crate) fn record_new_machine(tx: &mut Tx<'_>, id: &MachineId) {
    tx.record(
        Entity::Machine,
        id.to_string(),
        ChangeKind::Created,
        "state=pending",
    );
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
            MachineId::new(reserve_machine_numbers(tx, 1)?),
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
        .values(new_machine_row(
            id,
            parent,
            placement,
            base,
            constraints,
            role,
            tx.now_ms,
        )?)
        .execute(tx.conn)?;
    record_new_machine(tx, &id);
    Ok(id)
}

/// Inserts `count` new top-level machines with no placement, pending, in
/// a few multi-row statements, and returns their ids in order. The caller
/// records each in the change log ([`record_new_machine`]), in the order
/// it wants them there.
pub(crate) fn insert_unplaced_machines(
    tx: &mut Tx<'_>,
    count: u32,
    base: &Base,
    constraints: &Constraints,
    role: MachineRole,
) -> Result<Vec<MachineId>, StoreError> {
    if count == 0 {
        return Ok(Vec::new());
    }
    let first = reserve_machine_numbers(tx, count)?;
    let ids: Vec<MachineId> = (first..first + u64::from(count))
        .map(MachineId::new)
        .collect();
    let rows = ids
        .iter()
        .map(|id| new_machine_row(*id, None, None, base, constraints, role, tx.now_ms))
        .collect::<Result<Vec<_>, _>>()?;
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        let insert = diesel::insert_into(machines::table).values(chunk);
        per_backend!(tx.conn, c => insert.execute(c)?);
    }
    Ok(ids)
}

/// Creates the machine a placement asks for: a container on a named host,
/// a container on a new host, or a new top-level machine (in the zone the
/// placement names, if any). An existing machine (`Placement::Machine`) is
/// not created: callers that accept one handle it first.
///
/// A new container host is made without a unit, so it takes the model's
/// constraints; the container takes `constraints`.
///
/// # Errors
///
/// [`StoreError::Invalid`] for a machine-id placement or a host that is a
/// container; [`StoreError::NotFound`] for an unknown host;
/// [`StoreError::Conflict`] for a host being removed.
pub(crate) fn create_placed_machine(
    tx: &mut Tx<'_>,
    placement: Option<&Placement>,
    base: &Base,
    constraints: &Constraints,
    role: MachineRole,
) -> Result<MachineId, StoreError> {
    match placement {
        Some(Placement::Machine(id)) => Err(StoreError::Invalid(format!(
            "machine-id {id} cannot be specified when adding machines"
        ))),
        Some(Placement::NewContainer { host: Some(host) } | Placement::PlaceIn { host }) => {
            let host = MachineId::new(*host);
            check_container_host(tx, &host)?;
            create_machine(tx, NewMachine::Container { host }, base, constraints, role)
        }
        Some(Placement::ScaleWith(_)) => Err(StoreError::Invalid(format!(
            "{} is a deploy directive: it places a whole application",
            placement.map(ToString::to_string).unwrap_or_default()
        ))),
        Some(Placement::PlaceWith(application)) => {
            let host = least_loaded_host_of(tx, application)?;
            create_machine(tx, NewMachine::Container { host }, base, constraints, role)
        }
        Some(Placement::NewContainer { host: None }) => {
            let model = model_constraints_tx(tx)?;
            let host = create_machine(
                tx,
                NewMachine::TopLevel { placement: None },
                base,
                &model,
                role,
            )?;
            create_machine(tx, NewMachine::Container { host }, base, constraints, role)
        }
        Some(Placement::Ssh(target)) => {
            check_not_enlisted(tx, target)?;
            create_machine(
                tx,
                NewMachine::TopLevel { placement },
                base,
                constraints,
                role,
            )
        }
        placement => create_machine(
            tx,
            NewMachine::TopLevel { placement },
            base,
            constraints,
            role,
        ),
    }
}

/// Deletes a unit, the subordinate units beside it and the units that
/// scale with it (a unit goes with the machine that hosts it, with
/// `remove-unit` and with its application). A unit already gone is left
/// alone.
pub(crate) fn delete_unit_rows(tx: &mut Tx<'_>, unit: &str) -> Result<(), StoreError> {
    let followers: Vec<String> = units::table
        .filter(units::follows.eq(unit))
        .select(units::name)
        .load(tx.conn)?;
    for follower in followers {
        delete_unit_rows(tx, &follower)?;
    }
    let subordinates: Vec<String> = units::table
        .filter(units::principal.eq(unit))
        .select(units::name)
        .load(tx.conn)?;
    for name in subordinates {
        diesel::delete(units::table.find(&name)).execute(tx.conn)?;
        tx.record(Entity::Unit, name, ChangeKind::Removed, "");
    }
    let machine: Option<Option<String>> = units::table
        .find(unit)
        .select(units::machine_id)
        .get_result(tx.conn)
        .optional()?;
    if diesel::delete(units::table.find(unit)).execute(tx.conn)? > 0 {
        tx.record(Entity::Unit, unit, ChangeKind::Removed, "");
    }
    if let Some(Some(machine)) = machine {
        crate::store::census::recount(tx, &machine)?;
    }
    Ok(())
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
    if request.placement.is_none() {
        let added = insert_unplaced_machines(tx, request.count, &base, &constraints, role)?;
        for id in &added {
            record_new_machine(tx, id);
        }
        return Ok(added);
    }
    let mut added = Vec::new();
    for _ in 0..request.count {
        let id = create_placed_machine(tx, request.placement.as_ref(), &base, &constraints, role)?;
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
fn destroy_machine(tx: &mut Tx<'_>, id: &MachineId, policy: &Policy) -> Result<(), StoreError> {
    apply_tx(tx, MachineEvent::new(*id, Event::Destroy), policy)?;
    // Its units go with it, whether it goes at once or is left stopping.
    diesel::delete(units::table.filter(units::machine_id.eq(id.to_string()))).execute(tx.conn)?;
    Ok(())
}

fn remove_machine_tx(
    tx: &mut Tx<'_>,
    id: &MachineId,
    force: bool,
    policy: &Policy,
) -> Result<(), StoreError> {
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
        delete_unit_rows(tx, unit)?;
    }
    for container in containers {
        destroy_machine(tx, &stored("machine id", &container)?, policy)?;
    }
    destroy_machine(tx, id, policy)
}

fn retry_tx(
    tx: &mut Tx<'_>,
    ids: &[MachineId],
    constraints: Option<&Constraints>,
    policy: &Policy,
) -> Result<Vec<MachineId>, StoreError> {
    for id in ids {
        let event = Event::Retry {
            constraints: constraints.cloned().map(Box::new),
        };
        let request = MachineEvent {
            update: MachineUpdate {
                clear_retry_at: true,
                ..MachineUpdate::default()
            },
            ..MachineEvent::new(*id, event)
        };
        apply_tx(tx, request, policy)?;
    }
    Ok(ids.to_vec())
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
        let policy = self.policy();
        self.write(move |tx| remove_machine_tx(tx, &id, force, &policy))
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
        let policy = self.policy();
        self.write(move |tx| retry_tx(tx, &ids, constraints.as_ref(), &policy))
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
        let policy = self.policy();
        self.write(move |tx| {
            let ids: Vec<String> = machines::table
                .filter(machines::state.eq(MachineState::ProvisioningError.as_str()))
                .select(machines::id)
                .load(tx.conn)?;
            let ids = ids
                .iter()
                .map(|id| stored("machine id", id))
                .collect::<Result<Vec<MachineId>, _>>()?;
            retry_tx(tx, &ids, constraints.as_ref(), &policy)
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
            in_key_order(&mut records, |m| m.id);
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
                    for chunk in keys.chunks(KEYS_PER_LIST) {
                        rows.extend(
                            machines::table
                                .filter(AmongKeys::new(machines::id, chunk))
                                .select(MachineRow::as_select())
                                .load::<MachineRow>(conn)?,
                        );
                        placements.extend(
                            units::table
                                .filter(AmongKeys::new(units::machine_id.assume_not_null(), chunk))
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
            in_key_order(&mut machines, |m| m.record.id);
            Ok(machines)
        })
    }

    /// Records the addresses a provider now reports for machines' instances
    /// (machine, instance, addresses), for each machine that still has that
    /// instance; returns how many changed.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] only.
    pub async fn set_addresses(
        &self,
        changes: Vec<(MachineId, String, Vec<String>)>,
    ) -> Result<usize, StoreError> {
        self.write(move |tx| {
            let mut changed = 0;
            for (id, instance, addresses) in changes {
                let key = id.to_string();
                let joined = addresses.join(",");
                let updated = diesel::update(
                    machines::table
                        .find(&key)
                        .filter(machines::instance_id.eq(&instance))
                        .filter(machines::addresses.ne(&joined)),
                )
                .set((
                    machines::addresses.eq(&joined),
                    machines::updated_at_ms.eq(tx.now_ms),
                ))
                .execute(tx.conn)?;
                if updated > 0 {
                    changed += 1;
                    tx.record(
                        Entity::Machine,
                        key,
                        ChangeKind::Updated,
                        format!("addresses={joined}"),
                    );
                }
            }
            Ok(changed)
        })
        .await
    }

    /// Every machine, in id order, as a reconciliation sees it.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] or [`StoreError::Invariant`].
    pub fn machine_summaries(&self) -> Result<Vec<MachineSummary>, StoreError> {
        // Row by row, into a list of the size counted first: with 100,000
        // machines, gathering the rows first held an array of 19 MB and
        // their strings beside the result; with a million, a list grown by
        // doubling left its smaller copies behind.
        let count: i64 = self.read(|conn| Ok(machines::table.count().get_result(conn)?))?;
        let mut summaries = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
        self.each_machine_summary(|machine| summaries.push(machine))?;
        in_key_order(&mut summaries, |m| m.id);
        Ok(summaries)
    }

    /// Hands every machine, as a reconciliation sees it, to `each` as it
    /// is read (in no particular order), holding none: a comparison with
    /// a million machines need not hold their summaries.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] or [`StoreError::Invariant`]; `each` has
    /// then seen some of the machines.
    pub fn each_machine_summary(
        &self,
        mut each: impl FnMut(MachineSummary),
    ) -> Result<(), StoreError> {
        self.read(|conn| {
            let rows = machines::table
                .select(SummaryRow::as_select())
                .load_iter::<SummaryRow, diesel::connection::DefaultLoadingMode>(conn)?;
            for row in rows {
                each(summary_of(row?)?);
            }
            Ok(())
        })
    }

    /// The machines, in id order, as a reconciliation sees them, that
    /// record one of `instance_ids` or whose id is one of `machine_ids`:
    /// what it takes to tell whether those instances are strays, read
    /// without reading every machine.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] or [`StoreError::Invariant`].
    pub fn machine_summaries_of(
        &self,
        instance_ids: &[String],
        machine_ids: &[MachineId],
    ) -> Result<Vec<MachineSummary>, StoreError> {
        let machine_ids: Vec<String> = machine_ids.iter().map(ToString::to_string).collect();
        self.read(|conn| {
            let mut instances = instance_ids.chunks(IDS_PER_STATEMENT);
            let mut named = machine_ids.chunks(IDS_PER_STATEMENT);
            let mut rows: Vec<SummaryRow> = Vec::new();
            for _ in 0..instances.len().max(named.len()) {
                let (instances, named) = (
                    instances.next().unwrap_or_default(),
                    named.next().unwrap_or_default(),
                );
                rows.extend(
                    machines::table
                        .select(SummaryRow::as_select())
                        .filter(
                            machines::instance_id
                                .eq_any(instances)
                                .or(machines::id.eq_any(named)),
                        )
                        .load::<SummaryRow>(conn)?,
                );
            }
            let mut summaries = summaries_of(rows.len(), rows.into_iter().map(Ok))?;
            // A machine found by both lists in different statements.
            summaries.dedup_by_key(|m| m.id);
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
    /// The containers of machine `host`.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be read.
    pub fn container_ids(&self, host: &MachineId) -> Result<Vec<MachineId>, StoreError> {
        let host = host.to_string();
        self.read(|conn| {
            let ids: Vec<String> = machines::table
                .filter(machines::parent_id.eq(&host))
                .select(machines::id)
                .load(conn)?;
            ids.iter().map(|id| stored("machine id", id)).collect()
        })
    }

    pub fn engine_machines_by_instance(
        &self,
        instance_id: &str,
    ) -> Result<Option<EngineMachine>, StoreError> {
        let Some(record) = self.machine_by_instance(instance_id)? else {
            return Ok(None);
        };
        Ok(self.engine_machines(Some(&[record.id]))?.into_iter().next())
    }

    /// The started machines whose agent was last heard from before
    /// `before_ms` (see [`Store::agents_lost`], which shows them down).
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] or [`StoreError::Invariant`].
    pub fn silent_agents(&self, before_ms: i64) -> Result<Vec<MachineId>, StoreError> {
        self.read(|conn| {
            let ids: Vec<String> = machines::table
                .filter(machines::state.eq(MachineState::Started.as_str()))
                .filter(machines::last_heartbeat_ms.lt(before_ms))
                .select(machines::id)
                .load(conn)?;
            ids.iter().map(|id| stored("machine id", id)).collect()
        })
    }
}

/// A machine's columns that a reconciliation reads.
#[derive(Queryable, Selectable)]
#[diesel(table_name = machines)]
struct SummaryRow {
    id: String,
    state: String,
    role: String,
    instance_id: Option<String>,
    zone: Option<String>,
    addresses: String,
}

/// `rows` (about `count` of them) as summaries, each made as it comes, in
/// id order.
fn summaries_of(
    count: usize,
    rows: impl Iterator<Item = Result<SummaryRow, StoreError>>,
) -> Result<Vec<MachineSummary>, StoreError> {
    let mut summaries = Vec::with_capacity(count);
    for row in rows {
        summaries.push(summary_of(row?)?);
    }
    in_key_order(&mut summaries, |m| m.id);
    Ok(summaries)
}

/// Puts `list`, whose keys are unique (a table's key), in key order:
/// with an unstable sort, which takes no buffer (a stable one takes a
/// buffer of half the list), and none at all when the rows came in
/// order, as they mostly do.
pub(crate) fn in_key_order<T, K: Ord>(list: &mut [T], key: impl Fn(&T) -> K) {
    if !list.is_sorted_by_key(&key) {
        list.sort_unstable_by_key(key);
    }
}

/// One row as a summary.
fn summary_of(row: SummaryRow) -> Result<MachineSummary, StoreError> {
    Ok(MachineSummary::new(
        stored("machine id", &row.id)?,
        stored("machine state", &row.state)?,
        stored_role(&row.role)?,
        row.instance_id.as_deref(),
        row.zone.as_deref(),
        &row.addresses,
    ))
}

//! Unit operations: add-unit (with placement), remove-unit, and the
//! subordinate units that follow their principals.

use diesel::prelude::*;

use crate::domain::base::Base;
use crate::domain::constraints::{merge, Constraints};
use crate::domain::machine::{MachineRole, MachineState};
use crate::domain::names::{ApplicationName, MachineId, UnitName};
use crate::domain::placement::Placement;
use crate::store::db::{per_backend, ROWS_PER_INSERT};
use crate::store::lifecycle::load_machine;
use crate::store::machines::{
    create_placed_machine, delete_unit_rows, insert_unplaced_machines, record_new_machine,
};
use crate::store::records::{stored, ApplicationRecord, ApplicationRow, UnitRecord, UnitRow};
use crate::store::schema::{applications, relations, units};
use crate::store::writer::Tx;
use crate::store::{model_constraints_tx, ChangeKind, Entity, Store, StoreError};

/// A unit and the machine it was assigned to.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PlacedUnit {
    pub unit: UnitName,
    pub machine: MachineId,
}

pub(crate) fn load_application(
    tx: &mut Tx<'_>,
    name: &ApplicationName,
) -> Result<ApplicationRecord, StoreError> {
    let row: Option<ApplicationRow> = applications::table
        .find(name.as_str())
        .select(ApplicationRow::as_select())
        .get_result(tx.conn)
        .optional()?;
    row.ok_or_else(|| StoreError::NotFound(format!("application {:?} not found", name.as_str())))?
        .try_into()
}

/// Takes the next `count` unit numbers of `application` and returns the
/// first.
fn reserve_unit_numbers(
    tx: &mut Tx<'_>,
    application: &ApplicationName,
    count: u32,
) -> Result<u64, StoreError> {
    diesel::update(applications::table.find(application.as_str()))
        .set(applications::next_unit.eq(applications::next_unit + i64::from(count)))
        .execute(tx.conn)?;
    let next: i64 = applications::table
        .find(application.as_str())
        .select(applications::next_unit)
        .get_result(tx.conn)?;
    u64::try_from(next - i64::from(count))
        .map_err(|_| StoreError::Invariant(format!("next unit {next}")))
}

/// What [`new_unit_row`] makes.
type NewUnitRow = (
    diesel::dsl::Eq<units::name, String>,
    diesel::dsl::Eq<units::application, String>,
    diesel::dsl::Eq<units::number, i64>,
    diesel::dsl::Eq<units::base, String>,
    diesel::dsl::Eq<units::constraints, String>,
    diesel::dsl::Eq<units::machine_id, String>,
    diesel::dsl::Eq<units::principal, Option<String>>,
    diesel::dsl::Eq<units::life, &'static str>,
    diesel::dsl::Eq<units::agent_status, &'static str>,
    diesel::dsl::Eq<units::workload_status, &'static str>,
    diesel::dsl::Eq<units::created_at_ms, i64>,
);

/// The row of a new unit, allocating.
fn new_unit_row(
    name: &UnitName,
    base: &Base,
    constraints: &Constraints,
    machine: &MachineId,
    principal: Option<&UnitName>,
    now_ms: i64,
) -> Result<NewUnitRow, StoreError> {
    Ok((
        units::name.eq(name.to_string()),
        units::application.eq(name.application().as_str().to_string()),
        units::number.eq(crate::store::records::to_i64(name.number())?),
        units::base.eq(base.to_string()),
        units::constraints.eq(constraints.to_string()),
        units::machine_id.eq(machine.to_string()),
        units::principal.eq(principal.map(ToString::to_string)),
        units::life.eq("alive"),
        units::agent_status.eq("allocating"),
        units::workload_status.eq("waiting"),
        units::created_at_ms.eq(now_ms),
    ))
}

/// Records a new unit, on `machine`, in the change log.
fn record_new_unit(tx: &mut Tx<'_>, name: &UnitName, machine: &MachineId) {
    tx.record(
        Entity::Unit,
        name.to_string(),
        ChangeKind::Created,
        format!("machine={machine}"),
    );
}

fn insert_unit(
    tx: &mut Tx<'_>,
    application: &ApplicationName,
    base: &Base,
    constraints: &Constraints,
    machine: &MachineId,
    principal: Option<&UnitName>,
) -> Result<UnitName, StoreError> {
    let name = application.unit(reserve_unit_numbers(tx, application, 1)?);
    diesel::insert_into(units::table)
        .values(new_unit_row(
            &name,
            base,
            constraints,
            machine,
            principal,
            tx.now_ms,
        )?)
        .execute(tx.conn)?;
    record_new_unit(tx, &name, machine);
    crate::store::census::recount(tx, &machine.to_string())?;
    Ok(name)
}

/// Inserts one principal unit of `application` on each of `machines`, in a
/// few multi-row statements, and returns their names in order. The caller
/// records each in the change log ([`record_new_unit`]).
fn insert_principal_units(
    tx: &mut Tx<'_>,
    application: &ApplicationName,
    base: &Base,
    constraints: &Constraints,
    machines: &[MachineId],
) -> Result<Vec<UnitName>, StoreError> {
    let count = u32::try_from(machines.len())
        .map_err(|_| StoreError::Invalid(format!("{} units at once", machines.len())))?;
    if count == 0 {
        return Ok(Vec::new());
    }
    let first = reserve_unit_numbers(tx, application, count)?;
    let names: Vec<UnitName> = (first..first + u64::from(count))
        .map(|n| application.unit(n))
        .collect();
    let rows = names
        .iter()
        .zip(machines)
        .map(|(name, machine)| new_unit_row(name, base, constraints, machine, None, tx.now_ms))
        .collect::<Result<Vec<_>, _>>()?;
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        let insert = diesel::insert_into(units::table).values(chunk);
        per_backend!(tx.conn, c => insert.execute(c)?);
    }
    Ok(names)
}

/// Resolves where one new unit goes, creating its machine if need be.
fn machine_for_unit(
    tx: &mut Tx<'_>,
    unit_base: &Base,
    unit_constraints: &Constraints,
    placement: Option<&Placement>,
) -> Result<MachineId, StoreError> {
    match placement {
        Some(Placement::Machine(id)) => {
            let machine = load_machine(tx, id)?;
            if matches!(
                machine.state(),
                MachineState::Dying | MachineState::Stopping | MachineState::Dead
            ) {
                return Err(StoreError::Conflict(format!(
                    "machine {id} is being removed"
                )));
            }
            if !machine.base.is_compatible(unit_base) {
                return Err(StoreError::Conflict(format!(
                    "cannot place a unit of base {unit_base} on machine {id}: the machine's base is {}",
                    machine.base
                )));
            }
            Ok(machine.id)
        }
        placement => create_placed_machine(
            tx,
            placement,
            unit_base,
            unit_constraints,
            MachineRole::Workload,
        ),
    }
}

/// The subordinate applications joined to `principal` by a container-scoped
/// relation.
fn subordinates_of(
    tx: &mut Tx<'_>,
    principal: &ApplicationName,
) -> Result<Vec<ApplicationRecord>, StoreError> {
    let pairs: Vec<(String, String)> = relations::table
        .filter(relations::scope.eq("container"))
        .filter(
            relations::app1
                .eq(principal.as_str())
                .or(relations::app2.eq(principal.as_str())),
        )
        .select((relations::app1, relations::app2))
        .load(tx.conn)?;
    let mut subordinates = Vec::new();
    for (a, b) in pairs {
        let other = if a == principal.as_str() { b } else { a };
        let other = load_application(tx, &stored("application name", &other)?)?;
        if other.subordinate {
            subordinates.push(other);
        }
    }
    Ok(subordinates)
}

/// Creates `subordinate`'s unit beside `principal` unless it has one.
pub(crate) fn ensure_subordinate_unit(
    tx: &mut Tx<'_>,
    subordinate: &ApplicationRecord,
    principal: &UnitName,
    machine: &MachineId,
) -> Result<Option<UnitName>, StoreError> {
    let existing: i64 = units::table
        .filter(units::principal.eq(principal.to_string()))
        .filter(units::application.eq(subordinate.name.as_str()))
        .count()
        .get_result(tx.conn)?;
    if existing > 0 {
        return Ok(None);
    }
    // Subordinates have no constraints of their own: their principal's
    // machine is the only place they can go.
    let unit = insert_unit(
        tx,
        &subordinate.name,
        &subordinate.base,
        &Constraints::default(),
        machine,
        Some(principal),
    )?;
    Ok(Some(unit))
}

pub(crate) fn add_units_tx(
    tx: &mut Tx<'_>,
    application: &ApplicationName,
    count: u32,
    placements: &[Placement],
    unit_constraints: &Constraints,
) -> Result<Vec<PlacedUnit>, StoreError> {
    let app = load_application(tx, application)?;
    if app.subordinate {
        return Err(StoreError::Invalid(format!(
            "cannot add units to subordinate application {:?}: its units are created beside its principals' units",
            application.as_str()
        )));
    }
    if app.life != "alive" {
        return Err(StoreError::Conflict(format!(
            "application {:?} is being removed",
            application.as_str()
        )));
    }
    if let Some(leader) = &app.scale_with {
        return Err(StoreError::Invalid(format!(
            "application {:?} scales with {:?}: add units to {:?} instead",
            application.as_str(),
            leader.as_str(),
            leader.as_str()
        )));
    }
    if let Some(p) = placements
        .iter()
        .find(|p| matches!(p, Placement::ScaleWith(_)))
    {
        return Err(StoreError::Invalid(format!(
            "{p} is a deploy directive: it places a whole application"
        )));
    }
    if placements.len() > count as usize {
        return Err(StoreError::Invalid(format!(
            "{} placement directives given for {count} units: give at most one per unit",
            placements.len()
        )));
    }
    // The seeds' rule: the unit snapshots the model and application
    // constraints as they are now, under its own (key by key, the unit's
    // over the application's over the model's); later changes never touch
    // it.
    let model = model_constraints_tx(tx)?;
    let constraints = merge(&merge(&model, &app.constraints), unit_constraints);
    let subordinates = subordinates_of(tx, application)?;
    let followers = followers_of(tx, application)?;
    let mut placed = Vec::new();
    if placements.is_empty() {
        // Each unit on a new machine of its own: the machines and the
        // units are written a thousand rows to a statement, and the log
        // has them in the order the loop below would have made them.
        let machines =
            insert_unplaced_machines(tx, count, &app.base, &constraints, MachineRole::Workload)?;
        let units = insert_principal_units(tx, application, &app.base, &constraints, &machines)?;
        for (machine, unit) in machines.into_iter().zip(units) {
            record_new_machine(tx, &machine);
            record_new_unit(tx, &unit, &machine);
            beside_new_unit(tx, &subordinates, &followers, &model, &unit, &machine)?;
            placed.push(PlacedUnit { unit, machine });
        }
        return Ok(placed);
    }
    for i in 0..count as usize {
        let machine = machine_for_unit(tx, &app.base, &constraints, placements.get(i))?;
        let unit = insert_unit(tx, application, &app.base, &constraints, &machine, None)?;
        beside_new_unit(tx, &subordinates, &followers, &model, &unit, &machine)?;
        placed.push(PlacedUnit { unit, machine });
    }
    Ok(placed)
}

/// The subordinate units and the units that scale with a new principal
/// `unit` on `machine`: a follower's new unit brings its own in turn.
fn beside_new_unit(
    tx: &mut Tx<'_>,
    subordinates: &[ApplicationRecord],
    followers: &[Follower],
    model: &Constraints,
    unit: &UnitName,
    machine: &MachineId,
) -> Result<(), StoreError> {
    for subordinate in subordinates {
        ensure_subordinate_unit(tx, subordinate, unit, machine)?;
    }
    for follower in followers {
        follow_unit(tx, follower, model, unit, machine)?;
    }
    Ok(())
}

/// An application that scales with another, read once per command with
/// what each of its new units brings beside it.
struct Follower {
    application: ApplicationRecord,
    /// Its subordinate applications: each gets a unit beside every new
    /// unit of the follower.
    subordinates: Vec<ApplicationRecord>,
    /// The applications that scale with it in turn (C with B with A).
    followers: Vec<Follower>,
}

/// `application` as a [`Follower`], with its subordinates and the
/// followers that scale with it, all the way down.
fn load_follower(tx: &mut Tx<'_>, application: ApplicationRecord) -> Result<Follower, StoreError> {
    Ok(Follower {
        subordinates: subordinates_of(tx, &application.name)?,
        followers: followers_of(tx, &application.name)?,
        application,
    })
}

/// The live applications deployed to scale with `leader`. Deploying is the
/// only way to scale with an application, and only with one already
/// there, so the chain of followers has no loop.
fn followers_of(tx: &mut Tx<'_>, leader: &ApplicationName) -> Result<Vec<Follower>, StoreError> {
    let rows: Vec<ApplicationRow> = applications::table
        .filter(applications::scale_with.eq(leader.as_str()))
        .filter(applications::life.eq("alive"))
        .select(ApplicationRow::as_select())
        .load(tx.conn)?;
    let mut followers = Vec::with_capacity(rows.len());
    for row in rows {
        let application = ApplicationRecord::try_from(row)?;
        followers.push(load_follower(tx, application)?);
    }
    Ok(followers)
}

/// A unit of `follower` in a new container on the machine hosting
/// `leader_unit` (on `leader_machine`, or on its host if that is a
/// container), marked as following it, with its subordinates' units and
/// its own followers' beside it; `model` is the model's constraints.
fn follow_unit(
    tx: &mut Tx<'_>,
    follower: &Follower,
    model: &Constraints,
    leader_unit: &UnitName,
    leader_machine: &MachineId,
) -> Result<PlacedUnit, StoreError> {
    let Follower {
        application: follower_app,
        subordinates,
        followers,
    } = follower;
    let constraints = merge(model, &follower_app.constraints);
    let host = Placement::PlaceIn {
        host: leader_machine.host_number(),
    };
    let machine = create_placed_machine(
        tx,
        Some(&host),
        &follower_app.base,
        &constraints,
        MachineRole::Workload,
    )?;
    let unit = insert_unit(
        tx,
        &follower_app.name,
        &follower_app.base,
        &constraints,
        &machine,
        None,
    )?;
    diesel::update(units::table.find(unit.to_string()))
        .set(units::follows.eq(leader_unit.to_string()))
        .execute(tx.conn)?;
    beside_new_unit(tx, subordinates, followers, model, &unit, &machine)?;
    Ok(PlacedUnit { unit, machine })
}

/// Deploying with `scale-with`: a unit of `follower` beside every unit of
/// `leader` that has a machine.
pub(crate) fn follow_every_unit(
    tx: &mut Tx<'_>,
    follower: &ApplicationName,
    leader: &ApplicationName,
) -> Result<Vec<PlacedUnit>, StoreError> {
    let follower = load_application(tx, follower)?;
    let follower = load_follower(tx, follower)?;
    let model = model_constraints_tx(tx)?;
    let leader_units: Vec<(String, Option<String>)> = units::table
        .filter(units::application.eq(leader.as_str()))
        .filter(units::principal.is_null())
        .order(units::number.asc())
        .select((units::name, units::machine_id))
        .load(tx.conn)?;
    let mut placed = Vec::new();
    for (unit, machine) in leader_units {
        let Some(machine) = machine else { continue };
        let unit: UnitName = stored("unit name", &unit)?;
        let machine: MachineId = stored("machine id", &machine)?;
        placed.push(follow_unit(tx, &follower, &model, &unit, &machine)?);
    }
    Ok(placed)
}

fn remove_unit_tx(tx: &mut Tx<'_>, unit: &UnitName) -> Result<(), StoreError> {
    let found: Option<(Option<String>, Option<String>)> = units::table
        .find(unit.to_string())
        .select((units::principal, units::follows))
        .get_result(tx.conn)
        .optional()?;
    match found {
        None => Err(StoreError::NotFound(format!("unit {:?} not found", unit.to_string()))),
        Some((Some(principal), _)) => Err(StoreError::Invalid(format!(
            "unit {:?} is a subordinate of {principal:?}: remove the relation, or the principal, instead",
            unit.to_string()
        ))),
        // A follower's units come and go with its leader's, as add-unit
        // refuses to add them.
        Some((None, Some(leader))) => Err(StoreError::Invalid(format!(
            "unit {:?} scales with {leader:?}: remove {leader:?} instead",
            unit.to_string()
        ))),
        // The units that scale with it go with it.
        Some((None, None)) => delete_unit_rows(tx, &unit.to_string()),
    }
}

impl Store {
    /// `add-unit`: `count` units of a principal application, each placed by
    /// the matching directive or on a new machine.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`] for an unknown application or machine;
    /// [`StoreError::Invalid`] for a subordinate application or more
    /// directives than units; [`StoreError::Conflict`] for a machine of
    /// another base or one being removed.
    pub async fn add_units(
        &self,
        application: ApplicationName,
        count: u32,
        placements: Vec<Placement>,
    ) -> Result<Vec<PlacedUnit>, StoreError> {
        self.add_units_with_constraints(application, count, placements, Constraints::default())
            .await
    }

    /// `add-unit --constraints`: as [`Store::add_units`], with constraints
    /// for the new units only, over the application's and the model's key
    /// by key (unset keys inherit; `mem=` takes berth's default).
    ///
    /// # Errors
    ///
    /// As [`Store::add_units`].
    pub async fn add_units_with_constraints(
        &self,
        application: ApplicationName,
        count: u32,
        placements: Vec<Placement>,
        constraints: Constraints,
    ) -> Result<Vec<PlacedUnit>, StoreError> {
        self.write(move |tx| add_units_tx(tx, &application, count, &placements, &constraints))
            .await
    }

    /// `remove-unit`: the units (and their subordinates) go at once; their
    /// machines stay. All or nothing.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`]; [`StoreError::Invalid`] for a subordinate,
    /// or a unit that scales with another (it goes with its leader's).
    pub async fn remove_units(&self, units: Vec<UnitName>) -> Result<(), StoreError> {
        self.write(move |tx| units.iter().try_for_each(|u| remove_unit_tx(tx, u)))
            .await
    }

    /// Every unit, in name order.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] or [`StoreError::Invariant`].
    pub fn units(&self) -> Result<Vec<UnitRecord>, StoreError> {
        self.read(|conn| {
            let rows: Vec<UnitRow> = units::table
                .select(UnitRow::as_select())
                .order((units::application.asc(), units::number.asc()))
                .load(conn)?;
            rows.into_iter().map(UnitRecord::try_from).collect()
        })
    }
}

//! Plans and budgets: what a command would change, found by carrying it
//! out in a savepoint and looking before anything is kept, and the hourly
//! budgets a command's plan is held to.
//!
//! A [`Guard`] on a [`Store`] handle ([`Store::guarded`]) wraps each of that
//! handle's writes: for a dry run, or while a budget is set, the command
//! runs as usual, then the store reads what it would leave ([`Rehearsal`])
//! and the guard's check decides whether it is kept (a real command within
//! budget), undone (a dry run), or refused (over budget); otherwise the
//! command runs as it is. A guard's `if_revision` refuses the command with a conflict if
//! the change log has moved since the plan was made. Pricing is not the
//! store's: the check is given by the caller, which knows the cloud.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use diesel::prelude::*;

use crate::domain::instance_types::HourlyPrice;
use crate::domain::machine::MachineState;
use crate::domain::names::{ApplicationName, MachineId};
use crate::domain::zones::ZoneCensus;
use crate::store::census;
use crate::store::db::Conn;
use crate::store::records::{stored, stored_optional, MachineRecord, MachineRow};
use crate::store::schema::{applications, machines, model, units, zones};
use crate::store::writer::{Recorded, Tx};
use crate::store::zones::ZoneRecord;
use crate::store::{ChangeKind, Entity, Store, StoreError};

/// The hourly budgets in force.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Budgets {
    pub model: Option<HourlyPrice>,
    pub applications: BTreeMap<ApplicationName, HourlyPrice>,
}

impl Budgets {
    pub fn is_empty(&self) -> bool {
        self.model.is_none() && self.applications.is_empty()
    }
}

/// A machine a command would start (new, or in error and retried), with
/// the applications of the units it would carry.
#[derive(Clone, Debug)]
pub struct Starting {
    pub record: MachineRecord,
    pub applications: BTreeSet<String>,
}

/// What a command would change, and what it was changed from.
#[derive(Clone, Debug)]
pub struct Rehearsal {
    /// The change log's revision the command saw: a plan made here can be
    /// applied with `if_revision` set to it.
    pub revision: i64,
    /// Every machine as it was before the command.
    pub before: Vec<MachineRecord>,
    /// The applications of each machine's units before the command.
    pub applications_before: HashMap<MachineId, BTreeSet<String>>,
    /// The applications each machine's price is charged to before the
    /// command: those of its principal units, as status charges it (a
    /// subordinate runs on its principal's machine at no cost of its own).
    pub charged_before: HashMap<MachineId, BTreeSet<String>>,
    /// The same after the command, for every machine: a unit placed on a
    /// machine already there charges its application for it.
    pub charged_after: HashMap<MachineId, BTreeSet<String>>,
    /// Machines the command adds, in id order.
    pub added: Vec<Starting>,
    /// Machines in error the command makes pending again.
    pub retried: Vec<Starting>,
    /// Machines the command removes, as they were.
    pub removed: Vec<MachineRecord>,
    pub zones: Vec<ZoneRecord>,
    /// The zone census before the command.
    pub census: ZoneCensus,
    pub budgets: Budgets,
}

/// Decides what becomes of a rehearsed command: `Ok(true)` keeps it,
/// `Ok(false)` undoes it, an error refuses it.
pub type Check = Arc<dyn Fn(&Rehearsal) -> Result<bool, StoreError> + Send + Sync>;

/// What a [`Store::guarded`] handle does around each write.
#[derive(Clone)]
pub struct Guard {
    /// The revision a plan was made at; the command is refused if the log
    /// has moved since.
    pub if_revision: Option<i64>,
    /// Rehearse the command even when no budget is set (a dry run).
    /// Otherwise a command is rehearsed only while a budget is set, and
    /// runs as it is when none is.
    pub always: bool,
    pub check: Check,
}

impl Store {
    /// A handle on the same store whose writes are each checked by `guard`.
    pub fn guarded(&self, guard: Guard) -> Store {
        Store {
            guard: Some(Arc::new(guard)),
            ..self.clone()
        }
    }

    /// The hourly budgets in force.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] and the pool's errors.
    pub fn budgets(&self) -> Result<Budgets, StoreError> {
        self.read(read_budgets)
    }

    /// Sets (or with `None` clears) the hourly budget of the model, or of
    /// `application` when given.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`] for an unknown application.
    pub async fn set_budget(
        &self,
        application: Option<ApplicationName>,
        budget: Option<HourlyPrice>,
    ) -> Result<(), StoreError> {
        let text = budget.map(|b| b.to_string());
        self.write(move |tx| {
            match &application {
                None => {
                    diesel::update(model::table)
                        .set(model::hourly_budget.eq(&text))
                        .execute(tx.conn)?;
                    tx.record(Entity::Model, "model", ChangeKind::Updated, "budget");
                }
                Some(name) => {
                    let set = diesel::update(applications::table.find(name.as_str()))
                        .set(applications::hourly_budget.eq(&text))
                        .execute(tx.conn)?;
                    if set == 0 {
                        return Err(StoreError::NotFound(format!(
                            "application {:?} not found",
                            name.as_str()
                        )));
                    }
                    tx.record(
                        Entity::Application,
                        name.as_str(),
                        ChangeKind::Updated,
                        "budget",
                    );
                }
            }
            Ok(())
        })
        .await
    }
}

/// The budgets as stored.
fn read_budgets(conn: &mut Conn) -> Result<Budgets, StoreError> {
    let model: Option<String> = model::table
        .select(model::hourly_budget)
        .get_result::<Option<String>>(conn)
        .optional()?
        .flatten();
    let apps: Vec<(String, Option<String>)> = applications::table
        .filter(applications::hourly_budget.is_not_null())
        .select((applications::name, applications::hourly_budget))
        .load(conn)?;
    let mut budgets = Budgets {
        model: stored_optional("model budget", model.as_deref())?,
        applications: BTreeMap::new(),
    };
    for (name, budget) in apps {
        if let Some(budget) = stored_optional("application budget", budget.as_deref())? {
            budgets
                .applications
                .insert(stored("application name", &name)?, budget);
        }
    }
    Ok(budgets)
}

/// Runs `op` under `guard` (see the module's documentation).
pub(crate) fn guarded<T>(
    tx: &mut Tx<'_>,
    guard: &Guard,
    op: impl FnOnce(&mut Tx<'_>) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let budgets = read_budgets(tx.conn)?;
    // Without a dry run or a budget there is nothing to plan for: the
    // command costs no more than itself.
    let rehearse = guard.always || !budgets.is_empty();
    if !rehearse && guard.if_revision.is_none() {
        return op(tx);
    }
    let revision = tx.revision()?;
    if let Some(expected) = guard.if_revision {
        if expected != revision {
            return Err(StoreError::Conflict(format!(
                "the model has changed since the plan was made (at revision {expected}; it is \
                 now at {revision}): make the plan again"
            )));
        }
    }
    if !rehearse {
        return op(tx);
    }
    let before = all_machines(tx)?;
    let (applications_before, charged_before) = applications_on(tx, None)?;
    let census = census::read(tx)?;
    let zones: Vec<ZoneRecord> = zones::table
        .select(ZoneRecord::as_select())
        .order(zones::name)
        .load(tx.conn)?;
    let check = guard.check.clone();
    let (value, _) = tx.trial(
        op,
        |tx, _, recorded| {
            look(
                tx,
                recorded,
                Rehearsal {
                    revision,
                    before,
                    applications_before,
                    charged_after: HashMap::new(),
                    charged_before,
                    added: Vec::new(),
                    retried: Vec::new(),
                    removed: Vec::new(),
                    zones,
                    census,
                    budgets,
                },
            )
        },
        |rehearsal| check(rehearsal),
    )?;
    Ok(value)
}

/// Fills in what the recorded changes did to machines and to the units
/// on them.
fn look(
    tx: &mut Tx<'_>,
    recorded: &[Recorded],
    mut rehearsal: Rehearsal,
) -> Result<Rehearsal, StoreError> {
    let moved_units = recorded
        .iter()
        .any(|r| matches!(r.entity, Entity::Unit | Entity::Machine));
    rehearsal.charged_after = if moved_units {
        applications_on(tx, None)?.1
    } else {
        rehearsal.charged_before.clone()
    };
    let touched: BTreeSet<MachineId> = recorded
        .iter()
        .filter(|r| r.entity == Entity::Machine)
        .map(|r| stored("machine id", &r.entity_id))
        .collect::<Result<_, _>>()?;
    if touched.is_empty() {
        return Ok(rehearsal);
    }
    let ids: Vec<String> = touched.iter().map(ToString::to_string).collect();
    let mut after: BTreeMap<MachineId, MachineRecord> = BTreeMap::new();
    for chunk in ids.chunks(500) {
        let rows: Vec<MachineRow> = machines::table
            .filter(machines::id.eq_any(chunk))
            .select(MachineRow::as_select())
            .load(tx.conn)?;
        for row in rows {
            let record = MachineRecord::try_from(row)?;
            after.insert(record.id, record);
        }
    }
    let (mut applications, _) = applications_on(tx, Some(&ids))?;
    let before: HashMap<MachineId, &MachineRecord> =
        rehearsal.before.iter().map(|m| (m.id, m)).collect();
    let mut removed = Vec::new();
    for id in &touched {
        let was = before.get(id).copied();
        let now = after.remove(id);
        let starting = |record: MachineRecord, applications: &mut HashMap<_, _>| Starting {
            applications: applications.remove(&record.id).unwrap_or_default(),
            record,
        };
        match (was, now) {
            (None, Some(now)) => rehearsal.added.push(starting(now, &mut applications)),
            (Some(was), None) => removed.push(was.clone()),
            (Some(was), Some(now)) => {
                if was.state() == MachineState::ProvisioningError
                    && now.state() == MachineState::Pending
                {
                    rehearsal.retried.push(starting(now, &mut applications));
                } else if crate::domain::machine::life(was.state())
                    == crate::domain::machine::Life::Alive
                    && crate::domain::machine::life(now.state())
                        != crate::domain::machine::Life::Alive
                {
                    removed.push(was.clone());
                }
            }
            (None, None) => {}
        }
    }
    rehearsal.removed = removed;
    Ok(rehearsal)
}

fn all_machines(tx: &mut Tx<'_>) -> Result<Vec<MachineRecord>, StoreError> {
    machines::table
        .select(MachineRow::as_select())
        .order(machines::id)
        .load(tx.conn)?
        .into_iter()
        .map(MachineRecord::try_from)
        .collect()
}

/// Applications by machine.
type OnMachines = HashMap<MachineId, BTreeSet<String>>;

/// The applications of the units on each machine (of `ids` only, when
/// given), and of its principal units only: the applications its price is
/// charged to, as status charges it.
fn applications_on(
    tx: &mut Tx<'_>,
    ids: Option<&[String]>,
) -> Result<(OnMachines, OnMachines), StoreError> {
    let columns = (
        units::machine_id.assume_not_null(),
        units::application,
        units::principal,
    );
    let rows: Vec<(String, String, Option<String>)> = match ids {
        None => units::table
            .filter(units::machine_id.is_not_null())
            .select(columns)
            .load(tx.conn)?,
        Some(ids) => {
            let mut rows = Vec::new();
            for chunk in ids.chunks(500) {
                rows.extend(
                    units::table
                        .filter(units::machine_id.eq_any(chunk))
                        .select(columns)
                        .load::<(String, String, Option<String>)>(tx.conn)?,
                );
            }
            rows
        }
    };
    let mut on = OnMachines::new();
    let mut charged = OnMachines::new();
    for (machine, application, principal) in rows {
        let machine: MachineId = stored("machine id", &machine)?;
        if principal.is_none() {
            charged
                .entry(machine)
                .or_default()
                .insert(application.clone());
        }
        on.entry(machine).or_default().insert(application);
    }
    Ok((on, charged))
}

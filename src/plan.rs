//! Plans: what a command would launch and remove, where, and what the
//! model would cost before and after; and the budgets a plan is held to.
//!
//! A plan is made from a [`Rehearsal`] (the command carried out in the
//! store and looked at before it is kept or undone) and the cloud's prices
//! ([`Pricing`]): each machine the command would start is given the zone
//! the engine would choose (the same rule, [`order_zones`], over the same
//! census, one machine after another in id order) and the instance type it
//! would launch there ([`select_for_zone`]). Nothing here writes; the API
//! decides whether the command is kept, undone (`dry_run`) or refused (over
//! budget) from the plan.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::explain::{explain, Question, ZoneFacts};
use crate::domain::instance_types::{
    select, select_for_zone, Catalogue, HourlyPrice, Requirements,
};
use crate::domain::machine::{life, Life, MachineState};
use crate::domain::names::{ApplicationName, MachineId};
use crate::domain::placement::Placement;
use crate::domain::zones::{order_zones, Occupant, Zone, ZoneCensus, ZoneRequest};
use crate::store::plans::{Budgets, Rehearsal, Starting};
use crate::store::records::MachineRecord;
use crate::store::zones::ZoneRecord;

/// Hours in a month, as cloud price lists count them.
pub const HOURS_PER_MONTH: u64 = 730;

/// What the plan needs of the cloud.
pub struct Pricing<'a> {
    pub catalogue: &'a Catalogue,
    /// `[provisioner] max_hourly_price`.
    pub price_ceiling: HourlyPrice,
    /// Whether the cloud offers type `.1` in zone `.0`.
    pub offers: &'a (dyn Fn(&str, &str) -> bool + Sync),
}

/// What a plan does to one machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// A new machine (or container) is started.
    Add,
    /// A machine in error is tried again.
    Retry,
    /// A machine and its instance are removed.
    Remove,
}

/// One machine a command would start or remove.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PlannedMachine {
    pub action: Action,
    #[schema(value_type = String, example = "3")]
    pub machine: MachineId,
    /// The applications of the units it carries.
    pub applications: Vec<String>,
    /// Its constraints resolved: berth's defaults included, as the engine
    /// chooses its instance type with them.
    pub constraints: String,
    /// The type it would launch (or runs, when removed); absent for a
    /// container or an enlisted host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// US dollars an hour (`"0.0416"`); absent when it costs nothing of its
    /// own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, example = "0.0416")]
    pub hourly_price: Option<HourlyPrice>,
    /// [`HOURS_PER_MONTH`] times the hourly price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, example = "30.368")]
    pub monthly_price: Option<HourlyPrice>,
    /// Why it could not be started as asked (the explanation's summary);
    /// the command would leave it in error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// A budget and what the plan makes of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BudgetCheck {
    /// The application whose budget this is; absent for the model's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application: Option<String>,
    #[schema(value_type = String, example = "12.5")]
    pub hourly_budget: HourlyPrice,
    #[schema(value_type = String)]
    pub hourly_cost_before: HourlyPrice,
    #[schema(value_type = String)]
    pub hourly_cost_after: HourlyPrice,
    /// The plan raises the cost above the budget: the command is refused.
    pub exceeded: bool,
}

/// What a command would do, and what it would cost.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Plan {
    /// The change log's revision the plan was made at: apply it with
    /// `if_revision` set to this, and it is refused if the model changed.
    pub revision: i64,
    /// The machines started and removed, in machine order.
    pub machines: Vec<PlannedMachine>,
    /// What the model's machines cost an hour now, counting machines still
    /// being started at the price of the type they would launch.
    #[schema(value_type = String, example = "0.0832")]
    pub hourly_cost_before: HourlyPrice,
    #[schema(value_type = String, example = "0.1248")]
    pub hourly_cost_after: HourlyPrice,
    #[schema(value_type = String)]
    pub monthly_cost_before: HourlyPrice,
    #[schema(value_type = String)]
    pub monthly_cost_after: HourlyPrice,
    /// Each budget in force that the plan's applications (or the model)
    /// fall under.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<BudgetCheck>,
}

impl Plan {
    /// The budgets the plan would exceed, as one message with the plan's
    /// figures; `None` when within every budget.
    pub fn over_budget(&self) -> Option<String> {
        let over: Vec<String> = self
            .budgets
            .iter()
            .filter(|b| b.exceeded)
            .map(|b| {
                let whose = match &b.application {
                    None => "the model's".to_string(),
                    Some(application) => format!("application {application:?}'s"),
                };
                format!(
                    "{whose} hourly cost would go from ${} to ${}, over its budget of ${}",
                    b.hourly_cost_before, b.hourly_cost_after, b.hourly_budget
                )
            })
            .collect();
        (!over.is_empty()).then(|| {
            format!(
                "refused: {} (the plan adds {} and removes {} machines); raise the budget with \
                 set-budget or ask for less",
                over.join("; "),
                self.count(|a| a != Action::Remove),
                self.count(|a| a == Action::Remove)
            )
        })
    }

    fn count(&self, which: impl Fn(Action) -> bool) -> usize {
        self.machines.iter().filter(|m| which(m.action)).count()
    }
}

fn monthly(hourly: HourlyPrice) -> HourlyPrice {
    HourlyPrice::from_micro_usd(hourly.micro_usd().saturating_mul(HOURS_PER_MONTH))
}

/// Where machines would go and what they would launch, one after another,
/// each counted in the census before the next is placed (as the zone
/// tracker counts each choice).
struct Placer<'a> {
    pricing: &'a Pricing<'a>,
    zones: Vec<Zone>,
    census: ZoneCensus,
    /// Zones by machine, for containers whose host is placed in the plan.
    zone_of: HashMap<MachineId, String>,
    /// The cheapest fit per requirements and zone: a deploy's machines
    /// share their requirements.
    chosen: HashMap<(Requirements, String), Option<(String, HourlyPrice)>>,
    /// The explanation's summary per requirements and placement zone, for
    /// machines that fit nowhere.
    problems: HashMap<(Requirements, Option<String>), String>,
}

/// Where one machine goes.
struct Placed {
    instance_type: Option<String>,
    zone: Option<String>,
    hourly_price: Option<HourlyPrice>,
    problem: Option<String>,
}

impl Placer<'_> {
    fn place(&mut self, record: &MachineRecord, applications: &BTreeSet<String>) -> Placed {
        let free = |zone: Option<String>| Placed {
            instance_type: None,
            zone,
            hourly_price: None,
            problem: None,
        };
        if let Some(host) = record.id.parent() {
            return free(self.zone_of.get(&host).cloned());
        }
        if matches!(record.placement, Some(Placement::Ssh(_))) {
            return free(None);
        }
        let requirements = Requirements::resolve(&record.constraints, record.role);
        let occupant = Occupant::new(record.role, applications.iter().cloned());
        let order = order_zones(&ZoneRequest {
            zones: &self.zones,
            census: &self.census,
            group: &occupant.group(),
            failed: &BTreeSet::new(),
            zones_constraint: &record.constraints.zones,
            placement: record.placement.as_ref().and_then(Placement::zone),
        })
        .unwrap_or_default();
        for zone in order {
            let fit = self
                .chosen
                .entry((requirements.clone(), zone.clone()))
                .or_insert_with(|| {
                    select_for_zone(&requirements, self.pricing.catalogue, &zone, |t| {
                        (self.pricing.offers)(&zone, t)
                    })
                    .ok()
                    .map(|t| (t.name.clone(), t.price))
                })
                .clone();
            let Some((name, price)) = fit else { continue };
            if price > self.pricing.price_ceiling {
                break;
            }
            self.census.add(&zone, &occupant);
            self.zone_of.insert(record.id, zone.clone());
            return Placed {
                instance_type: Some(name),
                zone: Some(zone),
                hourly_price: Some(price),
                problem: None,
            };
        }
        let placement_zone = record.placement.as_ref().and_then(Placement::zone);
        let (pricing, zones) = (self.pricing, &self.zones);
        let problem = self
            .problems
            .entry((requirements, placement_zone.map(str::to_string)))
            .or_insert_with_key(|(requirements, _)| {
                explain(&Question {
                    requirements,
                    catalogue: pricing.catalogue,
                    price_ceiling: Some(pricing.price_ceiling),
                    zones: ZoneFacts {
                        zones,
                        offers: pricing.offers,
                        refusals: &[],
                        placement: placement_zone,
                    },
                })
                .summary()
            })
            .clone();
        Placed {
            instance_type: None,
            zone: None,
            hourly_price: None,
            problem: Some(problem),
        }
    }
}

/// What a machine as it stands costs an hour: its instance's price, or,
/// while it is being started, the price of the type it would launch.
fn standing_price(
    record: &MachineRecord,
    pricing: &Pricing<'_>,
    cheapest: &mut HashMap<Requirements, Option<HourlyPrice>>,
) -> Option<HourlyPrice> {
    if let Some(price) = record.hourly_price {
        return Some(price);
    }
    let starting = matches!(
        record.state(),
        MachineState::Pending
            | MachineState::Allocating
            | MachineState::Starting
            | MachineState::Retrying
    );
    if !starting || record.id.is_container() || matches!(record.placement, Some(Placement::Ssh(_)))
    {
        return None;
    }
    let requirements = Requirements::resolve(&record.constraints, record.role);
    *cheapest.entry(requirements).or_insert_with_key(|r| {
        select(r, pricing.catalogue)
            .ok()
            .map(|t| t.price)
            .filter(|p| *p <= pricing.price_ceiling)
    })
}

/// The plan of a rehearsed command.
pub fn plan(rehearsal: &Rehearsal, pricing: &Pricing<'_>) -> Plan {
    let mut cheapest = HashMap::new();
    let mut placer = Placer {
        pricing,
        zones: rehearsal.zones.iter().map(ZoneRecord::zone).collect(),
        census: rehearsal.census.clone(),
        zone_of: rehearsal
            .before
            .iter()
            .filter_map(|m| Some((m.id, m.machine.lifecycle.zone.clone()?)))
            .collect(),
        chosen: HashMap::new(),
        problems: HashMap::new(),
    };
    // What each machine costs now, and the applications it is charged to.
    let mut price_now: BTreeMap<MachineId, Option<HourlyPrice>> = BTreeMap::new();
    let mut apps_now: BTreeMap<MachineId, BTreeSet<String>> = BTreeMap::new();
    for machine in &rehearsal.before {
        if life(machine.state()) == Life::Dead {
            continue;
        }
        price_now.insert(machine.id, standing_price(machine, pricing, &mut cheapest));
        if let Some(apps) = rehearsal.charged_before.get(&machine.id) {
            apps_now.insert(machine.id, apps.clone());
        }
    }
    let mut price_after = price_now.clone();
    // Every machine's, the ones the command neither adds nor removes
    // included: a unit placed on a running machine charges its application
    // for it. Only machines with a price after the command count.
    let apps_after: BTreeMap<MachineId, BTreeSet<String>> = rehearsal
        .charged_after
        .iter()
        .map(|(id, apps)| (*id, apps.clone()))
        .collect();
    let mut machines = Vec::new();

    let mut starting: Vec<(Action, &Starting)> = rehearsal
        .added
        .iter()
        .map(|s| (Action::Add, s))
        .chain(rehearsal.retried.iter().map(|s| (Action::Retry, s)))
        .collect();
    starting.sort_by_key(|(_, s)| s.record.id);
    for (action, start) in starting {
        let record = &start.record;
        let placed = placer.place(record, &start.applications);
        price_after.insert(record.id, placed.hourly_price);
        machines.push(PlannedMachine {
            action,
            machine: record.id,
            applications: start.applications.iter().cloned().collect(),
            constraints: Requirements::resolve(&record.constraints, record.role).to_string(),
            instance_type: placed.instance_type,
            zone: placed.zone,
            hourly_price: placed.hourly_price,
            monthly_price: placed.hourly_price.map(monthly),
            problem: placed.problem,
        });
    }
    for record in &rehearsal.removed {
        let price = price_now.get(&record.id).copied().flatten();
        price_after.remove(&record.id);
        machines.push(PlannedMachine {
            action: Action::Remove,
            machine: record.id,
            applications: rehearsal
                .applications_before
                .get(&record.id)
                .map(|a| a.iter().cloned().collect())
                .unwrap_or_default(),
            constraints: Requirements::resolve(&record.constraints, record.role).to_string(),
            // A container or an enlisted host has no type of its own.
            instance_type: record.instance_type.clone().filter(|t| {
                !t.is_empty()
                    && record.id.parent().is_none()
                    && !matches!(record.placement, Some(Placement::Ssh(_)))
            }),
            zone: record.machine.lifecycle.zone.clone(),
            hourly_price: price,
            monthly_price: price.map(monthly),
            problem: None,
        });
    }
    machines.sort_by_key(|m| m.machine);

    let total = |prices: &BTreeMap<MachineId, Option<HourlyPrice>>| -> HourlyPrice {
        prices.values().flatten().copied().sum()
    };
    let before = total(&price_now);
    let after = total(&price_after);
    let budgets = budget_checks(
        &rehearsal.budgets,
        (before, after),
        (&price_now, &apps_now),
        (&price_after, &apps_after),
    );
    Plan {
        revision: rehearsal.revision,
        machines,
        hourly_cost_before: before,
        hourly_cost_after: after,
        monthly_cost_before: monthly(before),
        monthly_cost_after: monthly(after),
        budgets,
    }
}

type Costs<'a> = (
    &'a BTreeMap<MachineId, Option<HourlyPrice>>,
    &'a BTreeMap<MachineId, BTreeSet<String>>,
);

/// What the machines carrying `application`'s units cost.
fn application_cost((prices, apps): Costs<'_>, application: &ApplicationName) -> HourlyPrice {
    apps.iter()
        .filter(|(_, on)| on.contains(application.as_str()))
        .filter_map(|(id, _)| prices.get(id).copied().flatten())
        .sum()
}

/// Each budget in force, checked. A budget is exceeded only when the plan
/// raises the cost above it: removing machines is never refused.
fn budget_checks(
    budgets: &Budgets,
    (model_before, model_after): (HourlyPrice, HourlyPrice),
    before: Costs<'_>,
    after: Costs<'_>,
) -> Vec<BudgetCheck> {
    let check = |application: Option<String>,
                 budget: HourlyPrice,
                 was: HourlyPrice,
                 will: HourlyPrice| BudgetCheck {
        application,
        hourly_budget: budget,
        hourly_cost_before: was,
        hourly_cost_after: will,
        exceeded: will > budget && will > was,
    };
    let mut checks = Vec::new();
    if let Some(budget) = budgets.model {
        checks.push(check(None, budget, model_before, model_after));
    }
    for (application, budget) in &budgets.applications {
        checks.push(check(
            Some(application.to_string()),
            *budget,
            application_cost(before, application),
            application_cost(after, application),
        ));
    }
    checks
}

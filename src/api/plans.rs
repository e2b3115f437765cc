//! Plans, explanations and budgets at the API.
//!
//! Every route that can start or remove machines takes `dry_run` and
//! `if_revision` ([`Planning`]): a dry run answers the command's [`Plan`]
//! (200) and changes nothing; `if_revision` refuses the command with 409
//! if the change log has moved past the plan's revision. While a budget is
//! set, every such command is planned first and refused with 409 if its
//! plan raises a cost above a budget. [`planned`] gives the handler the
//! store handle that does all this ([`crate::store::plans`]).
//!
//! `GET /v1/machines/{id}/explanation` explains a machine
//! ([`crate::domain::explain`]); `PUT`/`GET /v1/budgets` set and read the
//! budgets.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use actix_web::{web, HttpResponse};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::api::errors::{input_or_store_error, ErrorBody, UNAVAILABLE};
use crate::api::input::{self, InputError};
use crate::api::{PricingSource, Shared};
use crate::domain::explain::{explain, Explanation, Question, ZoneFacts};
use crate::domain::instance_types::{HourlyPrice, Requirements};
use crate::domain::machine::{is_settled, MachineState};
use crate::domain::placement::Placement;
use crate::domain::zones::Zone;
use crate::plan::{plan, Plan, Pricing};
use crate::store::plans::{Check, Guard};
use crate::store::zones::ZoneRecord;
use crate::store::{blocking, Store, StoreError};

input_or_store_error! {
    /// Why a plan, explanation or budget request failed.
    pub enum PlanError;
}

/// What a command that may start or remove machines is asked to do beside
/// its work: only plan it, or only carry it out if the model is still at
/// a plan's revision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Planning {
    pub dry_run: bool,
    pub if_revision: Option<i64>,
}

/// `?dry_run=true&if_revision=N` on the `DELETE` routes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PlanningQuery {
    /// Answer the plan (200) and change nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Carry the command out only if the model is still at this revision
    /// (a plan's `revision`); 409 otherwise.
    #[serde(default)]
    #[param(minimum = 0)]
    pub if_revision: Option<i64>,
}

/// The plan a dry run made, once the store has rehearsed the command.
#[derive(Clone, Default)]
pub struct PlanSlot(Arc<Mutex<Option<Plan>>>);

impl PlanSlot {
    fn put(&self, plan: Plan) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(plan);
    }

    fn take(&self) -> Option<Plan> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    /// The 200 answer of a dry run.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invariant`] if the store made no plan.
    pub fn answer(&self) -> Result<HttpResponse, StoreError> {
        let plan = self
            .take()
            .ok_or_else(|| StoreError::Invariant("the dry run made no plan".into()))?;
        Ok(HttpResponse::Ok().json(plan))
    }
}

/// The planning options of a request.
pub fn planning_of(dry_run: bool, if_revision: Option<i64>) -> Planning {
    Planning {
        dry_run,
        if_revision,
    }
}

/// A revision a client sent.
///
/// # Errors
///
/// [`InputError::Request`] for a negative revision.
pub fn checked(planning: Planning) -> Result<Planning, InputError> {
    match planning.if_revision {
        Some(r) if r < 0 => Err(InputError::Request(format!(
            "if_revision must be a revision (0 or more), not {r}"
        ))),
        _ => Ok(planning),
    }
}

/// The store handle a command runs on, and where a dry run's plan is left:
/// one that checks `if_revision`, and plans the command in its transaction
/// for a dry run or while a budget is set. The budgets are read in that
/// transaction, so a command costs no read of its own before it is
/// queued (and none that waits while the database is away).
///
/// # Errors
///
/// [`InputError`] for a negative revision, or a dry run on a controller
/// without prices.
pub fn planned<E: From<InputError>>(
    shared: &Shared,
    planning: Planning,
) -> Result<(Store, PlanSlot), E> {
    let planning = checked(planning)?;
    let slot = PlanSlot::default();
    let store = shared.state.store.clone();
    let Some(pricing) = shared.state.pricing.clone() else {
        if planning.dry_run || planning.if_revision.is_some() {
            return Err(
                InputError::Request("this controller has no prices to plan with".into()).into(),
            );
        }
        return Ok((store, slot));
    };
    let dry_run = planning.dry_run;
    let kept = slot.clone();
    let check: Check = Arc::new(move |rehearsal| {
        let provider = &pricing.provider;
        let offers = |zone: &str, t: &str| provider.offers(zone, t);
        let made = plan(
            rehearsal,
            &Pricing {
                catalogue: provider.catalogue(),
                price_ceiling: pricing.price_ceiling,
                offers: &offers,
            },
        );
        let over = made.over_budget();
        kept.put(made);
        match over {
            Some(message) if !dry_run => Err(StoreError::Conflict(message)),
            _ => Ok(!dry_run),
        }
    });
    Ok((
        store.guarded(Guard {
            if_revision: planning.if_revision,
            always: dry_run,
            check,
        }),
        slot,
    ))
}

/// What `retry-provisioning` answers: the machines retried, or with
/// `dry_run` the plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum RetryOrPlan {
    Retried(crate::api::machines::RetryResponse),
    Planned(Plan),
}

/// What setting constraints answers: the constraints set, or with
/// `dry_run` the plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ConstraintsOrPlan {
    Set(crate::api::applications::ConstraintsResponse),
    Planned(Plan),
}

/// `GET /v1/machines/{id}/explanation`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ExplanationResponse {
    pub machine: String,
    /// The machine's lifecycle state (`pending`, `retrying`,
    /// `provisioning-error`, `started`, ...).
    pub state: String,
    /// Its status message: the last failure, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// One line: what rules it out (and the nearest fit), or where it fits.
    pub summary: String,
    /// The explanation as `berth explain` prints it.
    pub text: String,
    #[schema(value_type = Object)]
    pub explanation: Explanation,
}

/// Explains why a machine is (or is not) placed: how many instance types
/// each constraint ruled out, which zones were ruled out and why, and the
/// nearest fits one relaxed constraint would allow. Container ids hold
/// slashes (`0/lxd/1`).
#[utoipa::path(
    get,
    path = "/v1/machines/{id}/explanation",
    operation_id = "explain_machine",
    tag = "machines",
    params(("id" = String, Path, description = "Machine id: `3` or `0/lxd/1`")),
    responses(
        (status = 200, description = "The explanation", body = ExplanationResponse),
        (status = 400, description = "Bad machine id, or a machine with no cloud instance to explain (a container or an enlisted host)", body = ErrorBody),
        (status = 401, description = "No or wrong admin token", body = ErrorBody),
        (status = 404, description = "Unknown machine", body = ErrorBody),
        (status = 503, description = UNAVAILABLE, body = ErrorBody),
    )
)]
pub async fn explain_machine(
    shared: web::Data<Shared>,
    id: web::Path<String>,
) -> Result<HttpResponse, PlanError> {
    let id = input::machine(&id)?;
    let pricing = pricing_of(&shared)?;
    let store = shared.state.store.clone();
    let (record, zones) = blocking(move || Ok((store.machine(&id)?, store.zones()?))).await?;
    if id.is_container() || matches!(record.placement, Some(Placement::Ssh(_))) {
        return Err(InputError::Request(format!(
            "machine {id} has no cloud instance of its own to explain: it is {}",
            if id.is_container() {
                "a container on its host"
            } else {
                "an existing host enlisted over SSH"
            }
        ))
        .into());
    }
    let requirements = Requirements::resolve(&record.constraints, record.role);
    let refusals: Vec<(String, String)> = record
        .machine
        .lifecycle
        .zones_failed
        .iter()
        .map(|r| (r.zone.clone(), r.reason.clone()))
        .collect();
    let provider = &pricing.provider;
    let offers = |zone: &str, t: &str| provider.offers(zone, t);
    let zones: Vec<Zone> = zones.iter().map(ZoneRecord::zone).collect();
    let explanation = explain(&Question {
        requirements: &requirements,
        catalogue: provider.catalogue(),
        price_ceiling: Some(pricing.price_ceiling),
        zones: ZoneFacts {
            zones: &zones,
            offers: &offers,
            refusals: &refusals,
            placement: record.placement.as_ref().and_then(Placement::zone),
        },
    });
    let state = record.state();
    let mut summary = explanation.summary();
    if is_settled(state) && state != MachineState::ProvisioningError {
        summary = format!("{state}; {summary}");
    }
    Ok(HttpResponse::Ok().json(ExplanationResponse {
        machine: id.to_string(),
        state: state.to_string(),
        message: record.machine.lifecycle.last_error.clone(),
        summary,
        text: explanation.to_string(),
        explanation,
    }))
}

fn pricing_of(shared: &Shared) -> Result<PricingSource, PlanError> {
    shared.state.pricing.clone().ok_or_else(|| {
        InputError::Request("this controller has no catalogue to explain with".into()).into()
    })
}

/// The most digits a budget has before its decimal point.
const MAX_BUDGET_DIGITS: usize = 13;

/// `PUT /v1/budgets`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetRequest {
    /// The application whose budget this is; the model's when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application: Option<String>,
    /// US dollars an hour, at most 13 digits before the point and 6
    /// after (`"12.50"`); `null` clears the budget. Required: a request
    /// without it is refused rather than taken as a clearing.
    #[serde(deserialize_with = "Option::deserialize")]
    #[schema(
        required = true,
        example = "12.50",
        pattern = r"^[0-9]{1,13}(\.[0-9]{1,6})?$"
    )]
    pub hourly: Option<String>,
}

/// The budgets in force.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BudgetsResponse {
    /// The model's hourly budget, if set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, example = "12.5")]
    pub model: Option<HourlyPrice>,
    /// Each application's hourly budget, by name.
    #[schema(value_type = BTreeMap<String, String>)]
    pub applications: BTreeMap<String, HourlyPrice>,
}

async fn budgets_response(store: Store) -> Result<HttpResponse, PlanError> {
    let budgets = blocking(move || store.budgets()).await?;
    Ok(HttpResponse::Ok().json(BudgetsResponse {
        model: budgets.model,
        applications: budgets
            .applications
            .into_iter()
            .map(|(name, b)| (name.to_string(), b))
            .collect(),
    }))
}

/// The hourly budgets of the model and its applications.
#[utoipa::path(
    get,
    path = "/v1/budgets",
    operation_id = "get_budgets",
    tag = "model",
    responses(
        (status = 200, description = "The budgets", body = BudgetsResponse),
        (status = 401, description = "No or wrong admin token", body = ErrorBody),
        (status = 503, description = UNAVAILABLE, body = ErrorBody),
    )
)]
pub async fn get_budgets(shared: web::Data<Shared>) -> Result<HttpResponse, PlanError> {
    budgets_response(shared.state.store.clone()).await
}

/// Sets or clears an hourly budget, for the model or one application.
/// While a budget is set, a command whose plan raises a cost above it is
/// refused with 409 and the plan's figures.
#[utoipa::path(
    put,
    path = "/v1/budgets",
    operation_id = "set_budget",
    tag = "model",
    request_body = BudgetRequest,
    responses(
        (status = 200, description = "Set; the budgets now", body = BudgetsResponse),
        (status = 400, description = "Bad application name or amount, or a query string", body = ErrorBody),
        (status = 401, description = "No or wrong admin token", body = ErrorBody),
        (status = 404, description = "Unknown application", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 503, description = UNAVAILABLE, body = ErrorBody),
    )
)]
pub async fn set_budget(
    shared: web::Data<Shared>,
    body: web::Json<input::Object<BudgetRequest>>,
) -> Result<HttpResponse, PlanError> {
    let application = body
        .application
        .as_deref()
        .map(input::application)
        .transpose()?;
    let hourly = body
        .hourly
        .as_deref()
        .map(|text| {
            // As the document's pattern says: any more digits would be a
            // budget no model reaches, and some no longer fit a price.
            let whole = text.split('.').next().unwrap_or_default();
            if whole.len() > MAX_BUDGET_DIGITS {
                return Err(InputError::Request(format!(
                    "hourly: {text:?} has more than {MAX_BUDGET_DIGITS} digits before the point"
                )));
            }
            text.parse::<HourlyPrice>()
                .map_err(|e| InputError::Request(format!("hourly: {e}")))
        })
        .transpose()?;
    shared.state.store.set_budget(application, hourly).await?;
    budgets_response(shared.state.store.clone()).await
}

//! Application routes: deploy, add-unit, remove-unit, remove-application,
//! and an application's constraints.

use std::collections::BTreeMap;

use actix_web::{web, HttpResponse};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::api::errors::{input_or_store_error, ErrorBody, UNAVAILABLE};
use crate::api::input::{self, InputError, PlacementList};
use crate::api::plans::{planned, planning_of, ConstraintsOrPlan, PlanningQuery};
use crate::api::Shared;
use crate::charms;
use crate::domain::charm::{CharmUrl, ParsedCharm};
use crate::domain::placement::scale_with;
use crate::plan::Plan;
use crate::store::applications::DeployRequest as StoreDeploy;
use crate::store::units::PlacedUnit;
use crate::store::{blocking, StoreError};

/// `POST /v1/applications`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeployRequest {
    /// A charm name (`wordpress`), a stored charm's URL (`local:wordpress-3`,
    /// as `POST /v1/charms` answers), or the path of a charm directory on
    /// the controller's machine (`/srv/charms/wordpress`).
    #[schema(example = "wordpress")]
    pub charm: String,
    /// The application's name; the charm's name by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application: Option<String>,
    /// How many units to add: 1 by default, 0 by default for a
    /// subordinate charm (whose units follow its principals'); at most
    /// 1000. Left out with `to: scale-with=APP`, where APP's units decide.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 1000)]
    pub num_units: Option<u32>,
    /// `ubuntu@22.04`; the charm's default otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "ubuntu@22.04")]
    pub base: Option<String>,
    /// `mem=2G cores=2`: the application's constraints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "mem=2G")]
    pub constraints: Option<String>,
    /// Where the units go, one directive per unit: `"lxd:1,zone=a"` or
    /// `["lxd:1", "zone=a"]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<PlacementList>,
    /// Charm settings; values are strings, numbers or booleans.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, serde_json::Value>,
    /// Answer the plan (200): what would start and stop, where, at what
    /// price; nothing changes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// Carry it out only if the model is still at this revision (a plan's
    /// `revision`); 409 otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0)]
    pub if_revision: Option<i64>,
}

/// A unit and the machine it was assigned to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PlacedUnitView {
    #[schema(example = "wordpress/0")]
    pub unit: String,
    #[schema(example = "0")]
    pub machine: String,
}

/// What deploy did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeployResponse {
    pub application: String,
    /// The stored charm: `ch:wordpress-0`, `local:wordpress-3`.
    pub charm: String,
    pub base: String,
    pub units: Vec<PlacedUnitView>,
    /// The machines the units went to (new or existing), in order.
    pub machines: Vec<String>,
    /// Constraint keys the active provider ignores.
    pub warnings: Vec<String>,
}

/// `POST /v1/applications/{app}/units`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddUnitsRequest {
    /// How many units: 1 by default, at least 1, at most 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1000)]
    pub num_units: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<PlacementList>,
    /// `mem=8G`: constraints for these units only, over the application's
    /// and the model's key by key; later changes to the application do not
    /// touch them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "mem=8G")]
    pub constraints: Option<String>,
    /// Answer the plan (200): what would start and stop, where, at what
    /// price; nothing changes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// Carry it out only if the model is still at this revision (a plan's
    /// `revision`); 409 otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0)]
    pub if_revision: Option<i64>,
}

/// What add-unit did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddUnitsResponse {
    pub units: Vec<PlacedUnitView>,
    pub machines: Vec<String>,
    /// Constraint keys the active provider ignores.
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// `POST /v1/units/remove`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RemoveUnitsRequest {
    /// Principal units, each once; all are removed or none.
    #[schema(example = json!(["wordpress/0"]), value_type = std::collections::BTreeSet<String>)]
    pub units: Vec<String>,
    /// Answer the plan (200): what would start and stop, where, at what
    /// price; nothing changes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// Carry it out only if the model is still at this revision (a plan's
    /// `revision`); 409 otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0)]
    pub if_revision: Option<i64>,
}

/// A constraints value to set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConstraintsRequest {
    /// `mem=3G cores=2`; the empty string unsets every key.
    #[schema(example = "mem=3G")]
    pub constraints: String,
    /// Answer the plan (200): what would start and stop, where, at what
    /// price; nothing changes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// Carry it out only if the model is still at this revision (a plan's
    /// `revision`); 409 otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0)]
    pub if_revision: Option<i64>,
}

/// Constraints as stored, canonical.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConstraintsResponse {
    #[schema(example = "mem=3072M")]
    pub constraints: String,
    /// Constraint keys the active provider ignores.
    pub warnings: Vec<String>,
}

input_or_store_error! {
    /// Why an application request failed.
    pub enum ApplicationError;
}

pub(crate) fn placed_views(placed: &[PlacedUnit]) -> (Vec<PlacedUnitView>, Vec<String>) {
    let units = placed
        .iter()
        .map(|p| PlacedUnitView {
            unit: p.unit.to_string(),
            machine: p.machine.to_string(),
        })
        .collect();
    let mut machines: Vec<String> = Vec::new();
    for p in placed {
        let id = p.machine.to_string();
        if !machines.contains(&id) {
            machines.push(id);
        }
    }
    (units, machines)
}

/// Loads the charm a deploy names: a stored charm by its URL, or a name
/// or a directory (read off the event loop).
async fn load_charm(shared: &Shared, arg: String) -> Result<ParsedCharm, ApplicationError> {
    if let Ok(url) = arg.parse::<CharmUrl>() {
        let store = shared.state.store.clone();
        return Ok(blocking(move || store.stored_charm(&url)).await?);
    }
    let loaded = actix_web::rt::task::spawn_blocking(move || charms::resolve(&arg))
        .await
        .map_err(|_| StoreError::Invariant("loading the charm panicked".into()))?;
    Ok(loaded.map_err(InputError::from)?)
}

/// Deploys an application and adds its units.
#[utoipa::path(
    post,
    path = "/v1/applications",
    operation_id = "deploy",
    tag = "applications",
    request_body = DeployRequest,
    responses(
        (status = 201, description = "Deployed", body = DeployResponse),
        (status = 200, description = "dry_run: the plan (what would start and stop, where, at what price); nothing changed", body = Plan),
        (status = 400, description = "Bad input (constraints, base, placement, charm, config), a placement the provider cannot honour (`ssh:`, a host name, a directive other than `zone=`, `lxd` without container support), num_units beside scale-with, directives for no units, or a query string", body = ErrorBody),
        (status = 401, description = "No or wrong admin token", body = ErrorBody),
        (status = 404, description = "A placement names an unknown machine, or the charm URL names no stored charm", body = ErrorBody),
        (status = 409, description = "The application exists, a placement machine has another base, or the model changed since if_revision, or the plan raises a cost above a budget (the message gives the plan's figures)", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 503, description = UNAVAILABLE, body = ErrorBody),
    )
)]
pub async fn deploy(
    shared: web::Data<Shared>,
    body: web::Json<input::Object<DeployRequest>>,
) -> Result<HttpResponse, ApplicationError> {
    let body = body.into_inner().0;
    let constraints = input::constraints(body.constraints.as_deref())?;
    let base = input::base(body.base.as_deref())?;
    let placement = body
        .to
        .as_ref()
        .map(|to| to.parse_for(&shared.state.provider))
        .transpose()?
        .unwrap_or_default();
    if let (Some(leader), Some(_)) = (scale_with(&placement), body.num_units) {
        // The leader's units decide how many there are: a count would be
        // ignored.
        return Err(InputError::Request(format!(
            "scale-with={leader} places a unit beside every unit of {leader}: leave out num_units"
        ))
        .into());
    }
    let settings = input::settings(&body.config)?;
    let named = body
        .application
        .as_deref()
        .map(input::application)
        .transpose()?;
    let charm = load_charm(&shared, body.charm).await?;
    let application = named.unwrap_or_else(|| charm.charm.name().clone());
    let default_units = if charm.charm.is_subordinate() { 0 } else { 1 };
    let units = input::count("num_units", body.num_units.unwrap_or(default_units), 0)?;
    let warnings = input::warnings(&constraints, &shared.state.provider);
    let (store, plan) =
        planned::<ApplicationError>(&shared, planning_of(body.dry_run, body.if_revision))?;
    let deployed = store
        .deploy(StoreDeploy {
            application,
            charm,
            base,
            constraints,
            units,
            placement,
            settings,
        })
        .await?;
    if body.dry_run {
        return Ok(plan.answer()?);
    }
    let (units, machines) = placed_views(&deployed.units);
    Ok(HttpResponse::Created().json(DeployResponse {
        application: deployed.application.to_string(),
        charm: deployed.charm,
        base: deployed.base.to_string(),
        units,
        machines,
        warnings,
    }))
}

/// Adds units to an application.
#[utoipa::path(
    post,
    path = "/v1/applications/{app}/units",
    operation_id = "add_units",
    tag = "applications",
    params(("app" = String, Path, description = "Application name")),
    request_body = AddUnitsRequest,
    responses(
        (status = 201, description = "Units added", body = AddUnitsResponse),
        (status = 200, description = "dry_run: the plan (what would start and stop, where, at what price); nothing changed", body = Plan),
        (status = 400, description = "Bad input, a placement the provider cannot honour, more directives than units, a subordinate application, or a query string", body = ErrorBody),
        (status = 401, description = "No or wrong admin token", body = ErrorBody),
        (status = 404, description = "Unknown application or machine", body = ErrorBody),
        (status = 409, description = "A placement machine has another base or is being removed, or the model changed since if_revision, or the plan raises a cost above a budget (the message gives the plan's figures)", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 503, description = UNAVAILABLE, body = ErrorBody),
    )
)]
pub async fn add_units(
    shared: web::Data<Shared>,
    app: web::Path<String>,
    body: web::Json<input::Object<AddUnitsRequest>>,
) -> Result<HttpResponse, ApplicationError> {
    let application = input::application(&app)?;
    let count = input::count("num_units", body.num_units.unwrap_or(1), 1)?;
    let constraints = input::constraints(body.constraints.as_deref())?;
    let warnings = input::warnings(&constraints, &shared.state.provider);
    let placement = body
        .to
        .as_ref()
        .map(|to| to.parse_for(&shared.state.provider))
        .transpose()?
        .unwrap_or_default();
    let (store, plan) =
        planned::<ApplicationError>(&shared, planning_of(body.dry_run, body.if_revision))?;
    let placed = store
        .add_units_with_constraints(application, count, placement, constraints)
        .await?;
    if body.dry_run {
        return Ok(plan.answer()?);
    }
    let (units, machines) = placed_views(&placed);
    Ok(HttpResponse::Created().json(AddUnitsResponse {
        units,
        machines,
        warnings,
    }))
}

/// Removes principal units (and their subordinates); their machines stay.
#[utoipa::path(
    post,
    path = "/v1/units/remove",
    operation_id = "remove_units",
    tag = "applications",
    request_body = RemoveUnitsRequest,
    responses(
        (status = 204, description = "Removed"),
        (status = 200, description = "dry_run: the plan (what would start and stop, where, at what price); nothing changed", body = Plan),
        (status = 409, description = "The model changed since if_revision", body = ErrorBody),
        (status = 400, description = "Bad unit name, no units, a unit listed twice, a subordinate unit, a unit that scales with another (it goes with its leader's), or a query string", body = ErrorBody),
        (status = 401, description = "No or wrong admin token", body = ErrorBody),
        (status = 404, description = "Unknown unit", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 503, description = UNAVAILABLE, body = ErrorBody),
    )
)]
pub async fn remove_units(
    shared: web::Data<Shared>,
    body: web::Json<input::Object<RemoveUnitsRequest>>,
) -> Result<HttpResponse, ApplicationError> {
    if body.units.is_empty() {
        return Err(InputError::Request("units must name at least one unit".into()).into());
    }
    let units = body
        .units
        .iter()
        .map(|u| input::unit(u))
        .collect::<Result<Vec<_>, _>>()?;
    let units = input::listed_once("units", units)?;
    let (store, plan) =
        planned::<ApplicationError>(&shared, planning_of(body.dry_run, body.if_revision))?;
    store.remove_units(units).await?;
    if body.dry_run {
        return Ok(plan.answer()?);
    }
    Ok(HttpResponse::NoContent().finish())
}

/// Removes an application, its units and its relations; machines stay.
#[utoipa::path(
    delete,
    path = "/v1/applications/{app}",
    operation_id = "remove_application",
    tag = "applications",
    params(("app" = String, Path, description = "Application name"), PlanningQuery),
    responses(
        (status = 204, description = "Removed"),
        (status = 200, description = "dry_run: the plan (what would start and stop, where, at what price); nothing changed", body = Plan),
        (status = 409, description = "The model changed since if_revision", body = ErrorBody),
        (status = 400, description = "Bad application name or query, or a body", body = ErrorBody),
        (status = 401, description = "No or wrong admin token", body = ErrorBody),
        (status = 404, description = "Unknown application", body = ErrorBody),
        (status = 503, description = UNAVAILABLE, body = ErrorBody),
    )
)]
pub async fn remove_application(
    shared: web::Data<Shared>,
    app: web::Path<String>,
    query: web::Query<PlanningQuery>,
) -> Result<HttpResponse, ApplicationError> {
    let application = input::application(&app)?;
    let (store, plan) =
        planned::<ApplicationError>(&shared, planning_of(query.dry_run, query.if_revision))?;
    store.remove_application(application).await?;
    if query.dry_run {
        return Ok(plan.answer()?);
    }
    Ok(HttpResponse::NoContent().finish())
}

/// An application's constraints.
#[utoipa::path(
    get,
    path = "/v1/applications/{app}/constraints",
    operation_id = "get_application_constraints",
    tag = "applications",
    params(("app" = String, Path, description = "Application name")),
    responses(
        (status = 200, description = "The constraints", body = ConstraintsResponse),
        (status = 400, description = "Bad application name", body = ErrorBody),
        (status = 401, description = "No or wrong admin token", body = ErrorBody),
        (status = 404, description = "Unknown application", body = ErrorBody),
        (status = 503, description = UNAVAILABLE, body = ErrorBody),
    )
)]
pub async fn get_constraints(
    shared: web::Data<Shared>,
    app: web::Path<String>,
) -> Result<HttpResponse, ApplicationError> {
    let application = input::application(&app)?;
    let store = shared.state.store.clone();
    let record = blocking(move || store.application(&application)).await?;
    Ok(HttpResponse::Ok().json(ConstraintsResponse {
        warnings: input::warnings(&record.constraints, &shared.state.provider),
        constraints: record.constraints.to_string(),
    }))
}

/// Replaces an application's constraints; units already added keep theirs.
#[utoipa::path(
    put,
    path = "/v1/applications/{app}/constraints",
    operation_id = "set_application_constraints",
    tag = "applications",
    params(("app" = String, Path, description = "Application name")),
    request_body = ConstraintsRequest,
    responses(
        (status = 200, description = "Set; with dry_run, the plan instead (nothing changed)", body = ConstraintsOrPlan),
        (status = 409, description = "The model changed since if_revision", body = ErrorBody),
        (status = 400, description = "Bad constraints, a subordinate application, or a query string", body = ErrorBody),
        (status = 401, description = "No or wrong admin token", body = ErrorBody),
        (status = 404, description = "Unknown application", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 503, description = UNAVAILABLE, body = ErrorBody),
    )
)]
pub async fn set_constraints(
    shared: web::Data<Shared>,
    app: web::Path<String>,
    body: web::Json<input::Object<ConstraintsRequest>>,
) -> Result<HttpResponse, ApplicationError> {
    let application = input::application(&app)?;
    let constraints = input::constraints(Some(&body.constraints))?;
    let warnings = input::warnings(&constraints, &shared.state.provider);
    let (store, plan) =
        planned::<ApplicationError>(&shared, planning_of(body.dry_run, body.if_revision))?;
    store
        .set_application_constraints(application, constraints.clone())
        .await?;
    if body.dry_run {
        return Ok(plan.answer()?);
    }
    Ok(HttpResponse::Ok().json(ConstraintsResponse {
        constraints: constraints.to_string(),
        warnings,
    }))
}

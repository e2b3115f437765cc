//! Machine routes: add-machine, remove-machine and retry-provisioning.

use actix_web::{web, HttpResponse};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::api::errors::{input_or_store_error, ErrorBody, UNAVAILABLE};
use crate::api::input::{self, InputError};
use crate::api::plans::{planned, planning_of, RetryOrPlan};
use crate::api::Shared;
use crate::domain::names::MachineId;
use crate::domain::placement::Placement;
use crate::plan::Plan;
use crate::store::machines::AddMachines;

/// `POST /v1/machines`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddMachinesRequest {
    /// How many machines: 1 by default, at least 1, at most 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1000)]
    pub count: Option<u32>,
    /// `ubuntu@22.04`; berth's default base otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// Combined with the model constraints (the model fills the keys these
    /// leave unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "mem=4G")]
    pub constraints: Option<String>,
    /// One directive: `lxd` (a container on a new machine), `lxd:3` (a
    /// container on machine 3), `zone=us-east-1a`, or
    /// `ssh:[user@]host[:port]` (an existing host enlisted over SSH; it
    /// keeps its own base, so `base` must be left out, and `count` is 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "zone=sim-a")]
    pub placement: Option<String>,
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

/// The machines added (for a new container on a new host, the container).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddMachinesResponse {
    pub machines: Vec<String>,
    /// Constraint keys the active provider ignores.
    pub warnings: Vec<String>,
}

/// `DELETE /v1/machines/{id}` options.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RemoveMachineQuery {
    /// Remove the machine with its units and containers.
    #[serde(default)]
    pub force: bool,
    /// Answer the plan (200) and change nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Carry it out only if the model is still at this revision; 409
    /// otherwise.
    #[serde(default)]
    #[param(minimum = 0)]
    pub if_revision: Option<i64>,
}

/// `POST /v1/machines/retry`: name machines, or ask for all of them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryRequest {
    /// Machines in provisioning error to retry, each once; all or none
    /// are.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = std::collections::BTreeSet<String>)]
    pub machines: Vec<String>,
    /// Every machine in provisioning error (instead of `machines`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all: bool,
    /// New constraints for the retried machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
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

/// The machines made eligible for provisioning again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryResponse {
    pub machines: Vec<String>,
    /// Constraint keys the active provider ignores.
    pub warnings: Vec<String>,
}

input_or_store_error! {
    /// Why a machine request failed.
    pub enum MachineError;
}

fn ids(machines: &[MachineId]) -> Vec<String> {
    machines.iter().map(ToString::to_string).collect()
}

/// Adds machines (or containers), pending.
#[utoipa::path(
    post,
    path = "/v1/machines",
    operation_id = "add_machines",
    tag = "machines",
    request_body = AddMachinesRequest,
    responses(
        (status = 201, description = "Added", body = AddMachinesResponse),
        (status = 200, description = "dry_run: the plan (what would start and stop, where, at what price); nothing changed", body = Plan),
        (status = 400, description = "Bad constraints, base, placement or count, a placement the provider cannot honour, or a query string", body = ErrorBody),
        (status = 401, description = "No or wrong admin token", body = ErrorBody),
        (status = 404, description = "Unknown container host", body = ErrorBody),
        (status = 409, description = "The container host is being removed, the ssh: host is already enlisted, or the model changed since if_revision, or the plan raises a cost above a budget (the message gives the plan's figures)", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 503, description = UNAVAILABLE, body = ErrorBody),
    )
)]
pub async fn add_machines(
    shared: web::Data<Shared>,
    body: web::Json<input::Object<AddMachinesRequest>>,
) -> Result<HttpResponse, MachineError> {
    let count = input::count("count", body.count.unwrap_or(1), 1)?;
    let constraints = input::constraints(body.constraints.as_deref())?;
    let base = input::base(body.base.as_deref())?;
    let placement = input::placement(body.placement.as_deref(), &shared.state.provider)?;
    if let Some(Placement::Ssh(target)) = &placement {
        if body.base.is_some() {
            return Err(InputError::Request(format!(
                "ssh:{target} runs the host's own base: leave out base"
            ))
            .into());
        }
        if count != 1 {
            return Err(InputError::Request(format!(
                "ssh:{target} enlists one existing host: count must be 1"
            ))
            .into());
        }
    }
    let warnings = input::warnings(&constraints, &shared.state.provider);
    let (store, plan) =
        planned::<MachineError>(&shared, planning_of(body.dry_run, body.if_revision))?;
    let added = store
        .add_machines(AddMachines {
            constraints,
            base,
            placement,
            count,
            role: None,
        })
        .await?;
    if body.dry_run {
        return Ok(plan.answer()?);
    }
    Ok(HttpResponse::Created().json(AddMachinesResponse {
        machines: ids(&added),
        warnings,
    }))
}

/// Removes a machine: at once if it never had an instance, otherwise once
/// the engine has stopped its instance. Container ids hold slashes
/// (`0/lxd/1`); send them as they are or percent-encoded.
#[utoipa::path(
    delete,
    path = "/v1/machines/{id}",
    operation_id = "remove_machine",
    tag = "machines",
    params(
        ("id" = String, Path, description = "Machine id: `3` or `0/lxd/1`"),
        RemoveMachineQuery,
    ),
    responses(
        (status = 204, description = "Removed, or being removed"),
        (status = 200, description = "dry_run: the plan (what would start and stop, where, at what price); nothing changed", body = Plan),
        (status = 400, description = "Bad machine id or query, or a body", body = ErrorBody),
        (status = 401, description = "No or wrong admin token", body = ErrorBody),
        (status = 404, description = "Unknown machine", body = ErrorBody),
        (status = 409, description = "The machine hosts units or containers (use force), or the model changed since if_revision", body = ErrorBody),
        (status = 503, description = UNAVAILABLE, body = ErrorBody),
    )
)]
pub async fn remove_machine(
    shared: web::Data<Shared>,
    id: web::Path<String>,
    query: web::Query<RemoveMachineQuery>,
) -> Result<HttpResponse, MachineError> {
    let id = input::machine(&id)?;
    let (store, plan) =
        planned::<MachineError>(&shared, planning_of(query.dry_run, query.if_revision))?;
    store.remove_machine(id, query.force).await?;
    if query.dry_run {
        return Ok(plan.answer()?);
    }
    Ok(HttpResponse::NoContent().finish())
}

/// Makes machines in provisioning error pending again, optionally with new
/// constraints.
#[utoipa::path(
    post,
    path = "/v1/machines/retry",
    operation_id = "retry_provisioning",
    tag = "machines",
    request_body = RetryRequest,
    responses(
        (status = 200, description = "Retried; with dry_run, the plan instead (nothing changed)", body = RetryOrPlan),
        (status = 400, description = "Bad ids or constraints; a machine listed twice; neither or both of machines and all; or a query string", body = ErrorBody),
        (status = 401, description = "No or wrong admin token", body = ErrorBody),
        (status = 404, description = "Unknown machine", body = ErrorBody),
        (status = 409, description = "A machine is not in provisioning error, or the model changed since if_revision, or the plan raises a cost above a budget (the message gives the plan's figures)", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 503, description = UNAVAILABLE, body = ErrorBody),
    )
)]
pub async fn retry(
    shared: web::Data<Shared>,
    body: web::Json<input::Object<RetryRequest>>,
) -> Result<HttpResponse, MachineError> {
    let constraints = body
        .constraints
        .as_deref()
        .map(|c| input::constraints(Some(c)))
        .transpose()?;
    let warnings = constraints
        .as_ref()
        .map(|c| input::warnings(c, &shared.state.provider))
        .unwrap_or_default();
    let (store, plan) =
        planned::<MachineError>(&shared, planning_of(body.dry_run, body.if_revision))?;
    let retried = match (body.all, body.machines.is_empty()) {
        (true, true) => store.retry_all(constraints).await?,
        (false, false) => {
            let machines = body
                .machines
                .iter()
                .map(|m| m.parse::<MachineId>().map_err(InputError::from))
                .collect::<Result<Vec<_>, _>>()?;
            let machines = input::listed_once("machines", machines)?;
            store.retry(machines, constraints).await?
        }
        (true, false) => {
            return Err(InputError::Request("give either machines or all, not both".into()).into())
        }
        (false, true) => {
            return Err(InputError::Request("name the machines to retry, or set all".into()).into())
        }
    };
    if body.dry_run {
        return Ok(plan.answer()?);
    }
    // The engine learns of it from the change log: each machine's actor
    // hears it as `Retry`.
    Ok(HttpResponse::Ok().json(RetryResponse {
        machines: ids(&retried),
        warnings,
    }))
}

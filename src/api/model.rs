//! Model routes: the model constraints, which every new unit and every
//! machine made without a unit inherits from.

use actix_web::{web, HttpResponse};

use crate::api::applications::{ConstraintsRequest, ConstraintsResponse};
use crate::api::errors::{input_or_store_error, ErrorBody, UNAVAILABLE};
use crate::api::input::{self};
use crate::api::plans::{planned, planning_of, ConstraintsOrPlan};
use crate::api::Shared;
use crate::store::blocking;

input_or_store_error! {
    /// Why a model request failed.
    pub enum ModelError;
}

/// The model constraints.
#[utoipa::path(
    get,
    path = "/v1/model/constraints",
    operation_id = "get_model_constraints",
    tag = "model",
    responses(
        (status = 200, description = "The constraints", body = ConstraintsResponse),
        (status = 401, description = "No or wrong admin token", body = ErrorBody),
        (status = 503, description = UNAVAILABLE, body = ErrorBody),
    )
)]
pub async fn get_constraints(shared: web::Data<Shared>) -> Result<HttpResponse, ModelError> {
    let store = shared.state.store.clone();
    let model = blocking(move || store.model()).await?;
    Ok(HttpResponse::Ok().json(ConstraintsResponse {
        warnings: input::warnings(&model.constraints, &shared.state.provider),
        constraints: model.constraints.to_string(),
    }))
}

/// Replaces the model constraints; existing units and machines keep theirs.
#[utoipa::path(
    put,
    path = "/v1/model/constraints",
    operation_id = "set_model_constraints",
    tag = "model",
    request_body = ConstraintsRequest,
    responses(
        (status = 200, description = "Set; with dry_run, the plan instead (nothing changed)", body = ConstraintsOrPlan),
        (status = 409, description = "The model changed since if_revision", body = ErrorBody),
        (status = 400, description = "Bad constraints, or a query string", body = ErrorBody),
        (status = 401, description = "No or wrong admin token", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 503, description = UNAVAILABLE, body = ErrorBody),
    )
)]
pub async fn set_constraints(
    shared: web::Data<Shared>,
    body: web::Json<input::Object<ConstraintsRequest>>,
) -> Result<HttpResponse, ModelError> {
    let constraints = input::constraints(Some(&body.constraints))?;
    let warnings = input::warnings(&constraints, &shared.state.provider);
    let (store, plan) =
        planned::<ModelError>(&shared, planning_of(body.dry_run, body.if_revision))?;
    store.set_model_constraints(constraints.clone()).await?;
    if body.dry_run {
        return Ok(plan.answer()?);
    }
    Ok(HttpResponse::Ok().json(ConstraintsResponse {
        constraints: constraints.to_string(),
        warnings,
    }))
}

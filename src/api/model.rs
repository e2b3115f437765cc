//! Model routes: the model constraints, which every new unit and every
//! machine made without a unit inherits from.

use std::fmt;

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse, ResponseError};

use crate::api::applications::{ConstraintsRequest, ConstraintsResponse};
use crate::api::errors::{error_chain_fmt, error_response, store_status, ErrorBody};
use crate::api::input::{self, InputError};
use crate::api::Shared;
use crate::store::{blocking, StoreError};

/// Why a model request failed.
#[derive(thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl fmt::Debug for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        error_chain_fmt(self, f)
    }
}

impl ResponseError for ModelError {
    fn status_code(&self) -> StatusCode {
        match self {
            ModelError::Input(_) => StatusCode::BAD_REQUEST,
            ModelError::Store(e) => store_status(e),
        }
    }

    fn error_response(&self) -> HttpResponse {
        error_response(self)
    }
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
        (status = 503, description = "Overloaded", body = ErrorBody),
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
        (status = 200, description = "Set", body = ConstraintsResponse),
        (status = 400, description = "Bad constraints", body = ErrorBody),
        (status = 401, description = "No or wrong admin token", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 503, description = "Overloaded", body = ErrorBody),
    )
)]
pub async fn set_constraints(
    shared: web::Data<Shared>,
    body: web::Json<ConstraintsRequest>,
) -> Result<HttpResponse, ModelError> {
    let constraints = input::constraints(Some(&body.constraints))?;
    let warnings = input::warnings(&constraints, &shared.state.provider);
    shared
        .state
        .store
        .set_model_constraints(constraints.clone())
        .await?;
    Ok(HttpResponse::Ok().json(ConstraintsResponse {
        constraints: constraints.to_string(),
        warnings,
    }))
}

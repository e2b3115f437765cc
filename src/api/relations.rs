//! Relation routes: integrate and remove-relation.

use actix_web::{web, HttpResponse};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::api::errors::{input_or_store_error, ErrorBody, UNAVAILABLE};
use crate::api::input::{self, InputError};
use crate::api::Shared;
use crate::domain::charm::EndpointSpec;

/// Two applications, each optionally with an endpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RelationRequest {
    /// Exactly two: `["wordpress", "mysql:db"]`.
    #[schema(example = json!(["wordpress", "mysql:db"]))]
    pub endpoints: Vec<String>,
}

/// A relation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RelationResponse {
    /// `"wordpress:db mysql:db"`: the relation's identity, requirer first.
    pub key: String,
    /// The requiring side, `wordpress:db`.
    pub requirer: String,
    /// The providing side, `mysql:db`.
    pub provider: String,
    pub interface: String,
    /// `global` or `container` (a subordinate joined to its principal).
    pub scope: String,
}

input_or_store_error! {
    /// Why a relation request failed.
    pub enum RelationError;
}

fn pair(body: &RelationRequest) -> Result<(EndpointSpec, EndpointSpec), InputError> {
    match body.endpoints.as_slice() {
        [a, b] => Ok((input::endpoint(a)?, input::endpoint(b)?)),
        other => Err(InputError::Request(format!(
            "endpoints must name exactly two applications, got {}",
            other.len()
        ))),
    }
}

/// Relates two applications (`juju integrate`).
#[utoipa::path(
    post,
    path = "/v1/relations",
    operation_id = "integrate",
    tag = "relations",
    request_body = RelationRequest,
    responses(
        (status = 201, description = "Related", body = RelationResponse),
        (status = 400, description = "Bad endpoints; no relation or several fit; or a query string", body = ErrorBody),
        (status = 401, description = "No or wrong admin token", body = ErrorBody),
        (status = 404, description = "Unknown application", body = ErrorBody),
        (status = 409, description = "The relation exists, or a subordinate relation between different bases", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 503, description = UNAVAILABLE, body = ErrorBody),
    )
)]
pub async fn integrate(
    shared: web::Data<Shared>,
    body: web::Json<input::Object<RelationRequest>>,
) -> Result<HttpResponse, RelationError> {
    let (a, b) = pair(&body)?;
    let record = shared.state.store.integrate(a, b).await?;
    Ok(HttpResponse::Created().json(RelationResponse {
        requirer: format!("{}:{}", record.app1, record.endpoint1),
        provider: format!("{}:{}", record.app2, record.endpoint2),
        key: record.key,
        interface: record.interface,
        scope: record.scope,
    }))
}

/// Removes a relation, and the subordinate units it made.
#[utoipa::path(
    post,
    path = "/v1/relations/remove",
    operation_id = "remove_relation",
    tag = "relations",
    request_body = RelationRequest,
    responses(
        (status = 204, description = "Removed"),
        (status = 400, description = "Bad endpoints, ambiguous, or a query string", body = ErrorBody),
        (status = 401, description = "No or wrong admin token", body = ErrorBody),
        (status = 404, description = "Unknown application or relation", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 503, description = UNAVAILABLE, body = ErrorBody),
    )
)]
pub async fn remove_relation(
    shared: web::Data<Shared>,
    body: web::Json<input::Object<RelationRequest>>,
) -> Result<HttpResponse, RelationError> {
    let (a, b) = pair(&body)?;
    shared.state.store.remove_relation(a, b).await?;
    Ok(HttpResponse::NoContent().finish())
}

//! The simulated cloud's fault routes: show, replace and clear the faults
//! in force (`/v1/sim/faults`). Only a controller on the simulated cloud
//! has them; on any other provider they answer 404.

use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};

use crate::api::errors::{route_error, store_status, ErrorBody, UNAVAILABLE};
use crate::api::input;
use crate::api::Shared;
use crate::providers::sim::{FaultSet, SimError, SimProvider};
use crate::store::StoreError;

/// Why a fault request failed.
#[derive(thiserror::Error)]
pub enum FaultsError {
    /// The controller's provider is not the simulated cloud.
    #[error("the provider is {0}, not the simulated cloud; it has no faults to set")]
    NotSimulated(String),
    /// The set does not validate; nothing changed.
    #[error("{0}")]
    Invalid(String),
    /// The faults are in force, but the stops they caused could not be
    /// recorded.
    #[error("the simulated cloud could not record the change: {0}")]
    Ledger(String),
    /// The faults are in force, but the zones' availability could not be
    /// recorded.
    #[error("the faults are in force, but the zones could not be recorded: {0}")]
    Store(#[from] StoreError),
}

route_error!(FaultsError {
    FaultsError::NotSimulated(_) => StatusCode::NOT_FOUND,
    FaultsError::Invalid(_) => StatusCode::BAD_REQUEST,
    FaultsError::Ledger(_) => StatusCode::INTERNAL_SERVER_ERROR,
    FaultsError::Store(e) => store_status(e),
});

fn simulated(shared: &Shared) -> Result<&Arc<SimProvider>, FaultsError> {
    shared
        .state
        .sim
        .as_ref()
        .ok_or_else(|| FaultsError::NotSimulated(shared.state.provider.name.clone()))
}

async fn replace(shared: &Shared, faults: FaultSet) -> Result<HttpResponse, FaultsError> {
    let sim = simulated(shared)?;
    let set = sim.set_faults(faults).await.map_err(|e| match e {
        SimError::Faults(message) => FaultsError::Invalid(message),
        other => FaultsError::Ledger(other.to_string()),
    })?;
    // The zones it reports now, recorded at once: placement and `berth
    // zones` follow a zone taken down or brought back without waiting for
    // the engine to ask.
    shared
        .state
        .store
        .set_provider_zones(sim.zone_report())
        .await?;
    Ok(HttpResponse::Ok().json(set))
}

/// The faults in force in the simulated cloud.
#[utoipa::path(
    get,
    path = "/v1/sim/faults",
    operation_id = "get_sim_faults",
    tag = "sim",
    responses(
        (status = 200, description = "The faults in force", body = FaultSet),
        (status = 401, description = "No or wrong admin token", body = ErrorBody),
        (status = 404, description = "The provider is not the simulated cloud", body = ErrorBody),
        (status = 503, description = UNAVAILABLE, body = ErrorBody),
    )
)]
pub async fn get_faults(shared: web::Data<Shared>) -> Result<HttpResponse, FaultsError> {
    let sim = simulated(&shared)?;
    Ok(HttpResponse::Ok().json(sim.faults()))
}

/// Replaces the faults in force in the simulated cloud with these (a field
/// left out is no fault). Instances running in a zone set down stop.
#[utoipa::path(
    put,
    path = "/v1/sim/faults",
    operation_id = "set_sim_faults",
    tag = "sim",
    request_body = FaultSet,
    responses(
        (status = 200, description = "The faults now in force", body = FaultSet),
        (status = 400, description = "An unknown field, a share outside 0..=1, a negative capacity, a zone the cloud does not have or listed twice, a throttle with a burst of 0 or a rate not above 0, or a query string: nothing changed", body = ErrorBody),
        (status = 401, description = "No or wrong admin token", body = ErrorBody),
        (status = 404, description = "The provider is not the simulated cloud", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 500, description = "The faults are in force, but the stops they caused could not be recorded", body = ErrorBody),
        (status = 503, description = UNAVAILABLE, body = ErrorBody),
    )
)]
pub async fn set_faults(
    shared: web::Data<Shared>,
    body: web::Json<input::Object<FaultSet>>,
) -> Result<HttpResponse, FaultsError> {
    replace(&shared, body.into_inner().0).await
}

/// Clears every fault in the simulated cloud (instances that stopped stay
/// stopped).
#[utoipa::path(
    delete,
    path = "/v1/sim/faults",
    operation_id = "clear_sim_faults",
    tag = "sim",
    responses(
        (status = 200, description = "Cleared: the empty set", body = FaultSet),
        (status = 400, description = "A body: this route takes none", body = ErrorBody),
        (status = 401, description = "No or wrong admin token", body = ErrorBody),
        (status = 404, description = "The provider is not the simulated cloud", body = ErrorBody),
        (status = 503, description = UNAVAILABLE, body = ErrorBody),
    )
)]
pub async fn clear_faults(shared: web::Data<Shared>) -> Result<HttpResponse, FaultsError> {
    replace(&shared, FaultSet::default()).await
}

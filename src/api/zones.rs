//! Zone routes: list the availability zones, enable and disable one.

use actix_web::{web, HttpResponse};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::api::errors::{route_error, store_status, ErrorBody, UNAVAILABLE};
use crate::api::input;
use crate::api::Shared;
use crate::store::zones::ZoneRecord;
use crate::store::{blocking, StoreError};

/// An availability zone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ZoneView {
    pub name: String,
    /// Whether new machines may go here.
    pub available: bool,
    /// What the provider last said.
    pub provider_available: bool,
    /// An administrator disabled it.
    pub disabled: bool,
    /// Why it is unavailable, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl From<&ZoneRecord> for ZoneView {
    fn from(zone: &ZoneRecord) -> ZoneView {
        ZoneView {
            name: zone.name.clone(),
            available: zone.available(),
            provider_available: zone.provider_available,
            disabled: zone.disabled,
            reason: zone.unavailable_reason(),
        }
    }
}

/// Why a zone request failed.
#[derive(thiserror::Error)]
pub enum ZoneError {
    #[error(transparent)]
    Store(#[from] StoreError),
}

route_error!(ZoneError {
    ZoneError::Store(e) => store_status(e),
});

/// Every zone the provider reported, by name.
#[utoipa::path(
    get,
    path = "/v1/zones",
    operation_id = "list_zones",
    tag = "zones",
    responses(
        (status = 200, description = "The zones", body = [ZoneView]),
        (status = 401, description = "No or wrong admin token", body = ErrorBody),
        (status = 503, description = UNAVAILABLE, body = ErrorBody),
    )
)]
pub async fn list(shared: web::Data<Shared>) -> Result<HttpResponse, ZoneError> {
    let store = shared.state.store.clone();
    let zones = blocking(move || store.zones()).await?;
    Ok(HttpResponse::Ok().json(zones.iter().map(ZoneView::from).collect::<Vec<_>>()))
}

async fn set_enabled(
    shared: web::Data<Shared>,
    zone: String,
    enabled: bool,
) -> Result<HttpResponse, ZoneError> {
    let record = shared.state.store.set_zone_enabled(zone, enabled).await?;
    Ok(HttpResponse::Ok().json(ZoneView::from(&record)))
}

/// Lets new machines go to a zone again.
#[utoipa::path(
    post,
    path = "/v1/zones/{zone}/enable",
    operation_id = "enable_zone",
    tag = "zones",
    params(("zone" = String, Path, description = "Zone name")),
    responses(
        (status = 200, description = "Enabled", body = ZoneView),
        (status = 400, description = "A query string, or a body other than an empty object: this route takes no options", body = ErrorBody),
        (status = 401, description = "No or wrong admin token", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 404, description = "Unknown zone", body = ErrorBody),
        (status = 503, description = UNAVAILABLE, body = ErrorBody),
    )
)]
pub async fn enable(
    shared: web::Data<Shared>,
    zone: web::Path<String>,
    // It takes no options: one sent would be ignored (`{"dry_run": true}`
    // would change the zone).
    _: input::NoOptions,
) -> Result<HttpResponse, ZoneError> {
    set_enabled(shared, zone.into_inner(), true).await
}

/// Keeps new machines out of a zone (machines there stay).
#[utoipa::path(
    post,
    path = "/v1/zones/{zone}/disable",
    operation_id = "disable_zone",
    tag = "zones",
    params(("zone" = String, Path, description = "Zone name")),
    responses(
        (status = 200, description = "Disabled", body = ZoneView),
        (status = 400, description = "A query string, or a body other than an empty object: this route takes no options", body = ErrorBody),
        (status = 401, description = "No or wrong admin token", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 404, description = "Unknown zone", body = ErrorBody),
        (status = 503, description = UNAVAILABLE, body = ErrorBody),
    )
)]
pub async fn disable(
    shared: web::Data<Shared>,
    zone: web::Path<String>,
    // It takes no options: one sent would be ignored (`{"dry_run": true}`
    // would change the zone).
    _: input::NoOptions,
) -> Result<HttpResponse, ZoneError> {
    set_enabled(shared, zone.into_inner(), false).await
}

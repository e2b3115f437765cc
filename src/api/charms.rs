//! `POST /v1/charms`: a charm uploaded as a zip archive of its directory
//! (what `berth deploy ./dir` sends), checked as strictly as a charm on
//! disk (see [`crate::charms::load_charm_archive`]) and stored, or found
//! stored by its contents. Deploy then names it by its URL
//! (`local:wordpress-3`), so the controller never reads the client's
//! paths.

use actix_web::{web, HttpResponse};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::api::errors::{route_error, store_status, ErrorBody, UNAVAILABLE};
use crate::api::input::{read_limited, BodyRead};
use crate::api::Shared;
use crate::charms::{load_charm_archive, CharmLoadError, MAX_ARCHIVE_BYTES};
use crate::store::StoreError;

/// What an upload stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CharmUploaded {
    /// The charm's URL, for deploy's `charm`.
    #[schema(example = "local:wordpress-0")]
    pub charm: String,
    /// Lowercase hex sha256 of the charm's files and links (not of the
    /// archive's bytes): the same directory always has the same digest.
    pub sha256: String,
    /// Whether this upload stored it; `false` when the same contents were
    /// stored before, under the same URL.
    pub created: bool,
}

/// Why an upload failed.
#[derive(thiserror::Error)]
pub enum CharmUploadError {
    #[error("charm archive too large: at most {limit} bytes")]
    TooLarge { limit: usize },
    #[error("cannot read the charm archive: {0}")]
    Unreadable(String),
    #[error(transparent)]
    Archive(#[from] CharmLoadError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

route_error!(CharmUploadError {
    CharmUploadError::TooLarge { .. } => actix_web::http::StatusCode::PAYLOAD_TOO_LARGE,
    CharmUploadError::Unreadable(_) | CharmUploadError::Archive(_) => {
        actix_web::http::StatusCode::BAD_REQUEST
    }
    CharmUploadError::Store(e) => store_status(e),
});

impl From<BodyRead> for CharmUploadError {
    fn from(read: BodyRead) -> CharmUploadError {
        match read {
            BodyRead::Unreadable(e) => CharmUploadError::Unreadable(e),
            BodyRead::TooLarge { limit } => CharmUploadError::TooLarge { limit },
        }
    }
}

/// Uploads a charm: a zip archive of a charm directory, `metadata.yaml`
/// at its root. Nothing is stored unless the whole archive is a valid
/// charm; the same contents uploaded again are the same charm.
#[utoipa::path(
    post,
    path = "/v1/charms",
    operation_id = "add_charm",
    tag = "applications",
    request_body(
        content(
            (Vec<u8> = "application/zip"),
            (Vec<u8> = "application/octet-stream"),
        ),
        description = "A zip archive of a charm directory, at most 16 MiB (32 MiB unpacked, 10,000 entries): metadata.yaml at its root, optionally config.yaml and revision; every entry a relative path without '..'"
    ),
    responses(
        (status = 201, description = "Stored", body = CharmUploaded),
        (status = 200, description = "Already stored with the same contents", body = CharmUploaded),
        (status = 400, description = "Not a zip archive, an entry escaping the charm's root, no metadata.yaml, too much unpacked, or a charm file that breaks the charm rules, or a query string: nothing stored", body = ErrorBody),
        (status = 401, description = "No or wrong admin token", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 503, description = UNAVAILABLE, body = ErrorBody),
    )
)]
pub async fn add_charm(
    shared: web::Data<Shared>,
    payload: web::Payload,
) -> Result<HttpResponse, CharmUploadError> {
    let archive = read_limited(payload, MAX_ARCHIVE_BYTES).await?.to_vec();
    let loaded = actix_web::rt::task::spawn_blocking(move || load_charm_archive(&archive))
        .await
        .map_err(|_| StoreError::Invariant("reading the charm archive panicked".into()))??;
    let stored = shared.state.store.add_charm(loaded).await?;
    let uploaded = CharmUploaded {
        charm: stored.url,
        sha256: stored.sha256,
        created: stored.created,
    };
    Ok(if uploaded.created {
        HttpResponse::Created().json(uploaded)
    } else {
        HttpResponse::Ok().json(uploaded)
    })
}

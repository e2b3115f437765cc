//! Machine agent routes: the one-time password exchange and heartbeats.
//!
//! These do not take the admin token: an agent proves itself with the
//! one-time password its instance was launched with, then with the
//! credential it got in exchange. A machine whose heartbeats stop is shown
//! `down` by the engine; a heartbeat brings it back to `started`.

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::api::auth::{bearer_token, AuthError};
use crate::api::errors::{route_error, store_status, ErrorBody, UNAVAILABLE};
use crate::api::input::{self, InputError};
use crate::api::Shared;
use crate::contracts::secrets::Secret;
use crate::domain::machine::machine_status;
use crate::store::lifecycle::CheckInProof;
use crate::store::StoreError;

/// `POST /v1/agents/{machine}/connect`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConnectRequest {
    /// The one-time password the instance was launched with.
    pub password: String,
    /// The credential the agent chose, 64 lowercase hexadecimal digits
    /// (32 random bytes): the controller keeps it as the machine's, and a
    /// check-in repeated with the same password and credential (its answer
    /// was lost) is answered again. Without it the controller makes one,
    /// and a spent password is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = r"^[0-9a-f]{64}$")]
    pub credential: Option<String>,
}

/// Whether `credential` is one an agent may choose: 64 lowercase
/// hexadecimal digits, as the controller's own.
fn chosen_credential(credential: Option<String>) -> Result<Option<Secret>, InputError> {
    match credential {
        None => Ok(None),
        Some(c) if c.len() == 64 && c.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) => {
            Ok(Some(Secret::new(c)))
        }
        Some(_) => Err(InputError::Request(
            "credential must be 64 lowercase hexadecimal digits (32 random bytes)".into(),
        )),
    }
}

/// The machine's permanent credential: send it as `Authorization: Bearer`
/// on heartbeats. It is shown once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConnectResponse {
    pub machine: String,
    pub credential: String,
}

/// What a heartbeat answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatResponse {
    pub machine: String,
    /// The machine's agent status after the heartbeat (`started`).
    pub status: String,
}

/// Why an agent request failed.
#[derive(thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error(transparent)]
    Auth(#[from] AuthError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

route_error!(AgentError {
    AgentError::Input(_) => StatusCode::BAD_REQUEST,
    AgentError::Auth(_) => StatusCode::UNAUTHORIZED,
    AgentError::Store(e) => store_status(e),
});

/// Exchanges a machine's one-time password for its credential; the
/// machine is then started. The password works once, but for an agent that
/// chose its credential: the same password and credential again get the
/// same answer.
#[utoipa::path(
    post,
    path = "/v1/agents/{machine}/connect",
    operation_id = "agent_connect",
    tag = "agents",
    security(()),
    params(("machine" = String, Path, description = "Machine id: `3` or `0/lxd/1`")),
    request_body = ConnectRequest,
    responses(
        (status = 200, description = "Connected", body = ConnectResponse),
        (status = 400, description = "Bad machine id or body", body = ErrorBody),
        (status = 401, description = "Wrong or already used password", body = ErrorBody),
        (status = 404, description = "Unknown machine", body = ErrorBody),
        (status = 409, description = "The machine does not take an agent now (its instance is not recorded yet, or it is being replaced or removed); the password still works", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 503, description = UNAVAILABLE, body = ErrorBody),
    )
)]
pub async fn connect(
    shared: web::Data<Shared>,
    machine: web::Path<String>,
    body: web::Json<input::Object<ConnectRequest>>,
) -> Result<HttpResponse, AgentError> {
    let id = input::machine(&machine)?;
    let ConnectRequest {
        password,
        credential,
    } = body.into_inner().0;
    let proof = CheckInProof {
        password: Secret::new(password),
        chosen: chosen_credential(credential)?,
    };
    let credential = shared.state.store.agent_check_in(id, proof).await?;
    Ok(HttpResponse::Ok().json(ConnectResponse {
        machine: id.to_string(),
        credential: credential.expose().to_string(),
    }))
}

/// The agent is alive.
#[utoipa::path(
    post,
    path = "/v1/agents/{machine}/heartbeat",
    operation_id = "agent_heartbeat",
    tag = "agents",
    security(("agent_credential" = [])),
    params(("machine" = String, Path, description = "Machine id: `3` or `0/lxd/1`")),
    responses(
        (status = 200, description = "Recorded", body = HeartbeatResponse),
        (status = 400, description = "Bad machine id", body = ErrorBody),
        (status = 401, description = "No or wrong agent credential", body = ErrorBody),
        (status = 404, description = "Unknown machine", body = ErrorBody),
        (status = 503, description = UNAVAILABLE, body = ErrorBody),
    )
)]
pub async fn heartbeat(
    shared: web::Data<Shared>,
    req: HttpRequest,
    machine: web::Path<String>,
) -> Result<HttpResponse, AgentError> {
    let id = input::machine(&machine)?;
    let credential = Secret::new(bearer_token(req.headers())?);
    let state = shared.state.store.agent_heartbeat(id, credential).await?;
    Ok(HttpResponse::Ok().json(HeartbeatResponse {
        machine: id.to_string(),
        status: machine_status(state).juju_status.to_string(),
    }))
}

//! Who may call the API: the admin token on every route but `/healthz`, the
//! agent credential on heartbeats, and (in [`super::webhooks`]) the HMAC
//! signature on webhooks; plus the concurrency guard that answers 503 when
//! the controller has as much work in flight as it takes.
//!
//! Tokens are compared by hashing what was presented and comparing hashes
//! in constant time ([`secret_matches`]); the admin token's hash is read
//! from the store once, when the server starts.

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::AUTHORIZATION;
use actix_web::http::StatusCode;
use actix_web::middleware::Next;
use actix_web::web;

use crate::api::errors::{route_error, RequestError};
use crate::api::Shared;
use crate::contracts::secrets::secret_matches;

/// Why a request was not let in.
#[derive(thiserror::Error)]
pub enum AuthError {
    #[error("missing Authorization header: expected \"Authorization: Bearer <token>\"")]
    Missing,
    #[error("malformed Authorization header: expected \"Bearer <token>\"")]
    Malformed,
    #[error("invalid token")]
    Invalid,
}

route_error!(AuthError {
    AuthError::Missing | AuthError::Malformed | AuthError::Invalid => {
        StatusCode::UNAUTHORIZED
    }
});

/// The token of an `Authorization: Bearer <token>` header.
///
/// # Errors
///
/// [`AuthError::Missing`] without the header; [`AuthError::Malformed`] for
/// another scheme, an empty token or a value that is not text.
pub fn bearer_token(headers: &actix_web::http::header::HeaderMap) -> Result<&str, AuthError> {
    let value = headers.get(AUTHORIZATION).ok_or(AuthError::Missing)?;
    let value = value.to_str().map_err(|_| AuthError::Malformed)?;
    let (scheme, token) = value.split_once(' ').ok_or(AuthError::Malformed)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(AuthError::Malformed);
    }
    Ok(token)
}

/// The server's shared state, which every app the server builds holds.
fn shared_state(req: &ServiceRequest) -> Result<web::Data<Shared>, actix_web::Error> {
    req.app_data::<web::Data<Shared>>()
        .cloned()
        .ok_or_else(|| actix_web::error::ErrorInternalServerError("API state missing"))
}

/// Middleware: the request must carry the admin token.
pub async fn require_admin(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let shared = shared_state(&req)?;
    let token = bearer_token(req.headers())?;
    if !secret_matches(token, &shared.admin_token_hash) {
        return Err(AuthError::Invalid.into());
    }
    next.call(req).await
}

/// Middleware: at most [`crate::api::Limits::max_concurrent_requests`]
/// requests are handled at once; the next one is refused with 503 rather
/// than queued, so an overloaded controller sheds load instead of building
/// an unbounded backlog.
pub async fn limit_concurrency(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let shared = shared_state(&req)?;
    let Ok(_permit) = shared.requests.clone().try_acquire_owned() else {
        shared.state.metrics.api_overloaded();
        return Err(RequestError::Overloaded("too many requests in flight").into());
    };
    next.call(req).await
}

#[cfg(test)]
mod tests {
    use actix_web::http::header::{HeaderMap, HeaderValue};
    use actix_web::ResponseError;

    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn a_bearer_header_yields_its_token() {
        assert_eq!(bearer_token(&headers("Bearer abc123")).unwrap(), "abc123");
        assert_eq!(bearer_token(&headers("bearer abc123")).unwrap(), "abc123");
    }

    #[test]
    fn a_missing_header_is_missing() {
        assert!(matches!(
            bearer_token(&HeaderMap::new()),
            Err(AuthError::Missing)
        ));
    }

    #[test]
    fn another_scheme_or_an_empty_token_is_malformed() {
        for value in ["Basic dXNlcjpwYXNz", "Bearer", "Bearer ", "abc123"] {
            assert!(
                matches!(bearer_token(&headers(value)), Err(AuthError::Malformed)),
                "{value:?}"
            );
        }
    }

    #[test]
    fn every_auth_error_is_401() {
        for e in [AuthError::Missing, AuthError::Malformed, AuthError::Invalid] {
            assert_eq!(e.status_code(), StatusCode::UNAUTHORIZED);
        }
    }
}

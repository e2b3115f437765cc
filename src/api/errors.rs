//! How the API says no: the JSON error body every route uses, the status
//! each store error maps to, and the errors raised before a handler runs
//! (bodies, paths and queries that do not parse; options sent where the
//! route does not read them; unknown routes; overload).
//!
//! Each group of handlers has its own error enum beside it with an explicit
//! `status_code()`; they all render through [`json_error`], so a client sees
//! one shape: `{"error": {"code": "...", "message": "..."}}`.

use std::fmt;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::error::{JsonPayloadError, PathError, QueryPayloadError};
use actix_web::http::header::{self, HeaderValue};
use actix_web::http::{Method, StatusCode};
use actix_web::middleware::Next;
use actix_web::{HttpRequest, HttpResponse, ResponseError};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::store::StoreError;

/// The body of every error response.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorDetail {
    /// A stable word for the class of error: `bad-request`, `unauthorized`,
    /// `not-found`, `method-not-allowed`, `conflict`, `payload-too-large`,
    /// `unavailable` (503: too many requests at once, the database cannot
    /// be reached, written or locked now, or a feature not set up; the
    /// message says which) or `internal`.
    #[schema(example = "bad-request")]
    pub code: String,
    /// What was wrong and what was expected, in the domain's own words.
    #[schema(
        example = "bad \"mem\" constraint: must be a non-negative float with optional M/G/T/P suffix"
    )]
    pub message: String,
}

/// What the OpenAPI document says of a route's 503.
pub const UNAVAILABLE: &str = "Unavailable: too many requests at once, or the database cannot be reached, written or locked now; retry later";

/// The `code` of an error response with `status`.
pub fn code_for(status: StatusCode) -> &'static str {
    match status {
        StatusCode::BAD_REQUEST => "bad-request",
        StatusCode::UNAUTHORIZED => "unauthorized",
        StatusCode::NOT_FOUND => "not-found",
        StatusCode::METHOD_NOT_ALLOWED => "method-not-allowed",
        StatusCode::CONFLICT => "conflict",
        StatusCode::PAYLOAD_TOO_LARGE => "payload-too-large",
        StatusCode::SERVICE_UNAVAILABLE => "unavailable",
        _ => "internal",
    }
}

/// The JSON error response for `status` with `message`.
pub fn json_error(status: StatusCode, message: impl Into<String>) -> HttpResponse {
    let body = ErrorBody {
        error: ErrorDetail {
            code: code_for(status).to_string(),
            message: message.into(),
        },
    };
    let mut response = HttpResponse::build(status);
    if status == StatusCode::UNAUTHORIZED {
        response.insert_header((header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer")));
    }
    response.json(body)
}

/// The response for a handler error. Bugs (500) are logged with their
/// whole chain; refusals for overload (503) at `warn`, since they come in
/// floods and `/metrics` counts them. The message is given as is: the
/// store's messages for its own faults carry no secrets.
pub fn error_response<E: ResponseError + fmt::Debug>(error: &E) -> HttpResponse {
    let status = error.status_code();
    if status == StatusCode::SERVICE_UNAVAILABLE {
        log::warn!("{status}: {error}");
    } else if status.is_server_error() {
        log::error!("{status}: {error:?}");
    }
    json_error(status, error.to_string())
}

/// The status a store error answers with.
///
/// The caller's mistakes are 4xx. A store that cannot take more work (no
/// pooled connection in time, the writer gone, a disk full or read-only)
/// is 503: retrying later may work. Anything else is a bug or a broken database: 500.
pub fn store_status(error: &StoreError) -> StatusCode {
    match error {
        StoreError::NotFound(_) => StatusCode::NOT_FOUND,
        StoreError::Invalid(_) => StatusCode::BAD_REQUEST,
        StoreError::Conflict(_) => StatusCode::CONFLICT,
        StoreError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
        StoreError::Connect(_)
        | StoreError::WriterGone
        | StoreError::CannotWrite(_)
        | StoreError::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
        StoreError::BadUrl(_)
        | StoreError::Migration(_)
        | StoreError::Database(_)
        | StoreError::Invariant(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// Writes `e` and every error in its `source()` chain, one per line, as
/// zero-to-production does for `Debug`.
pub fn error_chain_fmt(e: &impl std::error::Error, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    writeln!(f, "{e}")?;
    let mut current = e.source();
    while let Some(cause) = current {
        writeln!(f, "Caused by:\n\t{cause}")?;
        current = cause.source();
    }
    Ok(())
}

/// Gives a route error enum the `Debug` that prints its whole `source()`
/// chain ([`error_chain_fmt`]) and the [`ResponseError`] that answers with
/// [`error_response`]; the status each variant answers with is given as
/// the arms of a match on the error:
///
/// ```text
/// route_error!(ZoneError {
///     ZoneError::Store(e) => store_status(e),
/// });
/// ```
macro_rules! route_error {
    ($name:ident { $($arms:tt)+ }) => {
        impl ::std::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                $crate::api::errors::error_chain_fmt(self, f)
            }
        }

        impl ::actix_web::ResponseError for $name {
            fn status_code(&self) -> ::actix_web::http::StatusCode {
                match self {
                    $($arms)+
                }
            }

            fn error_response(&self) -> ::actix_web::HttpResponse {
                $crate::api::errors::error_response(self)
            }
        }
    };
}

pub(crate) use route_error;

/// Declares the error enum of routes that parse their input and then ask
/// the store, the most common shape: input that does not parse
/// ([`InputError`](crate::api::input::InputError)) is 400, and the store's
/// errors answer as [`store_status`] says.
///
/// ```text
/// input_or_store_error! {
///     /// Why a model request failed.
///     pub enum ModelError;
/// }
/// ```
macro_rules! input_or_store_error {
    ($(#[$meta:meta])* $vis:vis enum $name:ident;) => {
        $(#[$meta])*
        #[derive(::thiserror::Error)]
        $vis enum $name {
            #[error(transparent)]
            Input(#[from] $crate::api::input::InputError),
            #[error(transparent)]
            Store(#[from] $crate::store::StoreError),
        }

        $crate::api::errors::route_error!($name {
            $name::Input(_) => ::actix_web::http::StatusCode::BAD_REQUEST,
            $name::Store(e) => $crate::api::errors::store_status(e),
        });
    };
}

pub(crate) use input_or_store_error;

/// A request refused before its handler ran.
#[derive(thiserror::Error)]
pub enum RequestError {
    /// The body is not the JSON the route takes: malformed, a wrong type,
    /// a missing or unknown field.
    #[error("invalid request body: {0}")]
    Body(String),
    #[error("request body too large: the limit is {limit} bytes")]
    TooLarge { limit: usize },
    #[error("invalid query string: {0}")]
    Query(String),
    #[error("invalid path: {0}")]
    Path(String),
    #[error("no route for {method} {path}")]
    NoRoute { method: String, path: String },
    #[error("{method} is not allowed on {path}")]
    MethodNotAllowed { method: String, path: String },
    /// Too many requests at once; see [`crate::api::Limits`].
    #[error("the controller is overloaded ({0}); retry later")]
    Overloaded(&'static str),
}

route_error!(RequestError {
    RequestError::Body(_) | RequestError::Query(_) | RequestError::Path(_) => {
        StatusCode::BAD_REQUEST
    }
    RequestError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
    RequestError::NoRoute { .. } => StatusCode::NOT_FOUND,
    RequestError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
    RequestError::Overloaded(_) => StatusCode::SERVICE_UNAVAILABLE,
});

/// `web::JsonConfig`'s error handler: every body error is the client's.
pub fn json_body_error(
    limit: usize,
) -> impl Fn(JsonPayloadError, &HttpRequest) -> actix_web::Error {
    move |error, _req| {
        let refused = match error {
            JsonPayloadError::Overflow { .. } | JsonPayloadError::OverflowKnownLength { .. } => {
                RequestError::TooLarge { limit }
            }
            JsonPayloadError::Deserialize(e) => RequestError::Body(e.to_string()),
            JsonPayloadError::Serialize(e) => RequestError::Body(e.to_string()),
            JsonPayloadError::ContentType => {
                RequestError::Body("expected Content-Type: application/json".into())
            }
            JsonPayloadError::Payload(e) => RequestError::Body(e.to_string()),
            other => RequestError::Body(other.to_string()),
        };
        refused.into()
    }
}

/// `web::QueryConfig`'s error handler.
pub fn query_error(error: QueryPayloadError, _req: &HttpRequest) -> actix_web::Error {
    let message = match error {
        QueryPayloadError::Deserialize(e) => e.to_string(),
        other => other.to_string(),
    };
    RequestError::Query(message).into()
}

/// Middleware: an admin write takes its options where its route reads
/// them, and nowhere else. POST and PUT routes read theirs from the JSON
/// body and take no query string; DELETE routes read theirs from the query
/// string and take no body. Options sent to the other place would be
/// ignored (`?dry_run=true` on a POST would carry the command out), so the
/// request is refused before anything is done.
pub async fn refuse_misplaced_options(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let method = req.method();
    if (method == Method::POST || method == Method::PUT) && !req.query_string().is_empty() {
        return Err(RequestError::Query(format!(
            "{method} {} takes no query parameters: its options (such as dry_run and if_revision) go in the JSON body",
            req.path()
        ))
        .into());
    }
    if method == Method::DELETE && carries_body(req.headers()) {
        return Err(RequestError::Body(format!(
            "DELETE {} takes no body: its options (such as dry_run, if_revision and force) go in the query string",
            req.path()
        ))
        .into());
    }
    next.call(req).await
}

/// Middleware: an admin write that takes no options at all refuses any
/// sent (a query string or a body), which it would ignore
/// (`POST /v1/zones/a/disable` with `{"dry_run": true}` would disable the
/// zone).
pub async fn refuse_any_options(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let method = req.method();
    if !req.query_string().is_empty() {
        return Err(RequestError::Query(format!(
            "{method} {} takes no options: send it without a query string",
            req.path()
        ))
        .into());
    }
    if carries_body(req.headers()) {
        return Err(RequestError::Body(format!(
            "{method} {} takes no options: send it without a body",
            req.path()
        ))
        .into());
    }
    next.call(req).await
}

/// Whether a request's headers announce a body: a length above zero, or
/// one sent in chunks.
fn carries_body(headers: &header::HeaderMap) -> bool {
    let length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    length.is_some_and(|n| n > 0) || headers.contains_key(header::TRANSFER_ENCODING)
}

/// `web::PathConfig`'s error handler.
pub fn path_error(error: PathError, _req: &HttpRequest) -> actix_web::Error {
    let message = match error {
        PathError::Deserialize(e) => e.to_string(),
        other => other.to_string(),
    };
    RequestError::Path(message).into()
}

/// The app's default service: a JSON 404.
pub async fn no_route(req: HttpRequest) -> Result<HttpResponse, RequestError> {
    Err(RequestError::NoRoute {
        method: req.method().to_string(),
        path: req.path().to_string(),
    })
}

/// Every resource's default service: a JSON 405 with an `Allow` header
/// naming the methods the path answers (as the OpenAPI document has them;
/// the few undocumented paths, the dashboard's files, answer GET only).
pub async fn method_not_allowed(req: HttpRequest) -> HttpResponse {
    let allow = req
        .app_data::<actix_web::web::Data<crate::api::Shared>>()
        .zip(req.match_pattern())
        .and_then(|(shared, pattern)| {
            shared
                .allowed_methods
                .get(&crate::api::openapi::documented_path(&pattern))
                .cloned()
        })
        .unwrap_or_else(|| "GET".to_string());
    let mut response = RequestError::MethodNotAllowed {
        method: req.method().to_string(),
        path: req.path().to_string(),
    }
    .error_response();
    if let Ok(value) = HeaderValue::from_str(&allow) {
        response.headers_mut().insert(header::ALLOW, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use actix_web::body::to_bytes;

    use super::*;

    #[test]
    fn store_errors_map_to_the_status_their_cause_deserves() {
        let cases = [
            (StoreError::NotFound("x".into()), 404),
            (StoreError::Invalid("x".into()), 400),
            (StoreError::Conflict("x".into()), 409),
            (StoreError::Unauthorized("x".into()), 401),
            (StoreError::Connect("x".into()), 503),
            (StoreError::Busy("database is locked".into()), 503),
            (StoreError::WriterGone, 503),
            (
                StoreError::CannotWrite("database or disk is full".into()),
                503,
            ),
            (StoreError::BadUrl("x".into()), 500),
            (StoreError::Migration("x".into()), 500),
            (
                StoreError::Database(Arc::new(diesel::result::Error::NotFound)),
                500,
            ),
            (StoreError::Invariant("x".into()), 500),
        ];
        for (error, status) in cases {
            assert_eq!(store_status(&error).as_u16(), status, "{error:?}");
        }
    }

    #[test]
    fn every_error_status_has_its_own_code() {
        assert_eq!(code_for(StatusCode::BAD_REQUEST), "bad-request");
        assert_eq!(code_for(StatusCode::UNAUTHORIZED), "unauthorized");
        assert_eq!(code_for(StatusCode::NOT_FOUND), "not-found");
        assert_eq!(
            code_for(StatusCode::METHOD_NOT_ALLOWED),
            "method-not-allowed"
        );
        assert_eq!(code_for(StatusCode::CONFLICT), "conflict");
        assert_eq!(code_for(StatusCode::PAYLOAD_TOO_LARGE), "payload-too-large");
        assert_eq!(code_for(StatusCode::SERVICE_UNAVAILABLE), "unavailable");
        assert_eq!(code_for(StatusCode::INTERNAL_SERVER_ERROR), "internal");
    }

    #[actix_web::test]
    async fn an_error_response_is_the_json_error_body() {
        let response = json_error(StatusCode::CONFLICT, "machine 3 is being removed");
        assert_eq!(response.status(), StatusCode::CONFLICT);
        let body = to_bytes(response.into_body()).await.unwrap();
        let parsed: ErrorBody = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            parsed,
            ErrorBody {
                error: ErrorDetail {
                    code: "conflict".into(),
                    message: "machine 3 is being removed".into(),
                }
            }
        );
    }

    #[test]
    fn an_unauthorized_response_asks_for_a_bearer_token() {
        let response = json_error(StatusCode::UNAUTHORIZED, "no");
        assert_eq!(
            response.headers().get(header::WWW_AUTHENTICATE).unwrap(),
            "Bearer"
        );
    }

    #[test]
    fn debug_prints_the_source_chain() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] std::io::Error);
        struct Shown(Outer);
        impl fmt::Debug for Shown {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                error_chain_fmt(&self.0, f)
            }
        }
        let e = Shown(Outer(std::io::Error::other("inner")));
        assert_eq!(format!("{e:?}"), "outer\nCaused by:\n\tinner\n");
    }
}

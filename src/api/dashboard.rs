//! The dashboard: one page at `/`, with its script and style beside it
//! under `/dashboard/`, built into the binary from the hand-written files
//! in `src/api/dashboard/`.
//!
//! The page holds no secret, so it is served without a token; it asks for
//! the admin token and sends it as `Authorization: Bearer` on its own
//! calls to the JSON API under `/v1`. Every response carries a strict
//! Content-Security-Policy: scripts, styles and connections from this
//! origin only, no inline script or style, no frames, no form posts, so
//! that nothing but the page's own code runs with the token.

use actix_web::http::header::{self, HeaderValue};
use actix_web::HttpResponse;

/// The page.
pub const INDEX_HTML: &str = include_str!("dashboard/index.html");
/// Its script: vanilla JavaScript, no framework, no build step.
pub const SCRIPT_JS: &str = include_str!("dashboard/dashboard.js");
/// Its style.
pub const STYLE_CSS: &str = include_str!("dashboard/dashboard.css");

/// Where the page loads its script and style from.
pub const SCRIPT_PATH: &str = "/dashboard/dashboard.js";
pub const STYLE_PATH: &str = "/dashboard/dashboard.css";

/// The policy every dashboard response carries: nothing is allowed unless
/// named; the page's own script, style and API calls come from this
/// origin; the icon is an empty `data:` URL.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// One of the dashboard's files, with `content_type` and the headers every
/// one of them carries. Browsers revalidate on each load (`no-cache`), so
/// a new berth's page is never mixed with an old script.
fn asset(content_type: &'static str, body: &'static str) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, HeaderValue::from_static(content_type)))
        .insert_header((
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::REFERRER_POLICY, "no-referrer"))
        .insert_header((header::X_FRAME_OPTIONS, "DENY"))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .body(body)
}

/// The dashboard: zones and their machines, applications, machines in
/// error with a retry button, following the event stream. The page holds
/// no secret and needs no token; it asks for the admin token and sends it
/// on its own calls to `/v1`. Its script and style are at
/// `/dashboard/dashboard.js` and `/dashboard/dashboard.css`.
#[utoipa::path(
    get,
    path = "/",
    operation_id = "dashboard",
    tag = "observe",
    security(()),
    responses(
        (status = 200, description = "The dashboard page", content_type = "text/html", body = String),
    )
)]
pub async fn index() -> HttpResponse {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

/// The dashboard's script.
pub async fn script() -> HttpResponse {
    asset("text/javascript; charset=utf-8", SCRIPT_JS)
}

/// The dashboard's style.
pub async fn style() -> HttpResponse {
    asset("text/css; charset=utf-8", STYLE_CSS)
}

#[cfg(test)]
mod tests {
    use actix_web::body::to_bytes;
    use actix_web::http::StatusCode;
    use actix_web::test::{call_service, init_service, read_body_json, TestRequest};
    use actix_web::{web, App};

    use super::*;
    use crate::api::errors;

    /// The dashboard's routes as the server mounts them, and its default
    /// service.
    fn app() -> App<
        impl actix_web::dev::ServiceFactory<
            actix_web::dev::ServiceRequest,
            Config = (),
            Response = actix_web::dev::ServiceResponse,
            Error = actix_web::Error,
            InitError = (),
        >,
    > {
        App::new()
            .configure(crate::api::dashboard_routes)
            .default_service(web::to(errors::no_route))
    }

    fn header_of<'a>(response: &'a actix_web::dev::ServiceResponse, name: &str) -> &'a str {
        response
            .headers()
            .get(name)
            .unwrap_or_else(|| panic!("no {name} header"))
            .to_str()
            .unwrap()
    }

    #[actix_web::test]
    async fn the_page_is_html_under_a_strict_policy_without_a_token() {
        let app = init_service(app()).await;
        let response = call_service(&app, TestRequest::get().uri("/").to_request()).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            header_of(&response, "content-type"),
            "text/html; charset=utf-8"
        );
        let policy = header_of(&response, "content-security-policy");
        assert!(policy.starts_with("default-src 'none';"), "{policy}");
        assert!(policy.contains("script-src 'self';"), "{policy}");
        assert!(!policy.contains("unsafe"), "{policy}");
        assert_eq!(header_of(&response, "x-content-type-options"), "nosniff");
        assert_eq!(header_of(&response, "referrer-policy"), "no-referrer");
        let body = to_bytes(response.into_body()).await.unwrap();
        assert_eq!(body, INDEX_HTML.as_bytes());
    }

    #[actix_web::test]
    async fn the_script_and_style_are_served_with_their_types() {
        let app = init_service(app()).await;
        for (path, content_type, body) in [
            (SCRIPT_PATH, "text/javascript; charset=utf-8", SCRIPT_JS),
            (STYLE_PATH, "text/css; charset=utf-8", STYLE_CSS),
        ] {
            let response = call_service(&app, TestRequest::get().uri(path).to_request()).await;
            assert_eq!(response.status(), StatusCode::OK, "{path}");
            assert_eq!(header_of(&response, "content-type"), content_type);
            assert_eq!(
                header_of(&response, "content-security-policy"),
                CONTENT_SECURITY_POLICY
            );
            let served = to_bytes(response.into_body()).await.unwrap();
            assert_eq!(served, body.as_bytes(), "{path}");
        }
    }

    #[test]
    fn the_page_loads_its_script_and_style_from_their_paths_and_nothing_inline() {
        assert!(INDEX_HTML.contains(&format!("<script src=\"{SCRIPT_PATH}\" defer></script>")));
        assert!(INDEX_HTML.contains(&format!("<link rel=\"stylesheet\" href=\"{STYLE_PATH}\">")));
        // The policy allows no inline script, style or event handler: the
        // page must not rely on any.
        assert_eq!(INDEX_HTML.matches("<script").count(), 1);
        assert!(!INDEX_HTML.contains("<style"));
        assert!(!INDEX_HTML.contains(" style="));
        assert!(!INDEX_HTML.contains(" onclick="));
    }

    #[actix_web::test]
    async fn other_paths_still_get_the_json_404_and_405() {
        let app = init_service(app()).await;
        for path in [
            "/index.html",
            "/dashboard/",
            "/dashboard/other.js",
            "/favicon.ico",
        ] {
            let response = call_service(&app, TestRequest::get().uri(path).to_request()).await;
            assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
            let body: errors::ErrorBody = read_body_json(response).await;
            assert_eq!(body.error.code, "not-found");
            assert_eq!(body.error.message, format!("no route for GET {path}"));
        }
        let response = call_service(&app, TestRequest::post().uri("/").to_request()).await;
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
        let body: errors::ErrorBody = read_body_json(response).await;
        assert_eq!(body.error.code, "method-not-allowed");
    }
}

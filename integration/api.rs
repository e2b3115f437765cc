//! The API over HTTP: every route, every class of error, auth, webhooks,
//! agents, the event stream and the OpenAPI document.
//!
//! Each test starts the API with the harness's [`spawn_app`]: a random
//! port, a fresh SQLite store, and a
//! [`RecordingLink`](crate::support::app::RecordingLink) in place of the
//! engine, so that what the API forwards can be read back.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use berth::api::webhooks::sign;
use berth::api::Limits;
use berth::contracts::provider::InstanceStateChange;
use berth::contracts::provider::ProviderZone;
use berth::domain::instance::InstanceState;
use berth::status::view::Status;
use reqwest::{Method, Response, StatusCode};
use serde_json::{json, Value};

use crate::support::app::{now_secs, spawn_app, spawn_app_with, Options, WEBHOOK_SECRET};
use crate::support::{charm_dir, ec2_event};

/// How long a test waits for an event before it fails (a bound, not a
/// timing assertion).
const EVENT_WAIT: Duration = Duration::from_secs(30);

async fn json_of(response: Response) -> Value {
    response.json().await.unwrap()
}

/// Asserts a JSON error response and returns its message.
async fn error_of(response: Response, status: StatusCode, code: &str) -> String {
    assert_eq!(response.status(), status);
    let body = json_of(response).await;
    assert_eq!(body["error"]["code"], code, "{body}");
    body["error"]["message"].as_str().unwrap().to_string()
}

// ---------------------------------------------------------------------------
// Auth

#[tokio::test]
async fn healthz_answers_without_a_token() {
    let app = spawn_app().await;
    let response = app.healthz().await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(json_of(response).await, json!({"status": "ok"}));
}

#[tokio::test]
async fn every_other_route_refuses_a_missing_or_wrong_token() {
    let app = spawn_app().await;
    let routes = [
        (Method::GET, "/metrics"),
        (Method::GET, "/v1/status"),
        (Method::GET, "/v1/openapi.json"),
        (Method::GET, "/v1/events"),
        (Method::POST, "/v1/applications"),
        (Method::DELETE, "/v1/applications/wordpress"),
        (Method::POST, "/v1/applications/wordpress/units"),
        (Method::GET, "/v1/applications/wordpress/constraints"),
        (Method::PUT, "/v1/applications/wordpress/constraints"),
        (Method::POST, "/v1/units/remove"),
        (Method::GET, "/v1/model/constraints"),
        (Method::PUT, "/v1/model/constraints"),
        (Method::POST, "/v1/machines"),
        (Method::DELETE, "/v1/machines/0/lxd/1"),
        (Method::POST, "/v1/machines/retry"),
        (Method::POST, "/v1/relations"),
        (Method::POST, "/v1/relations/remove"),
        (Method::GET, "/v1/zones"),
        (Method::POST, "/v1/zones/a/enable"),
        (Method::POST, "/v1/zones/a/disable"),
        (Method::GET, "/v1/sim/faults"),
        (Method::PUT, "/v1/sim/faults"),
        (Method::DELETE, "/v1/sim/faults"),
        (Method::GET, "/v1/no-such-route"),
    ];
    let before = app.store().revision();
    for (method, path) in routes {
        let missing = app
            .client
            .request(method.clone(), app.url(path))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(
            missing.status(),
            StatusCode::UNAUTHORIZED,
            "{method} {path}"
        );
        assert_eq!(missing.headers()["www-authenticate"], "Bearer");
        let message = error_of(missing, StatusCode::UNAUTHORIZED, "unauthorized").await;
        assert!(
            message.starts_with("missing Authorization header"),
            "{message}"
        );

        let wrong = app
            .client
            .request(method.clone(), app.url(path))
            .bearer_auth("not-the-token")
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        let message = error_of(wrong, StatusCode::UNAUTHORIZED, "unauthorized").await;
        assert_eq!(message, "invalid token", "{method} {path}");
    }
    assert_eq!(app.store().revision(), before);
}

#[tokio::test]
async fn a_token_in_another_scheme_is_refused() {
    let app = spawn_app().await;
    let response = app
        .client
        .get(app.url("/v1/status"))
        .header("Authorization", format!("Basic {}", app.token))
        .send()
        .await
        .unwrap();
    let message = error_of(response, StatusCode::UNAUTHORIZED, "unauthorized").await;
    assert!(
        message.starts_with("malformed Authorization header"),
        "{message}"
    );
}

// ---------------------------------------------------------------------------
// Deploy, units and applications

#[tokio::test]
async fn deploy_creates_the_application_its_units_and_their_machines() {
    let app = spawn_app().await;
    let response = app
        .deploy(&json!({
            "charm": "wordpress",
            "num_units": 2,
            "base": "ubuntu@22.04",
            "constraints": "mem=2G",
        }))
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    assert_eq!(
        json_of(response).await,
        json!({
            "application": "wordpress",
            "charm": "ch:wordpress-0",
            "base": "ubuntu@22.04",
            "units": [
                {"unit": "wordpress/0", "machine": "0"},
                {"unit": "wordpress/1", "machine": "1"},
            ],
            "machines": ["0", "1"],
            "warnings": [],
        })
    );
    let status = json_of(app.status().await).await;
    assert_eq!(status["machines"]["0"]["constraints"], "mem=2048M");
    assert_eq!(
        status["applications"]["wordpress"]["units"]["wordpress/1"]["machine"],
        "1"
    );
}

#[tokio::test]
async fn deploy_takes_a_name_placement_and_config() {
    let app = spawn_app().await;
    let charm = charm_dir(
        "name: blog\nseries: [jammy]\n",
        Some("options:\n  port:\n    type: int\n    default: 80\n"),
    );
    app.add_machines(&json!({"base": "ubuntu@22.04"})).await;
    let response = app
        .deploy(&json!({
            "charm": charm.path().to_str().unwrap(),
            "application": "my-blog",
            "num_units": 2,
            "to": ["0", "lxd:0"],
            "config": {"port": 8080},
        }))
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let body = json_of(response).await;
    assert_eq!(body["charm"], "local:blog-0");
    assert_eq!(body["base"], "ubuntu@22.04");
    assert_eq!(
        body["units"],
        json!([
            {"unit": "my-blog/0", "machine": "0"},
            {"unit": "my-blog/1", "machine": "0/lxd/0"},
        ])
    );
    assert_eq!(body["machines"], json!(["0", "0/lxd/0"]));
}

#[tokio::test]
async fn deploy_warns_of_constraints_the_provider_ignores() {
    let app = spawn_app().await;
    let body = json_of(
        app.deploy(&json!({"charm": "wordpress", "constraints": "mem=2G virt-type=kvm"}))
            .await,
    )
    .await;
    assert_eq!(
        body["warnings"],
        json!(["constraint \"virt-type\" is not supported by provider \"sim\" and is ignored"])
    );
    let set = json_of(
        app.set_application_constraints("wordpress", "spaces=db")
            .await,
    )
    .await;
    assert_eq!(
        set,
        json!({
            "constraints": "spaces=db",
            "warnings": ["constraint \"spaces\" is not supported by provider \"sim\" and is ignored"],
        })
    );
}

#[tokio::test]
async fn options_sent_where_a_route_does_not_read_them_are_refused_and_change_nothing() {
    let app = spawn_app().await;
    app.deploy(&json!({"charm": "wordpress"})).await;
    let before = app.store().revision();
    // POST and PUT read their options from the body: a query string would
    // be ignored, and the command carried out.
    for (method, path, body) in [
        (
            Method::POST,
            "/v1/applications/wordpress/units?dry_run=true",
            json!({}),
        ),
        (Method::POST, "/v1/machines?dry_run=true", json!({})),
        (
            Method::POST,
            "/v1/units/remove?dry_run=true",
            json!({"units": ["wordpress/0"]}),
        ),
        (
            Method::PUT,
            "/v1/model/constraints?dry_run=true",
            json!({"constraints": "mem=1G"}),
        ),
        (
            Method::POST,
            "/v1/machines/retry?anything",
            json!({"machines": ["0"]}),
        ),
    ] {
        let message = error_of(
            app.send(method.clone(), path, Some(&body)).await,
            StatusCode::BAD_REQUEST,
            "bad-request",
        )
        .await;
        let route = path.split('?').next().unwrap();
        assert_eq!(
            message,
            format!("invalid query string: {method} {route} takes no query parameters: its options (such as dry_run and if_revision) go in the JSON body")
        );
    }
    // DELETE reads them from the query string: a body would be ignored.
    let message = error_of(
        app.send(
            Method::DELETE,
            "/v1/machines/0",
            Some(&json!({"dry_run": true})),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "bad-request",
    )
    .await;
    assert_eq!(
        message,
        "invalid request body: DELETE /v1/machines/0 takes no body: its options (such as dry_run, if_revision and force) go in the query string"
    );
    // A route that takes no options refuses both places.
    for (method, path, body, refused) in [
        (
            Method::POST,
            "/v1/zones/sim-a/disable",
            Some(json!({"dry_run": true})),
            "invalid request body: this route takes no options, but the body names \"dry_run\": send no body, or {}",
        ),
        (
            Method::POST,
            "/v1/zones/sim-a/disable?dry_run=true",
            None,
            "invalid query string: POST /v1/zones/sim-a/disable takes no query parameters: its options (such as dry_run and if_revision) go in the JSON body",
        ),
        (
            Method::DELETE,
            "/v1/sim/faults?dry_run=true",
            None,
            "invalid query string: DELETE /v1/sim/faults takes no options: send it without a query string",
        ),
    ] {
        let message = error_of(
            app.send(method, path, body.as_ref()).await,
            StatusCode::BAD_REQUEST,
            "bad-request",
        )
        .await;
        assert_eq!(message, refused);
    }
    // A method the path does not take is still that, whatever it carries.
    let wrong_method = app
        .send(Method::DELETE, "/v1/machines", Some(&json!({"count": 1})))
        .await;
    error_of(
        wrong_method,
        StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
    )
    .await;
    assert_eq!(app.store().revision(), before);
    // Where they belong, they are carried out: a plan, and nothing changes.
    let planned = app
        .send(
            Method::DELETE,
            "/v1/applications/wordpress?dry_run=true",
            None,
        )
        .await;
    assert_eq!(planned.status(), StatusCode::OK);
    let planned = app
        .send(
            Method::POST,
            "/v1/applications/wordpress/units",
            Some(&json!({"dry_run": true})),
        )
        .await;
    assert_eq!(planned.status(), StatusCode::OK);
    assert_eq!(app.store().revision(), before);
}

#[tokio::test]
async fn a_unit_or_machine_listed_twice_is_refused_by_name_and_changes_nothing() {
    let app = spawn_app().await;
    app.deploy(&json!({"charm": "wordpress"})).await;
    let before = app.store().revision();
    let message = error_of(
        app.remove_units(&json!({"units": ["wordpress/0", "wordpress/0"]}))
            .await,
        StatusCode::BAD_REQUEST,
        "bad-request",
    )
    .await;
    assert_eq!(message, "wordpress/0 is listed twice in units");
    let message = error_of(
        app.retry(&json!({"machines": ["0", "0"]})).await,
        StatusCode::BAD_REQUEST,
        "bad-request",
    )
    .await;
    assert_eq!(message, "0 is listed twice in machines");
    assert_eq!(app.store().revision(), before);
    let document = json_of(app.openapi().await).await;
    let schemas = &document["components"]["schemas"];
    assert_eq!(
        schemas["RemoveUnitsRequest"]["properties"]["units"]["uniqueItems"],
        true
    );
    assert_eq!(
        schemas["RetryRequest"]["properties"]["machines"]["uniqueItems"],
        true
    );
}

#[tokio::test]
async fn a_bad_constraint_is_refused_with_the_domains_message_and_changes_nothing() {
    let app = spawn_app().await;
    let before = app.store().revision();
    let response = app
        .deploy(&json!({"charm": "wordpress", "constraints": "mem=lots"}))
        .await;
    let message = error_of(response, StatusCode::BAD_REQUEST, "bad-request").await;
    assert_eq!(
        message,
        "bad \"mem\" constraint: must be a non-negative float with optional M/G/T/P suffix"
    );
    let message = error_of(
        app.set_model_constraints("cores=many").await,
        StatusCode::BAD_REQUEST,
        "bad-request",
    )
    .await;
    assert_eq!(
        message,
        "bad \"cores\" constraint: must be a non-negative integer"
    );
    assert_eq!(app.store().revision(), before);
}

#[tokio::test]
async fn bad_bases_placements_names_and_counts_are_400() {
    let app = spawn_app().await;
    let before = app.store().revision();
    let cases = [
        json!({"charm": "wordpress", "base": "windows@11"}),
        json!({"charm": "wordpress", "to": "kvm:1"}),
        json!({"charm": "wordpress", "to": "4,5,,"}),
        json!({"charm": "wordpress", "application": "Bad_Name"}),
        json!({"charm": "Bad_Name"}),
        json!({"charm": "/no/such/charm/dir"}),
        json!({"charm": "wordpress", "num_units": 1001}),
        json!({"charm": "wordpress", "config": {"port": [80]}}),
    ];
    for case in cases {
        let response = app.deploy(&case).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{case}");
    }
    let message = error_of(
        app.deploy(&json!({"charm": "wordpress", "to": "4,5,,"}))
            .await,
        StatusCode::BAD_REQUEST,
        "bad-request",
    )
    .await;
    assert_eq!(message, "invalid --to parameter \"4,5,,\"");
    assert_eq!(app.store().revision(), before);
}

#[tokio::test]
async fn placements_the_provider_cannot_honour_are_refused_before_anything_is_written() {
    let app = spawn_app().await;
    app.deploy(&json!({"charm": "wordpress"})).await;
    let before = app.store().revision();
    let refused = [
        (
            app.add_machines(&json!({"placement": "no-such-host.example"}))
                .await,
            "cannot honour placement \"no-such-host.example\": provider \"sim\" cannot place on a named host (expected a machine id, lxd[:<machine>] or zone=<zone>)",
        ),
        (
            app.deploy(&json!({"charm": "mysql", "to": "foo=bar"})).await,
            "cannot honour placement \"foo=bar\": provider \"sim\" does not know the directive \"foo\" (the provider's only directive is zone=<zone>)",
        ),
        (
            app.add_units("wordpress", &json!({"num_units": 2, "to": ["zone=sim-a", "sim-b.node"]}))
                .await,
            "cannot honour placement \"sim-b.node\": provider \"sim\" cannot place on a named host (expected a machine id, lxd[:<machine>] or zone=<zone>)",
        ),
    ];
    for (response, expected) in refused {
        let message = error_of(response, StatusCode::BAD_REQUEST, "bad-request").await;
        assert_eq!(message, expected);
    }
    assert_eq!(app.store().revision(), before);
    assert_eq!(app.store().machines().unwrap().len(), 1);

    // What the provider can honour is still accepted.
    let accepted = app.add_machines(&json!({"placement": "zone=sim-b"})).await;
    assert_eq!(accepted.status(), StatusCode::CREATED);
}

#[tokio::test]
async fn malformed_json_wrong_types_and_unknown_fields_are_400_and_change_nothing() {
    let app = spawn_app().await;
    let before = app.store().revision();
    let bodies = [
        ("/v1/applications", "{\"charm\": "),
        ("/v1/applications", "not json"),
        ("/v1/applications", "{\"charm\": 7}"),
        (
            "/v1/applications",
            "{\"charm\": \"wordpress\", \"num_units\": -1}",
        ),
        (
            "/v1/applications",
            "{\"charm\": \"wordpress\", \"num_units\": \"two\"}",
        ),
        (
            "/v1/applications",
            "{\"charm\": \"wordpress\", \"colour\": \"red\"}",
        ),
        ("/v1/applications", "{}"),
        ("/v1/applications", ""),
        ("/v1/machines", "{\"count\": 1.5}"),
        ("/v1/machines/retry", "{\"machines\": \"0\"}"),
        ("/v1/relations", "{\"endpoints\": [\"a\"]}"),
        ("/v1/units/remove", "{\"units\": []}"),
    ];
    for (path, body) in bodies {
        let response = app.send_raw(Method::POST, path, body).await;
        let message = error_of(response, StatusCode::BAD_REQUEST, "bad-request").await;
        assert!(!message.is_empty(), "{path} {body}");
    }
    let unknown = app
        .send_raw(
            Method::POST,
            "/v1/applications",
            "{\"charm\": \"wordpress\", \"colour\": \"red\"}",
        )
        .await;
    let message = error_of(unknown, StatusCode::BAD_REQUEST, "bad-request").await;
    assert!(message.contains("unknown field `colour`"), "{message}");
    let query = app
        .send(Method::DELETE, "/v1/machines/0?force=maybe", None)
        .await;
    error_of(query, StatusCode::BAD_REQUEST, "bad-request").await;
    let query = app.send(Method::GET, "/v1/events?since=-1", None).await;
    error_of(query, StatusCode::BAD_REQUEST, "bad-request").await;
    assert_eq!(app.store().revision(), before);
}

#[tokio::test]
async fn a_revision_ahead_of_the_change_log_is_refused_rather_than_followed_in_silence() {
    let app = spawn_app().await;
    app.deploy(&json!({"charm": "wordpress"})).await;
    let head = app.store().revision();
    let expected = |asked: i64| {
        format!(
            "revision {asked} is ahead of the change log, which is at {head}: this controller's \
             store was restored or replaced since; read the status and follow from its revision"
        )
    };
    let ahead = app.events(Some(head + 1), None).await;
    let message = error_of(ahead, StatusCode::BAD_REQUEST, "bad-request").await;
    assert_eq!(message, expected(head + 1));
    // What a reconnecting browser sends wins over since, and is held to
    // the same.
    let resumed = app.events(Some(0), Some("100000")).await;
    let message = error_of(resumed, StatusCode::BAD_REQUEST, "bad-request").await;
    assert_eq!(message, expected(100_000));
    let huge = app
        .send(Method::GET, "/v1/events?since=18446744073709551615", None)
        .await;
    error_of(huge, StatusCode::BAD_REQUEST, "bad-request").await;
    // At the head, the stream opens and waits for what comes next.
    let at_head = app.events(Some(head), None).await;
    assert_eq!(at_head.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_percent_encoded_machine_id_is_taken_in_a_path_and_refused_in_a_body() {
    let app = spawn_app().await;
    let before = app.store().revision();
    // Percent-encoding is for a path's tail; in a body it is not an id.
    let message = error_of(
        app.retry(&json!({"machines": ["0%2Flxd%2F1"]})).await,
        StatusCode::BAD_REQUEST,
        "bad-request",
    )
    .await;
    assert!(message.contains("0%2Flxd%2F1"), "{message}");
    assert_eq!(app.store().revision(), before);
    // In a path it names the container (none here).
    let response = app
        .send(Method::DELETE, "/v1/machines/0%2Flxd%2F1", None)
        .await;
    error_of(response, StatusCode::NOT_FOUND, "not-found").await;
}

#[tokio::test]
async fn an_oversized_body_is_413_and_changes_nothing() {
    let app = spawn_app().await;
    let before = app.store().revision();
    let huge = format!("{{\"charm\": \"{}\"}}", "a".repeat(300 * 1024));
    let response = app
        .send_raw(Method::POST, "/v1/applications", huge.clone())
        .await;
    let message = error_of(response, StatusCode::PAYLOAD_TOO_LARGE, "payload-too-large").await;
    assert_eq!(message, "request body too large: the limit is 262144 bytes");
    // A route that takes no body answers the same.
    let response = app
        .send_raw(Method::POST, "/v1/zones/sim-a/disable", huge)
        .await;
    let message = error_of(response, StatusCode::PAYLOAD_TOO_LARGE, "payload-too-large").await;
    assert_eq!(message, "request body too large: the limit is 262144 bytes");
    assert_eq!(app.store().revision(), before);
}

#[tokio::test]
async fn unknown_applications_units_machines_and_routes_are_404() {
    let app = spawn_app().await;
    let before = app.store().revision();
    let message = error_of(
        app.add_units("ghost", &json!({})).await,
        StatusCode::NOT_FOUND,
        "not-found",
    )
    .await;
    assert_eq!(message, "application \"ghost\" not found");
    error_of(
        app.application_constraints("ghost").await,
        StatusCode::NOT_FOUND,
        "not-found",
    )
    .await;
    error_of(
        app.remove_application("ghost").await,
        StatusCode::NOT_FOUND,
        "not-found",
    )
    .await;
    error_of(
        app.remove_units(&json!({"units": ["ghost/0"]})).await,
        StatusCode::NOT_FOUND,
        "not-found",
    )
    .await;
    let message = error_of(
        app.remove_machine("7", false).await,
        StatusCode::NOT_FOUND,
        "not-found",
    )
    .await;
    assert_eq!(message, "machine 7 not found");
    error_of(
        app.integrate("ghost", "spectre").await,
        StatusCode::NOT_FOUND,
        "not-found",
    )
    .await;
    let message = error_of(
        app.send(Method::GET, "/v1/nothing/here", None).await,
        StatusCode::NOT_FOUND,
        "not-found",
    )
    .await;
    assert_eq!(message, "no route for GET /v1/nothing/here");
    let message = error_of(
        app.send(Method::PATCH, "/v1/status", None).await,
        StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
    )
    .await;
    assert_eq!(message, "PATCH is not allowed on /v1/status");
    assert_eq!(app.store().revision(), before);
}

#[tokio::test]
async fn a_405_names_the_methods_the_path_answers_in_allow() {
    let app = spawn_app().await;
    for (method, path, allow) in [
        (Method::PATCH, "/v1/status", "GET"),
        (Method::DELETE, "/v1/machines", "POST"),
        (Method::GET, "/v1/machines/0/lxd/1", "DELETE"),
        (Method::POST, "/v1/model/constraints", "GET, PUT"),
        (Method::GET, "/v1/agents/3/connect", "POST"),
        (Method::DELETE, "/healthz", "GET"),
        (Method::POST, "/", "GET"),
    ] {
        let response = app.send(method.clone(), path, None).await;
        assert_eq!(
            response.status(),
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {path}"
        );
        assert_eq!(
            response
                .headers()
                .get("allow")
                .and_then(|v| v.to_str().ok()),
            Some(allow),
            "{method} {path}"
        );
    }
}

#[tokio::test]
async fn a_body_that_is_not_a_json_object_is_refused_and_changes_nothing() {
    let app = spawn_app().await;
    let before = app.store().revision();
    for (path, body) in [
        ("/v1/machines", "[]"),
        ("/v1/machines", "[1, null]"),
        ("/v1/machines", "null"),
        ("/v1/applications", "[\"wordpress\"]"),
        ("/v1/machines/retry", "true"),
        ("/v1/relations", "\"a b\""),
    ] {
        let message = error_of(
            app.send_raw(Method::POST, path, body).await,
            StatusCode::BAD_REQUEST,
            "bad-request",
        )
        .await;
        assert!(
            message.contains("expected a JSON object as the request body"),
            "{path} {body}: {message}"
        );
    }
    assert_eq!(app.store().revision(), before);
    assert!(app.store().machines().unwrap().is_empty());
}

#[tokio::test]
async fn a_unit_placed_on_a_machine_of_another_base_is_a_conflict_and_changes_nothing() {
    let app = spawn_app().await;
    app.add_machines(&json!({"base": "ubuntu@20.04"})).await;
    let before = app.store().revision();
    let response = app
        .deploy(&json!({"charm": "wordpress", "base": "ubuntu@22.04", "to": "0"}))
        .await;
    let message = error_of(response, StatusCode::CONFLICT, "conflict").await;
    assert_eq!(
        message,
        "cannot place a unit of base ubuntu@22.04 on machine 0: the machine's base is ubuntu@20.04"
    );
    assert_eq!(app.store().revision(), before);
    let status = json_of(app.status().await).await;
    assert_eq!(status["applications"], json!({}));
}

#[tokio::test]
async fn deploying_an_existing_application_is_a_conflict() {
    let app = spawn_app().await;
    app.deploy(&json!({"charm": "wordpress"})).await;
    let before = app.store().revision();
    let message = error_of(
        app.deploy(&json!({"charm": "wordpress"})).await,
        StatusCode::CONFLICT,
        "conflict",
    )
    .await;
    assert_eq!(message, "application \"wordpress\" already exists");
    assert_eq!(app.store().revision(), before);
}

#[tokio::test]
async fn add_unit_remove_unit_and_remove_application() {
    let app = spawn_app().await;
    app.deploy(&json!({"charm": "wordpress"})).await;
    let response = app
        .add_units("wordpress", &json!({"num_units": 2, "to": "lxd:0"}))
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    assert_eq!(
        json_of(response).await,
        json!({
            "units": [
                {"unit": "wordpress/1", "machine": "0/lxd/0"},
                {"unit": "wordpress/2", "machine": "1"},
            ],
            "machines": ["0/lxd/0", "1"],
            "warnings": [],
        })
    );
    let removed = app
        .remove_units(&json!({"units": ["wordpress/0", "wordpress/2"]}))
        .await;
    assert_eq!(removed.status(), StatusCode::NO_CONTENT);
    let status = json_of(app.status().await).await;
    let units: Vec<&String> = status["applications"]["wordpress"]["units"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(units, ["wordpress/1"]);

    let gone = app.remove_application("wordpress").await;
    assert_eq!(gone.status(), StatusCode::NO_CONTENT);
    let status = json_of(app.status().await).await;
    assert_eq!(status["applications"], json!({}));
    // Machines stay.
    assert!(status["machines"].get("0").is_some());
}

#[tokio::test]
async fn constraints_set_later_apply_only_to_later_units() {
    let app = spawn_app().await;
    app.deploy(&json!({"charm": "wordpress", "constraints": "mem=2G"}))
        .await;
    let set = app.set_application_constraints("wordpress", "mem=3G").await;
    assert_eq!(set.status(), StatusCode::OK);
    assert_eq!(
        json_of(app.application_constraints("wordpress").await).await,
        json!({"constraints": "mem=3072M", "warnings": []})
    );
    app.add_units("wordpress", &json!({"num_units": 2})).await;
    let status = json_of(app.status().await).await;
    let mems: Vec<&str> = ["0", "1", "2"]
        .iter()
        .map(|m| status["machines"][m]["constraints"].as_str().unwrap())
        .collect();
    assert_eq!(mems, ["mem=2048M", "mem=3072M", "mem=3072M"]);
}

#[tokio::test]
async fn add_units_takes_constraints_for_the_new_units_and_refuses_bad_ones() {
    let app = spawn_app().await;
    app.deploy(&json!({"charm": "wordpress", "constraints": "mem=2G"}))
        .await;
    let added = json_of(
        app.add_units(
            "wordpress",
            &json!({"num_units": 1, "constraints": "mem=8G virt-type=kvm"}),
        )
        .await,
    )
    .await;
    assert_eq!(added["machines"], json!(["1"]));
    assert_eq!(
        added["warnings"],
        json!(["constraint \"virt-type\" is not supported by provider \"sim\" and is ignored"])
    );
    let status = json_of(app.status().await).await;
    assert_eq!(status["machines"]["0"]["constraints"], "mem=2048M");
    assert_eq!(
        status["machines"]["1"]["constraints"],
        "mem=8192M virt-type=kvm"
    );

    let before = app.store().revision();
    let message = error_of(
        app.add_units("wordpress", &json!({"constraints": "mem=lots"}))
            .await,
        StatusCode::BAD_REQUEST,
        "bad-request",
    )
    .await;
    assert_eq!(
        message,
        r#"bad "mem" constraint: must be a non-negative float with optional M/G/T/P suffix"#
    );
    assert_eq!(app.store().revision(), before);
}

#[tokio::test]
async fn an_application_deployed_to_scale_with_another_follows_its_units_in_status() {
    let app = spawn_app().await;
    app.deploy(&json!({"charm": "db", "num_units": 2})).await;
    let before = app.store().revision();
    for (refused, why) in [
        // The leader's units say how many: a count is refused, not ignored.
        (
            json!({"charm": "cache", "to": "scale-with=db", "num_units": 5}),
            "scale-with=db places a unit beside every unit of db: leave out num_units",
        ),
        // Without units, a directive would place nothing: refused too.
        (
            json!({"charm": "cache", "num_units": 0, "to": "lxd:99"}),
            "1 placement directives given for 0 units: give at most one per unit",
        ),
    ] {
        let message = error_of(
            app.deploy(&refused).await,
            StatusCode::BAD_REQUEST,
            "bad-request",
        )
        .await;
        assert_eq!(message, why);
    }
    assert_eq!(app.store().revision(), before);
    let deployed = json_of(
        app.deploy(&json!({"charm": "cache", "to": "scale-with=db"}))
            .await,
    )
    .await;
    assert_eq!(deployed["machines"], json!(["0/lxd/0", "1/lxd/0"]));
    app.add_units("db", &json!({})).await;
    let status = json_of(app.status().await).await;
    let cache = &status["applications"]["cache"];
    assert_eq!(cache["scale-with"], "db");
    let machines: Vec<&str> = cache["units"]
        .as_object()
        .unwrap()
        .values()
        .map(|u| u["machine"].as_str().unwrap())
        .collect();
    assert_eq!(machines, ["0/lxd/0", "1/lxd/0", "2/lxd/0"]);
    assert!(status["applications"]["db"].get("scale-with").is_none());
}

#[tokio::test]
async fn model_constraints_are_read_and_replaced() {
    let app = spawn_app().await;
    assert_eq!(
        json_of(app.model_constraints().await).await,
        json!({"constraints": "", "warnings": []})
    );
    let set = app.set_model_constraints("cores=2 virt-type=kvm").await;
    assert_eq!(set.status(), StatusCode::OK);
    assert_eq!(
        json_of(set).await,
        json!({
            "constraints": "cores=2 virt-type=kvm",
            "warnings": ["constraint \"virt-type\" is not supported by provider \"sim\" and is ignored"],
        })
    );
    let got = json_of(app.model_constraints().await).await;
    assert_eq!(got["constraints"], "cores=2 virt-type=kvm");
    let status = json_of(app.status().await).await;
    assert_eq!(status["model"]["constraints"], "cores=2 virt-type=kvm");
}

// ---------------------------------------------------------------------------
// Machines

#[tokio::test]
async fn add_machine_takes_a_count_base_constraints_and_placement() {
    let app = spawn_app().await;
    let response = app
        .add_machines(&json!({"count": 2, "base": "ubuntu@22.04", "constraints": "mem=4G"}))
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    assert_eq!(
        json_of(response).await,
        json!({"machines": ["0", "1"], "warnings": []})
    );
    let container = json_of(app.add_machines(&json!({"placement": "lxd:1"})).await).await;
    assert_eq!(container["machines"], json!(["1/lxd/0"]));
    let zoned = json_of(app.add_machines(&json!({"placement": "zone=sim-b"})).await).await;
    assert_eq!(zoned["machines"], json!(["2"]));
    let status = json_of(app.status().await).await;
    assert_eq!(status["machines"]["0"]["constraints"], "mem=4096M");
    assert_eq!(
        status["machines"]["0"]["base"],
        json!({"name": "ubuntu", "channel": "22.04"})
    );
    assert_eq!(
        status["machines"]["1"]["containers"]["1/lxd/0"]["juju-status"]["current"],
        "pending"
    );
    let message = error_of(
        app.add_machines(&json!({"count": 0})).await,
        StatusCode::BAD_REQUEST,
        "bad-request",
    )
    .await;
    assert_eq!(message, "count must be between 1 and 1000, got 0");
    error_of(
        app.add_machines(&json!({"placement": "lxd:9"})).await,
        StatusCode::NOT_FOUND,
        "not-found",
    )
    .await;
}

#[tokio::test]
async fn a_container_is_removed_by_its_id_with_slashes_or_percent_encoded() {
    let app = spawn_app().await;
    app.add_machines(&json!({})).await;
    app.add_machines(&json!({"placement": "lxd:0", "count": 2}))
        .await;
    let plain = app.remove_machine("0/lxd/0", false).await;
    assert_eq!(plain.status(), StatusCode::NO_CONTENT);
    let encoded = app.remove_machine("0%2Flxd%2F1", false).await;
    assert_eq!(encoded.status(), StatusCode::NO_CONTENT);
    let status = json_of(app.status().await).await;
    assert!(
        status["machines"]["0"].get("containers").is_none(),
        "{status}"
    );
    let message = error_of(
        app.remove_machine("0/kvm/1", false).await,
        StatusCode::BAD_REQUEST,
        "bad-request",
    )
    .await;
    assert!(
        message.contains("container type \"kvm\" is not supported"),
        "{message}"
    );
}

#[tokio::test]
async fn removing_a_machine_that_hosts_units_needs_force() {
    let app = spawn_app().await;
    app.deploy(&json!({"charm": "wordpress"})).await;
    let before = app.store().revision();
    let message = error_of(
        app.remove_machine("0", false).await,
        StatusCode::CONFLICT,
        "conflict",
    )
    .await;
    assert_eq!(
        message,
        "machine 0 is hosting units wordpress/0: remove them first, or use --force"
    );
    assert_eq!(app.store().revision(), before);
    let forced = app.remove_machine("0", true).await;
    assert_eq!(forced.status(), StatusCode::NO_CONTENT);
    let status = json_of(app.status().await).await;
    assert_eq!(status["machines"], json!({}));
}

#[tokio::test]
async fn retry_makes_machines_in_error_pending_and_refuses_others() {
    let app = spawn_app().await;
    app.add_machines(&json!({"count": 3})).await;
    app.fail_provisioning("0", "no capacity in sim-a").await;
    app.fail_provisioning("2", "no capacity in sim-a").await;

    let status = json_of(app.status().await).await;
    let machine_status = &status["machines"]["0"]["machine-status"];
    assert_eq!(
        (&machine_status["current"], &machine_status["message"]),
        (&json!("provisioning error"), &json!("no capacity in sim-a"))
    );

    let before = app.store().revision();
    let message = error_of(
        app.retry(&json!({"machines": ["0", "1"]})).await,
        StatusCode::CONFLICT,
        "conflict",
    )
    .await;
    assert_eq!(
        message,
        "machine 1 is not in provisioning error (it is pending): only machines in error can be retried"
    );
    assert_eq!(app.store().revision(), before);

    let retried = app
        .retry(&json!({"machines": ["0"], "constraints": "mem=8G"}))
        .await;
    assert_eq!(retried.status(), StatusCode::OK);
    assert_eq!(
        json_of(retried).await,
        json!({"machines": ["0"], "warnings": []})
    );
    let all = json_of(app.retry(&json!({"all": true})).await).await;
    assert_eq!(all, json!({"machines": ["2"], "warnings": []}));
    let status = json_of(app.status().await).await;
    assert_eq!(status["machines"]["0"]["juju-status"]["current"], "pending");
    assert_eq!(status["machines"]["0"]["constraints"], "mem=8192M");

    for bad in [json!({}), json!({"all": true, "machines": ["0"]})] {
        error_of(
            app.retry(&bad).await,
            StatusCode::BAD_REQUEST,
            "bad-request",
        )
        .await;
    }
}

// ---------------------------------------------------------------------------
// Relations

const MYSQL: &str = "name: mysql\nprovides:\n  db:\n    interface: mysql\nseries: [jammy]\n";
const WORDPRESS: &str =
    "name: wordpress\nrequires:\n  db:\n    interface: mysql\nseries: [jammy]\n";
const NTP: &str = "name: ntp\nsubordinate: true\nrequires:\n  juju-info:\n    interface: juju-info\n    scope: container\nseries: [jammy, noble]\n";

#[tokio::test]
async fn integrate_and_remove_a_relation() {
    let app = spawn_app().await;
    let (mysql, wordpress) = (charm_dir(MYSQL, None), charm_dir(WORDPRESS, None));
    app.deploy(&json!({"charm": mysql.path().to_str().unwrap()}))
        .await;
    app.deploy(&json!({"charm": wordpress.path().to_str().unwrap()}))
        .await;
    let response = app.integrate("wordpress", "mysql").await;
    assert_eq!(response.status(), StatusCode::CREATED);
    assert_eq!(
        json_of(response).await,
        json!({
            "key": "wordpress:db mysql:db",
            "requirer": "wordpress:db",
            "provider": "mysql:db",
            "interface": "mysql",
            "scope": "global",
        })
    );
    let status = json_of(app.status().await).await;
    assert_eq!(
        status["applications"]["wordpress"]["relations"]["db"],
        json!([{"related-application": "mysql", "interface": "mysql", "scope": "global"}])
    );
    error_of(
        app.integrate("wordpress", "mysql").await,
        StatusCode::CONFLICT,
        "conflict",
    )
    .await;
    let removed = app.remove_relation("wordpress:db", "mysql").await;
    assert_eq!(removed.status(), StatusCode::NO_CONTENT);
    error_of(
        app.remove_relation("wordpress", "mysql").await,
        StatusCode::NOT_FOUND,
        "not-found",
    )
    .await;
}

#[tokio::test]
async fn a_subordinate_joins_only_principals_of_its_base_and_shows_under_them() {
    let app = spawn_app().await;
    let (mysql, ntp) = (charm_dir(MYSQL, None), charm_dir(NTP, None));
    app.deploy(&json!({"charm": mysql.path().to_str().unwrap()}))
        .await;
    // Without a base, ntp takes berth's default (ubuntu@24.04).
    let deployed = json_of(
        app.deploy(&json!({"charm": ntp.path().to_str().unwrap()}))
            .await,
    )
    .await;
    assert_eq!(deployed["units"], json!([]));
    let before = app.store().revision();
    let message = error_of(
        app.integrate("ntp", "mysql").await,
        StatusCode::CONFLICT,
        "conflict",
    )
    .await;
    assert!(
        message.contains("needs applications of the same base"),
        "{message}"
    );
    assert_eq!(app.store().revision(), before);

    app.remove_application("ntp").await;
    app.deploy(&json!({"charm": ntp.path().to_str().unwrap(), "base": "ubuntu@22.04"}))
        .await;
    let related = app.integrate("ntp", "mysql").await;
    assert_eq!(related.status(), StatusCode::CREATED);
    let status = json_of(app.status().await).await;
    let principal = &status["applications"]["mysql"]["units"]["mysql/0"];
    assert!(principal["subordinates"].get("ntp/0").is_some(), "{status}");
    assert_eq!(
        status["applications"]["ntp"]["subordinate-to"],
        json!(["mysql"])
    );
}

// ---------------------------------------------------------------------------
// Zones

#[tokio::test]
async fn zones_are_listed_disabled_and_enabled() {
    let app = spawn_app().await;
    app.store()
        .set_provider_zones(vec![
            ProviderZone {
                name: "sim-a".into(),
                available: true,
                reason: String::new(),
            },
            ProviderZone {
                name: "sim-b".into(),
                available: false,
                reason: "impaired".into(),
            },
        ])
        .await
        .unwrap();
    assert_eq!(
        json_of(app.zones().await).await,
        json!([
            {"name": "sim-a", "available": true, "provider_available": true, "disabled": false},
            {"name": "sim-b", "available": false, "provider_available": false, "disabled": false, "reason": "impaired"},
        ])
    );
    let disabled = json_of(app.disable_zone("sim-a").await).await;
    assert_eq!(
        disabled,
        json!({"name": "sim-a", "available": false, "provider_available": true, "disabled": true, "reason": "disabled by an administrator"})
    );
    let enabled = json_of(app.enable_zone("sim-a").await).await;
    assert_eq!(enabled["available"], true);
    let before = app.store().revision();
    let message = error_of(
        app.enable_zone("sim-z").await,
        StatusCode::NOT_FOUND,
        "not-found",
    )
    .await;
    assert_eq!(message, "zone \"sim-z\" not found; zones: sim-a, sim-b");
    assert_eq!(app.store().revision(), before);
}

// ---------------------------------------------------------------------------
// Status

#[tokio::test]
async fn status_has_the_shape_of_juju_status_json() {
    let app = spawn_app().await;
    app.deploy(&json!({"charm": "wordpress", "base": "ubuntu@22.04"}))
        .await;
    app.launch("0").await;
    let response = app.status().await;
    assert_eq!(response.status(), StatusCode::OK);
    let status = json_of(response).await;
    let model = &status["model"];
    assert_eq!(model["name"], "default");
    assert_eq!(model["type"], "iaas");
    assert_eq!(model["cloud"], "sim");
    assert_eq!(model["revision"], app.store().revision());
    assert!(!model["uuid"].as_str().unwrap().is_empty());
    assert!(!model["controller"].as_str().unwrap().is_empty());
    // Since when, in RFC 3339: the machine entered its state at launch.
    let since = status["machines"]["0"]["juju-status"]["since"].clone();
    assert!(berth::api::webhooks::parse_rfc3339_ms(since.as_str().unwrap()).is_some());
    assert_eq!(
        status["machines"]["0"],
        json!({
            "juju-status": {"current": "pending", "since": since},
            "machine-status": {"current": "running", "since": since},
            "instance-id": "i-0",
            "instance-type": "m5.large",
            "base": {"name": "ubuntu", "channel": "22.04"},
            "hardware": "arch=amd64 cores=2 mem=8192M availability-zone=sim-a",
        })
    );
    let wordpress = &status["applications"]["wordpress"];
    assert_eq!(wordpress["charm"], "wordpress");
    assert_eq!(wordpress["charm-origin"], "charmhub");
    assert_eq!(
        wordpress["base"],
        json!({"name": "ubuntu", "channel": "22.04"})
    );
    assert_eq!(
        wordpress["units"]["wordpress/0"],
        json!({
            "machine": "0",
            "juju-status": {"current": "allocating", "since": since},
            "workload-status": {"current": "waiting", "message": "waiting for machine", "since": since},
        })
    );
    // The command line reads the same JSON back into the same types.
    let typed: Status = serde_json::from_value(status).unwrap();
    assert_eq!(typed.machines.len(), 1);
}

// ---------------------------------------------------------------------------
// Agents

#[tokio::test]
async fn an_agent_exchanges_its_one_time_password_once_and_then_heartbeats() {
    let app = spawn_app().await;
    app.add_machines(&json!({})).await;
    let otp = app.launch("0").await;
    let response = app.agent_connect("0", otp.expose()).await;
    assert_eq!(response.status(), StatusCode::OK);
    let body = json_of(response).await;
    assert_eq!(body["machine"], "0");
    let credential = body["credential"].as_str().unwrap().to_string();
    let status = json_of(app.status().await).await;
    assert_eq!(status["machines"]["0"]["juju-status"]["current"], "started");

    let before = app.store().revision();
    let reused = app.agent_connect("0", otp.expose()).await;
    let message = error_of(reused, StatusCode::UNAUTHORIZED, "unauthorized").await;
    assert_eq!(
        message,
        "machine 0: the one-time password is wrong or was already used"
    );
    assert_eq!(app.store().revision(), before);

    let beat = app.agent_heartbeat("0", &credential).await;
    assert_eq!(beat.status(), StatusCode::OK);
    assert_eq!(
        json_of(beat).await,
        json!({"machine": "0", "status": "started"})
    );
    let wrong = app.agent_heartbeat("0", "guess").await;
    error_of(wrong, StatusCode::UNAUTHORIZED, "unauthorized").await;
    // The admin token is not an agent credential.
    let admin = app.agent_heartbeat("0", &app.token).await;
    error_of(admin, StatusCode::UNAUTHORIZED, "unauthorized").await;
}

#[tokio::test]
async fn an_agent_that_chose_its_credential_gets_the_same_answer_again() {
    let app = spawn_app().await;
    app.add_machines(&json!({})).await;
    let otp = app.launch("0").await;
    let connect = |body: serde_json::Value| {
        app.client
            .post(app.url("/v1/agents/0/connect"))
            .json(&body)
            .send()
    };
    // A credential that is not 64 lowercase hexadecimal digits is refused,
    // and the password still works.
    let before = app.store().revision();
    for bad in [json!("short"), json!("A".repeat(64)), json!(7)] {
        let refused = connect(json!({"password": otp.expose(), "credential": bad}))
            .await
            .unwrap();
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST, "{bad}");
    }
    assert_eq!(app.store().revision(), before);
    let chosen = "0123456789abcdef".repeat(4);
    let body = json!({"password": otp.expose(), "credential": chosen});
    let first = connect(body.clone()).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(
        json_of(first).await,
        json!({"machine": "0", "credential": chosen})
    );
    let after = app.store().revision();
    let again = connect(body).await.unwrap();
    assert_eq!(again.status(), StatusCode::OK);
    assert_eq!(json_of(again).await["credential"], chosen);
    assert_eq!(app.store().revision(), after);
    let other = connect(json!({"password": otp.expose(), "credential": "f".repeat(64)}))
        .await
        .unwrap();
    error_of(other, StatusCode::UNAUTHORIZED, "unauthorized").await;
    let beat = app.agent_heartbeat("0", &chosen).await;
    assert_eq!(beat.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_container_agent_checks_in_by_its_id_with_slashes() {
    let app = spawn_app().await;
    app.add_machines(&json!({})).await;
    app.add_machines(&json!({"placement": "lxd:0"})).await;
    let otp = app.launch("0/lxd/0").await;
    let response = app.agent_connect("0/lxd/0", otp.expose()).await;
    assert_eq!(response.status(), StatusCode::OK);
    let credential = json_of(response).await["credential"]
        .as_str()
        .unwrap()
        .to_string();
    let beat = app.agent_heartbeat("0/lxd/0", &credential).await;
    assert_eq!(beat.status(), StatusCode::OK);
    let unknown = app.agent_connect("5", "x").await;
    error_of(unknown, StatusCode::NOT_FOUND, "not-found").await;
    let no_header = app
        .client
        .post(app.url("/v1/agents/0/heartbeat"))
        .send()
        .await
        .unwrap();
    error_of(no_header, StatusCode::UNAUTHORIZED, "unauthorized").await;
}

// ---------------------------------------------------------------------------
// Webhooks

#[tokio::test]
async fn an_eventbridge_state_change_is_forwarded_to_the_engine() {
    let app = spawn_app().await;
    let body = ec2_event("i-0abc", "terminated");
    let response = app.signed_webhook("ec2", &body).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    assert_eq!(
        json_of(response).await,
        json!({"instance_id": "i-0abc", "state": "terminated", "at_ms": 1_795_237_200_000_i64})
    );
    assert_eq!(
        app.link.changes(),
        [InstanceStateChange {
            instance_id: "i-0abc".into(),
            state: InstanceState::Terminated,
            at_ms: 1_795_237_200_000,
        }]
    );
}

#[tokio::test]
async fn a_sim_change_is_forwarded_and_out_of_order_deliveries_are_all_passed_on() {
    let app = spawn_app().await;
    let later = r#"{"instance_id":"sim-1","state":"terminated","at_ms":2000}"#;
    let earlier = r#"{"instance_id":"sim-1","state":"running","at_ms":1000}"#;
    for body in [later, earlier] {
        let response = app.signed_webhook("sim", body).await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
    }
    let changes = app.link.changes();
    assert_eq!(
        changes.iter().map(|c| c.at_ms).collect::<Vec<_>>(),
        [2000, 1000]
    );
}

#[tokio::test]
async fn forged_stale_future_unsigned_and_replayed_webhooks_are_refused() {
    let app = spawn_app().await;
    let body = ec2_event("i-0abc", "running");
    let now = now_secs();

    let forged = sign("not-the-secret", now, body.as_bytes());
    let response = app
        .webhook("ec2", &body, Some(&now.to_string()), Some(&forged))
        .await;
    let message = error_of(response, StatusCode::UNAUTHORIZED, "unauthorized").await;
    assert_eq!(message, "webhook signature does not match");

    let tampered = sign(WEBHOOK_SECRET, now, body.as_bytes());
    let other = ec2_event("i-0abc", "terminated");
    let response = app
        .webhook("ec2", &other, Some(&now.to_string()), Some(&tampered))
        .await;
    error_of(response, StatusCode::UNAUTHORIZED, "unauthorized").await;

    let stale = app.signed_webhook_at("ec2", &body, now - 301).await;
    let message = error_of(stale, StatusCode::UNAUTHORIZED, "unauthorized").await;
    assert!(
        message.starts_with("webhook delivery is stale"),
        "{message}"
    );

    let future = app.signed_webhook_at("ec2", &body, now + 120).await;
    let message = error_of(future, StatusCode::UNAUTHORIZED, "unauthorized").await;
    assert!(message.contains("in the future"), "{message}");

    let unsigned = app.webhook("ec2", &body, None, None).await;
    error_of(unsigned, StatusCode::UNAUTHORIZED, "unauthorized").await;

    assert!(app.link.changes().is_empty());

    let first = app.signed_webhook_at("ec2", &body, now).await;
    assert_eq!(first.status(), StatusCode::ACCEPTED);
    let replay = app.signed_webhook_at("ec2", &body, now).await;
    let message = error_of(replay, StatusCode::CONFLICT, "conflict").await;
    assert_eq!(
        message,
        "webhook delivery already received (its signature was seen before)"
    );
    assert_eq!(app.link.changes().len(), 1);
}

#[tokio::test]
async fn webhooks_for_unknown_providers_or_events_are_refused() {
    let app = spawn_app().await;
    let body = ec2_event("i-0abc", "running");
    let unknown = app.signed_webhook("gce", &body).await;
    let message = error_of(unknown, StatusCode::NOT_FOUND, "not-found").await;
    assert_eq!(
        message,
        "no webhook for provider \"gce\": expected ec2 or sim"
    );
    let not_ec2 = body.replace("EC2 Instance State-change Notification", "Scheduled Event");
    let response = app.signed_webhook("ec2", &not_ec2).await;
    error_of(response, StatusCode::BAD_REQUEST, "bad-request").await;
    let extra = r#"{"instance_id":"sim-1","state":"running","at_ms":1,"colour":"red"}"#;
    let response = app.signed_webhook("sim", extra).await;
    error_of(response, StatusCode::BAD_REQUEST, "bad-request").await;
    let huge = format!("{{\"pad\": \"{}\"}}", "a".repeat(300 * 1024));
    let response = app.signed_webhook("sim", &huge).await;
    error_of(response, StatusCode::PAYLOAD_TOO_LARGE, "payload-too-large").await;
    assert!(app.link.changes().is_empty());
}

#[tokio::test]
async fn without_a_webhook_secret_webhooks_are_503() {
    let app = spawn_app_with(Options {
        webhook_secret: None,
        ..Options::default()
    })
    .await;
    let response = app
        .signed_webhook("ec2", &ec2_event("i-0abc", "running"))
        .await;
    let message = error_of(response, StatusCode::SERVICE_UNAVAILABLE, "unavailable").await;
    assert_eq!(
        message,
        "webhooks are not set up on this controller: it has no webhook secret"
    );
}

// ---------------------------------------------------------------------------
// Limits

#[tokio::test]
async fn requests_beyond_the_concurrency_limit_are_503() {
    let app = spawn_app_with(Options {
        limits: Limits {
            max_concurrent_requests: 1,
            ..Limits::default()
        },
        gated_link: true,
        ..Options::default()
    })
    .await;
    let gate_app = Arc::new(app);
    let held = {
        let app = gate_app.clone();
        tokio::spawn(async move {
            app.signed_webhook(
                "sim",
                r#"{"instance_id":"sim-1","state":"running","at_ms":1}"#,
            )
            .await
            .status()
        })
    };
    let gate = gate_app.link.gate.as_ref().unwrap();
    gate.entered.notified().await;
    let refused = gate_app.status().await;
    let message = error_of(refused, StatusCode::SERVICE_UNAVAILABLE, "unavailable").await;
    assert_eq!(
        message,
        "the controller is overloaded (too many requests in flight); retry later"
    );
    // Health checks are never shed.
    assert_eq!(gate_app.healthz().await.status(), StatusCode::OK);
    gate.release.add_permits(1);
    assert_eq!(held.await.unwrap(), StatusCode::ACCEPTED);
    assert_eq!(gate_app.status().await.status(), StatusCode::OK);
    let metrics = gate_app.metrics().await.text().await.unwrap();
    assert!(
        metrics.contains("berth_api_overloaded_total 1"),
        "{metrics}"
    );
}

// ---------------------------------------------------------------------------
// Events

/// Reads server-sent events from a response: `(id, data)` pairs, skipping
/// comments.
struct EventReader {
    response: Response,
    buffer: String,
}

impl EventReader {
    fn new(response: Response) -> EventReader {
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        EventReader {
            response,
            buffer: String::new(),
        }
    }

    /// The next frame, comments included, as its raw text.
    async fn next_frame(&mut self) -> String {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let frame = self.buffer[..end].to_string();
                self.buffer.drain(..end + 2);
                return frame;
            }
            let chunk = tokio::time::timeout(EVENT_WAIT, self.response.chunk())
                .await
                .expect("an event within the wait")
                .unwrap()
                .expect("the stream to stay open");
            self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    /// The next event (not comment): its id and its data.
    async fn next_event(&mut self) -> (i64, Value) {
        loop {
            let frame = self.next_frame().await;
            if frame.starts_with(':') {
                continue;
            }
            let mut id = None;
            let mut data = None;
            for line in frame.lines() {
                if let Some(v) = line.strip_prefix("id: ") {
                    id = Some(v.parse::<i64>().unwrap());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data = Some(serde_json::from_str::<Value>(v).unwrap());
                }
            }
            return (id.unwrap(), data.unwrap());
        }
    }

    async fn revisions(&mut self, n: usize) -> Vec<i64> {
        let mut revisions = Vec::new();
        for _ in 0..n {
            let (id, data) = self.next_event().await;
            assert_eq!(data["revision"], id);
            revisions.push(id);
        }
        revisions
    }
}

#[tokio::test]
async fn the_event_stream_resumes_from_a_revision_without_loss() {
    let app = spawn_app().await;
    // More changes than one read of the log takes, to cross batches.
    app.add_machines(&json!({"count": 300})).await;
    let head = app.store().revision();
    let since = 7;
    let mut events = EventReader::new(app.events(Some(since), None).await);
    let expected: Vec<i64> = (since + 1..=head).collect();
    assert_eq!(events.revisions(expected.len()).await, expected);

    // Live changes follow, in order.
    app.add_machines(&json!({"count": 2})).await;
    let (id, data) = events.next_event().await;
    assert_eq!(id, head + 1);
    assert_eq!(data["entity"], "machine");
    assert_eq!(data["id"], "300");
    assert_eq!(data["change"], "created");
    assert_eq!(data["origin"], "user");
    assert_eq!(events.revisions(1).await, [head + 2]);
}

/// Reads `response` (an event stream, as a client that decodes nothing
/// itself gets it) into `out` through `decode` until what it holds ends
/// with the frame of `revision`; returns it cut there.
async fn read_stream_through(
    response: &mut Response,
    out: &mut dyn FnMut(&[u8]) -> Vec<u8>,
    revision: i64,
) -> Vec<u8> {
    let needle = format!("id: {revision}\n");
    loop {
        let chunk = tokio::time::timeout(EVENT_WAIT, response.chunk())
            .await
            .expect("a piece within the wait")
            .unwrap()
            .expect("the stream to stay open");
        let seen = out(&chunk);
        let text = String::from_utf8_lossy(&seen);
        if let Some(at) = text.find(&needle) {
            if let Some(end) = text[at..].find("\n\n") {
                return seen[..at + end + 2].to_vec();
            }
        }
    }
}

#[tokio::test]
async fn an_event_stream_is_gzipped_for_a_client_that_takes_gzip() {
    use std::io::Write;

    let app = spawn_app().await;
    // More changes than one read of the log takes.
    app.add_machines(&json!({"count": 300})).await;
    let head = app.store().revision();
    let client = reqwest::Client::builder().no_gzip().build().unwrap();
    let open = |accept: &'static str| {
        client
            .get(app.url("/v1/events?since=0"))
            .bearer_auth(&app.token)
            .header("Accept-Encoding", accept)
            .send()
    };

    let mut plain = open("identity").await.unwrap();
    assert_eq!(plain.status(), StatusCode::OK);
    assert!(plain.headers().get("content-encoding").is_none());
    assert_eq!(plain.headers()["vary"], "Accept-Encoding");
    let mut kept = Vec::new();
    let plain = read_stream_through(
        &mut plain,
        &mut |chunk| {
            kept.extend_from_slice(chunk);
            kept.clone()
        },
        head,
    )
    .await;
    assert!(plain.starts_with(b": berth change log after revision 0\n\nid: 1\n"));

    let mut gzipped = open("gzip, deflate, br").await.unwrap();
    assert_eq!(gzipped.status(), StatusCode::OK);
    assert_eq!(gzipped.headers()["content-encoding"], "gzip");
    assert_eq!(gzipped.headers()["content-type"], "text/event-stream");
    assert_eq!(gzipped.headers()["vary"], "Accept-Encoding");
    let sent = std::cell::Cell::new(0);
    let mut decoder = flate2::write::GzDecoder::new(Vec::new());
    let mut gunzip = |chunk: &[u8]| {
        sent.set(sent.get() + chunk.len());
        decoder.write_all(chunk).expect("a valid gzip stream");
        decoder.flush().unwrap();
        decoder.get_ref().clone()
    };
    let decoded = read_stream_through(&mut gzipped, &mut gunzip, head).await;
    // The same frames, in far fewer bytes.
    assert_eq!(decoded, plain);
    let sent = sent.get();
    assert!(sent < plain.len() / 4, "{sent} bytes for {}", plain.len());

    // What follows goes the same way.
    app.add_machines(&json!({"count": 1})).await;
    let decoded = read_stream_through(&mut gzipped, &mut gunzip, head + 1).await;
    assert!(
        String::from_utf8_lossy(&decoded).contains(&format!("id: {}\nevent: change\n", head + 1))
    );
}

#[tokio::test]
async fn a_stream_from_before_the_server_started_catches_up_from_the_store_then_follows() {
    let first = spawn_app().await;
    // More changes than one catch-up read takes, all before the second
    // server's change feed starts: they come from the store.
    first.add_machines(&json!({"count": 300})).await;
    let head = first.store().revision();
    let site = first.site.clone();
    drop(first);
    let app = spawn_app_with(Options {
        site: Some(site),
        ..Options::default()
    })
    .await;
    let since = 1;
    let mut events = EventReader::new(app.events(Some(since), None).await);
    let expected: Vec<i64> = (since + 1..=head).collect();
    assert_eq!(events.revisions(expected.len()).await, expected);
    app.add_machines(&json!({"count": 2})).await;
    assert_eq!(events.revisions(2).await, [head + 1, head + 2]);
}

#[tokio::test]
async fn the_event_stream_honours_last_event_id_over_since() {
    let app = spawn_app().await;
    app.add_machines(&json!({"count": 5})).await;
    let head = app.store().revision();
    let mut events = EventReader::new(app.events(Some(0), Some(&(head - 2).to_string())).await);
    assert_eq!(events.revisions(2).await, [head - 1, head]);
    let bad = app.events(None, Some("yesterday")).await;
    error_of(bad, StatusCode::BAD_REQUEST, "bad-request").await;
}

#[tokio::test]
async fn without_since_the_event_stream_starts_now_and_keeps_alive_when_idle() {
    let app = spawn_app_with(Options {
        limits: Limits {
            event_keep_alive: Duration::from_millis(50),
            ..Limits::default()
        },
        ..Options::default()
    })
    .await;
    app.add_machines(&json!({})).await;
    let head = app.store().revision();
    let mut events = EventReader::new(app.events(None, None).await);
    assert_eq!(
        events.next_frame().await,
        format!(": berth change log after revision {head}")
    );
    assert_eq!(events.next_frame().await, ": keep-alive");
    app.add_machines(&json!({})).await;
    assert_eq!(events.revisions(1).await, [head + 1]);
}

#[tokio::test]
async fn event_streams_beyond_the_limit_are_503() {
    let app = spawn_app_with(Options {
        limits: Limits {
            max_event_streams: 1,
            ..Limits::default()
        },
        ..Options::default()
    })
    .await;
    let first = EventReader::new(app.events(None, None).await);
    let second = app.events(None, None).await;
    let message = error_of(second, StatusCode::SERVICE_UNAVAILABLE, "unavailable").await;
    assert_eq!(
        message,
        "too many event streams are open (the limit is 1); retry later"
    );
    drop(first);
}

// ---------------------------------------------------------------------------
// Metrics and OpenAPI

#[tokio::test]
async fn metrics_are_prometheus_text_with_every_metric() {
    let app = spawn_app().await;
    app.add_machines(&json!({"count": 2})).await;
    app.fail_provisioning("1", "no capacity").await;
    app.metrics.provisioning_attempt();
    app.metrics.provisioning_error();
    app.metrics.observe_provider_call("launch", 0.4, true);
    app.metrics.set_queue_depth("provisioner", 3);
    let response = app.metrics().await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let text = response.text().await.unwrap();
    for line in [
        "berth_machines{state=\"pending\"} 1",
        "berth_machines{state=\"provisioning-error\"} 1",
        "berth_machines{state=\"started\"} 0",
        "berth_provisioning_attempts_total 1",
        "berth_provisioning_errors_total 1",
        "berth_provider_calls_total{kind=\"launch\",outcome=\"ok\"} 1",
        "berth_provider_call_duration_seconds_bucket{kind=\"launch\",le=\"0.5\"} 1",
        "berth_provider_call_duration_seconds_count{kind=\"launch\"} 1",
        "berth_queue_depth{queue=\"provisioner\"} 3",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "{line} missing from\n{text}"
        );
    }
}

#[tokio::test]
async fn the_openapi_document_lists_every_route() {
    let app = spawn_app().await;
    let response = app.openapi().await;
    assert_eq!(response.status(), StatusCode::OK);
    let doc = json_of(response).await;
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let expected: BTreeSet<(String, String)> = [
        ("get", "/"),
        ("get", "/healthz"),
        ("get", "/metrics"),
        ("get", "/v1/status"),
        ("get", "/v1/openapi.json"),
        ("get", "/v1/events"),
        ("post", "/v1/charms"),
        ("post", "/v1/applications"),
        ("delete", "/v1/applications/{app}"),
        ("post", "/v1/applications/{app}/units"),
        ("get", "/v1/applications/{app}/constraints"),
        ("put", "/v1/applications/{app}/constraints"),
        ("post", "/v1/units/remove"),
        ("get", "/v1/model/constraints"),
        ("put", "/v1/model/constraints"),
        ("post", "/v1/machines"),
        ("delete", "/v1/machines/{id}"),
        ("post", "/v1/machines/retry"),
        ("get", "/v1/machines/{id}/explanation"),
        ("get", "/v1/budgets"),
        ("put", "/v1/budgets"),
        ("post", "/v1/relations"),
        ("post", "/v1/relations/remove"),
        ("get", "/v1/zones"),
        ("post", "/v1/zones/{zone}/enable"),
        ("post", "/v1/zones/{zone}/disable"),
        ("get", "/v1/sim/faults"),
        ("put", "/v1/sim/faults"),
        ("delete", "/v1/sim/faults"),
        ("post", "/v1/agents/{machine}/connect"),
        ("post", "/v1/agents/{machine}/heartbeat"),
        ("post", "/v1/webhooks/{provider}"),
    ]
    .into_iter()
    .map(|(m, p)| (m.to_string(), p.to_string()))
    .collect();
    let listed: BTreeSet<(String, String)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .unwrap()
                .keys()
                .filter(|k| ["get", "put", "post", "delete", "patch"].contains(&k.as_str()))
                .map(move |m| (m.clone(), path.clone()))
        })
        .collect();
    assert_eq!(listed, expected);
    for (method, path) in &expected {
        let op = &doc["paths"][path][method];
        assert!(
            op["responses"].as_object().is_some_and(|r| !r.is_empty()),
            "{method} {path}"
        );
    }
    assert!(doc["components"]["schemas"].get("DeployRequest").is_some());
    assert!(doc["components"]["schemas"].get("Status").is_some());
}

#[tokio::test]
async fn status_filters_select_a_part_and_refuse_what_they_cannot_read() {
    let app = spawn_app().await;
    for (charm, units) in [("wordpress", 2), ("mysql", 1)] {
        let response = app
            .deploy(&json!({"charm": charm, "num_units": units}))
            .await;
        assert!(response.status().is_success());
    }
    let part = |query: &'static str| {
        let app = &app;
        async move {
            let response = app
                .send(Method::GET, &format!("/v1/status{query}"), None)
                .await;
            assert_eq!(response.status(), StatusCode::OK, "{query}");
            json_of(response).await
        }
    };
    let names =
        |value: &Value| -> Vec<String> { value.as_object().unwrap().keys().cloned().collect() };
    let mysql = part("?application=mysql").await;
    assert_eq!(names(&mysql["applications"]), ["mysql"]);
    assert_eq!(names(&mysql["machines"]), ["2"]);
    let both = part("?application=mysql,wordpress").await;
    assert_eq!(names(&both["applications"]), ["mysql", "wordpress"]);
    let unit = part("?unit=wordpress/1").await;
    assert_eq!(names(&unit["machines"]), ["1"]);
    let range = part("?machines=0,2-9").await;
    assert_eq!(names(&range["machines"]), ["0", "2"]);
    assert_eq!(names(&range["applications"]), ["mysql", "wordpress"]);
    let none = part("?machines=50-60").await;
    assert_eq!(
        (names(&none["machines"]), names(&none["applications"])),
        (Vec::<String>::new(), Vec::<String>::new())
    );

    let before = app.store().revision();
    for (query, status, code, message) in [
        (
            "?machines=1-",
            StatusCode::BAD_REQUEST,
            "bad-request",
            r#""1-" is not a machine range: expected machine numbers and ranges such as 1-100,205"#,
        ),
        (
            "?machines=9-1",
            StatusCode::BAD_REQUEST,
            "bad-request",
            r#"machine range "9-1" runs backwards: write the smaller number first"#,
        ),
        (
            "?application=Bad",
            StatusCode::BAD_REQUEST,
            "bad-request",
            r#""Bad" is not a valid application name"#,
        ),
        (
            "?unit=wordpress",
            StatusCode::BAD_REQUEST,
            "bad-request",
            r#""wordpress" is not a valid unit name"#,
        ),
        (
            "?application=nosuch",
            StatusCode::NOT_FOUND,
            "not-found",
            r#"no application named "nosuch" in the model"#,
        ),
        (
            "?unit=wordpress/7",
            StatusCode::NOT_FOUND,
            "not-found",
            r#"no unit named "wordpress/7" in the model"#,
        ),
    ] {
        let response = app
            .send(Method::GET, &format!("/v1/status{query}"), None)
            .await;
        assert_eq!(error_of(response, status, code).await, message, "{query}");
    }
    let unknown = app.send(Method::GET, "/v1/status?app=mysql", None).await;
    let message = error_of(unknown, StatusCode::BAD_REQUEST, "bad-request").await;
    assert!(message.contains("unknown field `app`"), "{message}");
    assert_eq!(app.store().revision(), before);
}

/// `GET /v1/status` as a client that decodes nothing itself sees it.
async fn raw_status(
    app: &crate::support::app::TestApp,
    query: &str,
    accept: Option<&str>,
) -> Response {
    let client = reqwest::Client::builder().no_gzip().build().unwrap();
    let mut request = client
        .get(app.url(&format!("/v1/status{query}")))
        .bearer_auth(&app.token);
    if let Some(accept) = accept {
        request = request.header("Accept-Encoding", accept);
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn the_whole_status_is_gzipped_for_a_client_that_takes_gzip() {
    use std::io::Read;

    let app = spawn_app().await;
    let added = app.add_machines(&json!({"count": 3})).await;
    assert_eq!(added.status(), StatusCode::CREATED);

    let plain = raw_status(&app, "", None).await;
    assert_eq!(plain.status(), StatusCode::OK);
    assert!(plain.headers().get("content-encoding").is_none());
    assert_eq!(plain.headers()["vary"], "Accept-Encoding");
    let plain = plain.bytes().await.unwrap();

    let gzipped = raw_status(&app, "", Some("br;q=0.9, gzip;q=0.8")).await;
    assert_eq!(gzipped.status(), StatusCode::OK);
    assert_eq!(gzipped.headers()["content-encoding"], "gzip");
    assert_eq!(gzipped.headers()["content-type"], "application/json");
    let member = gzipped.bytes().await.unwrap();
    let mut decoded = Vec::new();
    flate2::read::GzDecoder::new(&member[..])
        .read_to_end(&mut decoded)
        .unwrap();
    assert_eq!(decoded, plain, "the gzip holds the same status");
    let status: Value = serde_json::from_slice(&decoded).unwrap();
    assert_eq!(status["machines"].as_object().unwrap().len(), 3);

    // Refused or not offered: as it is.
    for accept in ["gzip;q=0", "identity", "br"] {
        let response = raw_status(&app, "", Some(accept)).await;
        assert!(
            response.headers().get("content-encoding").is_none(),
            "{accept}"
        );
        assert_eq!(response.bytes().await.unwrap(), plain, "{accept}");
    }
    // A filtered status is small and goes as it is.
    let part = raw_status(&app, "?machines=0", Some("gzip")).await;
    assert_eq!(part.status(), StatusCode::OK);
    assert!(part.headers().get("content-encoding").is_none());
    let part: Value = part.json().await.unwrap();
    assert_eq!(part["machines"].as_object().unwrap().len(), 1);

    // A client that decodes gzip by itself (as this harness's does) reads
    // the status it always did, and after a change the new one.
    assert_eq!(
        app.status_json().await["machines"]
            .as_object()
            .unwrap()
            .len(),
        3
    );
    let added = app.add_machines(&json!({"count": 1})).await;
    assert_eq!(added.status(), StatusCode::CREATED);
    assert_eq!(
        app.status_json().await["machines"]
            .as_object()
            .unwrap()
            .len(),
        4
    );
}

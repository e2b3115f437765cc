//! The OpenAPI 3 document, generated from the handlers' `#[utoipa::path]`
//! annotations and the request and response types' `ToSchema` derives, and
//! served at `/v1/openapi.json`.

use serde_json::{json, Value};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::api::webhooks::WebhookKind;
use crate::api::{
    agents, applications, charms, dashboard, errors, input, machines, model, observe, plans,
    relations, sim, webhooks, zones,
};
use crate::status::view;

/// The security schemes: the admin token (the default for every route),
/// the agent credential, and the webhook signature.
struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "admin_token",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("The controller's admin token"))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "agent_credential",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The credential a machine agent got from /v1/agents/{machine}/connect",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "webhook_signature",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                webhooks::SIGNATURE_HEADER,
                "sha256=<hex of HMAC-SHA256(webhook secret, \"<X-Berth-Timestamp>.<body>\")>",
            ))),
        );
    }
}

/// berth's API.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "berth",
        description = "berth's controller API: deploy applications, add units and machines, set constraints, and watch them being provisioned.",
    ),
    modifiers(&SecuritySchemes),
    security(("admin_token" = [])),
    paths(
        dashboard::index,
        observe::healthz,
        observe::get_metrics,
        observe::get_status,
        observe::get_openapi,
        observe::get_events,
        charms::add_charm,
        applications::deploy,
        applications::add_units,
        applications::remove_units,
        applications::remove_application,
        applications::get_constraints,
        applications::set_constraints,
        model::get_constraints,
        model::set_constraints,
        machines::add_machines,
        machines::remove_machine,
        machines::retry,
        plans::explain_machine,
        plans::get_budgets,
        plans::set_budget,
        relations::integrate,
        relations::remove_relation,
        zones::list,
        zones::enable,
        zones::disable,
        sim::get_faults,
        sim::set_faults,
        sim::clear_faults,
        agents::connect,
        agents::heartbeat,
        webhooks::receive,
    ),
    components(schemas(
        errors::ErrorBody,
        errors::ErrorDetail,
        input::PlacementList,
        view::Status,
        webhooks::InstanceChangeBody,
    )),
    tags(
        (name = "applications", description = "charm upload, deploy, add-unit, remove-unit, remove-application, constraints"),
        (name = "model", description = "Model constraints, budgets"),
        (name = "machines", description = "add-machine, remove-machine, retry-provisioning, explain"),
        (name = "relations", description = "integrate, remove-relation"),
        (name = "zones", description = "Availability zones"),
        (name = "sim", description = "The simulated cloud's faults"),
        (name = "observe", description = "Status, events, health, metrics, the dashboard"),
        (name = "agents", description = "Machine agent check-in"),
        (name = "webhooks", description = "Provider notifications"),
    )
)]
pub struct ApiDoc;

/// The methods each path of `document` answers, as an `Allow` header
/// value (`GET, PUT`), by the path as the document writes it.
pub fn allowed_methods(
    document: &utoipa::openapi::OpenApi,
) -> std::collections::HashMap<String, String> {
    document
        .paths
        .paths
        .iter()
        .map(|(path, item)| {
            let methods: Vec<&str> = [
                ("GET", item.get.is_some()),
                ("PUT", item.put.is_some()),
                ("POST", item.post.is_some()),
                ("DELETE", item.delete.is_some()),
                ("PATCH", item.patch.is_some()),
            ]
            .into_iter()
            .filter_map(|(method, has)| has.then_some(method))
            .collect();
            (path.clone(), methods.join(", "))
        })
        .collect()
}

/// A route pattern as actix writes it (`/v1/machines/{id:.+}`) in the
/// document's form (`/v1/machines/{id}`).
pub fn documented_path(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    // Inside `{...}`, and past its `:` (the regex, left out).
    let (mut in_name, mut in_regex) = (false, false);
    for c in pattern.chars() {
        match c {
            '{' if !in_name => {
                in_name = true;
                out.push(c);
            }
            '}' if in_name => {
                (in_name, in_regex) = (false, false);
                out.push(c);
            }
            ':' if in_name => in_regex = true,
            _ if in_regex => {}
            c => out.push(c),
        }
    }
    out
}

/// The document, with the crate's version.
pub fn document() -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    doc.info.version = env!("CARGO_PKG_VERSION").to_string();
    doc
}

/// The document as `/v1/openapi.json` serves it: [`document`] with the
/// validation the routes apply that the derives cannot state (the
/// patterns of names and ids, exact list sizes, the webhook providers)
/// and each event of `/v1/events` described as Server-Sent Events are:
/// an `id`, an `event` and a `data` that holds a [`observe::ChangeEvent`]
/// as JSON.
///
/// # Errors
///
/// When the document cannot be rendered as JSON.
pub fn served_json() -> serde_json::Result<String> {
    let mut json = serde_json::to_value(document())?;
    state_validation(&mut json);
    serde_json::to_string(&json)
}

/// Adds to `doc` what the routes check but the derives cannot say.
fn state_validation(doc: &mut Value) {
    use crate::domain::charm::ENDPOINT_SPEC_PATTERN;
    use crate::domain::names::{
        APPLICATION_LIST_PATTERN, APPLICATION_NAME_PATTERN, MACHINE_ID_PATTERN,
        MACHINE_RANGES_PATTERN, UNIT_LIST_PATTERN, UNIT_NAME_PATTERN,
    };

    for (path, parameter, pattern) in [
        ("/v1/applications/{app}", "app", APPLICATION_NAME_PATTERN),
        (
            "/v1/applications/{app}/constraints",
            "app",
            APPLICATION_NAME_PATTERN,
        ),
        (
            "/v1/applications/{app}/units",
            "app",
            APPLICATION_NAME_PATTERN,
        ),
        ("/v1/machines/{id}", "id", MACHINE_ID_PATTERN),
        ("/v1/machines/{id}/explanation", "id", MACHINE_ID_PATTERN),
        (
            "/v1/agents/{machine}/connect",
            "machine",
            MACHINE_ID_PATTERN,
        ),
        (
            "/v1/agents/{machine}/heartbeat",
            "machine",
            MACHINE_ID_PATTERN,
        ),
    ] {
        refine_path_parameter(doc, path, parameter, json!({ "pattern": pattern }));
    }
    for (parameter, pattern) in [
        ("application", APPLICATION_LIST_PATTERN),
        ("unit", UNIT_LIST_PATTERN),
        ("machines", MACHINE_RANGES_PATTERN),
    ] {
        refine_parameter(
            doc,
            ("/v1/status", "query", parameter),
            json!({ "pattern": pattern }),
        );
    }
    refine_path_parameter(
        doc,
        "/v1/webhooks/{provider}",
        "provider",
        json!({ "enum": WebhookKind::ALL.map(WebhookKind::as_str) }),
    );
    let schemas = &mut doc["components"]["schemas"];
    refine(
        &mut schemas["DeployRequest"]["properties"]["application"],
        json!({ "pattern": APPLICATION_NAME_PATTERN }),
    );
    refine(
        &mut schemas["BudgetRequest"]["properties"]["application"],
        json!({ "pattern": APPLICATION_NAME_PATTERN }),
    );
    refine(
        &mut schemas["RemoveUnitsRequest"]["properties"]["units"],
        json!({ "minItems": 1, "items": { "type": "string", "pattern": UNIT_NAME_PATTERN } }),
    );
    refine(
        &mut schemas["RetryRequest"]["properties"]["machines"],
        json!({ "items": { "type": "string", "pattern": MACHINE_ID_PATTERN } }),
    );
    refine(
        &mut schemas["RelationRequest"]["properties"]["endpoints"],
        json!({
            "minItems": 2,
            "maxItems": 2,
            "items": { "type": "string", "pattern": ENDPOINT_SPEC_PATTERN },
        }),
    );
    refine(
        &mut doc["paths"]["/v1/events"]["get"]["responses"]["200"]["content"]["text/event-stream"],
        json!({
            "schema": {
                "type": "object",
                "description": "One Server-Sent Event: `id` is the revision, `data` the change.",
                "required": ["id", "event", "data"],
                "properties": {
                    "id": { "type": "string", "pattern": "^[0-9]+$" },
                    "event": { "type": "string", "enum": ["change"] },
                    "data": {
                        "type": "string",
                        "contentMediaType": "application/json",
                        "contentSchema": { "$ref": "#/components/schemas/ChangeEvent" },
                    },
                },
            },
        }),
    );
}

/// Sets the keys of `with` on the schema of `path`'s path parameter
/// `parameter`, in every operation of the path.
fn refine_path_parameter(doc: &mut Value, path: &str, parameter: &str, with: Value) {
    refine_parameter(doc, (path, "path", parameter), with);
}

/// Sets the keys of `with` on the schema of the parameter `name` found
/// `in` (`path` or `query`) in every operation of `path`.
fn refine_parameter(doc: &mut Value, (path, within, name): (&str, &str, &str), with: Value) {
    let Some(item) = doc["paths"].get_mut(path).and_then(Value::as_object_mut) else {
        debug_assert!(false, "no path {path} in the document");
        return;
    };
    for operation in item.values_mut() {
        let Some(parameters) = operation
            .get_mut("parameters")
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for documented in parameters {
            if documented["name"] == name && documented["in"] == within {
                refine(&mut documented["schema"], with.clone());
            }
        }
    }
}

/// Sets the keys of `with` on the object `target` (an object's keys
/// replace those it has).
fn refine(target: &mut Value, with: Value) {
    debug_assert!(target.is_object(), "refining {target} with {with}");
    if let (Some(target), Value::Object(with)) = (target.as_object_mut(), with) {
        target.extend(with);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_renders_as_json_with_every_security_scheme() {
        let json = served();
        assert!(json["openapi"].as_str().unwrap().starts_with("3."));
        let schemes = &json["components"]["securitySchemes"];
        for name in ["admin_token", "agent_credential", "webhook_signature"] {
            assert!(schemes.get(name).is_some(), "{name}");
        }
    }

    fn served() -> serde_json::Value {
        serde_json::from_str(&served_json().unwrap()).unwrap()
    }

    fn operations() -> Vec<(String, String, serde_json::Value)> {
        let json = served();
        let mut ops = Vec::new();
        for (path, item) in json["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                ops.push((method.clone(), path.clone(), op.clone()));
            }
        }
        ops
    }

    #[test]
    fn operation_ids_are_unique_so_generated_clients_compile() {
        let ops = operations();
        let ids: std::collections::BTreeSet<&str> = ops
            .iter()
            .map(|(_, _, op)| op["operationId"].as_str().unwrap())
            .collect();
        assert_eq!(ids.len(), ops.len());
    }

    #[test]
    fn every_route_but_healthz_and_the_dashboard_documents_401_and_503() {
        for (method, path, op) in operations() {
            // Neither needs a token nor counts against the request limit.
            if path == "/healthz" || path == "/" {
                continue;
            }
            for status in ["401", "503"] {
                assert!(
                    op["responses"].get(status).is_some(),
                    "{method} {path} lacks {status}"
                );
            }
        }
    }

    #[test]
    fn every_route_with_a_body_documents_400_and_413() {
        for (method, path, op) in operations() {
            if op.get("requestBody").is_none() {
                continue;
            }
            for status in ["400", "413"] {
                assert!(
                    op["responses"].get(status).is_some(),
                    "{method} {path} lacks {status}"
                );
            }
        }
    }

    #[test]
    fn the_fault_set_states_its_bounds_and_uniqueness() {
        let json = served();
        let schemas = &json["components"]["schemas"];
        let faults = &schemas["FaultSet"]["properties"];
        for share in ["failure_rate", "silent_agents"] {
            assert_eq!(faults[share]["minimum"], 0.0, "{share}");
            assert_eq!(faults[share]["maximum"], 1.0, "{share}");
        }
        assert_eq!(faults["zones_down"]["uniqueItems"], true);
        assert_eq!(
            faults["zone_capacity"]["additionalProperties"]["minimum"],
            0
        );
        let throttle = &schemas["Throttle"];
        assert_eq!(throttle["properties"]["burst"]["minimum"], 1);
        assert_eq!(
            throttle["properties"]["per_second"]["exclusiveMinimum"],
            0.0
        );
        assert_eq!(
            throttle["required"],
            serde_json::json!(["burst", "per_second"])
        );
        let faults_path = &json["paths"]["/v1/sim/faults"];
        for method in ["get", "put", "delete"] {
            assert!(
                faults_path[method]["responses"].get("404").is_some(),
                "{method}"
            );
        }
    }

    #[test]
    fn healthz_the_dashboard_and_connect_need_no_token() {
        let json = served();
        for path in ["/healthz", "/"] {
            assert_eq!(
                json["paths"][path]["get"]["security"],
                serde_json::json!([{}]),
                "{path}"
            );
        }
        assert_eq!(
            json["paths"]["/"]["get"]["responses"]["200"]["content"]
                .as_object()
                .map(|c| c.keys().cloned().collect::<Vec<_>>()),
            Some(vec!["text/html".to_string()])
        );
        assert_eq!(
            json["paths"]["/v1/agents/{machine}/connect"]["post"]["security"],
            serde_json::json!([{}])
        );
    }

    #[test]
    fn counts_state_the_bounds_the_routes_apply() {
        let json = served();
        let schemas = &json["components"]["schemas"];
        for (schema, field, minimum) in [
            ("DeployRequest", "num_units", 0),
            ("AddUnitsRequest", "num_units", 1),
            ("AddMachinesRequest", "count", 1),
        ] {
            let documented = &schemas[schema]["properties"][field];
            assert_eq!(documented["minimum"], minimum, "{schema}.{field}");
            assert_eq!(
                documented["maximum"],
                crate::api::MAX_COUNT_PER_REQUEST,
                "{schema}.{field}"
            );
        }
        assert_eq!(
            schemas["Throttle"]["properties"]["burst"]["maximum"],
            crate::providers::sim::faults::MAX_COUNT
        );
    }

    #[test]
    fn names_and_ids_state_the_patterns_the_routes_apply() {
        use crate::domain::names::{
            APPLICATION_LIST_PATTERN, APPLICATION_NAME_PATTERN, MACHINE_ID_PATTERN,
            MACHINE_RANGES_PATTERN, UNIT_LIST_PATTERN,
        };
        let json = served();
        let parameter = |path: &str, method: &str| {
            json["paths"][path][method]["parameters"][0]["schema"].clone()
        };
        assert_eq!(
            parameter("/v1/applications/{app}", "delete")["pattern"],
            APPLICATION_NAME_PATTERN
        );
        assert_eq!(
            parameter("/v1/applications/{app}/constraints", "put")["pattern"],
            APPLICATION_NAME_PATTERN
        );
        assert_eq!(
            parameter("/v1/machines/{id}", "delete")["pattern"],
            MACHINE_ID_PATTERN
        );
        assert_eq!(
            parameter("/v1/agents/{machine}/heartbeat", "post")["pattern"],
            MACHINE_ID_PATTERN
        );
        assert_eq!(
            parameter("/v1/webhooks/{provider}", "post")["enum"],
            serde_json::json!(["ec2", "sim"])
        );
        let endpoints =
            &json["components"]["schemas"]["RelationRequest"]["properties"]["endpoints"];
        assert_eq!(
            (endpoints["minItems"].clone(), endpoints["maxItems"].clone()),
            (2.into(), 2.into())
        );
        assert!(endpoints["items"]["pattern"]
            .as_str()
            .unwrap()
            .starts_with('^'));
        let status_filters: Vec<(String, Value)> = json["paths"]["/v1/status"]["get"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().unwrap().to_string(),
                    p["schema"]["pattern"].clone(),
                )
            })
            .collect();
        assert_eq!(
            status_filters,
            vec![
                ("application".to_string(), APPLICATION_LIST_PATTERN.into()),
                ("unit".to_string(), UNIT_LIST_PATTERN.into()),
                ("machines".to_string(), MACHINE_RANGES_PATTERN.into()),
            ]
        );
    }

    #[test]
    fn each_event_is_documented_as_server_sent_events_carry_it() {
        let json = served();
        let event = &json["paths"]["/v1/events"]["get"]["responses"]["200"]["content"]
            ["text/event-stream"]["schema"];
        assert_eq!(
            event["required"],
            serde_json::json!(["id", "event", "data"])
        );
        assert_eq!(
            event["properties"]["data"]["contentMediaType"],
            "application/json"
        );
        assert_eq!(
            event["properties"]["data"]["contentSchema"]["$ref"],
            "#/components/schemas/ChangeEvent"
        );
        assert!(json["components"]["schemas"].get("ChangeEvent").is_some());
    }
}

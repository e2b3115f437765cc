//! The OpenAPI 3 document, generated from the handlers' `#[utoipa::path]`
//! annotations and the request and response types' `ToSchema` derives, and
//! served at `/v1/openapi.json`.

use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::api::{
    agents, applications, dashboard, errors, input, machines, model, observe, relations, sim,
    webhooks, zones,
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
        (name = "applications", description = "deploy, add-unit, remove-unit, remove-application, constraints"),
        (name = "model", description = "Model constraints"),
        (name = "machines", description = "add-machine, remove-machine, retry-provisioning"),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_renders_as_json_with_every_security_scheme() {
        let json: serde_json::Value = serde_json::from_str(&document().to_json().unwrap()).unwrap();
        assert!(json["openapi"].as_str().unwrap().starts_with("3."));
        let schemes = &json["components"]["securitySchemes"];
        for name in ["admin_token", "agent_credential", "webhook_signature"] {
            assert!(schemes.get(name).is_some(), "{name}");
        }
    }

    fn operations() -> Vec<(String, String, serde_json::Value)> {
        let json: serde_json::Value = serde_json::from_str(&document().to_json().unwrap()).unwrap();
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
        let json: serde_json::Value = serde_json::from_str(&document().to_json().unwrap()).unwrap();
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
        let json: serde_json::Value = serde_json::from_str(&document().to_json().unwrap()).unwrap();
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
}

//! Plans, explanations and cost: what a command would launch and what it
//! would cost, why a machine cannot be placed, what the model costs, and
//! budgets, through the HTTP API over the engine and the simulated cloud.

use std::collections::BTreeMap;

use berth::domain::instance_types::{Catalogue, HourlyPrice};
use berth::domain::machine::MachineState;
use berth::engine::config::ProvisionerConfig;
use berth::providers::sim::SimConfig;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::on_each_backend;
use crate::support::app::{spawn_app_with, Backend, Options, TestApp};
use crate::support::{fast_provisioner, until};

async fn json(response: reqwest::Response, status: StatusCode) -> Value {
    let got = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(got, status, "{body}");
    body
}

/// Sends a request with the admin token and reads its JSON answer, which
/// must come with `status`.
async fn call(
    app: &TestApp,
    method: Method,
    path: &str,
    body: Option<&Value>,
    status: StatusCode,
) -> Value {
    json(app.send(method, path, body).await, status).await
}

async fn revision(app: &TestApp) -> i64 {
    app.store().flush().await.unwrap();
    app.store().revision()
}

async fn zones_known(app: &TestApp) {
    until(app.store(), "zones recorded", |s| s.zones.len() == 3).await;
}

/// (instance type, zone) → how many machines, of a plan's added machines.
fn planned_shapes(plan: &Value) -> BTreeMap<(String, String), usize> {
    let mut shapes = BTreeMap::new();
    for machine in plan["machines"].as_array().unwrap() {
        assert_eq!(machine["action"], "add", "{machine}");
        let key = (
            machine["instance_type"].as_str().unwrap().to_string(),
            machine["zone"].as_str().unwrap().to_string(),
        );
        *shapes.entry(key).or_default() += 1;
    }
    shapes
}

async fn spawn(backend: Backend, config: ProvisionerConfig) -> TestApp {
    spawn_app_with(Options::engine(backend, SimConfig::default(), config)).await
}

fn price(value: &Value) -> HourlyPrice {
    value
        .as_str()
        .unwrap_or_else(|| panic!("a price as text, not {value}"))
        .parse()
        .unwrap()
}

fn catalogue_price(instance_type: &str) -> HourlyPrice {
    Catalogue::embedded()
        .unwrap()
        .get(instance_type)
        .unwrap()
        .price
}

async fn status_cost_is_each_machines_price_summed_per_application_and_model(backend: Backend) {
    let app = spawn(backend, fast_provisioner()).await;
    let deployed = app
        .deploy(&json!({"charm": "wordpress", "num_units": 2, "constraints": "mem=16G"}))
        .await;
    assert_eq!(deployed.status(), StatusCode::CREATED);
    let deployed = app
        .deploy(&json!({"charm": "mysql", "num_units": 1, "constraints": "cores=4"}))
        .await;
    assert_eq!(deployed.status(), StatusCode::CREATED);
    until(app.store(), "3 started", |s| {
        s.machines.len() == 3 && s.machines.iter().all(|m| m.hourly_price.is_some())
    })
    .await;
    let status = app.status_json().await;
    let mut total = HourlyPrice::default();
    for (_, machine) in status["machines"].as_object().unwrap() {
        let instance_type = machine["instance-type"].as_str().unwrap();
        assert_eq!(
            price(&machine["hourly-price"]),
            catalogue_price(instance_type)
        );
        total = total + price(&machine["hourly-price"]);
    }
    let wordpress = price(&status["applications"]["wordpress"]["hourly-cost"]);
    let mysql = price(&status["applications"]["mysql"]["hourly-cost"]);
    assert_eq!(wordpress + mysql, total);
    assert_eq!(price(&status["model"]["hourly-cost"]), total);
    let metrics = app.metrics().await.text().await.unwrap();
    assert!(
        metrics.contains(&format!("berth_model_hourly_cost_dollars {total}")),
        "{metrics}"
    );
}

async fn a_plan_is_what_the_deploy_then_does_from_1_to_1000_units(backend: Backend) {
    let app = spawn(backend, fast_provisioner()).await;
    zones_known(&app).await;
    let mut started = 0;
    for (i, (units, constraints)) in [(1, "mem=16G"), (7, "cores=2"), (1000, "")]
        .into_iter()
        .enumerate()
    {
        let name = format!("app{i}");
        let mut body = json!({
            "charm": "wordpress",
            "application": name,
            "num_units": units,
            "constraints": constraints,
            "dry_run": true,
        });
        let at = revision(&app).await;
        let plan = json(app.deploy(&body).await, StatusCode::OK).await;
        assert_eq!(revision(&app).await, at, "a dry run changes nothing");
        assert_eq!(plan["revision"], at);
        assert_eq!(plan["machines"].as_array().unwrap().len(), units);
        let before = price(&plan["hourly_cost_before"]);
        let after = price(&plan["hourly_cost_after"]);
        let added: HourlyPrice = plan["machines"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| price(&m["hourly_price"]))
            .sum();
        assert_eq!(before + added, after);

        body["dry_run"] = json!(false);
        body["if_revision"] = plan["revision"].clone();
        json(app.deploy(&body).await, StatusCode::CREATED).await;
        started += units;
        let status = until(app.store(), "every machine started", |s| {
            s.machines.len() == started
                && s.machines
                    .iter()
                    .all(|m| m.state() == MachineState::Started)
        })
        .await;
        let mut done: BTreeMap<(String, String), usize> = BTreeMap::new();
        let ids: Vec<String> = plan["machines"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["machine"].as_str().unwrap().to_string())
            .collect();
        for machine in status
            .machines
            .iter()
            .filter(|m| ids.contains(&m.id.to_string()))
        {
            let key = (
                machine.instance_type.clone().unwrap(),
                machine.machine.lifecycle.zone.clone().unwrap(),
            );
            *done.entry(key).or_default() += 1;
        }
        assert_eq!(
            done,
            planned_shapes(&plan),
            "{name}: the plan and the deploy differ"
        );
        // Status agrees with the plan's cost.
        let shown = app.status_json().await;
        assert_eq!(price(&shown["model"]["hourly-cost"]), after);
    }
}

async fn a_stale_plan_is_refused_and_changes_nothing(backend: Backend) {
    // Without an engine, so that only the test moves the revision.
    let app = spawn_app_with(Options {
        backend,
        ..Options::default()
    })
    .await;
    let body = json!({"charm": "wordpress", "num_units": 3, "dry_run": true});
    let plan = json(app.deploy(&body).await, StatusCode::OK).await;
    // The model moves on.
    json(app.add_machines(&json!({})).await, StatusCode::CREATED).await;
    let at = revision(&app).await;
    let stale = json!({"charm": "wordpress", "num_units": 3, "if_revision": plan["revision"]});
    let refused = json(app.deploy(&stale).await, StatusCode::CONFLICT).await;
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("the model has changed since the plan was made"),
        "{message}"
    );
    assert_eq!(revision(&app).await, at, "nothing was written");
    assert!(app.status_json().await["applications"]
        .as_object()
        .unwrap()
        .is_empty());
    // A revision that was never a plan's is refused too, and a negative
    // one is bad input.
    let future = json!({"charm": "wordpress", "if_revision": at + 100});
    json(app.deploy(&future).await, StatusCode::CONFLICT).await;
    let negative = json!({"charm": "wordpress", "if_revision": -1});
    json(app.deploy(&negative).await, StatusCode::BAD_REQUEST).await;
    // The DELETE routes take the same in their query.
    let stale_removal = app
        .send(
            Method::DELETE,
            &format!("/v1/machines/0?if_revision={}", plan["revision"]),
            None,
        )
        .await;
    assert_eq!(stale_removal.status(), StatusCode::CONFLICT);
}

async fn budgets_refuse_above_and_allow_at_the_boundary(backend: Backend) {
    let app = spawn(backend, fast_provisioner()).await;
    zones_known(&app).await;
    let body = json!({"charm": "wordpress", "num_units": 2, "constraints": "mem=16G"});
    let mut dry = body.clone();
    dry["dry_run"] = json!(true);
    let plan = json(app.deploy(&dry).await, StatusCode::OK).await;
    let cost = price(&plan["hourly_cost_after"]);
    let just_under = HourlyPrice::from_micro_usd(cost.micro_usd() - 1);

    let set = app
        .send(
            Method::PUT,
            "/v1/budgets",
            Some(&json!({"hourly": just_under.to_string()})),
        )
        .await;
    let budgets = json(set, StatusCode::OK).await;
    assert_eq!(price(&budgets["model"]), just_under);
    // The dry run says it would be refused; the command is.
    let plan = json(app.deploy(&dry).await, StatusCode::OK).await;
    assert_eq!(plan["budgets"][0]["application"], Value::Null);
    assert_eq!(plan["budgets"][0]["exceeded"], true);
    let at = revision(&app).await;
    let refused = json(app.deploy(&body).await, StatusCode::CONFLICT).await;
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!(
            "the model's hourly cost would go from $0 to ${cost}, over its budget of ${just_under}"
        )),
        "{message}"
    );
    assert_eq!(revision(&app).await, at, "nothing was written");

    // At the boundary it is allowed.
    call(
        &app,
        Method::PUT,
        "/v1/budgets",
        Some(&json!({"hourly": cost.to_string()})),
        StatusCode::OK,
    )
    .await;
    json(app.deploy(&body).await, StatusCode::CREATED).await;

    // An application's budget holds its own units: one more unit of
    // wordpress is over, while the model's budget is lifted.
    call(
        &app,
        Method::PUT,
        "/v1/budgets",
        Some(&json!({"hourly": null})),
        StatusCode::OK,
    )
    .await;
    let app_budget = json!({"application": "wordpress", "hourly": cost.to_string()});
    let budgets = call(
        &app,
        Method::PUT,
        "/v1/budgets",
        Some(&app_budget),
        StatusCode::OK,
    )
    .await;
    assert_eq!(budgets["model"], Value::Null);
    assert_eq!(price(&budgets["applications"]["wordpress"]), cost);
    let refused = json(
        app.add_units("wordpress", &json!({"num_units": 1})).await,
        StatusCode::CONFLICT,
    )
    .await;
    assert!(refused["error"]["message"]
        .as_str()
        .unwrap()
        .contains("application \"wordpress\"'s hourly cost would go from"));
    // Removing is never refused by a budget.
    let removal = app
        .send(
            Method::DELETE,
            "/v1/applications/wordpress?dry_run=true",
            None,
        )
        .await;
    let plan = json(removal, StatusCode::OK).await;
    assert_eq!(plan["budgets"][0]["application"], "wordpress");
    assert_eq!(plan["budgets"][0]["exceeded"], false);

    // Bad budgets are refused and change nothing.
    let before = json(
        app.send(Method::GET, "/v1/budgets", None).await,
        StatusCode::OK,
    )
    .await;
    for bad in [
        // A clearing says so: `"hourly": null`.
        json!({}),
        json!({"application": "wordpress"}),
        json!({"hourly": "-1"}),
        json!({"hourly": "1.1234567"}),
        json!({"hourly": "ten"}),
        json!({"application": "Not_A_Name", "hourly": "1"}),
        json!({"hourly": 5}),
        // The document's bound, whether or not the amount would fit.
        json!({"hourly": "10000000000000"}),
        json!({"hourly": "99999999999999999999999"}),
    ] {
        let response = app.send(Method::PUT, "/v1/budgets", Some(&bad)).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{bad}");
    }
    let after = json(
        app.send(Method::GET, "/v1/budgets", None).await,
        StatusCode::OK,
    )
    .await;
    assert_eq!(after, before);
    // The largest the document allows is taken.
    let largest = json!({"application": "wordpress", "hourly": "9999999999999.999999"});
    call(
        &app,
        Method::PUT,
        "/v1/budgets",
        Some(&largest),
        StatusCode::OK,
    )
    .await;
    let back = json!({"application": "wordpress", "hourly": cost.to_string()});
    call(
        &app,
        Method::PUT,
        "/v1/budgets",
        Some(&back),
        StatusCode::OK,
    )
    .await;
    let unknown = json!({"application": "nope", "hourly": "1"});
    let response = app.send(Method::PUT, "/v1/budgets", Some(&unknown)).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let budgets = call(&app, Method::GET, "/v1/budgets", None, StatusCode::OK).await;
    assert_eq!(
        budgets,
        json!({"applications": {"wordpress": cost.to_string()}})
    );
}

async fn every_command_that_starts_or_removes_machines_has_a_dry_run(backend: Backend) {
    let app = spawn(backend, fast_provisioner()).await;
    zones_known(&app).await;
    json(
        app.deploy(&json!({"charm": "wordpress", "num_units": 2}))
            .await,
        StatusCode::CREATED,
    )
    .await;
    json(
        app.add_machines(&json!({"constraints": "mem=100000G"}))
            .await,
        StatusCode::CREATED,
    )
    .await;
    until(app.store(), "two started, one in error", |s| {
        s.machines.len() == 3
            && s.machines.iter().all(|m| {
                matches!(
                    m.state(),
                    MachineState::Started | MachineState::ProvisioningError
                )
            })
    })
    .await;
    let at = revision(&app).await;
    let dry = |mut body: Value| {
        body["dry_run"] = json!(true);
        body
    };
    // add-unit: one more machine.
    let plan = json(
        app.add_units("wordpress", &dry(json!({"num_units": 2})))
            .await,
        StatusCode::OK,
    )
    .await;
    assert_eq!(plan["machines"].as_array().unwrap().len(), 2);
    // add-machine with a container on a new host: a host with a price and
    // a container without.
    let plan = json(
        app.add_machines(&dry(json!({"placement": "lxd"}))).await,
        StatusCode::OK,
    )
    .await;
    let machines = plan["machines"].as_array().unwrap();
    assert_eq!(machines.len(), 2, "{plan}");
    assert!(machines[0]["hourly_price"].is_string());
    assert!(machines[1]["hourly_price"].is_null());
    // retry-provisioning with new constraints: the machine in error is
    // planned with them.
    let plan = json(
        app.retry(&dry(json!({"machines": ["2"], "constraints": "mem=4G"})))
            .await,
        StatusCode::OK,
    )
    .await;
    assert_eq!(plan["machines"][0]["action"], "retry");
    assert!(plan["machines"][0]["instance_type"].is_string(), "{plan}");
    // remove-machine (forced, with its unit): its price comes off.
    let removal = app
        .send(
            Method::DELETE,
            "/v1/machines/0?force=true&dry_run=true",
            None,
        )
        .await;
    let plan = json(removal, StatusCode::OK).await;
    assert_eq!(plan["machines"][0]["action"], "remove");
    let off = price(&plan["machines"][0]["hourly_price"]);
    assert_eq!(
        price(&plan["hourly_cost_before"]),
        price(&plan["hourly_cost_after"]) + off
    );
    // remove-unit and set-constraints start and stop nothing.
    for plan in [
        json(
            app.remove_units(&dry(json!({"units": ["wordpress/0"]})))
                .await,
            StatusCode::OK,
        )
        .await,
        call(
            &app,
            Method::PUT,
            "/v1/applications/wordpress/constraints",
            Some(&dry(json!({"constraints": "mem=8G"}))),
            StatusCode::OK,
        )
        .await,
        call(
            &app,
            Method::PUT,
            "/v1/model/constraints",
            Some(&dry(json!({"constraints": "cores=4"}))),
            StatusCode::OK,
        )
        .await,
    ] {
        assert_eq!(plan["machines"], json!([]), "{plan}");
        assert_eq!(plan["hourly_cost_before"], plan["hourly_cost_after"]);
    }
    // remove-application leaves its machines.
    let plan = call(
        &app,
        Method::DELETE,
        "/v1/applications/wordpress?dry_run=true",
        None,
        StatusCode::OK,
    )
    .await;
    assert_eq!(plan["machines"], json!([]));
    assert_eq!(revision(&app).await, at, "no dry run changed anything");
    // A dry run of a command that would fail fails the same way.
    let conflict = app.retry(&dry(json!({"machines": ["0"]}))).await;
    assert_eq!(conflict.status(), StatusCode::CONFLICT);
    let bad = app
        .send(Method::DELETE, "/v1/machines/0?dry_run=maybe", None)
        .await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    // A container removed has no instance type of its own (its host
    // pays), as the plan's document says.
    json(
        app.add_machines(&json!({"placement": "lxd:1"})).await,
        StatusCode::CREATED,
    )
    .await;
    until(app.store(), "the container started", |s| {
        s.machines
            .iter()
            .any(|m| m.id.to_string() == "1/lxd/0" && m.state() == MachineState::Started)
    })
    .await;
    let plan = call(
        &app,
        Method::DELETE,
        "/v1/machines/1/lxd/0?dry_run=true",
        None,
        StatusCode::OK,
    )
    .await;
    assert_eq!(plan["machines"][0]["machine"], "1/lxd/0", "{plan}");
    assert!(plan["machines"][0].get("instance_type").is_none(), "{plan}");
}

async fn explanations_name_what_rules_a_machine_out(backend: Backend) {
    let app = spawn(backend, fast_provisioner()).await;
    zones_known(&app).await;
    let added = json(
        app.add_machines(&json!({"constraints": "arch=arm64 mem=100000G"}))
            .await,
        StatusCode::CREATED,
    )
    .await;
    let big = added["machines"][0].as_str().unwrap().to_string();
    let added = json(
        app.add_machines(&json!({"placement": "zone=no-such-zone"}))
            .await,
        StatusCode::CREATED,
    )
    .await;
    let typo = added["machines"][0].as_str().unwrap().to_string();
    let status = until(app.store(), "both in error", |s| {
        s.machines.len() == 2
            && s.machines
                .iter()
                .all(|m| m.state() == MachineState::ProvisioningError)
    })
    .await;
    for machine in &status.machines {
        // Said at the first try.
        assert_eq!(machine.machine.lifecycle.attempts_used, 0);
    }

    let explained = call(
        &app,
        Method::GET,
        &format!("/v1/machines/{big}/explanation"),
        None,
        StatusCode::OK,
    )
    .await;
    let summary = explained["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("no instance type fits: mem=100000G ruled out the last"),
        "{summary}"
    );
    assert!(summary.contains("mem="), "the nearest fit: {summary}");
    let steps = explained["explanation"]["steps"].as_array().unwrap();
    assert_eq!(steps[0]["constraint"], "arch=arm64");
    assert_eq!(steps[1]["constraint"], "mem=100000G");
    assert_eq!(steps[1]["left"], 0);
    // The machine in error carries the summary in its status message.
    let shown = app.status_json().await;
    let message = shown["machines"][&big]["machine-status"]["message"]
        .as_str()
        .unwrap();
    assert!(message.contains(summary), "{message}");

    let explained = call(
        &app,
        Method::GET,
        &format!("/v1/machines/{typo}/explanation"),
        None,
        StatusCode::OK,
    )
    .await;
    assert_eq!(
        explained["summary"],
        "zone=no-such-zone names no known zone (known: sim-a, sim-b, sim-c)"
    );
    assert!(explained["message"]
        .as_str()
        .unwrap()
        .contains("zone \"no-such-zone\" not found"));

    // Bad and unknown ids.
    let bad = app
        .send(Method::GET, "/v1/machines/x/explanation", None)
        .await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    let unknown = app
        .send(Method::GET, "/v1/machines/99/explanation", None)
        .await;
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
}

async fn an_explanation_keeps_each_zones_refusal_while_the_machine_waits(backend: Backend) {
    // A retry a minute away, so that the machine is still waiting when it
    // is explained.
    let app = spawn(
        backend,
        ProvisionerConfig {
            backoff_initial_ms: 60_000,
            backoff_max_ms: 60_000,
            ..fast_provisioner()
        },
    )
    .await;
    zones_known(&app).await;
    let faults = json!({
        "zones_down": [],
        "zone_capacity": {"sim-a": 0, "sim-b": 0, "sim-c": 0},
        "failure_rate": 0.0,
        "hang": false,
        "silent_agents": 0.0,
    });
    call(
        &app,
        Method::PUT,
        "/v1/sim/faults",
        Some(&faults),
        StatusCode::OK,
    )
    .await;
    json(app.add_machines(&json!({})).await, StatusCode::CREATED).await;
    until(
        app.store(),
        "waiting to retry after every zone refused",
        |s| {
            s.machines.first().is_some_and(|m| {
                m.state() == MachineState::Retrying && m.machine.lifecycle.zones_failed.len() == 3
            })
        },
    )
    .await;
    let explained = call(
        &app,
        Method::GET,
        "/v1/machines/0/explanation",
        None,
        StatusCode::OK,
    )
    .await;
    let zones = explained["explanation"]["zones"].as_array().unwrap();
    assert_eq!(zones.len(), 3, "{explained}");
    for zone in zones {
        let why = zone["why"].as_str().unwrap_or_default();
        assert!(
            why.starts_with("refused this machine: InsufficientInstanceCapacity"),
            "{zone}"
        );
    }
    let summary = explained["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("no zone can take it (sim-a: refused this machine"),
        "{summary}"
    );
    // The status message keeps every zone's reason too.
    let message = explained["message"].as_str().unwrap();
    assert!(
        message.contains("refused this round: sim-a: InsufficientInstanceCapacity"),
        "{message}"
    );
}

on_each_backend! {
    actix: [
        an_explanation_keeps_each_zones_refusal_while_the_machine_waits,
        status_cost_is_each_machines_price_summed_per_application_and_model,
        a_plan_is_what_the_deploy_then_does_from_1_to_1000_units,
        a_stale_plan_is_refused_and_changes_nothing,
        budgets_refuse_above_and_allow_at_the_boundary,
        every_command_that_starts_or_removes_machines_has_a_dry_run,
        explanations_name_what_rules_a_machine_out,
    ],
    plain: [],
}

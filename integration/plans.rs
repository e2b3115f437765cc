//! Plans, explanations and cost: what a command would launch and what it
//! would cost, why a machine cannot be placed, what the model costs, and
//! budgets, through the HTTP API over the engine and the simulated cloud.

use actix_web::http::Method;
use berth::domain::instance_types::{Catalogue, HourlyPrice};
use berth::engine::config::ProvisionerConfig;
use berth::providers::sim::SimConfig;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::on_each_backend;
use crate::support::app::{spawn_app_with, Backend, Options, TestApp};
use crate::support::{fast_provisioner, until};

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

on_each_backend! {
    actix: [
        status_cost_is_each_machines_price_summed_per_application_and_model,
    ],
    plain: [],
}

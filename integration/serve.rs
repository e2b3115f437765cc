//! `berth serve` end to end: the whole controller (store, engine, simulated
//! cloud, API) on a random port and a temporary data directory, driven over
//! HTTP.

use std::time::Duration;

use berth::app::{Application, ADMIN_TOKEN_FILE};
use berth::config::Config;
use serde_json::{json, Value};

const PATIENCE: Duration = Duration::from_secs(60);

struct Controller {
    url: String,
    token: String,
    client: reqwest::Client,
    data_dir: tempfile::TempDir,
}

fn config_for(dir: &std::path::Path) -> Config {
    Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: Some(dir.to_path_buf()),
        ..Config::default()
    }
}

async fn spawn_controller() -> Controller {
    let data_dir = tempfile::tempdir().unwrap();
    let app = Application::build(config_for(data_dir.path()))
        .await
        .expect("controller starts");
    let url = format!("http://127.0.0.1:{}", app.port());
    actix_web::rt::spawn(app.run_until_stopped());
    let token = std::fs::read_to_string(data_dir.path().join(ADMIN_TOKEN_FILE))
        .unwrap()
        .trim()
        .to_string();
    Controller {
        url,
        token,
        client: reqwest::Client::new(),
        data_dir,
    }
}

impl Controller {
    /// Sends `body` as JSON with the admin token; the status and the JSON
    /// answer (null when there is none).
    async fn send(&self, method: reqwest::Method, path: &str, body: Value) -> (u16, Value) {
        let response = self
            .client
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::POST, path, body).await
    }

    async fn put(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::PUT, path, body).await
    }

    async fn status(&self) -> Value {
        self.client
            .get(format!("{}/v1/status", self.url))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// Waits until every one of `count` machines shows `started`.
    async fn all_started(&self, count: usize) -> Value {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let status = self.status().await;
            let machines = status["machines"].as_object().cloned().unwrap_or_default();
            if machines.len() == count
                && machines
                    .values()
                    .all(|m| m["juju-status"]["current"] == "started")
            {
                return status;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "not all started: {status:#}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[actix_web::test]
async fn the_seed_scenario_gives_one_2g_machine_and_two_3g_machines_all_started() {
    let c = spawn_controller().await;
    let (code, body) = c
        .post(
            "/v1/applications",
            json!({"charm": "wordpress", "constraints": "mem=2G"}),
        )
        .await;
    assert!((200..300).contains(&code), "{code} {body}");
    let (code, body) = c
        .put(
            "/v1/applications/wordpress/constraints",
            json!({"constraints": "mem=3G"}),
        )
        .await;
    assert!((200..300).contains(&code), "{code} {body}");
    let (code, body) = c
        .post("/v1/applications/wordpress/units", json!({"num_units": 2}))
        .await;
    assert!((200..300).contains(&code), "{code} {body}");
    let status = c.all_started(3).await;
    let mut constraints: Vec<String> = status["machines"]
        .as_object()
        .unwrap()
        .values()
        .map(|m| m["constraints"].as_str().unwrap().to_string())
        .collect();
    constraints.sort();
    assert_eq!(constraints, vec!["mem=2048M", "mem=3072M", "mem=3072M"]);
    let machine = &status["machines"]["0"];
    assert_eq!(machine["machine-status"]["current"], "running");
    assert!(machine["instance-id"].as_str().unwrap().starts_with("i-"));
    let hardware = machine["hardware"].as_str().unwrap();
    assert!(
        hardware.contains("mem=2048M") && hardware.contains("availability-zone=sim-"),
        "{hardware}"
    );
    assert_eq!(
        status["applications"]["wordpress"]["units"]["wordpress/0"]["machine"],
        "0"
    );
}

#[actix_web::test]
async fn the_admin_token_file_is_private_and_kept_across_restarts() {
    let c = spawn_controller().await;
    let path = c.data_dir.path().join(ADMIN_TOKEN_FILE);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
    let again = Application::build(config_for(c.data_dir.path()));
    // The first controller still holds the simulated cloud's ledger; a
    // second one on the same directory must say so, not corrupt it.
    assert!(again.await.is_err());
    let token = std::fs::read_to_string(&path).unwrap();
    assert_eq!(token.trim(), c.token);
}

#[actix_web::test]
async fn a_request_without_the_token_is_refused() {
    let c = spawn_controller().await;
    let response = c
        .client
        .get(format!("{}/v1/status", c.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
    let health = c
        .client
        .get(format!("{}/healthz", c.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 200);
}

#[actix_web::test]
async fn unsatisfiable_constraints_show_a_provisioning_error_and_retry_fixes_it() {
    let c = spawn_controller().await;
    let (code, body) = c
        .post(
            "/v1/applications",
            json!({"charm": "wordpress", "constraints": "mem=100000G"}),
        )
        .await;
    assert!((200..300).contains(&code), "{code} {body}");
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let status = loop {
        let status = c.status().await;
        if status["machines"]["0"]["machine-status"]["current"] == "provisioning error" {
            break status;
        }
        assert!(tokio::time::Instant::now() < deadline, "{status:#}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let machine = &status["machines"]["0"];
    assert_eq!(machine["juju-status"]["current"], "error");
    assert!(machine["machine-status"]["message"]
        .as_str()
        .unwrap()
        .contains("no instance type satisfies"));
    // Like juju, status shows "pending" where there is no instance id.
    assert_eq!(machine["instance-id"], "pending", "{machine}");
    let (code, body) = c
        .post(
            "/v1/machines/retry",
            json!({"machines": ["0"], "constraints": "mem=2G"}),
        )
        .await;
    assert!((200..300).contains(&code), "{code} {body}");
    c.all_started(1).await;
}

#[actix_web::test]
async fn status_always_shows_the_callers_own_writes_even_when_kept_between_requests() {
    let c = spawn_controller().await;
    for n in 1..=5 {
        let (code, body) = c.post("/v1/machines", json!({"count": 1})).await;
        assert!((200..300).contains(&code), "{code} {body}");
        let status = c.status().await;
        assert_eq!(
            status["machines"].as_object().map(|m| m.len()),
            Some(n),
            "{status}"
        );
    }
    // Concurrent readers with no write between them see one revision.
    let reads = futures_util::future::join_all((0..8).map(|_| c.status())).await;
    let revisions: std::collections::BTreeSet<i64> = reads
        .iter()
        .map(|s| s["model"]["revision"].as_i64().unwrap())
        .collect();
    assert!(revisions.len() <= 2, "{revisions:?}");
}

/// A controller whose `[provider.ec2]` has `table`.
fn ec2_config_for(dir: &std::path::Path, table: &str) -> Config {
    let mut config = config_for(dir);
    config.provider.kind = berth::config::ProviderKind::Ec2;
    config.provider.ec2 = Some(table.parse().unwrap());
    config
}

#[cfg(feature = "ec2")]
#[actix_web::test]
async fn an_ec2_controller_with_a_misspelt_setting_refuses_to_start_and_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = ec2_config_for(dir.path(), "region = \"us-east-1\"\nsubnet = \"subnet-1\"");
    let error = Application::build(config).await.err().unwrap().to_string();
    assert!(
        error.starts_with(
            "cannot start the ec2 provider: invalid [provider.ec2] section: unknown field `subnet`"
        ),
        "{error}"
    );
}

#[cfg(not(feature = "ec2"))]
#[actix_web::test]
async fn without_the_ec2_feature_an_ec2_controller_refuses_to_start_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let config = ec2_config_for(dir.path(), "region = \"us-east-1\"");
    let error = Application::build(config).await.err().unwrap().to_string();
    assert_eq!(
        error,
        "cannot start the ec2 provider: this berth was built without the EC2 provider (cargo feature `ec2`)"
    );
}

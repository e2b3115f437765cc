//! Crashes: a real `berth serve` process killed with SIGKILL five times
//! in the middle of a 500-unit deploy on the simulated cloud with
//! transient failures, on SQLite and on PostgreSQL. After the last start,
//! every unit's machine is started, each on its own instance, the cloud
//! runs exactly those instances, and the change log has no gap.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use berth::app::ADMIN_TOKEN_FILE;
use berth::providers::sim::SimConfig;

use crate::support::app::{berth_command, free_port, Backend, Site};
use crate::support::{all_started, assert_one_live_instance_each, eventually};

const UNITS: usize = 500;
const KILLS: usize = 5;

/// One life of `berth serve` on `site`.
struct Serve {
    child: Child,
    address: String,
}

impl Serve {
    fn start(site: &Site) -> Serve {
        let port = free_port();
        let child = berth_command()
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .arg("--data-dir")
            .arg(site.dir())
            .arg("--database-url")
            .arg(site.database().to_string())
            .env("RUST_LOG", "warn")
            .env("BERTH_PROVIDER__SIM__FAILURE_RATE", "0.2")
            .env("BERTH_PROVIDER__SIM__START_DELAY_MS", "200")
            .env("BERTH_PROVIDER__SIM__AGENT_DELAY_MS", "400")
            .env("BERTH_PROVISIONER__BACKOFF_INITIAL_MS", "10")
            .env("BERTH_PROVISIONER__BACKOFF_MAX_MS", "200")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("berth serve starts");
        Serve {
            child,
            address: format!("http://127.0.0.1:{port}"),
        }
    }

    async fn ready(&mut self, client: &reqwest::Client) {
        let url = format!("{}/healthz", self.address);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(exit)) = self.child.try_wait() {
                panic!("berth serve exited ({exit})");
            }
            match client.get(&url).send().await {
                Ok(r) if r.status().is_success() => return,
                _ => {}
            }
            assert!(Instant::now() < deadline, "berth serve did not answer");
            actix_web::rt::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILL: no shutdown, no flush, as a crash or an OOM kill.
    fn kill(mut self) {
        self.child.kill().expect("kill -9");
        self.child.wait().expect("reap");
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn status(client: &reqwest::Client, serve: &Serve, token: &str) -> Option<Value> {
    let response = client
        .get(format!("{}/v1/status", serve.address))
        .bearer_auth(token)
        .send()
        .await
        .ok()?;
    response.json().await.ok()
}

async fn killed_five_times_mid_deploy_nothing_is_lost(backend: Backend) {
    let site = Site::new(backend);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let mut serve = Serve::start(&site);
    serve.ready(&client).await;
    let token = std::fs::read_to_string(site.dir().join(ADMIN_TOKEN_FILE))
        .unwrap()
        .trim()
        .to_string();
    // Each life takes another 100 units and is killed before its agents
    // can all check in, so that every kill comes mid-deploy.
    let started_at = Instant::now();
    let mut started_when_killed = Vec::new();
    for kill in 0..KILLS {
        let request = if kill == 0 {
            client
                .post(format!("{}/v1/applications", serve.address))
                .json(&json!({"charm": "wordpress", "num_units": UNITS / KILLS}))
        } else {
            client
                .post(format!("{}/v1/applications/wordpress/units", serve.address))
                .json(&json!({"num_units": UNITS / KILLS}))
        };
        let added = request.bearer_auth(&token).send().await.unwrap();
        assert!(added.status().is_success(), "{added:?}");
        actix_web::rt::time::sleep(Duration::from_millis(150 + 100 * kill as u64)).await;
        let started = status(&client, &serve, &token)
            .await
            .map(|s| {
                s["machines"]
                    .as_object()
                    .map(|m| {
                        m.values()
                            .filter(|m| m["juju-status"]["current"] == "started")
                            .count()
                    })
                    .unwrap_or(0)
            })
            .unwrap_or(0);
        started_when_killed.push(started);
        serve.kill();
        serve = Serve::start(&site);
        serve.ready(&client).await;
    }

    let machines = eventually(
        "every machine started after the last restart",
        Duration::from_secs(180),
        || async {
            let status = status(&client, &serve, &token)
                .await
                .ok_or_else(|| "no status".to_string())?;
            all_started(&status, UNITS)
        },
    )
    .await;
    eprintln!(
        "{backend:?}: {KILLS} kills with {started_when_killed:?} machines started at each; \
         all {UNITS} started {:.1}s after the deploy",
        started_at.elapsed().as_secs_f64()
    );
    for (kill, started) in started_when_killed.iter().enumerate() {
        assert!(
            *started < (kill + 1) * UNITS / KILLS,
            "kill {kill} came mid-deploy: {started_when_killed:?}"
        );
    }
    serve.kill();

    // Each machine on its own instance, and the cloud runs exactly those.
    assert_one_live_instance_each(&machines, &site.open_sim(SimConfig::default()));

    // The change log has no gap and no reorder.
    let store = site.open_store();
    let head = store.revision();
    let changes = store.changes_since(0, head + 1).unwrap();
    let revisions: Vec<i64> = changes.iter().map(|c| c.revision).collect();
    assert_eq!(revisions, (1..=head).collect::<Vec<_>>());
}

crate::on_each_backend!(
    actix: [killed_five_times_mid_deploy_nothing_is_lost],
    plain: [],
);

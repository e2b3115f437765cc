//! The broker's pacing against a cloud that throttles like AWS: `cargo
//! bench --bench pacing`.
//!
//! A real `berth serve` process on SQLite and the simulated cloud with no
//! delays; `PUT /v1/sim/faults` gives the cloud a request bucket (default
//! burst 200, refilled at 50 a second: `BERTH_BENCH_THROTTLE=200,50`),
//! which every provider call must take a token from or be refused with
//! `RequestLimitExceeded`, and takes at most 5 launches a call
//! (`[provider.sim] launch_batch`, EC2's batch). Then 2,000 units are deployed
//! (`BERTH_BENCH_SIZES`) and timed to every machine `started`, twice:
//!
//! - configured: the broker's launch bucket set to the cloud's
//!   (`[provider.limits] launch`), as EC2's published limits are its
//!   defaults there;
//! - learning: no limit configured, so the broker paces itself only from
//!   the refusals.
//!
//! The floor is the time the bucket alone needs for the fewest launch
//! calls the deploy can be made in (the machines in calls of the cloud's
//! largest batch, 5): (calls - burst) / rate. It prints the time to
//! settled, its ratio to the floor, the launch calls made and refused
//! (from `/metrics`), and how many machines ended in a provisioning error;
//! it writes `target/bench/pacing.json`. Nothing is asserted: the figures
//! go into BENCHMARKS.md.
//!
//! Then the same deploy of 500 units (`BERTH_BENCH_EC2_SIZES`; `0` skips
//! it) on the EC2 provider against moto's EC2 server (`.venv/bin/moto_server`
//! or `BERTH_MOTO_SERVER`, on loopback; skipped with a note when there is
//! none), timed to every machine's instance running (`awaiting-agent`: no
//! agent boots in moto), twice:
//!
//! - ec2-defaults: the broker with EC2's published limits, its defaults
//!   (RunInstances: burst 5, 2 a second, one request per instance); the
//!   floor is what that bucket alone needs for one RunInstances each;
//! - ec2-raised: an account whose limits were raised out of the way
//!   (`[provider.limits]` at 10,000 a second), which shows what berth and
//!   moto take by themselves.
//!
//! For these it prints the RunInstances requests made (from
//! `berth_provider_requests_total{kind="launch"}`) beside the launch calls.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

#[path = "../support/moto.rs"]
mod moto;

/// The largest launch call: EC2's, which the simulated cloud is set to.
const LAUNCH_BATCH: usize = 5;

/// Units one API request may add.
const PER_REQUEST: usize = 1000;

/// How long a run may take before it gives up.
const PATIENCE: Duration = Duration::from_secs(600);

/// The region of the EC2 runs: the catalogue's.
const EC2_REGION: &str = "us-east-1";

/// What instances of the EC2 runs are told to reach: never contacted.
const CONTROLLER_URL: &str = "http://controller.invalid:17070";

fn setting(name: &str, default: Vec<f64>) -> Vec<f64> {
    std::env::var(name)
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .filter(|v: &Vec<f64>| !v.is_empty())
        .unwrap_or(default)
}

fn bench_root() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("bench")
}

struct Server {
    child: Child,
    url: String,
    token: String,
    client: reqwest::Client,
}

impl Server {
    async fn start(dir: &Path, config: &str) -> Server {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).expect("bench dir");
        let config_file = dir.join("berth.toml");
        std::fs::write(&config_file, config).expect("config file");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(env!("CARGO_BIN_EXE_berth"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .arg("--data-dir")
            .arg(dir.join("data"))
            .arg("--config")
            .arg(&config_file)
            .env("RUST_LOG", "error")
            // moto's credentials; nothing else of AWS's is looked at.
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("AWS_CONFIG_FILE", dir.join("no-aws-config"))
            .env(
                "AWS_SHARED_CREDENTIALS_FILE",
                dir.join("no-aws-credentials"),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start berth serve");
        let url = format!("http://127.0.0.1:{port}");
        let client = reqwest::Client::new();
        let deadline = Instant::now() + PATIENCE;
        let token = loop {
            if let Ok(token) = std::fs::read_to_string(dir.join("data/admin.token")) {
                let up = client
                    .get(format!("{url}/v1/status"))
                    .bearer_auth(token.trim())
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success());
                if up {
                    break token.trim().to_string();
                }
            }
            assert!(Instant::now() < deadline, "berth serve did not come up");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        Server {
            child,
            url,
            token,
            client,
        }
    }

    async fn send(&self, method: reqwest::Method, path: &str, body: Value) {
        let response = self
            .client
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .expect("request");
        let status = response.status();
        assert!(
            status.is_success(),
            "{path}: {status} {}",
            response.text().await.unwrap_or_default()
        );
    }

    async fn metric(&self, series: &str) -> f64 {
        let text = self
            .client
            .get(format!("{}/metrics", self.url))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .unwrap_or_default();
        text.lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Deploys `machines` units in requests of [`PER_REQUEST`] and waits until
/// every machine is in `done` or in a provisioning error. Returns the
/// seconds from the first request and the machines in error.
async fn deploy_and_settle(server: &Server, machines: usize, done: &str) -> (f64, f64) {
    let started = Instant::now();
    let mut remaining = machines;
    let mut first = true;
    while remaining > 0 {
        let count = remaining.min(PER_REQUEST);
        let (path, body) = if first {
            (
                "/v1/applications",
                json!({"charm": "wordpress", "num_units": count}),
            )
        } else {
            (
                "/v1/applications/wordpress/units",
                json!({"num_units": count}),
            )
        };
        server.send(reqwest::Method::POST, path, body).await;
        first = false;
        remaining -= count;
    }
    let deadline = Instant::now() + PATIENCE;
    let (mut settled, mut errors) = (0.0, 0.0);
    while settled + errors < machines as f64 {
        assert!(Instant::now() < deadline, "the deploy did not settle");
        tokio::time::sleep(Duration::from_millis(20)).await;
        settled = server
            .metric(&format!("berth_machines{{state=\"{done}\"}}"))
            .await;
        errors = server
            .metric("berth_machines{state=\"provisioning-error\"}")
            .await;
    }
    (started.elapsed().as_secs_f64(), errors)
}

/// The launch calls that went through and that were refused, and the
/// cloud requests they made.
async fn launch_calls(server: &Server) -> (f64, f64, f64) {
    let calls = |outcome: &'static str| async move {
        server
            .metric(&format!(
                "berth_provider_calls_total{{kind=\"launch\",outcome=\"{outcome}\"}}"
            ))
            .await
    };
    let requests = server
        .metric("berth_provider_requests_total{kind=\"launch\"}")
        .await;
    (calls("ok").await, calls("error").await, requests)
}

async fn run(mode: &str, machines: usize, burst: f64, per_second: f64) -> Value {
    // The cloud takes launches in EC2's batches, so the deploy makes as
    // many calls as it would on EC2.
    let mut config = format!("[provider.sim]\nlaunch_batch = {LAUNCH_BATCH}\n");
    if mode == "configured" {
        config.push_str(&format!(
            "[provider.limits]\nlaunch = {{ burst = {}, per_second = {per_second} }}\n",
            burst as u32
        ));
    }
    let dir = bench_root().join(format!("pacing-{mode}-{machines}"));
    let server = Server::start(&dir, &config).await;
    server
        .send(
            reqwest::Method::PUT,
            "/v1/sim/faults",
            json!({"throttle": {"burst": burst as u32, "per_second": per_second}}),
        )
        .await;
    let (settled, errors) = deploy_and_settle(&server, machines, "started").await;
    let run = Run {
        mode,
        machines,
        bucket: (burst, per_second),
        // The machines in calls of the cloud's largest batch.
        fewest_requests: machines.div_ceil(LAUNCH_BATCH) as f64,
        settled,
        errors,
    };
    run.figures(&server).await
}

/// What one run did, for [`Run::figures`].
struct Run<'a> {
    mode: &'a str,
    machines: usize,
    /// The cloud's request bucket: burst and refill a second.
    bucket: (f64, f64),
    /// The fewest launch requests the deploy can be made in.
    fewest_requests: f64,
    settled: f64,
    errors: f64,
}

impl Run<'_> {
    /// The run's row: its figures, the launch calls and requests from
    /// `server`'s `/metrics`, and the floor, the time the bucket alone
    /// needs for the fewest requests (none when the burst covers them).
    async fn figures(&self, server: &Server) -> Value {
        let (ok, refused, requests) = launch_calls(server).await;
        let (burst, per_second) = self.bucket;
        let floor = (self.fewest_requests - burst).max(0.0) / per_second;
        let ratio = if floor > 0.0 {
            self.settled / floor
        } else {
            f64::NAN
        };
        json!({
            "mode": self.mode,
            "machines": self.machines,
            "burst": burst,
            "per_second": per_second,
            "settled_s": self.settled,
            "floor_s": floor,
            "ratio_to_floor": ratio,
            "launch_calls_ok": ok,
            "launch_calls_refused": refused,
            "launch_requests": requests,
            "fewest_launch_calls": self.fewest_requests,
            "provisioning_errors": self.errors,
        })
    }
}

/// Whether moto's server is there to be started.
fn moto_installed() -> bool {
    std::env::var_os("BERTH_MOTO_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/moto_server"))
        .exists()
}

/// An Ubuntu image moto has, for the EC2 runs' `[provider.ec2.images]`.
async fn moto_image(endpoint: &str) -> String {
    use aws_sdk_ec2::config::{BehaviorVersion, Credentials, Region};
    let config = aws_sdk_ec2::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .credentials_provider(Credentials::new("testing", "testing", None, None, "bench"))
        .region(Region::new(EC2_REGION))
        .endpoint_url(endpoint)
        .build();
    let images = aws_sdk_ec2::Client::from_conf(config)
        .describe_images()
        .owners("099720109477")
        .send()
        .await
        .expect("moto lists its images");
    images.images()[0]
        .image_id()
        .expect("an image id")
        .to_string()
}

/// EC2's published RunInstances request bucket, which the broker uses by
/// default: burst 5, refilled at 2 a second.
const EC2_RUN_INSTANCES: (f64, f64) = (5.0, 2.0);

async fn run_ec2(mode: &str, machines: usize) -> Value {
    let endpoint = moto::endpoint();
    let image = moto_image(&endpoint).await;
    let (burst, per_second, limits) = if mode == "ec2-raised" {
        (
            10_000.0,
            10_000.0,
            "[provider.limits]\nlaunch = { burst = 10000, per_second = 10000.0 }\n\
             instances = { burst = 10000, per_second = 10000.0 }\n",
        )
    } else {
        (EC2_RUN_INSTANCES.0, EC2_RUN_INSTANCES.1, "")
    };
    let config = format!(
        r#"controller_url = "{CONTROLLER_URL}"

[provider]
kind = "ec2"

[provider.ec2]
region = "{EC2_REGION}"
endpoint_url = "{endpoint}"
image_has_agent = true

[provider.ec2.images]
"ubuntu@24.04/amd64" = "{image}"

{limits}
[provisioner]
# No agent boots in moto: instances are not replaced meanwhile.
bootstrap_timeout_s = 3600
"#
    );
    let dir = bench_root().join(format!("pacing-{mode}-{machines}"));
    let server = Server::start(&dir, &config).await;
    let (settled, errors) = deploy_and_settle(&server, machines, "awaiting-agent").await;
    let run = Run {
        mode,
        machines,
        bucket: (burst, per_second),
        // One RunInstances per instance.
        fewest_requests: machines as f64,
        settled,
        errors,
    };
    run.figures(&server).await
}

fn print_row(row: &Value) {
    let f = |k: &str| row[k].as_f64().unwrap_or(f64::NAN);
    println!(
        "{:>12} {:>9} {:>10.2} {:>8.2} {:>7.2} {:>9} {:>9} {:>9} {:>7} {:>7}",
        row["mode"].as_str().unwrap_or("?"),
        f("machines"),
        f("settled_s"),
        f("floor_s"),
        f("ratio_to_floor"),
        f("launch_calls_ok"),
        f("launch_calls_refused"),
        f("launch_requests"),
        f("fewest_launch_calls"),
        f("provisioning_errors"),
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let throttle = setting("BERTH_BENCH_THROTTLE", vec![200.0, 50.0]);
    let (burst, per_second) = (throttle[0], *throttle.get(1).unwrap_or(&50.0));
    println!(
        "{:>12} {:>9} {:>10} {:>8} {:>7} {:>9} {:>9} {:>9} {:>7} {:>7}",
        "mode",
        "machines",
        "settled s",
        "floor s",
        "ratio",
        "calls ok",
        "refused",
        "requests",
        "fewest",
        "errors"
    );
    let mut rows = Vec::new();
    let sizes = |name: &str, default: f64| -> Vec<usize> {
        setting(name, vec![default])
            .into_iter()
            .filter(|n| *n >= 1.0)
            .map(|n| n as usize)
            .collect()
    };
    for machines in sizes("BERTH_BENCH_SIZES", 2000.0) {
        for mode in ["configured", "learning"] {
            let row = runtime.block_on(run(mode, machines, burst, per_second));
            print_row(&row);
            rows.push(row);
        }
    }
    let ec2_sizes = sizes("BERTH_BENCH_EC2_SIZES", 500.0);
    if !ec2_sizes.is_empty() && !moto_installed() {
        println!(
            "the EC2 runs are skipped: no moto_server (run `bash integration/run.sh`, which \
             installs it into .venv, or set BERTH_MOTO_SERVER)"
        );
    } else {
        for machines in ec2_sizes {
            for mode in ["ec2-defaults", "ec2-raised"] {
                let row = runtime.block_on(run_ec2(mode, machines));
                print_row(&row);
                rows.push(row);
            }
        }
    }
    let out = bench_root().join("pacing.json");
    std::fs::write(
        &out,
        serde_json::to_string_pretty(&json!({ "runs": rows })).expect("json"),
    )
    .expect("write the results");
    println!("wrote {}", out.display());
}

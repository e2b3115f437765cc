//! How fast berth provisions: `cargo bench --bench engine`.
//!
//! For each size (default 1,000 and 10,000 units; set `BERTH_BENCH_SIZES`,
//! e.g. `1000,10000,100000`), in a fresh data directory, against a real
//! `berth serve` process over HTTP on loopback with the simulated cloud at
//! zero start and check-in latency, it measures what follows.
//!
//! The store is SQLite, or PostgreSQL with `BERTH_BENCH_STORE=postgres`: a
//! fresh database on a server the harness starts as the tests do (or on
//! `BERTH_TEST_POSTGRES_URL`'s). On PostgreSQL, `BERTH_BENCH_CONTROLLERS`
//! (e.g. `1,2,3`) runs each size with that many controllers on the one
//! database, sharing the simulated cloud; the deploy goes through the
//! first, and webhooks and restart are measured with one controller only.
//!
//!
//! - deploy-to-settled: from sending the deploy to every machine `started`;
//! - floor: the same rows (units, machines, their status transitions and
//!   change-log entries) written straight through the store, in the same
//!   run on the same disk, and the ratio of the two;
//! - status: p50 and p99 of `GET /v1/status` under concurrent readers,
//!   right after the deploy settles, to the response's last byte: first
//!   gzipped (`Accept-Encoding: gzip`, as the command line, browsers and
//!   most HTTP clients ask; the time a client then takes to decode 60 MB
//!   is its own and not counted), then as it is (no `Accept-Encoding`).
//!   The reader counts the body's bytes as they arrive and keeps none of
//!   them, as `curl -o /dev/null` does. Beside it, the loopback floor:
//!   the same number of bytes sent to as many readers at once, read the
//!   same way, by a bare HTTP server in the harness that writes one
//!   buffer whole (what moving the bytes alone costs on this machine). A
//!   gzipped read of the (empty) status comes before the deploy, as from
//!   a client watching it, so the controller knows gzip is wanted;
//! - filtered status: once a second application of 3 units (deployed after
//!   the first settled) has started, p50 and p99 of 20 reads each of
//!   `?machines=1-100` and `?application=memcached`, one at a time;
//! - webhooks: sustained signed provider callbacks per second;
//! - restart: from process start to answering status, and to having
//!   reconciled every machine;
//! - memory: the controller's peak resident memory.
//!
//! It prints a table and writes `target/bench/engine-<store>.json`. Nothing is
//! asserted: the figures go into BENCHMARKS.md.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use berth::api::webhooks::{sign, SIGNATURE_HEADER, TIMESTAMP_HEADER};
use berth::charms::resolve;
use berth::contracts::secrets::Secret;
use berth::domain::constraints::Constraints;
use berth::domain::machine::{Event, Machine, MachineState};
use berth::domain::names::MachineId;
use berth::store::applications::DeployRequest;
use berth::store::db::DatabaseUrl;
use berth::store::lifecycle::MachineEvent;
use berth::store::Store;
use serde_json::{json, Value};

// The tests' server; the bench uses only its fresh databases.
#[allow(dead_code)]
#[path = "../support/postgres.rs"]
mod postgres;

/// Units one API request may add (the API's own limit).
const PER_REQUEST: usize = 1000;
const READERS: usize = 4;
const WEBHOOKS: usize = 20_000;
const WEBHOOK_CONCURRENCY: usize = 32;
const PATIENCE: Duration = Duration::from_secs(600);

fn sizes() -> Vec<usize> {
    std::env::var("BERTH_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .filter(|v: &Vec<usize>| !v.is_empty())
        .unwrap_or_else(|| vec![1_000, 10_000])
}

/// The store the controllers use.
#[derive(Clone, Copy, PartialEq, Eq)]
enum BenchStore {
    Sqlite,
    Postgres,
}

impl BenchStore {
    fn from_env() -> BenchStore {
        match std::env::var("BERTH_BENCH_STORE").as_deref() {
            Ok("postgres") => BenchStore::Postgres,
            Ok("sqlite") | Err(_) => BenchStore::Sqlite,
            Ok(other) => panic!("BERTH_BENCH_STORE={other}: expected sqlite or postgres"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            BenchStore::Sqlite => "sqlite",
            BenchStore::Postgres => "postgres",
        }
    }

    /// A fresh store: a file in `dir`, or a new PostgreSQL database.
    fn fresh(self, dir: &Path, name: &str) -> DatabaseUrl {
        match self {
            BenchStore::Sqlite => DatabaseUrl::Sqlite(dir.join(format!("{name}.db"))),
            BenchStore::Postgres => DatabaseUrl::Postgres(postgres::fresh_database()),
        }
    }
}

/// How many controllers to run each size with (`BERTH_BENCH_CONTROLLERS`).
fn controller_counts(store: BenchStore) -> Vec<usize> {
    let counts: Vec<usize> = std::env::var("BERTH_BENCH_CONTROLLERS")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .filter(|v: &Vec<usize>| !v.is_empty())
        .unwrap_or_else(|| vec![1]);
    assert!(
        store == BenchStore::Postgres || counts.iter().all(|c| *c == 1),
        "several controllers need BERTH_BENCH_STORE=postgres"
    );
    assert!(counts.iter().all(|c| *c >= 1), "at least one controller");
    counts
}

fn bench_root() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("bench")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Server {
    child: Child,
    url: String,
    token: String,
    client: reqwest::Client,
}

fn spawn_server(dir: &Path, port: u16, store: &DatabaseUrl) -> Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_berth"));
    command
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(dir);
    if let DatabaseUrl::Postgres(url) = store {
        command.args(["--database-url", url]);
    }
    command
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start berth serve")
}

impl Server {
    /// Starts a controller and waits until it answers and, if
    /// `reconciles` (the controller that runs the cluster-wide jobs), has
    /// reconciled with the cloud.
    async fn start(
        dir: &Path,
        port: u16,
        store: &DatabaseUrl,
        reconciles: bool,
    ) -> (Server, Duration, Duration) {
        let started = Instant::now();
        let child = spawn_server(dir, port, store);
        let url = format!("http://127.0.0.1:{port}");
        let client = reqwest::Client::new();
        let deadline = Instant::now() + PATIENCE;
        let token = loop {
            if let Ok(token) = std::fs::read_to_string(dir.join("admin.token")) {
                if let Ok(r) = client
                    .get(format!("{url}/v1/status"))
                    .bearer_auth(token.trim())
                    .send()
                    .await
                {
                    if r.status().is_success() {
                        break token.trim().to_string();
                    }
                }
            }
            assert!(Instant::now() < deadline, "berth serve did not come up");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let serving = started.elapsed();
        let server = Server {
            child,
            url,
            token,
            client,
        };
        while reconciles && server.metric("berth_reconciliations_total").await < 1.0 {
            assert!(Instant::now() < deadline, "the engine did not reconcile");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let reconciled = started.elapsed();
        (server, serving, reconciled)
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        let response = self
            .client
            .post(format!("{}{path}", self.url))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .expect("request");
        assert!(
            response.status().is_success(),
            "{path}: {}",
            response.status()
        );
        response.json().await.unwrap_or(Value::Null)
    }

    async fn metrics(&self) -> String {
        self.client
            .get(format!("{}/metrics", self.url))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .unwrap_or_default()
    }

    async fn metric(&self, series: &str) -> f64 {
        self.metrics()
            .await
            .lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    }

    fn peak_rss_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with("VmHWM:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    }

    /// SIGTERM, then wait for a clean exit.
    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// The same rows as a deploy of `n` units that all start, written straight
/// through the store: units and machines in transactions of 1,000 units,
/// then three saves per machine (a new machine's start is written with its
/// zone, as the engine writes it), committed by the group-committing
/// writer in large batches (each kind together on PostgreSQL, as the
/// engine's are).
async fn floor(url: DatabaseUrl, n: usize) -> Duration {
    let store = tokio::task::spawn_blocking(move || Store::open(&url))
        .await
        .expect("task")
        .expect("open floor store");
    let started = Instant::now();
    let mut remaining = n;
    let mut first = true;
    while remaining > 0 {
        let count = remaining.min(PER_REQUEST);
        if first {
            store
                .deploy(DeployRequest {
                    application: "wordpress".parse().unwrap(),
                    charm: resolve("wordpress").unwrap(),
                    base: None,
                    constraints: Constraints::default(),
                    units: count as u32,
                    placement: Vec::new(),
                    settings: BTreeMap::new(),
                })
                .await
                .expect("deploy");
            first = false;
        } else {
            store
                .add_units("wordpress".parse().unwrap(), count as u32, Vec::new())
                .await
                .expect("add units");
        }
        remaining -= count;
    }
    let ids: Vec<_> = store
        .machines()
        .expect("machines")
        .into_iter()
        .map(|m| m.id)
        .collect();
    // The engine's own steps, each through the store's one writer as a
    // machine actor makes them (decided, then committed under this
    // controller's lease); the last is the agent's check-in with the
    // launch's one-time password. A machine actor takes a new machine to
    // `allocating` without writing it, and writes that step with its
    // zone: so does this.
    store
        .claim_machines(ids.clone(), Duration::from_secs(600))
        .await
        .expect("claim the machines");
    let steps: [fn(MachineId) -> Event; 2] = [
        |_| Event::ZoneChosen {
            zone: "sim-a".to_string(),
        },
        |id| Event::InstanceStarted {
            instance_id: format!("i-0-{id}"),
        },
    ];
    let mut machines: Vec<(MachineId, Machine, Option<Secret>)> = ids
        .iter()
        .map(|id| {
            let allocating = store
                .decide(
                    &Machine::new(),
                    MachineEvent::new(*id, Event::StartInstance),
                )
                .expect("decide")
                .into_applied()
                .next;
            (*id, allocating, None)
        })
        .collect();
    for step in steps {
        let writes: Vec<_> = machines
            .drain(..)
            .map(|(id, current, password)| {
                let store = store.clone();
                tokio::spawn(async move {
                    let mut decided = store
                        .decide(&current, MachineEvent::new(id, step(id)))
                        .expect("decide");
                    if current.state == MachineState::Allocating {
                        decided = decided.stored_as(MachineState::Pending);
                    }
                    let applied = store.commit(decided).await.expect("commit");
                    (id, applied.next, applied.password.or(password))
                })
            })
            .collect();
        for write in writes {
            machines.push(write.await.expect("task"));
        }
    }
    let check_ins: Vec<_> = machines
        .into_iter()
        .map(|(id, _, password)| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .agent_connect(id, password.expect("a launch's password"))
                    .await
            })
        })
        .collect();
    for check_in in check_ins {
        check_in.await.expect("task").expect("check-in");
    }
    started.elapsed()
}

async fn webhooks(server: &Server, dir: &Path) -> f64 {
    let secret = std::fs::read_to_string(dir.join("webhook.secret")).expect("webhook secret");
    let secret = secret.trim().to_string();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..WEBHOOK_CONCURRENCY {
        let client = server.client.clone();
        let url = format!("{}/v1/webhooks/sim", server.url);
        let secret = secret.clone();
        tasks.push(tokio::spawn(async move {
            let mut ok = 0usize;
            for k in (worker..WEBHOOKS).step_by(WEBHOOK_CONCURRENCY) {
                let at_ms = berth::store::now_ms();
                let body = json!({"instance_id": format!("i-bench-{k}"), "state": "running", "at_ms": at_ms}).to_string();
                let timestamp = at_ms / 1000;
                let response = client
                    .post(&url)
                    .header(TIMESTAMP_HEADER, timestamp.to_string())
                    .header(SIGNATURE_HEADER, sign(&secret, timestamp, body.as_bytes()))
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await;
                if response.is_ok_and(|r| r.status().is_success()) {
                    ok += 1;
                }
            }
            ok
        }));
    }
    let mut accepted = 0;
    for task in tasks {
        accepted += task.await.unwrap_or(0);
    }
    let took = started.elapsed();
    assert_eq!(
        accepted, WEBHOOKS,
        "every signed callback should be accepted"
    );
    accepted as f64 / took.as_secs_f64()
}

/// How many reads each of the [`READERS`] readers makes.
fn reads_per_reader(n: usize) -> usize {
    if n >= 50_000 {
        5
    } else {
        25
    }
}

/// The p50 and p99 of [`READERS`] readers at once each reading `url`
/// `per_reader` times (with `token` if given, asking for gzip if `gzip`),
/// each to the body's last byte, taken as it arrives and not kept; and the
/// body's length.
async fn concurrent_reads(
    url: String,
    token: Option<String>,
    gzip: bool,
    per_reader: usize,
) -> (f64, f64, u64) {
    // A client that decodes nothing: the time is the server's.
    let client = reqwest::Client::builder()
        .no_gzip()
        .build()
        .expect("client");
    let mut tasks = Vec::new();
    for _ in 0..READERS {
        let client = client.clone();
        let url = url.clone();
        let token = token.clone();
        tasks.push(tokio::spawn(async move {
            let mut times = Vec::new();
            let mut length = 0;
            for _ in 0..per_reader {
                let start = Instant::now();
                let mut request = client.get(&url);
                if let Some(token) = &token {
                    request = request.bearer_auth(token);
                }
                if gzip {
                    request = request.header("Accept-Encoding", "gzip");
                }
                let mut response = request.send().await.expect("read");
                assert_eq!(
                    response
                        .headers()
                        .get("content-encoding")
                        .is_some_and(|e| e == "gzip"),
                    gzip
                );
                let expected = response.content_length();
                // The body as it arrives, counted and dropped (as `curl -o
                // /dev/null` takes it): gathering 60 MB into one buffer is
                // the client's work, not the server's.
                let mut received = 0u64;
                while let Some(chunk) = response.chunk().await.expect("body") {
                    received += chunk.len() as u64;
                }
                times.push(start.elapsed().as_secs_f64() * 1e3);
                assert!(received > 0 && expected.is_none_or(|n| n == received));
                length = received;
            }
            (times, length)
        }));
    }
    let mut all = Vec::new();
    let mut length = 0;
    for task in tasks {
        let (times, read) = task.await.expect("reader");
        all.extend(times);
        length = read;
    }
    all.sort_by(f64::total_cmp);
    (percentile(&all, 50.0), percentile(&all, 99.0), length)
}

/// The p50 and p99 of the whole status read by [`READERS`] readers at
/// once, gzipped if `gzip` (received, not decoded) or as it is; and the
/// body's length.
async fn status_latencies(server: &Server, n: usize, gzip: bool) -> (f64, f64, u64) {
    let url = format!("{}/v1/status", server.url);
    concurrent_reads(url, Some(server.token.clone()), gzip, reads_per_reader(n)).await
}

/// The p50 and p99 of `length` bytes sent over loopback by a bare HTTP
/// server in this process, one buffer written whole after a fixed header
/// (no routing, no rendering), to [`READERS`] readers at once, read by the
/// same client in the same way and as many times as [`status_latencies`]
/// reads: what moving the status's bytes alone costs on this machine, the
/// floor of the status read as it is.
async fn loopback_floor(length: u64, n: usize) -> (f64, f64) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("listen");
    let url = format!("http://{}/", listener.local_addr().expect("address"));
    let mut response = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n\r\n"
    )
    .into_bytes();
    response.resize(
        response.len() + usize::try_from(length).expect("length"),
        b' ',
    );
    let response = std::sync::Arc::new(response);
    let sender = tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let response = response.clone();
            tokio::spawn(async move {
                // Each request whole (a GET has no body), then its answer.
                let mut request = Vec::new();
                let mut buffer = [0u8; 4096];
                while let Ok(read) = socket.read(&mut buffer).await {
                    if read == 0 {
                        return;
                    }
                    request.extend_from_slice(&buffer[..read]);
                    while let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                        request.drain(..end + 4);
                        if socket.write_all(&response).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    let (p50, p99, received) = concurrent_reads(url, None, false, reads_per_reader(n)).await;
    sender.abort();
    assert_eq!(received, length);
    (p50, p99)
}

/// The p50 and p99 of 20 reads, one at a time, of the status at `query`.
async fn filtered_latencies(server: &Server, query: &str) -> (f64, f64) {
    let url = format!("{}/v1/status{query}", server.url);
    let mut times = Vec::new();
    for _ in 0..20 {
        let start = Instant::now();
        let response = server
            .client
            .get(&url)
            .bearer_auth(&server.token)
            .send()
            .await
            .expect("filtered status");
        assert!(
            response.status().is_success(),
            "{query}: {}",
            response.status()
        );
        assert!(response.bytes().await.is_ok());
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    (percentile(&times, 50.0), percentile(&times, 99.0))
}

/// Deploys a second application of 3 units, waits until it has started,
/// and measures the filtered status by machine range and by application:
/// (range p50, range p99, application p50, application p99).
async fn filtered_status(server: &Server, n: usize) -> [f64; 4] {
    server
        .post(
            "/v1/applications",
            json!({"charm": "memcached", "num_units": 3}),
        )
        .await;
    let deadline = Instant::now() + PATIENCE;
    while server.metric("berth_machines{state=\"started\"}").await < (n + 3) as f64 {
        assert!(
            Instant::now() < deadline,
            "the second application did not start"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (range_p50, range_p99) = filtered_latencies(server, "?machines=1-100").await;
    let (app_p50, app_p99) = filtered_latencies(server, "?application=memcached").await;
    [range_p50, range_p99, app_p50, app_p99]
}

async fn run(n: usize, store: BenchStore, controllers: usize) -> Value {
    let dir = bench_root().join(format!("engine-{}-{controllers}-{n}", store.name()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("bench dir");
    let url = store.fresh(&dir, "store");
    let port = free_port();
    let (server, _, _) = Server::start(&dir.join("c0"), port, &url, true).await;
    let mut others = Vec::new();
    for k in 1..controllers {
        let (other, _, _) =
            Server::start(&dir.join(format!("c{k}")), free_port(), &url, false).await;
        others.push(other);
    }
    if controllers > 1 {
        // Each controller announces itself as it starts, and takes its share
        // of new work once the others know of it.
        let check = url.clone();
        let look = tokio::task::spawn_blocking(move || Store::open(&check))
            .await
            .expect("task")
            .expect("open the store to look");
        let deadline = Instant::now() + PATIENCE;
        while look
            .live_controllers(berth::store::now_ms())
            .expect("leases")
            .len()
            < controllers
        {
            assert!(Instant::now() < deadline, "the controllers did not meet");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    // A client that takes gzip (a dashboard, `berth status`) has read the
    // status before the deploy, so the controller keeps a gzipped rendering
    // as it goes, as it does for anyone watching.
    let before = server
        .client
        .get(format!("{}/v1/status", server.url))
        .bearer_auth(&server.token)
        .header("Accept-Encoding", "gzip")
        .send()
        .await
        .expect("status before the deploy");
    assert!(before.status().is_success(), "{}", before.status());

    let started = Instant::now();
    let mut remaining = n;
    let mut first = true;
    while remaining > 0 {
        let count = remaining.min(PER_REQUEST);
        if first {
            server
                .post(
                    "/v1/applications",
                    json!({"charm": "wordpress", "num_units": count}),
                )
                .await;
            first = false;
        } else {
            server
                .post(
                    "/v1/applications/wordpress/units",
                    json!({"num_units": count}),
                )
                .await;
        }
        remaining -= count;
    }
    // A million units take longer than any smaller run may.
    let deadline = Instant::now() + PATIENCE.max(Duration::from_secs(n as u64 / 250));
    while server.metric("berth_machines{state=\"started\"}").await < n as f64 {
        assert!(Instant::now() < deadline, "deploy did not settle");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let settled = started.elapsed();

    let (gzip_p50, gzip_p99, _) = status_latencies(&server, n, true).await;
    let (p50, p99, status_bytes) = status_latencies(&server, n, false).await;
    let (floor_p50, floor_p99) = loopback_floor(status_bytes, n).await;
    let [range_p50, range_p99, app_p50, app_p99] = filtered_status(&server, n).await;
    let mut peak_mib = server.peak_rss_mib();
    let mut one_controller = Value::Null;
    if controllers == 1 {
        let webhooks_per_s = webhooks(&server, &dir.join("c0")).await;
        peak_mib = peak_mib.max(server.peak_rss_mib());
        server.stop();
        let (server, serving, reconciled) = Server::start(&dir.join("c0"), port, &url, true).await;
        peak_mib = peak_mib.max(server.peak_rss_mib());
        server.stop();
        one_controller = json!({
            "webhooks_per_s": webhooks_per_s,
            "restart_to_serving_s": serving.as_secs_f64(),
            "restart_to_reconciled_s": reconciled.as_secs_f64(),
        });
    } else {
        server.stop();
    }
    for other in others {
        peak_mib = peak_mib.max(other.peak_rss_mib());
        other.stop();
    }

    let floor = floor(store.fresh(&dir, "floor"), n).await;
    let ratio = settled.as_secs_f64() / floor.as_secs_f64();
    let f = |k: &str| one_controller.get(k).cloned().unwrap_or(Value::Null);
    json!({
        "store": store.name(),
        "controllers": controllers,
        "units": n,
        "deploy_to_settled_s": settled.as_secs_f64(),
        "machines_per_s": n as f64 / settled.as_secs_f64(),
        "floor_s": floor.as_secs_f64(),
        "ratio_to_floor": ratio,
        "status_p50_ms": p50,
        "status_p99_ms": p99,
        "status_gzip_p50_ms": gzip_p50,
        "status_gzip_p99_ms": gzip_p99,
        "status_bytes": status_bytes,
        "loopback_floor_p50_ms": floor_p50,
        "loopback_floor_p99_ms": floor_p99,
        "filtered_machines_p50_ms": range_p50,
        "filtered_machines_p99_ms": range_p99,
        "filtered_application_p50_ms": app_p50,
        "filtered_application_p99_ms": app_p99,
        "webhooks_per_s": f("webhooks_per_s"),
        "restart_to_serving_s": f("restart_to_serving_s"),
        "restart_to_reconciled_s": f("restart_to_reconciled_s"),
        "peak_rss_mib": peak_mib,
    })
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let store = BenchStore::from_env();
    let mut rows = Vec::new();
    println!(
        "{:>8} {:>5} {:>8} {:>10} {:>10} {:>9} {:>7} {:>9} {:>9} {:>10} {:>9} {:>11} {:>9}",
        "store",
        "ctl",
        "units",
        "settled s",
        "mach/s",
        "floor s",
        "ratio",
        "st p50ms",
        "st p99ms",
        "hooks/s",
        "serve s",
        "reconcile s",
        "peak MiB"
    );
    for controllers in controller_counts(store) {
        for n in sizes() {
            let row = runtime.block_on(run(n, store, controllers));
            let f = |k: &str| row[k].as_f64().unwrap_or(f64::NAN);
            println!(
            "{:>8} {:>5} {:>8} {:>10.2} {:>10.0} {:>9.2} {:>7.2} {:>9.1} {:>9.1} {:>10.0} {:>9.2} {:>11.2} {:>9.0}",
            store.name(),
            controllers,
            n,
            f("deploy_to_settled_s"),
            f("machines_per_s"),
            f("floor_s"),
            f("ratio_to_floor"),
            f("status_p50_ms"),
            f("status_p99_ms"),
            f("webhooks_per_s"),
            f("restart_to_serving_s"),
            f("restart_to_reconciled_s"),
            f("peak_rss_mib"),
        );
            println!(
                "{:>8} status gzipped p50 {:.1} ms, p99 {:.1} ms (as it is: the table's; its {:.1} MB over bare loopback: p50 {:.1} ms, p99 {:.1} ms); filtered status: machines=1-100 p50 {:.2} ms, p99 {:.2} ms; application=memcached p50 {:.2} ms, p99 {:.2} ms",
                "",
                f("status_gzip_p50_ms"),
                f("status_gzip_p99_ms"),
                f("status_bytes") / 1e6,
                f("loopback_floor_p50_ms"),
                f("loopback_floor_p99_ms"),
                f("filtered_machines_p50_ms"),
                f("filtered_machines_p99_ms"),
                f("filtered_application_p50_ms"),
                f("filtered_application_p99_ms"),
            );
            rows.push(row);
        }
    }
    let out = bench_root().join(format!("engine-{}.json", store.name()));
    std::fs::write(
        &out,
        serde_json::to_string_pretty(&json!({ "sizes": rows })).expect("json"),
    )
    .expect("write the results");
    println!("wrote {}", out.display());
}

//! A load run: a real `berth serve` process on the simulated cloud deploys
//! a number of units while status readers poll and event-stream clients
//! follow the change log from the revision before the deploy.
//!
//! Shared by the suite's `integration/load.rs` (a bounded size, checking
//! that every stream receives every revision in order and no request
//! fails) and `cargo bench --bench load` (10,000 units, figures for
//! RELIABILITY.md). Self-contained, so the benchmark can include it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::watch;

/// Units one API request may add (the API's own limit).
const PER_REQUEST: usize = 1000;

/// How long any phase may take before the run gives up.
const PATIENCE: Duration = Duration::from_secs(600);

/// What to run.
#[derive(Clone, Copy, Debug)]
pub struct LoadPlan {
    pub units: usize,
    pub status_readers: usize,
    pub streams: usize,
    /// Whether the event-stream clients take gzip, as browsers do (or ask
    /// for the stream as it is).
    pub streams_take_gzip: bool,
}

/// What one event-stream client saw.
#[derive(Clone, Debug, Default)]
pub struct StreamSeen {
    /// Events received.
    pub events: usize,
    /// Bytes and chunks received.
    pub bytes: usize,
    pub chunks: usize,
    /// The first and last revision received.
    pub first: Option<i64>,
    pub last: Option<i64>,
    /// Places where a revision did not follow the one before by exactly
    /// one: (previous, received). Empty when nothing was skipped or
    /// repeated.
    pub breaks: Vec<(i64, i64)>,
    /// Why the stream ended early, if it did.
    pub error: Option<String>,
}

/// What a run measured.
#[derive(Debug)]
pub struct LoadReport {
    pub plan: LoadPlan,
    /// From the first deploy request to every machine `started`.
    pub settled: Duration,
    /// The change log's revision before the deploy and once it settled.
    pub revision_before: i64,
    pub revision_after: i64,
    /// Status requests made during the deploy, and those that failed.
    pub status_requests: usize,
    pub status_failures: Vec<String>,
    /// Each event-stream client's account.
    pub streams: Vec<StreamSeen>,
    /// From the deploy settling to the last stream receiving the last
    /// revision.
    pub streams_drained: Duration,
    /// The controller's resident memory before the streams opened, with
    /// them all open and idle, and at its peak.
    pub rss_before_streams_kib: u64,
    pub rss_with_streams_kib: u64,
    pub peak_rss_kib: u64,
    /// CPU seconds (user and system) the controller and this process spent
    /// from the first deploy request to settled.
    pub controller_cpu_s: f64,
    pub clients_cpu_s: f64,
    /// The most memory the kernel held for TCP (every socket on the
    /// machine: the controller's and the clients' buffers) from the first
    /// deploy request until every stream had the last revision, in KiB.
    pub peak_tcp_kib: u64,
}

impl LoadReport {
    /// Resident memory each open stream costs, in KiB.
    pub fn kib_per_stream(&self) -> f64 {
        if self.plan.streams == 0 {
            return 0.0;
        }
        self.rss_with_streams_kib
            .saturating_sub(self.rss_before_streams_kib) as f64
            / self.plan.streams as f64
    }

    /// Events delivered to all streams together.
    pub fn events_delivered(&self) -> usize {
        self.streams.iter().map(|s| s.events).sum()
    }
}

/// A `berth serve` process on a fresh data directory.
pub struct Controller {
    child: Child,
    pub url: String,
    pub token: String,
    pub client: reqwest::Client,
}

impl Controller {
    /// Starts `berth` (the binary) on a free loopback port with its data
    /// in `dir`, on SQLite and the simulated cloud with no delays.
    pub async fn start(berth: &Path, dir: &Path) -> Controller {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut child = Command::new(berth)
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .arg("--data-dir")
            .arg(dir)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("berth serve starts");
        let url = format!("http://127.0.0.1:{port}");
        let client = http_client();
        let deadline = Instant::now() + PATIENCE;
        let token = loop {
            if let Ok(Some(exit)) = child.try_wait() {
                panic!("berth serve exited ({exit})");
            }
            if let Ok(token) = std::fs::read_to_string(dir.join("admin.token")) {
                let ok = client
                    .get(format!("{url}/v1/status"))
                    .bearer_auth(token.trim())
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success());
                if ok {
                    break token.trim().to_string();
                }
            }
            assert!(Instant::now() < deadline, "berth serve did not come up");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        Controller {
            child,
            url,
            token,
            client,
        }
    }

    async fn post(&self, path: &str, body: Value) {
        let response = self
            .client
            .post(format!("{}{path}", self.url))
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

    async fn revision(&self) -> i64 {
        let status: Value = self
            .client
            .get(format!("{}/v1/status", self.url))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("status")
            .json()
            .await
            .expect("status JSON");
        status["model"]["revision"]
            .as_i64()
            .expect("status has a revision")
    }

    async fn started(&self) -> usize {
        let text = self
            .client
            .get(format!("{}/metrics", self.url))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics text");
        text.lines()
            .find_map(|l| l.strip_prefix("berth_machines{state=\"started\"} "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map_or(0, |v| v as usize)
    }

    /// CPU seconds the process has spent, from `/proc/<pid>/stat`.
    fn cpu_seconds(&self) -> f64 {
        cpu_seconds(&self.child.id().to_string())
    }

    /// A figure from `/proc/<pid>/status` (`VmRSS`, `VmHWM`), in KiB.
    fn memory_kib(&self, field: &str) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| {
                v.trim_start_matches(':')
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
            .unwrap_or(0)
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// User and system CPU seconds of `/proc/<pid>` (`self` for this process).
fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command's closing parenthesis; utime and stime are
    // the 14th and 15th of the line, in clock ticks (100 a second).
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let ticks: f64 = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|n| n.parse::<f64>().ok())
        .sum();
    ticks / 100.0
}

/// Follows `/v1/events` from `since` until it has received `target`'s
/// revision (set once the deploy settles). Sends on `opened` once the
/// stream's headers arrive.
async fn follow(
    controller: (reqwest::Client, String, String),
    since: i64,
    take_gzip: bool,
    mut target: watch::Receiver<Option<i64>>,
    opened: Arc<AtomicUsize>,
) -> StreamSeen {
    let (client, url, token) = controller;
    let mut seen = StreamSeen::default();
    let mut request = client
        .get(format!("{url}/v1/events?since={since}"))
        .bearer_auth(&token);
    if !take_gzip {
        request = request.header(reqwest::header::ACCEPT_ENCODING, "identity");
    }
    let response = request.send().await;
    let mut response = match response {
        Ok(r) if r.status().is_success() => r,
        Ok(r) => {
            seen.error = Some(format!("refused: {}", r.status()));
            opened.fetch_add(1, Ordering::SeqCst);
            return seen;
        }
        Err(e) => {
            seen.error = Some(format!("cannot connect: {e}"));
            opened.fetch_add(1, Ordering::SeqCst);
            return seen;
        }
    };
    opened.fetch_add(1, Ordering::SeqCst);
    let mut previous = since;
    let mut carry: Vec<u8> = Vec::new();
    loop {
        if let Some(goal) = *target.borrow_and_update() {
            if previous >= goal {
                return seen;
            }
        }
        let chunk = tokio::select! {
            chunk = response.chunk() => chunk,
            changed = target.changed() => {
                if changed.is_err() {
                    seen.error = Some("the run ended first".into());
                    return seen;
                }
                continue;
            }
        };
        let chunk = match chunk {
            Ok(Some(chunk)) => chunk,
            Ok(None) => {
                seen.error = Some(format!("the stream ended after revision {previous}"));
                return seen;
            }
            Err(e) => {
                seen.error = Some(format!("read failed after revision {previous}: {e}"));
                return seen;
            }
        };
        seen.bytes += chunk.len();
        seen.chunks += 1;
        let mut rest: &[u8] = &chunk;
        if !carry.is_empty() {
            // Finish the line the previous chunk broke off.
            let Some(end) = memchr::memchr(b'\n', rest) else {
                carry.extend_from_slice(rest);
                continue;
            };
            carry.extend_from_slice(&rest[..end]);
            seen.count_id_line(&carry, &mut previous);
            carry.clear();
            rest = &rest[end + 1..];
        }
        // `rest` starts at a line's start; its whole lines end at its
        // last newline, and what follows waits for the next chunk.
        let Some(last_newline) = memchr::memrchr(b'\n', rest) else {
            carry.extend_from_slice(rest);
            continue;
        };
        let whole = &rest[..last_newline];
        carry.extend_from_slice(&rest[last_newline + 1..]);
        // Only `id:` lines matter, so search for them rather than
        // walking every line: the clients share the controller's cores.
        let line_at = |start: usize| {
            let end = memchr::memchr(b'\n', &whole[start..]).map_or(whole.len(), |e| start + e);
            &whole[start..end]
        };
        seen.count_id_line(line_at(0), &mut previous);
        for at in memchr::memmem::find_iter(whole, b"\nid: ") {
            seen.count_id_line(line_at(at + 1), &mut previous);
        }
    }
}

impl StreamSeen {
    /// Counts `line` if it is an event's `id:` line, noting a revision
    /// that does not follow `previous` by exactly one.
    fn count_id_line(&mut self, line: &[u8], previous: &mut i64) {
        let Some(id) = line.strip_prefix(b"id: ") else {
            return;
        };
        let revision: i64 = std::str::from_utf8(id)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(-1);
        if revision != *previous + 1 {
            self.breaks.push((*previous, revision));
        }
        self.first.get_or_insert(revision);
        self.last = Some(revision);
        self.events += 1;
        *previous = revision;
    }
}

/// An HTTP client for the controller. A connection idle for 2 s is not
/// used again: the controller closes idle keep-alive connections after
/// 5 s, and a reader whose task was starved that long would otherwise send
/// its next request on a connection the server is closing ("connection
/// closed before message completed"), as any HTTP client must avoid.
fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_idle_timeout(Duration::from_secs(2))
        .build()
        .expect("an HTTP client")
}

/// Runs `plan` against a fresh controller (the `berth` binary, data in
/// `dir`, which is emptied first), with the status readers and
/// event-stream clients on `clients` (their connections with them), and
/// the deploy's own requests (adding units, reading whether they settled)
/// on the runtime this runs on, with an HTTP client of their own: so that
/// clients given a lower priority (`cargo bench --bench load`) do not slow
/// the requests that drive the deploy and time it.
pub async fn run(
    berth: &Path,
    dir: &Path,
    plan: LoadPlan,
    clients: tokio::runtime::Handle,
) -> LoadReport {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("data dir");
    let controller = Controller::start(berth, dir).await;
    let revision_before = controller.revision().await;
    let rss_before_streams_kib = controller.memory_kib("VmRSS");

    let (target_tx, target_rx) = watch::channel(None);
    let opened = Arc::new(AtomicUsize::new(0));
    let load_client = http_client();
    let mut streams = Vec::new();
    for _ in 0..plan.streams {
        let parts = (
            load_client.clone(),
            controller.url.clone(),
            controller.token.clone(),
        );
        streams.push(clients.spawn(follow(
            parts,
            revision_before,
            plan.streams_take_gzip,
            target_rx.clone(),
            opened.clone(),
        )));
    }
    let deadline = Instant::now() + PATIENCE;
    while opened.load(Ordering::SeqCst) < plan.streams {
        assert!(Instant::now() < deadline, "the event streams did not open");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Let the streams' first frames and buffers settle before measuring.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rss_with_streams_kib = controller.memory_kib("VmRSS");

    let deploying = Arc::new(AtomicBool::new(true));
    let mut readers = Vec::new();
    for _ in 0..plan.status_readers {
        let client = load_client.clone();
        let url = format!("{}/v1/status", controller.url);
        let token = controller.token.clone();
        let deploying = deploying.clone();
        readers.push(clients.spawn(async move {
            let mut requests = 0;
            let mut failures = Vec::new();
            while deploying.load(Ordering::SeqCst) {
                requests += 1;
                let mut sent = client.get(&url).bearer_auth(&token).send().await;
                if sent.as_ref().is_err_and(is_closed_keep_alive) {
                    // The server closed the kept-alive connection as the
                    // request went out: a GET is sent again on a new one,
                    // as HTTP allows for idempotent requests (RFC 9112,
                    // 9.3.1). A second failure counts.
                    sent = client.get(&url).bearer_auth(&token).send().await;
                }
                match sent {
                    Ok(r) if r.status().is_success() => {
                        if let Err(e) = r.bytes().await {
                            failures.push(format!("body: {e}"));
                        }
                    }
                    Ok(r) => failures.push(format!("{}", r.status())),
                    // With its causes: "error sending request" alone
                    // does not say whether the connection was refused,
                    // reset or timed out.
                    Err(e) => failures.push(error_chain(&e)),
                }
            }
            (requests, failures)
        }));
    }

    let sampling = Arc::new(AtomicBool::new(true));
    let tcp_sampler = std::thread::spawn({
        let sampling = sampling.clone();
        move || {
            let mut peak = 0;
            while sampling.load(Ordering::SeqCst) {
                peak = peak.max(tcp_memory_kib());
                std::thread::sleep(Duration::from_millis(10));
            }
            peak
        }
    });
    let started = Instant::now();
    let controller_cpu_before = controller.cpu_seconds();
    let clients_cpu_before = cpu_seconds("self");
    let mut remaining = plan.units;
    let mut first = true;
    while remaining > 0 {
        let count = remaining.min(PER_REQUEST);
        if first {
            controller
                .post(
                    "/v1/applications",
                    json!({"charm": "wordpress", "num_units": count}),
                )
                .await;
            first = false;
        } else {
            controller
                .post(
                    "/v1/applications/wordpress/units",
                    json!({"num_units": count}),
                )
                .await;
        }
        remaining -= count;
    }
    while controller.started().await < plan.units {
        assert!(Instant::now() < deadline, "the deploy did not settle");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let settled = started.elapsed();
    let controller_cpu_s = controller.cpu_seconds() - controller_cpu_before;
    let clients_cpu_s = cpu_seconds("self") - clients_cpu_before;
    deploying.store(false, Ordering::SeqCst);

    let revision_after = controller.revision().await;
    let drain_started = Instant::now();
    target_tx.send_replace(Some(revision_after));
    let mut seen = Vec::new();
    for stream in streams {
        let account = tokio::time::timeout(PATIENCE, stream)
            .await
            .map(|joined| joined.expect("stream task"))
            .unwrap_or_else(|_| StreamSeen {
                error: Some("did not receive the last revision in time".into()),
                ..StreamSeen::default()
            });
        seen.push(account);
    }
    let streams_drained = drain_started.elapsed();
    sampling.store(false, Ordering::SeqCst);
    let peak_tcp_kib = tcp_sampler.join().expect("TCP memory sampler");
    let mut status_requests = 0;
    let mut status_failures = Vec::new();
    for reader in readers {
        let (requests, failures) = reader.await.expect("status reader");
        status_requests += requests;
        status_failures.extend(failures);
    }
    let peak_rss_kib = controller.memory_kib("VmHWM");
    drop(target_tx);
    LoadReport {
        plan,
        settled,
        revision_before,
        revision_after,
        status_requests,
        status_failures,
        streams: seen,
        streams_drained,
        rss_before_streams_kib,
        rss_with_streams_kib,
        peak_rss_kib,
        controller_cpu_s,
        clients_cpu_s,
        peak_tcp_kib,
    }
}

/// The memory the kernel holds for TCP now (`/proc/net/sockstat`'s
/// `TCP: ... mem`, in pages), in KiB; 0 if it cannot be read.
fn tcp_memory_kib() -> u64 {
    let pages: u64 = std::fs::read_to_string("/proc/net/sockstat")
        .unwrap_or_default()
        .lines()
        .find(|line| line.starts_with("TCP:"))
        .and_then(|line| {
            let mut words = line.split_whitespace();
            words.find(|w| *w == "mem")?;
            words.next()?.parse().ok()
        })
        .unwrap_or(0);
    // SAFETY: a plain query of a system constant.
    let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page_size).unwrap_or(4096) / 1024
}

/// Where the `berth` binary built with this test or benchmark is.
pub fn berth_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_berth"))
}

/// An error and each of its sources, joined by `: `.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Whether a request failed because the server closed the connection it
/// was sent on before answering (a kept-alive connection closing). The
/// close shows as an end of stream, or as a reset when the request's bytes
/// had already reached the server's socket: a controller whose worker was
/// starved past its keep-alive deadline closes the connection without
/// reading them, and the kernel answers them with a reset.
fn is_closed_keep_alive(error: &reqwest::Error) -> bool {
    let chain = error_chain(error);
    error.is_request()
        && chain.contains("SendRequest")
        && (chain.contains("connection closed before message completed")
            || chain.contains("Connection reset by peer"))
}

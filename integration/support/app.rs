//! The one way integration tests start berth: [`spawn_app`] with
//! [`Options`] gives a [`TestApp`] on a random loopback port with its own
//! data directory and database, and one method per API endpoint.
//!
//! The options choose:
//! - the store: SQLite in the data directory, or a fresh database on the
//!   test PostgreSQL server ([`Backend`]); or an existing [`Site`], to
//!   start again on what an earlier app left;
//! - the cloud: the simulated cloud with its settings, or a provider the
//!   test builds (EC2 against moto, or one that misbehaves) ([`Cloud`]);
//! - the engine: on, with its provisioner settings, or off, when a
//!   [`RecordingLink`] takes what the API would hand the engine and
//!   machines stay where the test puts them;
//! - how it runs ([`Launch`]): wired together here so the test can hold
//!   each part, through [`Application::build`] as `berth serve` starts, or
//!   as a real `berth serve` child process.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use actix_web::dev::ServerHandle;
use async_trait::async_trait;
use berth::api::webhooks::{sign, SIGNATURE_HEADER, TIMESTAMP_HEADER};
use berth::api::{server, ApiState, Limits, PricingSource, ProviderInfo};
use berth::app::{Application, ADMIN_TOKEN_FILE, SIM_LEDGER_FILE};
use berth::config::Config;
use berth::contracts::provider::{
    ControllerContact, ControllerLink, InstanceStateChange, Provider,
};
use berth::contracts::secrets::Secret;
use berth::domain::constraints::Key;
use berth::domain::names::MachineId;
use berth::engine::broker::RateLimits;
use berth::engine::config::ProvisionerConfig;
use berth::engine::Engine;
use berth::metrics::Metrics;
use berth::providers::manual::ManualConfig;
use berth::providers::sim::{SimConfig, SimProvider};
use berth::store::db::DatabaseUrl;
use berth::store::Store;
use reqwest::{Method, Response};
use serde_json::{json, Value};
use tokio::sync::{Notify, Semaphore};

use super::engine_steps;
use super::eventually::{eventually, PATIENCE};
use super::postgres;

/// The webhook secret apps start with unless the options say otherwise.
pub const WEBHOOK_SECRET: &str = "test-webhook-secret";

/// Which database the store is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// A file in the app's data directory.
    Sqlite,
    /// A fresh database on the test PostgreSQL server.
    Postgres,
}

/// Where an app keeps its state: a data directory (the simulated cloud's
/// ledger, token files, the SQLite file) and a database. Clones share it,
/// so a second app can start on what the first left.
#[derive(Clone)]
pub struct Site {
    dir: Arc<tempfile::TempDir>,
    database: DatabaseUrl,
}

impl Site {
    /// A new, empty site on `backend`.
    pub fn new(backend: Backend) -> Site {
        let dir = tempfile::tempdir().expect("temporary directory");
        let database = match backend {
            Backend::Sqlite => DatabaseUrl::Sqlite(dir.path().join("berth.db")),
            Backend::Postgres => {
                DatabaseUrl::parse(&postgres::fresh_database()).expect("postgres url")
            }
        };
        Site {
            dir: Arc::new(dir),
            database,
        }
    }

    /// A new site whose store is `database` (a server the test runs).
    pub fn on(database: DatabaseUrl) -> Site {
        Site {
            dir: Arc::new(tempfile::tempdir().expect("temporary directory")),
            database,
        }
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn database(&self) -> &DatabaseUrl {
        &self.database
    }

    /// Opens the site's store.
    pub fn open_store(&self) -> Store {
        Store::open(&self.database).expect("open store")
    }

    /// Opens the simulated cloud on the site's ledger, where `berth serve`
    /// keeps it: in the data directory with SQLite, in the database with
    /// PostgreSQL.
    pub fn open_sim(&self, config: SimConfig) -> Arc<SimProvider> {
        let sim = match &self.database {
            DatabaseUrl::Sqlite(_) => {
                SimProvider::open(config, Some(self.dir().join(SIM_LEDGER_FILE)))
            }
            DatabaseUrl::Postgres(url) => SimProvider::open_shared(config, url),
        };
        Arc::new(sim.expect("open sim"))
    }
}

/// The cloud the engine provisions from.
pub enum Cloud {
    /// The simulated cloud with these settings, its ledger in the site.
    Sim(SimConfig),
    /// A provider the test built, called within `limits`.
    Given {
        provider: Arc<dyn Provider>,
        limits: RateLimits,
    },
}

/// How the app runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launch {
    /// Store, provider, engine and API wired together here, in this
    /// process, so that the test can hold each part.
    Parts,
    /// [`Application::build`], the start-up `berth serve` runs, in this
    /// process; the simulated cloud only.
    Application,
    /// A `berth serve` child process with its default provider and
    /// provisioner settings. It keeps its store to itself.
    Process,
}

/// What a test may choose about the app it starts.
pub struct Options {
    pub backend: Backend,
    /// Start on this site instead of a new one of `backend`.
    pub site: Option<Site>,
    pub cloud: Cloud,
    /// The engine's settings, or `None` for no engine (with
    /// [`Launch::Parts`] only; the other launches always run one).
    pub engine: Option<ProvisionerConfig>,
    pub launch: Launch,
    pub limits: Limits,
    pub webhook_secret: Option<&'static str>,
    /// Holds each change the API forwards (with no engine) until the test
    /// releases it, so that a request can be kept in flight.
    pub gated_link: bool,
    /// How the engine reaches hosts enlisted over SSH.
    pub manual: ManualConfig,
    /// The URL the engine gives new instances' agents; by default the
    /// app's own loopback address. A cloud provider refuses to launch with
    /// a loopback URL, so tests of one name a host that is never
    /// contacted, such as `controller.invalid`.
    pub controller_url: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            backend: Backend::Sqlite,
            site: None,
            cloud: Cloud::Sim(SimConfig::default()),
            engine: None,
            launch: Launch::Parts,
            limits: Limits::default(),
            webhook_secret: Some(WEBHOOK_SECRET),
            gated_link: false,
            manual: ManualConfig::default(),
            controller_url: None,
        }
    }
}

impl Options {
    /// The engine with `config` over the simulated cloud with `sim`, on
    /// `backend`.
    pub fn engine(backend: Backend, sim: SimConfig, config: ProvisionerConfig) -> Options {
        Options {
            backend,
            cloud: Cloud::Sim(sim),
            engine: Some(config),
            ..Options::default()
        }
    }
}

/// Holds a forwarded change until the test lets it go.
pub struct Gate {
    pub entered: Notify,
    pub release: Semaphore,
}

/// The engine's side of the link when no engine runs: it records every
/// instance change the API forwards.
#[derive(Default)]
pub struct RecordingLink {
    changes: Mutex<Vec<InstanceStateChange>>,
    pub gate: Option<Gate>,
}

#[async_trait]
impl ControllerLink for RecordingLink {
    async fn instance_changed(&self, change: InstanceStateChange) {
        self.changes.lock().unwrap().push(change);
        if let Some(gate) = &self.gate {
            gate.entered.notify_one();
            let _ = gate.release.acquire().await.unwrap();
        }
    }

    async fn agent_connect(&self, _machine: MachineId, _otp: Secret) -> Result<(), String> {
        Ok(())
    }
}

impl RecordingLink {
    pub fn changes(&self) -> Vec<InstanceStateChange> {
        self.changes.lock().unwrap().clone()
    }
}

/// What keeps the app running, stopped when the [`TestApp`] is dropped.
enum Running {
    Server(ServerHandle),
    Task(tokio::task::JoinHandle<()>),
    Process(Child),
}

/// A running app and what a test needs to reach and inspect it.
pub struct TestApp {
    /// `http://127.0.0.1:<port>`.
    pub address: String,
    pub client: reqwest::Client,
    /// The admin token.
    pub token: String,
    pub site: Site,
    /// Absent for a `berth serve` process; see [`TestApp::store`].
    store: Option<Store>,
    pub engine: Option<Engine>,
    /// The simulated cloud, when the app runs one and the test may hold it.
    pub sim: Option<Arc<SimProvider>>,
    /// What the API forwarded, when no engine runs.
    pub link: Arc<RecordingLink>,
    /// The metrics the API renders, with [`Launch::Parts`].
    pub metrics: Arc<Metrics>,
    running: Running,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        match &mut self.running {
            Running::Server(handle) => drop(handle.stop(false)),
            Running::Task(task) => task.abort(),
            Running::Process(child) => {
                let _ = Command::new("kill")
                    .args(["-TERM", &child.id().to_string()])
                    .status();
                let _ = child.wait();
            }
        }
    }
}

/// Starts an app with the default [`Options`]: the API over a fresh SQLite
/// store, without an engine.
pub async fn spawn_app() -> TestApp {
    spawn_app_with(Options::default()).await
}

/// Starts an app as `options` say. Engines run on actix's system, so a test
/// that starts one runs under `#[actix_web::test]`.
pub async fn spawn_app_with(options: Options) -> TestApp {
    let site = options
        .site
        .clone()
        .unwrap_or_else(|| Site::new(options.backend));
    match options.launch {
        Launch::Parts => assemble(options, site).await,
        Launch::Application => application(options, site).await,
        Launch::Process => {
            assert!(
                matches!(&options.cloud, Cloud::Sim(sim) if *sim == SimConfig::default())
                    && options.engine.is_none()
                    && !options.gated_link,
                "a berth serve process runs with its default provider and provisioner settings"
            );
            process(site).await
        }
    }
}

/// What an API without an engine says of its provider: the simulated
/// cloud's name and constraints.
fn sim_info() -> ProviderInfo {
    ProviderInfo {
        name: "sim".to_string(),
        supported_constraints: vec![
            Key::Arch,
            Key::Mem,
            Key::Cores,
            Key::RootDisk,
            Key::InstanceType,
            Key::Zones,
        ],
        supports_containers: true,
        ssh_refused: None,
    }
}

async fn assemble(options: Options, site: Site) -> TestApp {
    let store = site.open_store();
    let token = store.rotate_admin_token().await.expect("admin token");
    let link = Arc::new(RecordingLink {
        changes: Mutex::new(Vec::new()),
        gate: options.gated_link.then(|| Gate {
            entered: Notify::new(),
            release: Semaphore::new(0),
        }),
    });
    let metrics = Arc::new(Metrics::new());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("local address").port();
    let address = format!("http://127.0.0.1:{port}");
    let (engine, sim, api_link, provider, pricing) = match options.engine {
        None => {
            // The simulated cloud's faults can be set without an engine:
            // an in-memory cloud nothing launches on.
            let (provider, sim, cloud): (_, _, Arc<dyn Provider>) = match &options.cloud {
                Cloud::Sim(config) => {
                    let sim = Arc::new(SimProvider::open(config.clone(), None).expect("open sim"));
                    (sim_info(), Some(sim.clone()), sim)
                }
                Cloud::Given { provider, .. } => (
                    ProviderInfo::of(provider.as_ref(), &address),
                    None,
                    provider.clone(),
                ),
            };
            let pricing = PricingSource {
                provider: cloud,
                price_ceiling: ProvisionerConfig::default().price_ceiling(),
            };
            (
                None,
                sim,
                link.clone() as Arc<dyn ControllerLink>,
                provider,
                pricing,
            )
        }
        Some(config) => {
            let (provider, sim, limits): (Arc<dyn Provider>, _, _) = match options.cloud {
                Cloud::Sim(sim_config) => {
                    let sim = site.open_sim(sim_config);
                    (sim.clone(), Some(sim), RateLimits::default())
                }
                Cloud::Given { provider, limits } => (provider, None, limits),
            };
            let controller_url = options
                .controller_url
                .clone()
                .unwrap_or_else(|| address.clone());
            let info = ProviderInfo::of(provider.as_ref(), &controller_url);
            let engine = Engine::start(
                store.clone(),
                provider.clone(),
                &config,
                limits,
                ControllerContact::at(controller_url),
                metrics.clone(),
                &options.manual,
            )
            .expect("start engine");
            let link = engine.link();
            let pricing = PricingSource {
                provider: provider.clone(),
                price_ceiling: config.price_ceiling(),
            };
            (Some(engine), sim, link, info, pricing)
        }
    };
    let state = ApiState {
        store: store.clone(),
        link: api_link,
        provider,
        metrics: metrics.clone(),
        webhook_secret: options.webhook_secret.map(Secret::new),
        limits: options.limits,
        sim: sim.clone(),
        pricing: Some(pricing),
    };
    let server = server(listener, state).expect("server");
    let handle = server.handle();
    tokio::spawn(server);
    TestApp {
        address,
        client: reqwest::Client::new(),
        token: token.expose().to_string(),
        site,
        store: Some(store),
        engine,
        sim,
        link,
        metrics,
        running: Running::Server(handle),
    }
}

/// The configuration [`Launch::Application`] starts with: a random port,
/// the site's directory and database.
pub fn config_for(site: &Site) -> Config {
    Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: Some(site.dir().to_path_buf()),
        database_url: Some(site.database().to_string()),
        ..Config::default()
    }
}

async fn application(options: Options, site: Site) -> TestApp {
    assert!(
        !options.gated_link,
        "an Application forwards to its own engine: there is no link to hold"
    );
    let mut config = config_for(&site);
    match options.cloud {
        Cloud::Sim(sim) => config.provider.sim = sim,
        Cloud::Given { .. } => panic!("an Application opens its provider from its configuration"),
    }
    if let Some(provisioner) = options.engine {
        config.provisioner = provisioner;
    }
    config.webhook_secret = options.webhook_secret.map(str::to_string);
    config.manual = options.manual;
    let app = Application::build(config).await.expect("controller starts");
    let port = app.port();
    let store = app.store().clone();
    let engine = app.engine().clone();
    let task = actix_web::rt::spawn(async move {
        let _ = app.run_until_stopped().await;
    });
    TestApp {
        address: format!("http://127.0.0.1:{port}"),
        client: reqwest::Client::new(),
        token: read_token(&site),
        site,
        store: Some(store),
        engine: Some(engine),
        sim: None,
        link: Arc::default(),
        metrics: Arc::new(Metrics::new()),
        running: Running::Task(task),
    }
}

fn read_token(site: &Site) -> String {
    std::fs::read_to_string(site.dir().join(ADMIN_TOKEN_FILE))
        .expect("admin token file")
        .trim()
        .to_string()
}

/// The `berth` binary.
pub fn berth_command() -> Command {
    Command::new(env!("CARGO_BIN_EXE_berth"))
}

/// A loopback port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Runs `command`, which must exit by itself (a start that is refused):
/// killed, and the test failed, if it is still running after 30 s.
pub fn refused_start(mut command: Command) -> Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("berth starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("berth serve started instead of refusing its configuration");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

async fn process(site: Site) -> TestApp {
    let port = free_port();
    let child = Mutex::new(
        berth_command()
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .arg("--data-dir")
            .arg(site.dir())
            .arg("--database-url")
            .arg(site.database().to_string())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("berth serve starts"),
    );
    let address = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    eventually("berth serve to answer", PATIENCE, || async {
        if let Ok(Some(exit)) = child.lock().unwrap().try_wait() {
            panic!("berth serve exited ({exit}) before it answered");
        }
        match client.get(format!("{address}/healthz")).send().await {
            Ok(r) if r.status().is_success() => Ok(()),
            other => Err(other.map(|r| r.status())),
        }
    })
    .await;
    TestApp {
        address,
        client,
        token: read_token(&site),
        site,
        store: None,
        engine: None,
        sim: None,
        link: Arc::default(),
        metrics: Arc::new(Metrics::new()),
        running: Running::Process(child.into_inner().unwrap()),
    }
}

/// Seconds since the epoch, as webhook timestamps are.
pub fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

impl TestApp {
    /// The app's store.
    ///
    /// # Panics
    ///
    /// For a `berth serve` process, which keeps its store to itself.
    pub fn store(&self) -> &Store {
        self.store
            .as_ref()
            .expect("a berth serve process keeps its store to itself")
    }

    /// The engine.
    ///
    /// # Panics
    ///
    /// When the app runs none.
    pub fn engine(&self) -> &Engine {
        self.engine.as_ref().expect("an app with an engine")
    }

    /// The simulated cloud.
    ///
    /// # Panics
    ///
    /// When the app does not run one the test may hold.
    pub fn sim(&self) -> &SimProvider {
        self.sim.as_ref().expect("an app on the simulated cloud")
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.address)
    }

    /// A request with the admin token.
    pub fn admin(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.client
            .request(method, self.url(path))
            .bearer_auth(&self.token)
    }

    pub async fn send(&self, method: Method, path: &str, body: Option<&Value>) -> Response {
        let mut request = self.admin(method, path);
        if let Some(body) = body {
            request = request.json(body);
        }
        request.send().await.unwrap()
    }

    /// A request with the admin token and a raw body.
    pub async fn send_raw(&self, method: Method, path: &str, body: impl Into<String>) -> Response {
        self.admin(method, path)
            .header("Content-Type", "application/json")
            .body(body.into())
            .send()
            .await
            .unwrap()
    }

    pub async fn healthz(&self) -> Response {
        self.client.get(self.url("/healthz")).send().await.unwrap()
    }

    pub async fn metrics(&self) -> Response {
        self.send(Method::GET, "/metrics", None).await
    }

    pub async fn status(&self) -> Response {
        self.send(Method::GET, "/v1/status", None).await
    }

    /// The status document as JSON.
    pub async fn status_json(&self) -> Value {
        self.status().await.json().await.unwrap()
    }

    pub async fn openapi(&self) -> Response {
        self.send(Method::GET, "/v1/openapi.json", None).await
    }

    /// Opens the event stream.
    pub async fn events(&self, since: Option<i64>, last_event_id: Option<&str>) -> Response {
        let path = match since {
            Some(n) => format!("/v1/events?since={n}"),
            None => "/v1/events".to_string(),
        };
        let mut request = self.admin(Method::GET, &path);
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id);
        }
        request.send().await.unwrap()
    }

    pub async fn deploy(&self, body: &Value) -> Response {
        self.send(Method::POST, "/v1/applications", Some(body))
            .await
    }

    pub async fn add_units(&self, app: &str, body: &Value) -> Response {
        self.send(
            Method::POST,
            &format!("/v1/applications/{app}/units"),
            Some(body),
        )
        .await
    }

    pub async fn remove_units(&self, body: &Value) -> Response {
        self.send(Method::POST, "/v1/units/remove", Some(body))
            .await
    }

    pub async fn remove_application(&self, app: &str) -> Response {
        self.send(Method::DELETE, &format!("/v1/applications/{app}"), None)
            .await
    }

    pub async fn application_constraints(&self, app: &str) -> Response {
        self.send(
            Method::GET,
            &format!("/v1/applications/{app}/constraints"),
            None,
        )
        .await
    }

    pub async fn set_application_constraints(&self, app: &str, constraints: &str) -> Response {
        self.send(
            Method::PUT,
            &format!("/v1/applications/{app}/constraints"),
            Some(&json!({ "constraints": constraints })),
        )
        .await
    }

    pub async fn model_constraints(&self) -> Response {
        self.send(Method::GET, "/v1/model/constraints", None).await
    }

    pub async fn set_model_constraints(&self, constraints: &str) -> Response {
        self.send(
            Method::PUT,
            "/v1/model/constraints",
            Some(&json!({ "constraints": constraints })),
        )
        .await
    }

    pub async fn add_machines(&self, body: &Value) -> Response {
        self.send(Method::POST, "/v1/machines", Some(body)).await
    }

    pub async fn remove_machine(&self, id: &str, force: bool) -> Response {
        let query = if force { "?force=true" } else { "" };
        self.send(Method::DELETE, &format!("/v1/machines/{id}{query}"), None)
            .await
    }

    pub async fn retry(&self, body: &Value) -> Response {
        self.send(Method::POST, "/v1/machines/retry", Some(body))
            .await
    }

    pub async fn integrate(&self, a: &str, b: &str) -> Response {
        self.send(
            Method::POST,
            "/v1/relations",
            Some(&json!({ "endpoints": [a, b] })),
        )
        .await
    }

    pub async fn remove_relation(&self, a: &str, b: &str) -> Response {
        self.send(
            Method::POST,
            "/v1/relations/remove",
            Some(&json!({ "endpoints": [a, b] })),
        )
        .await
    }

    pub async fn zones(&self) -> Response {
        self.send(Method::GET, "/v1/zones", None).await
    }

    pub async fn enable_zone(&self, zone: &str) -> Response {
        self.send(Method::POST, &format!("/v1/zones/{zone}/enable"), None)
            .await
    }

    pub async fn disable_zone(&self, zone: &str) -> Response {
        self.send(Method::POST, &format!("/v1/zones/{zone}/disable"), None)
            .await
    }

    pub async fn faults(&self) -> Response {
        self.send(Method::GET, "/v1/sim/faults", None).await
    }

    pub async fn set_faults(&self, faults: &Value) -> Response {
        self.send(Method::PUT, "/v1/sim/faults", Some(faults)).await
    }

    pub async fn clear_faults(&self) -> Response {
        self.send(Method::DELETE, "/v1/sim/faults", None).await
    }

    pub async fn agent_connect(&self, machine: &str, password: &str) -> Response {
        self.client
            .post(self.url(&format!("/v1/agents/{machine}/connect")))
            .json(&json!({ "password": password }))
            .send()
            .await
            .unwrap()
    }

    pub async fn agent_heartbeat(&self, machine: &str, credential: &str) -> Response {
        self.client
            .post(self.url(&format!("/v1/agents/{machine}/heartbeat")))
            .bearer_auth(credential)
            .send()
            .await
            .unwrap()
    }

    /// A webhook delivery with the given headers (none when `None`).
    pub async fn webhook(
        &self,
        provider: &str,
        body: &str,
        timestamp: Option<&str>,
        signature: Option<&str>,
    ) -> Response {
        let mut request = self
            .client
            .post(self.url(&format!("/v1/webhooks/{provider}")))
            .header("Content-Type", "application/json")
            .body(body.to_string());
        if let Some(t) = timestamp {
            request = request.header(TIMESTAMP_HEADER, t);
        }
        if let Some(s) = signature {
            request = request.header(SIGNATURE_HEADER, s);
        }
        request.send().await.unwrap()
    }

    /// A webhook delivery signed with [`WEBHOOK_SECRET`] at `timestamp`.
    pub async fn signed_webhook_at(&self, provider: &str, body: &str, timestamp: i64) -> Response {
        let signature = sign(WEBHOOK_SECRET, timestamp, body.as_bytes());
        self.webhook(
            provider,
            body,
            Some(&timestamp.to_string()),
            Some(&signature),
        )
        .await
    }

    pub async fn signed_webhook(&self, provider: &str, body: &str) -> Response {
        self.signed_webhook_at(provider, body, now_secs()).await
    }

    /// Puts a machine into provisioning error, as the engine would.
    pub async fn fail_provisioning(&self, id: &str, message: &str) {
        let id: MachineId = id.parse().expect("machine id");
        engine_steps::fail_provisioning(self.store(), id, message).await;
    }

    /// Records a launched instance for machine `id` in zone `sim-a`, as the
    /// engine would, and returns the one-time password its agent was given.
    pub async fn launch(&self, id: &str) -> Secret {
        let id: MachineId = id.parse().expect("machine id");
        let instance = format!("i-{}", id.host_number());
        engine_steps::instance_started(self.store(), id, &instance, "sim-a").await
    }
}

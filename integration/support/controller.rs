//! A controller for tests that drive the API from outside, synchronously
//! (the command line): the HTTP server on a random port over a fresh SQLite
//! store, running on a runtime of its own so that the test's thread may
//! block on requests. There is no engine: machines stay where the test
//! puts them ([`TestController::fail_provisioning`],
//! [`TestController::launch`]).

use std::net::TcpListener;
use std::sync::Arc;

use async_trait::async_trait;
use berth::api::{server, ApiState, Limits, ProviderInfo};
use berth::contracts::provider::{ControllerLink, InstanceStateChange};
use berth::contracts::secrets::Secret;
use berth::domain::constraints::Key;
use berth::domain::names::MachineId;
use berth::metrics::Metrics;
use berth::store::Store;

use crate::support::{engine_steps, sqlite_store};

/// The engine's side of the link, absent: every change is dropped.
struct NoEngine;

#[async_trait]
impl ControllerLink for NoEngine {
    async fn instance_changed(&self, _change: InstanceStateChange) {}

    async fn agent_connect(&self, _machine: MachineId, _otp: Secret) -> Result<(), String> {
        Ok(())
    }
}

/// A running API and what a test needs to reach and inspect it.
pub struct TestController {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    pub token: String,
    pub store: Store,
    /// Runs the server; dropped (and the server with it) at the test's end.
    pub runtime: tokio::runtime::Runtime,
    _dir: tempfile::TempDir,
}

/// Starts a controller whose provider is `sim` (it supports arch, mem,
/// cores, root-disk, instance-type and zones, and warns of the rest).
pub fn start_controller() -> TestController {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (store, dir) = sqlite_store();
    let token = runtime
        .block_on(store.rotate_admin_token())
        .expect("admin token");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("local address").port();
    let state = ApiState {
        store: store.clone(),
        link: Arc::new(NoEngine),
        provider: ProviderInfo {
            name: "sim".to_string(),
            supported_constraints: vec![
                Key::Arch,
                Key::Mem,
                Key::Cores,
                Key::RootDisk,
                Key::InstanceType,
                Key::Zones,
            ],
        },
        metrics: Arc::new(Metrics::new()),
        webhook_secret: None,
        limits: Limits::default(),
    };
    let server = runtime
        .block_on(async { server(listener, state) })
        .expect("server");
    runtime.spawn(server);
    TestController {
        url: format!("http://127.0.0.1:{port}"),
        token: token.expose().to_string(),
        store,
        runtime,
        _dir: dir,
    }
}

impl TestController {
    /// Puts a machine into provisioning error, as the engine would.
    pub fn fail_provisioning(&self, id: &str, message: &str) {
        let id: MachineId = id.parse().expect("machine id");
        self.runtime
            .block_on(engine_steps::fail_provisioning(&self.store, id, message));
    }

    /// Launches a machine's instance in zone `sim-a`, as the engine would,
    /// and returns the one-time password its agent was given.
    pub fn launch(&self, id: &str) -> Secret {
        self.runtime.block_on(launch_as_the_engine(&self.store, id))
    }
}

/// Records a launched instance for machine `id` in zone `sim-a`, as the
/// engine would, and returns the one-time password its agent was given.
pub async fn launch_as_the_engine(store: &Store, id: &str) -> Secret {
    let id: MachineId = id.parse().expect("machine id");
    let instance = format!("i-{}", id.host_number());
    engine_steps::instance_started(store, id, &instance, "sim-a").await
}

//! [`spawn_app`] for tests that drive the API from outside, synchronously
//! (the command line): the app runs on a runtime of its own, so that the
//! test's thread may block on requests. There is no engine: machines stay
//! where the test puts them ([`TestController::fail_provisioning`],
//! [`TestController::launch`]).

use std::ops::Deref;

use berth::contracts::secrets::Secret;

use super::app::{spawn_app, TestApp};

/// A running app and the runtime it runs on.
pub struct TestController {
    /// Dropped (and the server stopped) before the runtime.
    app: Option<TestApp>,
    pub runtime: tokio::runtime::Runtime,
}

impl Deref for TestController {
    type Target = TestApp;

    fn deref(&self) -> &TestApp {
        self.app.as_ref().expect("a running app")
    }
}

impl Drop for TestController {
    fn drop(&mut self) {
        let _guard = self.runtime.enter();
        self.app.take();
    }
}

/// Starts an app with the default options (see [`spawn_app`]): the API of
/// the simulated cloud (it supports arch, mem, cores, root-disk,
/// instance-type and zones, and warns of the rest) over a fresh SQLite
/// store, without an engine.
pub fn start_controller() -> TestController {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let app = runtime.block_on(spawn_app());
    TestController {
        app: Some(app),
        runtime,
    }
}

impl TestController {
    /// Puts a machine into provisioning error, as the engine would.
    pub fn fail_provisioning(&self, id: &str, message: &str) {
        self.runtime
            .block_on(self.deref().fail_provisioning(id, message));
    }

    /// Launches a machine's instance in zone `sim-a`, as the engine would,
    /// and returns the one-time password its agent was given.
    pub fn launch(&self, id: &str) -> Secret {
        self.runtime.block_on(self.deref().launch(id))
    }
}

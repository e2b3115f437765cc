//! A headless Chromium for the dashboard's tests, driven over the W3C
//! WebDriver protocol: [`Browser::start`] runs `chromedriver` on a free
//! loopback port, opens a session with a fresh profile, and the methods
//! send the protocol's JSON commands (navigate, find elements by CSS,
//! click, type, run a script, take a screenshot).
//!
//! Chromium comes from the machine's packages (`chromium` and
//! `chromium-driver`, which `integration/run.sh` installs); set
//! `BERTH_CHROMEDRIVER` to use another driver, `BERTH_CHROMIUM` another
//! browser. Without one the tests fail saying so, unless
//! `BERTH_SKIP_BROWSER_TESTS=1` asks to skip them.
//!
//! The browser talks to loopback only: it runs with background
//! networking, component updates, sync and QUIC off, no proxy, and a host
//! resolver that resolves nothing but loopback, so nothing it does
//! leaves the machine.
//!
//! Dropping a [`Browser`] stops the driver and the browser it started (the
//! driver runs in a process group of its own, which the browser joins).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use base64::Engine as _;
use reqwest::Method;
use serde_json::{json, Value};

use super::eventually::{eventually, PATIENCE};

/// The driver's name for an element reference in its JSON.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// The window the tests see the page in.
pub const WINDOW: (u32, u32) = (1280, 800);

/// Where the machine's packages put the driver.
const DEFAULT_CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// An element the driver found, by its reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Element(String);

/// A WebDriver command the driver answered with an error.
#[derive(Debug)]
pub struct DriverError {
    /// The protocol's error code: `no such element`, `javascript error`...
    pub error: String,
    pub message: String,
}

impl std::fmt::Display for DriverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.error, self.message)
    }
}

/// A running chromedriver with one session open.
pub struct Browser {
    driver: Child,
    /// `http://127.0.0.1:<port>/session/<id>`.
    session: String,
    client: reqwest::Client,
    /// The browser's profile, a new one for each browser.
    _profile: tempfile::TempDir,
}

/// Where the driver is: `BERTH_CHROMEDRIVER`, the packages' path, or
/// `chromedriver` on the `PATH`.
fn chromedriver() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("BERTH_CHROMEDRIVER") {
        return Some(PathBuf::from(path));
    }
    if Path::new(DEFAULT_CHROMEDRIVER).exists() {
        return Some(PathBuf::from(DEFAULT_CHROMEDRIVER));
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("chromedriver"))
            .find(|candidate| candidate.is_file())
    })
}

/// The arguments Chromium runs with: headless, sandboxless (tests may run
/// as root), the window the tests expect, a profile of its own, and no
/// traffic beyond loopback.
fn chromium_args(profile: &Path) -> Vec<String> {
    let (width, height) = WINDOW;
    vec![
        "--headless=new".into(),
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--disable-quic".into(),
        "--no-first-run".into(),
        "--disable-background-networking".into(),
        "--disable-component-update".into(),
        "--disable-sync".into(),
        format!("--window-size={width},{height}"),
        format!("--user-data-dir={}", profile.display()),
        "--disable-dev-shm-usage".into(),
        "--disable-extensions".into(),
        "--disable-default-apps".into(),
        "--no-default-browser-check".into(),
        "--no-pings".into(),
        "--disable-domain-reliability".into(),
        "--disable-client-side-phishing-detection".into(),
        "--no-proxy-server".into(),
        // Nothing resolves but loopback: whatever else the browser might
        // try to reach fails at once instead of leaving the machine.
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1".into(),
    ]
}

impl Browser {
    /// Starts a browser, or `None` when the browser tests are skipped on
    /// purpose (`BERTH_SKIP_BROWSER_TESTS=1`).
    ///
    /// # Panics
    ///
    /// When no chromedriver is installed (and the tests are not skipped),
    /// or it does not start or open a session.
    pub async fn start() -> Option<Browser> {
        if std::env::var("BERTH_SKIP_BROWSER_TESTS").as_deref() == Ok("1") {
            eprintln!("BERTH_SKIP_BROWSER_TESTS=1: skipping a browser test");
            return None;
        }
        let Some(driver_path) = chromedriver() else {
            panic!(
                "the dashboard's tests need headless Chromium and its WebDriver: \
                 install the Debian packages chromium and chromium-driver \
                 (`bash integration/run.sh` does, as root), or set BERTH_CHROMEDRIVER \
                 to a chromedriver; BERTH_SKIP_BROWSER_TESTS=1 skips these tests"
            );
        };
        let profile = tempfile::tempdir().expect("a profile directory");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let log = profile.path().join("chromedriver.log");
        let mut command = Command::new(&driver_path);
        command
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // Its own process group, which the browser it starts joins, so that
        // both are stopped together.
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let driver =
            Mutex::new(command.spawn().unwrap_or_else(|e| {
                panic!("cannot run chromedriver {}: {e}", driver_path.display())
            }));
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("an HTTP client");
        let base = format!("http://127.0.0.1:{port}");
        let status_url = format!("{base}/status");
        eventually("chromedriver to answer", PATIENCE, || async {
            if let Ok(Some(exit)) = driver.lock().unwrap().try_wait() {
                panic!(
                    "chromedriver exited ({exit}) before it answered; its log:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            let ready = match client.get(&status_url).send().await {
                Ok(response) => response.json::<Value>().await.ok(),
                Err(_) => None,
            };
            match ready {
                Some(status) if status["value"]["ready"] == true => Ok(()),
                other => Err(other),
            }
        })
        .await;
        let mut browser = Browser {
            driver: driver.into_inner().unwrap(),
            session: String::new(),
            client,
            _profile: profile,
        };
        let mut options = json!({ "args": chromium_args(browser._profile.path()) });
        if let Some(binary) = std::env::var_os("BERTH_CHROMIUM") {
            options["binary"] = json!(binary.to_string_lossy());
        }
        let capabilities = json!({
            "capabilities": {
                "alwaysMatch": {
                    "goog:chromeOptions": options,
                    "pageLoadStrategy": "normal",
                    "timeouts": { "implicit": 0, "pageLoad": 30_000, "script": 30_000 },
                }
            }
        });
        let answer = browser
            .send(Method::POST, &format!("{base}/session"), Some(capabilities))
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "chromedriver cannot start Chromium: {e}; its log:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            });
        let id = answer["sessionId"]
            .as_str()
            .expect("a session id")
            .to_string();
        browser.session = format!("{base}/session/{id}");
        Some(browser)
    }

    /// Sends one command; answers its `value`.
    async fn send(
        &self,
        method: Method,
        url: &str,
        body: Option<Value>,
    ) -> Result<Value, DriverError> {
        let mut request = self.client.request(method.clone(), url);
        if let Some(body) = body {
            request = request.json(&body);
        } else if method == Method::POST {
            request = request.json(&json!({}));
        }
        let response = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("chromedriver did not answer {url}: {e}"));
        let ok = response.status().is_success();
        let body: Value = response
            .json()
            .await
            .unwrap_or_else(|e| panic!("chromedriver's answer to {url} is not JSON: {e}"));
        let value = body["value"].clone();
        if ok {
            Ok(value)
        } else {
            Err(DriverError {
                error: value["error"].as_str().unwrap_or_default().to_string(),
                message: value["message"].as_str().unwrap_or_default().to_string(),
            })
        }
    }

    /// A command on the session, `path` relative to it.
    async fn command(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, DriverError> {
        let url = format!("{}{path}", self.session);
        self.send(method, &url, body).await
    }

    /// Like [`Browser::command`], for a command that must succeed.
    async fn must(&self, method: Method, path: &str, body: Option<Value>) -> Value {
        match self.command(method.clone(), path, body).await {
            Ok(value) => value,
            Err(e) => panic!("WebDriver {method} {path} failed: {e}"),
        }
    }

    /// Loads `url` and waits for the page to load.
    pub async fn goto(&self, url: &str) {
        self.must(Method::POST, "/url", Some(json!({ "url": url })))
            .await;
    }

    /// The address the browser shows.
    pub async fn current_url(&self) -> String {
        self.must(Method::GET, "/url", None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    fn element_of(value: &Value) -> Element {
        Element(
            value[ELEMENT_KEY]
                .as_str()
                .expect("an element reference")
                .to_string(),
        )
    }

    /// The first element `css` selects, or `None`.
    pub async fn find(&self, css: &str) -> Option<Element> {
        let query = json!({ "using": "css selector", "value": css });
        match self.command(Method::POST, "/element", Some(query)).await {
            Ok(value) => Some(Self::element_of(&value)),
            Err(e) if e.error == "no such element" => None,
            Err(e) => panic!("finding {css:?} failed: {e}"),
        }
    }

    /// The first element `css` selects, which must be there.
    pub async fn get(&self, css: &str) -> Element {
        self.find(css)
            .await
            .unwrap_or_else(|| panic!("no element matches {css:?}"))
    }

    /// Clicks `element` as a user would (it must be visible and enabled).
    pub async fn click(&self, element: &Element) {
        self.must(Method::POST, &format!("/element/{}/click", element.0), None)
            .await;
    }

    /// Types `text` into `element`; [`ENTER`] presses Enter.
    pub async fn send_keys(&self, element: &Element, text: &str) {
        self.must(
            Method::POST,
            &format!("/element/{}/value", element.0),
            Some(json!({ "text": text })),
        )
        .await;
    }

    /// The element's text as rendered.
    pub async fn text(&self, element: &Element) -> String {
        self.must(Method::GET, &format!("/element/{}/text", element.0), None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Runs `script` (a function body; `arguments` holds `args`) in the
    /// page and answers what it returns.
    pub async fn execute(&self, script: &str, args: Vec<Value>) -> Value {
        match self
            .command(
                Method::POST,
                "/execute/sync",
                Some(json!({ "script": script, "args": args })),
            )
            .await
        {
            Ok(value) => value,
            Err(e) => panic!("script failed: {e}\n{script}"),
        }
    }

    /// Runs `script` until it returns something other than `null` or
    /// `false`, and answers that; gives up after [`PATIENCE`].
    pub async fn wait_for(&self, what: &str, script: &str, args: Vec<Value>) -> Value {
        eventually(what, PATIENCE, || async {
            let value = self.execute(script, args.clone()).await;
            if value.is_null() || value == Value::Bool(false) {
                Err(self.execute(LAST_SEEN, vec![]).await)
            } else {
                Ok(value)
            }
        })
        .await
    }

    /// Sets the window's size.
    pub async fn set_window_size(&self, width: u32, height: u32) {
        self.must(
            Method::POST,
            "/window/rect",
            Some(json!({ "width": width, "height": height })),
        )
        .await;
    }

    /// A PNG of the window.
    pub async fn screenshot(&self) -> Vec<u8> {
        let encoded = self.must(Method::GET, "/screenshot", None).await;
        base64::engine::general_purpose::STANDARD
            .decode(encoded.as_str().expect("base64 text"))
            .expect("a base64 PNG")
    }

    /// Saves a screenshot to `path`, making its directory.
    pub async fn save_screenshot(&self, path: &Path) {
        let png = self.screenshot().await;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("the screenshot's directory");
        }
        std::fs::write(path, png).expect("write the screenshot");
    }

    /// Ends the session, closing the browser; dropping it then stops the
    /// driver.
    pub async fn quit(self) {
        let _ = self.command(Method::DELETE, "", None).await;
    }
}

/// What [`Browser::wait_for`] shows when it gives up: the page's view,
/// what it announced last and the tiles it shows.
const LAST_SEEN: &str = "return {
    view: document.body.dataset.view,
    revision: document.body.dataset.revision,
    announced: document.getElementById('announce')?.textContent,
    signInError: document.getElementById('sign-in-error')?.textContent,
    tiles: [...document.querySelectorAll('[data-machine]')]
        .map(t => `${t.dataset.machine}:${t.dataset.state}@${t.dataset.zone ?? ''}`).join(' '),
};";

/// The WebDriver key for Enter, for [`Browser::send_keys`].
pub const ENTER: &str = "\u{E007}";

impl Drop for Browser {
    fn drop(&mut self) {
        // The whole group: the driver and the browser it started, if the
        // session was not ended (a test that failed).
        let group = format!("-{}", self.driver.id());
        let _ = Command::new("kill")
            .args(["-TERM", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.driver.wait();
        // Anything of the browser's that outlived the driver.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
    }
}

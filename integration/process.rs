//! The `berth` binary as people use it: `berth serve` as a process, and the
//! command line as separate processes talking to it.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

struct Controller {
    child: Child,
    url: String,
    data_dir: tempfile::TempDir,
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn berth() -> Command {
    Command::new(env!("CARGO_BIN_EXE_berth"))
}

fn start_controller() -> Controller {
    let data_dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let child = berth()
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(data_dir.path())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("berth serve starts");
    let url = format!("http://127.0.0.1:{port}");
    let controller = Controller {
        child,
        url,
        data_dir,
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !(controller.data_dir.path().join("admin.token").exists()
        && std::net::TcpStream::connect(("127.0.0.1", port)).is_ok())
    {
        assert!(Instant::now() < deadline, "berth serve did not come up");
        std::thread::sleep(Duration::from_millis(20));
    }
    controller
}

impl Controller {
    /// Runs a client command the way a user on the same machine would: the
    /// URL and data directory from the environment, the token found there.
    fn run(&self, args: &[&str]) -> Output {
        berth()
            .args(args)
            .env("BERTH_URL", &self.url)
            .env("BERTH_DATA_DIR", self.data_dir.path())
            .env_remove("BERTH_TOKEN")
            .output()
            .expect("berth runs")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "berth {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

fn machine_constraints(status: &Value) -> Vec<String> {
    let mut all: Vec<String> = status["machines"]
        .as_object()
        .unwrap()
        .values()
        .map(|m| m["constraints"].as_str().unwrap_or_default().to_string())
        .collect();
    all.sort();
    all
}

#[test]
fn the_seed_scenario_through_the_command_line_gives_one_2g_and_two_3g_machines_all_started() {
    let c = start_controller();
    c.ok(&["deploy", "--constraints", "mem=2G", "wordpress"]);
    c.ok(&["set-constraints", "wordpress", "mem=3G"]);
    c.ok(&["add-unit", "wordpress", "-n", "2"]);
    c.ok(&["wait", "--timeout", "60"]);
    let status: Value = serde_json::from_str(&c.ok(&["status", "--format", "json"])).unwrap();
    assert_eq!(
        machine_constraints(&status),
        vec!["mem=2048M", "mem=3072M", "mem=3072M"]
    );
    for machine in status["machines"].as_object().unwrap().values() {
        assert_eq!(machine["juju-status"]["current"], "started", "{machine}");
    }
    assert_eq!(c.ok(&["constraints", "wordpress"]).trim(), "mem=3072M");
    let tabular = c.ok(&["status"]);
    for heading in ["Model", "App", "Unit", "Machine"] {
        assert!(tabular.contains(heading), "{tabular}");
    }
}

#[test]
fn the_seeds_older_command_names_work_too() {
    let c = start_controller();
    c.ok(&["deploy", "wordpress"]);
    c.ok(&["set-constraints", "--service", "wordpress", "mem=3G"]);
    assert_eq!(c.ok(&["constraints", "wordpress"]).trim(), "mem=3072M");
    c.ok(&["destroy-unit", "wordpress/0"]);
    let status: Value = serde_json::from_str(&c.ok(&["status", "--format", "json"])).unwrap();
    assert!(
        status["applications"]["wordpress"]["units"]
            .as_object()
            .is_none_or(|u| u.is_empty()),
        "{status}"
    );
}

#[test]
fn a_provisioning_error_is_shown_and_resolved_with_new_constraints() {
    let c = start_controller();
    c.ok(&["add-machine", "--constraints", "mem=100000G"]);
    c.ok(&["wait", "--timeout", "60"]);
    let status: Value = serde_json::from_str(&c.ok(&["status", "--format", "json"])).unwrap();
    assert_eq!(
        status["machines"]["0"]["machine-status"]["current"],
        "provisioning error"
    );
    c.ok(&["resolved", "0", "--constraints", "mem=4G"]);
    c.ok(&["wait", "--timeout", "60"]);
    let status: Value = serde_json::from_str(&c.ok(&["status", "--format", "json"])).unwrap();
    assert_eq!(status["machines"]["0"]["juju-status"]["current"], "started");
}

#[test]
fn bad_input_prints_one_error_line_and_exits_non_zero() {
    let c = start_controller();
    let out = c.run(&["deploy", "wordpress", "--constraints", "mem=lots"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.trim(),
        "ERROR bad \"mem\" constraint: must be a non-negative float with optional M/G/T/P suffix"
    );
    let out = c.run(&["retry-provisioning", "7"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with("ERROR "),
        "{out:?}"
    );
}

#[test]
fn a_client_without_a_controller_says_how_to_start_one() {
    let dir = tempfile::tempdir().unwrap();
    let out = berth()
        .args(["status"])
        .env("BERTH_URL", format!("http://127.0.0.1:{}", free_port()))
        .env("BERTH_TOKEN", "anything")
        .env("BERTH_DATA_DIR", dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("berth serve"), "{stderr}");
}

//! The manual provider against a real OpenSSH server on loopback
//! ([`crate::support::sshd`]): enlisting an existing host with
//! `berth add-machine ssh:...`, reading its hardware and base, keeping its
//! agent alive when it is killed, refusing a host that does not fit,
//! whose key is unknown or whose agent could not reach the controller, and
//! removing the agent (never the host).
//!
//! The controller runs with its engine over the simulated cloud, so each
//! test also shows that no cloud instance is launched for an `ssh:`
//! machine.

use std::process::Output;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use berth::engine::config::ProvisionerConfig;
use berth::providers::sim::SimConfig;

use crate::support::app::{berth_command, spawn_app_with, Backend, Options, TestApp};
use crate::support::sshd::Sshd;
use crate::support::{eventually, PATIENCE};

async fn controller_for(sshd: &Sshd) -> TestApp {
    controller_with(sshd.manual_config()).await
}

async fn controller_with(manual: berth::providers::manual::ManualConfig) -> TestApp {
    spawn_app_with(Options {
        manual,
        ..Options::engine(
            Backend::Sqlite,
            SimConfig::default(),
            ProvisionerConfig::default(),
        )
    })
    .await
}

/// Runs the `berth` command line against `app` in a process of its own.
async fn berth(app: &TestApp, args: &[&str]) -> Output {
    let mut command = berth_command();
    command
        .args(["--url", &app.address, "--token", &app.token])
        .args(args);
    tokio::task::spawn_blocking(move || command.output().expect("run berth"))
        .await
        .unwrap()
}

async fn machine(app: &TestApp, id: &str) -> Value {
    app.status_json().await["machines"][id].clone()
}

async fn wait_for_machine(app: &TestApp, id: &str, status: &str) -> Value {
    eventually(&format!("machine {id} {status}"), PATIENCE, || async {
        let m = machine(app, id).await;
        if m["juju-status"]["current"] == status {
            Ok(m)
        } else {
            Err(m)
        }
    })
    .await
}

/// `berth remove-machine ID`, then waits until the machine is gone.
async fn remove_machine(app: &TestApp, id: &str) {
    let removed = berth(app, &["remove-machine", id]).await;
    assert!(removed.status.success(), "{removed:?}");
    eventually(&format!("machine {id} to go"), PATIENCE, || async {
        let m = machine(app, id).await;
        if m.is_null() {
            Ok(())
        } else {
            Err(m)
        }
    })
    .await;
}

/// The host's own facts, as the tests expect berth to read them.
fn host_cores() -> u64 {
    std::thread::available_parallelism().unwrap().get() as u64
}

fn host_mem_mib() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    kib / 1024
}

/// `debian@12`, from this host's `/etc/os-release`.
fn host_base() -> (String, String) {
    let text = std::fs::read_to_string("/etc/os-release").unwrap();
    let value = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(|v| v.trim_matches('"').to_string())
            .unwrap()
    };
    (value("ID"), value("VERSION_ID"))
}

#[actix_web::test]
async fn an_existing_host_is_enlisted_keeps_its_agent_alive_and_is_released() {
    let sshd = Sshd::start();
    let app = controller_for(&sshd).await;
    let target = format!("ssh:{}", sshd.target());

    let added = berth(&app, &["add-machine", &target]).await;
    assert!(added.status.success(), "{added:?}");

    let m = wait_for_machine(&app, "0", "started").await;
    assert_eq!(m["instance-id"], "manual:127.0.0.1");
    // Its address is the one berth reached it at.
    assert_eq!(m["dns-name"], "127.0.0.1");
    assert_eq!(m["ip-addresses"], json!(["127.0.0.1"]));
    let hardware = m["hardware"].as_str().unwrap();
    assert!(
        hardware.contains(&format!("cores={} ", host_cores())),
        "{hardware}"
    );
    assert!(
        hardware.contains(&format!("mem={}M", host_mem_mib())),
        "{hardware}"
    );
    let (os, version) = host_base();
    assert_eq!(m["base"], json!({"name": os, "channel": version}));
    assert!(app.sim().ledger().is_empty(), "no cloud instance for ssh:");

    // The agent keeps its credential where only its user may read it.
    let dir = std::fs::read_dir(sshd.agent_dir())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let credential = dir.join("agent.credential");
    eventually("the credential file", PATIENCE, || async {
        std::fs::metadata(&credential).map(|_| ())
    })
    .await;
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&credential).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "credential mode {mode:o}");

    // A host is enlisted once.
    let again = app
        .add_machines(&json!({"placement": format!("ssh:127.0.0.1:{}", sshd.port())}))
        .await;
    assert_eq!(again.status(), StatusCode::CONFLICT);
    assert!(app.status_json().await["machines"]["1"].is_null());

    // Killing the agent: its supervisor starts another, which reconnects
    // with the kept credential, and the machine stays started.
    let agents = sshd.processes(" agent --url");
    assert_eq!(agents.len(), 1, "{agents:?}");
    let killed = agents[0].0;
    std::process::Command::new("kill")
        .args(["-KILL", &killed.to_string()])
        .status()
        .unwrap();
    let replacement = eventually("a new agent process", Duration::from_secs(30), || async {
        match sshd.processes(" agent --url").as_slice() {
            [(pid, _)] if *pid != killed => Ok(*pid),
            other => Err(other.to_vec()),
        }
    })
    .await;
    let log = dir.join("agent.log");
    eventually(
        "the new agent to reconnect with its credential",
        PATIENCE,
        || async {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let reconnected = text
                .split_once("using the credential in")
                .is_some_and(|(_, after)| after.contains("heartbeat accepted"));
            if reconnected {
                Ok(())
            } else {
                Err(text)
            }
        },
    )
    .await;
    actix_web::rt::time::sleep(Duration::from_secs(3)).await;
    assert!(
        sshd.processes(" agent --url")
            .iter()
            .any(|(pid, _)| *pid == replacement),
        "the new agent stays running"
    );
    assert_eq!(
        machine(&app, "0").await["juju-status"]["current"],
        "started"
    );

    // Removing the machine removes the agent and its files, not the host.
    remove_machine(&app, "0").await;
    assert!(!dir.exists(), "the agent's directory is removed");
    let left = sshd.processes(" agent --url");
    assert!(left.is_empty(), "no agent runs: {left:?}");
    assert!(sshd.processes("supervise").is_empty(), "no supervisor runs");
    assert!(app.sim().ledger().is_empty());
}

#[actix_web::test]
async fn a_machine_whose_host_is_gone_is_removed_after_a_few_tries_to_reach_it() {
    let sshd = Sshd::start();
    let app = spawn_app_with(Options {
        manual: sshd.manual_config(),
        ..Options::engine(
            Backend::Sqlite,
            SimConfig::default(),
            ProvisionerConfig {
                backoff_initial_ms: 50,
                backoff_max_ms: 200,
                ..ProvisionerConfig::default()
            },
        )
    })
    .await;
    let target = format!("ssh:{}", sshd.target());
    let added = berth(&app, &["add-machine", &target]).await;
    assert!(added.status.success(), "{added:?}");
    wait_for_machine(&app, "0", "started").await;

    // The host goes away for good (its SSH server and agent with it).
    drop(sshd);
    remove_machine(&app, "0").await;
    // Nothing of it was launched in the cloud, and its address may be
    // enlisted again (a host rebuilt under the same name).
    assert!(app.sim().ledger().is_empty());
    let again = berth(&app, &["add-machine", &target, "--dry-run"]).await;
    assert!(again.status.success(), "{again:?}");
}

#[actix_web::test]
async fn an_enlistment_that_fails_once_installed_removes_what_it_installed() {
    let sshd = Sshd::start();
    let app = controller_for(&sshd).await;
    // Where machine 0's agent settings go, something the start cannot
    // write over: a directory.
    let model = app.status_json().await["model"]["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    let slug: String = model
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(8)
        .collect();
    let agent_dir = sshd.agent_dir().join(format!("agent-{slug}-0"));
    std::fs::create_dir_all(agent_dir.join("agent.env").join("in-the-way")).unwrap();
    let target = format!("ssh:{}", sshd.target());
    let added = berth(&app, &["add-machine", &target]).await;
    assert!(added.status.success(), "{added:?}");
    let failed = wait_for_machine(&app, "0", "error").await;
    let message = failed["machine-status"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("starting the agent on 127.0.0.1 failed")
            && message.contains("berth removed what it had installed on 127.0.0.1"),
        "{message}"
    );
    assert!(
        !agent_dir.exists(),
        "the agent's directory is left on the host"
    );
    assert!(sshd.processes(" agent --url").is_empty());
    // Nothing in the way now: a retry enlists the host.
    let retried = berth(&app, &["retry-provisioning", "0"]).await;
    assert!(retried.status.success(), "{retried:?}");
    wait_for_machine(&app, "0", "started").await;
}

#[actix_web::test]
async fn a_unit_whose_base_the_host_does_not_run_is_refused_naming_both() {
    let sshd = Sshd::start();
    let app = controller_for(&sshd).await;
    let (os, version) = host_base();
    let other = if os == "ubuntu" {
        "ubuntu@20.04"
    } else {
        "ubuntu@22.04"
    };
    let deployed = app
        .deploy(&json!({
            "charm": "wordpress",
            "base": other,
            "to": [format!("ssh:{}", sshd.target())],
        }))
        .await;
    assert_eq!(deployed.status(), StatusCode::CREATED);
    let m = wait_for_machine(&app, "0", "error").await;
    let message = m["machine-status"]["message"].as_str().unwrap_or_default();
    assert_eq!(
        message,
        format!(
            "127.0.0.1 does not fit machine 0: the host runs {os}@{version}, but its units need {other}"
        ),
        "{m}"
    );
    assert!(app.sim().ledger().is_empty(), "no cloud instance for ssh:");
    assert_eq!(
        std::fs::read_dir(sshd.agent_dir()).unwrap().count(),
        0,
        "nothing installed"
    );
}

#[actix_web::test]
async fn a_host_is_refused_up_front_when_agents_would_be_told_the_unspecified_address() {
    let sshd = Sshd::start();
    // What a controller listening with `--listen 0.0.0.0:17070` and no
    // controller_url tells its agents.
    let app = spawn_app_with(Options {
        manual: sshd.manual_config(),
        controller_url: Some("https://0.0.0.0:17070".into()),
        ..Options::engine(
            Backend::Sqlite,
            SimConfig::default(),
            ProvisionerConfig::default(),
        )
    })
    .await;
    let added = berth(&app, &["add-machine", &format!("ssh:{}", sshd.target())]).await;
    assert!(!added.status.success(), "{added:?}");
    assert_eq!(
        String::from_utf8_lossy(&added.stderr),
        format!(
            "ERROR cannot honour placement \"ssh:{}\": agents cannot reach the controller at \
             https://0.0.0.0:17070: 0.0.0.0 is the unspecified address, which a controller \
             listens on but no host can connect to; set controller_url (BERTH_CONTROLLER_URL) \
             to an address of this controller that the host can reach\n",
            sshd.target()
        )
    );
    // So is a unit placed on one; nothing is added either way.
    let deployed = berth(
        &app,
        &[
            "deploy",
            "memcached",
            "--to",
            &format!("ssh:{}", sshd.target()),
        ],
    )
    .await;
    assert!(!deployed.status.success(), "{deployed:?}");
    let status = app.status_json().await;
    assert_eq!(status["machines"], json!({}));
    assert_eq!(status["applications"], json!({}));
    assert_eq!(
        std::fs::read_dir(sshd.agent_dir()).unwrap().count(),
        0,
        "nothing installed"
    );
    assert!(sshd.processes(" agent --url").is_empty());
    assert!(app.sim().ledger().is_empty(), "no cloud instance for ssh:");
}

#[actix_web::test]
async fn an_unknown_host_key_is_refused_until_it_is_trusted_and_retried() {
    let sshd = Sshd::start();
    let mut manual = sshd.manual_config();
    let known_hosts = sshd.path("operator_known_hosts");
    std::fs::write(&known_hosts, "").unwrap();
    manual.known_hosts = Some(known_hosts.clone());
    let app = controller_with(manual).await;
    app.add_machines(&json!({"placement": format!("ssh:{}", sshd.target())}))
        .await;
    let m = wait_for_machine(&app, "0", "error").await;
    let message = m["machine-status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("refusing 127.0.0.1: its host key is not in"),
        "{m}"
    );
    assert!(app.sim().ledger().is_empty());

    // The operator checks the key, trusts it, and retries.
    std::fs::copy(sshd.path("known_hosts"), &known_hosts).unwrap();
    let retried = berth(&app, &["retry-provisioning", "0"]).await;
    assert!(retried.status.success(), "{retried:?}");
    wait_for_machine(&app, "0", "started").await;
    assert!(app.sim().ledger().is_empty());
}

#[actix_web::test]
async fn an_ssh_machine_refuses_a_base_a_count_and_containers_up_front() {
    let app = controller_with(Default::default()).await;
    for (body, expected) in [
        (
            json!({"placement": "ssh:root@host.invalid", "base": "ubuntu@22.04"}),
            "ssh:root@host.invalid runs the host's own base: leave out base",
        ),
        (
            json!({"placement": "ssh:root@host.invalid", "count": 2}),
            "ssh:root@host.invalid enlists one existing host: count must be 1",
        ),
        (
            json!({"placement": "ssh:root@host.invalid:99999"}),
            "invalid value \"root@host.invalid:99999\" for \"ssh\" scope: expected [user@]host[:port]",
        ),
    ] {
        let response = app.add_machines(&body).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{body}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["message"], expected, "{body}");
    }
    assert_eq!(app.status_json().await["machines"], json!({}));

    // A host that cannot be reached is a provisioning error that says so
    // (nothing listens on loopback's port 1).
    let added = app
        .add_machines(&json!({"placement": "ssh:root@localhost:1"}))
        .await;
    assert_eq!(added.status(), StatusCode::CREATED);
    let m = wait_for_machine(&app, "0", "error").await;
    assert_eq!(
        m["machine-status"]["message"],
        "localhost is unreachable: nothing accepts SSH connections on port 1",
        "{m}"
    );
    // It is enlisted once, and hosts no containers.
    let twice = app
        .add_machines(&json!({"placement": "ssh:ubuntu@LOCALHOST:2222"}))
        .await;
    assert_eq!(twice.status(), StatusCode::CONFLICT);
    let error: Value = twice.json().await.unwrap();
    assert_eq!(
        error["error"]["message"],
        "host LOCALHOST is already enlisted as machine 0"
    );
    let container = app.add_machines(&json!({"placement": "lxd:0"})).await;
    assert_eq!(container.status(), StatusCode::BAD_REQUEST);
    let error: Value = container.json().await.unwrap();
    assert_eq!(
        error["error"]["message"],
        "machine 0 is the existing host localhost enlisted over ssh; berth cannot start containers on it"
    );
    assert_eq!(
        app.status_json().await["machines"]
            .as_object()
            .unwrap()
            .len(),
        1
    );
    assert!(app.sim().ledger().is_empty());
}

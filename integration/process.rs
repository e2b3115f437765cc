//! The `berth` binary as people use it: `berth serve` as a process (the
//! harness's [`Launch::Process`]), and the command line as separate
//! processes talking to it.

use std::process::Output;

use serde_json::Value;

use crate::support::app::{
    berth_command, free_port, refused_start, spawn_app_with, Backend, Launch, Options, TestApp,
};

/// `berth serve` as a child process, on a fresh SQLite store.
async fn start_controller() -> TestApp {
    start_controller_on(Backend::Sqlite).await
}

/// `berth serve` as a child process, on a fresh store on `backend`.
async fn start_controller_on(backend: Backend) -> TestApp {
    spawn_app_with(Options {
        backend,
        launch: Launch::Process,
        ..Options::default()
    })
    .await
}

/// Runs a client command the way a user on the same machine would: the
/// URL and data directory from the environment, the token found there.
fn run(c: &TestApp, args: &[&str]) -> Output {
    berth_command()
        .args(args)
        .env("BERTH_URL", &c.address)
        .env("BERTH_DATA_DIR", c.site.dir())
        .env_remove("BERTH_TOKEN")
        .output()
        .expect("berth runs")
}

fn ok(c: &TestApp, args: &[&str]) -> String {
    let out = run(c, args);
    assert!(
        out.status.success(),
        "berth {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_scenario_through_the_command_line_gives_one_2g_and_two_3g_machines_all_started() {
    the_seed_scenario_through_the_command_line(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_scenario_through_the_command_line_works_the_same_on_postgresql() {
    the_seed_scenario_through_the_command_line(Backend::Postgres).await;
}

/// One 2G and two 3G machines, all started, through `berth serve` and the
/// command line as processes.
async fn the_seed_scenario_through_the_command_line(backend: Backend) {
    let c = start_controller_on(backend).await;
    ok(&c, &["deploy", "--constraints", "mem=2G", "wordpress"]);
    ok(&c, &["set-constraints", "wordpress", "mem=3G"]);
    ok(&c, &["add-unit", "wordpress", "-n", "2"]);
    ok(&c, &["wait", "--timeout", "60"]);
    let status: Value = serde_json::from_str(&ok(&c, &["status", "--format", "json"])).unwrap();
    assert_eq!(
        machine_constraints(&status),
        vec!["mem=2048M", "mem=3072M", "mem=3072M"]
    );
    for machine in status["machines"].as_object().unwrap().values() {
        assert_eq!(machine["juju-status"]["current"], "started", "{machine}");
    }
    assert_eq!(ok(&c, &["constraints", "wordpress"]).trim(), "mem=3072M");
    let tabular = ok(&c, &["status"]);
    for heading in ["Model", "App", "Unit", "Machine"] {
        assert!(tabular.contains(heading), "{tabular}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_older_command_names_work_too() {
    let c = start_controller().await;
    ok(&c, &["deploy", "wordpress"]);
    ok(&c, &["set-constraints", "--service", "wordpress", "mem=3G"]);
    assert_eq!(ok(&c, &["constraints", "wordpress"]).trim(), "mem=3072M");
    ok(&c, &["destroy-unit", "wordpress/0"]);
    let status: Value = serde_json::from_str(&ok(&c, &["status", "--format", "json"])).unwrap();
    assert!(
        status["applications"]["wordpress"]["units"]
            .as_object()
            .is_none_or(|u| u.is_empty()),
        "{status}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provisioning_error_is_shown_and_resolved_with_new_constraints() {
    let c = start_controller().await;
    ok(&c, &["add-machine", "--constraints", "mem=100000G"]);
    ok(&c, &["wait", "--timeout", "60"]);
    let status: Value = serde_json::from_str(&ok(&c, &["status", "--format", "json"])).unwrap();
    assert_eq!(
        status["machines"]["0"]["machine-status"]["current"],
        "provisioning error"
    );
    ok(&c, &["resolved", "0", "--constraints", "mem=4G"]);
    ok(&c, &["wait", "--timeout", "60"]);
    let status: Value = serde_json::from_str(&ok(&c, &["status", "--format", "json"])).unwrap();
    assert_eq!(status["machines"]["0"]["juju-status"]["current"], "started");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_prints_one_error_line_and_exits_non_zero() {
    let c = start_controller().await;
    let out = run(&c, &["deploy", "wordpress", "--constraints", "mem=lots"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.trim(),
        "ERROR bad \"mem\" constraint: must be a non-negative float with optional M/G/T/P suffix"
    );
    let out = run(&c, &["retry-provisioning", "7"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with("ERROR "),
        "{out:?}"
    );
}

#[test]
fn a_client_without_a_controller_says_how_to_start_one() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let out = berth_command()
        .args(["status"])
        .env("BERTH_URL", format!("http://127.0.0.1:{port}"))
        .env("BERTH_TOKEN", "anything")
        .env("BERTH_DATA_DIR", dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("berth serve"), "{stderr}");
}

/// Runs `berth` as someone elsewhere would after `berth login`: no
/// `BERTH_URL`, `BERTH_TOKEN` or `BERTH_DATA_DIR`, another working
/// directory (and data directory), and `config` as the configuration home.
fn run_logged_in(config: &std::path::Path, args: &[&str]) -> Output {
    let elsewhere = tempfile::tempdir().unwrap();
    berth_command()
        .args(args)
        .current_dir(elsewhere.path())
        .env_remove("BERTH_URL")
        .env_remove("BERTH_TOKEN")
        .env("BERTH_DATA_DIR", elsewhere.path().join("no-data-here"))
        .env("XDG_CONFIG_HOME", config)
        .output()
        .expect("berth runs")
}

fn controller_uuid_of(status: &Output) -> String {
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let status: Value = serde_json::from_slice(&status.stdout).unwrap();
    status["model"]["controller"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_saves_two_controllers_and_switch_picks_the_one_commands_use() {
    let (a, b) = (start_controller().await, start_controller().await);
    let uuid = |c: &TestApp| controller_uuid_of(&run(c, &["status", "--format", "json"]));
    let (uuid_a, uuid_b) = (uuid(&a), uuid(&b));
    assert_ne!(uuid_a, uuid_b);
    let config = tempfile::tempdir().unwrap();

    // Before any login, nothing is saved and commands look locally.
    let listed = run_logged_in(config.path(), &["controllers"]);
    assert!(String::from_utf8_lossy(&listed.stdout).contains("no saved controllers"));

    // A wrong token or an unreachable controller: refused, nothing saved.
    let wrong = run_logged_in(
        config.path(),
        &[
            "login",
            &a.address,
            "--token",
            "not-the-token",
            "--name",
            "a",
        ],
    );
    assert_eq!(wrong.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert!(stderr.starts_with("ERROR "), "{stderr}");
    let unreachable = run_logged_in(
        config.path(),
        &[
            "login",
            "http://127.0.0.1:9",
            "--token",
            "t",
            "--name",
            "gone",
        ],
    );
    assert_eq!(unreachable.status.code(), Some(1));
    assert!(!config.path().join("berth/controllers.toml").exists());
    let bad_name = run_logged_in(
        config.path(),
        &["login", &a.address, "--token", &a.token, "--name", "a b"],
    );
    assert_eq!(bad_name.status.code(), Some(2));
    assert!(!config.path().join("berth/controllers.toml").exists());

    for (c, name) in [(&a, "a"), (&b, "b")] {
        let out = run_logged_in(
            config.path(),
            &["login", &c.address, "--token", &c.token, "--name", name],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).starts_with(&format!("logged in to {name}")));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let file = config.path().join("berth/controllers.toml");
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    // The last login is current; commands need no flags.
    let listed = String::from_utf8(run_logged_in(config.path(), &["controllers"]).stdout).unwrap();
    assert!(
        listed.contains(&format!("b*          {}", b.address)),
        "{listed}"
    );
    assert!(
        listed.contains(&format!("a           {}", a.address)),
        "{listed}"
    );
    let status = run_logged_in(config.path(), &["status", "--format", "json"]);
    assert_eq!(controller_uuid_of(&status), uuid_b);

    let switched = run_logged_in(config.path(), &["switch", "a"]);
    assert!(switched.status.success());
    let status = run_logged_in(config.path(), &["status", "--format", "json"]);
    assert_eq!(controller_uuid_of(&status), uuid_a);
    // A command works on the current controller.
    let added = run_logged_in(config.path(), &["add-machine"]);
    assert!(
        added.status.success(),
        "{}",
        String::from_utf8_lossy(&added.stderr)
    );

    // Flags still win over the saved controller.
    let flagged = run_logged_in(
        config.path(),
        &["status", "--format", "json", "--url", &b.address],
    );
    assert_eq!(controller_uuid_of(&flagged), uuid_b);

    let unknown = run_logged_in(config.path(), &["switch", "c"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&unknown.stderr).trim(),
        "ERROR no controller named \"c\": expected one of a, b"
    );
}

/// `berth serve` on `database` with its data in `data_dir`, on a free
/// loopback port, and its URL.
fn serve_on(database: &str, data_dir: &std::path::Path) -> (std::process::Command, String) {
    let port = free_port();
    let mut command = berth_command();
    command
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--database-url", database])
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit());
    (command, format!("http://127.0.0.1:{port}"))
}

/// Waits until the controller at `url` answers, failing the test if
/// `child` exits first.
fn wait_until_it_answers(url: &str, child: &mut std::process::Child) {
    use std::time::{Duration, Instant};
    let answers = || {
        berth_command()
            .args(["status", "--url", url, "--token", "x"])
            .output()
            .map(|out| !String::from_utf8_lossy(&out.stderr).contains("cannot reach"))
            .unwrap_or(false)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !answers() {
        assert!(child.try_wait().unwrap().is_none(), "berth serve exited");
        assert!(Instant::now() < deadline, "berth serve did not answer");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_second_controller_on_the_same_sqlite_store_is_refused_and_pointed_to_postgresql() {
    let shared = tempfile::tempdir().unwrap();
    let database = shared.path().join("berth.db");
    let serve = |data_dir: &std::path::Path| serve_on(&database.to_string_lossy(), data_dir);
    let wait_for = wait_until_it_answers;

    let (first_dir, second_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (mut command, first_url) = serve(first_dir.path());
    let mut first = command.spawn().unwrap();
    wait_for(&first_url, &mut first);

    // Another data directory, the same database: refused at start.
    let (command, _) = serve(second_dir.path());
    let refused = refused_start(command);
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains(&format!(
            "another berth controller is using the SQLite store {}",
            database.display()
        )) && stderr.contains("PostgreSQL"),
        "{stderr}"
    );
    // Nothing of the refused controller was written to its data directory.
    assert!(!second_dir.path().join("admin.token").exists());

    // Once the first is gone (however it ends), another may take over.
    first.kill().unwrap();
    first.wait().unwrap();
    let (mut command, second_url) = serve(second_dir.path());
    let mut second = command.spawn().unwrap();
    wait_for(&second_url, &mut second);
    second.kill().unwrap();
    second.wait().unwrap();
}

#[test]
fn two_controllers_with_the_simulated_cloud_on_one_postgres_share_one_cloud() {
    let _turn = crate::support::heavy_test_blocking();
    let database = crate::support::postgres::fresh_database();
    let (first_dir, second_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // Their logs, shown if the test fails.
    let logs = tempfile::tempdir().unwrap();
    let logged = |command: &mut std::process::Command, name: &str| {
        let log = std::fs::File::create(logs.path().join(name)).unwrap();
        command.env("RUST_LOG", "info").stderr(log);
    };
    let show_logs = || {
        for name in ["first.log", "second.log"] {
            let log = std::fs::read_to_string(logs.path().join(name)).unwrap_or_default();
            eprintln!("---- {name}\n{log}");
        }
    };
    let (mut command, first_url) = serve_on(&database, first_dir.path());
    logged(&mut command, "first.log");
    let mut first = command.spawn().unwrap();
    wait_until_it_answers(&first_url, &mut first);
    let (mut command, second_url) = serve_on(&database, second_dir.path());
    logged(&mut command, "second.log");
    let mut second = command.spawn().unwrap();
    wait_until_it_answers(&second_url, &mut second);
    let token = std::fs::read_to_string(first_dir.path().join("admin.token")).unwrap();
    let token = token.trim();
    assert_eq!(
        std::fs::read_to_string(second_dir.path().join("admin.token"))
            .unwrap()
            .trim(),
        token
    );
    let berth = |url: &str, args: &[&str]| {
        let out = berth_command()
            .args(args)
            .args(["--url", url, "--token", token])
            .output()
            .unwrap();
        if !out.status.success() {
            show_logs();
            // What each controller shows, to tell a machine that did not
            // start from one controller's view that did not follow.
            for (name, url) in [("first", &first_url), ("second", &second_url)] {
                let shown = berth_command()
                    .args(["status", "--url", url, "--token", token])
                    .output()
                    .unwrap();
                eprintln!(
                    "---- status from the {name} controller\n{}{}",
                    String::from_utf8_lossy(&shown.stdout),
                    String::from_utf8_lossy(&shown.stderr)
                );
            }
            panic!("berth {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // Deployed through one, started by both, waited for through the other.
    berth(&first_url, &["deploy", "wordpress", "-n", "6"]);
    berth(&second_url, &["wait", "--timeout", "120"]);
    let status: serde_json::Value =
        serde_json::from_str(&berth(&second_url, &["status", "--format", "json"])).unwrap();
    let machines = status["machines"].as_object().unwrap();
    assert_eq!(machines.len(), 6);
    // One cloud: the instances are all distinct, each a machine's own.
    let instances: std::collections::BTreeSet<&str> = machines
        .values()
        .map(|m| m["instance-id"].as_str().unwrap())
        .collect();
    assert_eq!(instances.len(), 6, "{status}");
    for child in [&mut first, &mut second] {
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

/// The binary starts jemalloc with its own settings: one arena
/// (`src/main.rs`). jemalloc prints the settings it runs with when asked
/// to print its statistics at exit.
#[cfg(feature = "jemalloc")]
#[test]
fn the_binary_runs_its_allocator_with_one_arena() {
    let out = berth_command()
        .arg("--version")
        .env("_RJEM_MALLOC_CONF", "stats_print:true")
        .output()
        .unwrap();
    assert!(out.status.success());
    let stats = String::from_utf8_lossy(&out.stderr);
    assert!(
        stats.contains("Global variable malloc_conf: \"narenas:1\""),
        "{stats}"
    );
    assert!(stats.contains("opt.narenas: 1\n"), "{stats}");
}

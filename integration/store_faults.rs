//! The store going away under a running controller: PostgreSQL restarted
//! in the middle of a deploy. While it is away every request is answered
//! 503 with a clear error; once it is back, every connection (the
//! writer's included) is replaced and the deploy finishes with nothing
//! lost or duplicated.
//!
//! And the store unable to write: a SQLite database on a small file system
//! of its own (a tmpfs this test mounts) that fills up under a running
//! controller, one that is read-only when the controller starts, and one
//! whose lock another process holds.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use berth::domain::machine::MachineState;
use berth::engine::config::ProvisionerConfig;
use berth::providers::sim::SimConfig;
use berth::store::db::DatabaseUrl;

use crate::support::app::{spawn_app_with, Backend, Launch, Options, Site};
use crate::support::postgres::OwnServer;
use crate::support::{all_started, assert_one_live_instance_each, eventually, until};

const UNITS: usize = 500;

#[actix_web::test]
async fn a_postgres_restart_mid_deploy_answers_503_meanwhile_and_loses_nothing() {
    let server = OwnServer::start();
    let site = Site::on(DatabaseUrl::parse(&server.url()).unwrap());
    let app = spawn_app_with(Options {
        site: Some(site),
        ..Options::engine(
            Backend::Postgres,
            SimConfig {
                start_delay_ms: 1_000,
                ..SimConfig::default()
            },
            ProvisionerConfig::default(),
        )
    })
    .await;
    let deployed = app
        .deploy(&json!({"charm": "wordpress", "num_units": UNITS}))
        .await;
    assert_eq!(deployed.status(), StatusCode::CREATED);
    // Launches in flight when the database goes: their instances start
    // while it is away, and saying so fails until it is back.
    until(app.store(), "launches in flight", |s| {
        s.machines
            .iter()
            .filter(|m| m.state() == MachineState::Starting)
            .count()
            >= UNITS / 10
    })
    .await;

    server.stop();
    let stopped = Instant::now();
    // While it is away, reads and writes alike are refused as unavailable,
    // promptly.
    let asked = Instant::now();
    let status = app.status().await;
    assert_eq!(status.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = status.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("database")),
        "{body}"
    );
    let add = app.add_machines(&json!({})).await;
    assert_eq!(add.status(), StatusCode::SERVICE_UNAVAILABLE);
    let answered_in = asked.elapsed();
    assert!(
        answered_in < Duration::from_secs(15),
        "two requests took {answered_in:?} to be refused"
    );
    let body: Value = add.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("database")),
        "{body}"
    );
    eprintln!("while the database was away, two requests were refused in {answered_in:?}");
    let away = Duration::from_secs(3).saturating_sub(stopped.elapsed());
    actix_web::rt::time::sleep(away).await;
    server.resume();
    let resumed = Instant::now();

    let started = eventually(
        "every machine started after the restart",
        Duration::from_secs(180),
        || async { all_started(&app.status_json().await, UNITS) },
    )
    .await;
    eprintln!(
        "{UNITS} machines started {:.1}s after the database came back",
        resumed.elapsed().as_secs_f64()
    );
    // Each on its own instance, and the cloud runs exactly those.
    assert_one_live_instance_each(&started, app.sim());
    // Each with what its launch recorded beside the state, whether or not
    // the save was tried again while the database was away.
    let unrecorded: Vec<&String> = started
        .iter()
        .filter(|(_, m)| {
            ["instance-type", "hardware", "hourly-price", "dns-name"]
                .iter()
                .any(|field| m[*field].as_str().is_none_or(str::is_empty))
        })
        .map(|(id, _)| id)
        .collect();
    assert!(
        unrecorded.is_empty(),
        "started without their launch's details: {unrecorded:?}"
    );
}

/// A tmpfs of `size` mounted on a temporary directory, unmounted when
/// dropped: a disk of its own that a test can fill or make read-only.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str) -> SmallDisk {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir.path())
            .output()
            .expect("mount runs");
        assert!(
            out.status.success(),
            "the store-fault tests mount a small tmpfs and need the privilege to (run as root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        SmallDisk { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn remount(&self, options: &str) {
        let out = Command::new("mount")
            .args(["-o", &format!("remount,{options}")])
            .arg(self.path())
            .output()
            .expect("mount runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Fills the disk with a file of zeros; returns the file.
    fn fill(&self) -> PathBuf {
        let filler = self.path().join("filler");
        let mut file = std::fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 16 * 1024];
        loop {
            if let Err(e) = file.write_all(&chunk).and_then(|()| file.sync_all()) {
                assert_eq!(e.raw_os_error(), Some(28), "ENOSPC expected: {e}");
                break;
            }
        }
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.path()).status();
    }
}

fn sqlite_site_on(disk: &SmallDisk) -> Site {
    Site::on(DatabaseUrl::parse(&disk.path().join("berth.db").display().to_string()).unwrap())
}

fn message(body: &Value) -> &str {
    body["error"]["message"].as_str().unwrap_or_default()
}

/// How many machines the status lists, containers included.
fn machine_count(status: &Value) -> usize {
    status["machines"]
        .as_object()
        .map(|machines| {
            machines
                .values()
                .map(|m| 1 + m["containers"].as_object().map_or(0, |c| c.len()))
                .sum()
        })
        .unwrap_or(0)
}

#[actix_web::test]
async fn a_full_disk_under_sqlite_answers_503_keeps_what_was_committed_and_writes_again_once_freed()
{
    let disk = SmallDisk::mount("4m");
    let app = spawn_app_with(Options {
        site: Some(sqlite_site_on(&disk)),
        ..Options::engine(
            Backend::Sqlite,
            SimConfig::default(),
            ProvisionerConfig::default(),
        )
    })
    .await;
    let deployed = app
        .deploy(&json!({"charm": "wordpress", "num_units": 20}))
        .await;
    assert_eq!(deployed.status(), StatusCode::CREATED);
    eventually(
        "the first 20 machines started",
        Duration::from_secs(60),
        || async { all_started(&app.status_json().await, 20) },
    )
    .await;

    let filler = disk.fill();
    // SQLite may still find room in pages it already has; add machines
    // until a write needs more.
    let mut committed = 20;
    let refusal = loop {
        let add = app.add_machines(&json!({"count": 100})).await;
        match add.status() {
            StatusCode::CREATED => committed += 100,
            status => break (status, add.json::<Value>().await.unwrap()),
        }
        assert!(
            committed < 5_000,
            "a full 4 MiB disk took {committed} machines"
        );
    };
    assert_eq!(refusal.0, StatusCode::SERVICE_UNAVAILABLE, "{}", refusal.1);
    assert!(
        message(&refusal.1).contains("database or disk is full")
            && message(&refusal.1).contains("free space"),
        "{}",
        refusal.1
    );
    // Reads go on, and show everything committed before the disk filled.
    let status = app.status().await;
    assert_eq!(status.status(), StatusCode::OK);
    assert_eq!(machine_count(&status.json().await.unwrap()), committed);
    eprintln!("the disk filled after {committed} machines; writes refused with 503, reads served");

    std::fs::remove_file(filler).unwrap();
    let add = app.add_machines(&json!({"count": 1})).await;
    assert_eq!(add.status(), StatusCode::CREATED);
    committed += 1;
    let started = eventually(
        "every machine started once the disk had room",
        Duration::from_secs(180),
        || async { all_started(&app.status_json().await, committed) },
    )
    .await;
    assert_one_live_instance_each(&started, app.sim());
}

#[actix_web::test]
async fn a_controller_on_a_read_only_sqlite_store_refuses_to_start_saying_why_and_loses_nothing() {
    let disk = SmallDisk::mount("16m");
    let site = sqlite_site_on(&disk);
    // A process, so that once it is stopped nothing holds the files open.
    let app = spawn_app_with(Options {
        site: Some(site.clone()),
        launch: Launch::Process,
        ..Options::default()
    })
    .await;
    assert_eq!(
        app.add_machines(&json!({"count": 3})).await.status(),
        StatusCode::CREATED
    );
    eventually("3 machines started", Duration::from_secs(60), || async {
        all_started(&app.status_json().await, 3)
    })
    .await;
    let before: Value = app.status_json().await;
    drop(app);

    disk.remount("ro");
    let build = berth::app::Application::build(berth::config::Config {
        data_dir: Some(site.dir().to_path_buf()),
        database_url: Some(site.database().to_string()),
        listen: "127.0.0.1:0".parse().unwrap(),
        ..berth::config::Config::default()
    })
    .await;
    let error = build
        .err()
        .expect("a controller whose store cannot write refuses to start")
        .to_string();
    assert!(
        error.contains("cannot be written (Read-only file system"),
        "{error}"
    );
    eprintln!("on a read-only store: {error}");

    disk.remount("rw");
    let again = spawn_app_with(Options {
        site: Some(site),
        launch: Launch::Process,
        ..Options::default()
    })
    .await;
    let after: Value = again.status_json().await;
    assert_eq!(after["machines"], before["machines"]);
}

#[actix_web::test]
async fn a_sqlite_store_locked_by_another_process_answers_503_busy_and_writes_once_released() {
    use diesel::connection::SimpleConnection;
    use diesel::{Connection, SqliteConnection};

    let app = spawn_app_with(Options::default()).await;
    let DatabaseUrl::Sqlite(path) = app.site.database().clone() else {
        panic!("the default test site is SQLite");
    };
    // Another process holds the write lock (here a connection of the
    // test's own, as `sqlite3` would). The writer's transaction reads
    // before it writes, and SQLite refuses such an upgrade at once rather
    // than wait out its busy timeout: either way, a 503 that says so.
    let mut holder = SqliteConnection::establish(&path.display().to_string()).unwrap();
    holder.batch_execute("BEGIN EXCLUSIVE").unwrap();
    let refused = app.add_machines(&json!({"count": 1})).await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unavailable", "{body}");
    assert_eq!(
        message(&body),
        "the database is busy (database is locked): nothing was changed; try again shortly"
    );
    // Reads go on meanwhile (WAL: readers do not wait for the writer).
    assert_eq!(app.status().await.status(), StatusCode::OK);
    holder.batch_execute("ROLLBACK").unwrap();
    assert_eq!(machine_count(&app.status_json().await), 0);
    let added = app.add_machines(&json!({"count": 1})).await;
    assert_eq!(added.status(), StatusCode::CREATED);
    assert_eq!(machine_count(&app.status_json().await), 1);
}

//! schemathesis against a live controller: every operation of the served
//! `/v1/openapi.json`, with generated valid and invalid requests, checked
//! for server errors, undocumented status codes and content types,
//! responses that break their schema, invalid data accepted, and methods a
//! path does not answer refused with 405.
//!
//! The binary is `BERTH_SCHEMATHESIS`, else `.venv/bin/schemathesis` in the
//! repository (`bash integration/run.sh` installs it there, beside moto).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use crate::support::app::{berth_command, spawn_app_with, Launch, Options, TestApp};

/// The checks run; all of them must pass for every generated request.
const CHECKS: &str = "not_a_server_error,status_code_conformance,content_type_conformance,\
response_schema_conformance,negative_data_rejection,unsupported_method";

/// Generated requests per operation and phase: bounded, so the run takes
/// well under a minute; the seed makes a failure reproducible.
const EXAMPLES_PER_OPERATION: &str = "25";
const SEED: &str = "1";

fn schemathesis() -> PathBuf {
    let path = match std::env::var_os("BERTH_SCHEMATHESIS") {
        Some(path) => PathBuf::from(path),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/schemathesis"),
    };
    assert!(
        path.exists(),
        "schemathesis not found at {}: run `bash integration/run.sh` (it installs schemathesis \
         into .venv), or set BERTH_SCHEMATHESIS to a schemathesis binary",
        path.display()
    );
    path
}

/// Gives the generated requests something to find: an application with
/// units, and a machine, so that names and ids can exist.
fn populate(c: &TestApp) {
    for args in [
        &["deploy", "wordpress", "-n", "2"][..],
        &["deploy", "mysql"][..],
        &["add-machine"][..],
    ] {
        let out = berth_command()
            .args(args)
            .env("BERTH_URL", &c.address)
            .env("BERTH_TOKEN", &c.token)
            .output()
            .expect("berth runs");
        assert!(
            out.status.success(),
            "berth {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The served document's operations, as `GET /v1/status`, but for the
/// document's own, which schemathesis reads rather than tests.
async fn documented_operations(c: &TestApp) -> BTreeSet<String> {
    let document: serde_json::Value = c
        .client
        .get(c.url("/v1/openapi.json"))
        .bearer_auth(&c.token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut operations = BTreeSet::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            operations.insert(format!("{} {path}", method.to_uppercase()));
        }
    }
    assert!(operations.remove("GET /v1/openapi.json"));
    operations
}

/// The operations a JUnit report has a test case for.
fn reported_operations(junit: &str) -> BTreeSet<String> {
    junit
        .split("<testcase name=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_string)
        .collect()
}

/// The `N generated, M passed` figures of schemathesis's summary.
fn test_cases(summary: &str) -> Option<(u64, u64)> {
    let line = summary.lines().find(|line| line.contains(" generated, "))?;
    let mut numbers = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|word| !word.is_empty())
        .map(|word| word.parse::<u64>().ok());
    Some((numbers.next()??, numbers.next()??))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_failure_in_any_operation_of_a_live_controller() {
    let binary = schemathesis();
    let c = spawn_app_with(Options {
        launch: Launch::Process,
        ..Options::default()
    })
    .await;
    populate(&c);
    let operations = documented_operations(&c).await;
    let work = tempfile::tempdir().unwrap();
    let output = tokio::task::spawn_blocking({
        let url = c.url("/v1/openapi.json");
        let token = c.token.clone();
        let dir = work.path().to_path_buf();
        move || {
            Command::new(binary)
                .arg("run")
                .arg(url)
                .args(["-H", &format!("Authorization: Bearer {token}")])
                .args(["--checks", CHECKS])
                .args(["--max-examples", EXAMPLES_PER_OPERATION])
                .args(["--seed", SEED])
                .args(["--request-timeout", "5"])
                .args(["--report", "junit", "--report-dir"])
                .arg(dir.join("report"))
                // Its example database and replay cache stay in the test's
                // directory.
                .current_dir(&dir)
                .env("NO_COLOR", "1")
                .output()
                .expect("schemathesis runs")
        }
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "schemathesis found failures ({}):\n{stdout}\n{stderr}",
        output.status
    );
    let (generated, passed) =
        test_cases(&stdout).unwrap_or_else(|| panic!("no summary of test cases in:\n{stdout}"));
    assert_eq!(generated, passed, "{stdout}");
    let junit = std::fs::read_dir(work.path().join("report"))
        .unwrap()
        .map(|entry| std::fs::read_to_string(entry.unwrap().path()).unwrap())
        .collect::<String>();
    assert!(!junit.contains("<failure"), "{junit}");
    // Every operation was reached, and not with a handful of requests; the
    // stateful phase (chains of calls following the document's links) ran.
    let mut reported = reported_operations(&junit);
    assert!(reported.remove("Stateful tests"), "{junit}");
    assert_eq!(reported, operations);
    assert!(
        generated >= 20 * operations.len() as u64,
        "only {generated} requests for {} operations: {stdout}",
        operations.len()
    );
    eprintln!("schemathesis: {generated} requests generated, {passed} passed");
}

//! Charms uploaded as archives: `POST /v1/charms` with good and bad
//! archives, deploy by the URL it answers, and `berth deploy ./dir` from a
//! working directory the controller does not share.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use berth::charms::{pack_charm_dir, MAX_ARCHIVE_BYTES};

use crate::support::app::{berth_command, spawn_app, spawn_app_with, Launch, Options, TestApp};
use crate::support::charm_dir;

const BLOG: &str = "name: blog\nsummary: A blog\nseries: [jammy]\n";

async fn upload(app: &TestApp, archive: Vec<u8>) -> reqwest::Response {
    app.admin(Method::POST, "/v1/charms")
        .header("Content-Type", "application/zip")
        .body(archive)
        .send()
        .await
        .unwrap()
}

/// A zip archive of `files`, made with the zip crate as any tool would.
fn zip_of(files: &[(&str, &[u8])]) -> Vec<u8> {
    use std::io::Write as _;
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default();
    for (name, content) in files {
        zip.start_file(*name, options).unwrap();
        zip.write_all(content).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

#[actix_web::test]
async fn an_uploaded_charm_is_stored_once_by_its_contents_and_deployed_by_its_url() {
    let app = spawn_app().await;
    let dir = charm_dir(BLOG, Some("options:\n  title: {type: string}\n"));
    let archive = pack_charm_dir(dir.path()).unwrap();

    let first = upload(&app, archive.clone()).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    let first: Value = first.json().await.unwrap();
    assert_eq!(first["charm"], "local:blog-0");
    assert_eq!(first["created"], true);
    let again = upload(&app, archive).await;
    assert_eq!(again.status(), StatusCode::OK);
    let again: Value = again.json().await.unwrap();
    assert_eq!(
        (&again["charm"], &again["sha256"]),
        (&first["charm"], &first["sha256"])
    );
    assert_eq!(again["created"], false);

    // The directory is gone: the controller deploys what it stored.
    drop(dir);
    let deployed = app
        .deploy(&json!({"charm": "local:blog-0", "num_units": 2, "config": {"title": "hi"}}))
        .await;
    assert_eq!(deployed.status(), StatusCode::CREATED);
    let deployed: Value = deployed.json().await.unwrap();
    assert_eq!(deployed["charm"], "local:blog-0");
    assert_eq!(deployed["units"].as_array().unwrap().len(), 2);
    // The charm's options came along: an unknown one is refused.
    let unknown = app
        .deploy(&json!({"charm": "local:blog-0", "application": "blog2", "config": {"nope": 1}}))
        .await;
    assert_eq!(unknown.status(), StatusCode::BAD_REQUEST);

    let missing = app.deploy(&json!({"charm": "local:nothing-0"})).await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let body: Value = missing.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("POST /v1/charms"),
        "{body}"
    );
}

#[actix_web::test]
async fn each_bad_archive_is_refused_clearly_and_stores_nothing() {
    let app = spawn_app().await;
    let before = app.store().revision();
    let cases: Vec<(&str, Vec<u8>, StatusCode, &str)> = vec![
        (
            "not a zip",
            b"PK but not really".to_vec(),
            StatusCode::BAD_REQUEST,
            "not a charm archive",
        ),
        (
            "empty",
            Vec::new(),
            StatusCode::BAD_REQUEST,
            "not a charm archive",
        ),
        (
            "escaping path",
            zip_of(&[
                ("metadata.yaml", BLOG.as_bytes()),
                ("../../etc/cron.d/x", b"x"),
            ]),
            StatusCode::BAD_REQUEST,
            "escapes the charm's root",
        ),
        (
            "absolute path",
            zip_of(&[("metadata.yaml", BLOG.as_bytes()), ("/etc/passwd", b"x")]),
            StatusCode::BAD_REQUEST,
            "escapes the charm's root",
        ),
        (
            "no metadata.yaml",
            zip_of(&[("README.md", b"hello")]),
            StatusCode::BAD_REQUEST,
            "no metadata.yaml at its root",
        ),
        (
            "bad metadata.yaml",
            zip_of(&[("metadata.yaml", b"summary: no name\n")]),
            StatusCode::BAD_REQUEST,
            "metadata.yaml: ",
        ),
        (
            "too large",
            vec![0u8; MAX_ARCHIVE_BYTES + 1],
            StatusCode::PAYLOAD_TOO_LARGE,
            "charm archive too large",
        ),
    ];
    for (what, archive, status, words) in cases {
        let answer = upload(&app, archive).await;
        assert_eq!(answer.status(), status, "{what}");
        let body: Value = answer.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(words), "{what}: {body}");
    }
    assert_eq!(app.store().revision(), before, "the change log moved");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn berth_deploy_uploads_a_local_charm_so_the_controller_needs_no_access_to_it() {
    let c = spawn_app_with(Options {
        launch: Launch::Process,
        ..Options::default()
    })
    .await;
    let deploy_from = |dir: &std::path::Path, app_name: &str| {
        berth_command()
            .args(["deploy", "./blog", app_name])
            .current_dir(dir)
            .env("BERTH_URL", &c.address)
            .env("BERTH_TOKEN", &c.token)
            .output()
            .expect("berth runs")
    };
    // Two working directories the controller knows nothing of, the same
    // charm in each.
    let (first, second) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for dir in [&first, &second] {
        std::fs::create_dir(dir.path().join("blog")).unwrap();
        std::fs::write(dir.path().join("blog/metadata.yaml"), BLOG).unwrap();
    }
    let out = deploy_from(first.path(), "blog");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("from charm \"local:blog-0\""));
    drop(first);
    let out = deploy_from(second.path(), "blog-two");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("from charm \"local:blog-0\""),
        "the same contents are the same charm, wherever they were"
    );
    // A changed charm is a new revision.
    std::fs::write(second.path().join("blog/config.yaml"), "options: {}\n").unwrap();
    let out = deploy_from(second.path(), "blog-three");
    assert!(String::from_utf8_lossy(&out.stdout).contains("from charm \"local:blog-1\""));

    // A directory that is not a charm is refused before anything is sent.
    std::fs::remove_file(second.path().join("blog/metadata.yaml")).unwrap();
    let out = deploy_from(second.path(), "blog-four");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("metadata.yaml"));
    let status: Value = c.status_json().await;
    assert_eq!(
        status["applications"].as_object().unwrap().len(),
        3,
        "{status}"
    );
}

//! The dashboard at `/`, served by a live controller and used in a real
//! headless Chromium (see [`crate::support::webdriver`]): signing in with
//! the admin token, every machine's tile in its zone's column, tiles that
//! follow changes without a reload, retrying a machine in error from the
//! page, zone buttons, a phone-sized window, a wrong token refused, the
//! model's exact cost, and what the page does when the controller refuses
//! a request: a sign-in, a read of constraints, the event stream.
//!
//! Each browser test saves screenshots under `target/dashboard/`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use berth::api::Limits;
use berth::providers::sim::SimConfig;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::support::app::{spawn_app, spawn_app_with, Backend, Launch, Options, TestApp};
use crate::support::webdriver::{Browser, ENTER, WINDOW};
use crate::support::{charm_dir, eventually, fast_provisioner};
use crate::support::{until, PATIENCE};

/// A subordinate charm, joined to its principals' units.
const NTP: &str = "name: ntp\nsubordinate: true\nrequires:\n  juju-info:\n    interface: juju-info\n    scope: container\n";

/// Where screenshots go: `target/dashboard/` (or under `CARGO_TARGET_DIR`).
fn screenshot_path(name: &str) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"))
        .join("dashboard")
        .join(name)
}

/// The zone in a machine's status `hardware`, or "" before it has one.
fn zone_in(machine: &Value) -> String {
    machine["hardware"]
        .as_str()
        .unwrap_or_default()
        .split_whitespace()
        .find_map(|word| word.strip_prefix("availability-zone="))
        .unwrap_or_default()
        .to_string()
}

/// What the page shows of each top-level machine tile.
const TILES: &str = "return [...document.querySelectorAll('#zone-grid .zone > .tiles > .tile')]
    .map(t => ({
        id: t.dataset.machine,
        state: t.dataset.state,
        column: t.closest('.zone').dataset.zone,
        type: t.querySelector('.tile-type').textContent,
        units: t.querySelector('.tile-units').textContent,
    }));";

/// Waits until machine `id`'s tile shows `state`.
async fn until_tile(browser: &Browser, id: &str, state: &str) {
    browser
        .wait_for(
            &format!("machine {id}'s tile to show {state}"),
            "const tile = document.querySelector(`.tile[data-machine=\"${arguments[0]}\"]`);
             return tile !== null && tile.dataset.state === arguments[1];",
            vec![json!(id), json!(state)],
        )
        .await;
}

/// Opens the page signed in through the address's fragment and waits for
/// the dashboard.
async fn open_signed_in(browser: &Browser, app: &TestApp) {
    browser
        .goto(&format!("{}/#token={}", app.address, app.token))
        .await;
    browser
        .wait_for(
            "the dashboard after signing in",
            "return document.body.dataset.view === 'dashboard' && document.body.dataset.revision !== undefined;",
            vec![],
        )
        .await;
}

#[tokio::test]
async fn the_page_is_served_without_a_token_under_a_strict_policy() {
    let app = spawn_app().await;
    let page = app.client.get(app.url("/")).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let header = |name: &str| {
        page.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    };
    assert_eq!(header("content-type"), "text/html; charset=utf-8");
    let policy = header("content-security-policy");
    assert!(policy.starts_with("default-src 'none';"), "{policy}");
    assert!(policy.contains("connect-src 'self'"), "{policy}");
    let html = page.text().await.unwrap();
    assert!(html.contains("<title>berth</title>"));
    for (path, content_type) in [
        ("/dashboard/dashboard.js", "text/javascript; charset=utf-8"),
        ("/dashboard/dashboard.css", "text/css; charset=utf-8"),
    ] {
        let asset = app.client.get(app.url(path)).send().await.unwrap();
        assert_eq!(asset.status(), StatusCode::OK, "{path}");
        assert_eq!(asset.headers()["content-type"], content_type, "{path}");
    }
    // The API is as it was: its routes still want the token, and a path
    // nothing serves is the JSON 404.
    let status = app.client.get(app.url("/v1/status")).send().await.unwrap();
    assert_eq!(status.status(), StatusCode::UNAUTHORIZED);
    let missing = app.client.get(app.url("/nothing")).send().await.unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let body: Value = missing.json().await.unwrap();
    assert_eq!(body["error"]["code"], "not-found");
}

#[tokio::test]
async fn a_berth_serve_process_serves_the_page_at_its_root() {
    let app = spawn_app_with(Options {
        launch: Launch::Process,
        ..Options::default()
    })
    .await;
    let page = app.client.get(app.url("/")).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    assert!(page.headers().contains_key("content-security-policy"));
    assert!(page
        .text()
        .await
        .unwrap()
        .contains("/dashboard/dashboard.js"));
}

#[actix_web::test]
async fn the_dashboard_shows_every_machine_in_its_zone_and_follows_changes_live() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = provisioning_controller().await;
    let deployed = app
        .deploy(&json!({"charm": "wordpress", "num_units": 12, "constraints": "mem=2G"}))
        .await;
    assert_eq!(deployed.status(), StatusCode::CREATED);
    // A subordinate beside each unit.
    let ntp = charm_dir(NTP, None);
    let deployed = app
        .deploy(&json!({"charm": ntp.path().to_str().unwrap()}))
        .await;
    assert_eq!(deployed.status(), StatusCode::CREATED);
    let related = app.integrate("wordpress", "ntp").await;
    assert_eq!(related.status(), StatusCode::CREATED);
    until(app.store(), "12 machines started", |s| {
        s.machines.len() == 12 && s.machines.iter().all(|m| m.hardware.is_some())
    })
    .await;

    open_signed_in(&browser, &app).await;
    // The token left the address bar and stays in the tab's session storage.
    assert_eq!(browser.current_url().await, format!("{}/", app.address));
    let kept = browser
        .execute(
            "return sessionStorage.getItem('berth.admin-token');",
            vec![],
        )
        .await;
    assert_eq!(kept, json!(app.token));

    // A tile for every machine, each in its zone's column, as the status
    // API says.
    let status = app.status_json().await;
    let machines = status["machines"].as_object().unwrap();
    assert_eq!(machines.len(), 12);
    let tiles = browser
        .wait_for(
            "12 started tiles",
            &format!(
                "const tiles = (() => {{ {TILES} }})();
                 return tiles.length === 12 && tiles.every(t => t.state === 'started') ? tiles : null;"
            ),
            vec![],
        )
        .await;
    let mut per_zone: BTreeMap<String, usize> = BTreeMap::new();
    for tile in tiles.as_array().unwrap() {
        let id = tile["id"].as_str().unwrap();
        let machine = &machines[id];
        let zone = zone_in(machine);
        assert!(!zone.is_empty(), "machine {id} has no zone: {machine}");
        assert_eq!(tile["column"], json!(zone), "machine {id}");
        assert_eq!(tile["type"], machine["instance-type"], "machine {id}");
        *per_zone.entry(zone).or_default() += 1;
    }
    let units = status["applications"]["wordpress"]["units"]
        .as_object()
        .unwrap();
    for (unit, view) in units {
        let machine = view["machine"].as_str().unwrap();
        let tile = tiles
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == machine)
            .unwrap();
        assert!(
            tile["units"].as_str().unwrap().contains(unit.as_str()),
            "{unit} not on {tile}"
        );
        for subordinate in view["subordinates"].as_object().unwrap().keys() {
            assert!(
                tile["units"]
                    .as_str()
                    .unwrap()
                    .contains(subordinate.as_str()),
                "{subordinate} not on {tile}"
            );
        }
    }
    assert_eq!(
        per_zone,
        BTreeMap::from([
            ("sim-a".to_string(), 4),
            ("sim-b".to_string(), 4),
            ("sim-c".to_string(), 4)
        ])
    );
    // The application, its scale and constraints; its units listed once
    // opened (from the keyboard).
    let row = browser
        .wait_for(
            "the application's row with its constraints",
            "const row = document.querySelector('tr[data-application=\"wordpress\"]');
             const constraints = row && row.querySelector('td.constraints').textContent;
             return constraints && constraints !== '…'
                 ? { scale: row.querySelector('td.scale').textContent, constraints }
                 : null;",
            vec![],
        )
        .await;
    assert_eq!(row, json!({"scale": "12", "constraints": "mem=2048M"}));
    let rows = browser
        .execute(
            "return [...document.querySelectorAll('#application-rows tr')].map(row => [
                 row.dataset.application,
                 row.querySelector('td.scale').textContent,
                 row.children[5].textContent,
             ]);",
            vec![],
        )
        .await;
    assert_eq!(
        rows,
        json!([
            ["ntp", "12", "subordinate to wordpress"],
            ["wordpress", "12", "ntp"]
        ])
    );
    let summary = browser
        .get("tr[data-application=\"wordpress\"] summary")
        .await;
    browser.send_keys(&summary, ENTER).await;
    let listed = browser
        .wait_for(
            "the units listed",
            "const items = document.querySelectorAll('tr[data-application=\"wordpress\"] details > ul.units > li');
             return items.length > 0 ? [...items].map(li => li.textContent) : null;",
            vec![],
        )
        .await;
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 12, "{listed:?}");
    // Each with its subordinate beneath it.
    assert!(
        listed[0]
            .as_str()
            .unwrap()
            .starts_with("wordpress/0 on machine 0: idle / unknownntp/"),
        "{listed:?}"
    );
    browser
        .execute(
            "document.getElementById('applications').scrollIntoView(); return null;",
            vec![],
        )
        .await;
    browser
        .save_screenshot(&screenshot_path("applications.png"))
        .await;
    browser
        .execute("window.scrollTo(0, 0); return null;", vec![])
        .await;

    // From here on the page must not reload: a reload would lose this.
    browser
        .execute("window.notReloaded = true; return null;", vec![])
        .await;

    // A machine no instance type fits appears, then shows its error, live.
    let added = app
        .add_machines(&json!({"constraints": "mem=100000G"}))
        .await;
    assert_eq!(added.status(), StatusCode::CREATED);
    let added: Value = added.json().await.unwrap();
    let failed = added["machines"][0].as_str().unwrap().to_string();
    until_tile(&browser, &failed, "error").await;
    let column = browser
        .execute(
            "return document.querySelector(`.tile[data-machine=\"${arguments[0]}\"]`).closest('.zone').dataset.zone;",
            vec![json!(failed)],
        )
        .await;
    assert_eq!(column, json!(""), "a machine in error is in no zone");
    let item = browser
        .get(&format!("li[data-error-machine=\"{failed}\"]"))
        .await;
    let text = browser.text(&item).await;
    assert!(
        text.contains("no instance type satisfies constraints"),
        "{text}"
    );
    browser.save_screenshot(&screenshot_path("main.png")).await;

    // Retry it from the page with constraints that fit: the same request as
    // `berth retry-provisioning ID --constraints ...`.
    let input = browser
        .get(&format!("li[data-error-machine=\"{failed}\"] input"))
        .await;
    browser.send_keys(&input, "mem=2G").await;
    let retry = browser
        .get(&format!("li[data-error-machine=\"{failed}\"] button"))
        .await;
    assert_eq!(browser.text(&retry).await, "Retry");
    browser.click(&retry).await;
    until_tile(&browser, &failed, "started").await;
    let status = app.status_json().await;
    let machine = &status["machines"][failed.as_str()];
    assert_eq!(machine["juju-status"]["current"], "started");
    assert_eq!(machine["constraints"], "mem=2048M");
    let zone = zone_in(machine);
    browser
        .wait_for(
            "the retried machine's tile in its zone's column",
            "const tile = document.querySelector(`.tile[data-machine=\"${arguments[0]}\"]`);
             return tile !== null && tile.closest('.zone').dataset.zone === arguments[1];",
            vec![json!(failed), json!(zone)],
        )
        .await;
    browser
        .wait_for(
            "the error list to empty",
            "return document.querySelectorAll('#error-list li').length === 0;",
            vec![],
        )
        .await;

    // Removing the machine through the API takes its tile away, and the
    // page notices within moments, without reloading.
    let removed = app.remove_machine(&failed, false).await;
    assert!(removed.status().is_success(), "{}", removed.status());
    until(app.store(), "the machine gone", |s| s.machines.len() == 12).await;
    let gone_at = Instant::now();
    browser
        .wait_for(
            "the removed machine's tile to go",
            "return document.querySelector(`.tile[data-machine=\"${arguments[0]}\"]`) === null;",
            vec![json!(failed)],
        )
        .await;
    eprintln!(
        "the page showed the removal {:?} after the store",
        gone_at.elapsed()
    );
    assert_eq!(
        browser
            .execute("return window.notReloaded === true;", vec![])
            .await,
        json!(true)
    );

    // The zone buttons: disable sim-c from its column, then enable it.
    let toggle = browser
        .get(".zone[data-zone=\"sim-c\"] .zone-head button")
        .await;
    assert_eq!(browser.text(&toggle).await, "Disable");
    browser.click(&toggle).await;
    eventually("sim-c disabled", PATIENCE, || async {
        let zones: Value = app.zones().await.json().await.unwrap();
        let disabled = zones
            .as_array()
            .unwrap()
            .iter()
            .any(|z| z["name"] == "sim-c" && z["disabled"] == true);
        if disabled {
            Ok(())
        } else {
            Err(zones)
        }
    })
    .await;
    browser
        .wait_for(
            "sim-c's button to offer Enable",
            "const button = document.querySelector('.zone[data-zone=\"sim-c\"] .zone-head button');
             return button.textContent === 'Enable' && !button.disabled;",
            vec![],
        )
        .await;
    browser.click(&toggle).await;
    browser
        .wait_for(
            "sim-c's button to offer Disable again",
            "const button = document.querySelector('.zone[data-zone=\"sim-c\"] .zone-head button');
             return button.textContent === 'Disable' && !button.disabled;",
            vec![],
        )
        .await;
    let zones: Value = app.zones().await.json().await.unwrap();
    assert!(zones
        .as_array()
        .unwrap()
        .iter()
        .all(|z| z["disabled"] == false));

    // On a phone-sized screen the zones stack in one column and nothing
    // is wider than the screen.
    browser.set_window_size(390, 844).await;
    let layout = browser
        .wait_for(
            "the narrow layout",
            "const zones = [...document.querySelectorAll('#zone-grid .zone:not([hidden])')];
             const lefts = new Set(zones.map(z => Math.round(z.getBoundingClientRect().left)));
             return window.innerWidth < 640 && lefts.size === 1
                 ? { zones: zones.length, scroll: document.documentElement.scrollWidth, width: window.innerWidth }
                 : null;",
            vec![],
        )
        .await;
    assert_eq!(layout["zones"], 3, "{layout}");
    assert!(
        layout["scroll"].as_u64() <= layout["width"].as_u64(),
        "wider than the screen: {layout}"
    );
    browser.save_screenshot(&screenshot_path("phone.png")).await;
    browser.set_window_size(WINDOW.0, WINDOW.1).await;
    browser.quit().await;
}

#[tokio::test]
async fn a_wrong_token_is_refused_and_the_sign_in_form_stays() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = spawn_app().await;
    browser.goto(&app.url("/")).await;
    browser
        .wait_for(
            "the sign-in form",
            "return document.body.dataset.view === 'sign-in';",
            vec![],
        )
        .await;

    // Typed, and sent with the keyboard.
    let input = browser.get("#token").await;
    browser.send_keys(&input, "not-the-token").await;
    browser.send_keys(&input, ENTER).await;
    let refused = browser
        .wait_for(
            "the refusal",
            "const error = document.getElementById('sign-in-error');
             return error.hidden ? null : error.textContent;",
            vec![],
        )
        .await;
    assert!(
        refused.as_str().unwrap().contains("refused that token"),
        "{refused}"
    );
    let after = browser
        .execute(
            "return {
                view: document.body.dataset.view,
                dashboardHidden: document.getElementById('dashboard').hidden,
                kept: sessionStorage.getItem('berth.admin-token'),
            };",
            vec![],
        )
        .await;
    assert_eq!(
        after,
        json!({"view": "sign-in", "dashboardHidden": true, "kept": null})
    );
    browser
        .save_screenshot(&screenshot_path("refused.png"))
        .await;

    // Through the address: refused the same way, and the address cleared.
    browser.goto("about:blank").await;
    browser
        .goto(&format!("{}/#token=wrong-token", app.address))
        .await;
    browser
        .wait_for(
            "the refusal of the address's token",
            "const error = document.getElementById('sign-in-error');
             return document.body.dataset.view === 'sign-in' && !error.hidden;",
            vec![],
        )
        .await;
    assert_eq!(browser.current_url().await, format!("{}/", app.address));

    // The right token, typed and submitted with the button.
    let input = browser.get("#token").await;
    browser.send_keys(&input, &app.token).await;
    browser
        .click(&browser.get("#sign-in-form button").await)
        .await;
    browser
        .wait_for(
            "the dashboard",
            "return document.body.dataset.view === 'dashboard';",
            vec![],
        )
        .await;

    // Signing out forgets the token.
    browser.click(&browser.get("#sign-out").await).await;
    let out = browser
        .wait_for(
            "the sign-in form again",
            "return document.body.dataset.view === 'sign-in'
                ? { kept: sessionStorage.getItem('berth.admin-token') }
                : null;",
            vec![],
        )
        .await;
    assert_eq!(out, json!({"kept": null}));
    browser.quit().await;
}

/// Replaces the page's `fetch` so that the first `arguments[1]` requests
/// to a path ending with `arguments[0]` are answered as a controller
/// shedding load answers: a 503 with its JSON error, saying `arguments[2]`.
/// When each request to such a path was made (`performance.now()`) is
/// kept in `window.stubbed`.
const REFUSE_FIRST: &str = "const [suffix, refusals, message] = arguments;
    const through = window.fetch;
    window.stubbed = [];
    window.fetch = (resource, options) => {
        if (new URL(String(resource), location.href).pathname.endsWith(suffix)) {
            window.stubbed.push(performance.now());
            if (window.stubbed.length <= refusals) {
                return Promise.resolve(new Response(
                    JSON.stringify({ error: { code: 'unavailable', message } }),
                    { status: 503, headers: { 'Content-Type': 'application/json' } }));
            }
        }
        return through.call(window, resource, options);
    };
    return null;";

/// Opens the page without a token and waits for the sign-in form.
async fn open_sign_in(browser: &Browser, app: &TestApp) {
    browser.goto(&app.url("/")).await;
    browser
        .wait_for(
            "the sign-in form",
            "return document.body.dataset.view === 'sign-in';",
            vec![],
        )
        .await;
}

/// A controller on SQLite whose engine provisions on the simulated cloud.
async fn provisioning_controller() -> TestApp {
    spawn_app_with(Options::engine(
        Backend::Sqlite,
        SimConfig::default(),
        fast_provisioner(),
    ))
    .await
}

/// Types the token into the sign-in form and sends it with the keyboard.
async fn type_token(browser: &Browser, app: &TestApp) {
    let input = browser.get("#token").await;
    browser.send_keys(&input, &app.token).await;
    browser.send_keys(&input, ENTER).await;
}

#[actix_web::test]
async fn the_model_cost_shows_its_exact_price_and_goes_on_signing_out() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = provisioning_controller().await;
    // One of the cheapest instance types: $0.0047 an hour, which two
    // decimal places would show as $0.00.
    let added = app
        .add_machines(&json!({"constraints": "instance-type=t3a.nano"}))
        .await;
    assert_eq!(added.status(), StatusCode::CREATED);
    until(app.store(), "the machine started", |s| {
        s.machines.len() == 1 && s.machines.iter().all(|m| m.hardware.is_some())
    })
    .await;
    let status = app.status_json().await;
    assert_eq!(status["model"]["hourly-cost"], "0.0047");

    open_signed_in(&browser, &app).await;
    let cost = browser
        .wait_for(
            "the model's cost",
            "const cost = document.getElementById('cost');
             return cost.hidden ? null : cost.textContent;",
            vec![],
        )
        .await;
    assert_eq!(cost, json!("$0.0047 an hour"));

    // Signing out takes it away with the rest of the model.
    browser.click(&browser.get("#sign-out").await).await;
    let out = browser
        .wait_for(
            "the sign-in form again",
            "const cost = document.getElementById('cost');
             return document.body.dataset.view === 'sign-in'
                ? { hidden: cost.hidden, text: cost.textContent }
                : null;",
            vec![],
        )
        .await;
    assert_eq!(out, json!({"hidden": true, "text": ""}));
    browser.quit().await;
}

#[tokio::test]
async fn a_sign_in_the_controller_cannot_answer_keeps_the_token_to_try_again() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = spawn_app().await;
    open_sign_in(&browser, &app).await;
    // The first status read is refused.
    browser
        .execute(
            REFUSE_FIRST,
            vec![json!("/v1/status"), json!(1), json!("the store is busy")],
        )
        .await;
    type_token(&browser, &app).await;
    let shown = browser
        .wait_for(
            "the failure",
            "const error = document.getElementById('sign-in-error');
             return error.hidden ? null : {
                 error: error.textContent,
                 view: document.body.dataset.view,
                 token: document.getElementById('token').value,
             };",
            vec![],
        )
        .await;
    assert_eq!(
        shown,
        json!({
            "error": "Cannot sign in: the store is busy. Try signing in again.",
            "view": "sign-in",
            "token": app.token,
        })
    );
    // Signing in again, as it says, with the token still in the form.
    browser
        .click(&browser.get("#sign-in-form button").await)
        .await;
    browser
        .wait_for(
            "the dashboard",
            "return document.body.dataset.view === 'dashboard' && document.body.dataset.revision !== undefined;",
            vec![],
        )
        .await;
    browser.quit().await;
}

#[tokio::test]
async fn constraints_the_controller_cannot_read_are_read_again_after_a_wait() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = spawn_app().await;
    let deployed = app
        .deploy(&json!({"charm": "wordpress", "constraints": "mem=2G"}))
        .await;
    assert_eq!(deployed.status(), StatusCode::CREATED);
    open_sign_in(&browser, &app).await;
    // The first read of the application's constraints is refused.
    browser
        .execute(
            REFUSE_FIRST,
            vec![
                json!("/v1/applications/wordpress/constraints"),
                json!(1),
                json!("the controller is busy"),
            ],
        )
        .await;
    type_token(&browser, &app).await;
    browser
        .wait_for(
            "the constraints shown unavailable",
            "const cell = document.querySelector('tr[data-application=\"wordpress\"] td.constraints');
             return cell !== null && cell.textContent === 'unavailable';",
            vec![],
        )
        .await;
    browser
        .wait_for(
            "the constraints read again",
            "const cell = document.querySelector('tr[data-application=\"wordpress\"] td.constraints');
             return cell !== null && cell.textContent === 'mem=2048M';",
            vec![],
        )
        .await;
    // Read twice in all: refused, then again after a wait, not at once.
    let reads = browser.execute("return window.stubbed;", vec![]).await;
    let reads: Vec<f64> = reads
        .as_array()
        .unwrap()
        .iter()
        .map(|at| at.as_f64().unwrap())
        .collect();
    assert_eq!(reads.len(), 2, "{reads:?}");
    assert!(
        reads[1] - reads[0] >= 1500.0,
        "read again {} ms after the refusal",
        reads[1] - reads[0]
    );
    browser.quit().await;
}

#[tokio::test]
async fn a_refused_event_stream_is_explained_and_the_page_still_follows_the_status() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = spawn_app_with(Options {
        limits: Limits {
            max_event_streams: 1,
            // Frequent writes, so that the server notices a stream whose
            // reader went away and frees its place at once.
            event_keep_alive: Duration::from_millis(100),
            ..Limits::default()
        },
        ..Options::default()
    })
    .await;
    // Another client holds the one stream the controller allows.
    let held = app.events(None, None).await;
    assert_eq!(held.status(), StatusCode::OK);

    open_signed_in(&browser, &app).await;
    let refused = browser
        .wait_for(
            "the refusal explained",
            "const said = document.getElementById('announce').textContent;
             const live = document.getElementById('live');
             return said.includes('too many event streams')
                 ? { said, live: live.dataset.live, title: live.title }
                 : null;",
            vec![],
        )
        .await;
    assert_eq!(
        refused,
        json!({
            "said": "Cannot follow changes live: too many event streams are open (the limit is 1); retry later",
            "live": "off",
            "title": "too many event streams are open (the limit is 1); retry later",
        })
    );
    browser
        .save_screenshot(&screenshot_path("stream-refused.png"))
        .await;

    // A machine added meanwhile still shows, from the status.
    add_machine_and_see_its_tile(&browser, &app).await;

    // Once the other client lets go, the page follows the change log
    // again and the message goes.
    drop(held);
    browser
        .wait_for(
            "the stream open",
            "return document.getElementById('live').dataset.live === 'on'
                 && document.getElementById('announce').textContent === '';",
            vec![],
        )
        .await;
    add_machine_and_see_its_tile(&browser, &app).await;
    browser.quit().await;
}

/// Adds a machine through the API and waits for the page to draw its tile.
async fn add_machine_and_see_its_tile(browser: &Browser, app: &TestApp) {
    let added = app.add_machines(&json!({})).await;
    assert_eq!(added.status(), StatusCode::CREATED);
    let added: Value = added.json().await.unwrap();
    let machine = added["machines"][0].as_str().unwrap().to_string();
    browser
        .wait_for(
            &format!("machine {machine}'s tile"),
            "return document.querySelector(`.tile[data-machine=\"${arguments[0]}\"]`) !== null;",
            vec![json!(machine)],
        )
        .await;
}

/// A model of 10,000 machines, followed by the page while it is deployed:
/// the page keeps up with the change log's flood, draws a tile for each
/// machine, and a later change still shows within moments, touching
/// nothing else. Heavy (10,000 machines provisioned, a browser holding
/// them all), so it runs only when asked:
/// `cargo test --test integration -- --ignored ten_thousand --nocapture`.
#[actix_web::test]
#[ignore = "10,000 machines: run by hand"]
async fn ten_thousand_machines_are_drawn_and_a_change_still_shows_live() {
    const MACHINES: usize = 10_000;
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = provisioning_controller().await;
    open_signed_in(&browser, &app).await;

    let asked = Instant::now();
    let deployed = app
        .deploy(&json!({"charm": "wordpress", "num_units": 1000}))
        .await;
    assert_eq!(deployed.status(), StatusCode::CREATED);
    for _ in 1..MACHINES / 1000 {
        let added = app
            .add_units("wordpress", &json!({"num_units": 1000}))
            .await;
        assert!(added.status().is_success(), "{}", added.status());
    }
    until(app.store(), "10,000 machines started", |s| {
        s.machines.len() == MACHINES && s.machines.iter().all(|m| m.hardware.is_some())
    })
    .await;
    let settled = asked.elapsed();
    // A cheap check, so that polling does not slow the page it watches:
    // the page has applied a status at least as new as the store's, and
    // has no tile left to draw.
    let revision = app.store().revision();
    browser
        .wait_for(
            "the page to catch up",
            "return Number(document.body.dataset.revision) >= arguments[0]
                && document.body.dataset.tiles === 'settled';",
            vec![json!(revision)],
        )
        .await;
    let drawn = asked.elapsed();
    let started = browser
        .execute(
            "return document.querySelectorAll('#zone-grid .tile[data-state=\"started\"]').length;",
            vec![],
        )
        .await;
    assert_eq!(started, json!(MACHINES));
    let timings = browser
        .execute(
            "const sum = name => {
                 const all = performance.getEntriesByName(name).map(e => e.duration);
                 return { count: all.length, total_ms: Math.round(all.reduce((a, b) => a + b, 0)),
                          max_ms: Math.round(Math.max(0, ...all)) };
             };
             return { fetched: sum('berth:status-fetched'), applied: sum('berth:status-applied'),
                      drawn: sum('berth:tiles-drawn') };",
            vec![],
        )
        .await;
    eprintln!("the page's work while following the deploy: {timings}");
    browser
        .save_screenshot(&screenshot_path("ten-thousand.png"))
        .await;

    // One machine removed through the API: its tile goes, and nothing
    // else is redrawn.
    browser
        .execute(
            "window.notReloaded = true;
             window.redrawn = 0;
             new MutationObserver(records => { window.redrawn += records.length; })
                 .observe(document.getElementById('zone-grid'), { childList: true, subtree: true });
             return null;",
            vec![],
        )
        .await;
    let asked = Instant::now();
    let removed = app.remove_machine("0", true).await;
    assert!(removed.status().is_success(), "{}", removed.status());
    browser
        .wait_for(
            "machine 0's tile to go",
            "return document.querySelector('.tile[data-machine=\"0\"]') === null;",
            vec![],
        )
        .await;
    let shown = asked.elapsed();
    let redrawn = browser
        .execute(
            "return window.notReloaded === true ? window.redrawn : null;",
            vec![],
        )
        .await;
    eprintln!(
        "{MACHINES} machines: settled in the store {settled:?} after the deploy, every tile \
         drawn started {drawn:?} after it; a removal shown {shown:?} after it was asked for, \
         with {redrawn} DOM mutations"
    );
    assert!(redrawn.as_u64().is_some_and(|n| n < 100), "{redrawn}");
    browser.quit().await;
}

//! Every way to be refused, as one table: missing, wrong, old and
//! misplaced admin tokens; unsigned, forged, tampered, stale, future and
//! replayed webhooks; a spent one-time password, another machine's
//! password, and one machine's credential used for another. Each is
//! refused with its documented status and code, and the change log does
//! not move.

use reqwest::{Response, StatusCode};
use serde_json::{json, Value};

use berth::api::webhooks::sign;

use crate::support::app::{now_secs, spawn_app, spawn_app_with, Options, TestApp, WEBHOOK_SECRET};
use crate::support::ec2_event;

async fn checked_in(app: &TestApp, machine: &str) -> (String, String) {
    let otp = app.launch(machine).await;
    let response = app.agent_connect(machine, otp.expose()).await;
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    (
        otp.expose().to_string(),
        body["credential"].as_str().unwrap().to_string(),
    )
}

fn status_get(app: &TestApp) -> reqwest::RequestBuilder {
    app.client.get(app.url("/v1/status"))
}

#[tokio::test]
async fn every_way_to_be_refused_has_its_status_and_moves_nothing() {
    // A token from the site's previous life: replaced at the next start.
    let earlier = spawn_app().await;
    let old_token = earlier.token.clone();
    let site = earlier.site.clone();
    drop(earlier);
    let app = spawn_app_with(Options {
        site: Some(site),
        ..Options::default()
    })
    .await;
    assert_ne!(app.token, old_token);

    app.add_machines(&json!({"count": 2})).await;
    let (otp0, credential0) = checked_in(&app, "0").await;
    let otp1 = app.launch("1").await;
    let now = now_secs();
    let body = ec2_event("i-0abc", "running");
    let delivered = app.signed_webhook_at("ec2", &body, now).await;
    assert_eq!(delivered.status(), StatusCode::ACCEPTED);
    let before = app.store().revision();
    let forwarded = app.link.changes().len();

    let other = ec2_event("i-0abc", "terminated");
    let signed_now = sign(WEBHOOK_SECRET, now, body.as_bytes());
    let cases: Vec<(&str, Response, StatusCode)> = vec![
        (
            "no token",
            status_get(&app).send().await.unwrap(),
            StatusCode::UNAUTHORIZED,
        ),
        (
            "wrong token",
            status_get(&app)
                .bearer_auth("not-the-token")
                .send()
                .await
                .unwrap(),
            StatusCode::UNAUTHORIZED,
        ),
        (
            "old token",
            status_get(&app)
                .bearer_auth(&old_token)
                .send()
                .await
                .unwrap(),
            StatusCode::UNAUTHORIZED,
        ),
        (
            "token in another scheme",
            status_get(&app)
                .header("Authorization", format!("Basic {}", app.token))
                .send()
                .await
                .unwrap(),
            StatusCode::UNAUTHORIZED,
        ),
        (
            "an agent's credential as the admin token",
            status_get(&app)
                .bearer_auth(&credential0)
                .send()
                .await
                .unwrap(),
            StatusCode::UNAUTHORIZED,
        ),
        (
            "the admin token as an agent's credential",
            app.agent_heartbeat("0", &app.token).await,
            StatusCode::UNAUTHORIZED,
        ),
        (
            "one machine's credential for another",
            app.agent_heartbeat("1", &credential0).await,
            StatusCode::UNAUTHORIZED,
        ),
        (
            "a spent one-time password",
            app.agent_connect("0", &otp0).await,
            StatusCode::UNAUTHORIZED,
        ),
        (
            "another machine's one-time password",
            app.agent_connect("0", otp1.expose()).await,
            StatusCode::UNAUTHORIZED,
        ),
        (
            "an unsigned webhook",
            app.webhook("ec2", &body, None, None).await,
            StatusCode::UNAUTHORIZED,
        ),
        (
            "a webhook signed with another secret",
            app.webhook(
                "ec2",
                &body,
                Some(&now.to_string()),
                Some(&sign("not-the-secret", now, body.as_bytes())),
            )
            .await,
            StatusCode::UNAUTHORIZED,
        ),
        (
            "a webhook whose body was changed after signing",
            app.webhook("ec2", &other, Some(&now.to_string()), Some(&signed_now))
                .await,
            StatusCode::UNAUTHORIZED,
        ),
        (
            "a stale webhook",
            app.signed_webhook_at("ec2", &other, now - 301).await,
            StatusCode::UNAUTHORIZED,
        ),
        (
            "a webhook from the future",
            app.signed_webhook_at("ec2", &other, now + 120).await,
            StatusCode::UNAUTHORIZED,
        ),
        (
            "a replayed webhook",
            app.signed_webhook_at("ec2", &body, now).await,
            StatusCode::CONFLICT,
        ),
    ];
    let mut refused = 0;
    for (case, response, expected) in cases {
        assert_eq!(response.status(), expected, "{case}");
        let error: Value = response.json().await.unwrap();
        let code = error["error"]["code"].as_str().unwrap_or_default();
        let wanted = match expected {
            StatusCode::UNAUTHORIZED => "unauthorized",
            _ => "conflict",
        };
        assert_eq!(code, wanted, "{case}: {error}");
        assert!(
            !error["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .is_empty(),
            "{case}"
        );
        refused += 1;
    }
    assert_eq!(refused, 15);
    assert_eq!(app.store().revision(), before, "the change log moved");
    assert_eq!(
        app.link.changes().len(),
        forwarded,
        "a refused webhook was forwarded"
    );
    // Still in force: the right ones.
    let ok = status_get(&app)
        .bearer_auth(&app.token)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
}

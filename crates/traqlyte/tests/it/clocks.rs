//! Servers whose own clocks disagree (a test hook moves a server's clock ten minutes
//! ahead or behind) decide and stamp on the store's clock:
//! - a unit assigned through a server running ahead and converting a moment later through
//!   one running behind is counted in its window by event time and by arrival, as on one
//!   server (before, the outcome's arrival was stamped twenty minutes before the
//!   assignment and fell outside both windows);
//! - a server running ahead does not take over an idempotency reservation another server
//!   is still running (before, it judged it ten minutes old and ran the request again);
//! - a login link minted through a server running behind opens through another (before,
//!   it had expired eight minutes before it was minted).

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::experiments::{create_published, metric, report};
use crate::helpers::{spawn_app, Backend, ServerProcess, TestApp};

crate::on_both_backends!(
    servers_with_skewed_clocks_stamp_times_on_the_stores,
    a_server_running_ahead_does_not_take_over_a_request_in_flight,
    a_login_link_minted_through_a_server_running_behind_opens_elsewhere,
);

const SKEW_MS: i64 = 600_000;

fn skewed(app: &TestApp, skew_ms: i64) -> ServerProcess {
    ServerProcess::start_with_env(
        app.database_url(),
        &[],
        &[("TRAQLYTE_TEST_CLOCK_SKEW_MS", &skew_ms.to_string())],
    )
}

async fn post(app: &TestApp, server: &ServerProcess, path: &str, body: &Value) -> Value {
    let answer = app
        .send(
            app.client
                .post(format!("{}{path}", server.address))
                .bearer_auth(&app.key)
                .json(body),
        )
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{path}: {}", answer.body);
    answer.body
}

async fn servers_with_skewed_clocks_stamp_times_on_the_stores(backend: Backend) {
    let app = spawn_app(backend).await;
    let body = json!({
        "key": "clocks", "name": "Clocks",
        "arms": [{"key": "control", "weight": 1}, {"key": "treatment", "weight": 1}],
        "metrics": [{"name": "revenue", "kind": "sum", "window_hours": 1}]
    });
    let campaign = create_published(&app, &body).await;
    let (ahead, behind) = (skewed(&app, SKEW_MS), skewed(&app, -SKEW_MS));

    let assigned = post(
        &app,
        &ahead,
        "/assignments",
        &json!({"campaign_id": campaign, "unit_id": "u"}),
    )
    .await;
    let store_now = app.store.clock_us().await.expect("clock");
    let stored_at: i64 = {
        let tenant = app.tenant().await;
        let id = assigned["assignment_id"].as_str().expect("id");
        let id = traqlyte_store::AssignmentId::try_from(id).expect("an assignment id");
        let rows = app
            .store
            .assignments_by_id(&tenant, &[id])
            .await
            .expect("assignments");
        rows[0].assigned_at_us
    };
    assert!(
        (store_now - 5_000_000..=store_now + 1_000_000).contains(&stored_at),
        "assigned at {stored_at}, the store's clock read {store_now} just after"
    );

    // Converted a second later (event time on the store's clock), through the other server.
    let occurred = traqlyte_identity::format_rfc3339_micros(store_now + 1_000_000);
    post(
        &app,
        &behind,
        "/outcome",
        &json!({"assignment_id": assigned["assignment_id"], "dedupe_key": "order-1",
                "metric": "revenue", "value": 5.0, "occurred_at": occurred}),
    )
    .await;
    let arm = assigned["arm"].as_str().expect("arm");
    let figures = report(&app, &campaign).await;
    let revenue = metric(&figures, arm, "revenue");
    assert_eq!(revenue["stored_events"], 1, "by event time: {revenue}");
    assert_eq!(
        revenue["arrival_time"]["stored_events"], 1,
        "by arrival: {revenue}"
    );
}

async fn a_server_running_ahead_does_not_take_over_a_request_in_flight(backend: Backend) {
    let app = spawn_app(backend).await;
    let created = app
        .post_json("/campaigns", &crate::idempotency::campaign_body("clocks"))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let id = created.body["id"].as_str().expect("id").to_string();
    // Its publish holds the reservation for a minute, well inside the 30 s cutoff at first.
    let slow = ServerProcess::start_with_env(
        app.database_url(),
        &[],
        &[("TRAQLYTE_TEST_PUBLISH_DELAY_MS", "60000")],
    );
    let ahead = skewed(&app, SKEW_MS);
    let publish = |address: &str| {
        app.client
            .post(format!("{address}/campaigns/{id}/publish"))
            .bearer_auth(&app.key)
            .header("X-TL-Idempotency-Key", "clock-publish")
            .send()
    };
    let hung = tokio::spawn(publish(&slow.address));
    crate::idempotency::wait_for_reservation(&app, "clock-publish").await;
    let answer = publish(&ahead.address).await.expect("sent");
    assert_eq!(answer.status(), StatusCode::CONFLICT);
    let body: Value = answer.json().await.expect("JSON");
    assert_eq!(body["error"]["code"], "request_in_flight", "{body}");
    hung.abort();
}

async fn a_login_link_minted_through_a_server_running_behind_opens_elsewhere(backend: Backend) {
    let app = spawn_app(backend).await;
    let behind = skewed(&app, -SKEW_MS);
    let minted = app
        .send(
            app.client
                .post(format!("{}/ui/tokens", behind.address))
                .bearer_auth(&app.key)
                .json(&json!({})),
        )
        .await;
    assert_eq!(minted.status, StatusCode::CREATED, "{}", minted.body);
    let login_path = minted.body["login_path"].as_str().expect("login_path");
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    // Typed into the address bar, as a browser says.
    let opened = browser
        .get(app.url(login_path))
        .header("sec-fetch-site", "none")
        .send()
        .await
        .expect("sent");
    let status = opened.status();
    let cookie = opened.headers().contains_key("set-cookie");
    let page = opened.text().await.expect("text");
    assert_eq!(status, StatusCode::SEE_OTHER, "{page}");
    assert!(cookie, "a session was started");
}

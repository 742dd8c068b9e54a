//! Servers whose own clocks disagree stamp times on the store's clock: a unit assigned
//! through a server whose clock runs ten minutes ahead and converting a moment later
//! through one ten minutes behind is counted in its window by event time and by arrival,
//! as on one server. Before, the outcome's arrival was stamped twenty minutes before the
//! assignment and fell outside both windows.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::experiments::{create_published, metric, report};
use crate::helpers::{spawn_app, Backend, ServerProcess, TestApp};

crate::on_both_backends!(servers_with_skewed_clocks_stamp_times_on_the_stores);

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
        let tenant = app
            .store
            .tenant_for_key(&traqlyte_store::ApiKey::parse(&app.key).expect("key"))
            .await
            .expect("lookup")
            .expect("tenant");
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
        (store_now - 5_000_000..=store_now).contains(&stored_at),
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

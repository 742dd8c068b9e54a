//! Two different numbers must never become one identity: a literal whose exact decimal
//! value differs from its canonical double's is refused with `number_out_of_range`
//! naming the field, alone in a batch, on every route that reads JSON.

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::{checkout_event, spawn_app, Backend};

crate::on_both_backends!(
    numbers_a_double_cannot_hold_are_refused_instead_of_merged,
    a_batch_refuses_only_the_item_with_an_inexact_number,
    lineage_refuses_an_inexact_number_with_400,
);

/// A checkout event whose `params.n` is written as the raw literal `number`.
fn event_with_number(order: &str, number: &str) -> String {
    let mut event = checkout_event(order);
    event["params"]["n"] = json!("N");
    event.to_string().replace("\"N\"", number)
}

async fn numbers_a_double_cannot_hold_are_refused_instead_of_merged(backend: Backend) {
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    let path = "/events/checkout_completed";

    // 2^53 as a decimal is exact and stored; 2^53 + 1 would round onto it and be lost as
    // its "duplicate": it is refused, and the first event's row stays the only one.
    let exact = app
        .post_raw(path, event_with_number("o1", "9007199254740992.0"))
        .await;
    assert_eq!(exact.status, StatusCode::OK, "{}", exact.body);
    assert_eq!(exact.body["status"], "inserted");
    for literal in [
        "9007199254740993.0",
        "1e-400",
        "10000000000000000.5",
        "1e400",
    ] {
        let refused = app.post_raw(path, event_with_number("o1", literal)).await;
        assert_eq!(
            refused.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{literal}: {}",
            refused.body
        );
        assert_eq!(refused.code(), "number_out_of_range", "{literal}");
        assert_eq!(refused.body["error"]["field"], "/params/n", "{literal}");
    }
    assert_eq!(app.checkout_stats().await, (1, 0, 0));

    // Numbers a double holds exactly keep their identities: 1e16 and 1e16 + 2 differ.
    let a = app.post_raw(path, event_with_number("o2", "1e16")).await;
    let b = app
        .post_raw(path, event_with_number("o2", "10000000000000002.0"))
        .await;
    assert_eq!(
        (a.body["status"].clone(), b.body["status"].clone()),
        (json!("inserted"), json!("inserted"))
    );
    assert_ne!(a.body["event_id"], b.body["event_id"]);
    // `1.0` and `1` are one number: the same event, a harmless retry.
    let one = app.post_raw(path, event_with_number("o3", "1.0")).await;
    let again = app.post_raw(path, event_with_number("o3", "1")).await;
    assert_eq!(again.body["status"], "duplicate", "{}", again.body);
    assert_eq!(one.body["event_id"], again.body["event_id"]);
}

async fn a_batch_refuses_only_the_item_with_an_inexact_number(backend: Backend) {
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    let batch = format!(
        "[{}, {}, {}]",
        event_with_number("b1", "0.1"),
        event_with_number("b2", "9007199254740993.0"),
        event_with_number("b3", "129.99"),
    );
    let answer = app
        .post_raw("/events/checkout_completed/batch", batch)
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let statuses = answer.item_statuses();
    assert_eq!(statuses, ["inserted", "rejected", "inserted"]);
    let error = &answer.body["results"][1]["error"];
    assert_eq!(error["code"], "number_out_of_range");
    assert_eq!(error["field"], "/params/n");
    assert_eq!(app.checkout_stats().await, (2, 0, 0));
}

async fn lineage_refuses_an_inexact_number_with_400(backend: Backend) {
    let app = spawn_app(backend).await;
    let event = r#"{"eventType": "START", "eventTime": "2026-11-29T10:00:00Z",
        "run": {"runId": "0193a1f0-0000-7000-8000-000000000001", "facets": {"x": {"n": 1e-400}}},
        "job": {"namespace": "ns", "name": "job"}, "inputs": [], "outputs": [],
        "producer": "https://example.com", "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"}"#;
    let answer = app.post_raw("/api/v1/lineage", event).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.body);
    assert_eq!(answer.code(), "number_out_of_range");
    assert_eq!(answer.body["error"]["field"], "/run/facets/x/n");
    assert_eq!(app.get("/lineage/stats").await.body["runs"], 0);
}

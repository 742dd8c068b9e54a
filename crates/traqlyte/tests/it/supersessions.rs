//! Correcting a stored event by supersession: beside the original, never over it.

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::{checkout_event, spawn_app, Backend};
use traqlyte_store::supersessions::SUPERSESSIONS_PER_EVENT_MAX;

crate::on_both_backends!(
    a_collision_is_corrected_by_supersession_and_the_corrected_resend_is_a_retry,
    a_supersession_must_keep_the_identity_and_name_a_stored_event,
    an_event_as_deep_as_the_limit_allows_can_be_corrected,
    concurrent_corrections_of_one_event_form_one_chain,
    an_earlier_correction_sent_again_is_a_conflict_not_unchanged,
    a_first_correction_never_sorts_before_the_event_it_corrects,
    an_event_takes_at_most_its_limit_of_corrections,
);

async fn a_collision_is_corrected_by_supersession_and_the_corrected_resend_is_a_retry(
    backend: Backend,
) {
    let (app, original, id, path) = stored_order(backend, "order_1").await;
    let mut corrected = original.clone();
    corrected["note"] = json!("amount confirmed by the merchant");
    assert_eq!(app.post_event(&corrected).await.code(), "collision");

    let body = json!({"event": corrected, "reason": "merchant correction"});
    let first = app.post_json(&path, &body).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);
    assert_eq!(first.body["status"], "superseded");
    let again = app.post_json(&path, &body).await;
    assert_eq!(
        (again.status, again.body["status"].as_str()),
        (StatusCode::OK, Some("unchanged"))
    );

    let stored = app.get(&format!("/events/checkout_completed/{id}")).await;
    assert_eq!(
        stored.body["payload"], original,
        "the original row is never rewritten"
    );
    assert_eq!(stored.body["current_payload"], corrected);
    assert_eq!(
        stored.body["supersessions"][0]["reason"],
        "merchant correction"
    );
    assert_eq!(
        stored.body["supersessions"].as_array().map(Vec::len),
        Some(1)
    );

    // The producer resending the corrected content is now a retry, not a collision.
    let resend = app.post_event(&corrected).await;
    assert_eq!(
        (resend.status, resend.body["status"].as_str()),
        (StatusCode::OK, Some("duplicate"))
    );
    assert_eq!(app.checkout_stats().await, (1, 1, 1));
}

async fn a_supersession_must_keep_the_identity_and_name_a_stored_event(backend: Backend) {
    let (app, original, id, path) = stored_order(backend, "order_1").await;
    let other_identity = app
        .post_json(&path, &json!({"event": checkout_event("order_2")}))
        .await;
    assert_eq!(
        (other_identity.status, other_identity.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "identity_mismatch")
    );
    assert_eq!(other_identity.body["error"]["field"], "event");
    let no_event = app.post_json(&path, &json!({"reason": "x"})).await;
    assert_eq!(
        (no_event.status, no_event.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_supersession")
    );
    let unknown = app
        .post_json(
            &format!(
                "/events/checkout_completed/{}/supersessions",
                "0".repeat(64)
            ),
            &json!({"event": original}),
        )
        .await;
    assert_eq!(
        (unknown.status, unknown.code()),
        (StatusCode::NOT_FOUND, "event_not_found")
    );
    // The occurrence time keys the event (by its UTC day): a correction may move it
    // within the day, not to another one.
    let moved = |offset_s: i64| {
        let mut event = original.clone();
        event["occurred_at"] = json!(crate::helpers::fixture_time(offset_s));
        json!({"event": event})
    };
    let next_day = app.post_json(&path, &moved(13 * 3_600)).await;
    assert_eq!(
        (next_day.status, next_day.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "occurrence_day_changed"),
        "{}",
        next_day.body
    );
    assert_eq!(next_day.body["error"]["field"], "/occurred_at");
    let mut untimed = original.clone();
    untimed["occurred_at"] = serde_json::Value::Null;
    let removed = app.post_json(&path, &json!({"event": untimed})).await;
    assert_eq!(removed.code(), "occurrence_day_changed", "{}", removed.body);
    let same = app.post_json(&path, &json!({"event": original})).await;
    assert_eq!(
        same.body["status"], "unchanged",
        "the stored content needs no correction"
    );
    assert_eq!(
        app.get(&format!("/events/checkout_completed/{id}"))
            .await
            .body["supersessions"],
        json!([])
    );
}

/// `note` nested in `levels` arrays around `leaf`.
fn nested(levels: usize, leaf: &str) -> serde_json::Value {
    (0..levels).fold(json!(leaf), |inner, _| json!([inner]))
}

/// The supersession body holds the event one level down, under "event": an event as deep
/// as `POST /events/{contract}` takes is as deep as a correction takes.
async fn an_event_as_deep_as_the_limit_allows_can_be_corrected(backend: Backend) {
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    let deep = |levels: usize, leaf: &str| {
        let mut event = checkout_event(&format!("order_{levels}"));
        event["note"] = nested(levels, leaf);
        event
    };
    // The deepest note the single-event route takes.
    let mut deepest = None;
    for levels in 20..40 {
        let answer = app.post_event(&deep(levels, "probe")).await;
        if answer.status == StatusCode::BAD_REQUEST {
            assert_eq!(answer.code(), "too_deep", "{}", answer.body);
            break;
        }
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        deepest = Some((levels, answer.body["event_id"].as_str().map(str::to_string)));
    }
    let (levels, id) = deepest.expect("some depth is taken");
    let id = id.expect("id");
    let path = format!("/events/checkout_completed/{id}/supersessions");
    let body = json!({"event": deep(levels, "corrected"), "reason": "deep"});
    let answer = app.post_json(&path, &body).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
}

/// Corrections of one event sent at once take turns: each names the one before it, never
/// two the same version, and the history lists them in that order.
async fn concurrent_corrections_of_one_event_form_one_chain(backend: Backend) {
    let (app, original, id, path) = stored_order(backend, "order_1").await;
    let url = app.url(&path);
    let mut posts = Vec::new();
    for i in 0..8 {
        let mut corrected = original.clone();
        corrected["note"] = json!(format!("correction {i}"));
        let request = app
            .client
            .post(&url)
            .bearer_auth(&app.key)
            .header("content-type", "application/json")
            .body(json!({"event": corrected, "reason": "race"}).to_string());
        posts.push(tokio::spawn(async move { request.send().await }));
    }
    for post in posts {
        let answer = post.await.expect("task").expect("answer");
        assert_eq!(answer.status(), StatusCode::CREATED);
    }
    let event = app.get(&format!("/events/checkout_completed/{id}")).await;
    let history = event.body["supersessions"].as_array().expect("history");
    assert_eq!(history.len(), 8, "{}", event.body);
    let mut previous = event.body["fingerprint"].clone();
    for correction in history {
        assert_eq!(correction["supersedes"], previous, "{}", event.body);
        previous = correction["fingerprint"].clone();
    }
    assert_eq!(
        event.body["current_payload"]["note"],
        history[7]["payload"]["note"]
    );
}

/// Original O, corrected to B, then to C: B sent again (a late retry, or a wish to go
/// back) is a `409 supersession_conflict` naming C, not `200 unchanged` (which claimed the
/// event held B while it kept C). C again is `unchanged`.
async fn an_earlier_correction_sent_again_is_a_conflict_not_unchanged(backend: Backend) {
    let (app, original, id, path) = stored_order(backend, "order_back").await;
    let version = |note: &str| {
        let mut event = original.clone();
        event["note"] = json!(note);
        json!({"event": event})
    };
    let b = app.post_json(&path, &version("b")).await;
    assert_eq!(b.status, StatusCode::CREATED, "{}", b.body);
    let c = app.post_json(&path, &version("c")).await;
    assert_eq!(c.status, StatusCode::CREATED, "{}", c.body);
    let back = app.post_json(&path, &version("b")).await;
    assert_eq!(
        (back.status, back.code()),
        (StatusCode::CONFLICT, "supersession_conflict"),
        "{}",
        back.body
    );
    let current = c.body["fingerprint"].as_str().expect("fingerprint");
    let message = back.body["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains(current), "{message}");
    let again = app.post_json(&path, &version("c")).await;
    assert_eq!(
        (again.status, again.body["status"].as_str()),
        (StatusCode::OK, Some("unchanged"))
    );
    let stored = app.get(&format!("/events/checkout_completed/{id}")).await;
    assert_eq!(stored.body["current_payload"]["note"], "c");
    assert_eq!(
        stored.body["supersessions"].as_array().map(Vec::len),
        Some(2)
    );
}

/// A process whose clock lags the one that stored the event must still record its first
/// correction after the event: here the stored row's arrival is an hour ahead of every
/// clock (as a lagging corrector would see it).
async fn a_first_correction_never_sorts_before_the_event_it_corrects(backend: Backend) {
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    let original = checkout_event("order_clock");
    let id = app.post_event(&original).await.body["event_id"]
        .as_str()
        .expect("id")
        .to_string();
    app.execute_sql("UPDATE events SET received_at_us = received_at_us + 3600000000")
        .await;
    let mut corrected = original.clone();
    corrected["note"] = json!("corrected");
    let path = format!("/events/checkout_completed/{id}/supersessions");
    let answer = app.post_json(&path, &json!({"event": corrected})).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    let stored = app.get(&format!("/events/checkout_completed/{id}")).await;
    let received = stored.body["received_at"].as_str().expect("received_at");
    let superseded = stored.body["supersessions"][0]["superseded_at"]
        .as_str()
        .expect("superseded_at");
    // RFC 3339 in UTC with six digits: ordered as text.
    assert!(superseded > received, "{superseded} <= {received}");
}

/// A server with the checkout contract and `order` stored: the app, the event, its id
/// and its supersessions path.
async fn stored_order(
    backend: Backend,
    order: &str,
) -> (crate::helpers::TestApp, serde_json::Value, String, String) {
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    let original = checkout_event(order);
    let id = app.post_event(&original).await.body["event_id"]
        .as_str()
        .expect("id")
        .to_string();
    let path = format!("/events/checkout_completed/{id}/supersessions");
    (app, original, id, path)
}

/// An event's history is bounded: the correction past the limit is a `409` naming the
/// event, nothing is stored, and retries of stored corrections answer as before.
async fn an_event_takes_at_most_its_limit_of_corrections(backend: Backend) {
    let (app, original, id, path) = stored_order(backend, "order_1").await;
    let correction = |n: usize| {
        let mut corrected = original.clone();
        corrected["note"] = json!(format!("correction {n}"));
        json!({"event": corrected})
    };
    for n in 0..SUPERSESSIONS_PER_EVENT_MAX {
        let answer = app.post_json(&path, &correction(n)).await;
        assert_eq!(answer.status, StatusCode::CREATED, "{n}: {}", answer.body);
    }
    let past = app
        .post_json(&path, &correction(SUPERSESSIONS_PER_EVENT_MAX))
        .await;
    assert_eq!(
        (past.status, past.code()),
        (StatusCode::CONFLICT, "supersession_limit"),
        "{}",
        past.body
    );
    assert_eq!(past.body["error"]["field"], "event_id");
    // The newest stored correction sent again is still unchanged, an older one a conflict.
    let last = app
        .post_json(&path, &correction(SUPERSESSIONS_PER_EVENT_MAX - 1))
        .await;
    assert_eq!(last.body["status"], "unchanged", "{}", last.body);
    let older = app.post_json(&path, &correction(0)).await;
    assert_eq!(older.code(), "supersession_conflict", "{}", older.body);
    let stored = app.get(&format!("/events/checkout_completed/{id}")).await;
    assert_eq!(
        stored.body["supersessions"].as_array().map(Vec::len),
        Some(SUPERSESSIONS_PER_EVENT_MAX)
    );
    assert_eq!(
        stored.body["current_payload"],
        correction(SUPERSESSIONS_PER_EVENT_MAX - 1)["event"]
    );
}

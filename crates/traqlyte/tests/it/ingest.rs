//! Ingestion against a running server: concurrency from several OS processes, parameters,
//! transport fields, collisions and batches.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::{checkout_event, fire_from_processes, fixture_time, spawn_app, Backend};

crate::on_both_backends!(
    the_same_event_sent_1000_times_from_4_processes_is_stored_once,
    events_differing_only_in_a_parameter_value_are_two_rows,
    a_retry_with_different_transport_fields_is_a_counted_duplicate,
    a_collision_is_refused_logged_and_leaves_the_stored_row_unchanged,
    a_batch_judges_each_item_and_stores_the_valid_ones,
    a_batch_over_the_event_limit_is_refused_whole,
    rolling_up_tallies_keeps_every_count_in_fewer_rows,
);

async fn the_same_event_sent_1000_times_from_4_processes_is_stored_once(backend: Backend) {
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    let url = app.url("/events/checkout_completed");
    let reports =
        fire_from_processes(&[url], &app.key, &checkout_event("order_1"), 4, 250, &[]).await;
    let ok: u64 = reports
        .iter()
        .map(|r| r["statuses"]["200"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(ok, 1000, "every request must be acknowledged: {reports:?}");
    assert_eq!(app.checkout_stats().await, (1, 999, 0));
}

async fn events_differing_only_in_a_parameter_value_are_two_rows(backend: Backend) {
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    let first = checkout_event("order_1");
    let mut second = first.clone();
    second["params"]["currency"] = json!("USD");
    let a = app.post_event(&first).await;
    let b = app.post_event(&second).await;
    assert_eq!(
        (a.body["status"].as_str(), b.body["status"].as_str()),
        (Some("inserted"), Some("inserted"))
    );
    assert_ne!(a.body["event_id"], b.body["event_id"]);
    assert_eq!(app.checkout_stats().await, (2, 0, 0));
}

async fn a_retry_with_different_transport_fields_is_a_counted_duplicate(backend: Backend) {
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    let first = checkout_event("order_1");
    let mut retry = first.clone();
    retry["attempt"] = json!(2);
    retry["sent_at"] = json!(fixture_time(300));
    retry["host"] = json!("edge-7");
    let a = app.post_event(&first).await;
    let b = app.post_event(&retry).await;
    assert_eq!(b.status, StatusCode::OK);
    assert_eq!(b.body["status"], "duplicate");
    assert_eq!(a.body["event_id"], b.body["event_id"]);
    assert_eq!(app.checkout_stats().await, (1, 1, 0));
}

async fn a_collision_is_refused_logged_and_leaves_the_stored_row_unchanged(backend: Backend) {
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    let original = checkout_event("order_1");
    let stored = app.post_event(&original).await;
    let event_id = stored.body["event_id"].as_str().expect("id").to_string();
    let before = app
        .get(&format!("/events/checkout_completed/{event_id}"))
        .await;

    let mut different = original.clone();
    different["note"] = json!("same identity, different content");
    let answer = app.post_event(&different).await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert_eq!(answer.code(), "collision");
    // The route to correct it, with the contract's name (it read `/events/{contract}/`).
    assert!(
        answer.body["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains(&format!(
                "POST /events/checkout_completed/{event_id}/supersessions"
            )),
        "{}",
        answer.body
    );
    assert_eq!(
        answer.body["error"]["stored"]["event_id"],
        event_id.as_str()
    );
    assert_ne!(
        answer.body["error"]["stored"]["fingerprint"],
        answer.body["error"]["incoming"]["fingerprint"]
    );

    let after = app
        .get(&format!("/events/checkout_completed/{event_id}"))
        .await;
    assert_eq!(before.body, after.body, "the stored row must not change");
    assert_eq!(after.body["payload"], original);
    let log = app.get("/contracts/checkout_completed/collisions").await;
    let logged = &log.body["collisions"][0];
    assert_eq!(logged["event_id"], event_id.as_str());
    let incoming: Value = logged["incoming_payload"].clone();
    let stored_payload: Value = logged["stored_payload"].clone();
    assert_eq!((incoming, stored_payload), (different, original));
    // Times are RFC 3339 strings in every answer, payloads JSON values.
    for time in [&logged["received_at"], &after.body["received_at"]] {
        let text = time
            .as_str()
            .unwrap_or_else(|| panic!("not a string: {time}"));
        traqlyte_identity::parse_rfc3339_micros(text).expect("RFC 3339");
    }
    assert_eq!(after.body["occurred_at"], fixture_time(0));
    assert_eq!(app.checkout_stats().await, (1, 0, 1));
}

async fn a_batch_judges_each_item_and_stores_the_valid_ones(backend: Backend) {
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    app.post_event(&checkout_event("order_0")).await;
    let mut collision = checkout_event("order_0");
    collision["note"] = json!("changed");
    // Nested deeper than the server takes (32 by default): refused alone, as a single
    // event is (it made the whole batch `400 too_deep`).
    let mut deep = checkout_event("order_3");
    let mut inner = json!(1);
    for _ in 0..32 {
        inner = json!({ "n": inner });
    }
    deep["extra"] = inner;
    let batch = json!([
        checkout_event("order_1"),
        checkout_event("order_0"),
        "not an object",
        {"merchant_id": "merchant_42"},
        checkout_event("order_1"),
        collision,
        checkout_event("order_2"),
        deep,
    ]);
    let answer = app
        .post_json("/events/checkout_completed/batch", &batch)
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let statuses = answer.item_statuses();
    assert_eq!(
        statuses,
        [
            "inserted",
            "duplicate",
            "rejected",
            "rejected",
            "duplicate",
            "collision",
            "inserted",
            "rejected"
        ]
    );
    assert_eq!(answer.body["results"][3]["error"]["field"], "/order_id");
    assert_eq!(answer.body["results"][3]["index"], 3);
    assert_eq!(answer.body["results"][7]["error"]["code"], "too_deep");
    let totals: Vec<i64> = ["inserted", "duplicates", "collisions", "rejected"]
        .iter()
        .map(|k| answer.body[*k].as_i64().unwrap_or(-1))
        .collect();
    assert_eq!(totals, [2, 2, 1, 3]);
    assert_eq!(app.checkout_stats().await, (3, 2, 1));
}

async fn a_batch_over_the_event_limit_is_refused_whole(backend: Backend) {
    let config = traqlyte_server::ServerConfig {
        batch_events_max: 3,
        ..Default::default()
    };
    let app = crate::helpers::spawn_app_with(backend, config).await;
    app.register_checkout_contract().await;
    let batch: Vec<Value> = (0..4)
        .map(|i| checkout_event(&format!("order_{i}")))
        .collect();
    let answer = app
        .post_json("/events/checkout_completed/batch", &json!(batch))
        .await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(answer.code(), "batch_too_large");
    assert_eq!(app.checkout_stats().await, (0, 0, 0));
}

async fn rolling_up_tallies_keeps_every_count_in_fewer_rows(backend: Backend) {
    use traqlyte_store::TALLY_BUCKET_US;
    crate::helpers::clear_of_hour_boundary().await;
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    crate::helpers::clear_of_boundary(TALLY_BUCKET_US, 15_000_000).await;
    for order in 0..5 {
        app.post_event(&checkout_event(&format!("order_{order}")))
            .await;
        app.post_event(&checkout_event(&format!("order_{order}")))
            .await;
    }
    let before = app.checkout_stats().await;
    assert_eq!(before, (5, 5, 0));
    let rows_before = app.store.tally_rows().await.expect("rows");
    // Only whole minutes are folded: a cutoff inside this minute (the posts began at
    // least 15 s before its end) folds none of its rows, which a later round would fold into a second row.
    let within = app
        .store
        .roll_up_tallies(traqlyte_store::now_us() + 1_000_000)
        .await
        .expect("roll up within the minute");
    assert_eq!(within, 0, "a minute that has not ended is not folded");
    let folded = app
        .store
        .roll_up_tallies(traqlyte_store::now_us() + TALLY_BUCKET_US)
        .await
        .expect("roll up");
    assert_eq!(folded, rows_before as u64, "every per-call row is folded");
    assert_eq!(
        app.store.tally_rows().await.expect("rows"),
        1,
        "one row for the key and its minute"
    );
    assert_eq!(app.checkout_stats().await, before, "no count changes");
    // Folding again finds nothing new and changes nothing.
    assert_eq!(
        app.store
            .roll_up_tallies(traqlyte_store::now_us() + TALLY_BUCKET_US)
            .await
            .expect("again"),
        0
    );
    assert_eq!(app.checkout_stats().await, before);
    // Minutes fold into hours (the server does it 48 hours on): the same counts, in
    // /stats and in the hourly trend, from one row.
    let trend = "/ops/duplicates?bucket=hour";
    let hourly = app.get(trend).await.body;
    let received: i64 = hourly["series"][0]["buckets"]
        .as_array()
        .expect("buckets")
        .iter()
        .map(|b| b["received"].as_i64().expect("received"))
        .sum();
    assert_eq!(
        received, 10,
        "the trend counts the ten deliveries: {hourly}"
    );
    app.store
        .roll_up_tallies_to_hours(traqlyte_store::now_us() + 7_200_000_000)
        .await
        .expect("hours");
    assert_eq!(app.store.tally_rows().await.expect("rows"), 1);
    assert_eq!(app.checkout_stats().await, before, "no count changes");
    assert_eq!(
        app.get(trend).await.body,
        hourly,
        "the hourly trend is unchanged"
    );
}

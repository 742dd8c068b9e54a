//! Operations: the duplicate-rate trend per hour and source equals a workload with known
//! rates, collisions are listed newest first with the right field-level diffs and
//! paginated, a webhook receives each collision once (a loopback-only receiver), however
//! often it is delivered again, and
//! `/ui/ops` in Chromium shows the numbers of the JSON.
//!
//! The trend buckets by arrival time. The test makes "an hour ago" by moving the first
//! workload's tally rows one hour back with SQL after it was stored, which is what the
//! rows would hold had it arrived then; everything else goes through the API.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use axum::Router;
use reqwest::StatusCode;
use serde_json::{json, Value};
use sqlx::Connection;

use crate::helpers::{checkout_event, spawn_app, spawn_app_with, Backend, ServerProcess, TestApp};
use crate::metrics::tenant_id;
use crate::on_both_backends;
use crate::segment::{create_source, post_v1, track};

on_both_backends!(
    the_hourly_trend_per_source_equals_a_workload_of_known_duplicate_rates,
    collisions_are_listed_newest_first_with_their_field_diffs_and_paginated,
    a_webhook_receives_each_collision_once,
    batches_logging_the_same_collisions_in_other_orders_both_answer,
    unreachable_receivers_do_not_hold_back_a_working_one,
    a_receiver_that_never_answers_does_not_delay_later_collisions,
    a_webhook_url_is_measured_as_stored,
    the_ops_page_in_chromium_shows_the_numbers_of_the_json,
    a_stopping_server_finishes_and_records_its_webhook_round,
    a_starting_server_purges_posted_deliveries_older_than_a_week,
);

/// `serve` deletes posted and abandoned webhook deliveries a week old (at start, then
/// every hour); a recent one and one still due stay. They were never deleted.
async fn a_starting_server_purges_posted_deliveries_older_than_a_week(backend: Backend) {
    let app = spawn_app(backend).await;
    let day_us: i64 = 86_400_000_000;
    let now = traqlyte_store::now_us();
    let (old, recent) = (now - 8 * day_us, now - 6 * day_us);
    app.execute_sql(&format!(
        "INSERT INTO webhook_deliveries VALUES
           ('tnt_a', 'whk_1.1', 'whk_1', 1, {old}, 1, 0, 0, NULL, {old}, NULL),
           ('tnt_a', 'whk_1.2', 'whk_1', 2, {old}, 15, 0, 0, NULL, {old}, 'abandoned'),
           ('tnt_a', 'whk_1.3', 'whk_1', 3, {recent}, 1, 0, 0, NULL, {recent}, NULL),
           ('tnt_a', 'whk_1.4', 'whk_1', 4, {old}, 2, {now}, 0, NULL, NULL, 'refused')"
    ))
    .await;
    let count = "SELECT COUNT(*) FROM webhook_deliveries";
    // A server started after the rows were written purges at its start (the test's own
    // server may purge them first, if its first run comes after the insert).
    let _server = ServerProcess::start(app.database_url(), &[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while app.integer_sql(count).await != 2 {
        assert!(
            Instant::now() < deadline,
            "the old posted deliveries stayed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        app.integer_sql(
            "SELECT COUNT(*) FROM webhook_deliveries WHERE delivery_id IN ('whk_1.3', 'whk_1.4')"
        )
        .await,
        2
    );
}

const HOUR_US: i64 = 3_600_000_000;

fn resent(order: &str) -> Value {
    let mut event = checkout_event(order);
    event["sent_at"] = json!("2026-11-29T11:00:00Z");
    event["attempt"] = json!(2);
    event
}

/// Posts `new` new orders (prefix `tag`) then `retries` resends of the first ones.
async fn http_workload(app: &TestApp, tag: &str, new: usize, retries: usize) {
    let events: Vec<Value> = (0..new)
        .map(|i| checkout_event(&format!("{tag}-{i}")))
        .collect();
    let answer = app
        .post_json("/events/checkout_completed/batch", &json!(events))
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let again: Vec<Value> = (0..retries)
        .map(|i| resent(&format!("{tag}-{i}")))
        .collect();
    let answer = app
        .post_json("/events/checkout_completed/batch", &json!(again))
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
}

/// Moves every tally row of the tenant one hour back (the rows of a past workload).
async fn age_tallies_by_an_hour(app: &TestApp, tenant: &str) {
    let sql = "UPDATE event_tallies SET at_us = at_us - 3600000000 WHERE tenant_id = $1";
    match app.database_url() {
        url if url.starts_with("postgres") => {
            let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
            sqlx::query(sql)
                .bind(tenant)
                .execute(&mut conn)
                .await
                .expect("age");
        }
        url => {
            let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{url}"))
                .await
                .expect("connect");
            sqlx::query(sql)
                .bind(tenant)
                .execute(&mut conn)
                .await
                .expect("age");
        }
    }
}

async fn the_hourly_trend_per_source_equals_a_workload_of_known_duplicate_rates(backend: Backend) {
    crate::helpers::clear_of_hour_boundary().await;
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    let tenant = tenant_id(&app).await;
    let key = create_source(&app, "web");
    // The past hour: http 8 new + 2 retries (rate 0.2).
    http_workload(&app, "past", 8, 2).await;
    age_tallies_by_an_hour(&app, &tenant).await;
    // This hour: http 3 new + 3 retries (0.5); Segment 4 new + 1 retry (0.2).
    http_workload(&app, "now", 3, 3).await;
    let messages: Vec<Value> = (0..4)
        .map(|i| track(&format!("m{i}"), "u", &format!("s{i}"), 1.0))
        .collect();
    for message in &messages {
        let answer = post_v1(&app, "/v1/track", Some(&key), message).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    }
    let retry = post_v1(&app, "/v1/track", Some(&key), &messages[0]).await;
    assert_eq!(retry.status, StatusCode::OK, "{}", retry.body);

    let now = traqlyte_store::now_us();
    let this_hour = now / HOUR_US * HOUR_US;
    let since = traqlyte_identity::format_rfc3339_micros(this_hour - HOUR_US);
    let until = traqlyte_identity::format_rfc3339_micros(this_hour + HOUR_US);
    let trend = app
        .get(&format!(
            "/ops/duplicates?since={since}&until={until}&bucket=hour"
        ))
        .await;
    assert_eq!(trend.status, StatusCode::OK, "{}", trend.body);
    let series = trend.body["series"].as_array().expect("series");
    assert_eq!(series.len(), 2, "{}", trend.body);
    let http = series
        .iter()
        .find(|s| s["source"] == "http")
        .expect("http series");
    assert_eq!(http["contract"], "checkout_completed");
    let b = http["buckets"].as_array().expect("buckets");
    assert_eq!(b.len(), 2);
    assert_eq!(b[0]["start"], json!(since));
    let counts = |b: &Value| {
        (
            b["received"].as_i64().unwrap(),
            b["inserted"].as_i64().unwrap(),
            b["duplicates"].as_i64().unwrap(),
            b["duplicate_rate"].as_f64(),
        )
    };
    assert_eq!(counts(&b[0]), (10, 8, 2, Some(0.2)));
    assert_eq!(counts(&b[1]), (6, 3, 3, Some(0.5)));
    let segment = series
        .iter()
        .find(|s| s["source"].as_str().unwrap().starts_with("segment:src_"))
        .expect("segment series");
    assert_eq!(segment["contract"], "segment.message");
    let b = segment["buckets"].as_array().expect("buckets");
    assert_eq!(counts(&b[0]), (0, 0, 0, None));
    assert_eq!(counts(&b[1]), (5, 4, 1, Some(0.2)));

    // Filters: one source only; bad parameters name their field.
    let source = segment["source"].as_str().unwrap();
    let only = app
        .get(&format!(
            "/ops/duplicates?since={since}&until={until}&source={source}"
        ))
        .await;
    assert_eq!(
        only.body["series"].as_array().map(Vec::len),
        Some(1),
        "{}",
        only.body
    );
    let bad = app.get("/ops/duplicates?bucket=week").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad.body["error"]["field"], "bucket");
    // Both ends are answered as RFC 3339 times: whole buckets past year 9999, or a
    // default day before an `until` in year 1, have none, and are refused naming the
    // parameter they came from.
    app.assert_bad_parameters(
        "/ops/duplicates",
        &[
            ("until=9999-12-31T23:59:59Z&bucket=day", "until"),
            ("until=0001-01-01T00:30:00Z", "until"),
        ],
    )
    .await;
    let last = app
        .get("/ops/duplicates?since=9999-12-30T00:00:00Z&until=9999-12-30T12:00:00Z&bucket=day")
        .await;
    assert_eq!(last.status, StatusCode::OK, "{}", last.body);
    // The range is whole buckets: 2,000 minutes and 30 s is 2,001 minute buckets, one
    // more than a trend answers; 2,000 minutes exactly is answered, each bucket whole.
    // Minute buckets reach back 48 hours: the range starts 34 hours ago, on a minute.
    let start_us =
        (traqlyte_store::now_us() - 34 * 3_600_000_000).div_euclid(60_000_000) * 60_000_000;
    let minutes = |end_s: i64| {
        let start = traqlyte_identity::format_rfc3339_micros(start_us);
        let end = traqlyte_identity::format_rfc3339_micros(start_us + end_s * 1_000_000);
        format!("/ops/duplicates?since={start}&until={end}&bucket=minute")
    };
    let over = app.get(&minutes(2_000 * 60 + 30)).await;
    assert_eq!(
        (over.status, &over.body["error"]["field"]),
        (StatusCode::BAD_REQUEST, &json!("bucket")),
        "{}",
        over.body
    );
    let exact = app.get(&minutes(2_000 * 60)).await;
    assert_eq!(exact.status, StatusCode::OK, "{}", exact.body);
    // Older minutes are folded into hours: a minute trend there is refused, naming since.
    let old = app
        .get("/ops/duplicates?since=2026-11-01T00:00:00Z&until=2026-11-01T01:00:00Z&bucket=minute")
        .await;
    assert_eq!(
        (old.status, &old.body["error"]["field"]),
        (StatusCode::BAD_REQUEST, &json!("since")),
        "{}",
        old.body
    );
    // Another tenant sees none of it.
    let other = app.other_tenant_key().await;
    let theirs = app
        .send(
            app.client
                .get(app.url(&format!("/ops/duplicates?since={since}&until={until}")))
                .bearer_auth(other),
        )
        .await;
    assert_eq!(theirs.body["series"], json!([]));
}

/// Stores `order`, then a different event under its identity ([`colliding`]): one
/// collision.
async fn collide(app: &TestApp, order: &str, note: &str, amount: f64) {
    let stored = app.post_event(&checkout_event(order)).await;
    assert_eq!(stored.status, StatusCode::OK, "{}", stored.body);
    let refused = app.post_event(&colliding(order, note, amount)).await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.body);
}

/// An event under `order`'s identity with other content (and another attempt number).
fn colliding(order: &str, note: &str, amount: f64) -> Value {
    let mut other = checkout_event(order);
    other["note"] = json!(note);
    other["amount"] = json!(amount);
    other["extra"] = json!({"k": 1});
    other["attempt"] = json!(2);
    other
}

async fn collisions_are_listed_newest_first_with_their_field_diffs_and_paginated(backend: Backend) {
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    collide(&app, "c1", "first", 129.991).await;
    collide(&app, "c2", "second", 129.994).await;
    collide(&app, "c3", "third", 129.99).await;

    let page = app.get("/ops/collisions?limit=2").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let listed = page.body["collisions"].as_array().expect("collisions");
    assert_eq!(listed.len(), 2);
    let orders: Vec<&str> = listed
        .iter()
        .map(|c| c["incoming_payload"]["order_id"].as_str().unwrap())
        .collect();
    assert_eq!(orders, ["c3", "c2"], "newest first");
    let newest = &listed[0];
    assert_eq!(newest["contract"], "checkout_completed");
    assert_eq!(newest["source"], "http");
    assert_eq!(
        newest["stored_payload"]["note"],
        "content outside the identity"
    );
    // The amount rounds to the same identity (precision 2) but is other content; the
    // attempt counter is transport (a retry's), marked as not making the collision.
    let diff: Vec<(String, String, bool)> = newest["diff"]
        .as_array()
        .expect("diff")
        .iter()
        .map(|d| {
            (
                d["path"].as_str().unwrap().into(),
                d["change"].as_str().unwrap().into(),
                d["transport"].as_bool().expect("transport"),
            )
        })
        .collect();
    assert_eq!(
        diff,
        [
            ("/attempt".to_string(), "changed".to_string(), true),
            ("/extra".to_string(), "added".to_string(), false),
            ("/note".to_string(), "changed".to_string(), false),
        ]
    );
    assert_eq!(newest["diff"][2]["stored"], "content outside the identity");
    assert_eq!(newest["diff"][2]["incoming"], "third");
    let older = &listed[1]["diff"];
    assert_eq!(older[0]["path"], "/amount");
    assert_eq!(older[0]["incoming"], json!(129.994));

    let cursor = page.body["next_cursor"].as_str().expect("a next page");
    let next = app
        .get(&format!("/ops/collisions?limit=2&cursor={cursor}"))
        .await;
    let rest = next.body["collisions"].as_array().expect("collisions");
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0]["incoming_payload"]["order_id"], "c1");
    assert!(next.body.get("next_cursor").is_none(), "{}", next.body);

    let filtered = app.get("/ops/collisions?contract=nothing").await;
    assert_eq!(filtered.body["collisions"], json!([]));
    let bad = app.get("/ops/collisions?cursor=zzz").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad.body["error"]["field"], "cursor");
}

/// `(delivery id, collision id)` of each call received, and whether its
/// `webhook-signature` verified with the secret the receiver was given.
type Seen = Arc<Mutex<Vec<(String, i64, bool)>>>;

/// What a receiver knows: the secret to verify with, and the calls so far.
type Receiver = (Arc<Mutex<String>>, Seen);

/// Verifies a delivery as a Standard Webhooks receiver library would: HMAC-SHA256 keyed
/// by the secret's base64 bytes over `{webhook-id}.{webhook-timestamp}.{body}`.
fn verified(secret: &str, headers: &HeaderMap, body: &[u8]) -> bool {
    use base64::Engine;
    use hmac::Mac;
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let (Some(id), Some(at), Some(signature)) = (
        header("webhook-id"),
        header("webhook-timestamp"),
        header("webhook-signature"),
    ) else {
        return false;
    };
    let engine = base64::engine::general_purpose::STANDARD;
    let Some(key) = secret
        .strip_prefix("whsec_")
        .and_then(|k| engine.decode(k).ok())
    else {
        return false;
    };
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key) else {
        return false;
    };
    mac.update(format!("{id}.{at}.").as_bytes());
    mac.update(body);
    let expected = format!("v1,{}", engine.encode(mac.finalize().into_bytes()));
    let fresh = at
        .parse::<i64>()
        .is_ok_and(|at| (at - traqlyte_store::now_us() / 1_000_000).abs() < 300);
    fresh && signature.split(' ').any(|s| s == expected)
}

/// A receiver on a loopback port recording each delivery's id and collision id, and
/// verifying its signature with the secret set in its first half.
async fn receiver() -> (String, Receiver) {
    let known: Receiver = Default::default();
    async fn hook(
        State((secret, seen)): State<Receiver>,
        headers: HeaderMap,
        bytes: axum::body::Bytes,
    ) -> StatusCode {
        let body: Value = serde_json::from_slice(&bytes).unwrap_or_default();
        let header = headers["traqlyte-delivery-id"]
            .to_str()
            .unwrap_or("")
            .to_string();
        assert_eq!(body["delivery_id"], json!(header));
        assert_eq!(headers["webhook-id"], header.as_str());
        let collision = body["collision"]["collision_id"].as_i64().unwrap_or(-1);
        let secret = secret.lock().expect("lock").clone();
        let good = verified(&secret, &headers, &bytes);
        seen.lock().expect("lock").push((header, collision, good));
        StatusCode::NO_CONTENT
    }
    let router = Router::new()
        .route("/hook", post(hook))
        .with_state(known.clone());
    (serve_hook(router).await, known)
}

/// Serves `router` (its `/hook` route) on a free loopback port; the hook's URL.
async fn serve_hook(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{address}/hook")
}

async fn a_webhook_receives_each_collision_once(backend: Backend) {
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    let (url, (secret, seen)) = receiver().await;
    let created = app.post_json("/ops/webhooks", &json!({"url": url})).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let signing_secret = created.body["signing_secret"].as_str().unwrap_or("");
    assert!(signing_secret.starts_with("whsec_"), "{}", created.body);
    *secret.lock().expect("lock") = signing_secret.to_string();
    let again = app.post_json("/ops/webhooks", &json!({"url": url})).await;
    assert_eq!(again.status, StatusCode::OK, "the same URL again adds none");
    assert_eq!(again.body["webhook_id"], created.body["webhook_id"]);
    // A retried registration whose first answer was lost still learns the secret.
    assert_eq!(again.body["signing_secret"], created.body["signing_secret"]);
    let listed = app.get("/ops/webhooks").await;
    assert_eq!(listed.body["webhooks"].as_array().map(Vec::len), Some(1));
    assert!(listed.body["webhooks"][0].get("signing_secret").is_none());
    for bad in [
        "ftp://x",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::]:80/",
    ] {
        let refused = app.post_json("/ops/webhooks", &json!({"url": bad})).await;
        assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
        assert_eq!(refused.body["error"]["field"], "url", "{bad}");
    }

    for (i, order) in ["w1", "w2", "w3"].iter().enumerate() {
        collide(&app, order, &format!("n{i}"), 129.99).await;
    }
    // Each colliding event again, four times at once: answered `409` and counted each
    // time, but the same collision is logged and posted once (a retried `409`, a
    // redelivery), whichever batch or transaction carries it.
    let again: Vec<_> = ["w1", "w2", "w3"]
        .iter()
        .enumerate()
        .flat_map(|(i, order)| std::iter::repeat_n(colliding(order, &format!("n{i}"), 129.99), 4))
        .map(|event| {
            let request = app
                .client
                .post(app.url("/events/checkout_completed"))
                .bearer_auth(&app.key)
                .json(&event);
            tokio::spawn(async move { request.send().await.expect("sent").status() })
        })
        .collect();
    for answer in again {
        assert_eq!(answer.await.expect("task"), StatusCode::CONFLICT);
    }
    assert_eq!(
        app.checkout_stats().await,
        (3, 0, 15),
        "every delivery counted"
    );
    let page = app.get("/ops/collisions").await;
    let mut expected: Vec<i64> = page.body["collisions"]
        .as_array()
        .expect("collisions")
        .iter()
        .map(|c| c["collision_id"].as_i64().unwrap())
        .collect();
    expected.sort_unstable();
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.lock().expect("lock").len() < 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Two more dispatcher polls: nothing is delivered twice.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let seen = seen.lock().expect("lock").clone();
    let mut collisions: Vec<i64> = seen.iter().map(|(_, c, _)| *c).collect();
    collisions.sort_unstable();
    assert_eq!(expected.len(), 3, "one entry a collision: {expected:?}");
    assert_eq!(collisions, expected, "each collision once: {seen:?}");
    assert!(seen.iter().all(|(_, _, good)| *good), "signed: {seen:?}");
    let ids: HashMap<&str, i64> = seen.iter().map(|(d, c, _)| (d.as_str(), *c)).collect();
    assert_eq!(ids.len(), 3, "distinct delivery ids");
    assert_eq!(app.store.pending_deliveries().await.expect("pending"), 0);

    let id = created.body["webhook_id"].as_str().unwrap();
    let deleted = app
        .client
        .delete(app.url(&format!("/ops/webhooks/{id}")))
        .bearer_auth(&app.key)
        .send()
        .await
        .expect("DELETE");
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    assert_eq!(app.get("/ops/webhooks").await.body["webhooks"], json!([]));
}

/// Two batches delivering the same new collisions at once, in opposite orders, are both
/// answered, each collision logged once: the log's keys are taken in key order, as the
/// event rows are (taken in input order, such batches deadlocked, one answered `503`).
async fn batches_logging_the_same_collisions_in_other_orders_both_answer(backend: Backend) {
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    let orders: Vec<String> = (0..200).map(|i| format!("order-{i}")).collect();
    let stored: Vec<Value> = orders.iter().map(|o| checkout_event(o)).collect();
    let answer = app
        .post_json("/events/checkout_completed/batch", &json!(stored))
        .await;
    assert_eq!(answer.body["inserted"], 200, "{}", answer.body);
    for round in 0..3 {
        let forward: Vec<Value> = orders
            .iter()
            .map(|o| colliding(o, &format!("round {round}"), 129.99))
            .collect();
        let backward: Vec<Value> = forward.iter().rev().cloned().collect();
        let send = |batch: Vec<Value>| {
            let request = app
                .client
                .post(app.url("/events/checkout_completed/batch"))
                .bearer_auth(&app.key)
                .json(&batch);
            tokio::spawn(async move {
                let answer = request.send().await.expect("sent");
                let status = answer.status();
                (status, answer.json::<Value>().await.expect("JSON"))
            })
        };
        let (one, other) = (send(forward), send(backward));
        for task in [one, other] {
            let (status, body) = task.await.expect("task");
            assert_eq!(status, StatusCode::OK, "round {round}: {body}");
            assert_eq!(body["collisions"], 200, "round {round}: {body}");
        }
    }
    let mut logged = 0;
    let mut path = "/ops/collisions?limit=200".to_string();
    loop {
        let page = app.get(&path).await.body;
        logged += page["collisions"].as_array().map_or(0, Vec::len);
        let Some(cursor) = page["next_cursor"].as_str() else {
            break;
        };
        path = format!("/ops/collisions?limit=200&cursor={cursor}");
    }
    assert_eq!(logged, 600, "each collision once");
}

/// The URL's limit holds for the URL as stored, percent-encoded: raw non-ASCII text under
/// 2,000 bytes triples past it (past PostgreSQL's index entry limit, a 500 there).
async fn a_webhook_url_is_measured_as_stored(backend: Backend) {
    let app = spawn_app(backend).await;
    let wide = format!("http://127.0.0.1:9/{}", "é".repeat(900));
    assert!(wide.len() < 2_000);
    let refused = app.post_json("/ops/webhooks", &json!({"url": wide})).await;
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_webhook"),
        "{}",
        refused.body
    );
    assert_eq!(refused.body["error"]["field"], "url");
    assert!(
        refused.body["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("percent-encoded"),
        "{}",
        refused.body
    );
    // The longest URL the limit allows is stored on both backends.
    let longest = format!("http://127.0.0.1:9/{}", "a".repeat(2_000 - 19));
    assert_eq!(longest.len(), 2_000);
    let created = app
        .post_json("/ops/webhooks", &json!({"url": longest}))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let listed = app.get("/ops/webhooks").await;
    assert_eq!(
        listed.body["webhooks"].as_array().map(Vec::len),
        Some(1),
        "{}",
        listed.body
    );
    assert_eq!(listed.body["webhooks"][0]["url"], longest.as_str());
}

/// A listener that accepts webhook calls and never answers; counts the connections the
/// dispatcher gave up on (closed by its timeout).
async fn black_hole() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::AsyncReadExt;
    let closed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let counter = closed.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut buffer = [0u8; 4096];
                while matches!(socket.read(&mut buffer).await, Ok(n) if n > 0) {}
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            });
        }
    });
    (format!("http://{address}"), closed)
}

/// One round's deliveries are posted at once: receivers that never answer hold it up for
/// one timeout, so a working receiver registered after them has its delivery before the
/// dispatcher gives up on any of them.
async fn unreachable_receivers_do_not_hold_back_a_working_one(backend: Backend) {
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    let (hole, closed) = black_hole().await;
    for i in 0..5 {
        let url = format!("{hole}/hook-{i}");
        let created = app.post_json("/ops/webhooks", &json!({"url": url})).await;
        assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    }
    let (url, (_, seen)) = receiver().await;
    let created = app.post_json("/ops/webhooks", &json!({"url": url})).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    collide(&app, "held", "other", 129.99).await;
    delivered_before_any_timeout(&seen, &closed).await;
}

/// Waits for the working receiver's first delivery, then checks that no post to the
/// black hole had timed out by then: the delivery did not wait for one.
async fn delivered_before_any_timeout(seen: &Seen, closed: &std::sync::atomic::AtomicUsize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.lock().expect("lock").is_empty() {
        assert!(
            Instant::now() < deadline,
            "the working receiver got nothing"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        closed.load(std::sync::atomic::Ordering::Relaxed),
        0,
        "the working receiver waited for a hanging post's timeout"
    );
}

/// A post waits for no other: while a receiver that never answers holds its delivery up to
/// the 10 s timeout, a collision logged after it reaches a working receiver on the next
/// poll. The dispatcher waited for every post of a round before its next poll, so one
/// tenant's hanging receiver delayed every tenant's alerts by the timeout, poll after poll.
async fn a_receiver_that_never_answers_does_not_delay_later_collisions(backend: Backend) {
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    let (hole, closed) = black_hole().await;
    let created = app
        .post_json("/ops/webhooks", &json!({"url": format!("{hole}/hook")}))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    collide(&app, "into-the-hole", "other", 129.99).await;
    // Two polls: the hole's delivery is posted and hangs.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let (url, (_, seen)) = receiver().await;
    let created = app.post_json("/ops/webhooks", &json!({"url": url})).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    collide(&app, "after-the-hole", "other", 129.99).await;
    delivered_before_any_timeout(&seen, &closed).await;
}

async fn the_ops_page_in_chromium_shows_the_numbers_of_the_json(backend: Backend) {
    crate::helpers::clear_of_hour_boundary().await;
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    http_workload(&app, "page", 5, 2).await;
    collide(&app, "p-collide", "other", 129.99).await;
    // The page's default range, as the JSON's: the last 24 hours by hour.
    let trend = app.get("/ops/duplicates").await.body;
    let buckets = trend["series"][0]["buckets"].as_array().expect("buckets");
    let bucket = buckets
        .iter()
        .find(|b| b["received"].as_i64() > Some(0))
        .unwrap_or_else(|| panic!("no bucket with deliveries: {trend}"));
    assert_eq!(bucket["received"], 9, "{trend}");

    let token = app.post_json("/ui/tokens", &json!({})).await;
    let login_path = token.body["login_path"].as_str().expect("login_path");
    let url = app.url(&format!("{login_path}&next=/ui/ops"));
    let dom = crate::ui::dump_dom(&url, (1280, 900)).await;
    assert!(
        dom.contains("data-section=\"trend\""),
        "not the ops page: {dom}"
    );
    let elements = crate::ui::parse_elements(&dom);
    for field in [
        "received",
        "inserted",
        "duplicates",
        "collisions",
        "duplicate_rate",
    ] {
        let shown = elements
            .iter()
            .find(|e| e.attr("data-field") == Some(field))
            .unwrap_or_else(|| panic!("no {field} on the page"));
        let value: Value =
            serde_json::from_str(shown.attr("data-value").expect("value")).expect("json");
        assert_eq!(value, bucket[field], "{field}");
    }
    let path = elements
        .iter()
        .find(|e| e.attr("data-field") == Some("path"))
        .expect("a diff row");
    assert_eq!(path.text, "/attempt");
    let marked: Vec<&str> = elements
        .iter()
        .filter(|e| e.attr("data-field") == Some("transport"))
        .map(|e| e.text.as_str())
        .collect();
    assert_eq!(
        marked,
        ["(transport)"],
        "the attempt counter alone is marked"
    );
    let bar = elements
        .iter()
        .find(|e| e.attr("data-field") == Some("chart.duplicate_rate"));
    assert!(bar.is_some(), "the chart draws the rate");
}

/// SIGTERM reaching a server while its dispatcher waits on a slow receiver: the round is
/// finished and recorded before the process exits. Aborted, as it was, the post went out
/// and its delivery stayed leased and unrecorded, to be posted again after a restart.
async fn a_stopping_server_finishes_and_records_its_webhook_round(backend: Backend) {
    // The test's own server does not dispatch: only the process under test does.
    let config = traqlyte_server::ServerConfig {
        webhook_dispatch: false,
        ..traqlyte_server::ServerConfig::default()
    };
    let app = spawn_app_with(backend, config).await;
    app.register_checkout_contract().await;
    let arrived = Arc::new(tokio::sync::Notify::new());
    async fn slow_hook(State(arrived): State<Arc<tokio::sync::Notify>>) -> StatusCode {
        arrived.notify_one();
        tokio::time::sleep(Duration::from_millis(2_000)).await;
        StatusCode::NO_CONTENT
    }
    let router = Router::new()
        .route("/hook", post(slow_hook))
        .with_state(arrived.clone());
    let url = serve_hook(router).await;
    let created = app.post_json("/ops/webhooks", &json!({"url": url})).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);

    let mut server = ServerProcess::start(app.database_url(), &[]);
    collide(&app, "w1", "n1", 129.99).await;
    tokio::time::timeout(Duration::from_secs(30), arrived.notified())
        .await
        .expect("the dispatcher posted the collision");
    server.terminate();
    assert!(
        server.exited_within(Duration::from_secs(30)).await,
        "the server stopped"
    );
    assert_eq!(
        app.store.pending_deliveries().await.expect("pending"),
        0,
        "the post was recorded before the server exited"
    );
}

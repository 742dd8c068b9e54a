//! Transport idempotency on `POST /campaigns/{id}/publish`: replays, reused keys,
//! concurrency across processes, crashes mid-transaction, tenant scoping.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::{fire_from_processes, spawn_app, Backend, ServerProcess, TestApp};

crate::on_both_backends!(
    publishing_twice_with_one_key_mints_one_version_and_replays_identical_bytes,
    the_same_key_with_a_different_body_is_refused_and_writes_nothing,
    requests_without_a_key_are_not_protected,
    invalid_keys_are_refused,
    refusals_are_stored_and_replayed_too,
    another_tenant_using_the_same_key_never_receives_the_stored_response,
    two_hundred_concurrent_requests_from_4_processes_at_2_servers_publish_once,
    a_crash_inside_the_transaction_is_retried_after_the_cutoff_and_publishes_once,
    keys_past_their_retention_are_purged_and_run_as_new,
    a_request_over_the_timeout_is_answered_408_and_its_writes_roll_back,
    a_reservations_age_is_measured_on_the_stores_clock,
    a_request_its_client_abandoned_leaves_no_reservation_behind,
    keyed_requests_whose_clients_hang_up_at_once_leave_no_reservation_in_flight,
);

pub fn campaign_body(key: &str) -> Value {
    json!({
        "key": key, "name": "Checkout redesign",
        "arms": [{"key": "control", "weight": 1}, {"key": "treatment", "weight": 1}],
        "metrics": [{"name": "purchase", "kind": "conversion", "window_hours": 168}]
    })
}

async fn create_campaign(app: &TestApp) -> String {
    let answer = app
        .post_json("/campaigns", &campaign_body("checkout_redesign"))
        .await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    answer.body["id"].as_str().expect("id").to_string()
}

/// Waits until a request under idempotency key `key` holds its reservation (a server has
/// committed it), for at most 30 s.
pub(crate) async fn wait_for_reservation(app: &TestApp, key: &str) {
    wait_until_reserved(
        app,
        key,
        true,
        Duration::from_secs(30),
        "no reservation was made",
    )
    .await;
}

/// Waits, at most `within`, until the key `key` is reserved (`reserved`) or not.
async fn wait_until_reserved(
    app: &TestApp,
    key: &str,
    reserved: bool,
    within: Duration,
    failure: &str,
) {
    let tenant = app.tenant().await;
    let key = traqlyte_store::IdempotencyKey::parse(key.as_bytes()).expect("key");
    let deadline = Instant::now() + within;
    while app
        .store
        .idempotency_lookup(&tenant, &key)
        .await
        .expect("lookup")
        .is_some()
        != reserved
    {
        assert!(Instant::now() < deadline, "{failure}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Status, replay header and raw body bytes of a publish.
async fn publish(
    app: &TestApp,
    key_header: &str,
    id: &str,
    idem_key: Option<&str>,
    body: &str,
) -> (StatusCode, bool, Vec<u8>) {
    let mut request = app
        .client
        .post(app.url(&format!("/campaigns/{id}/publish")))
        .bearer_auth(key_header)
        .body(body.to_string());
    if let Some(k) = idem_key {
        request = request.header("X-TL-Idempotency-Key", k);
    }
    let response = request.send().await.expect("publish sent");
    let status = response.status();
    let replayed = response
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true");
    (
        status,
        replayed,
        response.bytes().await.expect("body").to_vec(),
    )
}

async fn version_count(app: &TestApp, id: &str) -> usize {
    let answer = app.get(&format!("/campaigns/{id}/versions")).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    answer.body["versions"]
        .as_array()
        .map(Vec::len)
        .expect("a list of versions")
}

async fn publishing_twice_with_one_key_mints_one_version_and_replays_identical_bytes(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    let id = create_campaign(&app).await;
    let first = publish(
        &app,
        &app.key,
        &id,
        Some("publish-1"),
        r#"{"note": "launch", "arms": [{"key": "control", "weight": 1}, {"key": "treatment", "weight": 3}]}"#,
    )
    .await;
    // Whitespace and key order (of the body and of its objects) do not make a different
    // request.
    let second = publish(
        &app,
        &app.key,
        &id,
        Some("publish-1"),
        r#"{ "arms" : [ {"weight": 1, "key": "control"}, {"weight": 3, "key": "treatment"} ], "note" : "launch" }"#,
    )
    .await;
    assert_eq!(first.0, StatusCode::CREATED);
    assert!(!first.1, "the first execution is not a replay");
    assert_eq!(second.0, StatusCode::CREATED);
    assert!(
        second.1,
        "the second answer carries Idempotent-Replayed: true"
    );
    assert_eq!(first.2, second.2, "the replay is byte for byte");
    assert_eq!(version_count(&app, &id).await, 1);
}

async fn the_same_key_with_a_different_body_is_refused_and_writes_nothing(backend: Backend) {
    let app = spawn_app(backend).await;
    let id = create_campaign(&app).await;
    publish(&app, &app.key, &id, Some("k"), r#"{"note": "a"}"#).await;
    let (status, replayed, body) =
        publish(&app, &app.key, &id, Some("k"), r#"{"note": "b"}"#).await;
    let body: Value = serde_json::from_slice(&body).expect("json");
    assert_eq!((status, replayed), (StatusCode::CONFLICT, false));
    assert_eq!(body["error"]["code"], "idempotency_key_reused");
    // A note that differs only in its Unicode normal form is a different note (the
    // version keeps its bytes): a different request, never a replay of the first.
    publish(
        &app,
        &app.key,
        &id,
        Some("nfc"),
        "{\"note\": \"Caf\u{e9}\"}",
    )
    .await;
    let (status, replayed, body) = publish(
        &app,
        &app.key,
        &id,
        Some("nfc"),
        "{\"note\": \"Cafe\u{301}\"}",
    )
    .await;
    let body: Value = serde_json::from_slice(&body).expect("json");
    assert_eq!((status, replayed), (StatusCode::CONFLICT, false), "{body}");
    assert_eq!(body["error"]["code"], "idempotency_key_reused");
    // The same key on another path is a different request too.
    let other = app
        .send(
            app.client
                .post(app.url("/campaigns"))
                .bearer_auth(&app.key)
                .header("Idempotency-Key", "k")
                .body(campaign_body("other").to_string()),
        )
        .await;
    assert_eq!(other.code(), "idempotency_key_reused");
    assert_eq!(version_count(&app, &id).await, 2);
    assert_eq!(
        app.get(&format!("/campaigns/{id}")).await.body["latest_version"],
        2
    );
}

async fn requests_without_a_key_are_not_protected(backend: Backend) {
    let app = spawn_app(backend).await;
    let id = create_campaign(&app).await;
    for _ in 0..2 {
        let (status, replayed, _) = publish(&app, &app.key, &id, None, "").await;
        assert_eq!((status, replayed), (StatusCode::CREATED, false));
    }
    assert_eq!(
        version_count(&app, &id).await,
        2,
        "a retried publish without a key mints a second version"
    );
}

async fn invalid_keys_are_refused(backend: Backend) {
    let app = spawn_app(backend).await;
    let id = create_campaign(&app).await;
    let long = "k".repeat(256);
    for key in ["", long.as_str(), "tab\there", "caf\u{e9}"] {
        let request = app
            .client
            .post(app.url(&format!("/campaigns/{id}/publish")))
            .bearer_auth(&app.key)
            .header(
                "X-TL-Idempotency-Key",
                reqwest::header::HeaderValue::from_bytes(key.as_bytes()).expect("header"),
            );
        let answer = app.send(request).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{key:?}");
        assert_eq!(answer.code(), "invalid_idempotency_key");
        assert_eq!(answer.body["error"]["field"], "x-tl-idempotency-key");
    }
    // One header name twice with differing values, as two names differing are: refused
    // (the first was taken, so a retry with the second alone ran again). Equal, taken.
    for (name, second) in [
        ("X-TL-Idempotency-Key", "b"),
        ("Idempotency-Key", "b"),
        ("Idempotency-Key", "a"),
    ] {
        let request = app
            .client
            .post(app.url(&format!("/campaigns/{id}/publish")))
            .bearer_auth(&app.key)
            .header(name, "a")
            .header(name, second);
        let answer = app.send(request).await;
        if second == "a" {
            assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
            continue;
        }
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{name}");
        assert_eq!(answer.code(), "invalid_idempotency_key");
        assert_eq!(answer.body["error"]["field"], name.to_ascii_lowercase());
    }
    assert_eq!(version_count(&app, &id).await, 1);
    let max = "k".repeat(255);
    assert_eq!(
        publish(&app, &app.key, &id, Some(&max), "").await.0,
        StatusCode::CREATED
    );
}

async fn refusals_are_stored_and_replayed_too(backend: Backend) {
    let app = spawn_app(backend).await;
    let id = create_campaign(&app).await;
    let bad = r#"{"arms": [{"key": "control", "weight": 0}, {"key": "treatment", "weight": 1}]}"#;
    let first = publish(&app, &app.key, &id, Some("bad"), bad).await;
    let second = publish(&app, &app.key, &id, Some("bad"), bad).await;
    assert_eq!(first.0, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        (second.0, second.1),
        (StatusCode::UNPROCESSABLE_ENTITY, true)
    );
    assert_eq!(first.2, second.2);
    assert_eq!(version_count(&app, &id).await, 0);
}

async fn another_tenant_using_the_same_key_never_receives_the_stored_response(backend: Backend) {
    let app = spawn_app(backend).await;
    let id = create_campaign(&app).await;
    let a = publish(&app, &app.key, &id, Some("shared-key"), "").await;
    assert_eq!(a.0, StatusCode::CREATED);
    let other = app.other_tenant_key().await;
    // Same key, same path: tenant B's request runs for B (the campaign is not B's: 404).
    let b = publish(&app, &other, &id, Some("shared-key"), "").await;
    assert_eq!((b.0, b.1), (StatusCode::NOT_FOUND, false));
    assert_ne!(a.2, b.2);
    assert_eq!(version_count(&app, &id).await, 1);
}

async fn two_hundred_concurrent_requests_from_4_processes_at_2_servers_publish_once(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    let id = create_campaign(&app).await;
    let servers = [
        ServerProcess::start(app.database_url(), &[]),
        ServerProcess::start(app.database_url(), &[]),
    ];
    let urls: Vec<String> = servers
        .iter()
        .map(|s| format!("{}/campaigns/{id}/publish", s.address))
        .collect();
    let reports = fire_from_processes(
        &urls,
        &app.key,
        &json!({"note": "go"}),
        4,
        50,
        &["X-TL-Idempotency-Key: launch-1"],
    )
    .await;
    let mut originals = Vec::new();
    let mut answered = 0;
    for report in &reports {
        assert_eq!(report["errors"], 0, "{report}");
        for (key, count) in report["bodies"].as_object().expect("bodies") {
            answered += count.as_u64().unwrap_or(0);
            let (status, rest) = key.split_once(' ').expect("status");
            let (_, body) = rest.split_once(' ').expect("body");
            match status {
                "201" => originals.push(body.to_string()),
                "409" => assert!(body.contains("request_in_flight"), "{key}"),
                other => panic!("unexpected status {other}: {key}"),
            }
        }
    }
    assert_eq!(answered, 200);
    originals.dedup();
    assert_eq!(
        originals.len(),
        1,
        "every success carries the original bytes: {originals:?}"
    );
    assert_eq!(version_count(&app, &id).await, 1);
}

async fn a_crash_inside_the_transaction_is_retried_after_the_cutoff_and_publishes_once(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    let id = create_campaign(&app).await;
    // Long enough that a loaded machine still restarts a server and sends the early retry
    // well inside it.
    let cutoff = ["--idempotency-stale-after-ms", "15000"];
    let mut slow = ServerProcess::start_with_env(
        app.database_url(),
        &cutoff,
        &[("TRAQLYTE_TEST_PUBLISH_DELAY_MS", "60000")],
    );
    let url = format!("{}/campaigns/{id}/publish", slow.address);
    let (client, key) = (app.client.clone(), app.key.clone());
    let started = Instant::now();
    let hung = tokio::spawn(async move {
        client
            .post(url)
            .bearer_auth(key)
            .header("X-TL-Idempotency-Key", "crash-1")
            .send()
            .await
    });
    wait_for_reservation(&app, "crash-1").await;
    slow.kill();
    assert!(
        hung.await.expect("task").is_err(),
        "the killed server never answered"
    );

    let restarted = ServerProcess::start(app.database_url(), &cutoff);
    let retry = || {
        app.client
            .post(format!("{}/campaigns/{id}/publish", restarted.address))
            .bearer_auth(&app.key)
            .header("X-TL-Idempotency-Key", "crash-1")
            .send()
    };
    let early = retry().await.expect("sent");
    assert!(
        started.elapsed() < Duration::from_millis(12_000),
        "the in-flight check ran too late to mean anything"
    );
    assert_eq!(early.status(), StatusCode::CONFLICT);
    assert!(early.headers().contains_key("retry-after"));
    assert!(early
        .text()
        .await
        .expect("body")
        .contains("request_in_flight"));

    // The reservation was made a little after `started`: until it is older than the
    // cutoff, a retry is still told the request is in flight; then one takes it over.
    tokio::time::sleep(Duration::from_millis(15_000).saturating_sub(started.elapsed())).await;
    let mut late = retry().await.expect("sent");
    while late.status() == StatusCode::CONFLICT && started.elapsed() < Duration::from_secs(45) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        late = retry().await.expect("sent");
    }
    assert_eq!(late.status(), StatusCode::CREATED);
    assert!(!late.headers().contains_key("idempotent-replayed"));
    let again = retry().await.expect("sent");
    assert_eq!(
        again
            .headers()
            .get("idempotent-replayed")
            .map(|v| v.as_bytes()),
        Some(&b"true"[..])
    );
    assert_eq!(version_count(&app, &id).await, 1);
}

async fn keys_past_their_retention_are_purged_and_run_as_new(backend: Backend) {
    let app = spawn_app(backend).await;
    let id = create_campaign(&app).await;
    let first = publish(&app, &app.key, &id, Some("old-key"), "").await;
    assert_eq!(first.0, StatusCode::CREATED);
    // A retention of -1 s: every key is older than that on the store's clock, and the
    // purge the background task runs with its retention removes exactly such keys.
    let purged = app
        .store
        .idempotency_purge(-1_000_000)
        .await
        .expect("purge");
    assert_eq!(purged, 1);
    let again = publish(&app, &app.key, &id, Some("old-key"), "").await;
    assert_eq!(
        (again.0, again.1),
        (StatusCode::CREATED, false),
        "a purged key runs as a new request"
    );
    assert_eq!(version_count(&app, &id).await, 2);
}

async fn a_request_over_the_timeout_is_answered_408_and_its_writes_roll_back(backend: Backend) {
    // 1 s: the campaign's creation, a plain request, must fit in it on a loaded machine.
    let config = traqlyte_server::ServerConfig {
        request_timeout_ms: 1_000,
        test_publish_delay_ms: 3_000,
        ..Default::default()
    };
    let app = crate::helpers::spawn_app_with(backend, config).await;
    let id = create_campaign(&app).await;
    let answer = app
        .send(
            app.client
                .post(app.url(&format!("/campaigns/{id}/publish")))
                .bearer_auth(&app.key),
        )
        .await;
    assert_eq!(answer.status, StatusCode::REQUEST_TIMEOUT);
    assert_eq!(answer.code(), "request_timeout");
    // The abandoned handler's transaction never commits: checked after the moment its
    // delayed commit would have come (3 s after the request), not before.
    tokio::time::sleep(std::time::Duration::from_millis(3_500)).await;
    assert_eq!(version_count(&app, &id).await, 0);
}

/// Servers whose clocks disagree must agree on whether a reservation is in flight: its
/// stamp, the time its age is read at and the take-over's check all come from the store.
/// The test calls the store as a server would; its own clock takes no part.
async fn a_reservations_age_is_measured_on_the_stores_clock(backend: Backend) {
    use traqlyte_server::idempotency::{decide, Decision};
    use traqlyte_store::{IdempotencyKey, OwnerToken};

    let app = spawn_app(backend).await;
    let store = &app.store;
    let tenant = app.tenant().await;
    let key = IdempotencyKey::parse(b"clock-1").expect("key");
    let cutoff_us = 30_000_000;
    let owner = OwnerToken::generate();
    assert!(store
        .idempotency_reserve(&tenant, &key, "sum", &owner)
        .await
        .expect("reserve"));
    let record = store
        .idempotency_lookup(&tenant, &key)
        .await
        .expect("lookup")
        .expect("a row");
    let age_us = record.read_at_us - record.reserved_at_us;
    assert!(
        (0..5_000_000).contains(&age_us),
        "a fresh reservation read at once is {age_us} µs old"
    );
    assert!(matches!(
        decide(Some(&record), "sum", cutoff_us),
        Decision::InFlight { .. }
    ));
    // A server that wrongly judged it stale (its clock running ahead) cannot take it over.
    let intruder = OwnerToken::generate();
    assert!(!store
        .idempotency_take_over(&tenant, &key, &owner, &intruder, cutoff_us)
        .await
        .expect("take over"));

    // Aged past the cutoff on the store's clock, the reservation is stale for every server.
    app.execute_sql(&format!(
        "UPDATE idempotency_keys SET reserved_at_us = reserved_at_us - {}",
        cutoff_us + 1_000_000
    ))
    .await;
    let record = store
        .idempotency_lookup(&tenant, &key)
        .await
        .expect("lookup")
        .expect("a row");
    assert_eq!(
        decide(Some(&record), "sum", cutoff_us),
        Decision::TakeOver {
            stale_owner: owner.clone()
        }
    );
    let heir = OwnerToken::generate();
    assert!(store
        .idempotency_take_over(&tenant, &key, &owner, &heir, cutoff_us)
        .await
        .expect("take over"));
    let record = store
        .idempotency_lookup(&tenant, &key)
        .await
        .expect("lookup")
        .expect("a row");
    assert_eq!(record.owner, heir);
    assert!(
        record.read_at_us - record.reserved_at_us < 5_000_000,
        "the take-over stamps the store's time"
    );
}

/// A keyed request whose client gives up (or that the server times out) ends without an
/// answer: its reservation is released at once, so the client's retry runs instead of
/// being refused as `request_in_flight` until the stale cutoff (30 s here).
async fn a_request_its_client_abandoned_leaves_no_reservation_behind(backend: Backend) {
    // The client disconnects while the handler runs (the server would let it finish).
    let patient = crate::helpers::spawn_app_with(
        backend,
        traqlyte_server::ServerConfig {
            request_timeout_ms: 10_000,
            test_publish_delay_ms: 1_500,
            idempotency_stale_after_ms: 30_000,
            ..Default::default()
        },
    )
    .await;
    let id = create_campaign(&patient).await;
    let impatient = patient
        .client
        .post(patient.url(&format!("/campaigns/{id}/publish")))
        .bearer_auth(&patient.key)
        .header("X-TL-Idempotency-Key", "abandoned-1")
        .timeout(Duration::from_millis(600))
        .send()
        .await;
    assert!(impatient.is_err(), "the client gave up before an answer");
    reservation_gone(&patient, "abandoned-1").await;
    assert_eq!(
        version_count(&patient, &id).await,
        0,
        "the handler was stopped"
    );
    let (status, replayed, body) =
        publish(&patient, &patient.key, &id, Some("abandoned-1"), "").await;
    assert_eq!(
        (status, replayed),
        (StatusCode::CREATED, false),
        "{}",
        String::from_utf8_lossy(&body)
    );
    assert_eq!(version_count(&patient, &id).await, 1);

    // The server times the request out (408).
    let hasty = crate::helpers::spawn_app_with(
        backend,
        traqlyte_server::ServerConfig {
            request_timeout_ms: 1_000,
            test_publish_delay_ms: 2_500,
            idempotency_stale_after_ms: 30_000,
            ..Default::default()
        },
    )
    .await;
    let id = create_campaign(&hasty).await;
    let (status, _, _) = publish(&hasty, &hasty.key, &id, Some("timed-out-1"), "").await;
    assert_eq!(status, StatusCode::REQUEST_TIMEOUT);
    reservation_gone(&hasty, "timed-out-1").await;
    // A retry runs (and times out again) instead of being refused as in flight.
    let (status, replayed, body) = publish(&hasty, &hasty.key, &id, Some("timed-out-1"), "").await;
    assert_eq!(
        (status, replayed),
        (StatusCode::REQUEST_TIMEOUT, false),
        "{}",
        String::from_utf8_lossy(&body)
    );
    assert_eq!(version_count(&hasty, &id).await, 0);
}

/// Waits until the reservation of `key` is gone (at most 5 s, far below the cutoff).
async fn reservation_gone(app: &TestApp, key: &str) {
    let failure = "the reservation stayed in flight";
    wait_until_reserved(app, key, false, Duration::from_secs(5), failure).await;
}

/// 600 keyed assignments whose clients hang up 0–4 ms after sending them: none leaves its
/// key in flight. The release of a dropped request ran on another pooled connection than
/// its claim's insert, and could delete before the insert committed: about one in a
/// hundred keys was then refused `409 request_in_flight` until the stale cutoff (a
/// review on PostgreSQL).
async fn keyed_requests_whose_clients_hang_up_at_once_leave_no_reservation_in_flight(
    backend: Backend,
) {
    use tokio::io::AsyncWriteExt;
    let app = spawn_app(backend).await;
    let id = create_campaign(&app).await;
    app.post_raw(&format!("/campaigns/{id}/publish"), "").await;
    let address = app.address.trim_start_matches("http://").to_string();
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(16));
    let mut hang_ups = Vec::new();
    for i in 0..600u64 {
        let (address, key, id, gate) = (address.clone(), app.key.clone(), id.clone(), gate.clone());
        hang_ups.push(tokio::spawn(async move {
            let _turn = gate.acquire().await.expect("gate");
            let body = json!({"campaign_id": id, "unit_id": format!("u-{i}")}).to_string();
            let request = format!(
                "POST /assignments HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\
                 Idempotency-Key: hang-{i}\r\nContent-Type: application/json\r\n\
                 Content-Length: {}\r\n\r\n{body}",
                body.len()
            );
            let mut socket = tokio::net::TcpStream::connect(&address)
                .await
                .expect("connect");
            socket.write_all(request.as_bytes()).await.expect("send");
            tokio::time::sleep(Duration::from_micros(i * 37 % 4_000)).await;
            drop(socket);
        }));
    }
    for hang_up in hang_ups {
        hang_up.await.expect("a client");
    }
    // A dropped request's release runs on a task of its own once its claim's write ended.
    let in_flight =
        "SELECT count(*) FROM idempotency_keys WHERE idem_key LIKE 'hang-%' AND status IS NULL";
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let left = app.integer_sql(in_flight).await;
        if left == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{left} keys left in flight by requests nobody is running"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

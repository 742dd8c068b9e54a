//! Request bodies sent with `Content-Encoding: gzip` (Segment's SDKs with `gzip=True`, the
//! OpenLineage client's `compression: gzip`): inflated before anything reads them, so a
//! compressed body is the same request as its plain twin; bounded by the route's limit
//! after inflating; and every other encoding, or a broken stream, is a clear 4xx that
//! writes nothing.

use std::io::Write;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::{checkout_event, spawn_app, Answer, Backend, TestApp};
use crate::segment::{create_source, segment_stats, track};

crate::on_both_backends!(
    gzip_bodies_are_the_same_requests_as_their_plain_twins,
    bad_or_oversized_compressed_bodies_are_clear_4xx_and_write_nothing,
);

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).expect("compress");
    encoder.finish().expect("compress")
}

/// POSTs `body` to `path` with the tenant's key (or, for `/v1/*`, the write key as HTTP
/// Basic user) and `Content-Encoding: encoding`.
async fn post_encoded(
    app: &TestApp,
    path: &str,
    write_key: Option<&str>,
    encoding: &str,
    body: Vec<u8>,
) -> Answer {
    let request = app
        .client
        .post(app.url(path))
        .header("content-type", "application/json")
        .header("content-encoding", encoding)
        .body(body);
    let request = match write_key {
        Some(key) => request.basic_auth(key, Some("")),
        None => request.bearer_auth(&app.key),
    };
    app.send(request).await
}

fn bytes(value: &Value) -> Vec<u8> {
    value.to_string().into_bytes()
}

async fn gzip_bodies_are_the_same_requests_as_their_plain_twins(backend: Backend) {
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    let event = checkout_event("order-gz");
    let path = "/events/checkout_completed";
    let first = post_encoded(&app, path, None, "gzip", gzip(&bytes(&event))).await;
    assert_eq!(first.body["status"], "inserted", "{}", first.body);
    // The same event, plain: a duplicate of the compressed one.
    let plain = app.post_event(&event).await;
    assert_eq!(plain.body["status"], "duplicate", "{}", plain.body);
    // A batch in two gzip members (as `cat a.gz b.gz` writes), alias `x-gzip`.
    let batch = bytes(&json!([event, checkout_event("order-gz-2")]));
    let (head, tail) = batch.split_at(batch.len() / 2);
    let members = [gzip(head), gzip(tail)].concat();
    let answer = post_encoded(
        &app,
        "/events/checkout_completed/batch",
        None,
        "x-gzip",
        members,
    )
    .await;
    assert_eq!(
        answer.item_statuses(),
        vec!["duplicate", "inserted"],
        "{}",
        answer.body
    );
    assert_eq!(app.checkout_stats().await, (2, 2, 0));
    // A batch whose compressed body is larger than what is inflated inline (16 KiB), and
    // an `identity` line beside the `gzip` one.
    let many: Vec<Value> = (0..800u64)
        .map(|i| {
            let mut event = checkout_event(&format!("order-{i}"));
            let noise = |k: u64| i.wrapping_add(k).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            event["params"] = json!({"n": format!("{:016x}{:016x}", noise(1), noise(2) >> 3)});
            event
        })
        .collect();
    let big = gzip(&bytes(&Value::Array(many)));
    assert!(big.len() > 16 * 1024, "{}", big.len());
    let request = app
        .client
        .post(app.url("/events/checkout_completed/batch"))
        .bearer_auth(&app.key)
        .header("content-encoding", "identity")
        .header("content-encoding", "gzip")
        .body(big);
    let answer = app.send(request).await;
    let statuses = answer.item_statuses();
    assert_eq!(statuses.len(), 800, "{}", answer.body);
    assert!(statuses.iter().all(|s| *s == "inserted"), "{}", answer.body);
    assert_eq!(app.checkout_stats().await, (802, 2, 0));

    // A Segment message, compressed, then the same message plain: one stored.
    let key = create_source(&app, "gz");
    let message = track("m-gz", "user-1", "order-1", 5.0);
    let sent = post_encoded(
        &app,
        "/v1/track",
        Some(&key),
        "gzip",
        gzip(&bytes(&message)),
    )
    .await;
    assert_eq!(sent.body, json!({"success": true}), "{}", sent.status);
    let again = post_encoded(&app, "/v1/track", Some(&key), "identity", bytes(&message)).await;
    assert_eq!(again.body, json!({"success": true}), "{}", again.status);
    assert_eq!(segment_stats(&app).await, (1, 1, 0));

    // A transport idempotency key over a compressed body: the plain retry is a replay
    // (the checksum is the inflated body's), not a 422 for another body.
    let contract = json!({
        "name": "gz_contract", "version": 1,
        "fields": [{"pointer": "/id", "required": true, "type": "string"}]
    });
    let keyed = |encoding: &str, body: Vec<u8>| {
        app.client
            .post(app.url("/contracts"))
            .bearer_auth(&app.key)
            .header("content-type", "application/json")
            .header("content-encoding", encoding.to_string())
            .header("Idempotency-Key", "gz-contract-1")
            .body(body)
    };
    let created = app.send(keyed("gzip", gzip(&bytes(&contract)))).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let replayed = app.send(keyed("identity", bytes(&contract))).await;
    assert_eq!(replayed.status, StatusCode::CREATED, "{}", replayed.body);
    assert_eq!(replayed.body, created.body);
}

/// A route, its write key (`/v1/*`), the `Content-Encoding`, the body, and the answer.
type Case<'a> = (
    &'a str,
    Option<&'a str>,
    &'a str,
    Vec<u8>,
    StatusCode,
    &'a str,
);

async fn bad_or_oversized_compressed_bodies_are_clear_4xx_and_write_nothing(backend: Backend) {
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    let key = create_source(&app, "gz");
    let event = bytes(&checkout_event("order-bad"));
    let path = "/events/checkout_completed";
    // 2 MiB of JSON that compresses to a few kilobytes: over the 1 MiB body limit once
    // inflated (a `/v1/*` route answers its limits with 400, as Segment does).
    let mut bomb = json!({"pad": " ".repeat(2 * 1024 * 1024)});
    bomb["order_id"] = json!("order-bomb");
    let bomb = gzip(&bytes(&bomb));
    assert!(bomb.len() < 16 * 1024, "{}", bomb.len());
    let mut truncated = gzip(&event);
    truncated.truncate(truncated.len() - 5);
    let cases: Vec<Case> = vec![
        (
            path,
            None,
            "br",
            event.clone(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_content_encoding",
        ),
        (
            path,
            None,
            "gzip, gzip",
            gzip(&gzip(&event)),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_content_encoding",
        ),
        (
            path,
            None,
            "gzip",
            event.clone(),
            StatusCode::BAD_REQUEST,
            "invalid_gzip",
        ),
        (
            path,
            None,
            "gzip",
            truncated.clone(),
            StatusCode::BAD_REQUEST,
            "invalid_gzip",
        ),
        (
            path,
            None,
            "gzip",
            [gzip(&event), b"trailing".to_vec()].concat(),
            StatusCode::BAD_REQUEST,
            "invalid_gzip",
        ),
        (
            path,
            None,
            "gzip",
            bomb.clone(),
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
        ),
        (
            "/v1/track",
            Some(&key),
            "gzip",
            truncated,
            StatusCode::BAD_REQUEST,
            "invalid_gzip",
        ),
        (
            "/v1/track",
            Some(&key),
            "deflate",
            event.clone(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_content_encoding",
        ),
        (
            "/v1/batch",
            Some(&key),
            "gzip",
            bomb,
            StatusCode::BAD_REQUEST,
            "body_too_large",
        ),
    ];
    // Two `gzip` lines are gzip twice; a value that is not text is no coding.
    let twice = app
        .client
        .post(app.url(path))
        .bearer_auth(&app.key)
        .header("content-encoding", "gzip")
        .header("content-encoding", "gzip")
        .body(gzip(&gzip(&event)));
    let not_text = app
        .client
        .post(app.url(path))
        .bearer_auth(&app.key)
        .header(
            "content-encoding",
            reqwest::header::HeaderValue::from_bytes(b"gzip\xff").expect("obs-text"),
        )
        .body(gzip(&event));
    for request in [twice, not_text] {
        let answer = app.send(request).await;
        assert_eq!(
            (answer.status, answer.code()),
            (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_content_encoding"
            ),
            "{}",
            answer.body
        );
    }
    for (route, write_key, encoding, body, status, code) in cases {
        let answer = post_encoded(&app, route, write_key, encoding, body).await;
        assert_eq!(
            (answer.status, answer.code()),
            (status, code),
            "{route} {encoding}: {}",
            answer.body
        );
        assert_eq!(
            answer.body["error"]["field"], "Content-Encoding",
            "{route} {encoding}: {}",
            answer.body
        );
    }
    // Nothing stored, counted or collided (the checkout row is read strictly: a missing
    // field fails, it is never read as zero).
    assert_eq!(app.checkout_stats().await, (0, 0, 0));
    assert_eq!(segment_stats(&app).await, (0, 0, 0));
}

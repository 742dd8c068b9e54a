//! The Segment-compatible tracking API: sources and write keys (CLI and `GET /sources`),
//! every `/v1/*` route, dedupe of retries by (source, messageId), bad input refused with
//! nothing stored, a batch whose invalid message is rejected alone and recorded, a
//! revocation refused at once by another process, metric bindings that turn track events
//! into outcomes once whatever their messageIds, and the official Python client through
//! a proxy that drops replies so it really retries.

use std::process::{Command, Output};

use reqwest::StatusCode;
use serde_json::{json, Value};
use traqlyte_identity::segment::MessageType;

use crate::helpers::{spawn_app, Answer, Backend, ServerProcess, TestApp};
use crate::lineage::repository_root;

crate::on_both_backends!(
    a_source_created_by_the_cli_stores_a_track_call_once_whatever_its_sent_at,
    every_v1_route_stores_its_message_type_with_the_key_in_basic_auth_or_the_body,
    the_paths_of_other_libraries_and_browsers_store_as_the_documented_ones,
    integer_ids_from_the_ruby_and_php_libraries_are_their_decimal_strings,
    a_lone_surrogate_from_a_browser_is_the_replacement_character_and_refuses_nothing,
    python_s_nan_and_infinity_are_null_and_refuse_nothing,
    bad_input_on_v1_is_a_clear_400_or_401_and_stores_nothing,
    an_invalid_message_in_a_batch_is_rejected_alone_and_recorded_with_its_reason,
    a_reused_message_id_with_other_content_is_a_collision_and_changes_nothing,
    a_retry_that_gained_a_user_id_after_identify_is_a_duplicate,
    a_retry_with_a_user_id_stored_before_its_anonymous_original_makes_it_a_duplicate,
    a_revoked_source_is_refused_at_once_by_another_server_process,
    bound_track_events_become_outcomes_once_and_unassigned_units_are_counted,
    bindings_are_checked_against_the_campaign_and_immutable,
    a_campaign_takes_at_most_its_limit_of_bindings,
    a_binding_declared_in_another_unicode_normal_form_matches_its_events,
    a_business_key_too_long_for_a_dedupe_key_is_still_one_fact,
    a_unit_assigned_in_another_unicode_normal_form_gets_its_outcomes,
    library_top_level_keys_are_ignored_and_an_inexact_number_refuses_only_its_message,
    a_message_nested_too_deep_is_refused_alone_in_a_batch_as_on_its_own_route,
    rolling_up_source_and_binding_tallies_keeps_every_count,
    the_official_python_client_retrying_through_a_lossy_proxy_stores_each_event_once,
    the_official_browser_library_on_another_origin_retrying_through_a_lossy_proxy_stores_each_message_once,
    colons_in_event_names_and_business_keys_never_merge_two_facts,
    a_bound_fact_falls_in_its_window_at_the_corrected_time_and_a_timeless_one_resent_is_a_duplicate,
);

/// `traqlyte ARGS --database-url URL`.
pub(crate) fn traqlyte(app: &TestApp, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_traqlyte"))
        .args(args)
        .args(["--database-url", app.database_url()])
        .output()
        .expect("run traqlyte")
}

fn stdout(output: Output) -> String {
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).expect("utf-8")
}

/// A new source of the test tenant; its write key, printed alone by the CLI.
pub(crate) fn create_source(app: &TestApp, name: &str) -> String {
    let text = stdout(traqlyte(
        app,
        &["source", "create", name, "--tenant", "test tenant"],
    ));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert!(
        lines[0].starts_with("tlw_") && lines[0].len() == 52,
        "{text}"
    );
    lines[0].to_string()
}

pub(crate) async fn post_v1(
    app: &TestApp,
    path: &str,
    write_key: Option<&str>,
    body: &Value,
) -> Answer {
    let mut request = app
        .client
        .post(app.url(path))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(key) = write_key {
        request = request.basic_auth(key, Some(""));
    }
    app.send(request).await
}

pub(crate) fn track(message_id: &str, user: &str, order: &str, revenue: f64) -> Value {
    json!({
        "type": "track", "messageId": message_id, "userId": user, "event": "Order Completed",
        "properties": {"order_id": order, "revenue": revenue},
        "timestamp": traqlyte_identity::format_rfc3339_micros(traqlyte_store::now_us() + 60_000_000),
        "sentAt": traqlyte_identity::format_rfc3339_micros(traqlyte_store::now_us()),
        "context": {"library": {"name": "analytics-test", "version": "1"}}
    })
}

/// `(stored, duplicates, collisions)` of `segment.message` in `GET /stats`.
pub(crate) async fn segment_stats(app: &TestApp) -> (i64, i64, i64) {
    let answer = app.get("/stats").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert!(answer.body["contracts"].is_object(), "{}", answer.body);
    let row = &answer.body["contracts"]["segment.message"];
    let n = |k: &str| row[k].as_i64().unwrap_or(0);
    (n("stored"), n("duplicates"), n("collisions"))
}

pub(crate) async fn source_row(app: &TestApp, name: &str) -> Value {
    let listed = app.get("/sources").await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.body);
    listed.body["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .find(|s| s["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no source {name}: {}", listed.body))
}

async fn a_source_created_by_the_cli_stores_a_track_call_once_whatever_its_sent_at(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    let key = create_source(&app, "web");
    let message = track("m-1", "user-1", "order-1", 10.0);
    // The first send carries its key in the body, which must not be stored.
    let mut keyed = message.clone();
    keyed["writeKey"] = json!(key);
    let before = traqlyte_store::now_us();
    let first = post_v1(&app, "/v1/track", None, &keyed).await;
    let after = traqlyte_store::now_us();
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    assert_eq!(first.body, json!({"success": true}));
    let mut retry = message.clone();
    retry["sentAt"] = json!("2030-01-01T00:00:00Z");
    retry["context"]["library"]["version"] = json!("2");
    let again = post_v1(&app, "/v1/track", Some(&key), &retry).await;
    assert_eq!(again.body, json!({"success": true}));
    assert_eq!(segment_stats(&app).await, (1, 1, 0));
    let row = source_row(&app, "web").await;
    assert_eq!(
        (row["stored"].as_i64(), row["duplicates"].as_i64()),
        (Some(1), Some(1))
    );
    assert!(row["id"].as_str().is_some_and(|id| id.starts_with("src_")));
    assert_eq!(row["key_prefix"], json!(&key[..12]));
    let listed = app.get("/sources").await.body.to_string();
    assert!(!listed.contains(&key), "the write key is never shown again");
    let cli = stdout(traqlyte(
        &app,
        &["source", "list", "--tenant", "test tenant"],
    ));
    assert!(
        cli.contains("\tweb\t") && cli.contains("\tactive\t1\t1\t0"),
        "{cli}"
    );
    let contracts = app.get("/contracts").await;
    let builtin: Vec<&str> = contracts.body["builtin"]
        .as_array()
        .expect("builtin")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert!(builtin.contains(&"segment.message"), "{}", contracts.body);
    // The stored message: receivedAt and the corrected timestamp set, the key not kept.
    let taken = app.get("/contracts/segment.message").await;
    assert_eq!(taken.status, StatusCode::OK);
    let source = row["id"].as_str().expect("id");
    let stored = stored_message(&app, source, Some(MessageType::Track), &message).await;
    let payload = &stored["payload"];
    let micros = |value: &Value, what: &str| {
        traqlyte_identity::parse_rfc3339_micros(
            value.as_str().unwrap_or_else(|| panic!("{what}: {stored}")),
        )
        .unwrap_or_else(|e| panic!("{what}: {e}: {stored}"))
    };
    let received = micros(&payload["receivedAt"], "receivedAt");
    assert!(
        (before..=after).contains(&received),
        "received during the first request ({before}..={after}): {payload}"
    );
    // Segment's clock-skew correction: receivedAt - (sentAt - timestamp), with the
    // first send's sentAt (the retry is a duplicate and changes nothing).
    let sent = micros(&message["sentAt"], "sentAt");
    let client = micros(&message["timestamp"], "timestamp");
    assert_eq!(
        micros(&payload["timestamp"], "timestamp"),
        received - (sent - client),
        "{payload}"
    );
    assert_eq!(
        payload["originalTimestamp"], message["timestamp"],
        "{payload}"
    );
    assert_eq!(payload["sentAt"], message["sentAt"], "{payload}");
    assert!(payload.get("writeKey").is_none(), "{payload}");
    assert!(!stored.to_string().contains(&key), "{stored}");
}

/// `GET /events/segment.message/{id}` of `message` sent by `source` (on the route of
/// `route`; `None` for `/v1/batch`), the id computed as the server computes it.
async fn stored_message(
    app: &TestApp,
    source: &str,
    route: Option<MessageType>,
    message: &Value,
) -> Value {
    let envelope = traqlyte_identity::segment::Envelope {
        source,
        received_at_us: 0,
        route_type: route,
        sent_at: None,
        context: None,
    };
    let id = traqlyte_identity::segment::identify_message(message, &envelope)
        .expect("valid")
        .identified
        .event_id;
    let stored = app.get(&format!("/events/segment.message/{id}")).await;
    assert_eq!(stored.status, StatusCode::OK, "{message}: {}", stored.body);
    stored.body
}

async fn every_v1_route_stores_its_message_type_with_the_key_in_basic_auth_or_the_body(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    let key = create_source(&app, "server");
    let messages = [
        (
            "/v1/track",
            MessageType::Track,
            json!({"userId": "u1", "event": "Signed Up"}),
        ),
        (
            "/v1/identify",
            MessageType::Identify,
            json!({"userId": "u1", "traits": {"plan": "pro"}}),
        ),
        (
            "/v1/page",
            MessageType::Page,
            json!({"anonymousId": "a1", "name": "Home"}),
        ),
        (
            "/v1/screen",
            MessageType::Screen,
            json!({"userId": "u1", "name": "Settings"}),
        ),
        (
            "/v1/group",
            MessageType::Group,
            json!({"userId": "u1", "groupId": "g1"}),
        ),
        (
            "/v1/alias",
            MessageType::Alias,
            json!({"userId": "u1", "previousId": "a1"}),
        ),
    ];
    for (path, _, message) in &messages {
        let answer = post_v1(&app, path, Some(&key), message).await;
        assert_eq!(answer.status, StatusCode::OK, "{path}: {}", answer.body);
        // The same content without a messageId again: one identity, a duplicate.
        let mut in_body = message.clone();
        in_body["writeKey"] = json!(key);
        let answer = post_v1(&app, path, None, &in_body).await;
        assert_eq!(answer.status, StatusCode::OK, "{path}: {}", answer.body);
    }
    let batch = json!({"writeKey": key, "sentAt": "2026-11-30T12:00:00Z", "context": {"ip": "203.0.113.9"},
        "integrations": {"All": true}, "timestamp": null,
        "batch": [{"type": "track", "userId": "u2", "event": "Signed Up", "messageId": "b-1",
                   "timestamp": "2026-11-30T11:59:00Z", "context": {"locale": "fr-FR"}},
                  {"type": "identify", "anonymousId": "a2", "messageId": "b-2"}]});
    let answer = post_v1(&app, "/v1/batch", None, &batch).await;
    assert_eq!(answer.body, json!({"success": true}));
    assert_eq!(segment_stats(&app).await, (8, 6, 0));
    // The batch's fields reached the stored message: its context merged under the
    // message's own, its sentAt correcting the client's clock, its write key dropped.
    let source = source_row(&app, "server").await["id"]
        .as_str()
        .expect("id")
        .to_string();
    // Each route stored its message under the route's type, without the body's key.
    for (path, kind, message) in &messages {
        let stored = stored_message(&app, &source, Some(*kind), message).await;
        let payload = &stored["payload"];
        assert_eq!(payload["type"], kind.as_str(), "{path}: {stored}");
        assert!(payload.get("writeKey").is_none(), "{path}: {payload}");
    }
    let envelope = traqlyte_identity::segment::Envelope {
        source: &source,
        received_at_us: 0,
        route_type: None,
        sent_at: None,
        context: None,
    };
    let id = traqlyte_identity::segment::identify_message(&batch["batch"][0], &envelope)
        .expect("valid")
        .identified
        .event_id;
    let stored = app.get(&format!("/events/segment.message/{id}")).await;
    assert_eq!(stored.status, StatusCode::OK, "{}", stored.body);
    let payload = &stored.body["payload"];
    assert_eq!(
        payload["context"],
        json!({"ip": "203.0.113.9", "locale": "fr-FR"})
    );
    assert_eq!(payload["originalTimestamp"], "2026-11-30T11:59:00Z");
    let received = traqlyte_identity::parse_rfc3339_micros(
        payload["receivedAt"].as_str().expect("receivedAt"),
    )
    .expect("a time");
    let corrected =
        traqlyte_identity::parse_rfc3339_micros(payload["timestamp"].as_str().expect("timestamp"))
            .expect("a time");
    assert_eq!(
        received - corrected,
        60_000_000,
        "sent a minute after it happened"
    );
    assert!(payload.get("writeKey").is_none(), "{payload}");
}

/// The paths other official libraries post to store exactly as the documented ones:
/// `/v1/import` (Ruby, Java, classic Android) and analytics.js's `/v1/t` … `/v1/b`, whose
/// bodies come as `text/plain` with the write key inside. Browsers post from any site,
/// so every answer of the tracking routes, errors included, allows the page's origin with
/// credentials, and a preflight is answered; the rest of the API answers no CORS at all.
async fn the_paths_of_other_libraries_and_browsers_store_as_the_documented_ones(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = create_source(&app, "web");
    let origin = "http://shop.example";
    let browser_post = |path: &str, body: &Value| {
        app.client
            .post(app.url(path))
            .header("content-type", "text/plain;charset=UTF-8")
            .header("origin", origin)
            .body(body.to_string())
    };
    let singles = [
        (
            "/v1/t",
            "/v1/track",
            json!({"type": "track", "userId": "u1", "event": "Viewed", "messageId": "ajs-1"}),
        ),
        (
            "/v1/i",
            "/v1/identify",
            json!({"type": "identify", "userId": "u1", "traits": {"plan": "pro"}, "messageId": "ajs-2"}),
        ),
        (
            "/v1/p",
            "/v1/page",
            json!({"type": "page", "anonymousId": "a1", "name": "Home", "messageId": "ajs-3"}),
        ),
        (
            "/v1/s",
            "/v1/screen",
            json!({"type": "screen", "userId": "u1", "name": "Cart", "messageId": "ajs-4"}),
        ),
        (
            "/v1/g",
            "/v1/group",
            json!({"type": "group", "userId": "u1", "groupId": "g1", "messageId": "ajs-5"}),
        ),
        (
            "/v1/a",
            "/v1/alias",
            json!({"type": "alias", "userId": "u1", "previousId": "a1", "messageId": "ajs-6"}),
        ),
    ];
    for (short, long, message) in &singles {
        let mut in_body = message.clone();
        in_body["writeKey"] = json!(key);
        let response = browser_post(short, &in_body).send().await.expect("POST");
        assert_eq!(response.status(), StatusCode::OK, "{short}");
        assert_eq!(
            response.headers()["access-control-allow-origin"],
            origin,
            "{short}"
        );
        let body: Value = response.json().await.expect("JSON");
        assert_eq!(body, json!({"success": true}), "{short}");
        // The same message through the documented path: a retry of it.
        let answer = post_v1(&app, long, Some(&key), message).await;
        assert_eq!(answer.status, StatusCode::OK, "{long}: {}", answer.body);
    }
    assert_eq!(segment_stats(&app).await, (6, 6, 0));
    let batch = |ids: [&str; 2]| {
        json!({"writeKey": key, "sentAt": "2026-11-30T12:00:00Z", "batch": [
            {"type": "track", "userId": "u2", "event": "Signed Up", "messageId": ids[0]},
            {"type": "identify", "anonymousId": "a2", "messageId": ids[1]}]})
    };
    let response = browser_post("/v1/b", &batch(["b-1", "b-2"]))
        .send()
        .await
        .expect("POST /v1/b");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["access-control-allow-origin"], origin);
    let answer = post_v1(&app, "/v1/import", Some(&key), &batch(["i-1", "i-2"])).await;
    assert_eq!(answer.body, json!({"success": true}));
    assert_eq!(segment_stats(&app).await, (10, 6, 0));
    // Both batches again through `/v1/batch`: four retries.
    for ids in [["b-1", "b-2"], ["i-1", "i-2"]] {
        let answer = post_v1(&app, "/v1/batch", None, &batch(ids)).await;
        assert_eq!(answer.body, json!({"success": true}));
    }
    assert_eq!(segment_stats(&app).await, (10, 10, 0));
    // An OAuth Bearer token (analytics-python and -node, when configured for Segment's
    // OAuth) is not read: the write key in the body is.
    let oauth = app
        .client
        .post(app.url("/v1/track"))
        .bearer_auth("an-oauth-access-token")
        .json(&json!({"writeKey": key, "userId": "u3", "event": "Viewed", "messageId": "oauth-1"}));
    assert_eq!(app.send(oauth).await.body, json!({"success": true}));
    let without_key = app
        .client
        .post(app.url("/v1/track"))
        .bearer_auth("an-oauth-access-token")
        .json(&json!({"userId": "u3", "event": "Viewed"}));
    let refused = app.send(without_key).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED, "{}", refused.body);
    assert_eq!(segment_stats(&app).await, (11, 10, 0));
    // An error is readable by the page too: a key that is no write key.
    let refused = browser_post(
        "/v1/t",
        &json!({"writeKey": "tlw_nope", "event": "x", "userId": "u"}),
    )
    .send()
    .await
    .expect("POST");
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(refused.headers()["access-control-allow-origin"], origin);
    // Its challenge names the scheme the tracking routes take.
    assert_eq!(
        refused.headers()["www-authenticate"],
        "Basic realm=\"traqlyte\""
    );
    // A preflight (JSON body, Basic auth) is answered for POST with the headers asked.
    for path in ["/v1/track", "/v1/t", "/v1/b", "/v1/batch", "/v1/import"] {
        let preflight = app
            .client
            .request(reqwest::Method::OPTIONS, app.url(path))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "content-type,authorization",
            )
            .send()
            .await
            .expect("OPTIONS");
        assert!(
            preflight.status().is_success(),
            "{path}: {}",
            preflight.status()
        );
        let headers = preflight.headers();
        // The origin answered back, credentials allowed: `navigator.sendBeacon` sends in
        // credentials mode `include`, where a browser refuses `*` and a JSON beacon was
        // never sent.
        assert_eq!(headers["access-control-allow-origin"], origin, "{path}");
        assert_eq!(
            headers["access-control-allow-credentials"], "true",
            "{path}"
        );
        assert_eq!(headers["access-control-allow-methods"], "POST", "{path}");
        assert_eq!(
            headers["access-control-allow-headers"], "content-type,authorization",
            "{path}"
        );
        assert_eq!(headers["access-control-max-age"], "86400", "{path}");
    }
    // A NUL in the query is refused before the route's own layers: readable by the page.
    let refused = browser_post(
        "/v1/t?x=%00",
        &json!({"writeKey": key, "event": "x", "userId": "u"}),
    )
    .send()
    .await
    .expect("POST");
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    assert_eq!(refused.headers()["access-control-allow-origin"], origin);
    assert_eq!(
        refused.headers()["access-control-expose-headers"],
        "retry-after"
    );
    // Nothing else of the API answers CORS: a page may not read it or preflight it.
    let native = app
        .client
        .post(app.url("/events/checkout_completed"))
        .bearer_auth(&app.key)
        .header("origin", origin)
        .json(&crate::helpers::checkout_event("o1"))
        .send()
        .await
        .expect("POST");
    assert!(native
        .headers()
        .get("access-control-allow-origin")
        .is_none());
    let preflight = app
        .client
        .request(
            reqwest::Method::OPTIONS,
            app.url("/events/checkout_completed"),
        )
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .send()
        .await
        .expect("OPTIONS");
    assert!(!preflight.status().is_success(), "{}", preflight.status());
    assert!(preflight
        .headers()
        .get("access-control-allow-origin")
        .is_none());
}

/// Segment's Ruby and PHP libraries send an application's integer `user.id` as a JSON
/// number: stored as its decimal string, one message and one unit with `"42"`.
async fn integer_ids_from_the_ruby_and_php_libraries_are_their_decimal_strings(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = create_source(&app, "ruby");
    let message = |user: Value| {
        json!({"type": "track", "userId": user, "event": "Order Completed", "messageId": "rb-1",
               "timestamp": "2026-11-30T11:59:00.000Z", "properties": {"order_id": 7}})
    };
    let batch = json!({"batch": [message(json!(42))], "sentAt": "2026-11-30T12:00:00.000Z"});
    let answer = post_v1(&app, "/v1/import", Some(&key), &batch).await;
    assert_eq!(answer.body, json!({"success": true}));
    let answer = post_v1(&app, "/v1/track", Some(&key), &message(json!("42"))).await;
    assert_eq!(answer.body, json!({"success": true}));
    assert_eq!(segment_stats(&app).await, (1, 1, 0));
    let source = source_row(&app, "ruby").await["id"]
        .as_str()
        .expect("id")
        .to_string();
    let stored = stored_message(&app, &source, None, &message(json!("42"))).await;
    assert_eq!(stored["payload"]["userId"], "42", "{stored}");
}

/// `JSON.stringify` writes a string cut inside an emoji with a lone surrogate escape
/// (`\ud83d`), which strict JSON parsers refuse, and with it the whole batch. The tracking
/// routes read it as U+FFFD, as browsers' own encoders do; a pair stays the character it
/// is, and a resend is a retry, not a collision.
async fn a_lone_surrogate_from_a_browser_is_the_replacement_character_and_refuses_nothing(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    let key = create_source(&app, "web");
    let body = format!(
        r#"{{"writeKey":"{key}","batch":[
            {{"type":"track","userId":"u","event":"E","messageId":"s-1","properties":{{"title":"cut \ud83d"}}}},
            {{"type":"track","userId":"u","event":"E","messageId":"s-2","properties":{{"title":"whole \ud83d\ude00","path":"C:\\ud83d"}}}}]}}"#
    );
    for expected in [(2, 0, 0), (2, 2, 0)] {
        let answer = app
            .send(
                app.client
                    .post(app.url("/v1/b"))
                    .header("content-type", "text/plain")
                    .body(body.clone()),
            )
            .await;
        assert_eq!(answer.body, json!({"success": true}));
        assert_eq!(segment_stats(&app).await, expected);
    }
    let source = source_row(&app, "web").await["id"]
        .as_str()
        .expect("id")
        .to_string();
    let id_only = |id: &str| json!({"type": "track", "userId": "u", "event": "E", "messageId": id});
    let cut = stored_message(&app, &source, None, &id_only("s-1")).await;
    assert_eq!(cut["payload"]["properties"]["title"], "cut \u{fffd}");
    let whole = stored_message(&app, &source, None, &id_only("s-2")).await;
    assert_eq!(whole["payload"]["properties"]["title"], "whole \u{1f600}");
    assert_eq!(whole["payload"]["properties"]["path"], "C:\\ud83d");
}

/// Python's `json` (analytics-python) writes `float('nan')` and `float('inf')` as `NaN`
/// and `Infinity`, which no JSON parser takes: the whole batch was a `400`, which the
/// client drops, valid messages with it. They are read as `null`, as `JSON.stringify`
/// writes them, with a lone surrogate in the same body too; a resend is a retry.
async fn python_s_nan_and_infinity_are_null_and_refuse_nothing(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = create_source(&app, "py");
    let body = format!(
        r#"{{"writeKey":"{key}","batch":[
            {{"type":"track","userId":"u","event":"E","messageId":"n-1","properties":{{"price":NaN,"title":"NaN","cut":"\ud83d"}}}},
            {{"type":"track","userId":"u","event":"E","messageId":"n-2","properties":{{"ratio":-Infinity,"max":Infinity}}}},
            {{"type":"track","userId":"u","event":"E","messageId":"n-3","properties":{{"price":1.5}}}}]}}"#
    );
    for expected in [(3, 0, 0), (3, 3, 0)] {
        let answer = app
            .send(
                app.client
                    .post(app.url("/v1/batch"))
                    .header("content-type", "application/json")
                    .body(body.clone()),
            )
            .await;
        assert_eq!(answer.body, json!({"success": true}));
        assert_eq!(segment_stats(&app).await, expected);
    }
    let source = source_row(&app, "py").await["id"]
        .as_str()
        .expect("id")
        .to_string();
    let id_only = |id: &str| json!({"type": "track", "userId": "u", "event": "E", "messageId": id});
    let first = stored_message(&app, &source, None, &id_only("n-1")).await;
    assert_eq!(
        first["payload"]["properties"],
        json!({"price": null, "title": "NaN", "cut": "\u{fffd}"})
    );
    let second = stored_message(&app, &source, None, &id_only("n-2")).await;
    assert_eq!(
        second["payload"]["properties"],
        json!({"ratio": null, "max": null})
    );
    // A single call too.
    let single = app
        .send(
            app.client
                .post(app.url("/v1/track"))
                .basic_auth(&key, Some(""))
                .header("content-type", "application/json")
                .body(r#"{"userId":"u","event":"E","messageId":"n-4","properties":{"x":NaN}}"#),
        )
        .await;
    assert_eq!(single.body, json!({"success": true}));
    assert_eq!(segment_stats(&app).await, (4, 3, 0));
}

async fn bad_input_on_v1_is_a_clear_400_or_401_and_stores_nothing(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = create_source(&app, "web");
    let good = json!({"userId": "u1", "event": "E"});
    let unknown = format!("tlw_{}", "0".repeat(48));
    for (write_key, body) in [
        (None, good.clone()),
        (Some(unknown.as_str()), good.clone()),
        (Some("tlk_x"), good.clone()),
    ] {
        let answer = post_v1(&app, "/v1/track", write_key, &body).await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{}", answer.body);
    }
    let big = "x".repeat(33 * 1024);
    let cases: Vec<(&str, Value, &str, &str)> = vec![
        (
            "/v1/track",
            json!({"event": "E"}),
            "missing_required_field",
            "userId",
        ),
        (
            "/v1/track",
            json!({"userId": 4.2, "event": "E"}),
            "wrong_type",
            "userId",
        ),
        (
            "/v1/track",
            json!({"userId": "u", "event": "E", "properties": "p"}),
            "wrong_type",
            "properties",
        ),
        (
            "/v1/track",
            json!({"userId": "u"}),
            "missing_required_field",
            "event",
        ),
        (
            "/v1/track",
            json!({"userId": "u", "event": "E", "properties": {"blob": big}}),
            "message_too_large",
            "",
        ),
        (
            "/v1/identify",
            json!({"type": "track", "userId": "u", "event": "E"}),
            "invalid_value",
            "type",
        ),
        (
            "/v1/batch",
            json!({"batch": [{"type": "track", "event": "E"}]}),
            "invalid_batch",
            "batch[0].userId",
        ),
        (
            "/v1/batch",
            json!({"batch": "none"}),
            "invalid_batch",
            "batch",
        ),
        (
            "/v1/batch",
            json!({"batch": [], "context": "c"}),
            "invalid_batch",
            "context",
        ),
        // In the batch's context a number refuses the request: it is merged into every
        // message.
        (
            "/v1/batch",
            json!({"batch": [{"type": "track", "userId": "u", "event": "E"}],
                   "context": {"n": 9_007_199_254_740_993_u64}}),
            "number_out_of_range",
            "/context/n",
        ),
    ];
    for (path, body, code, field) in cases {
        let answer = post_v1(&app, path, Some(&key), &body).await;
        assert_eq!(
            answer.status,
            StatusCode::BAD_REQUEST,
            "{path} {body}: {}",
            answer.body
        );
        assert_eq!(answer.code(), code, "{}", answer.body);
        assert_eq!(
            answer.body["error"]["field"].as_str().unwrap_or(""),
            field,
            "{}",
            answer.body
        );
        // Top-level `code` and `message` too: what Segment's libraries log.
        assert_eq!(answer.body["code"], code, "{}", answer.body);
        assert_eq!(answer.body["message"], answer.body["error"]["message"]);
    }
    let items: Vec<Value> = (0..40)
        .map(|i| json!({"type": "track", "userId": "u", "event": "E", "messageId": i.to_string(), "properties": {"blob": "y".repeat(14_000)}}))
        .collect();
    let answer = post_v1(&app, "/v1/batch", Some(&key), &json!({"batch": items})).await;
    assert_eq!(
        answer.status,
        StatusCode::BAD_REQUEST,
        "a 560 KB batch: {}",
        answer.body
    );
    let answer = post_v1(&app, "/v1/batch", Some(&key), &json!("not an object")).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.body);
    // A library given a host ending in `/` asks for `//v1/batch`: the 404 names the path
    // meant (it said only "no route").
    for (path, meant) in [("//v1/batch", "/v1/batch"), ("/v1/track/", "/v1/track")] {
        let answer = post_v1(&app, path, Some(&key), &good).await;
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{}", answer.body);
        let message = answer.body["error"]["message"].as_str().unwrap_or("");
        assert!(message.ends_with(&format!("try {meant}")), "{message}");
    }
    let malformed = app
        .send(
            app.client
                .post(app.url("/v1/track"))
                .basic_auth(&key, Some(""))
                .body("{\"userId\":"),
        )
        .await;
    assert_eq!(
        malformed.status,
        StatusCode::BAD_REQUEST,
        "{}",
        malformed.body
    );
    assert_eq!(segment_stats(&app).await, (0, 0, 0));
    let row = source_row(&app, "web").await;
    let id = row["id"].as_str().expect("id");
    let rejections = app.get(&format!("/sources/{id}/rejections")).await;
    assert_eq!(
        rejections.body["rejections"],
        json!([]),
        "bad input writes nothing"
    );
}

async fn an_invalid_message_in_a_batch_is_rejected_alone_and_recorded_with_its_reason(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    let key = create_source(&app, "web");
    let batch = json!({"batch": [
        track("m-1", "user-1", "order-1", 1.0),
        {"type": "track", "event": "Cafe\u{301}", "messageId": "m-2", "writeKey": key},
        track("m-3", "user-3", "order-3", 3.0),
        // Keys equal only after NFC: refused with a field naming the key, NUL and all,
        // which the stored rejection holds as U+FFFD (PostgreSQL's text cannot hold NUL).
        {"type": "track", "userId": "u", "event": "e", "messageId": "m-4",
         "properties": {"\u{0}\u{e9}": 1, "\u{0}e\u{301}": 2}},
    ]});
    let answer = post_v1(&app, "/v1/batch", Some(&key), &batch).await;
    assert_eq!(answer.body, json!({"success": true}));
    assert_eq!(segment_stats(&app).await, (2, 0, 0));
    let row = source_row(&app, "web").await;
    assert_eq!(row["rejected"], 2);
    let id = row["id"].as_str().expect("id");
    let listed = app.get(&format!("/sources/{id}/rejections")).await;
    let rejections = listed.body["rejections"].as_array().expect("rejections");
    assert_eq!(rejections.len(), 2, "{}", listed.body);
    let at = |index: i64| {
        rejections
            .iter()
            .find(|r| r["index"] == index)
            .unwrap_or_else(|| panic!("no rejection {index}: {}", listed.body))
    };
    let nul = at(3);
    assert_eq!(nul["code"], "duplicate_key", "{nul}");
    let field = nul["field"].as_str().unwrap_or("");
    assert!(field.contains('\u{FFFD}') && !field.contains('\0'), "{nul}");
    let r = at(1);
    assert_eq!(
        (r["index"].as_i64(), r["code"].as_str(), r["field"].as_str()),
        (Some(1), Some("missing_required_field"), Some("userId"))
    );
    assert_eq!(
        r["payload"],
        json!({"type": "track", "event": "Cafe\u{301}", "messageId": "m-2"}),
        "recorded as received (not NFC-normalised), the write key never kept"
    );
    let other = app.get("/sources/src_0000000000000000/rejections").await;
    assert_eq!(other.status, StatusCode::NOT_FOUND);
    // A batch's context counts in each of its messages: 20 KB of it beside a message of
    // 20 KB is over the 32 KB a message holds, beside a small one it is not. Checked on
    // the message alone, a 500 KB batch of a large context stored a copy in each of a
    // thousand small messages.
    let context = json!({"page": {"blob": "c".repeat(20_000)}});
    let mut large = track("m-5", "user-5", "order-5", 5.0);
    large["properties"]["note"] = json!("n".repeat(20_000));
    let batch =
        json!({"context": context, "batch": [track("m-6", "user-6", "order-6", 6.0), large]});
    let answer = post_v1(&app, "/v1/batch", Some(&key), &batch).await;
    assert_eq!(answer.body, json!({"success": true}));
    assert_eq!(segment_stats(&app).await, (3, 0, 0));
    let listed = app.get(&format!("/sources/{id}/rejections")).await;
    let rejections = listed.body["rejections"].as_array().expect("rejections");
    let too_large = rejections
        .iter()
        .find(|r| r["code"] == "message_too_large")
        .unwrap_or_else(|| panic!("no message_too_large: {}", listed.body));
    assert_eq!(too_large["index"], 1, "{too_large}");
}

async fn a_reused_message_id_with_other_content_is_a_collision_and_changes_nothing(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    let key = create_source(&app, "web");
    let other_source = create_source(&app, "ios");
    let first = track("m-1", "user-1", "order-1", 10.0);
    assert_eq!(
        post_v1(&app, "/v1/track", Some(&key), &first).await.status,
        StatusCode::OK
    );
    let mut changed = track("m-1", "user-1", "order-1", 99.0);
    changed["sentAt"] = json!("2030-01-01T00:00:00.000Z");
    let answer = post_v1(&app, "/v1/track", Some(&key), &changed).await;
    assert_eq!(answer.status, StatusCode::CONFLICT, "{}", answer.body);
    assert_eq!(answer.code(), "collision");
    assert_eq!(
        answer.body["error"]["stored"]["event_id"],
        answer.body["error"]["incoming"]["event_id"]
    );
    assert_ne!(
        answer.body["error"]["stored"]["fingerprint"],
        answer.body["error"]["incoming"]["fingerprint"]
    );
    // The same messageId from another source is another message.
    let answer = post_v1(&app, "/v1/track", Some(&other_source), &changed).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(segment_stats(&app).await, (2, 0, 1));
    let collisions = app.get("/contracts/segment.message/collisions").await;
    assert_eq!(
        collisions.body["collisions"].as_array().map(Vec::len),
        Some(1)
    );
    // The diff marks `sentAt` (a transport field of the built-in contract, new on every
    // retry) apart from the revenue that made the collision.
    let logged = app.get("/ops/collisions").await;
    let diff = &logged.body["collisions"][0]["diff"];
    let marked = |path: &str| {
        diff.as_array()
            .and_then(|changes| changes.iter().find(|c| c["path"] == path))
            .map(|c| c["transport"].clone())
    };
    assert_eq!(marked("/sentAt"), Some(json!(true)), "{diff}");
    assert_eq!(marked("/properties/revenue"), Some(json!(false)), "{diff}");
    // As stored, `timestamp` is the server's corrected time (new on every retry) and
    // `originalTimestamp` the client's `timestamp` (content); both differ here.
    assert_eq!(marked("/timestamp"), Some(json!(true)), "{diff}");
    assert_eq!(marked("/originalTimestamp"), Some(json!(false)), "{diff}");
}

/// A track call of analytics.js: `userId` is `null` for an anonymous page.
fn signup_started(id: &str, anonymous: &str, user: Value, sent_at: &str) -> Value {
    json!({"type": "track", "messageId": id, "event": "Signup Started",
           "anonymousId": anonymous, "userId": user, "properties": {"plan": "pro"},
           "timestamp": "2026-12-06T17:00:00.000Z", "sentAt": sent_at,
           "_metadata": {"bundled": ["Segment.io"]}})
}

/// analytics.js 2.0's default delivery sets `userId` on each attempt: an anonymous
/// message whose answer was lost is retried, after the page's `identify()`, with the new
/// `userId` under the same `messageId`. A retry (the first delivery kept), in another
/// request or in the same batch; it was `409 collision`, which the library drops and the
/// collision log and alerts reported. A `userId` changed from one value to another, or
/// another `anonymousId`, still collides.
async fn a_retry_that_gained_a_user_id_after_identify_is_a_duplicate(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = create_source(&app, "web");
    let message = |id: &str, anonymous: &str, user: Value| {
        signup_started(id, anonymous, user, "2026-12-06T17:00:00.050Z")
    };
    let post = |body: Value| {
        let app = &app;
        let key = key.clone();
        async move { post_v1(app, "/v1/track", Some(&key), &body).await }
    };
    let first = post(message("ajs-1", "anon-1", Value::Null)).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    let mut retried = message("ajs-1", "anon-1", json!("user-1"));
    retried["sentAt"] = json!("2026-12-06T17:00:03.000Z");
    retried["_metadata"]["retryCount"] = json!(1);
    let answer = post(retried.clone()).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(segment_stats(&app).await, (1, 1, 0));
    // The first delivery without the field at all, the retry with it.
    let mut absent = message("ajs-2", "anon-1", Value::Null);
    absent.as_object_mut().map(|m| m.remove("userId"));
    assert_eq!(post(absent).await.status, StatusCode::OK);
    let answer = post(message("ajs-2", "anon-1", json!("user-1"))).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(segment_stats(&app).await, (2, 2, 0));
    // Both in one batch: one stored, one duplicate.
    let batch = json!({"batch": [message("ajs-3", "anon-1", Value::Null), message("ajs-3", "anon-1", json!("user-1"))]});
    let answer = post_v1(&app, "/v1/batch", Some(&key), &batch).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(segment_stats(&app).await, (3, 3, 0));
    // The anonymous first delivery is met by a retry under whichever user signed in.
    let answer = post(message("ajs-1", "anon-1", json!("user-2"))).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    // Still collisions: a user replaced by another, another device.
    let answer = post(message("ajs-4", "anon-1", json!("user-1"))).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let answer = post(message("ajs-4", "anon-1", json!("user-2"))).await;
    assert_eq!(answer.status, StatusCode::CONFLICT, "{}", answer.body);
    let answer = post(message("ajs-4", "anon-2", Value::Null)).await;
    assert_eq!(answer.status, StatusCode::CONFLICT, "{}", answer.body);
    assert_eq!(segment_stats(&app).await, (4, 4, 2));
}

/// The same retry reordered in flight: the anonymous first attempt held up (a proxy, a
/// slow network) while analytics.js, its answer late, retried with the `userId` that
/// `identify()` set since; the retry is stored first. The original arriving after it is
/// a duplicate, in another request, in the same batch, and for a message without a
/// `timestamp` of its own; it was a `409 collision`. Content changed otherwise, another
/// device, a retry with another user still collide.
async fn a_retry_with_a_user_id_stored_before_its_anonymous_original_makes_it_a_duplicate(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    let key = create_source(&app, "web");
    let message = |id: &str, anonymous: &str, user: Value| {
        let mut retried = signup_started(id, anonymous, user, "2026-12-06T17:00:03.000Z");
        retried["_metadata"]["retryCount"] = json!(1);
        retried
    };
    let post = |body: Value| {
        let app = &app;
        let key = key.clone();
        async move { post_v1(app, "/v1/track", Some(&key), &body).await }
    };
    let original = |id: &str| {
        let mut original = message(id, "anon-1", Value::Null);
        original["sentAt"] = json!("2026-12-06T17:00:00.050Z");
        original.as_object_mut().map(|m| m.remove("_metadata"));
        original
    };
    for (id, without_user) in [("ajs-1", false), ("ajs-2", true)] {
        let answer = post(message(id, "anon-1", json!("user-1"))).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        let mut late = original(id);
        if without_user {
            late.as_object_mut().map(|m| m.remove("userId"));
        }
        let answer = post(late).await;
        assert_eq!(answer.status, StatusCode::OK, "{id}: {}", answer.body);
    }
    assert_eq!(segment_stats(&app).await, (2, 2, 0));
    // In one batch, the retry first.
    let batch = json!({"batch": [message("ajs-3", "anon-1", json!("user-1")), original("ajs-3")]});
    let answer = post_v1(&app, "/v1/batch", Some(&key), &batch).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(segment_stats(&app).await, (3, 3, 0));
    // No timestamp of its own: the stored one is the corrected arrival time.
    let timeless = |user: Value| {
        let mut timeless = message("ajs-4", "anon-1", user);
        timeless.as_object_mut().map(|m| m.remove("timestamp"));
        timeless
    };
    assert_eq!(post(timeless(json!("user-1"))).await.status, StatusCode::OK);
    let answer = post(timeless(Value::Null)).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(segment_stats(&app).await, (4, 4, 0));
    // Still collisions: other properties, another device.
    assert_eq!(
        post(message("ajs-5", "anon-1", json!("user-1")))
            .await
            .status,
        StatusCode::OK
    );
    let mut changed = original("ajs-5");
    changed["properties"]["plan"] = json!("free");
    let answer = post(changed).await;
    assert_eq!(answer.status, StatusCode::CONFLICT, "{}", answer.body);
    let answer = post(message("ajs-5", "anon-2", Value::Null)).await;
    assert_eq!(answer.status, StatusCode::CONFLICT, "{}", answer.body);
    assert_eq!(segment_stats(&app).await, (5, 4, 2));
    // A stored message whose payload does not undo to it (the client sent
    // `originalTimestamp` itself, and no `timestamp`) makes no duplicate of a message
    // that only looks like its undoing: a collision, as in the other order.
    let mut own_original = timeless(json!("user-1"));
    own_original["messageId"] = json!("ajs-6");
    own_original["originalTimestamp"] = json!("2026-12-06T17:00:00.000Z");
    assert_eq!(post(own_original).await.status, StatusCode::OK);
    let answer = post(original("ajs-6")).await;
    assert_eq!(answer.status, StatusCode::CONFLICT, "{}", answer.body);
    assert_eq!(segment_stats(&app).await, (6, 4, 3));
}

async fn a_revoked_source_is_refused_at_once_by_another_server_process(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = create_source(&app, "web");
    let other = ServerProcess::start(app.database_url(), &[]);
    let message = json!({"userId": "u1", "event": "E"});
    let send = |base: String| {
        let client = app.client.clone();
        let body = message.to_string();
        let key = key.clone();
        async move {
            client
                .post(format!("{base}/v1/track"))
                .basic_auth(key, Some(""))
                .body(body)
                .send()
                .await
                .expect("sent")
                .status()
        }
    };
    assert_eq!(send(other.address.clone()).await, StatusCode::OK);
    // The name as `source create` reads it: trimmed (and in NFC).
    let revoked = stdout(traqlyte(
        &app,
        &["source", "revoke", "--tenant", "test tenant", "  web "],
    ));
    assert!(revoked.contains("\trevoked "), "{revoked}");
    assert_eq!(send(other.address.clone()).await, StatusCode::UNAUTHORIZED);
    assert_eq!(send(app.address.clone()).await, StatusCode::UNAUTHORIZED);
    assert!(source_row(&app, "web").await["revoked_at"].is_string());
    // A source named like another's id: the id names its own source, and only it is
    // revoked (both matched before).
    create_source(&app, "alpha");
    let alpha = source_row(&app, "alpha").await["id"]
        .as_str()
        .expect("id")
        .to_string();
    let twin_key = create_source(&app, &alpha);
    let revoked = stdout(traqlyte(
        &app,
        &["source", "revoke", "--tenant", "test tenant", &alpha],
    ));
    assert!(revoked.starts_with(&alpha), "{revoked}");
    assert!(source_row(&app, "alpha").await["revoked_at"].is_string());
    assert!(source_row(&app, &alpha).await["revoked_at"].is_null());
    let twin = post_v1(&app, "/v1/track", Some(&twin_key), &message).await;
    assert_eq!(twin.status, StatusCode::OK, "{}", twin.body);
}

/// On a PostgreSQL database of a linguistic collation (ICU `en-US`, which sorts `click`
/// before `Click` and `événement` before `Zap`), a campaign's bindings are listed in the
/// order SQLite gives, the texts' code points: `Click, Zap, click, événement`. They
/// followed the database's collation, so one campaign read differently on the two.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bindings_are_listed_in_code_point_order_whatever_the_databases_collation() {
    let db = crate::helpers::TestDb::create_postgres_with(
        "TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US'",
    )
    .await;
    let app =
        crate::helpers::spawn_app_on(db, traqlyte_server::ServerConfig::default(), |_| {}).await;
    let (campaign, _) = campaign_with_units(&app, &[]).await;
    let path = format!("/campaigns/{campaign}/bindings");
    for event in ["événement", "click", "Zap", "Click"] {
        let answer = app
            .post_json(&path, &json!({"metric": "purchase", "event": event}))
            .await;
        assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    }
    let listed = app.get(&path).await;
    let events: Vec<&str> = listed.body["bindings"]
        .as_array()
        .expect("bindings")
        .iter()
        .map(|b| b["event"].as_str().expect("an event"))
        .collect();
    assert_eq!(events, ["Click", "Zap", "click", "événement"]);
}

/// A campaign with a conversion and a sum metric, published, with `units` assigned.
pub(crate) async fn campaign_with_units(
    app: &TestApp,
    units: &[String],
) -> (String, Vec<(String, String)>) {
    let body = json!({
        "key": "checkout", "name": "Checkout",
        "arms": [{"key": "control", "weight": 1}, {"key": "treatment", "weight": 1}],
        "metrics": [
            {"name": "purchase", "kind": "conversion", "window_hours": 168},
            {"name": "revenue", "kind": "sum", "window_hours": 168}
        ]
    });
    let id = crate::experiments::create_published(app, &body).await;
    let mut arms = Vec::new();
    for unit in units {
        let answer = app
            .post_json("/assignments", &json!({"campaign_id": id, "unit_id": unit}))
            .await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        arms.push((
            unit.clone(),
            answer.body["arm"].as_str().expect("arm").to_string(),
        ));
    }
    (id, arms)
}

pub(crate) async fn bind(app: &TestApp, campaign: &str) {
    for body in [
        json!({"metric": "purchase", "event": "Order Completed", "key_pointer": "/properties/order_id"}),
        json!({"metric": "revenue", "event": "Order Completed", "value_pointer": "/properties/revenue", "key_pointer": "/properties/order_id"}),
    ] {
        let answer = app
            .post_json(&format!("/campaigns/{campaign}/bindings"), &body)
            .await;
        assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    }
}

/// Per arm: (units, converters, stored outcomes, value sum) as the report gives them.
pub(crate) async fn report_figures(
    app: &TestApp,
    campaign: &str,
) -> Vec<(String, u64, u64, u64, f64)> {
    let report = app.get(&format!("/campaigns/{campaign}/report")).await;
    assert_eq!(report.status, StatusCode::OK, "{}", report.body);
    let mut figures = Vec::new();
    for arm in report.body["arms"].as_array().expect("arms") {
        let purchase = &arm["metrics"]["purchase"];
        let revenue = &arm["metrics"]["revenue"];
        let units = arm["units"].as_u64().unwrap_or(0);
        let value = revenue["value"].as_f64().unwrap_or(0.0) * units as f64;
        figures.push((
            arm["key"].as_str().unwrap_or("?").to_string(),
            units,
            purchase["converters"].as_u64().unwrap_or(0),
            revenue["stored_events"].as_u64().unwrap_or(0),
            (value * 100.0).round() / 100.0,
        ));
    }
    figures
}

/// What the report must say when `orders` (unit, revenue) were each counted once.
pub(crate) fn expected_figures(
    arms: &[(String, String)],
    orders: &[(String, f64)],
) -> Vec<(String, u64, u64, u64, f64)> {
    ["control", "treatment"]
        .iter()
        .map(|arm| {
            let units: Vec<&String> = arms
                .iter()
                .filter(|(_, a)| a == arm)
                .map(|(u, _)| u)
                .collect();
            let mine: Vec<&(String, f64)> =
                orders.iter().filter(|(u, _)| units.contains(&u)).collect();
            let mut converters: Vec<&String> = mine.iter().map(|(u, _)| u).collect();
            converters.sort();
            converters.dedup();
            let sum: f64 = mine.iter().map(|(_, v)| v).sum();
            (
                arm.to_string(),
                units.len() as u64,
                converters.len() as u64,
                mine.len() as u64,
                (sum * 100.0).round() / 100.0,
            )
        })
        .collect()
}

async fn bound_track_events_become_outcomes_once_and_unassigned_units_are_counted(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    let key = create_source(&app, "web");
    let units: Vec<String> = (0..6).map(|i| format!("user-{i}")).collect();
    let (campaign, arms) = campaign_with_units(&app, &units).await;
    bind(&app, &campaign).await;
    let mut orders = Vec::new();
    let mut batch = Vec::new();
    for i in 0..12 {
        let unit = format!("user-{}", i % 6);
        let revenue = f64::from(i) + 0.5;
        batch.push(track(
            &format!("m-{i}"),
            &unit,
            &format!("order-{i}"),
            revenue,
        ));
        orders.push((unit, revenue));
    }
    // The unit is the userId when assigned, else the anonymousId.
    let mut by_anonymous = track("m-anon", "stranger-2", "order-a", 3.25);
    by_anonymous["anonymousId"] = json!("user-0");
    orders.push(("user-0".to_string(), 3.25));
    let mut both = track("m-both", "user-1", "order-b", 4.75);
    both["anonymousId"] = json!("user-2");
    orders.push(("user-1".to_string(), 4.75));
    batch.extend([by_anonymous, both]);
    batch.push(track("m-stranger", "stranger", "order-s", 7.0));
    let send = |messages: Vec<Value>| {
        let body = json!({"batch": messages});
        let app = &app;
        let key = key.clone();
        async move {
            let answer = post_v1(app, "/v1/batch", Some(&key), &body).await;
            assert_eq!(answer.body, json!({"success": true}));
        }
    };
    send(batch.clone()).await;
    let expected = expected_figures(&arms, &orders);
    assert_eq!(report_figures(&app, &campaign).await, expected);
    // A client retry (same messageIds), then a replayed queue with new messageIds and a
    // later sentAt: the report does not move.
    send(batch.clone()).await;
    let replayed: Vec<Value> = batch
        .iter()
        .map(|m| {
            let mut m = m.clone();
            m["messageId"] = json!(format!("replay-{}", m["messageId"].as_str().unwrap_or("?")));
            m["sentAt"] = json!(traqlyte_identity::format_rfc3339_micros(
                traqlyte_store::now_us() + 5_000_000
            ));
            m
        })
        .collect();
    send(replayed).await;
    assert_eq!(report_figures(&app, &campaign).await, expected);
    assert_eq!(segment_stats(&app).await, (30, 15, 0));
    let bindings = app.get(&format!("/campaigns/{campaign}/bindings")).await;
    let listed = bindings.body["bindings"].as_array().expect("bindings");
    assert_eq!(listed.len(), 2, "purchase and revenue: {}", bindings.body);
    for binding in listed {
        assert_eq!(
            (
                binding["outcomes"].as_i64(),
                binding["unassigned"].as_i64(),
                binding["unusable"].as_i64()
            ),
            (Some(28), Some(2), Some(0)),
            "{binding}"
        );
    }
}

/// A bound fact is windowed at its clock-skew-corrected time: a phone whose clock runs ten
/// minutes behind converts just after its assignment, and the conversion counts
/// (at the client's own `timestamp` it fell before the assignment and was left out). A
/// fact sent without any `timestamp` and re-sent later in another request, under a new
/// `messageId`, is a duplicate outcome: its only time was its delivery's, which was in its
/// fingerprint, so the re-send was a collision.
async fn a_bound_fact_falls_in_its_window_at_the_corrected_time_and_a_timeless_one_resent_is_a_duplicate(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    let key = create_source(&app, "web");
    let units: Vec<String> = (0..2).map(|i| format!("user-{i}")).collect();
    let (campaign, arms) = campaign_with_units(&app, &units).await;
    bind(&app, &campaign).await;
    let at = |us: i64| traqlyte_identity::format_rfc3339_micros(us);
    let behind_us = 600_000_000;
    let now = traqlyte_store::now_us();
    let mut skewed = track("m-skewed", "user-0", "order-0", 10.0);
    // Converted and sent at once (the server's `now`, after the assignment), stamped by
    // a clock ten minutes behind.
    skewed["timestamp"] = json!(at(now - behind_us));
    skewed["sentAt"] = json!(at(now - behind_us));
    let mut timeless = track("m-timeless", "user-1", "order-1", 20.0);
    timeless.as_object_mut().map(|m| m.remove("timestamp"));
    timeless.as_object_mut().map(|m| m.remove("sentAt"));
    for body in [
        json!({"batch": [skewed]}),
        json!({"batch": [timeless.clone()]}),
    ] {
        let answer = post_v1(&app, "/v1/batch", Some(&key), &body).await;
        assert_eq!(answer.body, json!({"success": true}));
    }
    // The re-send comes a moment later, in a request of its own, with a new messageId.
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    timeless["messageId"] = json!("m-timeless-again");
    let answer = post_v1(&app, "/v1/batch", Some(&key), &json!({"batch": [timeless]})).await;
    assert_eq!(answer.body, json!({"success": true}));
    // A fact whose corrected time is two days ahead (a `timestamp` after its own
    // `sentAt`) has not happened, as `POST /outcome` says of such a time: the message is
    // stored, no outcome, each binding counts it `unusable` (it counted in the window).
    let mut ahead = track("m-ahead", "user-1", "order-ahead", 30.0);
    ahead["timestamp"] = json!(at(now + 2 * 86_400_000_000));
    ahead["sentAt"] = json!(at(now));
    let answer = post_v1(&app, "/v1/batch", Some(&key), &json!({"batch": [ahead]})).await;
    assert_eq!(answer.body, json!({"success": true}));
    let bindings = app.get(&format!("/campaigns/{campaign}/bindings")).await;
    let unusable: Vec<i64> = bindings.body["bindings"]
        .as_array()
        .expect("bindings")
        .iter()
        .map(|b| b["unusable"].as_i64().unwrap_or(-1))
        .collect();
    assert_eq!(unusable, [1, 1], "{}", bindings.body);
    let orders = [("user-0".to_string(), 10.0), ("user-1".to_string(), 20.0)];
    assert_eq!(
        report_figures(&app, &campaign).await,
        expected_figures(&arms, &orders)
    );
    let report = app.get(&format!("/campaigns/{campaign}/report")).await;
    for arm in report.body["arms"].as_array().expect("arms") {
        for metric in ["purchase", "revenue"] {
            let figures = &arm["metrics"][metric];
            assert_eq!(
                figures["collisions"].as_u64(),
                Some(0),
                "{metric}: {figures}"
            );
        }
    }
}

/// The per-request count rows of sources and bindings are folded by the server's
/// periodic roll-up (`Store::roll_up_tallies`) without changing what `GET /sources` and
/// a campaign's bindings answer.
async fn rolling_up_source_and_binding_tallies_keeps_every_count(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = create_source(&app, "web");
    let units: Vec<String> = (0..3).map(|i| format!("user-{i}")).collect();
    let (campaign, _) = campaign_with_units(&app, &units).await;
    bind(&app, &campaign).await;
    for i in 0..6 {
        // The same message twice (one retry inside the request).
        let message = track(
            &format!("m-{i}"),
            &format!("user-{}", i % 3),
            &format!("order-{i}"),
            1.5,
        );
        let body = json!({"batch": [
            message.clone(),
            message,
            track(&format!("s-{i}"), "stranger", &format!("order-s{i}"), 1.0),
            {"type": "track", "event": "Order Completed", "messageId": format!("bad-{i}")}
        ]});
        let answer = post_v1(&app, "/v1/batch", Some(&key), &body).await;
        assert_eq!(answer.body, json!({"success": true}));
    }
    let counts = |source: Value| {
        ["stored", "duplicates", "collisions", "rejected"].map(|k| source[k].as_i64())
    };
    let bindings = |answer: Value| -> Vec<[Option<i64>; 3]> {
        answer["bindings"]
            .as_array()
            .expect("bindings")
            .iter()
            .map(|b| ["outcomes", "unassigned", "unusable"].map(|k| b[k].as_i64()))
            .collect()
    };
    let source_before = counts(source_row(&app, "web").await);
    assert_eq!(source_before, [Some(12), Some(6), Some(0), Some(6)]);
    let path = format!("/campaigns/{campaign}/bindings");
    let bindings_before = bindings(app.get(&path).await.body);
    assert_eq!(bindings_before, vec![[Some(6), Some(6), Some(0)]; 2]);
    for _ in 0..2 {
        app.store
            .roll_up_tallies(traqlyte_store::now_us() + traqlyte_store::TALLY_BUCKET_US)
            .await
            .expect("roll up");
        assert_eq!(counts(source_row(&app, "web").await), source_before);
        assert_eq!(bindings(app.get(&path).await.body), bindings_before);
        app.store
            .roll_up_tallies_to_hours(traqlyte_store::now_us() + 7_200_000_000)
            .await
            .expect("roll up into hours");
        assert_eq!(counts(source_row(&app, "web").await), source_before);
        assert_eq!(bindings(app.get(&path).await.body), bindings_before);
    }
}

/// A campaign takes at most its limit of bindings, counted exactly under concurrent
/// declarations; the identical binding again still answers `200` at the limit.
async fn a_campaign_takes_at_most_its_limit_of_bindings(backend: Backend) {
    use traqlyte_store::sources::BINDINGS_PER_CAMPAIGN_MAX;
    let app = spawn_app(backend).await;
    let (campaign, _) = campaign_with_units(&app, &[]).await;
    let path = format!("/campaigns/{campaign}/bindings");
    let limit = BINDINGS_PER_CAMPAIGN_MAX as usize;
    // Ten more than the limit, eight at a time.
    let bodies: Vec<Value> = (0..limit + 10)
        .map(|n| json!({"metric": "purchase", "event": format!("Event {n}")}))
        .collect();
    let mut statuses = Vec::new();
    for chunk in bodies.chunks(8) {
        let mut tasks = tokio::task::JoinSet::new();
        for body in chunk {
            let request = app
                .client
                .post(app.url(&path))
                .bearer_auth(&app.key)
                .header("content-type", "application/json")
                .body(body.to_string());
            tasks.spawn(async move {
                let response = request.send().await.expect("an answer");
                let status = response.status();
                let body: Value = response.json().await.unwrap_or(Value::Null);
                (status, body)
            });
        }
        while let Some(answer) = tasks.join_next().await {
            let (status, body) = answer.expect("the request task");
            if status == StatusCode::CONFLICT {
                assert_eq!(body["error"]["code"], "binding_limit", "{body}");
                assert_eq!(body["error"]["field"], "id");
            }
            statuses.push(status);
        }
    }
    let created = statuses
        .iter()
        .filter(|s| **s == StatusCode::CREATED)
        .count();
    let refused = statuses
        .iter()
        .filter(|s| **s == StatusCode::CONFLICT)
        .count();
    assert_eq!((created, refused), (limit, 10), "{statuses:?}");
    let listed = app.get(&path).await;
    assert_eq!(
        listed.body["bindings"].as_array().map(Vec::len),
        Some(limit)
    );
    let stored = listed.body["bindings"][0].clone();
    let again = json!({"metric": stored["metric"], "event": stored["event"]});
    assert_eq!(app.post_json(&path, &again).await.status, StatusCode::OK);
}

async fn bindings_are_checked_against_the_campaign_and_immutable(backend: Backend) {
    let app = spawn_app(backend).await;
    let (campaign, _) = campaign_with_units(&app, &[]).await;
    let path = format!("/campaigns/{campaign}/bindings");
    let body = json!({"metric": "purchase", "event": "Order Completed"});
    assert_eq!(
        app.post_json(&path, &body).await.status,
        StatusCode::CREATED
    );
    assert_eq!(app.post_json(&path, &body).await.status, StatusCode::OK);
    let other =
        json!({"metric": "purchase", "event": "Order Completed", "key_pointer": "/properties/id"});
    assert_eq!(
        app.post_json(&path, &other).await.status,
        StatusCode::CONFLICT
    );
    for (body, field) in [
        (json!({"metric": "nope", "event": "E"}), "metric"),
        (json!({"metric": "revenue", "event": "E"}), "value_pointer"),
        (json!({"metric": "purchase", "event": ""}), "event"),
        (
            json!({"metric": "purchase", "event": "E", "key_pointer": "properties"}),
            "key_pointer",
        ),
        (
            json!({"metric": "purchase", "event": "E", "extra": 1}),
            "extra",
        ),
    ] {
        let answer = app.post_json(&path, &body).await;
        assert_eq!(
            answer.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body}: {}",
            answer.body
        );
        assert_eq!(answer.body["error"]["field"], field, "{}", answer.body);
    }
    let missing = app
        .post_json("/campaigns/cmp_missing/bindings", &body)
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    let listed = app.get(&path).await;
    assert_eq!(
        listed.body["bindings"].as_array().map(Vec::len),
        Some(1),
        "{}",
        listed.body
    );
}

/// Identification puts a message's strings and keys in NFC, so the binding is stored in
/// NFC too: declared decomposed (e + U+0301), it matches a client sending precomposed é,
/// and declaring it again precomposed is the same binding.
async fn a_binding_declared_in_another_unicode_normal_form_matches_its_events(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = create_source(&app, "web");
    let (campaign, _) = campaign_with_units(&app, &["user-0".to_string()]).await;
    let path = format!("/campaigns/{campaign}/bindings");
    let decomposed = json!({"metric": "purchase", "event": "Cafe\u{301} Order", "key_pointer": "/properties/re\u{301}f"});
    let answer = app.post_json(&path, &decomposed).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    let composed = json!({"metric": "purchase", "event": "Caf\u{e9} Order", "key_pointer": "/properties/r\u{e9}f"});
    let again = app.post_json(&path, &composed).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.body);
    let message = json!({
        "type": "track", "messageId": "m-1", "userId": "user-0", "event": "Caf\u{e9} Order",
        "properties": {"r\u{e9}f": "order-1"}
    });
    let sent = post_v1(&app, "/v1/track", Some(&key), &message).await;
    assert_eq!(sent.body, json!({"success": true}));
    let listed = app.get(&path).await;
    let binding = &listed.body["bindings"][0];
    assert_eq!(binding["event"], "Caf\u{e9} Order", "{binding}");
    assert_eq!(
        (binding["outcomes"].as_i64(), binding["unusable"].as_i64()),
        (Some(1), Some(0)),
        "{binding}"
    );
}

/// Assignments keep a unit's bytes as given while identification puts a message in
/// NFC: a unit assigned decomposed (e + U+0301, as macOS writes it) and tracked with the
/// same bytes is matched to its assignment, not counted unassigned.
async fn a_unit_assigned_in_another_unicode_normal_form_gets_its_outcomes(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = create_source(&app, "web");
    let decomposed = "Jose\u{301}".to_string();
    let (campaign, _) = campaign_with_units(&app, std::slice::from_ref(&decomposed)).await;
    bind(&app, &campaign).await;
    let mut by_anonymous = track("m-2", "stranger", "order-2", 2.0);
    by_anonymous["anonymousId"] = json!(decomposed);
    for message in [track("m-1", &decomposed, "order-1", 1.0), by_anonymous] {
        let sent = post_v1(&app, "/v1/track", Some(&key), &message).await;
        assert_eq!(sent.body, json!({"success": true}));
    }
    let bindings = app.get(&format!("/campaigns/{campaign}/bindings")).await;
    let listed = bindings.body["bindings"].as_array().expect("bindings");
    assert_eq!(listed.len(), 2, "purchase and revenue: {}", bindings.body);
    for binding in listed {
        assert_eq!(
            (binding["outcomes"].as_i64(), binding["unassigned"].as_i64()),
            (Some(2), Some(0)),
            "{binding}"
        );
    }
    let figures = report_figures(&app, &campaign).await;
    let converters: u64 = figures.iter().map(|f| f.2).sum();
    let revenue: f64 = figures.iter().map(|f| f.4).sum();
    assert_eq!((converters, revenue), (1, 3.0), "{figures:?}");
}

/// Official libraries add top-level keys of their own to a batch (analytics-go and
/// analytics.NET a batch `messageId`, analytics-java `sequence`): ignored, as Segment
/// ignores them. A message holding an integer no double holds exactly (a 64-bit id, as
/// Python's json writes it) is rejected alone, naming its field; the others are stored.
async fn library_top_level_keys_are_ignored_and_an_inexact_number_refuses_only_its_message(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    let key = create_source(&app, "web");
    let mut wide = track("m-2", "user-2", "order-2", 2.0);
    wide["properties"]["tweet_id"] = json!(1_541_815_603_606_036_481_u64);
    let batch = json!({
        "messageId": "batch-7f3c", "sequence": 1,
        "sentAt": traqlyte_identity::format_rfc3339_micros(traqlyte_store::now_us()),
        "batch": [track("m-1", "user-1", "order-1", 1.0), wide, track("m-3", "user-3", "order-3", 3.0)],
    });
    let answer = post_v1(&app, "/v1/batch", Some(&key), &batch).await;
    assert_eq!(answer.body, json!({"success": true}));
    assert_eq!(segment_stats(&app).await, (2, 0, 0));
    let rejection = the_one_rejection(&app, "web").await;
    assert_eq!(
        (
            rejection["index"].as_i64(),
            rejection["code"].as_str(),
            rejection["field"].as_str()
        ),
        (
            Some(1),
            Some("number_out_of_range"),
            Some("properties.tweet_id")
        ),
        "{rejection}"
    );
    assert_eq!(rejection["payload"]["messageId"], "m-2", "{rejection}");
    // The same message alone on /v1/track is refused whole, as before.
    let mut alone = track("m-4", "user-4", "order-4", 4.0);
    alone["properties"]["tweet_id"] = json!(1_541_815_603_606_036_481_u64);
    let refused = post_v1(&app, "/v1/track", Some(&key), &alone).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.body);
    assert_eq!(refused.code(), "number_out_of_range", "{}", refused.body);
    assert_eq!(segment_stats(&app).await, (2, 0, 0));
}

/// The one rejection recorded for the source `name` (its row counts exactly one).
async fn the_one_rejection(app: &TestApp, name: &str) -> Value {
    let row = source_row(app, name).await;
    assert_eq!(row["rejected"], 1, "{row}");
    let id = row["id"].as_str().expect("id");
    let listed = app.get(&format!("/sources/{id}/rejections")).await;
    listed.body["rejections"][0].clone()
}

/// `properties` nested so that the message is `depth` levels deep (the message's object
/// and `properties` are two).
fn nested_track(id: &str, depth: usize) -> Value {
    let mut message = track(id, id, id, 1.0);
    let mut inner = json!(1);
    for _ in 0..depth - 2 {
        inner = json!({ "n": inner });
    }
    message["properties"]["deep"] = inner;
    assert_eq!(traqlyte_identity::json::depth(&message), depth);
    message
}

/// A message deeper than `--json-depth-max` (32 by default) inside a batch is rejected
/// alone and recorded, the others stored (the whole batch was `400 too_deep`, and
/// Segment's clients drop a batch answered 400: a review with `@segment/analytics-node`);
/// on `/v1/track` the same limit holds for the message itself (it took two levels more
/// there than inside a batch).
async fn a_message_nested_too_deep_is_refused_alone_in_a_batch_as_on_its_own_route(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    let key = create_source(&app, "web");
    let batch = json!({
        "batch": [track("m-1", "user-1", "order-1", 1.0), nested_track("m-2", 33), nested_track("m-3", 32)],
    });
    let answer = post_v1(&app, "/v1/batch", Some(&key), &batch).await;
    assert_eq!(answer.body, json!({"success": true}));
    assert_eq!(segment_stats(&app).await, (2, 0, 0));
    let rejection = the_one_rejection(&app, "web").await;
    assert_eq!(
        (rejection["index"].as_i64(), rejection["code"].as_str()),
        (Some(1), Some("too_deep")),
        "{rejection}"
    );
    assert_eq!(rejection["payload"]["messageId"], "m-2", "{rejection}");
    let refused = post_v1(&app, "/v1/track", Some(&key), &nested_track("m-4", 33)).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.body);
    assert_eq!(refused.code(), "too_deep", "{}", refused.body);
    let taken = post_v1(&app, "/v1/track", Some(&key), &nested_track("m-5", 32)).await;
    assert_eq!(taken.body, json!({"success": true}));
    // A batch context that would make every message too deep refuses the request.
    let mut context = json!(1);
    for _ in 0..32 {
        context = json!({ "n": context });
    }
    let deep_context =
        json!({"batch": [track("m-6", "user-6", "order-6", 1.0)], "context": context});
    let refused = post_v1(&app, "/v1/batch", Some(&key), &deep_context).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.body);
    assert_eq!(
        (refused.code(), refused.body["error"]["field"].as_str()),
        ("too_deep", Some("context")),
        "{}",
        refused.body
    );
    assert_eq!(segment_stats(&app).await, (3, 0, 0));
}

/// Runs `tools/segment_client_emit.py` (the official client behind a lossy proxy), its
/// requests gzip-compressed when `gzip`.
async fn python_client(
    app: &TestApp,
    key: &str,
    (drop_every, gzip): (u32, bool),
    timestamp: &str,
    events: &Value,
) -> Value {
    use tokio::io::AsyncWriteExt;
    let python = repository_root().join(".venv/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run scripts/python-venv.sh (scripts/test does)",
        python.display()
    );
    let mut child = tokio::process::Command::new(&python)
        .arg("tools/segment_client_emit.py")
        .args([&app.address, key, &drop_every.to_string(), timestamp])
        .arg(if gzip { "1" } else { "0" })
        .current_dir(repository_root())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the Python client script");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(events.to_string().as_bytes())
        .await
        .expect("write events");
    drop(stdin);
    let output = child.wait_with_output().await.expect("the client finished");
    script_report(&output, "the Segment client")
}

/// The JSON report a client script prints on stdout; its output when it failed.
fn script_report(output: &std::process::Output, what: &str) -> Value {
    assert!(
        output.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("the script prints JSON")
}

async fn the_official_python_client_retrying_through_a_lossy_proxy_stores_each_event_once(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    let key = create_source(&app, "python");
    let units: Vec<String> = (0..10).map(|i| format!("user-{i}")).collect();
    let (campaign, arms) = campaign_with_units(&app, &units).await;
    bind(&app, &campaign).await;
    let mut orders = Vec::new();
    let mut events = Vec::new();
    for i in 0..60 {
        let unit = format!("user-{}", (i * 7) % 10);
        let revenue = f64::from(i % 9) * 2.25 + 1.0;
        events.push(json!({"userId": unit, "event": "Order Completed", "properties": {"order_id": format!("order-{i}"), "revenue": revenue}}));
        orders.push((unit, revenue));
    }
    let events = Value::Array(events);
    let timestamp = traqlyte_identity::format_rfc3339_micros(traqlyte_store::now_us() + 60_000_000);
    let run = python_client(&app, &key, (3, false), &timestamp, &events).await;
    let dropped = run["dropped_messages"].as_i64().expect("dropped_messages");
    assert!(
        run["dropped_requests"].as_i64().unwrap_or(0) >= 2,
        "the proxy dropped replies: {run}"
    );
    assert_eq!(segment_stats(&app).await, (60, dropped, 0), "{run}");
    let expected = expected_figures(&arms, &orders);
    assert_eq!(report_figures(&app, &campaign).await, expected);
    // The same events again: new messageIds from the client, another lossy run, its
    // requests compressed (`gzip=True`).
    let again = python_client(&app, &key, (4, true), &timestamp, &events).await;
    let dropped_again = again["dropped_messages"]
        .as_i64()
        .expect("dropped_messages");
    assert_eq!(
        segment_stats(&app).await,
        (120, dropped + dropped_again, 0),
        "{again}"
    );
    assert_eq!(report_figures(&app, &campaign).await, expected);
    let row = source_row(&app, "python").await;
    assert_eq!(row["stored"], 120);
}

/// Runs `tools/segment_browser_emit.py`: Segment's browser library (analytics.js 2.0) in
/// headless Chromium, on a page of another origin, through a proxy dropping the reply of
/// every `drop_every`-th request; `strategy` is its delivery strategy (`standard`: one
/// request a message, `batching`: `/v1/b`), `count` the messages it sends.
async fn browser_client(
    app: &TestApp,
    key: &str,
    drop_every: u32,
    strategy: &str,
    count: u32,
) -> Value {
    let python = repository_root().join(".venv/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run scripts/python-venv.sh (scripts/test does)",
        python.display()
    );
    let run = tokio::process::Command::new(&python)
        .arg("tools/segment_browser_emit.py")
        .args([&app.address, key, &drop_every.to_string(), strategy])
        .arg(count.to_string())
        .current_dir(repository_root())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(std::time::Duration::from_secs(180), run)
        .await
        .expect("the browser run finished within 180 s")
        .expect("start the browser script");
    script_report(&output, "the browser library run")
}

/// The browser library as a web page runs it, pointed at this server by its host alone:
/// it posts `text/plain` with Basic auth (preflighted) to `/v1/i`, `/v1/t` or `/v1/b`,
/// and retries what it hears no answer for. Each message is stored once, each dropped
/// reply is one duplicate, and a preflighted `fetch` of the page reads its answer.
async fn the_official_browser_library_on_another_origin_retrying_through_a_lossy_proxy_stores_each_message_once(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    let key = create_source(&app, "web");
    let mut stored = 0;
    let mut dropped = 0;
    for (strategy, drop_every, count) in [("standard", 3, 10), ("batching", 2, 12)] {
        let run = browser_client(&app, &key, drop_every, strategy, count).await;
        assert_eq!(
            run["page"]["preflighted"],
            json!({"status": 200, "body": {"success": true}}),
            "{strategy}: {run}"
        );
        assert_eq!(run["answered"], count, "{strategy}: {run}");
        assert!(
            run["dropped_requests"].as_i64().unwrap_or(0) >= 1,
            "{strategy}: the proxy dropped a reply: {run}"
        );
        // The page's messages and its preflighted one.
        stored += i64::from(count) + 1;
        dropped += run["dropped_messages"].as_i64().expect("dropped_messages");
        assert_eq!(
            segment_stats(&app).await,
            (stored, dropped, 0),
            "{strategy}: {run}"
        );
    }
    let row = source_row(&app, "web").await;
    assert_eq!(row["stored"], stored);
}

/// The parts of a bound outcome's dedupe key are joined by `:`, so they are escaped: the
/// order `done:1` of event `checkout` and the order `1` of event `checkout:done`, both
/// bound to one metric, are two facts of one unit (unescaped, both were
/// `{source}:checkout:done:1:purchase`, and the second was counted as a duplicate).
async fn colons_in_event_names_and_business_keys_never_merge_two_facts(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = create_source(&app, "web");
    let (campaign, _) = campaign_with_units(&app, &["user-1".to_string()]).await;
    for event in ["checkout", "checkout:done"] {
        let body = json!({"metric": "revenue", "event": event,
            "value_pointer": "/properties/revenue", "key_pointer": "/properties/order_id"});
        let answer = app
            .post_json(&format!("/campaigns/{campaign}/bindings"), &body)
            .await;
        assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    }
    let mut first = track("m-1", "user-1", "done:1", 3.0);
    first["event"] = json!("checkout");
    let mut second = track("m-2", "user-1", "1", 4.0);
    second["event"] = json!("checkout:done");
    let batch = json!({"batch": [first, second]});
    let answer = post_v1(&app, "/v1/batch", Some(&key), &batch).await;
    assert_eq!(answer.body, json!({"success": true}));
    // And both again with new message ids: duplicates of their facts, nothing new.
    first["messageId"] = json!("m-3");
    second["messageId"] = json!("m-4");
    let again = json!({"batch": [first, second]});
    let answer = post_v1(&app, "/v1/batch", Some(&key), &again).await;
    assert_eq!(answer.body, json!({"success": true}));
    let figures = report_figures(&app, &campaign).await;
    let stored: u64 = figures.iter().map(|f| f.3).sum();
    let value: f64 = figures.iter().map(|f| f.4).sum();
    assert_eq!((stored, value), (2, 7.0), "{figures:?}");
}

/// A business key too long for a dedupe key (over 512 characters with its parts) is kept
/// as its digest: the fact is counted, once, even when re-sent under a new messageId; it
/// was `unusable` before, a fact the report never saw.
async fn a_business_key_too_long_for_a_dedupe_key_is_still_one_fact(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = create_source(&app, "web");
    let (campaign, _) = campaign_with_units(&app, &["user-0".to_string()]).await;
    let path = format!("/campaigns/{campaign}/bindings");
    let binding =
        json!({"metric": "purchase", "event": "Order Completed", "key_pointer": "/properties/ref"});
    let answer = app.post_json(&path, &binding).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    let long = "r".repeat(600);
    // After the assignment (the report counts outcomes from it on), the same in both.
    let at = traqlyte_identity::format_rfc3339_micros(traqlyte_store::now_us() + 60_000_000);
    for message_id in ["m-1", "m-2"] {
        let message = json!({
            "type": "track", "messageId": message_id, "userId": "user-0",
            "event": "Order Completed", "timestamp": at,
            "properties": {"ref": long}
        });
        let sent = post_v1(&app, "/v1/track", Some(&key), &message).await;
        assert_eq!(sent.body, json!({"success": true}));
    }
    let listed = app.get(&path).await;
    assert_eq!(listed.body["bindings"].as_array().map(Vec::len), Some(1));
    let binding = &listed.body["bindings"][0];
    assert_eq!(
        (binding["outcomes"].as_i64(), binding["unusable"].as_i64()),
        (Some(2), Some(0)),
        "{binding}"
    );
    // Two messages, one fact: one stored outcome and one duplicate.
    let report = crate::experiments::report(&app, &campaign).await;
    let (stored, duplicates): (u64, u64) = report["arms"]
        .as_array()
        .expect("arms")
        .iter()
        .map(|arm| &arm["metrics"]["purchase"])
        .map(|m| {
            (
                m["stored_events"].as_u64().expect("stored"),
                m["duplicates"].as_u64().expect("duplicates"),
            )
        })
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    assert_eq!((stored, duplicates), (1, 1), "{report}");
}

/// PostgreSQL only: there a binding and the messages of its event take turns on a lock.
mod postgres_only {
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_binding_declared_while_a_message_is_being_stored_applies_to_it() {
        super::a_binding_declared_while_a_message_is_being_stored_applies_to_it().await
    }

    /// PostgreSQL only: a trigger there can sleep, so a request outlives its timeout.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_tracking_request_the_server_timed_out_is_a_503_the_libraries_retry() {
        super::a_tracking_request_the_server_timed_out_is_a_503_the_libraries_retry().await
    }
}

/// Segment's libraries drop a batch answered with a 4xx other than 429, so a tracking
/// request that outlived the server's request timeout is `503` with `Retry-After`, not
/// `408` (readable by a page, too); nothing of it is stored, and its resend is.
async fn a_tracking_request_the_server_timed_out_is_a_503_the_libraries_retry() {
    let config = traqlyte_server::ServerConfig {
        request_timeout_ms: 300,
        ..Default::default()
    };
    let app = crate::helpers::spawn_app_with(Backend::Postgres, config).await;
    let key = create_source(&app, "java");
    app.slow_event_inserts().await;
    let body = json!({"batch": [{"type": "track", "userId": "u1", "event": "Slow", "messageId": "slow-1"}]});
    let post = || {
        app.client
            .post(app.url("/v1/import/"))
            .basic_auth(&key, Some(""))
            .header("origin", "http://shop.example")
            .json(&body)
    };
    let response = post().send().await.expect("POST");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let headers = response.headers().clone();
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(
        headers["access-control-allow-origin"],
        "http://shop.example"
    );
    assert_eq!(headers["access-control-allow-credentials"], "true");
    let answer: Value = response.json().await.expect("JSON");
    assert_eq!(answer["error"]["code"], "request_timeout", "{answer}");
    assert_eq!(answer["code"], "request_timeout", "{answer}");
    app.end_slow_event_inserts().await;
    assert_eq!(segment_stats(&app).await, (0, 0, 0));
    // The resend must fit in 300 ms too: on a loaded machine it may not, and is retried
    // as a client would (it is stored once either way).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut resent = app.send(post()).await;
    while resent.status == StatusCode::SERVICE_UNAVAILABLE && std::time::Instant::now() < deadline {
        resent = app.send(post()).await;
    }
    assert_eq!(resent.body, json!({"success": true}));
    assert_eq!(segment_stats(&app).await, (1, 0, 0));
    refusals_are_not_logged_at_error(&app, &key).await;
}

/// A `503` that refuses work (a tracking request's timeout; `store_busy`, no pooled
/// connection within the acquire timeout) is no failure of the server's: its process logs
/// no line at ERROR for it, where every such answer was logged at ERROR (a flood under
/// backpressure, paging whoever watches for ERROR).
async fn refusals_are_not_logged_at_error(app: &crate::helpers::TestApp, key: &str) {
    let log_path = std::env::temp_dir().join(format!(
        "traqlyte_it_{}_refusal_{}.log",
        std::process::id(),
        key.len()
    ));
    let log = std::fs::File::create(&log_path).expect("create the log file");
    // One pooled connection, held a second by a slow insert: a second request finds
    // none within the acquire timeout (half the request timeout).
    let mut server = crate::helpers::ServerProcess::start_logging(
        app.database_url(),
        // 600 ms: the acquire timeout (300 ms) is the server's start's too, on a loaded
        // machine.
        &["--request-timeout-ms", "600", "--pool-connections-max", "1"],
        &[],
        log,
    );
    app.slow_event_inserts().await;
    let post = |id: &str| {
        let body = json!({"type": "track", "userId": "u2", "event": "Slow", "messageId": id});
        app.client
            .post(format!("{}/v1/track", server.address))
            .basic_auth(key, Some(""))
            .json(&body)
            .send()
    };
    let first = post("slow-2");
    let second = async {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        post("slow-3").await
    };
    let (first, second) = tokio::join!(first, second);
    let mut codes = Vec::new();
    for response in [first, second] {
        let response = response.expect("POST");
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        let body: Value = response.json().await.expect("JSON");
        codes.push(body["code"].as_str().unwrap_or_default().to_string());
    }
    codes.sort();
    assert_eq!(codes, ["request_timeout", "store_busy"]);
    app.end_slow_event_inserts().await;
    server.kill();
    let text = std::fs::read_to_string(&log_path).expect("read the log");
    let _ = std::fs::remove_file(&log_path);
    assert!(
        !text.lines().any(|line| line.contains("ERROR")),
        "a refusal was logged at ERROR: {text}"
    );
}

/// A binding applies to exactly the messages committed after it. Here its declaration
/// holds the event's bindings lock (as `POST /campaigns/{id}/bindings` does) while a
/// track message is being stored, and commits first: the message, which waited to read
/// the bindings, becomes the binding's outcome. (Read before the message's transaction,
/// as they were, the bindings missed it for good: its resends are duplicates.)
async fn a_binding_declared_while_a_message_is_being_stored_applies_to_it() {
    use sqlx::Connection;
    let app = spawn_app(Backend::Postgres).await;
    let key = create_source(&app, "web");
    let (campaign, _) = campaign_with_units(&app, &["user-1".to_string()]).await;
    let mut holder = sqlx::PgConnection::connect(app.database_url())
        .await
        .expect("connect");
    let mut declaring = holder.begin().await.expect("begin");
    let tenant: String =
        sqlx::query_scalar("SELECT tenant_id FROM campaigns WHERE campaign_id = $1")
            .bind(&campaign)
            .fetch_one(&mut *declaring)
            .await
            .expect("the campaign's tenant");
    sqlx::query("SELECT pg_advisory_xact_lock(21314, hashtext($1 || ':' || $2))")
        .bind(&tenant)
        .bind("Order Completed")
        .execute(&mut *declaring)
        .await
        .expect("the event's bindings lock");
    let message = track("m-1", "user-1", "order-1", 10.0);
    let storing = post_v1(&app, "/v1/track", Some(&key), &message);
    let declare = async {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        sqlx::query(
            "INSERT INTO metric_bindings (tenant_id, campaign_id, metric, event, value_pointer, key_pointer, created_at_us)
             VALUES ($1, $2, 'purchase', 'Order Completed', NULL, '/properties/order_id', 0)",
        )
        .bind(&tenant)
        .bind(&campaign)
        .execute(&mut *declaring)
        .await
        .expect("the binding");
        declaring.commit().await.expect("commit");
    };
    let (answer, ()) = tokio::join!(storing, declare);
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let bindings = app
        .get(&format!("/campaigns/{campaign}/bindings"))
        .await
        .body;
    assert_eq!(bindings["bindings"][0]["outcomes"], 1, "{bindings}");
    let report = app.get(&format!("/campaigns/{campaign}/report")).await.body;
    let converters: u64 = report["arms"]
        .as_array()
        .expect("arms")
        .iter()
        .map(|arm| {
            arm["metrics"]["purchase"]["converters"]
                .as_u64()
                .unwrap_or(0)
        })
        .sum();
    assert_eq!(converters, 1, "{report}");
}

//! Tenant isolation over every route (issue 15): tenant A writes through every kind of
//! route (a contract and its events, a collision, a supersession, a campaign with versions,
//! assignments, outcomes and a binding, lineage runs, a Segment source and its messages,
//! a dead letter, an idempotent answer); tenant B then asks for each of A's things by its
//! id or name and gets a 404, lists and counts none of them, re-sends A's content as new
//! facts of its own (never a duplicate of A's), and never receives A's stored idempotent
//! answer. A's own views are unchanged afterwards.
//!
//! Adding a route is one row: a read in `foreign_reads` (B names A's thing → 404), or a
//! list in `own_lists` (B's list holds none of A's).

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::helpers::{checkout_event, spawn_app, Answer, Backend, TestApp};

crate::on_both_backends!(nothing_of_one_tenant_is_returned_counted_or_replayed_for_another);

/// What tenant A owns, by id or name.
struct Owned {
    campaign: String,
    assignment: String,
    event_id: String,
    source: String,
    outcome: String,
    webhook: String,
}

/// A request as tenant `key`.
async fn call(
    app: &TestApp,
    key: &str,
    method: Method,
    path: &str,
    body: Option<&Value>,
) -> Answer {
    let mut request = app.client.request(method, app.url(path)).bearer_auth(key);
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    app.send(request).await
}

fn in_window() -> String {
    traqlyte_identity::format_rfc3339_micros(traqlyte_store::now_us() + 60_000_000)
}

fn run_event() -> Value {
    json!({"eventType": "COMPLETE", "eventTime": "2026-11-29T03:00:00Z",
        "producer": "https://example.com/iso",
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
        "run": {"runId": "00000000-0000-4000-8000-0000000000a1"},
        "job": {"namespace": "iso", "name": "job"},
        "inputs": [{"namespace": "db", "name": "in"}], "outputs": [{"namespace": "db", "name": "out"}]})
}

fn track(message_id: &str) -> Value {
    json!({"type": "track", "messageId": message_id, "userId": "u1", "event": "Order Completed",
        "properties": {"revenue": 2.5}, "timestamp": in_window()})
}

/// Tenant A writes through every kind of route.
async fn tenant_a_writes(app: &TestApp) -> Owned {
    let a = &app.key;
    app.register_checkout_contract().await;
    let event = app.post_event(&checkout_event("order_a")).await;
    assert_eq!(event.status, StatusCode::OK, "{}", event.body);
    let event_id = event.body["event_id"].as_str().expect("id").to_string();
    let mut changed = checkout_event("order_a");
    changed["note"] = json!("other content");
    assert_eq!(app.post_event(&changed).await.status, StatusCode::CONFLICT);
    let path = format!("/events/checkout_completed/{event_id}/supersessions");
    let superseded = call(
        app,
        a,
        Method::POST,
        &path,
        Some(&json!({"event": changed, "reason": "fix"})),
    )
    .await;
    assert_eq!(
        superseded.status,
        StatusCode::CREATED,
        "{}",
        superseded.body
    );

    let campaign_body = json!({"key": "shared-key", "name": "A's",
        "arms": [{"key": "control", "weight": 1}, {"key": "treatment", "weight": 1}],
        "metrics": [{"name": "revenue", "kind": "sum", "window_hours": 168}]});
    let created = app
        .send(
            app.client
                .post(app.url("/campaigns"))
                .bearer_auth(a)
                .header("X-TL-Idempotency-Key", "shared-idempotency-key")
                .body(campaign_body.to_string()),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let campaign = created.body["id"].as_str().expect("id").to_string();
    let published = app
        .post_raw(&format!("/campaigns/{campaign}/publish"), "")
        .await;
    assert_eq!(published.status, StatusCode::CREATED);
    let assigned = app
        .post_json(
            "/assignments",
            &json!({"campaign_id": campaign, "unit_id": "u1"}),
        )
        .await;
    let assignment = assigned.body["assignment_id"]
        .as_str()
        .expect("id")
        .to_string();
    let outcome = json!({"assignment_id": assignment, "dedupe_key": "order:1", "metric": "revenue", "value": 5.0, "occurred_at": in_window()});
    let recorded = app.post_json("/outcome", &outcome).await;
    assert_eq!(recorded.status, StatusCode::OK, "{}", recorded.body);
    let outcome_id = recorded.body["outcome_id"]
        .as_str()
        .expect("outcome_id")
        .to_string();
    let hook = app
        .post_json(
            "/ops/webhooks",
            &json!({"url": "http://127.0.0.1:9/a-hook"}),
        )
        .await;
    assert_eq!(hook.status, StatusCode::CREATED, "{}", hook.body);
    let webhook = hook.body["webhook_id"]
        .as_str()
        .expect("webhook_id")
        .to_string();
    let binding = json!({"metric": "revenue", "event": "Order Completed", "value_pointer": "/properties/revenue"});
    let bound = app
        .post_json(&format!("/campaigns/{campaign}/bindings"), &binding)
        .await;
    assert_eq!(bound.status, StatusCode::CREATED, "{}", bound.body);

    let lineage = app.post_json("/api/v1/lineage", &run_event()).await;
    assert_eq!(lineage.status, StatusCode::CREATED, "{}", lineage.body);

    let tenant = app
        .store
        .tenant_for_key(&traqlyte_store::ApiKey::parse(a).expect("key"))
        .await
        .expect("lookup")
        .expect("tenant");
    let (source, write_key) = app
        .store
        .create_source(
            &tenant,
            &traqlyte_store::SourceName::parse("web").expect("name"),
        )
        .await
        .expect("source");
    let sent = app
        .send(
            app.client
                .post(app.url("/v1/track"))
                .basic_auth(write_key.expose(), Some(""))
                .body(track("m-1").to_string()),
        )
        .await;
    assert_eq!(sent.status, StatusCode::OK, "{}", sent.body);
    let letter = traqlyte_store::NewDeadLetter {
        stream: "TRAQLYTE".to_string(),
        stream_sequence: 1,
        published_ns: 1,
        subject: "traqlyte.nope".to_string(),
        reason: "unknown_contract".to_string(),
        detail: "A's dead letter".to_string(),
        raw: b"{}".to_vec(),
    };
    app.store
        .insert_dead_letters(&tenant, &[letter])
        .await
        .expect("dead letter");
    Owned {
        campaign,
        assignment,
        event_id,
        source: source.source_id.to_string(),
        outcome: outcome_id,
        webhook,
    }
}

/// Reads (and writes that name a thing) of B that name A's things: each a 404.
fn foreign_reads(a: &Owned) -> Vec<(Method, String, Option<Value>)> {
    let (c, e) = (&a.campaign, &a.event_id);
    let outcome = json!({"assignment_id": a.assignment, "dedupe_key": "order:1", "metric": "revenue", "value": 5.0, "occurred_at": in_window()});
    vec![
        (Method::GET, "/contracts/checkout_completed".into(), None),
        (
            Method::GET,
            "/contracts/checkout_completed/collisions".into(),
            None,
        ),
        (Method::GET, format!("/events/checkout_completed/{e}"), None),
        (
            Method::POST,
            format!("/events/checkout_completed/{e}/supersessions"),
            Some(json!({"event": checkout_event("order_a"), "reason": "steal"})),
        ),
        (Method::GET, format!("/campaigns/{c}"), None),
        (Method::GET, format!("/campaigns/{c}/versions"), None),
        (Method::GET, format!("/campaigns/{c}/report"), None),
        (Method::GET, format!("/campaigns/{c}/bindings"), None),
        (
            Method::POST,
            format!("/campaigns/{c}/bindings"),
            Some(json!({"metric": "revenue", "event": "Order Completed"})),
        ),
        (
            Method::POST,
            format!("/campaigns/{c}/publish"),
            Some(json!({})),
        ),
        (
            Method::POST,
            "/assignments".into(),
            Some(json!({"campaign_id": c, "unit_id": "u1"})),
        ),
        (Method::POST, "/outcome".into(), Some(outcome)),
        (Method::GET, format!("/outcomes/{}", a.outcome), None),
        (
            Method::POST,
            format!("/outcomes/{}/supersessions", a.outcome),
            Some(json!({"value": 1.0, "reason": "steal"})),
        ),
        (Method::DELETE, format!("/ops/webhooks/{}", a.webhook), None),
        (
            Method::GET,
            format!("/sources/{}/rejections", a.source),
            None,
        ),
        (
            Method::GET,
            "/lineage/ancestors?node=job:iso:job".into(),
            None,
        ),
        (
            Method::GET,
            "/lineage/descendants?node=dataset:db:in".into(),
            None,
        ),
    ]
}

/// B's lists and counts, and where A's things would show in them.
async fn own_lists(app: &TestApp, b: &str, a: &Owned) {
    let empty = |answer: &Answer, pointer: &str| {
        assert_eq!(answer.status, StatusCode::OK, "{pointer}: {}", answer.body);
        let value = answer.body.pointer(pointer).cloned().unwrap_or(Value::Null);
        assert!(
            value == json!([]) || value == json!({}) || value == json!(0),
            "{pointer} of tenant B holds A's: {}",
            answer.body
        );
    };
    empty(
        &call(app, b, Method::GET, "/contracts", None).await,
        "/contracts",
    );
    empty(
        &call(app, b, Method::GET, "/stats", None).await,
        "/contracts",
    );
    empty(
        &call(app, b, Method::GET, "/sources", None).await,
        "/sources",
    );
    empty(
        &call(app, b, Method::GET, "/deadletters", None).await,
        "/dead_letters",
    );
    // A's collision, delivery counts, webhook and (no) scans are A's own.
    empty(
        &call(app, b, Method::GET, "/ops/collisions", None).await,
        "/collisions",
    );
    empty(
        &call(app, b, Method::GET, "/ops/duplicates", None).await,
        "/series",
    );
    empty(
        &call(app, b, Method::GET, "/ops/webhooks", None).await,
        "/webhooks",
    );
    // A's scan is listed for A (a pass was run over every tenant), never for B.
    traqlyte_server::semantic_scan_all(&app.store, 0, &mut Default::default())
        .await
        .expect("a scan pass");
    let own = call(app, &app.key, Method::GET, "/ops/semantic-duplicates", None).await;
    assert!(
        own.body["scans"].as_array().is_some_and(|s| !s.is_empty()),
        "{}",
        own.body
    );
    empty(
        &call(app, b, Method::GET, "/ops/semantic-duplicates", None).await,
        "/scans",
    );
    let lineage = call(app, b, Method::GET, "/lineage/stats", None).await;
    for counter in ["/runs", "/datasets", "/edges"] {
        empty(&lineage, counter);
    }
    let graph = call(
        app,
        b,
        Method::GET,
        "/api/v1/lineage?nodeId=dataset:db:in",
        None,
    )
    .await;
    assert!(
        graph.status == StatusCode::NOT_FOUND
            || (graph.status == StatusCode::OK && graph.body["graph"] == json!([])),
        "{}",
        graph.body
    );
    // Batches judge items alone: A's ids are refused items, nothing assigned or stored.
    let batch = call(
        app,
        b,
        Method::POST,
        "/assignments/batch",
        Some(&json!([{"campaign_id": a.campaign, "unit_id": "u1"}])),
    )
    .await;
    assert_eq!(batch.item_statuses(), ["rejected"], "{}", batch.body);
}

async fn nothing_of_one_tenant_is_returned_counted_or_replayed_for_another(backend: Backend) {
    let app = spawn_app(backend).await;
    let a = tenant_a_writes(&app).await;
    let a_views_before = a_views(&app, &a).await;
    let b = app.other_tenant_key().await;

    for (method, path, body) in foreign_reads(&a) {
        let answer = call(&app, &b, method.clone(), &path, body.as_ref()).await;
        assert_eq!(
            answer.status,
            StatusCode::NOT_FOUND,
            "{method} {path} as tenant B: {}",
            answer.body
        );
    }
    let outcomes = call(
        &app,
        &b,
        Method::POST,
        "/outcomes/batch",
        Some(&json!([{"assignment_id": a.assignment, "dedupe_key": "order:1", "metric": "revenue", "value": 5.0, "occurred_at": in_window()}])),
    )
    .await;
    assert_eq!(outcomes.item_statuses(), ["rejected"], "{}", outcomes.body);
    own_lists(&app, &b, &a).await;

    // A's write key is A's: B's key is not a write key, and B's bearer key is refused.
    let segment = app
        .send(
            app.client
                .post(app.url("/v1/track"))
                .bearer_auth(&b)
                .body(track("m-1").to_string()),
        )
        .await;
    assert_eq!(segment.status, StatusCode::UNAUTHORIZED, "{}", segment.body);

    // The same content sent by B is B's new fact, never a duplicate of A's.
    let contract = call(
        &app,
        &b,
        Method::POST,
        "/contracts",
        Some(&crate::helpers::checkout_contract()),
    )
    .await;
    assert_eq!(contract.status, StatusCode::CREATED, "{}", contract.body);
    let event = call(
        &app,
        &b,
        Method::POST,
        "/events/checkout_completed",
        Some(&checkout_event("order_a")),
    )
    .await;
    assert_eq!(
        (event.status, &event.body["status"]),
        (StatusCode::OK, &json!("inserted")),
        "{}",
        event.body
    );
    assert_eq!(
        event.body["event_id"],
        json!(a.event_id),
        "the id is content-derived"
    );
    let run = call(
        &app,
        &b,
        Method::POST,
        "/api/v1/lineage",
        Some(&run_event()),
    )
    .await;
    assert_eq!(run.body["status"], "inserted", "{}", run.body);
    let stats = call(&app, &b, Method::GET, "/stats", None).await;
    assert_eq!(
        stats.body["contracts"]["checkout_completed"],
        json!({"stored": 1, "duplicates": 0, "collisions": 0, "late": 0})
    );

    // A's idempotency key used by B runs B's own request: no replay of A's answer.
    let campaign_body = json!({"key": "shared-key", "name": "B's",
        "arms": [{"key": "control", "weight": 1}, {"key": "treatment", "weight": 1}],
        "metrics": [{"name": "revenue", "kind": "sum", "window_hours": 168}]});
    let response = app
        .client
        .post(app.url("/campaigns"))
        .bearer_auth(&b)
        .header("X-TL-Idempotency-Key", "shared-idempotency-key")
        .body(campaign_body.to_string())
        .send()
        .await
        .expect("sent");
    assert!(response.headers().get("idempotent-replayed").is_none());
    assert_eq!(response.status(), StatusCode::CREATED);
    let body: Value = response.json().await.expect("json");
    assert_ne!(body["id"], json!(a.campaign));
    assert_eq!(body["name"], "B's");

    // The web UI: B's session does not see A's campaign page.
    let token = call(&app, &b, Method::POST, "/ui/tokens", Some(&json!({}))).await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let login_path = token.body["login_path"].as_str().expect("login_path");
    let session = crate::ui::link_session(&app, &client, login_path).await;
    let page = client
        .get(app.url(&format!("/ui/campaigns/{}", a.campaign)))
        .header("cookie", session)
        .send()
        .await
        .expect("page");
    assert_eq!(page.status(), StatusCode::NOT_FOUND);

    // And A sees exactly what it saw before B came.
    assert_eq!(a_views(&app, &a).await, a_views_before);
}

/// A's own views of what it wrote.
async fn a_views(app: &TestApp, a: &Owned) -> Vec<Value> {
    let mut views = Vec::new();
    for path in [
        "/stats".to_string(),
        "/contracts".to_string(),
        "/lineage/stats".to_string(),
        "/sources".to_string(),
        "/deadletters".to_string(),
        format!("/campaigns/{}/versions", a.campaign),
        format!("/campaigns/{}/report", a.campaign),
        format!("/events/checkout_completed/{}", a.event_id),
        format!("/outcomes/{}", a.outcome),
        "/ops/webhooks".to_string(),
        "/ops/collisions".to_string(),
    ] {
        let answer = app.get(&path).await;
        assert_eq!(answer.status, StatusCode::OK, "{path}: {}", answer.body);
        let mut body = answer.body;
        // The report's clock moves; everything else must not.
        if let Some(object) = body.as_object_mut() {
            object.remove("generated_at");
        }
        views.push(body);
    }
    views
}

//! Group commit (issue 11): concurrent single requests share commits, yet each is answered
//! exactly as it would be alone, and nothing acknowledged is lost when the server dies
//! with batches open.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use reqwest::StatusCode;
use serde_json::{json, Value};
use sqlx::Connection;
use traqlyte_server::{GroupCommitConfig, ServerConfig};

use crate::experiments::{assert_unit_metrics_match_the_facts, assign, published_campaign};
use crate::helpers::{checkout_event, spawn_app_with, Backend, ServerProcess, TestApp};
use crate::lineage::run_event;

crate::on_both_backends!(
    a_thousand_concurrent_single_requests_get_the_answers_they_get_without_group_commit,
    a_version_registered_through_another_process_identifies_the_next_event,
    an_event_of_a_newer_versions_shape_is_not_refused_under_the_remembered_one,
    a_version_published_through_another_process_assigns_the_next_unit,
    a_request_answered_408_while_its_batch_is_open_is_stored_and_its_resend_is_a_duplicate,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_killed_with_batches_open_loses_no_acknowledged_event() {
    killed_with_batches_open(Backend::Postgres).await
}

/// With group commit on, a server remembers which version of a contract is the latest
/// (`crates/server/src/lookups.rs`) and the batch re-checks it: a version registered
/// through another process identifies the very next event, as a read per request did.
async fn a_version_registered_through_another_process_identifies_the_next_event(backend: Backend) {
    let app = spawn_app_with(backend, ServerConfig::default()).await;
    assert!(ServerConfig::default().group_commit.enabled);
    app.register_checkout_contract().await;
    let first = app.post_event(&checkout_event("v1-order")).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    let one = ServerProcess::start(app.database_url(), &[]);
    let mut second = crate::helpers::checkout_contract();
    second["version"] = json!(2);
    second["fields"]
        .as_array_mut()
        .expect("fields")
        .retain(|f| f["pointer"] != "/params");
    let registered = app
        .send(
            app.client
                .post(format!("{}/contracts", one.address))
                .bearer_auth(&app.key)
                .body(second.to_string()),
        )
        .await;
    assert_eq!(
        registered.status,
        StatusCode::CREATED,
        "{}",
        registered.body
    );
    // `app` still remembers version 1 as the latest; the batch finds version 2.
    let next = app.post_event(&checkout_event("v2-order")).await;
    assert_eq!(next.status, StatusCode::OK, "{}", next.body);
    let id = next.body["event_id"].as_str().expect("event_id");
    let stored = app.get(&format!("/events/checkout_completed/{id}")).await;
    assert_eq!(stored.status, StatusCode::OK, "{}", stored.body);
    assert_eq!(stored.body["contract_version"], 2, "{}", stored.body);
    // Version 1 named explicitly still identifies under version 1.
    let pinned = app
        .post_json(
            "/events/checkout_completed?version=1",
            &checkout_event("v1-again"),
        )
        .await;
    assert_eq!(pinned.status, StatusCode::OK, "{}", pinned.body);
    let id = pinned.body["event_id"].as_str().expect("event_id");
    let stored = app.get(&format!("/events/checkout_completed/{id}")).await;
    assert_eq!(stored.body["contract_version"], 1, "{}", stored.body);
}

/// A server remembers which version is the latest, and only the batch re-checked it: an
/// event valid under a version registered since (here one requiring `/b` where the
/// remembered one required `/a`) was refused `422` before reaching any batch, for as
/// long as no event of the old shape passed through one, even in the process that
/// registered the new version. A refusal under a remembered version now asks the store.
async fn an_event_of_a_newer_versions_shape_is_not_refused_under_the_remembered_one(
    backend: Backend,
) {
    let app = spawn_app_with(backend, ServerConfig::default()).await;
    let contract = |version: u32, required: &str| {
        json!({"name": "signup", "version": version, "occurred_at": "/ts",
               "fields": [{"pointer": required, "required": true}]})
    };
    let register = |address: String, body: Value| {
        let app = &app;
        async move {
            let answer = app
                .send(
                    app.client
                        .post(format!("{address}/contracts"))
                        .bearer_auth(&app.key)
                        .body(body.to_string()),
                )
                .await;
            assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
        }
    };
    let now = traqlyte_identity::format_rfc3339_micros(traqlyte_store::now_us());
    let stored_version = |answer: crate::helpers::Answer| {
        let app = &app;
        async move {
            assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
            let id = answer.body["event_id"]
                .as_str()
                .expect("event_id")
                .to_string();
            app.get(&format!("/events/signup/{id}")).await.body["contract_version"].clone()
        }
    };
    register(app.address.clone(), contract(1, "/a")).await;
    let first = app
        .post_json("/events/signup", &json!({"a": "1", "ts": now}))
        .await;
    assert_eq!(stored_version(first).await, 1);

    // Registered through another process: this one still remembers version 1.
    let other = ServerProcess::start(app.database_url(), &[]);
    register(other.address.clone(), contract(2, "/b")).await;
    for attempt in 0..2 {
        let next = app
            .post_json("/events/signup", &json!({"b": attempt, "ts": now}))
            .await;
        assert_eq!(stored_version(next).await, 2, "attempt {attempt}");
    }
    // Registered through this very process.
    register(app.address.clone(), contract(3, "/c")).await;
    let next = app
        .post_json("/events/signup", &json!({"c": "z", "ts": now}))
        .await;
    assert_eq!(stored_version(next).await, 3);
    // An event invalid under the latest version too is still refused, naming its field.
    let refused = app
        .post_json("/events/signup", &json!({"a": "1", "ts": now}))
        .await;
    assert_eq!(
        refused.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        refused.body
    );
    assert_eq!(refused.body["error"]["field"], "/c", "{}", refused.body);
}

/// With group commit on, a server remembers a campaign's latest version and proposes a
/// new unit's assignment under it without a read; the batch re-checks it: a version
/// published through another process assigns the very next new unit, while a unit
/// assigned before keeps its first assignment.
async fn a_version_published_through_another_process_assigns_the_next_unit(backend: Backend) {
    let app = spawn_app_with(backend, ServerConfig::default()).await;
    let campaign = published_campaign(&app, [1, 1]).await;
    let publish = format!("/campaigns/{campaign}/publish");
    // The first assignment reads version 1 and remembers it; the second is proposed
    // from memory.
    for unit in ["first", "second"] {
        assert_eq!(assign(&app, &campaign, unit).await["version"], 1);
    }
    let other = ServerProcess::start(app.database_url(), &[]);
    let republished = app
        .send(
            app.client
                .post(format!("{}{publish}", other.address))
                .bearer_auth(&app.key),
        )
        .await;
    assert_eq!(
        republished.status,
        StatusCode::CREATED,
        "{}",
        republished.body
    );
    // `app` still remembers version 1; the batch finds version 2.
    let next = assign(&app, &campaign, "third").await;
    assert_eq!(next["version"], 2, "{next}");
    // Sticky: a unit assigned under version 1 keeps it, from memory or not.
    for _ in 0..2 {
        assert_eq!(assign(&app, &campaign, "first").await["version"], 1);
    }
    assert_eq!(assign(&app, &campaign, "third").await, next);
}

/// One request of the mix: where it goes, its body, the group whose answers are compared
/// as a multiset (two identical concurrent requests may be answered in either order), and
/// the answer it must get.
struct Request {
    path: &'static str,
    body: String,
    group: String,
    expected: &'static str,
}

async fn app(backend: Backend, enabled: bool) -> TestApp {
    let config = ServerConfig {
        late_events: traqlyte_store::LateEvents::Reconcile,
        group_commit: GroupCommitConfig {
            enabled,
            // The longest wait the flag allows: batches as large as the mix makes them.
            wait_us: 2_000,
            batch_max: 64,
            ..GroupCommitConfig::default()
        },
        // 1,000 requests at once on a loaded machine: no request may hit the 30 s default
        // and be answered 408 instead of its outcome.
        request_timeout_ms: 300_000,
        ..ServerConfig::default()
    };
    // Nor may a write wait out SQLite's 10 s busy timeout, or the pool's 5 s wait for
    // SQLite's one writer connection, and be answered `503 store_busy` (seen once, with
    // group commit off, on a machine running two test suites at once; the pool's wait in
    // 11 of 24 runs of three suites at once).
    crate::helpers::spawn_app_with_store(backend, config, |store| {
        store.sqlite_busy_timeout_ms = 300_000;
        store.pool_acquire_timeout_ms = 300_000;
    })
    .await
}

/// What both apps hold before the concurrent requests: the contract, 50 events, a
/// published campaign, 20 assigned units with one outcome each. Returns the campaign id
/// and the units' assignment ids.
async fn seed(app: &TestApp) -> (String, Vec<String>) {
    app.register_checkout_contract().await;
    for i in 0..50 {
        let answer = app.post_event(&checkout_event(&format!("seed-{i}"))).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    }
    let body = json!({
        "key": "gc", "name": "gc",
        "arms": [{"key": "control", "weight": 1}, {"key": "treatment", "weight": 1}],
        "metrics": [{"name": "revenue", "kind": "sum", "window_hours": 168}]
    });
    let campaign = crate::experiments::create_published(app, &body).await;
    let mut assignments = Vec::new();
    for unit in 0..20 {
        let body = json!({"campaign_id": campaign, "unit_id": format!("user-{unit}")});
        let answer = app.post_json("/assignments", &body).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        let id = answer.body["assignment_id"]
            .as_str()
            .expect("id")
            .to_string();
        let outcome = outcome(&id, &format!("seed-{unit}"), 1.0);
        let answer = app.post_json("/outcome", &outcome).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        assignments.push(id);
    }
    (campaign, assignments)
}

/// An outcome of the `revenue` metric; every outcome of the test occurred at one time, so
/// a resent seed outcome is a retry.
fn outcome(assignment: &str, key: &str, value: f64) -> Value {
    static AT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let at = AT.get_or_init(|| traqlyte_identity::format_rfc3339_micros(traqlyte_store::now_us()));
    json!({"assignment_id": assignment, "dedupe_key": key, "metric": "revenue", "value": value, "occurred_at": at})
}

/// The 1,000 requests: 630 events (new, retried pairs, retries and collisions of stored
/// events, invalid ones), 110 run events, 140 outcomes, 120 assignments.
fn mix(campaign: &str, assignments: &[String]) -> Vec<Request> {
    let mut out = Vec::new();
    let mut push = |path, body: String, group: String, expected| {
        out.push(Request {
            path,
            body,
            group,
            expected,
        })
    };
    let events = "/events/checkout_completed";
    for i in 0..255 {
        let body = checkout_event(&format!("new-{i}")).to_string();
        push(events, body, format!("e-new-{i}"), "200 inserted");
    }
    for i in 0..100 {
        let mut retry = checkout_event(&format!("pair-{i}"));
        push(
            events,
            retry.to_string(),
            format!("e-pair-{i}"),
            "200 inserted|200 duplicate",
        );
        retry["attempt"] = json!(2);
        push(
            events,
            retry.to_string(),
            format!("e-pair-{i}"),
            "200 inserted|200 duplicate",
        );
    }
    for i in 0..50 {
        let mut event = checkout_event(&format!("seed-{i}"));
        event["sent_at"] = json!("2026-11-29T10:05:00Z");
        push(
            events,
            event.to_string(),
            format!("e-seed-{i}"),
            "200 duplicate",
        );
        event["note"] = json!("different content outside the identity");
        push(
            events,
            event.to_string(),
            format!("e-collide-{i}"),
            "409 collision",
        );
    }
    for i in 0..50 {
        let mut event = checkout_event(&format!("invalid-{i}"));
        event.as_object_mut().map(|o| o.remove("order_id"));
        push(
            events,
            event.to_string(),
            format!("e-invalid-{i}"),
            "422 missing_required_field",
        );
    }
    for i in 0..25 {
        let body = format!("{{\"order_id\": \"broken-{i}\"");
        push(events, body, format!("e-syntax-{i}"), "400 malformed_json");
    }
    let lineage = "/api/v1/lineage";
    for run in 0..70u32 {
        let body = run_event(
            &format!("job-{run}"),
            run,
            &["in"],
            &[&format!("out-{run}")],
        );
        let (group, expected) = if run < 40 {
            (format!("l-new-{run}"), "201 inserted")
        } else {
            (format!("l-pair-{run}"), "201 inserted|201 duplicate")
        };
        if run >= 40 {
            push(lineage, body.to_string(), group.clone(), expected);
        }
        push(lineage, body.to_string(), group, expected);
    }
    for i in 0..10u32 {
        let mut body = run_event("job-bad", 1_000 + i, &[], &[]);
        body["run"].as_object_mut().map(|o| o.remove("runId"));
        push(
            lineage,
            body.to_string(),
            format!("l-invalid-{i}"),
            "400 missing_required_field",
        );
    }
    let single = "/outcome";
    for i in 0..60 {
        let body = outcome(&assignments[i % 20], &format!("o-new-{i}"), 2.0);
        push(
            single,
            body.to_string(),
            format!("o-new-{i}"),
            "200 inserted",
        );
    }
    for (i, assignment) in assignments.iter().enumerate() {
        let body = outcome(assignment, &format!("o-pair-{i}"), 3.0).to_string();
        push(
            single,
            body.clone(),
            format!("o-pair-{i}"),
            "200 inserted|200 duplicate",
        );
        push(
            single,
            body,
            format!("o-pair-{i}"),
            "200 inserted|200 duplicate",
        );
    }
    for (i, assignment) in assignments.iter().enumerate() {
        let body = outcome(assignment, &format!("seed-{i}"), 5.0);
        push(
            single,
            body.to_string(),
            format!("o-collide-{i}"),
            "409 outcome_collision",
        );
    }
    for (i, assignment) in assignments.iter().enumerate().take(10) {
        let body = outcome(assignment, &format!("seed-{i}"), 1.0);
        push(
            single,
            body.to_string(),
            format!("o-seed-{i}"),
            "200 duplicate",
        );
    }
    for (i, assignment) in assignments.iter().enumerate().take(10) {
        let mut body = outcome(assignment, &format!("o-bad-{i}"), 1.0);
        body["metric"] = json!("unknown");
        push(
            single,
            body.to_string(),
            format!("o-invalid-{i}"),
            "422 invalid_outcome",
        );
    }
    let assign = "/assignments";
    let unit = |u: String| json!({"campaign_id": campaign, "unit_id": u}).to_string();
    for i in 0..60 {
        push(
            assign,
            unit(format!("new-{i}")),
            format!("a-new-{i}"),
            "200 assigned",
        );
    }
    for i in 0..20 {
        let body = unit(format!("pair-{i}"));
        push(assign, body.clone(), format!("a-pair-{i}"), "200 assigned");
        push(assign, body, format!("a-pair-{i}"), "200 assigned");
    }
    for i in 0..20 {
        push(
            assign,
            unit(format!("user-{i}")),
            format!("a-known-{i}"),
            "200 assigned",
        );
    }
    assert_eq!(out.len(), 1_000);
    out
}

/// `"{status} {what}"`: the item status of a 2xx (the dedupe header for an outcome,
/// `assigned` for an assignment), else the error code.
async fn answer_of(app: &TestApp, request: &Request) -> (String, Value) {
    let response = app
        .client
        .post(app.url(request.path))
        .bearer_auth(&app.key)
        .header("content-type", "application/json")
        .body(request.body.clone())
        .send()
        .await
        .expect("request sent");
    let status = response.status();
    let dedupe = response
        .headers()
        .get("x-tl-dedupe")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body: Value = response.json().await.expect("a JSON answer");
    let what = if !status.is_success() {
        body["error"]["code"].as_str().unwrap_or("?").to_string()
    } else if let Some(dedupe) = dedupe {
        dedupe
    } else if request.path == "/assignments" {
        "assigned".to_string()
    } else {
        body["status"].as_str().unwrap_or("?").to_string()
    };
    (format!("{} {what}", status.as_u16()), body)
}

/// Sends every request at once; returns each answer in request order.
async fn send_all(app: &Arc<TestApp>, requests: &Arc<Vec<Request>>) -> Vec<(String, Value)> {
    let mut tasks = Vec::new();
    for index in 0..requests.len() {
        let (app, requests) = (app.clone(), requests.clone());
        tasks.push(tokio::spawn(async move {
            answer_of(&app, &requests[index]).await
        }));
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.expect("request task"));
    }
    answers
}

/// Each group's answers, sorted: the same for both apps whatever the arrival order.
fn by_group(requests: &[Request], answers: &[(String, Value)]) -> BTreeMap<String, Vec<String>> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (request, (answer, body)) in requests.iter().zip(answers) {
        // Event ids do not depend on the tenant: both apps must name the same ones.
        let id = body["event_id"].as_str().unwrap_or("");
        groups
            .entry(request.group.clone())
            .or_default()
            .push(format!("{answer} {id}"));
    }
    for answers in groups.values_mut() {
        answers.sort();
    }
    groups
}

async fn tally_rows(app: &TestApp, backend: Backend) -> i64 {
    let sql = "SELECT COUNT(*) FROM event_tallies WHERE contract_name = 'checkout_completed'";
    match backend {
        Backend::Postgres => {
            let mut conn = sqlx::PgConnection::connect(app.database_url())
                .await
                .expect("connect");
            sqlx::query_scalar(sql)
                .fetch_one(&mut conn)
                .await
                .expect("count")
        }
        Backend::Sqlite => {
            let mut conn = sqlx::SqliteConnection::connect(app.database_url())
                .await
                .expect("connect");
            sqlx::query_scalar(sql)
                .fetch_one(&mut conn)
                .await
                .expect("count")
        }
    }
}

async fn a_thousand_concurrent_single_requests_get_the_answers_they_get_without_group_commit(
    backend: Backend,
) {
    let on = Arc::new(app(backend, true).await);
    let off = Arc::new(app(backend, false).await);
    let (campaign_on, assignments_on) = seed(&on).await;
    let (campaign_off, assignments_off) = seed(&off).await;
    let tallies_before = (
        tally_rows(&on, backend).await,
        tally_rows(&off, backend).await,
    );
    let requests_on = Arc::new(mix(&campaign_on, &assignments_on));
    let requests_off = Arc::new(mix(&campaign_off, &assignments_off));
    let (answers_on, answers_off) =
        tokio::join!(send_all(&on, &requests_on), send_all(&off, &requests_off));

    // Every answer is the one the request must get, on both apps alike.
    for (requests, answers) in [(&requests_on, &answers_on), (&requests_off, &answers_off)] {
        for (request, (answer, body)) in requests.iter().zip(answers) {
            assert!(
                request.expected.split('|').any(|e| e == answer),
                "{} {}: expected {}, got {answer}: {body}",
                request.path,
                request.group,
                request.expected
            );
        }
    }
    assert_eq!(
        by_group(&requests_on, &answers_on),
        by_group(&requests_off, &answers_off)
    );
    // A pair of identical requests: one inserted, one duplicate, whoever came first.
    let on_groups = by_group(&requests_on, &answers_on);
    for (group, answers) in &on_groups {
        if group.starts_with("e-pair") || group.starts_with("o-pair") || group.starts_with("l-pair")
        {
            let statuses: Vec<&str> = answers
                .iter()
                .map(|a| a.split(' ').nth(1).unwrap_or(""))
                .collect();
            assert_eq!(statuses, ["duplicate", "inserted"], "{group}");
        }
    }
    // Both requests for a new unit get the one stored assignment: the same id (which is
    // derived from the unit), arm, version and time.
    for (requests, answers) in [(&requests_on, &answers_on), (&requests_off, &answers_off)] {
        let mut by_unit: BTreeMap<&str, HashSet<String>> = BTreeMap::new();
        for (request, (_, body)) in requests.iter().zip(answers) {
            if request.path == "/assignments" {
                by_unit
                    .entry(request.group.as_str())
                    .or_default()
                    .insert(body.to_string());
            }
        }
        assert!(by_unit.values().all(|ids| ids.len() == 1));
    }

    // The rows: exactly what the answers say, on both apps.
    for app in [&on, &off] {
        assert_eq!(app.checkout_stats().await, (50 + 255 + 100, 100 + 50, 50));
        let lineage = app.get("/lineage/stats").await;
        assert_eq!(lineage.body["runs"], 70, "{}", lineage.body);
    }
    assert_unit_metrics_match_the_facts(&on, &campaign_on).await;
    assert_unit_metrics_match_the_facts(&off, &campaign_off).await;
    let report = |app: Arc<TestApp>, campaign: String| async move {
        let answer = app.get(&format!("/campaigns/{campaign}/report")).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        let units: i64 = answer.body["arms"]
            .as_array()
            .expect("arms")
            .iter()
            .map(|arm| arm["units"].as_i64().expect("units"))
            .sum();
        units
    };
    // 20 seeded units, 60 new, 20 new pairs: 100 units, each assigned once.
    assert_eq!(report(on.clone(), campaign_on.clone()).await, 100);
    assert_eq!(report(off.clone(), campaign_off.clone()).await, 100);

    // The requests shared commits: fewer event batches (one tally row each) than
    // requests with group commit on, one per stored request without it.
    let tallies = (
        tally_rows(&on, backend).await - tallies_before.0,
        tally_rows(&off, backend).await - tallies_before.1,
    );
    assert!(
        tallies.0 < tallies.1,
        "group commit wrote {} tally rows, one transaction per request {}",
        tallies.0,
        tallies.1
    );
}

/// A `traqlyte serve` process whose batches sleep inside their transactions (or, written
/// in one statement, between its commit and the answers) is killed while 64 clients post
/// events; every event it acknowledged is stored.
async fn killed_with_batches_open(backend: Backend) {
    let app = app(backend, true).await;
    app.register_checkout_contract().await;
    let delay = [("TRAQLYTE_TEST_GROUP_COMMIT_DELAY_MS", "150")];
    let flags = ["--group-commit", "on", "--group-commit-wait-us", "2000"];
    let mut server = ServerProcess::start_with_env(app.database_url(), &flags, &delay);
    let address = Arc::new(server.address.clone());
    let key = Arc::new(app.key.clone());
    let client = reqwest::Client::new();
    let acknowledged = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    // A client's loop ends when the kill cuts its request off, or on a refusal (not 200),
    // which no client may see.
    let failed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let refused = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut clients = Vec::new();
    for worker in 0..64 {
        let (client, address, key) = (client.clone(), address.clone(), key.clone());
        let (acknowledged, failed, refused) =
            (acknowledged.clone(), failed.clone(), refused.clone());
        clients.push(tokio::spawn(async move {
            for i in 0.. {
                let event = checkout_event(&format!("kill-{worker}-{i}"));
                let sent = client
                    .post(format!("{address}/events/checkout_completed"))
                    .bearer_auth(&*key)
                    .json(&event)
                    .send()
                    .await;
                let Ok(response) = sent else {
                    failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return;
                };
                if response.status() != StatusCode::OK {
                    refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return;
                }
                let body: Value = match response.json().await {
                    Ok(body) => body,
                    Err(_) => {
                        failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        return;
                    }
                };
                let id = body["event_id"].as_str().expect("event_id").to_string();
                acknowledged.lock().expect("lock").push(id);
            }
        }));
    }
    // Killed once at least 64 events were acknowledged, however slow the machine.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while acknowledged.lock().expect("lock").len() < 64 {
        assert!(
            std::time::Instant::now() < deadline,
            "the server acknowledged {} events in 60 s",
            acknowledged.lock().expect("lock").len()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    server.kill();
    for client in clients {
        client.await.expect("client task");
    }
    let acknowledged = acknowledged.lock().expect("lock").clone();
    assert!(
        acknowledged.len() >= 64,
        "the server acknowledged {} events before the kill",
        acknowledged.len()
    );
    // Every client was cut off in flight by the kill (its request in an open batch or
    // queued), none refused before it.
    assert_eq!(refused.load(std::sync::atomic::Ordering::Relaxed), 0);
    assert_eq!(failed.load(std::sync::atomic::Ordering::Relaxed), 64);
    let restarted = ServerProcess::start(app.database_url(), &[]);
    for id in &acknowledged {
        let stored = client
            .get(format!(
                "{}/events/checkout_completed/{id}",
                restarted.address
            ))
            .bearer_auth(&app.key)
            .send()
            .await
            .expect("request sent");
        assert_eq!(
            stored.status(),
            StatusCode::OK,
            "acknowledged event {id} lost"
        );
    }
}

/// A single request whose batch outlives `--request-timeout-ms` (the test hook holds every
/// batch open, or its answers after a one-statement commit, for longer) is answered 408,
/// yet its event is written with the batch: a 408 is an unknown outcome, not a rollback
/// (`docs/api.md`), and the client's resend is answered `duplicate`. A run event is
/// answered `503` instead, in its answer and in the latency histogram.
async fn a_request_answered_408_while_its_batch_is_open_is_stored_and_its_resend_is_a_duplicate(
    backend: Backend,
) {
    let app = app(backend, true).await;
    app.register_checkout_contract().await;
    // The pool's acquire timeout is half the request timeout: 1 s leaves the server's
    // start (a connection, the migration check) room on a loaded machine.
    let delay = [("TRAQLYTE_TEST_GROUP_COMMIT_DELAY_MS", "3000")];
    let flags = ["--group-commit", "on", "--request-timeout-ms", "1000"];
    let server = ServerProcess::start_with_env(app.database_url(), &flags, &delay);
    let event = checkout_event("timed-out-order");
    let first = app
        .client
        .post(format!("{}/events/checkout_completed", server.address))
        .bearer_auth(&app.key)
        .json(&event)
        .send()
        .await
        .expect("request sent");
    assert_eq!(first.status(), StatusCode::REQUEST_TIMEOUT);
    // RFC 9110: the server closes a connection it timed a request out on.
    assert_eq!(
        first.headers().get("connection").map(|v| v.as_bytes()),
        Some(&b"close"[..])
    );
    let body: Value = first.json().await.expect("a JSON error");
    assert_eq!(body["error"]["code"], "request_timeout", "{body}");
    // The batch commits once the hook's delay is over; the row is then readable. Its id
    // is derived here: posting the event again to learn it would store it.
    let event_id = crate::partitions::id_of(&event);
    let mut stored = false;
    for _ in 0..100 {
        let answer = app
            .get(&format!("/events/checkout_completed/{event_id}"))
            .await;
        if answer.status == StatusCode::OK {
            stored = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(stored, "the timed-out request's event was never stored");
    // Its handler was gone when the batch answered (on PostgreSQL the hook holds the
    // answers of a committed one-statement write): the batch counts the event in the
    // server's metrics then, as the handler would have (the store's tally counts it too).
    let tenant = crate::metrics::tenant_id(&app).await;
    let labels = [
        ("tenant", tenant.as_str()),
        ("contract", "checkout_completed"),
        ("source", "http"),
    ];
    let mut counted = (0.0, 0.0);
    for _ in 0..100 {
        let samples = crate::metrics::scrape_at(&app, &server.address).await;
        let value = |name| crate::metrics::value_of(&samples, name, &labels);
        counted = (
            value("traqlyte_events_received_total"),
            value("traqlyte_events_inserted_total"),
        );
        if counted != (0.0, 0.0) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(counted, (1.0, 1.0), "received and inserted");
    // The request's latency is in the histogram, with the status its client got.
    let samples = crate::metrics::scrape_at(&app, &server.address).await;
    let timed_out = [
        ("route", "/events/{contract}"),
        ("method", "POST"),
        ("status", "408"),
    ];
    assert_eq!(
        crate::metrics::value_of(
            &samples,
            "traqlyte_http_request_duration_seconds_count",
            &timed_out
        ),
        1.0,
        "{samples:?}"
    );
    // A run event timed out alike is answered `503` (OpenLineage's clients retry a `5xx`
    // only), and the histogram records `503` for it too, the status its client got (it
    // recorded `408`).
    let run = crate::lineage::run_event("timed_out_job", 1, &["in"], &["out"]);
    let run = app
        .client
        .post(format!("{}/api/v1/lineage", server.address))
        .bearer_auth(&app.key)
        .header("content-type", "application/json")
        .body(run.to_string())
        .send()
        .await
        .expect("request sent");
    assert_eq!(run.status(), StatusCode::SERVICE_UNAVAILABLE);
    let samples = crate::metrics::scrape_at(&app, &server.address).await;
    let count = |status| {
        let labels = [
            ("route", "/api/v1/lineage"),
            ("method", "POST"),
            ("status", status),
        ];
        crate::metrics::value_of(
            &samples,
            "traqlyte_http_request_duration_seconds_count",
            &labels,
        )
    };
    assert_eq!((count("503"), count("408")), (1.0, 0.0), "{samples:?}");
    let resent = app.post_event(&event).await;
    assert_eq!(resent.status, StatusCode::OK, "{}", resent.body);
    assert_eq!(resent.body["status"], "duplicate", "{}", resent.body);
}

/// A batch written in one statement whose answer is lost after the commit (the test hook
/// reports the first such write as a reset connection) cannot know what it stored: each
/// request is answered the error, as it would be written on its own, never `duplicate`
/// of its own row, and no duplicate is counted. The client's retry finds the row.
/// PostgreSQL only: SQLite commits in the process, with no connection to lose, and
/// writes its batches in a transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_whose_commit_answer_is_lost_is_answered_an_error_not_duplicates_of_itself() {
    let app = app(Backend::Postgres, true).await;
    app.register_checkout_contract().await;
    let lose = [("TRAQLYTE_TEST_GROUP_COMMIT_LOSE_ANSWER", "1")];
    let server =
        ServerProcess::start_with_env(app.database_url(), &["--group-commit", "on"], &lose);
    let event = checkout_event("lost-answer-order");
    let post = || {
        app.client
            .post(format!("{}/events/checkout_completed", server.address))
            .bearer_auth(&app.key)
            .json(&event)
            .send()
    };
    let first = post().await.expect("request sent");
    assert_eq!(first.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(app.checkout_stats().await, (1, 0, 0));
    let retry = post().await.expect("request sent");
    assert_eq!(retry.status(), StatusCode::OK);
    let body: Value = retry.json().await.expect("json");
    assert_eq!(body["status"], "duplicate", "{body}");
    assert_eq!(app.checkout_stats().await, (1, 1, 0));
}

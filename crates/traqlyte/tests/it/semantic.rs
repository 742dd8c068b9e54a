//! The semantic-duplicate scan: a contract that wrongly holds an emit time in its
//! identity stores every retry as a new event; the scan names that field with the number
//! of groups, and finds nothing under a contract that lists the emit time as transport.

use std::process::Command;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use traqlyte_server::ServerConfig;

use crate::helpers::{spawn_app, spawn_app_with, Backend, TestApp};

crate::on_both_backends!(
    the_scan_names_an_emit_time_in_the_identity_with_its_group_count,
    a_sound_contract_has_no_semantic_duplicates,
    payloads_holding_nul_are_scanned_like_any_other,
    a_nul_and_a_replacement_character_are_not_taken_for_one_another,
    serve_runs_the_scan_periodically_and_shows_it_per_tenant,
    array_elements_are_removed_later_index_first,
    a_tenant_whose_contracts_cannot_be_read_does_not_stop_the_scan_of_the_others,
    an_array_where_a_pointer_names_a_key_does_not_fail_the_scan,
    a_field_inside_an_array_element_is_named_on_both_backends,
    a_periodic_pass_skips_a_scan_another_process_saved_recently,
);

/// Every server runs the periodic scan: a pass finding a scan of the contract version
/// saved within most of its interval (by another process) does not scan it again.
async fn a_periodic_pass_skips_a_scan_another_process_saved_recently(backend: Backend) {
    let app = spawn_app(backend).await;
    app.register_contract(&page_view_contract(2)).await;
    let scanned_at = || async {
        let listed = app.get("/ops/semantic-duplicates").await;
        listed.body["scans"][0]["scanned_at"].clone()
    };
    traqlyte_server::semantic_scan_all(&app.store, 0, &mut Default::default())
        .await
        .expect("first pass");
    let first = scanned_at().await;
    assert!(first.is_string(), "{first}");
    // Another server's pass within the minute: skipped.
    traqlyte_server::semantic_scan_all(&app.store, 60_000_000, &mut Default::default())
        .await
        .expect("second pass");
    assert_eq!(scanned_at().await, first);
    // A pass with no such bound (the CLI's, or one an interval later) scans again.
    let mut own = traqlyte_server::OwnScans::default();
    traqlyte_server::semantic_scan_all(&app.store, 0, &mut own)
        .await
        .expect("third pass");
    let third = scanned_at().await;
    assert_ne!(third, first);
    // A process's own scan, however young, is not another's: its next pass scans again.
    traqlyte_server::semantic_scan_all(&app.store, 60_000_000, &mut own)
        .await
        .expect("fourth pass");
    assert_ne!(scanned_at().await, third);
    // A scan bounded by `--since` (the CLI's) read part of the events: another server's
    // pass does not take it for a scan of the whole.
    scan_cli(&app, 2, &["--since", "2000-01-01T00:00:00Z"]);
    let partial = scanned_at().await;
    traqlyte_server::semantic_scan_all(&app.store, 60_000_000, &mut Default::default())
        .await
        .expect("fifth pass");
    assert_ne!(scanned_at().await, partial);
}

/// Version 1 holds `/emitted_at`, the client's send time, among its identity fields: the
/// mistake under test. Version 2 lists it as transport.
fn page_view_contract(version: u32) -> Value {
    let mut fields = vec![
        json!({"pointer": "/user_id", "required": true}),
        json!({"pointer": "/page", "required": true}),
    ];
    let mut transport = vec![json!("/attempt")];
    if version == 1 {
        fields.push(json!({"pointer": "/emitted_at"}));
    } else {
        transport.push(json!("/emitted_at"));
    }
    json!({"name": "page_view", "version": version, "fields": fields, "transport": transport})
}

fn page_view(user: &str, page: &str, attempt: u32) -> Value {
    json!({"user_id": user, "page": page, "referrer": "search",
           "emitted_at": format!("2026-11-29T10:00:0{attempt}Z"), "attempt": attempt})
}

/// Sends business event `(user, page)` `deliveries` times, each a retry with a new emit
/// time and attempt counter; returns how many the store kept as distinct events.
async fn deliver(app: &TestApp, version: u32, user: &str, page: &str, deliveries: u32) -> usize {
    let mut ids = std::collections::BTreeSet::new();
    for attempt in 1..=deliveries {
        let answer = app
            .post_json(
                &format!("/events/page_view?version={version}"),
                &page_view(user, page, attempt),
            )
            .await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        ids.insert(answer.body["event_id"].as_str().map(str::to_string));
    }
    ids.len()
}

/// The traffic of both tests: three business events retried (4, 3 and 2 deliveries) and
/// one delivered once. Returns the distinct events stored.
async fn feed(app: &TestApp, version: u32) -> usize {
    app.register_contract(&page_view_contract(version)).await;
    let mut stored = 0;
    stored += deliver(app, version, "u1", "/home", 4).await;
    stored += deliver(app, version, "u2", "/pricing", 3).await;
    stored += deliver(app, version, "u3", "/docs", 2).await;
    stored += deliver(app, version, "u4", "/about", 1).await;
    stored
}

/// The pointers a scan names as suspects, in its order.
fn suspects(scan: &Value) -> Vec<&Value> {
    let findings = scan["findings"].as_array().expect("findings");
    findings.iter().map(|f| &f["pointer"]).collect()
}

/// `traqlyte scan semantic … --json`, parsed.
fn scan_cli(app: &TestApp, version: u32, extra: &[&str]) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_traqlyte"))
        .args([
            "scan",
            "semantic",
            "--tenant",
            "test tenant",
            "--contract",
            "page_view",
        ])
        .args(["--version", &version.to_string(), "--json"])
        .args(["--database-url", app.database_url()])
        .args(extra)
        .output()
        .expect("run traqlyte scan semantic");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("one JSON line")
}

async fn the_scan_names_an_emit_time_in_the_identity_with_its_group_count(backend: Backend) {
    let app = spawn_app(backend).await;
    // Every retry carries a new emit time, so the wrong contract stores each as an event.
    assert_eq!(feed(&app, 1).await, 10);

    let scan = scan_cli(&app, 1, &[]);
    assert_eq!(scan["events"], 10);
    assert_eq!(
        scan["fields_checked"],
        json!(["/user_id", "/page", "/emitted_at"])
    );
    let findings = scan["findings"].as_array().expect("findings");
    assert_eq!(findings.len(), 1, "only the emit time is suspect: {scan}");
    let finding = &findings[0];
    assert_eq!(finding["pointer"], "/emitted_at");
    assert_eq!(finding["groups"], 3, "u1, u2 and u3 were retried");
    assert_eq!(finding["events"], 4 + 3 + 2);
    assert_eq!(finding["examples"][0]["events"], 4, "largest group first");

    // The same result is stored and answered over HTTP.
    let listed = app.get("/ops/semantic-duplicates").await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.body);
    let answered = &listed.body["scans"][0];
    assert_eq!(answered["contract"], "page_view");
    assert_eq!(answered["version"], 1);
    assert_eq!(answered["findings"][0]["pointer"], "/emitted_at");
    assert_eq!(answered["findings"][0]["groups"], 3);
    assert_eq!(answered["findings"][0]["events"], 9);
    // The CLI's `--json` is the API's shape: the same keys, times in RFC 3339.
    let keys = |v: &Value| v.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>());
    assert_eq!(keys(&scan), keys(answered), "{scan}");
    assert!(
        scan["scanned_at"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{scan}"
    );
    // The operations page shows the same finding.
    let page = crate::ui::page_with_session(&app, "/ui/ops").await;
    assert!(
        page.contains(r#"data-pointer="/emitted_at""#)
            && page.contains(r#"<td data-field="groups">3</td>"#)
            && page.contains(r#"<td data-field="events">9</td>"#),
        "the ops page lacks the finding: {page}"
    );

    // --since after every arrival scans nothing.
    let later = scan_cli(&app, 1, &["--since", "2999-01-01T00:00:00Z"]);
    assert_eq!(
        (later["events"].clone(), later["findings"].clone()),
        (json!(0), json!([]))
    );
    // A scan counts only what arrived before it began (here, a clock before every
    // arrival): what arrived while it ran joined later fields' groups, and a finding
    // counted more events than the scan had scanned.
    let tenant = app.tenant().await;
    let name = traqlyte_identity::ContractName::parse("page_view").expect("a name");
    let contract = app.store.contract(&tenant, &name, Some(1)).await;
    let contract = contract.expect("read").expect("the contract");
    let scope = traqlyte_store::SemanticScope {
        tenant: &tenant,
        contract: &contract,
        since_us: None,
    };
    let before = app.store.semantic_scan(scope, || 1, |_| {}).await;
    let before = before.expect("scan");
    assert_eq!((before.events, before.findings.len()), (0, 0), "{before:?}");
}

async fn a_sound_contract_has_no_semantic_duplicates(backend: Backend) {
    let app = spawn_app(backend).await;
    // The emit time is transport: every retry is a duplicate of its first delivery.
    assert_eq!(feed(&app, 2).await, 4);
    let scan = scan_cli(&app, 2, &[]);
    assert_eq!(scan["events"], 4);
    assert_eq!(scan["fields_checked"], json!(["/user_id", "/page"]));
    assert_eq!(scan["findings"], json!([]), "{scan}");
}

/// Two events of one user and page, emitted at two times, whose `referrer` holds a NUL in
/// one and U+FFFD in the other: their content differs, so the scan names no suspect.
/// PostgreSQL read a NUL as U+FFFD for the grouping and named `/emitted_at` for them.
async fn a_nul_and_a_replacement_character_are_not_taken_for_one_another(backend: Backend) {
    let app = spawn_app(backend).await;
    app.register_contract(&page_view_contract(1)).await;
    for (attempt, referrer) in [(1, "a\u{0}b"), (2, "a\u{fffd}b")] {
        let mut view = page_view("u1", "/nul", attempt);
        view["referrer"] = json!(referrer);
        let answer = app.post_json("/events/page_view?version=1", &view).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    }
    let scan = scan_cli(&app, 1, &[]);
    assert_eq!(scan["events"], 2, "{scan}");
    assert_eq!(scan["findings"], json!([]), "{scan}");
}

/// Event payloads keep NUL (`routes/text.rs`), which PostgreSQL's `jsonb` refuses: the
/// scan reads it (as U+FFFD and a marker) rather than failing on the contract.
async fn payloads_holding_nul_are_scanned_like_any_other(backend: Backend) {
    let app = spawn_app(backend).await;
    assert_eq!(feed(&app, 1).await, 10);
    for attempt in 1..=2 {
        let mut view = page_view("u5", "/nul", attempt);
        view["referrer"] = json!("a\u{0}b");
        let answer = app.post_json("/events/page_view?version=1", &view).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    }
    let scan = scan_cli(&app, 1, &[]);
    assert_eq!(scan["events"], 12);
    let finding = &scan["findings"][0];
    assert_eq!(finding["pointer"], "/emitted_at", "{scan}");
    assert_eq!(
        finding["groups"], 4,
        "u1, u2, u3 and u5 were retried: {scan}"
    );
}

async fn serve_runs_the_scan_periodically_and_shows_it_per_tenant(backend: Backend) {
    let config = ServerConfig {
        late_events: traqlyte_store::LateEvents::Reconcile,
        semantic_scan_every_ms: Some(1_000),
        ..ServerConfig::default()
    };
    let app = spawn_app_with(backend, config).await;
    assert_eq!(feed(&app, 1).await, 10);
    let mut scans = Value::Null;
    for _ in 0..100 {
        let listed = app.get("/ops/semantic-duplicates?contract=page_view").await;
        assert_eq!(listed.status, StatusCode::OK, "{}", listed.body);
        scans = listed.body["scans"].clone();
        if scans[0]["events"] == 10 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        scans[0]["events"], 10,
        "no periodic scan saw the events: {scans}"
    );
    assert_eq!(scans[0]["findings"][0]["pointer"], "/emitted_at");
    assert_eq!(scans[0]["findings"][0]["groups"], 3);

    // Another tenant sees none of it.
    let other = app.other_tenant_key().await;
    let theirs = app
        .send(
            app.client
                .get(app.url("/ops/semantic-duplicates"))
                .bearer_auth(&other),
        )
        .await;
    assert_eq!(theirs.status, StatusCode::OK);
    assert_eq!(theirs.body["scans"], json!([]));
}

/// Identity `/path/0` and `/path/2`, transport `/path/1`: two events that differ only at
/// `/path/2`, so only `/path/2` is a suspect (its removal groups them). Scanning
/// `/path/0` removes it and the transport pointer; removed in the listed order,
/// `/path/0` first, the second removal took the element that had been `/path/2`, grouped
/// the two events and named `/path/0` too, wrongly.
async fn array_elements_are_removed_later_index_first(backend: Backend) {
    let app = spawn_app(backend).await;
    let contract = json!({"name": "page_view", "version": 1,
        "fields": [{"pointer": "/path/0", "required": true}, {"pointer": "/path/2", "required": true}],
        "transport": ["/path/1"]});
    app.register_contract(&contract).await;
    for last in ["r1", "r2"] {
        let event = json!({"path": ["p", "t", last]});
        let answer = app.post_json("/events/page_view", &event).await;
        assert_eq!(answer.body["status"], "inserted", "{}", answer.body);
    }
    let scan = scan_cli(&app, 1, &[]);
    assert_eq!(scan["events"], 2, "{scan}");
    let named = suspects(&scan);
    assert_eq!(named, [&json!("/path/2")], "{scan}");
}

/// The periodic scan visits tenants in id order. A tenant whose stored contracts no longer
/// parse is logged and skipped: the tenants after it are still scanned (the pass used to
/// end at it). The first tenant in id order is the broken one here.
async fn a_tenant_whose_contracts_cannot_be_read_does_not_stop_the_scan_of_the_others(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    let mut tenants = Vec::new();
    for name in ["scan a", "scan b", "scan c"] {
        let (tenant, key) = app
            .store
            .create_tenant(&crate::helpers::tenant_name(name))
            .await
            .expect("tenant");
        let answer = app
            .send(
                app.client
                    .post(app.url("/contracts"))
                    .bearer_auth(key.expose())
                    .json(&page_view_contract(2)),
            )
            .await;
        assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
        tenants.push((tenant, key.expose().to_string()));
    }
    tenants.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
    let broken = tenants[0].0.as_str().to_string();
    app.execute_sql(&format!(
        "UPDATE contracts SET definition = 'not a contract' WHERE tenant_id = '{broken}'"
    ))
    .await;
    let pass = traqlyte_server::semantic_scan_all(&app.store, 0, &mut Default::default()).await;
    assert!(
        pass.is_err(),
        "the broken tenant's error is the pass's answer"
    );
    for (_, key) in &tenants[1..] {
        let listed = app
            .send(
                app.client
                    .get(app.url("/ops/semantic-duplicates"))
                    .bearer_auth(key),
            )
            .await;
        let scans = listed.body["scans"].as_array().map(Vec::len);
        assert_eq!(scans, Some(1), "{}", listed.body);
    }
}

/// An event holding an array where a pointer names a key (`"user": [1]` against
/// `/user/id`) is accepted (the field is absent). PostgreSQL's `#-` fails on it, and the
/// scan of the contract version failed on every pass; it now goes on, leaving that event
/// as it is, and still finds the emit time in the identity.
async fn an_array_where_a_pointer_names_a_key_does_not_fail_the_scan(backend: Backend) {
    let app = spawn_app(backend).await;
    let contract = json!({"name": "page_view", "version": 1,
        "fields": [{"pointer": "/user/id"}, {"pointer": "/page", "required": true},
                   {"pointer": "/emitted_at"}]});
    app.register_contract(&contract).await;
    let events = [
        json!({"user": [1], "page": "/odd", "emitted_at": "1"}),
        json!({"user": {"id": 7}, "page": "/home", "emitted_at": "1"}),
        json!({"user": {"id": 7}, "page": "/home", "emitted_at": "2"}),
    ];
    for event in &events {
        let answer = app.post_json("/events/page_view", event).await;
        assert_eq!(answer.body["status"], "inserted", "{}", answer.body);
    }
    let scan = scan_cli(&app, 1, &[]);
    assert_eq!(scan["events"], 3, "{scan}");
    let named = suspects(&scan);
    assert_eq!(named, [&json!("/emitted_at")], "{scan}");
}

/// An identity field under an array element (`/items/0/sku`): SQLite's JSON path must
/// take `0` as an index there, not only as a key, or the field is never removed and the
/// scan gives a false all-clear (it did, on SQLite only).
async fn a_field_inside_an_array_element_is_named_on_both_backends(backend: Backend) {
    let app = spawn_app(backend).await;
    let contract = json!({"name": "page_view", "version": 1,
        "fields": [{"pointer": "/user_id", "required": true}, {"pointer": "/items/0/sku"}]});
    app.register_contract(&contract).await;
    for sku in ["a-1", "a-2"] {
        let event = json!({"user_id": "u1", "items": [{"sku": sku, "qty": 1}]});
        let answer = app.post_json("/events/page_view", &event).await;
        assert_eq!(answer.body["status"], "inserted", "{}", answer.body);
    }
    let scan = scan_cli(&app, 1, &[]);
    assert_eq!(scan["events"], 2, "{scan}");
    assert_eq!(suspects(&scan), [&json!("/items/0/sku")], "{scan}");
}

//! Hostile text and numbers (issue 8): NUL in any stored string or parameter, names and
//! keys at and over the PostgreSQL B-tree entry limit, and outcome values near
//! `f64::MAX`. Every backend answers the same 4xx, writes nothing for a refused request,
//! and a batch refuses only its bad items.

use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use sqlx::Connection;

use crate::helpers::{checkout_contract, checkout_event, spawn_app, Backend, TestApp};

crate::on_both_backends!(
    nul_and_invisible_characters_in_campaign_text_are_refused_naming_the_field,
    nul_in_assignment_and_outcome_fields_is_refused_before_any_lookup,
    a_batch_rejects_only_its_items_with_nul_or_out_of_range_values,
    nul_in_path_segments_and_query_values_is_a_400_naming_the_parameter,
    the_ui_answers_a_nul_in_its_path_with_an_html_400,
    nul_in_event_payloads_is_stored_but_not_in_a_supersession_reason,
    lineage_names_over_the_limit_or_with_nul_are_refused_and_names_at_it_are_stored,
    indexed_client_keys_at_their_limits_are_stored_and_one_more_is_refused,
    outcome_values_beyond_the_bound_are_refused_and_sums_at_it_stay_finite,
    a_report_over_out_of_range_values_stored_before_the_bound_answers_without_them,
    a_report_over_a_unit_counted_billions_of_times_answers,
);

/// `len` ASCII hex characters with no repeated substrings to speak of, so PostgreSQL
/// cannot compress an index entry built from them below the B-tree limit.
fn noise(seed: &str, len: usize) -> String {
    let mut out = String::new();
    let mut block = traqlyte_identity::sha256_hex(seed.as_bytes());
    while out.len() < len {
        out.push_str(&block);
        block = traqlyte_identity::sha256_hex(block.as_bytes());
    }
    out.truncate(len);
    out
}

/// `chars` characters of four UTF-8 bytes each, as incompressible as [`noise`].
fn wide_noise(seed: &str, chars: usize) -> String {
    noise(seed, chars * 4)
        .as_bytes()
        .chunks(4)
        .map(|c| {
            let n = u32::from_str_radix(std::str::from_utf8(c).unwrap_or("0"), 16).unwrap_or(0);
            char::from_u32(0x10000 + n).unwrap_or('\u{10000}')
        })
        .collect()
}

fn in_window() -> String {
    traqlyte_identity::format_rfc3339_micros(traqlyte_store::now_us() + 60_000_000)
}

async fn published_campaign(app: &TestApp, key: &str) -> String {
    let body = json!({
        "key": key, "name": "Checkout",
        "arms": [{"key": "control", "weight": 1}, {"key": "treatment", "weight": 1}],
        "metrics": [{"name": "revenue", "kind": "sum", "window_hours": 168}]
    });
    crate::experiments::create_published(app, &body).await
}

async fn assignment(app: &TestApp, campaign: &str, unit: &str) -> String {
    assign(app, campaign, unit).await.0
}

/// `(assignment_id, arm)` of a unit (sticky: asking again answers the same).
async fn assign(app: &TestApp, campaign: &str, unit: &str) -> (String, String) {
    let answer = app
        .post_json(
            "/assignments",
            &json!({"campaign_id": campaign, "unit_id": unit}),
        )
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let text = |key: &str| answer.body[key].as_str().expect(key).to_string();
    (text("assignment_id"), text("arm"))
}

fn outcome(assignment: &str, key: &str, value: Value) -> Value {
    json!({"assignment_id": assignment, "dedupe_key": key, "metric": "revenue", "value": value, "occurred_at": in_window()})
}

/// `(stored events, value per unit)` of the sum metric in `arm`, by event time.
async fn revenue(app: &TestApp, campaign: &str, arm: &str) -> (Value, Value) {
    let report = app.get(&format!("/campaigns/{campaign}/report")).await;
    assert_eq!(report.status, StatusCode::OK, "{}", report.body);
    let arms = report.body["arms"].as_array().expect("arms");
    let found = arms.iter().find(|a| a["key"] == arm).expect("arm");
    let metric = &found["metrics"]["revenue"];
    (metric["stored_events"].clone(), metric["value"].clone())
}

fn assert_refused(answer: &crate::helpers::Answer, status: StatusCode, code: &str, field: &str) {
    assert_eq!(answer.status, status, "{}", answer.body);
    assert_eq!(answer.code(), code, "{}", answer.body);
    assert_eq!(answer.body["error"]["field"], field, "{}", answer.body);
}

async fn nul_and_invisible_characters_in_campaign_text_are_refused_naming_the_field(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    let mut body = json!({
        "key": "k", "name": "Check\u{0}out",
        "arms": [{"key": "control", "weight": 1}, {"key": "treatment", "weight": 1}],
        "metrics": []
    });
    // A NUL; and a right-to-left override (or any invisible character), which would make
    // the name, and the campaign page around it, read as something else.
    for hidden in [
        "Check\u{0}out",
        "Checkout \u{202E}1v",
        "Check\u{200B}out",
        "Check\nout",
    ] {
        body["name"] = json!(hidden);
        let refused = app.post_json("/campaigns", &body).await;
        assert_refused(
            &refused,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_campaign",
            "name",
        );
        let message = refused.body["error"]["message"]
            .as_str()
            .unwrap_or_default();
        assert!(
            hidden.contains('\u{0}') || message.contains("invisible"),
            "{}",
            refused.body
        );
    }
    body["name"] = json!("Checkout");
    body["arms"][1]["key"] = json!("treat\u{0}ment");
    let refused = app.post_json("/campaigns", &body).await;
    assert_refused(
        &refused,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_campaign",
        "arms[1].key",
    );
    // Nothing was written: the key is still free.
    let id = published_campaign(&app, "k").await;

    let path = format!("/campaigns/{id}/publish");
    let refused = app.post_json(&path, &json!({"note": "\u{0}"})).await;
    assert_refused(
        &refused,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_campaign",
        "note",
    );
    let versions = app.get(&format!("/campaigns/{id}/versions")).await;
    assert_eq!(versions.body["versions"].as_array().map(Vec::len), Some(1));
}

async fn nul_in_assignment_and_outcome_fields_is_refused_before_any_lookup(backend: Backend) {
    let app = spawn_app(backend).await;
    let campaign = published_campaign(&app, "k").await;
    for (body, field) in [
        (
            json!({"campaign_id": "\u{0}", "unit_id": "u"}),
            "campaign_id",
        ),
        (
            json!({"campaign_id": campaign, "unit_id": "u\u{0}"}),
            "unit_id",
        ),
    ] {
        let refused = app.post_json("/assignments", &body).await;
        assert_refused(
            &refused,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_assignment",
            field,
        );
    }
    let unit = assignment(&app, &campaign, "u").await;
    let good = outcome(&unit, "order-1", json!(10.0));
    for field in ["assignment_id", "dedupe_key", "metric", "occurred_at"] {
        let mut bad = good.clone();
        bad[field] = json!(format!("{}\u{0}", bad[field].as_str().unwrap_or("")));
        let refused = app.post_json("/outcome", &bad).await;
        assert_refused(
            &refused,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_outcome",
            field,
        );
    }
    for arm in ["control", "treatment"] {
        assert_eq!(revenue(&app, &campaign, arm).await.0, json!(0), "{arm}");
    }
    let stored = app.post_json("/outcome", &good).await;
    assert_eq!(stored.status, StatusCode::OK, "{}", stored.body);
}

async fn a_batch_rejects_only_its_items_with_nul_or_out_of_range_values(backend: Backend) {
    let app = spawn_app(backend).await;
    let campaign = published_campaign(&app, "k").await;
    let unit = assignment(&app, &campaign, "u").await;
    let batch = json!([
        outcome(&unit, "order-1", json!(5.0)),
        outcome(&unit, "order-\u{0}", json!(5.0)),
        outcome(&unit, "order-3", json!(1.7e308)),
        outcome(&unit, "order-4", json!(-1e16)),
        outcome("\u{0}", "order-5", json!(5.0)),
        outcome(&unit, "order-6", json!(7.0)),
    ]);
    let answer = app.post_json("/outcomes/batch", &batch).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let results = answer.body["results"].as_array().expect("results");
    let statuses: Vec<&str> = results
        .iter()
        .map(|r| r["status"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        statuses,
        ["inserted", "rejected", "rejected", "rejected", "rejected", "inserted"]
    );
    for (index, field) in [
        (1, "dedupe_key"),
        (2, "value"),
        (3, "value"),
        (4, "assignment_id"),
    ] {
        assert_eq!(
            results[index]["error"]["code"], "invalid_outcome",
            "{}",
            answer.body
        );
        assert_eq!(results[index]["error"]["field"], field, "{}", answer.body);
    }
    assert_eq!(
        (
            answer.body["inserted"].as_u64(),
            answer.body["rejected"].as_u64()
        ),
        (Some(2), Some(4))
    );
    let arm_of_unit = assign(&app, &campaign, "u").await.1;
    assert_eq!(
        revenue(&app, &campaign, &arm_of_unit).await,
        (json!(2), json!(12.0))
    );
}

async fn nul_in_path_segments_and_query_values_is_a_400_naming_the_parameter(backend: Backend) {
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    let cases = [
        ("/campaigns/%00", "id"),
        ("/campaigns/a%00b/report", "id"),
        ("/campaigns/%00/versions", "id"),
        ("/contracts/%00", "name"),
        ("/contracts/checkout_completed?version=%00", "version"),
        ("/events/checkout%00/abc", "contract"),
        ("/events/checkout_completed/%00", "event_id"),
        ("/api/v1/lineage?nodeId=dataset:db:%00", "nodeId"),
        ("/lineage/ancestors?node=dataset:db%00:t", "node"),
        ("/lineage/descendants?depth=1&node=%00", "node"),
    ];
    for (path, field) in cases {
        let answer = app.get(path).await;
        assert_refused(&answer, StatusCode::BAD_REQUEST, "invalid_parameter", field);
    }
    // A query value of the wrong type is named the same way, not a bare `bad_request`.
    for (path, field) in [
        ("/contracts/checkout_completed?version=abc", "version"),
        ("/ops/collisions?limit=x", "limit"),
        // Given twice, or not UTF-8 once percent-decoded.
        (
            "/contracts/checkout_completed?version=1&version=2",
            "version",
        ),
        ("/contracts/%FF", "name"),
        ("/events/checkout_completed/%C3%28", "event_id"),
        // A query value not UTF-8 once decoded was read with U+FFFD in its place, and the
        // walk ran on a name nobody sent.
        ("/lineage/ancestors?node=dataset:db:%FF", "node"),
        ("/ops/collisions?contract=a%C3%28b", "contract"),
    ] {
        let answer = app.get(path).await;
        assert_refused(&answer, StatusCode::BAD_REQUEST, "invalid_parameter", field);
    }
    let typed = app
        .post_json(
            "/events/checkout_completed?version=two",
            &checkout_event("o-1"),
        )
        .await;
    assert_refused(
        &typed,
        StatusCode::BAD_REQUEST,
        "invalid_parameter",
        "version",
    );
    // A version no contract can have is a bad parameter, not a contract to register
    // (`0`, `2147483648` were `404 contract_not_found`); a misspelt or unknown parameter
    // is refused, not ignored (the event went to the latest version, another id).
    for (query, field, says) in [
        ("version=0", "version", "an integer from 1 to 2147483647"),
        ("version=-1", "version", "an integer from 1 to 2147483647"),
        (
            "version=2147483648",
            "version",
            "an integer from 1 to 2147483647",
        ),
        (
            "verison=1",
            "verison",
            "no query parameter verison (it takes version)",
        ),
        ("Version=1", "Version", "no query parameter Version"),
        // A name not of a parameter's shape is not echoed.
        (
            "ver-sion=1",
            "query",
            "no such query parameter (it takes version)",
        ),
        ("=1", "query", "no such query parameter (it takes version)"),
    ] {
        for answer in [
            app.post_json(
                &format!("/events/checkout_completed?{query}"),
                &checkout_event("o-1"),
            )
            .await,
            app.post_json(
                &format!("/events/checkout_completed/batch?{query}"),
                &json!([checkout_event("o-1")]),
            )
            .await,
            app.get(&format!("/contracts/checkout_completed?{query}"))
                .await,
        ] {
            assert_refused(&answer, StatusCode::BAD_REQUEST, "invalid_parameter", field);
            let message = answer.body["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains(says), "{query}: {message}");
        }
    }
    let posted = app
        .post_json("/events/checkout_completed%00", &checkout_event("o-1"))
        .await;
    assert_refused(
        &posted,
        StatusCode::BAD_REQUEST,
        "invalid_parameter",
        "contract",
    );
    let publish = app.post_raw("/campaigns/%00/publish", "").await;
    assert_refused(&publish, StatusCode::BAD_REQUEST, "invalid_parameter", "id");
    assert_eq!(app.checkout_stats().await, (0, 0, 0));
}

async fn the_ui_answers_a_nul_in_its_path_with_an_html_400(backend: Backend) {
    let app = spawn_app(backend).await;
    let campaign = published_campaign(&app, "k").await;
    let token = app.post_json("/ui/tokens", &json!({})).await;
    let login_path = token.body["login_path"].as_str().expect("login_path");
    let client = Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let session = crate::ui::link_session(&app, &client, login_path).await;
    for path in [
        format!("/ui/campaigns/{campaign}%00"),
        "/ui/login?next=%00".into(),
    ] {
        let page = client
            .get(app.url(&path))
            .header("cookie", &session)
            .send()
            .await
            .expect("page");
        assert_eq!(page.status(), StatusCode::BAD_REQUEST, "{path}");
        let content_type = page.headers()["content-type"].to_str().unwrap_or("");
        assert!(
            content_type.starts_with("text/html"),
            "{path}: {content_type}"
        );
    }
    let fine = client
        .get(app.url(&format!("/ui/campaigns/{campaign}")))
        .header("cookie", &session)
        .send()
        .await
        .expect("page");
    assert_eq!(fine.status(), StatusCode::OK);
}

async fn nul_in_event_payloads_is_stored_but_not_in_a_supersession_reason(backend: Backend) {
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    let mut event = checkout_event("order\u{0}1");
    event["note"] = json!("a\u{0}b");
    let stored = app.post_event(&event).await;
    assert_eq!(stored.status, StatusCode::OK, "{}", stored.body);
    let id = stored.body["event_id"].as_str().expect("id").to_string();
    let read = app.get(&format!("/events/checkout_completed/{id}")).await;
    assert_eq!(read.body["payload"], event, "{}", read.body);
    assert_eq!(app.post_event(&event).await.body["status"], "duplicate");

    let path = format!("/events/checkout_completed/{id}/supersessions");
    event["note"] = json!("corrected");
    let refused = app
        .post_json(&path, &json!({"event": event, "reason": "typo\u{0}"}))
        .await;
    assert_refused(
        &refused,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_supersession",
        "reason",
    );
    let read = app.get(&format!("/events/checkout_completed/{id}")).await;
    assert_eq!(read.body["supersessions"].as_array().map(Vec::len), Some(0));
    let accepted = app
        .post_json(&path, &json!({"event": event, "reason": "typo"}))
        .await;
    assert_eq!(accepted.status, StatusCode::CREATED, "{}", accepted.body);
    // The correction's own payload keeps its NUL, exactly as sent.
    let read = app.get(&format!("/events/checkout_completed/{id}")).await;
    assert_eq!(read.body["current_payload"], event, "{}", read.body);

    // A contract's description is stored inside its canonical JSON: NUL is escaped there.
    let mut contract = checkout_contract();
    contract["name"] = json!("described");
    contract["description"] = json!("with \u{0} inside");
    app.register_contract(&contract).await;
    let shown = app.get("/contracts/described").await;
    assert_eq!(
        shown.body["description"], "with \u{0} inside",
        "{}",
        shown.body
    );
}

fn lineage_event(job_namespace: &str, job: &str, input: Value) -> Value {
    json!({
        "eventType": "COMPLETE", "eventTime": "2026-11-29T03:00:00Z",
        "producer": "https://example.com/test", "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
        "run": {"runId": "00000000-0000-4000-8000-000000000001"},
        "job": {"namespace": job_namespace, "name": job},
        "inputs": [input], "outputs": []
    })
}

async fn lineage_names_over_the_limit_or_with_nul_are_refused_and_names_at_it_are_stored(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    let (ns, name, version) = (noise("ns", 1_024), noise("name", 1_024), noise("v", 256));
    let dataset = |ns: &str, name: &str, version: &str| json!({"namespace": ns, "name": name, "facets": {"version": {"datasetVersion": version}}});
    let cases = [
        (
            lineage_event(&format!("{ns}x"), "job", dataset("db", "t", "1")),
            "job.namespace",
        ),
        (
            lineage_event("ns", &format!("{name}x"), dataset("db", "t", "1")),
            "job.name",
        ),
        (
            lineage_event("ns", "job", dataset(&format!("{ns}x"), "t", "1")),
            "inputs[0].namespace",
        ),
        (
            lineage_event("ns", "job", dataset("db", &noise("big", 2_700), "1")),
            "inputs[0].name",
        ),
        (
            lineage_event("ns", "job", dataset("db", "t", &format!("{version}x"))),
            "inputs[0].facets.version.datasetVersion",
        ),
        (
            lineage_event("n\u{0}s", "job", dataset("db", "t", "1")),
            "job.namespace",
        ),
        (
            lineage_event("ns", "j\u{0}", dataset("db", "t", "1")),
            "job.name",
        ),
        (
            lineage_event("ns", "job", dataset("\u{0}", "t", "1")),
            "inputs[0].namespace",
        ),
        (
            lineage_event("ns", "job", dataset("db", "t\u{0}", "1")),
            "inputs[0].name",
        ),
        (
            lineage_event("ns", "job", dataset("db", "t", "\u{0}")),
            "inputs[0].facets.version.datasetVersion",
        ),
    ];
    for (event, field) in cases {
        let refused = app.post_json("/api/v1/lineage", &event).await;
        assert_refused(&refused, StatusCode::BAD_REQUEST, "invalid_value", field);
    }
    let stats = app.get("/lineage/stats").await;
    assert_eq!(stats.body, json!({"runs": 0, "datasets": 0, "edges": 0}));

    // Everything at its limit at once: the widest key of every graph table.
    let widest = lineage_event(&ns, &name, dataset(&ns, &name, &version));
    let stored = app.post_json("/api/v1/lineage", &widest).await;
    assert_eq!(stored.status, StatusCode::CREATED, "{}", stored.body);
    let stats = app.get("/lineage/stats").await;
    assert_eq!(stats.body, json!({"runs": 1, "datasets": 1, "edges": 1}));
    let again = app.post_json("/api/v1/lineage", &widest).await;
    assert_eq!(again.body["status"], "duplicate", "{}", again.body);
}

async fn indexed_client_keys_at_their_limits_are_stored_and_one_more_is_refused(backend: Backend) {
    let app = spawn_app(backend).await;
    // Campaign key: 128 characters.
    let campaign = published_campaign(&app, &noise("key", 128)).await;
    let body = json!({"key": noise("key2", 129), "name": "n", "arms": [{"key": "a", "weight": 1}, {"key": "b", "weight": 1}], "metrics": []});
    let refused = app.post_json("/campaigns", &body).await;
    assert_refused(
        &refused,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_campaign",
        "key",
    );

    // Unit id: 256 bytes (of four-byte characters).
    let unit = assignment(&app, &campaign, &wide_noise("unit", 64)).await;
    let refused = app
        .post_json(
            "/assignments",
            &json!({"campaign_id": campaign, "unit_id": format!("{}x", wide_noise("unit", 64))}),
        )
        .await;
    assert_refused(
        &refused,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_assignment",
        "unit_id",
    );

    // Dedupe key: 512 characters, 2,048 bytes.
    let key = wide_noise("dedupe", 512);
    let stored = app
        .post_json("/outcome", &outcome(&unit, &key, json!(1.0)))
        .await;
    assert_eq!(stored.status, StatusCode::OK, "{}", stored.body);
    let refused = app
        .post_json("/outcome", &outcome(&unit, &format!("{key}x"), json!(1.0)))
        .await;
    assert_refused(
        &refused,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_outcome",
        "dedupe_key",
    );

    // Contract name: 128 bytes.
    let mut contract = checkout_contract();
    contract["name"] = json!(noise("contract", 128));
    app.register_contract(&contract).await;
    contract["name"] = json!(noise("contract", 129));
    let refused = app.post_json("/contracts", &contract).await;
    assert_refused(
        &refused,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_contract",
        "name",
    );

    // Idempotency key: 255 bytes.
    let send = |key: String| {
        let body = json!({"key": noise(&key, 8), "name": "n", "arms": [{"key": "a", "weight": 1}, {"key": "b", "weight": 1}], "metrics": []});
        app.send(
            app.client
                .post(app.url("/campaigns"))
                .bearer_auth(&app.key)
                .header("x-tl-idempotency-key", key)
                .body(body.to_string()),
        )
    };
    let created = send(noise("idem", 255)).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let refused = send(noise("idem", 256)).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.body);
    assert_eq!(refused.code(), "invalid_idempotency_key");
}

async fn outcome_values_beyond_the_bound_are_refused_and_sums_at_it_stay_finite(backend: Backend) {
    let app = spawn_app(backend).await;
    let campaign = published_campaign(&app, "k").await;
    let unit = assignment(&app, &campaign, "u").await;
    let arm = assign(&app, &campaign, "u").await.1;
    for value in [
        json!(1.7e308),
        json!(-1.7e308),
        json!(1.000_000_000_000_1e15),
        json!(-2e15),
    ] {
        let refused = app
            .post_json("/outcome", &outcome(&unit, "big", value))
            .await;
        assert_refused(
            &refused,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_outcome",
            "value",
        );
    }
    assert_eq!(revenue(&app, &campaign, &arm).await.0, json!(0));
    let batch: Vec<Value> = (0..200)
        .map(|i| outcome(&unit, &format!("order-{i}"), json!(1e15)))
        .collect();
    let answer = app.post_json("/outcomes/batch", &Value::Array(batch)).await;
    assert_eq!(answer.body["inserted"], 200, "{}", answer.body);
    let negative = app
        .post_json("/outcome", &outcome(&unit, "refund", json!(-1e15)))
        .await;
    assert_eq!(negative.status, StatusCode::OK, "{}", negative.body);
    assert_eq!(
        revenue(&app, &campaign, &arm).await,
        (json!(201), json!(199e15))
    );
}

/// Rewrites one unit's stored sums as a database written before values were bounded
/// could hold them.
async fn store_legacy_sum(app: &TestApp, backend: Backend, value: f64) {
    rewrite_unit_metrics(app, backend, &format!("ev_v = {value:e}, ar_v = {value:e}")).await;
}

/// Sets `columns` (an SQL `SET` list) on the one unit's row of stored sums.
async fn rewrite_unit_metrics(app: &TestApp, backend: Backend, columns: &str) {
    // The outcome's appended sums become its unit's row first.
    app.store.fold_unit_metrics().await.expect("fold");
    let sql = format!("UPDATE unit_metrics SET {columns}");
    let done = match backend {
        Backend::Postgres => {
            let mut conn = sqlx::PgConnection::connect(app.database_url())
                .await
                .expect("connect");
            sqlx::query(&sql)
                .execute(&mut conn)
                .await
                .expect("update")
                .rows_affected()
        }
        Backend::Sqlite => {
            let mut conn = sqlx::SqliteConnection::connect(app.database_url())
                .await
                .expect("connect");
            sqlx::query(&sql)
                .execute(&mut conn)
                .await
                .expect("update")
                .rows_affected()
        }
    };
    assert_eq!(done, 1);
}

/// An app with a published campaign whose unit `u` has one revenue outcome of 3: the
/// app, the campaign and the unit's assignment.
async fn one_unit_with_one_outcome(backend: Backend) -> (TestApp, String, String) {
    let app = spawn_app(backend).await;
    let campaign = published_campaign(&app, "k").await;
    let unit = assignment(&app, &campaign, "u").await;
    let stored = app
        .post_json("/outcome", &outcome(&unit, "o-1", json!(3.0)))
        .await;
    assert_eq!(stored.status, StatusCode::OK, "{}", stored.body);
    (app, campaign, unit)
}

/// A count's square overflowed `BIGINT` on PostgreSQL past about 3.04 billion deliveries
/// of one unit (the report squared the counts before summing them as doubles): the
/// report failed with a 500 for good.
async fn a_report_over_a_unit_counted_billions_of_times_answers(backend: Backend) {
    let (app, campaign, _) = one_unit_with_one_outcome(backend).await;
    let billions = 4_000_000_000_i64;
    rewrite_unit_metrics(
        &app,
        backend,
        &format!("ev_n = {billions}, ev_dn = {billions}, ar_n = {billions}, ar_dn = {billions}"),
    )
    .await;
    let arm = assign(&app, &campaign, "u").await.1;
    let report = app.get(&format!("/campaigns/{campaign}/report")).await;
    assert_eq!(report.status, StatusCode::OK, "{}", report.body);
    let metric = crate::experiments::metric(&report.body, &arm, "revenue");
    assert_eq!(metric["stored_events"], billions, "{metric}");
}

async fn a_report_over_out_of_range_values_stored_before_the_bound_answers_without_them(
    backend: Backend,
) {
    let (app, campaign, unit) = one_unit_with_one_outcome(backend).await;
    store_legacy_sum(&app, backend, 1.7e308).await;
    let arm = assign(&app, &campaign, "u").await.1;
    let report = app.get(&format!("/campaigns/{campaign}/report")).await;
    assert_eq!(report.status, StatusCode::OK, "{}", report.body);
    let arms = report.body["arms"].as_array().expect("arms");
    assert_eq!(arms.len(), 2, "{}", report.body);
    let metric = crate::experiments::metric(&report.body, &arm, "revenue");
    assert_eq!(metric["stored_events"], 1, "{metric}");
    assert_eq!(metric["value"], Value::Null, "{metric}");
    assert_eq!(metric["value_ci"], Value::Null, "{metric}");
    for entry in arms {
        let metric = &entry["metrics"]["revenue"];
        assert!(metric.is_object(), "{}", report.body);
        assert_eq!(metric["lift"], Value::Null, "{metric}");
    }
    // A new bounded outcome for the same unit is still accepted.
    let more = app
        .post_json("/outcome", &outcome(&unit, "o-2", json!(1e15)))
        .await;
    assert_eq!(more.status, StatusCode::OK, "{}", more.body);
}

//! Contract registration: immutable (name, version), clear 422s for invalid contracts.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::{checkout_contract, checkout_event, spawn_app, Backend};

crate::on_both_backends!(
    registering_the_same_contract_again_is_a_no_op_and_a_different_one_is_a_conflict,
    invalid_contracts_are_refused_naming_the_field,
    events_use_the_latest_version_unless_one_is_named,
    a_stored_contract_stays_readable_under_rules_added_after_it,
    contracts_are_listed_in_pages,
);

async fn registering_the_same_contract_again_is_a_no_op_and_a_different_one_is_a_conflict(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    app.register_contract(&checkout_contract()).await;
    // Key order and whitespace do not make a different contract: the same definition
    // written by hand with its keys (and one field's keys) in another order.
    let reordered = r#"{
        "occurred_at": "/occurred_at",
        "transport": ["/sent_at", "/attempt", "/host"],
        "fields": [
            {"type": "string", "required": true, "pointer": "/merchant_id"},
            {"pointer": "/order_id", "required": true, "type": "string"},
            {"precision": 2, "pointer": "/amount"},
            {"pointer": "/items", "array": "set"},
            {"pointer": "/params"}
        ],
        "version": 1, "name": "checkout_completed"
    }"#;
    assert_eq!(
        serde_json::from_str::<Value>(reordered).expect("json"),
        checkout_contract(),
        "the same definition"
    );
    assert_eq!(
        app.post_raw("/contracts", reordered).await.status,
        StatusCode::OK
    );
    let mut changed = checkout_contract();
    changed["fields"][2]["precision"] = json!(3);
    let answer = app.post_json("/contracts", &changed).await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert_eq!(answer.code(), "contract_conflict");
    let message = answer.body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("it differs at /fields/2/precision)"),
        "the conflict names what differs: {}",
        answer.body
    );
    changed["fields"][3]["array"] = json!("ordered");
    changed["transport"] = json!(["/sent_at"]);
    let answer = app.post_json("/contracts", &changed).await;
    let message = answer.body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(
            "it differs at /fields/2/precision, /fields/3/array, /transport/1, /transport/2)"
        ),
        "{}",
        answer.body
    );
    let shown = app.get("/contracts/checkout_completed").await;
    assert_eq!(
        shown.body["fields"][2]["precision"], 2,
        "the registered contract is unchanged"
    );
    let listed = app.get("/contracts").await;
    assert_eq!(listed.body["contracts"].as_array().map(Vec::len), Some(1));
}

async fn invalid_contracts_are_refused_naming_the_field(backend: Backend) {
    let app = spawn_app(backend).await;
    let mut cases = Vec::new();
    let mut c = checkout_contract();
    c.as_object_mut().expect("object").remove("name");
    cases.push((c, "name"));
    let mut c = checkout_contract();
    c["name"] = json!("has spaces");
    cases.push((c, "name"));
    let mut c = checkout_contract();
    c["version"] = json!(0);
    cases.push((c, "version"));
    let mut c = checkout_contract();
    c["fields"][1]["pointer"] = json!("order_id");
    cases.push((c, "fields[1].pointer"));
    let mut c = checkout_contract();
    c["transport"] = json!(["/params/currency"]);
    cases.push((c, "transport[0]"));
    let mut c = checkout_contract();
    c["fields"][3]["precision"] = json!(2);
    cases.push((c, "fields[3].precision"));
    let mut c = checkout_contract();
    c["fields"] = json!([]);
    cases.push((c, "fields"));
    let mut c = checkout_contract();
    c["colour"] = json!("blue");
    cases.push((c, "colour"));
    // Serde's own refusals name the field by its path too: a missing, misspelt or
    // mistyped field inside the list of fields, and a mistyped top-level field.
    let mut c = checkout_contract();
    c["fields"][1]
        .as_object_mut()
        .expect("object")
        .remove("pointer");
    cases.push((c, "fields[1].pointer"));
    let mut c = checkout_contract();
    c["fields"][1]["requird"] = json!(true);
    cases.push((c, "fields[1].requird"));
    let mut c = checkout_contract();
    c["fields"][2]["type"] = json!("text");
    cases.push((c, "fields[2].type"));
    let mut c = checkout_contract();
    c["version"] = json!("1");
    cases.push((c, "version"));
    let mut c = checkout_contract();
    c["fields"] = json!({});
    cases.push((c, "fields"));
    // An array item's transport pointer listed twice removed the item after it too, so
    // a change to that item was a retry (a review).
    let mut c = checkout_contract();
    c["transport"] = json!(["/hops/0", "/hops/0"]);
    cases.push((c, "transport[1]"));
    for (contract, field) in cases {
        let answer = app.post_json("/contracts", &contract).await;
        assert_eq!(
            answer.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{field}: {}",
            answer.body
        );
        assert_eq!(answer.code(), "invalid_contract");
        assert_eq!(answer.body["error"]["field"], field, "{}", answer.body);
    }
    assert_eq!(app.get("/contracts").await.body["contracts"], json!([]));
}

async fn events_use_the_latest_version_unless_one_is_named(backend: Backend) {
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    let mut v2 = checkout_contract();
    v2["version"] = json!(2);
    v2["fields"]
        .as_array_mut()
        .expect("fields")
        .push(json!({"pointer": "/note"}));
    app.register_contract(&v2).await;
    let event = checkout_event("order_1");
    let latest = app.post_event(&event).await;
    let first = app
        .post_json("/events/checkout_completed?version=1", &event)
        .await;
    assert_eq!(
        (
            latest.body["status"].as_str(),
            first.body["status"].as_str()
        ),
        (Some("inserted"), Some("inserted"))
    );
    assert_ne!(
        latest.body["event_id"], first.body["event_id"],
        "the version is part of the id"
    );
    let stored = app
        .get(&format!(
            "/events/checkout_completed/{}",
            first.body["event_id"].as_str().expect("id")
        ))
        .await;
    assert_eq!(stored.body["contract_version"], 1);
    assert_eq!(
        app.get("/contracts/checkout_completed").await.body["version"],
        2
    );
}

/// A contract registered before an authoring rule existed (here: no field inside a set,
/// and pointers that can address something) stays readable: listed, shown, and its
/// events identified and deduplicated as before, never a 500.
async fn a_stored_contract_stays_readable_under_rules_added_after_it(backend: Backend) {
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    let legacy = json!({"name": "legacy", "version": 1, "fields": [
        {"pointer": "/order_id", "required": true},
        {"pointer": "/items", "array": "set"},
        {"pointer": "/items/0"},
        {"pointer": "/tags/-"}
    ]});
    let refused = app.post_json("/contracts", &legacy).await;
    assert_eq!(
        refused.code(),
        "invalid_contract",
        "today's rules refuse it"
    );
    // As an earlier build stored it, beside the tenant's other contract.
    app.execute_sql(&format!(
        "INSERT INTO contracts (tenant_id, name, version, definition, created_at_us)
         SELECT tenant_id, 'legacy', 1, '{legacy}', 0 FROM contracts WHERE name = 'checkout_completed'"
    ))
    .await;
    let listed = app.get("/contracts").await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.body);
    assert!(
        listed.body.to_string().contains("legacy"),
        "{}",
        listed.body
    );
    let shown = app.get("/contracts/legacy").await;
    assert_eq!(shown.status, StatusCode::OK, "{}", shown.body);
    assert_eq!(shown.body["fields"], legacy["fields"], "{}", shown.body);
    let event = json!({"order_id": "o-1", "items": ["b", "a"], "tags": ["x"]});
    let first = app.post_json("/events/legacy", &event).await;
    assert_eq!(first.body["status"], "inserted", "{}", first.body);
    let again = app.post_json("/events/legacy", &event).await;
    assert_eq!(again.body["status"], "duplicate", "{}", again.body);
    assert_eq!(again.body["event_id"], first.body["event_id"]);
    // Registered again unchanged, it is the no-op `200` it was, so that a deployment
    // registering its contracts at every start keeps starting after an upgrade (it was
    // `422`, a review); a new version of it meets today's rules.
    let registered = app.post_json("/contracts", &legacy).await;
    assert_eq!(registered.status, StatusCode::OK, "{}", registered.body);
    assert_eq!(registered.body["fields"], legacy["fields"]);
    let mut newer = legacy.clone();
    newer["version"] = json!(2);
    assert_eq!(
        app.post_json("/contracts", &newer).await.code(),
        "invalid_contract"
    );
}

/// `GET /contracts` pages by name then version: every version once across the pages, the
/// last page without `next_cursor`, a bad `limit` or `cursor` a `400` naming it.
async fn contracts_are_listed_in_pages(backend: Backend) {
    let app = spawn_app(backend).await;
    let mut expected = Vec::new();
    for name in ["b.orders", "a.clicks", "c.refunds"] {
        for version in 1..=2 {
            let contract = json!({"name": name, "version": version,
                "fields": [{"pointer": format!("/v{version}")}]});
            app.register_contract(&contract).await;
            expected.push(format!("{name}:{version}"));
        }
    }
    expected.sort();
    let whole = app.get("/contracts").await;
    assert!(whole.body.get("next_cursor").is_none(), "{}", whole.body);
    let names = |body: &Value| -> Vec<String> {
        body["contracts"]
            .as_array()
            .expect("contracts")
            .iter()
            .map(|c| format!("{}:{}", c["name"].as_str().unwrap_or("?"), c["version"]))
            .collect()
    };
    assert_eq!(names(&whole.body), expected);
    let mut paged = Vec::new();
    let mut path = "/contracts?limit=4".to_string();
    let mut pages = 0;
    loop {
        let page = app.get(&path).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        assert_eq!(page.body["builtin"].as_array().map(Vec::len), Some(2));
        pages += 1;
        paged.extend(names(&page.body));
        match page.body["next_cursor"].as_str() {
            Some(cursor) => path = format!("/contracts?limit=4&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!((pages, paged), (2, expected));
    app.assert_bad_parameters(
        "/contracts",
        &[
            ("limit=0", "limit"),
            ("limit=1001", "limit"),
            ("cursor=nonsense", "cursor"),
            ("cursor=a.clicks:x", "cursor"),
        ],
    )
    .await;
}

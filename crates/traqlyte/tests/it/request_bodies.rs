//! Request bodies are serde types (issue 9): on every JSON body the existing tests do not
//! cover field by field — campaigns, publish, assignments, outcomes (single and batch),
//! supersessions, admin tenants — a wrong JSON type in any field, an array instead of an
//! object, an unknown or a missing field is the route's own 4xx naming the field in the
//! route's spelling, and nothing is written.

use reqwest::StatusCode;
use serde_json::{json, Value};
use traqlyte_server::ServerConfig;

use crate::helpers::{checkout_event, spawn_app, spawn_app_with, Answer, Backend, TestApp};

crate::on_both_backends!(
    a_wrong_json_type_in_any_field_is_the_routes_422_naming_it_and_writes_nothing,
    bodies_must_be_objects_and_name_their_unknown_and_missing_fields,
    rules_over_a_whole_list_name_the_item_that_breaks_them,
);

const ADMIN_TOKEN: &str = "admin-token-for-request-bodies-0123456789abcdef";

/// Every JSON type but the one a field takes is tried in it.
fn wrong_types_for(good: &Value) -> Vec<Value> {
    let all = [
        json!(null),
        json!(true),
        json!(7),
        json!(1.5),
        json!("text"),
        json!(["x"]),
        json!({"x": 1}),
    ];
    // A field taking any number takes integers too; one taking integers refuses 1.5.
    let same_type = |v: &Value| match (v, good) {
        (Value::Number(a), Value::Number(b)) => b.is_f64() || !a.is_f64(),
        _ => std::mem::discriminant(v) == std::mem::discriminant(good),
    };
    all.into_iter().filter(|v| !same_type(v)).collect()
}

/// `body` with the value at `pointer` replaced.
fn with(body: &Value, pointer: &str, value: Value) -> Value {
    let mut body = body.clone();
    *body.pointer_mut(pointer).expect("pointer exists") = value;
    body
}

fn campaign_body(key: &str) -> Value {
    json!({
        "key": key, "name": "Checkout",
        "arms": [{"key": "control", "weight": 1}, {"key": "treatment", "weight": 1}],
        "metrics": [{"name": "revenue", "kind": "sum", "window_hours": 168}]
    })
}

struct World {
    app: TestApp,
    campaign: String,
    assignment: String,
    supersession_path: String,
}

async fn world(backend: Backend) -> World {
    let config = ServerConfig {
        admin_token: Some(ADMIN_TOKEN.to_string()),
        ..ServerConfig::default()
    };
    let app = spawn_app_with(backend, config).await;
    app.register_checkout_contract().await;
    let campaign = crate::experiments::create_published(&app, &campaign_body("live")).await;
    let assigned = app
        .post_json(
            "/assignments",
            &json!({"campaign_id": campaign, "unit_id": "u1"}),
        )
        .await;
    assert_eq!(assigned.status, StatusCode::OK, "{}", assigned.body);
    let assignment = assigned.body["assignment_id"]
        .as_str()
        .expect("id")
        .to_string();
    let event = app.post_event(&checkout_event("order_1")).await;
    let event_id = event.body["event_id"].as_str().expect("event id");
    let supersession_path = format!("/events/checkout_completed/{event_id}/supersessions");
    World {
        app,
        campaign,
        assignment,
        supersession_path,
    }
}

async fn post_admin(app: &TestApp, body: &Value) -> Answer {
    app.send(
        app.client
            .post(app.url("/admin/tenants"))
            .bearer_auth(ADMIN_TOKEN)
            .body(body.to_string()),
    )
    .await
}

/// Posts `body` to `path` (the admin route with the admin token).
async fn post(app: &TestApp, path: &str, body: &Value) -> Answer {
    if path == "/admin/tenants" {
        post_admin(app, body).await
    } else {
        app.post_json(path, body).await
    }
}

/// A route's body, known good, the code its refusals carry and the fields to break (a
/// JSON pointer into the body, the field as the route names it).
struct Route {
    path: String,
    good: Value,
    code: &'static str,
    fields: Vec<(&'static str, &'static str)>,
}

/// Fields whose `null` or absence means "not given", which is valid.
const OPTIONAL: [&str; 3] = ["value", "note", "reason"];

fn route(
    path: impl Into<String>,
    good: Value,
    code: &'static str,
    fields: Vec<(&'static str, &'static str)>,
) -> Route {
    Route {
        path: path.into(),
        good,
        code,
        fields,
    }
}

fn bodies(world: &World) -> Vec<Route> {
    let outcome = json!({
        "assignment_id": world.assignment, "dedupe_key": "prod:k", "metric": "revenue",
        "value": 3.5, "occurred_at": traqlyte_identity::format_rfc3339_micros(traqlyte_store::now_us()),
    });
    let outcome_fields = vec![
        ("/assignment_id", "assignment_id"),
        ("/dedupe_key", "dedupe_key"),
        ("/metric", "metric"),
        ("/value", "value"),
        ("/occurred_at", "occurred_at"),
    ];
    vec![
        route(
            "/campaigns",
            campaign_body("fresh"),
            "invalid_campaign",
            vec![
                ("/key", "key"),
                ("/name", "name"),
                ("/arms", "arms"),
                ("/arms/1", "arms[1]"),
                ("/arms/1/key", "arms[1].key"),
                ("/arms/1/weight", "arms[1].weight"),
                ("/metrics", "metrics"),
                ("/metrics/0", "metrics[0]"),
                ("/metrics/0/name", "metrics[0].name"),
                ("/metrics/0/kind", "metrics[0].kind"),
                ("/metrics/0/window_hours", "metrics[0].window_hours"),
            ],
        ),
        route(
            format!("/campaigns/{}/publish", world.campaign),
            json!({"note": "reweighted", "arms": [{"key": "control", "weight": 1}, {"key": "treatment", "weight": 3}]}),
            "invalid_campaign",
            vec![
                ("/note", "note"),
                ("/arms", "arms"),
                ("/arms/0", "arms[0]"),
                ("/arms/0/key", "arms[0].key"),
                ("/arms/0/weight", "arms[0].weight"),
            ],
        ),
        route(
            "/assignments",
            json!({"campaign_id": world.campaign, "unit_id": "u2"}),
            "invalid_assignment",
            vec![("/campaign_id", "campaign_id"), ("/unit_id", "unit_id")],
        ),
        route("/outcome", outcome, "invalid_outcome", outcome_fields),
        route(
            world.supersession_path.clone(),
            json!({"event": checkout_event("order_1"), "reason": "why"}),
            "invalid_supersession",
            vec![("/event", "event"), ("/reason", "reason")],
        ),
        route(
            "/admin/tenants",
            json!({"name": "acme"}),
            "invalid_tenant",
            vec![("/name", "name")],
        ),
    ]
}

/// What the routes above write, read back: versions of the campaign, units assigned,
/// stored outcomes, supersessions of the event, tenants, and whether key "fresh" is free.
async fn written(world: &World) -> Value {
    let app = &world.app;
    let versions = app
        .get(&format!("/campaigns/{}/versions", world.campaign))
        .await;
    let report = app
        .get(&format!("/campaigns/{}/report", world.campaign))
        .await;
    let arms = report.body["arms"].as_array().cloned().unwrap_or_default();
    let units: Vec<Value> = arms.iter().map(|a| a["units"].clone()).collect();
    let events: Vec<Value> = arms
        .iter()
        .map(|a| a["metrics"]["revenue"]["stored_events"].clone())
        .collect();
    let event_path = world.supersession_path.trim_end_matches("/supersessions");
    let event = app.get(event_path).await;
    let tenants = app.store.tenants().await.expect("tenants").len();
    json!({
        "versions": versions.body["versions"].as_array().map(Vec::len),
        "units": units, "stored_events": events,
        "supersessions": event.body["supersessions"], "tenants": tenants,
    })
}

async fn a_wrong_json_type_in_any_field_is_the_routes_422_naming_it_and_writes_nothing(
    backend: Backend,
) {
    let world = world(backend).await;
    let before = written(&world).await;
    for Route {
        path,
        good,
        code,
        fields,
    } in bodies(&world)
    {
        for (pointer, field) in fields {
            let current = good.pointer(pointer).expect("pointer exists");
            for wrong in wrong_types_for(current) {
                // Optional fields take null as "not given"; so do publish's new arms.
                let optional = OPTIONAL.contains(&field) || path.ends_with("/publish");
                if wrong.is_null() && optional && !field.contains('.') {
                    continue;
                }
                let body = with(&good, pointer, wrong.clone());
                let answer = post(&world.app, &path, &body).await;
                let what = format!("{path} {field} = {wrong}");
                assert_eq!(
                    answer.status,
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "{what}: {}",
                    answer.body
                );
                assert_eq!(answer.code(), code, "{what}: {}", answer.body);
                assert_eq!(
                    answer.body["error"]["field"], field,
                    "{what}: {}",
                    answer.body
                );
                let message = answer.body["error"]["message"].as_str().unwrap_or("");
                assert!(message.contains(&format!("`{field}`")), "{what}: {message}");
            }
        }
    }
    assert_eq!(
        written(&world).await,
        before,
        "a refused body writes nothing"
    );
    // The campaign key every refused creation used is still free.
    let fresh = world
        .app
        .post_json("/campaigns", &campaign_body("fresh"))
        .await;
    assert_eq!(fresh.status, StatusCode::CREATED, "{}", fresh.body);
}

async fn bodies_must_be_objects_and_name_their_unknown_and_missing_fields(backend: Backend) {
    let world = world(backend).await;
    let before = written(&world).await;
    for Route {
        path,
        good,
        code,
        fields,
    } in bodies(&world)
    {
        // A JSON array holding the fields' values in order is not the object.
        let values: Vec<Value> = good
            .as_object()
            .expect("object")
            .values()
            .cloned()
            .collect();
        let answer = post(&world.app, &path, &Value::Array(values)).await;
        let expected = if path == "/outcome" {
            "not_an_object"
        } else {
            code
        };
        assert_eq!(
            answer.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{path}: {}",
            answer.body
        );
        assert_eq!(answer.code(), expected, "{path}: {}", answer.body);

        let mut extra = good.clone();
        extra["surplus"] = json!(1);
        let answer = post(&world.app, &path, &extra).await;
        assert_eq!(answer.code(), code, "{path}: {}", answer.body);
        assert_eq!(
            answer.body["error"]["field"], "surplus",
            "{path}: {}",
            answer.body
        );
        let message = answer.body["error"]["message"].as_str().unwrap_or("");
        assert!(
            message.starts_with("unknown field `surplus`; allowed: "),
            "{path}: {message}"
        );

        for (pointer, field) in fields {
            let Some((parent, key)) = pointer.rsplit_once('/') else {
                continue;
            };
            // Array items and optional fields cannot go missing; publish's fields are all
            // optional (an empty body publishes too).
            let optional =
                OPTIONAL.contains(&key) || (path.ends_with("/publish") && parent.is_empty());
            if key.parse::<usize>().is_ok() || optional {
                continue;
            }
            let mut body = good.clone();
            let holder = if parent.is_empty() {
                Some(&mut body)
            } else {
                body.pointer_mut(parent)
            };
            holder
                .and_then(Value::as_object_mut)
                .expect("object")
                .remove(key);
            let answer = post(&world.app, &path, &body).await;
            assert_eq!(
                answer.code(),
                code,
                "{path} without {field}: {}",
                answer.body
            );
            assert_eq!(
                answer.body["error"]["field"], field,
                "{path} without {field}: {}",
                answer.body
            );
        }
    }
    // Nested objects refuse unknown fields too, named with their place.
    let mut body = campaign_body("fresh");
    body["arms"][1]["colour"] = json!("red");
    let answer = world.app.post_json("/campaigns", &body).await;
    assert_eq!(
        answer.body["error"]["field"], "arms[1].colour",
        "{}",
        answer.body
    );
    assert_eq!(
        answer.body["error"]["message"],
        "unknown field `arms[1].colour`; allowed: key, weight"
    );
    assert_eq!(
        written(&world).await,
        before,
        "a refused body writes nothing"
    );
}

async fn rules_over_a_whole_list_name_the_item_that_breaks_them(backend: Backend) {
    let app = spawn_app(backend).await;
    let mut body = campaign_body("k");
    let cases = [
        ("/arms/1/key", json!("control"), "arms[1].key"),
        ("/arms", json!([{"key": "only", "weight": 1}]), "arms"),
        (
            "/metrics",
            json!([
                {"name": "m", "kind": "sum", "window_hours": 1},
                {"name": "m", "kind": "count", "window_hours": 1}
            ]),
            "metrics[1].name",
        ),
        ("/metrics/0/kind", json!("median"), "metrics[0].kind"),
        (
            "/metrics/0/window_hours",
            json!(8785),
            "metrics[0].window_hours",
        ),
        ("/arms/0/weight", json!(1_000_001), "arms[0].weight"),
        ("/name", json!("   "), "name"),
    ];
    for (pointer, value, field) in cases {
        let answer = app
            .post_json("/campaigns", &with(&body, pointer, value.clone()))
            .await;
        assert_eq!(
            (answer.status, answer.code()),
            (StatusCode::UNPROCESSABLE_ENTITY, "invalid_campaign"),
            "{pointer} = {value}: {}",
            answer.body
        );
        assert_eq!(
            answer.body["error"]["field"], field,
            "{pointer} = {value}: {}",
            answer.body
        );
    }
    let weight = app
        .post_json("/campaigns", &with(&body, "/arms/0/weight", json!(0)))
        .await;
    assert_eq!(
        weight.body["error"]["message"],
        "`arms[0].weight` must be an integer from 1 to 1000000"
    );
    // Limits are inclusive: the largest weight and window are stored.
    body["arms"][0]["weight"] = json!(1_000_000);
    body["metrics"][0]["window_hours"] = json!(8784);
    let created = app.post_json("/campaigns", &body).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    assert_eq!(created.body["arms"][0]["weight"], 1_000_000);
}

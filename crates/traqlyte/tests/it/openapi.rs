//! `GET /openapi.json`: the description lists every route, and a schemathesis run against
//! a live `traqlyte serve` finds no server error and no answer that breaks it.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::{checkout_event, spawn_app, Backend, ServerProcess, TestApp};

/// Every route of the route table (`crates/server/src/routes/mod.rs`, `routes/admin.rs`,
/// `ui/mod.rs`), as `METHOD path`. A route added there and not described fails here.
const ROUTES: &[&str] = &[
    "GET /openapi.json",
    "GET /healthz",
    "GET /livez",
    "GET /stats",
    "POST /contracts",
    "GET /contracts",
    "GET /contracts/{name}",
    "GET /contracts/{name}/collisions",
    "GET /deadletters",
    "GET /ops/semantic-duplicates",
    "POST /campaigns",
    "GET /campaigns/{id}",
    "GET /campaigns/{id}/versions",
    "POST /campaigns/{id}/publish",
    "GET /campaigns/{id}/report",
    "POST /assignments",
    "POST /outcome",
    "POST /outcomes/batch",
    "GET /outcomes/{outcome_id}",
    "POST /outcomes/{outcome_id}/supersessions",
    "POST /assignments/batch",
    "POST /events/{contract}",
    "POST /events/{contract}/batch",
    "GET /events/{contract}/{event_id}",
    "POST /events/{contract}/{event_id}/supersessions",
    "POST /api/v1/lineage",
    "GET /api/v1/lineage",
    "GET /lineage/ancestors",
    "GET /lineage/descendants",
    "GET /lineage/stats",
    "POST /v1/track",
    "POST /v1/identify",
    "POST /v1/page",
    "POST /v1/screen",
    "POST /v1/group",
    "POST /v1/alias",
    "POST /v1/batch",
    "POST /v1/import",
    "POST /v1/import/",
    "POST /v1/t",
    "POST /v1/i",
    "POST /v1/p",
    "POST /v1/s",
    "POST /v1/g",
    "POST /v1/a",
    "POST /v1/b",
    "GET /sources",
    "GET /sources/{id}/rejections",
    "POST /campaigns/{id}/bindings",
    "GET /campaigns/{id}/bindings",
    "GET /admin/tenants",
    "POST /admin/tenants",
    "GET /admin/tenants/{name}/keys",
    "POST /admin/tenants/{name}/keys",
    "DELETE /admin/tenants/{name}/keys/{prefix}",
    "GET /",
    "GET /ui",
    "GET /ui/",
    "GET /ui/login",
    "POST /ui/login",
    "POST /ui/logout",
    "POST /ui/tokens",
    "GET /ui/campaigns",
    "GET /ui/campaigns/{id}",
    "GET /ui/ops",
    "GET /metrics",
    "GET /ops/duplicates",
    "GET /ops/collisions",
    "POST /ops/webhooks",
    "GET /ops/webhooks",
    "DELETE /ops/webhooks/{id}",
];

/// Examples schemathesis generates per operation and phase: enough to reach every
/// status an operation documents, few enough that both backends finish in about a
/// minute on 2 cores.
const EXAMPLES_PER_OPERATION: &str = "8";
/// A fixed seed: a finding is reproduced by running the test again.
const SEED: &str = "20261129";
/// The whole run's budget; schemathesis stops generating when it is spent.
const SCHEMATHESIS_SECONDS_MAX: &str = "45";

crate::on_both_backends!(
    openapi_json_is_openapi_3_1_and_lists_every_route,
    collisions_and_rejections_are_described_with_the_fields_and_values_they_send,
    each_limit_is_described_with_the_bounds_the_server_keeps,
    a_batch_timestamp_of_any_type_is_accepted_and_described,
    schemathesis_finds_no_server_error_and_no_nonconforming_answer,
);

async fn openapi_json_is_openapi_3_1_and_lists_every_route(backend: Backend) {
    let app = spawn_app(backend).await;
    // No key: the description is public.
    let response = app
        .client
        .get(format!("{}/openapi.json", app.address))
        .send()
        .await
        .expect("GET /openapi.json");
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        content_type.starts_with("application/json"),
        "{content_type}"
    );
    let doc: Value = response.json().await.expect("JSON");
    let version = doc["openapi"].as_str().expect("openapi");
    assert!(version.starts_with("3.1."), "version {version}");
    let mut described = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in ["get", "post", "put", "patch", "delete"] {
            if item.get(method).is_some() {
                described.push(format!("{} {path}", method.to_uppercase()));
            }
        }
    }
    let mut expected: Vec<String> = ROUTES.iter().map(ToString::to_string).collect();
    expected.sort();
    described.sort();
    assert_eq!(
        described, expected,
        "described routes differ from the route table"
    );
    // The report's optional stratified figures are described, with their nested types.
    let schemas = &doc["components"]["schemas"];
    assert!(
        schemas["Report"]["properties"].get("stratified").is_some(),
        "{}",
        schemas["Report"]
    );
    for nested in ["Stratified", "StratifiedArm", "StratifiedMetric"] {
        assert!(schemas.get(nested).is_some(), "{nested} is not described");
    }
    // Every 4xx and 5xx of the API is the one shared error component; Segment's routes
    // answer it with `code` and `message` repeated at the top level, take the write key
    // in the body as well as by HTTP Basic, and a body sent as text/plain.
    for (path, item) in doc["paths"].as_object().unwrap() {
        if path.starts_with("/ui") || path == "/" || path == "/openapi.json" {
            continue;
        }
        let tracking = path.starts_with("/v1/");
        let error_ref = if tracking {
            "#/components/responses/SegmentErrorEnvelope"
        } else {
            "#/components/responses/ErrorEnvelope"
        };
        for (method, operation) in item.as_object().unwrap() {
            for range in ["4XX", "5XX"] {
                let reference = &operation["responses"][range]["$ref"];
                assert_eq!(reference, error_ref, "{method} {path} {range}");
            }
            if tracking && method == "post" {
                assert_eq!(
                    operation["security"],
                    json!([{"write_key": []}, {}]),
                    "{path}"
                );
                let content = &operation["requestBody"]["content"];
                assert!(content.get("text/plain").is_some(), "{path}: {content}");
            }
        }
    }
    let segment = &schemas["SegmentErrorEnvelope"]["allOf"][1]["required"];
    assert_eq!(segment, &json!(["code", "message"]));
    assert_operation_ids_are_unique(&doc);
    assert_idempotency_headers_are_optional_alternatives(&doc);
}

/// OpenAPI 3.1 wants every `operationId` unique; they are made from the path, and
/// `GET /ui` and `GET /ui/` differ only by a slash.
fn assert_operation_ids_are_unique(doc: &Value) {
    let mut ids = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("a path item") {
            let id = operation["operationId"].as_str();
            ids.push(id.unwrap_or_else(|| panic!("{method} {path} has no operationId")));
        }
    }
    let count = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), count, "duplicate operationIds among {ids:?}");
}

/// The two idempotency headers are alternatives (send either; both only when equal), so
/// neither is required: the routes that take them answer without either.
fn assert_idempotency_headers_are_optional_alternatives(doc: &Value) {
    let mut described = 0;
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("a path item") {
            let parameters = operation["parameters"].as_array().into_iter().flatten();
            for parameter in parameters.filter(|p| p["in"] == "header") {
                let (name, other) = match parameter["name"].as_str() {
                    Some("X-TL-Idempotency-Key") => ("X-TL-Idempotency-Key", "Idempotency-Key"),
                    Some("Idempotency-Key") => ("Idempotency-Key", "X-TL-Idempotency-Key"),
                    _ => continue,
                };
                described += 1;
                assert_ne!(parameter["required"], true, "{method} {path} {name}");
                let description = parameter["description"].as_str().unwrap_or("");
                assert!(
                    description.contains(&format!("`{other}`")),
                    "{method} {path} {name}: {description}"
                );
            }
        }
    }
    assert_eq!(described, 12, "six routes take the two headers");
}

/// Collisions and Segment rejections, which the schemathesis run's seeded data once
/// lacked: every field sent is described, every required field is sent, and every value
/// has a described type (payloads and a diff's values may be any JSON value).
async fn collisions_and_rejections_are_described_with_the_fields_and_values_they_send(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    let Mishaps { source, .. } = seed_mishaps(&app).await;
    let doc = app.get("/openapi.json").await.body;
    for (template, path, list) in [
        (
            "/contracts/{name}/collisions",
            "/contracts/checkout_completed/collisions".to_string(),
            "collisions",
        ),
        (
            "/ops/collisions",
            "/ops/collisions".to_string(),
            "collisions",
        ),
        (
            "/sources/{id}/rejections",
            format!("/sources/{source}/rejections"),
            "rejections",
        ),
    ] {
        let answer = app.get(&path).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        let listed = answer.body[list].as_array().map_or(0, Vec::len);
        assert!(listed > 0, "GET {path} lists nothing: {}", answer.body);
        let schema = &doc["paths"][template]["get"]["responses"]["200"]["content"]
            ["application/json"]["schema"];
        let mut problems = Vec::new();
        findings(&doc, schema, &answer.body, "", &mut problems);
        assert!(
            problems.is_empty(),
            "GET {template}: {problems:#?}\n{}",
            answer.body
        );
    }
}

/// Every `limit` query parameter is described with the bounds the server keeps: both
/// bounds are accepted, one past either is `400 invalid_parameter`.
async fn each_limit_is_described_with_the_bounds_the_server_keeps(backend: Backend) {
    let app = spawn_app(backend).await;
    let campaign = crate::experiments::create_published(&app, &seeded_campaign()).await;
    crate::segment::create_source(&app, "web");
    let source = app.get("/sources").await.body["sources"][0]["id"]
        .as_str()
        .expect("a source")
        .to_string();
    let doc = app.get("/openapi.json").await.body;
    let mut limited = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        let parameters = item["get"]["parameters"].as_array().into_iter().flatten();
        for parameter in parameters.filter(|p| p["in"] == "query" && p["name"] == "limit") {
            limited.push(path.as_str());
            let bound = |name: &str| {
                parameter["schema"][name]
                    .as_i64()
                    .unwrap_or_else(|| panic!("{path}: limit has no {name}: {parameter}"))
            };
            let id = if path.starts_with("/sources/") {
                &source
            } else {
                &campaign
            };
            let path = path
                .replace("{id}", id)
                .replace("{name}", "segment.message");
            for (limit, expected) in [
                (bound("minimum") - 1, StatusCode::BAD_REQUEST),
                (bound("minimum"), StatusCode::OK),
                (bound("maximum"), StatusCode::OK),
                (bound("maximum") + 1, StatusCode::BAD_REQUEST),
            ] {
                let answer = app.get(&format!("{path}?limit={limit}")).await;
                assert_eq!(
                    answer.status, expected,
                    "{path}?limit={limit}: {}",
                    answer.body
                );
            }
        }
    }
    limited.sort_unstable();
    assert_eq!(
        limited,
        [
            "/campaigns/{id}/versions",
            "/contracts",
            "/contracts/{name}/collisions",
            "/deadletters",
            "/ops/collisions",
            "/sources",
            "/sources/{id}/rejections"
        ]
    );
}

/// `POST /v1/batch` accepts a batch `timestamp` of any type (libraries send one beside
/// `sentAt`; it is not interpreted), and the described body admits each.
async fn a_batch_timestamp_of_any_type_is_accepted_and_described(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = crate::segment::create_source(&app, "web");
    let doc = app.get("/openapi.json").await.body;
    let schema =
        &doc["paths"]["/v1/batch"]["post"]["requestBody"]["content"]["application/json"]["schema"];
    let timestamps = [
        json!("2026-11-29T10:00:00Z"),
        json!(1_764_410_400),
        json!({"at": "now"}),
        json!(null),
    ];
    for (n, timestamp) in timestamps.into_iter().enumerate() {
        let message = crate::segment::track(&format!("m-{n}"), "user-1", "order-1", 1.0);
        let body = json!({"batch": [message], "timestamp": timestamp});
        let answer = crate::segment::post_v1(&app, "/v1/batch", Some(&key), &body).await;
        assert_eq!(
            answer.body,
            json!({"success": true}),
            "timestamp {timestamp}"
        );
        let mut problems = Vec::new();
        findings(&doc, schema, &body, "", &mut problems);
        assert!(problems.is_empty(), "timestamp {timestamp}: {problems:#?}");
    }
}

/// Where `value` breaks `schema` (its `$ref`s resolved in `doc`), at JSON pointer `at`:
/// `type`, `required`, `properties`, `items`, `oneOf`/`anyOf`/`allOf`. Stricter than JSON
/// Schema in one way, on purpose: a key sent that an object's `properties` do not list
/// is a finding, since a component naming another type's fields is the mistake sought.
fn findings(doc: &Value, schema: &Value, value: &Value, at: &str, out: &mut Vec<String>) {
    if let Some(reference) = schema["$ref"].as_str() {
        let name = reference
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("{at}: a $ref outside the schemas: {reference}"));
        let target = &doc["components"]["schemas"][name];
        assert!(!target.is_null(), "{at}: {reference} resolves to nothing");
        return findings(doc, target, value, at, out);
    }
    if let Some(branches) = schema["oneOf"].as_array().or(schema["anyOf"].as_array()) {
        let fits = |branch: &Value| {
            let mut problems = Vec::new();
            findings(doc, branch, value, at, &mut problems);
            problems.is_empty()
        };
        if !branches.iter().any(fits) {
            out.push(format!("{at}: {value} fits no branch of {schema}"));
        }
        return;
    }
    for branch in schema["allOf"].as_array().into_iter().flatten() {
        findings(doc, branch, value, at, out);
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(one) => vec![one.as_str()],
        Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !types.is_empty() && !types.iter().any(|t| is_json_type(value, t)) {
        out.push(format!("{at}: {value} is not of type {types:?}"));
        return;
    }
    match value {
        Value::Object(members) => {
            let Some(properties) = schema["properties"].as_object() else {
                return;
            };
            for (key, member) in members {
                match properties.get(key) {
                    Some(property) => findings(doc, property, member, &format!("{at}/{key}"), out),
                    None => out.push(format!("{at}/{key} is sent but not described")),
                }
            }
            let required = schema["required"].as_array().into_iter().flatten();
            for key in required.filter_map(Value::as_str) {
                if !members.contains_key(key) {
                    out.push(format!("{at}/{key} is described as required but not sent"));
                }
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                findings(doc, &schema["items"], item, &format!("{at}/{index}"), out);
            }
        }
        _ => {}
    }
}

/// Whether `value` is of the JSON Schema type `name` (an integer is a number too).
fn is_json_type(value: &Value, name: &str) -> bool {
    match name {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "string" => value.is_string(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        _ => false,
    }
}

async fn schemathesis_finds_no_server_error_and_no_nonconforming_answer(backend: Backend) {
    let schemathesis = venv_schemathesis();
    let app = spawn_app(backend).await;
    let config = SeededConfig::write(&app).await;
    let server = ServerProcess::start(app.database_url(), &[]);
    let started = Instant::now();
    let output = Command::new(&schemathesis)
        .arg("--config-file")
        .arg(&config.path)
        .args([
            "run",
            &format!("{}/openapi.json", server.address),
            "--checks",
            "not_a_server_error,response_schema_conformance",
            "--max-examples",
            EXAMPLES_PER_OPERATION,
            "--seed",
            SEED,
            "--max-time",
            SCHEMATHESIS_SECONDS_MAX,
            "--workers",
            "1",
            "--no-color",
            "--request-timeout",
            "10",
            // No example database: nothing is written into the checkout, and a run
            // depends on the seed only, never on what an earlier run found.
            "--generation-database",
            "none",
        ])
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap_or_else(|err| panic!("run {}: {err}", schemathesis.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    println!("{text}");
    assert!(
        output.status.success(),
        "schemathesis found problems on {backend:?} (output above)"
    );
    assert!(
        started.elapsed() < Duration::from_secs(150),
        "schemathesis took {:?}",
        started.elapsed()
    );
    drop(server);
}

/// A schemathesis configuration whose path parameters are drawn, most of the time, from
/// data seeded before the run: a published campaign with assignments and outcomes, a
/// registered contract with a stored event and a collision, a Segment source with a
/// rejected message, a lineage run. Without it nearly every operation under
/// `/campaigns/{id}` or `/events/{contract}/…` only ever meets a 404, and the report's,
/// a collision's and a rejection's schemas are never checked against real answers. Each
/// security scheme gets its credential (the API key; the source's write key for
/// `/v1/*`), so those routes answer more than `401`.
struct SeededConfig {
    path: PathBuf,
}

/// How often a seeded value is used instead of a generated one.
const SEEDED_PROBABILITY: f64 = 0.8;

impl SeededConfig {
    async fn write(app: &TestApp) -> SeededConfig {
        let Seeded {
            campaign,
            event_id,
            assignments,
            mishaps: Mishaps { source, write_key },
        } = seed(app).await;
        let assignments = assignments.join("\", \"");
        let key = &app.key;
        let toml = format!(
            r#"[dictionaries]
campaigns = {{ values = ["{campaign}"] }}
contracts = {{ values = ["checkout_completed", "openlineage.run_event"] }}
events = {{ values = ["{event_id}"] }}
assignments = {{ values = ["{assignments}"] }}
sources = {{ values = ["{source}"] }}

[parameters]
"path.id" = {{ dictionary = "campaigns", probability = {SEEDED_PROBABILITY} }}
"path.contract" = {{ dictionary = "contracts", probability = {SEEDED_PROBABILITY} }}
"path.name" = {{ dictionary = "contracts", probability = {SEEDED_PROBABILITY} }}
"path.event_id" = {{ dictionary = "events", probability = {SEEDED_PROBABILITY} }}
"body.campaign_id" = {{ dictionary = "campaigns", probability = {SEEDED_PROBABILITY} }}
"body.assignment_id" = {{ dictionary = "assignments", probability = {SEEDED_PROBABILITY} }}

[auth.openapi.api_key]
bearer = "{key}"

[auth.openapi.write_key]
username = "{write_key}"
password = ""

[[operations]]
include-path = "/sources/{{id}}/rejections"
parameters = {{ "path.id" = {{ dictionary = "sources", probability = {SEEDED_PROBABILITY} }} }}
"#
        );
        let path = std::env::temp_dir().join(format!(
            "traqlyte-schemathesis-{}-{}.toml",
            std::process::id(),
            traqlyte_store::now_us()
        ));
        std::fs::write(&path, toml).expect("write the schemathesis configuration");
        SeededConfig { path }
    }
}

impl Drop for SeededConfig {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Ids of the data seeded before a run.
struct Seeded {
    campaign: String,
    event_id: String,
    assignments: Vec<String>,
    mishaps: Mishaps,
}

/// Seeds what the run's parameters point at.
async fn seed(app: &TestApp) -> Seeded {
    app.register_checkout_contract().await;
    let event = app.post_event(&checkout_event("order-seeded")).await;
    assert!(event.status.is_success(), "{}", event.body);
    let event_id = event.body["event_id"]
        .as_str()
        .expect("event_id")
        .to_string();
    let campaign = crate::experiments::create_published(app, &seeded_campaign()).await;
    let occurred_at =
        traqlyte_identity::format_rfc3339_micros(traqlyte_store::now_us() + 60_000_000);
    let mut assignments = Vec::new();
    for unit in 0..8 {
        let assignment = app
            .post_json(
                "/assignments",
                &json!({"campaign_id": campaign, "unit_id": format!("u{unit}")}),
            )
            .await;
        assert_eq!(assignment.status, StatusCode::OK, "{}", assignment.body);
        let id = assignment.body["assignment_id"]
            .as_str()
            .expect("assignment_id");
        assignments.push(id.to_string());
        let outcome = json!({
            "assignment_id": assignment.body["assignment_id"], "dedupe_key": format!("order-{unit}"),
            "metric": "revenue", "value": 10.0 + f64::from(unit), "occurred_at": occurred_at,
        });
        for _ in 0..2 {
            let answer = app.post_json("/outcome", &outcome).await;
            assert!(answer.status.is_success(), "{}", answer.body);
        }
    }
    let report = app.get(&format!("/campaigns/{campaign}/report")).await;
    assert_eq!(report.status, StatusCode::OK, "{}", report.body);
    Seeded {
        campaign,
        event_id,
        assignments,
        mishaps: seed_mishaps(app).await,
    }
}

/// A campaign with a conversion and a sum metric.
fn seeded_campaign() -> Value {
    json!({
        "key": "seeded", "name": "Seeded",
        "arms": [{"key": "control", "weight": 1}, {"key": "treatment", "weight": 1}],
        "metrics": [
            {"name": "purchase", "kind": "conversion", "window_hours": 168},
            {"name": "revenue", "kind": "sum", "window_hours": 168}
        ]
    })
}

/// What went wrong on purpose: a source whose write key is `write_key`.
struct Mishaps {
    source: String,
    write_key: String,
}

/// Seeds one event collision under `checkout_completed` (registered already), whose
/// diff holds a string and an array, and one Segment batch with a rejected message that
/// is not an object.
async fn seed_mishaps(app: &TestApp) -> Mishaps {
    let stored = app.post_event(&checkout_event("order-collided")).await;
    assert!(stored.status.is_success(), "{}", stored.body);
    let mut other = checkout_event("order-collided");
    other["note"] = json!("another note");
    other["extra"] = json!([1, 2]);
    let refused = app.post_event(&other).await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.body);
    let write_key = crate::segment::create_source(app, "seeded");
    let message = crate::segment::track("m-seeded", "user-1", "order-1", 1.0);
    let batch = json!({"batch": [message, 42]});
    let answer = crate::segment::post_v1(app, "/v1/batch", Some(&write_key), &batch).await;
    assert_eq!(answer.body, json!({"success": true}));
    let row = crate::segment::source_row(app, "seeded").await;
    assert_eq!(row["rejected"], 1, "{row}");
    Mishaps {
        source: row["id"].as_str().expect("id").to_string(),
        write_key,
    }
}

/// `.venv/bin/schemathesis` of the checkout (`scripts/python-venv.sh` installs it);
/// missing, the test fails: it never skips.
fn venv_schemathesis() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let path = root.join(".venv/bin/schemathesis");
    assert!(
        path.is_file(),
        "{} is missing: run scripts/python-venv.sh (scripts/test does)",
        path.display()
    );
    path
}

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
    // Every 4xx and 5xx of the API is the one shared error component.
    let error_ref = "#/components/responses/ErrorEnvelope";
    for (path, item) in doc["paths"].as_object().unwrap() {
        if path.starts_with("/ui") || path == "/" || path == "/openapi.json" {
            continue;
        }
        for (method, operation) in item.as_object().unwrap() {
            for range in ["4XX", "5XX"] {
                let reference = &operation["responses"][range]["$ref"];
                assert_eq!(reference, error_ref, "{method} {path} {range}");
            }
        }
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
            "--header",
            &format!("Authorization: Bearer {}", app.key),
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
/// registered contract with a stored event, a lineage run. Without it nearly every
/// operation under `/campaigns/{id}` or `/events/{contract}/…` only ever meets a 404,
/// and the report's schema is never checked against a real report.
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
        } = seed(app).await;
        let assignments = assignments.join("\", \"");
        let toml = format!(
            r#"[dictionaries]
campaigns = {{ values = ["{campaign}"] }}
contracts = {{ values = ["checkout_completed", "openlineage.run_event"] }}
events = {{ values = ["{event_id}"] }}
assignments = {{ values = ["{assignments}"] }}

[parameters]
"path.id" = {{ dictionary = "campaigns", probability = {SEEDED_PROBABILITY} }}
"path.contract" = {{ dictionary = "contracts", probability = {SEEDED_PROBABILITY} }}
"path.name" = {{ dictionary = "contracts", probability = {SEEDED_PROBABILITY} }}
"path.event_id" = {{ dictionary = "events", probability = {SEEDED_PROBABILITY} }}
"body.campaign_id" = {{ dictionary = "campaigns", probability = {SEEDED_PROBABILITY} }}
"body.assignment_id" = {{ dictionary = "assignments", probability = {SEEDED_PROBABILITY} }}
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
    let body = json!({
        "key": "seeded", "name": "Seeded",
        "arms": [{"key": "control", "weight": 1}, {"key": "treatment", "weight": 1}],
        "metrics": [
            {"name": "purchase", "kind": "conversion", "window_hours": 168},
            {"name": "revenue", "kind": "sum", "window_hours": 168}
        ]
    });
    let campaign = crate::experiments::create_published(app, &body).await;
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

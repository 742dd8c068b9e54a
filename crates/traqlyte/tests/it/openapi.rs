//! `GET /openapi.json`: the description lists every route, and a schemathesis run against
//! a live `traqlyte serve` finds no server error and no answer that breaks it.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::helpers::{spawn_app, Backend, ServerProcess};

/// Every route of the route table (`crates/server/src/routes/mod.rs`, `routes/admin.rs`,
/// `ui/mod.rs`), as `METHOD path`. A route added there and not described fails here.
const ROUTES: &[&str] = &[
    "GET /openapi.json",
    "GET /healthz",
    "GET /stats",
    "POST /contracts",
    "GET /contracts",
    "GET /contracts/{name}",
    "GET /contracts/{name}/collisions",
    "POST /campaigns",
    "GET /campaigns/{id}",
    "GET /campaigns/{id}/versions",
    "POST /campaigns/{id}/publish",
    "GET /campaigns/{id}/report",
    "POST /assignments",
    "POST /outcome",
    "POST /outcomes/batch",
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
    let server = ServerProcess::start(app.database_url(), &[]);
    let started = Instant::now();
    let output = Command::new(&schemathesis)
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

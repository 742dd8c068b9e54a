//! The official `openlineage-python` client against a running server: START and COMPLETE
//! for a chain of jobs, a producer retry with a new eventTime (one row), two events that
//! differ only in a parameter facet (two rows), and each ancestor listed once.
//! `.venv` comes from `scripts/python-venv.sh` (run by `scripts/test`); a missing venv or
//! client fails the test, it never skips.

use reqwest::StatusCode;

use crate::helpers::{spawn_app, Backend};
use crate::lineage::repository_root;

crate::on_both_backends!(the_official_python_client_emits_a_chain_that_dedupes_and_queries_cleanly);

async fn the_official_python_client_emits_a_chain_that_dedupes_and_queries_cleanly(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    let python = repository_root().join(".venv/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run scripts/python-venv.sh (scripts/test does)",
        python.display()
    );
    let output = tokio::process::Command::new(&python)
        .arg("tools/ol_client_emit.py")
        .arg(&app.address)
        .arg(&app.key)
        .current_dir(repository_root())
        .output()
        .await
        .expect("start the Python client script");
    assert!(
        output.status.success(),
        "the OpenLineage client failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stats = app.get("/stats").await;
    let row = &stats.body["contracts"]["openlineage.run_event"];
    assert_eq!(
        (row["stored"].as_i64(), row["duplicates"].as_i64()),
        (Some(8), Some(1)),
        "{}",
        stats.body
    );
    let ancestors = app
        .get("/lineage/ancestors?node=dataset:warehouse:report&depth=20")
        .await;
    assert_eq!(ancestors.status, StatusCode::OK);
    let ids: Vec<&str> = ancestors.body["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["id"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        ids,
        [
            "job:ol-client-test:chain.report",
            "dataset:warehouse:mart",
            "job:ol-client-test:chain.mart",
            "dataset:warehouse:staged",
            "job:ol-client-test:chain.stage",
            "dataset:warehouse:raw",
        ]
    );
}

//! A lineage walk's level is bounded in time on both backends (`walk_timeout_ms`):
//! PostgreSQL's `statement_timeout`, SQLite's progress handler. A level of a busy graph
//! can scan far more rows than it returns (a job of many runs reading one dataset is one
//! neighbour found through every run), and a walk is client-controlled.

use traqlyte_store::{Direction, NodeKind, NodeRef, Store, StoreConfig, StoreError};
use traqlyte_store::{TenantId, WalkLimits};

use crate::db::{on_both_backends, Backend, TestDb};

on_both_backends!(a_walk_level_past_its_time_bound_is_stopped_and_the_reader_serves_on);

/// Runs of one job, each reading one dataset: the level from that dataset downstream
/// reads every run to find the one job.
const RUNS: i64 = 200_000;

async fn a_walk_level_past_its_time_bound_is_stopped_and_the_reader_serves_on(backend: Backend) {
    let db = TestDb::create(backend).await;
    let (store, tenant) = db.store_with_tenant().await;
    let series = match backend {
        Backend::Sqlite => {
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < RUNS)"
        }
        Backend::Postgres => "WITH n(i) AS (SELECT generate_series(1, RUNS))",
    }
    .replace("RUNS", &RUNS.to_string());
    let t = tenant.as_str();
    let mut raw = db.raw().await;
    raw.execute(&format!(
        "INSERT INTO lineage_runs (tenant_id, run_id, job_namespace, job_name, first_event_id, first_seen_us)
         {series} SELECT '{t}', 'run' || i, 'ns', 'big', 'ev' || i, 0 FROM n"
    ))
    .await;
    raw.execute(&format!(
        "INSERT INTO lineage_run_inputs (tenant_id, run_id, namespace, name, version)
         {series} SELECT '{t}', 'run' || i, 'ns', 'in', '' FROM n"
    ))
    .await;
    let start = NodeRef {
        kind: NodeKind::Dataset,
        namespace: "ns".into(),
        name: "in".into(),
    };
    let limits = WalkLimits {
        depth_max: 1,
        nodes_max: 10,
    };
    let walk = |store: Store, tenant: TenantId| {
        let start = start.clone();
        async move {
            store
                .lineage_walk(&tenant, &start, &[Direction::Downstream], limits, false)
                .await
        }
    };

    // Bounded by a millisecond, the level is stopped inside the database.
    let mut config = StoreConfig::new(&db.url);
    config.pool_connections_max = 1;
    config.walk_timeout_ms = 1;
    let bounded = Store::connect(&config).await.expect("connect");
    let stopped = walk(bounded.clone(), tenant.clone()).await;
    assert!(
        matches!(stopped, Err(StoreError::QueryTimeout)),
        "{stopped:?}"
    );
    // Its one reader serves the next query: the bound does not outlive its level.
    let counts = bounded.lineage_counts(&tenant).await.expect("counts");
    assert_eq!(counts.runs, RUNS);

    // Cancelled mid-statement (its request answered meanwhile), the level still ends at
    // its bound, and leaves nothing on the reader that would stop a later query on it.
    config.walk_timeout_ms = 300;
    let cancelled_on = Store::connect(&config).await.expect("connect");
    let cancelled = tokio::time::timeout(
        std::time::Duration::from_millis(20),
        walk(cancelled_on.clone(), tenant.clone()),
    )
    .await;
    assert!(
        cancelled.is_err(),
        "the level ended within 20 ms: {cancelled:?}"
    );
    // Past the cancelled level's deadline.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let counts = cancelled_on.lineage_counts(&tenant).await.expect("counts");
    assert_eq!(counts.runs, RUNS);

    // With the default bound (30 s) the same walk finds the one job.
    let walked = walk(store, tenant).await.expect("walk");
    let names: Vec<&str> = walked.nodes.iter().map(|(n, _)| n.name.as_str()).collect();
    assert_eq!(names, ["in", "big"]);
}

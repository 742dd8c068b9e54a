//! Group commit's one-statement writes (`Store::insert_new_events`,
//! `Store::insert_new_run_events`): they store only new events whose batch passes its
//! checks (and, for run events, exactly their graph rows), count exactly what they
//! stored, and leave every other event to the transactional path, which then answers it
//! as before.

use serde_json::json;
use traqlyte_identity::openlineage::identify_run_event;
use traqlyte_identity::{format_rfc3339_micros, Contract};
use traqlyte_store::tenants::KeySelector;
use traqlyte_store::{ApiKey, EventOutcome, NewEvent, RunEventRow, Store, TenantId, TenantName};

use crate::db::{Backend, TestDb};

fn contract(version: u32) -> Contract {
    Contract::from_json(&json!({
        "name": "signup", "version": version,
        "fields": [{"pointer": "/user", "required": true}]
    }))
    .expect("contract")
}

fn event(contract: &Contract, user: &str, note: &str) -> NewEvent {
    let value = json!({"user": user, "note": note});
    NewEvent {
        identified: contract.identify(&value).expect("identified"),
        payload: value.to_string(),
    }
}

async fn setup(backend: Backend) -> (TestDb, Store, TenantId, ApiKey) {
    let db = TestDb::create(backend).await;
    let store = db.store().await;
    store.migrate().await.expect("migrate");
    let name = TenantName::parse("at-once").expect("name");
    let (tenant, key) = store.create_tenant(&name).await.expect("tenant");
    store
        .register_contract(&tenant, &contract(1))
        .await
        .expect("contract");
    (db, store, tenant, key)
}

/// (stored, duplicates, collisions) of the tenant's `signup` contract.
async fn counts(store: &Store, tenant: &TenantId) -> (i64, i64, i64) {
    let stats = store.stats(tenant).await.expect("stats");
    let row = stats
        .iter()
        .find(|s| s.contract == "signup")
        .expect("signup stats");
    (row.stored, row.duplicates, row.collisions)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_events_are_stored_and_counted_in_one_statement_and_conflicts_are_left() {
    let (_db, store, tenant, key) = setup(Backend::Postgres).await;
    let v1 = contract(1);
    let stored_before = event(&v1, "ada", "first");
    let outcomes = store
        .insert_events(&tenant, &v1, std::slice::from_ref(&stored_before))
        .await
        .expect("stored before");
    assert_eq!(outcomes, vec![EventOutcome::Inserted]);
    let (new_a, new_b) = (event(&v1, "bob", "x"), event(&v1, "cy", "y"));
    // A retry of the stored event and a collision with it are not written here.
    let collision = event(&v1, "ada", "changed");
    let batch = [&new_a, &stored_before, &new_b, &collision];
    let inserted = store
        .insert_new_events(&tenant, &v1, &[&key], true, &batch[..3])
        .await
        .expect("one statement")
        .expect("applies on PostgreSQL");
    let mut ids: Vec<&str> = inserted.iter().map(|id| id.as_str()).collect();
    ids.sort_unstable();
    let mut expected = vec![
        new_a.identified.event_id.as_str(),
        new_b.identified.event_id.as_str(),
    ];
    expected.sort_unstable();
    assert_eq!(ids, expected);
    assert_eq!(counts(&store, &tenant).await, (3, 0, 0));
    let left = store
        .insert_new_events(&tenant, &v1, &[&key], true, &[&collision])
        .await
        .expect("one statement")
        .expect("applies");
    assert!(left.is_empty(), "a collision is the transaction's to judge");
    let tallies = store.tally_rows().await.expect("tallies");
    // What was left goes through the transactional path, which judges it as before.
    let judged = store
        .insert_events(&tenant, &v1, &[stored_before.clone(), collision.clone()])
        .await
        .expect("transaction");
    assert_eq!(judged.len(), 2);
    assert_eq!(judged[0], EventOutcome::Duplicate);
    assert!(matches!(judged[1], EventOutcome::Collision { .. }));
    assert_eq!(counts(&store, &tenant).await, (3, 1, 1));
    assert_eq!(store.tally_rows().await.expect("tallies"), tallies + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_check_writes_nothing_not_even_a_tally_row() {
    let (_db, store, tenant, key) = setup(Backend::Postgres).await;
    let v1 = contract(1);
    let fresh = event(&v1, "dee", "z");
    let tallies = store.tally_rows().await.expect("tallies");
    // A newer version registered meanwhile: "the latest" the event was identified under
    // is stale, so nothing is written when the batch asks for that check...
    store
        .register_contract(&tenant, &contract(2))
        .await
        .expect("v2");
    let stale = store
        .insert_new_events(&tenant, &v1, &[&key], true, &[&fresh])
        .await
        .expect("one statement")
        .expect("applies");
    assert!(stale.is_empty());
    // ... and a revoked key writes nothing either.
    let other = TenantName::parse("at-once-other").expect("name");
    let (_, revoked) = store.create_tenant(&other).await.expect("tenant");
    let revoked_tenant = store
        .tenant_for_key(&revoked)
        .await
        .expect("lookup")
        .expect("working key");
    store
        .revoke_api_key(&revoked_tenant, &KeySelector::Key(revoked.clone()))
        .await
        .expect("revoke")
        .expect("revoked");
    let refused = store
        .insert_new_events(&tenant, &v1, &[&key, &revoked], false, &[&fresh])
        .await
        .expect("one statement")
        .expect("applies");
    assert!(refused.is_empty());
    assert_eq!(store.tally_rows().await.expect("tallies"), tallies);
    assert_eq!(counts(&store, &tenant).await, (0, 0, 0));
    // An explicitly named version (no "latest" check) and working keys: stored.
    let stored = store
        .insert_new_events(&tenant, &v1, &[&key, &key], false, &[&fresh])
        .await
        .expect("one statement")
        .expect("applies");
    assert_eq!(stored.len(), 1);
    assert_eq!(counts(&store, &tenant).await, (1, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_ids_and_sqlite_are_left_to_the_transaction() {
    let (_db, store, tenant, key) = setup(Backend::Postgres).await;
    let v1 = contract(1);
    let (first, again) = (event(&v1, "eve", "1"), event(&v1, "eve", "1"));
    let repeated = store
        .insert_new_events(&tenant, &v1, &[&key], true, &[&first, &again])
        .await
        .expect("no statement");
    assert!(repeated.is_none());
    assert_eq!(counts(&store, &tenant).await, (0, 0, 0));
    let (_db, sqlite, tenant, key) = setup(Backend::Sqlite).await;
    let skipped = sqlite
        .insert_new_events(&tenant, &v1, &[&key], true, &[&first])
        .await
        .expect("no statement");
    assert!(skipped.is_none());
    assert_eq!(counts(&sqlite, &tenant).await, (0, 0, 0));
}

/// A RunEvent of `run` (0-based) for `job`, reading `inputs` and writing `outputs`
/// (`name` or `name@version`), happening at the test run's start, with `note` as its error
/// message (outside its identity).
fn run_event(run: u32, event_type: &str, job: &str, io: [&[&str]; 2], note: &str) -> RunEventRow {
    static NOW: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let now = NOW.get_or_init(|| format_rfc3339_micros(traqlyte_store::now_us()));
    let datasets = |names: &[&str]| -> Vec<serde_json::Value> {
        names
            .iter()
            .map(|n| match n.split_once('@') {
                Some((name, version)) => json!({"namespace": "db", "name": name,
                    "facets": {"version": {"_producer": "https://example.com/test",
                        "_schemaURL": "https://openlineage.io/spec/facets/1-0-0/DatasetVersionDatasetFacet.json",
                        "datasetVersion": version}}}),
                None => json!({"namespace": "db", "name": n}),
            })
            .collect()
    };
    let value = json!({
        "eventType": event_type,
        "eventTime": now.as_str(),
        "producer": "https://example.com/test",
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
        "run": {"runId": format!("00000000-0000-4000-8000-{run:012}"),
                "facets": {"errorMessage": {"_producer": "https://example.com/test",
                    "_schemaURL": "https://openlineage.io/spec/facets/1-0-0/ErrorMessageRunFacet.json",
                    "message": note, "programmingLanguage": "rust"}}},
        "job": {"namespace": "ns", "name": job},
        "inputs": datasets(io[0]), "outputs": datasets(io[1])
    });
    let projected = identify_run_event(&value).expect("a valid RunEvent");
    RunEventRow {
        event: NewEvent {
            identified: projected.identified,
            payload: value.to_string(),
        },
        identity: projected.identity,
    }
}

fn kinds(outcomes: &[EventOutcome]) -> Vec<&'static str> {
    outcomes.iter().map(EventOutcome::as_str).collect()
}

/// Every graph row of the tenant, tenant id and times left out, as one text.
async fn graph_of(db: &TestDb, tenant: &TenantId) -> String {
    let t = tenant.as_str();
    let sql = format!(
        "SELECT convert_to(concat_ws(' / ',
           (SELECT string_agg(run_id || '>' || job_name || '>' || first_event_id, ',' ORDER BY run_id)
              FROM lineage_runs WHERE tenant_id = '{t}'),
           (SELECT string_agg(run_id || '<' || name || '@' || version, ',' ORDER BY run_id, name, version)
              FROM lineage_run_inputs WHERE tenant_id = '{t}'),
           (SELECT string_agg(run_id || '>' || name || '@' || version, ',' ORDER BY run_id, name, version)
              FROM lineage_run_outputs WHERE tenant_id = '{t}')), 'UTF8')"
    );
    let text = db.raw().await.blobs(&sql).await.remove(0);
    String::from_utf8(text).expect("text")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_events_and_only_their_graph_rows_are_stored_in_one_statement_as_a_transaction_would() {
    let (db, store, tenant, key) = setup(Backend::Postgres).await;
    let name = TenantName::parse("by-transaction").expect("name");
    let (reference, _) = store.create_tenant(&name).await.expect("tenant");
    let stored_before = run_event(9, "START", "load", [&["raw"], &[]], "a");
    let batch = [
        run_event(1, "START", "extract", [&["raw"], &["staged@v1"]], "a"),
        // A second event of run 1: the run's row names the first.
        run_event(
            1,
            "COMPLETE",
            "extract",
            [&["raw"], &["staged@v1", "staged@v2"]],
            "a",
        ),
        run_event(2, "COMPLETE", "report", [&["staged@v2"], &["report"]], "a"),
        // A retry of the stored event.
        stored_before.clone(),
    ];
    // A collision with it: the same identity, so the same graph rows, another message.
    let collision = run_event(9, "START", "load", [&["raw"], &[]], "b");
    assert_eq!(
        collision.event.identified.event_id,
        stored_before.event.identified.event_id
    );
    for t in [&tenant, &reference] {
        let outcomes = store
            .insert_run_events(t, std::slice::from_ref(&stored_before))
            .await
            .expect("stored before");
        assert_eq!(outcomes, vec![EventOutcome::Inserted]);
    }
    // Two events of one id (the retry and the collision) are the transaction's to judge.
    let refs: Vec<&RunEventRow> = batch.iter().chain([&collision]).collect();
    let repeated = store
        .insert_new_run_events(&tenant, &[&key], &refs)
        .await
        .expect("one statement");
    assert!(repeated.is_none());
    let refs: Vec<&RunEventRow> = batch.iter().collect();
    let inserted = store
        .insert_new_run_events(&tenant, &[&key], &refs)
        .await
        .expect("one statement")
        .expect("applies on PostgreSQL");
    let mut ids: Vec<&str> = inserted.iter().map(|id| id.as_str()).collect();
    ids.sort_unstable();
    let mut expected: Vec<&str> = batch[..3]
        .iter()
        .map(|r| r.event.identified.event_id.as_str())
        .collect();
    expected.sort_unstable();
    assert_eq!(ids, expected, "the new events only");
    // The retry and the collision are the transaction's to judge.
    let left = store
        .insert_run_events(&tenant, &[stored_before.clone(), collision.clone()])
        .await
        .expect("left to the transaction");
    assert_eq!(kinds(&left), ["duplicate", "collision"]);
    // The same events through the transactional path alone, in another tenant.
    let outcomes = store
        .insert_run_events(&reference, &[&batch[..], &[collision]].concat())
        .await
        .expect("transaction");
    assert_eq!(
        kinds(&outcomes),
        ["inserted", "inserted", "inserted", "duplicate", "collision"]
    );
    let graph = graph_of(&db, &tenant).await;
    assert_eq!(graph, graph_of(&db, &reference).await);
    let first_of_run_1 = batch[0].event.identified.event_id.as_str();
    assert!(
        graph.contains(&format!(
            "00000000-0000-4000-8000-000000000001>extract>{first_of_run_1}"
        )),
        "{graph}"
    );
    let counts = store.lineage_counts(&tenant).await.expect("counts");
    assert_eq!((counts.runs, counts.datasets, counts.edges), (3, 3, 6));
    assert_eq!(
        counts,
        store.lineage_counts(&reference).await.expect("counts")
    );

    // A revoked key: nothing written, neither the event nor a graph row.
    let late = run_event(3, "START", "late", [&[], &["late-output"]], "a");
    store
        .revoke_api_key(&tenant, &KeySelector::Key(key.clone()))
        .await
        .expect("revoke")
        .expect("revoked");
    let refused = store
        .insert_new_run_events(&tenant, &[&key], &[&late])
        .await
        .expect("one statement")
        .expect("applies");
    assert!(refused.is_empty());
    assert!(!graph_of(&db, &tenant).await.contains("late"));
    assert_eq!(store.lineage_counts(&tenant).await.expect("counts"), counts);
}

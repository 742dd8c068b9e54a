//! Group commit's one-statement write (`Store::insert_new_events`): it stores only new
//! events whose batch passes its checks, counts exactly what it stored, and leaves every
//! other event to the transactional path, which then answers it as before.

use serde_json::json;
use traqlyte_identity::Contract;
use traqlyte_store::tenants::KeySelector;
use traqlyte_store::{ApiKey, EventOutcome, NewEvent, Store, TenantId, TenantName};

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

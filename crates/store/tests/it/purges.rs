//! The background purges of rows past their retention, at a scale the HTTP tests cannot
//! reach quickly (the webhook outbox's purge is in `webhooks.rs`).

use crate::db::{on_both_backends, Backend, TestDb};

on_both_backends!(idempotency_keys_past_the_retention_are_purged_over_several_statements);

/// Keys reserved before the retention are deleted, more than two statements' worth
/// ([`traqlyte_store::ops::PURGED_AT_ONCE`] a statement) in one purge, and recent ones
/// kept. The purge was one statement, which on SQLite held the write lock (every
/// ingestion) for as long as a backlog took to delete; this checks the statements add up
/// to the whole backlog, not how long each holds its locks.
async fn idempotency_keys_past_the_retention_are_purged_over_several_statements(backend: Backend) {
    let db = TestDb::create(backend).await;
    let store = db.store().await;
    store.migrate().await.expect("migrate");
    const DAY_US: i64 = 86_400_000_000;
    let now = traqlyte_store::now_us();
    let old = traqlyte_store::ops::PURGED_AT_ONCE * 2 + 3;
    let mut rows: Vec<String> = (1..=old)
        .map(|n| {
            format!(
                "('tnt_a', 'old-{n}', 'sum', 'own', {}, 201, '[]', NULL, {})",
                now - 3 * DAY_US,
                now - 3 * DAY_US
            )
        })
        .collect();
    rows.push(format!(
        "('tnt_a', 'recent', 'sum', 'own', {}, NULL, NULL, NULL, NULL)",
        now - DAY_US / 2
    ));
    let mut raw = db.raw().await;
    raw.execute(&format!(
        "INSERT INTO idempotency_keys
           (tenant_id, idem_key, checksum, owner, reserved_at_us, status, headers, body, completed_at_us)
         VALUES {}",
        rows.join(", ")
    ))
    .await;
    let purged = store.idempotency_purge(DAY_US).await.expect("purge");
    assert_eq!(purged, old as u64);
    assert_eq!(
        raw.texts("SELECT idem_key FROM idempotency_keys").await,
        ["recent"]
    );
    assert_eq!(store.idempotency_purge(DAY_US).await.expect("purge"), 0);
}

//! Metric bindings stored by builds before bindings were put in NFC: their event name
//! never equals an identified message's (messages are put in NFC), so they matched
//! nothing, and an upgrade left them dead. Every start now puts them in NFC.

use traqlyte_store::CampaignId;

use crate::db::{on_both_backends, Backend, TestDb};

on_both_backends!(bindings_stored_decomposed_by_an_older_build_are_put_in_nfc_at_start);

/// "Café Order" with a decomposed é (e and U+0301), as an older build stored it.
const DECOMPOSED: &str = "Cafe\u{301} Order";
const COMPOSED: &str = "Caf\u{e9} Order";

async fn bindings_stored_decomposed_by_an_older_build_are_put_in_nfc_at_start(backend: Backend) {
    let db = TestDb::create(backend).await;
    let (store, tenant) = db.store_with_tenant().await;
    let t = tenant.as_str();
    let mut raw = db.raw().await;
    // Campaign 1: one binding, stored decomposed, its pointer too, with a tally row.
    // Campaign 2: the decomposed binding, and its NFC twin declared after an upgrade by a
    // build without this step (bindings are immutable, so it was a second binding).
    let row = |campaign: &str, event: &str, pointer: &str, created: i64| {
        format!(
            "INSERT INTO metric_bindings (tenant_id, campaign_id, metric, event, value_pointer, key_pointer, created_at_us)
             VALUES ('{t}', '{campaign}', 'buy', '{event}', '/properties/{pointer}', NULL, {created})"
        )
    };
    raw.execute(&row("cmp_1", DECOMPOSED, "cafe\u{301}", 1))
        .await;
    raw.execute(&row("cmp_2", DECOMPOSED, "price", 1)).await;
    raw.execute(&row("cmp_2", COMPOSED, "price", 2)).await;
    raw.execute(&format!(
        "INSERT INTO binding_tallies (tenant_id, campaign_id, metric, event, at_us, outcomes, unassigned, unusable)
         VALUES ('{t}', 'cmp_2', 'buy', '{DECOMPOSED}', 1, 0, 4, 0),
                ('{t}', 'cmp_2', 'buy', '{COMPOSED}', 2, 3, 0, 0)"
    ))
    .await;

    // A restart: nothing to migrate, the bindings are put right.
    assert_eq!(
        store.migrate().await.expect("migrate"),
        Vec::<String>::new()
    );

    let one = store
        .bindings(&tenant, &CampaignId::try_from("cmp_1").expect("id"))
        .await
        .expect("bindings");
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].binding.event, COMPOSED);
    assert_eq!(
        one[0].binding.value_pointer.as_deref(),
        Some("/properties/caf\u{e9}")
    );
    let two = store
        .bindings(&tenant, &CampaignId::try_from("cmp_2").expect("id"))
        .await
        .expect("bindings");
    assert_eq!(two.len(), 1, "the twins are one binding");
    assert_eq!(two[0].binding.event, COMPOSED);
    assert_eq!(
        two[0].binding.created_at_us, 2,
        "the later declaration stays"
    );
    assert_eq!(
        (two[0].outcomes, two[0].unassigned),
        (3, 4),
        "every tally kept"
    );

    // Messages, identified in NFC, find them.
    let mut tx = store.begin().await.expect("begin");
    let found = tx
        .bindings_for_events(&tenant, &[COMPOSED])
        .await
        .expect("read");
    assert_eq!(found.len(), 2, "{found:?}");
    tx.rollback().await.expect("rollback");

    // Idempotent: another start changes nothing.
    store.migrate().await.expect("migrate");
    assert_eq!(
        raw.integers("SELECT COUNT(*) FROM metric_bindings").await,
        [2]
    );
}

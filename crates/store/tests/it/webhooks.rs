//! The webhook outbox's claim, at a scale the HTTP tests cannot reach quickly.

use crate::db::{on_both_backends, Backend, TestDb};

on_both_backends!(a_tenants_backlog_takes_only_its_turn_of_a_claim);

/// Tenant A has 120 due deliveries (thousands of collisions fanned out to receivers that
/// never answer would do it), all older than tenant B's one: B's is claimed in the first
/// round of 50, not after A's backlog, and each round takes the tenants in turn.
async fn a_tenants_backlog_takes_only_its_turn_of_a_claim(backend: Backend) {
    let db = TestDb::create(backend).await;
    let store = db.store().await;
    store.migrate().await.expect("migrate");
    let row = |tenant: &str, n: i64| {
        format!("('{tenant}', 'whk_1.{n}', 'whk_1', {n}, 0, 0, {n}, 0, NULL, NULL, NULL)")
    };
    let mut rows: Vec<String> = (1..=120).map(|n| row("tnt_a", n)).collect();
    rows.push(row("tnt_b", 500));
    rows.push(row("tnt_c", 501));
    db.raw()
        .await
        .execute(&format!(
            "INSERT INTO webhook_deliveries VALUES {}",
            rows.join(", ")
        ))
        .await;
    let claimed = store
        .claim_deliveries("dispatcher-1", 1_000, 60_000_000, 50)
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 50);
    let of = |tenant: &str| claimed.iter().filter(|d| d.tenant_id == tenant).count();
    assert_eq!((of("tnt_a"), of("tnt_b"), of("tnt_c")), (48, 1, 1));
    // A's oldest go first within its turns.
    let mut mine: Vec<i64> = claimed
        .iter()
        .filter(|d| d.tenant_id == "tnt_a")
        .map(|d| d.collision_id)
        .collect();
    mine.sort_unstable();
    assert_eq!(mine, (1..=48).collect::<Vec<_>>());
    // Leased rows are not claimed again; the rest of A's backlog comes next.
    let next = store
        .claim_deliveries("dispatcher-2", 1_000, 60_000_000, 50)
        .await
        .expect("claim");
    assert_eq!(next.len(), 50);
    assert!(next
        .iter()
        .all(|d| d.tenant_id == "tnt_a" && d.collision_id > 48));
}

//! The webhook outbox's claim, at a scale the HTTP tests cannot reach quickly.

use crate::db::{on_both_backends, Backend, TestDb};

on_both_backends!(
    a_tenants_backlog_takes_only_its_turn_of_a_claim,
    a_tenants_posts_in_flight_hold_only_its_share_and_claims_go_round,
    leases_and_retries_are_timed_on_the_stores_clock,
    a_delivery_given_back_unposted_keeps_its_attempts,
    posted_deliveries_older_than_the_retention_are_purged_and_due_ones_kept,
);

/// Posted and abandoned deliveries (`delivered_at_us` set) older than the retention are
/// deleted, in statements of bounded size; recent ones and those still due, however old,
/// are kept. The table gained a row per collision per webhook and was never pruned.
async fn posted_deliveries_older_than_the_retention_are_purged_and_due_ones_kept(backend: Backend) {
    let db = TestDb::create(backend).await;
    let store = db.store().await;
    store.migrate().await.expect("migrate");
    const DAY_US: i64 = 86_400_000_000;
    let now = traqlyte_store::now_us();
    let old_posted = traqlyte_store::ops::PURGED_AT_ONCE + 5;
    // (delivery number, created, delivered): old posted ones (more than one statement's
    // worth), one posted yesterday, one old one still due.
    let mut rows: Vec<String> = (1..=old_posted)
        .map(|n| {
            format!(
                "('tnt_a', 'whk_1.{n}', 'whk_1', {n}, 0, 1, 0, 0, NULL, {}, NULL)",
                now - 30 * DAY_US
            )
        })
        .collect();
    rows.push(format!(
        "('tnt_a', 'whk_1.recent', 'whk_1', 0, 0, 1, 0, 0, NULL, {}, NULL)",
        now - DAY_US
    ));
    rows.push(format!(
        "('tnt_b', 'whk_2.due', 'whk_2', 0, {}, 3, {now}, 0, NULL, NULL, 'refused')",
        now - 30 * DAY_US
    ));
    let mut raw = db.raw().await;
    raw.execute(&format!(
        "INSERT INTO webhook_deliveries VALUES {}",
        rows.join(", ")
    ))
    .await;
    let week_us = 7 * DAY_US;
    let purged = store
        .purge_webhook_deliveries(week_us)
        .await
        .expect("purge");
    assert_eq!(purged, old_posted as u64);
    assert_eq!(
        raw.texts("SELECT delivery_id FROM webhook_deliveries ORDER BY delivery_id")
            .await,
        ["whk_1.recent", "whk_2.due"]
    );
    assert_eq!(
        store
            .purge_webhook_deliveries(week_us)
            .await
            .expect("purge"),
        0
    );
    assert_eq!(store.pending_deliveries().await.expect("pending"), 1);
}

/// A delivery claimed by a server that was stopping before it posted is given back as it
/// was: due at once, its attempt not counted. It was settled with the claim's attempt
/// kept, so every restart in that window brought the receiver's longer backoff and its
/// abandonment (15 attempts) nearer without a post ever being made.
async fn a_delivery_given_back_unposted_keeps_its_attempts(backend: Backend) {
    let db = TestDb::create(backend).await;
    let store = db.store().await;
    store.migrate().await.expect("migrate");
    db.raw()
        .await
        .execute(
            "INSERT INTO webhook_deliveries VALUES ('tnt_a', 'whk_1.1', 'whk_1', 1, 0, 0, 0, 0, NULL, NULL, NULL)",
        )
        .await;
    for _ in 0..3 {
        let claimed = store
            .claim_deliveries("dispatcher-1", 60_000_000, 50)
            .await
            .expect("claim");
        assert_eq!(claimed.len(), 1);
        assert_eq!(claimed[0].attempts, 1, "{claimed:?}");
        assert!(store
            .release_unposted_delivery(&claimed[0], "dispatcher-1", "stopping")
            .await
            .expect("release"));
    }
}

/// Due deliveries: `count` of `tenant`, collision ids from `first`.
async fn insert_due(db: &TestDb, rows: &[(&str, i64, i64)]) {
    let values: Vec<String> = rows
        .iter()
        .flat_map(|&(tenant, first, count)| {
            (first..first + count).map(move |n| {
                format!("('{tenant}', 'whk_1.{n}', 'whk_1', {n}, 0, 0, {n}, 0, NULL, NULL, NULL)")
            })
        })
        .collect();
    db.raw()
        .await
        .execute(&format!(
            "INSERT INTO webhook_deliveries VALUES {}",
            values.join(", ")
        ))
        .await;
}

/// A tenant whose receivers hang keeps its posts in flight: the dispatcher gives it at
/// most its share (`per_tenant` less those), so its backlog never fills the dispatcher
/// (all 50 posts held by one tenant's hanging receivers made every tenant's alerts wait
/// up to the 10 s timeout). And when a claim cannot read every tenant, the next goes on
/// from the last one it read.
async fn a_tenants_posts_in_flight_hold_only_its_share_and_claims_go_round(backend: Backend) {
    let db = TestDb::create(backend).await;
    let store = db.store().await;
    store.migrate().await.expect("migrate");
    insert_due(
        &db,
        &[("tnt_a", 1, 120), ("tnt_b", 500, 3), ("tnt_c", 600, 1)],
    )
    .await;
    let mut turns = traqlyte_store::ClaimTurns {
        per_tenant: Some(10),
        ..Default::default()
    };
    turns.in_flight.insert("tnt_a".to_string(), 4);
    turns.in_flight.insert("tnt_c".to_string(), 10);
    let claim = store
        .claim_deliveries_fairly("dispatcher-1", 60_000_000, 50, &turns)
        .await
        .expect("claim");
    let of = |tenant: &str| {
        claim
            .deliveries
            .iter()
            .filter(|d| d.tenant_id == tenant)
            .count()
    };
    assert_eq!((of("tnt_a"), of("tnt_b"), of("tnt_c")), (6, 3, 0));
    assert_eq!(claim.after, None, "every tenant was read");
    // Starting after B: C, then A (around), B last; a claim of 2 takes C's and A's (B has
    // a due row again, which a claim starting from the first tenant would take).
    insert_due(&db, &[("tnt_b", 550, 1)]).await;
    let turns = traqlyte_store::ClaimTurns {
        after: Some("tnt_b".to_string()),
        ..Default::default()
    };
    let claim = store
        .claim_deliveries_fairly("dispatcher-2", 60_000_000, 2, &turns)
        .await
        .expect("claim");
    let mut tenants: Vec<&str> = claim
        .deliveries
        .iter()
        .map(|d| d.tenant_id.as_str())
        .collect();
    tenants.sort_unstable();
    assert_eq!(tenants, ["tnt_a", "tnt_c"]);
    // Three more tenants with a due row each (after C: D, E, F, then A again), claims of 2:
    // the first takes D and E and says where the next goes on; the next takes F (and A).
    insert_due(
        &db,
        &[("tnt_d", 700, 1), ("tnt_e", 800, 1), ("tnt_f", 900, 1)],
    )
    .await;
    let mut turns = traqlyte_store::ClaimTurns {
        after: Some("tnt_c".to_string()),
        ..Default::default()
    };
    let tenants_of = |claim: &traqlyte_store::Claim| {
        let mut tenants: Vec<String> = claim
            .deliveries
            .iter()
            .map(|d| d.tenant_id.clone())
            .collect();
        tenants.sort_unstable();
        tenants
    };
    let claim = store
        .claim_deliveries_fairly("dispatcher-3", 60_000_000, 2, &turns)
        .await
        .expect("claim");
    assert_eq!(tenants_of(&claim), ["tnt_d", "tnt_e"]);
    assert_eq!(claim.after.as_deref(), Some("tnt_e"));
    turns.after = claim.after;
    let claim = store
        .claim_deliveries_fairly("dispatcher-3", 60_000_000, 2, &turns)
        .await
        .expect("claim");
    assert!(
        tenants_of(&claim).contains(&"tnt_f".to_string()),
        "{claim:?}"
    );
}

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
        .claim_deliveries("dispatcher-1", 60_000_000, 50)
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
        .claim_deliveries("dispatcher-2", 60_000_000, 50)
        .await
        .expect("claim");
    assert_eq!(next.len(), 50);
    assert!(next
        .iter()
        .all(|d| d.tenant_id == "tnt_a" && d.collision_id > 48));
}

/// Every dispatcher judges due and leased rows on the store's clock: none passes its own,
/// so one whose clock runs ahead cannot claim a row another holds, nor a retry before it
/// is due; a dispatcher whose lease ran out cannot renew it to post.
async fn leases_and_retries_are_timed_on_the_stores_clock(backend: Backend) {
    let db = TestDb::create(backend).await;
    let store = db.store().await;
    store.migrate().await.expect("migrate");
    let mut raw = db.raw().await;
    raw.execute(
        "INSERT INTO webhook_deliveries VALUES ('tnt_a', 'whk_1.1', 'whk_1', 1, 0, 0, 0, 0, NULL, NULL, NULL)",
    )
    .await;
    let lease_us = 60_000_000;
    let claimed = store
        .claim_deliveries("dispatcher-1", lease_us, 50)
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 1);
    let delivery = &claimed[0];
    assert!(store
        .claim_deliveries("dispatcher-2", lease_us, 50)
        .await
        .expect("claim")
        .is_empty());
    assert!(!store
        .renew_delivery_lease(delivery, "dispatcher-2", lease_us)
        .await
        .expect("renew"));
    assert!(store
        .renew_delivery_lease(delivery, "dispatcher-1", lease_us)
        .await
        .expect("renew"));
    // A failed attempt is due again a minute later on the store's clock, not before.
    assert!(store
        .settle_delivery(
            delivery,
            "dispatcher-1",
            Some(lease_us),
            Some("answered 500")
        )
        .await
        .expect("settle"));
    assert!(store
        .claim_deliveries("dispatcher-2", lease_us, 50)
        .await
        .expect("claim")
        .is_empty());
    // Due now: claimed by dispatcher 2, whose lease then runs out (its round was held
    // up). Unclaimed, 2 may still renew it; once dispatcher 3 claims it, 2 cannot.
    raw.execute("UPDATE webhook_deliveries SET next_attempt_at_us = 0")
        .await;
    let second = store
        .claim_deliveries("dispatcher-2", lease_us, 50)
        .await
        .expect("claim");
    assert_eq!(second.len(), 1);
    raw.execute("UPDATE webhook_deliveries SET lease_until_us = 1")
        .await;
    assert!(store
        .renew_delivery_lease(&second[0], "dispatcher-2", lease_us)
        .await
        .expect("renew"));
    raw.execute("UPDATE webhook_deliveries SET lease_until_us = 1")
        .await;
    let third = store
        .claim_deliveries("dispatcher-3", lease_us, 50)
        .await
        .expect("claim");
    assert_eq!(third.len(), 1);
    assert_eq!(third[0].attempts, 3);
    assert!(store
        .renew_delivery_lease(&third[0], "dispatcher-3", lease_us)
        .await
        .expect("renew"));
    assert!(!store
        .renew_delivery_lease(&second[0], "dispatcher-2", lease_us)
        .await
        .expect("renew"));
}

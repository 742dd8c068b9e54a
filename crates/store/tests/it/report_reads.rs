//! The reads behind a campaign report that the HTTP tests cannot reach at scale, and the
//! collision counts the report reads instead of the collision log (migration `0027`).

use std::collections::HashMap;

use traqlyte_store::{
    Assignment, AssignmentId, CampaignId, DedupeKey, NewOutcome, OutcomeResult, Store, StoreError,
    TenantId, TenantName, UnitId,
};

use crate::db::{on_both_backends, Backend, TestDb};

on_both_backends!(
    the_newest_duplicate_buckets_are_kept_when_the_cap_cuts,
    collision_counts_equal_the_attribution_from_the_log_after_mixed_batches,
    collisions_logged_before_migration_0027_are_counted_by_it,
);

const HOUR_US: i64 = 3_600_000_000;

/// Five hours of duplicates and room for three (hour, arm) rows: the three newest hours
/// are answered, oldest first, so a rising duplicate rate today is never cut off.
async fn the_newest_duplicate_buckets_are_kept_when_the_cap_cuts(backend: Backend) {
    let db = TestDb::create(backend).await;
    let store = db.store().await;
    store.migrate().await.expect("migrate");
    let name = TenantName::parse("buckets").expect("name");
    let (tenant, _) = store.create_tenant(&name).await.expect("tenant");
    let rows: Vec<String> = (0..5)
        .map(|hour| {
            format!(
                "('{}', 'cmp_1', 'as_{hour}', 'k', 'control', 0, 'm', NULL, 0, {})",
                tenant.as_str(),
                hour * HOUR_US + 1
            )
        })
        .collect();
    db.raw()
        .await
        .execute(&format!(
            "INSERT INTO outcome_duplicates VALUES {}",
            rows.join(", ")
        ))
        .await;
    let campaign = CampaignId::try_from("cmp_1").expect("campaign id");
    let buckets = store
        .duplicates_over_time(&tenant, &campaign, None, HOUR_US, 3)
        .await
        .expect("buckets");
    let starts: Vec<i64> = buckets.iter().map(|b| b.bucket_start_us).collect();
    assert_eq!(starts, vec![2 * HOUR_US, 3 * HOUR_US, 4 * HOUR_US]);
}

/// The campaign of these tests.
const CAMPAIGN: &str = "cmp_c0";

/// The collisions every test here logs, as `version/metric/arm=collisions`: one each way
/// a delivery collides (against an earlier batch's outcome, against one its own batch
/// inserted, twice with one payload, and naming another metric than the stored one,
/// counted under the stored one: `revenue`).
const EXPECTED: [&str; 4] = [
    "1/clicks/control=1",
    "1/revenue/treatment=2",
    "2/clicks/control=1",
    "2/clicks/treatment=2",
];

/// Four units of [`CAMPAIGN`]: (arm, version) control 1, treatment 1, control 2,
/// treatment 2.
fn assignments() -> Vec<Assignment> {
    [
        ("control", 1),
        ("treatment", 1),
        ("control", 2),
        ("treatment", 2),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, (arm, version))| Assignment {
        assignment_id: AssignmentId::try_from(format!("asg_{i:032x}")).expect("id"),
        campaign_id: CampaignId::try_from(CAMPAIGN).expect("campaign"),
        unit_id: UnitId::try_from(format!("unit-{i}")).expect("unit"),
        arm: arm.to_string(),
        version,
        assigned_at_us: 1,
    })
    .collect()
}

/// Inserts the assignments' rows, as assigning them would.
async fn insert_assignments(db: &TestDb, tenant: &TenantId, assignments: &[Assignment]) {
    let rows: Vec<String> = assignments
        .iter()
        .map(|a| {
            format!(
                "('{}', '{CAMPAIGN}', '{}', '{}', '{}', {}, {})",
                tenant.as_str(),
                a.unit_id.as_str(),
                a.assignment_id.as_str(),
                a.arm,
                a.version,
                a.assigned_at_us
            )
        })
        .collect();
    db.raw()
        .await
        .execute(&format!(
            "INSERT INTO assignments (tenant_id, campaign_id, unit_id, assignment_id, arm, version, assigned_at_us)
             VALUES {}",
            rows.join(", ")
        ))
        .await;
}

/// An outcome of `assignment` whose payload is its metric and value.
fn outcome(assignment: &Assignment, key: &str, metric: &str, value: f64) -> NewOutcome {
    NewOutcome {
        assignment: assignment.clone(),
        dedupe_key: DedupeKey::try_from(key).expect("key"),
        metric: metric.to_string(),
        value: Some(value),
        occurred_at_us: 2,
        window_us: HOUR_US,
        fingerprint: format!("{metric}={value}"),
        payload: format!(r#"{{"metric":"{metric}","value":{value}}}"#),
    }
}

/// The batches behind [`EXPECTED`]: first every unit's outcomes, then two batches mixing
/// inserts, retries and collisions.
fn batches(a: &[Assignment]) -> Vec<Vec<NewOutcome>> {
    let first = a
        .iter()
        .flat_map(|a| {
            [
                outcome(a, "k1", "clicks", 1.0),
                outcome(a, "k2", "revenue", 5.0),
            ]
        })
        .collect();
    let mixed = vec![
        outcome(&a[0], "k1", "clicks", 1.0),
        outcome(&a[0], "k1", "clicks", 2.0),
        outcome(&a[1], "k2", "clicks", 9.0),
        outcome(&a[2], "k3", "clicks", 1.0),
        outcome(&a[2], "k3", "clicks", 4.0),
        outcome(&a[3], "k1", "clicks", 1.0),
    ];
    let last = vec![
        outcome(&a[1], "k2", "revenue", 7.0),
        outcome(&a[3], "k1", "clicks", 3.0),
        outcome(&a[3], "k1", "clicks", 3.0),
        outcome(&a[0], "k2", "revenue", 5.0),
    ];
    vec![first, mixed, last]
}

/// The rows of `outcome_collision_counts`, as `version/metric/arm=collisions`.
async fn counted(db: &TestDb) -> Vec<String> {
    db.raw()
        .await
        .texts(
            "SELECT CAST(version AS TEXT) || '/' || metric || '/' || arm || '=' || CAST(collisions AS TEXT)
             FROM outcome_collision_counts ORDER BY 1",
        )
        .await
}

/// The collisions of the log attributed as the report did before the counts: to the
/// stored outcome's metric and arm, the assignment's version.
async fn attributed_from_the_log(db: &TestDb) -> Vec<String> {
    db.raw()
        .await
        .texts(
            "SELECT CAST(a.version AS TEXT) || '/' || o.metric || '/' || o.arm || '=' || CAST(COUNT(*) AS TEXT)
             FROM outcome_collisions c
             JOIN outcomes o ON o.tenant_id = c.tenant_id AND o.assignment_id = c.assignment_id
               AND o.dedupe_key = c.dedupe_key
             JOIN assignments a ON a.tenant_id = c.tenant_id AND a.assignment_id = c.assignment_id
             GROUP BY a.version, o.metric, o.arm ORDER BY 1",
        )
        .await
}

/// What the report reads: [`EXPECTED`] over every version, and one version's share.
async fn assert_the_report_reads_the_counts(store: &Store, tenant: &TenantId) {
    let campaign = CampaignId::try_from(CAMPAIGN).expect("campaign");
    let pairs = |list: &[(&str, &str, u64)]| -> HashMap<(String, String), u64> {
        list.iter()
            .map(|(m, a, n)| ((m.to_string(), a.to_string()), *n))
            .collect()
    };
    let all = store
        .outcome_collisions_per_arm(tenant, &campaign, None)
        .await
        .expect("collisions");
    let expected = [
        ("clicks", "control", 2),
        ("revenue", "treatment", 2),
        ("clicks", "treatment", 2),
    ];
    assert_eq!(all, pairs(&expected));
    let second = store
        .outcome_collisions_per_arm(tenant, &campaign, Some(2))
        .await
        .expect("collisions of version 2");
    assert_eq!(
        second,
        pairs(&[("clicks", "control", 1), ("clicks", "treatment", 2)])
    );
}

/// Every batch adds its collisions to the counts in its transaction, under the stored
/// outcome's metric and arm and the assignment's version: the counts equal what
/// attributing the whole log gives, and the report reads them.
async fn collision_counts_equal_the_attribution_from_the_log_after_mixed_batches(backend: Backend) {
    let db = TestDb::create(backend).await;
    let store = db.store().await;
    store.migrate().await.expect("migrate");
    let name = TenantName::parse("collisions").expect("name");
    let (tenant, _) = store.create_tenant(&name).await.expect("tenant");
    let assignments = assignments();
    insert_assignments(&db, &tenant, &assignments).await;
    let mut collisions = 0;
    for batch in batches(&assignments) {
        let mut tx = store.begin().await.expect("begin");
        let results = tx
            .record_outcomes(&tenant, &batch, 10)
            .await
            .expect("record");
        tx.commit().await.expect("commit");
        collisions += results
            .iter()
            .filter(|r| matches!(r, OutcomeResult::Collision(_)))
            .count();
    }
    assert_eq!(collisions, 6, "every way of colliding is exercised");
    assert_eq!(counted(&db).await, EXPECTED);
    assert_eq!(attributed_from_the_log(&db).await, EXPECTED);
    assert_the_report_reads_the_counts(&store, &tenant).await;
}

/// A database whose collisions were logged before the counts existed gets them counted
/// by the migration that creates the table, attributed as the report did.
async fn collisions_logged_before_migration_0027_are_counted_by_it(backend: Backend) {
    let db = TestDb::create(backend).await;
    let before_0027 = crate::migrate::migration_files(backend)
        .iter()
        .filter(|(version, _, _)| *version < 27)
        .count();
    crate::migrate::old_runner_database(&db, before_0027).await;
    let store = db.store().await;
    let name = TenantName::parse("logged").expect("name");
    let (tenant, _) = store.create_tenant(&name).await.expect("tenant");
    let assignments = assignments();
    insert_assignments(&db, &tenant, &assignments).await;
    // What the batches would have written before 0027: each key's first outcome and each
    // collision's log row.
    let mut stored: Vec<String> = Vec::new();
    let mut logged: Vec<String> = Vec::new();
    let mut seen = HashMap::new();
    for o in batches(&assignments).into_iter().flatten() {
        let a = &o.assignment;
        let key = (a.assignment_id.clone(), o.dedupe_key.clone());
        match seen.get(&key) {
            None => {
                let id = traqlyte_experiments::outcome_id(
                    tenant.as_str(),
                    &a.campaign_id,
                    &a.assignment_id,
                    &o.dedupe_key,
                );
                stored.push(format!(
                    "('{}', '{}', '{}', '{CAMPAIGN}', '{}', 1, '{}', {}, 2, 10, '{}', '{}')",
                    tenant.as_str(),
                    a.assignment_id.as_str(),
                    o.dedupe_key.as_str(),
                    a.arm,
                    o.metric,
                    o.value.expect("value"),
                    o.fingerprint,
                    id.as_str()
                ));
                seen.insert(key, o.fingerprint.clone());
            }
            Some(fingerprint) if *fingerprint != o.fingerprint => logged.push(format!(
                "('{}', '{}', '{}', '{CAMPAIGN}', '{}', 10)",
                tenant.as_str(),
                a.assignment_id.as_str(),
                o.dedupe_key.as_str(),
                o.payload
            )),
            Some(_) => {}
        }
    }
    assert_eq!(logged.len(), 6);
    db.raw()
        .await
        .execute(&format!(
            "INSERT INTO outcomes (tenant_id, assignment_id, dedupe_key, campaign_id, arm, assigned_at_us, metric, value, occurred_at_us, received_at_us, fingerprint, outcome_id)
             VALUES {};
             INSERT INTO outcome_collisions (tenant_id, assignment_id, dedupe_key, campaign_id, incoming_payload, received_at_us)
             VALUES {}",
            stored.join(", "),
            logged.join(", ")
        ))
        .await;

    let applied = store.migrate().await.expect("migrate");
    assert_eq!(
        applied.first().map(String::as_str),
        Some("0027_outcome_collision_counts")
    );
    assert_eq!(counted(&db).await, EXPECTED);
    assert_the_report_reads_the_counts(&store, &tenant).await;
}

/// A report's reads stop at the request timeout on PostgreSQL (`walk_timeout_ms`, the
/// store's bound on reads a request waits for), whatever holds them up: here a lock
/// another session holds on the table each reads. They ran on after the request's `408`,
/// each holding a pooled connection: a review's 16 reloads of a slow report (no table
/// statistics yet) held every connection for minutes, and writes of every tenant were
/// `503 store_busy`. The store's one connection serves the next read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reports_reads_stop_at_the_request_timeout_in_the_database() {
    let db = TestDb::create(Backend::Postgres).await;
    let (_, tenant) = db.store_with_tenant().await;
    let mut config = traqlyte_store::StoreConfig::new(&db.url);
    config.pool_connections_max = 1;
    config.walk_timeout_ms = 200;
    let store = Store::connect(&config).await.expect("connect");
    let campaign = CampaignId::try_from(CAMPAIGN).expect("campaign id");
    for table in [
        "unit_metrics",
        "assignments",
        "outcome_duplicates",
        "outcome_supersessions",
    ] {
        let mut holder = db.raw().await;
        holder
            .execute(&format!(
                "BEGIN; LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"
            ))
            .await;
        let reads = async {
            let errors = [
                store.units_by_version(&tenant, &campaign).await.err(),
                store
                    .duplicates_over_time(&tenant, &campaign, Some(1), HOUR_US, 10)
                    .await
                    .err(),
                store
                    .corrected_outcomes(&tenant, &campaign, Some(1))
                    .await
                    .err(),
                store.report_sums_by_version(&tenant, &campaign).await.err(),
            ];
            errors.into_iter().flatten().collect::<Vec<_>>()
        };
        let errors = tokio::time::timeout(std::time::Duration::from_secs(20), reads)
            .await
            .unwrap_or_else(|_| panic!("a read waited on the lock of {table}"));
        assert!(!errors.is_empty(), "{table}: no read met the lock");
        // The request timeout's own error (`408`), not the `503 statement_timeout` of a
        // write stopped by an operator's setting: it was the one or the other, by a race.
        assert!(
            errors
                .iter()
                .all(|err| matches!(err, StoreError::QueryTimeout)),
            "{table}: {errors:?}"
        );
        holder.execute("ROLLBACK").await;
        let units = store.units_by_version(&tenant, &campaign).await;
        assert!(units.is_ok(), "{table}: {units:?}");
    }
}

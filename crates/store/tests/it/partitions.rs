//! The bounded dedupe horizon: the pure decisions (the partition key of an occurrence
//! time, what the live path admits, what a maintenance run creates and detaches) and, on
//! PostgreSQL, the partitions themselves: existing rows migrated into day partitions,
//! detached days readable and reconciled by a backfill's transaction.

use serde_json::json;
use traqlyte_identity::Contract;
use traqlyte_store::partitions::{
    day_text, occurred_day, plan_maintenance, DETACH_GRACE_DAYS, FUTURE_SKEW_US,
    PARTITIONS_AHEAD_DAYS, UNTIMED_DAY,
};
use traqlyte_store::{DedupeHorizon, EventOutcome, NewEvent, OutsideHorizon, Store, StoreError};

use crate::db::{Backend, Raw, TestDb};

const DAY_US: i64 = 86_400_000_000;
/// 2026-12-01T00:00:00Z.
const DEC_1_US: i64 = 1_796_083_200_000_000;

#[test]
fn the_partition_key_is_the_utc_day_of_the_occurrence_time_floored() {
    let cases = [
        (Some(0), 0, "1970-01-01"),
        (Some(DAY_US - 1), 0, "1970-01-01"),
        (Some(-1), -1, "1969-12-31"),
        (Some(DEC_1_US), 20_788, "2026-12-01"),
        (Some(DEC_1_US - 1), 20_787, "2026-11-30"),
        (Some(-62_135_596_800_000_000), -719_162, "0001-01-01"),
        (Some(253_402_300_799_999_999), 2_932_896, "9999-12-31"),
    ];
    for (at, day, text) in cases {
        assert_eq!(occurred_day(at), day, "{at:?}");
        assert_eq!(day_text(day), text, "{at:?}");
    }
    assert_eq!(occurred_day(None), UNTIMED_DAY);
}

#[test]
fn the_live_path_admits_the_horizon_and_a_day_of_skew_and_every_untimed_event() {
    let horizon = DedupeHorizon::new(14).expect("horizon");
    let now = DEC_1_US + 12 * 3_600_000_000;
    let cases = [
        (None, Ok(())),
        (Some(now), Ok(())),
        (Some(now - 14 * DAY_US), Ok(())),
        (Some(now - 14 * DAY_US - 1), Err(OutsideHorizon::TooOld)),
        (Some(now + FUTURE_SKEW_US), Ok(())),
        (
            Some(now + FUTURE_SKEW_US + 1),
            Err(OutsideHorizon::TooFarAhead),
        ),
    ];
    for (at, expected) in cases {
        assert_eq!(horizon.admits(at, now), expected, "{at:?}");
    }
    assert_eq!(DedupeHorizon::new(0), None);
    assert_eq!(DedupeHorizon::new(DedupeHorizon::DAYS_MAX + 1), None);
    assert_eq!(DedupeHorizon::default().days(), 14);
}

#[test]
fn maintenance_creates_the_missing_days_and_detaches_the_old_ones_never_reattaching() {
    let horizon = DedupeHorizon::new(2).expect("horizon");
    let today = occurred_day(Some(DEC_1_US));
    let first = today - 2 - DETACH_GRACE_DAYS;
    // A fresh database: every day from the first attached one to the days ahead.
    let fresh = plan_maintenance(&[UNTIMED_DAY], &[], &horizon, DEC_1_US);
    assert_eq!(
        fresh.create,
        (first..=today + PARTITIONS_AHEAD_DAYS).collect::<Vec<_>>()
    );
    assert!(fresh.detach.is_empty());
    // Two days later: two new days ahead, the two oldest detached; the untimed partition
    // stays.
    let attached: Vec<i32> = std::iter::once(UNTIMED_DAY).chain(fresh.create).collect();
    let later = plan_maintenance(&attached, &[], &horizon, DEC_1_US + 2 * DAY_US);
    assert_eq!(
        later.create,
        vec![
            today + PARTITIONS_AHEAD_DAYS + 1,
            today + PARTITIONS_AHEAD_DAYS + 2
        ]
    );
    assert_eq!(later.detach, vec![first, first + 1]);
    // A detached day inside a longer horizon is not created again.
    let longer = DedupeHorizon::new(10).expect("horizon");
    let again = plan_maintenance(&attached, &[first - 1], &longer, DEC_1_US);
    assert!(!again.create.contains(&(first - 1)));
    assert!(again.create.contains(&(first - 2)));
}

fn contract() -> Contract {
    Contract::from_json(&json!({
        "name": "order", "version": 1, "fields": [{"pointer": "/order", "required": true}],
        "occurred_at": "/at"
    }))
    .expect("contract")
}

fn event(order: &str, at_us: i64, note: &str) -> NewEvent {
    let at = traqlyte_identity::format_rfc3339_micros(at_us);
    let value = json!({"order": order, "at": at, "note": note});
    NewEvent {
        identified: contract().identify(&value).expect("identified"),
        payload: value.to_string(),
    }
}

async fn tenant(store: &Store) -> traqlyte_store::TenantId {
    let name = traqlyte_store::TenantName::parse("partitions").expect("name");
    let (tenant, _) = store.create_tenant(&name).await.expect("tenant");
    tenant
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_of_an_unpartitioned_table_move_into_day_partitions_when_migrated() {
    let db = TestDb::create(Backend::Postgres).await;
    crate::migrate::old_runner_database(&db, 9).await;
    let mut raw = db.raw().await;
    raw.execute(&format!(
        "INSERT INTO events (tenant_id, contract_name, event_id, contract_version, fingerprint, payload, occurred_at_us, received_at_us)
         VALUES ('tn_a', 'order', repeat('a', 64), 1, repeat('f', 64), '{{}}', {DEC_1_US}, 1),
                ('tn_a', 'order', repeat('b', 64), 1, repeat('f', 64), '{{}}', {}, 1),
                ('tn_a', 'order', repeat('c', 64), 1, repeat('f', 64), '{{}}', NULL, 1)",
        DEC_1_US - 1
    ))
    .await;
    db.store().await.migrate().await.expect("migrate");
    let partitions = db.store().await.partitions().await.expect("partitions");
    let rows: Vec<(&str, i64, bool)> = partitions
        .iter()
        .map(|p| (p.table.as_str(), p.rows, p.attached))
        .collect();
    assert_eq!(
        rows,
        vec![
            ("events_detached_default", 0, false),
            ("events_untimed", 1, true),
            ("events_p20261130", 1, true),
            ("events_p20261201", 1, true),
        ]
    );
    assert!(matches!(raw, Raw::Postgres(_)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_day_stays_readable_and_only_a_backfill_transaction_writes_it() {
    let db = TestDb::create(Backend::Postgres).await;
    let store = db.store().await;
    store.migrate().await.expect("migrate");
    let tenant = tenant(&store).await;
    let now = traqlyte_store::now_us();
    let horizon = DedupeHorizon::new(14).expect("horizon");
    let done = store
        .maintain_partitions(&horizon, now)
        .await
        .expect("maintain");
    assert_eq!(done.create.len(), 14 + 1 + 1 + 3);
    let old = event("o-1", now - 10 * DAY_US, "original");
    let outcomes = store
        .insert_events(&tenant, &contract(), std::slice::from_ref(&old))
        .await
        .expect("insert");
    assert_eq!(outcomes, vec![EventOutcome::Inserted]);
    // A shorter horizon detaches the event's day.
    let short = DedupeHorizon::new(5).expect("horizon");
    let done = store
        .maintain_partitions(&short, now)
        .await
        .expect("maintain");
    assert!(done.detach.contains(&occurred_day(Some(now - 10 * DAY_US))));
    let name = contract().name().clone();
    let stored = store
        .event(&tenant, &name, &old.identified.event_id)
        .await
        .expect("read")
        .expect("still readable");
    assert_eq!(stored.fingerprint, old.identified.fingerprint);
    // The live path cannot write the detached day: an error, never a second row.
    let live = store
        .insert_events(&tenant, &contract(), std::slice::from_ref(&old))
        .await;
    assert!(matches!(live, Err(StoreError::OutsideHorizon)), "{live:?}");
    // A backfill's transaction reconciles against the detached row: a retry, a
    // collision, and a new event of the same old day (which the detached partition takes).
    let mut tx = store.begin_backfill().await.expect("begin");
    let batch = [
        old.clone(),
        event("o-1", now - 10 * DAY_US, "edited"),
        event("o-2", now - 10 * DAY_US, "new"),
        event("o-3", now - 400 * DAY_US, "a day no partition ever had"),
        event("o-4", now, "today"),
    ];
    let outcomes = tx
        .insert_events(&tenant, &contract(), &batch)
        .await
        .expect("backfill");
    tx.commit().await.expect("commit");
    assert!(matches!(
        outcomes.as_slice(),
        [
            EventOutcome::Duplicate,
            EventOutcome::Collision { .. },
            EventOutcome::Inserted,
            EventOutcome::Inserted,
            EventOutcome::Inserted
        ]
    ));
    let mut tx = store.begin_backfill().await.expect("begin");
    let again = tx
        .insert_events(&tenant, &contract(), &batch)
        .await
        .expect("backfill again");
    tx.rollback().await.expect("rollback");
    assert!(!again.contains(&EventOutcome::Inserted), "{again:?}");
    let partitions = store.partitions().await.expect("partitions");
    let detached_rows: i64 = partitions
        .iter()
        .filter(|p| !p.attached)
        .map(|p| p.rows)
        .sum();
    assert_eq!(detached_rows, 3, "{partitions:#?}");
}

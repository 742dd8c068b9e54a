//! The bounded dedupe horizon: the pure decisions (the partition key of an occurrence
//! time, what the live path admits, what a maintenance run creates and detaches) and, on
//! PostgreSQL, the partitions themselves: existing rows migrated into day partitions,
//! detached days readable and reconciled by a backfill's transaction.

use serde_json::json;
use traqlyte_identity::Contract;
use traqlyte_store::partitions::{
    day_text, gap_days, occurred_day, plan_maintenance, DETACH_GRACE_DAYS, FUTURE_SKEW_US,
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

#[test]
fn the_gap_is_every_day_without_a_partition_from_the_oldest_attached_one_on() {
    let attached = [UNTIMED_DAY, 10, 11, 15, 16];
    assert_eq!(gap_days(&attached, &[12], 15), vec![13, 14]);
    assert_eq!(gap_days(&attached, &[], 11), Vec::<i32>::new());
    assert_eq!(gap_days(&[UNTIMED_DAY], &[3], 15), Vec::<i32>::new());
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

/// Migrates `db`, then checks its partitions as (table, rows, attached).
async fn assert_migrated_partitions(db: &TestDb, expected: &[(&str, i64, bool)]) {
    db.store().await.migrate().await.expect("migrate");
    let partitions = db.store().await.partitions().await.expect("partitions");
    let rows: Vec<(&str, i64, bool)> = partitions
        .iter()
        .map(|p| (p.table.as_str(), p.rows, p.attached))
        .collect();
    assert_eq!(rows, expected);
}

/// A migrated PostgreSQL store with a tenant, and the time it was made.
async fn migrated_store() -> (TestDb, Store, traqlyte_store::TenantId, i64) {
    let db = TestDb::create(Backend::Postgres).await;
    let store = db.store().await;
    store.migrate().await.expect("migrate");
    let tenant = tenant(&store).await;
    (db, store, tenant, traqlyte_store::now_us())
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
    assert_migrated_partitions(
        &db,
        &[
            ("events_untimed", 1, true),
            ("events_p20261130", 1, true),
            ("events_p20261201", 1, true),
        ],
    )
    .await;
    assert!(matches!(raw, Raw::Postgres(_)));
}

/// Migration 0022 empties the default partition 0010 gave `events_detached`: each day it
/// held gets a detached table of its own, or, where that day later got an attached
/// partition (the defect 0022 fixes), its rows join it. Where both held a key, the row
/// received first stays, whichever table it was in, and a later copy with other content
/// is logged as a collision. Then the default partition goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_detached_default_partitions_rows_move_into_tables_of_their_days() {
    let db = TestDb::create(Backend::Postgres).await;
    let before_0022 = 19;
    crate::migrate::old_runner_database(&db, before_0022).await;
    let mut raw = db.raw().await;
    let (live_day, old_day) = (20_788, 20_000);
    // (id, fingerprint, payload, received at, day)
    let row = |id: char, fingerprint: char, payload: &str, received: i64, day: i32| {
        format!(
            "('tn_a', 'order', decode(repeat('{id}', 64), 'hex'), 1, repeat('{fingerprint}', 64), '{payload}', {}, {received}, {day})",
            i64::from(day) * DAY_US
        )
    };
    raw.execute(&format!(
        "CREATE TABLE events_p20261201 PARTITION OF events FOR VALUES FROM ({live_day}) TO ({});
         INSERT INTO events VALUES {}, {}, {};
         INSERT INTO events_detached_default VALUES {}, {}, {}, {}, {}",
        live_day + 1,
        row('a', 'f', "live a", 2, live_day),
        row('d', 'e', "live d", 2, live_day),
        row('e', 'f', "live e", 1, live_day),
        row('a', 'f', "backfilled a", 1, live_day),
        row('d', 'f', "backfilled d", 1, live_day),
        row('e', 'e', "backfilled e", 5, live_day),
        row('b', 'f', "backfilled b", 1, live_day),
        row('c', 'f', "backfilled c", 1, old_day),
    ))
    .await;
    assert_migrated_partitions(
        &db,
        &[
            ("events_untimed", 0, true),
            ("events_p20241004", 1, false),
            ("events_p20261201", 4, true),
        ],
    )
    .await;
    // The first received of each key: a and d as backfilled, e as stored live.
    let kept = raw
        .integers("SELECT received_at_us FROM events_p20261201 ORDER BY event_id")
        .await;
    assert_eq!(kept, vec![1, 1, 1, 1]);
    let stored = raw
        .integers(
            "SELECT COUNT(*) FROM events_p20261201
              WHERE payload IN ('backfilled a', 'backfilled b', 'backfilled d', 'live e')",
        )
        .await;
    assert_eq!(stored, vec![4]);
    let collisions = raw
        .integers(
            "SELECT received_at_us FROM event_collisions
              WHERE source = 'migration' AND stored_fingerprint = repeat('f', 64)
                AND incoming_fingerprint = repeat('e', 64)
              ORDER BY received_at_us",
        )
        .await;
    assert_eq!(collisions, vec![2, 5]);
    let defaults = raw
        .integers("SELECT COUNT(*) FROM pg_class WHERE relname = 'events_detached_default'")
        .await;
    assert_eq!(defaults, vec![0]);
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
    // The day no partition ever had got a detached table of its own, so a horizon long
    // enough to reach it creates no attached twin: a live retry of its backfilled event
    // is refused, never stored twice, and maintenance goes on working afterwards.
    let day_400 = occurred_day(Some(now - 400 * DAY_US));
    let table_400 = format!("events_p{}", day_text(day_400).replace('-', ""));
    assert!(
        partitions
            .iter()
            .any(|p| p.table == table_400 && !p.attached && p.rows == 1),
        "{partitions:#?}"
    );
    let long = DedupeHorizon::new(500).expect("horizon");
    let done = store
        .maintain_partitions(&long, now)
        .await
        .expect("maintain with a longer horizon");
    assert!(!done.create.contains(&day_400), "{done:?}");
    let retry = event("o-3", now - 400 * DAY_US, "a day no partition ever had");
    let live = store
        .insert_events(&tenant, &contract(), std::slice::from_ref(&retry))
        .await;
    assert!(matches!(live, Err(StoreError::OutsideHorizon)), "{live:?}");
    store
        .maintain_partitions(&short, now)
        .await
        .expect("detaching the longer horizon's days again");
    let rows = db
        .raw()
        .await
        .integers("SELECT COUNT(*) FROM events_any_age WHERE payload LIKE '%o-3%'")
        .await;
    assert_eq!(rows, vec![1]);
}

/// An old day's detached partition is created in a short transaction of its own: an open
/// backfill transaction (a dry run is one for the whole file) that gave one day its table
/// holds no lock that stops another backfill giving another day its table, nor a reader
/// of the detached rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_backfill_that_created_an_old_days_table_blocks_no_other_backfill_or_reader() {
    let (_db, store, tenant, now) = migrated_store().await;
    let horizon = DedupeHorizon::new(14).expect("horizon");
    store
        .maintain_partitions(&horizon, now)
        .await
        .expect("maintain");
    let name = contract().name().clone();
    let stored = event("o-stored", now - 300 * DAY_US, "stored before");
    let mut tx = store.begin_backfill().await.expect("begin");
    tx.insert_events(&tenant, &contract(), std::slice::from_ref(&stored))
        .await
        .expect("backfill");
    tx.commit().await.expect("commit");

    let mut open = store.begin_backfill().await.expect("begin");
    let first = event("o-1", now - 200 * DAY_US, "first");
    let outcomes = open
        .insert_events(&tenant, &contract(), std::slice::from_ref(&first))
        .await
        .expect("backfill one old day");
    assert_eq!(outcomes, vec![EventOutcome::Inserted]);
    let limit = std::time::Duration::from_secs(20);
    let other = async {
        let mut tx = store.begin_backfill().await.expect("begin");
        let second = event("o-2", now - 100 * DAY_US, "second");
        let outcomes = tx
            .insert_events(&tenant, &contract(), std::slice::from_ref(&second))
            .await
            .expect("backfill another old day");
        tx.commit().await.expect("commit");
        outcomes
    };
    let outcomes = tokio::time::timeout(limit, other)
        .await
        .expect("the other backfill waited for the open one");
    assert_eq!(outcomes, vec![EventOutcome::Inserted]);
    let read = tokio::time::timeout(
        limit,
        store.event(&tenant, &name, &stored.identified.event_id),
    )
    .await
    .expect("the reader waited for the open backfill")
    .expect("read");
    assert!(read.is_some());
    open.commit().await.expect("commit");
    let detached: Vec<i64> = store
        .partitions()
        .await
        .expect("partitions")
        .iter()
        .filter(|p| !p.attached)
        .map(|p| p.rows)
        .collect();
    assert_eq!(detached, vec![1, 1, 1]);
}

/// `serve` down for longer than its horizon, then a backfill run with a shorter one:
/// the days between the oldest attached day and the backfill's horizon get attached
/// partitions, not detached ones, so once `serve` runs its maintenance again the days it
/// admits are attached and a live retry of a backfilled event is a duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shorter_backfill_horizon_after_downtime_fills_the_gap_with_attached_days() {
    let (_db, store, tenant, now) = migrated_store().await;
    let serve = DedupeHorizon::new(14).expect("horizon");
    store
        .maintain_partitions(&serve, now - 30 * DAY_US)
        .await
        .expect("serve's last run, 30 days ago");
    let short = DedupeHorizon::new(3).expect("horizon");
    let created = store
        .create_partitions(&short, now)
        .await
        .expect("the backfill's partitions");
    let day_10 = occurred_day(Some(now - 10 * DAY_US));
    assert!(created.create.contains(&day_10), "{created:?}");
    let backfilled = event("o-gap", now - 10 * DAY_US, "backfilled");
    let mut tx = store.begin_backfill().await.expect("begin");
    let outcomes = tx
        .insert_events(&tenant, &contract(), std::slice::from_ref(&backfilled))
        .await
        .expect("backfill");
    tx.commit().await.expect("commit");
    assert_eq!(outcomes, vec![EventOutcome::Inserted]);
    let done = store
        .maintain_partitions(&serve, now)
        .await
        .expect("serve's run now");
    assert!(!done.detach.contains(&day_10), "{done:?}");
    let live = store
        .insert_events(&tenant, &contract(), std::slice::from_ref(&backfilled))
        .await
        .expect("a live retry");
    assert_eq!(live, vec![EventOutcome::Duplicate]);
    let attached = store
        .partitions()
        .await
        .expect("partitions")
        .iter()
        .any(|p| p.attached && p.rows == 1 && p.from_day == Some(day_text(day_10)));
    assert!(attached);
}

/// A backfill's transaction on a pool of one connection still gets an old day its
/// detached partition: the partition is created on the store's own DDL connection, not
/// on a second connection of the pool the open transaction holds (which waited out the
/// pool's 30 s acquire timeout, then failed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_on_a_pool_of_one_connection_creates_an_old_day() {
    let db = TestDb::create(Backend::Postgres).await;
    let config = traqlyte_store::StoreConfig {
        pool_connections_max: 1,
        ..traqlyte_store::StoreConfig::new(&db.url)
    };
    let store = Store::connect(&config).await.expect("connect");
    store.migrate().await.expect("migrate");
    let tenant = tenant(&store).await;
    let now = traqlyte_store::now_us();
    let horizon = DedupeHorizon::new(14).expect("horizon");
    store
        .maintain_partitions(&horizon, now)
        .await
        .expect("maintain");
    let old = event("o-1", now - 400 * DAY_US, "a day no partition had");
    let backfill = async {
        let mut tx = store.begin_backfill().await.expect("begin");
        let outcomes = tx
            .insert_events(&tenant, &contract(), std::slice::from_ref(&old))
            .await
            .expect("backfill");
        tx.commit().await.expect("commit");
        outcomes
    };
    let outcomes = tokio::time::timeout(std::time::Duration::from_secs(10), backfill)
        .await
        .expect("the old day's partition was created without waiting for the pool");
    assert_eq!(outcomes, vec![EventOutcome::Inserted]);
    let stored = store
        .event(&tenant, contract().name(), &old.identified.event_id)
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(stored.fingerprint, old.identified.fingerprint);
}

/// Creating days takes no lock that ingestion or a reader holds: a transaction that has
/// inserted into `events` and one reading it stay open while maintenance adds sixteen
/// days (each built apart, then attached), and maintenance does not wait its 5 s lock
/// timeout for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creating_days_waits_for_no_open_writer_or_reader() {
    let (db, store, tenant, now) = migrated_store().await;
    store
        .maintain_partitions(&DedupeHorizon::new(14).expect("horizon"), now)
        .await
        .expect("maintain");
    let mut writing = store.begin().await.expect("begin");
    writing
        .insert_events(&tenant, &contract(), &[event("o-open", now, "open")])
        .await
        .expect("insert");
    let mut reader = db.raw().await;
    reader.execute("BEGIN").await;
    assert_eq!(reader.integers("SELECT COUNT(*) FROM events").await, [0]);
    let started = std::time::Instant::now();
    let created = store
        .maintain_partitions(&DedupeHorizon::new(30).expect("horizon"), now)
        .await
        .expect("maintenance beside an open writer and reader");
    assert_eq!(created.create.len(), 16, "{created:?}");
    // Below the 5 s it would have waited; the rest is margin for a loaded machine.
    assert!(
        started.elapsed() < std::time::Duration::from_millis(4_900),
        "waited {:?}",
        started.elapsed()
    );
    writing.commit().await.expect("commit");
    reader.execute("COMMIT").await;
    // A day created this way takes events and keeps their key.
    let old = event("o-old", now - 20 * DAY_US, "old");
    for expected in [EventOutcome::Inserted, EventOutcome::Duplicate] {
        let mut tx = store.begin().await.expect("begin");
        let outcomes = tx
            .insert_events(&tenant, &contract(), std::slice::from_ref(&old))
            .await
            .expect("insert");
        tx.commit().await.expect("commit");
        assert_eq!(outcomes, [expected]);
    }
}

/// A detach needs `ACCESS EXCLUSIVE` on `events`, and every insert queues behind it while
/// it waits: behind a reader that holds on (a `pg_dump`, a long report) it gives up within
/// `DETACH_LOCK_TIMEOUT_MS`, so a write waits that long at most; it waited out the 5 s of
/// the other partition locks, a write stall once a minute for as long as the dump ran.
/// The days the same run created stay created (they rolled back with the detach, so a
/// lock held for days left the live path without tomorrow's partition). Once the reader
/// is gone the next run detaches.
#[tokio::test]
async fn a_detach_behind_a_long_reader_gives_up_at_once_and_writes_wait_no_longer() {
    let (db, store, tenant, now) = migrated_store().await;
    store
        .maintain_partitions(&DedupeHorizon::new(14).expect("horizon"), now)
        .await
        .expect("maintain");
    let mut dump = db.raw().await;
    dump.execute("BEGIN").await;
    assert_eq!(dump.integers("SELECT COUNT(*) FROM events").await, [0]);
    let short = DedupeHorizon::new(5).expect("horizon");
    let started = std::time::Instant::now();
    let write = async {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let at = std::time::Instant::now();
        let outcomes = store
            .insert_events(&tenant, &contract(), &[event("o-now", now, "now")])
            .await
            .expect("insert");
        (outcomes, at.elapsed())
    };
    let later = now + 3 * DAY_US;
    assert!(!store.live_partitions_ready(later).await.expect("ready"));
    let (maintained, (outcomes, waited)) =
        tokio::join!(store.maintain_partitions(&short, later), write);
    assert!(
        matches!(maintained, Err(StoreError::DetachWaiting { .. })),
        "{maintained:?}"
    );
    let message = maintained.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("tries again"), "{message}");
    // It gives up at 200 ms, where it waited 5 s; the bounds leave a loaded machine room.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(4),
        "gave up after {:?}",
        started.elapsed()
    );
    assert_eq!(outcomes, [EventOutcome::Inserted]);
    assert!(
        waited < std::time::Duration::from_secs(4),
        "a write waited {waited:?}"
    );
    assert!(store.live_partitions_ready(later).await.expect("ready"));
    dump.execute("COMMIT").await;
    let done = store
        .maintain_partitions(&short, later)
        .await
        .expect("maintain once the reader is gone");
    assert!(!done.detach.is_empty(), "{done:?}");
}

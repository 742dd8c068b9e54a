//! The bounded dedupe horizon through the API and the CLI: the live path refuses what
//! lies outside it and writes nothing; duplicates sent from several processes across a
//! day boundary, while partitions are created and detached, are stored once; a detached
//! day stays readable and `traqlyte partitions` shows it.

use std::process::Command;

use reqwest::StatusCode;
use serde_json::{json, Value};
use traqlyte_identity::{format_rfc3339_micros, Contract};
use traqlyte_server::ServerConfig;
use traqlyte_store::DedupeHorizon;

use crate::helpers::{
    checkout_contract, checkout_event, fire_from_processes, spawn_app, spawn_app_with, Backend,
    TestApp,
};

crate::on_both_backends!(
    an_event_outside_the_horizon_is_refused_by_the_live_path_and_nothing_is_written,
    duplicates_straddling_midnight_from_several_processes_while_partitions_change_are_stored_once,
    a_detached_day_stays_readable_and_partitions_status_shows_it,
    late_events_taken_by_reconciliation_are_counted_apart,
);

pub(crate) const DAY_US: i64 = 86_400_000_000;

/// A server with the product's defaults: a 14-day horizon, late events refused.
pub(crate) async fn spawn_refusing_app(backend: Backend) -> TestApp {
    let app = spawn_app_with(backend, ServerConfig::default()).await;
    app.register_checkout_contract().await;
    app
}

/// A checkout event that occurred at `at_us`.
pub(crate) fn event_at(order: &str, at_us: i64) -> Value {
    let mut event = checkout_event(order);
    event["occurred_at"] = json!(format_rfc3339_micros(at_us));
    event
}

/// The id the server gives `event`.
pub(crate) fn id_of(event: &Value) -> String {
    let contract = Contract::from_json(&checkout_contract()).expect("contract");
    let identified = contract.identify(event).expect("identified");
    identified.event_id.to_string()
}

/// Runs `traqlyte ARGS --database-url URL` and reads its JSON output.
pub(crate) fn cli_json(app: &TestApp, args: &[&str]) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_traqlyte"))
        .args(args)
        .args(["--database-url", app.database_url()])
        .output()
        .expect("run traqlyte");
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8(output.stdout).expect("utf-8");
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

async fn an_event_outside_the_horizon_is_refused_by_the_live_path_and_nothing_is_written(
    backend: Backend,
) {
    let app = spawn_refusing_app(backend).await;
    let now = traqlyte_store::now_us();
    let old = event_at("order_old", now - 20 * DAY_US);
    let answer = app.post_event(&old).await;
    assert_eq!(
        answer.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        answer.body
    );
    assert_eq!(answer.code(), "outside_horizon");
    assert_eq!(answer.body["error"]["field"], "/occurred_at");
    let message = answer.body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("traqlyte backfill"), "{message}");
    let ahead = app
        .post_event(&event_at("order_ahead", now + 3 * DAY_US))
        .await;
    assert_eq!(ahead.code(), "outside_horizon", "{}", ahead.body);
    // An event from the future is a clock to fix, not a late event to backfill.
    let message = ahead.body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("producer's clock") && !message.contains("backfill"),
        "{message}"
    );

    let fresh = event_at("order_fresh", now - DAY_US);
    let batch = app
        .post_json("/events/checkout_completed/batch", &json!([old, fresh]))
        .await;
    assert_eq!(
        batch.item_statuses(),
        vec!["rejected", "inserted"],
        "{}",
        batch.body
    );
    assert_eq!(batch.body["results"][0]["error"]["code"], "outside_horizon");
    let mut untimed = checkout_event("order_untimed");
    untimed.as_object_mut().map(|e| e.remove("occurred_at"));
    assert_eq!(app.post_event(&untimed).await.body["status"], "inserted");

    let missing = app
        .get(&format!("/events/checkout_completed/{}", id_of(&old)))
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND, "nothing was written");
    assert_eq!(app.checkout_stats().await, (2, 0, 0));

    // OpenLineage's eventTime is transport metadata a retry may restamp, so run events
    // are partitioned by no time: an old one is taken (docs/lineage.md).
    let run = json!({
        "eventType": "COMPLETE", "eventTime": "2019-05-09T03:05:00Z",
        "producer": "https://example.com/etl",
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
        "run": {"runId": "0193a1f0-0000-7000-8000-00000000000b"},
        "job": {"namespace": "etl", "name": "yearly"}, "inputs": [], "outputs": []
    });
    let stored = app.post_json("/api/v1/lineage", &run).await;
    assert_eq!(stored.status, StatusCode::CREATED, "{}", stored.body);
}

/// `serve --late-events reconcile` (the `spawn_app` default): events before the horizon
/// are taken, stored once through the detached partitions, and counted apart under
/// `late` in `GET /stats`; fresh events are not. SQLite has one table and nothing late.
async fn late_events_taken_by_reconciliation_are_counted_apart(backend: Backend) {
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    let now = traqlyte_store::now_us();
    let late = event_at("order_late", now - 20 * DAY_US);
    let mut late_retry = late.clone();
    late_retry["attempt"] = json!(2);
    let fresh = event_at("order_fresh", now - DAY_US);
    let first = app.post_event(&late).await;
    assert_eq!(first.body["status"], "inserted", "{}", first.body);
    let batch = app
        .post_json(
            "/events/checkout_completed/batch",
            &json!([late_retry, fresh.clone()]),
        )
        .await;
    assert_eq!(
        batch.item_statuses(),
        vec!["duplicate", "inserted"],
        "{}",
        batch.body
    );
    // A batch of fresh events only takes the live transaction and is not late.
    let again = app
        .post_json("/events/checkout_completed/batch", &json!([fresh]))
        .await;
    assert_eq!(again.item_statuses(), vec!["duplicate"], "{}", again.body);
    assert_eq!(app.checkout_stats().await, (2, 2, 0));
    let stats = app.get("/stats").await.body;
    let expected_late = match backend {
        Backend::Postgres => 2,
        Backend::Sqlite => 0,
    };
    assert_eq!(
        stats["contracts"]["checkout_completed"]["late"],
        json!(expected_late),
        "{stats}"
    );
    let stored = app
        .get(&format!("/events/checkout_completed/{}", id_of(&late)))
        .await;
    assert_eq!(stored.status, StatusCode::OK, "{}", stored.body);
    // Late events are taken for a year past the horizon, no further: a client's times
    // must not choose how many old days' tables the server creates.
    let horizon_days = i64::from(DedupeHorizon::DEFAULT_DAYS);
    let late_days = i64::from(DedupeHorizon::LATE_DAYS_MAX);
    let within = event_at(
        "order_within",
        now - (horizon_days + late_days - 1) * DAY_US,
    );
    let answer = app.post_event(&within).await;
    assert_eq!(answer.body["status"], "inserted", "{}", answer.body);
    let past = event_at("order_past", now - (horizon_days + late_days + 1) * DAY_US);
    let refused = app.post_event(&past).await;
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "outside_horizon"),
        "{}",
        refused.body
    );
    assert_eq!(refused.body["error"]["field"], "/occurred_at");
    let message = refused.body["error"]["message"].as_str().unwrap_or("");
    assert!(
        message.contains("366 days past it") && message.contains("traqlyte backfill"),
        "{message}"
    );
    assert_eq!(
        app.checkout_stats().await,
        (3, 2, 0),
        "nothing of it was written"
    );
    // A day inside this server's horizon that maintenance with a shorter one detached:
    // a batch of it and a recent event, none before the horizon, is reconciled whole (it
    // was `422`, the recent event unstored).
    cli_json(
        &app,
        &[
            "partitions",
            "maintain",
            "--dedupe-horizon-days",
            "2",
            "--json",
        ],
    );
    let batch = json!([
        event_at("order_recent", now),
        event_at("order_detached", now - 3 * DAY_US)
    ]);
    let answer = app
        .post_json("/events/checkout_completed/batch", &batch)
        .await;
    assert_eq!(
        answer.item_statuses(),
        vec!["inserted", "inserted"],
        "{}",
        answer.body
    );
    assert_eq!(app.checkout_stats().await, (5, 2, 0));
}

async fn duplicates_straddling_midnight_from_several_processes_while_partitions_change_are_stored_once(
    backend: Backend,
) {
    let app = spawn_refusing_app(backend).await;
    let now = traqlyte_store::now_us();
    let midnight = now - now.rem_euclid(DAY_US);
    let before = event_at("order_before_midnight", midnight - 1);
    let after = event_at("order_after_midnight", midnight);
    let horizon = DedupeHorizon::default();
    // Old days to detach while the duplicates arrive.
    app.store
        .maintain_partitions(&horizon, now - 40 * DAY_US)
        .await
        .expect("old partitions");
    let url = app.url("/events/checkout_completed");
    let urls = [url];
    let firing = async {
        let (a, b) = tokio::join!(
            fire_from_processes(&urls, &app.key, &before, 2, 150, &[]),
            fire_from_processes(&urls, &app.key, &after, 2, 150, &[]),
        );
        a.into_iter().chain(b).collect::<Vec<Value>>()
    };
    let maintaining = async {
        // Detach the old days, then, with a clock moving on a day a step, create a day
        // ahead and detach a day behind each step (never yesterday: ten days at most).
        let mut changes = 0;
        for step in 0..=10 {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            let at = now + step * DAY_US;
            if let Ok(done) = app.store.maintain_partitions(&horizon, at).await {
                changes += done.create.len() + done.detach.len();
            }
        }
        changes
    };
    let (reports, changes) = tokio::join!(firing, maintaining);
    if backend == Backend::Postgres {
        assert!(
            changes > 0,
            "partitions were created and detached meanwhile"
        );
    }
    for report in &reports {
        let statuses = report["statuses"].as_object().expect("statuses");
        assert!(
            statuses.keys().all(|status| status == "200"),
            "every delivery acknowledged: {report}"
        );
    }
    let (stored, duplicates, collisions) = app.checkout_stats().await;
    assert_eq!((stored, duplicates, collisions), (2, 600 - 2, 0));
    for event in [&before, &after] {
        let answer = app
            .get(&format!("/events/checkout_completed/{}", id_of(event)))
            .await;
        assert_eq!(answer.status, StatusCode::OK);
    }
}

async fn a_detached_day_stays_readable_and_partitions_status_shows_it(backend: Backend) {
    let app = spawn_refusing_app(backend).await;
    let now = traqlyte_store::now_us();
    let at = now - 12 * DAY_US;
    let event = event_at("order_twelve_days_ago", at);
    assert_eq!(app.post_event(&event).await.body["status"], "inserted");
    let done = cli_json(
        &app,
        &[
            "partitions",
            "maintain",
            "--dedupe-horizon-days",
            "5",
            "--json",
        ],
    );
    let status = cli_json(&app, &["partitions", "status", "--json"]);
    let day = format_rfc3339_micros(at)[..10].to_string();
    let path = format!("/events/checkout_completed/{}", id_of(&event));
    assert_eq!(
        app.get(&path).await.status,
        StatusCode::OK,
        "still readable"
    );
    let again = app.post_event(&event).await;
    match backend {
        Backend::Sqlite => {
            assert_eq!(status, json!([]), "SQLite keeps one table");
            assert_eq!(again.body["status"], "duplicate");
        }
        Backend::Postgres => {
            let detached = done["detached"].as_array().expect("detached days");
            assert!(detached.contains(&json!(day)), "{done}");
            let partition = status
                .as_array()
                .and_then(|all| all.iter().find(|p| p["from_day"] == json!(day)))
                .unwrap_or_else(|| panic!("no partition of {day}: {status}"));
            assert_eq!(partition["attached"], false);
            assert_eq!(partition["rows"], 1);
            assert!(partition["index_bytes"].as_i64() > Some(0));
            // This server's horizon (14 days) is longer than the one the partitions were
            // maintained with (5): the live path still cannot write a detached day.
            assert_eq!(again.code(), "outside_horizon", "{}", again.body);
        }
    }
    // In a batch, that event is refused alone: today's is stored beside it (the whole
    // batch was `422`, today's event unstored), and a bad item keeps its own error.
    let mut bad = event_at("order_bad_time", now);
    bad["occurred_at"] = json!("not a time");
    let batch = json!([event_at("order_today", now), event, bad]);
    let answer = app
        .post_json("/events/checkout_completed/batch", &batch)
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let results = &answer.body["results"];
    assert_eq!(results[0]["status"], "inserted", "{}", answer.body);
    assert_eq!(results[2]["status"], "rejected", "{}", answer.body);
    assert_eq!(
        results[2]["error"]["code"], "invalid_timestamp",
        "{}",
        answer.body
    );
    match backend {
        Backend::Sqlite => assert_eq!(results[1]["status"], "duplicate", "{}", answer.body),
        Backend::Postgres => {
            assert_eq!(results[1]["status"], "rejected", "{}", answer.body);
            let error = &results[1]["error"];
            assert_eq!(error["code"], "outside_horizon", "{}", answer.body);
            assert_eq!(error["field"], "/occurred_at", "{}", answer.body);
            assert_eq!(answer.body["rejected"], 2, "{}", answer.body);
        }
    }
    assert_eq!(app.checkout_stats().await.0, 2, "one row each");
}

/// PostgreSQL only: there maintenance takes locks another process can hold.
mod postgres_only {
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn serve_waits_for_todays_partition_while_another_process_creates_it() {
        super::serve_waits_for_todays_partition_while_another_process_creates_it().await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn serve_starts_while_another_process_holds_partition_maintenance() {
        super::serve_starts_while_another_process_holds_partition_maintenance().await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_horizon_of_thousands_of_days_is_maintained_in_several_transactions() {
        super::a_horizon_of_thousands_of_days_is_maintained_in_several_transactions().await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_day_between_attached_ones_never_gets_a_detached_table() {
        super::a_day_between_attached_ones_never_gets_a_detached_table().await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn an_old_day_attached_while_a_late_event_waits_for_its_table_takes_the_event() {
        super::an_old_day_attached_while_a_late_event_waits_for_its_table_takes_the_event().await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_late_day_waiting_past_the_lock_timeout_is_busy_not_a_fault() {
        super::a_late_day_waiting_past_the_lock_timeout_is_busy_not_a_fault().await
    }
}

/// A connection of its own holding the lock of partition changes (as a maintenance run
/// or a long backfill does) until it is closed or dropped.
async fn hold_partition_changes(app: &TestApp) -> sqlx::PgConnection {
    use sqlx::Connection;
    let mut holder = sqlx::PgConnection::connect(app.database_url())
        .await
        .expect("connect");
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(traqlyte_store::partitions::PARTITION_LOCK_KEY)
        .execute(&mut holder)
        .await
        .expect("hold partition changes");
    holder
}

/// A late event whose old day needs a table waits for the lock of partition changes at
/// most 5 s; another process holding it longer (a maintenance run) makes the request
/// `503 store_busy`, retryable, with nothing written, and the same event is stored once
/// the lock is free.
async fn a_late_day_waiting_past_the_lock_timeout_is_busy_not_a_fault() {
    use sqlx::Connection;
    let app = spawn_app(Backend::Postgres).await;
    app.register_checkout_contract().await;
    let holder = hold_partition_changes(&app).await;
    let late = event_at("order_late_busy", traqlyte_store::now_us() - 60 * DAY_US);
    let busy = app.post_event(&late).await;
    assert_eq!(
        (busy.status, busy.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "store_busy"),
        "{}",
        busy.body
    );
    assert_eq!(app.checkout_stats().await.0, 0, "nothing written");
    holder.close().await.expect("release");
    let stored = app.post_event(&late).await;
    assert_eq!(stored.body["status"], "inserted", "{}", stored.body);
}

/// A late event of an old day without a table lists the partitions, then waits for the
/// lock of partition changes to give its day a detached table; a maintenance run with a
/// longer horizon holding that lock attaches the same day meanwhile. The event was
/// refused `outside_horizon` (its detached table was no longer made, and
/// `events_detached` had no partition for it); it is now stored in the attached day,
/// where its live duplicate finds it.
async fn an_old_day_attached_while_a_late_event_waits_for_its_table_takes_the_event() {
    use sqlx::Connection;
    let app = spawn_app(Backend::Postgres).await;
    app.register_checkout_contract().await;
    let at = traqlyte_store::now_us() - 60 * DAY_US;
    let day = at.div_euclid(DAY_US) as i32;
    let mut holder = hold_partition_changes(&app).await;
    let late = event_at("order_attached_meanwhile", at);
    let attach_meanwhile = async {
        // The request has listed the partitions and waits for the lock (5 s at most).
        crate::helpers::wait_for_lock_waiter(&mut holder, "locktype = 'advisory'").await;
        // What a maintenance run with a 70-day horizon does for that day.
        let table = format!(
            "events_p{}",
            traqlyte_store::partitions::day_text(day).replace('-', "")
        );
        for sql in [
            format!("CREATE TABLE {table} (LIKE events)"),
            format!(
                "ALTER TABLE events ATTACH PARTITION {table} FOR VALUES FROM ({day}) TO ({})",
                day + 1
            ),
        ] {
            sqlx::query(&sql).execute(&mut holder).await.expect(&sql);
        }
        holder.close().await.expect("release");
    };
    let (stored, ()) = tokio::join!(app.post_event(&late), attach_meanwhile);
    assert_eq!(stored.body["status"], "inserted", "{}", stored.body);
    let partitions = app.store.partitions().await.expect("status");
    let text = traqlyte_store::partitions::day_text(day);
    let tables: Vec<_> = partitions
        .iter()
        .filter(|p| p.from_day.as_deref() == Some(text.as_str()))
        .collect();
    assert_eq!(tables.len(), 1, "{tables:?}");
    assert!(tables[0].attached, "{tables:?}");
    // A duplicate meets it.
    let again = app.post_event(&late).await;
    assert_eq!(again.body["status"], "duplicate", "{}", again.body);
    assert_eq!(app.checkout_stats().await.0, 1, "one row");
}

/// 2,500 days of partitions: in one transaction their locks overflow PostgreSQL's shared
/// lock table at its default size (about 2,100 creations fail, "out of shared memory"),
/// so `serve` with a long horizon never got its partitions. Maintenance now commits
/// every 200 steps.
async fn a_horizon_of_thousands_of_days_is_maintained_in_several_transactions() {
    let app = spawn_refusing_app(Backend::Postgres).await;
    let horizon = DedupeHorizon::new(2_500).expect("a horizon");
    let done = app
        .store
        .maintain_partitions(&horizon, traqlyte_store::now_us())
        .await
        .expect("maintained");
    // The server made the default horizon's 20 days; the rest are new.
    assert!(done.create.len() >= 2_480, "{}", done.create.len());
    let mut sorted = done.create.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, done.create, "oldest first");
    let attached = app
        .store
        .partitions()
        .await
        .expect("status")
        .iter()
        .filter(|p| p.attached && p.from_day.is_some())
        .count();
    assert!(attached >= 2_500, "{attached}");
    let again = app
        .store
        .maintain_partitions(&horizon, traqlyte_store::now_us())
        .await
        .expect("maintained again");
    assert_eq!((again.create.len(), again.detach.len()), (0, 0));
}

/// Days older than the server's attached ones get attached partitions (maintenance run
/// with an earlier clock), leaving days between them without a table: a day that
/// maintenance, creating oldest first in several transactions, is about to attach looks
/// the same. A late event of such a day (`--late-events reconcile`) is refused, not given
/// a detached table that would shadow the attached one for ever (alone, and in a batch
/// whose other events are stored); once maintenance has run, the same event is stored in
/// its day's detached partition.
async fn a_day_between_attached_ones_never_gets_a_detached_table() {
    let app = spawn_app(Backend::Postgres).await;
    app.register_checkout_contract().await;
    let now = traqlyte_store::now_us();
    let horizon = DedupeHorizon::default();
    app.store
        .maintain_partitions(&horizon, now - 40 * DAY_US)
        .await
        .expect("older days attached");
    let between = event_at("order_between", now - 25 * DAY_US);
    let refused = app.post_event(&between).await;
    assert_eq!(refused.code(), "outside_horizon", "{}", refused.body);
    // In a batch, it is refused alone and a recent event beside it stored (the batch's
    // reconciling retry met it again, and the whole batch was `422`), as the NATS
    // consumer does.
    let batch = json!([event_at("order_now", now), between.clone()]);
    let answer = app
        .post_json("/events/checkout_completed/batch", &batch)
        .await;
    assert_eq!(
        answer.item_statuses(),
        vec!["inserted", "rejected"],
        "{}",
        answer.body
    );
    let error = &answer.body["results"][1]["error"];
    assert_eq!(error["code"], "outside_horizon", "{}", answer.body);
    assert_eq!(error["field"], "/occurred_at", "{}", answer.body);
    let day = traqlyte_store::partitions::day_text((now - 25 * DAY_US).div_euclid(DAY_US) as i32);
    let has_day = |partitions: &[traqlyte_store::PartitionInfo]| {
        partitions
            .iter()
            .any(|p| p.from_day.as_deref() == Some(day.as_str()))
    };
    assert!(!has_day(&app.store.partitions().await.expect("status")));
    app.store
        .maintain_partitions(&horizon, now)
        .await
        .expect("maintained");
    let stored = app.post_event(&between).await;
    assert_eq!(stored.body["status"], "inserted", "{}", stored.body);
    let partitions = app.store.partitions().await.expect("status");
    let table = partitions
        .iter()
        .find(|p| p.from_day.as_deref() == Some(day.as_str()))
        .expect("the day's partition");
    assert!(!table.attached, "{table:?}");
}

/// A long backfill dry run holds the locks maintenance needs; `serve` starting meanwhile
/// gives up on its run after the 5 s lock timeout and serves with the partitions that
/// exist, instead of exiting.
async fn serve_starts_while_another_process_holds_partition_maintenance() {
    let app = spawn_refusing_app(Backend::Postgres).await;
    let _holder = hold_partition_changes(&app).await;
    let started = std::time::Instant::now();
    let server = crate::helpers::ServerProcess::start(app.database_url(), &[]);
    // It did wait for the lock (5 s, then gave up), rather than never asking for it.
    assert!(
        started.elapsed() >= std::time::Duration::from_secs(4),
        "serve started after {:?}: it never waited for maintenance's lock",
        started.elapsed()
    );
    assert_inserted_through(&app, &server, "order_while_held").await;
}

/// A fresh database whose partitions another process is still creating (it holds the
/// lock of partition changes, and today's table does not exist yet): a server starting
/// meanwhile waits for today's partition instead of answering every event of now
/// `422 outside_horizon`, which a client never retries.
async fn serve_waits_for_todays_partition_while_another_process_creates_it() {
    use traqlyte_store::partitions::{day_text, occurred_day};
    let app = spawn_refusing_app(Backend::Postgres).await;
    let today = occurred_day(Some(traqlyte_store::now_us()));
    let table = |day: i32| format!("events_p{}", day_text(day).replace('-', ""));
    for day in [today, today + 1] {
        app.execute_sql(&format!("DROP TABLE {}", table(day))).await;
    }
    let mut holder = hold_partition_changes(&app).await;
    let url = app.database_url().to_string();
    let start =
        tokio::task::spawn_blocking(move || crate::helpers::ServerProcess::start(&url, &[]));
    // A second server waiting the same way stops at SIGTERM, without serving first.
    let mut stopped = Command::new(env!("CARGO_BIN_EXE_traqlyte"))
        .args(["serve", "--database-url", app.database_url()])
        .args(["--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn serve");
    // Two of the first server's maintenance runs give up on the lock (5 s each) meanwhile.
    tokio::time::sleep(std::time::Duration::from_secs(8)).await;
    assert!(
        !start.is_finished(),
        "serve answered before today's partition existed"
    );
    crate::helpers::sigterm(&stopped);
    let asked = std::time::Instant::now();
    let status = loop {
        if let Some(status) = stopped.try_wait().expect("wait") {
            break status;
        }
        assert!(
            asked.elapsed() < std::time::Duration::from_secs(10),
            "a waiting server ignored SIGTERM"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(status.success(), "{status}");
    let mut printed = String::new();
    std::io::Read::read_to_string(&mut stopped.stdout.take().expect("stdout"), &mut printed)
        .expect("read stdout");
    assert!(printed.is_empty(), "it served: {printed}");
    for day in [today, today + 1] {
        let create = format!(
            "CREATE TABLE {} PARTITION OF events FOR VALUES FROM ({day}) TO ({})",
            table(day),
            day + 1
        );
        sqlx::query(&create)
            .execute(&mut holder)
            .await
            .expect("create the partition");
    }
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(traqlyte_store::partitions::PARTITION_LOCK_KEY)
        .execute(&mut holder)
        .await
        .expect("unlock");
    let server = start.await.expect("serve started");
    assert_inserted_through(&app, &server, "order_after_the_wait").await;
}

/// Posts a new checkout event through `server` and checks it is stored.
async fn assert_inserted_through(
    app: &TestApp,
    server: &crate::helpers::ServerProcess,
    order: &str,
) {
    let answer = app
        .send(
            app.client
                .post(format!("{}/events/checkout_completed", server.address))
                .bearer_auth(&app.key)
                .json(&checkout_event(order)),
        )
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.body["status"], "inserted");
}

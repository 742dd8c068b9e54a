//! Every acknowledged write is durable first: the store's PostgreSQL sessions never
//! commit with `synchronous_commit = off`, whatever the database or role says, and keep
//! any other level an operator chose. And the sessions' other settings.

use crate::db::{Backend, TestDb};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_commits_durably_on_a_database_set_to_asynchronous_commits() {
    let db = TestDb::create(Backend::Postgres).await;
    for (database_level, sessions_level) in [("off", "on"), ("local", "local"), ("on", "on")] {
        db.raw()
            .await
            .execute(&format!(
                "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET synchronous_commit = {database_level}', current_database()); END $$"
            ))
            .await;
        let store = db.store().await;
        let level = store.synchronous_commit().await.expect("read the level");
        assert_eq!(level.as_deref(), Some(sessions_level), "{database_level}");
    }
    // No JIT, whatever the server's default (`on`): it compiled thousands of functions
    // for one read of the partitioned events table.
    let jit = db
        .store()
        .await
        .session_setting("jit")
        .await
        .expect("read jit");
    assert_eq!(jit.as_deref(), Some("off"));
    // PostgreSQL probes the connection after 30 s of silence (the system's default is
    // two hours): a session this process's vanished host left open, and the locks of its
    // transaction, end within a minute or so.
    let store = db.store().await;
    for (setting, value) in [
        ("tcp_keepalives_idle", "30"),
        ("tcp_keepalives_interval", "10"),
        ("tcp_keepalives_count", "3"),
        // A statement whose client left is stopped within a second (PostgreSQL 14+).
        ("client_connection_check_interval", "1s"),
    ] {
        let read = store.session_setting(setting).await.expect("read");
        assert_eq!(read.as_deref(), Some(value), "{setting}");
    }
    // A wait for a lock ends after 5 s where PostgreSQL's default (none) is in force; a
    // value the operator set, none included, is kept.
    let lock_timeout = store.session_setting("lock_timeout").await.expect("read");
    assert_eq!(lock_timeout.as_deref(), Some("5s"));
    for (database_level, sessions_level) in [("0", "0"), ("2000", "2s")] {
        db.raw()
            .await
            .execute(&format!(
                "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET lock_timeout = {database_level}', current_database()); END $$"
            ))
            .await;
        let read = db
            .store()
            .await
            .session_setting("lock_timeout")
            .await
            .expect("read");
        assert_eq!(read.as_deref(), Some(sessions_level), "{database_level}");
    }
    let sqlite = TestDb::create(Backend::Sqlite).await;
    let level = sqlite
        .store()
        .await
        .synchronous_commit()
        .await
        .expect("read");
    assert_eq!(level, None);
}

/// A transaction whose caller gives up while its `BEGIN` is on the wire (a client that
/// disconnected, a request timeout) leaves no session inside an open transaction: sqlx
/// 0.8 queued no `ROLLBACK` for it and handed the connection to the next borrower,
/// whose autocommit writes then waited for someone's `COMMIT` (a review: lineage walks
/// answered `408` left sessions `idle in transaction` for minutes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_given_up_during_its_begin_leaves_no_session_in_it() {
    let db = TestDb::create(Backend::Postgres).await;
    let mut config = traqlyte_store::StoreConfig::new(&db.url);
    config.pool_connections_max = 2;
    let store = traqlyte_store::Store::connect(&config)
        .await
        .expect("connect store");
    store.migrate().await.expect("migrate");
    let crate::db::Raw::Postgres(mut raw) = db.raw().await else {
        unreachable!("a PostgreSQL database")
    };
    // Given up after 0–199 µs: a `BEGIN` on loopback takes about that long, so some of
    // them are cut off between sending it and reading its answer. After each, no session
    // may stay inside a transaction (a dropped one's rollback is sent as its connection
    // goes back: allowed two seconds, for a loaded machine).
    let mut given_up = 0;
    for round in 0..400u64 {
        let wait = std::time::Duration::from_micros(round % 200);
        if tokio::time::timeout(wait, store.begin()).await.is_ok() {
            continue;
        }
        given_up += 1;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        loop {
            let stuck: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity
                  WHERE datname = current_database() AND pid <> pg_backend_pid()
                    AND state LIKE 'idle in transaction%'",
            )
            .fetch_one(&mut raw)
            .await
            .expect("read the sessions");
            if stuck == 0 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "round {round}: {stuck} session(s) left inside a transaction nobody holds"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
    assert!(
        given_up > 0,
        "no BEGIN was given up: the test tested nothing"
    );
    let tx = store.begin().await.expect("a transaction after them");
    tx.commit().await.expect("commit");
}

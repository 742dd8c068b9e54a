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

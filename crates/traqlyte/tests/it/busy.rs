//! A store busy with another writer answers `503 store_busy` with `Retry-After`, writes
//! nothing, and the retry succeeds once the other writer is done: contention is a pause
//! the client waits out, never a `500`.

use reqwest::StatusCode;
use sqlx::Connection;
use traqlyte_server::ServerConfig;

use crate::helpers::{checkout_event, spawn_app_with_store, Backend};

/// SQLite has one writer per file: a second process (here a console) holding the write
/// lock past the busy timeout makes the server's write fail with `SQLITE_BUSY`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_waiting_past_sqlites_busy_timeout_is_503_store_busy_and_writes_nothing() {
    let app = spawn_app_with_store(Backend::Sqlite, ServerConfig::default(), |store| {
        store.sqlite_busy_timeout_ms = 200;
    })
    .await;
    app.register_checkout_contract().await;
    let event = checkout_event("busy-1");

    let mut console = sqlx::SqliteConnection::connect(&format!("sqlite://{}", app.database_url()))
        .await
        .expect("connect");
    sqlx::raw_sql("BEGIN IMMEDIATE")
        .execute(&mut console)
        .await
        .expect("the write lock");
    let refused = app
        .client
        .post(app.url("/events/checkout_completed"))
        .bearer_auth(&app.key)
        .json(&event)
        .send()
        .await
        .expect("sent");
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        refused.headers().get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    let body: serde_json::Value = refused.json().await.expect("a JSON body");
    assert_eq!(body["error"]["code"], "store_busy", "{body}");
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut console)
        .await
        .expect("release");
    assert_eq!(app.checkout_stats().await, (0, 0, 0), "nothing was written");

    // Retried as a client should: a background write of the server's own (its fold of
    // per-unit sums) may hold the lock a moment past the 200 ms busy timeout.
    let mut stored = app.post_event(&event).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while stored.status == StatusCode::SERVICE_UNAVAILABLE && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        stored = app.post_event(&event).await;
    }
    assert_eq!(
        (stored.status, &stored.body["status"]),
        (StatusCode::OK, &serde_json::json!("inserted")),
        "{stored:?}"
    );
    assert_eq!(app.checkout_stats().await, (1, 0, 0));
}

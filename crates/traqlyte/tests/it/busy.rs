//! A store busy with another writer answers `503 store_busy` with `Retry-After`, writes
//! nothing, and the retry succeeds once the other writer is done: contention is a pause
//! the client waits out, never a `500`.

use reqwest::StatusCode;
use sqlx::Connection;
use traqlyte_server::ServerConfig;

use crate::helpers::{checkout_event, spawn_app, spawn_app_with_store, Backend, ServerProcess};

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
    // A 503 may come before the body was read (hyper then closes the socket): it says
    // so, so a keep-alive client retries on a new connection.
    assert_eq!(
        refused.headers().get("connection").map(|v| v.as_bytes()),
        Some(&b"close"[..])
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

/// A `COMMIT` that fails on a full disk is rolled back by SQLite itself; the server's
/// one writer connection must not stay counted inside that transaction, or every later
/// write fails until a restart. Here the server may write files up to a limit
/// (`ulimit -f`); once a commit fails, a checkpoint by another process empties the
/// write-ahead log, and the next write must succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_writes_work_again_after_a_commit_failed_on_a_full_disk() {
    let app = spawn_app(Backend::Sqlite).await;
    app.register_checkout_contract().await;
    app.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)").await;
    let size = std::fs::metadata(app.database_url())
        .expect("the file")
        .len();
    let server = ServerProcess::start_with_file_size_limit(app.database_url(), size / 1024 + 256);
    let post = |events: serde_json::Value| {
        app.client
            .post(format!(
                "{}/events/checkout_completed/batch",
                server.address
            ))
            .bearer_auth(&app.key)
            .json(&events)
            .send()
    };
    let mut failed = false;
    for round in 0..400 {
        let events: Vec<_> = (0..100)
            .map(|i| checkout_event(&format!("full-{round}-{i}")))
            .collect();
        let answer = post(serde_json::json!(events)).await.expect("sent");
        if answer.status().is_server_error() {
            failed = true;
            break;
        }
        assert_eq!(answer.status(), StatusCode::OK);
    }
    assert!(failed, "the file size limit was never reached");
    // Space again: the log is emptied, and the server's next commit fits.
    app.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)").await;
    let answer = post(serde_json::json!([checkout_event(
        "after-the-disk-was-freed"
    )]))
    .await
    .expect("sent");
    let status = answer.status();
    let body = answer.text().await.unwrap_or_default();
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// Request bodies in flight share one room (`--bodies-in-flight-bytes-max`): a body
/// being sent slowly holds its `Content-Length` of it, a request that finds no room
/// waits up to half the request timeout and is then answered `503 server_busy` (with
/// `Retry-After` and `Connection: close`) without its body being read, and a request that
/// fits is served meanwhile. Many large batches or slow bodies cannot grow the server's
/// memory past the room (200 batches of 5 MB held 1.7 GB before).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bodies_past_the_room_in_flight_are_503_server_busy() {
    use tokio::io::AsyncWriteExt;
    let config = ServerConfig {
        bodies_in_flight_bytes_max: 64 * 1024,
        request_timeout_ms: 2_000,
        ..ServerConfig::default()
    };
    let app = crate::helpers::spawn_app_with(Backend::Sqlite, config).await;
    app.register_checkout_contract().await;
    let host = app.address.trim_start_matches("http://").to_string();
    // 60 KB announced, a little sent: it holds 59 of the 64 KiB of room.
    let mut slow = tokio::net::TcpStream::connect(&host)
        .await
        .expect("connect");
    let head = format!(
        "POST /events/checkout_completed/batch HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n\r\n[",
        app.key
    );
    slow.write_all(head.as_bytes()).await.expect("send");
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;

    let big = vec![checkout_event("busy-big"); 40];
    let post_big = || {
        app.client
            .post(app.url("/events/checkout_completed/batch"))
            .bearer_auth(&app.key)
            .json(&big)
            .send()
    };
    let started = std::time::Instant::now();
    let refused = post_big().await.expect("sent");
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(started.elapsed() >= std::time::Duration::from_millis(900));
    let header = |name: &str| {
        refused
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap_or("").to_string())
    };
    assert_eq!(header("retry-after").as_deref(), Some("1"));
    assert_eq!(header("connection").as_deref(), Some("close"));
    let body: serde_json::Value = refused.json().await.expect("JSON");
    assert_eq!(body["error"]["code"], "server_busy", "{body}");
    // A small request fits beside the slow one.
    let small = app.post_event(&checkout_event("busy-small")).await;
    assert_eq!(small.status, StatusCode::OK, "{}", small.body);

    // Once the slow client is gone, the room is free again.
    drop(slow);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let again = post_big().await.expect("sent");
        if again.status() == StatusCode::OK || std::time::Instant::now() > deadline {
            assert_eq!(again.status(), StatusCode::OK);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

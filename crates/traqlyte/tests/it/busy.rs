//! A store busy with another writer answers `503 store_busy` with `Retry-After`, writes
//! nothing, and the retry succeeds once the other writer is done: contention is a pause
//! the client waits out, never a `500`.

use reqwest::StatusCode;
use serde_json::json;
use sqlx::Connection;
use traqlyte_server::ServerConfig;

use crate::helpers::{
    checkout_event, lock_events, spawn_app, spawn_app_with_store, wait_for_lock_waiter, Backend,
    ServerProcess,
};

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
            // The disk's condition, not a bug: retryable, nothing written (it was `500`).
            let status = answer.status();
            let body: serde_json::Value = answer.json().await.expect("a JSON body");
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
            assert_eq!(body["error"]["code"], "database_unavailable", "{body}");
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

/// A slow client: a request head announcing a body of `length` bytes (or chunked, when
/// `None`) and one byte of it, then nothing. It holds its room until dropped. When
/// `admitted`, the call returns once the server took room for it.
async fn slow_body(
    address: &str,
    path: &str,
    authorization: Option<&str>,
    length: Option<usize>,
    admitted: bool,
) -> tokio::net::TcpStream {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = address.trim_start_matches("http://").to_string();
    let mut slow = tokio::net::TcpStream::connect(&host)
        .await
        .expect("connect");
    let auth = authorization.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    let expect = if admitted {
        "Expect: 100-continue\r\n"
    } else {
        ""
    };
    let (framing, first) = match length {
        Some(length) => (format!("Content-Length: {length}"), "["),
        None => ("Transfer-Encoding: chunked".to_string(), "1\r\n[\r\n"),
    };
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\n{auth}{expect}Content-Type: application/json\r\n{framing}\r\n\r\n"
    );
    slow.write_all(head.as_bytes()).await.expect("send");
    if admitted {
        // The server reads the body, and answers `100 Continue`, only once its room is
        // taken: what follows the call meets that room taken (a sleep stood in for it,
        // and a loaded machine outran it).
        let mut answer = [0u8; 64];
        let read = tokio::time::timeout(std::time::Duration::from_secs(30), slow.read(&mut answer))
            .await
            .expect("room taken in time")
            .expect("read");
        assert!(
            answer[..read].starts_with(b"HTTP/1.1 100 Continue"),
            "not admitted: {}",
            String::from_utf8_lossy(&answer[..read])
        );
    }
    slow.write_all(first.as_bytes()).await.expect("send");
    slow
}

/// A new API key of the app's tenant, as an `Authorization` header value.
async fn another_key(app: &crate::helpers::TestApp) -> String {
    let tenant = app.tenant().await;
    let (key, _) = app.store.create_api_key(&tenant).await.expect("a key");
    format!("Bearer {}", key.expose())
}

/// The API key of a new tenant, with the checkout contract registered, as an
/// `Authorization` header value.
async fn another_tenants_key(app: &crate::helpers::TestApp) -> String {
    static TENANTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = TENANTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = traqlyte_store::TenantName::parse(&format!("neighbour {n}")).expect("a name");
    let (_, key) = app.store.create_tenant(&name).await.expect("a tenant");
    let bearer = format!("Bearer {}", key.expose());
    let answer = app
        .client
        .post(app.url("/contracts"))
        .header("authorization", &bearer)
        .json(&crate::helpers::checkout_contract())
        .send()
        .await
        .expect("sent");
    assert_eq!(answer.status(), StatusCode::CREATED);
    bearer
}

/// Request bodies in flight share one room (`--bodies-in-flight-bytes-max`), of which one
/// credential holds at most a quarter: a body being sent slowly holds its
/// `Content-Length` of its credential's share, a request that finds no room waits up to
/// half the request timeout and is then answered `503 server_busy` (with `Retry-After` and
/// `Connection: close`) without its body being read, and a request that fits is served
/// meanwhile. Many large batches or slow bodies cannot grow the server's memory past the
/// room (200 batches of 5 MB held 1.7 GB before).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bodies_past_the_room_in_flight_are_503_server_busy() {
    let config = ServerConfig {
        bodies_in_flight_bytes_max: 1024 * 1024,
        // The room wait is half of it (3 s): the slow body outlives that wait by far.
        request_timeout_ms: 6_000,
        ..ServerConfig::default()
    };
    let app = crate::helpers::spawn_app_with(Backend::Sqlite, config).await;
    app.register_checkout_contract().await;
    // 40 KB announced, a little sent: with its tree's likely room (6 times), it holds
    // 235 of its credential's 256 KiB.
    let bearer = format!("Bearer {}", app.key);
    let slow = slow_body(
        &app.address,
        "/events/checkout_completed/batch",
        Some(&bearer),
        Some(40_000),
        true,
    )
    .await;

    let big = vec![checkout_event("busy-big"); 80];
    let bytes = serde_json::to_vec(&big).expect("JSON").len();
    assert!(
        6 * bytes > 21 * 1024,
        "{bytes} bytes: more than the share left"
    );
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
    assert!(started.elapsed() >= std::time::Duration::from_millis(2_900));
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

/// A request refused for want of room (`503 server_busy`) is in the latency histogram,
/// with the time it waited: the room was taken outside the histogram's layer, and
/// every such refusal, the first sign of a server out of room, was missing from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_refused_for_want_of_room_is_in_the_latency_histogram() {
    let app = crate::helpers::spawn_app(Backend::Sqlite).await;
    app.register_checkout_contract().await;
    // The room wait is half the request timeout (3 s); the slow body outlives it.
    let flags = [
        "--bodies-in-flight-bytes-max",
        "1048576",
        "--request-timeout-ms",
        "6000",
    ];
    let server = crate::helpers::ServerProcess::start(app.database_url(), &flags);
    let bearer = format!("Bearer {}", app.key);
    let path = "/events/checkout_completed/batch";
    let _slow = slow_body(&server.address, path, Some(&bearer), Some(40_000), true).await;
    let refused = app
        .client
        .post(format!("{}{path}", server.address))
        .bearer_auth(&app.key)
        .json(&vec![checkout_event("no-room"); 80])
        .send()
        .await
        .expect("sent");
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    let samples = crate::metrics::scrape_at(&app, &server.address).await;
    let route = "/events/{contract}/batch";
    let labels = [("route", route), ("method", "POST"), ("status", "503")];
    let count = "traqlyte_http_request_duration_seconds_count";
    let sum = "traqlyte_http_request_duration_seconds_sum";
    assert_eq!(
        crate::metrics::value_of(&samples, count, &labels),
        1.0,
        "{samples:?}"
    );
    // It waited half the request timeout for room.
    assert!(crate::metrics::value_of(&samples, sum, &labels) >= 2.99);
}

/// Slow bodies of one tenant (its credential however its header spells it, its other
/// keys, its Segment write keys), and of clients sending none (Segment's calls with the
/// `writeKey` in the body, read before it is checked, or with a header that is no Basic
/// credential), hold at most their share of the room (a quarter, and an eighth for all
/// such clients together), so another tenant's writes go on. The share was a
/// credential's: a tenant with four keys (a rotation, three Segment sources) held the
/// whole room, and every other tenant's writes were `503`. Before, one chunked `/v1/batch` with no credential was counted at the
/// largest body of any route (8 MiB) and about 33 of them held the whole default room:
/// every tenant's writes were `503` for as long as they trickled.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_bodies_of_one_client_or_of_anonymous_ones_leave_room_for_others() {
    let config = ServerConfig {
        bodies_in_flight_bytes_max: 1024 * 1024,
        // The room wait is half of it (4 s): the slow bodies outlive the waits below.
        request_timeout_ms: 8_000,
        ..ServerConfig::default()
    };
    let app = crate::helpers::spawn_app_with(Backend::Sqlite, config).await;
    app.register_checkout_contract().await;
    let other = another_tenants_key(&app).await;
    let same_tenant = another_key(&app).await;
    let write_key = crate::segment::create_source(&app, "web");
    let bearer = format!("Bearer {}", app.key);
    // The same key spelt four ways is one credential, one share; a Bearer header on
    // `/v1/*`, which takes Basic, is anonymous there.
    let key = &app.key;
    let spellings = [
        bearer.clone(),
        format!("bearer {key}"),
        format!("Bearer  {key}"),
        format!("bearer   {key}"),
    ];
    let mut slow = Vec::new();
    for (n, spelling) in spellings.iter().enumerate() {
        // The first of each takes its share whole; the others wait for it.
        let first = n == 0;
        slow.push(slow_body(&app.address, "/v1/batch", None, None, first).await);
        let random = format!("Bearer not-a-write-key-{n}");
        slow.push(slow_body(&app.address, "/v1/batch", Some(&random), None, false).await);
        let lineage = "/api/v1/lineage";
        slow.push(slow_body(&app.address, lineage, Some(spelling), Some(8 << 20), first).await);
    }
    // Another tenant writes at once.
    let batch = vec![checkout_event("other-key"); 40];
    let started = std::time::Instant::now();
    let answer = app
        .client
        .post(app.url("/events/checkout_completed/batch"))
        .header("authorization", &other)
        .json(&batch)
        .send()
        .await
        .expect("sent");
    assert_eq!(answer.status(), StatusCode::OK);
    // Served without waiting for room (a wait would take 4 s).
    assert!(started.elapsed() < std::time::Duration::from_millis(3_000));
    // The slow credential finds its share taken, and so do its tenant's other key and
    // Segment write key.
    // (At once: each waits half the request timeout for room, and the slow bodies are
    // ended at the timeout.)
    let same_key = checkout_event("same-key");
    let (refused, same_tenant, tracked) = tokio::join!(
        app.post_event(&same_key),
        app.client
            .post(app.url("/events/checkout_completed/batch"))
            .header("authorization", &same_tenant)
            .json(&batch)
            .send(),
        app.client
            .post(app.url("/v1/batch"))
            .basic_auth(&write_key, Some(""))
            .json(&json!({"batch": [{"type": "track", "event": "e", "userId": "u", "pad": "x".repeat(40_000)}]}))
            .send(),
    );
    assert_eq!(
        refused.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        refused.body
    );
    let same_tenant = same_tenant.expect("sent").status();
    assert_eq!(same_tenant, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        tracked.expect("sent").status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    // Pages' beacons (the write key in the body: anonymous) take the anonymous share, an
    // eighth of the room; one more finds it taken, and its `503` is readable by the page
    // (its CORS headers were missing: the room is taken outside the routes' CORS layer).
    let beacon =
        json!({"writeKey": "tlw_x", "event": "e", "userId": "u", "pad": "x".repeat(3_000)})
            .to_string();
    for _ in 0..10 {
        slow.push(slow_body(&app.address, "/v1/t", None, Some(beacon.len()), false).await);
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let page = app
        .client
        .post(app.url("/v1/t"))
        .header("origin", "http://shop.example")
        .header("content-type", "text/plain")
        .body(beacon)
        .send()
        .await
        .expect("sent");
    assert_eq!(page.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        page.headers()["access-control-allow-origin"],
        "http://shop.example"
    );
    assert_eq!(
        page.headers()["access-control-expose-headers"],
        "retry-after"
    );
    assert!(page.headers().contains_key("retry-after"));
    drop(slow);
}

/// Sixteen batches of one key sent at once, each parsing into some 17 times its text
/// (objects of arrays of 500 zeros): more than the room a body of known length takes at
/// once (6 times its bytes), so each needs more as it is parsed. All are served. Before,
/// a request waiting for more held its body's whole room, the admitted ones waited on
/// each other, and most were answered `503 server_busy` after the wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dense_batches_of_one_key_sent_at_once_are_all_served() {
    let config = ServerConfig {
        bodies_in_flight_bytes_max: 16 * 1024 * 1024,
        ..ServerConfig::default()
    };
    let app = crate::helpers::spawn_app_with(Backend::Sqlite, config).await;
    app.register_checkout_contract().await;
    let item = format!(r#"{{"a":[{}]}}"#, vec!["0"; 500].join(","));
    let body = format!("[{}]", vec![item; 60].join(","));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let request = app
            .client
            .post(app.url("/events/checkout_completed/batch"))
            .bearer_auth(&app.key)
            .header("content-type", "application/json")
            .body(body.clone());
        tasks.spawn(async move { request.send().await.map(|r| r.status()) });
    }
    let mut statuses = Vec::new();
    while let Some(answer) = tasks.join_next().await {
        statuses.push(answer.expect("task").expect("an answer"));
    }
    assert_eq!(statuses, vec![StatusCode::OK; 16]);
}

/// A parsed body takes room beside its bytes, as its tree grows: a dense batch (objects
/// of one key nested three deep, 20 bytes an item and some 1.3 KB parsed) whose bytes fit
/// the room left by slow clients, but whose tree does not, waits for room and is answered
/// `503 server_busy`, nothing stored; once the slow clients are gone it is served; one
/// whose tree is larger than a credential's share of the room (a quarter) is
/// `413 body_too_large`.
/// Before, only bytes were counted, and a few dozen such bodies of a few MB held many GB.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_parsed_body_takes_room_for_its_tree_as_well_as_its_bytes() {
    let config = ServerConfig {
        bodies_in_flight_bytes_max: 4 * 1024 * 1024,
        // The room wait is half of it (3 s); the slow bodies must outlive that wait by
        // far on a loaded machine, or their timeout frees the room it waits for.
        request_timeout_ms: 6_000,
        ..ServerConfig::default()
    };
    let app = crate::helpers::spawn_app_with(Backend::Sqlite, config).await;
    app.register_checkout_contract().await;
    // Four tenants' slow bodies (each held 6 times: bytes and likely tree) hold all of
    // the room but 200 KiB (a share is 1 MiB). Their keys are made first, so the bodies
    // start within moments of each other (a CI run under load once took long enough
    // between them for the first to time out during the wait below).
    let mut keys = Vec::new();
    for _ in 0..4 {
        keys.push(another_tenants_key(&app).await);
    }
    let mut slow = Vec::new();
    for (key, length) in keys
        .iter()
        .zip([1 << 20, 1 << 20, 1 << 20, (824 << 10) / 6])
    {
        let path = "/events/checkout_completed/batch";
        slow.push(slow_body(&app.address, path, Some(key), Some(length), true).await);
    }

    let dense = |items: usize| format!("[{}]", vec![r#"{"a":{"b":{"c":{}}}}"#; items].join(","));
    let post = |body: String| {
        app.client
            .post(app.url("/events/checkout_completed/batch"))
            .bearer_auth(&app.key)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    assert!(dense(500).len() < 32 * 1024, "its bytes fit the room left");
    let started = std::time::Instant::now();
    let refused = post(dense(500)).await.expect("sent");
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(started.elapsed() >= std::time::Duration::from_millis(2_900));
    let body: serde_json::Value = refused.json().await.expect("JSON");
    assert_eq!(body["error"]["code"], "server_busy", "{body}");
    // A light request fits beside the slow ones, parsed tree and all.
    let small = app.post_event(&checkout_event("tree-small")).await;
    assert_eq!(small.status, StatusCode::OK, "{}", small.body);

    // Once the slow clients are gone, the dense batch has room.
    drop(slow);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let again = post(dense(500)).await.expect("sent");
        let status = again.status();
        if status != StatusCode::SERVICE_UNAVAILABLE || std::time::Instant::now() > deadline {
            let body: serde_json::Value = again.json().await.expect("JSON");
            // Every item is refused by the contract (not an event of it), none stored.
            assert_eq!(status, StatusCode::OK, "{body}");
            assert_eq!(
                (&body["inserted"], &body["rejected"]),
                (&json!(0), &json!(500))
            );
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // A body whose tree alone is larger than a credential's share: never served.
    let too_dense = post(dense(1_500)).await.expect("sent");
    assert_eq!(too_dense.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let body: serde_json::Value = too_dense.json().await.expect("JSON");
    assert_eq!(body["error"]["code"], "body_too_large", "{body}");
    assert_eq!(app.checkout_stats().await, (1, 0, 0));
}

/// Sets `setting` for new sessions of the app's PostgreSQL database (`None` resets it)
/// and ends the sessions open now, so the server's next connections take it.
async fn set_for_new_sessions(app: &crate::helpers::TestApp, setting: &str, value: Option<&str>) {
    let mut admin = set_per_database(app, setting, value).await;
    sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .execute(&mut admin)
    .await
    .expect("end the server's sessions");
}

/// Sets `setting` for new sessions of the app's PostgreSQL database (`None` resets it),
/// as an operator's `ALTER DATABASE` does: the sessions open now keep their value.
/// Returns the session that did it.
async fn set_per_database(
    app: &crate::helpers::TestApp,
    setting: &str,
    value: Option<&str>,
) -> sqlx::PgConnection {
    let mut admin = sqlx::PgConnection::connect(app.database_url())
        .await
        .expect("connect");
    // This session may have started read-only itself.
    sqlx::query("SET default_transaction_read_only = off")
        .execute(&mut admin)
        .await
        .expect("a session that writes");
    let (db,): (String,) = sqlx::query_as("SELECT current_database()")
        .fetch_one(&mut admin)
        .await
        .expect("database name");
    let sql = match value {
        Some(value) => format!("ALTER DATABASE \"{db}\" SET {setting} = '{value}'"),
        None => format!("ALTER DATABASE \"{db}\" RESET {setting}"),
    };
    sqlx::query(&sql).execute(&mut admin).await.expect(&sql);
    admin
}

/// Posts `event` until it is not refused with `code` (the server's pool may still hand
/// out a session ended a moment ago), at most 10 s.
async fn post_until_not(
    app: &crate::helpers::TestApp,
    event: &serde_json::Value,
    codes: &[&str],
) -> crate::helpers::Answer {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let answer = app.post_event(event).await;
        if !codes.contains(&answer.code()) || std::time::Instant::now() > deadline {
            return answer;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A read-only PostgreSQL (a failover's demoted primary, a standby, or
/// `default_transaction_read_only`): every write was `500 internal` (SQLSTATE 25006 was
/// not recognised), which docs/api.md calls a bug of ours, and `/healthz` said `200 ok`
/// so a load balancer kept sending writes. Now writes are `503 database_unavailable`
/// saying nothing was written, `/healthz` is `503` naming the cause, and writes go on
/// once the database takes them again, on the sessions the server held too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_only_postgresql_is_503_for_writes_and_for_readiness() {
    let app = spawn_app(Backend::Postgres).await;
    app.register_checkout_contract().await;
    set_for_new_sessions(&app, "default_transaction_read_only", Some("on")).await;

    let event = checkout_event("read-only-1");
    // Each of the pool's ended sessions fails one request first ("the connection to the
    // database failed"); then every write meets the read-only database.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let refused = loop {
        let refused = app.post_event(&event).await;
        assert_eq!(
            (refused.status, refused.code()),
            (StatusCode::SERVICE_UNAVAILABLE, "database_unavailable"),
            "{}",
            refused.body
        );
        let message = refused.body["error"]["message"]
            .as_str()
            .unwrap_or_default();
        if !message.contains("connection") || std::time::Instant::now() > deadline {
            break refused;
        }
    };
    let message = refused.body["error"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.contains("nothing was written"), "{message}");
    let batch = app
        .post_json(
            "/events/checkout_completed/batch",
            &serde_json::json!([checkout_event("read-only-2")]),
        )
        .await;
    assert_eq!(
        (batch.status, batch.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "database_unavailable"),
        "{}",
        batch.body
    );
    let health = app
        .client
        .get(app.url("/healthz"))
        .send()
        .await
        .expect("sent");
    assert_eq!(health.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: serde_json::Value = health.json().await.expect("a JSON body");
    assert_eq!(body["error"]["code"], "database_unavailable", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("takes no writes")),
        "{body}"
    );
    assert_eq!(app.checkout_stats().await, (0, 0, 0), "nothing was written");
    // Sessions opened after the probe's finding (batches at once, a transaction and a
    // connection each), refused by their own writes: an event write's refusal must note
    // it too (it did not, and those sessions refused writes for a minute after the lift).
    let batches: Vec<_> = (0..4)
        .map(|i| {
            let request = app
                .client
                .post(app.url("/events/checkout_completed/batch"))
                .bearer_auth(&app.key)
                .json(&serde_json::json!([checkout_event(&format!(
                    "read-only-b{i}"
                ))]));
            tokio::spawn(async move { request.send().await.map(|r| r.status()) })
        })
        .collect();
    for batch in batches {
        let status = batch.await.expect("joined").expect("sent");
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    }

    // Lifted as an operator does, the server's sessions left open: each of them started
    // read-only and stays so, and was kept (the probe's for ever, the API's for 30
    // minutes), so readiness and writes stayed 503 (the loop below gave up after 10 s).
    // Sessions opened before a refusal are renewed now: the first probe succeeds, and a
    // write meets at most the sessions opened since the last refusal (a read's).
    drop(set_per_database(&app, "default_transaction_read_only", None).await);
    let health = app
        .client
        .get(app.url("/healthz"))
        .send()
        .await
        .expect("sent");
    assert_eq!(health.status(), StatusCode::OK);
    let stored = post_until_not(&app, &event, &["database_unavailable"]).await;
    assert_eq!(stored.body["status"], "inserted", "{}", stored.body);
    assert_eq!(app.checkout_stats().await, (1, 0, 0));
}

/// A statement stopped by PostgreSQL's `statement_timeout` while it waited for a lock
/// (SQLSTATE 57014) is a wait given up: every group-committed request was `500
/// internal`, and the batch was written again item by item, one timeout after another.
/// Now each is `503 statement_timeout` at once (no `Retry-After`: a statement slower than
/// the operator allows would meet it every time), nothing is written, and the events are
/// stored once the lock is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_statement_timeout_under_a_lock_is_503_for_a_whole_group_commit() {
    let app = spawn_app(Backend::Postgres).await;
    app.register_checkout_contract().await;
    set_for_new_sessions(&app, "statement_timeout", Some("300ms")).await;
    // The server's sessions are new ones now (its pool reconnects).
    let warm = post_until_not(&app, &checkout_event("warm"), &["database_unavailable"]).await;
    assert_eq!(warm.body["status"], "inserted", "{}", warm.body);

    let mut holder = lock_events(&app).await;
    let events: Vec<serde_json::Value> = (0..12)
        .map(|i| checkout_event(&format!("timeout-{i}")))
        .collect();
    // At once, so group commit writes them together.
    let tasks: Vec<_> = events
        .iter()
        .map(|event| {
            let request = app
                .client
                .post(app.url("/events/checkout_completed"))
                .bearer_auth(&app.key)
                .json(event);
            tokio::spawn(async move {
                let answer = request.send().await.expect("sent");
                let status = answer.status();
                let body: serde_json::Value = answer.json().await.expect("a JSON body");
                (status, body)
            })
        })
        .collect();
    for task in tasks {
        let (status, body) = task.await.expect("request task");
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(body["error"]["code"], "statement_timeout", "{body}");
    }
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut holder)
        .await
        .expect("release");
    assert_eq!(app.checkout_stats().await.0, 1, "only the warm-up event");
    for event in &events {
        let stored = post_until_not(&app, event, &["statement_timeout"]).await;
        assert_eq!(stored.body["status"], "inserted", "{}", stored.body);
    }
}

/// Readiness asks on a connection of its own: with every pooled connection held by a
/// request waiting on a lock (a burst, a slow statement), `/healthz` answered `503
/// database_unavailable` after its 1 s bound although the database was fine, and a load
/// balancer took every replica out at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readiness_holds_while_every_pooled_connection_is_busy() {
    let app = spawn_app_with_store(Backend::Postgres, ServerConfig::default(), |store| {
        store.pool_connections_max = 1;
    })
    .await;
    app.register_checkout_contract().await;
    let mut holder = lock_events(&app).await;
    // This request takes the pool's one connection and waits on the lock.
    let waiting = tokio::spawn(
        app.client
            .post(app.url("/events/checkout_completed"))
            .bearer_auth(&app.key)
            .json(&checkout_event("held"))
            .send(),
    );
    wait_for_lock_waiter(&mut holder, "relation = 'events'::regclass").await;
    let health = app
        .client
        .get(app.url("/healthz"))
        .send()
        .await
        .expect("sent");
    let status = health.status();
    let body = health.text().await.unwrap_or_default();
    assert_eq!(status, StatusCode::OK, "{body}");
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut holder)
        .await
        .expect("release");
    let stored = waiting.await.expect("task").expect("answered");
    assert_eq!(stored.status(), StatusCode::OK);
}

/// A request's status, whether it had `Retry-After`, and its JSON body.
type Answered = tokio::task::JoinHandle<(StatusCode, bool, serde_json::Value)>;

/// Each request was answered `503 store_busy` with `Retry-After`.
async fn all_busy(tasks: Vec<Answered>) {
    for task in tasks {
        let (status, retry_after, body) = task.await.expect("request task");
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(body["error"]["code"], "store_busy", "{body}");
        assert!(retry_after, "{body}");
    }
}

/// Each request's event was inserted.
async fn all_inserted(tasks: Vec<Answered>) {
    for task in tasks {
        let (status, _, body) = task.await.expect("request task");
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["status"], "inserted", "{body}");
    }
}

/// A `backfill --dry-run` holds the rows it would insert for its whole run. Live retries
/// of its events wait on those rows: each group commit batch holding one waited for as
/// long as the dry run lasted (up to the batch's minute), and four of them held every
/// slot of single events, so every other event on the server was `408` after the request
/// timeout (a multi-process review). Now a statement waits for a lock 5 s at most
/// (`StoreConfig::lock_timeout_ms`): the retries are `503 store_busy`, their slots come
/// free, and the other events are stored while the dry run still runs, those that
/// shared a batch with a held retry too (the batch is written again item by item).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn live_retries_of_a_dry_runs_events_do_not_hold_up_the_other_single_events() {
    use std::io::Write;
    let app = spawn_app(Backend::Postgres).await;
    app.register_checkout_contract().await;
    let mut dry_run = std::process::Command::new(env!("CARGO_BIN_EXE_traqlyte"))
        .args(["backfill", "--tenant", "test tenant", "--dry-run", "--json"])
        .args(["--contract", "checkout_completed", "--file", "-"])
        .args(["--database-url", app.database_url()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn traqlyte backfill");
    let mut input = dry_run.stdin.take().expect("stdin");
    // A stored event, and in the dry run's batch another event under its identity.
    let stored = app.post_event(&checkout_event("stored-0")).await;
    assert_eq!(stored.body["status"], "inserted", "{}", stored.body);
    let mut colliding = checkout_event("stored-0");
    colliding["note"] = serde_json::json!("other content");
    // One whole batch: written (and its rows held) while the dry run waits for more.
    for i in 0..999 {
        let line = serde_json::to_string(&checkout_event(&format!("dry-{i}"))).expect("JSON");
        writeln!(input, "{line}").expect("write a line");
    }
    writeln!(input, "{colliding}").expect("write a line");
    input.flush().expect("flush");
    let mut watcher = sqlx::PgConnection::connect(app.database_url())
        .await
        .expect("connect");
    // Its batch written: the tally row is the batch's last statement (an open
    // transaction alone may not have inserted the events yet).
    crate::helpers::wait_for_rows(
        &mut watcher,
        "SELECT COUNT(*) FROM pg_stat_activity
         WHERE datname = current_database() AND state = 'idle in transaction'
           AND query LIKE 'INSERT INTO event_tallies%'",
        std::time::Duration::from_secs(60),
        "the dry run wrote no batch",
    )
    .await;
    // Four live retries of the dry run's events, apart, so each starts a batch of its own.
    let post = |event: serde_json::Value| {
        let request = app
            .client
            .post(app.url("/events/checkout_completed"))
            .bearer_auth(&app.key)
            .json(&event);
        tokio::spawn(async move {
            let answer = request.send().await.expect("sent");
            let (status, retry_after) = (
                answer.status(),
                answer.headers().contains_key("retry-after"),
            );
            let body: serde_json::Value = answer.json().await.expect("a JSON body");
            (status, retry_after, body)
        })
    };
    let mut held = Vec::new();
    for i in 0..4 {
        held.push(post(checkout_event(&format!("dry-{i}"))));
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    }
    // Every slot is taken: these queue, and form one batch with a fifth held retry once
    // a slot comes free.
    held.push(post(checkout_event("dry-4")));
    let others: Vec<_> = (0..8)
        .map(|i| post(checkout_event(&format!("other-{i}"))))
        .collect();
    all_busy(held).await;
    all_inserted(others).await;
    // The same retries again: their rows are remembered as held, so each is written
    // alone with a short wait instead of holding a slot for the 5 s lock timeout, and the
    // other events sent behind them are stored at once (they waited 5 s a round).
    let round = std::time::Instant::now();
    let mut held = Vec::new();
    for i in 0..4 {
        held.push(post(checkout_event(&format!("dry-{i}"))));
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    }
    let others: Vec<_> = (0..8)
        .map(|i| post(checkout_event(&format!("later-{i}"))))
        .collect();
    all_inserted(others).await;
    let others_done = round.elapsed();
    all_busy(held).await;
    assert!(
        others_done < std::time::Duration::from_secs(4),
        "the held retries held the others up again: {others_done:?}"
    );
    // The dry run judged its collision without logging it: a live delivery of the same
    // collision is answered at once, not held behind the dry run's key of it.
    let live = app.post_event(&colliding).await;
    assert_eq!(live.status, StatusCode::CONFLICT, "{}", live.body);
    // Still running: the other events went through while it held its rows.
    assert!(dry_run.try_wait().expect("wait").is_none());
    drop(input);
    let output = dry_run.wait_with_output().expect("wait");
    assert!(output.status.success(), "{output:?}");
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(summary["would_insert"], 999, "{summary}");
    assert_eq!(summary["collided"], 1, "{summary}");
    assert_eq!(app.checkout_stats().await.0, 17, "the other events alone");
    let logged = app.get("/ops/collisions").await;
    let logged = logged.body["collisions"].as_array().map(Vec::len);
    assert_eq!(logged, Some(1), "the live delivery's, not the dry run's");
    for i in 0..5 {
        let stored = app.post_event(&checkout_event(&format!("dry-{i}"))).await;
        assert_eq!(stored.body["status"], "inserted", "{}", stored.body);
    }
}

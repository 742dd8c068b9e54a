//! `spawn_app`: a server on a random port over a fresh database, with one method per
//! endpoint.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use sqlx::Connection;
use traqlyte_server::ServerConfig;
use traqlyte_store::{Store, StoreConfig};

/// Which database the app runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Where the PostgreSQL server for tests is; databases are created and dropped on it.
pub fn pg_admin_url() -> String {
    std::env::var("TRAQLYTE_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_string())
}

/// A uniquely named database that is removed when dropped.
pub struct TestDb {
    pub url: String,
    cleanup: Cleanup,
}

enum Cleanup {
    File(PathBuf),
    PgDatabase(String),
}

fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}_{}_{}_{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

impl TestDb {
    /// A fresh PostgreSQL database created with `options` after its name (e.g. a
    /// collation: `TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US'`).
    pub async fn create_postgres_with(options: &str) -> TestDb {
        let name = unique_name("traqlyte_it");
        let admin = pg_admin_url();
        let mut conn = sqlx::PgConnection::connect(&admin)
            .await
            .unwrap_or_else(|err| {
                panic!("PostgreSQL must be reachable at {admin} for these tests: {err}")
            });
        sqlx::query(&format!("CREATE DATABASE {name} {options}"))
            .execute(&mut conn)
            .await
            .expect("create test database");
        let base = admin
            .rsplit_once('/')
            .map(|(base, _)| base.to_string())
            .unwrap_or(admin);
        TestDb {
            url: format!("{base}/{name}"),
            cleanup: Cleanup::PgDatabase(name),
        }
    }

    pub async fn create(backend: Backend) -> TestDb {
        match backend {
            Backend::Sqlite => {
                let path = std::env::temp_dir().join(format!("{}.db", unique_name("traqlyte_it")));
                TestDb {
                    url: path.display().to_string(),
                    cleanup: Cleanup::File(path),
                }
            }
            Backend::Postgres => TestDb::create_postgres_with("").await,
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        match &self.cleanup {
            Cleanup::File(path) => {
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
                }
            }
            Cleanup::PgDatabase(name) => {
                let name = name.clone();
                // Drop runs inside the test's runtime; use a thread with its own runtime.
                let _ = std::thread::spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .ok()?;
                    runtime.block_on(async {
                        let mut conn = sqlx::PgConnection::connect(&pg_admin_url()).await.ok()?;
                        sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                            .execute(&mut conn)
                            .await
                            .ok()
                    })
                })
                .join();
            }
        }
    }
}

/// A running server over a fresh database, with a tenant and its key.
pub struct TestApp {
    pub address: String,
    pub key: String,
    pub client: Client,
    pub store: Store,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    // Dropped last: the server must stop before its database goes.
    _db: TestDb,
}

/// The server most tests talk to reconciles late events instead of refusing them: their
/// fixtures carry historical occurrence times (the vendored OpenLineage corpus dates
/// from 2019) and must keep passing as the calendar moves on. The horizon's refusal,
/// the product default, is tested with `spawn_app_with` (`partitions.rs`).
pub async fn spawn_app(backend: Backend) -> TestApp {
    let config = ServerConfig {
        late_events: traqlyte_store::LateEvents::Reconcile,
        ..ServerConfig::default()
    };
    spawn_app_with(backend, config).await
}

pub async fn spawn_app_with(backend: Backend, config: ServerConfig) -> TestApp {
    spawn_app_with_store(backend, config, |_| {}).await
}

/// [`spawn_app_with`], the store's configuration first changed by `tune`.
pub async fn spawn_app_with_store(
    backend: Backend,
    config: ServerConfig,
    tune: impl FnOnce(&mut StoreConfig),
) -> TestApp {
    spawn_app_on(TestDb::create(backend).await, config, tune).await
}

/// A server over `db`, with a tenant and its key.
pub async fn spawn_app_on(
    db: TestDb,
    mut config: ServerConfig,
    tune: impl FnOnce(&mut StoreConfig),
) -> TestApp {
    let mut store_config = StoreConfig::new(&db.url);
    tune(&mut store_config);
    let store = Store::connect(&store_config).await.expect("connect");
    store.migrate().await.expect("migrate");
    let (_, key) = store
        .create_tenant(&tenant_name("test tenant"))
        .await
        .expect("tenant");
    config.listen = "127.0.0.1:0".to_string();
    let (bound_tx, bound_rx) = tokio::sync::oneshot::channel();
    let server_store = store.clone();
    let (shutdown_tx, shutdown_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let on_bound = move |address| {
            let _ = bound_tx.send(address);
        };
        let shutdown = async move {
            let _ = shutdown_rx.await;
        };
        traqlyte_server::serve(server_store, config, on_bound, shutdown)
            .await
            .expect("serve");
    });
    let address = format!("http://{}", bound_rx.await.expect("server bound"));
    TestApp {
        address,
        key: key.expose().to_string(),
        client: Client::new(),
        store,
        shutdown: Some(shutdown_tx),
        _db: db,
    }
}

/// Sends SIGTERM to a child process, as a service manager stops it.
pub fn sigterm(child: &std::process::Child) {
    let pid = child.id().to_string();
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status();
    assert!(sent.is_ok_and(|s| s.success()), "kill -TERM {pid}");
}

/// A `traqlyte serve` OS process, killed (SIGKILL) when dropped.
pub struct ServerProcess {
    pub address: String,
    child: std::process::Child,
}

impl ServerProcess {
    /// Starts `traqlyte serve` on a free port over `database_url` with extra flags, and
    /// waits until it prints its address.
    pub fn start(database_url: &str, extra: &[&str]) -> ServerProcess {
        Self::start_with_env(database_url, extra, &[])
    }

    /// [`ServerProcess::start`] with environment variables set on the process (the test
    /// hooks of `traqlyte-server`'s `test-hooks` feature read theirs from there).
    pub fn start_with_env(
        database_url: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> ServerProcess {
        Self::spawn(database_url, extra, env, std::process::Stdio::null(), None)
    }

    /// [`ServerProcess::start`] with files the process writes limited to `kib` KiB
    /// (`ulimit -f`, `SIGXFSZ` ignored): a write beyond fails as on a full disk.
    pub fn start_with_file_size_limit(database_url: &str, kib: u64) -> ServerProcess {
        Self::spawn(
            database_url,
            &[],
            &[],
            std::process::Stdio::null(),
            Some(kib),
        )
    }

    /// [`ServerProcess::start_with_env`] with the process's log (stderr) written to `log`.
    pub fn start_logging(
        database_url: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        log: std::fs::File,
    ) -> ServerProcess {
        Self::spawn(database_url, extra, env, log.into(), None)
    }

    fn spawn(
        database_url: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        stderr: std::process::Stdio,
        file_size_kib: Option<u64>,
    ) -> ServerProcess {
        use std::io::BufRead;
        let binary = env!("CARGO_BIN_EXE_traqlyte");
        let mut command = match file_size_kib {
            None => std::process::Command::new(binary),
            Some(kib) => {
                let mut bash = std::process::Command::new("bash");
                let script = format!("trap '' XFSZ; ulimit -f {kib}; exec \"$0\" \"$@\"");
                bash.args(["-c", &script, binary]);
                bash
            }
        };
        let mut child = command
            .envs(env.iter().copied())
            .args([
                "serve",
                "--database-url",
                database_url,
                "--listen",
                "127.0.0.1:0",
            ])
            .args(extra)
            .stdout(std::process::Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn traqlyte serve");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("stdout");
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the address");
        // "traqlyte listening on http://… (web UI: http://…/ui)": the first address.
        let address = line
            .split_whitespace()
            .find(|word| word.starts_with("http://"))
            .unwrap_or_default()
            .to_string();
        assert!(address.starts_with("http://"), "serve printed {line:?}");
        ServerProcess { address, child }
    }

    /// SIGKILL: no shutdown, no cleanup, like a crash.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, as a service manager stops it; returns at once (see
    /// [`ServerProcess::exited_within`]).
    pub fn terminate(&mut self) {
        sigterm(&self.child);
    }

    /// Whether the process exited within `limit`.
    pub async fn exited_within(&mut self, limit: std::time::Duration) -> bool {
        self.exit_within(limit).await.is_some()
    }

    /// How the process exited, if it did within `limit`.
    pub async fn exit_within(
        &mut self,
        limit: std::time::Duration,
    ) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        None
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `traqlyte fire` in `processes` OS processes (spread over `urls` in turn), each
/// sending `body` `count` times with `headers`; returns each process's JSON report.
pub async fn fire_from_processes(
    urls: &[String],
    key: &str,
    body: &Value,
    processes: usize,
    count: usize,
    headers: &[&str],
) -> Vec<Value> {
    use tokio::io::AsyncWriteExt;
    let mut children = Vec::new();
    for index in 0..processes {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_traqlyte"));
        command.args([
            "fire",
            "--url",
            &urls[index % urls.len()],
            "--count",
            &count.to_string(),
            "--concurrency",
            "32",
        ]);
        for header in headers {
            command.args(["--header", header]);
        }
        let mut child = command
            .env("TRAQLYTE_API_KEY", key)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn traqlyte fire");
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(body.to_string().as_bytes())
            .await
            .expect("write body");
        drop(stdin);
        children.push(child);
    }
    let mut reports = Vec::new();
    for child in children {
        let output = child.wait_with_output().await.expect("fire finished");
        assert!(output.status.success(), "fire failed: {output:?}");
        reports.push(serde_json::from_slice(&output.stdout).expect("fire prints JSON"));
    }
    reports
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// A response's status and JSON body.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub body: Value,
}

impl Answer {
    /// The `status` of each item of a batch answer, in order.
    pub fn item_statuses(&self) -> Vec<&str> {
        self.body["results"]
            .as_array()
            .map(|results| {
                results
                    .iter()
                    .map(|r| r["status"].as_str().unwrap_or("?"))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `error.code` of an error body.
    pub fn code(&self) -> &str {
        self.body["error"]["code"]
            .as_str()
            .unwrap_or("<no error code>")
    }
}

impl TestApp {
    /// Asserts that `path?query` is `400 invalid_parameter` naming `field`, for each
    /// `(query, field)`: a paged listing's refusals of a bad `limit` or `cursor`.
    pub async fn assert_bad_parameters(&self, path: &str, cases: &[(&str, &str)]) {
        for (query, field) in cases {
            let refused = self.get(&format!("{path}?{query}")).await;
            assert_eq!(
                (refused.status, refused.code()),
                (StatusCode::BAD_REQUEST, "invalid_parameter"),
                "{path}?{query}: {}",
                refused.body
            );
            assert_eq!(refused.body["error"]["field"], *field, "{path}?{query}");
        }
    }

    /// The database URL, for starting more server processes on the same database.
    pub fn database_url(&self) -> &str {
        &self._db.url
    }

    /// PostgreSQL only: every insert into `events` sleeps a second (a trigger), so a
    /// request storing an event outlives a short request timeout; undone by
    /// [`TestApp::end_slow_event_inserts`].
    pub async fn slow_event_inserts(&self) {
        self.execute_sql(
            "CREATE OR REPLACE FUNCTION traqlyte_test_slow() RETURNS trigger LANGUAGE plpgsql
               AS $$ BEGIN PERFORM pg_sleep(1); RETURN NEW; END $$;
             CREATE TRIGGER slow_events BEFORE INSERT ON events FOR EACH ROW
               EXECUTE FUNCTION traqlyte_test_slow();",
        )
        .await;
    }

    /// Undoes [`TestApp::slow_event_inserts`].
    pub async fn end_slow_event_inserts(&self) {
        self.execute_sql("DROP TRIGGER slow_events ON events").await;
    }

    /// Runs `sql` (one or more statements) on the app's database over a connection of
    /// its own, as an operator's console would.
    pub async fn execute_sql(&self, sql: &str) {
        execute_sql_at(self.database_url(), sql).await;
    }

    /// The one integer `sql` answers, read on the app's database over a connection of
    /// its own.
    pub async fn integer_sql(&self, sql: &str) -> i64 {
        use sqlx::Connection;
        let url = self.database_url();
        if url.starts_with("postgres") {
            let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
            sqlx::query_scalar(sql)
                .fetch_one(&mut conn)
                .await
                .expect(sql)
        } else {
            let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{url}"))
                .await
                .expect("connect");
            sqlx::query_scalar(sql)
                .fetch_one(&mut conn)
                .await
                .expect(sql)
        }
    }

    /// The tenant of the app's key.
    pub async fn tenant(&self) -> traqlyte_store::TenantId {
        self.store
            .tenant_for_key(&traqlyte_store::ApiKey::parse(&self.key).expect("key"))
            .await
            .expect("lookup")
            .expect("tenant")
    }

    /// Makes the database refuse inserts into `table` of rows for which `condition` (SQL
    /// over `NEW.`) holds, as a failing store would, with a trigger on either backend;
    /// [`TestApp::allow_inserts`] drops it.
    pub async fn refuse_inserts(&self, table: &str, condition: &str) {
        let sql = if self.database_url().starts_with("postgres") {
            format!(
                "CREATE OR REPLACE FUNCTION traqlyte_test_refuse() RETURNS trigger
                   LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$;
                 CREATE TRIGGER refuse_{table} BEFORE INSERT ON {table} FOR EACH ROW
                   WHEN ({condition}) EXECUTE FUNCTION traqlyte_test_refuse();"
            )
        } else {
            format!(
                "CREATE TRIGGER refuse_{table} BEFORE INSERT ON {table} WHEN {condition}
                   BEGIN SELECT RAISE(ABORT, 'injected failure'); END;"
            )
        };
        self.execute_sql(&sql).await;
    }

    /// Drops the trigger of [`TestApp::refuse_inserts`] on `table`.
    pub async fn allow_inserts(&self, table: &str) {
        let sql = if self.database_url().starts_with("postgres") {
            format!("DROP TRIGGER refuse_{table} ON {table}")
        } else {
            format!("DROP TRIGGER refuse_{table}")
        };
        self.execute_sql(&sql).await;
    }

    /// A second tenant's API key.
    pub async fn other_tenant_key(&self) -> String {
        let (_, key) = self
            .store
            .create_tenant(&tenant_name("other tenant"))
            .await
            .expect("tenant");
        key.expose().to_string()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.address)
    }

    /// Sends a request with the tenant's key and reads the JSON answer (every answer of
    /// the API must be JSON, errors included).
    pub async fn send(&self, request: reqwest::RequestBuilder) -> Answer {
        let response = request.send().await.expect("request sent");
        let status = response.status();
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let bytes = response.bytes().await.expect("body read");
        assert!(
            content_type.starts_with("application/json"),
            "{status}: non-JSON answer ({content_type}): {}",
            String::from_utf8_lossy(&bytes)
        );
        let body = serde_json::from_slice(&bytes).expect("JSON body");
        Answer { status, body }
    }

    pub async fn post_raw(&self, path: &str, body: impl Into<reqwest::Body>) -> Answer {
        self.send(
            self.client
                .post(self.url(path))
                .bearer_auth(&self.key)
                .header("content-type", "application/json")
                .body(body),
        )
        .await
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> Answer {
        self.post_raw(path, body.to_string()).await
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.send(self.client.get(self.url(path)).bearer_auth(&self.key))
            .await
    }

    /// Registers a new contract (or a new version of one), asserting the `201`.
    pub async fn register_contract(&self, contract: &Value) {
        let answer = self.post_json("/contracts", contract).await;
        assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    }

    pub async fn register_checkout_contract(&self) {
        self.register_contract(&checkout_contract()).await;
    }

    pub async fn post_event(&self, event: &Value) -> Answer {
        self.post_json("/events/checkout_completed", event).await
    }

    /// `(stored, duplicates, collisions)` of `checkout_completed`.
    pub async fn checkout_stats(&self) -> (i64, i64, i64) {
        let answer = self.get("/stats").await;
        assert_eq!(answer.status, StatusCode::OK);
        let row = &answer.body["contracts"]["checkout_completed"];
        let n = |k: &str| {
            row[k]
                .as_i64()
                .unwrap_or_else(|| panic!("stats lack {k}: {}", answer.body))
        };
        (n("stored"), n("duplicates"), n("collisions"))
    }
}

/// The contract from the foundation issue, with types on the ids.
/// Runs `sql` (one or more statements) on the database at `url` (a PostgreSQL URL or a
/// SQLite path, created if missing) over a connection of its own.
pub async fn execute_sql_at(url: &str, sql: &str) {
    use sqlx::Connection;
    if url.starts_with("postgres") {
        let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
        sqlx::raw_sql(sql).execute(&mut conn).await.expect(sql);
    } else {
        let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{url}?mode=rwc"))
            .await
            .expect("connect");
        sqlx::raw_sql(sql).execute(&mut conn).await.expect(sql);
    }
}

pub fn checkout_contract() -> Value {
    json!({
        "name": "checkout_completed", "version": 1,
        "fields": [
            {"pointer": "/merchant_id", "required": true, "type": "string"},
            {"pointer": "/order_id", "required": true, "type": "string"},
            {"pointer": "/amount", "precision": 2},
            {"pointer": "/items", "array": "set"},
            {"pointer": "/params"}
        ],
        "transport": ["/sent_at", "/attempt", "/host"],
        "occurred_at": "/occurred_at"
    })
}

/// Microseconds of the fixtures' base instant: yesterday 12:00 UTC when the test process
/// first asks, then fixed for the whole process, so a fixture and its retries carry the
/// same occurrence time and every fixture stays inside the 14-day dedupe horizon whatever
/// the date the suite runs on (a fixed calendar date would fall out of it).
fn fixture_base_us() -> i64 {
    static BASE: OnceLock<i64> = OnceLock::new();
    *BASE.get_or_init(|| {
        const DAY_US: i64 = 86_400_000_000;
        let today = traqlyte_store::now_us().div_euclid(DAY_US) * DAY_US;
        today - DAY_US + 12 * 3_600_000_000
    })
}

/// The fixtures' instant moved by `offset_s` seconds, as RFC 3339 with microseconds
/// (`2026-11-30T12:00:00.000000Z`), the way the API answers times.
pub fn fixture_time(offset_s: i64) -> String {
    traqlyte_identity::format_rfc3339_micros(fixture_base_us() + offset_s * 1_000_000)
}

pub fn checkout_event(order: &str) -> Value {
    json!({
        "merchant_id": "merchant_42", "order_id": order, "amount": 129.99,
        "items": ["sku-1", "sku-2"], "params": {"currency": "EUR", "coupon": null},
        "occurred_at": fixture_time(0), "sent_at": fixture_time(1), "attempt": 1,
        "note": "content outside the identity"
    })
}

/// Waits past the next hour boundary (midnight UTC included) when it is less than two
/// minutes away: a test whose counts land in hourly buckets, or whose "today" names a
/// partition, would see them split across two hours or days if it ran across one.
pub async fn clear_of_hour_boundary() {
    clear_of_boundary(3_600_000_000, 120_000_000).await;
}

/// Waits, when the next multiple of `width_us` (UTC) is less than `margin_us` away, until
/// just past it.
pub async fn clear_of_boundary(width_us: i64, margin_us: i64) {
    let now = traqlyte_store::now_us();
    let to_boundary = width_us - now.rem_euclid(width_us);
    if to_boundary < margin_us {
        let wait = u64::try_from(to_boundary + 1_000_000).unwrap_or(0);
        tokio::time::sleep(std::time::Duration::from_micros(wait)).await;
    }
}

/// A tenant name for tests.
pub fn tenant_name(text: &str) -> traqlyte_store::TenantName {
    traqlyte_store::TenantName::parse(text).expect("a valid tenant name")
}

/// Waits (at most 10 s) until a session of `conn`'s database waits for a lock that
/// `condition` (SQL over `pg_locks`) names: a request has reached the point a test holds
/// it at.
pub async fn wait_for_lock_waiter(conn: &mut sqlx::PgConnection, condition: &str) {
    let sql = format!("SELECT count(*) FROM pg_locks WHERE NOT granted AND {condition}");
    let waited = std::time::Duration::from_secs(10);
    wait_for_rows(
        conn,
        &sql,
        waited,
        &format!("no session waited: {condition}"),
    )
    .await;
}

/// Polls `count_sql` (one `COUNT`) until it counts a row; fails with `what` after `limit`.
pub async fn wait_for_rows(
    conn: &mut sqlx::PgConnection,
    count_sql: &str,
    limit: std::time::Duration,
    what: &str,
) {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let (rows,): (i64,) = sqlx::query_as(count_sql)
            .fetch_one(&mut *conn)
            .await
            .expect("count");
        if rows > 0 {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A connection of its own holding `ACCESS EXCLUSIVE` on `events` in an open
/// transaction (`ROLLBACK` on it releases the lock).
pub async fn lock_events(app: &TestApp) -> sqlx::PgConnection {
    use sqlx::Connection;
    let mut holder = sqlx::PgConnection::connect(app.database_url())
        .await
        .expect("connect");
    sqlx::raw_sql("BEGIN; LOCK TABLE events IN ACCESS EXCLUSIVE MODE")
        .execute(&mut holder)
        .await
        .expect("lock events");
    holder
}

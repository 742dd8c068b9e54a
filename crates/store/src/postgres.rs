//! The PostgreSQL backend: a shared pool, default durable commits
//! (`synchronous_commit = on`), and one `INSERT … SELECT FROM unnest(…) ON CONFLICT DO
//! NOTHING` per batch so a batch costs one round trip however many events it holds.

use std::time::Duration;

use sqlx::postgres::{PgPool, PgPoolOptions};

use crate::{StoreConfig, StoreError};

/// How long a pooled connection may have been idle and still be handed out unchecked.
const ALIVE_BYPASS_WINDOW: Duration = Duration::from_millis(500);

/// When a PostgreSQL session of this process was last found taking no writes (SQLSTATE
/// `25006` on a write, or [`crate::Store::ping`]'s finding), in nanoseconds since
/// [`epoch`]; 0 for never. Every connection opened before then is closed instead of
/// being handed out again ([`opened_before_read_only`]): a session keeps the
/// `default_transaction_read_only` it started with, so after a per-database or per-role
/// setting was lifted (`ALTER DATABASE … RESET`) the sessions a server held stayed
/// read-only, the probe's for ever and the API's until sqlx's 30-minute lifetime, and
/// writes and readiness stayed `503` (a review). After a failover behind an address that
/// moved, the same renewal reaches the new primary. While the database stays read-only
/// each refusal renews its connection: a connect per refused request, for an outage.
/// One mark for the process, not per pool: a process serves one database, and a second
/// store's connections renewed once cost a connect each.
static READ_ONLY_SEEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The instant [`READ_ONLY_SEEN`] counts from: the first time anything asked.
fn epoch() -> std::time::Instant {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(std::time::Instant::now)
}

fn nanos_since_epoch() -> u64 {
    u64::try_from(epoch().elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Marks now as the last time a session was found taking no writes ([`READ_ONLY_SEEN`]).
pub(crate) fn note_read_only() {
    READ_ONLY_SEEN.fetch_max(
        nanos_since_epoch().max(1),
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// Whether a connection opened `age` ago was opened before a session was last found
/// taking no writes, and may hold a read-only default the database no longer has.
fn opened_before_read_only(age: Duration) -> bool {
    let seen = READ_ONLY_SEEN.load(std::sync::atomic::Ordering::Relaxed);
    let age = u64::try_from(age.as_nanos()).unwrap_or(u64::MAX);
    seen != 0 && nanos_since_epoch().saturating_sub(age) <= seen
}

/// A `before_acquire` check of the pools that ping nothing first (the probe's, the
/// partitions'): a connection opened before a read-only finding is closed, not handed out.
fn kept_unless_opened_before_read_only(
    _conn: &mut sqlx::PgConnection,
    meta: sqlx::pool::PoolConnectionMetadata,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<bool, sqlx::Error>> + Send + '_>> {
    Box::pin(async move { Ok(!opened_before_read_only(meta.age)) })
}

/// How long a connection given back in the middle of its work (a request timed out, a
/// transaction dropped) may take to finish it before it is thrown away ([`settled`]).
const SETTLE_ON_RELEASE: Duration = Duration::from_secs(2);

/// Whether a connection given back to a pool can be kept: one given back in the middle
/// of its work (a request that timed out mid-statement, a transaction dropped, whose
/// `ROLLBACK` is queued) first reads the rest of the answers it awaits, within
/// [`SETTLE_ON_RELEASE`]. sqlx did that with no bound, on a task of its own, holding the
/// connection's pool slot: a database gone without a reset (a host powered off, a
/// failover to another address, a partition) stranded every connection in use at the
/// time, for good (a review behind a proxy that stops forwarding: after the third outage
/// all 16 were stranded and every write was `503 store_busy` while the database was back,
/// readiness 200). Past the bound the connection is closed where it stands (its slot is
/// freed and the pool opens another). A connection whose work was done waits for
/// nothing here (no round trip: the answers it awaits are none); sqlx's own check that
/// follows (a round trip) has no bound: an outage beginning within it strands the
/// connection until the kernel gives up on it.
async fn settled(conn: &mut sqlx::PgConnection) -> Result<bool, sqlx::Error> {
    // `flush` reads what the connection still awaits (sqlx's `wait_until_ready`);
    // hidden in sqlx's docs, but the one call that costs nothing when nothing is owed.
    match tokio::time::timeout(SETTLE_ON_RELEASE, sqlx::Connection::flush(conn)).await {
        Ok(result) => result.map(|()| true),
        Err(_) => Err(sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "a connection given back mid-work got no answer within 2 s: closed",
        ))),
    }
}

#[derive(Clone)]
pub(crate) struct PgStore {
    pub(crate) pool: PgPool,
    /// One connection of its own for the partitions a write transaction needs created
    /// while it is open (a late event's old day): taken from `pool`, it could wait for
    /// ever behind the very transactions that are waiting for it (a pool of one, or as
    /// many concurrent late batches as connections). Opened on first use.
    pub(crate) ddl: PgPool,
    /// One connection of its own for readiness checks ([`crate::Store::ping`]): on
    /// `pool` a burst that kept every connection busy past the check's bound made a
    /// healthy database look down, taking every replica out of a load balancer at once.
    /// Opened on first use and kept (renewing it would fail readiness on a cluster at
    /// `max_connections` while the API's pool still works), unless it was found taking
    /// no writes ([`READ_ONLY_SEEN`]).
    pub(crate) health: PgPool,
    /// How long one statement of a lineage walk or a report may run (`StoreConfig::walk_timeout_ms`).
    pub(crate) walk_timeout_ms: u64,
    /// When a connection of `pool` was last given back with its work done
    /// ([`settled`]), in milliseconds since `born`.
    given_back: std::sync::Arc<std::sync::atomic::AtomicU64>,
    born: std::time::Instant,
    /// `StoreConfig::pool_stranded_after_ms`.
    stranded_after: Duration,
}

impl PgStore {
    pub(crate) async fn connect(config: &StoreConfig) -> Result<PgStore, StoreError> {
        // Best effort, within the acquire timeout: a database out of reach, starting or
        // out of connection slots gives no verdict, and the pool below answers for it
        // (with its own bound and retries).
        // Its error is kept: when the pool cannot connect either, sqlx says only "pool
        // timed out while waiting for an open connection", and the probe's error says why
        // (connection refused, no such database, password authentication failed).
        let url = with_default_sslmode(&config.database_url);
        let bound = Duration::from_millis(config.pool_acquire_timeout_ms.max(1));
        let why = match tokio::time::timeout(bound, refuse_shared_sessions(&url)).await {
            Ok(Err(StoreError::SharedSessions)) => return Err(StoreError::SharedSessions),
            Ok(Err(err)) => {
                tracing::debug!(error = %err, "pooler check gave no verdict");
                Some(err)
            }
            Err(_) => {
                tracing::debug!("pooler check gave no verdict within the acquire timeout");
                None
            }
            Ok(Ok(())) => None,
        };
        let lock_timeout_ms = config.lock_timeout_ms;
        let born = std::time::Instant::now();
        let given_back = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let noted = given_back.clone();
        let pool = PgPoolOptions::new()
            .max_connections(config.pool_connections_max.max(1))
            .acquire_timeout(Duration::from_millis(config.pool_acquire_timeout_ms.max(1)))
            // sqlx pings every idle connection before handing it out: a round trip per
            // acquire, on top of the one it makes when a connection is released. A
            // connection that was released moments ago (its release ping answered) is
            // handed out as it is; one idle for longer is pinged first, so a server
            // restarted meanwhile costs no request an error (HikariCP's
            // `aliveBypassWindowMs`, 500 ms there too).
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if opened_before_read_only(meta.age) {
                        return Ok(false);
                    }
                    if meta.idle_for >= ALIVE_BYPASS_WINDOW {
                        sqlx::Connection::ping(conn).await?;
                    }
                    Ok(true)
                })
            })
            // Every acknowledged write must be durable first, which holds only with
            // `synchronous_commit` on (or a stronger or local level): a database or role
            // set to `off` would acknowledge commits a crash of PostgreSQL loses. Such a
            // setting is overridden for this process's sessions; any other is kept.
            // And no JIT, and a bound on lock waits ([`session_settings`]).
            .after_connect(move |conn, _meta| Box::pin(session_settings(conn, lock_timeout_ms)))
            .after_release(move |conn, _meta| {
                let noted = noted.clone();
                Box::pin(async move {
                    let kept = settled(conn).await;
                    if matches!(kept, Ok(true)) {
                        noted.store(millis_since(born), std::sync::atomic::Ordering::Relaxed);
                    }
                    kept
                })
            })
            .connect(&url)
            .await
            .map_err(|err| match (err, why) {
                (sqlx::Error::PoolTimedOut, Some(why)) => why,
                // The check got no verdict within the same bound: no cause to give but
                // the silence itself ("pool timed out" said nothing of the database).
                (sqlx::Error::PoolTimedOut, None) => StoreError::NoAnswer {
                    waited_ms: config.pool_acquire_timeout_ms.max(1),
                },
                (err, _) => StoreError::from(err),
            })?;
        let ddl = PgPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            // Well under the request timeout: a connection that cannot be had (a pooler's
            // queue) ends as `503 store_busy`, logged, not as the request's `408`.
            .acquire_timeout(Duration::from_secs(5))
            .idle_timeout(Duration::from_secs(60))
            .before_acquire(kept_unless_opened_before_read_only)
            .after_connect(move |conn, _meta| Box::pin(session_settings(conn, lock_timeout_ms)))
            .after_release(|conn, _meta| Box::pin(settled(conn)))
            .connect_lazy(&url)?;
        let health = PgPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .acquire_timeout(Duration::from_secs(1))
            .max_lifetime(None)
            .idle_timeout(None)
            .before_acquire(kept_unless_opened_before_read_only)
            .after_release(|conn, _meta| Box::pin(settled(conn)))
            .connect_lazy(&url)?;
        Ok(PgStore {
            pool,
            ddl,
            health,
            walk_timeout_ms: config.walk_timeout_ms,
            given_back,
            born,
            stranded_after: Duration::from_millis(config.pool_stranded_after_ms),
        })
    }

    /// How long every connection of `pool` has been in use with none given back, when
    /// that is `stranded_after` or more ([`crate::Store::pool_stranded_for`]). A pool
    /// not full, or with a connection idle, is not stranded, whatever the time since the
    /// last was given back: a quiet server's one long scan is not a stranded pool.
    pub(crate) fn stranded_for(&self) -> Option<Duration> {
        let max = self.pool.options().get_max_connections();
        if self.pool.size() < max || self.pool.num_idle() > 0 {
            return None;
        }
        let given_back = self.given_back.load(std::sync::atomic::Ordering::Relaxed);
        let since = Duration::from_millis(millis_since(self.born).saturating_sub(given_back));
        (since >= self.stranded_after).then_some(since)
    }
}

/// `pool.begin()` whose `BEGIN` round trip runs on a task of its own, so that the caller
/// giving up (a client that disconnected, a request timeout, a `select!`) cannot cut it
/// short. sqlx 0.8 raises the transaction's depth only once `BEGIN` is answered, so a
/// future dropped in between queues no `ROLLBACK`: the connection went back to the pool
/// inside an open transaction, and the next borrower's statements ran in it (autocommit
/// writes not committed until someone's `COMMIT`, its locks held) — sqlx issue #4393,
/// fixed in 0.9. Here the task ends with the transaction begun, and when nobody awaits it
/// any more it is dropped, which rolls it back as any dropped transaction is. The wait
/// for a connection stays the caller's, so a request that gave up leaves the queue at
/// once. A review reproduced the leak with walks answered `408`.
pub(crate) async fn begin(
    pool: &PgPool,
) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, StoreError> {
    use tracing::Instrument;
    let conn = pool.acquire().await?;
    let begin = sqlx::Transaction::begin(conn, None).in_current_span();
    match tokio::spawn(begin).await {
        Ok(begun) => Ok(begun?),
        Err(_) => Err(StoreError::task_gone()),
    }
}

fn millis_since(born: std::time::Instant) -> u64 {
    u64::try_from(born.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Refuses a connection pooler that runs one client connection's statements on several
/// PostgreSQL sessions (PgBouncer's `pool_mode = transaction` or `statement`, and proxies
/// like it): this store's prepared statements and its durable-commit setting
/// ([`SESSION_SETTINGS`]) belong to a session, and on shared sessions statements met
/// another client's statements of the same name (a reviewer saw valid API keys answered
/// `401`, and `500`s). The probe: a first connection runs a statement, which gives its
/// server session back to such a pooler; a second connection, the first still open, opens
/// a transaction. Directly or in session pooling the two have sessions of their own; a
/// pooler that shares sessions hands the second the first's (PgBouncer reuses the most
/// recently freed one). Simple-protocol statements only, which any pooler passes. Best
/// effort: a pooler that gives the second connection another freed session passes.
async fn refuse_shared_sessions(url: &str) -> Result<(), StoreError> {
    use sqlx::Connection;
    let mut first = sqlx::PgConnection::connect(url).await?;
    let first_pid = backend_pid(&mut first).await?;
    let mut second = sqlx::PgConnection::connect(url).await?;
    sqlx::raw_sql("BEGIN").execute(&mut second).await?;
    let second_pid = backend_pid(&mut second).await?;
    sqlx::raw_sql("ROLLBACK").execute(&mut second).await?;
    // Closing is courtesy: the pids are known.
    let _ = second.close().await;
    let _ = first.close().await;
    if first_pid == second_pid {
        return Err(StoreError::SharedSessions);
    }
    Ok(())
}

/// The PostgreSQL session's process id, by the simple query protocol.
async fn backend_pid(conn: &mut sqlx::PgConnection) -> Result<i32, StoreError> {
    use sqlx::Row;
    let row = sqlx::raw_sql("SELECT pg_backend_pid()")
        .fetch_one(&mut *conn)
        .await?;
    Ok(row.try_get::<i32, _>(0)?)
}

/// The session's settings, in one statement (a round trip per connection opened):
///
/// - Durable commits: `synchronous_commit = off` (a database's or role's default) turns
///   into `on` for the session, so an acknowledged write is on disk; any other level
///   (`local`, `remote_write`, `remote_apply`) is kept.
/// - No JIT. The store's statements are short, and on the partitioned `events` (a table
///   per day, hundreds of days of detached ones) PostgreSQL's JIT compiled thousands of
///   functions for one: a review measured the fingerprint read of a backfill re-checking
///   385 detached days at 13.3 s of JIT for 15 ms of execution (a second backfill run
///   2 min 33 s with JIT, 9.6 s without; a live batch of 1,000 old retries with
///   `--late-events reconcile` 16 s against 0.2 s).
/// - TCP keepalives on PostgreSQL's side of the session's connection, 30 s idle then a
///   probe every 10 s, 3 unanswered ending it (the operating system's default is two
///   hours of silence): a client gone without a reset (this process's host powered off,
///   a partition that outlasts the closing of its sockets) left a session that could
///   hold the row locks of an open transaction, and a retry of the same events waited on
///   them, for hours. Ignored on a Unix-domain socket. This side has no keepalives (sqlx
///   offers none): its waits have bounds of their own ([`settled`], the server's
///   deadlines).
/// - A bound on each wait for a lock, `$1` ms ([`crate::StoreConfig::lock_timeout_ms`]),
///   where `lock_timeout` has PostgreSQL's default (0, none) and `$1` is not 0: a value
///   set in the configuration file, for the database or the role, or in the URL's
///   `options`, 0 too, is kept.
/// - From PostgreSQL 14, a statement whose client closed the connection (a connection
///   given back mid-statement and not [`settled`]) is stopped within a second
///   (`client_connection_check_interval`), where it ran to its end, beside the backends
///   of the connections the pool opened instead.
const SESSION_SETTINGS: &str = "SELECT set_config('jit', 'off', false),
     CASE WHEN current_setting('synchronous_commit') = 'off'
          THEN set_config('synchronous_commit', 'on', false) END,
     CASE WHEN $1 <> '0'
           AND (SELECT source FROM pg_settings WHERE name = 'lock_timeout') = 'default'
          THEN set_config('lock_timeout', $1, false) END,
     set_config('tcp_keepalives_idle', '30', false),
     set_config('tcp_keepalives_interval', '10', false),
     set_config('tcp_keepalives_count', '3', false),
     CASE WHEN current_setting('server_version_num')::int >= 140000
          THEN set_config('client_connection_check_interval', '1000', false) END";

/// What every session of the store's pools sets when it connects: [`SESSION_SETTINGS`].
async fn session_settings(
    conn: &mut sqlx::PgConnection,
    lock_timeout_ms: u64,
) -> Result<(), sqlx::Error> {
    sqlx::query(SESSION_SETTINGS)
        .bind(lock_timeout_ms.to_string())
        .execute(conn)
        .await?;
    Ok(())
}

impl crate::Store {
    /// The `synchronous_commit` level this process's PostgreSQL sessions commit with
    /// (never `off`); `None` on SQLite, whose commits are `synchronous=FULL`.
    pub async fn synchronous_commit(&self) -> Result<Option<String>, StoreError> {
        self.session_setting("synchronous_commit").await
    }

    /// A setting as one of this process's PostgreSQL sessions has it; `None` on SQLite.
    pub async fn session_setting(&self, name: &str) -> Result<Option<String>, StoreError> {
        let crate::Backend::Postgres(pg) = &self.backend else {
            return Ok(None);
        };
        let value: String = sqlx::query_scalar("SELECT current_setting($1)")
            .bind(name)
            .fetch_one(&pg.pool)
            .await?;
        Ok(Some(value))
    }
}

/// `url` with `sslmode=disable` when it names no `sslmode`: TLS is used when the URL asks
/// for it (`require`, `verify-ca`, `verify-full`, `prefer`), not by default (libpq's
/// `prefer`): with it, a server whose network vanished and came back was not served
/// again within 20 s (`tests/it/vanished.rs`), which no one has looked into yet.
fn with_default_sslmode(url: &str) -> std::borrow::Cow<'_, str> {
    if url.to_ascii_lowercase().contains("sslmode=") {
        return std::borrow::Cow::Borrowed(url);
    }
    let separator = if url.contains('?') { '&' } else { '?' };
    std::borrow::Cow::Owned(format!("{url}{separator}sslmode=disable"))
}

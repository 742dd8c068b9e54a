//! All SQL of TraqLyte: one [`Store`] interface over two backends, SQLite (the embedded
//! default, one file in WAL mode) and PostgreSQL (production, shared by several server
//! processes), with the migrations applied by [`Store::migrate`].
//!
//! The dedupe guarantee lives here and only here: every fact table has a unique key that
//! starts with the tenant, and rows are written with `INSERT … ON CONFLICT DO NOTHING`.
//! A conflicting row is then compared with the incoming one by payload fingerprint:
//! equal means a retry (counted), different means a collision (logged, nothing
//! overwritten). See [`plan`] for that pure comparison.
//!
//! Main types: [`Store`], [`StoreConfig`], [`TenantId`], [`TenantName`], [`ApiKey`],
//! [`KeyPrefix`] (tenants and key lifecycle: [`tenants`]), [`NewEvent`],
//! [`EventOutcome`], [`ContractStats`], [`UiToken`]; lineage (OpenLineage run events and
//! their graph): [`RunEventRow`], [`NodeRef`], [`Walk`]; Segment sources, write keys and
//! metric bindings: [`sources`]; the semantic-duplicate scan: [`semantic`].

#![deny(missing_docs)]

mod assignments_batch;
mod at_once;
#[cfg(feature = "bench")]
mod bench;
pub mod campaigns;
mod clock;
pub mod deadletters;
mod events;
pub mod experiments;
pub mod idempotency;
mod lineage;
mod migrate;
mod model;
pub mod ops;
pub mod outcome_corrections;
mod outcomes_batch;
pub mod partitions;
pub mod plan;
pub mod plans;
mod postgres;
pub mod semantic;
pub mod sources;
mod sql;
mod sqlite;
pub use sqlite::{database_file, in_memory_database};
pub mod supersessions;
pub mod tenants;
mod tx;
pub mod ui_tokens;
mod unit_metrics;

use traqlyte_identity::{Contract, ContractName, EventId};

#[cfg(feature = "bench")]
pub use bench::{ArmScan, SeededExperiment};
pub use campaigns::{
    Arm, Arms, Campaign, CampaignCreated, CampaignId, CampaignVersion, MetricDef, MetricKind,
    NewCampaign,
};
pub use deadletters::{
    DeadLetter, DeadLetterCursor, NewDeadLetter, DEAD_LETTERS_PAGE_BYTES_MAX, DEAD_LETTERS_PAGE_MAX,
};
pub use events::{MINUTE_TALLIES_KEPT_US, TALLY_BUCKET_US};
pub use experiments::{
    Assignment, AssignmentId, DedupeKey, DuplicatesInBucket, MetricArmSums, MetricWindow,
    NewOutcome, OutcomeResult, StoredOutcome, UnitId, UnitsByVersion, WindowSums,
    OUTCOME_VALUE_ABS_MAX, UNIT_VALUE_ABS_MAX,
};
pub use idempotency::{IdempotencyKey, KeyRecord, OwnerToken, StoredResponse};
pub use lineage::{Direction, GraphCounts, NodeKind, NodeRef, RunEventRow, Walk, WalkLimits};
pub use model::{
    ApiKey, CollisionRecord, ContractStats, EventOutcome, NewEvent, RegisterOutcome, StoredEvent,
    TenantId,
};
pub use ops::{
    lacking_partition_message, Bucket, Claim, ClaimTurns, ClaimedDelivery, CollisionCursor,
    CollisionEntry, CollisionsQuery, IngestSource, PoolUsage, TrendQuery, TrendRow, Webhook,
    WEBHOOKS_PER_TENANT_MAX,
};
pub use outcome_corrections::{
    stored_outcome_id, CorrectionResult, OutcomeCorrection, OutcomeHistory,
};
pub use partitions::{
    Admission, DedupeHorizon, LateEvents, Maintenance, OutsideHorizon, PartitionInfo,
};
pub use semantic::{
    SemanticFinding, SemanticGroup, SemanticProgress, SemanticScan, SemanticScope,
    SEMANTIC_EXAMPLES_MAX,
};
pub use sources::{
    BindingInfo, BindingOutcome, BindingTally, MetricBinding, NewRejection, Rejection, Source,
    SourceId, SourceInfo, SourceName, SourceTally, WriteKey, SOURCES_PAGE_MAX,
};
pub use supersessions::{SupersedeOutcome, Supersession};
pub use tenants::{
    ApiKeyInfo, KeyPrefix, KeySelector, TenantName, TenantRecord, KEYS_LIST_MAX, TENANTS_LIST_MAX,
};
pub use tx::StoreTx;
pub use ui_tokens::{UiGrant, UiTenant, UiToken, UiTokenKind};

/// Errors of the store layer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database URL is neither `sqlite:` / a file path nor `postgres://`, or names
    /// no SQLite file. The text says why without the URL itself, which may carry a
    /// password.
    #[error("unsupported database URL: {0}")]
    UnsupportedUrl(String),
    /// The database holds a migration this build does not know: a newer build migrated
    /// it. An older build must not write to it (a newer schema may have dropped or
    /// reshaped what it writes).
    #[error("the database was migrated by a newer build of traqlyte (migration {version} is unknown to this one): run that build or a newer one; to go back, restore a backup taken before it migrated")]
    NewerSchema {
        /// The unknown migration's version.
        version: i64,
    },
    /// The database holds tables and none of traqlyte's migrations: another
    /// application's database, named by mistake. Nothing is installed into it.
    #[error("the database holds {count} table(s) (such as {example:?}) and none of traqlyte's migrations: traqlyte installs only into an empty database (on PostgreSQL, or into an empty schema of its own, named first in search_path); check the database URL")]
    ForeignDatabase {
        /// How many tables the current schema holds.
        count: i64,
        /// The first of them by name.
        example: String,
    },
    /// A contract with the same name and version but a different definition exists.
    #[error("contract {name} version {version} is already registered with a different definition; contracts are immutable, register a new version")]
    ContractConflict {
        /// The contract name.
        name: String,
        /// The contract version.
        version: u32,
        /// The registered definition (RFC 8785 JSON), to say where the two differ.
        registered: String,
        /// The refused definition (RFC 8785 JSON).
        refused: String,
    },
    /// A write conflicts with existing data (e.g. a campaign key already taken).
    #[error("{message}")]
    Conflict {
        /// A stable machine-readable code.
        code: &'static str,
        /// What happened, for people.
        message: String,
    },
    /// A stored row could not be decoded (the database holds something this build did not write).
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// An event's occurrence day has no partition that live writes reach: it lies
    /// outside the dedupe horizon (or too far ahead). Nothing was written.
    #[error("the event's occurrence time lies outside the dedupe horizon: no live partition holds its day; load it with `traqlyte backfill`")]
    OutsideHorizon,
    /// A read ran longer than its bound (a lineage walk's level, a campaign report's read).
    #[error("the query ran longer than its time bound and was stopped")]
    QueryTimeout,
    /// Another process held the lock of partition changes for longer than the wait
    /// allowed (a maintenance run, or another old day being created). Nothing was
    /// written; retrying shortly succeeds.
    #[error(
        "the partitions are being changed by another process; nothing was written, retry shortly"
    )]
    Busy,
    /// The SQLite file failed `PRAGMA quick_check` ([`Store::check_integrity`]): the
    /// first problem it names.
    #[error(
        "the SQLite file is corrupt ({0}); nothing was written. Stop, and restore a copy taken with `sqlite3 FILE \"VACUUM INTO 'COPY'\"` (docs/operations.md, Backups): a file copied with `cp` while a server wrote it is corrupt this way, and so is a good copy put in place beside the old `-wal` and `-shm` files of a server that crashed (SQLite applies them to it): delete those two first"
    )]
    CorruptFile(String),
    /// A partition due to leave the horizon was not detached: a transaction holding a
    /// lock on `events` did not end within
    /// [`partitions::DETACH_LOCK_TIMEOUT_MS`]. It stays attached; creations of the same
    /// run were committed before.
    #[error(
        "partition {table} was not detached: a transaction reading or writing `events` (a long report, a pg_dump, a backfill dry run) held its lock past {} ms; it stays attached (days this run created stay created), and the next maintenance run (every minute in `serve`) tries again",
        partitions::DETACH_LOCK_TIMEOUT_MS
    )]
    DetachWaiting {
        /// The partition's table.
        table: String,
    },
    /// The database takes no writes: a hot standby, a demoted primary after a failover,
    /// or `default_transaction_read_only` set ([`Store::ping`]'s finding).
    #[error(
        "the database takes no writes (a standby, or read-only): point the server at the primary"
    )]
    ReadOnly,
    /// PostgreSQL accepted connections but answered nothing within the acquire timeout,
    /// twice (the pooler check, then the pool): a server hung, or not PostgreSQL.
    #[error("no answer from the database within {waited_ms} ms (it accepted the connection and said nothing): a PostgreSQL server hung, a port that is not PostgreSQL's, or a network that drops replies")]
    NoAnswer {
        /// How long one attempt waited.
        waited_ms: u64,
    },
    /// The SQLite file at the store's path is not the one it opened: deleted, moved or
    /// replaced while the process ran. Nothing is written until the process restarts.
    #[error("the SQLite file {path} was deleted or replaced while this process ran: writes would go to a file no later start opens; stop the process, restore the file if it was lost (docs/operations.md, Backups) and start again")]
    FileGone {
        /// The file's path.
        path: String,
    },
    /// A migration failed; the database's error with its hint.
    #[error("{message}")]
    MigrationFailed {
        /// The error and the hint.
        message: String,
        /// The database's error.
        #[source]
        source: sqlx::Error,
    },
    /// The database URL leads to a connection pooler that shares PostgreSQL sessions
    /// between its clients (PgBouncer in transaction or statement pooling).
    #[error(
        "the database URL leads to a connection pooler that shares PostgreSQL sessions between clients \
         (PgBouncer's pool_mode = transaction or statement, or a proxy like it): two connections got \
         the same server session. TraqLyte needs a session per connection (its prepared statements \
         and its durable-commit setting are per session): connect to PostgreSQL directly, or set \
         pool_mode = session"
    )]
    SharedSessions,
    /// Any database error. Built through `From<sqlx::Error>`, never by hand: that notes
    /// a refusal to write for the pools (a read-back found event writes skipping it).
    #[error(transparent)]
    Database(sqlx::Error),
}

impl From<sqlx::Error> for StoreError {
    /// Wraps `err`; a PostgreSQL refusal to write (`25006`) also marks the process's
    /// sessions opened so far for renewal (`postgres::note_read_only`).
    fn from(err: sqlx::Error) -> Self {
        let err = StoreError::Database(err);
        if err.postgres_code_is("25006") {
            postgres::note_read_only();
        }
        err
    }
}

/// `work`, given up past `deadline` as a connection lost under it
/// ([`StoreError::outcome_unknown`]): for work no request waits on (a background task's
/// round), which nothing else bounds. A database gone without a reset (a host powered
/// off, a failover to another address, a partition) never answers, and a task waiting
/// on it waited for good (a review saw the webhook dispatcher and the clock's sync stuck
/// until the dead sockets were closed). Dropped, the work's connection is closed as the
/// pool takes it back.
pub async fn within<T>(
    deadline: std::time::Duration,
    work: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(deadline, work).await {
        Ok(result) => result,
        Err(_) => Err(StoreError::connection_lost(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "no answer from the database within {} s",
                deadline.as_secs()
            ),
        ))),
    }
}

impl StoreError {
    /// The error of a connection that failed under a statement (see
    /// [`StoreError::outcome_unknown`]); for fault-injection hooks.
    pub fn connection_lost(err: std::io::Error) -> StoreError {
        StoreError::Database(sqlx::Error::Io(err))
    }

    /// The error of a store call run on a task of its own that ended without a result
    /// (a panic, or the runtime shutting down): sqlx's `WorkerCrashed`.
    pub fn task_gone() -> StoreError {
        StoreError::Database(sqlx::Error::WorkerCrashed)
    }

    /// Whether the store refused the work for contention and nothing was written, so a
    /// retry shortly is the answer: [`StoreError::Busy`]; SQLite's lock held by another
    /// writer past the busy timeout (`SQLITE_BUSY`, `SQLITE_LOCKED` and their extended
    /// codes); PostgreSQL's serialization failure (`40001`), deadlock (`40P01`) and lock
    /// timeout (`55P03`), each of which rolled the transaction back; every pooled
    /// connection in use past the acquire timeout.
    pub fn is_busy(&self) -> bool {
        const SQLITE_BUSY: i32 = 5;
        const SQLITE_LOCKED: i32 = 6;
        match self {
            StoreError::Busy
            | StoreError::DetachWaiting { .. }
            | StoreError::Database(sqlx::Error::PoolTimedOut) => true,
            StoreError::Database(sqlx::Error::Database(db)) => {
                let Some(code) = db.code() else {
                    return false;
                };
                if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
                    // Extended codes keep the primary code in their low byte.
                    code.parse::<i32>()
                        .is_ok_and(|c| matches!(c & 0xff, SQLITE_BUSY | SQLITE_LOCKED))
                } else {
                    matches!(code.as_ref(), "40001" | "40P01" | "55P03")
                }
            }
            _ => false,
        }
    }

    /// Whether the store waited as long as it may for a lock, a connection or a
    /// statement and gave up (SQLite's busy timeout, PostgreSQL's lock timeout and
    /// statement timeout, every pooled connection in use or the database unreachable past
    /// the acquire timeout): work retried at once would wait as long again. A deadlock or
    /// a serialization failure is busy, but not this: retried at once it usually
    /// succeeds.
    pub fn waited_out(&self) -> bool {
        match self {
            StoreError::Busy
            | StoreError::DetachWaiting { .. }
            | StoreError::Database(sqlx::Error::PoolTimedOut) => true,
            StoreError::Database(sqlx::Error::Database(db))
                if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() =>
            {
                self.is_busy()
            }
            StoreError::Database(sqlx::Error::Database(db)) => {
                matches!(db.code().as_deref(), Some("55P03" | "57014"))
            }
            _ => false,
        }
    }

    /// A PostgreSQL statement that waited for a lock past its `lock_timeout`
    /// ([`StoreConfig::lock_timeout_ms`], SQLSTATE `55P03`; one of
    /// [`StoreError::waited_out`]): another transaction holds a row or a table it needs.
    pub fn lock_waited_out(&self) -> bool {
        self.postgres_code_is("55P03")
    }

    /// `self` as the error of a read bounded by [`StoreConfig::walk_timeout_ms`]: a
    /// statement PostgreSQL stopped at that bound is [`StoreError::QueryTimeout`], the
    /// request timeout's own answer; every other error is itself.
    pub(crate) fn bounded_read_stopped(self) -> StoreError {
        if self.statement_timed_out() {
            StoreError::QueryTimeout
        } else {
            self
        }
    }

    /// Whether a statement was stopped at PostgreSQL's `statement_timeout` (`57014`: a
    /// lock waited for, or a statement slower than an operator allows; also one cancelled
    /// by `pg_cancel_backend`). Nothing was written. Not [`StoreError::is_busy`]: the
    /// same request may meet it every time, so no client is told to retry in a second.
    pub fn statement_timed_out(&self) -> bool {
        self.postgres_code_is("57014")
    }

    /// Whether `self` is PostgreSQL's error of SQLSTATE `code`.
    fn postgres_code_is(&self, code: &str) -> bool {
        matches!(
            self,
            StoreError::Database(sqlx::Error::Database(db))
                if db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>().is_some()
                    && db.code().as_deref() == Some(code)
        )
    }

    /// Whether the database refused the work for a condition of its own that clears
    /// without a change to the request: it takes no writes (`25006`: a standby, a
    /// demoted primary; [`StoreError::ReadOnly`]), its disk is full (`53100`), it has no
    /// connection slot left (`53300`), or an I/O error stopped it (`58030`); on SQLite a
    /// full disk, an I/O error, or a file it cannot open or write. The statement failed,
    /// so nothing was written. Not the rest of classes `53` and `58` (out of memory, a
    /// configured limit): those can follow the request itself, every time.
    pub fn database_refusing_work(&self) -> bool {
        const SQLITE_READONLY: i32 = 8;
        const SQLITE_IOERR: i32 = 10;
        const SQLITE_FULL: i32 = 13;
        const SQLITE_CANTOPEN: i32 = 14;
        let db = match self {
            StoreError::ReadOnly | StoreError::FileGone { .. } => return true,
            StoreError::Database(sqlx::Error::Database(db)) => db,
            _ => return false,
        };
        let Some(code) = db.code() else {
            return false;
        };
        if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
            code.parse::<i32>().is_ok_and(|c| {
                matches!(
                    c & 0xff,
                    SQLITE_READONLY | SQLITE_IOERR | SQLITE_FULL | SQLITE_CANTOPEN
                )
            })
        } else {
            matches!(code.as_ref(), "25006" | "53100" | "53300" | "58030")
        }
    }

    /// Whether SQLite reported an I/O error (`SQLITE_IOERR` and its extended codes): at a
    /// commit (a failed `fsync` of the log) the transaction may be on disk all the same,
    /// and come back at the next start.
    pub fn is_sqlite_io_error(&self) -> bool {
        const SQLITE_IOERR: i32 = 10;
        match self {
            StoreError::Database(sqlx::Error::Database(db))
                if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() =>
            {
                db.code()
                    .and_then(|code| code.parse::<i32>().ok())
                    .is_some_and(|c| c & 0xff == SQLITE_IOERR)
            }
            _ => false,
        }
    }

    /// Whether SQLite found its file corrupt (`SQLITE_CORRUPT`, `SQLITE_NOTADB`, and their
    /// extended codes), or [`Store::check_integrity`] did: a torn copy, a restore over a
    /// stale WAL, a failing disk. Not transient: the file must be restored.
    pub fn is_corrupt_file(&self) -> bool {
        const SQLITE_CORRUPT: i32 = 11;
        const SQLITE_NOTADB: i32 = 26;
        match self {
            StoreError::CorruptFile(_) => true,
            StoreError::Database(sqlx::Error::Database(db))
                if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() =>
            {
                db.code()
                    .and_then(|code| code.parse::<i32>().ok())
                    .is_some_and(|c| matches!(c & 0xff, SQLITE_CORRUPT | SQLITE_NOTADB))
            }
            _ => false,
        }
    }

    /// Whether the database is out of reach or takes no work rather than refusing this
    /// request's: the connection failed under the statement
    /// ([`StoreError::outcome_unknown`]), PostgreSQL is shutting down, starting up or in
    /// recovery (SQLSTATE class `08`, `57P01`–`57P03`: the statement and its transaction
    /// did not run, or rolled back), or it refuses all work for now
    /// ([`StoreError::database_refusing_work`]).
    pub fn database_unavailable(&self) -> bool {
        if self.outcome_unknown() || self.database_refusing_work() {
            return true;
        }
        let StoreError::Database(sqlx::Error::Database(db)) = self else {
            return false;
        };
        if db
            .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
            .is_none()
        {
            return false;
        }
        db.code().is_some_and(|code| {
            code.starts_with("08") || matches!(code.as_ref(), "57P01" | "57P02" | "57P03")
        })
    }

    /// Whether the connection failed under the statement (I/O, TLS, protocol, a crashed
    /// worker): it may have been executed, and committed, before its answer was lost, so
    /// the caller cannot tell what it did. Every other error left nothing written.
    pub fn outcome_unknown(&self) -> bool {
        matches!(
            self,
            StoreError::Database(
                sqlx::Error::Io(_)
                    | sqlx::Error::Tls(_)
                    | sqlx::Error::Protocol(_)
                    | sqlx::Error::WorkerCrashed
            )
        )
    }
}

/// How to connect and what to bound.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// `postgres://…`, `sqlite://PATH`, `sqlite::memory:` or a bare file path.
    pub database_url: String,
    /// Connections in the pool (PostgreSQL) or readers (SQLite, which has one writer).
    pub pool_connections_max: u32,
    /// How long a SQLite writer waits for another process's lock before failing.
    pub sqlite_busy_timeout_ms: u64,
    /// How long one statement of a lineage walk, or of a campaign report, may run before it is stopped
    /// ([`StoreError::QueryTimeout`]; PostgreSQL's `statement_timeout`, SQLite's progress
    /// handler); `serve` sets its request timeout.
    pub walk_timeout_ms: u64,
    /// How long a request waits for a pooled connection (every one in use, or the
    /// database unreachable) before it is refused as busy (`503 store_busy`). It must be
    /// well under the request timeout, or a database outage is answered as a client's
    /// timeout (`408`) after the whole request timeout instead.
    pub pool_acquire_timeout_ms: u64,
    /// How long every connection of the PostgreSQL pool may be in use with none given
    /// back, its work done, before [`Store::pool_stranded_for`] says so (`/healthz` is
    /// then `503`): stranded connections, or a database that stalls.
    pub pool_stranded_after_ms: u64,
    /// PostgreSQL: how long a statement of the store's sessions waits for a lock (a row
    /// another transaction inserted and has not committed, a table's lock) before it
    /// fails as busy (`503 store_busy`, retry), where `lock_timeout` has PostgreSQL's
    /// default (0, no bound); one set in the configuration, for the database or the role
    /// or in the URL, 0 too, is kept; 0 here leaves it. Each wait is bounded, not a
    /// statement's sum of them. Live retries of the events a `backfill --dry-run` held for its whole
    /// run waited as long, each group commit batch holding one until its minute was out,
    /// and four of them held every slot of their kind: every tenant's single events were
    /// `408` on that server (a multi-process review). Migrations wait as the database
    /// says; partition maintenance has bounds of its own.
    pub lock_timeout_ms: u64,
}

impl StoreConfig {
    /// Defaults for `database_url`.
    pub fn new(database_url: impl Into<String>) -> Self {
        StoreConfig {
            database_url: database_url.into(),
            pool_connections_max: 16,
            sqlite_busy_timeout_ms: 10_000,
            walk_timeout_ms: 30_000,
            pool_acquire_timeout_ms: 5_000,
            pool_stranded_after_ms: 30_000,
            lock_timeout_ms: 5_000,
        }
    }
}

/// The store: one interface, two backends.
#[derive(Clone)]
pub struct Store {
    backend: Backend,
}

#[derive(Clone)]
enum Backend {
    Sqlite(sqlite::SqliteStore),
    Postgres(postgres::PgStore),
}

/// The scheme of a URL that is neither PostgreSQL's nor `sqlite://` (a bare path or a
/// `sqlite:` URL has none): one [`Store::connect`] refuses.
pub(crate) fn unsupported_scheme(url: &str) -> Option<&str> {
    let (scheme, _) = url.split_once("://")?;
    (!is_postgres_url(url) && !url.starts_with("sqlite://")).then_some(scheme)
}

/// Whether `url` names a PostgreSQL server (`postgres://` or `postgresql://`, in any
/// case, as URL schemes are).
pub fn is_postgres_url(url: &str) -> bool {
    ["postgres://", "postgresql://"].iter().any(|scheme| {
        url.get(..scheme.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(scheme))
    })
}

impl Store {
    /// Connects to the database named by the config (creating a SQLite file if needed).
    /// Does not migrate; call [`Store::migrate`].
    pub async fn connect(config: &StoreConfig) -> Result<Store, StoreError> {
        let url = config.database_url.as_str();
        let backend = if is_postgres_url(url) {
            Backend::Postgres(postgres::PgStore::connect(config).await?)
        } else if let Some(scheme) = unsupported_scheme(url) {
            return Err(StoreError::UnsupportedUrl(format!(
                "scheme {scheme:?}; use a SQLite file path, sqlite://PATH or postgres://…"
            )));
        } else {
            Backend::Sqlite(sqlite::SqliteStore::connect(config).await?)
        };
        let store = Store { backend };
        // Stamps made from now on are on the store's clock (`clock.rs`).
        if let Err(err) = store.sync_clock().await {
            tracing::warn!(error = %err, "reading the database's clock failed; stamping with this machine's");
        }
        Ok(store)
    }

    /// Closes every connection of this store (and of its clones), waiting for those in
    /// use to be given back. On SQLite, the write-ahead log is first checkpointed into
    /// the file and truncated (`PRAGMA wal_checkpoint(TRUNCATE)`; the last connection
    /// closed also deletes it, but a connection the store dropped rather than closed
    /// (sqlx closes those on a thread of their own) may be the last, and the process may
    /// end first): a command that ended without either left its last commits in `-wal`,
    /// and a copy of the file alone, taken once every process had stopped, lacked them.
    /// Another process reading the file meanwhile (a running `serve`) may keep part of
    /// the log; its own close moves it.
    pub async fn close(&self) {
        match &self.backend {
            Backend::Sqlite(store) => {
                store.reader.close().await;
                // Another process's reader holding an old snapshot (a console's open
                // transaction) keeps the checkpoint from completing however long it
                // waits: a short wait, not the busy timeout (every command took 5 s more
                // beside such a reader, and warned its connection was still in use).
                let checkpointed = async {
                    let mut conn = store.writer.acquire().await?;
                    sqlx::query("PRAGMA busy_timeout = 250")
                        .execute(&mut *conn)
                        .await?;
                    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                        .execute(&mut *conn)
                        .await
                };
                if let Err(err) = checkpointed.await {
                    tracing::debug!(error = %err, "the write-ahead log was not checkpointed at close");
                }
                store.writer.close().await;
            }
            Backend::Postgres(store) => {
                store.pool.close().await;
                store.ddl.close().await;
                store.health.close().await;
            }
        }
    }

    /// `"sqlite"` or `"postgres"`.
    pub fn backend_name(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    /// `sql` with each `{bytes}` (after a text expression in an `ORDER BY`) made to order
    /// by the text's bytes, code point order, on both backends: PostgreSQL's
    /// `COLLATE "C"`, whatever the database's collation; nothing on SQLite, whose `BINARY`
    /// default is that order. A listing of names mixing cases or accents then reads the
    /// same on both (a database created with a linguistic collation sorted them otherwise).
    pub(crate) fn in_byte_order(&self, sql: &str) -> String {
        let clause = match self.backend {
            Backend::Sqlite(_) => "",
            Backend::Postgres(_) => " COLLATE \"C\"",
        };
        sql.replace("{bytes}", clause)
    }

    /// The statement written for this store's backend, where the two differ.
    pub(crate) fn by_backend(&self, postgres: &'static str, sqlite: &'static str) -> &'static str {
        match self.backend {
            Backend::Sqlite(_) => sqlite,
            Backend::Postgres(_) => postgres,
        }
    }

    /// How long every connection of the PostgreSQL pool has been in use with none given
    /// back, its work done, when that is [`StoreConfig::pool_stranded_after_ms`] or more:
    /// the API's requests wait on connections that do not come back (stranded on a
    /// database gone without a reset, or a database that stalls), while [`Store::ping`]
    /// asks on a connection of its own and may well get an answer. `None` on SQLite.
    pub fn pool_stranded_for(&self) -> Option<std::time::Duration> {
        match &self.backend {
            Backend::Postgres(pg) => pg.stranded_for(),
            Backend::Sqlite(_) => None,
        }
    }

    /// Checks that the database answers and takes writes: a PostgreSQL standby (a
    /// demoted primary after a failover, a replica) or one whose transactions are
    /// read-only by default answers [`StoreError::ReadOnly`]. On PostgreSQL it asks on a
    /// connection of its own, so a pool kept busy by requests does not fail it.
    pub async fn ping(&self) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Postgres(pg) => {
                let read_only: bool = sqlx::query_scalar(
                    "SELECT pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on'",
                )
                .fetch_one(&pg.health)
                .await?;
                if read_only {
                    postgres::note_read_only();
                    return Err(StoreError::ReadOnly);
                }
                Ok(())
            }
            Backend::Sqlite(sqlite) => {
                sqlite.check_file()?;
                tx::with_pool!(self, reader, |pool| sqlx::query("SELECT 1")
                    .execute(pool)
                    .await
                    .map(|_| ())
                    .map_err(StoreError::from))
            }
        }
    }

    /// On SQLite, `PRAGMA quick_check`: every page of the file read once (about a second
    /// a gigabyte), so a torn copy is refused before a command writes into it and
    /// acknowledges writes it may lose ([`Store::migrate`] runs it first, so `serve`,
    /// `consume nats`, `backfill` and every other writing command do); SQLite only notices corruption on the pages a
    /// statement happens to read, and a torn copy served, answered `/healthz`, and
    /// acknowledged new events. Nothing on PostgreSQL (its own checks are the
    /// operator's, `amcheck`).
    pub async fn check_integrity(&self) -> Result<(), StoreError> {
        let Backend::Sqlite(sqlite) = &self.backend else {
            return Ok(());
        };
        let found: Vec<String> = sqlx::query_scalar("PRAGMA quick_check(3)")
            .fetch_all(&sqlite.writer)
            .await?;
        if found.len() == 1 && found[0] == "ok" {
            return Ok(());
        }
        Err(StoreError::CorruptFile(found.join("; ")))
    }

    /// Registers a contract in its own transaction; see [`StoreTx::register_contract`].
    pub async fn register_contract(
        &self,
        tenant: &TenantId,
        contract: &Contract,
    ) -> Result<RegisterOutcome, StoreError> {
        let mut tx = self.begin().await?;
        let outcome = tx.register_contract(tenant, contract).await?;
        tx.commit().await?;
        Ok(outcome)
    }

    /// A tenant's contract by name: the given version, or the latest when `None`.
    pub async fn contract(
        &self,
        tenant: &TenantId,
        name: &ContractName,
        version: Option<u32>,
    ) -> Result<Option<Contract>, StoreError> {
        let definition = tx::with_pool!(self, reader, |pool| sqlx::query_scalar::<_, String>(
            sql::SELECT_CONTRACT
        )
        .bind(tenant.as_str())
        .bind(name.as_str())
        .bind(version.map(i64::from))
        .fetch_optional(pool)
        .await)?;
        definition.map(|text| parse_definition(&text)).transpose()
    }

    /// Every version of every contract of a tenant, ordered by name then version.
    pub async fn contracts(&self, tenant: &TenantId) -> Result<Vec<Contract>, StoreError> {
        let definitions = tx::with_pool!(self, reader, |pool| sqlx::query_scalar::<_, String>(
            sql::SELECT_CONTRACTS
        )
        .bind(tenant.as_str())
        .fetch_all(pool)
        .await)?;
        definitions
            .iter()
            .map(|text| parse_definition(text))
            .collect()
    }

    /// A page of [`Store::contracts`]: at most `limit` versions after `(name, version)`
    /// in the same order (`None`: from the first), past the first no more than
    /// [`CONTRACTS_PAGE_BYTES_MAX`] of definitions, and whether more follow.
    pub async fn contracts_page(
        &self,
        tenant: &TenantId,
        after: Option<(&str, u32)>,
        limit: u32,
    ) -> Result<(Vec<Contract>, bool), StoreError> {
        let (name, version) = after.unwrap_or(("", 0));
        let sizes = tx::with_pool!(self, reader, |pool| sqlx::query_scalar::<_, i64>(
            sql::SELECT_CONTRACTS_PAGE_SIZES
        )
        .bind(tenant.as_str())
        .bind(name)
        .bind(i64::from(version))
        .bind(i64::from(limit) + 1)
        .fetch_all(pool)
        .await)?;
        if sizes.is_empty() {
            return Ok((Vec::new(), false));
        }
        let within = page_within_bytes(
            sizes.iter().copied().take(limit as usize),
            CONTRACTS_PAGE_BYTES_MAX,
        );
        // A version registered between the reads may fall inside the page and push its
        // last definition to the next one: read one more to know.
        let mut definitions =
            tx::with_pool!(self, reader, |pool| sqlx::query_scalar::<_, String>(
                sql::SELECT_CONTRACTS_PAGE
            )
            .bind(tenant.as_str())
            .bind(name)
            .bind(i64::from(version))
            .bind(i64::try_from(within).unwrap_or(i64::MAX) + 1)
            .fetch_all(pool)
            .await)?;
        let more = sizes.len() > within || definitions.len() > within;
        definitions.truncate(within);
        let contracts = definitions
            .iter()
            .map(|text| parse_definition(text))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((contracts, more))
    }

    /// Per-contract counts of stored events, suppressed duplicates and collisions.
    pub async fn stats(&self, tenant: &TenantId) -> Result<Vec<ContractStats>, StoreError> {
        tx::with_pool!(self, reader, |pool| {
            let query = sqlx::query_as(sql::SELECT_STATS).bind(tenant.as_str());
            Ok(query.fetch_all(pool).await?)
        })
    }

    /// The stored event of a tenant's contract with this id.
    pub async fn event(
        &self,
        tenant: &TenantId,
        contract: &ContractName,
        event_id: &EventId,
    ) -> Result<Option<StoredEvent>, StoreError> {
        let select = match self.backend {
            Backend::Sqlite(_) => sql::SELECT_EVENT,
            Backend::Postgres(_) => sql::PG_SELECT_EVENT,
        };
        let row: Option<model::EventRow> = tx::with_pool!(self, reader, |pool| {
            let query = sqlx::query_as(select)
                .bind(tenant.as_str())
                .bind(contract.as_str())
                .bind(event_id.as_str());
            query.fetch_optional(pool).await?
        });
        row.map(StoredEvent::try_from).transpose()
    }

    /// A page of the collisions of a tenant's contract, newest first, after `before` (the
    /// last one of the previous page): a page of [`Store::collisions_page`], so it stops
    /// at its byte budget too, and its flag (more may follow) is kept: a collision
    /// committing between that page's two reads pushes the page's oldest rows out, and
    /// only the flag and the cursor of the last row returned bring them on the next page.
    pub async fn collisions(
        &self,
        tenant: &TenantId,
        contract: &ContractName,
        before: Option<CollisionCursor>,
        limit: u32,
    ) -> Result<(Vec<CollisionRecord>, bool), StoreError> {
        let query = CollisionsQuery {
            contract: Some(contract.as_str().to_string()),
            since_us: None,
            before,
            limit,
        };
        let (rows, more) = self.collisions_page(tenant, &query).await?;
        let records = rows
            .into_iter()
            .map(CollisionRecord::try_from)
            .collect::<Result<Vec<_>, _>>()?;
        Ok((records, more))
    }
}

/// A page read with one row more than `limit` (`LIMIT limit + 1`): its first `limit` rows,
/// and whether more follow.
pub(crate) fn page_of<T>(mut rows: Vec<T>, limit: u32) -> (Vec<T>, bool) {
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    (rows, more)
}

/// The definitions a page of `GET /contracts` holds, past its first: at most this many
/// bytes (a contract's description is bounded by the request body alone, so a page of a
/// thousand large ones would be a gigabyte).
pub const CONTRACTS_PAGE_BYTES_MAX: i64 = 4 * 1024 * 1024;

/// How many of the leading entries whose sizes are `sizes` fit in `budget` bytes: at
/// least one when there is one, then every entry that keeps the sum within the budget.
pub(crate) fn page_within_bytes(sizes: impl Iterator<Item = i64>, budget: i64) -> usize {
    let mut total = 0i64;
    let mut taken = 0;
    for size in sizes {
        total = total.saturating_add(size);
        if taken > 0 && total > budget {
            break;
        }
        taken += 1;
    }
    taken
}

fn parse_definition(text: &str) -> Result<Contract, StoreError> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    Contract::from_stored_json(&value).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// `text` with every NUL replaced by U+FFFD, for text the server composes from client
/// input (a refusal's reason or field quoting a key of the message) before it reaches a
/// `text` column, which cannot hold NUL on PostgreSQL: a dead letter or a Segment
/// rejection would fail to insert, and a broker would redeliver its poison message for
/// ever. Raw bytes and payloads keep the original (JSON escapes NUL).
pub(crate) fn without_nul(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains('\0') {
        std::borrow::Cow::Owned(text.replace('\0', "\u{FFFD}"))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// Microseconds since the Unix epoch, now, on the store's clock: this process's clock
/// corrected by the offset [`Store::sync_clock`] last measured against the database (zero
/// until then). Every time a server stamps on a row (an event's or an outcome's arrival,
/// an assignment) is then comparable with another server's, whatever their own clocks
/// say; decisions that must be exact read the database's time itself (`clock.rs`).
pub fn now_us() -> i64 {
    clock::process_now_us().saturating_add(clock::offset_us())
}

/// Microseconds since the Unix epoch, now, on this machine's own clock: for what a peer
/// checks against its own clock (a webhook's signed timestamp), never for a time another
/// process compares.
pub fn local_now_us() -> i64 {
    clock::process_now_us()
}

#[cfg(test)]
mod tests {
    use super::{is_postgres_url, StoreError};

    /// A partition lock waited out (`Busy`) is a wait given up like a lock timeout: work
    /// retried at once would wait as long again.
    #[test]
    fn waits_given_up_are_waited_out_and_busy() {
        for err in [
            StoreError::Busy,
            StoreError::Database(sqlx::Error::PoolTimedOut),
        ] {
            assert!(err.waited_out() && err.is_busy(), "{err}");
        }
        assert!(!StoreError::OutsideHorizon.waited_out());
    }

    #[test]
    fn postgres_urls_are_recognised_in_any_case_and_nothing_else() {
        for url in [
            "postgres://h/db",
            "postgresql://u@h/db",
            "POSTGRES://h/db",
            "PostgreSQL://h/db",
        ] {
            assert!(is_postgres_url(url), "{url}");
        }
        for url in [
            "postgres:/h",
            "mysql://h/db",
            "sqlite://x.db",
            "postgres",
            "pg.db",
            "",
        ] {
            assert!(!is_postgres_url(url), "{url}");
        }
    }
}

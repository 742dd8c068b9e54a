//! [`StoreTx`]: one open transaction on either backend, for work that must commit
//! atomically with something else (a handler's writes and its stored idempotent response).

use crate::{Store, StoreError};

/// An open transaction. Dropping it without [`StoreTx::commit`] rolls it back.
pub struct StoreTx {
    pub(crate) inner: TxInner,
    /// Inserts reconcile events of any age (a backfill): on PostgreSQL each event goes to
    /// the partition that holds its day, attached or detached. Live transactions write
    /// attached partitions only.
    pub(crate) any_age: bool,
    /// The surface whose events this transaction counts (see
    /// [`StoreTx::set_ingest_source`]).
    pub(crate) source: crate::ops::IngestSource,
    /// A backfill transaction's PostgreSQL pool for the short transactions of their own
    /// it needs beside it (an old day's detached partition): the store's one-connection
    /// DDL pool, never the pool this transaction's own connection came from. `None` on
    /// every other transaction, which never writes an old day.
    pub(crate) ddl_pool: Option<sqlx::PgPool>,
    /// Whether the collisions this transaction meets are logged (and their keys taken):
    /// not in a dry run, which rolls them back and must not hold their keys meanwhile
    /// (see [`StoreTx::without_collision_log`]).
    pub(crate) collision_log: bool,
}

pub(crate) enum TxInner {
    Sqlite(sqlx::Transaction<'static, sqlx::Sqlite>),
    Postgres(sqlx::Transaction<'static, sqlx::Postgres>),
}

/// Runs `$body` once per backend with `$conn` bound to the transaction's connection
/// (`&mut SqliteConnection` or `&mut PgConnection`). The body is the same text compiled
/// twice, which a closure cannot be (its argument has one type); keep it short, with the
/// SQL in named `const`s that rustfmt formats. SQL is written with `$N` placeholders,
/// which both drivers bind by number (`tests/it/placeholders.rs`).
macro_rules! with_tx {
    // Closure-shaped, so rustfmt formats the body like any call.
    ($tx:expr, |$conn:ident| $body:expr) => {
        match &mut $tx.inner {
            $crate::tx::TxInner::Sqlite(t) => {
                let $conn: &mut sqlx::SqliteConnection = &mut **t;
                $body
            }
            $crate::tx::TxInner::Postgres(t) => {
                let $conn: &mut sqlx::PgConnection = &mut **t;
                $body
            }
        }
    };
}

/// Runs `$body` once per backend with `$pool` bound to a pool (`writer` or `reader` for
/// SQLite; PostgreSQL has one pool); see [`with_tx!`].
macro_rules! with_pool {
    // Closure-shaped, so rustfmt formats the body like any call.
    ($store:expr, $role:ident, |$pool:ident| $body:expr) => {
        match &$store.backend {
            $crate::Backend::Sqlite(s) => {
                let $pool = &s.$role;
                $body
            }
            $crate::Backend::Postgres(p) => {
                let $pool = &p.pool;
                $body
            }
        }
    };
}

/// [`with_pool!`] for a read a request waits on (a campaign report's), `$conn` bound to
/// the SQLite reader pool, or on PostgreSQL to a transaction of its own whose
/// `statement_timeout` is the request timeout (`PgStore::begin_bounded_read`): a statement
/// the request has given up on (answered `408`) is stopped by the database, and is
/// [`StoreError::QueryTimeout`] (`408` too) whichever of the two ends first. It ran on,
/// holding its pooled connection, and a review's 16 reloads of one slow report held every
/// connection for minutes (writes of every tenant `503 store_busy`). Use `$conn` once.
macro_rules! with_bounded_read {
    ($store:expr, |$conn:ident| $body:expr) => {
        match &$store.backend {
            $crate::Backend::Sqlite(s) => {
                let $conn = &s.reader;
                $body
            }
            $crate::Backend::Postgres(p) => {
                let mut tx = p.begin_bounded_read().await?;
                // The body's `?` ends this block, not the caller, so that a statement the
                // bound stopped is told apart from other failures below.
                let out: Result<_, $crate::StoreError> = async {
                    let $conn: &mut sqlx::PgConnection = &mut *tx;
                    $body
                }
                .await;
                let out = out.map_err($crate::StoreError::bounded_read_stopped)?;
                tx.commit().await?;
                Ok(out)
            }
        }
    };
}

pub(crate) use {with_bounded_read, with_pool, with_tx};

impl Store {
    /// Opens a write transaction (`BEGIN IMMEDIATE` on SQLite, so it holds the write lock
    /// from the start and never fails to upgrade).
    pub async fn begin(&self) -> Result<StoreTx, StoreError> {
        let inner = match &self.backend {
            crate::Backend::Sqlite(s) => {
                s.check_file()?;
                TxInner::Sqlite(s.writer.begin_with("BEGIN IMMEDIATE").await?)
            }
            crate::Backend::Postgres(p) => {
                TxInner::Postgres(crate::postgres::begin(&p.pool).await?)
            }
        };
        Ok(StoreTx {
            inner,
            any_age: false,
            source: crate::ops::IngestSource::http(),
            ddl_pool: None,
            collision_log: true,
        })
    }

    /// A write transaction for a backfill: its event inserts reconcile against rows of
    /// any age, partitions detached from the dedupe horizon included (see
    /// [`StoreTx::insert_events`]).
    pub async fn begin_backfill(&self) -> Result<StoreTx, StoreError> {
        let mut tx = self.begin().await?;
        tx.any_age = true;
        if let crate::Backend::Postgres(p) = &self.backend {
            tx.ddl_pool = Some(p.ddl.clone());
        }
        Ok(tx)
    }
}

impl StoreTx {
    /// Judges collisions without logging them: a `backfill --dry-run`'s transaction, open
    /// for its whole file and rolled back, would hold each collision's key
    /// (`event_collision_keys`) meanwhile, and a live retry of that collision would wait
    /// on it and be answered `503` until the dry run ended (a read-back). Outcomes and
    /// counts are unchanged.
    pub fn without_collision_log(&mut self) {
        self.collision_log = false;
    }

    /// Bounds this transaction's waits for locks to `ms` (PostgreSQL's `SET LOCAL
    /// lock_timeout`; nothing on SQLite, whose one writer holds the whole file).
    pub async fn bound_lock_waits(&mut self, ms: u32) -> Result<(), StoreError> {
        if let TxInner::Postgres(t) = &mut self.inner {
            sqlx::query("SELECT set_config('lock_timeout', $1, true)")
                .bind(ms.to_string())
                .execute(&mut **t)
                .await?;
        }
        Ok(())
    }

    /// Commits durably.
    pub async fn commit(self) -> Result<(), StoreError> {
        match self.inner {
            TxInner::Sqlite(t) => t.commit().await?,
            TxInner::Postgres(t) => t.commit().await?,
        }
        Ok(())
    }

    /// Rolls back.
    pub async fn rollback(self) -> Result<(), StoreError> {
        match self.inner {
            TxInner::Sqlite(t) => t.rollback().await?,
            TxInner::Postgres(t) => t.rollback().await?,
        }
        Ok(())
    }
}

impl StoreTx {
    /// Registers a contract. The same definition again is a no-op; a different one under
    /// the same name and version is [`StoreError::ContractConflict`].
    pub async fn register_contract(
        &mut self,
        tenant: &crate::TenantId,
        contract: &traqlyte_identity::Contract,
    ) -> Result<crate::RegisterOutcome, StoreError> {
        let definition = String::from_utf8_lossy(&contract.canonical_definition()).into_owned();
        let (name, version) = (contract.name().as_str(), i64::from(contract.version()));
        let stored: Option<String> = with_tx!(self, |conn| {
            let done = sqlx::query(crate::sql::INSERT_CONTRACT)
                .bind(tenant.as_str())
                .bind(name)
                .bind(version)
                .bind(&definition)
                .bind(crate::now_us())
                .execute(&mut *conn)
                .await?;
            if done.rows_affected() == 1 {
                return Ok(crate::RegisterOutcome::Created);
            }
            sqlx::query_scalar(crate::sql::SELECT_CONTRACT)
                .bind(tenant.as_str())
                .bind(name)
                .bind(Some(version))
                .fetch_optional(&mut *conn)
                .await?
        });
        match stored {
            Some(text) if text == definition => Ok(crate::RegisterOutcome::Unchanged),
            stored => Err(StoreError::ContractConflict {
                name: name.to_string(),
                version: contract.version(),
                registered: stored.unwrap_or_default(),
                refused: definition,
            }),
        }
    }
}

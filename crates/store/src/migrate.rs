//! Versioned migrations, embedded in the binary by `sqlx::migrate!` from
//! `migrations/{sqlite,postgres}/NNNN_name.sql` and recorded with their SHA-384 checksum
//! in `_sqlx_migrations`. A start refuses a database whose applied migration differs
//! from this build's file (`MigrateError::VersionMismatch`): an applied migration is
//! never edited, only a new one appended.
//!
//! All of [`crate::Store::migrate`] runs inside one write transaction taken before
//! anything is read (`BEGIN IMMEDIATE` on SQLite, `pg_advisory_xact_lock` on
//! PostgreSQL); sqlx's migrator runs inside it, each migration in a savepoint. Several
//! processes starting at once therefore migrate in turn: the second sees the first's
//! work. sqlx's own migrator lock is switched off because it is a no-op on SQLite and, on
//! PostgreSQL, a session lock that stays held on a pooled connection when a migration
//! fails.
//!
//! Upgrade from the own runner (builds before the checksums): those databases record
//! applied versions in `schema_migrations (version, name, applied_at_us)` and have no
//! `_sqlx_migrations`. Under the same lock, each legacy row is adopted into
//! `_sqlx_migrations` with the checksum of this build's file of that version (the old
//! runner embedded the very same files, which were never edited, so that is the checksum
//! of what was applied), then `schema_migrations` is dropped, all in the transaction that
//! then applies the pending migrations. Either the whole upgrade commits or none of it,
//! and a concurrent start waits on the lock and finds the adopted table. A legacy row
//! this build does not know, or whose name differs from the file's, is refused.

use std::collections::HashSet;
use std::marker::PhantomData;

use sqlx::migrate::{Migrate, Migrator};

use crate::tx::TxInner;
use crate::StoreError;

/// Key of the PostgreSQL advisory lock that serialises concurrent migrators.
const PG_MIGRATION_LOCK: i64 = 0x0074_7271_6c79_7465; // "trqlyte" in ASCII

const PG_LOCK: &str = "SELECT pg_advisory_xact_lock($1)";

const PG_TRY_LOCK: &str = "SELECT pg_try_advisory_xact_lock($1)";

/// The PostgreSQL sessions holding the migration lock (an advisory lock on a `bigint`
/// key is listed as its high and low 32 bits).
const PG_LOCK_HOLDERS: &str = "SELECT string_agg(pid::text, ',') FROM pg_locks
     WHERE locktype = 'advisory' AND granted AND objsubid = 1
       AND classid = ($1 >> 32)::oid AND objid = ($1 & 4294967295)::oid";

/// Checks the client every second for the rest of the transaction, where the server has
/// the setting (PostgreSQL 14 and later).
const PG_CHECK_CLIENT: &str = "SELECT set_config('client_connection_check_interval', '1000', true)
     WHERE EXISTS (SELECT 1 FROM pg_settings WHERE name = 'client_connection_check_interval')";

const SQLITE_LEGACY_EXISTS: &str =
    "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'";

const PG_LEGACY_EXISTS: &str = "SELECT COUNT(*) FROM pg_tables
     WHERE schemaname = current_schema() AND tablename = 'schema_migrations'";

const SELECT_LEGACY: &str = "SELECT version, name FROM schema_migrations ORDER BY version";

const ADOPT_LEGACY: &str = "INSERT INTO _sqlx_migrations
     (version, description, success, checksum, execution_time) VALUES ($1, $2, TRUE, $3, -1)";

const DROP_LEGACY: &str = "DROP TABLE schema_migrations";

/// Whether the migrations table exists (a database never migrated has none).
const SQLITE_MIGRATIONS_EXIST: &str =
    "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'";

const PG_MIGRATIONS_EXIST: &str = "SELECT COUNT(*) FROM pg_tables
     WHERE schemaname = current_schema() AND tablename = '_sqlx_migrations'";

/// The tables of the current schema: a database without traqlyte's migrations that holds
/// any is another application's, not traqlyte's to install into.
const SQLITE_TABLES: &str = "SELECT COUNT(*), MIN(name) FROM sqlite_master
     WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'";

const PG_TABLES: &str = "SELECT COUNT(*), MIN(tablename::text) FROM pg_tables
     WHERE schemaname = current_schema()";

impl crate::Store {
    /// Whether this build has migrations the database lacks while it holds some of them
    /// already: a schema an older build made, which `traqlyte migrate` (or `serve`)
    /// upgrades. Not for a database never migrated (every migration pending).
    pub async fn older_schema(&self) -> Result<Option<Vec<String>>, StoreError> {
        let every = match &self.backend {
            crate::Backend::Sqlite(_) => sqlx::migrate!("migrations/sqlite").iter().count(),
            crate::Backend::Postgres(_) => sqlx::migrate!("migrations/postgres").iter().count(),
        };
        let pending = self.pending_migrations().await?;
        Ok((!pending.is_empty() && pending.len() < every).then_some(pending))
    }

    /// The names of this build's migrations the database has not applied, read without
    /// writing anything (every one of them for a database never migrated).
    pub async fn pending_migrations(&self) -> Result<Vec<String>, StoreError> {
        let (migrator, exists) = match &self.backend {
            crate::Backend::Sqlite(_) => {
                (sqlx::migrate!("migrations/sqlite"), SQLITE_MIGRATIONS_EXIST)
            }
            crate::Backend::Postgres(_) => {
                (sqlx::migrate!("migrations/postgres"), PG_MIGRATIONS_EXIST)
            }
        };
        let applied: HashSet<i64> = crate::tx::with_pool!(self, reader, |pool| {
            let tables: i64 = sqlx::query_scalar(exists).fetch_one(pool).await?;
            if tables == 0 {
                HashSet::new()
            } else {
                sqlx::query_scalar::<_, i64>("SELECT version FROM _sqlx_migrations WHERE success")
                    .fetch_all(pool)
                    .await?
                    .into_iter()
                    .collect()
            }
        });
        Ok(migrator
            .iter()
            .filter(|m| !applied.contains(&m.version))
            .map(|m| format!("{:04}_{}", m.version, m.description.replace(' ', "_")))
            .collect())
    }

    /// Whether every migration of this build is applied, with the checksum of its file
    /// (so an edited one still goes the way that refuses it). A migration applied that
    /// this build does not know is [`StoreError::NewerSchema`].
    async fn migrated_already(&self) -> Result<bool, StoreError> {
        let (migrator, exists) = match &self.backend {
            crate::Backend::Sqlite(_) => {
                (sqlx::migrate!("migrations/sqlite"), SQLITE_MIGRATIONS_EXIST)
            }
            crate::Backend::Postgres(_) => {
                (sqlx::migrate!("migrations/postgres"), PG_MIGRATIONS_EXIST)
            }
        };
        let applied: Vec<(i64, Vec<u8>)> = crate::tx::with_pool!(self, reader, |pool| {
            let tables: i64 = sqlx::query_scalar(exists).fetch_one(pool).await?;
            if tables == 0 {
                return Ok(false);
            }
            sqlx::query_as("SELECT version, checksum FROM _sqlx_migrations WHERE success")
                .fetch_all(pool)
                .await?
        });
        if let Some(&(version, _)) = applied
            .iter()
            .find(|(version, _)| !migrator.iter().any(|m| m.version == *version))
        {
            return Err(StoreError::NewerSchema { version });
        }
        Ok(migrator.iter().all(|m| {
            applied
                .iter()
                .any(|(version, sum)| *version == m.version && sum[..] == m.checksum[..])
        }))
    }

    /// Applies pending migrations in one transaction and returns their names
    /// (`0001_foundation`, …); safe to run from several processes at once. Fails without
    /// changing anything when an applied migration's file was edited.
    pub async fn migrate(&self) -> Result<Vec<String>, StoreError> {
        // Every command that writes migrates first: none writes into a torn SQLite file
        // (`serve` refused one that `consume nats` still wrote into).
        self.check_integrity().await?;
        // Nothing to apply (every restart): decided by reads alone, without the write
        // transaction, which on SQLite waits for another process's write lock (a long
        // backfill) and fails past the busy timeout, keeping a server from starting.
        if self.migrated_already().await? {
            self.fill_outcome_ids().await?;
            self.normalize_bindings_logged().await?;
            return Ok(Vec::new());
        }
        let mut tx = self.begin().await?;
        let applied = match &mut tx.inner {
            TxInner::Sqlite(t) => {
                let migrator = sqlx::migrate!("migrations/sqlite");
                Steps::<sqlx::Sqlite>::migrate(
                    &mut **t,
                    migrator,
                    (SQLITE_LEGACY_EXISTS, SQLITE_MIGRATIONS_EXIST, SQLITE_TABLES),
                )
                .await?
            }
            TxInner::Postgres(t) => {
                // A migrating process killed part way leaves its session running the
                // migration until PostgreSQL next writes to it; PostgreSQL 14 and later
                // can check the client every second instead (a no-op where it cannot).
                sqlx::query(PG_CHECK_CLIENT).execute(&mut **t).await?;
                // Another migrator's lock, and the table locks a migration's DDL needs,
                // are waited for as the database says, not within the pool's bound for
                // requests (`StoreConfig::lock_timeout_ms`): a process starting beside
                // another's long migration waits for it.
                sqlx::query("SET LOCAL lock_timeout TO DEFAULT")
                    .execute(&mut **t)
                    .await?;
                let free: bool = sqlx::query_scalar(PG_TRY_LOCK)
                    .bind(PG_MIGRATION_LOCK)
                    .fetch_one(&mut **t)
                    .await?;
                if !free {
                    let holders: Option<String> = sqlx::query_scalar(PG_LOCK_HOLDERS)
                        .bind(PG_MIGRATION_LOCK)
                        .fetch_one(&mut **t)
                        .await?;
                    tracing::info!(
                        holder_pids = holders.as_deref().unwrap_or("?"),
                        "waiting for the migration lock: another session is migrating \
                         (a process killed while migrating leaves its session running until it ends)"
                    );
                    sqlx::query(PG_LOCK)
                        .bind(PG_MIGRATION_LOCK)
                        .execute(&mut **t)
                        .await?;
                }
                let migrator = sqlx::migrate!("migrations/postgres");
                Steps::<sqlx::Postgres>::migrate(
                    &mut **t,
                    migrator,
                    (PG_LEGACY_EXISTS, PG_MIGRATIONS_EXIST, PG_TABLES),
                )
                .await?
            }
        };
        tx.commit().await?;
        // Outcomes stored before migration 0015 get their ids on SQLite (idempotent: only
        // rows without one are touched, so concurrent starts and a retried start are
        // harmless); PostgreSQL's migration 0020 gave them theirs.
        let filled = self.fill_outcome_ids().await?;
        if filled > 0 {
            tracing::info!(filled, "outcome ids filled in");
        }
        self.normalize_bindings_logged().await?;
        Ok(applied)
    }

    /// [`Store::normalize_bindings`], saying what it changed.
    async fn normalize_bindings_logged(&self) -> Result<(), StoreError> {
        let normalized = self.normalize_bindings().await?;
        if normalized > 0 {
            tracing::warn!(
                normalized,
                "metric bindings stored by an older build in another Unicode form than NFC were put in NFC; they match tracked events from now on (messages before matched none)"
            );
        }
        Ok(())
    }
}

/// The migration steps for one backend, generic over sqlx's database type; the bounds
/// (what the steps bind and decode) are written once, here.
struct Steps<DB>(PhantomData<DB>);

impl<DB> Steps<DB>
where
    DB: sqlx::Database,
    DB::Connection: Migrate,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    i64: sqlx::Type<DB> + for<'q> sqlx::Encode<'q, DB> + for<'r> sqlx::Decode<'r, DB>,
    String: sqlx::Type<DB> + for<'q> sqlx::Encode<'q, DB> + for<'r> sqlx::Decode<'r, DB>,
    Vec<u8>: sqlx::Type<DB> + for<'q> sqlx::Encode<'q, DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    /// Adopts a legacy `schema_migrations`, then runs the migrator, on a connection that is
    /// inside the migration transaction and holds its lock.
    async fn migrate(
        conn: &mut DB::Connection,
        mut migrator: Migrator,
        (legacy_exists, migrations_exist, tables): (&'static str, &'static str, &'static str),
    ) -> Result<Vec<String>, StoreError> {
        // The transaction's lock serialises migrators; see the module documentation.
        migrator.set_locking(false);

        let legacy: i64 = sqlx::query_scalar(legacy_exists)
            .fetch_one(&mut *conn)
            .await?;
        if legacy > 0 {
            Self::adopt_legacy(conn, &migrator).await?;
        } else {
            Self::refuse_foreign(conn, migrations_exist, tables).await?;
        }
        let before = applied_versions(conn).await?;
        migrator
            .run_direct(conn)
            .await
            .map_err(|err| with_hint(sqlx::Error::from(err)))?;
        Ok(migrator
            .iter()
            .filter(|m| !before.contains(&m.version))
            .map(|m| format!("{:04}_{}", m.version, m.description.replace(' ', "_")))
            .collect())
    }

    /// [`StoreError::ForeignDatabase`] when the database has no migrations table and holds
    /// tables: a `--database-url` naming another application's database by mistake got
    /// traqlyte's tables (and, on SQLite, the WAL journal) installed beside its own.
    async fn refuse_foreign(
        conn: &mut DB::Connection,
        migrations_exist: &'static str,
        tables: &'static str,
    ) -> Result<(), StoreError> {
        let ours: i64 = sqlx::query_scalar(migrations_exist)
            .fetch_one(&mut *conn)
            .await?;
        if ours > 0 {
            return Ok(());
        }
        let (count, example): (i64, Option<String>) =
            sqlx::query_as(tables).fetch_one(&mut *conn).await?;
        match example {
            Some(example) if count > 0 => Err(StoreError::ForeignDatabase { count, example }),
            _ => Ok(()),
        }
    }

    /// Moves the rows of the old runner's `schema_migrations` into `_sqlx_migrations` with
    /// this build's checksums, then drops the old table.
    async fn adopt_legacy(
        conn: &mut DB::Connection,
        migrator: &Migrator,
    ) -> Result<(), StoreError> {
        let adopted = applied_versions(conn).await?;
        let legacy: Vec<(i64, String)> =
            sqlx::query_as(SELECT_LEGACY).fetch_all(&mut *conn).await?;
        let legacy_rows = legacy.len();
        for (version, name) in legacy {
            let known = migrator.iter().find(|m| m.version == version);
            let Some(migration) = known.filter(|m| m.description == name.replace('_', " ")) else {
                return Err(StoreError::Corrupt(format!(
                    "schema_migrations records migration {version:04}_{name}, which this build does not have"
                )));
            };
            if adopted.contains(&version) {
                continue;
            }
            sqlx::query(ADOPT_LEGACY)
                .bind(version)
                .bind(migration.description.to_string())
                .bind(migration.checksum.to_vec())
                .execute(&mut *conn)
                .await?;
        }
        sqlx::query(DROP_LEGACY).execute(&mut *conn).await?;
        tracing::info!(
            adopted = legacy_rows,
            "adopted schema_migrations into _sqlx_migrations"
        );
        Ok(())
    }
}

/// The versions `_sqlx_migrations` records as applied (the table created if absent).
async fn applied_versions(conn: &mut impl Migrate) -> Result<HashSet<i64>, StoreError> {
    conn.ensure_migrations_table()
        .await
        .map_err(|err| with_hint(sqlx::Error::from(err)))?;
    let applied = conn
        .list_applied_migrations()
        .await
        .map_err(sqlx::Error::from)?;
    Ok(applied.iter().map(|m| m.version).collect())
}

/// A failed migration's error, with the database's hint when it gives one ("out of
/// shared memory" hints at `max_locks_per_transaction`, which the message alone does not
/// name).
fn with_hint(err: sqlx::Error) -> StoreError {
    use sqlx::migrate::MigrateError;
    // sqlx nests its migration errors (a statement's error inside the migration's).
    let mut inner = &err;
    while let sqlx::Error::Migrate(nested) = inner {
        match &**nested {
            MigrateError::Execute(cause) | MigrateError::ExecuteMigration(cause, _) => {
                inner = cause;
            }
            _ => break,
        }
    }
    let hint = inner
        .as_database_error()
        .and_then(|db| db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>())
        .and_then(|pg| pg.hint())
        .map(str::to_owned);
    match hint {
        Some(hint) => StoreError::MigrationFailed {
            message: format!("{err} (hint: {hint})"),
            source: err,
        },
        None => StoreError::from(err),
    }
}

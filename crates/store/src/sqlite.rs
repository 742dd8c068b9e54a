//! The SQLite backend: one file in WAL mode with `synchronous=FULL` (a commit is on disk
//! before it returns), one writer connection per process and a pool of readers.
//! SQL is written once with `$N` placeholders and turned into SQLite's `?N`.

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use crate::migrate::{CREATE_MIGRATIONS_TABLE, MIGRATIONS};
use crate::{StoreConfig, StoreError};

#[derive(Clone)]
pub(crate) struct SqliteStore {
    pub(crate) writer: SqlitePool,
    pub(crate) reader: SqlitePool,
}

/// `$1` → `?1`: SQLite's numbered parameter syntax.
fn q(sql: &str) -> String {
    sql.replace('$', "?")
}

impl SqliteStore {
    pub(crate) async fn connect(config: &StoreConfig) -> Result<SqliteStore, StoreError> {
        let url = config.database_url.as_str();
        let options = if url.starts_with("sqlite:") {
            SqliteConnectOptions::from_str(url)?
        } else {
            SqliteConnectOptions::new().filename(url)
        };
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        let options = options
            .create_if_missing(true)
            .journal_mode(if in_memory {
                SqliteJournalMode::Memory
            } else {
                SqliteJournalMode::Wal
            })
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_millis(config.sqlite_busy_timeout_ms))
            .foreign_keys(true);
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options.clone())
            .await?;
        let reader = if in_memory {
            writer.clone()
        } else {
            SqlitePoolOptions::new()
                .max_connections(config.pool_connections_max.max(1))
                .connect_with(options)
                .await?
        };
        Ok(SqliteStore { writer, reader })
    }

    pub(crate) async fn migrate(&self) -> Result<Vec<String>, StoreError> {
        let mut tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
        sqlx::query(CREATE_MIGRATIONS_TABLE)
            .execute(&mut *tx)
            .await?;
        let done: Vec<i64> = sqlx::query_scalar("SELECT version FROM schema_migrations")
            .fetch_all(&mut *tx)
            .await?;
        let mut applied = Vec::new();
        for m in MIGRATIONS.iter().filter(|m| !done.contains(&m.version)) {
            sqlx::raw_sql(m.sqlite).execute(&mut *tx).await?;
            sqlx::query(&q(
                "INSERT INTO schema_migrations (version, name, applied_at_us) VALUES ($1, $2, $3)",
            ))
            .bind(m.version)
            .bind(m.name)
            .bind(crate::now_us())
            .execute(&mut *tx)
            .await?;
            applied.push(format!("{:04}_{}", m.version, m.name));
        }
        tx.commit().await?;
        Ok(applied)
    }
}

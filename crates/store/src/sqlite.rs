//! The SQLite backend: one file in WAL mode with `synchronous=FULL` (a commit is on disk
//! before it returns), one writer connection per process and a pool of readers.
//! Queries are shared with PostgreSQL through `StoreTx` and the `with_pool!` macro.

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use crate::{StoreConfig, StoreError};

#[derive(Clone)]
pub(crate) struct SqliteStore {
    pub(crate) writer: SqlitePool,
    pub(crate) reader: SqlitePool,
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
}

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
    /// How long one statement of a lineage walk may run (`StoreConfig::walk_timeout_ms`).
    pub(crate) walk_timeout_ms: u64,
    /// The database file as opened (none in memory): [`SqliteStore::check_file`].
    file: Option<FileIdentity>,
}

/// A file's path and the identity (device, inode) it had when the store opened it.
#[derive(Debug, Clone)]
struct FileIdentity {
    path: std::path::PathBuf,
    id: (u64, u64),
}

/// The (device, inode) of `path`, `None` where it cannot be read (or on a platform
/// without inodes, where the check is skipped).
fn file_id(path: &std::path::Path) -> Option<(u64, u64)> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

impl SqliteStore {
    /// [`StoreError::FileGone`] when the file at the path is no longer the one the store
    /// opened (deleted, or replaced by a restore or a move): the open connections would
    /// go on writing into the old file, acknowledged and lost at the next start (a review
    /// lost 240 writes so), and new ones would open another. Checked before every write
    /// transaction and by the health check: one `stat`.
    pub(crate) fn check_file(&self) -> Result<(), StoreError> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        if file_id(&file.path) != Some(file.id) {
            return Err(StoreError::FileGone {
                path: file.path.display().to_string(),
            });
        }
        Ok(())
    }
}

/// The options a SQLite URL (or bare path) opens with, and whether it is in memory.
fn parse(url: &str) -> Result<(SqliteConnectOptions, bool), StoreError> {
    let options = if url.starts_with("sqlite:") {
        SqliteConnectOptions::from_str(url)?
    } else {
        SqliteConnectOptions::new().filename(url)
    };
    let in_memory = url.contains(":memory:") || url.contains("mode=memory");
    Ok((options, in_memory))
}

/// The file a SQLite URL names, as SQLite will open it (a `file:` URI's path, without its
/// query); empty when it names none.
fn file_of(options: &SqliteConnectOptions) -> std::path::PathBuf {
    let name = options.get_filename().to_string_lossy().into_owned();
    let path = name.strip_prefix("file:").unwrap_or(&name);
    let path = path.split('?').next().unwrap_or_default();
    std::path::PathBuf::from(path)
}

/// The database file a SQLite URL or path names: `None` for PostgreSQL and in-memory
/// databases. For a command that must not create one where none is.
pub fn database_file(url: &str) -> Option<std::path::PathBuf> {
    // PostgreSQL's, or a scheme `Store::connect` refuses: either way no file.
    if crate::is_postgres_url(url) || crate::unsupported_scheme(url).is_some() {
        return None;
    }
    let (options, in_memory) = parse(url).ok()?;
    (!in_memory).then(|| file_of(&options))
}

/// Whether a SQLite URL names an in-memory database (`sqlite::memory:`, `mode=memory`):
/// one that ends with the process that opened it.
pub fn in_memory_database(url: &str) -> bool {
    !crate::is_postgres_url(url) && parse(url).is_ok_and(|(_, in_memory)| in_memory)
}

/// The size the write-ahead log is cut back to when it starts over (SQLite's
/// `journal_size_limit`): what about 16,000 pages of ordinary writes take.
const WAL_BYTES_KEPT: u64 = 64 * 1024 * 1024;

/// Whether a connection given back to its pool may serve again: not while the driver
/// still counts it inside a transaction. A `COMMIT` that fails on an I/O error (a full
/// disk, a file size limit) is rolled back by SQLite itself; the driver's own rollback
/// then fails and leaves its count at one, and every later `BEGIN` on that connection
/// would fail ("non-zero transaction depth") until the process restarts. With one
/// writer connection that was every write of the server; closed here, the pool opens
/// a fresh one. A rollback queued by a dropped transaction runs before the ping
/// returns, so an ordinary rollback keeps its connection.
async fn out_of_transaction(conn: &mut sqlx::SqliteConnection) -> Result<bool, sqlx::Error> {
    use sqlx::Connection;
    if !conn.is_in_transaction() {
        return Ok(true);
    }
    conn.ping().await?;
    let clean = !conn.is_in_transaction();
    if !clean {
        tracing::warn!("a SQLite connection was left inside a failed transaction; replacing it");
    }
    Ok(clean)
}

impl SqliteStore {
    pub(crate) async fn connect(config: &StoreConfig) -> Result<SqliteStore, StoreError> {
        let url = config.database_url.as_str();
        let (options, in_memory) = parse(url)?;
        // SQLite opens an empty file name (`""`, `sqlite:`, `sqlite://?mode=rwc`, `file:`)
        // as a private temporary database: every write would be acknowledged and lost with
        // the connection.
        if !in_memory
            && file_of(&options)
                .as_os_str()
                .to_string_lossy()
                .trim()
                .is_empty()
        {
            return Err(StoreError::UnsupportedUrl(
                "it names no SQLite file (SQLite would open a temporary database and lose every write); use a file path or sqlite://PATH".into(),
            ));
        }
        let options = options
            .create_if_missing(true)
            .journal_mode(if in_memory {
                SqliteJournalMode::Memory
            } else {
                SqliteJournalMode::Wal
            })
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_millis(config.sqlite_busy_timeout_ms))
            // The log grows while a reader holds an old snapshot (a long report, a
            // semantic scan) and SQLite never shrinks it by itself: 1 GB beside a 113 MB
            // database was seen. Each time the log starts over after a complete
            // checkpoint, it is cut back to this.
            .pragma("journal_size_limit", WAL_BYTES_KEPT.to_string())
            .foreign_keys(true);
        // Requests queue for the one writer connection: a queue that waits longer than
        // this (another process holding the write lock) is refused `503 store_busy`,
        // not left to the request timeout.
        let acquire_timeout = Duration::from_millis(config.pool_acquire_timeout_ms.max(1));
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .acquire_timeout(acquire_timeout)
            .after_release(|conn, _| Box::pin(out_of_transaction(conn)))
            .connect_with(options.clone())
            .await?;
        let path = file_of(&options);
        let reader = if in_memory {
            writer.clone()
        } else {
            // The writer made the file; a reader never makes one (the file deleted under
            // a running server, a new reader opened an empty database beside the writer).
            SqlitePoolOptions::new()
                .max_connections(config.pool_connections_max.max(1))
                .acquire_timeout(acquire_timeout)
                .after_release(|conn, _| Box::pin(out_of_transaction(conn)))
                .connect_with(options.create_if_missing(false))
                .await?
        };
        let file = (!in_memory)
            .then(|| file_id(&path).map(|id| FileIdentity { path, id }))
            .flatten();
        Ok(SqliteStore {
            writer,
            reader,
            walk_timeout_ms: config.walk_timeout_ms,
            file,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_connection_cuts_the_log_back_when_it_starts_over() {
        let path = std::env::temp_dir().join(format!(
            "traqlyte-sqlite-unit-{}-{}.db",
            std::process::id(),
            crate::now_us()
        ));
        let config = StoreConfig::new(path.display().to_string());
        let store = SqliteStore::connect(&config).await.expect("connect");
        for pool in [&store.writer, &store.reader] {
            let limit: i64 = sqlx::query_scalar("PRAGMA journal_size_limit")
                .fetch_one(pool)
                .await
                .expect("pragma");
            assert_eq!(limit, WAL_BYTES_KEPT as i64);
        }
        store.writer.close().await;
        store.reader.close().await;
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }
}

//! A uniquely named database per test on either backend, removed when dropped, and a raw
//! connection to it for what the store's API does not expose (the migrations table).
//! PostgreSQL unreachable is a failure, never a skip.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{Connection, PgConnection, SqliteConnection};
use traqlyte_store::{Store, StoreConfig};

/// Which database a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Runs each named `async fn(Backend)` once per backend.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name($crate::db::Backend::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name($crate::db::Backend::Postgres).await
                }
            )*
        }
    };
}
pub(crate) use on_both_backends;

/// Where the PostgreSQL server for tests is; databases are created and dropped on it.
fn pg_admin_url() -> String {
    std::env::var("TRAQLYTE_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_string())
}

fn unique_name() -> String {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "traqlyte_store_it_{}_{}_{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A fresh, empty database.
pub struct TestDb {
    pub backend: Backend,
    pub url: String,
    name: String,
    path: Option<PathBuf>,
}

/// A raw connection to a test database.
pub enum Raw {
    Sqlite(SqliteConnection),
    Postgres(PgConnection),
}

impl TestDb {
    pub async fn create(backend: Backend) -> TestDb {
        let name = unique_name();
        match backend {
            Backend::Sqlite => {
                let path = std::env::temp_dir().join(format!("{name}.db"));
                TestDb {
                    backend,
                    url: path.display().to_string(),
                    name,
                    path: Some(path),
                }
            }
            Backend::Postgres => {
                let admin = pg_admin_url();
                let mut conn = PgConnection::connect(&admin).await.unwrap_or_else(|err| {
                    panic!("PostgreSQL must be reachable at {admin} for these tests: {err}")
                });
                sqlx::query(&format!("CREATE DATABASE {name}"))
                    .execute(&mut conn)
                    .await
                    .expect("create test database");
                let base = admin
                    .rsplit_once('/')
                    .map(|(base, _)| base)
                    .unwrap_or(&admin);
                TestDb {
                    backend,
                    url: format!("{base}/{name}"),
                    name,
                    path: None,
                }
            }
        }
    }

    /// A store over this database, not migrated.
    pub async fn store(&self) -> Store {
        Store::connect(&StoreConfig::new(&self.url))
            .await
            .expect("connect store")
    }

    /// A migrated store over this database and the id of its one tenant, `t`.
    pub async fn store_with_tenant(&self) -> (Store, traqlyte_store::TenantId) {
        let store = self.store().await;
        store.migrate().await.expect("migrate");
        let name = traqlyte_store::TenantName::parse("t").expect("name");
        let (tenant, _) = store.create_tenant(&name).await.expect("tenant");
        (store, tenant)
    }

    /// A raw connection, outside the store.
    pub async fn raw(&self) -> Raw {
        match &self.path {
            Some(path) => {
                let options = SqliteConnectOptions::new()
                    .filename(path)
                    .create_if_missing(true);
                Raw::Sqlite(
                    SqliteConnection::connect_with(&options)
                        .await
                        .expect("sqlite"),
                )
            }
            None => Raw::Postgres(PgConnection::connect(&self.url).await.expect("postgres")),
        }
    }
}

impl Raw {
    /// Runs SQL without parameters (several statements allowed).
    pub async fn execute(&mut self, sql: &str) {
        match self {
            Raw::Sqlite(c) => sqlx::raw_sql(sql).execute(c).await.map(|_| ()),
            Raw::Postgres(c) => sqlx::raw_sql(sql).execute(c).await.map(|_| ()),
        }
        .unwrap_or_else(|err| panic!("{sql}: {err}"))
    }

    /// The first column of every row, as an integer.
    pub async fn integers(&mut self, sql: &str) -> Vec<i64> {
        match self {
            Raw::Sqlite(c) => sqlx::query_scalar(sql).fetch_all(c).await,
            Raw::Postgres(c) => sqlx::query_scalar(sql).fetch_all(c).await,
        }
        .unwrap_or_else(|err| panic!("{sql}: {err}"))
    }

    /// The first column of every row, as text.
    pub async fn texts(&mut self, sql: &str) -> Vec<String> {
        match self {
            Raw::Sqlite(c) => sqlx::query_scalar(sql).fetch_all(c).await,
            Raw::Postgres(c) => sqlx::query_scalar(sql).fetch_all(c).await,
        }
        .unwrap_or_else(|err| panic!("{sql}: {err}"))
    }

    /// The first column of every row, as bytes.
    pub async fn blobs(&mut self, sql: &str) -> Vec<Vec<u8>> {
        match self {
            Raw::Sqlite(c) => sqlx::query_scalar(sql).fetch_all(c).await,
            Raw::Postgres(c) => sqlx::query_scalar(sql).fetch_all(c).await,
        }
        .unwrap_or_else(|err| panic!("{sql}: {err}"))
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Some(path) = &self.path {
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
            }
            return;
        }
        let name = self.name.clone();
        // Drop runs inside the test's runtime; use a thread with its own runtime.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async {
                let mut conn = PgConnection::connect(&pg_admin_url()).await.ok()?;
                sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .execute(&mut conn)
                    .await
                    .ok()
            })
        })
        .join();
    }
}

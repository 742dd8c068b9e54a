//! The SQLite backend: one file in WAL mode with `synchronous=FULL` (a commit is on disk
//! before it returns), one writer connection per process and a pool of readers.
//! SQL is written once with `$N` placeholders and turned into SQLite's `?N`.

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use crate::migrate::{CREATE_MIGRATIONS_TABLE, MIGRATIONS};
use crate::{CollisionRecord, ContractStats, StoreConfig, StoreError, StoredEvent, TenantId};

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

    pub(crate) async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.reader).await?;
        Ok(())
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

    pub(crate) async fn create_tenant(
        &self,
        tenant: &TenantId,
        name: &str,
        key: &crate::ApiKey,
        now: i64,
    ) -> Result<(), StoreError> {
        let mut tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
        sqlx::query(&q(
            "INSERT INTO tenants (tenant_id, name, created_at_us) VALUES ($1, $2, $3)",
        ))
        .bind(tenant.as_str())
        .bind(name)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        sqlx::query(&q(
            "INSERT INTO api_keys (key_hash, tenant_id, created_at_us) VALUES ($1, $2, $3)",
        ))
        .bind(key.hash())
        .bind(tenant.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(crate) async fn tenant_for_key(
        &self,
        key_hash: &str,
    ) -> Result<Option<TenantId>, StoreError> {
        let row: Option<String> =
            sqlx::query_scalar(&q("SELECT tenant_id FROM api_keys WHERE key_hash = $1"))
                .bind(key_hash)
                .fetch_optional(&self.reader)
                .await?;
        Ok(row.map(TenantId::from_stored))
    }

    pub(crate) async fn contract_definition(
        &self,
        tenant: &TenantId,
        name: &str,
        version: Option<u32>,
    ) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar(&q(crate::sql::SELECT_CONTRACT))
            .bind(tenant.as_str())
            .bind(name)
            .bind(version.map(i64::from))
            .fetch_optional(&self.reader)
            .await?)
    }

    pub(crate) async fn contract_definitions(
        &self,
        tenant: &TenantId,
    ) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(&q(crate::sql::SELECT_CONTRACTS))
            .bind(tenant.as_str())
            .fetch_all(&self.reader)
            .await?)
    }

    pub(crate) async fn stats(&self, tenant: &TenantId) -> Result<Vec<ContractStats>, StoreError> {
        let rows = sqlx::query(&q(crate::sql::SELECT_STATS))
            .bind(tenant.as_str())
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(crate::sql::stats_row).collect()
    }

    pub(crate) async fn event(
        &self,
        tenant: &TenantId,
        contract: &str,
        event_id: &str,
    ) -> Result<Option<StoredEvent>, StoreError> {
        let row = sqlx::query(&q(crate::sql::SELECT_EVENT))
            .bind(tenant.as_str())
            .bind(contract)
            .bind(event_id)
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(crate::sql::event_row).transpose()
    }

    pub(crate) async fn collisions(
        &self,
        tenant: &TenantId,
        contract: &str,
        limit: u32,
    ) -> Result<Vec<CollisionRecord>, StoreError> {
        let rows = sqlx::query(&q(crate::sql::SELECT_COLLISIONS))
            .bind(tenant.as_str())
            .bind(contract)
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(crate::sql::collision_row).collect()
    }
}

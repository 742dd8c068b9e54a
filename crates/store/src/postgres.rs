//! The PostgreSQL backend: a shared pool, default durable commits
//! (`synchronous_commit = on`), and one `INSERT … SELECT FROM unnest(…) ON CONFLICT DO
//! NOTHING` per batch so a batch costs one round trip however many events it holds.

use std::time::Duration;

use sqlx::postgres::{PgPool, PgPoolOptions};

use crate::migrate::{CREATE_MIGRATIONS_TABLE, MIGRATIONS, PG_MIGRATION_LOCK};
use crate::{
    sql, ApiKey, CollisionRecord, ContractStats, StoreConfig, StoreError, StoredEvent, TenantId,
};

#[derive(Clone)]
pub(crate) struct PgStore {
    pub(crate) pool: PgPool,
}

impl PgStore {
    pub(crate) async fn connect(config: &StoreConfig) -> Result<PgStore, StoreError> {
        let pool = PgPoolOptions::new()
            .max_connections(config.pool_connections_max.max(1))
            .acquire_timeout(Duration::from_secs(30))
            .connect(&config.database_url)
            .await?;
        Ok(PgStore { pool })
    }

    pub(crate) async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    pub(crate) async fn migrate(&self) -> Result<Vec<String>, StoreError> {
        let mut tx = self.pool.begin().await?;
        // Serialises concurrent migrators (several servers starting at once).
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(PG_MIGRATION_LOCK)
            .execute(&mut *tx)
            .await?;
        sqlx::query(CREATE_MIGRATIONS_TABLE)
            .execute(&mut *tx)
            .await?;
        let done: Vec<i64> = sqlx::query_scalar("SELECT version FROM schema_migrations")
            .fetch_all(&mut *tx)
            .await?;
        let mut applied = Vec::new();
        for m in MIGRATIONS.iter().filter(|m| !done.contains(&m.version)) {
            sqlx::raw_sql(m.postgres).execute(&mut *tx).await?;
            sqlx::query(
                "INSERT INTO schema_migrations (version, name, applied_at_us) VALUES ($1, $2, $3)",
            )
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
        key: &ApiKey,
        now: i64,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("INSERT INTO tenants (tenant_id, name, created_at_us) VALUES ($1, $2, $3)")
            .bind(tenant.as_str())
            .bind(name)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO api_keys (key_hash, tenant_id, created_at_us) VALUES ($1, $2, $3)",
        )
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
            sqlx::query_scalar("SELECT tenant_id FROM api_keys WHERE key_hash = $1")
                .bind(key_hash)
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.map(TenantId::from_stored))
    }

    pub(crate) async fn contract_definition(
        &self,
        tenant: &TenantId,
        name: &str,
        version: Option<u32>,
    ) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar(sql::SELECT_CONTRACT)
            .bind(tenant.as_str())
            .bind(name)
            .bind(version.map(i64::from))
            .fetch_optional(&self.pool)
            .await?)
    }

    pub(crate) async fn contract_definitions(
        &self,
        tenant: &TenantId,
    ) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(sql::SELECT_CONTRACTS)
            .bind(tenant.as_str())
            .fetch_all(&self.pool)
            .await?)
    }

    pub(crate) async fn stats(&self, tenant: &TenantId) -> Result<Vec<ContractStats>, StoreError> {
        let rows = sqlx::query(sql::SELECT_STATS)
            .bind(tenant.as_str())
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(sql::stats_row).collect()
    }

    pub(crate) async fn event(
        &self,
        tenant: &TenantId,
        contract: &str,
        event_id: &str,
    ) -> Result<Option<StoredEvent>, StoreError> {
        let row = sqlx::query(sql::SELECT_EVENT)
            .bind(tenant.as_str())
            .bind(contract)
            .bind(event_id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(sql::event_row).transpose()
    }

    pub(crate) async fn collisions(
        &self,
        tenant: &TenantId,
        contract: &str,
        limit: u32,
    ) -> Result<Vec<CollisionRecord>, StoreError> {
        let rows = sqlx::query(sql::SELECT_COLLISIONS)
            .bind(tenant.as_str())
            .bind(contract)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(sql::collision_row).collect()
    }
}

//! The PostgreSQL backend: a shared pool, default durable commits
//! (`synchronous_commit = on`), and one `INSERT … SELECT FROM unnest(…) ON CONFLICT DO
//! NOTHING` per batch so a batch costs one round trip however many events it holds.

use std::time::Duration;

use sqlx::postgres::{PgPool, PgPoolOptions};

use crate::migrate::{CREATE_MIGRATIONS_TABLE, MIGRATIONS, PG_MIGRATION_LOCK};
use crate::{StoreConfig, StoreError};

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
}

//! The PostgreSQL backend: a shared pool, default durable commits
//! (`synchronous_commit = on`), and one `INSERT … SELECT FROM unnest(…) ON CONFLICT DO
//! NOTHING` per batch so a batch costs one round trip however many events it holds.

use std::time::Duration;

use sqlx::postgres::{PgPool, PgPoolOptions};

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
}

//! The PostgreSQL backend: a shared pool, default durable commits
//! (`synchronous_commit = on`), and one `INSERT … SELECT FROM unnest(…) ON CONFLICT DO
//! NOTHING` per batch so a batch costs one round trip however many events it holds.

use std::collections::HashMap;
use std::time::Duration;

use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::Row;
use traqlyte_identity::Contract;

use crate::migrate::{CREATE_MIGRATIONS_TABLE, MIGRATIONS, PG_MIGRATION_LOCK};
use crate::plan::{self, Batch, Held};
use crate::{
    sql, ApiKey, CollisionRecord, ContractStats, EventOutcome, StoreConfig, StoreError,
    StoredEvent, TenantId,
};

const INSERT_EVENTS_UNNEST: &str = "INSERT INTO events
     (tenant_id, contract_name, event_id, contract_version, fingerprint, payload, occurred_at_us, received_at_us)
     SELECT $1, $2, e.event_id, $3, e.fingerprint, e.payload, e.occurred_at_us, $4
     FROM unnest($5::text[], $6::text[], $7::text[], $8::int8[]) AS e(event_id, fingerprint, payload, occurred_at_us)
     ON CONFLICT DO NOTHING
     RETURNING event_id";

const SELECT_HELD_MANY: &str = "SELECT event_id, fingerprint, payload FROM events
     WHERE tenant_id = $1 AND contract_name = $2 AND event_id = ANY($3)";

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

    pub(crate) async fn insert_events(
        &self,
        tenant: &TenantId,
        contract: &Contract,
        batch: &Batch<'_>,
        now: i64,
    ) -> Result<Vec<EventOutcome>, StoreError> {
        let name = contract.name().as_str();
        let candidates: Vec<&crate::NewEvent> =
            batch.candidates.iter().map(|&i| &batch.events[i]).collect();
        let ids: Vec<&str> = candidates
            .iter()
            .map(|e| e.identified.event_id.as_str())
            .collect();
        let fingerprints: Vec<&str> = candidates
            .iter()
            .map(|e| e.identified.fingerprint.as_str())
            .collect();
        let payloads: Vec<&str> = candidates.iter().map(|e| e.payload.as_str()).collect();
        let occurred: Vec<Option<i64>> = candidates
            .iter()
            .map(|e| e.identified.occurred_at_us)
            .collect();

        let mut tx = self.pool.begin().await?;
        let inserted: Vec<String> = sqlx::query_scalar(INSERT_EVENTS_UNNEST)
            .bind(tenant.as_str())
            .bind(name)
            .bind(contract.version() as i32)
            .bind(now)
            .bind(&ids)
            .bind(&fingerprints)
            .bind(&payloads)
            .bind(&occurred)
            .fetch_all(&mut *tx)
            .await?;
        let by_id: HashMap<&str, &crate::NewEvent> = ids
            .iter()
            .copied()
            .zip(candidates.iter().copied())
            .collect();
        let mut held: HashMap<String, Held> = HashMap::with_capacity(ids.len());
        for id in inserted {
            // The fingerprint of a row this statement inserted is the candidate's own.
            let fingerprint = by_id
                .get(id.as_str())
                .map(|e| e.identified.fingerprint.to_string())
                .unwrap_or_default();
            held.insert(
                id,
                Held {
                    inserted_here: true,
                    fingerprint,
                    payload: None,
                },
            );
        }
        let conflicting: Vec<&str> = ids
            .iter()
            .copied()
            .filter(|id| !held.contains_key(*id))
            .collect();
        if !conflicting.is_empty() {
            // Read Committed: this statement sees rows committed by the concurrent
            // transactions our insert waited for.
            let rows = sqlx::query(SELECT_HELD_MANY)
                .bind(tenant.as_str())
                .bind(name)
                .bind(&conflicting)
                .fetch_all(&mut *tx)
                .await?;
            for row in rows {
                held.insert(
                    row.try_get(0)?,
                    Held {
                        inserted_here: false,
                        fingerprint: row.try_get(1)?,
                        payload: Some(row.try_get(2)?),
                    },
                );
            }
        }
        let resolution = plan::resolve(batch, &held)?;
        for c in &resolution.collisions {
            sqlx::query(sql::INSERT_COLLISION)
                .bind(tenant.as_str())
                .bind(name)
                .bind(c.event.identified.event_id.as_str())
                .bind(contract.version() as i32)
                .bind(&c.stored_fingerprint)
                .bind(c.event.identified.fingerprint.as_str())
                .bind(&c.stored_payload)
                .bind(&c.event.payload)
                .bind(now)
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query(sql::INSERT_TALLY)
            .bind(tenant.as_str())
            .bind(name)
            .bind(now)
            .bind(resolution.inserted)
            .bind(resolution.duplicates)
            .bind(resolution.collisions.len() as i64)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(resolution.outcomes)
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

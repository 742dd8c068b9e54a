//! The raw store limit that ingestion benchmarks compare against: the same rows inserted
//! straight into the `events` table with no identification, no retry/collision reading
//! and no counting — only the batched insert with its dedupe constraint.

use traqlyte_identity::Contract;

use crate::{CampaignId, NewEvent, Store, StoreError, TenantId};

impl Store {
    /// Inserts `events` in one transaction with `INSERT … ON CONFLICT DO NOTHING`: a
    /// `SELECT FROM unnest(…)` on PostgreSQL, prepared multi-row `VALUES` on SQLite.
    /// Returns the number of rows inserted. For benchmarks only: it counts nothing and
    /// logs no collision.
    pub async fn raw_insert_events(
        &self,
        tenant: &TenantId,
        contract: &Contract,
        events: &[NewEvent],
    ) -> Result<u64, StoreError> {
        let mut tx = self.begin().await?;
        let rows: Vec<&NewEvent> = events.iter().collect();
        let target = crate::events::Target {
            table: crate::events::EventTable::Live,
            tenant,
            contract,
        };
        let (_, inserted) = tx
            .insert_event_rows(&target, &rows, crate::now_us(), false)
            .await?;
        tx.commit().await?;
        Ok(inserted)
    }
}

/// Row counts of a generated experiment.
#[derive(Debug, Clone, Copy)]
pub struct SeededExperiment {
    /// Units (assignments).
    pub units: i64,
    /// Stored outcomes.
    pub outcomes: i64,
    /// Duplicate deliveries suppressed.
    pub duplicates: i64,
}

impl Store {
    /// Fills a published campaign (arms `control`/`treatment`, metrics `purchase` and
    /// `revenue`) with `units` assignments, `outcomes` outcomes spread over them, and one
    /// suppressed duplicate per `duplicate_every` outcomes — generated inside PostgreSQL
    /// so a report benchmark can start in seconds. PostgreSQL only.
    pub async fn bench_seed_experiment(
        &self,
        tenant: &TenantId,
        campaign_id: &CampaignId,
        units: i64,
        outcomes: i64,
        duplicate_every: i64,
        at_us: i64,
    ) -> Result<SeededExperiment, StoreError> {
        let crate::Backend::Postgres(pg) = &self.backend else {
            return Err(StoreError::UnsupportedUrl(
                "the report benchmark seeds PostgreSQL only".into(),
            ));
        };
        let statements = [
            "INSERT INTO assignments (tenant_id, campaign_id, unit_id, assignment_id, arm, version, assigned_at_us)
             SELECT $1, $2, 'u' || g, 'asg_' || lpad(to_hex(g), 32, '0'), CASE WHEN g % 2 = 0 THEN 'control' ELSE 'treatment' END, 1, $5
             FROM generate_series(1, $3::bigint) g",
            "INSERT INTO outcomes (tenant_id, assignment_id, dedupe_key, campaign_id, arm, assigned_at_us, metric, value,
                                   occurred_at_us, received_at_us, fingerprint, outcome_id)
             SELECT $1, a, k, $2, CASE WHEN u % 2 = 0 THEN 'control' ELSE 'treatment' END, $5,
                    CASE WHEN (g / 2) % 2 = 0 THEN 'purchase' ELSE 'revenue' END,
                    CASE WHEN (g / 2) % 2 = 0 THEN NULL ELSE (g % 1000) / 10.0 END,
                    $5 + (g % 86400) * 1000000, $5 + (g % 86400) * 1000000 + 5000000, 'bench',
                    traqlyte_outcome_id($1, $2, a, k)
             FROM (SELECT g, u, 'asg_' || lpad(to_hex(u), 32, '0') AS a, 'k' || g AS k
                   FROM (SELECT g, 1 + (g * 7919) % $3::bigint AS u FROM generate_series(1, $4::bigint) g) n) s",
            "INSERT INTO outcome_duplicates (tenant_id, campaign_id, assignment_id, dedupe_key, arm, assigned_at_us, metric,
                                             value, occurred_at_us, arrived_at_us)
             SELECT tenant_id, campaign_id, assignment_id, dedupe_key, arm, assigned_at_us, metric, value, occurred_at_us,
                    received_at_us + 60000000
             FROM outcomes WHERE tenant_id = $1 AND campaign_id = $2 AND ('x' || substr(md5(dedupe_key), 1, 8))::bit(32)::bigint % $6 = 0",
        ];
        for sql in statements {
            let mut query = sqlx::query(sql)
                .bind(tenant.as_str())
                .bind(campaign_id.as_str())
                .bind(units)
                .bind(outcomes)
                .bind(at_us);
            if sql.contains("$6") {
                query = query.bind(duplicate_every.max(1));
            }
            query.execute(&pg.pool).await?;
        }
        sqlx::query("ANALYZE assignments, outcomes, outcome_duplicates")
            .execute(&pg.pool)
            .await?;
        let duplicates: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM outcome_duplicates WHERE tenant_id = $1 AND campaign_id = $2",
        )
        .bind(tenant.as_str())
        .bind(campaign_id.as_str())
        .fetch_one(&pg.pool)
        .await?;
        Ok(SeededExperiment {
            units,
            outcomes,
            duplicates,
        })
    }

    /// The reference the report is measured against: a plain aggregate scan of the same
    /// rows, `SELECT arm, count(*), sum(value) … GROUP BY arm`.
    pub async fn bench_plain_scan(
        &self,
        tenant: &TenantId,
        campaign_id: &CampaignId,
    ) -> Result<Vec<ArmScan>, StoreError> {
        crate::tx::with_pool!(self, reader, |pool| {
            let query = sqlx::query_as(PLAIN_SCAN)
                .bind(tenant.as_str())
                .bind(campaign_id.as_str());
            Ok(query.fetch_all(pool).await?)
        })
    }
}

/// One arm's row of [`Store::bench_plain_scan`].
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ArmScan {
    /// The arm's key.
    pub arm: String,
    /// Its outcomes.
    pub outcomes: i64,
    /// The sum of their values.
    pub value: Option<f64>,
}

const PLAIN_SCAN: &str =
    "SELECT arm, COUNT(*) AS outcomes, CAST(SUM(value) AS DOUBLE PRECISION) AS value FROM outcomes
     WHERE tenant_id = $1 AND campaign_id = $2 GROUP BY arm";

/// The events table as it was before time partitions: one primary key over the text id,
/// growing with every row. The growth benchmark's contrast.
const FLAT_RESET: &str = "DROP TABLE IF EXISTS bench_events_flat;
    CREATE TABLE bench_events_flat (
        tenant_id TEXT NOT NULL, contract_name TEXT NOT NULL, event_id TEXT NOT NULL,
        contract_version INTEGER NOT NULL, fingerprint TEXT NOT NULL, payload TEXT NOT NULL,
        occurred_at_us BIGINT, received_at_us BIGINT NOT NULL,
        PRIMARY KEY (tenant_id, contract_name, event_id))";

const FLAT_INSERT: &str = "INSERT INTO bench_events_flat
     (tenant_id, contract_name, event_id, contract_version, fingerprint, payload, occurred_at_us, received_at_us)
     SELECT $1, $2, e.event_id, $3, e.fingerprint, e.payload, e.occurred_at_us, $4
     FROM unnest($5::text[], $6::text[], $7::text[], $8::int8[]) AS e(event_id, fingerprint, payload, occurred_at_us)
     ON CONFLICT DO NOTHING";

/// Bytes of the indexes live writes maintain: the attached partitions of `events`, and
/// `bench_events_flat`.
const LIVE_INDEX_BYTES: &str = "SELECT
       CAST(COALESCE((SELECT SUM(pg_indexes_size(i.inhrelid)) FROM pg_inherits i
                      WHERE i.inhparent = 'events'::regclass), 0) AS BIGINT) AS partitioned,
       CAST(COALESCE(pg_indexes_size(to_regclass('bench_events_flat')), 0) AS BIGINT) AS flat";

impl Store {
    /// Creates `bench_events_flat` empty (dropping an earlier one). PostgreSQL only.
    pub async fn bench_flat_reset(&self) -> Result<(), StoreError> {
        let crate::Backend::Postgres(pg) = &self.backend else {
            return Err(StoreError::UnsupportedUrl(
                "the unpartitioned contrast runs on PostgreSQL only".into(),
            ));
        };
        sqlx::raw_sql(FLAT_RESET).execute(&pg.pool).await?;
        Ok(())
    }

    /// [`Store::raw_insert_events`] into `bench_events_flat`: the same statement shape,
    /// one growing index. Returns the rows inserted.
    pub async fn raw_insert_flat(
        &self,
        tenant: &TenantId,
        contract: &Contract,
        events: &[NewEvent],
    ) -> Result<u64, StoreError> {
        let crate::Backend::Postgres(pg) = &self.backend else {
            return Ok(0);
        };
        let column = |f: &dyn Fn(&NewEvent) -> &str| events.iter().map(f).collect::<Vec<_>>();
        let occurred: Vec<Option<i64>> =
            events.iter().map(|e| e.identified.occurred_at_us).collect();
        let done = sqlx::query(FLAT_INSERT)
            .bind(tenant.as_str())
            .bind(contract.name().as_str())
            .bind(contract.version() as i32)
            .bind(crate::now_us())
            .bind(column(&|e| e.identified.event_id.as_str()))
            .bind(column(&|e| e.identified.fingerprint.as_str()))
            .bind(column(&|e| e.payload.as_str()))
            .bind(&occurred)
            .execute(&pg.pool)
            .await?;
        Ok(done.rows_affected())
    }

    /// `(partitioned, flat)`: bytes of the indexes live writes maintain in the attached
    /// partitions of `events` and in `bench_events_flat`; `(0, 0)` on SQLite.
    pub async fn bench_live_index_bytes(&self) -> Result<(i64, i64), StoreError> {
        let crate::Backend::Postgres(pg) = &self.backend else {
            return Ok((0, 0));
        };
        Ok(sqlx::query_as(LIVE_INDEX_BYTES).fetch_one(&pg.pool).await?)
    }
}

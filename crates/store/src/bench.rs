//! The raw store limit that ingestion benchmarks compare against: the same rows inserted
//! straight into the `events` table with no identification, no retry/collision reading
//! and no counting — only the batched insert with its dedupe constraint.

use crate::tx::TxInner;
use crate::{NewEvent, Store, StoreError, TenantId};

/// Rows per multi-row `INSERT … VALUES` statement on SQLite (8 parameters per row stays
/// well under SQLite's 32,766-parameter limit).
const SQLITE_ROWS_PER_STATEMENT: usize = 500;

const PG_RAW_INSERT: &str = "INSERT INTO events
     (tenant_id, contract_name, event_id, contract_version, fingerprint, payload, occurred_at_us, received_at_us)
     SELECT $1, $2, e.event_id, $3, e.fingerprint, e.payload, e.occurred_at_us, $4
     FROM unnest($5::text[], $6::text[], $7::text[], $8::int8[]) AS e(event_id, fingerprint, payload, occurred_at_us)
     ON CONFLICT DO NOTHING";

impl Store {
    /// Inserts `events` in one transaction with `INSERT … ON CONFLICT DO NOTHING`: a
    /// `SELECT FROM unnest(…)` on PostgreSQL, prepared multi-row `VALUES` on SQLite.
    /// Returns the number of rows inserted. For benchmarks only: it counts nothing and
    /// logs no collision.
    pub async fn raw_insert_events(
        &self,
        tenant: &TenantId,
        contract: &str,
        version: u32,
        events: &[NewEvent],
    ) -> Result<u64, StoreError> {
        let now = crate::now_us();
        let mut tx = self.begin().await?;
        let inserted = match &mut tx.inner {
            TxInner::Postgres(conn) => {
                let ids: Vec<&str> = events
                    .iter()
                    .map(|e| e.identified.event_id.as_str())
                    .collect();
                let fingerprints: Vec<&str> = events
                    .iter()
                    .map(|e| e.identified.fingerprint.as_str())
                    .collect();
                let payloads: Vec<&str> = events.iter().map(|e| e.payload.as_str()).collect();
                let occurred: Vec<Option<i64>> =
                    events.iter().map(|e| e.identified.occurred_at_us).collect();
                sqlx::query(PG_RAW_INSERT)
                    .bind(tenant.as_str())
                    .bind(contract)
                    .bind(version as i32)
                    .bind(now)
                    .bind(&ids)
                    .bind(&fingerprints)
                    .bind(&payloads)
                    .bind(&occurred)
                    .execute(&mut **conn)
                    .await?
                    .rows_affected()
            }
            TxInner::Sqlite(conn) => {
                let mut inserted = 0;
                for chunk in events.chunks(SQLITE_ROWS_PER_STATEMENT) {
                    let sql = sqlite_multi_row_insert(chunk.len());
                    let mut query = sqlx::query(&sql);
                    for e in chunk {
                        query = query
                            .bind(tenant.as_str())
                            .bind(contract)
                            .bind(e.identified.event_id.as_str())
                            .bind(i64::from(version))
                            .bind(e.identified.fingerprint.as_str())
                            .bind(e.payload.as_str())
                            .bind(e.identified.occurred_at_us)
                            .bind(now);
                    }
                    inserted += query.execute(&mut **conn).await?.rows_affected();
                }
                inserted
            }
        };
        tx.commit().await?;
        Ok(inserted)
    }
}

fn sqlite_multi_row_insert(rows: usize) -> String {
    let mut sql = String::from("INSERT INTO events (tenant_id, contract_name, event_id, contract_version, fingerprint, payload, occurred_at_us, received_at_us) VALUES ");
    for row in 0..rows {
        if row > 0 {
            sql.push(',');
        }
        sql.push_str("(?,?,?,?,?,?,?,?)");
    }
    sql.push_str(" ON CONFLICT DO NOTHING");
    sql
}

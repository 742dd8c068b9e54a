//! Lineage on SQLite: the single writer connection serialises transactions
//! (`BEGIN IMMEDIATE`), so the event rows and their graph rows commit together.

use std::collections::HashMap;

use sqlx::{Row, SqliteConnection};
use traqlyte_identity::Contract;

use super::{
    level_sql, Direction, GraphRows, NodeKind, NodeRef, RunEventRow, INSERT_DATASET, INSERT_JOB,
    INSERT_RUN, INSERT_RUN_INPUT, INSERT_RUN_OUTPUT,
};
use crate::plan::{self, Batch, Held, Resolution};
use crate::sqlite::SqliteStore;
use crate::{sql, EventOutcome, StoreError, TenantId};

/// `$1` → `?1`: SQLite's numbered parameter syntax.
fn q(text: &str) -> String {
    text.replace('$', "?")
}

impl SqliteStore {
    pub(crate) async fn insert_run_events(
        &self,
        tenant: &TenantId,
        contract: &Contract,
        batch: &Batch<'_>,
        rows: &[RunEventRow],
        now: i64,
    ) -> Result<Vec<EventOutcome>, StoreError> {
        let mut tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
        let held = insert_candidates(&mut tx, tenant, contract, batch, now).await?;
        let resolution = plan::resolve(batch, &held)?;
        record(&mut tx, tenant, contract, &resolution, now).await?;
        let graph = GraphRows::of_inserted(rows, &resolution.outcomes);
        write_graph(&mut tx, tenant, &graph, now).await?;
        tx.commit().await?;
        Ok(resolution.outcomes)
    }

    pub(crate) async fn count(
        &self,
        sql: &str,
        tenant: &TenantId,
        node: Option<&NodeRef>,
    ) -> Result<i64, StoreError> {
        let text = q(sql);
        let mut query = sqlx::query_scalar(&text).bind(tenant.as_str());
        if let Some(node) = node {
            query = query.bind(&node.namespace).bind(&node.name);
        }
        Ok(query.fetch_one(&self.reader).await?)
    }

    pub(crate) async fn level(
        &self,
        tenant: &TenantId,
        kind: NodeKind,
        direction: Direction,
        frontier: &[(&str, &str)],
        limit: i64,
    ) -> Result<Vec<(String, String, String, String)>, StoreError> {
        // The frontier travels as one JSON array of [namespace, name] pairs.
        let pairs =
            serde_json::to_string(frontier).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let frontier_sql =
            "SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?2)";
        // Placeholders become `?N` before the frontier goes in: its JSON paths keep `$`.
        let text =
            q(&level_sql(kind, direction, "FRONTIER", "$3")).replace("FRONTIER", frontier_sql);
        let rows = sqlx::query(&text)
            .bind(tenant.as_str())
            .bind(pairs)
            .bind(limit)
            .fetch_all(&self.reader)
            .await?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get(0)?,
                    row.try_get(1)?,
                    row.try_get(2)?,
                    row.try_get(3)?,
                ))
            })
            .collect()
    }
}

async fn insert_candidates(
    tx: &mut SqliteConnection,
    tenant: &TenantId,
    contract: &Contract,
    batch: &Batch<'_>,
    now: i64,
) -> Result<HashMap<String, Held>, StoreError> {
    let name = contract.name().as_str();
    let mut held = HashMap::with_capacity(batch.candidates.len());
    for &index in &batch.candidates {
        let event = &batch.events[index];
        let id = event.identified.event_id.as_str();
        let done = sqlx::query(&q(sql::INSERT_EVENT))
            .bind(tenant.as_str())
            .bind(name)
            .bind(id)
            .bind(i64::from(contract.version()))
            .bind(event.identified.fingerprint.as_str())
            .bind(&event.payload)
            .bind(event.identified.occurred_at_us)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        let row = if done.rows_affected() == 1 {
            Held {
                inserted_here: true,
                fingerprint: event.identified.fingerprint.to_string(),
                payload: None,
            }
        } else {
            let row = sqlx::query(&q(sql::SELECT_HELD_ONE))
                .bind(tenant.as_str())
                .bind(name)
                .bind(id)
                .fetch_one(&mut *tx)
                .await?;
            Held {
                inserted_here: false,
                fingerprint: row.try_get(0)?,
                payload: Some(row.try_get(1)?),
            }
        };
        held.insert(id.to_string(), row);
    }
    Ok(held)
}

/// Collisions to the log and one tally row, as `insert_events` does.
async fn record(
    tx: &mut SqliteConnection,
    tenant: &TenantId,
    contract: &Contract,
    resolution: &Resolution<'_>,
    now: i64,
) -> Result<(), StoreError> {
    let name = contract.name().as_str();
    for c in &resolution.collisions {
        sqlx::query(&q(sql::INSERT_COLLISION))
            .bind(tenant.as_str())
            .bind(name)
            .bind(c.event.identified.event_id.as_str())
            .bind(i64::from(contract.version()))
            .bind(&c.stored_fingerprint)
            .bind(c.event.identified.fingerprint.as_str())
            .bind(&c.stored_payload)
            .bind(&c.event.payload)
            .bind(now)
            .execute(&mut *tx)
            .await?;
    }
    sqlx::query(&q(sql::INSERT_TALLY))
        .bind(tenant.as_str())
        .bind(name)
        .bind(now)
        .bind(resolution.inserted)
        .bind(resolution.duplicates)
        .bind(resolution.collisions.len() as i64)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

async fn write_graph(
    tx: &mut SqliteConnection,
    tenant: &TenantId,
    graph: &GraphRows,
    now: i64,
) -> Result<(), StoreError> {
    let t = tenant.as_str();
    for (sql, rows) in [(INSERT_JOB, &graph.jobs), (INSERT_DATASET, &graph.datasets)] {
        for (namespace, name) in rows {
            sqlx::query(&q(sql))
                .bind(t)
                .bind(namespace)
                .bind(name)
                .bind(now)
                .execute(&mut *tx)
                .await?;
        }
    }
    for (run_id, (namespace, name, event_id)) in &graph.runs {
        sqlx::query(&q(INSERT_RUN))
            .bind(t)
            .bind(run_id)
            .bind(namespace)
            .bind(name)
            .bind(event_id)
            .bind(now)
            .execute(&mut *tx)
            .await?;
    }
    for (sql, rows) in [
        (INSERT_RUN_INPUT, &graph.inputs),
        (INSERT_RUN_OUTPUT, &graph.outputs),
    ] {
        for (run_id, namespace, name, version) in rows {
            sqlx::query(&q(sql))
                .bind(t)
                .bind(run_id)
                .bind(namespace)
                .bind(name)
                .bind(version)
                .execute(&mut *tx)
                .await?;
        }
    }
    Ok(())
}

//! Lineage on PostgreSQL: Read Committed, so an insert that conflicts with a concurrent
//! transaction waits for it and the following select sees its committed row; the event
//! rows and their graph rows commit together.

use std::collections::HashMap;

use sqlx::{PgConnection, Row};
use traqlyte_identity::Contract;

use super::{
    level_sql, Direction, GraphRows, NodeKind, NodeRef, RunEventRow, INSERT_DATASET, INSERT_JOB,
    INSERT_RUN, INSERT_RUN_INPUT, INSERT_RUN_OUTPUT,
};
use crate::plan::{self, Batch, Held, Resolution};
use crate::postgres::PgStore;
use crate::{sql, EventOutcome, StoreError, TenantId};

impl PgStore {
    pub(crate) async fn insert_run_events(
        &self,
        tenant: &TenantId,
        contract: &Contract,
        batch: &Batch<'_>,
        rows: &[RunEventRow],
        now: i64,
    ) -> Result<Vec<EventOutcome>, StoreError> {
        let mut tx = self.pool.begin().await?;
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
        let mut query = sqlx::query_scalar(sql).bind(tenant.as_str());
        if let Some(node) = node {
            query = query.bind(&node.namespace).bind(&node.name);
        }
        Ok(query.fetch_one(&self.pool).await?)
    }

    pub(crate) async fn level(
        &self,
        tenant: &TenantId,
        kind: NodeKind,
        direction: Direction,
        frontier: &[(&str, &str)],
        limit: i64,
    ) -> Result<Vec<(String, String, String, String)>, StoreError> {
        let namespaces: Vec<&str> = frontier.iter().map(|(ns, _)| *ns).collect();
        let names: Vec<&str> = frontier.iter().map(|(_, name)| *name).collect();
        let frontier_sql = "SELECT * FROM unnest($2::text[], $3::text[])";
        let text = level_sql(kind, direction, frontier_sql, "$4");
        let rows = sqlx::query(&text)
            .bind(tenant.as_str())
            .bind(&namespaces)
            .bind(&names)
            .bind(limit)
            .fetch_all(&self.pool)
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
    tx: &mut PgConnection,
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
        let done = sqlx::query(sql::INSERT_EVENT)
            .bind(tenant.as_str())
            .bind(name)
            .bind(id)
            .bind(contract.version() as i32)
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
            let row = sqlx::query(sql::SELECT_HELD_ONE)
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
    tx: &mut PgConnection,
    tenant: &TenantId,
    contract: &Contract,
    resolution: &Resolution<'_>,
    now: i64,
) -> Result<(), StoreError> {
    let name = contract.name().as_str();
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
    Ok(())
}

async fn write_graph(
    tx: &mut PgConnection,
    tenant: &TenantId,
    graph: &GraphRows,
    now: i64,
) -> Result<(), StoreError> {
    let t = tenant.as_str();
    for (sql, rows) in [(INSERT_JOB, &graph.jobs), (INSERT_DATASET, &graph.datasets)] {
        for (namespace, name) in rows {
            sqlx::query(sql)
                .bind(t)
                .bind(namespace)
                .bind(name)
                .bind(now)
                .execute(&mut *tx)
                .await?;
        }
    }
    for (run_id, (namespace, name, event_id)) in &graph.runs {
        sqlx::query(INSERT_RUN)
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
            sqlx::query(sql)
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

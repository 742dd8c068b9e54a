//! The per-unit sums the experiment report reads: `unit_metrics`, one row per (unit,
//! metric), fed by `unit_metric_deltas`.
//!
//! On PostgreSQL the transactions that store outcomes, duplicates and corrections only
//! *append* their contribution to `unit_metric_deltas` (one row per unit and metric they
//! touch). No writer updates a shared row, so two batches naming the same units never
//! wait on each other's row locks: with the sums updated in place, every batch of a
//! campaign's busy units queued behind the previous one until it committed. SQLite has
//! one writer at a time, which never waits on a row: its outcome batches keep adding to
//! `unit_metrics` in place, and only corrections append there.
//!
//! [`Store::fold_unit_metrics`] moves the appended rows into `unit_metrics` (delete them,
//! add their sums per unit), in one statement on PostgreSQL and in one `BEGIN IMMEDIATE`
//! transaction on SQLite: a row is moved exactly once, or not at all, whoever folds
//! concurrently. `serve` folds in the background; [`Store::report_sums`] folds the
//! campaign it reads first, so a report always counts every outcome acknowledged before
//! it was asked for. The sums of both tables together always equal the recomputation
//! from the facts (`Store::report_sums_from_facts`).

use crate::tx::{with_pool, TxInner};
use crate::{CampaignId, Store, StoreError, TenantId};

/// The summed columns of both tables.
const SUMS: [&str; 8] = [
    "ev_n", "ev_v", "ev_dn", "ev_dv", "ar_n", "ar_v", "ar_dn", "ar_dv",
];

/// Whether a campaign has appended sums to fold.
pub(crate) const SELECT_PENDING: &str = "SELECT EXISTS (SELECT 1 FROM unit_metric_deltas
     WHERE tenant_id = $1 AND campaign_id = $2)";

/// Whether any campaign has appended sums to fold.
const SELECT_ANY_PENDING: &str = "SELECT EXISTS (SELECT 1 FROM unit_metric_deltas)";

/// Most appended rows one background fold transaction moves.
const FOLD_ROWS_MAX: i64 = 200_000;

/// Where a fold takes its rows from.
#[derive(Clone, Copy)]
enum Scope {
    /// One campaign's rows, all of them (`$1` tenant, `$2` campaign).
    Campaign,
    /// Any rows, at most `$1` of them (SQLite: all).
    Any,
}

/// The fold as SQL: PostgreSQL's one statement (returns the rows moved), or SQLite's
/// upsert and delete, run in one write transaction.
fn fold_sql(scope: Scope, postgres: bool) -> Vec<String> {
    let keys = "tenant_id, campaign_id, metric, assignment_id";
    let columns = format!("{keys}, arm, {}", SUMS.join(", "));
    let summed: Vec<String> = SUMS
        .iter()
        .map(|c| match c.ends_with('n') {
            true => format!("CAST(SUM({c}) AS BIGINT)"),
            false => format!("SUM({c})"),
        })
        .collect();
    let added: Vec<String> = SUMS
        .iter()
        .map(|c| format!("{c} = unit_metrics.{c} + excluded.{c}"))
        .collect();
    let upsert = |from: &str, filter: &str| {
        format!(
            "INSERT INTO unit_metrics ({columns})
             SELECT {keys}, MIN(arm), {} FROM {from} WHERE {filter}
             GROUP BY {keys} ORDER BY {keys}
             ON CONFLICT ({keys}) DO UPDATE SET {}",
            summed.join(", "),
            added.join(", ")
        )
    };
    if postgres {
        // Rows chosen by their physical address: PostgreSQL's TID scan visits a list of
        // them in address order, so two concurrent folds lock the rows they delete in
        // one order and cannot deadlock (they upsert in key order too).
        let chosen = match scope {
            Scope::Campaign => "tenant_id = $1 AND campaign_id = $2",
            Scope::Any => "true LIMIT $1",
        };
        let chosen =
            format!("ctid = ANY (ARRAY(SELECT ctid FROM unit_metric_deltas WHERE {chosen}))");
        let fold = format!(
            "WITH moved AS (DELETE FROM unit_metric_deltas WHERE {chosen} RETURNING {columns}),
             folded AS ({})
             SELECT COUNT(*) FROM moved",
            upsert("moved", "true")
        );
        return vec![fold];
    }
    let chosen = match scope {
        Scope::Campaign => "tenant_id = ?1 AND campaign_id = ?2",
        Scope::Any => "true",
    };
    vec![
        upsert("unit_metric_deltas", chosen),
        format!("DELETE FROM unit_metric_deltas WHERE {chosen}"),
    ]
}

impl Store {
    /// Moves appended per-unit sums into `unit_metrics` until none is left (at most
    /// `FOLD_ROWS_MAX` a transaction on PostgreSQL). Returns the rows moved. `serve` runs
    /// it periodically; the sums the report reads are the same before and after.
    pub async fn fold_unit_metrics(&self) -> Result<u64, StoreError> {
        // Nothing appended, no write transaction (on SQLite it would take the write lock).
        let pending: bool = with_pool!(self, reader, |pool| {
            sqlx::query_scalar(SELECT_ANY_PENDING)
                .fetch_one(pool)
                .await?
        });
        if !pending {
            return Ok(0);
        }
        let mut moved = 0;
        loop {
            let step = self.fold(Scope::Any, None).await?;
            moved += step;
            if step < FOLD_ROWS_MAX as u64 {
                return Ok(moved);
            }
        }
    }

    /// [`Store::fold_unit_metrics`] for one campaign, when it has appended rows (one
    /// indexed read otherwise): what the report runs before reading the sums.
    pub async fn fold_campaign_unit_metrics(
        &self,
        tenant: &TenantId,
        campaign_id: &CampaignId,
    ) -> Result<u64, StoreError> {
        let pending: bool = with_pool!(self, reader, |pool| {
            let query = sqlx::query_scalar(SELECT_PENDING)
                .bind(tenant.as_str())
                .bind(campaign_id.as_str());
            query.fetch_one(pool).await?
        });
        if !pending {
            return Ok(0);
        }
        self.fold(Scope::Campaign, Some((tenant, campaign_id)))
            .await
    }

    async fn fold(
        &self,
        scope: Scope,
        campaign: Option<(&TenantId, &CampaignId)>,
    ) -> Result<u64, StoreError> {
        let mut tx = self.begin().await?;
        let moved = match &mut tx.inner {
            TxInner::Postgres(conn) => {
                let mut moved = 0;
                for sql in fold_sql(scope, true) {
                    let query = sqlx::query_scalar::<_, i64>(&sql);
                    let query = match campaign {
                        Some((tenant, id)) => query.bind(tenant.as_str()).bind(id.as_str()),
                        None => query.bind(FOLD_ROWS_MAX),
                    };
                    moved = query.fetch_one(&mut **conn).await? as u64;
                }
                moved
            }
            TxInner::Sqlite(conn) => {
                let mut moved = 0;
                // The delete runs last: its count is the rows moved.
                for sql in fold_sql(scope, false) {
                    let query = sqlx::query(&sql);
                    let query = match campaign {
                        Some((tenant, id)) => query.bind(tenant.as_str()).bind(id.as_str()),
                        None => query,
                    };
                    moved = query.execute(&mut **conn).await?.rows_affected();
                }
                moved
            }
        };
        tx.commit().await?;
        Ok(moved)
    }
}

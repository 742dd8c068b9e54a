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

/// A campaign's rows only (the report's fold), or any rows (the background fold).
type Campaign<'a> = Option<(&'a TenantId, &'a CampaignId)>;

/// The key of a `unit_metrics` row.
const KEY: &str = "tenant_id, campaign_id, metric, assignment_id";

/// What makes an insert into `unit_metrics` add to the row already there: the fold's, and
/// SQLite's outcome batches' (`outcomes_batch.rs`).
pub(crate) fn add_to_existing_row() -> String {
    let added: Vec<String> = SUMS
        .iter()
        .map(|c| format!("{c} = unit_metrics.{c} + excluded.{c}"))
        .collect();
    format!("ON CONFLICT ({KEY}) DO UPDATE SET {}", added.join(", "))
}

/// The fold as SQL: PostgreSQL's one statement (returns the rows moved), or SQLite's
/// upsert and delete, run in one write transaction. A campaign's fold takes `$1` tenant
/// and `$2` campaign; PostgreSQL's background fold takes at most `$1` rows, SQLite's all.
fn fold_sql(campaign: bool, postgres: bool) -> Vec<String> {
    let columns = format!("{KEY}, arm, {}", SUMS.join(", "));
    let summed: Vec<String> = SUMS
        .iter()
        .map(|c| match c.ends_with('n') {
            true => format!("CAST(SUM({c}) AS BIGINT)"),
            false => format!("SUM({c})"),
        })
        .collect();
    let upsert = |from: &str, filter: &str| {
        format!(
            "INSERT INTO unit_metrics ({columns})
             SELECT {KEY}, MIN(arm), {} FROM {from} WHERE {filter}
             GROUP BY {KEY} ORDER BY {KEY}
             {}",
            summed.join(", "),
            add_to_existing_row()
        )
    };
    if postgres {
        // Rows chosen by their physical address: PostgreSQL's TID scan visits a list of
        // them in address order, so two concurrent folds lock the rows they delete in
        // one order and cannot deadlock (they upsert in key order too).
        let chosen = match campaign {
            true => "tenant_id = $1 AND campaign_id = $2",
            false => "true LIMIT $1",
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
    let chosen = match campaign {
        true => "tenant_id = ?1 AND campaign_id = ?2",
        false => "true",
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
        let mut moved = 0;
        while self.pending(None).await? {
            let step = self.fold(None).await?;
            moved += step;
            if step < FOLD_ROWS_MAX as u64 {
                break;
            }
        }
        Ok(moved)
    }

    /// [`Store::fold_unit_metrics`] for one campaign, when it has appended rows (one
    /// indexed read otherwise): what the report runs before reading the sums.
    pub async fn fold_campaign_unit_metrics(
        &self,
        tenant: &TenantId,
        campaign_id: &CampaignId,
    ) -> Result<u64, StoreError> {
        let campaign = Some((tenant, campaign_id));
        if !self.pending(campaign).await? {
            return Ok(0);
        }
        self.fold(campaign).await
    }

    /// Whether there are appended rows to fold: read before a fold, so nothing appended
    /// costs no write transaction (on SQLite it would take the write lock).
    async fn pending(&self, campaign: Campaign<'_>) -> Result<bool, StoreError> {
        with_pool!(self, reader, |pool| {
            let query = match campaign {
                Some((tenant, id)) => sqlx::query_scalar(SELECT_PENDING)
                    .bind(tenant.as_str())
                    .bind(id.as_str()),
                None => sqlx::query_scalar(SELECT_ANY_PENDING),
            };
            Ok(query.fetch_one(pool).await?)
        })
    }

    async fn fold(&self, campaign: Campaign<'_>) -> Result<u64, StoreError> {
        let mut tx = self.begin().await?;
        let moved = match &mut tx.inner {
            TxInner::Postgres(conn) => {
                let mut moved = 0;
                for sql in fold_sql(campaign.is_some(), true) {
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
                for sql in fold_sql(campaign.is_some(), false) {
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

//! Experiments: sticky assignments, deduplicated outcomes with every suppressed duplicate
//! recorded, and the one-pass aggregates the report is computed from.

use std::collections::HashMap;

use serde::Serialize;
use sqlx::Row;

use crate::tx::{with_bounded_read, with_pool, with_tx};
use crate::{Store, StoreError, TenantId};

pub use traqlyte_experiments::report::{DuplicatesInBucket, UnitsByVersion};
pub use traqlyte_experiments::{AssignmentId, CampaignId, DedupeKey, UnitId};

/// A unit's assignment to an arm. Never updated once written.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Assignment {
    /// The assignment (`asg_…`).
    #[sqlx(try_from = "String")]
    pub assignment_id: AssignmentId,
    /// The campaign (`cmp_…`).
    #[sqlx(try_from = "String")]
    pub campaign_id: CampaignId,
    /// The unit the client names (a user, a device…).
    #[sqlx(try_from = "String")]
    pub unit_id: UnitId,
    /// The arm's key.
    pub arm: String,
    /// The contract version.
    pub version: i64,
    /// When it was assigned, microseconds since the epoch.
    pub assigned_at_us: i64,
}

/// Largest accepted `|value|` of an outcome (1e15: a trillion currency units with three
/// decimals to spare, and every integer up to it is exact in a double).
///
/// Why it keeps every sum finite: per-unit sums are built from at most 2^63 rows (the
/// `BIGINT` counts beside them), so `|Σ value| ≤ 2^63 · 1e15 < 1e35`, and the report's
/// largest term, a sum over units of squared per-unit totals, stays below
/// `(2^64 · 1e15)² < 1e69` (duplicates included), far inside `f64::MAX ≈ 1.8e308`. Without
/// the bound one value near 1.7e308 overflowed PostgreSQL's `double precision` arithmetic
/// (an error, so a 500) and made SQLite's sums infinite. The server refuses larger values.
pub const OUTCOME_VALUE_ABS_MAX: f64 = 1e15;

/// Per-unit value sums beyond this are taken as out of range by the report's aggregate
/// (its value figures become unavailable instead of failing the query). Data accepted
/// under [`OUTCOME_VALUE_ABS_MAX`] never gets near it (see there); only rows stored before
/// the bound existed can. Squares of it summed over 2^64 units stay finite (< 1e220).
pub const UNIT_VALUE_ABS_MAX: f64 = 1e100;

/// A validated outcome to record.
#[derive(Debug, Clone)]
pub struct NewOutcome {
    /// The assignment it belongs to.
    pub assignment: Assignment,
    /// The caller's business key, unique per assignment.
    pub dedupe_key: DedupeKey,
    /// The metric's name.
    pub metric: String,
    /// The value, for sum metrics.
    pub value: Option<f64>,
    /// When it happened (event time), microseconds since the epoch.
    pub occurred_at_us: i64,
    /// The metric's window (the same for event and arrival time).
    pub window_us: i64,
    /// Hash of the payload (metric, value, event time): equal means a retry.
    pub fingerprint: String,
    /// The request item as received, for the collision log.
    pub payload: String,
}

/// A stored outcome: the answer to every delivery of it.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct StoredOutcome {
    /// The assignment (`asg_…`).
    #[sqlx(try_from = "String")]
    pub assignment_id: AssignmentId,
    /// The caller's business key, unique per assignment.
    #[sqlx(try_from = "String")]
    pub dedupe_key: DedupeKey,
    /// The campaign (`cmp_…`).
    #[sqlx(try_from = "String")]
    pub campaign_id: CampaignId,
    /// The arm's key.
    pub arm: String,
    /// The metric's name.
    pub metric: String,
    /// The value, for sum metrics.
    pub value: Option<f64>,
    /// When it happened (event time), microseconds since the epoch.
    pub occurred_at_us: i64,
    /// When the server received it, microseconds since the epoch.
    pub received_at_us: i64,
    /// SHA-256 (hex) of the payload without transport fields.
    pub fingerprint: String,
}

/// What happened to one outcome.
#[derive(Debug, Clone, PartialEq)]
pub enum OutcomeResult {
    /// New row.
    Inserted(StoredOutcome),
    /// A retry: counted in `outcome_duplicates`, the stored row returned.
    Duplicate(StoredOutcome),
    /// Same (assignment, dedupe key), different payload: logged, nothing overwritten.
    Collision(StoredOutcome),
}

pub use traqlyte_experiments::report::SumsByVersion;
pub use traqlyte_experiments::{MetricArmSums, WindowSums};

/// A metric and its window, for [`Store::report_sums`].
#[derive(Debug, Clone)]
pub struct MetricWindow {
    /// The metric's name.
    pub metric: String,
    /// The metric's window, in microseconds.
    pub window_us: i64,
}

const SELECT_ASSIGNMENT: &str = "SELECT assignment_id, campaign_id, unit_id, arm,
       CAST(version AS BIGINT) AS version, assigned_at_us
     FROM assignments WHERE tenant_id = $1 AND assignment_id = $2";

const SELECT_ASSIGNMENTS_IN: &str = "SELECT assignment_id, campaign_id, unit_id, arm,
       CAST(version AS BIGINT) AS version, assigned_at_us
     FROM assignments WHERE tenant_id = ? AND assignment_id IN";

const SELECT_UNITS_BY_VERSION: &str =
    "SELECT CAST(version AS BIGINT) AS version, arm, COUNT(*) AS units
     FROM assignments WHERE tenant_id = $1 AND campaign_id = $2 GROUP BY version, arm";

/// The newest `$4` (bucket, arm) rows, oldest first: a cap must cut the oldest hours,
/// never the rising duplicate rate of today.
const SELECT_DUPLICATES_OVER_TIME: &str = "SELECT bucket_start_us, arm, duplicates FROM (
         SELECT (arrived_at_us / $3) * $3 AS bucket_start_us, arm, COUNT(*) AS duplicates
         FROM outcome_duplicates WHERE tenant_id = $1 AND campaign_id = $2{version}
         GROUP BY bucket_start_us, arm ORDER BY bucket_start_us DESC, arm{bytes} DESC LIMIT $4
     ) newest ORDER BY bucket_start_us, arm{bytes}";

/// Logged outcome collisions of a campaign per (metric, arm), summed over its versions:
/// one read of `outcome_collision_counts` by its primary key's prefix, kept in step by the
/// transactions that log collisions (`outcomes_batch.rs`, migration `0027`), never a
/// pass over the log itself, which grows without bound (`tests/it/plans.rs`).
pub const SELECT_COLLISIONS: &str =
    "SELECT metric, arm, CAST(SUM(collisions) AS BIGINT) AS collisions
     FROM outcome_collision_counts WHERE tenant_id = $1 AND campaign_id = $2
     GROUP BY metric, arm";

/// [`SELECT_COLLISIONS`] of the units assigned under one version (`$3`).
pub const SELECT_COLLISIONS_OF_VERSION: &str = "SELECT metric, arm, collisions
     FROM outcome_collision_counts WHERE tenant_id = $1 AND campaign_id = $2 AND version = $3";

impl Store {
    /// An assignment by id.
    pub async fn assignment(
        &self,
        tenant: &TenantId,
        assignment_id: &AssignmentId,
    ) -> Result<Option<Assignment>, StoreError> {
        with_pool!(self, reader, |pool| {
            let query = sqlx::query_as(SELECT_ASSIGNMENT)
                .bind(tenant.as_str())
                .bind(assignment_id.as_str());
            Ok(query.fetch_optional(pool).await?)
        })
    }

    /// The tenant's assignments among `ids`, in one statement (ids naming nothing are
    /// left out; the order is unspecified).
    pub async fn assignments_by_id(
        &self,
        tenant: &TenantId,
        ids: &[AssignmentId],
    ) -> Result<Vec<Assignment>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let texts: Vec<&str> = ids.iter().map(AssignmentId::as_str).collect();
        match &self.backend {
            crate::Backend::Postgres(pg) => {
                crate::assignments_batch::pg_assigned(&pg.pool, tenant, &texts).await
            }
            crate::Backend::Sqlite(lite) => {
                let sql = format!(
                    "{SELECT_ASSIGNMENTS_IN} ({})",
                    vec!["?"; texts.len()].join(",")
                );
                let mut query = sqlx::query_as(&sql).bind(tenant.as_str());
                for id in &texts {
                    query = query.bind(*id);
                }
                Ok(query.fetch_all(&lite.reader).await?)
            }
        }
    }

    /// Units per (version, arm) of a campaign.
    pub async fn units_by_version(
        &self,
        tenant: &TenantId,
        campaign_id: &CampaignId,
    ) -> Result<Vec<UnitsByVersion>, StoreError> {
        with_bounded_read!(self, |pool| {
            let query = sqlx::query_as(SELECT_UNITS_BY_VERSION)
                .bind(tenant.as_str())
                .bind(campaign_id.as_str());
            let rows: Vec<UnitsRow> = query.fetch_all(pool).await?;
            Ok(rows
                .into_iter()
                .map(|r| UnitsByVersion {
                    version: r.version,
                    arm: r.arm,
                    units: r.units,
                })
                .collect())
        })
    }

    /// Suppressed duplicates per (arrival bucket, arm), oldest first: the newest
    /// `rows_max` of them (with `version`, of the units assigned under it).
    pub async fn duplicates_over_time(
        &self,
        tenant: &TenantId,
        campaign_id: &CampaignId,
        version: Option<i64>,
        bucket_us: i64,
        rows_max: i64,
    ) -> Result<Vec<DuplicatesInBucket>, StoreError> {
        let sql = self
            .in_byte_order(&SELECT_DUPLICATES_OVER_TIME.replace("{version}", &of_version(version)));
        with_bounded_read!(self, |pool| {
            let query = sqlx::query_as(&sql)
                .bind(tenant.as_str())
                .bind(campaign_id.as_str())
                .bind(bucket_us)
                .bind(rows_max);
            let rows: Vec<BucketRow> = query.fetch_all(pool).await?;
            Ok(rows
                .into_iter()
                .map(|r| DuplicatesInBucket {
                    bucket_start_us: r.bucket_start_us,
                    arm: r.arm,
                    duplicates: r.duplicates,
                })
                .collect())
        })
    }

    /// Logged outcome collisions per `(metric, arm)` of a campaign (with `version`, of the
    /// units assigned under it), read from the counts kept as they are logged: each
    /// delivery that met a stored outcome with a different payload, counted against that
    /// outcome's metric and arm. Pairs without any are absent.
    pub async fn outcome_collisions_per_arm(
        &self,
        tenant: &TenantId,
        campaign_id: &CampaignId,
        version: Option<i64>,
    ) -> Result<HashMap<(String, String), u64>, StoreError> {
        let sql = match version {
            None => SELECT_COLLISIONS,
            Some(_) => SELECT_COLLISIONS_OF_VERSION,
        };
        with_pool!(self, reader, |pool| {
            let mut query = sqlx::query_as(sql)
                .bind(tenant.as_str())
                .bind(campaign_id.as_str());
            if let Some(version) = version {
                query = query.bind(version);
            }
            let rows: Vec<CollisionsRow> = query.fetch_all(pool).await?;
            Ok(rows
                .into_iter()
                .map(|r| ((r.metric, r.arm), u64::try_from(r.collisions).unwrap_or(0)))
                .collect())
        })
    }

    /// Per (metric, arm) sums for the report, read from the per-unit table fed by every
    /// outcome: one row per (unit, metric), not one per outcome. The campaign's appended
    /// sums are folded in first (`unit_metrics.rs`), so every outcome acknowledged
    /// before this call is counted.
    /// With `version`, only the units assigned under that campaign version count.
    pub async fn report_sums(
        &self,
        tenant: &TenantId,
        campaign_id: &CampaignId,
        version: Option<i64>,
    ) -> Result<HashMap<(String, String), MetricArmSums>, StoreError> {
        self.fold_campaign_unit_metrics(tenant, campaign_id).await?;
        let sql = format!(
            "SELECT metric, arm, {} FROM unit_metrics WHERE tenant_id = $1 AND campaign_id = $2{} GROUP BY metric, arm",
            per_arm_columns(),
            of_version(version)
        );
        self.read_sums(&sql, tenant, campaign_id, &[]).await
    }

    /// [`Store::report_sums`] per version the units were assigned under: sums per
    /// `(version, metric, arm)`, for a report whose weights changed between versions.
    /// Folds the campaign's pending per-unit deltas first, as [`Store::report_sums`] does.
    pub async fn report_sums_by_version(
        &self,
        tenant: &TenantId,
        campaign_id: &CampaignId,
    ) -> Result<SumsByVersion, StoreError> {
        self.fold_campaign_unit_metrics(tenant, campaign_id).await?;
        let sql = format!(
            "SELECT CAST(a.version AS BIGINT), u.metric, u.arm, {} FROM unit_metrics u
             JOIN assignments a ON a.tenant_id = u.tenant_id AND a.campaign_id = u.campaign_id
               AND a.assignment_id = u.assignment_id
             WHERE u.tenant_id = $1 AND u.campaign_id = $2 GROUP BY a.version, u.metric, u.arm",
            per_arm_columns()
        );
        with_bounded_read!(self, |pool| {
            let rows = sqlx::query(&sql)
                .bind(tenant.as_str())
                .bind(campaign_id.as_str())
                .fetch_all(pool)
                .await?;
            let mut out = HashMap::new();
            for row in rows {
                let key: (i64, String, String) =
                    (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
                out.insert(key, arm_sums(&row, 3)?);
            }
            Ok(out)
        })
    }

    /// The same sums recomputed from the facts (outcomes and duplicates) in one pass: the
    /// reference `report_sums` must always equal, checked by the tests.
    pub async fn report_sums_from_facts(
        &self,
        tenant: &TenantId,
        campaign_id: &CampaignId,
        metrics: &[MetricWindow],
    ) -> Result<HashMap<(String, String), MetricArmSums>, StoreError> {
        if metrics.is_empty() {
            return Ok(HashMap::new());
        }
        let sql = format!(
            "SELECT metric, arm, {} FROM ({}) u GROUP BY metric, arm",
            per_arm_columns(),
            per_unit_sql(metrics)
        );
        self.read_sums(&sql, tenant, campaign_id, metrics).await
    }

    /// Rebuilds a campaign's per-unit sums from the facts (after a bulk load or a repair).
    /// Safe while outcomes are being written: on PostgreSQL the transaction first locks
    /// `unit_metric_deltas` against writers (`SHARE ROW EXCLUSIVE`), so an outcome is
    /// either in the facts it reads and its delta among those it deletes (its writer
    /// committed first), or in neither (its writer's delta waits for this commit and is
    /// folded afterwards). Without the lock each statement's own snapshot let an outcome
    /// committed between the `DELETE` and the `INSERT … SELECT` be counted twice.
    pub async fn rebuild_unit_metrics(
        &self,
        tenant: &TenantId,
        campaign_id: &CampaignId,
        metrics: &[MetricWindow],
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        if let crate::tx::TxInner::Postgres(conn) = &mut tx.inner {
            sqlx::query("LOCK TABLE unit_metric_deltas IN SHARE ROW EXCLUSIVE MODE")
                .execute(&mut **conn)
                .await?;
        }
        let insert = format!(
            "INSERT INTO unit_metrics (tenant_id, campaign_id, metric, assignment_id, arm, ev_n, ev_v, ev_dn, ev_dv, ar_n, ar_v, ar_dn, ar_dv)
             SELECT $1, $2, metric, assignment_id, arm, ev_n, ev_v, ev_dn, ev_dv, ar_n, ar_v, ar_dn, ar_dv FROM ({}) u",
            per_unit_sql(metrics)
        );
        with_tx!(tx, |conn| {
            for table in ["unit_metrics", "unit_metric_deltas"] {
                sqlx::query(&format!(
                    "DELETE FROM {table} WHERE tenant_id = $1 AND campaign_id = $2"
                ))
                .bind(tenant.as_str())
                .bind(campaign_id.as_str())
                .execute(&mut *conn)
                .await?;
            }
            let mut query = sqlx::query(&insert)
                .bind(tenant.as_str())
                .bind(campaign_id.as_str());
            for m in metrics {
                query = query.bind(&m.metric);
            }
            query.execute(&mut *conn).await?;
        });
        tx.commit().await
    }

    async fn read_sums(
        &self,
        sql: &str,
        tenant: &TenantId,
        campaign_id: &CampaignId,
        metrics: &[MetricWindow],
    ) -> Result<HashMap<(String, String), MetricArmSums>, StoreError> {
        with_bounded_read!(self, |pool| {
            let mut query = sqlx::query(sql)
                .bind(tenant.as_str())
                .bind(campaign_id.as_str());
            for m in metrics {
                query = query.bind(&m.metric);
            }
            let rows = query.fetch_all(pool).await?;
            let mut out = HashMap::new();
            for row in rows {
                let key: (String, String) = (row.try_get(0)?, row.try_get(1)?);
                out.insert(key, arm_sums(&row, 2)?);
            }
            Ok(out)
        })
    }
}

/// The [`per_arm_columns`] of a row, from column `base` on.
fn arm_sums<R>(row: &R, base: usize) -> Result<MetricArmSums, StoreError>
where
    R: sqlx::Row,
    usize: sqlx::ColumnIndex<R>,
    for<'r> Option<f64>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    let f = |i: usize| -> Result<f64, StoreError> {
        Ok(row.try_get::<Option<f64>, _>(i)?.unwrap_or(0.0))
    };
    // A value column is NULL only when a per-unit value is out of range (see
    // `per_arm_columns`): read as infinite, which the report shows as unavailable.
    let v = |i: usize| -> Result<f64, StoreError> {
        Ok(row.try_get::<Option<f64>, _>(i)?.unwrap_or(f64::INFINITY))
    };
    let window = |base: usize| -> Result<WindowSums, StoreError> {
        Ok(WindowSums {
            units_with_events: f(base)?,
            events: f(base + 1)?,
            events_sq: f(base + 2)?,
            value: v(base + 3)?,
            value_sq: v(base + 4)?,
            duplicates: f(base + 5)?,
            duplicate_value: v(base + 6)?,
            naive_events_sq: f(base + 7)?,
            naive_value_sq: v(base + 8)?,
        })
    };
    Ok(MetricArmSums {
        event_time: window(base)?,
        arrival_time: window(base + 9)?,
    })
}

/// The condition that keeps a campaign's rows (of a table with an `assignment_id`
/// column, `$1` the tenant and `$2` the campaign) to the units assigned under `version`:
/// nothing without one. The version is written into the SQL as a number: a report of the whole
/// campaign keeps its own plan, with no subquery that a generic plan would have to run.
pub(crate) fn of_version(version: Option<i64>) -> String {
    match version {
        None => String::new(),
        Some(version) => format!(
            " AND assignment_id IN (SELECT assignment_id FROM assignments
                 WHERE tenant_id = $1 AND campaign_id = $2 AND version = {version})"
        ),
    }
}

/// A row of [`SELECT_UNITS_BY_VERSION`].
#[derive(sqlx::FromRow)]
struct UnitsRow {
    version: i64,
    arm: String,
    units: i64,
}

/// A row of [`SELECT_COLLISIONS`] and [`SELECT_COLLISIONS_OF_VERSION`].
#[derive(sqlx::FromRow)]
struct CollisionsRow {
    metric: String,
    arm: String,
    collisions: i64,
}

/// A row of [`SELECT_DUPLICATES_OVER_TIME`].
#[derive(sqlx::FromRow)]
struct BucketRow {
    bucket_start_us: i64,
    arm: String,
    duplicates: i64,
}

/// Per-arm sums over per-unit rows (`ev_*`/`ar_*` columns), both windows.
///
/// The value columns are guarded so that no stored row can make the aggregate fail: a
/// per-unit value beyond [`UNIT_VALUE_ABS_MAX`] (only possible in rows stored before
/// values were bounded) is left out of the arithmetic, and the column is `NULL` for the
/// whole arm, which [`Store::report_sums`] reads as an infinite (unavailable) sum. Without
/// the guard PostgreSQL raised "value out of range: overflow" (a 500, for good) where
/// SQLite summed to infinity; now both give the same answer.
fn per_arm_columns() -> String {
    let per_arm = |p: &str| {
        let d = |e: String| format!("CAST(SUM({e}) AS DOUBLE PRECISION)");
        let guarded = |e: String, parts: &[String]| {
            let out_of_range: Vec<String> = parts
                .iter()
                .map(|x| format!("ABS({x}) > {UNIT_VALUE_ABS_MAX:e}"))
                .collect();
            let any = out_of_range.join(" OR ");
            format!(
                "CASE WHEN SUM(CASE WHEN {any} THEN 1 ELSE 0 END) > 0 THEN NULL ELSE {} END",
                d(format!("CASE WHEN {any} THEN 0 ELSE {e} END"))
            )
        };
        let (v, dv) = (format!("{p}_v"), format!("{p}_dv"));
        let both = [v.clone(), dv.clone()];
        [
            d(format!("CASE WHEN {p}_n > 0 THEN 1 ELSE 0 END")),
            d(format!("{p}_n")),
            // Squared as doubles: a BIGINT square overflows past about 3.04e9.
            d(format!("CAST({p}_n AS DOUBLE PRECISION) * {p}_n")),
            guarded(v.clone(), &both),
            guarded(format!("{v} * {v}"), &both),
            d(format!("{p}_dn")),
            guarded(dv.clone(), &both),
            d(format!(
                "CAST({p}_n + {p}_dn AS DOUBLE PRECISION) * ({p}_n + {p}_dn)"
            )),
            guarded(format!("({v} + {dv}) * ({v} + {dv})"), &both),
        ]
        .join(", ")
    };
    format!("{}, {}", per_arm("ev"), per_arm("ar"))
}

/// A stored outcome's current value: its newest correction's, else its own
/// (`outcome_corrections.rs`). Duplicates keep the value they were delivered with: they
/// stand for what a pipeline without dedupe counted.
const CURRENT_VALUE: &str = "CASE WHEN EXISTS (SELECT 1 FROM outcome_supersessions s
       WHERE s.tenant_id = outcomes.tenant_id AND s.outcome_id = outcomes.outcome_id)
     THEN (SELECT s.value FROM outcome_supersessions s
       WHERE s.tenant_id = outcomes.tenant_id AND s.outcome_id = outcomes.outcome_id
       ORDER BY s.seq DESC LIMIT 1)
     ELSE value END";

/// Per (metric, arm, unit) sums recomputed from outcomes and duplicates. Windows are
/// inlined as integer literals (they come from validated campaign definitions, never from
/// a request); metric names are bound as `$3…`.
fn per_unit_sql(metrics: &[MetricWindow]) -> String {
    let window = {
        let arms: Vec<String> = metrics
            .iter()
            .enumerate()
            .map(|(i, m)| format!("WHEN ${} THEN {}", i + 3, m.window_us))
            .collect();
        format!("CASE metric {} ELSE -1 END", arms.join(" "))
    };
    let names: Vec<String> = (0..metrics.len()).map(|i| format!("${}", i + 3)).collect();
    let sums = |p: &str, flag: &str| {
        format!(
            "SUM(CASE WHEN stored = 1 AND {flag} = 1 THEN 1 ELSE 0 END) AS {p}_n,
             SUM(CASE WHEN stored = 1 AND {flag} = 1 THEN COALESCE(value, 0) ELSE 0 END) AS {p}_v,
             SUM(CASE WHEN stored = 0 AND {flag} = 1 THEN 1 ELSE 0 END) AS {p}_dn,
             SUM(CASE WHEN stored = 0 AND {flag} = 1 THEN COALESCE(value, 0) ELSE 0 END) AS {p}_dv"
        )
    };
    let source = |table: &str, stored: u8, arrival: &str, value: &str| {
        format!(
            "SELECT metric, arm, assignment_id, {value} AS value, {stored} AS stored,
                    CASE WHEN occurred_at_us - assigned_at_us BETWEEN 0 AND {window} THEN 1 ELSE 0 END AS ev_in,
                    CASE WHEN {arrival} - assigned_at_us BETWEEN 0 AND {window} THEN 1 ELSE 0 END AS ar_in
             FROM {table} WHERE tenant_id = $1 AND campaign_id = $2 AND metric IN ({})",
            names.join(", ")
        )
    };
    format!(
        "SELECT metric, arm, assignment_id, {}, {} FROM ({} UNION ALL {}) x GROUP BY metric, arm, assignment_id",
        sums("ev", "ev_in"),
        sums("ar", "ar_in"),
        source("outcomes", 1, "received_at_us", CURRENT_VALUE),
        source("outcome_duplicates", 0, "arrived_at_us", "value"),
    )
}

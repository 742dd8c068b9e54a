//! Corrections of outcomes by explicit supersession, as events have them
//! (`supersessions.rs`): the stored outcome is never rewritten; each correction is a new
//! row of `outcome_supersessions` naming the value it replaces, numbered per outcome
//! (`seq`), and the newest one is the outcome's current value. A plain re-send of a
//! different value under the same dedupe key stays a collision: only this explicit path
//! corrects.
//!
//! The per-unit sums the report reads are adjusted in the same transaction (a row
//! appended to `unit_metric_deltas`, see `unit_metrics.rs`) by the difference between
//! the new and the current value, in each window (event time, arrival time) the outcome
//! falls into, so they stay equal to their recomputation from the facts
//! (`Store::report_sums_from_facts`, which reads the current value). On PostgreSQL the outcome's row is locked first (`FOR UPDATE`, a lock, not a
//! write), so two concurrent corrections of one outcome take turns; SQLite's write
//! transactions already do.

use traqlyte_experiments::{outcome_id, DedupeKey, OutcomeId};

use crate::experiments::StoredOutcome;
use crate::tx::{with_bounded_read, with_pool, with_tx, TxInner};
use crate::{AssignmentId, CampaignId, Store, StoreError, StoreTx, TenantId};

/// One stored correction of an outcome.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct OutcomeCorrection {
    /// Its number among the outcome's corrections, from 1.
    pub seq: i64,
    /// The corrected value.
    pub value: Option<f64>,
    /// The value it replaced (the original's, or the previous correction's).
    pub supersedes_value: Option<f64>,
    /// Why it was corrected.
    pub reason: String,
    /// When the correction was stored, microseconds since the epoch.
    pub superseded_at_us: i64,
}

/// The most corrections one outcome may have: `GET /outcomes/{outcome_id}` answers them
/// all, so an unbounded history would grow an answer without end. Real corrections of
/// one outcome (a refund, a fixed amount) are a handful.
pub const CORRECTIONS_PER_OUTCOME_MAX: i64 = 100;

/// What a correction did.
#[derive(Debug, Clone, PartialEq)]
pub enum CorrectionResult {
    /// Stored: the outcome's new current value.
    Superseded(OutcomeCorrection),
    /// The value already is the current one: nothing written.
    Unchanged,
    /// The caller's precondition failed: the newest correction is not the one it named
    /// (another correction came first). Nothing written.
    Stale {
        /// The newest correction's number (0: none).
        seq: i64,
        /// The current value.
        value: Option<f64>,
    },
    /// The outcome already has [`CORRECTIONS_PER_OUTCOME_MAX`] corrections. Nothing written.
    LimitReached,
}

/// A stored outcome with its corrections, oldest first.
#[derive(Debug, Clone, PartialEq)]
pub struct OutcomeHistory {
    /// The outcome as first stored.
    pub outcome: StoredOutcome,
    /// When its unit was assigned, microseconds since the epoch.
    pub assigned_at_us: i64,
    /// Its corrections, oldest first; the last is its current value.
    pub corrections: Vec<OutcomeCorrection>,
}

impl OutcomeHistory {
    /// The current value: the newest correction's, else the original's.
    pub fn current_value(&self) -> Option<f64> {
        self.corrections
            .last()
            .map_or(self.outcome.value, |c| c.value)
    }
}

/// The id of an outcome stored under `tenant`, as every answer names it.
pub fn stored_outcome_id(tenant: &TenantId, outcome: &StoredOutcome) -> OutcomeId {
    outcome_id(
        tenant.as_str(),
        &outcome.campaign_id,
        &outcome.assignment_id,
        &outcome.dedupe_key,
    )
}

/// A row of [`SELECT_OUTCOME`].
#[derive(sqlx::FromRow)]
struct OutcomeRow {
    #[sqlx(flatten)]
    outcome: StoredOutcome,
    assigned_at_us: i64,
}

const SELECT_OUTCOME: &str = "SELECT assignment_id, dedupe_key, campaign_id, arm, metric, value,
       occurred_at_us, received_at_us, fingerprint, assigned_at_us
     FROM outcomes WHERE tenant_id = $1 AND outcome_id = $2";

const SELECT_CORRECTIONS: &str =
    "SELECT CAST(seq AS BIGINT) AS seq, value, supersedes_value, reason, superseded_at_us
     FROM outcome_supersessions WHERE tenant_id = $1 AND outcome_id = $2
     ORDER BY outcome_supersessions.seq";

/// The newest correction alone: a correction needs only the current value and the next
/// sequence number, not the outcome's whole history (which no bound limits), read under
/// the outcome's lock.
const SELECT_LATEST_CORRECTION: &str =
    "SELECT CAST(seq AS BIGINT) AS seq, value, supersedes_value, reason, superseded_at_us
     FROM outcome_supersessions WHERE tenant_id = $1 AND outcome_id = $2
     ORDER BY outcome_supersessions.seq DESC LIMIT 1";

const INSERT_CORRECTION: &str = "INSERT INTO outcome_supersessions
     (tenant_id, outcome_id, seq, campaign_id, value, supersedes_value, reason, superseded_at_us)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

/// The correction's difference to its unit's sums, appended like an outcome's
/// (`outcomes_batch.rs`, folded by `fold_unit_metrics`).
const ADJUST_UNIT_METRICS: &str = "INSERT INTO unit_metric_deltas
     (tenant_id, campaign_id, metric, assignment_id, arm, ev_v, ar_v) VALUES ($1, $2, $3, $4, $5, $6, $7)";

const COUNT_CORRECTED: &str = "SELECT COUNT(DISTINCT outcome_id) FROM outcome_supersessions
     WHERE tenant_id = $1 AND campaign_id = $2";

/// Rows without an outcome id (stored before migration `0015`), a batch at a time
/// (SQLite), through the partial index `outcomes_missing_id` (migration `0035`).
pub(crate) const SELECT_MISSING_IDS: &str =
    "SELECT tenant_id, campaign_id, assignment_id, dedupe_key
     FROM outcomes WHERE outcome_id IS NULL LIMIT 1000";

const SET_OUTCOME_ID: &str = "UPDATE outcomes SET outcome_id = $4
     WHERE tenant_id = $1 AND assignment_id = $2 AND dedupe_key = $3 AND outcome_id IS NULL";

impl StoreTx {
    /// Supersedes the value of the tenant's outcome `id` with `value`; `None` when no such
    /// outcome is stored. `window_us` is its metric's window (for the per-unit sums),
    /// `now_us` the correction's time. With `expected_seq`, only when the newest
    /// correction is that one (0: none yet), else [`CorrectionResult::Stale`].
    pub async fn supersede_outcome(
        &mut self,
        tenant: &TenantId,
        id: &OutcomeId,
        value: Option<f64>,
        reason: &str,
        (window_us, now_us): (i64, i64),
        expected_seq: Option<i64>,
    ) -> Result<Option<CorrectionResult>, StoreError> {
        let lock = match self.inner {
            TxInner::Sqlite(_) => SELECT_OUTCOME.to_string(),
            TxInner::Postgres(_) => format!("{SELECT_OUTCOME} FOR UPDATE"),
        };
        let row: Option<OutcomeRow> = with_tx!(self, |conn| {
            let query = sqlx::query_as(&lock)
                .bind(tenant.as_str())
                .bind(id.as_str());
            query.fetch_optional(&mut *conn).await?
        });
        let Some(row) = row else {
            return Ok(None);
        };
        let latest: Option<OutcomeCorrection> = with_tx!(self, |conn| {
            let query = sqlx::query_as(SELECT_LATEST_CORRECTION)
                .bind(tenant.as_str())
                .bind(id.as_str());
            query.fetch_optional(&mut *conn).await?
        });
        // The history's last entry is all that is read from it below.
        let history = OutcomeHistory {
            outcome: row.outcome,
            assigned_at_us: row.assigned_at_us,
            corrections: latest.into_iter().collect(),
        };
        let current = history.current_value();
        if current == value {
            return Ok(Some(CorrectionResult::Unchanged));
        }
        // Checked after `Unchanged`: a retry of a correction that was stored (its answer
        // lost) finds its own value current and is answered as such, not refused.
        let latest_seq = history.corrections.last().map_or(0, |c| c.seq);
        if expected_seq.is_some_and(|expected| expected != latest_seq) {
            return Ok(Some(CorrectionResult::Stale {
                seq: latest_seq,
                value: current,
            }));
        }
        // Sequence numbers count from 1 without gaps (each is the latest's plus one).
        if latest_seq >= CORRECTIONS_PER_OUTCOME_MAX {
            return Ok(Some(CorrectionResult::LimitReached));
        }
        let correction = OutcomeCorrection {
            seq: history.corrections.last().map_or(1, |c| c.seq + 1),
            value,
            supersedes_value: current,
            reason: reason.to_string(),
            superseded_at_us: now_us,
        };
        let outcome = &history.outcome;
        let delta = value.unwrap_or(0.0) - current.unwrap_or(0.0);
        let within = |at: i64| (0..=window_us).contains(&(at - history.assigned_at_us));
        let (ev, ar) = (
            if within(outcome.occurred_at_us) {
                delta
            } else {
                0.0
            },
            if within(outcome.received_at_us) {
                delta
            } else {
                0.0
            },
        );
        with_tx!(self, |conn| {
            sqlx::query(INSERT_CORRECTION)
                .bind(tenant.as_str())
                .bind(id.as_str())
                .bind(correction.seq)
                .bind(outcome.campaign_id.as_str())
                .bind(correction.value)
                .bind(correction.supersedes_value)
                .bind(&correction.reason)
                .bind(correction.superseded_at_us)
                .execute(&mut *conn)
                .await?;
            sqlx::query(ADJUST_UNIT_METRICS)
                .bind(tenant.as_str())
                .bind(outcome.campaign_id.as_str())
                .bind(&outcome.metric)
                .bind(outcome.assignment_id.as_str())
                .bind(&outcome.arm)
                .bind(ev)
                .bind(ar)
                .execute(&mut *conn)
                .await?;
        });
        Ok(Some(CorrectionResult::Superseded(correction)))
    }
}

impl Store {
    /// The tenant's outcome `id` without its corrections, if stored (what a correction
    /// checks before its transaction: the history can be long).
    pub async fn outcome_by_id(
        &self,
        tenant: &TenantId,
        id: &OutcomeId,
    ) -> Result<Option<StoredOutcome>, StoreError> {
        let row: Option<OutcomeRow> = with_pool!(self, reader, |pool| {
            sqlx::query_as(SELECT_OUTCOME)
                .bind(tenant.as_str())
                .bind(id.as_str())
                .fetch_optional(pool)
                .await?
        });
        Ok(row.map(|row| row.outcome))
    }

    /// The tenant's outcome `id` with its corrections, if stored.
    pub async fn outcome_history(
        &self,
        tenant: &TenantId,
        id: &OutcomeId,
    ) -> Result<Option<OutcomeHistory>, StoreError> {
        let (row, corrections): (Option<OutcomeRow>, Vec<OutcomeCorrection>) =
            with_pool!(self, reader, |pool| {
                let row = sqlx::query_as(SELECT_OUTCOME)
                    .bind(tenant.as_str())
                    .bind(id.as_str())
                    .fetch_optional(pool)
                    .await?;
                let corrections = sqlx::query_as(SELECT_CORRECTIONS)
                    .bind(tenant.as_str())
                    .bind(id.as_str())
                    .fetch_all(pool)
                    .await?;
                (row, corrections)
            });
        Ok(row.map(|row| OutcomeHistory {
            outcome: row.outcome,
            assigned_at_us: row.assigned_at_us,
            corrections,
        }))
    }

    /// How many of a campaign's outcomes (with `version`, of the units assigned under it)
    /// have been corrected at least once.
    pub async fn corrected_outcomes(
        &self,
        tenant: &TenantId,
        campaign_id: &CampaignId,
        version: Option<i64>,
    ) -> Result<i64, StoreError> {
        let sql = match version {
            None => COUNT_CORRECTED.to_string(),
            // Driven from the corrections (rare), each probing its outcome and then its
            // assignment by their keys: as a semi-join, a database without statistics
            // yet planned corrections × outcomes × assignments (11,691 × 1,500 × 78 in
            // a review: over a minute for one report).
            Some(version) => format!(
                "SELECT COUNT(*) FROM (SELECT DISTINCT outcome_id FROM outcome_supersessions
                   WHERE tenant_id = $1 AND campaign_id = $2) s
                 WHERE (SELECT a.version FROM assignments a WHERE a.tenant_id = $1
                   AND a.assignment_id = (SELECT o.assignment_id FROM outcomes o
                     WHERE o.tenant_id = $1 AND o.outcome_id = s.outcome_id LIMIT 1)) = {version}"
            ),
        };
        with_bounded_read!(self, |pool| {
            let query = sqlx::query_scalar(&sql)
                .bind(tenant.as_str())
                .bind(campaign_id.as_str());
            Ok(query.fetch_one(pool).await?)
        })
    }

    /// Gives every outcome stored before migration `0015` its id, in batches; run after
    /// the migrations. Returns how many rows it filled. SQLite only: on PostgreSQL
    /// migration `0020` filled them in SQL (`traqlyte_outcome_id`) and made the id the
    /// primary key, so no row lacks one (and this scan would read the whole table).
    pub(crate) async fn fill_outcome_ids(&self) -> Result<u64, StoreError> {
        if matches!(self.backend, crate::Backend::Postgres(_)) {
            return Ok(0);
        }
        let mut filled = 0;
        loop {
            let rows: Vec<(String, String, String, String)> = with_pool!(self, writer, |pool| {
                sqlx::query_as(SELECT_MISSING_IDS).fetch_all(pool).await?
            });
            if rows.is_empty() {
                return Ok(filled);
            }
            let mut tx = self.begin().await?;
            for (tenant, campaign, assignment, key) in &rows {
                let campaign = CampaignId::try_from(campaign.as_str())
                    .map_err(|e| StoreError::Corrupt(format!("a stored campaign id {e}")))?;
                let assignment = AssignmentId::try_from(assignment.as_str())
                    .map_err(|e| StoreError::Corrupt(format!("a stored assignment id {e}")))?;
                let typed_key = DedupeKey::stored(key)
                    .map_err(|e| StoreError::Corrupt(format!("a stored dedupe key {e}")))?;
                let id = outcome_id(tenant, &campaign, &assignment, &typed_key);
                with_tx!(tx, |conn| {
                    sqlx::query(SET_OUTCOME_ID)
                        .bind(tenant)
                        .bind(assignment.as_str())
                        .bind(key)
                        .bind(id.as_str())
                        .execute(&mut *conn)
                        .await?;
                });
            }
            tx.commit().await?;
            filled += rows.len() as u64;
        }
    }
}

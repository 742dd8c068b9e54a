//! Recording a batch of outcomes set-based: a constant number of statements per batch,
//! whatever its size, as the events path does (`events.rs`).
//!
//! 1. insert the batch's candidates (the first item of each `(assignment_id, dedupe_key)`,
//!    sorted so concurrent batches lock in one order) with `ON CONFLICT DO NOTHING
//!    RETURNING` the keys inserted;
//! 2. read the stored rows of the other candidates in one statement (a primary-key probe
//!    per key);
//! 3. judge every item in input order ([`judge`], pure): inserted, duplicate (same
//!    fingerprint) or collision;
//! 4. write every duplicate, every collision, the collision counts (one row per campaign,
//!    version, metric and arm, added to in place) and the per-unit sums (one row per unit
//!    and metric, the batch's contributions added up; on PostgreSQL appended to
//!    `unit_metric_deltas`, no row another batch could hold a lock on) in one statement
//!    each.
//!
//! On SQLite every statement is split in chunks of [`SQLITE_ROWS_PER_STATEMENT`] rows (a
//! 1,000-item batch is two statements); on PostgreSQL each is one `unnest` statement.

use std::collections::{BTreeMap, HashMap, HashSet};

use traqlyte_experiments::outcome_id;

use crate::experiments::{NewOutcome, OutcomeResult, StoredOutcome};
use crate::tx::TxInner;
use crate::{AssignmentId, CampaignId, DedupeKey, StoreError, StoreTx, TenantId};

/// Rows per multi-row statement on SQLite (13 parameters a row at most, far below its
/// limit of 32,766).
const SQLITE_ROWS_PER_STATEMENT: usize = 500;

const OUTCOME_COLUMNS: &str = "assignment_id, dedupe_key, campaign_id, arm, metric, value, occurred_at_us, received_at_us, fingerprint";

const PG_INSERT_OUTCOMES: &str = "INSERT INTO outcomes
     (tenant_id, assignment_id, dedupe_key, campaign_id, arm, assigned_at_us, metric, value, occurred_at_us, received_at_us, fingerprint, outcome_id)
     SELECT $1, u.a, u.k, u.c, u.arm, u.at, u.m, u.v, u.o, $2, u.f, u.id
     FROM unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::int8[], $8::text[], $9::float8[], $10::int8[], $11::text[], $12::text[])
       AS u(a, k, c, arm, at, m, v, o, f, id)
     ON CONFLICT DO NOTHING RETURNING assignment_id, dedupe_key";

/// The stored rows of a batch's conflicting outcomes, by their deterministic ids: the
/// whole primary key `(tenant_id, outcome_id)`, one probe per id (migration `0020`). The
/// `LIMIT 1` keeps the per-id subquery from being flattened into a join over the
/// tenant's rows, which PostgreSQL planned on a table without statistics (`plans.rs`,
/// `tests/it/plans.rs`).
pub(crate) const PG_SELECT_STORED: &str =
    "SELECT o.assignment_id, o.dedupe_key, o.campaign_id, o.arm, o.metric, o.value,
       o.occurred_at_us, o.received_at_us, o.fingerprint
     FROM unnest($2::text[]) AS k(id)
     CROSS JOIN LATERAL (SELECT * FROM outcomes
       WHERE tenant_id = $1 AND outcome_id = k.id LIMIT 1) o";

const PG_INSERT_DUPLICATES: &str = "INSERT INTO outcome_duplicates
     (tenant_id, campaign_id, assignment_id, dedupe_key, arm, assigned_at_us, metric, value, occurred_at_us, arrived_at_us)
     SELECT $1, u.c, u.a, u.k, u.arm, u.at, u.m, u.v, u.o, $2
     FROM unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::int8[], $8::text[], $9::float8[], $10::int8[])
       AS u(c, a, k, arm, at, m, v, o)";

const PG_INSERT_COLLISIONS: &str = "INSERT INTO outcome_collisions
     (tenant_id, assignment_id, dedupe_key, campaign_id, incoming_payload, received_at_us)
     SELECT $1, u.a, u.k, u.c, u.p, $2
     FROM unnest($3::text[], $4::text[], $5::text[], $6::text[]) AS u(a, k, c, p)";

/// Adds a batch's collisions to the report's counts (migration `0027`), one row per
/// (campaign, version, metric, arm) in key order ([`collision_counts`]), so concurrent
/// batches take the rows' locks in one order. Collisions are rare (a client resending changed values), so the
/// row lock a colliding batch holds until commit is rarely waited on.
const PG_ADD_COLLISION_COUNTS: &str = "INSERT INTO outcome_collision_counts
     (tenant_id, campaign_id, version, metric, arm, collisions)
     SELECT $1, u.c, u.v, u.m, u.arm, u.n
     FROM unnest($2::text[], $3::int8[], $4::text[], $5::text[], $6::int8[]) AS u(c, v, m, arm, n)
     ON CONFLICT (tenant_id, campaign_id, version, metric, arm)
     DO UPDATE SET collisions = outcome_collision_counts.collisions + excluded.collisions";

/// [`PG_ADD_COLLISION_COUNTS`] on SQLite, before its `VALUES` rows.
const SQLITE_ADD_COLLISION_COUNTS: &str = "INSERT INTO outcome_collision_counts
     (tenant_id, campaign_id, version, metric, arm, collisions) VALUES";

/// What makes [`SQLITE_ADD_COLLISION_COUNTS`] add to a row already there.
const SQLITE_ADD_TO_COUNT: &str = "ON CONFLICT (tenant_id, campaign_id, version, metric, arm)
     DO UPDATE SET collisions = outcome_collision_counts.collisions + excluded.collisions";

/// The per-unit sums of a batch, appended: never a conflict, never a row lock another
/// batch waits on (`fold_unit_metrics` folds them into `unit_metrics`).
const PG_APPEND_UNIT_DELTAS: &str = "INSERT INTO unit_metric_deltas
     (tenant_id, campaign_id, metric, assignment_id, arm, ev_n, ev_v, ev_dn, ev_dv, ar_n, ar_v, ar_dn, ar_dv)
     SELECT $1, u.c, u.m, u.a, u.arm, u.evn, u.evv, u.evdn, u.evdv, u.arn, u.arv, u.ardn, u.ardv
     FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::int8[], $7::float8[], $8::int8[], $9::float8[],
                 $10::int8[], $11::float8[], $12::int8[], $13::float8[])
       AS u(c, m, a, arm, evn, evv, evdn, evdv, arn, arv, ardn, ardv)";

/// Each outcome's deterministic id (`outcome_corrections.rs`).
fn outcome_ids(tenant: &TenantId, rows: &[&NewOutcome]) -> Vec<String> {
    rows.iter()
        .map(|o| {
            let a = &o.assignment;
            outcome_id(
                tenant.as_str(),
                &a.campaign_id,
                &a.assignment_id,
                &o.dedupe_key,
            )
            .into_string()
        })
        .collect()
}

/// `(assignment_id, dedupe_key)`: an outcome's identity.
type Key = (AssignmentId, DedupeKey);

fn key_of(outcome: &NewOutcome) -> Key {
    (
        outcome.assignment.assignment_id.clone(),
        outcome.dedupe_key.clone(),
    )
}

impl StoreTx {
    /// Records outcomes in this transaction, one result per input, in order, in a
    /// constant number of statements (see the module's documentation).
    pub async fn record_outcomes(
        &mut self,
        tenant: &TenantId,
        outcomes: &[NewOutcome],
        now_us: i64,
    ) -> Result<Vec<OutcomeResult>, StoreError> {
        debug_assert!(
            outcomes
                .iter()
                .all(|o| !matches!(o.value, Some(v) if v.abs() > crate::OUTCOME_VALUE_ABS_MAX)),
            "outcome values are bounded at the edge"
        );
        if outcomes.is_empty() {
            return Ok(Vec::new());
        }
        let candidates = candidates(outcomes);
        let inserted = self
            .insert_outcome_rows(tenant, &candidates, now_us)
            .await?;
        let conflicting: Vec<&NewOutcome> = candidates
            .iter()
            .copied()
            .filter(|o| !inserted.contains(&key_of(o)))
            .collect();
        let mut stored = self.stored_outcomes(tenant, &conflicting).await?;
        for outcome in candidates.iter().filter(|o| inserted.contains(&key_of(o))) {
            stored.insert(key_of(outcome), as_stored(outcome, now_us));
        }
        let judged = judge(outcomes, &inserted, &stored, now_us)?;
        debug_assert_eq!(judged.results.len(), outcomes.len());
        self.insert_duplicate_rows(tenant, &judged.duplicates, now_us)
            .await?;
        self.insert_collision_rows(tenant, &judged.collisions, now_us)
            .await?;
        self.add_collision_counts(tenant, &collision_counts(&judged.collisions))
            .await?;
        self.bump_unit_rows(tenant, &judged.unit_sums).await?;
        Ok(judged.results)
    }

    /// Inserts `rows` with `ON CONFLICT DO NOTHING`; returns the keys inserted.
    async fn insert_outcome_rows(
        &mut self,
        tenant: &TenantId,
        rows: &[&NewOutcome],
        now_us: i64,
    ) -> Result<HashSet<Key>, StoreError> {
        let mut keys: Vec<(String, String)> = Vec::with_capacity(rows.len());
        // Each row's deterministic id (`outcome_corrections.rs`), for its corrections.
        let ids = outcome_ids(tenant, rows);
        match &mut self.inner {
            TxInner::Postgres(conn) => {
                let text =
                    |f: fn(&NewOutcome) -> &str| rows.iter().map(|o| f(o)).collect::<Vec<&str>>();
                let query = sqlx::query_as(PG_INSERT_OUTCOMES)
                    .bind(tenant.as_str())
                    .bind(now_us)
                    .bind(text(|o| o.assignment.assignment_id.as_str()))
                    .bind(text(|o| o.dedupe_key.as_str()))
                    .bind(text(|o| o.assignment.campaign_id.as_str()))
                    .bind(text(|o| &o.assignment.arm))
                    .bind(
                        rows.iter()
                            .map(|o| o.assignment.assigned_at_us)
                            .collect::<Vec<i64>>(),
                    )
                    .bind(text(|o| &o.metric))
                    .bind(rows.iter().map(|o| o.value).collect::<Vec<Option<f64>>>())
                    .bind(rows.iter().map(|o| o.occurred_at_us).collect::<Vec<i64>>())
                    .bind(text(|o| &o.fingerprint))
                    .bind(ids);
                keys = query.fetch_all(&mut **conn).await?;
            }
            TxInner::Sqlite(conn) => {
                for (chunk, ids) in rows
                    .chunks(SQLITE_ROWS_PER_STATEMENT)
                    .zip(ids.chunks(SQLITE_ROWS_PER_STATEMENT))
                {
                    let sql = format!(
                        "INSERT INTO outcomes (tenant_id, assignment_id, dedupe_key, campaign_id, arm, assigned_at_us, metric, value, occurred_at_us, received_at_us, fingerprint, outcome_id)
                         VALUES {} ON CONFLICT DO NOTHING RETURNING assignment_id, dedupe_key",
                        vec!["(?,?,?,?,?,?,?,?,?,?,?,?)"; chunk.len()].join(",")
                    );
                    let mut query = sqlx::query_as(&sql);
                    for (o, id) in chunk.iter().zip(ids) {
                        let a = &o.assignment;
                        query = query
                            .bind(tenant.as_str())
                            .bind(a.assignment_id.as_str())
                            .bind(o.dedupe_key.as_str())
                            .bind(a.campaign_id.as_str())
                            .bind(&a.arm)
                            .bind(a.assigned_at_us)
                            .bind(&o.metric)
                            .bind(o.value)
                            .bind(o.occurred_at_us)
                            .bind(now_us)
                            .bind(&o.fingerprint)
                            .bind(id);
                    }
                    keys.extend(query.fetch_all(&mut **conn).await?);
                }
            }
        }
        keys.into_iter()
            .map(|(a, k)| {
                let a = AssignmentId::try_from(a).map_err(corrupt)?;
                Ok((a, DedupeKey::stored(&k).map_err(corrupt)?))
            })
            .collect()
    }

    /// The stored rows of `rows`' keys (each exists: its insert conflicted).
    async fn stored_outcomes(
        &mut self,
        tenant: &TenantId,
        rows: &[&NewOutcome],
    ) -> Result<HashMap<Key, StoredOutcome>, StoreError> {
        let mut found: Vec<StoredOutcome> = Vec::with_capacity(rows.len());
        if rows.is_empty() {
            return Ok(HashMap::new());
        }
        match &mut self.inner {
            TxInner::Postgres(conn) => {
                // Read Committed: this statement sees the rows committed by the concurrent
                // transactions our insert waited for. One primary-key probe per id; every
                // row has its id (migration `0020` made it the key), and a conflicting
                // key whose row this does not find fails the batch as corrupt (`judge`).
                let query = sqlx::query_as(PG_SELECT_STORED)
                    .bind(tenant.as_str())
                    .bind(outcome_ids(tenant, rows));
                found = query.fetch_all(&mut **conn).await?;
            }
            TxInner::Sqlite(conn) => {
                for chunk in rows.chunks(SQLITE_ROWS_PER_STATEMENT) {
                    // The keys drive the join (CROSS JOIN fixes SQLite's loop order): one
                    // primary-key probe per key. An OR of the keys scanned the tenant's rows.
                    let sql = format!(
                        "SELECT {} FROM (VALUES {}) k CROSS JOIN outcomes o
                         WHERE o.tenant_id = ? AND o.assignment_id = k.column1 AND o.dedupe_key = k.column2",
                        qualified(OUTCOME_COLUMNS),
                        vec!["(?, ?)"; chunk.len()].join(", ")
                    );
                    let mut query = sqlx::query_as(&sql);
                    for o in chunk {
                        query = query
                            .bind(o.assignment.assignment_id.as_str())
                            .bind(o.dedupe_key.as_str());
                    }
                    query = query.bind(tenant.as_str());
                    found.extend(query.fetch_all(&mut **conn).await?);
                }
            }
        }
        Ok(found
            .into_iter()
            .map(|s| ((s.assignment_id.clone(), s.dedupe_key.clone()), s))
            .collect())
    }

    /// Records every suppressed duplicate (`(incoming, stored)`), arrived now.
    async fn insert_duplicate_rows(
        &mut self,
        tenant: &TenantId,
        rows: &[(&NewOutcome, &StoredOutcome)],
        now_us: i64,
    ) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        match &mut self.inner {
            TxInner::Postgres(conn) => {
                let text = |f: fn(&StoredOutcome) -> &str| {
                    rows.iter().map(|(_, s)| f(s)).collect::<Vec<&str>>()
                };
                sqlx::query(PG_INSERT_DUPLICATES)
                    .bind(tenant.as_str())
                    .bind(now_us)
                    .bind(text(|s| s.campaign_id.as_str()))
                    .bind(text(|s| s.assignment_id.as_str()))
                    .bind(text(|s| s.dedupe_key.as_str()))
                    .bind(text(|s| &s.arm))
                    .bind(
                        rows.iter()
                            .map(|(n, _)| n.assignment.assigned_at_us)
                            .collect::<Vec<i64>>(),
                    )
                    .bind(text(|s| &s.metric))
                    .bind(
                        rows.iter()
                            .map(|(_, s)| s.value)
                            .collect::<Vec<Option<f64>>>(),
                    )
                    .bind(
                        rows.iter()
                            .map(|(_, s)| s.occurred_at_us)
                            .collect::<Vec<i64>>(),
                    )
                    .execute(&mut **conn)
                    .await?;
            }
            TxInner::Sqlite(conn) => {
                for chunk in rows.chunks(SQLITE_ROWS_PER_STATEMENT) {
                    let sql = format!(
                        "INSERT INTO outcome_duplicates (tenant_id, campaign_id, assignment_id, dedupe_key, arm, assigned_at_us, metric, value, occurred_at_us, arrived_at_us)
                         VALUES {}",
                        vec!["(?,?,?,?,?,?,?,?,?,?)"; chunk.len()].join(",")
                    );
                    let mut query = sqlx::query(&sql);
                    for (n, s) in chunk {
                        query = query
                            .bind(tenant.as_str())
                            .bind(s.campaign_id.as_str())
                            .bind(s.assignment_id.as_str())
                            .bind(s.dedupe_key.as_str())
                            .bind(&s.arm)
                            .bind(n.assignment.assigned_at_us)
                            .bind(&s.metric)
                            .bind(s.value)
                            .bind(s.occurred_at_us)
                            .bind(now_us);
                    }
                    query.execute(&mut **conn).await?;
                }
            }
        }
        Ok(())
    }

    /// Logs every collision's incoming payload (`(incoming, stored)`).
    async fn insert_collision_rows(
        &mut self,
        tenant: &TenantId,
        rows: &[(&NewOutcome, &StoredOutcome)],
        now_us: i64,
    ) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        match &mut self.inner {
            TxInner::Postgres(conn) => {
                let text = |f: fn(&NewOutcome) -> &str| {
                    rows.iter().map(|(o, _)| f(o)).collect::<Vec<&str>>()
                };
                sqlx::query(PG_INSERT_COLLISIONS)
                    .bind(tenant.as_str())
                    .bind(now_us)
                    .bind(text(|o| o.assignment.assignment_id.as_str()))
                    .bind(text(|o| o.dedupe_key.as_str()))
                    .bind(text(|o| o.assignment.campaign_id.as_str()))
                    .bind(text(|o| &o.payload))
                    .execute(&mut **conn)
                    .await?;
            }
            TxInner::Sqlite(conn) => {
                for chunk in rows.chunks(SQLITE_ROWS_PER_STATEMENT) {
                    let sql = format!(
                        "INSERT INTO outcome_collisions (tenant_id, assignment_id, dedupe_key, campaign_id, incoming_payload, received_at_us)
                         VALUES {}",
                        vec!["(?,?,?,?,?,?)"; chunk.len()].join(",")
                    );
                    let mut query = sqlx::query(&sql);
                    for (o, _) in chunk {
                        query = query
                            .bind(tenant.as_str())
                            .bind(o.assignment.assignment_id.as_str())
                            .bind(o.dedupe_key.as_str())
                            .bind(o.assignment.campaign_id.as_str())
                            .bind(&o.payload)
                            .bind(now_us);
                    }
                    query.execute(&mut **conn).await?;
                }
            }
        }
        Ok(())
    }

    /// Adds the batch's collision counts to `outcome_collision_counts`, in one statement.
    async fn add_collision_counts(
        &mut self,
        tenant: &TenantId,
        counts: &BTreeMap<CountKey, i64>,
    ) -> Result<(), StoreError> {
        if counts.is_empty() {
            return Ok(());
        }
        let rows: Vec<(&CountKey, &i64)> = counts.iter().collect();
        match &mut self.inner {
            TxInner::Postgres(conn) => {
                let text = |f: fn(&CountKey) -> &str| {
                    rows.iter().map(|(k, _)| f(k)).collect::<Vec<&str>>()
                };
                sqlx::query(PG_ADD_COLLISION_COUNTS)
                    .bind(tenant.as_str())
                    .bind(text(|k| k.campaign_id.as_str()))
                    .bind(rows.iter().map(|(k, _)| k.version).collect::<Vec<i64>>())
                    .bind(text(|k| &k.metric))
                    .bind(text(|k| &k.arm))
                    .bind(rows.iter().map(|(_, n)| **n).collect::<Vec<i64>>())
                    .execute(&mut **conn)
                    .await?;
            }
            TxInner::Sqlite(conn) => {
                for chunk in rows.chunks(SQLITE_ROWS_PER_STATEMENT) {
                    let sql = format!(
                        "{SQLITE_ADD_COLLISION_COUNTS} {} {SQLITE_ADD_TO_COUNT}",
                        vec!["(?,?,?,?,?,?)"; chunk.len()].join(",")
                    );
                    let mut query = sqlx::query(&sql);
                    for (k, n) in chunk {
                        query = query
                            .bind(tenant.as_str())
                            .bind(k.campaign_id.as_str())
                            .bind(k.version)
                            .bind(&k.metric)
                            .bind(&k.arm)
                            .bind(**n);
                    }
                    query.execute(&mut **conn).await?;
                }
            }
        }
        Ok(())
    }

    /// Adds the batch's per-unit sums, one row per (campaign, metric, unit): appended to
    /// `unit_metric_deltas` on PostgreSQL; on SQLite, whose one writer at a time never
    /// waits on a row lock, added to the `unit_metrics` row in place (cheaper than an
    /// append and a fold there).
    async fn bump_unit_rows(
        &mut self,
        tenant: &TenantId,
        sums: &BTreeMap<UnitKey, UnitSums>,
    ) -> Result<(), StoreError> {
        if sums.is_empty() {
            return Ok(());
        }
        let rows: Vec<(&UnitKey, &UnitSums)> = sums.iter().collect();
        match &mut self.inner {
            TxInner::Postgres(conn) => {
                let text = |f: for<'a> fn(&'a UnitKey, &'a UnitSums) -> &'a str| {
                    rows.iter().map(|(k, s)| f(k, s)).collect::<Vec<&str>>()
                };
                let count =
                    |f: fn(&UnitSums) -> i64| rows.iter().map(|(_, s)| f(s)).collect::<Vec<i64>>();
                let value =
                    |f: fn(&UnitSums) -> f64| rows.iter().map(|(_, s)| f(s)).collect::<Vec<f64>>();
                sqlx::query(PG_APPEND_UNIT_DELTAS)
                    .bind(tenant.as_str())
                    .bind(text(|k, _| k.campaign_id.as_str()))
                    .bind(text(|k, _| &k.metric))
                    .bind(text(|k, _| k.assignment_id.as_str()))
                    .bind(text(|_, s| &s.arm))
                    .bind(count(|s| s.ev_n))
                    .bind(value(|s| s.ev_v))
                    .bind(count(|s| s.ev_dn))
                    .bind(value(|s| s.ev_dv))
                    .bind(count(|s| s.ar_n))
                    .bind(value(|s| s.ar_v))
                    .bind(count(|s| s.ar_dn))
                    .bind(value(|s| s.ar_dv))
                    .execute(&mut **conn)
                    .await?;
            }
            TxInner::Sqlite(conn) => {
                for chunk in rows.chunks(SQLITE_ROWS_PER_STATEMENT) {
                    let sql = format!(
                        "INSERT INTO unit_metrics (tenant_id, campaign_id, metric, assignment_id, arm, ev_n, ev_v, ev_dn, ev_dv, ar_n, ar_v, ar_dn, ar_dv)
                         VALUES {} {}",
                        vec!["(?,?,?,?,?,?,?,?,?,?,?,?,?)"; chunk.len()].join(","),
                        crate::unit_metrics::add_to_existing_row()
                    );
                    let mut query = sqlx::query(&sql);
                    for (k, s) in chunk {
                        query = query
                            .bind(tenant.as_str())
                            .bind(k.campaign_id.as_str())
                            .bind(&k.metric)
                            .bind(k.assignment_id.as_str())
                            .bind(&s.arm)
                            .bind(s.ev_n)
                            .bind(s.ev_v)
                            .bind(s.ev_dn)
                            .bind(s.ev_dv)
                            .bind(s.ar_n)
                            .bind(s.ar_v)
                            .bind(s.ar_dn)
                            .bind(s.ar_dv);
                    }
                    query.execute(&mut **conn).await?;
                }
            }
        }
        Ok(())
    }
}

/// `columns` (a comma-separated list) each prefixed with `o.`.
fn qualified(columns: &str) -> String {
    columns
        .split(',')
        .map(|c| format!("o.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn corrupt(err: traqlyte_experiments::RuleError) -> StoreError {
    StoreError::Corrupt(format!("a stored assignment id {err}"))
}

/// The first item of each key, sorted by key (a stable lock order across batches).
fn candidates(outcomes: &[NewOutcome]) -> Vec<&NewOutcome> {
    let mut seen = HashSet::with_capacity(outcomes.len());
    let mut first: Vec<&NewOutcome> = outcomes
        .iter()
        .filter(|o| seen.insert((o.assignment.assignment_id.as_str(), o.dedupe_key.as_str())))
        .collect();
    first.sort_by(|a, b| {
        (a.assignment.assignment_id.as_str(), a.dedupe_key.as_str())
            .cmp(&(b.assignment.assignment_id.as_str(), b.dedupe_key.as_str()))
    });
    first
}

/// The row an inserted outcome now is: exactly these values, no need to read it back
/// (the duplicate-bytes test compares this answer with a replayed one).
fn as_stored(new: &NewOutcome, now_us: i64) -> StoredOutcome {
    let a = &new.assignment;
    StoredOutcome {
        assignment_id: a.assignment_id.clone(),
        dedupe_key: new.dedupe_key.clone(),
        campaign_id: a.campaign_id.clone(),
        arm: a.arm.clone(),
        metric: new.metric.clone(),
        value: new.value,
        occurred_at_us: new.occurred_at_us,
        received_at_us: now_us,
        fingerprint: new.fingerprint.clone(),
    }
}

/// A row of `unit_metric_deltas`: (campaign, metric, unit's assignment).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct UnitKey {
    campaign_id: CampaignId,
    metric: String,
    assignment_id: AssignmentId,
}

/// A row of `outcome_collision_counts`: what a collision counts against.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct CountKey {
    campaign_id: CampaignId,
    version: i64,
    metric: String,
    arm: String,
}

/// A batch's collisions counted per row of `outcome_collision_counts`: the assignment's
/// campaign version, the STORED outcome's metric and arm (the incoming payload may name
/// another metric; the report attributes a collision to what it collided with). Pure.
fn collision_counts(collisions: &[(&NewOutcome, &StoredOutcome)]) -> BTreeMap<CountKey, i64> {
    let mut counts = BTreeMap::new();
    for (new, stored) in collisions {
        let key = CountKey {
            campaign_id: stored.campaign_id.clone(),
            version: new.assignment.version,
            metric: stored.metric.clone(),
            arm: stored.arm.clone(),
        };
        *counts.entry(key).or_insert(0) += 1;
    }
    counts
}

/// What a batch adds to one unit's sums of one metric.
#[derive(Debug, Clone, Default, PartialEq)]
struct UnitSums {
    arm: String,
    ev_n: i64,
    ev_v: f64,
    ev_dn: i64,
    ev_dv: f64,
    ar_n: i64,
    ar_v: f64,
    ar_dn: i64,
    ar_dv: f64,
}

impl UnitSums {
    /// Counts one stored outcome (`is_stored`) or one suppressed duplicate of it in each
    /// window it falls into: event time, and arrival time (`arrival_us`).
    fn add(&mut self, new: &NewOutcome, stored: &StoredOutcome, is_stored: bool, arrival_us: i64) {
        let assigned = new.assignment.assigned_at_us;
        let within = |at: i64| (0..=new.window_us).contains(&(at - assigned));
        let value = stored.value.unwrap_or(0.0);
        let (ev, ar) = (within(stored.occurred_at_us), within(arrival_us));
        let ((ev_n, ev_v), (ar_n, ar_v)) = (n_v(ev, value), n_v(ar, value));
        if is_stored {
            (self.ev_n, self.ev_v, self.ar_n, self.ar_v) = (
                self.ev_n + ev_n,
                self.ev_v + ev_v,
                self.ar_n + ar_n,
                self.ar_v + ar_v,
            );
        } else {
            (self.ev_dn, self.ev_dv, self.ar_dn, self.ar_dv) = (
                self.ev_dn + ev_n,
                self.ev_dv + ev_v,
                self.ar_dn + ar_n,
                self.ar_dv + ar_v,
            );
        }
    }
}

/// `(1, value)` inside a window, `(0, 0.0)` outside.
fn n_v(inside: bool, value: f64) -> (i64, f64) {
    if inside {
        (1, value)
    } else {
        (0, 0.0)
    }
}

/// A batch judged against what the store holds.
struct Judged<'a> {
    results: Vec<OutcomeResult>,
    duplicates: Vec<(&'a NewOutcome, &'a StoredOutcome)>,
    collisions: Vec<(&'a NewOutcome, &'a StoredOutcome)>,
    unit_sums: BTreeMap<UnitKey, UnitSums>,
}

/// Judges every item in input order against the stored row of its key: the first item of
/// a key this batch inserted is `Inserted`; any other is a `Duplicate` when its fingerprint
/// equals the stored one, else a `Collision`. Pure.
fn judge<'a>(
    outcomes: &'a [NewOutcome],
    inserted: &HashSet<Key>,
    stored: &'a HashMap<Key, StoredOutcome>,
    now_us: i64,
) -> Result<Judged<'a>, StoreError> {
    let mut judged = Judged {
        results: Vec::with_capacity(outcomes.len()),
        duplicates: Vec::new(),
        collisions: Vec::new(),
        unit_sums: BTreeMap::new(),
    };
    let mut answered_insert: HashSet<&Key> = HashSet::new();
    for new in outcomes {
        let key = key_of(new);
        let (key, row) = stored.get_key_value(&key).ok_or_else(|| {
            StoreError::Corrupt(format!("outcome {key:?} conflicted but is not stored"))
        })?;
        let first_insert = inserted.contains(key) && answered_insert.insert(key);
        let unit = || UnitKey {
            campaign_id: row.campaign_id.clone(),
            metric: row.metric.clone(),
            assignment_id: row.assignment_id.clone(),
        };
        let result = if first_insert {
            let sums = judged.unit_sums.entry(unit()).or_default();
            sums.arm.clone_from(&row.arm);
            sums.add(new, row, true, row.received_at_us);
            OutcomeResult::Inserted(row.clone())
        } else if row.fingerprint == new.fingerprint {
            let sums = judged.unit_sums.entry(unit()).or_default();
            sums.arm.clone_from(&row.arm);
            sums.add(new, row, false, now_us);
            judged.duplicates.push((new, row));
            OutcomeResult::Duplicate(row.clone())
        } else {
            judged.collisions.push((new, row));
            OutcomeResult::Collision(row.clone())
        };
        judged.results.push(result);
    }
    Ok(judged)
}

//! Assignments in sets: many units of one or more campaigns in a constant number of
//! statements, and a known unit's assignment in one indexed read.
//!
//! Stickiness stays the store's: proposed rows are inserted with `ON CONFLICT DO NOTHING`
//! on the primary key `(tenant_id, campaign_id, unit_id)`, then the stored rows are read
//! back, so whichever request (or process) inserted first wins for every later one.

use std::collections::{HashMap, HashSet};

use traqlyte_experiments::bucketing;

use crate::campaigns::VersionRow;
use crate::tx::{with_pool, TxInner};
use crate::{
    Assignment, AssignmentId, CampaignId, CampaignVersion, Store, StoreError, StoreTx, TenantId,
    UnitId,
};

/// Rows per multi-row statement (7 parameters a row: 3,500 per statement, within both
/// backends' limits).
const ROWS_PER_STATEMENT: usize = 500;

const ASSIGNMENT_COLUMNS: &str = "a.assignment_id, a.campaign_id, a.unit_id, a.arm,
       CAST(a.version AS BIGINT) AS version, a.assigned_at_us";

/// A unit's assignment is read by its deterministic id (`bucketing::assignment_id` of the
/// campaign and the unit), the full key of the unique index `(tenant_id, assignment_id)`.
/// Reading by `(tenant_id, campaign_id, unit_id)` instead ties, on a table without
/// statistics (a new deployment, a fresh benchmark database), with the report's index
/// `(tenant_id, campaign_id, version, arm)`: PostgreSQL then cached a generic plan that
/// scanned every unit of the campaign per lookup.
pub(crate) const SELECT_ASSIGNMENT_BY_ID: &str = "SELECT assignment_id, campaign_id, unit_id, arm,
       CAST(version AS BIGINT) AS version, assigned_at_us
     FROM assignments WHERE tenant_id = $1 AND assignment_id = $2";

/// The batched insert of assignments' rows, `$1` the tenant and `$2`–`$7` the columns
/// ([`AssignmentColumns`]); its statements add the conflict clause.
macro_rules! insert_assignment_rows {
    () => {
        "INSERT INTO assignments
     (tenant_id, campaign_id, unit_id, assignment_id, arm, version, assigned_at_us)
     SELECT $1, r.campaign_id, r.unit_id, r.assignment_id, r.arm, r.version, r.assigned_at_us
     FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::int4[], $7::int8[])
       AS r(campaign_id, unit_id, assignment_id, arm, version, assigned_at_us)"
    };
}
pub(crate) use insert_assignment_rows;

/// The batched insert of proposed assignments on PostgreSQL (see
/// `StoreTx::insert_assignments`).
const PG_INSERT_ASSIGNMENTS: &str = concat!(insert_assignment_rows!(), " ON CONFLICT DO NOTHING");

/// The parameters `$1`–`$7` of [`insert_assignment_rows!`] for a set of rows.
pub(crate) struct AssignmentColumns<'a> {
    text: [Vec<&'a str>; 4],
    versions: Vec<i32>,
    at: Vec<i64>,
}

impl<'a> AssignmentColumns<'a> {
    pub(crate) fn new(rows: &[&'a Assignment]) -> AssignmentColumns<'a> {
        let column = |f: &dyn Fn(&'a Assignment) -> &'a str| rows.iter().map(|a| f(a)).collect();
        AssignmentColumns {
            text: [
                column(&|a| a.campaign_id.as_str()),
                column(&|a| a.unit_id.as_str()),
                column(&|a| a.assignment_id.as_str()),
                column(&|a| a.arm.as_str()),
            ],
            versions: rows.iter().map(|a| a.version as i32).collect(),
            at: rows.iter().map(|a| a.assigned_at_us).collect(),
        }
    }

    /// Binds `$1`–`$7`; a statement's further parameters are bound after.
    pub(crate) fn bind<'q>(
        &'q self,
        query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
        tenant: &'q TenantId,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        let mut query = query.bind(tenant.as_str());
        for column in &self.text {
            query = query.bind(column);
        }
        query.bind(&self.versions).bind(&self.at)
    }
}

/// See [`StoreTx::latest_campaign_versions`].
pub(crate) const PG_LATEST_CAMPAIGN_VERSIONS: &str = "SELECT k.id,
       (SELECT CAST(v.version AS BIGINT) FROM campaign_versions v
         WHERE v.tenant_id = $1 AND v.campaign_id = k.id ORDER BY v.version DESC LIMIT 1)
     FROM unnest($2::text[]) AS k(id)";

/// One unique-index probe per id (see [`SELECT_ASSIGNMENT_BY_ID`]); run through
/// [`pg_assigned`].
pub(crate) const PG_SELECT_ASSIGNED: &str = "SELECT a.assignment_id, a.campaign_id, a.unit_id, a.arm,
       CAST(a.version AS BIGINT) AS version, a.assigned_at_us
     FROM unnest($2::text[]) AS k(id)
     CROSS JOIN LATERAL (SELECT * FROM assignments WHERE tenant_id = $1 AND assignment_id = k.id LIMIT 1) a";

/// The tenant's assignments among `ids` on PostgreSQL, in one statement (ids naming
/// nothing are left out). A single id is read by the key alone
/// ([`SELECT_ASSIGNMENT_BY_ID`]): for an array of one, PostgreSQL estimated its custom
/// plan cheaper than the generic one every time and planned [`PG_SELECT_ASSIGNED`] on
/// every call (pg_stat_statements: 93 µs of planning for 21 µs of execution), where the
/// plain probe runs its cached generic plan.
pub(crate) async fn pg_assigned<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    tenant: &TenantId,
    ids: &[&str],
) -> Result<Vec<Assignment>, StoreError> {
    if let [id] = ids {
        let found: Option<Assignment> = sqlx::query_as(SELECT_ASSIGNMENT_BY_ID)
            .bind(tenant.as_str())
            .bind(*id)
            .fetch_optional(executor)
            .await?;
        return Ok(found.into_iter().collect());
    }
    Ok(sqlx::query_as(PG_SELECT_ASSIGNED)
        .bind(tenant.as_str())
        .bind(ids)
        .fetch_all(executor)
        .await?)
}

/// The stored assignment read by id, checked to be the unit's: a different campaign or
/// unit under the same id would be a SHA-256 collision, reported, never answered.
pub(crate) fn the_units(
    found: Option<Assignment>,
    campaign_id: &CampaignId,
    unit_id: &UnitId,
) -> Result<Option<Assignment>, StoreError> {
    match found {
        Some(a) if a.campaign_id != *campaign_id || a.unit_id != *unit_id => {
            Err(StoreError::Corrupt(format!(
                "assignment id {} names unit {} of {}, not unit {unit_id} of {campaign_id}",
                a.assignment_id, a.unit_id, a.campaign_id
            )))
        }
        other => Ok(other),
    }
}

impl Store {
    /// The unit's assignment in the campaign, if it has one: one primary-key read.
    pub async fn unit_assignment(
        &self,
        tenant: &TenantId,
        campaign_id: &CampaignId,
        unit_id: &UnitId,
    ) -> Result<Option<Assignment>, StoreError> {
        let id = bucketing::assignment_id(campaign_id, unit_id.as_str());
        let found = with_pool!(self, reader, |pool| {
            let query = sqlx::query_as(SELECT_ASSIGNMENT_BY_ID)
                .bind(tenant.as_str())
                .bind(id.as_str());
            query.fetch_optional(pool).await?
        });
        the_units(found, campaign_id, unit_id)
    }

    /// The latest published version of each of `ids` that has one, in one statement.
    pub async fn latest_versions(
        &self,
        tenant: &TenantId,
        ids: &[CampaignId],
    ) -> Result<Vec<CampaignVersion>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let placeholders: Vec<String> = (0..ids.len()).map(|i| format!("${}", i + 2)).collect();
        let sql = format!(
            "SELECT campaign_id, CAST(version AS BIGINT) AS version, arms, metrics, salt, note, published_at_us
             FROM campaign_versions v WHERE tenant_id = $1 AND campaign_id IN ({})
               AND version = (SELECT MAX(version) FROM campaign_versions w
                              WHERE w.tenant_id = v.tenant_id AND w.campaign_id = v.campaign_id)",
            placeholders.join(", ")
        );
        with_pool!(self, reader, |pool| {
            let mut query = sqlx::query_as(&sql).bind(tenant.as_str());
            for id in ids {
                query = query.bind(id.as_str());
            }
            let rows: Vec<VersionRow> = query.fetch_all(pool).await?;
            rows.into_iter().map(CampaignVersion::try_from).collect()
        })
    }
}

impl StoreTx {
    /// The latest published version of each of `ids` (`None` for a campaign without
    /// one), read in this transaction: a group-committed assignment proposed under a
    /// version from the server's memory is written only if that version is still the
    /// latest (`crates/server/src/lookups.rs`). One statement on PostgreSQL (a backward
    /// primary-key probe per campaign), a probe per campaign on SQLite.
    pub async fn latest_campaign_versions(
        &mut self,
        tenant: &TenantId,
        ids: &[&CampaignId],
    ) -> Result<Vec<Option<i64>>, StoreError> {
        match &mut self.inner {
            TxInner::Postgres(conn) => {
                let names: Vec<&str> = ids.iter().map(|id| id.as_str()).collect();
                let rows: Vec<(String, Option<i64>)> = sqlx::query_as(PG_LATEST_CAMPAIGN_VERSIONS)
                    .bind(tenant.as_str())
                    .bind(&names)
                    .fetch_all(&mut **conn)
                    .await?;
                let latest: HashMap<String, Option<i64>> = rows.into_iter().collect();
                Ok(names
                    .iter()
                    .map(|name| latest.get(*name).copied().flatten())
                    .collect())
            }
            TxInner::Sqlite(conn) => {
                let mut latest = Vec::with_capacity(ids.len());
                for id in ids {
                    // The publish path's probe of the latest version (its first column).
                    let version: Option<i64> =
                        sqlx::query_scalar(crate::campaigns::SELECT_LATEST_VERSION)
                            .bind(tenant.as_str())
                            .bind(id.as_str())
                            .fetch_optional(&mut **conn)
                            .await?;
                    latest.push(version);
                }
                Ok(latest)
            }
        }
    }

    /// Inserts the assignment unless the unit already has one; returns the stored one
    /// (the first assignment always wins: sticky).
    pub async fn assign(
        &mut self,
        tenant: &TenantId,
        proposed: &Assignment,
    ) -> Result<Assignment, StoreError> {
        let mut stored = self
            .assign_many(tenant, std::slice::from_ref(proposed))
            .await?;
        stored
            .pop()
            .ok_or_else(|| StoreError::Corrupt("an assignment was not stored".into()))
    }

    /// [`StoreTx::assign`] for many units at once: inserts the proposals (one per
    /// `(campaign, unit)`, sorted, so concurrent calls lock in one order) and reads the
    /// stored rows back, in a constant number of statements. One result per input, in
    /// order.
    pub async fn assign_many(
        &mut self,
        tenant: &TenantId,
        proposed: &[Assignment],
    ) -> Result<Vec<Assignment>, StoreError> {
        let mut seen = HashSet::with_capacity(proposed.len());
        let mut rows: Vec<&Assignment> = proposed
            .iter()
            .filter(|a| seen.insert((a.campaign_id.as_str(), a.unit_id.as_str())))
            .collect();
        rows.sort_by(|a, b| (&a.campaign_id, &a.unit_id).cmp(&(&b.campaign_id, &b.unit_id)));
        self.insert_assignments(tenant, &rows).await?;
        let keys: Vec<(&CampaignId, &UnitId, &str)> = rows
            .iter()
            .map(|a| (&a.campaign_id, &a.unit_id, a.assignment_id.as_str()))
            .collect();
        let stored = self.stored_assignments(tenant, &keys).await?;
        proposed
            .iter()
            .map(|a| {
                stored
                    .get(&(a.campaign_id.clone(), a.unit_id.clone()))
                    .cloned()
                    .ok_or_else(|| {
                        StoreError::Corrupt(format!("assignment of {} not stored", a.unit_id))
                    })
            })
            .collect()
    }

    /// Inserts `rows` with `ON CONFLICT DO NOTHING`, in their order. On PostgreSQL one
    /// `unnest` statement whose text never changes, so its prepared statement and plan are
    /// reused by every batch: a `VALUES` list sized to the batch was a new statement for
    /// each batch size, which group-committed single requests (batches of 1 to 64 and
    /// more) kept preparing anew. SQLite has no arrays: multi-row `VALUES` there.
    async fn insert_assignments(
        &mut self,
        tenant: &TenantId,
        rows: &[&Assignment],
    ) -> Result<(), StoreError> {
        match &mut self.inner {
            TxInner::Postgres(conn) => {
                let columns = AssignmentColumns::new(rows);
                columns
                    .bind(sqlx::query(PG_INSERT_ASSIGNMENTS), tenant)
                    .execute(&mut **conn)
                    .await?;
            }
            TxInner::Sqlite(conn) => {
                for chunk in rows.chunks(ROWS_PER_STATEMENT) {
                    let sql = format!(
                        "INSERT INTO assignments (tenant_id, campaign_id, unit_id, assignment_id, arm, version, assigned_at_us)
                         VALUES {} ON CONFLICT DO NOTHING",
                        vec!["(?,?,?,?,?,?,?)"; chunk.len()].join(",")
                    );
                    let mut query = sqlx::query(&sql);
                    for a in chunk {
                        query = query
                            .bind(tenant.as_str())
                            .bind(a.campaign_id.as_str())
                            .bind(a.unit_id.as_str())
                            .bind(a.assignment_id.as_str())
                            .bind(&a.arm)
                            .bind(a.version as i32)
                            .bind(a.assigned_at_us);
                    }
                    query.execute(&mut **conn).await?;
                }
            }
        }
        Ok(())
    }

    /// The stored assignments of many `(campaign, unit)` pairs (each unit by its
    /// `userId`, else its `anonymousId`, say), read in this transaction in a constant
    /// number of statements; pairs without an assignment are absent from the map.
    pub async fn assignments_for_units(
        &mut self,
        tenant: &TenantId,
        units: &[(&CampaignId, &UnitId)],
    ) -> Result<HashMap<(CampaignId, UnitId), Assignment>, StoreError> {
        let ids: Vec<AssignmentId> = units
            .iter()
            .map(|(campaign, unit)| bucketing::assignment_id(campaign, unit.as_str()))
            .collect();
        let keys: Vec<(&CampaignId, &UnitId, &str)> = units
            .iter()
            .zip(&ids)
            .map(|((campaign, unit), id)| (*campaign, *unit, id.as_str()))
            .collect();
        self.stored_assignments(tenant, &keys).await
    }

    /// The stored assignments of `keys` (`(campaign, unit, assignment id)`), by
    /// `(campaign, unit)`. A row stored under one of the ids for another campaign or unit
    /// is a SHA-256 collision: reported ([`the_units`]), never answered.
    async fn stored_assignments(
        &mut self,
        tenant: &TenantId,
        keys: &[(&CampaignId, &UnitId, &str)],
    ) -> Result<HashMap<(CampaignId, UnitId), Assignment>, StoreError> {
        let mut found: Vec<Assignment> = Vec::with_capacity(keys.len());
        if keys.is_empty() {
            return Ok(HashMap::new());
        }
        match &mut self.inner {
            TxInner::Postgres(conn) => {
                let ids: Vec<&str> = keys.iter().map(|(_, _, id)| *id).collect();
                found = pg_assigned(&mut **conn, tenant, &ids).await?;
            }
            TxInner::Sqlite(conn) => {
                for chunk in keys.chunks(ROWS_PER_STATEMENT) {
                    // The keys drive the join (CROSS JOIN fixes SQLite's loop order): one
                    // primary-key probe per key. An OR of the keys scanned the campaign's rows.
                    let sql = format!(
                        "SELECT {ASSIGNMENT_COLUMNS} FROM (VALUES {}) k CROSS JOIN assignments a
                         WHERE a.tenant_id = ? AND a.campaign_id = k.column1 AND a.unit_id = k.column2",
                        vec!["(?, ?)"; chunk.len()].join(", ")
                    );
                    let mut query = sqlx::query_as(&sql);
                    for (campaign, unit, _) in chunk {
                        query = query.bind(campaign.as_str()).bind(unit.as_str());
                    }
                    query = query.bind(tenant.as_str());
                    found.extend(query.fetch_all(&mut **conn).await?);
                }
            }
        }
        let by_id: HashMap<&str, &Assignment> = found
            .iter()
            .map(|a| (a.assignment_id.as_str(), a))
            .collect();
        let mut stored = HashMap::with_capacity(by_id.len());
        for (campaign, unit, id) in keys {
            let row = by_id.get(id).map(|a| (*a).clone());
            if let Some(a) = the_units(row, campaign, unit)? {
                stored.insert(((*campaign).clone(), (*unit).clone()), a);
            }
        }
        Ok(stored)
    }
}

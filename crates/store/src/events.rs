//! Storing identified events: the dedupe path every ingestion surface shares.
//!
//! One transaction per batch: insert the candidates with `ON CONFLICT DO NOTHING` (one
//! statement on PostgreSQL, a few multi-row statements on SQLite), read back the stored
//! fingerprint of each conflicting id, fetch stored payloads only for collisions, then log
//! collisions and append one tally row.

use std::collections::HashMap;

use sqlx::Row;
use traqlyte_identity::{Contract, EventId, Fingerprint};

use crate::model::{stored_event_id, stored_fingerprint};
use crate::partitions::{self, partition_day};
use crate::plan::{self, Batch, Held};
use crate::tx::{with_tx, TxInner};
use crate::{EventOutcome, NewEvent, Store, StoreError, StoreTx, TenantId};

/// Rows per multi-row statement on SQLite (9 parameters a row, far below its limit).
const SQLITE_ROWS_PER_STATEMENT: usize = 500;

/// Where event rows go on PostgreSQL: the partitions inside the dedupe horizon (every
/// live write), or those detached from it (a backfill's events of older days).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventTable {
    Live,
    Detached,
}

impl EventTable {
    fn name(self) -> &'static str {
        match self {
            EventTable::Live => "events",
            EventTable::Detached => "events_detached",
        }
    }
}

/// The rows of the batched insert, before its conflict clause: `$1` tenant, `$2`
/// contract, `$3` version, `$4` arrival, `$5`–`$9` the columns.
macro_rules! insert_rows {
    () => {
        "INSERT INTO {table}
     (tenant_id, contract_name, event_id, contract_version, fingerprint, payload, occurred_at_us, received_at_us, occurred_day)
     SELECT $1, $2, decode(e.event_id, 'hex'), $3, e.fingerprint, e.payload, e.occurred_at_us, $4, e.occurred_day
     FROM unnest($5::text[], $6::text[], $7::text[], $8::int8[], $9::int4[])
       AS e(event_id, fingerprint, payload, occurred_at_us, occurred_day)"
    };
}
pub(crate) use insert_rows;

/// The parameters `$1`–`$9` of [`insert_rows!`] for a set of rows, in its column order.
pub(crate) struct RowColumns<'a> {
    event_ids: Vec<&'a str>,
    fingerprints: Vec<&'a str>,
    payloads: Vec<&'a str>,
    occurred: Vec<Option<i64>>,
    days: Vec<i32>,
}

impl<'a> RowColumns<'a> {
    pub(crate) fn new(contract: &Contract, rows: &[&'a NewEvent]) -> RowColumns<'a> {
        let occurred: Vec<Option<i64>> = rows.iter().map(|e| e.identified.occurred_at_us).collect();
        RowColumns {
            event_ids: rows
                .iter()
                .map(|e| e.identified.event_id.as_str())
                .collect(),
            fingerprints: rows
                .iter()
                .map(|e| e.identified.fingerprint.as_str())
                .collect(),
            payloads: rows.iter().map(|e| e.payload.as_str()).collect(),
            days: occurred
                .iter()
                .map(|at| partition_day(contract, *at))
                .collect(),
            occurred,
        }
    }

    /// Binds `$1`–`$9` (the tenant, the contract's name and version, the arrival time,
    /// the columns); a statement's further parameters are bound after.
    pub(crate) fn bind<'q>(
        &'q self,
        query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
        tenant: &'q TenantId,
        contract: &'q Contract,
        now: i64,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        query
            .bind(tenant.as_str())
            .bind(contract.name().as_str())
            .bind(contract.version() as i32)
            .bind(now)
            .bind(&self.event_ids)
            .bind(&self.fingerprints)
            .bind(&self.payloads)
            .bind(&self.occurred)
            .bind(&self.days)
    }
}

/// The batched insert; `{table}` is one of [`EventTable`]'s names. The partition key
/// `occurred_day` is computed once, in Rust ([`partitions::occurred_day`]).
const PG_INSERT_UNNEST: &str = concat!(insert_rows!(), " ON CONFLICT DO NOTHING");

/// A primary-key probe per id, with its day, so only the partition of that day is read.
const PG_SELECT_FINGERPRINTS: &str = "SELECT u.event_id,
       (SELECT e.fingerprint FROM {table} e
         WHERE e.tenant_id = $1 AND e.contract_name = $2 AND e.event_id = decode(u.event_id, 'hex')
           AND e.occurred_day = u.occurred_day)
     FROM unnest($3::text[], $4::int4[]) AS u(event_id, occurred_day)";

const PG_SELECT_PAYLOAD: &str = "SELECT payload FROM {table}
     WHERE tenant_id = $1 AND contract_name = $2 AND event_id = decode($3, 'hex') AND occurred_day = $4";

const SQLITE_SELECT_PAYLOAD: &str =
    "SELECT payload FROM events WHERE tenant_id = $1 AND contract_name = $2 AND event_id = $3";

/// Where a batch of rows goes: the table (PostgreSQL), the tenant and the contract.
pub(crate) struct Target<'a> {
    pub(crate) table: EventTable,
    pub(crate) tenant: &'a TenantId,
    pub(crate) contract: &'a Contract,
}

/// PostgreSQL's answer to a row whose partition key no partition covers.
pub(crate) fn no_partition(err: sqlx::Error) -> StoreError {
    match &err {
        sqlx::Error::Database(db)
            if db.code().as_deref() == Some("23514")
                && db.message().starts_with("no partition of relation") =>
        {
            StoreError::OutsideHorizon
        }
        // Through `From`, which notes a refusal to write (`25006`) for the pools.
        _ => StoreError::from(err),
    }
}

impl Store {
    /// Stores identified events of one contract in one transaction, durable before
    /// returning. Returns one outcome per input, in input order.
    pub async fn insert_events(
        &self,
        tenant: &TenantId,
        contract: &Contract,
        events: &[NewEvent],
    ) -> Result<Vec<EventOutcome>, StoreError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.begin().await?;
        let outcomes = tx.insert_events(tenant, contract, events).await?;
        tx.commit().await?;
        Ok(outcomes)
    }
}

impl StoreTx {
    /// The latest registered version of a tenant's contract, read in this transaction
    /// (one primary-key probe): a write that resolved "the latest version" from a server's
    /// per-process memory checks with it, in the transaction that would store it, that no
    /// newer version was registered meanwhile (`crates/server/src/lookups.rs`).
    pub async fn latest_contract_version(
        &mut self,
        tenant: &TenantId,
        name: &traqlyte_identity::ContractName,
    ) -> Result<Option<u32>, StoreError> {
        let latest: Option<i64> = with_tx!(self, |conn| {
            sqlx::query_scalar(
                "SELECT CAST(MAX(version) AS BIGINT) FROM contracts
                 WHERE tenant_id = $1 AND name = $2",
            )
            .bind(tenant.as_str())
            .bind(name.as_str())
            .fetch_one(&mut *conn)
            .await?
        });
        latest
            .map(|v| {
                u32::try_from(v).map_err(|_| StoreError::Corrupt(format!("contract version {v}")))
            })
            .transpose()
    }

    /// [`Store::insert_events`] inside a caller's transaction (so other writes, such as a
    /// lineage graph update, can commit atomically with the events).
    ///
    /// On PostgreSQL a live transaction writes the partitions inside the dedupe horizon
    /// only: an event whose day has no attached partition fails the call with
    /// [`StoreError::OutsideHorizon`], never a second row elsewhere. A backfill's
    /// transaction ([`Store::begin_backfill`]) sends each event of an older day to the
    /// detached partitions instead, where their own primary keys reconcile it.
    pub async fn insert_events(
        &mut self,
        tenant: &TenantId,
        contract: &Contract,
        events: &[NewEvent],
    ) -> Result<Vec<EventOutcome>, StoreError> {
        let TxInner::Postgres(conn) = &mut self.inner else {
            return self
                .insert_into(EventTable::Live, tenant, contract, events)
                .await;
        };
        if !self.any_age {
            return self
                .insert_into(EventTable::Live, tenant, contract, events)
                .await;
        }
        let (attached, detached) = partitions::partition_days(conn).await?;
        let mut days = PartitionDays::new(attached, detached);
        // Old days without a table yet: each gets a detached one before it is written.
        let mut missing: Vec<i32> = Vec::new();
        for event in events {
            let day = partition_day(contract, event.identified.occurred_at_us);
            match days.route(day, true) {
                DayRoute::Refused => return Err(StoreError::OutsideHorizon),
                DayRoute::Old if !days.detached.contains(&day) => missing.push(day),
                DayRoute::Old | DayRoute::Attached => {}
            }
        }
        if !missing.is_empty() {
            missing.sort_unstable();
            missing.dedup();
            let pool = self.ddl_pool.as_ref().ok_or_else(|| {
                StoreError::Corrupt("a PostgreSQL transaction without its pool".into())
            })?;
            // A day a maintenance run (with a longer horizon) attached since the listing
            // above is written to `events`, where its live duplicates will look.
            days.attached
                .extend(partitions::create_detached_days(pool, &missing).await?);
            // This transaction may have written `events_detached` or `events` already (a
            // dry run's earlier batch) with a statement PostgreSQL keeps prepared: such a
            // statement routes rows by the partitions it knew, and the new day's row would
            // find none. Locking each new partition here makes this transaction take in
            // the other connection's attach before its next insert.
            if let TxInner::Postgres(conn) = &mut self.inner {
                partitions::lock_days(conn, &missing).await?;
            }
        }
        let mut live: (Vec<usize>, Vec<NewEvent>) = (Vec::new(), Vec::new());
        let mut old: (Vec<usize>, Vec<NewEvent>) = (Vec::new(), Vec::new());
        for (index, event) in events.iter().enumerate() {
            let day = partition_day(contract, event.identified.occurred_at_us);
            let group = if matches!(days.route(day, false), DayRoute::Attached) {
                &mut live
            } else {
                &mut old
            };
            group.0.push(index);
            group.1.push(event.clone());
        }
        let mut outcomes: Vec<Option<EventOutcome>> = vec![None; events.len()];
        for (table, (indices, group)) in [(EventTable::Live, live), (EventTable::Detached, old)] {
            if group.is_empty() {
                continue;
            }
            let stored = self.insert_into(table, tenant, contract, &group).await?;
            for (index, outcome) in indices.into_iter().zip(stored) {
                outcomes[index] = Some(outcome);
            }
        }
        outcomes
            .into_iter()
            .map(|o| o.ok_or_else(|| StoreError::Corrupt("an event without outcome".into())))
            .collect()
    }

    /// For each of `events`, whether this transaction's insert of it would fail with
    /// [`StoreError::OutsideHorizon`]: a live transaction's, its day has no attached
    /// partition (a day inside a server's horizon that maintenance with a shorter one
    /// detached); a backfill's, its day is one maintenance has not created yet. Read in
    /// this transaction; always `false` on SQLite (one table).
    pub async fn lacking_partition(
        &mut self,
        contract: &Contract,
        events: &[NewEvent],
    ) -> Result<Vec<bool>, StoreError> {
        let TxInner::Postgres(conn) = &mut self.inner else {
            return Ok(vec![false; events.len()]);
        };
        let (attached, detached) = partitions::partition_days(conn).await?;
        let days = PartitionDays::new(attached, detached);
        Ok(events
            .iter()
            .map(|event| {
                let day = partition_day(contract, event.identified.occurred_at_us);
                matches!(days.route(day, self.any_age), DayRoute::Refused)
            })
            .collect())
    }

    /// The dedupe path into one table (on PostgreSQL; SQLite has one table).
    async fn insert_into(
        &mut self,
        table: EventTable,
        tenant: &TenantId,
        contract: &Contract,
        events: &[NewEvent],
    ) -> Result<Vec<EventOutcome>, StoreError> {
        // A batch whose every item was refused stores nothing, and counts nothing either:
        // bad input writes no row, not even a tally of zeros.
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let batch = Batch::new(events);
        let name = contract.name().as_str();
        let now = crate::now_us();
        let inserted = self
            .insert_candidates(table, tenant, contract, &batch, now)
            .await?;
        let mut held: HashMap<EventId, Held> = HashMap::with_capacity(batch.candidates.len());
        for &index in &batch.candidates {
            let event = &batch.events[index].identified;
            if inserted.contains(&event.event_id) {
                held.insert(event.event_id.clone(), Held::inserted(&event.fingerprint));
            }
        }
        let conflicting: Vec<(&EventId, i32)> = batch
            .candidates
            .iter()
            .map(|&i| &batch.events[i].identified)
            .filter(|e| !held.contains_key(&e.event_id))
            .map(|e| (&e.event_id, partition_day(contract, e.occurred_at_us)))
            .collect();
        for (id, fingerprint) in self
            .stored_fingerprints(table, tenant, name, &conflicting)
            .await?
        {
            held.insert(id, Held::stored(fingerprint));
        }
        // Only on the rare collision path: corrections stored for those ids turn a resend
        // of corrected content into a retry.
        let mut colliding = plan::colliding_stored_ids(&batch, &held);
        if !colliding.is_empty() {
            for found in self
                .superseding_fingerprints(tenant, contract.name(), &colliding)
                .await?
            {
                let id = stored_event_id(&found.event_id)?;
                if let Some(row) = held.get_mut(&id) {
                    row.superseded_by
                        .push(stored_fingerprint(&found.fingerprint)?);
                }
            }
            colliding = plan::colliding_stored_ids(&batch, &held);
        }
        for id in colliding {
            let day = conflicting
                .iter()
                .find(|(c, _)| **c == id)
                .map_or(partitions::UNTIMED_DAY, |(_, day)| *day);
            let payload = self.stored_payload(table, tenant, name, &id, day).await?;
            if let Some(row) = held.get_mut(&id) {
                row.payload = Some(payload);
            }
        }
        let resolution = plan::resolve(&batch, &held)?;
        debug_assert_eq!(resolution.outcomes.len(), events.len());
        self.log_collisions(tenant, contract, &resolution.collisions, now)
            .await?;
        let counts = TallyCounts {
            inserted: resolution.inserted,
            duplicates: resolution.duplicates,
            collisions: resolution.collisions.len() as i64,
            // Every event of a call into the detached partitions was reconciled outside
            // the live horizon: counted apart as well (`GET /stats`, `late`).
            late: if table == EventTable::Detached {
                events.len() as i64
            } else {
                0
            },
        };
        self.tally(tenant, name, now, &counts).await?;
        Ok(resolution.outcomes)
    }

    /// Inserts the batch's candidates; returns the ids this statement inserted.
    async fn insert_candidates(
        &mut self,
        table: EventTable,
        tenant: &TenantId,
        contract: &Contract,
        batch: &Batch<'_>,
        now: i64,
    ) -> Result<std::collections::HashSet<EventId>, StoreError> {
        let candidates: Vec<&NewEvent> =
            batch.candidates.iter().map(|&i| &batch.events[i]).collect();
        let target = Target {
            table,
            tenant,
            contract,
        };
        let (ids, _) = self
            .insert_event_rows(&target, &candidates, now, true)
            .await?;
        ids.iter().map(|id| stored_event_id(id)).collect()
    }

    /// Inserts event rows with `ON CONFLICT DO NOTHING`: one `unnest` statement on
    /// PostgreSQL, multi-row `VALUES` statements on SQLite. Returns the ids inserted (when
    /// `returning`) and how many rows were inserted.
    pub(crate) async fn insert_event_rows(
        &mut self,
        target: &Target<'_>,
        rows: &[&NewEvent],
        now: i64,
        returning: bool,
    ) -> Result<(Vec<String>, u64), StoreError> {
        let (table, tenant) = (target.table, target.tenant);
        let (name, version) = (target.contract.name().as_str(), target.contract.version());
        let suffix = if returning { " RETURNING event_id" } else { "" };
        let pg_suffix = if returning {
            " RETURNING encode(event_id, 'hex') AS event_id"
        } else {
            ""
        };
        let mut ids = Vec::new();
        let mut count = 0;
        match &mut self.inner {
            TxInner::Postgres(conn) => {
                let columns = RowColumns::new(target.contract, rows);
                let sql = format!(
                    "{}{pg_suffix}",
                    PG_INSERT_UNNEST.replace("{table}", table.name())
                );
                let query = columns.bind(sqlx::query(&sql), tenant, target.contract, now);
                if returning {
                    ids = query
                        .fetch_all(&mut **conn)
                        .await
                        .map_err(no_partition)?
                        .iter()
                        .map(|row| row.try_get("event_id"))
                        .collect::<Result<_, _>>()?;
                } else {
                    count = query
                        .execute(&mut **conn)
                        .await
                        .map_err(no_partition)?
                        .rows_affected();
                }
            }
            TxInner::Sqlite(conn) => {
                for chunk in rows.chunks(SQLITE_ROWS_PER_STATEMENT) {
                    let sql = format!(
                        "INSERT INTO events (tenant_id, contract_name, event_id, contract_version, fingerprint, payload, occurred_at_us, received_at_us) VALUES {} ON CONFLICT DO NOTHING{suffix}",
                        vec!["(?,?,?,?,?,?,?,?)"; chunk.len()].join(",")
                    );
                    let mut query = sqlx::query(&sql);
                    for e in chunk {
                        query = query
                            .bind(tenant.as_str())
                            .bind(name)
                            .bind(e.identified.event_id.as_str())
                            .bind(i64::from(version))
                            .bind(e.identified.fingerprint.as_str())
                            .bind(e.payload.as_str())
                            .bind(e.identified.occurred_at_us)
                            .bind(now);
                    }
                    if returning {
                        for row in query.fetch_all(&mut **conn).await? {
                            ids.push(row.try_get("event_id")?);
                        }
                    } else {
                        count += query.execute(&mut **conn).await?.rows_affected();
                    }
                }
            }
        }
        if returning {
            count = ids.len() as u64;
        }
        Ok((ids, count))
    }

    /// `(event_id, fingerprint)` of the stored rows among `ids`.
    async fn stored_fingerprints(
        &mut self,
        table: EventTable,
        tenant: &TenantId,
        contract: &str,
        keys: &[(&EventId, i32)],
    ) -> Result<Vec<(EventId, Fingerprint)>, StoreError> {
        let ids: Vec<&str> = keys.iter().map(|(id, _)| id.as_str()).collect();
        let days: Vec<i32> = keys.iter().map(|(_, day)| *day).collect();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut found = Vec::with_capacity(ids.len());
        match &mut self.inner {
            TxInner::Postgres(conn) => {
                // Read Committed: this statement sees rows committed by the concurrent
                // transactions our insert waited for.
                // One primary-key probe per id, whatever the table's statistics say (a generic
                // plan for `event_id = ANY($3)` scanned the tenant's whole key range).
                let sql = PG_SELECT_FINGERPRINTS.replace("{table}", table.name());
                let rows: Vec<(String, Option<String>)> = sqlx::query_as(&sql)
                    .bind(tenant.as_str())
                    .bind(contract)
                    .bind(&ids)
                    .bind(&days)
                    .fetch_all(&mut **conn)
                    .await?;
                found.extend(rows.into_iter().filter_map(|(id, f)| Some((id, f?))));
            }
            TxInner::Sqlite(conn) => {
                for chunk in ids.chunks(SQLITE_ROWS_PER_STATEMENT) {
                    let sql = format!("SELECT event_id, fingerprint FROM events WHERE tenant_id = ? AND contract_name = ? AND event_id IN ({})", vec!["?"; chunk.len()].join(","));
                    let mut query = sqlx::query_as(&sql).bind(tenant.as_str()).bind(contract);
                    for id in chunk {
                        query = query.bind(*id);
                    }
                    let rows: Vec<(String, String)> = query.fetch_all(&mut **conn).await?;
                    found.extend(rows);
                }
            }
        }
        found
            .iter()
            .map(|(id, f)| Ok((stored_event_id(id)?, stored_fingerprint(f)?)))
            .collect()
    }

    async fn stored_payload(
        &mut self,
        table: EventTable,
        tenant: &TenantId,
        contract: &str,
        id: &EventId,
        day: i32,
    ) -> Result<String, StoreError> {
        let query = match &mut self.inner {
            TxInner::Postgres(conn) => {
                let sql = PG_SELECT_PAYLOAD.replace("{table}", table.name());
                let query = sqlx::query_scalar(&sql)
                    .bind(tenant.as_str())
                    .bind(contract);
                query
                    .bind(id.as_str())
                    .bind(day)
                    .fetch_one(&mut **conn)
                    .await
            }
            TxInner::Sqlite(conn) => {
                let query = sqlx::query_scalar(SQLITE_SELECT_PAYLOAD).bind(tenant.as_str());
                query
                    .bind(contract)
                    .bind(id.as_str())
                    .fetch_one(&mut **conn)
                    .await
            }
        };
        Ok(query?)
    }

    async fn log_collisions(
        &mut self,
        tenant: &TenantId,
        contract: &Contract,
        collisions: &[plan::Collision<'_>],
        now: i64,
    ) -> Result<(), StoreError> {
        if !self.collision_log {
            return Ok(());
        }
        // In key order, as the event rows are inserted: two transactions logging the same
        // collisions in other orders waited on each other's keys (a read-back's deadlock).
        let mut ordered: Vec<&plan::Collision<'_>> = collisions.iter().collect();
        ordered.sort_by(|a, b| collision_key(a).cmp(&collision_key(b)));
        for c in ordered {
            let row = crate::ops::CollisionInsert {
                contract: contract.name().as_str(),
                event_id: c.event.identified.event_id.as_str(),
                contract_version: i64::from(contract.version()),
                stored_fingerprint: c.stored_fingerprint.as_str(),
                incoming_fingerprint: c.event.identified.fingerprint.as_str(),
                stored_payload: &c.stored_payload,
                incoming_payload: &c.event.payload,
            };
            self.log_collision(tenant, &row, now).await?;
        }
        Ok(())
    }

    async fn tally(
        &mut self,
        tenant: &TenantId,
        contract: &str,
        now: i64,
        counts: &TallyCounts,
    ) -> Result<(), StoreError> {
        let source = self.source.as_str().to_string();
        with_tx!(self, |conn| sqlx::query(crate::sql::INSERT_TALLY)
            .bind(tenant.as_str())
            .bind(contract)
            .bind(now)
            .bind(counts.inserted)
            .bind(counts.duplicates)
            .bind(counts.collisions)
            .bind(counts.late)
            .bind(&source)
            .execute(&mut *conn)
            .await
            .map(|_| ())?);
        Ok(())
    }
}

/// A collision's key in `event_collision_keys` (besides the tenant and contract): the
/// order its log takes them in.
fn collision_key<'a>(c: &'a plan::Collision<'_>) -> (&'a str, &'a str, &'a str) {
    let event = &c.event.identified;
    (
        event.event_id.as_str(),
        c.stored_fingerprint.as_str(),
        event.fingerprint.as_str(),
    )
}

/// One tally row's counts.
struct TallyCounts {
    inserted: i64,
    duplicates: i64,
    collisions: i64,
    late: i64,
}

/// Width of a rolled-up tally row.
pub const TALLY_BUCKET_US: i64 = 60_000_000;

/// The other per-request count tables folded beside `event_tallies`: (table, the
/// columns that key a row besides `at_us`, the summed columns).
const OTHER_TALLIES: [(&str, &str, &str); 2] = [
    (
        "source_tallies",
        "tenant_id, source_id",
        "inserted, duplicates, collisions, rejected",
    ),
    (
        "binding_tallies",
        "tenant_id, campaign_id, metric, event",
        "outcomes, unassigned, unusable",
    ),
];

/// Width of an hour row: minute rows older than [`MINUTE_TALLIES_KEPT_US`] are folded
/// into one row per hour (`rolled_up = 2`).
const TALLY_HOUR_US: i64 = 3_600_000_000;

/// How long per-minute tally rows are kept before they are folded into hours: the
/// duplicate trend's minute buckets reach back this far, and no further.
pub const MINUTE_TALLIES_KEPT_US: i64 = 48 * TALLY_HOUR_US;

/// `event_tallies` as one of the folded tables (keys besides `at_us`, summed columns).
const EVENT_TALLIES: (&str, &str, &str) = (
    "event_tallies",
    "tenant_id, contract_name, source",
    "inserted, duplicates, collisions, late",
);

/// A fold of one tally table: rows at level `from` (`rolled_up`: 0 per call, 1 per
/// minute, 2 per hour) older than `$1` become rows at level `to`, one per key and bucket
/// of width `$2`. PostgreSQL's single statement (answering how many rows it moved), or
/// SQLite's insert and delete (run in one `BEGIN IMMEDIATE` transaction; the delete's
/// count is the rows moved); the flag says whether a statement takes `$2`.
fn fold_sql(
    (table, keys, sums): (&str, &str, &str),
    (from, to): (u8, u8),
    postgres: bool,
) -> Vec<(String, bool)> {
    let summed: Vec<String> = sums.split(", ").map(|c| format!("SUM({c})")).collect();
    let summed = summed.join(", ");
    if postgres {
        let fold = format!(
            "WITH moved AS (DELETE FROM {table} WHERE rolled_up = {from} AND at_us < $1
               RETURNING {keys}, at_us, {sums}),
             folded AS (INSERT INTO {table} ({keys}, at_us, {sums}, rolled_up)
               SELECT {keys}, (at_us / $2) * $2, {summed}, {to}
               FROM moved GROUP BY {keys}, (at_us / $2) * $2)
             SELECT COUNT(*) FROM moved"
        );
        return vec![(fold, true)];
    }
    let insert = format!(
        "INSERT INTO {table} ({keys}, at_us, {sums}, rolled_up)
         SELECT {keys}, (at_us / ?2) * ?2, {summed}, {to}
         FROM {table} WHERE rolled_up = {from} AND at_us < ?1 GROUP BY {keys}, (at_us / ?2) * ?2"
    );
    let delete = format!("DELETE FROM {table} WHERE rolled_up = {from} AND at_us < ?1");
    vec![(insert, true), (delete, false)]
}

/// Runs one table's [`fold_sql`] in `tx`; how many rows it folded.
async fn fold_tallies(
    tx: &mut StoreTx,
    table: (&str, &str, &str),
    levels: (u8, u8),
    before_us: i64,
    width_us: i64,
) -> Result<u64, StoreError> {
    let mut folded = 0;
    match &mut tx.inner {
        TxInner::Postgres(conn) => {
            for (sql, _) in fold_sql(table, levels, true) {
                let moved: i64 = sqlx::query_scalar(&sql)
                    .bind(before_us)
                    .bind(width_us)
                    .fetch_one(&mut **conn)
                    .await?;
                folded = u64::try_from(moved).unwrap_or(0);
            }
        }
        TxInner::Sqlite(conn) => {
            for (sql, bucketed) in fold_sql(table, levels, false) {
                let query = sqlx::query(&sql).bind(before_us);
                let query = if bucketed {
                    query.bind(width_us)
                } else {
                    query
                };
                folded = query.execute(&mut **conn).await?.rows_affected();
            }
        }
    }
    Ok(folded)
}

impl Store {
    /// Folds the per-call tally rows of the minutes that ended before `before_us` into one
    /// row per (tenant, contract, source, minute), so `GET /stats` reads a bounded number
    /// of rows; the per-request rows of Segment sources and metric bindings likewise (per
    /// source, per binding). Only whole minutes are folded: a minute split between two
    /// rounds would be two rows (a soak review counted 1.7 a key and minute). Counts are
    /// unchanged: on PostgreSQL the rows are moved by one statement (delete-returning
    /// feeding the insert), on SQLite inside one `BEGIN IMMEDIATE` transaction, so no
    /// concurrent insert can slip between reading and deleting. Returns how many per-call
    /// `event_tallies` rows were folded.
    pub async fn roll_up_tallies(&self, before_us: i64) -> Result<u64, StoreError> {
        let before_us = before_us.div_euclid(TALLY_BUCKET_US) * TALLY_BUCKET_US;
        let mut tx = self.begin().await?;
        for table in OTHER_TALLIES {
            fold_tallies(&mut tx, table, (0, 1), before_us, TALLY_BUCKET_US).await?;
        }
        let folded =
            fold_tallies(&mut tx, EVENT_TALLIES, (0, 1), before_us, TALLY_BUCKET_US).await?;
        tx.commit().await?;
        Ok(folded)
    }

    /// Folds the per-minute tally rows (of all three tally tables) from hours that ended
    /// before `before_us` into one row per key and hour, so that what `GET /stats` and
    /// `GET /sources` sum grows by at most one row a key an hour, not one a minute.
    /// Counts are unchanged (one statement or one `BEGIN IMMEDIATE` transaction, as
    /// [`Store::roll_up_tallies`]); only whole hours are folded, so an hour is either all
    /// minutes or one row. The server calls this with now − [`MINUTE_TALLIES_KEPT_US`].
    pub async fn roll_up_tallies_to_hours(&self, before_us: i64) -> Result<(), StoreError> {
        let before_us = before_us.div_euclid(TALLY_HOUR_US) * TALLY_HOUR_US;
        let mut tx = self.begin().await?;
        for table in std::iter::once(EVENT_TALLIES).chain(OTHER_TALLIES) {
            fold_tallies(&mut tx, table, (1, 2), before_us, TALLY_HOUR_US).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Rows in the tally table (for tests and operators).
    pub async fn tally_rows(&self) -> Result<i64, StoreError> {
        crate::tx::with_pool!(self, reader, |pool| Ok(sqlx::query_scalar(
            "SELECT COUNT(*) FROM event_tallies"
        )
        .fetch_one(pool)
        .await?))
    }
}

/// The days of the `events` partitions as a transaction found them
/// ([`partitions::partition_days`]): where it may write an event of each day.
struct PartitionDays {
    attached: Vec<i32>,
    detached: Vec<i32>,
    /// The latest attached day.
    last: i32,
    /// The oldest attached day with a time.
    oldest: Option<i32>,
}

/// Where an event of a day goes ([`PartitionDays::route`]).
enum DayRoute {
    /// An attached partition (or the untimed one).
    Attached,
    /// A detached partition, there or to be created: a backfill's transaction only.
    Old,
    /// Nowhere: [`StoreError::OutsideHorizon`].
    Refused,
}

impl PartitionDays {
    fn new(attached: Vec<i32>, detached: Vec<i32>) -> PartitionDays {
        let last = attached
            .iter()
            .copied()
            .max()
            .unwrap_or(partitions::UNTIMED_DAY);
        let oldest = attached
            .iter()
            .copied()
            .filter(|&day| day != partitions::UNTIMED_DAY)
            .min();
        PartitionDays {
            attached,
            detached,
            last,
            oldest,
        }
    }

    /// A live transaction writes attached days only; a backfill's (`any_age`) also
    /// older ones, in detached partitions.
    fn route(&self, day: i32, any_age: bool) -> DayRoute {
        if day == partitions::UNTIMED_DAY || self.attached.contains(&day) {
            return DayRoute::Attached;
        }
        if !any_age {
            return DayRoute::Refused;
        }
        if day >= self.last {
            // A day after every partition: a later partition of it would not see a row
            // stored elsewhere now. Run `partitions maintain` first.
            return DayRoute::Refused;
        }
        if !self.detached.contains(&day) && self.oldest.is_some_and(|oldest| day > oldest) {
            // A day between attached ones without a table is one maintenance is about to
            // attach (it creates them in several transactions, oldest first): a detached
            // table of it now would shadow that attached one for ever. Refused until
            // maintenance has run.
            return DayRoute::Refused;
        }
        DayRoute::Old
    }
}

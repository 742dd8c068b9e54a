//! Group commit's one-statement writes of new events, new run events and first
//! assignments (PostgreSQL).
//!
//! A group-committed batch of single events used to be six round trips to the database:
//! `BEGIN`, the batch's checks, the insert, the tally row, `COMMIT`, and the pool's ping
//! on release. On a machine where a round trip costs tens of microseconds of CPU on
//! each side, those trips, not the rows, were most of what a batch cost. The usual batch
//! (every event new, every key working, its contract still the latest) needs none of the
//! reads that come after the insert, so [`Store::insert_new_events`] writes it as one
//! statement committed on its own: the checks, the insert and the tally row together,
//! atomic as any single statement. [`Store::insert_new_run_events`] does the same for
//! OpenLineage RunEvents and adds, in the same statement, the graph rows of the events it
//! inserted (and of no other), and [`Store::insert_new_assignments`] for first
//! assignments, whose usual batch names only units not yet assigned. Whatever one did
//! not insert (a conflicting id, or the
//! checks failed and it wrote nothing) the caller writes through the transactional path,
//! which judges a conflict as a duplicate or a collision and answers a failed check.

use std::collections::HashSet;
use std::sync::LazyLock;

use traqlyte_identity::openlineage::run_event_contract;
use traqlyte_identity::{Contract, EventId};

use sqlx::Row;

use crate::assignments_batch::{insert_assignment_rows, AssignmentColumns};
use crate::events::{insert_rows, RowColumns};
use crate::lineage::{graph_inserts, GraphColumns, RunEventRow};
use crate::model::stored_event_id;
use crate::{
    ApiKey, Assignment, AssignmentId, Backend, IngestSource, NewEvent, Store, StoreError, TenantId,
};

/// True when every key hash of the array `$p` names a key that is not revoked.
macro_rules! keys_work {
    ($p:literal) => {
        concat!(
            "(SELECT COUNT(*) FROM api_keys WHERE key_hash = ANY(",
            $p,
            "::text[]) AND revoked_at_us IS NULL) = cardinality(",
            $p,
            "::text[])"
        )
    };
}

/// `ok`: every key of `$10` works and, when `$11`, `$3` is the contract's latest version;
/// `ins`: the rows, only when `ok`; `tally`: one row (source `$12`) counting what `ins`
/// inserted. `{table}` is `events` (the live partitions).
macro_rules! checked_insert {
    () => {
        concat!(
            "ok AS (
       SELECT ",
            keys_work!("$10"),
            "
          AND (NOT $11 OR (SELECT MAX(version) FROM contracts WHERE tenant_id = $1 AND name = $2) = $3) AS ok),
     ins AS (",
            insert_rows!(),
            "
       WHERE (SELECT ok FROM ok)
       ON CONFLICT DO NOTHING
       RETURNING event_id),
     tally AS (
       INSERT INTO event_tallies (tenant_id, contract_name, at_us, inserted, duplicates, collisions, late, source)
       SELECT $1, $2, $4, COUNT(*), 0, 0, 0, $12 FROM ins HAVING COUNT(*) > 0)"
        )
    };
}

/// The checked insert ([`checked_insert!`]); the statement returns the ids it inserted.
pub(crate) const PG_INSERT_CHECKED: &str = concat!(
    "WITH ",
    checked_insert!(),
    "
     SELECT encode(event_id, 'hex') FROM ins"
);

/// [`PG_INSERT_CHECKED`] on the live partitions, built once rather than per batch.
static PG_INSERT_EVENTS_CHECKED: LazyLock<String> =
    LazyLock::new(|| PG_INSERT_CHECKED.replace("{table}", "events"));

/// The checked insert of run events, then the graph rows of the events it inserted
/// ([`graph_inserts`], arrays from `$13`), in the graph's one order; returns the ids it
/// inserted.
static PG_INSERT_RUN_EVENTS_CHECKED: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH {},
     inserted(ev) AS (SELECT encode(event_id, 'hex') FROM ins),
     {}
     SELECT ev FROM inserted WHERE (SELECT COUNT(*) FROM outputs) >= 0",
        checked_insert!().replace("{table}", "events"),
        graph_inserts("$1", "$4", 13)
    )
});

/// `ok`: every key of `$8` works and every campaign version of `$9`/`$10` is still its
/// campaign's latest; `ins`: the proposals (`$1`–`$7`), only when `ok`. The statement
/// returns the assignment ids it inserted.
pub(crate) const PG_INSERT_ASSIGNMENTS_CHECKED: &str = concat!(
    "WITH ok AS (
       SELECT ",
    keys_work!("$8"),
    "
          AND NOT EXISTS (
            SELECT 1 FROM unnest($9::text[], $10::int8[]) AS c(id, version)
            WHERE (SELECT CAST(v.version AS BIGINT) FROM campaign_versions v
                   WHERE v.tenant_id = $1 AND v.campaign_id = c.id
                   ORDER BY v.version DESC LIMIT 1) IS DISTINCT FROM c.version) AS ok),
     ins AS (",
    insert_assignment_rows!(),
    "
       WHERE (SELECT ok FROM ok)
       ON CONFLICT DO NOTHING
       RETURNING assignment_id)
     SELECT assignment_id FROM ins"
);

impl Store {
    /// Inserts `events` (one tenant, one contract version, distinct ids) into the live
    /// partitions in one statement committed on its own, durable before returning, with
    /// their tally row — if every one of `keys` still works and, when `check_latest`,
    /// `contract` is still its name's latest version. Returns the ids it inserted: none
    /// when a check failed (nothing written) and none of a conflicting id, both left to
    /// the caller's transactional path ([`StoreTx::insert_events`]).
    ///
    /// `None` when this path does not apply: SQLite (its single writer has no round trips
    /// to save) or ids repeated within `events` (the transactional path judges the second
    /// against the first).
    ///
    /// [`StoreTx::insert_events`]: crate::StoreTx::insert_events
    pub async fn insert_new_events(
        &self,
        tenant: &TenantId,
        contract: &Contract,
        keys: &[&ApiKey],
        check_latest: bool,
        events: &[&NewEvent],
    ) -> Result<Option<HashSet<EventId>>, StoreError> {
        let checked = Checked {
            tenant,
            contract,
            keys,
            check_latest,
        };
        self.insert_checked(&PG_INSERT_EVENTS_CHECKED, &checked, events, None)
            .await
    }

    /// [`Store::insert_new_events`] for RunEvents under the built-in contract, with the
    /// graph rows (runs, run inputs and outputs) of the events it inserted
    /// in the same statement, exactly those the transactional path
    /// ([`StoreTx::insert_run_events`]) would write for them.
    ///
    /// [`StoreTx::insert_run_events`]: crate::StoreTx::insert_run_events
    pub async fn insert_new_run_events(
        &self,
        tenant: &TenantId,
        keys: &[&ApiKey],
        rows: &[&RunEventRow],
    ) -> Result<Option<HashSet<EventId>>, StoreError> {
        let checked = Checked {
            tenant,
            contract: run_event_contract(),
            keys,
            check_latest: false,
        };
        let events: Vec<&NewEvent> = rows.iter().map(|r| &r.event).collect();
        let graph = GraphColumns::new(rows);
        self.insert_checked(
            &PG_INSERT_RUN_EVENTS_CHECKED,
            &checked,
            &events,
            Some(&graph),
        )
        .await
    }

    /// Inserts proposed first assignments (one tenant, each unit of a campaign once) in one
    /// statement committed on its own, durable before returning — if every one of `keys`
    /// still works and the campaign version of each proposal marked remembered (its version
    /// came from the server's memory) is still its campaign's latest. Returns the ids it
    /// inserted, each stored exactly as proposed: none when a check failed (nothing
    /// written) and none of a unit already assigned, both left to the caller's
    /// transactional path ([`StoreTx::assign_many`], which reads the stored assignment).
    ///
    /// `None` when this path does not apply: SQLite, or a unit proposed twice.
    ///
    /// [`StoreTx::assign_many`]: crate::StoreTx::assign_many
    pub async fn insert_new_assignments(
        &self,
        tenant: &TenantId,
        keys: &[&ApiKey],
        proposals: &[(&Assignment, bool)],
    ) -> Result<Option<HashSet<AssignmentId>>, StoreError> {
        let Backend::Postgres(pg) = &self.backend else {
            return Ok(None);
        };
        if proposals.is_empty() {
            return Ok(Some(HashSet::new()));
        }
        // Sorted by unit, as the transactional path's rows are.
        let rows: Vec<&Assignment> = proposals.iter().map(|(a, _)| *a).collect();
        let Some(rows) = sorted_distinct(rows, |a| (&a.campaign_id, &a.unit_id)) else {
            return Ok(None);
        };
        let mut remembered: Vec<(&str, i64)> = proposals
            .iter()
            .filter(|(_, remembered)| *remembered)
            .map(|(a, _)| (a.campaign_id.as_str(), a.version))
            .collect();
        remembered.sort_unstable();
        remembered.dedup();
        let (campaigns, versions): (Vec<&str>, Vec<i64>) = remembered.into_iter().unzip();
        let columns = AssignmentColumns::new(&rows);
        let inserted = columns
            .bind(sqlx::query(PG_INSERT_ASSIGNMENTS_CHECKED), tenant)
            .bind(key_hashes(keys))
            .bind(campaigns)
            .bind(versions)
            .fetch_all(&pg.pool)
            .await?;
        inserted
            .iter()
            .map(|row| {
                let id: String = row.try_get(0)?;
                AssignmentId::try_from(id).map_err(|e| StoreError::Corrupt(e.to_string()))
            })
            .collect::<Result<HashSet<_>, _>>()
            .map(Some)
    }

    /// Runs a checked insert (`sql` begins with [`checked_insert!`]; `graph`, when given,
    /// binds `$13` on) and returns the ids it inserted; `None` where it does not apply.
    async fn insert_checked(
        &self,
        sql: &str,
        checked: &Checked<'_>,
        events: &[&NewEvent],
        graph: Option<&GraphColumns<'_>>,
    ) -> Result<Option<HashSet<EventId>>, StoreError> {
        let Backend::Postgres(pg) = &self.backend else {
            return Ok(None);
        };
        if events.is_empty() {
            return Ok(Some(HashSet::new()));
        }
        // Sorted by id, as the transactional path's candidates are.
        let Some(rows) = sorted_distinct(events.to_vec(), |e| &e.identified.event_id) else {
            return Ok(None);
        };
        let hashes = key_hashes(checked.keys);
        let columns = RowColumns::new(checked.contract, &rows);
        let source = IngestSource::http();
        let mut query = columns
            .bind(
                sqlx::query(sql),
                checked.tenant,
                checked.contract,
                crate::now_us(),
            )
            .bind(&hashes)
            .bind(checked.check_latest)
            .bind(source.as_str());
        if let Some(graph) = graph {
            query = graph.bind(query);
        }
        let inserted = query
            .fetch_all(&pg.pool)
            .await
            .map_err(crate::events::no_partition)?;
        inserted
            .iter()
            .map(|row| stored_event_id(row.try_get(0)?))
            .collect::<Result<HashSet<_>, _>>()
            .map(Some)
    }
}

/// `rows` sorted by `key`, so concurrent statements take index locks in one order; `None`
/// when two rows share a key (the transactional path judges the second against the first).
fn sorted_distinct<T, K: Ord>(mut rows: Vec<T>, key: impl Fn(&T) -> K) -> Option<Vec<T>> {
    rows.sort_by_key(&key);
    let repeated = rows.windows(2).any(|w| key(&w[0]) == key(&w[1]));
    (!repeated).then_some(rows)
}

/// The hashes of `keys`, each once, sorted.
fn key_hashes(keys: &[&ApiKey]) -> Vec<String> {
    let mut hashes: Vec<String> = keys.iter().map(|k| k.hash()).collect();
    hashes.sort_unstable();
    hashes.dedup();
    hashes
}

/// What a checked insert checks: the batch's tenant, contract and keys.
struct Checked<'a> {
    tenant: &'a TenantId,
    contract: &'a Contract,
    keys: &'a [&'a ApiKey],
    check_latest: bool,
}

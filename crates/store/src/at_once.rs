//! Group commit's one-statement write of new events (PostgreSQL).
//!
//! A group-committed batch of single events used to be six round trips to the database:
//! `BEGIN`, the batch's checks, the insert, the tally row, `COMMIT`, and the pool's ping
//! on release. On a machine where a round trip costs tens of microseconds of CPU on
//! each side, those trips, not the rows, were most of what a batch cost. The usual batch
//! (every event new, every key working, its contract still the latest) needs none of the
//! reads that come after the insert, so [`Store::insert_new_events`] writes it as one
//! statement committed on its own: the checks, the insert and the tally row together,
//! atomic as any single statement. Whatever it did not insert (a conflicting id, or the
//! checks failed and it wrote nothing) the caller writes through the transactional path,
//! which judges a conflict as a duplicate or a collision and answers a failed check.

use std::collections::HashSet;

use traqlyte_identity::{Contract, EventId};

use sqlx::Row;

use crate::events::{insert_rows, RowColumns};
use crate::model::stored_event_id;
use crate::{ApiKey, Backend, IngestSource, NewEvent, Store, StoreError, TenantId};

/// `ok`: every key of `$10` works and, when `$11`, `$3` is the contract's latest version;
/// `ins`: the rows, only when `ok`; `tally`: one row counting what `ins` inserted. The
/// statement returns the ids it inserted. `{table}` is `events` (the live partitions).
pub(crate) const PG_INSERT_CHECKED: &str = concat!(
    "WITH ok AS (
       SELECT (SELECT COUNT(*) FROM api_keys
               WHERE key_hash = ANY($10::text[]) AND revoked_at_us IS NULL) = cardinality($10::text[])
          AND (NOT $11 OR (SELECT MAX(version) FROM contracts WHERE tenant_id = $1 AND name = $2) = $3) AS ok),
     ins AS (",
    insert_rows!(),
    "
       WHERE (SELECT ok FROM ok)
       ON CONFLICT DO NOTHING
       RETURNING event_id),
     tally AS (
       INSERT INTO event_tallies (tenant_id, contract_name, at_us, inserted, duplicates, collisions, late, source)
       SELECT $1, $2, $4, COUNT(*), 0, 0, 0, $12 FROM ins HAVING COUNT(*) > 0)
     SELECT encode(event_id, 'hex') FROM ins"
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
        let Backend::Postgres(pg) = &self.backend else {
            return Ok(None);
        };
        if events.is_empty() {
            return Ok(Some(HashSet::new()));
        }
        // Sorted by id, as the transactional path's candidates are, so concurrent
        // statements take index locks in one order.
        let mut rows: Vec<&NewEvent> = events.to_vec();
        rows.sort_by(|a, b| a.identified.event_id.cmp(&b.identified.event_id));
        if rows
            .windows(2)
            .any(|w| w[0].identified.event_id == w[1].identified.event_id)
        {
            return Ok(None);
        }
        let mut hashes: Vec<String> = keys.iter().map(|k| k.hash()).collect();
        hashes.sort_unstable();
        hashes.dedup();
        let sql = PG_INSERT_CHECKED.replace("{table}", "events");
        let columns = RowColumns::new(contract, &rows);
        let inserted = columns
            .bind(sqlx::query(&sql), tenant, contract, crate::now_us())
            .bind(&hashes)
            .bind(check_latest)
            .bind(IngestSource::http().as_str())
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

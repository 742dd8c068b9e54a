//! SQL both backends share, written with `$N` placeholders, and row decoders.

use sqlx::{ColumnIndex, Decode, Row, Type};

use crate::{CollisionRecord, ContractStats, StoreError, StoredEvent};

pub(crate) const INSERT_CONTRACT: &str =
    "INSERT INTO contracts (tenant_id, name, version, definition, created_at_us)
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING";

pub(crate) const SELECT_CONTRACT: &str = "SELECT definition FROM contracts
     WHERE tenant_id = $1 AND name = $2 AND (CAST($3 AS BIGINT) IS NULL OR version = CAST($3 AS BIGINT))
     ORDER BY version DESC LIMIT 1";

pub(crate) const SELECT_CONTRACTS: &str =
    "SELECT definition FROM contracts WHERE tenant_id = $1 ORDER BY name, version";

pub(crate) const INSERT_COLLISION: &str = "INSERT INTO event_collisions
     (tenant_id, contract_name, event_id, contract_version, stored_fingerprint, incoming_fingerprint,
      stored_payload, incoming_payload, received_at_us)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";

pub(crate) const INSERT_TALLY: &str = "INSERT INTO event_tallies
     (tenant_id, contract_name, at_us, inserted, duplicates, collisions) VALUES ($1, $2, $3, $4, $5, $6)";

pub(crate) const SELECT_STATS: &str = "SELECT c.name,
       CAST(COALESCE(SUM(t.inserted), 0) AS BIGINT),
       CAST(COALESCE(SUM(t.duplicates), 0) AS BIGINT),
       CAST(COALESCE(SUM(t.collisions), 0) AS BIGINT)
     FROM (SELECT name FROM contracts WHERE tenant_id = $1
           UNION SELECT contract_name FROM event_tallies WHERE tenant_id = $1) c
     LEFT JOIN event_tallies t ON t.tenant_id = $1 AND t.contract_name = c.name
     GROUP BY c.name ORDER BY c.name";

pub(crate) const SELECT_EVENT: &str = "SELECT event_id, CAST(contract_version AS BIGINT), fingerprint, payload, occurred_at_us, received_at_us
     FROM events WHERE tenant_id = $1 AND contract_name = $2 AND event_id = $3";

pub(crate) const SELECT_COLLISIONS: &str =
    "SELECT collision_id, event_id, stored_fingerprint, incoming_fingerprint,
       stored_payload, incoming_payload, received_at_us
     FROM event_collisions WHERE tenant_id = $1 AND contract_name = $2
     ORDER BY collision_id DESC LIMIT $3";

pub(crate) fn stats_row<'r, R>(row: &'r R) -> Result<ContractStats, StoreError>
where
    R: Row,
    usize: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
{
    Ok(ContractStats {
        contract: row.try_get(0)?,
        stored: row.try_get(1)?,
        duplicates: row.try_get(2)?,
        collisions: row.try_get(3)?,
    })
}

pub(crate) fn event_row<'r, R>(row: &'r R) -> Result<StoredEvent, StoreError>
where
    R: Row,
    usize: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
    Option<i64>: Decode<'r, R::Database> + Type<R::Database>,
{
    Ok(StoredEvent {
        event_id: row.try_get(0)?,
        contract_version: row.try_get(1)?,
        fingerprint: row.try_get(2)?,
        payload: row.try_get(3)?,
        occurred_at_us: row.try_get(4)?,
        received_at_us: row.try_get(5)?,
    })
}

pub(crate) fn collision_row<'r, R>(row: &'r R) -> Result<CollisionRecord, StoreError>
where
    R: Row,
    usize: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
{
    Ok(CollisionRecord {
        collision_id: row.try_get(0)?,
        event_id: row.try_get(1)?,
        stored_fingerprint: row.try_get(2)?,
        incoming_fingerprint: row.try_get(3)?,
        stored_payload: row.try_get(4)?,
        incoming_payload: row.try_get(5)?,
        received_at_us: row.try_get(6)?,
    })
}

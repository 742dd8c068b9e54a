//! Corrections by explicit supersession. A collision tells the client that a different
//! event holds an identity; if the stored content is wrong, the client supersedes it: the
//! corrected content is stored beside the original (never over it) and names the version
//! it replaces. Ingestion then treats a resend of any superseding content as a retry.

use traqlyte_identity::{ContractName, EventId, Fingerprint};

use crate::model::stored_fingerprint;
use crate::tx::{with_pool, with_tx};
use crate::{NewEvent, Store, StoreError, StoreTx, TenantId};

/// The most corrections one event may have. Each correction is stored whole (up to a
/// request body) and `GET /events/{contract}/{event_id}` answers them all, so without a
/// bound one event could grow a history no answer can hold. Real corrections of one fact
/// (a refund, a fixed price) are a handful.
pub const SUPERSESSIONS_PER_EVENT_MAX: usize = 100;

/// What a supersession did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SupersedeOutcome {
    /// A new current version, replacing the one with this fingerprint.
    Superseded {
        /// Fingerprint of the version it replaces.
        supersedes: Fingerprint,
    },
    /// The content is already the current version: nothing written.
    Unchanged,
    /// The content is an earlier correction, superseded since (a late retry of it, or a
    /// wish to return to it, which cannot be stored: each content is stored once per
    /// event). Nothing written.
    SupersededSince {
        /// Fingerprint of the current version.
        current: Fingerprint,
    },
    /// The event already has [`SUPERSESSIONS_PER_EVENT_MAX`] corrections. Nothing written.
    LimitReached {
        /// Fingerprint of the current version.
        current: Fingerprint,
    },
}

/// One stored correction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Supersession {
    /// SHA-256 of the payload without transport fields.
    pub fingerprint: Fingerprint,
    /// Fingerprint of the version it replaces.
    pub supersedes: Fingerprint,
    /// Why it was corrected.
    pub reason: Option<String>,
    /// The payload as received (compact JSON).
    pub payload: String,
    /// When the correction was stored, microseconds since the epoch.
    pub superseded_at_us: i64,
}

/// A correction as the database returns it, before its fingerprints are parsed.
#[derive(sqlx::FromRow)]
struct SupersessionRow {
    fingerprint: String,
    supersedes: String,
    reason: Option<String>,
    payload: String,
    superseded_at_us: i64,
}

impl TryFrom<SupersessionRow> for Supersession {
    type Error = StoreError;

    fn try_from(row: SupersessionRow) -> Result<Self, StoreError> {
        Ok(Supersession {
            fingerprint: stored_fingerprint(&row.fingerprint)?,
            supersedes: stored_fingerprint(&row.supersedes)?,
            reason: row.reason,
            payload: row.payload,
            superseded_at_us: row.superseded_at_us,
        })
    }
}

/// The fingerprint of a correction stored for an event id.
#[derive(sqlx::FromRow)]
pub(crate) struct SupersedingRow {
    /// The corrected event's id (hex, as stored).
    pub(crate) event_id: String,
    /// The correction's fingerprint (hex, as stored).
    pub(crate) fingerprint: String,
}

const SELECT_SUPERSESSIONS: &str =
    "SELECT fingerprint, supersedes, reason, payload, superseded_at_us
     FROM event_supersessions WHERE tenant_id = $1 AND contract_name = $2 AND event_id = $3
     ORDER BY superseded_at_us, fingerprint";

/// What a new correction needs of the history: each version's fingerprint and time (not
/// its payload, which may be a request body's size).
const SELECT_HISTORY_FINGERPRINTS: &str = "SELECT fingerprint, superseded_at_us
     FROM event_supersessions WHERE tenant_id = $1 AND contract_name = $2 AND event_id = $3
     ORDER BY superseded_at_us, fingerprint";

/// Any age: a detached event can be corrected too. Its first stored row, should a
/// producer have restamped it across a day (two rows, see docs/identity.md).
const SELECT_FINGERPRINT: &str = "SELECT fingerprint, received_at_us FROM events_any_age
     WHERE tenant_id = $1 AND contract_name = $2 AND event_id = $3
     ORDER BY received_at_us LIMIT 1";

/// [`SELECT_FINGERPRINT`] on PostgreSQL, where the id is stored as its 32 bytes.
const PG_SELECT_FINGERPRINT: &str = "SELECT fingerprint, received_at_us FROM events_any_age
     WHERE tenant_id = $1 AND contract_name = $2 AND event_id = decode($3, 'hex')
     ORDER BY received_at_us LIMIT 1";

const INSERT_SUPERSESSION: &str = "INSERT INTO event_supersessions
     (tenant_id, contract_name, event_id, fingerprint, supersedes, payload, reason, superseded_at_us)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING";

/// PostgreSQL: a transaction-long lock on one event's corrections (class 0x5355 "SU",
/// then a hash of the event's key; a hash collision only makes two events take turns).
const LOCK_EVENT_SUPERSESSIONS: &str =
    "SELECT pg_advisory_xact_lock(21333, hashtext($1 || ':' || $2 || ':' || $3))";

const SELECT_SUPERSEDING: &str = "SELECT event_id, fingerprint FROM event_supersessions
     WHERE tenant_id = $1 AND contract_name = $2 AND event_id = $3";

impl StoreTx {
    /// Stores `corrected` as the new current version of the stored event with the same id.
    /// `None` when no such event is stored.
    pub async fn supersede(
        &mut self,
        tenant: &TenantId,
        contract: &ContractName,
        corrected: &NewEvent,
        reason: Option<&str>,
        now_us: i64,
    ) -> Result<Option<SupersedeOutcome>, StoreError> {
        let event_id = corrected.identified.event_id.as_str();
        let fingerprint = &corrected.identified.fingerprint;
        let select = match &mut self.inner {
            crate::tx::TxInner::Sqlite(_) => SELECT_FINGERPRINT,
            crate::tx::TxInner::Postgres(conn) => {
                // Corrections of one event take turns, across processes: two read the
                // same current version otherwise, and both would claim to replace it.
                // (SQLite's write transaction is already exclusive.)
                sqlx::query(LOCK_EVENT_SUPERSESSIONS)
                    .bind(tenant.as_str())
                    .bind(contract.as_str())
                    .bind(event_id)
                    .execute(&mut **conn)
                    .await?;
                PG_SELECT_FINGERPRINT
            }
        };
        let original: Option<(String, i64)> = with_tx!(self, |conn| {
            let query = sqlx::query_as(select)
                .bind(tenant.as_str())
                .bind(contract.as_str())
                .bind(event_id);
            query.fetch_optional(&mut *conn).await?
        });
        let Some((original, received_at_us)) = original else {
            return Ok(None);
        };
        let original = stored_fingerprint(&original)?;
        let rows: Vec<(String, i64)> = with_tx!(self, |conn| {
            let query = sqlx::query_as(SELECT_HISTORY_FINGERPRINTS)
                .bind(tenant.as_str())
                .bind(contract.as_str())
                .bind(event_id);
            query.fetch_all(&mut *conn).await?
        });
        let history = rows
            .into_iter()
            .map(|(fp, at)| stored_fingerprint(&fp).map(|fp| (fp, at)))
            .collect::<Result<Vec<_>, _>>()?;
        let current = history.last().map(|(fp, _)| fp.clone()).unwrap_or(original);
        // The history is ordered by this time: a process whose clock lags the one that
        // stored the current version must still sort after it.
        let replaced_at_us = history.last().map_or(received_at_us, |(_, at)| *at);
        let at_us = now_us.max(replaced_at_us.saturating_add(1));
        if &current == fingerprint {
            return Ok(Some(SupersedeOutcome::Unchanged));
        }
        if history.iter().any(|(fp, _)| fp == fingerprint) {
            return Ok(Some(SupersedeOutcome::SupersededSince { current }));
        }
        if history.len() >= SUPERSESSIONS_PER_EVENT_MAX {
            return Ok(Some(SupersedeOutcome::LimitReached { current }));
        }
        let inserted = with_tx!(self, |conn| sqlx::query(INSERT_SUPERSESSION)
            .bind(tenant.as_str())
            .bind(contract.as_str())
            .bind(event_id)
            .bind(fingerprint.as_str())
            .bind(current.as_str())
            .bind(&corrected.payload)
            .bind(reason)
            .bind(at_us)
            .execute(&mut *conn)
            .await?
            .rows_affected());
        Ok(Some(if inserted == 1 {
            SupersedeOutcome::Superseded {
                supersedes: current,
            }
        } else {
            SupersedeOutcome::Unchanged
        }))
    }

    /// Fingerprints of corrections stored for `ids`: content a resend may legitimately carry.
    pub(crate) async fn superseding_fingerprints(
        &mut self,
        tenant: &TenantId,
        contract: &ContractName,
        ids: &[EventId],
    ) -> Result<Vec<SupersedingRow>, StoreError> {
        let mut found = Vec::new();
        for id in ids {
            with_tx!(self, |conn| {
                let query = sqlx::query_as(SELECT_SUPERSEDING)
                    .bind(tenant.as_str())
                    .bind(contract.as_str())
                    .bind(id.as_str());
                found.extend(query.fetch_all(&mut *conn).await?);
            });
        }
        Ok(found)
    }
}

impl Store {
    /// The corrections of a stored event, oldest first; the last is its current content.
    pub async fn supersessions(
        &self,
        tenant: &TenantId,
        contract: &ContractName,
        event_id: &EventId,
    ) -> Result<Vec<Supersession>, StoreError> {
        let rows: Vec<SupersessionRow> = with_pool!(self, reader, |pool| {
            let query = sqlx::query_as(SELECT_SUPERSESSIONS)
                .bind(tenant.as_str())
                .bind(contract.as_str())
                .bind(event_id.as_str());
            query.fetch_all(pool).await?
        });
        rows.into_iter().map(Supersession::try_from).collect()
    }
}

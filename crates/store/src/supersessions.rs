//! Corrections by explicit supersession. A collision tells the client that a different
//! event holds an identity; if the stored content is wrong, the client supersedes it: the
//! corrected content is stored beside the original (never over it) and names the version
//! it replaces. Ingestion then treats a resend of any superseding content as a retry.

use crate::tx::{with_pool, with_tx};
use crate::{NewEvent, Store, StoreError, StoreTx, TenantId};
use serde::Serialize;

/// What a supersession did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SupersedeOutcome {
    /// A new current version, replacing the one with this fingerprint.
    Superseded {
        /// Fingerprint of the version it replaces.
        supersedes: String,
    },
    /// The content is already the current version (or an earlier correction): nothing written.
    Unchanged,
}

/// One stored correction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct Supersession {
    /// SHA-256 (hex) of the payload without transport fields.
    pub fingerprint: String,
    /// Fingerprint of the version it replaces.
    pub supersedes: String,
    /// Why it was corrected.
    pub reason: Option<String>,
    /// The payload as received (compact JSON).
    pub payload: String,
    /// When the correction was stored, microseconds since the epoch.
    pub superseded_at_us: i64,
}

const SELECT_SUPERSESSIONS: &str =
    "SELECT fingerprint, supersedes, reason, payload, superseded_at_us
     FROM event_supersessions WHERE tenant_id = $1 AND contract_name = $2 AND event_id = $3
     ORDER BY superseded_at_us, fingerprint";

const SELECT_FINGERPRINT: &str = "SELECT fingerprint FROM events
     WHERE tenant_id = $1 AND contract_name = $2 AND event_id = $3";

const INSERT_SUPERSESSION: &str = "INSERT INTO event_supersessions
     (tenant_id, contract_name, event_id, fingerprint, supersedes, payload, reason, superseded_at_us)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING";

const SELECT_SUPERSEDING: &str = "SELECT event_id, fingerprint FROM event_supersessions
     WHERE tenant_id = $1 AND contract_name = $2 AND event_id = $3";

impl StoreTx {
    /// Stores `corrected` as the new current version of the stored event with the same id.
    /// `None` when no such event is stored.
    pub async fn supersede(
        &mut self,
        tenant: &TenantId,
        contract: &str,
        corrected: &NewEvent,
        reason: Option<&str>,
        now_us: i64,
    ) -> Result<Option<SupersedeOutcome>, StoreError> {
        let event_id = corrected.identified.event_id.as_str();
        let fingerprint = corrected.identified.fingerprint.as_str();
        let original: Option<String> = with_tx!(self, conn => {
            let query = sqlx::query_scalar(SELECT_FINGERPRINT).bind(tenant.as_str()).bind(contract).bind(event_id);
            query.fetch_optional(&mut *conn).await?
        });
        let Some(original) = original else {
            return Ok(None);
        };
        let history: Vec<Supersession> = with_tx!(self, conn => {
            let query = sqlx::query_as(SELECT_SUPERSESSIONS).bind(tenant.as_str()).bind(contract).bind(event_id);
            query.fetch_all(&mut *conn).await?
        });
        let current = history
            .last()
            .map(|s| s.fingerprint.clone())
            .unwrap_or(original);
        if current == fingerprint || history.iter().any(|s| s.fingerprint == fingerprint) {
            return Ok(Some(SupersedeOutcome::Unchanged));
        }
        let inserted = with_tx!(self, conn => sqlx::query(INSERT_SUPERSESSION)
            .bind(tenant.as_str()).bind(contract).bind(event_id).bind(fingerprint).bind(&current)
            .bind(&corrected.payload).bind(reason).bind(now_us)
            .execute(&mut *conn).await?.rows_affected());
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
        contract: &str,
        ids: &[String],
    ) -> Result<Vec<(String, String)>, StoreError> {
        let mut found = Vec::new();
        for id in ids {
            with_tx!(self, conn => {
                let query = sqlx::query_as(SELECT_SUPERSEDING).bind(tenant.as_str()).bind(contract).bind(id);
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
        contract: &str,
        event_id: &str,
    ) -> Result<Vec<Supersession>, StoreError> {
        with_pool!(self, reader, pool => {
            let query = sqlx::query_as(SELECT_SUPERSESSIONS).bind(tenant.as_str()).bind(contract).bind(event_id);
            Ok(query.fetch_all(pool).await?)
        })
    }
}

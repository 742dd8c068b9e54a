//! Domain types the store reads and writes.

use traqlyte_identity::{sha256_hex, EventId, Fingerprint, Identified};

use crate::StoreError;

/// A tenant's id: `tn_` and 16 random hex digits. Random rather than sequential so that
/// no sequence is shared across tenants or servers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TenantId(String);

impl TenantId {
    pub(crate) fn generate() -> TenantId {
        TenantId(format!("tn_{}", random_hex(8)))
    }

    pub(crate) fn from_stored(text: String) -> TenantId {
        TenantId(text)
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for TenantId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A secret API key: `tlk_` and 48 hex digits (192 random bits). Only its SHA-256 is
/// stored; a plain hash is enough because the key is random, not a password.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ApiKey(String);

impl ApiKey {
    pub(crate) const PREFIX: &'static str = "tlk_";
    const HEX_LEN: usize = 48;

    pub(crate) fn generate() -> ApiKey {
        ApiKey(format!("{}{}", Self::PREFIX, random_hex(Self::HEX_LEN / 2)))
    }

    /// Accepts a key of the right shape; says nothing of whether it exists.
    pub fn parse(text: &str) -> Option<ApiKey> {
        let hex = text.strip_prefix(Self::PREFIX)?;
        let ok = hex.len() == Self::HEX_LEN && hex.bytes().all(|b| b.is_ascii_hexdigit());
        ok.then(|| ApiKey(text.to_string()))
    }

    /// The secret, for showing once to its owner.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub(crate) fn hash(&self) -> String {
        sha256_hex(self.0.as_bytes())
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(…)")
    }
}

/// An identified event ready to store, with its payload as JSON text.
#[derive(Debug, Clone)]
pub struct NewEvent {
    /// Id, fingerprint and event time.
    pub identified: Identified,
    /// The event as received (compact JSON).
    pub payload: String,
}

/// What happened to one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventOutcome {
    /// A new row.
    Inserted,
    /// A retry of a stored event (same fingerprint); counted, nothing written.
    Duplicate,
    /// A different event under a stored identity; logged, nothing overwritten.
    Collision {
        /// The fingerprint of the stored row.
        stored_fingerprint: Fingerprint,
    },
}

impl EventOutcome {
    /// `inserted`, `duplicate` or `collision`.
    pub fn as_str(&self) -> &'static str {
        match self {
            EventOutcome::Inserted => "inserted",
            EventOutcome::Duplicate => "duplicate",
            EventOutcome::Collision { .. } => "collision",
        }
    }
}

/// Result of registering a contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegisterOutcome {
    /// A new (name, version).
    Created,
    /// The identical definition was already registered.
    Unchanged,
}

/// Per-contract counters of a tenant.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, sqlx::FromRow)]
pub struct ContractStats {
    /// Contract name.
    pub contract: String,
    /// Rows in the fact table.
    pub stored: i64,
    /// Retries suppressed.
    pub duplicates: i64,
    /// Different events refused under an existing identity.
    pub collisions: i64,
    /// Events stored or matched in detached partitions (PostgreSQL), i.e. reconciled
    /// outside the live dedupe horizon: by a backfill, or by the live path under
    /// `--late-events reconcile`. Also counted in `stored` / `duplicates` /
    /// `collisions`; always 0 on SQLite (one table).
    pub late: i64,
}

/// A stored event row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    /// The content-derived event id.
    pub event_id: EventId,
    /// The contract version it was identified under.
    pub contract_version: i64,
    /// SHA-256 of the payload without transport fields.
    pub fingerprint: Fingerprint,
    /// The payload as received (compact JSON).
    pub payload: String,
    /// When it happened (event time), microseconds since the epoch.
    pub occurred_at_us: Option<i64>,
    /// When the server received it, microseconds since the epoch.
    pub received_at_us: i64,
}

/// A stored event as the database returns it, before its ids are parsed.
#[derive(sqlx::FromRow)]
pub(crate) struct EventRow {
    event_id: String,
    contract_version: i64,
    fingerprint: String,
    payload: String,
    occurred_at_us: Option<i64>,
    received_at_us: i64,
}

impl TryFrom<EventRow> for StoredEvent {
    type Error = StoreError;

    fn try_from(row: EventRow) -> Result<Self, StoreError> {
        Ok(StoredEvent {
            event_id: stored_event_id(&row.event_id)?,
            contract_version: row.contract_version,
            fingerprint: stored_fingerprint(&row.fingerprint)?,
            payload: row.payload,
            occurred_at_us: row.occurred_at_us,
            received_at_us: row.received_at_us,
        })
    }
}

/// One logged collision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollisionRecord {
    /// The log entry's id.
    pub collision_id: i64,
    /// The content-derived event id.
    pub event_id: EventId,
    /// Fingerprint of the stored row.
    pub stored_fingerprint: Fingerprint,
    /// Fingerprint of the refused delivery.
    pub incoming_fingerprint: Fingerprint,
    /// Payload of the stored row.
    pub stored_payload: String,
    /// Payload of the refused delivery.
    pub incoming_payload: String,
    /// When the server received it, microseconds since the epoch.
    pub received_at_us: i64,
}

impl TryFrom<crate::CollisionEntry> for CollisionRecord {
    type Error = StoreError;

    fn try_from(row: crate::CollisionEntry) -> Result<Self, StoreError> {
        Ok(CollisionRecord {
            collision_id: row.collision_id,
            event_id: stored_event_id(&row.event_id)?,
            stored_fingerprint: stored_fingerprint(&row.stored_fingerprint)?,
            incoming_fingerprint: stored_fingerprint(&row.incoming_fingerprint)?,
            stored_payload: row.stored_payload,
            incoming_payload: row.incoming_payload,
            received_at_us: row.received_at_us,
        })
    }
}

/// An event id read back from the database; anything but 64 lowercase hex digits means
/// the row was not written by this build.
pub(crate) fn stored_event_id(text: &str) -> Result<EventId, StoreError> {
    EventId::parse(text).ok_or_else(|| StoreError::Corrupt(format!("stored event id {text:?}")))
}

/// A fingerprint read back from the database.
pub(crate) fn stored_fingerprint(text: &str) -> Result<Fingerprint, StoreError> {
    Fingerprint::parse(text)
        .ok_or_else(|| StoreError::Corrupt(format!("stored fingerprint {text:?}")))
}

/// `N` bytes from the OS random source (panics like [`random_hex`] when it is unavailable).
pub(crate) fn random_bytes<const N: usize>() -> [u8; N] {
    let mut buf = [0u8; N];
    if getrandom::getrandom(&mut buf).is_err() {
        panic!("the operating system's random number generator is unavailable");
    }
    buf
}

pub(crate) fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    // The OS random source failing is not recoverable, and any fallback would weaken
    // keys, so refuse loudly instead.
    if getrandom::getrandom(&mut buf).is_err() {
        panic!("the operating system's random number generator is unavailable");
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

//! Storage of transport idempotency keys (layer 2). The decisions (replay, reused key,
//! in flight, stale) are made by the server's idempotency layer from these rows; the
//! guarantees come from the primary key `(tenant_id, idem_key)` and the `owner` token.
//!
//! Every age is measured on the store's clock, never a server's: a reservation is stamped,
//! read, taken over and purged against the database's time, so servers whose clocks
//! disagree still agree on whether a reservation is in flight or stale.

use crate::clock::store_now_us;
use crate::model::random_hex;
use crate::tx::{with_pool, with_tx};
use crate::{Store, StoreError, StoreTx, TenantId};

/// A client's idempotency key (`X-TL-Idempotency-Key` / `Idempotency-Key`): 1 to
/// [`IdempotencyKey::BYTES_MAX`] printable ASCII characters, scoped to its tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// The longest key accepted, in bytes.
    pub const BYTES_MAX: usize = 255;

    /// Accepts a header value of the right shape.
    pub fn parse(bytes: &[u8]) -> Option<IdempotencyKey> {
        let printable = bytes.iter().all(|b| (0x20..=0x7e).contains(b));
        if bytes.is_empty() || bytes.len() > Self::BYTES_MAX || !printable {
            return None;
        }
        std::str::from_utf8(bytes)
            .ok()
            .map(|text| IdempotencyKey(text.to_string()))
    }

    /// The key as sent.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The token of one attempt holding a key's reservation. A separate type so that a stale
/// owner and a new one can never be passed in each other's place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerToken(String);

impl OwnerToken {
    /// A fresh token (128 random bits): unique per attempt, not secret.
    pub fn generate() -> OwnerToken {
        OwnerToken(random_hex(16))
    }

    /// The token as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A stored response, replayed byte for byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// HTTP status.
    pub status: u16,
    /// The headers that matter (content type, location), in order.
    pub headers: Vec<(String, String)>,
    /// The body bytes.
    pub body: Vec<u8>,
}

/// The row of an idempotency key.
#[derive(Debug, Clone)]
pub struct KeyRecord {
    /// Checksum of the request that reserved the key.
    pub checksum: String,
    /// Token of the attempt holding the reservation.
    pub owner: OwnerToken,
    /// When the current owner reserved it, on the store's clock.
    pub reserved_at_us: i64,
    /// The store's clock when this row was read: the reservation's age is
    /// `read_at_us - reserved_at_us`, whatever the reading server's own clock says.
    pub read_at_us: i64,
    /// The stored response, once the request completed.
    pub response: Option<StoredResponse>,
}

/// A key's row and the store's time of the read, which its age is measured against.
macro_rules! select_key {
    ($backend:ident) => {
        concat!(
            "SELECT checksum, owner, reserved_at_us, CAST(status AS BIGINT) AS status, headers, body, ",
            store_now_us!($backend),
            " AS read_at_us FROM idempotency_keys WHERE tenant_id = $1 AND idem_key = $2"
        )
    };
}

/// A reservation stamped with the store's time.
macro_rules! insert_key {
    ($backend:ident) => {
        concat!(
            "INSERT INTO idempotency_keys (tenant_id, idem_key, checksum, owner, reserved_at_us) VALUES ($1, $2, $3, $4, ",
            store_now_us!($backend),
            ") ON CONFLICT DO NOTHING"
        )
    };
}

/// A take-over by compare-and-set on the owner token, and only of a reservation at least
/// `$5` µs old on the store's clock: a server whose clock runs ahead cannot take over a
/// request that is still running.
macro_rules! take_over_key {
    ($backend:ident) => {
        concat!(
            "UPDATE idempotency_keys SET owner = $4, reserved_at_us = ",
            store_now_us!($backend),
            " WHERE tenant_id = $1 AND idem_key = $2 AND owner = $3 AND status IS NULL AND reserved_at_us <= ",
            store_now_us!($backend),
            " - $5"
        )
    };
}

/// At most `$2` keys reserved before `$1` ([`Store::purge_in_chunks`]), by the age index.
const PURGE_KEYS: &str = "DELETE FROM idempotency_keys WHERE (tenant_id, idem_key) IN (
     SELECT tenant_id, idem_key FROM idempotency_keys WHERE reserved_at_us < $1 LIMIT $2)";

pub(crate) const PG_SELECT_KEY: &str = select_key!(postgres);
const SQLITE_SELECT_KEY: &str = select_key!(sqlite);
const PG_INSERT_KEY: &str = insert_key!(postgres);
const SQLITE_INSERT_KEY: &str = insert_key!(sqlite);
const PG_TAKE_OVER_KEY: &str = take_over_key!(postgres);
const SQLITE_TAKE_OVER_KEY: &str = take_over_key!(sqlite);

impl Store {
    /// The key's row, if any (one round trip).
    pub async fn idempotency_lookup(
        &self,
        tenant: &TenantId,
        key: &IdempotencyKey,
    ) -> Result<Option<KeyRecord>, StoreError> {
        // SQLite readers see every committed row (WAL), so lookups never queue behind the writer.
        let sql = self.by_backend(PG_SELECT_KEY, SQLITE_SELECT_KEY);
        with_pool!(self, reader, |pool| {
            let row: Option<KeyRow> = sqlx::query_as(sql)
                .bind(tenant.as_str())
                .bind(key.as_str())
                .fetch_optional(pool)
                .await?;
            row.map(KeyRecord::try_from).transpose()
        })
    }

    /// Inserts and commits a reservation stamped with the store's time; false when the key
    /// already exists.
    pub async fn idempotency_reserve(
        &self,
        tenant: &TenantId,
        key: &IdempotencyKey,
        checksum: &str,
        owner: &OwnerToken,
    ) -> Result<bool, StoreError> {
        let sql = self.by_backend(PG_INSERT_KEY, SQLITE_INSERT_KEY);
        with_pool!(self, writer, |pool| {
            let done = sqlx::query(sql)
                .bind(tenant.as_str())
                .bind(key.as_str())
                .bind(checksum)
                .bind(owner.as_str())
                .execute(pool)
                .await?;
            Ok(done.rows_affected() == 1)
        })
    }

    /// Takes over a reservation held by `stale_owner` that is at least `stale_after_us`
    /// old on the store's clock, by compare-and-set on its owner token; true when this
    /// caller won (exactly one concurrent taker can, and none while the reservation is
    /// younger, whatever the caller's own clock says).
    pub async fn idempotency_take_over(
        &self,
        tenant: &TenantId,
        key: &IdempotencyKey,
        stale_owner: &OwnerToken,
        new_owner: &OwnerToken,
        stale_after_us: i64,
    ) -> Result<bool, StoreError> {
        let sql = self.by_backend(PG_TAKE_OVER_KEY, SQLITE_TAKE_OVER_KEY);
        with_pool!(self, writer, |pool| {
            let done = sqlx::query(sql)
                .bind(tenant.as_str())
                .bind(key.as_str())
                .bind(stale_owner.as_str())
                .bind(new_owner.as_str())
                .bind(stale_after_us)
                .execute(pool)
                .await?;
            Ok(done.rows_affected() == 1)
        })
    }

    /// Deletes an uncompleted reservation held by `owner` (after a server-side failure),
    /// so the client's retry runs the request again.
    pub async fn idempotency_release(
        &self,
        tenant: &TenantId,
        key: &IdempotencyKey,
        owner: &OwnerToken,
    ) -> Result<(), StoreError> {
        with_pool!(self, writer, |pool| {
            sqlx::query("DELETE FROM idempotency_keys WHERE tenant_id = $1 AND idem_key = $2 AND owner = $3 AND status IS NULL")
                .bind(tenant.as_str()).bind(key.as_str()).bind(owner.as_str()).execute(pool).await?;
            Ok(())
        })
    }

    /// Deletes keys reserved more than `older_than_us` ago on the store's clock, in
    /// statements of at most [`crate::ops::PURGED_AT_ONCE`] keys (one statement for all
    /// of them held the SQLite write lock, and every ingestion, for as long as a backlog
    /// took to delete); returns how many.
    pub async fn idempotency_purge(&self, older_than_us: i64) -> Result<u64, StoreError> {
        self.purge_in_chunks(PURGE_KEYS, older_than_us).await
    }
}

impl StoreTx {
    /// Stores the response of the reservation held by `owner`, inside the handler's
    /// transaction. False when the reservation is no longer ours (it went stale and was
    /// taken over): the caller must then roll back, so the work commits exactly once.
    pub async fn idempotency_complete(
        &mut self,
        tenant: &TenantId,
        key: &IdempotencyKey,
        owner: &OwnerToken,
        response: &StoredResponse,
        now_us: i64,
    ) -> Result<bool, StoreError> {
        let headers = serde_json::to_string(&response.headers)
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        with_tx!(self, |conn| {
            let done = sqlx::query("UPDATE idempotency_keys SET status = $4, headers = $5, body = $6, completed_at_us = $7
                 WHERE tenant_id = $1 AND idem_key = $2 AND owner = $3 AND status IS NULL")
                .bind(tenant.as_str()).bind(key.as_str()).bind(owner.as_str())
                .bind(i64::from(response.status)).bind(&headers).bind(&response.body).bind(now_us)
                .execute(&mut *conn).await?;
            Ok(done.rows_affected() == 1)
        })
    }
}

#[derive(sqlx::FromRow)]
struct KeyRow {
    checksum: String,
    owner: String,
    reserved_at_us: i64,
    read_at_us: i64,
    status: Option<i64>,
    headers: Option<String>,
    body: Option<Vec<u8>>,
}

impl TryFrom<KeyRow> for KeyRecord {
    type Error = StoreError;

    fn try_from(row: KeyRow) -> Result<Self, StoreError> {
        let response = match row.status {
            None => None,
            Some(status) => {
                let status = u16::try_from(status)
                    .map_err(|_| StoreError::Corrupt(format!("idempotent status {status}")))?;
                let headers: Vec<(String, String)> =
                    serde_json::from_str(row.headers.as_deref().unwrap_or("[]"))
                        .map_err(|e| StoreError::Corrupt(e.to_string()))?;
                Some(StoredResponse {
                    status,
                    headers,
                    body: row.body.unwrap_or_default(),
                })
            }
        };
        Ok(KeyRecord {
            checksum: row.checksum,
            owner: OwnerToken(row.owner),
            reserved_at_us: row.reserved_at_us,
            read_at_us: row.read_at_us,
            response,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idempotency_keys_are_one_to_255_printable_ascii_characters() {
        let long = "k".repeat(IdempotencyKey::BYTES_MAX);
        for good in ["a", "launch-1", "with space ~!", long.as_str()] {
            assert!(IdempotencyKey::parse(good.as_bytes()).is_some(), "{good}");
        }
        let too_long = "k".repeat(IdempotencyKey::BYTES_MAX + 1);
        for bad in ["", "tab\there", "caf\u{e9}", "nul\u{0}", too_long.as_str()] {
            assert!(IdempotencyKey::parse(bad.as_bytes()).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn owner_tokens_are_distinct() {
        assert_ne!(OwnerToken::generate(), OwnerToken::generate());
    }
}

//! Storage of transport idempotency keys (layer 2). The decisions (replay, reused key,
//! in flight, stale) are made by the server's idempotency layer from these rows; the
//! guarantees come from the primary key `(tenant_id, idem_key)` and the `owner` token.

use crate::tx::{with_pool, with_tx};
use crate::{Store, StoreError, StoreTx, TenantId};

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
    pub owner: String,
    /// When the current owner reserved it.
    pub reserved_at_us: i64,
    /// The stored response, once the request completed.
    pub response: Option<StoredResponse>,
}

const SELECT_KEY: &str =
    "SELECT checksum, owner, reserved_at_us, CAST(status AS BIGINT) AS status, headers, body
     FROM idempotency_keys WHERE tenant_id = $1 AND idem_key = $2";

impl Store {
    /// The key's row, if any (one round trip).
    pub async fn idempotency_lookup(
        &self,
        tenant: &TenantId,
        key: &str,
    ) -> Result<Option<KeyRecord>, StoreError> {
        // SQLite readers see every committed row (WAL), so lookups never queue behind the writer.
        with_pool!(self, reader, pool => {
            let row: Option<KeyRow> = sqlx::query_as(SELECT_KEY).bind(tenant.as_str()).bind(key).fetch_optional(pool).await?;
            row.map(KeyRecord::try_from).transpose()
        })
    }

    /// Inserts and commits a reservation; false when the key already exists.
    pub async fn idempotency_reserve(
        &self,
        tenant: &TenantId,
        key: &str,
        checksum: &str,
        owner: &str,
        now_us: i64,
    ) -> Result<bool, StoreError> {
        with_pool!(self, writer, pool => {
            let done = sqlx::query("INSERT INTO idempotency_keys (tenant_id, idem_key, checksum, owner, reserved_at_us)
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING")
                .bind(tenant.as_str()).bind(key).bind(checksum).bind(owner).bind(now_us)
                .execute(pool).await?;
            Ok(done.rows_affected() == 1)
        })
    }

    /// Takes over a stale reservation by compare-and-set on its owner token; true when
    /// this caller won (exactly one concurrent taker can).
    pub async fn idempotency_take_over(
        &self,
        tenant: &TenantId,
        key: &str,
        stale_owner: &str,
        new_owner: &str,
        now_us: i64,
    ) -> Result<bool, StoreError> {
        with_pool!(self, writer, pool => {
            let done = sqlx::query("UPDATE idempotency_keys SET owner = $4, reserved_at_us = $5
                 WHERE tenant_id = $1 AND idem_key = $2 AND owner = $3 AND status IS NULL")
                .bind(tenant.as_str()).bind(key).bind(stale_owner).bind(new_owner).bind(now_us)
                .execute(pool).await?;
            Ok(done.rows_affected() == 1)
        })
    }

    /// Deletes an uncompleted reservation held by `owner` (after a server-side failure),
    /// so the client's retry runs the request again.
    pub async fn idempotency_release(
        &self,
        tenant: &TenantId,
        key: &str,
        owner: &str,
    ) -> Result<(), StoreError> {
        with_pool!(self, writer, pool => {
            sqlx::query("DELETE FROM idempotency_keys WHERE tenant_id = $1 AND idem_key = $2 AND owner = $3 AND status IS NULL")
                .bind(tenant.as_str()).bind(key).bind(owner).execute(pool).await?;
            Ok(())
        })
    }

    /// Deletes keys reserved before `before_us`; returns how many.
    pub async fn idempotency_purge(&self, before_us: i64) -> Result<u64, StoreError> {
        with_pool!(self, writer, pool => {
            let done = sqlx::query("DELETE FROM idempotency_keys WHERE reserved_at_us < $1").bind(before_us).execute(pool).await?;
            Ok(done.rows_affected())
        })
    }
}

impl StoreTx {
    /// Stores the response of the reservation held by `owner`, inside the handler's
    /// transaction. False when the reservation is no longer ours (it went stale and was
    /// taken over): the caller must then roll back, so the work commits exactly once.
    pub async fn idempotency_complete(
        &mut self,
        tenant: &TenantId,
        key: &str,
        owner: &str,
        response: &StoredResponse,
        now_us: i64,
    ) -> Result<bool, StoreError> {
        let headers = serde_json::to_string(&response.headers)
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        with_tx!(self, conn => {
            let done = sqlx::query("UPDATE idempotency_keys SET status = $4, headers = $5, body = $6, completed_at_us = $7
                 WHERE tenant_id = $1 AND idem_key = $2 AND owner = $3 AND status IS NULL")
                .bind(tenant.as_str()).bind(key).bind(owner)
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
            owner: row.owner,
            reserved_at_us: row.reserved_at_us,
            response,
        })
    }
}

//! Transport idempotency (layer 2), route-agnostic: a middleware for mutating JSON routes.
//!
//! With `X-TL-Idempotency-Key` (or `Idempotency-Key`) on a request:
//! 1. the key is reserved `(tenant, key, checksum, owner, reserved_at)` and **committed**
//!    before the handler runs; the primary key serialises concurrent duplicates across
//!    server processes;
//! 2. the handler's writes (made through [`Work`]) and the stored response commit in one
//!    transaction, guarded by the owner token, so a crash can never leave a mutation
//!    without its replayable response and a stale owner can never commit twice;
//! 3. a completed key replays the stored response byte for byte with
//!    `Idempotent-Replayed: true`; a different request under the key is `409
//!    idempotency_key_reused`; an in-flight one is `409 request_in_flight` with
//!    `Retry-After`; a reservation older than the cutoff is taken over by compare-and-set.
//!
//! 5xx answers release the reservation (the retry runs again), and so does a request
//! that ends without an answer (the client disconnected, the request timed out), and a
//! `401` (a key revoked while the body arrived: the credential was refused, not the
//! request); other 4xx answers are stored and replayed. This layer never touches ingestion or outcomes: those dedupe by content.

mod decide;
mod work;

use std::sync::{Arc, Mutex};

use axum::body::{to_bytes, Body};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::header::{CONTENT_TYPE, LOCATION, RETRY_AFTER};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use traqlyte_identity::{canonical, json};
use traqlyte_store::{now_us, IdempotencyKey, OwnerToken, StoredResponse, TenantId};

pub use decide::{decide, Decision};
pub use work::{Work, WorkSlot};

use crate::auth::Tenant;
use crate::body::read_limited;
use crate::metrics::{self, IdempotencyEvent};
use crate::{ApiError, AppState};

/// The header TraqLyte names; [`STANDARD_HEADER`] is accepted too.
pub const HEADER: &str = "x-tl-idempotency-key";
/// The IETF draft's header name, also used by Stripe.
pub const STANDARD_HEADER: &str = "idempotency-key";
/// Marks a replayed response (Stripe's name).
pub const REPLAYED_HEADER: &str = "idempotent-replayed";
const CLAIM_ATTEMPTS_MAX: usize = 4;
const RESPONSE_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Headers stored with a response and replayed.
const KEPT_HEADERS: [HeaderName; 2] = [CONTENT_TYPE, LOCATION];

/// The middleware. Requests without a key pass through untouched.
pub async fn layer(State(state): State<AppState>, request: Request, next: Next) -> Response {
    match protect(state, request, next).await {
        Ok(response) | Err(response) => response,
    }
}

async fn protect(state: AppState, request: Request, next: Next) -> Result<Response, Response> {
    let key = match key_from(request.headers()) {
        Ok(Some(key)) => key,
        Ok(None) => return Ok(next.run(request).await),
        Err(err) => return Err(err.into_response()),
    };
    let (mut parts, body) = request.into_parts();
    let Tenant(tenant) = Tenant::from_request_parts(&mut parts, &state)
        .await
        .map_err(IntoResponse::into_response)?;
    let bytes = read_limited(&parts.headers, body, state.config.body_bytes_max)
        .await
        .map_err(IntoResponse::into_response)?;
    // The handler reads these bytes again: as they are now, inflated.
    crate::body::as_read(&mut parts.headers, bytes.len());
    let target = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    // The canonical form's tree takes room while it lives (its room is given back once
    // the form is written), as the handler's parse does: unbounded, it let bodies sent
    // with a key take twice the memory the room allows.
    let canonical = crate::body::parse_transient(&bytes, |bytes, meter| {
        json::parse_in(bytes, json::DEPTH_MAX_CEILING, meter).map(|value| canonical::jcs(&value))
    })
    .await
    .map_err(IntoResponse::into_response)?;
    let checksum = checksum_of(
        parts.method.as_str(),
        target,
        canonical.as_deref().unwrap_or(&bytes),
    );
    let (owner, mut reservation) = claim(&state, &tenant, &key, &checksum).await?;
    let slot = Arc::new(Mutex::new(None));
    parts.extensions.insert(WorkSlot(slot.clone()));
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    let held = slot.lock().ok().and_then(|mut guard| guard.take());
    let completed = complete(&state, &tenant, &key, &owner, held, response).await;
    if completed.is_ok() {
        reservation.settled();
    }
    completed.map_err(IntoResponse::into_response)
}

/// A reservation this request holds until [`complete`] has stored its answer or
/// released it. Dropped before then (the client disconnected or the request timed out
/// at any await after the claim, or `complete` failed), it releases the reservation in a
/// task of its own, so the client's retry runs at once instead of being refused as
/// `request_in_flight` until the stale cutoff. The release deletes only this owner's row
/// while it has no answer: a transaction still storing one holds the row, and once that
/// commits the release matches nothing.
///
/// The claim's write runs on a task of its own ([`Reservation::write`]) and the release
/// waits for it: sent on another pooled connection, the release's delete could run before
/// the claim's insert of a request dropped mid-write, which then committed a reservation
/// nobody held, refused as `request_in_flight` until the stale cutoff (a review: about
/// one in a hundred keyed requests whose client hung up within milliseconds).
struct Reservation {
    held: Option<(traqlyte_store::Store, TenantId, IdempotencyKey, OwnerToken)>,
    write: Option<tokio::task::JoinHandle<()>>,
}

impl Reservation {
    fn held(state: &AppState, tenant: &TenantId, key: &IdempotencyKey, owner: &OwnerToken) -> Self {
        Reservation {
            held: Some((
                state.store.clone(),
                tenant.clone(),
                key.clone(),
                owner.clone(),
            )),
            write: None,
        }
    }

    /// Runs the claim's `write` to its end on a task of its own, whether or not this
    /// request is still there to read its result; a release waits for it.
    async fn write(
        &mut self,
        write: impl std::future::Future<Output = Result<bool, traqlyte_store::StoreError>>
            + Send
            + 'static,
    ) -> Result<bool, traqlyte_store::StoreError> {
        let (done, result) = tokio::sync::oneshot::channel();
        self.write = Some(tokio::spawn(async move {
            let _ = done.send(write.await);
        }));
        result
            .await
            .unwrap_or_else(|_| Err(traqlyte_store::StoreError::task_gone()))
    }

    /// The answer is stored, or the reservation released: nothing left to do on drop.
    fn settled(&mut self) {
        self.held = None;
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let Some((store, tenant, key, owner)) = self.held.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let write = self.write.take();
        runtime.spawn(async move {
            if let Some(write) = write {
                let _ = write.await;
            }
            if let Err(err) = store.idempotency_release(&tenant, &key, &owner).await {
                tracing::warn!(error = %err, "releasing an abandoned idempotency reservation failed; it is taken over after the stale cutoff");
            }
        });
    }
}

/// Reserves the key (or takes over a stale reservation); answers replays and conflicts.
/// The reservation is guarded from before its write is sent: a request dropped while
/// the write is in flight may have committed it.
async fn claim(
    state: &AppState,
    tenant: &TenantId,
    key: &IdempotencyKey,
    checksum: &str,
) -> Result<(OwnerToken, Reservation), Response> {
    let store = &state.store;
    let stale_after_us = state.config.idempotency_stale_after_ms as i64 * 1_000;
    for _ in 0..CLAIM_ATTEMPTS_MAX {
        let record = store
            .idempotency_lookup(tenant, key)
            .await
            .map_err(|e| ApiError::from(e).into_response())?;
        let owner = OwnerToken::generate();
        let mut reservation = Reservation::held(state, tenant, key, &owner);
        let (tenant_at, key_at, owner_at) = (tenant.clone(), key.clone(), owner.clone());
        let store_at = store.clone();
        let won = match decide(record.as_ref(), checksum, stale_after_us) {
            Decision::Reserve => {
                let checksum = checksum.to_string();
                reservation
                    .write(async move {
                        store_at
                            .idempotency_reserve(&tenant_at, &key_at, &checksum, &owner_at)
                            .await
                    })
                    .await
            }
            Decision::TakeOver { stale_owner } => {
                let took = reservation
                    .write(async move {
                        store_at
                            .idempotency_take_over(
                                &tenant_at,
                                &key_at,
                                &stale_owner,
                                &owner_at,
                                stale_after_us,
                            )
                            .await
                    })
                    .await;
                if matches!(took, Ok(true)) {
                    metrics::record_idempotency(tenant, IdempotencyEvent::TakeOver);
                }
                took
            }
            Decision::Replay(stored) => {
                reservation.settled();
                metrics::record_idempotency(tenant, IdempotencyEvent::Replay);
                return Err(replay(stored));
            }
            Decision::Reused => {
                reservation.settled();
                return Err(reused().into_response());
            }
            Decision::InFlight { retry_after_s } => {
                reservation.settled();
                metrics::record_idempotency(tenant, IdempotencyEvent::InFlightRefusal);
                return Err(in_flight(retry_after_s));
            }
        };
        // On an error the guard releases what the write may have committed.
        if won.map_err(|e| ApiError::from(e).into_response())? {
            return Ok((owner, reservation));
        }
        // Not ours: nothing to release.
        reservation.settled();
        // Another request reserved or took over the key between our read and write:
        // read again and decide on what it left.
    }
    metrics::record_idempotency(tenant, IdempotencyEvent::InFlightRefusal);
    Err(in_flight(1))
}

/// Stores the handler's response with its writes (2xx) or on its own (4xx), or releases
/// the reservation (5xx, and a `401`: the key, revoked while the body arrived, was
/// refused, not the request, which a retry with a working key must run).
async fn complete(
    state: &AppState,
    tenant: &TenantId,
    key: &IdempotencyKey,
    owner: &OwnerToken,
    held: Option<traqlyte_store::StoreTx>,
    response: Response,
) -> Result<Response, ApiError> {
    let store = &state.store;
    let status = response.status();
    if status.is_server_error() || status == StatusCode::UNAUTHORIZED {
        if let Some(tx) = held {
            let _ = tx.rollback().await;
        }
        store.idempotency_release(tenant, key, owner).await?;
        return Ok(response);
    }
    let (parts, body) = response.into_parts();
    let bytes = to_bytes(body, RESPONSE_BYTES_MAX)
        .await
        .map_err(ApiError::internal)?;
    let headers = KEPT_HEADERS
        .iter()
        .filter_map(|name| {
            parts
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(|v| (name.as_str().to_string(), v.to_string()))
        })
        .collect();
    let stored = StoredResponse {
        status: status.as_u16(),
        headers,
        body: bytes.to_vec(),
    };
    // A refusal must not commit anything the handler may have written before refusing.
    let mut tx = match held {
        Some(tx) if status.is_success() => tx,
        Some(tx) => {
            tx.rollback().await?;
            store.begin().await?
        }
        None => store.begin().await?,
    };
    let result = async {
        if !tx
            .idempotency_complete(tenant, key, owner, &stored, now_us())
            .await?
        {
            return Ok(false);
        }
        tx.commit().await.map(|()| true)
    }
    .await;
    match result {
        Ok(true) => Ok(Response::from_parts(parts, Body::from(bytes))),
        // Our reservation went stale and another request took it over: our writes were
        // rolled back (the transaction is dropped), the other request's will stand.
        // A retry a second later gets the superseding request's answer (or waits for it).
        Ok(false) => Ok(in_flight_for("this request took longer than the reservation cutoff and was superseded by a retry; its effects were rolled back", 1)),
        Err(err) => {
            let _ = store.idempotency_release(tenant, key, owner).await;
            Err(err.into())
        }
    }
}

/// The key from either header: 1–255 printable ASCII characters.
fn key_from(headers: &HeaderMap) -> Result<Option<IdempotencyKey>, ApiError> {
    // Every line of either name: two differing values were keyed by the first alone,
    // so a retry carrying only the second ran again (a review).
    let mut lines = (headers.get_all(HEADER).iter().map(|value| (value, HEADER))).chain(
        headers
            .get_all(STANDARD_HEADER)
            .iter()
            .map(|value| (value, STANDARD_HEADER)),
    );
    let Some((value, name)) = lines.next() else {
        return Ok(None);
    };
    if lines.any(|(other, _)| other != value) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_idempotency_key",
            "the request carries differing idempotency keys (X-TL-Idempotency-Key, Idempotency-Key, or one of them twice); send one",
        )
        .with_field(name));
    }
    let key = IdempotencyKey::parse(value.as_bytes()).ok_or_else(|| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_idempotency_key",
            format!(
                "an idempotency key is 1-{} printable ASCII characters",
                IdempotencyKey::BYTES_MAX
            ),
        )
        .with_field(name)
    })?;
    Ok(Some(key))
}

/// SHA-256 over the method, the path with its query, and the RFC 8785 form of the JSON
/// body (raw bytes when the body is not JSON), so whitespace or key order never make a
/// retry look like a different request. Strings are hashed as sent, not in NFC: the
/// handlers keep a unit id or a name byte for byte, so two spellings are two requests.
pub fn request_checksum(method: &str, target: &str, body: &[u8]) -> String {
    let canonical = json::parse(body, json::DEPTH_MAX_CEILING)
        .ok()
        .map(|value| canonical::jcs(&value));
    checksum_of(method, target, canonical.as_deref().unwrap_or(body))
}

/// [`request_checksum`] of a body already in its canonical form (or raw, not JSON).
fn checksum_of(method: &str, target: &str, canonical: &[u8]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(method.as_bytes());
    hasher.update(b"\n");
    hasher.update(target.as_bytes());
    hasher.update(b"\n");
    hasher.update(canonical);
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn replay(stored: StoredResponse) -> Response {
    let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, stored.body).into_response();
    let headers = response.headers_mut();
    headers.remove(CONTENT_TYPE);
    for (name, value) in stored.headers {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(name), HeaderValue::try_from(value)) {
            headers.insert(name, value);
        }
    }
    headers.insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    response
}

fn reused() -> ApiError {
    ApiError::new(StatusCode::CONFLICT, "idempotency_key_reused", "this idempotency key was used for a different request (method, path or body differ); use a new key for a new request")
}

fn in_flight(retry_after_s: u64) -> Response {
    in_flight_for("a request with this idempotency key is still being processed; retry after the Retry-After delay", retry_after_s)
}

/// `409 request_in_flight` with `Retry-After` (docs/api.md: the code always carries it).
fn in_flight_for(message: &str, retry_after_s: u64) -> Response {
    let mut response =
        ApiError::new(StatusCode::CONFLICT, "request_in_flight", message).into_response();
    response
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(retry_after_s.max(1)));
    response
}

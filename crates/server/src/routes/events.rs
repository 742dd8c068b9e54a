//! JSON ingestion: `POST /events/{contract}` (one event) and
//! `POST /events/{contract}/batch` (a JSON array, each item judged on its own).

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use serde::Serialize;
use serde_json::Value;
use traqlyte_identity::{format_rfc3339_micros, Contract, ContractName, EventId, Fingerprint};
use traqlyte_store::partitions::partition_time;
use traqlyte_store::{
    Admission, EventOutcome, IngestSource, LateEvents, NewEvent, OutsideHorizon, StoreTx, TenantId,
};
use utoipa::ToSchema;

use super::contracts::{load, load_for_write, newer_latest, ForWrite, VersionQuery};
use crate::auth::{Tenant, WriteTenant};
use crate::body::{read_batch, read_document};
use crate::group_commit::EventAnswer;
use crate::metrics;
use crate::{ApiError, AppState};

/// The answer to one stored event.
#[derive(Serialize, ToSchema)]
pub(crate) struct EventAck<'a> {
    event_id: &'a str,
    /// `inserted` or `duplicate`.
    #[schema(value_type = crate::openapi::StoredStatus)]
    status: &'static str,
}

/// `POST /events/{contract}` → `{"event_id","status"}`; a collision is a 409.
#[utoipa::path(post, path = "/events/{contract}", tag = "events", security(("api_key" = [])),
    params(("contract" = String, Path, description = "the contract's name"), super::contracts::VersionQuery),
    request_body(content = Object, description = "an event: any JSON object, judged by its contract"),
    responses((status = 200, body = EventAck), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn post_one(
    State(state): State<AppState>,
    writer: WriteTenant,
    Path(name): Path<String>,
    Query(query): Query<VersionQuery>,
    headers: HeaderMap,
    body: Body,
) -> Result<axum::response::Response, ApiError> {
    let WriteTenant { tenant, key } = &writer;
    let answer: Result<axum::response::Response, ApiError> = async {
        let ForWrite {
            mut contract,
            latest,
            mut remembered,
        } = load_for_write(&state, tenant, &name, query.version).await?;
        let mut value = read_document(&state, &headers, body).await?;
        writer.confirm_unchecked(&state, &headers).await?;
        let http = IngestSource::http();
        let mut stale_rounds = 0;
        let (event, outcome) = loop {
            let event = match judge(&state, &contract, value) {
                Ok(event) => event,
                Err(refused) => {
                    let (err, payload) = *refused;
                    // Refused under the version remembered as the latest: a newer one may
                    // have been registered since (in any process), under which the event
                    // may be fine. Asked of the store before refusing.
                    if latest && remembered && stale_rounds < STALE_ROUNDS_MAX {
                        if let Some(newer) = newer_latest(&state, tenant, &contract).await? {
                            stale_rounds += 1;
                            contract = newer;
                            remembered = false;
                            value = serde_json::from_str(&payload).map_err(ApiError::internal)?;
                            continue;
                        }
                    }
                    metrics::record_events(tenant, contract.name().as_str(), &http, &[], &[], 1);
                    return Err(err);
                }
            };
            let grouped = state
                .group_commit
                .event(tenant, key.as_ref(), &contract, latest, &event)
                .await;
            let answer = match grouped {
                Some(answer) => answer?,
                None => EventAnswer::Stored(insert_one(&state, tenant, &contract, &event).await?),
            };
            match answer {
                EventAnswer::Stored(outcome) => break (event, outcome),
                // A newer version of the contract was registered since this server last read
                // it: read it now and identify the event again under it.
                EventAnswer::StaleContract if stale_rounds < STALE_ROUNDS_MAX => {
                    stale_rounds += 1;
                    // The document again, from the event's payload (its compact JSON), so
                    // the usual request does not keep a copy for this rare round.
                    value = serde_json::from_str(&event.payload).map_err(ApiError::internal)?;
                    if let Some(lookups) = state.group_commit.lookups() {
                        lookups.forget_latest(tenant, contract.name().as_str());
                    }
                    let fresh = load_for_write(&state, tenant, &name, None).await?;
                    contract = fresh.contract;
                    remembered = fresh.remembered;
                }
                EventAnswer::StaleContract => {
                    return Err(ApiError::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "contract_changing",
                        "new versions of this contract were registered while the event was being stored; nothing was stored, retry",
                    ))
                }
            }
        };
        metrics::record_events(
            tenant,
            contract.name().as_str(),
            &http,
            std::slice::from_ref(&event),
            std::slice::from_ref(&outcome),
            0,
        );
        let event_id = event.identified.event_id.as_str();
        match outcome {
            EventOutcome::Collision { stored_fingerprint } => {
                Err(collision(contract.name().as_str(), &event, &stored_fingerprint))
            }
            other => {
                tracing::debug!(tenant = %tenant, contract = %contract.name(), event_id, status = other.as_str(), "event stored");
                let status = other.as_str();
                Ok(Json(EventAck { event_id, status }).into_response())
            }
        }
    }
    .await;
    writer.settle(&state, answer).await
}

/// How many times one request identifies its event again after newer versions of its
/// contract were registered while it waited (each time re-reading the latest version).
const STALE_ROUNDS_MAX: usize = 3;

/// One event in a transaction of its own (group commit off).
async fn insert_one(
    state: &AppState,
    tenant: &TenantId,
    contract: &Contract,
    event: &NewEvent,
) -> Result<EventOutcome, ApiError> {
    let mut tx = begin_ingest(state).await?;
    let outcomes = tx
        .insert_events(tenant, contract, std::slice::from_ref(event))
        .await?;
    tx.commit().await?;
    outcomes
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::internal("store returned no outcome"))
}

/// `POST /events/{contract}/batch` → per-item results and totals.
#[utoipa::path(post, path = "/events/{contract}/batch", tag = "events", security(("api_key" = [])),
    params(("contract" = String, Path, description = "the contract's name"), super::contracts::VersionQuery),
    request_body(content = Vec<Object>, description = "at most 1,000 events"),
    responses((status = 200, body = BatchAnswer), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn post_batch(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(name): Path<String>,
    Query(query): Query<VersionQuery>,
    headers: HeaderMap,
    body: Body,
) -> Result<axum::response::Response, ApiError> {
    let contract = load(&state, &tenant, &name, query.version).await?;
    let items = read_batch(&state, &headers, body, "events").await?;
    crate::auth::confirm_after_body(&state, &headers, &tenant).await?;
    let submitted = items.len();
    let mut results: Vec<ItemResult> = (0..submitted)
        .map(|index| ItemResult {
            index,
            event_id: None,
            status: "rejected",
            error: None,
        })
        .collect();
    let mut events = Vec::with_capacity(submitted);
    let mut positions = Vec::with_capacity(submitted);
    let mut late = false;
    for (index, item) in items.into_iter().enumerate() {
        let admitted = item
            .and_then(|item| identify(&contract, item))
            .and_then(|event| Ok((admission(&state, &contract, &event)?, event)));
        match admitted {
            Ok((admission, event)) => {
                late |= admission == Admission::Late;
                events.push(event);
                positions.push(index);
            }
            Err(err) => results[index].error = Some(err.into_body()),
        }
    }
    let (events, positions, outcomes) = store_batch(
        &state,
        &tenant,
        &contract,
        events,
        positions,
        late,
        &mut results,
    )
    .await?;
    let mut totals = BatchTotals {
        rejected: submitted - events.len(),
        ..BatchTotals::default()
    };
    metrics::record_batch_size("http_events", submitted);
    metrics::record_events(
        &tenant,
        contract.name().as_str(),
        &IngestSource::http(),
        &events,
        &outcomes,
        totals.rejected,
    );
    for ((event, index), outcome) in events.iter().zip(positions).zip(outcomes) {
        let result = &mut results[index];
        result.event_id = Some(event.identified.event_id.as_str());
        result.status = outcome.as_str();
        match &outcome {
            EventOutcome::Inserted => totals.inserted += 1,
            EventOutcome::Duplicate => totals.duplicates += 1,
            EventOutcome::Collision { stored_fingerprint } => {
                totals.collisions += 1;
                result.error = Some(
                    collision(contract.name().as_str(), event, stored_fingerprint).into_body(),
                );
            }
        }
    }
    tracing::debug!(tenant = %tenant, contract = %contract.name(), inserted = totals.inserted, duplicates = totals.duplicates, collisions = totals.collisions, rejected = totals.rejected, "batch stored");
    Ok(Json(BatchAnswer { results, totals }).into_response())
}

/// One item of a batch answer (serialised directly: a batch answer has up to
/// `batch_events_max` of these, too many to build as generic JSON values).
#[derive(Serialize, ToSchema)]
pub(crate) struct ItemResult<'a> {
    index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = String)]
    event_id: Option<&'a str>,
    /// `inserted`, `duplicate`, `collision` or `rejected`.
    #[schema(value_type = crate::openapi::ItemStatus)]
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    error: Option<crate::error::ErrorBody>,
}

#[derive(Serialize, Default, ToSchema)]
pub(crate) struct BatchTotals {
    inserted: usize,
    duplicates: usize,
    collisions: usize,
    rejected: usize,
}

#[derive(Serialize, ToSchema)]
pub(crate) struct BatchAnswer<'a> {
    results: Vec<ItemResult<'a>>,
    #[serde(flatten)]
    totals: BatchTotals,
}

/// A stored event as `GET /events/{contract}/{event_id}` answers it.
#[derive(Serialize, ToSchema)]
pub(crate) struct StoredEvent {
    contract: String,
    contract_version: i64,
    /// The newest correction's payload, else the original.
    #[schema(value_type = Object)]
    current_payload: Value,
    event_id: String,
    fingerprint: String,
    occurred_at: Option<String>,
    /// The original payload.
    #[schema(value_type = Object)]
    payload: Value,
    received_at: String,
    /// Oldest first.
    supersessions: Vec<SupersessionView>,
}

/// A correction of a stored event.
#[derive(Serialize, ToSchema)]
pub(crate) struct SupersessionView {
    fingerprint: String,
    #[schema(value_type = Object)]
    payload: Value,
    reason: Option<String>,
    superseded_at: String,
    /// The fingerprint this correction replaced.
    supersedes: String,
}

/// `GET /events/{contract}/{event_id}`: the stored row.
#[utoipa::path(get, path = "/events/{contract}/{event_id}", tag = "events", security(("api_key" = [])),
    params(("contract" = String, Path, description = "the contract's name"),
        ("event_id" = String, Path, description = "the event's id")),
    responses((status = 200, body = StoredEvent), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn get_one(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path((name, event_id)): Path<(String, String)>,
) -> Result<Json<StoredEvent>, ApiError> {
    let missing = || {
        ApiError::not_found(
            "event_not_found",
            format!("no event {event_id} under contract {name:?}"),
        )
    };
    let contract = ContractName::parse(&name).map_err(|_| missing())?;
    // An id that is not 64 lowercase hex digits names no stored event.
    let id = EventId::parse(&event_id).ok_or_else(missing)?;
    let stored = state
        .store
        .event(&tenant, &contract, &id)
        .await?
        .ok_or_else(missing)?;
    let payload = stored_payload(&stored.payload)?;
    // The newest correction, if any, is the event's current content.
    let history = state
        .store
        .supersessions(&tenant, &contract, &stored.event_id)
        .await?;
    let mut supersessions = Vec::with_capacity(history.len());
    for s in &history {
        supersessions.push(SupersessionView {
            fingerprint: s.fingerprint.to_string(),
            payload: stored_payload(&s.payload)?,
            reason: s.reason.clone(),
            superseded_at: format_rfc3339_micros(s.superseded_at_us),
            supersedes: s.supersedes.to_string(),
        });
    }
    let current_payload = supersessions
        .last()
        .map(|s| s.payload.clone())
        .unwrap_or_else(|| payload.clone());
    Ok(Json(StoredEvent {
        contract: name,
        contract_version: stored.contract_version,
        current_payload,
        event_id: stored.event_id.to_string(),
        fingerprint: stored.fingerprint.to_string(),
        occurred_at: stored.occurred_at_us.map(format_rfc3339_micros),
        payload,
        received_at: format_rfc3339_micros(stored.received_at_us),
        supersessions,
    }))
}

/// A payload the store holds as JSON text, answered as the JSON value it is.
pub(crate) fn stored_payload(text: &str) -> Result<Value, ApiError> {
    serde_json::from_str(text).map_err(ApiError::internal)
}

/// Identifies one parsed event under `contract`, keeping its payload as compact JSON.
pub(crate) fn identify(contract: &Contract, value: Value) -> Result<NewEvent, ApiError> {
    identify_keeping_payload(contract, value).map_err(|refused| refused.0)
}

/// [`identify`]; a refusal keeps the document's compact JSON, to judge it again under
/// another version without a copy of the document on the usual path.
fn identify_keeping_payload(
    contract: &Contract,
    value: Value,
) -> Result<NewEvent, Box<(ApiError, String)>> {
    let payload = serde_json::to_string(&value)
        .map_err(|e| Box::new((ApiError::internal(e), String::new())))?;
    match contract.identify_owned(value) {
        Ok(identified) => Ok(NewEvent {
            identified,
            payload,
        }),
        Err(err) => Err(Box::new((err.into(), payload))),
    }
}

/// [`identify_keeping_payload`] then [`admit`].
fn judge(
    state: &AppState,
    contract: &Contract,
    value: Value,
) -> Result<NewEvent, Box<(ApiError, String)>> {
    let event = identify_keeping_payload(contract, value)?;
    match admission(state, contract, &event) {
        Ok(_) => Ok(event),
        Err(err) => Err(Box::new((err, event.payload))),
    }
}

/// The event, if the time it is partitioned by lies inside the dedupe horizon; else
/// `422 outside_horizon` naming the occurrence field and the backfill command. Checked
/// before anything is written, on both backends alike. An event partitioned by no time
/// (its contract declares none, or declares it transport metadata, as OpenLineage's
/// `eventTime`) is always admitted: its key never leaves the dedupe index.
pub(crate) fn admit(
    state: &AppState,
    contract: &Contract,
    event: NewEvent,
) -> Result<NewEvent, ApiError> {
    admission(state, contract, &event).map(|_| event)
}

/// How the live path takes `event` ([`Admission::Late`]: reconciled as a backfill would,
/// in a backfill's transaction), or [`admit`]'s refusal.
fn admission(
    state: &AppState,
    contract: &Contract,
    event: &NewEvent,
) -> Result<Admission, ApiError> {
    let at = partition_time(contract, event.identified.occurred_at_us);
    let horizon = state.config.dedupe_horizon;
    let now = traqlyte_store::now_us();
    let outside = match horizon.admission(at, now, state.config.late_events) {
        Ok(admission) => return Ok(admission),
        Err(outside) => outside,
    };
    let when = at.map(format_rfc3339_micros).unwrap_or_default();
    let side = match outside {
        OutsideHorizon::TooOld => horizon.too_old(state.config.late_events),
        OutsideHorizon::TooFarAhead => "more than a day in the future".to_string(),
    };
    let field = contract.occurred_at().unwrap_or_default();
    let remedy = match outside {
        OutsideHorizon::TooOld => format!(
            "Load late events with `traqlyte backfill --tenant TENANT --contract {} --file EVENTS.ndjson`, \
             which reconciles them against stored rows of any age",
            contract.name()
        ),
        // An event from the future is a producer's clock to fix, not a late event: no
        // backfill takes it either.
        OutsideHorizon::TooFarAhead => format!(
            "Check the producer's clock and the time it puts in {}; send the event again once its time is right",
            if field.is_empty() { "the event".to_string() } else { format!("`{field}`") }
        ),
    };
    Err(ApiError::unprocessable(
        "outside_horizon",
        format!(
            "the occurrence time {when} is {side}: the live path cannot promise to store it once, so nothing was written. {remedy}"
        ),
    )
    .with_field(field))
}

/// The ingestion transaction: a backfill's (rows of any age) when late events are
/// reconciled, else a live one (partitions inside the horizon only).
pub(crate) async fn begin_ingest(state: &AppState) -> Result<StoreTx, ApiError> {
    Ok(match state.config.late_events {
        LateEvents::Refuse => state.store.begin().await?,
        LateEvents::Reconcile => state.store.begin_backfill().await?,
    })
}

/// Stores a batch's admitted events (at `positions` of the request) in one transaction:
/// the events written, their positions and their outcomes. The transaction is a
/// backfill's only when `late` (late events are reconciled and one of the batch's events
/// was admitted as [`Admission::Late`]); else a live one, which skips the backfill's routing (a read of
/// the attached days per call). An event whose day has no partition to write to
/// although the server's horizon admits it (`partitions maintain` ran with a shorter
/// horizon, or has not created it) is reconciled when the server reconciles late
/// events, else `rejected` with `outside_horizon`, and the others stored
/// ([`traqlyte_store::Store::insert_events_apart`], as the NATS consumer does; a review:
/// one such event made the whole batch `422`, its valid events unstored).
async fn store_batch(
    state: &AppState,
    tenant: &TenantId,
    contract: &Contract,
    events: Vec<NewEvent>,
    positions: Vec<usize>,
    late: bool,
    results: &mut [ItemResult<'_>],
) -> Result<(Vec<NewEvent>, Vec<usize>, Vec<EventOutcome>), ApiError> {
    let stored = state
        .store
        .insert_events_apart(
            IngestSource::http(),
            tenant,
            contract,
            &events,
            late,
            state.config.late_events,
        )
        .await?;
    let (stored, left_out) = StoredApart::split(events, positions, stored);
    for index in left_out {
        let message = traqlyte_store::lacking_partition_message(contract.name().as_str());
        let refusal = ApiError::unprocessable("outside_horizon", message)
            .with_field(contract.occurred_at().unwrap_or(""));
        results[index].error = Some(refusal.into_body());
    }
    Ok((stored.events, stored.positions, stored.outcomes))
}

/// The events [`traqlyte_store::Store::insert_events_apart`] stored, with their
/// positions in the request (or fetch) and their outcomes.
pub(crate) struct StoredApart {
    pub(crate) events: Vec<NewEvent>,
    pub(crate) positions: Vec<usize>,
    pub(crate) outcomes: Vec<EventOutcome>,
}

impl StoredApart {
    /// Splits `events` (at `positions`) by `stored`, the store's answer for each: those
    /// stored, and the positions of those left out.
    pub(crate) fn split(
        events: Vec<NewEvent>,
        positions: Vec<usize>,
        stored: Vec<Option<EventOutcome>>,
    ) -> (StoredApart, Vec<usize>) {
        let mut apart = StoredApart {
            events: Vec::with_capacity(events.len()),
            positions: Vec::with_capacity(events.len()),
            outcomes: Vec::with_capacity(events.len()),
        };
        let mut left_out = Vec::new();
        for ((event, index), outcome) in events.into_iter().zip(positions).zip(stored) {
            if let Some(outcome) = outcome {
                apart.events.push(event);
                apart.positions.push(index);
                apart.outcomes.push(outcome);
            } else {
                left_out.push(index);
            }
        }
        (apart, left_out)
    }
}

/// The 409 answer to a collision of an event of the tenant's `contract`.
pub(crate) fn collision(
    contract: &str,
    event: &NewEvent,
    stored_fingerprint: &Fingerprint,
) -> ApiError {
    let event_id = event.identified.event_id.as_str();
    collision_advised(
        event,
        stored_fingerprint,
        &format!(
            "If the stored event is wrong, correct it with an explicit supersession (POST /events/{contract}/{event_id}/supersessions with the corrected event), never by resending; \
             if both events are real, the contract is missing an identity field: register a new contract version"
        ),
    )
}

/// The 409 answer to a collision, with `advice` on what to do (a built-in contract's
/// events are neither superseded nor given new versions by the tenant).
pub(crate) fn collision_advised(
    event: &NewEvent,
    stored_fingerprint: &Fingerprint,
    advice: &str,
) -> ApiError {
    let event_id = event.identified.event_id.as_str();
    ApiError::new(
        StatusCode::CONFLICT,
        "collision",
        format!(
            "a different event is already stored under id {event_id}: same identity fields, different content. \
             Nothing was overwritten and this payload was logged as a collision. {advice}"
        ),
    )
    .with_event_collision(
        &event.identified.event_id,
        stored_fingerprint,
        &event.identified.fingerprint,
    )
}

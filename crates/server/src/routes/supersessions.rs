//! `POST /events/{contract}/{event_id}/supersessions`: correcting a stored event. The
//! corrected event must keep the identity (the same `event_id` under the stored row's
//! contract version); it is stored beside the original, never over it.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use traqlyte_experiments::RuleError;
use traqlyte_identity::{ContractName, EventId};
use traqlyte_store::{now_us, SupersedeOutcome};
use utoipa::ToSchema;

use super::contracts::load;
use super::events::identify;
use crate::auth::Tenant;
use crate::body::typed::parse;
use crate::idempotency::Work;
use crate::{ApiError, AppState};

const REASON_CHARS_MAX: usize = 2_000;

/// The answer to a supersession.
#[derive(Serialize, ToSchema)]
pub(crate) struct SupersessionAck<'a> {
    event_id: &'a str,
    /// The corrected event's fingerprint.
    fingerprint: &'a str,
    /// `superseded` (201) or `unchanged` (200: the event already has this content).
    #[schema(value_type = crate::openapi::CorrectionStatus)]
    status: &'static str,
    /// The fingerprint of the content this correction replaced (`superseded` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = String)]
    supersedes: Option<String>,
}

/// Body `{"event": {…corrected event…}, "reason"?: "…"}` → `201 superseded` or `200 unchanged`.
#[utoipa::path(post, path = "/events/{contract}/{event_id}/supersessions", tag = "events", security(("api_key" = [])),
    params(("contract" = String, Path, description = "the contract's name"),
        ("event_id" = String, Path, description = "the event's id"), crate::openapi::IdempotencyHeaders),
    request_body = SupersessionBody,
    responses((status = 201, body = SupersessionAck, description = "stored beside the original"),
        (status = 200, body = SupersessionAck, description = "the event already has this content"),
        (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn supersede(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path((name, event_id)): Path<(String, String)>,
    work: Work,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    // The event sits one level down, under "event": as deep as a single event may be.
    let value = crate::body::read_json(
        &headers,
        body,
        state.config.body_bytes_max,
        state.config.json_depth_max + 1,
    )
    .await?;
    crate::auth::confirm_after_body(&state, &headers, &tenant).await?;
    let (event, reason) = parse_body(&value)?;
    let missing = || {
        ApiError::not_found(
            "event_not_found",
            format!("no event {event_id} under contract {name:?}"),
        )
    };
    let contract_name = ContractName::parse(&name).map_err(|_| missing())?;
    if traqlyte_identity::openlineage::builtin_contract(contract_name.as_str()).is_some() {
        return Err(ApiError::unprocessable("unsupported_contract", "events of built-in contracts are corrected by their producer's next event, not by supersession").with_field("contract"));
    }
    // An id that is not 64 lowercase hex digits names no stored event.
    let id = EventId::parse(&event_id).ok_or_else(missing)?;
    let stored = state
        .store
        .event(&tenant, &contract_name, &id)
        .await?
        .ok_or_else(missing)?;
    let version = u32::try_from(stored.contract_version).map_err(ApiError::internal)?;
    let contract = load(&state, &tenant, &name, Some(version)).await?;
    let corrected = identify(&contract, event)?;
    if corrected.identified.event_id != id {
        return Err(ApiError::unprocessable(
            "identity_mismatch",
            format!(
                "the corrected event has identity {} under contract {} version {version}, not {event_id}: a supersession keeps the identity fields; an event with other identity fields is a different event, post it to /events/{name}",
                corrected.identified.event_id, contract_name
            ),
        )
        .with_field("event"));
    }
    // PostgreSQL keys an event by its occurrence day too: content whose day moved would
    // not meet the stored row when its producer resends it, and be stored a second time.
    // Refused on both backends, so an answer never depends on the backend.
    let day = |at| traqlyte_store::partitions::partition_day(&contract, at);
    if day(stored.occurred_at_us) != day(corrected.identified.occurred_at_us) {
        let pointer = contract.occurred_at().unwrap_or("/");
        return Err(ApiError::unprocessable(
            "occurrence_day_changed",
            format!(
                "the correction moves the occurrence time ({pointer}) to another UTC day (or adds or removes it): events are keyed by that day, so a resend of the corrected event would not meet the stored one; correct it within its day, or post the event anew"
            ),
        )
        .with_field(pointer));
    }
    let mut tx = work.begin().await?;
    let outcome = tx
        .supersede(
            &tenant,
            &contract_name,
            &corrected,
            reason.as_deref(),
            now_us(),
        )
        .await?
        .ok_or_else(missing)?;
    work.finish(tx).await?;
    let fingerprint = corrected.identified.fingerprint.as_str();
    Ok(match outcome {
        SupersedeOutcome::Superseded { supersedes } => {
            tracing::info!(tenant = %tenant, contract = %contract_name, event_id, fingerprint, "event superseded");
            let ack = SupersessionAck {
                event_id: &event_id,
                fingerprint,
                status: "superseded",
                supersedes: Some(supersedes.to_string()),
            };
            (StatusCode::CREATED, Json(ack)).into_response()
        }
        SupersedeOutcome::SupersededSince { current } => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "supersession_conflict",
                format!(
                    "this content is an earlier correction of event {event_id}, superseded since: the current content has fingerprint {current}, and nothing was stored. \
                     A late retry of that correction needs nothing more; a return to that content cannot be stored (each content is stored once per event): \
                     read GET /events/{contract_name}/{event_id} and correct the current content if it is wrong"
                ),
            )
            .with_field("event"));
        }
        SupersedeOutcome::LimitReached { current } => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "supersession_limit",
                format!(
                    "event {event_id} already has {} corrections, the most one event may have, and nothing was stored; its current content has fingerprint {current}. \
                     A fact corrected this often is better posted anew as events of its own",
                    traqlyte_store::supersessions::SUPERSESSIONS_PER_EVENT_MAX
                ),
            )
            .with_field("event_id"));
        }
        SupersedeOutcome::Unchanged => Json(SupersessionAck {
            event_id: &event_id,
            fingerprint,
            status: "unchanged",
            supersedes: None,
        })
        .into_response(),
    })
}

/// A `POST /events/{contract}/{event_id}/supersessions` body.
#[derive(Deserialize, ToSchema)]
#[serde(
    deny_unknown_fields,
    expecting = "a JSON object {\"event\": {…}, \"reason\": \"…\"}"
)]
pub(crate) struct SupersessionBody {
    /// The corrected event, stored as JSON (where NUL is escaped, so it may hold one).
    #[schema(value_type = Object)]
    event: Map<String, Value>,
    /// Why the event was corrected: at most 2,000 characters, no NUL.
    #[schema(value_type = Option<String>, max_length = 2000)]
    reason: Option<Reason>,
}

/// Why an event was corrected: at most 2,000 characters, stored as text (no NUL).
#[derive(Deserialize)]
#[serde(try_from = "String")]
struct Reason(String);

impl TryFrom<String> for Reason {
    type Error = RuleError;

    fn try_from(text: String) -> Result<Self, RuleError> {
        if text.contains('\0') {
            return Err(RuleError::Nul);
        }
        if text.chars().count() > REASON_CHARS_MAX {
            return Err(RuleError::Broken("a string of at most 2000 characters"));
        }
        Ok(Reason(text))
    }
}

fn parse_body(value: &Value) -> Result<(Value, Option<String>), ApiError> {
    let body: SupersessionBody =
        parse(value).map_err(|r| r.unprocessable("invalid_supersession"))?;
    Ok((Value::Object(body.event), body.reason.map(|r| r.0)))
}

//! Corrections of outcomes: `POST /outcomes/{outcome_id}/supersessions` stores a new
//! value beside the original (never over it) and adjusts the report's per-unit sums in
//! the same transaction; `GET /outcomes/{outcome_id}` shows the original, the current
//! value and the history. A re-send of a different value under the same dedupe key is
//! still a 409 collision: only this explicit path corrects.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use traqlyte_experiments::{MetricKind, OutcomeId, OutcomeValue, RuleError};
use traqlyte_identity::format_rfc3339_micros;
use traqlyte_store::{now_us, CorrectionResult, OutcomeCorrection, OutcomeHistory, TenantId};
use utoipa::ToSchema;

use super::outcomes::{outcome_json, OutcomeView};
use crate::auth::Tenant;
use crate::body::read_document;
use crate::body::typed::parse;
use crate::idempotency::Work;
use crate::{ApiError, AppState};

const REASON_CHARS_MAX: usize = 2_000;

/// A `POST /outcomes/{outcome_id}/supersessions` body.
#[derive(Deserialize, ToSchema)]
#[serde(
    deny_unknown_fields,
    expecting = "a JSON object {\"value\": number or null, \"reason\": \"…\", \"expected_seq\"?: integer}"
)]
pub(crate) struct CorrectionBody {
    /// A precondition: the `seq` of the newest correction the sender saw (0: none). When
    /// another correction came since, nothing is stored and the answer is
    /// `409 correction_conflict` naming the current value, so a late retry never undoes
    /// a later correction. Absent: no precondition.
    #[serde(default)]
    #[schema(required = false, minimum = 0)]
    expected_seq: Option<u32>,
    /// The corrected value: finite, within ±1e15 (only outcomes of `sum` metrics are
    /// corrected; `null` is refused).
    #[schema(value_type = Option<f64>, minimum = -1e15, maximum = 1e15)]
    value: Option<OutcomeValue>,
    /// Why it was corrected: 1–2,000 characters, no NUL.
    #[schema(value_type = String, min_length = 1, max_length = 2000)]
    reason: Reason,
}

/// Why an outcome was corrected: 1–2,000 characters, stored as text (no NUL).
#[derive(Deserialize)]
#[serde(try_from = "String")]
struct Reason(String);

impl TryFrom<String> for Reason {
    type Error = RuleError;

    fn try_from(text: String) -> Result<Self, RuleError> {
        if text.contains('\0') {
            return Err(RuleError::Nul);
        }
        if text.trim().is_empty() || text.chars().count() > REASON_CHARS_MAX {
            return Err(RuleError::Broken(
                "a string of 1-2000 characters, not only spaces",
            ));
        }
        Ok(Reason(text))
    }
}

/// One correction as answered (fields in alphabetical order: see `routes::health::Health`).
#[derive(Serialize, ToSchema)]
pub(crate) struct CorrectionView {
    reason: String,
    /// Its number among the outcome's corrections, from 1.
    seq: i64,
    /// When it was stored (RFC 3339).
    superseded_at: String,
    /// The value it replaced.
    supersedes_value: Option<f64>,
    /// The corrected value.
    value: Option<f64>,
}

impl CorrectionView {
    fn of(c: &OutcomeCorrection) -> CorrectionView {
        CorrectionView {
            reason: c.reason.clone(),
            seq: c.seq,
            superseded_at: format_rfc3339_micros(c.superseded_at_us),
            supersedes_value: c.supersedes_value,
            value: c.value,
        }
    }
}

/// The answer to a correction.
#[derive(Serialize, ToSchema)]
pub(crate) struct CorrectionAck {
    /// The correction stored (`superseded` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = CorrectionView)]
    correction: Option<CorrectionView>,
    #[schema(value_type = String)]
    outcome_id: OutcomeId,
    /// `superseded` (201) or `unchanged` (200: the value already is the current one).
    #[schema(value_type = crate::openapi::CorrectionStatus)]
    status: &'static str,
}

/// `GET /outcomes/{outcome_id}`: the outcome and its corrections.
#[derive(Serialize, ToSchema)]
pub(crate) struct OutcomeHistoryView {
    /// The corrections, oldest first.
    corrections: Vec<CorrectionView>,
    /// The value the report uses: the newest correction's, else the original's.
    current_value: Option<f64>,
    /// The outcome as first stored (what every delivery of it is answered).
    outcome: OutcomeView,
}

fn not_found(id: &str) -> ApiError {
    ApiError::not_found("outcome_not_found", format!("no outcome {id:?}")).with_field("outcome_id")
}

/// The tenant's outcome, or the 404 an unknown or malformed id gets alike.
async fn history(
    state: &AppState,
    tenant: &TenantId,
    text: &str,
) -> Result<(OutcomeId, OutcomeHistory), ApiError> {
    let id = OutcomeId::try_from(text).map_err(|_| not_found(text))?;
    let found = state.store.outcome_history(tenant, &id).await?;
    found.map(|h| (id, h)).ok_or_else(|| not_found(text))
}

/// `GET /outcomes/{outcome_id}`.
#[utoipa::path(get, path = "/outcomes/{outcome_id}", tag = "experiments", security(("api_key" = [])),
    params(("outcome_id" = String, Path, description = "the outcome's id (`out_…`), as every answer names it")),
    responses((status = 200, body = OutcomeHistoryView), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn get_outcome(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(text): Path<String>,
) -> Result<Json<OutcomeHistoryView>, ApiError> {
    let (_, history) = history(&state, &tenant, &text).await?;
    Ok(Json(OutcomeHistoryView {
        corrections: history.corrections.iter().map(CorrectionView::of).collect(),
        current_value: history.current_value(),
        outcome: outcome_json(&tenant, &history.outcome),
    }))
}

/// `POST /outcomes/{outcome_id}/supersessions`: `{"value", "reason"}` → `201 superseded`
/// or `200 unchanged`.
#[utoipa::path(post, path = "/outcomes/{outcome_id}/supersessions", tag = "experiments", security(("api_key" = [])),
    params(("outcome_id" = String, Path, description = "the outcome's id (`out_…`)"), crate::openapi::IdempotencyHeaders),
    request_body = CorrectionBody,
    responses((status = 201, body = CorrectionAck, description = "stored beside the original; the report uses it"),
        (status = 200, body = CorrectionAck, description = "the value already is the current one"),
        (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn supersede_outcome(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(text): Path<String>,
    work: Work,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let document = read_document(&state, &headers, body).await?;
    crate::auth::confirm_after_body(&state, &headers, &tenant).await?;
    let body: CorrectionBody =
        parse(&document).map_err(|r| r.unprocessable("invalid_correction"))?;
    let value = body.value.map(OutcomeValue::get);
    let id = OutcomeId::try_from(text.as_str()).map_err(|_| not_found(&text))?;
    let outcome = state
        .store
        .outcome_by_id(&tenant, &id)
        .await?
        .ok_or_else(|| not_found(&text))?;
    let campaign = state
        .store
        .campaign(&tenant, &outcome.campaign_id)
        .await?
        .ok_or_else(|| {
            ApiError::internal(format!(
                "outcome names missing campaign {}",
                outcome.campaign_id
            ))
        })?;
    let metric = campaign
        .metrics
        .iter()
        .find(|m| m.name.as_str() == outcome.metric.as_str())
        .ok_or_else(|| {
            ApiError::internal(format!("outcome names unknown metric {}", outcome.metric))
        })?;
    if metric.kind != MetricKind::Sum {
        return Err(ApiError::unprocessable(
            "invalid_correction",
            format!(
                "metric {:?} is a {}: its figures count outcomes, not their values, so a corrected value would change no figure; nothing stored",
                outcome.metric,
                match metric.kind {
                    MetricKind::Conversion => "conversion",
                    _ => "count",
                }
            ),
        )
        .with_field("value"));
    }
    if value.is_none() {
        return Err(ApiError::unprocessable(
            "invalid_correction",
            format!("metric {:?} is a sum: value is required", outcome.metric),
        )
        .with_field("value"));
    }
    let window_us = i64::from(metric.window_hours) * 3_600_000_000;
    let mut tx = work.begin().await?;
    let result = tx
        .supersede_outcome(
            &tenant,
            &id,
            value,
            &body.reason.0,
            (window_us, now_us()),
            body.expected_seq.map(i64::from),
        )
        .await?
        .ok_or_else(|| not_found(&text))?;
    work.finish(tx).await?;
    Ok(match result {
        CorrectionResult::Superseded(correction) => {
            tracing::info!(tenant = %tenant, outcome_id = %id.as_str(), seq = correction.seq, "outcome superseded");
            let ack = CorrectionAck {
                correction: Some(CorrectionView::of(&correction)),
                outcome_id: id,
                status: "superseded",
            };
            (StatusCode::CREATED, Json(ack)).into_response()
        }
        CorrectionResult::Stale { seq, value } => {
            let current = value.map_or_else(|| "null".to_string(), |v| v.to_string());
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "correction_conflict",
                format!(
                    "the newest correction of this outcome is number {seq} (current value {current}), not {}: another correction came first and nothing was stored. Read GET /outcomes/{} and correct again if you still mean to",
                    body.expected_seq.unwrap_or(0),
                    id.as_str()
                ),
            )
            .with_field("expected_seq"));
        }
        CorrectionResult::LimitReached => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "correction_limit",
                format!(
                    "outcome {} already has {} corrections, the most one outcome may have, and nothing was stored",
                    id.as_str(),
                    traqlyte_store::outcome_corrections::CORRECTIONS_PER_OUTCOME_MAX
                ),
            )
            .with_field("outcome_id"));
        }
        CorrectionResult::Unchanged => Json(CorrectionAck {
            correction: None,
            outcome_id: id,
            status: "unchanged",
        })
        .into_response(),
    })
}

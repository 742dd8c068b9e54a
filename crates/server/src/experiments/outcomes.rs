//! `POST /outcome` and `POST /outcomes/batch`: unique on `(assignment_id, dedupe_key)`.
//! A duplicate returns exactly the original body (it is rendered from the stored row,
//! never from the request); a different payload under the same pair is a 409 collision.

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use traqlyte_experiments::{
    outcome_fingerprint, AssignmentId, CampaignId, DedupeKey, MetricName, OccurredAt, OutcomeId,
    OutcomeValue,
};
use traqlyte_identity::format_rfc3339_micros;
use traqlyte_store::partitions::ahead_of_clock;
use traqlyte_store::{
    now_us, stored_outcome_id, Assignment, Campaign, MetricKind, NewOutcome, OutcomeResult,
    StoredOutcome, TenantId,
};
use utoipa::ToSchema;

use crate::auth::{Tenant, WriteTenant};
use crate::body::typed::{parse, Id};
use crate::body::{read_batch, read_document};
use crate::{ApiError, AppState};

/// Header telling a client whether its outcome was new; the body is the same either way.
const DEDUPE_HEADER: &str = "x-tl-dedupe";

/// `POST /outcome`.
#[utoipa::path(post, path = "/outcome", tag = "experiments", security(("api_key" = [])),
    request_body = OutcomeBody,
    responses((status = 200, body = OutcomeView,
        description = "the stored outcome, the same bytes for a retry",
        headers(("X-TL-Dedupe" = String, description = "`inserted` or `duplicate`"))), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn post_outcome(
    State(state): State<AppState>,
    writer: WriteTenant,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let WriteTenant { tenant, key } = &writer;
    let answer: Result<Response, ApiError> = async {
        let value = read_document(&state, &headers, body).await?;
        writer.confirm_unchecked(&state, &headers).await?;
        let body = parse_item(&value)?;
        let lookups = Lookups::load(&state, tenant, std::slice::from_ref(&body)).await?;
        let outcome = lookups.check(body, &value, now_us())?;
        let result = match state
            .group_commit
            .outcome(tenant, key.as_ref(), &outcome)
            .await
        {
            Some(result) => result?,
            None => record_one(&state, tenant, &outcome).await?,
        };
        crate::metrics::record_outcomes(tenant, std::slice::from_ref(&result));
        match result {
            OutcomeResult::Inserted(stored) => Ok(answer(tenant, &stored, "inserted")),
            OutcomeResult::Duplicate(stored) => Ok(answer(tenant, &stored, "duplicate")),
            OutcomeResult::Collision(stored) => Err(collision(tenant, &stored)),
        }
    }
    .await;
    writer.settle(&state, answer).await
}

/// One outcome in a transaction of its own (group commit off).
async fn record_one(
    state: &AppState,
    tenant: &TenantId,
    outcome: &NewOutcome,
) -> Result<OutcomeResult, ApiError> {
    let mut tx = state.store.begin().await?;
    let results = tx
        .record_outcomes(tenant, std::slice::from_ref(outcome), now_us())
        .await?;
    tx.commit().await?;
    results
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::internal("store returned no outcome"))
}

/// The answer of `POST /outcomes/batch` (fields in alphabetical order: see
/// `routes::health::Health`).
#[derive(Serialize, ToSchema)]
pub(crate) struct OutcomeBatchAnswer {
    collisions: usize,
    duplicates: usize,
    inserted: usize,
    rejected: usize,
    /// One per item, in order.
    results: Vec<OutcomeItem>,
}

/// One item's result in `POST /outcomes/batch`.
#[derive(Serialize, ToSchema)]
pub(crate) struct OutcomeItem {
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    error: Option<crate::error::ErrorBody>,
    index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = OutcomeView)]
    outcome: Option<OutcomeView>,
    /// `inserted`, `duplicate`, `collision` or `rejected`.
    #[schema(value_type = crate::openapi::ItemStatus)]
    status: &'static str,
}

/// `POST /outcomes/batch`: a JSON array; each item judged on its own.
#[utoipa::path(post, path = "/outcomes/batch", tag = "experiments", security(("api_key" = [])),
    request_body(content = Vec<OutcomeBody>, description = "at most 1,000 outcomes"),
    responses((status = 200, body = OutcomeBatchAnswer), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn post_outcomes_batch(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<OutcomeBatchAnswer>, ApiError> {
    let items = read_batch(&state, &headers, body, "outcomes").await?;
    crate::auth::confirm_after_body(&state, &headers, &tenant).await?;
    let bodies: Vec<Result<OutcomeBody, ApiError>> = items
        .iter()
        .map(|item| item.as_ref().map_err(Clone::clone).and_then(parse_item))
        .collect();
    let parsed: Vec<&OutcomeBody> = bodies.iter().filter_map(|b| b.as_ref().ok()).collect();
    let lookups = Lookups::load(&state, &tenant, parsed).await?;
    let mut results: Vec<Option<OutcomeItem>> = Vec::with_capacity(items.len());
    let now = now_us();
    let mut valid = Vec::new();
    let mut positions = Vec::new();
    for (index, (body, item)) in bodies.into_iter().zip(&items).enumerate() {
        let checked = match (body, item) {
            (Ok(body), Ok(value)) => lookups.check(body, value, now),
            (Err(err), _) => Err(err),
            (Ok(_), Err(err)) => Err(err.clone()),
        };
        match checked {
            Ok(outcome) => {
                valid.push(outcome);
                positions.push(index);
                results.push(None);
            }
            Err(err) if err.status_code().is_server_error() => return Err(err),
            Err(err) => results.push(Some(OutcomeItem {
                error: Some(err.into_body()),
                index,
                outcome: None,
                status: "rejected",
            })),
        }
    }
    let mut tx = state.store.begin().await?;
    let recorded = tx.record_outcomes(&tenant, &valid, now_us()).await?;
    tx.commit().await?;
    crate::metrics::record_batch_size("http_outcomes", items.len());
    crate::metrics::record_outcomes(&tenant, &recorded);
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for (index, result) in positions.into_iter().zip(recorded) {
        let (status, stored, error) = match &result {
            OutcomeResult::Inserted(s) => ("inserted", s, None),
            OutcomeResult::Duplicate(s) => ("duplicate", s, None),
            OutcomeResult::Collision(s) => {
                ("collision", s, Some(collision(&tenant, s).into_body()))
            }
        };
        *counts.entry(status).or_default() += 1;
        let outcome = error.is_none().then(|| outcome_json(&tenant, stored));
        results[index] = Some(OutcomeItem {
            error,
            index,
            outcome,
            status,
        });
    }
    let count = |k: &str| counts.get(k).copied().unwrap_or(0);
    debug_assert!(
        results.iter().all(Option::is_some),
        "every item has a result"
    );
    Ok(Json(OutcomeBatchAnswer {
        collisions: count("collision"),
        duplicates: count("duplicate"),
        inserted: count("inserted"),
        rejected: items.len() - valid.len(),
        results: results.into_iter().flatten().collect(),
    }))
}

/// An outcome: the body of `POST /outcome`, an item of `POST /outcomes/batch`.
#[derive(Deserialize, ToSchema)]
#[serde(
    deny_unknown_fields,
    expecting = "a JSON object {\"assignment_id\", \"dedupe_key\", \"metric\", \"value\", \"occurred_at\"}"
)]
pub(crate) struct OutcomeBody {
    #[schema(value_type = String, min_length = 1)]
    assignment_id: Id,
    /// The client's key for one business event, unique per assignment.
    #[schema(value_type = String, min_length = 1, max_length = 512)]
    dedupe_key: DedupeKey,
    #[schema(value_type = String, min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_.-]+$")]
    metric: MetricName,
    /// Required for `sum` metrics; finite, within ±1e15.
    #[schema(value_type = Option<f64>, minimum = -1e15, maximum = 1e15)]
    value: Option<OutcomeValue>,
    /// RFC 3339 with an offset, at most 24 hours after the server's clock.
    #[schema(value_type = String, format = DateTime)]
    occurred_at: OccurredAt,
}

/// Parses one outcome object (before any lookup: binding a NUL fails on PostgreSQL,
/// reads included).
fn parse_item(value: &Value) -> Result<OutcomeBody, ApiError> {
    if !value.is_object() {
        return Err(ApiError::unprocessable(
            "not_an_object",
            "an outcome must be a JSON object",
        ));
    }
    parse(value).map_err(|r| r.unprocessable("invalid_outcome"))
}

/// The assignments a request names and their campaigns, read in one query each.
struct Lookups {
    assignments: HashMap<AssignmentId, Assignment>,
    campaigns: HashMap<CampaignId, Campaign>,
}

impl Lookups {
    /// Reads the assignments `bodies` name, then their campaigns.
    async fn load<'a>(
        state: &AppState,
        tenant: &TenantId,
        bodies: impl IntoIterator<Item = &'a OutcomeBody>,
    ) -> Result<Lookups, ApiError> {
        let mut ids: Vec<AssignmentId> = bodies
            .into_iter()
            .filter_map(|b| AssignmentId::try_from(b.assignment_id.as_str()).ok())
            .collect();
        ids.sort();
        ids.dedup();
        let assignments: HashMap<AssignmentId, Assignment> = state
            .store
            .assignments_by_id(tenant, &ids)
            .await?
            .into_iter()
            .map(|a| (a.assignment_id.clone(), a))
            .collect();
        let mut campaign_ids: Vec<CampaignId> = assignments
            .values()
            .map(|a| a.campaign_id.clone())
            .collect();
        campaign_ids.sort();
        campaign_ids.dedup();
        let campaigns = state
            .store
            .campaigns_by_id(tenant, &campaign_ids)
            .await?
            .into_iter()
            .map(|c| (c.id.clone(), c))
            .collect();
        Ok(Lookups {
            assignments,
            campaigns,
        })
    }

    /// Checks one parsed outcome (`value` as received) against its assignment and campaign,
    /// and its time against the server's clock (`now_us`).
    fn check(&self, body: OutcomeBody, value: &Value, now_us: i64) -> Result<NewOutcome, ApiError> {
        let OutcomeBody {
            assignment_id,
            dedupe_key,
            metric,
            value: number,
            occurred_at,
        } = body;
        let metric = metric.as_str();
        let number = number.map(OutcomeValue::get);
        let occurred_at_us = occurred_at.micros();
        // An outcome happened: a time further ahead than the clock skew events are allowed
        // (a producer's clock or time zone wrong, a scheduled date sent for the event's)
        // counted inside a long window as if it had, and moved no window's end.
        if ahead_of_clock(occurred_at_us, now_us) {
            return Err(invalid(
                "occurred_at",
                format!(
                    "occurred_at {} lies more than 24 hours after the server's clock ({}): an outcome is something that happened; check the producer's clock and time zone",
                    format_rfc3339_micros(occurred_at_us),
                    format_rfc3339_micros(now_us)
                ),
            ));
        }
        let text = assignment_id.as_str();
        // An id that breaks the format names no assignment: the same 404 as an unknown one.
        let assignment = AssignmentId::try_from(text)
            .ok()
            .and_then(|id| self.assignments.get(&id))
            .ok_or_else(|| assignment_not_found(text))?;
        let campaign = self.campaigns.get(&assignment.campaign_id).ok_or_else(|| {
            ApiError::internal(format!(
                "assignment names missing campaign {}",
                assignment.campaign_id
            ))
        })?;
        let definition = campaign
            .metrics
            .iter()
            .find(|m| m.name == metric)
            .ok_or_else(|| {
                let known: Vec<&str> = campaign.metrics.iter().map(|m| m.name.as_str()).collect();
                invalid(
                    "metric",
                    format!(
                        "metric {metric:?} is not a metric of campaign {}; known: {}",
                        campaign.id,
                        known.join(", ")
                    ),
                )
            })?;
        if definition.kind == MetricKind::Sum && number.is_none() {
            return Err(invalid(
                "value",
                format!("metric {metric:?} is a sum: value is required"),
            ));
        }
        Ok(NewOutcome {
            assignment: assignment.clone(),
            dedupe_key,
            metric: metric.to_string(),
            value: number,
            occurred_at_us,
            window_us: i64::from(definition.window_hours) * 3_600_000_000,
            fingerprint: outcome_fingerprint(metric, number, occurred_at_us),
            payload: value.to_string(),
        })
    }
}

fn assignment_not_found(text: &str) -> ApiError {
    ApiError::not_found(
        "assignment_not_found",
        format!("no assignment {text:?}; get one from POST /assignments"),
    )
    .with_field("assignment_id")
}

fn invalid(field: &str, message: impl Into<String>) -> ApiError {
    ApiError::unprocessable("invalid_outcome", message).with_field(field)
}

/// The answer to every delivery of an outcome: rendered from the stored row only (its
/// id is derived from the row's key, so a retry gets the same bytes).
pub(crate) fn outcome_json(tenant: &TenantId, stored: &StoredOutcome) -> OutcomeView {
    OutcomeView {
        outcome_id: stored_outcome_id(tenant, stored),
        arm: stored.arm.clone(),
        assignment_id: stored.assignment_id.clone(),
        campaign_id: stored.campaign_id.clone(),
        dedupe_key: stored.dedupe_key.clone(),
        metric: stored.metric.clone(),
        occurred_at: format_rfc3339_micros(stored.occurred_at_us),
        received_at: format_rfc3339_micros(stored.received_at_us),
        value: stored.value,
    }
}

/// A stored outcome as answered (fields in alphabetical order: see
/// `routes::health::Health`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct OutcomeView {
    arm: String,
    #[schema(value_type = String)]
    assignment_id: AssignmentId,
    #[schema(value_type = String)]
    campaign_id: CampaignId,
    #[schema(value_type = String)]
    dedupe_key: DedupeKey,
    metric: String,
    occurred_at: String,
    /// The outcome's id, the same for every delivery: name it to correct the value
    /// (`POST /outcomes/{outcome_id}/supersessions`). The value here is always the one
    /// first stored; `GET /outcomes/{outcome_id}` shows the current one.
    #[schema(value_type = String)]
    outcome_id: OutcomeId,
    received_at: String,
    value: Option<f64>,
}

fn answer(tenant: &TenantId, stored: &StoredOutcome, status: &'static str) -> Response {
    let mut response = Json(outcome_json(tenant, stored)).into_response();
    response
        .headers_mut()
        .insert(DEDUPE_HEADER, HeaderValue::from_static(status));
    response
}

fn collision(tenant: &TenantId, stored: &StoredOutcome) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "outcome_collision",
        format!(
            "assignment {} already has a different outcome under dedupe_key {:?}; nothing was overwritten and this payload was logged. \
             Use a distinct, namespaced dedupe_key per business event (e.g. prod:checkout_completed:merchant_42:order_12345)",
            stored.assignment_id, stored.dedupe_key.as_str()
        ),
    )
    .with_stored_outcome(outcome_json(tenant, stored))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_outcome_value_bound_is_the_stores() {
        // The store keeps its own constant (it bounds the sums it computes); the newtype
        // that enforces the bound at the edge must agree with it.
        assert_eq!(
            traqlyte_experiments::OutcomeValue::ABS_MAX,
            traqlyte_store::OUTCOME_VALUE_ABS_MAX
        );
    }
}

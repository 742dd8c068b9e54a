//! Experiments: sticky assignments (`POST /assignments`), deduplicated outcomes
//! (`POST /outcome`, `POST /outcomes/batch`) and the dedupe-aware report
//! (`GET /campaigns/{id}/report`).
//!
//! Outcomes rely on layer 1 only: `(assignment_id, dedupe_key)` is unique in the store,
//! a retry gets the original answer byte for byte and is counted against its arm, so the
//! report can show what a pipeline without dedupe would have concluded.

pub(crate) mod outcomes;
pub mod report;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use serde::{Deserialize, Serialize};
use traqlyte_experiments::{bucketing, UnitId};
use traqlyte_identity::format_rfc3339_micros;
use traqlyte_store::{now_us, Assignment};
use utoipa::ToSchema;

use crate::auth::Tenant;
use crate::body::read_document;
use crate::body::typed::{parse, Id};
use crate::idempotency::Work;
use crate::{ApiError, AppState};

pub(crate) use outcomes::{post_outcome, post_outcomes_batch, OutcomeView};

/// A `POST /assignments` body.
#[derive(Deserialize, ToSchema)]
#[serde(
    deny_unknown_fields,
    expecting = "a JSON object {\"campaign_id\", \"unit_id\"}"
)]
pub(crate) struct AssignmentBody {
    #[schema(value_type = String, min_length = 1)]
    campaign_id: Id,
    /// The unit (a user, a device): 1-256 bytes, no NUL.
    #[schema(value_type = String, min_length = 1, max_length = 256)]
    unit_id: UnitId,
}

/// A unit's assignment (fields in alphabetical order: see `routes::health::Health`).
#[derive(Serialize, ToSchema)]
pub(crate) struct AssignmentView {
    arm: String,
    assigned_at: String,
    assignment_id: String,
    campaign_id: String,
    unit_id: String,
    /// The campaign version the unit was first assigned under.
    version: i64,
}

/// `POST /assignments` `{"campaign_id","unit_id"}` → the unit's (first) assignment.
#[utoipa::path(post, path = "/assignments", tag = "experiments", security(("api_key" = [])), params(crate::openapi::IdempotencyHeaders),
    request_body = AssignmentBody,
    responses((status = 200, body = AssignmentView, description = "the unit's first assignment (sticky)"), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn assign(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    work: Work,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<AssignmentView>, ApiError> {
    let value = read_document(&state, &headers, body).await?;
    // Parsed before any lookup: binding a NUL fails on PostgreSQL, reads included.
    let AssignmentBody {
        campaign_id,
        unit_id,
    } = parse(&value).map_err(|r| r.unprocessable("invalid_assignment"))?;
    let campaign_id = campaign_id.as_str();
    let unit_id = unit_id.as_str();
    let campaign = state
        .store
        .campaign(&tenant, campaign_id)
        .await?
        .ok_or_else(|| {
            ApiError::not_found("campaign_not_found", format!("no campaign {campaign_id:?}"))
                .with_field("campaign_id")
        })?;
    let versions = state.store.campaign_versions(&tenant, campaign_id).await?;
    let latest = versions.last().ok_or_else(not_published)?;
    let arm = bucketing::bucket(&latest.salt, unit_id, &latest.arms)
        .ok_or_else(|| ApiError::internal("published version without arms"))?;
    let proposed = Assignment {
        assignment_id: bucketing::assignment_id(&campaign.id, unit_id),
        campaign_id: campaign.id.clone(),
        unit_id: unit_id.to_string(),
        arm: arm.key.clone(),
        version: latest.version,
        assigned_at_us: now_us(),
    };
    let mut tx = work.begin().await?;
    let stored = tx.assign(&tenant, &proposed).await?;
    work.finish(tx).await?;
    Ok(Json(AssignmentView {
        arm: stored.arm,
        assigned_at: format_rfc3339_micros(stored.assigned_at_us),
        assignment_id: stored.assignment_id,
        campaign_id: stored.campaign_id,
        unit_id: stored.unit_id,
        version: stored.version,
    }))
}

/// 409 for a campaign that has never been published.
pub(crate) fn not_published() -> ApiError {
    ApiError::new(axum::http::StatusCode::CONFLICT, "campaign_not_published", "this campaign has no published version yet; publish it with POST /campaigns/{id}/publish before assigning units")
}

//! Experiments: sticky assignments (`POST /assignments`), deduplicated outcomes
//! (`POST /outcome`, `POST /outcomes/batch`) and the dedupe-aware report
//! (`GET /campaigns/{id}/report`); corrections of outcomes (`corrections.rs`).
//!
//! Outcomes rely on layer 1 only: `(assignment_id, dedupe_key)` is unique in the store,
//! a retry gets the original answer byte for byte and is counted against its arm, so the
//! report can show what a pipeline without dedupe would have concluded.

pub(crate) mod assignments;
pub(crate) mod corrections;
pub(crate) mod outcomes;
pub mod report;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use serde::{Deserialize, Serialize};
use traqlyte_experiments::{bucketing, AssignmentId, CampaignId, UnitId};
use traqlyte_identity::format_rfc3339_micros;
use traqlyte_store::{now_us, Assignment, CampaignVersion};
use utoipa::ToSchema;

use crate::auth::WriteTenant;
use crate::body::read_document;
use crate::body::typed::{parse, Id};
use crate::group_commit::AssignmentAnswer;
use crate::idempotency::Work;
use crate::{ApiError, AppState};

pub(crate) use assignments::post_assignments_batch;
pub(crate) use outcomes::{post_outcome, post_outcomes_batch, OutcomeView};

/// A `POST /assignments` body.
#[derive(Deserialize, ToSchema)]
#[serde(
    deny_unknown_fields,
    expecting = "a JSON object {\"campaign_id\", \"unit_id\"}"
)]
pub(crate) struct AssignmentBody {
    #[schema(value_type = String, min_length = 1)]
    pub(crate) campaign_id: Id,
    /// The unit (a user, a device): 1-256 bytes, no NUL.
    #[schema(value_type = String, min_length = 1, max_length = 256)]
    pub(crate) unit_id: UnitId,
}

/// A unit's assignment (fields in alphabetical order: see `routes::health::Health`).
#[derive(Serialize, ToSchema)]
pub(crate) struct AssignmentView {
    arm: String,
    assigned_at: String,
    #[schema(value_type = String)]
    assignment_id: AssignmentId,
    #[schema(value_type = String)]
    campaign_id: CampaignId,
    #[schema(value_type = String)]
    unit_id: UnitId,
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
    writer: WriteTenant,
    work: Work,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<AssignmentView>, ApiError> {
    let WriteTenant { tenant, key } = &writer;
    let answer: Result<Json<AssignmentView>, ApiError> = async {
        let value = read_document(&state, &headers, body).await?;
        writer.confirm_unchecked(&state, &headers).await?;
        // Parsed before any lookup: binding a NUL fails on PostgreSQL, reads included.
        let AssignmentBody {
            campaign_id,
            unit_id,
        } = parse(&value).map_err(|r| r.unprocessable("invalid_assignment"))?;
        let campaign_id = known_campaign_id(campaign_id.as_str(), "campaign_id")?;
        // With group commit on, a campaign whose latest version this process remembers
        // needs no read before the queue: the batch answers a known unit with its stored
        // assignment, and re-checks that the remembered version is still the latest.
        if !work.is_idempotent() {
            if let Some(stored) =
                remembered_assignment(&state, &writer, &campaign_id, &unit_id).await?
            {
                return Ok(Json(assignment_view(stored)));
            }
        }
        // A known unit: one indexed read answers it (an assignment never changes, and one
        // exists only for a published campaign). A read-only answer, so a key from the
        // server's memory is confirmed first (`WriteTenant::confirm`).
        if let Some(stored) = state
            .store
            .unit_assignment(tenant, &campaign_id, &unit_id)
            .await?
        {
            return writer
                .confirm(&state, Ok(Json(assignment_view(stored))))
                .await;
        }
        // The latest version alone (one indexed read); only a campaign without one needs the
        // second read that tells an unknown campaign (404) from an unpublished one (409).
        let Some(latest) = state
            .store
            .latest_versions(tenant, std::slice::from_ref(&campaign_id))
            .await?
            .pop()
        else {
            return Err(match state.store.campaign(tenant, &campaign_id).await? {
                Some(_) => not_published("campaign_id"),
                None => campaign_not_found(campaign_id.as_str(), "campaign_id"),
            });
        };
        let proposed = propose(&campaign_id, &latest, &unit_id, now_us())?;
        // Under an idempotency key the assignment commits with the stored response, in the
        // layer's transaction: such a request never joins a group commit.
        if !work.is_idempotent() {
            if let Some(lookups) = state.group_commit.lookups() {
                lookups.remember_campaign(tenant, &latest);
            }
            match state
                .group_commit
                .assignment(tenant, key.as_ref(), &proposed, false)
                .await
            {
                Some(Ok(AssignmentAnswer::Stored(stored))) => {
                    return Ok(Json(assignment_view(stored)))
                }
                Some(Ok(AssignmentAnswer::StaleCampaign)) => {
                    return Err(ApiError::internal(
                        "a batch refused a proposal not made from memory",
                    ))
                }
                Some(Err(err)) => return Err(err),
                None => {}
            }
        }
        let mut tx = work.begin().await?;
        let stored = tx.assign(tenant, &proposed).await?;
        work.finish(tx).await?;
        Ok(Json(assignment_view(stored)))
    }
    .await;
    writer.settle(&state, answer).await
}

/// The unit's assignment through group commit, proposed under the campaign's latest
/// version as this process remembers it; `None` when group commit is off, nothing is
/// remembered, or the batch found a newer version (forgotten: the caller reads the store).
async fn remembered_assignment(
    state: &AppState,
    writer: &WriteTenant,
    campaign_id: &CampaignId,
    unit_id: &UnitId,
) -> Result<Option<Assignment>, ApiError> {
    let WriteTenant { tenant, key } = writer;
    let Some(lookups) = state.group_commit.lookups() else {
        return Ok(None);
    };
    let Some(latest) = lookups.campaign(tenant, campaign_id) else {
        return Ok(None);
    };
    let proposed = propose(campaign_id, &latest, unit_id, now_us())?;
    match state
        .group_commit
        .assignment(tenant, key.as_ref(), &proposed, true)
        .await
    {
        Some(Ok(AssignmentAnswer::Stored(stored))) => Ok(Some(stored)),
        Some(Ok(AssignmentAnswer::StaleCampaign)) => {
            lookups.forget_campaign(tenant, campaign_id);
            Ok(None)
        }
        Some(Err(err)) => Err(err),
        None => Ok(None),
    }
}

/// The assignment `unit_id` gets under `latest`, the campaign's latest version.
pub(crate) fn propose(
    campaign_id: &CampaignId,
    latest: &CampaignVersion,
    unit_id: &UnitId,
    now_us: i64,
) -> Result<Assignment, ApiError> {
    let arm = bucketing::bucket(&latest.salt, unit_id.as_str(), &latest.arms)
        .ok_or_else(|| ApiError::internal("published version without arms"))?;
    Ok(Assignment {
        assignment_id: bucketing::assignment_id(campaign_id, unit_id.as_str()),
        campaign_id: campaign_id.clone(),
        unit_id: unit_id.clone(),
        arm: arm.key.clone(),
        version: latest.version,
        assigned_at_us: now_us,
    })
}

/// A stored assignment as answered.
pub(crate) fn assignment_view(stored: Assignment) -> AssignmentView {
    AssignmentView {
        arm: stored.arm,
        assigned_at: format_rfc3339_micros(stored.assigned_at_us),
        assignment_id: stored.assignment_id,
        campaign_id: stored.campaign_id,
        unit_id: stored.unit_id,
        version: stored.version,
    }
}

/// The campaign id a client named, parsed at the edge. An id that breaks the format names
/// no campaign, so it gets the same 404 as an unknown one (as it always did); `field` is
/// where the client wrote it.
pub(crate) fn known_campaign_id(text: &str, field: &str) -> Result<CampaignId, ApiError> {
    CampaignId::try_from(text).map_err(|_| campaign_not_found(text, field))
}

/// 404 for a campaign id that names no campaign of the tenant.
pub(crate) fn campaign_not_found(text: &str, field: &str) -> ApiError {
    ApiError::not_found("campaign_not_found", format!("no campaign {text:?}")).with_field(field)
}

/// 409 for a campaign that has never been published; `field` names where the request
/// gave the campaign's id (`campaign_id` in a body, `id` in a path).
pub(crate) fn not_published(field: &str) -> ApiError {
    ApiError::new(axum::http::StatusCode::CONFLICT, "campaign_not_published", "this campaign has no published version yet; publish it with POST /campaigns/{id}/publish before assigning units")
        .with_field(field)
}

//! `POST /assignments/batch`: up to `batch_events_max` units of one or more campaigns,
//! each answered its sticky arm exactly as `POST /assignments` would, in a constant number
//! of store statements (campaigns, latest versions, insert, read back). Each item is
//! judged on its own: a bad item is `rejected` with the single route's error, the others
//! are assigned.

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use serde::Serialize;
use serde_json::Value;
use traqlyte_experiments::{CampaignId, UnitId};
use traqlyte_store::{now_us, Assignment, Campaign, CampaignVersion};
use utoipa::ToSchema;

use super::{
    assignment_view, campaign_not_found, known_campaign_id, not_published, propose, AssignmentBody,
    AssignmentView,
};
use crate::auth::Tenant;
use crate::body::read_batch;
use crate::body::typed::parse;
use crate::{ApiError, AppState};

/// The answer of `POST /assignments/batch` (fields in alphabetical order: see
/// `routes::health::Health`).
#[derive(Serialize, ToSchema)]
pub(crate) struct AssignmentBatchAnswer {
    assigned: usize,
    rejected: usize,
    /// One per item, in order.
    results: Vec<AssignmentItem>,
}

/// One item's result in `POST /assignments/batch`.
#[derive(Serialize, ToSchema)]
pub(crate) struct AssignmentItem {
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = AssignmentView)]
    assignment: Option<AssignmentView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    error: Option<crate::error::ErrorBody>,
    index: usize,
    /// `assigned` or `rejected`.
    #[schema(value_type = crate::openapi::AssignmentStatus)]
    status: &'static str,
}

/// `POST /assignments/batch`: a JSON array of `{"campaign_id","unit_id"}`.
#[utoipa::path(post, path = "/assignments/batch", tag = "experiments", security(("api_key" = [])),
    request_body(content = Vec<AssignmentBody>, description = "at most 1,000 units"),
    responses((status = 200, body = AssignmentBatchAnswer, description = "each unit's first assignment (sticky)"),
        (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn post_assignments_batch(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<AssignmentBatchAnswer>, ApiError> {
    let items = read_batch(&state, &headers, body, "assignments").await?;
    crate::auth::confirm_after_body(&state, &headers, &tenant).await?;
    let parsed: Vec<Result<(CampaignId, UnitId), ApiError>> = items
        .iter()
        .map(|item| item.as_ref().map_err(Clone::clone).and_then(parse_item))
        .collect();
    let mut ids: Vec<CampaignId> = parsed.iter().flatten().map(|(c, _)| c.clone()).collect();
    ids.sort();
    ids.dedup();
    let campaigns: HashMap<CampaignId, Campaign> = state
        .store
        .campaigns_by_id(&tenant, &ids)
        .await?
        .into_iter()
        .map(|c| (c.id.clone(), c))
        .collect();
    let latest: HashMap<CampaignId, CampaignVersion> = state
        .store
        .latest_versions(&tenant, &ids)
        .await?
        .into_iter()
        .map(|v| (v.campaign_id.clone(), v))
        .collect();
    let now = now_us();
    let proposals: Vec<Result<Assignment, ApiError>> = parsed
        .into_iter()
        .map(|item| {
            let (campaign_id, unit_id) = item?;
            if !campaigns.contains_key(&campaign_id) {
                return Err(campaign_not_found(campaign_id.as_str(), "campaign_id"));
            }
            let version = latest
                .get(&campaign_id)
                .ok_or_else(|| not_published("campaign_id"))?;
            propose(&campaign_id, version, &unit_id, now)
        })
        .collect();
    if let Some(Err(err)) = proposals
        .iter()
        .find(|p| matches!(p, Err(e) if e.status_code().is_server_error()))
    {
        return Err(err.clone());
    }
    let valid: Vec<Assignment> = proposals.iter().flatten().cloned().collect();
    let mut tx = state.store.begin().await?;
    let stored = tx.assign_many(&tenant, &valid).await?;
    tx.commit().await?;
    Ok(Json(answer(proposals, stored)))
}

/// One item: parsed before any lookup (binding a NUL fails on PostgreSQL, reads included).
fn parse_item(value: &Value) -> Result<(CampaignId, UnitId), ApiError> {
    if !value.is_object() {
        return Err(ApiError::unprocessable(
            "not_an_object",
            "an assignment must be a JSON object",
        ));
    }
    let AssignmentBody {
        campaign_id,
        unit_id,
    } = parse(value).map_err(|r| r.unprocessable("invalid_assignment"))?;
    let campaign_id = known_campaign_id(campaign_id.as_str(), "campaign_id")?;
    Ok((campaign_id, unit_id))
}

/// The per-item answer: stored assignments in the order of the valid proposals.
fn answer(
    proposals: Vec<Result<Assignment, ApiError>>,
    stored: Vec<Assignment>,
) -> AssignmentBatchAnswer {
    let mut stored = stored.into_iter();
    let mut results = Vec::with_capacity(proposals.len());
    let (mut assigned, mut rejected) = (0, 0);
    for (index, proposal) in proposals.into_iter().enumerate() {
        let item = match proposal.map(|_| stored.next()) {
            Ok(Some(assignment)) => {
                assigned += 1;
                AssignmentItem {
                    assignment: Some(assignment_view(assignment)),
                    error: None,
                    index,
                    status: "assigned",
                }
            }
            Ok(None) => {
                debug_assert!(false, "one stored assignment per valid item");
                rejected += 1;
                rejected_item(index, ApiError::internal("assignment missing"))
            }
            Err(err) => {
                rejected += 1;
                rejected_item(index, err)
            }
        };
        results.push(item);
    }
    AssignmentBatchAnswer {
        assigned,
        rejected,
        results,
    }
}

fn rejected_item(index: usize, err: ApiError) -> AssignmentItem {
    AssignmentItem {
        assignment: None,
        error: Some(err.into_body()),
        index,
        status: "rejected",
    }
}

//! Campaigns: create, read, and publish immutable versions. Publishing is the mutation
//! transport idempotency protects: without a key, a retried publish mints a new version.

use std::collections::HashSet;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use traqlyte_experiments::{
    ArmKey, ArmsError, CampaignId, CampaignKey, CampaignName, MetricName, Metrics, MetricsError,
    RuleError, VersionNote, Weight, WindowHours,
};
use traqlyte_identity::format_rfc3339_micros;
use traqlyte_store::{
    now_us, Arm, Arms, Campaign, CampaignVersion, MetricDef, MetricKind, NewCampaign, StoreError,
};
use utoipa::{IntoParams, ToSchema};

use crate::auth::Tenant;
use crate::body::read_document;
use crate::body::typed::{parse, Objects};
use crate::experiments::{campaign_not_found, known_campaign_id};
use crate::idempotency::Work;
use crate::{ApiError, AppState};

/// `POST /campaigns` → 201 with the campaign; 200 with it when the same definition was
/// created under the key before (a retry).
#[utoipa::path(post, path = "/campaigns", tag = "campaigns", security(("api_key" = [])), params(crate::openapi::IdempotencyHeaders),
    request_body = CampaignBody,
    responses((status = 201, body = CampaignView), (status = 200, body = CampaignView, description = "the campaign created before from the same definition"), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn create(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    work: Work,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let value = read_document(&state, &headers, body).await?;
    crate::auth::confirm_after_body(&state, &headers, &tenant).await?;
    let new = parse_campaign(&value)?;
    let mut tx = work.begin().await?;
    let created = tx
        .create_campaign(&tenant, &new, now_us())
        .await
        // The one conflict of a creation: the campaign key is taken.
        .map_err(conflict_names("key"))?;
    work.finish(tx).await?;
    let campaign = match created {
        traqlyte_store::CampaignCreated::New(campaign) => campaign,
        // The same definition under the same key: a retried creation (its answer was
        // lost), answered with the campaign as it stands, as webhooks and bindings are.
        // Its latest version was read in the creation's own transaction: on an in-memory
        // database the read pool is the one connection that transaction holds.
        traqlyte_store::CampaignCreated::Existing { campaign, latest } => {
            let view = campaign_json(&campaign, latest.as_ref());
            return Ok((StatusCode::OK, Json(view)).into_response());
        }
    };
    tracing::info!(tenant = %tenant, campaign = %campaign.id, key = %campaign.key, "campaign created");
    Ok((StatusCode::CREATED, Json(campaign_json(&campaign, None))).into_response())
}

/// `GET /campaigns/{id}`.
#[utoipa::path(get, path = "/campaigns/{id}", tag = "campaigns", security(("api_key" = [])),
    params(("id" = String, Path, description = "the campaign's id")),
    responses((status = 200, body = CampaignView), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn show(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
) -> Result<Json<CampaignView>, ApiError> {
    let id = known_campaign_id(&id, "id")?;
    let campaign = state
        .store
        .campaign(&tenant, &id)
        .await?
        .ok_or_else(|| missing(&id))?;
    // The latest version alone: a campaign may hold 1,000 versions, and every version is
    // read only by `/versions` (paged) and the report.
    let latest = state
        .store
        .latest_versions(&tenant, std::slice::from_ref(&id))
        .await?;
    Ok(Json(campaign_json(&campaign, latest.first())))
}

/// The store's error as the API answers it, a conflict naming `field`: the input the
/// route's one conflict is about.
fn conflict_names(field: &'static str) -> impl Fn(StoreError) -> ApiError {
    move |err| match err {
        StoreError::Conflict { .. } => ApiError::from(err).with_field(field),
        other => other.into(),
    }
}

/// The answer of `GET /campaigns/{id}/versions`.
#[derive(Serialize, ToSchema)]
pub(crate) struct VersionList {
    #[schema(value_type = String)]
    campaign_id: CampaignId,
    /// Oldest first: a page of them when there are more than `limit`.
    versions: Vec<VersionView>,
    /// Pass as `cursor` for the next page; absent on the last one.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
}

/// Versions in one page of `GET /campaigns/{id}/versions`, by default and at most.
pub const VERSIONS_PAGE_MAX: u32 = 1_000;

/// The query of `GET /campaigns/{id}/versions`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct VersionsQuery {
    /// The previous page's `next_cursor` (the last version it listed).
    cursor: Option<String>,
    /// Versions per page (1–1000, default 1000).
    #[param(minimum = 1, maximum = 1000)] // VERSIONS_PAGE_MAX
    limit: Option<u32>,
}

/// `GET /campaigns/{id}/versions`.
#[utoipa::path(get, path = "/campaigns/{id}/versions", tag = "campaigns", security(("api_key" = [])),
    params(("id" = String, Path, description = "the campaign's id"), VersionsQuery),
    responses((status = 200, body = VersionList), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn versions(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
    Query(query): Query<VersionsQuery>,
) -> Result<Json<VersionList>, ApiError> {
    let limit = crate::error::page_limit(query.limit, VERSIONS_PAGE_MAX, VERSIONS_PAGE_MAX)?;
    let after =
        crate::error::page_cursor(query.cursor.as_deref(), |text| text.parse::<u32>().ok())?
            .map_or(0, i64::from);
    let id = known_campaign_id(&id, "id")?;
    state
        .store
        .campaign(&tenant, &id)
        .await?
        .ok_or_else(|| missing(&id))?;
    let (versions, more) = state
        .store
        .campaign_versions_page(&tenant, &id, after, limit)
        .await?;
    let next_cursor = crate::error::next_cursor(more, &versions, |v| v.version.to_string());
    Ok(Json(VersionList {
        campaign_id: id,
        versions: versions.iter().map(version_json).collect(),
        next_cursor,
    }))
}

/// `POST /campaigns/{id}/publish` (optional body `{"note","arms"}`) → 201 with the new version.
#[utoipa::path(post, path = "/campaigns/{id}/publish", tag = "campaigns", security(("api_key" = [])),
    params(("id" = String, Path, description = "the campaign's id"), crate::openapi::IdempotencyHeaders),
    request_body(content = PublishBody, description = "optional: an empty body publishes the current arms"),
    responses((status = 201, body = VersionView), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn publish(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
    work: Work,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let id = known_campaign_id(&id, "id")?;
    let campaign = state
        .store
        .campaign(&tenant, &id)
        .await?
        .ok_or_else(|| missing(&id))?;
    let (note, arms) = parse_publish(&headers, body, &state, &campaign).await?;
    crate::auth::confirm_after_body(&state, &headers, &tenant).await?;
    let mut tx = work.begin().await?;
    let version = tx
        .publish_campaign(&tenant, &id, arms.as_ref(), note.as_deref(), now_us())
        .await
        // The one conflict of a publication: the campaign has all its versions.
        .map_err(conflict_names("id"))?
        .ok_or_else(|| missing(&id))?;
    #[cfg(feature = "test-hooks")]
    if state.config.test_publish_delay_ms > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(
            state.config.test_publish_delay_ms,
        ))
        .await;
    }
    work.finish(tx).await?;
    tracing::info!(tenant = %tenant, campaign = %id, version = version.version, "campaign published");
    Ok((StatusCode::CREATED, Json(version_json(&version))).into_response())
}

fn missing(id: &CampaignId) -> ApiError {
    campaign_not_found(id.as_str(), "id")
}

/// A campaign as answered (fields in alphabetical order: see `health::Health`).
#[derive(Serialize, ToSchema)]
pub(crate) struct CampaignView {
    /// Control first.
    arms: Vec<ArmView>,
    created_at: String,
    #[schema(value_type = String)]
    id: CampaignId,
    key: String,
    /// The latest published version; null before the first publish.
    latest_version: Option<i64>,
    metrics: Vec<MetricView>,
    name: String,
}

/// An immutable published version of a campaign.
#[derive(Serialize, ToSchema)]
pub(crate) struct VersionView {
    /// Control first.
    arms: Vec<ArmView>,
    #[schema(value_type = String)]
    campaign_id: CampaignId,
    metrics: Vec<MetricView>,
    note: Option<String>,
    published_at: String,
    /// The bucketing salt of this version.
    salt: String,
    version: i64,
}

/// An arm as answered.
#[derive(Serialize, ToSchema)]
pub(crate) struct ArmView {
    key: String,
    weight: u32,
}

/// A metric as answered.
#[derive(Serialize, ToSchema)]
pub(crate) struct MetricView {
    #[schema(value_type = String, pattern = "^(conversion|count|sum)$")]
    kind: MetricKind,
    name: String,
    window_hours: u32,
}

fn arm_views(arms: &Arms) -> Vec<ArmView> {
    arms.iter()
        .map(|arm| ArmView {
            key: arm.key.clone(),
            weight: arm.weight,
        })
        .collect()
}

fn metric_views(metrics: &[MetricDef]) -> Vec<MetricView> {
    metrics
        .iter()
        .map(|metric| MetricView {
            kind: metric.kind,
            name: metric.name.clone(),
            window_hours: metric.window_hours,
        })
        .collect()
}

pub(crate) fn campaign_json(campaign: &Campaign, latest: Option<&CampaignVersion>) -> CampaignView {
    CampaignView {
        // The weights units are bucketed with now: the latest version's (a publish may
        // change them), else the campaign's as created.
        arms: arm_views(latest.map_or(&campaign.arms, |v| &v.arms)),
        created_at: format_rfc3339_micros(campaign.created_at_us),
        id: campaign.id.clone(),
        key: campaign.key.clone(),
        latest_version: latest.map(|v| v.version),
        metrics: metric_views(&campaign.metrics),
        name: campaign.name.clone(),
    }
}

pub(crate) fn version_json(version: &CampaignVersion) -> VersionView {
    VersionView {
        arms: arm_views(&version.arms),
        campaign_id: version.campaign_id.clone(),
        metrics: metric_views(&version.metrics),
        note: version.note.clone(),
        published_at: format_rfc3339_micros(version.published_at_us),
        salt: version.salt.clone(),
        version: version.version,
    }
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ApiError {
    ApiError::unprocessable("invalid_campaign", message).with_field(field)
}

/// A `POST /campaigns` body.
#[derive(Deserialize, ToSchema)]
#[serde(
    deny_unknown_fields,
    expecting = "a JSON object {\"key\", \"name\", \"arms\", \"metrics\"}"
)]
pub(crate) struct CampaignBody {
    /// Unique per tenant.
    #[schema(value_type = String, min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_.-]+$")]
    key: CampaignKey,
    /// For people: 1-256 characters, not only spaces, no control or invisible characters
    /// (bidirectional controls, zero-width characters); stored trimmed.
    #[schema(value_type = String, min_length = 1, max_length = 256)]
    name: CampaignName,
    /// 2-20 arms with unique keys; the first is the control.
    #[schema(value_type = Vec<ArmBody>, min_items = 2, max_items = 20)]
    arms: Objects<ArmBody>,
    /// At most 50, names unique.
    #[schema(value_type = Vec<MetricBody>, max_items = 50)]
    metrics: Objects<MetricBody>,
}

/// An arm of a campaign or publish body.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields, expecting = "a JSON object {\"key\", \"weight\"}")]
pub(crate) struct ArmBody {
    #[schema(value_type = String, min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_.-]+$")]
    key: ArmKey,
    /// The arm's share of units, relative to the other arms' weights.
    #[schema(value_type = u32, minimum = 1, maximum = 1000000)]
    weight: Weight,
}

/// A metric of a campaign body.
#[derive(Deserialize, ToSchema)]
#[serde(
    deny_unknown_fields,
    expecting = "a JSON object {\"name\", \"kind\", \"window_hours\"}"
)]
pub(crate) struct MetricBody {
    #[schema(value_type = String, min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_.-]+$")]
    name: MetricName,
    #[schema(value_type = String, pattern = "^(conversion|count|sum)$")]
    kind: Kind,
    /// Outcomes count when they occur within this many hours of the assignment.
    #[schema(value_type = u32, minimum = 1, maximum = 8784)]
    window_hours: WindowHours,
}

/// A metric kind as the API spells it. Read from a string only: `MetricKind`'s own
/// `Deserialize` (for stored versions) would also take `{"sum": null}`.
#[derive(Deserialize)]
#[serde(try_from = "String")]
struct Kind(MetricKind);

impl TryFrom<String> for Kind {
    type Error = RuleError;

    fn try_from(text: String) -> Result<Self, RuleError> {
        MetricKind::parse(&text).map(Kind)
    }
}

/// A `POST /campaigns/{id}/publish` body (the body is optional).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields, expecting = "a JSON object {\"note\", \"arms\"}")]
pub(crate) struct PublishBody {
    /// At most 2,000 characters.
    #[schema(value_type = Option<String>, max_length = 2000)]
    note: Option<VersionNote>,
    /// New weights for exactly the campaign's arm keys.
    #[schema(value_type = Option<Vec<ArmBody>>)]
    arms: Option<Objects<ArmBody>>,
}

/// The arms as the domain type: 2-20, keys unique, the first the control.
fn arms_of(given: Objects<ArmBody>) -> Result<Arms, ApiError> {
    let arms = given.0.into_iter().map(|arm| Arm {
        key: arm.key.into_string(),
        weight: arm.weight.get(),
    });
    Arms::new(arms.collect()).map_err(|err| match &err {
        ArmsError::DuplicateKey { index, .. } => {
            invalid(format!("arms[{index}].key"), err.to_string())
        }
        ArmsError::Empty | ArmsError::Count { .. } => invalid("arms", err.to_string()),
    })
}

fn metrics_of(given: Objects<MetricBody>) -> Result<Metrics, ApiError> {
    let metrics = given.0.into_iter().map(|metric| MetricDef {
        name: metric.name.into_string(),
        kind: metric.kind.0,
        window_hours: metric.window_hours.get(),
    });
    Metrics::new(metrics.collect()).map_err(|err| match &err {
        MetricsError::DuplicateName { index, .. } => {
            invalid(format!("metrics[{index}].name"), err.to_string())
        }
        MetricsError::Count { .. } => invalid("metrics", err.to_string()),
    })
}

/// Validates a `POST /campaigns` body.
pub(crate) fn parse_campaign(value: &Value) -> Result<NewCampaign, ApiError> {
    let body: CampaignBody = parse(value).map_err(|r| r.unprocessable("invalid_campaign"))?;
    Ok(NewCampaign {
        key: body.key.into_string(),
        name: body.name.trimmed().to_string(),
        arms: arms_of(body.arms)?,
        metrics: metrics_of(body.metrics)?.into_vec(),
    })
}

/// Validates an optional publish body: a note, and new weights for exactly the
/// campaign's arm keys (kept in the campaign's order, so the control stays first).
async fn parse_publish(
    headers: &HeaderMap,
    body: Body,
    state: &AppState,
    campaign: &Campaign,
) -> Result<(Option<String>, Option<Arms>), ApiError> {
    let bytes = crate::body::read_limited(headers, body, state.config.body_bytes_max).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok((None, None));
    }
    let depth_max = state.config.json_depth_max;
    let value = crate::body::parse_in_room(&bytes, |bytes, meter| {
        traqlyte_identity::json::parse_in(bytes, depth_max, meter)
    })
    .await??;
    let body: PublishBody = parse(&value).map_err(|r| r.unprocessable("invalid_campaign"))?;
    let note = body.note.map(VersionNote::into_string);
    let Some(given) = body.arms else {
        return Ok((note, None));
    };
    // A missing arm is named before the list's length is judged: one arm of two left
    // out was "arms must have 2-20 entries, got 1" (a review).
    let missing = |arm: &&Arm| given.0.iter().all(|g| g.key.as_str() != arm.key);
    if let Some(arm) = campaign.arms.iter().find(missing) {
        return Err(invalid(
            "arms",
            format!(
                "arms must list exactly the campaign's arm keys; {:?} is missing",
                arm.key
            ),
        ));
    }
    let given = arms_of(given)?;
    let mut arms = Vec::with_capacity(campaign.arms.len());
    for arm in &campaign.arms {
        if let Some(g) = given.iter().find(|g| g.key == arm.key) {
            arms.push(Arm {
                key: arm.key.clone(),
                weight: g.weight,
            });
        }
    }
    let known: HashSet<&str> = campaign.arms.iter().map(|a| a.key.as_str()).collect();
    if let Some(extra) = given.iter().find(|g| !known.contains(g.key.as_str())) {
        return Err(invalid(
            "arms",
            format!(
                "arm {:?} is not an arm of this campaign; arms cannot be added by publishing",
                extra.key
            ),
        ));
    }
    let arms = Arms::try_from(arms).map_err(|err| invalid("arms", err.to_string()))?;
    Ok((note, Some(arms)))
}

//! Campaigns: create, read, and publish immutable versions. Publishing is the mutation
//! transport idempotency protects: without a key, a retried publish mints a new version.

use std::collections::HashSet;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use traqlyte_experiments::{
    ArmKey, ArmsError, CampaignKey, CampaignName, MetricName, Metrics, MetricsError, RuleError,
    VersionNote, Weight, WindowHours,
};
use traqlyte_identity::format_rfc3339_micros;
use traqlyte_store::{
    now_us, Arm, Arms, Campaign, CampaignVersion, MetricDef, MetricKind, NewCampaign,
};

use crate::auth::Tenant;
use crate::body::read_document;
use crate::body::typed::{parse, Objects};
use crate::idempotency::Work;
use crate::{ApiError, AppState};

/// `POST /campaigns` → 201 with the campaign.
pub(crate) async fn create(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    work: Work,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let value = read_document(&state, &headers, body).await?;
    let new = parse_campaign(&value)?;
    let mut tx = work.begin().await?;
    let campaign = tx.create_campaign(&tenant, &new, now_us()).await?;
    work.finish(tx).await?;
    tracing::info!(tenant = %tenant, campaign = %campaign.id, key = %campaign.key, "campaign created");
    Ok((StatusCode::CREATED, Json(campaign_json(&campaign, None))).into_response())
}

/// `GET /campaigns/{id}`.
pub(crate) async fn show(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let campaign = state
        .store
        .campaign(&tenant, &id)
        .await?
        .ok_or_else(|| missing(&id))?;
    let versions = state.store.campaign_versions(&tenant, &id).await?;
    Ok(Json(campaign_json(&campaign, versions.last())))
}

/// `GET /campaigns/{id}/versions`.
pub(crate) async fn versions(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    state
        .store
        .campaign(&tenant, &id)
        .await?
        .ok_or_else(|| missing(&id))?;
    let versions = state.store.campaign_versions(&tenant, &id).await?;
    Ok(Json(
        json!({"campaign_id": id, "versions": versions.iter().map(version_json).collect::<Vec<_>>()}),
    ))
}

/// `POST /campaigns/{id}/publish` (optional body `{"note","arms"}`) → 201 with the new version.
pub(crate) async fn publish(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
    work: Work,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let campaign = state
        .store
        .campaign(&tenant, &id)
        .await?
        .ok_or_else(|| missing(&id))?;
    let (note, arms) = parse_publish(&headers, body, &state, &campaign).await?;
    let mut tx = work.begin().await?;
    let version = tx
        .publish_campaign(&tenant, &id, arms.as_ref(), note.as_deref(), now_us())
        .await?
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

fn missing(id: &str) -> ApiError {
    ApiError::not_found("campaign_not_found", format!("no campaign {id:?}")).with_field("id")
}

pub(crate) fn campaign_json(campaign: &Campaign, latest: Option<&CampaignVersion>) -> Value {
    json!({
        "id": campaign.id, "key": campaign.key, "name": campaign.name,
        "arms": campaign.arms, "metrics": campaign.metrics,
        "created_at": format_rfc3339_micros(campaign.created_at_us),
        "latest_version": latest.map(|v| v.version),
    })
}

pub(crate) fn version_json(version: &CampaignVersion) -> Value {
    json!({
        "campaign_id": version.campaign_id, "version": version.version,
        "arms": version.arms, "metrics": version.metrics, "salt": version.salt, "note": version.note,
        "published_at": format_rfc3339_micros(version.published_at_us),
    })
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ApiError {
    ApiError::unprocessable("invalid_campaign", message).with_field(field)
}

/// A `POST /campaigns` body.
#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a JSON object {\"key\", \"name\", \"arms\", \"metrics\"}"
)]
struct CampaignBody {
    key: CampaignKey,
    name: CampaignName,
    arms: Objects<ArmBody>,
    metrics: Objects<MetricBody>,
}

/// An arm of a campaign or publish body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a JSON object {\"key\", \"weight\"}")]
struct ArmBody {
    key: ArmKey,
    weight: Weight,
}

/// A metric of a campaign body.
#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a JSON object {\"name\", \"kind\", \"window_hours\"}"
)]
struct MetricBody {
    name: MetricName,
    kind: Kind,
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
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a JSON object {\"note\", \"arms\"}")]
struct PublishBody {
    note: Option<VersionNote>,
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
fn parse_campaign(value: &Value) -> Result<NewCampaign, ApiError> {
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
    let value = traqlyte_identity::json::parse(&bytes, state.config.json_depth_max)?;
    let body: PublishBody = parse(&value).map_err(|r| r.unprocessable("invalid_campaign"))?;
    let note = body.note.map(VersionNote::into_string);
    let Some(given) = body.arms else {
        return Ok((note, None));
    };
    let given = arms_of(given)?;
    let mut arms = Vec::with_capacity(campaign.arms.len());
    for arm in &campaign.arms {
        let weight = given.iter().find(|g| g.key == arm.key).map(|g| g.weight);
        let weight = weight.ok_or_else(|| {
            invalid(
                "arms",
                format!(
                    "arms must list exactly the campaign's arm keys; {:?} is missing",
                    arm.key
                ),
            )
        })?;
        arms.push(Arm {
            key: arm.key.clone(),
            weight,
        });
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

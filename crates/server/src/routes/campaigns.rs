//! Campaigns: create, read, and publish immutable versions. Publishing is the mutation
//! transport idempotency protects: without a key, a retried publish mints a new version.

use std::collections::HashSet;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};
use traqlyte_identity::format_rfc3339_micros;
use traqlyte_store::{
    now_us, Arm, Arms, Campaign, CampaignVersion, MetricDef, MetricKind, NewCampaign,
};

use crate::auth::Tenant;
use crate::body::read_document;
use crate::idempotency::Work;
use crate::{ApiError, AppState};

const ARMS_MIN: usize = 2;
const ARMS_MAX: usize = 20;
const METRICS_MAX: usize = 50;
const WEIGHT_MAX: u64 = 1_000_000;
const WINDOW_HOURS_MAX: u64 = 24 * 366;
const KEY_CHARS_MAX: usize = 128;
const NAME_CHARS_MAX: usize = 256;
const NOTE_CHARS_MAX: usize = 2_000;

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

/// Every string of a campaign or publish body is stored as text: none may hold NUL.
fn no_nul(value: &Value) -> Result<(), ApiError> {
    match super::text::find_nul(value) {
        Some(field) => Err(invalid(
            &field,
            format!("{field} is invalid: {}", super::text::NUL_RULE),
        )),
        None => Ok(()),
    }
}

fn object<'a>(value: &'a Value, at: &str) -> Result<&'a Map<String, Value>, ApiError> {
    value.as_object().ok_or_else(|| {
        invalid(
            at,
            format!(
                "{} must be a JSON object",
                if at.is_empty() { "the body" } else { at }
            ),
        )
    })
}

fn only_fields(map: &Map<String, Value>, at: &str, allowed: &[&str]) -> Result<(), ApiError> {
    match map.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(key) => Err(invalid(
            join(at, key),
            format!("unknown field {key:?}; allowed: {}", allowed.join(", ")),
        )),
        None => Ok(()),
    }
}

fn join(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_string()
    } else {
        format!("{at}.{key}")
    }
}

fn identifier(
    map: &Map<String, Value>,
    at: &str,
    key: &str,
    chars_max: usize,
) -> Result<String, ApiError> {
    let field = join(at, key);
    let text = map
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(&field, format!("{field} is required and must be a string")))?;
    let ok = !text.is_empty()
        && text.len() <= chars_max
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    if !ok {
        return Err(invalid(
            &field,
            format!("{field} must be 1-{chars_max} characters of A-Z a-z 0-9 _ . -"),
        ));
    }
    Ok(text.to_string())
}

fn positive_integer(
    map: &Map<String, Value>,
    at: &str,
    key: &str,
    max: u64,
) -> Result<u32, ApiError> {
    let field = join(at, key);
    map.get(key)
        .and_then(Value::as_u64)
        .filter(|n| (1..=max).contains(n))
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| {
            invalid(
                &field,
                format!("{field} must be a positive integer up to {max}"),
            )
        })
}

fn list<'a>(
    map: &'a Map<String, Value>,
    key: &str,
    min: usize,
    max: usize,
) -> Result<&'a Vec<Value>, ApiError> {
    let items = map
        .get(key)
        .and_then(Value::as_array)
        .ok_or_else(|| invalid(key, format!("{key} is required and must be an array")))?;
    if items.len() < min || items.len() > max {
        return Err(invalid(
            key,
            format!("{key} must have {min}-{max} entries, got {}", items.len()),
        ));
    }
    Ok(items)
}

fn parse_arms(map: &Map<String, Value>) -> Result<Arms, ApiError> {
    let mut arms: Vec<Arm> = Vec::new();
    for (index, item) in list(map, "arms", ARMS_MIN, ARMS_MAX)?.iter().enumerate() {
        let at = format!("arms[{index}]");
        let arm = object(item, &at)?;
        only_fields(arm, &at, &["key", "weight"])?;
        let key = identifier(arm, &at, "key", KEY_CHARS_MAX)?;
        if arms.iter().any(|a| a.key == key) {
            return Err(invalid(
                format!("{at}.key"),
                format!("arm key {key:?} appears twice; arm keys are unique"),
            ));
        }
        arms.push(Arm {
            key,
            weight: positive_integer(arm, &at, "weight", WEIGHT_MAX)?,
        });
    }
    arms_of(arms)
}

/// The arms as the domain type (never empty; the first is the control).
fn arms_of(arms: Vec<Arm>) -> Result<Arms, ApiError> {
    Arms::try_from(arms).map_err(|err| invalid("arms", err.to_string()))
}

fn parse_metrics(map: &Map<String, Value>) -> Result<Vec<MetricDef>, ApiError> {
    let mut metrics: Vec<MetricDef> = Vec::new();
    for (index, item) in list(map, "metrics", 0, METRICS_MAX)?.iter().enumerate() {
        let at = format!("metrics[{index}]");
        let metric = object(item, &at)?;
        only_fields(metric, &at, &["name", "kind", "window_hours"])?;
        let name = identifier(metric, &at, "name", KEY_CHARS_MAX)?;
        if metrics.iter().any(|m| m.name == name) {
            return Err(invalid(
                format!("{at}.name"),
                format!("metric {name:?} appears twice; metric names are unique"),
            ));
        }
        let kind = match metric.get("kind").and_then(Value::as_str) {
            Some("conversion") => MetricKind::Conversion,
            Some("count") => MetricKind::Count,
            Some("sum") => MetricKind::Sum,
            _ => {
                return Err(invalid(
                    format!("{at}.kind"),
                    format!("{at}.kind must be one of conversion, count, sum"),
                ))
            }
        };
        metrics.push(MetricDef {
            name,
            kind,
            window_hours: positive_integer(metric, &at, "window_hours", WINDOW_HOURS_MAX)?,
        });
    }
    Ok(metrics)
}

/// Validates a `POST /campaigns` body.
fn parse_campaign(value: &Value) -> Result<NewCampaign, ApiError> {
    let map = object(value, "")?;
    no_nul(value)?;
    only_fields(map, "", &["key", "name", "arms", "metrics"])?;
    let key = identifier(map, "", "key", KEY_CHARS_MAX)?;
    let name = map
        .get("name")
        .and_then(Value::as_str)
        .map(str::trim)
        .unwrap_or("");
    if name.is_empty() || name.chars().count() > NAME_CHARS_MAX {
        return Err(invalid(
            "name",
            format!("name is required: a string of 1-{NAME_CHARS_MAX} characters"),
        ));
    }
    Ok(NewCampaign {
        key,
        name: name.to_string(),
        arms: parse_arms(map)?,
        metrics: parse_metrics(map)?,
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
    let map = object(&value, "")?;
    no_nul(&value)?;
    only_fields(map, "", &["note", "arms"])?;
    let note = match map.get("note") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) if text.chars().count() <= NOTE_CHARS_MAX => Some(text.clone()),
        Some(_) => {
            return Err(invalid(
                "note",
                format!("note must be a string of at most {NOTE_CHARS_MAX} characters"),
            ))
        }
    };
    if !map.contains_key("arms") {
        return Ok((note, None));
    }
    let given = parse_arms(map)?;
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
    Ok((note, Some(arms_of(arms)?)))
}

//! Metric bindings (docs/experiments.md, "Feeding a metric from tracked events"):
//! `POST /campaigns/{id}/bindings` declares that track events named `event` feed the
//! campaign's metric `metric`, with the value at `value_pointer` and the business key at
//! `key_pointer`; `GET /campaigns/{id}/bindings` lists them with what they did.
//! A binding is immutable: the same declaration again is a `200`, a different one for
//! the same (metric, event) a `409`.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use traqlyte_experiments::MetricName;
use traqlyte_identity::format_rfc3339_micros;
use traqlyte_identity::pointer::Pointer;
use traqlyte_store::{now_us, BindingInfo, BindingOutcome, Campaign, MetricBinding, MetricKind};
use utoipa::ToSchema;

use crate::auth::Tenant;
use crate::body::read_document;
use crate::body::typed::parse;
use crate::{ApiError, AppState};

/// Largest event name a binding matches, in bytes (Segment event names are short).
const EVENT_BYTES_MAX: usize = traqlyte_identity::segment::ID_BYTES_MAX;

/// Largest JSON pointer of a binding, in bytes.
const POINTER_BYTES_MAX: usize = 512;

/// The body of `POST /campaigns/{id}/bindings`.
#[derive(Deserialize, ToSchema)]
#[serde(
    deny_unknown_fields,
    expecting = "a JSON object {\"metric\", \"event\", \"value_pointer\"?, \"key_pointer\"?}"
)]
pub(crate) struct BindingBody {
    /// One of the campaign's metrics.
    #[schema(value_type = String, min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_.-]+$")]
    metric: MetricName,
    /// The track event's name, as sent in `event`.
    #[schema(min_length = 1, max_length = 256)]
    event: String,
    /// RFC 6901 pointer of the value in the message, e.g. `/properties/revenue`
    /// (required for `sum` metrics).
    value_pointer: Option<String>,
    /// RFC 6901 pointer of the business key, e.g. `/properties/order_id`; without it the
    /// message's own identity is the key.
    key_pointer: Option<String>,
}

/// A binding as answered (fields in alphabetical order: see `health::Health`).
#[derive(Serialize, ToSchema)]
pub(crate) struct BindingView {
    #[schema(value_type = String)]
    campaign_id: traqlyte_store::CampaignId,
    created_at: String,
    event: String,
    key_pointer: Option<String>,
    metric: String,
    /// Matching messages that became outcomes (new, duplicate or collision).
    #[serde(skip_serializing_if = "Option::is_none")]
    outcomes: Option<i64>,
    /// Matching messages whose unit has no assignment in the campaign.
    #[serde(skip_serializing_if = "Option::is_none")]
    unassigned: Option<i64>,
    /// Matching messages without a usable value or business key.
    #[serde(skip_serializing_if = "Option::is_none")]
    unusable: Option<i64>,
    value_pointer: Option<String>,
}

impl BindingView {
    fn of(binding: MetricBinding, counts: Option<&BindingInfo>) -> Self {
        BindingView {
            campaign_id: binding.campaign_id,
            created_at: format_rfc3339_micros(binding.created_at_us),
            event: binding.event,
            key_pointer: binding.key_pointer,
            metric: binding.metric,
            outcomes: counts.map(|c| c.outcomes),
            unassigned: counts.map(|c| c.unassigned),
            unusable: counts.map(|c| c.unusable),
            value_pointer: binding.value_pointer,
        }
    }
}

/// The answer of `GET /campaigns/{id}/bindings`.
#[derive(Serialize, ToSchema)]
pub(crate) struct BindingList {
    bindings: Vec<BindingView>,
}

/// `POST /campaigns/{id}/bindings`: `201` new, `200` the identical binding exists,
/// `409` a different one holds (metric, event).
#[utoipa::path(post, path = "/campaigns/{id}/bindings", tag = "experiments", security(("api_key" = [])),
    params(("id" = String, Path, description = "the campaign's id (cmp_…)")),
    request_body = BindingBody,
    responses((status = 201, body = BindingView, description = "the binding, new"),
        (status = 200, body = BindingView, description = "the identical binding, already declared"),
        (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn create(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let value = read_document(&state, &headers, body).await?;
    crate::auth::confirm_after_body(&state, &headers, &tenant).await?;
    let body: BindingBody = parse(&value).map_err(|r| r.unprocessable("invalid_binding"))?;
    let campaign = campaign(&state, &tenant, &id).await?;
    let binding = check(&campaign, body)?;
    match state.store.create_binding(&tenant, &binding).await? {
        BindingOutcome::Created(stored) => Ok((
            StatusCode::CREATED,
            Json(BindingView::of(stored, None)),
        )
            .into_response()),
        BindingOutcome::Unchanged(stored) => Ok(Json(BindingView::of(stored, None)).into_response()),
        BindingOutcome::Conflict(stored) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "binding_conflict",
            format!(
                "metric {:?} is already bound to event {:?} with value_pointer {} and key_pointer {}; bindings are immutable",
                stored.metric,
                stored.event,
                pointer_text(stored.value_pointer.as_deref()),
                pointer_text(stored.key_pointer.as_deref())
            ),
        )
        .with_field("metric")),
        BindingOutcome::LimitReached => Err(ApiError::new(
            StatusCode::CONFLICT,
            "binding_limit",
            format!(
                "campaign {id} has {} bindings, the most one campaign may have; nothing was stored",
                traqlyte_store::sources::BINDINGS_PER_CAMPAIGN_MAX
            ),
        )
        .with_field("id")),
    }
}

/// `GET /campaigns/{id}/bindings`: the campaign's bindings and what they did.
#[utoipa::path(get, path = "/campaigns/{id}/bindings", tag = "experiments", security(("api_key" = [])),
    params(("id" = String, Path, description = "the campaign's id (cmp_…)")),
    responses((status = 200, body = BindingList), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn list(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
) -> Result<Json<BindingList>, ApiError> {
    let campaign = campaign(&state, &tenant, &id).await?;
    let infos = state.store.bindings(&tenant, &campaign.id).await?;
    let bindings = infos
        .iter()
        .map(|info| BindingView::of(info.binding.clone(), Some(info)))
        .collect();
    Ok(Json(BindingList { bindings }))
}

async fn campaign(
    state: &AppState,
    tenant: &traqlyte_store::TenantId,
    id: &str,
) -> Result<Campaign, ApiError> {
    let not_found = || {
        ApiError::not_found("campaign_not_found", format!("no campaign {id:?}")).with_field("id")
    };
    // An id in the wrong format is unknown, like everywhere else (docs/experiments.md).
    let Ok(parsed) = traqlyte_store::CampaignId::try_from(id) else {
        return Err(not_found());
    };
    state.store.campaign(tenant, &parsed).await?.ok_or_else(|| {
        ApiError::not_found("campaign_not_found", format!("no campaign {id:?}")).with_field("id")
    })
}

/// The binding the body declares, checked against the campaign's metrics.
fn check(campaign: &Campaign, body: BindingBody) -> Result<MetricBinding, ApiError> {
    let invalid = |field: &str, message: String| {
        ApiError::unprocessable("invalid_binding", message).with_field(field)
    };
    let metric = body.metric.as_str();
    let definition = campaign
        .metrics
        .iter()
        .find(|m| m.name == metric)
        .ok_or_else(|| {
            let known: Vec<&str> = campaign.metrics.iter().map(|m| m.name.as_str()).collect();
            invalid(
                "metric",
                format!(
                    "{metric:?} is not a metric of campaign {}; known: {}",
                    campaign.id,
                    known.join(", ")
                ),
            )
        })?;
    if body.event.is_empty() || body.event.len() > EVENT_BYTES_MAX || body.event.contains('\0') {
        return Err(invalid(
            "event",
            format!("an event name is 1 to {EVENT_BYTES_MAX} bytes without NUL"),
        ));
    }
    for (field, pointer) in [
        ("value_pointer", &body.value_pointer),
        ("key_pointer", &body.key_pointer),
    ] {
        if let Some(text) = pointer {
            let bad = text.len() > POINTER_BYTES_MAX || text.is_empty() || text.contains('\0');
            if bad || Pointer::parse(text).is_err() {
                return Err(invalid(field, format!("{text:?} is not an RFC 6901 JSON pointer such as /properties/order_id (at most {POINTER_BYTES_MAX} bytes)")));
            }
        }
    }
    if definition.kind == MetricKind::Sum && body.value_pointer.is_none() {
        return Err(invalid(
            "value_pointer",
            format!("metric {metric:?} is a sum: value_pointer is required"),
        ));
    }
    // Messages are matched after identification, which puts every string and key in
    // NFC: a binding declared in another normal form would never match one.
    let nfc = traqlyte_identity::canonical::nfc;
    Ok(MetricBinding {
        campaign_id: campaign.id.clone(),
        metric: metric.to_string(),
        event: nfc(&body.event),
        value_pointer: body.value_pointer.as_deref().map(nfc),
        key_pointer: body.key_pointer.as_deref().map(nfc),
        created_at_us: now_us(),
    })
}

/// A binding's optional pointer as a message says it: quoted, or `none`.
fn pointer_text(pointer: Option<&str>) -> String {
    pointer.map_or_else(|| "none".to_string(), |p| format!("{p:?}"))
}

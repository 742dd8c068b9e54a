//! Operations over HTTP (issue 13): the duplicate-rate trend (`GET /ops/duplicates`),
//! the collision log with field-level diffs (`GET /ops/collisions`), and per-tenant
//! webhooks called with each collision (`POST|GET /ops/webhooks`,
//! `DELETE /ops/webhooks/{id}`; the dispatcher is [`webhooks`]). The web page
//! `/ui/ops` renders the same values (`ui::ops`).
//!
//! The trend's buckets are by **arrival time** (the tally row's `at_us`, the commit's
//! clock): a duplicate is a delivery, and when deliveries arrive is what an operator
//! watches. Occurrence time would put a late retry of an old event into an old bucket.

pub mod diff;
pub mod webhooks;

use std::collections::BTreeMap;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use traqlyte_identity::{format_rfc3339_micros, parse_rfc3339_micros};
use traqlyte_store::{
    now_us, Bucket, CollisionCursor, CollisionEntry, CollisionsQuery, IngestSource, TenantId,
    TrendQuery, TrendRow, Webhook,
};
use utoipa::{IntoParams, ToSchema};

use crate::auth::Tenant;
use crate::body::read_document;
use crate::{ApiError, AppState};
use diff::FieldChange;

/// Most buckets one trend query may span (a day of minutes, 83 days of hours).
pub const TREND_BUCKETS_MAX: i64 = 2_000;
/// Most (series × buckets) one trend answers: every series lists every bucket.
pub const TREND_CELLS_MAX: i64 = 100_000;
/// Collisions per page by default, and at most.
pub const COLLISIONS_PAGE_DEFAULT: u32 = 50;
/// See [`COLLISIONS_PAGE_DEFAULT`].
pub const COLLISIONS_PAGE_MAX: u32 = 200;
/// Longest webhook URL accepted.
pub const WEBHOOK_URL_BYTES_MAX: usize = 2_000;

/// The query of `GET /ops/duplicates`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct TrendParams {
    /// RFC 3339; default: `until` minus 24 hours.
    since: Option<String>,
    /// RFC 3339, exclusive; default: now.
    until: Option<String>,
    /// `minute` (a range starting within the last 48 hours), `hour` (default) or `day`.
    bucket: Option<String>,
    /// Only this contract.
    contract: Option<String>,
    /// Only this source: `http`, `segment:{source_id}`, `nats:{stream}` or `backfill`.
    source: Option<String>,
}

/// The duplicate-rate trend: one series per (contract, source), every bucket of the
/// range listed (zeros included), oldest first.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Trend {
    /// `minute`, `hour` or `day`.
    pub bucket: String,
    /// One per (contract, source) with deliveries in the range, sorted.
    pub series: Vec<TrendSeries>,
    /// The range's start (RFC 3339, aligned down to the bucket).
    pub since: String,
    /// The range's end (exclusive).
    pub until: String,
}

/// One series of the trend.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TrendSeries {
    /// Oldest first.
    pub buckets: Vec<TrendBucket>,
    /// The contract.
    pub contract: String,
    /// The source label.
    pub source: String,
}

/// One bucket of a series.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TrendBucket {
    /// Different events under a stored identity.
    pub collisions: i64,
    /// `duplicates / received`; `null` when nothing was received.
    pub duplicate_rate: Option<f64>,
    /// Retries of stored events.
    pub duplicates: i64,
    /// Newly stored.
    pub inserted: i64,
    /// Deliveries that reached the store: inserted + duplicates + collisions.
    pub received: i64,
    /// The bucket's start (RFC 3339).
    pub start: String,
}

/// `GET /ops/duplicates`: per bucket and series, received, inserted, duplicates,
/// collisions and the duplicate rate.
#[utoipa::path(get, path = "/ops/duplicates", tag = "ops", security(("api_key" = [])),
    params(TrendParams),
    responses((status = 200, body = Trend), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn duplicates(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Query(params): Query<TrendParams>,
) -> Result<Json<Trend>, ApiError> {
    let query = trend_query(&params, now_us())?;
    Ok(Json(trend(&state, &tenant, &query).await?))
}

/// Reads and shapes the trend (shared with the web page).
pub(crate) async fn trend(
    state: &AppState,
    tenant: &TenantId,
    query: &TrendQuery,
) -> Result<Trend, ApiError> {
    let rows = state.store.duplicate_trend(tenant, query).await?;
    // Every series lists every bucket of the range: bounded in all, not only per series.
    let series: std::collections::HashSet<(&str, &str)> = rows
        .iter()
        .map(|r| (r.contract.as_str(), r.source.as_str()))
        .collect();
    let buckets = (query.until_us - query.since_us) / query.bucket.width_us();
    within_cells(series.len(), buckets)?;
    Ok(shape(query, &rows))
}

/// Refuses a trend of more than [`TREND_CELLS_MAX`] series × buckets, naming `contract`
/// (the filter that narrows it most).
fn within_cells(series: usize, buckets: i64) -> Result<(), ApiError> {
    let cells = i64::try_from(series)
        .unwrap_or(i64::MAX)
        .saturating_mul(buckets);
    if cells <= TREND_CELLS_MAX {
        return Ok(());
    }
    Err(ApiError::invalid_parameter(
        "contract",
        format!(
            "the range holds {series} series of {buckets} buckets, more than {TREND_CELLS_MAX} in all; name a contract or a source, use a wider bucket or a shorter range"
        ),
    ))
}

/// Parses the trend's query: times, bucket, bounds.
pub(crate) fn trend_query(params: &TrendParams, now: i64) -> Result<TrendQuery, ApiError> {
    let time = |text: &Option<String>, field: &'static str| -> Result<Option<i64>, ApiError> {
        text.as_deref()
            .map(|t| {
                parse_rfc3339_micros(t).map_err(|e| {
                    ApiError::invalid_parameter(
                        field,
                        format!("{field} must be an RFC 3339 time: {e}"),
                    )
                })
            })
            .transpose()
    };
    let bucket = match params.bucket.as_deref().unwrap_or("hour") {
        "minute" => Bucket::Minute,
        "hour" => Bucket::Hour,
        "day" => Bucket::Day,
        _ => {
            return Err(ApiError::invalid_parameter(
                "bucket",
                "bucket must be minute, hour or day",
            ));
        }
    };
    let width = bucket.width_us();
    let until = time(&params.until, "until")?.unwrap_or(now);
    let since = time(&params.since, "since")?.unwrap_or(until.saturating_sub(86_400_000_000));
    if since >= until {
        return Err(ApiError::invalid_parameter(
            "since",
            "since must be before until",
        ));
    }
    // Whole buckets at both ends: a rolled-up tally row stands for its whole minute, so
    // a range ending inside a minute counted that minute in part before the roll-up and
    // whole after it. `until` is taken up to its bucket's end, as `since` down to its start.
    let since = since.div_euclid(width) * width;
    let until = until.saturating_add(width - 1).div_euclid(width) * width;
    // The answer writes both ends: each must have an RFC 3339 form (years 0001–9999).
    let since_field = if params.since.is_some() {
        "since"
    } else {
        "until"
    };
    for (at, field) in [(since, since_field), (until, "until")] {
        if !traqlyte_identity::writable_in_rfc3339(at) {
            return Err(ApiError::invalid_parameter(
                field,
                "the range, taken to whole buckets, must lie within the years 0001–9999",
            ));
        }
    }
    if (until - since) / width > TREND_BUCKETS_MAX {
        return Err(ApiError::invalid_parameter(
            "bucket",
            format!("the range spans more than {TREND_BUCKETS_MAX} buckets; use a wider bucket or a shorter range"),
        ));
    }
    // Minute rows older than this are folded into hours: a minute bucket there would show
    // a whole hour's counts in its first minute.
    if bucket == Bucket::Minute && since < now - traqlyte_store::MINUTE_TALLIES_KEPT_US {
        return Err(ApiError::invalid_parameter(
            since_field,
            "minute buckets reach back 48 hours (older counts are kept per hour); use bucket=hour or a later since",
        ));
    }
    let source = match params.source.as_deref() {
        None => None,
        Some(text) => Some(IngestSource::parse(text).ok_or_else(|| {
            ApiError::invalid_parameter(
                "source",
                "source must be http, segment:{source_id}, nats:{stream} or backfill",
            )
        })?),
    };
    Ok(TrendQuery {
        since_us: since,
        until_us: until,
        bucket,
        contract: params.contract.clone(),
        source,
    })
}

/// Rows of the store into series with every bucket of the range (pure).
pub(crate) fn shape(query: &TrendQuery, rows: &[TrendRow]) -> Trend {
    let width = query.bucket.width_us();
    let starts: Vec<i64> = (0..)
        .map(|i| query.since_us + i * width)
        .take_while(|start| *start < query.until_us)
        .collect();
    let mut series: BTreeMap<(&str, &str), Vec<TrendBucket>> = BTreeMap::new();
    for row in rows {
        let buckets = series
            .entry((row.contract.as_str(), row.source.as_str()))
            .or_insert_with(|| {
                starts
                    .iter()
                    .map(|s| TrendBucket {
                        start: format_rfc3339_micros(*s),
                        ..TrendBucket::default()
                    })
                    .collect()
            });
        let index = usize::try_from((row.bucket_start_us - query.since_us) / width).ok();
        if let Some(bucket) = index.and_then(|i| buckets.get_mut(i)) {
            bucket.inserted += row.inserted;
            bucket.duplicates += row.duplicates;
            bucket.collisions += row.collisions;
        }
    }
    let series = series
        .into_iter()
        .map(|((contract, source), mut buckets)| {
            for b in &mut buckets {
                b.received = b.inserted + b.duplicates + b.collisions;
                b.duplicate_rate =
                    (b.received > 0).then(|| b.duplicates as f64 / b.received as f64);
            }
            TrendSeries {
                buckets,
                contract: contract.to_string(),
                source: source.to_string(),
            }
        })
        .collect();
    Trend {
        bucket: match query.bucket {
            Bucket::Minute => "minute",
            Bucket::Hour => "hour",
            Bucket::Day => "day",
        }
        .to_string(),
        series,
        since: format_rfc3339_micros(query.since_us),
        until: format_rfc3339_micros(query.until_us),
    }
}

/// The query of `GET /ops/collisions`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct CollisionParams {
    /// Only this contract.
    contract: Option<String>,
    /// Only collisions received at or after this RFC 3339 time.
    since: Option<String>,
    /// The previous page's `next_cursor`.
    cursor: Option<String>,
    /// Rows per page (1–200, default 50).
    #[param(minimum = 1, maximum = 200)] // COLLISIONS_PAGE_MAX
    limit: Option<u32>,
}

/// A page of collisions, newest first.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CollisionPage {
    /// Newest first.
    pub collisions: Vec<CollisionView>,
    /// Pass as `cursor` for the next page; absent on the last one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// One collision: both payloads and their field-level diff.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CollisionView {
    /// Unique per tenant.
    pub collision_id: i64,
    /// The contract.
    pub contract: String,
    /// The version the refused event was identified under.
    pub contract_version: i64,
    /// Stored → incoming, by JSON pointer.
    #[schema(value_type = Vec<FieldChange>)]
    pub diff: Vec<DiffEntry>,
    /// The diff was cut at `ops::diff::DIFF_CHANGES_MAX` changes or, past its first,
    /// `ops::diff::DIFF_BYTES_MAX` bytes of paths and values.
    pub diff_truncated: bool,
    /// The shared id.
    pub event_id: String,
    /// Of the refused delivery.
    pub incoming_fingerprint: String,
    /// The refused delivery.
    #[schema(value_type = Object)]
    pub incoming_payload: Value,
    /// RFC 3339.
    pub received_at: String,
    /// The surface that delivered it.
    pub source: String,
    /// Of the stored row.
    pub stored_fingerprint: String,
    /// The stored row, untouched.
    #[schema(value_type = Object)]
    pub stored_payload: Value,
}

/// A [`FieldChange`] as read back (owned strings), so clients and the page can
/// deserialise the JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiffEntry {
    /// `added`, `removed` or `changed`.
    pub change: String,
    /// The incoming value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incoming: Option<Value>,
    /// The field's JSON pointer.
    pub path: String,
    /// The stored value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored: Option<Value>,
    /// At or under a transport pointer: not a cause of the collision.
    #[serde(default)]
    pub transport: bool,
}

/// `GET /ops/collisions`: every collision of the tenant, newest first, paginated.
#[utoipa::path(get, path = "/ops/collisions", tag = "ops", security(("api_key" = [])),
    params(CollisionParams),
    responses((status = 200, body = CollisionPage), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn collisions(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Query(params): Query<CollisionParams>,
) -> Result<Json<CollisionPage>, ApiError> {
    let limit =
        crate::error::page_limit(params.limit, COLLISIONS_PAGE_DEFAULT, COLLISIONS_PAGE_MAX)?;
    let since_us = match params.since.as_deref() {
        None => None,
        Some(t) => Some(parse_rfc3339_micros(t).map_err(|e| {
            ApiError::invalid_parameter("since", format!("since must be an RFC 3339 time: {e}"))
        })?),
    };
    let before = crate::error::page_cursor(params.cursor.as_deref(), parse_cursor)?;
    let query = CollisionsQuery {
        contract: params.contract.clone(),
        since_us,
        before,
        limit,
    };
    Ok(Json(collision_page(&state, &tenant, &query).await?))
}

/// Reads a page of collisions (shared with the web page).
pub(crate) async fn collision_page(
    state: &AppState,
    tenant: &TenantId,
    query: &CollisionsQuery,
) -> Result<CollisionPage, ApiError> {
    let (rows, more) = state.store.collisions_page(tenant, query).await?;
    let next_cursor = crate::error::next_cursor(more, &rows, |r| {
        format_cursor(r.received_at_us, r.collision_id)
    });
    // Each contract version's transport pointers, read once a page.
    let mut transports: BTreeMap<(&str, i64), Vec<String>> = BTreeMap::new();
    for row in &rows {
        let version = (row.contract.as_str(), row.contract_version);
        if let std::collections::btree_map::Entry::Vacant(slot) = transports.entry(version) {
            slot.insert(
                state
                    .store
                    .collision_transport(tenant.as_str(), row)
                    .await?,
            );
        }
    }
    let collisions = rows
        .iter()
        .map(|row| {
            let version = (row.contract.as_str(), row.contract_version);
            let pointers = transports.get(&version).map_or(&[][..], Vec::as_slice);
            collision_view(row, pointers)
        })
        .collect();
    Ok(CollisionPage {
        collisions,
        next_cursor,
    })
}

/// The `next_cursor` of a page of collisions ending at this row: `{received_at_us}.{collision_id}`
/// (also `GET /contracts/{name}/collisions`').
pub(crate) fn format_cursor(received_at_us: i64, collision_id: i64) -> String {
    format!("{received_at_us}.{collision_id}")
}

/// A cursor [`format_cursor`] wrote, or `None`.
pub(crate) fn parse_cursor(text: &str) -> Option<CollisionCursor> {
    let (at, id) = text.split_once('.')?;
    Some(CollisionCursor {
        received_at_us: at.parse().ok()?,
        collision_id: id.parse().ok()?,
    })
}

/// A stored collision with its diff, the changes under one of `transport` (its contract
/// version's transport pointers, `Store::collision_transport`) marked.
pub(crate) fn collision_view(row: &CollisionEntry, transport: &[String]) -> CollisionView {
    let parse = |text: &str| serde_json::from_str(text).unwrap_or(Value::String(text.to_string()));
    let stored = parse(&row.stored_payload);
    let incoming = parse(&row.incoming_payload);
    let transport: Vec<&str> = transport.iter().map(String::as_str).collect();
    let (changes, truncated) = diff::diff(&stored, &incoming, &transport);
    CollisionView {
        collision_id: row.collision_id,
        contract: row.contract.clone(),
        contract_version: row.contract_version,
        diff: changes
            .into_iter()
            .map(|c| DiffEntry {
                change: c.change.to_string(),
                incoming: c.incoming,
                path: c.path,
                stored: c.stored,
                transport: c.transport,
            })
            .collect(),
        diff_truncated: truncated,
        event_id: row.event_id.clone(),
        incoming_fingerprint: row.incoming_fingerprint.clone(),
        incoming_payload: incoming,
        received_at: format_rfc3339_micros(row.received_at_us),
        source: row.source.clone(),
        stored_fingerprint: row.stored_fingerprint.clone(),
        stored_payload: stored,
    }
}

/// The body of `POST /ops/webhooks`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields, expecting = "a JSON object {\"url\"}")]
pub(crate) struct WebhookBody {
    /// `http://…`, at most 2,000 bytes.
    url: String,
}

/// A webhook as the API shows it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WebhookView {
    /// RFC 3339.
    pub created_at: String,
    /// The secret the receiver verifies each delivery's `webhook-signature` with
    /// (`whsec_` + base64 of 32 bytes, Standard Webhooks' form): in the answers of
    /// `POST /ops/webhooks` only, never listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub signing_secret: Option<String>,
    /// Where each collision is posted.
    pub url: String,
    /// `whk_` + 16 hex.
    pub webhook_id: String,
}

fn webhook_view(w: &Webhook) -> WebhookView {
    WebhookView {
        created_at: format_rfc3339_micros(w.created_at_us),
        signing_secret: None,
        url: w.url.clone(),
        webhook_id: w.webhook_id.clone(),
    }
}

/// `POST /ops/webhooks`: every later collision of the tenant is posted to `url`. The
/// same URL again answers the existing webhook (200), so a retried request adds none.
#[utoipa::path(post, path = "/ops/webhooks", tag = "ops", security(("api_key" = [])),
    request_body = WebhookBody,
    responses((status = 201, body = WebhookView), (status = 200, body = WebhookView),
        (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn create_webhook(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let value = read_document(&state, &headers, body).await?;
    crate::auth::confirm_after_body(&state, &headers, &tenant).await?;
    let body: WebhookBody =
        crate::body::typed::parse(&value).map_err(|r| r.unprocessable("invalid_webhook"))?;
    let url = webhooks::check_url(&body.url)?;
    let secret = webhooks::new_signing_secret()?;
    let (webhook, created) = state
        .store
        .create_webhook(&tenant, &url, &secret, now_us())
        .await?
        .ok_or_else(|| {
            ApiError::unprocessable(
                "too_many_webhooks",
                format!(
                    "a tenant has at most {} webhooks; delete one first",
                    traqlyte_store::WEBHOOKS_PER_TENANT_MAX
                ),
            )
        })?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    tracing::info!(tenant = %tenant, webhook = %webhook.webhook_id, created, "webhook registered");
    // A retry (the same URL again) gets the secret too: its first answer may be lost.
    let view = WebhookView {
        signing_secret: webhook.signing_secret.clone(),
        ..webhook_view(&webhook)
    };
    Ok((status, Json(view)).into_response())
}

/// The answer of `GET /ops/webhooks`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WebhookList {
    /// Oldest first.
    pub webhooks: Vec<WebhookView>,
}

/// `GET /ops/webhooks`: the tenant's live webhooks.
#[utoipa::path(get, path = "/ops/webhooks", tag = "ops", security(("api_key" = [])),
    responses((status = 200, body = WebhookList), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn list_webhooks(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
) -> Result<Json<WebhookList>, ApiError> {
    let webhooks = state.store.webhooks(&tenant).await?;
    Ok(Json(WebhookList {
        webhooks: webhooks.iter().map(webhook_view).collect(),
    }))
}

/// `DELETE /ops/webhooks/{id}`: no further calls; queued deliveries are dropped.
#[utoipa::path(delete, path = "/ops/webhooks/{id}", tag = "ops", security(("api_key" = [])),
    params(("id" = String, Path, description = "the webhook's id")),
    responses((status = 204), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn delete_webhook(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    if state.store.delete_webhook(&tenant, &id, now_us()).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(
            "webhook_not_found",
            format!("no webhook {id:?}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = 3_600_000_000;

    fn row(start: i64, contract: &str, source: &str, i: i64, d: i64, c: i64) -> TrendRow {
        TrendRow {
            bucket_start_us: start,
            contract: contract.into(),
            source: source.into(),
            inserted: i,
            duplicates: d,
            collisions: c,
        }
    }

    #[test]
    fn every_bucket_of_the_range_is_listed_and_rates_computed() {
        let query = TrendQuery {
            since_us: 0,
            until_us: 3 * HOUR,
            bucket: Bucket::Hour,
            contract: None,
            source: None,
        };
        let trend = shape(
            &query,
            &[
                row(0, "c", "http", 3, 1, 0),
                row(2 * HOUR, "c", "http", 1, 0, 1),
            ],
        );
        assert_eq!(trend.series.len(), 1);
        let buckets = &trend.series[0].buckets;
        assert_eq!(buckets.len(), 3);
        assert_eq!(
            (buckets[0].received, buckets[0].duplicate_rate),
            (4, Some(0.25))
        );
        assert_eq!((buckets[1].received, buckets[1].duplicate_rate), (0, None));
        assert_eq!((buckets[2].received, buckets[2].collisions), (2, 1));
    }

    #[test]
    fn a_range_of_too_many_buckets_is_refused_naming_bucket() {
        let params = TrendParams {
            since: Some("2026-01-01T00:00:00Z".into()),
            until: Some("2026-03-01T00:00:00Z".into()),
            bucket: Some("minute".into()),
            contract: None,
            source: None,
        };
        let err = trend_query(&params, 0).expect_err("refused");
        assert_eq!(err.code(), "invalid_parameter");
    }

    #[test]
    fn minute_buckets_reach_back_48_hours_and_no_further() {
        let now = 1_796_000_000_000_000;
        let params = |since_us: i64| TrendParams {
            since: Some(traqlyte_identity::format_rfc3339_micros(since_us)),
            until: Some(traqlyte_identity::format_rfc3339_micros(since_us + HOUR)),
            bucket: Some("minute".into()),
            contract: None,
            source: None,
        };
        let kept = traqlyte_store::MINUTE_TALLIES_KEPT_US;
        // The start is aligned down to its minute: a start on a minute is kept as it is.
        let edge = (now - kept).div_euclid(60_000_000) * 60_000_000 + 60_000_000;
        assert!(trend_query(&params(edge), now).is_ok());
        let err = trend_query(&params(now - kept - 60_000_000), now).expect_err("refused");
        assert_eq!(
            (err.code(), err.field()),
            ("invalid_parameter", Some("since"))
        );
        let hours = TrendParams {
            bucket: Some("hour".into()),
            ..params(now - 10 * kept)
        };
        assert!(
            trend_query(&hours, now).is_ok(),
            "hour buckets reach back any time"
        );
        // Without `since` (derived as `until` − 24 h), the error names `until`.
        let derived = TrendParams {
            since: None,
            ..params(now - 3 * kept)
        };
        let err = trend_query(&derived, now).expect_err("refused");
        assert_eq!(err.field(), Some("until"));
    }

    #[test]
    fn a_trend_is_bounded_in_series_times_buckets() {
        assert!(within_cells(50, 2_000).is_ok());
        let err = within_cells(51, 2_000).expect_err("refused");
        assert_eq!(
            (err.code(), err.field()),
            ("invalid_parameter", Some("contract"))
        );
        assert!(within_cells(usize::MAX, 2).is_err());
        assert!(within_cells(0, 2_000).is_ok());
    }

    #[test]
    fn cursors_round_trip_and_garbage_is_refused() {
        assert_eq!(
            parse_cursor("1700000000000000.42"),
            Some(CollisionCursor {
                received_at_us: 1_700_000_000_000_000,
                collision_id: 42
            })
        );
        assert_eq!(parse_cursor("x.1"), None);
        assert_eq!(parse_cursor("12"), None);
    }
}

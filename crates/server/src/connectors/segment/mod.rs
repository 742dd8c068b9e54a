//! Segment's HTTP Tracking API (docs/segment.md): `POST /v1/track`, `/v1/identify`,
//! `/v1/page`, `/v1/screen`, `/v1/group`, `/v1/alias` and `/v1/batch` (also under the paths
//! other libraries post to: `/v1/import` and `/v1/import/`, and analytics.js's `/v1/t` …
//! `/v1/b`; any body
//! content type, `text/plain` included, is read as JSON), authenticated by
//! a source's write key (`auth`), each message identified under the built-in contract
//! `segment.message` (`traqlyte_identity::segment`) and stored, with the outcomes of the
//! metric bindings it feeds, in one transaction (`ingest`); answered
//! `200 {"success": true}` only after the commit. Also the tenant's views: `GET /sources`,
//! `GET /sources/{id}/rejections`, and the bindings of a campaign (`bindings`).

pub(crate) mod auth;
pub(crate) mod bindings;
pub(crate) mod config;
pub(crate) mod ingest;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use traqlyte_identity::json;
use traqlyte_identity::number::RefusedNumber;
use traqlyte_identity::segment::{identify_message_owned, Envelope, MessageType, SegmentError};
use traqlyte_identity::{format_rfc3339_micros, IdentityError};
use traqlyte_store::{now_us, EventOutcome, NewRejection, Rejection, SourceId, SourceInfo};
use utoipa::{IntoParams, ToSchema};

use crate::auth::Tenant;
use crate::body::read_limited;
use crate::body::typed::{parse_owned, Refusal};
use crate::{ApiError, AppState};
use config::{
    BATCH_BYTES_MAX, BATCH_DEPTH_EXTRA, BATCH_ERRORS_LISTED_MAX, MESSAGE_BYTES_MAX,
    REJECTIONS_PAGE_DEFAULT, REJECTIONS_PAGE_MAX, SOURCES_PAGE_DEFAULT,
};

/// The answer Segment's libraries expect.
#[derive(Serialize, ToSchema)]
pub(crate) struct Success {
    /// Always `true`: every message of the request is durably stored (or, in a batch,
    /// rejected alone and recorded).
    success: bool,
}

macro_rules! single_route {
    ($name:ident, $path:literal, $short:ident, $short_path:literal, $kind:expr) => {
        #[doc = concat!("`POST ", $path, "`: one message, stored before the answer.")]
        #[utoipa::path(post, path = $path, tag = "segment", security(("write_key" = [])),
            request_body(content = Object, description = "a Segment message (docs/segment.md)"),
            responses((status = 200, body = Success, description = "stored, or a retry of a stored message"),
                (status = "4XX", response = crate::openapi::ErrorEnvelope),
                (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
        pub(crate) async fn $name(
            State(state): State<AppState>,
            headers: HeaderMap,
            body: Body,
        ) -> Result<Json<Success>, ApiError> {
            single(&state, &headers, body, $kind).await
        }

        #[doc = concat!("`POST ", $short_path, "`: `", $path, "` under the short path Segment's browser library (analytics.js) posts to.")]
        #[utoipa::path(post, path = $short_path, tag = "segment", security(("write_key" = [])),
            description = concat!("The same as `", $path, "`, under the path Segment's browser library (analytics.js) posts to, usually with `Content-Type: text/plain` and the write key in the body (docs/segment.md)."),
            request_body(content = Object, description = "a Segment message (docs/segment.md)"),
            responses((status = 200, body = Success, description = "stored, or a retry of a stored message"),
                (status = "4XX", response = crate::openapi::ErrorEnvelope),
                (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
        pub(crate) async fn $short(
            State(state): State<AppState>,
            headers: HeaderMap,
            body: Body,
        ) -> Result<Json<Success>, ApiError> {
            single(&state, &headers, body, $kind).await
        }
    };
}

single_route!(track, "/v1/track", track_short, "/v1/t", MessageType::Track);
single_route!(
    identify,
    "/v1/identify",
    identify_short,
    "/v1/i",
    MessageType::Identify
);
single_route!(page, "/v1/page", page_short, "/v1/p", MessageType::Page);
single_route!(
    screen,
    "/v1/screen",
    screen_short,
    "/v1/s",
    MessageType::Screen
);
single_route!(group, "/v1/group", group_short, "/v1/g", MessageType::Group);
single_route!(alias, "/v1/alias", alias_short, "/v1/a", MessageType::Alias);

async fn single(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
    kind: MessageType,
) -> Result<Json<Success>, ApiError> {
    let Authenticated { value, source, .. } =
        read_authenticated(state, headers, body, Parse::Single).await?;
    let received_at_us = now_us();
    let envelope = Envelope {
        source: source.source_id.as_str(),
        received_at_us,
        route_type: Some(kind),
        sent_at: None,
        context: None,
    };
    let message = identify_message_owned(value, &envelope).map_err(|err| {
        ingest::count_refused(&source, 1);
        bad_message(err)
    })?;
    let stored = ingest::store(
        &state.store,
        &source,
        std::slice::from_ref(&message),
        &[],
        received_at_us,
    )
    .await?;
    if let Some(EventOutcome::Collision { stored_fingerprint }) = stored.outcomes.first() {
        return Err(collision(&message, stored_fingerprint));
    }
    Ok(Json(Success { success: true }))
}

/// The body of `POST /v1/batch`. Messages stay JSON values: each is judged alone.
/// Other top-level keys are ignored, as Segment ignores them: official libraries add
/// their own (analytics-go and analytics.NET a batch `messageId`, analytics-java
/// `sequence`).
#[derive(Deserialize, ToSchema)]
#[serde(expecting = "a JSON object {\"batch\": [messages…]}")]
pub(crate) struct BatchBody {
    /// The messages (each at most 32 KB; the request at most 500 KB).
    #[schema(value_type = Vec<Object>)]
    batch: Vec<Value>,
    /// Context merged under each message's own.
    #[schema(value_type = Option<Object>)]
    context: Option<Map<String, Value>>,
    /// Integrations of the whole batch: accepted, as Segment accepts them, and not
    /// stored (a message's own `integrations` are stored with it).
    #[schema(value_type = Option<Object>)]
    #[allow(dead_code)] // accepted, as Segment accepts it; not interpreted
    integrations: Option<Map<String, Value>>,
    /// When the client sent the request (for clock-skew correction).
    #[serde(rename = "sentAt")]
    sent_at: Option<String>,
    /// Sent by some libraries beside `sentAt`; not interpreted, so any value is accepted.
    #[schema(value_type = Option<Value>)]
    #[allow(dead_code)] // accepted, as Segment accepts it; not interpreted
    timestamp: Option<Value>,
    /// The write key, when not sent as HTTP Basic auth.
    #[serde(rename = "writeKey")]
    #[allow(dead_code)] // accepted, as Segment accepts it; not interpreted
    write_key: Option<String>,
}

impl BatchBody {
    /// The body, its members moved out of `value` when each has the type its field asks
    /// for (the common case), else serde's reading of it, for the refusal naming the
    /// field. Serde's derive would rebuild every message of the batch, a tenth of the
    /// route's CPU (`bench segment`).
    fn from_value(value: Value) -> Result<BatchBody, Refusal> {
        let fits = |map: &Map<String, Value>| {
            map.contains_key("batch")
                && map.iter().all(|(key, member)| match key.as_str() {
                    "batch" => member.is_array(),
                    "context" | "integrations" => member.is_object() || member.is_null(),
                    "sentAt" | "writeKey" => member.is_string() || member.is_null(),
                    _ => true,
                })
        };
        let mut map = match value {
            Value::Object(map) if fits(&map) => map,
            other => return parse_owned(other),
        };
        let object = |member: Option<Value>| match member {
            Some(Value::Object(map)) => Some(map),
            _ => None,
        };
        let string = |member: Option<Value>| match member {
            Some(Value::String(text)) => Some(text),
            _ => None,
        };
        Ok(BatchBody {
            batch: match map.remove("batch") {
                Some(Value::Array(items)) => items,
                _ => Vec::new(),
            },
            context: object(map.remove("context")),
            integrations: object(map.remove("integrations")),
            sent_at: string(map.remove("sentAt")),
            timestamp: map.remove("timestamp").filter(|t| !t.is_null()),
            write_key: string(map.remove("writeKey")),
        })
    }
}

/// `POST /v1/batch`: every valid message stored, each invalid one rejected alone and
/// recorded (`GET /sources/{id}/rejections`); a batch whose every message is invalid is
/// a `400` that writes nothing.
#[utoipa::path(post, path = "/v1/batch", tag = "segment", security(("write_key" = [])),
    request_body = BatchBody,
    responses((status = 200, body = Success, description = "every valid message stored; invalid ones recorded"),
        (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn batch(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Success>, ApiError> {
    store_batch(&state, &headers, body).await
}

/// `POST /v1/import`: `/v1/batch` under the path Segment's Ruby and classic Android
/// libraries post to.
#[utoipa::path(post, path = "/v1/import", tag = "segment", security(("write_key" = [])),
    description = "The same as `/v1/batch`, under the path Segment's Ruby and classic Android libraries post to (docs/segment.md).",
    request_body = BatchBody,
    responses((status = 200, body = Success, description = "every valid message stored; invalid ones recorded"),
        (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn import(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Success>, ApiError> {
    store_batch(&state, &headers, body).await
}

/// `POST /v1/import/`: `/v1/import` with the trailing slash analytics-java posts to.
#[utoipa::path(post, path = "/v1/import/", tag = "segment", security(("write_key" = [])),
    description = "The same as `/v1/batch`, under the path Segment's Java library (analytics-java) posts to by default (docs/segment.md).",
    request_body = BatchBody,
    responses((status = 200, body = Success, description = "every valid message stored; invalid ones recorded"),
        (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn import_slash(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Success>, ApiError> {
    store_batch(&state, &headers, body).await
}

/// `POST /v1/b`: `/v1/batch` under the path Segment's browser library (analytics.js)
/// posts to with its batching delivery strategy.
#[utoipa::path(post, path = "/v1/b", tag = "segment", security(("write_key" = [])),
    description = "The same as `/v1/batch`, under the path Segment's browser library (analytics.js) posts to with its batching delivery strategy, usually with `Content-Type: text/plain` and the write key in the body (docs/segment.md).",
    request_body = BatchBody,
    responses((status = 200, body = Success, description = "every valid message stored; invalid ones recorded"),
        (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn batch_short(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Success>, ApiError> {
    store_batch(&state, &headers, body).await
}

async fn store_batch(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Json<Success>, ApiError> {
    let Authenticated {
        bytes,
        value,
        numbers,
        measure,
        source,
    } = read_authenticated(state, headers, body, Parse::Batch).await?;
    let numbers = message_numbers(numbers)?;
    let body = BatchBody::from_value(value).map_err(|r| {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_batch", r.message).with_field(r.field)
    })?;
    let received_at_us = now_us();
    let envelope = Envelope {
        source: source.source_id.as_str(),
        received_at_us,
        route_type: None,
        sent_at: body.sent_at.as_deref(),
        context: body.context.as_ref(),
    };
    // A message nested deeper than the server's limit is refused alone, as a single call
    // is refused (it made the batch `400 too_deep`, and Segment's clients drop a batch
    // answered 400 with every valid message in it): when the body was too deep for the
    // limit, it was parsed again as deep as any JSON is taken (`measure`) and each message
    // is measured. The batch's context sits in every message's.
    let depth_max = state.config.json_depth_max;
    if let Some(context) = &body.context {
        // The message's object, the context's, then what the context holds.
        let depth = 2 + context.values().map(json::depth).max().unwrap_or(0);
        if depth > depth_max {
            let err = SegmentError::TooDeep { depth, depth_max };
            return Err(bad_message(err).with_field("context"));
        }
    }
    let mut messages = Vec::with_capacity(body.batch.len());
    let mut refused = Vec::new();
    for (index, item) in body.batch.into_iter().enumerate() {
        if let Some((_, number)) = numbers.iter().find(|(at, _)| *at == index) {
            refused.push((index, number.clone()));
            continue;
        }
        let depth = if measure { json::depth(&item) } else { 0 };
        if depth > depth_max {
            refused.push((index, SegmentError::TooDeep { depth, depth_max }));
            continue;
        }
        match identify_message_owned(item, &envelope) {
            Ok(message) => messages.push(message),
            Err(err) => refused.push((index, err)),
        }
    }
    let rejections = batch_rejections(state, &bytes, &refused);
    if messages.is_empty() && !rejections.is_empty() {
        ingest::count_refused(&source, rejections.len());
        return Err(all_rejected(&rejections));
    }
    let stored = ingest::store(
        &state.store,
        &source,
        &messages,
        &rejections,
        received_at_us,
    )
    .await?;
    let collisions = stored
        .outcomes
        .iter()
        .filter(|o| matches!(o, EventOutcome::Collision { .. }))
        .count();
    tracing::debug!(source = %source.source_id, messages = messages.len(), rejected = rejections.len(), collisions, "segment batch stored");
    Ok(Json(Success { success: true }))
}

/// A request's body, as received and parsed, and the source of its write key.
struct Authenticated {
    bytes: Bytes,
    value: Value,
    /// A batch's numbers the canonical form cannot hold, each refusing only its message.
    numbers: Vec<RefusedNumber>,
    /// A batch too deep for the server's limit, parsed again deeper: its messages are
    /// to be measured, each too deep refused alone.
    measure: bool,
    source: traqlyte_store::Source,
}

/// How a body is parsed: one message, refused whole for any number the canonical form
/// cannot hold; or a batch, whose such numbers refuse only their own message.
#[derive(Clone, Copy)]
enum Parse {
    Single,
    Batch,
}

/// The messages of a batch refused for a number, by index, each with its first such
/// number (its field inside the message). A number outside the messages (in the batch's
/// `context`, merged into every message) refuses the request, as it would a single call.
fn message_numbers(numbers: Vec<RefusedNumber>) -> Result<Vec<(usize, SegmentError)>, ApiError> {
    let mut refused: Vec<(usize, SegmentError)> = Vec::new();
    for number in numbers {
        let located = number
            .pointer
            .strip_prefix("/batch")
            .and_then(crate::body::item_of)
            .map(|(index, field)| (index, field.to_string()));
        let Some((index, field)) = located else {
            let err = ApiError::from(traqlyte_identity::json::refused_number_error(number));
            return Err(
                err.with_status_if(StatusCode::UNPROCESSABLE_ENTITY, StatusCode::BAD_REQUEST)
            );
        };
        if refused.iter().all(|(at, _)| *at != index) {
            let err = IdentityError::NumberOutOfRange { field };
            refused.push((index, SegmentError::Canonical(err)));
        }
    }
    Ok(refused)
}

/// Reads the body (at most 500 KB: a larger one is `400 body_too_large`) and finds the
/// source of its write key (`401` without a working one). A request with a Basic
/// `Authorization` header is authenticated before its body is read.
async fn read_authenticated(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
    parse: Parse,
) -> Result<Authenticated, ApiError> {
    let early = if auth::has_header(headers) {
        Some(auth::source(state, headers, None).await?)
    } else {
        None
    };
    let bytes = read_limited(headers, body, BATCH_BYTES_MAX)
        .await
        .map_err(|err| {
            err.with_status_if(StatusCode::PAYLOAD_TOO_LARGE, StatusCode::BAD_REQUEST)
        })?;
    let in_room = |bytes: Bytes| async move {
        crate::body::parse_in_room(&bytes, |bytes, meter| {
            parse_body(state, bytes, parse, meter)
        })
        .await
        .map_err(|err| err.with_status_if(StatusCode::PAYLOAD_TOO_LARGE, StatusCode::BAD_REQUEST))
        .map(|parsed| (bytes, parsed))
    };
    let (mut bytes, mut parsed) = in_room(bytes).await?;
    // A lone surrogate escape (`JSON.stringify` of a string cut inside an emoji) is read
    // as U+FFFD, and `NaN` or `Infinity` (Python's `json` writes them for a float
    // property) as `null`, as `JSON.stringify` writes it, rather than refusing the
    // request, and with it the whole batch. Each fix once, in either order.
    let mut fixes = json::BrowserFixes::default();
    while let Err(err) = &parsed {
        let Some(fixed) = json::browser_fix(err, &bytes, &mut fixes) else {
            break;
        };
        (bytes, parsed) = in_room(Bytes::from(fixed)).await?;
    }
    let (value, numbers, measure) = parsed.map_err(|err| {
        ApiError::from(err)
            .with_status_if(StatusCode::UNPROCESSABLE_ENTITY, StatusCode::BAD_REQUEST)
    })?;
    // A key checked before the body is looked up again once the body has arrived: a body
    // trickled in for up to the request timeout would otherwise be stored after the
    // source's revocation had returned.
    let source = match early {
        Some(_) => auth::source(state, headers, None).await?,
        None => auth::source(state, headers, Some(&value)).await?,
    };
    Ok(Authenticated {
        bytes,
        value,
        numbers,
        measure,
        source,
    })
}

fn parse_body(
    state: &AppState,
    bytes: &[u8],
    parse: Parse,
    meter: &json::Meter,
) -> Result<(Value, Vec<RefusedNumber>, bool), traqlyte_identity::json::ParseError> {
    let depth_max = state.config.json_depth_max;
    match parse {
        // A message nests at most `json_depth_max` levels, counted from itself.
        Parse::Single => Ok((json::parse_in(bytes, depth_max, meter)?, Vec::new(), false)),
        // An item is `/batch/{index}`; a body too deep for the limit has its messages
        // measured (`store_batch`), each too deep refused alone.
        Parse::Batch => json::parse_batch_in(bytes, depth_max, BATCH_DEPTH_EXTRA, meter),
    }
}

fn bad_message(err: SegmentError) -> ApiError {
    let field = err.field();
    let api = ApiError::new(StatusCode::BAD_REQUEST, err.code(), err.to_string());
    if field.is_empty() {
        api
    } else {
        api.with_field(field)
    }
}

/// `409 collision` with the stored and the refused fingerprints under the shared id, as
/// the native routes answer it.
fn collision(
    message: &traqlyte_identity::segment::SegmentMessage,
    stored_fingerprint: &traqlyte_identity::Fingerprint,
) -> ApiError {
    // A message without a messageId is identified by its content (docs/segment.md): say
    // so, rather than name an id it does not have.
    let has_id = message
        .payload
        .get("messageId")
        .and_then(serde_json::Value::as_str)
        .is_some_and(|id| !id.is_empty());
    let reason = if has_id {
        "a different message is stored under this messageId for this source; nothing was overwritten and this payload was logged (GET /contracts/segment.message/collisions). Give every message its own messageId"
    } else {
        "this message has no messageId, and a message stored for this source has the same type, event, name, category, userId, anonymousId, groupId, previousId, properties, traits and timestamp but differs in other fields (a timestamp is compared as written: spell it the same way on every retry); nothing was overwritten and this payload was logged (GET /contracts/segment.message/collisions). Give every message its own messageId"
    };
    ApiError::new(StatusCode::CONFLICT, "collision", reason)
        .with_field("messageId")
        .with_event_collision(
            &message.identified.event_id,
            stored_fingerprint,
            &message.identified.fingerprint,
        )
}

/// The rejections of a batch's `refused` messages, each recorded as received. The
/// messages were given up to their identification, so the rare batch that has any reads
/// its body again for them.
fn batch_rejections(
    state: &AppState,
    bytes: &[u8],
    refused: &[(usize, SegmentError)],
) -> Vec<NewRejection> {
    if refused.is_empty() {
        return Vec::new();
    }
    // The body parsed and read as a batch the first time, in its room: it does again.
    let mut received = parse_body(state, bytes, Parse::Batch, &json::Meter::unbounded())
        .ok()
        .and_then(|(value, ..)| BatchBody::from_value(value).ok())
        .map(|body| body.batch)
        .unwrap_or_default();
    refused
        .iter()
        .map(|(index, err)| {
            let item = received.get_mut(*index).map(std::mem::take);
            rejection(*index, item.unwrap_or(Value::Null), err)
        })
        .collect()
}

fn rejection(index: usize, mut item: Value, err: &SegmentError) -> NewRejection {
    if let Value::Object(map) = &mut item {
        map.remove("writeKey");
    }
    let mut payload = item.to_string();
    if payload.len() > MESSAGE_BYTES_MAX {
        // An oversized message is kept as its first 32 KB: enough to recognise it.
        let cut = (0..=MESSAGE_BYTES_MAX)
            .rev()
            .find(|&i| payload.is_char_boundary(i))
            .unwrap_or(0);
        payload.truncate(cut);
    }
    // A reason quoting a key of the message may hold NUL: the store replaces it.
    NewRejection {
        message_index: u32::try_from(index).unwrap_or(u32::MAX),
        code: err.code().to_string(),
        field: err.field(),
        reason: err.to_string(),
        payload,
    }
}

fn all_rejected(rejections: &[NewRejection]) -> ApiError {
    let listed: Vec<String> = rejections
        .iter()
        .take(BATCH_ERRORS_LISTED_MAX)
        .map(|r| format!("message {}: {} ({})", r.message_index, r.reason, r.code))
        .collect();
    let more = rejections.len().saturating_sub(listed.len());
    let more = if more > 0 {
        format!("; and {more} more")
    } else {
        String::new()
    };
    let first = &rejections[0];
    let field = if first.field.is_empty() {
        format!("batch[{}]", first.message_index)
    } else {
        format!("batch[{}].{}", first.message_index, first.field)
    };
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "invalid_batch",
        format!(
            "every message of the batch was rejected, nothing was stored: {}{more}",
            listed.join("; ")
        ),
    )
    .with_field(field)
}

/// The answer of `GET /sources` (fields in alphabetical order: see `health::Health`).
#[derive(Serialize, ToSchema)]
pub(crate) struct SourceList {
    /// Pass as `cursor` for the next page; absent on the last one.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
    /// By name, a page of at most `limit`.
    sources: Vec<SourceView>,
}

/// The query of `GET /sources`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct SourcesQuery {
    /// The previous page's `next_cursor` (the id of the last source it listed).
    cursor: Option<String>,
    /// Sources per page (1–1000, default 1000).
    #[param(minimum = 1, maximum = 1000)] // SOURCES_PAGE_MAX
    limit: Option<u32>,
}

/// The query of `GET /sources/{id}/rejections`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct RejectionsQuery {
    /// The previous page's `next_cursor`.
    cursor: Option<String>,
    /// Rejections per page (1–1000, default 100).
    #[param(minimum = 1, maximum = 1000)] // REJECTIONS_PAGE_MAX
    limit: Option<u32>,
}

/// A source as answered.
#[derive(Serialize, ToSchema)]
pub(crate) struct SourceView {
    /// Messages refused because another message holds their identity.
    collisions: i64,
    created_at: String,
    /// Re-deliveries of stored messages, suppressed.
    duplicates: i64,
    id: String,
    /// The first 8 hex digits of the write key, `tlw_1a2b3c4d`.
    key_prefix: String,
    name: String,
    /// Messages of accepted batches rejected alone.
    rejected: i64,
    revoked_at: Option<String>,
    /// Messages stored.
    stored: i64,
}

impl From<SourceInfo> for SourceView {
    fn from(s: SourceInfo) -> Self {
        SourceView {
            collisions: s.collisions,
            created_at: format_rfc3339_micros(s.created_at_us),
            duplicates: s.duplicates,
            id: s.source_id.to_string(),
            key_prefix: format!("tlw_{}", s.key_prefix),
            name: s.name,
            rejected: s.rejected,
            revoked_at: s.revoked_at_us.map(format_rfc3339_micros),
            stored: s.inserted,
        }
    }
}

/// `GET /sources`: the tenant's sources with their counts, by name, a page of at most
/// `limit` at a time.
#[utoipa::path(get, path = "/sources", tag = "segment", security(("api_key" = [])),
    params(SourcesQuery),
    responses((status = 200, body = SourceList), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn list_sources(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Query(query): Query<SourcesQuery>,
) -> Result<Json<SourceList>, ApiError> {
    let limit = crate::error::page_limit(
        query.limit,
        SOURCES_PAGE_DEFAULT,
        traqlyte_store::SOURCES_PAGE_MAX,
    )?;
    let after = crate::error::page_cursor(query.cursor.as_deref(), SourceId::parse)?;
    // A cursor of the right shape naming no source of the tenant was never given to it.
    let (sources, more) = state
        .store
        .sources_page(&tenant, after.as_ref(), limit)
        .await?
        .ok_or_else(crate::error::foreign_cursor)?;
    let next_cursor = crate::error::next_cursor(more, &sources, |s| s.source_id.to_string());
    Ok(Json(SourceList {
        next_cursor,
        sources: sources.into_iter().map(SourceView::from).collect(),
    }))
}

/// The answer of `GET /sources/{id}/rejections`.
#[derive(Serialize, ToSchema)]
pub(crate) struct RejectionList {
    /// Pass as `cursor` for the next page; absent on the last one.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
    /// Newest first, a page of at most `limit`.
    rejections: Vec<RejectionView>,
    source: String,
}

/// A rejected message as answered.
#[derive(Serialize, ToSchema)]
pub(crate) struct RejectionView {
    code: String,
    /// The message's field (empty: the message itself).
    field: String,
    /// The message's position in its batch.
    index: i64,
    message: String,
    /// The message as received (the write key removed): any JSON value, since a batch
    /// item need not be an object; or its first 32 KB as text.
    #[schema(value_type = Value)]
    payload: Value,
    received_at: String,
}

impl From<Rejection> for RejectionView {
    fn from(r: Rejection) -> Self {
        let payload = serde_json::from_str(&r.payload).unwrap_or(Value::String(r.payload));
        RejectionView {
            code: r.code,
            field: r.field,
            index: r.message_index,
            message: r.reason,
            payload,
            received_at: format_rfc3339_micros(r.received_at_us),
        }
    }
}

/// `GET /sources/{id}/rejections`: the source's rejected messages with reasons, newest
/// first, a page of at most `limit` at a time.
#[utoipa::path(get, path = "/sources/{id}/rejections", tag = "segment", security(("api_key" = [])),
    params(("id" = String, Path, description = "the source's id (src_…)"), RejectionsQuery),
    responses((status = 200, body = RejectionList), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn rejections(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
    Query(query): Query<RejectionsQuery>,
) -> Result<Json<RejectionList>, ApiError> {
    let limit =
        crate::error::page_limit(query.limit, REJECTIONS_PAGE_DEFAULT, REJECTIONS_PAGE_MAX)?;
    // A `next_cursor` of this route: the id of the last rejection listed (ids start at 1).
    let before = crate::error::page_cursor(query.cursor.as_deref(), |text| {
        text.parse::<i64>().ok().filter(|id| *id > 0)
    })?;
    let missing = || {
        ApiError::not_found(
            "source_not_found",
            format!("no source {id:?}; list them with GET /sources"),
        )
        .with_field("id")
    };
    let source = SourceId::parse(&id).ok_or_else(missing)?;
    if state
        .store
        .source(&tenant, source.as_str())
        .await?
        .is_none()
    {
        return Err(missing());
    }
    let (rows, more) = state
        .store
        .rejections(&tenant, &source, before, limit)
        .await?;
    let next_cursor = crate::error::next_cursor(more, &rows, |r| r.rejection_id.to_string());
    Ok(Json(RejectionList {
        next_cursor,
        rejections: rows.into_iter().map(RejectionView::from).collect(),
        source: source.to_string(),
    }))
}

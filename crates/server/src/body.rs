//! Reading request bodies under a byte limit and parsing them strictly, so every bad body
//! becomes a clear JSON error before anything is written.

use axum::body::{to_bytes, Body, Bytes};
use axum::http::header::{CONTENT_ENCODING, CONTENT_LENGTH};
use axum::http::HeaderMap;
use serde_json::Value;
use traqlyte_identity::json;

use crate::{ApiError, AppState};

pub(crate) mod typed;

/// How much of an oversized body is read and thrown away so the client, still sending,
/// gets its 413 instead of a broken pipe. Beyond this the connection is simply closed.
const OVERSIZE_DRAIN_BYTES_MAX: u64 = 32 * 1024 * 1024;

/// Reads the whole body, refusing (413) one larger than `limit_bytes`; a declared
/// `Content-Length` over the limit is refused without buffering the body. A body sent
/// with `Content-Encoding: gzip` is inflated, and `limit_bytes` bounds both what is
/// read and what it inflates to (so a small body cannot expand into a large one); any
/// other encoding is `415 unsupported_content_encoding`, a broken gzip stream
/// `400 invalid_gzip`.
pub async fn read_limited(
    headers: &HeaderMap,
    body: Body,
    limit_bytes: usize,
) -> Result<Bytes, ApiError> {
    // Refused before the body is read: the unread rest makes the connection unusable.
    let gzip = content_encoding(headers).map_err(ApiError::closing_connection)?;
    let bytes = read_raw(headers, body, limit_bytes).await?;
    if !gzip {
        return Ok(bytes);
    }
    if bytes.len() <= INFLATE_INLINE_BYTES_MAX {
        return inflate(&bytes, limit_bytes);
    }
    // Up to a batch's limit of output: off the request threads.
    tokio::task::spawn_blocking(move || inflate(&bytes, limit_bytes))
        .await
        .map_err(|err| ApiError::internal(format!("inflating a body: {err}")))?
}

/// Compressed bodies up to this size are inflated on the request's own thread; larger
/// ones on the blocking pool, so many concurrent gzip batches cannot stall the runtime.
const INFLATE_INLINE_BYTES_MAX: usize = 16 * 1024;

/// Makes `headers` describe a body of `len` bytes as [`read_limited`] returned it (no
/// `Content-Encoding` any more), for a layer that read the body and hands it on.
pub(crate) fn as_read(headers: &mut HeaderMap, len: usize) {
    headers.remove(CONTENT_ENCODING);
    headers.insert(CONTENT_LENGTH, axum::http::HeaderValue::from(len));
}

/// Whether the body is gzip-compressed: true when the codings of every
/// `Content-Encoding` line, comma-separated, are one `gzip` (or its alias `x-gzip`) and
/// any number of `identity`; false without one; anything else (another coding, gzip
/// twice, a value that is not text) is refused before the body is read.
fn content_encoding(headers: &HeaderMap) -> Result<bool, ApiError> {
    let mut gzip = 0;
    for value in headers.get_all(CONTENT_ENCODING) {
        let refuse = || {
            ApiError::new(
                axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_content_encoding",
                format!(
                    "Content-Encoding {:?} is not supported: send the body as it is, or compressed with one gzip",
                    String::from_utf8_lossy(value.as_bytes())
                ),
            )
            .with_field("Content-Encoding")
        };
        let text = value.to_str().map_err(|_| refuse())?;
        for coding in text.split(',').map(str::trim) {
            if coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip") {
                gzip += 1;
            } else if !(coding.is_empty() || coding.eq_ignore_ascii_case("identity")) {
                return Err(refuse());
            }
        }
        if gzip > 1 {
            return Err(refuse());
        }
    }
    Ok(gzip == 1)
}

/// Inflates a gzip body (every member of it, as `gzip -c a b` writes them) to at most
/// `limit_bytes`.
fn inflate(compressed: &[u8], limit_bytes: usize) -> Result<Bytes, ApiError> {
    use std::io::Read;
    let mut inflated = Vec::with_capacity(compressed.len().saturating_mul(4).min(limit_bytes));
    let reader = flate2::read::MultiGzDecoder::new(compressed);
    let cap = u64::try_from(limit_bytes)
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    match reader.take(cap).read_to_end(&mut inflated) {
        Ok(_) if inflated.len() > limit_bytes => Err(ApiError::new(
            axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("request body inflates to more than the limit of {limit_bytes} bytes"),
        )
        .with_field("Content-Encoding")),
        Ok(_) => Ok(Bytes::from(inflated)),
        Err(err) => Err(ApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
            "invalid_gzip",
            format!(
                "the body is sent with Content-Encoding gzip but is not a whole gzip stream: {err}"
            ),
        )
        .with_field("Content-Encoding")),
    }
}

/// [`read_limited`] without the decoding: the bytes as sent.
async fn read_raw(headers: &HeaderMap, body: Body, limit_bytes: usize) -> Result<Bytes, ApiError> {
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(length) = declared.filter(|length| *length > limit_bytes as u64) {
        // Once the whole body is read the connection is clean and stays open; an
        // unread rest makes it unusable, so the client is told to close it.
        if length <= OVERSIZE_DRAIN_BYTES_MAX
            && !expects_continue(headers)
            && drain(body, OVERSIZE_DRAIN_BYTES_MAX).await
        {
            return Err(ApiError::too_large(limit_bytes));
        }
        return Err(ApiError::too_large(limit_bytes).closing_connection());
    }
    to_bytes(body, limit_bytes)
        .await
        .map_err(|_| ApiError::too_large(limit_bytes).closing_connection())
}

/// Reads and discards up to `bytes_max` bytes of `body`, holding one frame at a time;
/// true when the body ended within the bound.
async fn drain(mut body: Body, bytes_max: u64) -> bool {
    use http_body::Body as _;
    let mut seen = 0u64;
    while seen <= bytes_max {
        let frame = std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await;
        match frame {
            Some(Ok(frame)) => seen += frame.data_ref().map_or(0, |data| data.len() as u64),
            Some(Err(err)) => {
                tracing::debug!(error = %err, seen, "oversized body broke off while draining");
                return false;
            }
            None => return true,
        }
    }
    false
}

/// A client that sent `Expect: 100-continue` waits for the answer before sending the
/// body: reading it would invite the very body we are refusing.
fn expects_continue(headers: &HeaderMap) -> bool {
    headers
        .get(axum::http::header::EXPECT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
}

/// Reads and parses a JSON body: valid UTF-8, nesting within `depth_max`, no duplicate
/// keys, no NaN/Infinity.
pub async fn read_json(
    headers: &HeaderMap,
    body: Body,
    limit_bytes: usize,
    depth_max: usize,
) -> Result<Value, ApiError> {
    read_json_with(headers, body, limit_bytes, depth_max, json::parse).await
}

/// [`read_json`] judged by `parse` (which numbers it takes).
async fn read_json_with(
    headers: &HeaderMap,
    body: Body,
    limit_bytes: usize,
    depth_max: usize,
    parse: fn(&[u8], usize) -> Result<Value, json::ParseError>,
) -> Result<Value, ApiError> {
    let bytes = read_limited(headers, body, limit_bytes).await?;
    Ok(parse(&not_blank(bytes)?, depth_max)?)
}

/// Refuses a body of only whitespace with `400 empty_body`.
fn not_blank(bytes: Bytes) -> Result<Bytes, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
            "empty_body",
            "request body is empty; send a JSON document",
        ));
    }
    Ok(bytes)
}

/// Reads one JSON document under the server's single-body limits.
pub async fn read_document(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Value, ApiError> {
    read_json(
        headers,
        body,
        state.config.body_bytes_max,
        state.config.json_depth_max,
    )
    .await
}

/// Reads an OpenLineage RunEvent: [`read_document`] under the lineage route's own limits
/// (`lineage_body_bytes_max`, `lineage_json_depth_max`), taking every integer a 64-bit
/// integer holds, beyond ±2^53 too ([`json::parse_wide_integers`]), since facets carry
/// such integers as data (an Iceberg snapshot id is a random 63-bit number).
pub async fn read_run_event(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Value, ApiError> {
    let config = &state.config;
    read_json_with(
        headers,
        body,
        config.lineage_body_bytes_max,
        config.lineage_json_depth_max,
        json::parse_wide_integers,
    )
    .await
}

/// Reads a batch: a JSON array under the batch byte limit (one nesting level more than a
/// single document) holding at most `batch_events_max` items of `what` (e.g. "events").
/// An item holding a number the canonical form cannot hold is refused alone
/// (`number_out_of_range`, its field relative to the item), the others stay.
pub async fn read_batch(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
    what: &str,
) -> Result<Vec<Result<Value, ApiError>>, ApiError> {
    let config = &state.config;
    let bytes = not_blank(read_limited(headers, body, config.batch_bytes_max).await?)?;
    let (value, refused) = json::parse_reporting_numbers(&bytes, config.json_depth_max + 1, 1)?;
    let Value::Array(items) = value else {
        return Err(ApiError::unprocessable(
            "not_an_array",
            format!("a batch body must be a JSON array of {what}"),
        ));
    };
    if items.len() > config.batch_events_max {
        return Err(ApiError::new(
            axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            "batch_too_large",
            format!(
                "a batch holds at most {} {what}, got {}",
                config.batch_events_max,
                items.len()
            ),
        ));
    }
    let mut items: Vec<Result<Value, ApiError>> = items.into_iter().map(Ok).collect();
    for mut number in refused {
        let Some((index, rest)) = item_of(&number.pointer) else {
            continue;
        };
        if let Some(item @ Ok(_)) = items.get_mut(index) {
            number.pointer = rest.to_string();
            *item = Err(json::refused_number_error(number).into());
        }
    }
    Ok(items)
}

/// Splits `/3/a/b` into the item index 3 and the pointer `/a/b` inside it.
pub(crate) fn item_of(pointer: &str) -> Option<(usize, &str)> {
    let rest = pointer.strip_prefix('/')?;
    let (index, inner) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    Some((index.parse().ok()?, inner))
}

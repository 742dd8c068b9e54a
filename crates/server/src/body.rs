//! Reading request bodies under a byte limit and parsing them strictly, so every bad body
//! becomes a clear JSON error before anything is written.

use axum::body::{Body, Bytes};
use axum::http::header::CONTENT_LENGTH;
use axum::http::HeaderMap;
use http_body_util::BodyExt;
use serde_json::Value;
use traqlyte_identity::json;

use crate::ApiError;

/// Reads the whole body, refusing (413) one larger than `limit_bytes`; a declared
/// `Content-Length` over the limit is refused without keeping any of it.
pub async fn read_limited(
    headers: &HeaderMap,
    body: Body,
    limit_bytes: usize,
) -> Result<Bytes, ApiError> {
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit_bytes as u64) {
        if !expects_continue(headers) {
            drain(body, limit_bytes).await;
        }
        return Err(ApiError::too_large(limit_bytes));
    }
    let mut body = body;
    let mut kept = Vec::new();
    while let Some(frame) = body.frame().await {
        // A failed read is answered as the framework's own limit did: 413.
        let frame = frame.map_err(|_| ApiError::too_large(limit_bytes))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if kept.len() + data.len() > limit_bytes {
            drain(body, limit_bytes).await;
            return Err(ApiError::too_large(limit_bytes));
        }
        kept.extend_from_slice(&data);
    }
    Ok(Bytes::from(kept))
}

/// Reads and discards what is left of a refused body, at most `drain_bytes_max(limit)`.
/// A client still sending when the server closes the connection gets a reset instead of
/// the 413 it should read; past the bound the connection is closed anyway, so a refused
/// body costs at most the bound in bytes read and nothing in memory (nothing is kept).
async fn drain(mut body: Body, limit_bytes: usize) {
    let bound = drain_bytes_max(limit_bytes);
    let mut drained = 0usize;
    while let Some(Ok(frame)) = body.frame().await {
        drained += frame.data_ref().map_or(0, |data| data.len());
        if drained > bound {
            return;
        }
    }
}

/// A client that sent `Expect: 100-continue` waits for the answer before sending the
/// body: reading it would invite the body we are about to refuse.
fn expects_continue(headers: &HeaderMap) -> bool {
    headers
        .get(axum::http::header::EXPECT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
}

/// How much of a refused body is read and discarded: twice the limit plus 1 MiB.
fn drain_bytes_max(limit_bytes: usize) -> usize {
    limit_bytes.saturating_mul(2).saturating_add(1024 * 1024)
}

/// Reads and parses a JSON body: valid UTF-8, nesting within `depth_max`, no duplicate
/// keys, no NaN/Infinity.
pub async fn read_json(
    headers: &HeaderMap,
    body: Body,
    limit_bytes: usize,
    depth_max: usize,
) -> Result<Value, ApiError> {
    let bytes = read_limited(headers, body, limit_bytes).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
            "empty_body",
            "request body is empty; send a JSON document",
        ));
    }
    Ok(json::parse(&bytes, depth_max)?)
}

//! Reading request bodies under a byte limit and parsing them strictly, so every bad body
//! becomes a clear JSON error before anything is written.

use axum::body::{to_bytes, Body, Bytes};
use axum::http::header::CONTENT_LENGTH;
use axum::http::HeaderMap;
use serde_json::Value;
use traqlyte_identity::json;

use crate::ApiError;

/// Reads the whole body, refusing (413) one larger than `limit_bytes`; a declared
/// `Content-Length` over the limit is refused before reading.
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
        return Err(ApiError::too_large(limit_bytes));
    }
    to_bytes(body, limit_bytes)
        .await
        .map_err(|_| ApiError::too_large(limit_bytes))
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

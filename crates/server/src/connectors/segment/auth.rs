//! The write key of a `/v1/*` request: HTTP Basic with the key as user name and an
//! empty password (what Segment's libraries send), or `writeKey` in the body. Another
//! `Authorization` scheme (the OAuth `Bearer` token analytics-python and analytics-node
//! send when configured for Segment's OAuth, beside `writeKey` in the body) is not read:
//! the body's key is. Looked up
//! in the store on every request, never cached, so a revoked key is refused at once by
//! every process.

use axum::http::header::AUTHORIZATION;
use axum::http::HeaderMap;
use serde_json::Value;
use traqlyte_store::{Source, WriteKey};

use crate::{ApiError, AppState};

/// The source of the request's write key, or `401`.
pub(crate) async fn source(
    state: &AppState,
    headers: &HeaderMap,
    body: Option<&Value>,
) -> Result<Source, ApiError> {
    let text = match header_key(headers)? {
        Some(text) => text,
        None => body
            .and_then(|b| b.get("writeKey"))
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| {
                ApiError::unauthorized(
                    "missing write key: send HTTP Basic auth with the write key as user name and an empty password, or writeKey in the body (an Authorization header of another scheme is not read)",
                )
            })?,
    };
    let key = WriteKey::parse(text.trim()).ok_or_else(unknown)?;
    state
        .store
        .source_for_write_key(&key)
        .await?
        .ok_or_else(unknown)
}

/// True when the request carries a Basic `Authorization` header (checked before the body
/// is read, so a bad key is refused without reading it).
pub(crate) fn has_header(headers: &HeaderMap) -> bool {
    basic_credentials(headers).is_some()
}

/// The credentials of a Basic `Authorization` header (the scheme is case-insensitive,
/// RFC 9110); `None` without the header or with another scheme.
fn basic_credentials(headers: &HeaderMap) -> Option<&[u8]> {
    let value = headers.get(AUTHORIZATION)?.as_bytes();
    let scheme = value.get(..6)?;
    scheme.eq_ignore_ascii_case(b"basic ").then(|| &value[6..])
}

fn unknown() -> ApiError {
    ApiError::unauthorized("unknown or revoked write key")
}

/// The write key of a Basic `Authorization` header, when it holds one (unchecked).
pub(crate) fn presented_write_key(headers: &HeaderMap) -> Option<String> {
    header_key(headers).ok().flatten()
}

/// The user name of a Basic `Authorization` header; `None` without one.
fn header_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    crate::auth::one_authorization(headers)?;
    let Some(encoded) = basic_credentials(headers) else {
        return Ok(None);
    };
    let malformed = || ApiError::unauthorized("Authorization must be `Basic base64(writeKey:)`");
    let encoded = std::str::from_utf8(encoded).map_err(|_| malformed())?;
    let decoded = decode_base64(encoded.trim()).ok_or_else(malformed)?;
    let decoded = String::from_utf8(decoded).map_err(|_| malformed())?;
    let user = decoded
        .split_once(':')
        .map_or(decoded.as_str(), |(user, _)| user);
    Ok(Some(user.to_string()))
}

/// Standard base64 (RFC 4648, padding optional). Twenty lines instead of a dependency.
fn decode_base64(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let digits = text.trim_end_matches('=').as_bytes();
    if digits.len() % 4 == 1 || text.len() > 1024 {
        return None;
    }
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= value(c)? << (18 - 6 * i);
        }
        let bytes = acc.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::decode_base64;

    #[test]
    fn base64_decodes_as_rfc_4648_says() {
        let cases = [
            ("", ""),
            ("Zg==", "f"),
            ("Zm8=", "fo"),
            ("Zm9v", "foo"),
            ("Zm9vYg", "foob"),
            ("dGx3X2FiYzo=", "tlw_abc:"),
        ];
        for (encoded, plain) in cases {
            assert_eq!(
                decode_base64(encoded).as_deref(),
                Some(plain.as_bytes()),
                "{encoded}"
            );
        }
        assert_eq!(decode_base64("Z"), None);
        assert_eq!(decode_base64("Zm9v!"), None);
    }
}

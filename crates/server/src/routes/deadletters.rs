//! `GET /deadletters`: the messages a broker consumer could not store, newest first.

use axum::extract::{Query, State};
use axum::Json;
use base64::Engine;
use serde::{Deserialize, Serialize};
use traqlyte_identity::format_rfc3339_micros;
use traqlyte_store::{DeadLetter, DeadLetterCursor};
use utoipa::{IntoParams, ToSchema};

use crate::auth::Tenant;
use crate::{ApiError, AppState};

/// Dead letters in one page when `limit` is not given (the 100 newest it always
/// answered), and at most (the store reads at most its own, larger cap). A page also
/// stops at the store's byte budget ([`traqlyte_store::DEAD_LETTERS_PAGE_BYTES_MAX`] of
/// raw bytes, at least one letter): each letter is answered twice, base64 and text, and
/// the text escapes each control byte in 6, so 100 letters of 1 MiB could have made an
/// answer of about 730 MB.
const DEAD_LETTERS_PAGE_DEFAULT: u32 = 100;
const DEAD_LETTERS_PAGE_MAX: u32 = 100;

/// One dead letter as answered.
#[derive(Serialize, ToSchema)]
pub(crate) struct DeadLetterView {
    /// Why it could not be stored, for people.
    detail: String,
    /// The message's bytes exactly as received, in standard base64.
    raw_base64: String,
    /// The same bytes as text, when they are valid UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    raw_text: Option<String>,
    /// A stable code: `invalid_json`, `unknown_contract`, `unsupported_subject`, `invalid_contract_version`, `segment_source_not_configured`, `source_revoked`, `outside_horizon`,
    /// or the code the HTTP API answers for the same body (`missing_required_field`, …).
    reason: String,
    /// When it was recorded (RFC 3339).
    received_at: String,
    /// When the broker received it (RFC 3339, to the nanosecond; JetStream's own time of
    /// the message, the same on every redelivery). Absent for letters recorded before it
    /// was kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    published_at: Option<String>,
    /// The broker stream it came from.
    stream: String,
    /// Its sequence in that stream.
    stream_sequence: i64,
    /// The subject it was published on.
    subject: String,
}

/// The answer of `GET /deadletters`.
#[derive(Serialize, ToSchema)]
pub(crate) struct DeadLetterList {
    /// Newest first (by time recorded, then stream, then newest in the stream), a page
    /// of at most `limit`, fewer when their raw bytes reach 4 MiB (at least one).
    dead_letters: Vec<DeadLetterView>,
    /// Pass as `cursor` for the next page; absent on the last one.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
}

/// The query of `GET /deadletters`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct DeadLettersQuery {
    /// The previous page's `next_cursor`.
    cursor: Option<String>,
    /// Dead letters per page (1–100, default 100).
    #[param(minimum = 1, maximum = 100)] // DEAD_LETTERS_PAGE_MAX
    limit: Option<u32>,
}

/// The `next_cursor` of a page ending at `letter`:
/// `{received_at_us}.{stream_sequence}.{published_ns}.{stream}`, the stream last so any
/// name reads back whole.
fn cursor_of(letter: &DeadLetter) -> String {
    format!(
        "{}.{}.{}.{}",
        letter.received_at_us, letter.stream_sequence, letter.published_ns, letter.stream
    )
}

/// A cursor [`cursor_of`] wrote, or `None`.
fn parse_cursor(text: &str) -> Option<DeadLetterCursor> {
    let mut parts = text.splitn(4, '.');
    let received_at_us = parts.next()?.parse().ok()?;
    let stream_sequence = parts.next()?.parse().ok()?;
    let published_ns = parts.next()?.parse().ok()?;
    let stream = parts.next()?.to_string();
    Some(DeadLetterCursor {
        received_at_us,
        stream,
        stream_sequence,
        published_ns,
    })
}

impl DeadLetterView {
    fn of(letter: DeadLetter) -> DeadLetterView {
        DeadLetterView {
            raw_base64: base64::engine::general_purpose::STANDARD.encode(&letter.raw),
            raw_text: String::from_utf8(letter.raw).ok(),
            detail: letter.detail,
            published_at: (letter.published_ns != 0)
                .then(|| format_rfc3339_nanos(letter.published_ns)),
            reason: letter.reason,
            received_at: format_rfc3339_micros(letter.received_at_us),
            stream: letter.stream,
            stream_sequence: letter.stream_sequence,
            subject: letter.subject,
        }
    }
}

/// `ns` nanoseconds since the epoch as RFC 3339 in UTC, with all nine digits.
fn format_rfc3339_nanos(ns: i64) -> String {
    let micros = format_rfc3339_micros(ns.div_euclid(1_000));
    let extra = ns.rem_euclid(1_000);
    // `…SS.ffffffZ` → `…SS.ffffffnnnZ`.
    match micros.strip_suffix('Z') {
        Some(head) => format!("{head}{extra:03}Z"),
        None => micros,
    }
}

/// `GET /deadletters`: the tenant's dead letters, newest first, a page of at most
/// `limit` at a time.
#[utoipa::path(get, path = "/deadletters", tag = "connectors", security(("api_key" = [])),
    params(DeadLettersQuery),
    responses((status = 200, body = DeadLetterList), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn list(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Query(query): Query<DeadLettersQuery>,
) -> Result<Json<DeadLetterList>, ApiError> {
    let limit = crate::error::page_limit(
        query.limit,
        DEAD_LETTERS_PAGE_DEFAULT,
        DEAD_LETTERS_PAGE_MAX,
    )?;
    let before = crate::error::page_cursor(query.cursor.as_deref(), parse_cursor)?;
    let (letters, more) = state
        .store
        .dead_letters(&tenant, before.as_ref(), limit)
        .await?;
    let next_cursor = crate::error::next_cursor(more, &letters, cursor_of);
    let dead_letters = letters.into_iter().map(DeadLetterView::of).collect();
    Ok(Json(DeadLetterList {
        dead_letters,
        next_cursor,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cursor reads back as the letter it was written from, whatever the stream's name
    /// holds; one the route never wrote is `None`.
    #[test]
    fn cursors_round_trip_and_garbage_is_refused() {
        for stream in ["EVENTS", "a.b.c", ""] {
            let letter = DeadLetter {
                stream: stream.to_string(),
                stream_sequence: 42,
                published_ns: 1_700_000_000_123_456_789,
                subject: "s".to_string(),
                reason: "invalid_json".to_string(),
                detail: String::new(),
                raw: Vec::new(),
                received_at_us: 1_700_000_000_000_001,
            };
            let cursor = parse_cursor(&cursor_of(&letter));
            assert_eq!(
                cursor,
                Some(DeadLetterCursor {
                    received_at_us: letter.received_at_us,
                    stream: stream.to_string(),
                    stream_sequence: 42,
                    published_ns: letter.published_ns,
                })
            );
        }
        for garbage in ["", "x", "1.2", "1.2.3", "1.x.3.S", "1.2.3x.S"] {
            assert_eq!(parse_cursor(garbage), None, "{garbage:?}");
        }
    }
}

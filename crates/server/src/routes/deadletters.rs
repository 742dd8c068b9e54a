//! `GET /deadletters`: the messages a broker consumer could not store, newest first.

use axum::extract::State;
use axum::Json;
use base64::Engine;
use serde::Serialize;
use traqlyte_identity::format_rfc3339_micros;
use traqlyte_store::DeadLetter;
use utoipa::ToSchema;

use crate::auth::Tenant;
use crate::{ApiError, AppState};

/// Dead letters one answer lists.
const DEAD_LETTERS_LISTED_MAX: u32 = 100;

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
    /// Newest first, at most 100.
    dead_letters: Vec<DeadLetterView>,
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

/// `GET /deadletters`: the tenant's latest dead letters, newest first.
#[utoipa::path(get, path = "/deadletters", tag = "connectors", security(("api_key" = [])),
    responses((status = 200, body = DeadLetterList), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn list(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
) -> Result<Json<DeadLetterList>, ApiError> {
    let letters = state
        .store
        .dead_letters(&tenant, DEAD_LETTERS_LISTED_MAX)
        .await?;
    let dead_letters = letters.into_iter().map(DeadLetterView::of).collect();
    Ok(Json(DeadLetterList { dead_letters }))
}

//! The one rule for client text the store keeps in a `text` column: it may not contain
//! U+0000 (NUL).
//!
//! PostgreSQL's `text` cannot hold NUL: a statement binding one fails, which a client saw
//! as a 500, and since clients retry 5xx (and a 5xx releases the idempotency key) such a
//! request looped forever. SQLite stores NUL, so the two backends disagreed. Refusing NUL
//! at the edge with a 4xx that names the field makes both answer the same, before any
//! store query runs (a lookup binding a NUL fails on PostgreSQL just like a write).
//!
//! Two entry points: [`find_nul`] for JSON bodies whose strings are stored as text
//! (campaigns, publish notes, assignments, outcomes, supersession reasons), answered with
//! each route's own error code; and the [`reject_nul_parameters`] middleware for path
//! segments and query values (after percent-decoding, so `%00` counts), which applies to
//! every route, present and future. Event payloads are exempt on purpose: they are stored
//! as serialised JSON, where NUL is the six-character escape `\u0000`, which both
//! backends store unchanged.

use axum::extract::{FromRequestParts, Query, RawPathParams, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::ApiError;

/// The rule, as error messages state it.
pub(crate) const NUL_RULE: &str = "text may not contain the NUL character (U+0000)";

/// The first place in `value` where a string or an object key contains NUL, spelled like
/// the API's field names (`name`, `arms[0].key`, `[2]` for an array item at the top).
/// `None` when the document has none.
pub(crate) fn find_nul(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => text.contains('\0').then(String::new),
        Value::Array(items) => items.iter().enumerate().find_map(|(index, item)| {
            find_nul(item).map(|rest| join(&format!("[{index}]"), &rest))
        }),
        Value::Object(map) => map.iter().find_map(|(key, item)| {
            if key.contains('\0') {
                return Some(key.clone());
            }
            find_nul(item).map(|rest| join(key, &rest))
        }),
        Value::Null | Value::Bool(_) | Value::Number(_) => None,
    }
}

/// `key` followed by the path below it (`arms` + `[0].key`, `arms` + `` → `arms`).
fn join(head: &str, rest: &str) -> String {
    if rest.is_empty() || rest.starts_with('[') {
        format!("{head}{rest}")
    } else {
        format!("{head}.{rest}")
    }
}

/// Middleware (applied to every route, after routing so path parameters have names):
/// a path segment or a query parameter (name or value) that holds NUL once
/// percent-decoded is answered `400 invalid_parameter` naming the parameter, as JSON for
/// the API and as an HTML page for the web UI.
pub(crate) async fn reject_nul_parameters(request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let Some(parameter) = nul_parameter(&mut parts).await else {
        return next.run(Request::from_parts(parts, body)).await;
    };
    tracing::debug!(path = %parts.uri.path(), parameter = %parameter.escape_debug(), "NUL in a parameter refused");
    let err = ApiError::new(
        StatusCode::BAD_REQUEST,
        "invalid_parameter",
        format!("parameter {parameter:?} is invalid: {NUL_RULE}"),
    )
    .with_field(parameter);
    let path = parts.uri.path();
    if path == "/ui" || path.starts_with("/ui/") {
        crate::ui::error_response(err)
    } else {
        err.into_response()
    }
}

/// The name of the first path or query parameter holding NUL. Parameters that cannot be
/// read at all (invalid UTF-8, a malformed query) are left to the handler's extractors,
/// which already answer those with a 400.
async fn nul_parameter(parts: &mut Parts) -> Option<String> {
    if let Ok(params) = RawPathParams::from_request_parts(parts, &()).await {
        if let Some((name, _)) = params.iter().find(|(_, value)| value.contains('\0')) {
            return Some(name.to_string());
        }
    }
    let Ok(Query(pairs)) = Query::<Vec<(String, String)>>::try_from_uri(&parts.uri) else {
        return None;
    };
    pairs
        .into_iter()
        .find(|(name, value)| name.contains('\0') || value.contains('\0'))
        .map(|(name, _)| name)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::find_nul;

    #[test]
    fn nul_is_found_where_the_api_names_fields() {
        let cases = [
            (json!({"name": "ok", "note": null}), None),
            (json!({"name": "a\u{0}b"}), Some("name")),
            (
                json!({"arms": [{"key": "a"}, {"key": "\u{0}"}]}),
                Some("arms[1].key"),
            ),
            (json!({"a\u{0}": 1}), Some("a\u{0}")),
            (json!([1, {"x": ["", "\u{0}"]}]), Some("[1].x[1]")),
            (json!("\u{0}"), Some("")),
            (json!({"text": "\\u0000 spelled out is fine"}), None),
        ];
        for (value, expected) in cases {
            assert_eq!(find_nul(&value).as_deref(), expected, "{value}");
        }
    }
}

//! The one rule for client text the store keeps in a `text` column: it may not contain
//! U+0000 (NUL).
//!
//! PostgreSQL's `text` cannot hold NUL: a statement binding one fails, which a client saw
//! as a 500, and since clients retry 5xx (and a 5xx releases the idempotency key) such a
//! request looped forever. SQLite stores NUL, so the two backends disagreed. Refusing NUL
//! at the edge with a 4xx that names the field makes both answer the same, before any
//! store query runs (a lookup binding a NUL fails on PostgreSQL just like a write).
//!
//! Two places enforce it. In JSON bodies whose strings are stored as text (campaigns,
//! publish notes, assignments, outcomes, supersession reasons, tenant names) every string
//! field is a newtype that refuses NUL in its constructor (`traqlyte_experiments`'
//! values, `body::typed::Id`, the supersession `Reason`), and every body refuses unknown
//! fields, so no string reaches the store unchecked; the refusal is each route's own
//! error code naming the field. For path segments and query values (after
//! percent-decoding, so `%00` counts) the [`reject_nul_parameters`] middleware applies to
//! every route, present and future. Event payloads are exempt on purpose: they are stored
//! as serialised JSON, where NUL is the six-character escape `\u0000`, which both
//! backends store unchanged.

use axum::extract::{FromRequestParts, Query, RawPathParams, Request};
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
// The rule as error messages state it: the same words the body newtypes use.
use traqlyte_experiments::NUL_RULE;

use crate::ApiError;

/// Middleware (applied to every route, after routing so path parameters have names):
/// a path segment or a query parameter (name or value) that holds NUL once
/// percent-decoded is answered `400 invalid_parameter` naming the parameter, as JSON for
/// the API and as an HTML page for the web UI.
///
/// A query parameter whose name or value is not UTF-8 once percent-decoded
/// (`?node=dataset:db:%FF`) is refused the same way: the query extractor reads it with
/// U+FFFD in place of the bytes, so the request ran on another name than the one sent.
pub(crate) async fn reject_nul_parameters(request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let err = if let Some(parameter) = parts.uri.query().and_then(non_utf8_query_parameter) {
        ApiError::invalid_parameter(
            parameter.clone(),
            format!("query parameter {parameter:?} is not valid UTF-8 once percent-decoded"),
        )
    } else if let Some(parameter) = nul_parameter(&mut parts).await {
        ApiError::invalid_parameter(
            parameter.clone(),
            format!("parameter {parameter:?} is invalid: {NUL_RULE}"),
        )
    } else {
        return next.run(Request::from_parts(parts, body)).await;
    };
    tracing::debug!(path = %super::loggable_path(parts.uri.path()), reason = %err.message().escape_debug(), "a parameter refused");
    let path = parts.uri.path();
    if path == "/ui" || path.starts_with("/ui/") {
        crate::ui::error_response(err)
    } else {
        err.into_response()
    }
}

/// The name (as far as it is UTF-8) of the first pair of `query` whose name or value is
/// not UTF-8 once percent-decoded (`+` is a space, as in a form: replaced before the
/// escapes are decoded, so that `%2B` stays a `+`).
fn non_utf8_query_parameter(query: &str) -> Option<String> {
    let decoded = |text: &str| super::percent_decoded_bytes(&text.replace('+', " "));
    query.split('&').find_map(|pair| {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let name = decoded(name);
        let broken =
            std::str::from_utf8(&name).is_err() || std::str::from_utf8(&decoded(value)).is_err();
        broken.then(|| String::from_utf8_lossy(&name).into_owned())
    })
}

/// The name of the first path or query parameter holding NUL. A path parameter that is
/// not UTF-8 is left to the handler's extractors, which answer it with a 400 (a query
/// parameter that is not was refused before, [`non_utf8_query_parameter`]).
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

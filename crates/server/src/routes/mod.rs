//! The route table and the cross-cutting middleware: JSON for every error, and logging
//! of errors with their causes.

pub(crate) mod admin;
pub(crate) mod campaigns;
mod ceiling;
pub(crate) mod contracts;
pub(crate) mod deadletters;
pub(crate) mod events;
pub(crate) mod health;
pub(crate) mod lineage;
pub(crate) mod semantic;
pub(crate) mod supersessions;
pub(crate) mod text;

use axum::body::to_bytes;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::header::{
    ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_EXPOSE_HEADERS, CONTENT_TYPE, RETRY_AFTER,
};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::Router;
use std::time::Duration;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

use crate::error::InternalCause;
use crate::{ApiError, AppState};

pub(crate) fn router(state: AppState) -> Router {
    // Mutating JSON routes get transport idempotency; ingestion does not (it dedupes by content).
    let idempotent = |handler: MethodRouter<AppState>| {
        handler.route_layer(middleware::from_fn_with_state(
            state.clone(),
            crate::idempotency::layer,
        ))
    };
    let mut routes = Router::new();
    if state.config.bench_ceiling_route {
        // Not described in the OpenAPI document: it exists only in benchmark servers.
        routes = routes.route("/bench/ceiling", post(ceiling::ceiling));
    }
    routes
        .route("/openapi.json", get(crate::openapi::serve))
        .route("/healthz", get(health::healthz))
        .route("/livez", get(health::livez))
        .route("/stats", get(health::stats))
        .route(
            "/contracts",
            idempotent(post(contracts::register)).get(contracts::list),
        )
        .route("/campaigns", idempotent(post(campaigns::create)))
        .route("/campaigns/{id}", get(campaigns::show))
        .route("/campaigns/{id}/versions", get(campaigns::versions))
        .route(
            "/campaigns/{id}/publish",
            idempotent(post(campaigns::publish)),
        )
        .route(
            "/campaigns/{id}/report",
            get(crate::experiments::report::get_report),
        )
        .route("/assignments", idempotent(post(crate::experiments::assign)))
        .route(
            "/assignments/batch",
            post(crate::experiments::post_assignments_batch),
        )
        .route("/outcome", post(crate::experiments::post_outcome))
        .route(
            "/outcomes/batch",
            post(crate::experiments::post_outcomes_batch),
        )
        .route(
            "/outcomes/{outcome_id}",
            get(crate::experiments::corrections::get_outcome),
        )
        .route(
            "/outcomes/{outcome_id}/supersessions",
            idempotent(post(crate::experiments::corrections::supersede_outcome)),
        )
        .route("/deadletters", get(deadletters::list))
        .route("/ops/semantic-duplicates", get(semantic::list))
        .route("/contracts/{name}", get(contracts::show))
        .route("/contracts/{name}/collisions", get(contracts::collisions))
        .route("/events/{contract}", post(events::post_one))
        .route("/events/{contract}/batch", post(events::post_batch))
        .route("/events/{contract}/{event_id}", get(events::get_one))
        .route(
            "/events/{contract}/{event_id}/supersessions",
            idempotent(post(supersessions::supersede)),
        )
        .merge(crate::ui::router())
        .merge(admin::router(state.clone()))
        .route(LINEAGE_PATH, post(lineage::post_event).get(lineage::graph))
        .route("/lineage/ancestors", get(lineage::ancestors))
        .route("/lineage/descendants", get(lineage::descendants))
        .route("/lineage/stats", get(lineage::stats))
        .merge(segment_routes())
        .merge(ops_routes())
        // Room for the body before anything reads it (inside the timeout, so a wait for
        // room counts against the request's time). A route layer: a request no route
        // takes is answered `404` without room.
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            crate::body::take_room,
        ))
        // Only routed requests are timed, by their route template (bounded labels); the
        // room wait included, so a `503 server_busy` is in the histogram too.
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            crate::metrics::track_latency,
        ))
        // Below the route layers: neither room nor timing. A route with a body must be
        // added above them, or its body is parsed without room.
        .route("/metrics", get(crate::metrics::scrape))
        .fallback(not_found)
        // First layer: it runs after routing (so path parameters have their names) and
        // before any handler or extractor binds a parameter to a query.
        .layer(middleware::from_fn(text::reject_nul_parameters))
        .layer(middleware::from_fn(framing_checked))
        // Handlers read bodies themselves under per-route limits (see `body`).
        .layer(DefaultBodyLimit::disable())
        // Inside the JSON-error rewrite, so a timeout is answered `{"error":{…}}` too.
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            Duration::from_millis(state.config.request_timeout_ms.max(1)),
        ))
        // Where the timeout's clock starts: the latency histogram's starts there too.
        .layer(middleware::from_fn(crate::metrics::stamp_received))
        // A handler that panics (a bug) is answered `500 internal`, its cause logged,
        // instead of the connection dropping with every request pipelined behind it.
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(panicked))
        .layer(middleware::from_fn(json_errors))
        // The span names the path, never the query: `/ui/login?token=…` carries a login
        // link, and a DEBUG log must not hand it to whoever reads the logs. A `5xx` is
        // logged by `json_errors`: at ERROR with its cause when it has one (a bug, the
        // database's failure), at DEBUG when it is a refusal (`503 server_busy`,
        // `store_busy`, a tracking request's timeout); the layer's own failure line, at
        // ERROR for every `5xx`, flooded the log at ERROR under backpressure and doubled
        // the line of every real failure.
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(request_span)
                .on_failure(
                    tower_http::trace::DefaultOnFailure::new().level(tracing::Level::DEBUG),
                ),
        )
        .with_state(state)
}

/// An HTTP/1.1 request without a `Host` header, or with more than one, is `400
/// invalid_host` (field `Host`), as RFC 9112 (section 3.2) requires of a server: it was
/// served, and which host it meant is what `GET /metrics`'s loopback check and a proxy's
/// routing read. HTTP/1.0 has no such rule; HTTP/2 names the host in `:authority`. A
/// transfer coding other than `chunked` is `501 unsupported_transfer_coding` (field
/// `Transfer-Encoding`). The connection is closed after either answer, as after hyper's
/// own `400`s: its framing is in doubt.
async fn framing_checked(request: Request, next: Next) -> Response {
    let hosts = request
        .headers()
        .get_all(axum::http::header::HOST)
        .iter()
        .count();
    let codings: Vec<String> = request
        .headers()
        .get_all(axum::http::header::TRANSFER_ENCODING)
        .iter()
        .flat_map(|value| value.to_str().unwrap_or("?").split(','))
        .map(|coding| coding.trim().to_ascii_lowercase())
        .collect();
    let unknown_coding = codings.iter().find(|coding| *coding != "chunked");
    // A probe is served whatever its head: an old checker sending HTTP/1.1 without a
    // Host would otherwise mark a healthy server down.
    let probe = matches!(request.uri().path(), "/livez" | "/healthz");
    let err = if codings.len() > 1 && unknown_coding.is_none() {
        // RFC 9112, section 6.1: chunked is applied once; twice, a proxy in front may
        // frame the body otherwise than this server.
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "Transfer-Encoding names chunked more than once (RFC 9112, section 6.1: it is applied once)",
        )
        .with_field("Transfer-Encoding")
    } else if let Some(coding) = unknown_coding {
        // hyper reads the chunks and hands on the bytes still in every other coding: a
        // gzip body reached the JSON parser as gzip (RFC 9112, section 6.1: 501).
        ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "unsupported_transfer_coding",
            format!("Transfer-Encoding {coding:?} is not supported: send the body chunked or with Content-Length, and compress it with Content-Encoding: gzip"),
        )
        .with_field("Transfer-Encoding")
    } else if request.version() != axum::http::Version::HTTP_11 || hosts == 1 || probe {
        return next.run(request).await;
    } else {
        let rule = if hosts == 0 {
            "has none"
        } else {
            "has several"
        };
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_host",
            format!("an HTTP/1.1 request carries exactly one Host header (RFC 9112, section 3.2); this one {rule}"),
        )
        .with_field("Host")
    };
    // A framing fault of the connection's client, as hyper's own 400s are: it is closed.
    err.closing_connection().into_response()
}

/// The answer to a handler's panic: an opaque 500 whose cause (the panic's message) is
/// logged by [`json_errors`].
fn panicked(panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let message = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("a panic without a message");
    ApiError::internal(format!("handler panicked: {message}")).into_response()
}

/// axum's refusal of a query string that does not fit its route's parameters
/// (`?version=abc`: "Failed to deserialize query string: version: invalid digit found in
/// string") as the API's own `400 invalid_parameter` naming the parameter.
fn query_refusal(status: StatusCode, message: &str) -> Option<ApiError> {
    if status != StatusCode::BAD_REQUEST {
        return None;
    }
    // A path segment that is not UTF-8 once decoded (`/contracts/%FF`).
    if let Some(name) = backticked_name(message, "Invalid URL: Invalid UTF-8 in `") {
        return Some(ApiError::invalid_parameter(
            name,
            format!("path parameter {name} is not valid UTF-8 once percent-decoded"),
        ));
    }
    let rest = message.strip_prefix("Failed to deserialize query string: ")?;
    // `?version=1&version=2`.
    if let Some(name) = backticked_name(rest, "duplicate field `") {
        return Some(ApiError::invalid_parameter(
            name,
            format!("query parameter {name} is given more than once"),
        ));
    }
    // `?verison=1` where the route takes `version` only; a name that is not one of ours
    // in shape (`?ver-sion=1`, `?=1`) is not echoed.
    if let Some(at) = rest.find("unknown field `") {
        let unknown = &rest[at + "unknown field `".len()..];
        let (name, expected) = unknown.rsplit_once("`, expected ")?;
        let takes = expected.replace('`', "");
        return Some(if is_parameter_name(name) {
            ApiError::invalid_parameter(
                name,
                format!("this route takes no query parameter {name} (it takes {takes})"),
            )
        } else {
            ApiError::invalid_parameter(
                "query",
                format!("this route takes no such query parameter (it takes {takes})"),
            )
        });
    }
    let (field, reason) = rest.split_once(": ")?;
    is_parameter_name(field)
        .then(|| ApiError::invalid_parameter(field, format!("query parameter {field}: {reason}")))
}

/// The parameter name of a message that is `prefix`, the name, then a closing backtick.
fn backticked_name<'a>(message: &'a str, prefix: &str) -> Option<&'a str> {
    message
        .strip_prefix(prefix)
        .and_then(|rest| rest.strip_suffix('`'))
        .filter(|name| is_parameter_name(name))
}

/// Whether a name taken from axum's message is one of our parameters' names (letters,
/// digits, `_`), never client text.
fn is_parameter_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The trace span of one request: its method and path, without the query string.
fn request_span(request: &axum::http::Request<axum::body::Body>) -> tracing::Span {
    tracing::debug_span!(
        "request",
        method = %request.method(),
        path = %loggable_path(request.uri().path()),
        version = ?request.version(),
    )
}

/// Operations: the duplicate trend, the collision log, webhooks.
fn ops_routes() -> Router<AppState> {
    use crate::ops;
    Router::new()
        .route("/ops/duplicates", get(ops::duplicates))
        .route("/ops/collisions", get(ops::collisions))
        .route(
            "/ops/webhooks",
            post(ops::create_webhook).get(ops::list_webhooks),
        )
        .route(
            "/ops/webhooks/{id}",
            axum::routing::delete(ops::delete_webhook),
        )
}

/// The router of the dedicated `--metrics-listen` listener: `GET /metrics` only.
pub(crate) fn metrics_router(state: AppState) -> Router {
    // The probes too: this listener has connections of its own, so a full connection
    // cap on the API's listener (idle keep-alive pools hold slots for their idle
    // timeout) does not fail a liveness probe and get a healthy process restarted.
    Router::new()
        .route("/metrics", get(crate::metrics::scrape_dedicated))
        .route("/livez", get(health::livez))
        .route("/healthz", get(health::healthz))
        .fallback(not_found)
        .layer(middleware::from_fn(json_errors))
        .with_state(state)
}

/// Segment's HTTP Tracking API (write-key auth, no idempotency layer: messages dedupe by
/// content) and the tenant's views of its sources and bindings.
fn segment_routes() -> Router<AppState> {
    use crate::connectors::segment::{self, bindings};
    Router::new()
        .merge(tracking_routes())
        .route("/sources", get(segment::list_sources))
        .route("/sources/{id}/rejections", get(segment::rejections))
        .route(
            "/campaigns/{id}/bindings",
            post(bindings::create).get(bindings::list),
        )
}

/// The tracking routes under every path Segment's libraries post to: the documented
/// `/v1/{type}` and `/v1/batch`, `/v1/import` (the Ruby and classic Android libraries),
/// `/v1/import/` (the Java library) and the short `/v1/t`, `/v1/i`, `/v1/p`, `/v1/s`, `/v1/g`, `/v1/a` and
/// `/v1/b` (the browser library, analytics.js).
///
/// Browsers post to them from any site, so they answer CORS as Segment's API does
/// ([`tracking_cors`]); no other route does.
fn tracking_routes() -> Router<AppState> {
    tracking_table()
        .into_iter()
        .fold(Router::new(), |router, (path, handler)| {
            router.route(path, handler)
        })
        .layer(tracking_cors())
}

/// The paths of [`tracking_routes`], in [`tracking_table`]'s order.
const TRACKING_PATHS: [&str; 16] = [
    "/v1/track",
    "/v1/identify",
    "/v1/page",
    "/v1/screen",
    "/v1/group",
    "/v1/alias",
    "/v1/batch",
    "/v1/import",
    "/v1/import/",
    "/v1/t",
    "/v1/i",
    "/v1/p",
    "/v1/s",
    "/v1/g",
    "/v1/a",
    "/v1/b",
];

/// Each tracking path ([`TRACKING_PATHS`]) and its handler.
fn tracking_table() -> [(&'static str, MethodRouter<AppState>); 16] {
    use crate::connectors::segment;
    let handlers = [
        post(segment::track),
        post(segment::identify),
        post(segment::page),
        post(segment::screen),
        post(segment::group),
        post(segment::alias),
        post(segment::batch),
        post(segment::import),
        post(segment::import_slash),
        post(segment::track_short),
        post(segment::identify_short),
        post(segment::page_short),
        post(segment::screen_short),
        post(segment::group_short),
        post(segment::alias_short),
        post(segment::batch_short),
    ];
    let mut paths = TRACKING_PATHS.into_iter();
    handlers.map(|handler| (paths.next().unwrap_or_default(), handler))
}

/// A tracking route's JSON error with `code` and `message` beside `error` as well: the
/// top-level members Segment's libraries read (analytics-python logs
/// `payload["code"]` and `payload["message"]`, and without them "Unknown error", losing
/// the reason). An answer that is not such an error is returned as it was.
async fn with_segment_error_fields(response: Response) -> Response {
    let (mut parts, body) = response.into_parts();
    // The body is rewritten (or, unreadable, dropped): its length is the new body's.
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    let Ok(bytes) = to_bytes(body, 1 << 20).await else {
        return Response::from_parts(parts, axum::body::Body::empty());
    };
    let mut value: serde_json::Value = match serde_json::from_slice(&bytes) {
        Ok(value) => value,
        Err(_) => return Response::from_parts(parts, axum::body::Body::from(bytes)),
    };
    let fields = value
        .get("error")
        .map(|error| (error.get("code").cloned(), error.get("message").cloned()));
    match (value.as_object_mut(), fields) {
        (Some(object), Some((Some(code), Some(message)))) => {
            object.insert("code".into(), code);
            object.insert("message".into(), message);
        }
        _ => return Response::from_parts(parts, axum::body::Body::from(bytes)),
    }
    Response::from_parts(parts, axum::body::Body::from(value.to_string()))
}

/// `path` for a log line: a segment that holds a whole API key or write key (`DELETE
/// /admin/tenants/{t}/keys/{key}` is refused when it names a whole key, but its path
/// was logged, the key with it) is cut to its first 12 characters, a prefix the key
/// listings show anyway.
pub(crate) fn loggable_path(path: &str) -> std::borrow::Cow<'_, str> {
    const KEEP: usize = 12;
    // Percent-decoded first, as the router decodes it (`tlk%5F…` names a whole key too).
    let secret = |segment: &str| {
        let decoded = percent_decoded(segment);
        (decoded.starts_with("tlk_") || decoded.starts_with("tlw_")) && decoded.len() > KEEP
    };
    if !path.split('/').any(secret) {
        return std::borrow::Cow::Borrowed(path);
    }
    let cut: Vec<String> = path
        .split('/')
        .map(|segment| match segment.get(..KEEP) {
            Some(kept) if secret(segment) => format!("{kept}…"),
            _ => segment.to_string(),
        })
        .collect();
    std::borrow::Cow::Owned(cut.join("/"))
}

/// `segment` with its `%XX` escapes decoded (an escape that is not one stays as written).
fn percent_decoded(segment: &str) -> std::borrow::Cow<'_, str> {
    if !segment.contains('%') {
        return std::borrow::Cow::Borrowed(segment);
    }
    std::borrow::Cow::Owned(String::from_utf8_lossy(&percent_decoded_bytes(segment)).into_owned())
}

/// `text` with its `%XX` escapes decoded, as bytes: a `%` not followed by two hex digits
/// stays as written.
pub(super) fn percent_decoded_bytes(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = |at: usize| bytes.get(at).and_then(|b| char::from(*b).to_digit(16));
        match (bytes[at], hex(at + 1), hex(at + 2)) {
            (b'%', Some(high), Some(low)) => {
                out.extend(u8::try_from(high * 16 + low).ok());
                at += 3;
            }
            (byte, ..) => {
                out.push(byte);
                at += 1;
            }
        }
    }
    out
}

/// The OpenLineage endpoint (`POST` a run event, `GET` Marquez's graph).
const LINEAGE_PATH: &str = "/api/v1/lineage";

/// Whether `path` is one of [`tracking_routes`] (asked only of an error answer).
fn is_tracking_path(path: &str) -> bool {
    TRACKING_PATHS.contains(&path)
}

/// Whether a request timed out is answered `503 request_timeout` (with `Retry-After`)
/// rather than `408`: the tracking routes and a posted run event, whose clients retry a
/// `5xx` only ([`json_errors`]). The latency histogram records the same status.
pub(crate) fn timeout_is_503(method: &Method, path: &str) -> bool {
    is_tracking_path(path) || (*method == Method::POST && path == LINEAGE_PATH)
}

/// CORS of the tracking routes: any origin may post (a write key is public in every page
/// that carries analytics.js, and it can only add messages to its own source), its
/// `Origin` answered back with credentials allowed: `navigator.sendBeacon` always sends
/// in credentials mode `include`, where a browser refuses `*`, so a beacon of JSON type
/// (preflighted) was never sent. These routes read no cookie (the web UI's is limited to
/// `/ui`) and answer nothing but `{"success": true}` or an error, so credentials expose
/// nothing. A preflight (`Content-Type: application/json`, an `Authorization` header) is
/// answered for `POST` with the headers it asks for, and cached a day; `Retry-After` is
/// readable by the page.
fn tracking_cors() -> tower_http::cors::CorsLayer {
    use axum::http::header;
    use tower_http::cors::{AllowHeaders, AllowOrigin, CorsLayer};
    CorsLayer::new()
        .allow_origin(AllowOrigin::mirror_request())
        .allow_credentials(true)
        .allow_methods([Method::POST])
        .allow_headers(AllowHeaders::mirror_request())
        .expose_headers([header::RETRY_AFTER])
        .max_age(Duration::from_secs(86_400))
}

/// The CORS headers [`tracking_cors`] gives, for an answer of a tracking route made
/// outside it (room for the body, a NUL in the query, a timeout): a page must be able
/// to read a `503` and its `Retry-After`. Without an `Origin` (no browser) none is due.
fn add_tracking_cors(origin: Option<&HeaderValue>, headers: &mut axum::http::HeaderMap) {
    let Some(origin) = origin else {
        return;
    };
    headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
    headers.insert(
        axum::http::header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
        HeaderValue::from_static("true"),
    );
    headers.insert(
        ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("retry-after"),
    );
    headers.append(axum::http::header::VARY, HeaderValue::from_static("origin"));
}

async fn not_found(request: Request) -> ApiError {
    let path = request.uri().path();
    let mut message = format!("no route for {} {path}", request.method());
    // A client configured with a base URL ending in `/` asks for `//v1/batch` (or a
    // hand-written URL for `/events/x/`): the routes take neither, and the answer says
    // which path was likely meant.
    let meant = without_extra_slashes(path);
    if meant != path && meant != "/" {
        message.push_str(&format!(
            ": no route has a doubled slash, nor a trailing one but Segment's /v1/import/ (a base URL ending in /?); try {meant}"
        ));
    }
    ApiError::not_found("not_found", message)
}

/// `path` with each run of slashes made one and a trailing slash dropped (`/` stays).
fn without_extra_slashes(path: &str) -> String {
    let parts: Vec<&str> = path.split('/').filter(|part| !part.is_empty()).collect();
    format!("/{}", parts.join("/"))
}

/// Rewrites any error response that is not already our JSON shape (the framework's own
/// 405, 400 and 413 rejections) into `{"error":{…}}`, and logs every error.
async fn json_errors(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    // Read only for the tracking routes' errors (`add_tracking_cors`), all under `/v1/`.
    let origin = path
        .starts_with("/v1/")
        .then(|| request.headers().get(axum::http::header::ORIGIN).cloned())
        .flatten();
    let (request, body_read) = crate::body::tracked(request);
    let mut response = next.run(request).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    // An error answered before the request's body was read to its end (a key refused, a
    // route not found, a malformed header): hyper closes the connection after it, the
    // body's rest being unread. Said so, a keep-alive client sends its next request on a
    // new connection instead of into the closed one ("server disconnected", which
    // clients do not retry for a POST).
    if body_read.is_some_and(|read| !read.load(std::sync::atomic::Ordering::Acquire)) {
        response.headers_mut().insert(
            axum::http::header::CONNECTION,
            HeaderValue::from_static("close"),
        );
    }
    let tracking = is_tracking_path(&path);
    let ui = path == "/ui" || path.starts_with("/ui/");
    let timeout_answers_503 = timeout_is_503(&method, &path);
    if tracking && !response.headers().contains_key(ACCESS_CONTROL_ALLOW_ORIGIN) {
        add_tracking_cors(origin.as_ref(), response.headers_mut());
    }
    if status == StatusCode::UNAUTHORIZED && tracking {
        // The tracking routes take HTTP Basic (the write key as user name), not Bearer.
        response.headers_mut().insert(
            axum::http::header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"traqlyte\""),
        );
    }
    // A refusal told to retry in a moment (`Retry-After`: `store_busy`, `server_busy`,
    // `contract_changing`) is DEBUG, its cause with it: under backpressure they come by
    // the thousand. A failure with a cause of its own (a bug, the database's) is ERROR.
    let path = loggable_path(&path);
    let refusal = response.headers().contains_key(RETRY_AFTER);
    match response.extensions().get::<InternalCause>() {
        Some(InternalCause(cause)) if !refusal => {
            tracing::error!(%method, %path, status = status.as_u16(), error = %cause, "request failed");
        }
        Some(InternalCause(cause)) => {
            tracing::debug!(%method, %path, status = status.as_u16(), error = %cause, "request refused");
        }
        None => tracing::debug!(%method, %path, status = status.as_u16(), "request refused"),
    }
    // JSON errors are the API's; HTML error pages are the web UI's (`ui`).
    let is_ours = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("text/html"));
    if is_ours {
        return if tracking {
            with_segment_error_fields(response).await
        } else if ui {
            as_ui_page(response).await
        } else {
            response
        };
    }
    let (parts, body) = response.into_parts();
    let text = to_bytes(body, 4096)
        .await
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let code = match parts.status {
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::PAYLOAD_TOO_LARGE => "body_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::REQUEST_TIMEOUT => "request_timeout",
        StatusCode::NOT_FOUND => "not_found",
        s if s.is_server_error() => "internal",
        _ => "bad_request",
    };
    let message = match parts.status {
        // The route exists; which methods it takes is the `Allow` header's (axum adds it
        // outside this layer, so it is not known here).
        StatusCode::METHOD_NOT_ALLOWED => {
            format!(
                "{method} is not a method of {path}: its Allow header names the methods it takes"
            )
        }
        _ if text.trim().is_empty() => parts
            .status
            .canonical_reason()
            .unwrap_or("error")
            .to_string(),
        _ => text,
    };
    let mut rewritten = match query_refusal(parts.status, &message) {
        Some(err) => err.into_response(),
        // Segment's libraries drop a batch answered with a 4xx other than 429 (analytics-
        // python, -java, -ruby, -php, Analytics-CSharp), and OpenLineage's clients retry
        // only a 5xx (openlineage-python: 500, 502, 503, 504): a tracking request or a
        // run event the server timed out is answered as the store's contention is, so
        // they retry it (a retry is a duplicate at worst; with group commit off a timed
        // out run event was rolled back, and lost). The CORS layer is inside the timeout:
        // its headers were added above, and are copied below, so a page can read it.
        None if parts.status == StatusCode::REQUEST_TIMEOUT && timeout_answers_503 => {
            let mut response = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "request_timeout",
                format!("{message}: the request took longer than the server's request timeout; nothing of it is acknowledged, send it again"),
            )
            .into_response();
            response
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from_static("1"));
            response
        }
        None => ApiError::new(parts.status, code, message).into_response(),
    };
    if parts.status == StatusCode::REQUEST_TIMEOUT {
        // RFC 9110: a server that times a request out should close the connection (a slow
        // body may still be arriving on it).
        rewritten.headers_mut().insert(
            axum::http::header::CONNECTION,
            HeaderValue::from_static("close"),
        );
    }
    for (name, value) in parts
        .headers
        .iter()
        .filter(|(name, _)| *name != CONTENT_TYPE && *name != axum::http::header::CONTENT_LENGTH)
    {
        rewritten.headers_mut().insert(name, value.clone());
    }
    if tracking {
        with_segment_error_fields(rewritten).await
    } else if ui {
        as_ui_page(rewritten).await
    } else {
        rewritten
    }
}

/// A JSON error answered to a web UI request (an extractor's refusal: a parameter given
/// twice, a form that is not one) as the UI answers errors, an HTML page with the same
/// status and message; its other headers kept. An HTML page is returned as it is.
async fn as_ui_page(response: Response) -> Response {
    let is_json = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let message = to_bytes(body, 64 * 1024)
        .await
        .ok()
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
        .and_then(|error| error["error"]["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| {
            parts
                .status
                .canonical_reason()
                .unwrap_or("error")
                .to_owned()
        });
    let mut page = crate::ui::error_response(ApiError::new(parts.status, "ui_error", message));
    for (name, value) in parts
        .headers
        .iter()
        .filter(|(name, _)| *name != CONTENT_TYPE && *name != axum::http::header::CONTENT_LENGTH)
    {
        page.headers_mut().insert(name, value.clone());
    }
    page.extensions_mut().extend(parts.extensions);
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_slashes_are_taken_out_of_a_path() {
        assert_eq!(without_extra_slashes("//v1/batch"), "/v1/batch");
        assert_eq!(without_extra_slashes("/events/x/"), "/events/x");
        assert_eq!(without_extra_slashes("/a//b///c//"), "/a/b/c");
        assert_eq!(without_extra_slashes("/"), "/");
        assert_eq!(without_extra_slashes("//"), "/");
        // A percent-encoded slash is no slash of the path.
        assert_eq!(without_extra_slashes("/a%2F/"), "/a%2F");
    }

    #[test]
    fn a_whole_key_in_a_path_is_cut_for_the_log() {
        let key = format!("tlk_{}", "a".repeat(48));
        let path = format!("/admin/tenants/acme/keys/{key}");
        assert_eq!(
            loggable_path(&path),
            "/admin/tenants/acme/keys/tlk_aaaaaaaa…"
        );
        assert_eq!(
            loggable_path("/admin/tenants/acme/keys/tlk_abcd"),
            "/admin/tenants/acme/keys/tlk_abcd"
        );
        assert_eq!(
            loggable_path("/events/checkout/abc"),
            "/events/checkout/abc"
        );
        let escaped = format!("/admin/tenants/acme/keys/tlk%5F{}", "a".repeat(48));
        assert_eq!(
            loggable_path(&escaped),
            "/admin/tenants/acme/keys/tlk%5Faaaaaa…"
        );
    }

    #[test]
    fn a_panic_is_an_opaque_500_whose_cause_is_kept_for_the_log() {
        for panic in [
            Box::new("boom") as Box<dyn std::any::Any + Send>,
            Box::new(String::from("boom")),
        ] {
            let response = panicked(panic);
            assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
            let cause = response
                .extensions()
                .get::<crate::error::InternalCause>()
                .map(|c| c.0.clone());
            assert_eq!(cause.as_deref(), Some("handler panicked: boom"));
        }
    }
}

//! The one HTTP error type. Internal causes become an opaque 500 whose cause is logged by
//! the error-logging middleware, never shown to the client.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use traqlyte_identity::json::ParseError;
use traqlyte_identity::{ContractError, IdentityError};
use traqlyte_identity::{EventId, Fingerprint};
use traqlyte_store::StoreError;

/// An error answered as `{"error": ErrorBody}`.
#[derive(Debug, Clone)]
pub struct ApiError {
    status: StatusCode,
    body: ErrorBody,
    cause: Option<String>,
    close_connection: bool,
}

/// The value under `"error"` of every error answer, and of a rejected item in a batch
/// answer. Fields in alphabetical order, as the answers have always had them.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub(crate) struct ErrorBody {
    /// A stable, machine-readable code such as `invalid_campaign`.
    #[schema(value_type = String)]
    code: &'static str,
    /// The field, parameter or JSON path at fault (`arms[1].key`, `nodeId`), when one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    field: Option<String>,
    /// A collision's refused event.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    incoming: Option<Box<EventRef>>,
    /// What went wrong, for people.
    message: String,
    /// A collision's stored event or outcome.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    stored: Option<Box<Stored>>,
}

/// One side of an event collision: the shared id and that side's fingerprint.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub(crate) struct EventRef {
    #[schema(value_type = String)]
    event_id: EventId,
    #[schema(value_type = String)]
    fingerprint: Fingerprint,
}

/// What a collision found stored.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub(crate) enum Stored {
    /// An event collision: the stored event's id and fingerprint.
    Event(EventRef),
    /// An outcome collision: the stored outcome, as `POST /outcome` answers it.
    Outcome(crate::experiments::OutcomeView),
}

/// The internal cause of a 5xx, carried to the logging middleware in response extensions.
#[derive(Debug, Clone)]
pub struct InternalCause(pub String);

impl ApiError {
    /// An error with a status, a stable code and a message for people.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            body: ErrorBody {
                code,
                field: None,
                incoming: None,
                message: message.into(),
                stored: None,
            },
            cause: None,
            close_connection: false,
        }
    }

    /// Names the offending field (a JSON pointer or a parameter name).
    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        let field = field.into();
        // Empty: the request as a whole (a body that is not an object, a nameless query
        // parameter), which no field names; the envelope then has none.
        self.body.field = (!field.is_empty()).then_some(field);
        self
    }

    /// An event collision's two sides: the stored row's and the refused delivery's
    /// fingerprints under their shared id.
    pub(crate) fn with_event_collision(
        mut self,
        event_id: &EventId,
        stored: &Fingerprint,
        incoming: &Fingerprint,
    ) -> Self {
        let side = |fingerprint: &Fingerprint| EventRef {
            event_id: event_id.clone(),
            fingerprint: fingerprint.clone(),
        };
        self.body.stored = Some(Box::new(Stored::Event(side(stored))));
        self.body.incoming = Some(Box::new(side(incoming)));
        self
    }

    /// An outcome collision's stored outcome.
    pub(crate) fn with_stored_outcome(mut self, stored: crate::experiments::OutcomeView) -> Self {
        self.body.stored = Some(Box::new(Stored::Outcome(stored)));
        self
    }

    /// `503 store_busy` (with `Retry-After: 1`): the store refused the work for contention
    /// and wrote nothing.
    fn store_busy(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "store_busy", message)
    }

    /// An opaque 500 whose cause is logged, not sent.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error; the cause is in the server log",
        )
        .with_cause(cause)
    }

    /// The same error with `cause` logged (by the JSON-error layer), never sent.
    fn with_cause(mut self, cause: impl std::fmt::Display) -> Self {
        self.cause = Some(cause.to_string());
        self
    }

    /// The same error with status `to` where its status is `from`: for a route whose
    /// clients expect one status for every invalid body (OpenLineage's 400).
    pub fn with_status_if(mut self, from: StatusCode, to: StatusCode) -> Self {
        if self.status == from {
            self.status = to;
        }
        self
    }

    /// The HTTP status.
    pub fn status_code(&self) -> StatusCode {
        self.status
    }

    /// The stable code.
    pub fn code(&self) -> &'static str {
        self.body.code
    }

    /// The field at fault, if the error names one.
    #[cfg(test)]
    pub(crate) fn field(&self) -> Option<&str> {
        self.body.field.as_deref()
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.body.message
    }

    /// The whole answer body, `{"error": …}`, as JSON bytes (for answers written outside
    /// axum, such as the listener's to a head hyper refused).
    pub(crate) fn envelope_json(&self) -> Vec<u8> {
        let envelope = ErrorEnvelope {
            error: self.body.clone(),
        };
        // Serialising plain strings cannot fail; an empty body would still carry the
        // status.
        serde_json::to_vec(&envelope).unwrap_or_default()
    }

    /// The error object, taken out (for a rejected item of a batch answer).
    pub(crate) fn into_body(self) -> ErrorBody {
        self.body
    }

    /// 401.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// 404.
    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, code, message)
    }

    /// 413 for a body over its limit.
    pub fn too_large(limit_bytes: usize) -> Self {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("request body is larger than the limit of {limit_bytes} bytes"),
        )
    }

    /// Adds `Connection: close`: for refusals that leave unread request bytes on the wire,
    /// which make the connection unusable for another request.
    pub fn closing_connection(mut self) -> Self {
        self.close_connection = true;
        self
    }

    /// 422 for a body that parses but breaks a rule.
    pub fn unprocessable(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
    }

    /// 400 `invalid_parameter` naming the query or path parameter `field`.
    pub fn invalid_parameter(field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_parameter", message).with_field(field)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status;
        let retry_soon = matches!(
            self.body.code,
            "store_busy" | "server_busy" | "contract_changing"
        );
        let mut response = (status, Json(ErrorEnvelope { error: self.body })).into_response();
        if status == StatusCode::UNAUTHORIZED {
            // RFC 9110 requires a challenge with every 401; without one Java's HttpClient
            // (given an authenticator) throws instead of handing the answer over. Bearer
            // never opens a browser's password dialog.
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer realm=\"traqlyte\""),
            );
        }
        if retry_soon {
            // Contention that clears within a moment: say when to retry. (Not a database
            // that does not answer: every client retrying at once would not help it.)
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
        }
        // A 503 closes the connection too: it can be answered before the request's body
        // is read (a batch waits for a connection to check its key first), and hyper then
        // closes the socket anyway; said so, a keep-alive client opens a new connection
        // for its retry instead of sending it into a closed one (ECONNRESET, no
        // Retry-After seen). Under overload, that sheds connections as well.
        if self.close_connection || status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(
                axum::http::header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
        }
        if let Some(cause) = self.cause {
            response.extensions_mut().insert(InternalCause(cause));
        }
        response
    }
}

/// Every error answer: `{"error": ErrorBody}`.
#[derive(Serialize, utoipa::ToSchema, utoipa::ToResponse)]
#[response(
    description = "an error: a stable `code`, a `message` for people, and the `field` at fault when there is one (docs/api.md lists the codes); on `/v1/*` the `code` and `message` are also top-level members, as Segment's libraries read them"
)]
pub(crate) struct ErrorEnvelope {
    error: ErrorBody,
}

impl From<ParseError> for ApiError {
    fn from(err: ParseError) -> Self {
        match &err {
            // The body is JSON; one of its numbers breaks a rule, like an integer beyond
            // 2^53 found by the identity core: the same 422 and field for both.
            ParseError::NumberOutOfRange { field, .. } => {
                ApiError::unprocessable(err.code(), err.to_string()).with_field(field.clone())
            }
            // The place is named: which facet of a large event is too deep, which key of
            // which object is repeated.
            ParseError::TooDeep { pointer, .. } | ParseError::DuplicateKey { pointer, .. }
                if !pointer.is_empty() =>
            {
                ApiError::new(StatusCode::BAD_REQUEST, err.code(), err.to_string())
                    .with_field(pointer.clone())
            }
            // Only a parse given room stops for it, and that one waits for room first.
            ParseError::OutOfRoom { .. } => crate::body::busy(),
            _ => ApiError::new(StatusCode::BAD_REQUEST, err.code(), err.to_string()),
        }
    }
}

impl From<IdentityError> for ApiError {
    fn from(err: IdentityError) -> Self {
        let field = err.field().to_string();
        let api = match err {
            // Keys equal after NFC make the body ambiguous JSON: the parser's 400
            // `duplicate_key`, on every route.
            IdentityError::DuplicateKeyAfterNormalization { .. } => {
                ApiError::new(StatusCode::BAD_REQUEST, err.code(), err.to_string())
            }
            _ => ApiError::unprocessable(err.code(), err.to_string()),
        };
        if field.is_empty() {
            api
        } else {
            api.with_field(field)
        }
    }
}

impl From<ContractError> for ApiError {
    fn from(err: ContractError) -> Self {
        let api = ApiError::unprocessable("invalid_contract", err.message);
        if err.field.is_empty() {
            api
        } else {
            api.with_field(err.field)
        }
    }
}

/// Where a refused contract differs from the registered one, for the conflict's message:
/// the JSON pointers (into the contract document) of the first five changes.
fn definition_differences(registered: &str, refused: &str) -> String {
    let parse = |text: &str| serde_json::from_str::<serde_json::Value>(text).ok();
    let (Some(registered), Some(refused)) = (parse(registered), parse(refused)) else {
        return "the whole document".to_string();
    };
    let (changes, _) = crate::ops::diff::diff(&registered, &refused, &[]);
    let paths: Vec<&str> = changes
        .iter()
        .take(5)
        .map(|change| match change.path.as_str() {
            "" => "the whole document",
            path => path,
        })
        .collect();
    paths.join(", ")
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::ContractConflict {
                ref name,
                version,
                ref registered,
                ref refused,
            } => ApiError::new(
                StatusCode::CONFLICT,
                "contract_conflict",
                format!(
                    "contract {name} version {version} is already registered with a different definition (it differs at {}); contracts are immutable, register a new version",
                    definition_differences(registered, refused)
                ),
            ),
            StoreError::Conflict { code, message } => {
                ApiError::new(StatusCode::CONFLICT, code, message)
            }
            // Only when `partitions maintain` ran with a shorter horizon than the server's
            // check (`routes::events::admit`), which refuses the usual cases per item.
            StoreError::OutsideHorizon => {
                ApiError::unprocessable("outside_horizon", err.to_string())
            }
            // The answer the request timeout gives, stopped by the database instead (a
            // lineage walk's level, a campaign report's read; both read only).
            StoreError::QueryTimeout => ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                "the read ran longer than the request timeout and was stopped in the database too; ask for less (a lineage walk: a smaller depth)",
            ),
            StoreError::Busy => ApiError::store_busy(err.to_string()),
            // Not transient, not ours: the file must be restored. Named, so an operator
            // reading the answers (or a probe's log) knows what to do.
            other if other.is_corrupt_file() => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "database_corrupt",
                "the database file is corrupt; nothing was written. The operator must stop the server and restore a backup (docs/operations.md, Backups)",
            )
            .with_cause(other),
            // An I/O error on SQLite: at a commit (a failed `fsync`) the write may be on
            // disk all the same and seen after a restart, so it is not "nothing written"
            // (a review's publish, retried after such an answer, made two versions).
            other if other.is_sqlite_io_error() => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "database_unavailable",
                "an I/O error stopped the database under this request; a write may or may not have been stored. Events, outcomes, assignments and run events sent again are stored once; resend any other change with the same X-TL-Idempotency-Key, or check whether it took effect first",
            )
            .with_cause(other),
            // Read-only (a failover's demoted primary, a standby), out of disk or memory,
            // an I/O error: the database's condition, not a bug of ours; nothing was
            // written. No `Retry-After`: it clears when an operator or a failover acts.
            other if other.database_refusing_work() => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "database_unavailable",
                "the database refuses work for now (read-only, out of disk or memory, or an I/O error); nothing was written, retry later",
            )
            .with_cause(other),
            // The database is out of reach (restarting, a network cut): a condition the
            // client may retry, not a bug of ours. A write whose connection failed may
            // have committed before its answer was lost: the store absorbs a resent
            // event, outcome, assignment or run event; any other change is repeated by a
            // resend unless it carries an idempotency key.
            other if other.database_unavailable() => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "database_unavailable",
                "the connection to the database failed under this request; a write may or may not have been stored. Events, outcomes, assignments and run events sent again are stored once; resend any other change with the same X-TL-Idempotency-Key, or check whether it took effect first",
            )
            .with_cause(other),
            // Stopped at PostgreSQL's `statement_timeout`: a lock waited for, or a
            // statement slower than the operator allows. Nothing was written; no
            // `Retry-After`, since the same request may meet it every time.
            other if other.statement_timed_out() => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "statement_timeout",
                "the database stopped a statement of this request at its statement_timeout (a lock held by another session, or a statement slower than it allows); nothing was written",
            )
            .with_cause(other),
            other if other.is_busy() => ApiError::store_busy(
                "the database is busy or unreachable (a lock held by another writer, every connection in use, or no connection to be had): the request was not carried out and nothing was written, retry shortly",
            )
            .with_cause(other),
            other => ApiError::internal(other),
        }
    }
}

/// The `limit` of a paged listing: `default` when absent, else 1 to `max`, or
/// `400 invalid_parameter` naming `limit`.
pub(crate) fn page_limit(limit: Option<u32>, default: u32, max: u32) -> Result<u32, ApiError> {
    let limit = limit.unwrap_or(default);
    if (1..=max).contains(&limit) {
        Ok(limit)
    } else {
        Err(ApiError::invalid_parameter(
            "limit",
            format!("limit must be 1–{max}"),
        ))
    }
}

/// The `next_cursor` of a page: `cursor` of its last row when more rows may follow.
pub(crate) fn next_cursor<T>(
    more: bool,
    rows: &[T],
    cursor: impl FnOnce(&T) -> String,
) -> Option<String> {
    rows.last().filter(|_| more).map(cursor)
}

/// The `cursor` of a paged listing read by `parse` (`None` when absent), or
/// `400 invalid_parameter` naming `cursor` for one the API never gave.
pub(crate) fn page_cursor<'a, T>(
    cursor: Option<&'a str>,
    parse: impl FnOnce(&'a str) -> Option<T>,
) -> Result<Option<T>, ApiError> {
    cursor
        .map(|text| parse(text).ok_or_else(foreign_cursor))
        .transpose()
}

/// `400 invalid_parameter` naming `cursor`: a cursor the API never gave (garbage, or of
/// the right shape but naming nothing the listing holds).
pub(crate) fn foreign_cursor() -> ApiError {
    ApiError::invalid_parameter("cursor", "cursor is not one this API gave")
}

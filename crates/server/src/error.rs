//! The one HTTP error type. Internal causes become an opaque 500 whose cause is logged by
//! the error-logging middleware, never shown to the client.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};
use traqlyte_identity::json::ParseError;
use traqlyte_identity::{ContractError, IdentityError};
use traqlyte_store::StoreError;

/// An error answered as `{"error":{"code","message","field"?, …details}}`.
#[derive(Debug, Clone)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    field: Option<String>,
    details: Map<String, Value>,
    cause: Option<String>,
    close_connection: bool,
}

/// The internal cause of a 5xx, carried to the logging middleware in response extensions.
#[derive(Debug, Clone)]
pub struct InternalCause(pub String);

impl ApiError {
    /// An error with a status, a stable code and a message for people.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            field: None,
            details: Map::new(),
            cause: None,
            close_connection: false,
        }
    }

    /// Names the offending field (a JSON pointer or a parameter name).
    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    /// Adds a machine-readable detail to the error object.
    pub fn with_detail(mut self, key: &str, value: Value) -> Self {
        self.details.insert(key.to_string(), value);
        self
    }

    /// An opaque 500 whose cause is logged, not sent.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        let mut err = ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error; the cause is in the server log",
        );
        err.cause = Some(cause.to_string());
        err
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
        self.code
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The error object (the value under `"error"`).
    pub fn body(&self) -> Value {
        let mut error = Map::new();
        error.insert("code".into(), json!(self.code));
        error.insert("message".into(), json!(self.message));
        if let Some(field) = &self.field {
            error.insert("field".into(), json!(field));
        }
        error.extend(self.details.clone());
        Value::Object(error)
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
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status;
        let mut response = (status, Json(json!({ "error": self.body() }))).into_response();
        if self.close_connection {
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

impl From<ParseError> for ApiError {
    fn from(err: ParseError) -> Self {
        match &err {
            // The body is JSON; one of its numbers breaks a rule, like an integer beyond
            // 2^53 found by the identity core: the same 422 and field for both.
            ParseError::NumberOutOfRange { field, .. } => {
                ApiError::unprocessable(err.code(), err.to_string()).with_field(field.clone())
            }
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

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::ContractConflict { .. } => {
                ApiError::new(StatusCode::CONFLICT, "contract_conflict", err.to_string())
            }
            StoreError::Conflict { code, message } => {
                ApiError::new(StatusCode::CONFLICT, code, message)
            }
            // Only when `partitions maintain` ran with a shorter horizon than the server's
            // check (`routes::events::admit`), which refuses the usual cases per item.
            StoreError::OutsideHorizon => {
                ApiError::unprocessable("outside_horizon", err.to_string())
            }
            other => ApiError::internal(other),
        }
    }
}

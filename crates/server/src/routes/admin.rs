//! `/admin/…`: tenants and their API keys over HTTP, for the operator holding the admin
//! token configured at start (`ServerConfig::admin_token`). Without a token the routes
//! answer `404 admin_disabled`: there is nothing a caller could send to be let in, and a
//! 401 would suggest there is.
//!
//! These routes do not go through the transport idempotency layer: it stores each
//! response to replay it, and the creating routes answer a new API key, which must be
//! shown once and never stored in clear. They are safe to retry without it: a retried
//! `POST /admin/tenants` gets `409 tenant_exists` (names are unique), a retried key
//! creation adds a second key (listed, revocable), and revoking twice answers the first
//! revocation. A request carrying an idempotency key is refused, so no client believes
//! it is protected.

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::header::CACHE_CONTROL;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use traqlyte_identity::format_rfc3339_micros;
use traqlyte_store::{ApiKey, ApiKeyInfo, KeyPrefix, KeySelector, TenantName, TenantRecord};
use utoipa::ToSchema;

use crate::body::read_document;
use crate::body::typed::parse;
use crate::{ApiError, AppState};

/// The admin routes, each behind the admin token.
pub(crate) fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/admin/tenants", get(list_tenants).post(create_tenant))
        .route(
            "/admin/tenants/{name}/keys",
            get(list_keys).post(create_key),
        )
        .route("/admin/tenants/{name}/keys/{prefix}", delete(revoke_key))
        .route_layer(middleware::from_fn_with_state(state, require_admin))
}

/// `GET /admin/tenants` → `{"tenants":[…]}` by name.
#[utoipa::path(get, path = "/admin/tenants", tag = "admin", security(("admin_token" = [])),
    responses((status = 200, body = TenantList), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn list_tenants(
    State(state): State<AppState>,
) -> Result<Json<TenantList>, ApiError> {
    let tenants = state.store.tenants().await?;
    Ok(Json(TenantList {
        tenants: tenants.iter().map(tenant_json).collect(),
    }))
}

/// The answer of `GET /admin/tenants`.
#[derive(Serialize, ToSchema)]
pub(crate) struct TenantList {
    /// By name, 10,000 at most.
    tenants: Vec<TenantView>,
}

/// A tenant as the admin routes answer it (fields in alphabetical order: see
/// `health::Health`).
#[derive(Serialize, ToSchema)]
pub(crate) struct TenantView {
    active_keys: i64,
    created_at: String,
    name: String,
    tenant_id: String,
}

/// An API key's listing: never the key itself.
#[derive(Serialize, ToSchema)]
pub(crate) struct KeyView {
    created_at: String,
    /// `tlk_` and 8 hex digits; null for a key made before prefixes were stored.
    prefix: Option<String>,
    revoked_at: Option<String>,
}

/// The answer of `POST /admin/tenants`: the key is shown once.
#[derive(Serialize, ToSchema)]
pub(crate) struct CreatedTenant {
    api_key: String,
    key: KeyView,
    tenant: TenantView,
}

/// The answer of `POST /admin/tenants/{name}/keys`: the key is shown once.
#[derive(Serialize, ToSchema)]
pub(crate) struct CreatedKey {
    api_key: String,
    key: KeyView,
}

/// The answer of `GET /admin/tenants/{name}/keys`.
#[derive(Serialize, ToSchema)]
pub(crate) struct KeyList {
    /// Oldest first, revoked keys too (1,000 newest at most).
    keys: Vec<KeyView>,
    tenant: TenantView,
}

/// The answer of `DELETE /admin/tenants/{name}/keys/{prefix}`.
#[derive(Serialize, ToSchema)]
pub(crate) struct RevokedKey {
    key: KeyView,
}

/// `POST /admin/tenants {"name"}` → 201 with the tenant, its first key's listing and the
/// key itself (`api_key`, shown once).
#[utoipa::path(post, path = "/admin/tenants", tag = "admin", security(("admin_token" = [])),
    request_body = NewTenantBody,
    responses((status = 201, body = CreatedTenant, headers(("Cache-Control" = String, description = "`no-store`"))), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn create_tenant(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let value = read_document(&state, &headers, body).await?;
    let name = parse_new_tenant(&value)?;
    let (tenant_id, key) = state.store.create_tenant(&name).await?;
    tracing::info!(tenant = %tenant_id, name = %name, "tenant created by admin");
    let tenant = state
        .store
        .tenant_by_name(&TenantName::parse(tenant_id.as_str()).map_err(ApiError::internal)?)
        .await?
        .ok_or_else(|| ApiError::internal("a tenant just created cannot be read back"))?;
    let body = CreatedTenant {
        api_key: key.expose().to_string(),
        key: key_json(&first_key_info(&key, tenant.created_at_us)),
        tenant: tenant_json(&tenant),
    };
    Ok(secret_created(body))
}

/// `GET /admin/tenants/{name}/keys` → the tenant and its keys by prefix, oldest first.
#[utoipa::path(get, path = "/admin/tenants/{name}/keys", tag = "admin", security(("admin_token" = [])),
    params(("name" = String, Path, description = "the tenant's name or id")),
    responses((status = 200, body = KeyList), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn list_keys(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<KeyList>, ApiError> {
    let tenant = find_tenant(&state, &name).await?;
    let keys = state.store.api_keys(&tenant.tenant_id).await?;
    Ok(Json(KeyList {
        keys: keys.iter().map(key_json).collect(),
        tenant: tenant_json(&tenant),
    }))
}

/// `POST /admin/tenants/{name}/keys` → 201 with the new key's listing and the key itself
/// (`api_key`, shown once). The body, if any, is ignored.
#[utoipa::path(post, path = "/admin/tenants/{name}/keys", tag = "admin", security(("admin_token" = [])),
    params(("name" = String, Path, description = "the tenant's name or id")),
    responses((status = 201, body = CreatedKey, headers(("Cache-Control" = String, description = "`no-store`"))), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn create_key(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let tenant = find_tenant(&state, &name).await?;
    let (key, info) = state.store.create_api_key(&tenant.tenant_id).await?;
    tracing::info!(tenant = %tenant.tenant_id, prefix = %prefix_text(&info), "key created by admin");
    Ok(secret_created(CreatedKey {
        api_key: key.expose().to_string(),
        key: key_json(&info),
    }))
}

/// `DELETE /admin/tenants/{name}/keys/{prefix}` → 200 with the revoked key's listing.
/// Only a prefix is accepted: a key never travels in a URL.
#[utoipa::path(delete, path = "/admin/tenants/{name}/keys/{prefix}", tag = "admin", security(("admin_token" = [])),
    params(("name" = String, Path, description = "the tenant's name or id"),
        ("prefix" = String, Path, description = "the key's prefix, `tlk_1a2b3c4d` or `1a2b3c4d`; never a whole key")),
    responses((status = 200, body = RevokedKey, description = "revoked now, or already"), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn revoke_key(
    State(state): State<AppState>,
    Path((name, prefix)): Path<(String, String)>,
) -> Result<Json<RevokedKey>, ApiError> {
    let Some(prefix) = KeyPrefix::parse(&prefix) else {
        let message = if ApiKey::parse(&prefix).is_some() {
            "this is a whole API key: name it by its prefix (tlk_ and 8 hex digits), never put a key in a URL; consider that key exposed"
        } else {
            "a key prefix is tlk_ and 8 hex digits, as GET /admin/tenants/{name}/keys lists it"
        };
        return Err(
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_key_prefix", message)
                .with_field("prefix"),
        );
    };
    let tenant = find_tenant(&state, &name).await?;
    let revoked = state
        .store
        .revoke_api_key(&tenant.tenant_id, &KeySelector::Prefix(prefix.clone()))
        .await?
        .ok_or_else(|| {
            ApiError::not_found(
                "key_not_found",
                format!("tenant {:?} has no key {prefix}", tenant.name),
            )
        })?;
    tracing::info!(tenant = %tenant.tenant_id, prefix = %prefix, "key revoked by admin");
    Ok(Json(RevokedKey {
        key: key_json(&revoked),
    }))
}

/// Lets a request through only with the configured admin token; see the module docs.
async fn require_admin(State(state): State<AppState>, request: Request, next: Next) -> Response {
    match admit(state.config.admin_token.as_deref(), &request) {
        Ok(()) => next.run(request).await,
        Err(err) => err.into_response(),
    }
}

fn admit(configured: Option<&str>, request: &Request) -> Result<(), ApiError> {
    let Some(expected) = configured.filter(|t| !t.is_empty()) else {
        return Err(ApiError::not_found(
            "admin_disabled",
            "the admin routes are disabled; start the server with --admin-token-file",
        ));
    };
    let header = crate::auth::one_authorization(request.headers())?.ok_or_else(|| {
        ApiError::unauthorized(
            "missing Authorization header; send `Authorization: Bearer <admin token>`",
        )
    })?;
    let token = header
        .to_str()
        .ok()
        .and_then(|t| crate::auth::credentials_of(t, "Bearer"))
        .ok_or_else(|| ApiError::unauthorized("Authorization must be `Bearer <admin token>`"))?;
    if !same_secret(token, expected) {
        // The admin token can never have a tenant key's shape (refused at start), so this
        // says nothing about whether the tenant key exists.
        let message = if token.starts_with("tlk_") {
            "a tenant API key is not an admin token"
        } else {
            "wrong admin token"
        };
        return Err(ApiError::unauthorized(message));
    }
    let mutating = request.method() != Method::GET && request.method() != Method::HEAD;
    let headers = request.headers();
    let has_idempotency_key = headers.contains_key(crate::idempotency::HEADER)
        || headers.contains_key(crate::idempotency::STANDARD_HEADER);
    if mutating && has_idempotency_key {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "idempotency_not_supported",
            "admin routes do not store responses (they would hold new API keys in clear); send the request without an idempotency key (a retried tenant creation answers 409 tenant_exists)",
        ));
    }
    Ok(())
}

/// Compares two secrets in time that depends on neither: both are hashed to 32 bytes
/// first (hiding the length too), then every byte is compared.
pub(crate) fn same_secret(given: &str, expected: &str) -> bool {
    let a = Sha256::digest(given.as_bytes());
    let b = Sha256::digest(expected.as_bytes());
    let difference = a
        .iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(difference) == 0
}

/// A `POST /admin/tenants` body: `{"name"}` and nothing else.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields, expecting = "a JSON object {\"name\": \"…\"}")]
pub(crate) struct NewTenantBody {
    /// 1-128 characters, trimmed, no control characters.
    #[schema(value_type = String, min_length = 1, max_length = 128)]
    name: NameField,
}

/// A tenant name read from a body, checked by [`TenantName::parse`].
#[derive(Deserialize)]
#[serde(try_from = "String")]
struct NameField(TenantName);

impl TryFrom<String> for NameField {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        TenantName::parse(&text)
            .map(NameField)
            .map_err(|reason| format!("is invalid: {reason}"))
    }
}

/// `{"name"}` with a valid name and nothing else. The body itself has no field name:
/// its refusal carries none, as before.
fn parse_new_tenant(value: &Value) -> Result<TenantName, ApiError> {
    match parse::<NewTenantBody>(value) {
        Ok(body) => Ok(body.name.0),
        Err(refusal) if refusal.field.is_empty() => {
            Err(ApiError::unprocessable("invalid_tenant", refusal.message))
        }
        Err(refusal) => Err(refusal.unprocessable("invalid_tenant")),
    }
}

async fn find_tenant(state: &AppState, name: &str) -> Result<TenantRecord, ApiError> {
    let missing = || {
        ApiError::not_found(
            "tenant_not_found",
            format!("no tenant named {name:?}; GET /admin/tenants lists them"),
        )
    };
    let parsed = TenantName::parse(name).map_err(|_| missing())?;
    state
        .store
        .tenant_by_name(&parsed)
        .await?
        .ok_or_else(missing)
}

/// The listing of a tenant's first key, created in the tenant's own transaction.
fn first_key_info(key: &ApiKey, created_at_us: i64) -> ApiKeyInfo {
    ApiKeyInfo {
        prefix: Some(KeyPrefix::of(key)),
        created_at_us,
        revoked_at_us: None,
    }
}

/// 201 with a body that holds a secret: never cached by anything between.
fn secret_created(body: impl Serialize) -> Response {
    let mut response = (StatusCode::CREATED, Json(body)).into_response();
    response
        .headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn tenant_json(tenant: &TenantRecord) -> TenantView {
    TenantView {
        active_keys: tenant.active_keys,
        created_at: format_rfc3339_micros(tenant.created_at_us),
        name: tenant.name.clone(),
        tenant_id: tenant.tenant_id.as_str().to_string(),
    }
}

fn key_json(key: &ApiKeyInfo) -> KeyView {
    KeyView {
        created_at: format_rfc3339_micros(key.created_at_us),
        prefix: key.prefix.as_ref().map(ToString::to_string),
        revoked_at: key.revoked_at_us.map(format_rfc3339_micros),
    }
}

fn prefix_text(key: &ApiKeyInfo) -> String {
    key.prefix
        .as_ref()
        .map_or_else(|| "none".to_string(), ToString::to_string)
}

#[cfg(test)]
mod tests {
    use super::same_secret;

    #[test]
    fn secrets_match_only_when_equal() {
        let token = "admin-token-0123456789abcdef0123456789";
        assert!(same_secret(token, token));
        for other in [
            "",
            "admin",
            "admin-token-0123456789abcdef012345678",
            "admin-token-0123456789abcdef01234567890",
            // The same length, one byte apart (first, last).
            "Admin-token-0123456789abcdef0123456789",
            "admin-token-0123456789abcdef0123456788",
        ] {
            assert!(!same_secret(other, token), "{other:?}");
        }
    }
}

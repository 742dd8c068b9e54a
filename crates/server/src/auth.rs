//! `Authorization: Bearer <key>` → the tenant. Keys are looked up by hash in the store.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use traqlyte_store::{ApiKey, TenantId};

use crate::{ApiError, AppState};

/// The authenticated tenant of a request.
#[derive(Debug, Clone)]
pub struct Tenant(pub TenantId);

impl FromRequestParts<AppState> for Tenant {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        // Authenticated once per request: a layer that already did it (the idempotency
        // middleware) leaves the tenant in the request's extensions.
        if let Some(tenant) = parts.extensions.get::<Tenant>() {
            return Ok(tenant.clone());
        }
        let header = parts.headers.get(AUTHORIZATION).ok_or_else(|| {
            ApiError::unauthorized(
                "missing Authorization header; send `Authorization: Bearer <api key>`",
            )
        })?;
        let text = header
            .to_str()
            .map_err(|_| ApiError::unauthorized("Authorization header is not ASCII"))?;
        let token = text
            .strip_prefix("Bearer ")
            .or_else(|| text.strip_prefix("bearer "))
            .ok_or_else(|| ApiError::unauthorized("Authorization must use the Bearer scheme"))?;
        let key =
            ApiKey::parse(token.trim()).ok_or_else(|| ApiError::unauthorized("unknown API key"))?;
        let tenant = state
            .store
            .tenant_for_key(&key)
            .await?
            .ok_or_else(|| ApiError::unauthorized("unknown API key"))?;
        parts.extensions.insert(Tenant(tenant.clone()));
        Ok(Tenant(tenant))
    }
}

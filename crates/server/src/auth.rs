//! `Authorization: Bearer <key>` → the tenant. Keys are looked up by hash in the store.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use traqlyte_store::{ApiKey, TenantId};

use crate::lookups::Lookups;
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
        let key = presented_key(parts)?;
        let tenant = state
            .store
            .tenant_for_key(&key)
            .await?
            .ok_or_else(unknown_key)?;
        parts.extensions.insert(Tenant(tenant.clone()));
        Ok(Tenant(tenant))
    }
}

/// The tenant of a single write that may join a group commit (`group_commit.rs`).
///
/// With group commit on, a key this process has seen work is answered from its memory
/// (`lookups.rs`) and `key` is set: the batch's transaction then checks the key
/// again and refuses the write (401) if it was revoked meanwhile. With group commit off,
/// or under the idempotency layer (which resolved the tenant already), this is
/// [`Tenant`] and `key` is `None`.
#[derive(Debug, Clone)]
pub(crate) struct WriteTenant {
    /// The tenant.
    pub(crate) tenant: TenantId,
    /// The key its batch must re-check, when the tenant came from memory or may be
    /// remembered.
    pub(crate) key: Option<ApiKey>,
}

impl FromRequestParts<AppState> for WriteTenant {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let lookups: Option<&Lookups> = state.group_commit.lookups();
        let (Some(lookups), None) = (lookups, parts.extensions.get::<Tenant>()) else {
            let Tenant(tenant) = Tenant::from_request_parts(parts, state).await?;
            return Ok(WriteTenant { tenant, key: None });
        };
        let key = presented_key(parts)?;
        let tenant = match lookups.tenant(&key) {
            Some(tenant) => tenant,
            None => {
                let tenant = state
                    .store
                    .tenant_for_key(&key)
                    .await?
                    .ok_or_else(unknown_key)?;
                lookups.remember_key(&key, &tenant);
                tenant
            }
        };
        Ok(WriteTenant {
            tenant,
            key: Some(key),
        })
    }
}

impl WriteTenant {
    /// [`confirm_after_body`] for a single write whose key no batch will check: group
    /// commit off, or a tenant the idempotency layer resolved (`key` is then `None`). A
    /// write that joins a batch with its key set is checked in the batch's statement.
    pub(crate) async fn confirm_unchecked(
        &self,
        state: &AppState,
        headers: &axum::http::HeaderMap,
    ) -> Result<(), ApiError> {
        match self.key {
            Some(_) => Ok(()),
            None => confirm_after_body(state, headers, &self.tenant).await,
        }
    }

    /// Ends a request whose answer did not come from a batch that checked its key (an
    /// error found before the queue, a read-only answer): when the tenant came from
    /// memory, the key is read again, so a key revoked meanwhile gets its 401 here too
    /// and learns nothing else.
    pub(crate) async fn confirm<T>(
        &self,
        state: &AppState,
        answer: Result<T, ApiError>,
    ) -> Result<T, ApiError> {
        let Some(key) = &self.key else {
            return answer;
        };
        key_still_works(state, key, &self.tenant).await?;
        answer
    }

    /// A handler's whole answer: success as it is (it came from a batch that checked the
    /// key), an error only after [`WriteTenant::confirm`]. A server-side error (`5xx`:
    /// the store busy or out of reach) tells a revoked key nothing of the tenant's, and
    /// is answered as it is: confirming the key would wait for the same store again,
    /// past the request's timeout.
    pub(crate) async fn settle<T>(
        &self,
        state: &AppState,
        answer: Result<T, ApiError>,
    ) -> Result<T, ApiError> {
        match answer {
            Ok(answer) => Ok(answer),
            Err(err) if err.status_code().is_server_error() => Err(err),
            Err(err) => self.confirm(state, Err(err)).await,
        }
    }
}

/// Asks the store again, once a request's whole body has arrived, whether the request's
/// key still works for `tenant`: the key was checked when the headers arrived, and a body
/// trickled in for up to the request timeout would otherwise be stored after a revocation
/// had returned (`traqlyte key revoke`, `DELETE /admin/…`). Called by the writes that do
/// not go through a group-committed batch, which checks the key in its own statement.
/// One indexed read, never answered from memory.
pub(crate) async fn confirm_after_body(
    state: &AppState,
    headers: &axum::http::HeaderMap,
    tenant: &TenantId,
) -> Result<(), ApiError> {
    key_still_works(state, &bearer_key(headers)?, tenant).await
}

/// `Ok` when the store says `key` still works for `tenant` (read now, never from memory);
/// otherwise the key is forgotten by this server's memory and the answer is `401`.
async fn key_still_works(
    state: &AppState,
    key: &ApiKey,
    tenant: &TenantId,
) -> Result<(), ApiError> {
    if state.store.tenant_for_key(key).await?.as_ref() == Some(tenant) {
        return Ok(());
    }
    if let Some(lookups) = state.group_commit.lookups() {
        lookups.forget_key(key);
    }
    Err(unknown_key())
}

/// The key of `Authorization: Bearer <key>`, checked for shape only.
fn presented_key(parts: &Parts) -> Result<ApiKey, ApiError> {
    bearer_key(&parts.headers)
}

/// The API key of an `Authorization: Bearer` header (its shape only, not whether it
/// works), or the `401` saying what is wrong with the header.
pub(crate) fn bearer_key(headers: &axum::http::HeaderMap) -> Result<ApiKey, ApiError> {
    let header = one_authorization(headers)?.ok_or_else(|| {
        ApiError::unauthorized(
            "missing Authorization header; send `Authorization: Bearer <api key>`",
        )
    })?;
    let text = header
        .to_str()
        .map_err(|_| ApiError::unauthorized("Authorization header is not ASCII"))?;
    let token = credentials_of(text, "Bearer")
        .ok_or_else(|| ApiError::unauthorized("Authorization must use the Bearer scheme"))?;
    ApiKey::parse(token).ok_or_else(unknown_key)
}

/// The request's one `Authorization` header, `None` without one; several are refused
/// (`401`): which one a server obeys would otherwise depend on their order, and a header
/// a proxy added would be ignored without a word.
pub(crate) fn one_authorization(
    headers: &axum::http::HeaderMap,
) -> Result<Option<&axum::http::HeaderValue>, ApiError> {
    let mut all = headers.get_all(AUTHORIZATION).iter();
    let first = all.next();
    if all.next().is_some() {
        return Err(ApiError::unauthorized(
            "send one Authorization header, not several",
        ));
    }
    Ok(first)
}

/// The credentials of an `Authorization` value of `scheme`: the scheme's name in any
/// case (RFC 9110, section 11.1), then blanks (spaces or tabs), then the credentials,
/// without blanks around them; `None` for another scheme or none.
pub(crate) fn credentials_of<'v>(value: &'v str, scheme: &str) -> Option<&'v str> {
    let (name, rest) = value.split_once([' ', '\t'])?;
    name.eq_ignore_ascii_case(scheme)
        .then(|| rest.trim_matches([' ', '\t']))
}

/// 401 for a key that does not exist or was revoked.
pub(crate) fn unknown_key() -> ApiError {
    ApiError::unauthorized("unknown or revoked API key")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scheme_is_named_in_any_case_and_followed_by_blanks() {
        for value in [
            "Bearer k",
            "bearer k",
            "BEARER k",
            "Bearer\tk",
            "Bearer   k  ",
        ] {
            assert_eq!(credentials_of(value, "Bearer"), Some("k"), "{value:?}");
        }
        for value in ["Bearerk", "Basic k", "Bearer", "", " Bearer k"] {
            assert_eq!(credentials_of(value, "Bearer"), None, "{value:?}");
        }
    }

    #[test]
    fn several_authorization_headers_are_refused() {
        let mut headers = axum::http::HeaderMap::new();
        assert!(matches!(one_authorization(&headers), Ok(None)));
        headers.append(AUTHORIZATION, "Bearer a".parse().expect("value"));
        assert!(matches!(one_authorization(&headers), Ok(Some(_))));
        headers.append(AUTHORIZATION, "Bearer b".parse().expect("value"));
        assert!(one_authorization(&headers).is_err());
    }
}

//! The web UI: server-rendered HTML pages of campaign reports, with SVG charts and no
//! script. Routes:
//!
//! - `GET /ui/login` (the form), `POST /ui/login` (form-urlencoded `api_key`, `next`);
//! - `GET /ui/login?token=…`: a single-use login link minted by `POST /ui/tokens`
//!   (bearer API key; the link lives `LOGIN_TOKEN_TTL_US`);
//! - `POST /ui/logout`;
//! - `GET /ui/campaigns` (index) and `GET /ui/campaigns/{id}` (the report page).
//!
//! **Sessions, not keys, in cookies.** Logging in exchanges the API key for a random
//! session token (`traqlyte_store::UiToken`, stored only as its SHA-256, expiring after
//! `SESSION_TTL_US`) sent as an `HttpOnly; SameSite=Strict; Path=/ui` cookie. Trade-off:
//! one extra table and a store read per page (the same cost as an API key lookup),
//! against a cookie that leaks far less than the key would: it only reads UI pages, it
//! expires, logout revokes it, revoking the API key it was exchanged for ends it, and the
//! key (which can write data) never sits in the browser's cookie jar. Sessions live in
//! the database, so any server process sharing it accepts them. Without a valid session
//! a page redirects (303) to the login form.

mod charts;
mod html;
pub(crate) mod ops;
mod pages;

use pages::LinkAsk;

use axum::extract::{DefaultBodyLimit, FromRequestParts, Path, Query, State};
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, COOKIE, HOST, LOCATION, ORIGIN,
    REFERRER_POLICY, SET_COOKIE, X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use serde::{Deserialize, Serialize};
use traqlyte_identity::format_rfc3339_micros;
use traqlyte_store::{ApiKey, TenantId, UiGrant, UiTenant, UiToken, UiTokenKind};
use utoipa::{IntoParams, ToSchema};

use crate::error::InternalCause;
use crate::{ApiError, AppState};

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "tl_session";
/// How long a browser session lasts (12 hours).
const SESSION_TTL_US: i64 = 12 * 3_600_000_000;
/// How long a login link stays usable (2 minutes; it is single-use anyway).
const LOGIN_TOKEN_TTL_US: i64 = 120_000_000;
/// Largest login form body accepted.
const FORM_BYTES_MAX: usize = 4_096;
/// Most campaigns listed on the index page.
const INDEX_CAMPAIGNS_MAX: i64 = 500;
/// Where a login goes when it names no (safe) page.
const DEFAULT_PAGE: &str = "/ui/campaigns";

/// The UI's routes, merged into the API's route table.
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(landing))
        .route("/ui", get(ui_root))
        .route("/ui/", get(ui_root_slash))
        .route("/ui/login", get(login_page).post(login))
        .route("/ui/logout", post(logout))
        .route("/ui/tokens", post(mint_login_token))
        .route("/ui/campaigns", get(index))
        .route("/ui/campaigns/{id}", get(campaign_page))
        .route("/ui/ops", get(ops::ops_page))
        // The API disables axum's default body limit; the login form needs a small one.
        .layer(DefaultBodyLimit::max(FORM_BYTES_MAX))
}

/// `GET /`: what this server is and where to go from here, for a person who opens the
/// address `serve` printed.
#[utoipa::path(get, path = "/", tag = "ui",
    responses((status = 200, description = "a small HTML page: what this server is, with links", content_type = "text/html", body = String),
        (status = 400, description = "an HTML error page: a query parameter with NUL or not UTF-8 once decoded")))]
async fn landing() -> Response {
    html_response(StatusCode::OK, pages::landing())
}

/// `GET /ui`: to the campaigns page.
#[utoipa::path(get, path = "/ui", tag = "ui",
    responses((status = 303, description = "to `/ui/campaigns`"),
        (status = 400, description = "an HTML error page: a query parameter with NUL or not UTF-8 once decoded")))]
async fn ui_root() -> Response {
    see_other(DEFAULT_PAGE)
}

/// `GET /ui/`: to the campaigns page.
#[utoipa::path(get, path = "/ui/", tag = "ui",
    responses((status = 303, description = "to `/ui/campaigns`"),
        (status = 400, description = "an HTML error page: a query parameter with NUL or not UTF-8 once decoded")))]
async fn ui_root_slash() -> Response {
    see_other(DEFAULT_PAGE)
}

/// The tenant of a request that carries a live session cookie, with its name for the
/// page header.
pub(crate) struct UiSession {
    tenant: TenantId,
    tenant_name: String,
}

impl FromRequestParts<AppState> for UiSession {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let to_login = || {
            let page = parts
                .uri
                .path_and_query()
                .map_or(parts.uri.path(), |p| p.as_str());
            let login = format!(
                "/ui/login?next={}",
                html::url_component(safe_next(Some(page)))
            );
            // Arrived from another site: the session cookie (`SameSite=Strict`) was left
            // off, and stays off through redirects of that navigation. A page of ours that
            // moves on by itself makes the next request same-site, with the cookie, so a
            // logged-in user opening a link from a mail or chat page lands on it.
            if headers_say_cross_site(&parts.headers) {
                return html_response(StatusCode::OK, pages::hop(&login));
            }
            see_other(&login)
        };
        let Some(token) = session_cookie(&parts.headers) else {
            return Err(to_login());
        };
        match state
            .store
            .ui_token_tenant(&token, UiTokenKind::Session)
            .await
        {
            Ok(Some(tenant)) => Ok(UiSession {
                tenant: tenant.id,
                tenant_name: tenant.name,
            }),
            Ok(None) => Err(to_login()),
            Err(err) => Err(UiError(err.into()).into_response()),
        }
    }
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct LoginQuery {
    /// A single-use login link's token (`POST /ui/tokens`).
    token: Option<String>,
    /// The `/ui/` page to go to after logging in.
    next: Option<String>,
}

#[derive(Deserialize, ToSchema)]
pub(crate) struct LoginForm {
    /// The key pasted into the login form.
    api_key: Option<String>,
    /// Or the token of a login link opened from another site (`login_link` page).
    token: Option<String>,
    next: Option<String>,
}

/// The answer of `POST /ui/tokens` (fields in alphabetical order: see
/// `routes::health::Health`).
#[derive(Serialize, ToSchema)]
pub(crate) struct LoginToken {
    expires_at: String,
    /// `/ui/login?token=…`: open it in a browser once, within 2 minutes.
    login_path: String,
    token: String,
}

/// `GET /ui/login`: the form, or with `?token=` the exchange of a login link.
#[utoipa::path(get, path = "/ui/login", tag = "ui", params(LoginQuery),
    responses((status = 200, description = "the login form; or, for a login link opened from another site or in a browser logged in to another tenant, a page naming the link's tenant with a button that uses it", content_type = "text/html", body = String),
        (status = 303, description = "a login link used: to `next`, with the session cookie"),
        (status = "4XX", description = "an HTML error page"),
        (status = "5XX", description = "an HTML error page")))]
async fn login_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<LoginQuery>,
) -> Result<Response, UiError> {
    let next = safe_next(query.next.as_deref());
    let Some(text) = query.token else {
        // Already logged in (a page reached without its cookie, then reloaded): on to it.
        if live_session(&state, &headers).await?.is_some() {
            return Ok(see_other(next));
        }
        return Ok(html_response(StatusCode::OK, pages::login(next, None)));
    };
    // Not opened by the user in this browser: used only when posted from our own page
    // (login CSRF from another site or a sibling subdomain, and link scanners that would
    // use up the single-use link).
    if !opened_here(&headers) {
        let tenant = link_tenant(&state, &text).await?;
        return Ok(html_response(
            StatusCode::OK,
            pages::login_link(&text, next, tenant.as_deref(), LinkAsk::FromElsewhere),
        ));
    }
    // Opened here while this browser holds a live session of another tenant: someone
    // may have sent their own link to put this browser into their tenant (a link opened
    // from a mail or chat application arrives as typed, `Sec-Fetch-Site: none`). Asked,
    // naming both tenants, instead of switching silently.
    if let Some(current) = live_session(&state, &headers).await? {
        let link = match UiToken::parse(&text) {
            Some(token) => {
                state
                    .store
                    .ui_token_tenant(&token, UiTokenKind::Login)
                    .await?
            }
            None => None,
        };
        if let Some(link) = link.filter(|link| link.id != current.id) {
            return Ok(html_response(
                StatusCode::OK,
                pages::login_link(
                    &text,
                    next,
                    Some(&link.name),
                    LinkAsk::SwitchesFrom(&current.name),
                ),
            ));
        }
    }
    login_with_link(&state, &headers, &text, next).await
}

/// The tenant's name a live login link logs in to, read without using the link up.
async fn link_tenant(state: &AppState, text: &str) -> Result<Option<String>, UiError> {
    let Some(token) = UiToken::parse(text) else {
        return Ok(None);
    };
    Ok(state
        .store
        .ui_token_tenant(&token, UiTokenKind::Login)
        .await?
        .map(|tenant| tenant.name))
}

/// The tenant of the live session this request's cookie names, if any.
async fn live_session(state: &AppState, headers: &HeaderMap) -> Result<Option<UiTenant>, UiError> {
    let Some(token) = session_cookie(headers) else {
        return Ok(None);
    };
    Ok(state
        .store
        .ui_token_tenant(&token, UiTokenKind::Session)
        .await?)
}

/// Uses a login link's token: a session, or the form again saying why not.
async fn login_with_link(
    state: &AppState,
    headers: &HeaderMap,
    text: &str,
    next: &str,
) -> Result<Response, UiError> {
    let exchanged = match UiToken::parse(text) {
        Some(token) => {
            state
                .store
                .exchange_ui_login_token(&token, SESSION_TTL_US)
                .await?
        }
        None => None,
    };
    match exchanged {
        Some((grant, session)) => session_started(&grant, session, headers, next),
        None => Ok(html_response(
            StatusCode::UNAUTHORIZED,
            pages::login(
                next,
                Some("This login link is unknown, expired or already used. Paste your API key instead."),
            ),
        )),
    }
}

/// Whether the browser says the request comes from another site's page
/// (`Sec-Fetch-Site: cross-site`).
fn cross_site(headers: &HeaderMap) -> bool {
    headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"cross-site"))
}

/// Whether the browser says the user opened the request here: typed, pasted or
/// bookmarked (`Sec-Fetch-Site: none`) or from one of this server's pages
/// (`same-origin`). Every current browser sends the header; a request without it (an old
/// browser, a chat client's link preview) or from another site, even a sibling subdomain
/// (`same-site`), is not.
fn opened_here(headers: &HeaderMap) -> bool {
    headers.get("sec-fetch-site").is_some_and(|v| {
        let v = v.as_bytes();
        v.eq_ignore_ascii_case(b"none") || v.eq_ignore_ascii_case(b"same-origin")
    })
}

/// `POST /ui/login`: checks the API key and starts a session.
#[utoipa::path(post, path = "/ui/login", tag = "ui",
    request_body(content = LoginForm, content_type = "application/x-www-form-urlencoded"),
    responses((status = 303, description = "to `next`, with the session cookie"),
        (status = "4XX", description = "an HTML error page"),
        (status = "5XX", description = "an HTML error page")))]
async fn login(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Result<Response, UiError> {
    if !same_origin(&headers) || cross_site(&headers) {
        return Err(UiError(ApiError::new(
            StatusCode::FORBIDDEN,
            "cross_origin",
            "log in from this server's own login page",
        )));
    }
    let next = safe_next(form.next.as_deref());
    if let Some(token) = form.token.as_deref() {
        return login_with_link(&state, &headers, token, next).await;
    }
    let grant = match form
        .api_key
        .as_deref()
        .and_then(|key| ApiKey::parse(key.trim()))
    {
        Some(key) => state.store.ui_grant(&key).await?,
        None => None,
    };
    match grant {
        Some(grant) => start_session(&state, &grant, &headers, next).await,
        None => Ok(html_response(
            StatusCode::UNAUTHORIZED,
            pages::login(next, Some("Unknown API key.")),
        )),
    }
}

/// `POST /ui/logout`: revokes the session and clears the cookie.
#[utoipa::path(post, path = "/ui/logout", tag = "ui",
    responses((status = 303, description = "to the login form, the cookie cleared"), (status = "4XX", description = "an HTML error page"),
        (status = "5XX", description = "an HTML error page")))]
async fn logout(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, UiError> {
    if !same_origin(&headers) || cross_site(&headers) {
        return Err(UiError(ApiError::new(
            StatusCode::FORBIDDEN,
            "cross_origin",
            "log out from this server's own pages",
        )));
    }
    if let Some(token) = session_cookie(&headers) {
        state.store.delete_ui_token(&token).await?;
    }
    let mut response = see_other("/ui/login");
    let cookie = format!("{SESSION_COOKIE}=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0");
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(SET_COOKIE, value);
    }
    Ok(response)
}

/// `POST /ui/tokens` (bearer API key) → 201 `{"token","login_path","expires_at"}`: a
/// single-use login link for a browser, e.g. one a CLI prints. Not idempotent on purpose:
/// a retry mints another short-lived link, which is harmless.
#[utoipa::path(post, path = "/ui/tokens", tag = "ui", security(("api_key" = [])),
    responses((status = 201, body = LoginToken),
        (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
async fn mint_login_token(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    // The link, and the session it opens, stand for this request's key: revoking the
    // key ends them.
    let key = crate::auth::bearer_key(&headers)?;
    let grant = state
        .store
        .ui_grant(&key)
        .await?
        .ok_or_else(crate::auth::unknown_key)?;
    let (token, expires) = state
        .store
        .create_ui_token(&grant, UiTokenKind::Login, LOGIN_TOKEN_TTL_US)
        .await?;
    tracing::info!(tenant = %grant.tenant(), "ui login link minted");
    let body = LoginToken {
        expires_at: format_rfc3339_micros(expires),
        login_path: format!("/ui/login?token={}", token.expose()),
        token: token.expose().to_string(),
    };
    let mut response = (StatusCode::CREATED, Json(body)).into_response();
    // A login secret: never kept by a cache, as the admin routes' new keys.
    response.headers_mut().insert(
        axum::http::header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-store"),
    );
    Ok(response)
}

/// `GET /ui/campaigns`.
#[utoipa::path(get, path = "/ui/campaigns", tag = "ui",
    responses((status = 200, description = "the tenant's campaigns", content_type = "text/html", body = String),
        (status = 303, description = "no session: to the login form"), (status = "4XX", description = "an HTML error page"),
        (status = "5XX", description = "an HTML error page")))]
async fn index(State(state): State<AppState>, session: UiSession) -> Result<Response, UiError> {
    let mut campaigns = state
        .store
        .campaigns(&session.tenant, INDEX_CAMPAIGNS_MAX)
        .await?;
    // The weights units are bucketed with now, as `GET /campaigns/{id}` shows them: the
    // latest published version's (one statement for the page), else as created.
    let ids: Vec<_> = campaigns.iter().map(|c| c.id.clone()).collect();
    let latest = state.store.latest_versions(&session.tenant, &ids).await?;
    for campaign in &mut campaigns {
        if let Some(version) = latest.iter().find(|v| v.campaign_id == campaign.id) {
            campaign.arms = version.arms.clone();
        }
    }
    Ok(html_response(
        StatusCode::OK,
        pages::index(&campaigns, &session.tenant_name),
    ))
}

/// The query of the campaign page: `GET /campaigns/{id}/report`'s, as text.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct CampaignPageParams {
    /// Only the units assigned under this published version.
    version: Option<String>,
}

/// `GET /ui/campaigns/{id}`: the report of `GET /campaigns/{id}/report`, as a page.
#[utoipa::path(get, path = "/ui/campaigns/{id}", tag = "ui",
    params(("id" = String, Path, description = "the campaign's id"), CampaignPageParams),
    responses((status = 200, description = "the campaign's report as a page", content_type = "text/html", body = String),
        (status = 303, description = "no session: to the login form"), (status = "4XX", description = "an HTML error page"),
        (status = "5XX", description = "an HTML error page")))]
async fn campaign_page(
    State(state): State<AppState>,
    session: UiSession,
    Path(id): Path<String>,
    Query(params): Query<CampaignPageParams>,
) -> Result<Response, UiError> {
    let id = crate::experiments::known_campaign_id(&id, "id")?;
    // Read as text and parsed here, so a bad one is this page's 400, not the extractor's
    // JSON answer.
    let version = params
        .version
        .map(|text| {
            text.parse::<i64>().map_err(|_| {
                ApiError::invalid_parameter(
                    "version",
                    "version must be a published version's number",
                )
            })
        })
        .transpose()?;
    let report =
        crate::experiments::report::build_of(&state.store, &session.tenant, &id, version).await?;
    Ok(html_response(
        StatusCode::OK,
        pages::report(&report, &session.tenant_name),
    ))
}

async fn start_session(
    state: &AppState,
    grant: &UiGrant,
    headers: &HeaderMap,
    next: &str,
) -> Result<Response, UiError> {
    let (token, _) = state
        .store
        .create_ui_token(grant, UiTokenKind::Session, SESSION_TTL_US)
        .await?;
    session_started(grant, token, headers, next)
}

/// The answer that starts a stored session: its cookie, and a redirect to `next`.
/// Whether the proxy in front says the browser spoke HTTPS: the first (the browser's)
/// entry of `X-Forwarded-Proto` (`https`, or `https, http` through two proxies) or the
/// `proto` of the first element of the standard `Forwarded` (RFC 7239,
/// `for=…;proto=https`).
fn browser_spoke_https(headers: &HeaderMap) -> bool {
    let first = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(',').next())
            .map(str::trim)
    };
    let forwarded_proto = first("forwarded").and_then(|element| {
        element.split(';').find_map(|pair| {
            let (key, value) = pair.trim().split_once('=')?;
            key.trim()
                .eq_ignore_ascii_case("proto")
                .then(|| value.trim().trim_matches('"'))
        })
    });
    [first("x-forwarded-proto"), forwarded_proto]
        .into_iter()
        .flatten()
        .any(|proto| proto.eq_ignore_ascii_case("https"))
}

fn session_started(
    grant: &UiGrant,
    token: UiToken,
    headers: &HeaderMap,
    next: &str,
) -> Result<Response, UiError> {
    tracing::info!(tenant = %grant.tenant(), "ui session started");
    // `Secure` when a TLS-terminating proxy says the browser spoke HTTPS; the server
    // itself speaks plain HTTP, where a `Secure` cookie would never come back.
    let https = browser_spoke_https(headers);
    let cookie = format!(
        "{SESSION_COOKIE}={}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={}{}",
        token.expose(),
        SESSION_TTL_US / 1_000_000,
        if https { "; Secure" } else { "" }
    );
    let mut response = see_other(next);
    let value = HeaderValue::from_str(&cookie).map_err(ApiError::internal)?;
    response.headers_mut().insert(SET_COOKIE, value);
    Ok(response)
}

/// The session token of the `Cookie` header(s), when well-formed.
fn session_cookie(headers: &HeaderMap) -> Option<UiToken> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .and_then(|(_, value)| UiToken::parse(value.trim()))
}

/// Only a page of the UI itself: no other host, no scheme, no `//`, no `..`, no odd
/// characters in its path (no `%` either: a browser resolves `%2e%2e` as `..`), and a
/// query of plain characters and percent escapes. Anything else becomes the campaign
/// index, so a crafted link cannot redirect a freshly logged-in user elsewhere.
fn safe_next(next: Option<&str>) -> &str {
    let Some(page) = next else {
        return DEFAULT_PAGE;
    };
    // The query is kept (`?version=2`, an operations page's range), percent escapes
    // allowed there only: in the path `%2e%2e` is a `..` to the browser.
    let (path, query) = page.split_once('?').unwrap_or((page, ""));
    let safe = path.starts_with("/ui/")
        && !path.contains("//")
        && !path.contains("..")
        && page.len() <= 512
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/_-.~".contains(&b))
        && query
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.~=&%+,:".contains(&b));
    if safe {
        page
    } else {
        DEFAULT_PAGE
    }
}

/// Whether the browser says this request comes from another site (`Sec-Fetch-Site:
/// cross-site`): a navigation that carries no `SameSite=Strict` cookie.
fn headers_say_cross_site(headers: &HeaderMap) -> bool {
    headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"cross-site"))
}

/// A form post must come from our own pages: browsers send `Origin` on POSTs, and it
/// must name the host the request was sent to; without `Origin`, the browser's
/// `Sec-Fetch-Site: same-origin` must say so. A post with neither is refused (a browser
/// always sends one of them; anything else is not a page of ours). SameSite=Strict
/// already keeps the session cookie off cross-site requests; this stops login CSRF.
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(ORIGIN).and_then(|v| v.to_str().ok()) else {
        return headers
            .get("sec-fetch-site")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"same-origin"));
    };
    let host = headers.get(HOST).and_then(|v| v.to_str().ok());
    let origin_host = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    matches!((origin_host, host), (Some(o), Some(h)) if o.eq_ignore_ascii_case(h))
}

fn see_other(location: &str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(value) = HeaderValue::from_str(location) {
        response.headers_mut().insert(LOCATION, value);
    }
    response
}

/// An HTML page with headers that keep it private and script-free: the CSP allows the
/// inline style sheet and nothing else (no script at all, forms only to ourselves).
pub(crate) fn html_response(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    // `same-origin`, not `no-referrer`: with the latter browsers send `Origin: null` on
    // form posts, which `same_origin` must refuse.
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    response
}

/// An [`ApiError`] answered as the UI answers errors: an HTML page with the same status
/// (used by middleware that refuses a UI request before its handler runs).
pub(crate) fn error_response(err: ApiError) -> Response {
    UiError(err).into_response()
}

/// An [`ApiError`] answered as an HTML page with the same status. A 5xx keeps its
/// internal cause for the logging middleware and shows only the opaque message.
pub(crate) struct UiError(ApiError);

impl From<ApiError> for UiError {
    fn from(err: ApiError) -> Self {
        UiError(err)
    }
}

impl From<traqlyte_store::StoreError> for UiError {
    fn from(err: traqlyte_store::StoreError) -> Self {
        UiError(err.into())
    }
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        let status = self.0.status_code();
        let page = pages::error(status.as_u16(), self.0.message());
        let cause = self
            .0
            .into_response()
            .extensions_mut()
            .remove::<InternalCause>();
        let mut response = html_response(status, page);
        if let Some(cause) = cause {
            response.extensions_mut().insert(cause);
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_is_read_from_either_proxy_header() {
        let cases: [(&[(&str, &str)], bool); 8] = [
            (&[("x-forwarded-proto", "https")], true),
            (&[("x-forwarded-proto", "HTTPS, http")], true),
            (&[("x-forwarded-proto", "http, https")], false),
            (
                &[("forwarded", "for=192.0.2.60;proto=https;by=203.0.113.43")],
                true,
            ),
            (&[("forwarded", "proto=\"https\", proto=http")], true),
            (&[("forwarded", "for=192.0.2.60;proto=http")], false),
            (&[("forwarded", "for=\"[2001:db8::1]\"")], false),
            (&[], false),
        ];
        for (pairs, expected) in cases {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.insert(*name, HeaderValue::from_str(value).expect("a value"));
            }
            assert_eq!(browser_spoke_https(&headers), expected, "{pairs:?}");
        }
    }

    #[test]
    fn next_pages_stay_inside_the_ui() {
        let cases = [
            (None, DEFAULT_PAGE),
            (Some("/ui/campaigns/cmp_1"), "/ui/campaigns/cmp_1"),
            (Some("https://evil.example/"), DEFAULT_PAGE),
            (Some("//evil.example/ui/"), DEFAULT_PAGE),
            (Some("/ui//evil.example"), DEFAULT_PAGE),
            (Some("/ui/../healthz"), DEFAULT_PAGE),
            (Some("/ui/%2e%2e/openapi.json"), DEFAULT_PAGE),
            (Some("/ui/%2E%2E/healthz"), DEFAULT_PAGE),
            (Some("/ui/a\r\nSet-Cookie: x"), DEFAULT_PAGE),
            (Some("/stats"), DEFAULT_PAGE),
            (
                Some("/ui/campaigns/cmp_1?version=2"),
                "/ui/campaigns/cmp_1?version=2",
            ),
            (
                Some("/ui/ops?bucket=minute&contract=segment.message"),
                "/ui/ops?bucket=minute&contract=segment.message",
            ),
            (
                Some("/ui/ops?from=2026-12-06T10%3A00%3A00Z"),
                "/ui/ops?from=2026-12-06T10%3A00%3A00Z",
            ),
            (
                Some("/ui/ops?since=2026-12-06T10:00:00Z"),
                "/ui/ops?since=2026-12-06T10:00:00Z",
            ),
            (Some("/ui/ops?x=//evil.example"), DEFAULT_PAGE),
            (Some("/ui/ops?x=a\r\nSet-Cookie: x"), DEFAULT_PAGE),
        ];
        for (input, expected) in cases {
            assert_eq!(safe_next(input), expected, "{input:?}");
        }
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        let token = format!("tls_{}", "a".repeat(48));
        headers.insert(
            COOKIE,
            HeaderValue::from_str(&format!("a=1; {SESSION_COOKIE}={token}; b=2")).unwrap(),
        );
        assert_eq!(
            session_cookie(&headers).map(|t| t.expose().to_string()),
            Some(token)
        );
        headers.insert(COOKIE, HeaderValue::from_static("tl_session=junk"));
        assert!(session_cookie(&headers).is_none());
    }

    #[test]
    fn cross_origin_posts_are_refused() {
        let mut headers = HeaderMap::new();
        headers.insert(HOST, HeaderValue::from_static("127.0.0.1:8080"));
        // Neither Origin nor Sec-Fetch-Site: not a post from our pages.
        assert!(!same_origin(&headers));
        headers.insert("sec-fetch-site", HeaderValue::from_static("same-origin"));
        assert!(same_origin(&headers));
        headers.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(!same_origin(&headers));
        headers.insert(ORIGIN, HeaderValue::from_static("http://127.0.0.1:8080"));
        assert!(same_origin(&headers));
        headers.insert(ORIGIN, HeaderValue::from_static("https://evil.example"));
        assert!(!same_origin(&headers));
        headers.insert(ORIGIN, HeaderValue::from_static("null"));
        assert!(!same_origin(&headers));
    }
}

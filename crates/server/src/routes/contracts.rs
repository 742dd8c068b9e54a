//! Contract registration and lookup.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use traqlyte_identity::openlineage::builtin_contract;
use traqlyte_identity::{format_rfc3339_micros, Contract, ContractName};
use traqlyte_store::{CollisionRecord, RegisterOutcome, TenantId};
use utoipa::{IntoParams, ToSchema};

use super::events::stored_payload;
use crate::auth::Tenant;
use crate::body::read_document;
use crate::idempotency::Work;
use crate::{ApiError, AppState};

/// Collisions in one page of `GET /contracts/{name}/collisions` when `limit` is not given
/// (the 100 newest it always answered), and at most (as `GET /ops/collisions`).
const COLLISIONS_PAGE_DEFAULT: u32 = 100;
const COLLISIONS_PAGE_MAX: u32 = crate::ops::COLLISIONS_PAGE_MAX;

/// `?version=N`. Any other parameter is refused: on the event routes the version decides
/// the event's id, and a misspelt `?verison=1` took the latest version, another id,
/// without a word (a review).
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct VersionQuery {
    /// A contract version (1–2147483647); the latest when absent.
    #[serde(default, deserialize_with = "contract_version")]
    #[param(minimum = 1, maximum = 2147483647)]
    pub version: Option<u32>,
}

/// A contract version as a query parameter: an integer from 1 to 2147483647, the range
/// `POST /contracts` takes (0 and 2147483648 were a `404` advising to register them,
/// `-1` a `400` about an "invalid digit").
fn contract_version<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u32>, D::Error> {
    let text = String::deserialize(deserializer)?;
    text.parse::<u32>()
        .ok()
        .filter(|v| (1..=i32::MAX as u32).contains(v))
        .map(Some)
        .ok_or_else(|| {
            serde::de::Error::custom("must be an integer from 1 to 2147483647 (a contract version)")
        })
}

/// Contract versions in one page of `GET /contracts`, by default and at most.
pub const CONTRACTS_PAGE_MAX: u32 = 1_000;

/// The answer of `GET /contracts`.
#[derive(Serialize, ToSchema)]
pub(crate) struct ContractList {
    /// The built-in contracts (`openlineage.run_event`, `segment.message`): every
    /// tenant has them; their events arrive through their own endpoints.
    #[schema(value_type = Vec<Object>)]
    builtin: Vec<Value>,
    /// Every version of every contract of the tenant, by name then version: a page of
    /// them when there are more than `limit`.
    #[schema(value_type = Vec<Object>)]
    contracts: Vec<Value>,
    /// Pass as `cursor` for the next page; absent on the last one.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
}

/// The query of `GET /contracts`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ContractsQuery {
    /// The previous page's `next_cursor`.
    cursor: Option<String>,
    /// Contract versions per page (1–1000, default 1000).
    #[param(minimum = 1, maximum = 1000)] // CONTRACTS_PAGE_MAX
    limit: Option<u32>,
}

/// A `next_cursor` of `GET /contracts`: the last version listed, `{name}:{version}` (a
/// name never holds `:`).
fn parse_contracts_cursor(text: &str) -> Option<(&str, u32)> {
    let (name, version) = text.rsplit_once(':')?;
    ContractName::parse(name).ok()?;
    Some((name, version.parse().ok()?))
}

/// The answer of `GET /contracts/{name}/collisions`.
#[derive(Serialize, ToSchema)]
pub(crate) struct CollisionList<'a> {
    /// Newest first (by time received, then id), a page of at most `limit`, and fewer
    /// when their payloads reach the page's byte budget.
    collisions: Vec<CollisionView<'a>>,
    contract: &'a str,
    /// Pass as `cursor` for the next page; absent on the last one.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
}

/// The query of `GET /contracts/{name}/collisions`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct CollisionsQuery {
    /// The previous page's `next_cursor`.
    cursor: Option<String>,
    /// Collisions per page (1–200, default 100).
    #[param(minimum = 1, maximum = 200)] // COLLISIONS_PAGE_MAX
    limit: Option<u32>,
}

/// `POST /contracts`: 201 when new, 200 when the identical contract exists, 409 when a
/// different one holds the name and version.
#[utoipa::path(post, path = "/contracts", tag = "contracts", security(("api_key" = [])), params(crate::openapi::IdempotencyHeaders),
    request_body(content = Object, description = "an identity contract (docs/identity.md)"),
    responses((status = 201, body = Object, description = "the contract, new"),
        (status = 200, body = Object, description = "the identical contract, already registered"),
        (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn register(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    work: Work,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let value = read_document(&state, &headers, body).await?;
    crate::auth::confirm_after_body(&state, &headers, &tenant).await?;
    if !value.is_object() {
        return Err(ApiError::unprocessable(
            "not_an_object",
            "a contract must be a JSON object",
        ));
    }
    let contract = match Contract::from_json(&value) {
        Ok(contract) => contract,
        Err(refused) => return registered_before(&state, &tenant, &value, refused).await,
    };
    if builtin_contract(contract.name().as_str()).is_some() {
        return Err(ApiError::unprocessable(
            "invalid_contract",
            format!(
                "{} is a built-in contract name; choose another name",
                contract.name()
            ),
        )
        .with_field("name"));
    }
    let mut tx = work.begin().await?;
    let registered = tx.register_contract(&tenant, &contract).await?;
    work.finish(tx).await?;
    // This process's next write of the contract reads the latest version again (others
    // find it when their batch or a refusal re-checks it).
    if let Some(lookups) = state.group_commit.lookups() {
        lookups.forget_latest(&tenant, contract.name().as_str());
    }
    let status = match registered {
        RegisterOutcome::Created => StatusCode::CREATED,
        RegisterOutcome::Unchanged => StatusCode::OK,
    };
    tracing::info!(tenant = %tenant, contract = %contract.name(), version = contract.version(), created = status == StatusCode::CREATED, "contract registered");
    Ok((status, Json(contract.to_json())).into_response())
}

/// A contract refused as new (`refused`) that is already registered, identical, under a
/// rule tightened since (a `transport` pointer listed twice): sent again unchanged it is
/// the no-op `200` it was, so that a deployment registering its contracts at every start
/// keeps starting after an upgrade. Anything else is the refusal.
async fn registered_before(
    state: &AppState,
    tenant: &TenantId,
    value: &Value,
    refused: traqlyte_identity::ContractError,
) -> Result<Response, ApiError> {
    let Ok(lenient) = Contract::from_stored_json(value) else {
        return Err(refused.into());
    };
    let stored = state
        .store
        .contract(tenant, lenient.name(), Some(lenient.version()))
        .await?;
    match stored {
        Some(stored) if stored.canonical_definition() == lenient.canonical_definition() => {
            Ok((StatusCode::OK, Json(stored.to_json())).into_response())
        }
        _ => Err(refused.into()),
    }
}

/// `GET /contracts`: every version of every contract of the tenant, a page of at most
/// `limit` at a time, and the built-in contracts beside them.
#[utoipa::path(get, path = "/contracts", tag = "contracts", security(("api_key" = [])),
    params(ContractsQuery),
    responses((status = 200, body = ContractList), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn list(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Query(query): Query<ContractsQuery>,
) -> Result<Json<ContractList>, ApiError> {
    let limit = crate::error::page_limit(query.limit, CONTRACTS_PAGE_MAX, CONTRACTS_PAGE_MAX)?;
    let after = crate::error::page_cursor(query.cursor.as_deref(), parse_contracts_cursor)?;
    let (page, more) = state.store.contracts_page(&tenant, after, limit).await?;
    let next_cursor =
        crate::error::next_cursor(more, &page, |c| format!("{}:{}", c.name(), c.version()));
    let contracts = page.iter().map(Contract::to_json).collect();
    let builtin = traqlyte_identity::builtin_contracts()
        .map(Contract::to_json)
        .collect();
    Ok(Json(ContractList {
        builtin,
        contracts,
        next_cursor,
    }))
}

/// `GET /contracts/{name}[?version=N]`: the latest (or the given) version.
#[utoipa::path(get, path = "/contracts/{name}", tag = "contracts", security(("api_key" = [])),
    params(("name" = String, Path, description = "the contract's name"), VersionQuery),
    responses((status = 200, body = Object, description = "the contract"), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn show(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(name): Path<String>,
    Query(query): Query<VersionQuery>,
) -> Result<Json<Value>, ApiError> {
    let contract = load_or_builtin(&state, &tenant, &name, query.version).await?;
    Ok(Json(contract.to_json()))
}

/// `GET /contracts/{name}/collisions`: the logged collisions, newest first, a page of at
/// most `limit` at a time.
#[utoipa::path(get, path = "/contracts/{name}/collisions", tag = "contracts", security(("api_key" = [])),
    params(("name" = String, Path, description = "the contract's name"), CollisionsQuery),
    responses((status = 200, body = CollisionList), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn collisions(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(name): Path<String>,
    Query(query): Query<CollisionsQuery>,
) -> Result<Response, ApiError> {
    let limit =
        crate::error::page_limit(query.limit, COLLISIONS_PAGE_DEFAULT, COLLISIONS_PAGE_MAX)?;
    let before = crate::error::page_cursor(query.cursor.as_deref(), crate::ops::parse_cursor)?;
    let contract = load_or_builtin(&state, &tenant, &name, None).await?;
    let (rows, more) = state
        .store
        .collisions(&tenant, contract.name(), before, limit)
        .await?;
    // The cursor of the last row answered, even when the page is short: a collision
    // committed between the page's reads may have pushed older ones out of it.
    let next_cursor = crate::error::next_cursor(more, &rows, |r| {
        crate::ops::format_cursor(r.received_at_us, r.collision_id)
    });
    let collisions = rows
        .iter()
        .map(CollisionView::of)
        .collect::<Result<Vec<_>, _>>()?;
    let answer = CollisionList {
        collisions,
        contract: contract.name().as_str(),
        next_cursor,
    };
    Ok(Json(answer).into_response())
}

/// One logged collision as answered: both payloads as JSON values and the time as
/// RFC 3339, like every stored payload and time of the API. Named apart from
/// `GET /ops/collisions`' item (`ops::CollisionView`): two schemas of one name are one
/// component, the last registered, and this route's list pointed at the other's fields.
#[derive(Serialize, ToSchema)]
#[schema(as = ContractCollisionView)]
pub(crate) struct CollisionView<'a> {
    collision_id: i64,
    event_id: &'a str,
    incoming_fingerprint: &'a str,
    #[schema(value_type = Object)]
    incoming_payload: Value,
    received_at: String,
    stored_fingerprint: &'a str,
    #[schema(value_type = Object)]
    stored_payload: Value,
}

impl<'a> CollisionView<'a> {
    fn of(record: &'a CollisionRecord) -> Result<Self, ApiError> {
        Ok(CollisionView {
            collision_id: record.collision_id,
            event_id: record.event_id.as_str(),
            stored_fingerprint: record.stored_fingerprint.as_str(),
            incoming_fingerprint: record.incoming_fingerprint.as_str(),
            stored_payload: stored_payload(&record.stored_payload)?,
            incoming_payload: stored_payload(&record.incoming_payload)?,
            received_at: format_rfc3339_micros(record.received_at_us),
        })
    }
}

/// A built-in contract (for reading only: events of a built-in contract arrive through
/// their own endpoint, e.g. `POST /api/v1/lineage`), else the tenant's contract.
async fn load_or_builtin(
    state: &AppState,
    tenant: &TenantId,
    name: &str,
    version: Option<u32>,
) -> Result<Contract, ApiError> {
    match builtin_contract(name) {
        Some(builtin) if version.is_none() || version == Some(builtin.version()) => {
            Ok(builtin.clone())
        }
        _ => load(state, tenant, name, version).await,
    }
}

/// The contract a single write identifies its event under (see [`load_for_write`]).
pub(crate) struct ForWrite {
    pub(crate) contract: Arc<Contract>,
    /// Resolved as the latest version (`?version` absent).
    pub(crate) latest: bool,
    /// Answered from this server's memory, not read for this request: as the latest, it
    /// may be older than a version registered since in any process.
    pub(crate) remembered: bool,
}

/// The contract a single write identifies its event under, and whether it was resolved
/// as the latest version (`?version` absent). With group commit on, a version this server
/// has read before is answered from its memory (`lookups.rs`), and the batch that stores
/// the event checks that no newer version was registered meanwhile; a refusal under a
/// remembered latest version asks the store first ([`newer_latest`]).
pub(crate) async fn load_for_write(
    state: &AppState,
    tenant: &TenantId,
    name: &str,
    version: Option<u32>,
) -> Result<ForWrite, ApiError> {
    let latest = version.is_none();
    let Some(lookups) = state.group_commit.lookups() else {
        let contract = Arc::new(load(state, tenant, name, version).await?);
        return Ok(ForWrite {
            contract,
            latest,
            remembered: false,
        });
    };
    // Shared, not cloned: a contract's field list is several allocations, and cloning it
    // per request was a tenth of a group-committed event handler's CPU.
    if let Some(contract) = lookups.contract(tenant, name, version) {
        return Ok(ForWrite {
            contract,
            latest,
            remembered: true,
        });
    }
    let contract = Arc::new(load(state, tenant, name, version).await?);
    lookups.remember_contract(tenant, &contract, latest);
    Ok(ForWrite {
        contract,
        latest,
        remembered: false,
    })
}

/// The latest version of `remembered`'s contract when the store holds a newer one than
/// this server remembered as the latest (registered since, in any process), now
/// remembered instead; `None` when `remembered` is still the latest. Asked before an
/// event is refused under a remembered version: only the batch re-checks the latest
/// version, so an event refused before it (valid under the new version only) would be
/// refused for as long as no valid event of the old shape passed through a batch.
pub(crate) async fn newer_latest(
    state: &AppState,
    tenant: &TenantId,
    remembered: &Contract,
) -> Result<Option<Arc<Contract>>, ApiError> {
    let name = remembered.name().as_str();
    let stored = load(state, tenant, name, None).await?;
    if stored.version() <= remembered.version() {
        return Ok(None);
    }
    let stored = Arc::new(stored);
    if let Some(lookups) = state.group_commit.lookups() {
        lookups.forget_latest(tenant, name);
        lookups.remember_contract(tenant, &stored, true);
    }
    Ok(Some(stored))
}

/// The tenant's contract `name` (latest version unless `version` is given), or 404.
pub(crate) async fn load(
    state: &AppState,
    tenant: &TenantId,
    name: &str,
    version: Option<u32>,
) -> Result<Contract, ApiError> {
    let missing = || {
        let which = version.map(|v| format!(" version {v}")).unwrap_or_default();
        ApiError::not_found(
            "contract_not_found",
            format!("no contract named {name:?}{which}; register it with POST /contracts"),
        )
        .with_field("contract")
    };
    let parsed = ContractName::parse(name).map_err(|_| missing())?;
    state
        .store
        .contract(tenant, &parsed, version)
        .await?
        .ok_or_else(missing)
}

//! `GET /healthz` and `GET /stats`.

use axum::extract::State;
use axum::http::StatusCode;
use std::collections::BTreeMap;

use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use crate::auth::Tenant;
use crate::{ApiError, AppState};

/// The answer of `GET /healthz`. Fields of the answer types in `routes` are declared in
/// alphabetical order: the answers were first built as `serde_json::Value` maps, which
/// sort their keys, and the bytes on the wire stay the same.
#[derive(Serialize, ToSchema)]
pub(crate) struct Health {
    /// `sqlite` or `postgres`.
    backend: &'static str,
    /// Always `ok` (a database that does not answer is a 503).
    #[schema(value_type = crate::openapi::OkStatus)]
    status: &'static str,
}

/// Counts of one contract's events in `GET /stats`.
#[derive(Serialize, ToSchema)]
pub(crate) struct ContractStats {
    collisions: i64,
    duplicates: i64,
    /// Of the counts beside it, the events reconciled against detached partitions,
    /// outside the live dedupe horizon (a backfill, or `serve --late-events reconcile`);
    /// always 0 on SQLite.
    late: i64,
    stored: i64,
}

/// The answer of `GET /stats`.
#[derive(Serialize, ToSchema)]
pub(crate) struct Stats {
    /// By contract name.
    contracts: BTreeMap<String, ContractStats>,
}

/// How long `GET /healthz` waits for the database: a probe's own timeout is short
/// (Kubernetes' default is one second), and a database that does not answer within this
/// is not ready for the requests the probe vouches for.
const HEALTH_PING_MS: u64 = 1_000;

/// `GET /healthz` (readiness): 503 `database_unavailable` when the database does not
/// answer within [`HEALTH_PING_MS`], or takes no writes (a PostgreSQL standby, a demoted
/// primary after a failover, or `default_transaction_read_only` on), or every connection
/// of the pool has been in use with none given back for long
/// ([`traqlyte_store::Store::pool_stranded_for`]: the check's own connection answered).
#[utoipa::path(get, path = "/healthz", tag = "health",
    responses((status = 200, body = Health),
        (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn healthz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    let bound = std::time::Duration::from_millis(HEALTH_PING_MS);
    let (cause, message) = match tokio::time::timeout(bound, state.store.ping()).await {
        // The check's own connection answers, but the API's do not come back.
        Ok(Ok(())) => match state.store.pool_stranded_for() {
            None => {
                return Ok(Json(Health {
                    backend: state.store.backend_name(),
                    status: "ok",
                }))
            }
            Some(stranded) => (
                format!(
                    "every pooled connection in use for {} s, none given back",
                    stranded.as_secs()
                ),
                "every connection of the server's pool is in use, none given back for long: the database stalls, or the connections wait on one gone without a reset",
            ),
        },
        // Every write would fail: not ready, though the database answers.
        Ok(Err(err @ traqlyte_store::StoreError::ReadOnly)) => (
            err.to_string(),
            "the database takes no writes (a standby, or read-only)",
        ),
        Ok(Err(err @ traqlyte_store::StoreError::FileGone { .. })) => (
            err.to_string(),
            "the SQLite file was deleted or replaced while the server ran: restart it (docs/operations.md, Probes)",
        ),
        Ok(Err(err)) => (err.to_string(), "the database does not answer"),
        Err(_) => (
            format!("no answer within {HEALTH_PING_MS} ms"),
            "the database does not answer",
        ),
    };
    tracing::warn!(error = %cause, "health check failed");
    Err(ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "database_unavailable",
        message,
    ))
}

/// The answer of `GET /livez`.
#[derive(Serialize, ToSchema)]
pub(crate) struct Live {
    /// Always `ok`.
    #[schema(value_type = crate::openapi::OkStatus)]
    status: &'static str,
}

/// `GET /livez` (liveness): the process answers, without asking the database, so a
/// database outage does not get every server restarted (that is `/healthz`'s question).
#[utoipa::path(get, path = "/livez", tag = "health",
    responses((status = 200, body = Live),
        (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn livez() -> Json<Live> {
    Json(Live { status: "ok" })
}

/// `GET /stats`.
#[utoipa::path(get, path = "/stats", tag = "health", security(("api_key" = [])),
    responses((status = 200, body = Stats),
        (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn stats(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
) -> Result<Json<Stats>, ApiError> {
    let mut contracts = BTreeMap::new();
    for row in state.store.stats(&tenant).await? {
        let counts = ContractStats {
            collisions: row.collisions,
            duplicates: row.duplicates,
            late: row.late,
            stored: row.stored,
        };
        contracts.insert(row.contract.clone(), counts);
    }
    Ok(Json(Stats { contracts }))
}

//! `GET /healthz` and `GET /stats`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Map, Value};

use crate::auth::Tenant;
use crate::{ApiError, AppState};

pub(crate) async fn healthz(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    match state.store.ping().await {
        Ok(()) => Ok(Json(
            json!({"status": "ok", "backend": state.store.backend_name()}),
        )),
        Err(err) => {
            tracing::warn!(error = %err, "health check failed");
            Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "database_unavailable",
                "the database does not answer",
            ))
        }
    }
}

pub(crate) async fn stats(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
) -> Result<Json<Value>, ApiError> {
    let mut contracts = Map::new();
    for row in state.store.stats(&tenant).await? {
        contracts.insert(row.contract.clone(), json!({"stored": row.stored, "duplicates": row.duplicates, "collisions": row.collisions}));
    }
    Ok(Json(json!({ "contracts": contracts })))
}

//! `POST /bench/ceiling` (benchmark servers only, `ServerConfig::bench_ceiling_route`):
//! the HTTP ceiling of single-event ingestion. It reads and parses the body as
//! `POST /events/{contract}` does and answers a JSON acknowledgement of the same shape,
//! without authentication, identification or store work.

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use serde::Serialize;

use crate::body::read_document;
use crate::{ApiError, AppState};

#[derive(Serialize)]
pub(crate) struct CeilingAck {
    event_id: &'static str,
    status: &'static str,
}

pub(crate) async fn ceiling(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<CeilingAck>, ApiError> {
    let _value = read_document(&state, &headers, body).await?;
    Ok(Json(CeilingAck {
        event_id: "0000000000000000000000000000000000000000000000000000000000000000",
        status: "ceiling",
    }))
}

//! `GET /ops/semantic-duplicates`: the latest semantic-duplicate scan of each contract
//! version of the tenant (docs/semantic-scan.md), as stored by the periodic scan of
//! `traqlyte serve --semantic-scan-interval` or by `traqlyte scan semantic`.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use traqlyte_identity::{format_rfc3339_micros, ContractName};
use traqlyte_store::{SemanticFinding, SemanticGroup, SemanticScan};
use utoipa::{IntoParams, ToSchema};

use crate::auth::Tenant;
use crate::{ApiError, AppState};

/// The query of `GET /ops/semantic-duplicates`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct SemanticQuery {
    /// Only this contract's scans.
    pub contract: Option<String>,
}

/// The answer of `GET /ops/semantic-duplicates`.
#[derive(Serialize, ToSchema)]
pub(crate) struct SemanticScanList {
    /// The latest scan of each contract version, by contract then version; empty before
    /// the first scan.
    scans: Vec<SemanticScanView>,
}

/// One scan as answered (fields in alphabetical order: see `routes::health::Health`).
#[derive(Serialize, ToSchema)]
pub(crate) struct SemanticScanView {
    /// The contract's name.
    contract: String,
    /// Stored events scanned.
    events: i64,
    /// The identity fields checked.
    fields_checked: Vec<String>,
    /// Identity fields the backend could not check (a pointer token holding `"` on SQLite).
    fields_skipped: Vec<String>,
    /// One per suspect identity field; empty when the contract is sound.
    findings: Vec<SemanticFindingView>,
    /// When the scan finished (RFC 3339).
    scanned_at: String,
    /// The lower bound on arrival time, when the scan had one (RFC 3339).
    since: Option<String>,
    /// The contract version scanned.
    version: u32,
}

/// A suspect identity field.
#[derive(Serialize, ToSchema)]
pub(crate) struct SemanticFindingView {
    /// Distinct events in the groups.
    events: i64,
    /// The largest groups (at most 3).
    examples: Vec<SemanticGroupView>,
    /// Groups of two or more distinct events that differ in this field only.
    groups: i64,
    /// The identity field's pointer: probably not identity (often an emit time that is
    /// transport).
    pointer: String,
}

/// One example group.
#[derive(Serialize, ToSchema)]
pub(crate) struct SemanticGroupView {
    /// Two of its event ids (the smallest and the largest).
    event_ids: Vec<String>,
    /// Distinct events in the group.
    events: i64,
}

impl SemanticScanView {
    pub(crate) fn of(scan: SemanticScan) -> SemanticScanView {
        SemanticScanView {
            contract: scan.contract,
            events: scan.events,
            fields_checked: scan.fields_checked,
            fields_skipped: scan.fields_skipped,
            findings: scan
                .findings
                .into_iter()
                .map(SemanticFindingView::of)
                .collect(),
            scanned_at: format_rfc3339_micros(scan.scanned_at_us),
            since: scan.since_us.map(format_rfc3339_micros),
            version: scan.version,
        }
    }
}

impl SemanticFindingView {
    fn of(finding: SemanticFinding) -> SemanticFindingView {
        SemanticFindingView {
            events: finding.events,
            examples: finding
                .examples
                .into_iter()
                .map(|g: SemanticGroup| SemanticGroupView {
                    event_ids: g.event_ids,
                    events: g.events,
                })
                .collect(),
            groups: finding.groups,
            pointer: finding.pointer,
        }
    }
}

/// `GET /ops/semantic-duplicates`: the tenant's latest scans.
#[utoipa::path(get, path = "/ops/semantic-duplicates", tag = "operations", security(("api_key" = [])),
    params(SemanticQuery),
    responses((status = 200, body = SemanticScanList), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn list(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Query(query): Query<SemanticQuery>,
) -> Result<Json<SemanticScanList>, ApiError> {
    let contract = query
        .contract
        .as_deref()
        .map(ContractName::parse)
        .transpose()
        .map_err(|e| {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_contract_name", e.message)
                .with_field("contract")
        })?;
    let scans = state
        .store
        .semantic_scans(&tenant, contract.as_ref().map(ContractName::as_str))
        .await?;
    Ok(Json(SemanticScanList {
        scans: scans.into_iter().map(SemanticScanView::of).collect(),
    }))
}

//! `GET /campaigns/{id}/report`: reads what the report needs from the store and hands it
//! to the pure `traqlyte-experiments` crate, whose typed [`Report`] is serialised here,
//! rendered by the web page and read by the demo.

use axum::extract::{Path, Query, State};
use axum::Json;
use traqlyte_experiments::report::{ReportInput, Stratified};
use traqlyte_experiments::{CampaignId, Report};
use traqlyte_store::{Store, TenantId};

use crate::auth::Tenant;
use crate::{ApiError, AppState};

const HOUR_US: i64 = 3_600_000_000;
const DUPLICATE_BUCKETS_MAX: i64 = 2_000;

/// The query of `GET /campaigns/{id}/report`.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ReportParams {
    /// Only the units assigned under this published version (after a reweighting, the
    /// whole campaign's figures pool units of versions whose weights differ).
    version: Option<i64>,
}

/// `GET /campaigns/{id}/report`.
#[utoipa::path(get, path = "/campaigns/{id}/report", tag = "experiments", security(("api_key" = [])),
    params(("id" = String, Path, description = "the campaign's id"), ReportParams),
    responses((status = 200, body = traqlyte_experiments::Report, description = "the dedupe-aware report"), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn get_report(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
    Query(params): Query<ReportParams>,
) -> Result<Json<Report>, ApiError> {
    let id = super::known_campaign_id(&id, "id")?;
    Ok(Json(
        build_of(&state.store, &tenant, &id, params.version).await?,
    ))
}

/// The report of a campaign, or with `version` of the units assigned under that version
/// (also rendered by the web page).
pub async fn build_of(
    store: &Store,
    tenant: &TenantId,
    campaign_id: &CampaignId,
    version: Option<i64>,
) -> Result<Report, ApiError> {
    let campaign = store
        .campaign(tenant, campaign_id)
        .await?
        .ok_or_else(|| super::campaign_not_found(campaign_id.as_str(), "id"))?;
    // Sums, then units, then versions: a unit can convert only once assigned, and be
    // assigned only under a published version, so each read covers what the one before
    // it saw. In another order a unit assigned and converting in between was a converter
    // of no unit (a rate above 1, and no lift), or a unit of a version the sample-ratio
    // check did not know (a false mismatch).
    let sums = store.report_sums(tenant, campaign_id, version).await?;
    let mut units_by_version = store.units_by_version(tenant, campaign_id).await?;
    let mut versions = store.campaign_versions(tenant, campaign_id).await?;
    if versions.is_empty() {
        return Err(super::not_published("id"));
    }
    let published = versions.len();
    if let Some(wanted) = version {
        if !versions.iter().any(|v| v.version == wanted) {
            return Err(ApiError::invalid_parameter(
                "version",
                format!(
                    "campaign {} has versions 1 to {published}; version {wanted} was never published",
                    campaign_id.as_str()
                ),
            ));
        }
        versions.retain(|v| v.version == wanted);
        units_by_version.retain(|row| row.version == wanted);
    }
    let duplicates_over_time = store
        .duplicates_over_time(tenant, campaign_id, version, HOUR_US, DUPLICATE_BUCKETS_MAX)
        .await?;
    let corrected = store
        .corrected_outcomes(tenant, campaign_id, version)
        .await?;
    // Read after the sums, like the duplicates over time: a collision counted here may
    // name an outcome stored since, which changes no figure (collisions enter none).
    let collisions = store
        .outcome_collisions_per_arm(tenant, campaign_id, version)
        .await?;
    let mut report = Report::compute(ReportInput {
        campaign: &campaign,
        versions: &versions,
        units_by_version: &units_by_version,
        sums: &sums,
        duplicates_over_time: &duplicates_over_time,
        corrected_outcomes: u64::try_from(corrected).unwrap_or(0),
        collisions: &collisions,
    });
    report.versions = published;
    report.version = version;
    if version.is_none() && report.weights_changed() {
        // A second round in the same order, sums then units, so that every unit with
        // sums is among the units (a unit assigned between the two reads is counted
        // without its outcomes, never an outcome without its unit: no rate above 1).
        // Only campaigns whose weights changed pay for it.
        let sums = store.report_sums_by_version(tenant, campaign_id).await?;
        let units = store.units_by_version(tenant, campaign_id).await?;
        report.stratified = Stratified::compute(&campaign, &units, &sums);
    }
    Ok(report)
}

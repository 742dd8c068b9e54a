//! `GET /campaigns/{id}/report`: per arm and metric, the deduplicated value and lift,
//! what a pipeline without dedupe would have reported, the bias retries predict, and a
//! plain-language verdict when the two conclusions differ. Statistics come from the pure
//! `traqlyte-stats` crate; the store supplies one pass of sums.

use std::collections::HashMap;

use axum::extract::{Path, State};
use axum::Json;
use serde_json::{json, Value};
use traqlyte_identity::format_rfc3339_micros;
use traqlyte_stats::{
    mean_lift, predicted_naive_lift, proportion_lift, srm, ConfidenceLevel, Lift, Moments,
    Proportion,
};
use traqlyte_store::{
    Campaign, CampaignVersion, MetricDef, MetricKind, Store, TenantId, WindowSums,
};

use crate::auth::Tenant;
use crate::{ApiError, AppState};

const HOUR_US: i64 = 3_600_000_000;
const DUPLICATE_BUCKETS_MAX: i64 = 2_000;

/// `GET /campaigns/{id}/report`.
pub(crate) async fn get_report(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(build(&state.store, &tenant, &id).await?))
}

/// The report as JSON (also rendered by the web page).
pub async fn build(store: &Store, tenant: &TenantId, campaign_id: &str) -> Result<Value, ApiError> {
    let campaign = store.campaign(tenant, campaign_id).await?.ok_or_else(|| {
        ApiError::not_found("campaign_not_found", format!("no campaign {campaign_id:?}"))
            .with_field("id")
    })?;
    let versions = store.campaign_versions(tenant, campaign_id).await?;
    if versions.is_empty() {
        return Err(super::not_published());
    }
    let by_version = store.units_by_version(tenant, campaign_id).await?;
    let units = units_per_arm(&campaign, &by_version);
    let srm_json = srm_json(&campaign, &versions, &by_version, &units);
    let sums = store.report_sums(tenant, campaign_id).await?;
    let mut arms = Vec::new();
    let mut verdicts = Vec::new();
    let control = &campaign.arms[0].key;
    for arm in &campaign.arms {
        let mut metrics = serde_json::Map::new();
        for metric in &campaign.metrics {
            let sums_of = |key: &str| {
                sums.get(&(metric.name.clone(), key.to_string()))
                    .cloned()
                    .unwrap_or_default()
            };
            let (mine, theirs) = (sums_of(&arm.key), sums_of(control));
            let (units_t, units_c) = (units[&arm.key], units[control]);
            let is_control = arm.key == *control;
            let event = Side::compute(
                metric,
                units_t,
                &mine.event_time,
                units_c,
                &theirs.event_time,
                is_control,
            );
            let arrival = Side::compute(
                metric,
                units_t,
                &mine.arrival_time,
                units_c,
                &theirs.arrival_time,
                is_control,
            );
            if let Some(verdict) = event.verdict(metric, &arm.key) {
                verdicts.push(verdict);
            }
            let mut entry = event.to_json(metric);
            entry["arrival_time"] = arrival.to_json(metric);
            metrics.insert(metric.name.clone(), entry);
        }
        arms.push(json!({"key": arm.key, "control": arm.key == *control, "units": units[&arm.key], "metrics": metrics}));
    }
    if srm_json["flagged"] == true {
        verdicts.insert(0, json!({"kind": "srm", "message": "Sample ratio mismatch: units are not split as the weights say (p < 0.001). Fix the assignment path before trusting any lift."}));
    }
    let over_time = store
        .duplicates_over_time(tenant, campaign_id, HOUR_US, DUPLICATE_BUCKETS_MAX)
        .await?;
    let duplicates_over_time: Vec<Value> = over_time.iter().map(|(bucket, arm, n)| json!({"bucket_start": format_rfc3339_micros(*bucket), "arm": arm, "duplicates": n})).collect();
    Ok(json!({
        "campaign_id": campaign.id, "key": campaign.key, "name": campaign.name,
        "versions": versions.len(), "confidence_level": ConfidenceLevel::default().get(),
        "srm": srm_json, "arms": arms, "verdicts": verdicts, "duplicates_over_time": duplicates_over_time,
    }))
}

fn units_per_arm(campaign: &Campaign, by_version: &[(i64, String, i64)]) -> HashMap<String, u64> {
    let mut units: HashMap<String, u64> =
        campaign.arms.iter().map(|a| (a.key.clone(), 0)).collect();
    for (_, arm, n) in by_version {
        *units.entry(arm.clone()).or_default() += u64::try_from(*n).unwrap_or(0);
    }
    units
}

/// Chi-square of observed units against the weights of the version each unit was
/// assigned under (a mixture when weights changed between versions).
fn srm_json(
    campaign: &Campaign,
    versions: &[CampaignVersion],
    by_version: &[(i64, String, i64)],
    units: &HashMap<String, u64>,
) -> Value {
    let mut expected: HashMap<&str, f64> = HashMap::new();
    for version in versions {
        let assigned: i64 = by_version
            .iter()
            .filter(|(v, _, _)| *v == version.version)
            .map(|(_, _, n)| n)
            .sum();
        let total_weight: f64 = version.arms.iter().map(|a| f64::from(a.weight)).sum();
        for arm in &version.arms {
            *expected.entry(arm.key.as_str()).or_default() +=
                assigned as f64 * f64::from(arm.weight) / total_weight;
        }
    }
    let observed: Vec<u64> = campaign.arms.iter().map(|a| units[&a.key]).collect();
    let weights: Vec<f64> = campaign
        .arms
        .iter()
        .map(|a| expected.get(a.key.as_str()).copied().unwrap_or(0.0))
        .collect();
    match srm(&observed, &weights) {
        Ok(result) => {
            json!({"chi_square": result.chi_square(), "df": result.df(), "p_value": result.p_value(), "flagged": result.flagged(), "expected_units": weights})
        }
        Err(_) => {
            json!({"chi_square": null, "df": null, "p_value": null, "flagged": false, "expected_units": weights})
        }
    }
}

/// One arm's figures for one metric and one window, with lifts against the control.
struct Side {
    units: u64,
    value: Option<f64>,
    naive_value: Option<f64>,
    /// 95% interval of the arm's own value (normal approximation).
    value_ci: Option<(f64, f64)>,
    converters: u64,
    stored_events: f64,
    duplicates: f64,
    delta: Option<f64>,
    delta_value: Option<f64>,
    lift: Option<Lift>,
    naive_lift: Option<Lift>,
    predicted_naive_lift: Option<f64>,
}

impl Side {
    fn compute(
        metric: &MetricDef,
        units: u64,
        s: &WindowSums,
        control_units: u64,
        c: &WindowSums,
        is_control: bool,
    ) -> Side {
        // Value sums are infinite only for rows stored before values were bounded
        // (`traqlyte_store::UNIT_VALUE_ABS_MAX`); their figures are unavailable (`null`)
        // and never reach the statistics, which take finite numbers only.
        let values_ok = s.values_finite();
        let per_unit = |total: f64| (units > 0).then(|| total / units as f64);
        let (value, naive_total) = match metric.kind {
            MetricKind::Conversion => (per_unit(s.units_with_events), s.events + s.duplicates),
            MetricKind::Count => (per_unit(s.events), s.events + s.duplicates),
            MetricKind::Sum if !values_ok => (None, f64::NAN),
            MetricKind::Sum => (per_unit(s.value), s.value + s.duplicate_value),
        };
        let delta = (s.events > 0.0).then(|| s.duplicates / s.events);
        let delta_value = (values_ok && s.value != 0.0).then(|| s.duplicate_value / s.value);
        let mut side = Side {
            units,
            value,
            naive_value: per_unit(naive_total).filter(|v| v.is_finite()),
            value_ci: value_interval(metric.kind, units, s),
            converters: s.units_with_events as u64,
            stored_events: s.events,
            duplicates: s.duplicates,
            delta,
            delta_value,
            lift: None,
            naive_lift: None,
            predicted_naive_lift: None,
        };
        let sum_unavailable = metric.kind == MetricKind::Sum && !(values_ok && c.values_finite());
        if !is_control && !sum_unavailable {
            side.lift = deduped_lift(metric.kind, units, s, control_units, c);
            side.naive_lift = naive_lift(metric.kind, units, s, control_units, c);
            let rate = |sums: &WindowSums| match metric.kind {
                MetricKind::Sum => (sums.value != 0.0).then(|| sums.duplicate_value / sums.value),
                _ => (sums.events > 0.0).then(|| sums.duplicates / sums.events),
            };
            side.predicted_naive_lift =
                match (side.lift.and_then(|l| l.estimate()), rate(s), rate(c)) {
                    (Some(l), Some(dt), Some(dc)) => predicted_naive_lift(l, dt, dc).ok(),
                    _ => None,
                };
        }
        side
    }

    fn to_json(&self, metric: &MetricDef) -> Value {
        let mut out = json!({
            "kind": metric.kind, "window_hours": metric.window_hours, "units": self.units,
            "value": self.value, "naive_value": self.naive_value,
            "value_ci": self.value_ci.map(|(low, high)| json!({"low": low, "high": high})),
            "stored_events": self.stored_events, "duplicates": self.duplicates,
            "delta": self.delta, "delta_value": self.delta_value,
            "lift": self.lift, "naive_lift": self.naive_lift, "predicted_naive_lift": self.predicted_naive_lift,
        });
        if metric.kind == MetricKind::Conversion {
            out["converters"] = json!(self.converters);
        }
        out
    }

    /// A sentence when deduplication changes the conclusion for this arm.
    fn verdict(&self, metric: &MetricDef, arm: &str) -> Option<Value> {
        let (lift, naive) = (self.lift?, self.naive_lift?);
        let pct = |l: &Lift| {
            l.estimate()
                .map(|e| format!("{:+.1}%", e * 100.0))
                .unwrap_or_else(|| "n/a".into())
        };
        let p = |l: &Lift| {
            l.p_value()
                .map(|p| format!("p = {p:.3}"))
                .unwrap_or_else(|| "p n/a".into())
        };
        let message = match (naive.is_significant(), lift.is_significant()) {
            (true, false) => format!(
                "Retry noise alone would have produced a significant {} lift in {} for {arm} ({}); deduplicated, the lift is {} ({}), not significant.",
                pct(&naive), metric.name, p(&naive), pct(&lift), p(&lift)
            ),
            (false, true) => format!(
                "Duplicates would have hidden a real effect: deduplicated, {arm} shows a significant {} lift in {} ({}), while the naive pipeline saw {} ({}).",
                pct(&lift), metric.name, p(&lift), pct(&naive), p(&naive)
            ),
            (true, true) if lift.estimate()?.signum() != naive.estimate()?.signum() => format!(
                "Duplicates flip the sign of {}'s lift for {arm}: naive {} vs deduplicated {}.",
                metric.name, pct(&naive), pct(&lift)
            ),
            _ => return None,
        };
        Some(
            json!({"kind": "dedupe_changes_conclusion", "metric": metric.name, "arm": arm, "message": message}),
        )
    }
}

fn deduped_lift(
    kind: MetricKind,
    units_t: u64,
    t: &WindowSums,
    units_c: u64,
    c: &WindowSums,
) -> Option<Lift> {
    let level = ConfidenceLevel::default();
    match kind {
        MetricKind::Conversion => {
            let control = Proportion::new(c.units_with_events as u64, units_c).ok()?;
            let treatment = Proportion::new(t.units_with_events as u64, units_t).ok()?;
            Some(proportion_lift(control, treatment, level))
        }
        MetricKind::Count => moments_lift(
            (units_c, c.events, c.events_sq),
            (units_t, t.events, t.events_sq),
        ),
        MetricKind::Sum => moments_lift(
            (units_c, c.value, c.value_sq),
            (units_t, t.value, t.value_sq),
        ),
    }
}

/// What a pipeline that keeps every delivery would have computed: per-unit totals with
/// duplicates included (events for conversion and count metrics, value for sums).
fn naive_lift(
    kind: MetricKind,
    units_t: u64,
    t: &WindowSums,
    units_c: u64,
    c: &WindowSums,
) -> Option<Lift> {
    match kind {
        MetricKind::Conversion | MetricKind::Count => moments_lift(
            (units_c, c.events + c.duplicates, c.naive_events_sq),
            (units_t, t.events + t.duplicates, t.naive_events_sq),
        ),
        MetricKind::Sum => moments_lift(
            (units_c, c.value + c.duplicate_value, c.naive_value_sq),
            (units_t, t.value + t.duplicate_value, t.naive_value_sq),
        ),
    }
}

fn moments_lift(control: (u64, f64, f64), treatment: (u64, f64, f64)) -> Option<Lift> {
    let c = Moments::from_totals(control.0, control.1, control.2).ok()?;
    let t = Moments::from_totals(treatment.0, treatment.1, treatment.2).ok()?;
    mean_lift(&c, &t, ConfidenceLevel::default()).ok()
}

/// z for a two-sided 95% normal interval.
const Z_95: f64 = 1.959_963_984_540_054;

/// The arm's own value with a 95% normal-approximation interval: `p ± z·√(p(1−p)/n)` for
/// conversion rates, `mean ± z·s/√n` of the per-unit totals for count and sum metrics.
fn value_interval(kind: MetricKind, units: u64, s: &WindowSums) -> Option<(f64, f64)> {
    let (centre, variance_of_mean) = match kind {
        MetricKind::Conversion => {
            let p = Proportion::new(s.units_with_events as u64, units)
                .ok()?
                .rate();
            (p, p * (1.0 - p) / units as f64)
        }
        MetricKind::Count => per_unit_moments(units, s.events, s.events_sq)?,
        MetricKind::Sum if !s.values_finite() => return None,
        MetricKind::Sum => per_unit_moments(units, s.value, s.value_sq)?,
    };
    let half = Z_95 * variance_of_mean.sqrt();
    half.is_finite().then_some((centre - half, centre + half))
}

fn per_unit_moments(units: u64, sum: f64, sum_sq: f64) -> Option<(f64, f64)> {
    let moments = Moments::from_totals(units, sum, sum_sq).ok()?;
    Some((moments.mean()?, moments.variance_of_mean()?))
}

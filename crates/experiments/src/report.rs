//! The dedupe-aware campaign report, typed: per arm and metric, the deduplicated value
//! and lift, what a pipeline without dedupe would have reported, the bias retries
//! predict, and a plain-language verdict when the two conclusions differ.
//!
//! [`Report::compute`] is a pure function of what the store holds (the campaign, its
//! versions, units per arm and version, per-arm sums, duplicates per hour, collisions per
//! arm and metric); the handler serialises its result, the web page renders it and the
//! demo deserialises it.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use traqlyte_identity::format_rfc3339_micros;
use traqlyte_stats::{
    delta_by_value, estimate_lift, mean_lift, predicted_naive_lift, proportion_lift,
    srm_within_groups, ConfidenceLevel, Lift, Moments, Proportion,
};

use crate::{
    Campaign, CampaignId, CampaignVersion, MetricArmSums, MetricDef, MetricKind, WindowSums,
};

/// `GET /campaigns/{id}/report`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Report {
    /// The campaign's id.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub campaign_id: CampaignId,
    /// The campaign's key.
    pub key: String,
    /// The campaign's name.
    pub name: String,
    /// How many versions were published.
    pub versions: usize,
    /// The campaign version this report is restricted to (`?version=N`): only units
    /// assigned under it count, so no figure pools units of versions whose weights
    /// differ. Absent for the whole campaign.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<i64>,
    /// The confidence level of every interval (0.95).
    pub confidence_level: f64,
    /// The sample-ratio-mismatch check.
    pub srm: SrmReport,
    /// Every arm, the control first.
    pub arms: Vec<ArmReport>,
    /// Plain-language warnings: a sample ratio mismatch first, then weights changed
    /// between versions that have units, then every arm and metric whose conclusion
    /// deduplication changes.
    pub verdicts: Vec<Verdict>,
    /// Duplicate deliveries suppressed per arrival hour and arm.
    pub duplicates_over_time: Vec<DuplicateBucket>,
    /// Outcomes whose value was corrected by a supersession
    /// (`POST /outcomes/{outcome_id}/supersessions`); every figure above uses their
    /// current value.
    #[serde(default)]
    pub corrected_outcomes: u64,
    /// When units were assigned under versions whose weights differ (the
    /// `weights_changed` verdict): each arm's deduplicated value per metric weighed
    /// version by version, so the arms are compared within each version, never across
    /// periods. Absent otherwise, and from the report of one version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stratified: Option<Stratified>,
}

/// The figures of a campaign whose weights changed, estimated per version (stratum) and
/// combined with the same weights for every arm: each version's share of the units of
/// the versions weighed. Deduplicated values on the event-time window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Stratified {
    /// The versions weighed, oldest first: those where every arm has at least 2 units.
    pub versions: Vec<i64>,
    /// Each version's weight (its share of the units of the versions weighed), in the
    /// order of [`Stratified::versions`].
    pub weights: Vec<f64>,
    /// Every arm, the control first.
    pub arms: Vec<StratifiedArm>,
}

/// One arm of [`Stratified`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StratifiedArm {
    /// The arm's key.
    pub key: String,
    /// Whether it is the control.
    pub control: bool,
    /// Each metric, by name.
    pub metrics: BTreeMap<String, StratifiedMetric>,
}

/// One metric of one arm in [`Stratified`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StratifiedMetric {
    /// `Σ w_v · value_v`: conversion rate, events per unit or value per unit.
    pub value: Option<f64>,
    /// 95% normal interval of the value, with variance `Σ w_v² · Var(value_v)`.
    pub value_ci: Option<Interval>,
    /// Relative lift against the control's stratified value (z-test, delta-method
    /// interval); absent for the control.
    pub lift: Option<Lift>,
}

/// Sums per `(version, metric, arm)`, as the store reads them for [`Stratified`].
pub type SumsByVersion = HashMap<(i64, String, String), MetricArmSums>;

impl Stratified {
    /// The stratified figures from each version's units and sums; `None` when no version
    /// has at least 2 units in every arm.
    pub fn compute(
        campaign: &Campaign,
        units_by_version: &[UnitsByVersion],
        sums: &SumsByVersion,
    ) -> Option<Stratified> {
        let mut units: HashMap<(i64, &str), u64> = HashMap::new();
        for row in units_by_version {
            *units.entry((row.version, row.arm.as_str())).or_default() +=
                u64::try_from(row.units).unwrap_or(0);
        }
        let mut versions: Vec<i64> = units_by_version.iter().map(|r| r.version).collect();
        versions.sort_unstable();
        versions.dedup();
        let arm_units = |v: i64, arm: &str| units.get(&(v, arm)).copied().unwrap_or(0);
        versions.retain(|&v| campaign.arms.iter().all(|a| arm_units(v, &a.key) >= 2));
        if versions.is_empty() {
            return None;
        }
        let totals: Vec<f64> = versions
            .iter()
            .map(|&v| {
                campaign
                    .arms
                    .iter()
                    .map(|a| arm_units(v, &a.key) as f64)
                    .sum()
            })
            .collect();
        let all: f64 = totals.iter().sum();
        let weights: Vec<f64> = totals.iter().map(|n| n / all).collect();
        // (value, variance of the value) of one arm and metric, over the strata.
        let estimate = |metric: &MetricDef, arm: &str| -> Option<(f64, f64)> {
            let (mut value, mut variance) = (0.0, 0.0);
            for (&v, w) in versions.iter().zip(&weights) {
                let n = arm_units(v, arm);
                let s = sums
                    .get(&(v, metric.name.clone(), arm.to_string()))
                    .map(|sums| sums.event_time.clone())
                    .unwrap_or_default();
                let (m, var) = value_estimate(metric.kind, n, &s)?;
                value += w * m;
                variance += w * w * var;
            }
            (value.is_finite() && variance.is_finite()).then_some((value, variance))
        };
        // A conversion lift's variance under no effect: per version the rate pooled over
        // the two arms, `Σ w_v²·p̄_v(1 − p̄_v)(1/n_c + 1/n_t)`, as the two-proportion test
        // pools (a version where both arms all converted, or none did, adds nothing, as
        // it adds no difference).
        let null_variance = |arm: &str, control: &str, metric: &str| -> f64 {
            let converters = |v: i64, arm: &str| {
                sums.get(&(v, metric.to_string(), arm.to_string()))
                    .map_or(0.0, |s| s.event_time.units_with_events)
            };
            versions
                .iter()
                .zip(&weights)
                .map(|(&v, w)| {
                    let (n_t, n_c) = (arm_units(v, arm) as f64, arm_units(v, control) as f64);
                    let pooled = (converters(v, arm) + converters(v, control)) / (n_t + n_c);
                    w * w * pooled * (1.0 - pooled) * (1.0 / n_t + 1.0 / n_c)
                })
                .sum()
        };
        let control = &campaign.arms.control().key;
        // The control's estimate of each metric, which every other arm's lift divides by.
        let of_control: Vec<Option<(f64, f64)>> = campaign
            .metrics
            .iter()
            .map(|metric| estimate(metric, control))
            .collect();
        let arms = campaign
            .arms
            .iter()
            .map(|arm| {
                let is_control = arm.key == *control;
                let metrics = campaign
                    .metrics
                    .iter()
                    .zip(&of_control)
                    .map(|(metric, &theirs)| {
                        let mine = if is_control {
                            theirs
                        } else {
                            estimate(metric, &arm.key)
                        };
                        let lift = match (is_control, mine, theirs) {
                            (false, Some(t), Some(c)) => {
                                let null = (metric.kind == MetricKind::Conversion)
                                    .then(|| null_variance(&arm.key, control, &metric.name));
                                estimate_lift(c, t, null, ConfidenceLevel::default()).ok()
                            }
                            _ => None,
                        };
                        let entry = StratifiedMetric {
                            value: mine.map(|(m, _)| m),
                            value_ci: mine
                                .and_then(|(m, var)| normal_interval(m, var))
                                .map(|(low, high)| Interval { low, high }),
                            lift,
                        };
                        (metric.name.clone(), entry)
                    })
                    .collect();
                StratifiedArm {
                    key: arm.key.clone(),
                    control: is_control,
                    metrics,
                }
            })
            .collect();
        Some(Stratified {
            versions,
            weights,
            arms,
        })
    }
}

/// One arm's value and the variance of that value: a rate with `p(1−p)/n`, or a mean of
/// per-unit totals with `s²/n` (`n ≥ 2`). `None` for a sum metric whose values are
/// unavailable, or without the units to estimate it.
fn value_estimate(kind: MetricKind, n: u64, s: &WindowSums) -> Option<(f64, f64)> {
    match kind {
        MetricKind::Conversion => {
            let p = Proportion::new(s.units_with_events as u64, n).ok()?.rate();
            Some((p, p * (1.0 - p) / n as f64))
        }
        MetricKind::Count => per_unit_moments(n, s.events, s.events_sq),
        MetricKind::Sum if !s.values_finite() => None,
        MetricKind::Sum => per_unit_moments(n, s.value, s.value_sq),
    }
}

/// Observed units against the weights of the version each unit was assigned under.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SrmReport {
    /// Pearson's statistic, summed over the versions with units (each against its own
    /// weights); `None` when it cannot be computed (one arm, no units).
    pub chi_square: Option<f64>,
    /// Degrees of freedom: Σ(arms − 1) over the versions with units.
    pub df: Option<u64>,
    /// The p-value: the chi-square tail of the versions that expect at least 5 units in
    /// every arm, exact binomial tails for the others, Bonferroni-combined
    /// (docs/statistics.md).
    pub p_value: Option<f64>,
    /// True when p < 0.001.
    pub flagged: bool,
    /// Expected units per arm, in the order of [`Report::arms`].
    pub expected_units: Vec<f64>,
}

/// One arm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ArmReport {
    /// The arm's key.
    pub key: String,
    /// Whether it is the control.
    pub control: bool,
    /// Units assigned to it.
    pub units: u64,
    /// Each metric, by name.
    pub metrics: BTreeMap<String, MetricReport>,
}

/// One metric in one arm: on event time, with the arrival-time figures beside.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MetricReport {
    /// Figures with the window measured on event time (the report's answer).
    #[serde(flatten)]
    pub event_time: WindowReport,
    /// The same figures with the window measured on arrival time.
    pub arrival_time: WindowReport,
    /// Deliveries that named a stored outcome of this arm and metric (the same
    /// `assignment_id` and `dedupe_key`) with a different payload: refused with
    /// `409 outcome_collision` (a Segment metric binding's is answered `200`, its message
    /// being stored) and logged in `outcome_collisions`, never counted in any figure above.
    /// Unlike `duplicates` (harmless retries) each is a real conflict, a
    /// changed fact sent again instead of corrected. Every delivery counts, whatever its
    /// times: no window applies, so the arrival-time figures do not repeat it.
    #[serde(default)]
    pub collisions: u64,
}

/// One arm's figures for one metric and one window, with lifts against the control.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WindowReport {
    /// The metric's aggregation.
    pub kind: MetricKind,
    /// The metric's window.
    pub window_hours: u32,
    /// Units of the arm.
    pub units: u64,
    /// The deduplicated value: conversion rate, events per unit or value per unit.
    pub value: Option<f64>,
    /// The value with every delivery counted, as a pipeline without dedupe would.
    pub naive_value: Option<f64>,
    /// 95% interval of [`WindowReport::value`] (normal approximation).
    pub value_ci: Option<Interval>,
    /// Outcomes stored.
    pub stored_events: u64,
    /// Duplicate deliveries suppressed.
    pub duplicates: u64,
    /// Duplicate rate by count, δ = duplicates / stored.
    pub delta: Option<f64>,
    /// Duplicate rate by value.
    pub delta_value: Option<f64>,
    /// Deduplicated lift against the control (absent for the control).
    pub lift: Option<Lift>,
    /// Lift a pipeline without dedupe would have reported.
    pub naive_lift: Option<Lift>,
    /// `(1+L)(1+δT)/(1+δC) − 1`: the naive lift the duplicate rates predict.
    pub predicted_naive_lift: Option<f64>,
    /// The L of [`WindowReport::predicted_naive_lift`]: the deduplicated lift of what the
    /// naive lift measures, [`WindowReport::lift`]'s estimate for count and sum metrics,
    /// stored outcomes per unit for conversion metrics (whose `lift` is of converters).
    pub predicted_from_lift: Option<f64>,
    /// Distinct converting units (conversion metrics only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub converters: Option<u64>,
}

/// A confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Interval {
    /// Lower bound.
    pub low: f64,
    /// Upper bound.
    pub high: f64,
}

/// What a verdict is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum VerdictKind {
    /// Units are not split as the weights say.
    Srm,
    /// Deduplication changes an arm's conclusion on a metric.
    DedupeChangesConclusion,
    /// Units were assigned under versions whose weights differ.
    WeightsChanged,
    /// An arm's lift on a metric is significant by its p-value while its interval holds
    /// 0, or the reverse: the test is on the difference, the interval on the ratio.
    IntervalDisagrees,
}

/// A plain-language warning.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Verdict {
    /// What it is about.
    pub kind: VerdictKind,
    /// The metric, for [`VerdictKind::DedupeChangesConclusion`] and
    /// [`VerdictKind::IntervalDisagrees`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    /// The arm, for [`VerdictKind::DedupeChangesConclusion`] and
    /// [`VerdictKind::IntervalDisagrees`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arm: Option<String>,
    /// The sentence shown to people.
    pub message: String,
}

/// Duplicates suppressed in one arrival hour for one arm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DuplicateBucket {
    /// Start of the hour, RFC 3339.
    pub bucket_start: String,
    /// The arm.
    pub arm: String,
    /// Duplicate deliveries suppressed in it.
    pub duplicates: u64,
}

/// Units assigned to one arm under one campaign version, as the store counts them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitsByVersion {
    /// The campaign version the units were assigned under.
    pub version: i64,
    /// The arm's key.
    pub arm: String,
    /// How many units.
    pub units: i64,
}

/// Suppressed duplicates of one arm that arrived in one time bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DuplicatesInBucket {
    /// The bucket's start, microseconds since the epoch.
    pub bucket_start_us: i64,
    /// The arm's key.
    pub arm: String,
    /// How many duplicates.
    pub duplicates: i64,
}

/// What the store holds for one campaign's report.
#[derive(Debug, Clone, Copy)]
pub struct ReportInput<'a> {
    /// The campaign.
    pub campaign: &'a Campaign,
    /// Its published versions, oldest first (at least one).
    pub versions: &'a [CampaignVersion],
    /// Units assigned per version and arm.
    pub units_by_version: &'a [UnitsByVersion],
    /// Sums per `(metric, arm)`.
    pub sums: &'a HashMap<(String, String), MetricArmSums>,
    /// Duplicates per hour and arm.
    pub duplicates_over_time: &'a [DuplicatesInBucket],
    /// Outcomes corrected at least once.
    pub corrected_outcomes: u64,
    /// Logged outcome collisions per `(metric, arm)` of the stored outcome they collided
    /// with; a pair without any is absent.
    pub collisions: &'a HashMap<(String, String), u64>,
}

impl Report {
    /// Computes the report from what the store holds.
    pub fn compute(input: ReportInput<'_>) -> Report {
        let campaign = input.campaign;
        let units = units_per_arm(campaign, input.units_by_version);
        let assigned_under = assigned_per_version(input.units_by_version);
        let srm = srm_report(campaign, input.versions, input.units_by_version);
        let control = &campaign.arms.control().key;
        let mut arms = Vec::with_capacity(campaign.arms.len());
        let mut verdicts = Vec::new();
        for arm in campaign.arms.iter() {
            let mut metrics = BTreeMap::new();
            for metric in &campaign.metrics {
                let sums_of = |key: &str| {
                    input
                        .sums
                        .get(&(metric.name.clone(), key.to_string()))
                        .cloned()
                        .unwrap_or_default()
                };
                let (mine, theirs) = (sums_of(&arm.key), sums_of(control));
                let is_control = arm.key == *control;
                let side = |s: &WindowSums, c: &WindowSums| {
                    Side::compute(metric, units[&arm.key], s, units[control], c, is_control)
                };
                let event = side(&mine.event_time, &theirs.event_time);
                let arrival = side(&mine.arrival_time, &theirs.arrival_time);
                verdicts.extend(event.verdict(metric, &arm.key));
                verdicts.extend(event.disagreement(metric, &arm.key));
                let entry = MetricReport {
                    event_time: event.into_report(metric),
                    arrival_time: arrival.into_report(metric),
                    collisions: input
                        .collisions
                        .get(&(metric.name.clone(), arm.key.clone()))
                        .copied()
                        .unwrap_or(0),
                };
                metrics.insert(metric.name.clone(), entry);
            }
            arms.push(ArmReport {
                key: arm.key.clone(),
                control: arm.key == *control,
                units: units[&arm.key],
                metrics,
            });
        }
        if let Some(verdict) = weights_changed(&campaign.id, input.versions, &assigned_under) {
            verdicts.insert(0, verdict);
        }
        if srm.flagged {
            verdicts.insert(0, Verdict {
                kind: VerdictKind::Srm,
                metric: None,
                arm: None,
                message: "Sample ratio mismatch: units are not split as the weights say (p < 0.001). Fix the assignment path before trusting any lift.".into(),
            });
        }
        let duplicates_over_time = input
            .duplicates_over_time
            .iter()
            .map(|b| DuplicateBucket {
                bucket_start: format_rfc3339_micros(b.bucket_start_us),
                arm: b.arm.clone(),
                duplicates: u64::try_from(b.duplicates).unwrap_or(0),
            })
            .collect();
        Report {
            campaign_id: campaign.id.clone(),
            key: campaign.key.clone(),
            name: campaign.name.clone(),
            versions: input.versions.len(),
            version: None,
            confidence_level: ConfidenceLevel::default().get(),
            srm,
            arms,
            verdicts,
            duplicates_over_time,
            corrected_outcomes: input.corrected_outcomes,
            stratified: None,
        }
    }

    /// Whether the report warns that units were assigned under versions whose weights
    /// differ: the case [`Stratified`] is for.
    pub fn weights_changed(&self) -> bool {
        self.verdicts
            .iter()
            .any(|v| v.kind == VerdictKind::WeightsChanged)
    }

    /// The control arm's report (the first).
    pub fn control(&self) -> Option<&ArmReport> {
        self.arms.iter().find(|arm| arm.control)
    }

    /// The arm with `key`.
    pub fn arm(&self, key: &str) -> Option<&ArmReport> {
        self.arms.iter().find(|arm| arm.key == key)
    }
}

fn units_per_arm(campaign: &Campaign, by_version: &[UnitsByVersion]) -> HashMap<String, u64> {
    let mut units: HashMap<String, u64> =
        campaign.arms.iter().map(|a| (a.key.clone(), 0)).collect();
    for row in by_version {
        *units.entry(row.arm.clone()).or_default() += u64::try_from(row.units).unwrap_or(0);
    }
    units
}

/// Units assigned under each version, in one pass over the rows (a pass per version cost
/// versions × rows, and a campaign may hold 1,000 versions).
fn assigned_per_version(by_version: &[UnitsByVersion]) -> HashMap<i64, i64> {
    let mut assigned: HashMap<i64, i64> = HashMap::new();
    for row in by_version {
        *assigned.entry(row.version).or_default() += row.units;
    }
    assigned
}

/// A warning when units were assigned under versions whose arms' weights differ: the
/// figures pool every unit per arm, and after a reweighting the arms hold units of
/// different ages and periods (an arm given more weight later holds more recent units,
/// with less time to convert), which can bias a lift the sample-ratio check, per
/// version, does not see.
fn weights_changed(
    campaign: &CampaignId,
    versions: &[CampaignVersion],
    assigned: &HashMap<i64, i64>,
) -> Option<Verdict> {
    // Each arm's share of the weight, in the campaign's arm order (a republish keeps it).
    let shares = |version: &CampaignVersion| -> Vec<f64> {
        let total: f64 = version.arms.iter().map(|a| f64::from(a.weight)).sum();
        version
            .arms
            .iter()
            .map(|a| f64::from(a.weight) / total)
            .collect()
    };
    let used: Vec<&CampaignVersion> = versions
        .iter()
        .filter(|v| assigned.get(&v.version).is_some_and(|n| *n > 0))
        .collect();
    let (first, rest) = used.split_first()?;
    let first_shares = shares(first);
    let changed = rest.iter().find(|v| {
        shares(v)
            .iter()
            .zip(&first_shares)
            .any(|(a, b)| (a - b).abs() > 1e-12)
    })?;
    Some(Verdict {
        kind: VerdictKind::WeightsChanged,
        metric: None,
        arm: None,
        message: format!(
            "The arms' weights changed between version {} and version {}, and units were assigned under both: the figures pool them, so an arm weighted more later holds more recent units (less time to convert, another period) and its lift can be biased. Read the stratified figures (`stratified`: the arms compared within each version, given when some version has at least 2 units in every arm), or each version's units alone (GET /campaigns/{}/report?version=N).",
            first.version, changed.version, campaign.as_str()
        ),
    })
}

/// Chi-square of observed units against the weights of the version each unit was
/// assigned under: each version's units tested against its own weights, the statistics
/// summed ([`srm_within_groups`]), so a mismatch inside one version is not diluted by the
/// others' units or cancelled by an opposite one. The expected units per arm shown beside
/// it are the versions' expectations added up.
fn srm_report(
    campaign: &Campaign,
    versions: &[CampaignVersion],
    by_version: &[UnitsByVersion],
) -> SrmReport {
    let mut observed: HashMap<(i64, &str), u64> = HashMap::new();
    for row in by_version {
        *observed.entry((row.version, row.arm.as_str())).or_default() +=
            u64::try_from(row.units).unwrap_or(0);
    }
    let mut expected: HashMap<&str, f64> = HashMap::new();
    let mut groups: Vec<(Vec<u64>, Vec<f64>)> = Vec::with_capacity(versions.len());
    for version in versions {
        let counts: Vec<u64> = version
            .arms
            .iter()
            .map(|a| {
                let key = (version.version, a.key.as_str());
                observed.get(&key).copied().unwrap_or(0)
            })
            .collect();
        let weights: Vec<f64> = version.arms.iter().map(|a| f64::from(a.weight)).collect();
        let assigned: u64 = counts.iter().sum();
        let total_weight: f64 = weights.iter().sum();
        for (arm, weight) in version.arms.iter().zip(&weights) {
            *expected.entry(arm.key.as_str()).or_default() +=
                assigned as f64 * weight / total_weight;
        }
        groups.push((counts, weights));
    }
    let expected_units: Vec<f64> = campaign
        .arms
        .iter()
        .map(|a| expected.get(a.key.as_str()).copied().unwrap_or(0.0))
        .collect();
    let groups: Vec<(&[u64], &[f64])> = groups
        .iter()
        .map(|(o, w)| (o.as_slice(), w.as_slice()))
        .collect();
    let tested = srm_within_groups(&groups);
    match tested {
        Ok(result) => SrmReport {
            chi_square: Some(result.chi_square()),
            df: Some(result.df()),
            p_value: Some(result.p_value()),
            flagged: result.flagged(),
            expected_units,
        },
        Err(_) => SrmReport {
            chi_square: None,
            df: None,
            p_value: None,
            flagged: false,
            expected_units,
        },
    }
}

/// One arm's figures for one metric and one window, with lifts against the control.
struct Side {
    units: u64,
    value: Option<f64>,
    naive_value: Option<f64>,
    value_ci: Option<(f64, f64)>,
    converters: u64,
    stored_events: u64,
    duplicates: u64,
    delta: Option<f64>,
    delta_value: Option<f64>,
    lift: Option<Lift>,
    naive_lift: Option<Lift>,
    /// The deduplicated lift of the quantity the naive lift measures: [`Side::lift`] for
    /// count and sum metrics; for conversion metrics stored outcomes per unit, not
    /// converters, so that repeat conversions of one unit (distinct business facts) are
    /// never taken for retry noise.
    retry_free_lift: Option<Lift>,
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
        // Value sums are infinite only for rows stored before values were bounded; their
        // figures are unavailable (`null`) and never reach the statistics, which take
        // finite numbers only.
        let values_ok = s.values_finite();
        let per_unit = |total: f64| (units > 0).then(|| total / units as f64);
        let (value, naive_total) = match metric.kind {
            MetricKind::Conversion => (per_unit(s.units_with_events), s.events + s.duplicates),
            MetricKind::Count => (per_unit(s.events), s.events + s.duplicates),
            MetricKind::Sum if !values_ok => (None, f64::NAN),
            MetricKind::Sum => (per_unit(s.value), s.value + s.duplicate_value),
        };
        let mut side = Side {
            units,
            value,
            naive_value: per_unit(naive_total).filter(|v| v.is_finite()),
            value_ci: value_interval(metric.kind, units, s),
            converters: s.units_with_events as u64,
            // Counts of rows, summed as floats alongside the values: whole numbers,
            // answered as JSON integers like every count of the API.
            stored_events: s.events.round() as u64,
            duplicates: s.duplicates.round() as u64,
            delta: (s.events > 0.0).then(|| s.duplicates / s.events),
            delta_value: by_value(s).filter(|_| values_ok),
            lift: None,
            naive_lift: None,
            retry_free_lift: None,
            predicted_naive_lift: None,
        };
        let sum_unavailable = metric.kind == MetricKind::Sum && !(values_ok && c.values_finite());
        if !is_control && !sum_unavailable {
            side.lift = deduped_lift(metric.kind, units, s, control_units, c);
            side.naive_lift = naive_lift(metric.kind, units, s, control_units, c);
            side.retry_free_lift = match metric.kind {
                MetricKind::Conversion => {
                    deduped_lift(MetricKind::Count, units, s, control_units, c)
                }
                MetricKind::Count | MetricKind::Sum => side.lift,
            };
            let rate = |sums: &WindowSums| match metric.kind {
                MetricKind::Sum => by_value(sums),
                _ => (sums.events > 0.0).then(|| sums.duplicates / sums.events),
            };
            side.predicted_naive_lift = match (
                side.retry_free_lift.and_then(|l| l.estimate()),
                rate(s),
                rate(c),
            ) {
                (Some(l), Some(dt), Some(dc)) => predicted_naive_lift(l, dt, dc).ok(),
                _ => None,
            };
        }
        side
    }

    fn into_report(self, metric: &MetricDef) -> WindowReport {
        WindowReport {
            kind: metric.kind,
            window_hours: metric.window_hours,
            units: self.units,
            value: self.value,
            naive_value: self.naive_value,
            value_ci: self.value_ci.map(|(low, high)| Interval { low, high }),
            stored_events: self.stored_events,
            duplicates: self.duplicates,
            delta: self.delta,
            delta_value: self.delta_value,
            lift: self.lift,
            naive_lift: self.naive_lift,
            predicted_naive_lift: self.predicted_naive_lift,
            predicted_from_lift: self
                .predicted_naive_lift
                .and(self.retry_free_lift)
                .and_then(|l| l.estimate()),
            converters: (metric.kind == MetricKind::Conversion).then_some(self.converters),
        }
    }

    /// A sentence when deduplication changes the conclusion for this arm: the naive lift
    /// against the deduplicated lift of the same quantity (for a conversion metric,
    /// outcomes per unit, named so in the sentence).
    fn verdict(&self, metric: &MetricDef, arm: &str) -> Option<Verdict> {
        let (lift, naive) = (self.retry_free_lift?, self.naive_lift?);
        let name = match metric.kind {
            MetricKind::Conversion => format!("{} events per unit", metric.name),
            MetricKind::Count | MetricKind::Sum => metric.name.clone(),
        };
        let pct = |l: &Lift| {
            l.estimate()
                .map(|e| format!("{:+.1}%", e * 100.0))
                .unwrap_or_else(|| "n/a".into())
        };
        // As the page's tables write it: four decimals, never "p = 0.0000".
        let p = |l: &Lift| match l.p_value() {
            Some(p) if p < 0.0001 => "p < 0.0001".to_string(),
            Some(p) => format!("p = {p:.4}"),
            None => "p n/a".into(),
        };
        let message = match (naive.is_significant(), lift.is_significant()) {
            (true, false) => format!(
                "Retry noise alone would have produced a significant {} lift in {} for {arm} ({}); deduplicated, the lift is {} ({}), not significant.",
                pct(&naive), name, p(&naive), pct(&lift), p(&lift)
            ),
            (false, true) => format!(
                "Duplicates would have hidden a real effect: deduplicated, {arm} shows a significant {} lift in {} ({}), while the naive pipeline saw {} ({}).",
                pct(&lift), name, p(&lift), pct(&naive), p(&naive)
            ),
            (true, true) if lift.estimate()?.signum() != naive.estimate()?.signum() => format!(
                "Duplicates flip the sign of {}'s lift for {arm}: naive {} vs deduplicated {}.",
                name, pct(&naive), pct(&lift)
            ),
            _ => return None,
        };
        Some(Verdict {
            kind: VerdictKind::DedupeChangesConclusion,
            metric: Some(metric.name.clone()),
            arm: Some(arm.to_string()),
            message,
        })
    }

    /// A sentence when this arm's deduplicated lift is significant by its p-value while
    /// its interval holds 0, or the reverse (docs/statistics.md: the test is on the
    /// difference, the interval on the ratio): a GrowthBook or Statsig user reads the two
    /// as one, and the report showed them side by side with nothing said.
    fn disagreement(&self, metric: &MetricDef, arm: &str) -> Option<Verdict> {
        let lift = self.lift?;
        let (low, high) = lift.ci()?;
        let p = lift.p_value()?;
        let excludes_zero = low > 0.0 || high < 0.0;
        if lift.is_significant() == excludes_zero {
            return None;
        }
        let level = lift.confidence_level().get() * 100.0;
        let (test, interval) = if lift.is_significant() {
            ("significant", "holds 0")
        } else {
            ("not significant", "excludes 0")
        };
        Some(Verdict {
            kind: VerdictKind::IntervalDisagrees,
            metric: Some(metric.name.clone()),
            arm: Some(arm.to_string()),
            message: format!(
                "For {arm} on {}, the test says {test} (p = {p:.4}) but the {level:.0}% interval of the lift, [{:+.1}%, {:+.1}%], {interval}: the test is on the difference and the interval on the ratio, so read this result as unsettled and collect more units.",
                metric.name,
                low * 100.0,
                high * 100.0
            ),
        })
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

/// The duplicate rate by value, `None` where the stored sum is zero or the rate is not a
/// finite number (a sum nearly cancelled by refunds).
fn by_value(sums: &WindowSums) -> Option<f64> {
    delta_by_value(sums.duplicate_value, sums.value)
        .ok()
        .flatten()
}

/// The arm's own value with a 95% normal-approximation interval: `p ± z·√(p(1−p)/n)` for
/// conversion rates, `mean ± z·s/√n` of the per-unit totals for count and sum metrics.
fn value_interval(kind: MetricKind, units: u64, s: &WindowSums) -> Option<(f64, f64)> {
    let (centre, variance) = value_estimate(kind, units, s)?;
    normal_interval(centre, variance)
}

/// `centre ± z·√variance` at 95%, when finite and of some width: a zero-width interval
/// (an arm at 0 % or 100 %, a constant one) would claim a certainty the data cannot give.
fn normal_interval(centre: f64, variance: f64) -> Option<(f64, f64)> {
    let half = Z_95 * variance.sqrt();
    (half.is_finite() && half > 0.0).then_some((centre - half, centre + half))
}

fn per_unit_moments(units: u64, sum: f64, sum_sq: f64) -> Option<(f64, f64)> {
    let moments = Moments::from_totals(units, sum, sum_sq).ok()?;
    Some((moments.mean()?, moments.variance_of_mean()?))
}

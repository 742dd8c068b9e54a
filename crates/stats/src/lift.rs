use serde::{Deserialize, Serialize};

use crate::dist;
use crate::error::{finite, Arm, StatsError};
use crate::moments::Moments;

/// A confidence level strictly between 0 and 1, such as 0.95 for a 95 % interval.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(transparent)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ConfidenceLevel(f64);

impl ConfidenceLevel {
    /// The 95 % level the report uses by default.
    pub const NINETY_FIVE: ConfidenceLevel = ConfidenceLevel(0.95);

    /// Checks that `level` lies strictly between 0 and 1.
    ///
    /// # Errors
    /// [`StatsError::ConfidenceLevelOutOfRange`] otherwise (NaN included).
    pub fn new(level: f64) -> Result<Self, StatsError> {
        if level > 0.0 && level < 1.0 {
            Ok(Self(level))
        } else {
            Err(StatsError::ConfidenceLevelOutOfRange(level))
        }
    }

    /// The level as a number, e.g. 0.95.
    pub fn get(self) -> f64 {
        self.0
    }

    /// The two-sided significance level `α = 1 − level`.
    pub fn alpha(self) -> f64 {
        1.0 - self.0
    }
}

impl Default for ConfidenceLevel {
    fn default() -> Self {
        Self::NINETY_FIVE
    }
}

impl TryFrom<f64> for ConfidenceLevel {
    type Error = StatsError;

    fn try_from(level: f64) -> Result<Self, StatsError> {
        Self::new(level)
    }
}

/// Converters out of units for one arm of a conversion metric; `conversions ≤ units` and
/// `units > 0` hold by construction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proportion {
    conversions: u64,
    units: u64,
}

impl Proportion {
    /// Checks and wraps `conversions` out of `units`.
    ///
    /// # Errors
    /// [`StatsError::NoUnits`] for `units = 0`, [`StatsError::ConversionsExceedUnits`] when
    /// `conversions > units`.
    pub fn new(conversions: u64, units: u64) -> Result<Self, StatsError> {
        if units == 0 {
            return Err(StatsError::NoUnits);
        }
        if conversions > units {
            return Err(StatsError::ConversionsExceedUnits { conversions, units });
        }
        Ok(Self { conversions, units })
    }

    /// Number of converting units.
    pub fn conversions(&self) -> u64 {
        self.conversions
    }

    /// Number of units.
    pub fn units(&self) -> u64 {
        self.units
    }

    /// The rate `conversions / units`.
    pub fn rate(&self) -> f64 {
        self.conversions as f64 / self.units as f64
    }

    /// Variance of the rate estimate, `p(1 − p) / n`.
    fn variance_of_rate(&self) -> f64 {
        let p = self.rate();
        p * (1.0 - p) / self.units as f64
    }
}

/// Relative lift of treatment over control, `treatment / control − 1`, with a two-sided
/// confidence interval and p-value.
///
/// Every field is an `Option` so that a degenerate comparison serialises as `null` rather
/// than NaN; the functions that build a `Lift` document when each field is `None`. The
/// interval bounds are either both present or both absent.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Lift {
    estimate: Option<f64>,
    ci_low: Option<f64>,
    ci_high: Option<f64>,
    p_value: Option<f64>,
    confidence_level: ConfidenceLevel,
    statistic: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    df: Option<f64>,
}

impl Lift {
    /// The relative lift `t / c − 1`; `None` when the control value is zero.
    pub fn estimate(&self) -> Option<f64> {
        self.estimate
    }

    /// Lower bound of the confidence interval for the relative lift.
    pub fn ci_low(&self) -> Option<f64> {
        self.ci_low
    }

    /// Upper bound of the confidence interval for the relative lift.
    pub fn ci_high(&self) -> Option<f64> {
        self.ci_high
    }

    /// Both interval bounds, `(low, high)`, when the interval is defined.
    pub fn ci(&self) -> Option<(f64, f64)> {
        self.ci_low.zip(self.ci_high)
    }

    /// Two-sided p-value of the test of no difference.
    pub fn p_value(&self) -> Option<f64> {
        self.p_value
    }

    /// The confidence level of the interval.
    pub fn confidence_level(&self) -> ConfidenceLevel {
        self.confidence_level
    }

    /// The test statistic: z for proportions, Welch's t for means.
    pub fn statistic(&self) -> Option<f64> {
        self.statistic
    }

    /// Welch–Satterthwaite degrees of freedom for a mean comparison; `None` for
    /// proportions (a z-test) or when undefined.
    pub fn df(&self) -> Option<f64> {
        self.df
    }

    /// Whether the p-value is defined and strictly below `1 − confidence level`. The test
    /// is on the difference and the interval on the ratio (delta method), so near the
    /// boundary the interval can include zero lift while this holds, or exclude it while
    /// this does not (docs/statistics.md).
    pub fn is_significant(&self) -> bool {
        self.p_value
            .is_some_and(|p| p < self.confidence_level.alpha())
    }
}

/// Compares two conversion rates with a two-proportion z-test.
///
/// - p-value: `z = (p_t − p_c) / √(p̂(1 − p̂)(1/n_t + 1/n_c))` with the pooled rate
///   `p̂ = (x_t + x_c) / (n_t + n_c)`, two-sided normal tail.
/// - interval: delta method on `r = p_t / p_c`,
///   `Var(r) ≈ (v_t + r²·v_c) / p_c²` with `v = p(1 − p)/n` (the same as
///   `r²(v_t/p_t² + v_c/p_c²)`, written so that `p_t = 0` is not a division by zero),
///   then `(r ± z_{1−α/2}·√Var(r)) − 1`.
///
/// Degenerate cases, all `None` rather than NaN:
/// - `p_c = 0`: estimate and interval are `None` (a relative change from zero is
///   undefined); the p-value is still reported when treatment has conversions.
/// - pooled rate 0 or 1 (no arm converts, or every unit converts): statistic and p-value
///   are `None`, there is no variation to test.
/// - `Var(r) = 0` (e.g. `p_t = 0`, or both rates 0 or 1): the interval is `None`, since a
///   zero-width interval would claim a certainty the data cannot give.
/// - too few units for the normal approximation ([`NORMAL_APPROXIMATION_MIN`]): the test
///   (statistic, p-value) needs `n·p̂ ≥ 5` and `n·(1 − p̂) ≥ 5` in each arm, the interval
///   at least 5 converting and 5 non-converting units in each arm; otherwise `None`. One
///   converting unit against 30 of 300 gave a +900 % lift with p = 0.003 (Fisher's exact
///   test: 0.10); GrowthBook gives no result there either.
pub fn proportion_lift(control: Proportion, treatment: Proportion, level: ConfidenceLevel) -> Lift {
    let (n_c, n_t) = (control.units as f64, treatment.units as f64);
    let pooled = (control.conversions + treatment.conversions) as f64 / (n_c + n_t);
    let mut lift = z_lift(
        (control.rate(), control.variance_of_rate()),
        (treatment.rate(), treatment.variance_of_rate()),
        pooled * (1.0 - pooled) * (1.0 / n_t + 1.0 / n_c),
        level,
    );
    let min = NORMAL_APPROXIMATION_MIN;
    let expected_enough = [n_c, n_t]
        .iter()
        .all(|n| n * pooled >= min && n * (1.0 - pooled) >= min);
    if !expected_enough {
        lift.statistic = None;
        lift.p_value = None;
    }
    let observed_enough = [control, treatment]
        .iter()
        .all(|arm| arm.conversions as f64 >= min && (arm.units - arm.conversions) as f64 >= min);
    if !observed_enough {
        lift.ci_low = None;
        lift.ci_high = None;
    }
    lift
}

/// The least expected (test) or observed (interval) count of converting and of
/// non-converting units in each arm for the normal approximation of a conversion
/// comparison ([`proportion_lift`]): the textbook rule `n·p ≥ 5`, `n·(1 − p) ≥ 5`.
pub const NORMAL_APPROXIMATION_MIN: f64 = 5.0;

/// Compares two means with Welch's unequal-variance t-test.
///
/// - p-value: `t = (m_t − m_c) / √(v_t + v_c)` with `v = s²/n`, two-sided Student's t tail
///   at the Welch–Satterthwaite degrees of freedom
///   `df = (v_t + v_c)² / (v_t²/(n_t − 1) + v_c²/(n_c − 1))`.
/// - interval: delta method on `r = m_t / m_c`, `Var(r) ≈ (v_t + r²·v_c) / m_c²`, then
///   `(r ± t_{df, 1−α/2}·√Var(r)) − 1` using the same Welch df.
///
/// Degenerate cases, all `None` rather than NaN:
/// - `m_c ≤ 0`: estimate and interval are `None`; the test is still reported.
/// - an arm with a single unit: its variance is undefined, so statistic, df, p-value and
///   interval are `None` (the estimate is still given).
/// - `v_t + v_c = 0` (both arms constant): statistic, df, p-value and interval are `None`.
/// - `Var(r) = 0` (e.g. `m_t = 0` with a constant control): the interval is `None`.
///
/// Negative values are allowed (refunds); a control mean of zero or below has no
/// relative lift (estimate and interval `None`), and the test is still reported.
///
/// # Errors
/// [`StatsError::EmptyArm`] when either arm has no values.
pub fn mean_lift(
    control: &Moments,
    treatment: &Moments,
    level: ConfidenceLevel,
) -> Result<Lift, StatsError> {
    let m_c = control.mean().ok_or(StatsError::EmptyArm(Arm::Control))?;
    let m_t = treatment
        .mean()
        .ok_or(StatsError::EmptyArm(Arm::Treatment))?;
    let welch = control
        .variance_of_mean()
        .zip(treatment.variance_of_mean())
        .and_then(|(v_c, v_t)| welch(v_c, control.count(), v_t, treatment.count()));
    let statistic = welch.map(|w| (m_t - m_c) / w.se);
    let df = welch.map(|w| w.df);
    let p_value = statistic
        .zip(df)
        .and_then(|(t, df)| dist::t_two_sided_p(t, df));
    let interval = welch.and_then(|w| {
        let t = dist::t_two_sided_quantile(level.alpha(), w.df)?;
        delta_method_interval(m_c, m_t, w.v_c, w.v_t, t)
    });
    Ok(Lift::of(
        (m_c, m_t),
        interval,
        (statistic, p_value, df),
        level,
    ))
}

/// Relative lift of two estimates known by their values and the variances of those
/// values, with a z-test and a normal delta-method interval: for estimates that are not
/// one sample's mean, such as a stratified mean `Σ w_s·m_s` with variance `Σ w_s²·v_s`
/// (the weights fixed, the strata independent). The statistic divides the difference by
/// `√null_variance` when given (the variance of the difference under no effect, e.g.
/// from pooled rates, as the two-proportion test does), else by `√(v_c + v_t)`; the
/// interval always uses `v_c` and `v_t`. `statistic` and `p_value` are `None` when that
/// variance is zero, the interval also when the control's estimate is zero.
///
/// # Errors
/// [`StatsError::NotFinite`] when an estimate or a variance is not finite,
/// [`StatsError::NegativeVariance`] when a variance is negative.
pub fn estimate_lift(
    (m_c, v_c): (f64, f64),
    (m_t, v_t): (f64, f64),
    null_variance: Option<f64>,
    level: ConfidenceLevel,
) -> Result<Lift, StatsError> {
    let (m_c, m_t) = (
        finite("control estimate", m_c)?,
        finite("treatment estimate", m_t)?,
    );
    let (v_c, v_t) = (
        finite("control variance", v_c)?,
        finite("treatment variance", v_t)?,
    );
    let v_0 = finite("null variance", null_variance.unwrap_or(v_c + v_t))?;
    if v_c < 0.0 || v_t < 0.0 || v_0 < 0.0 {
        return Err(StatsError::NegativeVariance(v_c.min(v_t).min(v_0)));
    }
    Ok(z_lift((m_c, v_c), (m_t, v_t), v_0, level))
}

/// The z-test of two estimates (their values and the variances of those values) on the
/// variance of their difference under no effect `v_0`, with the normal delta-method
/// interval on their own variances: the two-proportion test's and the stratified one's.
fn z_lift(
    (m_c, v_c): (f64, f64),
    (m_t, v_t): (f64, f64),
    v_0: f64,
    level: ConfidenceLevel,
) -> Lift {
    let se = v_0.sqrt();
    let statistic = (se > 0.0).then(|| (m_t - m_c) / se);
    let p_value = statistic.and_then(dist::normal_two_sided_p);
    let z = dist::normal_quantile(1.0 - level.alpha() / 2.0);
    let interval = z.and_then(|z| delta_method_interval(m_c, m_t, v_c, v_t, z));
    Lift::of((m_c, m_t), interval, (statistic, p_value, None), level)
}

impl Lift {
    /// The lift of `(control, treatment)` estimates: `t / c − 1`, the interval on it, and
    /// the test's `(statistic, p-value, df)`.
    fn of(
        (control, treatment): (f64, f64),
        interval: Option<(f64, f64)>,
        (statistic, p_value, df): (Option<f64>, Option<f64>, Option<f64>),
        level: ConfidenceLevel,
    ) -> Lift {
        Lift {
            estimate: relative(control, treatment),
            ci_low: interval.map(|(low, _)| low),
            ci_high: interval.map(|(_, high)| high),
            p_value,
            confidence_level: level,
            statistic,
            df,
        }
    }
}

/// The pieces of Welch's test shared by the p-value and the interval.
#[derive(Clone, Copy)]
struct Welch {
    v_c: f64,
    v_t: f64,
    se: f64,
    df: f64,
}

/// Welch's standard error and Welch–Satterthwaite df from the squared standard errors of
/// the two means; `None` when both are zero.
fn welch(v_c: f64, n_c: u64, v_t: f64, n_t: u64) -> Option<Welch> {
    let total = v_c + v_t;
    if total <= 0.0 {
        return None;
    }
    // Each arm here has n ≥ 2, because its variance is defined.
    let denominator = v_t * v_t / (n_t as f64 - 1.0) + v_c * v_c / (n_c as f64 - 1.0);
    let df = total * total / denominator;
    (df.is_finite() && df > 0.0).then(|| Welch {
        v_c,
        v_t,
        se: total.sqrt(),
        df,
    })
}

/// `t / c − 1`, `None` when `c = 0` or the ratio is not finite.
/// `t / c − 1`; `None` unless the control is positive: against a zero or negative
/// baseline a relative change has no meaning a reader can take (a refund metric whose
/// mean went from −10 to −11.55 read as a "+15.5 % lift"), as GrowthBook also has it.
fn relative(control: f64, treatment: f64) -> Option<f64> {
    let r = treatment / control;
    (control > 0.0 && r.is_finite()).then_some(r - 1.0)
}

/// Delta-method interval for `t / c − 1` given the variances of the two estimates and the
/// critical value; `None` when `c = 0` or the variance of the ratio is zero.
fn delta_method_interval(c: f64, t: f64, v_c: f64, v_t: f64, critical: f64) -> Option<(f64, f64)> {
    if c <= 0.0 {
        return None;
    }
    let r = t / c;
    let variance = (v_t + r * r * v_c) / (c * c);
    let half_width = critical * variance.sqrt();
    (variance > 0.0 && half_width.is_finite())
        .then_some((r - half_width - 1.0, r + half_width - 1.0))
}

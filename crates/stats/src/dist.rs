//! The distribution tails and quantiles the tests need, as non-panicking functions that
//! return `None` rather than NaN outside their domain, so a degenerate case maps straight
//! to a `null` field.
//!
//! `statrs` supplies the log-gamma function, the regularized upper incomplete gamma
//! function and the normal quantile, all accurate to a few ulps. Two of its functions are
//! not used, for accuracy measured against SciPy:
//! - `erfc` is only good to about 1e-10 relative in statrs 0.18 (its interval constants
//!   were transcribed from Boost's `float` literals with ten digits; fixed upstream in
//!   statrs PR #412, after the 0.19 line, which also needs a newer Rust than ours). The
//!   normal tail is computed instead as the chi-square tail with one degree of freedom,
//!   `P(|Z| ≥ z) = Q(1/2, z²/2)`, good to about 1e-15.
//! - `beta_reg` stops after 140 continued-fraction terms and forms its prefactor from
//!   `ln Γ(a + b) − ln Γ(a) − ln Γ(b)`, which at a Welch df near 10⁶ loses about 1e-9
//!   of relative precision (growing with df). The Student's t tail below is the same
//!   Lentz continued fraction with a larger (still bounded) term count, the log-beta
//!   difference taken from Stirling's series, and the complementary fraction used for
//!   moderate t at large df. Measured against mpmath at 40 digits over t from 0.1 to 10,
//!   its relative error is below 3e-13 for df ≤ 10⁴, 2e-11 at 10⁶, 3e-10 at 10⁷ and
//!   3e-9 at 10⁸ (a hundred-million-unit experiment); a Temme or DiDonato–Morris
//!   expansion would be the next step if that ever matters.

use statrs::distribution::{ContinuousCDF, Normal};
use statrs::function::{beta, gamma};

/// Upper bound on continued-fraction terms for the incomplete beta function. The
/// fraction needs about `√a` terms near its switch-over point, so this covers `a` up to
/// 10⁸ (df up to 2·10⁸) with margin.
const BETA_FRACTION_TERMS_MAX: usize = 50_000;

/// Degrees of freedom above which a moderate t statistic is evaluated through the
/// complementary fraction; see [`t_two_sided_p`].
const LARGE_DF: f64 = 1000.0;

/// Degrees of freedom above which a t quantile starts from its Cornish–Fisher expansion
/// instead of `statrs`'s inverse incomplete beta function.
const EXPANSION_DF: f64 = 1e5;

/// Newton refinements of a t quantile; each one roughly squares the relative error.
const QUANTILE_NEWTON_STEPS_MAX: usize = 8;

/// Two-sided p-value of a standard normal statistic, `P(|Z| ≥ |z|)`.
pub(crate) fn normal_two_sided_p(z: f64) -> Option<f64> {
    if !z.is_finite() {
        return None;
    }
    let z_squared = z * z;
    if z_squared.is_infinite() {
        return Some(0.0);
    }
    chi_square_sf(z_squared, 1.0)
}

/// The standard normal quantile `Φ⁻¹(p)` for `p` strictly inside (0, 1).
pub(crate) fn normal_quantile(p: f64) -> Option<f64> {
    (p > 0.0 && p < 1.0).then(|| Normal::standard().inverse_cdf(p))
}

/// Upper tail `P(X ≥ x)` of the chi-square distribution with `df` degrees of freedom:
/// `Q(df/2, x/2)`, the regularized upper incomplete gamma function.
pub(crate) fn chi_square_sf(x: f64, df: f64) -> Option<f64> {
    if !x.is_finite() || !df.is_finite() || df <= 0.0 || x < 0.0 {
        return None;
    }
    if x == 0.0 {
        return Some(1.0);
    }
    gamma::checked_gamma_ur(df / 2.0, x / 2.0)
        .ok()
        .filter(|p| p.is_finite())
}

/// Two-sided p-value of Student's t statistic with `df` degrees of freedom:
/// `P(|T| ≥ |t|) = I_x(df/2, 1/2)` with `x = df / (df + t²)`.
pub(crate) fn t_two_sided_p(t: f64, df: f64) -> Option<f64> {
    if !t.is_finite() || !df.is_finite() || df <= 0.0 {
        return None;
    }
    let t_squared = t * t;
    if t_squared == 0.0 {
        return Some(1.0);
    }
    let (a, b) = (df / 2.0, 0.5);
    // x = df/(df + t²) and y = 1 − x = t²/(df + t²), each computed without cancellation.
    let x = df / (df + t_squared);
    let y = t_squared / (df + t_squared);
    let ln_prefactor = -a * (t_squared / df).ln_1p() + b * y.ln() - ln_beta_a_half(a);
    let prefactor = ln_prefactor.exp();
    // The fraction in `x` is the textbook choice below its switch-over point, but at large
    // df it needs thousands of terms and drifts (about 2e-11 relative at df = 10⁶, 2e-9 at
    // 10⁸, measured against mpmath). The fraction in `y` stays near 1e-13 there, and
    // `1 − I_y` loses a factor 1/p to cancellation, which t² < 9 (p > 0.0027) bounds.
    let large_df_moderate_t = df > LARGE_DF && t_squared < 9.0;
    let p = if x < (a + 1.0) / (a + b + 2.0) && !large_df_moderate_t {
        prefactor * beta_fraction(a, b, x)? / a
    } else {
        1.0 - prefactor * beta_fraction(b, a, y)? / b
    };
    (p.is_finite()).then(|| p.clamp(0.0, 1.0))
}

/// The `t > 0` with `P(|T| ≥ t) = alpha` for Student's t with `df` degrees of freedom,
/// i.e. the `1 − alpha/2` quantile used for a two-sided interval.
///
/// Starts from `statrs`'s inverse incomplete beta function (good to about 1e-9), or above
/// `EXPANSION_DF` from the Cornish–Fisher expansion, and polishes with Newton steps on
/// [`t_two_sided_p`].
pub(crate) fn t_two_sided_quantile(alpha: f64, df: f64) -> Option<f64> {
    let valid = alpha > 0.0 && alpha < 1.0 && df.is_finite() && df > 0.0;
    if !valid {
        return None;
    }
    let z = normal_quantile(1.0 - alpha / 2.0)?;
    let mut t = if df > EXPANSION_DF {
        // statrs's inverse never returns beyond df ≈ 1.44·10⁷ (its Newton step overflows
        // to ∞, then NaN, and its step-shrinking loop has no exit): a report of a
        // seven-million-unit-per-arm campaign hung a worker. The expansion is exact to
        // the last bits here (its first omitted term is below 1e-19 at df = 10⁵).
        cornish_fisher_t(z, df)
    } else {
        let y = beta::inv_beta_reg(df / 2.0, 0.5, alpha);
        (df * (1.0 - y) / y).sqrt()
    };
    if !(t.is_finite() && t > 0.0) {
        t = z;
    }
    for _ in 0..QUANTILE_NEWTON_STEPS_MAX {
        // d/dt P(|T| ≥ t) = −2·f(t), with f the Student's t density.
        let Some(p) = t_two_sided_p(t, df) else {
            // Beyond the fraction's reach (df ≳ 2·10⁸) the expansion stands alone.
            return (df > EXPANSION_DF && t.is_finite() && t > 0.0).then_some(t);
        };
        let step = (p - alpha) / (2.0 * t_density(t, df));
        if !step.is_finite() {
            return None;
        }
        t += step;
        if step.abs() <= 4.0 * f64::EPSILON * t.abs() {
            break;
        }
    }
    (t.is_finite() && t > 0.0).then_some(t)
}

/// The Cornish–Fisher expansion of Student's t quantile around the normal quantile `z`
/// (Abramowitz & Stegun 26.7.5), to the `1/df³` term.
fn cornish_fisher_t(z: f64, df: f64) -> f64 {
    let z2 = z * z;
    let g1 = (z2 + 1.0) * z / 4.0;
    let g2 = ((5.0 * z2 + 16.0) * z2 + 3.0) * z / 96.0;
    let g3 = (((3.0 * z2 + 19.0) * z2 + 17.0) * z2 - 15.0) * z / 384.0;
    z + g1 / df + g2 / (df * df) + g3 / (df * df * df)
}

/// Student's t density, `(1 + t²/df)^(−(df+1)/2) / (√df · B(df/2, 1/2))`.
fn t_density(t: f64, df: f64) -> f64 {
    let a = df / 2.0;
    (-ln_beta_a_half(a) - 0.5 * df.ln() - (a + 0.5) * (t * t / df).ln_1p()).exp()
}

/// `ln B(a, 1/2) = ln Γ(a) + ln Γ(1/2) − ln Γ(a + 1/2)`.
///
/// For large `a` the two log-gamma values are huge and nearly equal, so their difference
/// `D(a) = ln Γ(a + 1/2) − ln Γ(a)` is taken from Stirling's series instead:
/// `D(a) = a·ln(1 + 1/(2a)) + ½·ln a − ½ + Σ c_k (z₁^{1−2k} − z₀^{1−2k})` with
/// `z₁ = a + ½`, `z₀ = a` and `c = 1/12, −1/360, 1/1260, −1/1680`; the first omitted
/// term is below 1e-18 for `a ≥ 100`.
fn ln_beta_a_half(a: f64) -> f64 {
    const LN_SQRT_PI: f64 = 0.572_364_942_924_700_1;
    if a < 100.0 {
        return gamma::ln_gamma(a) + LN_SQRT_PI - gamma::ln_gamma(a + 0.5);
    }
    let (z1, z0) = (a + 0.5, a);
    let series = [
        (1.0 / 12.0, 1),
        (-1.0 / 360.0, 3),
        (1.0 / 1260.0, 5),
        (-1.0 / 1680.0, 7),
    ]
    .iter()
    .map(|&(c, power)| c * (z1.powi(-power) - z0.powi(-power)))
    .sum::<f64>();
    let difference = a * (0.5 / a).ln_1p() + 0.5 * a.ln() - 0.5 + series;
    LN_SQRT_PI - difference
}

/// The continued fraction of the regularized incomplete beta function, evaluated by the
/// modified Lentz method (Numerical Recipes' `betacf`): `I_x(a, b) = prefactor · cf / a`
/// for `x < (a + 1)/(a + b + 2)`. `None` if it does not converge within
/// [`BETA_FRACTION_TERMS_MAX`] terms.
fn beta_fraction(a: f64, b: f64, x: f64) -> Option<f64> {
    const TINY: f64 = 1e-300;
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let guard = |v: f64| if v.abs() < TINY { TINY } else { v };
    let mut c = 1.0;
    let mut d = 1.0 / guard(1.0 - qab * x / qap);
    let mut h = d;
    for m in 1..=BETA_FRACTION_TERMS_MAX {
        let m = m as f64;
        let m2 = 2.0 * m;
        let even = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 / guard(1.0 + even * d);
        c = guard(1.0 + even / c);
        h *= d * c;
        let odd = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 / guard(1.0 + odd * d);
        c = guard(1.0 + odd / c);
        let delta = d * c;
        h *= delta;
        if (delta - 1.0).abs() <= f64::EPSILON {
            return Some(h);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    //! The private distribution helpers against SciPy; the public API is tested in
    //! `tests/it`. Constants are printed by `tools/stats_reference.py`.

    use super::*;

    #[track_caller]
    fn close(actual: Option<f64>, expected: f64) {
        close_to(actual, expected, 1e-12);
    }

    #[track_caller]
    fn close_to(actual: Option<f64>, expected: f64, relative: f64) {
        let actual = actual.unwrap();
        assert!(
            (actual - expected).abs() <= relative * expected.abs(),
            "expected {expected}, got {actual}"
        );
    }

    #[test]
    fn normal_quantiles_match_scipy_norm_ppf() {
        // scipy.stats.norm.ppf(0.95), (0.975), (0.995).
        close(normal_quantile(0.95), 1.6448536269514722);
        close(normal_quantile(0.975), 1.959963984540054);
        close(normal_quantile(0.995), 2.5758293035489004);
        assert_eq!(normal_quantile(0.0), None);
        assert_eq!(normal_quantile(1.0), None);
    }

    #[test]
    fn normal_tails_match_scipy_norm_sf() {
        // 2 * scipy.stats.norm.sf(z) for z = 1, 2, 5.
        close(normal_two_sided_p(1.0), 0.31731050786291415);
        close(normal_two_sided_p(-2.0), 0.04550026389635839);
        close(normal_two_sided_p(5.0), 5.733031437583866e-07);
        assert_eq!(normal_two_sided_p(0.0), Some(1.0));
        assert_eq!(normal_two_sided_p(1e200), Some(0.0));
        assert_eq!(normal_two_sided_p(f64::NAN), None);
    }

    /// (df, scipy.stats.t.ppf(0.975, df), 2 * scipy.stats.t.sf(2.0, df)).
    const T_CASES: &[(f64, f64, f64)] = &[
        (1.0, 12.706204736174694, 0.2951672353008665),
        (2.5, 3.5746548420036817, 0.1573914957579659),
        (5.882352941176471, 2.458823709699146, 0.09337888947464679),
        (30.0, 2.0422724563012378, 0.054625044962983094),
        (1000.0, 1.9623390808264083, 0.04577034649325166),
        (1e6, 1.959966356814107, 0.04550053385131924),
    ];

    #[test]
    fn student_t_tails_and_quantiles_match_scipy() {
        for &(df, quantile, p_at_two) in T_CASES {
            // The measured accuracy (module docs) degrades slowly beyond df = 10⁴.
            let relative = if df <= 1e4 { 1e-12 } else { 1e-10 };
            close_to(t_two_sided_quantile(0.05, df), quantile, relative);
            close_to(t_two_sided_p(2.0, df), p_at_two, relative);
            close_to(t_two_sided_p(-2.0, df), p_at_two, relative);
        }
        assert_eq!(t_two_sided_p(0.0, 3.0), Some(1.0));
        assert_eq!(t_two_sided_p(1.0, 0.0), None);
        // Beyond df ≈ 1.44·10⁷ statrs's inverse never returned (a hung report); each of
        // these returns, at the normal quantile plus (z³ + z)/(4·df).
        for df in [1.5e7, 2e7, 1e9, 1e12] {
            let z = 1.959963984540054;
            close_to(
                t_two_sided_quantile(0.05, df),
                z + (z * z * z + z) / (4.0 * df),
                1e-12,
            );
        }
        assert_eq!(t_two_sided_quantile(0.0, 3.0), None);
    }

    #[test]
    fn chi_square_tails_match_scipy_chi2_sf() {
        // scipy.stats.chi2.sf(4.0, 1), (2.0, 2), (30.0, 10).
        close(chi_square_sf(4.0, 1.0), 0.04550026389635857);
        close(chi_square_sf(2.0, 2.0), 0.36787944117144245);
        close(chi_square_sf(30.0, 10.0), 0.000856641210775301);
        assert_eq!(chi_square_sf(0.0, 3.0), Some(1.0));
        assert_eq!(chi_square_sf(-1.0, 3.0), None);
    }
}

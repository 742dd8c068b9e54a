use traqlyte_stats::{proportion_lift, ConfidenceLevel, Lift, Proportion, StatsError};

use crate::assert_close;

fn lift(x_c: u64, n_c: u64, x_t: u64, n_t: u64, level: f64) -> Lift {
    proportion_lift(
        Proportion::new(x_c, n_c).unwrap(),
        Proportion::new(x_t, n_t).unwrap(),
        ConfidenceLevel::new(level).unwrap(),
    )
}

/// One row of SciPy reference values for a two-proportion comparison.
struct Case {
    x_c: u64,
    n_c: u64,
    x_t: u64,
    n_t: u64,
    level: f64,
    estimate: f64,
    ci_low: f64,
    ci_high: f64,
    statistic: f64,
    p_value: f64,
}

// Every row from tools/stats_reference.py, z_test(x_c, n_c, x_t, n_t, level):
//   z = (p_t − p_c) / sqrt(pooled·(1 − pooled)·(1/n_c + 1/n_t)),
//   p = 2 * scipy.stats.norm.sf(abs(z)),
//   r = p_t/p_c, var_r = r**2 * (v_t/p_t**2 + v_c/p_c**2) with v = p(1 − p)/n,
//   interval = r ∓ scipy.stats.norm.ppf(1 − (1 − level)/2) * sqrt(var_r) − 1.
const CASES: &[Case] = &[
    Case {
        x_c: 100,
        n_c: 1000,
        x_t: 120,
        n_t: 1000,
        level: 0.95,
        estimate: 0.19999999999999996,
        ci_low: -0.10058461614448233,
        ci_high: 0.5005846161444822,
        statistic: 1.4293008498232314,
        p_value: 0.1529177818639462,
    },
    Case {
        x_c: 2000,
        n_c: 20000,
        x_t: 2150,
        n_t: 20000,
        level: 0.95,
        estimate: 0.07499999999999996,
        ci_low: 0.013028244691722923,
        ci_high: 0.136971755308277,
        statistic: 2.4595328438037676,
        p_value: 0.013911796781364281,
    },
    Case {
        x_c: 4823,
        n_c: 50123,
        x_t: 5034,
        n_t: 49877,
        level: 0.95,
        estimate: 0.04889661160275538,
        ci_low: 0.009567452996159798,
        ci_high: 0.08822577020935096,
        statistic: 2.495682180459835,
        p_value: 0.01257151817676848,
    },
    Case {
        x_c: 4823,
        n_c: 50123,
        x_t: 5034,
        n_t: 49877,
        level: 0.90,
        estimate: 0.04889661160275538,
        ci_low: 0.015890541241626144,
        ci_high: 0.08190268196388462,
        statistic: 2.495682180459835,
        p_value: 0.01257151817676848,
    },
    Case {
        x_c: 31,
        n_c: 412,
        x_t: 18,
        n_t: 397,
        level: 0.99,
        estimate: -0.39741610465588684,
        ci_low: -0.8442301677247116,
        ci_high: 0.049397958412937815,
        statistic: -1.7824740916371136,
        p_value: 0.07467195253243758,
    },
];

#[test]
fn z_test_and_delta_method_interval_match_scipy() {
    for case in CASES {
        let got = lift(case.x_c, case.n_c, case.x_t, case.n_t, case.level);
        assert_close(got.estimate(), case.estimate);
        assert_close(got.ci_low(), case.ci_low);
        assert_close(got.ci_high(), case.ci_high);
        assert_close(got.statistic(), case.statistic);
        assert_close(got.p_value(), case.p_value);
        assert_eq!(got.df(), None, "a z-test has no degrees of freedom");
        assert_eq!(got.confidence_level().get(), case.level);
    }
}

#[test]
fn hand_computed_ten_versus_twelve_percent_is_a_twenty_percent_lift() {
    // p_c = 0.10, p_t = 0.12, pooled 0.11: z = 0.02 / sqrt(0.11·0.89·0.002) = 1.42930...
    // Var(r) = (0.12·0.88/1000 + 1.2²·0.09/1000) / 0.01 = 0.02352.
    let got = lift(100, 1000, 120, 1000, 0.95);
    assert_close(got.estimate(), 0.2);
    assert_close(got.statistic(), 0.02 / (0.11_f64 * 0.89 * 0.002).sqrt());
    let half = got.ci_high().unwrap() - got.estimate().unwrap();
    // 1.959963984540054 is scipy.stats.norm.ppf(0.975).
    assert_close(Some(half), 1.959963984540054 * 0.02352_f64.sqrt());
    assert!(!got.is_significant());
}

#[test]
fn equal_rates_give_zero_lift_and_p_value_one() {
    let got = lift(50, 500, 100, 1000, 0.95);
    assert_close(got.estimate(), 0.0);
    assert_close(got.statistic(), 0.0);
    assert_close(got.p_value(), 1.0);
    let (low, high) = got.ci().unwrap();
    assert!(low < 0.0 && high > 0.0);
}

#[test]
fn zero_control_rate_has_no_relative_lift_but_still_a_p_value() {
    let got = lift(0, 400, 20, 400, 0.95);
    assert_eq!(got.estimate(), None);
    assert_eq!(got.ci(), None);
    assert_eq!(got.ci_low(), None);
    assert_eq!(got.ci_high(), None);
    // Pooled 0.025 (10 expected converters an arm): z = 0.05 / sqrt(0.025·0.975·0.005);
    // z_only(0, 400, 20, 400) in tools/stats_reference.py, p = 2 * scipy.stats.norm.sf(|z|).
    assert_close(got.statistic(), 4.529108136578383);
    assert_close(got.p_value(), 5.923317990312169e-06);
}

/// The normal approximation needs 5 expected converting and non-converting units an arm
/// for the test, 5 observed for the interval; below, `None` (estimate kept). One
/// converting unit against 30 of 300 gave +900 % with p = 0.003 (Fisher's exact test:
/// 0.10), and 6 of 6 against 3 of 6 a "significant" −50 %.
#[test]
fn too_few_units_for_the_normal_approximation_give_no_test_and_no_interval() {
    for (x_c, n_c, x_t, n_t) in [(30, 300, 1, 1), (3, 6, 6, 6), (0, 100, 5, 100)] {
        let got = lift(x_c, n_c, x_t, n_t, 0.95);
        assert_eq!(got.p_value(), None, "{x_c}/{n_c} vs {x_t}/{n_t}");
        assert_eq!(got.statistic(), None, "{x_c}/{n_c} vs {x_t}/{n_t}");
        assert_eq!(got.ci(), None, "{x_c}/{n_c} vs {x_t}/{n_t}");
        assert!(!got.is_significant());
    }
    assert_close(lift(30, 300, 1, 1, 0.95).estimate(), 9.0);
    // Exactly 5 observed converting and non-converting units an arm: both given.
    let at_the_bound = lift(5, 10, 5, 10, 0.95);
    assert!(at_the_bound.p_value().is_some() && at_the_bound.ci().is_some());
    // 4 converters observed in treatment: the test stands on the pooled rate (7 of 20
    // expected an arm), the interval on the arms' own counts.
    let few_observed = lift(10, 20, 4, 20, 0.95);
    assert!(few_observed.p_value().is_some());
    assert_eq!(few_observed.ci(), None);
}

#[test]
fn no_conversions_anywhere_leaves_everything_undefined() {
    let got = lift(0, 100, 0, 100, 0.95);
    assert_eq!(got.estimate(), None);
    assert_eq!(got.ci(), None);
    assert_eq!(got.statistic(), None);
    assert_eq!(got.p_value(), None);
    assert!(!got.is_significant());
}

#[test]
fn every_unit_converting_in_both_arms_is_zero_lift_without_test_or_interval() {
    let got = lift(100, 100, 40, 40, 0.95);
    assert_close(got.estimate(), 0.0);
    assert_eq!(got.ci(), None);
    assert_eq!(got.statistic(), None);
    assert_eq!(got.p_value(), None);
}

#[test]
fn zero_treatment_rate_is_minus_one_hundred_percent_without_an_interval() {
    let got = lift(10, 100, 0, 100, 0.95);
    assert_close(got.estimate(), -1.0);
    assert_eq!(
        got.ci(),
        None,
        "Var(r) = 0 would give a zero-width interval"
    );
    // Pooled 0.05: z = −0.1 / sqrt(0.05·0.95·0.02); z_only(10, 100, 0, 100) in
    // tools/stats_reference.py, p = 2 * scipy.stats.norm.sf(abs(z)).
    assert_close(got.statistic(), -3.244428422615251);
    assert_close(got.p_value(), 0.0011768659106247378);
}

#[test]
fn a_single_unit_per_arm_is_valid_input() {
    let got = lift(1, 1, 0, 1, 0.95);
    assert_close(got.estimate(), -1.0);
    assert_eq!(got.p_value(), None, "too few units for a z-test");
}

#[test]
fn proportion_rejects_zero_units_and_more_conversions_than_units() {
    assert_eq!(Proportion::new(0, 0), Err(StatsError::NoUnits));
    assert_eq!(
        Proportion::new(11, 10),
        Err(StatsError::ConversionsExceedUnits {
            conversions: 11,
            units: 10
        })
    );
    let p = Proportion::new(3, 12).unwrap();
    assert_eq!((p.conversions(), p.units(), p.rate()), (3, 12, 0.25));
}

#[test]
fn confidence_level_must_lie_strictly_between_zero_and_one() {
    for bad in [0.0, 1.0, -0.5, 1.5, f64::NAN, f64::INFINITY] {
        assert!(matches!(
            ConfidenceLevel::new(bad),
            Err(StatsError::ConfidenceLevelOutOfRange(_))
        ));
    }
    assert_eq!(ConfidenceLevel::default(), ConfidenceLevel::NINETY_FIVE);
    assert_eq!(ConfidenceLevel::try_from(0.9).unwrap().get(), 0.9);
}

#[test]
fn lift_serialises_undefined_fields_as_null() {
    let got = lift(0, 100, 0, 100, 0.95);
    let json = serde_json::to_value(got).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "estimate": null,
            "ci_low": null,
            "ci_high": null,
            "p_value": null,
            "confidence_level": 0.95,
            "statistic": null
        })
    );
}

use traqlyte_stats::{mean_lift, Arm, ConfidenceLevel, Lift, Moments, StatsError};

use crate::assert_close;

fn pushed(values: &[f64]) -> Moments {
    let mut m = Moments::new();
    for &v in values {
        m.push(v).unwrap();
    }
    m
}

fn from_stats(mean: f64, variance: f64, n: u64) -> Moments {
    Moments::from_mean_variance(n, mean, variance).unwrap()
}

fn level(level: f64) -> ConfidenceLevel {
    ConfidenceLevel::new(level).unwrap()
}

/// SciPy's answers for one comparison.
struct Expected {
    estimate: f64,
    ci_low: f64,
    ci_high: f64,
    statistic: f64,
    df: f64,
    p_value: f64,
}

#[track_caller]
fn check(got: Lift, want: Expected) {
    assert_close(got.estimate(), want.estimate);
    assert_close(got.ci_low(), want.ci_low);
    assert_close(got.ci_high(), want.ci_high);
    assert_close(got.statistic(), want.statistic);
    assert_close(got.df(), want.df);
    assert_close(got.p_value(), want.p_value);
}

#[test]
fn tiny_samples_match_scipy_ttest_ind_welch() {
    // res = scipy.stats.ttest_ind([2, 4, 6, 8, 10], [1, 2, 3, 4, 5], equal_var=False);
    // interval: r ∓ scipy.stats.t.ppf(0.975, res.df) * sqrt(var_r) − 1 (delta method).
    // By hand: means 3 and 6, variances 2.5 and 10, so v_c = 0.5, v_t = 2,
    // t = 3 / sqrt(2.5), df = 2.5² / (2²/4 + 0.5²/4) = 100/17, Var(r) = (2 + 4·0.5)/9.
    let got = mean_lift(
        &pushed(&[1.0, 2.0, 3.0, 4.0, 5.0]),
        &pushed(&[2.0, 4.0, 6.0, 8.0, 10.0]),
        ConfidenceLevel::NINETY_FIVE,
    )
    .unwrap();
    check(
        got,
        Expected {
            estimate: 1.0,
            ci_low: -0.6392158064660971,
            ci_high: 2.639215806466097,
            statistic: 1.8973665961010275,
            df: 5.882352941176471,
            p_value: 0.10753119493062728,
        },
    );
    assert_close(got.statistic(), 3.0 / 2.5_f64.sqrt());
    assert_close(got.df(), 100.0 / 17.0);
    assert!(!got.is_significant());
}

#[test]
fn unequal_sized_raw_samples_match_scipy_ttest_ind_welch() {
    // scipy.stats.ttest_ind(treatment, control, equal_var=False) on the values below;
    // interval with scipy.stats.t.ppf(0.975, res.df).
    let control = [19.1, 22.4, 18.7, 25.0, 21.3, 20.8, 23.9];
    let treatment = [24.2, 19.9, 27.5, 26.1, 22.8, 30.4, 25.0, 23.3, 28.7];
    let got = mean_lift(
        &pushed(&control),
        &pushed(&treatment),
        ConfidenceLevel::NINETY_FIVE,
    )
    .unwrap();
    check(
        got,
        Expected {
            estimate: 0.1723251028806585,
            ci_low: 0.023700461539165607,
            ci_high: 0.3209497442221514,
            statistic: 2.6681885343228373,
            df: 13.960546938175787,
            p_value: 0.018400011339006893,
        },
    );
    assert!(got.is_significant());
}

#[test]
fn summary_statistics_match_scipy_ttest_ind_from_stats() {
    // scipy.stats.ttest_ind_from_stats(13.1, sqrt(52.0), 950, 12.5, sqrt(40.0), 1200,
    //     equal_var=False); interval with scipy.stats.t.ppf(0.975, df).
    let got = mean_lift(
        &from_stats(12.5, 40.0, 1200),
        &from_stats(13.1, 52.0, 950),
        ConfidenceLevel::NINETY_FIVE,
    )
    .unwrap();
    check(
        got,
        Expected {
            estimate: 0.04800000000000004,
            ci_low: 0.0005799492843030496,
            ci_high: 0.09542005071569704,
            statistic: 2.0217936102358305,
            df: 1899.28283849742,
            p_value: 0.04333765082407518,
        },
    );
}

#[test]
fn a_million_units_with_a_near_million_welch_df_match_scipy() {
    // scipy.stats.ttest_ind_from_stats(3.02, sqrt(26.0), 500000, 3.0, sqrt(25.0), 500000,
    //     equal_var=False); interval with scipy.stats.t.ppf(0.975, df).
    let got = mean_lift(
        &from_stats(3.0, 25.0, 500_000),
        &from_stats(3.02, 26.0, 500_000),
        ConfidenceLevel::NINETY_FIVE,
    )
    .unwrap();
    check(
        got,
        Expected {
            estimate: 0.006666666666666599,
            ci_low: 4.683733070476315e-05,
            ci_high: 0.013286496002628434,
            statistic: 1.9802950859533504,
            df: 999613.6810146042,
            p_value: 0.04767065438699021,
        },
    );
}

#[test]
fn a_ninety_percent_interval_uses_the_t_quantile_at_the_welch_df() {
    // scipy.stats.ttest_ind_from_stats(1.1, sqrt(9.0), 12, 0.8, sqrt(4.0), 30,
    //     equal_var=False); interval with scipy.stats.t.ppf(0.95, df).
    let got = mean_lift(
        &from_stats(0.8, 4.0, 30),
        &from_stats(1.1, 9.0, 12),
        level(0.90),
    )
    .unwrap();
    check(
        got,
        Expected {
            estimate: 0.375,
            ci_low: -1.8178493592833074,
            ci_high: 2.5678493592833074,
            statistic: 0.31919710595935896,
            df: 15.078009052819327,
            p_value: 0.7539565160876759,
        },
    );
}

#[test]
fn moments_from_pushes_and_from_sql_totals_give_the_same_lift() {
    let control = [19.1, 22.4, 18.7, 25.0, 21.3, 20.8, 23.9];
    let treatment = [24.2, 19.9, 27.5, 26.1, 22.8, 30.4, 25.0, 23.3, 28.7];
    let totals = |values: &[f64]| {
        let sum = values.iter().sum();
        let sum_sq = values.iter().map(|v| v * v).sum();
        Moments::from_totals(values.len() as u64, sum, sum_sq).unwrap()
    };
    let a = mean_lift(&pushed(&control), &pushed(&treatment), level(0.95)).unwrap();
    let b = mean_lift(&totals(&control), &totals(&treatment), level(0.95)).unwrap();
    assert_close(b.estimate(), a.estimate().unwrap());
    assert_close(b.ci_low(), a.ci_low().unwrap());
    assert_close(b.ci_high(), a.ci_high().unwrap());
    assert_close(b.p_value(), a.p_value().unwrap());
}

#[test]
fn zero_control_mean_has_no_relative_lift_but_still_a_welch_test() {
    let got = mean_lift(
        &pushed(&[-1.0, 0.0, 1.0]),
        &pushed(&[1.0, 2.0, 3.0]),
        level(0.95),
    )
    .unwrap();
    assert_eq!(got.estimate(), None);
    assert_eq!(got.ci(), None);
    // Means 0 and 2, both variances 1: t = 2 / sqrt(2/3), df = 4 by hand;
    // scipy.stats.ttest_ind([1, 2, 3], [-1, 0, 1], equal_var=False).pvalue.
    assert_close(got.statistic(), 2.0 / (2.0_f64 / 3.0).sqrt());
    assert_close(got.df(), 4.0);
    assert_close(got.p_value(), 0.07048399691021992);
}

/// A negative control mean (refunds) has no relative lift either: −1 → −3 read as a
/// "+200 % lift" for a metric that went down. The test is the same as for the values
/// shifted by +1: t = −2 / sqrt(2/3), df = 4.
#[test]
fn negative_control_mean_has_no_relative_lift_but_still_a_welch_test() {
    let got = mean_lift(
        &pushed(&[-2.0, -1.0, 0.0]),
        &pushed(&[-4.0, -3.0, -2.0]),
        level(0.95),
    )
    .unwrap();
    assert_eq!(got.estimate(), None);
    assert_eq!(got.ci(), None);
    assert_close(got.statistic(), -2.0 / (2.0_f64 / 3.0).sqrt());
    assert_close(got.df(), 4.0);
    assert_close(got.p_value(), 0.07048399691021992);
}

#[test]
fn constant_arms_have_an_estimate_but_no_test_or_interval() {
    let got = mean_lift(&pushed(&[2.0; 4]), &pushed(&[3.0; 6]), level(0.95)).unwrap();
    assert_close(got.estimate(), 0.5);
    assert_eq!(got.ci(), None);
    assert_eq!(got.statistic(), None);
    assert_eq!(got.df(), None);
    assert_eq!(got.p_value(), None);
}

/// The report builds its arms from SQL totals (`Moments::from_totals`): identical
/// non-integer values leave rounding noise in `Σx² − x̄·Σx`, which must read as the zero
/// variance it is (100 units of 9.99 against 100 of 24.99 gave t = 1.6e8, p = 0 and a
/// zero-width interval).
#[test]
fn constant_arms_from_totals_have_no_test_or_interval() {
    let totals = |value: f64, n: u64| {
        let (mut sum, mut sum_sq) = (0.0, 0.0);
        for _ in 0..n {
            sum += value;
            sum_sq += value * value;
        }
        Moments::from_totals(n, sum, sum_sq).unwrap()
    };
    for (control, treatment) in [(9.99, 24.99), (19.99, 19.99), (0.1, 0.3)] {
        let got = mean_lift(&totals(control, 100), &totals(treatment, 100), level(0.95)).unwrap();
        assert_close(got.estimate(), treatment / control - 1.0);
        assert_eq!(got.ci(), None, "{control} vs {treatment}");
        assert_eq!(got.statistic(), None, "{control} vs {treatment}");
        assert_eq!(got.p_value(), None, "{control} vs {treatment}");
    }
    // Real spread survives: 100 units alternating 9.99 and 10.01.
    let (mut sum, mut sum_sq) = (0.0, 0.0);
    for i in 0..100 {
        let x = if i % 2 == 0 { 9.99 } else { 10.01 };
        sum += x;
        sum_sq += x * x;
    }
    let spread = Moments::from_totals(100, sum, sum_sq).unwrap();
    assert!(spread
        .variance()
        .is_some_and(|v| (v - 0.0001 * 100.0 / 99.0).abs() < 1e-9));
}

#[test]
fn one_constant_arm_takes_its_df_from_the_other() {
    // v_c = 0, so df = v_t² / (v_t²/(n_t − 1)) = n_t − 1 = 2.
    let got = mean_lift(&pushed(&[2.0; 4]), &pushed(&[1.0, 2.0, 3.0]), level(0.95)).unwrap();
    assert_close(got.estimate(), 0.0);
    assert_close(got.df(), 2.0);
    assert_close(got.p_value(), 1.0);
    assert!(got.ci().is_some());
}

#[test]
fn a_single_unit_arm_has_an_estimate_but_no_test_or_interval() {
    let got = mean_lift(&pushed(&[4.0]), &pushed(&[1.0, 5.0, 9.0]), level(0.95)).unwrap();
    assert_close(got.estimate(), 0.25);
    assert_eq!(got.ci(), None);
    assert_eq!(got.statistic(), None);
    assert_eq!(got.p_value(), None);
}

#[test]
fn zero_treatment_mean_with_constant_control_has_no_interval() {
    let got = mean_lift(&pushed(&[2.0; 3]), &pushed(&[-1.0, 0.0, 1.0]), level(0.95)).unwrap();
    assert_close(got.estimate(), -1.0);
    assert!(
        got.ci().is_some(),
        "v_t > 0 keeps Var(r) = v_t / m_c² positive"
    );
    let got = mean_lift(&pushed(&[1.0, 3.0]), &pushed(&[0.0; 3]), level(0.95)).unwrap();
    assert_close(got.estimate(), -1.0);
    assert_eq!(got.ci(), None, "r = 0 and v_t = 0 give Var(r) = 0");
}

#[test]
fn an_empty_arm_is_an_error_naming_the_arm() {
    let some = pushed(&[1.0, 2.0]);
    assert_eq!(
        mean_lift(&Moments::new(), &some, level(0.95)),
        Err(StatsError::EmptyArm(Arm::Control))
    );
    assert_eq!(
        mean_lift(&some, &Moments::new(), level(0.95)),
        Err(StatsError::EmptyArm(Arm::Treatment))
    );
    assert_eq!(
        StatsError::EmptyArm(Arm::Treatment).to_string(),
        "the treatment arm has no units"
    );
}

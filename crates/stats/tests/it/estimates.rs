//! `estimate_lift`: the lift of two estimates given with their variances (a stratified
//! report's means), a z-test (on a given variance under no effect, else the two
//! estimates' own) and a normal delta-method interval.

use traqlyte_stats::{estimate_lift, proportion_lift, ConfidenceLevel, Proportion, StatsError};

use crate::assert_close;

#[test]
fn a_hand_checked_case() {
    // z = (0.66 − 0.6)/√(0.0004 + 0.0005) = 2, p = erfc(2/√2);
    // r = 1.1, Var(r) = (0.0005 + 1.21·0.0004)/0.36, interval r ∓ 1.95996…·√Var(r) − 1
    // (values from Python's math module, as printed beside each).
    let lift = estimate_lift(
        (0.6, 0.0004),
        (0.66, 0.0005),
        None,
        ConfidenceLevel::default(),
    )
    .expect("a lift");
    assert_close(lift.estimate(), 0.10000000000000009);
    assert_close(lift.statistic(), 2.0000000000000018);
    assert_close(lift.p_value(), 0.04550026389635824);
    assert_close(lift.ci_low(), -0.002469446388816743);
    assert_close(lift.ci_high(), 0.20246944638881703);
    assert_eq!(lift.df(), None);
}

#[test]
fn one_stratum_of_proportions_has_the_interval_of_the_proportion_test() {
    // The proportion test's interval is the same delta method on unpooled variances;
    // only its statistic differs (a pooled standard error under the null).
    let (c, t) = (
        Proportion::new(100, 1000).expect("control"),
        Proportion::new(120, 1000).expect("treatment"),
    );
    let level = ConfidenceLevel::default();
    let reference = proportion_lift(c, t, level);
    let variance = |p: &Proportion| p.rate() * (1.0 - p.rate()) / p.units() as f64;
    let lift = estimate_lift(
        (c.rate(), variance(&c)),
        (t.rate(), variance(&t)),
        None,
        level,
    )
    .expect("a lift");
    assert_close(lift.estimate(), reference.estimate().expect("estimate"));
    assert_close(lift.ci_low(), reference.ci_low().expect("low"));
    assert_close(lift.ci_high(), reference.ci_high().expect("high"));
    // With the pooled rate's variance under no effect, the statistic is the test's too.
    let pooled = 220.0 / 2000.0;
    let null = pooled * (1.0 - pooled) * (1.0 / 1000.0 + 1.0 / 1000.0);
    let lift = estimate_lift(
        (c.rate(), variance(&c)),
        (t.rate(), variance(&t)),
        Some(null),
        level,
    )
    .expect("a lift");
    assert_close(lift.statistic(), reference.statistic().expect("statistic"));
    assert_close(lift.p_value(), reference.p_value().expect("p"));
    assert_close(lift.ci_low(), reference.ci_low().expect("low"));
}

#[test]
fn degenerate_and_invalid_estimates() {
    let level = ConfidenceLevel::default();
    let certain = estimate_lift((0.5, 0.0), (0.5, 0.0), None, level).expect("a lift");
    assert_eq!(certain.estimate(), Some(0.0));
    assert_eq!(
        (certain.statistic(), certain.p_value(), certain.ci()),
        (None, None, None)
    );
    let zero_control = estimate_lift((0.0, 0.01), (0.2, 0.01), None, level).expect("a lift");
    assert_eq!((zero_control.estimate(), zero_control.ci()), (None, None));
    assert!(zero_control.p_value().is_some());
    assert!(matches!(
        estimate_lift((f64::NAN, 0.1), (0.2, 0.1), None, level),
        Err(StatsError::NotFinite { .. })
    ));
    assert!(matches!(
        estimate_lift((0.1, -0.1), (0.2, 0.1), None, level),
        Err(StatsError::NegativeVariance(_))
    ));
    // Strata that all converted (or none did) in both arms carry no variance under no
    // effect, and no difference either: a zero null variance gives no statistic.
    let flat = estimate_lift((0.5, 0.01), (0.5, 0.01), Some(0.0), level).expect("a lift");
    assert_eq!((flat.statistic(), flat.p_value()), (None, None));
    assert!(flat.ci().is_some());
}

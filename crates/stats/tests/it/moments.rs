use traqlyte_stats::{Moments, StatsError};

use crate::assert_close;

fn pushed(values: &[f64]) -> Moments {
    let mut m = Moments::new();
    for &v in values {
        m.push(v).unwrap();
    }
    m
}

#[test]
fn empty_moments_have_no_mean_and_no_variance() {
    let m = Moments::new();
    assert_eq!(
        (m.count(), m.sum(), m.mean(), m.variance()),
        (0, 0.0, None, None)
    );
}

#[test]
fn one_value_has_a_mean_but_no_sample_variance() {
    let m = pushed(&[7.5]);
    assert_eq!(
        (m.count(), m.sum(), m.mean(), m.variance()),
        (1, 7.5, Some(7.5), None)
    );
    assert_eq!(m.variance_of_mean(), None);
}

#[test]
fn one_to_five_has_mean_three_and_variance_two_and_a_half() {
    let m = pushed(&[1.0, 2.0, 3.0, 4.0, 5.0]);
    assert_eq!(m.count(), 5);
    assert_eq!(m.sum(), 15.0);
    assert_eq!(m.mean(), Some(3.0));
    assert_eq!(m.variance(), Some(2.5));
    assert_eq!(m.variance_of_mean(), Some(0.5));
}

#[test]
fn a_large_offset_does_not_swamp_a_small_variance() {
    // numpy.mean / numpy.var(ddof=1) of [1e9+4, 1e9+7, 1e9+13, 1e9+16]: 1e9 + 10 and 30,
    // the classic case where the textbook Σx² − (Σx)²/n formula loses every digit.
    let m = pushed(&[1e9 + 4.0, 1e9 + 7.0, 1e9 + 13.0, 1e9 + 16.0]);
    assert_close(m.mean(), 1e9 + 10.0);
    assert_close(m.variance(), 30.0);
}

#[test]
fn per_unit_revenue_with_many_zeros_matches_numpy() {
    // numpy.mean / numpy.var(ddof=1) of the values below.
    let values = [0.0, 0.0, 3.5, 0.0, 12.25, 1.0, 0.0, 7.75];
    let m = pushed(&values);
    assert_close(m.mean(), 3.0625);
    assert_close(m.variance(), 21.191964285714285);
    let sum: f64 = values.iter().sum();
    let sum_sq: f64 = values.iter().map(|v| v * v).sum();
    let t = Moments::from_totals(8, sum, sum_sq).unwrap();
    assert_eq!(t.count(), 8);
    assert_eq!(t.sum(), 24.5);
    assert_close(t.mean(), 3.0625);
    assert_close(t.variance(), 21.191964285714285);
}

#[test]
fn merging_partial_moments_equals_pushing_everything() {
    let values = [0.0, 0.0, 3.5, 0.0, 12.25, 1.0, 0.0, 7.75];
    let whole = pushed(&values);
    for split in 0..=values.len() {
        let mut left = pushed(&values[..split]);
        left.merge(&pushed(&values[split..]));
        assert_eq!(left.count(), whole.count());
        assert_eq!(left.sum(), whole.sum());
        assert_close(left.mean(), whole.mean().unwrap());
        assert_close(left.variance(), whole.variance().unwrap());
    }
}

#[test]
fn mean_and_variance_round_trip_through_from_mean_variance() {
    let m = Moments::from_mean_variance(4, 2.5, 1.25).unwrap();
    assert_eq!(
        (m.count(), m.sum(), m.mean(), m.variance()),
        (4, 10.0, Some(2.5), Some(1.25))
    );
    let single = Moments::from_mean_variance(1, 9.0, 0.0).unwrap();
    assert_eq!((single.mean(), single.variance()), (Some(9.0), None));
}

#[test]
fn empty_totals_are_the_empty_accumulator() {
    assert_eq!(Moments::from_totals(0, 0.0, 0.0), Ok(Moments::new()));
}

#[test]
fn constant_values_whose_totals_round_below_zero_clamp_to_zero_variance() {
    // 0.1 is not exact in binary: Σx² − (Σx)²/n comes out a few ulps off zero.
    let n = 1000;
    let (sum, sum_sq) = (0..n).fold((0.0, 0.0), |(s, q), _| (s + 0.1, q + 0.1 * 0.1));
    let m = Moments::from_totals(n, sum, sum_sq).unwrap();
    let variance = m.variance().unwrap();
    assert!((0.0..1e-12).contains(&variance), "variance {variance}");
}

#[test]
fn impossible_totals_are_rejected() {
    // Two values summing to 2 have Σx² ≥ 2; Σx² = 1 is not data.
    assert!(matches!(
        Moments::from_totals(2, 2.0, 1.0),
        Err(StatsError::NegativeVariance(v)) if v < 0.0
    ));
    assert_eq!(
        Moments::from_totals(2, 1.0, -1.0),
        Err(StatsError::NegativeVariance(-1.0))
    );
    assert_eq!(
        Moments::from_totals(0, 1.0, 1.0),
        Err(StatsError::InconsistentTotals {
            sum: 1.0,
            sum_sq: 1.0
        })
    );
    assert!(matches!(
        Moments::from_totals(3, f64::NAN, 1.0),
        Err(StatsError::NotFinite { what: "sum", .. })
    ));
}

#[test]
fn invalid_mean_and_variance_are_rejected() {
    assert_eq!(
        Moments::from_mean_variance(0, 1.0, 1.0),
        Err(StatsError::NoUnits)
    );
    assert_eq!(
        Moments::from_mean_variance(3, 1.0, -0.5),
        Err(StatsError::NegativeVariance(-0.5))
    );
    assert!(matches!(
        Moments::from_mean_variance(3, f64::INFINITY, 1.0),
        Err(StatsError::NotFinite { what: "mean", .. })
    ));
}

#[test]
fn pushing_a_non_finite_value_is_an_error_and_changes_nothing() {
    let mut m = pushed(&[1.0, 2.0]);
    let before = m;
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        assert!(matches!(
            m.push(bad),
            Err(StatsError::NotFinite { what: "value", .. })
        ));
    }
    assert_eq!(m, before);
}

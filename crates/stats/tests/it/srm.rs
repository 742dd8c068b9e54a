use traqlyte_stats::{srm, srm_within_groups, StatsError, SRM_P_VALUE_THRESHOLD};

use crate::assert_close;

/// Observed units, weights, and scipy.stats.chisquare(observed, f_exp=sum(observed) * w /
/// sum(w)) as printed by tools/stats_reference.py: (statistic, p-value).
const CASES: &[(&[u64], &[f64], f64, f64)] = &[
    (&[60, 40], &[1.0, 1.0], 4.0, 0.04550026389635857),
    (
        &[10_000, 10_300],
        &[0.5, 0.5],
        4.433497536945813,
        0.035240223824274594,
    ),
    (
        &[3300, 3400, 3300],
        &[1.0, 1.0, 1.0],
        2.0,
        0.36787944117144245,
    ),
    (
        &[2010, 2950, 5100],
        &[0.2, 0.3, 0.5],
        2.508283631544069,
        0.2853206008275643,
    ),
    (
        &[50_000, 51_000],
        &[1.0, 1.0],
        9.900990099009901,
        0.001651898732357361,
    ),
    (
        &[9_000, 1_150],
        &[0.9, 0.1],
        19.950738916256157,
        7.946323922806938e-06,
    ),
];

#[test]
fn chi_square_goodness_of_fit_matches_scipy_chisquare() {
    for &(observed, weights, chi_square, p_value) in CASES {
        let got = srm(observed, weights).unwrap();
        assert_close(Some(got.chi_square()), chi_square);
        assert_close(Some(got.p_value()), p_value);
        assert_eq!(got.df(), observed.len() as u64 - 1);
        assert_eq!(got.flagged(), p_value < SRM_P_VALUE_THRESHOLD);
    }
}

#[test]
fn sixty_forty_on_an_even_split_is_chi_square_four() {
    // By hand: expected 50 each, (10² + 10²) / 50 = 4; with one degree of freedom
    // P(χ² ≥ 4) = P(|Z| ≥ 2) = 2 * scipy.stats.norm.sf(2) = 0.04550026389635839.
    let got = srm(&[60, 40], &[1.0, 1.0]).unwrap();
    assert_eq!(got.chi_square(), 4.0);
    assert_close(Some(got.p_value()), 0.04550026389635839);
    assert!(!got.flagged());
}

#[test]
fn exact_match_to_the_weights_has_p_value_one() {
    let got = srm(&[250, 750], &[1.0, 3.0]).unwrap();
    assert_eq!(got.chi_square(), 0.0);
    assert_eq!(got.p_value(), 1.0);
    assert!(!got.flagged());
}

#[test]
fn a_clear_mismatch_is_flagged_below_one_in_a_thousand() {
    let got = srm(&[9_000, 1_150], &[0.9, 0.1]).unwrap();
    assert!(got.flagged());
    let got = srm(&[50_000, 51_000], &[1.0, 1.0]).unwrap();
    assert!(!got.flagged(), "p = 0.00165 is suspicious but not flagged");
}

#[test]
fn weights_need_not_sum_to_one() {
    let a = srm(&[2010, 2950, 5100], &[0.2, 0.3, 0.5]).unwrap();
    let b = srm(&[2010, 2950, 5100], &[20.0, 30.0, 50.0]).unwrap();
    assert_close(Some(b.chi_square()), a.chi_square());
    assert_close(Some(b.p_value()), a.p_value());
}

#[test]
fn an_empty_arm_counts_as_observed_zero() {
    // Expected 50 each: (50² + 50²) / 50 = 100.
    let got = srm(&[100, 0], &[1.0, 1.0]).unwrap();
    assert_eq!(got.chi_square(), 100.0);
    assert!(got.flagged());
}

#[test]
fn srm_rejects_invalid_inputs() {
    assert_eq!(
        srm(&[1, 2, 3], &[1.0, 1.0]),
        Err(StatsError::LengthMismatch {
            observed: 3,
            weights: 2
        })
    );
    assert_eq!(srm(&[5], &[1.0]), Err(StatsError::TooFewArms(1)));
    assert_eq!(srm(&[], &[]), Err(StatsError::TooFewArms(0)));
    assert_eq!(srm(&[0, 0], &[1.0, 1.0]), Err(StatsError::NoUnits));
    for (index, bad) in [(1, 0.0), (0, -1.0), (1, f64::INFINITY)] {
        let mut weights = [1.0, 1.0];
        weights[index] = bad;
        assert_eq!(
            srm(&[10, 10], &weights),
            Err(StatsError::WeightNotPositive { index, weight: bad })
        );
    }
    assert!(matches!(
        srm(&[10, 10], &[f64::NAN, 1.0]),
        Err(StatsError::WeightNotPositive { index: 0, .. })
    ));
}

#[test]
fn srm_serialises_its_four_fields() {
    let got = serde_json::to_value(srm(&[250, 750], &[1.0, 3.0]).unwrap()).unwrap();
    assert_eq!(
        got,
        serde_json::json!({"chi_square": 0.0, "df": 1, "p_value": 1.0, "flagged": false})
    );
}

#[test]
fn groups_tested_together_sum_their_statistics_and_a_mismatch_cannot_cancel_out() {
    // Two versions at 50/50, one short of treatment and one of control: pooled per arm
    // they read 100/100 (χ² = 0); each alone has χ² = 4, together χ² = 8 on 2 degrees of
    // freedom, whose upper tail is exp(−8/2) exactly.
    let even = [1.0, 1.0];
    let got = srm_within_groups(&[(&[60, 40], &even), (&[40, 60], &even)]).unwrap();
    assert_eq!(got.chi_square(), 8.0);
    assert_eq!(got.df(), 2);
    assert_close(Some(got.p_value()), (-4.0f64).exp());
    // A group without units takes no part; one group alone is `srm`.
    let alone = srm_within_groups(&[(&[60, 40], &even), (&[0, 0], &[1.0, 9.0])]).unwrap();
    assert_eq!(alone, srm(&[60, 40], &even).unwrap());
    assert!(matches!(
        srm_within_groups(&[(&[0, 0], &even)]),
        Err(StatsError::NoUnits)
    ));
    assert!(matches!(srm_within_groups(&[]), Err(StatsError::NoUnits)));
}

#[test]
fn a_group_expecting_fewer_than_five_units_in_an_arm_is_tested_exactly() {
    let even = [1.0, 1.0];
    let ramp = [99.0, 1.0];
    // A first version ramped at 99/1 with five units, one in the 1 % arm (χ² ≈ 18 alone),
    // beside an even 1,000/1,000: the ramp's arms by their binomial tails, 2·(1 − 0.99⁵)
    // each, the smaller times two arms, then times two parts. No alarm.
    let got = srm_within_groups(&[(&[4, 1], &ramp), (&[1000, 1000], &even)]).unwrap();
    let one_arm = 2.0 * (1.0 - 0.99f64.powi(5));
    assert_close(Some(got.p_value()), (one_arm * 2.0 * 2.0).min(1.0));
    assert!(!got.flagged());
    assert_eq!(got.df(), 2, "Pearson's summary covers every group");
    // Only thin groups: the exact part alone.
    let thin = srm_within_groups(&[(&[4, 1], &ramp), (&[3, 4], &even)]).unwrap();
    assert!(!thin.flagged(), "{thin:?}");
    // A gross mismatch in a thin group is still found: 198 of 400 units in the 1 % arm.
    let gross = srm_within_groups(&[(&[202, 198], &ramp), (&[1000, 1000], &even)]).unwrap();
    assert!(gross.flagged(), "{gross:?}");
    // Five expected in the smallest arm is enough for the chi-square: 500 units at 99/1.
    let sound = srm_within_groups(&[(&[495, 5], &ramp)]).unwrap();
    assert_eq!(sound, srm(&[495, 5], &ramp).unwrap());
}

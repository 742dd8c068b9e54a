use traqlyte_stats::{delta_by_count, delta_by_value, predicted_naive_lift, StatsError};

use crate::assert_close;

#[test]
fn predicted_naive_lift_matches_exact_rational_arithmetic() {
    // (1 + L)(1 + δ_T)/(1 + δ_C) − 1 evaluated with Python's fractions.Fraction
    // (tools/stats_reference.py): 4/51, −29/1100 and −3/4.
    assert_close(predicted_naive_lift(0.0, 0.10, 0.02).ok(), 4.0 / 51.0);
    assert_close(predicted_naive_lift(0.05, 0.02, 0.10).ok(), -29.0 / 1100.0);
    assert_close(predicted_naive_lift(-0.5, 0.0, 1.0).ok(), -0.75);
}

#[test]
fn retries_ten_percent_in_treatment_and_two_in_control_fake_a_lift_of_almost_eight_percent() {
    // The `traqlyte demo` scenario: no true effect, δ_T = 0.10, δ_C = 0.02.
    let predicted = predicted_naive_lift(0.0, 0.10, 0.02).unwrap();
    assert_close(Some(predicted), 0.0784313725490196);
}

#[test]
fn equal_duplicate_rates_leave_the_lift_unchanged() {
    assert_close(predicted_naive_lift(0.031, 0.07, 0.07).ok(), 0.031);
}

#[test]
fn predicted_naive_lift_rejects_impossible_inputs() {
    assert_eq!(
        predicted_naive_lift(0.0, 0.1, -1.0),
        Err(StatsError::DuplicateRateAtMostMinusOne(-1.0))
    );
    assert_eq!(
        predicted_naive_lift(0.0, -1.5, 0.1),
        Err(StatsError::DuplicateRateAtMostMinusOne(-1.5))
    );
    assert!(matches!(
        predicted_naive_lift(f64::NAN, 0.0, 0.0),
        Err(StatsError::NotFinite { what: "lift", .. })
    ));
    assert!(matches!(
        predicted_naive_lift(1e300, 1e300, 0.0),
        Err(StatsError::NotFinite {
            what: "predicted naive lift",
            ..
        })
    ));
}

#[test]
fn delta_by_count_is_duplicates_per_stored_event() {
    assert_eq!(delta_by_count(10, 100), Some(0.1));
    assert_eq!(delta_by_count(0, 100), Some(0.0));
    assert_eq!(delta_by_count(3, 0), None);
}

#[test]
fn delta_by_value_is_duplicated_value_per_stored_value() {
    assert_eq!(delta_by_value(25.0, 1000.0), Ok(Some(0.025)));
    assert_eq!(delta_by_value(5.0, 0.0), Ok(None));
    assert!(matches!(
        delta_by_value(f64::NAN, 1.0),
        Err(StatsError::NotFinite {
            what: "duplicate value",
            ..
        })
    ));
}

#[test]
fn a_naive_total_is_the_stored_total_times_one_plus_delta() {
    // Control stores 1000 events and sees 20 duplicates; treatment 1000 and 100, with
    // equal units: the naive lift equals the prediction from the two deltas exactly.
    let (stored_c, dup_c, stored_t, dup_t) = (1000u64, 20u64, 1000u64, 100u64);
    let naive_lift = (stored_t + dup_t) as f64 / (stored_c + dup_c) as f64 - 1.0;
    let predicted = predicted_naive_lift(
        0.0,
        delta_by_count(dup_t, stored_t).unwrap(),
        delta_by_count(dup_c, stored_c).unwrap(),
    )
    .unwrap();
    assert_close(Some(predicted), naive_lift);
}

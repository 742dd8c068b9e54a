use proptest::prelude::*;
use traqlyte_stats::{mean_lift, proportion_lift, srm, ConfidenceLevel, Lift, Moments, Proportion};

/// Every present field is finite, the interval holds the estimate, the p-value is a
/// probability.
fn assert_well_formed(lift: &Lift) -> Result<(), TestCaseError> {
    for value in [
        lift.estimate(),
        lift.ci_low(),
        lift.ci_high(),
        lift.p_value(),
        lift.statistic(),
        lift.df(),
    ]
    .into_iter()
    .flatten()
    {
        prop_assert!(value.is_finite(), "non-finite field in {lift:?}");
    }
    prop_assert_eq!(lift.ci_low().is_some(), lift.ci_high().is_some());
    if let (Some(estimate), Some((low, high))) = (lift.estimate(), lift.ci()) {
        prop_assert!(low < estimate && estimate < high, "{lift:?}");
    }
    if let Some(p) = lift.p_value() {
        prop_assert!((0.0..=1.0).contains(&p), "{lift:?}");
    }
    Ok(())
}

fn proportion() -> impl Strategy<Value = Proportion> {
    (1u64..5_000)
        .prop_flat_map(|units| (0..=units, Just(units)))
        .prop_map(|(conversions, units)| Proportion::new(conversions, units).unwrap())
}

fn sample() -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(prop_oneof![Just(0.0), Just(1.0), -1e3..1e6f64], 1..40)
}

fn moments(values: &[f64]) -> Moments {
    let mut m = Moments::new();
    for &v in values {
        m.push(v).unwrap();
    }
    m
}

proptest! {
    #[test]
    fn proportion_lifts_are_never_nan_and_intervals_hold_their_estimate(
        control in proportion(),
        treatment in proportion(),
        level in 0.5..0.999f64,
    ) {
        let lift = proportion_lift(control, treatment, ConfidenceLevel::new(level).unwrap());
        assert_well_formed(&lift)?;
    }

    #[test]
    fn swapping_the_arms_negates_z_and_keeps_the_p_value(
        control in proportion(),
        treatment in proportion(),
    ) {
        let level = ConfidenceLevel::NINETY_FIVE;
        let forward = proportion_lift(control, treatment, level);
        let backward = proportion_lift(treatment, control, level);
        prop_assert_eq!(forward.statistic().map(|z| -z), backward.statistic());
        prop_assert_eq!(forward.p_value(), backward.p_value());
    }

    #[test]
    fn mean_lifts_are_never_nan_and_intervals_hold_their_estimate(
        control in sample(),
        treatment in sample(),
        level in 0.5..0.999f64,
    ) {
        let lift = mean_lift(&moments(&control), &moments(&treatment), ConfidenceLevel::new(level).unwrap())
            .unwrap();
        assert_well_formed(&lift)?;
    }

    #[test]
    fn merged_moments_agree_with_pushed_moments(values in sample(), split in 0usize..40) {
        let split = split.min(values.len());
        let mut merged = moments(&values[..split]);
        merged.merge(&moments(&values[split..]));
        let whole = moments(&values);
        prop_assert_eq!(merged.count(), whole.count());
        let (a, b) = (merged.mean().unwrap(), whole.mean().unwrap());
        prop_assert!((a - b).abs() <= 1e-9 * b.abs().max(1.0));
        // A variance lost in the merge (None where the whole has one) is a failure too.
        prop_assert_eq!(merged.variance().is_some(), whole.variance().is_some());
        if let (Some(a), Some(b)) = (merged.variance(), whole.variance()) {
            prop_assert!((a - b).abs() <= 1e-9 * b.abs().max(1.0), "{a} vs {b}");
        }
    }

    #[test]
    fn srm_p_values_are_probabilities(
        observed in prop::collection::vec(0u64..1_000_000, 2..6),
        weight in 0.01..100.0f64,
    ) {
        let weights: Vec<f64> = (0..observed.len()).map(|i| weight + i as f64).collect();
        match srm(&observed, &weights) {
            Ok(result) => {
                prop_assert!(result.chi_square() >= 0.0 && result.chi_square().is_finite());
                prop_assert!((0.0..=1.0).contains(&result.p_value()));
            }
            Err(err) => prop_assert!(observed.iter().all(|&o| o == 0), "{err}"),
        }
    }
}

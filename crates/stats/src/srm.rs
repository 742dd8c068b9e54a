use serde::Serialize;

use crate::dist;
use crate::error::{finite, StatsError};

/// The p-value below which a sample-ratio mismatch is flagged. Deliberately strict: the
/// check runs on every report, and a false alarm discredits a sound experiment.
pub const SRM_P_VALUE_THRESHOLD: f64 = 0.001;

/// Result of a sample-ratio-mismatch check: Pearson's chi-square goodness of fit of the
/// observed units per arm against the configured weights.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Srm {
    chi_square: f64,
    df: u64,
    p_value: f64,
    flagged: bool,
}

impl Srm {
    /// The test of a finite statistic ≥ 0 on `df` ≥ 1 degrees of freedom.
    fn of(chi_square: f64, df: u64) -> Srm {
        // The upper incomplete gamma function is defined for every finite statistic ≥ 0
        // and df ≥ 1; should it still fail, report "no evidence of mismatch" rather than
        // panic.
        let p_value = dist::chi_square_sf(chi_square, df as f64).unwrap_or(1.0);
        Srm {
            chi_square,
            df,
            p_value,
            flagged: p_value < SRM_P_VALUE_THRESHOLD,
        }
    }

    /// Pearson's statistic `Σ (O_i − E_i)² / E_i`.
    pub fn chi_square(&self) -> f64 {
        self.chi_square
    }

    /// Degrees of freedom: the number of arms minus one ([`srm`]), summed over the groups
    /// tested ([`srm_within_groups`]).
    pub fn df(&self) -> u64 {
        self.df
    }

    /// Upper-tail probability of the statistic under the chi-square distribution.
    pub fn p_value(&self) -> f64 {
        self.p_value
    }

    /// Whether `p_value < SRM_P_VALUE_THRESHOLD`: the split of units is very unlikely
    /// under the configured weights, so the assignment or the logging is suspect.
    pub fn flagged(&self) -> bool {
        self.flagged
    }
}

/// Tests the observed units per arm against the arms' weights.
///
/// Weights need not sum to one: expected counts are `E_i = N·w_i / Σw` with `N = ΣO_i`.
/// The statistic is compared with a chi-square distribution with `k − 1` degrees of
/// freedom, as `scipy.stats.chisquare(observed, f_exp=E)` does.
///
/// # Errors
/// [`StatsError::LengthMismatch`] when the slices differ in length,
/// [`StatsError::TooFewArms`] with fewer than two arms, [`StatsError::WeightNotPositive`]
/// for a zero, negative or non-finite weight, and [`StatsError::NoUnits`] when no unit was
/// observed at all.
pub fn srm(observed_units: &[u64], weights: &[f64]) -> Result<Srm, StatsError> {
    if observed_units.len() != weights.len() {
        return Err(StatsError::LengthMismatch {
            observed: observed_units.len(),
            weights: weights.len(),
        });
    }
    if observed_units.len() < 2 {
        return Err(StatsError::TooFewArms(observed_units.len()));
    }
    if let Some((index, &weight)) = weights
        .iter()
        .enumerate()
        .find(|(_, w)| !(w.is_finite() && **w > 0.0))
    {
        return Err(StatsError::WeightNotPositive { index, weight });
    }
    let total: f64 = observed_units.iter().map(|&o| o as f64).sum();
    if total == 0.0 {
        return Err(StatsError::NoUnits);
    }
    let weight_sum = finite("sum of weights", weights.iter().sum())?;
    let chi_square: f64 = observed_units
        .iter()
        .zip(weights)
        .map(|(&observed, &weight)| {
            let expected = total * weight / weight_sum;
            let diff = observed as f64 - expected;
            diff * diff / expected
        })
        .sum();
    let chi_square = finite("chi-square statistic", chi_square)?;
    Ok(Srm::of(chi_square, observed_units.len() as u64 - 1))
}

/// The fewest units a group of [`srm_within_groups`] must expect in each arm for the
/// chi-square tail: the approximation's usual bound. Below it one unit in an arm weighted
/// 1 % reads as a mismatch (a first version ramped at 99/1 with five units flagged 4.2 % of
/// simulated campaigns that had none, against the test's 0.1 %); such a group's arms are
/// tested with exact binomial tails instead.
pub const SRM_EXPECTED_MIN: f64 = 5.0;

/// Tests several groups of units at once, each against its own weights (a campaign's
/// versions: its units assigned under each version, against that version's weights), the
/// groups being independent:
/// - groups that expect at least [`SRM_EXPECTED_MIN`] units in every arm: the sum of
///   their Pearson statistics, on the sum of their degrees of freedom;
/// - the others (thin groups): each arm's count against its share by the exact binomial
///   tail in the direction observed, doubled, the smallest of them times their number
///   (Bonferroni);
/// - the p-value: the smaller of the two parts' times the number of parts present.
///
/// The statistic and degrees of freedom reported are Pearson's over every group with
/// units, thin ones included (a summary; the p-value is as above). With one group that is
/// not thin this is [`srm`].
///
/// Pooling the groups' units per arm instead hides a mismatch inside one group (a version
/// that lost a fifth of one arm's units after a reweighting read p = 0.94 pooled, 2e-14
/// alone) and two mismatches that cancel out, and is conservative whenever the weights
/// differ between groups.
///
/// # Errors
/// As [`srm`] for any group with units, and [`StatsError::NoUnits`] when no group has any.
pub fn srm_within_groups(groups: &[(&[u64], &[f64])]) -> Result<Srm, StatsError> {
    let (mut chi_square, mut df) = (0.0, 0u64);
    let (mut sound_chi_square, mut sound_df) = (0.0, 0u64);
    let mut exact: Vec<f64> = Vec::new();
    for (observed, weights) in groups {
        let total: u64 = observed.iter().sum();
        if total == 0 {
            continue;
        }
        let group = srm(observed, weights)?;
        chi_square += group.chi_square;
        df += group.df;
        let weight_sum: f64 = weights.iter().sum();
        let fewest = weights.iter().fold(f64::INFINITY, |a, &w| a.min(w));
        if total as f64 * fewest / weight_sum >= SRM_EXPECTED_MIN {
            sound_chi_square += group.chi_square;
            sound_df += group.df;
        } else {
            exact.extend(
                observed
                    .iter()
                    .zip(*weights)
                    .map(|(&o, &w)| binomial_two_sided(o, total, w / weight_sum)),
            );
        }
    }
    if df == 0 {
        return Err(StatsError::NoUnits);
    }
    let mut parts: Vec<f64> = Vec::with_capacity(2);
    if sound_df > 0 {
        parts.push(dist::chi_square_sf(sound_chi_square, sound_df as f64).unwrap_or(1.0));
    }
    if let Some(smallest) = exact.iter().copied().reduce(f64::min) {
        parts.push((smallest * exact.len() as f64).min(1.0));
    }
    let smallest = parts.iter().copied().fold(1.0, f64::min);
    let p_value = (smallest * parts.len() as f64).min(1.0);
    Ok(Srm {
        chi_square,
        df,
        p_value,
        flagged: p_value < SRM_P_VALUE_THRESHOLD,
    })
}

/// Twice the exact binomial tail of `observed` of `n` at probability `share`, in the
/// direction observed (at most 1).
fn binomial_two_sided(observed: u64, n: u64, share: f64) -> f64 {
    use statrs::distribution::{Binomial, DiscreteCDF};
    let Ok(binomial) = Binomial::new(share.clamp(0.0, 1.0), n) else {
        return 1.0;
    };
    let tail = if observed as f64 >= n as f64 * share {
        // P(X >= observed) = P(X > observed - 1).
        observed
            .checked_sub(1)
            .map_or(1.0, |below| binomial.sf(below))
    } else {
        binomial.cdf(observed)
    };
    (2.0 * tail).clamp(0.0, 1.0)
}

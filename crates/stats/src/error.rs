use std::fmt;

/// Which side of a comparison an input belongs to, so an error can say which arm was bad.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arm {
    /// The control (baseline) arm.
    Control,
    /// The treatment arm compared against control.
    Treatment,
}

impl fmt::Display for Arm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Arm::Control => "control",
            Arm::Treatment => "treatment",
        })
    }
}

/// Invalid input to a statistics function. Degenerate but valid data (a control rate of
/// zero, zero variance, a single unit) is not an error: it yields `None` fields instead.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StatsError {
    /// A proportion, moment set or SRM count vector has no units at all (n = 0).
    #[error("no units: a statistic needs at least one unit")]
    NoUnits,
    /// An arm of a mean comparison has no units (n = 0).
    #[error("the {0} arm has no units")]
    EmptyArm(Arm),
    /// More converters than units were reported for a proportion.
    #[error("{conversions} conversions exceed {units} units")]
    ConversionsExceedUnits {
        /// Converters reported.
        conversions: u64,
        /// Units reported.
        units: u64,
    },
    /// An input that must be a finite number is NaN or infinite.
    #[error("{what} must be finite, got {value}")]
    NotFinite {
        /// Which input was not finite.
        what: &'static str,
        /// The offending value.
        value: f64,
    },
    /// A variance is negative: either given directly, or implied by sums of values and
    /// squares that no real data could produce (beyond floating-point rounding).
    #[error("variance must not be negative, got {0}")]
    NegativeVariance(f64),
    /// Totals claim zero units but a non-zero sum or sum of squares.
    #[error("totals with n = 0 must have zero sums, got sum {sum} and sum of squares {sum_sq}")]
    InconsistentTotals {
        /// The reported sum of values.
        sum: f64,
        /// The reported sum of squared values.
        sum_sq: f64,
    },
    /// A sample-ratio weight is zero, negative or not finite.
    #[error("weight {index} must be positive and finite, got {weight}")]
    WeightNotPositive {
        /// Position of the weight in the slice.
        index: usize,
        /// The offending weight.
        weight: f64,
    },
    /// The observed counts and the weights have different lengths.
    #[error("{observed} observed counts but {weights} weights")]
    LengthMismatch {
        /// Number of observed counts.
        observed: usize,
        /// Number of weights.
        weights: usize,
    },
    /// A sample-ratio test needs at least two arms (one degree of freedom).
    #[error("a sample-ratio test needs at least 2 arms, got {0}")]
    TooFewArms(usize),
    /// A confidence level outside the open interval (0, 1).
    #[error("confidence level must be strictly between 0 and 1, got {0}")]
    ConfidenceLevelOutOfRange(f64),
    /// A duplicate rate δ at or below −1: the naive metric `stored·(1 + δ)` would have
    /// the opposite sign of the stored one, or be zero, which no retry can cause.
    #[error("duplicate rate must be greater than -1, got {0}")]
    DuplicateRateAtMostMinusOne(f64),
}

/// Returns `value` if it is finite, or [`StatsError::NotFinite`] naming it.
pub(crate) fn finite(what: &'static str, value: f64) -> Result<f64, StatsError> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(StatsError::NotFinite { what, value })
    }
}

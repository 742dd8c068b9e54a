//! The pure statistics of TraqLyte's experiment reports: no I/O, no async, no SQL.
//!
//! - [`Moments`] accumulates count, sum, mean and sample variance of a per-unit metric,
//!   value by value or from the totals a SQL aggregate returns.
//! - [`proportion_lift`] (two-proportion z-test) and [`mean_lift`] (Welch's t-test) compare
//!   a treatment arm with control and return a [`Lift`]: the relative lift `t/c − 1`, its
//!   delta-method confidence interval at a [`ConfidenceLevel`], and a two-sided p-value.
//!   Conversion counts enter as a checked [`Proportion`].
//! - [`srm`] runs the sample-ratio-mismatch chi-square test of units per arm against the
//!   weights and returns an [`Srm`].
//! - [`delta_by_count`], [`delta_by_value`] and [`predicted_naive_lift`] quantify how
//!   duplicate deliveries would have biased a pipeline without dedupe.
//!
//! Invalid input is a [`StatsError`], never a panic. Degenerate but valid data (a control
//! rate of zero, zero variance, a single unit) gives `None` fields, never NaN, so every
//! number bound for JSON is finite or `null`. The formulas are written out in
//! `docs/statistics.md`.

#![deny(missing_docs)]

mod dedupe;
mod dist;
mod error;
mod lift;
mod moments;
mod srm;

pub use dedupe::{delta_by_count, delta_by_value, predicted_naive_lift};
pub use error::{Arm, StatsError};
pub use lift::{
    estimate_lift, mean_lift, proportion_lift, ConfidenceLevel, Lift, Proportion,
    NORMAL_APPROXIMATION_MIN,
};
pub use moments::{Moments, TOTALS_RELATIVE_TOLERANCE};
pub use srm::{srm, srm_within_groups, Srm, SRM_EXPECTED_MIN, SRM_P_VALUE_THRESHOLD};

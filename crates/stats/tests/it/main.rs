//! The statistics crate's integration tests, one binary: reference values computed
//! independently with SciPy (`tools/stats_reference.py` prints every constant used here,
//! next to the exact SciPy call that produced it), hand-checkable tiny cases, the
//! documented degenerate cases, input validation, and properties that must hold for any
//! data (no NaN, intervals around their estimate).

mod dedupe;
mod estimates;
mod moments;
mod properties;
mod proportions;
mod srm;
mod welch;

/// Agreement required with reference values: 1e-9 relative, which for the p-values and
/// lifts here (all ≥ 1e-6 in magnitude, or exactly zero) is at least as strict as 1e-9
/// absolute.
pub const TOLERANCE: f64 = 1e-9;

/// Asserts `actual` is present and within [`TOLERANCE`] of `expected`, relative to
/// `max(|expected|, 1)` for values of order one and to `|expected|` for small ones.
#[track_caller]
pub fn assert_close(actual: Option<f64>, expected: f64) {
    let actual = actual.unwrap_or_else(|| panic!("expected {expected}, got None"));
    let scale = if expected == 0.0 { 1.0 } else { expected.abs() };
    assert!(
        (actual - expected).abs() <= TOLERANCE * scale,
        "expected {expected}, got {actual} (difference {:e})",
        actual - expected
    );
}

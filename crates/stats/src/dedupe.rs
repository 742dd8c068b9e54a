use crate::error::{finite, StatsError};

/// Duplicate rate by count, `δ = duplicates / stored`: how many extra deliveries a
/// pipeline without dedupe would have counted per stored (deduplicated) event. `None`
/// when nothing is stored.
pub fn delta_by_count(duplicates: u64, stored: u64) -> Option<f64> {
    (stored > 0).then(|| duplicates as f64 / stored as f64)
}

/// Duplicate rate by value, `δ_value = Σ duplicate values / Σ stored values`: the
/// fraction by which a pipeline without dedupe would have inflated a sum metric. `None`
/// when the stored values sum to zero.
///
/// # Errors
/// [`StatsError::NotFinite`] for a NaN or infinite total.
pub fn delta_by_value(duplicate_value: f64, stored_value: f64) -> Result<Option<f64>, StatsError> {
    let duplicate_value = finite("duplicate value", duplicate_value)?;
    let stored_value = finite("stored value", stored_value)?;
    let delta = duplicate_value / stored_value;
    Ok((stored_value != 0.0 && delta.is_finite()).then_some(delta))
}

/// The relative lift a pipeline without dedupe would report, given the true (deduped)
/// lift `L` and each arm's duplicate rate: `(1 + L)(1 + δ_T) / (1 + δ_C) − 1`.
///
/// Duplicates multiply each arm's metric by `1 + δ`, so the naive ratio is the true ratio
/// times `(1 + δ_T)/(1 + δ_C)`. When `δ_T ≠ δ_C`, retry noise alone moves the lift.
///
/// By count δ ≥ 0 always; by value δ can be negative when duplicated values are
/// negative (refunds), and any δ > −1 is accepted.
///
/// # Errors
/// [`StatsError::NotFinite`] for a NaN or infinite input and
/// [`StatsError::DuplicateRateAtMostMinusOne`] for δ ≤ −1.
pub fn predicted_naive_lift(lift: f64, delta_t: f64, delta_c: f64) -> Result<f64, StatsError> {
    let lift = finite("lift", lift)?;
    let delta_t = finite("treatment duplicate rate", delta_t)?;
    let delta_c = finite("control duplicate rate", delta_c)?;
    if let Some(&bad) = [delta_t, delta_c].iter().find(|d| **d <= -1.0) {
        return Err(StatsError::DuplicateRateAtMostMinusOne(bad));
    }
    let predicted = (1.0 + lift) * (1.0 + delta_t) / (1.0 + delta_c) - 1.0;
    finite("predicted naive lift", predicted)
}

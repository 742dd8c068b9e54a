use crate::error::{finite, StatsError};

/// Relative slack allowed when totals imply a slightly negative sum of squared deviations:
/// `Σx² − (Σx)²/n` computed from rounded sums can fall a few ulps below zero for data whose
/// true variance is zero. Anything more negative than this fraction of `Σx²` cannot come
/// from real data and is rejected.
pub const TOTALS_RELATIVE_TOLERANCE: f64 = 1e-9;

/// Count, mean and sample variance of a stream of values, accumulated with Welford's
/// algorithm so that a large mean does not swamp a small variance.
///
/// Build it by [`push`](Self::push)ing values one at a time, from the totals a SQL
/// aggregate returns ([`from_totals`](Self::from_totals)), or from a count, mean and
/// variance ([`from_mean_variance`](Self::from_mean_variance)); combine partial results
/// with [`merge`](Self::merge).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Moments {
    count: u64,
    mean: f64,
    /// Sum of squared deviations from the mean, `Σ(x − x̄)²`, never negative.
    m2: f64,
    /// Neumaier-compensated running sum, kept apart from `mean · count` so `sum()` returns
    /// the sum of the values rather than a rounded product.
    sum: f64,
    sum_compensation: f64,
}

impl Moments {
    /// An empty accumulator: count 0, no mean, no variance.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds moments from `n`, `Σx` and `Σx²` as `SELECT count(*), sum(x), sum(x*x)`
    /// returns them.
    ///
    /// `Σ(x − x̄)²` is computed as `Σx² − x̄·Σx` with one fused multiply-add. This loses
    /// relative precision when the variance is tiny next to the squared mean (catastrophic
    /// cancellation is inherent to these totals); where that matters, prefer the
    /// database's own `var_samp` with [`from_mean_variance`](Self::from_mean_variance).
    /// A result below zero by at most [`TOTALS_RELATIVE_TOLERANCE`] of `Σx²` is rounding
    /// and is clamped to zero, and so is a positive one within `4·n·ε·Σx²` (the rounding
    /// of `n` identical values: their variance is zero, not the noise).
    ///
    /// `n = 0` with both sums zero is the empty aggregate and gives empty moments.
    ///
    /// # Errors
    /// [`StatsError::NotFinite`] for a NaN or infinite sum, [`StatsError::InconsistentTotals`]
    /// for `n = 0` with non-zero sums, and [`StatsError::NegativeVariance`] when the sums
    /// imply a clearly negative variance (including `Σx² < 0`).
    pub fn from_totals(n: u64, sum: f64, sum_sq: f64) -> Result<Self, StatsError> {
        let sum = finite("sum", sum)?;
        let sum_sq = finite("sum of squares", sum_sq)?;
        if n == 0 {
            return if sum == 0.0 && sum_sq == 0.0 {
                Ok(Self::new())
            } else {
                Err(StatsError::InconsistentTotals { sum, sum_sq })
            };
        }
        if sum_sq < 0.0 {
            return Err(StatsError::NegativeVariance(sum_sq));
        }
        let count = n as f64;
        let mean = sum / count;
        let m2 = (-mean).mul_add(sum, sum_sq);
        if m2 < -TOTALS_RELATIVE_TOLERANCE * sum_sq {
            let variance = if n > 1 { m2 / (count - 1.0) } else { m2 };
            return Err(StatsError::NegativeVariance(variance));
        }
        // Identical non-integer values leave rounding noise rather than 0 (a hundred units
        // of 9.99 gave a variance of 6e-14, and a t of 1.6e8 against another constant
        // arm): anything within the summation's own error, a few ulps of Σx² per value,
        // is zero.
        let noise = 4.0 * count * f64::EPSILON * sum_sq;
        Ok(Self {
            count: n,
            mean,
            m2: if m2 <= noise { 0.0 } else { m2 },
            sum,
            sum_compensation: 0.0,
        })
    }

    /// Builds moments from a count, a mean and a sample variance (denominator `n − 1`), as
    /// `SELECT count(*), avg(x), var_samp(x)` returns them. With `count = 1` the variance
    /// is undefined and ignored (pass 0).
    ///
    /// # Errors
    /// [`StatsError::NoUnits`] for `count = 0` (the mean of nothing is undefined),
    /// [`StatsError::NotFinite`] for a NaN or infinite mean or variance, and
    /// [`StatsError::NegativeVariance`] for a variance below zero.
    pub fn from_mean_variance(count: u64, mean: f64, variance: f64) -> Result<Self, StatsError> {
        let mean = finite("mean", mean)?;
        let variance = finite("variance", variance)?;
        if count == 0 {
            return Err(StatsError::NoUnits);
        }
        if variance < 0.0 {
            return Err(StatsError::NegativeVariance(variance));
        }
        let n = count as f64;
        let m2 = if count > 1 { variance * (n - 1.0) } else { 0.0 };
        Ok(Self {
            count,
            mean,
            m2,
            sum: mean * n,
            sum_compensation: 0.0,
        })
    }

    /// Adds one value.
    ///
    /// # Errors
    /// [`StatsError::NotFinite`] for NaN or an infinity; the accumulator is unchanged.
    pub fn push(&mut self, x: f64) -> Result<(), StatsError> {
        let x = finite("value", x)?;
        self.count += 1;
        let delta = x - self.mean;
        self.mean += delta / self.count as f64;
        self.m2 += delta * (x - self.mean);
        self.add_to_sum(x);
        Ok(())
    }

    /// Folds `other` into `self` (Chan, Golub and LeVeque's pairwise update), as if every
    /// value pushed into `other` had been pushed into `self`.
    pub fn merge(&mut self, other: &Moments) {
        if other.count == 0 {
            return;
        }
        if self.count == 0 {
            *self = *other;
            return;
        }
        let (na, nb) = (self.count as f64, other.count as f64);
        let n = na + nb;
        let delta = other.mean - self.mean;
        self.mean += delta * nb / n;
        self.m2 += other.m2 + delta * delta * na * nb / n;
        self.count = self.count.saturating_add(other.count);
        self.add_to_sum(other.sum());
    }

    /// Number of values.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Sum of the values (0 when empty).
    pub fn sum(&self) -> f64 {
        self.sum + self.sum_compensation
    }

    /// Arithmetic mean, `None` when empty.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then_some(self.mean)
    }

    /// Sample variance `Σ(x − x̄)² / (n − 1)`, `None` with fewer than two values.
    pub fn variance(&self) -> Option<f64> {
        (self.count > 1).then(|| self.m2 / (self.count as f64 - 1.0))
    }

    /// Squared standard error of the mean, `variance / n`, `None` with fewer than two
    /// values.
    pub fn variance_of_mean(&self) -> Option<f64> {
        self.variance().map(|v| v / self.count as f64)
    }

    fn add_to_sum(&mut self, x: f64) {
        let t = self.sum + x;
        if self.sum.abs() >= x.abs() {
            self.sum_compensation += (self.sum - t) + x;
        } else {
            self.sum_compensation += (x - t) + self.sum;
        }
        self.sum = t;
    }
}

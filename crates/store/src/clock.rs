//! The store's clock: the one clock that times shared between server processes are
//! measured on. Servers' clocks can disagree by seconds or minutes; reading the
//! database's time makes them agree. Two ways: decisions that must be exact (a
//! reservation's age, a lease, an expiry) compare with the database's time in their own
//! statement or read it first ([`Store::clock_us`]); times stamped on the hot path (an
//! event's arrival, an assignment) use [`crate::now_us`], this process's clock corrected
//! by an offset to the database's that [`Store::sync_clock`] measures at connect and
//! `serve` again every minute, exact to half a round trip.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::tx::with_pool;
use crate::{Store, StoreError};

/// What this process adds to its own clock to read the store's.
static OFFSET_US: AtomicI64 = AtomicI64::new(0);

/// A measurement whose round trip took longer than this is not used: half of it is the
/// offset's possible error.
const SYNC_ROUND_TRIP_MAX_US: i64 = 50_000;

/// Measurements per sync; the one with the shortest round trip is kept.
const SYNC_SAMPLES: usize = 3;

pub(crate) fn offset_us() -> i64 {
    OFFSET_US.load(Ordering::Relaxed)
}

/// This process's own clock, microseconds since the Unix epoch.
pub(crate) fn process_now_us() -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0);
    now.saturating_add(test_skew_us())
}

/// Test-only hook (feature `test-hooks`): `TRAQLYTE_TEST_CLOCK_SKEW_MS` moves this
/// process's own clock, as a server whose clock is wrong would have it.
#[cfg(feature = "test-hooks")]
fn test_skew_us() -> i64 {
    static SKEW_US: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *SKEW_US.get_or_init(|| {
        std::env::var("TRAQLYTE_TEST_CLOCK_SKEW_MS")
            .ok()
            .and_then(|ms| ms.parse::<i64>().ok())
            .map_or(0, |ms| ms.saturating_mul(1_000))
    })
}

#[cfg(not(feature = "test-hooks"))]
fn test_skew_us() -> i64 {
    0
}

/// The store's clock in microseconds since the Unix epoch, as SQL on each backend
/// (`store_now_us!(postgres)`, `store_now_us!(sqlite)`), for statements that stamp or
/// compare times themselves.
macro_rules! store_now_us {
    (postgres) => {
        "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)"
    };
    (sqlite) => {
        "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)"
    };
}

pub(crate) use store_now_us;

const PG_CLOCK: &str = concat!("SELECT ", store_now_us!(postgres));
const SQLITE_CLOCK: &str = concat!("SELECT ", store_now_us!(sqlite));

impl Store {
    /// The store's time, microseconds since the Unix epoch (one round trip): for work
    /// that runs rarely enough to read it before writing (webhook leases, login links).
    pub async fn clock_us(&self) -> Result<i64, StoreError> {
        let sql = self.by_backend(PG_CLOCK, SQLITE_CLOCK);
        with_pool!(self, reader, |pool| Ok(sqlx::query_scalar(sql)
            .fetch_one(pool)
            .await?))
    }

    /// Measures this process's clock against the store's and corrects [`crate::now_us`]
    /// by the difference (the shortest of a few round trips, its midpoint taken as the
    /// moment the store read its clock). Returns the offset, or `None` when every round
    /// trip was too slow to trust (the last offset is kept).
    pub async fn sync_clock(&self) -> Result<Option<i64>, StoreError> {
        let mut best: Option<(i64, i64)> = None;
        for _ in 0..SYNC_SAMPLES {
            let before = process_now_us();
            let store_us = self.clock_us().await?;
            let after = process_now_us();
            let round_trip = after - before;
            let offset = store_us - before - round_trip / 2;
            if round_trip <= SYNC_ROUND_TRIP_MAX_US && best.is_none_or(|(rt, _)| round_trip < rt) {
                best = Some((round_trip, offset));
            }
        }
        let offset = best.map(|(_, offset)| offset);
        if let Some(offset) = offset {
            OFFSET_US.store(offset, Ordering::Relaxed);
        }
        Ok(offset)
    }
}

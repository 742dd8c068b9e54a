//! The store's clock: the one clock that times shared between server processes are
//! measured on. Servers' clocks can disagree by seconds or minutes; reading the
//! database's time makes them agree. Two ways: decisions that must be exact (a
//! reservation's age, a lease, an expiry) compare with the database's time in their own
//! statement or read it first ([`Store::clock_us`]); times stamped on the hot path (an
//! event's arrival, an assignment) use [`crate::now_us`], this process's clock corrected
//! by an offset to the database's that [`Store::sync_clock`] measures at connect, and
//! `serve` and `consume nats` again every minute, exact to half a round trip. What a peer
//! checks against its own clock (a webhook's signed timestamp) uses this machine's clock,
//! [`crate::local_now_us`].

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::tx::with_pool;
use crate::{Store, StoreError};

/// What this process adds to its own clock to read the store's.
static OFFSET_US: AtomicI64 = AtomicI64::new(0);

/// A measurement whose round trip took longer than this is not used: half of it is the
/// offset's possible error.
const SYNC_ROUND_TRIP_MAX_US: i64 = 50_000;

/// Measurements fast enough to use that a sync takes; the one with the shortest round
/// trip is kept.
const SYNC_SAMPLES: usize = 3;

/// How long a sync tries to get [`SYNC_SAMPLES`] fast enough measurements: on a loaded
/// machine the first few may be slow (a process keeping its own clock for a minute would
/// stamp with it), and a database too far away for any never gives one.
const SYNC_BUDGET: std::time::Duration = std::time::Duration::from_millis(500);

/// An offset beyond this is logged at each sync: a machine's clock this far off is worth
/// an operator's look, though every stamp follows the database's all the same.
const OFFSET_WARN_US: i64 = 1_000_000;

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
        // `statement_timestamp()`, not `clock_timestamp()`: stable within a statement,
        // so a comparison with it can use an index (the idempotency purge's).
        "CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000000 AS BIGINT)"
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
    /// by the difference (the shortest of a few round trips, timed on a monotonic clock,
    /// its midpoint taken as the moment the store read its clock). Returns the offset, or
    /// `None` when every round trip was too slow to trust (the last offset is kept).
    /// Logs a warning when the offset is over a second, or when none could be measured.
    pub async fn sync_clock(&self) -> Result<Option<i64>, StoreError> {
        let mut best: Option<(u128, i64)> = None;
        let mut usable = 0;
        let began = Instant::now();
        while usable < SYNC_SAMPLES && began.elapsed() < SYNC_BUDGET {
            let (before, started) = (process_now_us(), Instant::now());
            let store_us = self.clock_us().await?;
            let round_trip_us = started.elapsed().as_micros();
            let offset = store_us - before.saturating_add((round_trip_us / 2) as i64);
            if round_trip_us > SYNC_ROUND_TRIP_MAX_US as u128 {
                continue;
            }
            usable += 1;
            if best.is_none_or(|(shortest, _)| round_trip_us < shortest) {
                best = Some((round_trip_us, offset));
            }
        }
        let offset = best.map(|(_, offset)| offset);
        match offset {
            Some(offset_us) => {
                OFFSET_US.store(offset_us, Ordering::Relaxed);
                if offset_us.abs() > OFFSET_WARN_US {
                    tracing::warn!(offset_us, "this machine's clock differs from the database's; times are stamped on the database's");
                }
            }
            None => tracing::warn!(
                round_trip_max_us = SYNC_ROUND_TRIP_MAX_US,
                "every round trip to the database was too slow to measure its clock; keeping the last offset"
            ),
        }
        Ok(offset)
    }
}

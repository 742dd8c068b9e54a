//! The store's clock: the one clock that decisions shared between server processes
//! (a reservation's age, a lease, an expiry) are measured on. Servers' clocks can
//! disagree by seconds or minutes; each reading the database's time makes them agree.

use crate::tx::with_pool;
use crate::{Store, StoreError};

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
}

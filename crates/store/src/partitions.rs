//! The bounded dedupe horizon: PostgreSQL's `events` table is partitioned by the day of
//! each event's occurrence time, partitions are created ahead of time, and the days that
//! leave the horizon are detached from `events` (never dropped) and attached to
//! `events_detached`, where they stay readable and keep their own primary key. SQLite
//! keeps one table; there every function here is a no-op.
//!
//! The pure parts ([`DedupeHorizon`], [`occurred_day`], [`plan_maintenance`]) decide;
//! [`Store::maintain_partitions`] and [`Store::partitions`] carry out and report.

use sqlx::Row;
use traqlyte_identity::Contract;

use crate::tx::TxInner;
use crate::{Store, StoreError};

/// `occurred_day` of an event without an occurrence time: the `events_untimed` partition.
pub const UNTIMED_DAY: i32 = i32::MIN;
/// Microseconds in a day.
const DAY_US: i64 = 86_400_000_000;
/// Days kept attached beyond the horizon, so that an event the live path admitted just
/// before midnight never finds its partition detached by a maintenance run just after.
pub const DETACH_GRACE_DAYS: i32 = 1;
/// Days of partitions created ahead of today: more than the future skew admitted, so a
/// missed maintenance run or two never leaves an admitted event without its partition.
pub const PARTITIONS_AHEAD_DAYS: i32 = 3;
/// How far in the future an occurrence time may lie (clock skew between producers and
/// the server) before the live path refuses it.
pub const FUTURE_SKEW_US: i64 = DAY_US;

/// Whether a time lies further ahead of `now_us` than [`FUTURE_SKEW_US`]: an event the
/// live path refuses, an outcome `POST /outcome` refuses, a bound Segment fact that
/// becomes no outcome.
pub fn ahead_of_clock(at_us: i64, now_us: i64) -> bool {
    at_us > now_us.saturating_add(FUTURE_SKEW_US)
}
/// A maintenance run waits at most this long for a lock held by ingestion, then gives
/// up (the next run retries) instead of queueing every insert behind it.
const MAINTAIN_LOCK_TIMEOUT_MS: u32 = 5_000;
/// A detach waits at most this long for `events`: it needs `ACCESS EXCLUSIVE`, so every
/// insert and read queues behind it while it waits. Those of a `pg_dump` (a read lock
/// for hours), a long report or a backfill dry run held it to the 5 s of
/// `MAINTAIN_LOCK_TIMEOUT_MS`, a write stall once a minute for as long as they ran.
/// Giving up is cheap: the day stays attached (its index maintained a little longer)
/// and the next run retries.
pub const DETACH_LOCK_TIMEOUT_MS: u32 = 200;
/// The advisory lock every partition change takes, so maintenance runs of several
/// processes go one at a time.
pub const PARTITION_LOCK_KEY: i64 = 0x7472_6171_7061_7274; // "traqpart"

/// The day (since 1970-01-01 UTC) an occurrence time falls in: the partition key.
pub fn occurred_day(occurred_at_us: Option<i64>) -> i32 {
    match occurred_at_us {
        None => UNTIMED_DAY,
        // Timestamps are years 0001–9999, so the day always fits an i32.
        Some(us) => i32::try_from(us.div_euclid(DAY_US)).unwrap_or(UNTIMED_DAY + 1),
    }
}

/// The time an event is partitioned by: its contract's occurrence time, unless the
/// contract declares that pointer transport metadata (the built-in
/// `openlineage.run_event` does with `eventTime`). A producer may restamp a transport
/// field on a retry, so partitioning by it would let a retry that crosses a day boundary
/// miss its original; such events are stored untimed, under a key that never expires.
pub fn partition_time(contract: &Contract, occurred_at_us: Option<i64>) -> Option<i64> {
    let pointer = contract.occurred_at()?;
    if contract.transport().any(|t| t == pointer) {
        return None;
    }
    occurred_at_us
}

/// The partition day of an event of `contract`.
pub fn partition_day(contract: &Contract, occurred_at_us: Option<i64>) -> i32 {
    occurred_day(partition_time(contract, occurred_at_us))
}

/// The configured horizon inside which the live path suppresses duplicates by
/// constraint (`--dedupe-horizon-days`, default 14: the longest plausible retry delay,
/// doubled).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DedupeHorizon {
    days: u32,
}

/// Why the live path refuses an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutsideHorizon {
    /// Its occurrence time is older than the horizon.
    TooOld,
    /// Its occurrence time lies further in the future than [`FUTURE_SKEW_US`].
    TooFarAhead,
}

impl DedupeHorizon {
    /// The default: 14 days.
    pub const DEFAULT_DAYS: u32 = 14;
    /// The longest horizon accepted (ten years of daily partitions).
    pub const DAYS_MAX: u32 = 3_650;
    /// How many days past the horizon `--late-events reconcile` takes an event: a year.
    /// Each old day the live path meets gets a table of its own
    /// (`create_detached_days`), so a client's occurrence times must not choose how
    /// many tables the server creates (back to year 1, 700,000 of them). Older events
    /// go through `traqlyte backfill`, an operator's command, as without the option.
    pub const LATE_DAYS_MAX: u32 = 366;

    /// A horizon of `days` (1 to [`Self::DAYS_MAX`]).
    pub fn new(days: u32) -> Option<DedupeHorizon> {
        (1..=Self::DAYS_MAX)
            .contains(&days)
            .then_some(DedupeHorizon { days })
    }

    /// The horizon in days.
    pub fn days(&self) -> u32 {
        self.days
    }

    /// Whether the live path takes an event with this occurrence time at `now_us`. An
    /// event without one is always taken (it lives in the untimed partition).
    pub fn admits(&self, occurred_at_us: Option<i64>, now_us: i64) -> Result<(), OutsideHorizon> {
        let Some(at) = occurred_at_us else {
            return Ok(());
        };
        if at < now_us.saturating_sub(i64::from(self.days) * DAY_US) {
            return Err(OutsideHorizon::TooOld);
        }
        if ahead_of_clock(at, now_us) {
            return Err(OutsideHorizon::TooFarAhead);
        }
        Ok(())
    }

    /// [`Self::admits`] as the live path applies it under `late`: an event older than the
    /// horizon is taken as [`Admission::Late`] (to be reconciled as a backfill is) when
    /// late events are reconciled, else refused; one too far ahead is always refused.
    pub fn admission(
        &self,
        occurred_at_us: Option<i64>,
        now_us: i64,
        late: LateEvents,
    ) -> Result<Admission, OutsideHorizon> {
        match self.admits(occurred_at_us, now_us) {
            Ok(()) => Ok(Admission::Live),
            Err(OutsideHorizon::TooOld)
                if late == LateEvents::Reconcile
                    && occurred_at_us.is_some_and(|at| {
                        let days = i64::from(self.days) + i64::from(Self::LATE_DAYS_MAX);
                        at >= now_us.saturating_sub(days * DAY_US)
                    }) =>
            {
                Ok(Admission::Late)
            }
            Err(outside) => Err(outside),
        }
    }

    /// How a refusal says "too old" under `late`: past the horizon, or past the late
    /// days too when late events are reconciled.
    pub fn too_old(&self, late: LateEvents) -> String {
        match late {
            LateEvents::Refuse => format!("older than the {}-day dedupe horizon", self.days),
            LateEvents::Reconcile => format!(
                "older than the {}-day dedupe horizon and the {} days past it that late events are reconciled for",
                self.days,
                Self::LATE_DAYS_MAX
            ),
        }
    }

    /// The first day kept attached at `now_us`: every day the live path admits, and
    /// [`DETACH_GRACE_DAYS`] more.
    pub fn first_attached_day(&self, now_us: i64) -> i32 {
        occurred_day(Some(now_us)) - self.days as i32 - DETACH_GRACE_DAYS
    }
}

impl Default for DedupeHorizon {
    fn default() -> Self {
        DedupeHorizon {
            days: Self::DEFAULT_DAYS,
        }
    }
}

/// How the live path takes an event it admits ([`DedupeHorizon::admission`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Inside the horizon: a live transaction writes it.
    Live,
    /// Older than the horizon, taken because late events are reconciled: it needs a
    /// backfill's transaction ([`crate::Store::begin_backfill`]).
    Late,
}

/// What the live path does with an event older than the horizon.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LateEvents {
    /// `422 outside_horizon`, nothing written: late events go through `traqlyte backfill`.
    #[default]
    Refuse,
    /// Reconciled like a backfill: on PostgreSQL every ingestion transaction then reads
    /// the partition catalog and sends an older event to the detached partition of its
    /// day, whose own primary key suppresses its duplicates (docs/scaling.md gives the
    /// cost). Events too far ahead are still refused.
    Reconcile,
}

/// What a maintenance run changes.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Maintenance {
    /// Days whose partition is created (attached).
    pub create: Vec<i32>,
    /// Days whose partition is detached.
    pub detach: Vec<i32>,
}

/// Decides a maintenance run: create every day of `[first attached, today + ahead]` that
/// has no partition yet (attached or detached), detach every attached day before the
/// first attached day. A detached day is never attached again.
pub fn plan_maintenance(
    attached: &[i32],
    detached: &[i32],
    horizon: &DedupeHorizon,
    now_us: i64,
) -> Maintenance {
    let first = horizon.first_attached_day(now_us);
    let last = occurred_day(Some(now_us)) + PARTITIONS_AHEAD_DAYS;
    let create = (first..=last)
        .filter(|day| !attached.contains(day) && !detached.contains(day))
        .collect();
    let mut detach: Vec<i32> = attached
        .iter()
        .copied()
        .filter(|&day| day != UNTIMED_DAY && day < first)
        .collect();
    detach.sort_unstable();
    Maintenance { create, detach }
}

/// The days from the oldest attached one up to `before` (exclusive) that have no
/// partition at all. A `serve` down for longer than its horizon leaves them when a
/// command with a shorter horizon then creates only the newest days;
/// [`Store::create_partitions`] fills them (attached), so a backfill never takes a day
/// inside `serve`'s horizon for an old one and gives it a detached table, where live
/// events of that day would be refused. `serve`'s next run detaches those it no longer
/// admits.
pub fn gap_days(attached: &[i32], detached: &[i32], before: i32) -> Vec<i32> {
    let Some(oldest) = attached.iter().copied().filter(|&d| d != UNTIMED_DAY).min() else {
        return Vec::new();
    };
    (oldest..before)
        .filter(|day| !attached.contains(day) && !detached.contains(day))
        .collect()
}

/// Most partitions one maintenance transaction creates or moves. Each holds a few locks
/// (the table, its index, the parent's) until the transaction ends, and PostgreSQL's
/// shared lock table has room for `max_locks_per_transaction` (64 by default) times
/// its connections: about 2,000 creations in one transaction already fail there.
const MAINTENANCE_STEPS_MAX: usize = 200;

/// Whether a maintenance run detaches the days that left its horizon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Detach {
    Yes,
    No,
}

/// One partition as `traqlyte partitions status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PartitionInfo {
    /// The table's name (`events_p20261130`, `events_untimed`).
    pub table: String,
    /// The first day it holds, `YYYY-MM-DD`; `None` for the untimed one.
    pub from_day: Option<String>,
    /// The day after the last it holds (exclusive).
    pub to_day: Option<String>,
    /// Rows it holds (counted).
    pub rows: i64,
    /// Bytes of its indexes (the dedupe key).
    pub index_bytes: i64,
    /// Attached to `events` (live writes maintain its index) or detached.
    pub attached: bool,
}

const SELECT_PARTITIONS: &str = "SELECT c.relname AS table_name, p.relname AS parent,
       CAST(substring(pg_get_expr(c.relpartbound, c.oid) FROM 'FROM \\(''?(-?[0-9]+)''?\\)') AS INTEGER) AS first_day,
       pg_indexes_size(c.oid) AS index_bytes
     FROM pg_inherits i
     JOIN pg_class c ON c.oid = i.inhrelid
     JOIN pg_class p ON p.oid = i.inhparent
     JOIN pg_namespace n ON n.oid = p.relnamespace
     WHERE n.nspname = current_schema() AND p.relname IN ('events', 'events_detached')
     ORDER BY first_day NULLS FIRST, c.relname";

/// A partition as the catalog lists it.
struct Listed {
    table: String,
    attached: bool,
    first_day: Option<i32>,
    index_bytes: i64,
}

/// The table name of a day's partition.
fn partition_table(day: i32) -> String {
    format!("events_p{}", day_text(day).replace('-', ""))
}

/// `YYYY-MM-DD` of a day since the epoch (proleptic Gregorian; H. Hinnant's
/// `civil_from_days`, exact for every day an RFC 3339 timestamp can name).
pub fn day_text(day: i32) -> String {
    let z = i64::from(day) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

async fn list(conn: &mut sqlx::PgConnection) -> Result<Vec<Listed>, StoreError> {
    let rows = sqlx::query(SELECT_PARTITIONS).fetch_all(&mut *conn).await?;
    rows.iter()
        .map(|row| {
            let parent: String = row.try_get("parent")?;
            Ok(Listed {
                table: row.try_get("table_name")?,
                attached: parent == "events",
                first_day: row.try_get("first_day")?,
                index_bytes: row.try_get("index_bytes")?,
            })
        })
        .collect()
}

/// The days of the day partitions in `listed` that are attached (or not).
fn days(listed: &[Listed], attached: bool) -> Vec<i32> {
    listed
        .iter()
        .filter(|p| p.attached == attached && p.table.starts_with("events_p"))
        .filter_map(|p| p.first_day)
        .collect()
}

/// The attached and the detached days, read inside a transaction that already holds a
/// lock on `events` so no maintenance run can detach one of them before it ends.
pub(crate) async fn partition_days(
    conn: &mut sqlx::PgConnection,
) -> Result<(Vec<i32>, Vec<i32>), StoreError> {
    sqlx::query("LOCK TABLE events IN ROW EXCLUSIVE MODE")
        .execute(&mut *conn)
        .await?;
    let listed = list(conn).await?;
    Ok((days(&listed, true), days(&listed, false)))
}

/// Takes the partition changes' advisory lock for the rest of the transaction, waiting at
/// most [`MAINTAIN_LOCK_TIMEOUT_MS`] for it and for every lock after it, then lists the
/// partitions as they are under it.
async fn lock_and_list(conn: &mut sqlx::PgConnection) -> Result<Vec<Listed>, StoreError> {
    sqlx::query(&format!(
        "SET LOCAL lock_timeout = {MAINTAIN_LOCK_TIMEOUT_MS}"
    ))
    .execute(&mut *conn)
    .await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(PARTITION_LOCK_KEY)
        .execute(&mut *conn)
        .await
        .map_err(busy_on_lock_timeout)?;
    list(conn).await
}

/// [`StoreError::Busy`] for a wait that outlasted `lock_timeout` (SQLSTATE `55P03`):
/// contention, which a retry gets past, not a fault of the server.
fn busy_on_lock_timeout(err: sqlx::Error) -> StoreError {
    let err = StoreError::from(err);
    if err.lock_waited_out() {
        StoreError::Busy
    } else {
        err
    }
}

/// Gives each of `missing` (days older than every attached one, with no partition yet)
/// a detached partition of its own, with its primary key. Every day that holds rows then
/// has a table named after it, attached or detached, so a later maintenance run with a
/// longer horizon can never create an attached twin of it (a second table of that name
/// cannot exist): a live duplicate always meets its original.
///
/// It runs in a short transaction of its own on another connection of `pool`, committed
/// before the caller writes those days, so the caller (a dry run is one transaction for a
/// whole file) holds no lock for it: the table is built apart and attached, which takes
/// `SHARE UPDATE EXCLUSIVE` on `events_detached` for that moment only, blocking neither
/// readers nor the caller's own `ROW EXCLUSIVE` (`CREATE TABLE … PARTITION OF` would want
/// `ACCESS EXCLUSIVE`). Maintenance's advisory lock makes it take turns with maintenance
/// runs; a day that got a partition meanwhile is left alone.
///
/// Returns the days of `missing` that are attached now: a maintenance run with a longer
/// horizon may have attached one between the caller's listing and this lock, and the
/// caller's rows of that day then belong in `events`.
pub(crate) async fn create_detached_days(
    pool: &sqlx::PgPool,
    missing: &[i32],
) -> Result<Vec<i32>, StoreError> {
    let mut tx = crate::postgres::begin(pool).await?;
    let conn: &mut sqlx::PgConnection = &mut tx;
    let listed = lock_and_list(conn).await?;
    let (attached, detached) = (days(&listed, true), days(&listed, false));
    for &day in missing
        .iter()
        .filter(|day| !attached.contains(day) && !detached.contains(day))
    {
        let table = partition_table(day);
        for sql in [
            format!("CREATE TABLE {table} (LIKE events_detached)"),
            format!(
                "ALTER TABLE {table} ADD PRIMARY KEY (tenant_id, contract_name, event_id, occurred_day)"
            ),
            format!(
                "ALTER TABLE events_detached ATTACH PARTITION {table} FOR VALUES FROM ({day}) TO ({})",
                day + 1
            ),
        ] {
            sqlx::query(&sql)
                .execute(&mut *conn)
                .await
                .map_err(busy_on_lock_timeout)?;
        }
    }
    tx.commit().await?;
    Ok(missing
        .iter()
        .copied()
        .filter(|day| attached.contains(day))
        .collect())
}

/// Takes `ROW EXCLUSIVE` (what an insert takes) on the partitions of `days` in the
/// caller's transaction, so it sees partitions another connection has just attached
/// (taking a lock reads the catalog's pending invalidations).
pub(crate) async fn lock_days(
    conn: &mut sqlx::PgConnection,
    days: &[i32],
) -> Result<(), StoreError> {
    for &day in days {
        let sql = format!("LOCK TABLE {} IN ROW EXCLUSIVE MODE", partition_table(day));
        sqlx::query(&sql).execute(&mut *conn).await?;
    }
    Ok(())
}

impl Store {
    /// Creates the partitions of the coming days and detaches those that left the
    /// horizon, in transactions of at most 200 steps under an advisory lock (so several
    /// processes take turns), the oldest days created first (so a day between two
    /// transactions is never older than every attached one, which a backfill would take
    /// for an old day). A detached partition moves to `events_detached` in the same
    /// transaction: a reader always finds its rows. No-op on SQLite.
    pub async fn maintain_partitions(
        &self,
        horizon: &DedupeHorizon,
        now_us: i64,
    ) -> Result<Maintenance, StoreError> {
        self.maintain(horizon, now_us, Detach::Yes).await
    }

    /// The creating half of [`Store::maintain_partitions`]: the days of `horizon` and
    /// those ahead get their partitions, and so do the [`gap_days`] before them; nothing
    /// is detached. For the commands that need
    /// the partitions to exist but do not own the horizon (`traqlyte backfill`): a horizon
    /// shorter than `serve`'s must never detach days `serve` still admits.
    pub async fn create_partitions(
        &self,
        horizon: &DedupeHorizon,
        now_us: i64,
    ) -> Result<Maintenance, StoreError> {
        self.maintain(horizon, now_us, Detach::No).await
    }

    async fn maintain(
        &self,
        horizon: &DedupeHorizon,
        now_us: i64,
        detach: Detach,
    ) -> Result<Maintenance, StoreError> {
        let mut done = Maintenance::default();
        // In transactions of at most `MAINTENANCE_STEPS_MAX` steps, each planned afresh
        // under the advisory lock: every created or moved table holds locks until its
        // transaction ends, and thousands in one (a long horizon, a first run over a
        // long gap) would exhaust PostgreSQL's shared lock table, failing every run.
        loop {
            let (step, more) = self.maintain_some(horizon, now_us, detach).await?;
            done.create.extend(step.create);
            done.detach.extend(step.detach);
            if !more {
                break;
            }
        }
        if !done.create.is_empty() || !done.detach.is_empty() {
            tracing::info!(
                created = done.create.len(),
                detached = done.detach.len(),
                horizon_days = horizon.days(),
                "partitions maintained"
            );
        }
        Ok(done)
    }

    /// One transaction of [`Self::maintain`]: at most [`MAINTENANCE_STEPS_MAX`] of the
    /// planned steps (creations first, oldest day first, in transactions of their own,
    /// then detachments); whether more remain.
    async fn maintain_some(
        &self,
        horizon: &DedupeHorizon,
        now_us: i64,
        detach: Detach,
    ) -> Result<(Maintenance, bool), StoreError> {
        let mut tx = self.begin().await?;
        let TxInner::Postgres(conn) = &mut tx.inner else {
            tx.rollback().await?;
            return Ok((Maintenance::default(), false));
        };
        let conn: &mut sqlx::PgConnection = conn;
        let listed = lock_and_list(conn).await?;
        let mut plan =
            plan_maintenance(&days(&listed, true), &days(&listed, false), horizon, now_us);
        if detach == Detach::No {
            plan.detach.clear();
            let first = horizon.first_attached_day(now_us);
            let gaps = gap_days(&days(&listed, true), &days(&listed, false), first);
            plan.create.splice(0..0, gaps);
        }
        let mut more = plan.create.len() + plan.detach.len() > MAINTENANCE_STEPS_MAX;
        plan.create.truncate(MAINTENANCE_STEPS_MAX);
        // Creations are committed before any detach is tried: a detach that waits out
        // its lock (a long reader on `events`) fails its transaction, and took the new
        // days' partitions with it, so a lock held for days left the live path without
        // tomorrow's partition (`422 outside_horizon`).
        if !plan.create.is_empty() && !plan.detach.is_empty() {
            plan.detach.clear();
            more = true;
        }
        plan.detach
            .truncate(MAINTENANCE_STEPS_MAX - plan.create.len());
        // Each day's table is built apart and attached: `ATTACH PARTITION` takes `SHARE
        // UPDATE EXCLUSIVE` on `events`, which neither inserts nor reads wait for, where
        // `CREATE TABLE … PARTITION OF` takes `ACCESS EXCLUSIVE` until the transaction
        // commits (a run creating hundreds of days stalled every write for seconds, and
        // a long report made it wait out its lock timeout). Attaching builds the
        // table's primary key as the parent's index asks, on an empty table.
        for &day in &plan.create {
            let table = partition_table(day);
            for sql in [
                format!("CREATE TABLE {table} (LIKE events)"),
                format!(
                    "ALTER TABLE events ATTACH PARTITION {table} FOR VALUES FROM ({day}) TO ({})",
                    day + 1
                ),
            ] {
                sqlx::query(&sql)
                    .execute(&mut *conn)
                    .await
                    .map_err(busy_on_lock_timeout)?;
            }
        }
        if !plan.detach.is_empty() {
            sqlx::query(&format!(
                "SET LOCAL lock_timeout = {DETACH_LOCK_TIMEOUT_MS}"
            ))
            .execute(&mut *conn)
            .await?;
        }
        for &day in &plan.detach {
            let table = partition_table(day);
            for sql in [
                // The day's rows are checked against its range here, while only its own
                // table is locked: attaching it to `events_detached` below, with
                // `events` locked by the detach, then skips that scan (a reviewer saw
                // inserts wait 613 ms behind the attach of an 846 MB day).
                format!(
                    "ALTER TABLE {table} ADD CONSTRAINT {table}_day
                       CHECK (occurred_day IS NOT NULL AND occurred_day >= {day} AND occurred_day < {})",
                    day + 1
                ),
                format!("ALTER TABLE events DETACH PARTITION {table}"),
                format!(
                    "ALTER TABLE events_detached ATTACH PARTITION {table} FOR VALUES FROM ({day}) TO ({})",
                    day + 1
                ),
            ] {
                sqlx::query(&sql)
                    .execute(&mut *conn)
                    .await
                    .map_err(|err| match busy_on_lock_timeout(err) {
                        StoreError::Busy => StoreError::DetachWaiting {
                            table: table.clone(),
                        },
                        other => other,
                    })?;
            }
        }
        tx.commit().await?;
        Ok((plan, more))
    }

    /// Whether today's and tomorrow's partitions are attached (always on SQLite): the
    /// days a live event of now, within the future skew admitted, is written to. A
    /// server starting while another process creates the partitions of a fresh database
    /// waits for this before it answers events.
    pub async fn live_partitions_ready(&self, now_us: i64) -> Result<bool, StoreError> {
        let crate::Backend::Postgres(pg) = &self.backend else {
            return Ok(true);
        };
        let mut conn = pg.pool.acquire().await?;
        let attached = days(&list(&mut conn).await?, true);
        let today = occurred_day(Some(now_us));
        Ok(attached.contains(&today) && attached.contains(&(today + 1)))
    }

    /// Every partition of the events table, oldest day first, with its row count and
    /// index size; empty on SQLite (one table). Counting reads every partition: an
    /// operator's command, not a hot path.
    pub async fn partitions(&self) -> Result<Vec<PartitionInfo>, StoreError> {
        let crate::Backend::Postgres(pg) = &self.backend else {
            return Ok(Vec::new());
        };
        let mut conn = pg.pool.acquire().await?;
        let listed = list(&mut conn).await?;
        let mut out = Vec::with_capacity(listed.len());
        for p in listed {
            let rows: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {}", p.table))
                .fetch_one(&mut *conn)
                .await?;
            let day = p.first_day.filter(|_| p.table.starts_with("events_p"));
            out.push(PartitionInfo {
                from_day: day.map(day_text),
                to_day: day.map(|d| day_text(d + 1)),
                table: p.table,
                rows,
                index_bytes: p.index_bytes,
                attached: p.attached,
            });
        }
        Ok(out)
    }
}

//! The HTTP API of TraqLyte (axum): authentication, contracts, JSON ingestion (single and
//! batch), Segment's HTTP Tracking API (`connectors::segment`), stats and health, the web
//! UI's pages ([`ui`]), and the connector that ingests from a broker
//! ([`connectors::nats`]). Every error of the API,
//! including the framework's own rejections, is answered as
//! `{"error":{"code","message","field"?}}`; the UI answers its errors as HTML pages.
//!
//! Handlers parse at the edge ([`body`], [`auth`]), hand domain types to the identity core
//! and the store, and never write SQL. Main items: [`ServerConfig`], [`AppState`],
//! [`router`], [`serve`], [`ApiError`]. Connections (the accept loop, its cap and
//! timeouts, JSON for hyper's own rejections) are `listener`'s.

#![deny(missing_docs)]

pub mod auth;
pub mod body;
mod config;
pub mod connectors;
mod error;
pub mod experiments;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod group_commit;
pub mod idempotency;
mod listener;
mod lookups;
pub mod metrics;
mod openapi;
pub mod ops;
mod routes;
pub mod ui;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use tokio::net::TcpListener;
use traqlyte_store::Store;

pub use config::{
    ServerConfig, BODIES_IN_FLIGHT_BYTES_MAX, LINEAGE_BODY_BYTES_MAX, LINEAGE_JSON_DEPTH_MAX,
};
pub use error::ApiError;
pub use group_commit::{GroupCommit, GroupCommitConfig};
pub use listener::{connections_max_within, files_reserved, FILES_RESERVED_BASE};

/// A semantic scan as `GET /ops/semantic-duplicates` answers each one (times in RFC 3339,
/// `scanned_at` and `since`), for `traqlyte scan semantic --json`: one shape on both.
pub fn semantic_scan_json(scan: traqlyte_store::semantic::SemanticScan) -> serde_json::Value {
    serde_json::to_value(routes::semantic::SemanticScanView::of(scan))
        .unwrap_or(serde_json::Value::Null)
}

/// Shared state of every handler.
#[derive(Clone)]
pub struct AppState {
    /// The store (cheap to clone: pools inside).
    pub store: Store,
    /// Limits and settings.
    pub config: Arc<ServerConfig>,
    /// The queues that coalesce single requests into shared commits (or none, when off).
    pub group_commit: GroupCommit,
    /// Room for request bodies in flight ([`ServerConfig::bodies_in_flight_bytes_max`]),
    /// and each tenant's share of it.
    pub(crate) bodies: Arc<body::Rooms>,
}

/// The whole API as a router.
pub fn router(state: AppState) -> Router {
    routes::router(state)
}

/// Binds `config.listen` and serves until `shutdown` completes, then lets requests in
/// flight finish. Calls `on_bound` with the bound address (useful with port 0) before
/// accepting connections. At most `config.connections_max` connections are served at
/// once; `header_read_timeout_ms` and `idle_timeout_ms` close stuck ones.
pub async fn serve(
    store: Store,
    config: ServerConfig,
    on_bound: impl FnOnce(SocketAddr),
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // The stop signal is watched from now on: a server still waiting for its partitions
    // at start stops at once instead of serving first.
    let stopping = stop_signal(shutdown);
    let Some(partitions_ready) = partitions_at_start(
        &store,
        &config.dedupe_horizon,
        Partitions::Own,
        stopping.clone(),
    )
    .await
    else {
        tracing::info!("stopped before serving");
        return Ok(());
    };
    metrics::install(config.metrics.enabled).map_err(std::io::Error::other)?;
    let listener = bind("--listen", &config.listen).await?;
    let metrics_listener = match &config.metrics.listen {
        Some(address) => Some(bind("--metrics-listen", address).await?),
        None => None,
    };
    let address = listener.local_addr()?;
    on_bound(address);
    let limits = listener::Limits::from_config(&config);
    let request_timeout = std::time::Duration::from_millis(config.request_timeout_ms);
    let group_commit = GroupCommit::start(
        &store,
        GroupCommitConfig {
            deadline: (config.group_commit.deadline)
                .max(request_timeout + std::time::Duration::from_secs(1)),
            ..config.group_commit
        },
        config.late_events,
    );
    let state = AppState {
        store,
        bodies: Arc::new(body::Rooms::new(&config)),
        config: Arc::new(config),
        group_commit,
    };
    let mut tasks = vec![
        tokio::spawn(purge_idempotency_keys(state.clone())),
        tokio::spawn(purge_webhook_deliveries(state.store.clone())),
        tokio::spawn(roll_up_tallies(state.clone())),
        tokio::spawn(fold_unit_metrics(state.clone())),
        tokio::spawn(maintain_partitions(
            state.store.clone(),
            state.config.dedupe_horizon,
            Partitions::Own,
            partitions_ready,
        )),
        tokio::spawn(sync_clock(state.store.clone())),
    ];
    if let Some(every_ms) = state.config.semantic_scan_every_ms {
        tasks.push(tokio::spawn(semantic_scans(state.clone(), every_ms)));
    }
    let (stop_dispatch, dispatch_stopping) = tokio::sync::watch::channel(false);
    let dispatcher = state
        .config
        .webhook_dispatch
        .then(|| tokio::spawn(ops::webhooks::run(state.clone(), dispatch_stopping)));
    if let Some(metrics_listener) = metrics_listener {
        tasks.push(spawn_metrics_listener(
            metrics_listener,
            state.clone(),
            limits,
        ));
    }
    // The dispatcher stops when the server does, its round overlapping the drain of the
    // connections (and when the listener fails, by the sender's drop).
    let shutdown = async move {
        let mut stopping = stopping;
        let _ = stopping.wait_for(|stop| *stop).await;
        let _ = stop_dispatch.send(true);
    };
    let served = listener::serve(listener, router(state), limits, shutdown).await;
    // The webhook round in flight ends on its own (posted and recorded): aborted, its
    // posts would go out again once their lease ran out. The other tasks' work is one
    // transaction at a time, rolled back by an abort.
    if let Some(mut dispatcher) = dispatcher {
        if tokio::time::timeout(ops::webhooks::STOP_GRACE, &mut dispatcher)
            .await
            .is_err()
        {
            tracing::warn!("the webhook round in flight outlasted the stop grace; its deliveries are posted again after their lease");
            dispatcher.abort();
        }
    }
    for task in tasks {
        task.abort();
    }
    served
}

/// Serves the dedicated metrics listener ([`routes::metrics_router`]) until aborted.
fn spawn_metrics_listener(
    metrics_listener: TcpListener,
    state: AppState,
    limits: listener::Limits,
) -> tokio::task::JoinHandle<()> {
    if let Ok(address) = metrics_listener.local_addr() {
        tracing::info!(%address, "metrics listening");
    }
    let router = routes::metrics_router(state);
    tokio::spawn(async move {
        let never = std::future::pending::<()>();
        let limits = limits.with_connections_max(listener::METRICS_CONNECTIONS_MAX);
        if let Err(err) = listener::serve(metrics_listener, router, limits, never).await {
            tracing::error!(error = %err, "metrics listener failed");
        }
    })
}

/// The metrics listener of a process that serves no API (`traqlyte consume nats
/// --metrics-listen`): `GET /metrics` with this process's series (the consumer's
/// `traqlyte_nats_*`, its `traqlyte_events_*{source="nats:…"}`), and the probes `/livez`
/// and `/healthz` asking `store`, as on `serve --metrics-listen`. Installs the metrics
/// recorder (`metrics.enabled` is the caller's). `None` without `metrics.listen`; the
/// task runs until aborted.
pub async fn serve_metrics_alone(
    store: Store,
    metrics: metrics::MetricsConfig,
) -> std::io::Result<Option<tokio::task::JoinHandle<()>>> {
    let Some(address) = metrics.listen.clone() else {
        return Ok(None);
    };
    let config = ServerConfig {
        metrics,
        ..ServerConfig::default()
    };
    let metrics_listener = bind("--metrics-listen", &address).await?;
    metrics::install(true).map_err(std::io::Error::other)?;
    let limits = listener::Limits::from_config(&config);
    let state = AppState {
        store,
        bodies: Arc::new(body::Rooms::new(&config)),
        config: Arc::new(config),
        group_commit: GroupCommit::disabled(),
    };
    Ok(Some(spawn_metrics_listener(
        metrics_listener,
        state,
        limits,
    )))
}

/// Binds `address`, or says which option named it: the API's and the metrics' listeners
/// fail alike ("Address already in use") and an operator must know which port to move.
async fn bind(option: &str, address: &str) -> std::io::Result<TcpListener> {
    TcpListener::bind(address)
        .await
        .map_err(|err| std::io::Error::new(err.kind(), format!("{option} {address}: {err}")))
}

/// `true` once `shutdown` completes, watched from now on by whoever holds a copy.
pub fn stop_signal(
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> tokio::sync::watch::Receiver<bool> {
    let (stop, stopping) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop.send(true);
    });
    stopping
}

/// How often the partitions are maintained: far more often than a day, so a missed run
/// or a lock timeout costs nothing (partitions are created days ahead).
const PARTITIONS_MAINTAIN_EVERY: std::time::Duration = std::time::Duration::from_secs(600);

/// What a process does with the time partitions (PostgreSQL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Partitions {
    /// `serve`: it owns the dedupe horizon, so it creates the coming days' partitions
    /// and detaches those that left the horizon.
    Own,
    /// A process that writes events but does not own the horizon (`traqlyte consume
    /// nats`): it creates the partitions it needs and never detaches (a consumer with a
    /// shorter horizon must not detach days `serve` still admits).
    Create,
}

async fn maintain_partitions_once(
    store: &Store,
    horizon: &traqlyte_store::DedupeHorizon,
    role: Partitions,
) -> Result<(), traqlyte_store::StoreError> {
    let now = traqlyte_store::now_us();
    match role {
        Partitions::Own => store.maintain_partitions(horizon, now).await,
        Partitions::Create => store.create_partitions(horizon, now).await,
    }
    .map(|_| ())
}

/// For a process that writes events without a `serve` beside it to maintain the
/// partitions (`traqlyte consume nats`): the partitions of `horizon` and the days ahead
/// exist before it takes its first event (waiting as `serve` does at start), and a task
/// keeps creating the coming days' as the days pass; it never detaches. Without it a
/// deployment that only consumes ran out of partitions a few days after the last
/// `serve` ran, and every message became a dead letter `outside_horizon`.
/// `None` when the stop signal came first; the task otherwise, to abort when done.
pub async fn keep_partitions_created(
    store: Store,
    horizon: traqlyte_store::DedupeHorizon,
    stopping: tokio::sync::watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<()>> {
    let ready = partitions_at_start(&store, &horizon, Partitions::Create, stopping).await?;
    Some(tokio::spawn(maintain_partitions(
        store,
        horizon,
        Partitions::Create,
        ready,
    )))
}

/// The partitions of the horizon exist before the first event arrives; whether this
/// run made sure of it. A run that cannot take its locks now (a long backfill dry run
/// holds them, another server creates the partitions) does not keep the server down
/// when today's and tomorrow's partitions exist: the periodic task retries within a
/// minute. When they do not (a fresh database whose partitions another process is still
/// creating, oldest day first), the server waits for them, up to
/// [`PARTITIONS_START_WAIT`]: answering before would refuse every event of now as
/// outside the horizon, a `422` the client does not retry.
/// `None` when the stop signal came first.
async fn partitions_at_start(
    store: &Store,
    horizon: &traqlyte_store::DedupeHorizon,
    role: Partitions,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) -> Option<bool> {
    let deadline = std::time::Instant::now() + PARTITIONS_START_WAIT;
    let waiting = async {
        loop {
            let err = match maintain_partitions_once(store, horizon, role).await {
                Ok(()) => return true,
                Err(err) => err,
            };
            let live = store.live_partitions_ready(traqlyte_store::now_us()).await;
            if matches!(live, Ok(true)) || std::time::Instant::now() >= deadline {
                tracing::error!(error = %err, "partition maintenance failed at start; serving with the partitions that exist and retrying in a minute");
                return false;
            }
            tracing::warn!(error = %err, "today's partition does not exist yet (another process may be creating the partitions); waiting before serving");
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    };
    tokio::select! {
        ready = waiting => Some(ready),
        _ = stopping.wait_for(|stop| *stop) => None,
    }
}

/// How long a starting server waits for today's partition when its own maintenance run
/// cannot create it.
const PARTITIONS_START_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

/// Creates the coming days' partitions and, for `serve` ([`Partitions::Own`]), detaches
/// those that left the dedupe horizon, periodically (PostgreSQL; a no-op on SQLite).
/// Several processes take turns under an advisory lock.
async fn maintain_partitions(
    store: Store,
    horizon: traqlyte_store::DedupeHorizon,
    role: Partitions,
    mut succeeded: bool,
) {
    loop {
        let wait = if succeeded {
            PARTITIONS_MAINTAIN_EVERY
        } else {
            PARTITIONS_RETRY_AFTER
        };
        tokio::time::sleep(wait).await;
        let round = maintain_partitions_once(&store, &horizon, role);
        succeeded = match traqlyte_store::within(ROUND_DEADLINE, round).await {
            Ok(()) => true,
            Err(err) => {
                tracing::warn!(error = %err, "partition maintenance failed; retrying in a minute");
                false
            }
        };
    }
}

/// How long one round of a background task's store work (partition maintenance, tally
/// roll-ups, folds, purges) may take before it is given up and tried again at the next
/// ([`traqlyte_store::within`]): far past what a round takes, but not for ever.
const ROUND_DEADLINE: std::time::Duration = std::time::Duration::from_secs(900);

/// How soon a failed maintenance run is retried.
const PARTITIONS_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// How often per-call tally rows are folded, and how old a row must be to be folded.
const TALLY_ROLL_UP_EVERY: std::time::Duration = std::time::Duration::from_secs(60);
const TALLY_ROLL_UP_AGE_US: i64 = 120_000_000;

/// Folds old per-call tally rows into per-minute rows, and minute rows older than
/// [`traqlyte_store::MINUTE_TALLIES_KEPT_US`] into per-hour rows, periodically, so `GET
/// /stats` reads a number of rows that grows by one a key an hour of uptime at most,
/// however many ingestion calls there were.
async fn roll_up_tallies(state: AppState) {
    let mut ticker = tokio::time::interval(TALLY_ROLL_UP_EVERY);
    loop {
        ticker.tick().await;
        let before = traqlyte_store::now_us() - TALLY_ROLL_UP_AGE_US;
        match traqlyte_store::within(ROUND_DEADLINE, state.store.roll_up_tallies(before)).await {
            Ok(0) => {}
            Ok(folded) => tracing::debug!(folded, "tally rows rolled up"),
            Err(err) => tracing::warn!(error = %err, "tally roll-up failed"),
        }
        let hours_before = traqlyte_store::now_us() - traqlyte_store::MINUTE_TALLIES_KEPT_US;
        let round = state.store.roll_up_tallies_to_hours(hours_before);
        if let Err(err) = traqlyte_store::within(ROUND_DEADLINE, round).await {
            tracing::warn!(error = %err, "tally roll-up into hours failed");
        }
    }
}

const UNIT_METRICS_FOLD_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Moves the per-unit sums that outcome writes append into the one row per unit and
/// metric the report reads, periodically, so that table of appended rows stays small (a
/// report folds its own campaign first in any case).
async fn fold_unit_metrics(state: AppState) {
    let mut ticker = tokio::time::interval(UNIT_METRICS_FOLD_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        match traqlyte_store::within(ROUND_DEADLINE, state.store.fold_unit_metrics()).await {
            Ok(0) => {}
            Ok(moved) => tracing::debug!(moved, "per-unit sums folded"),
            Err(err) => tracing::warn!(error = %err, "folding per-unit sums failed"),
        }
    }
}

/// Runs the semantic-duplicate scan every `every_ms` (the first run one interval after
/// the start) over the latest version of every contract of every tenant, and stores each
/// result for `GET /ops/semantic-duplicates`. One scan at a time: a run longer than the
/// interval delays the next instead of overlapping it.
async fn semantic_scans(state: AppState, every_ms: u64) {
    let every_ms = every_ms.max(1_000);
    let mut ticker = tokio::time::interval(std::time::Duration::from_millis(every_ms));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    // A scan another server saved within most of an interval is not done again: every
    // process runs this task, and N full scans per interval would cost N times the reads
    // and raise N times the warnings.
    let fresh_within_us = i64::try_from(every_ms)
        .unwrap_or(i64::MAX)
        .saturating_mul(900);
    let mut own = OwnScans::default();
    loop {
        ticker.tick().await;
        if let Err(err) = semantic_scan_all(&state.store, fresh_within_us, &mut own).await {
            tracing::warn!(error = %err, "semantic-duplicate scan failed");
        }
    }
}

/// One pass of `semantic_scans`. A contract whose scan fails (its payloads trip the
/// database) is logged and skipped, so it never keeps the pass from the contracts and
/// tenants after it; the pass then answers the first such error. A contract version
/// whose stored scan is younger than `fresh_within_us` (0: none is) and is not one of
/// `own` (the scans this process saved, kept across passes) is skipped: another process
/// scanned it.
pub async fn semantic_scan_all(
    store: &Store,
    fresh_within_us: i64,
    own: &mut OwnScans,
) -> Result<(), traqlyte_store::StoreError> {
    let mut first_error = None;
    let mut after: Option<traqlyte_store::TenantId> = None;
    loop {
        let page = store
            .tenant_ids_after(after.as_ref(), SEMANTIC_SCAN_TENANTS_PAGE)
            .await?;
        let Some(last) = page.last().cloned() else {
            break;
        };
        for tenant in &page {
            scan_tenant(store, tenant, fresh_within_us, own, &mut first_error).await?;
        }
        after = Some(last);
    }
    first_error.map_or(Ok(()), Err)
}

/// The semantic scans this process saved, by (tenant, contract, version): when each was
/// taken. A stored scan that is one of them is this process's own, not another's.
pub type OwnScans = std::collections::HashMap<(String, String, u32), i64>;

/// Tenants read per page by [`semantic_scan_all`].
const SEMANTIC_SCAN_TENANTS_PAGE: u32 = 1_000;

/// [`semantic_scan_all`] for one tenant: a contract whose scan fails, or contracts that
/// cannot be read, are logged and kept in `first_error`; a failure to save a scan ends
/// the pass.
async fn scan_tenant(
    store: &Store,
    tenant: &traqlyte_store::TenantId,
    fresh_within_us: i64,
    own: &mut OwnScans,
    first_error: &mut Option<traqlyte_store::StoreError>,
) -> Result<(), traqlyte_store::StoreError> {
    // A tenant whose contracts cannot be read (a stored one no longer parses) is logged
    // and skipped like a failing contract: the tenants after it are still scanned.
    let contracts = match store.contracts(tenant).await {
        Ok(contracts) => contracts,
        Err(err) => {
            tracing::warn!(tenant = %tenant, error = %err, "semantic-duplicate scan could not read a tenant's contracts; going on with the next tenant");
            first_error.get_or_insert(err);
            return Ok(());
        }
    };
    // Ordered by name then version: the last of each name is its latest version.
    let latest = contracts
        .iter()
        .enumerate()
        .filter(|(i, c)| {
            contracts
                .get(i + 1)
                .is_none_or(|next| next.name() != c.name())
        })
        .map(|(_, c)| c);
    for contract in latest {
        let key = (
            tenant.as_str().to_string(),
            contract.name().as_str().to_string(),
            contract.version(),
        );
        if fresh_within_us > 0
            && scanned_elsewhere(store, tenant, contract, fresh_within_us, own.get(&key)).await
        {
            continue;
        }
        let scope = traqlyte_store::SemanticScope {
            tenant,
            contract,
            since_us: None,
        };
        let scan = match store
            .semantic_scan(scope, traqlyte_store::now_us, |_| {})
            .await
        {
            Ok(scan) => scan,
            Err(err) => {
                tracing::warn!(tenant = %tenant, contract = %contract.name(), error = %err, "semantic-duplicate scan of a contract failed; going on with the next");
                first_error.get_or_insert(err);
                continue;
            }
        };
        if !scan.findings.is_empty() {
            tracing::warn!(
                tenant = %tenant,
                contract = %scan.contract,
                version = scan.version,
                suspects = ?scan.findings.iter().map(|f| f.pointer.as_str()).collect::<Vec<_>>(),
                "semantic duplicates found: an identity field differs where all else is equal"
            );
        }
        store.save_semantic_scan(tenant, &scan).await?;
        own.insert(key, scan.scanned_at_us);
    }
    Ok(())
}

/// Whether the tenant's stored scan of this contract version is younger than
/// `within_us` and not this process's own (`own_at`, when it saved one). A store error
/// says no: the scan is then done, as before.
async fn scanned_elsewhere(
    store: &Store,
    tenant: &traqlyte_store::TenantId,
    contract: &traqlyte_identity::Contract,
    within_us: i64,
    own_at: Option<&i64>,
) -> bool {
    let Ok(scans) = store
        .semantic_scans(tenant, Some(contract.name().as_str()))
        .await
    else {
        return false;
    };
    let now = traqlyte_store::now_us();
    // A scan bounded by `--since` (`traqlyte scan semantic`) read part of the events: it
    // does not stand for the periodic scan of the whole.
    scans.iter().any(|scan| {
        scan.version == contract.version()
            && scan.since_us.is_none()
            && own_at != Some(&scan.scanned_at_us)
            && now.saturating_sub(scan.scanned_at_us) < within_us
    })
}

/// How often a server measures its clock against the database's again.
const CLOCK_SYNC_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Keeps the times this process stamps on the store's clock (`Store::sync_clock`), as its
/// own clock drifts or is stepped. Also run by `traqlyte consume nats`.
pub async fn sync_clock(store: Store) {
    /// One reading is one statement.
    const CLOCK_SYNC_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);
    let mut ticker = tokio::time::interval(CLOCK_SYNC_EVERY);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        if let Err(err) = traqlyte_store::within(CLOCK_SYNC_DEADLINE, store.sync_clock()).await {
            tracing::warn!(error = %err, "reading the database's clock failed; keeping the last offset");
        }
    }
}

/// How long a posted or abandoned webhook delivery is kept: a week, for an operator
/// reading `webhook_deliveries` after an incident; no route reads them.
pub const WEBHOOK_DELIVERIES_KEPT: std::time::Duration =
    std::time::Duration::from_secs(7 * 24 * 3_600);

/// How often posted deliveries older than [`WEBHOOK_DELIVERIES_KEPT`] are deleted.
const WEBHOOK_DELIVERIES_PURGE_EVERY: std::time::Duration = std::time::Duration::from_secs(3_600);

/// Deletes posted and abandoned webhook deliveries older than [`WEBHOOK_DELIVERIES_KEPT`],
/// every hour (the first run at start): the table gained a row per collision per webhook
/// and was never pruned. Several servers may run it at once: each delete is idempotent.
async fn purge_webhook_deliveries(store: Store) {
    let kept_us = i64::try_from(WEBHOOK_DELIVERIES_KEPT.as_micros()).unwrap_or(i64::MAX);
    let mut ticker = tokio::time::interval(WEBHOOK_DELIVERIES_PURGE_EVERY);
    loop {
        ticker.tick().await;
        let round = store.purge_webhook_deliveries(kept_us);
        match traqlyte_store::within(ROUND_DEADLINE, round).await {
            Ok(0) => {}
            Ok(purged) => tracing::info!(purged, "posted webhook deliveries purged"),
            Err(err) => tracing::warn!(error = %err, "webhook delivery purge failed"),
        }
    }
}

/// Deletes idempotency keys older than the retention, periodically.
async fn purge_idempotency_keys(state: AppState) {
    let every =
        std::time::Duration::from_millis(state.config.idempotency_purge_every_ms.max(1_000));
    let retention_us = i64::try_from(state.config.idempotency_retention_ms)
        .unwrap_or(i64::MAX / 1_000)
        .saturating_mul(1_000);
    let mut ticker = tokio::time::interval(every);
    loop {
        ticker.tick().await;
        let round = state.store.idempotency_purge(retention_us);
        match traqlyte_store::within(ROUND_DEADLINE, round).await {
            Ok(0) => {}
            Ok(purged) => tracing::info!(purged, "idempotency keys purged"),
            Err(err) => tracing::warn!(error = %err, "idempotency purge failed"),
        }
    }
}

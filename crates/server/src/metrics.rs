//! Prometheus metrics: the `metrics` facade with `metrics-exporter-prometheus`'s
//! recorder, rendered by `GET /metrics` (no exporter listener of its own).
//!
//! Instrumentation sits where the store's outcomes become answers
//! (`record_events`, `record_outcomes`), in the idempotency layer's decision
//! (`record_idempotency`), in one route layer (`track_latency`) and in the NATS
//! consumer (its lag). Each call records a whole batch, never an event at a time.
//!
//! **Cardinality is bounded:** each family group (`events`, `outcomes`, `idempotency`,
//! `nats`) admits at most [`LABEL_SETS_MAX`] distinct label sets for the process's life,
//! of which one tenant takes at most [`TENANT_LABEL_SETS_MAX`]; later new sets are counted
//! under the value `other` in every label but `tenant` (one fallback set per tenant, for
//! at most [`FALLBACK_TENANTS_MAX`] tenants, then `other` in every label; the `nats`
//! group has no tenant label), and `traqlyte_metrics_label_overflow_total{group}`
//! counts them. Route latency is labelled
//! by the matched route template (a fixed set), method and status code; batch sizes by a
//! fixed `kind`.
//!
//! With metrics off (`ServerConfig::metrics.enabled == false`) no recorder is installed
//! and every function here returns after one relaxed atomic load.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use metrics::Label;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use traqlyte_store::{EventOutcome, IngestSource, NewEvent, OutcomeResult, TenantId};

use crate::{ApiError, AppState};

/// Most distinct label sets a family group admits (see the module docs).
pub const LABEL_SETS_MAX: usize = 1_000;

/// Most of a group's label sets one tenant takes (see the module docs): a tenant with
/// thousands of contracts cannot spend every tenant's budget.
pub const TENANT_LABEL_SETS_MAX: usize = 100;

/// Who may read `GET /metrics` and whether metrics are recorded at all.
#[derive(Debug, Clone)]
pub struct MetricsConfig {
    /// Record and serve metrics (`--metrics on|off`).
    pub enabled: bool,
    /// When set, `GET /metrics` requires `Authorization: Bearer <token>` from any peer.
    pub token: Option<String>,
    /// When set, `/metrics` is served on this address only (any peer, or token holders
    /// when a token is set), and the API's listener answers it 404.
    pub listen: Option<String>,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            enabled: true,
            token: None,
            listen: None,
        }
    }
}

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
static ENABLED: AtomicBool = AtomicBool::new(false);
static BUDGET: OnceLock<Mutex<HashMap<&'static str, Budget>>> = OnceLock::new();

/// Most tenants of a group with a fallback set of their own (see the module docs): past
/// them a tenant's sets beyond the budget read `other` in the `tenant` label too, so the
/// series stay bounded however many tenants a server ever sees (a soak measured 5 series
/// and 5 KB of memory a tenant, never freed).
pub const FALLBACK_TENANTS_MAX: usize = 1_000;

/// The label sets a group admitted, how many of them each tenant took, and the tenants
/// with a fallback set of their own.
#[derive(Default)]
struct Budget {
    sets: HashSet<u64>,
    per_tenant: HashMap<String, usize>,
    fallback_tenants: HashSet<String>,
}

/// How a label set is counted ([`Budget::admit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admitted {
    /// Under its own labels.
    Whole,
    /// `other` in every label but `tenant`.
    TenantOnly,
    /// `other` in every label.
    Other,
}

impl Budget {
    /// How the set hashed `hash` is counted: whole when seen before, or new within the
    /// group's budget and its tenant's share of it; else with its tenant kept while the
    /// group's fallback tenants have room for it, else as `other`.
    fn admit(&mut self, hash: u64, tenant: Option<&str>) -> Admitted {
        if self.sets.contains(&hash) {
            return Admitted::Whole;
        }
        let within = self.sets.len() < LABEL_SETS_MAX
            && tenant.is_none_or(|t| {
                self.per_tenant.get(t).copied().unwrap_or(0) < TENANT_LABEL_SETS_MAX
            });
        if within {
            if let Some(tenant) = tenant {
                *self.per_tenant.entry(tenant.to_string()).or_default() += 1;
            }
            self.sets.insert(hash);
            return Admitted::Whole;
        }
        match tenant {
            Some(t) if self.fallback_tenants.contains(t) => Admitted::TenantOnly,
            Some(t) if self.fallback_tenants.len() < FALLBACK_TENANTS_MAX => {
                self.fallback_tenants.insert(t.to_string());
                Admitted::TenantOnly
            }
            _ => Admitted::Other,
        }
    }
}

/// Latency buckets, seconds.
const LATENCY_BUCKETS_S: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Batch size buckets, items.
const BATCH_BUCKETS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0,
];

/// Installs the process-wide recorder once (later calls reuse it) when `enabled`.
pub fn install(enabled: bool) -> Result<(), String> {
    if !enabled {
        return Ok(());
    }
    if HANDLE.get().is_none() {
        let builder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS_S)
            .and_then(|b| {
                b.set_buckets_for_metric(Matcher::Full("traqlyte_batch_size".into()), BATCH_BUCKETS)
            })
            .map_err(|e| e.to_string())?;
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        // Another thread may have won the race: then its recorder is the global one.
        if metrics::set_global_recorder(recorder).is_ok() && HANDLE.set(handle).is_ok() {
            describe_all();
            spawn_upkeep();
            // The conventional series of Prometheus's client libraries: the collision
            // alert (docs/operations.md) asks whether Prometheus has scraped this target
            // before, which a new series of its own cannot tell.
            let started = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |since| since.as_secs_f64());
            metrics::gauge!("process_start_time_seconds").set(started);
        }
    }
    ENABLED.store(HANDLE.get().is_some(), Ordering::Relaxed);
    Ok(())
}

/// The `# HELP` text of every family (docs/operations.md, "Metrics"): without them
/// `promtool check metrics` fails every family ("no help text"). Counters are this
/// process's own since it started; sum them across processes, `GET /stats` is the
/// durable total.
const DESCRIPTIONS: &[(&str, Kind, &str)] = &[
    (
        "traqlyte_events_received_total",
        Kind::Counter,
        "Events received by this process, per tenant, contract and source",
    ),
    (
        "traqlyte_events_inserted_total",
        Kind::Counter,
        "Events newly stored by this process",
    ),
    (
        "traqlyte_events_duplicates_total",
        Kind::Counter,
        "Retries of stored events suppressed by the store's constraint",
    ),
    (
        "traqlyte_events_collisions_total",
        Kind::Counter,
        "Different events under a stored identity: refused and logged",
    ),
    (
        "traqlyte_events_rejected_total",
        Kind::Counter,
        "Events refused before the store by their contract or the horizon",
    ),
    (
        "traqlyte_outcomes_inserted_total",
        Kind::Counter,
        "Outcomes newly stored, per tenant, campaign and arm",
    ),
    (
        "traqlyte_outcomes_duplicates_total",
        Kind::Counter,
        "Outcome retries suppressed (same assignment and dedupe key)",
    ),
    (
        "traqlyte_outcomes_collisions_total",
        Kind::Counter,
        "Outcomes refused: same key, different payload",
    ),
    (
        "traqlyte_idempotency_replays_total",
        Kind::Counter,
        "Stored answers replayed for a repeated idempotency key",
    ),
    (
        "traqlyte_idempotency_in_flight_refusals_total",
        Kind::Counter,
        "Requests refused while their idempotency key was in flight",
    ),
    (
        "traqlyte_idempotency_takeovers_total",
        Kind::Counter,
        "Stale idempotency reservations taken over",
    ),
    (
        "traqlyte_http_request_duration_seconds",
        Kind::Histogram,
        "HTTP request latency in seconds, per route template, method and status",
    ),
    (
        "traqlyte_batch_size",
        Kind::Histogram,
        "Items per batch written (events, outcomes, messages), per kind",
    ),
    (
        "process_start_time_seconds",
        Kind::Gauge,
        "When this process started recording metrics, in seconds since the Unix epoch",
    ),
    (
        "traqlyte_store_pool_connections",
        Kind::Gauge,
        "Database pool connections, per pool and state, at scrape time",
    ),
    (
        "traqlyte_store_pool_connections_max",
        Kind::Gauge,
        "Database pool size, per pool",
    ),
    (
        "traqlyte_nats_consumer_pending",
        Kind::Gauge,
        "Messages the NATS consumer has yet to fetch (its lag)",
    ),
    (
        "traqlyte_nats_consumer_stalled",
        Kind::Gauge,
        "1 while the NATS server has left the consumer's checks unanswered for 15 s or more",
    ),
    (
        "traqlyte_nats_dead_letters_total",
        Kind::Counter,
        "Messages the NATS consumer recorded as dead letters, per stream and reason",
    ),
    (
        "traqlyte_webhook_deliveries_total",
        Kind::Counter,
        "Webhook deliveries, per result",
    ),
    (
        "traqlyte_metrics_label_overflow_total",
        Kind::Counter,
        "Label sets folded into other because a label budget was full",
    ),
];

/// A family's type, as its `# TYPE` line says.
#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// Describes every family of [`DESCRIPTIONS`] to the recorder.
fn describe_all() {
    for &(name, kind, help) in DESCRIPTIONS {
        match kind {
            Kind::Counter => metrics::describe_counter!(name, help),
            Kind::Gauge => metrics::describe_gauge!(name, help),
            Kind::Histogram => metrics::describe_histogram!(name, help),
        }
    }
}

/// How often the recorder folds the histogram samples recorded since into their buckets.
const UPKEEP_EVERY: Duration = Duration::from_secs(1);

/// Folds histogram samples into their buckets every [`UPKEEP_EVERY`], on a thread of its
/// own. A recorder built without the exporter's own server keeps every raw sample until
/// upkeep runs, which a scrape of `/metrics` did alone: a server nobody scraped grew by
/// about 20 bytes a request (a latency sample each), without bound.
fn spawn_upkeep() {
    let spawned = std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(|| loop {
            std::thread::sleep(UPKEEP_EVERY);
            if let Some(handle) = HANDLE.get() {
                handle.run_upkeep();
            }
        });
    if let Err(err) = spawned {
        tracing::warn!(error = %err, "metrics upkeep thread not started: histogram samples are folded at each scrape only");
    }
}

/// Pauses (`false`) or resumes recording in this process, once the recorder is
/// installed; paused, every recording function returns after one atomic load, as with
/// `--metrics off`. For `traqlyte bench metrics`, which compares both in one run.
pub fn set_recording(on: bool) {
    ENABLED.store(on && HANDLE.get().is_some(), Ordering::Relaxed);
}

fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The labels as given, or, past the group's budget or the tenant's share of it, `other`
/// in each but `tenant` (a group whose first label is `tenant`: the tenant stays visible,
/// one fallback set per tenant, for the first [`FALLBACK_TENANTS_MAX`] tenants to need
/// one; `other` in every label after them).
fn bounded(group: &'static str, names: &[&'static str], values: &[&str]) -> Vec<Label> {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    values.hash(&mut hasher);
    let hash = hasher.finish();
    let tenant = (names.first() == Some(&"tenant"))
        .then(|| values.first().copied())
        .flatten();
    let budget = BUDGET.get_or_init(|| Mutex::new(HashMap::new()));
    let admitted = match budget.lock() {
        Ok(mut seen) => seen.entry(group).or_default().admit(hash, tenant),
        Err(_) => Admitted::Other,
    };
    if admitted != Admitted::Whole {
        metrics::counter!("traqlyte_metrics_label_overflow_total", "group" => group).increment(1);
    }
    names
        .iter()
        .zip(values)
        .map(|(name, value)| {
            let kept = admitted == Admitted::Whole
                || (admitted == Admitted::TenantOnly && *name == "tenant");
            Label::new(
                *name,
                if kept {
                    (*value).to_string()
                } else {
                    "other".into()
                },
            )
        })
        .collect()
}

/// Counts one stored call of `source` (after its commit): received, inserted,
/// duplicates, collisions and `rejected` (refused before the store), and logs each
/// collision at WARN with both fingerprints.
pub(crate) fn record_events(
    tenant: &TenantId,
    contract: &str,
    source: &IngestSource,
    events: &[NewEvent],
    outcomes: &[EventOutcome],
    rejected: usize,
) {
    let (mut inserted, mut duplicates, mut collisions) = (0u64, 0u64, 0u64);
    for (event, outcome) in events.iter().zip(outcomes) {
        match outcome {
            EventOutcome::Inserted => inserted += 1,
            EventOutcome::Duplicate => duplicates += 1,
            EventOutcome::Collision { stored_fingerprint } => {
                collisions += 1;
                tracing::warn!(
                    tenant = %tenant,
                    contract,
                    source = %source,
                    event_id = %event.identified.event_id,
                    stored_fingerprint = %stored_fingerprint,
                    incoming_fingerprint = %event.identified.fingerprint,
                    "collision: same identity, different content; logged, nothing overwritten"
                );
            }
        }
    }
    if !enabled() {
        return;
    }
    let labels = bounded(
        "events",
        &["tenant", "contract", "source"],
        &[tenant.as_str(), contract, source.as_str()],
    );
    let received = inserted + duplicates + collisions + rejected as u64;
    metrics::counter!("traqlyte_events_received_total", labels.clone()).increment(received);
    metrics::counter!("traqlyte_events_inserted_total", labels.clone()).increment(inserted);
    metrics::counter!("traqlyte_events_duplicates_total", labels.clone()).increment(duplicates);
    metrics::counter!("traqlyte_events_collisions_total", labels.clone()).increment(collisions);
    metrics::counter!("traqlyte_events_rejected_total", labels).increment(rejected as u64);
}

/// Counts stored outcomes (after their commit) by campaign and arm.
pub(crate) fn record_outcomes(tenant: &TenantId, results: &[OutcomeResult]) {
    if !enabled() {
        return;
    }
    let mut groups: HashMap<(&str, &str), [u64; 3]> = HashMap::new();
    for result in results {
        let (stored, slot) = match result {
            OutcomeResult::Inserted(s) => (s, 0),
            OutcomeResult::Duplicate(s) => (s, 1),
            OutcomeResult::Collision(s) => (s, 2),
        };
        groups
            .entry((stored.campaign_id.as_str(), stored.arm.as_str()))
            .or_default()[slot] += 1;
    }
    for ((campaign, arm), [inserted, duplicates, collisions]) in groups {
        let labels = bounded(
            "outcomes",
            &["tenant", "campaign", "arm"],
            &[tenant.as_str(), campaign, arm],
        );
        metrics::counter!("traqlyte_outcomes_inserted_total", labels.clone()).increment(inserted);
        metrics::counter!("traqlyte_outcomes_duplicates_total", labels.clone())
            .increment(duplicates);
        metrics::counter!("traqlyte_outcomes_collisions_total", labels).increment(collisions);
    }
}

/// What the idempotency layer decided for a request.
#[derive(Debug, Clone, Copy)]
pub(crate) enum IdempotencyEvent {
    /// A stored response was replayed.
    Replay,
    /// A request was refused because the key's owner is still working.
    InFlightRefusal,
    /// A stale reservation was taken over.
    TakeOver,
}

/// Counts one idempotency decision.
pub(crate) fn record_idempotency(tenant: &TenantId, event: IdempotencyEvent) {
    if !enabled() {
        return;
    }
    let labels = bounded("idempotency", &["tenant"], &[tenant.as_str()]);
    let name = match event {
        IdempotencyEvent::Replay => "traqlyte_idempotency_replays_total",
        IdempotencyEvent::InFlightRefusal => "traqlyte_idempotency_in_flight_refusals_total",
        IdempotencyEvent::TakeOver => "traqlyte_idempotency_takeovers_total",
    };
    metrics::counter!(name, labels).increment(1);
}

/// Records the size of one batch of `kind` (`http_events`, `http_outcomes`,
/// `segment`, `nats`, …; a fixed set of names chosen by the caller). Group commits call
/// this with their own kind.
pub fn record_batch_size(kind: &'static str, n: usize) {
    if !enabled() {
        return;
    }
    metrics::histogram!("traqlyte_batch_size", "kind" => kind).record(n as f64);
}

/// Sets the pending-message gauge of a NATS consumer (its lag).
/// Counts one message the NATS consumer recorded as a dead letter, by stream and reason
/// (a fixed set of codes): an alert needs it, where `GET /deadletters` must be polled.
pub(crate) fn record_dead_letter(stream: &str, reason: &str) {
    if !enabled() {
        return;
    }
    let labels = bounded("nats", &["stream", "reason"], &[stream, reason]);
    metrics::counter!("traqlyte_nats_dead_letters_total", labels).increment(1);
}

pub(crate) fn record_consumer_pending(stream: &str, consumer: &str, pending: u64) {
    if !enabled() {
        return;
    }
    let labels = bounded("nats", &["stream", "consumer"], &[stream, consumer]);
    metrics::gauge!("traqlyte_nats_consumer_pending", labels).set(pending as f64);
}

/// Whether the NATS server has left the consumer's samples unanswered for longer than
/// the consumer waits before saying so (1) or answers them (0).
pub(crate) fn record_consumer_stalled(stream: &str, consumer: &str, stalled: bool) {
    if !enabled() {
        return;
    }
    let labels = bounded("nats", &["stream", "consumer"], &[stream, consumer]);
    metrics::gauge!("traqlyte_nats_consumer_stalled", labels).set(f64::from(u8::from(stalled)));
}

/// Counts one webhook delivery attempt by its result (`delivered`, `failed`,
/// `dropped`).
pub(crate) fn record_webhook(result: &'static str) {
    if !enabled() {
        return;
    }
    metrics::counter!("traqlyte_webhook_deliveries_total", "result" => result).increment(1);
}

/// When a request reached the timeout layer ([`stamp_received`]): its latency and its
/// timeout are measured from here, the room wait (`body::take_room`) included.
#[derive(Clone, Copy)]
pub(crate) struct Received(Instant);

/// Layer just outside the request timeout: stamps [`Received`].
pub(crate) async fn stamp_received(mut request: Request, next: Next) -> Response {
    request.extensions_mut().insert(Received(Instant::now()));
    next.run(request).await
}

/// Route layer: the latency of every routed request by its route template, from when
/// it reached the timeout layer ([`Received`]). A request that ends without an answer
/// from its handler is timed too, when it ends: `408` (or the `503` of the routes that
/// answer a timeout so) once it has run for the request timeout (the timeout layer,
/// outside this one, answered it), else `499` (its client closed the connection,
/// nginx's code), so the slowest requests are not missing from the histogram.
pub(crate) async fn track_latency(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    if !enabled() {
        return next.run(request).await;
    }
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let mut timing = Timing {
        route,
        method: request.method().clone(),
        started: request
            .extensions()
            .get::<Received>()
            .map_or_else(Instant::now, |received| received.0),
        timeout: Duration::from_millis(state.config.request_timeout_ms),
        status: None,
    };
    let response = next.run(request).await;
    timing.status = Some(response.status().as_u16());
    response
}

/// The `method` label of a request: one of the standard methods, else `other`. Any
/// token is a method to HTTP, and each new one would add series that never go away
/// (anyone can send `ZZ1 /healthz`, answered 405 but timed).
fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "other",
    }
}

/// How much earlier than [`Timing::started`] the request timeout's clock may have
/// started: both are stamped in the same place ([`stamp_received`]); this is the clocks'
/// granularity. (Stamped inside the room wait, a request timed out while it waited for
/// room was recorded as `499`, and a stall of 50 ms on a loaded machine flipped a `408`.)
const TIMEOUT_MARGIN: Duration = Duration::from_millis(1);

/// One request's latency, recorded when it ends, answered or not.
struct Timing {
    route: String,
    method: axum::http::Method,
    started: Instant,
    timeout: Duration,
    /// The handler's status; `None` while it runs.
    status: Option<u16>,
}

impl Timing {
    /// The status of a request that ended without its handler's answer: the one its
    /// timeout was answered (`408`, or `503` where its clients retry only a `5xx`:
    /// [`crate::routes::timeout_is_503`], asked of the route template, which is the
    /// path on those routes), else `499`. Worked out only then, never on the way in.
    fn ended_unanswered(&self, timed_out: bool) -> u16 {
        match timed_out {
            false => 499,
            true if crate::routes::timeout_is_503(&self.method, &self.route) => 503,
            true => 408,
        }
    }
}

impl Drop for Timing {
    fn drop(&mut self) {
        let elapsed = self.started.elapsed();
        // The timeout's clock starts with this one (the layer outside it stamps both): a
        // request ended at the timeout was timed out.
        let timed_out = elapsed + TIMEOUT_MARGIN >= self.timeout;
        let status = self
            .status
            .unwrap_or_else(|| self.ended_unanswered(timed_out));
        metrics::histogram!(
            "traqlyte_http_request_duration_seconds",
            "route" => std::mem::take(&mut self.route),
            "method" => method_label(&self.method),
            "status" => status.to_string()
        )
        .record(elapsed.as_secs_f64());
    }
}

/// `GET /metrics` on the API's listener: loopback peers only, unless a token is set.
#[utoipa::path(get, path = "/metrics", tag = "ops",
    responses((status = 200, description = "Prometheus text exposition format 0.0.4", content_type = "text/plain", body = String),
        (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn scrape(State(state): State<AppState>, request: Request) -> Response {
    if state.config.metrics.listen.is_some() {
        return ApiError::not_found(
            "metrics_elsewhere",
            "metrics are served on the --metrics-listen address",
        )
        .into_response();
    }
    answer(&state, &request, false)
}

/// `GET /metrics` on the dedicated `--metrics-listen` listener.
pub(crate) async fn scrape_dedicated(State(state): State<AppState>, request: Request) -> Response {
    answer(&state, &request, true)
}

fn answer(state: &AppState, request: &Request, dedicated: bool) -> Response {
    let Some(handle) = HANDLE.get().filter(|_| state.config.metrics.enabled) else {
        return ApiError::not_found("metrics_disabled", "metrics are off (--metrics off)")
            .into_response();
    };
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0);
    if let Err(err) = admit(&state.config.metrics, request.headers(), peer, dedicated) {
        return err.into_response();
    }
    for usage in state.store.pool_usage() {
        let in_use = usage.open.saturating_sub(usage.idle);
        metrics::gauge!("traqlyte_store_pool_connections", "pool" => usage.pool, "state" => "idle")
            .set(f64::from(usage.idle));
        metrics::gauge!("traqlyte_store_pool_connections", "pool" => usage.pool, "state" => "in_use")
            .set(f64::from(in_use));
        metrics::gauge!("traqlyte_store_pool_connections_max", "pool" => usage.pool)
            .set(f64::from(usage.max));
    }
    handle.run_upkeep();
    (
        StatusCode::OK,
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        handle.render(),
    )
        .into_response()
}

/// Headers a proxy or a CDN adds to a request it relays (RFC 7239's `Forwarded`, `Via`,
/// and the de facto ones nginx, HAProxy, Envoy, Cloudflare, Akamai and Fastly configs
/// set). A proxy that sets none (nginx's `proxy_pass` alone) cannot be told from a local
/// client: docs/operations.md asks for `--metrics-token` behind any proxy.
const RELAY_HEADERS: [&str; 12] = [
    "forwarded",
    "via",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-real-ip",
    "x-client-ip",
    "x-cluster-client-ip",
    "x-envoy-external-address",
    "true-client-ip",
    "cf-connecting-ip",
    "fastly-client-ip",
];

/// Whether a loopback peer's request is a local client's own: not relayed by a proxy on
/// the same host (any of [`RELAY_HEADERS`]), whose peer is always loopback, and
/// addressed to a loopback name (a page whose host name was rebound to 127.0.0.1 sends
/// its own name as `Host`). Either way every tenant's counters would be readable.
fn direct_local(headers: &HeaderMap) -> bool {
    let relayed = RELAY_HEADERS.iter().any(|name| headers.contains_key(*name));
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    // `localhost:8080`, `127.0.0.1`, `[::1]:8080`: the name without its port.
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    let loopback_name = name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    !relayed && (host.is_empty() || loopback_name)
}

/// Who may read: a token holder when a token is set; else a loopback peer's own direct
/// request on the API's listener ([`direct_local`]), anyone on the dedicated one.
fn admit(
    config: &MetricsConfig,
    headers: &HeaderMap,
    peer: Option<SocketAddr>,
    dedicated: bool,
) -> Result<(), ApiError> {
    if let Some(expected) = config.token.as_deref().filter(|t| !t.is_empty()) {
        let given = crate::auth::one_authorization(headers)?
            .and_then(|v| v.to_str().ok())
            .and_then(|t| crate::auth::credentials_of(t, "Bearer"));
        return match given {
            Some(token) if crate::routes::admin::same_secret(token, expected) => Ok(()),
            _ => Err(ApiError::unauthorized(
                "GET /metrics needs `Authorization: Bearer <metrics token>`",
            )),
        };
    }
    if dedicated || peer.is_some_and(|p| p.ip().is_loopback()) && direct_local(headers) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        "metrics_forbidden",
        "GET /metrics answers loopback peers only; set --metrics-token or --metrics-listen",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Past the group's budget each tenant keeps a fallback set of its own, for the
    /// first `FALLBACK_TENANTS_MAX` tenants; later ones read `other` throughout, so the
    /// series stay bounded however many tenants come.
    #[test]
    fn fallback_sets_are_bounded_by_tenants_too() {
        let mut budget = Budget::default();
        for hash in 0..LABEL_SETS_MAX as u64 {
            let tenant = format!("t{}", hash / TENANT_LABEL_SETS_MAX as u64);
            assert_eq!(budget.admit(hash, Some(&tenant)), Admitted::Whole);
        }
        assert_eq!(budget.admit(0, Some("t0")), Admitted::Whole, "seen before");
        let mut hash = LABEL_SETS_MAX as u64;
        for n in 0..FALLBACK_TENANTS_MAX {
            hash += 1;
            let tenant = format!("late{n}");
            assert_eq!(budget.admit(hash, Some(&tenant)), Admitted::TenantOnly);
            hash += 1;
            assert_eq!(budget.admit(hash, Some(&tenant)), Admitted::TenantOnly);
        }
        assert_eq!(
            budget.admit(hash + 1, Some("one too many")),
            Admitted::Other
        );
        assert_eq!(budget.admit(hash + 2, Some("late0")), Admitted::TenantOnly);
        assert_eq!(budget.admit(hash + 3, None), Admitted::Other);
        assert_eq!(budget.fallback_tenants.len(), FALLBACK_TENANTS_MAX);
    }

    fn peer(ip: &str) -> Option<SocketAddr> {
        Some(SocketAddr::new(ip.parse().expect("ip"), 1234))
    }

    #[test]
    fn without_a_token_only_loopback_peers_read_the_api_listener() {
        let config = MetricsConfig::default();
        let headers = HeaderMap::new();
        assert!(admit(&config, &headers, peer("127.0.0.1"), false).is_ok());
        assert!(admit(&config, &headers, peer("::1"), false).is_ok());
        assert!(admit(&config, &headers, peer("10.0.0.7"), false).is_err());
        assert!(admit(&config, &headers, None, false).is_err());
        assert!(admit(&config, &headers, peer("10.0.0.7"), true).is_ok());
    }

    /// A proxy on the same host (its peer is loopback) and a page whose host name was
    /// rebound to 127.0.0.1 are not local clients: every tenant's counters stay closed.
    #[test]
    fn a_relayed_or_rebound_loopback_request_is_not_a_local_client() {
        let config = MetricsConfig::default();
        let with = |pairs: &[(&'static str, &str)]| {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.insert(*name, value.parse().expect("header"));
            }
            headers
        };
        for local in [
            "127.0.0.1:8080",
            "localhost:8080",
            "[::1]:8080",
            "LOCALHOST",
            "127.0.0.1",
        ] {
            let headers = with(&[("host", local)]);
            assert!(
                admit(&config, &headers, peer("127.0.0.1"), false).is_ok(),
                "{local}"
            );
        }
        for refused in [
            with(&[("host", "evil.example")]),
            with(&[("host", "evil.example:8080")]),
            with(&[
                ("host", "127.0.0.1:8080"),
                ("x-forwarded-for", "203.0.113.9"),
            ]),
            with(&[("host", "localhost"), ("forwarded", "for=203.0.113.9")]),
            with(&[("host", "127.0.0.1:8080"), ("x-real-ip", "203.0.113.9")]),
            with(&[("host", "127.0.0.1:8080"), ("via", "1.1 nginx")]),
            with(&[("host", "localhost"), ("cf-connecting-ip", "203.0.113.9")]),
        ] {
            assert!(
                admit(&config, &refused, peer("127.0.0.1"), false).is_err(),
                "{refused:?}"
            );
        }
        // The dedicated listener and a token holder are unaffected.
        let proxied = with(&[("host", "metrics.example"), ("x-forwarded-for", "10.0.0.1")]);
        assert!(admit(&config, &proxied, peer("127.0.0.1"), true).is_ok());
    }

    #[test]
    fn a_token_is_required_from_every_peer_when_set() {
        let config = MetricsConfig {
            token: Some("s3cret".into()),
            ..MetricsConfig::default()
        };
        let mut headers = HeaderMap::new();
        assert!(admit(&config, &headers, peer("127.0.0.1"), false).is_err());
        headers.insert(
            axum::http::header::AUTHORIZATION,
            "Bearer s3cret".parse().expect("header"),
        );
        assert!(admit(&config, &headers, peer("10.0.0.7"), false).is_ok());
        headers.insert(
            axum::http::header::AUTHORIZATION,
            "Bearer nope".parse().expect("header"),
        );
        assert!(admit(&config, &headers, peer("127.0.0.1"), true).is_err());
    }
}

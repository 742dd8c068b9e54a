//! Server settings with named bounds.

/// The default of [`ServerConfig::lineage_body_bytes_max`]: 8 MiB.
pub const LINEAGE_BODY_BYTES_MAX: usize = 8 * 1024 * 1024;
/// The default of [`ServerConfig::bodies_in_flight_bytes_max`]: 1 GiB (it counts parsed
/// trees too, several times their bodies: 256 MiB of bytes, the earlier default, held
/// over 1 GiB of trees of flat events).
pub const BODIES_IN_FLIGHT_BYTES_MAX: usize = 1024 * 1024 * 1024;
/// The default of [`ServerConfig::lineage_json_depth_max`].
pub const LINEAGE_JSON_DEPTH_MAX: usize = 64;

/// Limits and addresses of the HTTP server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to listen on, e.g. `127.0.0.1:8080`.
    pub listen: String,
    /// Largest single-event (and contract) body accepted.
    pub body_bytes_max: usize,
    /// Largest batch body accepted.
    pub batch_bytes_max: usize,
    /// Most events one batch may carry.
    pub batch_events_max: usize,
    /// Deepest JSON nesting accepted in an event (the batch array adds one level).
    pub json_depth_max: usize,
    /// Largest OpenLineage RunEvent body accepted (`POST /api/v1/lineage`): producers
    /// send schema and column-lineage facets of wide tables, and DAG-level facets of
    /// large Airflow DAGs, in one event.
    pub lineage_body_bytes_max: usize,
    /// Deepest JSON nesting accepted in a RunEvent: schema facets nest a field per level
    /// of a nested record (Flink's Avro and Iceberg schemas, Spark's structs).
    pub lineage_json_depth_max: usize,
    /// An idempotency reservation younger than this is in flight; older, its owner is
    /// presumed dead and a retry takes it over.
    pub idempotency_stale_after_ms: u64,
    /// Idempotency keys are kept this long, then purged.
    pub idempotency_retention_ms: u64,
    /// How often the purge runs.
    pub idempotency_purge_every_ms: u64,
    /// How often the semantic-duplicate scan runs over the latest version of every
    /// contract of every tenant (`None`: never; docs/semantic-scan.md).
    pub semantic_scan_every_ms: Option<u64>,
    /// Most memory of request bodies being read or handled at once, summed over every
    /// request: each body's bytes (its `Content-Length`, or the largest body its route
    /// takes when it sends none or is compressed) and its JSON tree's estimated bytes
    /// (`traqlyte_identity::json::Meter`, 2 to 100 times the text), of which one
    /// tenant (all its credentials together) takes at most a quarter (`body::Rooms`). Past it a request waits for
    /// room, then is answered `503 server_busy`; a body whose tree alone exceeds its
    /// share is `413 body_too_large`. This bounds the server's memory under
    /// many large concurrent batches, dense bodies or slowly sent bodies.
    pub bodies_in_flight_bytes_max: usize,
    /// A request (body reading and handling) taking longer than this is answered 408 and
    /// its work abandoned (an open transaction rolls back).
    pub request_timeout_ms: u64,
    /// Test-only hook (feature `test-hooks`): the publish handler sleeps this long inside
    /// its transaction, so a test can kill the server mid-request. Defaults to
    /// `TRAQLYTE_TEST_PUBLISH_DELAY_MS`, so a test can set it on a server process.
    #[cfg(feature = "test-hooks")]
    pub test_publish_delay_ms: u64,
    /// Deepest lineage query accepted (`depth` parameter), in edges.
    pub lineage_depth_max: u32,
    /// Most nodes one lineage query returns; a larger graph is cut and marked `truncated`.
    pub lineage_nodes_max: usize,
    /// The token `/admin/…` routes require (`Authorization: Bearer <token>`); `None`
    /// disables them (404 `admin_disabled`).
    pub admin_token: Option<String>,
    /// A request head (request line and headers) not complete this long after its first
    /// byte arrived closes the connection: a client trickling header bytes cannot hold it.
    pub header_read_timeout_ms: u64,
    /// A connection with no request in flight and no byte of the next request received
    /// for this long is closed (keep-alive idle, or a client that connects and sends
    /// nothing, or one that stops reading its response).
    pub idle_timeout_ms: u64,
    /// Most connections served at once; at the cap the server stops accepting until one
    /// closes, so new clients wait in the kernel's listen backlog (see `listener`).
    pub connections_max: usize,
    /// Events whose occurrence time lies outside this horizon are refused by the live
    /// path (`422 outside_horizon`); PostgreSQL detaches partitions beyond it.
    pub dedupe_horizon: traqlyte_store::DedupeHorizon,
    /// Whether an event older than the horizon is refused (the default) or reconciled
    /// against rows of any age, as a backfill does.
    pub late_events: traqlyte_store::LateEvents,
    /// Whether metrics are recorded, and who may read `GET /metrics`.
    pub metrics: crate::metrics::MetricsConfig,
    /// Whether this server runs the webhook dispatcher (`ops::webhooks`).
    pub webhook_dispatch: bool,
    /// Group commit of single requests (`crate::group_commit`).
    pub group_commit: crate::GroupCommitConfig,
    /// Benchmark only: serve `POST /bench/ceiling`, which reads and parses a body like
    /// `POST /events/{contract}` and answers without authentication or store work, the
    /// HTTP ceiling `traqlyte bench single` compares against. Off in `serve`.
    pub bench_ceiling_route: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:8080".to_string(),
            body_bytes_max: 1024 * 1024,
            batch_bytes_max: 5 * 1024 * 1024,
            batch_events_max: 1_000,
            json_depth_max: 32,
            lineage_body_bytes_max: LINEAGE_BODY_BYTES_MAX,
            lineage_json_depth_max: LINEAGE_JSON_DEPTH_MAX,
            idempotency_stale_after_ms: 30_000,
            idempotency_retention_ms: 24 * 3_600_000,
            idempotency_purge_every_ms: 600_000,
            semantic_scan_every_ms: None,
            request_timeout_ms: 30_000,
            bodies_in_flight_bytes_max: BODIES_IN_FLIGHT_BYTES_MAX,
            #[cfg(feature = "test-hooks")]
            test_publish_delay_ms: std::env::var("TRAQLYTE_TEST_PUBLISH_DELAY_MS")
                .ok()
                .and_then(|ms| ms.parse().ok())
                .unwrap_or(0),
            lineage_depth_max: 100,
            lineage_nodes_max: 10_000,
            admin_token: None,
            header_read_timeout_ms: 10_000,
            idle_timeout_ms: 60_000,
            connections_max: 10_000,
            dedupe_horizon: traqlyte_store::DedupeHorizon::default(),
            late_events: traqlyte_store::LateEvents::Refuse,
            metrics: crate::metrics::MetricsConfig::default(),
            webhook_dispatch: true,
            group_commit: crate::GroupCommitConfig::default(),
            bench_ceiling_route: false,
        }
    }
}

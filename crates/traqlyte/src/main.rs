//! The `traqlyte` binary: command-line parsing and wiring only. The work happens in
//! `traqlyte-identity`, `traqlyte-store` and `traqlyte-server`.

/// mimalloc rather than the system allocator: ingestion allocates many small JSON nodes,
/// and `bench ingest` showed glibc's malloc/free as the largest cost on the HTTP path.
/// Built without transparent huge pages (`Cargo.toml`): with them, memory mimalloc purged
/// and reused came back through page faults that each zeroed 2 MiB, 15 % of the process's
/// CPU time on `bench segment` (7.8 s against 6.6 s for the same run, `perf record`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `println!` for a command's output, through [`traqlyte_tools::write_out`].
macro_rules! outln {
    ($($arg:tt)*) => {
        traqlyte_tools::write_out(format_args!($($arg)*))
    };
}

/// `eprintln!` that never stops the command: a diagnostic that cannot be written (stderr
/// closed, as `traqlyte backfill … 2>&1 | head` leaves it) is dropped, and the work
/// goes on (`eprintln!` panicked there, ending a backfill after its first batch).
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

mod backfill;
mod campaigns;
mod consume;
mod partitions;
mod scan;
mod signals;
mod sources;
mod tenants;

use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use traqlyte_identity::openlineage::{
    builtin_contract, identify_run_event, run_id_for_slot, RUN_EVENT_CONTRACT,
};
use traqlyte_identity::{Contract, ContractName};
use traqlyte_server::ServerConfig;
use traqlyte_store::{ApiKey, Store, StoreConfig};
use traqlyte_tools::{bench, demo, fire};

/// TraqLyte: at-least-once delivery in, exactly-once facts out.
///
/// An event platform for A/B experiments and data lineage: retries, refired beacons,
/// replayed queues and double backfills become harmless (a unique constraint in the
/// store), visible (counted per contract and arm) and never bias an experiment's lift.
/// Start with `traqlyte demo`; run with `traqlyte serve` (SQLite by default).
#[derive(Parser)]
#[command(name = "traqlyte", version)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start here: simulate an A/A experiment whose client retries more in one arm, on a
    /// fresh SQLite file, and show the naive and the deduplicated lift; then keep serving.
    Demo(demo::DemoArgs),
    /// Run the HTTP server (migrates the database first).
    Serve(Box<ServeArgs>),
    /// Apply pending database migrations and exit.
    Migrate(DbArgs),
    /// Manage tenants.
    #[command(subcommand)]
    Tenant(tenants::TenantCommand),
    /// Manage a tenant's API keys: create, list (by prefix), revoke.
    #[command(subcommand)]
    Key(tenants::KeyCommand),
    /// Manage the sources of the Segment-compatible API (`/v1/*`) and their write keys:
    /// create, list (with counts), revoke.
    #[command(subcommand)]
    Source(sources::SourceCommand),
    /// Load a file of events (NDJSON) through the live identification and dedupe path and
    /// report inserted / already present / collided / rejected; `--dry-run` writes nothing.
    Backfill(backfill::BackfillArgs),
    /// The time partitions of the events table (PostgreSQL): status, maintain.
    #[command(subcommand)]
    Partitions(partitions::PartitionsCommand),
    /// Campaigns: `traqlyte campaign rebuild-sums --tenant T CAMPAIGN_ID` recomputes the
    /// per-unit sums its report reads from its outcomes and duplicates.
    #[command(subcommand)]
    Campaign(campaigns::CampaignCommand),
    /// Scans of the stored data: `traqlyte scan semantic --tenant T --contract NAME`
    /// finds events that differ in one identity field only (a field that should not be
    /// identity).
    #[command(subcommand)]
    Scan(scan::ScanCommand),
    /// Inspect identity contracts.
    #[command(subcommand)]
    Contracts(ContractsCommand),
    /// Print an event's canonical identity bytes and id: `traqlyte id CONTRACT < event.json`.
    Id(IdArgs),
    /// Print the deterministic run id (UUIDv5) of a recurring job's schedule slot:
    /// `traqlyte run-id --job my-namespace:my.job --slot 2026-11-29`.
    RunId(RunIdArgs),
    /// Send one JSON body, read from stdin, many times concurrently, like an at-least-once
    /// client retrying, and print how the server answered (status → count) as JSON:
    /// `traqlyte fire --url URL --api-key KEY < event.json`.
    Fire(fire::FireArgs),
    /// Consume a broker: `traqlyte consume nats --url URL --stream STREAM --durable NAME
    /// --tenant TENANT` stores each message, acked only after the commit.
    #[command(subcommand)]
    Consume(consume::ConsumeCommand),
    /// Load generators for BENCHMARKS.md.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

#[derive(Args, Clone)]
struct DbArgs {
    /// `./traqlyte.db` (SQLite, the default), `sqlite://PATH` or `postgres://…`.
    #[arg(long, env = "TRAQLYTE_DATABASE_URL", default_value = "traqlyte.db",
          hide_env_values = true,
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    database_url: String,
}

#[derive(Args)]
struct ServeArgs {
    #[command(flatten)]
    db: DbArgs,
    /// Address to listen on (port 0 picks a free port; the address is printed).
    #[arg(long, env = "TRAQLYTE_LISTEN", hide_env_values = true, default_value = "127.0.0.1:8080", value_parser = parse_listen)]
    listen: String,
    /// Largest single-event body, in bytes.
    #[arg(long, default_value_t = 1024 * 1024,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    body_bytes_max: usize,
    /// Largest batch body, in bytes.
    #[arg(long, default_value_t = 5 * 1024 * 1024,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    batch_bytes_max: usize,
    /// Most events per batch (1 to 10,000: a batch's lookups bind one parameter per
    /// distinct id, and SQLite takes at most 32,766 in a statement).
    #[arg(long, default_value_t = 1_000,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=10_000))]
    batch_events_max: usize,
    /// Deepest JSON nesting accepted in an event (1 to 120).
    #[arg(long, default_value_t = 32,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=120))]
    json_depth_max: usize,
    /// Largest OpenLineage RunEvent body (`POST /api/v1/lineage`), in bytes: schema and
    /// column-lineage facets of wide tables make large events.
    #[arg(long, default_value_t = traqlyte_server::LINEAGE_BODY_BYTES_MAX,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    lineage_body_bytes_max: usize,
    /// Deepest JSON nesting accepted in a RunEvent (1 to 120): nested schema facets.
    #[arg(long, default_value_t = traqlyte_server::LINEAGE_JSON_DEPTH_MAX,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=120))]
    lineage_json_depth_max: usize,
    /// Deepest lineage query accepted, in edges.
    #[arg(long, default_value_t = 100)]
    lineage_depth_max: u32,
    /// Most nodes one lineage query returns.
    #[arg(long, default_value_t = 10_000)]
    lineage_nodes_max: usize,
    /// Database connections in the pool (at least 1).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    pool_connections_max: u32,
    /// An idempotency reservation younger than this is in flight (409 request_in_flight);
    /// older, its owner is presumed dead and a retry takes it over. Keep it at least
    /// `--request-timeout-ms`, or a retry can take over a request still running (its work
    /// then rolls back and runs again); `serve` warns when it is shorter.
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..))]
    idempotency_stale_after_ms: u64,
    /// How long idempotency keys are kept before the purge deletes them (at least 1).
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u64).range(1..))]
    idempotency_retention_hours: u64,
    /// A request taking longer than this (body and handling) is answered 408, 503
    /// request_timeout on /v1/* and POST /api/v1/lineage (at least 1).
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..))]
    request_timeout_ms: u64,
    /// Most memory of request bodies read or handled at once, over every request: each
    /// body's bytes (its Content-Length, or the largest body its route takes when it has
    /// none or is compressed) and its JSON tree (2 to 100 times its bytes, estimated; 6
    /// times a body of known length is taken at once). One tenant (all its keys and write
    /// keys together) takes at most a quarter, requests without one an eighth together. Past it a request waits up to
    /// half the request timeout (5 s at most) for room, then is answered 503
    /// server_busy; a body whose tree alone exceeds its share is 413 body_too_large.
    /// Bounds memory under many large batches, dense bodies or slowly sent bodies.
    #[arg(long, default_value_t = traqlyte_server::BODIES_IN_FLIGHT_BYTES_MAX,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1024..))]
    bodies_in_flight_bytes_max: usize,
    /// A request head (request line and headers) not complete this long after its first
    /// byte closes the connection.
    #[arg(long, default_value_t = 10_000)]
    header_read_timeout_ms: u64,
    /// A connection with no request in flight and no byte of the next one for this long
    /// is closed (keep-alive idle, silent, or not reading its response).
    #[arg(long, default_value_t = 60_000)]
    idle_timeout_ms: u64,
    /// Most client connections served at once; beyond, new ones wait in the listen
    /// backlog. Lowered at start to fit under the open-file limit.
    #[arg(long, default_value_t = 10_000)]
    connections_max: usize,
    /// A file holding the admin token that `/admin/…` routes require as
    /// `Authorization: Bearer <token>` (at least 32 printable characters). Without it the
    /// admin routes answer 404 admin_disabled.
    #[arg(long, env = "TRAQLYTE_ADMIN_TOKEN_FILE", hide_env_values = true)]
    admin_token_file: Option<std::path::PathBuf>,
    #[command(flatten)]
    horizon: partitions::HorizonArgs,
    #[command(flatten)]
    late: partitions::LateEventsArgs,
    /// Record Prometheus metrics and serve `GET /metrics` (`off`: nothing recorded, 404).
    #[arg(
        long,
        env = "TRAQLYTE_METRICS",
        hide_env_values = true,
        value_enum,
        default_value = "on"
    )]
    metrics: OnOff,
    #[command(flatten)]
    metrics_access: MetricsAccess,
    /// Do not run the collision webhook dispatcher in this process (another server
    /// runs it; deliveries wait in the outbox).
    #[arg(long)]
    no_webhook_dispatch: bool,
    /// Group commit: concurrent single requests (events, lineage run events, outcomes,
    /// first assignments) share one durable commit; `off` gives each its own.
    #[arg(
        long,
        env = "TRAQLYTE_GROUP_COMMIT",
        hide_env_values = true,
        value_enum,
        default_value = "on"
    )]
    group_commit: OnOff,
    /// How long a group-commit batch waits for more requests after its first, in µs,
    /// while another batch of its kind is being written (a lone request never waits);
    /// 0 to 2,000.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(0..=2_000))]
    group_commit_wait_us: u64,
    /// Most requests one group-commit batch (one transaction) holds.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=1_000))]
    group_commit_max: u64,
    #[command(flatten)]
    nats: consume::ServeNats,
    /// How often the semantic-duplicate scan runs over the latest version of every
    /// contract (`off`, or a duration such as `30m`, `6h`, `1d`); results at
    /// `GET /ops/semantic-duplicates`.
    #[arg(long, env = "TRAQLYTE_SEMANTIC_SCAN_INTERVAL", hide_env_values = true, default_value = "off", value_parser = parse_interval)]
    semantic_scan_interval: Interval,
}

/// Who may read `GET /metrics`, and where: options of `serve` and `consume nats`.
#[derive(Args)]
pub(crate) struct MetricsAccess {
    /// Require `Authorization: Bearer <token>` on `GET /metrics` from every peer (by
    /// default only loopback peers may read it, with no token): at least 16 printable
    /// ASCII characters without spaces.
    #[arg(long, env = "TRAQLYTE_METRICS_TOKEN", hide_env_values = true, value_parser = parse_metrics_token)]
    metrics_token: Option<String>,
    /// Serve `GET /metrics` on this address, to any peer (or token holders with
    /// --metrics-token); `serve`'s API listener then answers it 404. The probes `/livez`
    /// and `/healthz` are served there too, on connections of their own.
    #[arg(long, env = "TRAQLYTE_METRICS_LISTEN", hide_env_values = true, value_parser = parse_listen)]
    metrics_listen: Option<String>,
}

impl MetricsAccess {
    /// Whether a token was given without a metrics listener.
    pub(crate) fn token_alone(&self) -> bool {
        self.metrics_token.is_some() && self.metrics_listen.is_none()
    }

    /// The server's metrics settings, recording them or not.
    pub(crate) fn config(self, enabled: bool) -> traqlyte_server::metrics::MetricsConfig {
        traqlyte_server::metrics::MetricsConfig {
            enabled,
            token: self.metrics_token,
            listen: self.metrics_listen,
        }
    }
}

/// `off` or a duration.
#[derive(Clone, Copy, Debug)]
struct Interval(Option<u64>);

/// An address to listen on, resolved when the flags are read: a bad one is a usage error
/// naming its flag before the database is opened (it was found after the migrations, as
/// "invalid socket address", and `serve --listen nope` had created `./traqlyte.db`).
fn parse_listen(text: &str) -> Result<String, String> {
    use std::net::ToSocketAddrs;
    match text.to_socket_addrs().map(|mut addresses| addresses.next()) {
        Ok(Some(_)) => Ok(text.to_string()),
        Ok(None) => Err("names no address; give HOST:PORT, e.g. 127.0.0.1:8080".to_string()),
        Err(err) => Err(format!("{err}; give HOST:PORT, e.g. 127.0.0.1:8080")),
    }
}

/// A metrics token: an empty one (`--metrics-token "$UNSET"`) read as no token at all, and
/// with `--metrics-listen` any peer then read the metrics; a one-character one was taken.
fn parse_metrics_token(text: &str) -> Result<String, String> {
    const CHARS_MIN: usize = 16;
    if text.len() < CHARS_MIN || !text.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "a metrics token is at least {CHARS_MIN} printable ASCII characters without spaces"
        ));
    }
    Ok(text.to_string())
}

/// Parses `off` or a whole number followed by `s`, `m`, `h` or `d` into milliseconds.
fn parse_interval(text: &str) -> Result<Interval, String> {
    if text == "off" {
        return Ok(Interval(None));
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let unit_ms: u64 = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => {
            return Err(format!(
                "{text:?}: use off or a number with s, m, h or d (e.g. 6h)"
            ))
        }
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?}: use off or a number with s, m, h or d (e.g. 6h)"))?;
    match n.checked_mul(unit_ms) {
        Some(ms) if ms >= 1_000 => Ok(Interval(Some(ms))),
        _ => Err(format!("{text:?}: between 1s and centuries, please")),
    }
}

/// A switch flag's value.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum OnOff {
    On,
    Off,
}

#[derive(Subcommand)]
enum ContractsCommand {
    /// Print a contract's identity fields: the semantic contract, readable.
    Show {
        /// A built-in contract's name (`openlineage.run_event`), a registered contract's
        /// name, or the path of a contract JSON file.
        contract: String,
        #[command(flatten)]
        source: ContractSource,
    },
}

#[derive(Args)]
struct ContractSource {
    /// The tenant's API key, to read a registered contract.
    #[arg(long, env = "TRAQLYTE_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// A specific version (default: the latest).
    #[arg(long)]
    version: Option<u32>,
    #[command(flatten)]
    db: DbArgs,
}

#[derive(Args)]
struct IdArgs {
    /// A contract JSON file, a registered contract's name (with --api-key), or the
    /// built-in openlineage.run_event.
    contract: String,
    #[command(flatten)]
    source: ContractSource,
    /// Deepest JSON nesting accepted, as the server's `--json-depth-max` (for
    /// openlineage.run_event its `--lineage-json-depth-max`); the server's defaults when
    /// absent, so that no id is printed for an event the server refuses.
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=120))]
    json_depth_max: Option<usize>,
}

#[derive(Args)]
struct RunIdArgs {
    /// The job as `{namespace}:{name}` (split at the last colon).
    #[arg(long)]
    job: String,
    /// The schedule slot, e.g. `2026-11-29` or `2026-11-29T03:00Z`; use one format per job.
    #[arg(long)]
    slot: String,
}

fn main() -> std::process::ExitCode {
    match run_main() {
        Ok(status) => status,
        // One line on stderr, `error: ` and the causes joined as anyhow's `{:#}` joins
        // them, without a backtrace (anyhow's `Debug` form printed a multi-line "Caused
        // by:" list, and a whole backtrace where `RUST_BACKTRACE` is set).
        Err(err) => {
            errln!("error: {}", one_line(&err));
            std::process::ExitCode::FAILURE
        }
    }
}

/// `err` and its causes on one line, a cause left out when the text before already says
/// it (a store error's message often includes its driver's).
fn one_line(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line.replace('\n', " ")
}

fn run_main() -> Result<std::process::ExitCode> {
    let cli = Cli::parse();
    // The demo writes its story to the terminal; only warnings should interrupt it.
    let default_filter = match cli.command {
        Command::Demo(_) => "warn",
        _ => "info,sqlx=warn",
    };
    init_logging(&cli.log_format, default_filter);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("start the async runtime")?;
    let ran = runtime.block_on(async {
        let ran = run(cli.command).await;
        close_opened().await;
        ran
    });
    match ran {
        Ok(()) => Ok(std::process::ExitCode::SUCCESS),
        // A command that finished its work but not all of it (a backfill with rejected
        // lines): its report is printed; the status tells a script. 3, not 2: clap's
        // usage errors exit 2, and a typo that ran nothing must not read as "some lines
        // rejected".
        Err(err) if err.is::<backfill::LinesRejected>() => {
            errln!("{err}");
            Ok(std::process::ExitCode::from(3))
        }
        // Stopped by a signal, its counts printed: 130 or 143, as a shell reports them.
        Err(err) if err.is::<backfill::Interrupted>() => {
            errln!("{err}");
            let status = err
                .downcast_ref::<backfill::Interrupted>()
                .map_or(130, backfill::Interrupted::status);
            Ok(std::process::ExitCode::from(status))
        }
        Err(err) => Err(err),
    }
}

async fn run(command: Command) -> Result<()> {
    match command {
        Command::Demo(args) => demo::run(args, signals::shutdown()).await,
        Command::Serve(args) => serve(*args).await,
        Command::Migrate(db) => {
            let store = connect(&db, 4).await?;
            let applied = store.migrate().await.context("apply migrations")?;
            tracing::info!(backend = store.backend_name(), applied = ?applied, "migrations applied");
            Ok(())
        }
        Command::Tenant(command) => tenants::run_tenant(command).await,
        Command::Key(command) => tenants::run_key(command).await,
        Command::Source(command) => sources::run(command).await,
        Command::Contracts(ContractsCommand::Show { contract, source }) => {
            let text = resolve_contract(&contract, &source).await?.describe();
            outln!("{}", text.strip_suffix('\n').unwrap_or(&text));
            Ok(())
        }
        Command::Id(args) => identify(args).await,
        Command::RunId(args) => {
            let (namespace, name) = args
                .job
                .rsplit_once(':')
                .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
                .context("--job must be {namespace}:{name}")?;
            outln!("{}", run_id_for_slot(namespace, name, &args.slot));
            Ok(())
        }
        Command::Fire(args) => fire::run(args).await,
        Command::Backfill(args) => backfill::run(args).await,
        Command::Partitions(command) => partitions::run(command).await,
        Command::Scan(command) => scan::run(command).await,
        Command::Campaign(command) => campaigns::run(command).await,
        Command::Consume(command) => consume::run(command, signals::shutdown()).await,
        Command::Bench(command) => bench::run(command).await,
    }
}

async fn serve(args: ServeArgs) -> Result<()> {
    // Read before connecting, so a bad token file fails fast.
    let admin_token = args
        .admin_token_file
        .as_deref()
        .map(tenants::read_admin_token)
        .transpose()?;
    let open_files_max = raise_open_files_limit();
    let connections_max = traqlyte_server::connections_max_within(
        open_files_max,
        traqlyte_server::files_reserved(args.pool_connections_max),
        args.connections_max,
    );
    if connections_max < args.connections_max {
        tracing::warn!(
            requested = args.connections_max,
            connections_max,
            open_files_max,
            "connection cap lowered to fit under the open-file limit"
        );
    }
    if args.idempotency_stale_after_ms < args.request_timeout_ms {
        tracing::warn!(
            idempotency_stale_after_ms = args.idempotency_stale_after_ms,
            request_timeout_ms = args.request_timeout_ms,
            "--idempotency-stale-after-ms is shorter than --request-timeout-ms: a retry can take over a keyed request still running, whose work then rolls back and runs again"
        );
    }
    // The consumer's flags are checked before the database is touched.
    let nats = args.nats.config(args.horizon.dedupe_horizon_days)?;
    // A lineage walk's statements are bounded like the request that asks for them.
    refuse_unusable_url(&args.db.database_url)?;
    let mut store_config = StoreConfig::new(&args.db.database_url);
    store_config.pool_connections_max = args.pool_connections_max;
    store_config.walk_timeout_ms = args.request_timeout_ms;
    // A request that cannot get a connection is refused well before its timeout; never
    // under 250 ms, the time to open a connection on a loaded machine (a request timeout
    // of 15 ms left 7 ms, and `serve` sometimes failed to start: "pool timed out").
    store_config.pool_acquire_timeout_ms = (args.request_timeout_ms / 2).clamp(250, 5_000);
    let store = Store::connect(&store_config)
        .await
        .with_context(|| format!("connect to {}", redact(&args.db.database_url)))?;
    closed_at_exit(&store);
    let applied = store.migrate().await.context("apply migrations")?;
    tracing::info!(backend = store.backend_name(), database = %database_shown(&args.db.database_url), applied = ?applied, "database ready");
    let config = ServerConfig {
        listen: args.listen,
        body_bytes_max: args.body_bytes_max,
        batch_bytes_max: args.batch_bytes_max,
        batch_events_max: args.batch_events_max,
        json_depth_max: args.json_depth_max,
        lineage_body_bytes_max: args.lineage_body_bytes_max,
        lineage_json_depth_max: args.lineage_json_depth_max,
        idempotency_stale_after_ms: args.idempotency_stale_after_ms,
        idempotency_retention_ms: args.idempotency_retention_hours.saturating_mul(3_600_000),
        request_timeout_ms: args.request_timeout_ms,
        bodies_in_flight_bytes_max: args.bodies_in_flight_bytes_max,
        lineage_depth_max: args.lineage_depth_max,
        lineage_nodes_max: args.lineage_nodes_max,
        admin_token,
        header_read_timeout_ms: args.header_read_timeout_ms,
        idle_timeout_ms: args.idle_timeout_ms,
        connections_max,
        dedupe_horizon: args.horizon.dedupe_horizon_days,
        late_events: args.late.late_events.into(),
        semantic_scan_every_ms: args.semantic_scan_interval.0,
        metrics: args.metrics_access.config(args.metrics == OnOff::On),
        webhook_dispatch: !args.no_webhook_dispatch,
        group_commit: traqlyte_server::GroupCommitConfig {
            enabled: args.group_commit == OnOff::On,
            wait_us: args.group_commit_wait_us,
            batch_max: usize::try_from(args.group_commit_max).unwrap_or(1_000),
            ..traqlyte_server::GroupCommitConfig::default()
        },
        // The purge interval, and in test builds the test hooks.
        ..ServerConfig::default()
    };
    let on_bound = |address| {
        tracing::info!(%address, "listening");
        // Said where a person sees it, never a reason to stop: a server whose stdout is a
        // pipe nobody reads any more (a logger that died) serves on.
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stdout().lock(),
            "traqlyte listening on http://{address} (web UI: http://{address}/ui)"
        );
    };
    let Some(mut nats) = nats else {
        return traqlyte_server::serve(store, config, on_bound, signals::shutdown())
            .await
            .context("serve HTTP");
    };
    // The server's nesting limit: an event its HTTP API accepts is no dead letter here.
    nats.json_depth_max = config.json_depth_max;
    nats.late_events = config.late_events;
    serve_and_consume(store, config, nats, on_bound).await
}

/// `serve` with `--nats-url`: the HTTP server and the consumer stop together, on a signal
/// or when the consumer fails to start.
async fn serve_and_consume(
    store: Store,
    config: ServerConfig,
    nats: traqlyte_server::connectors::nats::NatsConfig,
    on_bound: impl FnOnce(std::net::SocketAddr),
) -> Result<()> {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let stop = std::sync::Arc::new(stop);
    let until_stopped = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|stop| *stop).await;
    };
    let signalled = stop.clone();
    tokio::spawn(async move {
        signals::shutdown().await;
        let _ = signalled.send(true);
    });
    // The consumer's start checks and connection come before the API listens: a replica
    // whose consumer cannot start exits 1 without ever answering `/healthz`.
    let start = traqlyte_server::connectors::nats::start(store.clone(), nats);
    let started = tokio::select! {
        started = start => started.context("consume NATS JetStream")?,
        () = until_stopped(stopped.clone()) => return Ok(()),
    };
    let consumer = tokio::spawn({
        let (stop, stopped) = (stop.clone(), stopped.clone());
        async move {
            let result = started.run(until_stopped(stopped)).await;
            let _ = stop.send(true);
            result
        }
    });
    traqlyte_server::serve(store, config, on_bound, until_stopped(stopped))
        .await
        .context("serve HTTP")?;
    consumer
        .await
        .context("the consumer task")?
        .context("consume NATS JetStream")
}

/// Raises the open-file soft limit to the hard limit and returns the soft limit now in
/// force. Each client connection is a file descriptor, and distributions often start
/// processes with a soft limit of 1,024 under a hard one far higher; a failure leaves the
/// limit as it was (the connection cap is then fitted under that).
fn raise_open_files_limit() -> u64 {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(open_files_max) => {
            tracing::debug!(open_files_max, "open-file limit raised to the hard limit");
            open_files_max
        }
        Err(err) => {
            // The limit unread too: assume the common default rather than none.
            #[cfg(unix)]
            let current = rlimit::Resource::NOFILE
                .get()
                .map_or(1_024, |(soft, _)| soft);
            #[cfg(not(unix))]
            let current = u64::MAX;
            tracing::warn!(error = %err, open_files_max = current, "could not raise the open-file limit");
            current
        }
    }
}

async fn identify(args: IdArgs) -> Result<()> {
    let contract = resolve_contract(&args.contract, &args.source).await?;
    let mut input = Vec::new();
    std::io::stdin()
        .read_to_end(&mut input)
        .context("read the event from stdin")?;
    let run_event = contract.name().as_str() == RUN_EVENT_CONTRACT;
    let defaults = ServerConfig::default();
    let depth = args.json_depth_max.unwrap_or(if run_event {
        defaults.lineage_json_depth_max
    } else {
        defaults.json_depth_max
    });
    // A RunEvent's facets may hold integers beyond 2^53, as `POST /api/v1/lineage` takes.
    let event = if run_event {
        traqlyte_identity::json::parse_wide_integers(&input, depth)
    } else {
        traqlyte_identity::json::parse(&input, depth)
    }
    .with_context(|| format!("parse the event (at most {depth} levels deep, as the server by default; --json-depth-max N for a server that takes more)"))?;
    // A Segment message's id is keyed by its tenant's source (a messageId is unique per
    // source, never globally): no file here names the source, so no id printed here
    // would be the server's.
    if contract.name().as_str() == traqlyte_identity::segment::MESSAGE_CONTRACT {
        bail!(
            "segment.message ids are keyed by the tenant's source and the messageId, which no file names: `traqlyte id` cannot compute them (GET /contracts/segment.message/collisions names the id of a message refused as a collision)"
        );
    }
    let identified = if run_event {
        // The built-in contract applies to the projection of the event, not to its body.
        identify_run_event(&event)
            .map_err(|e| anyhow::anyhow!("{}: {e}", e.field()))?
            .identified
    } else {
        contract.identify(&event).context("identify the event")?
    };
    outln!(
        "canonical: {}",
        String::from_utf8_lossy(&identified.identity_bytes)
    );
    outln!("event_id: {}", identified.event_id);
    outln!("fingerprint: {}", identified.fingerprint);
    Ok(())
}

/// A contract from a file path, or a registered one by name for the key's tenant.
async fn resolve_contract(contract: &str, source: &ContractSource) -> Result<Contract> {
    if Path::new(contract).is_file() {
        if source.version.is_some() {
            bail!("--version picks a registered contract's version; {contract} is a file, which holds its own");
        }
        let text = std::fs::read(contract).with_context(|| format!("read {contract}"))?;
        let value = traqlyte_identity::json::parse(&text, 32)
            .with_context(|| format!("parse {contract}"))?;
        return Contract::from_json(&value)
            .map_err(|e| anyhow::anyhow!("{contract}: {}: {}", e.field, e.message));
    }
    if let Some(builtin) = builtin_contract(contract) {
        // A built-in contract has the one version this build carries; a version asked of
        // it must be that one, never silently another.
        if let Some(version) = source.version.filter(|v| *v != builtin.version()) {
            bail!(
                "{contract} is a built-in contract whose only version is {}; there is no version {version}",
                builtin.version()
            );
        }
        return Ok(builtin.clone());
    }
    let Some(key_text) = &source.api_key else {
        bail!("{contract:?} is not a file; to read a registered contract pass --api-key (or set TRAQLYTE_API_KEY)");
    };
    let key = ApiKey::parse(key_text).context("the API key is malformed")?;
    let name = ContractName::parse(contract).map_err(|e| anyhow::anyhow!("{}", e.message))?;
    // An existing, migrated database only: `connect` would create an empty SQLite file
    // where the path names none, then fail on its missing tables.
    let store = tenants::open_existing(&source.db).await?;
    let tenant = store
        .tenant_for_key(&key)
        .await?
        .context("unknown API key")?;
    let found = store.contract(&tenant, &name, source.version).await?;
    found.with_context(|| match source.version {
        Some(version) => format!("the tenant's contract {contract:?} has no version {version}"),
        None => format!("no contract named {contract:?} for this tenant"),
    })
}

async fn connect(db: &DbArgs, pool_connections_max: u32) -> Result<Store> {
    refuse_unusable_url(&db.database_url)?;
    let mut config = StoreConfig::new(&db.database_url);
    config.pool_connections_max = pool_connections_max;
    let store = Store::connect(&config)
        .await
        .with_context(|| format!("connect to {}", redact(&db.database_url)))?;
    closed_at_exit(&store);
    Ok(store)
}

/// An error for a database URL a command must not run on: an in-memory SQLite database
/// (it ends with the process: a server would acknowledge writes its exit loses, a
/// `tenant create` print a key to a database already gone), and PostgreSQL written in a
/// form taken for a SQLite file name (`postgres:db`, libpq's `host=… dbname=…`), which
/// created a file of that name and answered as if all were well.
fn refuse_unusable_url(url: &str) -> Result<()> {
    if traqlyte_store::in_memory_database(url) {
        bail!("an in-memory SQLite database ends with this process, and what it acknowledged with it: name a file (or postgres://…) in --database-url");
    }
    let lower = url.trim_start().to_ascii_lowercase();
    if ["postgres:", "postgresql:"]
        .iter()
        .any(|s| lower.starts_with(s))
        && !traqlyte_store::is_postgres_url(url)
    {
        bail!(
            "--database-url {:?} is not a PostgreSQL URL: write postgres://USER@HOST:PORT/DATABASE",
            redact(url)
        );
    }
    let libpq_keyword = [
        "host=",
        "hostaddr=",
        "dbname=",
        "user=",
        "port=",
        "sslmode=",
    ];
    if url.split_whitespace().any(|word| {
        libpq_keyword
            .iter()
            .any(|k| word.to_ascii_lowercase().starts_with(k))
    }) {
        bail!("--database-url takes a URL, not libpq's keyword=value form: write postgres://USER@HOST:PORT/DATABASE?sslmode=…");
    }
    Ok(())
}

/// Has [`close_opened`] close `store` when the command ends: `serve` opened its store
/// without it, and on SQLite a stopped server left its commits in `-wal` (a review found
/// the file alone empty after a clean SIGTERM, where docs/operations.md says it is whole).
fn closed_at_exit(store: &Store) {
    OPENED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(store.clone());
}

/// Every store a command opened ([`connect`]), closed when it ends ([`close_opened`]).
static OPENED: std::sync::Mutex<Vec<Store>> = std::sync::Mutex::new(Vec::new());

/// Closes the stores the command opened, however it ended: on SQLite the last
/// connection closed checkpoints `-wal` into the file and deletes it, so the file alone
/// holds what the command reported stored (a `tenant create` or a `backfill` left its
/// last commits in `-wal`, and a copy of the file alone lacked them). Bounded: a
/// connection a failed command still holds must not keep the process up.
async fn close_opened() {
    let opened = std::mem::take(
        &mut *OPENED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    for store in opened {
        if tokio::time::timeout(CLOSE_WAIT_MAX, store.close())
            .await
            .is_err()
        {
            tracing::warn!("a database connection was still in use at exit; it was not closed");
        }
    }
}

/// How long closing a command's store may wait for its connections.
const CLOSE_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// Which database a process runs on, for its start-up log line: a SQLite file's
/// absolute path (the default `traqlyte.db` is relative to the working directory, and a
/// command run from another one opens another file), else the URL without its password.
fn database_shown(url: &str) -> String {
    match traqlyte_store::database_file(url) {
        Some(path) => std::path::absolute(&path)
            .unwrap_or(path)
            .display()
            .to_string(),
        None => redact(url),
    }
}

/// Hides a password in a database URL before it reaches a log or an error: the one
/// after the user name, and a `password=` query parameter (libpq's URLs take both).
/// The user information ends at the URL's last `@`: a password may hold `?`, `/` or `@`
/// unencoded, and hiding too much (an `@` in the query) is the safe mistake.
fn redact(url: &str) -> String {
    let after_scheme = url.find("://").map_or(0, |scheme| scheme + 3);
    let (mut out, rest) = match url[after_scheme..].rfind('@') {
        Some(at) => {
            let userinfo = &url[after_scheme..after_scheme + at];
            let shown = match userinfo.split_once(':') {
                Some((user, _)) => format!("{user}:***"),
                None => userinfo.to_string(),
            };
            (
                format!("{}{shown}", &url[..after_scheme]),
                &url[after_scheme + at..],
            )
        }
        None => (url[..after_scheme].to_string(), &url[after_scheme..]),
    };
    let (address, query) = match rest.split_once('?') {
        Some((address, query)) => (address, Some(query)),
        None => (rest, None),
    };
    out.push_str(address);
    if let Some(query) = query {
        let parameters: Vec<String> = query
            .split('&')
            .map(|p| match p.split_once('=') {
                Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
                _ => p.to_string(),
            })
            .collect();
        out.push('?');
        out.push_str(&parameters.join("&"));
    }
    out
}

fn init_logging(format: &str, default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    // Colour codes only for a person at a terminal, never in a log file or a pipe.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn a_database_urls_password_is_hidden_wherever_it_is_written() {
        let cases = [
            ("postgres://u:secret@h/db", "postgres://u:***@h/db"),
            (
                "postgres://u@h/db?password=secret",
                "postgres://u@h/db?password=***",
            ),
            (
                "postgres://h/db?sslmode=require&PASSWORD=secret&user=u",
                "postgres://h/db?sslmode=require&PASSWORD=***&user=u",
            ),
            (
                "postgres://u:a@h/db?password=b",
                "postgres://u:***@h/db?password=***",
            ),
            ("/var/lib/traqlyte.db", "/var/lib/traqlyte.db"),
            // Unencoded `?`, `/` and `@` in a password.
            (
                "postgres://postgres:pa?S3CRET@127.0.0.1:5432/db",
                "postgres://postgres:***@127.0.0.1:5432/db",
            ),
            ("postgres://u:p/s@w@h/db", "postgres://u:***@h/db"),
            ("POSTGRES://u:S3CRET@h/db", "POSTGRES://u:***@h/db"),
            ("mysql://u:S3CRET@h/db", "mysql://u:***@h/db"),
        ];
        for (url, shown) in cases {
            assert_eq!(redact(url), shown, "{url}");
        }
    }
}

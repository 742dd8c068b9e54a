//! The lineage figures of BENCHMARKS.md (subcommands of `traqlyte bench`).
//! - `bench lineage-ingest`: distinct RunEvents posted one per request with N in flight, against the
//!   foundation's single-event endpoint (same concurrency) and its batch endpoint, with the
//!   same number of events each, on one running server.
//! - `bench graph`: a generated graph (datasets, one run per dataset reading earlier ones)
//!   loaded through the store, then ancestor-query latency at given depths.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};
use tokio::sync::Semaphore;
use traqlyte_identity::openlineage::identify_run_event;
use traqlyte_store::{
    Direction, NewEvent, NodeKind, NodeRef, RunEventRow, Store, StoreConfig, WalkLimits,
};

/// Options of `bench lineage-ingest`.
#[derive(Args)]
pub struct IngestArgs {
    /// Server base URL, e.g. http://127.0.0.1:8080.
    #[arg(long)]
    url: String,
    /// API key of the tenant.
    #[arg(long, env = "TRAQLYTE_API_KEY", hide_env_values = true)]
    api_key: String,
    /// Events per side.
    #[arg(long, default_value_t = 10_000)]
    events: usize,
    /// Run-event requests in flight at once.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Events per batch request on the foundation side.
    #[arg(long, default_value_t = 1_000)]
    batch_events: usize,
}

/// Options of `bench graph`.
#[derive(Args)]
pub struct GraphArgs {
    /// A fresh database: SQLite path or postgres://….
    #[arg(long)]
    database_url: String,
    /// Datasets (one run, of its own job, writes each).
    #[arg(long, default_value_t = 100_000)]
    datasets: usize,
    /// Edges in total (run inputs plus run outputs).
    #[arg(long, default_value_t = 1_000_000)]
    edges: usize,
    /// Inputs are drawn from the previous `window` datasets.
    #[arg(long, default_value_t = 1_000)]
    window: usize,
    /// Queries per depth.
    #[arg(long, default_value_t = 200)]
    queries: usize,
    /// Depths to query.
    #[arg(long, value_delimiter = ',', default_value = "5,20")]
    depths: Vec<u32>,
    /// Node cap of one query (the server's default `lineage_nodes_max`).
    #[arg(long, default_value_t = 10_000)]
    nodes_max: usize,
}

/// `bench lineage-ingest`: OpenLineage run events over HTTP against the shared raw insert.
pub async fn ingest(args: IngestArgs) -> Result<()> {
    let client = reqwest::Client::new();
    let tag = std::process::id();
    let run_events: Vec<String> = (0..args.events)
        .map(|i| generated_run_event(tag as usize * 10_000_000 + i, &[i], i + 1).to_string())
        .collect();
    let started = Instant::now();
    post_concurrently(&client, &args, "/api/v1/lineage", run_events, 201).await?;
    let lineage_s = started.elapsed().as_secs_f64();
    let contract = json!({"name": format!("bench_{tag}"), "version": 1,
        "fields": [{"pointer": "/order_id", "required": true}], "transport": ["/sent_at"]});
    post(&client, &args, "/contracts", contract.to_string()).await?;
    let singles: Vec<String> = (0..args.events)
        .map(|i| json!({"order_id": format!("s{i}"), "amount": 1.5}).to_string())
        .collect();
    let started = Instant::now();
    post_concurrently(
        &client,
        &args,
        &format!("/events/bench_{tag}"),
        singles,
        200,
    )
    .await?;
    let single_s = started.elapsed().as_secs_f64();
    let started = Instant::now();
    for chunk in (0..args.events)
        .collect::<Vec<_>>()
        .chunks(args.batch_events.max(1))
    {
        let batch: Vec<Value> = chunk
            .iter()
            .map(|i| json!({"order_id": format!("o{i}"), "amount": 1.5, "sent_at": "2026-11-29T00:00:00Z"}))
            .collect();
        let path = format!("/events/bench_{tag}/batch");
        post(&client, &args, &path, json!(batch).to_string()).await?;
    }
    let batch_s = started.elapsed().as_secs_f64();
    let rate = |seconds: f64| args.events as f64 / seconds;
    let (lineage_rate, single_rate, batch_rate) = (rate(lineage_s), rate(single_s), rate(batch_s));
    let ratio = |a: f64, b: f64| (a / b * 1000.0).round() / 1000.0;
    println!(
        "{}",
        json!({"events": args.events, "concurrency": args.concurrency, "batch_events": args.batch_events,
               "run_events_per_s": lineage_rate.round(), "single_events_per_s": single_rate.round(),
               "batch_events_per_s": batch_rate.round(),
               "ratio_run_events_to_batch": ratio(lineage_rate, batch_rate),
               "ratio_run_events_to_single": ratio(lineage_rate, single_rate)})
    );
    Ok(())
}

async fn post_concurrently(
    client: &reqwest::Client,
    args: &IngestArgs,
    path: &str,
    bodies: Vec<String>,
    expected: u16,
) -> Result<()> {
    let permits = Arc::new(Semaphore::new(args.concurrency.max(1)));
    let mut tasks = Vec::with_capacity(bodies.len());
    for body in bodies {
        let permit = permits.clone().acquire_owned().await?;
        let request = client
            .post(format!("{}{path}", args.url))
            .bearer_auth(&args.api_key)
            .body(body);
        tasks.push(tokio::spawn(async move {
            let status = request.send().await.map(|r| r.status().as_u16());
            drop(permit);
            status
        }));
    }
    for task in tasks {
        let status = task.await??;
        if status != expected {
            bail!("{path} answered {status}");
        }
    }
    Ok(())
}

async fn post(client: &reqwest::Client, args: &IngestArgs, path: &str, body: String) -> Result<()> {
    let response = client
        .post(format!("{}{path}", args.url))
        .bearer_auth(&args.api_key)
        .body(body)
        .send()
        .await?;
    if !response.status().is_success() {
        bail!("{path} answered {}", response.status());
    }
    Ok(())
}

/// A RunEvent of job `j{output}` writing `d{output}` from the datasets `inputs`.
pub(crate) fn generated_run_event(run: usize, inputs: &[usize], output: usize) -> Value {
    let datasets = |ids: &[usize]| -> Vec<Value> {
        ids.iter()
            .map(|i| json!({"namespace": "bench", "name": format!("d{i}")}))
            .collect()
    };
    json!({
        "eventType": "COMPLETE", "eventTime": "2026-11-29T03:00:00Z",
        "producer": "https://example.com/bench", "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json",
        "run": {"runId": format!("00000000-0000-4000-8000-{run:012}")},
        "job": {"namespace": "bench", "name": format!("j{output}")},
        "inputs": datasets(inputs), "outputs": datasets(&[output])
    })
}

/// A deterministic pseudo-random sequence (SplitMix64): reproducible graphs, no dependency.
struct SplitMix(u64);

impl SplitMix {
    fn below(&mut self, bound: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) % bound.max(1) as u64) as usize
    }
}

/// `bench graph`: ancestor-query latency on a generated lineage graph.
pub async fn graph(args: GraphArgs) -> Result<()> {
    let mut config = StoreConfig::new(&args.database_url);
    config.pool_connections_max = 8;
    let store = Store::connect(&config).await.context("connect")?;
    store.migrate().await.context("migrate")?;
    let (tenant, _) = store
        .create_tenant(&crate::bench::bench_tenant_name("bench lineage")?)
        .await?;
    let started = Instant::now();
    load_graph(&store, &tenant, &args).await?;
    let load_s = started.elapsed().as_secs_f64();
    let (counts, stats_ms) = time_counts(&store, &tenant).await?;
    let mut figures = Vec::new();
    for &depth in &args.depths {
        figures.push(time_queries(&store, &tenant, &args, depth).await?);
    }
    println!(
        "{}",
        json!({"backend": store.backend_name(), "datasets": counts.datasets, "edges": counts.edges,
               "runs": counts.runs, "load_s": (load_s * 10.0).round() / 10.0, "stats_ms": stats_ms,
               "queries": figures})
    );
    Ok(())
}

/// Calls of `GET /lineage/stats`'s store query timed by [`time_counts`].
const STATS_CALLS: usize = 5;

/// The graph's counts, and the median latency in ms of [`STATS_CALLS`] calls of the query
/// behind `GET /lineage/stats` (it counts the tenant's rows, so it grows with the graph).
async fn time_counts(
    store: &Store,
    tenant: &traqlyte_store::TenantId,
) -> Result<(traqlyte_store::GraphCounts, f64)> {
    let mut latencies = Vec::with_capacity(STATS_CALLS);
    let mut counts = store.lineage_counts(tenant).await?;
    for _ in 0..STATS_CALLS {
        let started = Instant::now();
        counts = store.lineage_counts(tenant).await?;
        latencies.push(started.elapsed().as_secs_f64() * 1_000.0);
    }
    let median = crate::bench::median(&mut latencies);
    Ok((counts, (median * 10.0).round() / 10.0))
}

async fn load_graph(
    store: &Store,
    tenant: &traqlyte_store::TenantId,
    args: &GraphArgs,
) -> Result<()> {
    let inputs_per_run = (args.edges / args.datasets.max(1)).saturating_sub(1).max(1);
    let mut random = SplitMix(42);
    let mut rows = Vec::with_capacity(1_000);
    for output in 0..args.datasets {
        let inputs: Vec<usize> = (0..inputs_per_run.min(output))
            .map(|_| output - 1 - random.below(args.window.min(output)))
            .collect();
        let event = generated_run_event(output, &inputs, output);
        let projected =
            identify_run_event(&event).map_err(|e| anyhow::anyhow!("{}: {e}", e.field()))?;
        let payload = event.to_string();
        rows.push(RunEventRow {
            event: NewEvent {
                identified: projected.identified,
                payload,
            },
            identity: projected.identity,
        });
        if rows.len() == 1_000 || output + 1 == args.datasets {
            store.insert_run_events(tenant, &rows).await?;
            rows.clear();
        }
    }
    Ok(())
}

async fn time_queries(
    store: &Store,
    tenant: &traqlyte_store::TenantId,
    args: &GraphArgs,
    depth: u32,
) -> Result<Value> {
    let mut random = SplitMix(7);
    let mut latencies: Vec<Duration> = Vec::with_capacity(args.queries);
    let (mut nodes, mut truncated) = (0usize, 0usize);
    let limits = WalkLimits {
        depth_max: depth,
        nodes_max: args.nodes_max,
    };
    for _ in 0..args.queries {
        // The newest tenth of the datasets: the deepest ancestries.
        let index = args.datasets - 1 - random.below(args.datasets / 10);
        let start = NodeRef {
            kind: NodeKind::Dataset,
            namespace: "bench".into(),
            name: format!("d{index}"),
        };
        let started = Instant::now();
        let walk = store
            .lineage_walk(tenant, &start, &[Direction::Upstream], limits, false)
            .await?;
        latencies.push(started.elapsed());
        nodes += walk.nodes.len() - 1;
        truncated += usize::from(walk.truncated);
    }
    latencies.sort();
    let ms = |q: f64| {
        let index = ((latencies.len() as f64 - 1.0) * q).round() as usize;
        latencies
            .get(index)
            .map(|d| (d.as_secs_f64() * 10_000.0).round() / 10.0)
            .unwrap_or(0.0)
    };
    Ok(
        json!({"depth": depth, "queries": args.queries, "p50_ms": ms(0.5), "p99_ms": ms(0.99),
              "mean_nodes": nodes / args.queries.max(1), "truncated": truncated}),
    )
}

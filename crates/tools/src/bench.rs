//! `traqlyte bench`: load generators whose figures go to BENCHMARKS.md. Each measures the
//! product path and its reference **in the same run**, so the ratio survives a noisy,
//! shared machine.
//!
//! - `bench ingest`: HTTP batch ingestion (with retried duplicates) against the raw store
//!   limit, the same rows inserted straight into the same table.
//! - `bench nats` (`bench_nats.rs`): messages/s through the JetStream consumer against the
//!   same raw reference.
//! - `bench publish`: `POST /campaigns/{id}/publish` with fresh idempotency keys, with
//!   replays, and without the header.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use serde_json::{json, Value};
use traqlyte_identity::Contract;
use traqlyte_server::ServerConfig;
use traqlyte_store::{NewEvent, Store, StoreConfig, TenantId, TenantName};

/// Benchmarks.
#[derive(Subcommand)]
pub enum BenchCommand {
    /// HTTP batch ingestion vs the raw batched insert, same rows, same concurrency.
    Ingest(IngestArgs),
    /// Publish latency: fresh idempotency keys, replays, and no header.
    Publish(PublishArgs),
    /// Report latency on a generated experiment vs a plain aggregate scan (PostgreSQL).
    Report(ReportArgs),
    /// Run-event ingestion rate vs the foundation's endpoints, against a running server.
    LineageIngest(crate::bench_lineage::IngestArgs),
    /// Messages/s through the NATS JetStream consumer vs the raw batched insert.
    Nats(crate::bench_nats::NatsArgs),
    /// Ancestor-query latency on a generated lineage graph.
    Graph(crate::bench_lineage::GraphArgs),
    /// Write throughput per slice as the events table grows to 20 M rows, with time
    /// partitions and beside one unpartitioned table.
    Growth(crate::bench_growth::GrowthArgs),
    /// `POST /outcomes/batch` outcomes/s vs `/events/{contract}/batch` events/s, one run.
    Outcomes(crate::bench_hot::OutcomesArgs),
    /// `/assignments/batch` units/s and single assignments/s vs event batches, one run.
    Assignments(crate::bench_hot::AssignmentsArgs),
    /// Single requests at 64 connections with group commit on vs off (events, run events,
    /// assignments) and the HTTP ceiling, one run.
    Single(crate::bench_hot::SingleArgs),
    /// `POST /v1/batch` (Segment) against `POST /events/{contract}/batch`, same events.
    Segment(crate::bench_segment::SegmentArgs),
    /// HTTP batch ingestion with Prometheus metrics recorded vs paused, one run.
    Metrics(crate::bench_metrics::MetricsArgs),
}

/// Options of `bench report`.
#[derive(Args)]
pub struct ReportArgs {
    /// A PostgreSQL database to fill (use a fresh one).
    #[arg(long)]
    database_url: String,
    /// Assigned units.
    #[arg(long, default_value_t = 1_000_000)]
    units: i64,
    /// Outcomes (half `purchase` conversions, half `revenue` sums).
    #[arg(long, default_value_t = 5_000_000)]
    outcomes: i64,
    /// One suppressed duplicate per this many outcomes.
    #[arg(long, default_value_t = 10)]
    duplicate_every: i64,
    /// Timed repetitions of each query; medians are reported.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

/// Options of `bench ingest`.
#[derive(Args)]
pub struct IngestArgs {
    /// Database to measure (a fresh file or database is best).
    #[arg(long)]
    database_url: String,
    /// Events per round and path.
    #[arg(long, default_value_t = 100_000)]
    events: usize,
    /// Events per batch.
    #[arg(long, default_value_t = 1_000)]
    batch: usize,
    /// Concurrent connections (HTTP) or transactions (raw).
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Share of events that are retries of an earlier event (new transport fields).
    #[arg(long, default_value_t = 0.2)]
    duplicate_ratio: f64,
    /// Rounds; each alternates which path goes first, medians are reported.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

/// Options of `bench publish`.
#[derive(Args)]
pub struct PublishArgs {
    /// Database to measure.
    #[arg(long)]
    database_url: String,
    /// Requests per mode.
    #[arg(long, default_value_t = 2_000)]
    requests: usize,
    /// Concurrent connections.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
}

/// Runs a benchmark and prints its table.
pub async fn run(command: BenchCommand) -> Result<()> {
    match command {
        BenchCommand::Ingest(args) => ingest(args).await,
        BenchCommand::Publish(args) => publish(args).await,
        BenchCommand::Report(args) => report(args).await,
        BenchCommand::LineageIngest(args) => crate::bench_lineage::ingest(args).await,
        BenchCommand::Graph(args) => crate::bench_lineage::graph(args).await,
        BenchCommand::Growth(args) => crate::bench_growth::growth(args).await,
        BenchCommand::Outcomes(args) => crate::bench_hot::outcomes(args).await,
        BenchCommand::Assignments(args) => crate::bench_hot::assignments(args).await,
        BenchCommand::Single(args) => crate::bench_hot::single(args).await,
        BenchCommand::Segment(args) => crate::bench_segment::segment(args).await,
        BenchCommand::Nats(args) => crate::bench_nats::nats(args).await,
        BenchCommand::Metrics(args) => crate::bench_metrics::metrics(args).await,
    }
}

/// A deterministic generator (xorshift64*), so every run sends the same events.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A tenant name no earlier round or run on the same database has taken (tenant names
/// are unique), e.g. `bench http 1764540000123456`.
pub(crate) fn bench_tenant_name(what: &str) -> Result<TenantName> {
    TenantName::parse(&format!("{what} {}", traqlyte_store::now_us())).map_err(anyhow::Error::msg)
}

pub(crate) fn bench_contract() -> Value {
    json!({
        "name": "checkout_completed", "version": 1,
        "fields": [{"pointer": "/merchant_id", "required": true}, {"pointer": "/order_id", "required": true},
                   {"pointer": "/amount", "precision": 2}, {"pointer": "/items", "array": "set"}, {"pointer": "/params"}],
        "transport": ["/sent_at", "/attempt", "/host"],
        "occurred_at": "/occurred_at"
    })
}

/// `events` events in which `duplicate_ratio` are retries of earlier ones.
pub(crate) fn generate_events(events: usize, duplicate_ratio: f64) -> Vec<Value> {
    let mut rng = Rng(0x7472_716c_7974_6521);
    let mut out: Vec<Value> = Vec::with_capacity(events);
    // An hour ago: inside the dedupe horizon whenever the benchmark runs.
    let occurred_at =
        traqlyte_identity::format_rfc3339_micros(traqlyte_store::now_us() - 3_600_000_000);
    for index in 0..events {
        if index > 0 && rng.unit() < duplicate_ratio {
            let mut retry = out[(rng.next() as usize) % index].clone();
            retry["attempt"] = json!(retry["attempt"].as_u64().unwrap_or(1) + 1);
            retry["sent_at"] = json!("2026-11-29T10:00:09Z"); // transport: not compared
            out.push(retry);
            continue;
        }
        out.push(json!({
            "merchant_id": format!("merchant_{}", rng.next() % 500),
            "order_id": format!("order_{index}_{}", rng.next() % 1_000_000),
            "amount": (rng.next() % 100_000) as f64 / 100.0 + 0.005,
            "items": [format!("sku-{}", rng.next() % 1000), format!("sku-{}", rng.next() % 1000)],
            "params": {"currency": "EUR", "channel": "web"},
            "occurred_at": occurred_at, "sent_at": "2026-11-29T10:00:01Z",
            "attempt": 1, "host": "edge-1", "note": "bench"
        }));
    }
    out
}

pub(crate) struct Bench {
    pub(crate) store: Store,
    pub(crate) address: String,
    _shutdown: tokio::sync::oneshot::Sender<()>,
}

/// Connects, migrates and serves in-process on a free loopback port.
pub(crate) async fn start(database_url: &str, concurrency: usize) -> Result<Bench> {
    let mut config = StoreConfig::new(database_url);
    config.pool_connections_max = (concurrency as u32 * 2).max(8);
    let store = Store::connect(&config).await.context("connect")?;
    store.migrate().await.context("migrate")?;
    let (bound_tx, bound_rx) = tokio::sync::oneshot::channel();
    let (shutdown_tx, shutdown_rx) = tokio::sync::oneshot::channel::<()>();
    let server_config = ServerConfig {
        listen: "127.0.0.1:0".into(),
        ..ServerConfig::default()
    };
    let server_store = store.clone();
    tokio::spawn(async move {
        let on_bound = move |address| {
            let _ = bound_tx.send(address);
        };
        let shutdown = async move {
            let _ = shutdown_rx.await;
        };
        if let Err(err) =
            traqlyte_server::serve(server_store, server_config, on_bound, shutdown).await
        {
            tracing::error!(error = %err, "bench server failed");
        }
    });
    let address = format!("http://{}", bound_rx.await.context("server did not start")?);
    Ok(Bench {
        store,
        address,
        _shutdown: shutdown_tx,
    })
}

/// Runs `jobs` with `concurrency` workers pulling from a shared index; returns wall time.
pub(crate) async fn run_concurrently<F, Fut>(
    jobs: usize,
    concurrency: usize,
    job: F,
) -> Result<Duration>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let job = Arc::new(job);
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..concurrency.max(1) {
        let (next, job) = (next.clone(), job.clone());
        workers.push(tokio::spawn(async move {
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= jobs {
                    return Ok::<(), anyhow::Error>(());
                }
                job(index).await?;
            }
        }));
    }
    for worker in workers {
        worker.await??;
    }
    Ok(started.elapsed())
}

/// The events identified, in batches of `batch`, for the raw batched insert.
pub(crate) fn raw_batches(
    contract: &Contract,
    events: &[Value],
    batch: usize,
) -> Result<Vec<Vec<NewEvent>>> {
    let mut batches: Vec<Vec<NewEvent>> = Vec::new();
    for chunk in events.chunks(batch.max(1)) {
        let mut batch = Vec::with_capacity(chunk.len());
        for event in chunk {
            let identified = contract.identify(event).context("identify")?;
            batch.push(NewEvent {
                identified,
                payload: event.to_string(),
            });
        }
        // Sorted like the product path, so concurrent batches take locks in one order.
        batch.sort_by(|a, b| a.identified.event_id.cmp(&b.identified.event_id));
        batches.push(batch);
    }
    Ok(batches)
}

async fn ingest(args: IngestArgs) -> Result<()> {
    let bench = start(&args.database_url, args.concurrency).await?;
    let contract =
        Contract::from_json(&bench_contract()).map_err(|e| anyhow::anyhow!("{}", e.message))?;
    let events = generate_events(args.events, args.duplicate_ratio);
    let bodies: Arc<Vec<String>> = Arc::new(
        events
            .chunks(args.batch)
            .map(|c| Value::Array(c.to_vec()).to_string())
            .collect(),
    );
    let raw_batches = Arc::new(raw_batches(&contract, &events, args.batch)?);
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .build()?;
    let (mut http_rates, mut raw_rates) = (Vec::new(), Vec::new());
    for round in 0..args.rounds.max(1) {
        let (http_tenant, key) = bench
            .store
            .create_tenant(&bench_tenant_name("bench http")?)
            .await?;
        bench
            .store
            .register_contract(&http_tenant, &contract)
            .await?;
        let (raw_tenant, _) = bench
            .store
            .create_tenant(&bench_tenant_name("bench raw")?)
            .await?;
        let http = || {
            http_round(
                &client,
                &bench.address,
                key.expose(),
                bodies.clone(),
                args.concurrency,
            )
        };
        let raw = || {
            raw_round(
                &bench.store,
                raw_tenant.clone(),
                raw_batches.clone(),
                args.concurrency,
            )
        };
        let ((http_time, http_cpu), (raw_time, raw_cpu)) = if round % 2 == 0 {
            (with_cpu(http()).await?, with_cpu(raw()).await?)
        } else {
            let raw = with_cpu(raw()).await?;
            (with_cpu(http()).await?, raw)
        };
        check_counts(&bench.store, &http_tenant, &raw_batches, args.events).await?;
        http_rates.push(args.events as f64 / http_time.as_secs_f64());
        raw_rates.push(args.events as f64 / raw_time.as_secs_f64());
        eprintln!(
            "round {}: http {:.0} events/s, raw {:.0} events/s",
            round + 1,
            http_rates[round],
            raw_rates[round]
        );
        // Whether a side was bound by CPU, and whose: the ratio on a machine that also
        // runs the database is a ratio of CPU per event as soon as its cores are busy.
        crate::cpu::report(round, "http", http_time, args.events, http_cpu);
        crate::cpu::report(round, "raw", raw_time, args.events, raw_cpu);
    }
    let (http, raw) = (median(&mut http_rates), median(&mut raw_rates));
    println!("backend  events  batch  concurrency  duplicates  http_events_per_s  raw_events_per_s  ratio");
    println!(
        "{:<8} {:<7} {:<6} {:<12} {:<11} {:<18.0} {:<17.0} {:.2}",
        bench.store.backend_name(),
        args.events,
        args.batch,
        args.concurrency,
        args.duplicate_ratio,
        http,
        raw,
        http / raw
    );
    Ok(())
}

/// Runs a timed side, with the cores busy meanwhile (`cpu.rs`) where they can be read.
pub(crate) async fn with_cpu(
    side: impl std::future::Future<Output = Result<Duration>>,
) -> Result<(Duration, Option<crate::cpu::Cores>)> {
    let before = crate::cpu::CpuSnapshot::now();
    let time = side.await?;
    Ok((time, before.and_then(|b| b.cores_since())))
}

/// The HTTP side stored each distinct event once and counted every other delivery as a
/// duplicate: a benchmark that lost or doubled rows would measure the wrong thing.
async fn check_counts(
    store: &Store,
    tenant: &TenantId,
    batches: &[Vec<NewEvent>],
    sent: usize,
) -> Result<()> {
    let distinct: std::collections::HashSet<&str> = batches
        .iter()
        .flatten()
        .map(|e| e.identified.event_id.as_str())
        .collect();
    let stats = store.stats(tenant).await?;
    let row = stats
        .iter()
        .find(|r| r.contract == "checkout_completed")
        .context("no stats for the bench contract")?;
    let expected = (distinct.len() as i64, (sent - distinct.len()) as i64, 0);
    if (row.stored, row.duplicates, row.collisions) != expected {
        bail!(
            "HTTP side stored/duplicates/collisions {:?}, expected {expected:?}",
            (row.stored, row.duplicates, row.collisions)
        );
    }
    Ok(())
}

pub(crate) async fn http_round(
    client: &reqwest::Client,
    address: &str,
    key: &str,
    bodies: Arc<Vec<String>>,
    concurrency: usize,
) -> Result<Duration> {
    let (client, url, key) = (
        client.clone(),
        format!("{address}/events/checkout_completed/batch"),
        key.to_string(),
    );
    run_concurrently(bodies.len(), concurrency, move |index| {
        let request = client
            .post(&url)
            .bearer_auth(&key)
            .header("content-type", "application/json")
            .body(bodies[index].clone());
        async move {
            let response = request.send().await?;
            if !response.status().is_success() {
                bail!(
                    "batch answered {}: {}",
                    response.status(),
                    response.text().await.unwrap_or_default()
                );
            }
            Ok(())
        }
    })
    .await
}

pub(crate) async fn raw_round(
    store: &Store,
    tenant: TenantId,
    batches: Arc<Vec<Vec<NewEvent>>>,
    concurrency: usize,
) -> Result<Duration> {
    let store = store.clone();
    let contract = Arc::new(Contract::from_json(&bench_contract())?);
    run_concurrently(batches.len(), concurrency, move |index| {
        let (store, tenant, batches) = (store.clone(), tenant.clone(), batches.clone());
        let contract = contract.clone();
        async move {
            store
                .raw_insert_events(&tenant, &contract, &batches[index])
                .await?;
            Ok(())
        }
    })
    .await
}

pub(crate) fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

async fn publish(args: PublishArgs) -> Result<()> {
    let bench = start(&args.database_url, args.concurrency).await?;
    let (_, key) = bench
        .store
        .create_tenant(&bench_tenant_name("bench publish")?)
        .await?;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .build()?;
    let campaign: Value = client
        .post(format!("{}/campaigns", bench.address))
        .bearer_auth(key.expose())
        .json(&json!({"key": "bench", "name": "bench", "arms": [{"key": "a", "weight": 1}, {"key": "b", "weight": 1}], "metrics": []}))
        .send()
        .await?
        .json()
        .await?;
    let id = campaign["id"].as_str().context("campaign id")?.to_string();
    let url = format!("{}/campaigns/{id}/publish", bench.address);
    let (key, n, c) = (key.expose().to_string(), args.requests, args.concurrency);
    // One completed key to replay.
    let replay_key = "bench-replayed".to_string();
    send_publish(&client, &url, &key, Some(&replay_key)).await?;
    println!("mode          requests  p50_ms  p99_ms  requests_per_s  p50_vs_no_header");
    let mut baseline = None;
    for mode in ["no-header", "fresh-key", "replay"] {
        let latencies = Arc::new(std::sync::Mutex::new(Vec::with_capacity(n)));
        let (client, url, key, replay_key, lat) = (
            client.clone(),
            url.clone(),
            key.clone(),
            replay_key.clone(),
            latencies.clone(),
        );
        let elapsed = run_concurrently(n, c, move |index| {
            let idem = match mode {
                "fresh-key" => Some(format!("bench-fresh-{index}")),
                "replay" => Some(replay_key.clone()),
                _ => None,
            };
            let (client, url, key, lat) = (client.clone(), url.clone(), key.clone(), lat.clone());
            async move {
                let started = Instant::now();
                send_publish(&client, &url, &key, idem.as_deref()).await?;
                if let Ok(mut l) = lat.lock() {
                    l.push(started.elapsed().as_secs_f64() * 1_000.0);
                }
                Ok(())
            }
        })
        .await?;
        let mut values = latencies.lock().map(|l| l.clone()).unwrap_or_default();
        values.sort_by(f64::total_cmp);
        let p = |q: f64| values[((values.len() as f64 - 1.0) * q).round() as usize];
        let p50 = p(0.5);
        let base = *baseline.get_or_insert(p50);
        println!(
            "{mode:<13} {n:<9} {:<7.2} {:<7.2} {:<15.0} {:.2}",
            p50,
            p(0.99),
            n as f64 / elapsed.as_secs_f64(),
            p50 / base
        );
    }
    Ok(())
}

async fn send_publish(
    client: &reqwest::Client,
    url: &str,
    key: &str,
    idem: Option<&str>,
) -> Result<()> {
    let mut request = client.post(url).bearer_auth(key);
    if let Some(idem) = idem {
        request = request.header("X-TL-Idempotency-Key", idem);
    }
    let response = request.send().await?;
    if response.status().as_u16() != 201 {
        bail!("publish answered {}", response.status());
    }
    Ok(())
}

async fn report(args: ReportArgs) -> Result<()> {
    let bench = start(&args.database_url, 4).await?;
    let (tenant, _) = bench
        .store
        .create_tenant(&bench_tenant_name("bench report")?)
        .await?;
    let new = traqlyte_store::NewCampaign {
        key: "bench".into(),
        name: "bench".into(),
        arms: traqlyte_store::Arms::try_from(vec![
            traqlyte_store::Arm {
                key: "control".into(),
                weight: 1,
            },
            traqlyte_store::Arm {
                key: "treatment".into(),
                weight: 1,
            },
        ])?,
        metrics: vec![
            traqlyte_store::MetricDef {
                name: "purchase".into(),
                kind: traqlyte_store::MetricKind::Conversion,
                window_hours: 168,
            },
            traqlyte_store::MetricDef {
                name: "revenue".into(),
                kind: traqlyte_store::MetricKind::Sum,
                window_hours: 168,
            },
        ],
    };
    let mut tx = bench.store.begin().await?;
    let traqlyte_store::CampaignCreated::New(campaign) = tx
        .create_campaign(&tenant, &new, traqlyte_store::now_us())
        .await?
    else {
        anyhow::bail!("the bench's campaign key is taken in a fresh database");
    };
    tx.publish_campaign(&tenant, &campaign.id, None, None, traqlyte_store::now_us())
        .await?;
    tx.commit().await?;
    let seeding = Instant::now();
    let seeded = bench
        .store
        .bench_seed_experiment(
            &tenant,
            &campaign.id,
            args.units,
            args.outcomes,
            args.duplicate_every,
            traqlyte_store::now_us(),
        )
        .await?;
    let windows: Vec<traqlyte_store::MetricWindow> = new
        .metrics
        .iter()
        .map(|m| traqlyte_store::MetricWindow {
            metric: m.name.clone(),
            window_us: i64::from(m.window_hours) * 3_600_000_000,
        })
        .collect();
    bench
        .store
        .rebuild_unit_metrics(&tenant, &campaign.id, &windows)
        .await?;
    eprintln!(
        "seeded {seeded:?} and its per-unit sums in {:.1} s",
        seeding.elapsed().as_secs_f64()
    );
    let (mut report_s, mut scan_s) = (Vec::new(), Vec::new());
    for round in 0..args.rounds.max(1) {
        let started = Instant::now();
        let built = traqlyte_server::experiments::report::build_of(
            &bench.store,
            &tenant,
            &campaign.id,
            None,
        )
        .await
        .map_err(|e| anyhow::anyhow!("report: {}", e.message()))?;
        report_s.push(started.elapsed().as_secs_f64());
        let started = Instant::now();
        let scanned = bench.store.bench_plain_scan(&tenant, &campaign.id).await?;
        scan_s.push(started.elapsed().as_secs_f64());
        if round == 0 {
            let units: u64 = built.arms.iter().map(|arm| arm.units).sum();
            let rows: i64 = scanned.iter().map(|scan| scan.outcomes).sum();
            if units != args.units as u64 || rows != args.outcomes {
                bail!(
                    "the report saw {units} units and the scan {rows} rows; expected {} and {}",
                    args.units,
                    args.outcomes
                );
            }
        }
    }
    let (report_median, scan_median) = (median(&mut report_s), median(&mut scan_s));
    println!("units    outcomes  duplicates  report_s  plain_scan_s  ratio");
    println!(
        "{:<8} {:<9} {:<11} {:<9.3} {:<13.3} {:.2}",
        args.units,
        args.outcomes,
        seeded.duplicates,
        report_median,
        scan_median,
        report_median / scan_median
    );
    Ok(())
}

//! `bench nats`: messages/s through the NATS JetStream consumer into the store, at a
//! share of re-published duplicates, against the raw batched insert of the same rows in
//! the same run (`bench ingest`'s reference). The stream is filled first, then the
//! consumers drain it: the figure is the consumer's rate, not the publisher's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use async_nats::jetstream::{self, stream};
use clap::Args;
use traqlyte_identity::Contract;
use traqlyte_server::connectors::nats::{run as consume, NatsConfig};
use traqlyte_store::{Store, TenantId};

use crate::bench::{
    bench_contract, bench_tenant_name, generate_events, median, raw_batches, raw_round, start,
    with_cpu,
};

/// How long a round may take to drain before the bench gives up.
const DRAIN_WAIT_MAX: Duration = Duration::from_secs(600);
/// Publishes awaited together (JetStream acks them in flight).
const PUBLISH_WINDOW_MAX: usize = 1_000;

/// Options of `bench nats`.
#[derive(Args)]
pub struct NatsArgs {
    /// Database to measure (PostgreSQL for the published figure).
    #[arg(long)]
    database_url: String,
    /// A JetStream server; the bench creates and deletes a stream over `traqlyte.>`
    /// (no other stream on it may capture those subjects).
    #[arg(long, default_value = "nats://127.0.0.1:4222")]
    nats_url: String,
    /// Messages per round.
    #[arg(long, default_value_t = 50_000)]
    events: usize,
    /// Messages per consumer batch and events per raw batch.
    #[arg(long, default_value_t = 500)]
    batch: usize,
    /// Consumer tasks on one durable, and raw concurrent transactions.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Share of messages that re-publish an earlier event (fresh message id).
    #[arg(long, default_value_t = 0.2)]
    duplicate_ratio: f64,
    /// Rounds; each alternates which path goes first, medians are reported.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

/// Runs the benchmark and prints one line of figures.
pub async fn nats(args: NatsArgs) -> Result<()> {
    let bench = start(&args.database_url, args.concurrency).await?;
    let contract =
        Contract::from_json(&bench_contract()).map_err(|e| anyhow::anyhow!("{}", e.message))?;
    let events = generate_events(args.events, args.duplicate_ratio);
    let payloads: Vec<Vec<u8>> = events.iter().map(|e| e.to_string().into_bytes()).collect();
    let batches = Arc::new(raw_batches(&contract, &events, args.batch)?);
    let js = jetstream::new(
        async_nats::connect(args.nats_url.as_str())
            .await
            .context("connect to NATS")?,
    );
    let (mut nats_rates, mut raw_rates) = (Vec::new(), Vec::new());
    for round in 0..args.rounds.max(1) {
        let (raw_tenant, _) = bench
            .store
            .create_tenant(&bench_tenant_name("bench raw")?)
            .await?;
        let raw = || {
            raw_round(
                &bench.store,
                raw_tenant.clone(),
                batches.clone(),
                args.concurrency,
            )
        };
        let through_nats = || nats_round(&bench.store, &js, &contract, &payloads, &args);
        let ((nats_time, nats_cpu), (raw_time, raw_cpu)) = if round % 2 == 0 {
            (through_nats().await?, with_cpu(raw()).await?)
        } else {
            let raw = with_cpu(raw()).await?;
            (through_nats().await?, raw)
        };
        nats_rates.push(args.events as f64 / nats_time.as_secs_f64());
        raw_rates.push(args.events as f64 / raw_time.as_secs_f64());
        eprintln!(
            "round {}: nats {:.0} messages/s, raw {:.0} events/s",
            round + 1,
            nats_rates[round],
            raw_rates[round]
        );
        crate::cpu::report(round, "nats", nats_time, args.events, nats_cpu);
        crate::cpu::report(round, "raw", raw_time, args.events, raw_cpu);
    }
    let (nats, raw) = (median(&mut nats_rates), median(&mut raw_rates));
    println!("backend  events  batch  concurrency  duplicates  nats_messages_per_s  raw_events_per_s  ratio");
    println!(
        "{:<8} {:<7} {:<6} {:<12} {:<11} {:<20.0} {:<17.0} {:.2}",
        bench.store.backend_name(),
        args.events,
        args.batch,
        args.concurrency,
        args.duplicate_ratio,
        nats,
        raw,
        nats / raw
    );
    Ok(())
}

/// Fills a fresh stream, then times `concurrency` consumers draining it into a fresh
/// tenant, and checks every message was counted once (stored or duplicate).
async fn nats_round(
    store: &Store,
    js: &jetstream::Context,
    contract: &Contract,
    payloads: &[Vec<u8>],
    args: &NatsArgs,
) -> Result<(Duration, Option<crate::cpu::Cores>)> {
    let tenant_name = bench_tenant_name("bench nats")?;
    let (tenant, _) = store.create_tenant(&tenant_name).await?;
    store.register_contract(&tenant, contract).await?;
    let stream_name = format!("TLBENCH{}", traqlyte_store::now_us());
    js.create_stream(stream::Config {
        name: stream_name.clone(),
        subjects: vec!["traqlyte.>".to_string()],
        ..stream::Config::default()
    })
    .await
    .context("create the bench stream")?;
    for window in payloads.chunks(PUBLISH_WINDOW_MAX) {
        let mut acks = Vec::with_capacity(window.len());
        for payload in window {
            let subject = "traqlyte.checkout_completed".to_string();
            acks.push(js.publish(subject, payload.clone().into()).await?);
        }
        for ack in acks {
            ack.await?;
        }
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let started = Instant::now();
    let cpu = crate::cpu::CpuSnapshot::now();
    let mut consumers = Vec::new();
    for _ in 0..args.concurrency.max(1) {
        let mut config = NatsConfig::new(
            args.nats_url.clone(),
            stream_name.clone(),
            "bench".to_string(),
            tenant_name.clone(),
        );
        config.batch_messages_max = args.batch;
        let mut stopped = stopped.clone();
        let shutdown = async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        };
        consumers.push(tokio::spawn(consume(store.clone(), config, shutdown)));
    }
    wait_for_all(store, &tenant, payloads.len()).await?;
    let elapsed = started.elapsed();
    let cores = cpu.and_then(|c| c.cores_since());
    let _ = stop.send(true);
    for consumer in consumers {
        consumer.await??;
    }
    js.delete_stream(&stream_name).await?;
    Ok((elapsed, cores))
}

/// Waits until the tenant's stored + duplicates count every message sent.
async fn wait_for_all(store: &Store, tenant: &TenantId, sent: usize) -> Result<()> {
    let started = Instant::now();
    loop {
        let stats = store.stats(tenant).await?;
        let counted: i64 = stats.iter().map(|r| r.stored + r.duplicates).sum();
        if counted == sent as i64 {
            return Ok(());
        }
        if counted > sent as i64 || started.elapsed() > DRAIN_WAIT_MAX {
            bail!("counted {counted} of {sent} messages");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

//! `bench metrics`: HTTP batch ingestion with Prometheus metrics recorded against the
//! same ingestion with recording paused (what `serve --metrics off` does: every
//! recording function returns after one atomic load), same server, same run, rounds
//! alternating which goes first. Target: on ≥ 95% of off.

use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use serde_json::Value;
use traqlyte_identity::Contract;

use crate::bench::{bench_contract, bench_tenant_name, generate_events, http_round, median, start};

/// Options of `bench metrics`.
#[derive(Args)]
pub struct MetricsArgs {
    /// Database to measure (a fresh file or database is best).
    #[arg(long)]
    database_url: String,
    /// Events per round and mode.
    #[arg(long, default_value_t = 50_000)]
    events: usize,
    /// Events per batch.
    #[arg(long, default_value_t = 1_000)]
    batch: usize,
    /// Concurrent connections.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Share of events that are retries of an earlier event.
    #[arg(long, default_value_t = 0.2)]
    duplicate_ratio: f64,
    /// Rounds; medians are reported.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
}

/// Runs the benchmark and prints its table.
pub async fn metrics(args: MetricsArgs) -> Result<()> {
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
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .build()?;
    let (mut on_rates, mut off_rates) = (Vec::new(), Vec::new());
    for round in 0..args.rounds.max(1) {
        let mut rates = [0.0; 2];
        let order = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for on in order {
            let (tenant, key) = bench
                .store
                .create_tenant(&bench_tenant_name(if on {
                    "bench on"
                } else {
                    "bench off"
                })?)
                .await?;
            bench.store.register_contract(&tenant, &contract).await?;
            traqlyte_server::metrics::set_recording(on);
            let time = http_round(
                &client,
                &bench.address,
                key.expose(),
                bodies.clone(),
                args.concurrency,
            )
            .await
            .context("ingest")?;
            rates[usize::from(!on)] = args.events as f64 / time.as_secs_f64();
        }
        traqlyte_server::metrics::set_recording(true);
        eprintln!(
            "round {}: metrics on {:.0} events/s, off {:.0} events/s",
            round + 1,
            rates[0],
            rates[1]
        );
        on_rates.push(rates[0]);
        off_rates.push(rates[1]);
    }
    let (on, off) = (median(&mut on_rates), median(&mut off_rates));
    println!(
        "backend  events  batch  concurrency  duplicates  on_events_per_s  off_events_per_s  ratio"
    );
    println!(
        "{:<8} {:<7} {:<6} {:<12} {:<11} {:<16.0} {:<17.0} {:.3}",
        bench.store.backend_name(),
        args.events,
        args.batch,
        args.concurrency,
        args.duplicate_ratio,
        on,
        off,
        on / off
    );
    Ok(())
}

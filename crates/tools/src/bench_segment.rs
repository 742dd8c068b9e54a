//! `traqlyte bench segment`: `POST /v1/batch` (Segment's API, write-key auth, the
//! `segment.message` identity) against `POST /events/{contract}/batch` (the native batch
//! route) in the same run, same concurrency, same events, the same share of retries.
//!
//! Each distinct event is one checkout; on the Segment side it is a track call with its
//! own `messageId` and the checkout as `properties`. A retry repeats an earlier event
//! with new transport fields: a later `sentAt` (and `attempt`) on both sides.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};
use traqlyte_identity::Contract;
use traqlyte_store::{SourceName, Store, TenantId};

use crate::bench::{
    bench_contract, bench_tenant_name, generate_events, http_round, median, run_concurrently,
    start, with_cpu,
};

/// Options of `bench segment`.
#[derive(Args)]
pub struct SegmentArgs {
    /// Database to measure (a fresh file or database is best).
    #[arg(long)]
    database_url: String,
    /// Events per round and path.
    #[arg(long, default_value_t = 50_000)]
    events: usize,
    /// Events per batch (a Segment batch must stay under 500 KB: about 1,000 of these).
    #[arg(long, default_value_t = 500)]
    batch: usize,
    /// Concurrent connections.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Share of events that are retries of an earlier event (new transport fields).
    #[arg(long, default_value_t = 0.2)]
    duplicate_ratio: f64,
    /// Rounds; each alternates which path goes first, medians are reported.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

/// The native events as Segment track calls: the checkout's `order_id` names the message.
fn segment_bodies(events: &[Value], batch: usize) -> Vec<String> {
    events
        .chunks(batch)
        .map(|chunk| {
            let messages: Vec<Value> = chunk
                .iter()
                .map(|e| {
                    json!({
                        "type": "track", "event": "Checkout Completed",
                        "messageId": e["order_id"], "userId": e["merchant_id"],
                        "properties": {"order_id": e["order_id"], "amount": e["amount"], "items": e["items"], "params": e["params"], "note": e["note"]},
                        "timestamp": e["occurred_at"], "sentAt": e["sent_at"],
                        "context": {"library": {"name": "bench", "version": e["attempt"].to_string()}}
                    })
                })
                .collect();
            json!({"batch": messages}).to_string()
        })
        .collect()
}

/// Posts every Segment batch with the write key as HTTP Basic user.
async fn segment_round(
    client: &reqwest::Client,
    address: &str,
    write_key: &str,
    bodies: Arc<Vec<String>>,
    concurrency: usize,
) -> Result<Duration> {
    let (client, url, key) = (
        client.clone(),
        format!("{address}/v1/batch"),
        write_key.to_string(),
    );
    run_concurrently(bodies.len(), concurrency, move |index| {
        let request = client
            .post(&url)
            .basic_auth(&key, Some(""))
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

/// Measures both paths `rounds` times and prints the medians and their ratio.
pub async fn segment(args: SegmentArgs) -> Result<()> {
    let bench = start(&args.database_url, args.concurrency).await?;
    let contract =
        Contract::from_json(&bench_contract()).map_err(|e| anyhow::anyhow!("{}", e.message))?;
    let events = generate_events(args.events, args.duplicate_ratio);
    let distinct = events
        .iter()
        .map(|e| e["order_id"].to_string())
        .collect::<std::collections::HashSet<_>>()
        .len() as i64;
    let native: Arc<Vec<String>> = Arc::new(
        events
            .chunks(args.batch)
            .map(|c| Value::Array(c.to_vec()).to_string())
            .collect(),
    );
    let segment_bodies = Arc::new(segment_bodies(&events, args.batch));
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .build()?;
    let (mut native_rates, mut segment_rates) = (Vec::new(), Vec::new());
    for round in 0..args.rounds.max(1) {
        let (native_tenant, key) = bench
            .store
            .create_tenant(&bench_tenant_name("bench native")?)
            .await?;
        bench
            .store
            .register_contract(&native_tenant, &contract)
            .await?;
        let (segment_tenant, _) = bench
            .store
            .create_tenant(&bench_tenant_name("bench segment")?)
            .await?;
        let name = SourceName::parse("bench").map_err(anyhow::Error::msg)?;
        let (_, write_key) = bench.store.create_source(&segment_tenant, &name).await?;
        let native_run = || {
            http_round(
                &client,
                &bench.address,
                key.expose(),
                native.clone(),
                args.concurrency,
            )
        };
        let segment_run = || {
            segment_round(
                &client,
                &bench.address,
                write_key.expose(),
                segment_bodies.clone(),
                args.concurrency,
            )
        };
        let ((native_time, native_cpu), (segment_time, segment_cpu)) = if round % 2 == 0 {
            (
                with_cpu(native_run()).await?,
                with_cpu(segment_run()).await?,
            )
        } else {
            let segment = with_cpu(segment_run()).await?;
            (with_cpu(native_run()).await?, segment)
        };
        check(
            &bench.store,
            &native_tenant,
            "checkout_completed",
            distinct,
            args.events,
        )
        .await?;
        check(
            &bench.store,
            &segment_tenant,
            "segment.message",
            distinct,
            args.events,
        )
        .await?;
        native_rates.push(args.events as f64 / native_time.as_secs_f64());
        segment_rates.push(args.events as f64 / segment_time.as_secs_f64());
        eprintln!(
            "round {}: native {:.0} events/s, segment {:.0} events/s",
            round + 1,
            native_rates[round],
            segment_rates[round]
        );
        crate::cpu::report(round, "native", native_time, args.events, native_cpu);
        crate::cpu::report(round, "segment", segment_time, args.events, segment_cpu);
    }
    let (native, segment) = (median(&mut native_rates), median(&mut segment_rates));
    println!("backend  events  batch  concurrency  duplicates  native_events_per_s  segment_events_per_s  ratio");
    println!(
        "{:<8} {:<7} {:<6} {:<12} {:<11} {:<20.0} {:<21.0} {:.2}",
        bench.store.backend_name(),
        args.events,
        args.batch,
        args.concurrency,
        args.duplicate_ratio,
        native,
        segment,
        segment / native
    );
    Ok(())
}

/// Each distinct event stored once, every other delivery counted as a duplicate.
async fn check(
    store: &Store,
    tenant: &TenantId,
    contract: &str,
    distinct: i64,
    sent: usize,
) -> Result<()> {
    let stats = store.stats(tenant).await.context("read stats")?;
    let row = stats
        .iter()
        .find(|s| s.contract == contract)
        .with_context(|| format!("no stats for {contract}"))?;
    if row.stored != distinct || row.stored + row.duplicates != sent as i64 || row.collisions != 0 {
        bail!(
            "{contract}: stored {} duplicates {} collisions {}, expected {distinct} stored of {sent}",
            row.stored,
            row.duplicates,
            row.collisions
        );
    }
    Ok(())
}

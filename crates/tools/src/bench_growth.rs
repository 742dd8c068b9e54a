//! `traqlyte bench growth`: write throughput as the events table grows, with time
//! partitions and a bounded horizon, beside the same rows in one unpartitioned table.
//!
//! Each slice of events is one simulated day: its events occur on that day, and before
//! it the partitions are maintained with the clock on that day, so the days that leave
//! the horizon are detached as they would be in production. Slices alternate between
//! the partitioned `events` and the unpartitioned `bench_events_flat` (PostgreSQL), so
//! both see the same machine at the same minute. Rows go through the raw batched insert
//! (`Store::raw_insert_events`): the store's cost, not the HTTP path's.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use traqlyte_identity::{sha256_hex, Contract, EventId, Fingerprint, Identified};
use traqlyte_store::{DedupeHorizon, NewEvent, Store, StoreConfig, TenantId};

use crate::bench::{bench_tenant_name, run_concurrently};

/// Microseconds in a day.
const DAY_US: i64 = 86_400_000_000;

/// Options of `bench growth`.
#[derive(Args)]
pub struct GrowthArgs {
    /// The database to fill (use a fresh one): PostgreSQL for partitions and the
    /// unpartitioned contrast, SQLite for its one table alone.
    #[arg(long)]
    database_url: String,
    /// Events in all.
    #[arg(long, default_value_t = 20_000_000)]
    events: usize,
    /// Events a slice (one simulated day); throughput is reported per slice.
    #[arg(long, default_value_t = 2_000_000)]
    slice_events: usize,
    /// Events a batch (one insert statement, one transaction).
    #[arg(long, default_value_t = 1_000)]
    batch_events: usize,
    /// Concurrent batches.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// The dedupe horizon the partitions are maintained with, in days (slices).
    #[arg(long, default_value_t = 3)]
    horizon_days: u32,
    /// Skip the unpartitioned contrast.
    #[arg(long)]
    no_flat: bool,
}

/// One slice's figures.
struct Slice {
    partitioned: f64,
    flat: Option<f64>,
    live_index_bytes: (i64, i64),
}

/// Runs the benchmark and prints one line a slice, then the last ÷ first ratios.
pub async fn growth(args: GrowthArgs) -> Result<()> {
    let mut config = StoreConfig::new(&args.database_url);
    config.pool_connections_max = (args.concurrency as u32 * 2).max(4);
    let store = Store::connect(&config).await.context("connect")?;
    store.migrate().await.context("migrate")?;
    let flat = !args.no_flat && store.backend_name() == "postgres";
    if flat {
        store.bench_flat_reset().await?;
    }
    let (tenant, _) = store.create_tenant(&bench_tenant_name("growth")?).await?;
    let contract = Arc::new(Contract::from_json(&serde_json::json!({
        "name": "growth", "version": 1, "fields": [{"pointer": "/order", "required": true}],
        "occurred_at": "/at"
    }))?);
    let horizon = DedupeHorizon::new(args.horizon_days).context("--horizon-days 1–3650")?;
    let start_us = traqlyte_store::now_us();
    let slices = args.events.div_ceil(args.slice_events.max(1));
    println!("slice,events_total,partitioned_events_per_s,flat_events_per_s,live_index_mb_partitioned,live_index_mb_flat");
    let mut figures = Vec::with_capacity(slices);
    for slice in 0..slices {
        let day_us = start_us + slice as i64 * DAY_US;
        store.maintain_partitions(&horizon, day_us).await?;
        let shape = SliceShape {
            slice,
            events: args.slice_events,
            batch: args.batch_events.max(1),
            day_us,
        };
        let partitioned = shape
            .insert(&store, &tenant, &contract, args.concurrency, false)
            .await?;
        let flat_rate = match flat {
            true => Some(
                shape
                    .insert(&store, &tenant, &contract, args.concurrency, true)
                    .await?,
            ),
            false => None,
        };
        let live_index_bytes = store.bench_live_index_bytes().await?;
        let figure = Slice {
            partitioned,
            flat: flat_rate,
            live_index_bytes,
        };
        println!(
            "{},{},{:.0},{},{:.1},{:.1}",
            slice + 1,
            (slice + 1) * args.slice_events,
            figure.partitioned,
            figure.flat.map_or("-".to_string(), |f| format!("{f:.0}")),
            figure.live_index_bytes.0 as f64 / 1e6,
            figure.live_index_bytes.1 as f64 / 1e6
        );
        figures.push(figure);
    }
    if let (Some(first), Some(last)) = (figures.first(), figures.last()) {
        println!(
            "last/first slice: partitioned {:.2}, flat {}",
            last.partitioned / first.partitioned,
            match (first.flat, last.flat) {
                (Some(a), Some(b)) => format!("{:.2}", b / a),
                _ => "-".to_string(),
            }
        );
    }
    Ok(())
}

/// The events of one slice: all on its day, ids unique across slices.
struct SliceShape {
    slice: usize,
    events: usize,
    batch: usize,
    day_us: i64,
}

impl SliceShape {
    /// Inserts the slice's events (into `bench_events_flat` when `flat`); events/s.
    async fn insert(
        &self,
        store: &Store,
        tenant: &TenantId,
        contract: &Arc<Contract>,
        concurrency: usize,
        flat: bool,
    ) -> Result<f64> {
        let batches = self.events.div_ceil(self.batch);
        let (slice, batch, events, day_us) = (self.slice, self.batch, self.events, self.day_us);
        let (store, tenant, contract) = (store.clone(), tenant.clone(), contract.clone());
        let elapsed: Duration = run_concurrently(batches, concurrency, move |index| {
            let (store, tenant, contract) = (store.clone(), tenant.clone(), contract.clone());
            async move {
                let first = index * batch;
                let rows = (first..(first + batch).min(events))
                    .map(|i| synthetic_event(slice, i, day_us))
                    .collect::<Result<Vec<_>>>()?;
                if flat {
                    store.raw_insert_flat(&tenant, &contract, &rows).await?;
                } else {
                    store.raw_insert_events(&tenant, &contract, &rows).await?;
                }
                Ok(())
            }
        })
        .await?;
        Ok(self.events as f64 / elapsed.as_secs_f64().max(1e-9))
    }
}

/// An identified event without the identification's cost: the id and fingerprint are
/// SHA-256 of the slice and index (random-looking keys, like real ids), the payload small.
fn synthetic_event(slice: usize, index: usize, day_us: i64) -> Result<NewEvent> {
    let payload = format!("{{\"order\":\"{slice}-{index}\"}}");
    let event_id = EventId::parse(&sha256_hex(format!("growth\n{slice}\n{index}").as_bytes()))
        .context("a generated id")?;
    let fingerprint = Fingerprint::parse(&sha256_hex(payload.as_bytes())).context("fingerprint")?;
    Ok(NewEvent {
        identified: Identified {
            event_id,
            fingerprint,
            identity_bytes: Vec::new(),
            occurred_at_us: Some(day_us + (index as i64 % 3_600) * 1_000_000),
            retry_of: Vec::new(),
            may_precede_identify: false,
        },
        payload,
    })
}

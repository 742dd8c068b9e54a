//! Load generators of the hot path (issue 11): `bench outcomes` measures
//! `POST /outcomes/batch` against `POST /events/{contract}/batch` in the same run, the
//! same server, the same batch size and concurrency, rounds alternating which goes first;
//! `bench assignments` does the same for `/assignments/batch`; `bench single` measures
//! single requests with group commit on against off and the HTTP ceiling.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};
use traqlyte_identity::Contract;
use traqlyte_server::{GroupCommitConfig, ServerConfig};

use crate::bench::{
    bench_contract, bench_tenant_name, generate_events, http_round, median, run_concurrently,
    start, with_cpu,
};

/// Units per `POST /assignments/batch` when a bench sets up its assigned units.
const ASSIGN_BATCH: usize = 1_000;

/// Options of `bench outcomes`.
#[derive(Args)]
pub struct OutcomesArgs {
    /// Database to measure (a fresh file or database is best).
    #[arg(long)]
    database_url: String,
    /// Outcomes (and events) per round and path.
    #[arg(long, default_value_t = 100_000)]
    items: usize,
    /// Items per batch.
    #[arg(long, default_value_t = 1_000)]
    batch: usize,
    /// Concurrent connections.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Assigned units the outcomes are spread over.
    #[arg(long, default_value_t = 1_000)]
    units: usize,
    /// Share of items that are retries of an earlier one.
    #[arg(long, default_value_t = 0.2)]
    duplicate_ratio: f64,
    /// Rounds; each alternates which path goes first, medians are reported.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

/// Options of `bench assignments`.
#[derive(Args)]
pub struct AssignmentsArgs {
    /// Database to measure (a fresh file or database is best).
    #[arg(long)]
    database_url: String,
    /// New units (and events) per round and path.
    #[arg(long, default_value_t = 100_000)]
    items: usize,
    /// Units (and events) per batch.
    #[arg(long, default_value_t = 1_000)]
    batch: usize,
    /// Concurrent connections of the batch paths.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Single `POST /assignments` requests per round (new units), and their connections.
    #[arg(long, default_value_t = 10_000)]
    singles: usize,
    /// Concurrent connections of the single requests.
    #[arg(long, default_value_t = 64)]
    single_concurrency: usize,
    /// Rounds; each alternates which path goes first, medians are reported.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

/// `bench assignments`: `/assignments/batch` units/s and single `POST /assignments`/s
/// (new units) against `/events/{contract}/batch` events/s, same run.
pub(crate) async fn assignments(args: AssignmentsArgs) -> Result<()> {
    let bench = start(
        &args.database_url,
        args.single_concurrency.max(args.concurrency),
    )
    .await?;
    let contract =
        Contract::from_json(&bench_contract()).map_err(|e| anyhow::anyhow!("{}", e.message))?;
    let events = generate_events(args.items, 0.0);
    let event_bodies: Arc<Vec<String>> = Arc::new(
        events
            .chunks(args.batch)
            .map(|c| Value::Array(c.to_vec()).to_string())
            .collect(),
    );
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.single_concurrency.max(args.concurrency))
        .build()?;
    let (mut batch_rates, mut single_rates, mut event_rates) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..args.rounds.max(1) {
        let (tenant, key) = bench
            .store
            .create_tenant(&bench_tenant_name("bench assignments")?)
            .await?;
        bench.store.register_contract(&tenant, &contract).await?;
        let api = Api {
            client: client.clone(),
            address: bench.address.clone(),
            key: key.expose().to_string(),
        };
        let campaign = api.campaign().await?;
        let unit_batches: Arc<Vec<String>> = Arc::new(
            (0..args.items)
                .collect::<Vec<usize>>()
                .chunks(args.batch.max(1))
                .map(|c| {
                    let items: Vec<Value> = c
                        .iter()
                        .map(|u| json!({"campaign_id": campaign, "unit_id": format!("batch-{u}")}))
                        .collect();
                    Value::Array(items).to_string()
                })
                .collect(),
        );
        let event_round = || {
            http_round(
                &client,
                &bench.address,
                key.expose(),
                event_bodies.clone(),
                args.concurrency,
            )
        };
        let event_first = round % 2 == 1;
        let event_time = if event_first {
            Some(event_round().await?)
        } else {
            None
        };
        let batch_time = api
            .assignment_batches(unit_batches, args.concurrency)
            .await?;
        let single_time = api
            .single_assignments(&campaign, args.singles, args.single_concurrency)
            .await?;
        let event_time = match event_time {
            Some(time) => time,
            None => event_round().await?,
        };
        batch_rates.push(args.items as f64 / batch_time.as_secs_f64());
        single_rates.push(args.singles as f64 / single_time.as_secs_f64());
        event_rates.push(args.items as f64 / event_time.as_secs_f64());
        eprintln!(
            "round {}: batch {:.0} units/s, single {:.0}/s, events {:.0}/s",
            round + 1,
            batch_rates[round],
            single_rates[round],
            event_rates[round]
        );
    }
    let (batch, single, events) = (
        median(&mut batch_rates),
        median(&mut single_rates),
        median(&mut event_rates),
    );
    println!("backend  units   batch  concurrency  batch_units_per_s  events_per_s  ratio  singles_per_s ({} connections)", args.single_concurrency);
    println!(
        "{:<8} {:<7} {:<6} {:<12} {:<18.0} {:<13.0} {:<6.2} {:.0}",
        bench.store.backend_name(),
        args.items,
        args.batch,
        args.concurrency,
        batch,
        events,
        batch / events,
        single
    );
    Ok(())
}

/// `bench outcomes`: prints outcomes/s, events/s and their ratio (medians of the rounds).
pub(crate) async fn outcomes(args: OutcomesArgs) -> Result<()> {
    let bench = start(&args.database_url, args.concurrency).await?;
    let contract =
        Contract::from_json(&bench_contract()).map_err(|e| anyhow::anyhow!("{}", e.message))?;
    let events = generate_events(args.items, args.duplicate_ratio);
    let event_bodies: Arc<Vec<String>> = Arc::new(
        events
            .chunks(args.batch)
            .map(|c| Value::Array(c.to_vec()).to_string())
            .collect(),
    );
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .build()?;
    let (mut outcome_rates, mut event_rates) = (Vec::new(), Vec::new());
    for round in 0..args.rounds.max(1) {
        let (tenant, key) = bench
            .store
            .create_tenant(&bench_tenant_name("bench outcomes")?)
            .await?;
        bench.store.register_contract(&tenant, &contract).await?;
        let api = Api {
            client: client.clone(),
            address: bench.address.clone(),
            key: key.expose().to_string(),
        };
        let assignments = api.assign_units(args.units, args.concurrency).await?;
        let outcome_bodies = Arc::new(outcome_batches(&assignments, &args));
        // The outcome side's time includes folding the per-unit sums its batches appended
        // (`Store::fold_unit_metrics`): deferred work of the outcomes, never left to run in
        // the background during the events side's time.
        let outcome_round = || async {
            let posted = api
                .outcome_round(outcome_bodies.clone(), args.concurrency)
                .await?;
            let started = Instant::now();
            let moved = bench.store.fold_unit_metrics().await?;
            let folded = started.elapsed();
            eprintln!(
                "outcomes posted in {:.2} s, then {moved} appended per-unit rows folded in {:.2} s",
                posted.as_secs_f64(),
                folded.as_secs_f64()
            );
            Ok::<Duration, anyhow::Error>(posted + folded)
        };
        let event_round = || {
            http_round(
                &client,
                &bench.address,
                key.expose(),
                event_bodies.clone(),
                args.concurrency,
            )
        };
        let ((outcome_time, outcome_cpu), (event_time, event_cpu)) = if round % 2 == 0 {
            (
                with_cpu(outcome_round()).await?,
                with_cpu(event_round()).await?,
            )
        } else {
            let events = with_cpu(event_round()).await?;
            (with_cpu(outcome_round()).await?, events)
        };
        crate::cpu::report(round, "outcome", outcome_time, args.items, outcome_cpu);
        crate::cpu::report(round, "event", event_time, args.items, event_cpu);
        outcome_rates.push(args.items as f64 / outcome_time.as_secs_f64());
        event_rates.push(args.items as f64 / event_time.as_secs_f64());
        eprintln!(
            "round {}: outcomes {:.0}/s, events {:.0}/s",
            round + 1,
            outcome_rates[round],
            event_rates[round]
        );
    }
    let (outcomes, events) = (median(&mut outcome_rates), median(&mut event_rates));
    println!(
        "backend  items   batch  concurrency  duplicates  outcomes_per_s  events_per_s  ratio"
    );
    println!(
        "{:<8} {:<7} {:<6} {:<12} {:<11} {:<15.0} {:<13.0} {:.2}",
        bench.store.backend_name(),
        args.items,
        args.batch,
        args.concurrency,
        args.duplicate_ratio,
        outcomes,
        events,
        outcomes / events
    );
    Ok(())
}

/// `items` outcome bodies over the assignments, `duplicate_ratio` of them resent, cut in
/// batches. Deterministic, so every round and run sends the same outcomes.
fn outcome_batches(assignments: &[String], args: &OutcomesArgs) -> Vec<String> {
    let mut state: u64 = 0x6f75_7463_6f6d_6573;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        state >> 11
    };
    let occurred_at = traqlyte_identity::format_rfc3339_micros(traqlyte_store::now_us());
    let mut items: Vec<Value> = Vec::with_capacity(args.items);
    for index in 0..args.items {
        let resend = (next() % 1_000) as f64 / 1_000.0 < args.duplicate_ratio;
        if index > 0 && resend {
            let earlier = items[(next() as usize) % index].clone();
            items.push(earlier);
            continue;
        }
        let assignment = &assignments[index % assignments.len().max(1)];
        items.push(json!({
            "assignment_id": assignment, "dedupe_key": format!("bench:order_{index}"),
            "metric": "revenue", "value": (next() % 10_000) as f64 / 100.0, "occurred_at": occurred_at,
        }));
    }
    items
        .chunks(args.batch.max(1))
        .map(|c| Value::Array(c.to_vec()).to_string())
        .collect()
}

/// The bench's HTTP client for one tenant.
#[derive(Clone)]
struct Api {
    client: reqwest::Client,
    address: String,
    key: String,
}

impl Api {
    async fn post(&self, path: &str, body: String) -> Result<Value> {
        let response = self
            .client
            .post(format!("{}{path}", self.address))
            .bearer_auth(&self.key)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await?;
        let status = response.status();
        let text = response.text().await?;
        if !status.is_success() {
            bail!("{path} answered {status}: {text}");
        }
        serde_json::from_str(&text).with_context(|| format!("{path} answered {text}"))
    }

    /// A published campaign; returns its id.
    async fn campaign(&self) -> Result<String> {
        let definition = json!({
            "key": "bench", "name": "bench",
            "arms": [{"key": "control", "weight": 1}, {"key": "treatment", "weight": 1}],
            "metrics": [{"name": "revenue", "kind": "sum", "window_hours": 168}],
        });
        let created = self.post("/campaigns", definition.to_string()).await?;
        let id = created["id"].as_str().context("campaign id")?.to_string();
        self.post(&format!("/campaigns/{id}/publish"), "{}".into())
            .await?;
        Ok(id)
    }

    /// Posts every batch of units; each must assign every unit.
    async fn assignment_batches(
        &self,
        bodies: Arc<Vec<String>>,
        concurrency: usize,
    ) -> Result<Duration> {
        let api = self.clone();
        run_concurrently(bodies.len(), concurrency, move |index| {
            let (api, bodies) = (api.clone(), bodies.clone());
            async move {
                let answer = api
                    .post("/assignments/batch", bodies[index].clone())
                    .await?;
                if answer["rejected"] != 0 {
                    bail!("an assignment batch rejected {} units", answer["rejected"]);
                }
                Ok(())
            }
        })
        .await
    }

    /// `count` single `POST /assignments` of new units.
    async fn single_assignments(
        &self,
        campaign: &str,
        count: usize,
        concurrency: usize,
    ) -> Result<Duration> {
        let (api, campaign) = (self.clone(), campaign.to_string());
        run_concurrently(count, concurrency, move |index| {
            let (api, campaign) = (api.clone(), campaign.clone());
            async move {
                let body = json!({"campaign_id": campaign, "unit_id": format!("single-{index}")});
                api.post("/assignments", body.to_string()).await.map(drop)
            }
        })
        .await
    }

    /// A published campaign with `units` units assigned; returns their assignment ids.
    async fn assign_units(&self, units: usize, concurrency: usize) -> Result<Vec<String>> {
        let id = self.campaign().await?;
        let chunks: Vec<std::ops::Range<usize>> = (0..units)
            .step_by(ASSIGN_BATCH)
            .map(|start| start..(start + ASSIGN_BATCH).min(units))
            .collect();
        let chunks = Arc::new(chunks);
        let ids = Arc::new(std::sync::Mutex::new(vec![String::new(); units]));
        let (api, out) = (self.clone(), ids.clone());
        run_concurrently(chunks.len(), concurrency, move |index| {
            let (api, out, id, chunks) = (api.clone(), out.clone(), id.clone(), chunks.clone());
            async move {
                let range = chunks[index].clone();
                let body: Vec<Value> = range
                    .clone()
                    .map(|unit| json!({"campaign_id": id, "unit_id": format!("unit-{unit}")}))
                    .collect();
                let answer = api
                    .post("/assignments/batch", Value::Array(body).to_string())
                    .await?;
                let results = answer["results"].as_array().context("batch results")?;
                if results.len() != range.len() {
                    bail!(
                        "an assignment batch answered {} of {} units",
                        results.len(),
                        range.len()
                    );
                }
                let mut found = Vec::with_capacity(results.len());
                for result in results {
                    let assignment = result["assignment"]["assignment_id"]
                        .as_str()
                        .with_context(|| format!("assignment id in {result}"))?;
                    found.push(assignment.to_string());
                }
                if let Ok(mut ids) = out.lock() {
                    for (unit, assignment) in range.zip(found) {
                        ids[unit] = assignment;
                    }
                }
                Ok(())
            }
        })
        .await?;
        let ids = ids.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.clone();
        Ok(ids)
    }

    /// Posts every batch; each must have no rejected item and no collision.
    async fn outcome_round(
        &self,
        bodies: Arc<Vec<String>>,
        concurrency: usize,
    ) -> Result<Duration> {
        let api = self.clone();
        run_concurrently(bodies.len(), concurrency, move |index| {
            let (api, bodies) = (api.clone(), bodies.clone());
            async move {
                let answer = api.post("/outcomes/batch", bodies[index].clone()).await?;
                if answer["rejected"] != 0 || answer["collisions"] != 0 {
                    bail!(
                        "an outcome batch was not clean: rejected {}, collisions {}",
                        answer["rejected"],
                        answer["collisions"]
                    );
                }
                Ok(())
            }
        })
        .await
    }
}

/// Options of `bench single`.
#[derive(Args)]
pub struct SingleArgs {
    /// Database to measure (a fresh file or database is best).
    #[arg(long)]
    database_url: String,
    /// Single requests per round, path and mode.
    #[arg(long, default_value_t = 20_000)]
    requests: usize,
    /// Concurrent connections.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Database connections of each server's pool (`serve`'s default).
    #[arg(long, default_value_t = 16)]
    pool_connections_max: u32,
    /// `--group-commit-wait-us` of the group-commit server.
    #[arg(long, default_value_t = GroupCommitConfig::default().wait_us)]
    group_commit_wait_us: u64,
    /// `--group-commit-max` of the group-commit server.
    #[arg(long, default_value_t = GroupCommitConfig::default().batch_max)]
    group_commit_max: usize,
    /// Most batch transactions of one kind open at once in the group-commit server (with 1,
    /// a batch never waits: it goes with what queued while the one before was written).
    #[arg(long, default_value_t = GroupCommitConfig::default().flushes_max)]
    group_commit_flushes: usize,
    /// Rounds; each rotates which mode goes first, medians are reported.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

/// An in-process server with its own pool and group-commit setting, `POST /bench/ceiling`
/// on.
struct Served {
    store: traqlyte_store::Store,
    address: String,
    _shutdown: tokio::sync::oneshot::Sender<()>,
}

async fn serve_with(args: &SingleArgs, group_commit: GroupCommitConfig) -> Result<Served> {
    let mut config = traqlyte_store::StoreConfig::new(&args.database_url);
    config.pool_connections_max = args.pool_connections_max;
    let store = traqlyte_store::Store::connect(&config)
        .await
        .context("connect")?;
    store.migrate().await.context("migrate")?;
    let (bound_tx, bound_rx) = tokio::sync::oneshot::channel();
    let (shutdown_tx, shutdown_rx) = tokio::sync::oneshot::channel::<()>();
    let server_config = ServerConfig {
        listen: "127.0.0.1:0".into(),
        group_commit,
        bench_ceiling_route: true,
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
    Ok(Served {
        store,
        address,
        _shutdown: shutdown_tx,
    })
}

/// A fresh tenant with the bench contract on `served`'s database, as an [`Api`].
async fn fresh_api(served: &Served, client: &reqwest::Client, what: &str) -> Result<Api> {
    let contract =
        Contract::from_json(&bench_contract()).map_err(|e| anyhow::anyhow!("{}", e.message))?;
    let (tenant, key) = served
        .store
        .create_tenant(&bench_tenant_name(what)?)
        .await?;
    served.store.register_contract(&tenant, &contract).await?;
    Ok(Api {
        client: client.clone(),
        address: served.address.clone(),
        key: key.expose().to_string(),
    })
}

/// Posts each body to `path` as one request, `concurrency` at a time; every answer must be
/// a 2xx.
async fn single_round(
    api: &Api,
    path: &str,
    bodies: Arc<Vec<String>>,
    concurrency: usize,
) -> Result<Duration> {
    let (api, path) = (api.clone(), path.to_string());
    run_concurrently(bodies.len(), concurrency, move |index| {
        let (api, path, bodies) = (api.clone(), path.clone(), bodies.clone());
        async move { api.post(&path, bodies[index].clone()).await.map(drop) }
    })
    .await
}

/// `bench single`: single `POST /events/{contract}` with group commit on, off, and the
/// HTTP ceiling (`POST /bench/ceiling`, the same bodies, no store work); single
/// `POST /api/v1/lineage` and new-unit `POST /assignments` on and off. Two in-process
/// servers over the same database, one with group commit and one without; each round
/// runs every pair back to back, rotating which goes first, on fresh tenants, after an
/// untimed warm-up of both servers.
pub(crate) async fn single(args: SingleArgs) -> Result<()> {
    let on = serve_with(
        &args,
        GroupCommitConfig {
            enabled: true,
            wait_us: args.group_commit_wait_us,
            batch_max: args.group_commit_max,
            flushes_max: args.group_commit_flushes,
            ..GroupCommitConfig::default()
        },
    )
    .await?;
    let off = serve_with(&args, GroupCommitConfig::disabled()).await?;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .build()?;
    let events: Arc<Vec<String>> = Arc::new(
        generate_events(args.requests, 0.0)
            .iter()
            .map(Value::to_string)
            .collect(),
    );
    let runs: Arc<Vec<String>> = Arc::new(
        (0..args.requests)
            .map(|run| crate::bench_lineage::generated_run_event(run, &[run + 1], run).to_string())
            .collect(),
    );
    // Untimed: each server's pool and prepared statements and the client's connections
    // are opened before the first measured side, whichever side that is.
    let warm_up: Arc<Vec<String>> =
        Arc::new(events.iter().take(args.concurrency * 16).cloned().collect());
    for served in [&on, &off] {
        let api = fresh_api(served, &client, "bench single warm-up").await?;
        let path = "/events/checkout_completed";
        single_round(&api, path, warm_up.clone(), args.concurrency).await?;
    }
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); 7];
    for round in 0..args.rounds.max(1) {
        let mut measured = [0.0; 7];
        // Events: on, off, ceiling, rotated.
        for step in 0..3 {
            let mode = (round + step) % 3;
            let served = if mode == 1 { &off } else { &on };
            let api = fresh_api(served, &client, "bench single").await?;
            let path = if mode == 2 {
                "/bench/ceiling"
            } else {
                "/events/checkout_completed"
            };
            let (time, cpu) =
                with_cpu(single_round(&api, path, events.clone(), args.concurrency)).await?;
            measured[mode] = args.requests as f64 / time.as_secs_f64();
            let side = ["events on", "events off", "ceiling"][mode];
            crate::cpu::report(round, side, time, args.requests, cpu);
        }
        // Run events, then assignments: on and off, alternating which goes first.
        for step in 0..2 {
            let with = (round + step) % 2 == 0;
            let served = if with { &on } else { &off };
            let api = fresh_api(served, &client, "bench single lineage").await?;
            let side = single_round(&api, "/api/v1/lineage", runs.clone(), args.concurrency);
            let (time, cpu) = with_cpu(side).await?;
            measured[if with { 3 } else { 4 }] = args.requests as f64 / time.as_secs_f64();
            let side = if with { "lineage on" } else { "lineage off" };
            crate::cpu::report(round, side, time, args.requests, cpu);
        }
        for step in 0..2 {
            let with = (round + step) % 2 == 1;
            let served = if with { &on } else { &off };
            let api = fresh_api(served, &client, "bench single assignments").await?;
            let campaign = api.campaign().await?;
            let side = api.single_assignments(&campaign, args.requests, args.concurrency);
            let (time, cpu) = with_cpu(side).await?;
            measured[if with { 5 } else { 6 }] = args.requests as f64 / time.as_secs_f64();
            let side = if with {
                "assignments on"
            } else {
                "assignments off"
            };
            crate::cpu::report(round, side, time, args.requests, cpu);
        }
        eprintln!(
            "round {}: events on {:.0}/s off {:.0}/s ceiling {:.0}/s; lineage on {:.0}/s off {:.0}/s; assignments on {:.0}/s off {:.0}/s",
            round + 1,
            measured[0], measured[1], measured[2], measured[3], measured[4], measured[5], measured[6]
        );
        for (all, one) in rates.iter_mut().zip(measured) {
            all.push(one);
        }
    }
    let m: Vec<f64> = rates.iter_mut().map(|r| median(r)).collect();
    println!(
        "backend: {}, {} requests per path, {} connections, medians of {} rounds",
        on.store.backend_name(),
        args.requests,
        args.concurrency,
        args.rounds.max(1)
    );
    println!(
        "path                          on_per_s  off_per_s  on/off  ceiling_per_s  on/ceiling"
    );
    println!(
        "POST /events/{{contract}}        {:<9.0} {:<10.0} {:<7.2} {:<14.0} {:.2}",
        m[0],
        m[1],
        m[0] / m[1],
        m[2],
        m[0] / m[2]
    );
    println!(
        "POST /api/v1/lineage          {:<9.0} {:<10.0} {:.2}",
        m[3],
        m[4],
        m[3] / m[4]
    );
    println!(
        "POST /assignments (new unit)  {:<9.0} {:<10.0} {:.2}",
        m[5],
        m[6],
        m[5] / m[6]
    );
    Ok(())
}

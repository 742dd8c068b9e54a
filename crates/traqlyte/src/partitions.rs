//! `traqlyte partitions status|maintain`: the time partitions of the events table on
//! PostgreSQL (docs/scaling.md, "Time partitions"), and the `--dedupe-horizon-days` flag
//! that `serve`, `backfill` and `partitions maintain` share.

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use traqlyte_store::partitions::day_text;
use traqlyte_store::{DedupeHorizon, LateEvents, PartitionInfo};

use crate::DbArgs;

/// The dedupe horizon, as every command that needs it takes it.
#[derive(Args, Clone, Copy)]
pub(crate) struct HorizonArgs {
    /// Days of occurrence time inside which the live path (`serve`, `consume nats`)
    /// suppresses duplicates by constraint (1–3650): there older events are refused (422
    /// outside_horizon) and, on PostgreSQL, their partitions detached (kept, readable).
    /// `backfill` creates the horizon's partitions, never detaches one, and reconciles
    /// older events against their originals. Give every process of one database the same
    /// value.
    #[arg(long, env = "TRAQLYTE_DEDUPE_HORIZON_DAYS", hide_env_values = true, default_value = "14", value_parser = parse_horizon)]
    pub(crate) dedupe_horizon_days: DedupeHorizon,
}

/// What the live path (`serve`, `consume nats`) does with an event older than the
/// horizon.
#[derive(Args, Clone, Copy)]
pub(crate) struct LateEventsArgs {
    /// An event older than the horizon: refused (HTTP: 422 outside_horizon; NATS: a dead
    /// letter) or reconciled like a backfill (up to 366 days past the horizon; older
    /// ones are refused either way).
    #[arg(
        long,
        env = "TRAQLYTE_LATE_EVENTS",
        hide_env_values = true,
        value_enum,
        default_value = "refuse"
    )]
    pub(crate) late_events: LateEventsArg,
}

/// What the live path does with an event older than the horizon.
#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum LateEventsArg {
    /// 422 outside_horizon, nothing written; load late events with `traqlyte backfill`.
    Refuse,
    /// Reconcile them against rows of any age, as a backfill does (slower: see
    /// docs/scaling.md).
    Reconcile,
}

impl From<LateEventsArg> for LateEvents {
    fn from(arg: LateEventsArg) -> LateEvents {
        match arg {
            LateEventsArg::Refuse => LateEvents::Refuse,
            LateEventsArg::Reconcile => LateEvents::Reconcile,
        }
    }
}

fn parse_horizon(text: &str) -> Result<DedupeHorizon, String> {
    text.parse::<u32>()
        .ok()
        .and_then(DedupeHorizon::new)
        .ok_or_else(|| format!("a number of days from 1 to {}", DedupeHorizon::DAYS_MAX))
}

/// `traqlyte partitions …`.
#[derive(Subcommand)]
pub(crate) enum PartitionsCommand {
    /// Each partition of the events table: its days, rows, index bytes, attached or
    /// detached (PostgreSQL; SQLite keeps one table and lists none).
    Status {
        #[command(flatten)]
        db: DbArgs,
        /// Print one JSON array.
        #[arg(long)]
        json: bool,
    },
    /// Create the coming days' partitions and detach those that left the horizon (what
    /// `serve` does every ten minutes).
    Maintain {
        #[command(flatten)]
        db: DbArgs,
        /// The horizon `serve` runs with (required, no default: a shorter one detaches
        /// days that server still takes live writes for, and a longer horizon later never
        /// re-attaches them).
        #[arg(long, env = "TRAQLYTE_DEDUPE_HORIZON_DAYS", hide_env_values = true, required = true, value_parser = parse_horizon)]
        dedupe_horizon_days: DedupeHorizon,
        /// Print the days created and detached as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs the command.
pub(crate) async fn run(command: PartitionsCommand) -> Result<()> {
    match command {
        PartitionsCommand::Status { db, json } => {
            let store = crate::tenants::open_existing(&db).await?;
            let partitions = store.partitions().await.context("list partitions")?;
            if json {
                outln!("{}", serde_json::to_string(&partitions)?);
            } else {
                print_table(store.backend_name(), &partitions);
            }
        }
        PartitionsCommand::Maintain {
            db,
            dedupe_horizon_days,
            json,
        } => {
            let store = crate::tenants::open(&db).await?;
            let done = store
                .maintain_partitions(&dedupe_horizon_days, traqlyte_store::now_us())
                .await
                .context("maintain partitions")?;
            let days = |d: &[i32]| d.iter().map(|&day| day_text(day)).collect::<Vec<_>>();
            if json {
                /// The `--json` answer: the days (`YYYY-MM-DD`) created and detached.
                #[derive(serde::Serialize)]
                struct Done {
                    created: Vec<String>,
                    detached: Vec<String>,
                }
                let done = Done {
                    created: days(&done.create),
                    detached: days(&done.detach),
                };
                outln!("{}", serde_json::to_string(&done)?);
            } else {
                outln!(
                    "created {} partitions {:?}, detached {} {:?}",
                    done.create.len(),
                    days(&done.create),
                    done.detach.len(),
                    days(&done.detach)
                );
            }
        }
    }
    Ok(())
}

fn print_table(backend: &str, partitions: &[PartitionInfo]) {
    if partitions.is_empty() {
        outln!("{backend}: one events table, no partitions");
        return;
    }
    outln!(
        "{:<26} {:<10} {:<10} {:>12} {:>14}  state",
        "table",
        "from",
        "to",
        "rows",
        "index bytes"
    );
    for p in partitions {
        outln!(
            "{:<26} {:<10} {:<10} {:>12} {:>14}  {}",
            p.table,
            p.from_day.as_deref().unwrap_or("-"),
            p.to_day.as_deref().unwrap_or("-"),
            p.rows,
            p.index_bytes,
            if p.attached { "attached" } else { "detached" }
        );
    }
}

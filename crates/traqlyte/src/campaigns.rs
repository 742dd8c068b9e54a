//! `traqlyte campaign rebuild-sums`: recomputes a campaign's per-unit sums from its facts
//! (outcomes, their current values, and suppressed duplicates), the repair
//! docs/experiments.md names after a bulk load, or after corrections through a value so
//! large that the sums' doubles kept nothing of the small ones. Safe while the server
//! writes outcomes (`Store::rebuild_unit_metrics` locks the deltas' table against them on
//! PostgreSQL).

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use traqlyte_store::{CampaignId, MetricWindow};

use crate::DbArgs;

/// `traqlyte campaign …`.
#[derive(Subcommand)]
pub(crate) enum CampaignCommand {
    /// Recompute a campaign's per-unit sums (what its report reads) from its outcomes and
    /// duplicates.
    RebuildSums(RebuildArgs),
}

/// Options of `traqlyte campaign rebuild-sums`.
#[derive(Args)]
pub(crate) struct RebuildArgs {
    /// The campaign's id (`cmp_…`).
    campaign: String,
    /// The tenant's name (or id).
    #[arg(long)]
    tenant: String,
    #[command(flatten)]
    db: DbArgs,
}

/// Runs the command.
pub(crate) async fn run(command: CampaignCommand) -> Result<()> {
    let CampaignCommand::RebuildSums(args) = command;
    let store = crate::tenants::open_for_tenant(&args.db).await?;
    let tenant = crate::tenants::find(&store, &args.tenant).await?.tenant_id;
    let id = CampaignId::try_from(args.campaign.as_str())
        .map_err(|e| anyhow::anyhow!("campaign id {:?}: {e}", args.campaign))?;
    let campaign = store
        .campaign(&tenant, &id)
        .await?
        .with_context(|| format!("no campaign {:?} for this tenant", args.campaign))?;
    let metrics: Vec<MetricWindow> = campaign
        .metrics
        .iter()
        .map(|m| MetricWindow {
            metric: m.name.clone(),
            window_us: i64::from(m.window_hours) * 3_600_000_000,
        })
        .collect();
    store
        .rebuild_unit_metrics(&tenant, &id, &metrics)
        .await
        .context("rebuild the per-unit sums")?;
    outln!(
        "rebuilt the per-unit sums of campaign {} ({} metrics) from its outcomes and duplicates",
        id.as_str(),
        metrics.len()
    );
    Ok(())
}

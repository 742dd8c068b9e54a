//! `traqlyte scan semantic`: the semantic-duplicate scan of one contract of one tenant
//! (docs/semantic-scan.md). The grouping runs in the database, one statement per identity
//! field (`traqlyte_store::semantic`), so memory stays bounded on any table; a progress
//! bar names the field being grouped when stderr is a terminal. The result is printed and
//! stored, so `GET /ops/semantic-duplicates` shows it too.

use std::io::IsTerminal;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use traqlyte_identity::{format_rfc3339_micros, parse_rfc3339_micros, ContractName};
use traqlyte_store::{SemanticScan, SemanticScope};

use crate::DbArgs;

/// `traqlyte scan …`.
#[derive(Subcommand)]
pub(crate) enum ScanCommand {
    /// Find stored events with different ids whose content is otherwise the same, and
    /// name the identity field they differ in (a field that should not be identity).
    Semantic(SemanticArgs),
}

/// Options of `traqlyte scan semantic`.
#[derive(Args)]
pub(crate) struct SemanticArgs {
    /// The tenant's name (or id).
    #[arg(long)]
    tenant: String,
    /// The contract's name.
    #[arg(long)]
    contract: String,
    /// The contract version (default: the latest).
    #[arg(long)]
    version: Option<u32>,
    /// Only events received at or after this time (RFC 3339 with an offset).
    #[arg(long)]
    since: Option<String>,
    /// Print the result as one JSON line.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    db: DbArgs,
}

/// Runs the command.
pub(crate) async fn run(command: ScanCommand) -> Result<()> {
    let ScanCommand::Semantic(args) = command;
    let since_us = args
        .since
        .as_deref()
        .map(|text| {
            parse_rfc3339_micros(text).map_err(|e| anyhow::anyhow!("--since {text:?}: {e}"))
        })
        .transpose()?;
    let name = ContractName::parse(&args.contract)
        .map_err(|e| anyhow::anyhow!("--contract: {}", e.message))?;
    let store = crate::tenants::open_for_tenant(&args.db).await?;
    let tenant = crate::tenants::find(&store, &args.tenant).await?.tenant_id;
    let contract = store
        .contract(&tenant, &name, args.version)
        .await?
        .with_context(|| match args.version {
            Some(v) => format!(
                "no contract {:?} version {v} for this tenant",
                args.contract
            ),
            None => format!("no contract named {:?} for this tenant", args.contract),
        })?;
    let scope = SemanticScope {
        tenant: &tenant,
        contract: &contract,
        since_us,
    };
    let bar = progress_bar(contract.fields().count() as u64);
    let scan = store
        .semantic_scan(scope, traqlyte_store::now_us, |p| {
            bar.set_position(p.done as u64);
            if let Some(pointer) = p.pointer {
                let pointer = traqlyte_tools::printable(pointer);
                bar.set_message(format!("grouping without {pointer}"));
            }
        })
        .await
        .context("scan")?;
    bar.finish_and_clear();
    store
        .save_semantic_scan(&tenant, &scan)
        .await
        .context("store the scan's result")?;
    if args.json {
        outln!("{}", traqlyte_server::semantic_scan_json(scan));
    } else {
        let text = describe(&scan);
        outln!("{}", text.strip_suffix('\n').unwrap_or(&text));
    }
    Ok(())
}

fn progress_bar(fields: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(fields);
    if let Ok(style) = ProgressStyle::with_template("{spinner} field {pos}/{len} {msg} ({elapsed})")
    {
        bar.set_style(style);
    }
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    bar
}

/// The scan for people.
fn describe(scan: &SemanticScan) -> String {
    let mut out = format!(
        "contract {} version {}: {} events scanned{}, {} identity fields checked\n",
        scan.contract,
        scan.version,
        scan.events,
        scan.since_us
            .map(|s| format!(" (received since {})", format_rfc3339_micros(s)))
            .unwrap_or_default(),
        scan.fields_checked.len()
    );
    for skipped in &scan.fields_skipped {
        out.push_str(&format!(
            "  not checked: {} (not expressible as a SQLite JSON path)\n",
            traqlyte_tools::printable(skipped)
        ));
    }
    if scan.findings.is_empty() {
        out.push_str("no semantic duplicates: no events differ in one identity field only\n");
    }
    for f in &scan.findings {
        out.push_str(&format!(
            "SUSPECT {}: {} groups, {} events agree on everything else (transport aside) and differ in it only\n",
            traqlyte_tools::printable(&f.pointer), f.groups, f.events
        ));
        for g in &f.examples {
            out.push_str(&format!(
                "  e.g. {} events: {}\n",
                g.events,
                g.event_ids.join(", ")
            ));
        }
    }
    if !scan.findings.is_empty() {
        out.push_str(
            "act: register a new contract version without the suspect field (list it under \
             transport if it is delivery metadata); see docs/semantic-scan.md\n",
        );
    }
    out
}

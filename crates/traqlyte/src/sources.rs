//! `traqlyte source …`: the sources of the Segment-compatible API and their write keys,
//! straight on the database (no server needed). The write key goes to stdout alone (one
//! line), so `WRITE_KEY=$(traqlyte source create web --tenant acme)` works; listings are
//! tab-separated lines.

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use traqlyte_identity::format_rfc3339_micros;
use traqlyte_store::{SourceId, SourceInfo, SourceName, Store, TenantId, SOURCES_PAGE_MAX};

use crate::tenants::{find, open_for_tenant};
use crate::DbArgs;

#[derive(Subcommand)]
pub(crate) enum SourceCommand {
    /// Create a source; prints its new write key alone on stdout (shown once). Names are
    /// unique per tenant.
    Create {
        /// A name for people (e.g. `web`, `ios`).
        name: String,
        /// The tenant's name (or id).
        #[arg(long)]
        tenant: String,
        #[command(flatten)]
        db: DbArgs,
    },
    /// List a tenant's sources, one per line: id, name, key prefix, created at, `active`
    /// or `revoked <time>`, stored, duplicates, rejected (tab-separated).
    List {
        /// The tenant's name (or id).
        #[arg(long)]
        tenant: String,
        #[command(flatten)]
        db: DbArgs,
    },
    /// Revoke a source's write key: every server refuses it from its next request on.
    /// The source and its messages are kept.
    Revoke {
        /// The tenant's name (or id).
        #[arg(long)]
        tenant: String,
        /// The source's id (`src_…`) or name.
        source: String,
        #[command(flatten)]
        db: DbArgs,
    },
}

/// Runs a `source` subcommand.
pub(crate) async fn run(command: SourceCommand) -> Result<()> {
    match command {
        SourceCommand::Create { name, tenant, db } => {
            let name = SourceName::parse(&name).map_err(anyhow::Error::msg)?;
            let store = open_for_tenant(&db).await?;
            let tenant = find(&store, &tenant).await?;
            let (source, key) = store
                .create_source(&tenant.tenant_id, &name)
                .await
                .context("create the source")?;
            tracing::info!(tenant = %tenant.tenant_id, source = %source.source_id, "source created");
            outln!("{}", key.expose());
        }
        SourceCommand::List { tenant, db } => {
            let store = crate::tenants::open_existing(&db).await?;
            let tenant = find(&store, &tenant).await?;
            list_all(&store, &tenant.tenant_id).await?;
        }
        SourceCommand::Revoke { tenant, source, db } => {
            // A name is read as `create` read it (trimmed, in NFC), so the name typed for
            // one finds the source again; an id is taken as it is.
            let source = match (SourceId::parse(&source), SourceName::parse(&source)) {
                (None, Ok(name)) => name.as_str().to_owned(),
                _ => source,
            };
            let store = open_for_tenant(&db).await?;
            let tenant = find(&store, &tenant).await?;
            let Some(revoked) = store
                .revoke_source(&tenant.tenant_id, &source)
                .await
                .context("revoke the source")?
            else {
                bail!(
                    "tenant {:?} has no source {source:?}; `traqlyte source list --tenant {}` shows them",
                    tenant.name,
                    tenant.tenant_id
                );
            };
            tracing::info!(tenant = %tenant.tenant_id, source = %revoked.source_id, "source revoked");
            outln!("{}", line(&revoked));
        }
    }
    Ok(())
}

/// Prints every source of the tenant, a page at a time, each page after the last source
/// of the one before.
async fn list_all(store: &Store, tenant: &TenantId) -> Result<()> {
    let mut after: Option<SourceId> = None;
    loop {
        let Some((page, more)) = store
            .sources_page(tenant, after.as_ref(), SOURCES_PAGE_MAX)
            .await
            .context("list sources")?
        else {
            // Sources are never deleted, so the last one listed is still there.
            bail!("the source listed last vanished while listing; list again");
        };
        for source in &page {
            outln!("{}", line(source));
        }
        match page.last() {
            Some(last) if more => after = Some(last.source_id.clone()),
            _ => return Ok(()),
        }
    }
}

fn line(source: &SourceInfo) -> String {
    let state = match source.revoked_at_us {
        Some(at) => format!("revoked {}", format_rfc3339_micros(at)),
        None => "active".to_string(),
    };
    format!(
        "{}\t{}\ttlw_{}\t{}\t{state}\t{}\t{}\t{}",
        source.source_id,
        source.name,
        source.key_prefix,
        format_rfc3339_micros(source.created_at_us),
        source.inserted,
        source.duplicates,
        source.rejected
    )
}

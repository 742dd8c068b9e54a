//! `traqlyte tenant …` and `traqlyte key …`: tenants and their API keys, straight on the
//! database (no server needed), and the admin token `serve --admin-token-file` reads.
//!
//! Secrets go to stdout alone (one line), so `KEY=$(traqlyte key create --tenant acme)`
//! works; everything else a person reads is tab-separated lines.

use std::path::Path;

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use traqlyte_identity::format_rfc3339_micros;
use traqlyte_store::{ApiKeyInfo, KeySelector, Store, TenantName, TenantRecord};

use crate::{connect, DbArgs};

/// The shortest admin token accepted, in characters (e.g. `openssl rand -hex 32` gives 64).
const ADMIN_TOKEN_CHARS_MIN: usize = 32;

#[derive(Subcommand)]
pub(crate) enum TenantCommand {
    /// Create a tenant; prints its new API key alone on stdout (shown once). Names are
    /// unique.
    Create {
        /// A name for people.
        name: String,
        #[command(flatten)]
        db: DbArgs,
    },
    /// List tenants, one per line: id, name, created at, active keys (tab-separated).
    List {
        #[command(flatten)]
        db: DbArgs,
    },
}

#[derive(Subcommand)]
pub(crate) enum KeyCommand {
    /// Add an API key to a tenant; prints the key alone on stdout (shown once).
    Create {
        /// The tenant's name (or id).
        #[arg(long)]
        tenant: String,
        #[command(flatten)]
        db: DbArgs,
    },
    /// List a tenant's keys, oldest first, one per line: prefix, created at, and
    /// `active` or `revoked <time>` (tab-separated). Never the keys themselves.
    List {
        /// The tenant's name (or id).
        #[arg(long)]
        tenant: String,
        #[command(flatten)]
        db: DbArgs,
    },
    /// Revoke a key: every server refuses it from its next request on. The row is kept.
    Revoke {
        /// The tenant's name (or id).
        #[arg(long)]
        tenant: String,
        /// The key's prefix as listed (`tlk_1a2b3c4d`), or the whole key (the only way
        /// to name a key created before prefixes were stored).
        key_or_prefix: String,
        #[command(flatten)]
        db: DbArgs,
    },
}

/// Runs a `tenant` subcommand.
pub(crate) async fn run_tenant(command: TenantCommand) -> Result<()> {
    match command {
        TenantCommand::Create { name, db } => {
            let name = TenantName::parse(&name).map_err(anyhow::Error::msg)?;
            let store = open(&db).await?;
            let (tenant, key) = store
                .create_tenant(&name)
                .await
                .context("create the tenant")?;
            tracing::info!(tenant = %tenant, name = %name, "tenant created");
            outln!("{}", key.expose());
        }
        TenantCommand::List { db } => {
            let store = open_existing(&db).await?;
            let tenants = store.tenants().await.context("list tenants")?;
            if tenants.len() as i64 >= traqlyte_store::TENANTS_LIST_MAX {
                errln!(
                    "note: the listing stops at {} tenants (by name); there may be more",
                    traqlyte_store::TENANTS_LIST_MAX
                );
            }
            for tenant in tenants {
                outln!(
                    "{}\t{}\t{}\t{}",
                    tenant.tenant_id,
                    tenant.name,
                    format_rfc3339_micros(tenant.created_at_us),
                    tenant.active_keys
                );
            }
        }
    }
    Ok(())
}

/// Runs a `key` subcommand.
pub(crate) async fn run_key(command: KeyCommand) -> Result<()> {
    match command {
        KeyCommand::Create { tenant, db } => {
            let store = open_for_tenant(&db).await?;
            let tenant = find(&store, &tenant).await?;
            let (key, info) = store
                .create_api_key(&tenant.tenant_id)
                .await
                .context("create the key")?;
            tracing::info!(tenant = %tenant.tenant_id, prefix = %describe_prefix(&info), "key created");
            outln!("{}", key.expose());
        }
        KeyCommand::List { tenant, db } => {
            let store = open_existing(&db).await?;
            let tenant = find(&store, &tenant).await?;
            let keys = store
                .api_keys(&tenant.tenant_id)
                .await
                .context("list keys")?;
            if keys.len() as i64 >= traqlyte_store::KEYS_LIST_MAX {
                errln!(
                    "note: the listing holds the newest {} keys; older ones may exist",
                    traqlyte_store::KEYS_LIST_MAX
                );
            }
            for key in keys {
                outln!(
                    "{}\t{}\t{}",
                    describe_prefix(&key),
                    format_rfc3339_micros(key.created_at_us),
                    describe_state(&key)
                );
            }
        }
        KeyCommand::Revoke {
            tenant,
            key_or_prefix,
            db,
        } => {
            let selector = KeySelector::parse(&key_or_prefix).context(
                "name the key by its prefix as `key list` shows it (tlk_ and 8 hex digits) or give the whole key",
            )?;
            let store = open_for_tenant(&db).await?;
            let tenant = find(&store, &tenant).await?;
            let Some(key) = store
                .revoke_api_key(&tenant.tenant_id, &selector)
                .await
                .context("revoke the key")?
            else {
                // Only the prefix is repeated: a whole key named under the wrong tenant
                // is still some tenant's live key, and this message lands in logs.
                let prefix: String = key_or_prefix.chars().take(12).collect();
                bail!(
                    "tenant {:?} has no key {prefix:?}…; `traqlyte key list --tenant {}` shows its keys",
                    tenant.name,
                    tenant.tenant_id
                );
            };
            tracing::info!(tenant = %tenant.tenant_id, prefix = %describe_prefix(&key), "key revoked");
            outln!("{}\t{}", describe_prefix(&key), describe_state(&key));
        }
    }
    Ok(())
}

/// Reads the admin token of `serve --admin-token-file`: the file's content without
/// surrounding whitespace. Refuses a short token, one that cannot travel in a header,
/// and one shaped like a tenant key, so a tenant key can never be the admin token.
pub(crate) fn read_admin_token(path: &Path) -> Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("read the admin token file {}", path.display()))?;
    let token = text.trim();
    if token.chars().count() < ADMIN_TOKEN_CHARS_MIN {
        bail!(
            "the admin token in {} is shorter than {ADMIN_TOKEN_CHARS_MIN} characters; make one with `openssl rand -hex 32`",
            path.display()
        );
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        bail!(
            "the admin token in {} must be printable ASCII without spaces (it travels in an HTTP header)",
            path.display()
        );
    }
    if token.starts_with("tlk_") {
        bail!(
            "the admin token in {} looks like a tenant API key (tlk_…); an admin token must not be one",
            path.display()
        );
    }
    warn_if_readable_by_others(path);
    Ok(token.to_string())
}

#[cfg(unix)]
fn warn_if_readable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::metadata(path) {
        if meta.permissions().mode() & 0o077 != 0 {
            tracing::warn!(path = %path.display(), "the admin token file is readable by other users; chmod 600 it");
        }
    }
}

#[cfg(not(unix))]
fn warn_if_readable_by_others(_path: &Path) {}

/// The store of a command that writes (tenant, key and source creation, backfill…):
/// a new database is migrated first, so a first command on it works (what it applied is
/// logged); a schema an older build made is not upgraded by such a command (an upgrade is
/// `traqlyte migrate`'s, run on purpose when the older servers have stopped:
/// `docs/scaling.md`), and another application's database is refused by the store.
pub(crate) async fn open(db: &DbArgs) -> Result<Store> {
    let store = connect(db, 2).await?;
    let older = store
        .older_schema()
        .await
        .context("read the applied migrations")?;
    if let Some(pending) = older {
        bail!(
            "the database's schema is older than this build ({} migration(s) to apply: {}): run `traqlyte migrate` first, once the servers of the older build have stopped",
            pending.len(),
            pending.join(", ")
        );
    }
    let applied = store.migrate().await.context("apply migrations")?;
    if !applied.is_empty() {
        tracing::info!(applied = ?applied, "migrations applied");
    }
    Ok(store)
}

/// The store of a command that acts on a tenant that must exist already (`key create`,
/// `source create`, `backfill`, …): migrated like [`open`], but a SQLite file that does
/// not exist is an error, not a new database holding no tenant left at a mistyped path.
pub(crate) async fn open_for_tenant(db: &DbArgs) -> Result<Store> {
    refuse_missing_file(db)?;
    open(db).await
}

/// An error when `db` names a SQLite file that does not exist.
pub(crate) fn refuse_missing_file(db: &DbArgs) -> Result<()> {
    // The file as SQLite would open it (`sqlite:`, `sqlite://`, `file:` and bare paths).
    if let Some(path) = traqlyte_store::database_file(&db.database_url) {
        if !path.exists() {
            bail!(
                "no database at {}: check --database-url (`traqlyte tenant create` or `traqlyte migrate` creates one)",
                path.display()
            );
        }
    }
    Ok(())
}

/// The store of a command that only reads (the lists, `partitions status`): never
/// created, never migrated. A mistyped SQLite path is an error, not a new empty
/// database, and a listing never runs a newer build's migrations (some rewrite tables:
/// they are `traqlyte migrate`'s, run on purpose).
pub(crate) async fn open_existing(db: &DbArgs) -> Result<Store> {
    refuse_missing_file(db)?;
    let store = connect(db, 2).await?;
    let pending = store
        .pending_migrations()
        .await
        .context("read the applied migrations")?;
    if !pending.is_empty() {
        bail!(
            "the database lacks {} migration(s) of this build ({}): run `traqlyte migrate` first",
            pending.len(),
            pending.join(", ")
        );
    }
    Ok(store)
}

/// The tenant named (or with the id) `name`, or an error that says what to do.
pub(crate) async fn find(store: &Store, name: &str) -> Result<TenantRecord> {
    let parsed = TenantName::parse(name).map_err(anyhow::Error::msg)?;
    store
        .tenant_by_name(&parsed)
        .await?
        .with_context(|| format!("no tenant named {name:?}; `traqlyte tenant list` shows them"))
}

fn describe_prefix(key: &ApiKeyInfo) -> String {
    key.prefix.as_ref().map_or_else(
        || "(created before prefixes)".to_string(),
        ToString::to_string,
    )
}

fn describe_state(key: &ApiKeyInfo) -> String {
    match key.revoked_at_us {
        Some(at) => format!("revoked {}", format_rfc3339_micros(at)),
        None => "active".to_string(),
    }
}

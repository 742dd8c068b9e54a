//! Campaigns (experiments) and their immutable published versions.

use crate::tx::{with_pool, with_tx, TxInner};
use crate::{Store, StoreError, StoreTx, TenantId};
use serde::{Deserialize, Serialize};

// The campaign types are the pure experiments domain's; the store only reads and writes
// them.
pub use traqlyte_experiments::{
    Arm, Arms, Campaign, CampaignId, CampaignVersion, MetricDef, MetricKind, NewCampaign,
};

const SELECT_CAMPAIGN: &str =
    "SELECT campaign_id, campaign_key, name, arms, metrics, salt, created_at_us
     FROM campaigns WHERE tenant_id = $1 AND campaign_id = $2";
const SELECT_CAMPAIGN_BY_KEY: &str =
    "SELECT campaign_id, campaign_key, name, arms, metrics, salt, created_at_us
     FROM campaigns WHERE tenant_id = $1 AND campaign_key = $2";
const SELECT_NEWEST_VERSION: &str =
    "SELECT campaign_id, CAST(version AS BIGINT) AS version, arms, metrics, salt, note,
       published_at_us
     FROM campaign_versions WHERE tenant_id = $1 AND campaign_id = $2
     ORDER BY campaign_versions.version DESC LIMIT 1";
const SELECT_VERSIONS: &str =
    "SELECT campaign_id, CAST(version AS BIGINT) AS version, arms, metrics, salt, note,
       published_at_us
     FROM campaign_versions WHERE tenant_id = $1 AND campaign_id = $2
     ORDER BY campaign_versions.version";
/// The most versions one campaign may publish: its report and page read every version
/// that has units, so their number must be bounded. A reweighting a day for three years
/// stays under it.
pub const VERSIONS_PER_CAMPAIGN_MAX: i64 = 1_000;

/// A page of [`SELECT_VERSIONS`]: versions after `$3`, `$4` of them.
const SELECT_VERSIONS_PAGE: &str =
    "SELECT campaign_id, CAST(version AS BIGINT) AS version, arms, metrics, salt, note,
       published_at_us
     FROM campaign_versions WHERE tenant_id = $1 AND campaign_id = $2 AND version > $3
     ORDER BY campaign_versions.version LIMIT $4";
const SELECT_CAMPAIGNS: &str =
    "SELECT campaign_id, campaign_key, name, arms, metrics, salt, created_at_us
     FROM campaigns WHERE tenant_id = $1 ORDER BY created_at_us DESC, campaign_id LIMIT $2";
pub(crate) const SELECT_LATEST_VERSION: &str =
    "SELECT CAST(version AS BIGINT) AS version, arms FROM campaign_versions
     WHERE tenant_id = $1 AND campaign_id = $2 ORDER BY campaign_versions.version DESC LIMIT 1";
/// One primary-key probe per id (a generic plan for `= ANY($2)` may scan the tenant's
/// whole key range).
pub(crate) const PG_SELECT_CAMPAIGNS_BY_ID: &str =
    "SELECT c.campaign_id, c.campaign_key, c.name, c.arms, c.metrics, c.salt, c.created_at_us
     FROM unnest($2::text[]) AS k(id)
     CROSS JOIN LATERAL (SELECT * FROM campaigns WHERE tenant_id = $1 AND campaign_id = k.id LIMIT 1) c";
const SELECT_CAMPAIGNS_IN: &str =
    "SELECT campaign_id, campaign_key, name, arms, metrics, salt, created_at_us
     FROM campaigns WHERE tenant_id = ? AND campaign_id IN";
/// The tenant's campaigns among `ids` on PostgreSQL, through a pool or a transaction.
async fn pg_campaigns_by_id<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    tenant: &TenantId,
    ids: &[CampaignId],
) -> Result<Vec<Campaign>, StoreError> {
    let texts: Vec<&str> = ids.iter().map(CampaignId::as_str).collect();
    let rows: Vec<CampaignRow> = sqlx::query_as(PG_SELECT_CAMPAIGNS_BY_ID)
        .bind(tenant.as_str())
        .bind(&texts)
        .fetch_all(executor)
        .await?;
    rows.into_iter().map(Campaign::try_from).collect()
}

/// The same on SQLite: [`SELECT_CAMPAIGNS_IN`] with one placeholder an id (SQLite has no
/// array parameter).
async fn sqlite_campaigns_by_id<'e>(
    executor: impl sqlx::SqliteExecutor<'e>,
    tenant: &TenantId,
    ids: &[CampaignId],
) -> Result<Vec<Campaign>, StoreError> {
    let sql = format!("{SELECT_CAMPAIGNS_IN} ({})", vec!["?"; ids.len()].join(","));
    let mut query = sqlx::query_as(&sql).bind(tenant.as_str());
    for id in ids {
        query = query.bind(id.as_str());
    }
    let rows: Vec<CampaignRow> = query.fetch_all(executor).await?;
    rows.into_iter().map(Campaign::try_from).collect()
}

const INSERT_CAMPAIGN: &str = "INSERT INTO campaigns
     (tenant_id, campaign_id, campaign_key, name, arms, metrics, salt, created_at_us)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING";
const INSERT_VERSION: &str = "INSERT INTO campaign_versions
     (tenant_id, campaign_id, version, arms, metrics, salt, note, published_at_us)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

impl Store {
    /// A tenant's campaign.
    pub async fn campaign(
        &self,
        tenant: &TenantId,
        campaign_id: &CampaignId,
    ) -> Result<Option<Campaign>, StoreError> {
        with_pool!(self, reader, |pool| {
            let row: Option<CampaignRow> = sqlx::query_as(SELECT_CAMPAIGN)
                .bind(tenant.as_str())
                .bind(campaign_id.as_str())
                .fetch_optional(pool)
                .await?;
            row.map(Campaign::try_from).transpose()
        })
    }

    /// The tenant's campaigns among `ids`, in one statement (ids naming nothing are left
    /// out; the order is unspecified).
    pub async fn campaigns_by_id(
        &self,
        tenant: &TenantId,
        ids: &[CampaignId],
    ) -> Result<Vec<Campaign>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        match &self.backend {
            crate::Backend::Postgres(pg) => pg_campaigns_by_id(&pg.pool, tenant, ids).await,
            crate::Backend::Sqlite(lite) => sqlite_campaigns_by_id(&lite.reader, tenant, ids).await,
        }
    }

    /// A tenant's campaigns, newest first, at most `rows_max`.
    pub async fn campaigns(
        &self,
        tenant: &TenantId,
        rows_max: i64,
    ) -> Result<Vec<Campaign>, StoreError> {
        with_pool!(self, reader, |pool| {
            let rows: Vec<CampaignRow> = sqlx::query_as(SELECT_CAMPAIGNS)
                .bind(tenant.as_str())
                .bind(rows_max)
                .fetch_all(pool)
                .await?;
            rows.into_iter().map(Campaign::try_from).collect()
        })
    }

    /// Every published version of a campaign, oldest first.
    pub async fn campaign_versions(
        &self,
        tenant: &TenantId,
        campaign_id: &CampaignId,
    ) -> Result<Vec<CampaignVersion>, StoreError> {
        with_pool!(self, reader, |pool| {
            let rows: Vec<VersionRow> = sqlx::query_as(SELECT_VERSIONS)
                .bind(tenant.as_str())
                .bind(campaign_id.as_str())
                .fetch_all(pool)
                .await?;
            rows.into_iter().map(CampaignVersion::try_from).collect()
        })
    }

    /// A page of [`Store::campaign_versions`]: at most `limit` versions after `after`
    /// (0: from the first), oldest first, and whether more follow.
    pub async fn campaign_versions_page(
        &self,
        tenant: &TenantId,
        campaign_id: &CampaignId,
        after: i64,
        limit: u32,
    ) -> Result<(Vec<CampaignVersion>, bool), StoreError> {
        let rows: Vec<VersionRow> = with_pool!(self, reader, |pool| {
            sqlx::query_as(SELECT_VERSIONS_PAGE)
                .bind(tenant.as_str())
                .bind(campaign_id.as_str())
                .bind(after)
                .bind(i64::from(limit) + 1)
                .fetch_all(pool)
                .await?
        });
        let (rows, more) = crate::page_of(rows, limit);
        let versions = rows
            .into_iter()
            .map(CampaignVersion::try_from)
            .collect::<Result<Vec<_>, _>>()?;
        Ok((versions, more))
    }
}

/// What [`StoreTx::create_campaign`] did.
#[derive(Debug)]
pub enum CampaignCreated {
    /// A new campaign.
    New(Campaign),
    /// The campaign created before from the same definition, with its latest version.
    Existing {
        /// The campaign.
        campaign: Campaign,
        /// Its latest published version, if any.
        latest: Option<CampaignVersion>,
    },
}

impl StoreTx {
    /// [`Store::campaigns_by_id`] in this transaction (a write transaction must not wait
    /// for a second connection of its pool, which a pool of one never frees).
    pub async fn campaigns_by_id(
        &mut self,
        tenant: &TenantId,
        ids: &[CampaignId],
    ) -> Result<Vec<Campaign>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        match &mut self.inner {
            TxInner::Postgres(conn) => pg_campaigns_by_id(&mut **conn, tenant, ids).await,
            TxInner::Sqlite(conn) => sqlite_campaigns_by_id(&mut **conn, tenant, ids).await,
        }
    }

    /// Creates a campaign with a fresh random salt, or returns the campaign of the same
    /// key created from the same definition (name, arms, metrics: a retried creation)
    /// with its latest version, read in this transaction; `Conflict` when the key is
    /// taken by another definition.
    pub async fn create_campaign(
        &mut self,
        tenant: &TenantId,
        new: &NewCampaign,
        now_us: i64,
    ) -> Result<CampaignCreated, StoreError> {
        let created = Campaign {
            id: CampaignId::from_random(crate::model::random_bytes()),
            key: new.key.clone(),
            name: new.name.clone(),
            arms: new.arms.clone(),
            metrics: new.metrics.clone(),
            salt: crate::model::random_hex(16),
            created_at_us: now_us,
        };
        let arms = to_json(&created.arms)?;
        let metrics = to_json(&created.metrics)?;
        let inserted = with_tx!(self, |conn| {
            sqlx::query(INSERT_CAMPAIGN)
                .bind(tenant.as_str())
                .bind(created.id.as_str())
                .bind(&created.key)
                .bind(&created.name)
                .bind(&arms)
                .bind(&metrics)
                .bind(&created.salt)
                .bind(now_us)
                .execute(&mut *conn)
                .await?
                .rows_affected()
        });
        if inserted == 0 {
            // The key's row is committed by now: a concurrent creation's insert waited for
            // it, and this statement reads it with a snapshot of its own.
            let existing: Option<CampaignRow> = with_tx!(self, |conn| {
                sqlx::query_as(SELECT_CAMPAIGN_BY_KEY)
                    .bind(tenant.as_str())
                    .bind(&new.key)
                    .fetch_optional(&mut *conn)
                    .await?
            });
            let existing = existing.map(Campaign::try_from).transpose()?;
            return match existing {
                Some(campaign)
                    if campaign.name == new.name
                        && campaign.arms == new.arms
                        && campaign.metrics == new.metrics =>
                {
                    let latest: Option<VersionRow> = with_tx!(self, |conn| {
                        sqlx::query_as(SELECT_NEWEST_VERSION)
                            .bind(tenant.as_str())
                            .bind(campaign.id.as_str())
                            .fetch_optional(&mut *conn)
                            .await?
                    });
                    let latest = latest.map(CampaignVersion::try_from).transpose()?;
                    Ok(CampaignCreated::Existing { campaign, latest })
                }
                Some(campaign) => Err(StoreError::Conflict {
                    code: "campaign_key_taken",
                    message: format!(
                        "campaign {} already has key {:?}, with another name, arms or metrics",
                        campaign.id.as_str(),
                        new.key
                    ),
                }),
                None => Err(StoreError::Conflict {
                    code: "campaign_key_taken",
                    message: format!("a campaign with key {:?} already exists", new.key),
                }),
            };
        }
        Ok(CampaignCreated::New(created))
    }

    /// Publishes the next version of a campaign: `arms` when given (new weights), else the
    /// latest version's arms (or the campaign's own). `None` when the campaign does not exist.
    /// The campaign row is locked first so concurrent publishes number versions in turn.
    pub async fn publish_campaign(
        &mut self,
        tenant: &TenantId,
        campaign_id: &CampaignId,
        arms: Option<&Arms>,
        note: Option<&str>,
        now_us: i64,
    ) -> Result<Option<CampaignVersion>, StoreError> {
        let lock = if matches!(self.inner, TxInner::Postgres(_)) {
            " FOR UPDATE"
        } else {
            ""
        };
        let select = format!("{SELECT_CAMPAIGN}{lock}");
        let found = with_tx!(self, |conn| {
            let row: Option<CampaignRow> = sqlx::query_as(&select)
                .bind(tenant.as_str())
                .bind(campaign_id.as_str())
                .fetch_optional(&mut *conn)
                .await?;
            let Some(base) = row else { return Ok(None) };
            let latest: Option<LatestRow> = sqlx::query_as(SELECT_LATEST_VERSION)
                .bind(tenant.as_str())
                .bind(campaign_id.as_str())
                .fetch_optional(&mut *conn)
                .await?;
            (Campaign::try_from(base)?, latest)
        });
        let (base, latest) = found;
        let (last_number, last_arms) = match latest {
            Some(LatestRow { version, arms }) => (version, from_json(&arms)?),
            None => (0, base.arms.clone()),
        };
        if last_number >= VERSIONS_PER_CAMPAIGN_MAX {
            return Err(StoreError::Conflict {
                code: "version_limit",
                message: format!(
                    "campaign {} has {last_number} published versions, the most one campaign may have; nothing was published. Start a new campaign for a new experiment",
                    campaign_id.as_str()
                ),
            });
        }
        let published = CampaignVersion {
            campaign_id: base.id.clone(),
            version: last_number + 1,
            arms: arms.cloned().unwrap_or(last_arms),
            metrics: base.metrics.clone(),
            salt: base.salt.clone(),
            note: note.map(str::to_string),
            published_at_us: now_us,
        };
        let (arms_json, metrics_json) = (to_json(&published.arms)?, to_json(&published.metrics)?);
        with_tx!(self, |conn| {
            sqlx::query(INSERT_VERSION)
                .bind(tenant.as_str())
                .bind(campaign_id.as_str())
                .bind(published.version as i32)
                .bind(&arms_json)
                .bind(&metrics_json)
                .bind(&published.salt)
                .bind(&published.note)
                .bind(now_us)
                .execute(&mut *conn)
                .await?;
        });
        Ok(Some(published))
    }
}

#[derive(sqlx::FromRow)]
struct LatestRow {
    version: i64,
    arms: String,
}

#[derive(sqlx::FromRow)]
struct CampaignRow {
    #[sqlx(try_from = "String")]
    campaign_id: CampaignId,
    campaign_key: String,
    name: String,
    arms: String,
    metrics: String,
    salt: String,
    created_at_us: i64,
}

impl TryFrom<CampaignRow> for Campaign {
    type Error = StoreError;

    fn try_from(row: CampaignRow) -> Result<Self, StoreError> {
        Ok(Campaign {
            id: row.campaign_id,
            key: row.campaign_key,
            name: row.name,
            arms: from_json(&row.arms)?,
            metrics: from_json(&row.metrics)?,
            salt: row.salt,
            created_at_us: row.created_at_us,
        })
    }
}

#[derive(sqlx::FromRow)]
pub(crate) struct VersionRow {
    #[sqlx(try_from = "String")]
    campaign_id: CampaignId,
    version: i64,
    arms: String,
    metrics: String,
    salt: String,
    note: Option<String>,
    published_at_us: i64,
}

impl TryFrom<VersionRow> for CampaignVersion {
    type Error = StoreError;

    fn try_from(row: VersionRow) -> Result<Self, StoreError> {
        Ok(CampaignVersion {
            campaign_id: row.campaign_id,
            version: row.version,
            arms: from_json(&row.arms)?,
            metrics: from_json(&row.metrics)?,
            salt: row.salt,
            note: row.note,
            published_at_us: row.published_at_us,
        })
    }
}

fn to_json<T: Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(e.to_string()))
}

fn from_json<T: for<'de> Deserialize<'de>>(text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(e.to_string()))
}

//! Sources of the Segment-compatible tracking API (docs/segment.md): write keys (only
//! their SHA-256 kept, looked up on every request so a revocation holds at once in every
//! process), the messages a batch rejected, per-source counts, and metric bindings, which
//! turn tracked events into experiment outcomes.
//!
//! Main types: [`WriteKey`], [`SourceId`], [`SourceName`], [`Source`], [`SourceInfo`],
//! [`NewRejection`], [`Rejection`], [`MetricBinding`], [`BindingInfo`].

use serde::Serialize;
use traqlyte_identity::sha256_hex;

use crate::model::random_hex;
use crate::tx::{with_pool, with_tx};
use crate::{now_us, CampaignId, Store, StoreError, StoreTx, TenantId};

/// Most sources one page of [`Store::sources_page`] holds.
pub const SOURCES_PAGE_MAX: u32 = 1_000;

/// Attempts at drawing a fresh write key before the random source is taken as broken.
const KEY_ATTEMPTS_MAX: usize = 4;

/// A source's secret write key: `tlw_` and 48 hex digits (192 random bits). Only its
/// SHA-256 is stored; its first 8 hex digits are kept as a prefix to show in lists.
#[derive(Clone, PartialEq, Eq)]
pub struct WriteKey(String);

impl WriteKey {
    const PREFIX: &'static str = "tlw_";
    const HEX_LEN: usize = 48;

    fn generate() -> WriteKey {
        WriteKey(format!("{}{}", Self::PREFIX, random_hex(Self::HEX_LEN / 2)))
    }

    /// Accepts a key of the right shape; says nothing of whether it exists.
    pub fn parse(text: &str) -> Option<WriteKey> {
        let hex = text.strip_prefix(Self::PREFIX)?;
        let ok = hex.len() == Self::HEX_LEN && hex.bytes().all(|b| b.is_ascii_hexdigit());
        ok.then(|| WriteKey(text.to_ascii_lowercase()))
    }

    /// The secret, for showing once to its owner.
    pub fn expose(&self) -> &str {
        &self.0
    }

    fn hash(&self) -> String {
        sha256_hex(self.0.as_bytes())
    }

    fn prefix(&self) -> &str {
        &self.0[Self::PREFIX.len()..Self::PREFIX.len() + 8]
    }
}

impl std::fmt::Debug for WriteKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WriteKey(…)")
    }
}

/// A source's id: `src_` and 16 hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct SourceId(String);

impl SourceId {
    fn generate() -> SourceId {
        SourceId(format!("src_{}", random_hex(8)))
    }

    /// Accepts an id of the right shape; says nothing of whether it exists.
    pub fn parse(text: &str) -> Option<SourceId> {
        let hex = text.strip_prefix("src_")?;
        let ok = hex.len() == 16 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        ok.then(|| SourceId(text.to_string()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for SourceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A source's name, unique in its tenant: trimmed, 1–128 characters, no control
/// characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceName(String);

impl SourceName {
    /// The longest name accepted, in characters.
    pub const CHARS_MAX: usize = 128;

    /// Trims and checks a name; the error says what is wrong, for people.
    pub fn parse(text: &str) -> Result<SourceName, String> {
        let name = crate::tenants::visible_name(text.trim(), "a source name")?;
        if name.is_empty() || name.chars().count() > Self::CHARS_MAX {
            return Err(format!(
                "a source name is 1 to {} characters",
                Self::CHARS_MAX
            ));
        }
        if name.chars().any(char::is_control) {
            return Err("a source name must not contain control characters".to_string());
        }
        Ok(SourceName(name))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The source a working write key belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// Its tenant.
    pub tenant: TenantId,
    /// Its id.
    pub source_id: SourceId,
    /// Its name.
    pub name: String,
}

/// A source as listed, with its counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceInfo {
    /// Its id.
    pub source_id: SourceId,
    /// Its name.
    pub name: String,
    /// The first 8 hex digits of its write key (not secret).
    pub key_prefix: String,
    /// When it was created, microseconds since the epoch.
    pub created_at_us: i64,
    /// When its write key was revoked, if it was.
    pub revoked_at_us: Option<i64>,
    /// Messages stored.
    pub inserted: i64,
    /// Re-deliveries of stored messages, suppressed.
    pub duplicates: i64,
    /// Messages refused because another message holds their identity.
    pub collisions: i64,
    /// Messages of accepted batches rejected alone.
    pub rejected: i64,
}

/// Counts of one request of a source, appended as one row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SourceTally {
    /// Messages stored.
    pub inserted: i64,
    /// Re-deliveries suppressed.
    pub duplicates: i64,
    /// Identity collisions.
    pub collisions: i64,
    /// Messages rejected alone.
    pub rejected: i64,
}

/// A message of an accepted batch that was rejected alone.
#[derive(Debug, Clone)]
pub struct NewRejection {
    /// Its position in the batch.
    pub message_index: u32,
    /// The error code (`missing_required_field`, …).
    pub code: String,
    /// The field it is about (empty: the message).
    pub field: String,
    /// Why, for people.
    pub reason: String,
    /// The message as received (compact JSON, the write key removed).
    pub payload: String,
}

/// A recorded rejection.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Rejection {
    /// Its id, increasing.
    pub rejection_id: i64,
    /// The message's position in its batch.
    pub message_index: i64,
    /// The error code.
    pub code: String,
    /// The field it is about (empty: the message).
    pub field: String,
    /// Why, for people.
    pub reason: String,
    /// The message as received.
    pub payload: String,
    /// When, microseconds since the epoch.
    pub received_at_us: i64,
}

/// A campaign metric fed by tracked events named `event`. Inserted, never updated.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct MetricBinding {
    /// The campaign (`cmp_…`).
    #[sqlx(try_from = "String")]
    pub campaign_id: CampaignId,
    /// The campaign's metric.
    pub metric: String,
    /// The track event's name.
    pub event: String,
    /// RFC 6901 pointer of the value in the message (e.g. `/properties/revenue`).
    pub value_pointer: Option<String>,
    /// RFC 6901 pointer of the business key (e.g. `/properties/order_id`).
    pub key_pointer: Option<String>,
    /// When it was declared, microseconds since the epoch.
    pub created_at_us: i64,
}

/// A binding with what it did to the messages it matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingInfo {
    /// The binding.
    pub binding: MetricBinding,
    /// Matching messages that became outcomes (new, duplicate or collision).
    pub outcomes: i64,
    /// Matching messages whose unit has no assignment in the campaign.
    pub unassigned: i64,
    /// Matching messages without a usable value or business key.
    pub unusable: i64,
}

/// What one request did with one binding, appended as one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingTally {
    /// The campaign.
    pub campaign_id: CampaignId,
    /// The metric.
    pub metric: String,
    /// The event.
    pub event: String,
    /// Messages that became outcomes.
    pub outcomes: i64,
    /// Messages for units without an assignment.
    pub unassigned: i64,
    /// Messages without a usable value or business key.
    pub unusable: i64,
}

/// Declaring a binding: new, the same one again, or a different one under the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindingOutcome {
    /// Stored.
    Created(MetricBinding),
    /// The identical binding exists.
    Unchanged(MetricBinding),
    /// A different binding holds (campaign, metric, event); the stored one.
    Conflict(MetricBinding),
    /// The campaign has [`BINDINGS_PER_CAMPAIGN_MAX`] bindings already. Nothing stored.
    LimitReached,
}

/// The most bindings one campaign may have (up to 50 metrics, each fed by a few event
/// names): `GET /campaigns/{id}/bindings` lists them all, and every tracked message looks
/// up the bindings of its event name.
pub const BINDINGS_PER_CAMPAIGN_MAX: i64 = 200;

/// A tenant's bindings of one event name and the messages of that name take turns on
/// PostgreSQL: declaring a binding holds this lock (class 0x5342, "SB", then a hash of
/// tenant and event) exclusively, storing messages holds it shared while it reads the
/// bindings, so a binding applies to exactly the messages committed after it (a message
/// committed before it never becomes its outcome, one committed after always does).
/// SQLite's write transactions are exclusive already. A hash collision only makes two
/// names take turns.
const LOCK_EVENT_BINDINGS: &str = "SELECT pg_advisory_xact_lock(21314, hashtext($1 || ':' || $2))";
const LOCK_EVENTS_BINDINGS_SHARED: &str =
    "SELECT pg_advisory_xact_lock_shared(21314, hashtext($1 || ':' || e))
     FROM unnest($2::text[]) AS e ORDER BY e";

/// Takes a campaign's row lock on PostgreSQL, so bindings of one campaign are declared in
/// turn and their count is exact (SQLite's write transaction is already exclusive).
const LOCK_CAMPAIGN: &str =
    "SELECT campaign_id FROM campaigns WHERE tenant_id = $1 AND campaign_id = $2 FOR UPDATE";

const COUNT_BINDINGS: &str =
    "SELECT COUNT(*) FROM metric_bindings WHERE tenant_id = $1 AND campaign_id = $2";

const SELECT_SOURCES: &str = "SELECT s.source_id, s.name, s.key_prefix, s.created_at_us, s.revoked_at_us,
       CAST(COALESCE((SELECT SUM(t.inserted) FROM source_tallies t WHERE t.tenant_id = s.tenant_id AND t.source_id = s.source_id), 0) AS BIGINT) AS inserted,
       CAST(COALESCE((SELECT SUM(t.duplicates) FROM source_tallies t WHERE t.tenant_id = s.tenant_id AND t.source_id = s.source_id), 0) AS BIGINT) AS duplicates,
       CAST(COALESCE((SELECT SUM(t.collisions) FROM source_tallies t WHERE t.tenant_id = s.tenant_id AND t.source_id = s.source_id), 0) AS BIGINT) AS collisions,
       CAST(COALESCE((SELECT SUM(t.rejected) FROM source_tallies t WHERE t.tenant_id = s.tenant_id AND t.source_id = s.source_id), 0) AS BIGINT) AS rejected
     FROM sources s WHERE s.tenant_id = $1";

const INSERT_SOURCE: &str =
    "INSERT INTO sources (tenant_id, source_id, name, write_key_hash, key_prefix, created_at_us)
     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING";

const SELECT_SOURCE_FOR_KEY: &str =
    "SELECT tenant_id, source_id, name FROM sources WHERE write_key_hash = $1 AND revoked_at_us IS NULL";

/// A working source named `$2`, or whose id is `$2` (a name stored before names were
/// normalised may not be typable): the name first, should a source be named like
/// another's id.
const SELECT_WORKING_SOURCE: &str = "SELECT source_id, name FROM sources
     WHERE tenant_id = $1 AND (name = $2 OR source_id = $2) AND revoked_at_us IS NULL
     ORDER BY CASE WHEN name = $2 THEN 0 ELSE 1 END LIMIT 1";

const INSERT_REJECTION: &str = "INSERT INTO source_rejections
     (tenant_id, source_id, message_index, code, field, reason, payload, received_at_us)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

/// The name of the source a page of sources goes on after (names are unique per tenant
/// and never change, and sources are never deleted, so it orders the next page).
const SELECT_SOURCE_NAME: &str = "SELECT name FROM sources WHERE tenant_id = $1 AND source_id = $2";

/// A source's rejections older than (below) the id `$3`, if given, newest first: one
/// statement, so a page is one consistent read on either backend. The bound without `OR`
/// starts the index range at the cursor in a generic plan too (`plans::KEYSET_PAGES`).
pub(crate) const SELECT_REJECTIONS: &str = "SELECT CAST(rejection_id AS BIGINT) AS rejection_id,
       CAST(message_index AS BIGINT) AS message_index, code, field, reason, payload, received_at_us
     FROM source_rejections WHERE tenant_id = $1 AND source_id = $2
       AND rejection_id <= COALESCE(CAST($3 AS BIGINT), 9223372036854775807)
       AND (CAST($3 AS BIGINT) IS NULL OR rejection_id < CAST($3 AS BIGINT))
     ORDER BY source_rejections.rejection_id DESC LIMIT $4";

const INSERT_SOURCE_TALLY: &str = "INSERT INTO source_tallies
     (tenant_id, source_id, at_us, inserted, duplicates, collisions, rejected)
     VALUES ($1, $2, $3, $4, $5, $6, $7)";

const BINDING_COLUMNS: &str =
    "campaign_id, metric, event, value_pointer, key_pointer, created_at_us";

const INSERT_BINDING: &str = "INSERT INTO metric_bindings
     (tenant_id, campaign_id, metric, event, value_pointer, key_pointer, created_at_us)
     VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING";

const SELECT_BINDING_COUNTS: &str = "SELECT metric, event,
       CAST(COALESCE(SUM(outcomes), 0) AS BIGINT), CAST(COALESCE(SUM(unassigned), 0) AS BIGINT),
       CAST(COALESCE(SUM(unusable), 0) AS BIGINT)
     FROM binding_tallies WHERE tenant_id = $1 AND campaign_id = $2 GROUP BY metric, event";

const INSERT_BINDING_TALLY: &str = "INSERT INTO binding_tallies
     (tenant_id, campaign_id, metric, event, at_us, outcomes, unassigned, unusable)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

#[derive(sqlx::FromRow)]
struct SourceRow {
    source_id: String,
    name: String,
    key_prefix: String,
    created_at_us: i64,
    revoked_at_us: Option<i64>,
    inserted: i64,
    duplicates: i64,
    collisions: i64,
    rejected: i64,
}

impl From<SourceRow> for SourceInfo {
    fn from(row: SourceRow) -> Self {
        SourceInfo {
            source_id: SourceId(row.source_id),
            name: row.name,
            key_prefix: row.key_prefix,
            created_at_us: row.created_at_us,
            revoked_at_us: row.revoked_at_us,
            inserted: row.inserted,
            duplicates: row.duplicates,
            collisions: row.collisions,
            rejected: row.rejected,
        }
    }
}

impl Store {
    /// Creates a source and its write key; the key is returned once and only its hash
    /// and prefix are stored. A name the tenant already uses is [`StoreError::Conflict`]
    /// `source_exists`.
    pub async fn create_source(
        &self,
        tenant: &TenantId,
        name: &SourceName,
    ) -> Result<(SourceInfo, WriteKey), StoreError> {
        let mut tx = self.begin().await?;
        let now = now_us();
        for _ in 0..KEY_ATTEMPTS_MAX {
            let (id, key) = (SourceId::generate(), WriteKey::generate());
            let taken: i64 = with_tx!(tx, |conn| {
                let done = sqlx::query(INSERT_SOURCE)
                    .bind(tenant.as_str())
                    .bind(id.as_str())
                    .bind(name.as_str())
                    .bind(key.hash())
                    .bind(key.prefix())
                    .bind(now)
                    .execute(&mut *conn)
                    .await?;
                if done.rows_affected() == 1 {
                    0
                } else {
                    sqlx::query_scalar(
                        "SELECT COUNT(*) FROM sources WHERE tenant_id = $1 AND name = $2",
                    )
                    .bind(tenant.as_str())
                    .bind(name.as_str())
                    .fetch_one(&mut *conn)
                    .await?
                }
            });
            if taken > 0 {
                return Err(StoreError::Conflict {
                    code: "source_exists",
                    message: format!(
                        "the tenant has a source named {:?} already; source names are unique",
                        name.as_str()
                    ),
                });
            }
            let row = with_tx!(tx, |conn| {
                let sql = format!("{SELECT_SOURCES} AND s.source_id = $2");
                sqlx::query_as::<_, SourceRow>(&sql)
                    .bind(tenant.as_str())
                    .bind(id.as_str())
                    .fetch_optional(&mut *conn)
                    .await?
            });
            if let Some(row) = row {
                tx.commit().await?;
                return Ok((SourceInfo::from(row), key));
            }
        }
        Err(StoreError::Corrupt(format!(
            "{KEY_ATTEMPTS_MAX} fresh source ids or write keys in a row collided with existing ones; the random source is suspect"
        )))
    }

    /// A page of a tenant's sources with their counts, by name: at most `limit` (capped at
    /// [`SOURCES_PAGE_MAX`]) of those named after the source `after` (the last one of the
    /// previous page), and whether more may follow. `None` when `after` is no source of
    /// the tenant. Each page is one statement; a source created meanwhile with a name
    /// before `after` is listed by the next walk from the start, not by this one.
    pub async fn sources_page(
        &self,
        tenant: &TenantId,
        after: Option<&SourceId>,
        limit: u32,
    ) -> Result<Option<(Vec<SourceInfo>, bool)>, StoreError> {
        let limit = limit.min(SOURCES_PAGE_MAX);
        let after_name = match after {
            None => None,
            Some(id) => {
                let name: Option<String> = with_pool!(self, reader, |pool| {
                    sqlx::query_scalar(SELECT_SOURCE_NAME)
                        .bind(tenant.as_str())
                        .bind(id.as_str())
                        .fetch_optional(pool)
                        .await?
                });
                match name {
                    Some(name) => Some(name),
                    None => return Ok(None),
                }
            }
        };
        let sql = format!(
            "{SELECT_SOURCES} AND (CAST($2 AS TEXT) IS NULL OR s.name > CAST($2 AS TEXT))
             ORDER BY s.name LIMIT $3"
        );
        let rows: Vec<SourceRow> = with_pool!(self, reader, |pool| {
            sqlx::query_as(&sql)
                .bind(tenant.as_str())
                .bind(after_name.as_deref())
                .bind(i64::from(limit) + 1)
                .fetch_all(pool)
                .await?
        });
        let (rows, more) = crate::page_of(rows, limit);
        Ok(Some((
            rows.into_iter().map(SourceInfo::from).collect(),
            more,
        )))
    }

    /// One of a tenant's sources, by id or by name.
    pub async fn source(
        &self,
        tenant: &TenantId,
        id_or_name: &str,
    ) -> Result<Option<SourceInfo>, StoreError> {
        // A source may be named like another's id: the id names its own source first.
        let sql = format!(
            "{SELECT_SOURCES} AND (s.source_id = $2 OR s.name = $2)
             ORDER BY CASE WHEN s.source_id = $2 THEN 0 ELSE 1 END LIMIT 1"
        );
        with_pool!(self, reader, |pool| {
            let row: Option<SourceRow> = sqlx::query_as(&sql)
                .bind(tenant.as_str())
                .bind(id_or_name)
                .fetch_optional(pool)
                .await?;
            Ok(row.map(SourceInfo::from))
        })
    }

    /// Revokes a source's write key (by source id or name; an id names its own source
    /// before one named like it) by marking its row; every process refuses the key from
    /// its next request on. Revoking again changes nothing. `None` when the tenant has no
    /// such source.
    pub async fn revoke_source(
        &self,
        tenant: &TenantId,
        id_or_name: &str,
    ) -> Result<Option<SourceInfo>, StoreError> {
        let mut tx = self.begin().await?;
        with_tx!(tx, |conn| {
            sqlx::query(
            "UPDATE sources SET revoked_at_us = $3
             WHERE tenant_id = $1 AND revoked_at_us IS NULL AND source_id = (
                 SELECT source_id FROM sources WHERE tenant_id = $1 AND (source_id = $2 OR name = $2)
                 ORDER BY CASE WHEN source_id = $2 THEN 0 ELSE 1 END LIMIT 1)"
        )
        .bind(tenant.as_str())
        .bind(id_or_name)
        .bind(now_us())
        .execute(&mut *conn)
        .await
        .map(|_| ())?
        });
        tx.commit().await?;
        self.source(tenant, id_or_name).await
    }

    /// The source a working (not revoked) write key belongs to. Read from the database
    /// on every call, never cached, so a revocation holds at once everywhere.
    pub async fn source_for_write_key(&self, key: &WriteKey) -> Result<Option<Source>, StoreError> {
        with_pool!(self, reader, |pool| {
            let row: Option<(String, String, String)> = sqlx::query_as(SELECT_SOURCE_FOR_KEY)
                .bind(key.hash())
                .fetch_optional(pool)
                .await?;
            Ok(row.map(|(tenant, id, name)| Source {
                tenant: TenantId::from_stored(tenant),
                source_id: SourceId(id),
                name,
            }))
        })
    }

    /// A tenant's working (not revoked) source of this name: one read of the unique
    /// `(tenant_id, name)` index, made per batch by a broker consumer that stores
    /// Segment-shaped messages under a named source, so a revocation holds at once there
    /// too. Never cached.
    pub async fn working_source(
        &self,
        tenant: &TenantId,
        name: &SourceName,
    ) -> Result<Option<Source>, StoreError> {
        with_pool!(self, reader, |pool| {
            let row: Option<(String, String)> = sqlx::query_as(SELECT_WORKING_SOURCE)
                .bind(tenant.as_str())
                .bind(name.as_str())
                .fetch_optional(pool)
                .await?;
            Ok(row.map(|(id, name)| Source {
                tenant: tenant.clone(),
                source_id: SourceId(id),
                name,
            }))
        })
    }

    /// A page of a source's rejections, newest first (by id, which rises with each
    /// one): at most `limit` of those with an id below `before` (the last one of the
    /// previous page), and whether more may follow. Each page is one statement. On
    /// PostgreSQL ids are drawn before commit, so a rejection committing after a walk
    /// passed its id is not listed by that walk.
    pub async fn rejections(
        &self,
        tenant: &TenantId,
        source: &SourceId,
        before: Option<i64>,
        limit: u32,
    ) -> Result<(Vec<Rejection>, bool), StoreError> {
        let rows: Vec<Rejection> = with_pool!(self, reader, |pool| {
            let query = sqlx::query_as(SELECT_REJECTIONS)
                .bind(tenant.as_str())
                .bind(source.as_str())
                .bind(before)
                .bind(i64::from(limit) + 1);
            query.fetch_all(pool).await?
        });
        Ok(crate::page_of(rows, limit))
    }

    /// Declares a binding. The identical binding again is [`BindingOutcome::Unchanged`];
    /// a different one for the same (campaign, metric, event) is
    /// [`BindingOutcome::Conflict`]: bindings are immutable.
    pub async fn create_binding(
        &self,
        tenant: &TenantId,
        binding: &MetricBinding,
    ) -> Result<BindingOutcome, StoreError> {
        let mut tx = self.begin().await?;
        let b = binding;
        if let crate::tx::TxInner::Postgres(conn) = &mut tx.inner {
            sqlx::query(LOCK_CAMPAIGN)
                .bind(tenant.as_str())
                .bind(b.campaign_id.as_str())
                .execute(&mut **conn)
                .await?;
            sqlx::query(LOCK_EVENT_BINDINGS)
                .bind(tenant.as_str())
                .bind(&b.event)
                .execute(&mut **conn)
                .await?;
        }
        let select = format!("SELECT {BINDING_COLUMNS} FROM metric_bindings WHERE tenant_id = $1 AND campaign_id = $2 AND metric = $3 AND event = $4");
        let (inserted, stored, count) = with_tx!(tx, |conn| {
            let done = sqlx::query(INSERT_BINDING)
                .bind(tenant.as_str())
                .bind(b.campaign_id.as_str())
                .bind(&b.metric)
                .bind(&b.event)
                .bind(&b.value_pointer)
                .bind(&b.key_pointer)
                .bind(b.created_at_us)
                .execute(&mut *conn)
                .await?;
            let stored: MetricBinding = sqlx::query_as(&select)
                .bind(tenant.as_str())
                .bind(b.campaign_id.as_str())
                .bind(&b.metric)
                .bind(&b.event)
                .fetch_one(&mut *conn)
                .await?;
            let count: i64 = sqlx::query_scalar(COUNT_BINDINGS)
                .bind(tenant.as_str())
                .bind(b.campaign_id.as_str())
                .fetch_one(&mut *conn)
                .await?;
            (done.rows_affected() == 1, stored, count)
        });
        // Counted with the new one: past the limit, it is rolled back.
        if inserted && count > BINDINGS_PER_CAMPAIGN_MAX {
            tx.rollback().await?;
            return Ok(BindingOutcome::LimitReached);
        }
        tx.commit().await?;
        let same = stored.value_pointer == b.value_pointer && stored.key_pointer == b.key_pointer;
        Ok(match (inserted, same) {
            (true, _) => BindingOutcome::Created(stored),
            (false, true) => BindingOutcome::Unchanged(stored),
            (false, false) => BindingOutcome::Conflict(stored),
        })
    }

    /// A campaign's bindings with their counts, by metric then event.
    pub async fn bindings(
        &self,
        tenant: &TenantId,
        campaign_id: &CampaignId,
    ) -> Result<Vec<BindingInfo>, StoreError> {
        let select = format!("SELECT {BINDING_COLUMNS} FROM metric_bindings WHERE tenant_id = $1 AND campaign_id = $2 ORDER BY metric{{bytes}}, event{{bytes}}");
        let select = self.in_byte_order(&select);
        let (bindings, counts) = with_pool!(self, reader, |pool| {
            let bindings: Vec<MetricBinding> = sqlx::query_as(&select)
                .bind(tenant.as_str())
                .bind(campaign_id.as_str())
                .fetch_all(pool)
                .await?;
            let counts: Vec<(String, String, i64, i64, i64)> =
                sqlx::query_as(SELECT_BINDING_COUNTS)
                    .bind(tenant.as_str())
                    .bind(campaign_id.as_str())
                    .fetch_all(pool)
                    .await?;
            (bindings, counts)
        });
        let counts: std::collections::HashMap<(String, String), (i64, i64, i64)> = counts
            .into_iter()
            .map(|(metric, event, o, u, x)| ((metric, event), (o, u, x)))
            .collect();
        Ok(bindings
            .into_iter()
            .map(|binding| {
                let (outcomes, unassigned, unusable) = counts
                    .get(&(binding.metric.clone(), binding.event.clone()))
                    .copied()
                    .unwrap_or((0, 0, 0));
                BindingInfo {
                    binding,
                    outcomes,
                    unassigned,
                    unusable,
                }
            })
            .collect())
    }
}

impl StoreTx {
    /// The tenant's bindings of any of these event names, read in this transaction after
    /// taking their names' shared lock (see `LOCK_EVENT_BINDINGS`): a binding declared
    /// concurrently either committed first and is read here, or waits for this
    /// transaction, whose messages then came before it.
    pub async fn bindings_for_events(
        &mut self,
        tenant: &TenantId,
        events: &[&str],
    ) -> Result<Vec<MetricBinding>, StoreError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        match &mut self.inner {
            crate::tx::TxInner::Postgres(conn) => {
                sqlx::query(LOCK_EVENTS_BINDINGS_SHARED)
                    .bind(tenant.as_str())
                    .bind(events)
                    .execute(&mut **conn)
                    .await?;
                let select = format!("SELECT {BINDING_COLUMNS} FROM metric_bindings WHERE tenant_id = $1 AND event = ANY($2) ORDER BY event, campaign_id, metric");
                Ok(sqlx::query_as(&select)
                    .bind(tenant.as_str())
                    .bind(events)
                    .fetch_all(&mut **conn)
                    .await?)
            }
            crate::tx::TxInner::Sqlite(conn) => {
                let select = format!("SELECT {BINDING_COLUMNS} FROM metric_bindings WHERE tenant_id = $1 AND event = $2 ORDER BY campaign_id, metric");
                let mut found = Vec::new();
                for event in events {
                    let rows: Vec<MetricBinding> = sqlx::query_as(&select)
                        .bind(tenant.as_str())
                        .bind(*event)
                        .fetch_all(&mut **conn)
                        .await?;
                    found.extend(rows);
                }
                Ok(found)
            }
        }
    }

    /// Records the rejected messages of a batch in this transaction.
    pub async fn record_rejections(
        &mut self,
        tenant: &TenantId,
        source: &SourceId,
        rejections: &[NewRejection],
        now: i64,
    ) -> Result<(), StoreError> {
        for r in rejections {
            with_tx!(self, |conn| sqlx::query(INSERT_REJECTION)
                .bind(tenant.as_str())
                .bind(source.as_str())
                .bind(i64::from(r.message_index))
                .bind(&r.code)
                .bind(crate::without_nul(&r.field))
                .bind(crate::without_nul(&r.reason))
                .bind(&r.payload)
                .bind(now)
                .execute(&mut *conn)
                .await
                .map(|_| ())?);
        }
        Ok(())
    }

    /// Appends one request's counts of a source.
    pub async fn tally_source(
        &mut self,
        tenant: &TenantId,
        source: &SourceId,
        tally: SourceTally,
        now: i64,
    ) -> Result<(), StoreError> {
        with_tx!(self, |conn| sqlx::query(INSERT_SOURCE_TALLY)
            .bind(tenant.as_str())
            .bind(source.as_str())
            .bind(now)
            .bind(tally.inserted)
            .bind(tally.duplicates)
            .bind(tally.collisions)
            .bind(tally.rejected)
            .execute(&mut *conn)
            .await
            .map(|_| ())?);
        Ok(())
    }

    /// Appends one request's counts of each binding it touched.
    pub async fn tally_bindings(
        &mut self,
        tenant: &TenantId,
        tallies: &[BindingTally],
        now: i64,
    ) -> Result<(), StoreError> {
        for t in tallies {
            with_tx!(self, |conn| sqlx::query(INSERT_BINDING_TALLY)
                .bind(tenant.as_str())
                .bind(t.campaign_id.as_str())
                .bind(&t.metric)
                .bind(&t.event)
                .bind(now)
                .bind(t.outcomes)
                .bind(t.unassigned)
                .bind(t.unusable)
                .execute(&mut *conn)
                .await
                .map(|_| ())?);
        }
        Ok(())
    }
}

/// Every stored binding: what [`Store::normalize_bindings`] reads.
const SELECT_ALL_BINDINGS: &str = "SELECT tenant_id, campaign_id, metric, event, value_pointer,
       key_pointer, created_at_us FROM metric_bindings";

const UPDATE_BINDING_POINTERS: &str =
    "UPDATE metric_bindings SET value_pointer = $5, key_pointer = $6
     WHERE tenant_id = $1 AND campaign_id = $2 AND metric = $3 AND event = $4";

const DELETE_BINDING: &str = "DELETE FROM metric_bindings
     WHERE tenant_id = $1 AND campaign_id = $2 AND metric = $3 AND event = $4";

const MOVE_BINDING_TALLIES: &str = "UPDATE binding_tallies SET event = $5
     WHERE tenant_id = $1 AND campaign_id = $2 AND metric = $3 AND event = $4";

/// A stored binding row, tenant first ([`SELECT_ALL_BINDINGS`]).
type BindingRow = (
    String,
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    i64,
);

impl Store {
    /// Puts bindings stored before they were normalised (builds before bindings were
    /// stored in NFC) in NFC: such a binding's event name never equals an identified
    /// message's (messages are put in NFC), so it matched nothing, after an upgrade as
    /// before it. A binding whose NFC form is stored already (declared again after the
    /// upgrade) gives way to it; its tallies follow. Idempotent and cheap (bindings are
    /// few): run at every start, after the migrations, so a database upgraded by a build
    /// without this step is put right too. The number of bindings changed.
    pub(crate) async fn normalize_bindings(&self) -> Result<u64, StoreError> {
        use traqlyte_identity::canonical::nfc;
        let rows: Vec<BindingRow> = with_pool!(self, writer, |pool| {
            sqlx::query_as(SELECT_ALL_BINDINGS).fetch_all(pool).await?
        });
        let nfc_of = |pointer: &Option<String>| pointer.as_deref().map(nfc);
        let changed: Vec<&BindingRow> = rows
            .iter()
            .filter(|(_, _, _, event, value, key, _)| {
                nfc(event) != *event || nfc_of(value) != *value || nfc_of(key) != *key
            })
            .collect();
        if changed.is_empty() {
            return Ok(0);
        }
        let mut tx = self.begin().await?;
        for (tenant, campaign, metric, event, value, key, created) in &changed {
            let (to_event, to_value, to_key) = (nfc(event), nfc_of(value), nfc_of(key));
            with_tx!(tx, |conn| {
                if to_event == *event {
                    sqlx::query(UPDATE_BINDING_POINTERS)
                        .bind(tenant)
                        .bind(campaign)
                        .bind(metric)
                        .bind(event)
                        .bind(&to_value)
                        .bind(&to_key)
                        .execute(&mut *conn)
                        .await?;
                } else {
                    sqlx::query(INSERT_BINDING)
                        .bind(tenant)
                        .bind(campaign)
                        .bind(metric)
                        .bind(&to_event)
                        .bind(&to_value)
                        .bind(&to_key)
                        .bind(created)
                        .execute(&mut *conn)
                        .await?;
                    sqlx::query(DELETE_BINDING)
                        .bind(tenant)
                        .bind(campaign)
                        .bind(metric)
                        .bind(event)
                        .execute(&mut *conn)
                        .await?;
                    sqlx::query(MOVE_BINDING_TALLIES)
                        .bind(tenant)
                        .bind(campaign)
                        .bind(metric)
                        .bind(event)
                        .bind(&to_event)
                        .execute(&mut *conn)
                        .await?;
                }
            });
        }
        tx.commit().await?;
        Ok(changed.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_keys_and_source_ids_have_one_shape() {
        let key = WriteKey::generate();
        assert_eq!(WriteKey::parse(key.expose()), Some(key.clone()));
        assert_eq!(key.prefix().len(), 8);
        assert!(WriteKey::parse("tlk_0123").is_none());
        assert!(WriteKey::parse(&format!("{}0", key.expose())).is_none());
        assert_eq!(format!("{key:?}"), "WriteKey(…)");
        let id = SourceId::generate();
        assert_eq!(SourceId::parse(id.as_str()), Some(id));
        assert!(SourceId::parse("src_XYZ").is_none());
    }

    #[test]
    fn source_names_are_trimmed_and_bounded() {
        assert_eq!(SourceName::parse("  web  ").map(|n| n.0), Ok("web".into()));
        assert!(SourceName::parse(" ").is_err());
        assert!(SourceName::parse(&"x".repeat(129)).is_err());
        assert!(SourceName::parse("a\u{0}b").is_err());
    }
}

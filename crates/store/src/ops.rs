//! Operations reads and writes (issue 13): which surface delivered an ingestion call
//! ([`IngestSource`]), the duplicate-rate trend ([`Store::duplicate_trend`]), the
//! tenant's collision log newest first ([`Store::collisions_page`]), per-tenant webhooks
//! and their outbox ([`Store::create_webhook`], [`Store::claim_deliveries`]), and the
//! pools' usage for `GET /metrics` ([`Store::pool_usage`]).
//!
//! The trend is read from the append-only `event_tallies` rows (one per ingestion call,
//! folded per minute by [`Store::roll_up_tallies`], which keeps the source), bucketed by
//! their arrival time `at_us`: sums of append-only rows, so concurrent writers need no
//! lock and every committed call is counted exactly once.

use serde::Serialize;

use crate::model::random_hex;
use crate::tx::{with_pool, with_tx};
use crate::{Store, StoreError, StoreTx, TenantId};

/// Longest source label stored (a NATS stream name is at most 255 bytes; a Segment
/// source id is short).
const SOURCE_BYTES_MAX: usize = 300;

/// Which surface delivered an ingestion call: `http` (the JSON API and OpenLineage),
/// `segment:{source_id}`, `nats:{stream}` or `backfill`. Stored beside each tally and collision row.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IngestSource(String);

impl IngestSource {
    /// The JSON and OpenLineage HTTP APIs.
    pub fn http() -> IngestSource {
        IngestSource("http".to_string())
    }

    /// `traqlyte backfill`.
    pub fn backfill() -> IngestSource {
        IngestSource("backfill".to_string())
    }

    /// A Segment source.
    pub fn segment(source: &crate::SourceId) -> IngestSource {
        IngestSource(format!("segment:{}", source.as_str()))
    }

    /// A NATS JetStream stream (its name is cut to a bounded length).
    pub fn nats(stream: &str) -> IngestSource {
        let mut text = format!("nats:{}", stream.replace('\0', ""));
        if text.len() > SOURCE_BYTES_MAX {
            let mut end = SOURCE_BYTES_MAX;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
        }
        IngestSource(text)
    }

    /// A source label as a client names it in a query (`?source=`); `None` if it has
    /// none of the four shapes.
    pub fn parse(text: &str) -> Option<IngestSource> {
        let ok = text == "http"
            || text == "backfill"
            || (text.starts_with("segment:") || text.starts_with("nats:"))
                && text.len() <= SOURCE_BYTES_MAX
                && !text.contains('\0');
        ok.then(|| IngestSource(text.to_string()))
    }

    /// The stored label.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for IngestSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Store {
    /// [`Store::insert_events`] counted under `source` (tallies and collisions); with
    /// `any_age`, in a backfill's transaction ([`Store::begin_backfill`]): events older
    /// than every attached partition are reconciled in the detached ones (and counted as
    /// `late`) instead of failing with [`StoreError::OutsideHorizon`].
    pub async fn insert_events_from(
        &self,
        source: IngestSource,
        tenant: &TenantId,
        contract: &traqlyte_identity::Contract,
        events: &[crate::NewEvent],
        any_age: bool,
    ) -> Result<Vec<crate::EventOutcome>, StoreError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = if any_age {
            self.begin_backfill().await?
        } else {
            self.begin().await?
        };
        tx.set_ingest_source(source);
        let outcomes = tx.insert_events(tenant, contract, events).await?;
        tx.commit().await?;
        Ok(outcomes)
    }

    /// [`Store::insert_events_from`] for a batch of independent events (an HTTP batch, a
    /// NATS fetch), where an event whose day has no partition to write to must not keep
    /// the others out: the batch is tried whole (in a backfill's transaction when `late`)
    /// and, if an event's day failed it ([`StoreError::OutsideHorizon`]: maintenance
    /// with a shorter horizon detached a day this process admits, or has not created it
    /// yet), written again in one transaction without the events lacking a partition,
    /// `None` in their places. With `--late-events reconcile` (`late_events`) that second
    /// transaction is a backfill's, so a detached day's events are reconciled, not left
    /// out. Rare, so the second try costs a listing of the partitions (made once more if
    /// maintenance changed them meanwhile).
    pub async fn insert_events_apart(
        &self,
        source: IngestSource,
        tenant: &TenantId,
        contract: &traqlyte_identity::Contract,
        events: &[crate::NewEvent],
        late: bool,
        late_events: crate::LateEvents,
    ) -> Result<Vec<Option<crate::EventOutcome>>, StoreError> {
        let reconcile = late_events == crate::LateEvents::Reconcile;
        match self
            .insert_events_from(source.clone(), tenant, contract, events, late)
            .await
        {
            Err(StoreError::OutsideHorizon) => {}
            other => return Ok(other?.into_iter().map(Some).collect()),
        }
        // Twice at most: a backfill's insert lists the partitions again, and a maintenance
        // run with a longer horizon attaching an older day in between can refuse a day
        // the listing here found writable (a read-back).
        let mut attempts = 0;
        loop {
            attempts += 1;
            let mut tx = if late || reconcile {
                self.begin_backfill().await?
            } else {
                self.begin().await?
            };
            tx.set_ingest_source(source.clone());
            let lacking = tx.lacking_partition(contract, events).await?;
            let kept: Vec<crate::NewEvent> = events
                .iter()
                .zip(&lacking)
                .filter(|(_, &lacks)| !lacks)
                .map(|(event, _)| event.clone())
                .collect();
            let mut stored = match tx.insert_events(tenant, contract, &kept).await {
                Err(StoreError::OutsideHorizon) if attempts < 2 => continue,
                other => other?.into_iter(),
            };
            tx.commit().await?;
            return Ok(lacking
                .into_iter()
                .map(|lacks| if lacks { None } else { stored.next() })
                .collect());
        }
    }
}

/// What an event left out by [`Store::insert_events_apart`] tells its sender.
pub fn lacking_partition_message(contract: &str) -> String {
    format!(
        "no partition this process may write holds the event's occurrence day (maintenance detached it, having run with a shorter dedupe horizon than this process's, or has not created it yet); nothing of it was written: load it with `traqlyte backfill --contract {contract}` (after `traqlyte partitions maintain` for a day not created yet)"
    )
}

impl StoreTx {
    /// Every event this transaction stores from now on is counted (tallies, collisions)
    /// under `source`; a transaction starts as [`IngestSource::http`].
    pub fn set_ingest_source(&mut self, source: IngestSource) {
        self.source = source;
    }
}

/// The width of a trend bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bucket {
    /// 60 s.
    Minute,
    /// 3,600 s.
    Hour,
    /// 86,400 s (UTC days).
    Day,
}

impl Bucket {
    /// The width in microseconds.
    pub fn width_us(self) -> i64 {
        match self {
            Bucket::Minute => 60_000_000,
            Bucket::Hour => 3_600_000_000,
            Bucket::Day => 86_400_000_000,
        }
    }
}

/// What [`Store::duplicate_trend`] reads.
#[derive(Debug, Clone)]
pub struct TrendQuery {
    /// First instant counted (inclusive), microseconds since the epoch.
    pub since_us: i64,
    /// Last instant counted (exclusive).
    pub until_us: i64,
    /// The bucket width.
    pub bucket: Bucket,
    /// Only this contract.
    pub contract: Option<String>,
    /// Only this source.
    pub source: Option<IngestSource>,
}

/// One bucket of one series (contract, source) of the trend.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct TrendRow {
    /// The bucket's start, microseconds since the epoch.
    pub bucket_start_us: i64,
    /// The contract.
    pub contract: String,
    /// The source label.
    pub source: String,
    /// Newly stored events.
    pub inserted: i64,
    /// Retries of stored events.
    pub duplicates: i64,
    /// Different events under a stored identity.
    pub collisions: i64,
}

const SELECT_TREND: &str = "SELECT CAST((at_us / $4) * $4 AS BIGINT) AS bucket_start_us,
       contract_name AS contract, source,
       CAST(SUM(inserted) AS BIGINT) AS inserted,
       CAST(SUM(duplicates) AS BIGINT) AS duplicates,
       CAST(SUM(collisions) AS BIGINT) AS collisions
     FROM event_tallies
     WHERE tenant_id = $1 AND at_us >= $2 AND at_us < $3
       AND (CAST($5 AS TEXT) IS NULL OR contract_name = CAST($5 AS TEXT))
       AND (CAST($6 AS TEXT) IS NULL OR source = CAST($6 AS TEXT))
     GROUP BY (at_us / $4) * $4, contract_name, source
     ORDER BY bucket_start_us, contract, source";

/// A page of the collision log.
#[derive(Debug, Clone)]
pub struct CollisionsQuery {
    /// Only this contract.
    pub contract: Option<String>,
    /// Only collisions received at or after this instant.
    pub since_us: Option<i64>,
    /// Continue after this cursor (the last row of the previous page).
    pub before: Option<CollisionCursor>,
    /// Rows per page.
    pub limit: u32,
}

/// Where a page of collisions ended: newest first by (received time, id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CollisionCursor {
    /// The last row's arrival time.
    pub received_at_us: i64,
    /// The last row's id.
    pub collision_id: i64,
}

/// One logged event collision with everything a person needs to judge it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, Serialize)]
pub struct CollisionEntry {
    /// The log entry's id (unique per tenant).
    pub collision_id: i64,
    /// The contract.
    pub contract: String,
    /// The contract version the refused event was identified under.
    pub contract_version: i64,
    /// The shared event id (hex).
    pub event_id: String,
    /// Fingerprint of the stored row.
    pub stored_fingerprint: String,
    /// Fingerprint of the refused delivery.
    pub incoming_fingerprint: String,
    /// Payload of the stored row (JSON text).
    pub stored_payload: String,
    /// Payload of the refused delivery (JSON text).
    pub incoming_payload: String,
    /// The surface that delivered the refused event.
    pub source: String,
    /// When the server received it, microseconds since the epoch.
    pub received_at_us: i64,
}

const COLLISION_COLUMNS: &str = "collision_id, contract_name AS contract,
       CAST(contract_version AS BIGINT) AS contract_version, event_id, stored_fingerprint,
       incoming_fingerprint, stored_payload, incoming_payload, source, received_at_us";

/// The page's rows without their payloads: each one's position and payload bytes, so a
/// page can stop before it holds more than [`COLLISIONS_PAGE_BYTES_MAX`]; `{contract}` is
/// [`contract_filter`]. The bound on
/// `received_at_us` alone starts the index range at the cursor (PostgreSQL derives none
/// from the `OR`: a page 500,000 entries deep took 110–210 ms, filtering every newer one;
/// `plans::KEYSET_PAGES`).
pub(crate) const SELECT_COLLISIONS_PAGE_SIZES: &str = "SELECT received_at_us, collision_id,
       CAST(octet_length(stored_payload) + octet_length(incoming_payload) AS BIGINT)
     FROM event_collisions
     WHERE tenant_id = $1 {contract}
       AND received_at_us >= COALESCE(CAST($3 AS BIGINT), -9223372036854775807)
       AND received_at_us <= COALESCE(CAST($4 AS BIGINT), 9223372036854775807)
       AND (CAST($4 AS BIGINT) IS NULL OR received_at_us < CAST($4 AS BIGINT)
            OR (received_at_us = CAST($4 AS BIGINT) AND collision_id < CAST($5 AS BIGINT)))
     ORDER BY received_at_us DESC, collision_id DESC LIMIT $6";

/// The rows of a page between its newest (`$3`, `$4`) and its oldest (`$5`, `$6`) entry,
/// both included (bounded on `received_at_us` alone too, for the index range; `{contract}`
/// is [`contract_filter`]), with their payloads: at most `$7`, the number the first read took (a
/// collision committed between the two reads with an arrival time inside the range, whose
/// request began earlier, then pushes the page's oldest entry to the next page instead of
/// growing this one).
pub(crate) const SELECT_COLLISIONS_BETWEEN: &str = "SELECT {columns} FROM event_collisions
     WHERE tenant_id = $1 {contract}
       AND received_at_us <= $3 AND received_at_us >= $5
       AND (received_at_us < $3 OR (received_at_us = $3 AND collision_id <= $4))
       AND (received_at_us > $5 OR (received_at_us = $5 AND collision_id >= $6))
     ORDER BY received_at_us DESC, collision_id DESC LIMIT $7";

/// The `{contract}` condition of the collision pages on `$2`, the contract: one statement
/// for the whole log and one for a contract, rather than `$2 IS NULL OR contract_name =
/// $2`, which a generic plan cannot search the contract's index with (a quiet contract's
/// page read every collision of a noisy one).
pub fn contract_filter(by_contract: bool) -> &'static str {
    if by_contract {
        "AND contract_name = CAST($2 AS TEXT)"
    } else {
        "AND CAST($2 AS TEXT) IS NULL"
    }
}

/// Most payload bytes (stored and incoming, as stored) one page of collisions loads: a
/// page stops at the entry that reaches it (always holding at least one), and its
/// `next_cursor` goes on from there. 200 entries of two 5 MiB payloads would be 2 GiB.
pub const COLLISIONS_PAGE_BYTES_MAX: i64 = 32 * 1024 * 1024;

const SELECT_COLLISION: &str =
    "SELECT {columns} FROM event_collisions WHERE tenant_id = $1 AND collision_id = $2";

/// A collision's key, new or not ([`StoreTx::log_collision`]).
const INSERT_COLLISION_KEY: &str = "INSERT INTO event_collision_keys
     (tenant_id, contract_name, event_id, stored_fingerprint, incoming_fingerprint)
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING";

/// Logs one collision, in the caller's transaction ([`StoreTx::log_collision`] then
/// queues it for every live webhook of the tenant).
pub(crate) const INSERT_COLLISION_RETURNING: &str = "INSERT INTO event_collisions
     (tenant_id, contract_name, event_id, contract_version, stored_fingerprint, incoming_fingerprint,
      stored_payload, incoming_payload, received_at_us, source)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING collision_id";

/// Most rows one statement of a purge deletes ([`Store::purge_webhook_deliveries`],
/// [`Store::idempotency_purge`]): a backlog (a shortened retention, a first purge of a
/// large table) is deleted in many short transactions, none holding many row locks or,
/// on SQLite, the write lock for long.
pub const PURGED_AT_ONCE: i64 = 10_000;

/// A pause between two statements of a purge, so a writer of another process (SQLite's
/// one write lock, retried by its busy handler) gets its turn in a long purge.
const PURGE_PAUSE: std::time::Duration = std::time::Duration::from_millis(10);

/// A collision's deliveries, one per live webhook of its tenant, due at once (`$3`, the
/// time of logging on the store's clock, which also orders a tenant's deliveries).
const INSERT_DELIVERIES: &str = "INSERT INTO webhook_deliveries
     (tenant_id, delivery_id, webhook_id, collision_id, created_at_us, next_attempt_at_us)
     SELECT tenant_id, webhook_id || '.' || CAST(CAST($2 AS BIGINT) AS TEXT), webhook_id, $2, $3, $3
     FROM webhooks WHERE tenant_id = $1 AND deleted_at_us IS NULL
     ON CONFLICT DO NOTHING";

/// A webhook endpoint of a tenant.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, Serialize)]
pub struct Webhook {
    /// `whk_` + 16 hex.
    pub webhook_id: String,
    /// Where collisions are posted.
    pub url: String,
    /// When it was created, microseconds since the epoch.
    pub created_at_us: i64,
    /// The secret its deliveries are signed with (`whsec_…`); `None` for a webhook
    /// registered before migration `0024`, whose deliveries go unsigned.
    #[serde(skip)]
    pub signing_secret: Option<String>,
}

/// Serialises a tenant's webhook registrations on PostgreSQL (SQLite's `BEGIN IMMEDIATE`
/// holds the write lock already), so the count bound holds under concurrency.
const PG_WEBHOOKS_LOCK: &str =
    "SELECT pg_advisory_xact_lock(hashtext('webhooks:' || CAST($1 AS TEXT)))";

/// Most live webhooks per tenant.
pub const WEBHOOKS_PER_TENANT_MAX: i64 = 20;

/// A delivery the dispatcher claimed: where to post which collision.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ClaimedDelivery {
    /// The tenant.
    pub tenant_id: String,
    /// The receiver's deduplication key: `{webhook_id}.{collision_id}`.
    pub delivery_id: String,
    /// The webhook.
    pub webhook_id: String,
    /// The collision to post.
    pub collision_id: i64,
    /// Attempts so far, this one included.
    pub attempts: i64,
}

/// Tenants with undelivered rows a claim reads, at most, per tenant it can take.
const CLAIM_READS_PER_TURN: usize = 4;

/// The tenants with an undelivered row due by `$1` (a lease may still hold it), by a
/// skip through `webhook_deliveries_due_by_tenant` (an index probe or two a tenant,
/// whatever their backlogs). Tenants whose deliveries all wait for a later retry are
/// left out here: the claim read each of them again every poll (a soak review: 182 reads
/// a second on an idle server whose 87 tenants' receivers were down).
const OUTBOX_OWNERS: &str = "WITH RECURSIVE owners(tenant_id) AS (
       SELECT (SELECT tenant_id FROM webhook_deliveries WHERE delivered_at_us IS NULL
               ORDER BY tenant_id LIMIT 1)
       UNION ALL
       SELECT (SELECT d.tenant_id FROM webhook_deliveries d
               WHERE d.delivered_at_us IS NULL AND d.tenant_id > o.tenant_id
               ORDER BY d.tenant_id LIMIT 1)
       FROM owners o WHERE o.tenant_id IS NOT NULL)
     SELECT o.tenant_id FROM owners o WHERE o.tenant_id IS NOT NULL
       AND (SELECT MIN(d.next_attempt_at_us) FROM webhook_deliveries d
            WHERE d.tenant_id = o.tenant_id AND d.delivered_at_us IS NULL) <= $1";

/// One tenant's first `$3` due deliveries, oldest first (`$2` the store's time).
const TENANT_DUE: &str = "SELECT delivery_id FROM webhook_deliveries
     WHERE tenant_id = $1 AND delivered_at_us IS NULL AND next_attempt_at_us <= $2
       AND lease_until_us <= $2
     ORDER BY next_attempt_at_us, delivery_id LIMIT $3";

/// Leases the chosen deliveries (`{chosen}`: `($4, $5), ($6, $7), …`, tenant and id) that are still due
/// and unleased: a dispatcher that leased one meanwhile keeps it (on PostgreSQL this
/// update waits for its lock and checks the row again).
const LEASE_DELIVERIES: &str = "UPDATE webhook_deliveries
     SET lease_until_us = $2, lease_owner = $3, attempts = attempts + 1
     WHERE delivered_at_us IS NULL AND next_attempt_at_us <= $1 AND lease_until_us <= $1
       AND (tenant_id, delivery_id) IN ({chosen})
     RETURNING tenant_id, delivery_id, webhook_id, collision_id, CAST(attempts AS BIGINT) AS attempts";

/// How a claim shares the dispatcher between tenants ([`Store::claim_deliveries_fairly`]).
#[derive(Debug, Clone, Default)]
pub struct ClaimTurns {
    /// The tenant the previous claim took last: this one starts after it.
    pub after: Option<String>,
    /// Most deliveries of one tenant in flight at once, those being posted included
    /// (`None`: the claim's limit).
    pub per_tenant: Option<u32>,
    /// Each tenant's deliveries being posted now: its share of this claim is
    /// `per_tenant` less these.
    pub in_flight: std::collections::HashMap<String, u32>,
}

/// What a claim took, and where the next one goes on from.
#[derive(Debug, Clone, Default)]
pub struct Claim {
    /// The leased deliveries.
    pub deliveries: Vec<ClaimedDelivery>,
    /// The last tenant this claim read when it could not read every tenant with a
    /// backlog (the next claim's [`ClaimTurns::after`]); `None` when it read them all.
    pub after: Option<String>,
}

/// Usage of one connection pool, sampled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolUsage {
    /// `writer`, `reader` (SQLite) or `pool` (PostgreSQL).
    pub pool: &'static str,
    /// Open connections.
    pub open: u32,
    /// Open and idle.
    pub idle: u32,
    /// The configured maximum.
    pub max: u32,
}

impl Store {
    /// Per bucket and series (contract, source): inserted, duplicates and collisions of
    /// the calls that arrived in `[since, until)`.
    pub async fn duplicate_trend(
        &self,
        tenant: &TenantId,
        query: &TrendQuery,
    ) -> Result<Vec<TrendRow>, StoreError> {
        Ok(with_pool!(self, reader, |pool| sqlx::query_as(
            SELECT_TREND
        )
        .bind(tenant.as_str())
        .bind(query.since_us)
        .bind(query.until_us)
        .bind(query.bucket.width_us())
        .bind(query.contract.as_deref())
        .bind(query.source.as_ref().map(IngestSource::as_str))
        .fetch_all(pool)
        .await?))
    }

    /// A page of the tenant's collisions, newest first: at most `query.limit` entries
    /// and, past the first, no more than [`COLLISIONS_PAGE_BYTES_MAX`] of payloads; the
    /// flag says whether older entries follow. Rows are never updated, so the second
    /// read, bounded by the first's newest and oldest entries and by its count, finds the
    /// same rows unless one committed between the reads falls inside that range.
    pub async fn collisions_page(
        &self,
        tenant: &TenantId,
        query: &CollisionsQuery,
    ) -> Result<(Vec<CollisionEntry>, bool), StoreError> {
        let by_contract = query.contract.is_some();
        let sql = SELECT_COLLISIONS_PAGE_SIZES.replace("{contract}", contract_filter(by_contract));
        let sizes: Vec<(i64, i64, i64)> = with_pool!(self, reader, |pool| sqlx::query_as(&sql)
            .bind(tenant.as_str())
            .bind(query.contract.as_deref())
            .bind(query.since_us)
            .bind(query.before.map(|c| c.received_at_us))
            .bind(query.before.map(|c| c.collision_id))
            .bind(i64::from(query.limit))
            .fetch_all(pool)
            .await?);
        let taken = crate::page_within_bytes(sizes.iter().map(|s| s.2), COLLISIONS_PAGE_BYTES_MAX);
        let more = taken < sizes.len() || sizes.len() == query.limit as usize;
        let (Some(newest), Some(oldest)) = (
            sizes.first(),
            taken.checked_sub(1).and_then(|i| sizes.get(i)),
        ) else {
            return Ok((Vec::new(), false));
        };
        let sql = SELECT_COLLISIONS_BETWEEN
            .replace("{columns}", &self.collision_columns())
            .replace("{contract}", contract_filter(by_contract));
        let rows = with_pool!(self, reader, |pool| sqlx::query_as(&sql)
            .bind(tenant.as_str())
            .bind(query.contract.as_deref())
            .bind(newest.0)
            .bind(newest.1)
            .bind(oldest.0)
            .bind(oldest.1)
            .bind(i64::try_from(taken).unwrap_or(i64::MAX))
            .fetch_all(pool)
            .await?);
        // A row that arrived between the reads pushed the oldest out: it follows.
        let pushed = rows.last().is_some_and(|last: &CollisionEntry| {
            (last.received_at_us, last.collision_id) != (oldest.0, oldest.1)
        });
        Ok((rows, more || pushed))
    }

    /// One collision of the tenant.
    pub async fn collision(
        &self,
        tenant: &str,
        collision_id: i64,
    ) -> Result<Option<CollisionEntry>, StoreError> {
        let sql = SELECT_COLLISION.replace("{columns}", &self.collision_columns());
        Ok(with_pool!(self, reader, |pool| sqlx::query_as(&sql)
            .bind(tenant)
            .bind(collision_id)
            .fetch_optional(pool)
            .await?))
    }

    /// The transport pointers of the contract version `entry` was identified under (a
    /// built-in contract's, Segment's as its payloads are stored, OpenLineage's with
    /// `*/_producer` and `*/_schemaURL` for those keys at any depth, or the tenant's
    /// registered version), which its diff marks; none for a version not found.
    pub async fn collision_transport(
        &self,
        tenant: &str,
        entry: &CollisionEntry,
    ) -> Result<Vec<String>, StoreError> {
        let pointers = |contract: &traqlyte_identity::Contract| -> Vec<String> {
            contract.transport().map(str::to_string).collect()
        };
        if entry.contract == traqlyte_identity::segment::MESSAGE_CONTRACT {
            // The payload is the message as stored, not as sent.
            let stored = traqlyte_identity::segment::STORED_TRANSPORT_POINTERS;
            return Ok(stored.iter().map(|p| p.to_string()).collect());
        }
        if entry.contract == traqlyte_identity::openlineage::RUN_EVENT_CONTRACT {
            // Facets' own metadata keys are left out of the fingerprint at any depth.
            let mut all = pointers(traqlyte_identity::openlineage::run_event_contract());
            let keys = traqlyte_identity::openlineage::METADATA_KEYS;
            all.extend(keys.iter().map(|key| format!("*/{key}")));
            return Ok(all);
        }
        let (Ok(name), Ok(version)) = (
            traqlyte_identity::ContractName::parse(&entry.contract),
            u32::try_from(entry.contract_version),
        ) else {
            return Ok(Vec::new());
        };
        let tenant = TenantId::from_stored(tenant.to_string());
        let contract = self.contract(&tenant, &name, Some(version)).await?;
        Ok(contract.as_ref().map(pointers).unwrap_or_default())
    }

    /// The columns of [`CollisionEntry`]; PostgreSQL stores the event id as text too in
    /// this log (it is a log, not a key), so both read it the same way.
    fn collision_columns(&self) -> String {
        COLLISION_COLUMNS.to_string()
    }

    /// Registers a webhook whose deliveries are signed with `signing_secret`, or returns
    /// the tenant's live webhook of the same URL, with its own secret (`false`: nothing
    /// created, so a retried request adds none); `None` when the tenant already has
    /// [`WEBHOOKS_PER_TENANT_MAX`] live ones.
    pub async fn create_webhook(
        &self,
        tenant: &TenantId,
        url: &str,
        signing_secret: &str,
        now_us: i64,
    ) -> Result<Option<(Webhook, bool)>, StoreError> {
        let mut tx = self.begin().await?;
        // The count and the insert in one transaction; on PostgreSQL the tenant's
        // webhooks are serialised by an advisory lock on the tenant.
        if let crate::tx::TxInner::Postgres(conn) = &mut tx.inner {
            sqlx::query(PG_WEBHOOKS_LOCK)
                .bind(tenant.as_str())
                .execute(&mut **conn)
                .await?;
        }
        let live: i64 = with_tx!(tx, |conn| sqlx::query_scalar(
            "SELECT COUNT(*) FROM webhooks WHERE tenant_id = $1 AND deleted_at_us IS NULL",
        )
        .bind(tenant.as_str())
        .fetch_one(&mut *conn)
        .await?);
        let existing: Option<Webhook> = with_tx!(tx, |conn| sqlx::query_as(
            "SELECT webhook_id, url, created_at_us, signing_secret FROM webhooks
             WHERE tenant_id = $1 AND url = $2 AND deleted_at_us IS NULL"
        )
        .bind(tenant.as_str())
        .bind(url)
        .fetch_optional(&mut *conn)
        .await?);
        if let Some(webhook) = existing {
            return Ok(Some((webhook, false)));
        }
        if live >= WEBHOOKS_PER_TENANT_MAX {
            return Ok(None);
        }
        let webhook = Webhook {
            webhook_id: format!("whk_{}", random_hex(8)),
            url: url.to_string(),
            created_at_us: now_us,
            signing_secret: Some(signing_secret.to_string()),
        };
        with_tx!(tx, |conn| {
            sqlx::query(
                "INSERT INTO webhooks (tenant_id, webhook_id, url, created_at_us, signing_secret)
             VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(tenant.as_str())
            .bind(&webhook.webhook_id)
            .bind(&webhook.url)
            .bind(now_us)
            .bind(signing_secret)
            .execute(&mut *conn)
            .await
            .map(|_| ())?
        });
        tx.commit().await?;
        Ok(Some((webhook, true)))
    }

    /// The tenant's live webhooks, oldest first.
    pub async fn webhooks(&self, tenant: &TenantId) -> Result<Vec<Webhook>, StoreError> {
        Ok(with_pool!(self, reader, |pool| sqlx::query_as(
            "SELECT webhook_id, url, created_at_us, signing_secret FROM webhooks
             WHERE tenant_id = $1 AND deleted_at_us IS NULL ORDER BY created_at_us, webhook_id"
        )
        .bind(tenant.as_str())
        .fetch_all(pool)
        .await?))
    }

    /// Marks a webhook deleted; `false` if the tenant has no such live webhook.
    pub async fn delete_webhook(
        &self,
        tenant: &TenantId,
        webhook_id: &str,
        now_us: i64,
    ) -> Result<bool, StoreError> {
        let done = with_pool!(self, writer, |pool| sqlx::query(
            "UPDATE webhooks SET deleted_at_us = $3
             WHERE tenant_id = $1 AND webhook_id = $2 AND deleted_at_us IS NULL"
        )
        .bind(tenant.as_str())
        .bind(webhook_id)
        .bind(now_us)
        .execute(pool)
        .await?
        .rows_affected());
        Ok(done == 1)
    }

    /// Claims at most `limit` due deliveries for `lease_us` under `owner` (any server
    /// may run the dispatcher: a row is leased to one of them at a time). Due and leased
    /// are judged on the store's clock, so a dispatcher whose clock runs ahead cannot
    /// claim a delivery another still holds.
    pub async fn claim_deliveries(
        &self,
        owner: &str,
        lease_us: i64,
        limit: u32,
    ) -> Result<Vec<ClaimedDelivery>, StoreError> {
        Ok(self
            .claim_deliveries_fairly(owner, lease_us, limit, &ClaimTurns::default())
            .await?
            .deliveries)
    }

    /// [`Store::claim_deliveries`] taking each tenant's oldest due deliveries in turn
    /// (each tenant's first, then each one's second, …), for each tenant at most
    /// `turns.per_tenant` less its deliveries in flight (a tenant's hanging receivers
    /// hold only its own share of the dispatcher), and at most `limit` tenants (each
    /// gets one at least), from the one after `turns.after` on: the next claim goes on
    /// from the last tenant this one read, so every tenant gets its turn however many
    /// have backlogs. One index probe a tenant with undelivered rows, and one read of
    /// each tenant taken: a backlog of any size costs its tenant's share only (numbering
    /// every due row, as the claim did, took 650 ms a poll at 60,000 rows). The candidates are read first, then
    /// leased by one update that takes only rows still due and unleased: another
    /// dispatcher's claim meanwhile keeps what it took.
    pub async fn claim_deliveries_fairly(
        &self,
        owner: &str,
        lease_us: i64,
        limit: u32,
        turns: &ClaimTurns,
    ) -> Result<Claim, StoreError> {
        let now_us = self.clock_us().await?;
        let owners: Vec<String> =
            with_pool!(self, reader, |pool| sqlx::query_scalar(OUTBOX_OWNERS)
                .bind(now_us)
                .fetch_all(pool)
                .await?);
        // From the tenant after the last one a claim took, around.
        let split = turns
            .after
            .as_ref()
            .map_or(0, |after| owners.partition_point(|t| t <= after));
        let share = |tenant: &String| {
            let busy = turns.in_flight.get(tenant).copied().unwrap_or(0);
            limit.min(turns.per_tenant.unwrap_or(limit).saturating_sub(busy))
        };
        let sharing = owners[split..]
            .iter()
            .chain(&owners[..split])
            .map(|t| (t, share(t)))
            .filter(|(_, share)| *share > 0);
        // Tenants with due rows, at most `limit`; a tenant whose rows all wait for a
        // retry takes no turn, and a claim reads at most CLAIM_READS_PER_TURN times as
        // many tenants as it can take.
        let mut queues: Vec<(String, std::vec::IntoIter<String>)> = Vec::new();
        let (mut read, mut last_read, mut after) = (0usize, None, None);
        let reads_max = (limit as usize).saturating_mul(CLAIM_READS_PER_TURN);
        for (tenant, share) in sharing {
            if queues.len() == limit as usize || read == reads_max {
                after = last_read;
                break;
            }
            read += 1;
            last_read = Some(tenant.clone());
            let due: Vec<String> = with_pool!(self, reader, |pool| sqlx::query_scalar(TENANT_DUE)
                .bind(tenant)
                .bind(now_us)
                .bind(i64::from(share))
                .fetch_all(pool)
                .await?);
            if !due.is_empty() {
                queues.push((tenant.clone(), due.into_iter()));
            }
        }
        let mut chosen: Vec<(String, String)> = Vec::new();
        while chosen.len() < limit as usize {
            let before = chosen.len();
            for (tenant, due) in queues.iter_mut() {
                if chosen.len() == limit as usize {
                    break;
                }
                if let Some(id) = due.next() {
                    chosen.push((tenant.clone(), id));
                }
            }
            if chosen.len() == before {
                break;
            }
        }
        if chosen.is_empty() {
            return Ok(Claim {
                deliveries: Vec::new(),
                after,
            });
        }
        let pairs: Vec<String> = (0..chosen.len())
            .map(|i| format!("(${}, ${})", 2 * i + 4, 2 * i + 5))
            .collect();
        let sql = LEASE_DELIVERIES.replace("{chosen}", &pairs.join(", "));
        let mut tx = self.begin().await?;
        let claimed = with_tx!(tx, |conn| {
            let mut query = sqlx::query_as(&sql)
                .bind(now_us)
                .bind(now_us.saturating_add(lease_us))
                .bind(owner);
            for (tenant, id) in &chosen {
                query = query.bind(tenant).bind(id);
            }
            query.fetch_all(&mut *conn).await?
        });
        tx.commit().await?;
        Ok(Claim {
            deliveries: claimed,
            after,
        })
    }

    /// Extends a claimed delivery's lease to `lease_us` from now on the store's clock;
    /// false when `owner` no longer holds it (its lease ran out and another dispatcher
    /// claimed it, or it was settled), and then the caller must not post it. A lease run
    /// out that nobody claimed is renewed: the owner token alone decides.
    pub async fn renew_delivery_lease(
        &self,
        delivery: &ClaimedDelivery,
        owner: &str,
        lease_us: i64,
    ) -> Result<bool, StoreError> {
        let now_us = self.clock_us().await?;
        let done = with_pool!(self, writer, |pool| sqlx::query(
            "UPDATE webhook_deliveries SET lease_until_us = $3
             WHERE tenant_id = $1 AND delivery_id = $2 AND lease_owner = $4
               AND delivered_at_us IS NULL"
        )
        .bind(&delivery.tenant_id)
        .bind(&delivery.delivery_id)
        .bind(now_us.saturating_add(lease_us))
        .bind(owner)
        .execute(pool)
        .await?
        .rows_affected());
        Ok(done == 1)
    }

    /// Records a delivery's end: delivered (or dropped) when `retry_after_us` is `None`,
    /// else released until that long from now on the store's clock. Only the lease's
    /// owner may settle it.
    pub async fn settle_delivery(
        &self,
        delivery: &ClaimedDelivery,
        owner: &str,
        retry_after_us: Option<i64>,
        error: Option<&str>,
    ) -> Result<bool, StoreError> {
        let now_us = self.clock_us().await?;
        let retry_at_us = retry_after_us.map(|after| now_us.saturating_add(after));
        let done = with_pool!(self, writer, |pool| sqlx::query(
            "UPDATE webhook_deliveries
             SET delivered_at_us = CASE WHEN CAST($4 AS BIGINT) IS NULL THEN $3 ELSE NULL END,
                 next_attempt_at_us = COALESCE(CAST($4 AS BIGINT), next_attempt_at_us),
                 lease_until_us = 0, lease_owner = NULL, last_error = $5
             WHERE tenant_id = $1 AND delivery_id = $2 AND lease_owner = $6"
        )
        .bind(&delivery.tenant_id)
        .bind(&delivery.delivery_id)
        .bind(now_us)
        .bind(retry_at_us)
        .bind(error)
        .bind(owner)
        .execute(pool)
        .await?
        .rows_affected());
        Ok(done == 1)
    }

    /// Gives back a claimed delivery that was never posted (the server was stopping
    /// between the claim and the post), due at once and without the attempt its claim
    /// counted: restarts must not bring a receiver's backoff or abandonment nearer. Only
    /// the lease's owner may give it back.
    pub async fn release_unposted_delivery(
        &self,
        delivery: &ClaimedDelivery,
        owner: &str,
        reason: &str,
    ) -> Result<bool, StoreError> {
        let done = with_pool!(self, writer, |pool| sqlx::query(
            "UPDATE webhook_deliveries
             SET attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END,
                 lease_until_us = 0, lease_owner = NULL, last_error = $3
             WHERE tenant_id = $1 AND delivery_id = $2 AND lease_owner = $4
               AND delivered_at_us IS NULL"
        )
        .bind(&delivery.tenant_id)
        .bind(&delivery.delivery_id)
        .bind(reason)
        .bind(owner)
        .execute(pool)
        .await?
        .rows_affected());
        Ok(done == 1)
    }

    /// The URL of a live webhook and the secret its deliveries are signed with; `None`
    /// once it was deleted (its deliveries are then dropped).
    pub async fn webhook_target(
        &self,
        tenant: &str,
        webhook_id: &str,
    ) -> Result<Option<(String, Option<String>)>, StoreError> {
        Ok(with_pool!(self, reader, |pool| {
            sqlx::query_as(
                "SELECT url, signing_secret FROM webhooks
             WHERE tenant_id = $1 AND webhook_id = $2 AND deleted_at_us IS NULL",
            )
            .bind(tenant)
            .bind(webhook_id)
            .fetch_optional(pool)
            .await?
        }))
    }

    /// Deletes deliveries posted or abandoned (`delivered_at_us` set: never claimed
    /// again) before `older_than_us` ago on the store's clock, all tenants, in
    /// statements of at most [`PURGED_AT_ONCE`] rows; returns how many. Deliveries still
    /// due are never touched.
    pub async fn purge_webhook_deliveries(&self, older_than_us: i64) -> Result<u64, StoreError> {
        self.purge_in_chunks(
            "DELETE FROM webhook_deliveries WHERE (tenant_id, delivery_id) IN (
               SELECT tenant_id, delivery_id FROM webhook_deliveries
               WHERE delivered_at_us IS NOT NULL AND delivered_at_us < $1 LIMIT $2)",
            older_than_us,
        )
        .await
    }

    /// Runs `delete`, a statement deleting at most `$2` rows older than `$1` (a time on
    /// the store's clock: now less `older_than_us`, read once), with `$2` =
    /// [`PURGED_AT_ONCE`], until a run deletes fewer; returns how many in all. Each
    /// statement commits on its own, so a purge stopped half-way (its deadline, a
    /// restart) keeps what it deleted and the next one goes on.
    pub(crate) async fn purge_in_chunks(
        &self,
        delete: &'static str,
        older_than_us: i64,
    ) -> Result<u64, StoreError> {
        let before = self.clock_us().await?.saturating_sub(older_than_us);
        let mut purged = 0;
        loop {
            let done = with_pool!(self, writer, |pool| sqlx::query(delete)
                .bind(before)
                .bind(PURGED_AT_ONCE)
                .execute(pool)
                .await?
                .rows_affected());
            purged += done;
            if done < PURGED_AT_ONCE as u64 {
                return Ok(purged);
            }
            tokio::time::sleep(PURGE_PAUSE).await;
        }
    }

    /// Deliveries not yet delivered, all tenants (for the dispatcher's gauge and tests).
    pub async fn pending_deliveries(&self) -> Result<i64, StoreError> {
        Ok(with_pool!(self, reader, |pool| sqlx::query_scalar(
            "SELECT COUNT(*) FROM webhook_deliveries WHERE delivered_at_us IS NULL"
        )
        .fetch_one(pool)
        .await?))
    }

    /// The pools' usage, sampled now.
    pub fn pool_usage(&self) -> Vec<PoolUsage> {
        match &self.backend {
            crate::Backend::Sqlite(s) => {
                vec![usage("writer", &s.writer), usage("reader", &s.reader)]
            }
            crate::Backend::Postgres(p) => vec![usage("pool", &p.pool)],
        }
    }
}

fn usage<DB: sqlx::Database>(pool: &'static str, p: &sqlx::Pool<DB>) -> PoolUsage {
    PoolUsage {
        pool,
        open: p.size(),
        idle: u32::try_from(p.num_idle()).unwrap_or(u32::MAX),
        max: p.options().get_max_connections(),
    }
}

impl StoreTx {
    /// Logs one collision under the transaction's source and queues a delivery for each
    /// live webhook of the tenant; returns the collision's id. A collision logged before
    /// (the same event id, stored and incoming fingerprints: a retried `409`, a
    /// redelivery, a backfill run again) is not logged again: `None` (migration `0034`).
    pub(crate) async fn log_collision(
        &mut self,
        tenant: &TenantId,
        row: &CollisionInsert<'_>,
        now: i64,
    ) -> Result<Option<i64>, StoreError> {
        let new = with_tx!(self, |conn| sqlx::query(INSERT_COLLISION_KEY)
            .bind(tenant.as_str())
            .bind(row.contract)
            .bind(row.event_id)
            .bind(row.stored_fingerprint)
            .bind(row.incoming_fingerprint)
            .execute(&mut *conn)
            .await?
            .rows_affected());
        if new == 0 {
            return Ok(None);
        }
        let source = self.source.as_str().to_string();
        let id: i64 = with_tx!(self, |conn| sqlx::query_scalar(INSERT_COLLISION_RETURNING)
            .bind(tenant.as_str())
            .bind(row.contract)
            .bind(row.event_id)
            .bind(row.contract_version)
            .bind(row.stored_fingerprint)
            .bind(row.incoming_fingerprint)
            .bind(row.stored_payload)
            .bind(row.incoming_payload)
            .bind(now)
            .bind(&source)
            .fetch_one(&mut *conn)
            .await?);
        with_tx!(self, |conn| sqlx::query(INSERT_DELIVERIES)
            .bind(tenant.as_str())
            .bind(id)
            .bind(now)
            .execute(&mut *conn)
            .await
            .map(|_| ())?);
        Ok(Some(id))
    }
}

/// The columns of one collision row.
pub(crate) struct CollisionInsert<'a> {
    pub(crate) contract: &'a str,
    pub(crate) event_id: &'a str,
    pub(crate) contract_version: i64,
    pub(crate) stored_fingerprint: &'a str,
    pub(crate) incoming_fingerprint: &'a str,
    pub(crate) stored_payload: &'a str,
    pub(crate) incoming_payload: &'a str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_stops_at_its_byte_budget_but_holds_one_entry_at_least() {
        let page = |sizes: &[i64]| crate::page_within_bytes(sizes.iter().copied(), 10);
        assert_eq!(page(&[]), 0);
        assert_eq!(page(&[3, 3, 3]), 3);
        assert_eq!(page(&[3, 3, 4, 1]), 3, "the sum may reach the budget");
        assert_eq!(page(&[3, 3, 5, 1]), 2, "but not pass it");
        assert_eq!(page(&[50, 1]), 1, "an entry alone larger than the budget");
        assert_eq!(page(&[i64::MAX, i64::MAX]), 1);
    }

    #[test]
    fn source_labels_parse_in_their_three_shapes_only() {
        assert_eq!(IngestSource::parse("http"), Some(IngestSource::http()));
        assert_eq!(
            IngestSource::parse("backfill"),
            Some(IngestSource::backfill())
        );
        for label in ["nats:EVENTS", "segment:src_0011223344556677"] {
            let parsed = IngestSource::parse(label).expect("a label");
            assert_eq!(parsed.as_str(), label);
        }
        assert!(IngestSource::parse("ftp").is_none());
        assert!(IngestSource::parse("nats:a\0b").is_none());
    }

    #[test]
    fn a_long_stream_name_is_cut_on_a_char_boundary() {
        let long = "é".repeat(400);
        let source = IngestSource::nats(&long);
        assert!(source.as_str().len() <= SOURCE_BYTES_MAX);
        assert!(source.as_str().starts_with("nats:é"));
    }
}

//! Dead letters: broker messages a consumer could not store (bad JSON, an unknown
//! contract, an identity error), kept with the reason and their raw bytes so an operator
//! can read, fix and re-publish them. The consumer writes them before it terminates the
//! message on the broker, so a message is never dropped unseen; the key is the message's
//! place in its stream and the time the broker received it, so a redelivery after a crash
//! adds no second row while a re-created stream's message at an old place is still kept.

use crate::tx::with_pool;
use crate::{Store, StoreError, TenantId};

/// Most dead letters one page of [`Store::dead_letters`] holds.
pub const DEAD_LETTERS_PAGE_MAX: u32 = 1_000;

/// A message refused by a consumer, to be recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewDeadLetter {
    /// The broker stream it came from.
    pub stream: String,
    /// Its sequence number in that stream (JetStream's are u64; the store's column is
    /// BIGINT, which 9.2e18 messages would take to overflow).
    pub stream_sequence: i64,
    /// When the broker received it (ns since the epoch; JetStream's `published`, the same
    /// on every redelivery): a stream deleted and re-created under its name restarts its
    /// sequences, and this tells its messages from the old ones at the same place.
    pub published_ns: i64,
    /// The subject it was published on.
    pub subject: String,
    /// A stable code: `invalid_json`, `unknown_contract`, `unsupported_subject`, `invalid_contract_version`, `segment_source_not_configured`, `source_revoked`, `outside_horizon`,
    /// or the identity error's code (`missing_required_field`, …).
    pub reason: String,
    /// The explanation, for people.
    pub detail: String,
    /// The message's bytes, exactly as received.
    pub raw: Vec<u8>,
}

/// A stored dead letter.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct DeadLetter {
    /// The broker stream it came from.
    pub stream: String,
    /// Its sequence number in that stream.
    pub stream_sequence: i64,
    /// When the broker received it (ns since the epoch; 0 for letters recorded before
    /// migration 0023).
    pub published_ns: i64,
    /// The subject it was published on.
    pub subject: String,
    /// A stable code (see [`NewDeadLetter::reason`]).
    pub reason: String,
    /// The explanation, for people.
    pub detail: String,
    /// The message's bytes, exactly as received.
    pub raw: Vec<u8>,
    /// When it was recorded (µs since the epoch).
    pub received_at_us: i64,
}

const INSERT_DEAD_LETTER: &str = "INSERT INTO dead_letters
     (tenant_id, stream, stream_sequence, published_ns, subject, reason, detail, raw,
      received_at_us)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
     ON CONFLICT DO NOTHING";

/// Where a page of dead letters ended: the last letter's place in their order, newest
/// first by time recorded, then by stream, then newest in the stream (its primary key
/// completes the order, so it is total).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterCursor {
    /// When the last letter was recorded (µs since the epoch).
    pub received_at_us: i64,
    /// Its stream.
    pub stream: String,
    /// Its sequence in that stream.
    pub stream_sequence: i64,
    /// When the broker received it (ns since the epoch).
    pub published_ns: i64,
}

/// A tenant's dead letters after a cursor (`$2`–`$5`, all `NULL` for the first page) in
/// the order of [`DeadLetterCursor`], newest first, at most `$6`; `{columns}` names what is
/// read. One statement, so a page is one consistent read.
///
/// The bound on `received_at_us` alone repeats the cursor's first column so that the
/// index range starts at the cursor: PostgreSQL derives no range from the `OR` below, and
/// read a page 500,000 letters deep by filtering out every newer one (63 ms a page, against
/// 0.08 ms with the bound, on either plan; `plans::KEYSET_PAGES`).
pub(crate) const SELECT_DEAD_LETTERS: &str = "SELECT {columns}
     FROM dead_letters
     WHERE tenant_id = $1
       AND received_at_us <= COALESCE(CAST($2 AS BIGINT), 9223372036854775807)
       AND (CAST($2 AS BIGINT) IS NULL OR received_at_us < CAST($2 AS BIGINT)
            OR (received_at_us = CAST($2 AS BIGINT)
                AND (stream > CAST($3 AS TEXT)
                     OR (stream = CAST($3 AS TEXT)
                         AND (stream_sequence < CAST($4 AS BIGINT)
                              OR (stream_sequence = CAST($4 AS BIGINT)
                                  AND published_ns < CAST($5 AS BIGINT)))))))
     ORDER BY received_at_us DESC, stream, stream_sequence DESC, published_ns DESC
     LIMIT $6";

const DEAD_LETTER_COLUMNS: &str =
    "stream, stream_sequence, published_ns, subject, reason, detail, raw, received_at_us";

const DEAD_LETTER_SIZES: &str = "CAST(octet_length(raw) AS BIGINT)";

/// Most raw bytes one page of dead letters loads: a page stops at the letter that reaches
/// it (always holding at least one), and its cursor goes on from there. A letter is a
/// broker message of up to its `max_payload` (1 MiB by default), answered twice (base64,
/// and text that may escape a byte in 6): a page of 1,000 such letters would have been
/// several GB.
pub const DEAD_LETTERS_PAGE_BYTES_MAX: i64 = 4 * 1024 * 1024;

impl Store {
    /// Records dead letters in one transaction, durable before returning; a letter whose
    /// (stream, sequence, published time) is already recorded is skipped. Returns how many were new.
    pub async fn insert_dead_letters(
        &self,
        tenant: &TenantId,
        letters: &[NewDeadLetter],
    ) -> Result<u64, StoreError> {
        if letters.is_empty() {
            return Ok(0);
        }
        let now_us = crate::now_us();
        let mut tx = self.begin().await?;
        let mut inserted = 0;
        for letter in letters {
            let done = crate::tx::with_tx!(tx, |conn| sqlx::query(INSERT_DEAD_LETTER)
                .bind(tenant.as_str())
                .bind(&letter.stream)
                .bind(letter.stream_sequence)
                .bind(letter.published_ns)
                .bind(crate::without_nul(&letter.subject))
                .bind(crate::without_nul(&letter.reason))
                .bind(crate::without_nul(&letter.detail))
                .bind(&letter.raw)
                .bind(now_us)
                .execute(conn)
                .await?
                .rows_affected());
            inserted += done;
        }
        tx.commit().await?;
        Ok(inserted)
    }

    /// A page of a tenant's dead letters, newest first (see [`DeadLetterCursor`]): at
    /// most `limit` (capped at [`DEAD_LETTERS_PAGE_MAX`]) of those after `before` (the
    /// last one of the previous page) and, past the first, no more than
    /// [`DEAD_LETTERS_PAGE_BYTES_MAX`] of raw bytes; and whether more may follow. A letter committing
    /// after a walk passed its recording time is not listed by that walk.
    pub async fn dead_letters(
        &self,
        tenant: &TenantId,
        before: Option<&DeadLetterCursor>,
        limit: u32,
    ) -> Result<(Vec<DeadLetter>, bool), StoreError> {
        let limit = limit.min(DEAD_LETTERS_PAGE_MAX);
        let sql = SELECT_DEAD_LETTERS.replace("{columns}", DEAD_LETTER_SIZES);
        let sizes: Vec<i64> = with_pool!(self, reader, |pool| {
            sqlx::query_scalar(&sql)
                .bind(tenant.as_str())
                .bind(before.map(|c| c.received_at_us))
                .bind(before.map(|c| c.stream.as_str()))
                .bind(before.map(|c| c.stream_sequence))
                .bind(before.map(|c| c.published_ns))
                .bind(i64::from(limit) + 1)
                .fetch_all(pool)
                .await?
        });
        let fit = crate::page_within_bytes(
            sizes.iter().take(limit as usize).copied(),
            DEAD_LETTERS_PAGE_BYTES_MAX,
        );
        // Letters are never updated: the second read finds the same ones, unless one was
        // recorded between the reads (it then takes a place, and the last one follows).
        let taken = u32::try_from(fit).unwrap_or(limit);
        let sql = SELECT_DEAD_LETTERS.replace("{columns}", DEAD_LETTER_COLUMNS);
        let rows: Vec<DeadLetter> = with_pool!(self, reader, |pool| {
            sqlx::query_as(&sql)
                .bind(tenant.as_str())
                .bind(before.map(|c| c.received_at_us))
                .bind(before.map(|c| c.stream.as_str()))
                .bind(before.map(|c| c.stream_sequence))
                .bind(before.map(|c| c.published_ns))
                .bind(i64::from(taken) + 1)
                .fetch_all(pool)
                .await?
        });
        let (rows, more) = crate::page_of(rows, taken);
        Ok((rows, more || sizes.len() > fit))
    }
}

//! Tenants and their API keys: creation, listing, several keys per tenant, revocation.
//!
//! Only a key's SHA-256 and a short non-secret prefix ([`KeyPrefix`], the first 8 hex
//! digits after `tlk_`) are stored. Revoking marks the row (`revoked_at_us`) and keeps it
//! for audit; authentication reads the row on every request (a group-committed single
//! write may take the tenant from the server's memory, and its batch's own write then
//! checks the key again), so a revocation is refused by every process from its next
//! request on.
//!
//! Tenant names are unique for tenants created by this code: [`Store::create_tenant`]
//! checks and inserts under one lock (`BEGIN IMMEDIATE` on SQLite, an advisory
//! transaction lock on PostgreSQL). There is no unique index on the name because
//! databases from before it may hold duplicates, which [`Store::tenant_by_name`] refuses
//! as ambiguous instead of picking one.

use crate::model::ApiKey;
use crate::tx::{with_pool, with_tx, TxInner};
use crate::{now_us, Store, StoreError, StoreTx, TenantId};
use traqlyte_identity::ContractName;

/// A tenant's name as people type it: 1–128 characters, no control characters, without
/// surrounding whitespace (trimmed by [`TenantName::parse`]), in Unicode NFC and without
/// invisible characters or spaces other than U+0020.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantName(String);

impl TenantName {
    /// The longest name accepted, in characters.
    pub const CHARS_MAX: usize = 128;

    /// Trims and checks a name; the error says what is wrong, for people.
    pub fn parse(text: &str) -> Result<TenantName, String> {
        let name = visible_name(text.trim(), "a tenant name")?;
        if name.is_empty() {
            return Err("a tenant name must not be empty".to_string());
        }
        if name.chars().count() > Self::CHARS_MAX {
            return Err(format!(
                "a tenant name is at most {} characters",
                Self::CHARS_MAX
            ));
        }
        if name.chars().any(char::is_control) {
            return Err("a tenant name must not contain control characters".to_string());
        }
        Ok(TenantName(name))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for TenantName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `name` in Unicode NFC, or why it is refused: it holds an invisible character (a
/// default-ignorable code point: zero-width spaces and joiners, bidirectional controls, a
/// byte-order mark, a soft hyphen, variation selectors, Hangul fillers) or a space other
/// than U+0020 (a no-break or an ideographic space). Names are matched exactly, so
/// without this two tenants or sources could look the same in every list (`é` composed
/// and decomposed, `alpha` and `alpha` with a zero-width space) and an operator copying
/// one would act on the other. `what` begins the error ("a tenant name"). Lengths are
/// counted on the result (NFC may lengthen a text).
pub(crate) fn visible_name(name: &str, what: &str) -> Result<String, String> {
    if let Some(c) = name
        .chars()
        .find(|&c| traqlyte_identity::canonical::invisible(c))
    {
        return Err(format!(
            "{what} must not contain invisible characters or spaces other than U+0020 (found U+{:04X})",
            u32::from(c)
        ));
    }
    Ok(traqlyte_identity::canonical::nfc(name))
}

/// The non-secret part of an API key that names it in lists and revocations: the first
/// 8 hex digits after `tlk_` (32 of the key's 192 random bits, leaving 160 secret).
/// Shown as `tlk_1a2b3c4d`; unique per tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPrefix(String);

impl KeyPrefix {
    /// Hex digits kept.
    pub const HEX_LEN: usize = 8;

    /// Accepts `tlk_1a2b3c4d` or `1a2b3c4d` (hex digits, any case).
    pub fn parse(text: &str) -> Option<KeyPrefix> {
        let hex = text.strip_prefix(ApiKey::PREFIX).unwrap_or(text);
        let ok = hex.len() == Self::HEX_LEN && hex.bytes().all(|b| b.is_ascii_hexdigit());
        ok.then(|| KeyPrefix(hex.to_ascii_lowercase()))
    }

    /// The prefix of a key.
    pub fn of(key: &ApiKey) -> KeyPrefix {
        let hex = &key.expose()[ApiKey::PREFIX.len()..];
        KeyPrefix(hex[..Self::HEX_LEN].to_string())
    }

    /// The stored hex digits, without `tlk_`.
    pub fn hex(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for KeyPrefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", ApiKey::PREFIX, self.0)
    }
}

/// Which key a revocation names: the whole secret (found by hash), or its prefix.
#[derive(Debug, Clone)]
pub enum KeySelector {
    /// The full key; the only way to name a key created before prefixes were stored.
    Key(ApiKey),
    /// The key's prefix.
    Prefix(KeyPrefix),
}

impl KeySelector {
    /// A full key if `text` is one, else a prefix; `None` when it is neither.
    pub fn parse(text: &str) -> Option<KeySelector> {
        let text = text.trim();
        ApiKey::parse(text)
            .map(KeySelector::Key)
            .or_else(|| KeyPrefix::parse(text).map(KeySelector::Prefix))
    }
}

/// A tenant as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantRecord {
    /// Its id.
    pub tenant_id: TenantId,
    /// Its name (as stored; older rows may predate [`TenantName`]'s rules).
    pub name: String,
    /// When it was created.
    pub created_at_us: i64,
    /// Keys not revoked.
    pub active_keys: i64,
}

/// An API key as listed: never the key itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyInfo {
    /// Its prefix; `None` for a key created before prefixes were stored.
    pub prefix: Option<KeyPrefix>,
    /// When it was created.
    pub created_at_us: i64,
    /// When it was revoked; `None` while it works.
    pub revoked_at_us: Option<i64>,
}

/// Most tenants one listing returns.
pub const TENANTS_LIST_MAX: i64 = 10_000;
/// Most keys one tenant's listing returns (revoked ones included, newest kept).
pub const KEYS_LIST_MAX: i64 = 1_000;
/// Fresh keys tried when a new key's prefix is already taken in its tenant (one chance
/// in 2^32 per existing key, so a second attempt is already rare).
const KEY_ATTEMPTS_MAX: usize = 4;
/// PostgreSQL advisory lock that serialises tenant creation, so two processes cannot
/// both find a name free and insert it.
const PG_TENANT_NAME_LOCK: i64 = 0x0074_6e61_6d65_0001; // "tname" in ASCII, then 1

const SELECT_TENANTS: &str = "SELECT t.tenant_id, t.name, t.created_at_us,
       (SELECT COUNT(*) FROM api_keys k WHERE k.tenant_id = t.tenant_id AND k.revoked_at_us IS NULL)
         AS active_keys
     FROM tenants t";
const SELECT_TENANT_IDS_AFTER: &str =
    "SELECT tenant_id FROM tenants WHERE tenant_id > $1 ORDER BY tenant_id LIMIT $2";
const SELECT_KEY_COLUMNS: &str = "SELECT key_prefix, created_at_us, revoked_at_us FROM api_keys";

impl Store {
    /// Creates a tenant and its first API key; the key is returned once and only its
    /// hash and prefix are stored. A name already used by a tenant (or equal to a
    /// tenant's id) is [`StoreError::Conflict`] `tenant_exists`.
    pub async fn create_tenant(&self, name: &TenantName) -> Result<(TenantId, ApiKey), StoreError> {
        let tenant = TenantId::generate();
        let mut tx = self.begin().await?;
        let now = now_us();
        let postgres = matches!(tx.inner, crate::tx::TxInner::Postgres(_));
        let taken: i64 = with_tx!(tx, |conn| {
            if postgres {
                sqlx::query("SELECT pg_advisory_xact_lock($1)")
                    .bind(PG_TENANT_NAME_LOCK)
                    .execute(&mut *conn)
                    .await?;
            }
            sqlx::query_scalar("SELECT COUNT(*) FROM tenants WHERE name = $1 OR tenant_id = $1")
                .bind(name.as_str())
                .fetch_one(&mut *conn)
                .await?
        });
        if taken > 0 {
            return Err(StoreError::Conflict {
                code: "tenant_exists",
                message: format!(
                    "a tenant named {:?} exists already; tenant names are unique",
                    name.as_str()
                ),
            });
        }
        with_tx!(tx, |conn| {
            sqlx::query("INSERT INTO tenants (tenant_id, name, created_at_us) VALUES ($1, $2, $3)")
                .bind(tenant.as_str())
                .bind(name.as_str())
                .bind(now)
                .execute(&mut *conn)
                .await?;
        });
        let (key, _) = tx.insert_api_key(&tenant, now).await?;
        tx.commit().await?;
        Ok((tenant, key))
    }

    /// Every tenant, by name (at most [`TENANTS_LIST_MAX`]).
    pub async fn tenants(&self) -> Result<Vec<TenantRecord>, StoreError> {
        let sql = format!("{SELECT_TENANTS} ORDER BY t.name, t.created_at_us LIMIT $1");
        with_pool!(self, reader, |pool| {
            let rows: Vec<TenantRow> = sqlx::query_as(&sql)
                .bind(TENANTS_LIST_MAX)
                .fetch_all(pool)
                .await?;
            Ok(rows.into_iter().map(TenantRecord::from).collect())
        })
    }

    /// Every tenant's id after `after` (all from the first when `None`), in id order, at
    /// most `limit`: a page, for jobs that must visit every tenant however many there are
    /// (the periodic semantic scan).
    pub async fn tenant_ids_after(
        &self,
        after: Option<&TenantId>,
        limit: u32,
    ) -> Result<Vec<TenantId>, StoreError> {
        let after = after.map_or("", TenantId::as_str);
        let ids: Vec<String> = with_pool!(self, reader, |pool| {
            sqlx::query_scalar(SELECT_TENANT_IDS_AFTER)
                .bind(after)
                .bind(i64::from(limit))
                .fetch_all(pool)
                .await?
        });
        Ok(ids.into_iter().map(TenantId::from_stored).collect())
    }

    /// The tenant named `name`, or whose id is `name`; `None` when there is none. Two
    /// matches (tenants of one name from before names were unique) are
    /// [`StoreError::Conflict`] `tenant_name_ambiguous`, naming their ids.
    pub async fn tenant_by_name(
        &self,
        name: &TenantName,
    ) -> Result<Option<TenantRecord>, StoreError> {
        let sql = format!("{SELECT_TENANTS} WHERE t.name = $1 OR t.tenant_id = $1 ORDER BY t.created_at_us LIMIT 10");
        let found = with_pool!(self, reader, |pool| {
            let rows: Vec<TenantRow> = sqlx::query_as(&sql)
                .bind(name.as_str())
                .fetch_all(pool)
                .await?;
            Ok::<_, StoreError>(rows.into_iter().map(TenantRecord::from).collect::<Vec<_>>())
        })?;
        match found.len() {
            0 | 1 => Ok(found.into_iter().next()),
            _ => {
                let ids: Vec<&str> = found.iter().map(|t| t.tenant_id.as_str()).collect();
                Err(StoreError::Conflict {
                    code: "tenant_name_ambiguous",
                    message: format!(
                        "{:?} names several tenants ({}); name one by its id instead",
                        name.as_str(),
                        ids.join(", ")
                    ),
                })
            }
        }
    }

    /// Adds an API key to a tenant; the key is returned once.
    pub async fn create_api_key(
        &self,
        tenant: &TenantId,
    ) -> Result<(ApiKey, ApiKeyInfo), StoreError> {
        let mut tx = self.begin().await?;
        let created = tx.insert_api_key(tenant, now_us()).await?;
        tx.commit().await?;
        Ok(created)
    }

    /// A tenant's keys, oldest first (at most [`KEYS_LIST_MAX`], the newest kept).
    pub async fn api_keys(&self, tenant: &TenantId) -> Result<Vec<ApiKeyInfo>, StoreError> {
        let sql = format!("SELECT * FROM ({SELECT_KEY_COLUMNS} WHERE tenant_id = $1 ORDER BY created_at_us DESC, key_prefix DESC LIMIT $2) newest ORDER BY created_at_us, key_prefix");
        with_pool!(self, reader, |pool| {
            let rows: Vec<KeyRow> = sqlx::query_as(&sql)
                .bind(tenant.as_str())
                .bind(KEYS_LIST_MAX)
                .fetch_all(pool)
                .await?;
            Ok(rows.into_iter().map(ApiKeyInfo::from).collect())
        })
    }

    /// Revokes one of a tenant's keys by marking its row; authentication refuses it from
    /// the next request on, in every process. Revoking a revoked key changes nothing and
    /// answers the first revocation. `None` when the tenant has no such key.
    pub async fn revoke_api_key(
        &self,
        tenant: &TenantId,
        key: &KeySelector,
    ) -> Result<Option<ApiKeyInfo>, StoreError> {
        let (column, value) = match key {
            KeySelector::Key(key) => ("key_hash", key.hash()),
            KeySelector::Prefix(prefix) => ("key_prefix", prefix.hex().to_string()),
        };
        let update = format!(
            "UPDATE api_keys SET revoked_at_us = $3
             WHERE tenant_id = $1 AND {column} = $2 AND revoked_at_us IS NULL"
        );
        let select = format!("{SELECT_KEY_COLUMNS} WHERE tenant_id = $1 AND {column} = $2");
        let mut tx = self.begin().await?;
        let row = with_tx!(tx, |conn| {
            sqlx::query(&update)
                .bind(tenant.as_str())
                .bind(&value)
                .bind(now_us())
                .execute(&mut *conn)
                .await?;
            let row: Option<KeyRow> = sqlx::query_as(&select)
                .bind(tenant.as_str())
                .bind(&value)
                .fetch_optional(&mut *conn)
                .await?;
            row.map(ApiKeyInfo::from)
        });
        tx.commit().await?;
        Ok(row)
    }

    /// The tenant a working (not revoked) API key belongs to, if any. Read from the
    /// database on every call, never cached, so a revocation holds at once everywhere.
    pub async fn tenant_for_key(&self, key: &ApiKey) -> Result<Option<TenantId>, StoreError> {
        self.tenant_for_key_hash(&key.hash()).await
    }

    /// [`Store::tenant_for_key`] by the key's stored hash (a UI token names its key so).
    pub(crate) async fn tenant_for_key_hash(
        &self,
        key_hash: &str,
    ) -> Result<Option<TenantId>, StoreError> {
        with_pool!(self, reader, |pool| {
            let row: Option<String> = sqlx::query_scalar(SELECT_TENANT_FOR_KEY)
                .bind(key_hash)
                .fetch_optional(pool)
                .await?;
            Ok(row.map(TenantId::from_stored))
        })
    }
}

/// [`StoreTx::check_writes`] on PostgreSQL: the working keys among `$1` (position 0),
/// then the latest version of each `($2[i], $3[i])` contract (position i, from 1).
pub(crate) const PG_CHECK_WRITES: &str = "SELECT 0::int8, key_hash, NULL::int8 FROM api_keys
       WHERE key_hash = ANY($1) AND revoked_at_us IS NULL
     UNION ALL
     SELECT c.i, NULL, (SELECT CAST(MAX(version) AS BIGINT) FROM contracts
                        WHERE tenant_id = c.t AND name = c.n)
     FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS c(t, n, i)";
/// The tenant of a working key, by the key's hash.
pub(crate) const SELECT_TENANT_FOR_KEY: &str =
    "SELECT tenant_id FROM api_keys WHERE key_hash = $1 AND revoked_at_us IS NULL";

impl StoreTx {
    /// The two checks of a batch a server wrote from its per-process memory
    /// (`crates/server/src/lookups.rs`), read in the transaction that would store it:
    /// which of `keys` still work (exist, not revoked; a revoked key's items are refused)
    /// and the latest registered version of each of `contracts` (an event resolved under
    /// an older "latest" is identified again). One statement on PostgreSQL; on SQLite,
    /// whose writer is one at a time, the keys in chunks, then a probe per contract.
    pub async fn check_writes(
        &mut self,
        keys: &[&ApiKey],
        contracts: &[(TenantId, ContractName)],
    ) -> Result<(Vec<bool>, Vec<Option<u32>>), StoreError> {
        if keys.is_empty() && contracts.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let hashes: Vec<String> = keys.iter().map(|k| k.hash()).collect();
        let mut live_hashes = std::collections::HashSet::new();
        let mut latest = vec![None; contracts.len()];
        match &mut self.inner {
            TxInner::Postgres(conn) => {
                let tenants: Vec<&str> = contracts.iter().map(|(t, _)| t.as_str()).collect();
                let names: Vec<&str> = contracts.iter().map(|(_, n)| n.as_str()).collect();
                let rows: Vec<(i64, Option<String>, Option<i64>)> = sqlx::query_as(PG_CHECK_WRITES)
                    .bind(&hashes)
                    .bind(&tenants)
                    .bind(&names)
                    .fetch_all(&mut **conn)
                    .await?;
                for (position, hash, version) in rows {
                    match (position, hash, version) {
                        (0, Some(hash), _) => {
                            live_hashes.insert(hash);
                        }
                        (position, None, version) if position >= 1 => {
                            let slot = usize::try_from(position - 1)
                                .ok()
                                .and_then(|i| latest.get_mut(i))
                                .ok_or_else(|| {
                                    StoreError::Corrupt(format!("check row {position}"))
                                })?;
                            *slot = version
                                .map(|v| {
                                    u32::try_from(v).map_err(|_| {
                                        StoreError::Corrupt(format!("contract version {v}"))
                                    })
                                })
                                .transpose()?;
                        }
                        (position, _, _) => {
                            return Err(StoreError::Corrupt(format!("check row {position}")));
                        }
                    }
                }
            }
            TxInner::Sqlite(conn) => {
                for chunk in hashes.chunks(500) {
                    let sql = format!(
                        "SELECT key_hash FROM api_keys
                         WHERE revoked_at_us IS NULL AND key_hash IN ({})",
                        vec!["?"; chunk.len()].join(", ")
                    );
                    let mut query = sqlx::query_scalar::<_, String>(&sql);
                    for hash in chunk {
                        query = query.bind(hash);
                    }
                    live_hashes.extend(query.fetch_all(&mut **conn).await?);
                }
                for ((tenant, name), slot) in contracts.iter().zip(latest.iter_mut()) {
                    *slot = self.latest_contract_version(tenant, name).await?;
                }
            }
        }
        let live = hashes.iter().map(|h| live_hashes.contains(h)).collect();
        Ok((live, latest))
    }

    /// Inserts a fresh key with its prefix, drawing another key in the rare case the
    /// prefix is taken in this tenant.
    async fn insert_api_key(
        &mut self,
        tenant: &TenantId,
        now: i64,
    ) -> Result<(ApiKey, ApiKeyInfo), StoreError> {
        for _ in 0..KEY_ATTEMPTS_MAX {
            let key = ApiKey::generate();
            let prefix = KeyPrefix::of(&key);
            let inserted = with_tx!(self, |conn| {
                sqlx::query(
                    "INSERT INTO api_keys (key_hash, tenant_id, created_at_us, key_prefix)
                     VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                )
                .bind(key.hash())
                .bind(tenant.as_str())
                .bind(now)
                .bind(prefix.hex())
                .execute(&mut *conn)
                .await?
                .rows_affected()
            });
            if inserted == 1 {
                let info = ApiKeyInfo {
                    prefix: Some(prefix),
                    created_at_us: now,
                    revoked_at_us: None,
                };
                return Ok((key, info));
            }
        }
        Err(StoreError::Corrupt(format!(
            "{KEY_ATTEMPTS_MAX} fresh keys in a row collided with existing ones; the random source is suspect"
        )))
    }
}

#[derive(sqlx::FromRow)]
struct TenantRow {
    tenant_id: String,
    name: String,
    created_at_us: i64,
    active_keys: i64,
}

impl From<TenantRow> for TenantRecord {
    fn from(row: TenantRow) -> Self {
        TenantRecord {
            tenant_id: TenantId::from_stored(row.tenant_id),
            name: row.name,
            created_at_us: row.created_at_us,
            active_keys: row.active_keys,
        }
    }
}

#[derive(sqlx::FromRow)]
struct KeyRow {
    key_prefix: Option<String>,
    created_at_us: i64,
    revoked_at_us: Option<i64>,
}

impl From<KeyRow> for ApiKeyInfo {
    fn from(row: KeyRow) -> Self {
        ApiKeyInfo {
            prefix: row.key_prefix.map(KeyPrefix),
            created_at_us: row.created_at_us,
            revoked_at_us: row.revoked_at_us,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names are matched exactly: two that look alike are one name (NFC) or refused.
    #[test]
    fn names_that_look_alike_are_one_name_or_refused() {
        let composed = TenantName::parse("caf\u{e9}").expect("name");
        let decomposed = TenantName::parse("cafe\u{301}").expect("name");
        assert_eq!(composed, decomposed);
        for hidden in [
            "\u{200B}alpha",
            "alpha\u{200B}",
            "al\u{FEFF}pha",
            "\u{202E}ahpla",
            "Acme\u{00A0}GmbH",
            "alpha\u{FE0F}",
            "\u{3164}alpha",
        ] {
            let err = TenantName::parse(hidden).expect_err(hidden);
            assert!(err.contains("invisible characters"), "{err}");
            let err = crate::SourceName::parse(hidden).expect_err(hidden);
            assert!(err.starts_with("a source name"), "{err}");
        }
        assert!(TenantName::parse("Acme GmbH & Co. (EU)").is_ok());
        // Counted once composed: 128 characters that NFC lengthens are refused.
        let widened = "\u{0958}".repeat(128);
        assert!(TenantName::parse(&widened).is_err());
    }

    #[test]
    fn tenant_names_are_trimmed_and_bounded() {
        let long = "x".repeat(TenantName::CHARS_MAX + 1);
        let table: &[(&str, Option<&str>)] = &[
            ("acme", Some("acme")),
            ("  Acme Corp  ", Some("Acme Corp")),
            ("", None),
            ("   ", None),
            ("a\nb", None),
            ("a\u{7}", None),
            (&long, None),
        ];
        for (input, expected) in table {
            let parsed = TenantName::parse(input).ok();
            assert_eq!(
                parsed.as_ref().map(TenantName::as_str),
                *expected,
                "{input:?}"
            );
        }
    }

    #[test]
    fn a_selector_is_a_whole_key_or_a_prefix() {
        let key = ApiKey::generate();
        let prefix = KeyPrefix::of(&key);
        assert_eq!(prefix.to_string(), key.expose()[..12]);
        assert!(matches!(
            KeySelector::parse(key.expose()),
            Some(KeySelector::Key(_))
        ));
        for text in [
            prefix.to_string(),
            prefix.hex().to_string(),
            prefix.to_string().to_uppercase().replace("TLK_", "tlk_"),
        ] {
            match KeySelector::parse(&text) {
                Some(KeySelector::Prefix(p)) => assert_eq!(p, prefix, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        for text in [
            "",
            "tlk_",
            "tlk_1234567",
            "tlk_123456789",
            "tlk_1234567g",
            "abc",
        ] {
            assert!(KeySelector::parse(text).is_none(), "{text}");
        }
    }
}

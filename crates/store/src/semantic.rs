//! The semantic-duplicate scan: stored events with different ids whose content is
//! otherwise the same, the one dedupe mistake no hash can reveal (a field in a contract's
//! identity that should not be there, e.g. an emit time that is really transport).
//!
//! For each identity field `F` of a contract version, the events are grouped by their
//! stored payload with `F` and the contract's transport pointers removed; a group holding
//! more than one distinct `event_id` is events that agree on every other identity field
//! and on all non-transport content and differ in `F` only: `F` is the suspect.
//!
//! The grouping runs in the database, one `GROUP BY` statement per field (PostgreSQL:
//! the MD5 of the `jsonb` with the pointers removed by `#-`; SQLite: the text of
//! `json_remove`), whose sort or hash spills to disk: memory stays bounded by the
//! database's work memory whatever the table's size, and the scan reads back only the
//! totals and a few example groups. Nothing holds a map of every row.
//!
//! What it compares is the stored text, not the canonical form: a retry that changed only
//! the canonicalisation of another field (a digit below its declared precision, a
//! reordered set, another Unicode form) lands in another group, so the scan can miss a
//! suspect but never names one wrongly. On SQLite a pointer whose token holds `"` cannot
//! be written as a JSON path; such an identity field is reported in `fields_skipped`
//! (docs/semantic-scan.md).

use serde::{Deserialize, Serialize};
use traqlyte_identity::pointer::Pointer;
use traqlyte_identity::Contract;

use crate::tx::{with_pool, with_tx};
use crate::{Backend, Store, StoreError, TenantId};

/// Example groups kept per suspect field.
pub const SEMANTIC_EXAMPLES_MAX: i64 = 3;

/// What one scan looks at: one tenant's events of one contract version.
#[derive(Debug, Clone, Copy)]
pub struct SemanticScope<'a> {
    /// The tenant.
    pub tenant: &'a TenantId,
    /// The contract version whose events are scanned.
    pub contract: &'a Contract,
    /// Only events received at or after this time (microseconds), when given.
    pub since_us: Option<i64>,
}

/// The result of one scan of one contract version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SemanticScan {
    /// The contract's name.
    pub contract: String,
    /// The contract version scanned.
    pub version: u32,
    /// When the scan finished, microseconds since the epoch.
    pub scanned_at_us: i64,
    /// The lower bound on arrival time, when the scan had one.
    pub since_us: Option<i64>,
    /// Stored events scanned.
    pub events: i64,
    /// The identity fields checked, in the contract's order.
    pub fields_checked: Vec<String>,
    /// Identity fields the backend could not check (see the module's documentation).
    pub fields_skipped: Vec<String>,
    /// One per suspect field, in the contract's order; empty when the contract is sound.
    pub findings: Vec<SemanticFinding>,
}

/// An identity field under suspicion: groups of events that differ in it only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SemanticFinding {
    /// The identity field's pointer.
    pub pointer: String,
    /// Groups of two or more distinct events that differ in this field only.
    pub groups: i64,
    /// Distinct events in those groups.
    pub events: i64,
    /// The largest groups (at most [`SEMANTIC_EXAMPLES_MAX`]).
    pub examples: Vec<SemanticGroup>,
}

/// One example group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SemanticGroup {
    /// Distinct events in the group.
    pub events: i64,
    /// Two of its event ids (the smallest and the largest), to look up with
    /// `GET /events/{contract}/{event_id}`.
    pub event_ids: Vec<String>,
}

/// Where a scan is, for a progress display.
#[derive(Debug, Clone, Copy)]
pub struct SemanticProgress<'a> {
    /// Fields done so far.
    pub done: usize,
    /// Fields in all.
    pub total: usize,
    /// The field being grouped now (`None` once done).
    pub pointer: Option<&'a str>,
}

/// A row of the per-field statement.
#[derive(sqlx::FromRow)]
struct GroupRow {
    n: i64,
    a: String,
    b: String,
    groups: i64,
    events: i64,
}

const COUNT_EVENTS: &str = "SELECT COUNT(*) FROM events_any_age
     WHERE tenant_id = $1 AND contract_name = $2 AND contract_version = $3
       AND received_at_us >= $4 AND received_at_us < $5";

const INSERT_SCAN: &str = "INSERT INTO semantic_scans
     (tenant_id, contract_name, contract_version, scanned_at_us, report) VALUES ($1, $2, $3, $4, $5)";

/// Earlier scans of the same contract version: only the latest is kept (a scan is a
/// derived report, not a fact).
const DELETE_OLDER_SCANS: &str = "DELETE FROM semantic_scans
     WHERE tenant_id = $1 AND contract_name = $2 AND contract_version = $3 AND scanned_at_us < $4";

const SELECT_SCANS: &str = "SELECT report FROM semantic_scans
     WHERE tenant_id = $1 AND (CAST($2 AS TEXT) IS NULL OR contract_name = CAST($2 AS TEXT))
     ORDER BY contract_name{bytes}, contract_version, scanned_at_us";

impl Store {
    /// Scans the scope's events, field by field, reporting progress before each field and
    /// at the end. Reads only: the caller decides whether to keep the result
    /// ([`Store::save_semantic_scan`]).
    pub async fn semantic_scan(
        &self,
        scope: SemanticScope<'_>,
        now_us: impl Fn() -> i64,
        mut progress: impl FnMut(SemanticProgress<'_>),
    ) -> Result<SemanticScan, StoreError> {
        let contract = scope.contract;
        let fields: Vec<String> = contract.fields().map(|f| f.pointer.clone()).collect();
        // Every statement counts the events received before the scan began: events
        // arriving while it runs (each statement reads its own snapshot) joined later
        // fields' groups, and a finding counted more events than the scan had scanned.
        let until_us = now_us();
        let events = self.semantic_event_count(scope, until_us).await?;
        let mut scan = SemanticScan {
            contract: contract.name().as_str().to_string(),
            version: contract.version(),
            scanned_at_us: 0,
            since_us: scope.since_us,
            events,
            fields_checked: Vec::new(),
            fields_skipped: Vec::new(),
            findings: Vec::new(),
        };
        for (done, pointer) in fields.iter().enumerate() {
            progress(SemanticProgress {
                done,
                total: fields.len(),
                pointer: Some(pointer),
            });
            match self.semantic_field(scope, pointer, until_us).await? {
                FieldResult::Skipped => scan.fields_skipped.push(pointer.clone()),
                FieldResult::Checked(finding) => {
                    scan.fields_checked.push(pointer.clone());
                    scan.findings.extend(finding);
                }
            }
        }
        progress(SemanticProgress {
            done: fields.len(),
            total: fields.len(),
            pointer: None,
        });
        scan.scanned_at_us = now_us();
        Ok(scan)
    }

    /// Keeps `scan` as the tenant's latest for its contract version (older ones of the
    /// same version are deleted in the same transaction).
    pub async fn save_semantic_scan(
        &self,
        tenant: &TenantId,
        scan: &SemanticScan,
    ) -> Result<(), StoreError> {
        let report = serde_json::to_string(scan)
            .map_err(|e| StoreError::Corrupt(format!("a semantic scan does not serialise: {e}")))?;
        let mut tx = self.begin().await?;
        with_tx!(tx, |conn| {
            sqlx::query(DELETE_OLDER_SCANS)
                .bind(tenant.as_str())
                .bind(&scan.contract)
                .bind(i64::from(scan.version))
                .bind(scan.scanned_at_us)
                .execute(&mut *conn)
                .await?;
            sqlx::query(INSERT_SCAN)
                .bind(tenant.as_str())
                .bind(&scan.contract)
                .bind(i64::from(scan.version))
                .bind(scan.scanned_at_us)
                .bind(&report)
                .execute(&mut *conn)
                .await?;
        });
        tx.commit().await
    }

    /// The latest stored scan of each contract version of the tenant (of one contract
    /// when `contract` is given), ordered by contract then version.
    pub async fn semantic_scans(
        &self,
        tenant: &TenantId,
        contract: Option<&str>,
    ) -> Result<Vec<SemanticScan>, StoreError> {
        let sql = self.in_byte_order(SELECT_SCANS);
        let reports: Vec<String> = with_pool!(self, reader, |pool| {
            let query = sqlx::query_scalar(&sql)
                .bind(tenant.as_str())
                .bind(contract);
            query.fetch_all(pool).await?
        });
        let mut scans: Vec<SemanticScan> = Vec::with_capacity(reports.len());
        for text in reports {
            let scan: SemanticScan = serde_json::from_str(&text)
                .map_err(|e| StoreError::Corrupt(format!("a stored semantic scan: {e}")))?;
            // Two scans finishing in the same microsecond range can both survive the
            // delete: the rows are ordered by time, so the last one wins.
            match scans.last_mut() {
                Some(last) if last.contract == scan.contract && last.version == scan.version => {
                    *last = scan;
                }
                _ => scans.push(scan),
            }
        }
        Ok(scans)
    }

    async fn semantic_event_count(
        &self,
        scope: SemanticScope<'_>,
        until_us: i64,
    ) -> Result<i64, StoreError> {
        with_pool!(self, reader, |pool| {
            let query = sqlx::query_scalar(COUNT_EVENTS)
                .bind(scope.tenant.as_str())
                .bind(scope.contract.name().as_str())
                .bind(i64::from(scope.contract.version()))
                .bind(scope.since_us.unwrap_or(i64::MIN))
                .bind(until_us);
            Ok(query.fetch_one(pool).await?)
        })
    }

    /// Groups the scope's events by their content without `pointer` (and without the
    /// transport pointers): one statement, binding `$1`–`$5` (tenant, contract name,
    /// version, arrival bounds: from `since_us`, before `until_us`), then the paths
    /// removed.
    async fn semantic_field(
        &self,
        scope: SemanticScope<'_>,
        pointer: &str,
        until_us: i64,
    ) -> Result<FieldResult, StoreError> {
        let suspect = Pointer::parse(pointer)
            .map_err(|e| StoreError::Corrupt(format!("a stored contract's pointer: {e}")))?;
        let mut removed = vec![suspect.clone()];
        for transport in scope.contract.transport() {
            removed.push(
                Pointer::parse(transport).map_err(|e| {
                    StoreError::Corrupt(format!("a stored contract's pointer: {e}"))
                })?,
            );
        }
        // Later array elements first: removing `/a/0` before `/a/2` would remove the
        // element that was `/a/3`, and events differing there would be grouped.
        removed.sort_by(|a, b| a.removal_order(b));
        let rows: Vec<GroupRow> = match &self.backend {
            Backend::Postgres(pg) => {
                let nul_marker = crate::model::random_hex(16);
                let run = |safe: bool| {
                    let sql = pg_field_sql(removed.len(), safe, &nul_marker);
                    let removed = &removed;
                    async move {
                        let mut query = sqlx::query_as(&sql)
                            .bind(scope.tenant.as_str())
                            .bind(scope.contract.name().as_str())
                            .bind(i64::from(scope.contract.version()))
                            .bind(scope.since_us.unwrap_or(i64::MIN))
                            .bind(until_us);
                        for p in removed {
                            query = query.bind(p.tokens().to_vec());
                        }
                        query.fetch_all(&pg.pool).await
                    }
                };
                match run(false).await {
                    // A payload holds an array where a path names a key: `#-` fails the
                    // statement. Again, path by path, leaving such payloads as they are.
                    Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("22P02") => {
                        run(true).await?
                    }
                    other => other?,
                }
            }
            Backend::Sqlite(lite) => {
                // The suspect itself cannot be removed: nothing to check.
                if sqlite_paths(&suspect).is_none() {
                    return Ok(FieldResult::Skipped);
                }
                let mut paths = Vec::new();
                // A transport pointer left in only splits groups (no false finding).
                for found in removed.iter().filter_map(sqlite_paths) {
                    paths.extend(found);
                }
                let sql = sqlite_field_sql(paths.len());
                let mut query = sqlx::query_as(&sql)
                    .bind(scope.tenant.as_str())
                    .bind(scope.contract.name().as_str())
                    .bind(i64::from(scope.contract.version()))
                    .bind(scope.since_us.unwrap_or(i64::MIN))
                    .bind(until_us);
                for path in paths {
                    query = query.bind(path);
                }
                query.fetch_all(&lite.reader).await?
            }
        };
        let Some(first) = rows.first() else {
            return Ok(FieldResult::Checked(None));
        };
        Ok(FieldResult::Checked(Some(SemanticFinding {
            pointer: pointer.to_string(),
            groups: first.groups,
            events: first.events,
            examples: rows
                .iter()
                .map(|r| SemanticGroup {
                    events: r.n,
                    event_ids: vec![r.a.clone(), r.b.clone()],
                })
                .collect(),
        })))
    }
}

/// One field's outcome.
enum FieldResult {
    /// Grouped: a finding when some group holds two or more events.
    Checked(Option<SemanticFinding>),
    /// Not expressible on this backend.
    Skipped,
}

/// The groups of two or more distinct ids, largest first, with the totals over all of
/// them on every row (window aggregates run before the `LIMIT`).
fn outer_sql(inner: &str) -> String {
    format!(
        "SELECT n, a, b, COUNT(*) OVER () AS groups, CAST(SUM(n) OVER () AS BIGINT) AS events
         FROM ({inner}) g ORDER BY n DESC, a LIMIT {SEMANTIC_EXAMPLES_MAX}"
    )
}

/// The first parameter of a field statement's paths: `$1`–`$5` are the scope's
/// (tenant, contract name, version, arrival bounds), bound by [`Store::semantic_field`].
const PATHS_FROM: usize = 6;

/// PostgreSQL: `removed` pointers bound as `text[]` paths from [`PATHS_FROM`] on. A payload may
/// hold a NUL (`\u0000` in its JSON text), which `jsonb` refuses: it is read as U+FFFD
/// followed by `nul_marker` (hex digits drawn at random for the scan), the same for every
/// row, so payloads equal but for their NULs group together and the scan never fails on
/// them; no payload holds the marker, so none holding U+FFFD itself is taken for one
/// holding a NUL (they were, when a NUL was read as U+FFFD alone).
/// `safe`: through `traqlyte_jsonb_remove` (migration `0025`), which leaves a payload
/// as it is where a path names a key inside an array (`#-` fails the statement there),
/// at the cost of a subtransaction a call; the scan uses it only after `#-` failed.
fn pg_field_sql(removed: usize, safe: bool, nul_marker: &str) -> String {
    debug_assert!(nul_marker.bytes().all(|b| b.is_ascii_hexdigit()));
    let document = format!("CAST(replace(payload, '\\u0000', '\\ufffd{nul_marker}') AS JSONB)");
    let removal = if safe {
        (0..removed).fold(document.to_string(), |doc, i| {
            format!(
                "traqlyte_jsonb_remove({doc}, CAST(${} AS TEXT[]))",
                i + PATHS_FROM
            )
        })
    } else {
        let paths: String = (0..removed)
            .map(|i| format!(" #- CAST(${} AS TEXT[])", i + PATHS_FROM))
            .collect();
        format!("{document}{paths}")
    };
    outer_sql(&format!(
        "SELECT COUNT(DISTINCT event_id) AS n, MIN(encode(event_id, 'hex')) AS a,
                MAX(encode(event_id, 'hex')) AS b
         FROM events_any_age
         WHERE tenant_id = $1 AND contract_name = $2 AND contract_version = $3
           AND received_at_us >= $4 AND received_at_us < $5
         GROUP BY md5(CAST({removal} AS TEXT))
         HAVING COUNT(DISTINCT event_id) > 1"
    ))
}

/// SQLite: `paths` JSON paths bound from [`PATHS_FROM`] on.
fn sqlite_field_sql(paths: usize) -> String {
    let list: Vec<String> = (0..paths).map(|i| format!("${}", i + PATHS_FROM)).collect();
    outer_sql(&format!(
        "SELECT COUNT(DISTINCT event_id) AS n, MIN(event_id) AS a, MAX(event_id) AS b
         FROM events_any_age
         WHERE tenant_id = $1 AND contract_name = $2 AND contract_version = $3
           AND received_at_us >= $4 AND received_at_us < $5
         GROUP BY json_remove(payload, {})
         HAVING COUNT(DISTINCT event_id) > 1",
        list.join(", ")
    ))
}

/// Tokens of digits a pointer may hold for the SQLite scan: each doubles the paths (an
/// object key or an array index), so 4 give 16.
const SQLITE_INDEX_TOKENS_MAX: usize = 4;

/// The SQLite JSON paths removing what `pointer` addresses: object keys quoted; each token
/// of digits both as an object key and as an array index (RFC 6901 resolves it either
/// way, at any depth), so every combination is listed. `None` when a token holds `"` or
/// `\`, which a SQLite path label cannot write (it reads `\` as an escape), or when more
/// than [`SQLITE_INDEX_TOKENS_MAX`] tokens are digits.
fn sqlite_paths(pointer: &Pointer) -> Option<Vec<String>> {
    let tokens = pointer.tokens();
    let is_index = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    if tokens.is_empty()
        || tokens.iter().any(|t| t.contains(['"', '\\']))
        || tokens.iter().filter(|t| is_index(t)).count() > SQLITE_INDEX_TOKENS_MAX
    {
        return None;
    }
    let mut paths = vec!["$".to_string()];
    for token in tokens {
        let key = format!(".\"{token}\"");
        paths = if is_index(token) {
            paths
                .into_iter()
                .flat_map(|p| [format!("{p}{key}"), format!("{p}[{token}]")])
                .collect()
        } else {
            paths.into_iter().map(|p| p + &key).collect()
        };
    }
    Some(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(text: &str) -> Option<Vec<String>> {
        sqlite_paths(&Pointer::parse(text).ok()?)
    }

    #[test]
    fn sqlite_paths_quote_keys_and_try_a_trailing_index_both_ways() {
        assert_eq!(paths("/sent_at"), Some(vec!["$.\"sent_at\"".to_string()]));
        assert_eq!(
            paths("/a.b/c d"),
            Some(vec!["$.\"a.b\".\"c d\"".to_string()])
        );
        assert_eq!(
            paths("/items/0"),
            Some(vec![
                "$.\"items\".\"0\"".to_string(),
                "$.\"items\"[0]".to_string()
            ])
        );
        assert_eq!(paths("/say\"what"), None);
        assert_eq!(paths("/back\\slash"), None);
        assert_eq!(
            paths("/items/0/tags/1"),
            Some(
                [
                    "$.\"items\".\"0\".\"tags\".\"1\"",
                    "$.\"items\".\"0\".\"tags\"[1]",
                    "$.\"items\"[0].\"tags\".\"1\"",
                    "$.\"items\"[0].\"tags\"[1]",
                ]
                .map(String::from)
                .to_vec()
            )
        );
        assert_eq!(paths("/0/1/2/3").map(|p| p.len()), Some(16));
        assert_eq!(paths("/0/1/2/3/4"), None);
    }
}

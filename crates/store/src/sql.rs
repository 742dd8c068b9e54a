//! SQL both backends share, written with `$N` placeholders. Every column a row type
//! reads by name (`sqlx::FromRow`) is named here, aliased where it is an expression.

pub(crate) const INSERT_CONTRACT: &str =
    "INSERT INTO contracts (tenant_id, name, version, definition, created_at_us)
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING";

pub(crate) const SELECT_CONTRACT: &str = "SELECT definition FROM contracts
     WHERE tenant_id = $1 AND name = $2 AND (CAST($3 AS BIGINT) IS NULL OR version = CAST($3 AS BIGINT))
     ORDER BY version DESC LIMIT 1";

pub(crate) const SELECT_CONTRACTS: &str =
    "SELECT definition FROM contracts WHERE tenant_id = $1 ORDER BY name, version";

/// A page of [`SELECT_CONTRACTS`] after `($2, $3)` (`('', 0)` for the first: every name is
/// longer), `$4` rows.
pub(crate) const SELECT_CONTRACTS_PAGE: &str = "SELECT definition FROM contracts
     WHERE tenant_id = $1 AND (name > $2 OR (name = $2 AND version > $3))
     ORDER BY name, version LIMIT $4";

/// The sizes in bytes of the definitions [`SELECT_CONTRACTS_PAGE`] would read, so that a
/// page stops within its byte budget before reading them (`octet_length`, which both
/// backends answer from the stored length: `length` counts characters, and PostgreSQL
/// decompresses a value to count them).
pub(crate) const SELECT_CONTRACTS_PAGE_SIZES: &str =
    "SELECT CAST(octet_length(definition) AS BIGINT) FROM contracts
     WHERE tenant_id = $1 AND (name > $2 OR (name = $2 AND version > $3))
     ORDER BY name, version LIMIT $4";

pub(crate) const INSERT_TALLY: &str = "INSERT INTO event_tallies
     (tenant_id, contract_name, at_us, inserted, duplicates, collisions, late, source) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

pub(crate) const SELECT_STATS: &str = "SELECT c.name AS contract,
       CAST(COALESCE(SUM(t.inserted), 0) AS BIGINT) AS stored,
       CAST(COALESCE(SUM(t.duplicates), 0) AS BIGINT) AS duplicates,
       CAST(COALESCE(SUM(t.collisions), 0) AS BIGINT) AS collisions,
       CAST(COALESCE(SUM(t.late), 0) AS BIGINT) AS late
     FROM (SELECT name FROM contracts WHERE tenant_id = $1
           UNION SELECT contract_name FROM event_tallies WHERE tenant_id = $1) c
     LEFT JOIN event_tallies t ON t.tenant_id = $1 AND t.contract_name = c.name
     GROUP BY c.name ORDER BY c.name";

/// A stored event of any age (SQLite: text ids).
pub(crate) const SELECT_EVENT: &str =
    "SELECT event_id, CAST(contract_version AS BIGINT) AS contract_version, fingerprint, payload,
       occurred_at_us, received_at_us
     FROM events_any_age WHERE tenant_id = $1 AND contract_name = $2 AND event_id = $3
     ORDER BY received_at_us LIMIT 1";

/// [`SELECT_EVENT`] on PostgreSQL, where the id is stored as its 32 bytes.
pub(crate) const PG_SELECT_EVENT: &str =
    "SELECT encode(event_id, 'hex') AS event_id, CAST(contract_version AS BIGINT) AS contract_version,
       fingerprint, payload, occurred_at_us, received_at_us
     FROM events_any_age WHERE tenant_id = $1 AND contract_name = $2 AND event_id = decode($3, 'hex')
     ORDER BY received_at_us LIMIT 1";

//! The hot point lookups, listed so a test (`tests/it/plans.rs`) can check their
//! PostgreSQL plans on a fresh database, where no statistics exist yet: each must be
//! answered through the whole key of the index named here. On such a table the planner
//! estimates every index at one row, so a lookup whose columns are also a prefix of
//! another index may be planned through that one, filtering the rest (a scan of every
//! unit of a campaign per assignment, until issue 11's benchmark found it), and the
//! generic plan is kept.
//!
//! The batch paths' set-based reads (`unnest` of ids, `= ANY`) are listed too: each must
//! probe the same index per id, never scan the table. A statement written for either
//! event table (`{table}`) is checked on the live one, `events`.

use std::sync::LazyLock;

/// The keyset pages of the logs that grow without bound, `(what, statement, the index, the
/// cursor's column)`: each must start its index range at the cursor (the column in the
/// index condition), in the generic plan too, so a page deep in a log of millions costs
/// what the first does. Their `{columns}` are read as `*`; a collision page is listed for
/// the whole log and for one contract.
pub static KEYSET_PAGES: LazyLock<Vec<(&str, String, &str, &str)>> = LazyLock::new(|| {
    use crate::ops::{contract_filter, SELECT_COLLISIONS_BETWEEN, SELECT_COLLISIONS_PAGE_SIZES};
    let collisions = |sql: &str, by_contract: bool| {
        sql.replace("{columns}", "*")
            .replace("{contract}", contract_filter(by_contract))
    };
    vec![
        (
            "a page of dead letters",
            crate::deadletters::SELECT_DEAD_LETTERS.replace("{columns}", "*"),
            "dead_letters_by_tenant_time",
            "received_at_us",
        ),
        (
            "a page of the collision log",
            collisions(SELECT_COLLISIONS_PAGE_SIZES, false),
            "event_collisions_by_tenant",
            "received_at_us",
        ),
        (
            "a page of a contract's collisions",
            collisions(SELECT_COLLISIONS_PAGE_SIZES, true),
            "event_collisions_by_contract",
            "received_at_us",
        ),
        (
            "a page of the collision log, with its payloads",
            collisions(SELECT_COLLISIONS_BETWEEN, false),
            "event_collisions_by_tenant",
            "received_at_us",
        ),
        (
            "a page of a contract's collisions, with their payloads",
            collisions(SELECT_COLLISIONS_BETWEEN, true),
            "event_collisions_by_contract",
            "received_at_us",
        ),
        (
            "a page of a source's rejections",
            crate::sources::SELECT_REJECTIONS.to_string(),
            "source_rejections_by_source_id",
            "rejection_id",
        ),
    ]
});

/// SQLite statements that must be answered through an index, `(what, statement, the
/// index)`: each runs where a scan of a large table would stop the server.
pub const SQLITE_LOOKUPS: &[(&str, &str, &str)] = &[(
    "the outcomes a start gives their id",
    crate::outcome_corrections::SELECT_MISSING_IDS,
    "outcomes_missing_id",
)];

/// `(what, statement, the index that must answer it)`.
pub const LOOKUPS: &[(&str, &str, &str)] = &[
    (
        "an API key's tenant",
        crate::tenants::SELECT_TENANT_FOR_KEY,
        "api_keys_pkey",
    ),
    (
        "a unit's assignment",
        crate::assignments_batch::SELECT_ASSIGNMENT_BY_ID,
        "assignments_by_id",
    ),
    (
        "a campaign's latest version",
        crate::campaigns::SELECT_LATEST_VERSION,
        "campaign_versions_pkey",
    ),
    (
        "a contract, its latest or a named version",
        crate::sql::SELECT_CONTRACT,
        "contracts_pkey",
    ),
    (
        "an idempotency key",
        crate::idempotency::PG_SELECT_KEY,
        "idempotency_keys_pkey",
    ),
    (
        "a batch's assignments by id",
        crate::assignments_batch::PG_SELECT_ASSIGNED,
        "assignments_by_id",
    ),
    (
        "a batch's campaigns by id",
        crate::campaigns::PG_SELECT_CAMPAIGNS_BY_ID,
        "campaigns_pkey",
    ),
    (
        "the stored rows of a batch's conflicting outcomes",
        crate::outcomes_batch::PG_SELECT_STORED,
        "outcomes_pkey",
    ),
    (
        "whether a campaign has per-unit sums to fold before its report",
        crate::unit_metrics::SELECT_PENDING,
        "unit_metric_deltas_by_campaign",
    ),
    (
        "a group-committed batch's latest campaign versions",
        crate::assignments_batch::PG_LATEST_CAMPAIGN_VERSIONS,
        "campaign_versions_pkey",
    ),
    (
        "a group-committed batch's keys and latest contract versions",
        crate::tenants::PG_CHECK_WRITES,
        "contracts_pkey",
    ),
    (
        "the checks of a group-committed batch written in one statement",
        crate::at_once::PG_INSERT_CHECKED,
        "contracts_pkey",
    ),
    (
        "the checks of a group-committed assignment batch written in one statement",
        crate::at_once::PG_INSERT_ASSIGNMENTS_CHECKED,
        "campaign_versions_pkey",
    ),
];

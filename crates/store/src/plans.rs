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

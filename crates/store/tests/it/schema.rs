//! The claim `docs/scaling.md` makes for a distributed PostgreSQL engine, checked on the
//! real schema: every unique key starts with `tenant_id` (the distribution column), except
//! the few tables listed here with the reason each is not distributed by tenant.

use sqlx::Row;

use crate::db::{Backend, Raw, TestDb};

/// Unique keys that do not start with `tenant_id`, and why.
const NOT_BY_TENANT: &[(&str, &str)] = &[
    // sqlx's own bookkeeping: one per database, not tenant data.
    ("_sqlx_migrations_pkey", "migration bookkeeping"),
    // Looked up by the hash of a secret before the tenant is known (authentication):
    // a reference table on a distributed engine.
    ("api_keys_pkey", "authentication lookup by key hash"),
    ("ui_tokens_pkey", "session lookup by token hash"),
    (
        "sources_by_write_key",
        "Segment authentication lookup by write-key hash",
    ),
];

const UNIQUE_KEYS: &str = "
    SELECT i.relname AS index_name,
           (SELECT a.attname FROM pg_attribute a
             WHERE a.attrelid = c.oid AND a.attnum = ix.indkey[0]) AS first_column
      FROM pg_index ix
      JOIN pg_class c ON c.oid = ix.indrelid
      JOIN pg_class i ON i.oid = ix.indexrelid
      JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = 'public' AND ix.indisunique
     ORDER BY 1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_unique_key_starts_with_the_tenant_but_the_listed_lookups() {
    let db = TestDb::create(Backend::Postgres).await;
    db.store().await.migrate().await.expect("migrate");
    let Raw::Postgres(mut conn) = db.raw().await else {
        panic!("a PostgreSQL connection");
    };
    let rows = sqlx::query(UNIQUE_KEYS)
        .fetch_all(&mut conn)
        .await
        .expect("unique keys");
    assert!(rows.len() > 10, "the schema has its unique keys");
    let mut offenders = Vec::new();
    for row in rows {
        let (index, first): (String, String) = (row.get(0), row.get(1));
        let listed = NOT_BY_TENANT.iter().any(|(name, _)| *name == index);
        if first != "tenant_id" && !listed {
            offenders.push(format!("{index} starts with {first}"));
        }
        if first == "tenant_id" && listed {
            offenders.push(format!("{index} is listed but starts with tenant_id"));
        }
    }
    assert!(offenders.is_empty(), "{offenders:#?}");
}

/// Every table of the schema is placed in `docs/scaling.md`'s map onto a distributed
/// engine (its section "The schema on a distributed PostgreSQL"): a review found five
/// tables in none of its rows. Partitions (`events_p…`, `events_untimed`,
/// `events_detached`) are placed with `events`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_table_is_placed_in_the_distributed_schema_map() {
    let doc = include_str!("../../../../docs/scaling.md");
    let section = doc
        .split("## The schema on a distributed PostgreSQL")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("the section of docs/scaling.md");
    let db = TestDb::create(Backend::Postgres).await;
    db.store().await.migrate().await.expect("migrate");
    let Raw::Postgres(mut conn) = db.raw().await else {
        panic!("a PostgreSQL connection");
    };
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition
          ORDER BY 1",
    )
    .fetch_all(&mut conn)
    .await
    .expect("tables");
    assert!(tables.len() > 20, "{tables:?}");
    let missing: Vec<&String> = tables
        .iter()
        .filter(|table| !section.contains(&format!("`{table}`")))
        .collect();
    assert!(missing.is_empty(), "not in docs/scaling.md: {missing:?}");
}

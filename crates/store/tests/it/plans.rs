//! The hot point lookups (`traqlyte_store::plans::LOOKUPS`) are planned through the
//! whole key of their index on a fresh PostgreSQL database, with the generic plan a
//! prepared statement keeps: no table statistics exist yet, which is when a lookup sharing
//! a prefix with another index was planned through that one. The batch paths' set-based
//! reads, listed there too, are held to the same rule.

use traqlyte_store::experiments::{SELECT_COLLISIONS, SELECT_COLLISIONS_OF_VERSION};
use traqlyte_store::plans::{KEYSET_PAGES, LOOKUPS, SQLITE_LOOKUPS};

use crate::db::{Backend, Raw, TestDb};

/// SQLite's listed statements go through their index (`EXPLAIN QUERY PLAN`): a start
/// after migration `0015` read the next outcomes without an id by scanning the table from
/// its start, a thousand at a time (a review: 184 s for a million outcomes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_lookups_use_their_index() {
    let db = TestDb::create(Backend::Sqlite).await;
    db.store().await.migrate().await.expect("migrate");
    let Raw::Sqlite(mut conn) = db.raw().await else {
        panic!("a SQLite connection");
    };
    for (what, sql, index) in SQLITE_LOOKUPS {
        let rows: Vec<(i64, i64, i64, String)> =
            sqlx::query_as(&format!("EXPLAIN QUERY PLAN {sql}"))
                .fetch_all(&mut conn)
                .await
                .expect("plan");
        let plan: Vec<&str> = rows.iter().map(|r| r.3.as_str()).collect();
        assert!(
            plan.iter()
                .any(|step| step.contains(&format!("USING INDEX {index}"))),
            "{what}: {plan:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_lookups_use_their_index_on_a_fresh_database() {
    let (_db, mut conn) = fresh_database_with_generic_plans().await;
    for (n, (what, sql, index)) in LOOKUPS.iter().enumerate() {
        let sql = sql.replace("{table}", "events");
        let lines = generic_plan(&mut conn, &format!("lookup_{n}"), &sql, what).await;
        let plan = lines.join("\n");
        // An index scan names it "using"; a bitmap scan (a set of keys) "Index Scan on".
        let through = [format!("using {index}"), format!("Index Scan on {index}")];
        assert!(through.iter().any(|t| plan.contains(t)), "{what}:\n{plan}");
        assert!(
            !plan.contains("Seq Scan") && !plan.contains("Sort"),
            "{what}:\n{plan}"
        );
        // Through the right index but on the tenant alone is a scan of the tenant's rows.
        assert!(
            lines
                .iter()
                .all(|l| !l.trim().ends_with("Cond: (tenant_id = $1)")),
            "{what}: the index is searched by the tenant alone:\n{plan}"
        );
    }
}

/// A report's collision counts are read through the primary key of
/// `outcome_collision_counts` by campaign (and version, for `?version=N`), never from the
/// collision log, which grows without bound, nor by the tenant alone (a fresh database,
/// the generic plan). Not among the point lookups: it aggregates, so its plan may sort.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reports_collisions_are_read_from_the_counts_by_their_key() {
    let (_db, mut conn) = fresh_database_with_generic_plans().await;
    let statements = [
        (SELECT_COLLISIONS, "NULL, NULL"),
        (SELECT_COLLISIONS_OF_VERSION, "NULL, NULL, NULL"),
    ];
    for (n, (sql, parameters)) in statements.into_iter().enumerate() {
        sqlx::query(&format!("PREPARE collisions_{n} AS {sql}"))
            .execute(&mut conn)
            .await
            .expect("prepare");
        let lines: Vec<String> =
            sqlx::query_scalar(&format!("EXPLAIN EXECUTE collisions_{n}({parameters})"))
                .fetch_all(&mut conn)
                .await
                .expect("explain");
        let plan = lines.join("\n");
        let index = "outcome_collision_counts_pkey";
        let through = [format!("using {index}"), format!("Index Scan on {index}")];
        assert!(through.iter().any(|t| plan.contains(t)), "{plan}");
        assert!(
            !plan.contains("Seq Scan") && !plan.contains("outcome_collisions "),
            "{plan}"
        );
        assert!(
            lines
                .iter()
                .all(|l| !l.trim().ends_with("Cond: (tenant_id = $1)")),
            "searched by the tenant alone:\n{plan}"
        );
    }
}

/// A page of a log that grows without bound (dead letters, collisions, rejections) starts
/// its index range at its cursor, in the generic plan too: the cursor's column is in the
/// index condition, so a page deep in the log does not read and filter every entry newer
/// than it (a page 500,000 dead letters or collisions deep took 63–210 ms, the first one
/// 0.1 ms). Every placeholder is bound, as on a next page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deep_page_of_a_log_starts_at_its_cursor_in_the_index() {
    let (_db, mut conn) = fresh_database_with_generic_plans().await;
    for (n, (what, sql, index, column)) in KEYSET_PAGES.iter().enumerate() {
        let lines = generic_plan(&mut conn, &format!("page_{n}"), sql, what).await;
        let plan = lines.join("\n");
        assert!(plan.contains(&format!("using {index}")), "{what}:\n{plan}");
        let bounded = lines
            .iter()
            .any(|l| l.contains("Index Cond:") && l.contains(column));
        assert!(
            bounded,
            "{what}: {column} is not in the index condition:\n{plan}"
        );
    }
}

/// The plan of `sql` prepared as `name` and executed with every placeholder `NULL` (they
/// are numbered from `$1` without gaps), one line a row: the generic plan on a connection
/// of [`fresh_database_with_generic_plans`].
async fn generic_plan(
    conn: &mut sqlx::PgConnection,
    name: &str,
    sql: &str,
    what: &str,
) -> Vec<String> {
    sqlx::query(&format!("PREPARE {name} AS {sql}"))
        .execute(&mut *conn)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let parameters = (1..=32).filter(|i| sql.contains(&format!("${i}"))).count();
    let explain = format!(
        "EXPLAIN EXECUTE {name}({})",
        vec!["NULL"; parameters].join(", ")
    );
    sqlx::query_scalar(&explain)
        .fetch_all(&mut *conn)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// A fresh, migrated PostgreSQL database (no table statistics yet) and a connection to it
/// that plans prepared statements as a pool's do after their fifth run: generically.
async fn fresh_database_with_generic_plans() -> (TestDb, sqlx::PgConnection) {
    let db = TestDb::create(Backend::Postgres).await;
    db.store().await.migrate().await.expect("migrate");
    let Raw::Postgres(mut conn) = db.raw().await else {
        panic!("a PostgreSQL connection");
    };
    sqlx::query("SET plan_cache_mode = force_generic_plan")
        .execute(&mut conn)
        .await
        .expect("set the plan mode");
    (db, conn)
}

//! Migrations: checksums recorded and enforced, the upgrade of databases written by the
//! old runner (`schema_migrations`, no checksums), and concurrent starts.

use std::path::PathBuf;

use sha2::{Digest, Sha384};

use crate::db::{on_both_backends, Backend, TestDb};

on_both_backends!(
    a_fresh_database_gets_every_migration_with_its_checksum,
    an_edited_applied_migration_refuses_to_start,
    an_old_runners_database_is_adopted_then_migrated_on,
    several_stores_adopting_an_old_database_at_once_all_start,
    several_stores_migrating_a_fresh_database_at_once_apply_each_migration_once,
    a_database_migrated_by_a_newer_build_is_refused_by_name,
    another_applications_database_is_refused_and_left_as_it_was,
    an_older_schema_is_told_apart_from_a_new_database,
);

/// A database URL naming another application's database by mistake: its tables and no
/// migrations of traqlyte's. Nothing is installed into it (its tables only, as before).
async fn another_applications_database_is_refused_and_left_as_it_was(backend: Backend) {
    let db = TestDb::create(backend).await;
    db.raw()
        .await
        .execute("CREATE TABLE orders (id BIGINT PRIMARY KEY)")
        .await;
    let store = db.store().await;
    let refused = store.migrate().await.expect_err("a foreign database");
    assert!(
        refused
            .to_string()
            .contains("holds 1 table(s) (such as \"orders\") and none of traqlyte's migrations"),
        "{refused}"
    );
    let tables = match backend {
        Backend::Sqlite => {
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        }
        Backend::Postgres => {
            "SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema()"
        }
    };
    assert_eq!(db.raw().await.texts(tables).await, ["orders"]);
}

/// The way in that the refusal names: a schema of traqlyte's own, first in
/// `search_path` (libpq's `options` in the URL), beside another application's tables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_of_its_own_beside_another_applications_tables_is_migrated() {
    let db = TestDb::create(Backend::Postgres).await;
    let mut raw = db.raw().await;
    raw.execute("CREATE TABLE orders (id BIGINT PRIMARY KEY)")
        .await;
    raw.execute("CREATE SCHEMA traqlyte").await;
    let url = format!("{}?options=-csearch_path%3Dtraqlyte", db.url);
    let store = traqlyte_store::Store::connect(&traqlyte_store::StoreConfig::new(&url))
        .await
        .expect("connect");
    store
        .migrate()
        .await
        .expect("an empty schema of its own is migrated");
    let public = raw
        .texts("SELECT tablename::text FROM pg_tables WHERE schemaname = 'public'")
        .await;
    assert_eq!(public, ["orders"]);
    let ours = raw
        .integers("SELECT COUNT(*) FROM pg_tables WHERE schemaname = 'traqlyte'")
        .await;
    assert!(ours[0] > 10, "{ours:?}");
    store.close().await;
}

/// `older_schema` names the migrations of a schema an older build made, and says
/// nothing of a database never migrated (every migration pending) or of a current one.
async fn an_older_schema_is_told_apart_from_a_new_database(backend: Backend) {
    let db = TestDb::create(backend).await;
    let store = db.store().await;
    assert_eq!(store.older_schema().await.expect("fresh"), None);
    store.migrate().await.expect("migrate");
    assert_eq!(store.older_schema().await.expect("current"), None);
    let last = migration_files(backend)
        .last()
        .map(|(v, _, _)| *v)
        .expect("one");
    db.raw()
        .await
        .execute(&format!(
            "DELETE FROM _sqlx_migrations WHERE version = {last}"
        ))
        .await;
    let older = store.older_schema().await.expect("older").expect("pending");
    assert_eq!(older.len(), 1, "{older:?}");
    assert!(older[0].starts_with(&format!("{last:04}_")), "{older:?}");
}

/// A migrated SQLite file is started on without its write lock: a server (re)starting
/// while another process writes for longer than the busy timeout (a long backfill)
/// starts, instead of failing its migration step with "database is locked".
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_migrated_sqlite_file_is_started_on_while_another_process_writes() {
    let db = TestDb::create(Backend::Sqlite).await;
    db.store().await.migrate().await.expect("migrate");
    let mut writer = db.raw().await;
    writer.execute("BEGIN IMMEDIATE").await;
    let mut config = traqlyte_store::StoreConfig::new(&db.url);
    config.sqlite_busy_timeout_ms = 200;
    let store = traqlyte_store::Store::connect(&config)
        .await
        .expect("connect");
    let applied = store
        .migrate()
        .await
        .expect("nothing to apply, no lock needed");
    assert!(applied.is_empty(), "{applied:?}");
    writer.execute("ROLLBACK").await;
}

/// A build older than the database's schema (a rolling deploy's old process restarting
/// after the new one migrated) is refused with a message saying so, before it writes.
async fn a_database_migrated_by_a_newer_build_is_refused_by_name(backend: Backend) {
    let db = TestDb::create(backend).await;
    let store = db.store().await;
    store.migrate().await.expect("migrate");
    db.raw()
        .await
        .execute(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
             SELECT 9999, 'from the future', success, checksum, execution_time
             FROM _sqlx_migrations WHERE version = 1",
        )
        .await;
    let refused = store.migrate().await.expect_err("a newer schema");
    assert!(
        refused
            .to_string()
            .contains("migrated by a newer build of traqlyte (migration 9999"),
        "{refused}"
    );
}

/// This build's migration files of a backend: (version, name, SQL), in order.
pub(crate) fn migration_files(backend: Backend) -> Vec<(i64, String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("migrations")
        .join(match backend {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        });
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("migrations directory")
        .map(|entry| entry.expect("entry").path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|path| {
            let stem = path.file_stem().and_then(|s| s.to_str()).expect("name");
            let (version, name) = stem.split_once('_').expect("NNNN_name");
            let sql = std::fs::read_to_string(path).expect("migration file");
            (version.parse().expect("version"), name.to_string(), sql)
        })
        .collect()
}

fn names(files: &[(i64, String, String)]) -> Vec<String> {
    files
        .iter()
        .map(|(version, name, _)| format!("{version:04}_{name}"))
        .collect()
}

/// Writes what the runner before checksums left behind: the first `applied` migrations
/// and their rows in `schema_migrations`, each in the old runner's shape.
pub(crate) async fn old_runner_database(db: &TestDb, applied: usize) {
    let mut raw = db.raw().await;
    raw.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
            version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at_us BIGINT NOT NULL)",
    )
    .await;
    for (version, name, sql) in migration_files(db.backend).iter().take(applied) {
        raw.execute(sql).await;
        raw.execute(&format!(
            "INSERT INTO schema_migrations (version, name, applied_at_us)
             VALUES ({version}, '{name}', 1700000000000000)"
        ))
        .await;
    }
}

async fn recorded_checksums(db: &TestDb) -> Vec<Vec<u8>> {
    db.raw()
        .await
        .blobs("SELECT checksum FROM _sqlx_migrations WHERE success ORDER BY version")
        .await
}

fn file_checksums(backend: Backend) -> Vec<Vec<u8>> {
    migration_files(backend)
        .iter()
        .map(|(_, _, sql)| Sha384::digest(sql.as_bytes()).to_vec())
        .collect()
}

async fn legacy_tables(db: &TestDb) -> i64 {
    let sql = match db.backend {
        Backend::Sqlite => "SELECT COUNT(*) FROM sqlite_master WHERE name = 'schema_migrations'",
        Backend::Postgres => "SELECT COUNT(*) FROM pg_tables WHERE tablename = 'schema_migrations'",
    };
    db.raw().await.integers(sql).await[0]
}

async fn a_fresh_database_gets_every_migration_with_its_checksum(backend: Backend) {
    let db = TestDb::create(backend).await;
    let store = db.store().await;
    // Read without writing: every migration is pending, and asking creates nothing.
    let pending = store.pending_migrations().await.expect("pending");
    assert_eq!(pending, names(&migration_files(backend)));
    assert_eq!(store.pending_migrations().await.expect("again"), pending);

    let applied = store.migrate().await.expect("migrate");
    assert_eq!(applied, names(&migration_files(backend)));
    assert_eq!(
        store.pending_migrations().await.expect("pending"),
        Vec::<String>::new()
    );
    assert_eq!(recorded_checksums(&db).await, file_checksums(backend));
    assert_eq!(store.migrate().await.expect("again"), Vec::<String>::new());
}

async fn an_edited_applied_migration_refuses_to_start(backend: Backend) {
    let db = TestDb::create(backend).await;
    let store = db.store().await;
    store.migrate().await.expect("migrate");
    // The recorded checksum no longer matching the file is what an edited file looks
    // like to the migrator, whichever side changed.
    db.raw()
        .await
        .execute("UPDATE _sqlx_migrations SET checksum = substr(checksum, 2) WHERE version = 3")
        .await;

    let refused = store
        .migrate()
        .await
        .expect_err("an edited migration must refuse");
    assert!(
        refused
            .to_string()
            .contains("migration 3 was previously applied but has been modified"),
        "{refused}"
    );
}

async fn an_old_runners_database_is_adopted_then_migrated_on(backend: Backend) {
    let db = TestDb::create(backend).await;
    let files = migration_files(backend);
    old_runner_database(&db, files.len() - 1).await;
    let store = db.store().await;

    let applied = store.migrate().await.expect("upgrade");
    assert_eq!(applied, names(&files[files.len() - 1..]));
    assert_eq!(recorded_checksums(&db).await, file_checksums(backend));
    assert_eq!(legacy_tables(&db).await, 0, "schema_migrations is dropped");
    assert_eq!(store.migrate().await.expect("again"), Vec::<String>::new());
}

async fn several_stores_adopting_an_old_database_at_once_all_start(backend: Backend) {
    let db = TestDb::create(backend).await;
    old_runner_database(&db, migration_files(backend).len()).await;
    for applied in migrate_at_once(&db, 4).await {
        assert_eq!(applied.expect("every start succeeds"), Vec::<String>::new());
    }
    assert_eq!(recorded_checksums(&db).await, file_checksums(backend));
    assert_eq!(legacy_tables(&db).await, 0);
}

async fn several_stores_migrating_a_fresh_database_at_once_apply_each_migration_once(
    backend: Backend,
) {
    let db = TestDb::create(backend).await;
    let mut applied: Vec<String> = Vec::new();
    for names in migrate_at_once(&db, 4).await {
        applied.extend(names.expect("every start succeeds"));
    }
    applied.sort();
    assert_eq!(applied, names(&migration_files(backend)));
    assert_eq!(recorded_checksums(&db).await, file_checksums(backend));
}

/// Connects `stores` stores (each with its own pool, as separate processes would), then
/// lets all of them migrate at once.
async fn migrate_at_once(
    db: &TestDb,
    stores: usize,
) -> Vec<Result<Vec<String>, traqlyte_store::StoreError>> {
    let mut connected = Vec::new();
    for _ in 0..stores {
        connected.push(db.store().await);
    }
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(stores));
    let runs: Vec<_> = connected
        .into_iter()
        .map(|store| {
            let start = start.clone();
            tokio::spawn(async move {
                start.wait().await;
                store.migrate().await
            })
        })
        .collect();
    let mut results = Vec::new();
    for run in runs {
        results.push(run.await.expect("task"));
    }
    results
}

//! The binary's own commands, run as processes.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use crate::helpers::{checkout_contract, checkout_event, Backend, TestDb};

fn traqlyte(args: &[&str], stdin: &str) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_traqlyte"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn traqlyte");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("traqlyte finished")
}

fn contract_file() -> tempfile_path::TempFile {
    tempfile_path::TempFile::with_contents("contract.json", &checkout_contract().to_string())
}

mod tempfile_path {
    /// A file in the temp dir, removed on drop.
    pub struct TempFile(pub std::path::PathBuf);

    impl TempFile {
        /// Each call gets its own file: tests run in parallel in one process, and one
        /// test's drop must not remove the file another is reading.
        pub fn with_contents(name: &str, contents: &str) -> TempFile {
            use std::sync::atomic::{AtomicUsize, Ordering};
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path =
                std::env::temp_dir().join(format!("traqlyte_it_{}_{n}_{name}", std::process::id()));
            std::fs::write(&path, contents).expect("write temp file");
            TempFile(path)
        }

        pub fn path(&self) -> &str {
            self.0.to_str().expect("utf-8 path")
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

#[tokio::test]
async fn tenant_create_prints_only_the_new_key_on_both_backends() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let db = TestDb::create(backend).await;
        let migrated = traqlyte(&["migrate", "--database-url", &db.url], "");
        assert!(migrated.status.success(), "{migrated:?}");
        let output = traqlyte(&["tenant", "create", "acme", "--database-url", &db.url], "");
        assert!(output.status.success(), "{output:?}");
        let stdout = String::from_utf8(output.stdout).expect("utf-8");
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), 1, "{stdout}");
        assert!(
            lines[0].starts_with("tlk_") && lines[0].len() == 52,
            "{stdout}"
        );
    }
}

/// A database URL naming another application's database by mistake: no command
/// installs traqlyte's tables into it, and the error is one line (no "Caused by:" list,
/// no backtrace even where `RUST_BACKTRACE` is set). A schema an older build made is not
/// upgraded by a one-shot write: that is `traqlyte migrate`'s.
#[tokio::test]
async fn writes_neither_install_into_a_foreign_database_nor_upgrade_an_older_schema() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let db = TestDb::create(backend).await;
        crate::helpers::execute_sql_at(&db.url, "CREATE TABLE orders (id BIGINT)").await;
        let output = Command::new(env!("CARGO_BIN_EXE_traqlyte"))
            .args(["tenant", "create", "acme", "--database-url", &db.url])
            .env("RUST_BACKTRACE", "1")
            .output()
            .expect("traqlyte ran");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let errors: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("error: "))
            .collect();
        assert_eq!(output.status.code(), Some(1), "{output:?}");
        assert!(output.stdout.is_empty(), "{output:?}");
        assert_eq!(errors.len(), 1, "{stderr}");
        assert!(
            errors[0].contains("none of traqlyte's migrations"),
            "{stderr}"
        );
        assert!(
            !stderr.contains("Caused by") && !stderr.contains("backtrace"),
            "{stderr}"
        );
        let migrated = traqlyte(&["migrate", "--database-url", &db.url], "");
        assert!(!migrated.status.success(), "{migrated:?}");

        let db = TestDb::create(backend).await;
        let migrated = traqlyte(&["migrate", "--database-url", &db.url], "");
        assert!(migrated.status.success(), "{migrated:?}");
        crate::helpers::execute_sql_at(
            &db.url,
            "DELETE FROM _sqlx_migrations WHERE version = (SELECT MAX(version) FROM _sqlx_migrations)",
        )
        .await;
        let output = traqlyte(&["tenant", "create", "acme", "--database-url", &db.url], "");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success() && output.stdout.is_empty(),
            "{output:?}"
        );
        assert!(
            stderr.contains("older than this build (1 migration(s) to apply")
                && stderr.contains("run `traqlyte migrate` first"),
            "{stderr}"
        );
    }
}

/// Another process reading the SQLite file in an open transaction (a console) keeps a
/// command's closing checkpoint from completing: the command waits briefly for it, not
/// for the busy timeout (every command took 5 s more and warned that a connection was
/// still in use).
#[tokio::test]
async fn a_reader_holding_a_snapshot_does_not_hold_a_command_at_exit() {
    use sqlx::Connection;
    let db = TestDb::create(Backend::Sqlite).await;
    let migrated = traqlyte(&["migrate", "--database-url", &db.url], "");
    assert!(migrated.status.success(), "{migrated:?}");
    let mut console = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.url))
        .await
        .expect("connect");
    sqlx::raw_sql("BEGIN; SELECT COUNT(*) FROM tenants;")
        .execute(&mut console)
        .await
        .expect("a snapshot held");
    let output = traqlyte(&["tenant", "create", "acme", "--database-url", &db.url], "");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{output:?}");
    assert!(!stderr.contains("still in use"), "{stderr}");
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut console)
        .await
        .expect("released");
}

/// A "database" that accepts connections and never answers (a hung server, another
/// service's port): the command fails within its bounds saying so, not with the pool's
/// "timed out while waiting for an open connection", which named no cause.
#[test]
fn a_database_that_never_answers_is_named_as_such() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    let url = format!("postgres://postgres@127.0.0.1:{port}/db");
    let output = traqlyte(&["tenant", "list", "--database-url", &url], "");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{output:?}");
    assert!(stderr.contains("no answer from the database"), "{stderr}");
}

/// A command leaves the SQLite file whole: as it ends it checkpoints `-wal` into the file
/// and closes its connections, so a copy of the file alone, taken once every process has
/// stopped, holds what the command reported. Before, `tenant create` (and `backfill`,
/// every command) left its commits in `-wal`, and such a copy lacked the tenant (a
/// review's archived file lacked 1,000 backfilled events).
#[tokio::test]
async fn a_command_leaves_its_commits_in_the_sqlite_file_not_beside_it() {
    let db = TestDb::create(Backend::Sqlite).await;
    let path = traqlyte_store::database_file(&db.url).expect("a SQLite file");
    let created = traqlyte(&["tenant", "create", "acme", "--database-url", &db.url], "");
    assert!(created.status.success(), "{created:?}");
    // Deleted by the last connection closed, or at least emptied by the checkpoint.
    let wal = std::path::PathBuf::from(format!("{}-wal", path.display()));
    let left = std::fs::metadata(&wal).map_or(0, |m| m.len());
    assert_eq!(left, 0, "{} holds commits", wal.display());
    let copy = std::path::PathBuf::from(format!("{}.copy", path.display()));
    std::fs::copy(&path, &copy).expect("copy the file alone");
    let copy_url = copy.display().to_string();
    let listed = traqlyte(&["tenant", "list", "--database-url", &copy_url], "");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", copy.display()));
    }
    assert!(listed.status.success(), "{listed:?}");
    let stdout = String::from_utf8_lossy(&listed.stdout);
    assert!(stdout.contains("acme"), "{stdout}");
}

/// `serve` stopped by SIGTERM leaves the SQLite file whole too: it opened its store
/// without the other commands' closing, and a review found the file alone empty (every
/// commit in `-wal`) after a clean stop.
#[tokio::test]
async fn a_stopped_server_leaves_its_commits_in_the_sqlite_file() {
    let db = TestDb::create(Backend::Sqlite).await;
    let path = traqlyte_store::database_file(&db.url).expect("a SQLite file");
    let created = traqlyte(&["tenant", "create", "acme", "--database-url", &db.url], "");
    assert!(created.status.success(), "{created:?}");
    let key = String::from_utf8_lossy(&created.stdout).trim().to_string();
    let mut server = crate::helpers::ServerProcess::start(&db.url, &[]);
    let client = reqwest::Client::new();
    let post = |path: &str, body: serde_json::Value| {
        client
            .post(format!("{}{path}", server.address))
            .bearer_auth(&key)
            .json(&body)
            .send()
    };
    let contract = post("/contracts", crate::helpers::checkout_contract())
        .await
        .expect("sent");
    assert_eq!(contract.status(), reqwest::StatusCode::CREATED);
    for i in 0..5 {
        let event = crate::helpers::checkout_event(&format!("kept-{i}"));
        let stored = post("/events/checkout_completed", event)
            .await
            .expect("sent");
        assert_eq!(stored.status(), reqwest::StatusCode::OK);
    }
    server.terminate();
    let status = server
        .exit_within(std::time::Duration::from_secs(30))
        .await
        .expect("stopped");
    assert!(status.success(), "{status:?}");
    let wal = std::path::PathBuf::from(format!("{}-wal", path.display()));
    let left = std::fs::metadata(&wal).map_or(0, |m| m.len());
    assert_eq!(left, 0, "{} holds commits", wal.display());
    let copy = std::path::PathBuf::from(format!("{}.copy", path.display()));
    std::fs::copy(&path, &copy).expect("copy the file alone");
    let events: i64 = {
        use sqlx::Connection;
        let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", copy.display()))
            .await
            .expect("open the copy");
        sqlx::query_scalar("SELECT COUNT(*) FROM events")
            .fetch_one(&mut conn)
            .await
            .expect("count")
    };
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", copy.display()));
    }
    assert_eq!(events, 5);
}

/// A listing whose reader stops early (`traqlyte tenant list | head -0`) ends as other
/// Unix tools do, by SIGPIPE; it panicked ("failed printing to stdout: Broken pipe",
/// a backtrace, status 101).
#[tokio::test]
async fn a_listing_into_a_closed_pipe_ends_without_a_panic() {
    use std::os::unix::process::ExitStatusExt;
    let db = TestDb::create(Backend::Sqlite).await;
    let created = traqlyte(&["tenant", "create", "acme", "--database-url", &db.url], "");
    assert!(created.status.success(), "{created:?}");
    let (reader, writer) = std::io::pipe().expect("a pipe");
    // No one will read: the first write meets a closed pipe.
    drop(reader);
    let output = Command::new(env!("CARGO_BIN_EXE_traqlyte"))
        .args(["tenant", "list", "--database-url", &db.url])
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .expect("run traqlyte");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    // SIGPIPE is 13 on Linux.
    assert_eq!(output.status.signal(), Some(13), "{output:?}");
    // `fire`'s report into a closed pipe ends alike (it panicked, status 101): nothing
    // listens at the port, so its three requests fail fast and the report follows.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let mut child = Command::new(env!("CARGO_BIN_EXE_traqlyte"))
        .args(["fire", "--count", "3", "--url"])
        .arg(format!("http://127.0.0.1:{port}/events/checkout_completed"))
        .env("TRAQLYTE_API_KEY", "tl_test_unused")
        .stdin(Stdio::piped())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .spawn()
        .expect("traqlyte fire started");
    std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), b"{}").expect("body");
    let output = child.wait_with_output().expect("traqlyte fire ran");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(output.status.signal(), Some(13), "{output:?}");
}

/// An empty database URL (an unset `$DB` in `--database-url "$DB"`) is refused: SQLite
/// would open a private temporary database, acknowledge every write and lose it.
#[test]
fn an_empty_database_url_is_refused_and_nothing_is_acknowledged() {
    for url in [
        "",
        "sqlite://",
        "  ",
        "sqlite:",
        "sqlite://?mode=rwc",
        "file:",
        // Gone with the process: the key printed would open nothing.
        "sqlite::memory:",
        "sqlite://ghost.db?mode=memory",
        // PostgreSQL, in forms that were taken for a SQLite file's name.
        "postgres:ghostdb",
        "host=127.0.0.1 dbname=test user=postgres",
    ] {
        let output = traqlyte(&["tenant", "create", "ghostco", "--database-url", url], "");
        assert!(!output.status.success(), "{url:?}: {output:?}");
        assert!(
            output.stdout.is_empty(),
            "{url:?} printed a key: {output:?}"
        );
    }
    assert!(!std::path::Path::new("postgres:ghostdb").exists());
    // A server on an in-memory database would acknowledge writes its exit loses.
    let output = traqlyte(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            "sqlite::memory:",
        ],
        "",
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{output:?}");
    assert!(stderr.contains("in-memory SQLite database"), "{stderr}");
}

/// `partitions maintain` has no default horizon: a guess shorter than `serve`'s would
/// detach days that server still writes live.
#[test]
fn partitions_maintain_needs_the_horizon_named() {
    let output = traqlyte(
        &[
            "partitions",
            "maintain",
            "--database-url",
            "sqlite::memory:",
        ],
        "",
    );
    assert!(!output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--dedupe-horizon-days"), "{stderr}");
}

/// The listings only read: a mistyped SQLite path is an error (no new empty file), and a
/// database this build has not migrated is refused with the command that migrates it,
/// never migrated by a listing.
#[test]
fn listings_neither_create_nor_migrate_a_database() {
    const WELL_FORMED_KEY: &str = "tlk_000000000000000000000000000000000000000000000000";
    let dir = std::env::temp_dir().join(format!("traqlyte_it_{}_listings", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let missing = dir.join("typo.db");
    let missing = missing.to_str().expect("utf-8");
    for args in [
        vec!["tenant", "list"],
        vec!["key", "list", "--tenant", "acme"],
        vec!["source", "list", "--tenant", "acme"],
        vec!["partitions", "status"],
        // A registered contract, read with a key: the same database as the server's.
        vec![
            "contracts",
            "show",
            "checkout_completed",
            "--api-key",
            WELL_FORMED_KEY,
        ],
    ] {
        let mut args = args.clone();
        args.extend(["--database-url", missing]);
        let output = traqlyte(&args, "");
        assert!(!output.status.success(), "{args:?}: {output:?}");
        assert!(
            String::from_utf8_lossy(&output.stderr).contains("no database at"),
            "{args:?}: {output:?}"
        );
    }
    assert!(
        !std::path::Path::new(missing).exists(),
        "a listing created {missing}"
    );
    // The same through the URL forms SQLite takes.
    for url in [
        format!("sqlite:{missing}"),
        format!("sqlite://{missing}?mode=rwc"),
    ] {
        let output = traqlyte(&["tenant", "list", "--database-url", &url], "");
        assert!(!output.status.success(), "{url}: {output:?}");
        assert!(
            !std::path::Path::new(missing).exists(),
            "{url} created {missing}"
        );
    }
    // An empty file: a database never migrated.
    let empty = dir.join("empty.db");
    std::fs::write(&empty, b"").expect("create");
    let empty = empty.to_str().expect("utf-8");
    let output = traqlyte(&["tenant", "list", "--database-url", empty], "");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{output:?}");
    assert!(stderr.contains("run `traqlyte migrate` first"), "{stderr}");
    let migrated = traqlyte(&["migrate", "--database-url", empty], "");
    assert!(migrated.status.success(), "{migrated:?}");
    let listed = traqlyte(&["tenant", "list", "--database-url", empty], "");
    assert!(listed.status.success(), "{listed:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `traqlyte id segment.message` cannot know the source a message's id is keyed by: it
/// says so instead of printing an id the server would never compute.
#[test]
fn id_refuses_segment_messages_whose_ids_need_their_source() {
    let output = traqlyte(
        &["id", "segment.message"],
        r#"{"type": "track", "event": "Order Completed", "userId": "u1", "messageId": "m1"}"#,
    );
    assert!(!output.status.success(), "{output:?}");
    assert!(output.stdout.is_empty(), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("keyed by the tenant's source"),
        "{output:?}"
    );
}

/// `fire` prints its report and fails when requests got no answer (nothing listens), so
/// a script cannot take a run that reached no server for one that did.
#[test]
fn fire_fails_when_its_requests_get_no_answer() {
    // A port that was free a moment ago: bound, read, released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let url = format!("http://127.0.0.1:{port}/events/checkout_completed");
    let fire = |stdin: &[u8]| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_traqlyte"))
            .args(["fire", "--url", &url, "--count", "3", "--concurrency", "2"])
            .env("TRAQLYTE_API_KEY", "tl_test_unused")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("traqlyte fire started");
        std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), stdin)
            .expect("body written");
        child.wait_with_output().expect("traqlyte fire ran")
    };
    // No body on stdin: refused before anything is sent.
    let empty = fire(b"");
    assert!(!empty.status.success(), "{empty:?}");
    assert!(empty.stdout.is_empty(), "{empty:?}");
    assert!(
        String::from_utf8_lossy(&empty.stderr).contains("no body on stdin"),
        "{empty:?}"
    );
    let output = fire(b"{}");
    assert!(!output.status.success(), "{output:?}");
    let report: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("the report is printed first");
    assert_eq!(report["errors"], 3, "{report}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("3 of 3 requests got no answer"),
        "{output:?}"
    );
}

/// A backfill of a file that does not exist touches no database: nothing is created or
/// migrated before the file is opened.
#[test]
fn a_backfill_of_a_missing_file_touches_no_database() {
    let dir = std::env::temp_dir().join(format!("traqlyte_it_{}_backfill", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let database = dir.join("untouched.db");
    let database = database.to_str().expect("utf-8");
    let missing = dir.join("no-such-file.ndjson");
    let output = traqlyte(
        &[
            "backfill",
            "--tenant",
            "acme",
            "--contract",
            "openlineage.run_event",
            "--file",
            missing.to_str().expect("utf-8"),
            "--database-url",
            database,
        ],
        "",
    );
    assert!(!output.status.success(), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("no-such-file.ndjson"),
        "{output:?}"
    );
    assert!(
        !std::path::Path::new(database).exists(),
        "a database was created"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--help` never shows the value of an environment variable that holds a secret.
#[test]
fn help_does_not_print_secrets_from_the_environment() {
    for (command, variable) in [
        (["contracts", "show", "--help"], "TRAQLYTE_API_KEY"),
        (["tenant", "list", "--help"], "TRAQLYTE_DATABASE_URL"),
        (["bench", "lineage-ingest", "--help"], "TRAQLYTE_API_KEY"),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_traqlyte"))
            .args(command)
            .env(
                "TRAQLYTE_DATABASE_URL",
                "postgres://u:s3cret-db@127.0.0.1/db",
            )
            .env("TRAQLYTE_API_KEY", "tlk_s3cret-key")
            .output()
            .expect("run");
        assert!(output.status.success(), "{output:?}");
        let help = String::from_utf8_lossy(&output.stdout);
        assert!(help.contains(variable), "{help}");
        assert!(!help.contains("s3cret"), "{help}");
    }
    // No variable is shown as set to nothing (`[env: NAME=]` read as an empty setting).
    for command in [
        vec!["serve", "--help"],
        vec!["partitions", "maintain", "--help"],
        vec!["backfill", "--help"],
    ] {
        let output = traqlyte(&command, "");
        let help = String::from_utf8_lossy(&output.stdout);
        assert!(help.contains("[env: TRAQLYTE_"), "{help}");
        assert!(!help.contains("=]"), "{command:?}: {help}");
    }
}

/// A database URL's password never reaches an error message: not through the store's
/// refusal of a scheme, not through a listing's "no database", not when it holds `?`.
#[test]
fn errors_never_print_the_database_password() {
    let cases: [(&[&str], &str); 3] = [
        (
            &["migrate", "--database-url", "mysql://u:S3CRET@127.0.0.1/db"],
            "scheme \"mysql\"",
        ),
        (
            &[
                "tenant",
                "list",
                "--database-url",
                "mysql://u:S3CRET@127.0.0.1/db",
            ],
            "scheme \"mysql\"",
        ),
        // Port 1 answers nothing: the connection fails and the URL is named.
        (
            &[
                "migrate",
                "--database-url",
                "postgres://postgres:pa?S3CRET@127.0.0.1:1/db",
            ],
            "postgres://postgres:***@127.0.0.1:1/db",
        ),
    ];
    for (args, expected) in cases {
        let output = traqlyte(args, "");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?}: {output:?}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(!stderr.contains("S3CRET"), "{args:?}: {stderr}");
    }
    // A server out of reach is named as such, not as the pool's timeout.
    let output = traqlyte(
        &[
            "tenant",
            "list",
            "--database-url",
            "postgres://postgres@127.0.0.1:1/db",
        ],
        "",
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("refused"), "{stderr}");
    assert!(!stderr.contains("pool timed out"), "{stderr}");
}

#[test]
fn contracts_show_prints_the_semantic_fields() {
    let file = contract_file();
    let output = traqlyte(&["contracts", "show", file.path()], "");
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).expect("utf-8");
    for expected in [
        "checkout_completed version 1",
        "/merchant_id",
        "required",
        "rounded to 2 decimals",
        "array as a set",
        "/sent_at, /attempt, /host",
        "event time: /occurred_at",
    ] {
        assert!(
            text.contains(expected),
            "{expected:?} missing from:\n{text}"
        );
    }
}

/// `--version` is never ignored: a built-in contract has one version, and a file holds
/// its own.
#[test]
fn a_version_no_contract_has_is_refused() {
    let builtin = traqlyte(
        &[
            "contracts",
            "show",
            "openlineage.run_event",
            "--version",
            "2",
        ],
        "",
    );
    assert!(!builtin.status.success(), "{builtin:?}");
    assert!(
        String::from_utf8_lossy(&builtin.stderr).contains("only version is 1"),
        "{builtin:?}"
    );
    let same = traqlyte(
        &[
            "contracts",
            "show",
            "openlineage.run_event",
            "--version",
            "1",
        ],
        "",
    );
    assert!(same.status.success(), "{same:?}");
    let file = contract_file();
    let from_file = traqlyte(&["contracts", "show", file.path(), "--version", "1"], "");
    assert!(!from_file.status.success(), "{from_file:?}");
    assert!(
        String::from_utf8_lossy(&from_file.stderr).contains("is a file"),
        "{from_file:?}"
    );
}

#[tokio::test]
async fn id_prints_the_canonical_bytes_and_the_id_the_server_would_compute() {
    let file = contract_file();
    let output = traqlyte(&["id", file.path()], &checkout_event("order_1").to_string());
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).expect("utf-8");
    let contract = traqlyte_identity::Contract::from_json(&checkout_contract()).expect("contract");
    let expected = contract
        .identify(&checkout_event("order_1"))
        .expect("identified");
    assert!(
        text.contains(&format!(
            "canonical: {}",
            String::from_utf8_lossy(&expected.identity_bytes)
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("event_id: {}", expected.event_id)),
        "{text}"
    );
    // And the server, given the same contract and event, answers that very id.
    let app = crate::helpers::spawn_app(Backend::Sqlite).await;
    app.register_checkout_contract().await;
    let stored = app.post_event(&checkout_event("order_1")).await;
    assert!(
        text.contains(&format!(
            "event_id: {}",
            stored.body["event_id"].as_str().expect("the server's id")
        )),
        "{text} against {}",
        stored.body
    );
}

/// An event nested deeper than the server takes by default (`--json-depth-max 32`) gets
/// no id from `traqlyte id` either, unless given the depth of a server that takes it
/// (it printed one for a 41-level event the server refuses with `400 too_deep`).
#[tokio::test]
async fn id_refuses_an_event_deeper_than_the_server_takes() {
    let file = contract_file();
    let mut event = checkout_event("order_1");
    let mut deep = serde_json::json!(1);
    for _ in 0..40 {
        deep = serde_json::json!({ "n": deep });
    }
    event["extra"] = deep;
    let refused = traqlyte(&["id", file.path()], &event.to_string());
    assert!(!refused.status.success(), "{refused:?}");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("at most 32 levels deep") && said.contains("--json-depth-max"),
        "{said}"
    );
    let app = crate::helpers::spawn_app(Backend::Sqlite).await;
    app.register_checkout_contract().await;
    assert_eq!(app.post_event(&event).await.code(), "too_deep");
    let taken = traqlyte(
        &["id", file.path(), "--json-depth-max", "64"],
        &event.to_string(),
    );
    assert!(taken.status.success(), "{taken:?}");
}

#[tokio::test]
async fn serve_migrates_an_empty_sqlite_file_and_answers_health_checks() {
    let db = TestDb::create(Backend::Sqlite).await;
    // Named relative to the working directory, as the default `traqlyte.db` is: the log
    // says which file that is.
    let path = std::path::PathBuf::from(&db.url);
    let (dir, name) = (
        path.parent().expect("a directory"),
        path.file_name().and_then(|n| n.to_str()).expect("a name"),
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_traqlyte"))
        .current_dir(dir)
        .env("RUST_LOG", "info")
        .args(["serve", "--database-url", name, "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read address");
    let address = line
        .split_whitespace()
        .find(|word| word.starts_with("http://"))
        .expect("address")
        .to_string();
    let health: serde_json::Value = reqwest::get(format!("{address}/healthz"))
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    let _ = child.kill();
    let output = child.wait_with_output().expect("wait");
    assert_eq!(
        health,
        serde_json::json!({"status": "ok", "backend": "sqlite"})
    );
    let log = String::from_utf8_lossy(&output.stderr);
    let ready = log
        .lines()
        .find(|line| line.contains("database ready"))
        .unwrap_or_else(|| panic!("no start-up line: {log}"));
    assert!(ready.contains(&db.url), "{ready}");
}

/// A port already taken is named with the option that asked for it: the API's and the
/// metrics' listeners failed with the same bare "Address already in use".
#[tokio::test]
async fn a_port_in_use_names_the_option_that_asked_for_it() {
    let db = TestDb::create(Backend::Sqlite).await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("address").to_string();
    for (option, extra) in [
        ("--listen", vec!["--listen", port.as_str()]),
        (
            "--metrics-listen",
            vec!["--listen", "127.0.0.1:0", "--metrics-listen", port.as_str()],
        ),
    ] {
        let mut args = vec!["serve", "--database-url", db.url.as_str()];
        args.extend(extra);
        let output = traqlyte(&args, "");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{option}: {stderr}");
        assert!(
            stderr.contains(&format!("{option} {port}")),
            "{option}: {stderr}"
        );
    }
}

/// `consume nats --metrics-token` without `--metrics-listen` protected nothing (the
/// consumer has no other listener) and was taken silently; it is refused before anything
/// is opened.
#[test]
fn consume_nats_refuses_a_metrics_token_without_a_metrics_listener() {
    let database = std::env::temp_dir().join(format!(
        "traqlyte_it_consume_token_{}.db",
        std::process::id()
    ));
    let database = database.to_str().expect("utf-8 path");
    let output = traqlyte(
        &[
            "consume",
            "nats",
            "--url",
            "nats://127.0.0.1:1",
            "--stream",
            "S",
            "--durable",
            "d",
            "--tenant",
            "acme",
            "--metrics-token",
            "0123456789abcdef0123",
            "--database-url",
            database,
        ],
        "",
    );
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--metrics-listen"), "{stderr}");
    assert!(!std::path::Path::new(database).exists(), "nothing opened");
}

/// A consumer option of `serve` without `--nats-url` would start no consumer; it is
/// refused before anything is opened, naming what is missing.
#[test]
fn serve_refuses_consumer_options_without_a_nats_url() {
    let database = std::env::temp_dir().join(format!(
        "traqlyte_it_nats_options_{}.db",
        std::process::id()
    ));
    let database = database.to_str().expect("utf-8 path");
    for option in [
        "--nats-stream",
        "--nats-durable",
        "--nats-tenant",
        "--nats-segment-source",
    ] {
        let output = traqlyte(&["serve", "--database-url", database, option, "x"], "");
        assert!(!output.status.success(), "{option}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("--nats-url"), "{option}: {stderr}");
    }
    assert!(!std::path::Path::new(database).exists(), "nothing opened");
    // A bad consumer value is named by serve's own flag, before the database is opened.
    let nats = [
        "--nats-url",
        "nats://127.0.0.1:1",
        "--nats-stream",
        "S",
        "--nats-durable",
        "d",
    ];
    for (option, value) in [("--nats-tenant", "  "), ("--nats-segment-source", "  ")] {
        let mut args = vec!["serve", "--database-url", database];
        args.extend(nats);
        let tenant = if option == "--nats-tenant" {
            value
        } else {
            "acme"
        };
        args.extend(["--nats-tenant", tenant]);
        if option == "--nats-segment-source" {
            args.extend([option, value]);
        }
        let output = traqlyte(&args, "");
        assert!(!output.status.success(), "{option}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(&format!("{option}:")), "{option}: {stderr}");
    }
    assert!(!std::path::Path::new(database).exists(), "nothing opened");
}

/// A flag outside its range is refused before anything is opened, naming the flag and its
/// range: `--batch-events-max` beyond what one statement's parameters can bind, and zeros
/// that made every request time out (`--request-timeout-ms 0`), refused every object
/// (`--json-depth-max 0`) or purged reservations still in flight (retention 0).
#[test]
fn serve_refuses_flags_beyond_their_range() {
    let database =
        std::env::temp_dir().join(format!("traqlyte_it_flag_range_{}.db", std::process::id()));
    let database = database.to_str().expect("utf-8 path");
    let cases = [
        ("--batch-events-max", "0", "1..=10000"),
        ("--batch-events-max", "10001", "1..=10000"),
        ("--batch-events-max", "40000", "1..=10000"),
        ("--request-timeout-ms", "0", "1.."),
        ("--pool-connections-max", "0", "1.."),
        ("--json-depth-max", "0", "1..=120"),
        ("--json-depth-max", "121", "1..=120"),
        ("--body-bytes-max", "0", "1.."),
        ("--batch-bytes-max", "0", "1.."),
        ("--idempotency-stale-after-ms", "0", "1.."),
        ("--idempotency-retention-hours", "0", "1.."),
        ("--nats-batch-messages-max", "0", "1.."),
        // An empty token was no token: any peer of --metrics-listen read the metrics.
        ("--metrics-token", "", "at least 16"),
        ("--metrics-token", "short", "at least 16"),
        // A bad address was found after the migrations, without naming its flag.
        ("--listen", "nope", "HOST:PORT"),
        ("--metrics-listen", "127.0.0.1", "HOST:PORT"),
    ];
    for (flag, value, range) in cases {
        let output = traqlyte(&["serve", "--database-url", database, flag, value], "");
        assert!(!output.status.success(), "{flag} {value}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(flag) && stderr.contains(range),
            "{flag} {value}: {stderr}"
        );
    }
    let output = traqlyte(
        &[
            "consume",
            "nats",
            "--database-url",
            database,
            "--url",
            "nats://127.0.0.1:1",
            "--stream",
            "S",
            "--durable",
            "D",
            "--tenant",
            "t",
            "--nats-nak-delay-ms-min",
            "5000",
            "--nats-nak-delay-ms-max",
            "1000",
        ],
        "",
    );
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--nats-nak-delay-ms-min"), "{stderr}");
    assert!(!std::path::Path::new(database).exists(), "nothing opened");
}

/// The first SIGTERM drains: requests in flight are answered first (up to the request
/// timeout). A second one, as a service manager's stop timeout or an operator's second
/// Ctrl-C sends, exits at once: what was acknowledged is durable, the rest is retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_second_signal_stops_serve_without_waiting_for_requests_in_flight() {
    use std::time::Duration;

    let app = crate::helpers::spawn_app(Backend::Sqlite).await;
    let created = app
        .post_json(
            "/campaigns",
            &crate::idempotency::campaign_body("second-signal"),
        )
        .await;
    let id = created.body["id"].as_str().expect("id").to_string();
    let mut server = crate::helpers::ServerProcess::start_with_env(
        app.database_url(),
        &[],
        &[("TRAQLYTE_TEST_PUBLISH_DELAY_MS", "60000")],
    );
    let request = app
        .client
        .post(format!("{}/campaigns/{id}/publish", server.address))
        .bearer_auth(&app.key)
        .header("X-TL-Idempotency-Key", "held")
        .send();
    let hung = tokio::spawn(request);
    crate::idempotency::wait_for_reservation(&app, "held").await;
    server.terminate();
    assert!(
        !server.exited_within(Duration::from_secs(1)).await,
        "the first signal waits for the request in flight"
    );
    server.terminate();
    let status = server.exit_within(Duration::from_secs(5)).await;
    // As a shell reports a process SIGTERM ended (it said 130, Ctrl-C's, whatever the
    // signal).
    assert_eq!(
        status.and_then(|status| status.code()),
        Some(143),
        "a second signal exits at once: {status:?}"
    );
    hung.abort();
}

/// A migration PostgreSQL refuses with a hint names the hint: "out of shared memory"
/// (migrations `0010` and `0022` on a database with years of days) says nothing of
/// `max_locks_per_transaction` without it. Injected: an event trigger that refuses every
/// DDL statement but the creation of the migrations table, with a hint, so the first
/// migration fails.
#[tokio::test]
async fn a_failed_migration_names_postgresqls_hint() {
    let db = TestDb::create(Backend::Postgres).await;
    let mut admin = <sqlx::PgConnection as sqlx::Connection>::connect(&db.url)
        .await
        .expect("connect");
    sqlx::raw_sql(
        "CREATE FUNCTION refuse_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $$ \
         BEGIN \
           IF EXISTS (SELECT 1 FROM pg_event_trigger_ddl_commands() \
                      WHERE object_identity NOT LIKE '%_sqlx_migrations%') THEN \
             RAISE EXCEPTION 'injected refusal' USING HINT = 'raise max_locks_per_transaction'; \
           END IF; \
         END $$; \
         CREATE EVENT TRIGGER refuse_ddl ON ddl_command_end EXECUTE FUNCTION refuse_ddl();",
    )
    .execute(&mut admin)
    .await
    .expect("the event trigger");
    let output = traqlyte(&["migrate", "--database-url", &db.url], "");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("migration 1") && stderr.contains("hint: raise max_locks_per_transaction"),
        "{stderr}"
    );
    sqlx::raw_sql("DROP EVENT TRIGGER refuse_ddl")
        .execute(&mut admin)
        .await
        .expect("drop the event trigger");
}

/// A process that finds another session migrating says so, naming the session, instead
/// of waiting in silence (a `migrate` killed part way leaves its session migrating until
/// PostgreSQL notices), then migrates once the lock is free.
#[tokio::test]
async fn a_migration_waiting_for_another_session_says_which() {
    let db = TestDb::create(Backend::Postgres).await;
    let mut holder = <sqlx::PgConnection as sqlx::Connection>::connect(&db.url)
        .await
        .expect("connect");
    // The migration lock's key (`migrate.rs`, "trqlyte" in ASCII).
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(0x0074_7271_6c79_7465_i64)
        .execute(&mut holder)
        .await
        .expect("hold the migration lock");
    let (pid,): (i32,) = sqlx::query_as("SELECT pg_backend_pid()")
        .fetch_one(&mut holder)
        .await
        .expect("pid");
    let mut child = Command::new(env!("CARGO_BIN_EXE_traqlyte"))
        .args(["migrate", "--database-url", &db.url])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn migrate");
    let stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let (lines, said) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if line.contains("waiting for the migration lock") {
                let _ = lines.send(line);
            }
        }
    });
    let waited = said.recv_timeout(std::time::Duration::from_secs(20));
    if waited.is_err() {
        let _ = child.kill();
    }
    let waited = waited.expect("migrate said nothing of the lock it waits for");
    assert!(waited.contains(&pid.to_string()), "{waited}");
    sqlx::query("SELECT pg_advisory_unlock_all()")
        .execute(&mut holder)
        .await
        .expect("release");
    let status = child.wait().expect("migrate ended");
    assert!(status.success());
}

/// A SQLite file with a damaged page (a torn copy, a restore over a stale WAL) is refused
/// by `serve` before it writes: SQLite notices corruption only on the pages a statement
/// reads, and a torn copy was served, answered `/healthz` and acknowledged new events.
#[tokio::test]
async fn serve_refuses_a_corrupt_sqlite_file_before_writing_into_it() {
    use std::io::{Seek, SeekFrom};
    let db = TestDb::create(Backend::Sqlite).await;
    let migrated = traqlyte(&["migrate", "--database-url", &db.url], "");
    assert!(migrated.status.success(), "{migrated:?}");
    let (root, page_size): (i64, i64) = {
        use sqlx::Connection;
        let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.url))
            .await
            .expect("open");
        let root: i64 = sqlx::query_scalar(
            "SELECT rootpage FROM sqlite_master WHERE type = 'index' AND tbl_name = 'events' LIMIT 1",
        )
        .fetch_one(&mut conn)
        .await
        .expect("an index of events");
        let size: i64 = sqlx::query_scalar("PRAGMA page_size")
            .fetch_one(&mut conn)
            .await
            .expect("page size");
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(&mut conn)
            .await
            .expect("checkpoint");
        conn.close().await.expect("close");
        (root, size)
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(&db.url)
        .expect("open the file");
    file.seek(SeekFrom::Start(((root - 1) * page_size) as u64))
        .expect("seek");
    file.write_all(&vec![0xA5u8; page_size as usize])
        .expect("damage a page");
    drop(file);
    let mut child = Command::new(env!("CARGO_BIN_EXE_traqlyte"))
        .args([
            "serve",
            "--database-url",
            &db.url,
            "--listen",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn serve");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("serve kept serving a corrupt file");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("read stderr");
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("the SQLite file is corrupt"), "{stderr}");
    assert!(stderr.contains("VACUUM INTO"), "{stderr}");
    // Every command that writes checks first (`consume nats` stored into such a file).
    let lines =
        std::env::temp_dir().join(format!("traqlyte_it_corrupt_{}.ndjson", std::process::id()));
    std::fs::write(&lines, "{}\n").expect("write");
    let path = lines.to_str().expect("utf-8 path").to_string();
    let backfill = traqlyte(
        &[
            "backfill",
            "--tenant",
            "t",
            "--contract",
            "c",
            "--file",
            &path,
            "--database-url",
            &db.url,
        ],
        "",
    );
    let _ = std::fs::remove_file(&lines);
    let stderr = String::from_utf8_lossy(&backfill.stderr);
    assert!(!backfill.status.success(), "{stderr}");
    assert!(stderr.contains("the SQLite file is corrupt"), "{stderr}");
}

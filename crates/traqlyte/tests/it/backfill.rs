//! `traqlyte backfill`: a file with a re-sent live event, a retry inside the file, a
//! collision and invalid lines, run dry, then for real, then again — the dry run's counts
//! equal the real run's, the second run inserts nothing, and the store counts it all like
//! live ingestion.

use std::process::Command;

use serde_json::{json, Value};

use crate::helpers::{checkout_event, spawn_app, Backend, TestApp};

crate::on_both_backends!(
    a_backfill_reconciles_against_stored_events_and_a_second_run_inserts_nothing,
    a_backfill_of_run_events_matches_the_live_ones_and_adds_no_graph_rows,
    a_run_in_one_batch_is_its_earliest_events_whatever_the_line_order,
    a_backfill_stores_events_older_than_the_horizon_once_and_matches_detached_ones,
    a_line_of_exactly_the_limit_is_stored_and_no_line_after_a_long_one_is_lost,
    a_dry_run_over_several_batches_meets_the_old_days_its_later_batches_bring,
    a_backfill_under_an_older_version_meets_the_events_stored_under_it,
    a_gzip_file_and_standard_input_with_stderr_closed_are_backfilled_whole,
);

/// Ctrl-C stops a backfill with what it committed printed: the batches written stay, the
/// batch in progress is not written, the summary says where it stopped, and the command
/// exits 130 (143 for SIGTERM); running it again resumes. A dry run stopped so says it
/// wrote nothing. Before, the process died with the signal and printed nothing: the
/// operator of a multi-hour load could not tell what was stored. The input is a pipe
/// whose writer the same Ctrl-C stops (`zcat … | traqlyte backfill --file -`), so the run
/// meets the signal while it waits for lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backfill_stopped_by_ctrl_c_says_what_it_committed_and_resumes() {
    let app = spawn_app(Backend::Sqlite).await;
    app.register_checkout_contract().await;
    let lines: Vec<String> = (0..2_500)
        .map(|i| checkout_event(&format!("stopped_{i}")).to_string())
        .collect();
    // A dry run stopped by SIGTERM writes nothing and says so.
    let (status, mut summary, said) = stopped_backfill(&app, &lines, "TERM", true, 0).await;
    assert_eq!(status, Some(143), "{said}");
    assert!(summary["interrupted_after_line"].take().as_u64() > Some(2_000));
    assert_eq!(
        summary,
        json!({"dry_run": true, "would_insert": 2_000, "already_present": 0, "collided": 0,
               "rejected": 0, "interrupted_after_line": null})
    );
    assert!(said.contains("(dry run: nothing was written;"), "{said}");
    assert_eq!(app.checkout_stats().await.0, 0);

    let (status, mut summary, said) = stopped_backfill(&app, &lines, "INT", false, 2_000).await;
    assert_eq!(status, Some(130), "{said}");
    // The run stops at the line it reads next: any of the third batch's.
    let last = summary["interrupted_after_line"].take();
    let last = last.as_u64().expect("the line it stopped after");
    assert!((2_000..=2_500).contains(&last), "{last}");
    assert_eq!(
        summary,
        json!({"dry_run": false, "inserted": 2_000, "already_present": 0, "collided": 0,
               "rejected": 0, "interrupted_after_line": null})
    );
    let told = format!(
        "interrupted after line {last}: the {} identified line(s) of the batch in progress were not written",
        last - 2_000
    );
    assert!(said.contains(&told), "{said}");
    assert_eq!(app.checkout_stats().await.0, 2_000);
    // The same command on the whole file resumes.
    let file = Ndjson::new(&lines);
    assert_eq!(
        backfill(&app, "checkout_completed", &file.0, false),
        json!({"dry_run": false, "inserted": 500, "already_present": 2_000, "collided": 0, "rejected": 0})
    );
}

/// Backfills `lines` from a pipe, sends `signal` once two batches are through (stored, or
/// for a dry run, read: `counted` stored events are there before), ends the input once
/// the signal is taken, and returns the exit status, the JSON summary and stderr.
async fn stopped_backfill(
    app: &TestApp,
    lines: &[String],
    signal: &str,
    dry_run: bool,
    counted: i64,
) -> (Option<i32>, Value, String) {
    use std::io::{BufRead, Write};
    let mut command = Command::new(env!("CARGO_BIN_EXE_traqlyte"));
    command
        .args(["backfill", "--tenant", "test tenant", "--contract"])
        .args(["checkout_completed", "--file", "-", "--json"])
        .args(["--database-url", app.database_url()]);
    if dry_run {
        command.arg("--dry-run");
    }
    let mut child = command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run traqlyte backfill");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all((lines.join("\n") + "\n").as_bytes())
        .expect("write lines");
    // Two batches of 1,000 go through; the last 500 lines wait for the input's end. A
    // dry run stores nothing to wait for: the write above returned once the run had read
    // all but what the pipe buffers (64 KiB, some 300 lines), so past its second batch.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !dry_run && app.checkout_stats().await.0 < counted {
        assert!(
            std::time::Instant::now() < deadline,
            "two batches never committed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let pid = child.id().to_string();
    let sent = Command::new("kill")
        .args([format!("-{signal}"), pid.clone()])
        .status();
    assert!(sent.is_ok_and(|s| s.success()), "kill -{signal} {pid}");
    // The input ends only once the signal is taken (else the run would end whole).
    let mut stderr = std::io::BufReader::new(child.stderr.take().expect("stderr"));
    let mut said = String::new();
    while !said.contains("stopping at the next line read") {
        let mut line = String::new();
        let read = stderr.read_line(&mut line).expect("stderr");
        assert!(read > 0, "the signal was not taken: {said}");
        said.push_str(&line);
    }
    drop(stdin);
    let output = child.wait_with_output().expect("wait");
    std::io::Read::read_to_string(&mut stderr, &mut said).expect("stderr");
    let summary = serde_json::from_slice(&output.stdout).expect("summary");
    (output.status.code(), summary, said)
}

/// An archive as exports write it (gzip) is inflated as it is read; `--file -` reads
/// standard input; and a closed stderr (`… 2>&1 | head`) loses the diagnostics, not the
/// import. Before, the gzip file's bytes were read as lines (every line rejected, exit 3,
/// nothing stored), `-` was a file name, and the first rejection written to a closed
/// stderr panicked the process after its first batch.
async fn a_gzip_file_and_standard_input_with_stderr_closed_are_backfilled_whole(backend: Backend) {
    use std::io::Write;
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    // Three batches of 1,000 lines, 30 of them invalid (more than the 20 named).
    let lines: Vec<String> = (0..3_000)
        .map(|i| {
            if i % 100 == 7 {
                "{\"merchant_id\": ".to_string()
            } else {
                checkout_event(&format!("order_{i}")).to_string()
            }
        })
        .collect();
    let plain = Ndjson::new(&lines);
    let gzip = Ndjson(plain.0.with_extension("ndjson.gz"));
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder
        .write_all(&std::fs::read(&plain.0).expect("read"))
        .expect("compress");
    std::fs::write(&gzip.0, encoder.finish().expect("compress")).expect("write");

    let from_gzip = backfill(&app, "checkout_completed", &gzip.0, false);
    assert_eq!(
        from_gzip,
        json!({"dry_run": false, "inserted": 2_970, "already_present": 0, "collided": 0, "rejected": 30})
    );

    let mut child = Command::new(env!("CARGO_BIN_EXE_traqlyte"))
        .args([
            "backfill",
            "--tenant",
            "test tenant",
            "--contract",
            "checkout_completed",
        ])
        .args([
            "--file",
            "-",
            "--json",
            "--database-url",
            app.database_url(),
        ])
        .stdin(std::process::Stdio::from(
            std::fs::File::open(&plain.0).expect("open"),
        ))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run traqlyte backfill");
    drop(child.stderr.take());
    let output = child.wait_with_output().expect("wait");
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    let summary: Value = serde_json::from_slice(&output.stdout).expect("summary");
    assert_eq!(
        summary,
        json!({"dry_run": false, "inserted": 0, "already_present": 2_970, "collided": 0, "rejected": 30})
    );
    assert_eq!(app.checkout_stats().await.0, 2_970);

    // An archive cut short (a copy interrupted) stops the run at the cut, saying what the
    // batches before it stored and how to resume; it said only "read …: unexpected end of
    // file".
    let bytes = std::fs::read(&gzip.0).expect("read");
    let cut = Ndjson(plain.0.with_extension("cut.ndjson.gz"));
    std::fs::write(&cut.0, &bytes[..bytes.len() * 2 / 3]).expect("write");
    let output = backfill_checkouts(&app, &cut.0);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("0 inserted, 1000 already present, 0 collided")
            || stderr.contains("0 inserted, 2000 already present, 0 collided"),
        "{stderr}"
    );
    assert!(
        stderr.contains("Running the same command again"),
        "{stderr}"
    );
    assert_eq!(app.checkout_stats().await.0, 2_970);
}

/// `--version N` identifies the lines under that version, as `?version=N` does live:
/// events stored under an older version keep their ids when reloaded (an export loaded
/// into another database), where the latest version would give them new ones.
async fn a_backfill_under_an_older_version_meets_the_events_stored_under_it(backend: Backend) {
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    let event = checkout_event("versioned-1");
    let stored = app.post_event(&event).await;
    assert_eq!(stored.body["status"], "inserted", "{}", stored.body);
    let mut second = crate::helpers::checkout_contract();
    second["version"] = json!(2);
    // `/params` leaves the identity: the same event has another id under version 2.
    second["fields"]
        .as_array_mut()
        .expect("fields")
        .retain(|field| field["pointer"] != "/params");
    app.register_contract(&second).await;
    let file = Ndjson::new(&[event.to_string()]);
    let run = |version: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_traqlyte"));
        command.args(["backfill", "--tenant", "test tenant"]);
        command.args(["--contract", "checkout_completed", "--json", "--dry-run"]);
        command.args(["--file", file.0.to_str().expect("utf-8 path")]);
        command.args(["--database-url", app.database_url()]);
        if let Some(version) = version {
            command.args(["--version", version]);
        }
        let output = command.output().expect("run traqlyte backfill");
        assert!(output.status.success(), "{output:?}");
        serde_json::from_slice::<Value>(&output.stdout).expect("JSON summary")
    };
    let older = run(Some("1"));
    assert_eq!(
        (&older["would_insert"], &older["already_present"]),
        (&json!(0), &json!(1)),
        "{older}"
    );
    let latest = run(None);
    assert_eq!(latest["would_insert"], 1, "{latest}");
    // A version the tenant never registered is refused before anything is read.
    let mut missing = Command::new(env!("CARGO_BIN_EXE_traqlyte"));
    missing.args([
        "backfill",
        "--tenant",
        "test tenant",
        "--contract",
        "checkout_completed",
    ]);
    missing.args([
        "--version",
        "9",
        "--file",
        file.0.to_str().expect("utf-8 path"),
    ]);
    missing.args(["--database-url", app.database_url()]);
    let refused = missing.output().expect("run traqlyte backfill");
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr)
            .contains("no contract \"checkout_completed\" version 9"),
        "{refused:?}"
    );
}

/// Runs `traqlyte backfill` of `file` into `checkout_completed`, without `--json`.
fn backfill_checkouts(app: &TestApp, file: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_traqlyte"))
        .args(["backfill", "--tenant", "test tenant"])
        .args(["--contract", "checkout_completed", "--file"])
        .arg(file)
        .args(["--database-url", app.database_url()])
        .output()
        .expect("run traqlyte backfill")
}

/// Runs `traqlyte backfill … --json` and reads its summary.
fn backfill(app: &TestApp, contract: &str, file: &std::path::Path, dry_run: bool) -> Value {
    let mut command = Command::new(env!("CARGO_BIN_EXE_traqlyte"));
    command.args([
        "backfill",
        "--tenant",
        "test tenant",
        "--contract",
        contract,
    ]);
    command.args(["--file", file.to_str().expect("utf-8 path"), "--json"]);
    command.args(["--database-url", app.database_url()]);
    if dry_run {
        command.arg("--dry-run");
    }
    let output = command.output().expect("run traqlyte backfill");
    let stdout = String::from_utf8(output.stdout.clone()).expect("utf-8");
    let summary: Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    // Status 3 exactly when lines were rejected, so a script sees a partly wrong file (2 is
    // a usage error's, as for every command).
    let expected = if summary["rejected"] == 0 { 0 } else { 3 };
    assert_eq!(output.status.code(), Some(expected), "{output:?}");
    summary
}

/// A deadlock met by a batch (injected: a trigger on `events` that fails the first
/// insert with SQLSTATE `40P01`, counted by a sequence, which a rollback does not undo)
/// is met by writing the batch again: the backfill stored every line. It stopped with
/// "Error: … deadlock" and exit status 1. A store error that writing again cannot cure
/// stops it with what the batches before stored and how to resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backfill_writes_a_batch_again_after_a_deadlock() {
    let app = spawn_app(Backend::Postgres).await;
    app.register_checkout_contract().await;
    app.execute_sql(
        "CREATE SEQUENCE injected_faults; \
         CREATE FUNCTION fail_first_insert() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN \
           IF nextval('injected_faults') = 1 THEN \
             RAISE EXCEPTION 'injected deadlock' USING ERRCODE = '40P01'; \
           END IF; \
           IF NEW.payload LIKE '%order_refused%' THEN \
             RAISE EXCEPTION 'injected limit' USING ERRCODE = '54000'; \
           END IF; \
           RETURN NEW; \
         END $$; \
         CREATE TRIGGER fail_first_insert BEFORE INSERT ON events \
           FOR EACH ROW EXECUTE FUNCTION fail_first_insert();",
    )
    .await;
    let lines: Vec<String> = (0..3)
        .map(|i| checkout_event(&format!("order_deadlocked_{i}")).to_string())
        .collect();
    let file = Ndjson::new(&lines);
    let real = backfill(&app, "checkout_completed", &file.0, false);
    assert_eq!(
        real,
        json!({"dry_run": false, "inserted": 3, "already_present": 0, "collided": 0, "rejected": 0})
    );
    assert_eq!(app.checkout_stats().await.0, 3);

    let refused = Ndjson::new(&[checkout_event("order_refused").to_string()]);
    let output = backfill_checkouts(&app, &refused.0);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the batch ending at line 1 was not stored")
            && stderr.contains("Running the same command again resumes"),
        "{stderr}"
    );
    assert_eq!(app.checkout_stats().await.0, 3);
}

/// A temporary NDJSON file, removed on drop.
struct Ndjson(std::path::PathBuf);

impl Ndjson {
    fn new(lines: &[String]) -> Ndjson {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "traqlyte_it_backfill_{}_{}.ndjson",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&path, lines.join("\n") + "\n").expect("write file");
        Ndjson(path)
    }
}

impl Drop for Ndjson {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

async fn a_backfill_reconciles_against_stored_events_and_a_second_run_inserts_nothing(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    let live = checkout_event("order_live");
    assert_eq!(app.post_event(&live).await.body["status"], "inserted");

    let mut resent = live.clone();
    resent["attempt"] = json!(7);
    let mut collision = live.clone();
    collision["note"] = json!("edited");
    let new = checkout_event("order_backfilled");
    let file = Ndjson::new(&[
        resent.to_string(),
        new.to_string(),
        String::new(),
        new.to_string(),
        collision.to_string(),
        "{\"merchant_id\": ".to_string(),
        json!({"merchant_id": "m"}).to_string(),
    ]);

    let dry = backfill(&app, "checkout_completed", &file.0, true);
    assert_eq!(
        dry,
        json!({"dry_run": true, "would_insert": 1, "already_present": 2, "collided": 1, "rejected": 2})
    );
    assert_eq!(
        app.checkout_stats().await,
        (1, 0, 0),
        "a dry run writes nothing"
    );

    let real = backfill(&app, "checkout_completed", &file.0, false);
    assert_eq!(
        real,
        json!({"dry_run": false, "inserted": 1, "already_present": 2, "collided": 1, "rejected": 2})
    );
    assert_eq!(app.checkout_stats().await, (2, 2, 1));

    let again = backfill(&app, "checkout_completed", &file.0, false);
    assert_eq!(
        again,
        json!({"dry_run": false, "inserted": 0, "already_present": 3, "collided": 1, "rejected": 2})
    );
    assert_eq!(app.checkout_stats().await, (2, 5, 2));
    // The second run's collision is the first run's again: counted, logged once.
    let stored = app
        .get("/contracts/checkout_completed/collisions")
        .await
        .body;
    assert_eq!(stored["collisions"].as_array().map(Vec::len), Some(1));
}

/// The limit is 1 MiB of event, its line ending aside: a line of exactly that is stored
/// (as `POST /events/{contract}` takes a body of exactly that), one byte more is
/// rejected, and the line after either is read as it is, never swallowed.
async fn a_line_of_exactly_the_limit_is_stored_and_no_line_after_a_long_one_is_lost(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    let sized = |order: &str, bytes: usize| {
        let mut event = checkout_event(order);
        event["note"] = json!("");
        let pad = bytes - event.to_string().len();
        event["note"] = json!("x".repeat(pad));
        let line = event.to_string();
        assert_eq!(line.len(), bytes);
        line
    };
    let limit = 1 << 20;
    let file = Ndjson::new(&[
        sized("order_at_limit", limit),
        checkout_event("order_after_it").to_string(),
        sized("order_over_limit", limit + 1),
        checkout_event("order_after_the_long_one").to_string(),
    ]);
    let real = backfill(&app, "checkout_completed", &file.0, false);
    assert_eq!(
        real,
        json!({"dry_run": false, "inserted": 3, "already_present": 0, "collided": 0, "rejected": 1})
    );
}

async fn a_backfill_of_run_events_matches_the_live_ones_and_adds_no_graph_rows(backend: Backend) {
    let app = spawn_app(backend).await;
    let run = json!({
        "eventType": "COMPLETE", "eventTime": "2026-11-29T03:05:00Z",
        "producer": "https://example.com/etl",
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
        "run": {"runId": "0193a1f0-0000-7000-8000-00000000000a"},
        "job": {"namespace": "etl", "name": "daily.orders"},
        "inputs": [{"namespace": "db", "name": "raw.orders"}],
        "outputs": [{"namespace": "db", "name": "mart.orders"}]
    });
    let live = app.post_json("/api/v1/lineage", &run).await;
    assert_eq!(live.body["status"], "inserted", "{}", live.body);
    let before = app.get("/lineage/stats").await.body;

    let mut later = run.clone();
    later["eventTime"] = json!("2026-11-30T00:00:00Z");
    let file = Ndjson::new(&[later.to_string()]);
    let summary = backfill(&app, "openlineage.run_event", &file.0, false);
    assert_eq!(
        summary,
        json!({"dry_run": false, "inserted": 0, "already_present": 1, "collided": 0, "rejected": 0})
    );
    assert_eq!(app.get("/lineage/stats").await.body, before);

    // A facet's `NaN` (openlineage-python's file transport writes one for a float NaN)
    // is read as `null` as the live route reads it: the live copy is already present.
    let mut measured = run.clone();
    measured["run"]["runId"] = json!("0193a1f0-0000-7000-8000-00000000000b");
    measured["outputs"][0]["facets"] = json!({"dataQualityMetrics": {"rowCount": 0,
        "columnMetrics": {"a": {"min": "MIN", "max": "MAX"}}}});
    let text = measured
        .to_string()
        .replace("\"MIN\"", "NaN")
        .replace("\"MAX\"", "Infinity");
    let live = app.post_raw("/api/v1/lineage", text.clone()).await;
    assert_eq!(live.body["status"], "inserted", "{}", live.body);
    let file = Ndjson::new(&[text]);
    let summary = backfill(&app, "openlineage.run_event", &file.0, false);
    assert_eq!(
        summary,
        json!({"dry_run": false, "inserted": 0, "already_present": 1, "collided": 0, "rejected": 0})
    );
}

/// One batch holding a run's COMPLETE before its START, each naming another job: the
/// run's row is its earliest event's within a statement too (the batch's own ordering,
/// not only a stored row taken over).
async fn a_run_in_one_batch_is_its_earliest_events_whatever_the_line_order(backend: Backend) {
    let app = spawn_app(backend).await;
    let mut start = crate::lineage::run_event("early", 7, &["src"], &[]);
    start["eventType"] = json!("START");
    start["eventTime"] = json!("2026-11-29T03:00:00Z");
    let mut complete = crate::lineage::run_event("early.tgt", 7, &["src"], &["tgt"]);
    complete["eventTime"] = json!("2026-11-29T03:05:00Z");
    let file = Ndjson::new(&[complete.to_string(), start.to_string()]);
    let summary = backfill(&app, "openlineage.run_event", &file.0, false);
    assert_eq!(summary["inserted"], 2, "{summary}");
    let walk = app
        .get("/lineage/descendants?node=dataset:db:src&depth=5")
        .await;
    let ids: Vec<&str> = walk.body["nodes"]
        .as_array()
        .map(|nodes| nodes.iter().filter_map(|n| n["id"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(ids, ["job:ns:early", "dataset:db:tgt"], "{}", walk.body);
}

async fn a_backfill_stores_events_older_than_the_horizon_once_and_matches_detached_ones(
    backend: Backend,
) {
    use crate::partitions::{cli_json, event_at, id_of, spawn_refusing_app, DAY_US};
    let app = spawn_refusing_app(backend).await;
    let now = traqlyte_store::now_us();
    // Refused live, so it reaches the store only through the backfill.
    let ancient = event_at("order_ancient", now - 20 * DAY_US);
    assert_eq!(app.post_event(&ancient).await.code(), "outside_horizon");
    // Stored live, then its day detached.
    let detached = event_at("order_detached", now - 12 * DAY_US);
    assert_eq!(app.post_event(&detached).await.body["status"], "inserted");
    cli_json(
        &app,
        &[
            "partitions",
            "maintain",
            "--dedupe-horizon-days",
            "5",
            "--json",
        ],
    );
    let mut ancient_retry = ancient.clone();
    ancient_retry["attempt"] = json!(2);
    let mut detached_retry = detached.clone();
    detached_retry["attempt"] = json!(3);
    let mut detached_edited = detached.clone();
    detached_edited["note"] = json!("edited");
    let file = Ndjson::new(&[
        ancient.to_string(),
        ancient_retry.to_string(),
        detached_retry.to_string(),
        detached_edited.to_string(),
        event_at("order_ahead", now + 3 * DAY_US).to_string(),
    ]);
    let dry = backfill(&app, "checkout_completed", &file.0, true);
    assert_eq!(
        dry,
        json!({"dry_run": true, "would_insert": 1, "already_present": 2, "collided": 1, "rejected": 1})
    );
    let real = backfill(&app, "checkout_completed", &file.0, false);
    assert_eq!(
        real,
        json!({"dry_run": false, "inserted": 1, "already_present": 2, "collided": 1, "rejected": 1})
    );
    let again = backfill(&app, "checkout_completed", &file.0, false);
    assert_eq!(
        again,
        json!({"dry_run": false, "inserted": 0, "already_present": 3, "collided": 1, "rejected": 1})
    );
    let path = format!("/events/checkout_completed/{}", id_of(&ancient));
    assert_eq!(app.get(&path).await.status, reqwest::StatusCode::OK);
    assert_eq!(app.post_event(&ancient).await.code(), "outside_horizon");
    assert_eq!(app.checkout_stats().await.0, 2, "two rows, each once");
}

/// A file longer than one batch (1,000 lines) whose second batch brings an old day no
/// partition holds yet: the dry run, one transaction over every batch, stores into the
/// day's new detached partition as the real run does (PostgreSQL kept routing the dry
/// run's rows by the partitions its first batch saw, and it failed), and counts what the
/// real run then does. Both are counted under the source `backfill`.
async fn a_dry_run_over_several_batches_meets_the_old_days_its_later_batches_bring(
    backend: Backend,
) {
    use crate::partitions::{event_at, spawn_refusing_app, DAY_US};
    let app = spawn_refusing_app(backend).await;
    let now = traqlyte_store::now_us();
    let mut lines: Vec<String> = (0..1_000)
        .map(|i| event_at(&format!("order_30_{i}"), now - 30 * DAY_US).to_string())
        .collect();
    for i in 0..5 {
        let event = event_at(&format!("order_40_{i}"), now - 40 * DAY_US);
        lines.push(event.to_string());
        lines.push(event.to_string());
    }
    let file = Ndjson::new(&lines);
    let dry = backfill(&app, "checkout_completed", &file.0, true);
    assert_eq!(
        dry,
        json!({"dry_run": true, "would_insert": 1_005, "already_present": 5, "collided": 0, "rejected": 0})
    );
    let real = backfill(&app, "checkout_completed", &file.0, false);
    assert_eq!(
        real,
        json!({"dry_run": false, "inserted": 1_005, "already_present": 5, "collided": 0, "rejected": 0})
    );
    assert_eq!(app.checkout_stats().await, (1_005, 5, 0));
    let trend = app.get("/ops/duplicates?source=backfill&bucket=day").await;
    let series = trend.body["series"].as_array().expect("series");
    assert_eq!(series.len(), 1, "{}", trend.body);
    assert_eq!(series[0]["source"], "backfill");
}

/// A backfill reading a slow pipe holds no write lock while it waits for lines: on
/// SQLite (one writer for the whole file) the server's writes went on being refused
/// `503 store_busy` for as long as the producer paused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backfill_waiting_for_input_does_not_hold_the_write_lock() {
    use std::io::Write;
    let app = crate::helpers::spawn_app_with_store(
        Backend::Sqlite,
        traqlyte_server::ServerConfig::default(),
        |store| store.sqlite_busy_timeout_ms = 500,
    )
    .await;
    app.register_checkout_contract().await;
    let mut child = Command::new(env!("CARGO_BIN_EXE_traqlyte"))
        .args(["backfill", "--tenant", "test tenant"])
        .args([
            "--contract",
            "checkout_completed",
            "--file",
            "/dev/stdin",
            "--json",
        ])
        .args(["--database-url", app.database_url()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn traqlyte backfill");
    let mut input = child.stdin.take().expect("stdin");
    for i in 0..3 {
        let line = serde_json::to_string(&checkout_event(&format!("piped-{i}"))).expect("JSON");
        writeln!(input, "{line}").expect("write a line");
    }
    input.flush().expect("flush");
    // The backfill has read those lines and waits for more.
    tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
    let live = app.post_event(&checkout_event("live-meanwhile")).await;
    assert_eq!(live.status, reqwest::StatusCode::OK, "{}", live.body);
    drop(input);
    let output = child.wait_with_output().expect("wait");
    assert!(output.status.success(), "{output:?}");
    let summary: Value = serde_json::from_slice(&output.stdout).expect("JSON summary");
    assert_eq!(summary["inserted"], 3, "{summary}");
}

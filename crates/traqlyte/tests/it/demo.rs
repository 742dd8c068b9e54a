//! `traqlyte demo`, run as a process: the naive lift must be significant and the
//! deduplicated one not, on the demo's fixed seed, with δ per arm near the injected rates.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// The demo's default seed and size: the figures the README quotes.
const SEED: &str = "42";
const USERS: &str = "20000";
/// The simulated client loses a reply with probability p on every attempt, so it
/// re-delivers p/(1-p) times per request on average.
const DELTA_CONTROL_EXPECTED: f64 = 0.02 / 0.98;
const DELTA_TREATMENT_EXPECTED: f64 = 0.10 / 0.90;
/// About three standard errors of δ with ~2,500 purchases per arm
/// (√(p/(1-p)²/2,500) is 0.003 in control and 0.007 in treatment).
const DELTA_CONTROL_TOLERANCE: f64 = 0.01;
const DELTA_TREATMENT_TOLERANCE: f64 = 0.02;

/// The demo's SQLite file and its WAL companions, removed on drop.
struct DemoDb(PathBuf);

impl DemoDb {
    fn new() -> DemoDb {
        DemoDb(std::env::temp_dir().join(format!("traqlyte_it_demo_{}.db", std::process::id())))
    }
}

impl Drop for DemoDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut file = self.0.as_os_str().to_owned();
            file.push(suffix);
            let _ = std::fs::remove_file(file);
        }
    }
}

fn figure(summary: &Value, key: &str) -> f64 {
    summary[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing from {summary}"))
}

#[test]
fn the_demo_shows_a_significant_naive_lift_that_deduplication_removes() {
    let db = DemoDb::new();
    let database = db.0.to_str().expect("utf-8 temp path");
    let output = Command::new(env!("CARGO_BIN_EXE_traqlyte"))
        .args([
            "demo",
            "--no-serve",
            "--json",
            "--listen",
            "127.0.0.1:0",
            "--database",
            database,
            "--seed",
            SEED,
            "--users",
            USERS,
        ])
        .output()
        .expect("run traqlyte demo");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "demo failed\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON line in:\n{stdout}"));
    let summary: Value = serde_json::from_str(line).expect("the JSON line parses");

    let (naive_p, deduped_p) = (figure(&summary, "naive_p"), figure(&summary, "deduped_p"));
    assert!(naive_p < 0.05, "naive lift not significant: {summary}");
    assert!(
        deduped_p >= 0.05,
        "deduplicated lift significant: {summary}"
    );
    let (delta_c, delta_t) = (
        figure(&summary, "delta_control"),
        figure(&summary, "delta_treatment"),
    );
    assert!(
        (delta_c - DELTA_CONTROL_EXPECTED).abs() < DELTA_CONTROL_TOLERANCE,
        "{summary}"
    );
    assert!(
        (delta_t - DELTA_TREATMENT_EXPECTED).abs() < DELTA_TREATMENT_TOLERANCE,
        "{summary}"
    );
    // The report's prediction from δ and the deduplicated lift matches the naive lift.
    let (naive, predicted) = (
        figure(&summary, "naive_lift"),
        figure(&summary, "predicted_naive_lift"),
    );
    assert!((naive - predicted).abs() < 0.002, "{summary}");
    assert_eq!(summary["users"], 20_000, "{summary}");
    // Every retry reached the server and was answered as duplicates (two outcomes each).
    let retries = summary["retries"].as_u64().expect("retries");
    assert!(retries > 0, "{summary}");
    assert_eq!(
        summary["duplicates_answered"].as_u64(),
        Some(retries * 2),
        "{summary}"
    );

    assert!(
        stdout.contains("Retry noise alone would have produced a significant"),
        "{stdout}"
    );
    // The server stopped (--no-serve): no page address is offered, in JSON or in text.
    assert_eq!(summary["page"], Value::Null, "{summary}");
    assert!(!stdout.contains("/ui/campaigns/"), "{stdout}");
    assert!(
        stdout.contains("The server stopped (--no-serve)"),
        "{stdout}"
    );
}

//! Recorded identity constants: the same fixture events must keep the same canonical
//! bytes, event ids and fingerprints forever, checked here and by an independent Python
//! implementation of the rules (`tools/idcheck.py`).
//!
//! THE CONSTANTS IN `tests/fixtures/identity.json` MUST NEVER BE REGENERATED CASUALLY.
//! They were computed once and frozen. Every stored event id was derived the same way, so
//! a failure here means a change to parsing, normalisation, rounding or serialisation
//! would silently re-key history. Fix the code, not the fixture; a deliberate change to the
//! canonical form needs a new contract version and a migration, and only then new cases.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use traqlyte_identity::{json, Contract};

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

const FIXTURES: &str = "crates/identity/tests/fixtures/identity.json";

/// The most fixture cases the file may hold; a bound, not a target.
const FIXTURE_CASES_MAX: usize = 1_000;

fn fixture_cases() -> Vec<Value> {
    let path = repository_root().join(FIXTURES);
    let bytes = std::fs::read(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    match json::parse(&bytes, 64) {
        Ok(Value::Array(cases)) => cases,
        other => panic!(
            "{} must hold a JSON array of cases, got {other:?}",
            path.display()
        ),
    }
}

fn text<'a>(case: &'a Value, key: &str) -> &'a str {
    case[key]
        .as_str()
        .unwrap_or_else(|| panic!("fixture case {} lacks the string {key:?}", case["name"]))
}

#[test]
fn fixture_events_keep_their_recorded_canonical_bytes_ids_and_fingerprints() {
    let cases = fixture_cases();
    assert!(
        (14..=FIXTURE_CASES_MAX).contains(&cases.len()),
        "{} cases",
        cases.len()
    );
    let mut failures = Vec::new();
    for case in &cases {
        let name = text(case, "name");
        let contract = Contract::from_json(&case["contract"])
            .unwrap_or_else(|err| panic!("{name}: contract is invalid: {err}"));
        let identified = contract
            .identify(&case["event"])
            .unwrap_or_else(|err| panic!("{name}: event does not identify: {err}"));
        let canonical = String::from_utf8(identified.identity_bytes.clone()).expect("UTF-8");
        let actual = [
            ("canonical", canonical.as_str()),
            ("event_id", identified.event_id.as_str()),
            ("fingerprint", identified.fingerprint.as_str()),
        ];
        for (key, actual) in actual {
            let recorded = text(case, key);
            if actual != recorded {
                failures.push(format!(
                    "{name}: {key}\n  recorded {recorded}\n  computed {actual}"
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "identity constants changed; stored event ids would be re-keyed:\n{}",
        failures.join("\n")
    );
}

#[test]
fn fixture_names_are_unique() {
    let cases = fixture_cases();
    let mut names: Vec<&str> = cases.iter().map(|case| text(case, "name")).collect();
    names.sort_unstable();
    let count = names.len();
    names.dedup();
    assert_eq!(names.len(), count, "duplicate fixture names");
}

#[test]
fn python_independent_implementation_agrees_with_the_fixtures() {
    // Not skipped when python3 is missing: the second implementation is the check that the
    // frozen constants follow the written rules rather than whatever the Rust code does.
    let output = Command::new("python3")
        .arg("tools/idcheck.py")
        .arg(FIXTURES)
        .current_dir(repository_root())
        .output()
        .unwrap_or_else(|err| {
            panic!("python3 is required to run this test and could not be started: {err}")
        });
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "tools/idcheck.py disagrees with the fixtures ({}):\n{stdout}\n{stderr}",
        output.status
    );
    let checked = stdout
        .lines()
        .filter(|line| line.starts_with("ok "))
        .count();
    assert_eq!(
        checked,
        fixture_cases().len(),
        "every case is checked:\n{stdout}"
    );
}

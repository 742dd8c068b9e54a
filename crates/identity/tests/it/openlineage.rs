//! The built-in OpenLineage RunEvent contract: recorded ids of the corpus's complete
//! events, the required fields, what is and is not identity, and the run-id helper.

use std::path::PathBuf;

use serde_json::{json, Value};
use traqlyte_identity::json::parse;
use traqlyte_identity::openlineage::{
    builtin_contract, identify_run_event, run_event_contract, run_id_for_slot, IdentifiedRunEvent,
    OpenLineageError, RUN_EVENT_CONTRACT,
};

/// The OpenLineage corpus: `$TRAQLYTE_OPENLINEAGE_CORPUS`, else the copy vendored in
/// `testdata/openlineage` (so a clean clone anywhere has it). Missing is a failure, never a
/// skip.
pub fn corpus_dir() -> PathBuf {
    std::env::var_os("TRAQLYTE_OPENLINEAGE_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/openlineage")
        })
}

/// Every corpus event file, sorted by name.
pub fn corpus_files() -> Vec<PathBuf> {
    let dir = corpus_dir().join("events");
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("the OpenLineage corpus must be at {}: {err}", dir.display()));
    let mut files: Vec<PathBuf> = entries.map(|e| e.expect("dir entry").path()).collect();
    files.sort();
    assert_eq!(files.len(), 83, "the corpus holds 83 events");
    files
}

fn corpus_event(prefix: &str) -> Value {
    let path = corpus_files()
        .into_iter()
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
        .unwrap_or_else(|| panic!("no corpus file {prefix}"));
    parse(&std::fs::read(&path).expect("read"), 64).expect("corpus file is JSON")
}

fn ok(event: &Value) -> IdentifiedRunEvent {
    identify_run_event(event).unwrap_or_else(|err| panic!("should identify: {err}"))
}

fn err(event: &Value) -> OpenLineageError {
    match identify_run_event(event) {
        Ok(found) => panic!("should be refused, got {:?}", found.identified),
        Err(err) => err,
    }
}

/// Recorded ids and fingerprints: never regenerate casually (see `fixtures.rs`).
const RECORDED: [(&str, &str, &str); 7] = [
    (
        "001",
        "8e4ee42e129ba4223f4675f121976b732eb94aff7add29a49dde8deb1d9f30d3",
        "75d545eade7cda537499fa7dba5c2ac2f4d1677b948d591830ced53622be7f1b",
    ),
    (
        "002",
        "53c7e0dc73a6cb1712c951c13f5b43faa88150f6188e6d96df389e20e8dac331",
        "2ce5921c9c5892f4281b8a1e981887d0decb488446bafe9e63d6c7791d6cefcf",
    ),
    (
        "005",
        "c439b1bf29b6519b3a4d98d3bc17850eec61cfbdadc9b558d2517314eef58702",
        "5f64dbcf3b3f9fb99ef4df05e45be08a4a89fbaf1da47387f2f982031073eaa6",
    ),
    (
        "006",
        "f718993bcb21e579fb6c0bc78f7510dcef792158ff60f1cc1a9ee94da5091756",
        "8ee2cdd6809b183d8d9d4980492bb7e802fc1b1c7ac96f146e5806fe5b343475",
    ),
    (
        "007",
        "4f305e2f5ee6ad82ecdff4698738bec1118ded1a32f3e74727a345fe7ff25106",
        "d8e6f6ab50cc24141ac171dfa29fa4e879f825b76fc8900b19d18143880df75a",
    ),
    (
        "008",
        "5b113657dc40002e4532ebd7b750fdaa11324ea927d342b6217bad451b0b14e9",
        "8eba585608a1f9744fef5e88a15cf5ff87f00bbb378a720934abc4440e4db4e6",
    ),
    (
        "009",
        "c74806733b8c2e18f25eabf739bb64a582bdd1d0a4e90a444fdf06a528abeeda",
        "a789a20431557e4b7bc4712c1967ee8644b48b89c758c9c84f52f775c03aaa4e",
    ),
];

/// Recorded run id of `run_id_for_slot("my-namespace", "my.job", "2026-11-29")`.
const RECORDED_SLOT_RUN_ID: &str = "cd5f837e-4718-5b1e-acc9-a02c1a4460a4";

#[test]
fn complete_corpus_run_events_keep_their_recorded_ids_and_fingerprints() {
    for (prefix, event_id, fingerprint) in RECORDED {
        let identified = ok(&corpus_event(prefix)).identified;
        assert_eq!(identified.event_id.as_str(), event_id, "{prefix} event id");
        assert_eq!(
            identified.fingerprint.as_str(),
            fingerprint,
            "{prefix} fingerprint"
        );
    }
}

#[test]
fn dataset_and_job_events_are_refused_as_unsupported_kinds() {
    for (prefix, kind) in [("003", "DatasetEvent"), ("004", "JobEvent")] {
        let refused = err(&corpus_event(prefix));
        assert_eq!(refused.code(), "unsupported_event_kind", "{prefix}");
        assert!(refused.to_string().contains(kind), "{prefix}: {refused}");
    }
}

#[test]
fn the_event_without_a_run_id_is_refused_naming_run_run_id() {
    let refused = err(&corpus_event("078"));
    assert_eq!(
        (refused.code(), refused.field().as_str()),
        ("missing_required_field", "run.runId")
    );
}

#[test]
fn events_whose_only_fault_is_an_invalid_facet_are_accepted() {
    for prefix in ["079", "080", "081", "082", "083"] {
        ok(&corpus_event(prefix));
    }
}

#[test]
fn no_corpus_file_makes_identification_panic() {
    for path in corpus_files() {
        let event = parse(&std::fs::read(&path).expect("read"), 64).expect("JSON");
        let outcome = std::panic::catch_unwind(|| identify_run_event(&event).map(|_| ()));
        assert!(outcome.is_ok(), "{} panicked", path.display());
    }
}

fn minimal() -> Value {
    json!({
        "eventType": "START", "eventTime": "2026-11-29T03:00:00Z",
        "producer": "https://example.com/p", "schemaURL": "https://example.com/s",
        "run": {"runId": "3f5e83fa-3480-44ff-99c5-ff943904e5e8"},
        "job": {"namespace": "ns", "name": "job"},
        "inputs": [{"namespace": "db", "name": "a"}, {"namespace": "db", "name": "b"}],
        "outputs": [{"namespace": "db", "name": "c"}]
    })
}

#[test]
fn each_required_field_is_named_when_missing() {
    let cases = [
        ("/eventTime", "eventTime"),
        ("/producer", "producer"),
        ("/schemaURL", "schemaURL"),
        ("/eventType", "eventType"),
        ("/run/runId", "run.runId"),
        ("/job/namespace", "job.namespace"),
        ("/job/name", "job.name"),
        ("/inputs/1/name", "inputs[1].name"),
        ("/outputs/0/namespace", "outputs[0].namespace"),
    ];
    for (pointer, field) in cases {
        let mut event = minimal();
        let (parent, key) = pointer.rsplit_once('/').expect("pointer");
        let container = event.pointer_mut(parent).expect("parent");
        match container {
            Value::Object(map) => {
                map.remove(key);
            }
            _ => panic!("{pointer}"),
        }
        let refused = err(&event);
        assert_eq!(refused.field(), field, "{pointer}: {refused}");
        assert_eq!(refused.code(), "missing_required_field");
    }
}

#[test]
fn invalid_values_are_named() {
    let cases = [
        ("/run/runId", json!("not-a-uuid"), "run.runId"),
        ("/eventType", json!("FINISHED"), "eventType"),
        ("/eventTime", json!("yesterday"), "eventTime"),
        ("/job/name", json!(7), "job.name"),
        ("/inputs", json!({"a": 1}), "inputs"),
        ("/outputs/0", json!("db.c"), "outputs[0]"),
    ];
    for (pointer, value, field) in cases {
        let mut event = minimal();
        *event.pointer_mut(pointer).expect(pointer) = value;
        assert_eq!(err(&event).field(), field, "{pointer}");
    }
}

/// A dataset's containers of facets are objects in the spec's JSON Schema, as
/// `run.facets` and `job.facets` are, which were the only ones checked: an array or a
/// string there was stored.
#[test]
fn a_dataset_facet_container_of_another_type_is_named() {
    let cases = [
        ("/inputs/0", "facets", json!([]), "inputs[0].facets"),
        (
            "/inputs/1",
            "inputFacets",
            json!([]),
            "inputs[1].inputFacets",
        ),
        (
            "/outputs/0",
            "outputFacets",
            json!("x"),
            "outputs[0].outputFacets",
        ),
    ];
    for (dataset, key, value, field) in cases {
        let mut event = minimal();
        event.pointer_mut(dataset).expect(dataset)[key] = value;
        let refused = err(&event);
        assert_eq!(
            (refused.code(), refused.field().as_str()),
            ("wrong_type", field),
            "{refused}"
        );
    }
    let mut event = minimal();
    event["inputs"][0]["facets"] = json!({"schema": {"fields": []}});
    event["inputs"][0]["inputFacets"] = Value::Null;
    ok(&event);
}

/// `null` counts as absent for the kind too: a DatasetEvent with `"run": null` was judged
/// a RunEvent missing its `eventType`; a body that is no object is named as such (the
/// message read "field  must be…").
#[test]
fn a_null_run_is_absent_and_a_body_that_is_no_object_says_so() {
    let dataset_event = json!({
        "eventTime": "2026-12-01T00:00:00Z", "producer": "p", "schemaURL": "s",
        "run": null, "dataset": {"namespace": "s", "name": "d"}
    });
    assert_eq!(err(&dataset_event).code(), "unsupported_event_kind");
    let job_event = json!({
        "eventTime": "2026-12-01T00:00:00Z", "producer": "p", "schemaURL": "s",
        "eventType": null, "job": {"namespace": "s", "name": "j"}
    });
    assert!(err(&job_event).to_string().contains("JobEvent"));
    let refused = err(&json!([minimal()]));
    assert_eq!(refused.code(), "wrong_type");
    assert_eq!(
        refused.to_string(),
        "the body must be a JSON object (one OpenLineage RunEvent), got array"
    );
}

#[test]
fn observation_metadata_changes_neither_id_nor_fingerprint() {
    let base = ok(&minimal()).identified;
    let mut retry = minimal();
    retry["eventTime"] = json!("2026-11-29T03:00:09.5+01:00");
    retry["producer"] = json!("https://example.com/other-producer");
    retry["schemaURL"] = json!("https://example.com/other-schema");
    retry["run"]["facets"] = json!({"nominalTime": {"_producer": "x", "_schemaURL": "y", "nominalStartTime": "2026-11-29T03:00:00Z"}});
    let mut with_facet = minimal();
    with_facet["run"]["facets"] = json!({"nominalTime": {"_producer": "p", "_schemaURL": "s", "nominalStartTime": "2026-11-29T03:00:00Z"}});
    let a = ok(&with_facet).identified;
    let b = ok(&retry).identified;
    assert_eq!((&a.event_id, &a.fingerprint), (&b.event_id, &b.fingerprint));
    assert_ne!(
        base.event_id.as_str(),
        b.event_id.as_str(),
        "nominalTime is a parameter"
    );
}

#[test]
fn dataset_order_and_repeats_do_not_change_the_id() {
    let base = ok(&minimal());
    let mut shuffled = minimal();
    shuffled["inputs"] = json!([{"namespace": "db", "name": "b"}, {"namespace": "db", "name": "a"}, {"namespace": "db", "name": "b"}]);
    let other = ok(&shuffled);
    assert_eq!(base.identified.event_id, other.identified.event_id);
    assert_eq!(other.identity.inputs.len(), 2);
}

#[test]
fn a_parameter_facet_changes_the_id_and_an_observation_facet_does_not() {
    let mut first = minimal();
    first["job"]["facets"] =
        json!({"sql": {"query": "select 1"}, "documentation": {"description": "a"}});
    first["run"]["facets"] = json!({"processing_engine": {"version": "1"}, "my_custom": {"k": 1}});
    let base = ok(&first).identified;
    let mut doc = first.clone();
    doc["job"]["facets"]["documentation"]["description"] = json!("b");
    doc["run"]["facets"]["processing_engine"]["version"] = json!("2");
    let observed = ok(&doc).identified;
    assert_eq!(base.event_id, observed.event_id);
    assert_ne!(
        base.fingerprint, observed.fingerprint,
        "content changed: a collision, not a retry"
    );
    for (pointer, value) in [
        ("/job/facets/sql/query", json!("select 2")),
        ("/run/facets/my_custom/k", json!(2)),
    ] {
        let mut changed = first.clone();
        *changed.pointer_mut(pointer).expect(pointer) = value;
        assert_ne!(base.event_id, ok(&changed).identified.event_id, "{pointer}");
    }
}

#[test]
fn a_dataset_version_facet_enters_the_identity() {
    let mut versioned = minimal();
    versioned["outputs"][0]["facets"] =
        json!({"version": {"_producer": "p", "datasetVersion": "v7"}});
    let projected = ok(&versioned);
    assert_eq!(projected.identity.outputs[0].version.as_deref(), Some("v7"));
    assert_ne!(
        projected.identified.event_id,
        ok(&minimal()).identified.event_id
    );
    versioned["outputs"][0]["facets"]["version"]["datasetVersion"] = json!(7);
    assert_eq!(
        err(&versioned).field(),
        "outputs[0].facets.version.datasetVersion"
    );
}

#[test]
fn nfc_and_nfd_dataset_names_are_one_dataset() {
    let mut nfc = minimal();
    nfc["inputs"] = json!([{"namespace": "db", "name": "caf\u{e9}"}]);
    let mut nfd = minimal();
    nfd["inputs"] = json!([{"namespace": "db", "name": "cafe\u{301}"}, {"namespace": "db", "name": "caf\u{e9}"}]);
    let (a, b) = (ok(&nfc), ok(&nfd));
    assert_eq!(a.identified.event_id, b.identified.event_id);
    assert_eq!(b.identity.inputs.len(), 1);
    assert_eq!(b.identity.inputs[0].name, "caf\u{e9}");
}

#[test]
fn a_timestamp_without_offset_is_read_as_utc() {
    let mut naive = minimal();
    naive["eventTime"] = json!("2026-11-29T03:00:00.123456");
    let mut utc = minimal();
    utc["eventTime"] = json!("2026-11-29T03:00:00.123456Z");
    let (a, b) = (ok(&naive).identified, ok(&utc).identified);
    assert_eq!(a.occurred_at_us, b.occurred_at_us);
    assert_eq!(a.occurred_at_us, Some(1_795_921_200_123_456));
}

#[test]
fn the_run_id_is_canonicalised_to_lowercase_hyphenated() {
    let mut upper = minimal();
    upper["run"]["runId"] = json!("3F5E83FA-3480-44FF-99C5-FF943904E5E8");
    let (a, b) = (ok(&upper), ok(&minimal()));
    assert_eq!(a.identity.run_id, "3f5e83fa-3480-44ff-99c5-ff943904e5e8");
    assert_eq!(
        (a.identified.event_id, a.identified.fingerprint),
        (b.identified.event_id, b.identified.fingerprint)
    );
}

#[test]
fn the_built_in_contract_is_loaded_from_its_data_file() {
    let contract = run_event_contract();
    assert_eq!(contract.name().as_str(), RUN_EVENT_CONTRACT);
    assert_eq!(contract.version(), 1);
    assert!(builtin_contract(RUN_EVENT_CONTRACT).is_some());
    assert!(builtin_contract("checkout_completed").is_none());
    let transport: Vec<&str> = contract.transport().collect();
    assert_eq!(transport, ["/eventTime", "/producer", "/schemaURL"]);
}

#[test]
fn run_ids_of_schedule_slots_are_stable_uuid_v5_and_differ_by_day() {
    let first = run_id_for_slot("my-namespace", "my.job", "2026-11-29");
    assert_eq!(
        first,
        run_id_for_slot("my-namespace", "my.job", "2026-11-29")
    );
    assert_eq!(first, RECORDED_SLOT_RUN_ID);
    assert_eq!(&first[14..15], "5", "a version-5 UUID");
    assert_ne!(
        first,
        run_id_for_slot("my-namespace", "my.job", "2026-11-30")
    );
    assert_ne!(
        first,
        run_id_for_slot("my-namespace", "my.job2", "2026-11-29")
    );
    assert_eq!(
        first,
        run_id_for_slot("my-namespace", "my.job", "2026-11-29")
    );
}

mod properties {
    use proptest::prelude::*;
    use serde_json::{json, Value};
    use traqlyte_identity::openlineage::identify_run_event;

    fn event(inputs: &[String], time: &str, producer: &str) -> Value {
        let datasets: Vec<Value> = inputs
            .iter()
            .map(|n| json!({"namespace": "db", "name": n, "facets": {"schema": {"_producer": producer, "_schemaURL": producer, "fields": []}}}))
            .collect();
        json!({
            "eventType": "COMPLETE", "eventTime": time, "producer": producer, "schemaURL": producer,
            "run": {"runId": "3f5e83fa-3480-44ff-99c5-ff943904e5e8", "facets": {"nominalTime": {"_producer": producer, "nominalStartTime": "2026-11-29T03:00:00Z"}}},
            "job": {"namespace": "ns", "name": "job"},
            "inputs": datasets, "outputs": []
        })
    }

    proptest! {
        #[test]
        fn order_repeats_and_observation_metadata_never_change_id_or_fingerprint(
            names in proptest::collection::vec("[a-c]{1,2}", 1..6),
            shuffle in any::<u64>(),
            second in 0u32..60,
            producer in "[a-z]{1,8}",
        ) {
            let base = identify_run_event(&event(&names, "2026-11-29T03:00:00Z", "p")).expect("valid");
            let mut rotated = names.clone();
            rotated.rotate_left((shuffle as usize) % names.len());
            let time = format!("2026-11-29T03:00:{second:02}+00:00");
            let retry = identify_run_event(&event(&rotated, &time, &producer)).expect("valid");
            prop_assert_eq!(&base.identified.event_id, &retry.identified.event_id);
            prop_assert_eq!(&base.identified.fingerprint, &retry.identified.fingerprint);
            let mut repeated = rotated.clone();
            repeated.push(names[0].clone());
            let with_repeat = identify_run_event(&event(&repeated, &time, &producer)).expect("valid");
            prop_assert_eq!(&base.identified.event_id, &with_repeat.identified.event_id);
        }
    }
}

#[test]
fn integers_a_64_bit_integer_holds_are_taken_in_run_events_only() {
    use traqlyte_identity::json::{parse, parse_wide_integers};
    for literal in [
        "9007199254740993",
        "9223372036854775807",
        "18446744073709551615",
        "-9223372036854775808",
    ] {
        let text = format!(r#"{{"n": {literal}}}"#);
        let value = parse_wide_integers(text.as_bytes(), 8).expect(literal);
        assert_eq!(value["n"].to_string(), literal, "kept exactly");
        let err = parse(text.as_bytes(), 8).expect_err("the strict parse refuses it");
        assert_eq!(err.code(), "number_out_of_range");
    }
    for literal in [
        "18446744073709551616",
        "-9223372036854775809",
        "9007199254740993.0",
        "1e400",
    ] {
        let text = format!(r#"{{"n": {literal}}}"#);
        let err = parse_wide_integers(text.as_bytes(), 8).expect_err(literal);
        assert_eq!(err.code(), "number_out_of_range", "{literal}");
    }
    // A number beyond the double range is named, not a 64-bit integer before it.
    let err = parse_wide_integers(br#"{"a": 9007199254740993, "b": 1e400}"#, 8)
        .expect_err("1e400 is refused");
    assert!(err.to_string().contains("/b"), "{err}");
    // In a RunEvent's facets they are taken, and written exactly in the canonical bytes:
    // two integers that round to one double never make two events one.
    let mut event: serde_json::Value = serde_json::from_str(
        r#"{"eventType": "COMPLETE", "eventTime": "2026-11-29T03:00:00Z",
            "producer": "p", "schemaURL": "s",
            "run": {"runId": "00000000-0000-4000-8000-000000000053",
                    "facets": {"big": {"snapshotId": 8744736658442914487}}},
            "job": {"namespace": "ns", "name": "j"}}"#,
    )
    .expect("JSON");
    let first = traqlyte_identity::openlineage::identify_run_event(&event).expect("taken");
    event["run"]["facets"]["big"]["snapshotId"] = serde_json::json!(8_744_736_658_442_914_488_u64);
    assert_eq!(
        8_744_736_658_442_914_487_u64 as f64, 8_744_736_658_442_914_488_u64 as f64,
        "one double"
    );
    let neighbour = traqlyte_identity::openlineage::identify_run_event(&event).expect("taken");
    assert_ne!(
        first.identified.fingerprint,
        neighbour.identified.fingerprint
    );
}

//! Example tests, one per contract rule, with the inputs spelled out.

use serde_json::{json, Value};
use traqlyte_identity::{sha256_hex, Contract, IdentityError};

use crate::{canonical_text, contract, identify, identify_err, job_run_contract};

fn untyped_contract() -> Contract {
    contract(json!({
        "name": "untyped",
        "version": 1,
        "fields": [{"pointer": "/key", "required": true}, {"pointer": "/extra"}]
    }))
}

#[test]
fn nfd_and_nfc_escapes_give_the_same_id_and_fingerprint() {
    let job = job_run_contract();
    let pairs = [
        ("caf\u{e9}", "cafe\u{301}"),
        ("\u{3a9}", "\u{2126}"),
        ("\u{c5}ngstr\u{f6}m", "\u{212b}ngstro\u{308}m"),
        ("\u{ac00}", "\u{1100}\u{1161}"),
    ];
    for (composed, decomposed) in pairs {
        let event = |s: &str| {
            json!({
                "job": s,
                "params": {s: {"nested": s}},
                "inputs": [s, "z"],
                "notes": {s: s}
            })
        };
        let a = identify(&job, &event(composed));
        let b = identify(&job, &event(decomposed));
        assert_eq!(a.identity_bytes, b.identity_bytes, "{composed:?}");
        assert_eq!(a.event_id, b.event_id);
        assert_eq!(a.fingerprint, b.fingerprint);
        assert!(canonical_text(&a).contains(composed));
    }
}

#[test]
fn keys_equal_after_normalisation_are_refused() {
    let err = identify_err(
        &job_run_contract(),
        &json!({"job": "j", "params": {"caf\u{e9}": 1, "cafe\u{301}": 2}}),
    );
    assert_eq!(err.code(), "duplicate_key");
    assert_eq!(err.field(), "/params/caf\u{e9}");
}

#[test]
fn float_differences_below_the_declared_precision_keep_the_id() {
    let job = job_run_contract();
    let id = |score: f64| identify(&job, &json!({"job": "j", "score": score})).event_id;
    assert_eq!(id(12.344999), id(12.34));
    assert_eq!(id(1.005), id(1.01));
    assert_eq!(id(-2.675), id(-2.68));
    assert_eq!(id(9.995), id(10.0));
    assert_eq!(id(0.004), id(-0.004));
    assert_ne!(id(12.345), id(12.34));
    assert_ne!(id(12.35), id(12.34));
}

#[test]
fn numbers_without_precision_hash_by_value_not_spelling() {
    let contract = untyped_contract();
    let id = |text: &str| {
        let event = traqlyte_identity::json::parse(format!(r#"{{"key": {text}}}"#).as_bytes(), 8)
            .expect("valid JSON");
        identify(&contract, &event)
    };
    assert_eq!(id("1").event_id, id("1.0").event_id);
    assert_eq!(id("100").event_id, id("1e2").event_id);
    assert_eq!(id("0.1").event_id, id("1E-1").event_id);
    assert_eq!(canonical_text(&id("1e21")), r#"{"/key":1e+21}"#);
    assert_eq!(canonical_text(&id("0.0000001")), r#"{"/key":1e-7}"#);
    assert_ne!(id("0.1").event_id, id("0.10000000000000002").event_id);
}

#[test]
fn reordering_a_set_array_keeps_the_id_and_an_ordered_array_does_not() {
    let job = job_run_contract();
    let a = identify(
        &job,
        &json!({"job": "j", "inputs": ["b", {"x": 1}, 3], "steps": [1, 2]}),
    );
    let b = identify(
        &job,
        &json!({"job": "j", "inputs": [3, "b", {"x": 1}], "steps": [1, 2]}),
    );
    let c = identify(
        &job,
        &json!({"job": "j", "inputs": ["b", {"x": 1}, 3], "steps": [2, 1]}),
    );
    assert_eq!(a.event_id, b.event_id);
    assert_eq!(a.fingerprint, b.fingerprint);
    assert_ne!(a.event_id, c.event_id);
    assert_eq!(
        canonical_text(&a),
        r#"{"/inputs":["b",3,{"x":1}],"/job":"j","/steps":[1,2]}"#
    );
}

#[test]
fn a_set_array_keeps_repeated_elements() {
    let job = job_run_contract();
    let twice = identify(&job, &json!({"job": "j", "inputs": ["a", "b", "a"]}));
    let once = identify(&job, &json!({"job": "j", "inputs": ["a", "b"]}));
    assert_ne!(twice.event_id, once.event_id);
    assert_eq!(
        canonical_text(&twice),
        r#"{"/inputs":["a","a","b"],"/job":"j"}"#
    );
}

#[test]
fn absent_null_and_present_fields_have_three_different_ids() {
    let contract = untyped_contract();
    let absent = identify(&contract, &json!({"key": 1}));
    let null = identify(&contract, &json!({"key": 1, "extra": null}));
    let present = identify(&contract, &json!({"key": 1, "extra": 0}));
    assert_eq!(canonical_text(&absent), r#"{"/key":1}"#);
    assert_eq!(canonical_text(&null), r#"{"/extra":null,"/key":1}"#);
    assert_ne!(absent.event_id, null.event_id);
    assert_ne!(null.event_id, present.event_id);
    assert_ne!(absent.fingerprint, null.fingerprint);
}

#[test]
fn a_missing_required_field_is_refused_naming_its_pointer() {
    let err = identify_err(&job_run_contract(), &json!({"run": 7, "params": {}}));
    assert_eq!(
        err,
        IdentityError::MissingRequired {
            field: "/job".into()
        }
    );
    assert_eq!(err.code(), "missing_required_field");

    let nested = contract(json!({
        "name": "nested",
        "version": 1,
        "fields": [{"pointer": "/job/name", "required": true}]
    }));
    for event in [json!({}), json!({"job": {}}), json!({"job": "flat"})] {
        let err = identify_err(&nested, &event);
        assert_eq!(
            err,
            IdentityError::MissingRequired {
                field: "/job/name".into()
            }
        );
    }
}

#[test]
fn a_typed_field_refuses_other_types_including_null() {
    let job = job_run_contract();
    for (event, field) in [
        (json!({"job": 1}), "/job"),
        (json!({"job": "j", "run": "7"}), "/run"),
        (json!({"job": "j", "run": 7.5}), "/run"),
        (json!({"job": "j", "run": null}), "/run"),
        (json!({"job": "j", "score": "1.5"}), "/score"),
        (json!({"job": "j", "inputs": {"a": 1}}), "/inputs"),
    ] {
        let err = identify_err(&job, &event);
        assert_eq!((err.code(), err.field()), ("wrong_type", field), "{event}");
    }
}

#[test]
fn an_integer_field_takes_any_spelling_of_an_integer_and_keeps_its_id() {
    let job = job_run_contract();
    let run = |text: &str| {
        let event: Value =
            serde_json::from_str(&format!(r#"{{"job": "j", "run": {text}}}"#)).expect("JSON");
        identify(&job, &event)
    };
    let seven = run("7");
    for spelling in ["7.0", "7e0", "0.7e1", "700e-2"] {
        let again = run(spelling);
        assert_eq!(again.event_id, seven.event_id, "{spelling}");
        assert_eq!(again.fingerprint, seven.fingerprint, "{spelling}");
    }
    assert_ne!(run("8").event_id, seven.event_id);
}

#[test]
fn the_contract_name_and_version_are_part_of_the_id_but_not_the_fingerprint() {
    let document = |name: &str, version: u32| {
        let fields = json!([{"pointer": "/key"}]);
        json!({"name": name, "version": version, "fields": fields})
    };
    let event = json!({"key": "k", "other": 1});
    let v1 = identify(&contract(document("orders", 1)), &event);
    let v2 = identify(&contract(document("orders", 2)), &event);
    let renamed = identify(&contract(document("orders2", 1)), &event);
    assert_ne!(v1.event_id, v2.event_id);
    assert_ne!(v1.event_id, renamed.event_id);
    assert_eq!(v1.fingerprint, v2.fingerprint);
    assert_eq!(
        v1.event_id.as_str(),
        sha256_hex(b"orders\n1\n{\"/key\":\"k\"}")
    );
    assert_eq!(
        v1.fingerprint.as_str(),
        sha256_hex(br#"{"key":"k","other":1}"#)
    );
}

#[test]
fn the_fingerprint_sees_identity_fields_in_canonical_form() {
    let job = job_run_contract();
    let a = identify(
        &job,
        &json!({"job": "j", "score": 1.004, "inputs": ["b", "a"]}),
    );
    let b = identify(
        &job,
        &json!({"job": "j", "score": 1.0, "inputs": ["a", "b"]}),
    );
    assert_eq!(a.fingerprint, b.fingerprint);
    assert_eq!(
        a.fingerprint.as_str(),
        sha256_hex(br#"{"inputs":["a","b"],"job":"j","score":1}"#)
    );
}

#[test]
fn transport_fields_are_removed_from_the_fingerprint() {
    let job = job_run_contract();
    let sent = identify(
        &job,
        &json!({"job": "j", "sent_at": "2026-01-01T00:00:00Z", "attempt": 3, "host": "h1",
                "meta": {"trace_id": "abc", "region": "eu"}}),
    );
    let bare = identify(&job, &json!({"job": "j", "meta": {"region": "eu"}}));
    assert_eq!(sent.event_id, bare.event_id);
    assert_eq!(sent.fingerprint, bare.fingerprint);
}

/// Two transport pointers into one array remove the items they name, whichever order the
/// contract lists them in (removing `/hops/0` first used to shift `/hops/1` onto the
/// original third item: a retry differing in the second hop was a collision, and events
/// differing in the third were one).
#[test]
fn transport_pointers_into_one_array_remove_the_items_they_name() {
    for transport in [json!(["/hops/0", "/hops/1"]), json!(["/hops/1", "/hops/0"])] {
        let hops = contract(json!({
            "name": "hops", "version": 1,
            "fields": [{"pointer": "/key", "required": true}],
            "transport": transport
        }));
        let event = |h0: &str, h1: &str, h2: &str| json!({"key": 1, "hops": [h0, h1, h2]});
        let first = identify(&hops, &event("a", "b", "c"));
        let retry = identify(&hops, &event("x", "y", "c"));
        assert_eq!(first.fingerprint, retry.fingerprint, "{transport}");
        let other = identify(&hops, &event("a", "b", "d"));
        assert_ne!(first.fingerprint, other.fingerprint, "{transport}");
    }
}

/// A field inside a set field would be read by position: the same set in another order
/// would give another id. Such a contract is refused, whichever field is listed first.
#[test]
fn a_field_inside_a_set_field_is_refused() {
    let set = json!({"pointer": "/p", "array": "set"});
    let inner = json!({"pointer": "/p/0", "precision": 0});
    for fields in [json!([inner.clone(), set.clone()]), json!([set, inner])] {
        let err = Contract::from_json(&json!({"name": "sets", "version": 1, "fields": fields}))
            .expect_err("a field inside a set");
        assert!(err.to_string().contains("inside"), "{err}");
    }
}

/// A missing field is worded as on every other route ("`x` is required", the field
/// named), not serde's "missing field `x`".
#[test]
fn a_missing_contract_field_is_named_and_required() {
    for (document, field) in [
        (json!({"name": "c", "version": 1}), "fields"),
        (
            json!({"name": "c", "version": 1, "fields": [{}]}),
            "fields[0].pointer",
        ),
    ] {
        let err = Contract::from_json(&document).expect_err("a missing field");
        assert_eq!(err.field, field, "{document}");
        assert_eq!(err.message, format!("`{field}` is required"), "{document}");
    }
}

#[test]
fn a_pointer_not_in_nfc_is_refused_by_the_contract() {
    // Event keys are normalised to NFC before lookup, so a decomposed pointer would never
    // match: its field would silently hash as absent and distinct events would share an id.
    let decomposed = "/cafe\u{301}";
    for (document, at) in [
        (
            json!({"name": "c", "version": 1, "fields": [{"pointer": decomposed}]}),
            "fields[0].pointer",
        ),
        (
            json!({"name": "c", "version": 1, "fields": [{"pointer": "/k"}],
                   "transport": [decomposed]}),
            "transport[0]",
        ),
        (
            json!({"name": "c", "version": 1, "fields": [{"pointer": "/k"}],
                   "occurred_at": decomposed}),
            "occurred_at",
        ),
    ] {
        let err = Contract::from_json(&document).expect_err("non-NFC pointer");
        assert_eq!(err.field, at);
    }
}

#[test]
fn a_pointer_holding_a_nul_is_refused_wherever_a_contract_names_one() {
    // The semantic scan binds a pointer's tokens as PostgreSQL text, which cannot hold NUL.
    let with_nul = "/a\u{0}b";
    for (document, at) in [
        (
            json!({"name": "c", "version": 1, "fields": [{"pointer": with_nul}]}),
            "fields[0].pointer",
        ),
        (
            json!({"name": "c", "version": 1, "fields": [{"pointer": "/k"}],
                   "transport": [with_nul]}),
            "transport[0]",
        ),
        (
            json!({"name": "c", "version": 1, "fields": [{"pointer": "/k"}],
                   "occurred_at": with_nul}),
            "occurred_at",
        ),
    ] {
        let err = Contract::from_json(&document).expect_err("a NUL in a pointer");
        assert_eq!(err.field, at);
        assert!(err.to_string().contains("NUL"), "{err}");
    }
}

#[test]
fn a_pointer_that_can_never_address_an_array_item_is_refused() {
    // Such a pointer always resolves to nothing, so every event would share one id.
    for pointer in ["/items/-", "/items/01", "/items/-1", "/-", "/a/00/b"] {
        let document = json!({"name": "c", "version": 1, "fields": [{"pointer": pointer}]});
        let err = Contract::from_json(&document).expect_err(pointer);
        assert_eq!(err.field, "fields[0].pointer", "{pointer}");
    }
    for pointer in ["/items/0", "/items/10", "/a-b", "/-x", "/0x1"] {
        let document = json!({"name": "c", "version": 1, "fields": [{"pointer": pointer}]});
        assert!(Contract::from_json(&document).is_ok(), "{pointer}");
    }
}

/// A pointer deeper than any event may nest never matches, and 64 fields and 64 transport
/// pointers of 8,000 tokens each cost seconds to check against each other, at registration
/// and at every later decoding of the stored contract (each event on it, once evicted).
#[test]
fn a_pointer_deeper_than_any_event_or_too_long_is_refused() {
    let deepest = "/a".repeat(120);
    let document = json!({"name": "c", "version": 1, "fields": [{"pointer": deepest}]});
    assert!(Contract::from_json(&document).is_ok());
    let deeper = "/a".repeat(121);
    let long_key = format!("/{}", "k".repeat(4_096));
    for (document, at, rule) in [
        (
            json!({"name": "c", "version": 1, "fields": [{"pointer": deeper}]}),
            "fields[0].pointer",
            "at most 120 tokens",
        ),
        (
            json!({"name": "c", "version": 1, "fields": [{"pointer": "/k"}],
                   "transport": [deeper]}),
            "transport[0]",
            "at most 120 tokens",
        ),
        (
            json!({"name": "c", "version": 1, "fields": [{"pointer": long_key}]}),
            "fields[0].pointer",
            "at most 4096 bytes",
        ),
    ] {
        let err = Contract::from_json(&document).expect_err(at);
        assert_eq!(err.field, at);
        assert!(err.to_string().contains(rule), "{err}");
    }
}

#[test]
fn an_nfc_pointer_finds_a_key_sent_decomposed() {
    let contract = contract(json!({
        "name": "c",
        "version": 1,
        "fields": [{"pointer": "/caf\u{e9}", "required": true}]
    }));
    let sent_decomposed = identify(&contract, &json!({"cafe\u{301}": "x"}));
    assert_eq!(canonical_text(&sent_decomposed), "{\"/caf\u{e9}\":\"x\"}");
}

#[test]
fn the_event_time_is_read_from_the_declared_pointer() {
    let contract = contract(json!({
        "name": "timed",
        "version": 1,
        "fields": [{"pointer": "/key"}],
        "transport": ["/sent_at"],
        "occurred_at": "/at"
    }));
    let event = |at: Value| json!({"key": 1, "at": at, "sent_at": "2000-01-01T00:00:00Z"});
    let utc = identify(&contract, &event(json!("2026-11-29T12:00:00Z")));
    assert_eq!(utc.occurred_at_us, Some(1_795_953_600_000_000));
    let err = identify_err(&contract, &event(json!("yesterday")));
    assert_eq!((err.code(), err.field()), ("invalid_timestamp", "/at"));
}

#[test]
fn a_timestamp_field_keeps_the_id_of_one_instant_however_it_is_spelled() {
    let orders = contract(json!({
        "name": "orders", "version": 1,
        "fields": [
            {"pointer": "/order", "required": true},
            {"pointer": "/at", "required": true, "type": "timestamp"}
        ],
        "occurred_at": "/at"
    }));
    let event = |at: &str| json!({"order": "o-1", "at": at});
    let first = identify(&orders, &event("2026-11-29T12:00:00Z"));
    for spelling in [
        "2026-11-29T12:00:00+00:00",
        "2026-11-29T12:00:00.000Z",
        "2026-11-29T13:00:00.000000+01:00",
        "2026-11-29t12:00:00z",
    ] {
        let again = identify(&orders, &event(spelling));
        assert_eq!(again.event_id, first.event_id, "{spelling}");
        assert_eq!(again.fingerprint, first.fingerprint, "{spelling}");
        assert_eq!(again.occurred_at_us, first.occurred_at_us, "{spelling}");
    }
    assert!(canonical_text(&first).contains("2026-11-29T12:00:00.000000Z"));
    let later = identify(&orders, &event("2026-11-29T12:00:00.000001Z"));
    assert_ne!(later.event_id, first.event_id);
    let err = identify_err(&orders, &event("yesterday noon"));
    assert_eq!((err.code(), err.field()), ("invalid_timestamp", "/at"));
    let err = identify_err(&orders, &json!({"order": "o-1", "at": 1_795_953_600}));
    assert_eq!((err.code(), err.field()), ("wrong_type", "/at"));
    // Instants past 9999-12-31T23:59:59.999999Z in UTC have no RFC 3339 form: each was
    // written as one constant text, so two of them shared an id. Refused.
    for beyond in ["9999-12-31T23:00:00-02:00", "9999-12-31T23:30:00-03:00"] {
        let err = identify_err(&orders, &event(beyond));
        assert_eq!(
            (err.code(), err.field()),
            ("invalid_timestamp", "/at"),
            "{beyond}"
        );
    }
    // Before 1970 a fraction of a microsecond rounds down, as after: the instant stays
    // in its own microsecond (and day).
    let before = identify(&orders, &event("1969-12-31T23:59:59.9999995Z"));
    assert_eq!(before.occurred_at_us, Some(-1));
}

#[test]
fn a_stored_contract_is_read_without_the_authoring_rules_added_since() {
    // Each broke no rule when contracts could first be registered; each is refused now.
    for fields in [
        json!([{"pointer": "/cafe\u{301}"}]),
        json!([{"pointer": "/a\u{0}b"}]),
        json!([{"pointer": "/items/-"}]),
        json!([{"pointer": "/items", "array": "set"}, {"pointer": "/items/0"}]),
    ] {
        let document = json!({"name": "c", "version": 1, "fields": fields});
        assert!(Contract::from_json(&document).is_err(), "{document}");
        let stored = Contract::from_stored_json(&document).expect("a stored contract reads");
        let event = json!({"items": ["x"], "k": 1});
        assert!(stored.identify(&event).is_ok(), "{document}");
    }
    // What identification needs is still checked.
    for document in [
        json!({"name": "c", "version": 0, "fields": [{"pointer": "/k"}]}),
        json!({"name": "c", "version": 1, "fields": []}),
        json!({"name": "c", "version": 1, "fields": [{"pointer": "k"}]}),
        json!({"name": "c", "version": 1, "fields": [{"pointer": "/k"}], "transport": ["/k"]}),
    ] {
        assert!(Contract::from_stored_json(&document).is_err(), "{document}");
    }
}

//! Identity on arbitrary JSON: identifying never panics, and an event's id and
//! fingerprint are stable under re-reading its own canonical (RFC 8785) bytes, which are
//! themselves a fixed point of read-then-canonicalise.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use serde_json::json;
use traqlyte_identity::{canonical, json, Contract};

const DEPTH_MAX: usize = 64;

/// A contract using every canonicalisation rule: a typed string, a rounded number, a
/// set-like array, an object field, a transport field and an event time.
fn contract() -> &'static Contract {
    static CONTRACT: OnceLock<Contract> = OnceLock::new();
    CONTRACT.get_or_init(|| {
        let definition = json!({
            "name": "fuzz", "version": 1,
            "fields": [
                {"pointer": "/merchant_id", "required": true, "type": "string"},
                {"pointer": "/amount", "precision": 2},
                {"pointer": "/items", "array": "set"},
                {"pointer": "/params"}
            ],
            "transport": ["/sent_at"],
            "occurred_at": "/occurred_at"
        });
        Contract::from_json(&definition).expect("the fuzz contract is valid")
    })
}

fuzz_target!(|bytes: &[u8]| {
    let Ok(value) = json::parse(bytes, DEPTH_MAX) else {
        return;
    };
    let canonical_bytes = canonical::jcs(&value);
    let reread = json::parse(&canonical_bytes, DEPTH_MAX).expect("canonical bytes are JSON");
    assert_eq!(
        canonical::jcs(&reread),
        canonical_bytes,
        "canonical form is not a fixed point"
    );
    let first = contract().identify(&value);
    let second = contract().identify(&reread);
    match (first, second) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a.event_id, b.event_id);
            assert_eq!(a.fingerprint, b.fingerprint);
            assert_eq!(a.identity_bytes, b.identity_bytes);
            assert_eq!(a.occurred_at_us, b.occurred_at_us);
        }
        (Err(a), Err(b)) => assert_eq!(a.code(), b.code()),
        (a, b) => panic!("identify disagrees on the canonical form: {a:?} vs {b:?}"),
    }
});

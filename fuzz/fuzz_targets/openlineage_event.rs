//! The OpenLineage run-event projection on arbitrary JSON: never panics, and an accepted
//! event identifies the same after re-reading its canonical bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use traqlyte_identity::{canonical, json, openlineage};

const DEPTH_MAX: usize = 64;

fuzz_target!(|bytes: &[u8]| {
    let Ok(value) = json::parse(bytes, DEPTH_MAX) else {
        return;
    };
    let Ok(first) = openlineage::identify_run_event(&value) else {
        return;
    };
    let reread = json::parse(&canonical::jcs(&value), DEPTH_MAX).expect("canonical JSON");
    let second = openlineage::identify_run_event(&reread).expect("the canonical form identifies");
    assert_eq!(first.identified.event_id, second.identified.event_id);
    assert_eq!(first.identified.fingerprint, second.identified.fingerprint);
});

//! The contract parser on arbitrary JSON: never panics, and an accepted contract's own
//! canonical definition parses back to the same contract.
#![no_main]

use libfuzzer_sys::fuzz_target;
use traqlyte_identity::{json, Contract};

const DEPTH_MAX: usize = 64;

fuzz_target!(|bytes: &[u8]| {
    let Ok(value) = json::parse(bytes, DEPTH_MAX) else {
        return;
    };
    let Ok(contract) = Contract::from_json(&value) else {
        return;
    };
    let definition = contract.canonical_definition();
    let reread = json::parse(&definition, DEPTH_MAX).expect("a definition is JSON");
    let again = Contract::from_json(&reread).expect("a contract's own definition parses");
    assert_eq!(again.canonical_definition(), definition);
    let _ = contract.describe();
});

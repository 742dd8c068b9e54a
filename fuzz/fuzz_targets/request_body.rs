//! The server's request body types on arbitrary bytes (the first byte picks the type,
//! `traqlyte_server::fuzzing::BODY_TYPES`): reading and validating never panics, every
//! refusal is a 4xx in the JSON error shape, and an accepted body written out again by
//! serde_json is accepted again (the reader and the types agree on what they accept).
#![no_main]

use libfuzzer_sys::fuzz_target;
use traqlyte_server::fuzzing::request_body;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, bytes)) = data.split_first() else {
        return;
    };
    match request_body(selector, bytes) {
        Ok(()) => {
            let value = traqlyte_identity::json::parse(bytes, 32).expect("an accepted body parses");
            let again = serde_json::to_vec(&value).expect("serialisable");
            assert!(
                request_body(selector, &again).is_ok(),
                "accepted once, refused when re-read: {}",
                String::from_utf8_lossy(&again)
            );
        }
        Err(err) => {
            assert!(err.status_code().is_client_error(), "{err:?}");
            assert!(!err.code().is_empty() && !err.message().is_empty());
        }
    }
});

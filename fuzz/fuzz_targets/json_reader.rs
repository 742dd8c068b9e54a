//! The JSON reader on arbitrary bytes: never panics, whatever the depth, numbers or
//! encoding; what it accepts is exactly what serde_json accepts (after a leading byte
//! order mark, which it skips) with the number rule
//! applied, and both entry points agree on every document.
#![no_main]

use libfuzzer_sys::fuzz_target;
use traqlyte_identity::json;

/// The depth the server allows request bodies.
const DEPTH_MAX: usize = 64;

fuzz_target!(|bytes: &[u8]| {
    let strict = json::parse(bytes, DEPTH_MAX);
    let reporting = json::parse_reporting_numbers(bytes, DEPTH_MAX, 1);
    match (&strict, &reporting) {
        // A document the strict reader accepts has no refused number.
        (Ok(value), Ok((same, refused))) => {
            assert_eq!(value, same);
            assert!(refused.is_empty(), "strict accepted what reporting refused");
        }
        // The strict reader refuses a document with a refused number, which the
        // reporting reader reads and reports.
        (Err(_), Ok((_, refused))) => assert!(!refused.is_empty()),
        (Ok(_), Err(err)) => panic!("reporting refused what strict accepted: {err}"),
        (Err(_), Err(_)) => {}
    }
});

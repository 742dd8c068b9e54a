//! Direct tests of the store crate's pure parts. The SQL itself is exercised through the
//! HTTP API on both backends by `crates/traqlyte/tests/it`.

mod plan;

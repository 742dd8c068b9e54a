//! The payload rule of outcomes. An outcome's identity is `(assignment_id, dedupe_key)`,
//! a unique key in the store; its fingerprint decides what a second delivery under that
//! key is: the same fingerprint is a retry (answered with the original), a different one
//! a collision (refused, logged).

use serde_json::json;
use traqlyte_identity::{canonical, sha256_hex};

/// SHA-256 (hex) of the RFC 8785 bytes of `{"metric","value","occurred_at_us"}`: what
/// the business fact says, nothing of its transport. The constants in
/// `tests/it/fixtures.rs` freeze it, so a change cannot silently re-key stored outcomes.
pub fn outcome_fingerprint(metric: &str, value: Option<f64>, occurred_at_us: i64) -> String {
    let document = json!({"metric": metric, "value": value, "occurred_at_us": occurred_at_us});
    sha256_hex(&canonical::jcs(&document))
}

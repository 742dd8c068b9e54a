//! The payload rule of outcomes. An outcome's identity is `(assignment_id, dedupe_key)`,
//! a unique key in the store; its fingerprint decides what a second delivery under that
//! key is: the same fingerprint is a retry (answered with the original), a different one
//! a collision (refused, logged).

use serde_json::json;
use sha2::{Digest, Sha256};
use traqlyte_identity::{canonical, sha256_hex};

use crate::{AssignmentId, CampaignId, DedupeKey, OutcomeId};

/// SHA-256 (hex) of the RFC 8785 bytes of `{"metric","value","occurred_at_us"}`: what
/// the business fact says, nothing of its transport. The constants in
/// `tests/it/fixtures.rs` freeze it, so a change cannot silently re-key stored outcomes.
pub fn outcome_fingerprint(metric: &str, value: Option<f64>, occurred_at_us: i64) -> String {
    let document = json!({"metric": metric, "value": value, "occurred_at_us": occurred_at_us});
    sha256_hex(&canonical::jcs(&document))
}

/// SHA-256 (hex) of the RFC 8785 bytes of `{"metric","value"}`: the fingerprint of a fact
/// that carries no time of its own (a Segment message without a client `timestamp`,
/// whose only time is its delivery's), so that every re-send of it is a retry, not a
/// collision. Never equal to an [`outcome_fingerprint`] (a document without the time
/// key); frozen beside it in `tests/it/fixtures.rs`.
pub fn untimed_outcome_fingerprint(metric: &str, value: Option<f64>) -> String {
    let document = json!({"metric": metric, "value": value});
    sha256_hex(&canonical::jcs(&document))
}

/// The id of a stored outcome: `out_` and the first 32 hex digits of SHA-256 of
/// `tenant ‖ "\n" ‖ campaign ‖ "\n" ‖ assignment ‖ "\n" ‖ dedupe_key`. A function of the
/// outcome's identity only (never of its payload or arrival), so every delivery of it,
/// and every correction, names the same outcome; the tenant is in it because the store's
/// key starts with the tenant. Frozen by `tests/it/fixtures.rs`.
pub fn outcome_id(
    tenant: &str,
    campaign: &CampaignId,
    assignment: &AssignmentId,
    dedupe_key: &DedupeKey,
) -> OutcomeId {
    let digest = Sha256::new()
        .chain_update(tenant.as_bytes())
        .chain_update(b"\n")
        .chain_update(campaign.as_str().as_bytes())
        .chain_update(b"\n")
        .chain_update(assignment.as_str().as_bytes())
        .chain_update(b"\n")
        .chain_update(dedupe_key.as_str().as_bytes())
        .finalize();
    OutcomeId::from_digest(&digest)
}

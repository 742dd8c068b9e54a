//! The identity core's integration tests, one binary (matklad's advice): property tests of
//! the canonical form, example tests of each contract rule, and the frozen fixture ids
//! checked both here and by an independent Python implementation.

mod fixtures;
mod meter;
mod openlineage;
mod properties;
mod rules;
mod segment;

use serde_json::{json, Value};
use traqlyte_identity::{Contract, Identified, IdentityError};

/// A lineage-style contract exercising every rule: a required string, an integer, a
/// parameter object, a rounded number, a set array, an ordered array, and transport
/// fields at the top level and nested inside a content object.
pub fn job_run_contract() -> Contract {
    contract(json!({
        "name": "job_run",
        "version": 3,
        "fields": [
            {"pointer": "/job", "type": "string", "required": true},
            {"pointer": "/run", "type": "integer"},
            {"pointer": "/params", "type": "object"},
            {"pointer": "/score", "precision": 2},
            {"pointer": "/inputs", "array": "set"},
            {"pointer": "/steps", "array": "ordered"}
        ],
        "transport": ["/sent_at", "/attempt", "/host", "/meta/trace_id"]
    }))
}

/// The identity fields of [`job_run_contract`], as top-level keys.
pub const IDENTITY_KEYS: [&str; 6] = ["job", "run", "params", "score", "inputs", "steps"];

/// The top-level transport keys of [`job_run_contract`].
pub const TRANSPORT_KEYS: [&str; 3] = ["sent_at", "attempt", "host"];

/// Builds a contract from its JSON document, panicking on an invalid one.
pub fn contract(document: Value) -> Contract {
    Contract::from_json(&document).expect("test contract is valid")
}

/// Identifies `event` under `contract`, panicking on an identity error.
pub fn identify(contract: &Contract, event: &Value) -> Identified {
    contract
        .identify(event)
        .unwrap_or_else(|err| panic!("event {event} should identify: {err}"))
}

/// Identifies `event`, returning the error the contract reports.
pub fn identify_err(contract: &Contract, event: &Value) -> IdentityError {
    match contract.identify(event) {
        Ok(identified) => panic!("event {event} should be refused, got {identified:?}"),
        Err(err) => err,
    }
}

/// The canonical identity bytes of `identified` as text.
pub fn canonical_text(identified: &Identified) -> String {
    String::from_utf8(identified.identity_bytes.clone()).expect("canonical bytes are UTF-8")
}

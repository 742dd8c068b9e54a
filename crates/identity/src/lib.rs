//! The pure identity core of TraqLyte: no I/O, no async, no SQL.
//!
//! An event's identity is *computed*, never assigned. A [`Contract`] names the JSON
//! pointers whose values make up an event's identity, the per-field canonicalisation
//! rules, and the transport metadata that must never influence identity or content.
//! [`Contract::identify`] turns a parsed event into an [`Identified`] event: its
//! [`EventId`] (SHA-256 over the contract name, version and canonical identity bytes)
//! and its payload [`Fingerprint`] (SHA-256 over the canonical whole event minus the
//! transport pointers), which the store uses to tell a harmless retry from a collision.
//!
//! Main types: [`Contract`], [`ContractName`], [`EventId`], [`Fingerprint`],
//! [`Identified`]; parsing with limits lives in [`json`], the canonical form in
//! [`canonical`], RFC 6901 pointers in [`pointer`](mod@pointer), and the built-in OpenLineage RunEvent
//! contract with its projection and run-id helper in [`openlineage`], and the built-in
//! Segment message contract with its projection and clock-skew correction in [`segment`].

#![deny(missing_docs)]

pub mod canonical;
mod contract;
mod error;
mod id;
pub mod json;
pub mod number;
pub mod openlineage;
pub mod pointer;
pub mod segment;
mod timestamp;

pub use contract::{ArrayMode, Contract, ContractName, FieldSpec, FieldType, CONTRACT_FIELDS_MAX};
pub use error::{ContractError, IdentityError};
pub use id::{sha256_hex, EventId, Fingerprint, Identified};
pub use timestamp::{format_rfc3339_micros, parse_rfc3339_micros, writable_in_rfc3339};

/// Every built-in contract, by name: `openlineage.run_event` and `segment.message`.
pub fn builtin_contracts() -> impl Iterator<Item = &'static Contract> {
    [
        openlineage::run_event_contract(),
        segment::message_contract(),
    ]
    .into_iter()
}

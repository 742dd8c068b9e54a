//! Error enums of the identity core.

use thiserror::Error;

/// Why an event could not be identified under a contract. Every variant names the
/// JSON pointer of the offending field (empty for the whole document).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum IdentityError {
    /// The event body is not a JSON object.
    #[error("the event must be a JSON object, got {found}")]
    NotAnObject {
        /// The JSON type that was found.
        found: &'static str,
    },
    /// A field marked `"required": true` in the contract is absent.
    #[error("required field {field} is missing")]
    MissingRequired {
        /// The pointer (or name) of the offending field.
        field: String,
    },
    /// A field has a JSON type its contract rule cannot apply to.
    #[error("field {field} must be {expected}, got {found}")]
    WrongType {
        /// The pointer (or name) of the offending field.
        field: String,
        /// What the rule expects.
        expected: &'static str,
        /// The JSON type that was found.
        found: &'static str,
    },
    /// Two object keys become equal after Unicode NFC normalisation; `field` is the
    /// pointer of the (normalised) key.
    #[error(
        "the object holding {field} has two keys that are equal after NFC normalisation: {key:?}"
    )]
    DuplicateKeyAfterNormalization {
        /// The pointer (or name) of the offending field.
        field: String,
        /// The clashing key, normalised.
        key: String,
    },
    /// An integer no IEEE double holds exactly (beyond ±(2^53−1) and not a double's
    /// shortest form), which an RFC 8785 number could not keep apart from its neighbours.
    #[error("number at {field} is not the shortest form of an IEEE double (RFC 8785 numbers are doubles, written in that form); send it as a string")]
    NumberOutOfRange {
        /// The pointer (or name) of the offending field.
        field: String,
    },
    /// The `occurred_at` field is not an RFC 3339 timestamp with an offset.
    #[error("field {field} must be an RFC 3339 timestamp with a UTC offset (e.g. 2026-11-29T12:00:00Z): {reason}")]
    InvalidTimestamp {
        /// The pointer (or name) of the offending field.
        field: String,
        /// Why the value is not acceptable.
        reason: String,
    },
}

impl IdentityError {
    /// The JSON pointer of the field the error is about.
    pub fn field(&self) -> &str {
        match self {
            IdentityError::NotAnObject { .. } => "",
            IdentityError::MissingRequired { field }
            | IdentityError::WrongType { field, .. }
            | IdentityError::DuplicateKeyAfterNormalization { field, .. }
            | IdentityError::NumberOutOfRange { field }
            | IdentityError::InvalidTimestamp { field, .. } => field,
        }
    }

    /// A stable machine-readable code for the error.
    pub fn code(&self) -> &'static str {
        match self {
            IdentityError::NotAnObject { .. } => "not_an_object",
            IdentityError::MissingRequired { .. } => "missing_required_field",
            IdentityError::WrongType { .. } => "wrong_type",
            IdentityError::DuplicateKeyAfterNormalization { .. } => "duplicate_key",
            IdentityError::NumberOutOfRange { .. } => "number_out_of_range",
            IdentityError::InvalidTimestamp { .. } => "invalid_timestamp",
        }
    }
}

/// Why a contract definition is invalid. `field` names the offending part of the contract.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{message}")]
pub struct ContractError {
    /// Where in the contract document the problem is (e.g. `fields[2].pointer`).
    pub field: String,
    /// What rule was broken.
    pub message: String,
}

impl ContractError {
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        ContractError {
            field: field.into(),
            message: message.into(),
        }
    }
}

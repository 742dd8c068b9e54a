//! Event ids and payload fingerprints.

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::{canonical, Contract};

/// An event's identity: lowercase hex SHA-256 of
/// `contract name ‖ "\n" ‖ decimal version ‖ "\n" ‖ canonical identity bytes`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct EventId(String);

/// Lowercase hex SHA-256 of the canonical whole event minus its transport pointers, with
/// identity fields in their canonical form (rounded, set-sorted): equal fingerprints
/// under one id mean a retry, different fingerprints mean a collision.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Fingerprint(String);

macro_rules! hex_newtype {
    ($name:ident) => {
        impl $name {
            /// Accepts 64 lowercase hex characters (as stored).
            pub fn parse(text: &str) -> Option<$name> {
                let ok = text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
                ok.then(|| $name(text.to_string()))
            }

            /// The lowercase hex text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

hex_newtype!(EventId);
hex_newtype!(Fingerprint);

impl Fingerprint {
    /// The fingerprint of an already-normalised content document.
    pub(crate) fn of(content: &Value) -> Fingerprint {
        Fingerprint(sha256_hex(&canonical::jcs(content)))
    }

    /// The fingerprint whose canonical bytes `hasher` has been fed.
    pub(crate) fn of_hasher(hasher: Sha256) -> Fingerprint {
        Fingerprint(hex(&hasher.finalize()))
    }
}

/// An event identified under a contract.
#[derive(Debug, Clone)]
pub struct Identified {
    /// The event id.
    pub event_id: EventId,
    /// The payload fingerprint.
    pub fingerprint: Fingerprint,
    /// RFC 8785 bytes of the identity document `{pointer: canonical value}` (absent
    /// fields omitted, so absent differs from `null`).
    pub identity_bytes: Vec<u8>,
    /// Event time in microseconds since the Unix epoch, when the contract declares one
    /// and the event carries it.
    pub occurred_at_us: Option<i64>,
    /// Fingerprints of earlier deliveries of this event that the sender is known to
    /// change in flight (a stored row with one of them is met as a retry, not a
    /// collision); empty for every contract but `segment.message`
    /// (`segment::identify_message`: a retry that gained a `userId`).
    pub retry_of: Vec<Fingerprint>,
    /// This delivery is an anonymous `segment.message` (an `anonymousId`, no `userId`):
    /// a stored row of its id that differs only by a `userId` gained is a later attempt
    /// of it that arrived first ([`Identified::is_earlier_attempt_of`]).
    pub may_precede_identify: bool,
}

impl Identified {
    pub(crate) fn new(
        contract: &Contract,
        identity_bytes: Vec<u8>,
        fingerprint: Fingerprint,
        occurred_at_us: Option<i64>,
    ) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(contract.name().as_str().as_bytes());
        hasher.update(format!("\n{}\n", contract.version()).as_bytes());
        hasher.update(&identity_bytes);
        let event_id = EventId(hex(&hasher.finalize()));
        Identified {
            event_id,
            fingerprint,
            identity_bytes,
            occurred_at_us,
            retry_of: Vec::new(),
            may_precede_identify: false,
        }
    }

    /// Whether this delivery is an earlier attempt of the stored row whose payload is
    /// `stored_payload` and `stored_fingerprint`, the one stored having been changed in
    /// flight: the reverse of
    /// [`Identified::retry_of`], for a retry stored before its original (a request held
    /// up in a proxy while the client retried). Asked only of a would-be collision; false
    /// for every contract but `segment.message`.
    pub fn is_earlier_attempt_of(
        &self,
        stored_payload: &str,
        stored_fingerprint: &Fingerprint,
    ) -> bool {
        self.may_precede_identify
            && crate::segment::anonymous_forms_of_stored(stored_payload, stored_fingerprint)
                .contains(&self.fingerprint)
    }
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
    out
}

//! The pure part of the consumer: from a message's subject and bytes to the contract it
//! is stored under and its parsed JSON, or to the reason it is a dead letter.

use serde_json::Value;
use traqlyte_identity::openlineage::RUN_EVENT_CONTRACT;
use traqlyte_identity::segment::MESSAGE_CONTRACT;
use traqlyte_identity::{json, ContractName};

use crate::ApiError;

/// The subject prefix: a message on `traqlyte.{contract}` is an event of `{contract}`.
pub const SUBJECT_PREFIX: &str = "traqlyte.";

/// The subject of Segment-shaped messages: one Segment message (the body of
/// `POST /v1/track` and its siblings, `type` required) a NATS message, stored under the
/// built-in `segment.message` contract for the consumer's `--segment-source`.
pub const SEGMENT_SUBJECT: &str = "traqlyte.segment";

/// The header that pins the version of the contract a message is identified under, as
/// `?version=N` does over HTTP (absent: the latest version when it is consumed).
pub const VERSION_HEADER: &str = "Traqlyte-Contract-Version";

/// The value of a message's [`VERSION_HEADER`], under any spelling of the name (NATS
/// keeps header names as sent).
pub fn version_header(headers: Option<&async_nats::HeaderMap>) -> Option<&str> {
    let (_, values) = headers?
        .iter()
        .find(|(name, _)| AsRef::<str>::as_ref(*name).eq_ignore_ascii_case(VERSION_HEADER))?;
    values.first().map(|value| value.as_str())
}

/// The contract version a message's [`VERSION_HEADER`] pins: `None` without one; a value
/// that is not a version (a positive integer) is a dead letter.
pub fn pinned_version(header: Option<&str>) -> Result<Option<u32>, Refusal> {
    let Some(text) = header else {
        return Ok(None);
    };
    match text.trim().parse::<u32>() {
        Ok(version) if version > 0 => Ok(Some(version)),
        _ => Err(Refusal::new(
            "invalid_contract_version",
            format!(
                "header {VERSION_HEADER}: {text:?} is not a contract version (a positive integer)"
            ),
        )),
    }
}

/// What a message is, before its contract is looked up.
#[derive(Debug, PartialEq)]
pub enum Decoded {
    /// A JSON document for the tenant's contract of that name.
    Event {
        /// The contract named by the subject.
        contract: ContractName,
        /// The parsed document.
        value: Value,
    },
    /// A Segment message (subject [`SEGMENT_SUBJECT`]), parsed, not yet judged.
    Segment {
        /// The parsed document.
        value: Value,
    },
    /// A message that can never be stored as it is.
    Dead(Refusal),
}

/// Why a message is a dead letter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// A stable code (`invalid_json`, `unknown_contract`, `unsupported_subject`, `invalid_contract_version`, `segment_source_not_configured`,
    /// `source_revoked`, `outside_horizon`, or the code the HTTP API would answer for
    /// the same body).
    pub reason: String,
    /// The explanation, for people.
    pub detail: String,
}

impl Refusal {
    /// A refusal with `reason` and `detail`.
    pub fn new(reason: &str, detail: impl Into<String>) -> Refusal {
        Refusal {
            reason: reason.to_string(),
            detail: detail.into(),
        }
    }

    /// The refusal the HTTP API's error would be (same code, same message).
    pub fn of(err: &ApiError) -> Refusal {
        Refusal::new(err.code(), err.message())
    }
}

/// Reads the contract from the subject and parses the payload as strictly as the HTTP
/// API parses a body (UTF-8, nesting within `depth_max`, no duplicate keys, no NaN).
pub fn decode(subject: &str, payload: &[u8], depth_max: usize) -> Decoded {
    if subject == SEGMENT_SUBJECT {
        return match parse_segment(payload, depth_max) {
            Ok(value) => Decoded::Segment { value },
            Err(refusal) => Decoded::Dead(refusal),
        };
    }
    let Some(name) = subject.strip_prefix(SUBJECT_PREFIX) else {
        return Decoded::Dead(Refusal::new(
            "unknown_contract",
            format!("subject {subject:?} is not traqlyte.{{contract}}"),
        ));
    };
    let Ok(contract) = ContractName::parse(name) else {
        return Decoded::Dead(Refusal::new(
            "unknown_contract",
            format!("{name:?} is not a contract name"),
        ));
    };
    // The built-in contracts are no tenant's contract: say where their messages go.
    if name == RUN_EVENT_CONTRACT {
        return Decoded::Dead(Refusal::new(
            "unsupported_subject",
            format!("OpenLineage RunEvents are not consumed from NATS: send them to POST /api/v1/lineage, which also builds the lineage graph (subject {subject:?})"),
        ));
    }
    if name == MESSAGE_CONTRACT {
        return Decoded::Dead(Refusal::new(
            "unsupported_subject",
            format!("Segment messages are consumed from {SEGMENT_SUBJECT:?}, not {subject:?}"),
        ));
    }
    match parse(payload, depth_max) {
        Ok(value) => Decoded::Event { contract, value },
        Err(refusal) => Decoded::Dead(refusal),
    }
}

/// A Segment message's payload, read as `/v1/batch` reads one: a lone surrogate escape as
/// U+FFFD and `NaN` or `Infinity` as `null` (each fix once, in either order), so the same
/// message is stored from NATS that is stored over HTTP (it was a dead letter).
fn parse_segment(payload: &[u8], depth_max: usize) -> Result<Value, Refusal> {
    let mut bytes = std::borrow::Cow::Borrowed(payload);
    let mut fixes = json::BrowserFixes::default();
    loop {
        match json::parse(&bytes, depth_max) {
            Ok(value) => return Ok(value),
            Err(err) => match json::browser_fix(&err, &bytes, &mut fixes) {
                Some(fixed) => bytes = std::borrow::Cow::Owned(fixed),
                None => return Err(refusal_of(err)),
            },
        }
    }
}

fn parse(payload: &[u8], depth_max: usize) -> Result<Value, Refusal> {
    json::parse(payload, depth_max).map_err(refusal_of)
}

/// One reason for every way a payload fails to parse; the detail keeps the parser's own
/// code (`duplicate_key`, `number_out_of_range`, …).
fn refusal_of(err: json::ParseError) -> Refusal {
    let err = ApiError::from(err);
    let detail = format!("{}: {}", err.code(), err.message());
    Refusal::new("invalid_json", detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(decoded: Decoded) -> String {
        match decoded {
            Decoded::Dead(refusal) => refusal.reason,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_subject_names_the_contract_and_the_payload_is_parsed() {
        let decoded = decode("traqlyte.checkout_completed", br#"{"a":1}"#, 32);
        let Decoded::Event { contract, value } = decoded else {
            panic!("expected an event");
        };
        assert_eq!(contract.as_str(), "checkout_completed");
        assert_eq!(value, serde_json::json!({"a": 1}));
    }

    #[test]
    fn the_version_header_pins_a_positive_version() {
        assert_eq!(pinned_version(None), Ok(None));
        assert_eq!(pinned_version(Some("2")), Ok(Some(2)));
        assert_eq!(pinned_version(Some(" 3 ")), Ok(Some(3)));
        for bad in ["0", "-1", "v2", "", "4294967296"] {
            let refused = pinned_version(Some(bad)).expect_err(bad);
            assert_eq!(refused.reason, "invalid_contract_version", "{bad}");
        }
    }

    /// Read as `/v1/batch` reads it: `NaN` as `null`, a lone surrogate as U+FFFD; a
    /// tenant contract's subject still refuses `NaN`, as `POST /events/{contract}` does.
    #[test]
    fn a_segment_message_s_nan_and_lone_surrogate_are_read_as_over_http() {
        let decoded = decode(
            SEGMENT_SUBJECT,
            br#"{"type":"track","event":"E","properties":{"p":NaN,"t":"cut \ud83d"}}"#,
            32,
        );
        let Decoded::Segment { value } = decoded else {
            panic!("expected a Segment message, got {decoded:?}");
        };
        assert_eq!(value["properties"]["p"], Value::Null);
        assert_eq!(value["properties"]["t"], "cut \u{fffd}");
        let refused = reason(decode("traqlyte.checkout_completed", br#"{"a":NaN}"#, 32));
        assert_eq!(refused, "invalid_json");
    }

    #[test]
    fn the_segment_subject_carries_a_segment_message() {
        let decoded = decode(
            "traqlyte.segment",
            br#"{"type":"track","userId":"u","event":"E"}"#,
            32,
        );
        let Decoded::Segment { value } = decoded else {
            panic!("expected a Segment message, got {decoded:?}");
        };
        assert_eq!(value["event"], "E");
    }

    #[test]
    fn bad_json_duplicate_keys_and_bad_subjects_are_refused_with_their_reason() {
        let table: [(&str, &[u8], &str); 7] = [
            (
                "traqlyte.openlineage.run_event",
                b"{}",
                "unsupported_subject",
            ),
            ("traqlyte.segment.message", b"{}", "unsupported_subject"),
            ("traqlyte.c", b"{not json", "invalid_json"),
            ("traqlyte.c", br#"{"a":1,"a":2}"#, "invalid_json"),
            ("traqlyte.c", b"\xff\xfe", "invalid_json"),
            ("orders.created", b"{}", "unknown_contract"),
            ("traqlyte.segment", b"{\"a\":", "invalid_json"),
        ];
        for (subject, payload, expected) in table {
            assert_eq!(reason(decode(subject, payload, 32)), expected, "{subject}");
        }
    }
}

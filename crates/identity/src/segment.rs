//! Segment messages under the built-in contract `segment.message` version 1.
//!
//! [`identify_message`] checks one message of Segment's HTTP Tracking API (`track`,
//! `identify`, `page`, `screen`, `group`, `alias`), projects it to its identity (the
//! source and `messageId` when the message has one, else the source and its semantic
//! content), applies the built-in contract (a data file, [`message_contract`]) to that
//! projection, and takes the payload fingerprint over the whole message minus its
//! transport fields ([`TRANSPORT_POINTERS`]: `sentAt`, which the official clients renew on
//! every retry, the write key, `context.library`, …). It also corrects the client's
//! clock the way Segment documents it: `timestamp = receivedAt - (sentAt - timestamp)`.
//!
//! Pure: the caller passes the receive time and the source; nothing here reads a clock.

use std::sync::OnceLock;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::canonical::{self, type_name};
use crate::pointer::Pointer;
use crate::IdentityError;
use crate::{format_rfc3339_micros, parse_rfc3339_micros, Contract, Fingerprint, Identified};

/// Name of the built-in contract of Segment messages.
pub const MESSAGE_CONTRACT: &str = "segment.message";

/// The contract document, a data file embedded at build time.
pub const MESSAGE_CONTRACT_V1_JSON: &str = include_str!("../contracts/segment.message.v1.json");

/// Largest message, in bytes of its compact JSON (Segment's documented 32 KB).
pub const MESSAGE_BYTES_MAX: usize = 32 * 1024;

/// Largest `messageId`, in UTF-8 bytes.
pub const MESSAGE_ID_BYTES_MAX: usize = 256;

/// Largest `userId`, `anonymousId`, `event`, `groupId` or `previousId`, in UTF-8 bytes
/// (they key assignments and dedupe keys, B-tree entries on PostgreSQL).
pub const ID_BYTES_MAX: usize = 256;

/// Pointers left out of the payload fingerprint: transport and observation metadata.
pub const TRANSPORT_POINTERS: [&str; 6] = [
    "/sentAt",
    "/writeKey",
    "/context/library",
    "/_metadata",
    "/receivedAt",
    "/originalTimestamp",
];

/// [`TRANSPORT_POINTERS`] as they lie in a stored payload (`stored_payload`), which a
/// collision's diff marks: there the corrected `timestamp`, renewed with each retry's
/// `receivedAt` and `sentAt`, is transport, and `originalTimestamp` holds the client's
/// `timestamp`, which is content (in the fingerprint).
pub const STORED_TRANSPORT_POINTERS: [&str; 6] = [
    "/sentAt",
    "/writeKey",
    "/context/library",
    "/_metadata",
    "/receivedAt",
    "/timestamp",
];

/// The kind of a Segment message, its `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageType {
    /// `track`: a named event with properties.
    Track,
    /// `identify`: a user and their traits.
    Identify,
    /// `page`: a web page view.
    Page,
    /// `screen`: an app screen view.
    Screen,
    /// `group`: a user joins a group.
    Group,
    /// `alias`: two user ids are one user.
    Alias,
}

impl MessageType {
    /// Every type, in the order of Segment's documentation.
    pub const ALL: [MessageType; 6] = [
        MessageType::Track,
        MessageType::Identify,
        MessageType::Page,
        MessageType::Screen,
        MessageType::Group,
        MessageType::Alias,
    ];

    /// The type as Segment spells it (`track`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            MessageType::Track => "track",
            MessageType::Identify => "identify",
            MessageType::Page => "page",
            MessageType::Screen => "screen",
            MessageType::Group => "group",
            MessageType::Alias => "alias",
        }
    }

    /// The type named `text`, if any.
    pub fn parse(text: &str) -> Option<MessageType> {
        MessageType::ALL.into_iter().find(|t| t.as_str() == text)
    }
}

/// What the request around a message says: who sent it, when it arrived, and the
/// batch-level fields that apply to every message of a batch.
#[derive(Debug, Clone, Copy)]
pub struct Envelope<'a> {
    /// The source (`src_…`) the write key belongs to.
    pub source: &'a str,
    /// When the server received the request, microseconds since the epoch.
    pub received_at_us: i64,
    /// The type the route implies (`/v1/track` → `track`); `None` for `/v1/batch`.
    pub route_type: Option<MessageType>,
    /// The batch's `sentAt`, used when a message has none.
    pub sent_at: Option<&'a str>,
    /// The batch's `context`, merged under each message's own context keys.
    pub context: Option<&'a Map<String, Value>>,
}

/// A message that passed every rule, identified under [`MESSAGE_CONTRACT`].
#[derive(Debug, Clone)]
pub struct SegmentMessage {
    /// Event id, payload fingerprint, and the clock-skew-corrected event time.
    pub identified: Identified,
    /// The message's type.
    pub kind: MessageType,
    /// `event` of a track call.
    pub event: Option<String>,
    /// `userId`, NFC.
    pub user_id: Option<String>,
    /// `anonymousId`, NFC.
    pub anonymous_id: Option<String>,
    /// `userId` and `anonymousId` as sent, each only where NFC changed it: a unit is
    /// assigned (`POST /assignments`) under the very bytes the application used, so a
    /// tracked event is matched to its assignment by these first.
    pub units_as_sent: Vec<String>,
    /// The client's own `timestamp`, microseconds since the epoch, before correction:
    /// the one time that is the same in every re-send of a message.
    pub original_timestamp_us: Option<i64>,
    /// The message as stored: normalised, batch context merged, without the write key,
    /// with `receivedAt`, `originalTimestamp` and the corrected `timestamp` set.
    pub payload: Value,
}

/// Why a message is not acceptable. `field` is the message's own field name
/// (`userId`, `properties`), empty for the message as a whole.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SegmentError {
    /// A required field is absent (or `null`).
    #[error("{field} is required: {why}")]
    Missing {
        /// The offending field.
        field: &'static str,
        /// Which rule asks for it.
        why: &'static str,
    },
    /// A field has the wrong JSON type.
    #[error("{} must be {expected}, got {found}", if field.is_empty() { "the message" } else { field.as_str() })]
    WrongType {
        /// The offending field (empty: the message itself).
        field: String,
        /// What the rule expects.
        expected: &'static str,
        /// The JSON type that was found.
        found: &'static str,
    },
    /// A field has the right type but a value that is not allowed.
    #[error("{field} is invalid: {reason}")]
    Invalid {
        /// The offending field.
        field: String,
        /// Why the value is not acceptable.
        reason: String,
    },
    /// The message is larger than [`MESSAGE_BYTES_MAX`].
    #[error("a message holds at most {max} bytes of JSON (Segment's limit; a batch's context counts in each of its messages), this one {bytes}")]
    TooLarge {
        /// The message's size in bytes.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// The message nests arrays and objects deeper than the server takes.
    #[error("a message nests JSON at most {depth_max} levels deep (the server's --json-depth-max), this one {depth}")]
    TooDeep {
        /// The message's depth.
        depth: usize,
        /// The limit.
        depth_max: usize,
    },
    /// The message breaks a canonical-form rule (NFC key clash, integer out of range).
    #[error(transparent)]
    Canonical(#[from] IdentityError),
}

impl SegmentError {
    /// The field the error is about (empty: the message as a whole).
    pub fn field(&self) -> String {
        match self {
            SegmentError::Missing { field, .. } => (*field).to_string(),
            SegmentError::WrongType { field, .. } | SegmentError::Invalid { field, .. } => {
                field.clone()
            }
            SegmentError::TooLarge { .. } | SegmentError::TooDeep { .. } => String::new(),
            SegmentError::Canonical(err) => err.field().trim_start_matches('/').replace('/', "."),
        }
    }

    /// A stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            SegmentError::Missing { .. } => "missing_required_field",
            SegmentError::WrongType { .. } => "wrong_type",
            SegmentError::Invalid { .. } => "invalid_value",
            SegmentError::TooLarge { .. } => "message_too_large",
            SegmentError::TooDeep { .. } => "too_deep",
            SegmentError::Canonical(err) => err.code(),
        }
    }
}

/// The built-in contract `segment.message` version 1, loaded from its data file.
pub fn message_contract() -> &'static Contract {
    static CONTRACT: OnceLock<Contract> = OnceLock::new();
    CONTRACT.get_or_init(|| {
        let value: Value = serde_json::from_str(MESSAGE_CONTRACT_V1_JSON)
            .expect("the embedded contract file is JSON (checked by the tests)");
        Contract::from_json(&value).expect("the embedded contract is valid (checked by the tests)")
    })
}

/// Validates, projects and identifies one Segment message.
pub fn identify_message(
    message: &Value,
    envelope: &Envelope<'_>,
) -> Result<SegmentMessage, SegmentError> {
    identify_message_owned(message.clone(), envelope)
}

/// [`identify_message`] of a message the caller gives up: it is normalised in place and
/// becomes the stored payload, instead of being copied (a batch's messages, up to
/// 500 KB, were copied and the originals dropped beside the copies: `bench segment`).
/// On an error the message is gone; a caller that records it keeps its own text.
pub fn identify_message_owned(
    message: Value,
    envelope: &Envelope<'_>,
) -> Result<SegmentMessage, SegmentError> {
    let Value::Object(raw) = &message else {
        return Err(SegmentError::WrongType {
            field: String::new(),
            expected: "a JSON object (a Segment message)",
            found: type_name(&message),
        });
    };
    let bytes = compact_len(raw);
    if bytes > MESSAGE_BYTES_MAX {
        return Err(SegmentError::TooLarge {
            bytes,
            max: MESSAGE_BYTES_MAX,
        });
    }
    let units_as_sent: Vec<String> = ["userId", "anonymousId"]
        .iter()
        .filter_map(|field| raw.get(*field).and_then(Value::as_str))
        .filter(|unit| !canonical::is_nfc(unit))
        .map(str::to_owned)
        .collect();
    let mut content = message;
    canonical::normalize_in_place(&mut content, "")?;
    stringify_integer_ids(&mut content);
    let kind = message_type(&mut content, envelope.route_type)?;
    let fields = Fields::read(&content, kind)?;
    let sent_at = match optional_str(&content, "sentAt")? {
        Some(text) => Some(timestamp("sentAt", &text)?),
        None => envelope
            .sent_at
            .map(|text| timestamp("sentAt", text))
            .transpose()?,
    };
    merge_context(&mut content, envelope.context)?;
    // The limit holds for the message as stored, the batch's context merged in: checked
    // on the message alone, a 500 KB batch of a large context and a thousand small
    // messages stored a thousand copies of it (a review: 1.8 GB of memory for four).
    if envelope.context.is_some_and(|context| !context.is_empty()) {
        if let Value::Object(merged) = &content {
            let bytes = compact_len(merged);
            if bytes > MESSAGE_BYTES_MAX {
                return Err(SegmentError::TooLarge {
                    bytes,
                    max: MESSAGE_BYTES_MAX,
                });
            }
        }
    }
    let projection = projection(&content, &fields, envelope.source);
    let (fingerprint, retry_of) = fingerprints_without_transport(&mut content, &fields);
    let mut identified =
        message_contract().identify_with_fingerprint(Value::Object(projection), fingerprint)?;
    identified.retry_of = retry_of;
    identified.may_precede_identify = fields.user_id.is_none() && fields.anonymous_id.is_some();
    let mut corrected = corrected_timestamp(envelope.received_at_us, sent_at, fields.timestamp_us);
    if !crate::timestamp::writable_in_rfc3339(corrected) {
        // A correction past the years 0001–9999 (a `timestamp` of .NET's default date
        // sent by a clock a few seconds ahead) takes the client's timestamp as it is: the
        // transport field `sentAt` must not decide whether a retry is taken (a review: it
        // was refused or stored by the client's clock alone).
        corrected = fields.timestamp_us.unwrap_or(envelope.received_at_us);
    }
    identified.occurred_at_us = Some(corrected);
    let payload = stored_payload(content, envelope.received_at_us, corrected);
    Ok(SegmentMessage {
        identified,
        kind,
        event: fields.event,
        user_id: fields.user_id,
        anonymous_id: fields.anonymous_id,
        units_as_sent,
        original_timestamp_us: fields.timestamp_us,
        payload,
    })
}

/// The id fields a sender may give as integers: Segment's Ruby and PHP libraries pass an
/// application's `user.id` through as a JSON number (its Python library turns it into a
/// string first, `stringify_id`).
pub const INTEGER_ID_FIELDS: [&str; 4] = ["userId", "anonymousId", "groupId", "previousId"];

/// Each of [`INTEGER_ID_FIELDS`] given as an integer becomes its decimal string, the
/// form every other library sends: `{"userId": 42}` and `{"userId": "42"}` are one
/// message of one unit. Other numbers (`4.2`) stay, and are refused as ids.
fn stringify_integer_ids(content: &mut Value) {
    let Value::Object(map) = content else {
        return;
    };
    for field in INTEGER_ID_FIELDS {
        if let Some(value) = map.get_mut(field) {
            if let Value::Number(number) = value {
                if number.is_i64() || number.is_u64() {
                    *value = Value::String(number.to_string());
                }
            }
        }
    }
}

/// The size of `message` as compact JSON (`serde_json::to_string`), counted without
/// writing the text: lengths and escapes are summed (a serialisation into a counting
/// writer was a twentieth of the Segment batch route's CPU: `bench segment`).
fn compact_len(message: &Map<String, Value>) -> usize {
    object_len(message)
}

fn object_len(map: &Map<String, Value>) -> usize {
    let members: usize = map
        .iter()
        .map(|(key, value)| string_len(key) + 1 + value_len(value))
        .sum();
    2 + map.len().saturating_sub(1) + members
}

fn value_len(value: &Value) -> usize {
    match value {
        Value::Null => 4,
        Value::Bool(true) => 4,
        Value::Bool(false) => 5,
        Value::Number(number) => {
            struct Count(usize);
            impl std::fmt::Write for Count {
                fn write_str(&mut self, text: &str) -> std::fmt::Result {
                    self.0 += text.len();
                    Ok(())
                }
            }
            let mut count = Count(0);
            match std::fmt::write(&mut count, format_args!("{number}")) {
                Ok(()) => count.0,
                Err(_) => usize::MAX / 4,
            }
        }
        Value::String(text) => string_len(text),
        Value::Array(items) => {
            2 + items.len().saturating_sub(1) + items.iter().map(value_len).sum::<usize>()
        }
        Value::Object(map) => object_len(map),
    }
}

/// A string's length as `serde_json` writes it: quoted, `"` and `\` and the short
/// control escapes as two bytes, every other control character as `\u00XX`.
fn string_len(text: &str) -> usize {
    let escapes: usize = text
        .bytes()
        .map(|byte| match byte {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 1,
            0x00..=0x1f => 5,
            _ => 0,
        })
        .sum();
    2 + text.len() + escapes
}

/// The fingerprint of `content` without its transport fields, which are taken out for
/// the hash and put back (cheaper than hashing a copy: `bench segment`).
/// [`fingerprint_without_transport`], and the fingerprints the message had before its
/// sender added the `userId`: with `userId` `null` and without it, when the message has
/// both a `userId` and an `anonymousId` (none otherwise). analytics.js 2.0
/// (analytics-next) in its default delivery sets a message's `userId` as it sends each
/// attempt, not as the message is made: a message tracked anonymously, whose answer was
/// lost, is retried under the same `messageId` with the `userId` an `identify()` (a
/// sign-up, a log-in) set meanwhile. Met as a retry, not as a collision: the stored first
/// delivery is kept. A different `anonymousId`, or a `userId` that changed from one value
/// to another, still collides. The three come from one canonical writing of the message
/// and one pass of SHA-256 over what precedes `userId` (a review measured a message's
/// identification at 1.8 times its cost when each was written and hashed anew).
fn fingerprints_without_transport(
    content: &mut Value,
    fields: &Fields,
) -> (Fingerprint, Vec<Fingerprint>) {
    if fields.user_id.is_none() || fields.anonymous_id.is_none() {
        return (fingerprint_without_transport(content), Vec::new());
    }
    without_transport(content, |content| {
        let (bytes, span) = canonical::jcs_marking(content, "userId");
        let Some(span) = span else {
            return (
                Fingerprint::of_hasher(Sha256::new().chain_update(&bytes)),
                Vec::new(),
            );
        };
        let before = Sha256::new().chain_update(&bytes[..span.start]);
        let after = &bytes[span.end..];
        let own = before
            .clone()
            .chain_update(&bytes[span.clone()])
            .chain_update(after);
        let with_null = before
            .clone()
            .chain_update(b"\"userId\":null")
            .chain_update(after);
        // Without the member: its separating comma goes too (the one before it, or, when
        // it is the first member, the one after it).
        let without = if bytes[span.start - 1] == b',' {
            Sha256::new()
                .chain_update(&bytes[..span.start - 1])
                .chain_update(after)
        } else {
            before.chain_update(after.strip_prefix(b",").unwrap_or(after))
        };
        (
            Fingerprint::of_hasher(own),
            vec![
                Fingerprint::of_hasher(with_null),
                Fingerprint::of_hasher(without),
            ],
        )
    })
}

/// The fingerprints of the anonymous attempts (`userId` `null`, and absent) of a stored
/// message that carries both ids: [`fingerprints_without_transport`]'s alternates,
/// computed from the row's payload after undoing what [`stored_payload`] added (the
/// corrected `timestamp` and `receivedAt`; the client's `timestamp` back from
/// `originalTimestamp`). Empty for a payload without both ids, and for one whose undoing
/// does not give back the stored row's own fingerprint, `stored_fingerprint` (a row
/// stored before a client's own `originalTimestamp` was dropped from the payload): the
/// undone message would not be the one that was stored, and its forms could make a real
/// collision a duplicate.
pub(crate) fn anonymous_forms_of_stored(
    stored: &str,
    stored_fingerprint: &Fingerprint,
) -> Vec<Fingerprint> {
    // A stored message without a `userId` member gains nothing here: not parsed.
    if !stored.contains("\"userId\"") {
        return Vec::new();
    }
    let Ok(Value::Object(mut map)) = serde_json::from_str::<Value>(stored) else {
        return Vec::new();
    };
    let id = |field: &str| {
        map.get(field)
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .map(str::to_owned)
    };
    let (Some(user_id), Some(anonymous_id)) = (id("userId"), id("anonymousId")) else {
        return Vec::new();
    };
    map.remove("receivedAt");
    map.remove("timestamp");
    if let Some(original) = map.remove("originalTimestamp") {
        map.insert("timestamp".into(), original);
    }
    let fields = Fields {
        message_id: None,
        event: None,
        user_id: Some(user_id),
        anonymous_id: Some(anonymous_id),
        timestamp_us: None,
    };
    let (own, forms) = fingerprints_without_transport(&mut Value::Object(map), &fields);
    if own != *stored_fingerprint {
        return Vec::new();
    }
    forms
}

fn fingerprint_without_transport(content: &mut Value) -> Fingerprint {
    without_transport(content, Fingerprint::of)
}

/// `measure` of `content` with its [`TRANSPORT_POINTERS`] taken out, then put back.
fn without_transport<T>(content: &mut Value, measure: impl FnOnce(&Value) -> T) -> T {
    static POINTERS: OnceLock<Vec<Pointer>> = OnceLock::new();
    let pointers = POINTERS.get_or_init(|| {
        TRANSPORT_POINTERS
            .iter()
            .filter_map(|p| Pointer::parse(p).ok())
            .collect()
    });
    let removed: Vec<(&Pointer, Value)> = pointers
        .iter()
        .filter_map(|p| p.remove(content).map(|value| (p, value)))
        .collect();
    let measured = measure(content);
    for (pointer, value) in removed {
        put_back(content, pointer, value);
    }
    measured
}

/// Inserts `value` at `pointer`, whose parents are objects (they were: it was removed).
fn put_back(content: &mut Value, pointer: &Pointer, value: Value) {
    let Some((last, parents)) = pointer.tokens().split_last() else {
        return;
    };
    let mut current = content;
    for token in parents {
        let Some(next) = current.as_object_mut().and_then(|map| map.get_mut(token)) else {
            return;
        };
        current = next;
    }
    if let Some(map) = current.as_object_mut() {
        map.insert(last.clone(), value);
    }
}

/// Segment's clock-skew correction: with both the client's `timestamp` and `sentAt`,
/// `receivedAt - (sentAt - timestamp)`; with a `timestamp` alone, that timestamp; with
/// neither, `receivedAt`.
pub fn corrected_timestamp(
    received_at_us: i64,
    sent_at_us: Option<i64>,
    timestamp_us: Option<i64>,
) -> i64 {
    match (timestamp_us, sent_at_us) {
        (Some(at), Some(sent)) => received_at_us.saturating_sub(sent.saturating_sub(at)),
        (Some(at), None) => at,
        (None, _) => received_at_us,
    }
}

/// The fields the rules and the identity read.
#[cfg_attr(test, derive(Default))]
struct Fields {
    message_id: Option<String>,
    event: Option<String>,
    user_id: Option<String>,
    anonymous_id: Option<String>,
    timestamp_us: Option<i64>,
}

impl Fields {
    fn read(content: &Value, kind: MessageType) -> Result<Fields, SegmentError> {
        let message_id = bounded_id(content, "messageId", MESSAGE_ID_BYTES_MAX)?;
        let user_id = bounded_id(content, "userId", ID_BYTES_MAX)?;
        let anonymous_id = bounded_id(content, "anonymousId", ID_BYTES_MAX)?;
        let event = bounded_id(content, "event", ID_BYTES_MAX)?;
        for field in ["groupId", "previousId", "name", "category"] {
            bounded_id(content, field, ID_BYTES_MAX)?;
        }
        for field in ["properties", "traits", "context", "integrations"] {
            match content.get(field) {
                None | Some(Value::Null | Value::Object(_)) => {}
                Some(other) => {
                    return Err(SegmentError::WrongType {
                        field: field.to_string(),
                        expected: "a JSON object",
                        found: type_name(other),
                    })
                }
            }
        }
        let timestamp_us = optional_str(content, "timestamp")?
            .map(|text| timestamp("timestamp", &text))
            .transpose()?;
        let fields = Fields {
            message_id,
            event,
            user_id,
            anonymous_id,
            timestamp_us,
        };
        fields.check_required(content, kind)?;
        Ok(fields)
    }

    fn check_required(&self, content: &Value, kind: MessageType) -> Result<(), SegmentError> {
        let present = |field: &str| content.get(field).is_some_and(|v| !v.is_null());
        if self.user_id.is_none() && self.anonymous_id.is_none() && kind != MessageType::Alias {
            return Err(SegmentError::Missing {
                field: "userId",
                why: "every message needs a userId or an anonymousId",
            });
        }
        let required = match kind {
            MessageType::Track => Some(("event", "a track call names its event")),
            MessageType::Group => Some(("groupId", "a group call names its group")),
            MessageType::Alias if self.user_id.is_none() => {
                Some(("userId", "an alias call names the new userId"))
            }
            MessageType::Alias => Some(("previousId", "an alias call names the previousId")),
            _ => None,
        };
        match required {
            Some((field, why)) if !present(field) => Err(SegmentError::Missing { field, why }),
            _ => Ok(()),
        }
    }
}

/// The message's type: the route's, which a `type` in the body must agree with, else
/// the body's, which must be one of Segment's six.
fn message_type(
    content: &mut Value,
    route: Option<MessageType>,
) -> Result<MessageType, SegmentError> {
    let stated = optional_str(content, "type")?;
    let kind = match (route, stated.as_deref()) {
        (Some(route), None) => route,
        (Some(route), Some(text)) if text == route.as_str() => route,
        (Some(route), Some(text)) => {
            return Err(SegmentError::Invalid {
                field: "type".into(),
                reason: format!(
                    "{text:?} sent to the {} endpoint; send it to /v1/{text} or /v1/batch",
                    route.as_str()
                ),
            })
        }
        (None, None) => {
            return Err(SegmentError::Missing {
                field: "type",
                why: "a batch item names its type (track, identify, page, screen, group or alias)",
            })
        }
        (None, Some(text)) => MessageType::parse(text).ok_or_else(|| SegmentError::Invalid {
            field: "type".into(),
            reason: format!("{text:?} is not one of track, identify, page, screen, group, alias"),
        })?,
    };
    if let Value::Object(map) = content {
        map.insert("type".into(), kind.as_str().into());
    }
    Ok(kind)
}

/// The identity document the contract hashes: the source and `messageId`, or, without
/// one, the source and the semantic content.
fn projection(content: &Value, fields: &Fields, source: &str) -> Map<String, Value> {
    let mut projection = Map::new();
    projection.insert("source".into(), source.into());
    if let Some(id) = &fields.message_id {
        projection.insert("messageId".into(), id.clone().into());
        return projection;
    }
    for field in [
        "type",
        "event",
        "name",
        "category",
        "userId",
        "anonymousId",
        "groupId",
        "previousId",
        "properties",
        "traits",
    ] {
        if let Some(value) = content.get(field).filter(|v| !v.is_null()) {
            projection.insert(field.into(), value.clone());
        }
    }
    if let Some(at) = fields.timestamp_us {
        projection.insert("timestamp".into(), format_rfc3339_micros(at).into());
    }
    projection
}

/// Puts the batch's context under the message's: a key the message sets itself wins.
fn merge_context(
    content: &mut Value,
    batch: Option<&Map<String, Value>>,
) -> Result<(), SegmentError> {
    let (Some(batch), Value::Object(map)) = (batch, content) else {
        return Ok(());
    };
    let batch = canonical::normalize(&Value::Object(batch.clone()), "/context")?;
    let Value::Object(batch) = batch else {
        return Ok(());
    };
    let context = map
        .entry("context")
        .or_insert_with(|| Value::Object(Map::new()));
    if context.is_null() {
        *context = Value::Object(Map::new());
    }
    if let Value::Object(own) = context {
        for (key, value) in batch {
            own.entry(key).or_insert(value);
        }
    }
    Ok(())
}

fn stored_payload(content: Value, received_at_us: i64, corrected_us: i64) -> Value {
    let mut payload = content;
    if let Value::Object(map) = &mut payload {
        map.remove("writeKey");
        // The server's own: a client's `originalTimestamp` (transport) is not kept, not
        // even on a message without a `timestamp`, which has none.
        map.remove("originalTimestamp");
        if let Some(original) = map.remove("timestamp") {
            map.insert("originalTimestamp".into(), original);
        }
        map.insert(
            "timestamp".into(),
            format_rfc3339_micros(corrected_us).into(),
        );
        map.insert(
            "receivedAt".into(),
            format_rfc3339_micros(received_at_us).into(),
        );
    }
    payload
}

/// A string field, `None` when absent or `null`; any other type is an error.
fn optional_str(content: &Value, field: &str) -> Result<Option<String>, SegmentError> {
    match content.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(other) => Err(SegmentError::WrongType {
            field: field.to_string(),
            expected: "a string",
            found: type_name(other),
        }),
    }
}

/// An id-like string: non-empty (an empty one counts as absent), bounded, without NUL.
fn bounded_id(
    content: &Value,
    field: &str,
    bytes_max: usize,
) -> Result<Option<String>, SegmentError> {
    let Some(text) = optional_str(content, field)?.filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    let invalid = |reason: String| SegmentError::Invalid {
        field: field.to_string(),
        reason,
    };
    if text.len() > bytes_max {
        return Err(invalid(format!(
            "at most {bytes_max} bytes, got {}",
            text.len()
        )));
    }
    if text.contains('\0') {
        return Err(invalid("must not contain NUL (U+0000)".into()));
    }
    Ok(Some(text))
}

fn timestamp(field: &str, text: &str) -> Result<i64, SegmentError> {
    parse_rfc3339_micros(text)
        .or_else(|reason| {
            library_variant(text)
                .and_then(|fixed| parse_rfc3339_micros(&fixed).ok())
                .ok_or(reason)
        })
        .map_err(|reason| SegmentError::Invalid {
            field: field.to_string(),
            reason: format!("{text:?} is not an ISO-8601 (RFC 3339) date and time: {reason}"),
        })
}

/// The ISO 8601 forms Segment's libraries write that RFC 3339 refuses, rewritten as RFC
/// 3339: an offset without its colon (`+0100`, analytics-go v2's `%z`) and a local time
/// without any offset (analytics.NET's `DateTime.ToString("o")` of a time of unspecified
/// kind, `2024-05-01T10:00:00.0000000`), which is taken as UTC. `None` for anything
/// else: a date alone, a time without seconds, free text.
fn library_variant(text: &str) -> Option<String> {
    // `YYYY-MM-DDTHH:MM:SS`, then an optional fraction, then the zone.
    let head = text.get(..19)?;
    let shape = head.bytes().enumerate().all(|(at, byte)| match at {
        4 | 7 => byte == b'-',
        // Or a space, as RFC 3339 (section 5.6) allows and Python's `str(datetime)` writes.
        10 => matches!(byte, b'T' | b't' | b' '),
        13 | 16 => byte == b':',
        _ => byte.is_ascii_digit(),
    });
    if !shape {
        return None;
    }
    let rest = &text[19..];
    let fraction = match rest.strip_prefix('.') {
        Some(digits) => 1 + digits.bytes().take_while(u8::is_ascii_digit).count(),
        None => 0,
    };
    if fraction == 1 {
        return None;
    }
    let (time, zone) = text.split_at(19 + fraction);
    match zone.as_bytes() {
        [] => Some(format!("{time}Z")),
        [sign @ (b'+' | b'-'), hours @ ..]
            if hours.len() == 4 && hours.iter().all(u8::is_ascii_digit) =>
        {
            Some(format!(
                "{time}{}{}:{}",
                char::from(*sign),
                &zone[1..3],
                &zone[3..5]
            ))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The libraries' ISO 8601 forms read as RFC 3339 would read them; a date and time
    /// separated by a space without an offset too (taken as UTC, as with a `T`).
    #[test]
    fn library_timestamps_are_read_with_a_t_or_a_space() {
        let utc = timestamp("timestamp", "2026-12-01T10:00:00Z").expect("RFC 3339");
        for text in [
            "2026-12-01T10:00:00",
            "2026-12-01 10:00:00",
            "2026-12-01 10:00:00.000000",
            "2026-12-01 10:00:00Z",
            "2026-12-01 11:00:00+0100",
        ] {
            assert_eq!(timestamp("timestamp", text).ok(), Some(utc), "{text}");
        }
        for text in ["2026-12-01", "2026-12-01 10:00", "2026-12-01_10:00:00"] {
            assert!(timestamp("timestamp", text).is_err(), "{text}");
        }
    }

    /// The three fingerprints written and hashed once equal each written and hashed
    /// anew: the message's own, with `userId` `null`, and without `userId`; whatever the
    /// members around it (none after it, a key sorting after it, transport fields, keys
    /// beyond ASCII), and none for a message without both ids.
    #[test]
    fn fingerprints_without_the_user_are_those_of_the_message_without_it() {
        let messages = [
            json!({"anonymousId": "a", "userId": "u", "event": "E", "sentAt": "x"}),
            json!({"anonymousId": "a", "userId": "u\"q", "zeta": 1, "\u{e9}": {"userId": 2},
                   "_metadata": {"retryCount": 1}, "context": {"library": {"name": "n"}, "ip": "1"}}),
            json!({"anonymousId": "a", "userId": "u", "\u{ff61}": [1, 2], "\u{10000}": null}),
        ];
        for message in messages {
            let fields = Fields {
                user_id: message["userId"].as_str().map(str::to_owned),
                anonymous_id: message["anonymousId"].as_str().map(str::to_owned),
                ..Fields::default()
            };
            let mut content = message.clone();
            let (own, retry_of) = fingerprints_without_transport(&mut content, &fields);
            assert_eq!(content, message, "put back as it was");
            let anew = |edit: &dyn Fn(&mut Value)| {
                let mut edited = message.clone();
                edit(&mut edited);
                fingerprint_without_transport(&mut edited)
            };
            assert_eq!(own, anew(&|_| {}), "{message}");
            let null = anew(&|m| m["userId"] = Value::Null);
            let absent = anew(&|m| {
                m.as_object_mut().map(|m| m.remove("userId"));
            });
            assert_eq!(retry_of, vec![null, absent], "{message}");
        }
        let anonymous = Fields {
            anonymous_id: Some("a".into()),
            ..Fields::default()
        };
        let mut content = json!({"anonymousId": "a", "userId": null});
        assert!(fingerprints_without_transport(&mut content, &anonymous)
            .1
            .is_empty());
    }

    /// From the stored payload of a message with both ids (its client `timestamp` and
    /// without, context merged from the batch), the fingerprints of its anonymous
    /// attempts (`userId` `null`, and absent) as identified when they arrive; none for a
    /// stored message that is anonymous itself.
    #[test]
    fn the_anonymous_forms_of_a_stored_message_are_those_its_anonymous_attempts_have() {
        let context = json!({"ip": "10.0.0.1"});
        let context = context.as_object();
        let envelope = |received_at_us: i64| Envelope {
            source: "src_1",
            received_at_us,
            route_type: None,
            sent_at: Some("2026-12-06T17:00:01Z"),
            context,
        };
        for timestamp in [Some("2026-12-06T17:00:00.000Z"), None] {
            let mut message = json!({"type": "track", "messageId": "m", "event": "E",
                "anonymousId": "a", "userId": "u", "properties": {"n": 1.5},
                "sentAt": "2026-12-06T17:00:03Z", "writeKey": "k", "_metadata": {"r": 1}});
            if let Some(timestamp) = timestamp {
                message["timestamp"] = json!(timestamp);
            }
            let stored =
                identify_message(&message, &envelope(1_796_000_000_000_000)).expect("valid");
            let payload = stored.payload.to_string();
            let own = &stored.identified.fingerprint;
            let forms = anonymous_forms_of_stored(&payload, own);
            assert_eq!(forms.len(), 2, "{timestamp:?}");
            let mut null = message.clone();
            null["userId"] = Value::Null;
            let mut absent = message.clone();
            absent.as_object_mut().map(|m| m.remove("userId"));
            for anonymous in [null, absent] {
                let early =
                    identify_message(&anonymous, &envelope(1_795_000_000_000_000)).expect("valid");
                assert!(early.identified.may_precede_identify);
                assert!(early.identified.is_earlier_attempt_of(&payload, own));
            }
            let mut other = message.clone();
            other["userId"] = Value::Null;
            other["properties"]["n"] = json!(2);
            let other = identify_message(&other, &envelope(1)).expect("valid");
            assert!(!other.identified.is_earlier_attempt_of(&payload, own));
            // A payload that does not undo to the stored message (its fingerprint
            // differs: a client's own `originalTimestamp`) gives no forms.
            assert!(anonymous_forms_of_stored(&payload, &other.identified.fingerprint).is_empty());
            assert!(!stored.identified.may_precede_identify);
            let anonymous =
                identify_message(&message_without_user(&message), &envelope(1)).expect("valid");
            assert!(anonymous_forms_of_stored(
                &anonymous.payload.to_string(),
                &anonymous.identified.fingerprint
            )
            .is_empty());
        }
    }

    fn message_without_user(message: &Value) -> Value {
        let mut message = message.clone();
        message["userId"] = Value::Null;
        message
    }

    /// A message that is not an object is refused as a whole: no field, and a message a
    /// person can read (it began with a blank where the field's name goes).
    #[test]
    fn a_message_that_is_not_an_object_is_named_as_the_message() {
        let err = SegmentError::WrongType {
            field: String::new(),
            expected: "a JSON object (a Segment message)",
            found: "number",
        };
        assert_eq!(err.field(), "");
        assert_eq!(
            err.to_string(),
            "the message must be a JSON object (a Segment message), got number"
        );
    }

    #[test]
    fn the_counted_size_is_the_compact_text_size() {
        let controls: String = (0u8..0x20).map(char::from).collect();
        let documents = [
            json!({}),
            json!({"a": null, "b": true, "c": false, "d": [], "e": {}}),
            json!({"n": [0, -1, 18_446_744_073_709_551_615u64, -9_223_372_036_854_775_808i64, 1.5, -0.25, 1e300, 5e-324, 123_456.789]}),
            json!({"s": controls, "q": "\"quoted\" \\ back\u{7f}", "u": "é 日本 🎉"}),
            json!({"nested": {"deep": [{"x": [1, [2, [3, {"y": "z"}]]]}]}, "k\n\"": "v"}),
        ];
        for document in documents {
            let Value::Object(map) = &document else {
                unreachable!("every document is an object")
            };
            assert_eq!(
                compact_len(map),
                serde_json::to_string(&document).expect("serialises").len(),
                "{document}"
            );
        }
    }
}

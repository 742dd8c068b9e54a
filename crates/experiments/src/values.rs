//! The validated values an experiment request is made of: campaign keys, arm keys and
//! metric names, unit ids, dedupe keys, weights, windows, outcome values and event times.
//!
//! Each is a newtype with a private field whose constructor (`TryFrom`) enforces its rule
//! once, so code holding one never checks it again; each deserialises through that
//! constructor, so the server parses a request body straight into them. The rules bound
//! every string a B-tree index keys on well below PostgreSQL's 2,704-byte entry limit,
//! and refuse NUL (U+0000), which PostgreSQL's `text` cannot hold, so both backends
//! accept and refuse the same values.

use std::fmt;

use serde::de::{self, Deserializer, Unexpected, Visitor};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::MetricKind;

/// The NUL rule, as error messages state it.
pub const NUL_RULE: &str = "text may not contain the NUL character (U+0000)";

/// Why a value breaks its type's rule. The messages are predicates without a subject
/// ("must be …", "is invalid: …"): the caller names the field in front of them.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RuleError {
    /// The text holds U+0000 (checked before any other rule, so the answer says why).
    #[error("is invalid: {NUL_RULE}")]
    Nul,
    /// The value breaks the rule stated by the type's `RULE` (length, charset, range).
    #[error("must be {0}")]
    Broken(&'static str),
    /// An event time that is not RFC 3339 with an offset; the parser's reason is kept.
    #[error("must be an RFC 3339 timestamp with an offset: {0}")]
    Timestamp(String),
}

/// Checks `text` against NUL first, then against `ok`, the type's own rule.
fn check(text: &str, rule: &'static str, ok: fn(&str) -> bool) -> Result<(), RuleError> {
    if text.contains('\0') {
        return Err(RuleError::Nul);
    }
    if !ok(text) {
        return Err(RuleError::Broken(rule));
    }
    Ok(())
}

/// The rule of every key and name the tenant picks for its campaigns.
const IDENTIFIER_RULE: &str = "1-128 characters of A-Z a-z 0-9 _ . -";

fn is_identifier(text: &str) -> bool {
    (1..=128).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
}

/// A text newtype: private field, `TryFrom<String>` enforcing `$ok` (after the NUL rule),
/// deserialised through it, read with `as_str` / `into_string`.
macro_rules! text_value {
    ($(#[$doc:meta])* $name:ident, $rule:expr, $ok:expr) => {
        text_value!($(#[$doc])* $name, $rule, $ok, |text: String| text);
    };
    // `$prepare` turns a client's text into the value's form before the rule is checked.
    ($(#[$doc:meta])* $name:ident, $rule:expr, $ok:expr, $prepare:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String")]
        pub struct $name(String);

        impl $name {
            /// The rule, as error messages state it.
            pub const RULE: &'static str = $rule;

            /// The text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The text, owned.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = RuleError;

            fn try_from(text: String) -> Result<Self, RuleError> {
                let text = $prepare(text);
                check(&text, $rule, $ok)?;
                Ok($name(text))
            }
        }

        impl TryFrom<&str> for $name {
            type Error = RuleError;

            fn try_from(text: &str) -> Result<Self, RuleError> {
                $name::try_from(text.to_string())
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

text_value!(
    /// A campaign's key, chosen by the tenant and unique per tenant: [`CampaignKey::RULE`].
    CampaignKey,
    IDENTIFIER_RULE,
    is_identifier
);

text_value!(
    /// An arm's key, unique within its campaign: [`ArmKey::RULE`].
    ArmKey,
    IDENTIFIER_RULE,
    is_identifier
);

text_value!(
    /// A metric's name, unique within its campaign: [`MetricName::RULE`].
    MetricName,
    IDENTIFIER_RULE,
    is_identifier
);

text_value!(
    /// The id of a unit (a user, a device) being assigned: 1-256 bytes, any characters
    /// but NUL (ids come from the tenant's systems, in any script).
    UnitId,
    "a string of 1-256 bytes",
    |text| (1..=256).contains(&text.len())
);

text_value!(
    /// The client's key for one business event, unique per assignment: 1-512 characters
    /// but NUL (`docs/experiments.md`, "Choosing a dedupe_key"), in Unicode NFC as every
    /// string of an event's identity is, so a key typed on one system and its decomposed
    /// spelling from another (`cafe\u{301}` for `café`) name one outcome.
    DedupeKey,
    "a string of 1-512 characters",
    dedupe_key_fits,
    |text: String| traqlyte_identity::canonical::nfc(&text)
);

fn dedupe_key_fits(text: &str) -> bool {
    !text.is_empty() && text.chars().count() <= 512
}

impl DedupeKey {
    /// A key read back from a stored outcome, kept byte for byte: an outcome stored
    /// before keys were normalised keeps the key (and so the id) it was stored under.
    pub fn stored(text: &str) -> Result<DedupeKey, RuleError> {
        check(text, DedupeKey::RULE, dedupe_key_fits)?;
        Ok(DedupeKey(text.to_owned()))
    }
}

/// Whether `text` is `prefix` followed by a number of lowercase hex digits in `digits`.
fn is_prefixed_hex(text: &str, prefix: &str, digits: std::ops::RangeInclusive<usize>) -> bool {
    text.strip_prefix(prefix).is_some_and(|hex| {
        digits.contains(&hex.len())
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

text_value!(
    /// A campaign's id: `cmp_` and lowercase hex digits, [`CampaignId::RULE`]. The store
    /// mints 16 digits ([`CampaignId::from_random`]); shorter ones are accepted so the
    /// frozen fixtures (`cmp_1`) keep their meaning.
    CampaignId,
    "cmp_ followed by 1-64 lowercase hex digits",
    |text| is_prefixed_hex(text, "cmp_", 1..=64)
);

text_value!(
    /// An assignment's id: `asg_` and the 32 lowercase hex digits
    /// [`crate::bucketing::assignment_id`] derives from the campaign and the unit.
    AssignmentId,
    "asg_ followed by 32 lowercase hex digits",
    |text| is_prefixed_hex(text, "asg_", 32..=32)
);

text_value!(
    /// A stored outcome's id: `out_` and the 32 lowercase hex digits
    /// [`crate::outcome_id`] derives from the tenant, campaign, assignment and dedupe key,
    /// so every delivery of an outcome is answered with the same id.
    OutcomeId,
    "out_ followed by 32 lowercase hex digits",
    |text| is_prefixed_hex(text, "out_", 32..=32)
);

impl OutcomeId {
    /// The id made of `digest`'s first 16 bytes (see [`crate::outcome_id`]).
    pub(crate) fn from_digest(digest: &[u8]) -> OutcomeId {
        OutcomeId(format!("out_{}", hex(&digest[..16])))
    }
}

impl CampaignId {
    /// A new campaign's id from 8 random bytes (the caller's random source: this crate
    /// does no I/O).
    pub fn from_random(bytes: [u8; 8]) -> CampaignId {
        CampaignId(format!("cmp_{}", hex(&bytes)))
    }
}

impl AssignmentId {
    /// The id made of `digest`'s first 16 bytes (see [`crate::bucketing::assignment_id`]).
    pub(crate) fn from_digest(digest: &[u8]) -> AssignmentId {
        AssignmentId(format!("asg_{}", hex(&digest[..16])))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

text_value!(
    /// A campaign's name for people: 1-256 characters, compared and stored trimmed, with
    /// no control characters and no invisible ones ([`traqlyte_identity::canonical::invisible`]:
    /// a right-to-left override would make the name, and the page around it, read as
    /// something else on the campaign pages, as tenant and source names cannot).
    CampaignName,
    "a string of 1-256 characters, not only spaces, without control characters or invisible ones (bidirectional controls, zero-width characters, spaces other than U+0020)",
    |text| {
        let name = text.trim();
        !name.is_empty()
            && name.chars().count() <= 256
            && !name
                .chars()
                .any(|c| c.is_control() || traqlyte_identity::canonical::invisible(c))
    }
);

text_value!(
    /// The publisher's note on a version: at most 2,000 characters.
    VersionNote,
    "a string of at most 2000 characters",
    |text| text.chars().count() <= 2_000
);

impl CampaignName {
    /// The name without surrounding whitespace, as it is stored.
    pub fn trimmed(&self) -> &str {
        self.0.trim()
    }
}

impl MetricKind {
    /// The rule of [`MetricKind::parse`], as error messages state it.
    pub const RULE: &'static str = "one of conversion, count, sum";

    /// The kind named `text` (its JSON spelling).
    pub fn parse(text: &str) -> Result<MetricKind, RuleError> {
        match text {
            "conversion" => Ok(MetricKind::Conversion),
            "count" => Ok(MetricKind::Count),
            "sum" => Ok(MetricKind::Sum),
            _ if text.contains('\0') => Err(RuleError::Nul),
            _ => Err(RuleError::Broken(Self::RULE)),
        }
    }
}

/// An integer newtype within `MIN..=MAX`, deserialised from a JSON integer only (`1.0`
/// is refused, as it always was), with `RULE` as what serde says it expected.
macro_rules! integer_value {
    ($(#[$doc:meta])* $name:ident, $min:expr, $max:expr, $rule:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $name(u32);

        impl $name {
            /// The smallest value.
            pub const MIN: u32 = $min;
            /// The largest value.
            pub const MAX: u32 = $max;
            /// The rule, as error messages state it.
            pub const RULE: &'static str = $rule;

            /// The value.
            pub fn get(self) -> u32 {
                self.0
            }
        }

        impl TryFrom<u64> for $name {
            type Error = RuleError;

            fn try_from(n: u64) -> Result<Self, RuleError> {
                u32::try_from(n)
                    .ok()
                    .filter(|n| (Self::MIN..=Self::MAX).contains(n))
                    .map($name)
                    .ok_or(RuleError::Broken(Self::RULE))
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct Expect;

                impl Visitor<'_> for Expect {
                    type Value = $name;

                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($rule)
                    }

                    fn visit_u64<E: de::Error>(self, n: u64) -> Result<$name, E> {
                        $name::try_from(n)
                            .map_err(|_| E::invalid_value(Unexpected::Unsigned(n), &self))
                    }

                    fn visit_i64<E: de::Error>(self, n: i64) -> Result<$name, E> {
                        u64::try_from(n)
                            .ok()
                            .and_then(|n| $name::try_from(n).ok())
                            .ok_or_else(|| E::invalid_value(Unexpected::Signed(n), &self))
                    }
                }

                deserializer.deserialize_u64(Expect)
            }
        }
    };
}

integer_value!(
    /// An arm's share of the units, relative to the other arms' weights.
    Weight,
    1,
    1_000_000,
    "an integer from 1 to 1000000"
);

integer_value!(
    /// How many hours after a unit's assignment its outcomes count (at most a leap year).
    WindowHours,
    1,
    24 * 366,
    "an integer from 1 to 8784"
);

/// An outcome's value: finite and within ±[`OutcomeValue::ABS_MAX`], the bound that keeps
/// every per-unit and per-arm sum finite on both backends (`docs/experiments.md`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OutcomeValue(f64);

impl OutcomeValue {
    /// The largest magnitude accepted; equal to the store's `OUTCOME_VALUE_ABS_MAX`.
    pub const ABS_MAX: f64 = 1e15;
    /// The rule, as error messages state it.
    pub const RULE: &'static str = "a number from -1e15 to 1e15";

    /// The value.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl TryFrom<f64> for OutcomeValue {
    type Error = RuleError;

    fn try_from(value: f64) -> Result<Self, RuleError> {
        if value.is_finite() && value.abs() <= Self::ABS_MAX {
            // -0 is 0: one fingerprint already, and SQLite stores it as 0, so a retry's
            // answer (read back from the row) would otherwise differ from the first.
            Ok(OutcomeValue(if value == 0.0 { 0.0 } else { value }))
        } else {
            Err(RuleError::Broken(Self::RULE))
        }
    }
}

impl<'de> Deserialize<'de> for OutcomeValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Expect;

        impl Visitor<'_> for Expect {
            type Value = OutcomeValue;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(OutcomeValue::RULE)
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<OutcomeValue, E> {
                OutcomeValue::try_from(v).map_err(|_| E::invalid_value(Unexpected::Float(v), &self))
            }

            // The strict reader accepts an integer beyond 2^53 only when a double holds it
            // exactly, so these conversions are exact.
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<OutcomeValue, E> {
                OutcomeValue::try_from(v as f64)
                    .map_err(|_| E::invalid_value(Unexpected::Unsigned(v), &self))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<OutcomeValue, E> {
                OutcomeValue::try_from(v as f64)
                    .map_err(|_| E::invalid_value(Unexpected::Signed(v), &self))
            }
        }

        deserializer.deserialize_f64(Expect)
    }
}

/// When an outcome happened, microseconds since the epoch, parsed from RFC 3339 with an
/// offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct OccurredAt(i64);

impl OccurredAt {
    /// Microseconds since the epoch.
    pub fn micros(self) -> i64 {
        self.0
    }
}

impl TryFrom<String> for OccurredAt {
    type Error = RuleError;

    fn try_from(text: String) -> Result<Self, RuleError> {
        if text.contains('\0') {
            return Err(RuleError::Nul);
        }
        traqlyte_identity::parse_rfc3339_micros(&text)
            .map(OccurredAt)
            .map_err(RuleError::Timestamp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broken(rule: &'static str) -> Result<(), RuleError> {
        Err(RuleError::Broken(rule))
    }

    #[test]
    fn a_dedupe_key_is_read_in_nfc_from_clients_and_kept_as_stored() {
        let composed = DedupeKey::try_from("prod:caf\u{e9}:o1").expect("a key");
        let decomposed = DedupeKey::try_from("prod:cafe\u{301}:o1").expect("a key");
        assert_eq!(decomposed, composed);
        assert_eq!(decomposed.as_str(), "prod:caf\u{e9}:o1");
        let stored = DedupeKey::stored("prod:cafe\u{301}:o1").expect("a stored key");
        assert_eq!(
            stored.as_str(),
            "prod:cafe\u{301}:o1",
            "a stored key keeps its bytes"
        );
        assert_eq!(
            DedupeKey::stored("").err(),
            Some(RuleError::Broken(DedupeKey::RULE))
        );
    }

    #[test]
    fn text_values_enforce_their_rules() {
        let long = |n: usize, c: char| c.to_string().repeat(n);
        let ident = IDENTIFIER_RULE;
        let cases: Vec<(&str, String, Result<(), RuleError>)> = vec![
            ("campaign key", "checkout-v2_1.a".into(), Ok(())),
            ("campaign key", long(128, 'k'), Ok(())),
            ("campaign key", long(129, 'k'), broken(ident)),
            ("campaign key", String::new(), broken(ident)),
            ("campaign key", "has space".into(), broken(ident)),
            ("campaign key", "caf\u{e9}".into(), broken(ident)),
            ("campaign key", "a\u{0}b".into(), Err(RuleError::Nul)),
            ("unit id", long(256, 'u'), Ok(())),
            ("unit id", long(64, '\u{10000}'), Ok(())),
            ("unit id", long(65, '\u{10000}'), broken(UnitId::RULE)),
            ("unit id", String::new(), broken(UnitId::RULE)),
            ("unit id", "u\u{0}".into(), Err(RuleError::Nul)),
            ("dedupe key", long(512, '\u{10000}'), Ok(())),
            ("dedupe key", long(513, 'k'), broken(DedupeKey::RULE)),
            ("dedupe key", String::new(), broken(DedupeKey::RULE)),
            ("dedupe key", "\u{0}".into(), Err(RuleError::Nul)),
            ("campaign name", "  Checkout  ".into(), Ok(())),
            ("campaign name", "   ".into(), broken(CampaignName::RULE)),
            ("campaign name", long(256, '\u{e9}'), Ok(())),
            ("campaign name", long(257, 'n'), broken(CampaignName::RULE)),
            ("campaign name", "Check\u{0}out".into(), Err(RuleError::Nul)),
            (
                "campaign name",
                "Check\u{202E}tuo".into(),
                broken(CampaignName::RULE),
            ),
            (
                "campaign name",
                "Check\u{200B}out".into(),
                broken(CampaignName::RULE),
            ),
            (
                "campaign name",
                "Check\nout".into(),
                broken(CampaignName::RULE),
            ),
            (
                "campaign name",
                "Check\u{A0}out".into(),
                broken(CampaignName::RULE),
            ),
            (
                "campaign name",
                "\u{5D1}\u{5D3}\u{5D9}\u{5E7}\u{5D4} 2".into(),
                Ok(()),
            ),
            ("note", String::new(), Ok(())),
            ("note", long(2_000, 'n'), Ok(())),
            ("note", long(2_001, 'n'), broken(VersionNote::RULE)),
            ("note", "\u{0}".into(), Err(RuleError::Nul)),
            ("campaign id", "cmp_0123456789abcdef".into(), Ok(())),
            ("campaign id", "cmp_1".into(), Ok(())),
            ("campaign id", format!("cmp_{}", long(64, 'a')), Ok(())),
            (
                "campaign id",
                format!("cmp_{}", long(65, 'a')),
                broken(CampaignId::RULE),
            ),
            ("campaign id", "cmp_".into(), broken(CampaignId::RULE)),
            ("campaign id", "cmp_ABCDEF".into(), broken(CampaignId::RULE)),
            ("campaign id", "nope".into(), broken(CampaignId::RULE)),
            ("campaign id", "cmp_\u{0}".into(), Err(RuleError::Nul)),
            ("assignment id", format!("asg_{}", long(32, 'f')), Ok(())),
            (
                "assignment id",
                format!("asg_{}", long(31, 'f')),
                broken(AssignmentId::RULE),
            ),
            (
                "assignment id",
                "asg_missing".into(),
                broken(AssignmentId::RULE),
            ),
        ];
        for (what, text, expected) in cases {
            let got = match what {
                "campaign key" => CampaignKey::try_from(text.as_str()).map(drop),
                "unit id" => UnitId::try_from(text.as_str()).map(drop),
                "dedupe key" => DedupeKey::try_from(text.as_str()).map(drop),
                "campaign name" => CampaignName::try_from(text.as_str()).map(drop),
                "campaign id" => CampaignId::try_from(text.as_str()).map(drop),
                "assignment id" => AssignmentId::try_from(text.as_str()).map(drop),
                _ => VersionNote::try_from(text.as_str()).map(drop),
            };
            assert_eq!(got, expected, "{what} {text:?}");
        }
        for text in ["a", "treatment"] {
            assert_eq!(
                ArmKey::try_from(text).map(|k| k.into_string()),
                Ok(text.into())
            );
            assert!(MetricName::try_from(text).is_ok());
        }
        assert_eq!(
            CampaignId::from_random([0, 1, 2, 3, 0xfc, 0xfd, 0xfe, 0xff]).as_str(),
            "cmp_00010203fcfdfeff"
        );
        let name = CampaignName::try_from("  Checkout ").expect("name");
        assert_eq!(name.trimmed(), "Checkout");
    }

    #[test]
    fn numbers_are_integers_in_range_and_values_are_bounded() {
        let json = |text: &str| serde_json::from_str::<serde_json::Value>(text).expect("json");
        let cases = [
            ("1", Some(1), Some(1)),
            ("1000000", Some(1_000_000), None),
            ("8784", Some(8784), Some(8784)),
            ("8785", Some(8785), None),
            ("1000001", None, None),
            ("0", None, None),
            ("-1", None, None),
            ("1.0", None, None),
            ("\"3\"", None, None),
            ("null", None, None),
        ];
        for (text, weight, window) in cases {
            let w = serde_json::from_value::<Weight>(json(text))
                .ok()
                .map(Weight::get);
            let h = serde_json::from_value::<WindowHours>(json(text))
                .ok()
                .map(WindowHours::get);
            assert_eq!((w, h), (weight, window), "{text}");
        }
        let err = serde_json::from_value::<Weight>(json("0")).expect_err("0");
        assert!(err.to_string().ends_with(Weight::RULE), "{err}");
        let values = [
            ("1e15", Some(1e15)),
            ("-1e15", Some(-1e15)),
            ("12", Some(12.0)),
            ("-3", Some(-3.0)),
            ("0.5", Some(0.5)),
            ("1.0000000000001e15", None),
            ("-2e15", None),
            ("1.7e308", None),
            ("\"12\"", None),
        ];
        for (text, expected) in values {
            let got = serde_json::from_value::<OutcomeValue>(json(text)).ok();
            assert_eq!(got.map(OutcomeValue::get), expected, "{text}");
        }
        assert_eq!(
            OutcomeValue::try_from(f64::NAN),
            Err(RuleError::Broken(OutcomeValue::RULE))
        );
        // The rules state the bounds the constructors enforce.
        let rule = |min: u32, max: u32| format!("an integer from {min} to {max}");
        assert_eq!(Weight::RULE, rule(Weight::MIN, Weight::MAX));
        assert_eq!(WindowHours::RULE, rule(WindowHours::MIN, WindowHours::MAX));
        assert_eq!(
            OutcomeValue::RULE,
            format!("a number from -{0:e} to {0:e}", OutcomeValue::ABS_MAX)
        );
    }

    #[test]
    fn kinds_and_event_times_parse_or_say_why() {
        assert_eq!(MetricKind::parse("sum"), Ok(MetricKind::Sum));
        assert_eq!(
            MetricKind::parse("Sum"),
            Err(RuleError::Broken(MetricKind::RULE))
        );
        assert_eq!(MetricKind::parse("sum\u{0}"), Err(RuleError::Nul));
        let at = OccurredAt::try_from("2026-11-29T10:00:00.5+01:00".to_string()).expect("time");
        assert_eq!(at.micros(), 1_795_942_800_500_000);
        assert!(matches!(
            OccurredAt::try_from("yesterday".to_string()),
            Err(RuleError::Timestamp(_))
        ));
        assert_eq!(
            OccurredAt::try_from("\u{0}".to_string()),
            Err(RuleError::Nul)
        );
        assert_eq!(
            RuleError::Nul.to_string(),
            format!("is invalid: {NUL_RULE}")
        );
    }
}

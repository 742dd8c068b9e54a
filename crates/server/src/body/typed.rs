//! Request bodies as serde types. A route reads its body strictly ([`super::read_document`]:
//! UTF-8, depth, duplicate keys, NaN, exact numbers), then deserialises the parsed value
//! into its request type, whose fields are domain newtypes that enforce their own rules.
//! [`parse`] turns any failure into a [`Refusal`] naming the field the way the API
//! spells it everywhere (`name`, `arms[1].key`) with a message for people, whichever
//! layer refused: serde (a wrong JSON type, an unknown or missing field) or a newtype's
//! rule (length, charset, range, NUL).

use serde::de::{DeserializeOwned, Deserializer, Visitor};
use serde::{forward_to_deserialize_any, Deserialize};
use serde_json::Value;
use serde_path_to_error::{Path, Segment, Track};
use traqlyte_experiments::RuleError;

use crate::ApiError;

/// Why a body is not a valid request: the field (`""` for the body itself) and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The field, spelled as the API names fields: `key`, `arms[1].key`.
    pub(crate) field: String,
    /// What is wrong, for people.
    pub(crate) message: String,
}

impl Refusal {
    /// The route's `422 code` naming the field.
    pub(crate) fn unprocessable(self, code: &'static str) -> ApiError {
        ApiError::unprocessable(code, self.message).with_field(self.field)
    }
}

/// Deserialises `value` as the request type `T` (a struct: only a JSON object is one),
/// or says which field is wrong and why.
pub(crate) fn parse<'de, T: Deserialize<'de>>(value: &'de Value) -> Result<T, Refusal> {
    tracked(value)
}

/// [`parse`] of a value the caller gives up: its parts move into `T` instead of being
/// copied (a Segment batch's messages, up to 500 KB, were deep-copied by [`parse`] and
/// the copy dropped with the original).
pub(crate) fn parse_owned<T: DeserializeOwned>(value: Value) -> Result<T, Refusal> {
    tracked(value)
}

/// `T` from `value` (a borrowed or an owned `Value`), with the path of the field that fails.
fn tracked<'de, D: Deserializer<'de>, T: Deserialize<'de>>(value: D) -> Result<T, Refusal> {
    let mut track = Track::new();
    let tracked = serde_path_to_error::Deserializer::new(value, &mut track);
    T::deserialize(ObjectOnly(tracked)).map_err(|err| refusal(&track.path(), &err.to_string()))
}

/// A list of request objects (`arms`, `metrics`): a JSON array whose items are objects.
#[derive(Debug)]
pub(crate) struct Objects<T>(pub(crate) Vec<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Objects<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// One item, read as an object only.
        struct Item<T>(T);

        impl<'de, T: Deserialize<'de>> Deserialize<'de> for Item<T> {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                T::deserialize(ObjectOnly(deserializer)).map(Item)
            }
        }

        let items = Vec::<Item<T>>::deserialize(deserializer)?;
        Ok(Objects(items.into_iter().map(|Item(item)| item).collect()))
    }
}

/// Reads a derived struct from a JSON object only. Serde's derive also accepts a JSON
/// array, filling fields by position (`["c1", "u1"]` as `{"campaign_id","unit_id"}`),
/// which would let a body skip its field names and `deny_unknown_fields`; asking the
/// inner deserializer for a map instead refuses an array with the struct's `expecting`.
/// Only the struct itself is affected: its fields are read by the inner deserializer,
/// which keeps tracking the path.
struct ObjectOnly<D>(D);

impl<'de, D: Deserializer<'de>> Deserializer<'de> for ObjectOnly<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(visitor)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_map(visitor)
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
        byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
        identifier ignored_any
    }
}

/// An id the client names so the server can look something up (`campaign_id`,
/// `assignment_id`): a non-empty string without NUL, which a lookup could not even bind
/// on PostgreSQL. Whether it names anything is the lookup's answer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub(crate) struct Id(String);

impl Id {
    /// The id.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Id {
    type Error = RuleError;

    fn try_from(text: String) -> Result<Self, RuleError> {
        if text.contains('\0') {
            return Err(RuleError::Nul);
        }
        if text.is_empty() {
            return Err(RuleError::Broken("a non-empty string"));
        }
        Ok(Id(text))
    }
}

/// The refusal for serde's `message` at `path`. Serde's own messages (unknown, missing
/// or mistyped fields) are reworded in the API's terms; the newtypes' messages are
/// predicates ("must be …", "is invalid: …") that get the field in front.
fn refusal(path: &Path, message: &str) -> Refusal {
    let field = spelled(path);
    if let Some(name) = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.strip_suffix('`'))
    {
        // Serde reports a missing field at the object that lacks it.
        let field = join(&field, name);
        return Refusal {
            message: format!("`{field}` is required"),
            field,
        };
    }
    let message = if message.starts_with("unknown field `") {
        // "unknown field `x`, expected one of `a`, `b`, `c`" (two: "`a` or `b`"): the key
        // is the path's last segment; what serde expected lists the allowed fields.
        match message.rsplit_once("`, expected ") {
            Some((_, allowed)) => format!(
                "unknown field `{field}`; allowed: {}",
                allowed
                    .trim_start_matches("one of ")
                    .replace("` or `", "`, `")
                    .replace('`', "")
            ),
            None => format!("unknown field `{field}`"),
        }
    } else if message.starts_with("invalid type: ") || message.starts_with("invalid value: ") {
        // "invalid type: string \"…\", expected a sequence": only the expectation is
        // kept, so a client's long string is never echoed back.
        let expected = message
            .rsplit_once(", expected ")
            .map_or("valid", |(_, e)| e);
        let expected = json_terms(expected);
        if field.is_empty() {
            format!("the body must be {expected}")
        } else {
            format!("`{field}` must be {expected}")
        }
    } else if field.is_empty() {
        message.to_string()
    } else {
        format!("`{field}` {message}")
    };
    Refusal { field, message }
}

/// Serde's names for what it expected, in JSON's terms.
fn json_terms(expected: &str) -> &str {
    match expected {
        "a sequence" => "an array",
        "a map" => "an object",
        other => other,
    }
}

/// `path` spelled as the API names fields: object keys joined by `.`, array items as
/// `[index]` (`arms[1].key`); the body itself is `""`.
fn spelled(path: &Path) -> String {
    let mut field = String::new();
    for segment in path {
        match segment {
            Segment::Seq { index } => field.push_str(&format!("[{index}]")),
            Segment::Map { key } => field = join(&field, key),
            Segment::Enum { variant } => field = join(&field, variant),
            Segment::Unknown => {}
        }
    }
    field
}

fn join(head: &str, key: &str) -> String {
    if head.is_empty() {
        key.to_string()
    } else {
        format!("{head}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::{json, Value};
    use traqlyte_experiments::{ArmKey, OutcomeValue, Weight};

    use super::{parse, Id, Objects, Refusal};

    #[derive(Debug, Deserialize)]
    #[serde(
        deny_unknown_fields,
        expecting = "a JSON object {\"id\", \"arms\", \"value\"}"
    )]
    #[allow(dead_code)] // Read by Debug only: the test looks at refusals.
    struct Body {
        id: Id,
        arms: Objects<Item>,
        value: Option<OutcomeValue>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, expecting = "a JSON object {\"key\", \"weight\"}")]
    #[allow(dead_code)]
    struct Item {
        key: ArmKey,
        weight: Weight,
    }

    fn refused(value: Value) -> Option<(String, String)> {
        parse::<Body>(&value)
            .err()
            .map(|Refusal { field, message }| (field, message))
    }

    #[test]
    fn refusals_name_the_field_and_say_why_in_the_apis_terms() {
        let good = || json!({"id": "c1", "arms": [{"key": "a", "weight": 1}], "value": null});
        let with = |pointer: &str, value: Value| {
            let mut body = good();
            *body.pointer_mut(pointer).expect("pointer") = value;
            body
        };
        let cases = [
            (good(), None),
            (
                json!(["c1", [], null]),
                Some((
                    "",
                    "the body must be a JSON object {\"id\", \"arms\", \"value\"}",
                )),
            ),
            (
                with("/arms/0", json!(["a", 1])),
                Some((
                    "arms[0]",
                    "`arms[0]` must be a JSON object {\"key\", \"weight\"}",
                )),
            ),
            (
                json!([1]),
                Some((
                    "",
                    "the body must be a JSON object {\"id\", \"arms\", \"value\"}",
                )),
            ),
            (
                json!({"arms": [], "id": "x", "extra": 1}),
                Some(("extra", "unknown field `extra`; allowed: id, arms, value")),
            ),
            (json!({"arms": []}), Some(("id", "`id` is required"))),
            (with("/id", json!(7)), Some(("id", "`id` must be a string"))),
            (
                with("/id", json!("")),
                Some(("id", "`id` must be a non-empty string")),
            ),
            (
                with("/id", json!("a\u{0}")),
                Some((
                    "id",
                    "`id` is invalid: text may not contain the NUL character (U+0000)",
                )),
            ),
            (
                with("/arms", json!({})),
                Some(("arms", "`arms` must be an array")),
            ),
            (
                with("/arms/0", json!("a")),
                Some((
                    "arms[0]",
                    "`arms[0]` must be a JSON object {\"key\", \"weight\"}",
                )),
            ),
            (
                with("/arms/0/weight", json!(0)),
                Some((
                    "arms[0].weight",
                    "`arms[0].weight` must be an integer from 1 to 1000000",
                )),
            ),
            (
                with("/arms/0/weight", json!("1")),
                Some((
                    "arms[0].weight",
                    "`arms[0].weight` must be an integer from 1 to 1000000",
                )),
            ),
            (
                with("/arms/0/weight", json!(1.5)),
                Some((
                    "arms[0].weight",
                    "`arms[0].weight` must be an integer from 1 to 1000000",
                )),
            ),
            (
                with("/arms/0/key", json!("a b")),
                Some((
                    "arms[0].key",
                    "`arms[0].key` must be 1-128 characters of A-Z a-z 0-9 _ . -",
                )),
            ),
            (
                with("/arms/0/key", json!(null)),
                Some(("arms[0].key", "`arms[0].key` must be a string")),
            ),
            (
                json!({"id": "c", "arms": [{"key": "a"}]}),
                Some(("arms[0].weight", "`arms[0].weight` is required")),
            ),
            (
                json!({"id": "c", "arms": [{"key": "a", "weight": 1, "w, expected `x`": 2}]}),
                Some((
                    "arms[0].w, expected `x`",
                    "unknown field `arms[0].w, expected `x``; allowed: key, weight",
                )),
            ),
            (
                with("/value", json!(2e15)),
                Some(("value", "`value` must be a number from -1e15 to 1e15")),
            ),
            (
                with("/value", json!("12, expected nothing")),
                Some(("value", "`value` must be a number from -1e15 to 1e15")),
            ),
        ];
        for (body, expected) in cases {
            let expected = expected.map(|(f, m)| (f.to_string(), m.to_string()));
            assert_eq!(refused(body.clone()), expected, "{body}");
        }
    }
}

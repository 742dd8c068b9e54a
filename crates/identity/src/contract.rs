//! Identity contracts: which fields make up an event's identity, how each is
//! canonicalised, and which fields are transport metadata.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::canonical::{self, type_name};
use crate::pointer::Pointer;
use crate::{ContractError, Fingerprint, Identified, IdentityError};

/// The most identity fields one contract may list.
pub const CONTRACT_FIELDS_MAX: usize = 64;
const TRANSPORT_POINTERS_MAX: usize = 64;
const PRECISION_MAX: u32 = 15;
const NAME_BYTES_MAX: usize = 128;
/// Most tokens a contract's pointer may have: no event nests deeper than 120 levels
/// (`--json-depth-max` at most), so a longer pointer never matches, and checking such
/// pointers against each other cost seconds a contract (8,000-token pointers).
const POINTER_TOKENS_MAX: usize = 120;
/// Most bytes a contract's pointer may have.
const POINTER_BYTES_MAX: usize = 4_096;

/// A contract name: 1–128 characters of `[A-Za-z0-9_.-]`, starting with a letter or digit.
/// The character set keeps names safe in URL paths and unambiguous in hashed input.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct ContractName(String);

impl ContractName {
    /// Checks the rule and wraps the name.
    pub fn parse(text: &str) -> Result<ContractName, ContractError> {
        let valid_chars = text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
        let valid_start = text
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric());
        if text.len() > NAME_BYTES_MAX || !valid_chars || !valid_start {
            return Err(ContractError::new(
                "name",
                format!("contract name {text:?} must be 1-{NAME_BYTES_MAX} characters of A-Z a-z 0-9 _ . - starting with a letter or digit"),
            ));
        }
        Ok(ContractName(text.to_string()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ContractName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// How an array-valued identity field is canonicalised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArrayMode {
    /// Order matters: the array is kept as sent.
    Ordered,
    /// Order does not matter: elements are sorted by their canonical bytes (a multiset:
    /// repeated elements are kept).
    Set,
}

/// The JSON type an identity field must have when present.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FieldType {
    /// A JSON string.
    String,
    /// Any JSON number.
    Number,
    /// A JSON number without a fractional part.
    Integer,
    /// `true` or `false`.
    Boolean,
    /// A JSON object.
    Object,
    /// An RFC 3339 timestamp string, canonicalised to the instant it names (UTC, to the
    /// microsecond: `2026-11-29T12:00:00.000000Z`), so a retry that spells the same
    /// instant another way (`+00:00`, `.000`, another offset) keeps its id.
    Timestamp,
    /// A JSON array.
    Array,
}

/// One identity field of a contract, as written in the contract document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldSpec {
    /// RFC 6901 pointer to the field.
    pub pointer: String,
    /// Round a number to this many decimals (half away from zero) before hashing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<u32>,
    /// Canonicalisation of an array value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<ArrayMode>,
    /// A missing required field makes the event invalid (422); otherwise it hashes as absent.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
    /// The JSON type the value must have when present.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<FieldType>,
    /// Free text for people reading the contract.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ContractDocument {
    name: String,
    version: i64,
    fields: Vec<FieldSpec>,
    #[serde(default)]
    transport: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    occurred_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    description: Option<String>,
}

/// A validated identity contract. `(name, version)` is immutable once registered.
#[derive(Debug, Clone)]
pub struct Contract {
    document: ContractDocument,
    name: ContractName,
    version: u32,
    fields: Vec<(Pointer, FieldSpec)>,
    /// Indices into `fields` in RFC 8785 key order of their pointers.
    identity_order: Vec<usize>,
    transport: Vec<Pointer>,
    /// Indices into `transport` in the order they are removed: a later array item
    /// before an earlier one (`/hops/1` before `/hops/0`), so that removing one never
    /// shifts another to a different element.
    transport_removal: Vec<usize>,
    occurred_at: Option<Pointer>,
}

impl Contract {
    /// Validates a contract document (the JSON users post to `POST /contracts`).
    pub fn from_json(value: &Value) -> Result<Contract, ContractError> {
        let mut track = serde_path_to_error::Track::new();
        let document = ContractDocument::deserialize(serde_path_to_error::Deserializer::new(
            value, &mut track,
        ))
        .map_err(|err| {
            let (field, message) = serde_refusal(&track.path(), &err);
            ContractError::new(field, message)
        })?;
        Contract::from_document(document, Rules::Registration)
    }

    /// Decodes a contract the store holds: registered under the rules of its day, so the
    /// rules that only guard authors against a useless contract (pointers in NFC, without
    /// NUL or unresolvable index tokens, no field inside a set, the counts' limits) are not
    /// applied again. A rule added later must never make a stored contract unreadable:
    /// its events would fail to store, and `GET /contracts` would fail for the tenant.
    /// What identification needs (names, versions, pointers that parse, each field's
    /// rules, transport apart from identity) is still checked.
    pub fn from_stored_json(value: &Value) -> Result<Contract, ContractError> {
        let document = ContractDocument::deserialize(value)
            .map_err(|err| ContractError::new("", err.to_string()))?;
        Contract::from_document(document, Rules::Stored)
    }

    fn from_document(document: ContractDocument, rules: Rules) -> Result<Contract, ContractError> {
        let registering = rules == Rules::Registration;
        let contract_pointer = |text: &str| match rules {
            Rules::Registration => contract_pointer(text),
            Rules::Stored => Pointer::parse(text),
        };
        let name = ContractName::parse(&document.name)?;
        let version = u32::try_from(document.version)
            .ok()
            .filter(|v| *v >= 1 && *v <= i32::MAX as u32)
            .ok_or_else(|| {
                ContractError::new("version", "version must be an integer from 1 to 2147483647")
            })?;
        if document.fields.is_empty()
            || (registering && document.fields.len() > CONTRACT_FIELDS_MAX)
        {
            return Err(ContractError::new(
                "fields",
                format!("a contract lists 1-{CONTRACT_FIELDS_MAX} identity fields"),
            ));
        }
        let mut fields: Vec<(Pointer, FieldSpec)> = Vec::new();
        for (index, spec) in document.fields.iter().enumerate() {
            let at = format!("fields[{index}]");
            let pointer = contract_pointer(&spec.pointer)
                .map_err(|m| ContractError::new(format!("{at}.pointer"), m))?;
            check_field_rules(spec, &at)?;
            if fields
                .iter()
                .any(|(seen, _)| seen.as_str() == pointer.as_str())
            {
                return Err(ContractError::new(
                    format!("{at}.pointer"),
                    format!("pointer {} is listed twice", spec.pointer),
                ));
            }
            // A field inside a set would be read by position, and a set's order is not
            // part of its identity: the same set in another order would be another event.
            let inside_set = |(outer, outer_spec): &(Pointer, FieldSpec), inner: &Pointer| {
                outer_spec.array == Some(ArrayMode::Set)
                    && inner.tokens().len() > outer.tokens().len()
                    && outer.overlaps(inner)
            };
            if let Some((set, _)) = fields
                .iter()
                .find(|field| registering && inside_set(field, &pointer))
            {
                return Err(ContractError::new(
                    format!("{at}.pointer"),
                    format!("pointer {} lies inside the set field {}, whose order is not part of the identity: name the set alone", spec.pointer, set.as_str()),
                ));
            }
            let this = (pointer.clone(), spec.clone());
            if let Some((inner, _)) = fields
                .iter()
                .find(|(inner, _)| registering && inside_set(&this, inner))
            {
                return Err(ContractError::new(
                    format!("{at}.pointer"),
                    format!("field {} lies inside this set field, whose order is not part of the identity: name the set alone", inner.as_str()),
                ));
            }
            fields.push((pointer, spec.clone()));
        }
        if registering && document.transport.len() > TRANSPORT_POINTERS_MAX {
            return Err(ContractError::new(
                "transport",
                format!("at most {TRANSPORT_POINTERS_MAX} transport pointers"),
            ));
        }
        let mut transport = Vec::new();
        for (index, text) in document.transport.iter().enumerate() {
            let at = format!("transport[{index}]");
            let pointer = contract_pointer(text).map_err(|m| ContractError::new(&at, m))?;
            // Listed twice, an array item's pointer would remove the item after it too (the
            // removals run one after the other): a change to that item would be a retry.
            // Stored contracts keep their removals, so that their events' fingerprints hold.
            if registering
                && transport
                    .iter()
                    .any(|seen: &Pointer| seen.as_str() == pointer.as_str())
            {
                return Err(ContractError::new(
                    at,
                    format!("pointer {text} is listed twice"),
                ));
            }
            if let Some((field, _)) = fields.iter().find(|(field, _)| field.overlaps(&pointer)) {
                return Err(ContractError::new(at, format!(
                    "transport pointer {text} overlaps identity field {}: a value cannot be both identity and transport metadata",
                    field.as_str()
                )));
            }
            transport.push(pointer);
        }
        let occurred_at = match &document.occurred_at {
            Some(text) => {
                Some(contract_pointer(text).map_err(|m| ContractError::new("occurred_at", m))?)
            }
            None => None,
        };
        let mut identity_order: Vec<usize> = (0..fields.len()).collect();
        identity_order
            .sort_by(|&a, &b| canonical::key_order(&fields[a].1.pointer, &fields[b].1.pointer));
        let mut transport_removal: Vec<usize> = (0..transport.len()).collect();
        transport_removal.sort_by(|&a, &b| transport[a].removal_order(&transport[b]));
        Ok(Contract {
            document,
            name,
            version,
            fields,
            identity_order,
            transport,
            transport_removal,
            occurred_at,
        })
    }

    /// The contract's name.
    pub fn name(&self) -> &ContractName {
        &self.name
    }

    /// The contract's version (≥ 1).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The identity fields, in the order the contract lists them.
    pub fn fields(&self) -> impl Iterator<Item = &FieldSpec> {
        self.fields.iter().map(|(_, spec)| spec)
    }

    /// The transport pointers (ignored by both the id and the fingerprint).
    pub fn transport(&self) -> impl Iterator<Item = &str> {
        self.transport.iter().map(Pointer::as_str)
    }

    /// The pointer of the event-time field, if the contract declares one.
    pub fn occurred_at(&self) -> Option<&str> {
        self.occurred_at.as_ref().map(Pointer::as_str)
    }

    /// The contract as a JSON document with defaults omitted.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(&self.document).unwrap_or(Value::Null)
    }

    /// RFC 8785 bytes of the contract document: two registrations are the same contract
    /// exactly when these bytes are equal.
    pub fn canonical_definition(&self) -> Vec<u8> {
        canonical::jcs(&self.to_json())
    }

    /// A readable, line-per-field description of the semantic contract.
    pub fn describe(&self) -> String {
        let mut out = format!("contract {} version {}\n", self.name, self.version);
        if let Some(text) = &self.document.description {
            out.push_str(&format!("  {text}\n"));
        }
        out.push_str("identity fields:\n");
        for spec in self.fields() {
            let mut rules = Vec::new();
            rules.push(if spec.required {
                "required".to_string()
            } else {
                "optional (absent hashes as absent)".to_string()
            });
            if let Some(kind) = spec.kind {
                rules.push(format!(
                    "type {}",
                    serde_json::to_string(&kind)
                        .unwrap_or_default()
                        .trim_matches('"')
                ));
            }
            if let Some(p) = spec.precision {
                rules.push(format!("rounded to {p} decimals"));
            }
            match spec.array {
                Some(ArrayMode::Set) => rules.push("array as a set (order ignored)".into()),
                Some(ArrayMode::Ordered) => rules.push("array in order".into()),
                None => {}
            }
            out.push_str(&format!("  {:<32} {}\n", spec.pointer, rules.join(", ")));
            if let Some(text) = &spec.description {
                out.push_str(&format!("  {:<32} {text}\n", ""));
            }
        }
        let transport: Vec<&str> = self.transport().collect();
        out.push_str(&format!(
            "transport (ignored by id and fingerprint): {}\n",
            if transport.is_empty() {
                "none".into()
            } else {
                transport.join(", ")
            }
        ));
        out.push_str(&format!(
            "event time: {}\n",
            self.occurred_at().unwrap_or("not declared")
        ));
        out.push_str(
            "everything else is content: outside the id, inside the payload fingerprint\n",
        );
        out
    }

    /// An estimate, from above, of the memory this contract holds: its document twice (as
    /// written and in its field specs) and each pointer's tokens, one `String` each. A
    /// pointer's text can be mostly token boundaries (`/` a thousand times is a thousand
    /// empty tokens), which its length alone undercounts many times over. For a cache
    /// that must stay within bytes.
    pub fn held_bytes(&self) -> usize {
        const TOKEN_BYTES: usize = std::mem::size_of::<String>() + 16;
        let pointers = self
            .fields
            .iter()
            .map(|(pointer, _)| pointer)
            .chain(&self.transport)
            .chain(&self.occurred_at);
        let tokens: usize = pointers
            .map(|p| p.tokens().len() * TOKEN_BYTES + p.as_str().len())
            .sum();
        2 * self.canonical_definition().len() + tokens
    }

    /// Computes the event id, the payload fingerprint and the event time of `event`.
    pub fn identify(&self, event: &Value) -> Result<Identified, IdentityError> {
        self.identify_owned(event.clone())
    }

    /// [`Contract::identify`] on an event the caller no longer needs, saving a copy.
    pub fn identify_owned(&self, event: Value) -> Result<Identified, IdentityError> {
        self.identify_parts(event, None)
    }

    /// [`Contract::identify_owned`] of an identity document whose payload fingerprint the
    /// caller computes over a different document (a Segment message: its identity is a
    /// projection, its fingerprint the whole message), so none is computed here.
    pub(crate) fn identify_with_fingerprint(
        &self,
        event: Value,
        fingerprint: Fingerprint,
    ) -> Result<Identified, IdentityError> {
        self.identify_parts(event, Some(fingerprint))
    }

    fn identify_parts(
        &self,
        event: Value,
        fingerprint: Option<Fingerprint>,
    ) -> Result<Identified, IdentityError> {
        if !event.is_object() {
            return Err(IdentityError::NotAnObject {
                found: type_name(&event),
            });
        }
        let mut content = event;
        canonical::normalize_in_place(&mut content, "")?;
        for (pointer, spec) in &self.fields {
            let Some(value) = pointer.get(&content) else {
                if spec.required {
                    return Err(IdentityError::MissingRequired {
                        field: spec.pointer.clone(),
                    });
                }
                continue;
            };
            if let Some(canonical) = canonical_field(value, spec)? {
                pointer.replace(&mut content, canonical);
            }
        }
        // The identity document `{pointer: canonical value}`, written straight from the
        // (now canonical) content in RFC 8785 key order, absent fields omitted.
        let members = self.identity_order.iter().filter_map(|&i| {
            let (pointer, spec) = &self.fields[i];
            pointer
                .get(&content)
                .map(|value| (spec.pointer.as_str(), value))
        });
        let identity_bytes = canonical::jcs_object(members);
        let occurred_at_us = self.event_time(&content)?;
        for &index in &self.transport_removal {
            self.transport[index].remove(&mut content);
        }
        let fingerprint = fingerprint.unwrap_or_else(|| Fingerprint::of(&content));
        Ok(Identified::new(
            self,
            identity_bytes,
            fingerprint,
            occurred_at_us,
        ))
    }

    fn event_time(&self, content: &Value) -> Result<Option<i64>, IdentityError> {
        let Some(pointer) = &self.occurred_at else {
            return Ok(None);
        };
        let invalid = |reason: String| IdentityError::InvalidTimestamp {
            field: pointer.as_str().to_string(),
            reason,
        };
        match pointer.get(content) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) => {
                crate::parse_rfc3339_micros(text).map(Some).map_err(invalid)
            }
            Some(other) => Err(invalid(format!("got {}", type_name(other)))),
        }
    }
}

/// Which rules [`Contract::from_document`] applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rules {
    /// All of them: a contract posted to `POST /contracts` or read from a file.
    Registration,
    /// A stored contract's: what identification needs, not the authoring rules.
    Stored,
}

/// Parses a contract pointer, refusing one that is not in Unicode NFC: event keys are
/// NFC-normalised before lookup, so such a pointer could never match and its field would
/// silently hash as absent, giving events that differ in it the same id. A NUL is refused
/// too: the semantic scan binds a pointer's tokens as PostgreSQL text, which cannot hold
/// one, so that contract would fail every scan (and on SQLite alone it would pass).
fn contract_pointer(text: &str) -> Result<Pointer, String> {
    if text.len() > POINTER_BYTES_MAX {
        return Err(format!(
            "a pointer has at most {POINTER_BYTES_MAX} bytes; this one has {}",
            text.len()
        ));
    }
    if text.contains('\0') {
        return Err(format!(
            "pointer {text:?} holds a NUL (\\u0000), which a contract's pointer may not"
        ));
    }
    if !canonical::is_nfc(text) {
        return Err(format!(
            "pointer {text:?} is not in Unicode NFC; event keys are NFC-normalised, so it could never match"
        ));
    }
    let pointer = Pointer::parse(text)?;
    if pointer.tokens().len() > POINTER_TOKENS_MAX {
        return Err(format!(
            "a pointer has at most {POINTER_TOKENS_MAX} tokens (no event nests deeper); this one has {}",
            pointer.tokens().len()
        ));
    }
    if let Some(token) = pointer.tokens().iter().find(|t| is_unresolvable_index(t)) {
        return Err(format!(
            "pointer {text:?} has the token {token:?}, which never addresses an array item \
             (RFC 6901 indices are 0 or digits without a leading zero; \"-\" is past the end); \
             the field would always hash as absent"
        ));
    }
    Ok(pointer)
}

/// A token shaped like an array index that RFC 6901 never resolves: `-` (the item past
/// the end), a negative number, or digits with a leading zero. Such tokens could only
/// address an object key of that exact spelling, which no contract is meant to name.
fn is_unresolvable_index(token: &str) -> bool {
    let digits = token.strip_prefix('-').unwrap_or(token);
    let all_digits = digits.bytes().all(|b| b.is_ascii_digit());
    token == "-"
        || (all_digits && token.starts_with('-'))
        || (all_digits && digits.len() > 1 && digits.starts_with('0'))
}

fn check_field_rules(spec: &FieldSpec, at: &str) -> Result<(), ContractError> {
    if let Some(p) = spec.precision {
        if p > PRECISION_MAX {
            return Err(ContractError::new(
                format!("{at}.precision"),
                format!("precision must be 0-{PRECISION_MAX} decimals"),
            ));
        }
        if !matches!(spec.kind, None | Some(FieldType::Number)) || spec.array.is_some() {
            return Err(ContractError::new(
                format!("{at}.precision"),
                "precision applies only to number fields",
            ));
        }
    }
    if spec.array.is_some() && !matches!(spec.kind, None | Some(FieldType::Array)) {
        return Err(ContractError::new(
            format!("{at}.array"),
            "array rules apply only to array fields",
        ));
    }
    Ok(())
}

/// Checks a field's type and returns its canonical form when that differs from the value
/// as sent (`None`: the value is already canonical).
fn canonical_field(value: &Value, spec: &FieldSpec) -> Result<Option<Value>, IdentityError> {
    let wrong = |expected: &'static str| IdentityError::WrongType {
        field: spec.pointer.clone(),
        expected,
        found: type_name(value),
    };
    let expected = match spec.kind {
        Some(kind) => Some(kind),
        None if spec.precision.is_some() => Some(FieldType::Number),
        None if spec.array.is_some() => Some(FieldType::Array),
        None => None,
    };
    let type_ok = match expected {
        None => true,
        Some(FieldType::String | FieldType::Timestamp) => value.is_string(),
        Some(FieldType::Number) => value.is_number(),
        // An integer may be spelled with a zero fraction or an exponent (`7.0`, `7e0`):
        // RFC 8785 writes them all `7`, so a retry respelling one keeps its id.
        Some(FieldType::Integer) => {
            value.is_i64()
                || value.is_u64()
                || value
                    .as_f64()
                    .is_some_and(|f| f.is_finite() && f.fract() == 0.0)
        }
        Some(FieldType::Boolean) => value.is_boolean(),
        Some(FieldType::Object) => value.is_object(),
        Some(FieldType::Array) => value.is_array(),
    };
    // `null` is a value, distinct from absent; a typed field still refuses it.
    if !type_ok {
        return Err(wrong(match expected {
            Some(FieldType::String) => "a string",
            Some(FieldType::Timestamp) => "an RFC 3339 timestamp string",
            Some(FieldType::Number) => "a number",
            Some(FieldType::Integer) => "an integer",
            Some(FieldType::Boolean) => "a boolean",
            Some(FieldType::Object) => "an object",
            Some(FieldType::Array) | None => "an array",
        }));
    }
    if let (Some(FieldType::Timestamp), Value::String(text)) = (expected, value) {
        let micros = crate::parse_rfc3339_micros(text).map_err(|reason| {
            IdentityError::InvalidTimestamp {
                field: spec.pointer.clone(),
                reason,
            }
        })?;
        let canonical = crate::format_rfc3339_micros(micros);
        return Ok((canonical != *text).then_some(Value::String(canonical)));
    }
    Ok(match (value, spec.precision, spec.array) {
        (Value::Number(n), Some(p), _) => Some(Value::Number(canonical::round_decimal(n, p))),
        (Value::Array(items), _, Some(ArrayMode::Set)) => {
            // Each key as long as it is: `jcs` reserves 256 bytes, and a set of 333,000
            // small items held 90 MB of reservations (a 1 MB event).
            let mut keyed: Vec<(Vec<u8>, &Value)> = items
                .iter()
                .map(|v| {
                    let mut key = canonical::jcs(v);
                    key.shrink_to_fit();
                    (key, v)
                })
                .collect();
            keyed.sort_by(|a, b| a.0.cmp(&b.0));
            Some(Value::Array(
                keyed.into_iter().map(|(_, v)| v.clone()).collect(),
            ))
        }
        _ => None,
    })
}

/// The contract field a serde error is about, spelled as the API names fields
/// (`fields[0].pointer`): the path where it failed, and for a missing field the field
/// itself (serde reports it at the object that lacks it); and the message, "`x` is
/// required" for a missing field as on every other route (serde's "missing field `x`"
/// otherwise).
fn serde_refusal(path: &serde_path_to_error::Path, err: &serde_json::Error) -> (String, String) {
    let at = if path.iter().next().is_none() {
        String::new()
    } else {
        path.to_string()
    };
    let text = err.to_string();
    let missing = text
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next());
    let field = match missing {
        Some(name) if at.is_empty() => name.to_string(),
        Some(name) => format!("{at}.{name}"),
        None => return (at, text),
    };
    let message = format!("`{field}` is required");
    (field, message)
}

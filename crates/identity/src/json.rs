//! Strict JSON parsing with limits: valid UTF-8, a bounded nesting depth, no duplicate
//! object keys (RFC 8785 requires I-JSON input), a clear message for `NaN`/`Infinity`, and
//! no number that its canonical double would merge with another ([`crate::number`]).

use std::cell::{Cell, RefCell};
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use thiserror::Error;

use crate::canonical::EXACT_INTEGER_MAX;
use crate::number::{
    first_out_of_range, first_refused, first_refused_per_item, NumberFault, RefusedNumber,
};

/// The most deeply nested document the parser can ever accept; `serde_json` stops at 128.
pub const DEPTH_MAX_CEILING: usize = 120;

/// Why a body is not acceptable JSON.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ParseError {
    /// The bytes are not UTF-8.
    #[error("body is not valid UTF-8 (first invalid byte at offset {offset})")]
    InvalidUtf8 {
        /// Byte offset of the first invalid byte.
        offset: usize,
    },
    /// `NaN`, `Infinity` or `-Infinity` appear where a value is expected.
    #[error("NaN and Infinity are not JSON numbers (line {line}, column {column})")]
    NonFiniteNumber {
        /// Line of the error (1-based; 0 when unknown).
        line: usize,
        /// Column of the error (1-based; 0 when unknown).
        column: usize,
    },
    /// Arrays/objects nested deeper than the configured limit.
    #[error("JSON nesting is deeper than the limit of {depth_max} levels at {}", if pointer.is_empty() { "the document" } else { pointer })]
    TooDeep {
        /// The nesting limit in force.
        depth_max: usize,
        /// The RFC 6901 pointer of the first container nested too deep (found on the error
        /// path only, by a scan of the text).
        pointer: String,
    },
    /// An object repeats a key.
    #[error("object has the key {key:?} twice; duplicate keys are ambiguous (RFC 8259, I-JSON)")]
    DuplicateKey {
        /// The repeated key.
        key: String,
        /// The RFC 6901 pointer of its second occurrence, the first such in document
        /// order (found on the error path only, by a scan of the text; empty when the
        /// scan finds none).
        pointer: String,
    },
    /// A number the canonical form cannot hold without merging it with another value
    /// (see [`crate::number`]); `field` is its RFC 6901 pointer.
    #[error("{}", number_message(field, literal, *fault))]
    NumberOutOfRange {
        /// The pointer (or name) of the offending field.
        field: String,
        /// The number as written in the document.
        literal: String,
        /// Which rule the number breaks.
        fault: NumberFault,
    },
    /// The parsed tree grew past the room its [`Meter`] could get (`used` estimated
    /// bytes when it stopped; see [`Meter`]).
    #[error("the parsed document takes more than the {used} bytes of memory there is room for")]
    OutOfRoom {
        /// Estimated bytes of the tree when the parse stopped.
        used: usize,
    },
    /// Any other syntax error, as reported by the parser.
    #[error("malformed JSON: {0}")]
    Syntax(String),
}

impl ParseError {
    /// A stable machine-readable code for the error.
    pub fn code(&self) -> &'static str {
        match self {
            ParseError::InvalidUtf8 { .. } => "invalid_utf8",
            ParseError::NonFiniteNumber { .. } => "non_finite_number",
            ParseError::TooDeep { .. } => "too_deep",
            ParseError::DuplicateKey { .. } => "duplicate_key",
            ParseError::NumberOutOfRange { .. } => "number_out_of_range",
            ParseError::OutOfRoom { .. } => "out_of_room",
            ParseError::Syntax(_) => "malformed_json",
        }
    }
}

fn number_message(field: &str, literal: &str, fault: NumberFault) -> String {
    let place = if field.is_empty() {
        "the document".to_string()
    } else {
        field.to_string()
    };
    let shown: String = literal.chars().take(40).collect();
    match fault {
        NumberFault::OutOfRange => format!(
            "number {shown} at {place} is beyond the range of an IEEE double; send it as a \
             string"
        ),
        NumberFault::NotExact => format!(
            "number {shown} at {place} is not written as RFC 8785 writes its IEEE double \
             (the shortest form that reads back as that double is another number): it would \
             be stored as a different number and could merge two distinct events; send it \
             as a string or as the double's shortest form"
        ),
    }
}

/// How deeply `value` nests arrays and objects, counted as the parser's `depth_max`
/// counts them (`{"a": [1]}` is 2, a scalar 0, `[]` 1, and `{}` 0: the parser counts an
/// object's level when it reads a member). Without recursion: a caller measures the
/// items of a document parsed under a larger limit, to refuse each alone.
pub fn depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((value, above)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) if !map.is_empty() => Box::new(map.values()),
            _ => continue,
        };
        let level = above + 1;
        deepest = deepest.max(level);
        stack.extend(children.map(|child| (child, level)));
    }
    deepest
}

/// The memory a parse may build, in estimated bytes of its `serde_json` tree: a parsed
/// document takes from about 2 to about 100 times its text (an object of one short key is
/// a B-tree leaf of some 640 bytes), so a server bounding the memory of bodies in flight
/// must count the tree, not the text, and must count it as it grows.
///
/// The estimate follows `serde_json`'s layout on a 64-bit target: an array's buffer holds
/// a 32-byte slot per item (counted as its capacity grows), a string its bytes, an object
/// its B-tree's nodes (`object_entry_bytes`) and its keys' bytes. A test measures it
/// against the allocator: never below the real tree, at most 2.5 times it. Past what was
/// granted, the parse asks `more` for what it needs, wanting [`METER_STEP_BYTES`] at
/// least; when it grants less than the need, the parse stops with
/// [`ParseError::OutOfRoom`] and the partial tree is dropped.
pub struct Meter<'m> {
    used: Cell<usize>,
    granted: Cell<usize>,
    more: Option<RefCell<&'m mut dyn FnMut(usize, usize) -> usize>>,
}

/// The least a [`Meter`] asks for at once past its grant, so a growing tree asks rarely.
pub const METER_STEP_BYTES: usize = 64 * 1024;

/// Estimated bytes an object's entry adds to its B-tree, given the entries before it
/// ([`Meter`]): the first takes a leaf (632 bytes for up to 11 entries of a 24-byte key
/// and a 32-byte value); the twelfth splits it (a second leaf and a root of 728 bytes);
/// each one after counts a share of further leaves and inner nodes, which a tree built
/// by inserting in ascending order (JSON objects written sorted) fills least: about 125
/// bytes an entry, counted 160.
fn object_entry_bytes(entries_before: usize) -> usize {
    match entries_before {
        0 => 640,
        1..=10 => 0,
        11 => 1_400,
        _ => 160,
    }
}

/// Bytes of one `serde_json::Value` slot in an array's buffer.
const VALUE_SLOT_BYTES: usize = std::mem::size_of::<Value>();

impl<'m> Meter<'m> {
    /// A meter granted `granted` bytes, asking `more(needed, wanted)` for further ones: it
    /// answers how many it grants, `needed` or more (up to `wanted`), or 0.
    pub fn new(granted: usize, more: &'m mut dyn FnMut(usize, usize) -> usize) -> Meter<'m> {
        Meter {
            used: Cell::new(0),
            granted: Cell::new(granted),
            more: Some(RefCell::new(more)),
        }
    }

    /// A meter that never stops a parse.
    pub fn unbounded() -> Meter<'static> {
        Meter {
            used: Cell::new(0),
            granted: Cell::new(usize::MAX),
            more: None,
        }
    }

    /// Estimated bytes of the tree built so far.
    pub fn used(&self) -> usize {
        self.used.get()
    }

    /// Starts counting a new tree: the one a failed parse built is dropped, and its
    /// count with it (the room granted so far stays granted, for the next parse).
    pub fn restart(&self) {
        self.used.set(0);
    }

    /// Counts `bytes` more of the tree; false when they are past the grant and `more`
    /// refused them.
    fn charge(&self, bytes: usize) -> bool {
        let used = self.used.get().saturating_add(bytes);
        self.used.set(used);
        let granted = self.granted.get();
        if used <= granted {
            return true;
        }
        let needed = used - granted;
        let Some(more) = &self.more else {
            return false;
        };
        let given = (more.borrow_mut())(needed, needed.max(METER_STEP_BYTES));
        self.granted.set(granted.saturating_add(given));
        given >= needed
    }
}

/// Parses `bytes` as one JSON value nested at most `depth_max` levels (clamped to
/// [`DEPTH_MAX_CEILING`]). A scalar has depth 0; `{"a":[1]}` has depth 2.
pub fn parse(bytes: &[u8], depth_max: usize) -> Result<Value, ParseError> {
    parse_in(bytes, depth_max, &Meter::unbounded())
}

/// [`parse`], its tree counted by `meter`.
pub fn parse_in(bytes: &[u8], depth_max: usize, meter: &Meter) -> Result<Value, ParseError> {
    parse_judging_numbers(bytes, depth_max, first_refused, meter)
}

/// [`parse`] that also takes every integer a 64-bit integer holds
/// ([`crate::number::is_wide_integer`]): for documents whose large integers are data,
/// not identity, such as an OpenLineage facet's Iceberg snapshot id (a random 63-bit
/// number). Such an integer is kept exactly in the value; the canonical form must then be
/// taken with [`crate::canonical::normalize_wide`].
pub fn parse_wide_integers(bytes: &[u8], depth_max: usize) -> Result<Value, ParseError> {
    parse_wide_integers_in(bytes, depth_max, &Meter::unbounded())
}

/// [`parse_wide_integers`], its tree counted by `meter`.
pub fn parse_wide_integers_in(
    bytes: &[u8],
    depth_max: usize,
    meter: &Meter,
) -> Result<Value, ParseError> {
    parse_judging_numbers(
        bytes,
        depth_max,
        crate::number::first_refused_beyond_wide_integers,
        meter,
    )
}

/// Parses, then refuses the first number `scan` refuses. Only a document holding a float
/// or a large integer is scanned again (by its text: the parsed double no longer tells
/// `1e-400` from `0`).
fn parse_judging_numbers(
    bytes: &[u8],
    depth_max: usize,
    scan: fn(&str) -> Option<RefusedNumber>,
    meter: &Meter,
) -> Result<Value, ParseError> {
    let (value, text, suspect_number) = parse_any_numbers(bytes, depth_max, meter)?;
    match suspect_number.then(|| scan(text)).flatten() {
        Some(refused) => Err(refused_number_error(refused)),
        None => Ok(value),
    }
}

/// [`parse`] for a batch whose items are judged one by one: the first number the
/// canonical form cannot hold in each item (what the first `item_depth` levels of a
/// pointer name: 1 for a JSON array of items, 2 for `{"batch": [items]}`) is reported,
/// with its pointer, instead of refusing the whole document. A number beyond the double
/// range still refuses it.
pub fn parse_reporting_numbers(
    bytes: &[u8],
    depth_max: usize,
    item_depth: usize,
) -> Result<(Value, Vec<RefusedNumber>), ParseError> {
    parse_reporting_numbers_in(bytes, depth_max, item_depth, &Meter::unbounded())
}

/// [`parse_reporting_numbers`], its tree counted by `meter`.
pub fn parse_reporting_numbers_in(
    bytes: &[u8],
    depth_max: usize,
    item_depth: usize,
    meter: &Meter,
) -> Result<(Value, Vec<RefusedNumber>), ParseError> {
    let (value, text, suspect_number) = parse_any_numbers(bytes, depth_max, meter)?;
    let refused = if suspect_number {
        first_refused_per_item(text, item_depth)
    } else {
        Vec::new()
    };
    Ok((value, refused))
}

/// [`parse_reporting_numbers_in`] of a batch whose items lie `item_depth` levels down
/// and may each nest `item_depth_max` levels. A body too deep for that is parsed again as
/// deep as any document is ([`DEPTH_MAX_CEILING`], its tree counted anew), and the flag
/// answered says so: its items are then to be measured ([`depth`]), each too deep refused
/// alone rather than the whole batch. Deeper still, the first refusal, naming the limit.
pub fn parse_batch_in(
    bytes: &[u8],
    item_depth_max: usize,
    item_depth: usize,
    meter: &Meter,
) -> Result<(Value, Vec<RefusedNumber>, bool), ParseError> {
    let limit = item_depth_max + item_depth;
    match parse_reporting_numbers_in(bytes, limit, item_depth, meter) {
        Err(deep @ ParseError::TooDeep { .. }) if limit < DEPTH_MAX_CEILING => {
            meter.restart();
            match parse_reporting_numbers_in(bytes, DEPTH_MAX_CEILING, item_depth, meter) {
                Ok((value, refused)) => Ok((value, refused, true)),
                Err(ParseError::TooDeep { .. }) => Err(deep),
                Err(err) => Err(err),
            }
        }
        parsed => parsed.map(|(value, refused)| (value, refused, false)),
    }
}

/// Parses without judging numbers; also returns the text and whether any number needs
/// the exactness scan.
fn parse_any_numbers<'t>(
    bytes: &'t [u8],
    depth_max: usize,
    meter: &Meter,
) -> Result<(Value, &'t str, bool), ParseError> {
    let text = std::str::from_utf8(bytes).map_err(|err| ParseError::InvalidUtf8 {
        offset: err.valid_up_to(),
    })?;
    // A byte order mark is no part of the value (RFC 8259 lets a parser ignore it), and
    // tools on Windows write one (PowerShell, Notepad's "UTF-8 with BOM"): skipped.
    let text = text.strip_prefix('\u{FEFF}').unwrap_or(text);
    let depth_max = depth_max.min(DEPTH_MAX_CEILING);
    let failure = RefCell::new(None);
    let suspect_number = Cell::new(false);
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let seed = ValueSeed {
        depth: 0,
        depth_max,
        failure: &failure,
        suspect_number: &suspect_number,
        meter,
    };
    let result = seed.deserialize(&mut deserializer).and_then(|value| {
        deserializer.end()?;
        Ok(value)
    });
    match result {
        Ok(value) => Ok((value, text, suspect_number.get())),
        Err(err) => Err(match failure.into_inner() {
            // Named where it is: a producer's deep facet (Airflow's task tree, one level
            // a task) is found by its pointer, not by reading the whole event.
            Some(ParseError::TooDeep { depth_max, .. }) => ParseError::TooDeep {
                depth_max,
                pointer: too_deep_at(text, depth_max),
            },
            // Named where it is, as a key equal to another after normalisation is.
            Some(ParseError::DuplicateKey { key, .. }) => {
                duplicate_key_at(text).unwrap_or(ParseError::DuplicateKey {
                    key,
                    pointer: String::new(),
                })
            }
            Some(failure) => failure,
            None => classify(text, &err),
        }),
    }
}

/// The RFC 6901 pointer of the first object or array of `text` nested `depth_max` deep
/// (the top level is 0), where the parse stops (empty or not); empty when there is none.
/// A scan of the text, for the error path only: the parse tracks depth, not its path,
/// which every accepted document would pay for.
fn too_deep_at(text: &str, depth_max: usize) -> String {
    let mut pointer = String::new();
    crate::number::scan_values(text, &mut |frames, value| {
        if !matches!(value, crate::number::Scanned::Container) || frames.len() < depth_max {
            return true;
        }
        pointer = crate::number::pointer_of(text, frames);
        false
    });
    pointer
}

/// The first key of `text` repeated in its object, in document order, with the pointer of
/// its second occurrence. A scan of the text for the error path only, as [`too_deep_at`]:
/// the one the parse met may lie inside the repeated key's value (it parses a value
/// before it files the key), so the key is taken from the scan too, to match the pointer.
fn duplicate_key_at(text: &str) -> Option<ParseError> {
    use crate::number::Frame;
    // The keys seen so far in each open container (arrays' stay empty).
    let mut seen: Vec<std::collections::HashSet<String>> = Vec::new();
    let mut found = None;
    crate::number::scan_values(text, &mut |frames, value| {
        if let Some(Frame::Object {
            key: (from, to), ..
        }) = frames.last()
        {
            let key: String = serde_json::from_str(&text[*from..*to]).unwrap_or_default();
            seen.truncate(frames.len());
            if let Some(keys) = seen.last_mut() {
                if !keys.insert(key.clone()) {
                    found = Some(ParseError::DuplicateKey {
                        key,
                        pointer: crate::number::pointer_of(text, frames),
                    });
                    return false;
                }
            }
        }
        if matches!(value, crate::number::Scanned::Container) {
            seen.truncate(frames.len());
            seen.push(std::collections::HashSet::new());
        }
        true
    });
    found
}

/// `bytes` (JSON text) with each `\uXXXX` escape of a surrogate that is not half of a
/// pair (`\ud83d` alone) replaced by `\ufffd`, the replacement character, as the
/// WHATWG encoders do when they meet a lone surrogate; `None` when there is none (the
/// text is then left to the parser, which refuses such an escape).
///
/// `JSON.stringify` writes a lone surrogate this way (a string cut inside an emoji by
/// `substring`): a reader of browsers' events takes it rather than refusing the request.
/// Each replacement keeps the text's length, and a resend is replaced alike.
pub fn replace_lone_surrogate_escapes(bytes: &[u8]) -> Option<Vec<u8>> {
    let unit_at = |at: usize| -> Option<u16> {
        let digits = bytes.get(at..at + 4)?;
        let text = std::str::from_utf8(digits).ok()?;
        u16::from_str_radix(text, 16).ok()
    };
    let escape_at = |at: usize| -> Option<u16> {
        (bytes.get(at) == Some(&b'\\') && bytes.get(at + 1) == Some(&b'u'))
            .then(|| unit_at(at + 2))
            .flatten()
    };
    let mut replaced: Option<Vec<u8>> = None;
    let mut in_string = false;
    let mut at = 0;
    while at < bytes.len() {
        match (in_string, bytes[at]) {
            (false, b'"') => {
                in_string = true;
                at += 1;
            }
            (false, _) => at += 1,
            (true, b'"') => {
                in_string = false;
                at += 1;
            }
            (true, b'\\') => match escape_at(at) {
                Some(0xD800..=0xDBFF) if matches!(escape_at(at + 6), Some(0xDC00..=0xDFFF)) => {
                    at += 12;
                }
                Some(0xD800..=0xDFFF) => {
                    replaced.get_or_insert_with(|| bytes.to_vec())[at..at + 6]
                        .copy_from_slice(b"\\ufffd");
                    at += 6;
                }
                // Any other escape: the escaped character is skipped (`\"` ends no
                // string, `\\` escapes no `u`).
                _ => at += 2,
            },
            (true, _) => at += 1,
        }
    }
    replaced
}

/// `bytes` (JSON text) with each `NaN`, `Infinity`, `-Infinity` and `+Infinity` that
/// stands as a value replaced by `null`, as `JSON.stringify` writes a non-finite number;
/// `None` when there is none. Python's `json` writes `float('nan')` as `NaN` (no JSON
/// number), so one such property in an analytics-python batch, or a data-quality facet's
/// `NaN` minimum in an OpenLineage event, refused the whole request, which the client
/// then dropped. Outside strings these letters only ever begin such a token (`true`,
/// `false` and `null` have no capital), so a scan that skips strings finds them all.
pub fn replace_non_finite_literals(bytes: &[u8]) -> Option<Vec<u8>> {
    const TOKENS: [&[u8]; 4] = [b"NaN", b"Infinity", b"-Infinity", b"+Infinity"];
    let mut out: Option<Vec<u8>> = None;
    let (mut at, mut copied) = (0, 0);
    while at < bytes.len() {
        match bytes[at] {
            b'"' => at = crate::number::string_end(bytes, at),
            b'N' | b'I' | b'-' | b'+' => {
                let rest = &bytes[at..];
                match TOKENS.iter().find(|token| rest.starts_with(token)) {
                    Some(token) => {
                        let buffer = out.get_or_insert_with(|| Vec::with_capacity(bytes.len() + 8));
                        buffer.extend_from_slice(&bytes[copied..at]);
                        buffer.extend_from_slice(b"null");
                        at += token.len();
                        copied = at;
                    }
                    None => at += 1,
                }
            }
            _ => at += 1,
        }
    }
    let mut buffer = out?;
    buffer.extend_from_slice(&bytes[copied.min(bytes.len())..]);
    Some(buffer)
}

/// Which of [`browser_fix`]'s rewrites a document has had (each is tried once).
#[derive(Debug, Default)]
pub struct BrowserFixes {
    surrogates: bool,
    non_finite: bool,
}

/// The text to parse again after `err`, rewritten as a browser's encoder writes what
/// strict JSON refuses: a lone surrogate escape as U+FFFD
/// ([`replace_lone_surrogate_escapes`]), a `NaN` or an `Infinity` as `null`
/// ([`replace_non_finite_literals`]); each once. `None` when no rewrite applies: `err`
/// is the answer. The Segment routes and NATS's `traqlyte.segment` read messages so.
pub fn browser_fix(err: &ParseError, bytes: &[u8], done: &mut BrowserFixes) -> Option<Vec<u8>> {
    match err {
        ParseError::Syntax(_) if !done.surrogates => {
            done.surrogates = true;
            replace_lone_surrogate_escapes(bytes)
        }
        ParseError::NonFiniteNumber { .. } if !done.non_finite => {
            done.non_finite = true;
            replace_non_finite_literals(bytes)
        }
        _ => None,
    }
}

/// [`parse_wide_integers_in`] that reads a non-finite number as `null`
/// ([`replace_non_finite_literals`]), for documents of producers that write them
/// (OpenLineage's Python client). Only a document refused for one is scanned again.
pub fn parse_wide_integers_reading_non_finite_in(
    bytes: &[u8],
    depth_max: usize,
    meter: &Meter,
) -> Result<Value, ParseError> {
    match parse_wide_integers_in(bytes, depth_max, meter) {
        Err(err @ ParseError::NonFiniteNumber { .. }) => match replace_non_finite_literals(bytes) {
            // The failed parse's tree is gone: counted again, it refused as too large a
            // run event that fits (a review: 413 for a NaN at the end, 201 at the front).
            Some(fixed) => {
                meter.restart();
                parse_wide_integers_in(&fixed, depth_max, meter)
            }
            None => Err(err),
        },
        parsed => parsed,
    }
}

/// The error for one refused number.
pub fn refused_number_error(refused: RefusedNumber) -> ParseError {
    ParseError::NumberOutOfRange {
        field: refused.pointer,
        literal: refused.literal,
        fault: refused.fault,
    }
}

/// A number beyond the double range is named where it is ([`first_out_of_range`]).
fn classify(text: &str, err: &serde_json::Error) -> ParseError {
    let (line, column) = (err.line(), err.column());
    // serde_json refuses a literal beyond the double range (`1e400`) as a syntax error;
    // the text before it is valid, so the scan finds it and names its place.
    if err.to_string().starts_with("number out of range") {
        if let Some(refused) = first_out_of_range(text) {
            return refused_number_error(refused);
        }
    }
    if err.is_syntax() {
        let offset = offset_of(text, line, column);
        let rest = text.get(offset.saturating_sub(1)..).unwrap_or("");
        let rest = rest.trim_start_matches([':', ',', '[', ' ', '\t', '\n', '\r']);
        if ["NaN", "Infinity", "-Infinity", "+Infinity"]
            .iter()
            .any(|t| rest.starts_with(t))
        {
            return ParseError::NonFiniteNumber { line, column };
        }
    }
    ParseError::Syntax(err.to_string())
}

fn offset_of(text: &str, line: usize, column: usize) -> usize {
    let line_start: usize = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum();
    line_start + column.saturating_sub(1)
}

struct ValueSeed<'f, 'm> {
    depth: usize,
    depth_max: usize,
    failure: &'f RefCell<Option<ParseError>>,
    /// Set when a float or an integer beyond ±(2^53−1) was read.
    suspect_number: &'f Cell<bool>,
    meter: &'f Meter<'m>,
}

impl<'f, 'm> ValueSeed<'f, 'm> {
    fn nested<E: de::Error>(&self) -> Result<ValueSeed<'f, 'm>, E> {
        if self.depth >= self.depth_max {
            return Err(self.fail(ParseError::TooDeep {
                depth_max: self.depth_max,
                pointer: String::new(),
            }));
        }
        Ok(ValueSeed {
            depth: self.depth + 1,
            depth_max: self.depth_max,
            failure: self.failure,
            suspect_number: self.suspect_number,
            meter: self.meter,
        })
    }

    /// Counts `bytes` more of the tree ([`Meter`]), or stops the parse.
    fn charge<E: de::Error>(&self, bytes: usize) -> Result<(), E> {
        if self.meter.charge(bytes) {
            Ok(())
        } else {
            Err(self.fail(ParseError::OutOfRoom {
                used: self.meter.used(),
            }))
        }
    }

    fn fail<E: de::Error>(&self, error: ParseError) -> E {
        let message = error.to_string();
        self.failure.borrow_mut().get_or_insert(error);
        E::custom(message)
    }
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_, '_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_, '_> {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        if v.unsigned_abs() > EXACT_INTEGER_MAX {
            self.suspect_number.set(true);
        }
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        if v > EXACT_INTEGER_MAX {
            self.suspect_number.set(true);
        }
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.suspect_number.set(true);
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| self.fail(ParseError::NonFiniteNumber { line: 0, column: 0 }))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.charge(v.len())?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.charge(v.capacity())?;
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self.nested()?)? {
            let capacity = items.capacity();
            items.push(item);
            if items.capacity() != capacity {
                self.charge((items.capacity() - capacity) * VALUE_SLOT_BYTES)?;
            }
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            self.charge(object_entry_bytes(object.len()) + key.capacity())?;
            let value = map.next_value_seed(self.nested()?)?;
            // One search of the map per key, not one to check and one to insert.
            match object.entry(key) {
                serde_json::map::Entry::Vacant(slot) => {
                    slot.insert(value);
                }
                serde_json::map::Entry::Occupied(taken) => {
                    let key = taken.key().clone();
                    return Err(self.fail(ParseError::DuplicateKey {
                        key,
                        pointer: String::new(),
                    }));
                }
            }
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn lone_surrogate_escapes_become_the_replacement_character() {
        use super::replace_lone_surrogate_escapes as fix;
        let cases: [(&str, Option<&str>); 9] = [
            (r#"{"t":"cut \ud83d"}"#, Some(r#"{"t":"cut \ufffd"}"#)),
            (r#"{"t":"\udc00x"}"#, Some(r#"{"t":"\ufffdx"}"#)),
            (r#"["\ud83d\ude00"]"#, None),
            (
                r#"["\ud83d\ud83d\ude00"]"#,
                Some(r#"["\ufffd\ud83d\ude00"]"#),
            ),
            (r#"["\\ud83d"]"#, None),
            (r#"["\"\ud83d"]"#, Some(r#"["\"\ufffd"]"#)),
            (r#"{"\ud800":1}"#, Some(r#"{"\ufffd":1}"#)),
            (r#"["plain", 1, "é"]"#, None),
            (r#"["\u00e9\ud83d"#, Some(r#"["\u00e9\ufffd"#)),
        ];
        for (input, expected) in cases {
            let got = fix(input.as_bytes()).map(|b| String::from_utf8(b).unwrap());
            assert_eq!(got.as_deref(), expected, "{input}");
        }
        let fixed = fix(br#"{"t":"a\ud83d"}"#).unwrap();
        let value = super::parse(&fixed, 8).unwrap();
        assert_eq!(value["t"], "a\u{fffd}");
    }

    use super::*;

    #[test]
    fn non_finite_literals_become_null_and_strings_stay() {
        let cases: [(&str, Option<&str>); 7] = [
            (r#"{"a":NaN}"#, Some(r#"{"a":null}"#)),
            (
                r#"[Infinity, -Infinity,+Infinity]"#,
                Some(r#"[null, null,null]"#),
            ),
            (r#"{"NaN":"NaN","b":-1}"#, None),
            (
                r#"{"s":"a\"NaN","n":NaN}"#,
                Some(r#"{"s":"a\"NaN","n":null}"#),
            ),
            (r#"{"s":"\\","n":Infinity}"#, Some(r#"{"s":"\\","n":null}"#)),
            (r#"[1, -2.5e-3, true, null]"#, None),
            (r#"[NaN"#, Some(r#"[null"#)),
        ];
        for (input, expected) in cases {
            let got = replace_non_finite_literals(input.as_bytes())
                .map(|b| String::from_utf8(b).unwrap());
            assert_eq!(got.as_deref(), expected, "{input}");
        }
        let value = parse_wide_integers_reading_non_finite_in(
            br#"{"min":NaN,"id":9007199254740993}"#,
            8,
            &Meter::unbounded(),
        )
        .expect("parsed");
        assert_eq!(
            value,
            serde_json::json!({"min": null, "id": 9007199254740993u64})
        );
        // The second parse counts its own tree only, not the failed one's too.
        let meter = Meter::unbounded();
        let text = format!(r#"{{"a":[{}],"z":NaN}}"#, vec!["1"; 1000].join(","));
        parse_wide_integers_reading_non_finite_in(text.as_bytes(), 8, &meter).expect("parsed");
        let once = meter.used();
        let clean = Meter::unbounded();
        let text = text.replace("NaN", "null");
        parse_wide_integers_in(text.as_bytes(), 8, &clean).expect("parsed");
        assert_eq!(once, clean.used());
        // Any other fault is still refused.
        assert!(
            parse_wide_integers_reading_non_finite_in(b"{NaN}", 8, &Meter::unbounded()).is_err()
        );
    }

    #[test]
    fn a_leading_byte_order_mark_is_no_part_of_the_value() {
        let value = parse(b"\xEF\xBB\xBF{\"a\": 1}", 3).expect("parsed");
        assert_eq!(value, serde_json::json!({"a": 1}));
        // Only a leading one: inside a string it is data, elsewhere an error.
        let inside = parse(b"[\"\xEF\xBB\xBFa\"]", 3).expect("parsed");
        assert_eq!(inside[0], "\u{FEFF}a");
        assert!(parse(b"[1,\xEF\xBB\xBF2]", 3).is_err());
    }

    /// A repeated key is named by the pointer of its second occurrence, the first in
    /// document order, with the key to match: an escaped spelling repeats a key too, and
    /// where the repeated key's value holds a repeat of its own, the outer one is named.
    #[test]
    fn a_repeated_key_is_named_where_it_is() {
        let cases: [(&str, &str, &str); 6] = [
            (r#"{"a": 1, "a": 2}"#, "a", "/a"),
            (r#"{"x": {"a": 1, "b": [1], "a": 2}}"#, "a", "/x/a"),
            (
                r#"[{"a": 1}, {"a": 2, "b": {"c": 1, "c": 2}}]"#,
                "c",
                "/1/b/c",
            ),
            (r#"{"a": 1, "a": {"b": 1, "b": 2}}"#, "a", "/a"),
            (r#"{"k/~": 1, "k/~": 2}"#, "k/~", "/k~1~0"),
            (
                r#"{"a": {"a": 1}, "b": {"a": 1}, "c": [{"a": 1}], "c": 2}"#,
                "c",
                "/c",
            ),
        ];
        for (input, key, pointer) in cases {
            match parse(input.as_bytes(), 8) {
                Err(ParseError::DuplicateKey {
                    key: got_key,
                    pointer: got_pointer,
                }) => assert_eq!(
                    (got_key.as_str(), got_pointer.as_str()),
                    (key, pointer),
                    "{input}"
                ),
                other => panic!("{input}: {other:?}"),
            }
        }
    }

    /// A body refused for a number beyond the double range names that number, not an
    /// inexact one before it, which alone would refuse only its item of a batch (the
    /// answer named `/0/amount`, and a client that fixed it was refused again).
    #[test]
    fn a_number_beyond_the_double_range_is_named_past_an_inexact_one() {
        let text = br#"[{"amount": 9007199254740993}, {"amount": 1e400}]"#;
        for err in [
            parse_reporting_numbers(text, 8, 1).unwrap_err(),
            parse(text, 8).unwrap_err(),
            parse_wide_integers(text, 8).unwrap_err(),
        ] {
            match err {
                ParseError::NumberOutOfRange {
                    field,
                    literal,
                    fault,
                } => assert_eq!(
                    (field.as_str(), literal.as_str(), fault),
                    ("/1/amount", "1e400", NumberFault::OutOfRange)
                ),
                other => panic!("{other:?}"),
            }
        }
        // Inexact alone: the item is reported, the body parsed.
        let (_, refused) =
            parse_reporting_numbers(br#"[{"amount": 9007199254740993}]"#, 8, 1).expect("parsed");
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].pointer, "/0/amount");
    }

    #[test]
    fn each_bad_input_gets_its_own_error() {
        let cases: &[(&[u8], &str)] = &[
            (b"{\"a\": \xff}", "invalid_utf8"),
            (b"{\"a\": NaN}", "non_finite_number"),
            (b"[1, -Infinity]", "non_finite_number"),
            (b"{\"a\": 1, \"a\": 2}", "duplicate_key"),
            (b"{\"a\": [[[1]]]}", "too_deep"),
            (b"{\"a\": ", "malformed_json"),
            (b"{\"a\": 1} trailing", "malformed_json"),
            (b"{\"a\": 1e400}", "number_out_of_range"),
            (b"{\"a\": 1e-400}", "number_out_of_range"),
            (b"{\"a\": [9007199254740993.0]}", "number_out_of_range"),
            (b"{\"a\": 9007199254740993}", "number_out_of_range"),
        ];
        for (input, code) in cases {
            let err = parse(input, 3).unwrap_err();
            assert_eq!(err.code(), *code, "{}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn a_refused_number_is_named_by_its_pointer() {
        let err = parse(br#"{"a": [0.1, {"b": 1e-400}]}"#, 8).unwrap_err();
        let ParseError::NumberOutOfRange { field, literal, .. } = err else {
            panic!("expected number_out_of_range, got {err:?}");
        };
        assert_eq!((field.as_str(), literal.as_str()), ("/a/1/b", "1e-400"));
        let err = parse(br#"{"big": 1e400, "x": 1}"#, 8).unwrap_err();
        assert!(matches!(err, ParseError::NumberOutOfRange { ref field, .. } if field == "/big"));
        assert!(parse(br#"{"a": 129.99, "b": 1.0, "c": 0.1, "d": 1e16}"#, 8).is_ok());
    }

    /// The container nested too deep is named by its pointer (keys escaped as RFC 6901
    /// says), whatever precedes it, empty or not.
    #[test]
    fn a_value_nested_too_deep_is_named_by_its_pointer() {
        let cases: &[(&str, usize, &str)] = &[
            (r#"{"a": [[1]]}"#, 2, "/a/0"),
            (
                r#"{"x": 1, "a/b~": {"c": [0, {}, {"d": {"e": 1}}]}}"#,
                4,
                "/a~1b~0/c/2/d",
            ),
            (r#"{"s": "[[[{\"", "k": [[["deep"]]]}"#, 3, "/k/0/0"),
            // An empty container at the limit stops the parse too.
            (r#"[[], [[{}]], [[{"z": 1}]]]"#, 3, "/1/0/0"),
            (r#"{"a": [[[]]], "b": [[[1]]]}"#, 3, "/a/0/0"),
        ];
        for (text, depth_max, pointer) in cases {
            let err = parse(text.as_bytes(), *depth_max).unwrap_err();
            assert_eq!(
                err,
                ParseError::TooDeep {
                    depth_max: *depth_max,
                    pointer: pointer.to_string()
                },
                "{text}"
            );
            assert!(
                err.to_string().ends_with(&format!("levels at {pointer}")),
                "{err}"
            );
        }
    }

    #[test]
    fn depth_counts_containers() {
        assert!(parse(b"{\"a\": [1]}", 2).is_ok());
        assert!(parse(b"{\"a\": [[1]]}", 2).is_err());
        assert!(parse(b"7", 0).is_ok());
        // `depth` counts as the parser does: the deepest document a limit takes is that deep.
        for text in [
            "7",
            "[]",
            "{\"a\": [1]}",
            "{\"a\": [[1]], \"b\": {}}",
            "[[[{}]], 1]",
        ] {
            let value = parse(text.as_bytes(), DEPTH_MAX_CEILING).expect(text);
            let measured = depth(&value);
            assert!(
                parse(text.as_bytes(), measured).is_ok(),
                "{text}: {measured}"
            );
            if measured > 0 {
                assert!(
                    parse(text.as_bytes(), measured - 1).is_err(),
                    "{text}: {measured}"
                );
            }
        }
    }

    #[test]
    fn a_very_deep_document_does_not_overflow_the_stack() {
        let deep = "[".repeat(100_000) + &"]".repeat(100_000);
        assert_eq!(
            parse(deep.as_bytes(), 10_000).unwrap_err().code(),
            "too_deep"
        );
    }
}

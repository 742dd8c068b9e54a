//! Which JSON number literals the canonical form can hold without merging two values.
//!
//! RFC 8785 writes every number as the shortest round-trip form of an IEEE double, so two
//! literals that round to the same double (`9007199254740993.0` and `9007199254740992.0`,
//! or `1e-400` and `0`) would get one identity and the second event would be lost as a
//! "duplicate". A literal is therefore accepted only when its exact decimal value equals
//! the value of its canonical double's shortest round-trip form: `0.1`, `1.0` and `129.99`
//! pass (their shortest forms are `0.1`, `1`, `129.99`), `9007199254740993.0` does not.
//! The rule is the same for integers written without fraction or exponent: within
//! ±(2^53−1) every one is exact; beyond it `10000000000000000` (10^16, a double exactly)
//! passes and `9007199254740993` does not. An earlier rule refused every integer literal
//! beyond 2^53−1 (I-JSON's range), but RFC 8785 itself writes the doubles between 2^53
//! and 10^21 as integer digits (`1e16` becomes `10000000000000000`), so the canonical
//! bytes of an accepted event were refused when read again (found by the `canonical_id`
//! fuzz target); one rule for every literal keeps the canonical form a valid input.

/// Why a number literal is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NumberFault {
    /// Beyond the range of an IEEE double (`1e400`).
    OutOfRange,
    /// Within range, but the nearest double's shortest form is a different number
    /// (`9007199254740993`, `9007199254740993.0`, `1e-400`, `10000000000000000.5`).
    NotExact,
}

/// Judges one JSON number literal (as it appears in the document).
pub fn check_literal(literal: &str) -> Result<(), NumberFault> {
    if obviously_exact(literal) {
        return Ok(());
    }
    full_check(literal)
}

/// The definition itself: compare the literal's exact decimal value with its canonical
/// double's shortest form.
fn full_check(literal: &str) -> Result<(), NumberFault> {
    let double: f64 = literal.parse().map_err(|_| NumberFault::OutOfRange)?;
    if !double.is_finite() {
        return Err(NumberFault::OutOfRange);
    }
    let shortest = ryu_js::Buffer::new().format(double).to_owned();
    if Decimal::of(literal) == Decimal::of(&shortest) {
        Ok(())
    } else {
        Err(NumberFault::NotExact)
    }
}

/// Most significant digits of a decimal that always survives the trip through a double:
/// DBL_DIG. Two different decimals of at most 15 significant digits never round to one
/// double (each comes back from its double when printed to 15 digits), so the shortest
/// round-trip form of that double is the literal's own value.
const EXACT_DIGITS_MAX: usize = 15;
/// Decimal exponents safely inside the normal range of doubles (no subnormals, no
/// overflow), where the DBL_DIG guarantee holds.
const EXACT_EXPONENT_ABS_MAX: i64 = 290;
/// Longest mantissa (digits and point) the fast path takes: 10^±(290 + 17) is inside the
/// normal range of doubles (2.2e-308 to 1.8e308).
const MANTISSA_BYTES_MAX: usize = 17;

/// The common case without parsing or allocating: at most [`EXACT_DIGITS_MAX`]
/// significant digits and a moderate exponent (`129.99`, `1.0`, `42`, `2.5e-7`). Measured
/// (`examples/identify_speed.rs`): the full check made the exactness scan cost two thirds
/// of a checkout event's parse; this keeps typical numbers to one pass over their bytes.
fn obviously_exact(literal: &str) -> bool {
    let unsigned = literal.strip_prefix('-').unwrap_or(literal);
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => (&unsigned[..at], parse_exponent(&unsigned[at + 1..])),
        None => (unsigned, 0),
    };
    if mantissa.len() == unsigned.len() && !mantissa.contains('.') {
        // Integer syntax: 15 digits stay below 2^53−1 (I-JSON's range).
        return unsigned.len() <= EXACT_DIGITS_MAX;
    }
    // A short mantissa moves the magnitude by at most its length, so with the exponent
    // bounded the value stays in the normal range.
    if mantissa.len() > MANTISSA_BYTES_MAX || exponent.abs() > EXACT_EXPONENT_ABS_MAX {
        return false;
    }
    // Significant digits: from the first non-zero digit to the last non-zero one.
    let (mut digits, mut trailing_zeros) = (0usize, 0usize);
    for byte in mantissa.bytes().filter(u8::is_ascii_digit) {
        if digits == 0 && byte == b'0' {
            continue;
        }
        digits += 1;
        trailing_zeros = if byte == b'0' { trailing_zeros + 1 } else { 0 };
    }
    digits - trailing_zeros <= EXACT_DIGITS_MAX
}

/// A refused number found in a document: the RFC 6901 pointer of its place, the literal
/// and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedNumber {
    /// RFC 6901 pointer of the number in the document.
    pub pointer: String,
    /// The number as written.
    pub literal: String,
    /// Which rule it breaks.
    pub fault: NumberFault,
}

/// The first number literal of `text` (a JSON document, valid at least up to that number)
/// that [`check_literal`] refuses, with its pointer.
pub fn first_refused(text: &str) -> Option<RefusedNumber> {
    first_refused_unless(text, |_| false)
}

/// Whether `literal` is an integer that a 64-bit integer holds exactly (from
/// `-9223372036854775808` to `18446744073709551615`): `serde_json` keeps such a number
/// exactly, and writes it back as it was.
pub fn is_wide_integer(literal: &str) -> bool {
    let digits = literal.strip_prefix('-').unwrap_or(literal);
    !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (literal.parse::<i64>().is_ok() || literal.parse::<u64>().is_ok())
}

/// [`first_refused`] that lets every [`is_wide_integer`] pass.
pub fn first_refused_beyond_wide_integers(text: &str) -> Option<RefusedNumber> {
    first_refused_unless(text, is_wide_integer)
}

/// The first number literal of `text` beyond the double range (`1e400`), with its
/// pointer: where the parser stopped, whatever number before it breaks only the
/// exactness rule (one such refuses an item of a batch, not the whole body, and naming it
/// sent a client to fix the wrong number).
pub fn first_out_of_range(text: &str) -> Option<RefusedNumber> {
    first_refused_unless(text, |literal| {
        check_literal(literal) != Err(NumberFault::OutOfRange)
    })
}

/// The first refused number literal of `text` that `passes` does not let through.
fn first_refused_unless(text: &str, passes: fn(&str) -> bool) -> Option<RefusedNumber> {
    let mut first = None;
    scan_with(text, &mut |frames, literal, fault| {
        if passes(literal) {
            return true;
        }
        first = Some(RefusedNumber {
            pointer: pointer_of(text, frames),
            literal: literal.to_string(),
            fault,
        });
        false
    });
    first
}

/// The first number literal that [`check_literal`] refuses in each item of the valid
/// JSON document `text`, in document order. An item is what the first `item_depth`
/// levels of the pointer name (`/3` at depth 1, `/batch/3` at depth 2): a batch is judged
/// item by item, and one refusal is all an item needs. Listing every refused number
/// instead cost a pointer each, every one copying the keys above it: a 5 MiB body of
/// numbers under one long key asked for terabytes.
pub fn first_refused_per_item(text: &str, item_depth: usize) -> Vec<RefusedNumber> {
    let mut all = Vec::new();
    let mut last_item: Option<Vec<(usize, usize)>> = None;
    scan_with(text, &mut |frames, literal, fault| {
        let item: Vec<(usize, usize)> = frames
            .iter()
            .take(item_depth)
            .map(|frame| match frame {
                Frame::Object { key, .. } => *key,
                Frame::Array { index } => (usize::MAX, *index),
            })
            .collect();
        if last_item.as_ref() != Some(&item) {
            all.push(RefusedNumber {
                pointer: pointer_of(text, frames),
                literal: literal.to_string(),
                fault,
            });
            last_item = Some(item);
        }
        true
    });
    all
}

/// Calls `found` with the open containers, the literal and the fault of each refused
/// number in document order while it returns true.
fn scan_with(text: &str, found: &mut dyn FnMut(&[Frame], &str, NumberFault) -> bool) {
    scan_values(text, &mut |frames, value| match value {
        Scanned::Literal(literal)
            if literal.starts_with(|c: char| c == '-' || c.is_ascii_digit()) =>
        {
            match check_literal(literal) {
                Err(fault) => found(frames, literal, fault),
                Ok(()) => true,
            }
        }
        _ => true,
    });
}

/// A value [`scan_values`] meets.
pub(crate) enum Scanned<'a> {
    /// A number, `true`, `false` or `null`, as written.
    Literal(&'a str),
    /// A string.
    Text,
    /// An object or an array, before its members.
    Container,
}

/// Calls `at_value` at each value of the JSON text `text`, in document order, while it
/// returns true: with the containers open around it ([`pointer_of`] names it) and what
/// it is. Keys are no values. A scan of the text, not a parse: for error paths and for
/// the numbers' check, which need a value's place.
pub(crate) fn scan_values(text: &str, at_value: &mut dyn FnMut(&[Frame], Scanned) -> bool) {
    let bytes = text.as_bytes();
    let mut frames: Vec<Frame> = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'"' => {
                let end = string_end(bytes, at);
                match frames.last_mut() {
                    Some(Frame::Object { key, expect_key }) if *expect_key => {
                        *key = (at, end);
                        *expect_key = false;
                    }
                    _ => {
                        if !at_value(&frames, Scanned::Text) {
                            return;
                        }
                    }
                }
                at = end;
                continue;
            }
            open @ (b'{' | b'[') => {
                if !at_value(&frames, Scanned::Container) {
                    return;
                }
                frames.push(if open == b'{' {
                    Frame::Object {
                        key: (at, at),
                        expect_key: true,
                    }
                } else {
                    Frame::Array { index: 0 }
                });
            }
            b'}' | b']' => {
                frames.pop();
            }
            b',' => match frames.last_mut() {
                Some(Frame::Array { index }) => *index += 1,
                Some(Frame::Object { expect_key, .. }) => *expect_key = true,
                None => {}
            },
            b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => {
                let end = at
                    + bytes[at..]
                        .iter()
                        .take_while(|b| {
                            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'+' | b'.')
                        })
                        .count();
                if !at_value(&frames, Scanned::Literal(&text[at..end])) {
                    return;
                }
                at = end;
                continue;
            }
            _ => {}
        }
        at += 1;
    }
}

/// One open container while scanning: an object with the span of its current key (quotes
/// included), or an array with the index of its current item.
pub(crate) enum Frame {
    Object {
        /// The span of the current key in the text, its quotes included.
        key: (usize, usize),
        expect_key: bool,
    },
    Array {
        index: usize,
    },
}

/// The offset just past the string literal that starts (with its quote) at `start`.
pub(crate) fn string_end(bytes: &[u8], start: usize) -> usize {
    let mut at = start + 1;
    while at < bytes.len() {
        match bytes[at] {
            b'\\' => at += 2,
            b'"' => return at + 1,
            _ => at += 1,
        }
    }
    bytes.len()
}

/// The RFC 6901 pointer of the value `frames` (of a scan of `text`) are open around.
pub(crate) fn pointer_of(text: &str, frames: &[Frame]) -> String {
    let mut pointer = String::new();
    for frame in frames {
        pointer.push('/');
        match frame {
            Frame::Array { index } => pointer.push_str(&index.to_string()),
            Frame::Object {
                key: (from, to), ..
            } => {
                let key: String = serde_json::from_str(&text[*from..*to]).unwrap_or_default();
                pointer.push_str(&key.replace('~', "~0").replace('/', "~1"));
            }
        }
    }
    pointer
}

/// A decimal number as its significant digits (no leading or trailing zeros) and the
/// power of ten of the place just before the first digit: the value is
/// `0.digits × 10^exponent`. Zero has no digits (and exponent 0), whatever its sign.
#[derive(Debug, PartialEq, Eq)]
struct Decimal {
    digits: String,
    exponent: i64,
    negative: bool,
}

impl Decimal {
    /// Reads a JSON or ECMAScript number literal (`-12.5e+3`); the exponent saturates,
    /// which cannot make two different finite doubles' forms compare equal.
    fn of(literal: &str) -> Decimal {
        let (negative, unsigned) = match literal.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, literal),
        };
        let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
            Some(at) => (&unsigned[..at], parse_exponent(&unsigned[at + 1..])),
            None => (unsigned, 0),
        };
        let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let all: String = whole.chars().chain(fraction.chars()).collect();
        let leading = all.bytes().take_while(|b| *b == b'0').count();
        let digits = all[leading..].trim_end_matches('0').to_string();
        if digits.is_empty() {
            return Decimal {
                digits,
                exponent: 0,
                negative: false,
            };
        }
        let places = whole.len() as i64 - leading as i64;
        Decimal {
            digits,
            exponent: exponent.saturating_add(places),
            negative,
        }
    }
}

fn parse_exponent(text: &str) -> i64 {
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let magnitude = digits.bytes().fold(0i64, |acc, b| {
        acc.saturating_mul(10)
            .saturating_add(i64::from(b.wrapping_sub(b'0')))
    });
    if negative {
        -magnitude
    } else {
        magnitude
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_judged_by_their_exact_decimal_value() {
        let cases: &[(&str, Result<(), NumberFault>)] = &[
            ("0", Ok(())),
            ("-0", Ok(())),
            ("0.0", Ok(())),
            ("-0.0e5", Ok(())),
            ("1.0", Ok(())),
            ("0.1", Ok(())),
            ("129.99", Ok(())),
            ("1e16", Ok(())),
            ("1E+16", Ok(())),
            ("2.5e-7", Ok(())),
            ("1.7976931348623157e308", Ok(())),
            ("5e-324", Ok(())),
            ("9007199254740991", Ok(())),
            ("-9007199254740991", Ok(())),
            ("9007199254740992", Ok(())),
            ("-9007199254740993", Err(NumberFault::NotExact)),
            ("6666666606666000000", Ok(())),
            ("6666666606666000001", Err(NumberFault::NotExact)),
            ("9007199254740993.0", Err(NumberFault::NotExact)),
            ("10000000000000001.0", Err(NumberFault::NotExact)),
            ("10000000000000000.5", Err(NumberFault::NotExact)),
            ("0.30000000000000001", Err(NumberFault::NotExact)),
            ("1e-400", Err(NumberFault::NotExact)),
            ("-1e-99999999999999999999", Err(NumberFault::NotExact)),
            ("1e400", Err(NumberFault::OutOfRange)),
            ("10000000000000000", Ok(())),
            ("999999999999999", Ok(())),
            ("0.000000000000001e-290", Ok(())),
            ("123456789012345e290", Ok(())),
            ("-1.8e308", Err(NumberFault::OutOfRange)),
        ];
        for (literal, expected) in cases {
            assert_eq!(check_literal(literal), *expected, "{literal}");
        }
        // Magnitudes written out in full, without an exponent.
        let tiny = format!("0.{}1", "0".repeat(400));
        assert_eq!(check_literal(&tiny), Err(NumberFault::NotExact));
        let huge = format!("1{}.0", "0".repeat(400));
        assert_eq!(check_literal(&huge), Err(NumberFault::OutOfRange));
        let long_but_exact = format!("0.{}1", "0".repeat(20));
        assert_eq!(check_literal(&long_but_exact), Ok(()));
    }

    #[test]
    fn the_first_refused_number_is_found_with_its_pointer() {
        let cases: &[(&str, Option<&str>)] = &[
            (r#"{"a": 1.5, "b": [1, 2]}"#, None),
            (r#"{"a": 1.5, "b": [1, 1e-400]}"#, Some("/b/1")),
            (
                r#"{"x": "1e-400", "y": {"z~/": 9007199254740993.0}}"#,
                Some("/y/z~0~1"),
            ),
            (
                r#"{"k\"e,y": [{"a": 1}, {"b": 1e400}]}"#,
                Some("/k\"e,y/1/b"),
            ),
            ("1e400", Some("")),
            (
                r#"[true, null, false, "a]", -9007199254740993]"#,
                Some("/4"),
            ),
        ];
        for (text, pointer) in cases {
            let found = first_refused(text).map(|refused| refused.pointer);
            assert_eq!(found.as_deref(), *pointer, "{text}");
        }
    }

    proptest::proptest! {
        #[test]
        fn the_fast_path_never_accepts_what_the_definition_refuses(
            negative: bool,
            whole in "[0-9]{0,12}",
            fraction in proptest::option::of("[0-9]{0,12}"),
            exponent in proptest::option::of(-330i32..330),
        ) {
            let whole = if whole.is_empty() { "0".to_string() } else { whole };
            let mut literal = format!("{}{whole}", if negative { "-" } else { "" });
            if let Some(fraction) = fraction.filter(|f| !f.is_empty()) {
                literal.push('.');
                literal.push_str(&fraction);
            }
            if let Some(exponent) = exponent {
                literal.push_str(&format!("e{exponent}"));
            }
            if obviously_exact(&literal) {
                proptest::prop_assert_eq!(full_check(&literal), Ok(()), "{}", literal);
            }
        }

        #[test]
        fn every_double_written_in_its_shortest_form_is_accepted(bits: u64) {
            let double = f64::from_bits(bits);
            proptest::prop_assume!(double.is_finite());
            let literal = ryu_js::Buffer::new().format(double).to_string();
            proptest::prop_assert_eq!(check_literal(&literal), Ok(()), "{}", literal);
        }
    }

    #[test]
    fn the_first_refused_number_of_each_item_is_listed() {
        let text = r#"[{"a": 1e-400}, {"a": 0.5}, {"a": [1, 9007199254740993.0, 2e-999]}]"#;
        let pointers = |depth| -> Vec<String> {
            first_refused_per_item(text, depth)
                .into_iter()
                .map(|r| r.pointer)
                .collect()
        };
        assert_eq!(pointers(1), ["/0/a", "/2/a/1"]);
        assert_eq!(pointers(3), ["/0/a", "/2/a/1", "/2/a/2"]);
        let segment = r#"{"context": {"n": 1e-400, "m": 2e-400}, "batch": [{"p": 1e-400}, {"q": [3e-400, 4e-400]}]}"#;
        let pointers: Vec<String> = first_refused_per_item(segment, 2)
            .into_iter()
            .map(|r| r.pointer)
            .collect();
        assert_eq!(
            pointers,
            ["/context/n", "/context/m", "/batch/0/p", "/batch/1/q/0"]
        );
    }

    /// Many refused numbers under one long key: one pointer, not one per number (a
    /// pointer each made the work, and the memory, grow with the square of the body).
    #[test]
    fn refused_numbers_under_a_long_key_cost_one_pointer_per_item() {
        let key = "k".repeat(20_000);
        let numbers = vec!["1e-400"; 20_000].join(",");
        let text = format!(r#"[{{"{key}": [{numbers}]}}]"#);
        let refused = first_refused_per_item(&text, 1);
        assert_eq!(refused.len(), 1);
        let total: usize = refused.iter().map(|r| r.pointer.len()).sum();
        assert!(total <= text.len(), "{total} bytes of pointers");
    }
}

//! The canonical form: Unicode NFC strings and keys, integers inside the exact range of
//! IEEE doubles, and RFC 8785 (JCS) bytes: sorted keys, no whitespace, ECMAScript numbers.

use serde_json::{Number, Value};
use unicode_normalization::UnicodeNormalization;

use crate::IdentityError;

/// The largest integer magnitude an RFC 8785 number (an IEEE double) holds exactly.
pub const EXACT_INTEGER_MAX: u64 = (1 << 53) - 1;

/// Returns `value` with every string and object key in Unicode NFC, refusing keys that
/// collide after normalisation and integers no IEEE double holds exactly.
/// `at` is the pointer of `value` in its document, used in error messages.
pub fn normalize(value: &Value, at: &str) -> Result<Value, IdentityError> {
    let mut owned = value.clone();
    normalize_in_place(&mut owned, at)?;
    Ok(owned)
}

/// [`normalize`] that keeps every integer a 64-bit integer holds, beyond ±2^53 too, for
/// documents whose large integers are data (OpenLineage facets). The canonical bytes
/// ([`jcs`]) write such an integer's exact digits, so two of them never hash alike.
/// Nothing else differs from [`normalize`].
pub fn normalize_wide(value: &Value, at: &str) -> Result<Value, IdentityError> {
    let mut owned = value.clone();
    normalize_with(&mut owned, at, true)?;
    Ok(owned)
}

/// [`normalize_wide`] without copying: rewrites only the strings and objects that need it.
pub fn normalize_wide_in_place(value: &mut Value, at: &str) -> Result<(), IdentityError> {
    normalize_with(value, at, true)
}

/// [`normalize`] without copying: rewrites only the strings and objects that need it.
pub fn normalize_in_place(value: &mut Value, at: &str) -> Result<(), IdentityError> {
    normalize_with(value, at, false)
}

fn normalize_with(value: &mut Value, at: &str, wide: bool) -> Result<(), IdentityError> {
    normalize_node(value, wide).map_err(|fault| {
        let mut field = at.to_string();
        for token in fault.path.iter().rev() {
            field.push('/');
            field.push_str(&escape_token(token));
        }
        match fault.key {
            Some(key) => {
                field.push('/');
                field.push_str(&escape_token(&key));
                IdentityError::DuplicateKeyAfterNormalization { field, key }
            }
            None => IdentityError::NumberOutOfRange { field },
        }
    })
}

/// A normalisation fault and the reversed path to it (built only on the error path, so
/// the common case allocates nothing for pointers).
struct Fault {
    key: Option<String>,
    path: Vec<String>,
}

fn normalize_node(value: &mut Value, wide: bool) -> Result<(), Fault> {
    match value {
        Value::String(text) => {
            if !is_nfc(text) {
                *text = text.nfc().collect();
            }
        }
        Value::Number(number) if !wide && !is_exact(number) => {
            return Err(Fault {
                key: None,
                path: Vec::new(),
            })
        }
        Value::Array(items) => {
            for (index, item) in items.iter_mut().enumerate() {
                normalize_node(item, wide).map_err(|mut fault| {
                    fault.path.push(index.to_string());
                    fault
                })?;
            }
        }
        Value::Object(map) if map.keys().all(|key| is_nfc(key)) => {
            for (key, item) in map.iter_mut() {
                normalize_node(item, wide).map_err(|mut fault| {
                    fault.path.push(key.clone());
                    fault
                })?;
            }
        }
        Value::Object(map) => {
            for (key, mut item) in std::mem::take(map) {
                let key = nfc(&key);
                normalize_node(&mut item, wide).map_err(|mut fault| {
                    fault.path.push(key.clone());
                    fault
                })?;
                if map.contains_key(&key) {
                    return Err(Fault {
                        key: Some(key),
                        path: Vec::new(),
                    });
                }
                map.insert(key, item);
            }
        }
        Value::Number(_) | Value::Null | Value::Bool(_) => {}
    }
    Ok(())
}

/// RFC 8785 canonical bytes of an already-normalised value.
///
/// Written here rather than calling `serde_json_canonicalizer` because a measurement
/// (`examples/identify_speed.rs`) showed the crate spending most of identification's time
/// re-parsing every key to sort it; the crate stays the reference this writer is tested
/// against.
pub fn jcs(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write_jcs(value, &mut out);
    out
}

/// RFC 8785 bytes of an object given as members already in [`key_order`], with distinct keys.
pub fn jcs_object<'a>(members: impl Iterator<Item = (&'a str, &'a Value)>) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write_members(members, &mut out);
    out
}

/// [`jcs`] of `value`, and, when `value` is an object with a member `key`, the byte range
/// of that member (`"key":value`, without a separating comma): a caller can derive the
/// bytes of the same object with that member changed or left out without writing the
/// rest again (the member order is the same whatever its value).
pub fn jcs_marking(value: &Value, key: &str) -> (Vec<u8>, Option<std::ops::Range<usize>>) {
    let Value::Object(map) = value else {
        return (jcs(value), None);
    };
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_unstable_by(|a, b| key_order(a.0, b.0));
    let mut out = Vec::with_capacity(256);
    let mut span = None;
    out.push(b'{');
    for (index, (name, item)) in entries.into_iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        let start = out.len();
        write_string(name, &mut out);
        out.push(b':');
        write_jcs(item, &mut out);
        if name == key {
            span = Some(start..out.len());
        }
    }
    out.push(b'}');
    (out, span)
}

/// RFC 8785 member order: by UTF-16 code units.
pub fn key_order(a: &str, b: &str) -> std::cmp::Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

fn write_jcs(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(number) => write_number(number, out),
        Value::String(text) => write_string(text, out),
        Value::Array(items) => {
            out.push(b'[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                write_jcs(item, out);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            // Code-point (UTF-8 byte) order equals UTF-16 order unless a key holds a
            // character at or above U+E000 (UTF-8 lead byte 0xEE or more). A map that
            // already iterates in that order (serde_json's `Map` is a B-tree unless a
            // dependency turns on `preserve_order`, so it is checked, not assumed) is
            // written as it stands, without collecting and sorting its members.
            let plain = map.keys().all(|key| key.bytes().all(|b| b < 0xee));
            if plain && map.keys().zip(map.keys().skip(1)).all(|(a, b)| a < b) {
                write_members(map.iter(), out);
                return;
            }
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            if plain {
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            } else {
                entries.sort_unstable_by(|a, b| key_order(a.0, b.0));
            }
            write_members(entries.into_iter(), out);
        }
    }
}

/// `{"key":value,…}` of members already in order.
fn write_members<'a, K: AsRef<str>>(
    members: impl Iterator<Item = (K, &'a Value)>,
    out: &mut Vec<u8>,
) {
    out.push(b'{');
    for (index, (key, value)) in members.enumerate() {
        if index > 0 {
            out.push(b',');
        }
        write_string(key.as_ref(), out);
        out.push(b':');
        write_jcs(value, out);
    }
    out.push(b'}');
}

/// ECMAScript's `Number::toString` of the number's double, as RFC 8785 requires (an
/// integer within ±2^53 is its digits; `2^60` is `1152921504606847000`). An integer no
/// double holds, which only a RunEvent may carry ([`normalize_wide`]), is written as its
/// exact digits instead of its nearest double's, so two such integers that round to one
/// double do not hash alike; every other number is written as before.
fn write_number(number: &Number, out: &mut Vec<u8>) {
    let inexact_integer = match (number.as_i64(), number.as_u64()) {
        (Some(integer), _) => (integer.unsigned_abs() <= EXACT_INTEGER_MAX
            || !held_by_a_double(i128::from(integer)))
        .then(|| integer.to_string()),
        (None, Some(integer)) => {
            (!held_by_a_double(i128::from(integer))).then(|| integer.to_string())
        }
        (None, None) => None,
    };
    match inexact_integer {
        Some(digits) => out.extend_from_slice(digits.as_bytes()),
        None => {
            let double = number.as_f64().unwrap_or(0.0);
            out.extend_from_slice(ryu_js::Buffer::new().format(double).as_bytes());
        }
    }
}

/// Whether the double nearest `integer` (a 64-bit integer's value) is `integer` itself.
fn held_by_a_double(integer: i128) -> bool {
    // The casts are exact for |integer| < 2^64: a double holds such an integer's nearest
    // value within 2^64 and i128 holds it back.
    (integer as f64) as i128 == integer
}

fn write_string(text: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    // Runs of bytes that need no escape are copied at once; only `"`, `\\` and the
    // control characters below 0x20 are escaped (RFC 8785, section 3.2.2.2).
    let mut plain_from = 0;
    for (at, &byte) in bytes.iter().enumerate() {
        let escaped: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x09 => b"\\t",
            0x0a => b"\\n",
            0x0c => b"\\f",
            0x0d => b"\\r",
            0x00..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[plain_from..at]);
        plain_from = at + 1;
        if escaped.is_empty() {
            let (high, low) = (HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 0xf)]);
            out.extend_from_slice(&[b'\\', b'u', b'0', b'0', high, low]);
        } else {
            out.extend_from_slice(escaped);
        }
    }
    out.extend_from_slice(&bytes[plain_from..]);
    out.push(b'"');
}

/// Rounds `number` half away from zero to `decimals` places, in decimal arithmetic on its
/// shortest round-trip representation (so `1.005` rounds to `1.01`, as a person expects,
/// not to `1.00` as binary arithmetic would). Integers are returned unchanged.
pub fn round_decimal(number: &Number, decimals: u32) -> Number {
    let Some(x) = number.as_f64().filter(|_| number.is_f64()) else {
        return number.clone();
    };
    let scientific = format!("{:e}", x.abs());
    let Some((mantissa, exponent)) = scientific.split_once('e') else {
        return number.clone();
    };
    let Ok(exponent) = exponent.parse::<i64>() else {
        return number.clone();
    };
    let digits: Vec<u8> = mantissa.bytes().filter(u8::is_ascii_digit).collect();
    // value = 0.d1d2..dn × 10^(exponent + 1); places after the decimal point:
    let places = digits.len() as i64 - 1 - exponent;
    if places <= i64::from(decimals) {
        return number.clone();
    }
    let keep = digits.len() as i64 - (places - i64::from(decimals));
    let mut kept: Vec<u8> = if keep > 0 {
        digits[..keep as usize].to_vec()
    } else {
        vec![b'0']
    };
    let next = if keep >= 0 {
        digits.get(keep as usize).copied().unwrap_or(b'0')
    } else {
        b'0'
    };
    if next >= b'5' {
        increment(&mut kept);
    }
    let sign = if x.is_sign_negative() { "-" } else { "" };
    let text = format!("{sign}{}e-{decimals}", String::from_utf8_lossy(&kept));
    text.parse::<f64>()
        .ok()
        .and_then(Number::from_f64)
        .unwrap_or_else(|| number.clone())
}

/// Escapes a key as an RFC 6901 reference token.
pub fn escape_token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The name of a JSON value's type, for error messages.
pub fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn increment(digits: &mut Vec<u8>) {
    for digit in digits.iter_mut().rev() {
        if *digit == b'9' {
            *digit = b'0';
        } else {
            *digit += 1;
            return;
        }
    }
    digits.insert(0, b'1');
}

/// Whether `text` is in Unicode NFC. ASCII text always is, and is told apart a machine
/// word at a time (`str::is_ascii`) instead of a character at a time: most keys and
/// values of real events are ASCII.
pub(crate) fn is_nfc(text: &str) -> bool {
    text.is_ascii() || unicode_normalization::is_nfc(text)
}

/// `text` in Unicode NFC, as [`normalize`] leaves every string and key of an event: for
/// names the server matches against identified events (lineage node names, a metric
/// binding's event name and pointers).
pub fn nfc(text: &str) -> String {
    if is_nfc(text) {
        text.to_owned()
    } else {
        text.nfc().collect()
    }
}

/// Unicode's default-ignorable code points (shown as nothing: zero-width spaces and
/// joiners, bidirectional controls, a byte-order mark, a soft hyphen, variation selectors)
/// and its space separators other than the ASCII space (shown as one): what names people
/// read and copy (tenants, sources, campaigns) must not hold.
pub fn invisible(c: char) -> bool {
    matches!(c,
        '\u{00A0}' | '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}'..='\u{1160}'
        | '\u{1680}' | '\u{17B4}'..='\u{17B5}' | '\u{180B}'..='\u{180F}'
        | '\u{2000}'..='\u{200F}' | '\u{202A}'..='\u{202F}' | '\u{205F}'..='\u{206F}'
        | '\u{3000}' | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}' | '\u{FFA0}'
        | '\u{FFF0}'..='\u{FFF8}' | '\u{1BCA0}'..='\u{1BCA3}' | '\u{1D173}'..='\u{1D17A}'
        | '\u{E0000}'..='\u{E0FFF}'
        // Other format characters (category Cf) that are not default-ignorable.
        | '\u{0600}'..='\u{0605}' | '\u{06DD}' | '\u{070F}' | '\u{0890}'..='\u{0891}'
        | '\u{08E2}' | '\u{110BD}' | '\u{110CD}' | '\u{13430}'..='\u{1343F}'
        | '\u{FFF9}'..='\u{FFFB}')
}

/// Whether the canonical form (an IEEE double) holds `number` exactly: always within
/// ±[`EXACT_INTEGER_MAX`] and for floats (already doubles); beyond it, by the body
/// reader's own rule ([`crate::number::check_literal`]).
fn is_exact(number: &Number) -> bool {
    let magnitude = match (number.as_u64(), number.as_i64()) {
        (Some(u), _) => u,
        (None, Some(i)) => i.unsigned_abs(),
        (None, None) => return true,
    };
    magnitude <= EXACT_INTEGER_MAX || crate::number::check_literal(&number.to_string()).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_ascii_shortcut_agrees_with_the_full_nfc_check() {
        let samples = [
            String::new(),
            (0u8..0x80).map(char::from).collect(),
            "caf\u{e9}".to_string(),
            "cafe\u{301}".to_string(),
            "\u{212b}ngstr\u{f6}m".to_string(),
            "\u{1e9b}\u{323}".to_string(),
        ];
        for text in &samples {
            assert_eq!(
                is_nfc(text),
                unicode_normalization::is_nfc(text),
                "{text:?}"
            );
        }
        assert!(!is_nfc("cafe\u{301}"));
    }

    #[test]
    fn strings_are_escaped_as_ecmascript_json_does_byte_for_byte() {
        let mut samples: Vec<String> = (0u32..0x80)
            .filter_map(char::from_u32)
            .map(|c| format!("a{c}b{c}"))
            .collect();
        samples.extend(
            [
                "",
                "plain",
                "\"\\\"",
                "\u{7f}\u{80}é€😀",
                "tab\tend\n",
                "\u{0}\u{1f}x",
            ]
            .map(str::to_string),
        );
        for sample in samples {
            let mut out = Vec::new();
            write_string(&sample, &mut out);
            let expected = serde_json::to_string(&sample).unwrap();
            assert_eq!(String::from_utf8(out).unwrap(), expected, "{sample:?}");
        }
    }

    fn round(x: f64, decimals: u32) -> f64 {
        round_decimal(&Number::from_f64(x).unwrap(), decimals)
            .as_f64()
            .unwrap()
    }

    #[test]
    fn rounding_is_decimal_half_away_from_zero() {
        let cases = [
            (1.005, 2, 1.01),
            (2.675, 2, 2.68),
            (-1.005, 2, -1.01),
            (12.344999, 2, 12.34),
            (0.0049, 2, 0.0),
            (0.005, 2, 0.01),
            (9.995, 2, 10.0),
            (1e-20, 3, 0.0),
            (123.456, 0, 123.0),
            (1.5, 0, 2.0),
            (1.25, 5, 1.25),
            (1e21, 2, 1e21),
        ];
        for (input, decimals, expected) in cases {
            assert_eq!(round(input, decimals), expected, "{input} to {decimals}");
        }
        assert_eq!(round_decimal(&Number::from(7), 2), Number::from(7));
    }

    #[test]
    fn jcs_sorts_keys_and_formats_numbers_like_ecmascript() {
        let value = json!({"b": 1.0, "a": [1e21, 0.1, -0.0, 100], "é": "x"});
        assert_eq!(
            String::from_utf8(jcs(&value)).unwrap(),
            r#"{"a":[1e+21,0.1,0,100],"b":1,"é":"x"}"#
        );
    }

    #[test]
    fn the_writer_matches_the_reference_canonicaliser() {
        let values = [
            json!({"b": [1, 2.5, -0.0, 1e21, 1e-7, 123456789012345u64], "a": {"z": null, "y": true}}),
            json!({"\u{e9}": 1, "\u{1f600}": 2, "\u{ff61}": 3, "z": 4, "": 5}),
            json!([
                "\"quote\" \\ back",
                "\u{0}\u{1f}\u{7f}\u{2028}",
                "tab\tnew\nline\r\u{8}\u{c}"
            ]),
            json!(-9_007_199_254_740_991i64),
            // Integers beyond 2^53 that a double holds exactly: RFC 8785's form.
            json!(1_152_921_504_606_846_976u64),
            json!(-1_152_921_504_606_846_976i64),
            json!(9_223_372_036_854_775_808u64),
            json!(0.1 + 0.2),
        ];
        for value in values {
            let reference = serde_json_canonicalizer::to_vec(&value).unwrap();
            let ours = String::from_utf8(jcs(&value)).unwrap();
            assert_eq!(ours, String::from_utf8(reference).unwrap());
        }
    }

    #[test]
    fn an_integer_no_double_holds_is_written_exactly() {
        // RFC 8785 would write the nearest double (`9007199254740992`), merging it with
        // 2^53; such integers reach the writer only from RunEvents (`normalize_wide`).
        for (value, text) in [
            (json!(9_007_199_254_740_993u64), "9007199254740993"),
            (json!(8_744_736_658_442_914_487u64), "8744736658442914487"),
            (json!(u64::MAX), "18446744073709551615"),
            (json!(i64::MIN + 1), "-9223372036854775807"),
            // A double holds -2^63 exactly: RFC 8785's form, as before.
            (json!(i64::MIN), "-9223372036854776000"),
        ] {
            assert_eq!(String::from_utf8(jcs(&value)).unwrap(), text);
        }
    }

    #[test]
    fn normalisation_composes_strings_and_keys() {
        let value = json!({"cafe\u{301}": "cafe\u{301}"});
        assert_eq!(
            normalize(&value, "").unwrap(),
            json!({"caf\u{e9}": "caf\u{e9}"})
        );
        let clash = json!({"cafe\u{301}": 1, "caf\u{e9}": 2});
        assert_eq!(normalize(&clash, "").unwrap_err().code(), "duplicate_key");
    }

    #[test]
    fn integers_beyond_two_to_the_53_are_refused() {
        assert!(normalize(&json!({"n": 9_007_199_254_740_991u64}), "").is_ok());
        let err = normalize(&json!({"n": [9_007_199_254_740_993u64]}), "").unwrap_err();
        assert_eq!(err.field(), "/n/0");
        assert!(normalize(&json!(-9_007_199_254_740_993i64), "").is_err());
    }
}

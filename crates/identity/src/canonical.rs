//! The canonical form: Unicode NFC strings and keys, integers inside the exact range of
//! IEEE doubles, and RFC 8785 (JCS) bytes: sorted keys, no whitespace, ECMAScript numbers.

use serde_json::{Map, Number, Value};
use unicode_normalization::{is_nfc, UnicodeNormalization};

use crate::IdentityError;

/// The largest integer magnitude an RFC 8785 number (an IEEE double) holds exactly.
pub const EXACT_INTEGER_MAX: u64 = (1 << 53) - 1;

/// Returns `value` with every string and object key in Unicode NFC, refusing keys that
/// collide after normalisation and integers outside ±[`EXACT_INTEGER_MAX`].
/// `at` is the pointer of `value` in its document, used in error messages.
pub fn normalize(value: &Value, at: &str) -> Result<Value, IdentityError> {
    Ok(match value {
        Value::String(text) => Value::String(nfc(text)),
        Value::Number(number) => {
            check_exact(number, at)?;
            value.clone()
        }
        Value::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (index, item) in items.iter().enumerate() {
                out.push(normalize(item, &format!("{at}/{index}"))?);
            }
            Value::Array(out)
        }
        Value::Object(map) => {
            let mut out = Map::new();
            for (key, item) in map {
                let key = nfc(key);
                let child = normalize(item, &format!("{at}/{}", escape_token(&key)))?;
                if out.insert(key.clone(), child).is_some() {
                    return Err(IdentityError::DuplicateKeyAfterNormalization {
                        field: at.to_string(),
                        key,
                    });
                }
            }
            Value::Object(out)
        }
        Value::Null | Value::Bool(_) => value.clone(),
    })
}

/// RFC 8785 canonical bytes of an already-normalised value.
pub fn jcs(value: &Value) -> Vec<u8> {
    // Serialising a `serde_json::Value` cannot fail: its numbers are finite and its keys
    // are strings; the canonicaliser only errors on those two conditions.
    serde_json_canonicalizer::to_vec(value).unwrap_or_default()
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

fn nfc(text: &str) -> String {
    if is_nfc(text) {
        text.to_owned()
    } else {
        text.nfc().collect()
    }
}

fn check_exact(number: &Number, at: &str) -> Result<(), IdentityError> {
    let out_of_range = match (number.as_u64(), number.as_i64()) {
        (Some(u), _) => u > EXACT_INTEGER_MAX,
        (None, Some(i)) => i.unsigned_abs() > EXACT_INTEGER_MAX,
        (None, None) => false,
    };
    if out_of_range {
        return Err(IdentityError::NumberOutOfRange {
            field: at.to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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

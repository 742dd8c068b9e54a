//! RFC 6901 JSON pointers: parsing, lookup and removal on `serde_json::Value`.

use serde_json::Value;

/// A parsed RFC 6901 pointer: the unescaped reference tokens, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pointer {
    text: String,
    tokens: Vec<String>,
}

impl Pointer {
    /// Parses a pointer. It must be non-empty (the whole document is never a field) and
    /// every `~` must be followed by `0` or `1`.
    pub fn parse(text: &str) -> Result<Pointer, String> {
        if text.is_empty() {
            return Err("a pointer must name a field, not the whole document (\"\")".into());
        }
        let Some(rest) = text.strip_prefix('/') else {
            return Err(format!("pointer {text:?} must start with '/' (RFC 6901)"));
        };
        let mut tokens = Vec::new();
        for raw in rest.split('/') {
            tokens.push(unescape(raw).ok_or_else(|| {
                format!("pointer {text:?} has a '~' not followed by 0 or 1 (RFC 6901)")
            })?);
        }
        Ok(Pointer {
            text: text.to_string(),
            tokens,
        })
    }

    /// The pointer as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The unescaped reference tokens.
    pub fn tokens(&self) -> &[String] {
        &self.tokens
    }

    /// The order in which to remove several pointers from one document: later array
    /// elements first (`/a/2` before `/a/1/x` before `/a/0`), so no removal shifts
    /// another pointer onto a different element. Sort with `a.removal_order(b)`.
    pub fn removal_order(&self, other: &Pointer) -> std::cmp::Ordering {
        other.removal_key().cmp(&self.removal_key())
    }

    /// The tokens as sort keys, array indices by number (`/a/10` after `/a/9`).
    fn removal_key(&self) -> Vec<(u8, u64, &str)> {
        self.tokens
            .iter()
            .map(|token| match token.parse::<u64>() {
                Ok(index) => (0, index, ""),
                Err(_) => (1, 0, token.as_str()),
            })
            .collect()
    }

    /// True when `self` equals `other` or one of them addresses a part of the other.
    pub fn overlaps(&self, other: &Pointer) -> bool {
        let n = self.tokens.len().min(other.tokens.len());
        self.tokens[..n] == other.tokens[..n]
    }

    /// Looks the pointer up in `doc`.
    pub fn get<'a>(&self, doc: &'a Value) -> Option<&'a Value> {
        let mut current = doc;
        for token in &self.tokens {
            current = step(current, token)?;
        }
        Some(current)
    }

    /// Removes the addressed value from `doc`, if present.
    pub fn remove(&self, doc: &mut Value) -> Option<Value> {
        let (last, parents) = self.tokens.split_last()?;
        let mut current = doc;
        for token in parents {
            current = step_mut(current, token)?;
        }
        match current {
            Value::Object(map) => map.remove(last),
            Value::Array(items) => {
                let index = array_index(last, items.len())?;
                Some(items.remove(index))
            }
            _ => None,
        }
    }

    /// Replaces the addressed value in `doc` when it is present; returns whether it was.
    pub fn replace(&self, doc: &mut Value, value: Value) -> bool {
        let mut current = doc;
        for token in &self.tokens {
            match step_mut(current, token) {
                Some(next) => current = next,
                None => return false,
            }
        }
        *current = value;
        true
    }
}

fn unescape(raw: &str) -> Option<String> {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '~' {
            match chars.next() {
                Some('0') => out.push('~'),
                Some('1') => out.push('/'),
                _ => return None,
            }
        } else {
            out.push(c);
        }
    }
    Some(out)
}

fn array_index(token: &str, len: usize) -> Option<usize> {
    // RFC 6901: decimal digits, no leading zeros (except "0" itself).
    if token.is_empty() || (token.len() > 1 && token.starts_with('0')) {
        return None;
    }
    if !token.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    token.parse::<usize>().ok().filter(|index| *index < len)
}

fn step<'a>(value: &'a Value, token: &str) -> Option<&'a Value> {
    match value {
        Value::Object(map) => map.get(token),
        Value::Array(items) => items.get(array_index(token, items.len())?),
        _ => None,
    }
}

fn step_mut<'a>(value: &'a mut Value, token: &str) -> Option<&'a mut Value> {
    match value {
        Value::Object(map) => map.get_mut(token),
        Value::Array(items) => {
            let index = array_index(token, items.len())?;
            items.get_mut(index)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn escaped_tokens_address_keys_with_slash_and_tilde() {
        let doc = json!({"a/b": {"m~n": 1}, "list": [10, 20]});
        assert_eq!(
            Pointer::parse("/a~1b/m~0n").unwrap().get(&doc),
            Some(&json!(1))
        );
        assert_eq!(
            Pointer::parse("/list/1").unwrap().get(&doc),
            Some(&json!(20))
        );
        assert_eq!(Pointer::parse("/list/01").unwrap().get(&doc), None);
        assert_eq!(Pointer::parse("/list/-").unwrap().get(&doc), None);
    }

    #[test]
    fn invalid_pointers_are_refused() {
        assert!(Pointer::parse("").is_err());
        assert!(Pointer::parse("a").is_err());
        assert!(Pointer::parse("/a~2").is_err());
    }

    #[test]
    fn remove_and_replace_touch_only_the_addressed_value() {
        let mut doc = json!({"a": {"b": 1, "c": 2}});
        assert_eq!(
            Pointer::parse("/a/b").unwrap().remove(&mut doc),
            Some(json!(1))
        );
        assert!(Pointer::parse("/a/c").unwrap().replace(&mut doc, json!(3)));
        assert!(!Pointer::parse("/a/zz/y")
            .unwrap()
            .replace(&mut doc, json!(3)));
        assert_eq!(doc, json!({"a": {"c": 3}}));
    }

    #[test]
    fn overlapping_pointers_are_detected() {
        let a = Pointer::parse("/a").unwrap();
        assert!(a.overlaps(&Pointer::parse("/a/b").unwrap()));
        assert!(!a.overlaps(&Pointer::parse("/ab").unwrap()));
    }
}

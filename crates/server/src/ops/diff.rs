//! The field-level difference of a collision's two payloads: pure, JSON pointer paths.

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// Most changes listed for one collision; a longer diff is cut and marked.
pub const DIFF_CHANGES_MAX: usize = 200;

/// Most bytes of paths and values one collision's diff lists (past its first change): a
/// diff repeats its path in every change, and 200 changes under a 450 KB key made one
/// collision's answer 181 MB.
pub const DIFF_BYTES_MAX: usize = 64 * 1024;

/// One difference between the stored payload and the incoming one.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct FieldChange {
    /// `added` (only incoming has it), `removed` (only stored has it) or `changed`.
    pub change: &'static str,
    /// The incoming value, any JSON value; absent when removed.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Value>)]
    pub incoming: Option<Value>,
    /// RFC 6901 JSON pointer of the field (`""` is the whole document).
    pub path: String,
    /// The stored value, any JSON value; absent when added.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Value>)]
    pub stored: Option<Value>,
    /// The field is (or lies under) a transport pointer of the contract version, left out
    /// of the fingerprint: it differs between retries and did not make the collision.
    pub transport: bool,
}

/// The changes from `stored` to `incoming`, objects by key (sorted), arrays by index,
/// anything else compared whole; at most [`DIFF_CHANGES_MAX`] and [`DIFF_BYTES_MAX`],
/// and whether it was cut. A change at or under one of the `transport` pointers (the
/// contract version's) is marked [`FieldChange::transport`].
pub fn diff(stored: &Value, incoming: &Value, transport: &[&str]) -> (Vec<FieldChange>, bool) {
    let mut out = Listed {
        transport,
        changes: Vec::new(),
        bytes: 0,
        truncated: false,
    };
    walk(stored, incoming, &mut String::new(), &mut out);
    (out.changes, out.truncated)
}

/// The changes listed so far, their bytes, and whether one was left out; the transport
/// pointers that mark a change.
struct Listed<'a> {
    transport: &'a [&'a str],
    changes: Vec<FieldChange>,
    bytes: usize,
    truncated: bool,
}

/// Whether the field at `path` is the one `pointer` names or lies under it; a pointer
/// `*/KEY` names a key `KEY` at any depth (OpenLineage's facet `_producer`).
fn under(path: &str, pointer: &str) -> bool {
    if let Some(key) = pointer.strip_prefix("*/") {
        return path.split('/').skip(1).any(|token| token == key);
    }
    path.strip_prefix(pointer)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

fn walk(stored: &Value, incoming: &Value, path: &mut String, out: &mut Listed<'_>) {
    if out.truncated {
        return;
    }
    match (stored, incoming) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let len = path.len();
                path.push('/');
                path.push_str(&escape(key));
                child(a.get(key.as_str()), b.get(key.as_str()), path, out);
                path.truncate(len);
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for index in 0..a.len().max(b.len()) {
                let len = path.len();
                path.push('/');
                path.push_str(&index.to_string());
                child(a.get(index), b.get(index), path, out);
                path.truncate(len);
            }
        }
        (a, b) if a == b => {}
        (a, b) => push(out, "changed", path, Some(a), Some(b)),
    }
}

fn child(
    stored: Option<&Value>,
    incoming: Option<&Value>,
    path: &mut String,
    out: &mut Listed<'_>,
) {
    match (stored, incoming) {
        (Some(a), Some(b)) => walk(a, b, path, out),
        (Some(a), None) => push(out, "removed", path, Some(a), None),
        (None, Some(b)) => push(out, "added", path, None, Some(b)),
        (None, None) => {}
    }
}

fn push(
    out: &mut Listed<'_>,
    change: &'static str,
    path: &str,
    stored: Option<&Value>,
    incoming: Option<&Value>,
) {
    let bytes = path.len() + stored.map_or(0, text_bytes) + incoming.map_or(0, text_bytes);
    let over = out.bytes.saturating_add(bytes) > DIFF_BYTES_MAX && !out.changes.is_empty();
    if out.changes.len() >= DIFF_CHANGES_MAX || over {
        out.truncated = true;
        return;
    }
    out.bytes = out.bytes.saturating_add(bytes);
    out.changes.push(FieldChange {
        change,
        incoming: incoming.cloned(),
        path: path.to_string(),
        stored: stored.cloned(),
        transport: out.transport.iter().any(|pointer| under(path, pointer)),
    });
}

/// About the bytes `value` takes as JSON text (strings and keys by length, other
/// scalars a few bytes), without writing it.
fn text_bytes(value: &Value) -> usize {
    match value {
        Value::String(text) => text.len() + 2,
        Value::Array(items) => items.iter().map(text_bytes).sum::<usize>() + items.len() + 2,
        Value::Object(map) => {
            map.iter()
                .map(|(key, item)| key.len() + 4 + text_bytes(item))
                .sum::<usize>()
                + 2
        }
        _ => 8,
    }
}

/// RFC 6901: `~` is `~0`, `/` is `~1`.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn paths(stored: Value, incoming: Value) -> Vec<(String, &'static str)> {
        diff(&stored, &incoming, &[])
            .0
            .into_iter()
            .map(|c| (c.path, c.change))
            .collect()
    }

    #[test]
    fn equal_documents_have_no_changes() {
        let doc = json!({"a": [1, {"b": null}], "c": "x"});
        assert_eq!(diff(&doc, &doc, &[]), (vec![], false));
    }

    #[test]
    fn changed_added_and_removed_fields_are_named_by_pointer_in_key_order() {
        let stored = json!({"order": "o1", "total": 10, "note": "n", "items": [1, 2]});
        let incoming = json!({"order": "o1", "total": 12, "coupon": "c", "items": [1, 3, 4]});
        assert_eq!(
            paths(stored, incoming),
            vec![
                ("/coupon".to_string(), "added"),
                ("/items/1".to_string(), "changed"),
                ("/items/2".to_string(), "added"),
                ("/note".to_string(), "removed"),
                ("/total".to_string(), "changed"),
            ]
        );
    }

    #[test]
    fn nested_objects_are_walked_and_keys_escaped() {
        let stored = json!({"a/b": {"c~d": 1, "same": true}});
        let incoming = json!({"a/b": {"c~d": 2, "same": true}});
        let (changes, _) = diff(&stored, &incoming, &[]);
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].path, "/a~1b/c~0d");
        assert_eq!(changes[0].stored, Some(json!(1)));
        assert_eq!(changes[0].incoming, Some(json!(2)));
    }

    /// A collision's diff lists what retries change too (a sent time, an attempt
    /// counter): those fields are marked, so the changes that made the collision stand
    /// out. A transport pointer marks its subtree, not a sibling sharing its prefix.
    #[test]
    fn changes_under_a_transport_pointer_are_marked() {
        let stored =
            json!({"meta": {"sent_at": "a", "host": "h1"}, "meta_x": 1, "total": 10, "attempt": 1});
        let incoming =
            json!({"meta": {"sent_at": "b", "host": "h2"}, "meta_x": 2, "total": 12, "attempt": 2});
        let marked = |stored: &Value, incoming: &Value, transport: &[&str]| {
            let (changes, _) = diff(stored, incoming, transport);
            let marks: Vec<(String, bool)> =
                changes.into_iter().map(|c| (c.path, c.transport)).collect();
            marks
        };
        let pairs = |marks: &[(&str, bool)]| -> Vec<(String, bool)> {
            marks.iter().map(|(p, t)| (p.to_string(), *t)).collect()
        };
        assert_eq!(
            marked(&stored, &incoming, &["/meta/sent_at", "/attempt", "/meta_"]),
            pairs(&[
                ("/attempt", true),
                ("/meta/host", false),
                ("/meta/sent_at", true),
                ("/meta_x", false),
                ("/total", false),
            ])
        );
        let (whole, _) = diff(
            &json!({"a": 1}),
            &json!({"a": 1, "ctx": {"lib": "x"}}),
            &["/ctx"],
        );
        assert!(whole[0].transport, "an added transport object is marked");
        let facets = |p: &str| json!({"run": {"facets": {"f": {"_producer": p, "x": p}}}});
        assert_eq!(
            marked(&facets("a"), &facets("b"), &["*/_producer"]),
            pairs(&[
                ("/run/facets/f/_producer", true),
                ("/run/facets/f/x", false)
            ]),
            "a key at any depth"
        );
    }

    #[test]
    fn a_type_change_is_one_change_of_the_whole_value() {
        assert_eq!(
            paths(json!({"a": {"b": 1}}), json!({"a": [1]})),
            vec![("/a".to_string(), "changed")]
        );
        assert_eq!(
            paths(json!(1), json!("1")),
            vec![(String::new(), "changed")]
        );
    }

    #[test]
    fn a_long_diff_is_cut_and_marked() {
        let stored: serde_json::Map<String, Value> =
            (0..300).map(|i| (format!("k{i:03}"), json!(i))).collect();
        let (changes, truncated) = diff(&Value::Object(stored), &json!({}), &[]);
        assert_eq!(changes.len(), DIFF_CHANGES_MAX);
        assert!(truncated);
    }

    /// Every change repeats its path: 201 changes under a 450 KB key listed 181 MB for
    /// one collision. The diff now stops at its byte budget (its first change is always
    /// listed, whatever its size).
    #[test]
    fn a_diff_stops_at_its_byte_budget() {
        let key = "~".repeat(450_000);
        let stored = json!({ key.clone(): vec![0; 201] });
        let incoming = json!({ key: vec![1; 201] });
        let (changes, truncated) = diff(&stored, &incoming, &[]);
        assert_eq!(changes.len(), 1, "the first change, 900 KB of path, alone");
        assert!(truncated);
        let small_stored = json!({"list": vec![0; 50]});
        let small_incoming = json!({"list": vec![1; 50]});
        let (changes, truncated) = diff(&small_stored, &small_incoming, &[]);
        assert_eq!((changes.len(), truncated), (50, false));
        // 150 changes under 1 KB keys: fewer than the 200 a diff may list, more than its
        // 64 KiB hold.
        let wide = |v: i32| -> Value {
            Value::Object(
                (0..150)
                    .map(|i| (format!("{i:03}{}", "k".repeat(1_021)), json!(v)))
                    .collect(),
            )
        };
        let (changes, truncated) = diff(&wide(0), &wide(1), &[]);
        assert!(truncated);
        assert!((60..=64).contains(&changes.len()), "{}", changes.len());
    }
}

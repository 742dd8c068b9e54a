//! The field-level difference of a collision's two payloads: pure, JSON pointer paths.

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// Most changes listed for one collision; a longer diff is cut and marked.
pub const DIFF_CHANGES_MAX: usize = 200;

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
}

/// The changes from `stored` to `incoming`, objects by key (sorted), arrays by index,
/// anything else compared whole; at most [`DIFF_CHANGES_MAX`], and whether it was cut.
pub fn diff(stored: &Value, incoming: &Value) -> (Vec<FieldChange>, bool) {
    let mut changes = Vec::new();
    let mut truncated = false;
    walk(
        stored,
        incoming,
        &mut String::new(),
        &mut changes,
        &mut truncated,
    );
    (changes, truncated)
}

fn walk(
    stored: &Value,
    incoming: &Value,
    path: &mut String,
    out: &mut Vec<FieldChange>,
    truncated: &mut bool,
) {
    match (stored, incoming) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let len = path.len();
                path.push('/');
                path.push_str(&escape(key));
                child(
                    a.get(key.as_str()),
                    b.get(key.as_str()),
                    path,
                    out,
                    truncated,
                );
                path.truncate(len);
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for index in 0..a.len().max(b.len()) {
                let len = path.len();
                path.push('/');
                path.push_str(&index.to_string());
                child(a.get(index), b.get(index), path, out, truncated);
                path.truncate(len);
            }
        }
        (a, b) if a == b => {}
        (a, b) => push(out, truncated, "changed", path, Some(a), Some(b)),
    }
}

fn child(
    stored: Option<&Value>,
    incoming: Option<&Value>,
    path: &mut String,
    out: &mut Vec<FieldChange>,
    truncated: &mut bool,
) {
    match (stored, incoming) {
        (Some(a), Some(b)) => walk(a, b, path, out, truncated),
        (Some(a), None) => push(out, truncated, "removed", path, Some(a), None),
        (None, Some(b)) => push(out, truncated, "added", path, None, Some(b)),
        (None, None) => {}
    }
}

fn push(
    out: &mut Vec<FieldChange>,
    truncated: &mut bool,
    change: &'static str,
    path: &str,
    stored: Option<&Value>,
    incoming: Option<&Value>,
) {
    if out.len() >= DIFF_CHANGES_MAX {
        *truncated = true;
        return;
    }
    out.push(FieldChange {
        change,
        incoming: incoming.cloned(),
        path: path.to_string(),
        stored: stored.cloned(),
    });
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
        diff(&stored, &incoming)
            .0
            .into_iter()
            .map(|c| (c.path, c.change))
            .collect()
    }

    #[test]
    fn equal_documents_have_no_changes() {
        let doc = json!({"a": [1, {"b": null}], "c": "x"});
        assert_eq!(diff(&doc, &doc), (vec![], false));
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
        let (changes, _) = diff(&stored, &incoming);
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].path, "/a~1b/c~0d");
        assert_eq!(changes[0].stored, Some(json!(1)));
        assert_eq!(changes[0].incoming, Some(json!(2)));
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
        let (changes, truncated) = diff(&Value::Object(stored), &json!({}));
        assert_eq!(changes.len(), DIFF_CHANGES_MAX);
        assert!(truncated);
    }
}

//! Property tests: what must not change an event's id or fingerprint, and what must.

use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Map, Number, Value};
use traqlyte_identity::{canonical, json, Identified};
use unicode_normalization::UnicodeNormalization;

use crate::{identify, job_run_contract, IDENTITY_KEYS, TRANSPORT_KEYS};

proptest! {
    #[test]
    fn the_canonical_writer_agrees_with_the_reference_canonicaliser(value in value()) {
        let ours = canonical::jcs(&value);
        let reference = serde_json_canonicalizer::to_vec(&value).expect("reference");
        prop_assert_eq!(String::from_utf8_lossy(&ours), String::from_utf8_lossy(&reference));
    }

    #[test]
    fn permuting_object_keys_keeps_id_and_fingerprint(event in event(), seed in any::<u64>()) {
        let sorted = reparse(&render(&event, &mut Layout::plain()));
        let shuffled = reparse(&render(&event, &mut Layout::shuffled(seed)));
        assert_same_identity(&identify_job(&sorted), &identify_job(&shuffled));
    }

    #[test]
    fn adding_insignificant_whitespace_keeps_id_and_fingerprint(
        event in event(),
        seed in any::<u64>(),
    ) {
        let compact = render(&event, &mut Layout::plain());
        let spaced = render(&event, &mut Layout::spaced(seed));
        prop_assume!(compact != spaced);
        assert_same_identity(&identify_job(&reparse(&compact)), &identify_job(&reparse(&spaced)));
    }

    #[test]
    fn nfd_and_nfc_spellings_keep_id_and_fingerprint(event in event()) {
        let composed = map_text(&event, &|s| s.nfc().collect());
        let decomposed = map_text(&composed, &|s| s.nfd().collect());
        assert_same_identity(&identify_job(&composed), &identify_job(&decomposed));
    }

    #[test]
    fn changing_a_content_field_keeps_id_and_changes_fingerprint(
        event in event(),
        nested in any::<bool>(),
        key in "c_[a-z]{1,4}",
        (before, after) in distinct_values(),
    ) {
        let mut a = event.clone();
        let mut b = event;
        if nested {
            a["meta"]["region"] = before;
            b["meta"]["region"] = after;
        } else {
            a[&key] = before;
            b[&key] = after;
        }
        let (a, b) = (identify_job(&a), identify_job(&b));
        prop_assert_eq!(&a.event_id, &b.event_id);
        prop_assert_ne!(&a.fingerprint, &b.fingerprint);
    }

    #[test]
    fn changing_an_identity_field_changes_id_and_fingerprint(
        event in event(),
        which in 0..IDENTITY_KEYS.len(),
    ) {
        let mut changed = event.clone();
        let key = IDENTITY_KEYS[which];
        let slot = &mut changed[key];
        *slot = match (key, slot.take()) {
            ("job", Value::String(s)) => Value::String(s + "x"),
            ("run", Value::Number(n)) => Value::from(n.as_i64().expect("run is an integer") + 1),
            ("params", Value::Object(mut map)) => {
                let next = if map.get("added") == Some(&Value::Null) {
                    Value::Bool(true)
                } else {
                    Value::Null
                };
                map.insert("added".into(), next);
                Value::Object(map)
            }
            ("score", Value::Number(n)) => float(n.as_f64().expect("score is a number") + 1.0),
            ("inputs" | "steps", Value::Array(mut items)) => {
                items.push(Value::from("extra"));
                Value::Array(items)
            }
            // An absent optional field becoming present changes the identity too.
            ("params", Value::Null) => Value::Object(Map::new()),
            ("inputs" | "steps", Value::Null) => Value::Array(Vec::new()),
            (_, Value::Null) => Value::from(0),
            (key, other) => panic!("unexpected {key}: {other}"),
        };
        let (a, b) = (identify_job(&event), identify_job(&changed));
        prop_assert_ne!(&a.event_id, &b.event_id);
        prop_assert_ne!(&a.fingerprint, &b.fingerprint);
    }

    #[test]
    fn changing_a_nested_parameter_value_changes_the_id(
        event in event(),
        (before, after) in distinct_values(),
    ) {
        let mut a = event.clone();
        let mut b = event;
        for (doc, value) in [(&mut a, before), (&mut b, after)] {
            if !doc["params"].is_object() {
                doc["params"] = Value::Object(Map::new());
            }
            doc["params"]["model"] = serde_json::json!({"layers": 3, "lr": value});
        }
        prop_assert_ne!(identify_job(&a).event_id, identify_job(&b).event_id);
    }

    #[test]
    fn changing_a_transport_field_keeps_id_and_fingerprint(
        event in event(),
        first in transport(),
        second in transport(),
    ) {
        let mut a = event.clone();
        let mut b = event;
        for (doc, values) in [(&mut a, first), (&mut b, second)] {
            for (key, value) in TRANSPORT_KEYS.iter().zip(values.0) {
                match value {
                    Some(value) => doc[*key] = value,
                    None => {
                        doc.as_object_mut().expect("event is an object").remove(*key);
                    }
                }
            }
            doc["meta"]["trace_id"] = values.1;
        }
        assert_same_identity(&identify_job(&a), &identify_job(&b));
    }

    #[test]
    fn differences_below_the_declared_precision_keep_the_id(
        cents in -1_000_000_000i64..1_000_000_000,
        wobble in -0.0049f64..0.0049,
    ) {
        let sign = if cents < 0 { "-" } else { "" };
        let exact: f64 = format!("{sign}{}.{:02}", cents.abs() / 100, cents.abs() % 100)
            .parse()
            .expect("decimal text parses");
        let noisy = cents as f64 / 100.0 + wobble;
        let a = identify_job(&serde_json::json!({"job": "j", "score": exact}));
        let b = identify_job(&serde_json::json!({"job": "j", "score": noisy}));
        prop_assert_eq!(a.event_id, b.event_id, "{} vs {}", exact, noisy);
    }

    #[test]
    fn reordering_a_set_array_keeps_id_and_fingerprint(
        (items, shuffled) in prop::collection::vec(value(), 0..6)
            .prop_flat_map(|items| (Just(items.clone()), Just(items).prop_shuffle())),
    ) {
        let a = nfc_event(serde_json::json!({"job": "j", "inputs": items}));
        let b = nfc_event(serde_json::json!({"job": "j", "inputs": shuffled}));
        assert_same_identity(&identify_job(&a), &identify_job(&b));
    }

    #[test]
    fn reordering_an_ordered_array_changes_the_id(
        (items, shuffled) in prop::collection::btree_set("[a-z]{1,4}", 2..6)
            .prop_map(|set| set.into_iter().collect::<Vec<_>>())
            .prop_flat_map(|items| (Just(items.clone()), Just(items).prop_shuffle())),
    ) {
        prop_assume!(items != shuffled);
        let a = identify_job(&serde_json::json!({"job": "j", "steps": items}));
        let b = identify_job(&serde_json::json!({"job": "j", "steps": shuffled}));
        prop_assert_ne!(a.event_id, b.event_id);
    }
}

fn identify_job(event: &Value) -> Identified {
    identify(&job_run_contract(), event)
}

fn assert_same_identity(a: &Identified, b: &Identified) {
    assert_eq!(a.identity_bytes, b.identity_bytes);
    assert_eq!(a.event_id, b.event_id);
    assert_eq!(a.fingerprint, b.fingerprint);
}

fn reparse(text: &str) -> Value {
    json::parse(text.as_bytes(), 64).unwrap_or_else(|err| panic!("{text} should parse: {err}"))
}

fn float(x: f64) -> Value {
    Number::from_f64(x).map_or(Value::Null, Value::Number)
}

/// Characters that stress normalisation: precomposed letters with a canonical
/// decomposition, Hangul syllables, and singletons such as the ohm and Ångström signs.
const COMPOSABLE: [&str; 12] = [
    "\u{e9}",
    "e\u{301}",
    "\u{c5}",
    "\u{212b}",
    "\u{2126}",
    "\u{1ec7}",
    "\u{ac00}",
    "\u{1100}\u{1161}",
    "\u{f1}",
    "\u{1d6}",
    "\u{4e2d}",
    "\u{1f600}",
];

/// Short text mixing ASCII, characters with decompositions and any printable character.
fn text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        3 => "[a-z]",
        2 => select(&COMPOSABLE[..]).prop_map(str::to_string),
        1 => "\\PC",
    ];
    prop::collection::vec(piece, 0..5).prop_map(|pieces| pieces.concat())
}

fn leaf() -> impl Strategy<Value = Value> {
    let exact = canonical::EXACT_INTEGER_MAX as i64;
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-exact..=exact).prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |x| x.is_finite())
            .prop_map(float),
        text().prop_map(Value::String),
    ]
}

/// Any JSON value up to three levels deep, with keys and strings in NFC (so that no two
/// keys of one object collide after normalisation).
fn value() -> impl Strategy<Value = Value> {
    leaf()
        .prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(text(), inner, 0..4)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
        .prop_map(nfc_event)
}

/// Two values whose canonical forms differ.
fn distinct_values() -> impl Strategy<Value = (Value, Value)> {
    (value(), value()).prop_filter("canonically different", |(a, b)| {
        canonical_bytes(a) != canonical_bytes(b)
    })
}

fn canonical_bytes(value: &Value) -> Vec<u8> {
    canonical::jcs(&canonical::normalize(value, "").expect("generated values normalise"))
}

/// Top-level transport values (absent or present) and a nested trace id.
fn transport() -> impl Strategy<Value = (Vec<Option<Value>>, Value)> {
    (
        prop::collection::vec(prop::option::of(value()), TRANSPORT_KEYS.len()),
        value(),
    )
}

/// An event of [`job_run_contract`]: the required job, any subset of the optional
/// identity fields, content fields, a `meta` object mixing content and transport, and
/// transport fields.
fn event() -> impl Strategy<Value = Value> {
    let identity = (
        text().prop_map(|job| format!("job_{job}")),
        prop::option::of(0i64..1_000_000_000),
        prop::option::of(prop::collection::btree_map(text(), value(), 0..4)),
        prop::option::of(-1.0e6f64..1.0e6),
        prop::option::of(prop::collection::vec(value(), 0..5)),
        prop::option::of(prop::collection::vec(text(), 0..5)),
    );
    let content = prop::collection::btree_map("c_[a-z]{1,4}", value(), 0..4);
    (identity, content, transport(), text()).prop_map(
        |((job, run, params, score, inputs, steps), content, (transport, trace_id), region)| {
            let mut event: Map<String, Value> = content.into_iter().collect();
            event.insert("job".into(), Value::String(job));
            let optional = [
                run.map(Value::from),
                params.map(|map| Value::Object(map.into_iter().collect())),
                score.map(float),
                inputs.map(Value::Array),
                steps.map(|steps| steps.into_iter().map(Value::String).collect()),
            ];
            for (key, value) in IDENTITY_KEYS[1..].iter().zip(optional) {
                if let Some(value) = value {
                    event.insert(key.to_string(), value);
                }
            }
            for (key, value) in TRANSPORT_KEYS.iter().zip(transport) {
                if let Some(value) = value {
                    event.insert(key.to_string(), value);
                }
            }
            event.insert(
                "meta".into(),
                serde_json::json!({"region": region, "trace_id": trace_id}),
            );
            nfc_event(Value::Object(event))
        },
    )
}

fn nfc_event(value: Value) -> Value {
    map_text(&value, &|s| s.nfc().collect())
}

/// Applies `f` to every string and object key of `value`.
fn map_text(value: &Value, f: &dyn Fn(&str) -> String) -> Value {
    match value {
        Value::String(s) => Value::String(f(s)),
        Value::Array(items) => Value::Array(items.iter().map(|v| map_text(v, f)).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (f(k), map_text(v, f))).collect())
        }
        other => other.clone(),
    }
}

/// How [`render`] writes JSON text: key order and whitespace between tokens.
struct Layout {
    rng: Option<u64>,
    shuffle_keys: bool,
    whitespace: bool,
}

impl Layout {
    fn plain() -> Layout {
        Layout {
            rng: None,
            shuffle_keys: false,
            whitespace: false,
        }
    }

    fn shuffled(seed: u64) -> Layout {
        Layout {
            rng: Some(seed),
            shuffle_keys: true,
            whitespace: false,
        }
    }

    fn spaced(seed: u64) -> Layout {
        Layout {
            rng: Some(seed),
            shuffle_keys: false,
            whitespace: true,
        }
    }

    /// SplitMix64: a tiny deterministic generator, enough to pick orders and spacing.
    fn next(&mut self) -> u64 {
        let state = self.rng.get_or_insert(0);
        *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn gap(&mut self, out: &mut String) {
        if self.whitespace {
            let count = self.next() % 3;
            for _ in 0..count {
                out.push([' ', '\t', '\n', '\r'][(self.next() % 4) as usize]);
            }
        }
    }
}

/// Writes `value` as JSON text laid out as `layout` says.
fn render(value: &Value, layout: &mut Layout) -> String {
    let mut out = String::new();
    layout.gap(&mut out);
    write_value(value, layout, &mut out);
    layout.gap(&mut out);
    out
}

fn write_value(value: &Value, layout: &mut Layout, out: &mut String) {
    match value {
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                layout.gap(out);
                write_value(item, layout, out);
                layout.gap(out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            if layout.shuffle_keys {
                // Fisher-Yates with the layout's generator.
                for i in (1..entries.len()).rev() {
                    let j = (layout.next() % (i as u64 + 1)) as usize;
                    entries.swap(i, j);
                }
            }
            out.push('{');
            for (index, (key, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                layout.gap(out);
                out.push_str(&Value::String(key.clone()).to_string());
                layout.gap(out);
                out.push(':');
                layout.gap(out);
                write_value(item, layout, out);
                layout.gap(out);
            }
            out.push('}');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

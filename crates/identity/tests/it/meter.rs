//! The parser's [`Meter`] estimates the memory of the tree it builds: at least what the
//! allocator really hands out for it (so a server bounding bodies in flight by the
//! estimate bounds their memory), and not far above it (so it does not refuse bodies it
//! has room for). Measured here by a counting allocator, per thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use serde_json::{json, Value};
use traqlyte_identity::json::{parse_in, Meter, ParseError};

/// The system allocator, counting the bytes each thread holds.
struct Counting;

thread_local! {
    static HELD: Cell<isize> = const { Cell::new(0) };
}

fn add(bytes: usize, sign: isize) {
    // `try_with`: a thread being torn down frees its last buffers uncounted.
    let _ = HELD.try_with(|held| held.set(held.get() + sign * bytes as isize));
}

// SAFETY: every call is forwarded to `System` unchanged; only a thread-local counter is
// updated beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        add(layout.size(), 1);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        add(layout.size(), -1);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        add(layout.size(), -1);
        add(new_size, 1);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn held() -> isize {
    HELD.with(Cell::get)
}

/// The bytes the tree of `text` holds once parsed, and the meter's estimate of them.
fn measured(text: &str) -> (usize, usize) {
    let meter = Meter::unbounded();
    let before = held();
    let value = parse_in(text.as_bytes(), 64, &meter).expect("valid JSON");
    let real = held() - before;
    drop(value);
    (
        usize::try_from(real).expect("the tree holds memory"),
        meter.used(),
    )
}

fn object_of(keys: impl Iterator<Item = String>) -> Value {
    Value::Object(keys.map(|key| (key, json!(1))).collect())
}

/// Shapes from the densest a client can send to the events our users send: the estimate
/// is never below the real tree and at most 2.5 times it (1 KiB of slack for tiny ones).
#[test]
fn the_meters_estimate_covers_the_real_tree_and_stays_near_it() {
    let mut shapes: Vec<(String, String)> = vec![
        (
            "objects of one key nested three deep".into(),
            format!("[{}]", vec![r#"{"a":{"b":{"c":{}}}}"#; 5_000].join(",")),
        ),
        (
            "empty arrays".into(),
            format!("[{}]", vec!["[]"; 50_000].join(",")),
        ),
        (
            "arrays nested 60 deep".into(),
            format!(
                "[{}]",
                vec![format!("{}{}", "[".repeat(60), "]".repeat(60)); 500].join(",")
            ),
        ),
        (
            "long strings".into(),
            json!(vec!["x".repeat(1_000); 100]).to_string(),
        ),
        (
            "a checkout event".into(),
            json!({"order_id": "o-1", "merchant_id": "m-42", "amount": 12.5,
                   "currency": "EUR", "items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}],
                   "context": {"ip": "127.0.0.1", "library": {"name": "x", "version": "1"}}})
            .to_string(),
        ),
    ];
    for keys in [1usize, 5, 6, 7, 11, 12, 13, 40, 300, 5_000] {
        let ascending = object_of((0..keys).map(|k| format!("k{k:05}")));
        let descending = object_of((0..keys).rev().map(|k| format!("k{k:05}")));
        let scattered = object_of((0..keys).map(|k| format!("k{:05}", (k * 7_919) % keys)));
        for (order, object) in [
            ("ascending", ascending),
            ("descending", descending),
            ("scattered", scattered),
        ] {
            // `Value`'s map is sorted: write the keys in the order named.
            let text = match order {
                "ascending" => object.to_string(),
                _ => {
                    let mut pairs: Vec<String> = Vec::new();
                    let names: Vec<String> = match order {
                        "descending" => (0..keys).rev().map(|k| format!("k{k:05}")).collect(),
                        _ => (0..keys)
                            .map(|k| format!("k{:05}", (k * 7_919) % keys))
                            .collect(),
                    };
                    for name in names {
                        pairs.push(format!("\"{name}\":1"));
                    }
                    format!("{{{}}}", pairs.join(","))
                }
            };
            shapes.push((format!("an object of {keys} keys, {order}"), text));
        }
    }
    for (name, text) in shapes {
        let (real, estimate) = measured(&text);
        assert!(
            estimate >= real,
            "{name}: estimated {estimate}, real {real}"
        );
        assert!(
            estimate <= real * 5 / 2 + 1024,
            "{name}: estimated {estimate}, real {real}"
        );
    }
}

/// Every event of the OpenLineage corpus: the estimate covers its real tree.
#[test]
fn the_meters_estimate_covers_every_corpus_event() {
    for path in crate::openlineage::corpus_files() {
        let text = std::fs::read_to_string(&path).expect("a corpus file");
        let (real, estimate) = measured(&text);
        assert!(
            estimate >= real,
            "{}: estimated {estimate}, real {real}",
            path.display()
        );
        assert!(
            estimate <= real * 5 / 2 + 1024,
            "{}: estimated {estimate}, real {real}",
            path.display()
        );
    }
}

/// A meter granted little, and refused more, stops the parse: `OutOfRoom` with what the
/// tree had reached; granted more in steps, the same document parses.
#[test]
fn a_meter_refused_more_stops_the_parse() {
    let text = format!("[{}]", vec![r#"{"a":{"b":{}}}"#; 1_000].join(","));
    let mut refuse = |_: usize, _: usize| 0;
    let meter = Meter::new(100_000, &mut refuse);
    match parse_in(text.as_bytes(), 64, &meter) {
        Err(ParseError::OutOfRoom { used }) => assert!(used > 100_000, "{used}"),
        other => panic!("expected OutOfRoom, got {other:?}"),
    }
    let mut asked = Vec::new();
    let mut grant = |needed: usize, wanted: usize| {
        assert!(wanted >= needed.max(traqlyte_identity::json::METER_STEP_BYTES));
        asked.push(wanted);
        wanted
    };
    let meter = Meter::new(100_000, &mut grant);
    let value = parse_in(text.as_bytes(), 64, &meter).expect("granted");
    assert_eq!(value.as_array().map(Vec::len), Some(1_000));
    let used = meter.used();
    assert!(asked
        .iter()
        .all(|&bytes| bytes >= traqlyte_identity::json::METER_STEP_BYTES));
    assert!(100_000 + asked.iter().sum::<usize>() >= used);
}

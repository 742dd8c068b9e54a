//! Rough per-stage timing of the identity core on a checkout-sized event.
//!
//! With the argument `batch` it times nothing and only identifies a 1,000-event batch
//! body five times (parse, stored payload, identity): an instruction-count probe for
//! `valgrind --tool=callgrind` (BENCHMARKS.md), whose counts compare two builds on a busy
//! machine.
use std::time::Instant;

use serde_json::json;
use traqlyte_identity::{canonical, json as tljson, Contract};

fn main() {
    let contract = Contract::from_json(&json!({
        "name": "checkout_completed", "version": 1,
        "fields": [{"pointer": "/merchant_id", "required": true}, {"pointer": "/order_id", "required": true},
                   {"pointer": "/amount", "precision": 2}, {"pointer": "/items", "array": "set"}, {"pointer": "/params"}],
        "transport": ["/sent_at", "/attempt", "/host"], "occurred_at": "/occurred_at"
    })).unwrap();
    if std::env::args().nth(1).as_deref() == Some("batch") {
        return identify_batches(&contract);
    }
    let event = json!({"merchant_id": "merchant_42", "order_id": "order_1_2345", "amount": 123.455,
        "items": ["sku-1", "sku-2"], "params": {"currency": "EUR", "channel": "web"},
        "occurred_at": "2026-11-29T10:00:00Z", "sent_at": "2026-11-29T10:00:01Z", "attempt": 1, "host": "edge-1", "note": "bench"});
    let text = event.to_string();
    let n = 100_000;
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(tljson::parse(text.as_bytes(), 32).unwrap());
    }
    println!(
        "parse      {:.2} us",
        t.elapsed().as_secs_f64() * 1e6 / n as f64
    );
    // The exactness scan `parse` runs on any body holding a float (this one has 123.455).
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(traqlyte_identity::number::first_refused(&text));
    }
    println!(
        "number scan {:.2} us (part of parse)",
        t.elapsed().as_secs_f64() * 1e6 / n as f64
    );
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(serde_json::from_str::<serde_json::Value>(&text).unwrap());
    }
    println!(
        "serde parse {:.2} us",
        t.elapsed().as_secs_f64() * 1e6 / n as f64
    );
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(canonical::normalize(&event, "").unwrap());
    }
    println!(
        "normalize  {:.2} us",
        t.elapsed().as_secs_f64() * 1e6 / n as f64
    );
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(canonical::jcs(&event));
    }
    println!(
        "jcs        {:.2} us",
        t.elapsed().as_secs_f64() * 1e6 / n as f64
    );
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(contract.identify(&event).unwrap());
    }
    println!(
        "identify   {:.2} us",
        t.elapsed().as_secs_f64() * 1e6 / n as f64
    );
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(event.to_string());
    }
    println!(
        "to_string  {:.2} us",
        t.elapsed().as_secs_f64() * 1e6 / n as f64
    );
}

/// Parses a 1,000-event batch body five times and identifies each event as the batch
/// route does (its stored payload, then its identity).
fn identify_batches(contract: &Contract) {
    let mut items = Vec::new();
    for i in 0..1000 {
        items.push(json!({"merchant_id": format!("merchant_{}", i % 500), "order_id": format!("order_{i}_2345"), "amount": (i as f64) / 100.0 + 0.005,
        "items": [format!("sku-{}", i % 7), format!("sku-{}", i % 13)], "params": {"currency": "EUR", "channel": "web"},
        "occurred_at": "2026-11-29T10:00:00Z", "sent_at": "2026-11-29T10:00:01Z", "attempt": 1, "host": "edge-1", "note": "bench"}));
    }
    let body = serde_json::Value::Array(items).to_string();
    for _ in 0..5 {
        let (value, _refused) = tljson::parse_reporting_numbers(body.as_bytes(), 33, 1).unwrap();
        let serde_json::Value::Array(items) = value else {
            panic!("the body is an array")
        };
        for item in items {
            let payload = serde_json::to_string(&item).unwrap();
            let id = contract.identify_owned(item).unwrap();
            std::hint::black_box((payload, id));
        }
    }
}

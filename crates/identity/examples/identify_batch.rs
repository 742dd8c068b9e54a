//! Instruction-count probe of a batch body's identification (parse, stored payload,
//! identity) for `valgrind --tool=callgrind` (BENCHMARKS.md): counts, not seconds, so two
//! builds compare on a busy machine.
use serde_json::json;
use traqlyte_identity::{json as tljson, Contract};

fn main() {
    let contract = Contract::from_json(&json!({
        "name": "checkout_completed", "version": 1,
        "fields": [{"pointer": "/merchant_id", "required": true}, {"pointer": "/order_id", "required": true},
                   {"pointer": "/amount", "precision": 2}, {"pointer": "/items", "array": "set"}, {"pointer": "/params"}],
        "transport": ["/sent_at", "/attempt", "/host"], "occurred_at": "/occurred_at"
    })).unwrap();
    let mut items = Vec::new();
    for i in 0..1000 {
        items.push(json!({"merchant_id": format!("merchant_{}", i % 500), "order_id": format!("order_{i}_2345"), "amount": (i as f64) / 100.0 + 0.005,
        "items": [format!("sku-{}", i % 7), format!("sku-{}", i % 13)], "params": {"currency": "EUR", "channel": "web"},
        "occurred_at": "2026-11-29T10:00:00Z", "sent_at": "2026-11-29T10:00:01Z", "attempt": 1, "host": "edge-1", "note": "bench"}));
    }
    let body = serde_json::Value::Array(items).to_string();
    for _ in 0..5 {
        let (value, _refused) = tljson::parse_reporting_numbers(body.as_bytes(), 33).unwrap();
        let serde_json::Value::Array(items) = value else {
            panic!()
        };
        for item in items {
            let payload = serde_json::to_string(&item).unwrap();
            let id = contract.identify_owned(item).unwrap();
            std::hint::black_box((payload, id));
        }
    }
}

//! Every kind of bad input gets the right status and a JSON error naming the rule (and
//! the field where there is one), and nothing is written.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::{checkout_event, spawn_app, Backend};

crate::on_both_backends!(bad_input_gets_a_clear_error_and_writes_nothing);

struct Case {
    what: &'static str,
    method: &'static str,
    path: &'static str,
    key: Key,
    body: Vec<u8>,
    status: StatusCode,
    code: &'static str,
    field: Option<&'static str>,
}

enum Key {
    Tenant,
    Unknown,
    Missing,
}

fn event_with(pointer: &str, value: Value) -> Vec<u8> {
    let mut event = checkout_event("order_bad");
    *event.pointer_mut(pointer).expect("pointer exists") = value;
    event.to_string().into_bytes()
}

fn event_without(key: &str) -> Vec<u8> {
    let mut event = checkout_event("order_bad");
    event.as_object_mut().expect("object").remove(key);
    event.to_string().into_bytes()
}

fn nested(depth: usize) -> Vec<u8> {
    let mut event = checkout_event("order_bad");
    event["deep"] = (0..depth).fold(json!(1), |inner, _| json!([inner]));
    event.to_string().into_bytes()
}

fn cases() -> Vec<Case> {
    use StatusCode as S;
    let one = "/events/checkout_completed";
    let batch = "/events/checkout_completed/batch";
    let case = |what, path, body: Vec<u8>, status, code, field| Case {
        what,
        method: "POST",
        path,
        key: Key::Tenant,
        body,
        status,
        code,
        field,
    };
    let mut huge = checkout_event("order_bad");
    huge["padding"] = json!("x".repeat(1024 * 1024));
    let huge_batch: Vec<Value> = (0..5).map(|_| huge.clone()).collect();
    vec![
        case(
            "malformed JSON",
            one,
            b"{\"merchant_id\": ".to_vec(),
            S::BAD_REQUEST,
            "malformed_json",
            None,
        ),
        case(
            "empty body",
            one,
            Vec::new(),
            S::BAD_REQUEST,
            "empty_body",
            None,
        ),
        case(
            "a JSON array instead of an object",
            one,
            b"[1, 2]".to_vec(),
            S::UNPROCESSABLE_ENTITY,
            "not_an_object",
            None,
        ),
        case(
            "a JSON string instead of an object",
            one,
            b"\"event\"".to_vec(),
            S::UNPROCESSABLE_ENTITY,
            "not_an_object",
            None,
        ),
        case(
            "wrong type of an identity field",
            one,
            event_with("/merchant_id", json!(42)),
            S::UNPROCESSABLE_ENTITY,
            "wrong_type",
            Some("/merchant_id"),
        ),
        case(
            "a rounded field that is not a number",
            one,
            event_with("/amount", json!("12.5")),
            S::UNPROCESSABLE_ENTITY,
            "wrong_type",
            Some("/amount"),
        ),
        case(
            "a set field that is not an array",
            one,
            event_with("/items", json!("sku-1")),
            S::UNPROCESSABLE_ENTITY,
            "wrong_type",
            Some("/items"),
        ),
        case(
            "missing required field",
            one,
            event_without("order_id"),
            S::UNPROCESSABLE_ENTITY,
            "missing_required_field",
            Some("/order_id"),
        ),
        case(
            "NaN",
            one,
            b"{\"merchant_id\": \"m\", \"order_id\": \"o\", \"amount\": NaN}".to_vec(),
            S::BAD_REQUEST,
            "non_finite_number",
            None,
        ),
        case(
            "Infinity",
            one,
            b"{\"merchant_id\": \"m\", \"order_id\": \"o\", \"amount\": -Infinity}".to_vec(),
            S::BAD_REQUEST,
            "non_finite_number",
            None,
        ),
        case(
            "a number beyond the double range",
            one,
            b"{\"merchant_id\": \"m\", \"order_id\": \"o\", \"amount\": 1e999}".to_vec(),
            S::UNPROCESSABLE_ENTITY,
            "number_out_of_range",
            Some("/amount"),
        ),
        case(
            "a decimal with no exact double (it would merge with its neighbour)",
            one,
            b"{\"merchant_id\": \"m\", \"order_id\": \"o\", \"params\": {\"n\": 9007199254740993.0}}".to_vec(),
            S::UNPROCESSABLE_ENTITY,
            "number_out_of_range",
            Some("/params/n"),
        ),
        case(
            "a number below the smallest double (it would be taken as 0)",
            one,
            b"{\"merchant_id\": \"m\", \"order_id\": \"o\", \"note\": [1e-400]}".to_vec(),
            S::UNPROCESSABLE_ENTITY,
            "number_out_of_range",
            Some("/note/0"),
        ),
        case(
            "keys equal after Unicode normalisation",
            one,
            "{\"merchant_id\": \"m\", \"order_id\": \"o\", \"caf\u{e9}\": 1, \"cafe\u{301}\": 2}"
                .as_bytes()
                .to_vec(),
            S::BAD_REQUEST,
            "duplicate_key",
            Some("/caf\u{e9}"),
        ),
        case(
            "an integer beyond 2^53",
            one,
            event_with("/params/coupon", json!(9_007_199_254_740_993u64)),
            S::UNPROCESSABLE_ENTITY,
            "number_out_of_range",
            Some("/params/coupon"),
        ),
        case(
            "a single event over the 1 MiB limit",
            one,
            huge.to_string().into_bytes(),
            S::PAYLOAD_TOO_LARGE,
            "body_too_large",
            None,
        ),
        case(
            "nesting deeper than the limit",
            one,
            nested(40),
            S::BAD_REQUEST,
            "too_deep",
            // The array 32 levels below the document, named.
            Some("/deep/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0"),
        ),
        case(
            "invalid UTF-8",
            one,
            b"{\"merchant_id\": \"m\xff\", \"order_id\": \"o\"}".to_vec(),
            S::BAD_REQUEST,
            "invalid_utf8",
            None,
        ),
        case(
            "a key twice",
            one,
            b"{\"merchant_id\": \"m\", \"merchant_id\": \"n\", \"order_id\": \"o\"}".to_vec(),
            S::BAD_REQUEST,
            "duplicate_key",
            // Named as a key equal after normalisation is (it had no field).
            Some("/merchant_id"),
        ),
        case(
            "a contract pointer that can never address an array item",
            "/contracts",
            json!({"name": "c2", "version": 1, "fields": [{"pointer": "/items/-"}]})
                .to_string()
                .into_bytes(),
            S::UNPROCESSABLE_ENTITY,
            "invalid_contract",
            Some("fields[0].pointer"),
        ),
        case(
            "an event time that is not RFC 3339",
            one,
            event_with("/occurred_at", json!("yesterday")),
            S::UNPROCESSABLE_ENTITY,
            "invalid_timestamp",
            Some("/occurred_at"),
        ),
        case(
            "unknown contract",
            "/events/no_such_contract",
            checkout_event("o").to_string().into_bytes(),
            S::NOT_FOUND,
            "contract_not_found",
            Some("contract"),
        ),
        case(
            "a batch that is not an array",
            batch,
            checkout_event("o").to_string().into_bytes(),
            S::UNPROCESSABLE_ENTITY,
            "not_an_array",
            None,
        ),
        case(
            "a batch over the 5 MiB limit",
            batch,
            json!(huge_batch).to_string().into_bytes(),
            S::PAYLOAD_TOO_LARGE,
            "body_too_large",
            None,
        ),
        case(
            "a malformed batch",
            batch,
            b"[{}, ".to_vec(),
            S::BAD_REQUEST,
            "malformed_json",
            None,
        ),
        case(
            "an unknown route",
            "/nowhere",
            b"{}".to_vec(),
            S::NOT_FOUND,
            "not_found",
            None,
        ),
        Case {
            what: "unknown API key",
            key: Key::Unknown,
            ..case(
                "",
                one,
                checkout_event("o").to_string().into_bytes(),
                S::UNAUTHORIZED,
                "unauthorized",
                None,
            )
        },
        Case {
            what: "missing API key",
            key: Key::Missing,
            ..case(
                "",
                one,
                checkout_event("o").to_string().into_bytes(),
                S::UNAUTHORIZED,
                "unauthorized",
                None,
            )
        },
        Case {
            what: "a method the route does not have",
            method: "PUT",
            ..case(
                "",
                one,
                b"{}".to_vec(),
                S::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                None,
            )
        },
    ]
}

async fn bad_input_gets_a_clear_error_and_writes_nothing(backend: Backend) {
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    // A wrong method's answer says the route exists and where its methods are named (it
    // said "Method Not Allowed" only).
    let response = app
        .client
        .put(app.url("/events/checkout_completed"))
        .bearer_auth(&app.key)
        .send()
        .await
        .expect("PUT");
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(response.headers()["allow"], "POST");
    let body: Value = response.json().await.expect("JSON");
    assert_eq!(
        body["error"]["message"],
        "PUT is not a method of /events/checkout_completed: its Allow header names the methods it takes",
        "{body}"
    );
    let before = app.get("/stats").await.body;
    for case in cases() {
        let method = reqwest::Method::from_bytes(case.method.as_bytes()).expect("method");
        let mut request = app
            .client
            .request(method, app.url(case.path))
            .header("content-type", "application/json")
            .body(case.body);
        request = match case.key {
            Key::Tenant => request.bearer_auth(&app.key),
            Key::Unknown => {
                request.bearer_auth("tlk_000000000000000000000000000000000000000000000000")
            }
            Key::Missing => request,
        };
        eprintln!("case: {}", case.what);
        let answer = app.send(request).await;
        assert_eq!(answer.status, case.status, "{}: {}", case.what, answer.body);
        assert_eq!(answer.code(), case.code, "{}: {}", case.what, answer.body);
        assert!(
            answer.body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{}: no message",
            case.what
        );
        assert_eq!(
            answer.body["error"]["field"].as_str(),
            case.field,
            "{}: {}",
            case.what,
            answer.body
        );
    }
    assert_eq!(
        app.get("/stats").await.body,
        before,
        "bad input must write nothing"
    );
    let collisions = app.get("/contracts/checkout_completed/collisions").await;
    assert_eq!(collisions.body["collisions"], json!([]));
}

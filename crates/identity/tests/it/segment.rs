//! The Segment message contract: identity by (source, messageId) or by content, retries
//! with a new `sentAt` equal, the rules that reject a message, and Segment's clock-skew
//! correction.

use serde_json::{json, Value};
use traqlyte_identity::parse_rfc3339_micros;
use traqlyte_identity::segment::{
    corrected_timestamp, identify_message, message_contract, Envelope, MessageType, SegmentError,
    SegmentMessage, MESSAGE_CONTRACT,
};

const RECEIVED: &str = "2026-11-30T12:00:10Z";

fn envelope<'a>(source: &'a str, route: Option<MessageType>) -> Envelope<'a> {
    Envelope {
        source,
        received_at_us: parse_rfc3339_micros(RECEIVED).expect("a time"),
        route_type: route,
        sent_at: None,
        context: None,
    }
}

fn identify(message: &Value) -> Result<SegmentMessage, SegmentError> {
    identify_message(message, &envelope("src_a", None))
}

fn track(message_id: Option<&str>) -> Value {
    let mut message = json!({
        "type": "track", "event": "Order Completed", "userId": "u1",
        "properties": {"order_id": "o-1", "revenue": 12.5},
        "timestamp": "2026-11-30T11:59:00.000+00:00", "sentAt": "2026-11-30T12:00:00.000+00:00",
        "context": {"library": {"name": "analytics-python", "version": "2.4.0"}}
    });
    if let Some(id) = message_id {
        message["messageId"] = json!(id);
    }
    message
}

#[test]
fn the_builtin_contract_file_is_valid_and_named() {
    assert_eq!(message_contract().name().as_str(), MESSAGE_CONTRACT);
    assert_eq!(message_contract().version(), 1);
    assert!(traqlyte_identity::openlineage::builtin_contract(MESSAGE_CONTRACT).is_some());
}

#[test]
fn a_retry_with_a_new_sent_at_and_library_keeps_the_id_and_the_fingerprint() {
    let first = identify(&track(Some("m-1"))).expect("valid");
    let mut again = track(Some("m-1"));
    again["sentAt"] = json!("2026-11-30T12:00:07.000+00:00");
    again["context"]["library"]["version"] = json!("2.4.1");
    again["writeKey"] = json!("tlw_whatever");
    let second = identify(&again).expect("valid");
    assert_eq!(first.identified.event_id, second.identified.event_id);
    assert_eq!(first.identified.fingerprint, second.identified.fingerprint);
}

#[test]
fn a_message_id_is_scoped_to_its_source() {
    let a = identify_message(&track(Some("m-1")), &envelope("src_a", None)).expect("valid");
    let b = identify_message(&track(Some("m-1")), &envelope("src_b", None)).expect("valid");
    assert_ne!(a.identified.event_id, b.identified.event_id);
}

#[test]
fn same_message_id_with_other_content_keeps_the_id_but_not_the_fingerprint() {
    let first = identify(&track(Some("m-1"))).expect("valid");
    let mut other = track(Some("m-1"));
    other["properties"]["revenue"] = json!(99);
    let second = identify(&other).expect("valid");
    assert_eq!(first.identified.event_id, second.identified.event_id);
    assert_ne!(first.identified.fingerprint, second.identified.fingerprint);
}

#[test]
fn without_a_message_id_the_content_is_the_identity() {
    let first = identify(&track(None)).expect("valid");
    let mut resent = track(None);
    resent["sentAt"] = json!("2026-11-30T12:05:00Z");
    resent["timestamp"] = json!("2026-11-30T11:59:00Z");
    assert_eq!(
        first.identified.event_id,
        identify(&resent).expect("valid").identified.event_id,
        "sentAt is transport, and one instant written two ways is one timestamp"
    );
    for (pointer, value) in [
        ("/properties/order_id", json!("o-2")),
        ("/userId", json!("u2")),
        ("/event", json!("Order Refunded")),
        ("/timestamp", json!("2026-11-30T11:59:01Z")),
    ] {
        let mut changed = track(None);
        *changed.pointer_mut(pointer).expect("present") = value;
        assert_ne!(
            first.identified.event_id,
            identify(&changed).expect("valid").identified.event_id,
            "{pointer} is part of the content identity"
        );
    }
}

#[test]
fn the_route_sets_the_type_and_a_batch_item_names_it() {
    let mut body = track(Some("m-1"));
    body.as_object_mut().expect("object").remove("type");
    let routed = identify_message(&body, &envelope("src_a", Some(MessageType::Track)))
        .expect("the route gives the type");
    assert_eq!(routed.kind, MessageType::Track);
    assert_eq!(
        routed.identified.fingerprint,
        identify(&track(Some("m-1")))
            .expect("valid")
            .identified
            .fingerprint
    );
    let err = identify(&body).expect_err("a batch item without type");
    assert_eq!(
        (err.code(), err.field().as_str()),
        ("missing_required_field", "type")
    );
    let err = identify_message(&track(None), &envelope("src_a", Some(MessageType::Page)))
        .expect_err("a track sent to /v1/page");
    assert_eq!(err.field(), "type");
}

#[test]
fn invalid_messages_are_rejected_naming_the_field() {
    let cases: Vec<(Value, &str, &str)> = vec![
        (json!("text"), "wrong_type", ""),
        (
            json!({"type": "track", "event": "E"}),
            "missing_required_field",
            "userId",
        ),
        (
            json!({"type": "track", "userId": "u"}),
            "missing_required_field",
            "event",
        ),
        (
            json!({"type": "track", "event": "E", "userId": [7]}),
            "wrong_type",
            "userId",
        ),
        (
            json!({"type": "track", "event": "E", "userId": "u", "properties": []}),
            "wrong_type",
            "properties",
        ),
        (
            json!({"type": "track", "event": "E", "userId": "u", "timestamp": "yesterday"}),
            "invalid_value",
            "timestamp",
        ),
        (
            json!({"type": "track", "event": "E", "userId": "u\u{0}"}),
            "invalid_value",
            "userId",
        ),
        (
            json!({"type": "group", "userId": "u"}),
            "missing_required_field",
            "groupId",
        ),
        (
            json!({"type": "alias", "userId": "u"}),
            "missing_required_field",
            "previousId",
        ),
        (
            json!({"type": "fly", "userId": "u"}),
            "invalid_value",
            "type",
        ),
        (
            json!({"type": "track", "event": "E", "userId": "u", "properties": {"blob": "x".repeat(33_000)}}),
            "message_too_large",
            "",
        ),
    ];
    for (message, code, field) in cases {
        let err = identify(&message).expect_err("invalid");
        assert_eq!(
            (err.code(), err.field().as_str()),
            (code, field),
            "{message}"
        );
    }
}

#[test]
fn the_event_time_is_corrected_for_clock_skew_as_segment_documents() {
    let (received, sent, at) = (10_000_000, 9_000_000, 8_000_000);
    assert_eq!(
        corrected_timestamp(received, Some(sent), Some(at)),
        9_000_000
    );
    assert_eq!(corrected_timestamp(received, None, Some(at)), at);
    assert_eq!(corrected_timestamp(received, Some(sent), None), received);
    // The client's clock is 10 s ahead: it stamped 11:59:00 and sent at 12:00:00 by its
    // clock, the server received at 12:00:10: the event happened 60 s before receipt.
    let message = identify(&track(Some("m-1"))).expect("valid");
    assert_eq!(
        message.identified.occurred_at_us,
        Some(parse_rfc3339_micros("2026-11-30T11:59:10Z").expect("a time"))
    );
    assert_eq!(
        message.payload["timestamp"],
        json!("2026-11-30T11:59:10.000000Z")
    );
    assert_eq!(
        message.payload["originalTimestamp"],
        json!("2026-11-30T11:59:00.000+00:00")
    );
    assert_eq!(
        message.payload["receivedAt"],
        json!("2026-11-30T12:00:10.000000Z")
    );
    // The server sets `originalTimestamp` (and `receivedAt`): a client's is not kept, on
    // a message without a `timestamp` either.
    let mut untimed = track(Some("m-2"));
    untimed.as_object_mut().map(|m| m.remove("timestamp"));
    untimed["originalTimestamp"] = json!("1998-01-01T00:00:00Z");
    untimed["receivedAt"] = json!("1999-01-01T00:00:00Z");
    let stored = identify(&untimed).expect("valid");
    assert!(
        stored.payload.get("originalTimestamp").is_none(),
        "{}",
        stored.payload
    );
    assert_eq!(
        stored.payload["receivedAt"],
        json!("2026-11-30T12:00:10.000000Z")
    );
}

/// A correction that would leave the years 0001–9999 keeps the client's timestamp: a
/// retry of .NET's default date must not be taken or refused by its `sentAt` alone.
#[test]
fn a_correction_outside_the_writable_years_keeps_the_clients_timestamp() {
    let received = parse_rfc3339_micros(RECEIVED).expect("a time");
    let mut ids = Vec::new();
    for sent_at in ["2026-11-30T12:00:15Z", "2026-11-30T12:00:05Z"] {
        let mut message = track(Some("m-min"));
        message["timestamp"] = json!("0001-01-01T00:00:00Z");
        message["sentAt"] = json!(sent_at);
        let taken = identify(&message).expect("taken, whatever the client's clock");
        let corrected = taken.identified.occurred_at_us.expect("a time");
        let first = parse_rfc3339_micros("0001-01-01T00:00:00Z").expect("a time");
        let sent = parse_rfc3339_micros(sent_at).expect("a time");
        let expected = if received - (sent - first) < first {
            first
        } else {
            received - (sent - first)
        };
        assert_eq!(corrected, expected, "{sent_at}");
        ids.push(taken.identified.event_id);
    }
    assert_eq!(ids[0], ids[1], "one message");
}

#[test]
fn the_batch_sent_at_and_context_apply_to_each_message_and_the_write_key_is_not_kept() {
    let mut message = track(Some("m-1"));
    let object = message.as_object_mut().expect("object");
    object.remove("sentAt");
    object.insert("writeKey".into(), json!("tlw_secret"));
    let context = json!({"ip": "203.0.113.9", "library": {"name": "batch"}});
    let mut around = envelope("src_a", None);
    around.sent_at = Some("2026-11-30T12:00:00Z");
    around.context = context.as_object();
    let identified = identify_message(&message, &around).expect("valid");
    assert_eq!(identified.payload["context"]["ip"], json!("203.0.113.9"));
    assert_eq!(
        identified.payload["context"]["library"]["name"],
        json!("analytics-python")
    );
    assert!(identified.payload.get("writeKey").is_none());
    assert_eq!(
        identified.identified.occurred_at_us,
        Some(parse_rfc3339_micros("2026-11-30T11:59:10Z").expect("a time"))
    );
}

#[test]
fn frozen_message_ids_never_change() {
    // Re-derived outside this code base (Python's hashlib and json with sorted keys):
    // SHA-256 of "segment.message\n1\n" and the RFC 8785 bytes of the identity document.
    // A change here re-keys stored messages: make it a new contract version instead.
    let with_id = identify(&track(Some("m-1"))).expect("valid");
    assert_eq!(
        with_id.identified.event_id.as_str(),
        "fd835642f673899ffa79f9411129f4e34d1bbc8aabf9c1e2137a0a37c1165317"
    );
    let content = json!({
        "type": "track", "event": "Order Completed", "anonymousId": "a-1",
        "properties": {"order_id": "o-1"}, "timestamp": "2026-11-30T11:59:00Z",
        "sentAt": "2026-11-30T12:00:00Z"
    });
    assert_eq!(
        identify(&content)
            .expect("valid")
            .identified
            .event_id
            .as_str(),
        "d56a05e4f5a54c040c6573c0020624fb5b19b13e0626734751ae4af8442e4f27"
    );
}

#[test]
fn an_integer_id_is_its_decimal_string() {
    for with_id in [Some("m-1"), None] {
        let as_string = identify(&track(with_id)).expect("valid");
        let mut as_number = track(with_id);
        as_number["userId"] = json!(1);
        let mut as_number_string = track(with_id);
        as_number_string["userId"] = json!("1");
        let number = identify(&as_number).expect("an integer userId is accepted");
        let string = identify(&as_number_string).expect("valid");
        assert_eq!(number.identified.event_id, string.identified.event_id);
        assert_eq!(number.identified.fingerprint, string.identified.fingerprint);
        assert_eq!(number.user_id.as_deref(), Some("1"));
        assert_eq!(number.payload["userId"], "1");
        assert_ne!(
            number.identified.fingerprint, as_string.identified.fingerprint,
            "u1 is another user"
        );
    }
    let group = json!({"type": "group", "userId": 7, "groupId": 12, "anonymousId": -3});
    let stored = identify(&group).expect("valid").payload;
    assert_eq!(
        (
            &stored["userId"],
            &stored["groupId"],
            &stored["anonymousId"]
        ),
        (&json!("7"), &json!("12"), &json!("-3"))
    );
    let alias = json!({"type": "alias", "userId": "u2", "previousId": 99});
    assert_eq!(identify(&alias).expect("valid").payload["previousId"], "99");
    // Only integers: a fraction is no id.
    let mut fraction = track(None);
    fraction["userId"] = json!(4.5);
    let err = identify(&fraction).expect_err("a fraction is refused");
    assert_eq!(
        (err.code(), err.field()),
        ("wrong_type", "userId".to_string())
    );
}

#[test]
fn the_timestamps_libraries_write_outside_rfc_3339_are_read_as_iso_8601() {
    let at = |text: &str| {
        let mut message = track(Some("m-t"));
        message["timestamp"] = json!(text);
        message.as_object_mut().expect("object").remove("sentAt");
        identify(&message).map(|m| m.identified.occurred_at_us)
    };
    let utc = parse_rfc3339_micros("2024-05-01T10:00:00Z").ok();
    // analytics.NET's "o" format of a time of unspecified kind: no offset, taken as UTC.
    assert_eq!(at("2024-05-01T10:00:00.0000000").expect("valid"), utc);
    assert_eq!(at("2024-05-01T10:00:00").expect("valid"), utc);
    // analytics-go v2's %z: an offset without its colon.
    assert_eq!(at("2024-05-01T11:00:00+0100").expect("valid"), utc);
    assert_eq!(at("2024-05-01T04:30:00.000-0530").expect("valid"), utc);
    // RFC 3339 as before.
    assert_eq!(at("2024-05-01T12:00:00+02:00").expect("valid"), utc);
    for refused in [
        "2024-05-01",
        "2024-05-01T10:00",
        "2024-05-01T10:00:00.",
        "2024-05-01T10:00:00+01",
        "2024-05-01T10:00:00+01000",
        "2024-05-01T10:00:00 UTC",
        "2024-13-01T10:00:00",
        "yesterday",
    ] {
        let err = at(refused).expect_err(refused);
        assert_eq!(
            (err.code(), err.field()),
            ("invalid_value", "timestamp".to_string()),
            "{refused}"
        );
    }
}

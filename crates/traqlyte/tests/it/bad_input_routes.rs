//! The bad-input table over every route (issue 15): each route of the route table is one
//! row (`routes`), each kind of hostile input one generated case (`cases`): malformed
//! JSON, a body of the wrong type, huge and unrepresentable numbers, NaN and Infinity,
//! deep nesting, oversized bodies and batches, invalid UTF-8, NUL, over-long strings and
//! keys, unknown fields and names, missing and wrong credentials. Every case must get a
//! 4xx in the route's documented status, in the JSON error shape (`{"error":{"code",
//! "message"}}`; the web UI answers its HTML page), and leave the row count of every
//! table of the database unchanged (`RowCounts`).
//!
//! Adding a route is one `Route` row in `routes`.

use std::collections::BTreeMap;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::{Connection, Row};
use traqlyte_server::ServerConfig;

use crate::helpers::{checkout_event, spawn_app_with, Backend, TestApp};

crate::on_both_backends!(every_route_refuses_every_kind_of_bad_input_and_no_table_changes);

const ADMIN_TOKEN: &str = "admin-token-for-bad-input-routes-0123456789abcdef";
/// The test server's batch bound, so an oversized batch stays small.
const BATCH_MAX: usize = 10;

/// How a route authenticates.
#[derive(Clone, Copy, PartialEq)]
enum Auth {
    /// The tenant's API key, `Authorization: Bearer`.
    Tenant,
    /// A Segment source's write key, HTTP Basic.
    WriteKey,
    /// The operator's admin token.
    Admin,
    /// None (the web UI's login form).
    None,
}

/// How a route's body is sent.
#[derive(Clone, Copy, PartialEq)]
enum Body {
    /// No body (GET, DELETE).
    None,
    /// A JSON object whose unknown fields are refused (a serde body type).
    Closed,
    /// A JSON object whose content is free beyond its rules (an event, a Segment
    /// message, an OpenLineage RunEvent): unknown fields are content.
    Open,
    /// A JSON array of items (the native batch routes).
    Array,
    /// An HTML form (the web UI's login).
    Form,
}

/// One route of the table: a request known to be good, and what its refusals look like.
struct Route {
    method: Method,
    /// The path with real ids, the good request's.
    path: String,
    auth: Auth,
    body: Body,
    /// The known-good body (`Null` for routes without one).
    good: Value,
    /// The status of a body breaking a value rule: 422 on the native API, 400 where the
    /// protocol's clients expect it (OpenLineage, Segment).
    rule_status: StatusCode,
    /// A string field the route bounds (JSON pointer): NUL and over-long text go there.
    text_field: Option<&'static str>,
    /// A number field (JSON pointer): huge and unrepresentable numbers go there.
    number_field: Option<&'static str>,
    /// The same route naming something that does not exist, answered 404.
    unknown: Option<(String, Value)>,
    /// A batch whose items are free content (events): unknown fields are stored.
    open_items: bool,
    /// The status of a body over the route's byte limit: 413, Segment's documented 400.
    oversize_status: StatusCode,
}

fn route(method: Method, path: impl Into<String>, auth: Auth, body: Body, good: Value) -> Route {
    Route {
        method,
        path: path.into(),
        auth,
        body,
        good,
        rule_status: StatusCode::UNPROCESSABLE_ENTITY,
        text_field: None,
        number_field: None,
        unknown: None,
        open_items: false,
        oversize_status: StatusCode::PAYLOAD_TOO_LARGE,
    }
}

impl Route {
    fn text(mut self, pointer: &'static str) -> Self {
        self.text_field = Some(pointer);
        self
    }
    fn number(mut self, pointer: &'static str) -> Self {
        self.number_field = Some(pointer);
        self
    }
    fn unknown(mut self, path: impl Into<String>, body: Value) -> Self {
        self.unknown = Some((path.into(), body));
        self
    }
    fn open_items(mut self) -> Self {
        self.open_items = true;
        self
    }
    fn rules(mut self, status: StatusCode) -> Self {
        self.rule_status = status;
        self
    }
}

/// The ids the routes' good requests name.
struct World {
    app: TestApp,
    campaign: String,
    assignment: String,
    event_id: String,
    outcome: String,
    source: String,
    write_key: String,
}

const UNKNOWN_CAMPAIGN: &str = "cmp_00000000000000000000000000000000";
const UNKNOWN_ASSIGNMENT: &str = "asg_00000000000000000000000000000000";
const UNKNOWN_OUTCOME: &str = "out_00000000000000000000000000000000";
const UNKNOWN_EVENT: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Every route of `routes/mod.rs` (and the UI's and admin's routers). A new route is a
/// new row here.
fn routes(w: &World) -> Vec<Route> {
    use Auth::*;
    use Body as B;
    let (campaign, assignment) = (&w.campaign, &w.assignment);
    let now = traqlyte_identity::format_rfc3339_micros(traqlyte_store::now_us());
    let outcome = json!({"assignment_id": assignment, "dedupe_key": "k-new", "metric": "revenue", "value": 1.5, "occurred_at": now});
    let campaign_body = json!({"key": "fresh", "name": "Fresh",
        "arms": [{"key": "control", "weight": 1}, {"key": "treatment", "weight": 1}],
        "metrics": [{"name": "revenue", "kind": "sum", "window_hours": 24}]});
    let mut event = checkout_event("order-new");
    event["amount"] = json!(12.5);
    let track = json!({"type": "track", "messageId": "m-new", "userId": "u1", "event": "Order Completed",
        "properties": {"revenue": 3.5}, "timestamp": now});
    let lineage = json!({"eventType": "COMPLETE", "eventTime": now, "producer": "https://example.com/t",
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
        "run": {"runId": "00000000-0000-4000-8000-00000000abcd"},
        "job": {"namespace": "ns", "name": "job"}, "inputs": [], "outputs": [],
        "facets": {}});
    let contract = json!({"name": "fresh_contract", "version": 1,
        "fields": [{"pointer": "/id", "required": true, "type": "string"}]});
    let segment = |path: &str, body: Value| {
        let mut route =
            route(Method::POST, path, WriteKey, B::Open, body).rules(StatusCode::BAD_REQUEST);
        route.oversize_status = StatusCode::BAD_REQUEST;
        route
    };
    let identify = json!({"type": "identify", "messageId": "m-id", "userId": "u1", "traits": {"plan": "pro"}, "timestamp": now});
    let page = json!({"type": "page", "messageId": "m-p", "userId": "u1", "name": "Home", "timestamp": now});
    let screen = json!({"type": "screen", "messageId": "m-s", "userId": "u1", "name": "Home", "timestamp": now});
    let group = json!({"type": "group", "messageId": "m-g", "userId": "u1", "groupId": "g1", "timestamp": now});
    let alias = json!({"type": "alias", "messageId": "m-a", "userId": "u1", "previousId": "u0", "timestamp": now});
    let get = |path: String| route(Method::GET, path, Tenant, B::None, Value::Null);
    let event_path = format!("/events/checkout_completed/{}", w.event_id);
    vec![
        route(Method::POST, "/contracts", Tenant, B::Closed, contract).text("/name"),
        get("/contracts".into()),
        get("/contracts/checkout_completed".into()).unknown("/contracts/nope", Value::Null),
        get("/contracts/checkout_completed/collisions".into())
            .unknown("/contracts/nope/collisions", Value::Null),
        route(Method::POST, "/campaigns", Tenant, B::Closed, campaign_body)
            .text("/name")
            .number("/arms/0/weight"),
        get(format!("/campaigns/{campaign}"))
            .unknown(format!("/campaigns/{UNKNOWN_CAMPAIGN}"), Value::Null),
        get(format!("/campaigns/{campaign}/versions"))
            .unknown(format!("/campaigns/{UNKNOWN_CAMPAIGN}/versions"), Value::Null),
        route(
            Method::POST,
            format!("/campaigns/{campaign}/publish"),
            Tenant,
            B::Closed,
            json!({"note": "n", "arms": [{"key": "control", "weight": 1}, {"key": "treatment", "weight": 2}]}),
        )
        .text("/note")
        .number("/arms/1/weight")
        .unknown(format!("/campaigns/{UNKNOWN_CAMPAIGN}/publish"), json!({})),
        get(format!("/campaigns/{campaign}/report"))
            .unknown(format!("/campaigns/{UNKNOWN_CAMPAIGN}/report"), Value::Null),
        route(
            Method::POST,
            "/assignments",
            Tenant,
            B::Closed,
            json!({"campaign_id": campaign, "unit_id": "u-new"}),
        )
        .text("/unit_id")
        .unknown(
            "/assignments",
            json!({"campaign_id": UNKNOWN_CAMPAIGN, "unit_id": "u-new"}),
        ),
        route(
            Method::POST,
            "/assignments/batch",
            Tenant,
            B::Array,
            json!([{"campaign_id": campaign, "unit_id": "u-new"}]),
        ),
        route(Method::POST, "/outcome", Tenant, B::Closed, outcome.clone())
            .text("/dedupe_key")
            .number("/value")
            .unknown(
                "/outcome",
                json!({"assignment_id": UNKNOWN_ASSIGNMENT, "dedupe_key": "k", "metric": "revenue", "value": 1, "occurred_at": now}),
            ),
        route(Method::POST, "/outcomes/batch", Tenant, B::Array, json!([outcome])),
        get(format!("/outcomes/{}", w.outcome))
            .unknown(format!("/outcomes/{UNKNOWN_OUTCOME}"), Value::Null),
        route(
            Method::POST,
            format!("/outcomes/{}/supersessions", w.outcome),
            Tenant,
            B::Closed,
            json!({"value": 3.5, "reason": "refund"}),
        )
        .text("/reason")
        .number("/value")
        .unknown(
            format!("/outcomes/{UNKNOWN_OUTCOME}/supersessions"),
            json!({"value": 3.5, "reason": "refund"}),
        ),
        get("/ops/duplicates".into()),
        get("/ops/collisions".into()),
        get("/ops/semantic-duplicates".into()),
        route(
            Method::POST,
            "/ops/webhooks",
            Tenant,
            B::Closed,
            json!({"url": "http://127.0.0.1:9/hook"}),
        )
        .text("/url"),
        get("/ops/webhooks".into()),
        get("/deadletters".into()),
        route(
            Method::POST,
            "/events/checkout_completed",
            Tenant,
            B::Open,
            event.clone(),
        )
        .number("/amount")
        .unknown("/events/nope", event.clone()),
        route(
            Method::POST,
            "/events/checkout_completed/batch",
            Tenant,
            B::Array,
            json!([event.clone()]),
        )
        .open_items()
        .unknown("/events/nope/batch", json!([event.clone()])),
        get(event_path.clone()).unknown(
            format!("/events/checkout_completed/{UNKNOWN_EVENT}"),
            Value::Null,
        ),
        route(
            Method::POST,
            format!("{event_path}/supersessions"),
            Tenant,
            B::Closed,
            json!({"event": checkout_event("order_1"), "reason": "fix"}),
        )
        .text("/reason")
        .unknown(
            format!("/events/checkout_completed/{UNKNOWN_EVENT}/supersessions"),
            json!({"event": checkout_event("order_1"), "reason": "fix"}),
        ),
        route(Method::POST, "/api/v1/lineage", Tenant, B::Open, lineage)
            .rules(StatusCode::BAD_REQUEST)
            .text("/job/name"),
        get("/api/v1/lineage?nodeId=job:ns:job".into()),
        get("/lineage/ancestors?node=job:ns:job".into())
            .unknown("/lineage/ancestors?node=job:ns:nope", Value::Null),
        get("/lineage/descendants?node=job:ns:job".into())
            .unknown("/lineage/descendants?node=job:ns:nope", Value::Null),
        get("/lineage/stats".into()),
        get("/stats".into()),
        segment("/v1/track", track.clone())
            .text("/event")
            .number("/properties/revenue"),
        segment("/v1/identify", identify.clone()).text("/userId"),
        segment("/v1/page", page.clone()).text("/name"),
        segment("/v1/screen", screen.clone()).text("/name"),
        segment("/v1/group", group.clone()).text("/groupId"),
        segment("/v1/alias", alias.clone()).text("/previousId"),
        segment("/v1/batch", json!({"batch": [track.clone(), identify.clone()]})),
        // The same routes under the paths other libraries post to.
        segment("/v1/t", track.clone()).text("/event"),
        segment("/v1/i", identify.clone()).text("/userId"),
        segment("/v1/p", page).text("/name"),
        segment("/v1/s", screen).text("/name"),
        segment("/v1/g", group).text("/groupId"),
        segment("/v1/a", alias).text("/previousId"),
        segment("/v1/b", json!({"batch": [track.clone(), identify.clone()]})),
        segment("/v1/import", json!({"batch": [track.clone(), identify.clone()]})),
        segment("/v1/import/", json!({"batch": [track.clone(), identify]})),
        get("/sources".into()),
        get(format!("/sources/{}/rejections", w.source))
            .unknown("/sources/src_00000000000000000000000000000000/rejections", Value::Null),
        route(
            Method::POST,
            format!("/campaigns/{campaign}/bindings"),
            Tenant,
            B::Closed,
            json!({"metric": "revenue", "event": "Order Completed", "value_pointer": "/properties/revenue"}),
        )
        .text("/event")
        .unknown(
            format!("/campaigns/{UNKNOWN_CAMPAIGN}/bindings"),
            json!({"metric": "revenue", "event": "Order Completed"}),
        ),
        get(format!("/campaigns/{campaign}/bindings"))
            .unknown(format!("/campaigns/{UNKNOWN_CAMPAIGN}/bindings"), Value::Null),
        route(Method::GET, "/admin/tenants", Admin, B::None, Value::Null),
        route(Method::POST, "/admin/tenants", Admin, B::Closed, json!({"name": "acme"}))
            .text("/name"),
        route(Method::GET, "/admin/tenants/test tenant/keys", Admin, B::None, Value::Null)
            .unknown("/admin/tenants/nobody/keys", Value::Null),
        route(Method::POST, "/admin/tenants/test tenant/keys", Admin, B::None, Value::Null)
            .unknown("/admin/tenants/nobody/keys", Value::Null),
        route(
            Method::DELETE,
            "/admin/tenants/test tenant/keys/tlk_zzzzzzzz",
            Admin,
            B::None,
            Value::Null,
        ),
        route(Method::POST, "/ui/tokens", Tenant, B::None, Value::Null),
        route(Method::POST, "/ui/login", Auth::None, B::Form, Value::Null),
    ]
}

/// One bad request and the statuses its route may answer.
struct Case {
    what: String,
    method: Method,
    path: String,
    credentials: Credentials,
    body: Option<Vec<u8>>,
    expect: Vec<StatusCode>,
    /// A batch judges items alone: a 200 is right when it rejects every item.
    items_rejected: bool,
}

#[derive(Clone, Copy)]
enum Credentials {
    Good,
    Missing,
    Wrong,
}

/// `good` with the value at `pointer` replaced by raw JSON text (a number literal a
/// `Value` cannot hold, `NaN`, invalid UTF-8…).
fn with_raw(good: &Value, pointer: &str, raw: &[u8]) -> Vec<u8> {
    const MARK: &str = "\u{1}raw\u{1}";
    let mut body = good.clone();
    match body.pointer_mut(pointer) {
        Some(slot) => *slot = json!(MARK),
        None => panic!("{pointer} is not in {good}"),
    }
    let text = body.to_string();
    let marked = "\"\\u0001raw\\u0001\"";
    let at = text.find(marked).expect("the mark");
    let mut bytes = text.as_bytes()[..at].to_vec();
    bytes.extend_from_slice(raw);
    bytes.extend_from_slice(&text.as_bytes()[at + marked.len()..]);
    bytes
}

fn with(good: &Value, pointer: &str, value: Value) -> Vec<u8> {
    let mut body = good.clone();
    *body.pointer_mut(pointer).expect("pointer") = value;
    body.to_string().into_bytes()
}

/// `good` with one more top-level key (the first item's, for arrays).
fn with_key(good: &Value, key: &str, value: Value) -> Vec<u8> {
    let mut body = good.clone();
    let object = match &mut body {
        Value::Array(items) => items[0].as_object_mut(),
        other => other.as_object_mut(),
    };
    object.expect("an object").insert(key.to_string(), value);
    body.to_string().into_bytes()
}

fn nested_array(depth: usize) -> Vec<u8> {
    let inner = (0..depth).fold(json!(1), |inner, _| json!([inner]));
    json!([{"deep": inner}]).to_string().into_bytes()
}

fn nested(depth: usize) -> Vec<u8> {
    let inner = (0..depth).fold(json!(1), |inner, _| json!([inner]));
    json!({"deep": inner}).to_string().into_bytes()
}

fn cases(route: &Route) -> Vec<Case> {
    use StatusCode as S;
    let rule = route.rule_status;
    let case = |what: &str, body: Option<Vec<u8>>, expect: Vec<StatusCode>| Case {
        what: what.to_string(),
        method: route.method.clone(),
        path: route.path.clone(),
        credentials: Credentials::Good,
        body,
        expect,
        items_rejected: false,
    };
    let item = |what: &str, body: Vec<u8>| Case {
        items_rejected: true,
        ..case(what, Some(body), vec![S::OK])
    };
    let mut out = Vec::new();
    // Credentials, on every route but the login form, which takes the key in its body.
    if route.auth != Auth::None {
        let body = match route.body {
            Body::None => None,
            _ => Some(route.good.to_string().into_bytes()),
        };
        for credentials in [Credentials::Missing, Credentials::Wrong] {
            out.push(Case {
                credentials,
                what: match credentials {
                    Credentials::Missing => "missing credentials",
                    _ => "wrong credentials",
                }
                .to_string(),
                ..case("", body.clone(), vec![S::UNAUTHORIZED])
            });
        }
    }
    // A NUL in the path's last segment: a 400 where that segment is a parameter (named:
    // `hostile_text.rs` checks the field per parameter), a 404 or 405 where it is a
    // fixed segment, which then matches no route. Never a write, never a 5xx.
    if let Some(at) = route.path.rfind('/') {
        let mut path = route.path.clone();
        path.insert_str(at + 1, "%00");
        let body = (route.body != Body::None).then(|| route.good.to_string().into_bytes());
        out.push(Case {
            path,
            ..case(
                "NUL in the path",
                body,
                vec![S::BAD_REQUEST, S::NOT_FOUND, S::METHOD_NOT_ALLOWED],
            )
        });
    }
    if let Some((path, body)) = &route.unknown {
        let body = (!body.is_null()).then(|| body.to_string().into_bytes());
        out.push(Case {
            path: path.clone(),
            ..case("an unknown name", body, vec![S::NOT_FOUND])
        });
    }
    if route.body == Body::Form {
        out.push(case(
            "an unknown API key in the login form",
            Some(b"api_key=tlk_000000000000000000000000000000000000000000000000".to_vec()),
            vec![S::UNAUTHORIZED, S::FORBIDDEN],
        ));
        out.push(case(
            "a login form over its limit",
            Some(vec![b'a'; 64 * 1024]),
            vec![S::PAYLOAD_TOO_LARGE, S::BAD_REQUEST, S::FORBIDDEN],
        ));
        return out;
    }
    if route.body == Body::None {
        return out;
    }
    let good = &route.good;
    let parse = vec![S::BAD_REQUEST];
    let shape = vec![S::BAD_REQUEST, rule];
    out.push(case(
        "malformed JSON",
        Some(b"{\"a\": ".to_vec()),
        parse.clone(),
    ));
    out.push(case(
        "a JSON string body",
        Some(b"\"text\"".to_vec()),
        shape.clone(),
    ));
    out.push(case(
        "a body of the other container type",
        Some(match route.body {
            Body::Array => b"{}".to_vec(),
            _ => b"[]".to_vec(),
        }),
        shape.clone(),
    ));
    out.push(case("nesting 200 deep", Some(nested(200)), parse.clone()));
    out.push(case("NaN", Some(b"{\"a\": NaN}".to_vec()), parse.clone()));
    out.push(case(
        "-Infinity",
        Some(b"{\"a\": -Infinity}".to_vec()),
        parse.clone(),
    ));
    out.push(case(
        "invalid UTF-8",
        Some(with_raw(good, &first_string(good), b"\"\xff\xfe\"")),
        parse.clone(),
    ));
    out.push(case(
        "a key twice",
        Some(duplicate_key(good)),
        parse.clone(),
    ));
    let mut padded = good.to_string().into_bytes();
    let huge = format!(",\"padding\":\"{}\"", "x".repeat(6 * 1024 * 1024));
    let at = match route.body {
        Body::Array => padded.len() - 2,
        _ => padded.len() - 1,
    };
    padded.splice(at..at, huge.into_bytes());
    out.push(case(
        "a body over 6 MiB",
        Some(padded),
        vec![route.oversize_status],
    ));
    if route.body == Body::Closed {
        out.push(case(
            "an unknown field",
            Some(with_key(good, "no_such_field", json!(1))),
            shape.clone(),
        ));
        out.push(case(
            "an unknown field with a 10,000-character name",
            Some(with_key(good, &"k".repeat(10_000), json!(1))),
            shape.clone(),
        ));
    }
    if route.body == Body::Array {
        let first = good[0].clone();
        let items: Vec<Value> = (0..=BATCH_MAX).map(|_| first.clone()).collect();
        out.push(case(
            "a batch one item over the bound",
            Some(json!(items).to_string().into_bytes()),
            vec![S::PAYLOAD_TOO_LARGE, rule],
        ));
        out.push(item("an item of the wrong type", b"[\"text\", 7]".to_vec()));
        // The body reader refuses the whole batch before items are judged.
        out.push(case(
            "an item nesting 200 deep",
            Some(nested_array(200)),
            parse.clone(),
        ));
        if !route.open_items {
            out.push(item(
                "an item with an unknown field",
                with_key(good, "no_such_field", json!(1)),
            ));
            out.push(item(
                "an item with a 10,000-character unknown field",
                with_key(good, &"k".repeat(10_000), json!(1)),
            ));
        }
    }
    if let Some(pointer) = route.number_field {
        for literal in [
            "1e400",
            "-1e400",
            "1e-400",
            "9007199254740993",
            "123456789012345678901234567890",
            "1.0000000000000000000001",
        ] {
            out.push(case(
                &format!("the number {literal} in {pointer}"),
                Some(with_raw(good, pointer, literal.as_bytes())),
                shape.clone(),
            ));
        }
        // In free content (a Segment property, an event field) a string is content.
        if route.body == Body::Closed {
            out.push(case(
                &format!("a string in the number field {pointer}"),
                Some(with(good, pointer, json!("12"))),
                shape.clone(),
            ));
        }
    }
    if let Some(pointer) = route.text_field {
        out.push(case(
            &format!("NUL in {pointer}"),
            Some(with(good, pointer, json!("a\u{0}b"))),
            shape.clone(),
        ));
        out.push(case(
            &format!("100,000 characters in {pointer}"),
            Some(with(good, pointer, json!("x".repeat(100_000)))),
            shape.clone(),
        ));
        // Segment's ids take an integer as its decimal string (the Ruby and PHP
        // libraries send `user.id` as a number): there only a fraction is refused.
        let segment_id = route.path.starts_with("/v1/")
            && traqlyte_identity::segment::INTEGER_ID_FIELDS
                .iter()
                .any(|field| pointer.strip_prefix('/') == Some(*field));
        let numbers = if segment_id {
            vec![json!(12.5)]
        } else {
            vec![json!(12), json!(12.5)]
        };
        for number in numbers {
            out.push(case(
                &format!("the number {number} in the text field {pointer}"),
                Some(with(good, pointer, number)),
                shape.clone(),
            ));
        }
    }
    out
}

/// The pointer of the first string anywhere in `value` (for invalid UTF-8).
fn first_string(value: &Value) -> String {
    fn find(value: &Value, at: String) -> Option<String> {
        match value {
            Value::String(_) => Some(at),
            Value::Array(items) => items
                .iter()
                .enumerate()
                .find_map(|(i, v)| find(v, format!("{at}/{i}"))),
            Value::Object(map) => map.iter().find_map(|(k, v)| find(v, format!("{at}/{k}"))),
            _ => None,
        }
    }
    find(value, String::new()).expect("a string field")
}

/// The body (its first item, for a batch) with its first key written twice.
fn duplicate_key(good: &Value) -> Vec<u8> {
    let object = match good {
        Value::Array(items) => &items[0],
        other => other,
    };
    let (key, value) = object
        .as_object()
        .and_then(|map| map.iter().next())
        .expect("a key");
    let pair = format!("{}:{value},", json!(key));
    let text = good.to_string();
    let open = text.find('{').expect("an object");
    format!("{}{pair}{}", &text[..=open], &text[open + 1..]).into_bytes()
}

/// The row count of every table of a test database, read in one statement.
pub struct RowCounts {
    conn: Conn,
}

enum Conn {
    Pg(sqlx::PgConnection),
    Sqlite(sqlx::SqliteConnection),
}

impl RowCounts {
    pub async fn connect(backend: Backend, url: &str) -> RowCounts {
        let conn = match backend {
            Backend::Postgres => Conn::Pg(sqlx::PgConnection::connect(url).await.expect("pg")),
            Backend::Sqlite => Conn::Sqlite(
                sqlx::SqliteConnection::connect(&format!("sqlite://{url}"))
                    .await
                    .expect("sqlite"),
            ),
        };
        RowCounts { conn }
    }

    /// Table name → rows.
    pub async fn now(&mut self) -> BTreeMap<String, i64> {
        let tables: Vec<String> = match &mut self.conn {
            Conn::Pg(conn) => sqlx::query_scalar(
                "SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' ORDER BY 1",
            )
            .fetch_all(conn)
            .await
            .expect("tables"),
            Conn::Sqlite(conn) => sqlx::query_scalar(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY 1",
            )
            .fetch_all(conn)
            .await
            .expect("tables"),
        };
        assert!(tables.len() > 20, "the schema's tables: {tables:?}");
        let sql = tables
            .iter()
            .map(|t| format!("SELECT '{t}' AS t, COUNT(*) AS n FROM \"{t}\""))
            .collect::<Vec<_>>()
            .join(" UNION ALL ");
        let pairs: Vec<(String, i64)> = match &mut self.conn {
            Conn::Pg(conn) => sqlx::query(&sql)
                .fetch_all(conn)
                .await
                .expect("counts")
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect(),
            Conn::Sqlite(conn) => sqlx::query(&sql)
                .fetch_all(conn)
                .await
                .expect("counts")
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect(),
        };
        pairs.into_iter().collect()
    }
}

async fn world(backend: Backend) -> World {
    let config = ServerConfig {
        admin_token: Some(ADMIN_TOKEN.to_string()),
        batch_events_max: BATCH_MAX,
        late_events: traqlyte_store::LateEvents::Reconcile,
        // Below the table's 6 MiB oversized body (the default is 8 MiB).
        lineage_body_bytes_max: 4 * 1024 * 1024,
        ..ServerConfig::default()
    };
    let app = spawn_app_with(backend, config).await;
    app.register_checkout_contract().await;
    let body = json!({"key": "live", "name": "Live",
        "arms": [{"key": "control", "weight": 1}, {"key": "treatment", "weight": 1}],
        "metrics": [{"name": "revenue", "kind": "sum", "window_hours": 168}]});
    let campaign = crate::experiments::create_published(&app, &body).await;
    let assigned = app
        .post_json(
            "/assignments",
            &json!({"campaign_id": campaign, "unit_id": "u1"}),
        )
        .await;
    let assignment = assigned.body["assignment_id"]
        .as_str()
        .expect("assignment")
        .to_string();
    let now = traqlyte_identity::format_rfc3339_micros(traqlyte_store::now_us());
    let recorded = app
        .post_json(
            "/outcome",
            &json!({"assignment_id": assignment, "dedupe_key": "k-live", "metric": "revenue", "value": 2, "occurred_at": now}),
        )
        .await;
    assert_eq!(recorded.status, StatusCode::OK, "{}", recorded.body);
    let outcome = recorded.body["outcome_id"]
        .as_str()
        .expect("outcome_id")
        .to_string();
    // The server's background fold moves appended per-unit sums into `unit_metrics`
    // every 10 s: folded now, so no fold changes the row counts between a case's
    // snapshots (only a case that wrote an outcome could give it anything to move).
    app.store.fold_unit_metrics().await.expect("fold");
    let event = app.post_event(&checkout_event("order_1")).await;
    let event_id = event.body["event_id"].as_str().expect("event").to_string();
    let tenant = app.tenant().await;
    let (source, write_key) = app
        .store
        .create_source(
            &tenant,
            &traqlyte_store::SourceName::parse("web").expect("name"),
        )
        .await
        .expect("source");
    World {
        app,
        campaign,
        assignment,
        event_id,
        outcome,
        source: source.source_id.to_string(),
        write_key: write_key.expose().to_string(),
    }
}

async fn every_route_refuses_every_kind_of_bad_input_and_no_table_changes(backend: Backend) {
    // The good request each bad case is made from is itself accepted (on a world of its
    // own, since it writes): a case refused only because its base was bad proves nothing.
    let good = world(backend).await;
    for route in routes(&good) {
        if route.method == Method::DELETE || route.body == Body::Form {
            continue;
        }
        let mut request = good
            .app
            .client
            .request(route.method.clone(), good.app.url(&route.path));
        if route.body != Body::None {
            request = request
                .header("content-type", "application/json")
                .body(route.good.to_string());
        }
        request = match route.auth {
            Auth::None => request,
            Auth::Tenant => request.bearer_auth(&good.app.key),
            Auth::Admin => request.bearer_auth(ADMIN_TOKEN),
            Auth::WriteKey => request.basic_auth(&good.write_key, Some("")),
        };
        let response = request.send().await.expect("sent");
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        assert!(
            status.is_success(),
            "{} {}: the good request is refused: {status} {text}",
            route.method,
            route.path
        );
    }
    drop(good);

    let world = world(backend).await;
    let app = &world.app;
    let mut counts = RowCounts::connect(backend, app.database_url()).await;
    let mut tried = 0;
    for route in routes(&world) {
        for case in cases(&route) {
            let before = counts.now().await;
            let mut request = app
                .client
                .request(case.method.clone(), app.url(&case.path))
                .header("origin", &app.address);
            if let Some(body) = case.body {
                let content_type = match route.body {
                    Body::Form => "application/x-www-form-urlencoded",
                    _ => "application/json",
                };
                request = request.header("content-type", content_type).body(body);
            }
            request = match (case.credentials, route.auth) {
                (Credentials::Missing, _) | (_, Auth::None) => request,
                (Credentials::Good, Auth::Tenant) => request.bearer_auth(&app.key),
                (Credentials::Good, Auth::Admin) => request.bearer_auth(ADMIN_TOKEN),
                (Credentials::Good, Auth::WriteKey) => {
                    request.basic_auth(&world.write_key, Some(""))
                }
                (Credentials::Wrong, Auth::WriteKey) => request.basic_auth(
                    "tlw_000000000000000000000000000000000000000000000000",
                    Some(""),
                ),
                // A tenant key where the admin token is due is wrong too.
                (Credentials::Wrong, Auth::Admin) => request.bearer_auth(&app.key),
                (Credentials::Wrong, _) => {
                    request.bearer_auth("tlk_000000000000000000000000000000000000000000000000")
                }
            };
            let what = format!("{} {}: {}", case.method, route.path, case.what);
            let response = request.send().await.expect("sent");
            let status = response.status();
            let content_type = response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let bytes = response.bytes().await.expect("body");
            assert!(
                case.expect.contains(&status),
                "{what}: {status} (expected one of {:?}): {}",
                case.expect,
                String::from_utf8_lossy(&bytes[..bytes.len().min(400)])
            );
            if status.is_client_error() {
                if content_type.starts_with("text/html") {
                    assert!(route.path.starts_with("/ui/"), "{what}: an HTML error");
                } else {
                    let body: Value = serde_json::from_slice(&bytes)
                        .unwrap_or_else(|_| panic!("{what}: a JSON error ({content_type})"));
                    let code = body["error"]["code"].as_str().unwrap_or("");
                    let message = body["error"]["message"].as_str().unwrap_or("");
                    assert!(
                        !code.is_empty() && !message.is_empty(),
                        "{what}: the error shape: {body}"
                    );
                    // A field, when named, is named: an empty one (the request as a
                    // whole) is left out, and a message does not start with a blank
                    // where the field's name would be.
                    assert_ne!(body["error"]["field"], "", "{what}: an empty field: {body}");
                    assert!(!message.starts_with(' '), "{what}: the message: {body}");
                }
            }
            if case.items_rejected && status == StatusCode::OK {
                let body: Value = serde_json::from_slice(&bytes).expect("a JSON batch answer");
                let results = body["results"].as_array().expect("results");
                assert!(
                    !results.is_empty() && results.iter().all(|r| r["status"] == "rejected"),
                    "{what}: every item rejected: {body}"
                );
                for result in results {
                    let error = &result["error"];
                    assert_ne!(error["field"], "", "{what}: an empty field: {body}");
                    let message = error["message"].as_str().unwrap_or("");
                    assert!(!message.starts_with(' '), "{what}: the message: {body}");
                }
            }
            assert_eq!(counts.now().await, before, "{what} wrote rows");
            tried += 1;
        }
    }
    assert!(tried > 300, "{tried} cases");
}

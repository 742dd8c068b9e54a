//! `GET /openapi.json`: the OpenAPI 3.1 description of the API, assembled here from the
//! `#[utoipa::path]` attributes on the handlers and the `ToSchema` types they parse and
//! answer; the report's schema comes from `traqlyte_experiments::Report` (its `openapi`
//! feature derives it).
//!
//! The document is built once, on first request, and served as it is; no key is needed
//! to read it.

use std::sync::OnceLock;

use axum::http::header::CONTENT_TYPE;
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{IntoParams, Modify, OpenApi};

use crate::routes::{admin, campaigns, contracts, events, health, lineage, supersessions};

/// The document, assembled once.
pub(crate) fn document() -> &'static str {
    static DOCUMENT: OnceLock<String> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let mut doc = serde_json::to_value(ApiDoc::openapi()).expect("the document serialises");
        for_generated_clients(&mut doc);
        serde_json::to_string(&doc).expect("the document serialises")
    })
}

/// Calls `edit` on every JSON object of `value`, outermost first.
fn each_object(
    value: &mut serde_json::Value,
    edit: &mut impl FnMut(&mut serde_json::Map<String, serde_json::Value>),
) {
    match value {
        serde_json::Value::Object(map) => {
            edit(map);
            map.values_mut().for_each(|v| each_object(v, edit));
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| each_object(v, edit)),
        _ => {}
    }
}

/// A free-form object schema (an event, a RunEvent, a Segment message, a contract)
/// declared to take any property.
fn open_object(schema: &mut serde_json::Map<String, serde_json::Value>) {
    let free_form = schema.get("type") == Some(&serde_json::json!("object"))
        && !schema.contains_key("properties")
        && !schema.contains_key("additionalProperties");
    if free_form {
        schema.insert("additionalProperties".into(), serde_json::Value::Bool(true));
    }
}

/// Every time property of `schema` (`…_at`, `since`, `until`: RFC 3339 strings,
/// docs/api.md's conventions) declared `format: date-time`, so generated clients read
/// them as times.
fn times_as_date_time(schema: &mut serde_json::Map<String, serde_json::Value>) {
    use serde_json::Value;
    let Some(Value::Object(properties)) = schema.get_mut("properties") else {
        return;
    };
    for (name, property) in properties.iter_mut() {
        let time = name.ends_with("_at") || name == "since" || name == "until";
        let text = matches!(property.get("type"), Some(Value::String(t)) if t == "string")
            || property
                .get("type")
                .and_then(Value::as_array)
                .is_some_and(|types| types.contains(&Value::from("string")));
        if time && text {
            property["format"] = Value::from("date-time");
        }
    }
}

/// What generated clients need that the handlers' annotations do not say (a review
/// generated Python and TypeScript clients from the document):
/// - a free-form object (an event, a RunEvent, a Segment message, a contract) takes any
///   property: `additionalProperties: true`, without which openapi-typescript types it
///   `Record<string, never>` and no event can be sent;
/// - the error envelope is one named schema (`ErrorEnvelope`), not one inline copy a
///   generator turns into a class per operation, and its answer declares the
///   `Retry-After` and `WWW-Authenticate` headers some errors carry;
/// - an operation that takes an idempotency key declares `Idempotent-Replayed` on its
///   answers (`true` on an answer replayed from the key's first request), and the
///   envelope's `Retry-After` names `409 request_in_flight` too;
/// - `POST /campaigns/{id}/publish` takes no body as well (an empty body publishes the
///   current arms), and the lineage routes' node parameters are required (without one
///   the answer is `400 missing_parameter`).
fn for_generated_clients(doc: &mut serde_json::Value) {
    use serde_json::{json, Value};
    each_object(doc, &mut |schema| {
        open_object(schema);
        times_as_date_time(schema);
    });
    let envelope = &mut doc["components"]["responses"]["ErrorEnvelope"];
    if let Some(schema) = envelope
        .pointer_mut("/content/application~1json/schema")
        .map(Value::take)
    {
        envelope["content"]["application/json"]["schema"] =
            json!({"$ref": "#/components/schemas/ErrorEnvelope"});
        envelope["headers"] = json!({
            "Retry-After": {
                "description": "seconds to wait before retrying: on `503` answers whose cause clears within a moment (`server_busy`, `store_busy`, `contract_changing`, `request_timeout` on `/v1/*` and `POST /api/v1/lineage`), and on `409 request_in_flight` (the key's first request still runs)",
                "schema": {"type": "integer", "minimum": 0}
            },
            "Idempotent-Replayed": {
                "description": "`true` on an answer replayed from an earlier request with the same idempotency key (a stored `4xx` too)",
                "schema": {"type": "string", "enum": ["true"]}
            },
            "WWW-Authenticate": {
                "description": "on `401`: `Bearer realm=\"traqlyte\"` (`Basic realm=\"traqlyte\"` on `/v1/*`)",
                "schema": {"type": "string"}
            }
        });
        doc["components"]["schemas"]["ErrorEnvelope"] = schema;
    }
    replayed_answers(doc);
    tracking_routes(doc);
    if let Some(body) = doc.pointer_mut("/paths/~1campaigns~1{id}~1publish/post/requestBody") {
        body["required"] = Value::Bool(false);
    }
    for (path, name) in [
        ("/paths/~1lineage~1ancestors/get/parameters", "node"),
        ("/paths/~1lineage~1descendants/get/parameters", "node"),
        ("/paths/~1api~1v1~1lineage/get/parameters", "nodeId"),
    ] {
        if let Some(Value::Array(parameters)) = doc.pointer_mut(path) {
            parameters
                .iter_mut()
                .filter(|p| p["name"] == json!(name))
                .for_each(|p| p["required"] = Value::Bool(true));
        }
    }
}

/// What Segment's tracking routes (`/v1/…`) take and answer beyond the annotations:
/// the write key may come in the body instead of HTTP Basic (analytics.js sends it so),
/// a body may be sent as `text/plain` (analytics.js's short routes do), and their errors
/// repeat `code` and `message` at the top level (what Segment's libraries read), in
/// `SegmentErrorEnvelope`.
fn tracking_routes(doc: &mut serde_json::Value) {
    use serde_json::{json, Value};
    let envelope = doc["components"]["responses"]["ErrorEnvelope"].clone();
    if envelope.is_null() {
        return;
    }
    let mut segment = envelope;
    segment["description"] = json!("an error: the envelope, with `code` and `message` repeated at the top level as Segment's HTTP API answers");
    segment["content"]["application/json"]["schema"] =
        json!({"$ref": "#/components/schemas/SegmentErrorEnvelope"});
    doc["components"]["responses"]["SegmentErrorEnvelope"] = segment;
    doc["components"]["schemas"]["SegmentErrorEnvelope"] = json!({
        "allOf": [
            {"$ref": "#/components/schemas/ErrorEnvelope"},
            {"type": "object", "required": ["code", "message"], "properties": {
                "code": {"type": "string", "description": "`error.code`"},
                "message": {"type": "string", "description": "`error.message`"}
            }}
        ]
    });
    let Some(Value::Object(paths)) = doc.get_mut("paths") else {
        return;
    };
    for operation in paths
        .iter_mut()
        .filter(|(path, _)| path.starts_with("/v1/"))
        .filter_map(|(_, item)| item.as_object_mut())
        .flat_map(|item| item.values_mut())
    {
        if operation.get("security").is_some() {
            operation["security"] = json!([{"write_key": []}, {}]);
        }
        if let Some(Value::Object(content)) = operation.pointer_mut("/requestBody/content") {
            if let Some(json_body) = content.get("application/json").cloned() {
                content.entry("text/plain").or_insert(json_body);
            }
        }
        if let Some(Value::Object(answers)) = operation.get_mut("responses") {
            for (_, answer) in answers
                .iter_mut()
                .filter(|(status, _)| status.starts_with('4') || status.starts_with('5'))
            {
                if answer["$ref"] == json!("#/components/responses/ErrorEnvelope") {
                    *answer = json!({"$ref": "#/components/responses/SegmentErrorEnvelope"});
                }
            }
        }
    }
}

/// Declares `Idempotent-Replayed` on the `2xx` answers of every operation that takes
/// `X-TL-Idempotency-Key` (its error answers share the envelope, which declares it).
fn replayed_answers(doc: &mut serde_json::Value) {
    use serde_json::{json, Value};
    let Some(Value::Object(paths)) = doc.get_mut("paths") else {
        return;
    };
    for operation in paths
        .values_mut()
        .filter_map(Value::as_object_mut)
        .flat_map(|p| p.values_mut())
    {
        let keyed = operation["parameters"].as_array().is_some_and(|ps| {
            ps.iter()
                .any(|p| p["name"] == json!("X-TL-Idempotency-Key"))
        });
        let Some(Value::Object(answers)) = operation.get_mut("responses").filter(|_| keyed) else {
            continue;
        };
        for (_, answer) in answers
            .iter_mut()
            .filter(|(status, _)| status.starts_with('2'))
        {
            answer["headers"]["Idempotent-Replayed"] = json!({
                "description": "`true` on an answer replayed from the first request with this idempotency key; absent otherwise",
                "schema": {"type": "string", "enum": ["true"]}
            });
        }
    }
}

/// `GET /openapi.json`.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "meta",
    responses((status = 200, description = "this document", content_type = "application/json", body = Object),
        (status = 400, response = crate::openapi::ErrorEnvelope))
)]
pub(crate) async fn serve() -> Response {
    let mut response = document().into_response();
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

pub(crate) use crate::error::ErrorEnvelope;

/// The transport idempotency headers of the mutating JSON routes (docs/idempotency.md):
/// either name, 1-255 printable ASCII characters. Both are optional alternatives:
/// `required = false` is spelled out because `value_type = String` (a header is never
/// `null`) hides the `Option` that would otherwise say so.
#[derive(IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)] // Read by the idempotency layer from the headers, never as this type.
pub(crate) struct IdempotencyHeaders {
    /// Optional: a retry with the same key and body gets the first answer again. Send
    /// this or `Idempotency-Key`; sending both with different values is a `400`.
    #[param(
        rename = "X-TL-Idempotency-Key",
        value_type = String,
        required = false,
        min_length = 1,
        max_length = 255,
        pattern = "^[ -~]+$"
    )]
    traqlyte: Option<String>,
    /// Optional: the standard name of `X-TL-Idempotency-Key`. Send either; sending both
    /// with different values is a `400`.
    #[param(
        rename = "Idempotency-Key",
        value_type = String,
        required = false,
        min_length = 1,
        max_length = 255,
        pattern = "^[ -~]+$"
    )]
    standard: Option<String>,
}

/// The values of the answers' `status` fields, as schemas only: the handlers write the
/// words as `&'static str`, and these enums give generated clients the closed set
/// (`#[schema(value_type = …)]` on each field) instead of a bare string.
#[allow(dead_code)] // Never built: read by utoipa for the document only.
mod statuses {
    use utoipa::ToSchema;

    /// A single event or run event: stored now, or a retry of one stored before.
    #[derive(ToSchema)]
    #[schema(rename_all = "lowercase")]
    pub(crate) enum StoredStatus {
        Inserted,
        Duplicate,
    }

    /// An item of an event or outcome batch.
    #[derive(ToSchema)]
    #[schema(rename_all = "lowercase")]
    pub(crate) enum ItemStatus {
        Inserted,
        Duplicate,
        Collision,
        Rejected,
    }

    /// An item of an assignment batch.
    #[derive(ToSchema)]
    #[schema(rename_all = "lowercase")]
    pub(crate) enum AssignmentStatus {
        Assigned,
        Rejected,
    }

    /// A correction: stored (`201`) or the content already current (`200`).
    #[derive(ToSchema)]
    #[schema(rename_all = "lowercase")]
    pub(crate) enum CorrectionStatus {
        Superseded,
        Unchanged,
    }

    /// `/healthz` and `/livez` when they answer `200`.
    #[derive(ToSchema)]
    #[schema(rename_all = "lowercase")]
    pub(crate) enum OkStatus {
        Ok,
    }
}

pub(crate) use statuses::{AssignmentStatus, CorrectionStatus, ItemStatus, OkStatus, StoredStatus};

/// Adds the two bearer schemes: tenants' API keys and the operator's admin token.
struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let bearer = |description: &str| {
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(description))
                    .build(),
            )
        };
        components.add_security_scheme(
            "api_key",
            bearer("a tenant's API key (`tlk_…`): `Authorization: Bearer <api key>`"),
        );
        // Handlers of different modules share names (`show`, `stats`): operation ids are
        // made from the method and the path's words instead. Punctuation is dropped, so a
        // trailing slash is spelled out (`GET /ui` and `GET /ui/` are both routes, and
        // OpenAPI 3.1 wants every id unique); the openapi test checks that they are.
        for (path, item) in openapi.paths.paths.iter_mut() {
            let mut words: Vec<&str> = path
                .split(|c: char| !c.is_ascii_alphanumeric())
                .filter(|w| !w.is_empty())
                .collect();
            if path.len() > 1 && path.ends_with('/') {
                words.push("slash");
            }
            for (method, operation) in [
                ("get", item.get.as_mut()),
                ("post", item.post.as_mut()),
                ("delete", item.delete.as_mut()),
            ] {
                if let Some(operation) = operation {
                    operation.operation_id = Some(format!("{method}_{}", words.join("_")));
                }
            }
        }
        components.add_security_scheme(
            "write_key",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Basic)
                    .description(Some(
                        "a source's write key (`tlw_…`, `traqlyte source create`) as the user name, the password empty; or `writeKey` in the body (docs/segment.md)",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "admin_token",
            bearer("the operator's admin token of `traqlyte serve --admin-token-file`, for `/admin/…` only"),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "TraqLyte",
        description = "At-least-once delivery in, exactly-once facts out. The reference is docs/api.md.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    paths(
        serve,
        health::healthz,
        health::livez,
        health::stats,
        contracts::register,
        contracts::list,
        contracts::show,
        contracts::collisions,
        crate::routes::deadletters::list,
        crate::routes::semantic::list,
        events::post_one,
        events::post_batch,
        events::get_one,
        supersessions::supersede,
        campaigns::create,
        campaigns::show,
        campaigns::versions,
        campaigns::publish,
        crate::experiments::report::get_report,
        crate::experiments::assign,
        crate::experiments::assignments::post_assignments_batch,
        crate::experiments::outcomes::post_outcome,
        crate::experiments::outcomes::post_outcomes_batch,
        crate::experiments::corrections::get_outcome,
        crate::experiments::corrections::supersede_outcome,
        lineage::post_event,
        lineage::graph,
        lineage::ancestors,
        lineage::descendants,
        lineage::stats,
        crate::connectors::segment::track,
        crate::connectors::segment::identify,
        crate::connectors::segment::page,
        crate::connectors::segment::screen,
        crate::connectors::segment::group,
        crate::connectors::segment::alias,
        crate::connectors::segment::batch,
        crate::connectors::segment::import,
        crate::connectors::segment::import_slash,
        crate::connectors::segment::track_short,
        crate::connectors::segment::identify_short,
        crate::connectors::segment::page_short,
        crate::connectors::segment::screen_short,
        crate::connectors::segment::group_short,
        crate::connectors::segment::alias_short,
        crate::connectors::segment::batch_short,
        crate::connectors::segment::list_sources,
        crate::connectors::segment::rejections,
        crate::connectors::segment::bindings::create,
        crate::connectors::segment::bindings::list,
        admin::list_tenants,
        admin::create_tenant,
        admin::list_keys,
        admin::create_key,
        admin::revoke_key,
        crate::ui::landing,
        crate::ui::ui_root,
        crate::ui::ui_root_slash,
        crate::ui::login_page,
        crate::ui::login,
        crate::ui::logout,
        crate::ui::mint_login_token,
        crate::ui::index,
        crate::ui::campaign_page,
        crate::ui::ops::ops_page,
        crate::metrics::scrape,
        crate::ops::duplicates,
        crate::ops::collisions,
        crate::ops::create_webhook,
        crate::ops::list_webhooks,
        crate::ops::delete_webhook,
    ),
    components(schemas(traqlyte_experiments::Report), responses(ErrorEnvelope)),
    modifiers(&Security, &OutsideHorizon),
)]
struct ApiDoc;

/// The `422 outside_horizon` of `POST /events/{contract}`, written out beside the
/// shared 4XX so a client generator sees the refusal it must handle (an occurrence time
/// outside the dedupe horizon; docs/identity.md). Added here rather than on the handler
/// so the description of every horizon refusal lives in one place; in a batch the same
/// error is an item's `error`, the request itself answers 200.
struct OutsideHorizon;

/// What the 422 says.
const OUTSIDE_HORIZON_DESCRIPTION: &str = "`outside_horizon`: the event's occurrence time \
is older than the dedupe horizon (`--dedupe-horizon-days`, default 14) or more than a day \
ahead; nothing was written. `field` names the contract's occurrence pointer; load late \
events with `traqlyte backfill`, or run the server with `--late-events reconcile`. Also \
`number_out_of_range` and the contract's other rule violations (`code` tells which)";

impl Modify for OutsideHorizon {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{Ref, RefOr};
        let Some(item) = openapi.paths.paths.get_mut("/events/{contract}") else {
            return;
        };
        if let Some(operation) = item.post.as_mut() {
            let mut reference = Ref::new("#/components/responses/ErrorEnvelope");
            reference.description = OUTSIDE_HORIZON_DESCRIPTION.to_string();
            operation
                .responses
                .responses
                .insert("422".to_string(), RefOr::Ref(reference));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_is_openapi_3_1() {
        let doc: serde_json::Value = serde_json::from_str(document()).expect("JSON");
        assert!(doc["openapi"].as_str().unwrap().starts_with("3.1."));
    }

    #[test]
    fn free_form_objects_take_any_property_and_the_envelope_is_one_named_schema() {
        let doc: serde_json::Value = serde_json::from_str(document()).expect("JSON");
        let event = &doc["paths"]["/events/{contract}"]["post"]["requestBody"]["content"]
            ["application/json"]["schema"];
        assert_eq!(event["additionalProperties"], true, "{event}");
        let envelope = &doc["components"]["responses"]["ErrorEnvelope"];
        assert_eq!(
            envelope["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/ErrorEnvelope"
        );
        assert!(envelope["headers"]["Retry-After"].is_object(), "{envelope}");
        assert!(
            envelope["headers"]["Idempotent-Replayed"].is_object(),
            "{envelope}"
        );
        // Every operation taking a key declares the replay on its answers; one taking
        // none does not.
        let published = &doc["paths"]["/campaigns/{id}/publish"]["post"]["responses"]["201"];
        assert!(
            published["headers"]["Idempotent-Replayed"].is_object(),
            "{published}"
        );
        let event = &doc["paths"]["/events/{contract}"]["post"]["responses"]["200"];
        assert!(event["headers"]["Idempotent-Replayed"].is_null(), "{event}");
        assert_eq!(
            doc["components"]["schemas"]["ErrorEnvelope"]["required"][0],
            "error"
        );
        let publish = &doc["paths"]["/campaigns/{id}/publish"]["post"]["requestBody"];
        assert_eq!(publish["required"], false);
        let node = &doc["paths"]["/lineage/ancestors"]["get"]["parameters"][0];
        assert_eq!(
            (&node["name"], &node["required"]),
            (&serde_json::json!("node"), &serde_json::json!(true))
        );
        let node_id = &doc["paths"]["/api/v1/lineage"]["get"]["parameters"][0];
        assert_eq!(node_id["required"], true, "{node_id}");
        let text = document();
        assert!(
            !text.contains("\"received_at\":{\"type\":\"string\"}"),
            "a time without its format"
        );
        assert!(text.contains("\"format\":\"date-time\""));
    }

    #[test]
    fn status_fields_name_their_closed_set_of_words() {
        let doc: serde_json::Value = serde_json::from_str(document()).expect("JSON");
        let schemas = &doc["components"]["schemas"];
        for (schema, words) in [
            ("StoredStatus", vec!["inserted", "duplicate"]),
            (
                "ItemStatus",
                vec!["inserted", "duplicate", "collision", "rejected"],
            ),
            ("AssignmentStatus", vec!["assigned", "rejected"]),
            ("CorrectionStatus", vec!["superseded", "unchanged"]),
            ("OkStatus", vec!["ok"]),
        ] {
            assert_eq!(
                schemas[schema]["enum"],
                serde_json::json!(words),
                "{schema}"
            );
        }
        for (holder, status) in [
            ("EventAck", "StoredStatus"),
            ("LineageAck", "StoredStatus"),
            ("ItemResult", "ItemStatus"),
            ("OutcomeItem", "ItemStatus"),
            ("AssignmentItem", "AssignmentStatus"),
            ("Health", "OkStatus"),
            ("Live", "OkStatus"),
        ] {
            let field = &schemas[holder]["properties"]["status"];
            let named = field
                .to_string()
                .contains(&format!("#/components/schemas/{status}"));
            assert!(named, "{holder}.status: {field}");
        }
    }

    #[test]
    fn a_single_event_documents_its_outside_horizon_refusal() {
        let doc: serde_json::Value = serde_json::from_str(document()).expect("JSON");
        let answer = &doc["paths"]["/events/{contract}"]["post"]["responses"]["422"];
        assert_eq!(answer["$ref"], "#/components/responses/ErrorEnvelope");
        let description = answer["description"].as_str().expect("a description");
        assert!(description.contains("outside_horizon"), "{description}");
    }
}

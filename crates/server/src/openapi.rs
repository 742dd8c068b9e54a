//! `GET /openapi.json`: the OpenAPI 3.1 description of the API, assembled here from the
//! `#[utoipa::path]` attributes on the handlers and the `ToSchema` types they parse and
//! answer. Only the report is described by hand ([`ReportSchema`]): see there why.
//!
//! The document is built once, on first request, and served as it is; no key is needed
//! to read it.

use std::sync::OnceLock;

use axum::http::header::CONTENT_TYPE;
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{json, Value};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{RefOr, Schema};
use utoipa::{IntoParams, Modify, OpenApi, PartialSchema, ToResponse, ToSchema};

use crate::routes::{admin, campaigns, contracts, events, health, lineage, supersessions};

/// The document, assembled once.
pub(crate) fn document() -> &'static str {
    static DOCUMENT: OnceLock<String> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        ApiDoc::openapi()
            .to_json()
            .expect("the OpenAPI document serialises")
    })
}

/// `GET /openapi.json`.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "meta",
    responses((status = 200, description = "this document", content_type = "application/json", body = Object))
)]
pub(crate) async fn serve() -> Response {
    let mut response = document().into_response();
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// Every error of the API: `{"error":{"code","message","field"?}}`, plus details some
/// codes add (a collision's `stored` and `incoming`).
#[derive(Serialize, ToSchema, ToResponse)]
#[response(
    description = "an error: a stable `code`, a `message` for people, and the `field` at fault when there is one (docs/api.md lists the codes)"
)]
pub(crate) struct ErrorEnvelope {
    error: ErrorObject,
}

/// The value under `"error"`.
#[derive(Serialize, ToSchema)]
pub(crate) struct ErrorObject {
    /// A stable, machine-readable code such as `invalid_campaign`.
    code: String,
    /// What went wrong, for people.
    message: String,
    /// The field, parameter or JSON path at fault (`arms[1].key`, `nodeId`), when one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = String)]
    field: Option<String>,
}

/// The transport idempotency headers of the mutating JSON routes (docs/idempotency.md):
/// either name, 1-255 printable ASCII characters.
#[derive(IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)] // Read by the idempotency layer from the headers, never as this type.
pub(crate) struct IdempotencyHeaders {
    /// A retry with the same key and body gets the first answer again.
    #[param(
        rename = "X-TL-Idempotency-Key",
        value_type = String,
        min_length = 1,
        max_length = 255,
        pattern = "^[!-~]+$"
    )]
    traqlyte: Option<String>,
    /// The standard name of the same header.
    #[param(
        rename = "Idempotency-Key",
        value_type = String,
        min_length = 1,
        max_length = 255,
        pattern = "^[!-~]+$"
    )]
    standard: Option<String>,
}

/// The per-campaign report of `GET /campaigns/{id}/report`, `traqlyte_experiments::Report`.
///
/// Written by hand rather than derived: deriving would put `utoipa` into the pure
/// `traqlyte-experiments` and `traqlyte-stats` crates (behind a feature, but still a
/// second concern in crates whose one job is the domain), and those crates are outside
/// this server's reach. The cost is that a field added to `Report` must be added here
/// too; schemathesis' response-conformance check catches a mismatch once its run
/// reaches a published campaign's report.
pub(crate) struct ReportSchema;

impl ToSchema for ReportSchema {
    fn name() -> std::borrow::Cow<'static, str> {
        "Report".into()
    }
}

impl PartialSchema for ReportSchema {
    fn schema() -> RefOr<Schema> {
        serde_json::from_value(report_schema_json()).expect("the report schema is valid")
    }
}

fn report_schema_json() -> Value {
    let number_or_null = json!({"type": ["number", "null"]});
    let count = json!({"type": "integer", "minimum": 0});
    let lift = json!({
        "type": ["object", "null"],
        "description": "relative lift of an arm over the control; every statistic null where undefined",
        "required": ["estimate", "ci_low", "ci_high", "p_value", "confidence_level", "statistic"],
        "properties": {
            "estimate": number_or_null, "ci_low": number_or_null, "ci_high": number_or_null,
            "p_value": number_or_null, "confidence_level": {"type": "number"},
            "statistic": number_or_null, "df": number_or_null,
        },
    });
    let window_properties = json!({
        "kind": {"type": "string", "enum": ["conversion", "count", "sum"]},
        "window_hours": count, "units": count, "value": number_or_null,
        "naive_value": number_or_null,
        "value_ci": {"type": ["object", "null"], "required": ["low", "high"],
                     "properties": {"low": {"type": "number"}, "high": {"type": "number"}}},
        "stored_events": count, "duplicates": count, "delta": number_or_null,
        "delta_value": number_or_null, "lift": lift, "naive_lift": lift,
        "predicted_naive_lift": number_or_null, "converters": count,
    });
    let window_required = json!([
        "kind",
        "window_hours",
        "units",
        "value",
        "naive_value",
        "value_ci",
        "stored_events",
        "duplicates",
        "delta",
        "delta_value",
        "lift",
        "naive_lift",
        "predicted_naive_lift"
    ]);
    let window =
        json!({"type": "object", "required": window_required, "properties": window_properties});
    let mut metric = window.clone();
    metric["properties"]["arrival_time"] = window;
    metric["required"]
        .as_array_mut()
        .expect("an array")
        .push(json!("arrival_time"));
    json!({
        "type": "object",
        "description": "the dedupe-aware report of a campaign (docs/experiments.md)",
        "required": ["campaign_id", "key", "name", "versions", "confidence_level", "srm", "arms",
                     "verdicts", "duplicates_over_time"],
        "properties": {
            "campaign_id": {"type": "string"}, "key": {"type": "string"}, "name": {"type": "string"},
            "versions": count, "confidence_level": {"type": "number"},
            "srm": {"type": "object", "required": ["chi_square", "df", "p_value", "flagged", "expected_units"],
                    "properties": {"chi_square": number_or_null, "df": {"type": ["integer", "null"]},
                                   "p_value": number_or_null, "flagged": {"type": "boolean"},
                                   "expected_units": {"type": "array", "items": {"type": "number"}}}},
            "arms": {"type": "array", "items": {
                "type": "object", "required": ["key", "control", "units", "metrics"],
                "properties": {"key": {"type": "string"}, "control": {"type": "boolean"}, "units": count,
                               "metrics": {"type": "object", "additionalProperties": metric}}}},
            "verdicts": {"type": "array", "items": {
                "type": "object", "required": ["kind", "message"],
                "properties": {"kind": {"type": "string"}, "metric": {"type": "string"},
                               "arm": {"type": "string"}, "message": {"type": "string"}}}},
            "duplicates_over_time": {"type": "array", "items": {
                "type": "object", "required": ["bucket_start", "arm", "duplicates"],
                "properties": {"bucket_start": {"type": "string"}, "arm": {"type": "string"},
                               "duplicates": count}}},
        },
    })
}

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
        // made from the method and the path instead, unique by construction.
        for (path, item) in openapi.paths.paths.iter_mut() {
            let words: Vec<&str> = path
                .split(|c: char| !c.is_ascii_alphanumeric())
                .filter(|w| !w.is_empty())
                .collect();
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
        health::stats,
        contracts::register,
        contracts::list,
        contracts::show,
        contracts::collisions,
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
        crate::experiments::outcomes::post_outcome,
        crate::experiments::outcomes::post_outcomes_batch,
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
    ),
    components(schemas(ReportSchema), responses(ErrorEnvelope)),
    modifiers(&Security),
)]
struct ApiDoc;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_is_openapi_3_1() {
        let doc: Value = serde_json::from_str(document()).expect("JSON");
        assert!(doc["openapi"].as_str().unwrap().starts_with("3.1."));
    }
}

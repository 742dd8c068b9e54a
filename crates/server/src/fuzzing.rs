//! Entry points for the fuzz targets of `fuzz/` (cargo feature `fuzzing`, off in every
//! build but the fuzzer's): the request body types are crate-private, so the fuzzer
//! reaches them through [`request_body`], which runs what a route does with a body before
//! any lookup: the strict JSON reader, then deserialising into the route's body type
//! with its newtypes' rules (and, for a campaign, the list rules of its arms and
//! metrics). It must never panic, whatever the bytes.

use serde_json::Value;

use crate::body::typed::parse;
use crate::ApiError;

/// The request body types, in the order [`request_body`]'s selector picks them.
pub const BODY_TYPES: [&str; 9] = [
    "campaign",
    "publish",
    "assignment",
    "outcome",
    "supersession",
    "tenant",
    "binding",
    "segment_batch",
    "campaign_rules",
];

/// Reads `bytes` as the body of the type `BODY_TYPES[selector % 9]` (the reader's depth
/// limit is the server's default, 32): `Ok` when a route would accept it, else the
/// error the route would answer.
pub fn request_body(selector: u8, bytes: &[u8]) -> Result<(), ApiError> {
    let value: Value = traqlyte_identity::json::parse(bytes, 32)?;
    let refusal = |r: crate::body::typed::Refusal| r.unprocessable("invalid_body");
    match usize::from(selector) % BODY_TYPES.len() {
        0 => parse::<crate::routes::campaigns::CampaignBody>(&value).map(drop),
        1 => parse::<crate::routes::campaigns::PublishBody>(&value).map(drop),
        2 => parse::<crate::experiments::AssignmentBody>(&value).map(drop),
        3 => parse::<crate::experiments::outcomes::OutcomeBody>(&value).map(drop),
        4 => parse::<crate::routes::supersessions::SupersessionBody>(&value).map(drop),
        5 => parse::<crate::routes::admin::NewTenantBody>(&value).map(drop),
        6 => parse::<crate::connectors::segment::bindings::BindingBody>(&value).map(drop),
        7 => parse::<crate::connectors::segment::BatchBody>(&value).map(drop),
        _ => return crate::routes::campaigns::parse_campaign(&value).map(drop),
    }
    .map_err(refusal)
}

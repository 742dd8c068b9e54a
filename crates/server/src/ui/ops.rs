//! `GET /ui/ops`: the operations page. The duplicate-rate trend per contract and source
//! (the value of `GET /ops/duplicates`, as charts and a table), the latest collisions
//! with their diffs (`GET /ops/collisions`), and the semantic-duplicate scan's latest
//! findings ([`semantic_scan_section`], `GET /ops/semantic-duplicates`). Same
//! session as the campaign pages; every number carries `data-*` attributes naming its
//! JSON field so a test can compare the page with the API.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::{html, Markup};
use traqlyte_identity::format_rfc3339_micros;
use traqlyte_store::{now_us, CollisionsQuery, SemanticScan, TenantId};

use super::charts;
use super::html::{json_text, page, Format, Viewer};
use super::{html_response, UiError, UiSession};
use crate::ops::{self, CollisionPage, Trend, TrendParams};
use crate::AppState;

/// Collisions the page lists.
const PAGE_COLLISIONS_MAX: u32 = 20;

/// `GET /ui/ops`: takes `GET /ops/duplicates`'s query (default: the last 24 hours by
/// hour).
#[utoipa::path(get, path = "/ui/ops", tag = "ui", params(TrendParams),
    responses((status = 200, description = "the operations page", content_type = "text/html", body = String),
        (status = 303, description = "no session: to the login form"), (status = "4XX", description = "an HTML error page"),
        (status = "5XX", description = "an HTML error page")))]
pub(crate) async fn ops_page(
    State(state): State<AppState>,
    session: UiSession,
    Query(params): Query<TrendParams>,
) -> Result<Response, UiError> {
    let tenant: &TenantId = &session.tenant;
    let query = ops::trend_query(&params, now_us())?;
    let trend = ops::trend(&state, tenant, &query).await?;
    let collisions = ops::collision_page(
        &state,
        tenant,
        &CollisionsQuery {
            contract: None,
            since_us: None,
            before: None,
            limit: PAGE_COLLISIONS_MAX,
        },
    )
    .await?;
    let scans = state.store.semantic_scans(tenant, None).await?;
    Ok(html_response(
        StatusCode::OK,
        render(&trend, &collisions, &scans, &session.tenant_name),
    ))
}

/// The page (pure).
pub(crate) fn render(
    trend: &Trend,
    collisions: &CollisionPage,
    scans: &[SemanticScan],
    tenant: &str,
) -> String {
    let body = html! {
        section {
            h1 { "Operations" }
            p.meta {
                "Deliveries per " (trend.bucket) " by arrival time, " (trend.since) " to " (trend.until)
                " (UTC). The same numbers as " code { "GET /ops/duplicates" } "."
            }
        }
        (trend_section(trend))
        (collisions_section(collisions))
        (semantic_scan_section(scans))
    };
    page("Operations", Viewer::Tenant(tenant), body)
}

fn trend_section(trend: &Trend) -> Markup {
    let mut contracts: Vec<&str> = trend.series.iter().map(|s| s.contract.as_str()).collect();
    contracts.dedup();
    html! {
        section data-section="trend" {
            h2 { "Duplicate rate" }
            @if trend.series.is_empty() {
                p.meta { "No deliveries in this range." }
            }
            @for contract in &contracts {
                @let series: Vec<(&str, &[ops::TrendBucket])> = trend.series.iter()
                    .filter(|s| s.contract == *contract)
                    .map(|s| (s.source.as_str(), s.buckets.as_slice()))
                    .collect();
                h3 { code { (contract) } }
                (charts::duplicate_rate_over_time(contract, &series))
                div.scroll tabindex="0" { table.cards {
                    thead { tr {
                        th { "Bucket" } th { "Source" } th { "Received" } th { "Inserted" }
                        th { "Duplicates" } th { "Collisions" } th { "Duplicate rate" }
                    } }
                    tbody {
                        @for (source, buckets) in &series {
                            @for b in buckets.iter().filter(|b| b.received > 0) {
                                tr data-contract=(contract) data-source=(source) data-bucket=(b.start) {
                                    td.head data-label="Bucket" { (b.start) }
                                    td data-label="Source" { code { (source) } }
                                    (count("Received", "received", b.received))
                                    (count("Inserted", "inserted", b.inserted))
                                    (count("Duplicates", "duplicates", b.duplicates))
                                    (count("Collisions", "collisions", b.collisions))
                                    td.num data-label="Duplicate rate" data-field="duplicate_rate"
                                        data-value=(json_text(&b.duplicate_rate)) {
                                        (Format::Percent.opt(b.duplicate_rate))
                                    }
                                }
                            }
                        }
                    }
                } }
            }
        }
    }
}

fn count(label: &str, field: &str, value: i64) -> Markup {
    html! {
        td.num data-label=(label) data-field=(field) data-value=(value) {
            (Format::Count.number(value as f64))
        }
    }
}

fn collisions_section(page: &CollisionPage) -> Markup {
    html! {
        section data-section="collisions" {
            h2 { "Latest collisions" }
            @if page.collisions.is_empty() {
                p.meta { "No collisions: no two different events shared an identity." }
            }
            @for c in &page.collisions {
                article data-collision=(c.collision_id) {
                    h3 {
                        code { (c.contract) } " v" (c.contract_version) " · "
                        code data-field="event_id" { (c.event_id) }
                    }
                    p.meta { "received " (c.received_at) " from " code { (c.source) } }
                    div.scroll tabindex="0" { table.cards {
                        thead { tr { th { "Field" } th { "Change" } th { "Stored" } th { "Incoming" } } }
                        tbody {
                            @for d in &c.diff {
                                tr data-path=(d.path) {
                                    td.head data-label="Field" { code data-field="path" { (d.path) } }
                                    td data-label="Change" data-field="change" {
                                        (d.change)
                                        @if d.transport { " " span.meta data-field="transport" title="a transport field: it differs between retries and is not in the fingerprint" { "(transport)" } }
                                    }
                                    td data-label="Stored" { code data-field="stored" { (json_or_dash(&d.stored)) } }
                                    td data-label="Incoming" { code data-field="incoming" { (json_or_dash(&d.incoming)) } }
                                }
                            }
                        }
                    } }
                    @if c.diff_truncated { p.meta { "The diff is longer; the first changes are shown." } }
                }
            }
        }
    }
}

fn json_or_dash(value: &Option<serde_json::Value>) -> String {
    value.as_ref().map_or_else(|| "—".to_string(), json_text)
}

/// The semantic-duplicate scan's last findings (`GET /ops/semantic-duplicates`): per
/// contract version scanned, each suspect identity field with its group and event counts.
pub(crate) fn semantic_scan_section(scans: &[SemanticScan]) -> Markup {
    html! {
        section data-section="semantic" {
            h2 { "Semantic-duplicate scan" }
            @if scans.is_empty() {
                p.meta {
                    "No scan yet: " code { "traqlyte scan semantic" } " or "
                    code { "serve --semantic-scan-interval" } " (docs/semantic-scan.md)."
                }
            }
            @for scan in scans {
                h3 { (scan.contract) " v" (scan.version) }
                p.meta {
                    span data-field="events" { (scan.events) } " events scanned, "
                    (format_rfc3339_micros(scan.scanned_at_us))
                }
                @if scan.findings.is_empty() {
                    p { "No suspect identity field." }
                } @else {
                    table {
                        thead { tr { th { "suspect field" } th { "groups" } th { "events" } } }
                        tbody {
                            @for finding in &scan.findings {
                                tr data-pointer=(finding.pointer) {
                                    td { code { (finding.pointer) } }
                                    td data-field="groups" { (finding.groups) }
                                    td data-field="events" { (finding.events) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

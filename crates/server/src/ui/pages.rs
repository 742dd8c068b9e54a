//! The pages: login, the campaign index, and one campaign's report. Each is a pure
//! function of its data; the report page renders the typed `Report` that
//! `GET /campaigns/{id}/report` serialises, so the page cannot disagree with the API and
//! a renamed field is a compile error, not a silent "—".

use maud::{html, Markup};
use traqlyte_experiments::report::{SrmReport, Stratified, VerdictKind, WindowReport};
use traqlyte_experiments::{MetricKind, Report};
use traqlyte_identity::format_rfc3339_micros;
use traqlyte_stats::Lift;
use traqlyte_store::Campaign;

use super::charts::{self, LiftRow, DEDUPED_COLOUR, NAIVE_COLOUR};
use super::html::{page, Format, Source, Viewer, MISSING};

/// The login form; `message` is an error to show above it.
pub(crate) fn login(next: &str, message: Option<&str>) -> String {
    let body = html! {
        section {
            h1 { "Log in" }
            p.meta { "Paste your API key once. The browser keeps a session cookie, never the key." }
            @if let Some(message) = message {
                p.error role="alert" { (message) }
            }
            form.login method="post" action="/ui/login" {
                label for="api_key" { "API key" }
                input #api_key name="api_key" type="password" autocomplete="off" required;
                input type="hidden" name="next" value=(next);
                button type="submit" { "Log in" }
            }
        }
    };
    page("Log in", Viewer::Anonymous, body)
}

/// A page that moves on to `target` (a path of ours) by itself (`<meta http-equiv=
/// "refresh">`; no script runs under the pages' CSP), with a link for a browser that
/// does not: a request it makes is same-site, so it carries the session cookie a request
/// from another site was sent without.
pub(crate) fn hop(target: &str) -> String {
    let refresh = format!("0;url={target}");
    html! {
        (maud::DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="refresh" content=(refresh);
                title { "Opening · TraqLyte" }
            }
            body { p { a href=(target) { "Continue" } } }
        }
    }
    .into_string()
}

/// Why a login link is not used on arrival but shown as a button.
pub(crate) enum LinkAsk<'a> {
    /// Opened from another site (a mail or chat client, or a page that would log this
    /// browser into its own tenant).
    FromElsewhere,
    /// This browser holds a live session of another tenant, which the link would replace
    /// (someone else's link, sent to put this browser into their tenant).
    SwitchesFrom(&'a str),
}

/// A login link not used on arrival: a button that posts the link's token from this
/// server's own page, naming the tenant it logs in to. The token is not used until then,
/// so another site cannot log a browser into its own tenant by sending it there, the
/// session cookie (`SameSite=Strict`) is set by a same-site request that keeps it, and a
/// browser already logged in is not moved to another tenant without saying so.
/// `tenant` is the link's tenant when the link is live (else the post says it is not).
pub(crate) fn login_link(
    token: &str,
    next: &str,
    tenant: Option<&str>,
    ask: LinkAsk<'_>,
) -> String {
    let body = html! {
        section {
            h1 { "Log in" }
            @match ask {
                LinkAsk::FromElsewhere => p.meta { "This login link was opened from another site. Continue only if you asked for it." },
                LinkAsk::SwitchesFrom(current) => p.meta data-field="current-tenant" {
                    "This browser is logged in to tenant " b { (current) } ". The link replaces that \
                     session. Continue only if you asked for it."
                },
            }
            @if let Some(tenant) = tenant {
                p data-field="link-tenant" { "The link logs in to tenant " b { (tenant) } "." }
            }
            form.login method="post" action="/ui/login" {
                input type="hidden" name="token" value=(token);
                input type="hidden" name="next" value=(next);
                button type="submit" {
                    @if let Some(tenant) = tenant { "Continue as tenant " (tenant) } @else { "Continue to TraqLyte" }
                }
            }
        }
    };
    page("Log in", Viewer::Anonymous, body)
}

/// The landing page at `/`.
pub(crate) fn landing() -> String {
    let body = html! {
        section {
            h1 { "TraqLyte" }
            p {
                "At-least-once delivery in, exactly-once facts out: an event platform for A/B \
                 experiments and data lineage that stores every retried, refired or replayed event \
                 once, counts what it suppressed, and keeps duplicates out of an experiment's lift."
            }
            ul {
                li { a href="/ui/campaigns" { "Campaign reports" } " (web UI; log in with an API key)" }
                li { a href="/healthz" { "Health" } " (" code { "GET /healthz" } ")" }
                li {
                    a href="/openapi.json" { "OpenAPI description" }
                    " (" code { "GET /openapi.json" } ", OpenAPI 3.1, no key needed)"
                }
                li {
                    "The HTTP API: " code { "docs/api.md" } " in the repository; error and value \
                     conventions, idempotency keys, identity contracts and OpenLineage ingestion are in "
                    code { "docs/" } " beside it"
                }
            }
            p.meta {
                "Every API route takes " code { "Authorization: Bearer <api key>" } "; "
                code { "traqlyte tenant create NAME" } " prints one."
            }
        }
    };
    page("Welcome", Viewer::Anonymous, body)
}

/// An error page with a status line and a message.
pub(crate) fn error(status: u16, message: &str) -> String {
    let body = html! {
        section {
            h1 { (status) }
            p { (message) }
            p { a href="/ui/campaigns" { "All campaigns" } }
        }
    };
    page("Error", Viewer::LoggedIn, body)
}

/// The tenant's campaigns, newest first.
pub(crate) fn index(campaigns: &[Campaign], tenant: &str) -> String {
    let body = html! {
        section {
            h1 { "Campaigns" }
            @if campaigns.is_empty() {
                p.meta { "No campaigns yet: create one with " code { "POST /campaigns" } "." }
            } @else {
                div.scroll tabindex="0" { table.cards {
                    thead { tr {
                        th { "Name" } th { "Key" } th { "Arms (weight)" } th { "Metrics" } th { "Created" }
                    } }
                    tbody {
                        @for c in campaigns {
                            tr data-campaign=(c.id) {
                                td.head data-label="Name" { a href={ "/ui/campaigns/" (c.id) } { bdi { (c.name) } } }
                                td data-label="Key" { code { (c.key) } }
                                td data-label="Arms (weight)" {
                                    @for (i, arm) in c.arms.iter().enumerate() {
                                        @if i > 0 { ", " }
                                        (arm.key) " (" (arm.weight) ")"
                                    }
                                }
                                td data-label="Metrics" {
                                    @for (i, metric) in c.metrics.iter().enumerate() {
                                        @if i > 0 { ", " }
                                        (metric.name)
                                    }
                                }
                                td data-label="Created" { (format_rfc3339_micros(c.created_at_us)) }
                            }
                        }
                    }
                } }
            }
        }
    };
    page("Campaigns", Viewer::Tenant(tenant), body)
}

/// One campaign's report.
pub(crate) fn report(report: &Report, tenant: &str) -> String {
    let arm_keys: Vec<&str> = report.arms.iter().map(|a| a.key.as_str()).collect();
    let control = report.control().map_or(MISSING, |a| a.key.as_str());
    let body = html! {
        h1 { bdi data-field="name" { (report.name) } }
        p.meta {
            "key " code { (report.key) } " · id " code { (report.campaign_id) } " · "
            (report.versions) " published version(s) · "
            @if let Some(version) = report.version {
                b data-field="version" data-value=(version) { "only units assigned under version " (version) }
                " (" a href=(format!("/ui/campaigns/{}", report.campaign_id)) { "whole campaign" } ") · "
            }
            (Format::Percent.number(report.confidence_level)) " confidence intervals · control arm "
            b { (control) } " · "
            span data-field="corrected_outcomes" { (report.corrected_outcomes) }
            " outcome(s) corrected (figures use their current value)"
        }
        (verdicts(report))
        (srm(&report.srm, report))
        @for metric in metric_names(report) {
            (metric_section(metric, report))
        }
        section {
            h2 { "Suppressed duplicates over time" }
            p.meta {
                "Duplicates the store suppressed per arrival hour (UTC), by arm, summed over all \
                 metrics (each re-sent delivery of an outcome is one)."
            }
            p.legend {
                @for (i, arm) in arm_keys.iter().enumerate() {
                    span.swatch style={ "background:" (charts::arm_colour(i)) } {}
                    (arm)
                }
            }
            div.chart { (charts::duplicates_over_time(&arm_keys, &report.duplicates_over_time)) }
        }
    };
    page(&report.name, Viewer::Tenant(tenant), body)
}

fn verdicts(report: &Report) -> Markup {
    html! {
        section {
            h2 { "Verdict" }
            @if report.verdicts.is_empty() {
                p.verdict.calm data-field="verdict-none" {
                    "Removing duplicates changes no conclusion of this report."
                }
            }
            @for (index, verdict) in report.verdicts.iter().enumerate() {
                p.verdict data-field="verdict" data-index=(index)
                    data-kind=(verdict_kind_name(verdict.kind)) {
                    (verdict.message)
                }
            }
        }
    }
}

fn srm(srm: &SrmReport, report: &Report) -> Markup {
    let field = |field| Source {
        metric: None,
        arm: None,
        field,
    };
    html! {
        section {
            h2 {
                "Sample ratio "
                @if srm.flagged {
                    span.badge.bad data-field="srm.flagged" data-value="true" { "sample ratio mismatch" }
                } @else if srm.p_value.is_none() {
                    // No test was possible (no units yet): neither a mismatch nor its absence.
                    span.badge data-field="srm.flagged" data-value="false" { "not tested yet" }
                } @else {
                    span.badge.good data-field="srm.flagged" data-value="false" { "no mismatch" }
                }
            }
            p {
                "Chi-square test of units against the weights: p-value "
                b { (field("srm.p_value").span(srm.p_value, Format::PValue)) }
                " (flagged below 0.001), χ² "
                (field("srm.chi_square").span(srm.chi_square, Format::Decimal)) "."
            }
            div.scroll tabindex="0" { table.cards {
                thead { tr { th { "Arm" } th.num { "Units" } th.num { "Expected units" } } }
                tbody {
                    @for (index, arm) in report.arms.iter().enumerate() {
                        @let at = |field| Source { metric: None, arm: Some(arm.key.as_str()), field };
                        tr {
                            td.head data-label="Arm" { (arm.key) }
                            (at("units").count_cell("Units", arm.units))
                            // Whole units on the page; `data-value` keeps the exact expectation.
                            (at("expected_units").cell("Expected units", srm.expected_units.get(index).copied(), Format::Count))
                        }
                    }
                }
            } }
        }
    }
}

/// Metric names in the order of the first arm's report (every arm has every metric).
fn metric_names(report: &Report) -> Vec<&str> {
    report
        .arms
        .first()
        .map(|a| a.metrics.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

/// A metric kind as the API spells it.
fn kind_name(kind: MetricKind) -> &'static str {
    match kind {
        MetricKind::Conversion => "conversion",
        MetricKind::Count => "count",
        MetricKind::Sum => "sum",
    }
}

/// A verdict kind as the API spells it (`data-kind`).
fn verdict_kind_name(kind: VerdictKind) -> &'static str {
    match kind {
        VerdictKind::Srm => "srm",
        VerdictKind::DedupeChangesConclusion => "dedupe_changes_conclusion",
        VerdictKind::WeightsChanged => "weights_changed",
        VerdictKind::IntervalDisagrees => "interval_disagrees",
    }
}

/// How one metric's numbers read: the label and format of its value and naive value.
struct Reading {
    value_label: &'static str,
    value: Format,
    naive: Format,
}

impl Reading {
    fn of(kind: MetricKind) -> Reading {
        match kind {
            MetricKind::Conversion => Reading {
                value_label: "Conversion rate",
                value: Format::Percent,
                // Every delivery counted: events per unit, which can exceed one.
                naive: Format::EventsPerUnit,
            },
            MetricKind::Count => Reading {
                value_label: "Events per unit",
                value: Format::Decimal,
                naive: Format::Decimal,
            },
            MetricKind::Sum => Reading {
                value_label: "Value per unit",
                value: Format::Decimal,
                naive: Format::Decimal,
            },
        }
    }
}

/// One arm's figures for one metric, on event time, and its logged collisions.
struct ArmFigures<'a> {
    arm: &'a str,
    control: bool,
    figures: &'a WindowReport,
    collisions: u64,
}

fn metric_section(metric: &str, report: &Report) -> Markup {
    let arms: Vec<ArmFigures<'_>> = report
        .arms
        .iter()
        .filter_map(|a| {
            a.metrics.get(metric).map(|m| ArmFigures {
                arm: &a.key,
                control: a.control,
                figures: &m.event_time,
                collisions: m.collisions,
            })
        })
        .collect();
    let Some(first) = arms.first() else {
        return html! {};
    };
    let (kind, hours) = (first.figures.kind, first.figures.window_hours);
    let reading = Reading::of(kind);
    let whiskers: Vec<LiftRow<'_>> = arms
        .iter()
        .filter(|a| !a.control)
        .map(|a| LiftRow {
            arm: a.arm,
            lift: a.figures.lift,
            naive_lift: a.figures.naive_lift,
            predicted_naive_lift: a.figures.predicted_naive_lift,
        })
        .collect();
    let per_arm: Vec<(&str, &WindowReport)> = arms.iter().map(|a| (a.arm, a.figures)).collect();
    html! {
        section data-section="metric" data-metric=(metric) {
            h2 { (metric) " " small.meta { (kind_name(kind)) ", event-time window " (hours) " h" } }
            h3 { "Deduplicated" }
            (deduplicated_table(metric, &reading, kind, &arms))
            @if let Some(stratified) = &report.stratified {
                (stratified_table(metric, &reading, &arms, stratified))
            }
            div.chart {
                h3 { (reading.value_label) " per arm, with 95% interval" }
                (charts::value_whiskers(metric, reading.value, reading.naive, &per_arm))
            }
            div.chart {
                h3 { "Lift with 95% interval" }
                p.legend {
                    span.swatch style={ "background:" (DEDUPED_COLOUR) } {} "deduplicated"
                    span.swatch style={ "background:" (NAIVE_COLOUR) } {} "naive (every delivery counted)"
                    span.swatch.ring {} "predicted naive"
                }
                (charts::lift_whiskers(metric, &whiskers))
            }
            h3 { "Naive vs deduplicated: what a pipeline without dedupe would have reported" }
            (naive_table(metric, &reading, &arms))
            p.meta {
                "δ = duplicates / stored events. Predicted naive lift = (1 + L)(1 + δ" sub { "T" }
                ")/(1 + δ" sub { "C" } ") − 1: the bias retries alone explain. Collisions are \
                 deliveries of a stored outcome's key with another payload, refused and logged, \
                 never counted: a changed fact to correct, not a retry."
                @if kind == MetricKind::Conversion {
                    " The naive value of a conversion counts every delivery, so it is events per \
                     unit, not a rate."
                }
            }
        }
    }
}

fn deduplicated_table(
    metric: &str,
    reading: &Reading,
    kind: MetricKind,
    arms: &[ArmFigures<'_>],
) -> Markup {
    let conversion = kind == MetricKind::Conversion;
    html! {
        div.scroll tabindex="0" { table.cards data-table="deduplicated" {
            thead { tr {
                th { "Arm" } th.num { "Units" }
                @if conversion { th.num { "Converters" } }
                th.num { (reading.value_label) } th.num { "Lift" } th.num { "95% CI" } th.num { "p-value" }
            } }
            tbody {
                @for a in arms {
                    @let m = a.figures;
                    @let at = |field| Source { metric: Some(metric), arm: Some(a.arm), field };
                    tr {
                        td.head data-label="Arm" { (a.arm) }
                        (at("units").count_cell("Units", m.units))
                        @if conversion {
                            // A count, written as the report's JSON writes it (`4`, not `4.0`).
                            @match m.converters {
                                Some(converters) => (at("converters").count_cell("Converters", converters)),
                                None => (at("converters").cell("Converters", None, Format::Count)),
                            }
                        }
                        (at("value").cell(reading.value_label, m.value, reading.value))
                        (lift_cells(a, metric, "lift", m.lift))
                    }
                }
            }
        } }
    }
}

/// The report's `stratified` figures of one metric: each arm's value weighed version by
/// version, and its lift, shown when the weights changed between versions.
fn stratified_table(
    metric: &str,
    reading: &Reading,
    arms: &[ArmFigures<'_>],
    stratified: &Stratified,
) -> Markup {
    let strata: Vec<String> = stratified
        .versions
        .iter()
        .zip(&stratified.weights)
        .map(|(v, w)| format!("version {v} ({})", Format::Percent.number(*w)))
        .collect();
    html! {
        h3 { "Within each version (stratified)" }
        p.meta {
            "The weights changed between versions, so the table above compares units of \
             different periods. Here each arm's value is estimated within "
            (strata.join(", "))
            " and weighed by the version's share of the units, the same for every arm."
        }
        div.scroll tabindex="0" { table.cards data-table="stratified" {
            thead { tr {
                th { "Arm" } th.num { (reading.value_label) }
                th.num { "Lift" } th.num { "95% CI" } th.num { "p-value" }
            } }
            tbody {
                @for a in arms {
                    @let figures = stratified.arms.iter().find(|s| s.key == a.arm)
                        .and_then(|s| s.metrics.get(metric));
                    @let at = |field| Source { metric: Some(metric), arm: Some(a.arm), field };
                    tr {
                        td.head data-label="Arm" { (a.arm) }
                        (at("stratified.value").cell(reading.value_label, figures.and_then(|f| f.value), reading.value))
                        (lift_cells(a, metric, "stratified.lift", figures.and_then(|f| f.lift)))
                    }
                }
            }
        } }
    }
}

fn naive_table(metric: &str, reading: &Reading, arms: &[ArmFigures<'_>]) -> Markup {
    html! {
        div.scroll tabindex="0" { table.cards data-table="naive" {
            thead { tr {
                th { "Arm" } th.num { "Stored events" } th.num { "Suppressed duplicates" }
                th.num { "Collisions" } th.num { "δ by count" } th.num { "δ by value" } th.num { "Naive value" }
                th.num { "Naive lift" } th.num { "95% CI" } th.num { "p-value" }
                th.num { "Dedup. lift" } th.num { "Predicted naive" }
            } }
            tbody {
                @for a in arms {
                    @let m = a.figures;
                    @let at = |field| Source { metric: Some(metric), arm: Some(a.arm), field };
                    tr {
                        td.head data-label="Arm" { (a.arm) }
                        (at("stored_events").count_cell("Stored events", m.stored_events))
                        (at("duplicates").count_cell("Suppressed duplicates", m.duplicates))
                        (at("collisions").count_cell("Collisions", a.collisions))
                        (at("delta").cell("δ by count", m.delta, Format::Percent))
                        (at("delta_value").cell("δ by value", m.delta_value, Format::Percent))
                        (at("naive_value").cell("Naive value", m.naive_value, reading.naive))
                        (lift_cells(a, metric, "naive_lift", m.naive_lift))
                        @if a.control {
                            td.ctl data-label="Dedup. lift" { "control" }
                            td.ctl data-label="Predicted naive" { "control" }
                        } @else {
                            (at("lift.estimate").cell("Dedup. lift", m.lift.and_then(|l| l.estimate()), Format::SignedPercent))
                            (at("predicted_naive_lift").cell("Predicted naive", m.predicted_naive_lift, Format::SignedPercent))
                        }
                    }
                }
            }
        } }
    }
}

/// A lift's estimate, interval and p-value cells; one "control" cell for the control.
/// `prefix` is the report's field (`lift` or `naive_lift`). A treatment whose lift is
/// undefined shows "—" with `data-value="null"`, as the report holds it.
fn lift_cells(arm: &ArmFigures<'_>, metric: &str, prefix: &str, lift: Option<Lift>) -> Markup {
    if arm.control {
        return html! { td.ctl colspan="3" data-label="Lift" { "control" } };
    }
    let field = |part: &str| format!("{prefix}.{part}");
    let (estimate, low, high, p) = (
        field("estimate"),
        field("ci_low"),
        field("ci_high"),
        field("p_value"),
    );
    let at = |field| Source {
        metric: Some(metric),
        arm: Some(arm.arm),
        field,
    };
    let label = if prefix == "naive_lift" {
        "Naive lift"
    } else {
        "Lift"
    };
    html! {
        (at(&estimate).cell(label, lift.and_then(|l| l.estimate()), Format::SignedPercent))
        td.num data-label="95% CI" {
            span.ci {
                "[" (at(&low).span(lift.and_then(|l| l.ci_low()), Format::SignedPercent))
                ", " (at(&high).span(lift.and_then(|l| l.ci_high()), Format::SignedPercent)) "]"
            }
        }
        (at(&p).cell("p-value", lift.and_then(|l| l.p_value()), Format::PValue))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    /// A report with hostile names everywhere a client chooses one, read through the
    /// report's own `Deserialize` so it has the API's shape.
    fn hostile_report() -> Report {
        let lift = json!({"estimate": 0.1, "ci_low": -0.05, "ci_high": 0.25, "p_value": 0.2,
            "confidence_level": 0.95, "statistic": 1.2});
        let window = |control: bool, kind: &str| {
            json!({"kind": kind, "window_hours": 24, "units": 10, "value": 0.4, "naive_value": 1.0333,
                "value_ci": {"low": 0.1, "high": 0.7}, "converters": 4,
                "stored_events": 10, "duplicates": 1, "delta": 0.1, "delta_value": null,
                "lift": if control { Value::Null } else { lift.clone() },
                "naive_lift": if control { Value::Null } else { lift.clone() },
                "predicted_naive_lift": if control { Value::Null } else { json!(0.12) }})
        };
        let metric = |control: bool| {
            let mut m = window(control, "conversion");
            m["arrival_time"] = window(control, "conversion");
            m["collisions"] = json!(if control { 0 } else { 1234 });
            m
        };
        serde_json::from_value(json!({
            "campaign_id": "cmp_1", "key": "k", "name": "<script>alert(1)</script>", "versions": 1,
            "confidence_level": 0.95,
            "srm": {"p_value": 0.5, "flagged": false, "chi_square": 0.4, "df": 1, "expected_units": [10.4, 9.6]},
            "arms": [
                {"key": "c", "control": true, "units": 10, "metrics": {"<img src=x>": metric(true)}},
                {"key": "t\"", "control": false, "units": 10, "metrics": {"<img src=x>": metric(false)}},
            ],
            "verdicts": [{"kind": "srm", "message": "<i>retry</i>"}],
            "duplicates_over_time": [{"bucket_start": "2026-01-01T00:00:00.000000Z", "arm": "t\"", "duplicates": 3}],
        }))
        .expect("a report")
    }

    #[test]
    fn hostile_names_are_escaped_everywhere() {
        let html = report(&hostile_report(), "<script>tenant</script>");
        for raw in ["<script>", "<img", "<i>", "t\"\""] {
            assert!(!html.contains(raw), "{raw} unescaped");
        }
        // Shown, escaped: not dropped.
        for escaped in [
            "&lt;script&gt;alert(1)&lt;/script&gt;",
            "&lt;i&gt;retry&lt;/i&gt;",
            "Tenant <b>&lt;script&gt;tenant&lt;/script&gt;</b>",
        ] {
            assert!(html.contains(escaped), "{escaped} missing");
        }
        assert!(html.contains("data-field=\"lift.estimate\" data-value=\"0.1\""));
    }

    #[test]
    fn expected_units_are_whole_and_naive_conversions_are_events_per_unit() {
        let html = report(&hostile_report(), "<script>tenant</script>");
        assert!(
            html.contains("data-field=\"expected_units\" data-value=\"10.4\">10</td>"),
            "{html}"
        );
        assert!(
            html.contains("data-field=\"naive_value\" data-value=\"1.0333\">1.03 events/unit</td>")
        );
        assert!(!html.contains("103.33%"));
    }

    #[test]
    fn collisions_are_shown_beside_the_duplicates_with_their_source() {
        let html = report(&hostile_report(), "tenant");
        let cell = "data-metric=\"&lt;img src=x&gt;\" data-arm=\"t&quot;\" \
                    data-field=\"collisions\" data-value=\"1234\">1,234</td>";
        assert!(html.contains(cell), "{html}");
        let duplicates = html.find("data-field=\"duplicates\"").expect("duplicates");
        let collisions = html.find("data-field=\"collisions\"").expect("collisions");
        assert!(duplicates < collisions, "the column after the duplicates");
    }

    #[test]
    fn every_table_cell_is_labelled_for_the_stacked_layout() {
        let html = report(&hostile_report(), "<script>tenant</script>");
        assert!(
            html.matches("<td").count() > 10,
            "the report has its tables"
        );
        for td in html.split("<td").skip(1) {
            let tag = &td[..td.find('>').expect("tag end")];
            assert!(tag.contains("data-label=\""), "unlabelled cell <td{tag}>");
        }
    }
}

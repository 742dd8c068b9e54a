//! The pages: login, the campaign index, and one campaign's report. Each is a pure
//! function of its data (the report is the JSON of `GET /campaigns/{id}/report`, so the
//! page cannot disagree with the API).

use serde_json::Value;
use traqlyte_identity::format_rfc3339_micros;
use traqlyte_store::Campaign;

use super::charts::{self, LiftRow};
use super::html::{esc, number_cell, page, Format, Source, MISSING};

/// The login form; `message` is an error to show above it.
pub(crate) fn login(next: &str, message: Option<&str>) -> String {
    let error = message
        .map(|m| format!("<p class=\"error\" role=\"alert\">{}</p>", esc(m)))
        .unwrap_or_default();
    let body = format!(
        "<section><h1>Log in</h1>\
         <p class=\"meta\">Paste your API key once. The browser keeps a session cookie, never the key.</p>{error}\
         <form class=\"login\" method=\"post\" action=\"/ui/login\">\
         <label for=\"api_key\">API key</label>\
         <input id=\"api_key\" name=\"api_key\" type=\"password\" autocomplete=\"off\" required>\
         <input type=\"hidden\" name=\"next\" value=\"{next}\">\
         <button type=\"submit\">Log in</button></form></section>",
        next = esc(next)
    );
    page("Log in", false, &body)
}

/// The landing page at `/`.
pub(crate) fn landing() -> String {
    let body = "<section><h1>TraqLyte</h1>\
         <p>At-least-once delivery in, exactly-once facts out: an event platform for A/B \
         experiments and data lineage that stores every retried, refired or replayed event \
         once, counts what it suppressed, and keeps duplicates out of an experiment's lift.</p>\
         <ul>\
         <li><a href=\"/ui/campaigns\">Campaign reports</a> (web UI; log in with an API key)</li>\
         <li><a href=\"/healthz\">Health</a> (<code>GET /healthz</code>)</li>\
         <li>The HTTP API: <code>docs/api.md</code> in the repository; error and value \
         conventions, idempotency keys, identity contracts and OpenLineage ingestion are in \
         <code>docs/</code> beside it</li>\
         </ul>\
         <p class=\"meta\">Every API route takes <code>Authorization: Bearer &lt;api key&gt;</code>; \
         <code>traqlyte tenant create NAME</code> prints one.</p></section>";
    page("Welcome", false, body)
}

/// An error page with a status line and a message.
pub(crate) fn error(status: u16, message: &str) -> String {
    let body = format!(
        "<section><h1>{status}</h1><p>{}</p><p><a href=\"/ui/campaigns\">All campaigns</a></p></section>",
        esc(message)
    );
    page("Error", true, &body)
}

/// The tenant's campaigns, newest first.
pub(crate) fn index(campaigns: &[Campaign]) -> String {
    let mut rows = String::new();
    for c in campaigns {
        let arms: Vec<String> = c
            .arms
            .iter()
            .map(|a| format!("{} ({})", esc(&a.key), a.weight))
            .collect();
        let metrics: Vec<String> = c.metrics.iter().map(|m| esc(&m.name)).collect();
        rows.push_str(&format!(
            "<tr data-campaign=\"{id}\"><td><a href=\"/ui/campaigns/{id}\">{name}</a></td><td><code>{key}</code></td><td>{arms}</td><td>{metrics}</td><td>{created}</td></tr>",
            id = esc(&c.id),
            name = esc(&c.name),
            key = esc(&c.key),
            arms = arms.join(", "),
            metrics = metrics.join(", "),
            created = esc(&format_rfc3339_micros(c.created_at_us)),
        ));
    }
    let table = if campaigns.is_empty() {
        "<p class=\"meta\">No campaigns yet: create one with <code>POST /campaigns</code>.</p>"
            .to_string()
    } else {
        format!(
            "<div class=\"scroll\"><table><thead><tr><th>Name</th><th>Key</th><th>Arms (weight)</th><th>Metrics</th><th>Created</th></tr></thead><tbody>{rows}</tbody></table></div>"
        )
    };
    page(
        "Campaigns",
        true,
        &format!("<section><h1>Campaigns</h1>{table}</section>"),
    )
}

/// One campaign's report.
pub(crate) fn report(report: &Value) -> String {
    let name = report["name"].as_str().unwrap_or("");
    let arms: &[Value] = report["arms"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let arm_keys: Vec<&str> = arms.iter().filter_map(|a| a["key"].as_str()).collect();
    let level = Format::Percent.apply(&report["confidence_level"]);
    let mut body = format!(
        "<h1 data-field=\"name\">{}</h1><p class=\"meta\">key <code>{}</code> · id <code>{}</code> · {} published version(s) · {level} confidence intervals · control arm <b>{}</b></p>",
        esc(name),
        esc(report["key"].as_str().unwrap_or("")),
        esc(report["campaign_id"].as_str().unwrap_or("")),
        report["versions"].as_u64().unwrap_or(0),
        esc(arm_keys.first().copied().unwrap_or(MISSING)),
    );
    body.push_str(&verdicts(report));
    body.push_str(&srm(report, arms));
    for metric in metric_names(arms) {
        body.push_str(&metric_section(&metric, arms));
    }
    body.push_str(&format!(
        "<section><h2>Suppressed duplicates over time</h2><p class=\"meta\">Duplicates the store suppressed per arrival hour (UTC), by arm, summed over all metrics (each re-sent delivery of an outcome is one).</p>{}<div class=\"chart\">{}</div></section>",
        legend(&arm_keys),
        charts::duplicates_over_time(
            &arm_keys,
            report["duplicates_over_time"].as_array().map(Vec::as_slice).unwrap_or(&[])
        )
    ));
    page(name, true, &body)
}

fn verdicts(report: &Value) -> String {
    let list = report["verdicts"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let mut out = String::from("<section><h2>Verdict</h2>");
    if list.is_empty() {
        out.push_str("<p class=\"verdict calm\" data-field=\"verdict-none\">Removing duplicates changes no conclusion of this report.</p>");
    }
    for (index, verdict) in list.iter().enumerate() {
        out.push_str(&format!(
            "<p class=\"verdict\" data-field=\"verdict\" data-index=\"{index}\" data-kind=\"{}\">{}</p>",
            esc(verdict["kind"].as_str().unwrap_or("")),
            esc(verdict["message"].as_str().unwrap_or(""))
        ));
    }
    out.push_str("</section>");
    out
}

fn srm(report: &Value, arms: &[Value]) -> String {
    let srm = &report["srm"];
    let flagged = srm["flagged"].as_bool().unwrap_or(false);
    let badge = if flagged {
        "<span class=\"badge bad\" data-field=\"srm.flagged\" data-value=\"true\">sample ratio mismatch</span>"
    } else {
        "<span class=\"badge good\" data-field=\"srm.flagged\" data-value=\"false\">no mismatch</span>"
    };
    let field = |name| Source {
        metric: None,
        arm: None,
        field: name,
    };
    let expected = srm["expected_units"].as_array();
    let mut rows = String::new();
    for (index, arm) in arms.iter().enumerate() {
        let key = arm["key"].as_str().unwrap_or("");
        let at = |field| Source {
            metric: None,
            arm: Some(key),
            field,
        };
        let expected = expected
            .and_then(|e| e.get(index))
            .cloned()
            .unwrap_or(Value::Null);
        rows.push_str(&format!(
            "<tr><td>{}</td>{}{}</tr>",
            esc(key),
            number_cell(at("units"), &arm["units"], Format::Count),
            number_cell(at("expected_units"), &expected, Format::Expected),
        ));
    }
    format!(
        "<section><h2>Sample ratio {badge}</h2>\
         <p>Chi-square test of units against the weights: p-value <b><span{}>{}</span></b> (flagged below 0.001), χ² <span{}>{}</span>.</p>\
         <div class=\"scroll\"><table><thead><tr><th>Arm</th><th class=\"num\">Units</th><th class=\"num\">Expected units</th></tr></thead><tbody>{rows}</tbody></table></div></section>",
        field("srm.p_value").attributes(&srm["p_value"]),
        Format::PValue.apply(&srm["p_value"]),
        field("srm.chi_square").attributes(&srm["chi_square"]),
        Format::Decimal.apply(&srm["chi_square"]),
    )
}

/// Metric names in the order of the first arm's report (every arm has every metric).
fn metric_names(arms: &[Value]) -> Vec<String> {
    arms.first()
        .and_then(|a| a["metrics"].as_object())
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

fn metric_section(metric: &str, arms: &[Value]) -> String {
    let first = &arms[0]["metrics"][metric];
    let kind = first["kind"].as_str().unwrap_or("");
    let value_label = match kind {
        "conversion" => "Conversion rate",
        "count" => "Events per unit",
        _ => "Value per unit",
    };
    let value_format = if kind == "conversion" {
        Format::Percent
    } else {
        Format::Decimal
    };
    let mut deduped = String::new();
    let mut naive = String::new();
    let mut whiskers = Vec::new();
    let per_arm: Vec<(&str, &Value)> = arms
        .iter()
        .map(|a| (a["key"].as_str().unwrap_or(""), &a["metrics"][metric]))
        .collect();
    for arm in arms {
        let key = arm["key"].as_str().unwrap_or("");
        let m = &arm["metrics"][metric];
        let at = |field| Source {
            metric: Some(metric),
            arm: Some(key),
            field,
        };
        let is_control = arm["control"].as_bool().unwrap_or(false);
        let lift_cells = |prefix: &'static str, lift: &Value| -> String {
            if is_control {
                return "<td class=\"ctl\" colspan=\"3\">control</td>".to_string();
            }
            let [estimate, low, high, p] = match prefix {
                "lift" => [
                    "lift.estimate",
                    "lift.ci_low",
                    "lift.ci_high",
                    "lift.p_value",
                ],
                _ => [
                    "naive_lift.estimate",
                    "naive_lift.ci_low",
                    "naive_lift.ci_high",
                    "naive_lift.p_value",
                ],
            };
            format!(
                "{}<td class=\"num\">[<span{}>{}</span>, <span{}>{}</span>]</td>{}",
                number_cell(at(estimate), &lift["estimate"], Format::SignedPercent),
                at(low).attributes(&lift["ci_low"]),
                Format::SignedPercent.apply(&lift["ci_low"]),
                at(high).attributes(&lift["ci_high"]),
                Format::SignedPercent.apply(&lift["ci_high"]),
                number_cell(at(p), &lift["p_value"], Format::PValue),
            )
        };
        let converters = if kind == "conversion" {
            number_cell(at("converters"), &m["converters"], Format::Count)
        } else {
            String::new()
        };
        deduped.push_str(&format!(
            "<tr><td>{}</td>{}{converters}{}{}</tr>",
            esc(key),
            number_cell(at("units"), &m["units"], Format::Count),
            number_cell(at("value"), &m["value"], value_format),
            lift_cells("lift", &m["lift"]),
        ));
        let predicted = if is_control {
            "<td class=\"ctl\">control</td>".to_string()
        } else {
            number_cell(
                at("predicted_naive_lift"),
                &m["predicted_naive_lift"],
                Format::SignedPercent,
            )
        };
        naive.push_str(&format!(
            "<tr><td>{}</td>{}{}{}{}{}{}{}{predicted}</tr>",
            esc(key),
            number_cell(at("stored_events"), &m["stored_events"], Format::Count),
            number_cell(at("duplicates"), &m["duplicates"], Format::Count),
            number_cell(at("delta"), &m["delta"], Format::Percent),
            number_cell(at("delta_value"), &m["delta_value"], Format::Percent),
            number_cell(at("naive_value"), &m["naive_value"], value_format),
            if is_control {
                "<td class=\"ctl\" colspan=\"3\">control</td>".to_string()
            } else {
                lift_cells("naive_lift", &m["naive_lift"])
            },
            if is_control {
                "<td class=\"ctl\">control</td>".to_string()
            } else {
                number_cell(
                    at("lift.estimate"),
                    &m["lift"]["estimate"],
                    Format::SignedPercent,
                )
            },
        ));
        if !is_control {
            whiskers.push(LiftRow {
                arm: key,
                lift: &m["lift"],
                naive_lift: &m["naive_lift"],
                predicted_naive_lift: &m["predicted_naive_lift"],
            });
        }
    }
    let converters_head = if kind == "conversion" {
        "<th class=\"num\">Converters</th>"
    } else {
        ""
    };
    format!(
        "<section data-section=\"metric\" data-metric=\"{m}\"><h2>{m} <small class=\"meta\">{kind}, event-time window {hours} h</small></h2>\
         <div class=\"scroll\"><h3>Deduplicated</h3><table><thead><tr><th>Arm</th><th class=\"num\">Units</th>{converters_head}<th class=\"num\">{value_label}</th><th class=\"num\">Lift</th><th class=\"num\">95% CI</th><th class=\"num\">p-value</th></tr></thead><tbody>{deduped}</tbody></table></div>\
         <div class=\"chart\"><h3>{value_label} per arm, with 95% interval</h3>{values_chart}</div>\
         <div class=\"chart\"><h3>Lift with 95% interval</h3><p class=\"legend\"><span class=\"swatch\" style=\"background:#1f5fbf\"></span>deduplicated<span class=\"swatch\" style=\"background:#e07b00\"></span>naive (every delivery counted)<span class=\"swatch\" style=\"border:1.5px solid #5b6475\"></span>predicted naive</p>{chart}</div>\
         <h3>Naive vs deduplicated: what a pipeline without dedupe would have reported</h3>\
         <div class=\"scroll\"><table><thead><tr><th>Arm</th><th class=\"num\">Stored events</th><th class=\"num\">Suppressed duplicates</th><th class=\"num\">δ by count</th><th class=\"num\">δ by value</th><th class=\"num\">Naive value</th><th class=\"num\">Naive lift</th><th class=\"num\">95% CI</th><th class=\"num\">p-value</th><th class=\"num\">Dedup. lift</th><th class=\"num\">Predicted naive</th></tr></thead><tbody>{naive}</tbody></table></div>\
         <p class=\"meta\">δ = duplicates / stored events. Predicted naive lift = (1 + L)(1 + δ<sub>T</sub>)/(1 + δ<sub>C</sub>) − 1: the bias retries alone explain.</p></section>",
        m = esc(metric),
        kind = esc(kind),
        hours = first["window_hours"].as_u64().unwrap_or(0),
        chart = charts::lift_whiskers(metric, &whiskers),
        values_chart = charts::value_whiskers(metric, value_format, &per_arm),
    )
}

fn legend(arms: &[&str]) -> String {
    let items: Vec<String> = arms
        .iter()
        .enumerate()
        .map(|(i, arm)| {
            format!(
                "<span class=\"swatch\" style=\"background:{}\"></span>{}",
                charts::arm_colour(i),
                esc(arm)
            )
        })
        .collect();
    format!("<p class=\"legend\">{}</p>", items.join(""))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn hostile_names_are_escaped_everywhere() {
        let lift = json!({"estimate": 0.1, "ci_low": -0.05, "ci_high": 0.25, "p_value": 0.2});
        let metric = |control: bool| {
            json!({"kind": "count", "window_hours": 24, "units": 10, "value": 1.0, "naive_value": 1.1,
                "stored_events": 10, "duplicates": 1, "delta": 0.1, "delta_value": null,
                "lift": if control { Value::Null } else { lift.clone() },
                "naive_lift": if control { Value::Null } else { lift.clone() },
                "predicted_naive_lift": if control { Value::Null } else { json!(0.12) }})
        };
        let doc = json!({
            "campaign_id": "cmp_1", "key": "k", "name": "<script>alert(1)</script>", "versions": 1,
            "confidence_level": 0.95, "srm": {"p_value": 0.5, "flagged": false, "chi_square": 0.4, "expected_units": [10.0, 10.0]},
            "arms": [
                {"key": "c", "control": true, "units": 10, "metrics": {"<img src=x>": metric(true)}},
                {"key": "t\"", "control": false, "units": 10, "metrics": {"<img src=x>": metric(false)}},
            ],
            "verdicts": [{"kind": "x", "message": "<i>retry</i>"}],
            "duplicates_over_time": [{"bucket_start": "2026-01-01T00:00:00.000000Z", "arm": "t\"", "duplicates": 3}],
        });
        let html = report(&doc);
        for raw in ["<script>", "<img", "<i>", "t\"\""] {
            assert!(!html.contains(raw), "{raw} unescaped");
        }
        assert!(html.contains("data-field=\"lift.estimate\" data-value=\"0.1\""));
    }
}

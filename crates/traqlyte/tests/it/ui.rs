//! The web UI: login by form or single-use link, redirects without a session, and the
//! campaign page loaded in headless Chromium, whose numbers must match the JSON report
//! and whose naive-vs-deduplicated tables must fit a laptop and a phone window.
//! Chromium is required (`scripts/services.sh` installs Debian's `chromium`): a missing
//! browser fails these tests, it never skips them.

use std::collections::HashMap;
use std::time::Duration;

use reqwest::redirect::Policy;
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};

use crate::helpers::{spawn_app, Backend, TestApp};
use crate::on_both_backends;

on_both_backends!(
    the_campaign_page_in_chromium_shows_the_numbers_of_the_json_report,
    pages_need_a_session_that_only_the_form_or_a_single_use_link_starts,
    revoking_the_api_key_ends_its_sessions_and_login_links_at_once,
    the_root_says_what_this_is_and_both_ui_spellings_lead_in,
    the_naive_vs_deduplicated_tables_fit_a_laptop_and_a_phone_without_sideways_scrolling,
    a_login_link_whose_session_could_not_be_stored_still_works,
    a_link_into_another_tenant_asks_before_replacing_a_session,
    the_campaign_page_shows_one_versions_report_when_asked_as_the_api_does,
    a_page_opened_without_its_cookie_comes_back_to_itself_once_logged_in,
);

const HOSTILE_NAME: &str = "Checkout <script>alert(1)</script> & \"friends\"";
const UNITS: usize = 300;
/// A laptop window (the widest the page's main column gets) and a phone's viewport.
const LAPTOP: (u32, u32) = (1280, 900);
const PHONE: (u32, u32) = (390, 844);

async fn the_campaign_page_in_chromium_shows_the_numbers_of_the_json_report(backend: Backend) {
    let app = spawn_app(backend).await;
    let campaign = campaign_with_data(&app).await;
    // A reweighting with a unit assigned after it: the report then holds a verdict
    // whatever the random arms did (weights_changed), so the page's verdicts are checked
    // against a list that is never empty.
    crate::experiments::reweight(&app, &campaign, 3).await;
    // Forty units after it: both arms hold at least 2 of them but for a chance of about
    // 1 in 7,000, so the stratified figures weigh both versions.
    for unit in 0..40 {
        crate::experiments::assign(&app, &campaign, &format!("after-the-reweighting-{unit}")).await;
    }
    let report = app.get(&format!("/campaigns/{campaign}/report")).await;
    assert_eq!(report.status, StatusCode::OK, "{}", report.body);
    let report = report.body;

    let token = app.post_json("/ui/tokens", &json!({})).await;
    assert_eq!(token.status, StatusCode::CREATED, "{}", token.body);
    let login_path = token.body["login_path"].as_str().expect("login_path");
    assert!(
        !login_path.contains(&app.key),
        "the API key is never in a URL"
    );
    let url = app.url(&format!("{login_path}&next=/ui/campaigns/{campaign}"));
    let dom = dump_dom(&url, LAPTOP).await;

    assert!(
        dom.contains("data-field=\"name\""),
        "not the campaign page: {dom}"
    );
    assert!(!dom.contains("<script"), "a campaign name became markup");
    let elements = parse_elements(&dom);
    let name = elements
        .iter()
        .find(|e| e.attr("data-field") == Some("name"));
    assert_eq!(name.map(|e| e.text.as_str()), Some(HOSTILE_NAME));
    check_metrics(&report, &elements);
    check_srm_verdicts_and_duplicates(&report, &elements);
    check_stratified(&report, &elements);
}

/// The `stratified` figures of a reweighted campaign, shown per metric and arm as the
/// report holds them (the control without a lift).
fn check_stratified(report: &Value, elements: &[Element]) {
    let stratified = &report["stratified"];
    assert!(stratified.is_object(), "weights changed: {report}");
    assert_eq!(stratified["versions"], json!([1, 2]), "{stratified}");
    let mut compared = 0;
    for arm in stratified["arms"].as_array().expect("arms") {
        let key = arm["key"].as_str().expect("key");
        for (metric, figures) in arm["metrics"].as_object().expect("metrics") {
            let mut paths = vec![("stratified.value".to_string(), &figures["value"])];
            if arm["control"] == false {
                for part in ["estimate", "ci_low", "ci_high", "p_value"] {
                    paths.push((format!("stratified.lift.{part}"), &figures["lift"][part]));
                }
            }
            for (path, expected) in paths {
                let shown = elements
                    .iter()
                    .find(|e| {
                        e.attr("data-metric") == Some(metric.as_str())
                            && e.attr("data-arm") == Some(key)
                            && e.attr("data-field") == Some(&path)
                    })
                    .unwrap_or_else(|| panic!("{key} {metric} {path} is not on the page"));
                check_shown(shown, expected, &format!("{key} {metric} {path}"));
                compared += 1;
            }
        }
    }
    // 2 arms x 3 metrics, and the treatment's lift.
    assert!(
        compared >= 2 * 3 + 3 * 4,
        "only {compared} numbers compared"
    );
}

/// The page's layout is measured in Chromium at each width. The page itself runs no
/// script (its CSP is `default-src 'none'`), so the test puts the exact HTML the server
/// sent into an `<iframe srcdoc>` of the width and height under test, in a harness page
/// loaded from a file, whose one script measures the frame once it has loaded and writes
/// the result into the harness's DOM, which `--dump-dom` returns. The frame, not the
/// window, sets the viewport because headless Chromium keeps windows at least 500 px
/// wide. Markup and style sheet are the server's; only the measurement is the test's.
async fn the_naive_vs_deduplicated_tables_fit_a_laptop_and_a_phone_without_sideways_scrolling(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    let campaign = campaign_with_data(&app).await;
    let report = app.get(&format!("/campaigns/{campaign}/report")).await.body;
    let html = page_with_session(&app, &format!("/ui/campaigns/{campaign}")).await;
    let srcdoc = html.replace('&', "&amp;").replace('"', "&quot;");
    let dir = tempdir("traqlyte_layout");

    for (width, height) in [LAPTOP, PHONE] {
        let harness = format!(
            "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><style>body{{margin:0}}iframe{{border:0;display:block}}</style></head>\
             <body><iframe id=\"page\" width=\"{width}\" height=\"{height}\" srcdoc=\"{srcdoc}\"></iframe>{LAYOUT_PROBE}</body></html>"
        );
        let file = dir.join(format!("report_{width}.html"));
        std::fs::write(&file, harness).expect("write the harness");
        let url = format!("file://{}", file.display());
        let dom = dump_dom(&url, (width + 100, height + 100)).await;
        let layout = layout_of(&dom);
        let what = format!("at {width}x{height}");
        assert_eq!(
            layout["inner_width"],
            json!(width),
            "{what}: the viewport is the frame: {layout}"
        );
        assert!(
            layout["page_scroll_width"].as_f64() <= layout["client_width"].as_f64(),
            "{what}: the page scrolls sideways: {layout}"
        );
        let tables = layout["tables"].as_array().expect("tables");
        assert_eq!(
            tables.len(),
            3,
            "{what}: a naive table per metric: {layout}"
        );
        // Narrow, the rows are stacked: every value has its column's name beside it.
        let stacked = width < 720;
        for table in tables {
            let metric = table["metric"].as_str().unwrap_or("?");
            assert!(
                table["box_scroll_width"].as_f64() <= table["box_client_width"].as_f64(),
                "{what}: {metric}'s naive table overflows its box: {table}"
            );
            assert!(table["cells"].as_u64() >= Some(2 * 9), "{what}: {table}");
            assert_eq!(table["hidden"], 0, "{what}: {metric} hides cells: {table}");
            assert_eq!(
                table["outside"], 0,
                "{what}: {metric} cells off screen: {table}"
            );
            let expected = if stacked {
                table["cells"].as_u64()
            } else {
                Some(0)
            };
            assert_eq!(
                table["labelled"].as_u64(),
                expected,
                "{what}: labels {table}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    // The numbers the probe measured are the report's: the same page, read by its data
    // attributes, at the laptop width (the other test loads it through the login link).
    let elements = parse_elements(&html);
    check_metrics(&report, &elements);
}

/// The measuring script, run in the harness: once the frame has loaded, for each
/// naive-vs-deduplicated table its box's scroll and client widths, and how many of its
/// cells are hidden (no box), outside the frame's viewport, or labelled by the stacked
/// layout's `::before`; the page's own scroll width. Written as JSON into
/// `<pre id="layout">` of the harness.
const LAYOUT_PROBE: &str = r#"<script>
(function () {
  var frame = document.getElementById('page'), done = false;
  function measure() {
    var doc = frame.contentDocument, win = frame.contentWindow;
    if (done || !doc || doc.readyState !== 'complete' || !doc.querySelector('main')) return;
    done = true;
    var root = doc.documentElement, vw = root.clientWidth, tables = [];
    doc.querySelectorAll('table[data-table="naive"]').forEach(function (t) {
      var box = t.parentElement, cells = t.querySelectorAll('td'), hidden = 0, outside = 0, labelled = 0;
      cells.forEach(function (c) {
        var r = c.getBoundingClientRect();
        if (r.width === 0 || r.height === 0) hidden++;
        if (r.left < -0.5 || r.right > vw + 0.5) outside++;
        var label = win.getComputedStyle(c, '::before').content;
        if (label && label !== 'none' && label !== 'normal' && label !== '""') labelled++;
      });
      tables.push({metric: t.closest('section').getAttribute('data-metric'),
        box_scroll_width: box.scrollWidth, box_client_width: box.clientWidth,
        cells: cells.length, hidden: hidden, outside: outside, labelled: labelled});
    });
    var out = document.createElement('pre');
    out.id = 'layout';
    out.textContent = JSON.stringify({inner_width: win.innerWidth, client_width: vw,
      page_scroll_width: root.scrollWidth, tables: tables});
    document.body.appendChild(out);
  }
  frame.addEventListener('load', measure);
  measure();
})();
</script>"#;

/// The measurement the probe wrote into the dumped DOM.
fn layout_of(dom: &str) -> Value {
    let start = dom
        .find("<pre id=\"layout\">")
        .unwrap_or_else(|| panic!("the layout probe did not run: {dom}"))
        + "<pre id=\"layout\">".len();
    let end = start
        + dom[start..]
            .find("</pre>")
            .expect("end of the probe's output");
    serde_json::from_str(&decode(&dom[start..end])).expect("the probe's JSON")
}

/// `?version=N` on the campaign page restricts it to the units assigned under that version,
/// as `GET /campaigns/{id}/report?version=N` does (the reweighting verdict points there);
/// the page says so. It was read as the whole campaign's report.
async fn the_campaign_page_shows_one_versions_report_when_asked_as_the_api_does(backend: Backend) {
    let app = spawn_app(backend).await;
    let campaign = campaign_with_data(&app).await;
    crate::experiments::reweight(&app, &campaign, 3).await;
    for unit in 0..12 {
        crate::experiments::assign(&app, &campaign, &format!("late-{unit}")).await;
    }
    for version in [1, 2] {
        let path = format!("/campaigns/{campaign}/report?version={version}");
        let report = app.get(&path).await;
        assert_eq!(report.status, StatusCode::OK, "{}", report.body);
        let html = page_with_session(&app, &format!("/ui{path}").replace("/report", "")).await;
        assert!(
            html.contains(&format!("data-field=\"version\" data-value=\"{version}\"")),
            "version {version} not named"
        );
        for arm in report.body["arms"].as_array().expect("arms") {
            let cell = format!(
                "data-arm=\"{}\" data-field=\"units\" data-value=\"{}\"",
                arm["key"].as_str().expect("key"),
                arm["units"]
            );
            assert!(html.contains(&cell), "version {version}: no {cell}");
        }
    }
    let whole = page_with_session(&app, &format!("/ui/campaigns/{campaign}")).await;
    assert!(!whole.contains("data-field=\"version\""));
    // A version that is no number is this page's 400, an HTML page like its other errors.
    let (status, kind, body) =
        answer_with_session(&app, &format!("/ui/campaigns/{campaign}?version=abc")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(kind.starts_with("text/html"), "{kind}: {body}");
}

/// The HTML of a UI page as the server sends it, fetched with a session started by a
/// single-use login link.
pub(crate) async fn page_with_session(app: &TestApp, path: &str) -> String {
    let (status, _, html) = answer_with_session(app, path).await;
    assert_eq!(status, StatusCode::OK);
    html
}

/// A UI page's status, content type and body, fetched with a session started by a
/// single-use login link.
async fn answer_with_session(app: &TestApp, path: &str) -> (StatusCode, String, String) {
    let client = without_redirects();
    let token = app.post_json("/ui/tokens", &json!({})).await;
    let login_path = token.body["login_path"].as_str().expect("login_path");
    let session = link_session(app, &client, login_path).await;
    let page = client
        .get(app.url(path))
        .header("cookie", session)
        .send()
        .await
        .expect("page");
    let status = page.status();
    let kind = page
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    (status, kind, page.text().await.expect("body"))
}

fn check_metrics(report: &Value, elements: &[Element]) {
    const FIELDS: [&str; 12] = [
        "units",
        "converters",
        "value",
        "naive_value",
        "stored_events",
        "duplicates",
        "collisions",
        "delta",
        "delta_value",
        "predicted_naive_lift",
        "lift",
        "naive_lift",
    ];
    let mut compared = 0;
    for arm in report["arms"].as_array().expect("arms") {
        let key = arm["key"].as_str().expect("arm key");
        for (metric, figures) in arm["metrics"].as_object().expect("metrics") {
            for field in FIELDS {
                let paths: Vec<(String, &Value)> =
                    if field.ends_with("lift") && figures[field].is_object() {
                        ["estimate", "ci_low", "ci_high", "p_value"]
                            .iter()
                            .map(|part| (format!("{field}.{part}"), &figures[field][*part]))
                            .collect()
                    } else {
                        vec![(field.to_string(), &figures[field])]
                    };
                for (path, expected) in paths {
                    let shown: Vec<&Element> = elements
                        .iter()
                        .filter(|e| {
                            e.attr("data-metric") == Some(metric)
                                && e.attr("data-arm") == Some(key)
                                && e.attr("data-field") == Some(&path)
                        })
                        .collect();
                    let is_control_lift = arm["control"] == true && field.contains("lift");
                    // Converters are a conversion metric's only: absent from the others.
                    if field == "converters" && expected.is_null() {
                        assert!(shown.is_empty(), "{key} {metric} {path}");
                        continue;
                    }
                    if is_control_lift {
                        assert!(
                            expected.is_null() && shown.is_empty(),
                            "{key} {metric} {path}"
                        );
                        continue;
                    }
                    assert!(
                        !shown.is_empty(),
                        "{key} {metric} {path} is not on the page"
                    );
                    for element in shown {
                        check_shown(element, expected, &format!("{key} {metric} {path}"));
                        compared += 1;
                    }
                }
            }
        }
    }
    // 2 arms x 3 metrics x 7 plain fields + treatment lifts, naive lifts, predicted.
    assert!(compared >= 60, "only {compared} numbers compared");
}

fn check_srm_verdicts_and_duplicates(report: &Value, elements: &[Element]) {
    fn with_field<'a>(
        elements: &'a [Element],
        field: &'a str,
    ) -> impl Iterator<Item = &'a Element> {
        elements
            .iter()
            .filter(move |e| e.attr("data-field") == Some(field))
    }
    let by_field = |field: &'static str| with_field(elements, field);
    let p = by_field("srm.p_value").next().expect("SRM p-value shown");
    check_shown(p, &report["srm"]["p_value"], "srm p");
    let flagged = by_field("srm.flagged").next().expect("SRM status shown");
    assert_eq!(
        flagged.attr("data-value"),
        Some(report["srm"]["flagged"].to_string().as_str())
    );

    let verdicts: Vec<&str> = by_field("verdict").map(|e| e.text.as_str()).collect();
    let expected: Vec<&str> = report["verdicts"]
        .as_array()
        .expect("verdicts")
        .iter()
        .map(|v| v["message"].as_str().expect("message"))
        .collect();
    // An empty list on both sides would prove nothing (the reweighting above makes one).
    assert!(!expected.is_empty(), "{}", report["verdicts"]);
    assert_eq!(verdicts, expected);

    let mut expected_by_arm: HashMap<String, f64> = HashMap::new();
    for point in report["duplicates_over_time"]
        .as_array()
        .expect("duplicates_over_time")
    {
        *expected_by_arm
            .entry(point["arm"].as_str().expect("arm").to_string())
            .or_default() += point["duplicates"].as_f64().expect("duplicates");
    }
    assert!(!expected_by_arm.is_empty(), "the test data has duplicates");
    let mut shown_by_arm: HashMap<String, f64> = HashMap::new();
    for bar in by_field("chart.duplicates") {
        let value: f64 = bar
            .attr("data-value")
            .and_then(|v| v.parse().ok())
            .expect("bar value");
        *shown_by_arm
            .entry(bar.attr("data-arm").expect("bar arm").to_string())
            .or_default() += value;
    }
    assert_eq!(shown_by_arm, expected_by_arm);
    assert!(
        by_field("chart.lift").count() >= 3,
        "a whisker per treatment metric"
    );
    // Every arm's own value is drawn with its interval, and the marker carries the
    // report's value exactly.
    let mut values_drawn = 0;
    for marker in by_field("chart.value") {
        let (metric, arm) = (
            marker.attr("data-metric").expect("metric"),
            marker.attr("data-arm").expect("arm"),
        );
        let arms = report["arms"].as_array().expect("arms");
        let entry = arms
            .iter()
            .find(|a| a["key"] == arm)
            .expect("arm in report");
        let expected = &entry["metrics"][metric]["value"];
        let shown: Value = marker
            .attr("data-value")
            .and_then(|v| serde_json::from_str(v).ok())
            .expect("value");
        assert_eq!(&shown, expected, "{metric}/{arm}");
        assert!(
            entry["metrics"][metric]["value_ci"]["low"].as_f64() <= expected.as_f64(),
            "{metric}/{arm} interval"
        );
        values_drawn += 1;
    }
    assert!(
        values_drawn >= 6,
        "a value whisker per arm and metric, got {values_drawn}"
    );
}

/// The element's raw value equals the report's, and its text is that value rounded to
/// the precision shown (a percentage when it ends with `%`, events per unit when it says
/// so).
fn check_shown(element: &Element, expected: &Value, what: &str) {
    let raw: Value = element
        .attr("data-value")
        .and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or_else(|| panic!("{what}: no data-value"));
    assert_eq!(&raw, expected, "{what}: data-value");
    let text = element.text.trim();
    if text.is_empty() {
        return; // Chart marks carry the value only.
    }
    let Some(expected) = expected.as_f64() else {
        assert_eq!(text, "—", "{what}: a missing value");
        return;
    };
    if let Some(bound) = text.strip_prefix("< ") {
        let bound: f64 = bound.parse().expect("bound");
        assert!(expected < bound, "{what}: {expected} shown as {text}");
        return;
    }
    // A naive "conversion" counts every delivery: it is shown as events per unit.
    let text = text.strip_suffix(" events/unit").unwrap_or(text);
    let (number, scale) = match text.strip_suffix('%') {
        Some(n) => (n, 100.0),
        None => (text, 1.0),
    };
    let number = number.replace(',', "");
    let decimals = number.split_once('.').map_or(0, |(_, d)| d.len());
    let shown: f64 = number
        .parse()
        .unwrap_or_else(|_| panic!("{what}: {text:?} is not a number"));
    let tolerance = 0.5 * 10f64.powi(-(decimals as i32)) + 1e-9;
    assert!(
        (shown - expected * scale).abs() <= tolerance,
        "{what}: {text} shown for {expected}"
    );
}

async fn the_root_says_what_this_is_and_both_ui_spellings_lead_in(backend: Backend) {
    let app = spawn_app(backend).await;
    let client = without_redirects();
    let root = client.get(app.url("/")).send().await.expect("get /");
    assert_eq!(root.status(), StatusCode::OK);
    let text = root.text().await.expect("text");
    for link in [
        "href=\"/ui/campaigns\"",
        "href=\"/healthz\"",
        "href=\"/openapi.json\"",
        "docs/api.md",
    ] {
        assert!(text.contains(link), "the landing page lacks {link}");
    }
    for path in ["/ui", "/ui/"] {
        let answer = client.get(app.url(path)).send().await.expect("get");
        assert_eq!(answer.status(), StatusCode::SEE_OTHER, "{path}");
        assert_eq!(location(&answer), "/ui/campaigns", "{path}");
    }
    // The UI's refusals are pages, also those an extractor makes before the handler
    // runs (they were the API's JSON errors).
    let refusals = [
        (
            client.get(app.url("/ui/login?next=a&next=b")),
            StatusCode::BAD_REQUEST,
        ),
        (
            client
                .post(app.url("/ui/login"))
                .header("content-type", "application/json")
                .body("{}"),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ),
        (
            client
                .post(app.url("/ui/login"))
                .header("content-type", "application/x-www-form-urlencoded")
                .body("api_key=a&api_key=b"),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
    ];
    for (request, status) in refusals {
        let answer = request.send().await.expect("sent");
        let kind = answer.headers()[reqwest::header::CONTENT_TYPE]
            .to_str()
            .unwrap_or_default()
            .to_owned();
        let body = answer.text().await.unwrap_or_default();
        assert!(kind.starts_with("text/html"), "{status}: {kind} {body}");
        assert!(body.contains(&status.as_u16().to_string()), "{body}");
    }
}

async fn pages_need_a_session_that_only_the_form_or_a_single_use_link_starts(backend: Backend) {
    let app = spawn_app(backend).await;
    let client = without_redirects();
    let created = create_campaign(&app).await;

    let anonymous = client
        .get(app.url("/ui/campaigns"))
        .send()
        .await
        .expect("get");
    assert_eq!(anonymous.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&anonymous), "/ui/login?next=/ui/campaigns");
    let form = client.get(app.url("/ui/login")).send().await.expect("get");
    assert_eq!(form.status(), StatusCode::OK);
    let csp = form.headers()["content-security-policy"]
        .to_str()
        .unwrap_or("");
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert_eq!(form.headers()["x-content-type-options"], "nosniff");
    assert!(form
        .text()
        .await
        .expect("text")
        .contains("name=\"api_key\""));

    let post_login = |key: &str, origin: &str| {
        client
            .post(app.url("/ui/login"))
            .header("origin", origin)
            .form(&[("api_key", key), ("next", "/ui/campaigns")])
    };
    let own_origin = app.address.clone();
    let wrong = post_login("tlk_not_a_key", &own_origin)
        .send()
        .await
        .expect("post");
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let forged = post_login(&app.key, "http://evil.example")
        .send()
        .await
        .expect("post");
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    assert!(forged.headers().get("set-cookie").is_none());
    // A post that says nothing of where it comes from (no Origin, no Sec-Fetch-Site) is
    // no page of ours either.
    let unsourced = client
        .post(app.url("/ui/login"))
        .form(&[("api_key", app.key.as_str()), ("next", "/ui/campaigns")])
        .send()
        .await
        .expect("post");
    assert_eq!(unsourced.status(), StatusCode::FORBIDDEN);
    assert!(unsourced.headers().get("set-cookie").is_none());

    let good = post_login(&app.key, &own_origin)
        .send()
        .await
        .expect("post");
    assert_eq!(good.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&good), "/ui/campaigns");
    let cookie = good.headers()["set-cookie"]
        .to_str()
        .expect("ascii")
        .to_string();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/ui"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    assert!(
        !cookie.contains(&app.key),
        "the cookie holds a session, not the key"
    );
    let session = cookie.split(';').next().expect("pair").to_string();

    let page = |path: &str, session: &str| {
        client
            .get(app.url(path))
            .header("cookie", session.to_string())
            .send()
    };
    let index = page("/ui/campaigns", &session).await.expect("get");
    assert_eq!(index.status(), StatusCode::OK);
    let html = index.text().await.expect("text");
    assert!(html.contains(&format!("href=\"/ui/campaigns/{created}\"")));
    assert!(
        html.contains("Checkout &lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;friends&quot;")
    );
    let unpublished = page(&format!("/ui/campaigns/{created}"), &session)
        .await
        .expect("get");
    assert_eq!(unpublished.status(), StatusCode::CONFLICT);
    assert!(unpublished.headers()["content-type"]
        .to_str()
        .unwrap_or("")
        .starts_with("text/html"));
    // Published with other weights, the list shows the weights units get now.
    crate::experiments::reweight(&app, &created, 9).await;
    let listed = page("/ui/campaigns", &session).await.expect("get");
    let html = listed.text().await.expect("text");
    assert!(html.contains("treatment (9)"), "{html}");

    // Another tenant's session does not see this tenant's campaign.
    let other_key = app.other_tenant_key().await;
    let other = post_login(&other_key, &own_origin)
        .send()
        .await
        .expect("post");
    let other_session = other.headers()["set-cookie"].to_str().expect("ascii");
    let other_session = other_session.split(';').next().expect("pair").to_string();
    let hidden = page(&format!("/ui/campaigns/{created}"), &other_session)
        .await
        .expect("get");
    assert_eq!(hidden.status(), StatusCode::NOT_FOUND);

    // A login link works once, opened by the user (typed or pasted: `none`). Opened by
    // anything else (no header: a chat client's link preview; a sibling subdomain's page:
    // `same-site`) it is not used: the preview would use it up, the page would log this
    // browser into its own tenant.
    let token = app.post_json("/ui/tokens", &json!({})).await;
    let link = app.url(token.body["login_path"].as_str().expect("login_path"));
    for (header, value) in [
        ("x-no-fetch-metadata", "1"),
        ("sec-fetch-site", "same-site"),
    ] {
        let preview = client
            .get(&link)
            .header(header, value)
            .send()
            .await
            .expect("get");
        assert_eq!(preview.status(), StatusCode::OK, "{value}");
        assert!(preview.headers().get("set-cookie").is_none(), "{value}");
    }
    let opened = |site: &'static str| client.get(&link).header("sec-fetch-site", site).send();
    let first = opened("none").await.expect("get");
    assert_eq!(first.status(), StatusCode::SEE_OTHER);
    assert!(first.headers().get("set-cookie").is_some());
    let second = opened("same-origin").await.expect("get");
    assert_eq!(second.status(), StatusCode::UNAUTHORIZED);
    assert!(second.headers().get("set-cookie").is_none());

    // Opened from another site (a mail client, or a page logging this browser into the
    // page's own tenant), a link is not used on arrival: a page posts it from here, and
    // the SameSite=Strict cookie then comes from a same-site request.
    let token = app.post_json("/ui/tokens", &json!({})).await;
    let link = app.url(token.body["login_path"].as_str().expect("login_path"));
    let secret = token.body["token"].as_str().expect("token").to_string();
    let arrival = client
        .get(&link)
        .header("sec-fetch-site", "cross-site")
        .send()
        .await
        .expect("get");
    assert_eq!(arrival.status(), StatusCode::OK);
    assert!(arrival.headers().get("set-cookie").is_none());
    let html = arrival.text().await.expect("text");
    assert!(
        html.contains(&format!("name=\"token\" value=\"{secret}\"")),
        "{html}"
    );
    let post_link = |origin: &str| {
        client
            .post(app.url("/ui/login"))
            .header("origin", origin)
            .form(&[("token", secret.as_str()), ("next", "/ui/campaigns")])
    };
    let forged = post_link("http://evil.example").send().await.expect("post");
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    // The browser says another site's page posted it: refused, whatever its Origin says
    // (as logging out is).
    let forged = post_link(&own_origin)
        .header("sec-fetch-site", "cross-site")
        .send()
        .await
        .expect("post");
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    let continued = post_link(&own_origin).send().await.expect("post");
    assert_eq!(continued.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&continued), "/ui/campaigns");
    assert!(continued.headers().get("set-cookie").is_some());
    let again = post_link(&own_origin).send().await.expect("post");
    assert_eq!(again.status(), StatusCode::UNAUTHORIZED);

    // Another site cannot log this browser out.
    let forged_out = client
        .post(app.url("/ui/logout"))
        .header("cookie", session.clone())
        .header("origin", "http://evil.example")
        .send()
        .await
        .expect("post");
    assert_eq!(forged_out.status(), StatusCode::FORBIDDEN);
    assert_eq!(
        page("/ui/campaigns", &session).await.expect("get").status(),
        StatusCode::OK
    );

    // Logging out revokes the session on the server, not just in the browser.
    let out = client
        .post(app.url("/ui/logout"))
        .header("cookie", session.clone())
        .header("sec-fetch-site", "same-origin")
        .send()
        .await
        .expect("post");
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    let after = page("/ui/campaigns", &session).await.expect("get");
    assert_eq!(after.status(), StatusCode::SEE_OTHER);
}

/// A browser session stands for the API key it was exchanged for, directly or through a
/// login link: once the key is revoked no page opens with it, and no unused link minted
/// with it starts a session. The tenant's other keys keep theirs.
async fn revoking_the_api_key_ends_its_sessions_and_login_links_at_once(backend: Backend) {
    let app = spawn_app(backend).await;
    let client = without_redirects();
    let (tenant, doomed) = app
        .store
        .create_tenant(&crate::helpers::tenant_name("revoked tenant"))
        .await
        .expect("tenant");
    let (kept, _) = app.store.create_api_key(&tenant).await.expect("second key");
    let by_form = form_session(&client, &app, doomed.expose()).await;
    let link = login_link(&client, &app, doomed.expose()).await;
    let by_link = link_session(&app, &client, &link).await;
    let unused_link = login_link(&client, &app, doomed.expose()).await;
    let other_key_session = form_session(&client, &app, kept.expose()).await;
    for session in [&by_form, &by_link, &other_key_session] {
        assert_eq!(page_status(&client, &app, session).await, StatusCode::OK);
    }

    let revoked = app
        .store
        .revoke_api_key(&tenant, &traqlyte_store::KeySelector::Key(doomed))
        .await
        .expect("revoke");
    assert!(revoked.is_some(), "the key existed");
    for session in [&by_form, &by_link] {
        assert_eq!(
            page_status(&client, &app, session).await,
            StatusCode::SEE_OTHER,
            "a session of a revoked key is over"
        );
    }
    let late = client
        .get(app.url(&unused_link))
        .header("sec-fetch-site", "none")
        .send()
        .await
        .expect("get");
    assert_eq!(late.status(), StatusCode::UNAUTHORIZED);
    assert!(late.headers().get("set-cookie").is_none());
    assert_eq!(
        page_status(&client, &app, &other_key_session).await,
        StatusCode::OK,
        "the tenant's other key keeps its session"
    );
}

/// Login CSRF by link: anyone with an API key can mint a login link, and a link opened
/// from a mail or chat application arrives as typed (`Sec-Fetch-Site: none`). Opened in
/// a browser logged in to another tenant, the link does not silently replace that
/// session: a page names both tenants and asks; the link is not used up by asking. Every
/// page names the session's tenant, so a browser put into another tenant shows it.
async fn a_link_into_another_tenant_asks_before_replacing_a_session(backend: Backend) {
    let app = spawn_app(backend).await;
    let client = without_redirects();
    let mine = form_session(&client, &app, &app.key).await;
    let html = html_of(
        client
            .get(app.url("/ui/campaigns"))
            .header("cookie", mine.as_str()),
    )
    .await;
    assert!(
        html.contains("data-field=\"tenant\">Tenant <b>test tenant</b>"),
        "{html}"
    );

    // Another tenant's link, opened as typed in the browser logged in to this tenant.
    let other_key = app.other_tenant_key().await;
    let link = login_link(&client, &app, &other_key).await;
    let opened = || {
        client
            .get(app.url(&link))
            .header("sec-fetch-site", "none")
            .header("cookie", mine.as_str())
            .send()
    };
    let asked = opened().await.expect("get");
    assert_eq!(asked.status(), StatusCode::OK);
    assert!(asked.headers().get("set-cookie").is_none());
    let html = asked.text().await.expect("text");
    assert!(
        html.contains("logged in to tenant <b>test tenant</b>"),
        "{html}"
    );
    assert!(
        html.contains("logs in to tenant <b>other tenant</b>"),
        "{html}"
    );
    let secret = link.split("token=").nth(1).expect("token");
    assert!(
        html.contains(&format!("name=\"token\" value=\"{secret}\"")),
        "{html}"
    );
    // The session is untouched, and asking did not use the link up: asked again, then
    // continued from the page, it switches.
    assert_eq!(page_status(&client, &app, &mine).await, StatusCode::OK);
    assert_eq!(opened().await.expect("get").status(), StatusCode::OK);
    let continued = client
        .post(app.url("/ui/login"))
        .header("origin", app.address.as_str())
        .header("cookie", mine.as_str())
        .form(&[("token", secret), ("next", "/ui/campaigns")])
        .send()
        .await
        .expect("post");
    assert_eq!(continued.status(), StatusCode::SEE_OTHER);
    let theirs = session_of(&continued);
    let html = html_of(
        client
            .get(app.url("/ui/campaigns"))
            .header("cookie", theirs.as_str()),
    )
    .await;
    assert!(html.contains("Tenant <b>other tenant</b>"), "{html}");

    // A link of the session's own tenant is used at once, as without a session.
    let own = login_link(&client, &app, &app.key).await;
    let same = client
        .get(app.url(&own))
        .header("sec-fetch-site", "none")
        .header("cookie", mine.as_str())
        .send()
        .await
        .expect("get");
    assert_eq!(same.status(), StatusCode::SEE_OTHER);
    assert!(same.headers().get("set-cookie").is_some());

    // From another site, the page names the link's tenant too.
    let link = login_link(&client, &app, &other_key).await;
    let html = html_of(
        client
            .get(app.url(&link))
            .header("sec-fetch-site", "cross-site"),
    )
    .await;
    assert!(html.contains("opened from another site"), "{html}");
    assert!(html.contains("Continue as tenant other tenant"), "{html}");
}

/// The text of the answer to `request`.
async fn html_of(request: reqwest::RequestBuilder) -> String {
    request
        .send()
        .await
        .expect("get")
        .text()
        .await
        .expect("text")
}

/// The `name=value` pair of a response's session cookie.
/// The session a login link starts, opened as a user opens it (`Sec-Fetch-Site: none`).
pub(crate) async fn link_session(app: &TestApp, client: &Client, login_path: &str) -> String {
    let login = client
        .get(app.url(login_path))
        .header("sec-fetch-site", "none")
        .send()
        .await
        .expect("login");
    assert_eq!(login.status(), StatusCode::SEE_OTHER);
    session_of(&login)
}

fn session_of(response: &reqwest::Response) -> String {
    let cookie = response.headers()["set-cookie"].to_str().expect("ascii");
    cookie.split(';').next().expect("pair").to_string()
}

/// A session started by the login form with `key`.
async fn form_session(client: &Client, app: &TestApp, key: &str) -> String {
    let response = client
        .post(app.url("/ui/login"))
        .header("origin", app.address.as_str())
        .form(&[("api_key", key), ("next", "/ui/campaigns")])
        .send()
        .await
        .expect("post");
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    session_of(&response)
}

/// The path of a login link minted with `key`.
async fn login_link(client: &Client, app: &TestApp, key: &str) -> String {
    let response = client
        .post(app.url("/ui/tokens"))
        .bearer_auth(key)
        .json(&json!({}))
        .send()
        .await
        .expect("post");
    assert_eq!(response.status(), StatusCode::CREATED);
    let body: Value = response.json().await.expect("JSON");
    body["login_path"].as_str().expect("login_path").to_string()
}

/// The status of the campaign index opened with `session`.
async fn page_status(client: &Client, app: &TestApp, session: &str) -> StatusCode {
    client
        .get(app.url("/ui/campaigns"))
        .header("cookie", session)
        .send()
        .await
        .expect("get")
        .status()
}

/// A client that shows each redirect instead of following it, as the tests read them.
fn without_redirects() -> Client {
    Client::builder()
        .redirect(Policy::none())
        .build()
        .expect("client")
}

fn location(response: &reqwest::Response) -> String {
    response.headers()["location"]
        .to_str()
        .expect("ascii")
        .to_string()
}

async fn create_campaign(app: &TestApp) -> String {
    let created = app
        .post_json(
            "/campaigns",
            &json!({
                "key": "checkout_page", "name": HOSTILE_NAME,
                "arms": [{"key": "control", "weight": 1}, {"key": "treatment", "weight": 1}],
                "metrics": [
                    {"name": "purchase", "kind": "conversion", "window_hours": 24},
                    {"name": "revenue", "kind": "sum", "window_hours": 24},
                    {"name": "pageviews", "kind": "count", "window_hours": 24}
                ]
            }),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    created.body["id"].as_str().expect("id").to_string()
}

/// A published campaign with `UNITS` units, outcomes on three metrics, and duplicate
/// deliveries more frequent in treatment (as a heavier page's lost replies would cause).
async fn campaign_with_data(app: &TestApp) -> String {
    let campaign = create_campaign(app).await;
    let published = app
        .post_json(&format!("/campaigns/{campaign}/publish"), &json!({}))
        .await;
    assert_eq!(published.status, StatusCode::CREATED, "{}", published.body);
    let mut tasks = tokio::task::JoinSet::new();
    for chunk in 0..10 {
        let (client, url, key, campaign) = (
            app.client.clone(),
            app.url("/assignments"),
            app.key.clone(),
            campaign.clone(),
        );
        tasks.spawn(async move {
            let mut out = Vec::new();
            for unit in (chunk..UNITS).step_by(10) {
                let response = client
                    .post(&url)
                    .bearer_auth(&key)
                    .json(&json!({"campaign_id": campaign, "unit_id": format!("user-{unit}")}))
                    .send()
                    .await
                    .expect("assign");
                assert_eq!(response.status(), StatusCode::OK);
                out.push((unit, response.json::<Value>().await.expect("assignment")));
            }
            out
        });
    }
    let mut outcomes = Vec::new();
    let mut duplicates = Vec::new();
    let mut collisions = Vec::new();
    while let Some(done) = tasks.join_next().await {
        for (unit, assignment) in done.expect("task") {
            let treated = assignment["arm"] == "treatment";
            let item = |metric: &str, key: String, value: Option<f64>| {
                json!({"assignment_id": assignment["assignment_id"], "dedupe_key": key,
                       "metric": metric, "value": value, "occurred_at": assignment["assigned_at"]})
            };
            let mut mine = Vec::new();
            if unit % 3 == 0 || (treated && unit % 7 == 0) {
                mine.push(item("purchase", format!("test:purchase:{unit}"), None));
                mine.push(item(
                    "revenue",
                    format!("test:order:{unit}"),
                    Some(10.0 + (unit % 7) as f64),
                ));
            }
            for view in 0..(1 + unit % 3) {
                mine.push(item("pageviews", format!("test:view:{unit}:{view}"), None));
            }
            let retry_every = if treated { 4 } else { 12 };
            for (index, outcome) in mine.iter().enumerate() {
                if (unit + index) % retry_every == 0 {
                    duplicates.push(outcome.clone());
                }
            }
            // Some orders sent again with another value: collisions, shown per arm.
            if unit % 5 == 0 {
                if let Some(order) = mine.iter().find(|o| o["metric"] == "revenue") {
                    let mut changed = order.clone();
                    changed["value"] = json!(order["value"].as_f64().unwrap_or(0.0) + 1.0);
                    collisions.push(changed);
                }
            }
            outcomes.extend(mine);
        }
    }
    for batch in [outcomes, duplicates, collisions] {
        for chunk in batch.chunks(500) {
            let answer = app
                .post_json("/outcomes/batch", &Value::Array(chunk.to_vec()))
                .await;
            assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        }
    }
    campaign
}

/// Loads `url` in headless Chromium with a `width`×`height` window and returns the
/// serialised DOM after load.
pub(crate) async fn dump_dom(url: &str, (width, height): (u32, u32)) -> String {
    let browser =
        std::env::var("TRAQLYTE_TEST_CHROMIUM").unwrap_or_else(|_| "chromium".to_string());
    let profile = tempdir("traqlyte_chromium");
    let run = tokio::process::Command::new(&browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            &format!("--user-data-dir={}", profile.display()),
            &format!("--window-size={width},{height}"),
            "--dump-dom",
            url,
        ])
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("chromium finished within 120 s")
        .unwrap_or_else(|err| {
            panic!("{browser} must be installed for the UI tests (scripts/services.sh installs it): {err}")
        });
    let _ = std::fs::remove_dir_all(&profile);
    assert!(
        output.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 DOM")
}

fn tempdir(prefix: &str) -> std::path::PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("{prefix}_{}_{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// An element of the dumped DOM that carries `data-field`: its attributes and the text
/// up to its first child tag, with entities decoded.
#[derive(Debug)]
pub(crate) struct Element {
    attributes: Vec<(String, String)>,
    pub(crate) text: String,
}

impl Element {
    pub(crate) fn attr(&self, name: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A small scanner for Chromium's DOM serialisation (double-quoted attributes, entities
/// for `&`, `<`, `>`, `"`, no-break space); enough to read our own markup.
pub(crate) fn parse_elements(dom: &str) -> Vec<Element> {
    let mut elements = Vec::new();
    let mut rest = dom;
    while let Some(start) = rest.find('<') {
        rest = &rest[start + 1..];
        let Some(end) = rest.find('>') else { break };
        let tag = &rest[..end];
        if tag.starts_with('/') || tag.starts_with('!') || !tag.contains("data-field=") {
            continue;
        }
        let after = &rest[end + 1..];
        let text = decode(&after[..after.find('<').unwrap_or(after.len())]);
        elements.push(Element {
            attributes: attributes(tag),
            text,
        });
    }
    elements
}

fn attributes(tag: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = tag.split_once(char::is_whitespace).map_or("", |(_, r)| r);
    while let Some(eq) = rest.find("=\"") {
        let name = rest[..eq].trim().to_string();
        let value_start = &rest[eq + 2..];
        let close = value_start.find('"').unwrap_or(value_start.len());
        out.push((name, decode(&value_start[..close])));
        rest = value_start.get(close + 1..).unwrap_or("");
    }
    out
}

fn decode(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&")
}

/// A server logging at DEBUG names each request's path but never its query: the login
/// link's token must not reach whoever reads the logs.
#[tokio::test]
async fn a_debug_log_names_the_login_path_but_not_its_token() {
    let app = spawn_app(Backend::Sqlite).await;
    let log_path = std::env::temp_dir().join(format!(
        "traqlyte_it_{}_debug_log_{}.log",
        std::process::id(),
        app.key.len()
    ));
    let log = std::fs::File::create(&log_path).expect("create the log file");
    let mut server = crate::helpers::ServerProcess::start_logging(
        app.database_url(),
        &[],
        &[("RUST_LOG", "debug")],
        log,
    );
    let client = Client::builder()
        .redirect(Policy::none())
        .build()
        .expect("client");
    let minted: Value = client
        .post(format!("{}/ui/tokens", server.address))
        .bearer_auth(&app.key)
        .json(&json!({}))
        .send()
        .await
        .expect("post")
        .json()
        .await
        .expect("JSON");
    let login_path = minted["login_path"].as_str().expect("login_path");
    let token = login_path
        .split_once("token=")
        .map(|(_, token)| token.to_string())
        .expect("a token in the link");
    let login = client
        .get(format!("{}{login_path}", server.address))
        .header("sec-fetch-site", "none")
        .send()
        .await
        .expect("login");
    assert_eq!(login.status(), StatusCode::SEE_OTHER);
    server.kill();
    let text = std::fs::read_to_string(&log_path).expect("read the log");
    let _ = std::fs::remove_file(&log_path);
    assert!(
        text.contains("/ui/login"),
        "the request was not logged: {text}"
    );
    assert!(
        !text.contains(&token),
        "the token leaked into the log: {text}"
    );
    assert!(
        !text.contains(&app.key),
        "the key leaked into the log: {text}"
    );
}

/// A login link is single-use, so spending it and storing its session are one commit: when
/// the session cannot be stored (a trigger refuses it here), the link still works once the
/// store does. Before, the link was spent by its own statement and the user had to ask
/// for a new one.
async fn a_login_link_whose_session_could_not_be_stored_still_works(backend: Backend) {
    let app = spawn_app(backend).await;
    let token = app.post_json("/ui/tokens", &json!({})).await;
    assert_eq!(token.status, StatusCode::CREATED, "{}", token.body);
    let link = app.url(token.body["login_path"].as_str().expect("login_path"));
    let browser = Client::builder()
        .redirect(Policy::none())
        .build()
        .expect("client");
    let open = || browser.get(&link).header("sec-fetch-site", "none").send();
    app.refuse_inserts("ui_tokens", "NEW.kind = 'session'")
        .await;
    let failed = open().await.expect("get");
    assert_eq!(failed.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(failed.headers().get("set-cookie").is_none());
    app.allow_inserts("ui_tokens").await;
    let opened = open().await.expect("get");
    assert_eq!(opened.status(), StatusCode::SEE_OTHER);
    assert!(opened.headers().get("set-cookie").is_some());
    let again = open().await.expect("get");
    assert_eq!(again.status(), StatusCode::UNAUTHORIZED, "single use");
}

/// A page asked for without the session cookie is sent to the login form with its query
/// kept (`?version=2` was dropped); a browser that is logged in but arrived from another
/// site (whose navigation carries no `SameSite=Strict` cookie) is moved on by a page of
/// ours, a same-site request with the cookie; and the login form opened with a live
/// session goes on to the page instead of asking for the key again.
async fn a_page_opened_without_its_cookie_comes_back_to_itself_once_logged_in(backend: Backend) {
    let app = spawn_app(backend).await;
    let client = without_redirects();
    let created = create_campaign(&app).await;
    let published = app
        .post_json(&format!("/campaigns/{created}/publish"), &json!({}))
        .await;
    assert!(published.status.is_success(), "{}", published.body);
    let page = format!("/ui/campaigns/{created}?version=1");
    let anonymous = client.get(app.url(&page)).send().await.expect("get");
    assert_eq!(anonymous.status(), StatusCode::SEE_OTHER);
    let login = format!("/ui/login?next=/ui/campaigns/{created}%3Fversion%3D1");
    assert_eq!(location(&anonymous), login);
    let from_elsewhere = client
        .get(app.url(&page))
        .header("sec-fetch-site", "cross-site")
        .send()
        .await
        .expect("get");
    assert_eq!(from_elsewhere.status(), StatusCode::OK);
    let hop = from_elsewhere.text().await.expect("text");
    assert!(
        hop.contains(&format!(
            "content=\"0;url={}\"",
            login.replace('&', "&amp;")
        )),
        "{hop}"
    );
    let session = form_session(&client, &app, &app.key).await;
    let back = client
        .get(app.url(&login))
        .header("cookie", &session)
        .send()
        .await
        .expect("get");
    assert_eq!(back.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&back), page);
    let shown = client
        .get(app.url(&page))
        .header("cookie", &session)
        .send()
        .await
        .expect("get");
    assert_eq!(shown.status(), StatusCode::OK);
}

//! `GET /metrics`: after a known workload the tenant's counters hold its exact counts,
//! the text parses as the Prometheus exposition format, and only the allowed readers
//! get it (a token when one is set; a dedicated listener when one is given).
//!
//! Servers of one test process share the process-wide recorder and its budget of label
//! sets, which every other test of the binary spends; the exact counts are therefore read
//! from a `traqlyte serve` process of their own, on the series of this test's tenant.

use std::collections::HashMap;

use reqwest::StatusCode;
use serde_json::{json, Value};
use traqlyte_server::metrics::MetricsConfig;
use traqlyte_server::ServerConfig;

use crate::helpers::{checkout_event, spawn_app, spawn_app_with, Backend, ServerProcess, TestApp};
use crate::on_both_backends;

/// One tenant takes at most `TENANT_LABEL_SETS_MAX` (100) of a group's label sets: its
/// 101st contract is counted as `{tenant="<its id>",contract="other",source="other"}`, the
/// tenant still named, and another tenant's contract after it keeps its own series. Before,
/// the 1,000 sets of a group were first come, first served: one tenant registering 1,000
/// contracts turned every later series of every tenant into `other/other/other`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_tenant_takes_at_most_its_share_of_the_label_sets() {
    let mut app = spawn_app(Backend::Sqlite).await;
    let server = ServerProcess::start(app.database_url(), &[]);
    app.address = server.address.clone();
    let noisy = tenant_id(&app).await;
    let share = traqlyte_server::metrics::TENANT_LABEL_SETS_MAX;
    for n in 0..=share {
        let name = format!("spam{n}");
        let contract = json!({"name": name, "version": 1, "fields": [{"pointer": "/id"}]});
        app.register_contract(&contract).await;
        let stored = app
            .post_json(&format!("/events/{name}"), &json!({"id": n}))
            .await;
        assert_eq!(stored.status, StatusCode::OK, "{}", stored.body);
    }
    let victim_key = app.other_tenant_key().await;
    let contract = json!({"name": "checkout", "version": 1, "fields": [{"pointer": "/id"}]});
    for (path, body) in [
        ("/contracts", contract),
        ("/events/checkout", json!({"id": 1})),
    ] {
        let answer = app
            .send(
                app.client
                    .post(app.url(path))
                    .bearer_auth(&victim_key)
                    .json(&body),
            )
            .await;
        assert!(answer.status.is_success(), "{path}: {}", answer.body);
    }
    let samples = scrape_at(&app, &server.address).await;
    let inserted =
        |labels: &[(&str, &str)]| value_of(&samples, "traqlyte_events_inserted_total", labels);
    for n in 0..share {
        let contract = format!("spam{n}");
        assert_eq!(
            inserted(&[("tenant", &noisy), ("contract", &contract)]),
            1.0,
            "{contract}"
        );
    }
    let past_share = format!("spam{share}");
    assert_eq!(inserted(&[("contract", &past_share)]), 0.0);
    assert_eq!(
        inserted(&[
            ("tenant", &noisy),
            ("contract", "other"),
            ("source", "other")
        ]),
        1.0
    );
    assert_eq!(inserted(&[("contract", "checkout")]), 1.0);
    assert_eq!(
        value_of(
            &samples,
            "traqlyte_metrics_label_overflow_total",
            &[("group", "events")]
        ),
        1.0
    );
}

on_both_backends!(
    the_counters_after_a_known_workload_hold_its_counts_in_valid_exposition_format,
    a_metrics_token_is_required_when_set,
    a_dedicated_metrics_listener_serves_metrics_and_the_probes_and_the_api_listener_no_metrics,
);

/// One sample line: name, labels, value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    pub(crate) name: String,
    pub(crate) labels: HashMap<String, String>,
    pub(crate) value: f64,
}

/// Parses the text exposition format 0.0.4 strictly enough to catch a malformed line:
/// `# HELP`/`# TYPE` comments with a valid type, sample lines `name{k="v",…} value`,
/// label values with `\\`, `\"`, `\n` escapes, names of `[a-zA-Z_:][a-zA-Z0-9_:]*`, and
/// (as `promtool check metrics` demands) a `# HELP` line for every family with a type.
pub(crate) fn parse_exposition(text: &str) -> Result<Vec<Sample>, String> {
    let mut samples = Vec::new();
    let (mut typed, mut helped) = (Vec::new(), Vec::new());
    for (number, line) in text.lines().enumerate() {
        let fail = |why: &str| format!("line {}: {why}: {line:?}", number + 1);
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let words: Vec<&str> = comment.split_whitespace().collect();
            if words.first() == Some(&"TYPE") {
                let valid = ["counter", "gauge", "histogram", "summary", "untyped"];
                if words.len() != 3 || !valid.contains(&words[2]) || !is_name(words[1]) {
                    return Err(fail("bad TYPE"));
                }
                typed.push(words[1].to_string());
            }
            if words.first() == Some(&"HELP") && words.len() >= 3 {
                helped.push(words[1].to_string());
            }
            continue;
        }
        let (name_end, labels, rest) = match line.find('{') {
            Some(open) => {
                let (labels, rest) = parse_labels(&line[open + 1..]).map_err(|e| fail(&e))?;
                (open, labels, rest)
            }
            None => {
                let space = line.find(' ').ok_or_else(|| fail("no value"))?;
                (space, HashMap::new(), &line[space..])
            }
        };
        let name = &line[..name_end];
        if !is_name(name) {
            return Err(fail("bad metric name"));
        }
        let mut parts = rest.split_whitespace();
        let value = parts.next().ok_or_else(|| fail("no value"))?;
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            v => v.parse().map_err(|_| fail("bad value"))?,
        };
        if let Some(timestamp) = parts.next() {
            timestamp
                .parse::<i64>()
                .map_err(|_| fail("bad timestamp"))?;
        }
        if parts.next().is_some() {
            return Err(fail("trailing text"));
        }
        samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    if let Some(family) = typed.iter().find(|t| !helped.contains(t)) {
        return Err(format!("{family}: no help text"));
    }
    Ok(samples)
}

fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// `k="v",…}` → the labels and the text after `}`.
fn parse_labels(text: &str) -> Result<(HashMap<String, String>, &str), String> {
    let mut labels = HashMap::new();
    let mut rest = text;
    loop {
        if let Some(after) = rest.strip_prefix('}') {
            return Ok((labels, after));
        }
        let eq = rest.find('=').ok_or("label without =")?;
        let key = &rest[..eq];
        if !is_name(key) || key.contains(':') {
            return Err(format!("bad label name {key:?}"));
        }
        let mut chars = rest[eq + 1..].char_indices();
        if chars.next().map(|(_, c)| c) != Some('"') {
            return Err("label value not quoted".into());
        }
        let mut value = String::new();
        let mut end = None;
        let mut escaped = false;
        for (index, c) in chars {
            match (escaped, c) {
                (true, 'n') => (value.push('\n'), escaped = false).1,
                (true, '\\' | '"') => (value.push(c), escaped = false).1,
                (true, _) => return Err("bad escape".into()),
                (false, '\\') => escaped = true,
                (false, '"') => {
                    end = Some(eq + 1 + index + 1);
                    break;
                }
                (false, _) => value.push(c),
            }
        }
        let end = end.ok_or("unterminated label value")?;
        labels.insert(key.to_string(), value);
        rest = &rest[end..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
}

/// The scrape of `/metrics` of the server at `address` (a server process of a test's
/// own), parsed.
pub(crate) async fn scrape_at(app: &TestApp, address: &str) -> Vec<Sample> {
    let text = app
        .client
        .get(format!("{address}/metrics"))
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("text");
    parse_exposition(&text).unwrap_or_else(|e| panic!("not the exposition format: {e}\n{text}"))
}

/// The scrape of `app`'s `/metrics`, parsed.
pub(crate) async fn scrape(app: &TestApp) -> Vec<Sample> {
    let response = app
        .client
        .get(app.url("/metrics"))
        .send()
        .await
        .expect("GET /metrics");
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()["content-type"]
        .to_str()
        .expect("ascii")
        .to_string();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let text = response.text().await.expect("text");
    parse_exposition(&text).unwrap_or_else(|e| panic!("not the exposition format: {e}\n{text}"))
}

/// The value of `name` whose labels include all of `wanted`, or 0 when absent.
pub(crate) fn value_of(samples: &[Sample], name: &str, wanted: &[(&str, &str)]) -> f64 {
    let found: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            wanted
                .iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .collect();
    assert!(found.len() <= 1, "{name} {wanted:?} matches {found:?}");
    found.first().map_or(0.0, |s| s.value)
}

pub(crate) async fn tenant_id(app: &TestApp) -> String {
    app.tenant().await.as_str().to_string()
}

fn resent(order: &str) -> Value {
    let mut event = checkout_event(order);
    event["sent_at"] = json!("2026-11-29T10:05:00Z");
    event["attempt"] = json!(2);
    event
}

async fn the_counters_after_a_known_workload_hold_its_counts_in_valid_exposition_format(
    backend: Backend,
) {
    let mut app = spawn_app(backend).await;
    // Every request of this test goes to a process whose recorder holds only its series.
    let server = ServerProcess::start(app.database_url(), &[]);
    app.address = server.address.clone();
    app.register_checkout_contract().await;
    let tenant = tenant_id(&app).await;
    let first: Vec<Value> = (1..=5).map(|i| checkout_event(&format!("o{i}"))).collect();
    let answer = app
        .post_json("/events/checkout_completed/batch", &json!(first))
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let mut changed = checkout_event("o3");
    changed["note"] = json!("different content under the same identity");
    let second = json!([
        resent("o1"),
        resent("o2"),
        changed,
        {"order_id": "no merchant"},
        checkout_event("o6"),
    ]);
    let answer = app
        .post_json("/events/checkout_completed/batch", &second)
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(
        answer.item_statuses(),
        [
            "duplicate",
            "duplicate",
            "collision",
            "rejected",
            "inserted"
        ]
    );
    let single = app.post_event(&resent("o4")).await;
    assert_eq!(single.status, StatusCode::OK, "{}", single.body);
    // Segment: a refused single call and a batch whose every message is refused count
    // as rejected (nothing stored), like the valid message beside them counts inserted.
    let key = crate::segment::create_source(&app, "metrics");
    let source = crate::segment::source_row(&app, "metrics").await["id"]
        .as_str()
        .expect("id")
        .to_string();
    let refused =
        crate::segment::post_v1(&app, "/v1/track", Some(&key), &json!({"event": "E"})).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.body);
    let all_refused =
        json!({"batch": [{"type": "track", "event": "E"}, {"type": "fly", "userId": "u"}]});
    let refused = crate::segment::post_v1(&app, "/v1/batch", Some(&key), &all_refused).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.body);
    let stored = crate::segment::post_v1(
        &app,
        "/v1/track",
        Some(&key),
        &json!({"event": "E", "userId": "u"}),
    )
    .await;
    assert_eq!(stored.status, StatusCode::OK, "{}", stored.body);
    // OpenLineage: one RunEvent stored, one its rules refuse (no run id): counted
    // received and rejected, as the contract's refusals are.
    let run = crate::lineage::run_event("metrics_job", 1, &["in"], &["out"]);
    let stored = app.post_raw("/api/v1/lineage", run.to_string()).await;
    assert_eq!(stored.status, StatusCode::CREATED, "{}", stored.body);
    let mut no_run_id = crate::lineage::run_event("metrics_job", 2, &["in"], &["out"]);
    no_run_id["run"] = json!({});
    let refused = app.post_raw("/api/v1/lineage", no_run_id.to_string()).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.body);
    // Any token is a method to HTTP: made-up ones share one label instead of adding
    // series that never go away.
    for method in ["ZZONE", "ZZTWO"] {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method token");
        let answer = reqwest::Client::new()
            .request(method, app.url("/healthz"))
            .send()
            .await
            .expect("send");
        assert_eq!(answer.status(), StatusCode::METHOD_NOT_ALLOWED);
    }

    let samples = scrape(&app).await;
    let made_up = value_of(
        &samples,
        "traqlyte_http_request_duration_seconds_count",
        &[
            ("route", "/healthz"),
            ("method", "other"),
            ("status", "405"),
        ],
    );
    assert_eq!(made_up, 2.0);
    assert!(
        samples
            .iter()
            .all(|s| s.labels.get("method").is_none_or(|m| !m.starts_with("ZZ"))),
        "a made-up method became a label"
    );
    let segment = format!("segment:{source}");
    let segment_labels = [
        ("tenant", tenant.as_str()),
        ("contract", "segment.message"),
        ("source", segment.as_str()),
    ];
    let segment_count = |name: &str| value_of(&samples, name, &segment_labels);
    assert_eq!(segment_count("traqlyte_events_received_total"), 4.0);
    assert_eq!(segment_count("traqlyte_events_rejected_total"), 3.0);
    assert_eq!(segment_count("traqlyte_events_inserted_total"), 1.0);
    let lineage_labels = [
        ("tenant", tenant.as_str()),
        ("contract", "openlineage.run_event"),
        ("source", "http"),
    ];
    let lineage_count = |name: &str| value_of(&samples, name, &lineage_labels);
    assert_eq!(lineage_count("traqlyte_events_received_total"), 2.0);
    assert_eq!(lineage_count("traqlyte_events_inserted_total"), 1.0);
    assert_eq!(lineage_count("traqlyte_events_rejected_total"), 1.0);
    let labels = [
        ("tenant", tenant.as_str()),
        ("contract", "checkout_completed"),
        ("source", "http"),
    ];
    let count = |name: &str| value_of(&samples, name, &labels);
    assert_eq!(count("traqlyte_events_received_total"), 11.0);
    assert_eq!(count("traqlyte_events_inserted_total"), 6.0);
    assert_eq!(count("traqlyte_events_duplicates_total"), 3.0);
    assert_eq!(count("traqlyte_events_collisions_total"), 1.0);
    assert_eq!(count("traqlyte_events_rejected_total"), 1.0);
    // Shared with other tests of this process: at least this test's requests.
    let batches = value_of(
        &samples,
        "traqlyte_http_request_duration_seconds_count",
        &[
            ("route", "/events/{contract}/batch"),
            ("method", "POST"),
            ("status", "200"),
        ],
    );
    assert!(batches >= 2.0, "batch requests timed: {batches}");
    assert!(
        value_of(
            &samples,
            "traqlyte_batch_size_count",
            &[("kind", "http_events")]
        ) >= 2.0
    );
    // Routes are templates, never raw paths: the single event's route is counted under
    // `/events/{contract}`, and no route label holds the contract's name.
    let singles = value_of(
        &samples,
        "traqlyte_http_request_duration_seconds_count",
        &[
            ("route", "/events/{contract}"),
            ("method", "POST"),
            ("status", "200"),
        ],
    );
    assert!(singles >= 1.0, "the single event timed: {singles}");
    assert!(
        samples
            .iter()
            .all(|s| s.name != "traqlyte_http_request_duration_seconds_count"
                || !s.labels["route"].contains("checkout_completed")),
        "routes are templates, never raw paths"
    );
    let pool = match backend {
        Backend::Sqlite => "writer",
        Backend::Postgres => "pool",
    };
    assert!(
        value_of(
            &samples,
            "traqlyte_store_pool_connections_max",
            &[("pool", pool)]
        ) >= 1.0
    );
    // The process's start, which the documented collision alert reads: within the last
    // hour (this process started moments ago), in seconds since the epoch.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_secs_f64();
    let started = value_of(&samples, "process_start_time_seconds", &[]);
    assert!(
        started <= now && started > now - 3_600.0,
        "process_start_time_seconds {started}, now {now}"
    );
}

/// The alert rules docs/operations.md shows are `docs/alerts/traqlyte.rules.yml`, and
/// `promtool test rules` passes their cases (a series born at 1, steady counts, a new
/// Prometheus with no history of the target, a gap, restarts, the duplicate rate). The
/// collision rule paged every series above 0 once on a Prometheus with no history of
/// the target (a new one, a new target, a long gap in the scrapes).
#[test]
fn the_documented_alert_rules_pass_their_promtool_tests() {
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
    let rules = std::fs::read_to_string(docs.join("alerts/traqlyte.rules.yml")).expect("rules");
    let operations = std::fs::read_to_string(docs.join("operations.md")).expect("operations");
    assert!(
        operations.contains(&format!("```yaml\n{rules}```")),
        "docs/operations.md shows other rules than docs/alerts/traqlyte.rules.yml"
    );
    // scripts/services.sh installs it (Debian's prometheus package): never skipped.
    let output = std::process::Command::new("promtool")
        .args(["test", "rules", "traqlyte.rules.test.yml"])
        .current_dir(docs.join("alerts"))
        .output()
        .expect("promtool: run scripts/services.sh, which installs Debian's prometheus package");
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

async fn a_metrics_token_is_required_when_set(backend: Backend) {
    let config = ServerConfig {
        metrics: MetricsConfig {
            token: Some("metrics-s3cret".into()),
            ..MetricsConfig::default()
        },
        ..ServerConfig::default()
    };
    let app = spawn_app_with(backend, config).await;
    let bare = app
        .client
        .get(app.url("/metrics"))
        .send()
        .await
        .expect("GET");
    assert_eq!(bare.status(), StatusCode::UNAUTHORIZED);
    let wrong = app
        .client
        .get(app.url("/metrics"))
        .bearer_auth(&app.key)
        .send()
        .await
        .expect("GET");
    assert_eq!(
        wrong.status(),
        StatusCode::UNAUTHORIZED,
        "a tenant key is not the token"
    );
    let right = app
        .client
        .get(app.url("/metrics"))
        .bearer_auth("metrics-s3cret")
        .send()
        .await
        .expect("GET");
    assert_eq!(right.status(), StatusCode::OK);
    let text = right.text().await.expect("text");
    parse_exposition(&text).expect("exposition format");
}

async fn a_dedicated_metrics_listener_serves_metrics_and_the_probes_and_the_api_listener_no_metrics(
    backend: Backend,
) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let config = ServerConfig {
        metrics: MetricsConfig {
            listen: Some(format!("127.0.0.1:{port}")),
            ..MetricsConfig::default()
        },
        ..ServerConfig::default()
    };
    let app = spawn_app_with(backend, config).await;
    let on_api = app
        .client
        .get(app.url("/metrics"))
        .send()
        .await
        .expect("GET");
    assert_eq!(on_api.status(), StatusCode::NOT_FOUND);
    let dedicated = app
        .client
        .get(format!("http://127.0.0.1:{port}/metrics"))
        .send()
        .await
        .expect("GET dedicated");
    assert_eq!(dedicated.status(), StatusCode::OK);
    parse_exposition(&dedicated.text().await.expect("text")).expect("exposition format");
    let other = app
        .client
        .get(format!("http://127.0.0.1:{port}/stats"))
        .send()
        .await
        .expect("GET");
    assert_eq!(
        other.status(),
        StatusCode::NOT_FOUND,
        "only /metrics and the probes there"
    );
    // The probes, on connections of their own (a full cap on the API's listener does not
    // fail them).
    for probe in ["/livez", "/healthz"] {
        let answer = app
            .client
            .get(format!("http://127.0.0.1:{port}{probe}"))
            .send()
            .await
            .expect("GET");
        assert_eq!(answer.status(), StatusCode::OK, "{probe}");
        let body: serde_json::Value = answer.json().await.expect("JSON");
        assert_eq!(body["status"], "ok", "{probe}: {body}");
    }
}

#[test]
fn the_exposition_parser_refuses_malformed_lines() {
    assert!(parse_exposition("# HELP a A.\n# TYPE a counter\na{b=\"c\\\"d\"} 1\n").is_ok());
    assert!(
        parse_exposition("# TYPE a counter\na 1\n").is_err(),
        "no help text"
    );
    assert!(parse_exposition("a{b=\"c\"} x\n").is_err());
    assert!(parse_exposition("a{b=c} 1\n").is_err());
    assert!(parse_exposition("1a 1\n").is_err());
    assert!(parse_exposition("# TYPE a countr\n").is_err());
    assert!(parse_exposition("a{b=\"c\"\n").is_err());
}

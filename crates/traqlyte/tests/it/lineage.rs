//! OpenLineage ingestion and lineage queries against a running server, on both backends:
//! the corpus (recorded ids, duplicates, refusals, no 5xx), 1,000 concurrent copies from
//! several processes, NFC/NFD names, cycles, depth bounds, and the official Python client.

use std::path::PathBuf;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::fire_from_processes;
use crate::helpers::{spawn_app, Backend, TestApp};

crate::on_both_backends!(
    a_nan_in_a_facet_is_null_and_refuses_no_run_event,
    every_complete_corpus_run_event_ingests_then_reingests_as_a_duplicate,
    invalid_corpus_events_are_refused_naming_the_field_and_write_nothing,
    no_corpus_file_makes_the_server_panic_or_answer_5xx,
    the_same_run_event_sent_1000_times_from_4_processes_is_one_row_one_run_and_no_duplicate_edges,
    nfc_and_nfd_dataset_names_are_one_dataset,
    ancestors_and_descendants_list_each_node_once_even_with_a_cycle,
    the_marquez_graph_lists_each_node_once_with_its_edges,
    a_flat_walk_returns_up_to_the_configured_nodes_and_says_when_it_stops,
    depth_beyond_the_configured_maximum_is_refused_naming_depth,
    an_unknown_or_malformed_node_is_a_clear_error,
    the_built_in_contract_name_cannot_be_registered,
    concurrent_runs_sharing_jobs_and_datasets_all_commit_without_deadlock,
    jobs_and_datasets_are_nodes_once_a_stored_run_names_them,
    integers_beyond_2_to_the_53_in_facets_are_kept_exactly,
    run_events_have_their_own_size_and_depth_limits,
    a_runs_job_is_its_earliest_events_whatever_the_arrival_order,
    every_node_id_the_api_answers_is_accepted_back_even_with_colons_in_its_name,
);

/// Recorded event ids of the corpus's complete RunEvents (as in the identity tests).
const RECORDED: [(&str, &str); 7] = [
    (
        "001",
        "8e4ee42e129ba4223f4675f121976b732eb94aff7add29a49dde8deb1d9f30d3",
    ),
    (
        "002",
        "53c7e0dc73a6cb1712c951c13f5b43faa88150f6188e6d96df389e20e8dac331",
    ),
    (
        "005",
        "c439b1bf29b6519b3a4d98d3bc17850eec61cfbdadc9b558d2517314eef58702",
    ),
    (
        "006",
        "f718993bcb21e579fb6c0bc78f7510dcef792158ff60f1cc1a9ee94da5091756",
    ),
    (
        "007",
        "4f305e2f5ee6ad82ecdff4698738bec1118ded1a32f3e74727a345fe7ff25106",
    ),
    (
        "008",
        "5b113657dc40002e4532ebd7b750fdaa11324ea927d342b6217bad451b0b14e9",
    ),
    (
        "009",
        "c74806733b8c2e18f25eabf739bb64a582bdd1d0a4e90a444fdf06a528abeeda",
    ),
];

/// The repository's root.
pub fn repository_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The OpenLineage corpus: `$TRAQLYTE_OPENLINEAGE_CORPUS`, else the copy vendored in
/// `testdata/openlineage`. Missing is a failure, never a skip.
fn corpus_files() -> Vec<PathBuf> {
    let dir = std::env::var_os("TRAQLYTE_OPENLINEAGE_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repository_root().join("testdata/openlineage"))
        .join("events");
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("the OpenLineage corpus must be at {}: {err}", dir.display()));
    let mut files: Vec<PathBuf> = entries.map(|e| e.expect("dir entry").path()).collect();
    files.sort();
    assert_eq!(files.len(), 83, "the corpus holds 83 events");
    files
}

fn corpus_body(prefix: &str) -> String {
    let path = corpus_files()
        .into_iter()
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
        .unwrap_or_else(|| panic!("no corpus file {prefix}"));
    std::fs::read_to_string(path).expect("read corpus file")
}

impl TestApp {
    async fn post_lineage(&self, body: impl Into<reqwest::Body>) -> crate::helpers::Answer {
        self.post_raw("/api/v1/lineage", body).await
    }

    async fn stored_run_events(&self) -> (i64, i64, i64) {
        let answer = self.get("/stats").await;
        let row = &answer.body["contracts"]["openlineage.run_event"];
        let n = |k: &str| row[k].as_i64().unwrap_or(0);
        (n("stored"), n("duplicates"), n("collisions"))
    }

    async fn graph_counts(&self) -> (i64, i64, i64) {
        let answer = self.get("/lineage/stats").await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        let n = |k: &str| answer.body[k].as_i64().unwrap_or(-1);
        (n("runs"), n("datasets"), n("edges"))
    }

    async fn walk(&self, way: &str, node: &str, depth: u32) -> Vec<(String, i64)> {
        let path = format!("/lineage/{way}?node={}&depth={depth}", encode(node));
        let answer = self.get(&path).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        answer.body["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .map(|n| {
                (
                    n["id"].as_str().unwrap_or("?").to_string(),
                    n["depth"].as_i64().unwrap_or(-1),
                )
            })
            .collect()
    }
}

fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A minimal valid RunEvent of job `ns:{job}` reading and writing datasets of `db`.
pub fn run_event(job: &str, run: u32, inputs: &[&str], outputs: &[&str]) -> Value {
    let datasets = |names: &[&str]| -> Vec<Value> {
        names
            .iter()
            .map(|n| json!({"namespace": "db", "name": n}))
            .collect()
    };
    json!({
        "eventType": "COMPLETE", "eventTime": "2026-11-29T03:00:00Z",
        "producer": "https://example.com/test", "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
        "run": {"runId": format!("00000000-0000-4000-8000-{run:012}")},
        "job": {"namespace": "ns", "name": job},
        "inputs": datasets(inputs), "outputs": datasets(outputs)
    })
}

async fn every_complete_corpus_run_event_ingests_then_reingests_as_a_duplicate(backend: Backend) {
    let app = spawn_app(backend).await;
    for (prefix, event_id) in RECORDED {
        for status in ["inserted", "duplicate"] {
            let answer = app.post_lineage(corpus_body(prefix)).await;
            assert_eq!(
                answer.status,
                StatusCode::CREATED,
                "{prefix}: {}",
                answer.body
            );
            assert_eq!(answer.body["status"], status, "{prefix}");
            assert_eq!(answer.body["event_id"], event_id, "{prefix}");
        }
        let stored = app
            .get(&format!("/events/openlineage.run_event/{event_id}"))
            .await;
        assert_eq!(stored.status, StatusCode::OK, "{prefix}: {}", stored.body);
    }
    for prefix in ["003", "004"] {
        let answer = app.post_lineage(corpus_body(prefix)).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{prefix}");
        assert_eq!(answer.code(), "unsupported_event_kind", "{prefix}");
    }
    assert_eq!(app.stored_run_events().await, (7, 7, 0));
}

async fn invalid_corpus_events_are_refused_naming_the_field_and_write_nothing(backend: Backend) {
    let app = spawn_app(backend).await;
    let answer = app.post_lineage(corpus_body("078")).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.body);
    assert_eq!(answer.body["error"]["field"], "run.runId");
    // Nothing counted under any contract (a missing row reads as zeros above, so the
    // whole answer is checked too).
    assert_eq!(app.stored_run_events().await, (0, 0, 0));
    assert_eq!(app.get("/stats").await.body["contracts"], json!({}));
    assert_eq!(app.graph_counts().await, (0, 0, 0));
    // Only an invalid facet: facets are content, not checked against their schemas.
    for prefix in ["079", "081", "082"] {
        let answer = app.post_lineage(corpus_body(prefix)).await;
        assert_eq!(
            answer.status,
            StatusCode::CREATED,
            "{prefix}: {}",
            answer.body
        );
    }
    // 080 is 079's run with other (observation) facets: a collision, logged. Its
    // message advises what this contract allows (it advised a supersession, `422` for
    // run events, and a new version of the reserved contract).
    let answer = app.post_lineage(corpus_body("080")).await;
    assert_eq!(
        (answer.status, answer.code()),
        (StatusCode::CONFLICT, "collision")
    );
    let message = answer.body["error"]["message"].as_str().unwrap_or("");
    assert!(
        message.contains("GET /contracts/openlineage.run_event/collisions")
            && !message.contains("POST /events/")
            && !message.contains("register a new contract version"),
        "{message}"
    );
    let log = app.get("/contracts/openlineage.run_event/collisions").await;
    assert_eq!(log.status, StatusCode::OK, "{}", log.body);
    assert_eq!(log.body["collisions"].as_array().map(Vec::len), Some(1));
    // 079 again with its parent facet's `_producer` changed (outside the fingerprint, at
    // any depth) and a field added to the facet: the diff marks the first transport.
    let mut other: Value = serde_json::from_str(&corpus_body("079")).expect("JSON");
    other["run"]["facets"]["parent"]["_producer"] = json!("https://example.com/other");
    other["run"]["facets"]["parent"]["note"] = json!("content");
    let answer = app.post_lineage(other.to_string()).await;
    assert_eq!(answer.status, StatusCode::CONFLICT, "{}", answer.body);
    let newest = app.get("/ops/collisions?limit=1").await.body;
    let marks: Vec<(String, bool)> = newest["collisions"][0]["diff"]
        .as_array()
        .expect("diff")
        .iter()
        .map(|c| {
            let path = c["path"].as_str().unwrap_or("").to_string();
            (path, c["transport"].as_bool().unwrap_or(false))
        })
        .collect();
    assert_eq!(
        marks,
        [
            ("/run/facets/parent/_producer".to_string(), true),
            ("/run/facets/parent/note".to_string(), false)
        ],
        "{newest}"
    );
    let shown = app.get("/contracts/openlineage.run_event").await;
    assert_eq!(shown.body["name"], "openlineage.run_event");
}

async fn no_corpus_file_makes_the_server_panic_or_answer_5xx(backend: Backend) {
    let app = spawn_app(backend).await;
    for path in corpus_files() {
        let body = std::fs::read_to_string(&path).expect("read");
        let answer = app.post_lineage(body).await;
        assert!(
            answer.status.as_u16() < 500,
            "{}: {} {}",
            path.display(),
            answer.status,
            answer.body
        );
    }
    assert_eq!(app.get("/healthz").await.status, StatusCode::OK);
}

async fn the_same_run_event_sent_1000_times_from_4_processes_is_one_row_one_run_and_no_duplicate_edges(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    let event = run_event("copy", 1, &["a", "b"], &["c"]);
    let reports =
        fire_from_processes(&[app.url("/api/v1/lineage")], &app.key, &event, 4, 250, &[]).await;
    let created: u64 = reports
        .iter()
        .map(|r| r["statuses"]["201"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(created, 1000, "every request is acknowledged: {reports:?}");
    assert_eq!(app.stored_run_events().await, (1, 999, 0));
    assert_eq!(app.graph_counts().await, (1, 3, 3));
}

async fn nfc_and_nfd_dataset_names_are_one_dataset(backend: Backend) {
    let app = spawn_app(backend).await;
    let nfc = run_event("writer", 1, &[], &["caf\u{e9}"]);
    let nfd = run_event("reader", 2, &["cafe\u{301}"], &[]);
    for event in [&nfc, &nfd] {
        let answer = app.post_lineage(event.to_string()).await;
        assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    }
    assert_eq!(app.graph_counts().await, (2, 1, 2));
    let upstream = app.walk("ancestors", "job:ns:reader", 5).await;
    let ids: Vec<&str> = upstream.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["dataset:db:caf\u{e9}", "job:ns:writer"]);
    let by_nfd = app.walk("descendants", "dataset:db:cafe\u{301}", 5).await;
    assert_eq!(by_nfd.len(), 1, "{by_nfd:?}");
}

/// Jobs and datasets have no rows of their own (migration `0021`): a job is a node once a
/// run of it is stored, a dataset once a run read or wrote it, and a run belongs to the
/// job of its first stored event.
async fn jobs_and_datasets_are_nodes_once_a_stored_run_names_them(backend: Backend) {
    let app = spawn_app(backend).await;
    assert_eq!(app.graph_counts().await, (0, 0, 0));
    let descendants = |node: &str| format!("/lineage/descendants?node={node}");
    for node in [
        "job:ns:writer",
        "dataset:db:read_only",
        "dataset:db:written",
    ] {
        assert_eq!(
            app.get(&descendants(node)).await.status,
            StatusCode::NOT_FOUND
        );
    }
    let mut impostor = run_event("impostor", 1, &[], &["also_written"]);
    impostor["eventTime"] = json!("2026-11-29T03:05:00Z");
    let events = [
        run_event("writer", 1, &["read_only"], &["written"]),
        // A later event of run 1 naming another job: the run stays the writer's.
        impostor,
    ];
    for event in events {
        let answer = app.post_lineage(event.to_string()).await;
        assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    }
    assert_eq!(app.graph_counts().await, (1, 3, 3));
    let read_only = app.walk("descendants", "dataset:db:read_only", 5).await;
    let ids: Vec<&str> = read_only.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "job:ns:writer",
            "dataset:db:also_written",
            "dataset:db:written"
        ]
    );
    let upstream = app.walk("ancestors", "dataset:db:also_written", 5).await;
    let ids: Vec<&str> = upstream.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["job:ns:writer", "dataset:db:read_only"]);
    let impostor = app.get(&descendants("job:ns:impostor")).await;
    assert_eq!(
        (impostor.status, impostor.code()),
        (StatusCode::NOT_FOUND, "node_not_found")
    );
}

/// A run's job is the one its earliest event (by `eventTime`, then id) names, whatever
/// order its events arrive in: it was the first stored event's, so a COMPLETE delivered
/// before its START (a broker, a client's queue) gave the run, and its edges, another job
/// (Spark names jobs after outputs its START may not know yet).
async fn a_runs_job_is_its_earliest_events_whatever_the_arrival_order(backend: Backend) {
    let app = spawn_app(backend).await;
    let mut start = run_event("early_namer", 3, &["src"], &[]);
    start["eventType"] = json!("START");
    start["eventTime"] = json!("2026-11-29T03:00:00Z");
    let mut complete = run_event("early_namer.tgt", 3, &["src"], &["tgt"]);
    complete["eventTime"] = json!("2026-11-29T03:05:00Z");
    // COMPLETE first, in another request, then its START.
    for event in [complete, start] {
        let answer = app.post_lineage(event.to_string()).await;
        assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    }
    let downstream = app.walk("descendants", "dataset:db:src", 5).await;
    let ids: Vec<&str> = downstream.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["job:ns:early_namer", "dataset:db:tgt"]);
    let other = app
        .get("/lineage/descendants?node=job:ns:early_namer.tgt")
        .await;
    assert_eq!(
        (other.status, other.code()),
        (StatusCode::NOT_FOUND, "node_not_found"),
        "{}",
        other.body
    );
}

/// openlineage-python writes a facet's `float('nan')` (a data-quality facet's minimum of
/// an empty column) as `NaN`, which no JSON parser takes: the run event was a `400`,
/// which the client does not retry (lineage lost). It is read as `null`, as
/// `JSON.stringify` writes it; its resend is a duplicate.
async fn a_nan_in_a_facet_is_null_and_refuses_no_run_event(backend: Backend) {
    let app = spawn_app(backend).await;
    let mut event = run_event("dq_job", 7, &["raw"], &["clean"]);
    event["inputs"][0]["inputFacets"] = json!({"dataQualityMetrics": {
        "_producer": "https://github.com/OpenLineage/OpenLineage/tree/1.54.0/client/python",
        "_schemaURL": "https://openlineage.io/spec/facets/1-0-2/DataQualityMetricsInputDatasetFacet.json",
        "rowCount": 0,
        "columnMetrics": {"amount": {"nullCount": 0, "min": "MIN", "max": "MAX"}}}});
    let text = event
        .to_string()
        .replace("\"MIN\"", "NaN")
        .replace("\"MAX\"", "-Infinity");
    assert!(text.contains(":NaN"), "{text}");
    for expected in [(1, 0, 0), (1, 1, 0)] {
        let answer = app.post_lineage(text.clone()).await;
        assert!(answer.status.is_success(), "{}", answer.body);
        assert_eq!(app.stored_run_events().await, expected);
    }
    assert_eq!(app.graph_counts().await, (1, 2, 2));
}

/// j1: A → B, j2: B → A (a cycle), j3: A, B → C.
async fn cyclic_graph(app: &TestApp) {
    let events = [
        run_event("j1", 1, &["A"], &["B"]),
        run_event("j2", 2, &["B"], &["A"]),
        run_event("j3", 3, &["A", "B"], &["C"]),
    ];
    for event in events {
        let answer = app.post_lineage(event.to_string()).await;
        assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    }
}

async fn ancestors_and_descendants_list_each_node_once_even_with_a_cycle(backend: Backend) {
    let app = spawn_app(backend).await;
    cyclic_graph(&app).await;
    let up = app.walk("ancestors", "dataset:db:C", 20).await;
    let expected: Vec<(String, i64)> = [
        ("job:ns:j3", 1),
        ("dataset:db:A", 2),
        ("dataset:db:B", 2),
        // A level by namespace and name, whichever node of the level before found it.
        ("job:ns:j1", 3),
        ("job:ns:j2", 3),
    ]
    .iter()
    .map(|(id, d)| (id.to_string(), *d))
    .collect();
    assert_eq!(up, expected);
    let down = app.walk("descendants", "dataset:db:A", 20).await;
    let ids: Vec<&str> = down.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "job:ns:j1",
            "job:ns:j3",
            "dataset:db:B",
            "dataset:db:C",
            "job:ns:j2"
        ]
    );
    assert_eq!(app.walk("ancestors", "dataset:db:C", 1).await.len(), 1);
    assert!(app.walk("ancestors", "dataset:db:C", 0).await.is_empty());
}

/// `--lineage-nodes-max` is what a flat list holds at most (the start node, which it
/// leaves out, does not count), cut in the list's own order.
async fn a_flat_walk_returns_up_to_the_configured_nodes_and_says_when_it_stops(backend: Backend) {
    let config = traqlyte_server::ServerConfig {
        lineage_nodes_max: 3,
        ..traqlyte_server::ServerConfig::default()
    };
    let app = crate::helpers::spawn_app_with(backend, config).await;
    cyclic_graph(&app).await;
    let descendants = |node: &str| format!("/lineage/descendants?node={node}&depth=20");
    // C has three ancestors at depth 2: j3, A and B.
    let answer = app
        .get("/lineage/ancestors?node=dataset:db:C&depth=2")
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.body["nodes"].as_array().map(Vec::len), Some(3));
    assert_eq!(answer.body["truncated"], false, "{}", answer.body);
    // A has five descendants: the first three by distance, then namespace and name.
    let answer = app.get(&descendants("dataset:db:A")).await;
    let ids: Vec<&str> = answer.body["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["id"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(ids, ["job:ns:j1", "job:ns:j3", "dataset:db:B"]);
    assert_eq!(answer.body["truncated"], true, "{}", answer.body);
    // The Marquez-compatible graph says so too, and only when it is partial.
    let whole = app.get("/api/v1/lineage?nodeId=dataset:db:C&depth=1").await;
    assert_eq!(whole.status, StatusCode::OK, "{}", whole.body);
    assert!(whole.body.get("truncated").is_none(), "{}", whole.body);
    let partial = app
        .get("/api/v1/lineage?nodeId=dataset:db:A&depth=20")
        .await;
    assert_eq!(partial.body["graph"].as_array().map(Vec::len), Some(3));
    assert_eq!(partial.body["truncated"], true, "{}", partial.body);
}

async fn the_marquez_graph_lists_each_node_once_with_its_edges(backend: Backend) {
    let app = spawn_app(backend).await;
    cyclic_graph(&app).await;
    let answer = app.get("/api/v1/lineage?nodeId=dataset:db:C&depth=2").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let graph = answer.body["graph"].as_array().expect("graph");
    let ids: Vec<&str> = graph
        .iter()
        .map(|n| n["id"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        ids,
        ["dataset:db:C", "job:ns:j3", "dataset:db:A", "dataset:db:B"]
    );
    assert_eq!(graph[0]["type"], "DATASET");
    assert_eq!(graph[0]["data"]["name"], "C");
    assert_eq!(
        graph[0]["inEdges"],
        json!([{"origin": "job:ns:j3", "destination": "dataset:db:C"}])
    );
    assert_eq!(graph[1]["type"], "JOB");
    assert_eq!(graph[1]["inEdges"].as_array().map(Vec::len), Some(2));
    assert_eq!(graph[1]["outEdges"].as_array().map(Vec::len), Some(1));
    let whole = app.get("/api/v1/lineage?nodeId=job:ns:j1").await;
    assert_eq!(whole.body["graph"].as_array().map(Vec::len), Some(6));
}

async fn depth_beyond_the_configured_maximum_is_refused_naming_depth(backend: Backend) {
    let app = spawn_app(backend).await;
    cyclic_graph(&app).await;
    for depth in ["101", "-1", "deep"] {
        let answer = app
            .get(&format!(
                "/lineage/ancestors?node=dataset:db:C&depth={depth}"
            ))
            .await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{depth}");
        assert_eq!(answer.body["error"]["field"], "depth");
    }
}

/// Dataset names with colons of their own (a Hive partition's path, a legacy BigQuery
/// table, a Windows path) beside namespaces with theirs: the ids the API answers for
/// them answered `404 node_not_found` when sent back (split at their last colon), so a
/// client following the graph's ids stopped midway. Each id answered is accepted back,
/// on the flat walks and on the Marquez-shaped graph; an id that names nothing is still
/// a `404`.
async fn every_node_id_the_api_answers_is_accepted_back_even_with_colons_in_its_name(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    let mut event = run_event("writer", 1, &[], &[]);
    event["job"] = json!({"namespace": "airflow:prod", "name": "etl:daily"});
    event["outputs"] = json!([
        {"namespace": "hdfs://nn:8020", "name": "/warehouse/t/ts=2021-01-01 00:00:00"},
        {"namespace": "bigquery", "name": "proj:ds.tbl"},
        {"namespace": "file", "name": "C:/data/x.csv"},
        {"namespace": "postgres://db:5432", "name": "public.orders"},
    ]);
    let answer = app.post_lineage(event.to_string()).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    let job = "job:airflow:prod:etl:daily";
    let outputs = app.walk("descendants", job, 1).await;
    let ids: Vec<&str> = outputs.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "dataset:bigquery:proj:ds.tbl",
            "dataset:file:C:/data/x.csv",
            "dataset:hdfs://nn:8020:/warehouse/t/ts=2021-01-01 00:00:00",
            "dataset:postgres://db:5432:public.orders",
        ]
    );
    for id in ids {
        let upstream = app.walk("ancestors", id, 1).await;
        assert_eq!(upstream, [(job.to_string(), 1)], "{id}");
        let graph = app
            .get(&format!("/api/v1/lineage?nodeId={}&depth=1", encode(id)))
            .await;
        assert_eq!(graph.status, StatusCode::OK, "{id}: {}", graph.body);
        assert_eq!(
            graph.body["graph"].as_array().map(Vec::len),
            Some(2),
            "{id}"
        );
    }
    let unknown = app
        .get(&format!(
            "/lineage/ancestors?node={}",
            encode("dataset:bigquery:proj:ds.other")
        ))
        .await;
    assert_eq!(
        (unknown.status, unknown.code()),
        (StatusCode::NOT_FOUND, "node_not_found")
    );
}

async fn an_unknown_or_malformed_node_is_a_clear_error(backend: Backend) {
    let app = spawn_app(backend).await;
    cyclic_graph(&app).await;
    let unknown = app.get("/lineage/ancestors?node=dataset:db:nope").await;
    assert_eq!(
        (unknown.status, unknown.code()),
        (StatusCode::NOT_FOUND, "node_not_found")
    );
    assert_eq!(unknown.body["error"]["field"], "node");
    // The Marquez-compatible route names its own parameter.
    let unknown = app.get("/api/v1/lineage?nodeId=dataset:db:nope").await;
    assert_eq!(
        (
            unknown.status,
            unknown.code(),
            &unknown.body["error"]["field"]
        ),
        (
            StatusCode::NOT_FOUND,
            "node_not_found",
            &serde_json::json!("nodeId")
        )
    );
    for path in [
        "/lineage/ancestors?node=table:db:C",
        "/lineage/descendants",
        "/api/v1/lineage?nodeId=dataset:C",
    ] {
        let answer = app.get(path).await;
        assert_eq!(
            answer.status,
            StatusCode::BAD_REQUEST,
            "{path}: {}",
            answer.body
        );
        assert!(answer.body["error"]["field"].is_string(), "{path}");
    }
    // The spec allows an empty job name: such a node is stored, listed, and its id is
    // accepted back.
    let unnamed = run_event("", 77, &["E"], &[]);
    let stored = app.post_lineage(unnamed.to_string()).await;
    assert_eq!(stored.status, StatusCode::CREATED, "{}", stored.body);
    let listed = app.walk("descendants", "dataset:db:E", 1).await;
    assert!(listed.iter().any(|(id, _)| id == "job:ns:"), "{listed:?}");
    assert_eq!(
        app.walk("ancestors", "job:ns:", 1).await,
        vec![("dataset:db:E".to_string(), 1)]
    );
}

mod cli {
    use std::process::Command;

    fn traqlyte(args: &[&str]) -> String {
        let output = Command::new(env!("CARGO_BIN_EXE_traqlyte"))
            .args(args)
            .env_remove("TRAQLYTE_API_KEY")
            .env_remove("TRAQLYTE_DATABASE_URL")
            .current_dir(std::env::temp_dir())
            .output()
            .expect("run traqlyte");
        assert!(output.status.success(), "{args:?}: {output:?}");
        String::from_utf8(output.stdout).expect("UTF-8")
    }

    #[test]
    fn the_built_in_contract_prints_without_a_key_or_a_database() {
        let text = traqlyte(&["contracts", "show", "openlineage.run_event"]);
        assert!(
            text.starts_with("contract openlineage.run_event version 1\n"),
            "{text}"
        );
        for needle in [
            "/runId",
            "/inputs",
            "array as a set",
            "/parameters",
            "/eventTime, /producer, /schemaURL",
        ] {
            assert!(text.contains(needle), "{needle} in {text}");
        }
    }

    #[test]
    fn the_run_id_command_prints_the_recorded_uuid_of_a_slot() {
        let args = [
            "run-id",
            "--job",
            "my-namespace:my.job",
            "--slot",
            "2026-11-29",
        ];
        assert_eq!(traqlyte(&args), "cd5f837e-4718-5b1e-acc9-a02c1a4460a4\n");
        let next_day = [
            "run-id",
            "--job",
            "my-namespace:my.job",
            "--slot",
            "2026-11-30",
        ];
        assert_ne!(traqlyte(&next_day), traqlyte(&args));
    }
}

async fn the_built_in_contract_name_cannot_be_registered(backend: Backend) {
    let app = spawn_app(backend).await;
    let contract =
        json!({"name": "openlineage.run_event", "version": 2, "fields": [{"pointer": "/x"}]});
    let answer = app.post_json("/contracts", &contract).await;
    assert_eq!(
        answer.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        answer.body
    );
    assert_eq!(answer.body["error"]["field"], "name");
}

/// 200 distinct runs of 4 jobs over 6 shared datasets, listed in varying orders, 32 in
/// flight: graph rows are written in one sorted order, so no transaction deadlocks.
async fn concurrent_runs_sharing_jobs_and_datasets_all_commit_without_deadlock(backend: Backend) {
    let app = spawn_app(backend).await;
    let names = ["a", "b", "c", "d", "e", "f"];
    let bodies: Vec<String> = (0..200u32)
        .map(|i| {
            let k = i as usize;
            let inputs = [names[k % 6], names[(k + 3) % 6]];
            let outputs = [names[(k + 5) % 6], names[(k + 1) % 6]];
            run_event(&format!("job{}", k % 4), 1000 + i, &inputs, &outputs).to_string()
        })
        .collect();
    let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(32));
    let mut tasks = Vec::new();
    for body in bodies {
        let permit = permits.clone().acquire_owned().await.expect("permit");
        let request = app
            .client
            .post(app.url("/api/v1/lineage"))
            .bearer_auth(&app.key)
            .body(body);
        tasks.push(tokio::spawn(async move {
            let status = request.send().await.map(|r| r.status());
            drop(permit);
            status
        }));
    }
    for task in tasks {
        let status = task.await.expect("task").expect("request");
        assert_eq!(status, StatusCode::CREATED);
    }
    assert_eq!(app.stored_run_events().await, (200, 0, 0));
    assert_eq!(app.graph_counts().await, (200, 6, 800));
}

/// PostgreSQL only: a walk's statements carry the request timeout of `serve`; a trigger
/// can sleep, so a request outlives its timeout.
mod postgres_only {
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_walk_longer_than_the_request_timeout_is_stopped_in_the_database() {
        super::a_walk_longer_than_the_request_timeout_is_stopped_in_the_database().await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_run_event_the_server_timed_out_is_a_503_the_clients_retry() {
        super::a_run_event_the_server_timed_out_is_a_503_the_clients_retry().await
    }
}

/// OpenLineage's clients retry a 5xx only (openlineage-python: 500, 502, 503, 504), so a
/// run event that outlived the server's request timeout is `503` with `Retry-After`, as
/// a tracking request is, not `408`: with group commit off its transaction was rolled
/// back and the client, told `408`, never sent it again (lost). Its resend is stored
/// once, with group commit on or off.
async fn a_run_event_the_server_timed_out_is_a_503_the_clients_retry() {
    for group_commit in [
        traqlyte_server::GroupCommitConfig::disabled(),
        traqlyte_server::GroupCommitConfig::default(),
    ] {
        let config = traqlyte_server::ServerConfig {
            request_timeout_ms: 300,
            group_commit,
            ..Default::default()
        };
        let app = crate::helpers::spawn_app_with(Backend::Postgres, config).await;
        app.slow_event_inserts().await;
        let event = run_event("slow_job", 1, &["in"], &["out"]).to_string();
        let response = app
            .client
            .post(app.url("/api/v1/lineage"))
            .bearer_auth(&app.key)
            .header("content-type", "application/json")
            .body(event.clone())
            .send()
            .await
            .expect("POST");
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()["retry-after"], "1");
        let answer: serde_json::Value = response.json().await.expect("JSON");
        assert_eq!(answer["error"]["code"], "request_timeout", "{answer}");
        app.end_slow_event_inserts().await;
        // With group commit on, the timed out request's batch may still commit: then the
        // resend is its duplicate. Either way the run event is stored once.
        tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
        // The resend must fit in 300 ms too: on a loaded machine it may not, and is
        // retried as the client would (503).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut resent = app.post_lineage(event.clone()).await;
        while resent.status == StatusCode::SERVICE_UNAVAILABLE
            && std::time::Instant::now() < deadline
        {
            resent = app.post_lineage(event.clone()).await;
        }
        assert!(resent.status.is_success(), "{}", resent.body);
        let (stored, _, collisions) = app.stored_run_events().await;
        assert_eq!((stored, collisions), (1, 0));
    }
}

/// A walk whose level query cannot finish (here it waits on a lock another session holds)
/// is answered `408 request_timeout` and, the point, stopped inside PostgreSQL too: no
/// statement of it runs on once the client has its answer (before, the request timeout
/// answered the client while the query ran on, holding a connection).
async fn a_walk_longer_than_the_request_timeout_is_stopped_in_the_database() {
    use sqlx::Connection;
    let app = spawn_app(Backend::Postgres).await;
    let stored = app
        .post_lineage(run_event("job", 1, &["in"], &["out"]).to_string())
        .await;
    assert_eq!(stored.status, StatusCode::CREATED, "{}", stored.body);
    let server =
        crate::helpers::ServerProcess::start(app.database_url(), &["--request-timeout-ms", "1000"]);
    let mut holder = sqlx::PgConnection::connect(app.database_url())
        .await
        .expect("connect");
    let mut lock = holder.begin().await.expect("begin");
    sqlx::query("LOCK TABLE lineage_run_inputs IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .expect("lock");
    let answer = app
        .send(
            app.client
                .get(format!(
                    "{}/lineage/ancestors?node=job:ns:job",
                    server.address
                ))
                .bearer_auth(&app.key),
        )
        .await;
    assert_eq!(
        answer.status,
        StatusCode::REQUEST_TIMEOUT,
        "{}",
        answer.body
    );
    assert_eq!(answer.code(), "request_timeout");
    // Within a few seconds no statement but the lock holder's touches the table.
    let mut waiting = i64::MAX;
    for _ in 0..50 {
        let mut probe = sqlx::PgConnection::connect(app.database_url())
            .await
            .expect("connect");
        waiting = sqlx::query_scalar(
            "SELECT COUNT(*) FROM pg_stat_activity
             WHERE datname = current_database() AND state = 'active'
               AND query LIKE '%lineage_run_inputs%' AND query NOT LIKE '%pg_stat_activity%'",
        )
        .fetch_one(&mut probe)
        .await
        .expect("activity");
        if waiting == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(waiting, 0, "the walk's query still runs in PostgreSQL");
    lock.rollback().await.expect("release");
}

/// Spark's Iceberg facets carry the snapshot id, a random 63-bit number, as a JSON
/// number (and Airflow's run facets whatever a DAG run's `conf` holds): such an integer
/// is data, not identity, so the RunEvent is taken and the number kept exactly. A number
/// no 64-bit integer or double holds is still refused.
async fn integers_beyond_2_to_the_53_in_facets_are_kept_exactly(backend: Backend) {
    let app = spawn_app(backend).await;
    let mut event = run_event("iceberg_write", 53, &["raw.orders"], &["mart.orders"]);
    event["outputs"][0]["outputFacets"] = json!({"icebergCommitReport": {
        "_producer": "https://github.com/OpenLineage/OpenLineage/tree/1.40.0/integration/spark",
        "_schemaURL": "https://openlineage.io/spec/facets/1-0-0/IcebergCommitReportOutputDatasetFacet.json",
        "snapshotId": 8_744_736_658_442_914_487_u64, "sequenceNumber": 3,
        "metrics": {"addedFilesSizeInBytes": 18_446_744_073_709_551_615_u64, "negative": -9_223_372_036_854_775_808_i64}}});
    let body = event.to_string();
    assert!(body.contains("8744736658442914487"), "{body}");
    let mut event_id = String::new();
    for status in ["inserted", "duplicate"] {
        let answer = app.post_lineage(body.clone()).await;
        assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
        assert_eq!(answer.body["status"], status);
        event_id = answer.body["event_id"]
            .as_str()
            .expect("event_id")
            .to_string();
    }
    let stored = app
        .get(&format!("/events/openlineage.run_event/{event_id}"))
        .await;
    assert_eq!(stored.status, StatusCode::OK, "{}", stored.body);
    let report = &stored.body["payload"]["outputs"][0]["outputFacets"]["icebergCommitReport"];
    assert_eq!(report["snapshotId"], json!(8_744_736_658_442_914_487_u64));
    assert_eq!(report["metrics"]["addedFilesSizeInBytes"], json!(u64::MAX));
    assert_eq!(report["metrics"]["negative"], json!(i64::MIN));
    for (literal, code) in [
        ("18446744073709551616", "number_out_of_range"),
        ("1.0000000000000000000001", "number_out_of_range"),
        ("1e400", "number_out_of_range"),
    ] {
        let refused = body.replace("8744736658442914487", literal);
        let answer = app.post_lineage(refused).await;
        assert_eq!(
            answer.status,
            StatusCode::BAD_REQUEST,
            "{literal}: {}",
            answer.body
        );
        assert_eq!(answer.code(), code, "{literal}");
    }
    assert_eq!(app.stored_run_events().await, (1, 1, 0));
}

/// Schema and column-lineage facets of wide tables (Spark) and the task facets of large
/// Airflow DAGs make RunEvents larger than the 1 MiB of a native event, and nested
/// record schemas (Flink's Avro and Iceberg schemas) nest deeper than 32 levels: the
/// lineage route has limits of its own (8 MiB, 64 levels by default), and refuses beyond
/// them as clearly as before.
async fn run_events_have_their_own_size_and_depth_limits(backend: Backend) {
    let app = spawn_app(backend).await;
    // A 1,000-column table, each column with a long description: over 2 MiB.
    let fields: Vec<Value> = (0..1_000)
        .map(|i| json!({"name": format!("column_{i}"), "type": "string", "description": "d".repeat(2_100)}))
        .collect();
    let mut wide = run_event("wide_write", 54, &[], &["mart.wide"]);
    wide["outputs"][0]["facets"] = json!({"schema": {
        "_producer": "https://example.com/spark", "_schemaURL": "https://openlineage.io/spec/facets/1-1-1/SchemaDatasetFacet.json",
        "fields": fields}});
    let body = wide.to_string();
    assert!(body.len() > 2 * 1024 * 1024, "{}", body.len());
    let answer = app.post_lineage(body).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    // A record nested 25 levels deep: about 55 levels of JSON.
    let mut nested = json!({"name": "leaf", "type": "string"});
    for level in 0..25 {
        nested = json!({"name": format!("level_{level}"), "type": "struct", "fields": [nested]});
    }
    let mut deep = run_event("deep_write", 55, &[], &["mart.deep"]);
    deep["outputs"][0]["facets"] = json!({"schema": {"fields": [nested]}});
    let answer = app.post_lineage(deep.to_string()).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    assert_eq!(app.stored_run_events().await, (2, 0, 0));
    // Beyond the route's limits: refused, nothing stored.
    let mut deeper = json!("leaf");
    for _ in 0..70 {
        deeper = json!([deeper]);
    }
    let mut too_deep = run_event("deeper_write", 56, &[], &[]);
    too_deep["run"]["facets"] = json!({"custom": {"nested": deeper}});
    let answer = app.post_lineage(too_deep.to_string()).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.body);
    assert_eq!(answer.code(), "too_deep");
    // Named where it is: the container 64 levels below the document (run, facets,
    // custom, nested, then 60 arrays down).
    let field = answer.body["error"]["field"].as_str().unwrap_or("");
    assert_eq!(
        field,
        format!("/run/facets/custom/nested{}", "/0".repeat(60)),
        "{}",
        answer.body
    );
    let mut huge = run_event("huge_write", 57, &[], &[]);
    huge["run"]["facets"] = json!({"custom": {"blob": "x".repeat(9 * 1024 * 1024)}});
    let answer = app.post_lineage(huge.to_string()).await;
    assert_eq!(
        answer.status,
        StatusCode::PAYLOAD_TOO_LARGE,
        "{}",
        answer.body
    );
    assert_eq!(app.stored_run_events().await, (2, 0, 0));
}

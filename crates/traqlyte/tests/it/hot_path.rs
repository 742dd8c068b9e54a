//! The hot path of experiments (issue 11): `POST /outcomes/batch` written set-based must
//! answer every item exactly as the same single requests sent in turn would, and
//! concurrent batches naming the same outcomes must store each once.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::experiments::assert_unit_metrics_match_the_facts;
use crate::helpers::{spawn_app, Backend, ServerProcess, TestApp};

crate::on_both_backends!(
    an_outcome_batch_answers_each_item_as_single_requests_in_turn_would,
    concurrent_outcome_batches_naming_the_same_outcomes_store_each_once,
    an_assignment_batch_gives_each_unit_the_arm_single_requests_give_and_stays_sticky,
    assignment_batches_are_sticky_across_two_server_processes,
    concurrent_assignment_batches_naming_the_same_units_create_one_assignment_each,
);

async fn published_campaign(app: &TestApp, key: &str) -> String {
    let body = json!({
        "key": key, "name": key,
        "arms": [{"key": "control", "weight": 1}, {"key": "treatment", "weight": 1}],
        "metrics": [
            {"name": "purchase", "kind": "conversion", "window_hours": 168},
            {"name": "revenue", "kind": "sum", "window_hours": 168},
            {"name": "pageviews", "kind": "count", "window_hours": 168}
        ]
    });
    crate::experiments::create_published(app, &body).await
}

async fn assignment_ids(app: &TestApp, campaign: &str, units: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for unit in 0..units {
        let body = json!({"campaign_id": campaign, "unit_id": format!("user-{unit}")});
        let answer = app.post_json("/assignments", &body).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        ids.push(
            answer.body["assignment_id"]
                .as_str()
                .expect("id")
                .to_string(),
        );
    }
    ids
}

/// New outcomes, retries (inside the list and of earlier ones), collisions, a repeated
/// collision, and items refused for their metric, value or assignment, over three units.
fn mixed_outcomes(assignments: &[String], at: &str) -> Vec<Value> {
    let item = |unit: usize, key: &str, metric: &str, value: Option<f64>| json!({"assignment_id": assignments[unit], "dedupe_key": key, "metric": metric, "value": value, "occurred_at": at});
    vec![
        item(0, "order_1", "revenue", Some(10.5)),
        item(1, "order_2", "purchase", None),
        item(0, "order_1", "revenue", Some(10.5)),
        item(0, "order_1", "revenue", Some(99.0)),
        item(2, "view_1", "pageviews", None),
        item(0, "order_1", "revenue", Some(99.0)),
        item(1, "order_3", "unknown_metric", None),
        item(2, "order_4", "revenue", None),
        json!({"assignment_id": "asg_missing", "dedupe_key": "k", "metric": "purchase", "occurred_at": at}),
        item(1, "order_2", "purchase", None),
        item(2, "view_1", "pageviews", None),
        item(2, "view_2", "pageviews", None),
        json!(["not", "an", "object"]),
    ]
}

/// An item's status as a single request: `POST /outcome`'s status and dedupe header.
async fn single_status(app: &TestApp, body: &Value) -> (String, Value) {
    let response = app
        .client
        .post(app.url("/outcome"))
        .bearer_auth(&app.key)
        .body(body.to_string())
        .send()
        .await
        .expect("sent");
    let status = response.status();
    let dedupe = response
        .headers()
        .get("x-tl-dedupe")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let answer: Value = response.json().await.expect("json");
    let label = match (status, dedupe) {
        (StatusCode::OK, Some(dedupe)) => dedupe,
        (StatusCode::CONFLICT, _) => "collision".to_string(),
        _ => "rejected".to_string(),
    };
    (label, answer)
}

/// The answer's fields that do not depend on which campaign the unit belongs to.
fn comparable(outcome: &Value) -> Value {
    json!([
        outcome["dedupe_key"],
        outcome["metric"],
        outcome["value"],
        outcome["occurred_at"]
    ])
}

async fn an_outcome_batch_answers_each_item_as_single_requests_in_turn_would(backend: Backend) {
    let app = spawn_app(backend).await;
    let (singles_campaign, batch_campaign) = (
        published_campaign(&app, "singles").await,
        published_campaign(&app, "batch").await,
    );
    let at = traqlyte_identity::format_rfc3339_micros(traqlyte_store::now_us() + 60_000_000);
    let singles = mixed_outcomes(&assignment_ids(&app, &singles_campaign, 3).await, &at);
    let batched = mixed_outcomes(&assignment_ids(&app, &batch_campaign, 3).await, &at);
    let mut expected = Vec::new();
    for body in &singles {
        expected.push(single_status(&app, body).await);
    }
    let answer = app
        .post_json("/outcomes/batch", &Value::Array(batched.clone()))
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let results = answer.body["results"].as_array().expect("results");
    assert_eq!(results.len(), batched.len());
    for (index, (result, (status, single))) in results.iter().zip(&expected).enumerate() {
        assert_eq!(result["index"], index);
        assert_eq!(result["status"], status.as_str(), "item {index}: {result}");
        match status.as_str() {
            "inserted" | "duplicate" => {
                assert_eq!(
                    comparable(&result["outcome"]),
                    comparable(single),
                    "item {index}"
                );
            }
            _ => assert_eq!(
                result["error"]["code"], single["error"]["code"],
                "item {index}"
            ),
        }
    }
    let statuses: Vec<&str> = expected.iter().map(|(s, _)| s.as_str()).collect();
    let count = |s: &str| statuses.iter().filter(|x| **x == s).count();
    assert_eq!(
        (
            &answer.body["inserted"],
            &answer.body["duplicates"],
            &answer.body["collisions"],
            &answer.body["rejected"]
        ),
        (
            &json!(count("inserted")),
            &json!(count("duplicate")),
            &json!(count("collision")),
            &json!(count("rejected"))
        )
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == "inserted").count(),
        4,
        "{statuses:?}"
    );
    // Every stored answer of the batch is the one a later retry gets, byte for byte.
    for (result, body) in results.iter().zip(&batched) {
        if result["status"] == "inserted" {
            let (status, retried) = single_status(&app, body).await;
            assert_eq!(
                (status.as_str(), &retried),
                ("duplicate", &result["outcome"])
            );
        }
    }
    assert_unit_metrics_match_the_facts(&app, &batch_campaign).await;
    assert_unit_metrics_match_the_facts(&app, &singles_campaign).await;
}

async fn concurrent_outcome_batches_naming_the_same_outcomes_store_each_once(backend: Backend) {
    let app = spawn_app(backend).await;
    let campaign = published_campaign(&app, "concurrent").await;
    let assignments = assignment_ids(&app, &campaign, 10).await;
    let at = traqlyte_identity::format_rfc3339_micros(traqlyte_store::now_us() + 60_000_000);
    let outcomes: Vec<Value> = (0..200)
        .map(|i| json!({"assignment_id": assignments[i % 10], "dedupe_key": format!("order_{i}"), "metric": "revenue", "value": i, "occurred_at": at}))
        .collect();
    // Each batch in another order: the store must still take its locks in one order.
    let batches: Vec<Value> = (0..4)
        .map(|b| {
            let mut items = outcomes.clone();
            items.rotate_left(b * 50);
            if b % 2 == 1 {
                items.reverse();
            }
            Value::Array(items)
        })
        .collect();
    let tasks: Vec<_> = batches
        .iter()
        .map(|batch| {
            let request = app
                .client
                .post(app.url("/outcomes/batch"))
                .bearer_auth(&app.key)
                .json(batch);
            tokio::spawn(async move {
                let response = request.send().await?;
                Ok::<_, reqwest::Error>((response.status(), response.json::<Value>().await?))
            })
        })
        .collect();
    let (mut inserted, mut duplicates) = (0, 0);
    for task in tasks {
        let (status, body) = task.await.expect("task").expect("answer");
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(
            (&body["collisions"], &body["rejected"]),
            (&json!(0), &json!(0))
        );
        inserted += body["inserted"].as_u64().expect("inserted");
        duplicates += body["duplicates"].as_u64().expect("duplicates");
    }
    assert_eq!((inserted, duplicates), (200, 600));
    assert_unit_metrics_match_the_facts(&app, &campaign).await;
}

fn units(campaign: &str, range: std::ops::Range<usize>) -> Vec<Value> {
    range
        .map(|u| json!({"campaign_id": campaign, "unit_id": format!("user-{u}")}))
        .collect()
}

async fn assign_batch(app: &TestApp, items: &[Value]) -> Value {
    let answer = app
        .post_json("/assignments/batch", &Value::Array(items.to_vec()))
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    answer.body
}

async fn an_assignment_batch_gives_each_unit_the_arm_single_requests_give_and_stays_sticky(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    let (first, second) = (
        published_campaign(&app, "first").await,
        published_campaign(&app, "second").await,
    );
    let unpublished = app
        .post_json(
            "/campaigns",
            &json!({"key": "draft", "name": "draft",
            "arms": [{"key": "a", "weight": 1}, {"key": "b", "weight": 1}], "metrics": []}),
        )
        .await;
    let unpublished = unpublished.body["id"].as_str().expect("id").to_string();
    let mut singles = Vec::new();
    for item in units(&first, 0..20) {
        let answer = app.post_json("/assignments", &item).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        singles.push(answer.body);
    }
    // Reweighted before the batch: its new units must be bucketed with version 2's arms.
    crate::experiments::reweight(&app, &second, 9).await;
    // Known units, new units of two campaigns, a repeat inside the batch, and refusals.
    let mut items = units(&first, 0..40);
    items.extend(units(&second, 0..20));
    items.push(json!({"campaign_id": first, "unit_id": "user-25"}));
    items.push(json!({"campaign_id": "cmp_0000000000000000", "unit_id": "u"}));
    items.push(json!({"campaign_id": "not-an-id", "unit_id": "u"}));
    items.push(json!({"campaign_id": unpublished, "unit_id": "u"}));
    items.push(json!({"campaign_id": first, "unit_id": ""}));
    items.push(json!({"campaign_id": first, "unit_id": "u", "extra": 1}));
    let batch = assign_batch(&app, &items).await;
    let results = batch["results"].as_array().expect("results");
    assert_eq!(
        (&batch["assigned"], &batch["rejected"]),
        (&json!(61), &json!(5))
    );
    for (index, single) in singles.iter().enumerate() {
        assert_eq!(
            &results[index]["assignment"], single,
            "a known unit keeps its assignment"
        );
    }
    assert_eq!(results[60]["assignment"], results[25]["assignment"]);
    let codes: Vec<&Value> = results[61..].iter().map(|r| &r["error"]["code"]).collect();
    assert_eq!(
        codes,
        [
            &json!("campaign_not_found"),
            &json!("campaign_not_found"),
            &json!("campaign_not_published"),
            &json!("invalid_assignment"),
            &json!("invalid_assignment")
        ]
    );
    assert_eq!(
        results[63]["error"]["field"], "campaign_id",
        "{}",
        results[63]
    );
    // New units of the batch: the arm is the bucketing of the campaign's latest version
    // (its salt and arms, as a single request computes it), and single requests now get
    // the batch's assignments (sticky).
    let mut latest = std::collections::HashMap::new();
    for campaign in [&first, &second] {
        let versions = app.get(&format!("/campaigns/{campaign}/versions")).await;
        let list = versions.body["versions"].as_array().expect("versions");
        let newest = list.last().expect("a version").clone();
        latest.insert(campaign.clone(), newest);
    }
    for (index, item) in items.iter().enumerate().take(60).skip(20) {
        let version = &latest[item["campaign_id"].as_str().expect("campaign")];
        let arms: Vec<traqlyte_experiments::Arm> = version["arms"]
            .as_array()
            .expect("arms")
            .iter()
            .map(|a| traqlyte_experiments::Arm {
                key: a["key"].as_str().expect("key").to_string(),
                weight: a["weight"].as_u64().expect("weight") as u32,
            })
            .collect();
        let salt = version["salt"].as_str().expect("salt");
        let unit = item["unit_id"].as_str().expect("unit");
        let expected = traqlyte_experiments::bucketing::bucket(salt, unit, &arms).expect("an arm");
        let assignment = &results[index]["assignment"];
        assert_eq!(assignment["arm"], expected.key.as_str(), "item {index}");
        assert_eq!(assignment["version"], version["version"], "item {index}");
        let answer = app.post_json("/assignments", item).await;
        assert_eq!(&answer.body, assignment, "item {index}");
    }
    let again = assign_batch(&app, &items).await;
    assert_eq!(again, batch, "a repeated batch answers the same bytes");
}

async fn assignment_batches_are_sticky_across_two_server_processes(backend: Backend) {
    let app = spawn_app(backend).await;
    let campaign = published_campaign(&app, "processes").await;
    let servers = [
        ServerProcess::start(app.database_url(), &[]),
        ServerProcess::start(app.database_url(), &[]),
    ];
    let items = Value::Array(units(&campaign, 0..100));
    let mut answers = Vec::new();
    for server in servers.iter().chain(servers.iter()) {
        let response = app
            .client
            .post(format!("{}/assignments/batch", server.address))
            .bearer_auth(&app.key)
            .json(&items)
            .send()
            .await
            .expect("sent");
        assert_eq!(response.status(), StatusCode::OK);
        answers.push(response.json::<Value>().await.expect("json"));
    }
    assert_eq!(answers[0]["assigned"], 100);
    for answer in &answers[1..] {
        assert_eq!(
            answer, &answers[0],
            "every process answers the first assignments"
        );
    }
}

async fn concurrent_assignment_batches_naming_the_same_units_create_one_assignment_each(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    let campaign = published_campaign(&app, "concurrent").await;
    let tasks: Vec<_> = (0..4)
        .map(|b| {
            let mut items = units(&campaign, 0..300);
            items.rotate_left(b * 75);
            if b % 2 == 1 {
                items.reverse();
            }
            let request = app
                .client
                .post(app.url("/assignments/batch"))
                .bearer_auth(&app.key)
                .json(&items);
            tokio::spawn(async move {
                let response = request.send().await?;
                Ok::<_, reqwest::Error>((response.status(), response.json::<Value>().await?))
            })
        })
        .collect();
    let mut by_unit: std::collections::HashMap<String, Value> = std::collections::HashMap::new();
    for task in tasks {
        let (status, body) = task.await.expect("task").expect("answer");
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["assigned"], 300);
        for result in body["results"].as_array().expect("results") {
            let assignment = &result["assignment"];
            let unit = assignment["unit_id"].as_str().expect("unit").to_string();
            let first = by_unit.entry(unit).or_insert_with(|| assignment.clone());
            assert_eq!(first, assignment, "one assignment per unit");
        }
    }
    assert_eq!(by_unit.len(), 300);
    let report = app.get(&format!("/campaigns/{campaign}/report")).await;
    let assigned: u64 = report.body["arms"]
        .as_array()
        .expect("arms")
        .iter()
        .map(|arm| arm["units"].as_u64().expect("units"))
        .sum();
    assert_eq!(assigned, 300, "one row per unit: {}", report.body);
}

//! The hot path of experiments (issue 11): `POST /outcomes/batch` written set-based must
//! answer every item exactly as the same single requests sent in turn would, and
//! concurrent batches naming the same outcomes must store each once.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::experiments::assert_unit_metrics_match_the_facts;
use crate::helpers::{spawn_app, Backend, TestApp};

crate::on_both_backends!(
    an_outcome_batch_answers_each_item_as_single_requests_in_turn_would,
    concurrent_outcome_batches_naming_the_same_outcomes_store_each_once,
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
    let created = app.post_json("/campaigns", &body).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let id = created.body["id"].as_str().expect("id").to_string();
    let published = app.post_raw(&format!("/campaigns/{id}/publish"), "").await;
    assert_eq!(published.status, StatusCode::CREATED, "{}", published.body);
    id
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

//! Outcome collisions in the report: the same `(assignment_id, dedupe_key)` delivered
//! with another payload is counted per metric and arm, apart from the harmless retries,
//! whichever path it came by (`/outcome`, `/outcomes/batch`, a Segment metric binding).

use std::collections::HashMap;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::experiments::{assign, metric, outcome, post_outcome_bytes, published_campaign};
use crate::helpers::{spawn_app, Backend, TestApp};
use crate::segment::{bind, create_source, post_v1, track};

crate::on_both_backends!(the_report_counts_collisions_per_arm_apart_from_duplicates);

/// Per metric of one arm: (stored outcomes, duplicates, collisions, value sum).
type Expected = HashMap<&'static str, (u64, u64, u64, f64)>;

/// Two units of each arm (the first two assigned there), by arm.
async fn two_units_per_arm(app: &TestApp, campaign: &str) -> HashMap<String, Vec<Value>> {
    let mut by_arm: HashMap<String, Vec<Value>> = HashMap::new();
    for unit in 0..200 {
        if by_arm.len() == 2 && by_arm.values().all(|units| units.len() >= 2) {
            return by_arm;
        }
        let assignment = assign(app, campaign, &format!("user-{unit}")).await;
        let arm = assignment["arm"].as_str().expect("arm").to_string();
        let units = by_arm.entry(arm).or_default();
        if units.len() < 2 {
            units.push(assignment);
        }
    }
    panic!("200 units never gave both arms two: {by_arm:?}");
}

/// The control sends one conflicting value over `/outcome`, the treatment two; each arm
/// then sends a batch with one conflicting order and one (control) or two (treatment,
/// the same changed payload twice: every delivery counts) conflicting purchases, and
/// over `/outcome` a `pageviews` payload under an order's key, which collides with the
/// stored `revenue` outcome and is counted there. A Segment track call replayed with a
/// new `messageId` and another revenue collides on the treatment's bound revenue, while
/// its purchase is a duplicate. Each retry is a duplicate; sums keep the first values.
async fn the_report_counts_collisions_per_arm_apart_from_duplicates(backend: Backend) {
    let app = spawn_app(backend).await;
    let campaign = published_campaign(&app, [1, 1]).await;
    let units = two_units_per_arm(&app, &campaign).await;
    let mut expected: HashMap<&str, Expected> = HashMap::new();
    for (arm, conflicts) in [("control", 1_u32), ("treatment", 2)] {
        let (single, batched) = (&units[arm][0], &units[arm][1]);
        // Over `/outcome`: the order, its retry, then `conflicts` other values.
        let order = outcome(
            single,
            &format!("prod:order:{arm}:1"),
            "revenue",
            Some(10.0),
        );
        for dedupe in ["inserted", "duplicate"] {
            let (status, header, _) = post_outcome_bytes(&app, &order).await;
            assert_eq!((status, header.as_deref()), (StatusCode::OK, Some(dedupe)));
        }
        let mut changed: Vec<Value> = (1..=conflicts)
            .map(|n| {
                let mut body = order.clone();
                body["value"] = json!(10.0 + f64::from(n));
                body
            })
            .collect();
        let mut as_pageview = order.clone();
        as_pageview["metric"] = json!("pageviews");
        as_pageview["value"] = Value::Null;
        changed.push(as_pageview);
        for body in &changed {
            let answer = app.post_json("/outcome", body).await;
            assert_eq!(answer.status, StatusCode::CONFLICT, "{}", answer.body);
            assert_eq!(answer.code(), "outcome_collision");
        }
        // Over `/outcomes/batch`: an order and a purchase, each with its retry and a
        // conflicting payload (the purchase at another event time).
        let order = outcome(
            batched,
            &format!("prod:order:{arm}:2"),
            "revenue",
            Some(20.0),
        );
        let purchase = outcome(batched, &format!("prod:purchase:{arm}:2"), "purchase", None);
        let mut other_order = order.clone();
        other_order["value"] = json!(25.0);
        let mut other_purchase = purchase.clone();
        other_purchase["occurred_at"] = json!(traqlyte_identity::format_rfc3339_micros(
            traqlyte_store::now_us() + 120_000_000
        ));
        let mut items = vec![
            order.clone(),
            purchase.clone(),
            order,
            purchase,
            other_order,
        ];
        items.extend(std::iter::repeat_n(other_purchase, conflicts as usize));
        let answer = app.post_json("/outcomes/batch", &json!(items)).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        let counts = ["inserted", "duplicates", "collisions", "rejected"].map(|k| &answer.body[k]);
        assert_eq!(
            counts,
            [&json!(2), &json!(2), &json!(1 + conflicts), &json!(0)]
        );
        let conflicts = u64::from(conflicts);
        let figures = HashMap::from([
            ("revenue", (2, 2, conflicts + 2, 30.0)),
            ("purchase", (1, 1, conflicts, 0.0)),
            ("pageviews", (0, 0, 0, 0.0)),
        ]);
        expected.insert(arm, figures);
    }

    // A Segment binding: the treatment's first unit orders, the app replays the call with
    // a new messageId and another revenue (the same client timestamp). Both answered 200:
    // the second message is new; its revenue outcome collides, its purchase is a retry.
    let write_key = create_source(&app, "web");
    bind(&app, &campaign).await;
    let user = units["treatment"][0]["unit_id"].as_str().expect("unit");
    let first = track("m-1", user, "o-77", 12.5);
    let mut replayed = first.clone();
    replayed["messageId"] = json!("m-1-replayed");
    replayed["properties"]["revenue"] = json!(13.0);
    for message in [&first, &replayed] {
        let answer = post_v1(&app, "/v1/track", Some(&write_key), message).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    }
    let treatment = expected.get_mut("treatment").expect("treatment");
    for (name, stored, duplicates, collisions, value) in
        [("revenue", 1, 0, 1, 12.5), ("purchase", 1, 1, 0, 0.0)]
    {
        let figures = treatment.get_mut(name).expect("metric");
        figures.0 += stored;
        figures.1 += duplicates;
        figures.2 += collisions;
        figures.3 += value;
    }

    // The whole campaign's report and its one version's say the same.
    for path in [
        format!("/campaigns/{campaign}/report"),
        format!("/campaigns/{campaign}/report?version=1"),
    ] {
        let answer = app.get(&path).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        let report = &answer.body;
        for (arm, figures) in &expected {
            for (name, (stored, duplicates, collisions, value)) in figures {
                let m = metric(report, arm, name);
                let shown = (
                    m["stored_events"].as_u64(),
                    m["duplicates"].as_u64(),
                    m["collisions"].as_u64(),
                );
                let what = format!("{path}: {arm} {name}: {m}");
                assert_eq!(
                    shown,
                    (Some(*stored), Some(*duplicates), Some(*collisions)),
                    "{what}"
                );
                // No window applies to a collision: the arrival-time figures omit it.
                assert!(m["arrival_time"].get("collisions").is_none(), "{what}");
                if *name == "revenue" {
                    // Value per unit times units: the first values only.
                    let units = m["units"].as_f64().expect("units");
                    let sum = m["value"].as_f64().expect("value") * units;
                    assert!(
                        (sum - value).abs() < 1e-9,
                        "{what}: sum {sum}, sent {value}"
                    );
                }
            }
        }
    }
    crate::experiments::assert_unit_metrics_match_the_facts(&app, &campaign).await;
}

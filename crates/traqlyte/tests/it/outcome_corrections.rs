//! Correcting an outcome by supersession: the report uses the current value in both
//! windows, the original and the history are kept, a retry of the original still gets
//! identical bytes, a different value under the same dedupe key is still a collision,
//! and no tenant corrects another's outcome.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::experiments::{
    assert_unit_metrics_match_the_facts, assign, metric, outcome, post_outcome_bytes,
    published_campaign, report, reweight,
};
use crate::helpers::{spawn_app, Backend};

crate::on_both_backends!(
    a_corrected_outcome_changes_the_report_and_keeps_its_history,
    a_correction_is_refused_for_another_tenant_and_for_bad_bodies,
    batch_answers_name_the_same_outcome_id,
    outcomes_stored_before_the_migration_get_their_id_at_start,
    a_late_retry_of_a_correction_never_undoes_a_later_one,
    only_sum_outcomes_take_corrections,
    an_outcome_takes_at_most_its_limit_of_corrections,
    corrected_outcomes_are_counted_under_the_version_their_unit_was_assigned_under,
    sums_rounded_by_a_correction_through_a_huge_value_are_rebuilt_by_the_cli,
);

/// `value` per unit of `arm`'s revenue, event and arrival time.
fn revenue(report: &Value, arm: &str) -> (Value, Value) {
    let m = metric(report, arm, "revenue");
    (m["value"].clone(), m["arrival_time"]["value"].clone())
}

/// A published campaign with `user-1` assigned and a revenue outcome of 100 stored: the
/// campaign, the assignment, the outcome's body, its first answer and its `outcome_id`.
async fn stored_revenue(
    app: &crate::helpers::TestApp,
) -> (
    String,
    Value,
    Value,
    (StatusCode, Option<String>, Vec<u8>),
    String,
) {
    let campaign = published_campaign(app, [1, 1]).await;
    let unit = assign(app, &campaign, "user-1").await;
    let body = outcome(&unit, "prod:checkout:order_1", "revenue", Some(100.0));
    let first = post_outcome_bytes(app, &body).await;
    assert_eq!(first.0, StatusCode::OK);
    let answered: Value = serde_json::from_slice(&first.2).expect("json");
    let id = answered["outcome_id"]
        .as_str()
        .expect("an outcome_id")
        .to_string();
    (campaign, unit, body, first, id)
}

async fn a_corrected_outcome_changes_the_report_and_keeps_its_history(backend: Backend) {
    let app = spawn_app(backend).await;
    let (campaign, unit, body, first, id) = stored_revenue(&app).await;
    let arm = unit["arm"].as_str().expect("arm").to_string();
    assert!(id.starts_with("out_") && id.len() == 36, "{id}");
    let before = report(&app, &campaign).await;
    assert_eq!(revenue(&before, &arm), (json!(100.0), json!(100.0)));
    assert_eq!(before["corrected_outcomes"], 0);

    let path = format!("/outcomes/{id}/supersessions");
    let correction = json!({"value": 40.0, "reason": "partial refund"});
    let stored = app.post_json(&path, &correction).await;
    assert_eq!(stored.status, StatusCode::CREATED, "{}", stored.body);
    assert_eq!(stored.body["status"], "superseded");
    assert_eq!(stored.body["correction"]["supersedes_value"], 100.0);
    // The same correction again changes nothing.
    let again = app.post_json(&path, &correction).await;
    assert_eq!(
        (again.status, again.body["status"].clone()),
        (StatusCode::OK, json!("unchanged"))
    );

    let after = report(&app, &campaign).await;
    assert_eq!(revenue(&after, &arm), (json!(40.0), json!(40.0)));
    assert_eq!(after["corrected_outcomes"], 1);
    assert_unit_metrics_match_the_facts(&app, &campaign).await;

    // A second correction: history oldest first, the original untouched.
    let second = app
        .post_json(
            &path,
            &json!({"value": 55.0, "reason": "refund reversed in part"}),
        )
        .await;
    assert_eq!(second.status, StatusCode::CREATED, "{}", second.body);
    let history = app.get(&format!("/outcomes/{id}")).await;
    assert_eq!(history.status, StatusCode::OK, "{}", history.body);
    assert_eq!(
        history.body["outcome"]["value"], 100.0,
        "the original is kept"
    );
    assert_eq!(history.body["current_value"], 55.0);
    let values: Vec<(Value, Value)> = history.body["corrections"]
        .as_array()
        .expect("corrections")
        .iter()
        .map(|c| (c["supersedes_value"].clone(), c["value"].clone()))
        .collect();
    assert_eq!(
        values,
        vec![(json!(100.0), json!(40.0)), (json!(40.0), json!(55.0))]
    );
    assert_eq!(history.body["corrections"][0]["reason"], "partial refund");
    assert_eq!(
        revenue(&report(&app, &campaign).await, &arm),
        (json!(55.0), json!(55.0))
    );
    assert_unit_metrics_match_the_facts(&app, &campaign).await;

    // A retry of the original delivery: identical bytes, counted as a duplicate.
    let retry = post_outcome_bytes(&app, &body).await;
    assert_eq!(
        (retry.0, retry.1.as_deref(), retry.2),
        (StatusCode::OK, Some("duplicate"), first.2.clone())
    );
    // A different value under the same dedupe key is still a collision, not a correction.
    let resend = outcome(&unit, "prod:checkout:order_1", "revenue", Some(70.0));
    let mut resend = resend;
    resend["occurred_at"] = body["occurred_at"].clone();
    let collided = app.post_json("/outcome", &resend).await;
    assert_eq!(collided.status, StatusCode::CONFLICT, "{}", collided.body);
    assert_eq!(collided.code(), "outcome_collision");
    assert_eq!(collided.body["error"]["stored"]["outcome_id"], json!(id));
    assert_eq!(
        revenue(&report(&app, &campaign).await, &arm),
        (json!(55.0), json!(55.0))
    );
    assert_unit_metrics_match_the_facts(&app, &campaign).await;
}

async fn a_correction_is_refused_for_another_tenant_and_for_bad_bodies(backend: Backend) {
    let app = spawn_app(backend).await;
    let campaign = published_campaign(&app, [1, 1]).await;
    let unit = assign(&app, &campaign, "user-1").await;
    let body = outcome(&unit, "prod:checkout:order_1", "revenue", Some(100.0));
    let first = app.post_json("/outcome", &body).await;
    let id = first.body["outcome_id"].as_str().expect("id").to_string();
    let path = format!("/outcomes/{id}/supersessions");

    let other = app.other_tenant_key().await;
    let theirs = app
        .send(
            app.client
                .post(app.url(&path))
                .bearer_auth(&other)
                .body(json!({"value": 1.0, "reason": "not mine"}).to_string()),
        )
        .await;
    assert_eq!(theirs.status, StatusCode::NOT_FOUND, "{}", theirs.body);
    assert_eq!(theirs.code(), "outcome_not_found");
    // Named as every other 404 of a path's id is (it named no field).
    assert_eq!(
        theirs.body["error"]["field"], "outcome_id",
        "{}",
        theirs.body
    );
    let read = app
        .send(
            app.client
                .get(app.url(&format!("/outcomes/{id}")))
                .bearer_auth(&other),
        )
        .await;
    assert_eq!(read.status, StatusCode::NOT_FOUND);

    for (bad, field) in [
        (json!({"value": 1.0}), "reason"),
        (json!({"value": 1.0, "reason": ""}), "reason"),
        (json!({"value": 1e16, "reason": "too big"}), "value"),
        (
            json!({"value": null, "reason": "a sum needs a value"}),
            "value",
        ),
        (json!({"value": 1.0, "reason": "x", "extra": 1}), "extra"),
    ] {
        let answer = app.post_json(&path, &bad).await;
        assert_eq!(
            answer.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{bad}: {}",
            answer.body
        );
        assert_eq!(
            answer.body["error"]["field"], field,
            "{bad}: {}",
            answer.body
        );
    }
    let unknown = app
        .post_json(
            "/outcomes/out_00000000000000000000000000000000/supersessions",
            &json!({"value": 1.0, "reason": "nothing there"}),
        )
        .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    let history = app.get(&format!("/outcomes/{id}")).await;
    assert_eq!(
        history.body["corrections"],
        json!([]),
        "nothing was written"
    );
    assert_eq!(history.body["current_value"], 100.0);
    assert_eq!(report(&app, &campaign).await["corrected_outcomes"], 0);
}

async fn batch_answers_name_the_same_outcome_id(backend: Backend) {
    let app = spawn_app(backend).await;
    let campaign = published_campaign(&app, [1, 1]).await;
    let unit = assign(&app, &campaign, "user-1").await;
    let body = outcome(&unit, "prod:checkout:order_9", "revenue", Some(10.0));
    let single = app.post_json("/outcome", &body).await;
    let batch = app.post_json("/outcomes/batch", &json!([body])).await;
    assert_eq!(batch.status, StatusCode::OK, "{}", batch.body);
    assert_eq!(batch.body["results"][0]["status"], "duplicate");
    assert_eq!(
        batch.body["results"][0]["outcome"]["outcome_id"],
        single.body["outcome_id"]
    );
}

/// PostgreSQL's schema before migration `0020` (outcomes keyed by assignment and dedupe
/// key, the outcome id a nullable unique column, no `traqlyte_outcome_id`), for a test
/// database that `migrate` already took past it.
const PG_BEFORE_0020: &str = "ALTER TABLE outcomes DROP CONSTRAINT outcomes_pkey;
    ALTER TABLE outcomes ALTER COLUMN outcome_id DROP NOT NULL;
    ALTER TABLE outcomes ADD PRIMARY KEY (tenant_id, assignment_id, dedupe_key);
    CREATE UNIQUE INDEX outcomes_by_outcome_id ON outcomes (tenant_id, outcome_id);
    DROP FUNCTION traqlyte_outcome_id";

/// Clears the outcomes' ids as rows stored before migration `0015` have none, then runs
/// what gives them their ids at the next start: `Store::migrate` on SQLite; on
/// PostgreSQL migration `0020`'s own text, on the schema it starts from, since its SQL
/// formula is what fills them there.
async fn forget_outcome_ids_then_fill_them(app: &crate::helpers::TestApp, path: &str) {
    use sqlx::Connection;
    const CLEAR: &str = "UPDATE outcomes SET outcome_id = NULL";
    let url = app.database_url();
    if url.starts_with("postgres") {
        let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
        sqlx::raw_sql(PG_BEFORE_0020)
            .execute(&mut conn)
            .await
            .expect("the schema before 0020");
        sqlx::query(CLEAR).execute(&mut conn).await.expect("clear");
        assert_eq!(app.get(path).await.status, StatusCode::NOT_FOUND);
        let migration = include_str!(
            "../../../store/migrations/postgres/0020_outcomes_keyed_by_outcome_id.sql"
        );
        sqlx::raw_sql(migration)
            .execute(&mut conn)
            .await
            .expect("migration 0020");
    } else {
        let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{url}"))
            .await
            .expect("connect");
        sqlx::query(CLEAR).execute(&mut conn).await.expect("clear");
        assert_eq!(app.get(path).await.status, StatusCode::NOT_FOUND);
        app.store.migrate().await.expect("migrate");
    }
}

async fn outcomes_stored_before_the_migration_get_their_id_at_start(backend: Backend) {
    let app = spawn_app(backend).await;
    let campaign = published_campaign(&app, [1, 1]).await;
    let unit = assign(&app, &campaign, "user-1").await;
    let body = outcome(&unit, "prod:checkout:order_old", "revenue", Some(10.0));
    let id = app.post_json("/outcome", &body).await.body["outcome_id"].clone();
    let path = format!("/outcomes/{}", id.as_str().expect("id"));
    // The next start fills the id in, derived from the row's key exactly as
    // `traqlyte_experiments::outcome_id` derives it.
    forget_outcome_ids_then_fill_them(&app, &path).await;
    let found = app.get(&path).await;
    assert_eq!(found.status, StatusCode::OK, "{}", found.body);
    assert_eq!(found.body["outcome"]["outcome_id"], id);
    // And the filled id is the dedupe constraint's: a retry is a duplicate, not a row.
    let again = app.post_json("/outcomes/batch", &json!([body])).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.body);
    assert_eq!(again.body["results"][0]["status"], "duplicate");
    assert_eq!(again.body["inserted"], 0, "{}", again.body);
}

/// `expected_seq` names the newest correction the sender saw: a correction retried late
/// (its first answer lost, another correction stored since) is refused with
/// `409 correction_conflict` instead of undoing the later one; a retry that finds its own
/// value current is `unchanged`, whatever it expected.
async fn a_late_retry_of_a_correction_never_undoes_a_later_one(backend: Backend) {
    let app = spawn_app(backend).await;
    let campaign = published_campaign(&app, [1, 1]).await;
    let unit = assign(&app, &campaign, "user-1").await;
    let arm = unit["arm"].as_str().expect("arm").to_string();
    let body = outcome(&unit, "prod:checkout:order_1", "revenue", Some(100.0));
    let first = app.post_json("/outcome", &body).await;
    let id = first.body["outcome_id"].as_str().expect("id").to_string();
    let path = format!("/outcomes/{id}/supersessions");
    let refund = json!({"value": 40.0, "reason": "partial refund", "expected_seq": 0});
    let stored = app.post_json(&path, &refund).await;
    assert_eq!(stored.status, StatusCode::CREATED, "{}", stored.body);
    assert_eq!(stored.body["correction"]["seq"], 1);
    let reversal = json!({"value": 55.0, "reason": "refund reversed in part", "expected_seq": 1});
    let stored = app.post_json(&path, &reversal).await;
    assert_eq!(stored.status, StatusCode::CREATED, "{}", stored.body);

    // The first correction again, as a client whose answer was lost retries it.
    let late = app.post_json(&path, &refund).await;
    assert_eq!(late.status, StatusCode::CONFLICT, "{}", late.body);
    assert_eq!(late.code(), "correction_conflict");
    assert_eq!(late.body["error"]["field"], "expected_seq");
    let message = late.body["error"]["message"].as_str().unwrap_or("");
    assert!(
        message.contains("number 2") && message.contains("55"),
        "{message}"
    );
    // The second again: its own value is current.
    let again = app.post_json(&path, &reversal).await;
    assert_eq!(
        (again.status, again.body["status"].clone()),
        (StatusCode::OK, json!("unchanged")),
        "{}",
        again.body
    );
    for bad in [json!(-1), json!(1.5), json!("1"), json!(null)] {
        let body = json!({"value": 10.0, "reason": "typed", "expected_seq": bad});
        let answer = app.post_json(&path, &body).await;
        if bad.is_null() {
            // `null` is no precondition, as an absent field.
            assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
            continue;
        }
        assert_eq!(
            (answer.status, answer.code()),
            (StatusCode::UNPROCESSABLE_ENTITY, "invalid_correction"),
            "{bad}: {}",
            answer.body
        );
        assert_eq!(
            answer.body["error"]["field"], "expected_seq",
            "{}",
            answer.body
        );
    }
    let history = app.get(&format!("/outcomes/{id}")).await;
    assert_eq!(history.body["current_value"], 10.0, "{}", history.body);
    assert_eq!(
        history.body["corrections"].as_array().map(Vec::len),
        Some(3)
    );
    assert_eq!(
        revenue(&report(&app, &campaign).await, &arm),
        (json!(10.0), json!(10.0))
    );
    assert_unit_metrics_match_the_facts(&app, &campaign).await;
}

/// A conversion's or a count's figures count outcomes, not values: a corrected value
/// would change none of them, so it is refused (it used to be stored and change nothing).
async fn only_sum_outcomes_take_corrections(backend: Backend) {
    let app = spawn_app(backend).await;
    let campaign = published_campaign(&app, [1, 1]).await;
    let unit = assign(&app, &campaign, "user-1").await;
    for (metric, value) in [("purchase", None), ("pageviews", Some(2.0))] {
        let key = format!("prod:{metric}:1");
        let stored = app
            .post_json("/outcome", &outcome(&unit, &key, metric, value))
            .await;
        let id = stored.body["outcome_id"].as_str().expect("id").to_string();
        for correction in [json!(5.0), json!(null)] {
            let body = json!({"value": correction, "reason": "recount"});
            let answer = app
                .post_json(&format!("/outcomes/{id}/supersessions"), &body)
                .await;
            assert_eq!(
                (answer.status, answer.code()),
                (StatusCode::UNPROCESSABLE_ENTITY, "invalid_correction"),
                "{metric}: {}",
                answer.body
            );
            assert_eq!(answer.body["error"]["field"], "value");
        }
        let history = app.get(&format!("/outcomes/{id}")).await;
        assert_eq!(history.body["corrections"], json!([]), "{metric}");
    }
    assert_eq!(report(&app, &campaign).await["corrected_outcomes"], 0);
}

/// An outcome's history is bounded: the correction past the limit is a `409` naming the
/// outcome, nothing is stored (the report keeps the last value), and a retry of the
/// newest correction still answers `unchanged`.
async fn an_outcome_takes_at_most_its_limit_of_corrections(backend: Backend) {
    use traqlyte_store::outcome_corrections::CORRECTIONS_PER_OUTCOME_MAX;
    let app = spawn_app(backend).await;
    let (campaign, unit, _, _, id) = stored_revenue(&app).await;
    let arm = unit["arm"].as_str().expect("arm").to_string();
    let path = format!("/outcomes/{id}/supersessions");
    let correction = |n: i64| json!({"value": n as f64, "reason": format!("correction {n}")});
    for n in 1..=CORRECTIONS_PER_OUTCOME_MAX {
        let stored = app.post_json(&path, &correction(n)).await;
        assert_eq!(stored.status, StatusCode::CREATED, "{n}: {}", stored.body);
    }
    let past = app.post_json(&path, &correction(0)).await;
    assert_eq!(
        (past.status, past.code()),
        (StatusCode::CONFLICT, "correction_limit"),
        "{}",
        past.body
    );
    assert_eq!(past.body["error"]["field"], "outcome_id");
    let retry = app
        .post_json(&path, &correction(CORRECTIONS_PER_OUTCOME_MAX))
        .await;
    assert_eq!(retry.body["status"], "unchanged", "{}", retry.body);
    let history = app.get(&format!("/outcomes/{id}")).await;
    assert_eq!(
        history.body["corrections"].as_array().map(Vec::len),
        Some(CORRECTIONS_PER_OUTCOME_MAX as usize),
        "{}",
        history.body
    );
    let last = CORRECTIONS_PER_OUTCOME_MAX as f64;
    assert_eq!(revenue(&report(&app, &campaign).await, &arm).0, json!(last));
    assert_unit_metrics_match_the_facts(&app, &campaign).await;
}

/// `corrected_outcomes` of `?version=N` counts the corrected outcomes of the units
/// assigned under version N (read from the corrections, each probing its outcome and its
/// assignment by their keys), each outcome once however often corrected.
async fn corrected_outcomes_are_counted_under_the_version_their_unit_was_assigned_under(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    let campaign = published_campaign(&app, [1, 1]).await;
    let mut ids = Vec::new();
    for (version, units) in [(1, ["v1-a", "v1-b"]), (2, ["v2-a", "v2-b"])] {
        if version == 2 {
            reweight(&app, &campaign, 3).await;
        }
        for unit in units {
            let assigned = assign(&app, &campaign, unit).await;
            let body = outcome(&assigned, &format!("order-{unit}"), "revenue", Some(10.0));
            let (status, _, bytes) = post_outcome_bytes(&app, &body).await;
            assert_eq!(status, StatusCode::OK);
            let answered: Value = serde_json::from_slice(&bytes).expect("json");
            ids.push(answered["outcome_id"].as_str().expect("id").to_string());
        }
    }
    // v1-a corrected twice, v2-a and v2-b once each, v1-b never.
    for (id, value) in [
        (&ids[0], 4.0),
        (&ids[0], 5.0),
        (&ids[2], 6.0),
        (&ids[3], 7.0),
    ] {
        let path = format!("/outcomes/{id}/supersessions");
        let answer = app
            .post_json(&path, &json!({"value": value, "reason": "refund"}))
            .await;
        assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    }
    let of = |version: &str| {
        let app = &app;
        let path = format!("/campaigns/{campaign}/report{version}");
        async move {
            let answer = app.get(&path).await;
            assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
            answer.body["corrected_outcomes"].clone()
        }
    };
    assert_eq!(of("").await, 3);
    assert_eq!(of("?version=1").await, 1);
    assert_eq!(of("?version=2").await, 2);
}

/// Corrections through 1e15 (a value sent in the wrong unit, then fixed) leave the unit's
/// sum off from its current value by the doubles' rounding at 1e15 (docs/experiments.md):
/// a review read 0.25 or 0.225 for 0.2. `traqlyte campaign rebuild-sums` recomputes the
/// sums from the facts, while the server runs.
async fn sums_rounded_by_a_correction_through_a_huge_value_are_rebuilt_by_the_cli(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    let campaign = published_campaign(&app, [1, 1]).await;
    let unit = assign(&app, &campaign, "user-1").await;
    let arm = unit["arm"].as_str().expect("arm").to_string();
    let body = outcome(&unit, "prod:checkout:order_1", "revenue", Some(0.1));
    let (status, _, bytes) = post_outcome_bytes(&app, &body).await;
    assert_eq!(status, StatusCode::OK);
    let answered: Value = serde_json::from_slice(&bytes).expect("json");
    let id = answered["outcome_id"].as_str().expect("id").to_string();
    for value in [1e15, 0.3, 1e15, 0.7, 1e15, 0.2] {
        let answer = app
            .post_json(
                &format!("/outcomes/{id}/supersessions"),
                &json!({"value": value, "reason": "wrong unit"}),
            )
            .await;
        assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    }
    let rounded = revenue(&report(&app, &campaign).await, &arm);
    assert_ne!(rounded, (json!(0.2), json!(0.2)), "no rounding to repair");
    let rebuilt = crate::segment::traqlyte(
        &app,
        &[
            "campaign",
            "rebuild-sums",
            &campaign,
            "--tenant",
            "test tenant",
        ],
    );
    assert!(rebuilt.status.success(), "{rebuilt:?}");
    assert!(
        String::from_utf8_lossy(&rebuilt.stdout).starts_with("rebuilt the per-unit sums"),
        "{rebuilt:?}"
    );
    let repaired = revenue(&report(&app, &campaign).await, &arm);
    assert_eq!(repaired, (json!(0.2), json!(0.2)));
    assert_unit_metrics_match_the_facts(&app, &campaign).await;
    // An unknown campaign is named.
    let unknown = crate::segment::traqlyte(
        &app,
        &[
            "campaign",
            "rebuild-sums",
            "cmp_00000000000000000000000000000000",
            "--tenant",
            "test tenant",
        ],
    );
    assert!(!unknown.status.success());
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("no campaign"),
        "{unknown:?}"
    );
}

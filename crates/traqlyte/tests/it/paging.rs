//! The listings that stopped at a fixed cap are paged like `GET /contracts`: `limit`,
//! `cursor` and `next_cursor`. With more rows than a page, walking the cursors visits
//! every row exactly once and in the listing's order; the default page is the one the
//! route answered before; a `cursor` the API never gave is `400 invalid_parameter`
//! naming it. `traqlyte source list` prints every source, past one page.

use std::process::Command;

use reqwest::StatusCode;
use serde_json::{json, Value};
use traqlyte_store::{NewDeadLetter, NewRejection, SourceName};

use crate::helpers::{checkout_event, spawn_app, Backend, TestApp};

crate::on_both_backends!(
    sources_are_listed_in_pages_and_the_cli_prints_every_one,
    rejections_are_listed_in_pages_newest_first,
    dead_letters_are_listed_in_pages_newest_first_with_ties_in_a_total_order,
    a_page_of_dead_letters_stops_at_its_byte_budget,
    a_page_of_contracts_stops_at_its_byte_budget,
    a_contracts_collisions_are_listed_in_pages_newest_first,
);

/// One walk of a paged listing: every item under `key` in the order answered, and the
/// number of pages. Each page but the last is full.
async fn walk(app: &TestApp, path: &str, key: &str, limit: Option<u32>) -> (Vec<Value>, usize) {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut query = Vec::new();
        if let Some(limit) = limit {
            query.push(("limit", limit.to_string()));
        }
        if let Some(cursor) = &cursor {
            query.push(("cursor", cursor.clone()));
        }
        let request = app
            .client
            .get(app.url(path))
            .query(&query)
            .bearer_auth(&app.key);
        let page = app.send(request).await;
        assert_eq!(
            page.status,
            StatusCode::OK,
            "{path} {query:?}: {}",
            page.body
        );
        let listed = page.body[key].as_array().expect(key).clone();
        pages += 1;
        assert!(pages < 100, "{path}: the walk does not end");
        match page.body.get("next_cursor") {
            Some(next) => {
                if let Some(limit) = limit {
                    assert_eq!(
                        listed.len(),
                        limit as usize,
                        "{path}: a short page before the last"
                    );
                }
                cursor = Some(next.as_str().expect("a text cursor").to_string());
            }
            None => {
                items.extend(listed);
                return (items, pages);
            }
        }
        items.extend(listed);
    }
}

/// The texts of `field` of each item.
fn texts(items: &[Value], field: &str) -> Vec<String> {
    items
        .iter()
        .map(|item| match &item[field] {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        })
        .collect()
}

/// 1,001 sources: the default page holds the first 1,000 by name (as before) and a
/// cursor to the last one; smaller pages walk all of them once, in order; the CLI prints
/// all of them.
async fn sources_are_listed_in_pages_and_the_cli_prints_every_one(backend: Backend) {
    let app = spawn_app(backend).await;
    let tenant = app.tenant().await;
    // Created in an order other than the names', so the order answered is the names'.
    let mut names: Vec<String> = (0..1_001)
        .map(|i| format!("src-{:04}", (i * 10) % 1_001))
        .collect();
    for name in &names {
        let name = SourceName::parse(name).expect("name");
        app.store
            .create_source(&tenant, &name)
            .await
            .expect("source");
    }
    names.sort();

    let first = app.get("/sources").await;
    assert_eq!(first.body["sources"].as_array().map(Vec::len), Some(1_000));
    assert!(first.body["next_cursor"].is_string(), "a next page");
    let (all, pages) = walk(&app, "/sources", "sources", None).await;
    assert_eq!((texts(&all, "name"), pages), (names.clone(), 2));
    let (all, pages) = walk(&app, "/sources", "sources", Some(300)).await;
    assert_eq!((texts(&all, "name"), pages), (names.clone(), 4));
    // The ids of every source are listed, once each.
    let mut ids = texts(&all, "id");
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 1_001);

    let output = Command::new(env!("CARGO_BIN_EXE_traqlyte"))
        .args(["source", "list", "--tenant", "test tenant"])
        .args(["--database-url", app.database_url()])
        .output()
        .expect("run traqlyte");
    assert!(output.status.success(), "{output:?}");
    let printed = String::from_utf8(output.stdout).expect("utf-8");
    let printed: Vec<&str> = printed
        .lines()
        .map(|line| line.split('\t').nth(1).unwrap_or("?"))
        .collect();
    assert_eq!(printed, names);

    app.assert_bad_parameters(
        "/sources",
        &[
            ("limit=0", "limit"),
            ("limit=1001", "limit"),
            ("cursor=nonsense", "cursor"),
            ("cursor=src-0001", "cursor"),
            // The right shape, but no source of the tenant.
            ("cursor=src_0000000000000000", "cursor"),
        ],
    )
    .await;
}

/// 250 rejections of one source: 100 a page by default, newest (highest id) first, each
/// once; another source's are never listed.
async fn rejections_are_listed_in_pages_newest_first(backend: Backend) {
    let app = spawn_app(backend).await;
    let tenant = app.tenant().await;
    let mut sources = Vec::new();
    for name in ["web", "ios"] {
        let name = SourceName::parse(name).expect("name");
        let (source, _) = app
            .store
            .create_source(&tenant, &name)
            .await
            .expect("source");
        sources.push(source.source_id);
    }
    let rejection = |i: u32| NewRejection {
        message_index: i,
        code: "missing_required_field".to_string(),
        field: "userId".to_string(),
        reason: format!("message {i} has no userId"),
        payload: json!({"n": i}).to_string(),
    };
    // Two transactions of the same instant, so only the ids order them.
    for batch in [0..120, 120..250] {
        let mut tx = app.store.begin().await.expect("begin");
        let rejections: Vec<NewRejection> = batch.map(rejection).collect();
        for source in &sources {
            tx.record_rejections(&tenant, source, &rejections, 1_764_000_000_000_000)
                .await
                .expect("rejections");
        }
        tx.commit().await.expect("commit");
    }
    let newest_first: Vec<String> = (0..250).rev().map(|i| i.to_string()).collect();
    let path = format!("/sources/{}/rejections", sources[0]);
    let (all, pages) = walk(&app, &path, "rejections", None).await;
    assert_eq!((texts(&all, "index"), pages), (newest_first.clone(), 3));
    let (all, pages) = walk(&app, &path, "rejections", Some(7)).await;
    assert_eq!((texts(&all, "index"), pages), (newest_first, 36));
    app.assert_bad_parameters(
        &path,
        &[
            ("limit=0", "limit"),
            ("limit=1001", "limit"),
            ("cursor=x", "cursor"),
            ("cursor=0", "cursor"),
            ("cursor=-5", "cursor"),
        ],
    )
    .await;
}

/// 260 dead letters, 250 recorded in one call (one instant: the stream, sequence and
/// publish time order them) and 10 later: newest first in a total order, each once.
async fn dead_letters_are_listed_in_pages_newest_first_with_ties_in_a_total_order(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    let tenant = app.tenant().await;
    let letter = |stream: &str, sequence: i64, published_ns: i64| NewDeadLetter {
        stream: stream.to_string(),
        stream_sequence: sequence,
        published_ns,
        subject: "traqlyte.nope".to_string(),
        reason: "unknown_contract".to_string(),
        detail: format!("{stream} {sequence} {published_ns}"),
        raw: b"{}".to_vec(),
    };
    // Two streams, each sequence twice (a stream re-created under its name).
    let mut older = Vec::new();
    for stream in ["B.X", "A"] {
        for sequence in 1..=62 {
            for published_ns in [5, 9] {
                older.push(letter(stream, sequence, published_ns));
            }
        }
    }
    older.push(letter("A", 100, 1));
    older.push(letter("B.X", 100, 1));
    assert_eq!(older.len(), 250);
    app.store
        .insert_dead_letters(&tenant, &older)
        .await
        .expect("dead letters");
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let newer: Vec<NewDeadLetter> = (1..=10).map(|n| letter("C", n, 1)).collect();
    app.store
        .insert_dead_letters(&tenant, &newer)
        .await
        .expect("dead letters");

    let mut expected: Vec<String> = (1..=10).rev().map(|n| format!("C {n} 1")).collect();
    let mut ties: Vec<&NewDeadLetter> = older.iter().collect();
    ties.sort_by(|a, b| {
        a.stream
            .cmp(&b.stream)
            .then(b.stream_sequence.cmp(&a.stream_sequence))
            .then(b.published_ns.cmp(&a.published_ns))
    });
    expected.extend(ties.iter().map(|l| l.detail.clone()));
    let first = app.get("/deadletters").await;
    assert_eq!(
        first.body["dead_letters"].as_array().map(Vec::len),
        Some(100)
    );
    let (all, pages) = walk(&app, "/deadletters", "dead_letters", None).await;
    assert_eq!((texts(&all, "detail"), pages), (expected.clone(), 3));
    let (all, pages) = walk(&app, "/deadletters", "dead_letters", Some(13)).await;
    assert_eq!((texts(&all, "detail"), pages), (expected, 20));
    app.assert_bad_parameters(
        "/deadletters",
        &[
            ("limit=0", "limit"),
            ("limit=101", "limit"),
            ("cursor=nonsense", "cursor"),
            ("cursor=1.2.x.A", "cursor"),
            ("cursor=1.2", "cursor"),
        ],
    )
    .await;
}

/// Six dead letters of 1 MiB each: a page holds the four that fit its 4 MiB budget
/// (`DEAD_LETTERS_PAGE_BYTES_MAX`), however large `limit`, and its cursor goes on to the
/// other two. Before, one page held them all (each answered twice: base64 and text).
async fn a_page_of_dead_letters_stops_at_its_byte_budget(backend: Backend) {
    let app = spawn_app(backend).await;
    let tenant = app.tenant().await;
    let letters: Vec<NewDeadLetter> = (1..=6)
        .map(|sequence| NewDeadLetter {
            stream: "BIG".to_string(),
            stream_sequence: sequence,
            published_ns: 1,
            subject: "traqlyte.nope".to_string(),
            reason: "unknown_contract".to_string(),
            detail: format!("letter {sequence}"),
            raw: vec![b'x'; 1024 * 1024],
        })
        .collect();
    app.store
        .insert_dead_letters(&tenant, &letters)
        .await
        .expect("dead letters");
    assert_eq!(traqlyte_store::DEAD_LETTERS_PAGE_BYTES_MAX, 4 * 1024 * 1024);
    let first = app.get("/deadletters?limit=100").await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    let listed = |page: &Value| texts(page["dead_letters"].as_array().expect("a list"), "detail");
    assert_eq!(
        listed(&first.body),
        ["letter 6", "letter 5", "letter 4", "letter 3"]
    );
    let cursor = first.body["next_cursor"].as_str().expect("a next page");
    let second = app
        .send(
            app.client
                .get(app.url("/deadletters"))
                .query(&[("limit", "100"), ("cursor", cursor)])
                .bearer_auth(&app.key),
        )
        .await;
    assert_eq!(listed(&second.body), ["letter 2", "letter 1"]);
    assert!(
        second.body.get("next_cursor").is_none(),
        "{}",
        second.body["next_cursor"]
    );
}

/// Six contracts whose descriptions are 1,020,000 bytes each (340,000 `€`; a body of
/// 1 MiB holds one): the default page of `GET /contracts` holds the four that fit its
/// 4 MiB budget (`CONTRACTS_PAGE_BYTES_MAX`, in bytes, not characters) and its cursor
/// goes on to the other two. Before, a page held a thousand such contracts, a gigabyte
/// answered at once (a review).
async fn a_page_of_contracts_stops_at_its_byte_budget(backend: Backend) {
    let app = spawn_app(backend).await;
    let description = "€".repeat(340_000);
    for n in 1..=6 {
        let contract = json!({
            "name": format!("big_{n}"), "version": 1,
            "fields": [{"pointer": "/id"}], "description": description,
        });
        app.register_contract(&contract).await;
    }
    assert_eq!(traqlyte_store::CONTRACTS_PAGE_BYTES_MAX, 4 * 1024 * 1024);
    let names = |page: &Value| texts(page["contracts"].as_array().expect("a list"), "name");
    let first = app.get("/contracts").await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    assert_eq!(names(&first.body), ["big_1", "big_2", "big_3", "big_4"]);
    let cursor = first.body["next_cursor"].as_str().expect("a next page");
    let second = app
        .send(
            app.client
                .get(app.url("/contracts"))
                .query(&[("cursor", cursor)])
                .bearer_auth(&app.key),
        )
        .await;
    assert_eq!(second.status, StatusCode::OK, "{}", second.body);
    assert_eq!(names(&second.body), ["big_5", "big_6"]);
    assert!(
        second.body.get("next_cursor").is_none(),
        "{}",
        second.body["next_cursor"]
    );
}

/// 130 collisions of one contract, logged by one batch (one arrival time: their ids
/// order them), and one of another contract: 100 a page by default, newest first, each
/// once, the same as `GET /ops/collisions` lists for the contract.
async fn a_contracts_collisions_are_listed_in_pages_newest_first(backend: Backend) {
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    let orders: Vec<Value> = (0..130)
        .map(|i| checkout_event(&format!("o-{i}")))
        .collect();
    let changed: Vec<Value> = orders
        .iter()
        .map(|event| {
            let mut event = event.clone();
            event["note"] = json!("other content");
            event
        })
        .collect();
    for batch in [&orders, &changed] {
        let answer = app
            .post_json("/events/checkout_completed/batch", &json!(batch))
            .await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    }
    let other = json!({"name": "other", "version": 1, "fields": [{"pointer": "/id"}]});
    app.register_contract(&other).await;
    for note in ["a", "b"] {
        app.post_json("/events/other", &json!({"id": 1, "note": note}))
            .await;
    }

    let (by_ops, _) = walk(
        &app,
        "/ops/collisions?contract=checkout_completed",
        "collisions",
        Some(200),
    )
    .await;
    let expected = texts(&by_ops, "collision_id");
    assert_eq!(expected.len(), 130);
    let path = "/contracts/checkout_completed/collisions";
    let first = app.get(path).await;
    assert_eq!(first.body["collisions"].as_array().map(Vec::len), Some(100));
    assert_eq!(first.body["contract"], "checkout_completed");
    let (all, pages) = walk(&app, path, "collisions", None).await;
    assert_eq!((texts(&all, "collision_id"), pages), (expected.clone(), 2));
    let (all, pages) = walk(&app, path, "collisions", Some(40)).await;
    assert_eq!((texts(&all, "collision_id"), pages), (expected, 4));
    app.assert_bad_parameters(
        path,
        &[
            ("limit=0", "limit"),
            ("limit=201", "limit"),
            ("cursor=zzz", "cursor"),
            ("cursor=12", "cursor"),
        ],
    )
    .await;
}

//! Tenants and their API keys: several keys per tenant, listing by prefix, revocation
//! that every server process honours at once, the admin routes and the CLI.

use std::process::{Command, Output};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use traqlyte_server::ServerConfig;

use crate::helpers::{spawn_app, spawn_app_with, Answer, Backend, ServerProcess, TestApp, TestDb};

const ADMIN_TOKEN: &str = "admin-token-for-tests-0123456789abcdef0123456789";

crate::on_both_backends!(
    several_keys_of_one_tenant_all_work,
    creating_a_tenant_over_http_answers_its_first_key_once,
    the_key_list_shows_prefixes_and_never_the_keys,
    a_key_revoked_through_one_server_process_is_refused_at_once_by_another,
    a_revoked_key_stores_nothing_through_a_server_that_remembers_it,
    revoking_a_key_twice_answers_the_first_revocation,
    admin_routes_refuse_no_token_a_wrong_token_and_a_tenant_key,
    admin_routes_are_not_found_without_a_configured_token,
    bad_admin_input_gets_a_clear_error_and_writes_nothing,
    the_cli_creates_lists_and_revokes_keys_by_prefix,
    the_cli_refuses_unknown_empty_and_taken_tenant_names,
    the_cli_refuses_an_ambiguous_tenant_name_and_accepts_the_id,
    a_body_that_arrives_after_its_keys_revocation_stores_nothing,
    with_group_commit_off_a_single_write_whose_body_outlives_its_key_stores_nothing,
);

async fn admin_app(backend: Backend) -> TestApp {
    let config = ServerConfig {
        admin_token: Some(ADMIN_TOKEN.to_string()),
        ..ServerConfig::default()
    };
    spawn_app_with(backend, config).await
}

/// An admin request to the app at `base` with `token` (`None`: no Authorization header).
async fn admin_at(
    app: &TestApp,
    base: &str,
    token: Option<&str>,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Answer {
    let mut request = app.client.request(method, format!("{base}{path}"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    app.send(request).await
}

async fn admin(app: &TestApp, method: Method, path: &str, body: Option<Value>) -> Answer {
    admin_at(app, &app.address, Some(ADMIN_TOKEN), method, path, body).await
}

/// `GET /stats` with `key` against `base`: the status says whether the key works.
async fn stats_status(app: &TestApp, base: &str, key: &str) -> StatusCode {
    app.client
        .get(format!("{base}/stats"))
        .bearer_auth(key)
        .send()
        .await
        .expect("request sent")
        .status()
}

async fn new_key(app: &TestApp, tenant: &str) -> String {
    let answer = admin(
        app,
        Method::POST,
        &format!("/admin/tenants/{tenant}/keys"),
        None,
    )
    .await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    answer.body["api_key"]
        .as_str()
        .expect("api_key")
        .to_string()
}

fn prefix_of(key: &str) -> &str {
    &key[..12]
}

async fn several_keys_of_one_tenant_all_work(backend: Backend) {
    let app = admin_app(backend).await;
    let second = new_key(&app, "test tenant").await;
    let third = new_key(&app, "test tenant").await;
    assert_ne!(second, third);
    for key in [&app.key, &second, &third] {
        assert_eq!(stats_status(&app, &app.address, key).await, StatusCode::OK);
    }
    // The scheme's name in any case, then blanks (RFC 9110): the same key; two
    // Authorization headers: refused, whichever comes first.
    let stats = format!("{}/stats", app.address);
    for header in [
        format!("BEARER {second}"),
        format!("bearer\t{second}"),
        format!("Bearer  {second} "),
    ] {
        let answer = app
            .send(
                app.client
                    .get(&stats)
                    .header("authorization", header.as_str()),
            )
            .await;
        assert_eq!(answer.status, StatusCode::OK, "{header:?}: {}", answer.body);
    }
    let twice = app
        .send(
            app.client
                .get(&stats)
                .header("authorization", format!("Bearer {second}"))
                .header("authorization", format!("Bearer {third}")),
        )
        .await;
    assert_eq!(twice.status, StatusCode::UNAUTHORIZED, "{}", twice.body);
    assert_eq!(twice.code(), "unauthorized");
    let listed = admin(&app, Method::GET, "/admin/tenants", None).await;
    assert_eq!(
        listed.body["tenants"][0]["active_keys"],
        json!(3),
        "{}",
        listed.body
    );
}

async fn creating_a_tenant_over_http_answers_its_first_key_once(backend: Backend) {
    let app = admin_app(backend).await;
    let response = app
        .client
        .post(app.url("/admin/tenants"))
        .bearer_auth(ADMIN_TOKEN)
        .body(json!({"name": "acme"}).to_string())
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), StatusCode::CREATED);
    assert_eq!(
        response
            .headers()
            .get("cache-control")
            .map(|v| v.as_bytes()),
        Some(&b"no-store"[..])
    );
    let body: Value = response.json().await.expect("JSON");
    let key = body["api_key"].as_str().expect("api_key").to_string();
    // A UI login link is a secret too: never kept by a cache.
    let link = app
        .client
        .post(app.url("/ui/tokens"))
        .bearer_auth(&key)
        .body("{}")
        .send()
        .await
        .expect("sent");
    assert_eq!(link.status(), StatusCode::CREATED);
    assert_eq!(
        link.headers().get("cache-control").map(|v| v.as_bytes()),
        Some(&b"no-store"[..])
    );
    assert_eq!(body["tenant"]["name"], "acme");
    assert_eq!(body["tenant"]["active_keys"], json!(1));
    assert_eq!(body["key"]["prefix"], json!(prefix_of(&key)));
    assert_eq!(body["key"]["revoked_at"], Value::Null);
    assert_eq!(stats_status(&app, &app.address, &key).await, StatusCode::OK);
    // The key is never shown again.
    let keys = admin(&app, Method::GET, "/admin/tenants/acme/keys", None).await;
    assert!(!keys.body.to_string().contains(&key), "{}", keys.body);
}

async fn the_key_list_shows_prefixes_and_never_the_keys(backend: Backend) {
    let app = admin_app(backend).await;
    let second = new_key(&app, "test tenant").await;
    let answer = admin(&app, Method::GET, "/admin/tenants/test tenant/keys", None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let text = answer.body.to_string();
    for key in [&app.key, &second] {
        assert!(!text.contains(key.as_str()), "a key leaked: {text}");
        assert!(text.contains(prefix_of(key)), "{text}");
    }
    let keys = answer.body["keys"].as_array().expect("keys");
    assert_eq!(keys.len(), 2);
    // Oldest first.
    assert_eq!(keys[0]["prefix"], json!(prefix_of(&app.key)));
    assert_eq!(keys[1]["prefix"], json!(prefix_of(&second)));
    assert_eq!(answer.body["tenant"]["name"], "test tenant");
}

async fn a_key_revoked_through_one_server_process_is_refused_at_once_by_another(backend: Backend) {
    let app = spawn_app(backend).await;
    let token_file = TokenFile::new(ADMIN_TOKEN);
    let flags = ["--admin-token-file", token_file.path()];
    let one = ServerProcess::start(app.database_url(), &flags);
    let other = ServerProcess::start(app.database_url(), &flags);
    let key = &key_created_through(&app, &one).await;
    // The other process has already authenticated the key (and would hold it in any
    // cache it had) before the revocation.
    assert_eq!(
        stats_status(&app, &other.address, key).await,
        StatusCode::OK
    );
    let revoked = key_revoked_through(&app, &one, key).await;
    assert_eq!(revoked.status, StatusCode::OK, "{}", revoked.body);
    assert!(
        revoked.body["key"]["revoked_at"].is_string(),
        "{}",
        revoked.body
    );
    assert_eq!(
        stats_status(&app, &other.address, key).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        stats_status(&app, &one.address, key).await,
        StatusCode::UNAUTHORIZED
    );
    // The tenant's other key is untouched.
    assert_eq!(
        stats_status(&app, &other.address, &app.key).await,
        StatusCode::OK
    );
}

/// Group commit answers a key it has seen work from the server's memory and re-checks it in
/// the batch's transaction (`crates/server/src/lookups.rs`): after a revocation through
/// another process, every single-write route of the remembering process is a 401 at once
/// (a new event, run event, assignment and outcome, a known unit's read-only assignment,
/// an invalid body) and nothing of them is stored.
async fn a_revoked_key_stores_nothing_through_a_server_that_remembers_it(backend: Backend) {
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    let campaign = crate::experiments::published_campaign(&app, [50, 50]).await;
    let token_file = TokenFile::new(ADMIN_TOKEN);
    let flags = [
        "--admin-token-file",
        token_file.path(),
        "--group-commit",
        "on",
    ];
    let one = ServerProcess::start(app.database_url(), &flags);
    let other = ServerProcess::start(app.database_url(), &flags);
    let post = |key: &str, path: &'static str, body: Value| {
        let (client, url, key) = (
            app.client.clone(),
            format!("{}{path}", other.address),
            key.to_string(),
        );
        async move {
            let response = client
                .post(url)
                .bearer_auth(key)
                .body(body.to_string())
                .send()
                .await
                .expect("request sent");
            let status = response.status();
            (
                status,
                response.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    let unit = |id: &str| json!({"campaign_id": campaign, "unit_id": id});
    // One key per refused request below, each remembered by `other` through a write of
    // its own: every refused request is then the first of its key after the revocation,
    // and must be refused by its own route's check (a refusal by one route's batch makes
    // the server forget that key, so one key for all would test the first route only).
    let (_, known) = post(&app.key, "/assignments", unit("known")).await;
    let refused = [
        (
            "/events/checkout_completed",
            crate::helpers::checkout_event("after"),
        ),
        ("/events/checkout_completed", json!({"not": "a checkout"})),
        (
            "/api/v1/lineage",
            crate::lineage::run_event("job", 2, &["in"], &["out"]),
        ),
        ("/assignments", unit("new")),
        ("/assignments", unit("known")),
        (
            "/outcome",
            crate::experiments::outcome(&known, "order-2", "purchase", None),
        ),
    ];
    let mut keys = Vec::new();
    for (index, (path, _)) in refused.iter().enumerate() {
        let key = key_created_through(&app, &one).await;
        let warm = match *path {
            "/api/v1/lineage" => (
                "/api/v1/lineage",
                crate::lineage::run_event("job", 1, &["in"], &["out"]),
            ),
            "/assignments" => ("/assignments", unit(&format!("warm-{index}"))),
            "/outcome" => (
                "/outcome",
                crate::experiments::outcome(&known, "order-1", "purchase", None),
            ),
            _ => (
                "/events/checkout_completed",
                crate::helpers::checkout_event(&format!("before-{index}")),
            ),
        };
        let (status, answer) = post(&key, warm.0, warm.1).await;
        assert!(status.is_success(), "{}: {status} {answer}", warm.0);
        keys.push(key);
    }
    let counts_before = stored_counts(&app, &campaign).await;
    // The warm-up outcome is counted: the read below sees outcomes at all.
    assert_eq!(counts_before.3, 1, "{counts_before:?}");

    for key in &keys {
        let revoked = key_revoked_through(&app, &one, key).await;
        assert_eq!(revoked.status, StatusCode::OK, "{}", revoked.body);
    }
    for ((path, body), key) in refused.into_iter().zip(&keys) {
        let (status, answer) = post(key, path, body).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}: {answer}");
        assert_eq!(answer["error"]["code"], "unauthorized", "{path}: {answer}");
    }
    assert_eq!(stored_counts(&app, &campaign).await, counts_before);
}

/// A write whose headers (and its key) arrived before the key's revocation, and whose
/// body arrived after the revocation returned, is refused (`401`) and stores nothing: a
/// batch of events, a contract, and a Segment batch with its write key in Basic auth.
/// The key is asked again once the body is in (a review trickled bodies in over 20 s:
/// each was stored after its revocation had returned).
async fn a_body_that_arrives_after_its_keys_revocation_stores_nothing(backend: Backend) {
    let config = ServerConfig {
        admin_token: Some(ADMIN_TOKEN.to_string()),
        late_events: traqlyte_store::LateEvents::Reconcile,
        ..ServerConfig::default()
    };
    let app = spawn_app_with(backend, config).await;
    app.register_checkout_contract().await;
    let before = app.get("/stats").await.body;
    let events = json!([
        crate::helpers::checkout_event("late-1"),
        crate::helpers::checkout_event("late-2")
    ]);
    let mut contract = crate::helpers::checkout_contract();
    contract["name"] = json!("late_contract");
    for (path, body) in [
        ("/events/checkout_completed/batch", events),
        ("/contracts", contract),
    ] {
        let status = revoked_while_the_body_arrives(&app, path, "", &body.to_string()).await;
        assert_eq!(status, 401, "{path}");
    }
    // A single assignment under an idempotency key: the layer resolves the tenant, so no
    // group-committed batch checks the key; the handler asks again after the body.
    let campaign = crate::experiments::published_campaign(&app, [50, 50]).await;
    let unit = json!({"campaign_id": campaign, "unit_id": "late-unit"}).to_string();
    let idempotent = "X-TL-Idempotency-Key: late-assignment\r\n";
    let status = revoked_while_the_body_arrives(&app, "/assignments", idempotent, &unit).await;
    assert_eq!(status, 401, "/assignments under an idempotency key");
    let report = app.get(&format!("/campaigns/{campaign}/report")).await;
    let units: u64 = report.body["arms"]
        .as_array()
        .expect("arms")
        .iter()
        .map(|arm| arm["units"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(units, 0, "{}", report.body);
    let write_key = crate::segment::create_source(&app, "web");
    let basic = format!(
        "Basic {}",
        base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            format!("{write_key}:")
        )
    );
    let message = crate::segment::track("m-late", "user-1", "order-1", 1.0);
    let body = json!({"batch": [message]}).to_string();
    let half = slow_post(&app, "/v1/batch", &basic, &body).await;
    let revoked = crate::segment::traqlyte(
        &app,
        &["source", "revoke", "--tenant", "test tenant", "web"],
    );
    assert!(revoked.status.success(), "{revoked:?}");
    assert_eq!(half.finish().await, 401, "/v1/batch");
    let after = app.get("/stats").await.body;
    assert_eq!(after["contracts"], before["contracts"], "nothing stored");
    let contract = app.get("/contracts/late_contract").await;
    assert_eq!(contract.status, StatusCode::NOT_FOUND, "{}", contract.body);
}

/// With group commit off no batch re-checks a single write's key: each single route reads
/// it again once the body is in (`WriteTenant::confirm_unchecked`), so an event, a run
/// event and an outcome whose bodies arrive after the revocation are refused and stored
/// nowhere.
async fn with_group_commit_off_a_single_write_whose_body_outlives_its_key_stores_nothing(
    backend: Backend,
) {
    let config = ServerConfig {
        admin_token: Some(ADMIN_TOKEN.to_string()),
        late_events: traqlyte_store::LateEvents::Reconcile,
        group_commit: traqlyte_server::GroupCommitConfig::disabled(),
        ..ServerConfig::default()
    };
    let app = spawn_app_with(backend, config).await;
    app.register_checkout_contract().await;
    let campaign = crate::experiments::published_campaign(&app, [50, 50]).await;
    let assigned = app
        .post_json(
            "/assignments",
            &json!({"campaign_id": campaign, "unit_id": "u-1"}),
        )
        .await;
    assert_eq!(assigned.status, StatusCode::OK, "{}", assigned.body);
    let assignment = assigned.body.clone();
    let before = (
        app.get("/stats").await.body,
        app.get(&format!("/campaigns/{campaign}/report")).await.body,
    );
    for (path, body) in [
        (
            "/events/checkout_completed",
            crate::helpers::checkout_event("slow-1"),
        ),
        (
            "/api/v1/lineage",
            crate::lineage::run_event("slow_job", 1, &["in"], &["out"]),
        ),
        (
            "/outcome",
            crate::experiments::outcome(&assignment, "order-slow", "purchase", None),
        ),
    ] {
        let status = revoked_while_the_body_arrives(&app, path, "", &body.to_string()).await;
        assert_eq!(status, 401, "{path}");
    }
    let after = (
        app.get("/stats").await.body,
        app.get(&format!("/campaigns/{campaign}/report")).await.body,
    );
    assert_eq!(
        after.0["contracts"], before.0["contracts"],
        "no event stored"
    );
    assert_eq!(after.1["arms"], before.1["arms"], "no outcome stored");
    let graph = app.get("/lineage/stats").await;
    assert_eq!(graph.body["runs"], 0, "{}", graph.body);
}

/// Sends `path`'s headers (with `extra` header lines) and half its `body` under a new key
/// of the test tenant, revokes the key, then sends the rest: the answer's status.
async fn revoked_while_the_body_arrives(app: &TestApp, path: &str, extra: &str, body: &str) -> u16 {
    let key = new_key(app, "test tenant").await;
    let half = slow_post_with(app, path, &format!("Bearer {key}"), extra, body).await;
    let revoked = admin(
        app,
        Method::DELETE,
        &format!("/admin/tenants/test tenant/keys/{}", prefix_of(&key)),
        None,
    )
    .await;
    assert_eq!(revoked.status, StatusCode::OK, "{}", revoked.body);
    half.finish().await
}

/// A POST whose headers and first half of body are sent; [`HalfSent::finish`] sends the
/// rest and reads the answer's status.
struct HalfSent {
    stream: tokio::net::TcpStream,
    rest: Vec<u8>,
}

impl HalfSent {
    async fn finish(mut self) -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        self.stream
            .write_all(&self.rest)
            .await
            .expect("the rest of the body");
        let mut answer = Vec::new();
        self.stream
            .read_to_end(&mut answer)
            .await
            .expect("the answer");
        let text = String::from_utf8_lossy(&answer);
        text.split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }
}

/// Sends `path`'s headers and half of `body`, then waits until the server has surely
/// read the headers (and checked the key in them).
async fn slow_post(app: &TestApp, path: &str, authorization: &str, body: &str) -> HalfSent {
    slow_post_with(app, path, authorization, "", body).await
}

/// [`slow_post`] with `extra` header lines (each ending in `\r\n`).
async fn slow_post_with(
    app: &TestApp,
    path: &str,
    authorization: &str,
    extra: &str,
    body: &str,
) -> HalfSent {
    use tokio::io::AsyncWriteExt;
    let address = app.address.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connect");
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: {authorization}\r\n{extra}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let (first, rest) = body.as_bytes().split_at(body.len() / 2);
    stream.write_all(head.as_bytes()).await.expect("headers");
    stream.write_all(first).await.expect("half the body");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    HalfSent {
        stream,
        rest: rest.to_vec(),
    }
}

/// `DELETE /admin/tenants/test tenant/keys/{prefix of key}` through `server`.
async fn key_revoked_through(app: &TestApp, server: &ServerProcess, key: &str) -> Answer {
    let path = format!("/admin/tenants/test tenant/keys/{}", prefix_of(key));
    admin_at(
        app,
        &server.address,
        Some(ADMIN_TOKEN),
        Method::DELETE,
        &path,
        None,
    )
    .await
}

/// A new key of "test tenant", created through the admin API of `server`.
async fn key_created_through(app: &TestApp, server: &ServerProcess) -> String {
    let created = admin_at(
        app,
        &server.address,
        Some(ADMIN_TOKEN),
        Method::POST,
        "/admin/tenants/test tenant/keys",
        None,
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let key = created.body["api_key"].as_str().expect("api_key");
    key.to_string()
}

/// Stored checkout events, stored run events, assigned units and counted outcomes, read
/// with the app's own key.
async fn stored_counts(app: &TestApp, campaign: &str) -> (Value, Value, u64, u64) {
    let stats = app.get("/stats").await;
    assert_eq!(stats.status, StatusCode::OK, "{}", stats.body);
    let contracts = &stats.body["contracts"];
    let report = crate::experiments::report(app, campaign).await;
    let arms = report["arms"].as_array().expect("arms");
    let units = arms.iter().map(|a| a["units"].as_u64().unwrap_or(0)).sum();
    let purchases = arms
        .iter()
        .map(|a| {
            crate::experiments::metric(&report, a["key"].as_str().unwrap_or(""), "purchase")
                ["stored_events"]
                .as_u64()
                .expect("stored_events of purchase")
        })
        .sum();
    (
        contracts["checkout_completed"]["stored"].clone(),
        contracts["openlineage.run_event"]["stored"].clone(),
        units,
        purchases,
    )
}

async fn revoking_a_key_twice_answers_the_first_revocation(backend: Backend) {
    let app = admin_app(backend).await;
    // Named under another tenant, the key is not found there and keeps working.
    let created = admin(
        &app,
        Method::POST,
        "/admin/tenants",
        Some(json!({"name": "other tenant"})),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let elsewhere = format!("/admin/tenants/other tenant/keys/{}", prefix_of(&app.key));
    let refused = admin(&app, Method::DELETE, &elsewhere, None).await;
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::NOT_FOUND, "key_not_found"),
        "{}",
        refused.body
    );
    assert_eq!(
        stats_status(&app, &app.address, &app.key).await,
        StatusCode::OK
    );
    let path = format!("/admin/tenants/test tenant/keys/{}", prefix_of(&app.key));
    let first = admin(&app, Method::DELETE, &path, None).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    let second = admin(&app, Method::DELETE, &path, None).await;
    assert_eq!(second.status, StatusCode::OK, "{}", second.body);
    assert_eq!(first.body, second.body);
    assert_eq!(
        stats_status(&app, &app.address, &app.key).await,
        StatusCode::UNAUTHORIZED
    );
    let listed = admin(&app, Method::GET, "/admin/tenants", None).await;
    let tenants = listed.body["tenants"].as_array().expect("tenants");
    let active = |name: &str| {
        let tenant = tenants.iter().find(|t| t["name"] == name).expect("listed");
        tenant["active_keys"].clone()
    };
    assert_eq!(
        (active("test tenant"), active("other tenant")),
        (json!(0), json!(1))
    );
}

async fn admin_routes_refuse_no_token_a_wrong_token_and_a_tenant_key(backend: Backend) {
    let app = admin_app(backend).await;
    let base = app.address.clone();
    let wrong = "admin-token-for-tests-0123456789abcdef012345678X";
    for token in [None, Some(wrong), Some(app.key.as_str())] {
        for (method, path, body) in [
            (Method::GET, "/admin/tenants", None),
            (
                Method::POST,
                "/admin/tenants",
                Some(json!({"name": "intruder"})),
            ),
            (Method::GET, "/admin/tenants/test tenant/keys", None),
            (Method::POST, "/admin/tenants/test tenant/keys", None),
        ] {
            let answer = admin_at(&app, &base, token, method.clone(), path, body).await;
            assert_eq!(
                (answer.status, answer.code()),
                (StatusCode::UNAUTHORIZED, "unauthorized"),
                "{method} {path} with {token:?}: {}",
                answer.body
            );
        }
    }
    let revoke = format!("/admin/tenants/test tenant/keys/{}", prefix_of(&app.key));
    let answer = admin_at(&app, &base, Some(&app.key), Method::DELETE, &revoke, None).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    assert!(
        answer.body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("tenant API key"),
        "{}",
        answer.body
    );
    // Nothing was written: one tenant, its one key still working.
    let tenants = app.store.tenants().await.expect("tenants");
    assert_eq!(tenants.len(), 1);
    assert_eq!(tenants[0].active_keys, 1);
    assert_eq!(stats_status(&app, &base, &app.key).await, StatusCode::OK);
}

async fn admin_routes_are_not_found_without_a_configured_token(backend: Backend) {
    let app = spawn_app(backend).await;
    for token in [None, Some(ADMIN_TOKEN), Some(app.key.as_str())] {
        let answer = admin_at(
            &app,
            &app.address,
            token,
            Method::GET,
            "/admin/tenants",
            None,
        )
        .await;
        assert_eq!(
            (answer.status, answer.code()),
            (StatusCode::NOT_FOUND, "admin_disabled")
        );
    }
}

async fn bad_admin_input_gets_a_clear_error_and_writes_nothing(backend: Backend) {
    let app = admin_app(backend).await;
    let cases: Vec<(Method, String, Option<Value>, StatusCode, &str)> = vec![
        (
            Method::POST,
            "/admin/tenants".into(),
            Some(json!({"name": ""})),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_tenant",
        ),
        (
            Method::POST,
            "/admin/tenants".into(),
            Some(json!({"name": "   "})),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_tenant",
        ),
        (
            Method::POST,
            "/admin/tenants".into(),
            Some(json!({})),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_tenant",
        ),
        (
            Method::POST,
            "/admin/tenants".into(),
            Some(json!({"name": 7})),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_tenant",
        ),
        (
            Method::POST,
            "/admin/tenants".into(),
            Some(json!({"name": "a", "plan": "gold"})),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_tenant",
        ),
        (
            Method::POST,
            "/admin/tenants".into(),
            Some(json!({"name": "test tenant"})),
            StatusCode::CONFLICT,
            "tenant_exists",
        ),
        (
            Method::POST,
            "/admin/tenants".into(),
            None,
            StatusCode::BAD_REQUEST,
            "empty_body",
        ),
        (
            Method::GET,
            "/admin/tenants/nobody/keys".into(),
            None,
            StatusCode::NOT_FOUND,
            "tenant_not_found",
        ),
        (
            Method::POST,
            "/admin/tenants/nobody/keys".into(),
            None,
            StatusCode::NOT_FOUND,
            "tenant_not_found",
        ),
        (
            Method::DELETE,
            "/admin/tenants/nobody/keys/tlk_00000000".into(),
            None,
            StatusCode::NOT_FOUND,
            "tenant_not_found",
        ),
        (
            Method::DELETE,
            "/admin/tenants/test tenant/keys/tlk_00000000".into(),
            None,
            StatusCode::NOT_FOUND,
            "key_not_found",
        ),
        (
            Method::DELETE,
            "/admin/tenants/test tenant/keys/tlk_xyz".into(),
            None,
            StatusCode::BAD_REQUEST,
            "invalid_key_prefix",
        ),
    ];
    for (method, path, body, status, code) in cases {
        let answer = admin(&app, method.clone(), &path, body.clone()).await;
        assert_eq!(
            (answer.status, answer.code()),
            (status, code),
            "{method} {path} {body:?}: {}",
            answer.body
        );
        assert!(answer.body["error"]["message"].is_string());
    }
    // A retry protected by an idempotency key would store the new key in clear: refused.
    let refused = app
        .send(
            app.client
                .post(app.url("/admin/tenants"))
                .bearer_auth(ADMIN_TOKEN)
                .header("Idempotency-Key", "k1")
                .body(json!({"name": "acme"}).to_string()),
        )
        .await;
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::BAD_REQUEST, "idempotency_not_supported")
    );
    let tenants = app.store.tenants().await.expect("tenants");
    assert_eq!(tenants.len(), 1, "{tenants:?}");
    let keys = app
        .store
        .api_keys(&tenants[0].tenant_id)
        .await
        .expect("keys");
    assert_eq!(keys.len(), 1);
    assert_eq!(keys[0].revoked_at_us, None);
}

async fn the_cli_creates_lists_and_revokes_keys_by_prefix(backend: Backend) {
    let db = TestDb::create(backend).await;
    let first = single_line(traqlyte(&["tenant", "create", "acme"], &db));
    let second = single_line(traqlyte(&["key", "create", "--tenant", "acme"], &db));
    for key in [&first, &second] {
        assert!(key.starts_with("tlk_") && key.len() == 52, "{key}");
    }
    let listed = stdout(traqlyte(&["key", "list", "--tenant", "acme"], &db));
    assert!(
        !listed.contains(&first) && !listed.contains(&second),
        "{listed}"
    );
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 2, "{listed}");
    assert!(
        lines[0].starts_with(&format!("{}\t", prefix_of(&first))),
        "{listed}"
    );
    assert!(
        lines[1].starts_with(&format!("{}\t", prefix_of(&second))),
        "{listed}"
    );
    assert!(lines.iter().all(|l| l.ends_with("\tactive")), "{listed}");

    let revoked = stdout(traqlyte(
        &["key", "revoke", "--tenant", "acme", prefix_of(&first)],
        &db,
    ));
    assert!(revoked.contains("revoked"), "{revoked}");
    // The whole key names it too, and a second revocation changes nothing.
    let again = stdout(traqlyte(
        &["key", "revoke", "--tenant", "acme", &first],
        &db,
    ));
    assert_eq!(again, revoked);
    let listed = stdout(traqlyte(&["key", "list", "--tenant", "acme"], &db));
    assert!(
        listed
            .lines()
            .next()
            .unwrap_or_default()
            .contains("\trevoked "),
        "{listed}"
    );
    let tenants = stdout(traqlyte(&["tenant", "list"], &db));
    let row: Vec<&str> = tenants.trim_end().split('\t').collect();
    assert_eq!((row[1], row[3]), ("acme", "1"), "{tenants}");

    let store = traqlyte_store::Store::connect(&traqlyte_store::StoreConfig::new(&db.url))
        .await
        .expect("connect");
    for (key, works) in [(&first, false), (&second, true)] {
        let key = traqlyte_store::ApiKey::parse(key).expect("key");
        let tenant = store.tenant_for_key(&key).await.expect("lookup");
        assert_eq!(tenant.is_some(), works);
    }
}

async fn the_cli_refuses_unknown_empty_and_taken_tenant_names(backend: Backend) {
    let db = TestDb::create(backend).await;
    single_line(traqlyte(&["tenant", "create", "acme"], &db));
    for (args, says) in [
        (vec!["tenant", "create", "acme"], "exists already"),
        (vec!["tenant", "create", "  "], "must not be empty"),
        (
            vec!["key", "create", "--tenant", "nobody"],
            "no tenant named",
        ),
        (vec!["key", "list", "--tenant", "nobody"], "no tenant named"),
        (
            vec!["key", "revoke", "--tenant", "acme", "tlk_00000000"],
            "has no key",
        ),
        (
            vec!["key", "revoke", "--tenant", "acme", "not-a-key"],
            "prefix",
        ),
    ] {
        let output = traqlyte(&args, &db);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} succeeded");
        assert!(output.stdout.is_empty(), "{args:?} printed {output:?}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    // Another tenant's whole key named under acme: refused, and only its prefix is
    // repeated (the message lands in logs; the key is still that tenant's live key).
    let other = single_line(traqlyte(&["tenant", "create", "umbrella"], &db));
    let output = traqlyte(&["key", "revoke", "--tenant", "acme", &other], &db);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{output:?}");
    assert!(stderr.contains(prefix_of(&other)), "{stderr}");
    assert!(
        !stderr.contains(&other),
        "the whole key was repeated: {stderr}"
    );
    let tenants = stdout(traqlyte(&["tenant", "list"], &db));
    assert_eq!(tenants.lines().count(), 2, "{tenants}");
    let keys = stdout(traqlyte(&["key", "list", "--tenant", "acme"], &db));
    assert_eq!(keys.lines().count(), 1, "{keys}");
    assert!(keys.trim_end().ends_with("\tactive"), "{keys}");
}

async fn the_cli_refuses_an_ambiguous_tenant_name_and_accepts_the_id(backend: Backend) {
    let db = TestDb::create(backend).await;
    single_line(traqlyte(&["tenant", "create", "acme"], &db));
    // A database from before names were unique may hold two tenants of one name.
    let store = traqlyte_store::Store::connect(&traqlyte_store::StoreConfig::new(&db.url))
        .await
        .expect("connect");
    insert_legacy_tenant(&db.url, "tn_0123456789abcdef", "acme").await;
    let output = traqlyte(&["key", "create", "--tenant", "acme"], &db);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success() && output.stdout.is_empty());
    assert!(
        stderr.contains("several tenants") && stderr.contains("tn_0123456789abcdef"),
        "{stderr}"
    );
    let key = single_line(traqlyte(
        &["key", "create", "--tenant", "tn_0123456789abcdef"],
        &db,
    ));
    let parsed = traqlyte_store::ApiKey::parse(&key).expect("key");
    let tenant = store.tenant_for_key(&parsed).await.expect("lookup");
    assert_eq!(
        tenant.map(|t| t.to_string()).as_deref(),
        Some("tn_0123456789abcdef")
    );
}

/// Writes a tenant row directly, as an older version could have.
async fn insert_legacy_tenant(url: &str, tenant_id: &str, name: &str) {
    use sqlx::Connection;
    let sql = "INSERT INTO tenants (tenant_id, name, created_at_us) VALUES ($1, $2, 0)";
    if url.starts_with("postgres") {
        let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
        sqlx::query(sql)
            .bind(tenant_id)
            .bind(name)
            .execute(&mut conn)
            .await
            .expect("insert");
    } else {
        let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{url}"))
            .await
            .expect("connect");
        sqlx::query(&sql.replace('$', "?"))
            .bind(tenant_id)
            .bind(name)
            .execute(&mut conn)
            .await
            .expect("insert");
    }
}

fn traqlyte(args: &[&str], db: &TestDb) -> Output {
    Command::new(env!("CARGO_BIN_EXE_traqlyte"))
        .args(args)
        .args(["--database-url", &db.url])
        .output()
        .expect("run traqlyte")
}

fn stdout(output: Output) -> String {
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).expect("utf-8")
}

/// The one line a command printed (a new key).
fn single_line(output: Output) -> String {
    let text = stdout(output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    lines[0].to_string()
}

/// The admin token in a file, removed on drop.
struct TokenFile(std::path::PathBuf);

impl TokenFile {
    fn new(token: &str) -> TokenFile {
        static COUNTER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "traqlyte_it_{}_{n}_admin_token",
            std::process::id()
        ));
        std::fs::write(&path, format!("{token}\n")).expect("write token file");
        TokenFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("utf-8 path")
    }
}

impl Drop for TokenFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn serve_refuses_a_short_admin_token_and_one_shaped_like_a_tenant_key() {
    let tenant_key = format!("tlk_{}", "0".repeat(48));
    for (token, says) in [
        ("short", "shorter than"),
        (tenant_key.as_str(), "tenant API key"),
        (
            "a token with spaces in it, long enough to pass",
            "printable ASCII",
        ),
    ] {
        let file = TokenFile::new(token);
        let output = Command::new(env!("CARGO_BIN_EXE_traqlyte"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--admin-token-file",
                file.path(),
            ])
            .args(["--database-url", "sqlite::memory:"])
            .output()
            .expect("run traqlyte");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{token}: {output:?}");
        assert!(stderr.contains(says), "{token}: {stderr}");
    }
}

/// Every 401 carries the challenge RFC 9110 requires (Java's HttpClient, given an
/// authenticator, throws on a 401 without one instead of handing the answer over).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unauthorized_answer_carries_a_bearer_challenge() {
    let app = crate::helpers::spawn_app(crate::helpers::Backend::Sqlite).await;
    let wrong = format!("tlk_{}", "0123456789abcdef".repeat(3));
    for key in [None, Some(wrong.as_str())] {
        let mut request = app.client.get(app.url("/stats"));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        let answer = request.send().await.expect("sent");
        assert_eq!(answer.status(), StatusCode::UNAUTHORIZED, "{key:?}");
        assert_eq!(
            answer
                .headers()
                .get("www-authenticate")
                .and_then(|v| v.to_str().ok()),
            Some("Bearer realm=\"traqlyte\""),
            "{key:?}"
        );
    }
}

//! The NATS JetStream consumer (`traqlyte consume nats`, run as an OS process) against
//! real JetStream: private `nats-server` processes (`nats_server.rs`), one server or a
//! 3-node cluster. Every message published is stored exactly once, whatever is
//! redelivered, re-published with a fresh `Nats-Msg-Id`, or killed mid-way.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use reqwest::StatusCode;
use serde_json::Value;

use crate::helpers::{checkout_event, spawn_app, Backend, TestApp};
use crate::nats_server::{create_stream, jetstream, publish, publish_with, NatsCluster, NatsNode};
use crate::segment::{
    bind, campaign_with_units, create_source, expected_figures, report_figures, segment_stats,
    source_row, track,
};

/// How long counts may take to settle (redeliveries wait for the ack wait).
const SETTLE_WAIT_MS: u64 = 60_000;
/// The ack wait of the consumers these tests create: a crash redelivers after it. Long
/// enough that a batch stored slowly on a loaded machine is not redelivered meanwhile
/// (which would add duplicates to counts the tests expect exactly).
const ACK_WAIT_MS: &str = "5000";
const STREAM: &str = "EVENTS";
const DURABLE: &str = "traqlyte";

/// A `traqlyte consume nats` process, killed (SIGKILL) when dropped.
struct ConsumerProcess {
    child: Child,
    /// The file its log goes to (JSON lines), when started by
    /// [`ConsumerProcess::start_logged`]; else its log goes to the test's output.
    log: Option<PathBuf>,
}

/// Numbers the log files of [`ConsumerProcess::start_logged`] within this test binary.
static LOGS: AtomicUsize = AtomicUsize::new(0);

impl ConsumerProcess {
    fn start(app: &TestApp, url: &str, extra: &[&str], env: &[(&str, &str)]) -> ConsumerProcess {
        Self::spawn(app, url, extra, env, None)
    }

    /// [`ConsumerProcess::start`] with its log written to a file of its own as JSON
    /// lines, read back by [`ConsumerProcess::log_events`].
    fn start_logged(app: &TestApp, url: &str, extra: &[&str]) -> ConsumerProcess {
        let path = std::env::temp_dir().join(format!(
            "traqlyte-it-nats-consumer-{}-{}.log",
            std::process::id(),
            LOGS.fetch_add(1, Ordering::Relaxed)
        ));
        Self::spawn(app, url, extra, &[], Some(path))
    }

    fn spawn(
        app: &TestApp,
        url: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        log: Option<PathBuf>,
    ) -> ConsumerProcess {
        let mut command = Command::new(env!("CARGO_BIN_EXE_traqlyte"));
        command.envs(env.iter().copied()).args(["consume", "nats"]);
        if !extra.contains(&"--database-url") {
            command.args(["--database-url", app.database_url()]);
        }
        command
            .args(["--url", url, "--stream", STREAM, "--durable", DURABLE])
            .args(["--tenant", "test tenant", "--nats-fetch-wait-ms", "200"])
            .args(extra)
            .stdout(Stdio::null());
        if !extra.contains(&"--nats-ack-wait-ms") {
            command.args(["--nats-ack-wait-ms", ACK_WAIT_MS]);
        }
        match &log {
            Some(path) => {
                let file = std::fs::File::create(path).expect("create the consumer's log");
                // The info lines ("consuming", "batch stored") whatever RUST_LOG says.
                command
                    .args(["--log-format", "json"])
                    .env("RUST_LOG", "info,sqlx=warn")
                    .stderr(Stdio::from(file));
            }
            // Its log goes to the test's output, shown when a test fails.
            None => {
                command.stderr(Stdio::inherit());
            }
        }
        let child = command.spawn().expect("spawn traqlyte consume nats");
        ConsumerProcess { child, log }
    }

    /// Whether the process has not exited.
    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The text of its log file (empty when it has none).
    fn log_text(&self) -> String {
        self.log
            .as_ref()
            .and_then(|path| std::fs::read_to_string(path).ok())
            .unwrap_or_default()
    }

    /// The `fields` of every complete line of its log whose message is `message`.
    fn log_events(&self, message: &str) -> Vec<Value> {
        self.log_text()
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .map(|line| line["fields"].clone())
            .filter(|fields| fields["message"] == message)
            .collect()
    }

    /// Waits until its log says it consumes (it has bound the durable and pulls); a
    /// process started with [`ConsumerProcess::start_logged`].
    async fn wait_until_consuming(&mut self) {
        let deadline = Instant::now() + Duration::from_millis(SETTLE_WAIT_MS);
        while self.log_events("consuming").is_empty() {
            assert!(
                self.running() && Instant::now() < deadline,
                "the consumer never started consuming: {}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL: no drain, no acks, like a crash.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then the exit status.
    fn terminate(&mut self) -> std::process::ExitStatus {
        crate::helpers::sigterm(&self.child);
        self.child.wait().expect("wait for the consumer")
    }
}

impl Drop for ConsumerProcess {
    fn drop(&mut self) {
        self.kill();
        if let Some(path) = &self.log {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// `(stored, duplicates)` of `checkout_completed`, 0 before any is stored.
async fn counts(app: &TestApp) -> (i64, i64) {
    let answer = app.get("/stats").await;
    assert_eq!(answer.status, StatusCode::OK);
    let row = &answer.body["contracts"]["checkout_completed"];
    let n = |k: &str| row[k].as_i64().unwrap_or(0);
    (n("stored"), n("duplicates"))
}

/// Waits until `check` holds of the counts, or fails naming the last ones.
async fn wait_for(app: &TestApp, what: &str, check: impl Fn((i64, i64)) -> bool) -> (i64, i64) {
    let deadline = Instant::now() + Duration::from_millis(SETTLE_WAIT_MS);
    loop {
        let now = counts(app).await;
        if check(now) {
            return now;
        }
        assert!(Instant::now() < deadline, "{what}: counts stayed {now:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The tenant has no dead letter.
async fn assert_no_dead_letters(app: &TestApp) {
    let dead = app.get("/deadletters").await;
    assert_eq!(
        dead.body["dead_letters"],
        serde_json::json!([]),
        "{}",
        dead.body
    );
}

/// The durable consumer's info as the server has it now.
async fn durable_info(js: &jetstream::Context) -> jetstream::consumer::Info {
    js.get_stream(STREAM)
        .await
        .expect("stream")
        .consumer_info(DURABLE)
        .await
        .expect("consumer info")
}

/// Waits until the durable consumer has nothing pending and nothing awaiting an ack.
async fn wait_until_drained(js: &jetstream::Context) {
    let deadline = Instant::now() + Duration::from_millis(SETTLE_WAIT_MS);
    loop {
        let info = js
            .get_stream(STREAM)
            .await
            .expect("stream")
            .consumer_info(DURABLE)
            .await;
        match info {
            Ok(info) if info.num_pending == 0 && info.num_ack_pending == 0 => return,
            Ok(info) => assert!(
                Instant::now() < deadline,
                "consumer never drained: {} pending, {} unacked",
                info.num_pending,
                info.num_ack_pending
            ),
            Err(err) => assert!(
                Instant::now() < deadline,
                "consumer info never answered: {err}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Publishes orders `0..distinct`, then re-publishes the first `republished` of them with
/// fresh message ids (a publisher retrying past JetStream's dedupe window).
async fn publish_orders(js: &jetstream::Context, distinct: usize, republished: usize) {
    publish_orders_in(js, 0..distinct, "m").await;
    publish_orders_in(js, 0..republished, "again").await;
}

/// Publishes the orders numbered `orders`, each with `Nats-Msg-Id` `{ids}-{i}`.
async fn publish_orders_in(js: &jetstream::Context, orders: std::ops::Range<usize>, ids: &str) {
    for i in orders {
        let body = serde_json::to_vec(&checkout_event(&format!("order-{i}"))).expect("JSON");
        let id = format!("{ids}-{i}");
        publish(js, "traqlyte.checkout_completed", &body, &id).await;
    }
}

/// A fresh app with the checkout contract, a private JetStream server and its stream.
async fn setup(backend: Backend) -> (TestApp, NatsNode, jetstream::Context) {
    let app = spawn_app(backend).await;
    app.register_checkout_contract().await;
    let nats = NatsNode::start();
    let js = jetstream(&nats.url).await;
    create_stream(&js, STREAM, 1).await;
    (app, nats, js)
}

async fn republished_messages_are_stored_once_and_counted_as_duplicates(backend: Backend) {
    let (app, nats, js) = setup(backend).await;
    publish_orders(&js, 40, 10).await;
    let _consumer = ConsumerProcess::start(&app, &nats.url, &[], &[]);
    wait_for(&app, "all stored", |(stored, dups)| {
        stored == 40 && dups == 10
    })
    .await;
    wait_until_drained(&js).await;
    assert_eq!(counts(&app).await, (40, 10));
}

/// A message larger than `--nats-batch-bytes-max` ends every pull of a batch before it
/// (JetStream answers 409 instead of delivering it): it is pulled alone, so it never
/// stops the stream. Here every message is larger than the bound.
async fn messages_larger_than_the_batch_byte_bound_are_pulled_alone(backend: Backend) {
    let (app, nats, js) = setup(backend).await;
    publish_orders(&js, 10, 0).await;
    let _consumer = ConsumerProcess::start(&app, &nats.url, &["--nats-batch-bytes-max", "64"], &[]);
    wait_for(&app, "all stored", |(stored, _)| stored == 10).await;
    wait_until_drained(&js).await;
    assert_eq!(counts(&app).await, (10, 0));
}

/// `serve --nats-*` runs the consumer beside the HTTP API, with the server's own
/// ingestion limits: an event nested deeper than the default 32 levels, accepted by the
/// server's `--json-depth-max 40`, is stored from the stream too, not dead-lettered.
async fn serve_consumes_the_stream_with_its_own_ingestion_limits(backend: Backend) {
    let (app, nats, js) = setup(backend).await;
    publish_orders(&js, 5, 2).await;
    let mut deep = checkout_event("order-deep");
    let mut nested = serde_json::json!("bottom");
    for _ in 0..35 {
        nested = serde_json::json!({ "n": nested });
    }
    deep["extra"] = nested;
    let body = serde_json::to_vec(&deep).expect("JSON");
    publish(&js, "traqlyte.checkout_completed", &body, "m-deep").await;
    let server = crate::helpers::ServerProcess::start(
        app.database_url(),
        &[
            "--nats-url",
            &nats.url,
            "--nats-stream",
            STREAM,
            "--nats-durable",
            DURABLE,
            "--nats-tenant",
            "test tenant",
            "--nats-fetch-wait-ms",
            "200",
            "--json-depth-max",
            "40",
        ],
    );
    wait_for(&app, "all stored", |(stored, dups)| {
        stored == 6 && dups == 2
    })
    .await;
    wait_until_drained(&js).await;
    assert_no_dead_letters(&app).await;
    // A dead letter is counted where an alert can see it (it was in the log and
    // `GET /deadletters` only).
    publish(&js, "traqlyte.checkout_completed", b"{not json", "m-poison").await;
    wait_for_letters(&app, 1).await;
    let samples = crate::metrics::scrape_at(&app, &server.address).await;
    let letters: Vec<_> = samples
        .iter()
        .filter(|s| s.name == "traqlyte_nats_dead_letters_total")
        .map(|s| {
            (
                s.labels["stream"].as_str(),
                s.labels["reason"].as_str(),
                s.value,
            )
        })
        .collect();
    assert_eq!(letters, [(STREAM, "invalid_json", 1.0)]);
}

async fn a_poison_message_is_dead_lettered_and_the_rest_flow(backend: Backend) {
    let (app, nats, js) = setup(backend).await;
    let good = serde_json::to_vec(&checkout_event("order-1")).expect("JSON");
    let missing_order = br#"{"merchant_id":"m"}"#;
    publish(&js, "traqlyte.checkout_completed", b"{not json", "bad-json").await;
    publish(&js, "traqlyte.no_such_contract", &good, "unknown").await;
    publish(
        &js,
        "traqlyte.checkout_completed",
        missing_order,
        "no-order",
    )
    .await;
    // A Segment message, but the consumer names no source to store it under.
    publish(&js, "traqlyte.segment", &good, "segment").await;
    // Older than the consumer's 14-day horizon: a dead letter, as HTTP answers 422,
    // never a store error that would Nak the batch for ever.
    let mut old = checkout_event("order-old");
    old["occurred_at"] = serde_json::json!(traqlyte_identity::format_rfc3339_micros(
        traqlyte_store::now_us() - 20 * 86_400_000_000
    ));
    let old = serde_json::to_vec(&old).expect("JSON");
    publish(&js, "traqlyte.checkout_completed", &old, "old").await;
    // Refused with a detail that quotes a key holding NUL, which PostgreSQL's text cannot
    // store: the letter must still be recorded (NUL replaced), or the batch would be
    // Nak'd and redelivered for ever.
    let nul_key = br#"{"\u0000":9007199254740993}"#;
    publish(&js, "traqlyte.checkout_completed", nul_key, "nul-key").await;
    publish(&js, "traqlyte.checkout_completed", &good, "good").await;
    let _consumer = ConsumerProcess::start(&app, &nats.url, &[], &[]);
    wait_for(&app, "the good one stored", |(stored, _)| stored == 1).await;
    wait_until_drained(&js).await;

    let answer = app.get("/deadletters").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let letters = answer.body["dead_letters"].as_array().expect("a list");
    let mut reasons: Vec<(&str, i64)> = letters
        .iter()
        .map(|l| {
            (
                l["reason"].as_str().unwrap_or(""),
                l["stream_sequence"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    reasons.sort_by_key(|(_, sequence)| *sequence);
    assert_eq!(
        reasons,
        [
            ("invalid_json", 1),
            ("unknown_contract", 2),
            ("missing_required_field", 3),
            ("segment_source_not_configured", 4),
            ("outside_horizon", 5),
            ("invalid_json", 6)
        ]
    );
    let nul = letters
        .iter()
        .find(|l| l["stream_sequence"] == 6)
        .expect("letter 6");
    let detail = nul["detail"].as_str().unwrap_or("");
    assert!(detail.contains("/\u{FFFD}"), "{detail}");
    assert_eq!(nul["raw_text"], r#"{"\u0000":9007199254740993}"#);
    let bad = letters
        .iter()
        .find(|l| l["stream_sequence"] == 1)
        .expect("letter 1");
    assert_eq!(bad["raw_text"], "{not json");
    assert_eq!(bad["raw_base64"], "e25vdCBqc29u");
    assert_eq!(bad["subject"], "traqlyte.checkout_completed");
    assert_eq!(bad["stream"], STREAM);
    // Another tenant sees none of them.
    let other = app.other_tenant_key().await;
    let theirs = app
        .send(app.client.get(app.url("/deadletters")).bearer_auth(other))
        .await;
    assert_eq!(theirs.body["dead_letters"], Value::Array(vec![]));
}

async fn a_consumer_killed_after_commit_before_ack_leaves_each_message_stored_once(
    backend: Backend,
) {
    let (app, nats, js) = setup(backend).await;
    publish_orders(&js, 30, 6).await;
    let hook = [("TRAQLYTE_TEST_ACK_DELAY_MS", "600000")];
    let mut doomed = ConsumerProcess::start(&app, &nats.url, &[], &hook);
    // Committed (all 36 were in its first batch), never acked.
    wait_for(&app, "committed", |(stored, dups)| {
        stored == 30 && dups == 6
    })
    .await;
    doomed.kill();

    let _restarted = ConsumerProcess::start(&app, &nats.url, &[], &[]);
    // Every message of the killed batch comes back after the ack wait: all duplicates.
    wait_for(&app, "redelivered", |(_, dups)| dups == 6 + 36).await;
    wait_until_drained(&js).await;
    assert_eq!(counts(&app).await, (30, 42));
}

async fn two_consumer_processes_on_one_durable_store_each_message_once(backend: Backend) {
    let (app, nats, js) = setup(backend).await;
    let small = ["--nats-batch-messages-max", "7"];
    let mut consumers = [
        ConsumerProcess::start_logged(&app, &nats.url, &small),
        ConsumerProcess::start_logged(&app, &nats.url, &small),
    ];
    // Both have bound the durable and are pulling before anything is published, so
    // the work is shared rather than all taken by whichever started first.
    for consumer in &mut consumers {
        consumer.wait_until_consuming().await;
    }
    publish_orders(&js, 120, 30).await;
    wait_for(&app, "all stored", |(stored, dups)| {
        stored == 120 && dups == 30
    })
    .await;
    wait_until_drained(&js).await;
    assert_eq!(counts(&app).await, (120, 30));
    // Both processes are still up, and each stored batches of its own; between them
    // every event was inserted exactly once.
    let mut inserted = 0;
    for consumer in &mut consumers {
        assert!(consumer.running(), "exited: {}", consumer.log_text());
        let batches = consumer.log_events("batch stored");
        let handled: u64 = batches.iter().filter_map(|b| b["messages"].as_u64()).sum();
        assert!(handled > 0, "stored nothing: {}", consumer.log_text());
        inserted += batches
            .iter()
            .filter_map(|b| b["inserted"].as_u64())
            .sum::<u64>();
    }
    assert_eq!(inserted, 120);
}

async fn sigterm_finishes_the_batch_in_flight_and_acks_it(backend: Backend) {
    let (app, nats, js) = setup(backend).await;
    publish_orders(&js, 20, 0).await;
    let hook = [("TRAQLYTE_TEST_ACK_DELAY_MS", "1500")];
    let mut consumer = ConsumerProcess::start(&app, &nats.url, &[], &hook);
    wait_for(&app, "committed", |(stored, _)| stored == 20).await;
    // Still inside the delay between commit and acks.
    let status = consumer.terminate();
    assert!(status.success(), "exit status {status}");
    // The server applies acks the process sent before it exited a moment later; with no
    // consumer left, unacked messages could only come back as pending, never drain.
    wait_until_drained(&js).await;
    let info = durable_info(&js).await;
    assert_eq!((info.num_pending, info.num_ack_pending), (0, 0));
    assert_eq!(info.ack_floor.stream_sequence, 20, "all acked before exit");
}

/// A batch held longer than the ack wait (here between its commit and its acks) is
/// reported in progress, so the broker does not redeliver it to a second consumer on
/// the durable, which would store every message again as a duplicate.
async fn a_batch_held_longer_than_the_ack_wait_is_not_redelivered(backend: Backend) {
    let (app, nats, js) = setup(backend).await;
    publish_orders(&js, 20, 0).await;
    let short = ["--nats-ack-wait-ms", "1000"];
    let hook = [("TRAQLYTE_TEST_ACK_DELAY_MS", "5000")];
    let _slow = ConsumerProcess::start(&app, &nats.url, &short, &hook);
    wait_for(&app, "committed", |(stored, _)| stored == 20).await;
    // The first consumer now holds the batch for five ack waits; a second one pulls.
    let mut second = ConsumerProcess::start_logged(&app, &nats.url, &short);
    second.wait_until_consuming().await;
    wait_until_drained(&js).await;
    let info = durable_info(&js).await;
    assert_eq!(info.ack_floor.stream_sequence, 20);
    assert_eq!(counts(&app).await, (20, 0));
    assert!(
        second.log_events("batch stored").is_empty(),
        "the second consumer was given the held batch: {}",
        second.log_text()
    );
}

/// A durable that could let a message go unstored is refused at start: one without
/// explicit acks (acked before the commit), one whose `max_deliver` would make
/// JetStream drop a message Nak'd through a database outage, and one that would deliver
/// headers only, a filtered part of the stream or only new messages.
async fn a_consumer_refuses_a_durable_that_could_drop_a_message_unstored(backend: Backend) {
    let (app, nats, js) = setup(backend).await;
    let stream = js.get_stream(STREAM).await.expect("stream");
    let no_acks = jetstream::consumer::pull::Config {
        durable_name: Some("no-acks".to_string()),
        ack_policy: jetstream::consumer::AckPolicy::None,
        ..Default::default()
    };
    let five_tries = jetstream::consumer::pull::Config {
        durable_name: Some("five-tries".to_string()),
        ack_policy: jetstream::consumer::AckPolicy::Explicit,
        max_deliver: 5,
        ..Default::default()
    };
    // Durables made for another purpose: headers only, a filtered part of the stream,
    // new messages only.
    let explicit = |name: &str| jetstream::consumer::pull::Config {
        durable_name: Some(name.to_string()),
        ack_policy: jetstream::consumer::AckPolicy::Explicit,
        ..Default::default()
    };
    let headers_only = jetstream::consumer::pull::Config {
        headers_only: true,
        ..explicit("headers-only")
    };
    let filtered = jetstream::consumer::pull::Config {
        filter_subject: "traqlyte.checkout_completed".to_string(),
        ..explicit("filtered")
    };
    let new_only = jetstream::consumer::pull::Config {
        deliver_policy: jetstream::consumer::DeliverPolicy::New,
        ..explicit("new-only")
    };
    for (config, refusal) in [
        (no_acks, "explicit acks"),
        (five_tries, "max_deliver 5"),
        (headers_only, "headers_only true"),
        (filtered, "filter_subject"),
        (new_only, "deliver_policy New"),
    ] {
        let durable = config.durable_name.clone().unwrap_or_default();
        stream
            .create_consumer(config)
            .await
            .expect("create a consumer");
        let output = Command::new(env!("CARGO_BIN_EXE_traqlyte"))
            .args(["consume", "nats", "--database-url", app.database_url()])
            .args([
                "--url",
                &nats.url,
                "--stream",
                STREAM,
                "--durable",
                &durable,
            ])
            .args(["--tenant", "test tenant"])
            .output()
            .expect("run traqlyte consume nats");
        assert!(!output.status.success(), "{durable}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(refusal), "{durable}: {stderr}");
    }
}

/// Segment messages on `traqlyte.segment` take the `/v1/batch` path under the source
/// named by `--segment-source`: a re-publish (same messageId) is a duplicate, a replay
/// under new messageIds adds messages but no outcome, bindings turn track events into
/// outcomes once, an invalid message is a dead letter with the HTTP API's code.
async fn segment_messages_are_stored_under_the_named_source_and_feed_metric_bindings(
    backend: Backend,
) {
    let (app, nats, js) = setup(backend).await;
    create_source(&app, "broker");
    let units: Vec<String> = (0..4).map(|i| format!("user-{i}")).collect();
    let (campaign, arms) = campaign_with_units(&app, &units).await;
    bind(&app, &campaign).await;
    let mut orders = Vec::new();
    let mut messages = Vec::new();
    for i in 0..8 {
        let unit = format!("user-{}", i % 4);
        let revenue = f64::from(i) + 0.25;
        messages.push(track(
            &format!("m-{i}"),
            &unit,
            &format!("order-{i}"),
            revenue,
        ));
        orders.push((unit, revenue));
    }
    let bytes = |m: &Value| serde_json::to_vec(m).expect("JSON");
    for (i, message) in messages.iter().enumerate() {
        publish(&js, "traqlyte.segment", &bytes(message), &format!("s-{i}")).await;
    }
    // A publisher retrying past JetStream's window: same messageIds, fresh Nats-Msg-Ids.
    for (i, message) in messages.iter().take(3).enumerate() {
        publish(
            &js,
            "traqlyte.segment",
            &bytes(message),
            &format!("again-{i}"),
        )
        .await;
    }
    // An offline queue replayed with regenerated messageIds: new messages, same facts.
    for (i, message) in messages.iter().take(2).enumerate() {
        let mut replayed = message.clone();
        replayed["messageId"] = serde_json::json!(format!("replay-{i}"));
        publish(
            &js,
            "traqlyte.segment",
            &bytes(&replayed),
            &format!("replay-{i}"),
        )
        .await;
    }
    let nobody = serde_json::json!({"type": "track", "event": "Order Completed", "messageId": "x"});
    publish(&js, "traqlyte.segment", &bytes(&nobody), "nobody").await;
    let _consumer = ConsumerProcess::start(&app, &nats.url, &["--segment-source", "broker"], &[]);
    let deadline = Instant::now() + Duration::from_millis(SETTLE_WAIT_MS);
    while segment_stats(&app).await != (10, 3, 0) {
        assert!(
            Instant::now() < deadline,
            "segment counts stayed {:?}",
            segment_stats(&app).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_until_drained(&js).await;
    assert_eq!(segment_stats(&app).await, (10, 3, 0));
    let source = source_row(&app, "broker").await;
    assert_eq!(
        (source["stored"].as_i64(), source["duplicates"].as_i64()),
        (Some(10), Some(3)),
        "{source}"
    );
    assert_eq!(
        report_figures(&app, &campaign).await,
        expected_figures(&arms, &orders)
    );
    let letters = app.get("/deadletters").await.body;
    let letters = letters["dead_letters"].as_array().expect("a list").clone();
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(
        letters[0]["reason"], "missing_required_field",
        "{letters:?}"
    );
    assert_eq!(letters[0]["subject"], "traqlyte.segment");
}

/// `--segment-source` must name a working source: missing (or revoked) refuses to start.
async fn a_consumer_refuses_a_segment_source_that_does_not_work(backend: Backend) {
    let (app, nats, _js) = setup(backend).await;
    create_source(&app, "old");
    let revoked = Command::new(env!("CARGO_BIN_EXE_traqlyte"))
        .args(["source", "revoke", "old", "--tenant", "test tenant"])
        .args(["--database-url", app.database_url()])
        .output()
        .expect("run traqlyte source revoke");
    assert!(revoked.status.success(), "{revoked:?}");
    for name in ["nope", "old"] {
        let output = Command::new(env!("CARGO_BIN_EXE_traqlyte"))
            .args(["consume", "nats", "--database-url", app.database_url()])
            .args(["--url", &nats.url, "--stream", STREAM, "--durable", DURABLE])
            .args(["--tenant", "test tenant", "--segment-source", name])
            .output()
            .expect("run traqlyte consume nats");
        assert!(!output.status.success(), "{name}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("no working source"), "{name}: {stderr}");
    }
}

/// `serve --nats-*` whose NATS server is out of reach exits 1 without its API ever
/// listening: the API listened first and answered `/healthz` until the consumer's
/// connection timed out (a review saw four seconds of `200`), so a load balancer saw a
/// ready replica that was about to exit. Two ways out of reach: a port that refuses, and
/// one that accepts and never speaks (a host behind a proxy whose upstream is gone).
#[tokio::test]
async fn serve_whose_nats_server_is_out_of_reach_exits_without_listening() {
    let app = spawn_app(Backend::Sqlite).await;
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let refused = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let refused_port = refused.local_addr().expect("address").port();
    drop(refused);
    for url in [
        format!("nats://127.0.0.1:{refused_port}"),
        format!("nats://{}", silent.local_addr().expect("address")),
    ] {
        let database_url = app.database_url().to_string();
        let output = tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_traqlyte"))
                .args(["serve", "--database-url", &database_url])
                .args(["--listen", "127.0.0.1:0", "--nats-url", &url])
                .args(["--nats-stream", STREAM, "--nats-durable", DURABLE])
                .args(["--nats-tenant", "test tenant"])
                .output()
                .expect("run traqlyte serve")
        })
        .await
        .expect("joined");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
        );
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("connect to NATS"), "{stderr}");
        assert!(!stdout.contains("listening"), "{stdout}");
        assert!(!stderr.contains("listening"), "{stderr}");
    }
}

/// The tenant's dead letters once there are `n` of them (fails after the settle wait).
async fn wait_for_letters(app: &TestApp, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_millis(SETTLE_WAIT_MS);
    loop {
        let answer = app.get("/deadletters").await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        let letters = answer.body["dead_letters"].as_array().cloned();
        let letters = letters.unwrap_or_default();
        if letters.len() >= n {
            assert_eq!(letters.len(), n, "{}", answer.body);
            return letters;
        }
        assert!(Instant::now() < deadline, "dead letters: {}", answer.body);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A stream deleted and re-created under its name restarts its sequences: its first
/// dead letter sits at the old first letter's position. Both are kept, told apart by
/// the time the broker received each (the old key, the position alone, dropped the new
/// letter, and the message was then terminated: lost).
async fn a_recreated_stream_keeps_a_dead_letter_at_an_old_position(backend: Backend) {
    let (app, nats, js) = setup(backend).await;
    publish(&js, "traqlyte.checkout_completed", b"{first", "first").await;
    let mut consumer = ConsumerProcess::start(&app, &nats.url, &[], &[]);
    wait_for_letters(&app, 1).await;
    wait_until_drained(&js).await;
    assert!(consumer.terminate().success());
    js.delete_stream(STREAM).await.expect("delete the stream");
    create_stream(&js, STREAM, 1).await;
    publish(&js, "traqlyte.checkout_completed", b"{second", "second").await;
    let _consumer = ConsumerProcess::start(&app, &nats.url, &[], &[]);
    let letters = wait_for_letters(&app, 2).await;
    let mut seen: Vec<(&str, i64)> = letters
        .iter()
        .map(|l| {
            let raw = l["raw_text"].as_str().unwrap_or("");
            (raw, l["stream_sequence"].as_i64().unwrap_or(0))
        })
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, [("{first", 1), ("{second", 1)]);
    let published: Vec<&str> = letters
        .iter()
        .map(|l| l["published_at"].as_str().unwrap_or(""))
        .collect();
    assert_ne!(published[0], published[1], "{letters:?}");
    for at in published {
        // RFC 3339 in UTC with nine fractional digits.
        assert_eq!((at.len(), at.ends_with('Z')), (30, true), "{at}");
    }
}

/// `consume nats --late-events reconcile` takes an event older than the horizon, as
/// `serve --late-events reconcile` does over HTTP: reconciled against the rows of any
/// age (here its original, stored over HTTP), so its re-publication is a duplicate, and
/// counted as late (PostgreSQL; SQLite has one table and nothing late).
async fn late_events_reconciled_by_the_consumer_meet_their_originals(backend: Backend) {
    let (app, nats, js) = setup(backend).await;
    let mut old = checkout_event("order-old");
    old["occurred_at"] = serde_json::json!(traqlyte_identity::format_rfc3339_micros(
        traqlyte_store::now_us() - 20 * 86_400_000_000
    ));
    let first = app.post_event(&old).await;
    assert_eq!(first.body["status"], "inserted", "{}", first.body);
    let old = serde_json::to_vec(&old).expect("JSON");
    publish(&js, "traqlyte.checkout_completed", &old, "old").await;
    let fresh = serde_json::to_vec(&checkout_event("order-fresh")).expect("JSON");
    publish(&js, "traqlyte.checkout_completed", &fresh, "fresh").await;
    let late = ["--late-events", "reconcile"];
    let _consumer = ConsumerProcess::start(&app, &nats.url, &late, &[]);
    wait_for(&app, "all stored", |(stored, dups)| {
        stored == 2 && dups == 1
    })
    .await;
    wait_until_drained(&js).await;
    assert_eq!(counts(&app).await, (2, 1));
    assert_no_dead_letters(&app).await;
    let stats = app.get("/stats").await.body;
    let late = match backend {
        Backend::Postgres => 2,
        Backend::Sqlite => 0,
    };
    assert_eq!(
        stats["contracts"]["checkout_completed"]["late"], late,
        "{stats}"
    );
}

/// A store error Naks the batch and pauses the consumer for the backoff (here ten
/// minutes); SIGTERM during that pause ends it at once instead of after it.
async fn sigterm_ends_a_nak_backoff_at_once(backend: Backend) {
    let (app, nats, js) = setup(backend).await;
    // Dead letters cannot be recorded: every batch holding one fails to store.
    app.execute_sql("ALTER TABLE dead_letters RENAME TO dead_letters_away")
        .await;
    publish(&js, "traqlyte.checkout_completed", b"{poison", "poison").await;
    let backoff = [
        "--nats-nak-delay-ms-min",
        "600000",
        "--nats-nak-delay-ms-max",
        "600000",
    ];
    let mut consumer = ConsumerProcess::start(&app, &nats.url, &backoff, &[]);
    // Delivered (and, a moment later, Nak'd: the store fails at once).
    let deadline = Instant::now() + Duration::from_millis(SETTLE_WAIT_MS);
    loop {
        let stream = js.get_stream(STREAM).await.expect("stream");
        let delivered = stream
            .consumer_info(DURABLE)
            .await
            .map(|info| info.delivered.stream_sequence)
            .unwrap_or(0);
        if delivered >= 1 {
            break;
        }
        assert!(Instant::now() < deadline, "never delivered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let asked = Instant::now();
    let status = consumer.terminate();
    let took = asked.elapsed();
    assert!(status.success(), "exit status {status}");
    assert!(took < Duration::from_secs(30), "SIGTERM took {took:?}");
    // Nak'd, neither acked nor terminated: still awaiting its ack, delivered once.
    let info = durable_info(&js).await;
    let state = |info: &jetstream::consumer::Info| {
        (
            info.num_ack_pending,
            info.ack_floor.stream_sequence,
            info.delivered.consumer_sequence,
            info.num_redelivered,
        )
    };
    assert_eq!(state(&info), (1, 0, 1, 0), "{info:?}");
    app.execute_sql("ALTER TABLE dead_letters_away RENAME TO dead_letters")
        .await;
    // The Nak asked for the ten-minute backoff: a consumer pulling past the ack wait
    // (which would redeliver a message never Nak'd, or Nak'd without a delay) gets
    // nothing, so records no dead letter.
    let _next = ConsumerProcess::start(&app, &nats.url, &[], &[]);
    let ack_wait: u64 = ACK_WAIT_MS.parse().expect("ms");
    tokio::time::sleep(Duration::from_millis(ack_wait + 3_000)).await;
    let info = durable_info(&js).await;
    assert_eq!(state(&info), (1, 0, 1, 0), "{info:?}");
    assert_no_dead_letters(&app).await;
}

/// `Traqlyte-Contract-Version: N` pins the version a message is identified under, as
/// `?version=N` does over HTTP; without it the latest version when consumed applies.
/// Here version 2 requires a field the events lack: the pinned message is stored under
/// version 1, the unpinned one is judged by version 2 (a dead letter), and a header
/// naming no version, or a version that does not exist, is a dead letter too.
async fn the_contract_version_header_pins_the_version_a_message_is_identified_under(
    backend: Backend,
) {
    let (app, nats, js) = setup(backend).await;
    let mut v2 = crate::helpers::checkout_contract();
    v2["version"] = serde_json::json!(2);
    v2["fields"]
        .as_array_mut()
        .expect("fields")
        .push(serde_json::json!({"pointer": "/channel", "required": true}));
    app.register_contract(&v2).await;
    let body = |order: &str| serde_json::to_vec(&checkout_event(order)).expect("JSON");
    let subject = "traqlyte.checkout_completed";
    let pin = |v: &'static str| [("traqlyte-contract-version", v)];
    publish_with(&js, subject, &body("order-v1"), "v1", &pin("1")).await;
    publish(&js, subject, &body("order-latest"), "latest").await;
    publish_with(&js, subject, &body("order-bad"), "bad", &pin("one")).await;
    publish_with(&js, subject, &body("order-v7"), "v7", &pin("7")).await;
    let _consumer = ConsumerProcess::start(&app, &nats.url, &[], &[]);
    let letters = wait_for_letters(&app, 3).await;
    wait_until_drained(&js).await;
    let mut reasons: Vec<(i64, &str)> = letters
        .iter()
        .map(|l| {
            let sequence = l["stream_sequence"].as_i64().unwrap_or(0);
            (sequence, l["reason"].as_str().unwrap_or(""))
        })
        .collect();
    reasons.sort_unstable();
    assert_eq!(
        reasons,
        [
            (2, "missing_required_field"),
            (3, "invalid_contract_version"),
            (4, "unknown_contract")
        ]
    );
    assert_eq!(counts(&app).await, (1, 0));
    let id = crate::partitions::id_of(&checkout_event("order-v1"));
    let stored = app.get(&format!("/events/checkout_completed/{id}")).await;
    assert_eq!(stored.body["contract_version"], 1, "{}", stored.body);
}

crate::on_both_backends!(
    a_batch_held_longer_than_the_ack_wait_is_not_redelivered,
    a_later_groups_failure_does_not_replay_the_groups_that_committed,
    the_contract_version_header_pins_the_version_a_message_is_identified_under,
    a_recreated_stream_keeps_a_dead_letter_at_an_old_position,
    late_events_reconciled_by_the_consumer_meet_their_originals,
    sigterm_ends_a_nak_backoff_at_once,
    segment_messages_are_stored_under_the_named_source_and_feed_metric_bindings,
    a_consumer_refuses_a_segment_source_that_does_not_work,
    republished_messages_are_stored_once_and_counted_as_duplicates,
    a_poison_message_is_dead_lettered_and_the_rest_flow,
    sigterm_finishes_the_batch_in_flight_and_acks_it,
    a_consumer_refuses_a_durable_that_could_drop_a_message_unstored,
    messages_larger_than_the_batch_byte_bound_are_pulled_alone,
    serve_consumes_the_stream_with_its_own_ingestion_limits,
    a_deleted_durable_is_created_again_and_one_edited_unsafely_stops_the_consumer,
);

/// The durable deleted while the consumer runs (an operator's clean-up) is created again
/// as at start: the stream is delivered from its start, what is stored counts as
/// duplicates, and messages published since are stored. The consumer went silent for
/// good. A durable edited to a setting the start refuses (`max_deliver`, which lets
/// JetStream drop a message Nak'd through a database outage) stops the consumer with the
/// start's refusal; it went on, and a review lost five messages that way.
async fn a_deleted_durable_is_created_again_and_one_edited_unsafely_stops_the_consumer(
    backend: Backend,
) {
    let (app, nats, js) = setup(backend).await;
    publish_orders(&js, 10, 0).await;
    let mut consumer = ConsumerProcess::start_logged(&app, &nats.url, &[]);
    wait_for(&app, "the first orders", |(stored, _)| stored == 10).await;
    let stream = js.get_stream(STREAM).await.expect("stream");
    stream
        .delete_consumer(DURABLE)
        .await
        .expect("delete the durable");
    publish_orders_in(&js, 10..15, "m").await;
    wait_for(
        &app,
        "orders after the durable was deleted",
        |(stored, dup)| stored == 15 && dup == 10,
    )
    .await;
    assert!(consumer.running(), "{}", consumer.log_text());
    let mut config = durable_info(&js).await.config;
    config.max_deliver = 2;
    stream
        .create_consumer(config)
        .await
        .expect("edit the durable");
    let deadline = Instant::now() + Duration::from_millis(SETTLE_WAIT_MS);
    while consumer.running() {
        assert!(
            Instant::now() < deadline,
            "the consumer went on with max_deliver 2: {}",
            consumer.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = consumer.child.wait().expect("wait");
    assert!(!status.success(), "{}", consumer.log_text());
    assert!(
        consumer.log_text().contains("max_deliver 2"),
        "{}",
        consumer.log_text()
    );
}

/// A durable made with `max_ack_pending: 1` (safe, but one message a fetch, a commit
/// each) was taken without a word: the consumer says why it is slow, and stores all.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_durable_whose_pending_cap_is_below_the_batch_is_warned_of_and_consumed() {
    let (app, nats, js) = setup(Backend::Sqlite).await;
    let stream = js.get_stream(STREAM).await.expect("stream");
    stream
        .create_consumer(jetstream::consumer::pull::Config {
            durable_name: Some(DURABLE.to_string()),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            max_ack_pending: 1,
            ..Default::default()
        })
        .await
        .expect("create the durable");
    publish_orders(&js, 10, 0).await;
    let consumer = ConsumerProcess::start_logged(&app, &nats.url, &[]);
    wait_for(&app, "every order", |(stored, _)| stored == 10).await;
    let warned = consumer.log_events(
        "the durable's max_ack_pending is below the batch size: each fetch, across every process on it, gets at most that many messages; raise it (nats consumer edit) to store whole batches",
    );
    assert_eq!(warned.len(), 1, "{}", consumer.log_text());
    assert_eq!(warned[0]["max_ack_pending"], 1, "{}", consumer.log_text());
}

/// A batch is stored one transaction per contract. When a later contract's transaction
/// fails, the messages of those that committed are acked, and only the rest come back:
/// replayed, a committed collision was logged again (a second webhook alert, the
/// collision counted twice). A trigger refuses every insert of `zz_orders` (sorted after
/// `checkout_completed`) until it is dropped.
async fn a_later_groups_failure_does_not_replay_the_groups_that_committed(backend: Backend) {
    let (app, nats, js) = setup(backend).await;
    let zz = serde_json::json!({"name": "zz_orders", "version": 1,
        "fields": [{"pointer": "/order_id", "required": true}]});
    app.register_contract(&zz).await;
    let original = checkout_event("order-1");
    let stored = app.post_event(&original).await;
    assert_eq!(stored.body["status"], "inserted", "{}", stored.body);
    app.refuse_inserts("events", "NEW.contract_name = 'zz_orders'")
        .await;
    let mut changed = original.clone();
    changed["note"] = serde_json::json!("the same order, other content");
    let changed = serde_json::to_vec(&changed).expect("JSON");
    publish(&js, "traqlyte.checkout_completed", &changed, "collides").await;
    publish(
        &js,
        "traqlyte.zz_orders",
        br#"{"order_id":"z-1"}"#,
        "refused",
    )
    .await;
    let consumer = ConsumerProcess::start_logged(&app, &nats.url, &[]);
    let collisions = || async { app.checkout_stats().await.2 };
    let deadline = Instant::now() + Duration::from_millis(SETTLE_WAIT_MS);
    while collisions().await == 0 {
        assert!(Instant::now() < deadline, "the collision was never logged");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The refused group is Nak'd and redelivered meanwhile (100 ms, 200 ms, 400 ms, …).
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    app.allow_inserts("events").await;
    let zz_stored = || async {
        let answer = app.get("/stats").await;
        answer.body["contracts"]["zz_orders"]["stored"]
            .as_i64()
            .unwrap_or(0)
    };
    while zz_stored().await == 0 {
        assert!(Instant::now() < deadline, "zz_orders was never stored");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_until_drained(&js).await;
    assert_eq!(
        app.checkout_stats().await,
        (1, 0, 1),
        "one collision, logged once"
    );
    assert_no_dead_letters(&app).await;
    // The case under test happened: a batch with one message committed, then an error.
    let failed = consumer.log_events("batch not stored; Nak what did not commit");
    assert!(
        failed.iter().any(|fields| fields["committed"] == 1),
        "no batch failed after committing a group: {failed:?}"
    );
}

/// The multi-process tests: PostgreSQL, the backend several processes share in production.
mod postgres_only {
    use super::*;

    /// A consumer whose horizon (30 days) is longer than the one partitions are
    /// maintained with (14, the server's default): an event of 20 days ago passes the
    /// consumer's own check, and its day has no partition. It is a dead letter naming the
    /// backfill, and its batch-mates are stored; Nak'd, the batch would come back for ever.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn an_event_whose_day_has_no_partition_is_dead_lettered_and_the_rest_stored() {
        crate::helpers::clear_of_hour_boundary().await;
        let (app, nats, js) = setup(Backend::Postgres).await;
        let mut consumer =
            ConsumerProcess::start_logged(&app, &nats.url, &["--dedupe-horizon-days", "30"]);
        consumer.wait_until_consuming().await;
        // The consumer created the partitions of its horizon; the old day's is gone again
        // (a `serve` of a shorter horizon detached it, say).
        let old_at = traqlyte_store::now_us() - 20 * 86_400_000_000;
        let old_day =
            traqlyte_store::partitions::day_text(old_at.div_euclid(86_400_000_000) as i32);
        app.execute_sql(&format!("DROP TABLE events_p{}", old_day.replace('-', "")))
            .await;
        publish_orders(&js, 3, 0).await;
        let mut old = checkout_event("order-old");
        old["occurred_at"] = serde_json::json!(traqlyte_identity::format_rfc3339_micros(old_at));
        let old = serde_json::to_vec(&old).expect("JSON");
        publish(&js, "traqlyte.checkout_completed", &old, "old").await;
        wait_for(&app, "the recent ones stored", |(stored, _)| stored == 3).await;
        wait_until_drained(&js).await;
        let answer = app.get("/deadletters").await;
        let letters = answer.body["dead_letters"].as_array().expect("a list");
        let reasons: Vec<&str> = letters
            .iter()
            .map(|l| l["reason"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(reasons, ["outside_horizon"], "{}", answer.body);
        assert_eq!(counts(&app).await, (3, 0));
    }

    /// `--late-events reconcile` with maintenance behind (no partition for tomorrow yet:
    /// dropped after the consumer made them at start): the batch's backfill transaction
    /// fails on tomorrow's event, and written again without it the late event is still
    /// reconciled (not dead-lettered as if it had no partition), tomorrow's a dead letter.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_late_event_beside_one_without_a_partition_is_still_reconciled() {
        const DAY_US: i64 = 86_400_000_000;
        crate::helpers::clear_of_hour_boundary().await;
        let (app, nats, js) = setup(Backend::Postgres).await;
        let late = ["--late-events", "reconcile"];
        let mut consumer = ConsumerProcess::start_logged(&app, &nats.url, &late);
        consumer.wait_until_consuming().await;
        let now = traqlyte_store::now_us();
        let today = now.div_euclid(DAY_US) as i32;
        let drop: Vec<String> = (1..=traqlyte_store::partitions::PARTITIONS_AHEAD_DAYS)
            .map(|ahead| {
                let day = traqlyte_store::partitions::day_text(today + ahead);
                format!("DROP TABLE events_p{}", day.replace('-', ""))
            })
            .collect();
        app.execute_sql(&drop.join(";")).await;
        let at = |us: i64| serde_json::json!(traqlyte_identity::format_rfc3339_micros(us));
        let mut old = checkout_event("order-old");
        old["occurred_at"] = at(now - 40 * DAY_US);
        let mut tomorrow = checkout_event("order-tomorrow");
        tomorrow["occurred_at"] = at((today as i64 + 1) * DAY_US + 60_000_000);
        for (event, id) in [(&old, "old"), (&tomorrow, "tomorrow")] {
            let body = serde_json::to_vec(event).expect("JSON");
            publish(&js, "traqlyte.checkout_completed", &body, id).await;
        }
        wait_for(&app, "the late one stored", |(stored, _)| stored == 1).await;
        wait_until_drained(&js).await;
        let letters = wait_for_letters(&app, 1).await;
        assert_eq!(letters[0]["reason"], "outside_horizon", "{letters:?}");
        assert_eq!(
            letters[0]["raw_text"]
                .as_str()
                .map(|t| t.contains("order-tomorrow")),
            Some(true)
        );
        assert_eq!(counts(&app).await, (1, 0));
    }

    /// `--late-events reconcile`, and a day inside the consumer's horizon that maintenance
    /// with a shorter one detached: the event is reconciled into its detached partition
    /// (as the HTTP API does), and a re-publication of it is a duplicate. It was a dead
    /// letter.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_detached_day_inside_the_horizon_is_reconciled_with_late_events_reconcile() {
        const DAY_US: i64 = 86_400_000_000;
        crate::helpers::clear_of_hour_boundary().await;
        let (app, nats, js) = setup(Backend::Postgres).await;
        crate::partitions::cli_json(
            &app,
            &[
                "partitions",
                "maintain",
                "--dedupe-horizon-days",
                "2",
                "--json",
            ],
        );
        let late = ["--late-events", "reconcile"];
        let mut consumer = ConsumerProcess::start_logged(&app, &nats.url, &late);
        consumer.wait_until_consuming().await;
        let mut old = checkout_event("order-detached");
        old["occurred_at"] = serde_json::json!(traqlyte_identity::format_rfc3339_micros(
            traqlyte_store::now_us() - 5 * DAY_US
        ));
        let body = serde_json::to_vec(&old).expect("JSON");
        publish(&js, "traqlyte.checkout_completed", &body, "old").await;
        publish(&js, "traqlyte.checkout_completed", &body, "old-again").await;
        wait_for(&app, "the detached day's event stored", |(stored, dups)| {
            stored == 1 && dups == 1
        })
        .await;
        wait_until_drained(&js).await;
        assert_no_dead_letters(&app).await;
        let partitions = app.store.partitions().await.expect("status");
        let day = traqlyte_store::partitions::day_text(
            (traqlyte_store::now_us() - 5 * DAY_US).div_euclid(DAY_US) as i32,
        );
        let table = partitions
            .iter()
            .find(|p| p.from_day.as_deref() == Some(day.as_str()))
            .expect("the day's partition");
        assert!(!table.attached, "{table:?}");
        assert_eq!(table.rows, 1, "{table:?}");
    }

    /// A deployment that only consumes, with no `serve` to maintain the partitions: the
    /// days since the last maintenance have none (here yesterday's, today's and those
    /// ahead are gone). The consumer creates them before its first message, so the
    /// events are stored, not dead letters `outside_horizon`; and it detaches nothing,
    /// even with a horizon shorter than the one they were maintained with (14 days).
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_consumer_without_serve_creates_the_partitions_it_needs_and_detaches_none() {
        const DAY_US: i64 = 86_400_000_000;
        crate::helpers::clear_of_hour_boundary().await;
        let (app, nats, js) = setup(Backend::Postgres).await;
        let attached = |partitions: Vec<traqlyte_store::partitions::PartitionInfo>| {
            let mut days: Vec<String> = partitions
                .into_iter()
                .filter(|p| p.attached)
                .filter_map(|p| p.from_day)
                .collect();
            days.sort();
            days
        };
        let before = attached(app.store.partitions().await.expect("status"));
        let today = traqlyte_store::now_us().div_euclid(DAY_US) as i32;
        let gone: Vec<String> = (today - 1
            ..=today + traqlyte_store::partitions::PARTITIONS_AHEAD_DAYS)
            .map(|day| {
                let day = traqlyte_store::partitions::day_text(day);
                format!("DROP TABLE events_p{}", day.replace('-', ""))
            })
            .collect();
        app.execute_sql(&gone.join(";")).await;
        publish_orders(&js, 3, 0).await;
        let _consumer =
            ConsumerProcess::start(&app, &nats.url, &["--dedupe-horizon-days", "3"], &[]);
        wait_for(&app, "all stored", |(stored, _)| stored == 3).await;
        wait_until_drained(&js).await;
        assert_no_dead_letters(&app).await;
        assert_eq!(counts(&app).await, (3, 0));
        let after = attached(app.store.partitions().await.expect("status"));
        assert_eq!(after, before, "the attached days");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_consumer_killed_after_commit_before_ack_leaves_each_message_stored_once() {
        super::a_consumer_killed_after_commit_before_ack_leaves_each_message_stored_once(
            Backend::Postgres,
        )
        .await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn two_consumer_processes_on_one_durable_store_each_message_once() {
        super::two_consumer_processes_on_one_durable_store_each_message_once(Backend::Postgres)
            .await
    }

    /// `consume nats` run alone (the deployment docs/scaling.md draws: consumers apart
    /// from the servers) had no metrics: its series existed only under `serve --nats-*`,
    /// so its lag, stalls and dead letters could not be scraped. With `--metrics-listen`
    /// it serves its own `GET /metrics` and the probes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_consumer_alone_serves_its_metrics_and_probes_on_metrics_listen() {
        let (app, nats, js) = setup(Backend::Postgres).await;
        let listen = ["--metrics-listen", "127.0.0.1:0"];
        let mut consumer = ConsumerProcess::start_logged(&app, &nats.url, &listen);
        consumer.wait_until_consuming().await;
        let address = consumer
            .log_events("metrics listening")
            .first()
            .and_then(|fields| fields["address"].as_str().map(str::to_string))
            .unwrap_or_else(|| panic!("no metrics address: {}", consumer.log_text()));
        publish_orders(&js, 5, 2).await;
        publish(&js, "traqlyte.checkout_completed", b"not JSON", "bad").await;
        wait_for(&app, "all stored", |(stored, dups)| {
            stored == 5 && dups == 2
        })
        .await;
        wait_until_drained(&js).await;
        let client = reqwest::Client::new();
        let get = |path: &str| client.get(format!("http://{address}{path}")).send();
        let health = get("/healthz").await.expect("healthz");
        assert_eq!(health.status(), StatusCode::OK);
        let scraped = get("/metrics").await.expect("metrics");
        assert_eq!(scraped.status(), StatusCode::OK);
        let text = scraped.text().await.expect("text");
        let value = |family: &str, label: &str| {
            text.lines()
                .find(|line| line.starts_with(family) && line.contains(label))
                .and_then(|line| line.rsplit(' ').next())
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or_else(|| panic!("no {family} with {label}: {text}"))
        };
        let source = format!("source=\"nats:{STREAM}\"");
        assert_eq!(value("traqlyte_events_inserted_total{", &source), 5.0);
        assert_eq!(value("traqlyte_events_duplicates_total{", &source), 2.0);
        assert_eq!(
            value(
                "traqlyte_nats_dead_letters_total{",
                "reason=\"invalid_json\""
            ),
            1.0
        );
        assert!(text.contains("traqlyte_nats_consumer_pending{"), "{text}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_three_node_cluster_losing_a_node_mid_load_still_stores_each_message_once() {
        super::a_three_node_cluster_losing_a_node_mid_load_still_stores_each_message_once().await
    }
}

async fn a_three_node_cluster_losing_a_node_mid_load_still_stores_each_message_once() {
    let app = spawn_app(Backend::Postgres).await;
    app.register_checkout_contract().await;
    let mut cluster = NatsCluster::start();
    let js = jetstream(&cluster.nodes[0].url).await;
    create_stream(&js, STREAM, 3).await;
    let urls = cluster.urls();
    let small = ["--nats-batch-messages-max", "10"];
    let _consumer = ConsumerProcess::start(&app, &urls, &small, &[]);
    publish_orders_in(&js, 0..100, "m").await;
    wait_for(&app, "first half flowing", |(stored, _)| stored > 0).await;
    cluster.nodes[2].kill();
    publish_orders_in(&js, 100..200, "m").await;
    publish_orders_in(&js, 0..40, "again").await;
    wait_for(&app, "all stored", |(stored, dups)| {
        stored == 200 && dups >= 40
    })
    .await;
    wait_until_drained(&js).await;
    let (stored, duplicates) = counts(&app).await;
    assert_eq!(stored, 200);
    // Re-publishes are duplicates; a node's death may also redeliver a batch whose acks
    // it lost, counted as duplicates too, never stored twice.
    assert!(duplicates >= 40, "{duplicates}");
}

/// A node that hangs (SIGSTOP: a frozen machine, a partition dropping packets; its TCP
/// connections stay open) is left for another node of the cluster within a few pings,
/// and consuming goes on there. Before, the client pinged once a minute and needed three
/// unanswered pings: three minutes of nothing consumed, nothing said.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_consumer_on_a_node_that_hangs_goes_on_through_another_node() {
    let app = spawn_app(Backend::Sqlite).await;
    app.register_checkout_contract().await;
    let cluster = NatsCluster::start();
    let js = jetstream(&cluster.nodes[1].url).await;
    create_stream(&js, STREAM, 3).await;
    // Given one node only: the client learns the others from it.
    let ping = ["--nats-ping-interval-ms", "500"];
    let _consumer = ConsumerProcess::start(&app, &cluster.nodes[0].url, &ping, &[]);
    publish_orders_in(&js, 0..20, "m").await;
    wait_for(&app, "stored through the first node", |(stored, _)| {
        stored == 20
    })
    .await;
    cluster.nodes[0].signal("STOP");
    publish_orders_in(&js, 20..40, "m").await;
    // Within the wait (60 s), far below three minutes.
    let stored = wait_for(&app, "stored through another node", |(stored, _)| {
        stored == 40
    })
    .await;
    cluster.nodes[0].signal("CONT");
    assert_eq!(stored.0, 40);
}

/// A NATS server that stops answering (here the only one hangs) is said to have, at WARN,
/// after 15 s, and its answering again is said too; consuming goes on after. Before, a
/// DEBUG line was all, and the process looked idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_nats_server_that_stops_answering_is_warned_of_and_its_return_said() {
    let (app, nats, js) = setup(Backend::Sqlite).await;
    let ping = ["--nats-ping-interval-ms", "500"];
    let mut consumer = ConsumerProcess::start_logged(&app, &nats.url, &ping);
    consumer.wait_until_consuming().await;
    publish_orders(&js, 5, 0).await;
    wait_for(&app, "stored", |(stored, _)| stored == 5).await;
    nats.signal("STOP");
    let deadline = Instant::now() + Duration::from_secs(60);
    let warned = loop {
        let warned: Vec<Value> = consumer
            .log_text()
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .map(|line| line["fields"].clone())
            .filter(|fields| {
                fields["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("the NATS server has not answered"))
            })
            .collect();
        if let Some(first) = warned.into_iter().next() {
            break first;
        }
        assert!(Instant::now() < deadline, "{}", consumer.log_text());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        warned["silent_s"].as_u64().is_some_and(|s| s >= 15),
        "{warned}"
    );
    nats.signal("CONT");
    publish_orders(&js, 10, 0).await;
    wait_for(&app, "stored after", |(stored, _)| stored == 10).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while consumer
        .log_events("the NATS server answers again; consuming")
        .is_empty()
    {
        assert!(Instant::now() < deadline, "{}", consumer.log_text());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// PostgreSQL gone without a reset (`vanished.rs`) while messages flow, then back: the
/// batch whose statement went unanswered is given up after its deadline (twice the ack
/// wait, 10 s at least), its messages Nak'd, and every message is stored once. Before,
/// the consumer waited on the dead connection for good and its progress reports kept
/// the batch from redelivery: nothing more was stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_database_gone_without_a_reset_holds_the_consumer_no_longer_than_a_deadline() {
    let (app, nats, js) = setup(Backend::Postgres).await;
    let (proxy, through) = crate::vanished::Proxy::in_front_of(app.database_url()).await;
    let _consumer = ConsumerProcess::start(&app, &nats.url, &["--database-url", &through], &[]);
    // Messages flow one at a time, so a batch is being stored, or the next one's
    // connection (used moments ago, so handed out unchecked) is, when the network goes.
    let publishing = tokio::spawn({
        let js = js.clone();
        async move {
            for i in 0..1_500 {
                publish_orders_in(&js, i..i + 1, "m").await;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    });
    wait_for(&app, "the first stored", |(stored, _)| stored >= 100).await;
    proxy.black_hole();
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.network_back();
    publishing.await.expect("published");
    wait_for(&app, "every message stored", |(stored, _)| stored == 1_500).await;
    wait_until_drained(&js).await;
    assert_eq!(counts(&app).await.0, 1_500);
    assert_no_dead_letters(&app).await;
}

/// SIGTERM stops a consumer whose NATS server is gone: its last acks cannot be sent, and
/// waiting for a reconnection to send them would keep the process up for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_stops_a_consumer_whose_nats_server_is_gone() {
    let (app, mut nats, js) = setup(Backend::Sqlite).await;
    publish_orders(&js, 5, 0).await;
    let mut consumer = ConsumerProcess::start(&app, &nats.url, &[], &[]);
    wait_for(&app, "stored", |(stored, _)| stored == 5).await;
    nats.kill();
    tokio::time::sleep(Duration::from_millis(500)).await;
    crate::helpers::sigterm(&consumer.child);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = consumer.child.try_wait().expect("wait") {
            assert!(status.success(), "exit status {status}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still running 30 s after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

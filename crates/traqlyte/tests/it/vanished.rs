//! PostgreSQL gone without a reset: a host powered off, a failover to another address, a
//! partition. Nothing answers and nothing says the connection is dead, so a connection
//! waiting on an answer waits for good unless the server bounds the wait itself. A proxy
//! stands in for the network: it stops forwarding on every connection open at the time
//! and keeps the server's side of them open, silent, for as long as the test runs (as a
//! peer whose packets vanish), and leaves connections opened meanwhile unanswered; once
//! the network is back, new connections pass, and the database's side of the dead ones
//! is closed, as its keepalives end them in production (`postgres::SESSION_SETTINGS`), with
//! the locks of their open transactions.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::helpers::{checkout_event, lock_events, spawn_app_on, Backend, TestApp, TestDb};

/// Requests posted on tasks of their own, each its answer.
type Posted = tokio::task::JoinSet<reqwest::Result<reqwest::Response>>;

/// Posts `body` to `path` with the app's key on a task of `requests`.
fn post_behind(requests: &mut Posted, app: &TestApp, path: &str, body: serde_json::Value) {
    let (client, url, key) = (app.client.clone(), app.url(path), app.key.clone());
    requests.spawn(async move { client.post(url).bearer_auth(key).json(&body).send().await });
}

/// A batch body of five checkout events, orders `{orders}_0` to `{orders}_4`.
fn batch_of_five(orders: &str) -> serde_json::Value {
    json!((0..5)
        .map(|i| checkout_event(&format!("{orders}_{i}")))
        .collect::<Vec<_>>())
}

/// A TCP proxy to one address that can black-hole what it carries.
pub(crate) struct Proxy {
    address: std::net::SocketAddr,
    /// Bumped when a black hole starts: a connection accepted under an earlier value is
    /// dead from then on.
    generation: Arc<AtomicU64>,
    /// While set, connections accepted are held unanswered.
    holding: Arc<AtomicBool>,
    /// The generation up to which the dead connections' database side is closed.
    released: Arc<AtomicU64>,
}

impl Proxy {
    /// A proxy in front of the PostgreSQL database of `url`, and the URL through it.
    pub(crate) async fn in_front_of(url: &str) -> (Proxy, String) {
        let mut through = reqwest::Url::parse(url).expect("a URL");
        let proxy = Proxy::start(format!(
            "{}:{}",
            through.host_str().expect("a host"),
            through.port().unwrap_or(5432)
        ))
        .await;
        through
            .set_port(Some(proxy.address.port()))
            .expect("a port");
        (proxy, through.to_string())
    }

    async fn start(upstream: String) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        let generation = Arc::new(AtomicU64::new(0));
        let holding = Arc::new(AtomicBool::new(false));
        let released = Arc::new(AtomicU64::new(0));
        let (generations, holds, releases) =
            (generation.clone(), holding.clone(), released.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let born = generations.load(Ordering::SeqCst);
                if holds.load(Ordering::SeqCst) {
                    // Unanswered, open, until the test ends.
                    tokio::spawn(async move {
                        let _held = client;
                        std::future::pending::<()>().await
                    });
                    continue;
                }
                let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                let lives = Lives {
                    born,
                    generation: generations.clone(),
                    released: releases.clone(),
                };
                tokio::spawn(forward(client_read, server_write, Side::To, lives.clone()));
                tokio::spawn(forward(server_read, client_write, Side::From, lives));
            }
        });
        Proxy {
            address,
            generation,
            holding,
            released,
        }
    }

    /// Every connection open goes silent for good; new ones are held unanswered.
    pub(crate) fn black_hole(&self) {
        self.holding.store(true, Ordering::SeqCst);
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// New connections pass again; the silent ones stay silent to the server, and their
    /// database side is closed.
    pub(crate) fn network_back(&self) {
        self.holding.store(false, Ordering::SeqCst);
        self.released
            .store(self.generation.load(Ordering::SeqCst), Ordering::SeqCst);
    }
}

/// What a forwarding task of one connection knows of its life.
#[derive(Clone)]
struct Lives {
    /// The generation the connection was accepted under.
    born: u64,
    generation: Arc<AtomicU64>,
    released: Arc<AtomicU64>,
}

/// Which end of a forwarding task is the database's.
#[derive(PartialEq)]
enum Side {
    From,
    To,
}

/// Copies `from` to `to` until either ends, or, once a black hole started after the
/// connection's birth, forwards nothing more: the server's side stays open for good,
/// the database's until the network is back.
async fn forward(
    mut from: impl tokio::io::AsyncRead + Send + Unpin,
    mut to: impl tokio::io::AsyncWrite + Send + Unpin,
    database: Side,
    lives: Lives,
) {
    let Lives {
        born,
        generation,
        released,
    } = lives;
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            () = dead(born, &generation) => Ok(0),
        };
        if generation.load(Ordering::SeqCst) != born {
            while released.load(Ordering::SeqCst) <= born {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            // The database's side is closed (a FIN, as its end of a connection its
            // keepalives found dead); the server's side stays open, silent.
            if database == Side::To {
                let _ = to.shutdown().await;
            }
            let _silent = (from, to);
            return std::future::pending().await;
        }
        match read {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(read) => {
                if to.write_all(&buffer[..read]).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Resolves once the connection born under `born` is dead.
async fn dead(born: u64, generation: &AtomicU64) {
    while generation.load(Ordering::SeqCst) == born {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A database gone without a reset, then back: the server serves single events (group
/// commit) and batches again within seconds, and what it acknowledged is stored once.
/// Before, the group commit's four flushes waited for good on dead connections (single
/// events `408` for ever, batches served), and each connection given back mid-statement
/// kept its pool slot for good (after outages enough, every write `503 store_busy`
/// with the database back).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_database_gone_without_a_reset_is_served_again_once_back() {
    let db = TestDb::create(Backend::Postgres).await;
    let direct = db.url.clone();
    let (proxy, through) = Proxy::in_front_of(&direct).await;
    // A batch of the group commit is given up 4 s after it began (a minute by default).
    let config = traqlyte_server::ServerConfig {
        request_timeout_ms: 3_000,
        group_commit: traqlyte_server::GroupCommitConfig {
            deadline: Duration::from_secs(4),
            ..traqlyte_server::GroupCommitConfig::default()
        },
        ..traqlyte_server::ServerConfig::default()
    };
    let app = spawn_app_on(db, config, |store| {
        store.database_url = through;
        store.pool_connections_max = 8;
        store.pool_acquire_timeout_ms = 1_000;
    })
    .await;
    app.register_checkout_contract().await;
    let batch = |round: usize| batch_of_five(&format!("vanished_batch_{round}"));

    // Three outages, each meeting requests in flight (more than the pool's
    // connections), then the network back.
    for round in 0..3 {
        let answer = app
            .post_event(&checkout_event(&format!("before_{round}")))
            .await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        // The connection it used is back in the pool, checked (sqlx's check, a round
        // trip, has no bound: one caught by the hole would stay stranded).
        tokio::time::sleep(Duration::from_millis(300)).await;
        proxy.black_hole();
        let mut requests = Posted::new();
        for i in 0..8 {
            let event = checkout_event(&format!("unanswered_{round}_{i}"));
            post_behind(&mut requests, &app, "/events/checkout_completed", event);
        }
        let batch_answer = app
            .post_json("/events/checkout_completed/batch", &batch(round))
            .await;
        assert!(
            batch_answer.status.is_server_error()
                || batch_answer.status == StatusCode::REQUEST_TIMEOUT,
            "{} {}",
            batch_answer.status,
            batch_answer.body
        );
        while let Some(answer) = requests.join_next().await {
            let status = answer.expect("task").expect("answered").status();
            assert!(
                status.is_server_error() || status == StatusCode::REQUEST_TIMEOUT,
                "{status}: nothing is acknowledged while the database is gone"
            );
        }
        proxy.network_back();

        // Served again, single events and batches, within seconds.
        let back = Instant::now();
        let deadline = back + Duration::from_secs(20);
        let order = format!("after_{round}");
        loop {
            let single = app.post_event(&checkout_event(&order)).await;
            let batched = app
                .post_json("/events/checkout_completed/batch", &batch(round))
                .await;
            if single.status == StatusCode::OK && batched.status == StatusCode::OK {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "outage {round}: not served again 20 s after the database came back: single {} {}, batch {} {}",
                single.status,
                single.body,
                batched.status,
                batched.body
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    // Every acknowledged event once; what the outages left unanswered, at most once.
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&direct)
        .await
        .expect("connect");
    let stored: Vec<(String, i64)> = sqlx::query_as(
        "SELECT payload::jsonb->>'order_id', count(*) FROM events GROUP BY 1 ORDER BY 1",
    )
    .fetch_all(&mut conn)
    .await
    .expect("rows");
    let count = |order: &str| {
        stored
            .iter()
            .find(|(stored, _)| stored == order)
            .map_or(0, |(_, n)| *n)
    };
    for round in 0..3 {
        for order in [format!("before_{round}"), format!("after_{round}")] {
            assert_eq!(count(&order), 1, "{order}");
        }
        for i in 0..5 {
            assert_eq!(count(&format!("vanished_batch_{round}_{i}")), 1);
        }
    }
    assert!(stored.iter().all(|(_, n)| *n == 1), "{stored:?}");
}

/// Every connection of the pool in use with none given back (here a database that
/// stalls, a manual session's lock on `events`; or connections stranded on a database
/// gone without a reset) makes `/healthz` `503`, though its own connection answers; once
/// they come back, `200`. Before, a review saw `200` while every write was `503
/// store_busy`, so a load balancer kept the replica in rotation.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pool_whose_connections_do_not_come_back_is_not_ready() {
    let db = TestDb::create(Backend::Postgres).await;
    let app = spawn_app_on(db, traqlyte_server::ServerConfig::default(), |store| {
        store.pool_connections_max = 2;
        store.pool_stranded_after_ms = 1_000;
        // Waits as long as the lock is held: connections that do not come back.
        store.lock_timeout_ms = 0;
    })
    .await;
    app.register_checkout_contract().await;
    assert_eq!(app.get("/healthz").await.status, StatusCode::OK);

    let mut lock = lock_events(&app).await;
    // Batches wait on the lock, each holding a connection of the two.
    let mut requests = Posted::new();
    for round in 10..14 {
        let body = batch_of_five(&format!("stalled_{round}"));
        post_behind(
            &mut requests,
            &app,
            "/events/checkout_completed/batch",
            body,
        );
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let health = app.get("/healthz").await;
        if health.status == StatusCode::SERVICE_UNAVAILABLE {
            assert_eq!(
                health.body["error"]["code"], "database_unavailable",
                "{}",
                health.body
            );
            break;
        }
        assert_eq!(health.status, StatusCode::OK, "{}", health.body);
        assert!(
            Instant::now() < deadline,
            "still ready with every connection held"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    sqlx::raw_sql("COMMIT")
        .execute(&mut lock)
        .await
        .expect("unlock");
    while let Some(answer) = requests.join_next().await {
        let status = answer.expect("task").expect("answered").status();
        // Those that found no connection within the acquire timeout were refused.
        assert!(
            status == StatusCode::OK || status == StatusCode::SERVICE_UNAVAILABLE,
            "{status}"
        );
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while app.get("/healthz").await.status != StatusCode::OK {
        assert!(
            Instant::now() < deadline,
            "not ready again once the connections came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

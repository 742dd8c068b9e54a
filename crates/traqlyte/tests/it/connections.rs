//! Connections over raw sockets: stuck and idle connections are closed by their
//! deadlines, the connection cap holds new connections back until a slot frees, and the
//! requests hyper refuses by itself are answered in the JSON error shape.

use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use traqlyte_server::ServerConfig;

use crate::helpers::{spawn_app_with, Backend, TestApp};

crate::on_both_backends!(
    a_connection_trickling_its_headers_is_closed_after_the_header_read_timeout,
    an_idle_keep_alive_connection_is_closed_after_the_idle_timeout,
    at_the_connection_cap_new_connections_wait_until_one_closes,
    requests_hyper_refuses_are_answered_in_the_json_error_shape,
    a_client_that_pipelines_and_never_reads_is_closed_after_the_idle_timeout,
    an_error_answered_before_the_body_is_read_says_the_connection_closes,
    a_body_broken_off_or_framed_wrongly_is_400_incomplete_body,
);

/// The head of the response to `request` sent on `stream` (the body, if any, not read).
async fn response_head(stream: &mut TcpStream, request: &[u8]) -> String {
    stream.write_all(request).await.expect("write the request");
    let mut received = Vec::new();
    loop {
        if let Some((head, _)) = read_more(stream, &mut received).await {
            return head;
        }
    }
}

/// Reads what `stream` has next onto `received` (in time, never its end) and splits it
/// once its head is whole.
async fn read_more(stream: &mut TcpStream, received: &mut Vec<u8>) -> Option<(String, Vec<u8>)> {
    let mut buf = [0u8; 4096];
    let n = tokio::time::timeout(CLOSED_WITHIN, stream.read(&mut buf))
        .await
        .expect("a response in time")
        .expect("read");
    assert!(n > 0, "closed before answering: {received:?}");
    received.extend_from_slice(&buf[..n]);
    split_head(received)
}

/// A request refused before its body is read (here a wrong key, the body still on its
/// way) leaves the connection unusable: hyper closes it after the answer. The answer
/// says `Connection: close`, so a keep-alive client sends its next request on a new
/// connection instead of into the closed one ("server disconnected", a POST not
/// retried). An error after the body was read keeps the connection.
async fn an_error_answered_before_the_body_is_read_says_the_connection_closes(backend: Backend) {
    let app = app(backend, |_| {}).await;
    let mut stream = connect(&app).await;
    let head = response_head(
        &mut stream,
        b"POST /events/checkout_completed HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer tlk_wrong\r\nContent-Length: 20\r\n\r\n",
    )
    .await;
    assert_eq!(status_of(&head), 401, "{head}");
    assert_eq!(
        header(&head, "connection").as_deref(),
        Some("close"),
        "{head}"
    );

    // The body read to its end, then refused (malformed JSON): the connection stays.
    let mut stream = connect(&app).await;
    let request = format!(
        "POST /contracts HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {}\r\nContent-Length: 5\r\n\r\n{{bad}}",
        app.key
    );
    let head = response_head(&mut stream, request.as_bytes()).await;
    assert_eq!(status_of(&head), 400, "{head}");
    assert_eq!(header(&head, "connection"), None, "{head}");
}

/// Long enough that a test never waits for it; short enough to notice a mistake.
const LONG_MS: u64 = 60_000;
/// How long a deadline of 300 ms may take to close a connection on a loaded machine.
const CLOSED_WITHIN: Duration = Duration::from_secs(5);

async fn app(backend: Backend, tweak: impl FnOnce(&mut ServerConfig)) -> TestApp {
    let mut config = ServerConfig::default();
    tweak(&mut config);
    spawn_app_with(backend, config).await
}

/// Everything the server sends on a new connection given `request` (written while the
/// answer is read: the server may answer before it read the whole request), then, with
/// `half_close`, the end of the client's side; until the server closes.
async fn exchange(app: &TestApp, request: &[u8], half_close: bool, what: &str) -> Vec<u8> {
    let mut stream = connect(app).await;
    let (mut reader, mut writer) = stream.split();
    let write = async {
        let _ = writer.write_all(request).await;
        if half_close {
            let _ = writer.shutdown().await;
        }
    };
    let read = async {
        let mut received = Vec::new();
        let _ = reader.read_to_end(&mut received).await;
        received
    };
    let ((), received) = tokio::time::timeout(CLOSED_WITHIN, async { tokio::join!(write, read) })
        .await
        .unwrap_or_else(|_| panic!("{what}: no complete answer in time"));
    received
}

async fn connect(app: &TestApp) -> TcpStream {
    let address = app.address.trim_start_matches("http://");
    TcpStream::connect(address).await.expect("connect")
}

/// Whether the server closed `stream` (end of file or reset) within `wait`; bytes the
/// server sends meanwhile are read and dropped.
async fn closed_within(stream: &mut TcpStream, wait: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + wait;
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

/// Sends a keep-alive `GET /healthz` and reads its whole response; returns the status.
async fn get_healthz(stream: &mut TcpStream) -> u16 {
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .expect("write the request");
    let mut received = Vec::new();
    loop {
        if let Some((head, body)) = read_more(stream, &mut received).await {
            let length = header(&head, "content-length")
                .and_then(|v| v.parse::<usize>().ok())
                .expect("a content-length");
            if body.len() >= length {
                return status_of(&head);
            }
        }
    }
}

fn split_head(bytes: &[u8]) -> Option<(String, Vec<u8>)> {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&bytes[..end]).into_owned();
    Some((head, bytes[end + 4..].to_vec()))
}

fn status_of(head: &str) -> u16 {
    head.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"))
}

fn header(head: &str, name: &str) -> Option<String> {
    head.lines().skip(1).find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim()
            .eq_ignore_ascii_case(name)
            .then(|| value.trim().to_string())
    })
}

async fn a_connection_trickling_its_headers_is_closed_after_the_header_read_timeout(
    backend: Backend,
) {
    let app = app(backend, |c| {
        c.header_read_timeout_ms = 300;
        c.idle_timeout_ms = LONG_MS;
    })
    .await;
    let mut stream = connect(&app).await;
    let started = Instant::now();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\n")
        .await
        .expect("write the request line");
    // One header byte every 50 ms: the head is never complete, the client never silent.
    let mut closed_after = None;
    for byte in b"X-Slow: ".iter().cycle().take(200) {
        if stream.write_all(&[*byte]).await.is_err()
            || closed_within(&mut stream, Duration::from_millis(50)).await
        {
            closed_after = Some(started.elapsed());
            break;
        }
    }
    let closed_after = closed_after.expect("the trickling connection was never closed");
    assert!(
        closed_after >= Duration::from_millis(250),
        "closed at once ({closed_after:?}), not by the header-read timeout"
    );
    assert!(
        closed_after < CLOSED_WITHIN,
        "closed after {closed_after:?}"
    );
}

async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout(backend: Backend) {
    let app = app(backend, |c| {
        c.header_read_timeout_ms = LONG_MS;
        c.idle_timeout_ms = 1_000;
    })
    .await;
    let mut stream = connect(&app).await;
    assert_eq!(get_healthz(&mut stream).await, 200);
    // Kept alive: a second request on the same connection before the deadline is served
    // (a second of slack for a loaded machine to send it).
    assert!(!closed_within(&mut stream, Duration::from_millis(100)).await);
    // Taken before the request: the server's idle timer starts after its answer, so the
    // connection cannot close sooner than a second after this.
    let idle_since = Instant::now();
    assert_eq!(get_healthz(&mut stream).await, 200);
    assert!(
        !closed_within(&mut stream, Duration::from_millis(300)).await,
        "closed at once, not by the idle timeout"
    );
    assert!(
        closed_within(&mut stream, CLOSED_WITHIN).await,
        "the idle connection was never closed"
    );
    assert!(idle_since.elapsed() >= Duration::from_millis(1_000));

    // A client that connects and never sends a byte is idle too.
    let mut silent = connect(&app).await;
    assert!(!closed_within(&mut silent, Duration::from_millis(300)).await);
    assert!(closed_within(&mut silent, CLOSED_WITHIN).await);
}

async fn at_the_connection_cap_new_connections_wait_until_one_closes(backend: Backend) {
    let app = app(backend, |c| c.connections_max = 2).await;
    let mut first = connect(&app).await;
    let mut second = connect(&app).await;
    assert_eq!(get_healthz(&mut first).await, 200);
    assert_eq!(get_healthz(&mut second).await, 200);

    // The kernel completes the handshake (listen backlog), but nobody serves it yet.
    let mut third = connect(&app).await;
    third
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .expect("write the request");
    let mut buf = [0u8; 1024];
    let early = tokio::time::timeout(Duration::from_millis(500), third.read(&mut buf)).await;
    assert!(
        early.is_err(),
        "a connection over the cap was served: {early:?}"
    );

    // A slot frees: the waiting connection is served, its request not lost.
    drop(first);
    let n = tokio::time::timeout(CLOSED_WITHIN, third.read(&mut buf))
        .await
        .expect("served once a slot freed")
        .expect("read");
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );

    // And the server is reachable for any new client once connections close.
    drop(second);
    drop(third);
    let health = app
        .client
        .get(format!("{}/healthz", app.address))
        .timeout(CLOSED_WITHIN)
        .send()
        .await
        .expect("reachable after the cap");
    assert_eq!(health.status(), 200);
}

async fn requests_hyper_refuses_are_answered_in_the_json_error_shape(backend: Backend) {
    let app = app(backend, |_| {}).await;
    let many_headers: String = (0..1_000).map(|i| format!("X-Header-{i}: v\r\n")).collect();
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        (
            "a control character in a header value",
            b"GET /healthz HTTP/1.1\r\nHost: test\r\nX-Bad: a\x01b\r\n\r\n".to_vec(),
            400,
            "bad_request",
        ),
        (
            "two different Content-Length headers",
            b"POST /contracts HTTP/1.1\r\nHost: test\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"
                .to_vec(),
            400,
            "bad_request",
        ),
        (
            "1,000 headers",
            format!("GET /healthz HTTP/1.1\r\nHost: test\r\n{many_headers}\r\n").into_bytes(),
            431,
            "headers_too_large",
        ),
        (
            "a 600 KB header",
            format!("GET /healthz HTTP/1.1\r\nHost: test\r\nX-Big: {}\r\n\r\n", "a".repeat(600_000))
                .into_bytes(),
            431,
            "headers_too_large",
        ),
        (
            "a 70 KB request target",
            format!("GET /{} HTTP/1.1\r\nHost: test\r\n\r\n", "a".repeat(70_000)).into_bytes(),
            414,
            "uri_too_long",
        ),
        (
            "HTTP/1.1 without a Host header",
            b"GET /openapi.json HTTP/1.1\r\n\r\n".to_vec(),
            400,
            "invalid_host",
        ),
        (
            "HTTP/1.1 with two Host headers",
            b"GET /openapi.json HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n".to_vec(),
            400,
            "invalid_host",
        ),
        (
            "chunked twice",
            b"POST /contracts HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n".to_vec(),
            400,
            "bad_request",
        ),
        (
            "a transfer coding other than chunked",
            b"POST /contracts HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n".to_vec(),
            501,
            "unsupported_transfer_coding",
        ),
        (
            "a malformed request line",
            b"GET\x01/ HTTP/1.1\r\nHost: test\r\n\r\n".to_vec(),
            400,
            "bad_request",
        ),
    ];
    for (what, request, status, code) in cases {
        let received = exchange(&app, &request, false, what).await;
        let (head, body) = split_head(&received)
            .unwrap_or_else(|| panic!("{what}: no response head in {received:?}"));
        assert_eq!(status_of(&head), status, "{what}: {head}");
        assert_eq!(
            header(&head, "content-type").as_deref(),
            Some("application/json"),
            "{what}: {head}"
        );
        assert!(header(&head, "date").is_some(), "{what}: {head}");
        let json: Value = serde_json::from_slice(&body)
            .unwrap_or_else(|err| panic!("{what}: body is not JSON ({err}): {body:?}"));
        assert_eq!(json["error"]["code"], code, "{what}: {json}");
        assert!(json["error"]["message"].is_string(), "{what}: {json}");
    }
    // A probe is served without a Host (an old health checker's HTTP/1.1).
    let received = exchange(
        &app,
        b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n",
        false,
        "a probe without Host",
    )
    .await;
    let (head, _) = split_head(&received).expect("an answer to the probe");
    assert_eq!(status_of(&head), 200, "{head}");
    // The server still serves well-formed requests.
    let mut stream = connect(&app).await;
    assert_eq!(get_healthz(&mut stream).await, 200);
}

/// A client that pipelines requests for large answers and never reads them (its receive
/// buffer tiny) stalls the first answer's write, and hyper parses the next request
/// meanwhile: the connection must keep that write's deadline and close after the idle
/// timeout, not hold its slot for ever. With one slot, another client is served once the
/// stuck one is closed, without the stuck one reading a byte.
async fn a_client_that_pipelines_and_never_reads_is_closed_after_the_idle_timeout(
    backend: Backend,
) {
    let app = app(backend, |c| {
        c.header_read_timeout_ms = LONG_MS;
        c.idle_timeout_ms = 300;
        c.connections_max = 1;
    })
    .await;
    let address = app.address.trim_start_matches("http://");
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("receive buffer");
    let mut stuck = socket
        .connect(address.parse().expect("address"))
        .await
        .expect("connect");
    // About 400 times the OpenAPI description: far beyond every socket buffer.
    let requests = "GET /openapi.json HTTP/1.1\r\nHost: test\r\n\r\n".repeat(400);
    stuck
        .write_all(requests.as_bytes())
        .await
        .expect("write the requests");
    let started = std::time::Instant::now();
    let mut other = connect(&app).await;
    let status = tokio::time::timeout(CLOSED_WITHIN * 2, get_healthz(&mut other)).await;
    assert_eq!(
        status.ok(),
        Some(200),
        "the stuck connection kept the only slot"
    );
    // The other client waited for the stuck one's idle timeout: the slot was held, then
    // freed by closing the stuck connection, not freed at once.
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(250),
        "served after {:?}: the stuck connection never held the slot",
        started.elapsed()
    );
    drop(stuck);
}

/// A body that breaks off (the client half-closes before its `Content-Length`, or before
/// the last chunk) or whose chunked framing is wrong is `400 incomplete_body`, nothing
/// written. It was `413 body_too_large` ("larger than the limit of 1048576 bytes") for
/// 20 bytes, a status clients take as final.
async fn a_body_broken_off_or_framed_wrongly_is_400_incomplete_body(backend: Backend) {
    let app = app(backend, |_| {}).await;
    app.register_checkout_contract().await;
    let event = crate::helpers::checkout_event("broken").to_string();
    let head = |framing: &str| {
        format!(
            "POST /events/checkout_completed HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\n{framing}\r\n\r\n",
            app.key
        )
    };
    let cases = [
        (
            "a chunk size that is not hex",
            format!(
                "{}zz\r\n{event}\r\n0\r\n\r\n",
                head("Transfer-Encoding: chunked")
            ),
        ),
        (
            "a half-close before the Content-Length",
            format!(
                "{}{}",
                head(&format!("Content-Length: {}", event.len() + 80)),
                event
            ),
        ),
        (
            "a half-close before the last chunk",
            format!(
                "{}{:x}\r\n{event}\r\n",
                head("Transfer-Encoding: chunked"),
                event.len()
            ),
        ),
    ];
    for (what, request) in cases {
        let received = exchange(&app, request.as_bytes(), true, what).await;
        let (head, body) = split_head(&received)
            .unwrap_or_else(|| panic!("{what}: no response head in {received:?}"));
        assert_eq!(status_of(&head), 400, "{what}: {head}");
        let json: Value = serde_json::from_slice(&body)
            .unwrap_or_else(|err| panic!("{what}: body is not JSON ({err}): {body:?}"));
        assert_eq!(json["error"]["code"], "incomplete_body", "{what}: {json}");
        // hyper's own reason, from the error's sources, not only its generic message.
        let message = json["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("connection: "), "{what}: {message}");
    }
    assert_eq!(app.checkout_stats().await.0, 0);
}

//! The accept loop: our own, over hyper's HTTP/1 connection, instead of `axum::serve`,
//! because `axum::serve` has no connection cap, no idle timeout and answers hyper's own
//! parse errors with an empty body. Main items: [`serve`], [`connections_max_within`].
//!
//! Each connection carries a [`Tracker`] whose pure [`Phase`] says what the connection
//! is waiting for, and so which deadline applies:
//! - `Idle` (accepted, or its last response written; no byte of a next request yet):
//!   closed `idle_timeout_ms` after it went idle;
//! - `ReadingHead` (a byte of a request arrived, hyper has not parsed its head yet):
//!   closed `header_read_timeout_ms` after that first byte, however slowly the rest
//!   trickles in;
//! - `Serving` (the router has the request): no deadline here; the router's
//!   `TimeoutLayer` bounds the handler (`request_timeout_ms`);
//! - `Flushing` (the response body ended, its last bytes may still be in hyper's buffer):
//!   closed after `idle_timeout_ms` without any byte written, so a client that stops
//!   reading its answer is let go while a slow one that keeps reading is not;
//! - `Rejecting` (hyper refused the request head): our JSON answer is written, then the
//!   rest of what the client sends is read and dropped until it closes, for at most
//!   `header_read_timeout_ms`.
//!
//! Why not hyper's own `header_read_timeout`: hyper 1.12 starts that clock when it starts
//! waiting for a head, i.e. also while a keep-alive connection is idle
//! (`proto/h1/conn.rs`, `poll_read_head` and `State::idle`), so it cannot tell "idle for
//! 60 s" from "trickling a head for 10 s". The phases above keep the two bounds apart.
//!
//! Why the JSON body of hyper's rejections is written here: hyper answers a head it
//! cannot parse itself (`Conn::on_parse_error`: a bad header value or request line,
//! conflicting `Content-Length` → 400; too many or too large headers → 431; too long a
//! target → 414) with a head and no body, and never calls our router, so no middleware
//! can see it, and hyper has no setting for that body. Raising hyper's header-count limit
//! and counting headers in a middleware would cover only the 431 for many headers.
//! What makes rewriting safe is an ordering fact of HTTP/1: hyper writes to a connection
//! whose phase is `Idle` or `ReadingHead` only to answer a head it refused, because every
//! response of the router is written while the phase is `Serving` or `Flushing` (the
//! phase leaves `Flushing` only once hyper flushed everything it had buffered). So the
//! first bytes written in those phases are hyper's status line; [`Watched`] replaces that
//! answer by the same status with the API's `{"error":{"code","message"}}` body.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{Request, Response, StatusCode};
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tower::ServiceExt;

use crate::ServerConfig;

/// Open files the process needs besides client connections, whatever its pool size: the
/// listener, stdio, logs, the SQLite database's shared files, sockets to resolve or
/// connect, with room to spare.
pub const FILES_RESERVED_BASE: u64 = 128;

/// The connection cap that fits under an open-file limit: `requested`, lowered so that
/// client sockets plus `files_reserved` (see [`files_reserved`]) stay below
/// `open_files_max`, and at least 1. Past the open-file limit `accept` fails with
/// `EMFILE` and the database can no longer open files, which made the server unreachable
/// (issue 8); at the cap the server merely stops accepting.
pub fn connections_max_within(open_files_max: u64, files_reserved: u64, requested: usize) -> usize {
    let room = open_files_max.saturating_sub(files_reserved);
    let room = usize::try_from(room).unwrap_or(usize::MAX);
    requested.min(room).max(1)
}

/// Open files to keep out of the connection cap for a database pool of
/// `pool_connections` connections: three each (an SQLite connection holds its database,
/// WAL and shared-memory files; a PostgreSQL one a socket) on top of
/// [`FILES_RESERVED_BASE`].
pub fn files_reserved(pool_connections: u32) -> u64 {
    FILES_RESERVED_BASE + 3 * u64::from(pool_connections)
}

/// The per-connection bounds taken from [`ServerConfig`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    header_read: Duration,
    idle: Duration,
    connections_max: usize,
    /// How long a shutdown waits for open connections: the longest a request may run
    /// plus the longest its answer may take to write. Past it they are dropped (what
    /// they wrote is committed or rolled back; a client that did not get its answer
    /// retries, which the store absorbs).
    shutdown_grace: Duration,
}

/// Connections the dedicated metrics listener (`--metrics-listen`) serves at once: a
/// scraper or two. Its own cap, inside the open files [`FILES_RESERVED_BASE`] keeps
/// aside, so the API's cap still fits under the open-file limit.
pub(crate) const METRICS_CONNECTIONS_MAX: usize = 16;

impl Limits {
    /// These limits with another connection cap.
    pub(crate) fn with_connections_max(self, connections_max: usize) -> Limits {
        Limits {
            connections_max: connections_max.max(1),
            ..self
        }
    }

    pub(crate) fn from_config(config: &ServerConfig) -> Limits {
        // A zero bound would close every connection at once; 1 ms is the least that means
        // something. The cap stays within what a semaphore (and `acquire_many`) can count.
        Limits {
            header_read: Duration::from_millis(config.header_read_timeout_ms.max(1)),
            idle: Duration::from_millis(config.idle_timeout_ms.max(1)),
            shutdown_grace: Duration::from_millis(
                config
                    .request_timeout_ms
                    .saturating_add(config.idle_timeout_ms)
                    .max(1),
            ),
            connections_max: config
                .connections_max
                .clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize)),
        }
    }
}

/// Accepts connections on `listener` and serves `router` on each until `shutdown`
/// completes; then stops accepting, lets every connection finish its request in flight
/// (hyper's graceful shutdown closes idle ones at once) and returns when all are closed.
///
/// At the cap (`connections_max`) the loop stops accepting until a connection closes:
/// new clients wait in the kernel's listen backlog and are served as soon as a slot
/// frees, instead of being accepted only to be closed, which would spend a file
/// descriptor and a handshake on each and fail clients that a moment later could have
/// been served. The timeouts are what frees slots held by stuck clients.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.connections_max));
    let (stop, stopping) = watch::channel(false);
    let mut builder = http1::Builder::new();
    // Our `Tracker` bounds header reading and idleness (see the module docs); hyper's
    // clock would also count keep-alive idleness as header reading.
    builder.header_read_timeout(None);
    tokio::pin!(shutdown);
    let mut at_cap = false;
    loop {
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => {
                at_cap = false;
                slot
            }
            Err(_) => {
                if !at_cap {
                    tracing::warn!(
                        connections_max = limits.connections_max,
                        "connection cap reached; new connections wait in the listen backlog"
                    );
                    at_cap = true;
                }
                tokio::select! {
                    () = &mut shutdown => break,
                    slot = slots.clone().acquire_owned() => match slot {
                        Ok(slot) => slot,
                        Err(_) => break,
                    },
                }
            }
        };
        let stream = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) if is_connection_error(&err) => continue,
                Err(err) => {
                    // Out of file descriptors or memory: retrying at once would spin.
                    // One second, as hyper's and axum's loops do, unless we are stopping.
                    tracing::error!(error = %err, "accept failed; retrying in 1 s");
                    tokio::select! {
                        () = &mut shutdown => break,
                        () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    }
                }
            },
        };
        let (stream, peer) = stream;
        tokio::spawn(serve_connection(
            stream,
            peer,
            router.clone(),
            builder.clone(),
            limits,
            stopping.clone(),
            slot,
        ));
    }
    // Closing the listening socket refuses new connections while the others finish.
    drop(listener);
    let _ = stop.send(true);
    // Each connection holds a slot until it ends: holding every slot means all ended.
    // A client that reads its answer a few bytes a minute would hold the shutdown for as
    // long as it likes: past the grace, what is left is dropped.
    let all = u32::try_from(limits.connections_max).unwrap_or(u32::MAX);
    if tokio::time::timeout(limits.shutdown_grace, slots.acquire_many(all))
        .await
        .is_err()
    {
        let open = limits.connections_max - slots.available_permits();
        tracing::warn!(
            open,
            grace_ms = limits.shutdown_grace.as_millis(),
            "connections still open after the shutdown grace; dropping them"
        );
    }
    Ok(())
}

/// An `accept` error that concerns one connection only (it was reset before we took it),
/// as opposed to the process running out of something.
fn is_connection_error(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// Serves one connection until it closes, its deadline passes, or the server stops.
async fn serve_connection(
    stream: TcpStream,
    peer: std::net::SocketAddr,
    router: Router,
    builder: http1::Builder,
    limits: Limits,
    mut stopping: watch::Receiver<bool>,
    _slot: OwnedSemaphorePermit,
) {
    let tracker = Arc::new(Tracker::new(Instant::now()));
    let service = Served {
        router,
        tracker: tracker.clone(),
        peer,
    };
    let connection =
        builder.serve_connection(TokioIo::new(Watched::new(stream, tracker.clone())), service);
    tokio::pin!(connection);
    let expired = tracker.expired(limits);
    tokio::pin!(expired);
    let mut shutting_down = false;
    loop {
        tokio::select! {
            served = connection.as_mut() => {
                if let Err(err) = served {
                    tracing::debug!(error = %err, "connection ended with an error");
                }
                return;
            }
            expiry = &mut expired => {
                // Dropping the connection closes the socket; nothing is in flight.
                tracing::debug!(?expiry, "connection closed by its deadline");
                return;
            }
            _ = stopping.changed(), if !shutting_down => {
                shutting_down = true;
                connection.as_mut().graceful_shutdown();
            }
        }
    }
}

/// What a connection is waiting for; decides its deadline. Transitions are pure so they
/// can be tested without sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No request in flight and no byte of the next one, since `since`.
    Idle { since: Instant },
    /// The first byte of a request head arrived at `since`; the head is not parsed yet.
    ReadingHead { since: Instant },
    /// `open` requests handed to the router whose response bodies have not ended.
    /// `stalled_since`: a pipelined request arrived while an earlier response was still
    /// unwritten, since when no byte of it reached the socket. hyper runs the new
    /// request's handler only once that response is out, so a client that pipelines and
    /// never reads would otherwise hold the connection with no deadline at all.
    Serving {
        open: u32,
        stalled_since: Option<Instant>,
    },
    /// The last response body ended; hyper may still be writing its tail. `since` is
    /// when the body ended or, later, when the last byte of it reached the socket.
    Flushing { since: Instant },
    /// hyper refused a head at `since`; our JSON answer replaces its own.
    Rejecting { since: Instant },
}

/// Which deadline closed a connection (for the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expiry {
    Idle,
    HeaderRead,
    Flush,
    Rejection,
}

impl Phase {
    /// Bytes arrived from the client.
    fn on_read(self, now: Instant) -> Phase {
        match self {
            Phase::Idle { .. } => Phase::ReadingHead { since: now },
            other => other,
        }
    }

    /// hyper parsed a head and handed the request to the router.
    fn on_request(self) -> Phase {
        match self {
            Phase::Serving {
                open,
                stalled_since,
            } => Phase::Serving {
                open: open.saturating_add(1),
                stalled_since,
            },
            Phase::Flushing { since } => Phase::Serving {
                open: 1,
                stalled_since: Some(since),
            },
            _ => Phase::Serving {
                open: 1,
                stalled_since: None,
            },
        }
    }

    /// A response body ended (or the request was dropped unanswered).
    fn on_response_done(self, now: Instant) -> Phase {
        match self {
            Phase::Serving {
                open,
                stalled_since,
            } if open > 1 => Phase::Serving {
                open: open - 1,
                stalled_since,
            },
            Phase::Serving { .. } => Phase::Flushing { since: now },
            other => other,
        }
    }

    /// Some bytes of a response reached the socket.
    fn on_written(self, now: Instant) -> Phase {
        match self {
            Phase::Flushing { .. } => Phase::Flushing { since: now },
            Phase::Serving {
                open,
                stalled_since: Some(_),
            } => Phase::Serving {
                open,
                stalled_since: Some(now),
            },
            other => other,
        }
    }

    /// Everything hyper had buffered reached the socket. (Bytes of a pipelined next
    /// request read meanwhile then count as idle, not as a head being read: its bound
    /// is the idle one, still bounded.)
    fn on_flushed(self, now: Instant) -> Phase {
        match self {
            Phase::Flushing { .. } => Phase::Idle { since: now },
            Phase::Serving { open, .. } => Phase::Serving {
                open,
                stalled_since: None,
            },
            other => other,
        }
    }

    /// Whether bytes written now can only be hyper's answer to a head it refused (see
    /// the module docs for why).
    fn writes_are_hypers(self) -> bool {
        matches!(self, Phase::Idle { .. } | Phase::ReadingHead { .. })
    }

    /// When the connection must be closed, and why; `None` while the router has it.
    fn deadline(self, limits: Limits) -> Option<(Instant, Expiry)> {
        match self {
            Phase::Idle { since } => Some((since + limits.idle, Expiry::Idle)),
            Phase::ReadingHead { since } => Some((since + limits.header_read, Expiry::HeaderRead)),
            Phase::Serving { stalled_since, .. } => {
                stalled_since.map(|since| (since + limits.idle, Expiry::Flush))
            }
            Phase::Flushing { since } => Some((since + limits.idle, Expiry::Flush)),
            Phase::Rejecting { since } => Some((since + limits.header_read, Expiry::Rejection)),
        }
    }
}

/// One connection's phase, shared by its IO wrapper, its service, its response bodies
/// and its deadline watcher.
#[derive(Debug)]
struct Tracker {
    phase: Mutex<Phase>,
    changed: Notify,
}

impl Tracker {
    fn new(now: Instant) -> Tracker {
        Tracker {
            phase: Mutex::new(Phase::Idle { since: now }),
            changed: Notify::new(),
        }
    }

    fn phase(&self) -> Phase {
        *self.phase.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies a transition; wakes the deadline watcher if the phase changed.
    fn update(&self, transition: impl FnOnce(Phase) -> Phase) {
        let mut phase = self.phase.lock().unwrap_or_else(PoisonError::into_inner);
        let next = transition(*phase);
        if next != *phase {
            *phase = next;
            // Stores a wake-up if the watcher is not waiting yet, so none is lost.
            self.changed.notify_one();
        }
    }

    /// Completes when the current phase's deadline passes.
    async fn expired(&self, limits: Limits) -> Expiry {
        loop {
            let changed = self.changed.notified();
            match self.phase().deadline(limits) {
                Some((deadline, expiry)) if deadline <= Instant::now() => return expiry,
                Some((deadline, _)) => tokio::select! {
                    () = tokio::time::sleep_until(deadline) => {}
                    () = changed => {}
                },
                None => changed.await,
            }
        }
    }
}

/// Hands each request to the router and marks the connection `Serving` until the
/// response body ends.
struct Served {
    router: Router,
    tracker: Arc<Tracker>,
    /// The peer's address, given to handlers as `ConnectInfo` (`GET /metrics` serves
    /// loopback peers only by default).
    peer: std::net::SocketAddr,
}

impl hyper::service::Service<Request<Incoming>> for Served {
    type Response = Response<TrackedBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        self.tracker.update(Phase::on_request);
        // Made here, so that a request dropped before it is answered also ends `Serving`.
        let done = ResponseDone(self.tracker.clone());
        let router = self.router.clone();
        let mut request = request.map(Body::new);
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo(self.peer));
        Box::pin(async move {
            let response = router.oneshot(request).await?;
            Ok(response.map(|body| TrackedBody { body, _done: done }))
        })
    }
}

/// Ends the connection's `Serving` phase when dropped with the response body.
struct ResponseDone(Arc<Tracker>);

impl Drop for ResponseDone {
    fn drop(&mut self) {
        let now = Instant::now();
        self.0.update(|phase| phase.on_response_done(now));
    }
}

/// A response body that tells the connection's tracker when hyper is done with it.
struct TrackedBody {
    body: Body,
    _done: ResponseDone,
}

impl http_body::Body for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The socket as hyper sees it: reports reads and flushes to the tracker, and replaces
/// hyper's empty-bodied answer to a refused head by the API's JSON error.
struct Watched<S> {
    inner: S,
    tracker: Arc<Tracker>,
    /// Our answer to a refused head, and how much of it is written.
    answer: Vec<u8>,
    answer_written: usize,
    /// Whether the write side is shut (then what the client still sends is drained).
    shut: bool,
}

impl<S> Watched<S> {
    fn new(inner: S, tracker: Arc<Tracker>) -> Watched<S> {
        Watched {
            inner,
            tracker,
            answer: Vec::new(),
            answer_written: 0,
            shut: false,
        }
    }
}

impl<S: AsyncWrite + Unpin> Watched<S> {
    /// Takes `bytes` in place of the socket when they are hyper's answer to a refused
    /// head (or what follows it); returns how many were taken, or `None` to pass them on.
    fn intercept(&mut self, bytes: &[u8], total: usize) -> Option<usize> {
        let mut phase = self
            .tracker
            .phase
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Phase::Rejecting { .. } = *phase {
            return Some(total);
        }
        if !phase.writes_are_hypers() {
            return None;
        }
        // Something else than a status line is passed on unchanged rather than lost.
        let answer = rejection_answer(bytes)?;
        *phase = Phase::Rejecting {
            since: Instant::now(),
        };
        self.tracker.changed.notify_one();
        self.answer = answer;
        self.answer_written = 0;
        Some(total)
    }

    /// Reports progress writing a response (a slow reader is not an idle one).
    fn wrote(&self, written: usize) {
        if written > 0 {
            let now = Instant::now();
            self.tracker.update(|phase| phase.on_written(now));
        }
    }

    /// Writes what is left of our answer to a refused head.
    fn poll_answer(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.answer_written < self.answer.len() {
            let rest = &self.answer[self.answer_written..];
            let written = ready!(Pin::new(&mut self.inner).poll_write(cx, rest))?;
            if written == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.answer_written += written;
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        if buf.filled().len() > before {
            let now = Instant::now();
            this.tracker.update(|phase| phase.on_read(now));
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match this.intercept(buf, buf.len()) {
            Some(taken) => Poll::Ready(Ok(taken)),
            None => {
                let written = ready!(Pin::new(&mut this.inner).poll_write(cx, buf))?;
                this.wrote(written);
                Poll::Ready(Ok(written))
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let first = bufs
            .iter()
            .find(|b| !b.is_empty())
            .map_or(&[][..], |b| &b[..]);
        let total = bufs.iter().map(|b| b.len()).sum();
        match this.intercept(first, total) {
            Some(taken) => Poll::Ready(Ok(taken)),
            None => {
                let written = ready!(Pin::new(&mut this.inner).poll_write_vectored(cx, bufs))?;
                this.wrote(written);
                Poll::Ready(Ok(written))
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_answer(cx))?;
        ready!(Pin::new(&mut this.inner).poll_flush(cx))?;
        let now = Instant::now();
        this.tracker.update(|phase| phase.on_flushed(now));
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_answer(cx))?;
        if !this.shut {
            ready!(Pin::new(&mut this.inner).poll_shutdown(cx))?;
            this.shut = true;
        }
        if !matches!(this.tracker.phase(), Phase::Rejecting { .. }) {
            return Poll::Ready(Ok(()));
        }
        // After a refused head the client is often still sending (the rest of 1,000
        // headers); closing with unread bytes makes the kernel send a reset, which can
        // destroy our answer before the client reads it. So read and drop until the
        // client closes; the `Rejecting` deadline bounds how long.
        let mut scratch = [0u8; 4096];
        loop {
            let mut buf = ReadBuf::new(&mut scratch);
            match ready!(Pin::new(&mut this.inner).poll_read(cx, &mut buf)) {
                Ok(()) if buf.filled().is_empty() => return Poll::Ready(Ok(())),
                Ok(()) => {}
                Err(_) => return Poll::Ready(Ok(())),
            }
        }
    }
}

/// Our full answer to a head hyper refused, given the start of hyper's own answer
/// (`HTTP/1.1 431 Request Header Fields Too Large\r\n…`): the same status, the API's JSON
/// error body, and `Connection: close` (hyper closes the connection after it).
/// `None` when `hyper_head` does not start with a status line.
fn rejection_answer(hyper_head: &[u8]) -> Option<Vec<u8>> {
    let rest = hyper_head.strip_prefix(b"HTTP/1.")?;
    let digits = rest.get(2..5)?;
    if rest.get(1) != Some(&b' ') || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let status = StatusCode::from_bytes(digits).ok()?;
    let (code, message) = rejection_error(status);
    let body = crate::error::ApiError::new(status, code, message).envelope_json();
    let head = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         date: {}\r\nconnection: close\r\n\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("Error"),
        body.len(),
        httpdate::fmt_http_date(std::time::SystemTime::now())
    );
    Some([head.into_bytes(), body].concat())
}

/// The code and message of each status hyper answers by itself (`Server::on_error` in
/// hyper's `proto/h1/role.rs`); hyper does not tell which rule the head broke.
fn rejection_error(status: StatusCode) -> (&'static str, &'static str) {
    match status {
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => (
            "headers_too_large",
            "the request has too many header fields, or its head is too large",
        ),
        StatusCode::URI_TOO_LONG => ("uri_too_long", "the request target is too long"),
        s if s.is_server_error() => ("internal", "the server could not read the request"),
        _ => (
            "bad_request",
            "the request head could not be parsed: a malformed request line, a header \
             name or value with a forbidden character, or conflicting Content-Length or \
             Transfer-Encoding headers",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            header_read: Duration::from_secs(10),
            idle: Duration::from_secs(60),
            connections_max: 10,
            shutdown_grace: Duration::from_secs(90),
        }
    }

    #[test]
    fn each_phase_has_the_deadline_of_what_it_waits_for() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let cases = [
            (Phase::Idle { since: t0 }, Some((t0 + s(60), Expiry::Idle))),
            (
                Phase::ReadingHead { since: t0 },
                Some((t0 + s(10), Expiry::HeaderRead)),
            ),
            (
                Phase::Serving {
                    open: 1,
                    stalled_since: None,
                },
                None,
            ),
            (
                Phase::Serving {
                    open: 1,
                    stalled_since: Some(t0),
                },
                Some((t0 + s(60), Expiry::Flush)),
            ),
            (
                Phase::Flushing { since: t0 },
                Some((t0 + s(60), Expiry::Flush)),
            ),
            (
                Phase::Rejecting { since: t0 },
                Some((t0 + s(10), Expiry::Rejection)),
            ),
        ];
        for (phase, expected) in cases {
            assert_eq!(phase.deadline(limits()), expected, "{phase:?}");
        }
    }

    #[test]
    fn a_keep_alive_round_goes_idle_reading_serving_flushing_idle() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        let t2 = t0 + Duration::from_secs(2);
        let t3 = t0 + Duration::from_secs(3);
        let idle = Phase::Idle { since: t0 };
        let reading = idle.on_read(t1);
        assert_eq!(reading, Phase::ReadingHead { since: t1 });
        // More trickled bytes do not move the header deadline.
        assert_eq!(reading.on_read(t2), reading);
        let serving = reading.on_request();
        assert_eq!(
            serving,
            Phase::Serving {
                open: 1,
                stalled_since: None
            }
        );
        // Body bytes do not end `Serving`; a flush before the body ended neither.
        assert_eq!(serving.on_read(t2), serving);
        assert_eq!(serving.on_flushed(t2), serving);
        // Writes while serving do not matter; while flushing they push the deadline.
        assert_eq!(serving.on_written(t2), serving);
        let flushing = serving.on_response_done(t2);
        assert_eq!(flushing, Phase::Flushing { since: t2 });
        assert_eq!(flushing.on_written(t3), Phase::Flushing { since: t3 });
        assert_eq!(flushing.on_flushed(t3), Phase::Idle { since: t3 });
        assert_eq!(
            Phase::Idle { since: t3 }.on_written(t3),
            Phase::Idle { since: t3 }
        );
    }

    #[test]
    fn a_pipelined_request_keeps_the_connection_serving() {
        let t0 = Instant::now();
        let serving = |open| Phase::Serving {
            open,
            stalled_since: None,
        };
        let two = Phase::Idle { since: t0 }.on_request().on_request();
        assert_eq!(two, serving(2));
        assert_eq!(two.on_response_done(t0), serving(1));
    }

    /// A request pipelined behind a response still being written keeps that response's
    /// write deadline until the response is out: a client that pipelines and never reads
    /// is closed after `idle`, not held for ever (and no longer blocks a shutdown).
    #[test]
    fn a_request_pipelined_behind_an_unwritten_response_keeps_its_write_deadline() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        let stalled = Phase::Flushing { since: t0 }.on_request();
        let deadline = |phase: Phase| phase.deadline(limits());
        assert_eq!(
            deadline(stalled),
            Some((t0 + Duration::from_secs(60), Expiry::Flush))
        );
        // Another pipelined request, or the earlier response's end, keeps it.
        assert_eq!(deadline(stalled.on_request()), deadline(stalled));
        // Progress writing pushes it; the write finishing ends it (the handler runs).
        let progressed = stalled.on_written(t1);
        assert_eq!(
            deadline(progressed),
            Some((t1 + Duration::from_secs(60), Expiry::Flush))
        );
        assert_eq!(deadline(progressed.on_flushed(t1)), None);
    }

    #[test]
    fn only_idle_or_head_reading_writes_are_taken_for_hypers_rejection() {
        let t0 = Instant::now();
        assert!(Phase::Idle { since: t0 }.writes_are_hypers());
        assert!(Phase::ReadingHead { since: t0 }.writes_are_hypers());
        assert!(!Phase::Serving {
            open: 1,
            stalled_since: None
        }
        .writes_are_hypers());
        assert!(!Phase::Flushing { since: t0 }.writes_are_hypers());
        assert!(!Phase::Rejecting { since: t0 }.writes_are_hypers());
    }

    #[test]
    fn hypers_rejections_become_json_with_the_same_status() {
        let cases = [
            (
                &b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n"[..],
                400,
                "bad_request",
            ),
            (
                b"HTTP/1.1 431 Request Header Fields Too Large\r\n\r\n",
                431,
                "headers_too_large",
            ),
            (b"HTTP/1.0 414 URI Too Long\r\n\r\n", 414, "uri_too_long"),
        ];
        for (hyper_head, status, code) in cases {
            let answer = rejection_answer(hyper_head).expect("a status line");
            let text = String::from_utf8(answer).expect("ASCII");
            let (head, body) = text.split_once("\r\n\r\n").expect("a head and a body");
            assert!(head.starts_with(&format!("HTTP/1.1 {status} ")), "{head}");
            assert!(head.contains("content-type: application/json"), "{head}");
            assert!(
                head.contains(&format!("content-length: {}", body.len())),
                "{head}"
            );
            assert!(head.contains("connection: close"), "{head}");
            assert!(head.contains(" GMT\r\n"), "a date: {head}");
            let json: serde_json::Value = serde_json::from_str(body).expect("JSON");
            assert_eq!(json["error"]["code"], code);
            assert!(json["error"]["message"].is_string());
        }
    }

    #[test]
    fn bytes_that_are_not_a_status_line_are_not_rewritten() {
        for bytes in [
            &b""[..],
            b"HTTP/1.1",
            b"HTTP/1.1 4x0 Bad\r\n",
            b"{\"a\":1}",
            b"HTTP/2 400",
        ] {
            assert_eq!(rejection_answer(bytes), None, "{bytes:?}");
        }
    }

    #[test]
    fn the_cap_stays_below_the_open_file_limit() {
        let reserved = files_reserved(16);
        assert_eq!(reserved, 176);
        let cases = [
            (1_024, 10_000, 848),
            (1_048_576, 10_000, 10_000),
            (100, 10_000, 1),
            (u64::MAX, 5, 5),
            (1_024, 0, 1),
        ];
        for (open_files_max, requested, expected) in cases {
            assert_eq!(
                connections_max_within(open_files_max, reserved, requested),
                expected,
                "{open_files_max} {requested}"
            );
        }
    }
}

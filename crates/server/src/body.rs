//! Reading request bodies under a byte limit and parsing them strictly, so every bad body
//! becomes a clear JSON error before anything is written.

use axum::body::{Body, Bytes};
use axum::http::header::{CONTENT_ENCODING, CONTENT_LENGTH};
use axum::http::HeaderMap;
use serde_json::Value;
use traqlyte_identity::json;
use traqlyte_store::TenantId;

use crate::{ApiError, AppState};

pub(crate) mod typed;

/// How much of an oversized body is read and thrown away so the client, still sending,
/// gets its 413 instead of a broken pipe. Beyond this the connection is simply closed.
const OVERSIZE_DRAIN_BYTES_MAX: u64 = 32 * 1024 * 1024;

/// Reads the whole body, refusing (413) one larger than `limit_bytes`; a declared
/// `Content-Length` over the limit is refused without buffering the body. A body sent
/// with `Content-Encoding: gzip` is inflated, and `limit_bytes` bounds both what is
/// read and what it inflates to (so a small body cannot expand into a large one); any
/// other encoding is `415 unsupported_content_encoding`, a broken gzip stream
/// `400 invalid_gzip`.
pub async fn read_limited(
    headers: &HeaderMap,
    body: Body,
    limit_bytes: usize,
) -> Result<Bytes, ApiError> {
    // Refused before the body is read: the unread rest makes the connection unusable.
    let gzip = content_encoding(headers).map_err(ApiError::closing_connection)?;
    let bytes = read_raw(headers, body, limit_bytes).await?;
    if !gzip {
        return Ok(bytes);
    }
    if bytes.len() <= INFLATE_INLINE_BYTES_MAX {
        return inflate(&bytes, limit_bytes);
    }
    // Up to a batch's limit of output: off the request threads.
    tokio::task::spawn_blocking(move || inflate(&bytes, limit_bytes))
        .await
        .map_err(|err| ApiError::internal(format!("inflating a body: {err}")))?
}

/// Compressed bodies up to this size are inflated on the request's own thread; larger
/// ones on the blocking pool, so many concurrent gzip batches cannot stall the runtime.
const INFLATE_INLINE_BYTES_MAX: usize = 16 * 1024;

/// Makes `headers` describe a body of `len` bytes as [`read_limited`] returned it (no
/// `Content-Encoding` any more), for a layer that read the body and hands it on.
pub(crate) fn as_read(headers: &mut HeaderMap, len: usize) {
    headers.remove(CONTENT_ENCODING);
    headers.insert(CONTENT_LENGTH, axum::http::HeaderValue::from(len));
}

/// Whether the body is gzip-compressed: true when the codings of every
/// `Content-Encoding` line, comma-separated, are one `gzip` (or its alias `x-gzip`) and
/// any number of `identity`; false without one; anything else (another coding, gzip
/// twice, a value that is not text) is refused before the body is read.
fn content_encoding(headers: &HeaderMap) -> Result<bool, ApiError> {
    let mut gzip = 0;
    for value in headers.get_all(CONTENT_ENCODING) {
        let refuse = || {
            ApiError::new(
                axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_content_encoding",
                format!(
                    "Content-Encoding {:?} is not supported: send the body as it is, or compressed with one gzip",
                    String::from_utf8_lossy(value.as_bytes())
                ),
            )
            .with_field("Content-Encoding")
        };
        let text = value.to_str().map_err(|_| refuse())?;
        for coding in text.split(',').map(str::trim) {
            if coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip") {
                gzip += 1;
            } else if !(coding.is_empty() || coding.eq_ignore_ascii_case("identity")) {
                return Err(refuse());
            }
        }
        if gzip > 1 {
            return Err(refuse());
        }
    }
    Ok(gzip == 1)
}

/// Inflates a gzip body (every member of it, as `gzip -c a b` writes them) to at most
/// `limit_bytes`.
fn inflate(compressed: &[u8], limit_bytes: usize) -> Result<Bytes, ApiError> {
    use std::io::Read;
    let mut inflated = Vec::with_capacity(compressed.len().saturating_mul(4).min(limit_bytes));
    let reader = flate2::read::MultiGzDecoder::new(compressed);
    let cap = u64::try_from(limit_bytes)
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    match reader.take(cap).read_to_end(&mut inflated) {
        Ok(_) if inflated.len() > limit_bytes => Err(ApiError::new(
            axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("request body inflates to more than the limit of {limit_bytes} bytes"),
        )
        .with_field("Content-Encoding")),
        Ok(_) => Ok(Bytes::from(inflated)),
        Err(err) => Err(ApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
            "invalid_gzip",
            format!(
                "the body is sent with Content-Encoding gzip but is not a whole gzip stream: {err}"
            ),
        )
        .with_field("Content-Encoding")),
    }
}

/// The room for request bodies in flight, one permit a KiB
/// ([`crate::ServerConfig::bodies_in_flight_bytes_max`]), and the share of it each
/// tenant may hold: a request takes its KiB from its tenant's share, then from the room.
/// A share is the tenant's own, keyed by the tenant of the credential the request
/// presents ([`Rooms::share`]), so a tenant's API keys and Segment write keys hold one
/// share together (keyed by credential, a tenant with four of them held the whole room)
/// and no other tenant's bodies take from it (a hash of the tenant once picked one of
/// 256 slots: two tenants meeting in one made each other wait, and one in forty runs of
/// a test saw it). A credential that names no tenant (refused before its body is read by
/// every route that takes one from a header) is keyed by itself, a hash of it picking one
/// of [`CREDENTIAL_SHARES`] slots (anyone can send new ones: a share each would be no
/// bound). Requests presenting none (Segment's calls that carry `writeKey` in
/// the body, read before it is checked) share one slot of their own, an eighth of the
/// room. So neither one tenant's slow or dense bodies nor anonymous ones can take the
/// room every tenant writes through.
pub(crate) struct Rooms {
    all: std::sync::Arc<tokio::sync::Semaphore>,
    all_kib: u32,
    /// Each tenant's share while a request of it holds room.
    tenant_shares: std::sync::Mutex<TenantShares<TenantId>>,
    /// Shares of credentials that name no tenant, by a hash of the credential.
    shares: Vec<std::sync::Arc<tokio::sync::Semaphore>>,
    share_kib: u32,
    anonymous: std::sync::Arc<tokio::sync::Semaphore>,
    anonymous_kib: u32,
    hasher: std::collections::hash_map::RandomState,
    /// The tenant of each working credential seen (by its hash), so only a credential's
    /// first request looks it up. Picks a share, nothing more: whether the credential
    /// works is the store's answer to the request's own lookup. A credential that names no
    /// tenant is not remembered (anyone can send new ones; each costs a lookup here and
    /// the request's own, then a `401` before its body is read).
    tenants: std::sync::Mutex<std::collections::HashMap<u64, TenantId>>,
}

/// Each tenant's share of the room, kept only while a request holds it (a tenant with
/// nothing in flight has its whole share, so a new one is the same): a share whose last
/// holder is gone is forgotten when the map next doubles, so it holds at most about
/// twice the most tenants with requests in flight at once.
struct TenantShares<Tenant> {
    shares: std::collections::HashMap<Tenant, std::sync::Weak<tokio::sync::Semaphore>>,
    /// Entries at which the forgotten shares are next swept out.
    sweep_at: usize,
}

impl<Tenant: Clone + Eq + std::hash::Hash> TenantShares<Tenant> {
    fn new() -> TenantShares<Tenant> {
        TenantShares {
            shares: std::collections::HashMap::new(),
            sweep_at: TENANT_SHARES_SWEPT_FROM,
        }
    }

    /// The share of `tenant`, `kib` in size when it holds none.
    fn of(&mut self, tenant: &Tenant, kib: u32) -> std::sync::Arc<tokio::sync::Semaphore> {
        if let Some(share) = self.shares.get(tenant).and_then(std::sync::Weak::upgrade) {
            return share;
        }
        if self.shares.len() >= self.sweep_at {
            self.shares.retain(|_, share| share.strong_count() > 0);
            self.sweep_at = (2 * self.shares.len()).max(TENANT_SHARES_SWEPT_FROM);
        }
        let share = std::sync::Arc::new(tokio::sync::Semaphore::new(kib as usize));
        self.shares
            .insert(tenant.clone(), std::sync::Arc::downgrade(&share));
        share
    }
}

/// Entries of [`TenantShares`] below which forgotten shares are left where they are.
const TENANT_SHARES_SWEPT_FROM: usize = 1_024;

/// Credentials whose tenant [`Rooms`] remembers; past it the memory starts again.
const CREDENTIALS_REMEMBERED_MAX: usize = 10_000;

/// How long [`Rooms::share`] waits for a credential's tenant before keying the request by
/// the credential: the store slow or out of reach, the request's own lookup is what
/// answers (`503 store_busy`), not a second wait before it.
const TENANT_LOOKUP_WAIT: std::time::Duration = std::time::Duration::from_millis(250);

/// The credential a request presents for its route.
enum Credential {
    /// An API key (`Authorization: Bearer`).
    Api(traqlyte_store::ApiKey),
    /// A Segment write key of a Basic header on `/v1/*`.
    Write(String),
}

impl Credential {
    fn text(&self) -> &str {
        match self {
            Credential::Api(key) => key.expose(),
            Credential::Write(text) => text,
        }
    }

    /// Its tenant, looked up in the store; `None` when it names none, `Err` when the
    /// store did not answer.
    async fn tenant(&self, state: &crate::AppState) -> Result<Option<TenantId>, ()> {
        match self {
            Credential::Api(key) => state.store.tenant_for_key(key).await.map_err(drop),
            Credential::Write(text) => match traqlyte_store::WriteKey::parse(text.trim()) {
                Some(key) => Ok(state
                    .store
                    .source_for_write_key(&key)
                    .await
                    .map_err(drop)?
                    .map(|source| source.tenant)),
                None => Ok(None),
            },
        }
    }
}

/// Slots of the shares of credentials that name no tenant ([`Rooms`]): two whose headers
/// hash to one slot share it.
pub(crate) const CREDENTIAL_SHARES: usize = 256;

impl Rooms {
    pub(crate) fn new(config: &crate::ServerConfig) -> Rooms {
        let all_kib = u32::try_from(budget_kib(config)).unwrap_or(u32::MAX);
        let share_kib = all_kib.div_ceil(4);
        let anonymous_kib = all_kib.div_ceil(8);
        let semaphore = |kib: u32| std::sync::Arc::new(tokio::sync::Semaphore::new(kib as usize));
        Rooms {
            all: semaphore(all_kib),
            all_kib,
            tenant_shares: std::sync::Mutex::new(TenantShares::new()),
            shares: (0..CREDENTIAL_SHARES)
                .map(|_| semaphore(share_kib))
                .collect(),
            share_kib,
            anonymous: semaphore(anonymous_kib),
            anonymous_kib,
            hasher: std::collections::hash_map::RandomState::new(),
            tenants: std::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// The share of the tenant whose credential a request to `path` presents, and its
    /// size in KiB. The credential is the key itself, however the header spells it
    /// (`Bearer K`, `bearer  K`: one), or Segment's write key of a Basic header on
    /// `/v1/*`; its tenant is looked up once per credential (then remembered). A request
    /// presenting none its route takes (no header, another scheme, a malformed one) is
    /// anonymous: the routes that take a header credential refuse it before reading the
    /// body, and `/v1/*` reads the body to find `writeKey` there.
    async fn share(
        &self,
        state: &crate::AppState,
        path: &str,
        headers: &HeaderMap,
    ) -> (std::sync::Arc<tokio::sync::Semaphore>, u32) {
        use std::hash::BuildHasher;
        let credential = if path.starts_with("/v1/") {
            crate::connectors::segment::auth::presented_write_key(headers).map(Credential::Write)
        } else {
            crate::auth::bearer_key(headers).ok().map(Credential::Api)
        };
        let Some(credential) = credential else {
            return (self.anonymous.clone(), self.anonymous_kib);
        };
        let hash = self.hasher.hash_one(credential.text());
        let remembered = self.remembered(hash);
        let tenant = match remembered {
            Some(tenant) => Some(tenant),
            None => {
                match tokio::time::timeout(TENANT_LOOKUP_WAIT, credential.tenant(state)).await {
                    Ok(Ok(Some(tenant))) => {
                        self.remember(hash, tenant.clone());
                        Some(tenant)
                    }
                    // No tenant, or the store slow or out of reach: keyed by the credential.
                    Ok(Ok(None) | Err(())) | Err(_) => None,
                }
            }
        };
        let share = match &tenant {
            Some(tenant) => {
                let mut shares = self.tenant_shares.lock().unwrap_or_else(|e| e.into_inner());
                shares.of(tenant, self.share_kib)
            }
            None => self.shares[hash as usize % self.shares.len()].clone(),
        };
        (share, self.share_kib)
    }

    fn remembered(&self, hash: u64) -> Option<TenantId> {
        let tenants = self.tenants.lock().unwrap_or_else(|e| e.into_inner());
        tenants.get(&hash).cloned()
    }

    fn remember(&self, hash: u64, tenant: TenantId) {
        let mut tenants = self.tenants.lock().unwrap_or_else(|e| e.into_inner());
        if tenants.len() >= CREDENTIALS_REMEMBERED_MAX {
            tenants.clear();
        }
        tenants.insert(hash, tenant);
    }
}

/// Room a body of known length takes at once, for each of its bytes: the bytes and a
/// tree of up to 5 times them (a batch of flat events parses into about 4 times its
/// text; the rest of a denser tree is taken as it is parsed).
const BODY_AND_TREE_PER_BYTE: usize = 6;

fn budget_kib(config: &crate::ServerConfig) -> usize {
    let kib = config.bodies_in_flight_bytes_max.div_ceil(1024).max(1);
    kib.min(tokio::sync::Semaphore::MAX_PERMITS)
}

/// The largest body the route of `path` reads (what a body without a `Content-Length`,
/// or a compressed one, may come to).
fn route_bytes_max(config: &crate::ServerConfig, path: &str) -> usize {
    if path.starts_with("/v1/") {
        crate::connectors::segment::config::BATCH_BYTES_MAX
    } else if path == "/api/v1/lineage" {
        config.lineage_body_bytes_max
    } else if path.ends_with("/batch") {
        config.batch_bytes_max
    } else {
        config.body_bytes_max
    }
}

/// Middleware: a request with a body takes room for it ([`Rooms`]: from its tenant's
/// share, then from the room every request shares) for as long as it is read and handled
/// (its parsed form lives as long), waiting at most half the request timeout (5 s at most)
/// for room, then `503 server_busy` (with `Retry-After`, and `Connection: close` as every
/// 503: the body is unread). Counted at its `Content-Length`, or at the largest body its
/// route takes when it sends none or is compressed (it may inflate to that). As it is
/// parsed, the body's tree takes room of its own ([`parse_in_room`]).
pub(crate) async fn take_room(
    axum::extract::State(state): axum::extract::State<crate::AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let largest = route_bytes_max(&state.config, request.uri().path());
    let headers = request.headers();
    let (bytes, known_length) = match declared_length(headers) {
        Some(0) => return next.run(request).await,
        None if !headers.contains_key(axum::http::header::TRANSFER_ENCODING) => {
            return next.run(request).await
        }
        Some(length) if !headers.contains_key(CONTENT_ENCODING) => (
            usize::try_from(length).map_or(largest, |length| length.min(largest)),
            true,
        ),
        _ => (largest, false),
    };
    // A body of known length takes room for its likely tree too, so requests that fit
    // are admitted whole and seldom wait halfway (a request waiting for more room holds
    // what it has, and requests holding each other up end in 503s). One sent without a
    // length, or compressed, is counted at its route's largest, which usually covers it.
    let bytes = if known_length {
        bytes.saturating_mul(BODY_AND_TREE_PER_BYTE)
    } else {
        bytes
    };
    let rooms = &state.bodies;
    let (share, share_kib) = rooms.share(&state, request.uri().path(), headers).await;
    let kib = kib_of(bytes.max(1)).min(share_kib);
    let wait = room_wait(&state.config);
    let Some(body) = take_both(&share, &rooms.all, kib, wait).await else {
        return busy().into_response();
    };
    let held = Room {
        all: rooms.all.clone(),
        share,
        kib_free_to_take: share_kib.min(rooms.all_kib) - kib,
        wait,
        body,
        body_kib: kib,
        tree: Vec::new(),
        tree_kib: 0,
    };
    ROOM.scope(std::cell::RefCell::new(held), next.run(request))
        .await
}

tokio::task_local! {
    /// The room the request being handled holds ([`take_room`]), which its parsed body
    /// adds to ([`parse_in_room`]); released when its answer is made.
    static ROOM: std::cell::RefCell<Room>;
}

/// Room a request holds for its body and the body's parsed tree, each KiB of it from the
/// tenant's share and from the room every request shares ([`Rooms`]).
struct Room {
    all: std::sync::Arc<tokio::sync::Semaphore>,
    share: std::sync::Arc<tokio::sync::Semaphore>,
    /// Most KiB the request may still take: its share less what it holds, so a request
    /// never waits for room it holds itself.
    kib_free_to_take: u32,
    wait: std::time::Duration,
    /// The room taken for the body (`body_kib`): its bytes, and what they leave of it
    /// for its tree.
    body: [tokio::sync::OwnedSemaphorePermit; 2],
    body_kib: u32,
    /// The room for the parsed tree, `tree_kib` in all.
    tree: Vec<[tokio::sync::OwnedSemaphorePermit; 2]>,
    tree_kib: u32,
}

/// How long a request waits for room: half the request timeout, 5 s at most.
fn room_wait(config: &crate::ServerConfig) -> std::time::Duration {
    std::time::Duration::from_millis((config.request_timeout_ms / 2).clamp(1, 5_000))
}

/// `kib` of the room, at once when free (the usual case, which sets no timer), else
/// within `wait`.
async fn take(
    bodies: &std::sync::Arc<tokio::sync::Semaphore>,
    kib: u32,
    wait: std::time::Duration,
) -> Option<tokio::sync::OwnedSemaphorePermit> {
    match bodies.clone().try_acquire_many_owned(kib) {
        Ok(room) => Some(room),
        Err(_) => tokio::time::timeout(wait, bodies.clone().acquire_many_owned(kib))
            .await
            .ok()?
            .ok(),
    }
}

/// `kib` of a tenant's `share`, then of the room every request shares (`all`), both
/// within one `wait`.
async fn take_both(
    share: &std::sync::Arc<tokio::sync::Semaphore>,
    all: &std::sync::Arc<tokio::sync::Semaphore>,
    kib: u32,
    wait: std::time::Duration,
) -> Option<[tokio::sync::OwnedSemaphorePermit; 2]> {
    let deadline = tokio::time::Instant::now() + wait;
    let of_share = take(share, kib, wait).await?;
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    Some([of_share, take(all, kib, left).await?])
}

/// Whole KiB holding `bytes`.
fn kib_of(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX)
}

/// `503 server_busy`: no room for a body came within the wait.
pub(crate) fn busy() -> ApiError {
    ApiError::new(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        "server_busy",
        "the server is reading or handling as many request bodies as it holds at once; nothing was written, retry shortly",
    )
}

/// Parses `bytes` with `parse`, its tree taking room beside the room its request took for
/// the bytes, as the tree grows ([`json::Meter`]): a tree takes from about 2 to about 100
/// times its text, so counting bytes alone let a few dozen dense bodies of a few MB hold
/// many GB. Room that is not free at once stops the parse; the room held for the tree,
/// and the body's room beyond its bytes, are given back, and twice what the tree had
/// reached is waited for as [`take_room`] waits, then the body parsed again.
/// No room within the wait: `503 server_busy`, nothing written; a tree larger than the
/// request's credential may hold (its share of the room, [`Rooms`]):
/// `413 body_too_large`. Outside a request that took room (a test calling a reader
/// directly) the parse is not bounded.
///
/// The outer error is the room's, the inner result the parse's.
pub(crate) async fn parse_in_room<T>(
    bytes: &[u8],
    parse: impl Fn(&[u8], &json::Meter) -> Result<T, json::ParseError>,
) -> Result<Result<T, json::ParseError>, ApiError> {
    if ROOM.try_with(|_| ()).is_err() {
        return Ok(parse(bytes, &json::Meter::unbounded()));
    }
    loop {
        // The meter lives in this block only: it is not `Send`, and the wait below is an
        // await point of the handler's future.
        let parsed = {
            let granted = ROOM.with(|room| room.borrow().for_tree(bytes.len()));
            let mut more = |needed: usize, wanted: usize| {
                ROOM.with(|room| room.borrow_mut().take_now(needed, wanted))
            };
            parse(bytes, &json::Meter::new(granted, &mut more))
        };
        let used = match parsed {
            Err(json::ParseError::OutOfRoom { used }) => used,
            other => return Ok(other),
        };
        // The partial tree is gone: its room is given back before waiting (requests
        // waiting for room hold none for a tree, so they cannot hold each other up), then
        // twice what it reached is waited for, at most what the request may take.
        let (share, all, wait, most, slack) = ROOM.with(|room| {
            let mut room = room.borrow_mut();
            room.release_tree();
            room.release_slack(bytes.len());
            let slack = room.for_tree(bytes.len());
            let room = &*room;
            (
                room.share.clone(),
                room.all.clone(),
                room.wait,
                room.kib_free_to_take,
                slack,
            )
        });
        if used > slack.saturating_add(most as usize * 1024) {
            return Err(ApiError::new(
                axum::http::StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!(
                    "the body parses into more memory than one client may hold of the room for request bodies (more than {used} bytes; its share of --bodies-in-flight-bytes-max); send it in smaller parts"
                ),
            ));
        }
        let kib = kib_of(used.saturating_mul(2).saturating_sub(slack)).clamp(1, most);
        let permits = take_both(&share, &all, kib, wait).await.ok_or_else(busy)?;
        ROOM.with(|room| room.borrow_mut().hold(permits, kib));
    }
}

/// [`parse_in_room`] for a parse whose tree `parse` drops before returning (it keeps only
/// what it derives, such as a canonical form): the room the tree took is given back
/// after it, for the handler's own parse of the same body.
pub(crate) async fn parse_transient<T>(
    bytes: &[u8],
    parse: impl Fn(&[u8], &json::Meter) -> Result<T, json::ParseError>,
) -> Result<Result<T, json::ParseError>, ApiError> {
    let parsed = parse_in_room(bytes, parse).await;
    let _ = ROOM.try_with(|room| room.borrow_mut().release_tree());
    parsed
}

impl Room {
    /// Takes room for the tree at once: `wanted` bytes if free, else `needed`; the bytes
    /// taken (0: none).
    fn take_now(&mut self, needed: usize, wanted: usize) -> usize {
        let (needed, wanted) = (kib_of(needed), kib_of(wanted).min(self.kib_free_to_take));
        for kib in [wanted, needed] {
            if kib < needed || kib > self.kib_free_to_take {
                continue;
            }
            let Ok(of_share) = self.share.clone().try_acquire_many_owned(kib) else {
                continue;
            };
            if let Ok(of_all) = self.all.clone().try_acquire_many_owned(kib) {
                self.hold([of_share, of_all], kib);
                return kib as usize * 1024;
            }
        }
        0
    }

    /// Keeps `permit`, `kib` of room for the tree, until the answer is made.
    fn hold(&mut self, permit: [tokio::sync::OwnedSemaphorePermit; 2], kib: u32) {
        self.kib_free_to_take -= kib;
        self.tree_kib += kib;
        self.tree.push(permit);
    }

    /// Bytes the tree of a body of `bytes` may take: what the body's room leaves, and
    /// the room taken for the tree.
    fn for_tree(&self, bytes: usize) -> usize {
        (self.body_kib as usize * 1024).saturating_sub(bytes) + self.tree_kib as usize * 1024
    }

    /// Gives back what the body's room holds beyond the body's `bytes` (what it took for a
    /// likely tree): a request about to wait for room holds only what it really has, so
    /// requests of one credential waiting for more cannot hold each other up.
    fn release_slack(&mut self, bytes: usize) {
        let kept = kib_of(bytes.max(1)).min(self.body_kib);
        let slack = (self.body_kib - kept) as usize;
        if slack == 0 {
            return;
        }
        for permit in &mut self.body {
            drop(permit.split(slack));
        }
        self.body_kib = kept;
        self.kib_free_to_take += slack as u32;
    }

    /// Gives back the room held for the tree.
    fn release_tree(&mut self) {
        self.tree.clear();
        self.kib_free_to_take += std::mem::take(&mut self.tree_kib);
    }
}

/// `request` with its body tracked: the flag turns true once the body has been read to
/// its end. `None` (the request as it was) when it declares no body (no
/// `Content-Length`, or 0, and no `Transfer-Encoding`).
pub(crate) fn tracked(
    request: axum::extract::Request,
) -> (
    axum::extract::Request,
    Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
) {
    let headers = request.headers();
    let declares_body = match declared_length(headers) {
        Some(length) => length > 0,
        None => headers.contains_key(axum::http::header::TRANSFER_ENCODING),
    };
    if !declares_body {
        return (request, None);
    }
    let read = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = read.clone();
    let request = request.map(|inner| Body::new(Tracked { inner, read: flag }));
    (request, Some(read))
}

/// A request body that says when it has been read to its end ([`tracked`]).
struct Tracked {
    inner: Body,
    read: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        let ended = match &polled {
            std::task::Poll::Ready(None) => true,
            std::task::Poll::Ready(Some(Ok(_))) => http_body::Body::is_end_stream(&self.inner),
            _ => false,
        };
        if ended {
            self.read.store(true, std::sync::atomic::Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        http_body::Body::is_end_stream(&self.inner)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::Body::size_hint(&self.inner)
    }
}

/// The body's length as its `Content-Length` declares it, when that is a number.
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

/// [`read_limited`] without the decoding: the bytes as sent.
async fn read_raw(headers: &HeaderMap, body: Body, limit_bytes: usize) -> Result<Bytes, ApiError> {
    let declared = declared_length(headers);
    if let Some(length) = declared.filter(|length| *length > limit_bytes as u64) {
        // Once the whole body is read the connection is clean and stays open; an
        // unread rest makes it unusable, so the client is told to close it.
        if length <= OVERSIZE_DRAIN_BYTES_MAX
            && !expects_continue(headers)
            && drain(body, OVERSIZE_DRAIN_BYTES_MAX).await
        {
            return Err(ApiError::too_large(limit_bytes));
        }
        return Err(ApiError::too_large(limit_bytes).closing_connection());
    }
    collect(body, limit_bytes, declared)
        .await
        .map_err(|unread| match unread {
            Unread::TooLarge => ApiError::too_large(limit_bytes).closing_connection(),
            Unread::Broken(why) => ApiError::new(
                axum::http::StatusCode::BAD_REQUEST,
                "incomplete_body",
                format!("the request body broke off or is framed wrongly ({why}): it ended before its Content-Length, or a chunk of a chunked body is malformed or missing; nothing of it was read, send it again whole"),
            )
            .closing_connection(),
        })
}

/// Why [`collect`] read no body: past its limit, or broken off in its framing (hyper's
/// reason: a connection closed before `Content-Length` bytes or the last chunk, a chunk
/// size that is not hex). A broken body was answered `413 body_too_large`, which clients
/// take as final, for a body of 23 bytes.
#[derive(Debug)]
enum Unread {
    TooLarge,
    Broken(String),
}

/// Most bytes reserved ahead for a body sent in several frames (it grows past this as
/// its bytes arrive).
const RESERVED_BYTES_MAX: usize = 64 << 10;

/// The body's bytes, at most `limit_bytes` (else `Err`, the rest unread). A body that
/// comes in one frame is kept as it is; one that comes in several is copied frame by
/// frame and each frame dropped: a frame can be a slice of a read buffer many times its
/// size, and keeping every frame of a body sent a byte at a time held about 4 KB a byte
/// received (a hundred slow clients: 500 MB in 26 s).
async fn collect(
    mut body: Body,
    limit_bytes: usize,
    declared: Option<u64>,
) -> Result<Bytes, Unread> {
    use http_body::Body as _;
    let mut first: Option<Bytes> = None;
    let mut copied: Option<Vec<u8>> = None;
    let mut total = 0usize;
    loop {
        let frame = std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await;
        let data = match frame {
            None => break,
            Some(Err(err)) => {
                // hyper's message is generic ("error reading a body from connection"); the
                // reason is in its sources.
                let mut why = err.to_string();
                let mut source = std::error::Error::source(&err);
                while let Some(cause) = source {
                    why.push_str(": ");
                    why.push_str(&cause.to_string());
                    source = cause.source();
                }
                return Err(Unread::Broken(why));
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => data,
                // Trailers carry no body bytes.
                Err(_) => continue,
            },
        };
        total = total.saturating_add(data.len());
        if total > limit_bytes {
            return Err(Unread::TooLarge);
        }
        match (&mut copied, first.take()) {
            (Some(bytes), _) => bytes.extend_from_slice(&data),
            (None, None) => first = Some(data),
            (None, Some(earlier)) => {
                let reserve = declared
                    .and_then(|length| usize::try_from(length).ok())
                    .unwrap_or(0)
                    .clamp(total, RESERVED_BYTES_MAX.max(total));
                let mut bytes = Vec::with_capacity(reserve);
                bytes.extend_from_slice(&earlier);
                bytes.extend_from_slice(&data);
                copied = Some(bytes);
            }
        }
    }
    Ok(match (copied, first) {
        (Some(bytes), _) => Bytes::from(bytes),
        (None, Some(data)) => data,
        (None, None) => Bytes::new(),
    })
}

/// Reads and discards up to `bytes_max` bytes of `body`, holding one frame at a time;
/// true when the body ended within the bound.
async fn drain(mut body: Body, bytes_max: u64) -> bool {
    use http_body::Body as _;
    let mut seen = 0u64;
    while seen <= bytes_max {
        let frame = std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await;
        match frame {
            Some(Ok(frame)) => seen += frame.data_ref().map_or(0, |data| data.len() as u64),
            Some(Err(err)) => {
                tracing::debug!(error = %err, seen, "oversized body broke off while draining");
                return false;
            }
            None => return true,
        }
    }
    false
}

/// A client that sent `Expect: 100-continue` waits for the answer before sending the
/// body: reading it would invite the very body we are refusing.
fn expects_continue(headers: &HeaderMap) -> bool {
    headers
        .get(axum::http::header::EXPECT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
}

/// Reads and parses a JSON body: valid UTF-8, nesting within `depth_max`, no duplicate
/// keys, no NaN/Infinity.
pub async fn read_json(
    headers: &HeaderMap,
    body: Body,
    limit_bytes: usize,
    depth_max: usize,
) -> Result<Value, ApiError> {
    read_json_with(headers, body, limit_bytes, depth_max, json::parse_in).await
}

/// [`read_json`] judged by `parse` (which numbers it takes).
async fn read_json_with(
    headers: &HeaderMap,
    body: Body,
    limit_bytes: usize,
    depth_max: usize,
    parse: fn(&[u8], usize, &json::Meter) -> Result<Value, json::ParseError>,
) -> Result<Value, ApiError> {
    let bytes = not_blank(read_limited(headers, body, limit_bytes).await?)?;
    Ok(parse_in_room(&bytes, |bytes, meter| parse(bytes, depth_max, meter)).await??)
}

/// Refuses a body of only whitespace with `400 empty_body`.
fn not_blank(bytes: Bytes) -> Result<Bytes, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
            "empty_body",
            "request body is empty; send a JSON document",
        ));
    }
    Ok(bytes)
}

/// Reads one JSON document under the server's single-body limits.
pub async fn read_document(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Value, ApiError> {
    read_json(
        headers,
        body,
        state.config.body_bytes_max,
        state.config.json_depth_max,
    )
    .await
}

/// Reads an OpenLineage RunEvent: [`read_document`] under the lineage route's own limits
/// (`lineage_body_bytes_max`, `lineage_json_depth_max`), taking every integer a 64-bit
/// integer holds, beyond ±2^53 too ([`json::parse_wide_integers`]), since facets carry
/// such integers as data (an Iceberg snapshot id is a random 63-bit number).
pub async fn read_run_event(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Value, ApiError> {
    let config = &state.config;
    read_json_with(
        headers,
        body,
        config.lineage_body_bytes_max,
        config.lineage_json_depth_max,
        // Python's `json` writes a facet's `float('nan')` as `NaN`: read as `null`.
        json::parse_wide_integers_reading_non_finite_in,
    )
    .await
}

/// Reads a batch: a JSON array under the batch byte limit (one nesting level more than a
/// single document) holding at most `batch_events_max` items of `what` (e.g. "events").
/// An item holding a number the canonical form cannot hold is refused alone
/// (`number_out_of_range`, its field relative to the item), the others stay.
pub async fn read_batch(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
    what: &str,
) -> Result<Vec<Result<Value, ApiError>>, ApiError> {
    let config = &state.config;
    let bytes = not_blank(read_limited(headers, body, config.batch_bytes_max).await?)?;
    let depth_max = config.json_depth_max;
    // An item nested deeper than the limit is refused alone, as a number is: a body too
    // deep for it is parsed again deeper and each item measured (only then, so the usual
    // batch pays no walk of its items).
    let (value, refused, measure) = parse_in_room(&bytes, |bytes, meter| {
        json::parse_batch_in(bytes, depth_max, 1, meter)
    })
    .await??;
    let Value::Array(items) = value else {
        return Err(ApiError::unprocessable(
            "not_an_array",
            format!("a batch body must be a JSON array of {what}"),
        ));
    };
    if items.len() > config.batch_events_max {
        return Err(ApiError::new(
            axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            "batch_too_large",
            format!(
                "a batch holds at most {} {what}, got {}",
                config.batch_events_max,
                items.len()
            ),
        ));
    }
    let mut items: Vec<Result<Value, ApiError>> = items
        .into_iter()
        .map(|item| {
            if measure && json::depth(&item) > depth_max {
                return Err(json::ParseError::TooDeep {
                    depth_max,
                    pointer: String::new(),
                }
                .into());
            }
            Ok(item)
        })
        .collect();
    for mut number in refused {
        let Some((index, rest)) = item_of(&number.pointer) else {
            continue;
        };
        if let Some(item @ Ok(_)) = items.get_mut(index) {
            number.pointer = rest.to_string();
            *item = Err(json::refused_number_error(number).into());
        }
    }
    Ok(items)
}

/// Splits `/3/a/b` into the item index 3 and the pointer `/a/b` inside it.
pub(crate) fn item_of(pointer: &str) -> Option<(usize, &str)> {
    let rest = pointer.strip_prefix('/')?;
    let (index, inner) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    Some((index.parse().ok()?, inner))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use axum::body::{Body, Bytes};

    use super::{collect, TenantShares, Unread, TENANT_SHARES_SWEPT_FROM};

    static DROPPED: AtomicUsize = AtomicUsize::new(0);

    /// A frame's backing buffer, counted when freed.
    struct Buffer(Vec<u8>);

    impl AsRef<[u8]> for Buffer {
        fn as_ref(&self) -> &[u8] {
            &self.0
        }
    }

    impl Drop for Buffer {
        fn drop(&mut self) {
            DROPPED.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A body sent a byte at a time, each byte a slice of an 8 KB read buffer: while it
    /// is still arriving, the buffers of the bytes already read are freed (they were all
    /// kept until the body ended: 4 KB of memory a byte received).
    #[tokio::test]
    async fn a_body_sent_in_small_frames_holds_none_of_their_buffers() {
        let (sender, receiver) = tokio::sync::mpsc::channel::<Bytes>(1);
        let frames = futures_util::stream::unfold(receiver, |mut receiver| async move {
            let frame = receiver.recv().await?;
            Some((Ok::<_, std::io::Error>(frame), receiver))
        });
        let collecting = tokio::spawn(collect(Body::from_stream(frames), 1_000, Some(100)));
        for i in 0..100u8 {
            let buffer = Bytes::from_owner(Buffer(vec![i; 8_192]));
            sender.send(buffer.slice(0..1)).await.expect("send");
        }
        // The channel holds one frame: all but the last two or so have been read.
        let mut waited = 0;
        while DROPPED.load(Ordering::SeqCst) < 97 && waited < 200 {
            tokio::time::sleep(Duration::from_millis(5)).await;
            waited += 1;
        }
        assert!(!collecting.is_finished(), "the body has not ended yet");
        assert!(
            DROPPED.load(Ordering::SeqCst) >= 97,
            "{} of 100 read buffers freed while the body arrives",
            DROPPED.load(Ordering::SeqCst)
        );
        drop(sender);
        let body = collecting.await.expect("task").expect("within the limit");
        assert_eq!(body.to_vec(), (0..100u8).collect::<Vec<u8>>());
    }

    /// One frame is kept as it is (no copy on the usual path); a body past the limit is
    /// refused.
    #[tokio::test]
    async fn one_frame_is_kept_and_a_body_past_the_limit_refused() {
        let one = collect(Body::from("{\"a\":1}"), 100, Some(7)).await;
        assert_eq!(one.expect("within").as_ref(), b"{\"a\":1}");
        assert!(matches!(
            collect(Body::from(vec![0u8; 101]), 100, None).await,
            Err(Unread::TooLarge)
        ));
        assert!(collect(Body::empty(), 100, None)
            .await
            .expect("empty")
            .is_empty());
    }

    /// Every tenant has a share of its own, whatever their number (a hash of the tenant
    /// picked one of 256 shared slots: one run in forty of a test met two tenants in one); a
    /// tenant's requests in flight hold one share; the shares no request holds are
    /// swept, so the map stays within about twice the most tenants in flight at once.
    #[test]
    fn each_tenant_has_a_share_of_its_own_kept_while_held() {
        let mut shares = TenantShares::new();
        let held: Vec<_> = (0..5_000).map(|n| (n, shares.of(&n, 16))).collect();
        for (n, share) in &held {
            let again = shares.of(n, 16);
            assert!(
                std::sync::Arc::ptr_eq(share, &again),
                "tenant {n}: one share"
            );
        }
        let distinct: std::collections::HashSet<_> = held
            .iter()
            .map(|(_, share)| std::sync::Arc::as_ptr(share))
            .collect();
        assert_eq!(distinct.len(), 5_000, "no two tenants share one");

        // A share taken from while held stays taken from; once no request holds it, a
        // tenant starts whole again.
        let permit = held[0].1.clone().try_acquire_many_owned(10).expect("room");
        drop(held);
        assert_eq!(shares.of(&0, 16).available_permits(), 6);
        drop(permit);
        assert_eq!(shares.of(&0, 16).available_permits(), 16);
        // Kept: at most twice the most held at once (5,000), then, none held, as many
        // as are taken before the next sweep.
        for n in 5_000..25_000 {
            drop(shares.of(&n, 16));
            assert!(
                shares.shares.len() <= 10_001,
                "{n}: {}",
                shares.shares.len()
            );
        }
        assert!(
            shares.shares.len() <= TENANT_SHARES_SWEPT_FROM,
            "{} shares kept with none held",
            shares.shares.len()
        );
    }
}

//! The webhook dispatcher: `serve` runs `run`, which claims due rows of the outbox
//! (`webhook_deliveries`, written in the transaction that logged the collision) under a
//! lease, posts each collision to its webhook and records the result. Ingestion never
//! waits for it. Delivery is at least once: a server dying after the post and before
//! recording it leaves the lease to run out and the row to be posted again, with the same
//! `delivery_id` (header `Traqlyte-Delivery-Id` and body field) for the receiver to
//! dedupe on. Failures are retried with capped exponential backoff
//! ([`retry_delay_ms`]) up to [`WEBHOOK_ATTEMPTS_MAX`] attempts.
//!
//! Each delivery is signed as Standard Webhooks specifies (`webhook-id`,
//! `webhook-timestamp`, `webhook-signature: v1,<base64 HMAC-SHA256>`), with the webhook's
//! own secret, so a receiver can tell TraqLyte's calls from anyone else's. No call goes to
//! a link-local, unspecified, multicast or broadcast address (cloud metadata services
//! answer on link-local ones), whether the URL names it or its host name resolves to it.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use hmac::{Hmac, Mac};
use serde::Serialize;
use traqlyte_store::ClaimedDelivery;

use super::{collision_view, CollisionView, WEBHOOK_URL_BYTES_MAX};
use crate::{ApiError, AppState};

/// How often the outbox is polled.
pub const DISPATCH_EVERY_MS: u64 = 500;
/// Deliveries claimed per poll.
pub const DELIVERIES_PER_CLAIM_MAX: u32 = 50;
/// Most posts of one tenant in flight at once: a tenant whose receivers hang holds this
/// share of [`DELIVERIES_PER_CLAIM_MAX`], never the whole dispatcher.
pub const TENANT_POSTS_MAX: u32 = 10;
/// How long a claimed delivery is ours; past it another dispatcher may claim it.
pub const DELIVERY_LEASE_MS: i64 = 60_000;
/// A webhook call taking longer than this failed.
pub const WEBHOOK_TIMEOUT_MS: u64 = 10_000;
/// After this many failed attempts a delivery is abandoned (logged at ERROR, counted).
pub const WEBHOOK_ATTEMPTS_MAX: i64 = 15;
/// The first retry's delay; it doubles per attempt up to [`RETRY_DELAY_MAX_MS`].
pub const RETRY_DELAY_FIRST_MS: i64 = 1_000;
/// See [`RETRY_DELAY_FIRST_MS`].
pub const RETRY_DELAY_MAX_MS: i64 = 3_600_000;

/// The delay before the next attempt after `attempts` failed ones (1 s, 2 s, 4 s, … 1 h).
pub fn retry_delay_ms(attempts: i64) -> i64 {
    let doublings = u32::try_from(attempts.saturating_sub(1).clamp(0, 32)).unwrap_or(32);
    RETRY_DELAY_FIRST_MS
        .saturating_mul(1_i64 << doublings.min(40))
        .min(RETRY_DELAY_MAX_MS)
}

/// What a webhook receives.
#[derive(Serialize)]
struct Delivery<'a> {
    collision: CollisionView,
    /// Unique per (webhook, collision): the receiver's dedupe key.
    delivery_id: &'a str,
    webhook_id: &'a str,
}

/// Accepts `http://` URLs of at most [`WEBHOOK_URL_BYTES_MAX`] bytes whose host is not
/// a [`forbidden`] address.
pub(crate) fn check_url(text: &str) -> Result<String, ApiError> {
    let refuse = |message: &str| {
        ApiError::unprocessable("invalid_webhook", message.to_string()).with_field("url")
    };
    if text.len() > WEBHOOK_URL_BYTES_MAX {
        return Err(refuse("url is longer than 2,000 bytes"));
    }
    let url = reqwest::Url::parse(text).map_err(|e| refuse(&format!("url is not a URL: {e}")))?;
    if let Some(ip) = forbidden_host(&url) {
        return Err(refuse(&format!(
            "url names {ip}, a cloud metadata service's, link-local, unspecified, multicast or broadcast address (or one inside an IPv6 address): webhooks never call one"
        )));
    }
    // The stored URL is the parsed one, which percent-encodes what the text held raw (a
    // non-ASCII byte becomes three): its length is the one the store's index must take
    // (PostgreSQL's B-tree refuses entries near 2.7 kB).
    if url.as_str().len() > WEBHOOK_URL_BYTES_MAX {
        return Err(refuse(
            "url is longer than 2,000 bytes once percent-encoded (a non-ASCII byte takes three)",
        ));
    }
    match url.scheme() {
        "http" if url.host_str().is_some() => Ok(url.to_string()),
        "https" => Err(refuse(
            "https webhooks are not supported by this build (no TLS client); post to an http:// relay",
        )),
        _ => Err(refuse("url must be http://host[:port]/path")),
    }
}

/// The [`forbidden`] address a URL's host names literally (`http://169.254.169.254/`,
/// `http://[::]/`), if it names one; a host name is checked by the resolver instead.
fn forbidden_host(url: &reqwest::Url) -> Option<IpAddr> {
    let host = url.host_str()?;
    // An IPv6 host is written in brackets.
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    bare.parse().ok().filter(|ip| forbidden(*ip))
}

/// Addresses a webhook never calls: link-local ones (169.254.0.0/16 and fe80::/10, where
/// cloud metadata services answer), the other metadata services' (AWS's IPv6
/// fd00:ec2::254, Alibaba Cloud's 100.100.100.200), those that name no single host
/// (unspecified, multicast, broadcast), and any of these written inside an IPv6 address
/// that carries an IPv4 one (mapped `::ffff:a.b.c.d`, compatible `::a.b.c.d`, translated
/// `::ffff:0:a.b.c.d`, NAT64 `64:ff9b::a.b.c.d` and `64:ff9b:1::/48`, 6to4 `2002:…`).
/// Loopback and private addresses are allowed: an HTTP relay on the operator's network is
/// how HTTPS endpoints are reached.
pub(crate) fn forbidden(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4 == std::net::Ipv4Addr::new(100, 100, 100, 200)
        }
        IpAddr::V6(v6) if local_nat64(v6).any(|v4| forbidden(IpAddr::V4(v4))) => true,
        IpAddr::V6(v6) => match embedded_ipv4(v6) {
            Some(v4) => forbidden(IpAddr::V4(v4)),
            None => {
                v6.is_unspecified()
                    || v6.is_multicast()
                    || (v6.segments()[0] & 0xffc0) == 0xfe80
                    || v6 == std::net::Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)
            }
        },
    }
}

/// The IPv4 addresses an address of NAT64's local-use prefix `64:ff9b:1::/48` (RFC 8215)
/// may carry: a network using it picks a longer prefix within it, and RFC 6052 places the
/// IPv4 address after it (skipping bits 64 to 71): after /48, /56, /64 or /96. Every
/// reading is checked; none for any other address.
fn local_nat64(v6: std::net::Ipv6Addr) -> impl Iterator<Item = std::net::Ipv4Addr> {
    let b = v6.octets();
    let local = b[..6] == [0x00, 0x64, 0xff, 0x9b, 0x00, 0x01];
    let readings = [
        [b[6], b[7], b[9], b[10]],
        [b[7], b[9], b[10], b[11]],
        [b[9], b[10], b[11], b[12]],
        [b[12], b[13], b[14], b[15]],
    ];
    readings
        .into_iter()
        .filter(move |_| local)
        .map(std::net::Ipv4Addr::from)
}

/// The IPv4 address an IPv6 one carries by a standard embedding, if any: IPv4-mapped and
/// -compatible (`::ffff:0:0/96`, `::/96` but `::` and `::1`), IPv4-translated
/// (`::ffff:0:0:0/96`), NAT64 (`64:ff9b::/96`, RFC 6052; the local-use `64:ff9b:1::/48`
/// is [`local_nat64`]'s) and 6to4 (`2002::/16`, RFC 3056, bits 16 to 48). A translator or relay
/// on the path turns such an address into the IPv4 one.
fn embedded_ipv4(v6: std::net::Ipv6Addr) -> Option<std::net::Ipv4Addr> {
    let s = v6.segments();
    let last = |hi: u16, lo: u16| {
        let [a, b] = hi.to_be_bytes();
        let [c, d] = lo.to_be_bytes();
        std::net::Ipv4Addr::new(a, b, c, d)
    };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    match s {
        [0, 0, 0, 0, 0, 0, hi, lo] if (hi, lo) != (0, 0) && (hi, lo) != (0, 1) => {
            Some(last(hi, lo))
        }
        [0, 0, 0, 0, 0xffff, 0, hi, lo] => Some(last(hi, lo)),
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(last(hi, lo)),
        [0x2002, hi, lo, ..] => Some(last(hi, lo)),
        _ => None,
    }
}

/// The dispatcher's name resolution: the system's, without [`forbidden`] addresses, so a
/// host name pointed at a metadata service (at registration or later) is never called.
struct AllowedAddresses;

impl reqwest::dns::Resolve for AllowedAddresses {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_string();
        Box::pin(async move {
            let found = tokio::net::lookup_host((host.as_str(), 0)).await?;
            let allowed: Vec<std::net::SocketAddr> =
                found.filter(|addr| !forbidden(addr.ip())).collect();
            if allowed.is_empty() {
                let refused: Box<dyn std::error::Error + Send + Sync> = format!(
                    "{host} resolves to no address a webhook may call (metadata services', link-local, unspecified, multicast or broadcast ones only)"
                )
                .into();
                return Err(refused);
            }
            let addrs: reqwest::dns::Addrs = Box::new(allowed.into_iter());
            Ok(addrs)
        })
    }
}

/// A new webhook's signing secret: `whsec_` and the base64 of 32 random bytes.
pub(crate) fn new_signing_secret() -> Result<String, ApiError> {
    let mut bytes = [0u8; 32];
    getrandom::getrandom(&mut bytes)
        .map_err(|e| ApiError::internal(format!("no randomness for a webhook secret: {e}")))?;
    Ok(format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    ))
}

/// The `webhook-signature` of a delivery: `v1,` and the base64 HMAC-SHA256, keyed by the
/// secret's bytes, of `{webhook-id}.{webhook-timestamp}.{body}`. `None` for a secret not
/// of the `whsec_<base64>` form (none is stored so).
fn signature(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> Option<String> {
    let key = base64::engine::general_purpose::STANDARD
        .decode(secret.strip_prefix("whsec_")?)
        .ok()?;
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&key).ok()?;
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    let tag = mac.finalize().into_bytes();
    Some(format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(tag)
    ))
}

/// How long a stopping server waits for the dispatcher's round in flight: its posts'
/// timeout, and a moment to record them.
pub(crate) const STOP_GRACE: Duration = Duration::from_millis(WEBHOOK_TIMEOUT_MS + 2_000);

/// How long the store work of a claim, or of a delivery besides its post, may take.
const STORE_DEADLINE: Duration = Duration::from_secs(60);

/// Polls the outbox until `stopping` turns true, each poll claiming as many deliveries as
/// [`DELIVERIES_PER_CLAIM_MAX`] leaves beside the posts still in flight: a post waits for
/// no other, so a receiver that never answers holds only its own deliveries (each up to
/// the timeout), never the polls after it, and other tenants' collisions go out on the
/// next poll. Before stopping, the posts in flight are finished (posted and recorded), so
/// a stopping server leaves no delivery posted but unrecorded, which its lease would post
/// again after a restart.
pub(crate) async fn run(state: AppState, mut stopping: tokio::sync::watch::Receiver<bool>) {
    let mut owner_bytes = [0u8; 8];
    if getrandom::getrandom(&mut owner_bytes).is_err() {
        tracing::error!("no randomness for the webhook dispatcher's lease owner; not dispatching");
        return;
    }
    let owner: String = owner_bytes.iter().map(|b| format!("{b:02x}")).collect();
    let client = match reqwest::Client::builder()
        .timeout(Duration::from_millis(WEBHOOK_TIMEOUT_MS))
        .redirect(reqwest::redirect::Policy::none())
        // Straight to the receiver: a proxy (`HTTP_PROXY`) would resolve the host itself,
        // past the address check of the resolver below.
        .no_proxy()
        .dns_resolver(Arc::new(AllowedAddresses))
        .build()
    {
        Ok(client) => client,
        Err(err) => {
            tracing::error!(error = %err, "webhook client failed to build; not dispatching");
            return;
        }
    };
    let mut ticker = tokio::time::interval(Duration::from_millis(DISPATCH_EVERY_MS));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut posts = tokio::task::JoinSet::new();
    // The deliveries being posted: a claim may return one again if its post outlived the
    // lease (the same owner claims it), and it must not go out twice.
    let mut in_flight = std::collections::HashSet::new();
    // Each post's task: the delivery and tenant it frees when it ends.
    let mut tasks = std::collections::HashMap::new();
    // Each tenant's posts in flight, and where the next claim goes on from.
    let mut turns = traqlyte_store::ClaimTurns {
        per_tenant: Some(TENANT_POSTS_MAX),
        ..Default::default()
    };
    loop {
        // Stopping wins over an overdue tick: no poll starts once the server stops.
        tokio::select! {
            biased;
            _ = stopping.wait_for(|stop| *stop) => break,
            _ = ticker.tick() => {}
        }
        // A post that ended, however (a panic too: its task's id names it), frees its
        // delivery and its tenant's share; a leaked count would starve the tenant.
        while let Some(done) = posts.try_join_next_with_id() {
            let task = match done {
                Ok((task, ())) => task,
                Err(err) => err.id(),
            };
            let Some((tenant, delivery_id)) = tasks.remove(&task) else {
                continue;
            };
            in_flight.remove(&delivery_id);
            if let Some(busy) = turns.in_flight.get_mut(&tenant) {
                *busy = busy.saturating_sub(1);
                if *busy == 0 {
                    turns.in_flight.remove(&tenant);
                }
            }
        }
        let posting = u32::try_from(posts.len()).unwrap_or(u32::MAX);
        let room = DELIVERIES_PER_CLAIM_MAX.saturating_sub(posting);
        if room == 0 {
            continue;
        }
        // Bounded, as each delivery's work is: a database gone without a reset would
        // hold the dispatcher, or a post's share, for good.
        let claim =
            state
                .store
                .claim_deliveries_fairly(&owner, DELIVERY_LEASE_MS * 1_000, room, &turns);
        let claimed = match traqlyte_store::within(STORE_DEADLINE, claim).await {
            Ok(claim) => {
                turns.after = claim.after;
                claim.deliveries
            }
            Err(err) => {
                tracing::warn!(error = %err, "webhook outbox claim failed");
                continue;
            }
        };
        for delivery in claimed {
            if !in_flight.insert(delivery.delivery_id.clone()) {
                continue;
            }
            *turns
                .in_flight
                .entry(delivery.tenant_id.clone())
                .or_default() += 1;
            let (state, client, owner) = (state.clone(), client.clone(), owner.clone());
            let stopping = stopping.clone();
            let names = (delivery.tenant_id.clone(), delivery.delivery_id.clone());
            let task = posts.spawn(async move {
                let delivered = deliver(&state, &client, &owner, &delivery, &stopping);
                let deadline = STORE_DEADLINE + Duration::from_millis(WEBHOOK_TIMEOUT_MS);
                if let Err(err) = traqlyte_store::within(deadline, delivered).await {
                    tracing::warn!(error = %err, delivery = %delivery.delivery_id, "webhook delivery not recorded; its lease will run out");
                }
            });
            tasks.insert(task.id(), names);
        }
    }
    while posts.join_next().await.is_some() {}
}

/// Posts one delivery and records its result. A delivery whose post has not begun when
/// the server stops is released instead, due at once for the next dispatcher: a post
/// begun late could outlast the stop's grace and be cut off unrecorded.
async fn deliver(
    state: &AppState,
    client: &reqwest::Client,
    owner: &str,
    delivery: &ClaimedDelivery,
    stopping: &tokio::sync::watch::Receiver<bool>,
) -> Result<(), traqlyte_store::StoreError> {
    let store = &state.store;
    let target = store
        .webhook_target(&delivery.tenant_id, &delivery.webhook_id)
        .await?;
    let collision = store
        .collision(&delivery.tenant_id, delivery.collision_id)
        .await?;
    let (Some((url, secret)), Some(collision)) = (target, collision) else {
        // The webhook was deleted: nothing to post.
        crate::metrics::record_webhook("dropped");
        store
            .settle_delivery(delivery, owner, None, Some("webhook deleted"))
            .await?;
        return Ok(());
    };
    let transport = store
        .collision_transport(&delivery.tenant_id, &collision)
        .await?;
    let body = Delivery {
        collision: collision_view(&collision, &transport),
        delivery_id: &delivery.delivery_id,
        webhook_id: &delivery.webhook_id,
    };
    // A URL registered before addresses were checked is not called either.
    let refused = reqwest::Url::parse(&url)
        .ok()
        .and_then(|u| forbidden_host(&u));
    if let Some(ip) = refused {
        crate::metrics::record_webhook("abandoned");
        let error = format!("refused: {ip} is an address webhooks never call");
        tracing::error!(delivery = %delivery.delivery_id, error, "webhook delivery abandoned");
        store
            .settle_delivery(delivery, owner, None, Some(&error))
            .await?;
        return Ok(());
    }
    let bytes = match serde_json::to_vec(&body) {
        Ok(bytes) => bytes,
        Err(err) => {
            tracing::error!(error = %err, "webhook body not serialised; its lease will run out");
            return Ok(());
        }
    };
    if *stopping.borrow() {
        store
            .release_unposted_delivery(delivery, owner, "not posted: the server was stopping")
            .await?;
        return Ok(());
    }
    // The lease again, from now: the lookups above may have waited for a connection,
    // and the post must never start after another dispatcher could claim the delivery.
    if !store
        .renew_delivery_lease(delivery, owner, DELIVERY_LEASE_MS * 1_000)
        .await?
    {
        tracing::warn!(delivery = %delivery.delivery_id, "webhook lease lost before the post (claimed by another dispatcher or settled); not posting");
        return Ok(());
    }
    // The receiver checks this against its own clock: this machine's, not the store's.
    let timestamp = traqlyte_store::local_now_us().div_euclid(1_000_000);
    let mut request = client
        .post(&url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header("Traqlyte-Delivery-Id", &delivery.delivery_id)
        .header("webhook-id", &delivery.delivery_id)
        .header("webhook-timestamp", timestamp.to_string());
    if let Some(signed) = secret
        .as_deref()
        .and_then(|secret| signature(secret, &delivery.delivery_id, timestamp, &bytes))
    {
        request = request.header("webhook-signature", signed);
    }
    let result = request.body(bytes).send().await;
    let failure = match result {
        Ok(response) if response.status().is_success() => None,
        Ok(response) => Some(format!("answered {}", response.status().as_u16())),
        // Without the URL: a receiver's secret often rides in its query string, and this
        // text is logged and stored as the delivery's last error.
        Err(err) => Some(format!("request failed: {}", err.without_url())),
    };
    match failure {
        None => {
            crate::metrics::record_webhook("delivered");
            tracing::info!(delivery = %delivery.delivery_id, attempts = delivery.attempts, "webhook delivered");
            store.settle_delivery(delivery, owner, None, None).await?;
        }
        Some(error) if delivery.attempts >= WEBHOOK_ATTEMPTS_MAX => {
            crate::metrics::record_webhook("abandoned");
            tracing::error!(delivery = %delivery.delivery_id, attempts = delivery.attempts, error, "webhook delivery abandoned");
            store
                .settle_delivery(delivery, owner, None, Some(&error))
                .await?;
        }
        Some(error) => {
            crate::metrics::record_webhook("failed");
            let retry_after_us = retry_delay_ms(delivery.attempts) * 1_000;
            tracing::warn!(delivery = %delivery.delivery_id, attempts = delivery.attempts, error, "webhook delivery failed; retrying");
            store
                .settle_delivery(delivery, owner, Some(retry_after_us), Some(&error))
                .await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_exponentially_up_to_an_hour() {
        assert_eq!(retry_delay_ms(1), 1_000);
        assert_eq!(retry_delay_ms(2), 2_000);
        assert_eq!(retry_delay_ms(5), 16_000);
        assert_eq!(retry_delay_ms(13), 3_600_000);
        assert_eq!(retry_delay_ms(i64::MAX), 3_600_000);
        assert_eq!(retry_delay_ms(0), 1_000);
    }

    #[test]
    fn metadata_and_non_host_addresses_are_refused_loopback_and_private_are_not() {
        for url in [
            "http://169.254.169.254/latest/meta-data/",
            "http://[fe80::1]/",
            "http://[fd00:ec2::254]/",
            "http://[::ffff:169.254.169.254]/",
            "http://100.100.100.200/latest/meta-data/",
            "http://[64:ff9b::a9fe:a9fe]/",
            "http://[64:ff9b:1::a9fe:a9fe]/",
            "http://[64:ff9b:1:a9fe:a9:fe00:0:1]/",
            "http://[64:ff9b:1:0:a9:fea9:fe00:1]/",
            "http://[::a9fe:a9fe]/",
            "http://[::ffff:0:a9fe:a9fe]/",
            "http://[2002:a9fe:a9fe::1]/",
            "http://0.0.0.0:9000/",
            "http://[::]/",
            "http://224.0.0.1/",
            "http://255.255.255.255/",
        ] {
            let refused = check_url(url).expect_err(url);
            assert_eq!(refused.code(), "invalid_webhook", "{url}");
        }
        for url in [
            "http://127.0.0.1:9000/hook",
            "http://[::1]:9000/hook",
            "http://10.0.0.7/hook",
            "http://100.64.0.7/hook",
            "http://[64:ff9b::a00:7]/hook",
            "http://[2001:db8::7]/hook",
            "http://relay.internal/hook",
        ] {
            assert!(check_url(url).is_ok(), "{url}");
        }
    }

    /// The example of the Standard Webhooks specification (its reference libraries'
    /// test vector): the same secret, id, timestamp and body give its signature.
    #[test]
    fn signatures_follow_standard_webhooks() {
        let signed = signature(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1_614_265_330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(
            signed.as_deref(),
            Some("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        );
        assert_eq!(signature("no prefix", "id", 0, b"{}"), None);
    }

    /// The dispatcher's resolver drops forbidden addresses: a name with nothing else is
    /// an error (never called), one with an allowed address keeps it.
    #[tokio::test]
    async fn names_resolving_only_to_forbidden_addresses_are_not_called() {
        use reqwest::dns::Resolve;
        use std::str::FromStr;
        let resolve = |host: &str| {
            let name = reqwest::dns::Name::from_str(host).expect("a name");
            AllowedAddresses.resolve(name)
        };
        assert!(resolve("0.0.0.0").await.is_err());
        assert!(resolve("169.254.169.254").await.is_err());
        let kept: Vec<IpAddr> = resolve("127.0.0.1")
            .await
            .expect("loopback is allowed")
            .map(|addr| addr.ip())
            .collect();
        assert_eq!(kept, [IpAddr::from([127, 0, 0, 1])]);
    }

    #[test]
    fn only_plain_http_urls_with_a_host_are_accepted() {
        assert!(check_url("http://127.0.0.1:9000/hook").is_ok());
        assert!(check_url("https://example.com/hook").is_err());
        assert!(check_url("ftp://example.com/").is_err());
        assert!(check_url("not a url").is_err());
        assert!(check_url(&format!("http://h/{}", "a".repeat(2_100))).is_err());
    }
}

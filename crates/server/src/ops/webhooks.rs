//! The webhook dispatcher: `serve` runs `run`, which claims due rows of the outbox
//! (`webhook_deliveries`, written in the transaction that logged the collision) under a
//! lease, posts each collision to its webhook and records the result. Ingestion never
//! waits for it. Delivery is at least once: a server dying after the post and before
//! recording it leaves the lease to run out and the row to be posted again, with the same
//! `delivery_id` (header `Traqlyte-Delivery-Id` and body field) for the receiver to
//! dedupe on. Failures are retried with capped exponential backoff
//! ([`retry_delay_ms`]) up to [`WEBHOOK_ATTEMPTS_MAX`] attempts.

use std::time::Duration;

use serde::Serialize;
use traqlyte_store::{now_us, ClaimedDelivery};

use super::{collision_view, CollisionView, WEBHOOK_URL_BYTES_MAX};
use crate::{ApiError, AppState};

/// How often the outbox is polled.
pub const DISPATCH_EVERY_MS: u64 = 500;
/// Deliveries claimed per poll.
pub const DELIVERIES_PER_CLAIM_MAX: u32 = 50;
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

/// Accepts `http://` URLs of at most [`WEBHOOK_URL_BYTES_MAX`] bytes.
pub(crate) fn check_url(text: &str) -> Result<String, ApiError> {
    let refuse = |message: &str| {
        ApiError::unprocessable("invalid_webhook", message.to_string()).with_field("url")
    };
    if text.len() > WEBHOOK_URL_BYTES_MAX {
        return Err(refuse("url is longer than 2,000 bytes"));
    }
    let url = reqwest::Url::parse(text).map_err(|e| refuse(&format!("url is not a URL: {e}")))?;
    match url.scheme() {
        "http" if url.host_str().is_some() => Ok(url.to_string()),
        "https" => Err(refuse(
            "https webhooks are not supported by this build (no TLS client); post to an http:// relay",
        )),
        _ => Err(refuse("url must be http://host[:port]/path")),
    }
}

/// Polls the outbox until the task is aborted.
pub(crate) async fn run(state: AppState) {
    let mut owner_bytes = [0u8; 8];
    if getrandom::getrandom(&mut owner_bytes).is_err() {
        tracing::error!("no randomness for the webhook dispatcher's lease owner; not dispatching");
        return;
    }
    let owner: String = owner_bytes.iter().map(|b| format!("{b:02x}")).collect();
    let client = match reqwest::Client::builder()
        .timeout(Duration::from_millis(WEBHOOK_TIMEOUT_MS))
        .redirect(reqwest::redirect::Policy::none())
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
    loop {
        ticker.tick().await;
        let claimed = match state
            .store
            .claim_deliveries(
                &owner,
                now_us(),
                DELIVERY_LEASE_MS * 1_000,
                DELIVERIES_PER_CLAIM_MAX,
            )
            .await
        {
            Ok(claimed) => claimed,
            Err(err) => {
                tracing::warn!(error = %err, "webhook outbox claim failed");
                continue;
            }
        };
        // All of a claim at once: one slow or unreachable receiver then holds a round up
        // for one timeout, not one timeout per delivery queued behind it (50 × 10 s would
        // outlive the lease, and other tenants' collisions would wait that long).
        let mut posts = tokio::task::JoinSet::new();
        for delivery in claimed {
            let (state, client, owner) = (state.clone(), client.clone(), owner.clone());
            posts.spawn(async move {
                if let Err(err) = deliver(&state, &client, &owner, &delivery).await {
                    tracing::warn!(error = %err, delivery = %delivery.delivery_id, "webhook delivery not recorded; its lease will run out");
                }
            });
        }
        while posts.join_next().await.is_some() {}
    }
}

/// Posts one delivery and records its result.
async fn deliver(
    state: &AppState,
    client: &reqwest::Client,
    owner: &str,
    delivery: &ClaimedDelivery,
) -> Result<(), traqlyte_store::StoreError> {
    let store = &state.store;
    let url = store
        .webhook_url(&delivery.tenant_id, &delivery.webhook_id)
        .await?;
    let collision = store
        .collision(&delivery.tenant_id, delivery.collision_id)
        .await?;
    let (Some(url), Some(collision)) = (url, collision) else {
        // The webhook was deleted: nothing to post.
        crate::metrics::record_webhook("dropped");
        store
            .settle_delivery(delivery, owner, now_us(), None, Some("webhook deleted"))
            .await?;
        return Ok(());
    };
    let body = Delivery {
        collision: collision_view(&collision),
        delivery_id: &delivery.delivery_id,
        webhook_id: &delivery.webhook_id,
    };
    let result = client
        .post(&url)
        .header("Traqlyte-Delivery-Id", &delivery.delivery_id)
        .json(&body)
        .send()
        .await;
    let failure = match result {
        Ok(response) if response.status().is_success() => None,
        Ok(response) => Some(format!("answered {}", response.status().as_u16())),
        // Without the URL: a receiver's secret often rides in its query string, and this
        // text is logged and stored as the delivery's last error.
        Err(err) => Some(format!("request failed: {}", err.without_url())),
    };
    let now = now_us();
    match failure {
        None => {
            crate::metrics::record_webhook("delivered");
            tracing::info!(delivery = %delivery.delivery_id, attempts = delivery.attempts, "webhook delivered");
            store
                .settle_delivery(delivery, owner, now, None, None)
                .await?;
        }
        Some(error) if delivery.attempts >= WEBHOOK_ATTEMPTS_MAX => {
            crate::metrics::record_webhook("abandoned");
            tracing::error!(delivery = %delivery.delivery_id, attempts = delivery.attempts, error, "webhook delivery abandoned");
            store
                .settle_delivery(delivery, owner, now, None, Some(&error))
                .await?;
        }
        Some(error) => {
            crate::metrics::record_webhook("failed");
            let retry_at = now + retry_delay_ms(delivery.attempts) * 1_000;
            tracing::warn!(delivery = %delivery.delivery_id, attempts = delivery.attempts, error, "webhook delivery failed; retrying");
            store
                .settle_delivery(delivery, owner, now, Some(retry_at), Some(&error))
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
    fn only_plain_http_urls_with_a_host_are_accepted() {
        assert!(check_url("http://127.0.0.1:9000/hook").is_ok());
        assert!(check_url("https://example.com/hook").is_err());
        assert!(check_url("ftp://example.com/").is_err());
        assert!(check_url("not a url").is_err());
        assert!(check_url(&format!("http://h/{}", "a".repeat(2_100))).is_err());
    }
}

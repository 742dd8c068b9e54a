//! [`NatsConfig`]: where the consumer reads, for which tenant, and its bounds.

use std::time::Duration;

use traqlyte_store::{DedupeHorizon, LateEvents, SourceName, TenantName};

/// Settings of one NATS JetStream consumer process.
#[derive(Debug, Clone)]
pub struct NatsConfig {
    /// The NATS server(s), e.g. `nats://127.0.0.1:4222` (several separated by commas for
    /// a cluster; the client also learns the others from the server).
    pub url: String,
    /// The JetStream stream to read; it must exist.
    pub stream: String,
    /// The durable pull consumer's name: created with explicit acks when absent; an
    /// existing one must have explicit acks, else the consumer refuses to start.
    pub durable: String,
    /// The tenant every message is stored under (a name as given to `tenant create`).
    pub tenant: TenantName,
    /// Most messages fetched and stored as one batch.
    pub batch_messages_max: usize,
    /// Most bytes fetched as one batch; must exceed the largest message the stream
    /// accepts, or that message is never delivered.
    pub batch_bytes_max: usize,
    /// How long one fetch waits for messages; also how long SIGTERM may wait for an idle
    /// consumer to notice it.
    pub fetch_wait_ms: u64,
    /// Ack wait of a consumer this process creates: an unacked message is redelivered
    /// after this long (an existing consumer keeps its own).
    pub ack_wait_ms: u64,
    /// How often the client pings the NATS server: a connection whose pings go
    /// unanswered (two outstanding at the third) is taken for dead and the client
    /// reconnects (to another node of a cluster), so a hung node or a partition is
    /// noticed in about three intervals.
    pub ping_interval_ms: u64,
    /// First Nak delay after a store error; doubled on each consecutive failure.
    pub nak_delay_ms_min: u64,
    /// Largest Nak delay.
    pub nak_delay_ms_max: u64,
    /// Deepest JSON nesting accepted in a message (as `json_depth_max` of the HTTP API).
    pub json_depth_max: usize,
    /// The tenant's source that Segment-shaped messages (subject `traqlyte.segment`)
    /// are stored under, as `POST /v1/*` stores a write key's messages under its source.
    /// Checked at start (missing or revoked: the consumer refuses to start) and again per
    /// batch (revoked meanwhile: those messages become dead letters). `None`: such
    /// messages are dead letters (`segment_source_not_configured`).
    pub segment_source: Option<SourceName>,
    /// The live dedupe horizon: an event whose occurrence time lies outside it is a dead
    /// letter (`outside_horizon`), as the HTTP API refuses it with a 422, instead of a
    /// store error that would Nak the batch for ever.
    pub dedupe_horizon: DedupeHorizon,
    /// An event older than the horizon: a dead letter (`Refuse`, the default) or
    /// reconciled against stored rows of any age as a backfill is (`Reconcile`, as
    /// `serve --late-events reconcile` does for HTTP), counted as `late`.
    pub late_events: LateEvents,
    /// Test-only hook (feature `test-hooks`): sleep this long between the commit and the
    /// acks, so a test can kill the process in that window. Read from
    /// `TRAQLYTE_TEST_ACK_DELAY_MS`.
    #[cfg(feature = "test-hooks")]
    pub test_ack_delay_ms: u64,
}

impl NatsConfig {
    /// A config with the default bounds.
    pub fn new(url: String, stream: String, durable: String, tenant: TenantName) -> NatsConfig {
        NatsConfig {
            url,
            stream,
            durable,
            tenant,
            batch_messages_max: 500,
            batch_bytes_max: 8 * 1024 * 1024,
            fetch_wait_ms: 1_000,
            ack_wait_ms: 30_000,
            ping_interval_ms: 10_000,
            nak_delay_ms_min: 100,
            nak_delay_ms_max: 30_000,
            json_depth_max: 32,
            segment_source: None,
            dedupe_horizon: DedupeHorizon::default(),
            late_events: LateEvents::Refuse,
            #[cfg(feature = "test-hooks")]
            test_ack_delay_ms: std::env::var("TRAQLYTE_TEST_ACK_DELAY_MS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
        }
    }

    /// The Nak delay after `failures` consecutive store errors (1 for the first):
    /// `nak_delay_ms_min · 2^(failures-1)`, capped at `nak_delay_ms_max`.
    pub fn nak_delay(&self, failures: u32) -> Duration {
        let doubling = failures.saturating_sub(1).min(32);
        let delay_ms = self
            .nak_delay_ms_min
            .max(1)
            .saturating_mul(1u64 << doubling)
            .min(self.nak_delay_ms_max.max(1));
        Duration::from_millis(delay_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nak_delay_doubles_per_failure_up_to_its_cap() {
        let tenant = TenantName::parse("t").expect("a tenant name");
        let mut config = NatsConfig::new(String::new(), String::new(), String::new(), tenant);
        config.nak_delay_ms_min = 100;
        config.nak_delay_ms_max = 1_000;
        let delays: Vec<u128> = [1, 2, 3, 4, 5, 500, u32::MAX]
            .into_iter()
            .map(|n| config.nak_delay(n).as_millis())
            .collect();
        assert_eq!(delays, [100, 200, 400, 800, 1_000, 1_000, 1_000]);
    }
}

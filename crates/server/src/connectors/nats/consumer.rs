//! The consumer's runtime: [`run`].

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use async_nats::jetstream::consumer::{pull, AckPolicy, DeliverPolicy, PullConsumer, ReplayPolicy};
use async_nats::jetstream::{AckKind, Message};
use futures_util::StreamExt;
use serde_json::Value;
use traqlyte_identity::segment::{identify_message_owned, Envelope};
use traqlyte_identity::{format_rfc3339_micros, Contract, ContractName};
use traqlyte_store::partitions::partition_time;
use traqlyte_store::{
    lacking_partition_message, now_us, Admission, EventOutcome, IngestSource, NewDeadLetter,
    NewEvent, OutsideHorizon, Store, StoreError, TenantId,
};

use super::decode::{decode, pinned_version, version_header, Decoded, Refusal};
use super::NatsConfig;
use crate::connectors::segment::ingest;
use crate::routes::events::{identify, StoredApart};

/// NATS server URLs (one, or several separated by commas) with any credentials in them
/// (`user:password@`, `token@`) replaced by `***@`, for messages and logs.
pub(crate) fn without_credentials(urls: &str) -> String {
    urls.split(',')
        .map(|url| {
            let start = url.find("://").map_or(0, |scheme| scheme + 3);
            match url.rfind('@') {
                Some(at) if at >= start => format!("{}***{}", &url[..start], &url[at..]),
                _ => url.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Why the consumer could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    /// No tenant of that name.
    #[error("no tenant named {0:?}; create it with `traqlyte tenant create`")]
    UnknownTenant(String),
    /// The NATS server did not answer.
    #[error("connect to NATS at {url}: {cause}")]
    Connect {
        /// The URL given.
        url: String,
        /// The client's error.
        cause: String,
    },
    /// The stream does not exist or JetStream is off.
    #[error("JetStream stream {stream:?}: {cause}")]
    Stream {
        /// The stream's name.
        stream: String,
        /// The client's error.
        cause: String,
    },
    /// The durable consumer could not be read or created.
    #[error("JetStream consumer {durable:?}: {cause}")]
    Consumer {
        /// The durable consumer's name.
        durable: String,
        /// The client's error.
        cause: String,
    },
    /// The durable consumer exists with another ack policy: acking only after the
    /// commit needs explicit acks.
    #[error("JetStream consumer {durable:?} has ack policy {policy}; TraqLyte needs explicit acks (ack only after commit): delete it or name another durable")]
    NotExplicitAck {
        /// The durable consumer's name.
        durable: String,
        /// Its ack policy.
        policy: String,
    },
    /// The durable consumer exists with a delivery limit: JetStream would drop a
    /// message Nak'd that many times (a database outage) without it being stored.
    #[error("JetStream consumer {durable:?} has max_deliver {max_deliver}; TraqLyte needs unlimited deliveries (max_deliver -1), or a database outage would drop messages unstored: delete it or name another durable")]
    LimitedDeliveries {
        /// The durable consumer's name.
        durable: String,
        /// Its delivery limit.
        max_deliver: i64,
    },
    /// The durable consumer exists with a setting that would skip, empty or throttle
    /// messages: TraqLyte consumes every message of the stream, whole, at once.
    #[error("JetStream consumer {durable:?} has {setting} {found}; TraqLyte needs {needed} (every message of the stream, whole, as fast as it can store them): delete it or name another durable")]
    ConsumerSetting {
        /// The durable consumer's name.
        durable: String,
        /// Which setting.
        setting: &'static str,
        /// What the durable has.
        found: String,
        /// What TraqLyte needs.
        needed: &'static str,
    },
    /// `--segment-source` names no working source of the tenant.
    #[error("no working source named {0:?} for this tenant (missing or revoked); create one with `traqlyte source create`")]
    UnknownSource(String),
    /// The store failed at start.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a batch was not stored (its messages whose group did not commit are Nak'd).
#[derive(Debug, thiserror::Error)]
enum BatchError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The Segment path's error (its cause is a store error too).
    #[error("storing Segment messages: {0}")]
    Segment(String),
    /// The store gave no answer within the batch's deadline ([`store_deadline`]).
    #[error("the database gave no answer within {} s: the batch was abandoned, what it committed is unknown", .0.as_secs())]
    Deadline(Duration),
}

/// How long a batch's store work may take before it is abandoned, its messages that did
/// not commit Nak'd: twice the ack wait (the durable's; the progress reports come every
/// third of it), 10 s at least. A database gone without a reset (a host powered off, a
/// failover to another address, a partition) never answers, and the batch's progress
/// reports kept its messages from redelivery for good, the consumer stuck (a review: 567
/// messages held, 7,813 waiting, SIGTERM not heeded). A healthy batch takes well under
/// a second; one waiting on a lock (a manual session's, DDL) is given up too, its
/// messages redelivered, as after any store error.
fn store_deadline(progress_every: Duration) -> Duration {
    (progress_every * 6).max(Duration::from_secs(10))
}

/// [`start`], then [`Started::run`]: consumes until `shutdown` completes.
pub async fn run(
    store: Store,
    config: NatsConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ConsumerError> {
    start(store, config).await?.run(shutdown).await
}

/// A consumer whose start checks passed ([`start`]), connected, not yet consuming.
pub struct Started {
    store: Store,
    config: NatsConfig,
    tenant: TenantId,
    client: async_nats::Client,
    consumer: PullConsumer,
    progress_every: Duration,
}

/// Checks what consuming needs and connects: fails when the tenant, the Segment source,
/// the server, the stream or an explicit-ack durable consumer is missing. `serve
/// --nats-*` runs it before its HTTP API listens, so a replica whose consumer cannot
/// start is never seen ready (its API answered `/healthz` until the connection's
/// timeout, then the process exited).
pub async fn start(store: Store, config: NatsConfig) -> Result<Started, ConsumerError> {
    let tenant = store
        .tenant_by_name(&config.tenant)
        .await?
        .ok_or_else(|| ConsumerError::UnknownTenant(config.tenant.as_str().to_string()))?
        .tenant_id;
    if let Some(name) = &config.segment_source {
        if store.working_source(&tenant, name).await?.is_none() {
            return Err(ConsumerError::UnknownSource(name.as_str().to_string()));
        }
    }
    // A cluster is given as URLs separated by commas, which the client takes as a list.
    let urls: Vec<&str> = config.url.split(',').map(str::trim).collect();
    // Pinged every few seconds (the client's default is a minute): a node that hangs (a
    // frozen machine, a partition dropping packets) is left after three unanswered
    // pings, not after three minutes of nothing consumed and nothing said.
    let client = async_nats::ConnectOptions::new()
        .ping_interval(Duration::from_millis(config.ping_interval_ms.max(1)))
        .connect(urls)
        .await
        .map_err(|e| ConsumerError::Connect {
            url: without_credentials(&config.url),
            cause: e.to_string(),
        })?;
    let consumer = durable_consumer(client.clone(), &config).await?;
    // The durable's own ack wait (an existing one keeps its own, whatever this
    // process was given).
    let progress_every = progress_interval(consumer.cached_info().config.ack_wait);
    Ok(Started {
        store,
        config,
        tenant,
        client,
        consumer,
        progress_every,
    })
}

impl Started {
    /// Consumes until `shutdown` completes, then finishes the batch in flight (stored and
    /// acked, or Nak'd) and returns. Errors are logged and retried, never fatal, but for
    /// a durable consumer that can no longer be used (deleted, or changed to one this
    /// process cannot consume).
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ConsumerError> {
        let Started {
            store,
            config,
            tenant,
            client,
            mut consumer,
            mut progress_every,
        } = self;
        tracing::info!(stream = %config.stream, durable = %config.durable, tenant = %tenant, "consuming");
        let (stop, stopping) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            shutdown.await;
            let _ = stop.send(true);
        });
        let mut worker = Worker {
            store,
            tenant,
            config,
            failures: 0,
            stopping: stopping.clone(),
            progress_every,
        };
        let fetching = worker.config.clone();
        let mut last_full = false;
        let mut prefetched: Option<Vec<Message>> = None;
        let mut lag_sampled: Option<std::time::Instant> = None;
        let mut refused: Option<ConsumerError> = None;
        let mut silence = Silence::default();
        while !*stopping.borrow() {
            if lag_sampled.is_none_or(|at| at.elapsed() >= LAG_SAMPLE_EVERY) {
                let began = std::time::Instant::now();
                lag_sampled = Some(began);
                let checked =
                    check_durable(&client, &mut consumer, &worker.config, &mut progress_every)
                        .await;
                worker.progress_every = progress_every;
                match checked {
                    Ok(answered) => {
                        silence
                            .sampled(answered, began, &client, &worker.config)
                            .await;
                    }
                    Err(err) => {
                        // As at start: what was fetched is stored first, then the process
                        // stops.
                        tracing::error!(error = %err, "the durable consumer can no longer be used; stopping");
                        refused = Some(err);
                        break;
                    }
                }
            }
            let batch = match prefetched.take() {
                Some(batch) => batch,
                None => fetch(&consumer, &fetching, last_full).await,
            };
            last_full = batch.len() >= fetching.batch_messages_max;
            if batch.is_empty() {
                continue;
            }
            crate::metrics::record_batch_size("nats", batch.len());
            if last_full {
                // A full batch says more are waiting: pull the next one while this one is
                // stored and acked, so the pull's round trip overlaps the commit. The next
                // batch is only delivered, not acked, until its own commit, and kept in
                // progress until this one is handled, so a slow commit does not let the
                // broker redeliver it to another consumer meanwhile.
                let handled = tokio::sync::Notify::new();
                let (_, next) = tokio::join!(
                    async {
                        worker.handle(batch).await;
                        handled.notify_one();
                    },
                    async {
                        let next = fetch(&consumer, &fetching, true).await;
                        in_progress(&next, progress_every, handled.notified()).await;
                        next
                    }
                );
                prefetched = Some(next);
            } else {
                worker.handle(batch).await;
            }
        }
        // A batch pulled ahead is stored before stopping rather than left to redelivery.
        if let Some(batch) = prefetched.filter(|b| !b.is_empty()) {
            worker.handle(batch).await;
        }
        // Acks are buffered by the client: send them before the process exits. With the
        // server unreachable the flush would wait for a reconnection for ever and SIGTERM
        // would not stop the process: it is bounded, and what it could not send is
        // redelivered (and absorbed as duplicates).
        match tokio::time::timeout(ACK_FLUSH_MAX, client.flush()).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "flushing the last acks failed; those messages will be redelivered");
            }
            Err(_) => {
                tracing::warn!(
                waited_ms = ACK_FLUSH_MAX.as_millis() as u64,
                "the NATS server did not take the last acks; those messages will be redelivered"
            );
            }
        }
        tracing::info!(durable = %worker.config.durable, "consumer stopped");
        refused.map_or(Ok(()), Err)
    }
}

/// How long stopping waits for the last acks to reach the NATS server.
const ACK_FLUSH_MAX: Duration = Duration::from_secs(5);

/// How often the consumer's lag (`num_pending`) is sampled for `GET /metrics`.
const LAG_SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// How long the NATS server may leave the samples unanswered before the consumer says
/// so, marks itself stalled and reconnects.
const SILENCE_WARN_AFTER: Duration = Duration::from_secs(15);

/// How often a silence that lasts is said again (and a reconnection tried again).
const SILENCE_WARN_EVERY: Duration = Duration::from_secs(60);

/// Whether the NATS server answers the consumer's samples ([`check_durable`]). A
/// connection that hangs, or a cluster that lost its quorum, fetches nothing and fails
/// nothing: every pull ends empty. Before, only a DEBUG line said so; the lag gauge kept
/// its last value and the process looked idle. Once the checks have gone unanswered for
/// [`SILENCE_WARN_AFTER`] (from the start of the first unanswered one) it logs a warning
/// (again every [`SILENCE_WARN_EVERY`]), sets `traqlyte_nats_consumer_stalled` and, on a
/// connection the client still holds for live, forces a reconnection (to another node of
/// a cluster); the first answer after says so and clears the gauge.
#[derive(Debug, Default)]
struct Silence {
    /// When the first check of the silence began.
    unanswered_since: Option<std::time::Instant>,
    /// When the silence was last warned of.
    warned: Option<std::time::Instant>,
}

/// What a check's answer (or its absence) calls for ([`Silence::after_check`]).
#[derive(Debug, PartialEq)]
enum SilenceVerdict {
    Nothing,
    /// Warn, and reconnect: silent this long.
    Warn(Duration),
    /// Answered after a silence warned of, this long.
    Recovered(Duration),
}

impl Silence {
    /// The verdict on a check that began at `began` and ended at `now`, answered or not.
    fn after_check(
        &mut self,
        answered: bool,
        began: std::time::Instant,
        now: std::time::Instant,
    ) -> SilenceVerdict {
        if answered {
            let since = self.unanswered_since.take();
            return match (since, self.warned.take()) {
                (Some(since), Some(_)) => SilenceVerdict::Recovered(now.duration_since(since)),
                _ => SilenceVerdict::Nothing,
            };
        }
        let silent = now.duration_since(*self.unanswered_since.get_or_insert(began));
        let due = self
            .warned
            .is_none_or(|at| now.duration_since(at) >= SILENCE_WARN_EVERY);
        if silent < SILENCE_WARN_AFTER || !due {
            return SilenceVerdict::Nothing;
        }
        self.warned = Some(now);
        SilenceVerdict::Warn(silent)
    }

    async fn sampled(
        &mut self,
        answered: bool,
        began: std::time::Instant,
        client: &async_nats::Client,
        config: &NatsConfig,
    ) {
        let (stream, durable) = (&config.stream, &config.durable);
        match self.after_check(answered, began, std::time::Instant::now()) {
            SilenceVerdict::Nothing if answered => {
                crate::metrics::record_consumer_stalled(stream, durable, false);
            }
            SilenceVerdict::Nothing => {}
            SilenceVerdict::Recovered(silent) => {
                tracing::info!(%stream, silent_s = silent.as_secs(), "the NATS server answers again; consuming");
                crate::metrics::record_consumer_stalled(stream, durable, false);
            }
            SilenceVerdict::Warn(silent) => {
                tracing::warn!(
                    %stream,
                    %durable,
                    silent_s = silent.as_secs(),
                    "the NATS server has not answered the consumer: nothing is consumed meanwhile (a hung connection, a partition, a cluster without quorum); reconnecting"
                );
                crate::metrics::record_consumer_stalled(stream, durable, true);
                // Only a connection the client holds for live: one it is already
                // replacing would be dropped again once made (its buffered acks lost,
                // their messages redelivered). Bounded: the client's command queue may
                // be full, and the loop (and SIGTERM) must not wait on it.
                if client.connection_state() == async_nats::connection::State::Connected {
                    let asked = tokio::time::timeout(RECONNECT_ASK_MAX, client.force_reconnect());
                    if !matches!(asked.await, Ok(Ok(()))) {
                        tracing::debug!("reconnection not requested");
                    }
                }
            }
        }
    }
}

/// How long asking the client to reconnect may take.
const RECONNECT_ASK_MAX: Duration = Duration::from_secs(1);

/// Reads the durable's info (one request to the server): sets the lag gauge, refuses
/// settings edited since the start ([`refuse_unsafe`]), takes a new ack wait's progress
/// interval, and creates the durable again, as at start, when it no longer exists (deleted
/// by an operator, or with its stream): every later pull would end without a message and
/// the consumer would have stopped for good, its lag gauge frozen, saying nothing.
/// `Ok(false)`: the server did not answer ([`Silence`]).
async fn check_durable(
    client: &async_nats::Client,
    consumer: &mut PullConsumer,
    config: &NatsConfig,
    progress_every: &mut Duration,
) -> Result<bool, ConsumerError> {
    match consumer.get_info().await {
        Ok(info) => {
            crate::metrics::record_consumer_pending(
                &config.stream,
                &config.durable,
                info.num_pending,
            );
            refuse_unsafe(config, &info.config)?;
            let every = progress_interval(info.config.ack_wait);
            if every != *progress_every {
                tracing::info!(
                    ack_wait_ms = info.config.ack_wait.as_millis() as u64,
                    "the durable's ack wait changed; batches in progress are reported at its new pace"
                );
                *progress_every = every;
            }
            Ok(true)
        }
        Err(err) if is_gone(&err.to_string()) => {
            tracing::warn!(
                durable = %config.durable,
                stream = %config.stream,
                error = %err,
                "the durable consumer no longer exists; creating it again as at start: it delivers the stream from its first message, and what is stored already is counted as duplicates"
            );
            match durable_consumer(client.clone(), config).await {
                Ok(created) => {
                    *consumer = created;
                    *progress_every = progress_interval(consumer.cached_info().config.ack_wait);
                    Ok(true)
                }
                // A durable found with settings the start refuses: as at start.
                Err(
                    err @ (ConsumerError::NotExplicitAck { .. }
                    | ConsumerError::LimitedDeliveries { .. }
                    | ConsumerError::ConsumerSetting { .. }),
                ) => Err(err),
                // The stream gone too, or the cluster electing a leader: said, and tried
                // again at the next check, never a reason to stop.
                Err(err) => {
                    tracing::warn!(error = %err, "the durable consumer could not be created again; trying again in 5 s");
                    Ok(true)
                }
            }
        }
        Err(err) => {
            tracing::debug!(error = %err, "consumer info unavailable; lag not sampled");
            Ok(false)
        }
    }
}

/// Whether a consumer-info error says the durable (or its stream) is gone, not that the
/// server is out of reach.
fn is_gone(error: &str) -> bool {
    let error = error.to_ascii_lowercase();
    error.contains("consumer not found") || error.contains("stream not found")
}

/// The stream's durable pull consumer, created with explicit acks when absent; an
/// existing one with another ack policy, or with a delivery limit, is refused.
async fn durable_consumer(
    client: async_nats::Client,
    config: &NatsConfig,
) -> Result<PullConsumer, ConsumerError> {
    let jetstream = async_nats::jetstream::new(client);
    let stream = jetstream
        .get_stream(&config.stream)
        .await
        .map_err(|e| ConsumerError::Stream {
            stream: config.stream.clone(),
            cause: e.to_string(),
        })?;
    let wanted = pull::Config {
        durable_name: Some(config.durable.clone()),
        ack_policy: AckPolicy::Explicit,
        ack_wait: Duration::from_millis(config.ack_wait_ms),
        max_ack_pending: MAX_ACK_PENDING,
        ..pull::Config::default()
    };
    let consumer_error = |e: &dyn std::fmt::Display| ConsumerError::Consumer {
        durable: config.durable.clone(),
        cause: e.to_string(),
    };
    let consumer: PullConsumer = stream
        .get_or_create_consumer(&config.durable, wanted)
        .await
        .map_err(|e| consumer_error(&e))?;
    refuse_unsafe(config, &consumer.cached_info().config)?;
    warn_slow(config, &consumer.cached_info().config);
    Ok(consumer)
}

/// Warns of an existing durable whose settings lose nothing but throttle it: a
/// `max_ack_pending` below the batch size caps every fetch at that many messages (`1`:
/// one message, one transaction, one commit each), shared by every process on the
/// durable, and nothing else says why consumption is slow.
fn warn_slow(config: &NatsConfig, existing: &async_nats::jetstream::consumer::Config) {
    let pending = existing.max_ack_pending;
    if pending > 0 && usize::try_from(pending).is_ok_and(|p| p < config.batch_messages_max) {
        tracing::warn!(
            durable = %config.durable,
            max_ack_pending = pending,
            batch_messages_max = config.batch_messages_max,
            "the durable's max_ack_pending is below the batch size: each fetch, across every process on it, gets at most that many messages; raise it (nats consumer edit) to store whole batches"
        );
    }
}

/// Refuses a durable whose settings would lose, skip or truncate messages: another ack
/// policy than explicit, a delivery limit, headers only, a filter, another deliver or
/// replay policy. Checked at start and every [`LAG_SAMPLE_EVERY`] after it: nats-server
/// lets each be edited on a live durable (a review edited `max_deliver` to 2 during a
/// database outage: five messages were dropped unstored, no dead letter).
fn refuse_unsafe(
    config: &NatsConfig,
    existing: &async_nats::jetstream::consumer::Config,
) -> Result<(), ConsumerError> {
    let policy = existing.ack_policy;
    if policy != AckPolicy::Explicit {
        return Err(ConsumerError::NotExplicitAck {
            durable: config.durable.clone(),
            policy: format!("{policy:?}"),
        });
    }
    let max_deliver = existing.max_deliver;
    if max_deliver > 0 {
        return Err(ConsumerError::LimitedDeliveries {
            durable: config.durable.clone(),
            max_deliver,
        });
    }
    // An existing durable is taken as it is: one made for another purpose could deliver
    // headers only (every message dead-lettered empty, then termed), a filtered part of
    // the stream, only new messages, or at the original publish pace.
    let setting = |setting, found: String, needed| ConsumerError::ConsumerSetting {
        durable: config.durable.clone(),
        setting,
        found,
        needed,
    };
    if existing.headers_only {
        return Err(setting(
            "headers_only",
            "true".into(),
            "whole messages (headers_only false)",
        ));
    }
    if !existing.filter_subject.is_empty() {
        return Err(setting(
            "filter_subject",
            format!("{:?}", existing.filter_subject),
            "no filter (use a stream of its own for a part of the subjects)",
        ));
    }
    if existing.deliver_policy != DeliverPolicy::All {
        return Err(setting(
            "deliver_policy",
            format!("{:?}", existing.deliver_policy),
            "deliver_policy all",
        ));
    }
    if existing.replay_policy != ReplayPolicy::Instant {
        return Err(setting(
            "replay_policy",
            format!("{:?}", existing.replay_policy),
            "replay_policy instant",
        ));
    }
    Ok(())
}

/// Messages delivered and not yet acked, across every process on the durable consumer.
/// JetStream's default (1,000) is two batches of 500: with more consumers than that, a
/// pull waits out its expiry for messages the server withholds, and throughput falls to
/// about one batch per fetch wait. Acking only after the commit keeps each message
/// unacked for one store transaction, so the cap only bounds redelivery after a crash.
const MAX_ACK_PENDING: i64 = 20_000;

/// How long past its wait a pull may stay open before it is given up on.
const PULL_GRACE: Duration = Duration::from_secs(5);

/// How often messages held longer than usual are reported in progress: three times
/// per ack wait, so one report lost or late still leaves time for the next.
fn progress_interval(ack_wait: Duration) -> Duration {
    (ack_wait / 3).max(Duration::from_millis(10))
}

/// Runs `work`, telling the broker every `every` that `messages` are still being
/// worked on (`+WPI`, which restarts each one's ack wait), so a batch whose commit
/// takes longer than the ack wait (a lock wait, a slow disk) is not redelivered to
/// another consumer meanwhile, to be stored again as duplicates. A message acked
/// before a report is not affected by it.
///
/// The reports are a future of their own, polled beside `work`: a report waiting for
/// room in the client's queue (the NATS server unreachable) never holds the work up.
async fn in_progress<T>(messages: &[Message], every: Duration, work: impl Future<Output = T>) -> T {
    let reporting = async {
        let mut reports = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        reports.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            reports.tick().await;
            for message in messages {
                if let Err(err) = message.ack_with(AckKind::Progress).await {
                    tracing::debug!(error = %err, "progress report failed; the message may be redelivered and absorbed as a duplicate");
                }
            }
        }
    };
    tokio::select! {
        out = work => out,
        never = reporting => never,
    }
}

/// The state of the fetch loop.
struct Worker {
    store: Store,
    tenant: TenantId,
    config: NatsConfig,
    /// Consecutive batches that failed to store: the exponent of the Nak backoff.
    failures: u32,
    /// Turns true on shutdown: a Nak backoff's pause ends early then.
    stopping: tokio::sync::watch::Receiver<bool>,
    /// How often a batch being stored is reported in progress ([`in_progress`]).
    progress_every: Duration,
}

/// One message of a batch on its way to the store.
struct Pending {
    message: Message,
    sequence: i64,
    /// When the broker received it (ns since the epoch), the same on every redelivery.
    published_ns: i64,
    fate: Fate,
    /// Its row committed (its contract's transaction did): acked even when a later
    /// group of the batch fails, so it is not replayed (a replay would log its
    /// collision again, and alert its webhooks twice).
    committed: bool,
}

/// What becomes of a message.
enum Fate {
    Store,
    Dead(Refusal),
}

/// A contract by name and, when a message's header pins it, version.
type Pinned = (ContractName, Option<u32>);

/// What a batch did, for the log.
#[derive(Default)]
struct Counts {
    inserted: usize,
    duplicates: usize,
    collisions: usize,
    dead_lettered: usize,
}

/// Fetches one batch: at once what is waiting after a full batch, else waiting up to
/// `fetch_wait_ms` for messages. A fetch error is logged and yields an empty batch.
async fn fetch(consumer: &PullConsumer, config: &NatsConfig, immediate: bool) -> Vec<Message> {
    let wait = Duration::from_millis(config.fetch_wait_ms.max(1));
    let bytes = Some(config.batch_bytes_max);
    let (batch, ended) = pull(consumer, config.batch_messages_max, bytes, immediate, wait).await;
    match ended {
        Some(status) if batch.is_empty() && status.contains("Exceeds MaxBytes") => {
            // The next message alone is larger than --nats-batch-bytes-max: every pull
            // would end here and the stream would stop. Pulled alone, without the byte
            // bound (the server's max_payload bounds it), it is handled like any other.
            tracing::warn!(
                status,
                "a message exceeds the batch byte limit; pulling it alone"
            );
            pull(consumer, 1, None, true, wait).await.0
        }
        Some(status) if batch.is_empty() => {
            // Consumer deleted, no responders, a request limit of the durable: pulling
            // again at once would spin, and the status would never be seen.
            tracing::warn!(status, "pull ended with an error status and no message; pulling again after the fetch wait");
            tokio::time::sleep(wait).await;
            batch
        }
        _ => batch,
    }
}

/// One pull of at most `messages` (and `bytes`, if bounded): what came, and the status
/// that ended it when it was an error.
async fn pull(
    consumer: &PullConsumer,
    messages: usize,
    bytes: Option<usize>,
    immediate: bool,
    wait: Duration,
) -> (Vec<Message>, Option<String>) {
    let requested = if immediate {
        let request = consumer.fetch().max_messages(messages);
        match bytes {
            Some(bytes) => request.max_bytes(bytes).messages().await,
            None => request.messages().await,
        }
    } else {
        let request = consumer.batch().max_messages(messages).expires(wait);
        match bytes {
            Some(bytes) => request.max_bytes(bytes).messages().await,
            None => request.messages().await,
        }
    };
    let mut incoming = match requested {
        Ok(incoming) => incoming,
        Err(err) => {
            tracing::warn!(error = %err, "fetch failed; retrying");
            tokio::time::sleep(wait).await;
            return (Vec::new(), None);
        }
    };
    let mut batch = Vec::new();
    let mut ended = None;
    let drain = async {
        while let Some(item) = incoming.next().await {
            match item {
                Ok(message) => batch.push(message),
                // A status ends the pull (max bytes reached, leader change): keep what
                // came.
                Err(err) => {
                    tracing::debug!(error = %err, "pull request ended");
                    ended = Some(err.to_string());
                    break;
                }
            }
        }
    };
    // The server ends every pull with a status, but a status lost with a node (or a
    // reconnect) would leave the pull open for ever: the client bounds only pulls
    // that expire, not the immediate ones. Give up on it and pull again; what
    // already came is handled, anything else is redelivered after the ack wait.
    if tokio::time::timeout(wait + PULL_GRACE, drain)
        .await
        .is_err()
    {
        tracing::warn!(
            received = batch.len(),
            "pull request never ended (server lost?); pulling again"
        );
    }
    (batch, ended)
}

impl Worker {
    /// Stores a batch and acks it. After a store error, acks the messages whose group
    /// committed before it and Naks the rest.
    async fn handle(&mut self, batch: Vec<Message>) {
        let mut pending = Vec::with_capacity(batch.len());
        let every = self.progress_every;
        let deadline = store_deadline(every);
        let storing = async {
            tokio::time::timeout(deadline, self.store_batch(&batch, &mut pending))
                .await
                .unwrap_or(Err(BatchError::Deadline(deadline)))
        };
        let stored = in_progress(&batch, every, storing).await;
        match stored {
            Ok(counts) => {
                self.failures = 0;
                in_progress(&batch, every, self.settle(&pending)).await;
                tracing::info!(
                    tenant = %self.tenant,
                    messages = pending.len(),
                    inserted = counts.inserted,
                    duplicates = counts.duplicates,
                    collisions = counts.collisions,
                    dead_lettered = counts.dead_lettered,
                    "batch stored"
                );
            }
            Err(err) => {
                self.failures = self.failures.saturating_add(1);
                let delay = self.config.nak_delay(self.failures);
                let committed = pending.iter().filter(|p| p.committed).count();
                tracing::warn!(error = %err, failures = self.failures, delay_ms = delay.as_millis() as u64, committed, "batch not stored; Nak what did not commit");
                for (index, message) in batch.iter().enumerate() {
                    let kind = if pending.get(index).is_some_and(|p| p.committed) {
                        AckKind::Ack
                    } else {
                        AckKind::Nak(Some(delay))
                    };
                    if let Err(err) = message.ack_with(kind).await {
                        tracing::debug!(error = %err, "ack or Nak failed; the message will be redelivered after the ack wait");
                    }
                }
                // Pause too, so a consumer does not spin on other messages while the
                // store is down; a shutdown ends the pause (the Nak'd batch is
                // redelivered to whichever consumer is left).
                let mut stopping = self.stopping.clone();
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    _ = stopping.wait_for(|stop| *stop) => {}
                }
            }
        }
    }

    /// Decodes, identifies and stores a batch: one transaction per contract (the
    /// Segment messages' one included), then the dead letters. Nothing is acked here;
    /// `pending` holds each message's fate, and whether its row committed, also when an
    /// error ends the batch early.
    async fn store_batch(
        &self,
        batch: &[Message],
        pending: &mut Vec<Pending>,
    ) -> Result<Counts, BatchError> {
        let mut groups: BTreeMap<Pinned, Vec<(Value, usize)>> = BTreeMap::new();
        let mut segment: Vec<(Value, usize)> = Vec::new();
        for (index, message) in batch.iter().enumerate() {
            let (sequence, published_ns) = message
                .info()
                .map(|info| {
                    let published = info.published.unix_timestamp_nanos();
                    (
                        i64::try_from(info.stream_sequence).unwrap_or(i64::MAX),
                        i64::try_from(published).unwrap_or(i64::MAX),
                    )
                })
                .unwrap_or((0, 0));
            let fate = match decode(
                message.subject.as_str(),
                &message.payload,
                self.config.json_depth_max,
            ) {
                Decoded::Event { contract, value } => {
                    match pinned_version(version_header(message.headers.as_ref())) {
                        Ok(version) => {
                            let group = groups.entry((contract, version)).or_default();
                            group.push((value, index));
                            Fate::Store
                        }
                        Err(refusal) => Fate::Dead(refusal),
                    }
                }
                Decoded::Segment { value } => {
                    segment.push((value, index));
                    Fate::Store
                }
                Decoded::Dead(refusal) => Fate::Dead(refusal),
            };
            pending.push(Pending {
                message: message.clone(),
                sequence,
                published_ns,
                fate,
                committed: false,
            });
        }
        let mut counts = Counts::default();
        for ((name, version), values) in groups {
            let Some(contract) = self.store.contract(&self.tenant, &name, version).await? else {
                let which = version.map(|v| format!(" version {v}")).unwrap_or_default();
                let refusal = Refusal::new(
                    "unknown_contract",
                    format!(
                        "no contract named {:?}{which} for this tenant",
                        name.as_str()
                    ),
                );
                for (_, index) in values {
                    pending[index].fate = Fate::Dead(refusal.clone());
                }
                continue;
            };
            self.store_group(&contract, values, pending, &mut counts)
                .await?;
        }
        self.store_segment(segment, pending, &mut counts).await?;
        let letters = self.dead_letters(pending);
        counts.dead_lettered = letters.len();
        self.store
            .insert_dead_letters(&self.tenant, &letters)
            .await?;
        for letter in &letters {
            crate::metrics::record_dead_letter(&letter.stream, &letter.reason);
        }
        Ok(counts)
    }

    /// Identifies one contract's messages and stores them in one transaction.
    async fn store_group(
        &self,
        contract: &Contract,
        values: Vec<(Value, usize)>,
        pending: &mut [Pending],
        counts: &mut Counts,
    ) -> Result<(), StoreError> {
        let offered = values.len();
        let mut events: Vec<NewEvent> = Vec::with_capacity(values.len());
        let mut positions = Vec::with_capacity(values.len());
        let now = now_us();
        let mut late = false;
        for (value, index) in values {
            match identify(contract, value) {
                Ok(event) => match self.admit(contract, &event, now) {
                    Ok(admitted) => {
                        late |= admitted == Admission::Late;
                        events.push(event);
                        positions.push(index);
                    }
                    Err(refusal) => pending[index].fate = Fate::Dead(refusal),
                },
                Err(err) => pending[index].fate = Fate::Dead(Refusal::of(&err)),
            }
        }
        let source = IngestSource::nats(&self.config.stream);
        // An event's day with no partition to write to although this consumer's horizon
        // admits it (maintenance ran with a shorter horizon, or no `serve` runs it): Nak'd,
        // the batch would come back for ever. Such an event is a dead letter naming the
        // backfill (reconciled instead with `--late-events reconcile`), the others stored.
        let stored = self
            .store
            .insert_events_apart(
                source.clone(),
                &self.tenant,
                contract,
                &events,
                late,
                self.config.late_events,
            )
            .await?;
        let (stored, left_out) = StoredApart::split(events, positions, stored);
        for index in left_out {
            let message = lacking_partition_message(contract.name().as_str());
            pending[index].fate = Fate::Dead(Refusal::new("outside_horizon", message));
        }
        let StoredApart {
            events,
            positions,
            outcomes,
        } = stored;
        debug_assert_eq!(outcomes.len(), events.len());
        for &index in &positions {
            pending[index].committed = true;
        }
        // The WARN line of each collision is `record_events`'s.
        let rejected = offered - events.len();
        crate::metrics::record_events(
            &self.tenant,
            contract.name().as_str(),
            &source,
            &events,
            &outcomes,
            rejected,
        );
        for ((event, outcome), index) in events.iter().zip(outcomes).zip(positions) {
            match outcome {
                EventOutcome::Inserted => counts.inserted += 1,
                EventOutcome::Duplicate => counts.duplicates += 1,
                // Logged in the collisions table by the store; resending cannot help,
                // so the message is acked like the others.
                EventOutcome::Collision { .. } => {
                    counts.collisions += 1;
                    let sequence = pending[index].sequence;
                    tracing::debug!(contract = %contract.name(), event_id = %event.identified.event_id, sequence, "collision acked");
                }
            }
        }
        Ok(())
    }

    /// Refuses an event outside the live dedupe horizon, as the HTTP API does with
    /// `422 outside_horizon`: a dead letter (load it with `traqlyte backfill`), never a
    /// store error that would Nak the batch again and again. With `--late-events
    /// reconcile` an event older than the horizon is taken, to be reconciled as a
    /// backfill would ([`Admission::Late`]); one too far ahead is still refused.
    fn admit(&self, contract: &Contract, event: &NewEvent, now: i64) -> Result<Admission, Refusal> {
        let at = partition_time(contract, event.identified.occurred_at_us);
        let horizon = self.config.dedupe_horizon;
        let side = match horizon.admission(at, now, self.config.late_events) {
            Ok(admission) => return Ok(admission),
            Err(OutsideHorizon::TooOld) => horizon.too_old(self.config.late_events),
            Err(OutsideHorizon::TooFarAhead) => "more than a day in the future".to_string(),
        };
        let when = at.map(format_rfc3339_micros).unwrap_or_default();
        Err(Refusal::new(
            "outside_horizon",
            format!(
                "the occurrence time {when} is {side}; load it with `traqlyte backfill --contract {}`",
                contract.name()
            ),
        ))
    }

    /// Stores the batch's Segment messages under the configured source, in one
    /// transaction with the outcomes of the metric bindings they feed (the path of
    /// `POST /v1/batch`). Without a working source they are dead letters.
    async fn store_segment(
        &self,
        values: Vec<(Value, usize)>,
        pending: &mut [Pending],
        counts: &mut Counts,
    ) -> Result<(), BatchError> {
        if values.is_empty() {
            return Ok(());
        }
        let source = match &self.config.segment_source {
            Some(name) => self.store.working_source(&self.tenant, name).await?,
            None => None,
        };
        let Some(source) = source else {
            let refusal = match &self.config.segment_source {
                None => Refusal::new(
                    "segment_source_not_configured",
                    "messages on traqlyte.segment need the consumer's --segment-source NAME (the source they are stored under)",
                ),
                Some(name) => Refusal::new(
                    "source_revoked",
                    format!("the source {:?} of --segment-source is revoked or gone", name.as_str()),
                ),
            };
            for (_, index) in values {
                pending[index].fate = Fate::Dead(refusal.clone());
            }
            return Ok(());
        };
        let received_at_us = now_us();
        let envelope = Envelope {
            source: source.source_id.as_str(),
            received_at_us,
            route_type: None,
            sent_at: None,
            context: None,
        };
        let mut messages = Vec::with_capacity(values.len());
        for (value, index) in values {
            match identify_message_owned(value, &envelope) {
                Ok(message) => messages.push((message, index)),
                Err(err) => {
                    let field = err.field();
                    let detail = if field.is_empty() {
                        err.to_string()
                    } else {
                        format!("{field}: {err}")
                    };
                    pending[index].fate = Fate::Dead(Refusal::new(err.code(), detail));
                }
            }
        }
        if messages.is_empty() {
            return Ok(());
        }
        let (messages, positions): (Vec<_>, Vec<usize>) = messages.into_iter().unzip();
        let stored = ingest::store(&self.store, &source, &messages, &[], received_at_us)
            .await
            .map_err(|err| BatchError::Segment(format!("{}: {}", err.code(), err.message())))?;
        for &index in &positions {
            pending[index].committed = true;
        }
        for (outcome, index) in stored.outcomes.iter().zip(positions) {
            match outcome {
                EventOutcome::Inserted => counts.inserted += 1,
                EventOutcome::Duplicate => counts.duplicates += 1,
                EventOutcome::Collision { .. } => {
                    counts.collisions += 1;
                    let sequence = pending[index].sequence;
                    tracing::warn!(source = %source.source_id, sequence, "collision: another Segment message holds this identity; logged");
                }
            }
        }
        Ok(())
    }

    /// The dead letters of a batch, in stream order.
    fn dead_letters(&self, pending: &[Pending]) -> Vec<NewDeadLetter> {
        pending
            .iter()
            .filter_map(|p| match &p.fate {
                Fate::Dead(refusal) => Some(NewDeadLetter {
                    stream: self.config.stream.clone(),
                    stream_sequence: p.sequence,
                    published_ns: p.published_ns,
                    subject: p.message.subject.to_string(),
                    reason: refusal.reason.clone(),
                    detail: refusal.detail.clone(),
                    raw: p.message.payload.to_vec(),
                }),
                Fate::Store => None,
            })
            .collect()
    }

    /// After the commit: acks stored messages, terminates dead letters.
    async fn settle(&self, pending: &[Pending]) {
        #[cfg(feature = "test-hooks")]
        if self.config.test_ack_delay_ms > 0 {
            tracing::info!(
                delay_ms = self.config.test_ack_delay_ms,
                "test hook: committed, acking after a delay"
            );
            tokio::time::sleep(Duration::from_millis(self.config.test_ack_delay_ms)).await;
        }
        for p in pending {
            let kind = match p.fate {
                Fate::Store => AckKind::Ack,
                Fate::Dead(_) => AckKind::Term,
            };
            if let Err(err) = p.message.ack_with(kind).await {
                tracing::debug!(error = %err, sequence = p.sequence, "ack failed; the message will be redelivered and absorbed as a duplicate");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{without_credentials, Silence, SilenceVerdict};
    use std::time::{Duration, Instant};

    /// A silence is measured from the start of its first unanswered check, warned of
    /// once past 15 s and again each minute, and its end said only when it was warned
    /// of; a single slow check after a long batch warns of nothing.
    #[test]
    fn a_silence_is_warned_of_past_15_s_each_minute_and_its_end_said() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut silence = Silence::default();
        // Answered: nothing. A last answer long ago, then one check failing in 10 s.
        assert_eq!(
            silence.after_check(true, at(0), at(0)),
            SilenceVerdict::Nothing
        );
        assert_eq!(
            silence.after_check(false, at(30), at(40)),
            SilenceVerdict::Nothing
        );
        assert_eq!(
            silence.after_check(true, at(45), at(45)),
            SilenceVerdict::Nothing
        );
        // A silence: from the start of its first check.
        assert_eq!(
            silence.after_check(false, at(50), at(60)),
            SilenceVerdict::Nothing
        );
        assert_eq!(
            silence.after_check(false, at(65), at(75)),
            SilenceVerdict::Warn(Duration::from_secs(25))
        );
        assert_eq!(
            silence.after_check(false, at(80), at(90)),
            SilenceVerdict::Nothing
        );
        assert_eq!(
            silence.after_check(false, at(130), at(140)),
            SilenceVerdict::Warn(Duration::from_secs(90))
        );
        assert_eq!(
            silence.after_check(true, at(145), at(146)),
            SilenceVerdict::Recovered(Duration::from_secs(96))
        );
        // Over: a new silence starts afresh.
        assert_eq!(
            silence.after_check(false, at(150), at(160)),
            SilenceVerdict::Nothing
        );
        assert_eq!(
            silence.after_check(true, at(165), at(165)),
            SilenceVerdict::Nothing
        );
    }

    #[test]
    fn credentials_are_cut_from_every_url_of_a_list() {
        assert_eq!(
            without_credentials("nats://alice:hunter2@127.0.0.1:4222"),
            "nats://***@127.0.0.1:4222"
        );
        assert_eq!(
            without_credentials("nats://s3cr3t@h1:4222,nats://h2:4222,tls://u:p@h3"),
            "nats://***@h1:4222,nats://h2:4222,tls://***@h3"
        );
        assert_eq!(without_credentials("127.0.0.1:4222"), "127.0.0.1:4222");
        // Without a scheme too.
        assert_eq!(without_credentials("alice:pw@h:4222"), "***@h:4222");
    }
}

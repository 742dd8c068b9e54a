//! `traqlyte consume nats` and the `--nats-…` options of `serve`: clap wiring of the
//! JetStream consumer (`traqlyte_server::connectors::nats`).

use std::future::Future;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use traqlyte_server::connectors::nats::{self, NatsConfig};
use traqlyte_store::{DedupeHorizon, SourceName, TenantName};

use crate::DbArgs;

/// What to consume.
#[derive(Subcommand)]
pub(crate) enum ConsumeCommand {
    /// A NATS JetStream stream through a durable pull consumer with explicit acks: each
    /// fetched batch is stored (one transaction per contract) and only then acked;
    /// messages on `traqlyte.{contract}` are events of that contract, messages on
    /// `traqlyte.segment` Segment messages of `--segment-source`.
    Nats(ConsumeNatsArgs),
}

/// Options of `traqlyte consume nats`.
#[derive(Args)]
pub(crate) struct ConsumeNatsArgs {
    /// The NATS server, e.g. `nats://127.0.0.1:4222` (a cluster: several, comma-separated).
    #[arg(long)]
    url: String,
    /// The JetStream stream to read (it must exist).
    #[arg(long)]
    stream: String,
    /// The durable consumer's name (created with explicit acks when absent; several
    /// processes with one name share the work).
    #[arg(long)]
    durable: String,
    /// The tenant every message is stored under (its name, as given to `tenant create`, or its id).
    #[arg(long)]
    tenant: String,
    /// The tenant's source (its name, as given to `source create`, or its id) that Segment messages
    /// on `traqlyte.segment` are stored under; the consumer refuses to start when it is
    /// missing or revoked. Without it such messages are dead letters.
    #[arg(long)]
    segment_source: Option<String>,
    #[command(flatten)]
    horizon: crate::partitions::HorizonArgs,
    #[command(flatten)]
    late: crate::partitions::LateEventsArgs,
    #[command(flatten)]
    bounds: NatsBounds,
    #[command(flatten)]
    metrics_access: crate::MetricsAccess,
    #[command(flatten)]
    db: DbArgs,
}

/// The consumer's bounds, shared by `consume nats` and `serve`.
#[derive(Args, Clone)]
pub(crate) struct NatsBounds {
    /// Most messages fetched and stored as one batch (at least 1).
    #[arg(long, default_value_t = 500,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    nats_batch_messages_max: usize,
    /// Most bytes fetched as one batch (keep it above the stream's largest message).
    #[arg(long, default_value_t = 8 * 1024 * 1024)]
    nats_batch_bytes_max: usize,
    /// How long one fetch waits for messages (also how long SIGTERM may take when idle).
    #[arg(long, default_value_t = 1_000)]
    nats_fetch_wait_ms: u64,
    /// Ack wait of a durable consumer this process creates: unacked messages are
    /// redelivered after it.
    #[arg(long, default_value_t = 30_000)]
    nats_ack_wait_ms: u64,
    /// How often the client pings the NATS server: a connection whose pings go
    /// unanswered (a hung node, a partition) is left, for another node of a cluster,
    /// after about three intervals (at least 100).
    #[arg(long, default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(100..))]
    nats_ping_interval_ms: u64,
    /// First Nak delay after a store error (doubled per consecutive failure).
    #[arg(long, default_value_t = 100)]
    nats_nak_delay_ms_min: u64,
    /// Largest Nak delay.
    #[arg(long, default_value_t = 30_000)]
    nats_nak_delay_ms_max: u64,
}

/// The `--nats-…` options of `serve`: with `--nats-url`, the server also runs a consumer.
#[derive(Args, Clone)]
pub(crate) struct ServeNats {
    /// Also consume this NATS server's JetStream stream (see `traqlyte consume nats`).
    #[arg(long, requires_all = ["nats_stream", "nats_durable", "nats_tenant"])]
    nats_url: Option<String>,
    /// The stream to consume.
    #[arg(long, requires = "nats_url")]
    nats_stream: Option<String>,
    /// The durable consumer's name.
    #[arg(long, requires = "nats_url")]
    nats_durable: Option<String>,
    /// The tenant the messages are stored under.
    #[arg(long, requires = "nats_url")]
    nats_tenant: Option<String>,
    /// The source Segment messages on `traqlyte.segment` are stored under (see
    /// `consume nats --segment-source`).
    #[arg(long, requires = "nats_url")]
    nats_segment_source: Option<String>,
    #[command(flatten)]
    bounds: NatsBounds,
}

impl NatsBounds {
    /// `flags` is how the command spells `--tenant` and `--segment-source` (`serve`
    /// prefixes them with `nats-`), so an error names a flag the operator typed.
    fn config(
        &self,
        (url, stream, durable, tenant): (&str, &str, &str, &str),
        segment_source: Option<&str>,
        horizon: DedupeHorizon,
        (tenant_flag, source_flag): (&str, &str),
    ) -> Result<NatsConfig> {
        let tenant =
            TenantName::parse(tenant).map_err(|e| anyhow::anyhow!("{tenant_flag}: {e}"))?;
        let mut config = NatsConfig::new(url.into(), stream.into(), durable.into(), tenant);
        config.segment_source = segment_source
            .map(SourceName::parse)
            .transpose()
            .map_err(|e| anyhow::anyhow!("{source_flag}: {e}"))?;
        config.dedupe_horizon = horizon;
        if self.nats_nak_delay_ms_min > self.nats_nak_delay_ms_max {
            anyhow::bail!(
                "--nats-nak-delay-ms-min ({}) must not exceed --nats-nak-delay-ms-max ({})",
                self.nats_nak_delay_ms_min,
                self.nats_nak_delay_ms_max
            );
        }
        config.batch_messages_max = self.nats_batch_messages_max;
        config.batch_bytes_max = self.nats_batch_bytes_max;
        config.fetch_wait_ms = self.nats_fetch_wait_ms;
        config.ack_wait_ms = self.nats_ack_wait_ms;
        config.ping_interval_ms = self.nats_ping_interval_ms;
        config.nak_delay_ms_min = self.nats_nak_delay_ms_min;
        config.nak_delay_ms_max = self.nats_nak_delay_ms_max;
        Ok(config)
    }
}

impl ServeNats {
    /// The consumer's config when `--nats-url` is given; `horizon` is the server's.
    pub(crate) fn config(&self, horizon: DedupeHorizon) -> Result<Option<NatsConfig>> {
        let (Some(url), Some(stream), Some(durable), Some(tenant)) = (
            &self.nats_url,
            &self.nats_stream,
            &self.nats_durable,
            &self.nats_tenant,
        ) else {
            return Ok(None);
        };
        self.bounds
            .config(
                (url, stream, durable, tenant),
                self.nats_segment_source.as_deref(),
                horizon,
                ("--nats-tenant", "--nats-segment-source"),
            )
            .map(Some)
    }
}

/// Runs the command until `shutdown`.
pub(crate) async fn run(
    command: ConsumeCommand,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let ConsumeCommand::Nats(args) = command;
    let mut config = args.bounds.config(
        (&args.url, &args.stream, &args.durable, &args.tenant),
        args.segment_source.as_deref(),
        args.horizon.dedupe_horizon_days,
        ("--tenant", "--segment-source"),
    )?;
    config.late_events = args.late.late_events.into();
    // `serve` reads a token without a listener of its own (its API's `/metrics`); a
    // consumer has no other listener, so the token alone would protect nothing.
    if args.metrics_access.token_alone() {
        anyhow::bail!(
            "--metrics-token needs --metrics-listen: `consume nats` serves its metrics only there"
        );
    }
    crate::tenants::refuse_missing_file(&args.db)?;
    let store = crate::connect(&args.db, 4).await?;
    let applied = store.migrate().await.context("apply migrations")?;
    tracing::info!(backend = store.backend_name(), database = %crate::database_shown(&args.db.database_url), applied = ?applied, "database ready");
    // Bound before the partitions are waited for: the probes answer meanwhile.
    let metrics =
        traqlyte_server::serve_metrics_alone(store.clone(), args.metrics_access.config(true))
            .await
            .context("serve metrics")?;
    let clock = tokio::spawn(traqlyte_server::sync_clock(store.clone()));
    // The stop signal is watched from now on: a consumer still waiting for its
    // partitions at start stops at once.
    let mut stopping = traqlyte_server::stop_signal(shutdown);
    let Some(partitions) = traqlyte_server::keep_partitions_created(
        store.clone(),
        config.dedupe_horizon,
        stopping.clone(),
    )
    .await
    else {
        tracing::info!("stopped before consuming");
        clock.abort();
        if let Some(task) = &metrics {
            task.abort();
        }
        return Ok(());
    };
    let shutdown = async move {
        let _ = stopping.wait_for(|stop| *stop).await;
    };
    let result = nats::run(store, config, shutdown)
        .await
        .context("consume NATS JetStream");
    partitions.abort();
    clock.abort();
    if let Some(task) = &metrics {
        task.abort();
    }
    result
}

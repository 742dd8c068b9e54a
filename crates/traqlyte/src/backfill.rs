//! `traqlyte backfill`: loads a file of events (one JSON object a line) through the same
//! identification and the same dedupe path as live ingestion, and says what it did:
//! inserted, already present (the same event, stored before: a harmless re-run),
//! collided (the same identity with other content: logged, nothing overwritten) and
//! rejected (a line live ingestion would refuse, with its line number).
//!
//! The file is streamed in batches of [`BATCH_LINES_MAX`] lines (fewer when they reach
//! [`BATCH_BYTES_MAX`]), so memory stays bounded on a multi-gigabyte file. Reconciliation is the store's `INSERT … ON CONFLICT DO
//! NOTHING` against every stored row, whatever its age. A dry run does all of it inside
//! one transaction and rolls it back, so its counts are the real run's by construction
//! (it holds the new rows' key locks until it ends; run it off-peak on a big file).

use std::io::{BufRead, BufReader, IsTerminal, Read};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use traqlyte_identity::openlineage::{
    identify_run_event_owned, run_event_contract, RUN_EVENT_CONTRACT,
};
use traqlyte_identity::{json as strict_json, Contract, ContractName};
use traqlyte_store::partitions::partition_time;
use traqlyte_store::{
    DedupeHorizon, EventOutcome, NewEvent, OutsideHorizon, RunEventRow, Store, StoreError, StoreTx,
    TenantId,
};

use crate::partitions::HorizonArgs;
use crate::DbArgs;

/// Lines identified and stored together.
const BATCH_LINES_MAX: usize = 1_000;
/// Bytes of lines identified and stored together: a batch of long lines ends sooner, so
/// memory stays bounded in bytes too (1,000 lines of 1 MiB would be a gigabyte).
const BATCH_BYTES_MAX: usize = 16 * 1024 * 1024;
/// The longest line accepted: live ingestion's single-body limit (a RunEvent's:
/// [`RUN_EVENT_BYTES_MAX`]).
const LINE_BYTES_MAX: usize = 1024 * 1024;
/// Live ingestion's nesting limit (a RunEvent's: [`RUN_EVENT_DEPTH_MAX`]).
const JSON_DEPTH_MAX: usize = 32;
/// `POST /api/v1/lineage`'s default body limit, for RunEvent lines.
const RUN_EVENT_BYTES_MAX: usize = traqlyte_server::LINEAGE_BODY_BYTES_MAX;
/// `POST /api/v1/lineage`'s default nesting limit, for RunEvent lines.
const RUN_EVENT_DEPTH_MAX: usize = traqlyte_server::LINEAGE_JSON_DEPTH_MAX;
/// Rejected lines printed before the rest are only counted.
const REJECTIONS_SHOWN_MAX: usize = 20;

/// Options of `traqlyte backfill`.
#[derive(Args)]
pub(crate) struct BackfillArgs {
    /// The tenant's name (or id).
    #[arg(long)]
    tenant: String,
    /// The contract the events are identified under: a tenant's contract (its latest
    /// version, unless `--version`) or the built-in `openlineage.run_event`.
    #[arg(long)]
    contract: String,
    /// The contract version to identify the events under, as `POST
    /// /events/{contract}?version=N` does: events stored under an older version keep
    /// their ids (a reload of an export, a move from SQLite to PostgreSQL).
    #[arg(long)]
    version: Option<u32>,
    /// The file: one JSON event a line (NDJSON); blank lines are skipped. `-` reads
    /// standard input; a gzip file (or stream: its first bytes tell) is inflated as it is
    /// read, as most archives' exports are written. (Segment messages are not backfilled:
    /// send them to `/v1/batch` with their source's write key.)
    #[arg(long)]
    file: PathBuf,
    /// Count what would happen, write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print the summary as one JSON line.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    db: DbArgs,
    /// The horizon `serve` runs with: the backfill first creates the partitions of its
    /// days (it never detaches one), then reconciles each event in the partition of its
    /// day, attached or detached.
    #[command(flatten)]
    horizon: HorizonArgs,
}

/// What a backfill did (or, dry, would do).
#[derive(Debug, Default)]
struct Counts {
    inserted: u64,
    already_present: u64,
    collided: u64,
    rejected: u64,
}

/// How the lines of the file are identified.
enum Kind {
    Contract(Box<Contract>),
    RunEvent,
}

/// One identified line, ready for the store.
enum Item {
    Event(NewEvent),
    Run(RunEventRow),
}

/// Runs the command.
pub(crate) async fn run(args: BackfillArgs) -> Result<()> {
    // The file first: a wrong path touches no database (no migration, no partitions).
    let (input, input_bytes) = open_input(&args.file)?;
    let store = crate::tenants::open_for_tenant(&args.db).await?;
    let tenant = crate::tenants::find(&store, &args.tenant).await?.tenant_id;
    let kind = kind(&store, &tenant, &args.contract, args.version).await?;
    announce_version(&args, &kind);
    let horizon = args.horizon.dedupe_horizon_days;
    // Every day of the horizon has its partition before events are routed to them. Only
    // created, never detached: `serve` owns the horizon, and a backfill run with a
    // shorter one must not take days out of it (a dry run creates them too: empty
    // partitions `serve` creates anyway, so its counts stay the real run's).
    store
        .create_partitions(&horizon, traqlyte_store::now_us())
        .await
        .context("create partitions")?;
    let progress = progress_bar(input_bytes);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicU8::new(0));
    let watcher = watch_for_stop(stop.clone(), progress.clone());
    let stopped = || stop.load(std::sync::atomic::Ordering::Acquire) != 0;
    let mut reader = inflated(BufReader::new(progress.wrap_read(input)))
        .with_context(|| format!("read {}", args.file.display()))?;
    let mut batches = Batches {
        store: &store,
        tenant: &tenant,
        kind: &kind,
        dry_run: args.dry_run,
        dry: None,
        counts: Counts::default(),
    };
    let mut batch: Vec<Item> = Vec::with_capacity(BATCH_LINES_MAX);
    let mut batch_bytes = 0usize;
    let mut line = Vec::new();
    let mut number = 0u64;
    let line_max = match kind {
        Kind::RunEvent => RUN_EVENT_BYTES_MAX,
        Kind::Contract(_) => LINE_BYTES_MAX,
    };
    let too_long = format!(
        "longer than the {} MiB limit of one event",
        line_max / (1024 * 1024)
    );
    let interrupted = loop {
        if stopped() {
            break true;
        }
        line.clear();
        // Room for the limit and a `\r\n`: the limit is on the event, not its line ending.
        let read = reader
            .by_ref()
            .take(line_max as u64 + 2)
            .read_until(b'\n', &mut line)
            .with_context(|| unreadable(&args, number, &batches.counts))?;
        if read == 0 {
            // A pipe's writer stopped by the same Ctrl-C ends the input early: not the
            // whole file.
            break stopped();
        }
        number += 1;
        if content_len(&line) > line_max {
            reject(&progress, &mut batches.counts, number, &too_long);
            // Only a line cut short by the limit has a rest to skip: a whole line's
            // newline is already read, and skipping would swallow the next line.
            if line.last() != Some(&b'\n') {
                skip_rest_of_line(&mut reader)
                    .with_context(|| unreadable(&args, number, &batches.counts))?;
            }
            continue;
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match identify(&kind, &line).and_then(|item| not_ahead(&horizon, &kind, item)) {
            Ok(item) => {
                batch.push(item);
                batch_bytes += line.len();
            }
            Err(reason) => reject(&progress, &mut batches.counts, number, &reason),
        }
        if (batch.len() == BATCH_LINES_MAX || batch_bytes >= BATCH_BYTES_MAX) && !stopped() {
            batch_bytes = 0;
            batches.store(&mut batch, number).await?;
        }
    };
    let pending = batch.len();
    if !interrupted {
        batches.store(&mut batch, number).await?;
    }
    let counts = batches.end().await?;
    watcher.abort();
    progress.finish_and_clear();
    let interrupted = interrupted.then(|| Interrupted {
        after_line: number,
        not_written: pending,
        dry_run: args.dry_run,
        status: stop.load(std::sync::atomic::Ordering::Acquire),
    });
    report(&args, &counts, interrupted.as_ref());
    if let Some(interrupted) = interrupted {
        return Err(interrupted.into());
    }
    if counts.rejected > 0 {
        return Err(LinesRejected(counts.rejected).into());
    }
    Ok(())
}

/// The file to read (`-`: standard input) and its size in bytes (0 when unknown).
fn open_input(file: &std::path::Path) -> Result<(Box<dyn Read>, u64)> {
    if file.as_os_str() == "-" {
        return Ok((Box::new(std::io::stdin()), 0));
    }
    let opened = std::fs::File::open(file).with_context(|| format!("open {}", file.display()))?;
    let bytes = opened.metadata().map(|m| m.len()).unwrap_or(0);
    Ok((Box::new(opened), bytes))
}

/// Says which version identifies the lines: a dry run and the real run each take the
/// latest unless `--version` pins one, and a version registered between them changes
/// every id (the dry run's "already present" becomes "inserted").
fn announce_version(args: &BackfillArgs, kind: &Kind) {
    let version = match kind {
        Kind::Contract(contract) => contract.version(),
        Kind::RunEvent => 1,
    };
    let chosen = if args.version.is_some() {
        "as --version asks"
    } else {
        "the latest; pin it with --version to compare a dry run with the real run"
    };
    errln!(
        "identifying lines under contract {} version {version} ({chosen})",
        args.contract
    );
}

/// Where the batches of a run go, and what they did. A real run opens each batch's
/// transaction only once the batch is read, so the write lock (SQLite's is the whole
/// file's) is never held while input is awaited (a slow pipe). A dry run keeps one
/// transaction for the whole file, rolled back at the end: its counts must see its own
/// earlier batches, as the real run's commits do.
struct Batches<'a> {
    store: &'a Store,
    tenant: &'a TenantId,
    kind: &'a Kind,
    dry_run: bool,
    dry: Option<StoreTx>,
    counts: Counts,
}

impl Batches<'_> {
    /// Stores (or, dry, counts) the items of `batch`, read up to line `last_line`.
    async fn store(&mut self, batch: &mut Vec<Item>, last_line: u64) -> Result<()> {
        let rows = take_rows(self.kind, batch);
        if self.dry_run {
            let (store, tenant, kind) = (self.store, self.tenant, self.kind);
            return dry_batch(store, &mut self.dry, tenant, kind, &rows, &mut self.counts).await;
        }
        if rows.is_empty() {
            return Ok(());
        }
        write_batch(
            self.store,
            self.tenant,
            self.kind,
            &rows,
            &mut self.counts,
            last_line,
        )
        .await
    }

    /// The counts, a dry run's transaction rolled back.
    async fn end(mut self) -> Result<Counts> {
        if let Some(tx) = self.dry.take() {
            tx.rollback().await?;
        }
        Ok(self.counts)
    }
}

/// Why a backfill stopped reading its file after line `last_line` (a truncated or corrupt
/// gzip archive, a disk error), with what the batches before stored: on a multi-gigabyte
/// file the operator must know whether to resume, and the counts were not printed.
fn unreadable(args: &BackfillArgs, last_line: u64, counts: &Counts) -> String {
    let file = args.file.display();
    if args.dry_run {
        return format!(
            "read {file} after line {last_line} (dry run, nothing written; so far: would insert {}, \
             already present {}, collided {}, rejected {})",
            counts.inserted, counts.already_present, counts.collided, counts.rejected
        );
    }
    format!(
        "read {file} after line {last_line}: the lines of the batch in progress were not stored; \
         the batches before it are ({} inserted, {} already present, {} collided, {} rejected). \
         Running the same command again on a whole file resumes: what is stored counts as \
         already present",
        counts.inserted, counts.already_present, counts.collided, counts.rejected
    )
}

/// Watches for SIGINT (Ctrl-C) and SIGTERM, from now (listened for before this returns,
/// so a signal at once is not the default action's silent death): the first stores the
/// status the command then exits with in `stop` (130 for SIGINT, 143 for SIGTERM, as a
/// shell reports them), and the run stops at the next line it reads; the batches
/// committed stay and the counts are printed, where the process died printing nothing. A
/// second signal exits at once (a read waiting on a pipe that never ends).
fn watch_for_stop(
    stop: std::sync::Arc<std::sync::atomic::AtomicU8>,
    progress: ProgressBar,
) -> tokio::task::JoinHandle<()> {
    let signals = crate::signals::Stop::listen();
    tokio::spawn(async move {
        let Ok(mut signals) = signals else {
            errln!("warning: no signal handler; Ctrl-C stops the backfill without its counts");
            return;
        };
        let status = signals.next().await;
        stop.store(status, std::sync::atomic::Ordering::Release);
        progress.suspend(|| {
            errln!("stopping at the next line read; what is committed stays (a second signal exits at once)");
        });
        signals.next().await;
        std::process::exit(i32::from(status));
    })
}

/// A backfill stopped by SIGINT or SIGTERM after reading line `after_line`: the batches
/// before were committed (a dry run's rolled back), the `not_written` lines of the batch
/// in progress were not. The command exits with `status`: 130 (SIGINT) or 143 (SIGTERM).
#[derive(Debug)]
pub(crate) struct Interrupted {
    after_line: u64,
    not_written: usize,
    dry_run: bool,
    status: u8,
}

impl Interrupted {
    /// The exit status: 128 and the signal's number, as a shell reports it.
    pub(crate) fn status(&self) -> u8 {
        self.status
    }
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.dry_run {
            return write!(
                f,
                "interrupted after line {} (dry run: nothing was written; the counts above are of the lines before the batch in progress)",
                self.after_line
            );
        }
        write!(
            f,
            "interrupted after line {}: the {} identified line(s) of the batch in progress were not written, the batches before were (counts above). Running the same command again resumes: what is stored counts as already present",
            self.after_line, self.not_written
        )
    }
}

impl std::error::Error for Interrupted {}

/// A backfill that stored what it could but rejected lines (named on stderr): the
/// command exits with status 3 (2 is a usage error's), so a script does not take a wrong
/// file for a success.
#[derive(Debug)]
pub(crate) struct LinesRejected(pub(crate) u64);

impl std::fmt::Display for LinesRejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} line(s) rejected (the first 20 are named above); every other line was stored or matched",
            self.0
        )
    }
}

impl std::error::Error for LinesRejected {}

/// A progress bar over the file's bytes on a terminal; hidden otherwise (a pipe, a
/// test, `--json` read by a program).
fn progress_bar(file_bytes: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(file_bytes);
    if let Ok(style) =
        ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
    {
        bar.set_style(style);
    }
    bar
}

/// Refuses an event further ahead than the live path's skew: no partition holds its day
/// yet, and a row stored elsewhere now would not meet a later live duplicate. An old
/// event is the point of a backfill and always taken.
fn not_ahead(horizon: &DedupeHorizon, kind: &Kind, item: Item) -> Result<Item, String> {
    let at = match (&item, kind) {
        (Item::Event(event), Kind::Contract(contract)) => {
            partition_time(contract, event.identified.occurred_at_us)
        }
        (Item::Run(row), _) => {
            partition_time(run_event_contract(), row.event.identified.occurred_at_us)
        }
        (Item::Event(_), Kind::RunEvent) => None,
    };
    match horizon.admits(at, traqlyte_store::now_us()) {
        Err(OutsideHorizon::TooFarAhead) => {
            Err("its occurrence time is more than a day in the future".to_string())
        }
        _ => Ok(item),
    }
}

async fn kind(store: &Store, tenant: &TenantId, name: &str, version: Option<u32>) -> Result<Kind> {
    if name == RUN_EVENT_CONTRACT {
        if version.is_some_and(|v| v != 1) {
            bail!("{RUN_EVENT_CONTRACT} has one version, 1");
        }
        return Ok(Kind::RunEvent);
    }
    if name == traqlyte_identity::segment::MESSAGE_CONTRACT {
        bail!("Segment messages are not backfilled: their ids hold the source they were sent to; send them to /v1/batch with the source's write key");
    }
    let parsed = ContractName::parse(name).map_err(anyhow::Error::msg)?;
    let contract = store
        .contract(tenant, &parsed, version)
        .await?
        .with_context(|| match version {
            Some(v) => format!("the tenant has no contract {name:?} version {v}"),
            None => format!("the tenant has no contract {name:?}; register it first"),
        })?;
    Ok(Kind::Contract(Box::new(contract)))
}

/// Identifies one line exactly as the live routes do; the reason when it would refuse it.
fn identify(kind: &Kind, line: &[u8]) -> Result<Item, String> {
    // RunEvents take integers beyond ±2^53 in their facets, and read a `NaN` or an
    // `Infinity` as `null`, as `POST /api/v1/lineage` does.
    let value = match kind {
        Kind::RunEvent => strict_json::parse_wide_integers_reading_non_finite_in(
            line,
            RUN_EVENT_DEPTH_MAX,
            &strict_json::Meter::unbounded(),
        ),
        Kind::Contract(_) => strict_json::parse(line, JSON_DEPTH_MAX),
    }
    .map_err(|err| err.to_string())?;
    let payload = serde_json::to_string(&value).map_err(|err| err.to_string())?;
    match kind {
        Kind::Contract(contract) => {
            if !value.is_object() {
                return Err("an event must be a JSON object".to_string());
            }
            let identified = contract.identify_owned(value).map_err(|e| e.to_string())?;
            Ok(Item::Event(NewEvent {
                identified,
                payload,
            }))
        }
        Kind::RunEvent => {
            let projected = identify_run_event_owned(value).map_err(|e| e.to_string())?;
            Ok(Item::Run(RunEventRow {
                event: NewEvent {
                    identified: projected.identified,
                    payload,
                },
                identity: projected.identity,
            }))
        }
    }
}

/// Opens a backfill's transaction (rows of any age), counted apart from live ingestion
/// in the per-source trend (`GET /ops/duplicates`).
async fn begin(store: &Store) -> Result<StoreTx, StoreError> {
    let mut tx = store.begin_backfill().await?;
    tx.set_ingest_source(traqlyte_store::IngestSource::backfill());
    Ok(tx)
}

/// A batch's identified lines, of the one kind the file holds.
enum Rows {
    Events(Vec<NewEvent>),
    Runs(Vec<RunEventRow>),
}

impl Rows {
    fn is_empty(&self) -> bool {
        match self {
            Rows::Events(events) => events.is_empty(),
            Rows::Runs(runs) => runs.is_empty(),
        }
    }
}

/// Empties `batch` into the rows of its kind.
fn take_rows(kind: &Kind, batch: &mut Vec<Item>) -> Rows {
    let items = batch.drain(..);
    match kind {
        Kind::Contract(_) => Rows::Events(
            items
                .filter_map(|item| match item {
                    Item::Event(event) => Some(event),
                    Item::Run(_) => None,
                })
                .collect(),
        ),
        Kind::RunEvent => Rows::Runs(
            items
                .filter_map(|item| match item {
                    Item::Run(row) => Some(row),
                    Item::Event(_) => None,
                })
                .collect(),
        ),
    }
}

/// Writes `rows` in `tx` through the live path's dedupe.
async fn insert_rows(
    tx: &mut StoreTx,
    tenant: &TenantId,
    kind: &Kind,
    rows: &Rows,
) -> Result<Vec<EventOutcome>, StoreError> {
    match (kind, rows) {
        (_, rows) if rows.is_empty() => Ok(Vec::new()),
        (Kind::Contract(contract), Rows::Events(events)) => {
            tx.insert_events(tenant, contract, events).await
        }
        (_, Rows::Runs(runs)) => tx.insert_run_events(tenant, runs).await,
        (Kind::RunEvent, Rows::Events(_)) => Err(StoreError::Corrupt(
            "contract events in a backfill of run events".into(),
        )),
    }
}

fn count(outcomes: Vec<EventOutcome>, counts: &mut Counts) {
    for outcome in outcomes {
        match outcome {
            EventOutcome::Inserted => counts.inserted += 1,
            EventOutcome::Duplicate => counts.already_present += 1,
            EventOutcome::Collision { .. } => counts.collided += 1,
        }
    }
}

/// Writes `rows` in the dry run's one transaction (opened by its first batch), which is
/// rolled back at the end.
async fn dry_batch(
    store: &Store,
    dry: &mut Option<StoreTx>,
    tenant: &TenantId,
    kind: &Kind,
    rows: &Rows,
    counts: &mut Counts,
) -> Result<()> {
    let tx = match dry {
        Some(tx) => tx,
        None => {
            let mut tx = begin(store).await?;
            tx.without_collision_log();
            dry.insert(tx)
        }
    };
    count(insert_rows(tx, tenant, kind, rows).await?, counts);
    Ok(())
}

/// How many times a real run writes one batch before it gives up, when the store is
/// busy (a deadlock, a lock held past its timeout) or out of reach.
const WRITE_ATTEMPTS_MAX: u32 = 8;

/// Writes `rows` in a transaction of their own, committed before it returns: each batch
/// is durable on its own, so an interrupted backfill is resumed by running it again
/// (what is stored counts as already present). A deadlock, a lock or connection waited
/// out, or a database out of reach is met by writing the batch again after a pause
/// (doubling from 200 ms, at most 5 s, [`WRITE_ATTEMPTS_MAX`] times): a long backfill
/// stopped on one deadlock. A batch whose commit's answer was lost and is written again
/// counts its rows as already present.
async fn write_batch(
    store: &Store,
    tenant: &TenantId,
    kind: &Kind,
    rows: &Rows,
    counts: &mut Counts,
    last_line: u64,
) -> Result<()> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let written = async {
            let mut tx = begin(store).await?;
            let outcomes = insert_rows(&mut tx, tenant, kind, rows).await?;
            tx.commit().await?;
            Ok::<_, StoreError>(outcomes)
        }
        .await;
        match written {
            Ok(outcomes) => {
                count(outcomes, counts);
                return Ok(());
            }
            Err(err)
                if attempt < WRITE_ATTEMPTS_MAX && (err.is_busy() || err.database_unavailable()) =>
            {
                let wait = std::time::Duration::from_millis((100u64 << attempt).min(5_000));
                errln!(
                    "the batch ending at line {last_line} was not stored ({err}); writing it again in {} ms",
                    wait.as_millis()
                );
                tokio::time::sleep(wait).await;
            }
            Err(err) => {
                return Err(anyhow::Error::new(err).context(format!(
                    "the batch ending at line {last_line} was not stored; the batches before it are \
                     ({} inserted, {} already present, {} collided). Running the same command again \
                     resumes: what is stored counts as already present",
                    counts.inserted, counts.already_present, counts.collided
                )))
            }
        }
    }
}

fn reject(progress: &ProgressBar, counts: &mut Counts, line: u64, reason: &str) {
    counts.rejected += 1;
    if counts.rejected <= REJECTIONS_SHOWN_MAX as u64 {
        // Above the progress bar on a terminal, not written over it.
        let reason = traqlyte_tools::printable(reason);
        progress.suspend(|| errln!("line {line}: rejected: {reason}"));
    }
}

/// `reader`, inflated when it holds gzip (its first two bytes, `1f 8b`; several members
/// one after the other, as `cat a.gz b.gz` makes, are read as one stream). Read as it
/// goes: a file of many gigabytes takes no more memory than a plain one.
fn inflated<R: BufRead + 'static>(mut reader: R) -> std::io::Result<Box<dyn BufRead>> {
    const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
    // Other compressions, refused at once by name: read as text, each of their lines was
    // rejected as invalid UTF-8, thousands of rejections for one archive.
    const OTHER_MAGIC: [(&[u8], &str, &str); 3] = [
        (&[0x28, 0xb5, 0x2f, 0xfd], "zstd", "zstd -dc"),
        (b"BZh", "bzip2", "bzip2 -dc"),
        (&[0xfd, b'7', b'z', b'X', b'Z', 0x00], "xz", "xz -dc"),
    ];
    const HEAD_BYTES: usize = 6;
    // The first bytes, however the input arrives: a pipe's first read may hold one (a
    // gzip stream was then read as text, every line rejected).
    let mut head = Vec::with_capacity(HEAD_BYTES);
    while head.len() < HEAD_BYTES {
        let buffered = reader.fill_buf()?;
        if buffered.is_empty() {
            break;
        }
        let take = buffered.len().min(HEAD_BYTES - head.len());
        head.extend_from_slice(&buffered[..take]);
        reader.consume(take);
    }
    if let Some((_, name, command)) = OTHER_MAGIC
        .iter()
        .find(|(magic, _, _)| head.starts_with(magic))
    {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("the input is {name}-compressed, which backfill does not read (gzip only): decompress it first, e.g. `{command} FILE | traqlyte backfill … --file -`"),
        ));
    }
    let gzip = head.starts_with(&GZIP_MAGIC);
    let whole = BufReader::new(std::io::Cursor::new(head).chain(reader));
    Ok(if gzip {
        Box::new(BufReader::new(flate2::bufread::MultiGzDecoder::new(whole)))
    } else {
        Box::new(whole)
    })
}

/// The bytes of `line` without its line ending (`\n` or `\r\n`).
fn content_len(line: &[u8]) -> usize {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line).len()
}

/// Discards the rest of an over-long line.
fn skip_rest_of_line(reader: &mut impl BufRead) -> Result<()> {
    let mut sink = Vec::new();
    loop {
        sink.clear();
        let read = reader
            .by_ref()
            .take(LINE_BYTES_MAX as u64)
            .read_until(b'\n', &mut sink)?;
        if read == 0 || sink.last() == Some(&b'\n') {
            return Ok(());
        }
    }
}

/// The `--json` summary: `inserted` on a real run, `would_insert` on a dry run.
#[derive(serde::Serialize)]
struct Summary {
    dry_run: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    inserted: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    would_insert: Option<u64>,
    already_present: u64,
    collided: u64,
    rejected: u64,
    /// The last line read by a run SIGINT or SIGTERM stopped (absent on a whole run).
    #[serde(skip_serializing_if = "Option::is_none")]
    interrupted_after_line: Option<u64>,
}

fn report(args: &BackfillArgs, counts: &Counts, interrupted: Option<&Interrupted>) {
    let (verb, mode) = match (args.dry_run, interrupted) {
        (true, None) => ("would insert", "dry run, nothing written"),
        (true, Some(_)) => ("would insert", "dry run interrupted, nothing written"),
        (false, None) => ("inserted", "written"),
        (false, Some(_)) => ("inserted", "interrupted: the batches committed so far"),
    };
    if args.json {
        let summary = Summary {
            dry_run: args.dry_run,
            inserted: (!args.dry_run).then_some(counts.inserted),
            would_insert: args.dry_run.then_some(counts.inserted),
            already_present: counts.already_present,
            collided: counts.collided,
            rejected: counts.rejected,
            interrupted_after_line: interrupted.map(|i| i.after_line),
        };
        match serde_json::to_string(&summary) {
            Ok(text) => outln!("{text}"),
            Err(err) => errln!("summary not serialisable: {err}"),
        }
    } else {
        outln!(
            "{verb} {}, already present {}, collided {}, rejected {} ({mode})",
            counts.inserted,
            counts.already_present,
            counts.collided,
            counts.rejected
        );
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Read, Write};

    /// A gzip stream is told by its first two bytes however the input delivers them (a
    /// pipe's first read may hold one); plain text of one byte, or none, stays text.
    #[test]
    fn gzip_is_told_by_its_first_two_bytes_even_one_at_a_time() {
        let text = b"{\"a\":1}\n{\"a\":2}\n".to_vec();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&text).expect("gzip");
        let gz = gz.finish().expect("gzip");
        for (input, capacity) in [
            (gz.clone(), 1),
            (gz, 8192),
            (text.clone(), 1),
            (b"x".to_vec(), 1),
            (Vec::new(), 1),
        ] {
            let expected = if input.starts_with(&[0x1f, 0x8b]) {
                text.clone()
            } else {
                input.clone()
            };
            let reader = BufReader::with_capacity(capacity, std::io::Cursor::new(input));
            let mut out = Vec::new();
            super::inflated(reader)
                .expect("inflated")
                .read_to_end(&mut out)
                .expect("read");
            assert_eq!(out, expected, "capacity {capacity}");
        }
        let lines: Vec<String> =
            super::inflated(BufReader::with_capacity(1, std::io::Cursor::new(text)))
                .expect("inflated")
                .lines()
                .map(|l| l.expect("line"))
                .collect();
        assert_eq!(lines, ["{\"a\":1}", "{\"a\":2}"]);
        // zstd, bzip2 and xz are refused by name, not read as lines of text.
        for (input, name) in [
            (vec![0x28, 0xb5, 0x2f, 0xfd, 0, 0], "zstd"),
            (b"BZh91AY".to_vec(), "bzip2"),
            (vec![0xfd, b'7', b'z', b'X', b'Z', 0x00, 0], "xz"),
        ] {
            let reader = BufReader::with_capacity(1, std::io::Cursor::new(input));
            let refused = super::inflated(reader).err().expect("refused");
            assert!(refused.to_string().contains(name), "{refused}");
        }
    }
}

//! Group commit: concurrent single requests share one durable commit.
//!
//! `POST /events/{contract}`, `POST /api/v1/lineage`, `POST /outcome` and a first-time
//! `POST /assignments` (without an idempotency key) validate their request alone, as
//! before, then hand the one row they would have written to a [`GroupCommit`] queue and
//! wait. A worker per kind collects what is queued and, while another batch of its kind
//! is being written, what arrives within `wait_us` of the first item (at most
//! `batch_max` items), writes them with the batch store paths
//! (`StoreTx::insert_events`, `insert_run_events`, `record_outcomes`, `assign_many`) in
//! one transaction, commits, and only then answers every request with its own outcome:
//! inserted, duplicate or collision, judged by the store's unique constraint exactly as
//! a transaction of its own would have judged it. At most `flushes_max` transactions of a
//! kind are open at once; a full queue makes requests wait (backpressure), never drops.
//!
//! A batch whose transaction fails is retried item by item, each in its own
//! transaction, so an error one item causes (an event whose day has no live partition,
//! a deadlock between two flushes) is answered to that item alone and the others are
//! stored as without group commit. An item whose own retry fails gets that store error
//! (5xx): an at-least-once client resends it, and the store's key absorbs the resend.
//!
//! A request's key and, for events, the contract version it resolved as the latest may
//! come from the server's memory (`lookups.rs`) instead of a read of its own: the batch's
//! transaction checks them first, in one statement per batch (which keys still work) and
//! per contract (its latest version). An item whose key was revoked meanwhile is not
//! written and is answered 401; an event whose contract got a newer version is not written
//! and is answered `EventAnswer::StaleContract`, and its handler identifies it again.
//! An assignment proposed under a campaign version from memory is likewise written only
//! while that version is the campaign's latest (one statement per batch), else answered
//! `AssignmentAnswer::StaleCampaign` and its handler reads the store.
//!
//! Nothing here decides uniqueness: two requests for the same key in one batch are
//! judged by the store in input order (the first inserted, the second a duplicate or a
//! collision), as two concurrent transactions would be. There is no in-process cache of
//! recent ids: a cache could answer only what the store would, and the store's answer for
//! a retry (the stored row, the tally) is needed anyway. The one memory of rows is
//! `HeldRows`: rows another transaction held past a lock wait, whose items are written
//! apart from their batch, never answered from it.

use std::collections::HashSet;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, Semaphore};
use traqlyte_identity::{Contract, ContractName, EventId};
use traqlyte_store::{
    now_us, ApiKey, Assignment, CampaignId, EventOutcome, LateEvents, NewEvent, NewOutcome,
    OutcomeResult, RunEventRow, Store, StoreError, StoreTx, TenantId,
};

use crate::lookups::Lookups;
use crate::ApiError;

/// The settings of group commit (`serve --group-commit …`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupCommitConfig {
    /// Whether single requests are coalesced (`--group-commit on|off`).
    pub enabled: bool,
    /// How long a batch waits for more requests after its first, in microseconds, while
    /// another batch of its kind is being written (so never when `flushes_max` is 1).
    pub wait_us: u64,
    /// Most requests one batch (one transaction) holds.
    pub batch_max: usize,
    /// Most batch transactions of one kind open at once.
    pub flushes_max: usize,
    /// How long one batch's store work may take before it is abandoned and its flush
    /// slot freed: a minute, far past what a batch takes on a database that answers (a
    /// batch waiting on a lock, a manual session's or DDL's, is given up too). The
    /// server raises it to its request timeout and a second when that is longer, so no
    /// request still waits for a batch given up.
    pub deadline: Duration,
}

impl GroupCommitConfig {
    /// Group commit off: every single request commits its own transaction.
    pub fn disabled() -> Self {
        GroupCommitConfig {
            enabled: false,
            ..GroupCommitConfig::default()
        }
    }
}

impl Default for GroupCommitConfig {
    fn default() -> Self {
        GroupCommitConfig {
            enabled: true,
            wait_us: 500,
            batch_max: 256,
            flushes_max: 4,
            deadline: Duration::from_secs(60),
        }
    }
}

/// One queue per kind of single request; `disabled` when group commit is off, and then
/// each handler commits its own transaction as before.
#[derive(Clone)]
pub struct GroupCommit {
    queues: Option<Arc<Queues>>,
}

struct Queues {
    lookups: Arc<Lookups>,
    events: Queue<EventsFlush>,
    lineage: Queue<LineageFlush>,
    outcomes: Queue<OutcomesFlush>,
    assignments: Queue<AssignmentsFlush>,
}

impl GroupCommit {
    /// Starts the workers (a tokio runtime must be running), or none when disabled.
    pub fn start(store: &Store, config: GroupCommitConfig, late_events: LateEvents) -> Self {
        if !config.enabled {
            return GroupCommit::disabled();
        }
        let lookups = Arc::new(Lookups::default());
        let queues = Queues {
            events: Queue::start(store, config, EventsFlush { late_events }, lookups.clone()),
            lineage: Queue::start(store, config, LineageFlush { late_events }, lookups.clone()),
            outcomes: Queue::start(store, config, OutcomesFlush, lookups.clone()),
            assignments: Queue::start(store, config, AssignmentsFlush, lookups.clone()),
            lookups,
        };
        GroupCommit {
            queues: Some(Arc::new(queues)),
        }
    }

    /// Group commit off: [`GroupCommit::enabled`] is false.
    pub fn disabled() -> Self {
        GroupCommit { queues: None }
    }

    /// Whether single requests go through the queues.
    pub fn enabled(&self) -> bool {
        self.queues.is_some()
    }

    /// The server's memory of keys and contracts, used only with group commit on.
    pub(crate) fn lookups(&self) -> Option<&Lookups> {
        self.queues.as_deref().map(|q| &*q.lookups)
    }

    /// Stores one event of `contract` in the next batch; answers after its commit.
    /// `None` when group commit is off (the caller writes it itself). `key` is checked in
    /// the batch's transaction when set; `latest` says the contract was resolved as the
    /// tenant's latest version, which the transaction checks too.
    pub(crate) async fn event(
        &self,
        tenant: &TenantId,
        key: Option<&ApiKey>,
        contract: &Arc<Contract>,
        latest: bool,
        event: &NewEvent,
    ) -> Option<Result<EventAnswer, ApiError>> {
        let queues = self.queues.as_ref()?;
        let item = (tenant.clone(), (contract.clone(), latest, event.clone()));
        Some(queues.events.submit(key, item).await)
    }

    /// Stores one OpenLineage run event in the next batch; `None` when off.
    pub(crate) async fn run_event(
        &self,
        tenant: &TenantId,
        key: Option<&ApiKey>,
        row: &RunEventRow,
    ) -> Option<Result<EventOutcome, ApiError>> {
        let queues = self.queues.as_ref()?;
        Some(
            queues
                .lineage
                .submit(key, (tenant.clone(), row.clone()))
                .await,
        )
    }

    /// Records one outcome in the next batch; `None` when off.
    pub(crate) async fn outcome(
        &self,
        tenant: &TenantId,
        key: Option<&ApiKey>,
        outcome: &NewOutcome,
    ) -> Option<Result<OutcomeResult, ApiError>> {
        let queues = self.queues.as_ref()?;
        let item = (tenant.clone(), outcome.clone());
        Some(queues.outcomes.submit(key, item).await)
    }

    /// Writes one unit's first assignment in the next batch (the stored one if the unit
    /// has one already, whichever request or process wrote it); `None` when off.
    /// `remembered` says the proposal's campaign version came from the server's memory as
    /// the latest, which the batch's transaction checks.
    pub(crate) async fn assignment(
        &self,
        tenant: &TenantId,
        key: Option<&ApiKey>,
        proposed: &Assignment,
        remembered: bool,
    ) -> Option<Result<AssignmentAnswer, ApiError>> {
        let queues = self.queues.as_ref()?;
        let item = (tenant.clone(), (proposed.clone(), remembered));
        Some(queues.assignments.submit(key, item).await)
    }
}

/// What the batch did with one event.
#[derive(Debug, Clone)]
pub(crate) enum EventAnswer {
    /// Stored, or judged a duplicate or a collision, by the store.
    Stored(EventOutcome),
    /// Not written: the contract has a newer version than the one the event was
    /// identified under as "the latest".
    StaleContract,
}

/// What the batch did with one assignment.
#[derive(Debug, Clone)]
pub(crate) enum AssignmentAnswer {
    /// The unit's stored assignment (this batch's proposal or an earlier one).
    Stored(Assignment),
    /// Not written: the campaign has a newer version than the remembered one the
    /// proposal was made under.
    StaleCampaign,
}

/// How one kind of item is written: all of `items` in one transaction, one answer per
/// item in input order.
trait Flush: Send + Sync + 'static {
    type Item: Clone + Send + Sync + 'static;
    type Answer: Send + 'static;

    /// Opens the transaction the items are written in.
    fn begin(&self, store: &Store) -> impl Future<Output = Result<StoreTx, StoreError>> + Send;

    /// The contracts whose latest version the batch's transaction must re-check before
    /// [`Flush::write`] (those some item resolved "the latest" of from memory), each once.
    fn latest_to_check<'a>(
        &self,
        _items: impl Iterator<Item = &'a Self::Item>,
    ) -> Vec<(TenantId, ContractName)>
    where
        Self::Item: 'a,
    {
        Vec::new()
    }

    /// Stores what it can of `items` before the batch's transaction, each committed
    /// durably: `Some(answer)` for an item stored so, `None` (or no entry) for one left to
    /// [`Flush::write`]. It must store only what the transaction would have stored with
    /// the same answer. The default stores nothing.
    fn write_at_once<'a>(
        &'a self,
        _store: &'a Store,
        _items: &'a [(Option<ApiKey>, Self::Item)],
    ) -> impl Future<Output = Result<Vec<Option<Self::Answer>>, StoreError>> + Send + 'a {
        std::future::ready(Ok(Vec::new()))
    }

    /// The row an item writes, named across batches ([`HeldRows`]); `None` for a kind
    /// whose rows are not remembered. The default names none.
    fn row_key(&self, _item: &Self::Item) -> Option<String> {
        None
    }

    /// Counts in the metrics an item stored with `answer` whose request no longer hears
    /// it (it timed out, or its client left, while the item was queued or written): its
    /// handler, which counts what it is answered, never will. The default counts nothing.
    fn count_unheard(&self, _item: &Self::Item, _answer: &Self::Answer) {}

    /// Writes `items` in `tx` (not committed here); `latest` holds what the transaction
    /// read for [`Flush::latest_to_check`].
    fn write<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        items: &'a [Self::Item],
        latest: &'a LatestVersions,
    ) -> impl Future<Output = Result<Vec<Self::Answer>, StoreError>> + Send + 'a;
}

/// Each re-checked contract's latest registered version, read in the batch's transaction.
type LatestVersions = Vec<((TenantId, ContractName), Option<u32>)>;

type Reply<F> = oneshot::Sender<Result<<F as Flush>::Answer, ApiError>>;

/// One request in a queue: the key its batch re-checks (if any), its item, its reply.
type Pending<F> = (Option<ApiKey>, <F as Flush>::Item, Reply<F>);

/// An item with the key its batch re-checks, as the writes take it.
type Keyed<F> = (Option<ApiKey>, <F as Flush>::Item);

struct Queue<F: Flush> {
    sender: mpsc::Sender<Pending<F>>,
}

impl<F: Flush> Queue<F> {
    fn start(store: &Store, config: GroupCommitConfig, flush: F, lookups: Arc<Lookups>) -> Self {
        let batch_max = config.batch_max.max(1);
        let flushes_max = config.flushes_max.max(1);
        // Room for every batch that may be open plus the one being collected; beyond, a
        // request waits for room.
        let (sender, receiver) = mpsc::channel(batch_max * (flushes_max + 1));
        let worker = Worker {
            store: store.clone(),
            flush: Arc::new(flush),
            wait: Duration::from_micros(config.wait_us),
            batch_max,
            flushes: Arc::new(Semaphore::new(flushes_max)),
            flushes_max,
            deadline: config.deadline,
            lookups,
            held: Arc::new(HeldRows::default()),
        };
        tokio::spawn(worker.run(receiver));
        Queue { sender }
    }

    async fn submit(&self, key: Option<&ApiKey>, item: F::Item) -> Result<F::Answer, ApiError> {
        let (reply, answer) = oneshot::channel();
        self.sender
            .send((key.cloned(), item, reply))
            .await
            .map_err(|_| ApiError::internal("group commit worker stopped"))?;
        answer
            .await
            .map_err(|_| ApiError::internal("group commit batch ended without an answer"))?
    }
}

struct Worker<F: Flush> {
    store: Store,
    flush: Arc<F>,
    wait: Duration,
    batch_max: usize,
    flushes: Arc<Semaphore>,
    flushes_max: usize,
    deadline: Duration,
    lookups: Arc<Lookups>,
    held: Arc<HeldRows>,
}

impl<F: Flush> Worker<F> {
    /// Collects batches until every sender is gone (the server's state dropped).
    async fn run(self, mut receiver: mpsc::Receiver<Pending<F>>) {
        loop {
            // A batch starts collecting only when it can be written: while every flush
            // slot is busy, requests gather in the channel and form the next batch.
            let Ok(permit) = self.flushes.clone().acquire_owned().await else {
                return;
            };
            let Some(first) = receiver.recv().await else {
                return;
            };
            let mut batch = vec![first];
            let waits = batch_waits(
                self.flushes.available_permits(),
                self.flushes_max,
                self.wait,
            );
            let mut timer = waits.then(|| sleep(self.wait));
            while batch.len() < self.batch_max {
                match receiver.try_recv() {
                    Ok(pending) => batch.push(pending),
                    Err(mpsc::error::TryRecvError::Disconnected) => break,
                    Err(mpsc::error::TryRecvError::Empty) => {
                        let Some(timer) = timer.as_mut() else { break };
                        tokio::select! {
                            pending = receiver.recv() => match pending {
                                Some(pending) => batch.push(pending),
                                None => break,
                            },
                            _ = timer => break,
                        }
                    }
                }
            }
            let (store, flush, lookups, held) = (
                self.store.clone(),
                self.flush.clone(),
                self.lookups.clone(),
                self.held.clone(),
            );
            let deadline = self.deadline;
            tokio::spawn(async move {
                // A batch waiting on a database that vanished without a reset (a host
                // powered off, a failover to another address, a partition) would wait
                // for ever, and once every slot was held so did every single request
                // of its kind: a review saw single events `408` for minutes after the
                // database was back, batches served. Past its deadline it is dropped
                // (its connection closed as the pool takes it back) and its slot freed;
                // its requests were answered by their timeout, and a resend meets
                // whatever it stored.
                let items = batch.len();
                let written = write_batch(&store, &*flush, &lookups, &held, batch);
                if tokio::time::timeout(deadline, written).await.is_err() {
                    tracing::warn!(
                        items,
                        deadline_ms = u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX),
                        "group commit batch got no answer from the database within its deadline: abandoned, its outcome unknown"
                    );
                }
                drop(permit);
            });
        }
    }
}

/// Whether a batch just started waits for more requests, given the flush slots left free
/// besides its own: only while another batch of its kind is being written, whose commit
/// is about to send its clients' next requests. With none, the batch takes what is queued
/// and goes, so a lone request is not held up by the wait.
fn batch_waits(free_slots: usize, flushes_max: usize, wait: Duration) -> bool {
    !wait.is_zero() && free_slots + 1 < flushes_max
}

/// Sleeps `wait` on one of the runtime's blocking threads, to within the kernel's timer
/// slack (tens of microseconds): the runtime's own timer rounds a deadline up to its next
/// millisecond, which made a 500 µs wait take 1–2 ms.
fn sleep(wait: Duration) -> tokio::task::JoinHandle<()> {
    tokio::task::spawn_blocking(move || std::thread::sleep(wait))
}

/// Writes a batch in one transaction and answers each item; on a failed transaction,
/// each item alone. Items whose row recently waited out a lock ([`HeldRows`]) are set
/// aside and written after it, each alone, waiting [`ITEM_LOCK_WAIT_MS`] at most: a
/// client retrying a row a `backfill --dry-run` holds no longer holds its batch up for
/// the whole lock timeout each time.
async fn write_batch<F: Flush>(
    store: &Store,
    flush: &F,
    lookups: &Lookups,
    held: &HeldRows,
    batch: Vec<Pending<F>>,
) {
    crate::metrics::record_batch_size("group_commit", batch.len());
    let (batch, set_aside) = held.set_aside(flush, batch);
    if !batch.is_empty() {
        write_batch_of(store, flush, lookups, held, batch).await;
    }
    if !set_aside.is_empty() {
        let (items, replies) = unzip::<F>(set_aside);
        let lock_wait = Some(ITEM_LOCK_WAIT_MS);
        write_one_by_one(store, flush, lookups, held, items, replies, lock_wait).await;
    }
}

/// A batch's items (with their keys) and their replies, in the same order.
fn unzip<F: Flush>(batch: Vec<Pending<F>>) -> (Vec<Keyed<F>>, Vec<Reply<F>>) {
    batch
        .into_iter()
        .map(|(key, item, reply)| ((key, item), reply))
        .unzip()
}

/// [`write_batch`] of the items not set aside.
async fn write_batch_of<F: Flush>(
    store: &Store,
    flush: &F,
    lookups: &Lookups,
    held: &HeldRows,
    batch: Vec<Pending<F>>,
) {
    let (mut items, mut replies) = unzip::<F>(batch);
    let early = flush.write_at_once(store, &items).await;
    #[cfg(feature = "test-hooks")]
    let early = test_lose_answer(early);
    let early = match early {
        Ok(early) => early,
        // One statement: it stored nothing. The transaction below would wait as long
        // again on the same rows.
        Err(err) if split_on(&err, items.len()) => {
            return write_split(&err, store, flush, lookups, held, items, replies).await;
        }
        // The statement may have committed before its answer was lost: judged again, the
        // batch's own rows would be answered (and counted) as duplicates of themselves.
        // A database out of reach, or a wait for a lock or a connection given up, would
        // only be met again by the transaction below, one wait after the other.
        Err(err) if futile_to_write_again(&err) => {
            note_if_alone(held, flush, &items, &err);
            return answer_all_failed(replies, err);
        }
        // Any other failure stored nothing (one statement): the transaction below meets
        // the same error and writes the items one by one.
        Err(err) => {
            tracing::debug!(error = %err, "one-statement write failed; writing the batch in a transaction");
            Vec::new()
        }
    };
    if early.iter().any(Option::is_some) {
        // Committed, not yet answered: where a kill loses answers, never rows.
        #[cfg(feature = "test-hooks")]
        test_delay().await;
        let (mut rest, mut waiting) = (Vec::new(), Vec::new());
        let mut early = early.into_iter();
        for (item, reply) in items.into_iter().zip(replies) {
            match early.next().flatten() {
                Some(answer) => answer_item(flush, &item.1, reply, Ok(answer)),
                None => {
                    rest.push(item);
                    waiting.push(reply);
                }
            }
        }
        if rest.is_empty() {
            return;
        }
        (items, replies) = (rest, waiting);
    }
    match write_in_one_tx(store, flush, &items).await {
        Ok(answers) => {
            for ((reply, answer), (key, item)) in replies.into_iter().zip(answers).zip(&items) {
                // A receiver gone (the request timed out) changes nothing: it is stored.
                answer_item(flush, item, reply, answered(lookups, key.as_ref(), answer));
            }
        }
        // One item has no other to spare; a commit whose answer was lost may have stored
        // the batch, which the items written again would each meet as a duplicate; and
        // a database out of reach or a wait given up would be met by each item alone,
        // one wait after the other, past its request's timeout. Every request is
        // answered the error (503, retry) at once.
        Err(err) if split_on(&err, items.len()) => {
            write_split(&err, store, flush, lookups, held, items, replies).await;
        }
        Err(err) if items.len() == 1 || futile_to_write_again(&err) => {
            note_if_alone(held, flush, &items, &err);
            answer_all_failed(replies, err)
        }
        Err(err) => {
            tracing::warn!(error = %err, items = items.len(), "group commit batch failed; writing its items one by one");
            write_one_by_one(store, flush, lookups, held, items, replies, None).await;
        }
    }
}

/// How long an item written alone after its batch waited out a lock waits for one
/// ([`split_on`]): the batch already waited the whole lock timeout, so a row still held
/// is held for long (a `backfill --dry-run`'s, a manual session's).
const ITEM_LOCK_WAIT_MS: u32 = 200;

/// How many items written alone may wait out a lock before the rest of the batch is
/// answered with it at once: a table's lock (DDL, `LOCK TABLE`) holds every item, and
/// they would each wait in turn.
const ITEM_LOCK_WAITS_MAX: usize = 2;

/// How long a row that waited out a lock is remembered ([`HeldRows`]).
const HELD_FOR: Duration = Duration::from_secs(60);

/// Most rows remembered at once ([`HeldRows`]); past it, none more until some expire.
const HELD_ROWS_MAX: usize = 10_000;

/// The rows (by [`Flush::row_key`]) whose write alone waited out a lock within
/// [`HELD_FOR`]: another transaction holds them for long (a `backfill --dry-run` holds
/// the rows it would insert for its whole run). A later item writing one is set aside
/// from its batch ([`write_batch`]), which would otherwise wait the whole lock timeout
/// on it again before splitting. Memory only decides how an item is written, never its
/// answer: a row no longer held is stored as in any batch.
#[derive(Default)]
struct HeldRows {
    rows: std::sync::Mutex<std::collections::HashMap<String, std::time::Instant>>,
}

impl HeldRows {
    fn rows(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, std::time::Instant>> {
        // A panic while the map was held leaves it whole (single inserts and removes).
        self.rows.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remembers `item`'s row as held.
    fn note<F: Flush>(&self, flush: &F, item: &F::Item) {
        let Some(key) = flush.row_key(item) else {
            return;
        };
        let mut rows = self.rows();
        if rows.len() >= HELD_ROWS_MAX {
            rows.retain(|_, at| at.elapsed() < HELD_FOR);
            if rows.len() >= HELD_ROWS_MAX {
                return;
            }
        }
        rows.insert(key, std::time::Instant::now());
    }

    /// Forgets `item`'s row: it was written.
    fn forget<F: Flush>(&self, flush: &F, item: &F::Item) {
        let mut rows = self.rows();
        if rows.is_empty() {
            return;
        }
        if let Some(key) = flush.row_key(item) {
            rows.remove(&key);
        }
    }

    /// Splits `batch` into the items to write together and those whose row was held
    /// within [`HELD_FOR`]; rows remembered longer are forgotten first, so a batch names
    /// its items' rows only while some row is remembered.
    fn set_aside<F: Flush>(
        &self,
        flush: &F,
        batch: Vec<Pending<F>>,
    ) -> (Vec<Pending<F>>, Vec<Pending<F>>) {
        let mut rows = self.rows();
        if rows.is_empty() {
            return (batch, Vec::new());
        }
        rows.retain(|_, at| at.elapsed() < HELD_FOR);
        if rows.is_empty() {
            return (batch, Vec::new());
        }
        batch.into_iter().partition(|(_, item, _)| {
            flush
                .row_key(item)
                .is_none_or(|key| !rows.contains_key(&key))
        })
    }
}

/// Remembers the row of a batch of one item that waited out a lock (a batch of more is
/// split, and its items written alone say which row was held).
fn note_if_alone<F: Flush>(
    held: &HeldRows,
    flush: &F,
    items: &[(Option<ApiKey>, F::Item)],
    err: &StoreError,
) {
    if let [(_, item)] = items {
        if err.lock_waited_out() {
            held.note(flush, item);
        }
    }
}

/// Whether a batch of `items` that failed with `err` is written again item by item, a
/// wait given up though it is ([`futile_to_write_again`]): a lock waited out is most
/// likely one item's, its row held by another transaction (a live retry of an event a
/// `backfill --dry-run` holds), and the batch's other items, any tenant's, are stored
/// rather than answered `503` with it (a read-back: one held retry made the whole batch
/// `503`).
fn split_on(err: &StoreError, items: usize) -> bool {
    items > 1 && err.lock_waited_out()
}

/// Writes a batch that waited out a lock ([`split_on`]) item by item, each item waiting
/// [`ITEM_LOCK_WAIT_MS`] at most.
async fn write_split<F: Flush>(
    err: &StoreError,
    store: &Store,
    flush: &F,
    lookups: &Lookups,
    held: &HeldRows,
    items: Vec<(Option<ApiKey>, F::Item)>,
    replies: Vec<Reply<F>>,
) {
    tracing::warn!(error = %err, items = items.len(), "group commit batch waited out a lock; writing its items one by one");
    let lock_wait = Some(ITEM_LOCK_WAIT_MS);
    write_one_by_one(store, flush, lookups, held, items, replies, lock_wait).await;
}

/// Writes each item in a transaction of its own and answers it; with `lock_wait`, each
/// waits that long at most for a lock, its row is remembered in `held` when it waited one
/// out (forgotten once written), and once [`ITEM_LOCK_WAITS_MAX`] items have waited one
/// out the rest are answered that error. An error the rest would meet too (the database
/// out of reach) answers every item left at once.
async fn write_one_by_one<F: Flush>(
    store: &Store,
    flush: &F,
    lookups: &Lookups,
    held: &HeldRows,
    items: Vec<(Option<ApiKey>, F::Item)>,
    replies: Vec<Reply<F>>,
    lock_wait: Option<u32>,
) {
    let mut replies = replies.into_iter();
    let mut lock_waits = 0;
    for item in &items {
        let Some(reply) = replies.next() else { break };
        let written = write_in_one_tx_within(store, flush, std::slice::from_ref(item), lock_wait);
        let answer = match written.await {
            Ok(mut answers) => {
                if lock_wait.is_some() {
                    held.forget(flush, &item.1);
                }
                answers
                    .pop()
                    .ok_or_else(|| ApiError::internal("store returned no outcome"))
                    .and_then(|a| answered(lookups, item.0.as_ref(), a))
            }
            Err(err) if lock_wait.is_some() && err.lock_waited_out() => {
                held.note(flush, &item.1);
                lock_waits += 1;
                if lock_waits == ITEM_LOCK_WAITS_MAX {
                    let rest: Vec<_> = std::iter::once(reply).chain(replies).collect();
                    return answer_all_failed(rest, err);
                }
                Err(err.into())
            }
            Err(err) if futile_to_write_again(&err) => {
                // The rest would meet it too: answered with it now.
                let rest: Vec<_> = std::iter::once(reply).chain(replies).collect();
                return answer_all_failed(rest, err);
            }
            Err(err) => Err(err.into()),
        };
        answer_item(flush, &item.1, reply, answer);
    }
}

/// Sends `answer` to the request of `item`; a stored item whose request is gone is
/// counted here ([`Flush::count_unheard`]).
fn answer_item<F: Flush>(
    flush: &F,
    item: &F::Item,
    reply: Reply<F>,
    answer: Result<F::Answer, ApiError>,
) {
    if let Err(Ok(unheard)) = reply.send(answer) {
        flush.count_unheard(item, &unheard);
    }
}

/// Whether writing the batch again (in a transaction, or item by item) could only meet
/// `err` again or count rows as duplicates of themselves: the database out of reach,
/// refusing all work (read-only, out of disk) or its answer lost
/// ([`StoreError::database_unavailable`]), a wait for a lock, a statement or a
/// connection given up ([`StoreError::waited_out`]).
fn futile_to_write_again(err: &StoreError) -> bool {
    err.database_unavailable() || err.waited_out()
}

/// Answers every reply with `err` (a 5xx): what a request written on its own would be
/// answered for the same failure (a lost connection, a store that waited out its bound).
/// A client's retry then finds its row, or not.
fn answer_all_failed<A>(replies: Vec<oneshot::Sender<Result<A, ApiError>>>, err: StoreError) {
    if err.outcome_unknown() {
        tracing::warn!(error = %err, items = replies.len(), "group commit batch lost its connection; its outcome is unknown, every request answered with the error");
    }
    let err = ApiError::from(err);
    for reply in replies {
        let _ = reply.send(Err(err.clone()));
    }
}

/// Test-only hook (feature `test-hooks`): with `TRAQLYTE_TEST_GROUP_COMMIT_LOSE_ANSWER`
/// set, the first one-statement write that stored rows is reported as a lost connection,
/// as when the database committed and the answer never arrived.
#[cfg(feature = "test-hooks")]
fn test_lose_answer<T>(
    early: Result<Vec<Option<T>>, StoreError>,
) -> Result<Vec<Option<T>>, StoreError> {
    static LOST: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    match early {
        Ok(answers)
            if answers.iter().any(Option::is_some)
                && std::env::var_os("TRAQLYTE_TEST_GROUP_COMMIT_LOSE_ANSWER").is_some()
                && !LOST.swap(true, std::sync::atomic::Ordering::SeqCst) =>
        {
            Err(StoreError::connection_lost(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "test hook: the answer of a committed statement was lost",
            )))
        }
        other => other,
    }
}

/// An item's answer: `None` is a key the batch found revoked (forgotten, and a 401).
fn answered<A>(lookups: &Lookups, key: Option<&ApiKey>, answer: Option<A>) -> Result<A, ApiError> {
    answer.ok_or_else(|| {
        if let Some(key) = key {
            lookups.forget_key(key);
        }
        crate::auth::unknown_key()
    })
}

/// Checks the items' keys, writes the items whose keys work and commits; `None` for an
/// item whose key was revoked (nothing of it written).
async fn write_in_one_tx<F: Flush>(
    store: &Store,
    flush: &F,
    items: &[(Option<ApiKey>, F::Item)],
) -> Result<Vec<Option<F::Answer>>, StoreError> {
    write_in_one_tx_within(store, flush, items, None).await
}

/// [`write_in_one_tx`], its waits for locks bounded by `lock_wait` ms when given.
async fn write_in_one_tx_within<F: Flush>(
    store: &Store,
    flush: &F,
    items: &[(Option<ApiKey>, F::Item)],
    lock_wait: Option<u32>,
) -> Result<Vec<Option<F::Answer>>, StoreError> {
    let mut tx = flush.begin(store).await?;
    if let Some(ms) = lock_wait {
        tx.bound_lock_waits(ms).await?;
    }
    #[cfg(feature = "test-hooks")]
    test_delay().await;
    let keys = keys_of(items);
    let contracts = flush.latest_to_check(items.iter().map(|(_, item)| item));
    let (live, versions) = tx.check_writes(&keys, &contracts).await?;
    let latest: LatestVersions = contracts.into_iter().zip(versions).collect();
    let mut live = live.into_iter();
    let (mut admitted, mut revoked, mut admitted_items) = (Vec::new(), Vec::new(), Vec::new());
    for (position, (key, item)) in items.iter().enumerate() {
        if key.is_none() || live.next() == Some(true) {
            admitted.push(position);
            admitted_items.push(item.clone());
        } else {
            revoked.push(position);
        }
    }
    let answers = flush.write(&mut tx, &admitted_items, &latest).await?;
    let refusals = revoked.iter().map(|_| None).collect();
    let out = scatter(
        items.len(),
        vec![
            (admitted, answers.into_iter().map(Some).collect()),
            (revoked, refusals),
        ],
    )?;
    tx.commit().await?;
    Ok(out)
}

/// Test-only hook (feature `test-hooks`): each batch sleeps
/// `TRAQLYTE_TEST_GROUP_COMMIT_DELAY_MS` inside its transaction, and between a
/// one-statement write's commit and its answers, so a test can kill the server while
/// batches are open.
#[cfg(feature = "test-hooks")]
async fn test_delay() {
    static DELAY_MS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let ms = *DELAY_MS.get_or_init(|| {
        std::env::var("TRAQLYTE_TEST_GROUP_COMMIT_DELAY_MS")
            .ok()
            .and_then(|ms| ms.parse().ok())
            .unwrap_or(0)
    });
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

/// The items' positions grouped by `key`, groups in key order (a stable lock order
/// between concurrent batches), positions in input order within a group.
fn groups<'a, T, K: Ord>(items: &'a [T], key: impl Fn(&'a T) -> K) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&i| key(&items[i]));
    let mut out: Vec<Vec<usize>> = Vec::new();
    for i in order {
        match out.last_mut() {
            Some(group) if key(&items[group[0]]) == key(&items[i]) => group.push(i),
            _ => out.push(vec![i]),
        }
    }
    out
}

/// Items of the form `(tenant, value)` grouped by tenant (see [`groups`]): each group's
/// positions, its tenant and its values, ready for one store call per tenant.
fn by_tenant<T: Clone>(items: &[(TenantId, T)]) -> Vec<(Vec<usize>, &TenantId, Vec<T>)> {
    groups(items, |(t, _)| t.as_str())
        .into_iter()
        .map(|group| {
            let tenant = &items[group[0]].0;
            let values = group.iter().map(|&i| items[i].1.clone()).collect();
            (group, tenant, values)
        })
        .collect()
}

/// Scatters each group's answers back to the positions of its items.
fn scatter<A>(len: usize, parts: Vec<(Vec<usize>, Vec<A>)>) -> Result<Vec<A>, StoreError> {
    let mut out: Vec<Option<A>> = (0..len).map(|_| None).collect();
    for (positions, answers) in parts {
        if positions.len() != answers.len() {
            return Err(StoreError::Corrupt(
                "a batch returned fewer outcomes than items".into(),
            ));
        }
        for (position, answer) in positions.into_iter().zip(answers) {
            out[position] = Some(answer);
        }
    }
    out.into_iter()
        .map(|a| a.ok_or_else(|| StoreError::Corrupt("an item of a batch has no outcome".into())))
        .collect()
}

/// The answers of a one-statement write: `answer(item)` for each item whose id it
/// inserted, `None` (left to the transaction) for the others, and for all when it did
/// not apply.
fn answered_at_once<T, K: Eq + Hash, A>(
    items: &[T],
    inserted: Option<HashSet<K>>,
    id: impl Fn(&T) -> &K,
    answer: impl Fn(&T) -> A,
) -> Vec<Option<A>> {
    let Some(inserted) = inserted else {
        return Vec::new();
    };
    items
        .iter()
        .map(|item| inserted.contains(id(item)).then(|| answer(item)))
        .collect()
}

/// The tenant of every item, when they share one.
fn one_tenant<T>(items: &[(Option<ApiKey>, (TenantId, T))]) -> Option<&TenantId> {
    let (_, (tenant, _)) = items.first()?;
    items
        .iter()
        .all(|(_, (t, _))| t == tenant)
        .then_some(tenant)
}

/// The keys a batch's items were sent with (some items have none).
fn keys_of<T>(items: &[(Option<ApiKey>, T)]) -> Vec<&ApiKey> {
    items.iter().filter_map(|(key, _)| key.as_ref()).collect()
}

/// The event id of a one-statement write's item.
fn event_id<'a>(event: &'a &NewEvent) -> &'a EventId {
    &event.identified.event_id
}

/// The ingestion transaction, as `routes::events::begin_ingest` opens it.
async fn begin_ingest(store: &Store, late_events: LateEvents) -> Result<StoreTx, StoreError> {
    match late_events {
        LateEvents::Refuse => store.begin().await,
        LateEvents::Reconcile => store.begin_backfill().await,
    }
}

struct EventsFlush {
    late_events: LateEvents,
}

impl Flush for EventsFlush {
    /// The tenant, then the contract, whether it was resolved as the latest, the event.
    type Item = (TenantId, (Arc<Contract>, bool, NewEvent));
    type Answer = EventAnswer;

    fn row_key(&self, (tenant, (contract, _, event)): &Self::Item) -> Option<String> {
        let id = &event.identified.event_id;
        Some(format!("{tenant}/{}/{}", contract.name(), id.as_str()))
    }

    fn count_unheard(&self, (tenant, (contract, _, event)): &Self::Item, answer: &EventAnswer) {
        if let EventAnswer::Stored(outcome) = answer {
            crate::metrics::record_events(
                tenant,
                contract.name().as_str(),
                &traqlyte_store::IngestSource::http(),
                std::slice::from_ref(event),
                std::slice::from_ref(outcome),
                0,
            );
        }
    }

    fn begin(&self, store: &Store) -> impl Future<Output = Result<StoreTx, StoreError>> + Send {
        begin_ingest(store, self.late_events)
    }

    fn latest_to_check<'a>(
        &self,
        items: impl Iterator<Item = &'a Self::Item>,
    ) -> Vec<(TenantId, ContractName)> {
        let mut contracts: Vec<(TenantId, ContractName)> = items
            .filter(|(_, (_, resolved_latest, _))| *resolved_latest)
            .map(|(tenant, (contract, _, _))| (tenant.clone(), contract.name().clone()))
            .collect();
        contracts.sort_by(|(t1, n1), (t2, n2)| {
            (t1.as_str(), n1.as_str()).cmp(&(t2.as_str(), n2.as_str()))
        });
        contracts.dedup();
        contracts
    }

    /// A batch of one tenant's events under one contract version, live partitions only:
    /// its new events in one statement with the batch's checks (`Store::insert_new_events`);
    /// conflicts and failed checks are left to the transaction.
    async fn write_at_once(
        &self,
        store: &Store,
        items: &[(Option<ApiKey>, Self::Item)],
    ) -> Result<Vec<Option<EventAnswer>>, StoreError> {
        let Some((_, (tenant, (contract, _, _)))) = items.first() else {
            return Ok(Vec::new());
        };
        let one_group = items.iter().all(|(_, (t, (c, _, _)))| {
            t == tenant && c.name() == contract.name() && c.version() == contract.version()
        });
        if self.late_events != LateEvents::Refuse || !one_group {
            return Ok(Vec::new());
        }
        let keys = keys_of(items);
        let check_latest = items.iter().any(|(_, (_, (_, latest, _)))| *latest);
        let events: Vec<&NewEvent> = items.iter().map(|(_, (_, (_, _, e)))| e).collect();
        let inserted = store
            .insert_new_events(tenant, contract, &keys, check_latest, &events)
            .await?;
        Ok(answered_at_once(&events, inserted, event_id, |_| {
            EventAnswer::Stored(EventOutcome::Inserted)
        }))
    }

    async fn write(
        &self,
        tx: &mut StoreTx,
        items: &[Self::Item],
        latest: &LatestVersions,
    ) -> Result<Vec<EventAnswer>, StoreError> {
        let mut parts = Vec::new();
        for group in groups(items, |(t, (c, _, _))| {
            (t.as_str(), c.name().as_str(), c.version())
        }) {
            let (tenant, (contract, _, _)) = &items[group[0]];
            let stale = if group.iter().any(|&i| items[i].1 .1) {
                // `latest_to_check` named every contract an item resolved as the latest.
                let version = latest
                    .iter()
                    .find(|((t, n), _)| t == tenant && n == contract.name())
                    .map(|(_, version)| *version)
                    .ok_or_else(|| {
                        StoreError::Corrupt(format!(
                            "contract {} was not checked by its batch",
                            contract.name()
                        ))
                    })?;
                version != Some(contract.version())
            } else {
                false
            };
            let (refused, written): (Vec<usize>, Vec<usize>) =
                group.into_iter().partition(|&i| stale && items[i].1 .1);
            let events: Vec<NewEvent> = written.iter().map(|&i| items[i].1 .2.clone()).collect();
            let outcomes = tx.insert_events(tenant, contract, &events).await?;
            let stale_answers = refused.iter().map(|_| EventAnswer::StaleContract).collect();
            parts.push((refused, stale_answers));
            parts.push((
                written,
                outcomes.into_iter().map(EventAnswer::Stored).collect(),
            ));
        }
        scatter(items.len(), parts)
    }
}

struct LineageFlush {
    late_events: LateEvents,
}

impl Flush for LineageFlush {
    type Item = (TenantId, RunEventRow);
    type Answer = EventOutcome;

    fn row_key(&self, (tenant, row): &Self::Item) -> Option<String> {
        Some(format!(
            "{tenant}/{}",
            row.event.identified.event_id.as_str()
        ))
    }

    fn count_unheard(&self, (tenant, row): &Self::Item, outcome: &EventOutcome) {
        crate::metrics::record_events(
            tenant,
            traqlyte_identity::openlineage::run_event_contract()
                .name()
                .as_str(),
            &traqlyte_store::IngestSource::http(),
            std::slice::from_ref(&row.event),
            std::slice::from_ref(outcome),
            0,
        );
    }

    fn begin(&self, store: &Store) -> impl Future<Output = Result<StoreTx, StoreError>> + Send {
        begin_ingest(store, self.late_events)
    }

    /// A batch of one tenant's run events, live partitions only: its new events and their
    /// graph rows in one statement with the batch's key check
    /// (`Store::insert_new_run_events`); conflicts and a failed check are left to the
    /// transaction.
    async fn write_at_once(
        &self,
        store: &Store,
        items: &[(Option<ApiKey>, Self::Item)],
    ) -> Result<Vec<Option<EventOutcome>>, StoreError> {
        let Some(tenant) = one_tenant(items) else {
            return Ok(Vec::new());
        };
        if self.late_events != LateEvents::Refuse {
            return Ok(Vec::new());
        }
        let keys = keys_of(items);
        let rows: Vec<&RunEventRow> = items.iter().map(|(_, (_, row))| row).collect();
        let inserted = store.insert_new_run_events(tenant, &keys, &rows).await?;
        let events: Vec<&NewEvent> = rows.iter().map(|row| &row.event).collect();
        Ok(answered_at_once(&events, inserted, event_id, |_| {
            EventOutcome::Inserted
        }))
    }

    async fn write(
        &self,
        tx: &mut StoreTx,
        items: &[Self::Item],
        _latest: &LatestVersions,
    ) -> Result<Vec<EventOutcome>, StoreError> {
        let mut parts = Vec::new();
        for (group, tenant, rows) in by_tenant(items) {
            parts.push((group, tx.insert_run_events(tenant, &rows).await?));
        }
        scatter(items.len(), parts)
    }
}

struct OutcomesFlush;

impl Flush for OutcomesFlush {
    type Item = (TenantId, NewOutcome);
    type Answer = OutcomeResult;

    fn count_unheard(&self, (tenant, _): &Self::Item, result: &OutcomeResult) {
        crate::metrics::record_outcomes(tenant, std::slice::from_ref(result));
    }

    fn begin(&self, store: &Store) -> impl Future<Output = Result<StoreTx, StoreError>> + Send {
        store.begin()
    }

    async fn write(
        &self,
        tx: &mut StoreTx,
        items: &[Self::Item],
        _latest: &LatestVersions,
    ) -> Result<Vec<OutcomeResult>, StoreError> {
        let now = now_us();
        let mut parts = Vec::new();
        for (group, tenant, outcomes) in by_tenant(items) {
            parts.push((group, tx.record_outcomes(tenant, &outcomes, now).await?));
        }
        scatter(items.len(), parts)
    }
}

struct AssignmentsFlush;

impl Flush for AssignmentsFlush {
    /// The tenant, then the proposal and whether its version came from memory.
    type Item = (TenantId, (Assignment, bool));
    type Answer = AssignmentAnswer;

    fn begin(&self, store: &Store) -> impl Future<Output = Result<StoreTx, StoreError>> + Send {
        store.begin()
    }

    /// A batch of one tenant's proposals: the new units' assignments in one statement with
    /// the batch's key and campaign-version checks (`Store::insert_new_assignments`); a
    /// unit already assigned and a failed check are left to the transaction.
    async fn write_at_once(
        &self,
        store: &Store,
        items: &[(Option<ApiKey>, Self::Item)],
    ) -> Result<Vec<Option<AssignmentAnswer>>, StoreError> {
        let Some(tenant) = one_tenant(items) else {
            return Ok(Vec::new());
        };
        let keys = keys_of(items);
        let proposals: Vec<(&Assignment, bool)> = items
            .iter()
            .map(|(_, (_, (proposal, remembered)))| (proposal, *remembered))
            .collect();
        let inserted = store
            .insert_new_assignments(tenant, &keys, &proposals)
            .await?;
        Ok(answered_at_once(
            &proposals,
            inserted,
            |(proposal, _)| &proposal.assignment_id,
            |(proposal, _)| AssignmentAnswer::Stored((*proposal).clone()),
        ))
    }

    async fn write(
        &self,
        tx: &mut StoreTx,
        items: &[Self::Item],
        _latest: &LatestVersions,
    ) -> Result<Vec<AssignmentAnswer>, StoreError> {
        let mut parts = Vec::new();
        for (group, tenant, proposals) in by_tenant(items) {
            let stale = stale_proposals(tx, tenant, &proposals).await?;
            let (refused, written): (Vec<usize>, Vec<usize>) =
                (0..group.len()).partition(|&i| stale[i]);
            let proposed: Vec<Assignment> =
                written.iter().map(|&i| proposals[i].0.clone()).collect();
            let stored = tx.assign_many(tenant, &proposed).await?;
            let stale_answers = refused.iter().map(|_| AssignmentAnswer::StaleCampaign);
            parts.push((
                refused.iter().map(|&i| group[i]).collect(),
                stale_answers.collect(),
            ));
            parts.push((
                written.iter().map(|&i| group[i]).collect(),
                stored.into_iter().map(AssignmentAnswer::Stored).collect(),
            ));
        }
        scatter(items.len(), parts)
    }
}

/// Which of one tenant's proposals were made under a remembered campaign version that is
/// no longer the campaign's latest (read in `tx`, one statement for the batch).
async fn stale_proposals(
    tx: &mut StoreTx,
    tenant: &TenantId,
    proposals: &[(Assignment, bool)],
) -> Result<Vec<bool>, StoreError> {
    let mut campaigns: Vec<&CampaignId> = proposals
        .iter()
        .filter(|(_, remembered)| *remembered)
        .map(|(a, _)| &a.campaign_id)
        .collect();
    if campaigns.is_empty() {
        return Ok(vec![false; proposals.len()]);
    }
    campaigns.sort();
    campaigns.dedup();
    let latest = tx.latest_campaign_versions(tenant, &campaigns).await?;
    Ok(proposals
        .iter()
        .map(|(a, remembered)| {
            *remembered
                && campaigns
                    .iter()
                    .zip(&latest)
                    .find(|(c, _)| **c == &a.campaign_id)
                    .is_none_or(|(_, version)| *version != Some(a.version))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::{batch_waits, groups, scatter};
    use std::time::Duration;

    /// Items named by themselves, for [`super::HeldRows`].
    struct Named;

    impl super::Flush for Named {
        type Item = String;
        type Answer = ();

        fn begin(
            &self,
            store: &super::Store,
        ) -> impl super::Future<Output = Result<super::StoreTx, super::StoreError>> + Send {
            store.begin()
        }

        fn row_key(&self, item: &String) -> Option<String> {
            Some(item.clone())
        }

        async fn write(
            &self,
            _tx: &mut super::StoreTx,
            items: &[String],
            _latest: &super::LatestVersions,
        ) -> Result<Vec<()>, super::StoreError> {
            Ok(vec![(); items.len()])
        }
    }

    fn pending(names: &[&str]) -> Vec<super::Pending<Named>> {
        names
            .iter()
            .map(|name| (None, name.to_string(), tokio::sync::oneshot::channel().0))
            .collect()
    }

    fn names(pending: &[super::Pending<Named>]) -> Vec<&str> {
        pending.iter().map(|(_, name, _)| name.as_str()).collect()
    }

    /// A held row's item is set apart while it is remembered; once older than
    /// `HELD_FOR` it is forgotten (and the map emptied, so batches stop naming rows); a
    /// full memory takes no more.
    #[test]
    fn held_rows_set_their_items_apart_for_a_while_and_within_a_bound() {
        let held = super::HeldRows::default();
        held.note(&Named, &"a".to_string());
        let (together, apart) = held.set_aside(&Named, pending(&["a", "b"]));
        assert_eq!((names(&together), names(&apart)), (vec!["b"], vec!["a"]));
        held.forget(&Named, &"a".to_string());
        assert!(held.rows().is_empty(), "written: forgotten");
        let long_ago = std::time::Instant::now()
            .checked_sub(super::HELD_FOR + Duration::from_secs(1))
            .expect("a past instant");
        held.rows().insert("a".to_string(), long_ago);
        let (together, apart) = held.set_aside(&Named, pending(&["a", "b"]));
        assert_eq!(names(&together), vec!["a", "b"]);
        assert!(apart.is_empty());
        assert!(held.rows().is_empty(), "expired rows are pruned");
        for i in 0..super::HELD_ROWS_MAX {
            held.note(&Named, &format!("row-{i}"));
        }
        held.note(&Named, &"one more".to_string());
        assert_eq!(held.rows().len(), super::HELD_ROWS_MAX);
        assert!(!held.rows().contains_key("one more"));
    }

    #[test]
    fn a_batch_waits_only_while_another_of_its_kind_is_written() {
        let wait = Duration::from_micros(500);
        // Four slots: this batch holds one; three free means no other batch is written.
        assert!(!batch_waits(3, 4, wait));
        assert!(batch_waits(2, 4, wait));
        assert!(batch_waits(0, 4, wait));
        // One slot: no other batch can be written alongside, so it never waits.
        assert!(!batch_waits(0, 1, wait));
        // A zero wait never waits.
        assert!(!batch_waits(0, 4, Duration::ZERO));
    }

    #[test]
    fn groups_keep_input_order_within_a_key_and_sort_the_keys() {
        let items = ["b", "a", "b", "c", "a"];
        assert_eq!(
            groups(&items, |s| *s),
            vec![vec![1, 4], vec![0, 2], vec![3]]
        );
    }

    #[test]
    fn scatter_puts_each_answer_back_at_its_items_position() {
        let parts = vec![
            (vec![1, 4], vec!["a1", "a4"]),
            (vec![0, 2, 3], vec!["b0", "b2", "b3"]),
        ];
        assert_eq!(
            scatter(5, parts).expect("complete"),
            vec!["b0", "a1", "b2", "b3", "a4"]
        );
    }

    #[test]
    fn scatter_refuses_a_group_with_a_missing_answer() {
        assert!(scatter(2, vec![(vec![0, 1], vec!["only one"])]).is_err());
    }
}

//! Group commit: concurrent single requests share one durable commit.
//!
//! `POST /events/{contract}`, `POST /api/v1/lineage`, `POST /outcome` and a first-time
//! `POST /assignments` (without an idempotency key) validate their request alone, as
//! before, then hand the one row they would have written to a [`GroupCommit`] queue and
//! wait. A worker per kind collects what arrives within `wait_us` of the first item (at
//! most `batch_max` items), writes them with the batch store paths
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
//! Nothing here decides uniqueness: two requests for the same key in one batch are
//! judged by the store in input order (the first inserted, the second a duplicate or a
//! collision), as two concurrent transactions would be. There is no in-process cache of
//! recent ids: a cache could answer only what the store would, and the store's answer for
//! a retry (the stored row, the tally) is needed anyway.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, Semaphore};
use traqlyte_identity::Contract;
use traqlyte_store::{
    now_us, Assignment, EventOutcome, LateEvents, NewEvent, NewOutcome, OutcomeResult, RunEventRow,
    Store, StoreError, StoreTx, TenantId,
};

use crate::ApiError;

/// The settings of group commit (`serve --group-commit …`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupCommitConfig {
    /// Whether single requests are coalesced (`--group-commit on|off`).
    pub enabled: bool,
    /// How long a batch waits for more requests after its first, in microseconds.
    pub wait_us: u64,
    /// Most requests one batch (one transaction) holds.
    pub batch_max: usize,
    /// Most batch transactions of one kind open at once.
    pub flushes_max: usize,
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
        let queues = Queues {
            events: Queue::start(store, config, EventsFlush { late_events }),
            lineage: Queue::start(store, config, LineageFlush { late_events }),
            outcomes: Queue::start(store, config, OutcomesFlush),
            assignments: Queue::start(store, config, AssignmentsFlush),
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

    /// Stores one event of `contract` in the next batch; answers after its commit.
    /// `None` when group commit is off (the caller writes it itself).
    pub(crate) async fn event(
        &self,
        tenant: &TenantId,
        contract: &Contract,
        event: &NewEvent,
    ) -> Option<Result<EventOutcome, ApiError>> {
        let queues = self.queues.as_ref()?;
        let item = (tenant.clone(), contract.clone(), event.clone());
        Some(queues.events.submit(item).await)
    }

    /// Stores one OpenLineage run event in the next batch; `None` when off.
    pub(crate) async fn run_event(
        &self,
        tenant: &TenantId,
        row: &RunEventRow,
    ) -> Option<Result<EventOutcome, ApiError>> {
        let queues = self.queues.as_ref()?;
        Some(queues.lineage.submit((tenant.clone(), row.clone())).await)
    }

    /// Records one outcome in the next batch; `None` when off.
    pub(crate) async fn outcome(
        &self,
        tenant: &TenantId,
        outcome: &NewOutcome,
    ) -> Option<Result<OutcomeResult, ApiError>> {
        let queues = self.queues.as_ref()?;
        Some(
            queues
                .outcomes
                .submit((tenant.clone(), outcome.clone()))
                .await,
        )
    }

    /// Writes one unit's first assignment in the next batch (the stored one if another
    /// request won); `None` when off.
    pub(crate) async fn assignment(
        &self,
        tenant: &TenantId,
        proposed: &Assignment,
    ) -> Option<Result<Assignment, ApiError>> {
        let queues = self.queues.as_ref()?;
        Some(
            queues
                .assignments
                .submit((tenant.clone(), proposed.clone()))
                .await,
        )
    }
}

/// How one kind of item is written: all of `items` in one transaction, one answer per
/// item in input order.
trait Flush: Send + Sync + 'static {
    type Item: Send + Sync + 'static;
    type Answer: Send + 'static;

    /// Opens the transaction the items are written in.
    fn begin(&self, store: &Store) -> impl Future<Output = Result<StoreTx, StoreError>> + Send;

    /// Writes `items` in `tx` (not committed here).
    fn write<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        items: &'a [Self::Item],
    ) -> impl Future<Output = Result<Vec<Self::Answer>, StoreError>> + Send + 'a;
}

type Reply<F> = oneshot::Sender<Result<<F as Flush>::Answer, ApiError>>;

struct Queue<F: Flush> {
    sender: mpsc::Sender<(F::Item, Reply<F>)>,
}

impl<F: Flush> Queue<F> {
    fn start(store: &Store, config: GroupCommitConfig, flush: F) -> Self {
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
        };
        tokio::spawn(worker.run(receiver));
        Queue { sender }
    }

    async fn submit(&self, item: F::Item) -> Result<F::Answer, ApiError> {
        let (reply, answer) = oneshot::channel();
        self.sender
            .send((item, reply))
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
}

impl<F: Flush> Worker<F> {
    /// Collects batches until every sender is gone (the server's state dropped).
    async fn run(self, mut receiver: mpsc::Receiver<(F::Item, Reply<F>)>) {
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
            let deadline = tokio::time::Instant::now() + self.wait;
            while batch.len() < self.batch_max {
                match receiver.try_recv() {
                    Ok(pending) => batch.push(pending),
                    Err(mpsc::error::TryRecvError::Disconnected) => break,
                    Err(mpsc::error::TryRecvError::Empty) => {
                        match tokio::time::timeout_at(deadline, receiver.recv()).await {
                            Ok(Some(pending)) => batch.push(pending),
                            Ok(None) | Err(_) => break,
                        }
                    }
                }
            }
            let (store, flush) = (self.store.clone(), self.flush.clone());
            tokio::spawn(async move {
                write_batch(&store, &*flush, batch).await;
                drop(permit);
            });
        }
    }
}

/// Writes a batch in one transaction and answers each item; on a failed transaction,
/// each item alone.
async fn write_batch<F: Flush>(store: &Store, flush: &F, batch: Vec<(F::Item, Reply<F>)>) {
    let (items, replies): (Vec<F::Item>, Vec<Reply<F>>) = batch.into_iter().unzip();
    match write_in_one_tx(store, flush, &items).await {
        Ok(answers) => {
            crate::metrics::record_batch_size("group_commit", items.len());
            for (reply, answer) in replies.into_iter().zip(answers) {
                // A receiver gone (the request timed out) changes nothing: it is stored.
                let _ = reply.send(Ok(answer));
            }
        }
        Err(err) if items.len() == 1 => {
            if let Some(reply) = replies.into_iter().next() {
                let _ = reply.send(Err(err.into()));
            }
        }
        Err(err) => {
            tracing::warn!(error = %err, items = items.len(), "group commit batch failed; writing its items one by one");
            for (item, reply) in items.iter().zip(replies) {
                let answer = write_in_one_tx(store, flush, std::slice::from_ref(item))
                    .await
                    .map_err(ApiError::from)
                    .and_then(|mut answers| {
                        answers
                            .pop()
                            .ok_or_else(|| ApiError::internal("store returned no outcome"))
                    });
                let _ = reply.send(answer);
            }
        }
    }
}

async fn write_in_one_tx<F: Flush>(
    store: &Store,
    flush: &F,
    items: &[F::Item],
) -> Result<Vec<F::Answer>, StoreError> {
    let mut tx = flush.begin(store).await?;
    #[cfg(feature = "test-hooks")]
    test_delay().await;
    let answers = flush.write(&mut tx, items).await?;
    if answers.len() != items.len() {
        return Err(StoreError::Corrupt(format!(
            "a batch of {} items returned {} outcomes",
            items.len(),
            answers.len()
        )));
    }
    tx.commit().await?;
    Ok(answers)
}

/// Test-only hook (feature `test-hooks`): each batch sleeps
/// `TRAQLYTE_TEST_GROUP_COMMIT_DELAY_MS` inside its transaction, so a test can kill the
/// server while batches are open.
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
    type Item = (TenantId, Contract, NewEvent);
    type Answer = EventOutcome;

    fn begin(&self, store: &Store) -> impl Future<Output = Result<StoreTx, StoreError>> + Send {
        begin_ingest(store, self.late_events)
    }

    async fn write(
        &self,
        tx: &mut StoreTx,
        items: &[Self::Item],
    ) -> Result<Vec<EventOutcome>, StoreError> {
        let mut parts = Vec::new();
        for group in groups(items, |(t, c, _)| {
            (t.as_str(), c.name().as_str(), c.version())
        }) {
            let (tenant, contract, _) = &items[group[0]];
            let events: Vec<NewEvent> = group.iter().map(|&i| items[i].2.clone()).collect();
            let outcomes = tx.insert_events(tenant, contract, &events).await?;
            parts.push((group, outcomes));
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

    fn begin(&self, store: &Store) -> impl Future<Output = Result<StoreTx, StoreError>> + Send {
        begin_ingest(store, self.late_events)
    }

    async fn write(
        &self,
        tx: &mut StoreTx,
        items: &[Self::Item],
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

    fn begin(&self, store: &Store) -> impl Future<Output = Result<StoreTx, StoreError>> + Send {
        store.begin()
    }

    async fn write(
        &self,
        tx: &mut StoreTx,
        items: &[Self::Item],
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
    type Item = (TenantId, Assignment);
    type Answer = Assignment;

    fn begin(&self, store: &Store) -> impl Future<Output = Result<StoreTx, StoreError>> + Send {
        store.begin()
    }

    async fn write(
        &self,
        tx: &mut StoreTx,
        items: &[Self::Item],
    ) -> Result<Vec<Assignment>, StoreError> {
        let mut parts = Vec::new();
        for (group, tenant, proposed) in by_tenant(items) {
            parts.push((group, tx.assign_many(tenant, &proposed).await?));
        }
        scatter(items.len(), parts)
    }
}

#[cfg(test)]
mod tests {
    use super::{groups, scatter};

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

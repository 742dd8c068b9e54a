//! Lineage on SQLite: the single writer connection serialises transactions
//! (`BEGIN IMMEDIATE`), so the event rows and their graph rows commit together.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::Sqlite;

use super::{level_sql, Direction, LevelEdge, NodeKind};
use crate::sqlite::SqliteStore;
use crate::{StoreError, TenantId};

/// SQLite virtual-machine steps between two looks at a level's deadline: a look reads
/// the clock (some 25 ns), a step takes a few, so the looks cost well under 1 %.
const STEPS_BETWEEN_CHECKS: i32 = 10_000;

impl SqliteStore {
    pub(crate) async fn level(
        &self,
        tenant: &TenantId,
        kind: NodeKind,
        direction: Direction,
        frontier: &[(&str, &str)],
        limit: i64,
    ) -> Result<Vec<LevelEdge>, StoreError> {
        // The frontier travels as one JSON array of [namespace, name] pairs.
        let pairs =
            serde_json::to_string(frontier).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let frontier_sql =
            "SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each($2)";
        let text = level_sql(kind, direction, frontier_sql, "$3");
        // A level of a busy graph can scan far more rows than it returns: bounded in time
        // as on PostgreSQL (`statement_timeout` there), so SQLite stops the statement at
        // the deadline instead of running on after the client was answered, holding a
        // reader. SQLite has no statement timeout: a progress handler looks at the clock
        // and interrupts.
        let mut held = Deadlined(Some(self.reader.acquire().await?));
        let deadline = Instant::now() + Duration::from_millis(self.walk_timeout_ms.max(1));
        let stopped = Arc::new(AtomicBool::new(false));
        let conn = held.conn()?;
        {
            let stopped = stopped.clone();
            conn.lock_handle()
                .await?
                .set_progress_handler(STEPS_BETWEEN_CHECKS, move || {
                    let go_on = Instant::now() < deadline;
                    if !go_on {
                        stopped.store(true, Ordering::Relaxed);
                    }
                    go_on
                });
        }
        let rows = sqlx::query_as(&text)
            .bind(tenant.as_str())
            .bind(pairs)
            .bind(limit)
            .fetch_all(&mut **conn)
            .await;
        conn.lock_handle().await?.remove_progress_handler();
        held.give_back();
        match rows {
            Err(_) if stopped.load(Ordering::Relaxed) => Err(StoreError::QueryTimeout),
            rows => Ok(rows?),
        }
    }
}

/// A reader carrying a level's deadline in its progress handler, given back to the pool
/// once the handler is removed: a handler left on a pooled connection would interrupt
/// every later query on it past the deadline. Dropped before (the request was answered,
/// say by its timeout, while the statement ran), a task removes the handler once the
/// statement has ended (at the deadline at the latest), then gives the reader back; a
/// reader whose handler cannot be removed is closed.
struct Deadlined(Option<PoolConnection<Sqlite>>);

impl Deadlined {
    fn conn(&mut self) -> Result<&mut PoolConnection<Sqlite>, StoreError> {
        self.0
            .as_mut()
            .ok_or_else(|| StoreError::Corrupt("the reader was given back already".into()))
    }

    /// The handler is removed: back to the pool.
    fn give_back(&mut self) {
        self.0.take();
    }
}

impl Drop for Deadlined {
    fn drop(&mut self) {
        let Some(mut conn) = self.0.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            drop(conn.detach());
            return;
        };
        runtime.spawn(async move {
            let removed = match conn.lock_handle().await {
                Ok(mut handle) => {
                    handle.remove_progress_handler();
                    true
                }
                Err(_) => false,
            };
            if !removed {
                drop(conn.detach());
            }
        });
    }
}

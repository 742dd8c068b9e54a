//! Lineage on PostgreSQL: Read Committed, so an insert that conflicts with a concurrent
//! transaction waits for it and the following select sees its committed row; the event
//! rows and their graph rows commit together.

use super::{level_sql, Direction, LevelEdge, NodeKind};
use crate::postgres::PgStore;
use crate::{StoreError, TenantId};

impl PgStore {
    /// A transaction whose statements stop at the request timeout
    /// (`StoreConfig::walk_timeout_ms`, PostgreSQL's `statement_timeout`): for reads a
    /// request waits on, so the database stops when the client has been answered.
    pub(crate) async fn begin_bounded_read(
        &self,
    ) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, StoreError> {
        let mut tx = crate::postgres::begin(&self.pool).await?;
        sqlx::query(&format!(
            "SET LOCAL statement_timeout = {}",
            self.walk_timeout_ms.max(1)
        ))
        .execute(&mut *tx)
        .await?;
        Ok(tx)
    }

    pub(crate) async fn level(
        &self,
        tenant: &TenantId,
        kind: NodeKind,
        direction: Direction,
        frontier: &[(&str, &str)],
        limit: i64,
    ) -> Result<Vec<LevelEdge>, StoreError> {
        let namespaces: Vec<&str> = frontier.iter().map(|(ns, _)| *ns).collect();
        let names: Vec<&str> = frontier.iter().map(|(_, name)| *name).collect();
        let frontier_sql = "SELECT * FROM unnest($2::text[], $3::text[])";
        let text = level_sql(kind, direction, frontier_sql, "$4");
        // A level of a busy graph can scan far more rows than it returns: bounded in time
        // like the request that asked, so PostgreSQL stops when the client has been
        // answered instead of running on (`StoreConfig::walk_timeout_ms`).
        let mut tx = self.begin_bounded_read().await?;
        let rows = sqlx::query_as(&text)
            .bind(tenant.as_str())
            .bind(&namespaces)
            .bind(&names)
            .bind(limit)
            .fetch_all(&mut *tx)
            .await
            .map_err(|err| StoreError::from(err).bounded_read_stopped())?;
        tx.commit().await?;
        Ok(rows)
    }
}

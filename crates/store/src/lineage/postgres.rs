//! Lineage on PostgreSQL: Read Committed, so an insert that conflicts with a concurrent
//! transaction waits for it and the following select sees its committed row; the event
//! rows and their graph rows commit together.

use super::{level_sql, Direction, LevelEdge, NodeKind};
use crate::postgres::PgStore;
use crate::{StoreError, TenantId};

impl PgStore {
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
        let rows = sqlx::query_as(&text)
            .bind(tenant.as_str())
            .bind(&namespaces)
            .bind(&names)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows)
    }
}

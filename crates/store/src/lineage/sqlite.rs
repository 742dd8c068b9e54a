//! Lineage on SQLite: the single writer connection serialises transactions
//! (`BEGIN IMMEDIATE`), so the event rows and their graph rows commit together.

use super::{level_sql, Direction, LevelEdge, NodeKind};
use crate::sqlite::SqliteStore;
use crate::{StoreError, TenantId};

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
        let rows = sqlx::query_as(&text)
            .bind(tenant.as_str())
            .bind(pairs)
            .bind(limit)
            .fetch_all(&self.reader)
            .await?;
        Ok(rows)
    }
}

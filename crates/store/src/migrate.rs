//! Versioned migrations, embedded in the binary. Each runs once, inside a transaction
//! that also records it in `schema_migrations`.

/// One schema change, written once per backend.
pub(crate) struct Migration {
    pub version: i64,
    pub name: &'static str,
    pub sqlite: &'static str,
    pub postgres: &'static str,
}

/// Every migration, in order. Append only: an applied migration is never edited.
pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "foundation",
        sqlite: include_str!("../migrations/sqlite/0001_foundation.sql"),
        postgres: include_str!("../migrations/postgres/0001_foundation.sql"),
    },
    Migration {
        version: 2,
        name: "campaigns_idempotency",
        sqlite: include_str!("../migrations/sqlite/0002_campaigns_idempotency.sql"),
        postgres: include_str!("../migrations/postgres/0002_campaigns_idempotency.sql"),
    },
    Migration {
        version: 3,
        name: "lineage",
        sqlite: include_str!("../migrations/sqlite/0003_lineage.sql"),
        postgres: include_str!("../migrations/postgres/0003_lineage.sql"),
    },
    Migration {
        version: 4,
        name: "experiments",
        sqlite: include_str!("../migrations/sqlite/0004_experiments.sql"),
        postgres: include_str!("../migrations/postgres/0004_experiments.sql"),
    },
    Migration {
        version: 5,
        name: "ui_sessions",
        sqlite: include_str!("../migrations/sqlite/0005_ui_sessions.sql"),
        postgres: include_str!("../migrations/postgres/0005_ui_sessions.sql"),
    },
    Migration {
        version: 6,
        name: "tally_rollup",
        sqlite: include_str!("../migrations/sqlite/0006_tally_rollup.sql"),
        postgres: include_str!("../migrations/postgres/0006_tally_rollup.sql"),
    },
    Migration {
        version: 7,
        name: "supersessions",
        sqlite: include_str!("../migrations/sqlite/0007_supersessions.sql"),
        postgres: include_str!("../migrations/postgres/0007_supersessions.sql"),
    },
    Migration {
        version: 8,
        name: "key_lifecycle",
        sqlite: include_str!("../migrations/sqlite/0008_key_lifecycle.sql"),
        postgres: include_str!("../migrations/postgres/0008_key_lifecycle.sql"),
    },
];

pub(crate) const CREATE_MIGRATIONS_TABLE: &str = "CREATE TABLE IF NOT EXISTS schema_migrations (
    version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at_us BIGINT NOT NULL)";

/// Key of the PostgreSQL advisory lock that serialises concurrent migrators.
pub(crate) const PG_MIGRATION_LOCK: i64 = 0x0074_7271_6c79_7465; // "trqlyte" in ASCII

impl crate::Store {
    /// Applies pending migrations in one transaction; safe to run from several processes
    /// at once (PostgreSQL: an advisory lock; SQLite: `BEGIN IMMEDIATE` holds the write
    /// lock from the start).
    pub async fn migrate(&self) -> Result<Vec<String>, crate::StoreError> {
        let mut tx = self.begin().await?;
        let postgres = matches!(tx.inner, crate::tx::TxInner::Postgres(_));
        let mut applied = Vec::new();
        crate::tx::with_tx!(tx, conn, q => {
            if postgres {
                sqlx::query(&q("SELECT pg_advisory_xact_lock($1)")).bind(PG_MIGRATION_LOCK).execute(&mut *conn).await?;
            }
            sqlx::query(CREATE_MIGRATIONS_TABLE).execute(&mut *conn).await?;
            let done: Vec<i64> = sqlx::query_scalar("SELECT version FROM schema_migrations").fetch_all(&mut *conn).await?;
            for m in MIGRATIONS.iter().filter(|m| !done.contains(&m.version)) {
                sqlx::raw_sql(if postgres { m.postgres } else { m.sqlite }).execute(&mut *conn).await?;
                sqlx::query(&q("INSERT INTO schema_migrations (version, name, applied_at_us) VALUES ($1, $2, $3)"))
                    .bind(m.version).bind(m.name).bind(crate::now_us())
                    .execute(&mut *conn).await?;
                applied.push(format!("{:04}_{}", m.version, m.name));
            }
        });
        tx.commit().await?;
        Ok(applied)
    }
}

//! One integration-test binary for the HTTP API and the CLI. Every test runs against both
//! backends: a fresh SQLite file and a fresh, uniquely named PostgreSQL database (which
//! must be reachable: a missing PostgreSQL fails the tests, it never skips them).

mod backfill;
mod bad_input;
mod bad_input_routes;
mod busy;
mod cli;
mod clocks;
mod compressed_bodies;
mod connections;
mod contracts;
mod demo;
mod experiments;
mod fault;
mod group_commit;
mod helpers;
mod hostile_text;
mod hot_path;
mod idempotency;
mod ingest;
mod isolation;
mod keys;
mod lineage;
mod metrics;
mod nats;
mod nats_server;
mod numbers;
mod ol_client;
mod openapi;
mod ops;
mod outcome_collisions;
mod outcome_corrections;
mod paging;
mod partitions;
mod pooler;
mod request_bodies;
mod segment;
mod semantic;
mod sqlite_file;
mod supersessions;
mod tls;
mod ui;
mod vanished;

/// Generates, for each listed `async fn name(backend: Backend)`, one test per backend.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name($crate::helpers::Backend::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name($crate::helpers::Backend::Postgres).await
                }
            )*
        }
    };
}

//! Direct tests of the store crate: its pure parts, and the SQL the HTTP API cannot reach
//! (migrations, placeholders) on both backends. The rest of the SQL is exercised through
//! the HTTP API on both backends by `crates/traqlyte/tests/it`.

mod at_once;
mod bindings;
mod db;
mod durability;
mod lineage_walks;
mod migrate;
mod partitions;
mod placeholders;
mod plan;
mod plans;
mod purges;
mod report_reads;
mod schema;
mod tenants;
mod ui_tokens;
mod webhooks;

//! Connectors: ingestion from outside the HTTP API. [`nats`] consumes a JetStream stream.

pub mod nats;

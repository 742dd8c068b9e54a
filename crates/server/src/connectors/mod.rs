//! Connectors: ingestion surfaces that speak another product's protocol and feed the
//! same identity and store path as the native API. `segment`: Segment's HTTP Tracking
//! API; [`nats`]: a JetStream stream.

pub mod nats;
pub(crate) mod segment;

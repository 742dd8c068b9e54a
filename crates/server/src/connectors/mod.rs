//! Connectors: ingestion surfaces that speak another product's protocol and feed the
//! same identity and store path as the native API. [`segment`]: Segment's HTTP Tracking
//! API.

pub(crate) mod segment;

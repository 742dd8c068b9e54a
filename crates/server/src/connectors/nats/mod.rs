//! The NATS JetStream consumer: a durable pull consumer with explicit acks that stores
//! each fetched batch through the same identification and insert path as
//! `POST /events/{contract}/batch`, and acks only after the commit.
//!
//! - `config.rs`: [`NatsConfig`] (addresses, tenant, bounds).
//! - `decode.rs`: the pure reading of a message's subject (`traqlyte.{contract}`) and
//!   bytes, or the [`Refusal`] that makes it a dead letter.
//! - `consumer.rs`: the runtime, [`run`]: connect, check the consumer's ack policy, then
//!   fetch → identify → one transaction per contract → ack (dead letters recorded, then
//!   terminated; a store error Naks the whole batch with capped exponential backoff).
//!
//! Delivery is at least once: a crash between the commit and the acks redelivers the
//! batch, and the store's unique key absorbs it as duplicates, counted in `GET /stats`.

mod config;
mod consumer;
mod decode;

pub use config::NatsConfig;
pub use consumer::{run, start, ConsumerError, Started};
pub use decode::{decode, Decoded, Refusal, SEGMENT_SUBJECT, SUBJECT_PREFIX};

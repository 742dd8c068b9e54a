//! What `traqlyte` runs besides the product itself, so the binary stays clap parsing and
//! wiring: [`demo`] (an A/A experiment behind an at-least-once client, served in-process),
//! [`bench`](mod@bench) and [`bench_lineage`] and [`bench_segment`] (load generators that measure their reference in the
//! same run, for BENCHMARKS.md) and [`fire`] (one body sent many times concurrently, as a
//! client whose replies are lost; the tests run it from several OS processes).

#![deny(missing_docs)]

pub mod bench;
pub mod bench_growth;
mod bench_hot;
pub mod bench_lineage;
pub mod bench_metrics;
pub mod bench_nats;
pub mod bench_segment;
mod cpu;
pub mod demo;
pub mod fire;

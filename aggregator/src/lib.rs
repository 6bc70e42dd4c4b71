//! Canopy aggregator: merges children's frames into one stream per tick and
//! relays it up the tree (the root gateway reuses the same receive path).
//!
//! `merge` is the pure core (no tokio, no sockets, no clock reads: callers
//! pass `now_ms`): per-child decoders, one global dictionary keyed by source
//! name and labels, deduplication by (series, timestamp) across redundant
//! paths, and a table from which any uplink can be keyframed. Invariants: a
//! sample reaches the [`merge::Sink`] at most once; memory is bounded by
//! [`merge::MergeConfig`]; a broken child only ever affects its own link.

pub mod acks;
pub mod merge;
pub mod relay;
pub mod schedule;

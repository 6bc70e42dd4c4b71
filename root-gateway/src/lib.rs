//! Canopy root gateway: the live store, the PromQL engine and the
//! Prometheus-compatible HTTP API.
//!
//! Layering (arrows point down only):
//!
//! ```text
//! api::http (axum shell) ──> promql (pure engine) ──> store::Querier (trait)
//!                       └──────────────────────────> store::LiveStore (pure core)
//! ```
//!
//! Invariants: `store` and `promql` read no clock and spawn nothing; the
//! caller passes `now` and cancellation checks. Nothing panics on hostile
//! input: bad queries, huge ranges and deep nesting become typed errors.

pub mod api;
pub mod auth;
pub mod dashboard;
pub mod freshness;
pub mod promql;
pub mod remote_write;
pub mod server;
pub mod store;
pub mod stress;
pub mod wal;

//! `tsdb-side-by-side`: the Canopy gateway next to a real Prometheus 2.42,
//! fed the same remote_write bodies in one run, measured the same way.
//!
//! The pure parts live here: the data generator ([`data`]), the HTTP client
//! both servers are driven with ([`http`]), the senders ([`send`]), the
//! answer comparison ([`answer`]) and the table ([`report`]). The binary
//! (`src/bin/tsdb-side-by-side.rs`) starts the processes and measures.

pub mod answer;
pub mod data;
pub mod http;
pub mod report;
pub mod send;

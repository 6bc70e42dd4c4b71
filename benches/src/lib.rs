//! Canopy's benchmarks and measuring tools: `wire-cost` (bytes per sample
//! on a recorded trace), `fabric-sim` (a whole tree in one process, see
//! [`fabric`]), `fabric-loopback` (a real tree of processes on loopback
//! beside `fabric-sim`, see [`loopback`]), `leaf-overhead` (a leaf's CPU
//! and RSS next to node_exporter), `tsdb-side-by-side` (the gateway next
//! to Prometheus 2.42, see [`sidebyside`]), criterion benches of the
//! codec, and their shared helpers.
#![allow(clippy::print_stdout)]

pub mod fabric;
pub mod host;
pub mod loopback;
pub mod overhead;
pub mod procs;
pub mod sidebyside;
pub mod simtrace;
pub mod trace;
pub mod wire;

//! Canopy's wire: the protobuf schema, the sans-I/O frame codec, and the QUIC link.
//!
//! `schema` is generated from `proto/*.proto`; `model` is the shared data
//! model; `codec` (quantise, delta, frame build/parse, zstd) is pure: no
//! sockets, no tokio, no clock reads, so it can be fuzzed and benchmarked
//! alone. `link` is the async QUIC shell on top.

pub mod codec;
pub mod link;
pub mod model;

/// Types generated from the `.proto` files by prost.
#[allow(missing_docs, clippy::all)]
pub mod schema {
    /// Data plane: frames (`frame.proto`).
    pub mod frame {
        include!(concat!(env!("OUT_DIR"), "/canopy.frame.v1.rs"));
    }
    /// Control plane: hello, acks, resync (`control.proto`).
    pub mod control {
        include!(concat!(env!("OUT_DIR"), "/canopy.control.v1.rs"));
    }
    /// Prometheus remote_write v1 messages (`prometheus/remote.proto`).
    pub mod remote {
        include!(concat!(env!("OUT_DIR"), "/prometheus.rs"));
    }
}

pub use model::{Labels, MetricKind, Sample};

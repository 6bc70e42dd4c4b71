//! Canopy leaf agent: the part of `canopy node` that observes one host.
//!
//! - [`collect`]: collectors behind one small trait, [`collect::Collector`].
//!   Each source has a pure `parse_*` function (text in, typed values out,
//!   no I/O) and a thin reader over a configurable root (`/proc`,
//!   `/sys/fs/cgroup`), so tests run on fixture copies of real files.
//! - [`sim`]: a deterministic simulated node (CPU, memory, network, disk and
//!   Slurm jobs) driven by virtual time only, for demos, tests and the scale
//!   simulator.
//!
//! Invariants: no collector panics on malformed input (it returns a typed
//! [`LeafError`]); counters never decrease except at a true reset; a series
//! that ends (a job) simply stops being reported, and the sampler turns that
//! into a staleness marker. Nothing here reads the clock.

pub mod agent;
pub mod collect;
pub mod error;
pub mod sim;

pub use collect::{Collector, Observation, host_collectors};
pub use error::LeafError;
pub use sim::SimNode;

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
pub mod attrib;
pub mod collect;
pub mod error;
pub mod sched;
pub mod sim;
pub mod ticker;

pub use collect::{Collector, HostOptions, Observation, host_collectors, host_collectors_with};
pub use error::LeafError;
pub use sim::SimNode;

/// A scratch directory for unit tests, removed on drop (no extra crate).
#[cfg(test)]
pub(crate) struct TestDir(std::path::PathBuf);

#[cfg(test)]
impl TestDir {
    /// A new empty directory under the system temp dir.
    pub(crate) fn new() -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "canopy-leaf-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create test dir");
        TestDir(p)
    }

    /// Its path.
    pub(crate) fn path(&self) -> &std::path::Path {
        &self.0
    }
}

#[cfg(test)]
impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

//! Attribution: which job a process, a cgroup or a counter belongs to, and
//! job-level totals built from per-process counters.
//!
//! Pure logic (no I/O): the collectors read the files and pass samples in.

pub mod io_carry;
pub mod k8s;
pub mod linuxproc;

#[cfg(test)]
mod tests;

pub use io_carry::{CpuTicks, JobCarry, JobIo};

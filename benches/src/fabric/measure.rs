//! What the simulator reads from the OS: this thread's CPU time and the
//! process's memory, both from `/proc` (no `unsafe`, no extra crate).
//!
//! Thread CPU time comes from `/proc/thread-self/schedstat` (its first field
//! is the scheduler's run time in ns), so the figures do not count time the
//! simulator spent waiting for a core that other processes held. Where that
//! file is missing, the wall clock stands in ([`CpuClock::source`] says which).

use std::time::Instant;

/// A per-thread CPU clock, in nanoseconds since an arbitrary origin.
#[derive(Debug)]
pub struct CpuClock {
    schedstat: bool,
    origin: Instant,
}

impl Default for CpuClock {
    fn default() -> Self {
        Self::new()
    }
}

impl CpuClock {
    /// Probes `/proc/thread-self/schedstat` once.
    pub fn new() -> Self {
        Self {
            schedstat: read_schedstat().is_some(),
            origin: Instant::now(),
        }
    }

    /// `thread-cpu` when the thread's CPU time is read, else `wall`.
    pub fn source(&self) -> &'static str {
        if self.schedstat { "thread-cpu" } else { "wall" }
    }

    /// Now, in ns. Costs a few microseconds (a small `/proc` read): call it
    /// around whole runs of a role, not around single records.
    pub fn now_ns(&self) -> u64 {
        if self.schedstat
            && let Some(ns) = read_schedstat()
        {
            return ns;
        }
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

fn read_schedstat() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// Resident memory of this process: (current, peak) in bytes, from
/// `/proc/self/status` (`VmRSS`, `VmHWM`); zeros where unavailable.
pub fn rss_bytes() -> (u64, u64) {
    let Ok(s) = std::fs::read_to_string("/proc/self/status") else {
        return (0, 0);
    };
    let field = |name: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kb| kb.parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

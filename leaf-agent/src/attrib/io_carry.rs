//! Monotonic per-job I/O totals from per-process counters.
//!
//! `/proc/<pid>/io` vanishes with its process, so a plain sum over a job's
//! current PIDs would drop when a process exits. Instead the job keeps a
//! running total that only ever grows by observed increments:
//!
//! - a process seen at both ticks adds `now - before` (per field, never < 0);
//! - a new process adds all of its counters (a forked process starts at 0,
//!   so everything it shows was done inside the job);
//! - a process that vanished adds nothing more: its I/O up to the last tick
//!   is already in the total. If it was reaped by an ancestor still in the
//!   job, the kernel adds its final counters into that ancestor, so the
//!   ancestor's increments would count the already-counted part again; the
//!   part already counted (the vanished process's last value) becomes a
//!   pending credit of that ancestor, consumed by its next increments. A
//!   process leaves `cgroup.procs` when it exits, before it is reaped, so the
//!   credit waits for the reaping instead of applying to one tick only. The
//!   ancestor is found through the last known parent chain, skipping other
//!   vanished processes (whose own pending credit moves up with them).
//!   I/O done after the last tick by a process reaped outside the job (by
//!   init, after reparenting) is lost: at most one tick of that process.
//! - a PID whose start time changed is a new process (PID reuse).

use std::collections::HashMap;

use crate::collect::proc_io::{IoCounters, ProcSample};

#[derive(Clone, Copy, Debug)]
struct Tracked {
    ppid: u32,
    start_ticks: u64,
    last: IoCounters,
    /// Already counted I/O of vanished descendants, not yet seen absorbed.
    pending: IoCounters,
}

/// The I/O state of one job across ticks; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct JobIo {
    procs: HashMap<u32, Tracked>,
    total: IoCounters,
}

impl JobIo {
    /// A job not seen before: total zero, no processes.
    pub fn new() -> Self {
        Self::default()
    }

    /// The running total (never decreases).
    pub fn total(&self) -> IoCounters {
        self.total
    }

    /// Number of processes tracked at the last update.
    pub fn processes(&self) -> usize {
        self.procs.len()
    }

    /// Folds in one tick's reading of the job's processes; returns the total.
    pub fn update(&mut self, samples: &[ProcSample]) -> IoCounters {
        let same = |t: &Tracked, s: &ProcSample| t.start_ticks == s.id.start_ticks;
        let live: HashMap<u32, &ProcSample> = samples.iter().map(|s| (s.pid, s)).collect();
        let survives = |pid: u32, t: &Tracked| live.get(&pid).is_some_and(|s| same(t, s));

        // Vanished processes: credit what was counted to a live ancestor that
        // absorbs their counters when it reaps them.
        let mut credit: HashMap<u32, IoCounters> = HashMap::new();
        for (&pid, t) in &self.procs {
            if survives(pid, t) {
                continue;
            }
            let mut up = t.ppid;
            // Bounded walk: a cycle in stale parent links cannot loop forever.
            for _ in 0..=self.procs.len() {
                match self.procs.get(&up) {
                    Some(a) if survives(up, a) => {
                        let c = credit.entry(up).or_default();
                        *c = c.saturating_add(t.last).saturating_add(t.pending);
                        break;
                    }
                    Some(a) if up != a.ppid => up = a.ppid,
                    _ => break,
                }
            }
        }

        let mut next = HashMap::with_capacity(samples.len());
        for s in samples {
            let (inc, pending) = match self.procs.get(&s.pid) {
                Some(t) if same(t, s) => {
                    let pending = t
                        .pending
                        .saturating_add(credit.get(&s.pid).copied().unwrap_or_default());
                    let delta = s.io.saturating_sub(t.last);
                    // The part of the increment that is absorbed, already
                    // counted I/O is not counted again.
                    let used = min(delta, pending);
                    (delta.saturating_sub(used), pending.saturating_sub(used))
                }
                _ => (s.io, IoCounters::default()),
            };
            self.total = self.total.saturating_add(inc);
            next.insert(
                s.pid,
                Tracked {
                    ppid: s.id.ppid,
                    start_ticks: s.id.start_ticks,
                    last: s.io,
                    pending,
                },
            );
        }
        self.procs = next;
        self.total
    }
}

fn min(a: IoCounters, b: IoCounters) -> IoCounters {
    IoCounters {
        read_bytes: a.read_bytes.min(b.read_bytes),
        write_bytes: a.write_bytes.min(b.write_bytes),
        read_ops: a.read_ops.min(b.read_ops),
        write_ops: a.write_ops.min(b.write_ops),
    }
}

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

//!
//! The same holds for CPU time read from `/proc/<pid>/stat` (`utime + stime +
//! cutime + cstime`: a reaped child's times are added to its parent's
//! `cutime`/`cstime`), so the state machine is generic over [`Counters`].

use std::collections::HashMap;

use crate::collect::proc_io::{IoCounters, ProcIdentity, ProcSample};

/// A set of monotonic per-process counters that a job carries.
pub trait Counters: Copy + Default {
    /// Field-wise saturating sum.
    fn plus(self, o: Self) -> Self;
    /// Field-wise saturating difference.
    fn minus(self, o: Self) -> Self;
    /// Field-wise minimum.
    fn least(self, o: Self) -> Self;
}

impl Counters for IoCounters {
    fn plus(self, o: Self) -> Self {
        self.saturating_add(o)
    }
    fn minus(self, o: Self) -> Self {
        self.saturating_sub(o)
    }
    fn least(self, o: Self) -> Self {
        min(self, o)
    }
}

/// CPU time of a process and its reaped children, clock ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTicks(pub u64);

impl Counters for CpuTicks {
    fn plus(self, o: Self) -> Self {
        CpuTicks(self.0.saturating_add(o.0))
    }
    fn minus(self, o: Self) -> Self {
        CpuTicks(self.0.saturating_sub(o.0))
    }
    fn least(self, o: Self) -> Self {
        CpuTicks(self.0.min(o.0))
    }
}

#[derive(Clone, Copy, Debug)]
struct Tracked<C> {
    ppid: u32,
    start_ticks: u64,
    last: C,
    /// Already counted I/O of vanished descendants, not yet seen absorbed.
    pending: C,
}

/// The carried totals of one job across ticks; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct JobCarry<C> {
    procs: HashMap<u32, Tracked<C>>,
    total: C,
}

/// The I/O totals of one job.
pub type JobIo = JobCarry<IoCounters>;

impl JobIo {
    /// Folds in one tick's reading of the job's processes; returns the total.
    pub fn update(&mut self, samples: &[ProcSample]) -> IoCounters {
        let v: Vec<(u32, ProcIdentity, IoCounters)> =
            samples.iter().map(|s| (s.pid, s.id, s.io)).collect();
        self.update_with(&v)
    }
}

impl<C: Counters> JobCarry<C> {
    /// A job not seen before: total zero, no processes.
    pub fn new() -> Self {
        Self::default()
    }

    /// The running total (never decreases).
    pub fn total(&self) -> C {
        self.total
    }

    /// Number of processes tracked at the last update.
    pub fn processes(&self) -> usize {
        self.procs.len()
    }

    /// Folds in one tick's reading (pid, identity, counters) of the job's
    /// processes; returns the total.
    pub fn update_with(&mut self, samples: &[(u32, ProcIdentity, C)]) -> C {
        let same = |t: &Tracked<C>, s: &ProcIdentity| t.start_ticks == s.start_ticks;
        let live: HashMap<u32, &ProcIdentity> = samples.iter().map(|s| (s.0, &s.1)).collect();
        let survives = |pid: u32, t: &Tracked<C>| live.get(&pid).is_some_and(|s| same(t, s));

        // Vanished processes: credit what was counted to a live ancestor that
        // absorbs their counters when it reaps them.
        let mut credit: HashMap<u32, C> = HashMap::new();
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
                        *c = c.plus(t.last).plus(t.pending);
                        break;
                    }
                    Some(a) if up != a.ppid => up = a.ppid,
                    _ => break,
                }
            }
        }

        let mut next = HashMap::with_capacity(samples.len());
        for &(pid, id, cur) in samples {
            let (inc, pending) = match self.procs.get(&pid) {
                Some(t) if same(t, &id) => {
                    let pending = t
                        .pending
                        .plus(credit.get(&pid).copied().unwrap_or_default());
                    let delta = cur.minus(t.last);
                    // The part of the increment that is absorbed, already
                    // counted work is not counted again.
                    let used = delta.least(pending);
                    (delta.minus(used), pending.minus(used))
                }
                _ => (cur, C::default()),
            };
            self.total = self.total.plus(inc);
            next.insert(
                pid,
                Tracked {
                    ppid: id.ppid,
                    start_ticks: id.start_ticks,
                    last: cur,
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

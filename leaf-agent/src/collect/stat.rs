//! `/proc/stat`: node CPU time per mode, context switches, runnable tasks.
//!
//! Metrics: `canopy_node_cpu_seconds_total{mode}` (counter),
//! `canopy_node_context_switches_total` (counter), `canopy_node_procs_running`,
//! `canopy_node_procs_blocked` and `canopy_node_cpus` (gauges).

use std::path::Path;

use super::hot_file::HotFile;
use super::{Collector, Observation, field};
use crate::error::LeafError;

const FORMAT: &str = "/proc/stat";

/// Clock ticks per second of the CPU times in `/proc/stat` (`USER_HZ`).
///
/// The kernel fixes `USER_HZ` at 100 on every architecture Canopy targets
/// (x86_64, aarch64, ppc64le; `getconf CLK_TCK` prints 100), whatever the
/// kernel's internal `HZ`. Reading it with `sysconf` would need `libc` for one
/// constant, so it is assumed; [`StatCollector::with_user_hz`] overrides it.
pub const USER_HZ: u32 = 100;

/// The CPU modes reported, in `/proc/stat` column order.
pub const CPU_MODES: [&str; 8] = [
    "user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal",
];

/// Parsed `/proc/stat`: the counters Canopy uses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcStat {
    /// Ticks (1/USER_HZ s) per mode, summed over all CPUs, in [`CPU_MODES`]
    /// order. Columns a kernel does not print (old kernels lack `steal`) are 0.
    pub cpu_ticks: [u64; 8],
    /// Number of `cpuN` lines: online CPUs.
    pub cpus: u32,
    /// `ctxt`: context switches since boot.
    pub context_switches: u64,
    /// `procs_running`: tasks runnable right now.
    pub procs_running: u64,
    /// `procs_blocked`: tasks blocked on I/O right now.
    pub procs_blocked: u64,
}

/// Parses the text of `/proc/stat`.
///
/// The aggregate `cpu` line (the kernel's sum over CPUs) and `ctxt` are
/// required; `guest`/`guest_nice` are ignored because the kernel already counts
/// them in `user`/`nice`.
pub fn parse_stat(text: &str) -> Result<ProcStat, LeafError> {
    let mut st = ProcStat::default();
    let (mut saw_cpu, mut saw_ctxt) = (false, false);
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let mut it = line.split_ascii_whitespace();
        let Some(key) = it.next() else { continue };
        match key {
            "cpu" => {
                let mut cols = [""; 8];
                let count = it.fold(0, |i, c| {
                    if let Some(slot) = cols.get_mut(i) {
                        *slot = c;
                    }
                    i + 1
                });
                if count < 4 {
                    return Err(LeafError::parse(
                        FORMAT,
                        n,
                        "cpu line has fewer than 4 columns",
                    ));
                }
                for (i, (slot, mode)) in st.cpu_ticks.iter_mut().zip(CPU_MODES).enumerate() {
                    *slot = match cols.get(i).filter(|_| i < count) {
                        Some(c) => field(FORMAT, n, mode, Some(c))?,
                        None => 0,
                    };
                }
                saw_cpu = true;
            }
            k if k.starts_with("cpu") && k[3..].bytes().all(|b| b.is_ascii_digit()) => {
                st.cpus += 1;
            }
            "ctxt" => {
                st.context_switches = field(FORMAT, n, "ctxt", it.next())?;
                saw_ctxt = true;
            }
            "procs_running" => st.procs_running = field(FORMAT, n, key, it.next())?,
            "procs_blocked" => st.procs_blocked = field(FORMAT, n, key, it.next())?,
            _ => {}
        }
    }
    if !saw_cpu {
        return Err(LeafError::Missing {
            format: FORMAT,
            field: "cpu",
        });
    }
    if !saw_ctxt {
        return Err(LeafError::Missing {
            format: FORMAT,
            field: "ctxt",
        });
    }
    Ok(st)
}

/// Appends the observations for a parsed `/proc/stat`.
pub fn observations(node: &str, st: &ProcStat, user_hz: u32, out: &mut Vec<Observation>) {
    let hz = f64::from(user_hz.max(1));
    for (mode, ticks) in CPU_MODES.iter().zip(st.cpu_ticks) {
        out.push(Observation::counter(
            "canopy_node_cpu_seconds_total",
            node,
            &[("mode", mode)],
            ticks as f64 / hz,
        ));
    }
    out.push(Observation::counter(
        "canopy_node_context_switches_total",
        node,
        &[],
        st.context_switches as f64,
    ));
    out.push(Observation::gauge(
        "canopy_node_procs_running",
        node,
        &[],
        st.procs_running as f64,
    ));
    out.push(Observation::gauge(
        "canopy_node_procs_blocked",
        node,
        &[],
        st.procs_blocked as f64,
    ));
    out.push(Observation::gauge(
        "canopy_node_cpus",
        node,
        &[],
        f64::from(st.cpus),
    ));
}

/// Writes the values of `st` into `obs`, [`observations`]' output for an
/// earlier `/proc/stat` (the same series in the same order: only the values
/// change).
fn refresh(obs: &mut [Observation], st: &ProcStat, user_hz: u32) {
    let hz = f64::from(user_hz.max(1));
    let values = st.cpu_ticks.iter().map(|&t| t as f64 / hz).chain([
        st.context_switches as f64,
        st.procs_running as f64,
        st.procs_blocked as f64,
        f64::from(st.cpus),
    ]);
    for (o, v) in obs.iter_mut().zip(values) {
        o.value = v;
    }
}

/// Reads `<proc_root>/stat` each tick.
#[derive(Debug)]
pub struct StatCollector {
    node: String,
    file: HotFile,
    user_hz: u32,
    /// [`observations`]' output of the last tick: its label sets are kept,
    /// and each tick only writes the values (no label set built per series
    /// per tick). Its series still go through the tick's shared buffer,
    /// which `outside_jobs` reads.
    last: Vec<Observation>,
}

impl StatCollector {
    /// A collector for `node` reading `<proc_root>/stat`, assuming [`USER_HZ`].
    pub fn new(node: &str, proc_root: &Path) -> Self {
        StatCollector {
            node: node.to_string(),
            file: HotFile::single(proc_root.join("stat")),
            user_hz: USER_HZ,
            last: Vec::new(),
        }
    }

    /// Overrides the clock tick rate (e.g. from `getconf CLK_TCK`).
    pub fn with_user_hz(mut self, user_hz: u32) -> Self {
        self.user_hz = user_hz;
        self
    }
}

impl Collector for StatCollector {
    fn name(&self) -> &'static str {
        "proc_stat"
    }

    fn collect(&mut self, out: &mut Vec<Observation>) -> Result<(), LeafError> {
        let st = parse_stat(self.file.read()?)?;
        if self.last.is_empty() {
            observations(&self.node, &st, self.user_hz, &mut self.last);
        } else {
            refresh(&mut self.last, &st, self.user_hz);
        }
        out.extend(self.last.iter().cloned());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kept series with fresh values are exactly what building them
    /// anew gives, tick after tick.
    #[test]
    fn refreshed_series_equal_freshly_built_ones() {
        let a = parse_stat(
            "cpu 1 2 3 4 5 6 7 8\ncpu0 1 2 3 4 5 6 7 8\nctxt 9\nprocs_running 2\nprocs_blocked 1\n",
        )
        .expect("parses");
        let b = parse_stat("cpu 11 12 13 14 15 16 17 18 0 0\ncpu0 1 2 3 4 5 6 7 8\ncpu1 1 2 3 4 5 6 7 8\nctxt 99\nprocs_running 5\nprocs_blocked 0\n")
            .expect("parses");
        let mut kept = Vec::new();
        observations("n1", &a, USER_HZ, &mut kept);
        refresh(&mut kept, &b, USER_HZ);
        let mut fresh = Vec::new();
        observations("n1", &b, USER_HZ, &mut fresh);
        assert_eq!(kept, fresh);
        assert_eq!(kept.len(), CPU_MODES.len() + 4);
    }
}

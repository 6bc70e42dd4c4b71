//! perf_event counters for the whole node: hardware events (cycles,
//! instructions, cache misses), which need a PMU the kernel exposes
//! (`/sys/bus/event_source/devices/cpu`; virtual machines often have none),
//! and on request the software events (context switches, page faults),
//! which every kernel has. An event the kernel cannot count is reported
//! once and dropped; the others are exported. Per-job counters, where the
//! software events matter most, are in [`super::perf_jobs`]. Node-wide counting opens one counter per online CPU
//! (`pid = -1, cpu = n`), which needs root or `perf_event_paranoid <= 0`.
//! Multiplexed hardware counters are scaled by `time_enabled / time_running`.
//!
//! Node-wide task-clock is not exported: per CPU it runs all the time (the
//! idle task included), so it would only say wall time x CPUs; per job it
//! is the job's CPU time (see [`super::perf_jobs`]).
//!
//! Metrics (counters): `canopy_node_perf_context_switches_total`,
//! `canopy_node_perf_page_faults_total`, `canopy_node_cycles_total`,
//! `canopy_node_instructions_total`, `canopy_node_cache_misses_total`.

use std::io;
use std::path::{Path, PathBuf};

use perf_event::events::{Event, Hardware, Software};
use perf_event::{Builder, Counter};

use super::probe::{DEFAULT_REPROBE_EVERY, Probe};
use super::{Collector, Observation, read_text};
use crate::error::LeafError;

/// The events the collector tries, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PerfKind {
    /// `PERF_COUNT_SW_TASK_CLOCK`, nanoseconds of CPU time.
    TaskClock,
    /// `PERF_COUNT_SW_CONTEXT_SWITCHES`.
    ContextSwitches,
    /// `PERF_COUNT_SW_PAGE_FAULTS`.
    PageFaults,
    /// `PERF_COUNT_HW_CPU_CYCLES`.
    Cycles,
    /// `PERF_COUNT_HW_INSTRUCTIONS`.
    Instructions,
    /// `PERF_COUNT_HW_CACHE_MISSES`.
    CacheMisses,
}

/// Every event, software first.
pub const ALL_KINDS: [PerfKind; 6] = [
    PerfKind::TaskClock,
    PerfKind::ContextSwitches,
    PerfKind::PageFaults,
    PerfKind::Cycles,
    PerfKind::Instructions,
    PerfKind::CacheMisses,
];

impl PerfKind {
    /// The exported per-job metric name.
    pub fn job_metric(self) -> &'static str {
        match self {
            PerfKind::TaskClock => "canopy_job_perf_task_clock_seconds_total",
            PerfKind::ContextSwitches => "canopy_job_perf_context_switches_total",
            PerfKind::PageFaults => "canopy_job_perf_page_faults_total",
            PerfKind::Cycles => "canopy_job_cycles_total",
            PerfKind::Instructions => "canopy_job_instructions_total",
            PerfKind::CacheMisses => "canopy_job_cache_misses_total",
        }
    }

    /// The exported node metric name.
    pub fn metric(self) -> &'static str {
        match self {
            PerfKind::TaskClock => "canopy_node_perf_task_clock_seconds_total",
            PerfKind::ContextSwitches => "canopy_node_perf_context_switches_total",
            PerfKind::PageFaults => "canopy_node_perf_page_faults_total",
            PerfKind::Cycles => "canopy_node_cycles_total",
            PerfKind::Instructions => "canopy_node_instructions_total",
            PerfKind::CacheMisses => "canopy_node_cache_misses_total",
        }
    }

    /// Whether it is counted by the processor (needs a PMU).
    pub fn is_hardware(self) -> bool {
        matches!(
            self,
            PerfKind::Cycles | PerfKind::Instructions | PerfKind::CacheMisses
        )
    }

    /// Scale from the raw count to the exported unit.
    pub fn unit_scale(self) -> f64 {
        if self == PerfKind::TaskClock {
            1e-9
        } else {
            1.0
        }
    }

    pub(crate) fn event(self) -> Event {
        match self {
            PerfKind::TaskClock => Software::TASK_CLOCK.into(),
            PerfKind::ContextSwitches => Software::CONTEXT_SWITCHES.into(),
            PerfKind::PageFaults => Software::PAGE_FAULTS.into(),
            PerfKind::Cycles => Hardware::CPU_CYCLES.into(),
            PerfKind::Instructions => Hardware::INSTRUCTIONS.into(),
            PerfKind::CacheMisses => Hardware::CACHE_MISSES.into(),
        }
    }
}

/// Why `perf_event_open` refused an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenFailure {
    /// The kernel cannot count it here (no PMU, event unknown): `ENOENT`,
    /// `EOPNOTSUPP`, `ENODEV`, `EINVAL`.
    Unsupported,
    /// Not allowed (`EACCES`, `EPERM`): run as root or lower
    /// `kernel.perf_event_paranoid`.
    NotPermitted,
    /// Anything else (`EMFILE`, ...).
    Other,
}

/// Classifies the errno of a failed `perf_event_open`.
pub fn classify_errno(errno: Option<i32>) -> OpenFailure {
    // Linux errno values (asm-generic): EPERM 1, ENOENT 2, EACCES 13,
    // ENODEV 19, EINVAL 22, EOPNOTSUPP 95.
    match errno {
        Some(2 | 19 | 22 | 95) => OpenFailure::Unsupported,
        Some(1 | 13) => OpenFailure::NotPermitted,
        _ => OpenFailure::Other,
    }
}

/// Scales a multiplexed count: `count x enabled / running` (the count as is
/// when the counter ran all the time, 0 when it never ran).
pub fn scale_count(count: u64, time_enabled: u64, time_running: u64) -> f64 {
    if time_running == 0 {
        0.0
    } else if time_running >= time_enabled {
        count as f64
    } else {
        count as f64 * (time_enabled as f64 / time_running as f64)
    }
}

/// Parses a CPU list such as `/sys/devices/system/cpu/online` (`0-3,8,10-11`).
pub fn parse_cpu_list(text: &str) -> Result<Vec<usize>, LeafError> {
    const FORMAT: &str = "cpu list";
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let bad = || LeafError::parse(FORMAT, 1, format!("bad range {part:?}"));
        let a: usize = a.trim().parse().map_err(|_| bad())?;
        let b: usize = b.trim().parse().map_err(|_| bad())?;
        if b < a || b - a > 65_536 {
            return Err(bad());
        }
        cpus.extend(a..=b);
    }
    Ok(cpus)
}

/// Opens `kind` on every CPU in `cpus`: system-wide, or only for the tasks
/// of the cgroup whose directory is open as `cgroup` (and its descendants).
/// All or nothing.
pub(crate) fn open_all(
    kind: PerfKind,
    cpus: &[usize],
    cgroup: Option<&std::fs::File>,
) -> Result<Vec<Counter>, io::Error> {
    let mut v = Vec::with_capacity(cpus.len());
    for &cpu in cpus {
        let b = Builder::new().kind(kind.event()).one_cpu(cpu);
        let mut b = match cgroup {
            Some(f) => b.observe_cgroup(f),
            None => b.any_pid(),
        };
        // The crate excludes kernel mode by default; context switches and
        // most page faults happen there, and node CPU time includes it.
        b.include_kernel();
        let mut c = b.build()?;
        c.enable()?;
        v.push(c);
    }
    Ok(v)
}

/// The scaled sum of per-CPU counters. A CPU that went offline reads as an
/// error and counts as 0.
pub(crate) fn read_sum(cs: &mut [Counter]) -> f64 {
    cs.iter_mut()
        .filter_map(|c| c.read_count_and_time().ok())
        .map(|ct| scale_count(ct.count, ct.time_enabled, ct.time_running))
        .sum()
}

/// What happened to each event when the collector opened them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// Events being counted.
    pub counting: Vec<PerfKind>,
    /// Events refused, and why.
    pub refused: Vec<(PerfKind, OpenFailure)>,
}

/// Counts the node's perf events each tick.
pub struct PerfCollector {
    node: String,
    online: PathBuf,
    probe: Probe,
    counters: Vec<(PerfKind, Vec<Counter>)>,
    report: Option<OpenReport>,
    software: bool,
}

impl std::fmt::Debug for PerfCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerfCollector")
            .field("node", &self.node)
            .field("report", &self.report)
            .finish()
    }
}

impl PerfCollector {
    /// A collector for `node`; online CPUs from
    /// `<sys_root>/devices/system/cpu/online`.
    pub fn new(node: &str, sys_root: &Path) -> Self {
        PerfCollector {
            node: node.to_string(),
            online: sys_root.join("devices/system/cpu/online"),
            probe: Probe::new("perf_event", DEFAULT_REPROBE_EVERY),
            counters: Vec::new(),
            report: None,
            software: false,
        }
    }

    /// Also counts the software events node-wide. Off by default: the
    /// node's context switches and page faults are already in `/proc/stat`
    /// and `/proc/vmstat` at no cost, while perf reads one counter per CPU
    /// per event each tick.
    pub fn with_software(mut self, on: bool) -> Self {
        self.software = on;
        self
    }

    /// What was opened and what was refused (after the first collect).
    pub fn report(&self) -> Option<&OpenReport> {
        self.report.as_ref()
    }

    /// The back-off state (for tests and self-metrics).
    pub fn probe(&self) -> &Probe {
        &self.probe
    }

    fn open(&mut self) -> Result<(), String> {
        let cpus = parse_cpu_list(&read_text(&self.online).map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
        let mut report = OpenReport::default();
        // Node-wide task-clock is wall time x CPUs (the idle task counts),
        // so it is left to the per-job counters.
        let wanted = ALL_KINDS
            .into_iter()
            .filter(|k| *k != PerfKind::TaskClock && (k.is_hardware() || self.software));
        for kind in wanted {
            match open_all(kind, &cpus, None) {
                Ok(c) => {
                    report.counting.push(kind);
                    self.counters.push((kind, c));
                }
                Err(e) => report
                    .refused
                    .push((kind, classify_errno(e.raw_os_error()))),
            }
        }
        let hw_refused: Vec<&str> = report
            .refused
            .iter()
            .filter(|(k, _)| k.is_hardware())
            .map(|(k, _)| k.metric())
            .collect();
        let empty = report.counting.is_empty();
        if !hw_refused.is_empty() && !empty {
            tracing::info!(
                refused = ?hw_refused,
                "perf_event: hardware counters are unsupported or not permitted here; \
                 exporting the software events only"
            );
        }
        let why = format!(
            "hardware counters (cycles, instructions, cache misses) unsupported or not \
             permitted on this kernel, so no node-wide perf counter: {:?}",
            report.refused
        );
        self.report = Some(report);
        if empty { Err(why) } else { Ok(()) }
    }
}

impl Collector for PerfCollector {
    fn name(&self) -> &'static str {
        "perf_event"
    }

    fn collect(&mut self, out: &mut Vec<Observation>) -> Result<(), LeafError> {
        if self.counters.is_empty() {
            if !self.probe.should_try() {
                return Ok(());
            }
            if let Err(why) = self.open() {
                self.probe.missing(&why);
                return Ok(());
            }
            self.probe.found();
        }
        for (kind, cs) in &mut self.counters {
            let v = read_sum(cs) * kind.unit_scale();
            out.push(Observation::counter(kind.metric(), &self.node, &[], v));
        }
        Ok(())
    }
}

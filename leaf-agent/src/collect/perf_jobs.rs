//! perf_event counters per Slurm job, through perf's cgroup mode: for each
//! `job_<id>` directory of the cgroup v2 Slurm layout
//! (`system.slice/*slurmstepd.scope/job_<id>`), one counter per event and
//! online CPU that counts only while the job's tasks (any step, any
//! descendant cgroup) run there. Software events always; cycles,
//! instructions and cache misses where the kernel has a PMU. cgroup v1
//! Slurm does not put jobs in a `perf_event` hierarchy, so v1 nodes get the
//! node-wide counters only. Counters start when the agent first sees the
//! job. File descriptors are bounded: `jobs x events x CPUs <= max_fds`;
//! jobs past the budget are skipped with one warning. Reads cost one syscall
//! per event, CPU and job, so they happen every [`DEFAULT_READ_EVERY`] ticks
//! (the last values are repeated in between).
//!
//! Metrics (counters, label `job_id`): `canopy_job_perf_task_clock_seconds_total`
//! (the job's CPU time as the scheduler saw it),
//! `canopy_job_perf_context_switches_total`, `canopy_job_perf_page_faults_total`,
//! `canopy_job_cycles_total`, `canopy_job_instructions_total`,
//! `canopy_job_cache_misses_total`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use perf_event::Counter;

use super::perf::{ALL_KINDS, PerfKind, classify_errno, open_all, parse_cpu_list, read_sum};
use super::probe::{DEFAULT_REPROBE_EVERY, Probe};
use super::{Collector, Observation, cgroup_v2, read_text};
use crate::error::LeafError;

/// Default bound on open perf file descriptors.
pub const DEFAULT_MAX_FDS: usize = 4096;

/// Default: counters are read every this many ticks (values in between
/// repeat the last read, so the series stay alive and rates stay right over
/// windows of this length).
pub const DEFAULT_READ_EVERY: u32 = 10;

/// One job's counters (per event, per CPU) and their last read values.
struct JobCounters {
    counters: Vec<(PerfKind, Vec<Counter>)>,
    last: Vec<f64>,
}

/// Counts perf events per Slurm job (cgroup v2 layout).
pub struct PerfJobsCollector {
    node: String,
    roots: Vec<PathBuf>,
    online: PathBuf,
    probe: Probe,
    cpus: Vec<usize>,
    /// Events that opened for the first job (the others are not retried).
    kinds: Option<Vec<PerfKind>>,
    jobs: BTreeMap<u64, JobCounters>,
    max_fds: usize,
    warned_budget: bool,
    read_every: u32,
    tick: u64,
}

impl std::fmt::Debug for PerfJobsCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerfJobsCollector")
            .field("node", &self.node)
            .field("kinds", &self.kinds)
            .field("jobs", &self.jobs.len())
            .finish()
    }
}

impl PerfJobsCollector {
    /// A collector for `node`: job cgroups under `cgroup_root` or
    /// `cgroup_root/unified` (hybrid hosts), CPUs from `sys_root`.
    pub fn new(node: &str, cgroup_root: &Path, sys_root: &Path, max_fds: usize) -> Self {
        PerfJobsCollector {
            node: node.to_string(),
            roots: vec![cgroup_root.to_path_buf(), cgroup_root.join("unified")],
            online: sys_root.join("devices/system/cpu/online"),
            probe: Probe::new("perf_event per job (cgroup v2)", DEFAULT_REPROBE_EVERY),
            cpus: Vec::new(),
            kinds: None,
            jobs: BTreeMap::new(),
            max_fds,
            warned_budget: false,
            read_every: DEFAULT_READ_EVERY,
            tick: 0,
        }
    }

    /// Reads the counters every `n` ticks (at least 1): each read costs one
    /// syscall per event, CPU and job. A new job is read at once.
    pub fn read_every(mut self, n: u32) -> Self {
        self.read_every = n.max(1);
        self
    }

    /// The events counted per job, once the first job was opened.
    pub fn kinds(&self) -> Option<&[PerfKind]> {
        self.kinds.as_deref()
    }

    /// The back-off state (for tests and self-metrics).
    pub fn probe(&self) -> &Probe {
        &self.probe
    }

    fn fds(&self) -> usize {
        self.jobs
            .values()
            .flat_map(|j| &j.counters)
            .map(|(_, cs)| cs.len())
            .sum()
    }

    /// Opens the counters of one job; an empty list when nothing opened.
    fn open_job(&mut self, job: u64, dir: &Path) -> Vec<(PerfKind, Vec<Counter>)> {
        let want = self.kinds.clone().unwrap_or_else(|| ALL_KINDS.to_vec());
        let per_job = want.len() * self.cpus.len();
        if self.fds() + per_job > self.max_fds {
            if !self.warned_budget {
                self.warned_budget = true;
                tracing::warn!(
                    job,
                    max_fds = self.max_fds,
                    "perf_event: fd budget reached; skipping jobs"
                );
            }
            return Vec::new();
        }
        let Ok(file) = std::fs::File::open(dir) else {
            return Vec::new();
        };
        let mut opened = Vec::new();
        let mut refused = Vec::new();
        for kind in want {
            match open_all(kind, &self.cpus, Some(&file)) {
                Ok(cs) => opened.push((kind, cs)),
                Err(e) => refused.push((kind, classify_errno(e.raw_os_error()))),
            }
        }
        if self.kinds.is_none() && !opened.is_empty() {
            if !refused.is_empty() {
                tracing::info!(
                    ?refused,
                    "perf_event per job: these events are not available here"
                );
            }
            self.kinds = Some(opened.iter().map(|(k, _)| *k).collect());
        }
        opened
    }
}

impl Collector for PerfJobsCollector {
    fn name(&self) -> &'static str {
        "perf_event_jobs"
    }

    fn collect(&mut self, out: &mut Vec<Observation>) -> Result<(), LeafError> {
        if self.jobs.is_empty() && !self.probe.should_try() {
            return Ok(());
        }
        let found: Option<Vec<(u64, PathBuf)>> = self
            .roots
            .iter()
            .filter(|r| r.join("system.slice").is_dir())
            .filter_map(|r| cgroup_v2::job_dirs(r).ok())
            .reduce(|mut a, b| {
                a.extend(b);
                a
            });
        let Some(mut dirs) = found else {
            self.jobs.clear();
            self.probe
                .missing(&"no cgroup v2 system.slice (Slurm uses cgroup v1 or is absent)");
            return Ok(());
        };
        if self.cpus.is_empty() {
            match read_text(&self.online).and_then(|t| parse_cpu_list(&t)) {
                Ok(c) if !c.is_empty() => self.cpus = c,
                Ok(_) => return Ok(()),
                Err(e) => {
                    self.probe.missing(&e);
                    return Ok(());
                }
            }
        }
        self.probe.found();
        // A job split over several slurmd scopes: its first directory counts
        // (perf counts descendants, not siblings).
        dirs.sort();
        dirs.dedup_by_key(|(j, _)| *j);
        self.jobs.retain(|j, _| dirs.iter().any(|(d, _)| d == j));
        for (job, dir) in &dirs {
            if !self.jobs.contains_key(job) {
                let counters = self.open_job(*job, dir);
                let last = vec![f64::NAN; counters.len()];
                self.jobs.insert(*job, JobCounters { counters, last });
            }
        }
        let due = self.tick.is_multiple_of(u64::from(self.read_every));
        self.tick += 1;
        for (job, j) in &mut self.jobs {
            let id = job.to_string();
            for ((kind, cs), last) in j.counters.iter_mut().zip(j.last.iter_mut()) {
                if due || last.is_nan() {
                    *last = read_sum(cs) * kind.unit_scale();
                }
                let v = *last;
                out.push(Observation::counter(
                    kind.job_metric(),
                    &self.node,
                    &[("job_id", &id)],
                    v,
                ));
            }
        }
        Ok(())
    }
}

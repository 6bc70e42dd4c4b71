//! perf_event counters per Slurm job on cgroup v1 nodes, where Slurm puts
//! jobs in no `perf_event` hierarchy, so perf's cgroup mode
//! ([`super::perf_jobs`]) cannot be used. Instead: one counter per task
//! (`perf_event_open(pid = tid, cpu = -1)`) with `inherit`, so every thread
//! and process a counted task creates later is counted by the same counter
//! (the kernel sums inherited children, live or exited, into it).
//!
//! Why not a `perf_event` cgroup made by Canopy mirroring the job: moving a
//! job's tasks into another hierarchy races with every fork (a child born
//! between the scan and the move is missed for good), and on hybrid hosts
//! the only place perf cgroups exist is the unified hierarchy that systemd
//! owns, where moving processes confuses it. Per-task counters touch
//! nothing of the job.
//!
//! Each tick the job's tasks (`tasks` of its directory and every step
//! below, in the first of the cpuacct, memory, freezer, cpuset hierarchies
//! that has Slurm's layout) are compared with the ones already known. A
//! new task is already counted when its thread group leader or its parent
//! was known at an earlier scan (it was created after that counter, so it
//! inherited it), or when it is itself such a descendant of another new
//! task; otherwise it gets its own counters. An orphan (parent `1`) that
//! is not a `slurmstepd` is taken as the child of a counted task that
//! exited, when the job already had counted tasks. Known limits: a task
//! forked in the instant between reading `tasks` and opening its parent's
//! counter is missed; counters start when the agent first sees the job.
//!
//! Software events always (task-clock, context switches, page faults);
//! cycles, instructions and cache misses only where the kernel has a PMU
//! (refused once, with one log line, otherwise). File descriptors are
//! bounded: `open tasks x events <= max_fds`. Counters are read every
//! [`super::perf_jobs::DEFAULT_READ_EVERY`] ticks. Metric names are those
//! of [`super::perf_jobs`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use perf_event::{Builder, Counter};

use super::cgroup_v1;
use super::hot_file::HotFiles;
use super::perf::{ALL_KINDS, PerfKind, classify_errno, scale_count};
use super::perf_jobs::DEFAULT_READ_EVERY;
use super::probe::{DEFAULT_REPROBE_EVERY, Probe};
use super::{Collector, Observation};
use crate::error::LeafError;

/// Tasks read per job at most.
const MAX_TASKS_PER_JOB: usize = 65_536;

/// Identity of one task, from `/proc/<tid>/status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskInfo {
    /// Thread id.
    pub tid: u32,
    /// Thread group (process) id.
    pub tgid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// `Name:` (the command, e.g. `slurmstepd`).
    pub name: String,
}

/// Parses the `Name`, `Tgid`, `Pid` and `PPid` lines of
/// `/proc/<tid>/status` (proc(5)).
pub fn parse_status(text: &str) -> Result<TaskInfo, LeafError> {
    const FORMAT: &str = "/proc/<pid>/status";
    let (mut name, mut tgid, mut pid, mut ppid) = (None, None, None, None);
    for (i, line) in text.lines().enumerate() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let v = v.trim();
        match k {
            "Name" => name = Some(v.to_string()),
            "Tgid" => tgid = Some(super::field(FORMAT, i + 1, k, Some(v))?),
            "Pid" => pid = Some(super::field(FORMAT, i + 1, k, Some(v))?),
            "PPid" => ppid = Some(super::field(FORMAT, i + 1, k, Some(v))?),
            _ => {}
        }
    }
    let missing = |field| LeafError::Missing {
        format: FORMAT,
        field,
    };
    Ok(TaskInfo {
        tid: pid.ok_or_else(|| missing("Pid"))?,
        tgid: tgid.ok_or_else(|| missing("Tgid"))?,
        ppid: ppid.ok_or_else(|| missing("PPid"))?,
        name: name.ok_or_else(|| missing("Name"))?,
    })
}

/// Which new tasks need their own counters: those not created, after an
/// earlier scan, by a task counted then (see the module docs). `known` are
/// the tasks known at earlier scans, `new` the ones seen first now.
pub fn tasks_to_open(known: &HashSet<u32>, new: &[TaskInfo]) -> Vec<u32> {
    let by_tid: HashMap<u32, &TaskInfo> = new.iter().map(|t| (t.tid, t)).collect();
    let mut memo: HashMap<u32, bool> = HashMap::new();
    let had_counted = !known.is_empty();
    fn inherited(
        t: &TaskInfo,
        known: &HashSet<u32>,
        by_tid: &HashMap<u32, &TaskInfo>,
        memo: &mut HashMap<u32, bool>,
        had_counted: bool,
        depth: u32,
    ) -> bool {
        if let Some(v) = memo.get(&t.tid) {
            return *v;
        }
        // Cycles in stale parent links, or absurd depth: not inherited.
        memo.insert(t.tid, false);
        let mut via = |id: u32| {
            if id == t.tid || depth > 256 {
                return false;
            }
            known.contains(&id)
                || by_tid
                    .get(&id)
                    .is_some_and(|p| inherited(p, known, by_tid, memo, had_counted, depth + 1))
        };
        let v = (t.tgid != t.tid && via(t.tgid))
            || via(t.ppid)
            || (t.ppid == 1 && had_counted && t.name != "slurmstepd");
        memo.insert(t.tid, v);
        v
    }
    let mut out: Vec<u32> = new
        .iter()
        .filter(|t| !inherited(t, known, &by_tid, &mut memo, had_counted, 0))
        .map(|t| t.tid)
        .collect();
    out.sort_unstable();
    out
}

/// Opens `kind` on task `tid` (all CPUs), inherited by its future children.
fn open_task(kind: PerfKind, tid: u32) -> std::io::Result<Counter> {
    let pid = i32::try_from(tid).map_err(|_| std::io::Error::from_raw_os_error(22))?;
    let mut b = Builder::new().kind(kind.event()).observe_pid(pid).any_cpu();
    b.inherit(true);
    // Kernel-mode time belongs to the job too (the crate excludes it by
    // default).
    b.include_kernel();
    let mut c = b.build()?;
    c.enable()?;
    Ok(c)
}

/// One job's task counters.
#[derive(Default)]
struct TaskJob {
    /// Per event: one counter per opened task.
    counters: Vec<(PerfKind, Vec<Counter>)>,
    /// Tasks seen at earlier scans (still present).
    known: HashSet<u32>,
    /// Tasks with their own counters.
    opened: usize,
    last: Vec<f64>,
}

/// Counts perf events per Slurm job on cgroup v1 nodes; see the module docs.
pub struct PerfTasksCollector {
    node: String,
    controllers: Vec<PathBuf>,
    v2_roots: Vec<PathBuf>,
    proc_root: PathBuf,
    probe: Probe,
    kinds: Option<Vec<PerfKind>>,
    jobs: BTreeMap<u64, TaskJob>,
    max_fds: usize,
    warned_budget: bool,
    read_every: u32,
    tick: u64,
    errors: BTreeMap<&'static str, u64>,
    /// This tick's job directory listings (shared with the job collector).
    dirs: cgroup_v1::JobDirsCache,
    now_ms: i64,
    /// The jobs' `tasks` files, kept open and re-read in place.
    hot: HotFiles,
}

impl std::fmt::Debug for PerfTasksCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerfTasksCollector")
            .field("node", &self.node)
            .field("kinds", &self.kinds)
            .field("jobs", &self.jobs.len())
            .finish()
    }
}

impl PerfTasksCollector {
    /// A collector for `node` over the cgroup v1 hierarchies under
    /// `cgroup_root`, tasks resolved under `proc_root`.
    pub fn new(node: &str, cgroup_root: &Path, proc_root: &Path, max_fds: usize) -> Self {
        let controllers = ["cpuacct", "memory", "freezer", "cpuset"]
            .iter()
            .map(|c| cgroup_root.join(c))
            .collect();
        let mut c = Self::with_controllers(node, controllers, proc_root, max_fds);
        c.v2_roots = vec![cgroup_root.to_path_buf(), cgroup_root.join("unified")];
        c
    }

    /// A collector over these controller directories (each holding
    /// `slurm*/uid_*/job_*`), first with jobs wins.
    pub fn with_controllers(
        node: &str,
        controllers: Vec<PathBuf>,
        proc_root: &Path,
        max_fds: usize,
    ) -> Self {
        PerfTasksCollector {
            node: node.to_string(),
            controllers,
            v2_roots: Vec::new(),
            proc_root: proc_root.to_path_buf(),
            probe: Probe::new(
                "perf_event per job (cgroup v1, per task)",
                DEFAULT_REPROBE_EVERY,
            ),
            kinds: None,
            jobs: BTreeMap::new(),
            max_fds,
            warned_budget: false,
            read_every: DEFAULT_READ_EVERY,
            tick: 0,
            errors: BTreeMap::new(),
            dirs: cgroup_v1::JobDirsCache::new(),
            now_ms: 0,
            hot: HotFiles::new(),
        }
    }

    /// Lists the job directories through `dirs`, shared with other
    /// collectors of the same ticks.
    pub fn with_dirs_cache(mut self, dirs: cgroup_v1::JobDirsCache) -> Self {
        self.dirs = dirs;
        self
    }

    /// Reads the counters every `n` ticks (at least 1).
    pub fn read_every(mut self, n: u32) -> Self {
        self.read_every = n.max(1);
        self
    }

    /// The events counted, once the first task was opened.
    pub fn kinds(&self) -> Option<&[PerfKind]> {
        self.kinds.as_deref()
    }

    /// Tasks with their own counters in `job` (the others inherited).
    pub fn opened_tasks(&self, job: u64) -> Option<usize> {
        self.jobs.get(&job).map(|j| j.opened)
    }

    /// The back-off state.
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

    /// Job id -> its job directories, from the first hierarchy with jobs;
    /// and whether a hierarchy listed holds a `slurm*` root (Slurm's
    /// layout, with or without jobs: one listing serves both).
    fn job_dirs(&self) -> (BTreeMap<u64, Vec<PathBuf>>, bool) {
        let mut out: BTreeMap<u64, Vec<PathBuf>> = BTreeMap::new();
        let mut layout = false;
        for ctl in &self.controllers {
            if let Ok(dirs) = self.dirs.job_dirs_seen(ctl, self.now_ms, &mut layout) {
                for (_, id, p) in dirs {
                    out.entry(id).or_default().push(p);
                }
            }
            if !out.is_empty() {
                break;
            }
        }
        // Jobs that cgroup v2 holds are counted by perf's cgroup mode.
        for r in &self.v2_roots {
            if let Ok(Some((d, _))) = self.dirs.v2_job_dirs(r, self.now_ms) {
                for (id, _) in d {
                    out.remove(&id);
                }
            }
        }
        (out, layout)
    }

    /// Opens counters on `tids` of `job`; tasks past the fd budget or that
    /// vanished are skipped.
    fn open(&mut self, job: u64, tids: &[u32]) {
        let want = self.kinds.clone().unwrap_or_else(|| ALL_KINDS.to_vec());
        for &tid in tids {
            if self.fds() + want.len() > self.max_fds {
                if !self.warned_budget {
                    self.warned_budget = true;
                    tracing::warn!(
                        job,
                        max_fds = self.max_fds,
                        "perf_event per task: fd budget reached; new tasks not counted"
                    );
                }
                *self.errors.entry("fd_budget").or_default() += 1;
                return;
            }
            let mut opened = Vec::new();
            let mut refused = Vec::new();
            for &kind in &want {
                match open_task(kind, tid) {
                    Ok(c) => opened.push((kind, c)),
                    Err(e) => refused.push((kind, classify_errno(e.raw_os_error()))),
                }
            }
            if opened.is_empty() {
                // The task exited, or perf is refused: nothing counted.
                continue;
            }
            if self.kinds.is_none() {
                if !refused.is_empty() {
                    tracing::info!(
                        ?refused,
                        "perf_event per task: these events are not available here; \
                         exporting the others"
                    );
                }
                self.kinds = Some(opened.iter().map(|(k, _)| *k).collect());
            }
            let j = self.jobs.entry(job).or_default();
            for (kind, c) in opened {
                match j.counters.iter_mut().find(|(k, _)| *k == kind) {
                    Some((_, v)) => v.push(c),
                    None => {
                        j.counters.push((kind, vec![c]));
                        j.last.push(f64::NAN);
                    }
                }
            }
            j.opened += 1;
        }
    }
}

impl Collector for PerfTasksCollector {
    fn name(&self) -> &'static str {
        "perf_event_tasks"
    }

    fn set_tick_time(&mut self, ts_ms: i64) {
        self.now_ms = ts_ms;
    }

    fn collect(&mut self, out: &mut Vec<Observation>) -> Result<(), LeafError> {
        if self.jobs.is_empty() && !self.probe.should_try() {
            return Ok(());
        }
        // Rare re-probing only where Slurm has no v1 root at all; with the
        // layout present, a new job is picked up at the next tick.
        let (dirs, layout) = self.job_dirs();
        if dirs.is_empty() && self.jobs.is_empty() && !layout {
            // Nothing read: close what earlier ticks kept open.
            self.hot.end_tick();
            self.probe
                .missing(&"no Slurm root in a cgroup v1 hierarchy (Slurm absent, or cgroup v2)");
            return Ok(());
        }
        self.probe.found();
        self.jobs.retain(|j, _| dirs.contains_key(j));
        let mut errs = Vec::new();
        for (job, d) in &dirs {
            let tids = self.dirs.ids_in_trees(
                &mut self.hot,
                self.now_ms,
                d,
                ("tasks", MAX_TASKS_PER_JOB),
                parse_tids,
                &mut errs,
            );
            let known = self
                .jobs
                .get(job)
                .map(|j| j.known.clone())
                .unwrap_or_default();
            let new: Vec<TaskInfo> = tids
                .iter()
                .filter(|t| !known.contains(t))
                .filter_map(|t| {
                    let p = self.proc_root.join(t.to_string()).join("status");
                    // A task that exited since `tasks` was read is skipped.
                    parse_status(&std::fs::read_to_string(p).ok()?).ok()
                })
                .collect();
            let open = tasks_to_open(&known, &new);
            self.open(*job, &open);
            let j = self.jobs.entry(*job).or_default();
            j.known = tids.into_iter().collect();
        }
        // Ended jobs' `tasks` files close here.
        self.hot.end_tick();
        if !errs.is_empty() {
            *self.errors.entry("cgroup").or_default() += errs.len() as u64;
        }
        let due = self.tick.is_multiple_of(u64::from(self.read_every));
        self.tick += 1;
        for (job, j) in &mut self.jobs {
            let id = job.to_string();
            for ((kind, cs), last) in j.counters.iter_mut().zip(j.last.iter_mut()) {
                if due || last.is_nan() {
                    let sum: f64 = cs
                        .iter_mut()
                        .filter_map(|c| c.read_count_and_time().ok())
                        .map(|ct| scale_count(ct.count, ct.time_enabled, ct.time_running))
                        .sum();
                    // Never below the last value (a counter that failed to
                    // read this time counts as 0).
                    *last = if last.is_nan() {
                        sum * kind.unit_scale()
                    } else {
                        last.max(sum * kind.unit_scale())
                    };
                }
                out.push(Observation::counter(
                    kind.job_metric(),
                    &self.node,
                    &[("job_id", &id)],
                    *last,
                ));
            }
        }
        for (kind, n) in &self.errors {
            out.push(Observation::counter(
                "canopy_leaf_collector_errors_total",
                &self.node,
                &[("collector", "perf_event_tasks"), ("kind", kind)],
                *n as f64,
            ));
        }
        errs.into_iter().next().map_or(Ok(()), Err)
    }
}

/// The TIDs of a `tasks` file (lines that are not one are skipped: a task
/// list is only a hint of what to count).
fn parse_tids(text: &str) -> Result<Vec<u32>, LeafError> {
    Ok(text
        .lines()
        .filter_map(|l| l.trim().parse::<u32>().ok())
        .collect())
}

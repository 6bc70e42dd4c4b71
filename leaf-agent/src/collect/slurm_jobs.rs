//! Slurm jobs on this host, fully attributed: the cgroup v1 scan
//! ([`super::cgroup_v1`]) for CPU and memory, `/proc/<pid>/io` over each
//! job's processes for I/O (monotonic through [`JobIo`]), and the scheduler's
//! metadata ([`crate::sched`]) for labels and allocations.
//!
//! Every job series carries `job_id`, `user`, `account`, `partition` (and
//! `node`). The labels of a job are fixed the first time it is reported, so
//! a series never changes identity: the collector waits for the scheduler's
//! answer up to `label_wait_ms`, then falls back to the user name of the
//! cgroup's uid (`/etc/passwd`) and empty account and partition.
//!
//! A job's processes are the PIDs in `cgroup.procs` anywhere under its job
//! directory in the memory hierarchy (all steps, slurmstepd included, whose
//! counters hold the children it reaped), or the cpuacct one if memory is
//! not mounted. Processes outside jobs are not exported per process.
//!
//! Without any Slurm cgroup on the host (`proctrack/linuxproc`), jobs are
//! found in `/proc` instead ([`super::slurm_procs`]): CPU time is the
//! carried `utime + stime + cutime + cstime` of the job's processes (at
//! `USER_HZ` = 100 ticks per second, as Linux exports it on every
//! architecture), I/O the same `/proc/<pid>/io` carry. While no slurmstepd
//! runs, `/proc` is scanned only every tenth tick.
//!
//! Failures degrade: an unreadable process or file costs that value, a
//! scheduler that fails or answers garbage costs the account and partition
//! labels; each failure counts in `canopy_leaf_collector_errors_total{collector,
//! kind}` and the first error of a tick is returned for the agent's
//! rate-limited log.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::cgroup_v1::{self, JobCgroup};
use super::cgroup_v2;
use super::hot_file::HotFiles;
use super::proc_io::{self, IoCounters};
use super::slurm_procs;
use super::{Collector, Observation};
use crate::attrib::{CpuTicks, JobCarry, JobIo};
use crate::error::LeafError;
use crate::sched::cache::{CachePolicy, MetaCache};
use crate::sched::worker::ScontrolWorker;
use crate::sched::{JobMeta, parse_passwd};
use canopy_proto::model::{Labels, MetricKind};

/// One cgroup v2 root's Slurm job directories and whether a
/// `*slurmstepd.scope` exists there.
type V2Jobs = (Vec<(u64, PathBuf)>, bool);

/// Processes read per job at most (a fork bomb must not stall the tick).
const MAX_PIDS_PER_JOB: usize = 4096;
/// Processes read by a linuxproc scan at most.
const MAX_PROCS: usize = 65_536;
/// `/proc/<pid>/stat` times are in USER_HZ ticks: 100 per second on Linux.
const NS_PER_TICK: u64 = 10_000_000;

/// Settings of [`SlurmJobsCollector`].
#[derive(Clone, Debug)]
pub struct SlurmJobsOptions {
    /// The `scontrol` program; `None` runs without scheduler metadata.
    pub scontrol: Option<String>,
    /// Timeout of one `scontrol` call.
    pub timeout: Duration,
    /// How often to ask.
    pub policy: CachePolicy,
    /// How long a new job waits for its metadata before it is reported
    /// with fallback labels.
    pub label_wait_ms: i64,
    /// The passwd file for the uid -> user fallback.
    pub passwd: PathBuf,
}

impl Default for SlurmJobsOptions {
    fn default() -> Self {
        SlurmJobsOptions {
            scontrol: Some("scontrol".into()),
            timeout: Duration::from_secs(5),
            policy: CachePolicy::default(),
            label_wait_ms: 10_000,
            passwd: PathBuf::from("/etc/passwd"),
        }
    }
}

/// The labels a job is reported with, fixed at its first report.
#[derive(Clone, Debug, PartialEq, Eq)]
struct JobLabels {
    job_id: String,
    user: String,
    account: String,
    partition: String,
}

/// Slurm jobs with I/O and scheduler attribution; see the module docs.
#[derive(Debug)]
pub struct SlurmJobsCollector {
    node: String,
    proc_root: PathBuf,
    cgroup_root: PathBuf,
    opts: SlurmJobsOptions,
    worker: Option<ScontrolWorker>,
    meta: MetaCache,
    io: HashMap<u64, JobIo>,
    /// linuxproc mode: carried CPU ticks per job.
    cpu: HashMap<u64, JobCarry<CpuTicks>>,
    /// linuxproc mode: ticks to wait before the next `/proc` scan.
    proc_skip: u32,
    /// linuxproc mode: what the last `/proc` scan saw, so the next reads
    /// only processes that may have changed.
    proc_memo: slurm_procs::ProcMemo,
    labels: HashMap<u64, JobLabels>,
    /// Each reported job's label sets, reused from tick to tick.
    series: HashMap<u64, JobSeries>,
    first_seen: HashMap<u64, i64>,
    users: Vec<(u32, String)>,
    now_ms: i64,
    errors: BTreeMap<&'static str, u64>,
    /// Job files read every tick, kept open while their job runs.
    hot: HotFiles,
    /// This tick's job directory listings (shared with per-task perf).
    dirs: cgroup_v1::JobDirsCache,
}

impl SlurmJobsCollector {
    /// A collector for `node` reading `proc_root` and `cgroup_root`; starts
    /// the `scontrol` thread when `opts.scontrol` is set.
    pub fn new(node: &str, proc_root: &Path, cgroup_root: &Path, opts: SlurmJobsOptions) -> Self {
        let worker = opts.scontrol.as_deref().and_then(|p| {
            ScontrolWorker::spawn(p, opts.timeout)
                .map_err(|e| tracing::warn!(error = %e, "no scheduler metadata thread"))
                .ok()
        });
        SlurmJobsCollector {
            node: node.to_string(),
            proc_root: proc_root.to_path_buf(),
            cgroup_root: cgroup_root.to_path_buf(),
            meta: MetaCache::new(opts.policy),
            opts,
            worker,
            io: HashMap::new(),
            cpu: HashMap::new(),
            proc_skip: 0,
            proc_memo: slurm_procs::ProcMemo::default(),
            labels: HashMap::new(),
            series: HashMap::new(),
            first_seen: HashMap::new(),
            users: Vec::new(),
            now_ms: 0,
            errors: BTreeMap::new(),
            hot: HotFiles::new(),
            dirs: cgroup_v1::JobDirsCache::new(),
        }
    }

    fn count(&mut self, kind: &'static str, first: &mut Option<LeafError>, e: LeafError) {
        *self.errors.entry(kind).or_default() += 1;
        first.get_or_insert(e);
    }

    /// Job id -> its job directories in the hierarchy that lists processes.
    fn process_dirs(&self, v2: &[V2Jobs], errs: &mut Vec<LeafError>) -> HashMap<u64, Vec<PathBuf>> {
        let mut out: HashMap<u64, Vec<PathBuf>> = HashMap::new();
        for ctl in ["memory", "cpuacct"] {
            let ctl = self.cgroup_root.join(ctl);
            match self.dirs.job_dirs_seen(&ctl, self.now_ms, &mut false) {
                Ok(dirs) => {
                    for (_, id, p) in dirs {
                        out.entry(id).or_default().push(p);
                    }
                }
                Err(e) => errs.push(e),
            }
            if !out.is_empty() {
                break;
            }
        }
        for (dirs, _) in v2 {
            for (id, p) in dirs {
                out.entry(*id).or_default().push(p.clone());
            }
        }
        out
    }

    /// The Slurm jobs of the cgroup v2 hierarchies, where one may be: the
    /// root itself (pure v2) or `unified/` (hybrid), each with a
    /// `system.slice`. Listed through the shared cache (again only when a
    /// directory changed).
    fn v2_listings(&self, errs: &mut Vec<LeafError>) -> Vec<V2Jobs> {
        let mut out = Vec::new();
        for r in [self.cgroup_root.clone(), self.cgroup_root.join("unified")] {
            match self.dirs.v2_job_dirs(&r, self.now_ms) {
                Ok(Some(l)) => out.push(l),
                Ok(None) => {}
                Err(e) => errs.push(e),
            }
        }
        out
    }

    /// Whether Slurm's cgroup layout exists here (then jobs come from it).
    /// `v1`: what this tick's v1 scan saw (a `slurm*` directory under
    /// `memory/` or `cpuacct/`); `v2`: whether a `*slurmstepd.scope` exists.
    fn cgroup_layout(v1: bool, v2: &[V2Jobs]) -> bool {
        v1 || v2.iter().any(|(_, scope)| *scope)
    }

    /// linuxproc mode: jobs from `/proc`, with their carried CPU and I/O.
    fn scan_procs(
        &mut self,
        jobs: &mut Vec<JobCgroup>,
        io: &mut HashMap<u64, IoCounters>,
        first: &mut Option<LeafError>,
    ) {
        if self.proc_skip > 0 {
            self.proc_skip -= 1;
            return;
        }
        let s = slurm_procs::scan_memo(&self.proc_root, MAX_PROCS, &mut self.proc_memo);
        for e in s.errors {
            self.count("proc_scan", first, e);
        }
        if !s.saw_stepd {
            self.proc_skip = 9;
        }
        for (job, procs) in s.jobs {
            let cpu: Vec<_> = procs.iter().map(|p| (p.0, p.1, p.2)).collect();
            let ios: Vec<_> = procs.iter().map(|p| (p.0, p.1, p.3)).collect();
            let ticks = self.cpu.entry(job).or_default().update_with(&cpu);
            io.insert(job, self.io.entry(job).or_default().update_with(&ios));
            jobs.push(JobCgroup {
                job_id: job,
                cpu_usage_ns: Some(ticks.0.saturating_mul(NS_PER_TICK)),
                ..JobCgroup::default()
            });
        }
        let ids: Vec<u64> = jobs.iter().map(|j| j.job_id).collect();
        self.cpu.retain(|id, _| ids.contains(id));
    }

    /// Jobs of both layouts; a job seen in v1 is not taken again from v2.
    /// Also says whether Slurm's v1 layout is there.
    fn scan(&mut self, v2: &[V2Jobs], first: &mut Option<LeafError>) -> (Vec<JobCgroup>, bool) {
        let (mut jobs, errs, v1_layout) =
            cgroup_v1::scan_jobs_hot(&self.cgroup_root, &mut self.hot, &self.dirs, self.now_ms);
        for e in errs {
            self.count("cgroup", first, e);
        }
        for (dirs, _) in v2 {
            let (v2, errs) = cgroup_v2::scan_listed(dirs, &mut self.hot);
            for e in errs {
                self.count("cgroup", first, e);
            }
            for j in v2 {
                if !jobs.iter().any(|k| k.job_id == j.job.job_id) {
                    jobs.push(j.job);
                }
            }
        }
        (jobs, v1_layout)
    }

    /// Lists the job directories through `dirs`, shared with other
    /// collectors of the same ticks.
    pub fn with_dirs_cache(mut self, dirs: cgroup_v1::JobDirsCache) -> Self {
        self.dirs = dirs;
        self
    }

    /// Job files held open (closed when their job ends).
    #[cfg(test)]
    pub(crate) fn open_job_files(&self) -> usize {
        self.hot.open_count()
    }

    fn user_of(&mut self, uid: u32) -> String {
        let find =
            |u: &[(u32, String)]| u.iter().find(|(id, _)| *id == uid).map(|(_, n)| n.clone());
        if let Some(n) = find(&self.users) {
            return n;
        }
        if let Ok(t) = std::fs::read_to_string(&self.opts.passwd) {
            self.users = parse_passwd(&t);
        }
        find(&self.users).unwrap_or_else(|| uid.to_string())
    }

    /// Fixes a job's labels once its metadata arrived or the wait is over.
    fn labels_for(&mut self, job: &JobCgroup) -> Option<JobLabels> {
        if let Some(l) = self.labels.get(&job.job_id) {
            return Some(l.clone());
        }
        let since = *self.first_seen.entry(job.job_id).or_insert(self.now_ms);
        let meta = self.meta.get(job.job_id).cloned();
        let waited = self.now_ms - since >= self.opts.label_wait_ms;
        if meta.is_none() && self.worker.is_some() && !waited {
            return None;
        }
        let l = match meta {
            Some(m) => JobLabels {
                job_id: job.job_id.to_string(),
                user: m.user,
                account: m.account,
                partition: m.partition,
            },
            None => JobLabels {
                job_id: job.job_id.to_string(),
                user: job.uid.map(|u| self.user_of(u)).unwrap_or_default(),
                account: String::new(),
                partition: String::new(),
            },
        };
        self.labels.insert(job.job_id, l.clone());
        Some(l)
    }

    fn scheduler_round(&mut self, ids: &[u64], first: &mut Option<LeafError>) {
        let Some(w) = &self.worker else { return };
        let answers = w.answers();
        let mut failed = Vec::new();
        for (id, r) in answers {
            match r {
                Ok(m) => self.meta.answer(id, Some(m), self.now_ms),
                Err(e) => {
                    self.meta.answer(id, None, self.now_ms);
                    failed.push(e);
                }
            }
        }
        let Some(w) = &self.worker else { return };
        let mut refused = Vec::new();
        for id in self.meta.due(ids, self.now_ms) {
            if !w.ask(id) {
                refused.push(id);
            }
        }
        for id in refused {
            self.meta.answer(id, None, self.now_ms);
        }
        for e in failed {
            self.count("scheduler", first, e);
        }
    }
}

/// The series of one job, in the order [`emit`] writes them.
const METRICS: [(&str, MetricKind); 11] = [
    ("canopy_job_cpu_seconds_total", MetricKind::Counter),
    ("canopy_job_io_read_bytes_total", MetricKind::Counter),
    ("canopy_job_io_write_bytes_total", MetricKind::Counter),
    ("canopy_job_io_read_ops_total", MetricKind::Counter),
    ("canopy_job_io_write_ops_total", MetricKind::Counter),
    ("canopy_job_memory_bytes", MetricKind::Gauge),
    ("canopy_job_memory_rss_bytes", MetricKind::Gauge),
    ("canopy_job_memory_cache_bytes", MetricKind::Gauge),
    ("canopy_job_memory_allocated_bytes", MetricKind::Gauge),
    ("canopy_job_cpus_allocated", MetricKind::Gauge),
    ("canopy_job_gpus_allocated", MetricKind::Gauge),
];

/// A job's label sets, one per entry of [`METRICS`], built at its first
/// report and reused every tick after (a job's labels are fixed then), so
/// a tick clones a handle per series instead of sorting and copying labels.
type JobSeries = [Option<Labels>; METRICS.len()];

fn emit(
    node: &str,
    l: &JobLabels,
    series: &mut JobSeries,
    j: &JobCgroup,
    m: Option<&JobMeta>,
    io: Option<IoCounters>,
    out: &mut Vec<Observation>,
) {
    let labels = [
        ("job_id", l.job_id.as_str()),
        ("user", l.user.as_str()),
        ("account", l.account.as_str()),
        ("partition", l.partition.as_str()),
    ];
    let mut push = |i: usize, value: f64| {
        let (name, kind) = METRICS[i];
        let labels = series[i]
            .get_or_insert_with(|| Observation::new(name, kind, node, &labels, value).labels)
            .clone();
        out.push(Observation {
            labels,
            kind,
            value,
        });
    };
    if let Some(ns) = j.cpu_usage_ns {
        push(0, ns as f64 / 1e9);
    }
    if let Some(io) = io {
        let counters = [io.read_bytes, io.write_bytes, io.read_ops, io.write_ops];
        for (i, v) in counters.into_iter().enumerate() {
            push(1 + i, v as f64);
        }
    }
    let gauges = [
        j.memory_usage_bytes,
        j.memory_rss_bytes,
        j.memory_cache_bytes,
        m.and_then(|m| m.memory_bytes).or(j.memory_limit_bytes),
        m.and_then(|m| m.cpus).or(j.cpus.map(u64::from)),
        m.map(|m| m.gpus),
    ];
    for (i, v) in gauges.into_iter().enumerate() {
        if let Some(v) = v {
            push(5 + i, v as f64);
        }
    }
}

impl Collector for SlurmJobsCollector {
    fn name(&self) -> &'static str {
        "slurm_jobs"
    }

    fn set_tick_time(&mut self, ts_ms: i64) {
        self.now_ms = ts_ms;
    }

    fn collect(&mut self, out: &mut Vec<Observation>) -> Result<(), LeafError> {
        let mut first = None;
        let mut errs = Vec::new();
        let v2 = self.v2_listings(&mut errs);
        for e in errs.drain(..) {
            self.count("cgroup", &mut first, e);
        }
        let (mut jobs, v1_layout) = self.scan(&v2, &mut first);
        let mut proc_io: HashMap<u64, IoCounters> = HashMap::new();
        if jobs.is_empty() && !Self::cgroup_layout(v1_layout, &v2) {
            self.scan_procs(&mut jobs, &mut proc_io, &mut first);
        }
        let ids: Vec<u64> = jobs.iter().map(|j| j.job_id).collect();
        self.scheduler_round(&ids, &mut first);

        // Only jobs' I/O needs their process directories: no jobs, no listing.
        let dirs = if jobs.iter().any(|j| !proc_io.contains_key(&j.job_id)) {
            self.process_dirs(&v2, &mut errs)
        } else {
            HashMap::new()
        };
        for e in errs.drain(..) {
            self.count("cgroup", &mut first, e);
        }
        for j in &jobs {
            let io = proc_io.get(&j.job_id).copied().or_else(|| {
                dirs.get(&j.job_id).map(|d| {
                    // The job's processes: PIDs in `cgroup.procs` below its job
                    // directories.
                    let pids = self.dirs.ids_in_trees(
                        &mut self.hot,
                        self.now_ms,
                        d,
                        ("cgroup.procs", MAX_PIDS_PER_JOB),
                        proc_io::parse_pid_list,
                        &mut errs,
                    );
                    let mut samples = Vec::with_capacity(pids.len());
                    for pid in pids {
                        match proc_io::read_proc(&self.proc_root, pid) {
                            Ok(Some(s)) => samples.push(s),
                            Ok(None) => {}
                            Err(e) => errs.push(e),
                        }
                    }
                    self.io.entry(j.job_id).or_default().update(&samples)
                })
            });
            for e in errs.drain(..) {
                self.count("proc_io", &mut first, e);
            }
            let Some(l) = self.labels_for(j) else {
                continue;
            };
            let meta = self.meta.get(j.job_id);
            let series = self.series.entry(j.job_id).or_default();
            emit(&self.node, &l, series, j, meta, io, out);
        }
        // Ended jobs: forget them (and close their files); their series go stale.
        self.hot.end_tick();
        self.io.retain(|id, _| ids.contains(id));
        self.labels.retain(|id, _| ids.contains(id));
        self.series.retain(|id, _| ids.contains(id));
        self.first_seen.retain(|id, _| ids.contains(id));
        for (kind, n) in &self.errors {
            out.push(Observation::counter(
                "canopy_leaf_collector_errors_total",
                &self.node,
                &[("collector", "slurm_jobs"), ("kind", kind)],
                *n as f64,
            ));
        }
        first.map_or(Ok(()), Err)
    }
}

//! Slurm jobs from cgroup v1: `<root>/<controller>/slurm*/uid_<uid>/job_<id>/`.
//!
//! Slurm's Debian build (multiple-slurmd support) names its root
//! `slurm_<NodeName>`, upstream builds name it `slurm`; both match `slurm*`,
//! and several roots (several slurmd on one host) are scanned. A job present
//! under several roots (a multi-node job on two slurmd of the same host) is
//! reported once, summed, so no two observations share a label set.
//!
//! Metrics (label `job_id`, `uid`): `canopy_job_cpu_seconds_total` (counter,
//! `cpuacct.usage`), `canopy_job_memory_bytes` (`memory.usage_in_bytes`, page
//! cache included as the kernel charges it), `canopy_job_memory_rss_bytes` and
//! `canopy_job_memory_cache_bytes` (`memory.stat` `total_rss`/`total_cache`),
//! `canopy_job_memory_allocated_bytes` (`memory.limit_in_bytes`, when limited),
//! `canopy_job_cpus_allocated` (`cpuset.cpus`). User, account and partition
//! come later from scheduler attribution.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use super::dir_watch::DirWatch;
use super::hot_file::HotFiles;
use super::{Collector, Observation};
use crate::error::LeafError;

/// Limits at or above this are "unlimited" (the kernel prints
/// `PAGE_COUNTER_MAX` pages, 9223372036854771712 with 4 KiB pages).
const UNLIMITED: u64 = 1 << 62;

/// What the cgroup files say about one job on this host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobCgroup {
    /// Slurm job id, from `job_<id>`.
    pub job_id: u64,
    /// Owner uid, from `uid_<uid>` (`None` in layouts without it, cgroup v2).
    pub uid: Option<u32>,
    /// `cpuacct.usage`: CPU time of all steps, nanoseconds.
    pub cpu_usage_ns: Option<u64>,
    /// `memory.usage_in_bytes`.
    pub memory_usage_bytes: Option<u64>,
    /// `memory.stat` `total_rss`.
    pub memory_rss_bytes: Option<u64>,
    /// `memory.stat` `total_cache`.
    pub memory_cache_bytes: Option<u64>,
    /// `memory.limit_in_bytes`, `None` when unlimited.
    pub memory_limit_bytes: Option<u64>,
    /// Number of CPUs in `cpuset.cpus`.
    pub cpus: Option<u32>,
}

/// Parses a cgroup file holding one unsigned integer (`cpuacct.usage`,
/// `memory.usage_in_bytes`, `memory.limit_in_bytes`).
pub fn parse_u64_file(format: &'static str, text: &str) -> Result<u64, LeafError> {
    let t = text.trim();
    t.parse()
        .map_err(|_| LeafError::parse(format, 1, format!("not an unsigned integer: {t:?}")))
}

/// Counts the CPUs of a cpu list such as `0-3,8,10-11` (`cpuset.cpus`).
pub fn parse_cpu_list(text: &str) -> Result<u32, LeafError> {
    const FORMAT: &str = "cpuset.cpus";
    let mut count: u32 = 0;
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let bad = || LeafError::parse(FORMAT, 1, format!("bad range {part:?}"));
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<u32>(), b.parse::<u32>()),
            None => (part.parse::<u32>(), part.parse::<u32>()),
        };
        let (lo, hi) = (lo.map_err(|_| bad())?, hi.map_err(|_| bad())?);
        if hi < lo {
            return Err(bad());
        }
        count = count.saturating_add(hi - lo + 1);
    }
    Ok(count)
}

/// Parses `memory.stat`, returning (`total_rss`, `total_cache`) in bytes.
pub fn parse_memory_stat(text: &str) -> Result<(Option<u64>, Option<u64>), LeafError> {
    const FORMAT: &str = "memory.stat";
    let (mut rss, mut cache) = (None, None);
    for (i, line) in text.lines().enumerate() {
        let Some((key, val)) = line.split_once(' ') else {
            continue;
        };
        let slot = match key {
            "total_rss" => &mut rss,
            "total_cache" => &mut cache,
            _ => continue,
        };
        *slot = Some(super::field(FORMAT, i + 1, key, Some(val.trim()))?);
    }
    Ok((rss, cache))
}

/// The job id of a `job_<id>` directory name.
pub fn parse_job_dir(name: &str) -> Option<u64> {
    name.strip_prefix("job_")?.parse().ok()
}

/// The uid of a `uid_<uid>` directory name.
pub fn parse_uid_dir(name: &str) -> Option<u32> {
    name.strip_prefix("uid_")?.parse().ok()
}

/// Subdirectories of `dir` as (name, path), sorted by name; a missing `dir`
/// is empty (the cgroup went away, or the controller is not mounted).
pub(crate) fn subdirs(dir: &Path) -> io::Result<Vec<(String, PathBuf)>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut v = Vec::new();
    for entry in rd {
        let entry = entry?;
        if !entry.file_type()?.is_dir() {
            continue;
        }
        if let Ok(name) = entry.file_name().into_string() {
            v.push((name, entry.path()));
        }
    }
    v.sort();
    Ok(v)
}

fn io_err(p: &Path) -> impl FnOnce(io::Error) -> LeafError + '_ {
    move |e| LeafError::io(p, e)
}

/// The listings of the Slurm job directories, shared by the collectors that
/// walk them (the job collector and per-task perf both list `cpuacct/`,
/// `memory/`, `cpuset/` and the cgroup v2 `system.slice` each tick: about
/// five syscalls per directory). Clones share.
///
/// A listing is made again when a directory it walked gained or lost an
/// entry, as inotify ([`DirWatch`]) reports, checked once a tick (one
/// `read`); otherwise it is reused, at most [`RELIST_EVERY`] ticks. So a
/// job made or removed is seen at the next tick, as with a listing a tick.
/// A listing that could not be watched whole (a directory missing, no
/// inotify) is made again the next tick. A tick time of 0 (unset) always
/// lists afresh.
#[derive(Clone, Debug, Default)]
pub struct JobDirsCache(Arc<Mutex<ListingCache>>);

/// Ticks a watched listing is reused at most: a safety net, inotify reports
/// every change of the watched directories.
pub const RELIST_EVERY: u64 = 60;

/// Job directories of one controller: (uid, job id, path).
type JobDirs = Vec<(u32, u64, PathBuf)>;

/// Listings (job dirs, whether a `slurm*` root was seen) of one controller.
type Listing = (JobDirs, bool);

/// A cgroup v2 root's Slurm job dirs and whether a `*slurmstepd.scope`
/// exists; `None` without a `system.slice` directory.
pub(crate) type V2Listing = Option<(Vec<(u64, PathBuf)>, bool)>;

#[derive(Debug, Default)]
struct ListingCache {
    tick_ms: i64,
    /// Ticks seen (distinct tick times).
    ticks: u64,
    /// Tick at which the kept listings were made.
    listed_at: u64,
    by_controller: HashMap<PathBuf, (Listing, bool)>,
    v2: HashMap<PathBuf, (V2Listing, bool)>,
    /// Directory trees below job directories (steps, tasks).
    trees: HashMap<PathBuf, (Vec<PathBuf>, bool)>,
    /// `None` before the first tick; `Some(None)`: no inotify.
    watch: Option<Option<DirWatch>>,
    /// Walks made (listings not taken from the cache), for tests.
    walks: u64,
}

impl ListingCache {
    /// Moves to tick `tick_ms`: keeps the watched listings unless a watched
    /// directory changed or they are [`RELIST_EVERY`] ticks old.
    fn at_tick(&mut self, tick_ms: i64) {
        if self.tick_ms == tick_ms {
            return;
        }
        self.tick_ms = tick_ms;
        self.ticks += 1;
        let watch = self.watch.get_or_insert_with(DirWatch::new);
        let changed = match watch {
            Some(w) => w.changed().unwrap_or_else(|e| {
                tracing::info!(error = %e, "inotify failed: job directories are listed every tick");
                *watch = None;
                true
            }),
            None => true,
        };
        if changed || self.ticks - self.listed_at >= RELIST_EVERY {
            self.by_controller.clear();
            self.v2.clear();
            self.trees.clear();
            if let Some(Some(w)) = &mut self.watch {
                w.reset_count();
            }
            self.listed_at = self.ticks;
        } else {
            // Keep only the listings whose every directory is watched.
            self.by_controller.retain(|_, (_, watched)| *watched);
            self.v2.retain(|_, (_, watched)| *watched);
            self.trees.retain(|_, (_, watched)| *watched);
        }
    }

    /// A hook for the walks: watches each directory before it is listed.
    fn watcher(&mut self) -> impl FnMut(&Path) -> bool + '_ {
        let mut w = self.watch.as_mut().and_then(Option::as_mut);
        move |dir: &Path| w.as_mut().is_some_and(|w| w.watch(dir))
    }
}

impl JobDirsCache {
    /// A cache of its own (share it by cloning).
    pub fn new() -> Self {
        Self::default()
    }

    /// Listings made so far (not taken from the cache).
    #[cfg(test)]
    pub(crate) fn walks(&self) -> u64 {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).walks
    }

    /// [`job_dirs_seen`] of `controller` at tick `tick_ms`, listed again
    /// only when needed (see the type's docs). Errors are not kept.
    pub(crate) fn job_dirs_seen(
        &self,
        controller: &Path,
        tick_ms: i64,
        slurm_root: &mut bool,
    ) -> Result<Vec<(u32, u64, PathBuf)>, LeafError> {
        if tick_ms == 0 {
            return job_dirs_seen(controller, slurm_root);
        }
        let mut c = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        c.at_tick(tick_ms);
        if let Some(((dirs, seen), _)) = c.by_controller.get(controller) {
            *slurm_root |= *seen;
            return Ok(dirs.clone());
        }
        let mut seen = false;
        c.walks += 1;
        let (dirs, watched) = job_dirs_walk(controller, &mut seen, &mut c.watcher())?;
        *slurm_root |= seen;
        c.by_controller
            .insert(controller.to_path_buf(), ((dirs.clone(), seen), watched));
        Ok(dirs)
    }

    /// The Slurm job directories of the cgroup v2 hierarchy at `root`
    /// ([`cgroup_v2::job_dirs`](super::cgroup_v2::job_dirs)) and whether a
    /// `*slurmstepd.scope` exists; `Ok(None)` without a `system.slice`.
    /// Listed again only when needed, as [`JobDirsCache::job_dirs_seen`].
    pub(crate) fn v2_job_dirs(&self, root: &Path, tick_ms: i64) -> Result<V2Listing, LeafError> {
        if tick_ms == 0 {
            return super::cgroup_v2::job_dirs_walk(root, &mut |_| false).map(|(l, _)| l);
        }
        let mut c = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        c.at_tick(tick_ms);
        if let Some((l, _)) = c.v2.get(root) {
            return Ok(l.clone());
        }
        c.walks += 1;
        let (l, watched) = super::cgroup_v2::job_dirs_walk(root, &mut c.watcher())?;
        c.v2.insert(root.to_path_buf(), (l.clone(), watched));
        Ok(l)
    }
}

/// Most directories of one job's tree ([`JobDirsCache::tree`]).
pub const MAX_TREE_DIRS: usize = 4096;

impl JobDirsCache {
    /// `dir` and every directory below it (a job's steps and tasks), at
    /// most [`MAX_TREE_DIRS`] (a missing `dir` is listed alone, so its
    /// files read as missing). Listed again only
    /// when needed, as [`JobDirsCache::job_dirs_seen`]: a job's processes
    /// are read from `cgroup.procs` or `tasks` in each, every tick, without
    /// listing the tree every tick. Errors (unlisted directories) are
    /// returned and not kept.
    pub(crate) fn tree(&self, dir: &Path, tick_ms: i64) -> (Vec<PathBuf>, Vec<LeafError>) {
        if tick_ms == 0 {
            let (dirs, errs, _) = tree_walk(dir, &mut |_| false);
            return (dirs, errs);
        }
        let mut c = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        c.at_tick(tick_ms);
        if let Some((dirs, _)) = c.trees.get(dir) {
            return (dirs.clone(), Vec::new());
        }
        c.walks += 1;
        let (dirs, errs, watched) = tree_walk(dir, &mut c.watcher());
        c.trees.insert(
            dir.to_path_buf(),
            (dirs.clone(), watched && errs.is_empty()),
        );
        (dirs, errs)
    }

    /// The ids (pids or tids) listed in the file `name` of every directory
    /// of the trees of `dirs` (read through `hot` on a fresh descriptor,
    /// parsed by `parse`),
    /// sorted, unique and at most `cap`: a job's processes or tasks, every
    /// tick, with the trees listed only when they changed. Unreadable or
    /// unparsable files are reported in `errs` and skipped.
    pub(crate) fn ids_in_trees(
        &self,
        hot: &mut HotFiles,
        tick_ms: i64,
        dirs: &[PathBuf],
        (name, cap): (&str, usize),
        parse: fn(&str) -> Result<Vec<u32>, LeafError>,
        errs: &mut Vec<LeafError>,
    ) -> Vec<u32> {
        let mut ids = Vec::new();
        'dirs: for top in dirs {
            let (all, e) = self.tree(top, tick_ms);
            errs.extend(e);
            for d in all {
                if ids.len() >= cap {
                    break 'dirs;
                }
                // A fresh descriptor each time: the kernel's pid list of a
                // kept one can be stale (see `HotFiles::read_fresh_opt`).
                match hot.read_fresh_opt(&d.join(name)) {
                    Ok(Some(t)) => match parse(t) {
                        Ok(p) => ids.extend(p),
                        Err(e) => errs.push(e),
                    },
                    Ok(None) => {}
                    Err(e) => errs.push(e),
                }
            }
        }
        ids.sort_unstable();
        ids.dedup();
        ids.truncate(cap);
        ids
    }
}

/// `dir` and the directories below it (see [`JobDirsCache::tree`]),
/// calling `watch` on each before listing it; the errors met, and whether
/// every directory was watched and the tree was listed whole.
fn tree_walk(
    dir: &Path,
    watch: &mut dyn FnMut(&Path) -> bool,
) -> (Vec<PathBuf>, Vec<LeafError>, bool) {
    let (mut out, mut errs, mut watched) = (Vec::new(), Vec::new(), true);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        if out.len() >= MAX_TREE_DIRS {
            watched = false;
            break;
        }
        watched &= watch(&d);
        match subdirs(&d) {
            Ok(s) => stack.extend(s.into_iter().map(|(_, p)| p)),
            Err(e) => errs.push(LeafError::io(&d, e)),
        }
        out.push(d);
    }
    (out, errs, watched)
}

/// Every `slurm*/uid_*/job_*` directory under one controller, as
/// (uid, job id, path), setting `slurm_root` when a `slurm*` directory
/// exists (Slurm's layout, with or without jobs).
pub(crate) fn job_dirs_seen(
    controller: &Path,
    slurm_root: &mut bool,
) -> Result<Vec<(u32, u64, PathBuf)>, LeafError> {
    job_dirs_walk(controller, slurm_root, &mut |_| false).map(|(d, _)| d)
}

/// [`job_dirs_seen`], calling `watch` on each directory before listing it;
/// also says whether every `watch` succeeded (the listing may be kept).
pub(crate) fn job_dirs_walk(
    controller: &Path,
    slurm_root: &mut bool,
    watch: &mut dyn FnMut(&Path) -> bool,
) -> Result<(JobDirs, bool), LeafError> {
    let mut out = Vec::new();
    let mut watched = watch(controller);
    for (root, root_path) in subdirs(controller).map_err(io_err(controller))? {
        if !root.starts_with("slurm") {
            continue;
        }
        *slurm_root = true;
        watched &= watch(&root_path);
        for (u, upath) in subdirs(&root_path).map_err(io_err(&root_path))? {
            let Some(uid) = parse_uid_dir(&u) else {
                continue;
            };
            watched &= watch(&upath);
            for (j, jpath) in subdirs(&upath).map_err(io_err(&upath))? {
                if let Some(job) = parse_job_dir(&j) {
                    out.push((uid, job, jpath));
                }
            }
        }
    }
    Ok((out, watched))
}

fn add(slot: &mut Option<u64>, v: Option<u64>) {
    if let Some(v) = v {
        *slot = Some(slot.unwrap_or(0).saturating_add(v));
    }
}

/// Scans the Slurm jobs under a cgroup v1 root (normally `/sys/fs/cgroup`).
///
/// Returns the jobs found, ordered by job id, and the errors met on the way
/// (an unreadable job file costs that value, not the whole scan).
pub fn scan_jobs(cgroup_root: &Path) -> (Vec<JobCgroup>, Vec<LeafError>) {
    let (jobs, errors, _) = scan_jobs_layout(cgroup_root);
    (jobs, errors)
}

/// [`scan_jobs`], also saying whether `memory/` or `cpuacct/` holds a
/// `slurm*` directory (Slurm's v1 layout is there even with no job), so
/// the caller need not list them again.
pub fn scan_jobs_layout(cgroup_root: &Path) -> (Vec<JobCgroup>, Vec<LeafError>, bool) {
    scan_jobs_hot(cgroup_root, &mut HotFiles::new(), &JobDirsCache::new(), 0)
}

/// [`scan_jobs_layout`] reading the job files through `files`, which keeps
/// them open from tick to tick (the caller ends its ticks), and listing
/// the job directories through `dirs` for tick `tick_ms`.
pub fn scan_jobs_hot(
    cgroup_root: &Path,
    files: &mut HotFiles,
    dirs: &JobDirsCache,
    tick_ms: i64,
) -> (Vec<JobCgroup>, Vec<LeafError>, bool) {
    let mut layout = false;
    let mut jobs: BTreeMap<u64, JobCgroup> = BTreeMap::new();
    let mut errors = Vec::new();
    let controllers = ["cpuacct", "memory", "cpuset"];
    for ctl in controllers {
        let mut seen = false;
        let listed = dirs.job_dirs_seen(&cgroup_root.join(ctl), tick_ms, &mut seen);
        layout |= seen && ctl != "cpuset";
        let dirs = match listed {
            Ok(d) => d,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        for (uid, job_id, dir) in dirs {
            let job = jobs.entry(job_id).or_insert_with(|| JobCgroup {
                job_id,
                uid: Some(uid),
                ..JobCgroup::default()
            });
            if let Err(e) = read_job_files(files, ctl, &dir, job) {
                errors.push(e);
            }
        }
    }
    (jobs.into_values().collect(), errors, layout)
}

/// Adds one controller's files of one job directory into `job`.
fn read_job_files(
    files: &mut HotFiles,
    ctl: &str,
    dir: &Path,
    job: &mut JobCgroup,
) -> Result<(), LeafError> {
    let num = |files: &mut HotFiles, file: &'static str| -> Result<Option<u64>, LeafError> {
        files
            .read_single_opt(&dir.join(file))?
            .map(|t| parse_u64_file(file, t))
            .transpose()
    };
    match ctl {
        "cpuacct" => add(&mut job.cpu_usage_ns, num(files, "cpuacct.usage")?),
        "memory" => {
            add(
                &mut job.memory_usage_bytes,
                num(files, "memory.usage_in_bytes")?,
            );
            add(
                &mut job.memory_limit_bytes,
                num(files, "memory.limit_in_bytes")?.filter(|l| *l < UNLIMITED),
            );
            if let Some(t) = files.read_single_opt(&dir.join("memory.stat"))? {
                let (rss, cache) = parse_memory_stat(t)?;
                add(&mut job.memory_rss_bytes, rss);
                add(&mut job.memory_cache_bytes, cache);
            }
        }
        "cpuset" => {
            if let Some(t) = files.read_single_opt(&dir.join("cpuset.cpus"))? {
                let n = parse_cpu_list(t)?;
                job.cpus = Some(job.cpus.unwrap_or(0).saturating_add(n));
            }
        }
        _ => {}
    }
    Ok(())
}

/// Appends the observations for scanned jobs.
pub fn observations(node: &str, jobs: &[JobCgroup], out: &mut Vec<Observation>) {
    for j in jobs {
        let id = j.job_id.to_string();
        let uid = j.uid.map(|u| u.to_string()).unwrap_or_default();
        let l = [("job_id", id.as_str()), ("uid", uid.as_str())];
        if let Some(ns) = j.cpu_usage_ns {
            out.push(Observation::counter(
                "canopy_job_cpu_seconds_total",
                node,
                &l,
                ns as f64 / 1e9,
            ));
        }
        let gauges = [
            ("canopy_job_memory_bytes", j.memory_usage_bytes),
            ("canopy_job_memory_rss_bytes", j.memory_rss_bytes),
            ("canopy_job_memory_cache_bytes", j.memory_cache_bytes),
            ("canopy_job_memory_allocated_bytes", j.memory_limit_bytes),
            ("canopy_job_cpus_allocated", j.cpus.map(u64::from)),
        ];
        for (name, v) in gauges {
            if let Some(v) = v {
                out.push(Observation::gauge(name, node, &l, v as f64));
            }
        }
    }
}

/// Scans `<cgroup_root>/{cpuacct,memory,cpuset}/slurm*/uid_*/job_*` each tick.
#[derive(Debug)]
pub struct SlurmCgroupV1Collector {
    node: String,
    root: PathBuf,
    said_absent: bool,
}

impl SlurmCgroupV1Collector {
    /// A collector for `node` scanning the cgroup v1 tree under `cgroup_root`.
    pub fn new(node: &str, cgroup_root: &Path) -> Self {
        SlurmCgroupV1Collector {
            node: node.to_string(),
            root: cgroup_root.to_path_buf(),
            said_absent: false,
        }
    }
}

impl Collector for SlurmCgroupV1Collector {
    fn name(&self) -> &'static str {
        "slurm_cgroup_v1"
    }

    /// Appends every job found; if some file could not be read, the jobs that
    /// could are still appended and the first error is returned.
    fn collect(&mut self, out: &mut Vec<Observation>) -> Result<(), LeafError> {
        if !self.said_absent && !self.root.join("cpuacct").is_dir() {
            self.said_absent = true;
            tracing::info!(
                root = %self.root.display(),
                "no cgroup v1 cpuacct hierarchy; no per-job CPU from cgroup v1"
            );
        }
        let (jobs, errors) = scan_jobs(&self.root);
        observations(&self.node, &jobs, out);
        match errors.into_iter().next() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

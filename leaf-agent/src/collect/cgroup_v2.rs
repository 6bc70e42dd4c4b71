//! Slurm jobs from cgroup v2: `<root>/system.slice/slurmstepd.scope/job_<id>/`
//! (`<NodeName>_slurmstepd.scope` when several slurmd share the host; every
//! `*slurmstepd.scope` is scanned and a job under several is summed).
//!
//! Files: `cpu.stat` (`usage_usec`, `user_usec`, `system_usec`),
//! `memory.current`, `memory.stat` (`anon`, `file`), `io.stat` (per device
//! `rbytes wbytes rios wios`, summed) and `pids.current`. Hosts whose memory
//! and io controllers belong to cgroup v1 (hybrid) simply lack those files.
//! The layout has no uid level: the owner comes from the scheduler.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::cgroup_v1::{JobCgroup, parse_job_dir, parse_u64_file, subdirs};
use super::hot_file::HotFiles;
use super::proc_io::IoCounters;
use crate::error::LeafError;

/// `cpu.stat` of cgroup v2, microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuStat {
    /// `usage_usec`.
    pub usage_usec: u64,
    /// `user_usec`.
    pub user_usec: u64,
    /// `system_usec`.
    pub system_usec: u64,
}

/// Parses `cpu.stat` (`key value` lines; unknown keys ignored).
pub fn parse_cpu_stat(text: &str) -> Result<CpuStat, LeafError> {
    const FORMAT: &str = "cpu.stat";
    let mut s = CpuStat::default();
    let mut have_usage = false;
    for (i, line) in text.lines().enumerate() {
        let mut f = line.split_whitespace();
        let slot = match f.next() {
            Some("usage_usec") => {
                have_usage = true;
                &mut s.usage_usec
            }
            Some("user_usec") => &mut s.user_usec,
            Some("system_usec") => &mut s.system_usec,
            _ => continue,
        };
        *slot = super::field(FORMAT, i + 1, "value", f.next())?;
    }
    if !have_usage {
        return Err(LeafError::Missing {
            format: FORMAT,
            field: "usage_usec",
        });
    }
    Ok(s)
}

/// Parses `io.stat`: `MAJ:MIN rbytes=… wbytes=… rios=… wios=… dbytes=… dios=…`
/// per device, summed over devices.
pub fn parse_io_stat(text: &str) -> Result<IoCounters, LeafError> {
    const FORMAT: &str = "io.stat";
    let mut c = IoCounters::default();
    for (i, line) in text.lines().enumerate() {
        let mut f = line.split_whitespace();
        let Some(dev) = f.next() else { continue };
        if !dev.contains(':') {
            return Err(LeafError::parse(FORMAT, i + 1, format!("device {dev:?}")));
        }
        let mut d = IoCounters::default();
        for kv in f {
            let Some((k, v)) = kv.split_once('=') else {
                return Err(LeafError::parse(FORMAT, i + 1, format!("{kv:?}")));
            };
            let slot = match k {
                "rbytes" => &mut d.read_bytes,
                "wbytes" => &mut d.write_bytes,
                "rios" => &mut d.read_ops,
                "wios" => &mut d.write_ops,
                _ => continue,
            };
            *slot = super::field(FORMAT, i + 1, k, Some(v))?;
        }
        c = c.saturating_add(d);
    }
    Ok(c)
}

/// The job id of a cgroup v2 path such as
/// `/system.slice/slurmstepd.scope/job_42/step_0/user/task_0`.
pub fn job_of_path(path: &str) -> Option<u64> {
    let mut parts = path.split('/');
    parts.find(|p| p.ends_with("slurmstepd.scope"))?;
    parse_job_dir(parts.next()?)
}

/// Every `job_<id>` directory under `*slurmstepd.scope` in `system.slice`.
pub fn job_dirs(cgroup_root: &Path) -> Result<Vec<(u64, PathBuf)>, LeafError> {
    job_dirs_walk(cgroup_root, &mut |_| false).map(|(l, _)| l.map(|(d, _)| d).unwrap_or_default())
}

/// [`job_dirs`], and whether a `*slurmstepd.scope` exists (`None` without a
/// `system.slice` directory), calling `watch` on each directory before it
/// is listed (on the root, or its parent when the root is missing, for the
/// absence of `system.slice`); also says whether every `watch` succeeded
/// (the answer may be kept until a watched directory changes).
pub(crate) fn job_dirs_walk(
    cgroup_root: &Path,
    watch: &mut dyn FnMut(&Path) -> bool,
) -> Result<(super::cgroup_v1::V2Listing, bool), LeafError> {
    let slice = cgroup_root.join("system.slice");
    // Watched before it is looked at, so a `system.slice` made meanwhile
    // is an event.
    let root_watched = watch(cgroup_root) || cgroup_root.parent().is_some_and(&mut *watch);
    if !slice.is_dir() {
        return Ok((None, root_watched));
    }
    let mut watched = watch(&slice);
    let mut out = Vec::new();
    let mut scope_seen = false;
    let scopes = subdirs(&slice).map_err(|e| LeafError::io(&slice, e))?;
    for (scope, spath) in scopes {
        if !scope.ends_with("slurmstepd.scope") {
            continue;
        }
        scope_seen = true;
        watched &= watch(&spath);
        for (j, jpath) in subdirs(&spath).map_err(|e| LeafError::io(&spath, e))? {
            if let Some(id) = parse_job_dir(&j) {
                out.push((id, jpath));
            }
        }
    }
    Ok((Some((out, scope_seen)), watched))
}

/// What the v2 files of one job say (CPU in ns, for [`JobCgroup`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobV2 {
    /// The v1-shaped summary (`uid` is `None`: v2 has no uid level).
    pub job: JobCgroup,
    /// `io.stat` summed, when the io controller is there.
    pub io: Option<IoCounters>,
    /// `pids.current`.
    pub pids: Option<u64>,
}

fn read_job(files: &mut HotFiles, dir: &Path, j: &mut JobV2) -> Result<(), LeafError> {
    if let Some(t) = files.read_single_opt(&dir.join("cpu.stat"))? {
        let ns = parse_cpu_stat(t)?.usage_usec.saturating_mul(1000);
        j.job.cpu_usage_ns = Some(j.job.cpu_usage_ns.unwrap_or(0).saturating_add(ns));
    }
    if let Some(t) = files.read_single_opt(&dir.join("memory.current"))? {
        let v = parse_u64_file("memory.current", t)?;
        j.job.memory_usage_bytes = Some(j.job.memory_usage_bytes.unwrap_or(0).saturating_add(v));
    }
    if let Some(t) = files.read_single_opt(&dir.join("io.stat"))? {
        let v = parse_io_stat(t)?;
        j.io = Some(j.io.unwrap_or_default().saturating_add(v));
    }
    if let Some(t) = files.read_single_opt(&dir.join("pids.current"))? {
        let v = parse_u64_file("pids.current", t)?;
        j.pids = Some(j.pids.unwrap_or(0).saturating_add(v));
    }
    Ok(())
}

/// Scans the Slurm jobs of a cgroup v2 root; jobs by id, and the errors met.
pub fn scan_jobs(cgroup_root: &Path) -> (Vec<JobV2>, Vec<LeafError>) {
    scan_jobs_hot(cgroup_root, &mut HotFiles::new())
}

/// [`scan_jobs`] reading the job files through `files`, which keeps them
/// open from tick to tick (the caller ends its ticks).
pub fn scan_jobs_hot(cgroup_root: &Path, files: &mut HotFiles) -> (Vec<JobV2>, Vec<LeafError>) {
    match job_dirs(cgroup_root) {
        Ok(dirs) => scan_listed(&dirs, files),
        Err(e) => (Vec::new(), vec![e]),
    }
}

/// [`scan_jobs_hot`] of job directories already listed (by [`job_dirs`]).
pub fn scan_listed(dirs: &[(u64, PathBuf)], files: &mut HotFiles) -> (Vec<JobV2>, Vec<LeafError>) {
    let mut jobs: BTreeMap<u64, JobV2> = BTreeMap::new();
    let mut errors = Vec::new();
    for (id, dir) in dirs {
        let j = jobs.entry(*id).or_insert_with(|| JobV2 {
            job: JobCgroup {
                job_id: *id,
                ..JobCgroup::default()
            },
            ..JobV2::default()
        });
        if let Err(e) = read_job(files, dir, j) {
            errors.push(e);
        }
    }
    (jobs.into_values().collect(), errors)
}

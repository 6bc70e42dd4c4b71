//! Process -> job without cgroups (`proctrack/linuxproc` clusters): each job
//! process descends from a `slurmstepd: [<job>.<step>]`, whose parent is init
//! (it double-forks from slurmd). `SLURM_JOB_ID` in the environment is only a
//! hint (a job can change its own environment); the ancestry is authoritative.

use std::collections::HashMap;

/// The job and step of a slurmstepd, from its `/proc/<pid>/cmdline`
/// (`slurmstepd: [42.batch]`, `[42.0]`, `[42.extern]`; NUL-terminated).
pub fn parse_slurmstepd_cmdline(cmdline: &[u8]) -> Option<(u64, String)> {
    let text = std::str::from_utf8(cmdline).ok()?;
    let first = text.split('\0').next()?;
    let inner = first.strip_prefix("slurmstepd: [")?.strip_suffix(']')?;
    let (job, step) = inner.split_once('.')?;
    // Heterogeneous jobs print `42+1.0`: the component's leader id counts.
    let job = job.split('+').next()?.parse().ok()?;
    (!step.is_empty()).then(|| (job, step.to_string()))
}

/// `SLURM_JOB_ID` (or the older `SLURM_JOBID`) from `/proc/<pid>/environ`.
pub fn job_from_environ(environ: &[u8]) -> Option<u64> {
    let mut old = None;
    for var in environ.split(|b| *b == 0) {
        if let Some(v) = var.strip_prefix(b"SLURM_JOB_ID=") {
            return std::str::from_utf8(v).ok()?.parse().ok();
        }
        if let Some(v) = var.strip_prefix(b"SLURM_JOBID=") {
            old = std::str::from_utf8(v).ok().and_then(|s| s.parse().ok());
        }
    }
    old
}

/// One process as the ancestry walk needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcNode {
    /// PID.
    pub pid: u32,
    /// Parent PID.
    pub ppid: u32,
    /// `Some(job)` when this process is a slurmstepd of that job.
    pub stepd_job: Option<u64>,
}

/// Maps every process that is a slurmstepd or descends from one to its job.
/// Processes outside jobs are absent (the caller attributes them to
/// `job_id=""`). Parent links that loop or run deep are cut off.
pub fn assign_jobs(procs: &[ProcNode]) -> HashMap<u32, u64> {
    let by_pid: HashMap<u32, &ProcNode> = procs.iter().map(|p| (p.pid, p)).collect();
    let mut memo: HashMap<u32, Option<u64>> = HashMap::new();
    for p in procs {
        let mut chain = Vec::new();
        let mut cur = Some(p);
        let mut found = None;
        while let Some(n) = cur {
            if let Some(&m) = memo.get(&n.pid) {
                found = m;
                break;
            }
            if let Some(j) = n.stepd_job {
                found = Some(j);
                chain.push(n.pid);
                break;
            }
            chain.push(n.pid);
            if chain.len() > 256 || n.ppid == n.pid || n.ppid == 0 {
                break;
            }
            cur = by_pid.get(&n.ppid).copied();
        }
        for pid in chain {
            memo.insert(pid, found);
        }
    }
    memo.into_iter()
        .filter_map(|(pid, j)| j.map(|j| (pid, j)))
        .collect()
}

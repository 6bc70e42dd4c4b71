//! Jobs without cgroups (`proctrack/linuxproc`): every process under `/proc`
//! is mapped to a job through its slurmstepd ancestor
//! ([`crate::attrib::linuxproc`]); a job's CPU time is `utime + stime +
//! cutime + cstime` of its processes and its I/O their `/proc/<pid>/io`,
//! both carried monotonically by the caller.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use super::proc_io::{IoCounters, ProcIdentity, parse_proc_io};
use crate::attrib::CpuTicks;
use crate::attrib::linuxproc::{ProcNode, assign_jobs, parse_slurmstepd_cmdline};
use crate::error::LeafError;

const FORMAT: &str = "/proc/<pid>/stat";

/// The `/proc/<pid>/stat` fields linuxproc attribution needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatLine {
    /// Field 2, the command name without parentheses.
    pub comm: String,
    /// Parent and start time.
    pub id: ProcIdentity,
    /// Fields 14-17: `utime + stime + cutime + cstime`, clock ticks.
    pub cpu_ticks: u64,
}

/// Parses a whole `/proc/<pid>/stat` line.
pub fn parse_stat_line(text: &str) -> Result<StatLine, LeafError> {
    let open = text
        .find('(')
        .ok_or_else(|| LeafError::parse(FORMAT, 1, "no '('"))?;
    let close = text
        .rfind(')')
        .filter(|c| *c > open)
        .ok_or_else(|| LeafError::parse(FORMAT, 1, "no ')'"))?;
    let comm = text[open + 1..close].to_string();
    let f: Vec<&str> = text[close + 1..].split_whitespace().collect();
    // f[0] is field 3 (state): field n is f[n - 3].
    let num = |n: usize, what: &str| -> Result<u64, LeafError> {
        super::field(FORMAT, 1, what, f.get(n - 3).copied())
    };
    let cpu = [
        num(14, "utime")?,
        num(15, "stime")?,
        num(16, "cutime")?,
        num(17, "cstime")?,
    ];
    Ok(StatLine {
        comm,
        id: ProcIdentity {
            ppid: u32::try_from(num(4, "ppid")?)
                .map_err(|_| LeafError::parse(FORMAT, 1, "ppid"))?,
            start_ticks: num(22, "starttime")?,
        },
        cpu_ticks: cpu.iter().fold(0u64, |a, b| a.saturating_add(*b)),
    })
}

/// One job's processes as read at one tick.
pub type JobProcs = Vec<(u32, ProcIdentity, CpuTicks, IoCounters)>;

/// What one scan of `/proc` found.
#[derive(Debug, Default)]
pub struct Scan {
    /// Job id -> its processes (slurmstepd included).
    pub jobs: BTreeMap<u64, JobProcs>,
    /// Whether any slurmstepd runs at all.
    pub saw_stepd: bool,
    /// Files that could not be read or parsed.
    pub errors: Vec<LeafError>,
}

fn read_opt(p: &Path) -> Result<Option<Vec<u8>>, LeafError> {
    match std::fs::read(p) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(3) => Ok(None),
        Err(e) => Err(LeafError::io(p, e)),
    }
}

/// Scans `proc_root` (at most `max_procs` processes).
pub fn scan(proc_root: &Path, max_procs: usize) -> Scan {
    let mut s = Scan::default();
    let rd = match std::fs::read_dir(proc_root) {
        Ok(rd) => rd,
        Err(e) => {
            s.errors.push(LeafError::io(proc_root, e));
            return s;
        }
    };
    let mut nodes = Vec::new();
    let mut stats = BTreeMap::new();
    for entry in rd.flatten().take(max_procs) {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let dir = entry.path();
        let st = match read_opt(&dir.join("stat")) {
            Ok(Some(b)) => match parse_stat_line(&String::from_utf8_lossy(&b)) {
                Ok(st) => st,
                Err(e) => {
                    s.errors.push(e);
                    continue;
                }
            },
            Ok(None) => continue,
            Err(e) => {
                s.errors.push(e);
                continue;
            }
        };
        let mut stepd_job = None;
        if st.comm == "slurmstepd" {
            s.saw_stepd = true;
            if let Ok(Some(cmd)) = read_opt(&dir.join("cmdline")) {
                stepd_job = parse_slurmstepd_cmdline(&cmd).map(|(j, _)| j);
            }
        }
        nodes.push(ProcNode {
            pid,
            ppid: st.id.ppid,
            stepd_job,
        });
        stats.insert(pid, st);
    }
    if !s.saw_stepd {
        return s;
    }
    for (pid, job) in assign_jobs(&nodes) {
        let Some(st) = stats.get(&pid) else { continue };
        let p = proc_root.join(pid.to_string()).join("io");
        let io = match read_opt(&p) {
            Ok(Some(b)) => match parse_proc_io(&String::from_utf8_lossy(&b)) {
                Ok(io) => io,
                Err(e) => {
                    s.errors.push(e);
                    continue;
                }
            },
            Ok(None) => continue,
            Err(e) => {
                s.errors.push(e);
                continue;
            }
        };
        s.jobs
            .entry(job)
            .or_default()
            .push((pid, st.id, CpuTicks(st.cpu_ticks), io));
    }
    s
}

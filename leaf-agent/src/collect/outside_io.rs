//! I/O of processes outside any job (daemons, logins, backups, the OS's
//! user space), exported under an empty `job_id` beside the jobs' I/O, so
//! an admin's "each job's share of the node's I/O" has its remainder.
//!
//! Counted as the job collectors count a job's I/O: `/proc/<pid>/io`
//! (`read_bytes`, `write_bytes`, `syscr`, `syscw`) summed over the
//! processes, carried through [`JobCarry`] so a process that exits never
//! makes the totals go down. A process is *in a job* when its
//! `/proc/<pid>/cgroup` names a Slurm job (`job_<id>`) or a Kubernetes pod,
//! or when it is a `slurmstepd` or descends from one (Slurm's
//! `proctrack/linuxproc`, where jobs have no cgroup). Kernel threads
//! (children of `kthreadd`) are skipped: they have no I/O account of their
//! own (writeback is charged to the task that dirtied the pages).
//!
//! Cost: `/proc` is scanned every [`DEFAULT_OUTSIDE_IO_EVERY_TICKS`] ticks
//! (the last values repeated by key in between, no syscall). A process is
//! remembered by its `/proc` directory inode (a reused PID has a new one):
//! its `stat` is read once, its `cgroup` until two scans in a row agree
//! that it is outside any job (a task is moved into its job's cgroup right
//! after the fork), then only its `io` at each scan. Every
//! [`FULL_EVERY_SCANS`] scans every `stat` is read again, for parents that
//! changed when a parent exited.
//!
//! The totals start at the lifetime I/O of the processes outside jobs when
//! the agent starts (as the CPU series starts at the node's non-job CPU
//! time since boot). Limits: I/O of a process reaped by `init` after its
//! parent exited is counted once by the process and once more by `init`
//! when `init`'s parent link was not yet seen (at most until the next full
//! scan); a task caught between its fork and its move into a job's cgroup
//! is counted outside until the next scan (a fresh fork has done no I/O).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::emit::{Emit, EveryFew};
use super::gpu::job_from_proc_cgroup;
use super::proc_io::{IoCounters, ProcIdentity, parse_proc_io};
use super::slurm_procs::parse_stat_line;
use super::{Collector, Observation, Sink};
use crate::attrib::JobCarry;
use crate::attrib::k8s::parse_pod_cgroup;
use crate::error::LeafError;

/// Default: scan `/proc` for the I/O outside jobs every 30 ticks (a scan
/// is ~4 syscalls a process; `rate()` over a few minutes still reads it).
pub const DEFAULT_OUTSIDE_IO_EVERY_TICKS: u32 = 30;

/// Every this many scans, every remembered process's `stat` is read again.
pub const FULL_EVERY_SCANS: u32 = 60;

/// At most this many processes are read a scan (a bound on the memo).
pub const MAX_PROCS: usize = 1 << 16;

/// `kthreadd`, the parent of every kernel thread.
const KTHREADD: u32 = 2;

/// The I/O series names, in [`IoCounters`] field order.
const SERIES: [&str; 4] = [
    "canopy_job_io_read_bytes_total",
    "canopy_job_io_write_bytes_total",
    "canopy_job_io_read_ops_total",
    "canopy_job_io_write_ops_total",
];

/// Where a process's `/proc/<pid>/cgroup` puts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Membership {
    /// In a Slurm job's or a Kubernetes pod's cgroup.
    Job,
    /// In no job's cgroup (it may still descend from a `slurmstepd`).
    Outside,
}

/// Classifies a `/proc/<pid>/cgroup` text (v1 lines per hierarchy, or the
/// one v2 line `0::/path`).
pub fn membership(cgroup: &str) -> Membership {
    let in_pod = cgroup
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .any(|path| parse_pod_cgroup(path).is_some());
    if in_pod || job_from_proc_cgroup(cgroup).is_some() {
        Membership::Job
    } else {
        Membership::Outside
    }
}

/// What a scan remembers of one process.
#[derive(Clone, Debug)]
struct Known {
    /// Its `/proc/<pid>` directory inode.
    ino: u64,
    id: ProcIdentity,
    kernel: bool,
    stepd: bool,
    /// Its cgroup put it in a job at the last read.
    cgroup_job: bool,
    /// Scans in a row that read its cgroup as outside any job (2: settled).
    outside_reads: u8,
}

/// What one process of a listing reads as, for [`OutsideIo::scan_with`]:
/// each file's text, borrowed until the next read.
pub trait ProcReader {
    /// `/proc/<pid>/stat`, `None` when the process is gone.
    fn stat(&mut self, pid: u32) -> Result<Option<&str>, LeafError>;
    /// `/proc/<pid>/cgroup`, `None` when the process is gone.
    fn cgroup(&mut self, pid: u32) -> Result<Option<&str>, LeafError>;
    /// `/proc/<pid>/io`, `None` when the process is gone.
    fn io(&mut self, pid: u32) -> Result<Option<&str>, LeafError>;
}

/// Reads the files of a `/proc` tree through one open directory (`openat`
/// of `<pid>/<file>`: a short path walk, no allocation a read).
#[derive(Debug)]
pub struct ProcFiles {
    root: PathBuf,
    dir: Option<rustix::fd::OwnedFd>,
    path: String,
    buf: Vec<u8>,
    text: String,
}

/// Largest `/proc/<pid>/*` file read (a `cgroup` file lists one line per
/// hierarchy; a longer one is cut, which only affects membership).
const MAX_FILE: usize = 16 << 10;

impl ProcFiles {
    /// Reads under `proc_root` (normally `/proc`).
    pub fn new(proc_root: &Path) -> Self {
        Self {
            root: proc_root.to_path_buf(),
            dir: None,
            path: String::with_capacity(32),
            buf: Vec::new(),
            text: String::new(),
        }
    }

    fn dir(&mut self) -> Result<&rustix::fd::OwnedFd, LeafError> {
        use rustix::fs::{Mode, OFlags, open};
        if self.dir.is_none() {
            let fd = open(
                &self.root,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| LeafError::io(&self.root, e.into()))?;
            self.dir = Some(fd);
        }
        self.dir
            .as_ref()
            .ok_or_else(|| LeafError::io(&self.root, std::io::ErrorKind::NotFound.into()))
    }

    fn read(&mut self, pid: u32, name: &str) -> Result<Option<&str>, LeafError> {
        use rustix::fs::{Mode, OFlags, openat};
        use std::fmt::Write as _;
        self.dir()?;
        self.path.clear();
        let _ = write!(self.path, "{pid}/{name}");
        let Some(dir) = self.dir.as_ref() else {
            return Ok(None);
        };
        let fd = match openat(
            dir,
            self.path.as_str(),
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            // Gone (ENOENT), or dying (ESRCH).
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::SRCH) => return Ok(None),
            Err(e) => return Err(LeafError::io(self.root.join(&self.path), e.into())),
        };
        // Zeroed once: reads write into it, only `..len` is looked at.
        if self.buf.len() < MAX_FILE {
            self.buf.resize(MAX_FILE, 0);
        }
        let mut len = 0;
        while len < MAX_FILE {
            match rustix::io::read(&fd, &mut self.buf[len..]) {
                Ok(0) => break,
                // procfs renders these files whole into a large enough
                // buffer: a short read is the end (no read for the EOF).
                Ok(n) if len + n < MAX_FILE => {
                    len += n;
                    break;
                }
                Ok(n) => len += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::SRCH) => return Ok(None),
                Err(e) => return Err(LeafError::io(self.root.join(&self.path), e.into())),
            }
        }
        let bytes = &self.buf[..len];
        match std::str::from_utf8(bytes) {
            Ok(t) => Ok(Some(t)),
            Err(_) => {
                self.text = String::from_utf8_lossy(bytes).into_owned();
                Ok(Some(&self.text))
            }
        }
    }

    /// Lists the processes with their directories' inodes (at most
    /// [`MAX_PROCS`]).
    pub fn list(&mut self) -> Result<Vec<(u32, u64)>, LeafError> {
        let root = self.root.clone();
        let mut dir =
            rustix::fs::Dir::read_from(self.dir()?).map_err(|e| LeafError::io(&root, e.into()))?;
        let mut out = Vec::with_capacity(512);
        while let Some(e) = dir.read() {
            let e = e.map_err(|e| LeafError::io(&root, e.into()))?;
            let Some(pid) = e
                .file_name()
                .to_str()
                .ok()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            out.push((pid, e.ino()));
            if out.len() == MAX_PROCS {
                break;
            }
        }
        Ok(out)
    }
}

impl ProcReader for ProcFiles {
    fn stat(&mut self, pid: u32) -> Result<Option<&str>, LeafError> {
        self.read(pid, "stat")
    }
    fn cgroup(&mut self, pid: u32) -> Result<Option<&str>, LeafError> {
        self.read(pid, "cgroup")
    }
    fn io(&mut self, pid: u32) -> Result<Option<&str>, LeafError> {
        self.read(pid, "io")
    }
}

/// What one scan read, for tests and self-checks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScanCounts {
    /// Processes whose I/O was summed (outside any job).
    pub outside: usize,
    /// `stat` files read.
    pub stat_reads: usize,
    /// `cgroup` files read.
    pub cgroup_reads: usize,
    /// `io` files read.
    pub io_reads: usize,
}

/// The sans-I/O account of the I/O outside jobs; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct OutsideIo {
    memo: HashMap<u32, Known>,
    carry: JobCarry<IoCounters>,
    scans: u32,
}

impl OutsideIo {
    /// A fresh account.
    pub fn new() -> Self {
        Self::default()
    }

    /// The running totals (never decrease).
    pub fn total(&self) -> IoCounters {
        self.carry.total()
    }

    /// One scan over `listing` ((pid, inode) pairs), reading through
    /// `files`. Errors of single files are returned beside the counts; the
    /// processes they concern are left out of this scan.
    pub fn scan_with(
        &mut self,
        listing: &[(u32, u64)],
        files: &mut impl ProcReader,
    ) -> (ScanCounts, Vec<LeafError>) {
        let full = self.scans.is_multiple_of(FULL_EVERY_SCANS);
        self.scans = self.scans.wrapping_add(1);
        let mut counts = ScanCounts::default();
        let mut errors = Vec::new();
        let mut next: HashMap<u32, Known> = HashMap::with_capacity(listing.len());
        for &(pid, ino) in listing.iter().take(MAX_PROCS) {
            let old = self.memo.remove(&pid).filter(|k| k.ino == ino);
            let mut k = match old {
                Some(k) if !full => k,
                old => {
                    counts.stat_reads += 1;
                    let stat = match files.stat(pid) {
                        Ok(Some(s)) => s,
                        Ok(None) => continue,
                        Err(e) => {
                            errors.push(e);
                            continue;
                        }
                    };
                    let line = match parse_stat_line(stat) {
                        Ok(l) => l,
                        Err(e) => {
                            errors.push(e);
                            continue;
                        }
                    };
                    let kernel = pid == KTHREADD || line.id.ppid == KTHREADD;
                    let mut k = old.unwrap_or(Known {
                        ino,
                        id: line.id,
                        kernel,
                        stepd: false,
                        cgroup_job: false,
                        outside_reads: 0,
                    });
                    k.id = line.id;
                    k.kernel = kernel;
                    k.stepd = line.comm == "slurmstepd";
                    k
                }
            };
            if !k.kernel && k.outside_reads < 2 {
                counts.cgroup_reads += 1;
                match files.cgroup(pid) {
                    Ok(Some(text)) => {
                        k.cgroup_job = membership(text) == Membership::Job;
                        k.outside_reads = if k.cgroup_job { 0 } else { k.outside_reads + 1 };
                    }
                    Ok(None) => continue,
                    Err(e) => {
                        errors.push(e);
                        continue;
                    }
                }
            }
            next.insert(pid, k);
        }
        self.memo = next;

        // Outside: not a kernel thread, not in a job's cgroup, and neither
        // a slurmstepd nor below one (a bounded walk up the parent links).
        let memo = &self.memo;
        let below_stepd = |k: &Known| {
            let mut a = k;
            for _ in 0..64 {
                if a.stepd {
                    return true;
                }
                match memo.get(&a.id.ppid) {
                    Some(p) if a.id.ppid != 0 => a = p,
                    _ => return false,
                }
            }
            false
        };
        let outside: Vec<u32> = memo
            .iter()
            .filter(|(_, k)| !k.kernel && !k.cgroup_job && !below_stepd(k))
            .map(|(pid, _)| *pid)
            .collect();
        let mut samples = Vec::with_capacity(outside.len());
        for pid in outside {
            counts.io_reads += 1;
            match files.io(pid).and_then(|t| t.map(parse_proc_io).transpose()) {
                Ok(Some(io)) => samples.push((pid, self.memo[&pid].id, io)),
                Ok(None) => {}
                Err(e) => errors.push(e),
            }
        }
        counts.outside = samples.len();
        self.carry.update_with(&samples);
        (counts, errors)
    }
}

/// Scans `/proc` every few ticks and reports [`OutsideIo`]'s totals as the
/// `job_id=""` I/O series.
#[derive(Debug)]
pub struct OutsideIoCollector {
    node: String,
    files: ProcFiles,
    account: OutsideIo,
    every: u32,
    few: EveryFew,
    /// Logged the first unreadable `io` file (not root: no other user's
    /// `/proc/<pid>/io`).
    warned: bool,
}

impl OutsideIoCollector {
    /// A collector for `node` over `proc_root`, scanning every `every` ticks
    /// (0 turns it off).
    pub fn new(node: &str, proc_root: &Path, every: u32) -> Self {
        Self {
            node: node.to_string(),
            files: ProcFiles::new(proc_root),
            account: OutsideIo::new(),
            every,
            few: EveryFew::new(),
            warned: false,
        }
    }

    fn report(&mut self, out: &mut impl Emit) -> Result<(), LeafError> {
        let listing = self.files.list()?;
        let (_, errors) = self.account.scan_with(&listing, &mut self.files);
        if let Some(e) = errors.first()
            && !self.warned
        {
            self.warned = true;
            tracing::warn!(
                error = %e,
                unreadable = errors.len(),
                "I/O outside jobs: some processes' /proc/<pid>/io cannot be read and are \
                 left out (reading another process's needs ptrace read access: root with \
                 CAP_SYS_PTRACE)"
            );
        }
        let t = self.account.total();
        let values = [t.read_bytes, t.write_bytes, t.read_ops, t.write_ops];
        for (name, v) in SERIES.iter().zip(values) {
            out.counter(name, &self.node, &[("job_id", "")], v as f64);
        }
        Ok(())
    }
}

impl Collector for OutsideIoCollector {
    fn name(&self) -> &'static str {
        "outside_io"
    }

    fn collect(&mut self, out: &mut Vec<Observation>) -> Result<(), LeafError> {
        if self.every == 0 {
            return Ok(());
        }
        self.report(out)
    }

    /// Scans every `every` ticks; the ticks between repeat the last values
    /// by key.
    fn collect_into(&mut self, sink: &mut Sink<'_>) -> Result<(), LeafError> {
        if self.every == 0 {
            return Ok(());
        }
        let mut few = std::mem::take(&mut self.few);
        let r = few.tick(self.every, sink, |out| self.report(out));
        self.few = few;
        r
    }
}

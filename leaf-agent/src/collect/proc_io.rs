//! Per-process files: `/proc/<pid>/io` (I/O counters) and the identity
//! fields of `/proc/<pid>/stat` (parent and start time, to tell a reused PID
//! from the process that had it before).

use std::io;
use std::path::Path;

use super::hot_file::Render;
use crate::error::LeafError;

/// The `/proc/<pid>/io` counters Canopy exports. For a process (thread group)
/// they include its exited threads and the children it reaped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoCounters {
    /// `read_bytes`: bytes fetched from the storage layer (any filesystem).
    pub read_bytes: u64,
    /// `write_bytes`: bytes sent (or dirtied, for buffered writes) to storage.
    pub write_bytes: u64,
    /// `syscr`: read-like system calls.
    pub read_ops: u64,
    /// `syscw`: write-like system calls.
    pub write_ops: u64,
}

impl IoCounters {
    /// Field-wise saturating sum.
    pub fn saturating_add(self, o: IoCounters) -> IoCounters {
        IoCounters {
            read_bytes: self.read_bytes.saturating_add(o.read_bytes),
            write_bytes: self.write_bytes.saturating_add(o.write_bytes),
            read_ops: self.read_ops.saturating_add(o.read_ops),
            write_ops: self.write_ops.saturating_add(o.write_ops),
        }
    }

    /// Field-wise saturating difference (never below zero).
    pub fn saturating_sub(self, o: IoCounters) -> IoCounters {
        IoCounters {
            read_bytes: self.read_bytes.saturating_sub(o.read_bytes),
            write_bytes: self.write_bytes.saturating_sub(o.write_bytes),
            read_ops: self.read_ops.saturating_sub(o.read_ops),
            write_ops: self.write_ops.saturating_sub(o.write_ops),
        }
    }
}

/// Parses `/proc/<pid>/io` (`key: value` lines; unknown keys are ignored).
pub fn parse_proc_io(text: &str) -> Result<IoCounters, LeafError> {
    const FORMAT: &str = "/proc/<pid>/io";
    let mut c = IoCounters::default();
    let mut seen = 0u8;
    for (i, line) in text.lines().enumerate() {
        let Some((key, val)) = line.split_once(':') else {
            continue;
        };
        let (slot, bit) = match key.trim() {
            "read_bytes" => (&mut c.read_bytes, 1),
            "write_bytes" => (&mut c.write_bytes, 2),
            "syscr" => (&mut c.read_ops, 4),
            "syscw" => (&mut c.write_ops, 8),
            _ => continue,
        };
        *slot = super::field(FORMAT, i + 1, key, Some(val.trim()))?;
        seen |= bit;
    }
    if seen & 3 != 3 {
        return Err(LeafError::Missing {
            format: FORMAT,
            field: "read_bytes/write_bytes",
        });
    }
    Ok(c)
}

/// Who a process is: parent PID and start time (clock ticks since boot),
/// from `/proc/<pid>/stat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcIdentity {
    /// Field 4, `ppid`.
    pub ppid: u32,
    /// Field 22, `starttime`: with the PID, identifies the process.
    pub start_ticks: u64,
}

/// Parses `/proc/<pid>/stat` for [`ProcIdentity`]. The command name (field 2)
/// may hold spaces and parentheses, so fields are counted after the last `)`.
pub fn parse_stat_identity(text: &str) -> Result<ProcIdentity, LeafError> {
    const FORMAT: &str = "/proc/<pid>/stat";
    let rest = text
        .rfind(')')
        .map(|i| &text[i + 1..])
        .ok_or_else(|| LeafError::parse(FORMAT, 1, "no ')' after the command name"))?;
    // rest: state(3) ppid(4) ... starttime(22): indexes 0, 1, ..., 19.
    let mut f = rest.split_whitespace();
    let ppid = super::field(FORMAT, 1, "ppid", f.nth(1))?;
    let start_ticks = super::field(FORMAT, 1, "starttime", f.nth(17))?;
    Ok(ProcIdentity { ppid, start_ticks })
}

/// One process of a job as read at one tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcSample {
    /// Process ID (thread group ID).
    pub pid: u32,
    /// Parent and start time.
    pub id: ProcIdentity,
    /// Its `/proc/<pid>/io` counters.
    pub io: IoCounters,
}

/// Reads one process; `Ok(None)` when it has exited meanwhile (normal).
pub fn read_proc(proc_root: &Path, pid: u32) -> Result<Option<ProcSample>, LeafError> {
    let dir = proc_root.join(pid.to_string());
    let read = |name: &str| -> Result<Option<String>, LeafError> {
        let p = dir.join(name);
        // One record each: open, one pread, close (no size probe, no
        // second read for the end).
        let mut buf = Vec::new();
        let text = std::fs::File::open(&p)
            .and_then(|f| super::hot_file::pread_whole(&f, &mut buf, Render::Single))
            .and_then(|()| {
                String::from_utf8(buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
            });
        match text {
            Ok(s) => Ok(Some(s)),
            // ESRCH shows up when the process dies mid-read.
            Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(3) => {
                Ok(None)
            }
            Err(e) => Err(LeafError::io(p, e)),
        }
    };
    let (Some(stat), Some(io_text)) = (read("stat")?, read("io")?) else {
        return Ok(None);
    };
    Ok(Some(ProcSample {
        pid,
        id: parse_stat_identity(&stat)?,
        io: parse_proc_io(&io_text)?,
    }))
}

/// Parses a `cgroup.procs` (or `tasks`) file: one PID per line.
pub fn parse_pid_list(text: &str) -> Result<Vec<u32>, LeafError> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| super::field("cgroup.procs", i + 1, "pid", Some(l.trim())))
        .collect()
}

//! What the kernel says a process costs: CPU time from
//! `/proc/<pid>/task/*/schedstat` (nanoseconds per thread: the measure) and
//! from `/proc/<pid>/stat` (utime + stime in clock ticks, 10 ms: a cross-check
//! that also counts threads which exited), and peak RSS from
//! `/proc/<pid>/status` (VmHWM).
//!
//! Pure parsers first (text in, numbers out), then thin readers.

use std::path::Path;

use anyhow::{Context, Result, anyhow};

/// utime + stime, in clock ticks, from the text of `/proc/<pid>/stat`.
///
/// The command name (field 2) may hold spaces and parentheses, so fields
/// are counted from the last `)`.
pub fn parse_stat_cpu_ticks(text: &str) -> Result<u64> {
    let rest = text
        .rfind(')')
        .map(|i| &text[i + 1..])
        .ok_or_else(|| anyhow!("/proc/<pid>/stat: no ')' after the command name"))?;
    // After the name: state is field 3, utime field 14, stime field 15.
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize, what: &str| -> Result<u64> {
        f.get(i)
            .ok_or_else(|| anyhow!("/proc/<pid>/stat: no {what} field"))?
            .parse()
            .with_context(|| format!("/proc/<pid>/stat: {what} is not a number"))
    };
    Ok(num(11, "utime")? + num(12, "stime")?)
}

/// A `kB` field of `/proc/<pid>/status` (e.g. `VmHWM`), in bytes.
pub fn parse_status_kb(text: &str, field: &str) -> Result<u64> {
    let line = text
        .lines()
        .find(|l| l.split(':').next() == Some(field))
        .ok_or_else(|| anyhow!("/proc/<pid>/status: no {field} line"))?;
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .ok_or_else(|| anyhow!("/proc/<pid>/status: {field} has no value"))?
        .parse()
        .with_context(|| format!("/proc/<pid>/status: {field} is not a number"))?;
    Ok(kb * 1024)
}

/// Time on CPU in nanoseconds: the first field of a `schedstat` file.
pub fn parse_schedstat_ns(text: &str) -> Result<u64> {
    text.split_whitespace()
        .next()
        .ok_or_else(|| anyhow!("schedstat: empty"))?
        .parse()
        .context("schedstat: run time is not a number")
}

/// One reading of a process's cost.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuReading {
    /// utime + stime of the whole process (live and exited threads), ticks.
    pub ticks: u64,
    /// Each live thread's run time from its `schedstat`, ns, by thread id.
    pub tasks: Vec<(u32, u64)>,
}

/// CPU time between two readings from the threads' `schedstat` (ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedDelta {
    /// Run time of the threads alive at `b`: their growth since `a`, or all
    /// of it for threads started in between.
    pub ns: u64,
    /// Threads seen at `a` and gone at `b`: whatever they ran after `a` is
    /// missing from `ns` (the window's tick figure still counts it).
    pub exited: usize,
}

impl CpuReading {
    /// Sum of the live threads' run time, ns.
    pub fn sched_ns(&self) -> u64 {
        self.tasks.iter().map(|&(_, ns)| ns).sum()
    }

    /// The run time from `self` (earlier) to `b` (later), thread by thread.
    pub fn sched_delta(&self, b: &CpuReading) -> SchedDelta {
        let mut ns = 0u64;
        for &(tid, now) in &b.tasks {
            let before = self
                .tasks
                .iter()
                .find(|&&(t, _)| t == tid)
                .map_or(0, |&(_, v)| v);
            ns += now.saturating_sub(before);
        }
        let exited = self
            .tasks
            .iter()
            .filter(|&&(t, _)| !b.tasks.iter().any(|&(u, _)| u == t))
            .count();
        SchedDelta { ns, exited }
    }
}

/// Reads `/proc/<pid>/stat` and every live thread's `schedstat`
/// (`/proc/<pid>/schedstat` alone is the main thread's only).
pub fn read_cpu(pid: u32) -> Result<CpuReading> {
    let base = Path::new("/proc").join(pid.to_string());
    let stat = std::fs::read_to_string(base.join("stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    let ticks = parse_stat_cpu_ticks(&stat)?;
    let mut tasks = Vec::new();
    let dir = std::fs::read_dir(base.join("task"))
        .with_context(|| format!("listing /proc/{pid}/task"))?;
    for t in dir.flatten() {
        let Some(tid) = t.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        // A thread may exit between the listing and the read: skip it.
        if let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) {
            tasks.push((tid, parse_schedstat_ns(&s)?));
        }
    }
    Ok(CpuReading { ticks, tasks })
}

/// A `kB` field of `/proc/<pid>/status`, in bytes.
pub fn read_status_bytes(pid: u32, field: &str) -> Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    parse_status_kb(&text, field)
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 when that fails, the
/// value on every Linux architecture in use).
pub fn clk_tck() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .filter(|&t| t > 0)
        .unwrap_or(100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_counts_fields_after_an_odd_command_name() {
        // A real line of this host's /proc/<pid>/stat, with the name made awkward.
        let line = "4376 (a b) (c)) R 4371 4371 31885 0 -1 4194304 103 0 0 0 17 5 0 0 20 0 1 0 702803 3133440 413 18446744073709551615";
        assert_eq!(parse_stat_cpu_ticks(line).expect("parses"), 22);
        assert!(parse_stat_cpu_ticks("4376 cat R 1").is_err());
        assert!(parse_stat_cpu_ticks("4376 (cat) R 1 2").is_err());
    }

    #[test]
    fn status_and_schedstat_fields() {
        let status = "Name:\tcanopy\nVmPeak:\t  3060 kB\nVmHWM:\t    1748 kB\nVmRSS:\t 1700 kB\n";
        assert_eq!(parse_status_kb(status, "VmHWM").expect("hwm"), 1748 * 1024);
        assert_eq!(parse_status_kb(status, "VmRSS").expect("rss"), 1700 * 1024);
        assert!(parse_status_kb(status, "VmSwap").is_err());
        assert_eq!(
            parse_schedstat_ns("140167181 298961594 64\n").expect("ns"),
            140_167_181
        );
        assert!(parse_schedstat_ns("").is_err());
    }

    #[test]
    fn sched_delta_follows_threads_by_id() {
        let a = CpuReading {
            ticks: 0,
            tasks: vec![(10, 1_000), (11, 5_000), (12, 7_000)],
        };
        // 10 grew by 500, 11 exited, 13 started and ran 300, 12 stood still.
        let b = CpuReading {
            ticks: 0,
            tasks: vec![(10, 1_500), (12, 7_000), (13, 300)],
        };
        assert_eq!(a.sched_delta(&b), SchedDelta { ns: 800, exited: 1 });
        assert_eq!(b.sched_ns(), 8_800);
    }

    #[test]
    fn reads_this_process() {
        let pid = std::process::id();
        let r = read_cpu(pid).expect("own /proc");
        assert!(r.tasks.iter().any(|&(t, _)| t == pid), "{r:?}");
        assert!(r.sched_ns() > 0);
        assert!(read_status_bytes(pid, "VmHWM").expect("own VmHWM") > 0);
    }
}

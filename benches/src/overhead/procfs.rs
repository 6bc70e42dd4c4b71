//! What the kernel says a process costs: CPU time from `/proc/<pid>/stat`
//! (utime + stime, clock ticks) and from `/proc/<pid>/task/*/schedstat`
//! (nanoseconds, finer), and peak RSS from `/proc/<pid>/status` (VmHWM).
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuReading {
    /// utime + stime of the whole process (live and exited threads), ticks.
    pub ticks: u64,
    /// Sum of the live threads' run time, ns (exited threads not counted).
    pub sched_ns: u64,
    /// Live threads.
    pub threads: usize,
}

/// Reads `/proc/<pid>/stat` and every live thread's `schedstat`.
pub fn read_cpu(pid: u32) -> Result<CpuReading> {
    let base = Path::new("/proc").join(pid.to_string());
    let stat = std::fs::read_to_string(base.join("stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    let ticks = parse_stat_cpu_ticks(&stat)?;
    let mut sched_ns = 0;
    let mut threads = 0;
    let tasks = std::fs::read_dir(base.join("task"))
        .with_context(|| format!("listing /proc/{pid}/task"))?;
    for t in tasks.flatten() {
        // A thread may exit between the listing and the read: skip it.
        if let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) {
            sched_ns += parse_schedstat_ns(&s)?;
            threads += 1;
        }
    }
    Ok(CpuReading {
        ticks,
        sched_ns,
        threads,
    })
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
    fn reads_this_process() {
        let pid = std::process::id();
        let r = read_cpu(pid).expect("own /proc");
        assert!(r.threads >= 1);
        assert!(read_status_bytes(pid, "VmHWM").expect("own VmHWM") > 0);
    }
}

//! Usage against allocation -> ok / underusing / overloading, with reasons
//! a person can read (the verdict a scheduler acts on, and the text an
//! admin or a screen reader gets).

use super::{JobStress, NodeStress, Verdict};

/// Where the verdicts draw their lines. Ratios are fractions (0.5 = 50 %).
/// The `[thresholds]` table of gateway.toml sets any of them; the rest
/// keep their defaults.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Thresholds {
    /// A job observed for less than this many seconds (its rates still
    /// under-read) is not called underusing.
    pub min_observed_secs: f64,
    /// A job busy on fewer than this share of its cores underuses them.
    pub cpu_under: f64,
    /// A job busy on more than this multiple of its cores is oversubscribed.
    pub cpu_over: f64,
    /// A job touching less than this share of its memory underuses it.
    pub mem_under: f64,
    /// A job at or above this share of its memory is near its limit.
    pub mem_over: f64,
    /// GPUs with a mean SM utilisation below this are idle.
    pub gpu_under: f64,
    /// A job above this share of cluster read or write bytes dominates I/O...
    pub io_share_over: f64,
    /// ...when it also moves at least this many bytes per second.
    pub io_min_bytes_per_sec: f64,
    /// A node whose load average exceeds this multiple of its CPUs is overloaded.
    pub node_load_over: f64,
    /// A node with less than this share of memory available is overloaded.
    pub node_mem_available_under: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            min_observed_secs: 50.0,
            cpu_under: 0.5,
            cpu_over: 1.1,
            mem_under: 0.2,
            mem_over: 0.95,
            gpu_under: 0.2,
            io_share_over: 0.5,
            io_min_bytes_per_sec: 50e6,
            node_load_over: 1.5,
            node_mem_available_under: 0.05,
        }
    }
}

/// Bytes as a person reads them (binary units: memory).
pub fn human_bytes(b: f64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b;
    let mut u = 0;
    while v.abs() >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// A rate in bytes per second as a person reads it (decimal units: I/O).
pub fn human_rate(b: f64) -> String {
    const UNITS: [&str; 5] = ["B/s", "kB/s", "MB/s", "GB/s", "TB/s"];
    let mut v = b;
    let mut u = 0;
    while v.abs() >= 1000.0 && u + 1 < UNITS.len() {
        v /= 1000.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

fn pct(r: f64) -> String {
    format!("{:.0}%", r * 100.0)
}

fn ratio(used: Option<f64>, alloc: Option<f64>) -> Option<(f64, f64, f64)> {
    match (used, alloc) {
        (Some(u), Some(a)) if a > 0.0 && u.is_finite() => Some((u, a, u / a)),
        _ => None,
    }
}

/// Judges a running job. Any overloading finding makes it overloading,
/// else any underusing finding makes it underusing; reasons list every
/// finding, overloading first. With nothing to judge (too young for a
/// rate, no allocation reported) the verdict is unknown.
pub fn judge_job(j: &JobStress, t: &Thresholds) -> (Verdict, Vec<String>) {
    let mut over = Vec::new();
    let mut under = Vec::new();
    let mut ok = Vec::new();
    match ratio(j.cores_used, j.cores_allocated) {
        Some((u, a, r)) if r > t.cpu_over => over.push(format!(
            "CPU oversubscribed: {u:.1} cores busy on {a:.0} allocated ({})",
            pct(r)
        )),
        Some((u, a, r)) if r < t.cpu_under => under.push(format!(
            "CPU underused: {u:.1} of {a:.0} allocated cores busy ({})",
            pct(r)
        )),
        Some((_, a, r)) => ok.push(format!("CPU {} of {a:.0} cores", pct(r))),
        None => {}
    }
    match ratio(j.memory_used_bytes, j.memory_allocated_bytes) {
        Some((_, a, r)) if r >= t.mem_over => over.push(format!(
            "memory near its limit: {} of {} ({})",
            human_bytes(j.memory_used_bytes.unwrap_or(0.0)),
            human_bytes(a),
            pct(r)
        )),
        Some((u, a, r)) if r < t.mem_under => under.push(format!(
            "memory underused: {} of {} allocated ({})",
            human_bytes(u),
            human_bytes(a),
            pct(r)
        )),
        Some((_, a, r)) => ok.push(format!("memory {} of {}", pct(r), human_bytes(a))),
        None => {}
    }
    if let Some(g) = j.gpus_allocated.filter(|g| *g > 0.0) {
        match j.gpu_sm_utilization {
            Some(u) if u < t.gpu_under => under.push(format!(
                "GPUs idle: mean SM utilisation {} on {g:.0} allocated",
                pct(u)
            )),
            Some(u) => ok.push(format!("GPU SM {} on {g:.0}", pct(u))),
            None => {}
        }
    }
    for (what, share, rate) in [
        ("reads", j.io_share.read_bytes, j.io.read_bytes),
        ("writes", j.io_share.write_bytes, j.io.write_bytes),
    ] {
        if let (Some(s), Some(r)) = (share, rate)
            && s > t.io_share_over
            && r >= t.io_min_bytes_per_sec
        {
            over.push(format!(
                "dominates cluster I/O: {} of cluster {what} ({})",
                pct(s),
                human_rate(r)
            ));
        }
    }
    let young = j.observed_secs.filter(|s| *s < t.min_observed_secs);
    if young.is_some() {
        // Its rates still under-read and it may be ramping up: too early
        // to call it underusing (limits still count).
        under.clear();
    }
    let verdict = if !over.is_empty() {
        Verdict::Overloading
    } else if !under.is_empty() {
        Verdict::Underusing
    } else if young.is_some() {
        Verdict::Unknown
    } else if !ok.is_empty() {
        Verdict::Ok
    } else {
        Verdict::Unknown
    };
    let mut reasons = over;
    reasons.append(&mut under);
    if verdict == Verdict::Ok {
        reasons.push(format!("uses what it holds: {}", ok.join(", ")));
    }
    if let Some(s) = young {
        reasons.push(format!(
            "observed for {s:.0} s only: not judged for underuse before {:.0} s",
            t.min_observed_secs
        ));
    }
    if j.cores_used.is_none() && j.cores_allocated.is_some() {
        reasons.push("no CPU rate yet (younger than the rate window)".into());
    }
    if verdict == Verdict::Unknown && reasons.is_empty() {
        reasons.push("not enough data to judge".into());
    }
    (verdict, reasons)
}

/// Judges a node: overloading when its load, memory or cores are at a
/// limit; underusing when its jobs hold cores that sit idle.
pub fn judge_node(n: &NodeStress, t: &Thresholds) -> (Verdict, Vec<String>) {
    if !n.up {
        return (
            Verdict::Unknown,
            vec!["node is down (heartbeat missed)".into()],
        );
    }
    let mut over = Vec::new();
    let mut under = Vec::new();
    if let (Some(l), Some(c)) = (n.load1, n.cpus.filter(|c| *c > 0.0))
        && l > t.node_load_over * c
    {
        over.push(format!("load {l:.1} on {c:.0} CPUs"));
    }
    if let (Some(a), Some(tot)) = (
        n.memory_available_bytes,
        n.memory_total_bytes.filter(|x| *x > 0.0),
    ) && a / tot < t.node_mem_available_under
    {
        over.push(format!(
            "memory nearly full: {} available of {}",
            human_bytes(a),
            human_bytes(tot)
        ));
    }
    if let (Some(b), Some(c)) = (n.cores_busy, n.cpus.filter(|c| *c > 0.0))
        && b > c * 0.95
    {
        over.push(format!("CPU saturated: {b:.1} of {c:.0} cores busy"));
    }
    if let (Some(b), Some(a)) = (n.cores_busy, n.cores_allocated.filter(|a| *a >= 1.0))
        && b < a * t.cpu_under
    {
        under.push(format!(
            "jobs hold {a:.0} cores but only {b:.1} are busy ({})",
            pct(b / a)
        ));
    }
    let verdict = if !over.is_empty() {
        Verdict::Overloading
    } else if !under.is_empty() {
        Verdict::Underusing
    } else if n.cores_busy.is_some() {
        Verdict::Ok
    } else {
        Verdict::Unknown
    };
    let mut reasons = over;
    reasons.append(&mut under);
    match verdict {
        Verdict::Ok => reasons.push(format!(
            "within limits: {:.1} of {:.0} cores busy, {} jobs",
            n.cores_busy.unwrap_or(0.0),
            n.cpus.unwrap_or(0.0),
            n.job_ids.len()
        )),
        Verdict::Unknown => reasons.push("no CPU rate yet".into()),
        _ => {}
    }
    (verdict, reasons)
}

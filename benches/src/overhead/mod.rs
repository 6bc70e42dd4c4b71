//! `leaf-overhead`: what a Canopy leaf costs next to `prometheus-node-exporter`.
//!
//! The binary starts the processes and the scraper; this module holds the
//! measuring parts (`procfs`), a tiny HTTP client (`scrape`) and the
//! arithmetic and output (here): per-window CPU share and peak RSS, medians
//! over windows, a table and JSON.

pub mod procfs;
pub mod scrape;

use std::fmt::Write as _;

use procfs::CpuReading;

/// One process's cost over one measurement window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Window {
    /// CPU share of one core, percent, from the threads' schedstat run
    /// time (ns resolution).
    pub cpu_pct: f64,
    /// The same from utime + stime (clock ticks, 10 ms: over 30 s one tick
    /// is 0.033 %); counts threads that exited during the window.
    pub tick_pct: f64,
    /// Threads that exited during the window: their last run time is
    /// missing from `cpu_pct` (not from `tick_pct`).
    pub exited_threads: usize,
    /// Peak resident set (VmHWM) at the window's end, bytes.
    pub hwm_bytes: u64,
    /// Resident set (VmRSS) at the window's end, bytes.
    pub rss_bytes: u64,
    /// Its anonymous part (RssAnon: heap and stacks, not the binary's pages).
    pub anon_bytes: u64,
}

impl Window {
    /// The window between two readings `secs` apart (`tck` ticks a second).
    pub fn from_readings(
        a: &CpuReading,
        b: &CpuReading,
        secs: f64,
        tck: u64,
        hwm_bytes: u64,
        rss_bytes: u64,
        anon_bytes: u64,
    ) -> Self {
        let secs = secs.max(1e-9);
        let ticks = b.ticks.saturating_sub(a.ticks) as f64;
        let d = a.sched_delta(b);
        Window {
            cpu_pct: d.ns as f64 / 1e9 / secs * 100.0,
            tick_pct: ticks / tck.max(1) as f64 / secs * 100.0,
            exited_threads: d.exited,
            hwm_bytes,
            rss_bytes,
            anon_bytes,
        }
    }
}

/// The median of `xs` (mean of the middle two for an even count); 0 when empty.
pub fn median(xs: &[f64]) -> f64 {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// One measured process and its windows.
#[derive(Clone, Debug)]
pub struct Row {
    /// What it is, e.g. `leaf (real node + 50 sim jobs)`.
    pub name: String,
    /// Series it reports per tick or scrape (0 when unknown).
    pub series: usize,
    /// Whether it counts against the goals (false: context only).
    pub measured: bool,
    /// One entry per window.
    pub windows: Vec<Window>,
}

impl Row {
    /// Median CPU share (schedstat), percent of one core.
    pub fn cpu_pct(&self) -> f64 {
        median(&self.windows.iter().map(|w| w.cpu_pct).collect::<Vec<_>>())
    }

    /// Median CPU share from utime + stime, percent of one core.
    pub fn tick_pct(&self) -> f64 {
        median(&self.windows.iter().map(|w| w.tick_pct).collect::<Vec<_>>())
    }

    /// Median peak RSS, MiB.
    pub fn hwm_mib(&self) -> f64 {
        median(
            &self
                .windows
                .iter()
                .map(|w| w.hwm_bytes as f64 / 1048576.0)
                .collect::<Vec<_>>(),
        )
    }

    /// Median anonymous RSS at the window's end, MiB.
    pub fn anon_mib(&self) -> f64 {
        median(
            &self
                .windows
                .iter()
                .map(|w| w.anon_bytes as f64 / 1048576.0)
                .collect::<Vec<_>>(),
        )
    }

    /// Median file-backed RSS at the window's end (VmRSS - RssAnon: the
    /// binary's and the libraries' pages), MiB.
    pub fn file_mib(&self) -> f64 {
        median(
            &self
                .windows
                .iter()
                .map(|w| w.rss_bytes.saturating_sub(w.anon_bytes) as f64 / 1048576.0)
                .collect::<Vec<_>>(),
        )
    }

    fn cpu_range(&self) -> (f64, f64) {
        let v = self.windows.iter().map(|w| w.cpu_pct);
        (
            v.clone().fold(f64::INFINITY, f64::min),
            v.fold(f64::NEG_INFINITY, f64::max),
        )
    }
}

/// The goals of issue 3, checked on a finished measurement.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Verdict {
    /// Leaf CPU share, percent of one core (median).
    pub leaf_cpu_pct: f64,
    /// Leaf peak RSS, MiB (median).
    pub leaf_hwm_mib: f64,
    /// node_exporter CPU over leaf CPU.
    pub ratio: f64,
    /// Leaf CPU <= 0.05 % of one core.
    pub cpu_ok: bool,
    /// Leaf peak RSS <= 10 MiB.
    pub rss_ok: bool,
    /// node_exporter uses at least 10x the leaf's CPU.
    pub ratio_ok: bool,
}

/// Goal: the leaf's CPU share, percent of one core.
pub const GOAL_CPU_PCT: f64 = 0.05;
/// Goal: the leaf's peak RSS, MiB.
pub const GOAL_RSS_MIB: f64 = 10.0;
/// Goal: node_exporter's CPU over the leaf's.
pub const GOAL_RATIO: f64 = 10.0;

/// Checks `leaf` and `exporter` against the goals.
pub fn verdict(leaf: &Row, exporter: &Row) -> Verdict {
    let (l, e) = (leaf.cpu_pct(), exporter.cpu_pct());
    let ratio = if l > 0.0 { e / l } else { f64::INFINITY };
    Verdict {
        leaf_cpu_pct: l,
        leaf_hwm_mib: leaf.hwm_mib(),
        ratio,
        cpu_ok: l <= GOAL_CPU_PCT,
        rss_ok: leaf.hwm_mib() <= GOAL_RSS_MIB,
        ratio_ok: ratio >= GOAL_RATIO,
    }
}

fn yes(b: bool) -> &'static str {
    if b { "met" } else { "NOT met" }
}

/// The human-readable table.
pub fn table(rows: &[Row], v: &Verdict, header: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{header}");
    let _ = writeln!(
        s,
        "{:<38} {:>7} {:>10} {:>17} {:>11} {:>12} {:>9} {:>9}",
        "process",
        "series",
        "CPU %core",
        "(min..max)",
        "ticks %core",
        "peak RSS MiB",
        "anon MiB",
        "file MiB"
    );
    for r in rows {
        let (lo, hi) = r.cpu_range();
        let _ = writeln!(
            s,
            "{:<38} {:>7} {:>10.3} {:>17} {:>11.3} {:>12.1} {:>9.1} {:>9.1}",
            r.name,
            if r.series > 0 {
                r.series.to_string()
            } else {
                "-".into()
            },
            r.cpu_pct(),
            format!("({lo:.3}..{hi:.3})"),
            r.tick_pct(),
            r.hwm_mib(),
            r.anon_mib(),
            r.file_mib()
        );
    }
    let _ = writeln!(
        s,
        "goals: leaf CPU {:.3} % <= {GOAL_CPU_PCT} %: {}; leaf peak RSS {:.1} MiB <= {GOAL_RSS_MIB} MiB: {}; node_exporter/leaf CPU {:.1}x >= {GOAL_RATIO}x: {}",
        v.leaf_cpu_pct,
        yes(v.cpu_ok),
        v.leaf_hwm_mib,
        yes(v.rss_ok),
        v.ratio,
        yes(v.ratio_ok)
    );
    s
}

/// Escapes a string for JSON.
fn js(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// A JSON number (non-finite values as null).
fn jn(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.6}")
    } else {
        "null".into()
    }
}

/// The same measurement as one JSON object.
pub fn json(rows: &[Row], v: &Verdict, settings: &[(&str, String)]) -> String {
    let mut s = String::from("{\"settings\":{");
    for (i, (k, val)) in settings.iter().enumerate() {
        let _ = write!(s, "{}{}:{}", if i > 0 { "," } else { "" }, js(k), js(val));
    }
    s.push_str("},\"processes\":[");
    for (i, r) in rows.iter().enumerate() {
        let ws: Vec<String> = r
            .windows
            .iter()
            .map(|w| {
                format!(
                    "{{\"cpu_pct\":{},\"tick_pct\":{},\"exited_threads\":{},\"hwm_bytes\":{},\"rss_bytes\":{},\"rss_anon_bytes\":{}}}",
                    jn(w.cpu_pct),
                    jn(w.tick_pct),
                    w.exited_threads,
                    w.hwm_bytes,
                    w.rss_bytes,
                    w.anon_bytes
                )
            })
            .collect();
        let _ = write!(
            s,
            "{}{{\"name\":{},\"series\":{},\"counts_for_goals\":{},\"cpu_pct_median\":{},\"tick_pct_median\":{},\"peak_rss_mib_median\":{},\"rss_anon_mib_median\":{},\"rss_file_mib_median\":{},\"windows\":[{}]}}",
            if i > 0 { "," } else { "" },
            js(&r.name),
            r.series,
            r.measured,
            jn(r.cpu_pct()),
            jn(r.tick_pct()),
            jn(r.hwm_mib()),
            jn(r.anon_mib()),
            jn(r.file_mib()),
            ws.join(",")
        );
    }
    let _ = write!(
        s,
        "],\"goals\":{{\"leaf_cpu_pct\":{},\"leaf_cpu_goal_pct\":{GOAL_CPU_PCT},\"leaf_cpu_met\":{},\"leaf_peak_rss_mib\":{},\"leaf_rss_goal_mib\":{GOAL_RSS_MIB},\"leaf_rss_met\":{},\"exporter_over_leaf_cpu\":{},\"ratio_goal\":{GOAL_RATIO},\"ratio_met\":{}}}}}",
        jn(v.leaf_cpu_pct),
        v.cpu_ok,
        jn(v.leaf_hwm_mib),
        v.rss_ok,
        jn(v.ratio),
        v.ratio_ok
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, cpus: &[f64], hwm_mib: u64) -> Row {
        Row {
            name: name.into(),
            series: 10,
            measured: true,
            windows: cpus
                .iter()
                .map(|&c| Window {
                    cpu_pct: c,
                    tick_pct: c,
                    exited_threads: 0,
                    hwm_bytes: hwm_mib << 20,
                    rss_bytes: hwm_mib << 20,
                    anon_bytes: hwm_mib << 19,
                })
                .collect(),
        }
    }

    #[test]
    fn medians_and_windows() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
        let a = CpuReading {
            ticks: 100,
            tasks: vec![(7, 0), (8, 50)],
        };
        let b = CpuReading {
            ticks: 130,
            tasks: vec![(7, 600_000_000)],
        };
        let w = Window::from_readings(&a, &b, 60.0, 100, 1 << 20, 1 << 20, 1 << 19);
        assert!((w.cpu_pct - 1.0).abs() < 1e-9, "{}", w.cpu_pct);
        assert!((w.tick_pct - 0.5).abs() < 1e-9, "{}", w.tick_pct);
        assert_eq!(w.exited_threads, 1);
    }

    #[test]
    fn verdict_checks_each_goal() {
        let leaf = row("leaf", &[0.04, 0.05, 0.03], 8);
        let ne = row("ne", &[0.6, 0.5, 0.4], 20);
        let v = verdict(&leaf, &ne);
        assert!(v.cpu_ok && v.rss_ok && v.ratio_ok, "{v:?}");
        let heavy = row("leaf", &[0.2, 0.3, 0.25], 12);
        let v = verdict(&heavy, &ne);
        assert!(!v.cpu_ok && !v.rss_ok && !v.ratio_ok, "{v:?}");
        let t = table(&[heavy, ne], &v, "h");
        assert!(t.contains("NOT met"), "{t}");
        // row(): anon is half the RSS, so the file part is the other half.
        assert_eq!(leaf.anon_mib(), 4.0);
        assert_eq!(leaf.file_mib(), 4.0);
        let j = json(&[leaf], &v, &[("runs", "3".into())]);
        assert!(j.contains("\"rss_file_mib_median\":4.000000"), "{j}");
        assert!(j.starts_with("{\"settings\":{\"runs\":\"3\"}"), "{j}");
        assert!(j.contains("\"leaf_cpu_met\":false"), "{j}");
        assert_eq!(js("a\"b\n"), "\"a\\\"b\\u000a\"");
    }
}

//! What one run measured per server, medians over runs, and the table with
//! Canopy/Prometheus ratios next to the goals of issue 5.

use std::fmt::Write as _;

/// Latency of one query on one server, over the repetitions of one run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Latency {
    /// Median, milliseconds.
    pub p50_ms: f64,
    /// 90th percentile, milliseconds.
    pub p90_ms: f64,
}

impl Latency {
    /// Median and p90 of `ms` (nearest rank).
    pub fn of(ms: &[f64]) -> Latency {
        Latency {
            p50_ms: quantile(ms, 0.5),
            p90_ms: quantile(ms, 0.9),
        }
    }
}

/// The `q` quantile of `xs` by nearest rank (0 for none).
pub fn quantile(xs: &[f64], q: f64) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// The median of `xs` (mean of the middle two for an even count).
pub fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// One server in one run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Measured {
    /// Acknowledged samples per second of wall time.
    pub ingest_rate: f64,
    /// Seconds of ingest wall time.
    pub ingest_secs: f64,
    /// Samples ingested.
    pub samples: f64,
    /// The server's CPU seconds (utime + stime) during the ingest.
    pub ingest_cpu_secs: f64,
    /// VmRSS of the empty server, bytes.
    pub rss_empty: f64,
    /// VmRSS after the ingest, bytes.
    pub rss: f64,
    /// RssAnon after the ingest, bytes.
    pub rss_anon: f64,
    /// VmRSS after every query ran (a cold tier's pages read by then
    /// count, as Prometheus's mapped chunks do), bytes.
    pub rss_queried: f64,
    /// Go heap in use after the ingest (Prometheus only), bytes.
    pub go_heap: Option<f64>,
    /// Series the server reports holding.
    pub series: f64,
    /// Latency per query, in the order of the queries.
    pub latency: Vec<Latency>,
}

/// Per-field medians of several runs of one server.
pub fn median_of(runs: &[Measured]) -> Measured {
    let m = |f: &dyn Fn(&Measured) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
    let nq = runs.first().map_or(0, |r| r.latency.len());
    Measured {
        ingest_rate: m(&|r| r.ingest_rate),
        ingest_secs: m(&|r| r.ingest_secs),
        samples: m(&|r| r.samples),
        ingest_cpu_secs: m(&|r| r.ingest_cpu_secs),
        rss_empty: m(&|r| r.rss_empty),
        rss: m(&|r| r.rss),
        rss_anon: m(&|r| r.rss_anon),
        rss_queried: m(&|r| r.rss_queried),
        go_heap: runs
            .iter()
            .all(|r| r.go_heap.is_some())
            .then(|| m(&|r| r.go_heap.unwrap_or(0.0))),
        series: m(&|r| r.series),
        latency: (0..nq)
            .map(|q| Latency {
                p50_ms: m(&|r| r.latency[q].p50_ms),
                p90_ms: m(&|r| r.latency[q].p90_ms),
            })
            .collect(),
    }
}

fn mib(b: f64) -> String {
    format!("{:.1} MiB", b / 1_048_576.0)
}

fn ratio(x: f64) -> String {
    if x >= 10.0 {
        format!("{x:.1}x")
    } else {
        format!("{x:.2}x")
    }
}

fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "**not met**" }
}

/// The Markdown table: Canopy in memory, Canopy with `--data-dir`,
/// Prometheus, and the two ratios against Prometheus with the goal.
pub fn table(canopy: &Measured, wal: &Measured, prom: &Measured, queries: &[String]) -> String {
    let mut t = String::new();
    let samples_m = |m: &Measured| m.samples / 1e6;
    let row = |t: &mut String,
               what: &str,
               f: &dyn Fn(&Measured) -> String,
               r: Option<(f64, f64)>,
               goal: &str| {
        let (ra, rb) = match r {
            Some((a, b)) => (ratio(a), ratio(b)),
            None => (String::new(), String::new()),
        };
        let _ = writeln!(
            t,
            "| {what} | {} | {} | {} | {ra} | {rb} | {goal} |",
            f(canopy),
            f(wal),
            f(prom)
        );
    };
    let _ = writeln!(
        t,
        "| | Canopy (memory) | Canopy (--data-dir) | Prometheus 2.42 | Canopy vs Prometheus | Canopy --data-dir vs Prometheus | goal |"
    );
    let _ = writeln!(t, "| --- | --- | --- | --- | --- | --- | --- |");
    let ingest_ok = |m: &Measured| m.ingest_rate / prom.ingest_rate.max(1e-9);
    row(
        &mut t,
        "ingest, samples/s (wall, until every request got 2xx)",
        &|m| format!("{:.0} k", m.ingest_rate / 1e3),
        Some((ingest_ok(canopy), ingest_ok(wal))),
        &format!(
            "≥ 5x: {} / {}",
            met(ingest_ok(canopy) >= 5.0),
            met(ingest_ok(wal) >= 5.0)
        ),
    );
    let cpu_per_m = |m: &Measured| m.ingest_cpu_secs / samples_m(m).max(1e-9);
    row(
        &mut t,
        "server CPU per 1 M samples ingested",
        &|m| format!("{:.2} s", cpu_per_m(m)),
        Some((
            cpu_per_m(prom) / cpu_per_m(canopy).max(1e-9),
            cpu_per_m(prom) / cpu_per_m(wal).max(1e-9),
        )),
        "(Prometheus / Canopy; context)",
    );
    row(
        &mut t,
        "series held",
        &|m| format!("{:.0}", m.series),
        None,
        "",
    );
    row(&mut t, "RSS after ingest", &|m| mib(m.rss), None, "");
    let per = |m: &Measured| m.rss / m.series.max(1.0);
    row(
        &mut t,
        "RSS per series",
        &|m| format!("{:.0} B", per(m)),
        Some((per(canopy) / per(prom), per(wal) / per(prom))),
        &format!(
            "≤ 0.1x: {} / {}",
            met(per(canopy) <= 0.1 * per(prom)),
            met(per(wal) <= 0.1 * per(prom))
        ),
    );
    let grown = |m: &Measured| (m.rss - m.rss_empty) / m.series.max(1.0);
    row(
        &mut t,
        "RSS growth per series (after ingest − empty)",
        &|m| format!("{:.0} B", grown(m)),
        Some((grown(canopy) / grown(prom), grown(wal) / grown(prom))),
        "(context)",
    );
    let queried = |m: &Measured| m.rss_queried / m.series.max(1.0);
    row(
        &mut t,
        "RSS per series after the queries",
        &|m| format!("{:.0} B", queried(m)),
        Some((
            queried(canopy) / queried(prom),
            queried(wal) / queried(prom),
        )),
        "(context)",
    );
    row(
        &mut t,
        "anonymous RSS after ingest",
        &|m| mib(m.rss_anon),
        None,
        "",
    );
    if let Some(h) = prom.go_heap {
        let _ = writeln!(
            t,
            "| Go heap in use (go_memstats_heap_inuse_bytes) | | | {} | | | |",
            mib(h)
        );
    }
    for (i, q) in queries.iter().enumerate() {
        let lat = |m: &Measured| m.latency.get(i).copied().unwrap_or_default();
        let speed = |m: &Measured| lat(prom).p50_ms / lat(m).p50_ms.max(1e-9);
        row(
            &mut t,
            &format!("`{q}`, median / p90"),
            &|m| format!("{:.2} / {:.2} ms", lat(m).p50_ms, lat(m).p90_ms),
            Some((speed(canopy), speed(wal))),
            &format!(
                "≥ 5x faster: {} / {}",
                met(speed(canopy) >= 5.0),
                met(speed(wal) >= 5.0)
            ),
        );
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_and_medians() {
        let xs = [5.0, 1.0, 3.0, 2.0, 4.0, 10.0, 6.0, 7.0, 8.0, 9.0];
        assert_eq!(quantile(&xs, 0.5), 5.0);
        assert_eq!(quantile(&xs, 0.9), 9.0);
        assert_eq!(median(&xs), 5.5);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
    }

    #[test]
    fn table_has_ratios_and_verdicts() {
        let prom = Measured {
            ingest_rate: 1e6,
            ingest_secs: 10.0,
            samples: 1e7,
            ingest_cpu_secs: 20.0,
            rss: 200e6,
            rss_empty: 20e6,
            series: 100_000.0,
            latency: vec![Latency {
                p50_ms: 10.0,
                p90_ms: 12.0,
            }],
            ..Measured::default()
        };
        let canopy = Measured {
            ingest_rate: 6e6,
            ingest_secs: 10.0 / 6.0,
            ingest_cpu_secs: 2.0,
            rss: 50e6,
            latency: vec![Latency {
                p50_ms: 4.0,
                p90_ms: 5.0,
            }],
            ..prom.clone()
        };
        let t = table(&canopy, &prom, &prom, &["q".to_string()]);
        assert!(
            t.contains("| 6.00x | 1.00x | ≥ 5x: met / **not met** |"),
            "{t}"
        );
        assert!(
            t.contains("| 0.25x | 1.00x | ≤ 0.1x: **not met** / **not met** |"),
            "{t}"
        );
        assert!(
            t.contains("| 2.50x | 1.00x | ≥ 5x faster: **not met** / **not met** |"),
            "{t}"
        );
        let m = median_of(&[canopy.clone(), prom.clone(), prom.clone()]);
        assert_eq!(m.ingest_rate, 1e6);
        assert_eq!(m.latency[0].p50_ms, 10.0);
        assert_eq!(m.go_heap, None);
    }
}

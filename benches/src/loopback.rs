//! `fabric-loopback`'s arithmetic: what real `canopy` processes on loopback
//! say about themselves (Prometheus text from their `/metrics`, `/proc`
//! readings, the gateway's raw tick samples), turned into the figures
//! `fabric-sim` reports, and the two side by side.
//!
//! Pure: text and numbers in, figures out. The processes live in the
//! `fabric-loopback` binary.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::fabric::{LinkBytes, Report};

/// Every sample of metric `name` in a Prometheus text exposition, as (the
/// text between the braces, value). Comments and other metrics are skipped;
/// `name_bucket` is not `name`.
pub fn samples<'a>(text: &'a str, name: &str) -> Vec<(&'a str, f64)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let (labels, value) = if let Some(r) = rest.strip_prefix('{') {
            let Some(end) = r.rfind('}') else { continue };
            (&r[..end], &r[end + 1..])
        } else if rest.starts_with(' ') {
            ("", rest)
        } else {
            continue;
        };
        // A value, then perhaps a timestamp.
        if let Some(v) = value
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        {
            out.push((labels, v));
        }
    }
    out
}

/// The value of `key` in a label text such as `a="x",b="y"` (no escapes
/// are expected in the labels this reads: host names, subtree numbers).
pub fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    labels.split(',').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"'))
    })
}

/// The sum of every sample of `name` (0 when absent).
pub fn sum(text: &str, name: &str) -> f64 {
    samples(text, name).iter().map(|s| s.1).sum()
}

/// The `q` quantile of a cumulative histogram given as (upper bound,
/// count) pairs in ascending bound order, the `+Inf` bucket excluded, with
/// `total` observations in all; linear within a bucket, as PromQL's
/// `histogram_quantile`. Observations past the last bound answer that bound.
pub fn bucket_quantile(buckets: &[(f64, f64)], total: f64, q: f64) -> f64 {
    if total <= 0.0 {
        return 0.0;
    }
    let rank = q * total;
    let (mut lo, mut below) = (0.0, 0.0);
    for &(le, cum) in buckets {
        if cum >= rank {
            let inside = cum - below;
            if inside <= 0.0 {
                return le;
            }
            return lo + (le - lo) * (rank - below) / inside;
        }
        (lo, below) = (le, cum);
    }
    lo
}

/// Freshness over a window, from two readings of the gateway's
/// `canopy_gateway_freshness_seconds` histogram: (p50, p99, mean) in ms.
pub fn window_freshness(before: &str, after: &str) -> (f64, f64, f64) {
    let name = "canopy_gateway_freshness_seconds";
    let buckets = |text: &str| -> Vec<(f64, f64)> {
        let mut b: Vec<(f64, f64)> = samples(text, &format!("{name}_bucket"))
            .into_iter()
            .filter_map(|(l, v)| label(l, "le")?.parse::<f64>().ok().map(|le| (le, v)))
            .filter(|(le, _)| le.is_finite())
            .collect();
        b.sort_by(|x, y| x.0.total_cmp(&y.0));
        b
    };
    let (b0, b1) = (buckets(before), buckets(after));
    let delta: Vec<(f64, f64)> = b1
        .iter()
        .map(|&(le, c)| {
            let c0 = b0.iter().find(|x| x.0 == le).map_or(0.0, |x| x.1);
            (le, c - c0)
        })
        .collect();
    let count = sum(after, &format!("{name}_count")) - sum(before, &format!("{name}_count"));
    let total = sum(after, &format!("{name}_sum")) - sum(before, &format!("{name}_sum"));
    let mean_ms = if count > 0.0 {
        total / count * 1000.0
    } else {
        0.0
    };
    (
        bucket_quantile(&delta, count, 0.5) * 1000.0,
        bucket_quantile(&delta, count, 0.99) * 1000.0,
        mean_ms,
    )
}

/// Bytes/s of every uplink of one node over a window, from two readings of
/// its `/metrics` (`canopy_fabric_bytes_sent_total`, one per uplink).
pub fn uplink_rates(before: &str, after: &str, secs: f64) -> Vec<f64> {
    let name = "canopy_fabric_bytes_sent_total";
    let b0: BTreeMap<&str, f64> = samples(before, name).into_iter().collect();
    samples(after, name)
        .into_iter()
        .map(|(l, v)| (v - b0.get(l).copied().unwrap_or(0.0)) / secs.max(1e-9))
        .collect()
}

/// How the tick counters of the nodes arrived at the gateway in a window.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TickCheck {
    /// Nodes whose counter the gateway holds.
    pub nodes: usize,
    /// Nodes whose samples go up by exactly one from sample to sample, one
    /// tick apart, and that have at least `min_samples`.
    pub exact_nodes: usize,
    /// Samples checked.
    pub samples: u64,
    /// Consecutive pairs that were not +1 in value or one tick apart.
    pub faults: u64,
}

/// Checks raw samples of `canopy_synthetic_ticks_total` per node, (ts ms,
/// value) in time order: each step must be +1 and `tick_ms` (± half a
/// tick) later, and a node needs at least `min_samples`.
pub fn check_ticks(
    per_node: &BTreeMap<String, Vec<(i64, f64)>>,
    tick_ms: i64,
    min_samples: usize,
) -> TickCheck {
    let mut c = TickCheck {
        nodes: per_node.len(),
        ..TickCheck::default()
    };
    for s in per_node.values() {
        c.samples += s.len() as u64;
        let faults = s
            .windows(2)
            .filter(|w| {
                let dt = w[1].0 - w[0].0;
                w[1].1 - w[0].1 != 1.0 || (dt - tick_ms).abs() > tick_ms / 2
            })
            .count() as u64;
        c.faults += faults;
        if faults == 0 && s.len() >= min_samples {
            c.exact_nodes += 1;
        }
    }
    c
}

/// Figures of the real-process run, in `fabric-sim`'s units.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RealFigures {
    /// Nodes started.
    pub nodes: usize,
    /// Length of the measured window, s.
    pub secs: f64,
    /// Gateway process CPU (utime + stime), ms per second.
    pub gateway_cpu_ms_per_s: f64,
    /// Samples the gateway's store appended per second.
    pub gateway_samples_per_s: f64,
    /// Gateway CPU per appended sample, ns.
    pub gateway_ns_per_sample: f64,
    /// Frame bytes into the gateway per second.
    pub gateway_in_bytes_per_s: f64,
    /// `canopy node` CPU per node (leaf and relay in one process), mean
    /// µs per second.
    pub node_cpu_mean_us_per_s: f64,
    /// The busiest node, µs per second.
    pub node_cpu_max_us_per_s: f64,
    /// Bytes per second on every uplink.
    pub links: LinkBytes,
    /// Freshness over the window from the histogram's buckets, ms (coarse:
    /// the buckets are 100, 250, 500 ms, 1 s ...).
    pub fresh_p50_ms: f64,
    /// 99th percentile, same source.
    pub fresh_p99_ms: f64,
    /// Mean over the window (exact: `_sum` / `_count`), ms.
    pub fresh_mean_ms: f64,
    /// The gateway's own p50 gauge since it started (hdrhistogram), ms.
    pub fresh_p50_since_start_ms: f64,
    /// The gateway's own p99 gauge since it started, ms.
    pub fresh_p99_since_start_ms: f64,
    /// The tick counters over the window.
    pub ticks: TickCheck,
    /// The 1, 5, 15 minute load averages during the window (start; end).
    pub load: String,
}

/// One line of the comparison: a figure, the real value, the simulated one.
#[derive(Clone, Debug, Serialize)]
pub struct Compared {
    /// What is compared.
    pub figure: &'static str,
    /// Real processes.
    pub real: f64,
    /// `fabric-sim`.
    pub sim: f64,
}

impl Compared {
    /// real / sim (0 when sim is 0).
    pub fn ratio(&self) -> f64 {
        if self.sim == 0.0 {
            0.0
        } else {
            self.real / self.sim
        }
    }
}

/// The figures both runs report, side by side.
pub fn compare(real: &RealFigures, sim: &Report) -> Vec<Compared> {
    let c = |figure, real, sim| Compared { figure, real, sim };
    vec![
        c(
            "gateway CPU, ms/s",
            real.gateway_cpu_ms_per_s,
            sim.gateway.cpu_ms_per_s,
        ),
        c(
            "gateway samples/s (changes)",
            real.gateway_samples_per_s,
            sim.gateway.samples_per_s,
        ),
        c(
            "gateway ns per sample",
            real.gateway_ns_per_sample,
            sim.gateway.ns_per_sample,
        ),
        c(
            "gateway in, B/s",
            real.gateway_in_bytes_per_s,
            sim.gateway.in_bytes_per_s,
        ),
        c(
            "node CPU (leaf + relay), mean µs/s",
            real.node_cpu_mean_us_per_s,
            sim.leaf.mean_us_per_s + sim.relay.mean_us_per_s,
        ),
        c(
            "node CPU, busiest node µs/s (sim: busiest relay + mean leaf)",
            real.node_cpu_max_us_per_s,
            sim.relay.max_us_per_s + sim.leaf.mean_us_per_s,
        ),
        c(
            "bytes/s per link, mean",
            real.links.mean_bps(),
            sim.links.all.mean_bps(),
        ),
        c(
            "bytes/s per link, max",
            real.links.max_bps,
            sim.links.all.max_bps,
        ),
        c(
            "network links",
            real.links.links as f64,
            sim.links.all.links as f64,
        ),
        c(
            "freshness p50, ms (real: window, from buckets)",
            real.fresh_p50_ms,
            sim.freshness.p50_ms as f64,
        ),
        c(
            "freshness p99, ms (real: window, from buckets)",
            real.fresh_p99_ms,
            sim.freshness.p99_ms as f64,
        ),
        c(
            "freshness p50, ms (real: gateway gauge since start)",
            real.fresh_p50_since_start_ms,
            sim.freshness.p50_ms as f64,
        ),
        c(
            "freshness p99, ms (real: gateway gauge since start)",
            real.fresh_p99_since_start_ms,
            sim.freshness.p99_ms as f64,
        ),
        c(
            "freshness mean, ms",
            real.fresh_mean_ms,
            sim.freshness.mean_ms,
        ),
        c(
            "exact nodes",
            real.ticks.exact_nodes as f64,
            sim.exactness.exact_nodes as f64,
        ),
    ]
}

/// The comparison as a Markdown table.
pub fn table(rows: &[Compared]) -> String {
    let mut s = String::from(
        "| figure | real processes | fabric-sim | real / sim |\n| --- | --- | --- | --- |\n",
    );
    for r in rows {
        let f = |v: f64| {
            if v.abs() >= 100.0 || v.fract() == 0.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.1}")
            }
        };
        s.push_str(&format!(
            "| {} | {} | {} | {:.2} |\n",
            r.figure,
            f(r.real),
            f(r.sim),
            r.ratio()
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const GW: &str = "# TYPE canopy_gateway_freshness_seconds histogram
canopy_gateway_freshness_seconds_bucket{le=\"0.1\"} 10
canopy_gateway_freshness_seconds_bucket{le=\"0.25\"} 90
canopy_gateway_freshness_seconds_bucket{le=\"0.5\"} 100
canopy_gateway_freshness_seconds_bucket{le=\"+Inf\"} 100
canopy_gateway_freshness_seconds_sum 15
canopy_gateway_freshness_seconds_count 100
canopy_gateway_freshness_p50_seconds 0.17
";

    #[test]
    fn reads_samples_labels_and_sums() {
        let s = samples(GW, "canopy_gateway_freshness_seconds_bucket");
        assert_eq!(s.len(), 4);
        assert_eq!(label(s[1].0, "le"), Some("0.25"));
        assert_eq!(s[1].1, 90.0);
        // A prefix of another metric's name is not that metric.
        assert!(samples(GW, "canopy_gateway_freshness_seconds").is_empty());
        assert_eq!(sum(GW, "canopy_gateway_freshness_p50_seconds"), 0.17);
        assert_eq!(sum(GW, "absent"), 0.0);
        let node =
            "canopy_fabric_bytes_sent_total{subtree=\"1\",parent=\"cn000002\"} 300 1700000000000\n";
        assert_eq!(samples(node, "canopy_fabric_bytes_sent_total")[0].1, 300.0);
        assert_eq!(
            label(
                samples(node, "canopy_fabric_bytes_sent_total")[0].0,
                "parent"
            ),
            Some("cn000002")
        );
    }

    #[test]
    fn quantiles_interpolate_within_buckets() {
        let b = [(0.1, 10.0), (0.25, 90.0), (0.5, 100.0)];
        // Rank 50 is half-way through the 0.1..0.25 bucket.
        assert!((bucket_quantile(&b, 100.0, 0.5) - 0.175).abs() < 1e-12);
        assert!((bucket_quantile(&b, 100.0, 0.05) - 0.05).abs() < 1e-12);
        // Past the last finite bound: that bound.
        assert_eq!(bucket_quantile(&b, 200.0, 0.99), 0.5);
        assert_eq!(bucket_quantile(&b, 0.0, 0.5), 0.0);
    }

    #[test]
    fn window_freshness_uses_the_difference() {
        let before = GW
            .replace("} 10\n", "} 0\n")
            .replace(" 90\n", " 0\n")
            .replace(" 100\n", " 0\n")
            .replace("_sum 15", "_sum 0")
            .replace("_count 100", "_count 0");
        let (p50, p99, mean) = window_freshness(&before, GW);
        assert!((p50 - 175.0).abs() < 1e-9, "{p50}");
        assert!((p99 - 475.0).abs() < 1e-9, "{p99}");
        assert!((mean - 150.0).abs() < 1e-9, "{mean}");
        // No new observation: zeros, not NaN.
        assert_eq!(window_freshness(GW, GW), (0.0, 0.0, 0.0));
    }

    #[test]
    fn uplink_rates_per_link() {
        let b = "canopy_fabric_bytes_sent_total{subtree=\"0\",parent=\"gateway\"} 100\ncanopy_fabric_bytes_sent_total{subtree=\"3\",parent=\"cn000007\"} 50\n";
        let a = "canopy_fabric_bytes_sent_total{subtree=\"0\",parent=\"gateway\"} 300\ncanopy_fabric_bytes_sent_total{subtree=\"3\",parent=\"cn000007\"} 90\n";
        assert_eq!(uplink_rates(b, a, 2.0), vec![100.0, 20.0]);
    }

    #[test]
    fn tick_check_finds_gaps_repeats_and_short_series() {
        let run = |n: i64| (0..n).map(|k| (k * 1000, k as f64)).collect::<Vec<_>>();
        let mut m = BTreeMap::new();
        m.insert("a".to_string(), run(10));
        let mut gap = run(10);
        gap.remove(4);
        m.insert("b".to_string(), gap);
        let mut rep = run(10);
        rep[5].1 = 4.0;
        m.insert("c".to_string(), rep);
        m.insert("d".to_string(), run(3));
        let c = check_ticks(&m, 1000, 9);
        assert_eq!(c.nodes, 4);
        assert_eq!(c.exact_nodes, 1);
        assert_eq!(c.samples, 10 + 9 + 10 + 3);
        // b: one step of +2 over 2 s; c: a repeat and then a +2.
        assert_eq!(c.faults, 3);
    }
}

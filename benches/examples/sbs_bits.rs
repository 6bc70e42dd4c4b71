//! Where the side-by-side data's chunk bytes go, by series of a node: the
//! same samples as `tsdb-side-by-side` (`data::default_set`) appended to one
//! store per series kind, then each store's encoded chunk bytes a sample,
//! beside the empirical entropy of the values' second differences (a rough
//! floor for counters) and of the values (for gauges).
//!
//! ```text
//! cargo run --release -p canopy-benches --example sbs_bits -- [nodes] [minutes]
//! ```
#![allow(clippy::print_stdout)]

use std::collections::HashMap;

use canopy_benches::sidebyside::data::{self, NodeGroup};
use canopy_gateway::store::{Labels, LiveStore, LiveStoreConfig, Sample};

/// Empirical entropy (bits a symbol) of `xs`.
fn entropy<T: std::hash::Hash + Eq>(xs: impl Iterator<Item = T>) -> f64 {
    let mut m: HashMap<T, usize> = HashMap::new();
    let mut n = 0usize;
    for x in xs {
        *m.entry(x).or_default() += 1;
        n += 1;
    }
    m.values()
        .map(|&c| {
            let p = c as f64 / n as f64;
            -p * p.log2()
        })
        .sum()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (nodes, minutes) = (arg(1, 200), arg(2, 65));
    let (spec, _) = data::default_set(nodes, minutes, 1_700_000_000_000);
    let spn = spec.series_per_node;
    let mut stores: Vec<LiveStore> = (0..spn)
        .map(|_| LiveStore::new(LiveStoreConfig::default()))
        .collect();
    // Second differences of the values (counters), quantised to 1e-3.
    let mut dd: Vec<Vec<i64>> = vec![Vec::new(); spn];
    for a in (0..nodes).step_by(10) {
        let mut g = NodeGroup::new(spec, a..(a + 10).min(nodes));
        let req = g.request(spec.steps);
        for (i, ts) in req.timeseries.iter().enumerate() {
            let j = i % spn;
            let labels = Labels::from_pairs(
                ts.labels
                    .iter()
                    .map(|l| (l.name.as_str(), l.value.as_str())),
            );
            let samples: Vec<Sample> = ts
                .samples
                .iter()
                .map(|s| Sample {
                    ts_ms: s.timestamp,
                    value: s.value,
                })
                .collect();
            stores[j].append_samples(&labels, &samples, &mut |_, r| {
                r.expect("append");
            });
            let q: Vec<i64> = samples
                .iter()
                .map(|s| (s.value * 1e3).round() as i64)
                .collect();
            for w in q.windows(3) {
                dd[j].push((w[2] - w[1]) - (w[1] - w[0]));
            }
        }
    }
    let samples = spec.steps as f64 * nodes as f64;
    let mut total = 0.0;
    let mut by_name: Vec<(String, f64, f64)> = Vec::new();
    for (j, s) in stores.iter().enumerate() {
        let b = s.memory_breakdown().chunk_bytes as f64;
        total += b;
        let d = data::series_def(j);
        let h = entropy(dd[j].iter().copied());
        by_name.push((format!("{} {:?}", d.name, d.extra), b * 8.0 / samples, h));
    }
    for (n, bits, h) in &by_name {
        println!("{bits:7.2} bits/sample  H(dd) {h:6.2}  {n}");
    }
    println!(
        "total {:.1} B/series, {:.3} B/sample",
        total / nodes as f64,
        total / (samples * spn as f64)
    );
}

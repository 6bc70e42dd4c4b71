//! Times the issue's benchmark queries on the live store: `series` series
//! of `canopy_job_io_read_bytes_total` (one per node and job) holding
//! `minutes` of samples every `interval` seconds (default 1). Medians of
//! `runs` runs each; `only` (a word of the query's label: `instant`, `topk`,
//! `one-pass`, `step-by-step`) runs just the matching queries, for profiling.
//!
//! ```text
//! cargo run --release -p canopy-gateway --example query_bench -- [series] [minutes] [runs] [interval] [only]
//! ```
//!
//! The side-by-side benchmark's shape: `1000 65 20 15`.
#![allow(clippy::print_stdout)]

use std::time::Instant;

use canopy_gateway::promql::{Engine, EngineOpts};
use canopy_gateway::store::{Labels, LiveStore, LiveStoreConfig, Sample, SharedStore};

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (n, minutes, runs) = (arg(1, 10_000), arg(2, 60), arg(3, 5));
    let interval = arg(4, 1).clamp(1, 60) as i64;
    let only = args.get(5).cloned().unwrap_or_default();
    let per_min = 60 / interval;
    let mut store = LiveStore::new(LiveStoreConfig {
        max_series: n + 10,
        ..LiveStoreConfig::default()
    });
    let t0 = 1_700_000_000_000i64;
    let labels: Vec<Labels> = (0..n)
        .map(|i| {
            Labels::metric(
                "canopy_job_io_read_bytes_total",
                [
                    ("node", format!("node{:05}", i / 10)),
                    ("job_id", format!("{}", 1000 + i % 50)),
                    ("cluster", "hpc".to_string()),
                ],
            )
        })
        .collect();
    let mut batch = Vec::with_capacity(60);
    let step_ms = interval * 1000;
    for m in 0..minutes as i64 {
        for (s, l) in labels.iter().enumerate() {
            batch.clear();
            batch.extend((0..per_min).map(|j| {
                let k = m * per_min + j;
                Sample {
                    ts_ms: t0 + k * step_ms,
                    value: (k * 4096 * (1 + s as i64 % 5) + (k * 31 + s as i64) % 977) as f64,
                }
            }));
            store.append_samples(l, &batch, &mut |_, r| {
                r.expect("append");
            });
        }
    }
    let end = t0 + (minutes as i64 * per_min - 1) * step_ms;
    store.maintain(end);
    let shared = SharedStore::new(store);
    let engine = Engine::new(EngineOpts {
        max_samples: 500_000_000,
        max_series_per_selector: n + 10,
        ..EngineOpts::default()
    });
    let q1 = "sum by (job_id) (rate(canopy_job_io_read_bytes_total[1m]))";
    let q2 = "topk(10, rate(canopy_job_io_read_bytes_total[1m]))";
    println!("{n} series x {minutes} min at {interval} s");
    for q in [q1, q2] {
        let word = if q == q2 { "topk" } else { "instant" };
        if !only.is_empty() && only != word {
            continue;
        }
        let mut ms = Vec::new();
        for _ in 0..runs {
            let t = Instant::now();
            std::hint::black_box(engine.instant(&shared, q, end).expect("query"));
            ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        println!("instant {q}: median {:.1} ms", median(&mut ms));
    }
    let start = end - 3_600_000.min(minutes as i64 * 60_000 - 60_000);
    // The one-pass evaluator and, as the peer in the same run, the
    // step-by-step one (results compared too).
    let step_engine = Engine::new(EngineOpts {
        one_pass_ranges: false,
        ..engine.opts().clone()
    });
    if only.is_empty() {
        let fast = engine
            .range(&shared, q1, start, end, 15_000)
            .expect("query");
        let slow = step_engine
            .range(&shared, q1, start, end, 15_000)
            .expect("query");
        assert_eq!(fast, slow, "one-pass and step-by-step results differ");
    }
    for (label, e) in [("one-pass", &engine), ("step-by-step", &step_engine)] {
        if !only.is_empty() && only != label {
            continue;
        }
        let mut ms = Vec::new();
        for _ in 0..runs {
            let t = Instant::now();
            std::hint::black_box(e.range(&shared, q1, start, end, 15_000).expect("query"));
            ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        println!(
            "range ({label}) {q1} over {} min at 15 s: median {:.1} ms",
            (end - start) / 60_000,
            median(&mut ms)
        );
    }
}

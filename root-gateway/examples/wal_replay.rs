//! Measures the write-ahead log: bytes per sample written, write rate,
//! and recovery (replay) rate and peak memory, on a synthetic fabric load.
//!
//! ```text
//! cargo run --release -p canopy-gateway --example wal_replay -- write DIR [nodes] [series] [ticks]
//! cargo run --release -p canopy-gateway --example wal_replay -- replay DIR
//! ```
//! Run `replay` as its own process so its peak RSS (VmHWM) is replay's alone.
#![allow(clippy::print_stdout)]

use std::time::Instant;

use canopy_gateway::store::{Labels, LiveStoreConfig, Op, SharedStore};
use canopy_gateway::wal::{Wal, WalConfig};

fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn dir_bytes(dir: &str) -> u64 {
    std::fs::read_dir(dir)
        .map(|r| {
            r.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (Some(mode), Some(dir)) = (args.get(1), args.get(2)) else {
        println!("usage: wal_replay write|replay DIR [nodes series ticks]");
        return;
    };
    let t0 = Instant::now();
    let (store, wal, rec) =
        Wal::open(WalConfig::new(dir), LiveStoreConfig::default()).expect("open the data dir");
    let opened = t0.elapsed();
    let series_n = store.stats().series;
    let shared = SharedStore::with_journal(store, Box::new(wal));
    if mode == "replay" {
        println!(
            "replayed {} ops from {} segments (snapshot {:?}) in {:.2} s = {:.2} M ops/s; {} series; \
             data dir {:.1} MiB; peak RSS {} MiB",
            rec.ops,
            rec.segments,
            rec.snapshot,
            opened.as_secs_f64(),
            rec.ops as f64 / opened.as_secs_f64() / 1e6,
            series_n,
            dir_bytes(dir) as f64 / 1048576.0,
            vm_hwm_kib() / 1024
        );
        return;
    }
    let (nodes, per_node, ticks) = (arg(3, 1000), arg(4, 100), arg(5, 600));
    let labels: Vec<Vec<Labels>> = (0..nodes)
        .map(|n| {
            (0..per_node)
                .map(|s| {
                    Labels::metric(
                        "canopy_bench_total",
                        [("node", format!("n{n:05}")), ("s", s.to_string())],
                    )
                })
                .collect()
        })
        .collect();
    let mut samples = 0u64;
    let t0 = Instant::now();
    let mut batch = Vec::new();
    for t in 0..ticks as i64 {
        let ts = 1_700_000_000_000 + t * 1000;
        for (n, ls) in labels.iter().enumerate() {
            let node = format!("n{n:05}");
            batch.push(Op::Heartbeat {
                source: node.clone(),
                ts_ms: ts,
                tick_ms: 1000,
            });
            for (i, l) in ls.iter().enumerate() {
                // A quarter of the series change every tick (counters), the rest are steady.
                if i % 4 == 0 || t == 0 {
                    batch.push(Op::Append {
                        source: Some(node.clone()),
                        labels: l.clone(),
                        ts_ms: ts,
                        value: (t * (i as i64 + 1)) as f64,
                    });
                    samples += 1;
                }
            }
            if batch.len() > 10_000 {
                shared.apply(&batch).expect("apply");
                batch.clear();
            }
        }
        shared.apply(&batch).expect("apply");
        batch.clear();
        shared.tick(ts).expect("tick");
    }
    let el = t0.elapsed().as_secs_f64();
    let bytes = dir_bytes(dir);
    println!(
        "wrote {samples} change points ({} series x {ticks} ticks, 1/4 changing) in {el:.2} s = {:.2} M samples/s; \
         data dir {:.1} MiB = {:.1} B per change point; peak RSS {} MiB",
        nodes * per_node,
        samples as f64 / el / 1e6,
        bytes as f64 / 1048576.0,
        bytes as f64 / samples as f64,
        vm_hwm_kib() / 1024
    );
}

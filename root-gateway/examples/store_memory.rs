//! Measures the live store's resident memory per series and per sample:
//! `series` node-exporter-like series (8 labels) fed `minutes` of 1 s
//! samples of changing counters and gauges, through the batched append
//! remote_write uses. Also times a checkpoint's cut (taken under the store
//! lock) against writing the snapshot (done without it).
//!
//! ```text
//! cargo run --release -p canopy-gateway --example store_memory -- [series] [minutes]
//! ```
#![allow(clippy::print_stdout)]

use std::time::Instant;

use canopy_gateway::store::{Labels, LiveStore, LiveStoreConfig, Sample};

fn vm_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// Same label sets as `ingest_bench`: 8 labels, shared values across series.
fn node_series(n: usize) -> Vec<Labels> {
    const NAMES: [&str; 8] = [
        "node_cpu_seconds_total",
        "node_network_receive_bytes_total",
        "node_network_transmit_bytes_total",
        "node_disk_read_bytes_total",
        "node_disk_written_bytes_total",
        "node_memory_MemAvailable_bytes",
        "node_filesystem_avail_bytes",
        "node_load1",
    ];
    (0..n)
        .map(|i| {
            let node = i / 100;
            Labels::metric(
                NAMES[i % NAMES.len()],
                [
                    ("instance", format!("node{node:05}.cluster.example:9100")),
                    ("job", "node".to_string()),
                    ("cluster", format!("hpc{}", node % 4)),
                    ("rack", format!("r{:03}", node / 40)),
                    ("cpu", format!("{}", (i / 8) % 64)),
                    (
                        "mode",
                        ["user", "system", "idle", "iowait"][i % 4].to_string(),
                    ),
                    ("device", format!("dev{}", i % 100)),
                ],
            )
        })
        .collect()
}

/// Counters grow by varying integral amounts; gauges wander.
fn value(s: usize, k: i64) -> f64 {
    let x = (s as i64).wrapping_mul(2_654_435_761) ^ k.wrapping_mul(40_503);
    let jitter = (x.rem_euclid(1000)) as f64;
    match s % 8 {
        7 => 0.5 + (x.rem_euclid(400)) as f64 / 100.0,
        5 | 6 => 1e9 + jitter * 4096.0,
        _ => (k * 4096 * (1 + (s as i64 % 7))) as f64 + jitter,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (n, minutes) = (arg(1, 100_000), arg(2, 60));
    let labels = node_series(n);
    let mut store = LiveStore::new(LiveStoreConfig {
        max_series: n + 10,
        ..LiveStoreConfig::default()
    });
    let base = vm_rss_kib();
    let t0 = 1_700_000_000_000i64;
    let started = Instant::now();
    let mut batch = Vec::with_capacity(60);
    for m in 0..minutes as i64 {
        for (s, l) in labels.iter().enumerate() {
            batch.clear();
            batch.extend((0..60).map(|j| {
                let k = m * 60 + j;
                Sample {
                    ts_ms: t0 + k * 1000,
                    value: value(s, k),
                }
            }));
            store.append_samples(l, &batch, &mut |_, r| {
                r.expect("append");
            });
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let rss = vm_rss_kib().saturating_sub(base) * 1024;
    let st = store.stats();
    let samples = (n * minutes * 60) as f64;
    println!(
        "{n} series x {minutes} min at 1 s = {:.1} M samples in {secs:.1} s ({:.2} M samples/s)",
        samples / 1e6,
        samples / secs / 1e6
    );
    println!(
        "store RSS {:.1} MiB: {:.0} bytes/series, {:.2} bytes/sample; chunk bytes {:.2}/sample; {} series",
        rss as f64 / (1 << 20) as f64,
        rss as f64 / n as f64,
        rss as f64 / samples,
        st.chunk_bytes as f64 / samples,
        st.series
    );
    let t = Instant::now();
    let cut = store.snapshot_cut();
    let cut_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let bytes = cut.write(&mut std::io::sink()).expect("write");
    let write_ms = t.elapsed().as_secs_f64() * 1e3;
    println!(
        "checkpoint: cut {cut_ms:.0} ms (under the lock), snapshot of {:.0} MiB encoded in {write_ms:.0} ms (no lock)",
        bytes as f64 / (1 << 20) as f64
    );
}

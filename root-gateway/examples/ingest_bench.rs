//! Measures the remote_write ingest path (decode -> write-ahead log ->
//! store) on realistic bodies: node-exporter-like series of 8 labels,
//! changing counter and gauge values, `series` x `samples` per request.
//!
//! ```text
//! cargo run --release -p canopy-gateway --example ingest_bench -- [series] [samples] [requests] [runs]
//! ```
//! Prints samples/s per run (a fresh store and data directory each) and the
//! median, for the journaled store and for decoding alone (snappy, the
//! in-place reader and the series lookup in a store holding them, as the
//! receiver does).
#![allow(clippy::print_stdout)]

use std::time::Instant;

use canopy_gateway::remote_write::pb::WriteBatch;
use canopy_gateway::remote_write::receiver::{ReceiverState, ingest};
use canopy_gateway::remote_write::resolve::find_held;
use canopy_gateway::remote_write::wire::{self, WireLimits};
use canopy_gateway::store::{Labels, LiveStore, LiveStoreConfig, SharedStore};
use canopy_gateway::wal::{FsyncPolicy, Wal, WalConfig};

/// The label sets of `n` node-exporter-like series (8 labels each).
pub fn node_series(n: usize) -> Vec<Labels> {
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

/// Value of series `s` at tick `k`: counters grow by varying amounts, gauges wander.
pub fn value(s: usize, k: i64) -> f64 {
    let x = (s as i64).wrapping_mul(2_654_435_761) ^ k.wrapping_mul(40_503);
    let jitter = (x.rem_euclid(1000)) as f64;
    if s % 8 >= 5 {
        1e9 + jitter * 4096.0
    } else {
        (k * 4096 * (1 + (s as i64 % 7))) as f64 + jitter
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (n_series, n_samples, n_req, runs) = (arg(1, 1000), arg(2, 100), arg(3, 20), arg(4, 5));
    let labels = node_series(n_series);
    let t0 = 1_700_000_000_000i64;
    let bodies: Vec<Vec<u8>> = (0..n_req)
        .map(|r| {
            let mut samples = Vec::with_capacity(n_series * n_samples);
            for (s, l) in labels.iter().enumerate() {
                for j in 0..n_samples {
                    let k = (r * n_samples + j) as i64;
                    samples.push((l, t0 + k * 1000, value(s, k)));
                }
            }
            wire::encode(&wire::request_of(samples)).expect("encode")
        })
        .collect();
    let total = (n_series * n_samples * n_req) as f64;
    let body_bytes: usize = bodies.iter().map(Vec::len).sum();
    println!(
        "{n_req} requests of {n_series} series x {n_samples} samples; {:.1} KiB per body",
        body_bytes as f64 / n_req as f64 / 1024.0
    );
    let limits = WireLimits::default();
    let mut decode_rates = Vec::new();
    let mut wal_rates = Vec::new();
    let mut mem_rates = Vec::new();
    for _ in 0..runs {
        // The receiver's decode: snappy into a reused buffer, the in-place
        // reader, each series found by its label bytes in a store that
        // holds them all (as after the first body).
        let held = SharedStore::new(LiveStore::new(LiveStoreConfig::default()));
        ingest(&ReceiverState::new(held.clone(), None, limits), &bodies[0]).expect("hold");
        let (mut raw, mut batch) = (Vec::new(), WriteBatch::default());
        let (mut pairs, mut out) = (Vec::new(), Vec::new());
        let t = Instant::now();
        for b in &bodies {
            let n = wire::decompress_into(b, &limits, &mut raw).expect("snappy");
            batch.decode(&raw[..n]).expect("decode");
            held.read(|s| find_held(s, &raw[..n], &batch, &mut pairs, &mut out));
            assert!(out.iter().all(Option::is_some), "every series held");
            std::hint::black_box(&out);
        }
        decode_rates.push(total / t.elapsed().as_secs_f64());

        for journaled in [false, true] {
            let dir = tempfile::tempdir().expect("temp dir");
            let store = if journaled {
                let mut cfg = WalConfig::new(dir.path());
                cfg.fsync = FsyncPolicy::Never;
                let (s, wal, _) = Wal::open(cfg, LiveStoreConfig::default()).expect("open wal");
                SharedStore::with_journal(s, Box::new(wal))
            } else {
                SharedStore::new(LiveStore::new(LiveStoreConfig::default()))
            };
            let st = ReceiverState::new(store, None, limits);
            let t = Instant::now();
            for b in &bodies {
                ingest(&st, b).expect("ingest");
            }
            let rate = total / t.elapsed().as_secs_f64();
            if journaled {
                wal_rates.push(rate);
            } else {
                mem_rates.push(rate);
            }
        }
    }
    println!(
        "decode only: median {:.2} M samples/s",
        median(&mut decode_rates) / 1e6
    );
    println!(
        "ingest, memory only: median {:.2} M samples/s (runs: {:?})",
        median(&mut mem_rates) / 1e6,
        mem_rates
            .iter()
            .map(|r| (r / 1e4).round() / 1e2)
            .collect::<Vec<_>>()
    );
    println!(
        "ingest, WAL (fsync never) + store: median {:.2} M samples/s (runs: {:?})",
        median(&mut wal_rates) / 1e6,
        wal_rates
            .iter()
            .map(|r| (r / 1e4).round() / 1e2)
            .collect::<Vec<_>>()
    );
}

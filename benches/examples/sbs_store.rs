//! The store half of `tsdb-side-by-side`, in one process: the same data
//! (same `DataSpec` defaults, bodies cut the same way) fed through the
//! remote_write receiver's `ingest` into a memory-only store, then the
//! process's RSS growth per series, the CPU time of the ingest, and where
//! the store's heap goes by structure. Small enough (`--nodes 100`) to run
//! under callgrind.
//!
//! ```text
//! cargo run --release -p canopy-benches --example sbs_store -- [nodes] [minutes] [data-dir]
//! ```
//!
//! `SBS_INTERVAL_S=1` samples every second instead of every 15 s (the
//! issue's "1 h at 1 s"; `tsdb-side-by-side --interval`).
//!
//! With a `data-dir` (emptied first) the store is journaled as under
//! `canopy gateway --data-dir` (write-ahead log, `fsync` once a tick, the
//! tick driven once per 100 requests), so the durable path's cost shows.
//!
//! `SBS_THREADS=4` sends each sender's bodies from a thread of its own (as
//! the gateway's blocking pool stores concurrent requests on several
//! threads), so allocator effects of multi-threaded ingest show in the RSS.
#![allow(clippy::print_stdout)]

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use canopy_benches::sidebyside::data;
use canopy_gateway::remote_write::receiver::{ReceiverState, ingest};
use canopy_gateway::remote_write::wire::WireLimits;
use canopy_gateway::store::{LiveStore, LiveStoreConfig, Querier, SharedStore};
use canopy_gateway::wal::{Wal, WalConfig};

fn status_kib(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// User + system CPU seconds of this process.
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are the 12th and 13th after ")".
    let field = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    (field(11) + field(12)) as f64 / 100.0
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (nodes, minutes) = (arg(1, 1000), arg(2, 65));
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as i64;
    let (spec, cut) = data::set_at_interval(nodes, minutes, data::interval_from_env(), now_ms);
    let bodies = data::bodies(&spec, &cut)?;
    let dir = args.get(3).map(std::path::PathBuf::from);
    let store = match &dir {
        Some(d) => {
            let _ = std::fs::remove_dir_all(d);
            let (live, wal, _) = Wal::open(WalConfig::new(d), LiveStoreConfig::default())?;
            SharedStore::with_journal(live, Box::new(wal))
        }
        None => SharedStore::new(LiveStore::new(LiveStoreConfig::default())),
    };
    let st = ReceiverState::new(store.clone(), None, WireLimits::default());
    let base = status_kib("VmRSS:");
    let (c0, t0) = (cpu_secs(), Instant::now());
    let threads: usize = std::env::var("SBS_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    if threads > 1 {
        std::thread::scope(|sc| {
            let hs: Vec<_> = bodies
                .iter()
                .map(|list| {
                    let st = &st;
                    sc.spawn(move || {
                        for b in list {
                            ingest(st, &b.bytes).map_err(|(s, m)| anyhow::anyhow!("{s}: {m}"))?;
                        }
                        anyhow::Ok(())
                    })
                })
                .collect();
            hs.into_iter()
                .try_for_each(|h| h.join().map_err(|_| anyhow::anyhow!("a sender panicked"))?)
        })?;
    } else {
        for (i, b) in data::interleaved(&bodies).enumerate() {
            ingest(&st, &b.bytes).map_err(|(s, m)| anyhow::anyhow!("{s}: {m}"))?;
            if dir.is_some() && i % 100 == 99 {
                store.tick(now_ms)?;
            }
        }
    }
    let (cpu, wall) = (cpu_secs() - c0, t0.elapsed().as_secs_f64());
    let rss = (status_kib("VmRSS:").saturating_sub(base) * 1024) as f64;
    let series = spec.series() as f64;
    let samples = spec.samples() as f64;
    println!(
        "{} series x {} samples: {:.2} M samples/s by wall ({wall:.2} s), {:.2} M samples/s by CPU ({cpu:.2} s)",
        spec.series(),
        spec.steps,
        samples / wall / 1e6,
        samples / cpu.max(1e-9) / 1e6
    );
    println!(
        "RSS growth {:.1} MiB = {:.0} B/series (includes the receiver's series cache)",
        rss / 1_048_576.0,
        rss / series
    );
    let m = store.read(|s| s.memory_breakdown());
    let per = |b: usize| b as f64 / series;
    println!(
        "store heap {:.0} B/series: entries {:.0}, labels {:.0}, chunk lists {:.0}, chunk headers {:.0}, chunk bytes {:.0} ({:.2} B/sample), chunk slack {:.0}, index {:.0}, strings {:.0}",
        per(m.total()),
        per(m.entries),
        per(m.labels),
        per(m.chunk_lists),
        per(m.chunk_headers),
        per(m.chunk_bytes),
        m.chunk_bytes as f64 / samples,
        per(m.chunk_slack),
        per(m.index),
        per(m.strings)
    );
    // What a checkpoint holds the store's lock for: taking the cut.
    let (cut_ms, cut_series) = store.read(|s| {
        let t = Instant::now();
        let cut = s.snapshot_cut();
        (t.elapsed().as_secs_f64() * 1e3, cut.series())
    });
    println!("snapshot cut of {cut_series} series: {cut_ms:.1} ms under the lock");
    // What `/api/v1/status/tsdb` holds the read lock for.
    let t = Instant::now();
    let c = store.cardinality(10).unwrap_or_default();
    println!(
        "cardinality ({} series, {} label pairs): {:.1} ms under the read lock",
        c.num_series,
        c.num_label_pairs,
        t.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}

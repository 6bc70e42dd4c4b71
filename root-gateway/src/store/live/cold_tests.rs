//! The cold tier against memory only: the same data gives the same answers
//! whichever way sealed chunks are kept, through retention, file rolls and
//! deletions, snapshots and a failing tier.

#![allow(clippy::unwrap_used)]

use super::tests::m;
use super::*;
use crate::store::{Appender, Querier};

/// The smallest files (a few chunks each), so a run rolls and deletes
/// many, and retention by files is close to exact.
const FILE: u32 = 1024;

fn rng(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed | 1;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

fn cfg() -> LiveStoreConfig {
    LiveStoreConfig {
        retention_ms: 400_000,
        ..LiveStoreConfig::default()
    }
}

fn cold_store(dir: &std::path::Path) -> LiveStore {
    let mut s = LiveStore::new(cfg());
    s.attach_cold(ColdFiles::open(dir, FILE).unwrap());
    s
}

/// Feeds both stores the same `secs` seconds of 24 series (fabric series
/// of two sources, one of which dies for a while, and explicit ones; some
/// steady, some changing every tick, some now and then; starting 5 s
/// apart), maintaining every second. Returns the series names.
fn feed(stores: &mut [&mut LiveStore], seed: u64, from: i64, secs: i64) -> Vec<String> {
    let mut rnd = rng(seed);
    let names: Vec<String> = (0..24).map(|i| format!("m{i}")).collect();
    let mut vals = [0f64; 24];
    for t in from..from + secs {
        let ts = t * 1000 + (rnd() % 7) as i64;
        for (i, name) in names.iter().enumerate() {
            if t < 5 * i as i64 {
                // Staggered starts: chunks seal at different times.
                continue;
            }
            let source = match i % 3 {
                0 => Some("n1"),
                1 if !(300..420).contains(&(t % 1000)) => Some("n2"),
                1 => continue,
                _ => None,
            };
            vals[i] = match i % 4 {
                0 => vals[i] + (rnd() % 50) as f64,
                1 if rnd().is_multiple_of(10) => (rnd() % 8) as f64,
                1 => vals[i],
                2 => vals[i] + 1.0,
                _ => (rnd() % 1000) as f64 / 8.0,
            };
            let l = Labels::metric(name, [("node", "n")]);
            for s in stores.iter_mut() {
                s.append(source, &l, ts, vals[i]).unwrap();
            }
        }
        for s in stores.iter_mut() {
            s.heartbeat("n1", ts, 1000);
            if !(300..420).contains(&(t % 1000)) {
                s.heartbeat("n2", ts, 1000);
            }
            s.maintain(ts);
        }
    }
    names
}

fn answers(s: &LiveStore, name: &str, lo: i64, hi: i64) -> Vec<(i64, u64)> {
    let r = s.select(&m(name), lo, hi, 100).unwrap();
    r.first()
        .map(|x| {
            x.samples
                .iter()
                .map(|p| (p.ts_ms, p.value.to_bits()))
                .collect()
        })
        .unwrap_or_default()
}

/// Every window of `names` (and `up`) answers alike in `a` and `b`;
/// returns how many samples were compared.
fn same_answers(a: &LiveStore, b: &LiveStore, names: &[String], seed: u64) -> usize {
    let mut rnd = rng(seed);
    let now = a.now_ms();
    let mut n = 0;
    for name in names.iter().map(String::as_str).chain(["up"]) {
        for _ in 0..12 {
            let lo = now - (rnd() % 700_000) as i64;
            let hi = lo + (rnd() % 500_000) as i64;
            let (x, y) = (answers(a, name, lo, hi), answers(b, name, lo, hi));
            assert_eq!(x, y, "{name} [{lo}, {hi}]");
            n += x.len();
        }
    }
    n
}

#[test]
fn cold_chunks_answer_as_memory_does() {
    for seed in [3u64, 0x9e37_79b9_7f4a_7c15] {
        let dir = tempfile::tempdir().unwrap();
        let mut hot = LiveStore::new(cfg());
        let mut cold = cold_store(dir.path());
        // Ends just after a retention step (files expired at this very
        // cutoff): the window at the cutoff needs the oldest chunk kept.
        let names = feed(&mut [&mut hot, &mut cold], seed, 0, 1_481);
        assert!(same_answers(&hot, &cold, &names, seed) > 10_000);
        let st = cold.cold_stats().unwrap();
        // Chunks went cold, files rolled and expired, nothing failed.
        assert!(st.chunks_written > 150, "{st:?}");
        assert!(st.files_deleted > 0 && st.write_errors == 0, "{st:?}");
        // What is in memory is the open chunks only.
        let (h, c) = (hot.memory_breakdown(), cold.memory_breakdown());
        assert_eq!(c.chunk_headers, 0);
        assert!(c.chunk_bytes * 2 < h.chunk_bytes, "{h:?} {c:?}");
        // The files on disk are the ones held.
        let on_disk = std::fs::read_dir(dir.path()).unwrap().count() as u64;
        assert_eq!(on_disk, st.files);
    }
}

#[test]
fn snapshots_carry_cold_chunks_and_load_into_either_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut hot = LiveStore::new(cfg());
    let mut cold = cold_store(&dir.path().join("a"));
    let names = feed(&mut [&mut hot, &mut cold], 11, 0, 900);
    // A cut keeps reading the files it needs while the store moves on
    // and deletes them.
    let cut = cold.snapshot_cut();
    let before = cold.cold_stats().unwrap().files_deleted;
    feed(&mut [&mut hot, &mut cold], 12, 900, 600);
    assert!(cold.cold_stats().unwrap().files_deleted > before);
    let mut bytes = Vec::new();
    cut.write(&mut bytes).unwrap();
    drop(cut);
    let from_cut = LiveStore::read_snapshot(cfg(), &mut &bytes[..]).unwrap();
    let mut hot_at_cut = LiveStore::new(cfg());
    feed(&mut [&mut hot_at_cut], 11, 0, 900);
    assert!(same_answers(&hot_at_cut, &from_cut, &names, 5) > 1_000);
    // Now: loaded into a memory-only store and into a new cold tier.
    let mut bytes = Vec::new();
    cold.write_snapshot(&mut bytes).unwrap();
    let mem = LiveStore::read_snapshot(cfg(), &mut &bytes[..]).unwrap();
    let tier = ColdFiles::open(&dir.path().join("b"), FILE).unwrap();
    let mut again = LiveStore::read_snapshot_with(cfg(), Some(tier), &mut &bytes[..]).unwrap();
    assert!(again.cold_stats().unwrap().chunks_written > 0);
    for s in [&mem, &again] {
        assert!(same_answers(&hot, s, &names, 6) > 1_000);
    }
    // The loaded cold store goes on like the others.
    feed(&mut [&mut hot, &mut again], 13, 1_500, 300);
    assert!(same_answers(&hot, &again, &names, 7) > 1_000);
}

#[test]
fn a_failing_tier_keeps_chunks_in_memory_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut hot = LiveStore::new(cfg());
    let mut cold = cold_store(&dir.path().join("c"));
    let names = feed(&mut [&mut hot, &mut cold], 21, 0, 500);
    // The tier's directory goes: the next file cannot be made, so chunks
    // stay in memory after the cold ones, until retention takes them.
    std::fs::remove_dir_all(dir.path().join("c")).unwrap();
    feed(&mut [&mut hot, &mut cold], 22, 500, 700);
    let st = cold.cold_stats().unwrap();
    assert!(st.write_errors > 0, "{st:?}");
    assert!(cold.memory_breakdown().chunk_headers > 0);
    assert!(same_answers(&hot, &cold, &names, 8) > 1_000);
}

#[test]
fn a_loaded_series_without_an_open_chunk_keeps_its_newest_in_memory() {
    let mut hot = LiveStore::new(cfg());
    let names = feed(&mut [&mut hot], 31, 0, 400);
    // Every series' open chunk just sealed (as between a seal and the
    // next sample): nothing succeeds its newest sealed chunk yet.
    for e in hot.entries.iter_mut().flatten() {
        let h = std::mem::take(&mut e.head);
        e.sealed.push(h.view());
    }
    let mut bytes = Vec::new();
    hot.write_snapshot(&mut bytes).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tier = ColdFiles::open(dir.path(), FILE).unwrap();
    let cold = LiveStore::read_snapshot_with(cfg(), Some(tier), &mut &bytes[..]).unwrap();
    for e in cold.entries.iter().flatten() {
        assert_eq!(e.sealed.len(), 1);
        assert_eq!(e.head.len(), 0);
    }
    assert!(cold.cold_stats().unwrap().chunks_written > 0);
    assert!(same_answers(&hot, &cold, &names, 9) > 1_000);
}

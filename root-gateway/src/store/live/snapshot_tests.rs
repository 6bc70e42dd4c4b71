//! Snapshots: round trips, cuts that share sealed chunks, upgrades from
//! the v1, v2, v3, v4 and v5 formats (fixtures under `tests/data/`, v4 made
//! by the encoder with folding off, v5 by the writer without sealed
//! chunks' last timestamps), damaged v5 and v6 records.

#![allow(clippy::unwrap_used)]

use super::snapshot::WRITE_V5;
use super::tests::{m, pts};
use super::*;
use crate::store::chunk::ChunkView;
use crate::store::{Appender, Querier};

#[test]
fn snapshot_round_trip_keeps_every_answer() {
    let mut s = LiveStore::new(LiveStoreConfig::default());
    let l = Labels::metric("cpu", [("node", "n1")]);
    let x = Labels::metric("job_cpu", [("job_id", "7")]);
    for t in 0..=20 {
        let ts = t * 1000;
        s.append(Some("n1"), &l, ts, if t < 8 { 1.0 } else { 2.0 })
            .unwrap();
        s.heartbeat("n1", ts, 1000);
        s.append(None, &x, ts, t as f64).unwrap();
    }
    s.retire(&x, 20_500);
    s.maintain(30_000);
    let mut bytes = Vec::new();
    let n = s.write_snapshot(&mut bytes).unwrap();
    assert_eq!(n as usize, bytes.len());
    let r = LiveStore::read_snapshot(LiveStoreConfig::default(), &mut &bytes[..]).unwrap();
    for name in ["cpu", "job_cpu", "up"] {
        let a = pts(&s, name, 0, 60_000);
        assert!(!a.is_empty(), "{name}");
        let b = pts(&r, name, 0, 60_000);
        assert_eq!(
            a.iter().map(|p| (p.0, p.1.to_bits())).collect::<Vec<_>>(),
            b.iter().map(|p| (p.0, p.1.to_bits())).collect::<Vec<_>>(),
            "{name}"
        );
    }
    assert_eq!(s.stats(), r.stats());
    // The rebuilt store keeps accepting data, with its indexes intact.
    let mut r = r;
    r.append(Some("n1"), &l, 21_000, 3.0).unwrap();
    assert_eq!(pts(&r, "cpu", 21_000, 21_000), vec![(21_000, 3.0)]);
    // Every truncation of the stream is an error, never a panic.
    for cut in [0, 5, bytes.len() / 2, bytes.len() - 1] {
        assert!(
            LiveStore::read_snapshot(LiveStoreConfig::default(), &mut &bytes[..cut]).is_err(),
            "cut at {cut}"
        );
    }
}

/// A metric name, whether it has a source, and its samples.
type V1Series = (&'static str, bool, Vec<(i64, f64)>);

/// The series `tests/data/gen_snapshot_v1.rs` wrote to `snapshot_v1.bin`.
mod v1_data {
    include!("../../../tests/data/snapshot_v1_series.rs");
}

/// The samples of `tests/data/snapshot_v1.bin`: (metric, has a source,
/// samples).
fn v1_series() -> Vec<V1Series> {
    v1_data::v1_series()
        .into_iter()
        .map(|(name, source, samples)| (name, source != 0, samples))
        .collect()
}

#[test]
fn upgrade_reads_v1_snapshot_with_every_sample() {
    let bytes = include_bytes!("../../../tests/data/snapshot_v1.bin");
    let s = LiveStore::read_snapshot(LiveStoreConfig::default(), &mut &bytes[..]).unwrap();
    assert_eq!(s.now_ms(), 310_000);
    let st = s.stats();
    assert_eq!(
        (st.rejected_series, st.out_of_order, st.sources_died),
        (2, 3, 1)
    );
    // Converted chunks keep the v1 chunk boundaries (240 samples).
    assert_series(&s, &v1_series());
    // A series without a source answers queries with its samples as stored.
    let p = pts(&s, "v1_steady", 0, 9_000);
    assert_eq!(p.len(), 10);
    assert!(p.iter().all(|x| x.1 == 5.0));
    // The loaded store keeps accepting data and writes a v5 snapshot that
    // reads back the same.
    let mut s = s;
    let l = Labels::metric("v1_steady", [("node", "n1")]);
    s.append(None, &l, 10_000, 6.0).unwrap();
    let mut v2 = Vec::new();
    s.write_snapshot(&mut v2).unwrap();
    assert!(v2.windows(18).any(|w| w == b"canopy-snapshot-v6"));
    let r = LiveStore::read_snapshot(LiveStoreConfig::default(), &mut &v2[..]).unwrap();
    assert_eq!(pts(&r, "v1_steady", 10_000, 10_000), vec![(10_000, 6.0)]);
    // Every truncation of the v1 stream is an error, never a panic.
    for cut in [20, bytes.len() / 2, bytes.len() - 1] {
        assert!(
            LiveStore::read_snapshot(LiveStoreConfig::default(), &mut &bytes[..cut]).is_err(),
            "cut at {cut}"
        );
    }
}
#[test]
fn snapshot_cut_shares_sealed_chunks_only_and_reads_back_whole() {
    let mut s = LiveStore::new(LiveStoreConfig::default());
    // a: sealed + open; b: exactly one full chunk; c: one open chunk;
    // d: a change-only series of a source.
    let sizes = [
        ("a", 300usize),
        ("b", crate::store::chunk::CHUNK_SAMPLES),
        ("c", 5),
    ];
    for (name, n) in sizes {
        let l = Labels::metric("cut", [("s", name)]);
        for k in 0..n as i64 {
            s.append(None, &l, k * 1000, (k * k) as f64 * 0.5).unwrap();
        }
    }
    let d = Labels::metric("cut", [("s", "d")]);
    for t in 0..20i64 {
        s.append(Some("n1"), &d, t * 1000, (t / 4) as f64).unwrap();
        s.heartbeat("n1", t * 1000, 1000);
    }
    let cut = s.snapshot_cut();
    // The cut shares the sealed buffers (only `a` has one); the open
    // chunks live in the entries, copied into the cut's flat buffer.
    for e in s.entries.iter().flatten() {
        let want = if e.sealed.is_empty() { 0 } else { 2 };
        assert_eq!(e.sealed.holders(), want);
    }
    let mut bytes = Vec::new();
    cut.write(&mut bytes).unwrap();
    let mut direct = Vec::new();
    s.write_snapshot(&mut direct).unwrap();
    assert_eq!(bytes, direct);
    // Later appends change neither the cut nor what it reads back as,
    // also one that seals `b`'s full chunk.
    for k in 300..310 {
        s.append(None, &Labels::metric("cut", [("s", "a")]), k * 1000, 1.0)
            .unwrap();
    }
    let all = |st: &LiveStore| st.select(&m("cut"), 0, 299_000, 100).unwrap();
    let want = all(&s);
    s.append(None, &Labels::metric("cut", [("s", "b")]), 240_000, 1.0)
        .unwrap();
    assert_eq!(
        s.entries
            .iter()
            .flatten()
            .filter(|e| !e.sealed.is_empty())
            .count(),
        2
    );
    let mut again = Vec::new();
    cut.write(&mut again).unwrap();
    assert_eq!(again, bytes);
    let back = LiveStore::read_snapshot(LiveStoreConfig::default(), &mut &bytes[..]).unwrap();
    let got = all(&back);
    assert_eq!(got.len(), 4);
    assert_eq!(got, want);
}

/// The samples of `tests/data/snapshot_v2.bin`: those of `snapshot_v1.bin`
/// plus `v2_cpu` (a sum of ms-rounded increments, drifting a few ulps off
/// its decimals), as `LiveStore::write_snapshot` wrote them at commit
/// 1c63ebd (v2 chunks) after loading `snapshot_v1.bin` and appending them.
fn v2_series() -> Vec<V1Series> {
    let mut all = v1_series();
    let mut v = 0.0f64;
    let cpu = (0..260i64)
        .map(|i| {
            v += ((i * 7919) % 3000 + 9000) as f64 / 1e3;
            (400_000 + i * 15_000, v)
        })
        .collect();
    all.push(("v2_cpu", false, cpu));
    all
}

/// Every sample of every series of `s`, bit for bit, as `want` lists them.
fn assert_series(s: &LiveStore, want: &[V1Series]) {
    assert_eq!(s.entries.iter().flatten().count(), want.len());
    for (name, sourced, samples) in want {
        let e = s
            .entries
            .iter()
            .flatten()
            .find(|e| s.strings.labels(&s.syms(e)).name() == *name)
            .unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(e.source().is_some(), *sourced, "{name}");
        assert_eq!(
            e.chunk_count(),
            samples.len().div_ceil(crate::store::chunk::CHUNK_SAMPLES),
            "{name}"
        );
        let mut got = Vec::new();
        for c in e.chunks(s.cold_read()) {
            c.decode(&mut got);
        }
        let got: Vec<_> = got.iter().map(|p| (p.ts_ms, p.value.to_bits())).collect();
        let want: Vec<_> = samples.iter().map(|p| (p.0, p.1.to_bits())).collect();
        assert_eq!(got, want, "{name}: every sample, bit for bit");
    }
}

#[test]
fn upgrade_reads_v2_snapshot_with_every_sample() {
    let bytes = include_bytes!("../../../tests/data/snapshot_v2.bin");
    assert!(bytes.windows(18).any(|w| w == b"canopy-snapshot-v2"));
    let s = LiveStore::read_snapshot(LiveStoreConfig::default(), &mut &bytes[..]).unwrap();
    let want = v2_series();
    assert_series(&s, &want);
    // Converted chunks are in today's format: smaller than the v2 ones,
    // and a v5 snapshot of them reads back the same samples.
    let mut v4 = Vec::new();
    s.write_snapshot(&mut v4).unwrap();
    assert!(v4.windows(18).any(|w| w == b"canopy-snapshot-v6"));
    assert!(v4.len() < bytes.len(), "{} >= {}", v4.len(), bytes.len());
    let r = LiveStore::read_snapshot(LiveStoreConfig::default(), &mut &v4[..]).unwrap();
    assert_series(&r, &want);
    // Every truncation of the v2 stream is an error, never a panic.
    for cut in [20, bytes.len() / 2, bytes.len() - 1] {
        assert!(
            LiveStore::read_snapshot(LiveStoreConfig::default(), &mut &bytes[..cut]).is_err(),
            "cut at {cut}"
        );
    }
}

/// `tests/data/snapshot_v3.bin` is `snapshot_v2.bin` loaded and written
/// again by the v3 store (main at daaa385): every chunk with its encoder
/// state. A load keeps the last chunk of each series open and only the
/// bits of the others; appends continue the open chunk's encoder.
#[test]
fn upgrade_reads_v3_snapshot_with_every_sample() {
    let bytes = include_bytes!("../../../tests/data/snapshot_v3.bin");
    assert!(bytes.windows(18).any(|w| w == b"canopy-snapshot-v3"));
    let s = LiveStore::read_snapshot(LiveStoreConfig::default(), &mut &bytes[..]).unwrap();
    let want = v2_series();
    assert_series(&s, &want);
    // v2_cpu has 260 samples, pushed again into chunks of this release's
    // size: sealed ones and an open one.
    let n = crate::store::chunk::CHUNK_SAMPLES;
    let cpu = s
        .entries
        .iter()
        .flatten()
        .find(|e| s.strings.labels(&s.syms(e)).name() == "v2_cpu")
        .unwrap();
    assert_eq!((cpu.sealed.len(), cpu.head.len()), (260 / n, 260 % n));
    // A v5 snapshot of it is smaller (no encoder state for sealed chunks)
    // and reads back the same samples.
    let mut v4 = Vec::new();
    s.write_snapshot(&mut v4).unwrap();
    assert!(v4.windows(18).any(|w| w == b"canopy-snapshot-v6"));
    assert!(v4.len() < bytes.len(), "{} >= {}", v4.len(), bytes.len());
    let mut r = LiveStore::read_snapshot(LiveStoreConfig::default(), &mut &v4[..]).unwrap();
    assert_series(&r, &want);
    // The open chunk's encoder state came through: appends continue it
    // and read back, sealing it at CHUNK_SAMPLES.
    let l = s.strings.labels(&s.syms(cpu));
    let last = want.iter().find(|w| w.0 == "v2_cpu").unwrap().2.clone();
    let (t0, v0) = *last.last().unwrap();
    let more: Vec<(i64, f64)> = (1..=230i64)
        .map(|i| (t0 + i * 15_000, v0 + i as f64 * 9.5))
        .collect();
    for &(t, v) in &more {
        r.append(None, &l, t, v).unwrap();
    }
    let got = pts(&r, "v2_cpu", 0, i64::MAX);
    let mut all = last.clone();
    all.extend_from_slice(&more);
    assert_eq!(
        got.iter().map(|p| (p.0, p.1.to_bits())).collect::<Vec<_>>(),
        all.iter().map(|p| (p.0, p.1.to_bits())).collect::<Vec<_>>()
    );
    // Every truncation of either stream is an error, never a panic.
    for b in [&bytes[..], &v4[..]] {
        for cut in [20, b.len() / 2, b.len() - 1] {
            assert!(
                LiveStore::read_snapshot(LiveStoreConfig::default(), &mut &b[..cut]).is_err(),
                "cut at {cut}"
            );
        }
    }
}

/// A v5 or v6 snapshot whose series record is damaged (sealed runs'
/// counts, spans, lengths and order, the open chunk's flag and state),
/// with valid checksums, is refused or loads something queries read
/// without a panic.
#[test]
fn damaged_series_records_never_panic() {
    damaged_series_records(true);
    damaged_series_records(false);
}

fn damaged_series_records(v5: bool) {
    use crate::store::codec::{read_frame, write_frame};
    let mut s = LiveStore::new(LiveStoreConfig::default());
    let l = Labels::metric("dmg", [("node", "n1")]);
    for t in 0..500i64 {
        s.append(None, &l, t * 1000, (t % 7) as f64).unwrap();
    }
    let mut good = Vec::new();
    WRITE_V5.with(|w| w.set(v5));
    s.write_snapshot(&mut good).unwrap();
    WRITE_V5.with(|w| w.set(false));
    let mut frames = Vec::new();
    let mut r = &good[..];
    let mut buf = Vec::new();
    while read_frame(&mut r, &mut buf, 1 << 20).unwrap() {
        frames.push(buf.clone());
    }
    // magic, header, the series, end.
    assert_eq!(frames.len(), 4);
    let (mut refused, mut loaded) = (0, 0);
    for i in 0..frames[2].len() {
        for x in [0x01u8, 0x10, 0x80, 0xff] {
            let mut bad = Vec::new();
            for (k, f) in frames.iter().enumerate() {
                let mut f = f.clone();
                if k == 2 {
                    f[i] ^= x;
                }
                write_frame(&mut bad, &f).unwrap();
            }
            match LiveStore::read_snapshot(LiveStoreConfig::default(), &mut &bad[..]) {
                Ok(r) => {
                    loaded += 1;
                    let _ = r.select(&m("dmg"), 0, i64::MAX, 10);
                }
                Err(_) => refused += 1,
            }
        }
    }
    assert!(
        refused > 0 && loaded > 0,
        "{refused} refused, {loaded} loaded"
    );
}

/// Series of every kind the chunk format has codes for: a counter with
/// jittered and skipped ticks and a reset, a quantised gauge redrawn
/// every 4 ticks, a flat series, noisy floats and cpu seconds to the ms;
/// 500 samples each (two sealed chunks and an open one).
fn v4_series() -> Vec<(Labels, Vec<(i64, f64)>)> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let names = ["v4_ctr", "v4_gauge", "v4_flat", "v4_float", "v4_cpu"];
    let mut out: Vec<(Labels, Vec<(i64, f64)>)> = names
        .iter()
        .map(|n| (Labels::metric(n, [("node", "n1")]), Vec::new()))
        .collect();
    let (mut t, mut ctr, mut cpu, mut gauge) = (1_000i64, 1e12, 5_000.0f64, 0.0);
    for k in 0..500u64 {
        t += match k % 97 {
            13 => 15_000 + 7,
            50 => 45_000,
            _ => 15_000,
        };
        ctr = if k == 300 {
            0.0
        } else {
            ctr + (3_000_000 + rnd() % 1_000_000) as f64
        };
        cpu = ((cpu + 10.5 + (rnd() % 1000) as f64 / 1e3) * 1e3).round() / 1e3;
        if k % 4 == 0 {
            gauge = (rnd() % 1_000_000) as f64 * 4096.0;
        }
        let float = (rnd() >> 11) as f64 / (1u64 << 53) as f64;
        for (i, v) in [ctr, gauge, 64.0, float, cpu].into_iter().enumerate() {
            out[i].1.push((t, v));
        }
    }
    out
}

fn assert_v4_series(s: &LiveStore, want: &[(Labels, Vec<(i64, f64)>)]) {
    for (l, w) in want {
        let got = pts(s, l.name(), 0, i64::MAX);
        assert_eq!(
            got.iter().map(|p| (p.0, p.1.to_bits())).collect::<Vec<_>>(),
            w.iter().map(|p| (p.0, p.1.to_bits())).collect::<Vec<_>>(),
            "{}",
            l.name()
        );
    }
}

/// A snapshot of the v4 release (chunks with a flag bit on every sample,
/// made here by the encoder with folding off, as v4 wrote them) loads
/// with every sample: its sealed runs and open chunks are decoded in the
/// v4 format and pushed again. Written again it is a smaller v5 that
/// reads back the same, and appends continue it.
#[test]
fn upgrade_reads_v4_snapshot_with_every_sample() {
    use crate::store::chunk::{CHUNK_SAMPLES, SEAL_AT, WRITE_V4};
    let want = v4_series();
    // As the v4 release wrote: folded codes off, chunks of 240 samples
    // (kept at 240 throughout, so the formats' sizes compare on the same
    // chunks).
    WRITE_V4.with(|w| w.set(true));
    SEAL_AT.with(|w| w.set(240));
    let mut old = LiveStore::new(LiveStoreConfig::default());
    for (l, p) in &want {
        for &(t, v) in p {
            old.append(None, l, t, v).unwrap();
        }
    }
    let mut v4 = Vec::new();
    old.write_snapshot(&mut v4).unwrap();
    WRITE_V4.with(|w| w.set(false));
    assert!(v4.windows(18).any(|w| w == b"canopy-snapshot-v4"));
    let s = LiveStore::read_snapshot(LiveStoreConfig::default(), &mut &v4[..]).unwrap();
    assert_v4_series(&s, &want);
    let e = s.entries.iter().flatten().next().unwrap();
    assert_eq!((e.sealed.len(), e.head.len()), (2, 20));
    let mut v5 = Vec::new();
    s.write_snapshot(&mut v5).unwrap();
    assert!(v5.windows(18).any(|w| w == b"canopy-snapshot-v6"));
    assert!(v5.len() < v4.len(), "{} >= {}", v5.len(), v4.len());
    let mut r = LiveStore::read_snapshot(LiveStoreConfig::default(), &mut &v5[..]).unwrap();
    assert_v4_series(&r, &want);
    let mut more = want.clone();
    for (l, p) in &mut more {
        let (t0, v0) = *p.last().unwrap();
        for i in 1..=30i64 {
            let pt = (t0 + i * 15_000, v0 + i as f64 * 1024.0);
            r.append(None, l, pt.0, pt.1).unwrap();
            p.push(pt);
        }
    }
    assert_v4_series(&r, &more);
    // Every truncation of the v4 stream is an error, never a panic.
    for cut in [20, v4.len() / 2, v4.len() - 1] {
        assert!(
            LiveStore::read_snapshot(LiveStoreConfig::default(), &mut &v4[..cut]).is_err(),
            "cut at {cut}"
        );
    }
    SEAL_AT.with(|w| w.set(CHUNK_SAMPLES));
}

/// A v5 snapshot (sealed chunks of 240 samples without their last
/// timestamps) loads with every sample and each sealed chunk's exact last
/// timestamp, found by decoding it; written again as v6 the spans and the
/// 240-sample chunks are kept, appends seal chunks of this release's size
/// after them, and a sealed chunk whose stream does not hold its count of
/// samples is refused.
#[test]
fn upgrade_reads_v5_snapshot_with_last_timestamps() {
    use crate::store::chunk::{CHUNK_SAMPLES, SEAL_AT};
    let want = v4_series();
    SEAL_AT.with(|w| w.set(240));
    let mut old = LiveStore::new(LiveStoreConfig::default());
    for (l, p) in &want {
        for &(t, v) in p {
            old.append(None, l, t, v).unwrap();
        }
    }
    let lasts = |s: &LiveStore| -> Vec<Vec<Option<i64>>> {
        let mut v: Vec<_> = s
            .entries
            .iter()
            .flatten()
            .map(|e| (0..e.sealed.len()).map(|i| e.sealed.last_ts(i)).collect())
            .collect();
        v.sort();
        v
    };
    let exp = lasts(&old);
    assert!(
        exp.iter()
            .all(|l| l.len() == 2 && l.iter().all(Option::is_some))
    );
    // Each sealed chunk's last sample is the one before the next chunk's.
    for (l, p) in &want {
        let e = old
            .entries
            .iter()
            .flatten()
            .find(|e| old.strings.labels(&old.label_ids.get(e.labels)) == *l)
            .unwrap();
        for i in 0..e.sealed.len() {
            let next = if i + 1 < e.sealed.len() {
                e.sealed.first_ts(i + 1)
            } else {
                e.head.first_ts()
            };
            let before = p.iter().rev().find(|q| q.0 < next).unwrap().0;
            assert_eq!(e.sealed.last_ts(i), Some(before), "{}", l.name());
        }
    }
    WRITE_V5.with(|w| w.set(true));
    let mut v5 = Vec::new();
    old.write_snapshot(&mut v5).unwrap();
    WRITE_V5.with(|w| w.set(false));
    assert!(v5.windows(18).any(|w| w == b"canopy-snapshot-v5"));
    let r = LiveStore::read_snapshot(LiveStoreConfig::default(), &mut &v5[..]).unwrap();
    assert_v4_series(&r, &want);
    assert_eq!(lasts(&r), exp);
    let mut v6 = Vec::new();
    r.write_snapshot(&mut v6).unwrap();
    assert!(v6.windows(18).any(|w| w == b"canopy-snapshot-v6"));
    let mut r6 = LiveStore::read_snapshot(LiveStoreConfig::default(), &mut &v6[..]).unwrap();
    assert_v4_series(&r6, &want);
    assert_eq!(lasts(&r6), exp);
    // Appends after the 240-sample chunks seal chunks of this release's
    // size, and every sample reads back.
    SEAL_AT.with(|w| w.set(CHUNK_SAMPLES));
    let mut more = want.clone();
    for (l, p) in &mut more {
        let (t0, v0) = *p.last().unwrap();
        for i in 1..=2 * CHUNK_SAMPLES as i64 {
            let pt = (t0 + i * 15_000, v0 + i as f64 * 4096.0);
            r6.append(None, l, pt.0, pt.1).unwrap();
            p.push(pt);
        }
    }
    assert_v4_series(&r6, &more);
    for e in r6.entries.iter().flatten() {
        let sizes: Vec<_> = e.sealed.iter_from(0, None).map(|v| v.len()).collect();
        assert_eq!(&sizes[..2], [240, 240], "{sizes:?}");
        assert!(sizes[2..].iter().all(|&n| n == CHUNK_SAMPLES), "{sizes:?}");
        assert!(sizes.len() >= 4, "{sizes:?}");
    }
    SEAL_AT.with(|w| w.set(240));
    // A v5 sealed run claiming one sample more than its stream holds.
    let mut one = LiveStore::new(LiveStoreConfig::default());
    let l = Labels::metric("c", [("node", "n1")]);
    for t in 0..250i64 {
        one.append(None, &l, t * 1000, t as f64).unwrap();
    }
    let e = one.entries.iter().flatten().next().unwrap();
    let run = e.sealed.iter_from(0, None).next().unwrap();
    assert_eq!(
        ChunkView::sealed_scanned(run.bytes(), run.bit_len(), run.len(), run.first_ts())
            .map(|v| v.last_ts()),
        Some(239_000)
    );
    // The same count in a stream cut short.
    let cut = &run.bytes()[..run.bytes().len() - 4];
    assert!(
        ChunkView::sealed_scanned(cut, cut.len() as u32 * 8, run.len(), run.first_ts()).is_none()
    );
    SEAL_AT.with(|w| w.set(CHUNK_SAMPLES));
}

/// The snapshot the cut wrote before its buffers moved to anonymous
/// mappings (branch point of `gwcut`, with v6's sealed spans): label ids and open-chunk
/// states in flat `Vec`s with each series' ends, then the same records.
/// The reference for [`cut_in_mapped_buffers_writes_the_old_paths_bytes`];
/// a change of the record format changes both.
fn old_path_snapshot(s: &LiveStore) -> Vec<u8> {
    use crate::store::codec::{put_str, put_uvarint, put_varint, write_frame};
    let (mut label_ids, mut open, mut series) = (Vec::new(), Vec::new(), Vec::new());
    for e in s.entries.iter().flatten() {
        label_ids.extend_from_slice(&s.syms(e));
        if e.head.len() > 0 {
            e.head.write_state(&mut open);
        }
        series.push((e.source(), e.sealed.clone(), label_ids.len(), open.len()));
    }
    let strings = s.strings.table();
    let str_of = |id: u32| strings.get(id as usize).map_or("", |s| s);
    let mut w = Vec::new();
    write_frame(&mut w, b"canopy-snapshot-v6").unwrap();
    let mut p = vec![0x01];
    put_varint(&mut p, s.now_ms);
    put_uvarint(&mut p, s.stats.rejected_series);
    put_uvarint(&mut p, s.stats.out_of_order);
    put_uvarint(&mut p, s.stats.sources_died);
    put_uvarint(&mut p, s.sources.len() as u64);
    put_uvarint(&mut p, series.len() as u64);
    write_frame(&mut w, &p).unwrap();
    for src in &s.sources {
        p.clear();
        p.push(0x02);
        put_str(&mut p, &src.name);
        put_varint(&mut p, src.tick_ms);
        put_uvarint(&mut p, src.alive.len() as u64);
        for a in &src.alive {
            put_varint(&mut p, a.start);
            put_varint(&mut p, a.end);
            p.push(u8::from(a.closed));
        }
        write_frame(&mut w, &p).unwrap();
    }
    let (mut labels_from, mut open_from) = (0, 0);
    for (source, sealed, labels_end, open_end) in &series {
        let labels = &label_ids[labels_from..*labels_end];
        let open = &open[open_from..*open_end];
        (labels_from, open_from) = (*labels_end, *open_end);
        p.clear();
        p.push(0x03);
        put_uvarint(&mut p, (labels.len() / 2) as u64);
        for id in labels {
            put_str(&mut p, str_of(*id));
        }
        put_uvarint(&mut p, source.map_or(0, |s| u64::from(s) + 1));
        put_uvarint(&mut p, sealed.len() as u64);
        for c in sealed.iter_from(0, None) {
            put_varint(&mut p, c.first_ts());
            put_uvarint(&mut p, c.last_ts().abs_diff(c.first_ts()));
            put_uvarint(&mut p, c.len() as u64);
            put_uvarint(&mut p, u64::from(c.bit_len()));
            p.extend_from_slice(c.bytes());
        }
        p.push(u8::from(!open.is_empty()));
        p.extend_from_slice(open);
        write_frame(&mut w, &p).unwrap();
    }
    p.clear();
    p.push(0x04);
    put_uvarint(&mut p, s.sources.len() as u64);
    put_uvarint(&mut p, series.len() as u64);
    write_frame(&mut w, &p).unwrap();
    w
}

/// A store of `n` series (seeded): 0 to 7 labels besides the name, 0 to
/// ~700 samples (none, open only, sealed and open), every third of a
/// source with heartbeats, counters, gauges and noise; series of source
/// `dead` stop early and are dropped by retention (freed slots).
fn mixed_store(n: usize, seed: u64) -> LiveStore {
    let mut x = seed | 1;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let cfg = LiveStoreConfig {
        retention_ms: 600_000,
        ..LiveStoreConfig::default()
    };
    let mut s = LiveStore::new(cfg);
    let end = 700_000i64;
    for i in 0..n {
        let n_labels = (rnd() % 8) as usize;
        let pairs: Vec<(String, String)> = (0..n_labels)
            .map(|k| (format!("l{k}"), format!("v{}", rnd() % 50)))
            .chain([("i".to_string(), i.to_string())])
            .collect();
        let l = Labels::metric(&format!("m{}", i % 13), pairs);
        let dead = i % 17 == 0;
        let source = match i % 3 {
            0 if dead => Some("dead"),
            0 => Some(["n1", "n2", "n3"][i % 9 / 3]),
            _ => None,
        };
        let samples = if dead { 60 } else { (rnd() % 700) as i64 };
        let first = if dead { 0 } else { end - samples * 1000 };
        let mut v = (rnd() % 1000) as f64;
        for k in 0..samples {
            let ts = first + k * 1000;
            v = match i % 4 {
                0 => v + (rnd() % 100) as f64,
                1 => ((rnd() % 8) * 1024) as f64,
                2 => v,
                _ => (rnd() % 1_000_000) as f64 / 1e3,
            };
            s.append(source, &l, ts, v).unwrap();
        }
    }
    for t in 0..=700i64 {
        for src in ["n1", "n2", "n3"] {
            s.heartbeat(src, t * 1000, 1000);
        }
        if t < 70 {
            s.heartbeat("dead", t * 1000, 1000);
        }
    }
    s.maintain(end + 5_000);
    // Every 11th series with its open chunk just sealed (an empty head,
    // as between a seal and the next sample).
    for e in s.entries.iter_mut().flatten().step_by(11) {
        if e.head.len() > 0 {
            let h = std::mem::take(&mut e.head);
            e.sealed.push(h.view());
        }
    }
    s
}

/// The cut in anonymous mappings writes byte for byte what the flat
/// `Vec` cut wrote, on a store with many series of every shape.
#[test]
fn cut_in_mapped_buffers_writes_the_old_paths_bytes() {
    let s = mixed_store(6_000, 0x9e37_79b9_7f4a_7c15);
    assert!(s.entries.iter().any(Option::is_none), "no freed slot");
    let with = |f: fn(&Entry) -> bool| s.entries.iter().flatten().filter(|e| f(e)).count();
    assert!(with(|e| e.head.len() == 0) > 0);
    assert!(with(|e| e.head.len() > 0 && e.sealed.is_empty()) > 0);
    assert!(with(|e| e.head.len() > 0 && e.sealed.len() > 1) > 0);
    assert!(with(|e| e.source().is_some()) > 0);
    let want = old_path_snapshot(&s);
    let cut = s.snapshot_cut();
    assert_eq!(cut.series(), s.stats().series);
    let mut got = Vec::new();
    cut.write(&mut got).unwrap();
    assert!(got == want, "{} vs {} bytes", got.len(), want.len());
    let mut direct = Vec::new();
    s.write_snapshot(&mut direct).unwrap();
    assert!(direct == want);
    // Sized by a bound every open state fits (so the buffer never grows).
    let (written, mapped) = cut.buffer_bytes();
    assert!(written <= mapped, "{written} in {mapped}");
    for e in s.entries.iter().flatten() {
        let mut st = Vec::new();
        e.head.write_state(&mut st);
        assert!(st.len() <= super::snapshot::OPEN_STATE_HEAD + e.head.byte_len());
    }
    // And it reads back to a store that writes the same bytes again.
    let back = LiveStore::read_snapshot(LiveStoreConfig::default(), &mut &got[..]).unwrap();
    let mut again = Vec::new();
    back.write_snapshot(&mut again).unwrap();
    assert!(again == want);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
    /// As above, on stores of 0 to 300 series from random seeds.
    #[test]
    fn cut_writes_the_old_paths_bytes_for_any_store(n in 0usize..300, seed in proptest::prelude::any::<u64>()) {
        let s = mixed_store(n, seed);
        let mut got = Vec::new();
        s.snapshot_cut().write(&mut got).unwrap();
        proptest::prop_assert!(got == old_path_snapshot(&s));
    }
}

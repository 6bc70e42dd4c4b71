#![allow(clippy::unwrap_used)]

use super::*;
use crate::store::{Appender, Matcher, Querier};
use canopy_proto::model::METRIC_NAME;
use std::sync::Arc;

pub(super) fn m(name: &str) -> Vec<Matcher> {
    vec![Matcher::equal(METRIC_NAME, name)]
}

pub(super) fn pts(s: &LiveStore, name: &str, lo: i64, hi: i64) -> Vec<(i64, f64)> {
    let r = s.select(&m(name), lo, hi, 100).unwrap();
    r.first()
        .map(|x| x.samples.iter().map(|p| (p.ts_ms, p.value)).collect())
        .unwrap_or_default()
}

#[test]
fn change_only_series_is_implied_at_each_tick() {
    let mut s = LiveStore::new(LiveStoreConfig::default());
    let l = Labels::metric("cpu", [("node", "n1")]);
    for t in 0..=10 {
        let ts = t * 1000;
        let v = if t < 5 { 1.0 } else { 2.0 };
        s.append(Some("n1"), &l, ts, v).unwrap();
        s.heartbeat("n1", ts, 1000);
    }
    // Only two change points are stored.
    assert_eq!(s.stats().change_points, 2);
    let p = pts(&s, "cpu", 0, 20_000);
    assert_eq!(p.len(), 11);
    assert_eq!(p[4], (4000, 1.0));
    assert_eq!(p[5], (5000, 2.0));
    assert_eq!(p[10], (10_000, 2.0));
}

#[test]
fn silent_source_goes_stale_and_up_drops() {
    let mut s = LiveStore::new(LiveStoreConfig::default());
    let l = Labels::metric("mem", [("node", "n1")]);
    s.append(Some("n1"), &l, 0, 7.0).unwrap();
    for t in 0..=3 {
        s.heartbeat("n1", t * 1000, 1000);
    }
    s.maintain(5_000);
    assert!(pts(&s, "mem", 0, 60_000).iter().all(|p| !is_stale_nan(p.1)));
    s.maintain(9_000);
    let p = pts(&s, "mem", 0, 60_000);
    assert_eq!(p.len(), 5);
    assert!(is_stale_nan(p[4].1));
    assert_eq!(p[4].0, 4000);
    let up = pts(&s, "up", 0, 60_000);
    assert_eq!(&up[..4], &[(0, 1.0), (1000, 1.0), (2000, 1.0), (3000, 1.0)]);
    assert!(up[4..].iter().all(|p| p.1 == 0.0));
    assert_eq!(up.last().map(|p| p.0), Some(9000));
}

#[test]
fn retire_ends_series_and_remote_write_is_explicit() {
    let mut s = LiveStore::new(LiveStoreConfig::default());
    let l = Labels::metric("job_cpu", [("job_id", "7")]);
    s.append(Some("n1"), &l, 0, 1.0).unwrap();
    for t in 0..=5 {
        s.heartbeat("n1", t * 1000, 1000);
    }
    s.retire(&l, 3000);
    let p = pts(&s, "job_cpu", 0, 10_000);
    assert_eq!(p.len(), 4);
    assert!(is_stale_nan(p[3].1));
    let rw = Labels::metric("rw", [("a", "b")]);
    s.append(None, &rw, 0, 1.0).unwrap();
    s.append(None, &rw, 5000, 1.0).unwrap();
    assert_eq!(pts(&s, "rw", 0, 10_000).len(), 2);
    assert!(matches!(
        s.append(None, &rw, 1000, 1.0),
        Err(StoreError::OutOfOrder { .. })
    ));
    assert_eq!(s.stats().out_of_order, 1);
}

#[test]
fn series_limit_is_typed_and_counted() {
    let mut s = LiveStore::new(LiveStoreConfig {
        max_series: 2,
        ..Default::default()
    });
    for i in 0..2 {
        s.append(None, &Labels::metric("x", [("i", i.to_string())]), 0, 1.0)
            .unwrap();
    }
    let e = s.append(None, &Labels::metric("x", [("i", "9")]), 0, 1.0);
    assert!(matches!(e, Err(StoreError::TooManySeries { limit: 2, .. })));
    assert_eq!(s.stats().rejected_series, 1);
}

#[test]
fn retention_drops_old_series() {
    let mut s = LiveStore::new(LiveStoreConfig {
        retention_ms: 10_000,
        ..Default::default()
    });
    s.append(None, &Labels::metric("old", [("a", "1")]), 0, 1.0)
        .unwrap();
    s.append(None, &Labels::metric("new", [("a", "1")]), 15_000, 1.0)
        .unwrap();
    s.maintain(20_000);
    assert_eq!(s.stats().series, 1);
    assert!(pts(&s, "old", 0, 30_000).is_empty());
}

#[test]
fn long_steady_series_is_cheap() {
    let mut s = LiveStore::new(LiveStoreConfig::default());
    let l = Labels::metric("steady", [("node", "n1")]);
    for t in 0..3600 {
        s.append(Some("n1"), &l, t * 1000, 42.0).unwrap();
        s.heartbeat("n1", t * 1000, 1000);
    }
    let st = s.stats();
    assert_eq!(st.change_points, 1);
    assert!(st.chunk_bytes < 16);
    assert_eq!(pts(&s, "steady", 0, 3_600_000).len(), 3600);
}

#[test]
fn jittered_ticks_imply_no_extra_points() {
    // Real ticks drift a few ms off the first change point's grid; the
    // grid point just before a late tick (or just after an early last
    // heartbeat) is that same tick, not another one.
    let mut s = LiveStore::new(LiveStoreConfig::default());
    let l = Labels::metric("ticks", [("node", "n1")]);
    let jitter = [0, 3, -2, 4, 1, -3, 2, 0];
    let mut value = 0.0;
    for (t, j) in jitter.iter().enumerate() {
        let ts = t as i64 * 1000 + j;
        // Every other tick the value changes; in between it is implied.
        if t % 2 == 0 {
            value += 1.0;
        }
        s.append(Some("n1"), &l, ts, value).unwrap();
        s.heartbeat("n1", ts, 1000);
    }
    let p = pts(&s, "ticks", 0, 20_000);
    assert_eq!(p.len(), jitter.len(), "one point per tick: {p:?}");
    for w in p.windows(2) {
        let gap = w[1].0 - w[0].0;
        assert!((990..=1010).contains(&gap), "points 1 s apart: {p:?}");
    }
}

#[test]
fn memory_breakdown_counts_what_the_series_hold() {
    let mut s = LiveStore::new(LiveStoreConfig::default());
    for i in 0..10 {
        let l = Labels::metric("io", [("node", format!("n{i}")), ("job", "a".into())]);
        for t in 0..300 {
            s.append(None, &l, t * 1000, (t * i) as f64).unwrap();
        }
    }
    let m = s.memory_breakdown();
    let st = s.stats();
    assert_eq!(m.chunk_bytes, st.chunk_bytes);
    // Three labels (name, node, job) as two one-byte varint ids each and
    // a length, per series, in one buffer (at most twice that: its growth
    // room).
    let ids = 10 * (1 + 3 * 2);
    assert!((ids..=2 * ids).contains(&m.labels), "{}", m.labels);
    // 300 samples make 300 / CHUNK_SAMPLES sealed chunks per series, each
    // with an index entry of 15 bytes in its series' sealed buffer, and the
    // open one in the entry.
    let sealed = 300 / crate::store::chunk::CHUNK_SAMPLES;
    assert!(sealed >= 1);
    assert_eq!(m.chunk_headers, 10 * 15 * sealed);
    assert_eq!(m.chunk_lists, 10 * (2 * std::mem::size_of::<usize>() + 4));
    assert!(m.index > 0 && m.strings > 0 && m.entries >= 10 * std::mem::size_of::<Entry>());
    assert_eq!(
        m.total(),
        m.entries
            + m.labels
            + m.chunk_lists
            + m.chunk_headers
            + m.chunk_bytes
            + m.chunk_slack
            + m.index
            + m.strings
    );
    // Retention drops the series: the per-series parts go to zero.
    s.maintain(10 * 3600 * 1000);
    let m = s.memory_breakdown();
    assert_eq!((m.labels, m.chunk_bytes, m.chunk_headers), (0, 0, 0));
}

#[test]
fn series_found_again_after_removal_and_reuse_of_ids() {
    let mut s = LiveStore::new(LiveStoreConfig {
        retention_ms: 10_000,
        ..LiveStoreConfig::default()
    });
    let a = Labels::metric("x", [("k", "a")]);
    let b = Labels::metric("x", [("k", "b")]);
    s.append(None, &a, 0, 1.0).unwrap();
    s.maintain(100_000);
    assert_eq!(s.stats().series, 0);
    // `b` reuses `a`'s freed id; both are found by their own labels.
    s.append(None, &b, 100_000, 2.0).unwrap();
    s.append(None, &a, 100_000, 3.0).unwrap();
    s.append(None, &b, 101_000, 4.0).unwrap();
    assert_eq!(s.stats().series, 2);
    let r = s.select(&m("x"), 0, 200_000, 10).unwrap();
    let got: Vec<(String, Vec<f64>)> = r
        .iter()
        .map(|x| {
            (
                x.labels.get("k").unwrap_or("").to_string(),
                x.samples.iter().map(|p| p.value).collect(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![("a".into(), vec![3.0]), ("b".into(), vec![2.0, 4.0])]
    );
}

/// The per-series retention walk runs once per `RETENTION_STEP_MS` step of
/// the cutoff, not on every maintenance call (it was O(series) a second for
/// series that did not change); queries never see past the cutoff meanwhile.
#[test]
fn retention_walk_runs_once_per_step() {
    let mut s = LiveStore::new(LiveStoreConfig {
        retention_ms: 10_000,
        ..Default::default()
    });
    s.append(None, &Labels::metric("old", [("a", "1")]), 0, 1.0)
        .unwrap();
    s.maintain(1_000); // first call: walks (cutoff -9 s: nothing to drop)
    assert_eq!(s.stats().series, 1);
    // Cutoff 5 s: step 0 (-9 s was step -1), so this call walks and drops
    // `old`.
    s.append(None, &Labels::metric("mid", [("a", "1")]), 14_000, 1.0)
        .unwrap();
    s.maintain(15_000);
    assert_eq!(s.stats().series, 1, "old dropped at the step change");
    // Cutoff 30 s: still step 0, no walk: `mid` is held but not answered.
    s.maintain(40_000);
    assert_eq!(s.stats().series, 1, "no walk inside a step");
    assert!(pts(&s, "mid", 0, 60_000).is_empty());
    // Nor listed: series and label APIs go through the same clamp.
    let listed = s.series(&m("mid"), i64::MIN / 2, i64::MAX / 2, 10).unwrap();
    assert!(
        listed.is_empty(),
        "held past retention but listed: {listed:?}"
    );
    // Cutoff 60 s: step 1, the walk drops it.
    s.maintain(70_000);
    assert_eq!(s.stats().series, 0);
}

#[test]
fn a_series_hint_skips_the_lookup_only_while_it_names_its_series() {
    let mut s = LiveStore::new(LiveStoreConfig {
        retention_ms: 10_000,
        ..LiveStoreConfig::default()
    });
    let a = Labels::metric("hint_a", [("node", "n1")]);
    let b = Labels::metric("hint_b", [("node", "n2")]);
    let smp = |ts: i64, v: f64| {
        [Sample {
            ts_ms: ts,
            value: v,
        }]
    };
    let ok = |_: usize, r: Result<(), StoreError>| r.unwrap();
    let mut ha = SeriesHint::default();
    s.append_samples_hinted(&a, &smp(1000, 1.0), &mut ha, &mut ok.clone());
    assert_ne!(ha, SeriesHint::default(), "the first append fills the hint");
    let filled = ha;
    s.append_samples_hinted(&a, &smp(2000, 2.0), &mut ha, &mut ok.clone());
    assert_eq!(ha, filled, "a valid hint is used as it is");
    assert_eq!(pts(&s, "hint_a", 0, 5000), vec![(1000, 1.0), (2000, 2.0)]);
    // Retention frees a's slot and b takes it: a's old hint must not be
    // taken for b's series.
    s.maintain(100_000);
    assert_eq!(s.stats().series, 0);
    let mut hb = SeriesHint::default();
    s.append_samples_hinted(&b, &smp(100_000, 5.0), &mut hb, &mut ok.clone());
    assert_eq!(hb.id, filled.id, "b reuses a's slot");
    let mut stale = filled;
    s.append_samples_hinted(&a, &smp(100_500, 3.0), &mut stale, &mut ok.clone());
    assert_ne!(stale, filled, "the stale hint was replaced");
    assert_eq!(pts(&s, "hint_b", 90_000, 200_000), vec![(100_000, 5.0)]);
    assert_eq!(pts(&s, "hint_a", 90_000, 200_000), vec![(100_500, 3.0)]);
    // A hint from another store is not used either.
    let mut other = LiveStore::new(LiveStoreConfig::default());
    let mut foreign = hb;
    other.append_samples_hinted(&a, &smp(7, 7.0), &mut foreign, &mut ok.clone());
    assert_ne!(foreign.store, hb.store);
    assert_eq!(pts(&other, "hint_a", 0, 10), vec![(7, 7.0)]);
    assert!(pts(&other, "hint_b", 0, 10).is_empty());
}

#[test]
fn a_wrapped_slot_generation_voids_every_hint() {
    let mut s = LiveStore::new(LiveStoreConfig::default());
    let a = Labels::metric("wrap_a", [("node", "n1")]);
    let mut h = SeriesHint::default();
    s.append_samples_hinted(
        &a,
        &[Sample {
            ts_ms: 1,
            value: 1.0,
        }],
        &mut h,
        &mut |_, r| r.unwrap(),
    );
    let before = h.store;
    s.generations = vec![u32::MAX];
    s.next_generation(0);
    assert_eq!(s.generation(0), 0);
    assert_eq!(s.hinted(&SeriesHint { generation: 0, ..h }), None);
    assert_ne!(s.hint_for(0).store, before);
}

#[test]
fn select_keep_is_select_with_label_sets_cut_down() {
    let mut s = LiveStore::new(LiveStoreConfig::default());
    // Remote-write series with differing label names, and a fabric
    // source (so an `up` series) whose series sorts among them.
    for i in 0..40i64 {
        let mut l = Labels::metric(
            if i % 3 == 0 { "b_total" } else { "a_total" },
            [("job", format!("j{}", i % 4)), ("node", format!("n{i:02}"))],
        );
        if i % 5 == 0 {
            l.set("zone", &format!("z{}", i % 2));
        }
        if i % 7 == 0 {
            l.remove("job");
        }
        for k in 0..30 {
            s.append(None, &l, k * 1000, (k * i) as f64).unwrap();
        }
    }
    let f = Labels::metric("a_total", [("job", "j1"), ("node", "n20x")]);
    for k in 0..30 {
        s.append(Some("n20x"), &f, k * 1000, 1.0).unwrap();
        s.heartbeat("n20x", k * 1000, 1000);
    }
    let by_job = |n: &str| n == "job";
    let without_node = |n: &str| n != METRIC_NAME && n != "node";
    let none = |_: &str| false;
    let all = |_: &str| true;
    let keeps: [&dyn Fn(&str) -> bool; 4] = [&by_job, &without_node, &none, &all];
    let re = |v: &str| v.ends_with("_total") || v == "up";
    let selections = [
        m("a_total"),
        vec![Matcher {
            name: METRIC_NAME.into(),
            op: crate::store::MatchOp::Regex(Arc::new(re)),
        }],
        vec![Matcher::equal("job", "j2")],
    ];
    let mut shared = 0;
    for matchers in &selections {
        let full = s.select(matchers, 5_000, 20_000, 1000).unwrap();
        assert!(full.len() > 5);
        for keep in keeps {
            let cut = s.select_keep(matchers, 5_000, 20_000, 1000, keep).unwrap();
            assert_eq!(cut.len(), full.len());
            for (c, f) in cut.iter().zip(&full) {
                let want = Labels::from_pairs(f.labels.iter().filter(|(n, _)| keep(n)));
                assert_eq!(c.labels, want);
                assert_eq!(c.samples, f.samples);
            }
            // Streamed: the same series in the same order, and a stop.
            let mut streamed = Vec::new();
            let handles = std::cell::RefCell::new(Vec::new());
            let mut wholes = Vec::new();
            s.select_each(
                matchers,
                5_000,
                20_000,
                1000,
                keep,
                &mut |x, h| {
                    streamed.push(x.clone());
                    handles.borrow_mut().push(h);
                    true
                },
                &mut |whole| wholes = handles.borrow().iter().map(|&h| whole(h)).collect(),
            )
            .unwrap();
            assert_eq!(streamed, cut);
            // Each series' whole label set on demand.
            let want: Vec<Labels> = full.iter().map(|x| x.labels.clone()).collect();
            assert_eq!(wholes, want);
            // Stopped early, the whole label sets of the series seen are
            // still there, in any order.
            let seen = std::cell::RefCell::new(Vec::new());
            let mut late = Vec::new();
            s.select_each(
                matchers,
                5_000,
                20_000,
                1000,
                keep,
                &mut |_, h| {
                    seen.borrow_mut().push(h);
                    seen.borrow().len() < 3
                },
                &mut |whole| late = seen.borrow().iter().rev().map(|&h| whole(h)).collect(),
            )
            .unwrap();
            assert_eq!(seen.borrow().len(), 3.min(full.len()));
            let want: Vec<Labels> = want.iter().take(3).rev().cloned().collect();
            assert_eq!(late, want);
            shared += cut
                .windows(2)
                .filter(|w| w[0].labels.shares_buffer(&w[1].labels))
                .count();
        }
    }
    // Equal cut-down label sets share one buffer.
    assert!(shared > 10, "{shared}");
    // The selection past the limit is refused as `select` refuses it.
    assert!(matches!(
        s.select_keep(&m("a_total"), 0, 30_000, 3, &by_job),
        Err(StoreError::SelectLimit { limit: 3 })
    ));
    assert!(matches!(
        s.select_each(
            &m("a_total"),
            0,
            30_000,
            3,
            &by_job,
            &mut |_, _| true,
            &mut |_| {}
        ),
        Err(StoreError::SelectLimit { limit: 3 })
    ));
    // Series without samples in the window are skipped, not counted.
    let late = Labels::metric("a_total", [("job", "late"), ("node", "n99")]);
    s.append(None, &late, 40_000, 1.0).unwrap();
    let want = s.select(&m("a_total"), 5_000, 20_000, 1000).unwrap().len();
    let mut n = 0;
    s.select_each(
        &m("a_total"),
        5_000,
        20_000,
        want,
        &none,
        &mut |_, _| {
            n += 1;
            true
        },
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(n, want);
}

/// Selections are cached in label order; a series added or removed makes
/// the next query find them again, and a regex is never cached.
#[test]
fn cached_selections_follow_added_and_removed_series() {
    let mut s = LiveStore::new(LiveStoreConfig {
        retention_ms: 10_000,
        ..LiveStoreConfig::default()
    });
    let keys = |s: &LiveStore, ms: &[Matcher]| -> Vec<String> {
        let mut out = Vec::new();
        s.select_each(
            ms,
            0,
            i64::MAX,
            100,
            &|_| true,
            &mut |x, _| {
                out.push(x.labels.get("k").unwrap_or("").to_string());
                true
            },
            &mut |_| {},
        )
        .unwrap();
        let whole: Vec<String> = s
            .select(ms, 0, i64::MAX, 100)
            .unwrap()
            .iter()
            .map(|x| x.labels.get("k").unwrap_or("").to_string())
            .collect();
        assert_eq!(out, whole);
        out
    };
    let ne = vec![
        Matcher::equal(METRIC_NAME, "x"),
        Matcher {
            name: "k".into(),
            op: crate::store::MatchOp::NotEqual("b".into()),
        },
    ];
    // Added out of label order.
    s.append(None, &Labels::metric("x", [("k", "c")]), 0, 1.0)
        .unwrap();
    s.append(None, &Labels::metric("x", [("k", "a")]), 0, 1.0)
        .unwrap();
    assert_eq!(keys(&s, &m("x")), ["a", "c"]);
    assert_eq!(keys(&s, &ne), ["a", "c"]);
    // Cached now; a new series must still show, in its place.
    s.append(None, &Labels::metric("x", [("k", "b")]), 0, 1.0)
        .unwrap();
    assert_eq!(keys(&s, &m("x")), ["a", "b", "c"]);
    assert_eq!(keys(&s, &ne), ["a", "c"]);
    // Retention removes all three; new ones reuse their ids.
    s.append(None, &Labels::metric("x", [("k", "a")]), 50_000, 2.0)
        .unwrap();
    s.maintain(50_000);
    assert_eq!(keys(&s, &m("x")), ["a"]);
    s.append(None, &Labels::metric("x", [("k", "d")]), 50_000, 2.0)
        .unwrap();
    s.append(None, &Labels::metric("y", [("k", "e")]), 50_000, 2.0)
        .unwrap();
    assert_eq!(keys(&s, &m("x")), ["a", "d"]);
    assert_eq!(keys(&s, &m("y")), ["e"]);
    let re: crate::store::Predicate = std::sync::Arc::new(|v: &str| v != "a");
    let ms = vec![
        Matcher::equal(METRIC_NAME, "x"),
        Matcher {
            name: "k".into(),
            op: crate::store::MatchOp::Regex(re),
        },
    ];
    assert_eq!(keys(&s, &ms), ["d"]);
    assert!(selection_cached(&s, &m("x")));
    assert!(!selection_cached(&s, &ms));
}

/// True when the store's cache holds the selection of `ms`.
fn selection_cached(s: &LiveStore, ms: &[Matcher]) -> bool {
    query::cached(s, ms)
}

/// Windows that start and end in any sealed chunk or the open one read
/// every sample in them; retention drops whole sealed chunks only, from
/// the oldest, while the next one still starts at or before the cutoff.
#[test]
fn windows_span_sealed_runs_and_retention_drops_whole_ones() {
    let mut s = LiveStore::new(LiveStoreConfig {
        retention_ms: 300_000,
        ..LiveStoreConfig::default()
    });
    let l = Labels::metric("ret", [("node", "n1")]);
    let v = |t: i64| (t * 7 % 13) as f64 * 0.5 + t as f64;
    for t in 0..1000i64 {
        s.append(None, &l, t * 1000, v(t)).unwrap();
    }
    let shape = |s: &LiveStore| {
        let e = s.entries.iter().flatten().next().unwrap();
        (e.sealed.len(), e.head.len())
    };
    // Sealed chunks of n samples, an open one of the rest.
    let n = crate::store::chunk::CHUNK_SAMPLES;
    assert_eq!(shape(&s), (1000 / n, 1000 % n));
    let n = n as i64;
    let want = |lo: i64, hi: i64| (lo..=hi).map(|t| (t * 1000, v(t))).collect::<Vec<_>>();
    for (lo, hi) in [
        (0, 999),
        (100, 300),
        (n - 1, n),
        (n + 10, 700),
        (719, 960),
        (959, 999),
        (980, 999),
    ] {
        assert_eq!(
            pts(&s, "ret", lo * 1000, hi * 1000),
            want(lo, hi),
            "{lo}..{hi}"
        );
    }
    // Cutoff 699 s: the chunks that end before it go; the one that
    // holds it (starting at 699 / n x n s) stays.
    s.maintain(999_000);
    let kept = (1000 / n - 699 / n) as usize;
    assert!(kept >= 2);
    assert_eq!(shape(&s), (kept, (1000 % n) as usize));
    assert_eq!(pts(&s, "ret", 0, 999_000), want(699, 999));
    let st = s.stats();
    assert_eq!(st.change_points, kept * n as usize + (1000 % n) as usize);
}

#[test]
fn a_series_entry_stays_small() {
    // Memory per series: the entry is most of a series' fixed cost (the
    // open chunk's state included); 128 bytes before label ids moved to
    // the store's arena, the source index to 4 bytes and the open chunk's
    // bytes to a boxed slice; 96 before the sealed buffer's thin pointer,
    // 88 then, 96 again with the cold tier's link (which moves the sealed
    // chunks' bytes, ~1.3 B a sample, out of memory).
    assert!(std::mem::size_of::<Option<Entry>>() <= 96);
}

#[test]
fn label_ids_compacted_after_retention_keep_every_series() {
    let mut s = LiveStore::new(LiveStoreConfig {
        retention_ms: 10_000,
        ..LiveStoreConfig::default()
    });
    let l = |i: usize| Labels::metric("m", [("node", format!("n{i}")), ("k", "v".into())]);
    for i in 0..1500 {
        s.append(None, &l(i), 1000, i as f64).unwrap();
    }
    // Two series in three go quiet; the rest write on past the retention.
    for i in (0..1500).filter(|i| i % 3 == 0) {
        s.append(None, &l(i), 50_000, i as f64 + 0.5).unwrap();
    }
    let before = s.label_ids.heap_bytes();
    s.maintain(55_000);
    assert_eq!(s.stats().series, 500);
    assert!(s.label_ids.heap_bytes() < before, "compacted");
    for i in 0..1500 {
        let got = s
            .select(&[Matcher::equal("node", &format!("n{i}"))], 0, 60_000, 10)
            .unwrap();
        if i % 3 == 0 {
            assert_eq!(got.len(), 1);
            assert_eq!(got[0].labels, l(i));
            assert_eq!(got[0].samples.last().map(|p| p.value), Some(i as f64 + 0.5));
        } else {
            assert!(got.is_empty(), "n{i} retired");
        }
    }
    // Found again by labels: no second series.
    s.append(None, &l(3), 56_000, 9.0).unwrap();
    assert_eq!(s.stats().series, 500);
}

#[test]
fn job_churn_past_retention_leaves_no_strings_behind() {
    // Jobs come and go: each brings its own job_id, user and series. Once
    // its series pass retention, nothing of it stays in the store, so a
    // gateway's label table follows the jobs alive, not every job ever run.
    let mut s = LiveStore::new(LiveStoreConfig {
        retention_ms: 10_000,
        ..LiveStoreConfig::default()
    });
    let job = |j: usize, m: &str| {
        Labels::metric(
            m,
            [
                ("job_id", format!("{}", 100_000 + j)),
                ("user", format!("user{j}")),
                ("node", "n1".into()),
            ],
        )
    };
    let mut held = Vec::new();
    for round in 0..20usize {
        let t = round as i64 * 60_000;
        for j in round * 50..round * 50 + 50 {
            for m in ["canopy_job_cpu_seconds_total", "canopy_job_memory_bytes"] {
                s.append(None, &job(j, m), t, j as f64).unwrap();
            }
        }
        // Cutoff 5 s before this round: the last round's jobs go.
        s.maintain(t + 5_000);
        held.push(s.strings.len());
    }
    // Every round's 50 jobs are gone by the next round's maintenance: the
    // table holds the last round's strings alone, the same every round.
    assert_eq!(s.stats().series, 100);
    assert!(held.windows(2).all(|w| w[0] == w[1]), "{held:?}");
    // __name__ and two names, job_id, user, node, n1, 50 ids, 50 users.
    assert_eq!(s.strings.len(), 7 + 100);
    assert_eq!(s.strings.id_of("100000"), None);
    // The last round's series read back with their labels, found by them.
    let last = 19 * 50 + 7;
    let got = s
        .select(
            &[Matcher::equal("job_id", &format!("{}", 100_000 + last))],
            0,
            i64::MAX / 4,
            10,
        )
        .unwrap();
    let mut names: Vec<_> = got.iter().map(|r| r.labels.clone()).collect();
    names.sort();
    assert_eq!(
        names,
        vec![
            job(last, "canopy_job_cpu_seconds_total"),
            job(last, "canopy_job_memory_bytes")
        ]
    );
    // A job id seen before comes back as a new series with its strings.
    s.append(None, &job(3, "canopy_job_memory_bytes"), 20 * 60_000, 1.0)
        .unwrap();
    let got = s
        .select(&[Matcher::equal("user", "user3")], 0, i64::MAX / 4, 10)
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].labels, job(3, "canopy_job_memory_bytes"));
}

#[test]
fn a_series_past_its_chunk_span_seals_and_reads_back() {
    // A sample every 20 days: an open chunk spans at most u32::MAX ms
    // (~49.7 days), so every third sample starts a new chunk; every
    // sample reads back, also after a snapshot.
    let cfg = LiveStoreConfig {
        retention_ms: i64::MAX / 4,
        ..LiveStoreConfig::default()
    };
    let mut s = LiveStore::new(cfg.clone());
    let l = Labels::metric("slow", [("node", "n1")]);
    let day = 86_400_000i64;
    let want: Vec<(i64, f64)> = (0..10i64).map(|i| (i * 20 * day, i as f64 + 0.5)).collect();
    for &(t, v) in &want {
        s.append(None, &l, t, v).unwrap();
    }
    let id = s.entry_id(&l, false).unwrap().unwrap();
    let e = s.entries[id].as_ref().unwrap();
    assert_eq!(e.chunk_count(), 4);
    assert_eq!(pts(&s, "slow", 0, 200 * day), want);
    let mut snap = Vec::new();
    s.write_snapshot(&mut snap).unwrap();
    let back = LiveStore::read_snapshot(cfg, &mut snap.as_slice()).unwrap();
    assert_eq!(pts(&back, "slow", 0, 200 * day), want);
}

/// A window that starts after a sealed chunk's last sample and before the
/// open chunk's first skips the sealed chunk for a series with no source
/// (its index keeps the last timestamp), and reads it for a fabric series
/// (whose last change point there implies the window's samples); every
/// window across the boundary answers as the full series filtered.
#[test]
fn windows_skip_a_sealed_chunk_that_ends_before_them() {
    let mut s = LiveStore::new(LiveStoreConfig::default());
    let x = Labels::metric("x", [("node", "n1")]);
    let f = Labels::metric("f", [("node", "n1")]);
    let mut want = Vec::new();
    let n = crate::store::chunk::CHUNK_SAMPLES as i64;
    // 1 s ticks with a gap of 700 ms before the open chunk's first.
    for k in 0..n + 60 {
        let ts = k * 1000 + if k >= n { 700 } else { 0 };
        s.append(None, &x, ts, (k * k) as f64).unwrap();
        want.push((ts, (k * k) as f64));
    }
    // Change points at 0..n s (one sealed chunk) and n + 40 s.
    let fv = |k: i64| {
        if k < n {
            k as f64
        } else if k < n + 40 {
            (n - 1) as f64
        } else {
            1e3
        }
    };
    for k in 0..n + 60 {
        s.append(Some("n1"), &f, k * 1000, fv(k)).unwrap();
        s.heartbeat("n1", k * 1000, 1000);
    }
    let (last, head) = ((n - 1) * 1000, n * 1000 + 700);
    let entry = |l: &Labels| {
        let id = s.find(s.index.hash(l), l).unwrap();
        s.entries[id].as_ref().unwrap()
    };
    let ex = entry(&x);
    assert_eq!(ex.sealed.len(), 1);
    assert_eq!(ex.sealed.last_ts(0), Some(last));
    for (mint, n) in [(last, 2), (last + 1, 1), (head - 1, 1), (head, 1)] {
        assert_eq!(ex.chunks_in(mint, s.cold_read()).count(), n, "mint {mint}");
        assert_eq!(
            ex.chunks_at(mint, s.cold_read()).count(),
            if mint >= head { 1 } else { 2 }
        );
    }
    // The fabric series' change point at n - 1 s, in its sealed chunk,
    // implies the samples to n + 39 s: windows there still read it.
    let ef = entry(&f);
    assert_eq!((ef.sealed.len(), ef.head.len()), (1, 1));
    assert_eq!(ef.window_chunks((n + 10) * 1000, s.cold_read()).count(), 2);
    for mint in (last - 2_000..head + 2_000).step_by(250) {
        let got = pts(&s, "x", mint, mint + 60_000);
        let exp: Vec<_> = want
            .iter()
            .copied()
            .filter(|p| (mint..=mint + 60_000).contains(&p.0))
            .collect();
        assert_eq!(got, exp, "mint {mint}");
        let implied = pts(&s, "f", mint, mint + 5_000);
        let exp: Vec<_> = (0..n + 60)
            .filter(|k| (mint..=mint + 5_000).contains(&(k * 1000)))
            .map(|k| (k * 1000, fv(k)))
            .collect();
        assert_eq!(implied, exp, "mint {mint}");
    }
}

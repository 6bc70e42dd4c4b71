//! Lazy repeats: a decoder counting a quiet source's repeats on the
//! source's record (see `decoder::Lazy`) gives the same frames, values,
//! tags and (settled) records as one applying every repeat eagerly.

use super::*;

/// One source's doing in one tick.
#[derive(Clone, Copy, Debug)]
enum Act {
    /// Its tick counter steps by 1, nothing else moves.
    Quiet,
    /// The tick counter steps by 2 (a new increment).
    Step,
    /// Gauge `i` takes a new value too.
    Busy(usize),
    /// Series `i` is not reported (retired), coming back later.
    Drop(usize),
    /// Gauge `i` reads NaN (a special value, sent in a column).
    Special(usize),
    /// The source does not tick.
    Skip,
}

fn act() -> impl Strategy<Value = Act> {
    prop_oneof![
        6 => Just(Act::Quiet),
        1 => Just(Act::Step),
        1 => (1usize..5).prop_map(Act::Busy),
        1 => (0usize..5).prop_map(Act::Drop),
        1 => (1usize..5).prop_map(Act::Special),
        1 => Just(Act::Skip),
    ]
}

/// A tick: every source's act, the order they tick in (a rotation), a
/// keyframe asked for, a new link, a tag set on one series.
type Tick = (Vec<Act>, usize, bool, bool, Option<(u32, u64)>);

fn tick() -> impl Strategy<Value = Tick> {
    (
        prop::collection::vec(act(), 3),
        0usize..3,
        prop::bool::weighted(0.05),
        prop::bool::weighted(0.03),
        prop::option::weighted(0.2, (0u32..16, 1u64..1000)),
    )
}

/// What two frames must agree on: everything (NaN values compare by bits:
/// `PartialEq` says a NaN differs from itself).
fn frame_key(f: &RxFrame) -> (String, Vec<u64>) {
    let bits = f
        .sections
        .iter()
        .flat_map(|s| {
            let ups = s.updates.iter().map(|u| u.1.to_bits());
            ups.chain(s.retired.iter().map(|r| r.1.value().to_bits()))
        })
        .chain(f.retired.iter().map(|r| r.1.value().to_bits()))
        .collect();
    (format!("{f:?}"), bits)
}

/// A series record, NaN values by bits (see [`frame_key`]).
fn series_key(s: Option<RxSeries>) -> Option<(String, u64)> {
    s.map(|s| (format!("{s:?}"), s.value().to_bits()))
}

/// Both decoders hold the same state: every series' settled record,
/// value and key (for the section of its own source), every source's
/// record but for the lazy part.
fn same_state(lazy: &LinkDecoder, eager: &LinkDecoder) -> Result<(), TestCaseError> {
    let ids: Vec<u32> = eager.series_iter().map(|(id, _)| id).collect();
    let lazy_ids: Vec<u32> = lazy.series_iter().map(|(id, _)| id).collect();
    prop_assert_eq!(&ids, &lazy_ids);
    for &id in &ids {
        let want = eager.series(id).cloned();
        prop_assert_eq!(
            series_key(lazy.settled_series(id)),
            series_key(want.clone()),
            "series {}",
            id
        );
        let (a, b) = (lazy.value(id), eager.value(id));
        prop_assert_eq!(a.map(f64::to_bits), b.map(f64::to_bits), "value of {}", id);
        if let Some(w) = want {
            prop_assert_eq!(
                lazy.update_key(w.source, id),
                eager.update_key(w.source, id)
            );
        }
    }
    let srcs: Vec<u32> = eager.sources_iter().map(|(id, _)| id).collect();
    for id in srcs {
        prop_assert_eq!(lazy.source_without_lazy(id), eager.source(id).cloned());
    }
    Ok(())
}

/// Runs `ticks` through a sender of three sources and one link into a lazy
/// and an eager decoder; checks they agree after every frame. Returns
/// the most repeats the lazy one held counted at once.
fn run(ticks: &[Tick]) -> Result<u64, TestCaseError> {
    let cfg = CodecConfig::default();
    let mut tx = Sender::new(BoundsPolicy::default());
    let mut enc = LinkEncoder::new(&cfg).expect("encoder");
    let mut lazy = LinkDecoder::new(&cfg).expect("decoder");
    let mut eager = LinkDecoder::new(&cfg).expect("decoder").eager();
    let srcs = [
        tx.source("a", 1000),
        tx.source("b", 1000),
        tx.source("c", 1000),
    ];
    let mut counters = [0f64; 3];
    let mut gauges = [[0f64; 5]; 3];
    let mut most = 0;
    for (t, (acts, rot, key, relink, tag)) in ticks.iter().enumerate() {
        if *relink {
            enc = LinkEncoder::new(&cfg).expect("encoder");
            lazy = LinkDecoder::new(&cfg).expect("decoder");
            eager = LinkDecoder::new(&cfg).expect("decoder").eager();
        }
        if *key {
            enc.request_keyframe();
        }
        let ts = t as i64 * 1000;
        tx.begin_tick(ts);
        for k in 0..3 {
            let k = (k + rot) % 3;
            let a = acts[k];
            if matches!(a, Act::Skip) {
                continue;
            }
            tx.tick_source(srcs[k], ts + k as i64);
            counters[k] += if matches!(a, Act::Step) { 2.0 } else { 1.0 };
            if let Act::Busy(i) = a {
                gauges[k][i] = (t * 7 + i) as f64 + 0.5;
            }
            for (i, &gauge) in gauges[k].iter().enumerate() {
                if matches!(a, Act::Drop(j) if j == i) {
                    continue;
                }
                let name = k.to_string();
                let (l, kind, v) = if i == 0 {
                    let l = Labels::metric("ticks_total", [("src", name)]);
                    (l, MetricKind::Counter, counters[k])
                } else {
                    let v = if matches!(a, Act::Special(j) if j == i) {
                        f64::NAN
                    } else {
                        gauge
                    };
                    let l = Labels::metric("g", [("src", name), ("i", i.to_string())]);
                    (l, MetricKind::Gauge, v)
                };
                tx.observe(srcs[k], &l, kind, v);
            }
        }
        let (table, cs) = tx.finish_tick();
        let payload = encode_payload(&mut enc, table, cs);
        tx.end_tick();
        let a = lazy.decode(&payload).expect("lazy decode");
        let b = eager.decode(&payload).expect("eager decode");
        prop_assert_eq!(frame_key(&a), frame_key(&b), "frame of tick {}", t);
        lazy.recycle(a);
        eager.recycle(b);
        if let Some((id, v)) = tag {
            // A merger tags the series it resolved.
            lazy.set_tag(*id, *v);
            eager.set_tag(*id, *v);
        }
        same_state(&lazy, &eager)?;
        most = most.max(lazy.pending_repeats());
    }
    Ok(most)
}

#[test]
fn a_quiet_source_counts_its_repeats_and_settles_them_exactly() {
    let quiet = || (vec![Act::Quiet; 3], 0, false, false, None);
    let mut ticks: Vec<Tick> = (0..20).map(|_| quiet()).collect();
    // A gauge moves, a series goes, a keyframe: each settles what is held.
    ticks.push((
        vec![Act::Busy(2), Act::Drop(0), Act::Quiet],
        1,
        false,
        false,
        None,
    ));
    ticks.extend((0..10).map(|_| quiet()));
    ticks.push((vec![Act::Quiet; 3], 2, true, false, Some((0, 7))));
    ticks.extend((0..10).map(|_| quiet()));
    let most = run(&ticks).expect("the same");
    // Three sources, each holding most of 20 quiet ticks' repeats.
    assert!(most >= 3 * 15, "lazy repeats held: {most}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, .. ProptestConfig::default() })]

    /// Any mix of quiet ticks, new increments, moving gauges, series
    /// retired and back, special values, silent sources, rotations,
    /// keyframes, new links and tags: both decoders agree frame by frame.
    #[test]
    fn lazy_and_eager_decoders_agree(ticks in prop::collection::vec(tick(), 1..80)) {
        run(&ticks)?;
    }
}

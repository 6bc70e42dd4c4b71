//! Merge suite: redundant paths, relay chains, keyframes, retirement,
//! expiry, caps and hostile input, with real senders and link codecs.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap};

use canopy_proto::codec::{
    BoundsPolicy, CodecConfig, LinkDecoder, LinkEncoder, RecordSplitter, RxFrame, Sender,
};
use canopy_proto::{Labels, MetricKind};
use proptest::prelude::*;

use super::*;

/// Everything a sink was told, in order.
#[derive(Debug, Default)]
pub(super) struct RecSink {
    pub samples: Vec<(String, Labels, i64, u64)>,
    pub heartbeats: Vec<(String, i64)>,
    pub retires: Vec<(String, Labels, i64)>,
    /// The series each key named (a key must never name two).
    pub keys: HashMap<SeriesKey, (String, Labels)>,
}

impl Sink for RecSink {
    fn sample(&mut self, source: &str, labels: &Labels, ts_ms: i64, value: f64) {
        self.samples
            .push((source.to_string(), labels.clone(), ts_ms, value.to_bits()));
    }
    fn sample_keyed(
        &mut self,
        key: SeriesKey,
        source: &str,
        labels: &Labels,
        ts_ms: i64,
        value: f64,
    ) {
        let named = self
            .keys
            .entry(key)
            .or_insert_with(|| (source.to_string(), labels.clone()));
        assert_eq!(
            (named.0.as_str(), &named.1),
            (source, labels),
            "{key:?} named two series"
        );
        self.sample(source, labels, ts_ms, value);
    }
    fn heartbeat(&mut self, source: &str, ts_ms: i64, _tick_ms: u32) {
        self.heartbeats.push((source.to_string(), ts_ms));
    }
    fn retire(&mut self, source: &str, labels: &Labels, ts_ms: i64) {
        self.retires
            .push((source.to_string(), labels.clone(), ts_ms));
    }
}

/// Panics with the first difference of two sample lists.
#[track_caller]
fn same(got: &[(String, Labels, i64, u64)], want: &[(String, Labels, i64, u64)]) {
    let i = got.iter().zip(want).position(|(a, b)| a != b);
    assert!(
        i.is_none() && got.len() == want.len(),
        "got {} samples, want {}; first difference at {:?}: got {:?} want {:?}",
        got.len(),
        want.len(),
        i,
        i.map(|i| &got[i]),
        i.map(|i| &want[i]),
    );
}

impl RecSink {
    fn sorted_samples(&self) -> Vec<(String, Labels, i64, u64)> {
        let mut v = self.samples.clone();
        v.sort_by(|a, b| (&a.0, &a.1, a.2).cmp(&(&b.0, &b.1, b.2)));
        v
    }
}

fn cfg() -> CodecConfig {
    CodecConfig {
        keyframe_interval_ms: 1 << 40,
        ..CodecConfig::default()
    }
}

fn mcfg() -> MergeConfig {
    MergeConfig {
        codec: cfg(),
        ..MergeConfig::default()
    }
}

/// Strips the length prefix of one record.
pub(super) fn payload(rec: &[u8]) -> Vec<u8> {
    let mut s = RecordSplitter::new(1 << 24);
    s.push(rec);
    s.pop().expect("valid record").expect("one whole record")
}

fn lab(node: &str, i: usize) -> Labels {
    Labels::metric("m", [("node", node.to_string()), ("i", i.to_string())])
}

/// One leaf node (source `name`) with `links` uplinks.
pub(super) struct Leaf {
    name: String,
    tx: Sender,
    encs: Vec<LinkEncoder>,
}

impl Leaf {
    pub(super) fn new(name: &str, links: usize) -> Self {
        Self {
            name: name.to_string(),
            tx: Sender::new(BoundsPolicy::default()),
            encs: (0..links)
                .map(|_| LinkEncoder::new(&cfg()).expect("encoder"))
                .collect(),
        }
    }

    /// One tick: series `i` in `present` observed with `value(i)`; returns
    /// one record payload per link.
    pub(super) fn tick(&mut self, ts: i64, obs: &[(usize, f64)]) -> Vec<Vec<u8>> {
        let src = self.tx.source(&self.name, 1000);
        self.tx.begin_tick(ts);
        self.tx.tick_source(src, ts);
        for &(i, v) in obs {
            let kind = if i % 2 == 0 {
                MetricKind::Gauge
            } else {
                MetricKind::Counter
            };
            self.tx.observe(src, &lab(&self.name, i), kind, v);
        }
        let (table, cs) = self.tx.finish_tick();
        let mut out = Vec::new();
        for enc in &mut self.encs {
            let mut rec = Vec::new();
            enc.encode(table, cs, &mut rec).expect("encode");
            out.push(payload(&rec));
        }
        self.tx.end_tick();
        out
    }
}

/// What a plain decoder of one link sees: samples and retirements.
pub(super) fn reference(frames: &[Vec<u8>]) -> RecSink {
    let mut dec = LinkDecoder::new(&cfg()).expect("decoder");
    let mut sink = RecSink::default();
    for p in frames {
        let f: RxFrame = dec.decode(p).expect("decode");
        for sec in &f.sections {
            let name = dec.source(sec.source).expect("source").name.clone();
            for &(id, v) in &sec.updates {
                let l = dec.series(id).expect("series").labels.clone();
                sink.sample(&name, &l, sec.ts_ms, v);
            }
            for (_, rx) in &sec.retired {
                sink.retire(&name, &rx.labels, sec.ts_ms);
            }
        }
        for (_, rx) in &f.retired {
            let s = dec.source(rx.source).expect("source");
            sink.retire(&s.name.clone(), &rx.labels, s.last_ts_ms);
        }
    }
    sink
}

/// Deterministic leaf workload: `ticks` ticks of `n` series, some missing.
pub(super) fn workload(leaf: &mut Leaf, t0: i64, ticks: usize, n: usize) -> Vec<Vec<Vec<u8>>> {
    (0..ticks)
        .map(|k| {
            let obs: Vec<(usize, f64)> = (0..n)
                .filter(|i| (k + i) % 7 != 6 || k == 0)
                .map(|i| (i, (k * 10 + i) as f64 * if i % 2 == 0 { 1.37 } else { 1.0 }))
                .collect();
            leaf.tick(t0 + 1000 * k as i64, &obs)
        })
        .collect()
}

fn per_link(frames: &[Vec<Vec<u8>>], link: usize) -> Vec<Vec<u8>> {
    frames.iter().map(|f| f[link].clone()).collect()
}

#[test]
fn values_and_labels_arrive() {
    let mut m = Merger::new(mcfg());
    m.child_connected(1).expect("connect");
    let mut leaf = Leaf::new("n1", 1);
    let mut sink = RecSink::default();
    let f = leaf.tick(1000, &[(0, 42.0), (1, 7.0)]);
    let s = m.on_record(1, &f[0], &mut sink).expect("record");
    assert_eq!((s.accepted, s.duplicates, s.keyframe), (2, 0, true));
    assert_eq!(sink.heartbeats, vec![("n1".to_string(), 1000)]);
    same(
        &sink.sorted_samples(),
        &[
            ("n1".into(), lab("n1", 0), 1000, 42f64.to_bits()),
            ("n1".into(), lab("n1", 1), 1000, 7f64.to_bits()),
        ],
    );
    let (table, cs) = m.take_changeset(1000);
    assert_eq!(table.len(), 2);
    assert_eq!(cs.new_sources.len(), 1);
    assert_eq!(cs.defs.len(), 2);
    assert_eq!(cs.update_count(), 2);
    m.end_tick();
    assert_eq!(m.stats().series, 2);
    assert_eq!(m.stats().sources, 1);
}

#[test]
fn two_paths_deliver_every_sample_once() {
    let mut leaf = Leaf::new("n1", 2);
    let frames = workload(&mut leaf, 10_000, 30, 12);
    let want = reference(&per_link(&frames, 0));
    let mut m = Merger::new(mcfg());
    m.child_connected(1).expect("connect");
    m.child_connected(2).expect("connect");
    let mut sink = RecSink::default();
    for (k, f) in frames.iter().enumerate() {
        // Path 2 lags path 1 by a frame every other tick.
        m.on_record(1, &f[0], &mut sink).expect("path 1");
        m.on_record(2, &f[1], &mut sink).expect("path 2");
        m.take_changeset(10_000 + 1000 * k as i64);
        m.end_tick();
    }
    assert_eq!(sink.sorted_samples(), want.sorted_samples());
    assert_eq!(sink.retires, want.retires);
    let st = m.stats();
    assert_eq!(st.duplicates_dropped as usize, want.samples.len());
    assert_eq!(st.updates_accepted as usize, want.samples.len());
}

#[test]
fn out_of_order_and_replayed_timestamps_are_dropped_and_counted() {
    let mut leaf = Leaf::new("n1", 2);
    let frames = workload(&mut leaf, 0, 6, 4);
    let mut m = Merger::new(mcfg());
    m.child_connected(1).expect("connect");
    m.child_connected(2).expect("connect");
    let mut sink = RecSink::default();
    for f in &frames {
        m.on_record(1, &f[0], &mut sink).expect("path 1");
    }
    let accepted = sink.samples.len();
    // Path 2 delivers everything later: all older than what was accepted.
    for f in &frames {
        let s = m.on_record(2, &f[1], &mut sink).expect("path 2");
        assert_eq!(s.accepted, 0);
        assert_eq!(s.duplicates, s.updates);
    }
    assert_eq!(sink.samples.len(), accepted);
    assert_eq!(m.stats().duplicates_dropped as usize, accepted);
    // Per series, the sink saw strictly increasing timestamps.
    let mut last: HashMap<Labels, i64> = HashMap::new();
    for (_, l, ts, _) in &sink.samples {
        assert!(last.insert(l.clone(), *ts).is_none_or(|p| p < *ts));
    }
}

/// Encodes `m`'s tick on `enc` and ends the tick; returns the payload.
pub(super) fn uplink(m: &mut Merger, enc: &mut LinkEncoder, ts: i64) -> Vec<u8> {
    let (table, cs) = m.take_changeset(ts);
    let mut rec = Vec::new();
    enc.encode(table, cs, &mut rec).expect("encode uplink");
    m.end_tick();
    payload(&rec)
}

#[test]
fn relay_chain_delivers_every_sample_once_exactly() {
    let mut leaf = Leaf::new("n1", 1);
    let frames = workload(&mut leaf, 5_000, 40, 10);
    let want = reference(&per_link(&frames, 0));
    let mut a = Merger::new(mcfg());
    let mut b = Merger::new(mcfg());
    a.child_connected(7).expect("connect");
    b.child_connected(1).expect("connect");
    let mut enc = LinkEncoder::new(&cfg()).expect("encoder");
    let (mut sa, mut sb) = (RecSink::default(), RecSink::default());
    for (k, f) in frames.iter().enumerate() {
        a.on_record(7, &f[0], &mut sa).expect("leaf -> A");
        // A ticks every other leaf frame: two leaf frames per A tick. Its
        // first uplink frame is a keyframe, a snapshot of the newest values
        // (the codec's keyframe carries no intermediate samples), so A's
        // first tick holds one leaf frame.
        if k == 0 || k % 2 == 1 {
            let up = uplink(&mut a, &mut enc, 5_000 + 1000 * k as i64);
            b.on_record(1, &up, &mut sb).expect("A -> B");
            b.take_changeset(0);
            b.end_tick();
        }
    }
    same(&sa.sorted_samples(), &want.sorted_samples());
    same(&sb.sorted_samples(), &want.sorted_samples());
    assert_eq!(sb.retires, want.retires);
    assert_eq!(b.stats().duplicates_dropped, 0);
}

/// The table a fresh decoder rebuilds from one keyframe, by labels.
fn decoded_state(p: &[u8]) -> BTreeMap<String, (String, u64, i64)> {
    let mut dec = LinkDecoder::new(&cfg()).expect("decoder");
    dec.decode(p).expect("keyframe");
    dec.series_iter()
        .map(|(id, s)| {
            let src = dec.source(s.source).expect("source");
            let v = dec.value(id).expect("live");
            (
                s.labels.to_string(),
                (src.name.clone(), v.to_bits(), src.last_ts_ms),
            )
        })
        .collect()
}

fn table_state(m: &Merger) -> BTreeMap<String, (String, u64, i64)> {
    let t = m.table();
    t.iter()
        .map(|(_, e)| {
            let src = t.source(e.source).expect("source");
            (
                e.labels.to_string(),
                (src.name.clone(), e.value.to_bits(), src.last_ts_ms),
            )
        })
        .collect()
}

#[test]
fn new_uplink_keyframe_carries_full_state() {
    let mut leaves = [Leaf::new("n1", 1), Leaf::new("n2", 1)];
    let mut a = Merger::new(mcfg());
    a.child_connected(1).expect("connect");
    a.child_connected(2).expect("connect");
    let mut old = LinkEncoder::new(&cfg()).expect("encoder");
    let mut sink = NullSink;
    for k in 0..10i64 {
        for (c, leaf) in leaves.iter_mut().enumerate() {
            let obs: Vec<(usize, f64)> = (0..5).map(|i| (i, (k * i as i64) as f64)).collect();
            let f = leaf.tick(1000 * k + c as i64, &obs);
            a.on_record(c as u64 + 1, &f[0], &mut sink).expect("record");
        }
        uplink(&mut a, &mut old, 1000 * k);
    }
    // A parent asks to resync: a brand-new uplink.
    let mut fresh = LinkEncoder::new(&cfg()).expect("encoder");
    let kf = uplink(&mut a, &mut fresh, 10_000);
    assert_eq!(decoded_state(&kf), table_state(&a));
    assert_eq!(decoded_state(&kf).len(), 10);
}

#[test]
fn burst_of_child_frames_keeps_one_section_per_timestamp() {
    let mut leaf = Leaf::new("n1", 1);
    let mut m = Merger::new(mcfg());
    m.child_connected(1).expect("connect");
    let mut sink = RecSink::default();
    for k in 0..3i64 {
        let f = leaf.tick(1000 * (k + 1), &[(0, k as f64), (2, 5.0)]);
        m.on_record(1, &f[0], &mut sink).expect("record");
    }
    let (_, cs) = m.take_changeset(3000);
    let ts: Vec<i64> = cs.sections.iter().map(|s| s.ts_ms).collect();
    // Leading heartbeat at the newest ts (keyframe stamp), then ts order.
    assert_eq!(ts, vec![3000, 1000, 2000, 3000]);
    for s in &cs.sections {
        let mut ids: Vec<u32> = s.updates.iter().map(|u| u.0).collect();
        ids.dedup();
        assert_eq!(ids.len(), s.updates.len());
    }
    // A keyframe of this tick (a new uplink) stamps the newest values at
    // the newest ts, and still carries the older ticks' samples before it
    // (they would be lost on the new link otherwise).
    let mut fresh = LinkEncoder::new(&cfg()).expect("encoder");
    let (table, cs) = m.take_changeset(3000);
    let mut rec = Vec::new();
    fresh.encode(table, cs, &mut rec).expect("encode");
    let mut dec = LinkDecoder::new(&cfg()).expect("decoder");
    let f = dec.decode(&payload(&rec)).expect("decode");
    let ts: Vec<i64> = f.sections.iter().map(|s| s.ts_ms).collect();
    assert_eq!(ts, vec![1000, 2000, 3000]);
    let series0: Vec<(i64, f64)> = f
        .sections
        .iter()
        .flat_map(|s| s.updates.iter().map(move |u| (s.ts_ms, u)))
        .filter(|(_, u)| {
            dec.series(u.0)
                .is_some_and(|x| x.labels.get("i") == Some("0"))
        })
        .map(|(ts, u)| (ts, u.1))
        .collect();
    assert_eq!(series0, vec![(1000, 0.0), (2000, 1.0), (3000, 2.0)]);
    m.end_tick();
}

#[test]
fn garbage_from_one_child_leaves_the_other_working() {
    let mut leaf = Leaf::new("n1", 2);
    let frames = workload(&mut leaf, 0, 4, 3);
    let mut m = Merger::new(mcfg());
    m.child_connected(1).expect("connect");
    m.child_connected(2).expect("connect");
    let mut sink = RecSink::default();
    m.on_record(1, &frames[0][0], &mut sink).expect("good");
    let err = m
        .on_record(2, b"\x05garbage!", &mut sink)
        .expect_err("garbage");
    assert!(matches!(err, AggregatorError::Codec { child: 2, .. }));
    let again = m
        .on_record(2, &frames[0][1], &mut sink)
        .expect_err("poisoned");
    assert!(matches!(
        again,
        AggregatorError::Codec {
            source: canopy_proto::codec::CodecError::Poisoned,
            ..
        }
    ));
    for f in &frames[1..] {
        m.on_record(1, &f[0], &mut sink)
            .expect("child 1 unaffected");
    }
    same(
        &sink.sorted_samples(),
        &reference(&per_link(&frames, 0)).sorted_samples(),
    );
    assert_eq!(m.stats().rejected_frames.get("poisoned"), Some(&1));
    assert_eq!(m.stats().rejected_frames.values().sum::<u64>(), 2);
    assert!(matches!(
        m.on_record(9, &frames[0][0], &mut sink),
        Err(AggregatorError::UnknownChild { child: 9 })
    ));
    // Reconnecting gives a fresh decoder that accepts a new link.
    m.child_connected(2).expect("reconnect");
    let mut l2 = Leaf::new("n2", 1);
    m.on_record(2, &l2.tick(0, &[(0, 1.0)])[0], &mut sink)
        .expect("fresh link");
}

#[test]
fn retirement_propagates_once_and_reappearance_redefines() {
    let mut leaf = Leaf::new("n1", 2);
    let mut m = Merger::new(mcfg());
    m.child_connected(1).expect("connect");
    m.child_connected(2).expect("connect");
    let mut sink = RecSink::default();
    let mut up = LinkEncoder::new(&cfg()).expect("encoder");
    let mut parent = LinkDecoder::new(&cfg()).expect("decoder");
    let mut parent_retired = 0;
    let ticks: [&[(usize, f64)]; 4] = [
        &[(0, 1.0), (1, 1.0)],
        &[(0, 2.0), (1, 2.0)],
        &[(0, 3.0)],
        &[(0, 4.0), (1, 9.0)],
    ];
    for (k, obs) in ticks.iter().enumerate() {
        let f = leaf.tick(1000 * k as i64, obs);
        m.on_record(1, &f[0], &mut sink).expect("path 1");
        m.on_record(2, &f[1], &mut sink).expect("path 2");
        let p = uplink(&mut m, &mut up, 1000 * k as i64);
        let f = parent.decode(&p).expect("parent");
        parent_retired +=
            f.retired.len() + f.sections.iter().map(|s| s.retired.len()).sum::<usize>();
    }
    assert_eq!(sink.retires, vec![("n1".to_string(), lab("n1", 1), 2000)]);
    assert_eq!(parent_retired, 1);
    assert_eq!(m.stats().retires_ignored, 1);
    // Series 1 came back at 3000 with its new value.
    assert!(
        sink.samples
            .contains(&("n1".into(), lab("n1", 1), 3000, 9f64.to_bits()))
    );
    assert_eq!(m.table().len(), 2);
    assert_eq!(parent.series_count(), 2);
}

#[test]
fn silent_sources_expire_and_retire_their_series() {
    let mut m = Merger::new(MergeConfig {
        source_ttl_ms: 5_000,
        ..mcfg()
    });
    m.child_connected(1).expect("connect");
    let (mut l1, mut l2) = (Leaf::new("n1", 1), Leaf::new("n2", 1));
    let mut sink = RecSink::default();
    let mut up = LinkEncoder::new(&cfg()).expect("encoder");
    let mut parent = LinkDecoder::new(&cfg()).expect("decoder");
    m.child_connected(2).expect("connect");
    for k in 0..10i64 {
        if k < 2 {
            m.on_record(1, &l1.tick(1000 * k, &[(0, 1.0), (1, 2.0)])[0], &mut sink)
                .expect("n1");
        }
        m.on_record(2, &l2.tick(1000 * k, &[(0, k as f64)])[0], &mut sink)
            .expect("n2");
        m.expire(1000 * k, &mut sink);
        parent
            .decode(&uplink(&mut m, &mut up, 1000 * k))
            .expect("parent");
    }
    // n1 last ticked at 1000 (no value changed then: the retirement is at
    // its last heartbeat); expired once now - 5000 > 1000.
    let mut r = sink.retires.clone();
    r.sort();
    assert_eq!(
        r,
        vec![
            ("n1".to_string(), lab("n1", 0), 1000),
            ("n1".to_string(), lab("n1", 1), 1000),
        ]
    );
    assert_eq!(m.stats().expired_sources, 1);
    assert_eq!((m.stats().sources, m.stats().series), (1, 1));
    assert_eq!(parent.series_count(), 1);
    assert_eq!(parent.sources_iter().count(), 1);
    // child_gone keeps the series: another path may still carry them.
    m.child_gone(2);
    assert_eq!(m.table().len(), 1);
    assert_eq!(m.stats().children, 1);
}

#[test]
fn caps_are_enforced() {
    let mut m = Merger::new(MergeConfig {
        max_series: 3,
        max_series_per_child: 4,
        ..mcfg()
    });
    m.child_connected(1).expect("connect");
    m.child_connected(2).expect("connect");
    let mut sink = RecSink::default();
    let mut big = Leaf::new("n1", 1);
    let obs: Vec<(usize, f64)> = (0..5).map(|i| (i, 1.0)).collect();
    let err = m
        .on_record(1, &big.tick(0, &obs)[0], &mut sink)
        .expect_err("per-child cap");
    assert!(matches!(
        err,
        AggregatorError::Codec {
            source: canopy_proto::codec::CodecError::TooManySeries { max: 4 },
            ..
        }
    ));
    let mut ok = Leaf::new("n2", 1);
    let obs: Vec<(usize, f64)> = (0..4).map(|i| (i, 1.0)).collect();
    m.on_record(2, &ok.tick(0, &obs)[0], &mut sink)
        .expect("within per-child cap");
    assert_eq!(m.table().len(), 3);
    assert_eq!(m.stats().dropped_over_cap, 1);
    assert_eq!(sink.samples.len(), 3);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Any interleaving of two paths (each in its own order), with the
    /// aggregator ticking at random points, delivers every (series, ts)
    /// exactly once, and every retirement exactly once.
    #[test]
    fn interleavings_deliver_each_sample_once(
        order in proptest::collection::vec(any::<bool>(), 0..64),
        ticks in proptest::collection::vec(any::<bool>(), 64),
        n in 1usize..8,
    ) {
        let mut leaf = Leaf::new("n1", 2);
        let frames = workload(&mut leaf, 1_000, 20, n);
        let want = reference(&per_link(&frames, 0));
        let mut m = Merger::new(mcfg());
        m.child_connected(1).expect("connect");
        m.child_connected(2).expect("connect");
        let mut up = LinkEncoder::new(&cfg()).expect("encoder");
        let mut b = Merger::new(mcfg());
        b.child_connected(1).expect("connect");
        let (mut sink, mut sb) = (RecSink::default(), RecSink::default());
        let (mut i, mut j, mut step) = (0, 0, 0);
        while i < frames.len() || j < frames.len() {
            let pick_first = order.get(step).copied().unwrap_or(step % 2 == 0);
            if (pick_first && i < frames.len()) || j >= frames.len() {
                m.on_record(1, &frames[i][0], &mut sink).expect("path 1");
                i += 1;
            } else {
                m.on_record(2, &frames[j][1], &mut sink).expect("path 2");
                j += 1;
            }
            // First tick right after the first frame: the uplink's keyframe
            // is a snapshot (see the relay test).
            if step == 0 || ticks[step % ticks.len()] {
                let p = uplink(&mut m, &mut up, step as i64);
                b.on_record(1, &p, &mut sb).expect("relay");
                b.take_changeset(0);
                b.end_tick();
            }
            step += 1;
        }
        let p = uplink(&mut m, &mut up, step as i64);
        b.on_record(1, &p, &mut sb).expect("relay");
        same(&sink.sorted_samples(), &want.sorted_samples());
        same(&sb.sorted_samples(), &want.sorted_samples());
        let mut r = sink.retires.clone();
        r.sort();
        let mut w = want.retires.clone();
        w.sort();
        prop_assert_eq!(&r, &w);
        let mut rb = sb.retires.clone();
        rb.sort();
        prop_assert_eq!(rb, w);
    }
}

/// A leaf with two paths: path 0 loses tick 8 (its relay died) and comes
/// back at once with tick 9 as a keyframe on a new link; path 1 is slower
/// and brings tick 8 only afterwards. At the point where the paths meet,
/// tick 8 must still be accepted, and every tick exactly once.
#[test]
fn a_slower_path_fills_the_hole_of_a_faster_one() {
    let run = |hole_wait_ms: i64| {
        let mut m = Merger::new(MergeConfig {
            hole_wait_ms,
            ..mcfg()
        });
        let mut sink = RecSink::default();
        for c in [1, 2, 3] {
            m.child_connected(c).unwrap();
        }
        let mut leaf = Leaf::new("n1", 2);
        let mut slow = Vec::new();
        for t in 1..=10i64 {
            if t == 9 {
                // The failed-over link: a fresh encoder, keyframe first.
                leaf.encs.push(LinkEncoder::new(&cfg()).expect("encoder"));
            }
            let recs = leaf.tick(t * 1000, &[(1, t as f64)]);
            slow.push(recs[1].clone());
            match t {
                ..=7 => {
                    m.on_record(1, &recs[0], &mut sink).unwrap();
                }
                8 => {} // lost with the dead relay
                _ => {
                    m.on_record(3, &recs[2], &mut sink).unwrap();
                }
            }
            // The slow path runs two ticks behind.
            if t >= 3 {
                m.on_record(2, &slow[(t - 3) as usize], &mut sink).unwrap();
            }
            m.expire(t * 1000, &mut sink);
        }
        for rec in &slow[8..] {
            m.on_record(2, rec, &mut sink).unwrap();
        }
        let ticks: Vec<i64> = sink.samples.iter().map(|s| s.2 / 1000).collect();
        (ticks, m.stats().sections_held)
    };
    let (plain, held) = run(0);
    assert_eq!(held, 0);
    assert!(
        !plain.contains(&8),
        "without waiting, tick 8 is lost: {plain:?}"
    );
    let (filled, held) = run(5_000);
    assert!(held > 0, "the sections after the hole waited");
    assert_eq!(
        filled,
        (1..=10).collect::<Vec<_>>(),
        "every tick once, in order"
    );
}

/// A hole nobody fills costs at most the wait: here the source skipped
/// tick 4 and the slower path stalled, so tick 5 applies when its wait is
/// over.
#[test]
fn an_unfilled_hole_releases_after_the_wait() {
    let mut m = Merger::new(MergeConfig {
        hole_wait_ms: 3_000,
        ..mcfg()
    });
    let mut sink = RecSink::default();
    m.child_connected(1).unwrap();
    m.child_connected(2).unwrap();
    let mut leaf = Leaf::new("n1", 2);
    for t in [1i64, 2, 3, 5] {
        let recs = leaf.tick(t * 1000, &[(1, t as f64)]);
        m.on_record(1, &recs[0], &mut sink).unwrap();
        if t <= 2 {
            m.on_record(2, &recs[1], &mut sink).unwrap();
        }
    }
    assert_eq!(sink.samples.len(), 3, "tick 5 waits for tick 4");
    m.expire(7_000, &mut sink);
    assert_eq!(sink.samples.len(), 3, "still within the wait");
    m.expire(8_001, &mut sink);
    assert_eq!(sink.samples.len(), 4, "released after the wait");
    assert_eq!(m.stats().holes_unfilled, 1);
}

/// A source that really skipped a tick is not held longer than the other
/// path takes to pass the same timestamp: paths deliver in time order.
#[test]
fn a_hole_every_path_passed_is_released_at_once() {
    let mut m = Merger::new(MergeConfig {
        hole_wait_ms: 60_000,
        ..mcfg()
    });
    let mut sink = RecSink::default();
    m.child_connected(1).unwrap();
    m.child_connected(2).unwrap();
    let mut leaf = Leaf::new("n1", 2);
    let mut slow = Vec::new();
    for t in [1i64, 2, 3, 5] {
        let recs = leaf.tick(t * 1000, &[(1, t as f64)]);
        m.on_record(1, &recs[0], &mut sink).unwrap();
        if t == 1 {
            // Both paths are known from the first tick on.
            m.on_record(2, &recs[1], &mut sink).unwrap();
        } else {
            slow.push(recs[1].clone());
        }
    }
    assert_eq!(sink.samples.len(), 3, "tick 5 waits");
    for rec in &slow {
        m.on_record(2, rec, &mut sink).unwrap();
    }
    let ticks: Vec<i64> = sink.samples.iter().map(|s| s.2 / 1000).collect();
    assert_eq!(
        ticks,
        vec![1, 2, 3, 5],
        "released once the slow path passed 5"
    );
}

/// One path only (R = 1): nothing can fill a hole, so nothing waits.
#[test]
fn a_single_path_source_is_never_held() {
    let mut m = Merger::new(MergeConfig {
        hole_wait_ms: 60_000,
        ..mcfg()
    });
    let mut sink = RecSink::default();
    m.child_connected(1).unwrap();
    let mut leaf = Leaf::new("n1", 1);
    for t in [1i64, 2, 3, 5] {
        let recs = leaf.tick(t * 1000, &[(1, t as f64)]);
        m.on_record(1, &recs[0], &mut sink).unwrap();
    }
    assert_eq!(sink.samples.len(), 4);
    assert_eq!(m.stats().sections_held, 0);
}

mod copies;

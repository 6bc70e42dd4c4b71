//! Codec suite: round trips, bounds end to end, resync (hostile input in
//! [`hostile`]).

use proptest::prelude::*;

use super::*;
use crate::model::{Labels, MetricKind, stale_nan};

mod hostile;
mod keys;
mod lazy;
mod repeat;
mod sparse;

/// A sender plus one link, and a receiver, wired back to back.
struct Pair {
    tx: Sender,
    enc: LinkEncoder,
    dec: LinkDecoder,
    split: RecordSplitter,
    wire: Vec<u8>,
    cfg: CodecConfig,
}

impl Pair {
    fn new(cfg: CodecConfig) -> Self {
        Self {
            tx: Sender::new(BoundsPolicy::default()),
            enc: LinkEncoder::new(&cfg).expect("encoder"),
            dec: LinkDecoder::new(&cfg).expect("decoder"),
            split: RecordSplitter::new(cfg.max_frame_bytes),
            wire: Vec::new(),
            cfg,
        }
    }

    /// Sends one tick of `(labels, kind, value)` from source "n1"; returns
    /// the decoded frame.
    fn tick(&mut self, ts: i64, obs: &[(Labels, MetricKind, f64)]) -> RxFrame {
        let src = self.tx.source("n1", 1000);
        self.tx.begin_tick(ts);
        self.tx.tick_source(src, ts);
        for (l, k, v) in obs {
            self.tx.observe(src, l, *k, *v);
        }
        let (table, cs) = self.tx.finish_tick();
        let mut rec = Vec::new();
        self.enc.encode(table, cs, &mut rec).expect("encode");
        self.tx.end_tick();
        self.wire.extend_from_slice(&rec);
        self.split.push(&rec);
        let payload = self.split.pop().expect("split").expect("one record");
        self.dec.decode(&payload).expect("decode")
    }

    /// The receiver's value of `labels`.
    fn rx_value(&self, labels: &Labels) -> Option<f64> {
        self.dec
            .series_iter()
            .find(|(_, s)| &s.labels == labels)
            .and_then(|(id, _)| self.dec.value(id))
    }

    /// Starts a new link (new encoder and decoder) on the same sender.
    fn relink(&mut self) {
        self.enc = LinkEncoder::new(&self.cfg).expect("encoder");
        self.dec = LinkDecoder::new(&self.cfg).expect("decoder");
    }
}

/// Encodes one tick of `table`/`cs` on `enc` and returns the record's
/// payload (length prefix stripped), as a receiver's splitter hands it over.
pub(crate) fn encode_payload(
    enc: &mut LinkEncoder,
    table: &SeriesTable,
    cs: &Changeset,
) -> Vec<u8> {
    let mut rec = Vec::new();
    enc.encode(table, cs, &mut rec).expect("encode");
    let (len, pre) = record::read_prefix(&rec, usize::MAX)
        .expect("prefix")
        .expect("complete");
    rec[pre..pre + len].to_vec()
}

/// A hand-built keyframe defining one source, id 0 named `name` at a 1 s
/// tick, and nothing else: the start of the tests' hand-built frames.
fn one_source_keyframe(name: impl Into<String>) -> crate::schema::frame::Frame {
    use crate::schema::frame as pb;
    pb::Frame {
        keyframe: true,
        sources: vec![pb::SourceDef {
            id: 0,
            name: name.into(),
            tick_ms: 1000,
        }],
        ..Default::default()
    }
}

fn g(name: &str, i: usize) -> Labels {
    Labels::metric(name, [("node", "n1".to_string()), ("i", i.to_string())])
}

fn within_bound(kind: MetricKind, truth: f64, got: f64) -> bool {
    if truth.is_nan() {
        return got.is_nan();
    }
    match kind {
        MetricKind::Gauge => (got - truth).abs() <= 1e-3 * truth.abs() || got == truth,
        MetricKind::Counter => (got - truth).abs() <= 1e-3 || got == truth,
    }
}

#[test]
fn unchanged_series_cost_nothing_after_first_frame() {
    let mut p = Pair::new(CodecConfig::default());
    let obs: Vec<_> = (0..100)
        .map(|i| (g("m", i), MetricKind::Gauge, i as f64))
        .collect();
    let f0 = p.tick(1_000, &obs);
    assert!(f0.keyframe);
    assert_eq!(f0.new_series.len(), 100);
    let f1 = p.tick(2_000, &obs);
    assert!(!f1.keyframe);
    assert_eq!(f1.sections.len(), 1, "heartbeat section");
    assert!(f1.sections[0].updates.is_empty());
    assert_eq!(f1.ts_ms, 2_000);
}

#[test]
fn disappearing_series_is_retired_and_can_return() {
    let mut p = Pair::new(CodecConfig::default());
    let a = g("job_cpu", 1);
    let b = g("job_cpu", 2);
    p.tick(
        0,
        &[
            (a.clone(), MetricKind::Counter, 5.0),
            (b.clone(), MetricKind::Counter, 7.0),
        ],
    );
    let f = p.tick(1000, &[(a.clone(), MetricKind::Counter, 6.0)]);
    assert!(
        f.retired.is_empty(),
        "explicit retirements travel in sections"
    );
    assert_eq!(f.sections[0].retired.len(), 1);
    assert_eq!(f.sections[0].retired[0].1.labels, b);
    assert_eq!(f.sections[0].ts_ms, 1000);
    let f = p.tick(
        2000,
        &[
            (a.clone(), MetricKind::Counter, 6.0),
            (b.clone(), MetricKind::Counter, 1.0),
        ],
    );
    assert_eq!(f.new_series.len(), 1);
    assert_eq!(p.rx_value(&b), Some(1.0));
}

#[test]
fn specials_travel_exactly() {
    let mut p = Pair::new(CodecConfig::default());
    let l = g("m", 0);
    for (t, v) in [
        (0, 1.0),
        (1, f64::NAN),
        (2, 2.0),
        (3, f64::INFINITY),
        (4, stale_nan()),
        (5, 3.0),
    ] {
        p.tick(t * 1000, &[(l.clone(), MetricKind::Gauge, v)]);
        let got = p.rx_value(&l).expect("present");
        assert_eq!(got.to_bits(), v.to_bits(), "at {t}");
    }
}

#[test]
fn periodic_keyframe_and_new_link_resync() {
    let cfg = CodecConfig {
        keyframe_interval_ms: 5_000,
        ..CodecConfig::default()
    };
    let mut p = Pair::new(cfg);
    let mut kf = 0;
    for t in 0..20 {
        let obs: Vec<_> = (0..10)
            .map(|i| (g("c", i), MetricKind::Counter, (t * (i + 1)) as f64 * 1.37))
            .collect();
        if p.tick(t as i64 * 1000, &obs).keyframe {
            kf += 1;
        }
        if t == 12 {
            p.relink();
        }
    }
    assert_eq!(kf, 5, "t=0,5,10 periodic, 13 new link, 18 periodic");
    for i in 0..10 {
        let truth = (19 * (i + 1)) as f64 * 1.37;
        let got = p.rx_value(&g("c", i)).expect("present after resync");
        assert!((got - truth).abs() <= 1e-3, "{got} vs {truth}");
    }
}

/// Compresses a raw protobuf frame as a sender would, for hand-built frames
/// (a keyframe that names no format gets this build's).
fn compress(cfg: &CodecConfig, f: &crate::schema::frame::Frame) -> Vec<u8> {
    let mut f = f.clone();
    if f.keyframe && f.format == 0 {
        f.format = super::FORMAT;
    }
    compress_as_is(cfg, &f)
}

/// Compresses a raw protobuf frame exactly as given.
fn compress_as_is(cfg: &CodecConfig, f: &crate::schema::frame::Frame) -> Vec<u8> {
    use prost::Message;
    let mut z = zstream::ZEncoder::new(cfg.zstd_level, cfg.window_log).expect("z");
    let raw = f.encode_to_vec();
    let mut out = Vec::new();
    encoder::put_uvarint(&mut out, (raw.len() as u64) << 2);
    z.compress_frame(&raw, &mut out).expect("compress");
    out
}

#[test]
fn packed_sections_of_several_sources_round_trip() {
    let cfg = CodecConfig::default();
    let mut tx = Sender::new(BoundsPolicy::default());
    let mut enc = LinkEncoder::new(&cfg).expect("encoder");
    let mut dec = LinkDecoder::new(&cfg).expect("decoder");
    let srcs = [tx.source("a", 1000), tx.source("b", 1000)];
    for t in 0..50i64 {
        tx.begin_tick(t * 1000);
        for (k, &src) in srcs.iter().enumerate() {
            tx.tick_source(src, t * 1000 + k as i64);
            for i in 0..8usize {
                // Series come and go (i == 3 on odd ticks of source b).
                if k == 1 && i == 3 && t % 2 == 1 {
                    continue;
                }
                let l = Labels::metric("m", [("src", k.to_string()), ("i", i.to_string())]);
                let kind = if i % 2 == 0 {
                    MetricKind::Counter
                } else {
                    MetricKind::Gauge
                };
                let v = if kind == MetricKind::Counter {
                    (t * (i as i64 + 1) * 10) as f64
                } else {
                    ((t * 7919 + i as i64 * 31) % 97) as f64 - 40.0
                };
                tx.observe(src, &l, kind, v);
            }
        }
        let (table, cs) = tx.finish_tick();
        let want: Vec<(Labels, f64)> = table
            .iter()
            .map(|(_, s)| (s.labels.clone(), s.value))
            .collect();
        let payload = encode_payload(&mut enc, table, cs);
        tx.end_tick();
        dec.decode(&payload).expect("decode");
        assert_eq!(dec.series_count(), want.len(), "tick {t}");
        for (l, v) in want {
            let got = dec
                .series_iter()
                .find(|(_, s)| s.labels == l)
                .and_then(|(id, _)| dec.value(id));
            assert_eq!(got, Some(v), "{l} at tick {t}");
        }
    }
}

/// Feeds a fresh decoder the hand-built keyframe `key` (marked with this
/// build's format), which must decode, then `delta`, whose result it
/// returns.
fn decode_key_then_delta(
    mut key: crate::schema::frame::Frame,
    delta: crate::schema::frame::Frame,
) -> Result<RxFrame, CodecError> {
    use prost::Message;
    let cfg = CodecConfig::default();
    let mut z = zstream::ZEncoder::new(cfg.zstd_level, cfg.window_log).expect("z");
    let mut dec = LinkDecoder::new(&cfg).expect("decoder");
    key.format = FORMAT;
    let mut decode = |f: &crate::schema::frame::Frame| {
        let raw = f.encode_to_vec();
        let mut out = Vec::new();
        encoder::put_uvarint(&mut out, (raw.len() as u64) << 2);
        z.compress_frame(&raw, &mut out).expect("compress");
        dec.decode(&out)
    };
    decode(&key).expect("keyframe");
    decode(&delta)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    /// Every reconstructed value is within its bound at every tick, for
    /// gauges and counters, across series appearing and disappearing,
    /// and through a new link at a random tick.
    #[test]
    fn round_trip_within_bounds(
        steps in prop::collection::vec(
            prop::collection::vec((0usize..12, prop_oneof![Just(0.0), -1e9f64..1e9, 0f64..10.0]), 0..12),
            1..40),
        relink_at in 0usize..40,
    ) {
        let mut p = Pair::new(CodecConfig { keyframe_interval_ms: 7_000, ..CodecConfig::default() });
        let mut counters = [0f64; 12];
        for (t, step) in steps.iter().enumerate() {
            let mut obs = Vec::new();
            let mut used = [false; 12];
            for &(i, v) in step {
                if used[i] { continue; }
                used[i] = true;
                if i < 6 {
                    obs.push((g("gauge", i), MetricKind::Gauge, v));
                } else {
                    counters[i] += v.abs().min(1e6);
                    obs.push((g("counter", i), MetricKind::Counter, counters[i]));
                }
            }
            if t == relink_at { p.relink(); }
            p.tick(t as i64 * 1000, &obs);
            prop_assert_eq!(p.dec.series_count(), obs.len());
            for (l, k, v) in &obs {
                let got = p.rx_value(l).expect("present");
                prop_assert!(within_bound(*k, *v, got), "{l}: true {v} got {got}");
            }
        }
    }
}

/// A relay may carry one source at several timestamps in one frame, with a
/// series ending in between: every section keeps its own updates, and the
/// retirement lands at its own timestamp.
#[test]
fn several_sections_of_one_source_keep_their_order_and_retirements() {
    let cfg = CodecConfig::default();
    let mut table = SeriesTable::new();
    let src = table.add_source("n1", 1000);
    let entry = |i: usize| SeriesEntry {
        labels: g("m", i),
        source: src,
        encoding: Encoding::Gauge { mantissa_bits: 9 },
        value: 0.0,
    };
    let (a, b) = (table.insert(entry(0)), table.insert(entry(1)));
    let mut enc = LinkEncoder::new(&cfg).expect("encoder");
    let mut dec = LinkDecoder::new(&cfg).expect("decoder");
    let mut send = |table: &SeriesTable, cs: &Changeset| {
        dec.decode(&encode_payload(&mut enc, table, cs))
            .expect("decode")
    };
    let mut cs = Changeset::new(1000);
    cs.new_sources.push(src);
    cs.defs.extend([a, b]);
    cs.sections.push(ChangeSection {
        source: src,
        ts_ms: 1000,
        ..ChangeSection::default()
    });
    send(&table, &cs);

    // One frame: b changes then ends at 2000; a new series c starts at 3000.
    let c = table.insert(entry(2));
    let mut cs = Changeset::new(3000);
    cs.defs.push(c);
    cs.sections.push(ChangeSection {
        source: src,
        ts_ms: 2000,
        updates: vec![(a, 1.0), (b, 2.0)],
        retired: vec![b],
    });
    cs.sections.push(ChangeSection {
        source: src,
        ts_ms: 3000,
        updates: vec![(a, 4.0), (c, 5.0)],
        retired: Vec::new(),
    });
    let f = send(&table, &cs);
    assert_eq!(f.sections.len(), 2);
    assert_eq!(
        (f.sections[0].ts_ms, f.sections[0].updates.clone()),
        (2000, vec![(a, 1.0), (b, 2.0)])
    );
    assert_eq!(f.sections[0].retired.len(), 1);
    assert_eq!(f.sections[0].retired[0].1.labels, g("m", 1));
    assert_eq!(
        (f.sections[1].ts_ms, f.sections[1].updates.clone()),
        (3000, vec![(a, 4.0), (c, 5.0)])
    );
    assert!(f.sections[1].retired.is_empty());
    assert_eq!(dec.series_count(), 2);
    assert!(dec.series(b).is_none());
}

/// A counter turning float is redefined without its labels (the receiver
/// keeps them), and a label-less definition of a series the link does not
/// hold is rejected.
#[test]
fn redefinitions_keep_labels_and_labelless_unknown_defs_are_rejected() {
    use crate::schema::frame as pb;
    let mut p = Pair::new(CodecConfig::default());
    let l = g("c", 0);
    p.tick(0, &[(l.clone(), MetricKind::Counter, 5.0)]);
    let before = p.wire.len();
    let f = p.tick(1000, &[(l.clone(), MetricKind::Counter, 5.25)]);
    assert_eq!(f.new_series.len(), 1, "redefined as a float counter");
    assert!(
        p.wire.len() - before < 40,
        "{} bytes",
        p.wire.len() - before
    );
    assert_eq!(p.rx_value(&l), Some(5.25));
    let f = pb::Frame {
        series: vec![pb::SeriesDef {
            id: 3,
            encoding: pb::Encoding::CounterInt as i32,
            ..Default::default()
        }],
        ..one_source_keyframe("n")
    };
    let cfg = CodecConfig::default();
    let mut dec = LinkDecoder::new(&cfg).expect("decoder");
    assert!(matches!(
        dec.decode(&compress(&cfg, &f)),
        Err(CodecError::BadDefinition { id: 3, .. })
    ));
}

/// Delta frames of packed sections travel compact (no zstd): once the flag
/// statistics are warm, a tick where one of 200 gauges changes costs a
/// handful of bytes, all framing included.
#[test]
fn quiet_delta_frames_cost_a_few_bytes() {
    let mut p = Pair::new(CodecConfig::default());
    let obs = |t: usize| -> Vec<(Labels, MetricKind, f64)> {
        (0..200)
            .map(|i| {
                let v = if i == 0 { t as f64 } else { 1000.5 + i as f64 };
                (g("m", i), MetricKind::Gauge, v)
            })
            .collect()
    };
    p.tick(0, &obs(0));
    for t in 1..30 {
        let before = p.wire.len();
        let f = p.tick(t as i64 * 1000, &obs(t));
        assert_eq!(f.sections[0].updates.len(), 1);
        // The first ticks teach every series' flag contexts (a bit each).
        if t > 6 {
            let cost = p.wire.len() - before;
            assert!(cost <= 12, "tick {t}: {cost} bytes");
        }
    }
}

/// An integer counter `m<id>` of `source`, as a keyframe defines it.
fn counter_def(id: u32, source: u32) -> crate::schema::frame::SeriesDef {
    use crate::schema::frame as pb;
    pb::SeriesDef {
        id,
        source,
        labels: vec![pb::Label {
            name: "__name__".into(),
            value: format!("m{id}"),
        }],
        encoding: pb::Encoding::CounterInt as i32,
        ..Default::default()
    }
}

/// A keyframe of sources 0 (series 0..5) and 1 (5..8), integer counters
/// holding no value (specials).
pub(super) fn two_source_keyframe() -> crate::schema::frame::Frame {
    use crate::schema::frame as pb;
    let specials = |ids: std::ops::Range<u32>, source: u32| pb::Section {
        source,
        special_bits: ids.clone().map(|_| f64::NAN.to_bits()).collect(),
        special_ids: ids.collect(),
        ..Default::default()
    };
    pb::Frame {
        keyframe: true,
        sources: (0..2)
            .map(|id| pb::SourceDef {
                id,
                name: format!("n{id}"),
                tick_ms: 1000,
            })
            .collect(),
        series: (0..8)
            .map(|id| counter_def(id, u32::from(id >= 5)))
            .collect(),
        sections: vec![specials(0..5, 0), specials(5..8, 1)],
        ..Default::default()
    }
}

//! Repeat sections (codec format 3): a source whose changed members are
//! those of its previous packed section, each by its last increment, goes
//! with a flag and no range-coded bits; hostile repeats are typed errors.

use super::*;
use crate::codec::packed::{LinkModel, SPARSE_COUNT, SPARSE_FIRST, WireState, zigzag};
use crate::codec::rangecoder::RangeEncoder;
use crate::schema::frame as pb;

/// A tick counter (`+step` a tick) and 40 gauges that keep their values,
/// except the `moved` ones, which take a new value at tick `t`.
fn node(t: usize, ticks: f64, moved: &[usize]) -> Vec<(Labels, MetricKind, f64)> {
    let mut o = vec![(g("ticks_total", 0), MetricKind::Counter, ticks)];
    for i in 0..40 {
        let v = if moved.contains(&i) {
            (t * 31 + i) as f64 + 0.5
        } else {
            i as f64
        };
        o.push((g("m", i), MetricKind::Gauge, v));
    }
    o
}

#[test]
fn a_quiet_node_sends_its_tick_counter_as_repeats() {
    let mut p = Pair::new(CodecConfig::default());
    p.tick(0, &node(0, 0.0, &[]));
    let id = p
        .dec
        .series_iter()
        .find(|(_, s)| s.labels == g("ticks_total", 0))
        .map(|(id, _)| id)
        .expect("defined");
    let mut quiet_bytes = Vec::new();
    for t in 1..50usize {
        let before = p.wire.len();
        let f = p.tick(t as i64 * 1000, &node(t, t as f64, &[]));
        assert_eq!(f.sections.len(), 1);
        assert_eq!(f.sections[0].updates, vec![(id, t as f64)], "tick {t}");
        quiet_bytes.push(p.wire.len() - before);
    }
    // The first change is coded; from then on the counter repeats its step.
    assert_eq!(p.enc.repeat_sections(), 48);
    // A repeat is the record length, the tag, the ts delta and the source.
    assert!(quiet_bytes[5..].iter().all(|&b| b <= 4), "{quiet_bytes:?}");
}

#[test]
fn a_new_step_or_another_member_set_is_coded_not_repeated() {
    let mut p = Pair::new(CodecConfig::default());
    p.tick(0, &node(0, 0.0, &[]));
    let mut ticks = 0.0;
    let mut expect_repeats = 0;
    for t in 1..40usize {
        // Ticks 10..12: the counter steps by 2 (10 codes the new step, 11
        // repeats it, 12 codes the old one); 20: a gauge moves too, 21: it
        // moves back (the same members, another step), 22: the counter alone.
        ticks += if (10..12).contains(&t) { 2.0 } else { 1.0 };
        let moved: &[usize] = if t == 20 { &[3] } else { &[] };
        let repeats = p.enc.repeat_sections();
        let o = node(t, ticks, moved);
        let f = p.tick(t as i64 * 1000, &o);
        let repeated = p.enc.repeat_sections() - repeats;
        let coded = matches!(t, 1 | 10 | 12 | 20 | 21 | 22);
        assert_eq!(repeated, u64::from(!coded), "tick {t}");
        expect_repeats += u64::from(!coded);
        let n = if (20..22).contains(&t) { 2 } else { 1 };
        assert_eq!(f.sections[0].updates.len(), n, "tick {t}");
        for (l, k, v) in &o {
            let rx = p.rx_value(l).expect("held");
            assert!(within_bound(*k, *v, rx), "tick {t} {l}: {v} got {rx}");
        }
        assert_eq!(p.rx_value(&g("ticks_total", 0)), Some(ticks));
    }
    assert_eq!(p.enc.repeat_sections(), expect_repeats);
}

#[test]
fn repeats_survive_keyframes_and_retirements() {
    let mut p = Pair::new(CodecConfig {
        keyframe_interval_ms: 7_000,
        ..CodecConfig::default()
    });
    let mut ticks = 0.0;
    for t in 0..40usize {
        ticks += 1.0;
        let mut o = node(t, ticks, &[]);
        // A series that comes and goes: its retirement and return.
        if t % 9 < 4 {
            o.push((g("job", 0), MetricKind::Counter, t as f64));
        }
        p.tick(t as i64 * 1000, &o);
        for (l, k, v) in &o {
            let rx = p.rx_value(l).expect("held");
            assert!(within_bound(*k, *v, rx), "tick {t} {l}: {v} got {rx}");
        }
        assert_eq!(p.rx_value(&g("ticks_total", 0)), Some(ticks), "tick {t}");
    }
    assert!(p.enc.repeat_sections() > 10);
}

/// Decodes `frames` in order on one link (zstd mode, one stream); the
/// result of the last one decoded, stopping at the first error.
fn decode_frames(mut frames: Vec<pb::Frame>) -> Result<RxFrame, CodecError> {
    use prost::Message;
    let cfg = CodecConfig::default();
    let mut z = zstream::ZEncoder::new(cfg.zstd_level, cfg.window_log).expect("z");
    let mut dec = LinkDecoder::new(&cfg).expect("decoder");
    frames[0].format = FORMAT;
    let mut last = Err(CodecError::NeedKeyframe);
    for (seq, f) in frames.iter_mut().enumerate() {
        f.seq = seq as u64;
        let raw = f.encode_to_vec();
        let mut out = Vec::new();
        encoder::put_uvarint(&mut out, (raw.len() as u64) << 2);
        z.compress_frame(&raw, &mut out).expect("compress");
        last = dec.decode(&out);
        if last.is_err() {
            break;
        }
    }
    last
}

/// A delta frame whose section of source 0 packs series 1 and 3 at 40 and
/// 7, sparsely (the first packed section of the source: walk 1).
fn coded_frame() -> pb::Frame {
    let mut m = LinkModel::default();
    let mut e = RangeEncoder::new(Vec::new());
    m.start_section(1);
    m.put_sparse(&mut e, true);
    m.put_sparse_u(&mut e, SPARSE_COUNT, 1);
    m.put_sparse_u(&mut e, SPARSE_FIRST, zigzag(1));
    let mut st = WireState::default();
    m.put_value(&mut e, (1, &mut st), 40, true, None);
    m.put_sparse_u(&mut e, crate::codec::packed::SPARSE_GAP, 1);
    let mut st = WireState::default();
    m.put_value(&mut e, (3, &mut st), 7, true, None);
    pb::Frame {
        sections: vec![pb::Section {
            source: 0,
            packed: e.finish(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn repeat_of(source: u32) -> pb::Frame {
    pb::Frame {
        sections: vec![pb::Section {
            source,
            repeat: true,
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn assert_malformed(r: Result<RxFrame, CodecError>, what: &str) {
    match r {
        Err(CodecError::Malformed(w)) => assert!(w.contains(what), "{w}"),
        other => panic!("expected a malformed repeat ({what}), got {other:?}"),
    }
}

#[test]
fn a_hand_made_repeat_applies_the_previous_members_again() {
    // Known absolute values hold no increment yet: the repeat gives them again.
    let f = decode_frames(vec![two_source_keyframe(), coded_frame(), repeat_of(0)]).expect("valid");
    assert_eq!(f.sections[0].updates, vec![(1, 40.0), (3, 7.0)]);
}

#[test]
fn hostile_repeats_are_typed_errors() {
    // A repeat of a source the link never defined.
    let r = decode_frames(vec![two_source_keyframe(), repeat_of(9)]);
    assert!(
        matches!(r, Err(CodecError::UnknownSource { id: 9 })),
        "{r:?}"
    );
    // Before any packed section of its source.
    assert_malformed(
        decode_frames(vec![two_source_keyframe(), repeat_of(0)]),
        "no earlier packed section",
    );
    assert_malformed(
        decode_frames(vec![two_source_keyframe(), coded_frame(), repeat_of(1)]),
        "no earlier packed section",
    );
    // With packed bytes.
    let mut f = repeat_of(0);
    f.sections[0].packed = vec![1, 2, 3];
    assert_malformed(
        decode_frames(vec![two_source_keyframe(), coded_frame(), f]),
        "carries packed bytes",
    );
    // In a keyframe.
    let mut k = two_source_keyframe();
    k.sections[0].repeat = true;
    assert_malformed(decode_frames(vec![k]), "in a keyframe");
    // A member retired since: unknown.
    let mut gone = repeat_of(0);
    gone.sections[0].repeat = false;
    gone.sections[0].retired = vec![3];
    let r = decode_frames(vec![
        two_source_keyframe(),
        coded_frame(),
        gone,
        repeat_of(0),
    ]);
    assert!(
        matches!(r, Err(CodecError::UnknownSeries { id: 3 })),
        "{r:?}"
    );
    // A member that holds no value since (a special arrived).
    let mut special = repeat_of(0);
    special.sections[0].repeat = false;
    special.sections[0].special_ids = vec![1];
    special.sections[0].special_bits = vec![f64::NAN.to_bits()];
    assert_malformed(
        decode_frames(vec![
            two_source_keyframe(),
            coded_frame(),
            special,
            repeat_of(0),
        ]),
        "holds no value",
    );
    // A member redefined into another source.
    let moved = pb::Frame {
        series: vec![counter_def(1, 1)],
        ..Default::default()
    };
    assert_malformed(
        decode_frames(vec![
            two_source_keyframe(),
            coded_frame(),
            moved,
            repeat_of(0),
        ]),
        "another source",
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    /// Any mix of counter steps and moving gauges round-trips, exact for
    /// the counter, through whichever forms the encoder picks (repeats
    /// included), across keyframes.
    #[test]
    fn any_step_pattern_round_trips(
        steps in prop::collection::vec((0u8..4, prop::collection::vec(0usize..40, 0..3)), 1..40),
    ) {
        let mut p = Pair::new(CodecConfig { keyframe_interval_ms: 11_000, ..CodecConfig::default() });
        let mut ticks = 0.0;
        for (t, (step, moved)) in steps.iter().enumerate() {
            ticks += f64::from(*step);
            let o = node(t, ticks, moved);
            p.tick(t as i64 * 1000, &o);
            prop_assert_eq!(p.rx_value(&g("ticks_total", 0)), Some(ticks));
            for (l, k, v) in &o {
                let rx = p.rx_value(l).expect("held");
                prop_assert!(within_bound(*k, *v, rx), "tick {} {}: {} got {}", t, l, v, rx);
            }
        }
    }

    /// Arbitrary compact frames (repeat bits, sources, packed bytes) after
    /// a real link's first frames are an error or a frame, never a panic.
    #[test]
    fn hostile_compact_repeats_do_not_panic(
        secs in prop::collection::vec((0u32..4, any::<bool>(), prop::collection::vec(any::<u8>(), 0..6)), 1..4),
        ts_delta in -3i64..3,
    ) {
        let mut p = Pair::new(CodecConfig::default());
        for t in 0..4usize {
            p.tick(t as i64 * 1000, &node(t, t as f64, &[]));
        }
        let f = pb::Frame {
            seq: 4,
            ts_delta_ms: ts_delta,
            sections: secs
                .iter()
                .map(|(source, repeat, packed)| pb::Section {
                    source: *source,
                    repeat: *repeat,
                    packed: packed.clone(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let mut out = Vec::new();
        compact::write(&f, 1000, &mut out);
        if let Ok(rx) = p.dec.decode(&out) {
            // Whatever decoded names only the link's series.
            for s in &rx.sections {
                for (id, _) in &s.updates {
                    prop_assert!(p.dec.series(*id).is_some());
                }
            }
        }
    }
}

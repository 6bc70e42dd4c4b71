//! Packed sections in both forms: dense (a flag per member) and sparse (the
//! changed members' ids), the encoder's choice, and hostile member lists.

use super::*;
use crate::codec::packed::{LinkModel, SPARSE_COUNT, SPARSE_FIRST, SPARSE_GAP, WireState, zigzag};
use crate::codec::rangecoder::RangeEncoder;
use crate::schema::frame as pb;

/// 64 gauges; the `changed` ones take a new value at tick `t`, the others
/// keep theirs (`vals`).
fn obs(vals: &mut [f64; 64], t: usize, changed: &[usize]) -> Vec<(Labels, MetricKind, f64)> {
    for &i in changed {
        vals[i] = (t * 7 + i) as f64 * 1.5 + 0.25;
    }
    (0..64)
        .map(|i| (g("m", i), MetricKind::Gauge, vals[i]))
        .collect()
}

#[test]
fn quiet_ticks_go_sparse_busy_ticks_dense_and_both_round_trip() {
    let mut p = Pair::new(CodecConfig::default());
    let mut vals = [0.0; 64];
    p.tick(0, &obs(&mut vals, 0, &[]));
    let busy: Vec<usize> = (0..64).step_by(2).collect();
    for t in 1..40usize {
        let changed: Vec<usize> = if t % 5 == 0 {
            busy.clone()
        } else {
            vec![t % 64, (t * 13) % 64]
        };
        let o = obs(&mut vals, t, &changed);
        let f = p.tick(t as i64 * 1000, &o);
        let mut got: Vec<u32> = f
            .sections
            .iter()
            .flat_map(|s| &s.updates)
            .map(|u| u.0)
            .collect();
        got.sort_unstable();
        got.dedup();
        assert_eq!(got.len(), {
            let mut c = changed.clone();
            c.sort_unstable();
            c.dedup();
            c.len()
        });
        for (l, k, v) in &o {
            let rx = p.rx_value(l).expect("held");
            assert!(within_bound(*k, *v, rx), "tick {t} {l}: {v} got {rx}");
        }
    }
    let (dense, sparse) = p.enc.packed_forms();
    assert_eq!(dense, 7, "every busy tick (1 in 5) goes dense");
    assert_eq!(sparse, 32, "every quiet tick goes sparse");
}

/// The sparse form is what makes a quiet source cheap to read, and it must
/// not cost more bytes than a flag per member did for a source whose one
/// changing series is always the same.
#[test]
fn a_quiet_source_costs_a_few_bytes_in_sparse_form() {
    let mut p = Pair::new(CodecConfig::default());
    let mut vals = [0.0; 64];
    p.tick(0, &obs(&mut vals, 0, &[]));
    for t in 1..60usize {
        let before = p.wire.len();
        p.tick(t as i64 * 1000, &obs(&mut vals, t, &[17]));
        if t > 8 {
            let cost = p.wire.len() - before;
            assert!(cost <= 8, "tick {t}: {cost} bytes");
        }
    }
    // Series 17 moves by a steady 10.5 a tick: on its wire grid some ticks
    // repeat the last increment exactly and go as repeats (format 3).
    let (dense, sparse) = p.enc.packed_forms();
    assert_eq!((dense, sparse + p.enc.repeat_sections()), (0, 59));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    /// Any mix of change sets (none, a few, most) round-trips within the
    /// bounds through whichever forms the encoder picks, across keyframes.
    #[test]
    fn any_change_pattern_round_trips(
        ticks in prop::collection::vec(prop::collection::vec(0usize..64, 0..40), 1..30),
    ) {
        let mut p = Pair::new(CodecConfig { keyframe_interval_ms: 9_000, ..CodecConfig::default() });
        let mut vals = [0.0; 64];
        for (t, changed) in ticks.iter().enumerate() {
            let o = obs(&mut vals, t, changed);
            p.tick(t as i64 * 1000, &o);
            for (l, k, v) in &o {
                let rx = p.rx_value(l).expect("held");
                prop_assert!(within_bound(*k, *v, rx), "tick {} {}: {} got {}", t, l, v, rx);
            }
        }
    }

    /// Arbitrary bytes after the sparse form bit never panic the decoder.
    #[test]
    fn hostile_sparse_bytes_do_not_panic(bytes in prop::collection::vec(any::<u8>(), 0..40)) {
        let _ = attack(|m, e| {
            m.put_sparse(e, true);
            for &b in &bytes {
                e.direct(u64::from(b), 8);
            }
        });
    }
}

/// A keyframe holding source 0 (series 0..5) and source 1 (series 5..8),
/// integer counters with no value held (specials), then a delta frame whose
/// section of source 0 packs what `script` codes, against a model in the
/// state the receiver's is (walk 1).
fn attack(script: impl FnOnce(&mut LinkModel, &mut RangeEncoder)) -> Result<RxFrame, CodecError> {
    let key = two_source_keyframe();
    let mut model = LinkModel::default();
    let mut e = RangeEncoder::new(Vec::new());
    model.start_section(1);
    script(&mut model, &mut e);
    let delta = pb::Frame {
        seq: 1,
        sections: vec![pb::Section {
            source: 0,
            packed: e.finish(),
            ..Default::default()
        }],
        ..Default::default()
    };
    decode_key_then_delta(key, delta)
}

/// Codes a sparse list: `count - 1`, then `first` (zigzag from 0), then per
/// `(gap, value)`: the gap (not before the first) and the value, absolute.
fn sparse_list(
    m: &mut LinkModel,
    e: &mut RangeEncoder,
    count_minus_one: u64,
    first: i64,
    items: &[(u64, u32, i64)],
) {
    m.put_sparse(e, true);
    m.put_sparse_u(e, SPARSE_COUNT, count_minus_one);
    m.put_sparse_u(e, SPARSE_FIRST, zigzag(first));
    for (i, &(gap, id, w)) in items.iter().enumerate() {
        if i > 0 {
            m.put_sparse_u(e, SPARSE_GAP, gap);
        }
        let mut st = WireState::default();
        m.put_value(e, (id, &mut st), w, true, None);
    }
}

#[test]
fn a_hand_coded_sparse_list_decodes() {
    // The harness itself: ids 1 and 3 with values 40 and 7.
    let f = attack(|m, e| sparse_list(m, e, 1, 1, &[(0, 1, 40), (1, 3, 7)])).expect("valid list");
    assert_eq!(f.sections[0].updates, vec![(1, 40.0), (3, 7.0)]);
}

#[test]
fn more_members_than_the_source_has_is_an_error() {
    // Source 0 has 5 series; a list of 6 is refused before any id is read.
    let err = attack(|m, e| sparse_list(m, e, 5, 0, &[])).expect_err("6 of 5");
    assert!(
        matches!(&err, CodecError::Malformed(w) if w.contains("more members")),
        "{err:?}"
    );
    // A count whose +1 overflows.
    let err = attack(|m, e| sparse_list(m, e, u64::MAX, 0, &[])).expect_err("huge");
    assert!(matches!(err, CodecError::Malformed(_)), "{err:?}");
}

#[test]
fn ids_out_of_range_are_errors() {
    // Below 0.
    let err = attack(|m, e| sparse_list(m, e, 0, -1, &[])).expect_err("negative");
    assert!(
        matches!(&err, CodecError::Malformed(w) if w.contains("out of range")),
        "{err:?}"
    );
    // Past u32.
    let err = attack(|m, e| sparse_list(m, e, 0, 1 << 33, &[])).expect_err("past u32");
    assert!(
        matches!(&err, CodecError::Malformed(w) if w.contains("out of range")),
        "{err:?}"
    );
    // Not a series of the link.
    let err = attack(|m, e| sparse_list(m, e, 0, 40, &[])).expect_err("undefined");
    assert!(
        matches!(err, CodecError::UnknownSeries { id: 40 }),
        "{err:?}"
    );
    // A series of another source.
    let err = attack(|m, e| sparse_list(m, e, 0, 6, &[])).expect_err("foreign");
    assert!(
        matches!(&err, CodecError::Malformed(w) if w.contains("another source")),
        "{err:?}"
    );
}

#[test]
fn unsorted_or_duplicate_ids_cannot_be_expressed() {
    // Gaps are unsigned and count from the previous id plus one, so the
    // only way back to an earlier or the same id is wrapping: refused.
    for gap in [u64::from(u32::MAX), u64::from(u32::MAX) - 1, u64::MAX] {
        let err =
            attack(|m, e| sparse_list(m, e, 1, 2, &[(0, 2, 5), (gap, 0, 1)])).expect_err("wrap");
        assert!(
            matches!(&err, CodecError::Malformed(w) if w.contains("out of range")),
            "gap {gap}: {err:?}"
        );
    }
    // A gap past the source's last member: unknown.
    let err = attack(|m, e| sparse_list(m, e, 1, 2, &[(0, 2, 5), (2, 5, 1)])).expect_err("foreign");
    assert!(
        matches!(&err, CodecError::Malformed(w) if w.contains("another source")),
        "{err:?}"
    );
}

#[test]
fn a_keyframe_of_another_format_is_refused() {
    let f = one_source_keyframe("n");
    let cfg = CodecConfig::default();
    for got in [0, FORMAT + 1] {
        let mut dec = LinkDecoder::new(&cfg).expect("decoder");
        let err = dec
            .decode(&compress_as_is(
                &cfg,
                &pb::Frame {
                    format: got,
                    ..f.clone()
                },
            ))
            .expect_err("old format");
        assert!(
            matches!(err, CodecError::Format { got: g, want: FORMAT } if g == got),
            "{err:?}"
        );
        assert!(err.to_string().contains("codec format"), "{err}");
    }
}

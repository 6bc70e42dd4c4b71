//! Hostile input: frames out of order, unknown ids, bombs, oversized or
//! truncated frames, garbage packed bytes: each a typed error, never a
//! panic, and memory stays bounded.

use proptest::prelude::*;

use super::*;

fn encode_n(cfg: &CodecConfig, n: usize) -> Vec<Vec<u8>> {
    let mut tx = Sender::new(BoundsPolicy::default());
    let mut enc = LinkEncoder::new(cfg).expect("encoder");
    let src = tx.source("n1", 1000);
    let mut out = Vec::new();
    for t in 0..n {
        tx.begin_tick(t as i64 * 1000);
        tx.tick_source(src, t as i64 * 1000);
        tx.observe(src, &g("m", 0), MetricKind::Gauge, t as f64);
        let (table, cs) = tx.finish_tick();
        let payload = encode_payload(&mut enc, table, cs);
        tx.end_tick();
        out.push(payload);
    }
    out
}

#[test]
fn out_of_order_frames_are_rejected_and_poison_the_link() {
    let cfg = CodecConfig::default();
    let frames = encode_n(&cfg, 3);
    let mut dec = LinkDecoder::new(&cfg).expect("decoder");
    dec.decode(&frames[0]).expect("first");
    let err = dec.decode(&frames[2]).expect_err("skipped one");
    // The zstd stream itself may notice first; either way it is an error.
    assert!(
        matches!(
            err,
            CodecError::OutOfOrder {
                expected: 1,
                got: 2
            } | CodecError::Zstd(_)
                | CodecError::Malformed(_)
        ),
        "{err:?}"
    );
    assert!(matches!(dec.decode(&frames[1]), Err(CodecError::Poisoned)));
}

#[test]
fn link_must_start_with_keyframe() {
    let cfg = CodecConfig::default();
    let frames = encode_n(&cfg, 2);
    let mut dec = LinkDecoder::new(&cfg).expect("decoder");
    assert!(dec.decode(&frames[1]).is_err());
}

#[test]
fn unknown_series_id_is_rejected() {
    use crate::schema::frame as pb;
    let cfg = CodecConfig::default();
    let f = pb::Frame {
        sections: vec![pb::Section {
            source: 0,
            id_deltas: vec![41],
            value_deltas: vec![1],
            ..Default::default()
        }],
        ..one_source_keyframe("n")
    };
    let mut dec = LinkDecoder::new(&cfg).expect("decoder");
    assert!(matches!(
        dec.decode(&compress(&cfg, &f)),
        Err(CodecError::UnknownSeries { id: 41 })
    ));
}

#[test]
fn decompression_bomb_is_rejected_without_allocating_it() {
    let cfg = CodecConfig {
        max_frame_bytes: 64 << 10,
        ..CodecConfig::default()
    };
    // A frame whose labels decompress to 1 MiB: tiny on the wire.
    let f = one_source_keyframe("x".repeat(1 << 20));
    let bomb = compress(&cfg, &f);
    assert!(
        bomb.len() < 4096,
        "bomb is small on the wire: {}",
        bomb.len()
    );
    let mut dec = LinkDecoder::new(&cfg).expect("decoder");
    assert!(matches!(
        dec.decode(&bomb),
        Err(CodecError::FrameTooLarge { max }) if max == 64 << 10
    ));
}

#[test]
fn frame_larger_than_its_header_says_is_rejected() {
    let cfg = CodecConfig {
        max_frame_bytes: 64 << 10,
        ..CodecConfig::default()
    };
    let f = one_source_keyframe("x".repeat(1 << 20));
    let honest = compress(&cfg, &f);
    // Rewrite the length header to claim 10 bytes: the cap still holds.
    let (_, used) = encoder::get_uvarint(&honest).expect("header");
    let mut liar = vec![10u8 << 2];
    liar.extend_from_slice(&honest[used..]);
    let mut dec = LinkDecoder::new(&cfg).expect("decoder");
    assert!(matches!(
        dec.decode(&liar),
        Err(CodecError::FrameTooLarge { .. })
    ));
}

#[test]
fn oversized_labels_and_bad_encodings_are_rejected() {
    use crate::schema::frame as pb;
    let cfg = CodecConfig::default();
    let src = pb::SourceDef {
        id: 0,
        name: "n".into(),
        tick_ms: 1000,
    };
    for def in [
        pb::SeriesDef {
            id: 1,
            encoding: 0,
            ..Default::default()
        },
        pb::SeriesDef {
            id: 1,
            encoding: 1,
            mantissa_bits: 60,
            ..Default::default()
        },
        pb::SeriesDef {
            id: 1,
            encoding: 3,
            scale: 0,
            ..Default::default()
        },
        pb::SeriesDef {
            id: 1,
            encoding: 2,
            labels: vec![pb::Label {
                name: "a".into(),
                value: "v".repeat(10_000),
            }],
            ..Default::default()
        },
    ] {
        let f = pb::Frame {
            keyframe: true,
            sources: vec![src.clone()],
            series: vec![def],
            ..Default::default()
        };
        let mut dec = LinkDecoder::new(&cfg).expect("decoder");
        assert!(matches!(
            dec.decode(&compress(&cfg, &f)),
            Err(CodecError::BadDefinition { .. })
        ));
    }
}

/// A valid keyframe, then a delta frame whose packed bytes are `packed`.
fn hostile_packed(packed: Vec<u8>) -> Result<RxFrame, CodecError> {
    use crate::schema::frame as pb;
    let key = pb::Frame {
        series: (0..5)
            .map(|id| pb::SeriesDef {
                id,
                labels: vec![pb::Label {
                    name: "__name__".into(),
                    value: format!("m{id}"),
                }],
                encoding: if id % 2 == 0 { 1 } else { 2 },
                mantissa_bits: 9,
                ..Default::default()
            })
            .collect(),
        sections: vec![pb::Section {
            id_deltas: vec![0; 5],
            value_deltas: vec![1, 2, 3, 4, 5],
            ..Default::default()
        }],
        ..one_source_keyframe("n")
    };
    let delta = pb::Frame {
        seq: 1,
        sections: vec![pb::Section {
            packed,
            ..Default::default()
        }],
        ..Default::default()
    };
    decode_key_then_delta(key, delta)
}

#[test]
fn packed_bytes_with_trailing_garbage_are_rejected() {
    // Five flags and values use a few bytes at most: 64 bytes cannot all be read.
    assert!(matches!(
        hostile_packed(vec![0x55; 64]),
        Err(CodecError::Malformed(_))
    ));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    /// Garbage never panics the decoder.
    #[test]
    fn garbage_is_an_error_not_a_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let mut dec = LinkDecoder::new(&CodecConfig::default()).expect("decoder");
        let _ = dec.decode(&bytes);
    }

    /// Truncating any frame yields an error (or a shorter valid prefix), never a panic.
    #[test]
    fn truncated_frames_are_rejected(cut in 0usize..200) {
        let cfg = CodecConfig::default();
        let frames = encode_n(&cfg, 1);
        let f = &frames[0];
        let cut = cut.min(f.len().saturating_sub(1));
        let mut dec = LinkDecoder::new(&cfg).expect("decoder");
        prop_assert!(dec.decode(&f[..cut]).is_err());
    }

    /// Arbitrary packed bytes are decoded into an error or some values,
    /// never a panic.
    #[test]
    fn hostile_packed_bytes_do_not_panic(bytes in prop::collection::vec(any::<u8>(), 1..40)) {
        let _ = hostile_packed(bytes);
    }

}

/// Regression (dense id tables): a peer naming a series or source id at
/// or beyond twice the link's cap is refused with a typed error (memory
/// stays bounded), while sparse ids below it decode as any others.
#[test]
fn ids_beyond_the_dense_bound_are_refused() {
    use crate::schema::frame as pb;
    let cfg = CodecConfig {
        max_series: 1000,
        max_sources: 100,
        ..CodecConfig::default()
    };
    let src = |id| pb::SourceDef {
        id,
        name: format!("n{id}"),
        tick_ms: 1000,
    };
    let key = |sources: Vec<pb::SourceDef>, series: Vec<pb::SeriesDef>| pb::Frame {
        keyframe: true,
        sections: series
            .iter()
            .map(|d| pb::Section {
                source: d.source,
                special_ids: vec![d.id],
                special_bits: vec![1.5f64.to_bits()],
                ..Default::default()
            })
            .collect(),
        sources,
        series,
        ..Default::default()
    };
    let decode = |f: &pb::Frame| LinkDecoder::new(&cfg)?.decode(&compress(&cfg, f));
    // Sparse but within bounds: ids 0, 1,999 (series), 199 (source).
    let ok = decode(&key(
        vec![src(0), src(199)],
        vec![counter_def(0, 0), counter_def(1_999, 199)],
    ))
    .expect("sparse ids within the bound");
    assert_eq!(ok.new_series, vec![0, 1_999]);
    assert_eq!(ok.sections.len(), 2);
    for (series, sources, want_id) in [
        (vec![counter_def(2_000, 0)], vec![src(0)], 2_000),
        (vec![counter_def(u32::MAX, 0)], vec![src(0)], u32::MAX),
        (vec![], vec![src(200)], 200),
        (vec![], vec![src(u32::MAX)], u32::MAX),
    ] {
        let r = decode(&key(sources, series));
        assert!(
            matches!(r, Err(CodecError::BadDefinition { id, .. }) if id == want_id),
            "{want_id}: {r:?}"
        );
    }
}

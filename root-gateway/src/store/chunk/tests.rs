use proptest::prelude::*;

use super::*;
use crate::store::bits::bit_len;
use crate::store::codec::{CodecError, Cursor, put_uvarint, put_varint};

fn encode(samples: &[(i64, f64)]) -> Chunk {
    let mut c = Chunk::default();
    for &(t, v) in samples {
        c.push(t, v);
    }
    c
}

/// `samples` pushed as the store pushes them: a new chunk when one is full
/// or a timestamp does not fit.
fn encode_split(samples: &[(i64, f64)]) -> Vec<Chunk> {
    let mut out = vec![Chunk::default()];
    for &(t, v) in samples {
        if out.last().is_some_and(|c| c.is_full() || !c.fits(t)) {
            out.push(Chunk::default());
        }
        if let Some(c) = out.last_mut() {
            c.push(t, v);
        }
    }
    out
}

/// The chunks [`Chunk::read_state`] reads from `cur`.
fn read_back(cur: &mut Cursor<'_>) -> Result<Vec<Chunk>, CodecError> {
    let mut out = Vec::new();
    Chunk::read_state(cur, &mut out).map(|()| out)
}

/// Decodes `c` and checks every timestamp and value bit for bit, also after
/// a snapshot round trip of the chunk's state.
fn assert_round_trip(c: &Chunk, samples: &[(i64, f64)]) {
    let mut state = Vec::new();
    c.write_state(&mut state);
    let mut cur = Cursor::new(&state);
    let back = read_back(&mut cur).expect("read_state");
    assert!(cur.is_empty());
    assert_eq!(back.len(), 1);
    for chunk in [c, &back[0]] {
        let mut out = Vec::new();
        chunk.decode(&mut out);
        let got: Vec<(i64, u64)> = out.iter().map(|s| (s.ts_ms, s.value.to_bits())).collect();
        let want: Vec<(i64, u64)> = samples.iter().map(|&(t, v)| (t, v.to_bits())).collect();
        assert_eq!(got, want);
        assert_eq!(chunk.len(), samples.len());
        if let Some(&(t, v)) = samples.last() {
            assert_eq!(chunk.last_ts(), t);
            assert_eq!(chunk.last_value().to_bits(), v.to_bits());
        }
    }
}

#[test]
fn special_values_round_trip() {
    let vals = [
        1.0,
        1.0,
        2.5,
        -3.0,
        f64::NAN,
        canopy_proto::model::stale_nan(),
        0.0,
        -0.0,
        0.0,
        1e300,
        -1e-300,
        f64::MIN_POSITIVE,
        5e-324,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MAX,
        7.0,
        9_007_199_254_740_993.0,
        -9e15,
        0.001,
        10.523,
        10.524,
        12.5,
    ];
    let samples: Vec<(i64, f64)> = vals
        .iter()
        .enumerate()
        .map(|(i, &v)| (1_000 + i as i64 * 1_000 + (i as i64 % 3), v))
        .collect();
    assert_round_trip(&encode(&samples), &samples);
}

#[test]
fn irregular_and_extreme_timestamps_round_trip() {
    let ts = [
        i64::MIN,
        -5,
        0,
        0,
        1,
        15_000,
        15_001,
        i64::MAX / 2,
        i64::MAX - 1,
        i64::MAX,
    ];
    let samples: Vec<(i64, f64)> = ts.iter().map(|&t| (t, 1.5)).collect();
    // Split where a chunk's span would pass u32::MAX ms.
    let chunks = encode_split(&samples);
    assert_eq!(
        chunks.iter().map(Chunk::len).collect::<Vec<_>>(),
        [1, 6, 1, 2]
    );
    let mut at = 0;
    for c in &chunks {
        assert_round_trip(c, &samples[at..at + c.len()]);
        at += c.len();
    }
}

#[test]
fn regular_series_are_compact() {
    let n = CHUNK_SAMPLES as i64;
    // A counter of whole bytes on a 15 s grid with a steady increase: one
    // leading bit and the Rice code of the increase's few noisy bits.
    let s: Vec<(i64, f64)> = (0..n)
        .map(|i| (i * 15_000, (i * 40_960 + i % 7) as f64))
        .collect();
    let c = encode(&s);
    assert_round_trip(&c, &s);
    assert!(
        c.byte_len() <= 8 + (n as usize - 1) * 10 / 8,
        "{}",
        c.byte_len()
    );
    // CPU seconds rounded to the ms: decimal mantissas.
    let s: Vec<(i64, f64)> = (0..n)
        .map(|i| (i * 15_000 + 3, ((i * 10_517 + i % 13) as f64) / 1e3))
        .collect();
    let c = encode(&s);
    assert_round_trip(&c, &s);
    assert!(
        c.byte_len() <= 8 + (n as usize - 1) * 12 / 8,
        "{}",
        c.byte_len()
    );
    // A flat series: one bit a sample (after the second, which sets the tick).
    let s: Vec<(i64, f64)> = (0..n).map(|i| (i * 1000, 5.0)).collect();
    let c = encode(&s);
    assert_round_trip(&c, &s);
    assert!(
        c.byte_len() <= 8 + 2 + CHUNK_SAMPLES / 8,
        "{}",
        c.byte_len()
    );
}

#[test]
fn window_decoding_stops_after_the_window() {
    let s: Vec<(i64, f64)> = (0..100i64).map(|i| (i * 10, i as f64)).collect();
    let c = encode(&s);
    let mut out = Vec::new();
    assert!(c.decode_window(205, 300, &mut out));
    let ts: Vec<i64> = out.iter().map(|p| p.ts_ms).collect();
    assert_eq!(ts, (21..=31).map(|i| i * 10).collect::<Vec<_>>());
    out.clear();
    assert!(!c.decode_window(950, 5000, &mut out));
    assert_eq!(out.len(), 5);
}

#[test]
fn damaged_state_is_refused_or_decodes_short() {
    let s: Vec<(i64, f64)> = (0..50i64).map(|i| (i * 1000, i as f64 * 0.37)).collect();
    let c = encode(&s);
    let mut state = Vec::new();
    c.write_state(&mut state);
    for cut in 0..state.len() {
        let mut cur = Cursor::new(&state[..cut]);
        assert!(read_back(&mut cur).is_err(), "cut at {cut}");
    }
    // Flipped bits decode to something, never panic.
    for i in 0..state.len() {
        let mut bad = state.clone();
        bad[i] ^= 0x5a;
        for ch in read_back(&mut Cursor::new(&bad)).unwrap_or_default() {
            let mut out = Vec::new();
            ch.decode(&mut out);
            assert!(out.len() <= CHUNK_SAMPLES);
        }
    }
}

fn value() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        (-1_000_000i64..1_000_000).prop_map(|i| i as f64),
        (-1_000_000i64..1_000_000, 0u32..8).prop_map(|(m, e)| m as f64 / 10f64.powi(e as i32)),
        Just(f64::NAN),
        Just(canopy_proto::model::stale_nan()),
        Just(0.0),
        Just(-0.0),
        Just(f64::INFINITY),
        Just(1e308),
        Just(-4.9e-324),
    ]
}

fn step() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(15_000i64),
        14_990i64..15_010,
        0i64..3,
        0i64..10_000_000,
        0i64..i64::MAX / 4,
    ]
}

proptest! {
    #[test]
    fn any_series_round_trips(
        start in any::<i64>(),
        pts in proptest::collection::vec((step(), value(), any::<bool>()), 1..CHUNK_SAMPLES),
    ) {
        let mut t = start / 2;
        let mut samples = Vec::new();
        let mut prev = 0.0;
        for (dt, v, repeat) in pts {
            t = t.saturating_add(dt);
            let v = if repeat { prev } else { v };
            samples.push((t, v));
            prev = v;
        }
        // Steps up to 2^61 ms: chunks split where a span passes u32::MAX.
        let mut at = 0;
        for c in encode_split(&samples) {
            let n = c.len();
            assert_round_trip(&c, &samples[at..at + n]);
            at += n;
        }
        prop_assert_eq!(at, samples.len());
    }

    #[test]
    fn counters_round_trip(
        start in -1_000_000_000i64..1_000_000_000,
        incs in proptest::collection::vec(0u64..1 << 40, 1..CHUNK_SAMPLES),
        scale in 0u32..8,
    ) {
        let mut m: i64 = 0;
        let samples: Vec<(i64, f64)> = incs
            .iter()
            .enumerate()
            .map(|(i, &d)| {
                m = m.saturating_add(d as i64);
                (start + i as i64 * 15_000, m as f64 / 10f64.powi(scale as i32))
            })
            .collect();
        assert_round_trip(&encode(&samples), &samples);
    }

    #[test]
    fn garbage_state_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        for c in read_back(&mut Cursor::new(&bytes)).unwrap_or_default() {
            let mut out = Vec::new();
            c.decode(&mut out);
            prop_assert!(out.len() <= CHUNK_SAMPLES);
        }
    }
}

#[test]
fn estimate_is_close_and_bounded() {
    let n = CHUNK_SAMPLES as i64;
    let s: Vec<(i64, f64)> = (0..n).map(|i| (i * 1000, i as f64)).collect();
    let c = encode(&s);
    let e = c.estimate(30_000, 89_000);
    assert!((60..=62).contains(&e), "{e}");
    assert_eq!(c.estimate(n * 1000 + 500_000, n * 1000 + 600_000), 1);
    assert_eq!(c.estimate(i64::MIN, i64::MAX), CHUNK_SAMPLES);
    assert_eq!(Chunk::default().estimate(0, 10), 0);
}

#[test]
fn sums_of_rounded_increments_stay_decimal() {
    // A CPU-seconds counter summed from increments rounded to the ms: the
    // sums drift a few ulps off their decimals, which a short residual
    // covers instead of a 40-bit XOR.
    let mut v = 0.0f64;
    let mut drifted = 0;
    let n = CHUNK_SAMPLES as i64;
    let s: Vec<(i64, f64)> = (0..n)
        .map(|i| {
            v += ((i * 7919) % 3000 + 9000) as f64 / 1e3;
            if approx(v, 3).is_some_and(|m| value_of(m, 3).to_bits() != v.to_bits()) {
                drifted += 1;
            }
            (i * 15_000, v)
        })
        .collect();
    assert!(drifted > 10, "the test needs drifted values: {drifted}");
    let c = encode(&s);
    assert_round_trip(&c, &s);
    // The float-sum form: a leading bit and ~12 bits of Rice code, no
    // residual (it took ~36 bits with a decimal delta and a residual).
    assert!(
        c.byte_len() <= 8 + (n as usize - 1) * 16 / 8,
        "{}",
        c.byte_len()
    );
}

proptest! {
    #[test]
    fn drifting_sums_round_trip(
        incs in proptest::collection::vec((0i64..100_000, 0u32..8), 1..CHUNK_SAMPLES),
    ) {
        let mut v = 0.0f64;
        let samples: Vec<(i64, f64)> = incs
            .iter()
            .enumerate()
            .map(|(i, &(d, e))| {
                v += d as f64 / 10f64.powi(e as i32);
                (i as i64 * 1000, v)
            })
            .collect();
        assert_round_trip(&encode(&samples), &samples);
    }
}

#[test]
fn decimal_values_after_noise_are_found_again() {
    // 40 noisy floats make the encoder back off its exponent search; the
    // rounded gauge after them must still round trip and soon go decimal.
    let n = CHUNK_SAMPLES as i64;
    let s: Vec<(i64, f64)> = (0..n)
        .map(|i| {
            let v = if i < 40 {
                (i as f64 + 0.5).sqrt()
            } else {
                0.5 + (i * 37 % 400) as f64 / 100.0
            };
            (i * 1000, v)
        })
        .collect();
    let c = encode(&s);
    assert_round_trip(&c, &s);
    // Noise at <= 4 + 64 bits, then the gauge at the decimal cost (1 + 2 +
    // 5 + 10 + 1 bits) after at most MAX_SKIP more XOR values.
    let bound =
        8 + (39 + MAX_SKIP as usize) * 69 / 8 + (n as usize - 40 - MAX_SKIP as usize) * 19 / 8;
    assert!(c.byte_len() <= bound, "{} > {bound}", c.byte_len());
    // The search state is the encoder's alone: a chunk read back from its
    // state encodes the next value the same way on both.
    let c = encode(&s[..n as usize - 1]);
    let mut state = Vec::new();
    c.write_state(&mut state);
    let mut back = read_back(&mut Cursor::new(&state))
        .expect("read_state")
        .pop()
        .expect("a chunk");
    back.push((n - 1) * 1000, 1.25);
    let mut out = Vec::new();
    back.decode(&mut out);
    assert_eq!(
        out.last().map(|p| (p.ts_ms, p.value)),
        Some(((n - 1) * 1000, 1.25))
    );
}

/// Every sample of `c` through the general decoder alone (no one-word
/// fast path), as `decode_window` decoded before the fast path existed.
fn decode_general(c: &Chunk) -> Vec<(i64, u64)> {
    let mut out = Vec::new();
    if c.count == 0 {
        return out;
    }
    let mut r = Reader::new(&c.bytes, u32::from(c.bit_len));
    let Some(first) = r.read(64) else {
        return out;
    };
    let mut st = State::first(c.first_ts, first);
    out.push((st.ts, st.bits));
    for _ in 1..c.count {
        if next(&mut r, &mut st).is_none() {
            break;
        }
        out.push((st.ts, st.bits));
    }
    out
}

fn decode_bits(c: &Chunk) -> Vec<(i64, u64)> {
    let mut out = Vec::new();
    c.decode(&mut out);
    out.iter().map(|s| (s.ts_ms, s.value.to_bits())).collect()
}

/// Checks `c.decode_window(from, to)` against `all` (the general
/// decoder's samples): those from `from` on, through the first past `to`,
/// and whether it stopped there.
fn check_window(c: &Chunk, all: &[(i64, u64)], from: i64, to: i64) -> Result<(), TestCaseError> {
    let mut out = Vec::new();
    let stopped = c.decode_window(from, to, &mut out);
    let past = all.iter().position(|p| p.0 > to);
    let want: Vec<_> = all[..past.map_or(all.len(), |i| i + 1)]
        .iter()
        .copied()
        .filter(|p| p.0 >= from)
        .collect();
    let got: Vec<_> = out.iter().map(|s| (s.ts_ms, s.value.to_bits())).collect();
    prop_assert_eq!(got, want, "window {} ..= {}", from, to);
    prop_assert_eq!(stopped, past.is_some());
    Ok(())
}

proptest! {
    /// The fast path gives what the general decoder gives, on counters
    /// with small and large increments, flat stretches, jitter and noise.
    #[test]
    fn fast_path_equals_general_decoder(
        start in -1_000_000_000i64..1_000_000_000,
        pts in proptest::collection::vec(
            (prop_oneof![Just(15_000i64), 14_990i64..15_010], 0u8..5, 0u64..1 << 45, value()),
            1..CHUNK_SAMPLES,
        ),
        scale in 0u32..4,
        window in (0usize..CHUNK_SAMPLES, 0usize..CHUNK_SAMPLES, -20i64..20),
    ) {
        let (mut t, mut m) = (start, 0i64);
        let mut samples = Vec::new();
        for (dt, kind, inc, noise) in pts {
            t = t.saturating_add(dt);
            let v = match kind {
                0 => m as f64 / 10f64.powi(scale as i32),
                1 => noise,
                _ => {
                    m = m.saturating_add((inc >> (kind * 10)) as i64);
                    m as f64 / 10f64.powi(scale as i32)
                }
            };
            samples.push((t, v));
        }
        let c = encode(&samples);
        let all = decode_general(&c);
        prop_assert_eq!(decode_bits(&c), all.clone());
        // A window's decode (the folded runs skip and stop inside it too):
        // the samples from `from` on, through the first past `to`.
        let (a, b, jitter) = window;
        let at = |i: usize| samples[i.min(samples.len() - 1)].0;
        let (from, to) = (at(a) + jitter, at(a.max(b)) - jitter);
        check_window(&c, &all, from, to)?;
    }

    /// Counters on a regular tick (long runs of folded Rice codes, in the
    /// dec form or, with drifting sums, the sum form) with now and then a
    /// jittered tick, a flat step, a noisy value or a jump past the Rice
    /// escape: every window's decode equals the general decoder's samples
    /// from its start through the first past its end.
    #[test]
    fn folded_runs_decode_like_the_general_decoder(
        steps in proptest::collection::vec((0u8..32, 0u64..1 << 20), 2..CHUNK_SAMPLES),
        scale in 0u32..4,
        sums in any::<bool>(),
        windows in proptest::collection::vec((0usize..CHUNK_SAMPLES, 0usize..CHUNK_SAMPLES, -1i64..2), 1..8),
    ) {
        let (mut t, mut m, mut v) = (1_000_000i64, 1i64 << 30, 1000.0f64);
        let p = 10f64.powi(scale as i32);
        let mut samples = Vec::new();
        for (kind, inc) in steps {
            t += match kind {
                0 => 997,
                _ => 1000,
            };
            let value = match kind {
                1 => f64::from_bits(inc.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 2),
                2 => m as f64 / p,
                3 => {
                    m += (inc as i64) << 22;
                    m as f64 / p
                }
                _ if sums => {
                    v += ((inc % 5000) + 1000) as f64 / 1e3;
                    v
                }
                _ => {
                    m += (inc % 4096) as i64 + 100_000;
                    m as f64 / p
                }
            };
            samples.push((t, value));
        }
        let c = encode(&samples);
        let all = decode_general(&c);
        prop_assert_eq!(decode_bits(&c), all.clone());
        for (a, b, jitter) in windows {
            let at = |i: usize| samples[i.min(samples.len() - 1)].0;
            let (from, to) = (at(a) + jitter, at(a.max(b)) + jitter);
            check_window(&c, &all, from, to)?;
        }
    }

    /// Damaged streams too (a counter chunk with bytes overwritten, or cut
    /// short): the same samples up to the same stop.
    #[test]
    fn fast_path_equals_general_decoder_on_damage(
        n in 2usize..CHUNK_SAMPLES,
        hits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        cut in any::<u32>(),
    ) {
        let samples: Vec<(i64, f64)> = (0..n as i64)
            .map(|i| (i * 15_000, (i * i * 4097 + i % 3) as f64))
            .collect();
        let mut c = encode(&samples);
        for (at, b) in hits {
            let i = at % c.bytes.len();
            c.bytes[i] ^= b;
        }
        let bits = u32::from(c.bit_len);
        c.bit_len = u16::try_from(bits.min(cut % (bits + 1) + 32)).unwrap_or(c.bit_len);
        prop_assert_eq!(decode_bits(&c), decode_general(&c));
    }
}

#[test]
fn a_state_wider_than_its_offsets_is_split_on_read() {
    // A day between samples, 100 samples in one chunk, as a release that
    // did not bound a chunk's span wrote it: read back as chunks of at
    // most u32::MAX ms (50 samples each), every sample bit for bit.
    let samples: Vec<(i64, f64)> = (0..100i64)
        .map(|i| (-3_000_000_000 + i * 86_400_000, (i * i) as f64 * 0.25))
        .collect();
    let mut enc = Enc {
        st: State::default(),
        skip: 0,
        backoff: 0,
        count: 0,
        first_ts: 0,
    };
    let mut w = Writer::new(Vec::new(), 0);
    for &(t, v) in &samples {
        enc.push_to(&mut w, t, v);
    }
    let (bytes, bit_len) = w.finish();
    let st = enc.st;
    let mut state = Vec::new();
    put_uvarint(&mut state, u64::from(enc.count));
    put_varint(&mut state, enc.first_ts);
    put_varint(&mut state, st.ts);
    put_varint(&mut state, st.delta);
    state.extend_from_slice(&st.bits.to_le_bytes());
    put_varint(&mut state, st.mant);
    put_varint(&mut state, st.pred);
    state.extend_from_slice(&st.mag.to_le_bytes());
    state.extend_from_slice(&[st.exp, st.lead, st.sig, st.last, st.reg]);
    put_uvarint(&mut state, u64::from(bit_len));
    state.extend_from_slice(&bytes);
    let chunks = read_back(&mut Cursor::new(&state)).expect("read_state");
    assert_eq!(chunks.iter().map(Chunk::len).collect::<Vec<_>>(), [50, 50]);
    let mut out = Vec::new();
    for c in &chunks {
        c.decode(&mut out);
    }
    let got: Vec<(i64, u64)> = out.iter().map(|s| (s.ts_ms, s.value.to_bits())).collect();
    let want: Vec<(i64, u64)> = samples.iter().map(|&(t, v)| (t, v.to_bits())).collect();
    assert_eq!(got, want);
    // A stream shorter than its state's count is refused.
    let mut short = state.clone();
    short[0] = 120;
    assert!(read_back(&mut Cursor::new(&short)).is_err());
}

#[test]
fn chunk_header_stays_small() {
    // The open chunk lives in its series' entry: every byte is paid once
    // a series (80 before its timestamps became 32-bit offsets).
    assert!(
        std::mem::size_of::<Chunk>() <= 72,
        "{}",
        std::mem::size_of::<Chunk>()
    );
}

#[test]
fn counters_cost_about_their_noise() {
    // A byte counter growing ~2^27 a step with uniform noise of ±2^24:
    // about the noise's 25 bits a sample plus ~2 bits of codes, where a
    // delta of the whole increase took ~39.
    let mut v = 1u64 << 40;
    let n = CHUNK_SAMPLES as i64;
    let s: Vec<(i64, f64)> = (0..n)
        .map(|i| {
            let noise = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 39;
            v += (1 << 27) + noise;
            (i * 15_000, v as f64)
        })
        .collect();
    let c = encode(&s);
    assert_round_trip(&c, &s);
    assert!(
        c.byte_len() <= 8 + 8 + (n as usize - 1) * 28 / 8,
        "{}",
        c.byte_len()
    );
}

#[test]
fn rice_parameter_is_the_mean_bit_length_less_one() {
    for (mean, k) in [
        (0.0f32, 0),
        (0.5, 0),
        (1.0, 0),
        (3.9, 1),
        (4.0, 2),
        (1e9, 29),
        (1.8e19, 63),
        (f32::INFINITY, 63),
        (-5.0, 2),
    ] {
        let st = State {
            mag: mean.to_bits(),
            ..State::default()
        };
        assert_eq!(st.k(), k, "mean {mean}");
        if mean.is_finite() && (1.0..1e19).contains(&mean) {
            assert_eq!(st.k(), bit_len(mean as u64) - 1, "mean {mean}");
        }
    }
    // The running mean follows the coded values: spread evenly below
    // 2^20, k settles at 19 (or 18).
    let mut st = State::default();
    for i in 0..64u64 {
        st.adapt(0, i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 44);
    }
    assert!((18..=19).contains(&st.k()), "{}", st.k());
}

/// One series' value at step `i` of kind `kind` (see
/// `regular_path_equals_general`): flat, a counter, decimals, a float sum,
/// noisy floats, NaN and staleness markers, mixed.
fn series_value(kind: u8, i: u64, r: u64, prev: f64, scale: u32) -> f64 {
    let p = 10f64.powi(scale as i32);
    match kind {
        // Flat with rare changes.
        0 => {
            if r.is_multiple_of(17) {
                (r % 1000) as f64 / p
            } else {
                prev
            }
        }
        // A counter whose increase repeats, with noise of a few units.
        1 => (i * 4096 + r % 9) as f64 / p,
        // A counter with large, random increases.
        2 => ((prev * p).round() + (r >> (r % 60)) as f64) / p,
        // A float sum of rounded increments (drifts off its decimals).
        3 => prev + (r % 3000 + 9000) as f64 / 1e3,
        // Noisy floats.
        4 => f64::from_bits(r) % 1e6,
        // NaN, staleness markers, -0.0 and repeats.
        5 => match r % 6 {
            0 => f64::NAN,
            1 => canopy_proto::model::stale_nan(),
            2 => -0.0,
            3 => (r % 100) as f64,
            _ => prev,
        },
        // Everything mixed.
        _ => series_value((r % 6) as u8, i, r >> 3, prev, scale),
    }
}

proptest! {
    /// `approx` (integer rounding below 2^52) is `f64::round` for every
    /// value and exponent, halves included.
    #[test]
    fn approx_rounds_as_f64_round(
        v in prop_oneof![
            any::<f64>(),
            (-(1i64 << 53)..1 << 53, 0u32..8).prop_map(|(m, e)| m as f64 / 10f64.powi(e as i32)),
            (-(1i64 << 53)..1 << 53).prop_map(|m| m as f64 + 0.5),
            (-1_000_000_000i64..1_000_000_000).prop_map(|m| m as f64 + 0.5),
            (-1_000_000_000i64..1_000_000_000).prop_map(|m| (m as f64 + 0.5) / 1e3),
        ],
        e in 0u8..=MAX_EXP,
    ) {
        prop_assert_eq!(approx(v, e), codes::approx_rounded(v * POW10[usize::from(e)]));
    }

    /// The regular path of `Chunk::push` writes the bytes, room and state
    /// that the general path alone (the push before it) writes, after every
    /// sample: regular and jittered ticks, flat series, counters, decimals,
    /// float sums, noisy floats, NaN and staleness markers, in the v5
    /// (folded) and v4 encodings, across chunk boundaries.
    #[test]
    fn regular_path_equals_general(
        start in -1_000_000_000i64..1_000_000_000,
        tick in prop_oneof![Just(15_000i64), Just(1_000i64), 1i64..100_000],
        kind in 0u8..7,
        scale in 0u32..8,
        v4 in any::<bool>(),
        pts in proptest::collection::vec((0u8..10, any::<u64>()), 1..2 * CHUNK_SAMPLES),
    ) {
        WRITE_V4.with(|w| w.set(v4));
        let (mut fast, mut slow) = (vec![Chunk::default()], vec![Chunk::default()]);
        let (mut t, mut v) = (start, 0.0f64);
        for (i, (jitter, r)) in pts.into_iter().enumerate() {
            // Mostly regular ticks, some jittered or late.
            t += match jitter {
                0 => tick + (r % 21) as i64 - 10,
                1 => tick * 3,
                _ => tick,
            };
            v = series_value(kind, i as u64, r, v, scale);
            for chunks in [&mut fast, &mut slow] {
                if chunks.last().is_some_and(|c| c.is_full() || !c.fits(t)) {
                    chunks.push(Chunk::default());
                }
            }
            if let (Some(f), Some(s)) = (fast.last_mut(), slow.last_mut()) {
                f.push(t, v);
                s.push_reference(t, v);
                prop_assert_eq!(format!("{f:?}"), format!("{s:?}"), "sample {}", i);
            }
        }
        WRITE_V4.with(|w| w.set(false));
        prop_assert_eq!(fast.len(), slow.len());
    }
}

/// A byte counter with noisy steps of ~2^22 to 2^25 from ~2^43: after its
/// first few samples a chunk codes every one in the decimal form (a Rice
/// code), not XOR, whose window such steps made as cheap for one sample,
/// so whole chunks stayed in it (the slow decoder's path), ~20 % of them,
/// before an integral value switched when its delta is no wider than the
/// window.
#[test]
fn integral_counters_with_large_steps_go_decimal() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut u = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut forms = [0usize; 8];
    for s in 0..50 {
        let scale = 2e7 * (0.2 + 1.6 * u());
        let mut v = (2e7 * (3600.0 + 860_000.0 * u())).round();
        let phase = u() * std::f64::consts::TAU;
        let samples: Vec<(i64, f64)> = (0..CHUNK_SAMPLES as i64)
            .map(|k| {
                let swing = 0.6 + 0.4 * (phase + (k + s * 120) as f64 / 600.0).sin();
                v += (scale * swing * (0.7 + 0.6 * u())).round();
                (k * 1000, v)
            })
            .collect();
        let c = encode(&samples);
        assert_round_trip(&c, &samples);
        let mut r = Reader::new(&c.bytes, u32::from(c.bit_len));
        let first = r.read(64).expect("first value");
        let mut st = State::first(c.first_ts, first);
        for i in 1..c.count {
            view::next(&mut r, &mut st).expect("a sample");
            forms[usize::from(st.last)] += 1;
            // The first steps may still take XOR, when its window happens
            // to be narrower than the delta (a search then waits a few
            // samples); none after them.
            assert!(st.last != XOR || i <= 8, "chunk {s}: XOR at sample {i}");
        }
    }
    assert!(forms[usize::from(XOR)] <= 50, "{forms:?}");
    assert_eq!(
        forms[usize::from(DEC)] + forms[usize::from(XOR)],
        50 * (CHUNK_SAMPLES - 1),
        "{forms:?}"
    );
}

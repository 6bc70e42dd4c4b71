use super::*;
use proptest::prelude::*;

proptest! {
    /// The one-sided floor in `update` is the two-sided clamp it
    /// replaced, for any run of bits (long runs reach the floors), and the
    /// packed word keeps the probability and the shift as two plain
    /// fields would (a settled step never reaches the shift's bits).
    #[test]
    fn update_matches_the_two_sided_clamp(runs in prop::collection::vec((any::<bool>(), 1usize..40), 0..60)) {
        let mut p = Prob::default();
        let (mut q, mut shift) = (p.p(), (p.v >> P_FIELD) as u8);
        for (b, n) in runs {
            for _ in 0..n {
                p.update(b);
                let s = u32::from(shift);
                if b { q -= q >> s } else { q += (PROB_ONE - q) >> s }
                q = q.clamp(PROB_FLOOR, PROB_ONE - PROB_FLOOR);
                shift = (shift + 1).min(ADAPT_MAX);
                prop_assert_eq!((p.p(), (p.v >> P_FIELD) as u8), (q, shift));
            }
        }
    }

    /// The bytes pushed at once with the carry added back into them are
    /// LZMA's (a pending byte and a count of 0xFF bytes waiting for the
    /// carry, the leading byte unsent, the last one held back), for any
    /// run of `low` values, runs of 0xFF bytes and carries through them
    /// included.
    #[test]
    fn byte_output_matches_lzmas(steps in prop::collection::vec((0u8..4, any::<u32>(), any::<u32>()), 1..400)) {
        // The reference: LZMA's scheme as format 3 and 4 were written.
        let (mut cache, mut cache_size, mut first, mut want) = (0u8, 1u64, true, Vec::new());
        let mut lzma = |low: u64| {
            if (low as u32) < 0xFF00_0000 || (low >> 32) != 0 {
                let carry = (low >> 32) as u8;
                if first {
                    first = false;
                } else {
                    want.push(cache.wrapping_add(carry));
                }
                for _ in 1..cache_size {
                    want.push(0xFFu8.wrapping_add(carry));
                }
                cache_size = 0;
                cache = (low >> 24) as u8;
            }
            cache_size += 1;
            (low & 0x00FF_FFFF) << 8
        };
        // A coder: each step keeps a sub-interval [low + a, low + a + b)
        // of [low, low + range), often its top end (runs of 0xFF bytes
        // and carries through them), and renormalises as the coder does.
        let mut b = ByteOut::default();
        let (mut low, mut range): (u64, u32) = (0, u32::MAX);
        for (kind, x, y) in steps {
            let r = u64::from(range);
            let (a, len) = match kind {
                0 => {
                    let a = (r * u64::from(x)) >> 32;
                    (a, (((r - a) * u64::from(y)) >> 32).max(1))
                }
                1 | 2 => {
                    // The top end: what a run of likely `1` bits keeps.
                    let len = ((r * u64::from(y | 0x8000_0000)) >> 32).max(1);
                    (r - len, len)
                }
                _ => (0, ((r * u64::from(y)) >> 32).max(1)),
            };
            low += a;
            range = len as u32;
            while range < TOP {
                range <<= 8;
                let next = lzma(low);
                prop_assert_eq!(b.shift_low(low), next);
                low = next;
            }
        }
        // The end: what LZMA flushes with a zero low (pending bytes out).
        for _ in 0..5 {
            let next = lzma(low);
            prop_assert_eq!(b.shift_low(low), next);
            low = next;
        }
        b.out.pop();
        prop_assert_eq!(b.out, want);
    }

    #[test]
    fn bits_round_trip(ops in prop::collection::vec((any::<bool>(), 0usize..4, any::<u64>(), 0u32..=64), 0..400)) {
        let mut probs = [Prob::default(); 4];
        let mut e = RangeEncoder::new(Vec::new());
        for &(b, ctx, v, n) in &ops {
            e.bit(&mut probs[ctx], b);
            e.direct(v, n);
        }
        let bytes = e.finish();
        let mut probs = [Prob::default(); 4];
        let mut d = RangeDecoder::new(&bytes);
        for &(b, ctx, v, n) in &ops {
            prop_assert_eq!(d.bit(&mut probs[ctx]), b);
            let mask = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
            prop_assert_eq!(d.direct(n), v & mask);
        }
        prop_assert!(d.finish().is_ok());
    }

    /// Multi-symbol steps, binary decisions and raw bits interleaved
    /// round-trip, and the stream is consumed exactly.
    #[test]
    fn symbols_round_trip(ops in prop::collection::vec((0usize..16, 0usize..64, any::<bool>(), any::<u64>(), 0u32..=64), 0..400)) {
        let (mut f16, mut f64s, mut p) = (Freqs::<16>::default(), Freqs::<64>::default(), Prob::default());
        let mut e = RangeEncoder::new(Vec::new());
        for &(a, b, bit, v, n) in &ops {
            e.symbol(&mut f16, a);
            e.bit(&mut p, bit);
            e.symbol(&mut f64s, b);
            e.direct(v, n);
        }
        let bytes = e.finish();
        let (mut g16, mut g64, mut q) = (Freqs::<16>::default(), Freqs::<64>::default(), Prob::default());
        let mut d = RangeDecoder::new(&bytes);
        for &(a, b, bit, v, n) in &ops {
            prop_assert_eq!(d.symbol(&mut g16), a);
            prop_assert_eq!(d.bit(&mut q), bit);
            prop_assert_eq!(d.symbol(&mut g64), b);
            let mask = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
            prop_assert_eq!(d.direct(n), v & mask);
        }
        prop_assert!(d.finish().is_ok());
        prop_assert_eq!(f16, g16);
        prop_assert_eq!(f64s, g64);
    }

    /// The batched model against a plain reference: after any symbols,
    /// its counts are the reference's (increment, halve past the limit),
    /// its frequencies partition the total with every symbol codable,
    /// and the binary search finds what a linear scan finds.
    #[test]
    fn freqs_match_a_plain_reference(syms in prop::collection::vec(0usize..16, 0..2000), probe in 0u32..FREQ_TOTAL) {
        let mut f = Freqs::<16>::default();
        let mut counts = [1u32; 16];
        for &s in &syms {
            f.update(s);
            counts[s] += u32::from(FREQ_INC);
            if counts.iter().sum::<u32>() > FREQ_LIMIT {
                for c in &mut counts { *c = (*c / 2).max(1); }
            }
            prop_assert_eq!(f.counts.map(u32::from), counts);
            prop_assert_eq!(f.sum, counts.iter().sum::<u32>());
            let mut prev = 0;
            for k in 0..16 {
                prop_assert!(u32::from(f.ends[k]) > prev, "symbol {} has no room", k);
                prev = u32::from(f.ends[k]);
            }
            prop_assert_eq!(prev, FREQ_TOTAL);
        }
        f.refresh();
        // Each symbol's share is its count's, to within one unit.
        let sum: u32 = counts.iter().sum();
        for (k, &c) in counts.iter().enumerate().take(15) {
            let got = u32::from(f.ends[k]) - f.lo(k);
            let want = 1 + u64::from(c) * u64::from(FREQ_TOTAL - 16) / u64::from(sum);
            prop_assert!(u64::from(got) == want || u64::from(got) + 1 == want, "{} vs {}", got, want);
        }
        let linear = (0..16).find(|&k| u32::from(f.ends[k]) > probe).unwrap_or(15);
        prop_assert_eq!(f.find(probe), linear);
    }

    /// Hostile or truncated bytes through the multi-symbol path give
    /// symbols in range and an error or a clean end, never a panic.
    #[test]
    fn garbage_symbols_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64), n in 0usize..2000) {
        let (mut f, mut g, mut p) = (Freqs::<16>::default(), Freqs::<64>::default(), Prob::default());
        let mut d = RangeDecoder::new(&bytes);
        for i in 0..n {
            match i % 4 {
                0 => prop_assert!(d.symbol(&mut f) < 16),
                1 => prop_assert!(d.symbol(&mut g) < 64),
                2 => { d.direct(23); }
                _ => { d.bit(&mut p); }
            }
        }
        let _ = d.finish();
    }

    /// A stream cut by more than the padding the reader may invent
    /// never decodes cleanly: what it reads differs, or `finish`
    /// reports the overrun; never a panic.
    #[test]
    fn truncated_symbols_are_caught(syms in prop::collection::vec(0usize..16, 1..300), cut in 1usize..64) {
        let mut f = Freqs::<16>::default();
        let mut e = RangeEncoder::new(Vec::new());
        for &s in &syms {
            e.symbol(&mut f, s);
            e.direct(s as u64 * 977, 13);
        }
        let bytes = e.finish();
        let keep = bytes.len().saturating_sub(cut);
        let mut g = Freqs::<16>::default();
        let mut d = RangeDecoder::new(&bytes[..keep]);
        let mut same = true;
        for &s in &syms {
            same &= d.symbol(&mut g) == s;
            same &= d.direct(13) == (s as u64 * 977) & 0x1fff;
        }
        if keep + MAX_PAD < bytes.len() {
            prop_assert!(!same || d.finish().is_err(), "a long cut cannot decode cleanly");
        }
    }

    #[test]
    fn garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..64), n in 0usize..2000) {
        let mut p = Prob::default();
        let mut d = RangeDecoder::new(&bytes);
        for i in 0..n {
            if i % 3 == 0 { d.direct(17); } else { d.bit(&mut p); }
        }
        let _ = d.finish();
    }
}

#[test]
fn skewed_bits_cost_little_and_trailing_bytes_are_caught() {
    let mut p = Prob::default();
    let mut e = RangeEncoder::new(Vec::new());
    for _ in 0..1000 {
        e.bit(&mut p, false);
    }
    let bytes = e.finish();
    assert!(bytes.len() < 12, "{}", bytes.len());
    let mut extra = bytes.clone();
    extra.extend_from_slice(&[0; MAX_PAD + 1]);
    let mut p = Prob::default();
    let mut d = RangeDecoder::new(&extra);
    for _ in 0..1000 {
        d.bit(&mut p);
    }
    assert!(d.finish().is_err());
}

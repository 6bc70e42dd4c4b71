//! A binary adaptive range coder (the LZMA design) with a short tail.
//!
//! Delta frames are ~100 values of 0..14 bits each: far too small for zstd's
//! entropy stage to pay for its tables, and LEB128 spends 8 or 16 bits on
//! each. A binary range coder with adaptive probabilities spends close to
//! the information content of every decision instead, and its statistics
//! persist across frames of a link (both ends update them identically).
//!
//! Layout: big-endian bytes of the code value, LZMA's always-zero first byte
//! dropped, and the tail trimmed to the fewest bytes that still decode when
//! the reader pads with zero bytes. The reader pads at most [`MAX_PAD`]
//! bytes; reading further, or leaving bytes unread, is an error (a hostile
//! or truncated stream is reported, never silently accepted).
//!
//! ```text
//! probability p (11 bits) of a 0:  bound = (range >> 11) * p
//!   0 -> range = bound           1 -> low += bound, range -= bound
//! ```

/// Probability scale: probabilities are `1..PROB_ONE` out of `PROB_ONE`.
const PROB_BITS: u32 = 11;
const PROB_ONE: u16 = 1 << PROB_BITS;
/// Adaptation speed: a young probability moves 2^-ADAPT_MIN of the way per
/// decision, a settled one 2^-ADAPT_MAX.
const ADAPT_MIN: u8 = 1;
const ADAPT_MAX: u8 = 4;
/// Smallest probability of either bit value, out of `PROB_ONE`.
const PROB_FLOOR: u16 = 15;
/// Renormalise when the range falls below this.
const TOP: u32 = 1 << 24;
/// Zero bytes the reader may invent past the end (the trimmed tail).
pub const MAX_PAD: usize = 4;

/// One adaptive binary probability (of a 0 bit), with a count of the
/// decisions it has seen: it adapts fast while young (a step of 1/2, 1/4,
/// ...) and settles at a step of `2^-ADAPT_MAX`, so rarely used contexts
/// learn quickly and busy ones estimate precisely.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prob {
    p: u16,
    shift: u8,
}

impl Default for Prob {
    fn default() -> Self {
        Prob {
            p: PROB_ONE / 2,
            shift: ADAPT_MIN,
        }
    }
}

impl Prob {
    /// Adapts the probability to `bit` (decoder side; the encoder's
    /// [`RangeEncoder::bit`] folds the same steps into its own branch).
    #[inline]
    fn update(&mut self, bit: bool) {
        if self.shift == ADAPT_MAX {
            self.settled(bit);
        } else {
            self.young(bit);
        }
    }

    /// A settled probability's step (`shift == ADAPT_MAX`, nearly every
    /// decision): at a step of 1/16 neither floor can be crossed (from
    /// `p >= PROB_FLOOR`, `p - p / 16 >= PROB_FLOOR`; from `p <= PROB_ONE -
    /// PROB_FLOOR`, `p + (PROB_ONE - p) / 16` stays there too), so there is
    /// no clamp and no count to move.
    #[inline(always)]
    fn settled(&mut self, bit: bool) {
        if bit {
            self.p -= self.p >> ADAPT_MAX;
        } else {
            self.p += (PROB_ONE - self.p) >> ADAPT_MAX;
        }
    }

    /// A young probability's step: larger, clamped to the floors.
    #[inline(never)]
    fn young(&mut self, bit: bool) {
        let s = u32::from(self.shift);
        // Keep p inside 1..PROB_ONE: a certain bit must stay codable. p
        // starts and stays within the floors, and each step moves it one
        // way, so only the bound it moves towards can be crossed.
        if bit {
            self.p -= self.p >> s;
            self.p = self.p.max(PROB_FLOOR);
        } else {
            self.p += (PROB_ONE - self.p) >> s;
            self.p = self.p.min(PROB_ONE - PROB_FLOOR);
        }
        self.shift += 1;
    }
}

/// The byte side of the encoder: LZMA's carry propagation (a run of 0xFF
/// bytes waits in `cache_size` until a carry is known). Apart from `low`
/// and `range`, so the coding loops keep those two in registers and only
/// the byte output goes through memory.
#[derive(Debug, Default)]
struct ByteOut {
    cache: u8,
    cache_size: u64,
    first: bool,
    out: Vec<u8>,
}

impl ByteOut {
    /// Moves the top byte of `low` out; returns the new `low`.
    #[inline]
    fn shift_low(&mut self, low: u64) -> u64 {
        if (low as u32) < 0xFF00_0000 || (low >> 32) != 0 {
            let carry = (low >> 32) as u8;
            if self.first {
                // LZMA's first byte is the integer part of a code in
                // [0, 1): always zero, so it is not sent.
                self.first = false;
            } else {
                self.out.push(self.cache.wrapping_add(carry));
            }
            for _ in 1..self.cache_size {
                self.out.push(0xFFu8.wrapping_add(carry));
            }
            self.cache_size = 0;
            self.cache = (low >> 24) as u8;
        }
        self.cache_size += 1;
        (low & 0x00FF_FFFF) << 8
    }
}

/// Codes one adaptive decision on the coder state `(low, range)`.
/// Renormalises with one byte, which always suffices: a decision leaves
/// at least `(TOP >> PROB_BITS) * PROB_FLOOR` (over 2^16) of a range that
/// was at least `TOP`.
#[inline(always)]
fn code_bit(low: &mut u64, range: &mut u32, bytes: &mut ByteOut, p: &mut Prob, bit: bool) {
    let bound = (*range >> PROB_BITS) * u32::from(p.p);
    if bit {
        *low += u64::from(bound);
        *range -= bound;
    } else {
        *range = bound;
    }
    if p.shift == ADAPT_MAX {
        p.settled(bit);
    } else {
        p.young(bit);
    }
    if *range < TOP {
        *range <<= 8;
        *low = bytes.shift_low(*low);
    }
}

/// Bits [`RangeEncoder::direct`] codes per table step.
const DIRECT_CHUNK: u32 = 4;
const DIRECT_MASK: u32 = (1 << DIRECT_CHUNK) - 1;
/// `DIRECT_REM[b][l]`: what coding the four bits of `b` (most significant
/// first) at probability 1/2 adds to `low` from the low four bits `l` of
/// the range: the sum over the set bits i (1..=4 from the top) of
/// `l >> i` (below 16, so a byte).
const DIRECT_REM: [[u8; 16]; 16] = {
    let mut t = [[0u8; 16]; 16];
    let mut b = 0;
    while b < 16 {
        let mut l = 0;
        while l < 16 {
            let mut sum = 0;
            let mut i = 1;
            while i <= 4 {
                if (b >> (4 - i)) & 1 == 1 {
                    sum += l >> i;
                }
                i += 1;
            }
            t[b][l] = sum as u8;
            l += 1;
        }
        b += 1;
    }
    t
};

/// Encoding half.
#[derive(Debug, Default)]
pub struct RangeEncoder {
    low: u64,
    range: u32,
    bytes: ByteOut,
}

impl RangeEncoder {
    /// A fresh coder writing into `out` (cleared).
    pub fn new(mut out: Vec<u8>) -> Self {
        out.clear();
        Self {
            low: 0,
            range: u32::MAX,
            bytes: ByteOut {
                cache: 0,
                cache_size: 1,
                first: true,
                out,
            },
        }
    }

    /// Codes `bit` with the adaptive probability `p`, then adapts `p`.
    #[inline(always)]
    pub fn bit(&mut self, p: &mut Prob, bit: bool) {
        let (mut low, mut range) = (self.low, self.range);
        code_bit(&mut low, &mut range, &mut self.bytes, p, bit);
        (self.low, self.range) = (low, range);
    }

    /// Codes the `log2(N)` low bits of `sym` (most significant first) as
    /// a path down the binary tree `probs` (node 1 the root, node `k`'s
    /// children `2k` and `2k + 1`): what `bit` would do level by level,
    /// with the coder state kept in registers. `N` is a power of two.
    #[inline]
    pub fn tree<const N: usize>(&mut self, probs: &mut [Prob; N], sym: u32) {
        const { assert!(N.is_power_of_two() && N <= 128) };
        let levels = N.trailing_zeros();
        let (mut low, mut range) = (self.low, self.range);
        let path = (sym as usize & (N - 1)) | N;
        // Unrolled (at most 7 levels; the test on `levels` is constant).
        // The node above bit i: the bits above it under a leading one,
        // always below N (the modulus only spares a bounds check).
        macro_rules! level {
            ($i:expr) => {
                if $i < levels {
                    code_bit(
                        &mut low,
                        &mut range,
                        &mut self.bytes,
                        &mut probs[(path >> ($i + 1)) % N],
                        (path >> $i) & 1 == 1,
                    );
                }
            };
        }
        level!(6);
        level!(5);
        level!(4);
        level!(3);
        level!(2);
        level!(1);
        level!(0);
        (self.low, self.range) = (low, range);
    }

    /// Codes the low `n` bits of `v` (most significant first) at probability 1/2.
    // Out of line: inlined into its callers it compiled to more
    // instructions a bit (callgrind, tick_cost).
    #[inline(never)]
    pub fn direct(&mut self, v: u64, n: u32) {
        debug_assert!(n <= 64);
        if n == 0 {
            return;
        }
        let (mut low, mut range) = (self.low, self.range);
        // The bits left to code, the next one on top.
        let mut x = v << (64 - n);
        let mut left = n;
        while left > 0 {
            // With the top bit of `range` at t (24..=31), t - 23 halvings
            // bring it below TOP: code that many (or what is left) without
            // a check, then renormalise with one byte (a halving keeps at
            // least 2^23), exactly as bit by bit.
            let t = 31 - range.leading_zeros();
            let mut k = left.min(t - 23);
            left -= k;
            // Four bits at a time: coding bits b1..b4 (b1 first) adds
            // b_i * (range >> i) to `low`; with range = h * 16 + l that is
            // h * B + (the same sum over l), B the four bits as a number.
            // The second term is looked up; the range ends at h.
            while k >= DIRECT_CHUNK {
                let b = (x >> (64 - DIRECT_CHUNK)) as usize;
                let l = (range & DIRECT_MASK) as usize;
                range >>= DIRECT_CHUNK;
                low += u64::from(range) * b as u64 + u64::from(DIRECT_REM[b][l]);
                x <<= DIRECT_CHUNK;
                k -= DIRECT_CHUNK;
            }
            for _ in 0..k {
                range >>= 1;
                // The top bit of `x`, as a mask (its sign).
                low += u64::from(range) & ((x as i64) >> 63) as u64;
                x <<= 1;
            }
            if range < TOP {
                range <<= 8;
                low = self.bytes.shift_low(low);
            }
        }
        (self.low, self.range) = (low, range);
    }

    /// Ends the stream and returns its bytes: the shortest tail that decodes
    /// with zero padding.
    pub fn finish(mut self) -> Vec<u8> {
        // Pick the value in [low, low + range) with the most trailing zero
        // bytes; the reader supplies those zeros itself.
        let mut keep = 4;
        for k in 0..=4u32 {
            let unit: u64 = 1 << (32 - 8 * k);
            let v = (self.low + unit - 1) & !(unit - 1);
            if v - self.low < u64::from(self.range) {
                self.low = v;
                keep = k;
                break;
            }
        }
        for _ in 0..=keep {
            self.low = self.bytes.shift_low(self.low);
        }
        self.bytes.out
    }
}

/// Decoding half. Never panics; running past the end or leaving bytes
/// unread is reported by [`RangeDecoder::finish`].
#[derive(Debug)]
pub struct RangeDecoder<'a> {
    buf: &'a [u8],
    pos: usize,
    range: u32,
    code: u32,
}

impl<'a> RangeDecoder<'a> {
    /// A decoder over `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        let mut d = Self {
            buf,
            pos: 0,
            range: u32::MAX,
            code: 0,
        };
        for _ in 0..4 {
            d.code = (d.code << 8) | u32::from(d.next_byte());
        }
        d
    }

    #[inline]
    fn next_byte(&mut self) -> u8 {
        let b = self.buf.get(self.pos).copied().unwrap_or(0);
        self.pos = self.pos.saturating_add(1);
        b
    }

    #[inline]
    fn normalize(&mut self) {
        while self.range < TOP {
            self.range <<= 8;
            self.code = (self.code << 8) | u32::from(self.next_byte());
        }
    }

    /// True once the reader has invented more padding than any encoder
    /// produces: the rest of what it decodes is garbage.
    pub fn overrun(&self) -> bool {
        self.pos > self.buf.len() + MAX_PAD
    }

    /// Decodes one bit with the adaptive probability `p`, then adapts `p`.
    #[inline]
    pub fn bit(&mut self, p: &mut Prob) -> bool {
        let bound = (self.range >> PROB_BITS) * u32::from(p.p);
        let bit = if self.code < bound {
            self.range = bound;
            false
        } else {
            self.code = self.code.wrapping_sub(bound);
            self.range -= bound;
            true
        };
        p.update(bit);
        self.normalize();
        bit
    }

    /// Decodes `n <= 64` bits coded with [`RangeEncoder::direct`].
    pub fn direct(&mut self, n: u32) -> u64 {
        let mut v: u64 = 0;
        for _ in 0..n.min(64) {
            self.range >>= 1;
            let bit = self.code >= self.range;
            if bit {
                self.code = self.code.wrapping_sub(self.range);
            }
            v = (v << 1) | u64::from(bit);
            self.normalize();
        }
        v
    }

    /// Ok when the stream was consumed exactly (within the trimmed tail).
    pub fn finish(&self) -> Result<(), &'static str> {
        if self.overrun() {
            Err("packed values run past their end")
        } else if self.pos < self.buf.len() {
            Err("trailing bytes after packed values")
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    impl RangeEncoder {
        /// One bit at probability 1/2, the plain way (the reference for
        /// `direct`).
        fn direct_bit(&mut self, bit: bool) {
            self.range >>= 1;
            if bit {
                self.low += u64::from(self.range);
            }
            if self.range < TOP {
                self.range <<= 8;
                self.low = self.bytes.shift_low(self.low);
            }
        }
    }

    proptest! {
        /// The one-sided floor in `update` is the two-sided clamp it
        /// replaced, for any run of bits (long runs reach the floors).
        #[test]
        fn update_matches_the_two_sided_clamp(runs in prop::collection::vec((any::<bool>(), 1usize..40), 0..60)) {
            let mut p = Prob::default();
            let (mut q, mut shift) = (p.p, p.shift);
            for (b, n) in runs {
                for _ in 0..n {
                    p.update(b);
                    let s = u32::from(shift);
                    if b { q -= q >> s } else { q += (PROB_ONE - q) >> s }
                    q = q.clamp(PROB_FLOOR, PROB_ONE - PROB_FLOOR);
                    shift = (shift + 1).min(ADAPT_MAX);
                    prop_assert_eq!((p.p, p.shift), (q, shift));
                }
            }
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

        /// The table-driven `direct` writes the bytes that coding each bit
        /// on its own at probability 1/2 writes (the wire format).
        #[test]
        fn direct_matches_bit_by_bit(ops in prop::collection::vec((any::<bool>(), 0usize..4, any::<u64>(), 0u32..=64), 0..200)) {
            let mut probs = [Prob::default(); 4];
            let mut e = RangeEncoder::new(Vec::new());
            for &(b, ctx, v, n) in &ops {
                e.bit(&mut probs[ctx], b);
                e.direct(v, n);
            }
            let fast = e.finish();
            let mut probs = [Prob::default(); 4];
            let mut e = RangeEncoder::new(Vec::new());
            for &(b, ctx, v, n) in &ops {
                e.bit(&mut probs[ctx], b);
                for i in (0..n).rev() {
                    e.direct_bit((v >> i) & 1 == 1);
                }
            }
            prop_assert_eq!(fast, e.finish());
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
}

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
//! symbol s of a Freqs (format 4):  r = range >> 15
//!   low += r * cum(s)            range = r * freq(s) (the last: the rest)
//! k <= 16 raw bits v (format 4):  range >>= k; low += range * v
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
///
/// Both in one `u16` (the probability in the low [`P_FIELD`] bits, the
/// step's shift, `ADAPT_MIN..=ADAPT_MAX`, above them): a series' eight flag
/// contexts take 16 bytes of its per-link state instead of 32, so fewer
/// cache lines a tick (issue 3). The probability stays within
/// `PROB_FLOOR..=PROB_ONE - PROB_FLOOR`, below `2^P_FIELD`, so a settled
/// step (which moves it inside that range) never touches the shift.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prob {
    v: u16,
}

/// Bits of [`Prob`]'s packed word that hold the probability (`PROB_ONE`
/// itself needs 12).
const P_FIELD: u32 = 12;
const P_MASK: u16 = (1 << P_FIELD) - 1;
/// A packed [`Prob`] at or above this has settled (`shift == ADAPT_MAX`,
/// the largest shift).
const SETTLED: u16 = (ADAPT_MAX as u16) << P_FIELD;

impl Default for Prob {
    fn default() -> Self {
        Prob::pack(PROB_ONE / 2, ADAPT_MIN)
    }
}

impl Prob {
    #[inline(always)]
    fn pack(p: u16, shift: u8) -> Self {
        Prob {
            v: (u16::from(shift) << P_FIELD) | p,
        }
    }

    /// The probability of a 0, out of `PROB_ONE`.
    #[inline(always)]
    fn p(self) -> u16 {
        self.v & P_MASK
    }

    /// Adapts the probability to `bit` (decoder side; the encoder's
    /// [`RangeEncoder::bit`] folds the same steps into its own branch).
    #[inline]
    fn update(&mut self, bit: bool) {
        if self.v >= SETTLED {
            self.settled(bit);
        } else {
            self.young(bit);
        }
    }

    /// A settled probability's step (`shift == ADAPT_MAX`, nearly every
    /// decision): at a step of 1/16 neither floor can be crossed (from
    /// `p >= PROB_FLOOR`, `p - p / 16 >= PROB_FLOOR`; from `p <= PROB_ONE -
    /// PROB_FLOOR`, `p + (PROB_ONE - p) / 16` stays there too), so there is
    /// no clamp and no count to move; the step changes the low field alone.
    #[inline(always)]
    fn settled(&mut self, bit: bool) {
        let p = self.p();
        if bit {
            self.v -= p >> ADAPT_MAX;
        } else {
            self.v += (PROB_ONE - p) >> ADAPT_MAX;
        }
    }

    /// A young probability's step: larger, clamped to the floors.
    #[inline(never)]
    fn young(&mut self, bit: bool) {
        let shift = (self.v >> P_FIELD) as u8;
        let s = u32::from(shift);
        let mut p = self.p();
        // Keep p inside 1..PROB_ONE: a certain bit must stay codable. p
        // starts and stays within the floors, and each step moves it one
        // way, so only the bound it moves towards can be crossed.
        if bit {
            p -= p >> s;
            p = p.max(PROB_FLOOR);
        } else {
            p += (PROB_ONE - p) >> s;
            p = p.min(PROB_ONE - PROB_FLOOR);
        }
        *self = Prob::pack(p, shift + 1);
    }
}

/// The byte side of the encoder. Each byte leaves `low` as it is, pushed
/// at once; a carry out of `low` (rare) is added into the bytes already
/// pushed, through the run of 0xFF bytes it turns to 0x00. The same bytes
/// as LZMA's scheme (a pending byte and a count of 0xFF bytes waiting for
/// the carry), with one test and one push a byte instead of its
/// bookkeeping. Apart from `low` and `range`, so the coding loops keep
/// those two in registers and only the byte output goes through memory.
#[derive(Debug, Default)]
struct ByteOut {
    /// Every byte moved out of `low` (LZMA's leading byte, the integer
    /// part of a code in `[0, 1)`, always zero and never sent, is not one
    /// of them: see [`ByteOut::carry`]); the last is dropped at the end
    /// ([`RangeEncoder::finish`]).
    out: Vec<u8>,
}

impl ByteOut {
    /// Moves the top byte of `low` out; returns the new `low`.
    #[inline]
    fn shift_low(&mut self, low: u64) -> u64 {
        if low >> 32 != 0 {
            self.carry();
        }
        self.out.push((low >> 24) as u8);
        (low & 0x00FF_FFFF) << 8
    }

    /// Adds the carry out of `low` into the bytes sent: the trailing 0xFF
    /// bytes become 0x00 and the one before them goes up by one. A carry
    /// past the first byte went into LZMA's unsent leading byte.
    #[cold]
    #[inline(never)]
    fn carry(&mut self) {
        for b in self.out.iter_mut().rev() {
            let (v, over) = b.overflowing_add(1);
            *b = v;
            if !over {
                return;
            }
        }
    }
}

/// Codes one adaptive decision on the coder state `(low, range)`.
/// Renormalises with one byte, which always suffices: a decision leaves
/// at least `(TOP >> PROB_BITS) * PROB_FLOOR` (over 2^16) of a range that
/// was at least `TOP`.
#[inline(always)]
fn code_bit(low: &mut u64, range: &mut u32, bytes: &mut ByteOut, p: &mut Prob, bit: bool) {
    let bound = (*range >> PROB_BITS) * u32::from(p.p());
    if bit {
        *low += u64::from(bound);
        *range -= bound;
    } else {
        *range = bound;
    }
    if p.v >= SETTLED {
        p.settled(bit);
    } else {
        p.young(bit);
    }
    if *range < TOP {
        *range <<= 8;
        *low = bytes.shift_low(*low);
    }
}

/// Most raw bits [`RangeEncoder::direct`] codes in one step (format 4):
/// the range keeps at least `2^(24 - DIRECT_CHUNK)`, two bytes of
/// renormalisation at most.
const DIRECT_CHUNK: u32 = 16;

/// Total of a [`Freqs`] model's quantised frequencies, log2: a symbol's
/// share of the range is `(range >> FREQ_BITS) * frequency`, no division.
const FREQ_BITS: u32 = 15;
const FREQ_TOTAL: u32 = 1 << FREQ_BITS;
/// What one occurrence adds to a symbol's count.
const FREQ_INC: u16 = 32;
/// Counts are halved when their sum passes this: recent symbols weigh
/// more, as a settled [`Prob`] forgets at a step of 1/16 (a count sum of
/// 2^13 is ~256 occurrences: slower, but a whole distribution is learnt).
const FREQ_LIMIT: u32 = 1 << 13;
/// Most coded symbols between two refreshes of the quantised frequencies
/// (a young model refreshes after 1, 2, 4, ... symbols).
const FREQ_REFRESH: u16 = 16;

/// An adaptive distribution over `N` symbols, coded in one range-coder step
/// (format 4) where a binary tree takes `log2(N)` adaptive decisions, each
/// with its own renormalisation. Occurrence counts adapt per symbol; the
/// cumulative frequencies the coder uses (summing to `2^FREQ_BITS`, every
/// symbol at least 1 so any symbol stays codable) are refreshed from them
/// in batches, after 1, 2, 4, ... up to [`FREQ_REFRESH`] symbols, so the
/// hot path is a multiply, an add and a count increment. The last symbol
/// also takes what the quantisation leaves of the range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Freqs<const N: usize> {
    /// `ends[s]`: the cumulative frequency of symbols `0..=s`;
    /// `ends[N - 1]` is `FREQ_TOTAL`.
    ends: [u16; N],
    /// Occurrence counts, at least 1 each.
    counts: [u16; N],
    /// Sum of `counts`.
    sum: u32,
    /// Symbols left until the next refresh of `ends`.
    pending: u16,
    /// Refresh interval now (doubles up to [`FREQ_REFRESH`]).
    interval: u16,
}

impl<const N: usize> Default for Freqs<N> {
    fn default() -> Self {
        const { assert!(N >= 2 && N <= 256) };
        let mut f = Self {
            ends: [0; N],
            counts: [1; N],
            sum: N as u32,
            pending: 1,
            interval: 1,
        };
        f.refresh();
        f
    }
}

impl<const N: usize> Freqs<N> {
    /// Recomputes `ends` from `counts`: symbol `s` gets
    /// `1 + counts[s] * (FREQ_TOTAL - N) / sum` (rounded down; one division
    /// per refresh), the last symbol the rest.
    fn refresh(&mut self) {
        let room = u64::from(FREQ_TOTAL - N as u32);
        // Fixed point 2^32: counts[s] * scale >> 32 <= room * counts[s] / sum.
        let scale = (room << 32) / u64::from(self.sum.max(1));
        let mut acc: u32 = 0;
        for s in 0..N - 1 {
            acc += 1 + ((u64::from(self.counts[s]) * scale) >> 32) as u32;
            self.ends[s] = acc as u16;
        }
        self.ends[N - 1] = FREQ_TOTAL as u16;
    }

    /// Low end of symbol `s`'s cumulative range.
    #[inline(always)]
    fn lo(&self, s: usize) -> u32 {
        if s == 0 {
            0
        } else {
            u32::from(self.ends[s - 1])
        }
    }

    /// Counts one occurrence of `s`; refreshes the frequencies when due.
    #[inline(always)]
    fn update(&mut self, s: usize) {
        self.counts[s] += FREQ_INC;
        self.sum += u32::from(FREQ_INC);
        if self.sum > FREQ_LIMIT {
            self.halve();
        }
        self.pending -= 1;
        if self.pending == 0 {
            self.interval = (self.interval * 2).min(FREQ_REFRESH);
            self.pending = self.interval;
            self.refresh();
        }
    }

    /// Halves every count (at least 1 stays): the model forgets.
    #[inline(never)]
    fn halve(&mut self) {
        let mut sum = 0;
        for c in &mut self.counts {
            *c = (*c >> 1).max(1);
            sum += u32::from(*c);
        }
        self.sum = sum;
    }

    /// The symbol whose cumulative range holds `v` (`v < FREQ_TOTAL`):
    /// a binary search over `ends`.
    #[inline(always)]
    fn find(&self, v: u32) -> usize {
        // The first s with ends[s] > v: count the ends at or below v.
        let mut base = 0usize;
        let mut len = N;
        while len > 1 {
            let half = len / 2;
            if u32::from(self.ends[base + half - 1]) <= v {
                base += half;
            }
            len -= half;
        }
        base
    }
}

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
            bytes: ByteOut { out },
        }
    }

    /// Codes `bit` with the adaptive probability `p`, then adapts `p`.
    #[inline(always)]
    pub fn bit(&mut self, p: &mut Prob, bit: bool) {
        let (mut low, mut range) = (self.low, self.range);
        code_bit(&mut low, &mut range, &mut self.bytes, p, bit);
        (self.low, self.range) = (low, range);
    }

    /// The coder's state taken out for a run of adaptive decisions coded
    /// in the caller's loop ([`BitRun::bit`]); put back when the run is
    /// dropped. The same bits as [`RangeEncoder::bit`] one by one; in a
    /// loop with no call in it the state stays in registers.
    #[inline(always)]
    pub(crate) fn run(&mut self) -> BitRun<'_> {
        BitRun {
            low: self.low,
            range: self.range,
            e: self,
        }
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

    /// Codes symbol `s < N` with the adaptive distribution `f` in one step
    /// (see [`Freqs`]), then adapts `f`.
    #[inline]
    pub fn symbol<const N: usize>(&mut self, f: &mut Freqs<N>, s: usize) {
        debug_assert!(s < N);
        let s = s.min(N - 1);
        let r = self.range >> FREQ_BITS;
        let lo = r * f.lo(s);
        self.low += u64::from(lo);
        self.range = if s + 1 < N {
            r * (u32::from(f.ends[s]) - f.lo(s))
        } else {
            self.range - lo
        };
        // At least r >= 2^(24 - FREQ_BITS) is left: two bytes at most.
        while self.range < TOP {
            self.range <<= 8;
            self.low = self.bytes.shift_low(self.low);
        }
        f.update(s);
    }

    /// Codes the low `n` bits of `v` (most significant first) at probability
    /// 1/2, up to [`DIRECT_CHUNK`] of them in one step: the range is cut
    /// into `2^k` equal parts (format 4; format 3 halved it bit by bit).
    #[inline]
    pub fn direct(&mut self, v: u64, n: u32) {
        debug_assert!(n <= 64);
        let mut left = n.min(64);
        while left > 0 {
            let k = left.min(DIRECT_CHUNK);
            left -= k;
            let bits = (v >> left) & ((1u64 << k) - 1);
            self.range >>= k;
            self.low += u64::from(self.range) * bits;
            while self.range < TOP {
                self.range <<= 8;
                self.low = self.bytes.shift_low(self.low);
            }
        }
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
        // The last byte shifted out (zero) is the one LZMA's scheme holds
        // back at the end: not sent.
        self.bytes.out.pop();
        self.bytes.out
    }
}

/// A run of adaptive decisions on a [`RangeEncoder`] (see
/// [`RangeEncoder::run`]).
pub(crate) struct BitRun<'a> {
    low: u64,
    range: u32,
    e: &'a mut RangeEncoder,
}

impl BitRun<'_> {
    /// Codes `bit` with the adaptive probability `p`, then adapts `p`.
    #[inline(always)]
    pub(crate) fn bit(&mut self, p: &mut Prob, bit: bool) {
        code_bit(&mut self.low, &mut self.range, &mut self.e.bytes, p, bit);
    }
}

impl Drop for BitRun<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.e.low = self.low;
        self.e.range = self.range;
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
        let bound = (self.range >> PROB_BITS) * u32::from(p.p());
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

    /// Decodes a symbol coded by [`RangeEncoder::symbol`] (hostile bytes
    /// give some symbol below `N`, never a panic).
    #[inline]
    pub fn symbol<const N: usize>(&mut self, f: &mut Freqs<N>) -> usize {
        // range >= TOP after every step: r >= 2^9, never zero.
        let r = (self.range >> FREQ_BITS).max(1);
        let v = (self.code / r).min(FREQ_TOTAL - 1);
        let s = f.find(v);
        let lo = r * f.lo(s);
        self.code = self.code.wrapping_sub(lo);
        self.range = if s + 1 < N {
            r * (u32::from(f.ends[s]) - f.lo(s))
        } else {
            self.range.wrapping_sub(lo).max(1)
        };
        self.normalize();
        f.update(s);
        s
    }

    /// Decodes `n <= 64` bits coded with [`RangeEncoder::direct`]: one
    /// division per chunk (hostile bytes give some bits, never a panic).
    #[inline]
    pub fn direct(&mut self, n: u32) -> u64 {
        let mut v: u64 = 0;
        let mut left = n.min(64);
        while left > 0 {
            let k = left.min(DIRECT_CHUNK);
            left -= k;
            // range >= TOP: at least 2^(24 - k) after the shift.
            self.range = (self.range >> k).max(1);
            let q = (self.code / self.range).min((1 << k) - 1);
            self.code = self.code.wrapping_sub(q * self.range);
            v = (v << k) | u64::from(q);
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
mod tests;

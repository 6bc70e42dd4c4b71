//! Bit-packed change-point chunks.
//!
//! A chunk is a bit stream (most significant bit first). The first sample's
//! timestamp is kept in the chunk header, its value as 64 raw bits; every
//! later sample is a timestamp code then a value code:
//!
//! ```text
//! sample  0                           a regular tick, the value in the
//!                                     previous value's form (+ its body)
//!         1 + timestamp + rank + body anything else
//!   after a value in the dec or sum form at the 2nd regular tick in a
//!   row or later (folded: no flag bit)
//!         rice'                       a regular tick, the same form: the
//!                                     body's Rice code, quotients from 4
//!                                     on written one higher
//!         11110 + timestamp + rank + body anything else
//! timestamp (dod = delta-of-delta, zigzag)
//!   0                     dod = 0 (a regular tick)
//!   10   + 7 bits         |dod| small (ms jitter)
//!   110  + 12 bits
//!   1110 + 20 bits
//!   1111 + 64 bits
//! rank    0 | 10 | 110 | 1110 | 11110 | 11111: rank 0 is the previous
//!         value's form, ranks 1.. the other forms in the order below;
//!         after a regular tick rank 0 is never written, so the code
//!         written is that of rank - 1
//! forms and their bodies
//!   same                  (none): same bits as the previous value
//!   dec   rice            decimal: mantissa delta at the current exponent
//!   sum   rice            the previous value plus the delta's decimal
//!                         value, as a float sum (sums of rounded increments)
//!   dec+r rice + len (4) + len bits
//!                         decimal with a residual
//!   xor   window          XOR with the previous value (Gorilla)
//!   exp   e (3 bits) + delta + resid
//!                         decimal at a new exponent e: the previous value's
//!                         mantissa at e (its value × 10^e, rounded) is
//!                         implied; ranked later as dec or dec+r
//! rice   zigzag of (mantissa delta − predicted delta), Rice-coded with k
//!        low bits: q = z >> k as q ones and a zero, then the k bits; a q of
//!        20 or more is 20 ones, len-1 (6 bits) and z in len bits. The
//!        predicted delta is a running mean of the deltas (weight 1/4) and k
//!        follows a running mean of z (bit length − 1), so a counter's
//!        increase costs about the bits of its noise, not of its size
//! delta  0 + len (4 bits) + len bits | 1 + len-1 (6 bits) + len bits
//!        (zigzag of the mantissa difference)
//! resid  0 | 1 + len (4 bits) + len bits
//!        (XOR of the value's bits with the mantissa's value m / 10^e)
//! window 0 + sig bits                 inside the previous XOR window
//!        1 + lead (6) + sig-1 (6) + sig bits
//! ```
//!
//! A flat series thus costs one bit a sample, a counter its Rice code
//! (the flag folded into the code since snapshot v5: ~8% of a counter's
//! bits in the side-by-side data; v3/v4 chunks are converted on load).
//!
//! A value is *decimal* at exponent `e` (0..=7) when `m / 10^e` (or `m` for
//! `e = 0`) gives back its bits, up to a residual of at most 15 low bits,
//! for an integer `m` below 2^53: integral counters (bytes, packets) and
//! values rounded to a few decimals (CPU seconds to the ms, ratios to 0.01,
//! and sums of such values, a few ulps off the decimal) then cost the bits
//! of their mantissa's change. Any other value (NaN, staleness markers, -0.0,
//! infinities, noisy floats) takes the XOR form. The encoder takes an exact
//! decimal at the current exponent at once, else the shorter of decimal and
//! XOR, and searches for a new exponent only when XOR is long (waiting a
//! while after searches that found none); both sides keep the same state,
//! so the decoder needs no hints. Chunks are sealed after [`CHUNK_SAMPLES`]
//! samples so retention can drop whole chunks.

#[cfg(test)]
use canopy_proto::model::Sample;

#[cfg(doc)]
use super::bits::put;
use super::bits::{Reader, Writer, grow_for, unzigzag, zigzag};

mod codes;
mod general;
use codes::{
    approx, decimal, form_of, get_delta, get_resid, get_rice, get_rice_folded, get_window,
    read_dod, value_of,
};

/// Samples per chunk before a new one is started. As Prometheus's 120: a
/// window that starts inside a sealed chunk decodes it from its start, so
/// at a 1 s tick a 1 m window decodes up to 60 samples before its start,
/// not up to 180 as with 240-sample chunks (−30–55 % time for `rate(…[1m])`
/// there, for +11 % store memory: `sbs_query`/`sbs_store`, README).
pub const CHUNK_SAMPLES: usize = 120;
/// Most samples a chunk read back may hold: chunks were sealed at 240
/// samples until snapshot v6, and such snapshots still load (the sealed
/// index's count is a `u8`).
pub const MAX_CHUNK_SAMPLES: usize = 240;
/// Most bits a chunk's stream can take: at most a 5-bit escape, 4 + 64
/// timestamp bits, a 5-bit rank and 90 + 4 + 15 value bits (a long Rice
/// code and a residual) a sample, after the first value's 64 (fits the 16
/// bits a sealed chunk keeps), for the largest chunk read back.
pub const MAX_SEALED_BITS: u32 = MAX_CHUNK_SAMPLES as u32 * 190 + 64;
/// No decimal exponent / no XOR window yet.
const NONE: u8 = 0xff;
/// Largest decimal exponent.
const MAX_EXP: u8 = 7;
const POW10: [f64; 8] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7];
/// Longest wait (changed values) between searches for a decimal exponent.
const MAX_SKIP: u8 = 32;
/// Longest residual (bits) a decimal form carries.
const MAX_RESID: u32 = 15;
/// Largest magnitude at which every integer is an exact f64.
const EXACT_INT: f64 = 9_007_199_254_740_992.0;
/// A Rice quotient this large or larger is written as an escape.
const RICE_ESCAPE: u32 = 20;
/// The quotient of a folded Rice code that escapes to a full sample.
const ESC_Q: u32 = 4;
/// Regular ticks in a row after which a dec or sum value's next sample
/// is written folded.
const FOLD_AFTER: u8 = 2;

/// The value forms, in the order ranks 1.. list them (see the module docs).
const SAME: u8 = 0;
const DEC: u8 = 1;
const SUM: u8 = 2;
const DEC_RESID: u8 = 3;
const XOR: u8 = 4;
const NEW_EXP: u8 = 5;
/// Longest rank code (`11111`).
const MAX_RANK: u32 = 5;

/// Encoder/decoder state after a sample; both sides update it the same way.
/// An open chunk keeps it packed (timestamps as 32-bit offsets, see
/// [`Chunk`]); sealed chunks keep none of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct State {
    ts: i64,
    delta: i64,
    bits: u64,
    /// Mantissa of `bits` at `exp`, when `exp` is not `NONE`.
    mant: i64,
    /// The predicted next mantissa delta (a running mean of the deltas).
    pred: i64,
    /// Running mean of the Rice-coded values, which sets the Rice `k`
    /// (the bits of an `f32`: the range of a u64 in 4 bytes).
    mag: u32,
    exp: u8,
    /// The XOR window: leading zeros and significant bits.
    lead: u8,
    sig: u8,
    /// The previous value's form (`SAME`, `DEC`, `SUM`, `DEC_RESID` or `XOR`),
    /// the one ranked first for the next value.
    last: u8,
    /// Samples in a row at a regular tick (timestamp delta-of-delta 0),
    /// at most [`FOLD_AFTER`]: after that many, a dec or sum value's next
    /// sample has no flag bit (so a jittered series keeps the cheap flag
    /// escape instead of the folded code's 5-bit one).
    reg: u8,
}

impl State {
    fn first(ts: i64, bits: u64) -> Self {
        State {
            ts,
            delta: 0,
            bits,
            mant: 0,
            pred: 0,
            mag: 0,
            exp: NONE,
            lead: NONE,
            sig: 0,
            last: SAME,
            reg: 0,
        }
    }

    /// The Rice parameter: the bit length of the running mean's integer
    /// part, less one (0 below 2), read off the `f32`'s exponent field (at
    /// most 63; a damaged snapshot's sign bit is ignored). For values
    /// spread evenly below 2^a the mean is 2^(a-1), and k = a - 1 the best.
    #[inline(always)]
    fn k(&self) -> u32 {
        rice_k(self.mag)
    }

    /// After a decimal delta `d` coded as `z`: the running means move a
    /// quarter of the way towards them.
    #[inline(always)]
    fn adapt(&mut self, d: i64, z: u64) {
        self.pred = next_pred(self.pred, d);
        self.mag = next_mag(f32::from_bits(self.mag), z).to_bits();
    }

    /// After a new exponent with mantissa delta `d`: the prediction starts
    /// from it.
    fn restart(&mut self, d: i64) {
        self.pred = d;
        self.mag = (((zigzag(d) >> 3) as i64) as f32).to_bits();
    }
}

/// [`State::k`] of a running mean's `f32` bits (shared with the decoder's
/// register-held run, `view::folded_run`, which must match it bit for bit).
#[inline(always)]
fn rice_k(mag: u32) -> u32 {
    ((mag >> 23) & 0xff).saturating_sub(127).min(63)
}

/// The predicted delta after delta `d` ([`State::adapt`]).
#[inline(always)]
fn next_pred(pred: i64, d: i64) -> i64 {
    pred.wrapping_add(d.wrapping_sub(pred) >> 2)
}

/// The Rice codes' running mean after code `z` ([`State::adapt`]).
#[inline(always)]
fn next_mag(mag: f32, z: u64) -> f32 {
    // z / 2 through i64: one conversion instruction (u64 takes a dozen).
    mag * 0.75 + ((z >> 1) as i64) as f32 * 0.5
}

/// True when the sample after `st` has no flag bit: after a value in the
/// dec or sum form, [`FOLD_AFTER`] regular ticks in a row, a regular tick
/// in the same form is its folded Rice code alone (see the module docs).
#[inline(always)]
fn folds(st: &State) -> bool {
    (st.last == DEC || st.last == SUM) && st.reg >= FOLD_AFTER
}

#[cfg(test)]
thread_local! {
    /// Tests only: encode as the v4 release did (a flag bit on every
    /// sample, no folded codes), to make v4 snapshots to load.
    pub(crate) static WRITE_V4: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Tests only: the samples a chunk is sealed at, to make the
    /// 240-sample chunks of releases before 120 to load.
    pub(crate) static SEAL_AT: std::cell::Cell<usize> = const { std::cell::Cell::new(CHUNK_SAMPLES) };
}

/// Samples a chunk is sealed at: [`CHUNK_SAMPLES`] (in tests, `SEAL_AT`).
#[inline(always)]
fn seal_at() -> usize {
    #[cfg(test)]
    {
        SEAL_AT.with(std::cell::Cell::get).min(MAX_CHUNK_SAMPLES)
    }
    #[cfg(not(test))]
    {
        CHUNK_SAMPLES
    }
}

/// True when the encoder folds flag bits into Rice codes (always, but in
/// tests that write v4 chunks).
#[inline(always)]
fn folding() -> bool {
    #[cfg(test)]
    {
        !WRITE_V4.with(std::cell::Cell::get)
    }
    #[cfg(not(test))]
    {
        true
    }
}

/// A sealed or open chunk of change points, with the encoder state of its
/// newest sample packed: the newest timestamp and the last timestamp delta
/// as 32-bit offsets (a chunk spans at most [`u32::MAX`] ms, ~49 days:
/// [`Chunk::fits`]), the bit length in 16 bits. 72 bytes, kept in its
/// series' entry (issue 5: RSS per series; 80 with the state unpacked).
#[derive(Clone, Debug, Default)]
pub struct Chunk {
    /// The encoded stream in its first `bit_len.div_ceil(8)` bytes, then
    /// zeroed growth room: a boxed slice is 16 bytes in the series entry
    /// where a `Vec` took 24 (its length is the capacity).
    bytes: Box<[u8]>,
    first_ts: i64,
    /// `State::bits`, `mant` and `pred` of the newest sample.
    bits: u64,
    mant: i64,
    pred: i64,
    /// The newest sample's timestamp less `first_ts`.
    ts_off: u32,
    /// `State::delta` (at most `ts_off`).
    delta: u32,
    mag: u32,
    /// At most [`MAX_SEALED_BITS`], which fits.
    bit_len: u16,
    /// At most [`MAX_CHUNK_SAMPLES`].
    count: u8,
    exp: u8,
    lead: u8,
    sig: u8,
    last: u8,
    /// Encoder only (snapshots drop it): changed values still to write
    /// before the next search for a decimal exponent, after searches that
    /// found none (noisy floats).
    skip: u8,
    /// Encoder only: the wait after the last fruitless search (doubles up
    /// to [`MAX_SKIP`], back to 0 when a search succeeds).
    backoff: u8,
    /// `State::reg`.
    reg: u8,
}

/// An open chunk's encoder state unpacked for one [`Chunk::push`].
struct Enc {
    st: State,
    skip: u8,
    backoff: u8,
    count: u16,
    first_ts: i64,
}

impl Chunk {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Timestamp of the first sample.
    pub fn first_ts(&self) -> i64 {
        self.first_ts
    }

    /// Timestamp of the newest sample.
    pub fn last_ts(&self) -> i64 {
        self.first_ts.wrapping_add(i64::from(self.ts_off))
    }

    /// Value of the newest sample.
    pub fn last_value(&self) -> f64 {
        f64::from_bits(self.bits)
    }

    /// True when a sample at `ts` (at or after the newest) can be pushed:
    /// the chunk is empty or `ts` is at most [`u32::MAX`] ms after its
    /// first sample. A chunk that does not fit a sample is sealed first.
    pub fn fits(&self, ts: i64) -> bool {
        self.count == 0
            || ts
                .checked_sub(self.first_ts)
                .is_some_and(|d| u32::try_from(d).is_ok())
    }

    /// The encoder state, unpacked.
    fn unpack(&self) -> Enc {
        Enc {
            st: State {
                ts: self.last_ts(),
                delta: i64::from(self.delta),
                bits: self.bits,
                mant: self.mant,
                pred: self.pred,
                mag: self.mag,
                exp: self.exp,
                lead: self.lead,
                sig: self.sig,
                last: self.last,
                reg: self.reg,
            },
            skip: self.skip,
            backoff: self.backoff,
            count: u16::from(self.count),
            first_ts: self.first_ts,
        }
    }

    /// Packs `e` back; false (nothing changed) when its timestamps or
    /// count do not fit the packed fields.
    fn pack(&mut self, e: &Enc) -> bool {
        let off = e.st.ts.checked_sub(e.first_ts).map(u32::try_from);
        let (Some(Ok(ts_off)), Ok(delta), Ok(count)) =
            (off, u32::try_from(e.st.delta), u8::try_from(e.count))
        else {
            return false;
        };
        self.first_ts = e.first_ts;
        self.bits = e.st.bits;
        self.mant = e.st.mant;
        self.pred = e.st.pred;
        self.ts_off = ts_off;
        self.delta = delta;
        self.mag = e.st.mag;
        self.count = count;
        (self.exp, self.lead, self.sig, self.last) = (e.st.exp, e.st.lead, e.st.sig, e.st.last);
        self.reg = e.st.reg;
        (self.skip, self.backoff) = (e.skip, e.backoff);
        true
    }

    /// True when the chunk should be sealed.
    pub fn is_full(&self) -> bool {
        self.len() >= seal_at()
    }

    /// Appends a sample at or after the newest, first moving this chunk
    /// into `out` when it is full or `ts` does not fit it: how the samples
    /// of an older format's chunk, or of one whose span is too wide, are
    /// laid into new chunks on load.
    pub(in crate::store) fn push_splitting(&mut self, out: &mut Vec<Chunk>, ts: i64, v: f64) {
        if self.is_full() || !self.fits(ts) {
            out.push(std::mem::take(self));
        }
        self.push(ts, v);
    }

    /// About how many samples fall in `[from, to]` (see
    /// [`ChunkView::estimate`]).
    #[cfg(test)]
    pub fn estimate(&self, from: i64, to: i64) -> usize {
        self.view().estimate(from, to)
    }

    /// Encoded size in bytes.
    pub fn byte_len(&self) -> usize {
        usize::from(self.bit_len.div_ceil(8)).min(self.bytes.len())
    }

    /// Allocated but unused encoded bytes.
    pub fn slack_bytes(&self) -> usize {
        self.bytes.len() - self.byte_len()
    }

    /// The encoded bytes in use.
    fn used(&self) -> &[u8] {
        self.bytes.get(..self.byte_len()).unwrap_or_default()
    }

    /// Appends a sample; the caller guarantees `ts >= last_ts`, a chunk
    /// not full and [`Chunk::fits`]`(ts)` (a sample that breaks one is
    /// dropped, with the chunk left as it was).
    pub fn push(&mut self, ts: i64, v: f64) {
        if !self.fits(ts) || self.is_full() || (self.count > 0 && ts < self.last_ts()) {
            debug_assert!(false, "a sample pushed that the chunk does not fit");
            return;
        }
        if !self.push_regular(ts, v) {
            self.push_general(ts, v);
        }
    }

    /// The commonest samples, written straight into the open chunk's packed
    /// state and zeroed growth room: a regular tick (delta-of-delta 0) with
    /// the value unchanged after an unchanged one (one `0` bit), or a
    /// decimal or float-sum value after one of the same form (its Rice
    /// code, folded or after a `0` flag). The same bits and state as
    /// [`Self::push_general`] (proptest `regular_path_equals_general`);
    /// false with nothing changed for anything else, or for a code longer
    /// than one 64-bit word.
    #[inline(always)]
    fn push_regular(&mut self, ts: i64, v: f64) -> bool {
        if self.count < 2 || ts.wrapping_sub(self.last_ts()) != i64::from(self.delta) {
            return false;
        }
        let bits = v.to_bits();
        let (code, n) = if bits == self.bits {
            if self.last != SAME {
                return false;
            }
            (0, 1)
        } else {
            // As `Enc::choose` decides at the current exponent, for a
            // previous value of the dec or sum form kept at rank 0.
            if (self.last != DEC && self.last != SUM) || self.exp == NONE {
                return false;
            }
            let Some((m, r)) = decimal(v, self.exp) else {
                return false;
            };
            let Some(d) = m.checked_sub(self.mant) else {
                return false;
            };
            let keeps = if self.last == DEC {
                r == 0
            } else {
                (f64::from_bits(self.bits) + value_of(d, self.exp)).to_bits() == bits
            };
            if !keeps {
                return false;
            }
            let z = zigzag(d.wrapping_sub(self.pred));
            let k = ((self.mag >> 23) & 0xff).saturating_sub(127).min(63);
            let q = z >> k;
            let folded = self.reg >= FOLD_AFTER && folding();
            let q = if folded && q >= u64::from(ESC_Q) {
                q + 1
            } else {
                q
            };
            // The flag bit (a `0`) unless folded.
            let n = q as u32 + 1 + k + u32::from(!folded);
            if q >= u64::from(RICE_ESCAPE) || n > 64 {
                return false;
            }
            let low = if k == 0 {
                0
            } else {
                z & (u64::MAX >> (64 - k))
            };
            let code = ((((1u64 << q) - 1) << 1) << k) | low;
            if !self.put_in_room(code, n) {
                return false;
            }
            self.mant = self.mant.wrapping_add(d);
            self.pred = self.pred.wrapping_add(d.wrapping_sub(self.pred) >> 2);
            let mag = f32::from_bits(self.mag) * 0.75 + ((z >> 1) as i64) as f32 * 0.5;
            self.mag = mag.to_bits();
            self.bits = bits;
            self.ts_off = self.ts_off.wrapping_add(self.delta);
            self.reg = (self.reg + 1).min(FOLD_AFTER);
            self.count += 1;
            self.after_push();
            return true;
        };
        if !self.put_in_room(code, n) {
            return false;
        }
        self.ts_off = self.ts_off.wrapping_add(self.delta);
        self.reg = (self.reg + 1).min(FOLD_AFTER);
        self.count += 1;
        self.after_push();
        true
    }

    /// ORs the `n` (1..=64) low bits of `code` into the zeroed room after
    /// the stream, first growing the room as [`Writer`]'s one [`put`] of
    /// the code would (the same capacity, zeroed); false (nothing written)
    /// for an `n` out of range.
    #[inline(always)]
    fn put_in_room(&mut self, code: u64, n: u32) -> bool {
        let len = u32::from(self.bit_len);
        let (at, used) = ((len / 8) as usize, len % 8);
        let touched = (used + n).div_ceil(8) as usize;
        if n == 0 || n > 64 {
            return false;
        }
        if at + touched > self.bytes.len() {
            self.grow(touched);
        }
        // `used + n <= 71`: the bits fit the top 9 bytes of the word.
        let word = u128::from(code & (u64::MAX >> (64 - n))) << (128 - n - used);
        if let Some(dst) = self
            .bytes
            .get_mut(at..at + 16)
            .and_then(|b| <&mut [u8; 16]>::try_from(b).ok())
        {
            *dst = (u128::from_be_bytes(*dst) | word).to_be_bytes();
        } else {
            let word = word.to_be_bytes();
            for (d, s) in self.bytes.iter_mut().skip(at).take(touched).zip(word) {
                *d |= s;
            }
        }
        self.bit_len = u16::try_from(len + n).unwrap_or(u16::MAX);
        true
    }

    /// Grows the room for a code touching `touched` bytes from the stream's
    /// last byte (or the next one, at a byte boundary), as [`put`] grows
    /// the writer's buffer, zeroed to its capacity as
    /// [`Self::push_general`] leaves it.
    #[cold]
    #[inline(never)]
    fn grow(&mut self, touched: usize) {
        let used = self.byte_len();
        let mut buf = std::mem::take(&mut self.bytes).into_vec();
        buf.truncate(used);
        let fresh = if self.bit_len.is_multiple_of(8) {
            touched
        } else {
            touched - 1
        };
        grow_for(&mut buf, fresh);
        buf.resize(buf.capacity(), 0);
        self.bytes = buf.into_boxed_slice();
    }

    /// After a sample: a chunk now full gives back its growth room, as
    /// [`Self::push_general`] does.
    #[inline(always)]
    fn after_push(&mut self) {
        if self.is_full() {
            let used = self.byte_len();
            let mut buf = std::mem::take(&mut self.bytes).into_vec();
            buf.truncate(used);
            buf.shrink_to_fit();
            self.bytes = buf.into_boxed_slice();
        }
    }

    /// Appends any sample through the unpacked state (see [`Self::push`]).
    /// Out of line, so the regular path's caller saves few registers.
    #[inline(never)]
    fn push_general(&mut self, ts: i64, v: f64) {
        // The sample's codes are gathered in a word and written to the
        // buffer in one or two steps (the buffer is lent to the writer,
        // as a `Vec` of the bytes in use with the growth room as capacity).
        let used = self.byte_len();
        let mut buf = std::mem::take(&mut self.bytes).into_vec();
        buf.truncate(used);
        let mut w = Writer::new(buf, u32::from(self.bit_len));
        let mut enc = self.unpack();
        enc.push_to(&mut w, ts, v);
        let (mut buf, bit_len) = w.finish();
        // Always packs: `ts` fits and does not go back (checked above),
        // the count is at most MAX_CHUNK_SAMPLES, the bits MAX_SEALED_BITS.
        let packed = self.pack(&enc);
        debug_assert!(packed, "a pushed sample's state does not pack");
        self.bit_len = u16::try_from(bit_len).unwrap_or(u16::MAX);
        if self.is_full() {
            // Sealed: give back the growth slack.
            buf.shrink_to_fit();
        } else {
            // Zeroed room (the writer ORs into the last byte it used).
            buf.resize(buf.capacity(), 0);
        }
        self.bytes = buf.into_boxed_slice();
    }

    /// Tests only: the push before the regular path (every sample through
    /// [`Self::push_general`]), the reference it is checked against.
    #[cfg(test)]
    pub(crate) fn push_reference(&mut self, ts: i64, v: f64) {
        if !self.fits(ts) || self.is_full() || (self.count > 0 && ts < self.last_ts()) {
            return;
        }
        self.push_general(ts, v);
    }
}

impl Chunk {
    /// The chunk as a read-only [`ChunkView`] (what sealed chunks are).
    pub fn view(&self) -> ChunkView<'_> {
        ChunkView {
            bytes: self.used(),
            bit_len: u32::from(self.bit_len),
            count: u16::from(self.count),
            first_ts: self.first_ts,
            last_ts: self.last_ts(),
        }
    }

    /// Decodes the samples with `ts_ms >= from`, oldest first, into `out`;
    /// see [`ChunkView::decode_window`].
    #[cfg(test)]
    pub fn decode_window(&self, from: i64, to: i64, out: &mut Vec<Sample>) -> bool {
        self.view().decode_window(from, to, out)
    }

    /// Decodes every sample, oldest first.
    #[cfg(test)]
    pub fn decode(&self, out: &mut Vec<Sample>) {
        self.decode_window(i64::MIN, i64::MAX, out);
    }
}

mod snapshot;
mod view;
pub use view::ChunkView;
#[cfg(test)]
use view::next;

mod sealed;
pub use sealed::{ColdRefs, Runs, Sealed};

#[cfg(test)]
mod tests;
pub(in crate::store) mod v1;
pub(in crate::store) mod v2;
pub(in crate::store) mod v4;

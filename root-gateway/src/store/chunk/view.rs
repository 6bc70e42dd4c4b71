//! Reading a chunk: [`ChunkView`], the encoded samples of an open or a
//! sealed chunk, and the sample decoders it runs (a fast path for the
//! common regular-tick samples, the general one for the rest).

use canopy_proto::model::Sample;

use super::*;

/// A chunk's encoded samples and what decoding them needs (no encoder
/// state): the open chunk's [`Chunk::view`], or a sealed chunk's run in a
/// series' [`Sealed`] buffer.
#[derive(Clone, Copy, Debug)]
pub struct ChunkView<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) bit_len: u32,
    pub(super) count: u16,
    pub(super) first_ts: i64,
    /// The newest sample's timestamp (for a sealed chunk whose index has
    /// no span, the next chunk's first one: an upper bound).
    pub(super) last_ts: i64,
}

impl<'a> ChunkView<'a> {
    /// A sealed chunk's view of `bytes` (a snapshot's), or `None` when the
    /// fields cannot be a chunk's: 1 to [`MAX_CHUNK_SAMPLES`] samples, at least
    /// the first value's 64 bits, at most [`MAX_SEALED_BITS`], exactly the
    /// bytes the bits need, and a last timestamp at or after the first, at
    /// most 2^32 - 1 ms past it (`Chunk::fits`), and equal to it for one
    /// sample.
    pub fn sealed(
        bytes: &'a [u8],
        bit_len: u32,
        count: usize,
        first_ts: i64,
        last_ts: i64,
    ) -> Option<Self> {
        let span = i128::from(last_ts) - i128::from(first_ts);
        ((0..=i128::from(u32::MAX)).contains(&span) && (count > 1 || span == 0))
            .then(|| Self::sized(bytes, bit_len, count, first_ts))
            .flatten()
            .map(|v| ChunkView { last_ts, ..v })
    }

    /// [`ChunkView::sealed`] for a chunk read without its last timestamp
    /// (a v5 snapshot's): the stream is decoded for it, and must hold
    /// `count` samples in time order.
    pub fn sealed_scanned(
        bytes: &'a [u8],
        bit_len: u32,
        count: usize,
        first_ts: i64,
    ) -> Option<Self> {
        let last_ts = Self::sized(bytes, bit_len, count, first_ts)?
            .decode_checked()?
            .last()?
            .ts_ms;
        ChunkView::sealed(bytes, bit_len, count, first_ts, last_ts)
    }

    /// The view when the sizes can be a sealed chunk's (1 to
    /// [`MAX_CHUNK_SAMPLES`] samples, 64 to [`MAX_SEALED_BITS`] bits in exactly
    /// the bytes they need), its last timestamp not yet known.
    fn sized(bytes: &'a [u8], bit_len: u32, count: usize, first_ts: i64) -> Option<Self> {
        ((1..=MAX_CHUNK_SAMPLES).contains(&count)
            && (64..=MAX_SEALED_BITS).contains(&bit_len)
            && bytes.len() == bit_len.div_ceil(8) as usize)
            .then_some(ChunkView {
                bytes,
                bit_len,
                count: count as u16,
                first_ts,
                last_ts: first_ts,
            })
    }

    /// Timestamp of the last sample (an upper bound for a sealed chunk
    /// whose index has no span: see [`Sealed`]).
    pub fn last_ts(&self) -> i64 {
        self.last_ts
    }

    /// Every sample, or `None` when the stream does not hold
    /// [`ChunkView::len`] samples in time order (a damaged chunk): for
    /// chunks whose stream is checked as it is read back.
    pub fn decode_checked(&self) -> Option<Vec<Sample>> {
        let mut out = Vec::with_capacity(self.len());
        self.decode_window(i64::MIN, i64::MAX, &mut out);
        (out.len() == self.len() && out.windows(2).all(|w| w[0].ts_ms <= w[1].ts_ms)).then_some(out)
    }

    /// Length of the encoded stream in bits.
    pub fn bit_len(&self) -> u32 {
        self.bit_len
    }

    /// The encoded bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Timestamp of the first sample.
    pub fn first_ts(&self) -> i64 {
        self.first_ts
    }

    /// Encoded size in bytes.
    pub fn byte_len(&self) -> usize {
        self.bytes.len()
    }

    /// About how many samples fall in `[from, to]`, assuming they are
    /// spread evenly (to size buffers; never more than the chunk holds).
    pub fn estimate(&self, from: i64, to: i64) -> usize {
        let (first, last) = (self.first_ts, self.last_ts);
        let span = i128::from(last) - i128::from(first);
        let overlap = i128::from(to.min(last)) - i128::from(from.max(first));
        if self.count < 2 || span <= 0 || overlap < 0 {
            return self.len().min(1);
        }
        let n = overlap * i128::from(self.count - 1) / span + 2;
        usize::try_from(n).unwrap_or(0).min(self.len())
    }

    /// The first and last encoded bytes, XORed (0 when empty): reading
    /// them loads a small chunk's bytes into the cache, for a reader that
    /// loads a selection's chunks before decoding them.
    pub fn touch(&self) -> u8 {
        self.bytes.first().copied().unwrap_or(0) ^ self.bytes.last().copied().unwrap_or(0)
    }

    /// Decodes the samples with `ts_ms >= from`, oldest first, into `out`,
    /// and stops after the first sample past `to`, which is pushed too
    /// (callers that imply ticks need the next change point after a
    /// window). True when it stopped there; false at the end of the chunk
    /// (or of a damaged stream).
    pub fn decode_window(&self, from: i64, to: i64, out: &mut Vec<Sample>) -> bool {
        if self.count == 0 {
            return false;
        }
        let mut r = Reader::new(self.bytes, self.bit_len);
        let Some(first) = r.read(64) else {
            return false;
        };
        let mut st = State::first(self.first_ts, first);
        let emit = |st: &State, out: &mut Vec<Sample>| -> bool {
            if st.ts >= from {
                out.push(Sample {
                    ts_ms: st.ts,
                    value: f64::from_bits(st.bits),
                });
            }
            st.ts > to
        };
        if emit(&st, out) {
            return true;
        }
        let mut left = usize::from(self.count) - 1;
        while left > 0 {
            if folds(&st) && st.exp != NONE {
                let (n, stopped) = if st.last == SUM {
                    folded_run::<true>(&mut r, &mut st, left, from, to, out)
                } else {
                    folded_run::<false>(&mut r, &mut st, left, from, to, out)
                };
                if stopped {
                    return true;
                }
                left -= n;
                if left == 0 {
                    break;
                }
            }
            if next_fast(&mut r, &mut st).is_none() {
                return false;
            }
            left -= 1;
            if emit(&st, out) {
                return true;
            }
        }
        false
    }

    /// Decodes every sample, oldest first.
    #[cfg(test)]
    pub fn decode(&self, out: &mut Vec<Sample>) {
        self.decode_window(i64::MIN, i64::MAX, out);
    }
}

/// Decodes up to `max` samples after `st` while they are folded Rice codes
/// (regular ticks in the dec form, or the sum form when `SUM`, after
/// [`FOLD_AFTER`] of them: a counter's usual run), pushing those with
/// `ts_ms >= from` to `out` and stopping after the first past `to`. The
/// state lives in locals for the run (the sample-by-sample path kept the
/// Rice mean in memory, a store and a load on its critical path), and a
/// dec value's float is made only for the samples pushed. Leaves `st` at
/// the last sample decoded; the count decoded, and whether it stopped
/// past `to`. Same arithmetic as [`next`] on a folded code, so the same
/// samples.
#[inline(always)]
fn folded_run<const SUM: bool>(
    r: &mut Reader<'_>,
    st: &mut State,
    max: usize,
    from: i64,
    to: i64,
    out: &mut Vec<Sample>,
) -> (usize, bool) {
    let (exp, delta) = (st.exp, st.delta);
    let (mut ts, mut mant, mut pred, mut mag, mut bits) =
        (st.ts, st.mant, st.pred, f32::from_bits(st.mag), st.bits);
    let (mut n, mut stopped) = (0, false);
    while n < max && r.left() >= 57 {
        let w = r.peek();
        let k = rice_k(mag.to_bits());
        let q = w.leading_ones();
        let total = q + 1 + k;
        if q == ESC_Q || q >= RICE_ESCAPE || total > 57 {
            break;
        }
        // `k` may be 0: shift in two steps.
        let low = ((w << (q + 1)) >> 1) >> (63 - k);
        let q = if q > ESC_Q { q - 1 } else { q };
        let z = (u64::from(q) << k) | low;
        r.skip(total);
        ts = ts.wrapping_add(delta);
        let d = pred.wrapping_add(unzigzag(z));
        mant = mant.wrapping_add(d);
        // As `State::adapt`.
        pred = next_pred(pred, d);
        mag = next_mag(mag, z);
        if SUM {
            bits = (f64::from_bits(bits) + value_of(d, exp)).to_bits();
        }
        n += 1;
        if ts >= from {
            let value = if SUM {
                f64::from_bits(bits)
            } else {
                value_of(mant, exp)
            };
            out.push(Sample { ts_ms: ts, value });
        }
        if ts > to {
            stopped = true;
            break;
        }
    }
    if n > 0 {
        if !SUM {
            bits = value_of(mant, exp).to_bits();
        }
        (st.ts, st.mant, st.pred, st.mag, st.bits) = (ts, mant, pred, mag.to_bits(), bits);
    }
    (n, stopped)
}

/// Decodes the sample after `st` into `st` like [`next`], reading an
/// unchanged value at a regular tick (flat series) from one look-ahead
/// word; anything else goes to [`next`]. (Folded Rice codes, a counter's
/// usual sample, are read by [`folded_run`] before this is called: when
/// that stops, [`next`] is what they need.)
#[inline(always)]
fn next_fast(r: &mut Reader<'_>, st: &mut State) -> Option<()> {
    // 57 stream bits are in a peeked word when that many are left.
    if st.last == SAME && r.left() >= 57 && r.peek() >> 63 == 0 {
        r.skip(1);
        st.ts = st.ts.wrapping_add(st.delta);
        st.reg = (st.reg + 1).min(FOLD_AFTER);
        return Some(());
    }
    next(r, st)
}

/// Decodes the sample after `st` into `st`; `None` on a damaged stream.
#[inline(always)]
pub(super) fn next(r: &mut Reader<'_>, st: &mut State) -> Option<()> {
    // After a dec or sum value: the folded Rice code of a regular tick in
    // the same form, or the escape to a full sample.
    let mut folded_z = None;
    let full = if folds(st) {
        let q = r.ones(RICE_ESCAPE)?;
        if q != ESC_Q {
            if st.exp == NONE {
                return None;
            }
            folded_z = Some(get_rice_folded(r, q, st.k())?);
        }
        q == ESC_Q
    } else {
        r.bit()?
    };
    let form = if full {
        let (form, regular) = full_header(r, st)?;
        st.reg = if regular {
            (st.reg + 1).min(FOLD_AFTER)
        } else {
            0
        };
        form
    } else {
        st.ts = st.ts.wrapping_add(st.delta);
        st.reg = (st.reg + 1).min(FOLD_AFTER);
        st.last
    };
    apply_form(r, st, form, folded_z)
}

/// Reads a full sample's header (its delta-of-delta timestamp into `st`
/// and its form code, ranked by the previous form): the form, and whether
/// the sample fell on the regular tick. Shared with the v3/v4 reader.
#[inline(always)]
pub(super) fn full_header(r: &mut Reader<'_>, st: &mut State) -> Option<(u8, bool)> {
    let dod = read_dod(r)?;
    st.delta = st.delta.wrapping_add(unzigzag(dod));
    st.ts = st.ts.wrapping_add(st.delta);
    let rank = r.ones(MAX_RANK)? as u8;
    let form = form_of(if dod == 0 { rank + 1 } else { rank }, st.last);
    Some((form, dod == 0))
}

/// Reads the value of a sample in `form` after its header (the Rice code
/// already read when `folded_z` holds it) into `st`; `None` on a damaged
/// stream. Shared by this format and the v3/v4 reader (`v4.rs`), whose
/// value codes are the same.
#[inline(always)]
pub(super) fn apply_form(
    r: &mut Reader<'_>,
    st: &mut State,
    form: u8,
    folded_z: Option<u64>,
) -> Option<()> {
    match form {
        SAME => {}
        DEC | SUM | DEC_RESID => {
            if st.exp == NONE {
                return None;
            }
            let z = match folded_z {
                Some(z) => z,
                None => get_rice(r, st.k())?,
            };
            let d = st.pred.wrapping_add(unzigzag(z));
            st.mant = st.mant.wrapping_add(d);
            st.adapt(d, z);
            st.bits = match form {
                SUM => (f64::from_bits(st.bits) + value_of(d, st.exp)).to_bits(),
                DEC => value_of(st.mant, st.exp).to_bits(),
                _ => {
                    let n = r.read(4)? as u32;
                    value_of(st.mant, st.exp).to_bits() ^ r.read(n)?
                }
            };
        }
        XOR => {
            get_window(r, &mut st.lead, &mut st.sig, &mut st.bits)?;
            st.exp = NONE;
        }
        NEW_EXP => {
            let e = r.read(3)? as u8;
            let prev = approx(f64::from_bits(st.bits), e)?;
            let z = get_delta(r)?;
            st.mant = prev.wrapping_add(unzigzag(z));
            st.exp = e;
            let resid = get_resid(r)?;
            st.bits = value_of(st.mant, e).to_bits() ^ resid;
            st.restart(unzigzag(z));
            st.last = if resid == 0 { DEC } else { DEC_RESID };
            return Some(());
        }
        // A rank past the last form: damaged.
        _ => return None,
    }
    st.last = form;
    Some(())
}

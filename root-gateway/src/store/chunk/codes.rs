//! The variable-length codes of a chunk's bit stream (see the module docs
//! of `chunk`): decimal forms, residuals, mantissa deltas, Rice codes, rank
//! codes and timestamp delta-of-deltas, each with its cost, writer and
//! reader, so the encoder can compare forms by their exact bit cost.

use canopy_proto::codec::quantise::round_small;

use super::super::bits::{Reader, Writer, bit_len};
use super::{ESC_Q, EXACT_INT, MAX_RANK, MAX_RESID, POW10, RICE_ESCAPE};

/// The value of mantissa `m` at exponent `e`.
#[inline(always)]
pub(super) fn value_of(m: i64, e: u8) -> f64 {
    match POW10.get(usize::from(e)) {
        Some(&p) if e > 0 => m as f64 / p,
        _ => m as f64,
    }
}

/// `v` × 10^e rounded to an integer (half away from zero), when finite
/// and below 2^53.
#[inline(always)]
pub(super) fn approx(v: f64, e: u8) -> Option<i64> {
    let p = *POW10.get(usize::from(e))?;
    let x = v * p;
    // Below 2^52 without a libm call (proptest `approx_rounds_as_f64_round`).
    round_small(x).or_else(|| approx_rounded(x))
}

/// [`approx`] of `x = v × 10^e` through `f64::round` (what it was before
/// the integer rounding, kept for large, infinite and NaN `x`).
pub(super) fn approx_rounded(x: f64) -> Option<i64> {
    let m = x.round();
    // NaN fails this test too.
    if m.is_nan() || m.abs() >= EXACT_INT {
        return None;
    }
    Some(m as i64)
}

/// The decimal form of `v` at exponent `e`: its mantissa and the XOR of
/// `v`'s bits with the mantissa's value, when that residual is short.
#[inline(always)]
pub(super) fn decimal(v: f64, e: u8) -> Option<(i64, u64)> {
    let m = approx(v, e)?;
    let r = v.to_bits() ^ value_of(m, e).to_bits();
    (bit_len(r) <= MAX_RESID).then_some((m, r))
}

/// Bits of a residual with its flag (the new-exponent form).
pub(super) fn resid_cost(r: u64) -> u32 {
    if r == 0 { 1 } else { 5 + bit_len(r) }
}

pub(super) fn put_resid(w: &mut Writer, r: u64) {
    if r == 0 {
        w.put(0, 1);
    } else {
        let n = bit_len(r);
        w.put(0b10000 | u64::from(n), 5);
        w.put(r, n);
    }
}

#[inline(always)]
pub(super) fn get_resid(r: &mut Reader<'_>) -> Option<u64> {
    if r.bit()? {
        let n = r.read(4)? as u32;
        r.read(n)
    } else {
        Some(0)
    }
}

/// Bits of a varbit delta of zigzag code `z`.
pub(super) fn delta_cost(z: u64) -> u32 {
    let n = bit_len(z);
    if n <= 15 { 5 + n } else { 7 + n }
}

pub(super) fn put_delta(w: &mut Writer, z: u64) {
    let n = bit_len(z);
    if n <= 15 {
        w.put(u64::from(n), 5);
    } else {
        w.put(0b100_0000 | u64::from(n - 1), 7);
    }
    w.put(z, n);
}

#[inline(always)]
pub(super) fn get_delta(r: &mut Reader<'_>) -> Option<u64> {
    let n = if r.bit()? {
        r.read(6)? as u32 + 1
    } else {
        r.read(4)? as u32
    };
    r.read(n)
}

/// Bits of the Rice code of `z` with `k` low bits.
pub(super) fn rice_cost(z: u64, k: u32) -> u32 {
    let q = z >> k;
    if q < u64::from(RICE_ESCAPE) {
        q as u32 + 1 + k
    } else {
        RICE_ESCAPE + 6 + bit_len(z)
    }
}

#[inline(always)]
pub(super) fn put_rice(w: &mut Writer, z: u64, k: u32) {
    put_rice_as(w, z, k, z >> k);
}

/// Writes the Rice code of `z` with `k` low bits and the written quotient
/// `q` (`z >> k`, or one higher past the folded code's escape); a
/// quotient of [`RICE_ESCAPE`] or more is the long form.
#[inline(always)]
fn put_rice_as(w: &mut Writer, z: u64, k: u32, q: u64) {
    if q < u64::from(RICE_ESCAPE) {
        // q ones and a zero, then the k low bits: one code when it fits.
        let (q, head) = (q as u32, ((1u64 << q) - 1) << 1);
        if q + 1 + k <= 64 {
            let low = if k == 0 {
                0
            } else {
                z & (u64::MAX >> (64 - k))
            };
            w.put((head << k) | low, q + 1 + k);
        } else {
            w.put(head, q + 1);
            w.put(z, k);
        }
    } else {
        let n = bit_len(z);
        w.put((1u64 << RICE_ESCAPE) - 1, RICE_ESCAPE);
        w.put(u64::from(n - 1), 6);
        w.put(z, n);
    }
}

#[inline(always)]
pub(super) fn get_rice(r: &mut Reader<'_>, k: u32) -> Option<u64> {
    let q = r.ones(RICE_ESCAPE)?;
    if q < RICE_ESCAPE {
        let low = r.read(k)?;
        Some(u64::from(q).checked_shl(k).unwrap_or(0) | low)
    } else {
        let n = r.read(6)? as u32 + 1;
        r.read(n)
    }
}

/// The folded Rice code of `z` with `k` low bits: a regular tick's
/// sample in the decimal or float-sum form, with no flag bit before it.
/// Quotient [`ESC_Q`] is the escape to a sample written in full (the
/// flag's `1`), so quotients from it on are written one higher; a written
/// quotient of [`RICE_ESCAPE`] or more is the long form, as in
/// [`put_rice`].
#[inline(always)]
pub(super) fn put_rice_folded(w: &mut Writer, z: u64, k: u32) {
    let q = z >> k;
    put_rice_as(w, z, k, if q < u64::from(ESC_Q) { q } else { q + 1 });
}

/// The escape of a folded Rice code: [`ESC_Q`] ones and a zero.
#[inline(always)]
pub(super) fn put_fold_escape(w: &mut Writer) {
    w.put(((1u64 << ESC_Q) - 1) << 1, ESC_Q + 1);
}

/// Reads the rest of a folded Rice code whose quotient `q` (not the
/// escape) was read: the value `z`.
#[inline(always)]
pub(super) fn get_rice_folded(r: &mut Reader<'_>, q: u32, k: u32) -> Option<u64> {
    if q < RICE_ESCAPE {
        let q = if q > ESC_Q { q - 1 } else { q };
        let low = r.read(k)?;
        Some(u64::from(q).checked_shl(k).unwrap_or(0) | low)
    } else {
        let n = r.read(6)? as u32 + 1;
        r.read(n)
    }
}

/// The code of rank `rank` (0..=5): `0`, `10`, `110`, `1110`, `11110`,
/// `11111` (as many ones as the rank, then a zero below the longest).
pub(super) fn rank_code(rank: u8) -> (u64, u32) {
    let r = u32::from(rank).min(MAX_RANK);
    if r < MAX_RANK {
        (((1u64 << r) - 1) << 1, r + 1)
    } else {
        ((1u64 << r) - 1, r)
    }
}

/// The rank of form `form` after a value of form `last`.
pub(super) fn rank_of(form: u8, last: u8) -> u8 {
    if form == last {
        0
    } else if form < last {
        form + 1
    } else {
        form
    }
}

/// The form of rank `rank` after a value of form `last`.
#[inline(always)]
pub(super) fn form_of(rank: u8, last: u8) -> u8 {
    if rank == 0 {
        last
    } else if rank - 1 < last {
        rank - 1
    } else {
        rank
    }
}

/// Reads the timestamp code: the zigzag delta of delta.
#[inline(always)]
pub(super) fn read_dod(r: &mut Reader<'_>) -> Option<u64> {
    Some(match r.ones(4)? {
        0 => 0,
        1 => r.read(7)?,
        2 => r.read(12)?,
        3 => r.read(20)?,
        _ => r.read(64)?,
    })
}

/// Reads a `window` body (see the module docs of `chunk`) and applies it to
/// `bits`: a new XOR window (`lead`, `sig`) when its flag is set, else the
/// previous one; `None` on a truncated or impossible window.
pub(super) fn get_window(
    r: &mut Reader<'_>,
    lead: &mut u8,
    sig: &mut u8,
    bits: &mut u64,
) -> Option<()> {
    if r.bit()? {
        *lead = r.read(6)? as u8;
        *sig = r.read(6)? as u8 + 1;
    }
    let shift = 64u32.checked_sub(u32::from(*lead) + u32::from(*sig))?;
    *bits ^= r.read(u32::from(*sig))? << shift;
    Some(())
}

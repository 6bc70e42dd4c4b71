//! Coding of numbers in a packed section (codec format 4): a residual's bit
//! length and sign as one multi-symbol step, other numbers' bit lengths as
//! one step, lengths outside a context's window escaped to a 7-bit tree, and
//! the bits below the leading one raw.

use super::super::rangecoder::{Freqs, Prob, RangeDecoder, RangeEncoder};
use super::{ABS_CTX, LEN_CTX, LinkModel, bit_len};

impl LinkModel {
    /// Codes a signed residual in one multi-symbol step (its bit length
    /// and sign together, see [`RES_SYMS`]; the sign per length and context
    /// because noise is often skewed: a hard floor, a long tail), then the
    /// bits below its leading one ([`put_mantissa`]). A length outside the
    /// context's window escapes to the class's tree, its sign to an
    /// adaptive bit.
    #[inline(always)]
    pub(super) fn put_r(&mut self, e: &mut RangeEncoder, class: usize, ctx: usize, r: i64) {
        let m = r.unsigned_abs();
        let n = bit_len(m);
        let f = &mut self.len[class * LEN_CTX + ctx];
        if n == 0 {
            e.symbol(f, 0);
            return;
        }
        let neg = r < 0;
        let i = n.wrapping_sub(window_base(ctx)) as usize;
        if i < RES_WINDOW {
            e.symbol(f, 1 + i + RES_WINDOW * usize::from(neg));
        } else {
            e.symbol(f, RES_ESC);
            e.tree(&mut self.len_esc[class], n);
            e.bit(&mut self.sign[class], neg);
        }
        put_mantissa(e, m, n);
    }

    /// Decodes a residual coded by [`LinkModel::put_r`]; `None` for bits
    /// no encoder writes (a length over 64, an escape into the window).
    #[inline(always)]
    pub(super) fn get_r(
        &mut self,
        d: &mut RangeDecoder<'_>,
        class: usize,
        ctx: usize,
    ) -> Option<i64> {
        let base = window_base(ctx);
        let (n, neg) = match d.symbol(&mut self.len[class * LEN_CTX + ctx]) {
            0 => return Some(0),
            RES_ESC => {
                let n = get_escape(d, &mut self.len_esc[class], base, RES_WINDOW)?;
                (n, d.bit(&mut self.sign[class]))
            }
            s => {
                let i = (s - 1) % RES_WINDOW;
                (base + i as u32, s > RES_WINDOW)
            }
        };
        if n > 64 {
            return None;
        }
        let m = get_mantissa(d, n);
        // |i64::MIN| = 2^63 maps back to i64::MIN either way.
        Some(if neg {
            m.wrapping_neg() as i64
        } else {
            m as i64
        })
    }
}

/// Symbols of a residual's distribution (format 4): 0 (residual 0), the
/// lengths `base..base + RES_WINDOW` positive, the same negative, and the
/// escape (another length, in the class's tree; the sign an adaptive bit).
pub(crate) const RES_SYMS: usize = 2 * RES_WINDOW + 2;
const RES_WINDOW: usize = 15;
pub(super) const RES_ESC: usize = RES_SYMS - 1;

/// The bits of `m` (bit length `n`) below its leading one, raw (format
/// 4: modelling the top one or two, as format 3 did, saved 0.2 % of the
/// reference trace for two adaptive decisions a value on both ends).
#[inline(always)]
fn put_mantissa(e: &mut RangeEncoder, m: u64, n: u32) {
    if n >= 2 {
        e.direct(m, n - 1);
    }
}

/// Decodes what [`put_mantissa`] coded: the number of bit length `n`
/// (`1 <= n <= 64`).
#[inline(always)]
fn get_mantissa(d: &mut RangeDecoder<'_>, n: u32) -> u64 {
    if n < 2 {
        return u64::from(n);
    }
    (1 << (n - 1)) | d.direct(n - 1)
}

/// Decodes an escaped length from its tree: `None` unless it is one the
/// window (`base`, `window` lengths) does not hold, and not zero.
#[inline]
fn get_escape(
    d: &mut RangeDecoder<'_>,
    esc: &mut [Prob; 128],
    base: u32,
    window: usize,
) -> Option<u32> {
    let mut node = 1usize;
    for _ in 0..7 {
        node = node * 2 + usize::from(d.bit(&mut esc[node]));
    }
    let n = (node - 128) as u32;
    (n != 0 && n.wrapping_sub(base) as usize >= window).then_some(n)
}

/// Symbols of a bit-length distribution: 0 (length 0), the window of
/// lengths `base..base + LEN_SYMS - 2`, and the escape (another length, in
/// the escape tree).
pub(crate) const LEN_SYMS: usize = 16;
const LEN_ESC: usize = LEN_SYMS - 1;
/// Lengths below the expected one that a context's window holds.
const LEN_BELOW: usize = 6;

/// First length of context `ctx`'s window: a few below the expected
/// length (residuals fall short of their typical size far more often than
/// they exceed it), at least 1; absolute values start at 1.
#[inline]
pub(super) fn window_base(ctx: usize) -> u32 {
    if ctx == ABS_CTX {
        1
    } else {
        ctx.saturating_sub(LEN_BELOW).max(1) as u32
    }
}

/// Where a number's bit length is coded: one step of `freqs` for lengths
/// in its window, else the escape symbol and the `esc` tree.
pub(crate) struct LenModel<'a> {
    pub(super) freqs: &'a mut Freqs<LEN_SYMS>,
    pub(super) esc: &'a mut [Prob; 128],
    pub(super) base: u32,
}

/// Codes `u` as its bit length (one multi-symbol step, see [`LenModel`]),
/// then the bits below its leading one ([`put_mantissa`]).
#[inline(always)]
pub(super) fn put_len_coded(e: &mut RangeEncoder, m: LenModel<'_>, u: u64) {
    let n = bit_len(u);
    if n == 0 {
        e.symbol(m.freqs, 0);
        return;
    }
    let i = n.wrapping_sub(m.base) as usize;
    if i < LEN_SYMS - 2 {
        e.symbol(m.freqs, i + 1);
    } else {
        e.symbol(m.freqs, LEN_ESC);
        e.tree(m.esc, n);
    }
    put_mantissa(e, u, n);
}

/// Decodes a number coded by [`put_len_coded`]; `None`: a length over 64
/// (or an escape naming a length the window holds: hostile bits).
#[inline(always)]
pub(super) fn get_len_coded(d: &mut RangeDecoder<'_>, m: LenModel<'_>) -> Option<u64> {
    let n = match d.symbol(m.freqs) {
        0 => return Some(0),
        LEN_ESC => get_escape(d, m.esc, m.base, LEN_SYMS - 2)?,
        s => m.base + s as u32 - 1,
    };
    if n > 64 {
        return None;
    }
    Some(get_mantissa(d, n))
}

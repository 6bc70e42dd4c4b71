//! Per-series prediction and the adaptive models of a packed section.
//!
//! Both ends of a link keep, per series, the same [`WireState`] (last value,
//! last increment, running mean, how well each predictor did lately, how
//! often the series changes) and, per link, one [`LinkModel`] of shared
//! statistics. Everything is a deterministic function of the values already
//! sent on the link, so nothing about the models travels on the wire.
//!
//! A packed section first says, in one adaptive bit, which of two forms
//! lists its changed members (the encoder picks the one likely smaller):
//!
//! ```text
//! dense:  for every live series of its source in id order:
//!   changed?  one adaptive bit; context: this series, packed sections of
//!             its source since it last changed (0..=3), did its twin (else
//!             the series before it in the walk) change
//!   if changed: its value (below)
//! sparse: k, the number of changed members (k >= 1)   length-coded
//!   first changed id: zigzag(id - the previous sparse section's first)
//!   then, per further changed member: id - previous id - 1
//!   each followed by its value (below); ids strictly ascend and must be
//!   live series of the source: the receiver's work is O(k), not O(members)
//! ```
//! (length-coded, format 4: the bit length in one step of an adaptive
//! 16-symbol distribution per number kind (rangecoder.rs `Freqs`: zero,
//! lengths 1..=14, an escape to a 7-bit adaptive tree), the bits below the
//! leading one raw.)
//!
//! A value:
//!
//! ```text
//!   noisy gauges (residuals of 8+ bits): the bin of the value in the
//!     series' own histogram (hist.rs), then the offset in the bin raw;
//!     bin 0 escapes to the residual coding below
//!   counters with a step (gcd of their increments so far, > 1):
//!     on grid?  one adaptive bit; if set, the residual below is in units
//!               of the step, against the prediction rounded to the grid
//!   residual r = w - prediction          (w: integer wire value, quantise.rs)
//!   n = bit length of |r| (0..=64) and the sign of r, one symbol of an
//!     adaptive 32-symbol distribution (format 4; context: gauge or counter,
//!     the series' expected length k): r = 0, n in the window
//!     max(1, k - 6)..+15 either sign, or the escape: n in a 7-bit adaptive
//!     tree, the sign one adaptive bit
//!   the bits of |r| below its leading one  raw (up to 16 in one coder step)
//! ```
//! Format 3 coded n in a 7-level binary tree, the sign and the two bits
//! below the leading one as adaptive bits: 10 adaptive decisions a value
//! where format 4 takes one multi-symbol step (the reference trace 1.1 %
//! larger, the encoder 28 % and the decoder 37 % fewer instructions a tick
//! in `tick_cost`).
//!
//! The prediction is whichever of four predictors has lately produced the
//! shortest residuals for this series (ties: the first):
//! * last value (delta): gauges that wander;
//! * last value + last increment (delta of delta): counters with a steady rate;
//! * running mean (gauges): noise around a level (coding `w - mean` costs
//!   about a bit less than `w - last` for i.i.d. noise); for counters, last
//!   value + running mean of the increments (a rate that is noise around a
//!   level);
//! * the twin's value: a series that took the same value as an earlier
//!   series of the walk in the same section (Go's `alloc_bytes` and
//!   `heap_alloc_bytes`) predicts from it; twins are looked for in one
//!   packed section of [`TWIN_EVERY`] of the source (format 4).
//!
//! A series the receiver holds no value for (new, redefined, after a special
//! or a keyframe column) is coded absolute, in a context of its own.
//! Keyframe columns carry each value's change since the previous keyframe
//! (`encode_column`), so zstd sees mostly zeros.

use smallvec::SmallVec;

use super::hist::Hists;
use super::idhash::FirstSeen;
use super::rangecoder::{Freqs, Prob, RangeDecoder, RangeEncoder};

mod numbers;
mod wire;
use numbers::{LEN_SYMS, LenModel, RES_SYMS, get_len_coded, put_len_coded};
#[cfg(test)]
use numbers::{RES_ESC, window_base};
#[cfg(test)]
use wire::NO_TWIN;
pub(crate) use wire::WireState;

const PREDICTORS: usize = 4;
/// Fixed-point scale of the predictor costs (1/16 bit).
const COST_ONE: i32 = 16;
/// Length contexts: expected lengths 0..=64, then one for absolute values.
const LEN_RES: i32 = 1;
const LEN_CTX: usize = 64 * LEN_RES as usize + 2;
const ABS_CTX: usize = LEN_CTX - 1;
/// Predictor costs forget with weight 1/16 per value: slow enough to settle
/// on the right predictor for noise, fast enough to follow a phase change.
const COST_SHIFT: u32 = 4;
/// The running mean moves 1/16 of the way to each new value (~16 values).
const MEAN_DIV: i128 = 16;
/// Series classes with their own length statistics: gauges, counters.
const CLASSES: usize = 2;
/// Changed-flag contexts: ticks since the last change, 0..=3 (saturating).
const FLAG_CTX: usize = 4;
/// Twins are looked for in one packed section of this many of a source.
const TWIN_EVERY: u32 = 8;
/// Sparse section tree: the number of changed members.
pub(crate) const SPARSE_COUNT: usize = 0;
/// Sparse section tree: the first changed member, as the zigzag distance
/// from the previous sparse section's first of the same source.
pub(crate) const SPARSE_FIRST: usize = 1;
/// Sparse section tree: the gap to the next changed member (ids minus one).
pub(crate) const SPARSE_GAP: usize = 2;
const SPARSE_TREES: usize = 3;

/// Per-source state of packed sections, identical on both ends of a link
/// (kept while the source lives, across keyframes).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SourceCoding {
    /// Packed sections coded so far (wrapping): the walk count.
    pub walks: u32,
    /// First changed id of the latest sparse section (0: none yet).
    pub first: u32,
    /// Ids whose values the source's latest packed section carried,
    /// ascending (a repeat section changes exactly these again); the first
    /// few inline, so a quiet source's repeat section reads no second
    /// allocation on the receiving end.
    pub last: SmallVec<[u32; LAST_INLINE]>,
}

/// Last changed ids kept inline in [`SourceCoding`] (a quiet node changes
/// its tick counter alone; a few more spill to the heap).
const LAST_INLINE: usize = 5;

/// `m + (x - m) / 16` (floored): the running mean's step. Exact in i128,
/// so extreme values cannot overflow; the result lies between `m` and `x`,
/// so it fits an i64. When `x - m` fits an i64 (nearly always) the floored
/// division by 16 is an arithmetic shift and nothing needs 128 bits.
#[inline]
fn running_mean(m: i64, x: i64) -> i64 {
    const _: () = assert!(MEAN_DIV == 16);
    match x.checked_sub(m) {
        Some(d) => m + (d >> 4),
        None => {
            let m = i128::from(m);
            (m + (i128::from(x) - m).div_euclid(MEAN_DIV)) as i64
        }
    }
}

/// Zigzag: small magnitudes of either sign become small unsigned numbers.
pub(crate) fn zigzag(r: i64) -> u64 {
    ((r << 1) ^ (r >> 63)) as u64
}

/// Inverse of [`zigzag`].
pub(crate) fn unzigzag(u: u64) -> i64 {
    ((u >> 1) as i64) ^ -((u & 1) as i64)
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

fn bit_len(u: u64) -> u32 {
    64 - u.leading_zeros()
}

/// Statistics shared by every series of a link, identical on both ends.
#[derive(Clone, Debug)]
pub(crate) struct LinkModel {
    /// Residual distributions (bit length and sign), `[class][context]`
    /// (see [`RES_SYMS`]).
    len: Vec<Freqs<RES_SYMS>>,
    /// Bit lengths outside their context's window, `[class]`: 7-level
    /// binary trees (lengths 0..=64).
    len_esc: Vec<[Prob; 128]>,
    /// Sign of an escaped residual, `[class]`.
    sign: Vec<Prob>,
    /// The previous series of the walk changed.
    prev_changed: bool,
    /// Walk count of the section being coded (its source's).
    walk: u32,
    /// P(a section codes its changed members sparsely).
    sparse: Prob,
    /// Sparse sections: length trees of the number of changed members, of
    /// the first one's distance from the previous section's first, and of
    /// the gaps between the next ones.
    sparse_len: Vec<Freqs<LEN_SYMS>>,
    /// Their lengths outside the window, `[tree]`.
    sparse_esc: Vec<[Prob; 128]>,
    /// Values taken in the current section, by the first series to take
    /// them (twin finding).
    seen: FirstSeen,
    /// Histograms of the noisy gauges.
    hists: Hists,
}

impl Default for LinkModel {
    fn default() -> Self {
        Self {
            len: vec![Freqs::default(); CLASSES * LEN_CTX],
            len_esc: vec![[Prob::default(); 128]; CLASSES],
            sign: vec![Prob::default(); CLASSES],
            prev_changed: false,
            walk: 0,
            sparse: Prob::default(),
            sparse_len: vec![Freqs::default(); SPARSE_TREES],
            sparse_esc: vec![[Prob::default(); 128]; SPARSE_TREES],
            seen: FirstSeen::default(),
            hists: Hists::default(),
        }
    }
}

impl LinkModel {
    /// Starts a packed section of a source; `walk`: the source's count of
    /// packed sections, this one included (both ends count them alike).
    pub fn start_section(&mut self, walk: u32) {
        self.prev_changed = false;
        self.walk = walk;
        self.seen.clear();
    }

    /// Walk count of the section being coded (see [`WireState::as_peer`]).
    pub fn walk(&self) -> u32 {
        self.walk
    }

    /// Codes the section's form: sparse (the changed members listed) or
    /// dense (a flag per member).
    pub fn put_sparse(&mut self, e: &mut RangeEncoder, sparse: bool) {
        e.bit(&mut self.sparse, sparse);
    }

    /// Decodes the section's form coded by [`LinkModel::put_sparse`].
    pub fn get_sparse(&mut self, d: &mut RangeDecoder<'_>) -> bool {
        d.bit(&mut self.sparse)
    }

    /// Codes one number of a sparse section's member list: `tree` is
    /// [`SPARSE_COUNT`], [`SPARSE_FIRST`] or [`SPARSE_GAP`].
    pub fn put_sparse_u(&mut self, e: &mut RangeEncoder, tree: usize, u: u64) {
        put_len_coded(
            e,
            LenModel {
                freqs: &mut self.sparse_len[tree],
                esc: &mut self.sparse_esc[tree],
                base: 1,
            },
            u,
        );
    }

    /// Decodes a number coded by [`LinkModel::put_sparse_u`].
    pub fn get_sparse_u(&mut self, d: &mut RangeDecoder<'_>, tree: usize) -> Option<u64> {
        get_len_coded(
            d,
            LenModel {
                freqs: &mut self.sparse_len[tree],
                esc: &mut self.sparse_esc[tree],
                base: 1,
            },
        )
    }

    /// A member changed in a sparse section (no flag coded): its age
    /// restarts as a flag's would.
    pub fn mark_changed(&mut self, st: &mut WireState) {
        st.mark = self.walk;
    }

    /// Flag context: the series' age, and whether its twin changed (else
    /// whether the series before it in the walk did: neighbours in id
    /// order are related metrics).
    fn flag_ctx(&self, st: &WireState, peer_changed: Option<bool>) -> usize {
        st.age_at(self.walk) * 2 + usize::from(peer_changed.unwrap_or(self.prev_changed))
    }

    /// Codes whether series `st` changed in this section; `peer_changed`:
    /// whether its twin did (see [`WireState::as_peer`]).
    #[cfg(test)]
    pub fn put_flag(
        &mut self,
        e: &mut RangeEncoder,
        st: &mut WireState,
        changed: bool,
        peer_changed: Option<bool>,
    ) {
        e.bit(&mut st.flag[self.flag_ctx(st, peer_changed)], changed);
        if changed {
            st.mark = self.walk;
        }
        self.prev_changed = changed;
    }

    /// Codes a dense section's walk: a flag per member of `members`
    /// (ascending ids, each in `state`), then the value of each changed one;
    /// `coded`: the changes, (id, wire value, is a counter), ascending, each
    /// a member. The bits of [`LinkModel::put_flag`] and
    /// [`LinkModel::put_value`] member by member, in one loop that keeps the
    /// walk's context (its count, whether the previous member changed, the
    /// next changed id) in locals: the walk is most of a busy source's
    /// per-member work.
    pub fn put_dense(
        &mut self,
        e: &mut RangeEncoder,
        state: &mut [WireState],
        members: &[u32],
        coded: &[(u32, i64, bool)],
    ) {
        let walk = self.walk;
        let mut prev = false;
        let mut rest = members;
        for &(c, w, counter) in coded {
            // The unchanged members before `c`, a `0` flag each, in a loop
            // with no call in it, so the coder's state stays in registers
            // (about half of a busy source's members).
            let run = rest.iter().take_while(|&&h| h != c).count();
            let (unchanged, tail) = rest.split_at(run);
            prev = Self::put_unchanged(e, state, unchanged, walk, prev);
            let Some((&h, after)) = tail.split_first() else {
                break; // invariant: every change is a member
            };
            rest = after;
            let peer = Self::peer_of(state, h, walk);
            let st = &mut state[h as usize];
            let ctx = st.age_at(walk) * 2 + usize::from(peer.map_or(prev, |p| p.1));
            e.bit(&mut st.flag[ctx], true);
            prev = true;
            st.mark = walk;
            self.put_value(e, (h, st), w, counter, peer.map(|p| p.0));
        }
        prev = Self::put_unchanged(e, state, rest, walk, prev);
        self.prev_changed = prev;
    }

    /// What member `h` predicts from in walk `walk`: its twin's value and
    /// whether the twin changed ([`WireState::as_peer`]).
    #[inline(always)]
    fn peer_of(state: &[WireState], h: u32, walk: u32) -> Option<(i64, bool)> {
        state[h as usize]
            .twin()
            .and_then(|t| state.get(t as usize))
            .and_then(|t| t.as_peer(walk))
    }

    /// Codes a `0` flag for each of `members` (none changed), as
    /// [`LinkModel::put_dense`] would one by one; `prev`: whether the
    /// member before them changed. Returns whether the last one did
    /// (false), or `prev` when there are none.
    #[inline(always)]
    fn put_unchanged(
        e: &mut RangeEncoder,
        state: &mut [WireState],
        members: &[u32],
        walk: u32,
        mut prev: bool,
    ) -> bool {
        if members.is_empty() {
            return prev;
        }
        let mut run = e.run();
        for &h in members {
            let peer_changed = Self::peer_of(state, h, walk).map_or(prev, |p| p.1);
            let st = &mut state[h as usize];
            let ctx = st.age_at(walk) * 2 + usize::from(peer_changed);
            run.bit(&mut st.flag[ctx], false);
            prev = false;
        }
        prev
    }

    /// Decodes whether series `st` changed in this section.
    pub fn get_flag(
        &mut self,
        d: &mut RangeDecoder<'_>,
        st: &mut WireState,
        peer_changed: Option<bool>,
    ) -> bool {
        let changed = d.bit(&mut st.flag[self.flag_ctx(st, peer_changed)]);
        if changed {
            st.mark = self.walk;
        }
        self.prev_changed = changed;
        changed
    }

    /// After series `id` took value `w` in this section: find it a twin (an
    /// earlier series that took the same value here), unless its twin
    /// still holds that value. Bounded by the section's size. Only in one
    /// packed section of [`TWIN_EVERY`] of a source (format 4): twins
    /// (series equal tick after tick) are found as well a few ticks later,
    /// and the table lookup, a cache miss or two a value on both ends,
    /// is skipped in the others.
    #[inline(always)]
    fn note(&mut self, id: u32, st: &mut WireState, w: i64, peer: Option<i64>) {
        if peer == Some(w) || !self.walk.is_multiple_of(TWIN_EVERY) {
            return;
        }
        if let Some(first) = self.seen.first_or_insert(w, id) {
            st.twin = first;
        }
    }

    /// Codes wire value `w` of series `id` (`counter`: its class; `peer`:
    /// its twin's value, see [`WireState::as_peer`]).
    #[inline(always)]
    pub fn put_value(
        &mut self,
        e: &mut RangeEncoder,
        (id, st): (u32, &mut WireState),
        w: i64,
        counter: bool,
        peer: Option<i64>,
    ) {
        self.put_value_inner(e, (id, st), w, counter, peer);
        self.note(id, st, w, peer);
    }

    fn put_value_inner(
        &mut self,
        e: &mut RangeEncoder,
        (id, st): (u32, &mut WireState),
        w: i64,
        counter: bool,
        peer: Option<i64>,
    ) {
        let class = usize::from(counter);
        if !st.known {
            self.put_r(e, class, ABS_CTX, w);
            st.reset_to(w, counter);
            return;
        }
        let preds = st.predictions(counter, peer);
        let best = st.best();
        let pred = preds[best];
        let ctx = st.expected_len_of(best);
        if !counter {
            if !self.hists.put(e, id, w) {
                self.put_r(e, class, ctx, w.wrapping_sub(pred));
                self.hists.after_plain(id, st.mean, ctx);
            }
        } else {
            // On the step grid: the residual in units of the step (the
            // grid units found once, for the code and the upkeep).
            let grid = st.grid_units(w, counter);
            let u = if st.step > 1 {
                let u = grid.map(|q| st.stepped_at(q, pred));
                e.bit(&mut st.on_grid, u.is_some());
                u
            } else {
                None
            };
            self.put_r(e, class, ctx, u.unwrap_or(w.wrapping_sub(pred)));
            // One call site, inlined (its call cost ~20 instructions a value).
            st.learn_grid(w, counter, &preds, grid);
            return;
        }
        st.learn_grid(w, counter, &preds, None);
    }

    /// Decodes a wire value coded by [`LinkModel::put_value`]; `None` when
    /// the bits cannot be a value (hostile input).
    pub fn get_value(
        &mut self,
        d: &mut RangeDecoder<'_>,
        (id, st): (u32, &mut WireState),
        counter: bool,
        peer: Option<i64>,
    ) -> Option<i64> {
        let w = self.get_value_inner(d, (id, st), counter, peer)?;
        self.note(id, st, w, peer);
        Some(w)
    }

    fn get_value_inner(
        &mut self,
        d: &mut RangeDecoder<'_>,
        (id, st): (u32, &mut WireState),
        counter: bool,
        peer: Option<i64>,
    ) -> Option<i64> {
        let class = usize::from(counter);
        if !st.known {
            let w = self.get_r(d, class, ABS_CTX)?;
            st.reset_to(w, counter);
            return Some(w);
        }
        let preds = st.predictions(counter, peer);
        let best = st.best();
        let pred = preds[best];
        let ctx = st.expected_len_of(best);
        if !counter {
            let w = match self.hists.get(d, id) {
                Some(w) => w,
                None => {
                    let w = pred.wrapping_add(self.get_r(d, class, ctx)?);
                    self.hists.after_plain(id, st.mean, ctx);
                    w
                }
            };
            st.learn_from(w, counter, &preds);
            return Some(w);
        }
        let w = if counter && st.step > 1 && d.bit(&mut st.on_grid) {
            st.unstep(self.get_r(d, class, ctx)?, pred)
        } else {
            pred.wrapping_add(self.get_r(d, class, ctx)?)
        };
        st.learn_from(w, counter, &preds);
        Some(w)
    }
}

#[cfg(test)]
mod tests;

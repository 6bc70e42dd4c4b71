//! A series' coding state, kept identical on both ends of a link: its
//! last wire value, the predictors' statistics and what learning a new
//! value updates.

use super::*;

/// Per-series coding state, identical on both ends of a link.
///
/// 72 bytes: a dense walk reads every member's state in id order, so the
/// state's size is the cache lines a tick touches per member (112 bytes
/// before issue 3's cut: probabilities packed in a `u16`, one running mean
/// field for both classes, the twin without an `Option` tag, the keyframe
/// reference kept by the owner, see [`WireState::encode_column`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WireState {
    /// Last wire value.
    pub last: i64,
    /// Last increment (delta-of-delta predictor).
    pub inc: i64,
    /// Running mean: of the wire value for a gauge, of the increments for
    /// a counter (a series' class never changes without a definition,
    /// which starts its state afresh).
    pub(super) mean: i64,
    /// Counters: the greatest common divisor of every increment seen (0:
    /// none yet). Increments on this grid (CPU seconds in 0.01 s, bytes in
    /// sectors) are coded in units of it.
    pub(super) step: u64,
    /// Recent residual bit length of each predictor, in 1/16 bits.
    pub(super) cost: [u16; PREDICTORS],
    /// P(unchanged), given how many ticks ago the series last changed.
    pub(super) flag: [Prob; FLAG_CTX * 2],
    /// Walk count of its source (see [`LinkModel::start_section`]) at the
    /// series' last change or (re)definition: its age is derived from it
    /// when needed, so a section that skips the series (sparse) costs it
    /// nothing.
    pub(super) mark: u32,
    /// An earlier series of the same walk that last took the same wire
    /// value as this one in the same section (Go's `alloc_bytes` and
    /// `heap_alloc_bytes`, the kernel's `KReclaimable` and `SReclaimable`):
    /// its value now is the fourth prediction. [`NO_TWIN`]: none (a twin's
    /// id is below its own, so never `u32::MAX`).
    pub(super) twin: u32,
    /// P(the increment is on the step grid).
    pub(super) on_grid: Prob,
    /// Receiver holds `last` (else the next value goes absolute).
    pub known: bool,
}

/// [`WireState::twin`]'s "no twin".
pub(super) const NO_TWIN: u32 = u32::MAX;

impl Default for WireState {
    fn default() -> Self {
        Self {
            last: 0,
            inc: 0,
            mean: 0,
            step: 0,
            cost: [0; PREDICTORS],
            flag: [Prob::default(); FLAG_CTX * 2],
            mark: 0,
            twin: NO_TWIN,
            on_grid: Prob::default(),
            known: false,
        }
    }
}

impl WireState {
    /// The value now held is `w`, sent absolute: restart the predictors but
    /// keep the statistics (they describe the series, not its level); a
    /// gauge's mean starts at `w`, a counter's mean increment stays.
    pub(super) fn reset_to(&mut self, w: i64, counter: bool) {
        self.known = true;
        self.last = w;
        self.inc = 0;
        if !counter {
            self.mean = w;
        }
    }

    /// Starts the series afresh (a definition) in a source whose walk
    /// count is `walks`.
    pub fn defined(walks: u32) -> Self {
        Self {
            mark: walks,
            ..Self::default()
        }
    }

    /// Packed sections of its source since the series last changed, before
    /// walk `walk` (saturating at `FLAG_CTX - 1`): the flag context.
    pub(super) fn age_at(&self, walk: u32) -> usize {
        (walk.wrapping_sub(self.mark).saturating_sub(1) as usize).min(FLAG_CTX - 1)
    }

    pub(super) fn predictions(&self, counter: bool, peer: Option<i64>) -> [i64; PREDICTORS] {
        [
            self.last,
            self.last.wrapping_add(self.inc),
            if counter {
                self.last.wrapping_add(self.mean)
            } else {
                self.mean
            },
            peer.unwrap_or(self.last),
        ]
    }

    /// True when `w` is what a repeat section gives this series: the value
    /// held plus its last increment (a counter at its steady rate).
    #[inline]
    pub fn repeats(&self, w: i64) -> bool {
        self.known && w == self.last.wrapping_add(self.inc)
    }

    /// Applies a repeat section to this series (known) in walk `walk`: it
    /// changes by its last increment again. No range-coded bits and no
    /// predictor costs move (both ends skip them alike); the running means
    /// follow. Returns the new wire value.
    #[inline]
    pub fn repeat(&mut self, walk: u32, counter: bool) -> i64 {
        let w = self.last.wrapping_add(self.inc);
        self.mean = if counter {
            running_mean(self.mean, self.inc)
        } else {
            running_mean(self.mean, w)
        };
        self.last = w;
        self.mark = walk;
        w
    }

    /// The twin this series predicts from, if any.
    #[inline(always)]
    pub fn twin(&self) -> Option<u32> {
        (self.twin != NO_TWIN).then_some(self.twin)
    }

    /// What a series twinned to this one sees in walk `walk`: the value
    /// held, and whether it changed in that walk. `None` when nothing is held.
    pub fn as_peer(&self, walk: u32) -> Option<(i64, bool)> {
        self.known.then_some((self.last, self.mark == walk))
    }

    pub(super) fn best(&self) -> usize {
        let mut b = 0;
        for i in 1..PREDICTORS {
            if self.cost[i] < self.cost[b] {
                b = i;
            }
        }
        b
    }

    /// Expected residual length of the chosen predictor, in bits.
    /// `best`: the chosen predictor ([`WireState::best`], found already).
    pub(super) fn expected_len_of(&self, best: usize) -> usize {
        let c = i32::from(self.cost[best]) * LEN_RES;
        ((c + COST_ONE / 2) / COST_ONE).clamp(0, 64 * LEN_RES) as usize
    }

    /// The residual of `w` against prediction `p` as coded: for a counter
    /// whose increment lies on its step grid, in units of the step (the
    /// prediction rounded to the grid); else plain. `None`: off the grid.
    #[cfg(test)]
    pub(super) fn stepped(&self, w: i64, p: i64, counter: bool) -> Option<i64> {
        self.grid_units(w, counter).map(|q| self.stepped_at(q, p))
    }

    /// The increment to `w` in units of the step, when the series is a
    /// counter with a step and `w` lies on its grid (see `stepped`); the
    /// same for every predictor, so `learn` asks once.
    #[inline]
    pub(super) fn grid_units(&self, w: i64, counter: bool) -> Option<i128> {
        if !counter || self.step < 2 {
            return None;
        }
        // i64 arithmetic when nothing overflows (the i128 path gives the
        // same numbers; this one avoids 128-bit division calls).
        if let (Ok(step), Some(d)) = (i64::try_from(self.step), w.checked_sub(self.last)) {
            return (d.rem_euclid(step) == 0).then(|| i128::from(d / step));
        }
        let step = i128::from(self.step);
        let d = i128::from(w) - i128::from(self.last);
        (d.rem_euclid(step) == 0).then(|| d / step)
    }

    /// `stepped` for an on-grid value of `q` step units against prediction `p`.
    #[inline]
    pub(super) fn stepped_at(&self, q: i128, p: i64) -> i64 {
        // |q| and |pu| are below 2^64 / 2: the difference fits an i128
        // and is truncated to i64 identically on both ends.
        (q - self.grid_point(p)) as i64
    }

    /// Nearest grid point to prediction `p`, in steps from the value held,
    /// ties towards -inf (the series has a step, >= 2).
    #[inline]
    pub(super) fn grid_point(&self, p: i64) -> i128 {
        if p == self.last {
            // 0 units away (step / 2 < step): no division. The last-value
            // predictor, and the twin's and the mean's often, land here.
            return 0;
        }
        match (i64::try_from(self.step), p.checked_sub(self.last)) {
            (Ok(step), Some(off)) if off.checked_add(step / 2).is_some() => {
                i128::from((off + step / 2).div_euclid(step))
            }
            _ => {
                let step = i128::from(self.step);
                let off = i128::from(p) - i128::from(self.last);
                (off + step / 2).div_euclid(step)
            }
        }
    }

    /// The value a stepped residual `u` stands for (inverse of `stepped`).
    pub(super) fn unstep(&self, u: i64, p: i64) -> i64 {
        let step = i128::from(self.step);
        let pu = self.grid_point(p);
        // Exact modulo 2^64, which is all the i64 result keeps.
        let d = pu.wrapping_add(i128::from(u)).wrapping_mul(step);
        i128::from(self.last).wrapping_add(d) as i64
    }

    /// Takes `w` as the new value (known series), updating every predictor.
    pub(super) fn learn(&mut self, w: i64, counter: bool, peer: Option<i64>) {
        self.learn_from(w, counter, &self.predictions(counter, peer));
    }

    /// [`WireState::learn`] with the predictions already made (a coded
    /// value made them to pick its predictor: they are not made twice).
    pub(super) fn learn_from(&mut self, w: i64, counter: bool, preds: &[i64; PREDICTORS]) {
        self.learn_inlined(w, counter, preds);
    }

    /// [`WireState::learn_from`], inlined where a value is coded.
    #[inline(always)]
    pub(super) fn learn_inlined(&mut self, w: i64, counter: bool, preds: &[i64; PREDICTORS]) {
        let grid = self.grid_units(w, counter);
        self.learn_grid(w, counter, preds, grid);
    }

    /// [`WireState::learn_inlined`] with `grid`, the value's
    /// [`WireState::grid_units`], found already (a coded counter asked).
    #[inline(always)]
    pub(super) fn learn_grid(
        &mut self,
        w: i64,
        counter: bool,
        preds: &[i64; PREDICTORS],
        grid: Option<i128>,
    ) {
        // The residuals first, the costs then in one straight loop (no
        // test of the grid per predictor).
        let r: [i64; PREDICTORS] = match grid {
            Some(q) => preds.map(|p| self.stepped_at(q, p)),
            None => preds.map(|p| w.wrapping_sub(p)),
        };
        for (c, r) in self.cost.iter_mut().zip(r) {
            let n = bit_len(zigzag(r)) as i32 * COST_ONE;
            let cur = i32::from(*c);
            // The step lands between cur and n (the shift floors towards
            // n when n < cur), both within u16: no clamp is needed.
            *c = (cur + ((n - cur) >> COST_SHIFT)) as u16;
        }
        if counter {
            let (d, wrapped) = w.overflowing_sub(self.last);
            let d = d.unsigned_abs();
            // gcd(1, d) is 1: most counters settle there, skip the divisions;
            // an increment on the grid (`grid`: a multiple of the step, and
            // `d` that very increment, not wrapped) leaves the step as it is.
            if d != 0 && self.step != 1 && (grid.is_none() || wrapped) {
                self.step = gcd(self.step, d);
            }
        }
        self.inc = w.wrapping_sub(self.last);
        // A counter's running mean is of the increments: a counter whose
        // rate is noise around a level is best predicted by that level.
        self.mean = running_mean(self.mean, if counter { self.inc } else { w });
        self.last = w;
    }

    /// Column (unpacked) coding, sender side: the delta to transmit for `w`.
    /// Absolute when the receiver holds nothing; for counters the change of
    /// the increment. Mirrors [`WireState::apply`].
    pub fn encode(&mut self, w: i64, counter: bool) -> i64 {
        if !self.known {
            self.reset_to(w, counter);
            return w;
        }
        let d = if counter {
            w.wrapping_sub(self.last).wrapping_sub(self.inc)
        } else {
            w.wrapping_sub(self.last)
        };
        self.learn(w, counter, None);
        d
    }

    /// Column coding of a value, sender side; in a keyframe (where every
    /// value is absolute) as the change from `kf`, the series' value in the
    /// previous keyframe (0: none), so the column is mostly zeros for zstd.
    /// `kf` is kept by the owner beside the state, not in it (read only by
    /// keyframes: a delta tick's walk need not carry it through the cache);
    /// it starts at 0 with the state ([`WireState::defined`]) and goes back
    /// to 0 when the receiver drops the series.
    pub fn encode_column(&mut self, w: i64, counter: bool, keyframe: bool, kf: &mut i64) -> i64 {
        if keyframe {
            let d = w.wrapping_sub(*kf);
            *kf = w;
            self.encode(w, counter);
            return d;
        }
        self.encode(w, counter)
    }

    /// Column coding, receiver side (inverse of [`WireState::encode_column`],
    /// with the receiver's `kf`).
    pub fn apply_column(&mut self, d: i64, counter: bool, keyframe: bool, kf: &mut i64) -> i64 {
        if keyframe {
            let w = kf.wrapping_add(d);
            *kf = w;
            self.known = false;
            return self.apply(w, counter);
        }
        self.apply(d, counter)
    }

    /// Column coding, receiver side: the wire value delta `d` stands for.
    pub fn apply(&mut self, d: i64, counter: bool) -> i64 {
        if !self.known {
            self.reset_to(d, counter);
            return d;
        }
        let w = if counter {
            self.last.wrapping_add(self.inc).wrapping_add(d)
        } else {
            self.last.wrapping_add(d)
        };
        self.learn(w, counter, None);
        w
    }
}

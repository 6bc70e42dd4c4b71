//! Per-series prediction and the adaptive models of a packed section.
//!
//! Both ends of a link keep, per series, the same [`WireState`] (last value,
//! last increment, running mean, how well each predictor did lately, how
//! often the series changes) and, per link, one [`LinkModel`] of shared
//! statistics. Everything is a deterministic function of the values already
//! sent on the link, so nothing about the models travels on the wire.
//!
//! A packed section codes, for every live series of its source in id order:
//!
//! ```text
//! changed?  one adaptive bit; context: this series, did it change last time
//! if changed:
//!   residual r = w - prediction          (w: integer wire value, quantise.rs)
//!   u = zigzag(r)                        (0, -1, 1, -2, .. -> 0, 1, 2, 3, ..)
//!   n = bit length of u (0..=64)         7-bit adaptive tree; context: the
//!                                        series' expected length k, gauge or counter
//!   the bits of u below its leading one  top two adaptive (context n), rest raw
//! ```
//!
//! The prediction is whichever of three predictors has lately produced the
//! shortest residuals for this series (ties: the first):
//! * last value (delta): gauges that wander;
//! * last value + last increment (delta of delta): counters with a steady rate;
//! * running mean: gauges that are noise around a level (coding `w - mean`
//!   costs about a bit less than `w - last` for i.i.d. noise).
//!
//! A series the receiver holds no value for (new, redefined, after a special
//! or a keyframe column) is coded absolute, in a context of its own.

use super::rangecoder::{Prob, RangeDecoder, RangeEncoder};

const PREDICTORS: usize = 3;
/// Fixed-point scale of the predictor costs (1/16 bit).
const COST_ONE: i32 = 16;
/// Length contexts: expected lengths 0..=64, then one for absolute values.
const LEN_CTX: usize = 66;
const ABS_CTX: usize = 65;
/// Predictor costs forget with weight 1/16 per value: slow enough to settle
/// on the right predictor for noise, fast enough to follow a phase change.
const COST_SHIFT: u32 = 4;
/// The running mean moves 1/16 of the way to each new value (~16 values).
const MEAN_DIV: i128 = 16;
/// Series classes with their own length statistics: gauges, counters.
const CLASSES: usize = 2;

/// Per-series coding state, identical on both ends of a link.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct WireState {
    /// Receiver holds `last` (else the next value goes absolute).
    pub known: bool,
    /// Last wire value.
    pub last: i64,
    /// Last increment (delta-of-delta predictor).
    pub inc: i64,
    /// Running mean of the wire value.
    mean: i64,
    /// Recent residual bit length of each predictor, in 1/16 bits.
    cost: [u16; PREDICTORS],
    /// P(unchanged), given whether the series changed the last time.
    flag: [Prob; 2],
    changed_last: bool,
}

impl WireState {
    /// The value now held is `w`, sent absolute: restart the predictors but
    /// keep the statistics (they describe the series, not its level).
    fn reset_to(&mut self, w: i64) {
        self.known = true;
        self.last = w;
        self.inc = 0;
        self.mean = w;
    }

    fn predictions(&self) -> [i64; PREDICTORS] {
        [self.last, self.last.wrapping_add(self.inc), self.mean]
    }

    fn best(&self) -> usize {
        let mut b = 0;
        for i in 1..PREDICTORS {
            if self.cost[i] < self.cost[b] {
                b = i;
            }
        }
        b
    }

    /// Expected residual length of the chosen predictor, in bits.
    fn expected_len(&self) -> usize {
        ((i32::from(self.cost[self.best()]) + COST_ONE / 2) / COST_ONE).clamp(0, 64) as usize
    }

    /// Takes `w` as the new value (known series), updating every predictor.
    fn learn(&mut self, w: i64) {
        let preds = self.predictions();
        for (c, p) in self.cost.iter_mut().zip(preds) {
            let n = bit_len(zigzag(w.wrapping_sub(p))) as i32 * COST_ONE;
            let cur = i32::from(*c);
            *c = (cur + ((n - cur) >> COST_SHIFT)).clamp(0, i32::from(u16::MAX)) as u16;
        }
        self.inc = w.wrapping_sub(self.last);
        self.last = w;
        // mean += (w - mean) / 16, in i128 so extreme values cannot overflow;
        // the result lies between mean and w, so it fits an i64.
        let m = i128::from(self.mean);
        self.mean = (m + (i128::from(w) - m).div_euclid(MEAN_DIV)) as i64;
    }

    /// Column (unpacked) coding, sender side: the delta to transmit for `w`.
    /// Absolute when the receiver holds nothing; for counters the change of
    /// the increment. Mirrors [`WireState::apply`].
    pub fn encode(&mut self, w: i64, counter: bool) -> i64 {
        if !self.known {
            self.reset_to(w);
            return w;
        }
        let d = if counter {
            w.wrapping_sub(self.last).wrapping_sub(self.inc)
        } else {
            w.wrapping_sub(self.last)
        };
        self.learn(w);
        d
    }

    /// Column coding, receiver side: the wire value delta `d` stands for.
    pub fn apply(&mut self, d: i64, counter: bool) -> i64 {
        if !self.known {
            self.reset_to(d);
            return d;
        }
        let w = if counter {
            self.last.wrapping_add(self.inc).wrapping_add(d)
        } else {
            self.last.wrapping_add(d)
        };
        self.learn(w);
        w
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

fn bit_len(u: u64) -> u32 {
    64 - u.leading_zeros()
}

/// Statistics shared by every series of a link, identical on both ends.
#[derive(Clone, Debug)]
pub(crate) struct LinkModel {
    /// Bit-length trees, `[class][context]`, 7 levels (lengths 0..=64).
    len: Vec<[Prob; 128]>,
    /// The two bits below the leading one, `[class][length]`: 3 nodes.
    top: Vec<[Prob; 3]>,
}

impl Default for LinkModel {
    fn default() -> Self {
        Self {
            len: vec![[Prob::default(); 128]; CLASSES * LEN_CTX],
            top: vec![[Prob::default(); 3]; CLASSES * 65],
        }
    }
}

impl LinkModel {
    /// Codes whether series `st` changed in this section.
    pub fn put_flag(&mut self, e: &mut RangeEncoder, st: &mut WireState, changed: bool) {
        e.bit(&mut st.flag[usize::from(st.changed_last)], changed);
        st.changed_last = changed;
    }

    /// Decodes whether series `st` changed in this section.
    pub fn get_flag(&mut self, d: &mut RangeDecoder<'_>, st: &mut WireState) -> bool {
        let changed = d.bit(&mut st.flag[usize::from(st.changed_last)]);
        st.changed_last = changed;
        changed
    }

    /// Codes wire value `w` of a series (`counter`: its class).
    pub fn put_value(&mut self, e: &mut RangeEncoder, st: &mut WireState, w: i64, counter: bool) {
        let class = usize::from(counter);
        if !st.known {
            self.put_u(e, class, ABS_CTX, zigzag(w));
            st.reset_to(w);
            return;
        }
        let pred = st.predictions()[st.best()];
        self.put_u(e, class, st.expected_len(), zigzag(w.wrapping_sub(pred)));
        st.learn(w);
    }

    /// Decodes a wire value coded by [`LinkModel::put_value`]; `None` when
    /// the bits cannot be a value (hostile input).
    pub fn get_value(
        &mut self,
        d: &mut RangeDecoder<'_>,
        st: &mut WireState,
        counter: bool,
    ) -> Option<i64> {
        let class = usize::from(counter);
        if !st.known {
            let w = unzigzag(self.get_u(d, class, ABS_CTX)?);
            st.reset_to(w);
            return Some(w);
        }
        let pred = st.predictions()[st.best()];
        let u = self.get_u(d, class, st.expected_len())?;
        let w = pred.wrapping_add(unzigzag(u));
        st.learn(w);
        Some(w)
    }

    fn put_u(&mut self, e: &mut RangeEncoder, class: usize, ctx: usize, u: u64) {
        let n = bit_len(u);
        let tree = &mut self.len[class * LEN_CTX + ctx];
        let mut node = 1usize;
        for i in (0..7).rev() {
            let b = (n >> i) & 1 == 1;
            e.bit(&mut tree[node], b);
            node = node * 2 + usize::from(b);
        }
        if n < 2 {
            return; // 0 and 1 are fully described by their length
        }
        let rest = n - 1; // bits below the leading one
        let top = &mut self.top[class * 65 + n as usize];
        let b1 = (u >> (rest - 1)) & 1 == 1;
        e.bit(&mut top[0], b1);
        if rest >= 2 {
            let b2 = (u >> (rest - 2)) & 1 == 1;
            e.bit(&mut top[1 + usize::from(b1)], b2);
            e.direct(u, rest - 2);
        }
    }

    fn get_u(&mut self, d: &mut RangeDecoder<'_>, class: usize, ctx: usize) -> Option<u64> {
        let tree = &mut self.len[class * LEN_CTX + ctx];
        let mut node = 1usize;
        for _ in 0..7 {
            node = node * 2 + usize::from(d.bit(&mut tree[node]));
        }
        let n = (node - 128) as u32;
        if n > 64 {
            return None;
        }
        if n < 2 {
            return Some(u64::from(n));
        }
        let rest = n - 1;
        let top = &mut self.top[class * 65 + n as usize];
        let b1 = d.bit(&mut top[0]);
        let mut u = 2 | u64::from(b1);
        if rest >= 2 {
            let b2 = d.bit(&mut top[1 + usize::from(b1)]);
            u = (u << 1) | u64::from(b2);
            u = (u << (rest - 2)) | d.direct(rest - 2);
        }
        Some(u)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn extreme() -> impl Strategy<Value = i64> {
        prop_oneof![
            Just(i64::MIN),
            Just(i64::MAX),
            Just(0i64),
            Just(-1i64),
            -1000i64..1000,
            any::<i64>(),
        ]
    }

    #[test]
    fn zigzag_round_trips_extremes() {
        for r in [i64::MIN, i64::MIN + 1, -1, 0, 1, i64::MAX - 1, i64::MAX] {
            assert_eq!(unzigzag(zigzag(r)), r);
        }
        assert_eq!(zigzag(i64::MIN), u64::MAX);
    }

    proptest! {
        /// Any sequence of (changed?, value) per series round-trips, and both
        /// ends' states stay identical.
        #[test]
        fn values_round_trip(
            seq in prop::collection::vec((0usize..4, any::<bool>(), extreme(), any::<bool>(), any::<bool>()), 0..300)
        ) {
            let mut tx = [WireState::default(); 4];
            let mut rx = [WireState::default(); 4];
            let (mut mt, mut mr) = (LinkModel::default(), LinkModel::default());
            let mut e = RangeEncoder::new(Vec::new());
            let mut after = Vec::with_capacity(seq.len());
            for &(s, changed, w, counter, forget) in &seq {
                if forget { tx[s].known = false; }
                mt.put_flag(&mut e, &mut tx[s], changed);
                if changed { mt.put_value(&mut e, &mut tx[s], w, counter); }
                after.push(tx[s]);
            }
            let bytes = e.finish();
            let mut d = RangeDecoder::new(&bytes);
            for (&(s, changed, w, counter, forget), want) in seq.iter().zip(&after) {
                if forget { rx[s].known = false; }
                prop_assert_eq!(mr.get_flag(&mut d, &mut rx[s]), changed);
                if changed {
                    prop_assert_eq!(mr.get_value(&mut d, &mut rx[s], counter), Some(w));
                }
                prop_assert_eq!(&rx[s], want);
            }
            prop_assert!(d.finish().is_ok());
        }

        /// Column coding round-trips arbitrary values too.
        #[test]
        fn columns_round_trip(vals in prop::collection::vec((extreme(), any::<bool>()), 0..100)) {
            let (mut tx, mut rx) = (WireState::default(), WireState::default());
            for (w, counter) in vals {
                let d = tx.encode(w, counter);
                prop_assert_eq!(rx.apply(d, counter), w);
                prop_assert_eq!(rx, tx);
            }
        }
    }
}

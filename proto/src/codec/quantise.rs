//! Lossy, bounded quantisation: what value a sender transmits for a true value.
//!
//! Three wire encodings, each mapping an f64 to an integer *wire value* whose
//! successive differences are small (so they cost a byte or two), and back:
//!
//! * [`Encoding::LogGauge`] (the default for gauges): `|v|` on a logarithmic
//!   grid whose cells are as wide as the relative bound allows, `ln|v|` in
//!   steps of `2 ln(1+eps)`: every reconstruction is the geometric centre of
//!   its cell, so the whole error budget is used (a mantissa grid wastes
//!   ~0.56 bit per value: its cells are 1.5x finer than needed on average).
//!   Wire value `sign(v) * (K0 + k)`, monotone in `v`; zero is exactly zero.
//! * [`Encoding::Gauge`]: the f64 rounded to `mantissa_bits` significant bits
//!   (used when the bound is below 1e-9, i.e. exact). The wire value is the
//!   rounded IEEE-754 bit pattern shifted right, monotone in the value.
//!   Error `<= 2^-(bits+1) * |v|`; zero is exactly zero.
//! * [`Encoding::CounterInt`]: an integer-valued counter, sent exactly.
//! * [`Encoding::CounterFloat`]: a float counter on the grid `k / scale`;
//!   `k = round(v * scale)`. Error `<= 1/(2*scale)`, never accumulates (the
//!   absolute value is quantised, so each tick's rounding residual is carried
//!   into the next rather than summed), and the decoded value `k / scale` is a
//!   correctly rounded division, hence monotone in `k`: the reconstructed
//!   counter never decreases unless the true one did.
//!
//! Values the grid cannot carry (NaN, infinities, subnormals, out of range)
//! go as raw bits ("specials"), exactly.
//!
//! [`Quantiser`] holds one series' sender-side state and decides, per tick,
//! whether the value changed beyond its bound (only then is anything sent).

use crate::model::MetricKind;

/// Default relative error bound for gauges.
pub const DEFAULT_GAUGE_EPSILON: f64 = 1e-3;
/// Default grid steps per unit for float counters (resolution 1e-3).
pub const DEFAULT_COUNTER_SCALE: u32 = 1000;

/// Largest integer an f64 holds exactly.
const MAX_EXACT: f64 = 9_007_199_254_740_992.0; // 2^53

/// Smallest relative bound the logarithmic grid serves (1 part per billion);
/// tighter bounds use the mantissa grid.
pub const MIN_LOG_EPSILON: f64 = 1e-9;
/// Largest relative bound the logarithmic grid serves (parts per billion).
const MAX_LOG_PPB: u32 = 500_000_000;

/// How one series' values are represented on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// Relative-error gauge on a logarithmic grid: relative error
    /// `<= ppb * 1e-9` (1..=5e8).
    LogGauge {
        /// The relative bound, in parts per billion.
        ppb: u32,
    },
    /// Relative-error gauge keeping this many significant mantissa bits (0..=52).
    Gauge {
        /// Significant bits kept after the leading one.
        mantissa_bits: u8,
    },
    /// Small integer-valued gauge (`|v| <= 1 / (2 eps)`, where the
    /// logarithmic grid is no finer than the integers), exact: a gauge of
    /// process or socket counts reads 3, not 2.9984, and costs less.
    GaugeInt,
    /// Integer-valued counter, exact.
    CounterInt,
    /// Float counter on the absolute grid `k / scale`.
    CounterFloat {
        /// Grid steps per unit (the resolution is `1 / scale`).
        scale: u32,
    },
}

impl Encoding {
    /// The integer wire value for `v`, or `None` when `v` must go as raw bits.
    ///
    /// For a value already on this encoding's grid the result is exact, so a
    /// relay can decode and re-encode without drifting.
    #[inline]
    pub fn to_wire(self, v: f64) -> Option<i64> {
        match self {
            // The common case (an encoder asks it of every changed integer
            // counter), inline; `is_integral` is false for NaN and the
            // infinities.
            Encoding::GaugeInt | Encoding::CounterInt => {
                (is_integral(v) && v.abs() <= MAX_EXACT).then_some(v as i64)
            }
            _ => self.to_wire_grid(v),
        }
    }

    /// [`Encoding::to_wire`] of the grid encodings, out of line.
    #[inline(never)]
    fn to_wire_grid(self, v: f64) -> Option<i64> {
        if !v.is_finite() {
            return None;
        }
        match self {
            Encoding::Gauge { mantissa_bits } => gauge_index(v, mantissa_bits),
            Encoding::LogGauge { ppb } => LogGrid::of(ppb).wire(v),
            Encoding::GaugeInt | Encoding::CounterInt => {
                (is_integral(v) && v.abs() <= MAX_EXACT).then_some(v as i64)
            }
            Encoding::CounterFloat { scale } => round_exact(v * f64::from(scale)),
        }
    }

    /// The value a wire value stands for. Total: any i64 maps to some f64
    /// (hostile input yields a strange value, never a panic).
    pub fn from_wire(self, w: i64) -> f64 {
        match self {
            Encoding::Gauge { mantissa_bits } => {
                if w == 0 {
                    return 0.0;
                }
                let shift = 52 - u32::from(mantissa_bits.min(52));
                let mag = f64::from_bits(w.unsigned_abs().wrapping_shl(shift));
                if w < 0 { -mag } else { mag }
            }
            Encoding::LogGauge { ppb } => LogGrid::of(ppb).value(w),
            Encoding::GaugeInt | Encoding::CounterInt => w as f64,
            Encoding::CounterFloat { scale } => w as f64 / f64::from(scale.max(1)),
        }
    }

    /// True for the two counter encodings.
    pub fn is_counter(self) -> bool {
        !matches!(
            self,
            Encoding::Gauge { .. } | Encoding::LogGauge { .. } | Encoding::GaugeInt
        )
    }

    /// The encoding a gauge with relative bound `epsilon` starts with:
    /// exact small integers while its values are such (see
    /// [`Quantiser::observe`]), else the logarithmic grid when it can serve
    /// the bound, else the mantissa grid.
    pub fn gauge_start(epsilon: f64) -> Self {
        if epsilon >= MIN_LOG_EPSILON {
            Encoding::GaugeInt
        } else {
            Self::gauge(epsilon)
        }
    }

    /// The grid encoding of a gauge with relative bound `epsilon`: the
    /// logarithmic grid when it can serve the bound, else the mantissa grid.
    pub fn gauge(epsilon: f64) -> Self {
        if epsilon >= MIN_LOG_EPSILON {
            let ppb = (epsilon * 1e9).floor().min(f64::from(MAX_LOG_PPB)) as u32;
            Encoding::LogGauge { ppb }
        } else {
            Encoding::Gauge {
                mantissa_bits: gauge_bits_for(epsilon),
            }
        }
    }
}

/// The logarithmic grid of a relative bound: `ln|v|` in steps of `step`.
///
/// A cell of width `step` around `k * step` holds the values whose relative
/// distance to `exp(k * step)` is at most `eps` when `step = 2 ln(1 + eps)`;
/// the step is shortened by a hair so that a receiver whose `exp` differs by
/// a few ulps from the sender's still reconstructs within the bound.
#[derive(Clone, Copy, Debug)]
struct LogGrid {
    eps: f64,
    step: f64,
    /// Offset making every normal value's wire magnitude >= 1 (0 is zero).
    k0: i64,
}

impl LogGrid {
    /// `new(ppb)`, remembered per thread for the last `ppb` asked: a
    /// sender's gauges share one bound, and `new` costs a logarithm.
    fn of(ppb: u32) -> Self {
        thread_local! {
            static LAST: std::cell::Cell<Option<(u32, LogGrid)>> = const { std::cell::Cell::new(None) };
        }
        LAST.with(|c| match c.get() {
            Some((p, g)) if p == ppb => g,
            _ => {
                let g = Self::new(ppb);
                c.set(Some((ppb, g)));
                g
            }
        })
    }

    fn new(ppb: u32) -> Self {
        let eps = f64::from(ppb.clamp(1, MAX_LOG_PPB)) * 1e-9;
        let step = 2.0 * eps.ln_1p() - 4e-12;
        // |ln v| < 745 for every positive finite f64.
        let k0 = (746.0 / step).ceil() as i64 + 1;
        Self { eps, step, k0 }
    }

    fn value(&self, w: i64) -> f64 {
        if w == 0 {
            return 0.0;
        }
        // Hostile magnitudes give 0 or infinity, never a panic. |w| <= 2^63
        // and 0 < k0 < 2^63, so |w| - k0 fits an i64: the wrapping u64
        // difference read as i64 is it exactly, and converts to the f64
        // an i128 would (both round to nearest) without the i128 call.
        let k = (w.unsigned_abs().wrapping_sub(self.k0 as u64) as i64) as f64;
        let mag = (k * self.step).exp();
        if w < 0 { -mag } else { mag }
    }

    /// The wire value of `v`: `index(v)`'s, without the `exp` that checks
    /// the cell when `ln|v| / step` lies within a quarter cell of the
    /// integer it rounds to (always, for a value already on the grid, as
    /// an encoder's are). There the first cell `index` tries is the one
    /// it returns: `v` is within `(1 + eps)^(1/2)` of the cell's value,
    /// far inside the bound, whatever a few ulps of `ln` and `exp` do.
    fn wire(&self, v: f64) -> Option<i64> {
        let a = v.abs();
        // Zero, subnormals, non-finite and the values near the ends of
        // the f64 range (where the cell's value could overflow) take the
        // full search.
        if (1e-300..1e300).contains(&a) {
            let x = a.ln() / self.step;
            let k = x.round();
            if (x - k).abs() <= 0.25 {
                let m = self.k0 + k as i64;
                return Some(if v < 0.0 { -m } else { m });
            }
        }
        self.index(v).map(|(w, _)| w)
    }

    /// The wire value of `v` and the value it stands for (`value` of it,
    /// found on the way).
    fn index(&self, v: f64) -> Option<(i64, f64)> {
        if v == 0.0 {
            return Some((0, 0.0));
        }
        let a = v.abs();
        if a < f64::MIN_POSITIVE {
            return None; // subnormal: too little precision for a relative bound
        }
        let k = (a.ln() / self.step).round() as i64;
        // The cell arithmetic is exact up to rounding; check, and take the
        // neighbour in the rare case rounding put `a` on the wrong side.
        for c in [k, k - 1, k + 1] {
            let m = self.k0 + c;
            let r = self.value(m);
            // A subnormal cell value would not encode again (see above): a
            // value within a cell of the smallest normal takes a normal
            // neighbour, or goes as raw bits.
            if r.is_finite() && r >= f64::MIN_POSITIVE && (r - a).abs() <= self.eps * a {
                // `value` of a negative index is the negated magnitude.
                return Some(if v < 0.0 { (-m, -r) } else { (m, r) });
            }
        }
        None
    }
}

/// Below this magnitude an f64 may have a fraction; from it on every
/// finite f64 is an integer.
const TWO_52: f64 = 4_503_599_627_370_496.0;

/// `v.fract() == 0.0`, without the libm `trunc` call that `fract` is on
/// baseline x86-64 (a leaf asks this of every counter value, three times a
/// tick: issue 3). Casts are exact below 2^52.
#[inline]
fn is_integral(v: f64) -> bool {
    if v.abs() < TWO_52 {
        (v as i64) as f64 == v
    } else {
        v.is_finite()
    }
}

/// `x.round()` (half away from zero) as an integer when it is at most
/// 2^53 in magnitude (`None` otherwise, NaN included), without libm's
/// `round` below 2^52 ([`round_small`]).
#[inline]
fn round_exact(x: f64) -> Option<i64> {
    round_small(x).or_else(|| {
        let k = x.round();
        (k.abs() <= MAX_EXACT).then_some(k as i64)
    })
}

/// `x.round()` (half away from zero) when `|x| < 2^52`, else `None` (NaN
/// included), so each caller bounds large values its own way. Below 2^52
/// the truncation and the fraction `x - trunc(x)` are exact, so comparing
/// the fraction with 1/2 rounds as `round` does, without a libm call (on
/// the baseline x86-64 target `f64::round` is one). The leaf's quantiser
/// and the gateway's chunk coder share it.
#[inline(always)]
pub fn round_small(x: f64) -> Option<i64> {
    if x.abs() < TWO_52 {
        let t = x as i64;
        let f = x - t as f64;
        return Some(if f >= 0.5 {
            t + 1
        } else if f <= -0.5 {
            t - 1
        } else {
            t
        });
    }
    None
}

/// Rounds `|v|` to `bits` mantissa bits and returns the signed grid index.
fn gauge_index(v: f64, bits: u8) -> Option<i64> {
    if v == 0.0 {
        return Some(0);
    }
    let a = v.abs();
    if a < f64::MIN_POSITIVE {
        return None; // subnormal: too little precision for a relative bound
    }
    let shift = 52 - u32::from(bits.min(52));
    let raw = a.to_bits();
    let rounded = if shift == 0 {
        raw
    } else {
        (raw + (1u64 << (shift - 1))) >> shift
    };
    if rounded << shift >= f64::INFINITY.to_bits() {
        return None; // rounding overflowed into infinity
    }
    // `rounded` < 2^63 >> shift, so the cast is lossless.
    let idx = rounded as i64;
    Some(if v < 0.0 { -idx } else { idx })
}

/// Mantissa bits needed so that rounding keeps relative error `<= epsilon`.
///
/// Rounding to `b` bits errs by at most `2^-(b+1)` relative, so this is the
/// smallest `b` with `2^-(b+1) <= epsilon` (52, i.e. exact, for epsilon 0).
pub fn gauge_bits_for(epsilon: f64) -> u8 {
    let mut b: u8 = 0;
    while b < 52 && 2f64.powi(-(i32::from(b) + 1)) > epsilon {
        b += 1;
    }
    b
}

/// Error bounds a sender applies, per series.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bounds {
    /// Gauges: `|sent - true| <= gauge_epsilon * |true|`.
    pub gauge_epsilon: f64,
    /// Float counters: grid steps per unit; error `<= 1/scale`.
    pub counter_scale: u32,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            gauge_epsilon: DEFAULT_GAUGE_EPSILON,
            counter_scale: DEFAULT_COUNTER_SCALE,
        }
    }
}

/// What a sender transmits after observing a value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Emit {
    /// The quantised value, exactly as the receiver will reconstruct it.
    pub value: f64,
    /// The series' encoding changed (integer counter turned float): the
    /// definition must be re-sent before this value.
    pub redefined: bool,
}

/// One series' sender-side quantisation state.
///
/// Invariant: `held` is what every receiver currently holds for the series
/// (the last emitted value), and it satisfies the series' error bound for the
/// last observed true value.
///
/// 24 bytes (40 before issue 3's cut), as a sender walks every series'
/// quantiser every tick: the held value is an `f64` and a flag, not an
/// `Option<f64>`; one bound field serves both classes (a gauge's relative
/// bound, a counter's grid scale: a series' kind never changes); the
/// encoding is kept as its kind and its one number, so the enum's padding
/// holds the flags.
#[derive(Clone, Debug)]
pub struct Quantiser {
    /// The held value, meaningful when `has_held`.
    held: f64,
    /// A gauge's relative bound (epsilon); a counter's grid steps per unit
    /// (its `counter_scale`, exact in an f64), for when it turns float.
    bound: f64,
    /// The encoding's number: mantissa bits, ppb or scale (0: none).
    arg: u32,
    /// The encoding's kind.
    kind: EncKind,
    has_held: bool,
}

/// [`Encoding`]'s variants without their numbers (see [`Quantiser`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EncKind {
    Gauge,
    LogGauge,
    GaugeInt,
    CounterInt,
    CounterFloat,
}

impl EncKind {
    /// `Encoding::is_counter` of this kind.
    #[inline(always)]
    fn is_counter(self) -> bool {
        matches!(self, EncKind::CounterInt | EncKind::CounterFloat)
    }

    /// `e` as its kind and its number.
    #[inline(always)]
    fn split(e: Encoding) -> (EncKind, u32) {
        match e {
            Encoding::Gauge { mantissa_bits } => (EncKind::Gauge, u32::from(mantissa_bits)),
            Encoding::LogGauge { ppb } => (EncKind::LogGauge, ppb),
            Encoding::GaugeInt => (EncKind::GaugeInt, 0),
            Encoding::CounterInt => (EncKind::CounterInt, 0),
            Encoding::CounterFloat { scale } => (EncKind::CounterFloat, scale),
        }
    }
}

impl Quantiser {
    /// A fresh quantiser for a series of `kind` under `bounds`.
    pub fn new(kind: MetricKind, bounds: Bounds) -> Self {
        let (encoding, bound) = match kind {
            MetricKind::Gauge => (
                Encoding::gauge_start(bounds.gauge_epsilon),
                bounds.gauge_epsilon,
            ),
            MetricKind::Counter => (Encoding::CounterInt, f64::from(bounds.counter_scale.max(1))),
        };
        let (kind, arg) = EncKind::split(encoding);
        Self {
            held: 0.0,
            bound,
            arg,
            kind,
            has_held: false,
        }
    }

    /// Takes `e` as the series' encoding.
    #[inline]
    fn set_encoding(&mut self, e: Encoding) {
        (self.kind, self.arg) = EncKind::split(e);
    }

    /// A gauge's relative bound.
    #[inline(always)]
    fn epsilon(&self) -> f64 {
        self.bound
    }

    /// A counter's grid scale (`bound` holds a `u32` exactly).
    fn scale(&self) -> u32 {
        self.bound as u32
    }

    /// The series' current wire encoding.
    #[inline]
    pub fn encoding(&self) -> Encoding {
        match self.kind {
            // Set from a `u8` (`split`), so it fits one.
            EncKind::Gauge => Encoding::Gauge {
                mantissa_bits: self.arg as u8,
            },
            EncKind::LogGauge => Encoding::LogGauge { ppb: self.arg },
            EncKind::GaugeInt => Encoding::GaugeInt,
            EncKind::CounterInt => Encoding::CounterInt,
            EncKind::CounterFloat => Encoding::CounterFloat { scale: self.arg },
        }
    }

    /// The value receivers hold, if anything was emitted yet.
    pub fn held(&self) -> Option<f64> {
        self.has_held.then_some(self.held)
    }

    /// Holds `q` from now on.
    #[inline(always)]
    fn hold(&mut self, q: f64) {
        self.held = q;
        self.has_held = true;
    }

    /// Observes the true value `v` for this tick; returns what to send, or
    /// `None` when the held value still satisfies the bound (nothing to send).
    #[inline]
    pub fn observe(&mut self, v: f64) -> Option<Emit> {
        // The two common cases inline (a leaf observes every series every
        // tick). An integer counter below 2^52, in one step: its wire value
        // is exact, the value sent is that integer, sent when its bits
        // differ from the held one's; anything else takes the general path.
        if self.kind == EncKind::CounterInt {
            // Below 2^52, adding 2^52 rounds `|v|` to an integer (the ulp
            // there is 1) and taking it off again is exact: equal exactly
            // when `v` is integral, without the saturating casts (false
            // for NaN). The value sent is `v` as `(v as i64) as f64`
            // gives it: `+ 0.0` turns -0 into +0 and leaves the rest.
            let a = v.abs();
            if a < TWO_52 && (a + TWO_52) - TWO_52 == a {
                let q = v + 0.0;
                if self.has_held && self.held.to_bits() == q.to_bits() {
                    return None;
                }
                self.hold(q);
                return Some(Emit {
                    value: q,
                    redefined: false,
                });
            }
        }
        if !self.kind.is_counter()
            && self.has_held
            && self.held.is_finite()
            && v.is_finite()
            && (v - self.held).abs() <= self.epsilon() * v.abs()
        {
            // A gauge within its deadband, before any grid arithmetic: the
            // held value still satisfies the bound.
            return None;
        }
        self.observe_general(v)
    }

    /// [`Quantiser::observe`] past its two inlined cases (an integer counter
    /// below 2^52, a gauge within its deadband, both already answered):
    /// out of line, so what is inlined stays small.
    #[inline(never)]
    fn observe_general(&mut self, v: f64) -> Option<Emit> {
        let mut redefined = false;
        if self.kind == EncKind::GaugeInt
            && v.is_finite()
            && (!is_integral(v) || v.abs() > 0.5 / self.epsilon())
        {
            // Not a small integer: the grid from now on (the logarithmic one
            // is as fine as the integers at 1/(2 eps) and finer below).
            self.set_encoding(Encoding::gauge(self.epsilon()));
            redefined = self.has_held;
        }
        // An integer counter's wire value, found once (quantising it again
        // would give the same).
        let mut int_wire = None;
        if self.kind == EncKind::CounterInt && v.is_finite() {
            int_wire = Encoding::CounterInt.to_wire(v);
            if int_wire.is_none() {
                // First non-integral (or huge) value: this counter is a float
                // one from now on. Monotone across the switch: the held
                // integer n has n*scale exact, so round(v*scale) >= n*scale
                // for v >= n.
                self.set_encoding(Encoding::CounterFloat {
                    scale: self.scale(),
                });
                redefined = self.has_held;
            }
        }
        let q = match int_wire {
            Some(w) => Encoding::CounterInt.from_wire(w),
            None => self.quantise(v),
        };
        let changed = match self.held() {
            None => true,
            Some(h) if h.to_bits() == q.to_bits() => false,
            Some(h) => match self.kind {
                EncKind::Gauge | EncKind::LogGauge | EncKind::GaugeInt => {
                    // Deadband: keep the held value while it is within the
                    // bound of the true one (both finite; else bits decide).
                    !(h.is_finite() && v.is_finite() && (v - h).abs() <= self.epsilon() * v.abs())
                }
                _ => true,
            },
        };
        if !changed && !redefined {
            return None;
        }
        self.hold(q);
        Some(Emit {
            value: q,
            redefined,
        })
    }

    /// Forces the next observation to be sent (e.g. the series was retired
    /// and comes back).
    pub fn forget(&mut self) {
        self.has_held = false;
    }

    /// The on-grid value for `v`, or `v` itself when it must go as raw bits.
    pub fn quantise(&self, v: f64) -> f64 {
        if self.kind == EncKind::LogGauge {
            let ppb = self.arg;
            // The grid search already computed the cell's value.
            return match v.is_finite().then(|| LogGrid::of(ppb).index(v)).flatten() {
                Some((_, q)) => q,
                None => v,
            };
        }
        let encoding = self.encoding();
        match encoding.to_wire(v) {
            Some(w) => encoding.from_wire(w),
            None => v,
        }
    }
}

#[cfg(test)]
mod tests;

//! Tests of the quantisers: bounds, grids and their fast paths.

use super::*;
use proptest::prelude::*;

/// A quantiser stays 24 bytes, an `Option` of one too (a sender keeps one
/// per series beside two `u32`s, one 32-byte slot: issue 3).
#[test]
fn a_quantiser_is_24_bytes() {
    assert_eq!(std::mem::size_of::<Quantiser>(), 24);
    assert_eq!(std::mem::size_of::<Option<Quantiser>>(), 24);
}

/// The encoding a quantiser keeps as its kind and number comes back whole,
/// for every encoding.
#[test]
fn encodings_split_and_come_back() {
    let mut q = Quantiser::new(MetricKind::Gauge, Bounds::default());
    for e in [
        Encoding::Gauge { mantissa_bits: 0 },
        Encoding::Gauge { mantissa_bits: 52 },
        Encoding::LogGauge { ppb: 1 },
        Encoding::LogGauge { ppb: 500_000_000 },
        Encoding::GaugeInt,
        Encoding::CounterInt,
        Encoding::CounterFloat { scale: 1 },
        Encoding::CounterFloat { scale: u32::MAX },
    ] {
        q.set_encoding(e);
        assert_eq!(q.encoding(), e);
    }
}

/// A counter keeps its scale in the shared bound field and turns float on
/// it; a gauge keeps its epsilon there.
#[test]
fn the_bound_field_serves_both_kinds() {
    let b = Bounds {
        gauge_epsilon: 0.25,
        counter_scale: 4_000_000_000,
    };
    let mut c = Quantiser::new(MetricKind::Counter, b);
    assert_eq!(c.encoding(), Encoding::CounterInt);
    let e = c.observe(1.5).expect("first value is sent");
    assert_eq!(
        c.encoding(),
        Encoding::CounterFloat {
            scale: 4_000_000_000
        }
    );
    assert_eq!(e.value, 1.5);
    let mut g = Quantiser::new(MetricKind::Gauge, b);
    let h = g.observe(100.0).expect("first value is sent").value;
    assert!((h - 100.0).abs() <= 25.0, "held {h}");
    assert!(g.observe(h * 1.1).is_none(), "within 25 %");
    assert!(g.observe(h * 2.0).is_some(), "beyond 25 %");
}

#[test]
fn bits_for_default_epsilon() {
    assert_eq!(gauge_bits_for(1e-3), 9);
    assert_eq!(gauge_bits_for(0.0), 52);
    assert_eq!(gauge_bits_for(0.5), 0);
}

#[test]
fn log_gauge_zero_one_and_specials() {
    let e = Encoding::gauge(1e-3);
    assert_eq!(e.to_wire(0.0), Some(0));
    assert_eq!(e.from_wire(0), 0.0, "zero stays exactly zero");
    let one = e.to_wire(1.0).expect("one");
    assert_eq!(e.from_wire(one), 1.0, "exp(0) is exact");
    assert_eq!(e.to_wire(f64::NAN), None);
    assert_eq!(e.to_wire(f64::NEG_INFINITY), None);
    assert_eq!(e.to_wire(5e-320), None, "subnormals go raw");
    // The cells are as wide as the bound allows: ~347 per octave at 1e-3.
    let (a, b) = (e.to_wire(1.0).expect("1"), e.to_wire(2.0).expect("2"));
    assert!((340..=350).contains(&(b - a)), "{}", b - a);
    for w in [i64::MIN, i64::MAX, -1, 1] {
        let _ = e.from_wire(w);
    }
}

#[test]
fn gauge_zero_and_specials() {
    let e = Encoding::Gauge { mantissa_bits: 9 };
    assert_eq!(e.to_wire(0.0), Some(0));
    assert_eq!(e.to_wire(-0.0), Some(0));
    assert_eq!(e.from_wire(0), 0.0);
    assert_eq!(e.to_wire(f64::NAN), None);
    assert_eq!(e.to_wire(f64::INFINITY), None);
    assert_eq!(e.to_wire(5e-320), None);
    assert_eq!(e.to_wire(f64::MAX), None, "rounds up into infinity");
}

#[test]
fn integer_counter_turns_float_once_and_stays_monotone() {
    let mut q = Quantiser::new(MetricKind::Counter, Bounds::default());
    assert_eq!(q.observe(1235.0).map(|e| e.value), Some(1235.0));
    assert_eq!(q.encoding(), Encoding::CounterInt);
    let e = q.observe(1235.0004).expect("first float value is sent");
    assert!(e.redefined);
    assert!(e.value >= 1235.0);
    assert_eq!(
        q.encoding(),
        Encoding::CounterFloat {
            scale: DEFAULT_COUNTER_SCALE
        }
    );
    assert!(q.observe(1235.0004).is_none());
}

#[test]
fn hostile_wire_values_do_not_panic() {
    for e in [
        Encoding::Gauge { mantissa_bits: 9 },
        Encoding::Gauge { mantissa_bits: 52 },
        Encoding::CounterInt,
        Encoding::CounterFloat { scale: 1000 },
    ] {
        for w in [i64::MIN, i64::MAX, -1, 1] {
            let _ = e.from_wire(w);
        }
    }
}

/// Values where a hand-made trunc or round usually goes wrong.
fn awkward() -> Vec<f64> {
    let mut v = vec![
        0.0,
        -0.0,
        0.5,
        -0.5,
        1.5,
        -1.5,
        2.5,
        0.499_999_999_999_999_94,
        -0.499_999_999_999_999_94,
        TWO_52 - 0.5,
        -(TWO_52 - 0.5),
        TWO_52,
        TWO_52 + 1.0,
        MAX_EXACT,
        MAX_EXACT + 2.0,
        -MAX_EXACT - 2.0,
        9.3e18,
        1e300,
        f64::MIN_POSITIVE,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ];
    for &x in &[0.5, 1.0, 2.5, 1e6 + 0.5, 4e15 + 0.5] {
        v.push(f64::from_bits(f64::to_bits(x) + 1));
        v.push(f64::from_bits(f64::to_bits(x) - 1));
    }
    v
}

/// What `to_wire` computed with libm before `is_integral`/`round_exact`.
fn libm_round(x: f64) -> Option<i64> {
    let k = x.round();
    (k.abs() <= MAX_EXACT).then_some(k as i64)
}

#[test]
fn fast_integral_and_round_match_libm_on_edges() {
    for x in awkward() {
        assert_eq!(is_integral(x), x.fract() == 0.0, "{x:e}");
        assert_eq!(round_exact(x), libm_round(x), "{x:e}");
    }
}

proptest! {
    /// `is_integral` and `round_exact` are `fract() == 0` and `round()`
    /// exactly (the wire values must not move by a single unit).
    #[test]
    fn fast_integral_and_round_match_libm(
        x in prop_oneof![any::<f64>(), -1e6f64..1e6, -1e17f64..1e17],
        scale in prop_oneof![Just(1u32), Just(100), Just(1000), 1u32..1_000_000],
    ) {
        prop_assert_eq!(is_integral(x), x.fract() == 0.0);
        prop_assert_eq!(round_exact(x), libm_round(x));
        let y = x * f64::from(scale);
        prop_assert_eq!(round_exact(y), libm_round(y));
        let h = (x * 2.0).round() / 2.0; // halves
        prop_assert_eq!(round_exact(h), libm_round(h));
    }

    /// `wire` (the encoder's shortcut) is `index`'s wire value, for
    /// any value and bound, on the grid (what an encoder sees) or not,
    /// with the value a few ulps off the grid too.
    #[test]
    fn log_wire_is_the_index(
        v in prop_oneof![any::<f64>(), -1e12f64..1e12, 0.0f64..1.0, 1e295f64..f64::MAX],
        eps in prop_oneof![Just(1e-3), Just(1e-2), 1e-9f64..0.4],
        ulps in -4i64..=4,
    ) {
        let Encoding::LogGauge { ppb } = Encoding::gauge(eps) else {
            return Ok(());
        };
        let g = LogGrid::new(ppb);
        prop_assert_eq!(g.wire(v), g.index(v).map(|(w, _)| w));
        if let Some((_, q)) = g.index(v) {
            prop_assert_eq!(g.wire(q), g.index(q).map(|(w, _)| w));
            let near = f64::from_bits(q.to_bits().wrapping_add_signed(ulps));
            prop_assert_eq!(g.wire(near), g.index(near).map(|(w, _)| w));
        }
    }

    /// A log gauge's `quantise` (the value found by the grid search)
    /// is `from_wire(to_wire(v))` bit for bit, for any bound.
    #[test]
    fn log_quantise_is_the_wire_round_trip(
        v in prop_oneof![any::<f64>(), -1e12f64..1e12, 0.0f64..1.0],
        eps in prop_oneof![Just(1e-3), Just(1e-2), 1e-9f64..0.4],
    ) {
        let bounds = Bounds { gauge_epsilon: eps, ..Bounds::default() };
        let e = Encoding::gauge(eps);
        let mut q = Quantiser::new(MetricKind::Gauge, bounds);
        q.set_encoding(e);
        let want = |e: Encoding| match e.to_wire(v) {
            Some(w) => e.from_wire(w),
            None => v,
        };
        prop_assert_eq!(q.quantise(v).to_bits(), want(e).to_bits());
        // Another bound in between (the per-thread grid moves to it and
        // back), and the grid made afresh: the same numbers.
        let other = Encoding::gauge(eps * 0.5);
        if let (Encoding::LogGauge { ppb }, Some(w)) = (other, other.to_wire(v)) {
            prop_assert_eq!(other.from_wire(w).to_bits(), LogGrid::new(ppb).value(w).to_bits());
        }
        prop_assert_eq!(q.quantise(v).to_bits(), want(e).to_bits());
    }

    /// The logarithmic grid keeps every value within its relative
    /// bound, re-encodes its own values exactly (relays do not drift),
    /// is monotone, and keeps the sign.
    #[test]
    fn log_gauge_relative_bound_and_exact_reencode(
        v in prop::num::f64::NORMAL,
        w in prop::num::f64::NORMAL,
        eps in prop_oneof![Just(1e-3), 1e-9f64..0.4],
    ) {
        let e = Encoding::gauge(eps);
        let is_log = matches!(e, Encoding::LogGauge { .. });
        prop_assert!(is_log, "{:?}", e);
        let k = e.to_wire(v);
        // Near either end of the f64 range a value may have no cell in
        // range (its cell would overflow, or be subnormal): raw bits.
        prop_assert!(
            k.is_some() || v.abs() > 1e300 || v.abs() < 1e-300,
            "normal values travel on the grid: {v}"
        );
        if let Some(k) = k {
            let r = e.from_wire(k);
            prop_assert!((r - v).abs() <= eps * v.abs(), "v={v} r={r} eps={eps}");
            prop_assert_eq!(r.is_sign_negative(), v.is_sign_negative());
            prop_assert_eq!(e.to_wire(r), Some(k), "re-encoding is exact");
            if let Some(kw) = e.to_wire(w)
                && v < w
            {
                prop_assert!(k <= kw);
            }
        }
    }

    /// Gauges holding small integers travel exactly, switch to the
    /// grid at their first other value (announcing a redefinition once),
    /// and stay within the bound throughout.
    #[test]
    fn integer_gauges_are_exact_until_they_are_not(
        ints in prop::collection::vec(-500i32..=500, 1..30),
        then in prop::collection::vec(-1e6f64..1e6, 0..30),
    ) {
        let mut q = Quantiser::new(MetricKind::Gauge, Bounds::default());
        let mut held = f64::NAN;
        for &i in &ints {
            if let Some(e) = q.observe(f64::from(i)) {
                prop_assert!(!e.redefined);
                held = e.value;
            }
            prop_assert_eq!(held, f64::from(i));
            prop_assert_eq!(q.encoding(), Encoding::GaugeInt);
        }
        let mut redefinitions = 0;
        for &v in &then {
            if let Some(e) = q.observe(v) {
                redefinitions += usize::from(e.redefined);
                held = e.value;
            }
            prop_assert!((held - v).abs() <= 1e-3 * v.abs(), "v={v} held={held}");
        }
        prop_assert!(redefinitions <= 1);
    }

    #[test]
    fn gauge_relative_bound_holds(v in prop::num::f64::NORMAL, eps in 1e-6f64..0.2) {
        let b = gauge_bits_for(eps);
        let e = Encoding::Gauge { mantissa_bits: b };
        if let Some(w) = e.to_wire(v) {
            let r = e.from_wire(w);
            prop_assert!((r - v).abs() <= eps * v.abs(), "v={v} r={r} eps={eps}");
            prop_assert_eq!(e.to_wire(r), Some(w), "re-encoding is exact");
        }
    }

    #[test]
    fn gauge_index_is_monotone(a in -1e12f64..1e12, b in -1e12f64..1e12) {
        let e = Encoding::Gauge { mantissa_bits: 9 };
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        let (wl, wh) = (e.to_wire(lo), e.to_wire(hi));
        if let (Some(wl), Some(wh)) = (wl, wh) {
            prop_assert!(wl <= wh);
        }
    }

    #[test]
    fn float_counter_bound_and_exact_reencode(v in 0f64..1e9, scale in 1u32..100_000) {
        let e = Encoding::CounterFloat { scale };
        let w = e.to_wire(v).expect("in range");
        let r = e.from_wire(w);
        prop_assert!((r - v).abs() <= 0.5 / f64::from(scale) + v * 1e-15);
        prop_assert_eq!(e.to_wire(r), Some(w));
    }

    #[test]
    fn quantised_gauge_stream_within_bound(vals in prop::collection::vec(
        prop_oneof![Just(0.0), -1e6f64..1e6, 0.9f64..1.1], 1..200)) {
        let bounds = Bounds::default();
        let mut q = Quantiser::new(MetricKind::Gauge, bounds);
        let mut held = f64::NAN;
        for v in vals {
            if let Some(e) = q.observe(v) { held = e.value; }
            prop_assert!((held - v).abs() <= bounds.gauge_epsilon * v.abs(), "v={v} held={held}");
            if v == 0.0 { prop_assert_eq!(held, 0.0); }
        }
    }

    #[test]
    fn quantised_counter_within_q_and_monotone(
        incs in prop::collection::vec(prop_oneof![Just(0.0), 0f64..5.0, 0f64..0.0009], 1..300),
        int_start in 0u32..3,
        reset_at in prop::option::of(0usize..300),
    ) {
        let bounds = Bounds::default();
        let q_res = 1.0 / f64::from(bounds.counter_scale);
        let mut q = Quantiser::new(MetricKind::Counter, bounds);
        let mut v = f64::from(int_start);
        let mut held: Option<f64> = None;
        for (i, inc) in incs.iter().enumerate() {
            let reset = reset_at == Some(i) && v > 2.0 * q_res;
            let prev_true = v;
            if reset { v = 0.0 } else { v += inc }
            let before = held;
            if let Some(e) = q.observe(v) { held = Some(e.value); }
            let h = held.expect("first observation is always sent");
            prop_assert!((h - v).abs() <= q_res, "v={v} held={h}");
            if let Some(b) = before {
                if reset {
                    prop_assert!(h < b, "reset kept: {b} -> {h} (true {prev_true} -> {v})");
                } else {
                    prop_assert!(h >= b, "never decreases: {b} -> {h}");
                }
            }
        }
    }

    #[test]
    fn integer_counters_are_exact(vals in prop::collection::vec(0u64..(1u64 << 53), 1..100)) {
        let mut q = Quantiser::new(MetricKind::Counter, Bounds::default());
        let mut held = None;
        for v in vals {
            if let Some(e) = q.observe(v as f64) { held = Some(e.value); }
            prop_assert_eq!(held, Some(v as f64));
        }
    }
}

/// Found by `log_gauge_relative_bound_and_exact_reencode`: on a wide grid the cell nearest a
/// value just above the smallest normal f64 was subnormal, and a
/// subnormal value is not encoded, so a relay could not re-encode it.
#[test]
fn a_value_by_the_smallest_normal_re_encodes_or_goes_raw() {
    for eps in [0.14734643245437415, 0.4, 0.01, 1e-3, 1e-9] {
        let e = Encoding::gauge(eps);
        for v in [
            2.2694348921525684e-308,
            f64::MIN_POSITIVE,
            3e-308,
            -2.3e-308,
        ] {
            if let Some(k) = e.to_wire(v) {
                let r = e.from_wire(k);
                assert!(r.abs() >= f64::MIN_POSITIVE, "{v} -> {r}");
                assert!((r - v).abs() <= eps * v.abs(), "{v} -> {r}");
                assert_eq!(e.to_wire(r), Some(k), "{v} at eps {eps}");
            }
        }
    }
}

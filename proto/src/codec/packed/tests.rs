//! Tests of the per-series prediction and the packed-section models.

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
        for (i, &(s, changed, w, counter, forget)) in seq.iter().enumerate() {
            if i % 7 == 0 { mt.start_section(i as u32 / 7 + 1); }
            if forget { tx[s].known = false; }
            let peer = tx[s].twin().and_then(|t| tx[t as usize].as_peer(mt.walk()));
            mt.put_flag(&mut e, &mut tx[s], changed, peer.map(|p| p.1));
            if changed { mt.put_value(&mut e, (s as u32, &mut tx[s]), w, counter, peer.map(|p| p.0)); }
            after.push(tx[s]);
        }
        let bytes = e.finish();
        let mut d = RangeDecoder::new(&bytes);
        for (i, (&(s, changed, w, counter, forget), want)) in seq.iter().zip(&after).enumerate() {
            if i % 7 == 0 { mr.start_section(i as u32 / 7 + 1); }
            if forget { rx[s].known = false; }
            let peer = rx[s].twin().and_then(|t| rx[t as usize].as_peer(mr.walk()));
            prop_assert_eq!(mr.get_flag(&mut d, &mut rx[s], peer.map(|p| p.1)), changed);
            if changed {
                prop_assert_eq!(mr.get_value(&mut d, (s as u32, &mut rx[s]), counter, peer.map(|p| p.0)), Some(w));
            }
            prop_assert_eq!(&rx[s], want);
        }
        prop_assert!(d.finish().is_ok());
    }

    /// The step-grid residual (i64 fast paths) is the 128-bit one.
    #[test]
    fn stepped_matches_the_wide_arithmetic(
        last in extreme(), w in extreme(), p in extreme(),
        step in prop_oneof![Just(0u64), Just(2u64), 2u64..1000, any::<u64>(), Just(u64::MAX)],
    ) {
        let st = WireState { last, step, known: true, ..WireState::default() };
        let wide = (|| {
            if st.step < 2 {
                return None;
            }
            let s = i128::from(st.step);
            let d = i128::from(w) - i128::from(last);
            if d.rem_euclid(s) != 0 {
                return None;
            }
            let pu = (i128::from(p) - i128::from(last) + s / 2).div_euclid(s);
            Some((d / s - pu) as i64)
        })();
        prop_assert_eq!(st.stepped(w, p, true), wide);
        prop_assert_eq!(st.stepped(w, p, false), None);
        let on = last.wrapping_add((step as i64).wrapping_mul(3));
        if let Some(u) = st.stepped(on, p, true) {
            prop_assert_eq!(st.unstep(u, p), on);
        }
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

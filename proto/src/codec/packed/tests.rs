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

    /// A dense walk (its unchanged members coded in runs) writes the bits
    /// and leaves the states that flags and values coded member by member
    /// do, with twins (found in every 8th walk), ages and absent members.
    #[test]
    fn dense_walk_matches_member_by_member(
        n in 1usize..40,
        changes in prop::collection::vec((any::<bool>(), extreme(), any::<bool>()), 40),
        twins in prop::collection::vec(prop::option::of(0u32..48), 40),
        walks in 1u32..18,
    ) {
        let mut a = vec![WireState::default(); 40];
        for (st, &t) in a.iter_mut().zip(&twins) {
            st.twin = t.unwrap_or(NO_TWIN);
        }
        let mut b = a.clone();
        let (mut ma, mut mb) = (LinkModel::default(), LinkModel::default());
        let (mut ea, mut eb) = (RangeEncoder::new(Vec::new()), RangeEncoder::new(Vec::new()));
        let members: Vec<u32> = (0..n as u32).collect();
        for walk in 1..=walks {
            ma.start_section(walk);
            mb.start_section(walk);
            let coded: Vec<(u32, i64, bool)> = members
                .iter()
                .map(|&h| (h, changes[(h + walk) as usize % 40]))
                .filter(|c| c.1.0)
                .map(|(h, c)| (h, c.1.wrapping_add(i64::from(walk)), c.2))
                .collect();
            ma.put_dense(&mut ea, &mut a, &members, &coded);
            let mut next = coded.iter().peekable();
            for &h in &members {
                let peer = b[h as usize].twin().and_then(|t| b.get(t as usize)).and_then(|t| t.as_peer(walk));
                let change = next.next_if(|c| c.0 == h);
                mb.put_flag(&mut eb, &mut b[h as usize], change.is_some(), peer.map(|p| p.1));
                if let Some(&(_, w, counter)) = change {
                    mb.put_value(&mut eb, (h, &mut b[h as usize]), w, counter, peer.map(|p| p.0));
                }
            }
            prop_assert_eq!(&a, &b, "walk {}", walk);
        }
        prop_assert_eq!(ea.finish(), eb.finish());
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

    /// The predictor upkeep (grid units found once, no division for a
    /// prediction equal to the value held, no gcd for an increment on the
    /// grid) leaves every state as format 4's plain rules do: each
    /// predictor's stepped residual in 128 bits, the gcd of every nonzero
    /// (wrapped) increment.
    #[test]
    fn learn_matches_the_plain_rules(
        last in extreme(), w in extreme(), inc in extreme(), mean in extreme(),
        peer in prop::option::of(extreme()), counter in any::<bool>(),
        step in prop_oneof![Just(0u64), Just(1u64), Just(2u64), 2u64..1000, any::<u64>()],
        cost in any::<[u16; PREDICTORS]>(),
    ) {
        let cost = cost.map(|c| c % (65 * COST_ONE as u16));
        let mut st = WireState { last, inc, mean, step, cost, known: true, ..WireState::default() };
        let mut want = st;
        let preds = st.predictions(counter, peer);
        st.learn(w, counter, peer);
        // The plain rules.
        let s = i128::from(want.step);
        let d = i128::from(w) - i128::from(last);
        let on_grid = counter && want.step >= 2 && d.rem_euclid(s) == 0;
        for (i, &p) in preds.iter().enumerate() {
            let r = if on_grid {
                let pu = (i128::from(p) - i128::from(last) + s / 2).div_euclid(s);
                (d / s - pu) as i64
            } else {
                w.wrapping_sub(p)
            };
            let n = bit_len(zigzag(r)) as i32 * COST_ONE;
            let cur = i32::from(want.cost[i]);
            want.cost[i] = (cur + ((n - cur) >> COST_SHIFT)) as u16;
        }
        if counter {
            let inc_abs = w.wrapping_sub(last).unsigned_abs();
            if inc_abs != 0 {
                want.step = gcd(want.step, inc_abs);
            }
        }
        want.inc = w.wrapping_sub(last);
        // One running mean: of the increments for a counter, of the
        // values for a gauge.
        want.mean = running_mean(want.mean, if counter { want.inc } else { w });
        want.last = w;
        prop_assert_eq!(st, want);
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

proptest! {
    /// Format 4's residual coding (length and sign in one multi-symbol
    /// step, escapes outside the window, raw mantissa) round-trips any
    /// residual in any context, and both ends' models stay identical.
    #[test]
    fn residuals_round_trip_in_every_context(
        rs in prop::collection::vec((0usize..CLASSES, 0usize..LEN_CTX, extreme()), 0..300)
    ) {
        let (mut mt, mut mr) = (LinkModel::default(), LinkModel::default());
        let mut e = RangeEncoder::new(Vec::new());
        for &(class, ctx, r) in &rs {
            mt.put_r(&mut e, class, ctx, r);
        }
        let bytes = e.finish();
        let mut d = RangeDecoder::new(&bytes);
        for &(class, ctx, r) in &rs {
            prop_assert_eq!(mr.get_r(&mut d, class, ctx), Some(r));
        }
        prop_assert!(d.finish().is_ok());
        prop_assert_eq!(&mt.len, &mr.len);
    }

    /// Sparse-list numbers (unsigned, their own window and escape trees)
    /// round-trip, whatever their size.
    #[test]
    fn sparse_numbers_round_trip(
        us in prop::collection::vec((0usize..SPARSE_TREES, prop_oneof![0u64..40, any::<u64>()]), 0..300)
    ) {
        let (mut mt, mut mr) = (LinkModel::default(), LinkModel::default());
        let mut e = RangeEncoder::new(Vec::new());
        for &(tree, u) in &us {
            mt.put_sparse_u(&mut e, tree, u);
        }
        let bytes = e.finish();
        let mut d = RangeDecoder::new(&bytes);
        for &(tree, u) in &us {
            prop_assert_eq!(mr.get_sparse_u(&mut d, tree), Some(u));
        }
        prop_assert!(d.finish().is_ok());
    }

    /// Hostile bytes through the value path (any state, class, twin) give
    /// a value or `None`, never a panic; truncated ones the same.
    #[test]
    fn hostile_value_bytes_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..48),
        ops in prop::collection::vec((any::<bool>(), any::<bool>(), extreme(), prop::option::of(extreme())), 1..200),
    ) {
        let mut m = LinkModel::default();
        let mut st = WireState::default();
        let mut d = RangeDecoder::new(&bytes);
        for (i, &(counter, known, last, peer)) in ops.iter().enumerate() {
            if !known {
                st.known = false;
            } else if !st.known {
                st.reset_to(last, counter);
            }
            if i % 5 == 0 {
                m.start_section(i as u32 + 1);
            }
            let _ = m.get_value(&mut d, (3, &mut st), counter, peer);
            let _ = m.get_sparse_u(&mut d, i % SPARSE_TREES);
        }
        let _ = d.finish();
    }
}

/// An escape naming a length its context's window holds is no encoder's
/// output: refused (`None`, a typed error for the frame), as is a length
/// over 64 reached through the window of the widest context.
#[test]
fn escapes_into_the_window_and_overlong_lengths_are_refused() {
    let ctx = 10;
    let base = window_base(ctx);
    let mut m = LinkModel::default();
    let mut e = RangeEncoder::new(Vec::new());
    e.symbol(&mut m.len[ctx], RES_ESC);
    e.tree(&mut m.len_esc[0], base + 2);
    let bytes = e.finish();
    let mut m = LinkModel::default();
    assert_eq!(m.get_r(&mut RangeDecoder::new(&bytes), 0, ctx), None);

    // Context 64's window reaches lengths 58..=72: 65 and up are no value.
    let ctx = 64;
    let mut m = LinkModel::default();
    let mut e = RangeEncoder::new(Vec::new());
    let over = 65 - window_base(ctx) as usize;
    e.symbol(&mut m.len[ctx], 1 + over);
    let bytes = e.finish();
    let mut m = LinkModel::default();
    assert_eq!(m.get_r(&mut RangeDecoder::new(&bytes), 0, ctx), None);
    // The same context still codes the longest residuals.
    let mut m = LinkModel::default();
    let mut e = RangeEncoder::new(Vec::new());
    m.put_r(&mut e, 0, ctx, i64::MIN);
    m.put_r(&mut e, 0, ctx, i64::MAX);
    let bytes = e.finish();
    let mut m = LinkModel::default();
    let mut d = RangeDecoder::new(&bytes);
    assert_eq!(m.get_r(&mut d, 0, ctx), Some(i64::MIN));
    assert_eq!(m.get_r(&mut d, 0, ctx), Some(i64::MAX));
    assert!(d.finish().is_ok());
}

/// A series' per-link state and a probability stay as small as issue 3's
/// cut made them: the dense walk reads every member's state each tick, so
/// its size is the cache lines a tick touches per member.
#[test]
fn wire_state_is_72_bytes() {
    assert_eq!(std::mem::size_of::<WireState>(), 72);
    assert_eq!(std::mem::size_of::<crate::codec::rangecoder::Prob>(), 2);
}

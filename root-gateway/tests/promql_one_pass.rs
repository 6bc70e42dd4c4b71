//! One-pass range evaluation gives bit-for-bit the step-by-step results on
//! data with counter resets, gaps, staleness markers, start times, values
//! below zero and two metric names, for every aggregation and function
//! shape it takes; so do instant queries of those shapes (and
//! `topk`/`bottomk` over them), which run as a one-step sweep.

use canopy_gateway::promql::{Engine, EngineOpts, RangeSeries, Value};
use canopy_gateway::store::{
    Appender, Labels, LiveStore, LiveStoreConfig, MemStore, Querier, Series,
};
use canopy_proto::model::STALE_NAN_BITS;

/// The test data in a [`MemStore`] (with start times) and in a
/// [`LiveStore`] (without: it keeps none), which also holds a fabric
/// source's series and so an `up` series; its queries go through the
/// live store's own `select_keep`.
fn stores() -> (MemStore, LiveStore) {
    let mem = store();
    let mut live = LiveStore::new(LiveStoreConfig::default());
    let all = mem
        .select(&[], i64::MIN, i64::MAX, usize::MAX)
        .expect("select");
    for Series {
        labels, samples, ..
    } in all
    {
        for p in samples {
            live.append(None, &labels, p.ts_ms, p.value)
                .expect("append");
        }
    }
    let l = Labels::metric("io_total", [("job", "j1"), ("node", "fabric")]);
    for k in 0..300i64 {
        let t = k * 15_000;
        live.append(Some("fabric"), &l, t, (k / 3) as f64)
            .expect("append");
        live.heartbeat("fabric", t, 15_000);
    }
    (mem, live)
}

fn store() -> MemStore {
    let mut s = MemStore::new();
    for i in 0..12i64 {
        let name = if i % 4 == 3 {
            "other_total"
        } else {
            "io_total"
        };
        let l = Labels::metric(
            name,
            [("job", format!("j{}", i % 3)), ("node", format!("n{i}"))],
        );
        let mut v = 0.0;
        for k in 0..400i64 {
            // Irregular times, a gap, a staleness marker, resets.
            let t = k * 15_000 + (k * 7 + i * 13) % 5_000;
            if (120..150).contains(&k) && i % 2 == 0 {
                continue;
            }
            let value = if k == 200 + i {
                f64::from_bits(STALE_NAN_BITS)
            } else {
                v += (k % 7 + i) as f64 * 1.37 + 0.1;
                if k % 97 == (i * 11) % 97 {
                    v = 0.5;
                }
                // One series starts below zero and crosses it: rate's
                // stop at the zero point needs a first value >= 0.
                if i == 7 { v - 900.0 } else { v }
            };
            let start = (i % 5 == 1).then_some(if k < 250 { 1_000 } else { 250 * 15_000 - 1 });
            s.append_with_start(&l, t, value, start).expect("append");
        }
    }
    s
}

fn same(a: &[RangeSeries], b: &[RangeSeries]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.labels == y.labels
                && x.points.len() == y.points.len()
                && x.points.iter().zip(&y.points).all(|(p, q)| {
                    p.t == q.t && (p.v.to_bits() == q.v.to_bits() || p.v.is_nan() && q.v.is_nan())
                })
        })
}

#[test]
fn one_pass_range_queries_match_step_by_step() {
    let (mem, live) = stores();
    for s in [&mem as &dyn Querier, &live] {
        one_pass_range_queries_match_step_by_step_on(s);
    }
}

fn one_pass_range_queries_match_step_by_step_on(s: &dyn Querier) {
    let fast = Engine::new(EngineOpts::default());
    let slow = Engine::new(EngineOpts {
        one_pass_ranges: false,
        ..EngineOpts::default()
    });
    let mut checked = 0;
    for agg in [
        "",
        "sum",
        "count",
        "min",
        "max",
        "group",
        "sum by (job)",
        "max without (node)",
        "sum without (job)",
        "count by (__name__)",
        "sum by (job, absent)",
    ] {
        for f in [
            "rate",
            "increase",
            "delta",
            "irate",
            "idelta",
            "avg_over_time",
            "sum_over_time",
            "count_over_time",
            "min_over_time",
            "max_over_time",
            "last_over_time",
            "stddev_over_time",
            "mad_over_time",
            "resets",
            "changes",
            "deriv",
            "ts_of_max_over_time",
        ] {
            for sel in [
                "io_total[1m]",
                "{__name__=~\".+_total\"}[2m] offset 30s",
                "io_total[45s]",
                "{__name__=~\".+\"}[1m]",
            ] {
                let q = format!("{agg} ({f}({sel}))");
                for (start, end, step) in [(0, 6_000_000, 15_000), (61_000, 3_000_000, 47_000)] {
                    let a = fast.range_annotated(s, &q, (start, end, step), &|| false);
                    let b = slow.range_annotated(s, &q, (start, end, step), &|| false);
                    match (&a, &b) {
                        (Ok((ma, wa)), Ok((mb, wb))) => {
                            assert!(
                                same(ma, mb) && wa == wb,
                                "{q} {start}..{end}/{step} differs"
                            );
                            checked += usize::from(!ma.is_empty());
                        }
                        (Err(ea), Err(eb)) => assert_eq!(ea, eb, "{q}"),
                        _ => panic!("{q}: one-pass {a:?} vs step-by-step {b:?}"),
                    }
                }
            }
        }
    }
    assert!(checked > 500, "only {checked} non-empty results compared");
}

#[test]
fn one_step_instant_queries_match_step_by_step() {
    let (mem, live) = stores();
    for s in [&mem as &dyn Querier, &live] {
        one_step_instant_queries_match_step_by_step_on(s);
    }
}

fn one_step_instant_queries_match_step_by_step_on(s: &dyn Querier) {
    let fast = Engine::new(EngineOpts::default());
    let slow = Engine::new(EngineOpts {
        one_pass_ranges: false,
        ..EngineOpts::default()
    });
    let bits = |a: f64, b: f64| a.to_bits() == b.to_bits() || a.is_nan() && b.is_nan();
    let mut checked = 0;
    for agg in [
        "",
        "sum",
        "count by (job)",
        "min without (node)",
        "sum without (job)",
        "group by (node, job)",
        "topk(3,",
        "bottomk(2,",
        "topk by (job) (1,",
        "topk by (__name__) (2,",
        "bottomk(100,",
    ] {
        for f in [
            "rate",
            "increase",
            "irate",
            "last_over_time",
            "count_over_time",
            "changes",
        ] {
            for sel in [
                "io_total[1m]",
                "{__name__=~\".+_total\"}[2m] offset 30s",
                "io_total[45s]",
                "{__name__=~\".+\"}[1m]",
            ] {
                let q = if agg.ends_with(',') {
                    format!("{agg} {f}({sel}))")
                } else {
                    format!("{agg} ({f}({sel}))")
                };
                // Before the data, in the gap, around the staleness
                // markers, after the last sample and past the lookback.
                for t in [
                    0, 30_000, 1_900_000, 2_100_000, 3_010_000, 5_990_000, 6_100_000,
                ] {
                    let a = fast.instant_annotated(s, &q, t, &|| false);
                    let b = slow.instant_annotated(s, &q, t, &|| false);
                    match (&a, &b) {
                        (Ok((Value::Vector(va), wa)), Ok((Value::Vector(vb), wb))) => {
                            assert!(
                                wa == wb
                                    && va.len() == vb.len()
                                    && va.iter().zip(vb).all(|(x, y)| {
                                        x.labels == y.labels && x.t == y.t && bits(x.v, y.v)
                                    }),
                                "{q} at {t}: one-pass {va:?} vs step-by-step {vb:?}"
                            );
                            checked += usize::from(!va.is_empty());
                        }
                        (Err(ea), Err(eb)) => assert_eq!(ea, eb, "{q}"),
                        _ => panic!("{q} at {t}: one-pass {a:?} vs step-by-step {b:?}"),
                    }
                }
            }
        }
    }
    assert!(checked > 500, "only {checked} non-empty results compared");
}

/// `topk`/`bottomk` without grouping stream the selection and keep only
/// the best candidates: on 70 series with many equal rates and some NaN
/// ones, every k (below, at and past the candidates' cut-off, and past the
/// series count) gives the step-by-step answer, order and ties included.
#[test]
fn streamed_topk_matches_step_by_step_with_ties_and_nan() {
    let mut mem = MemStore::new();
    let mut live = LiveStore::new(LiveStoreConfig::default());
    for i in 0..70i64 {
        let l = Labels::metric(
            "tie_total",
            [
                ("node", format!("n{:02}", (i * 37) % 70)),
                ("job", format!("j{}", i % 4)),
            ],
        );
        for k in 0..40i64 {
            let t = k * 15_000;
            // Rates in four tiers (many ties), a few NaN.
            let v = if i % 11 == 5 && k > 30 {
                f64::NAN
            } else {
                (k * (i % 4 + 1)) as f64
            };
            mem.append(None, &l, t, v).expect("append");
            live.append(None, &l, t, v).expect("append");
        }
    }
    let fast = Engine::new(EngineOpts::default());
    let slow = Engine::new(EngineOpts {
        one_pass_ranges: false,
        ..EngineOpts::default()
    });
    let mut checked = 0;
    for s in [&mem as &dyn Querier, &live] {
        for op in ["topk", "bottomk"] {
            for k in [1, 2, 3, 7, 8, 9, 16, 17, 40, 69, 70, 100] {
                for f in ["rate", "irate", "last_over_time"] {
                    let q = format!("{op}({k}, {f}(tie_total[1m]))");
                    for t in [300_000, 500_000, 585_000] {
                        let a = fast.instant(s, &q, t).expect("fast");
                        let b = slow.instant(s, &q, t).expect("slow");
                        let (Value::Vector(va), Value::Vector(vb)) = (&a, &b) else {
                            panic!("{q}: not vectors");
                        };
                        assert!(
                            va.len() == vb.len()
                                && va.iter().zip(vb).all(|(x, y)| {
                                    x.labels == y.labels
                                        && x.t == y.t
                                        && (x.v.to_bits() == y.v.to_bits()
                                            || x.v.is_nan() && y.v.is_nan())
                                }),
                            "{q} at {t}: streamed {va:?} vs step-by-step {vb:?}"
                        );
                        checked += va.len();
                    }
                }
            }
        }
    }
    assert!(checked > 1000, "only {checked} samples compared");
}

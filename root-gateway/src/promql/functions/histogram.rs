//! Functions over classic histograms (`le`-labelled bucket series):
//! `histogram_fraction` and `histogram_quantiles`.

use std::collections::HashMap;

use promql_parser::parser::{Call, Expr};

use super::super::PromqlError;
use super::super::aggregate::bucket_quantile;
use super::super::eval::Evaluator;
use super::super::value::{Value, VectorSample};
use super::arg;
use crate::store::Labels;

/// Bucket series grouped by their labels without `le`: (upper bound,
/// cumulative count) per group. Series without a numeric `le` are left out
/// with a warning about `arg` (the bucket argument of `func`).
pub(crate) fn classic_groups(
    ev: &mut Evaluator<'_>,
    v: Vec<VectorSample>,
    func: &str,
    arg: &Expr,
) -> Vec<(Labels, Vec<(f64, f64)>)> {
    let mut idx: HashMap<Labels, usize> = HashMap::new();
    let mut groups: Vec<(Labels, Vec<(f64, f64)>)> = Vec::new();
    for s in v {
        let le = s.labels.get("le").unwrap_or("");
        let Some(ub) = le.trim().parse::<f64>().ok().filter(|_| !le.is_empty()) else {
            let msg = format!(
                "bucket label \"le\" is missing or has a malformed value of {le:?} for metric name {:?}",
                s.labels.name()
            );
            ev.warn(&msg, func, arg);
            continue;
        };
        let mut k = s.labels;
        k.remove("le");
        let i = *idx.entry(k.clone()).or_insert_with(|| {
            groups.push((k, Vec::new()));
            groups.len() - 1
        });
        groups[i].1.push((ub, s.v));
    }
    groups
}

/// The fraction of observations in `[lower, upper]` of a classic histogram,
/// interpolating linearly inside finite buckets. The lowest bucket starts at
/// 0 when its upper bound is positive (else at -Inf); a bound inside an
/// infinitely wide bucket sits at that bucket's finite edge.
pub(crate) fn bucket_fraction(lower: f64, upper: f64, mut b: Vec<(f64, f64)>) -> f64 {
    b.sort_by(|x, y| x.0.total_cmp(&y.0));
    let Some(&(last_ub, total)) = b.last() else {
        return f64::NAN;
    };
    if last_ub != f64::INFINITY || total == 0.0 || lower.is_nan() || upper.is_nan() {
        return f64::NAN;
    }
    if lower >= upper {
        return 0.0;
    }
    // A bound's rank: observations at or below it.
    let rank_of = |x: f64| -> f64 {
        let mut below = 0.0;
        let mut start = if b[0].0 > 0.0 { 0.0 } else { f64::NEG_INFINITY };
        for &(ub, cum) in &b {
            let count = (cum - below).max(0.0);
            if x <= start {
                return below;
            }
            if x < ub {
                if start == f64::NEG_INFINITY {
                    return below + count;
                }
                if ub == f64::INFINITY {
                    return below;
                }
                return below + count * (x - start) / (ub - start);
            }
            below = below.max(cum);
            start = ub;
        }
        total
    };
    (rank_of(upper).min(total) - rank_of(lower).min(total)) / total
}

/// `histogram_fraction(lower, upper, v)` over classic bucket series.
pub(super) fn histogram_fraction(
    ev: &mut Evaluator<'_>,
    c: &Call,
    t: i64,
) -> Result<Value, PromqlError> {
    let lower = ev.eval_scalar(arg(c, 0)?, t)?;
    let upper = ev.eval_scalar(arg(c, 1)?, t)?;
    let v = ev.eval_vector(arg(c, 2)?, t)?;
    Ok(Value::Vector(
        classic_groups(ev, v, "histogram_fraction", arg(c, 2)?)
            .into_iter()
            .map(|(labels, b)| VectorSample {
                labels,
                t,
                v: bucket_fraction(lower, upper, b),
                drop_name: true,
            })
            .collect(),
    ))
}

/// A quantile as a label value: Go's shortest form, with `.0` on integers.
fn quantile_label(q: f64) -> String {
    let s = format!("{q}");
    if s.contains(['.', 'e', 'E', 'N', 'n']) {
        s
    } else {
        format!("{s}.0")
    }
}

/// `histogram_quantiles(v, "label", q...)`: one series per quantile, marked
/// by the given label.
pub(super) fn histogram_quantiles(
    ev: &mut Evaluator<'_>,
    c: &Call,
    t: i64,
) -> Result<Value, PromqlError> {
    let v = ev.eval_vector(arg(c, 0)?, t)?;
    let label = ev.eval_string(arg(c, 1)?, t)?;
    if !super::valid_label_name(&label) {
        return Err(PromqlError::Execution(format!(
            "invalid quantile label name {label:?}"
        )));
    }
    let mut qs = Vec::new();
    for i in 2..c.args.args.len() {
        let q = ev.eval_scalar(arg(c, i)?, t)?;
        ev.check_quantile(q, "histogram_quantiles", arg(c, i)?);
        qs.push(q);
    }
    let mut out = Vec::new();
    for (labels, b) in classic_groups(ev, v, "histogram_quantiles", arg(c, 0)?) {
        if labels.get(&label).is_some() {
            return Err(PromqlError::Execution(format!(
                "histogram_quantiles(): label {label:?} already exists on the input series"
            )));
        }
        for q in &qs {
            let mut l = labels.clone();
            l.set(&label, &quantile_label(*q));
            let (v, forced) = bucket_quantile(*q, b.clone());
            if let Some(f) = forced {
                ev.info_monotonicity(labels.name(), "histogram_quantiles", arg(c, 0)?, t, f);
            }
            out.push(VectorSample {
                labels: l,
                t,
                v,
                drop_name: true,
            });
        }
    }
    ev.hold(out.len())?;
    Ok(Value::Vector(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(pairs: &[(f64, f64)]) -> Vec<(f64, f64)> {
        pairs.to_vec()
    }

    #[test]
    fn fractions_follow_prometheus_bucket_rules() {
        let pos = b(&[(1.0, 1.0), (2.0, 3.0), (3.0, 6.0), (f64::INFINITY, 100.0)]);
        assert!((bucket_fraction(0.0, 1.5, pos.clone()) - 0.02).abs() < 1e-12);
        assert!((bucket_fraction(2.0, 5.0, pos.clone()) - 0.03).abs() < 1e-12);
        assert!((bucket_fraction(400.0, f64::INFINITY, pos.clone()) - 0.94).abs() < 1e-12);
        assert_eq!(
            bucket_fraction(f64::NEG_INFINITY, f64::INFINITY, pos.clone()),
            1.0
        );
        assert_eq!(bucket_fraction(3.0, 2.0, pos.clone()), 0.0);
        assert!(bucket_fraction(f64::NAN, 1.0, pos).is_nan());
        let neg = b(&[
            (-3.0, 10.0),
            (-2.0, 12.0),
            (-1.0, 15.0),
            (f64::INFINITY, 100.0),
        ]);
        assert!((bucket_fraction(-4.0, -2.0, neg.clone()) - 0.02).abs() < 1e-12);
        assert!((bucket_fraction(f64::NEG_INFINITY, -1.5, neg) - 0.135).abs() < 1e-12);
        assert!(bucket_fraction(0.0, 1.0, b(&[(1.0, 1.0)])).is_nan());
    }

    #[test]
    fn quantile_labels_keep_a_decimal_point() {
        assert_eq!(quantile_label(0.0), "0.0");
        assert_eq!(quantile_label(0.25), "0.25");
        assert_eq!(quantile_label(1.0), "1.0");
    }
}

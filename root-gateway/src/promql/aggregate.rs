//! Aggregation operators and classic-bucket `histogram_quantile`.

use std::collections::HashMap;

use promql_parser::parser::{AggregateExpr, Call, LabelModifier};

use super::PromqlError;
use super::eval::Evaluator;
use super::functions::{avg, kahan_inc, quantile, variance};
use super::value::{Value, VectorSample, format_value};
use crate::store::Labels;
use canopy_proto::model::METRIC_NAME;

/// The grouping labels of `l` under `modifier`.
pub(crate) fn group_key(l: &Labels, modifier: &Option<LabelModifier>) -> Labels {
    match modifier {
        None => Labels::default(),
        Some(LabelModifier::Include(by)) => {
            Labels::from_pairs(l.iter().filter(|(n, _)| by.labels.iter().any(|b| b == n)))
        }
        Some(LabelModifier::Exclude(wo)) => Labels::from_pairs(
            l.iter()
                .filter(|(n, _)| *n != METRIC_NAME && !wo.labels.iter().any(|b| b == n)),
        ),
    }
}

/// The pairs of [`group_key`] (same filter), borrowed from `l` in label
/// order, appended to `out`: a key to look a group up without building its
/// label set.
pub(crate) fn group_pairs<'l>(
    l: &'l Labels,
    modifier: &Option<LabelModifier>,
    out: &mut Vec<(&'l str, &'l str)>,
) {
    match modifier {
        None => {}
        Some(LabelModifier::Include(by)) => {
            out.extend(l.iter().filter(|(n, _)| by.labels.iter().any(|b| b == n)));
        }
        Some(LabelModifier::Exclude(wo)) => out.extend(
            l.iter()
                .filter(|(n, _)| *n != METRIC_NAME && !wo.labels.iter().any(|b| b == n)),
        ),
    }
}

/// Groups samples by their grouping labels under `m`, in order of first
/// appearance: groups are looked up by label pairs borrowed from the
/// samples, so a label set is built once per group, not once per sample.
fn group_by(v: Vec<VectorSample>, m: &Option<LabelModifier>) -> Vec<(Labels, Vec<VectorSample>)> {
    let mut keys: Vec<Labels> = Vec::new();
    let mut of: Vec<usize> = Vec::with_capacity(v.len());
    {
        let mut index: HashMap<Vec<(&str, &str)>, usize> = HashMap::new();
        let mut key: Vec<(&str, &str)> = Vec::new();
        for s in &v {
            key.clear();
            group_pairs(&s.labels, m, &mut key);
            let i = match index.get(key.as_slice()) {
                Some(&i) => i,
                None => {
                    keys.push(Labels::from_pairs(key.iter().copied()));
                    index.insert(key.clone(), keys.len() - 1);
                    keys.len() - 1
                }
            };
            of.push(i);
        }
    }
    let mut out: Vec<(Labels, Vec<VectorSample>)> =
        keys.into_iter().map(|k| (k, Vec::new())).collect();
    for (s, i) in v.into_iter().zip(of) {
        out[i].1.push(s);
    }
    out
}

/// Groups samples by key, in order of first appearance.
fn group(
    v: Vec<VectorSample>,
    key: impl Fn(&VectorSample) -> Labels,
) -> Vec<(Labels, Vec<VectorSample>)> {
    let mut idx: HashMap<Labels, usize> = HashMap::new();
    let mut out: Vec<(Labels, Vec<VectorSample>)> = Vec::new();
    for s in v {
        let k = key(&s);
        match idx.get(&k) {
            Some(&i) => out[i].1.push(s),
            None => {
                idx.insert(k.clone(), out.len());
                out.push((k, vec![s]));
            }
        }
    }
    out
}

fn int_param(p: f64) -> Result<i64, PromqlError> {
    if p.is_nan() {
        return Err(PromqlError::Execution("Parameter value is NaN".into()));
    }
    if !(-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&p) {
        return Err(PromqlError::Execution(format!(
            "Scalar value {} overflows int64",
            format_value(p)
        )));
    }
    Ok(p as i64)
}

/// A stable hash of a label set in [0, 1), for `limit_ratio`.
fn label_fraction(l: &Labels) -> f64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (n, v) in l.iter() {
        for b in n.bytes().chain([0xff]).chain(v.bytes()).chain([0xff]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// `topk`, `bottomk` or `limitk` (`op`) with parameter `k` over `v`, per
/// group of `m`: in each group the `k` first after a stable sort (NaN last),
/// found by a partial selection instead of sorting the whole group.
pub(crate) fn select_k(
    op: &str,
    k: f64,
    v: Vec<VectorSample>,
    m: &Option<LabelModifier>,
) -> Result<Vec<VectorSample>, PromqlError> {
    let k = int_param(k)?;
    if k < 1 {
        return Ok(Vec::new());
    }
    let k = usize::try_from(k).unwrap_or(usize::MAX);
    let top = op == "topk";
    let groups = match m {
        // One group: no key to build per sample.
        None => vec![(Labels::default(), v)],
        Some(_) => group_by(v, m),
    };
    let mut out = Vec::new();
    for (_, g) in groups {
        if op == "limitk" {
            out.extend(g.into_iter().take(k));
            continue;
        }
        // Ties keep input order (the position breaks them), as a stable sort.
        let cmp = |x: &(usize, VectorSample), y: &(usize, VectorSample)| {
            let by_value = match (x.1.v.is_nan(), y.1.v.is_nan()) {
                (true, true) => std::cmp::Ordering::Equal,
                (true, false) => std::cmp::Ordering::Greater,
                (false, true) => std::cmp::Ordering::Less,
                _ if top => y.1.v.total_cmp(&x.1.v),
                _ => x.1.v.total_cmp(&y.1.v),
            };
            by_value.then(x.0.cmp(&y.0))
        };
        let mut g: Vec<(usize, VectorSample)> = g.into_iter().enumerate().collect();
        if k < g.len() {
            g.select_nth_unstable_by(k - 1, cmp);
            g.truncate(k);
        }
        g.sort_unstable_by(cmp);
        out.extend(g.into_iter().map(|(_, s)| s));
    }
    Ok(out)
}

/// Evaluates an aggregation at `t`.
pub(crate) fn eval(
    ev: &mut Evaluator<'_>,
    a: &AggregateExpr,
    t: i64,
) -> Result<Value, PromqlError> {
    let op = a.op.to_string();
    let op = op.as_str();
    let mut num_param = f64::NAN;
    let mut str_param = String::new();
    if let Some(p) = &a.param {
        if op == "count_values" {
            str_param = ev.eval_string(p, t)?;
        } else {
            num_param = ev.eval_scalar(p, t)?;
        }
    }
    if op == "quantile"
        && let Some(p) = &a.param
    {
        ev.check_quantile(num_param, "quantile", p);
    }
    let v = ev.eval_vector(&a.expr, t)?;
    let m = &a.modifier;
    match op {
        "topk" | "bottomk" | "limitk" => {
            return Ok(Value::Vector(select_k(op, num_param, v, m)?));
        }
        "limit_ratio" => {
            let r = num_param.clamp(-1.0, 1.0);
            if num_param.is_nan() {
                return Err(PromqlError::Execution("Ratio value is NaN".into()));
            }
            let out = v
                .into_iter()
                .filter(|s| {
                    let f = label_fraction(&s.labels);
                    (r >= 0.0 && f < r) || (r < 0.0 && f >= 1.0 + r)
                })
                .collect();
            return Ok(Value::Vector(out));
        }
        "count_values" => {
            if !super::functions::valid_label_name(&str_param) {
                return Err(PromqlError::Execution(format!(
                    "invalid label name {str_param:?}"
                )));
            }
            let mut out = Vec::new();
            for (k, g) in group(v, |s| {
                let mut k = group_key(&s.labels, m);
                k.set(&str_param, &format_value(s.v));
                k
            }) {
                out.push(VectorSample {
                    labels: k,
                    t,
                    v: g.len() as f64,
                    drop_name: false,
                });
            }
            return Ok(Value::Vector(out));
        }
        _ => {}
    }
    let mut out = Vec::new();
    for (k, g) in group_by(v, m) {
        let vals = || g.iter().map(|s| s.v);
        let r = match op {
            "sum" => {
                let (s, c) = vals().fold((0.0, 0.0), |(s, c), v| kahan_inc(v, s, c));
                if s.is_infinite() { s } else { s + c }
            }
            "avg" => avg(vals()),
            "count" => g.len() as f64,
            "group" => 1.0,
            "min" => vals().fold(f64::NAN, |a, v| if v < a || a.is_nan() { v } else { a }),
            "max" => vals().fold(f64::NAN, |a, v| if v > a || a.is_nan() { v } else { a }),
            "stddev" => stdvar(&g).sqrt(),
            "stdvar" => stdvar(&g),
            "quantile" => {
                let mut xs: Vec<f64> = vals().collect();
                quantile(num_param, &mut xs)
            }
            other => {
                return Err(PromqlError::Execution(format!(
                    "aggregation {other} is not supported"
                )));
            }
        };
        // Grouping by a not-yet-removed name keeps the removal pending.
        let drop_name = k.get(METRIC_NAME).is_some() && g.iter().any(|s| s.drop_name);
        out.push(VectorSample {
            labels: k,
            t,
            v: r,
            drop_name,
        });
    }
    Ok(Value::Vector(out))
}

fn stdvar(g: &[VectorSample]) -> f64 {
    variance(g.iter().map(|s| s.v))
}

/// Relative float equality as Prometheus' `almost.Equal`.
pub(crate) fn almost_equal(a: f64, b: f64, eps: f64) -> bool {
    const MIN_NORMAL: f64 = 2.2250738585072014e-308;
    if a.is_nan() && b.is_nan() {
        return true;
    }
    if a == b {
        return true;
    }
    let diff = (a - b).abs();
    if a == 0.0 || b == 0.0 || a.abs() + b.abs() < MIN_NORMAL {
        return diff < eps * MIN_NORMAL;
    }
    diff / (a.abs() + b.abs()).min(f64::MAX) < eps
}

/// Where [`bucket_quantile`] had to raise bucket counts to make them
/// monotonic (Prometheus reports it as an info annotation): the lowest and
/// highest upper bound raised and the largest raise.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ForcedMonotonic {
    /// Lowest upper bound of a raised bucket.
    pub(crate) min_bucket: f64,
    /// Highest upper bound of a raised bucket.
    pub(crate) max_bucket: f64,
    /// Largest amount a bucket's count was raised by.
    pub(crate) max_diff: f64,
}

/// The q-quantile of classic cumulative buckets `(upper bound, count)`,
/// and whether (and where) counts had to be forced monotonic beyond float
/// precision errors.
pub(crate) fn bucket_quantile(q: f64, mut b: Vec<(f64, f64)>) -> (f64, Option<ForcedMonotonic>) {
    if q.is_nan() {
        return (f64::NAN, None);
    }
    if q < 0.0 {
        return (f64::NEG_INFINITY, None);
    }
    if q > 1.0 {
        return (f64::INFINITY, None);
    }
    b.sort_by(|x, y| x.0.total_cmp(&y.0));
    if b.last().is_none_or(|l| l.0 != f64::INFINITY) {
        return (f64::NAN, None);
    }
    let mut c: Vec<(f64, f64)> = Vec::with_capacity(b.len());
    for (ub, n) in b {
        match c.last_mut() {
            Some(l) if l.0 == ub => l.1 += n,
            _ => c.push((ub, n)),
        }
    }
    let mut prev = c[0].1;
    let mut forced: Option<ForcedMonotonic> = None;
    for x in c.iter_mut().skip(1) {
        if x.1 == prev {
            continue;
        }
        if almost_equal(prev, x.1, 1e-12) {
            // A float precision error: corrected, not reported.
            x.1 = prev;
            continue;
        }
        if x.1 < prev {
            let f = forced.get_or_insert(ForcedMonotonic {
                min_bucket: x.0,
                max_bucket: x.0,
                max_diff: 0.0,
            });
            f.min_bucket = f.min_bucket.min(x.0);
            f.max_bucket = f.max_bucket.max(x.0);
            f.max_diff = f.max_diff.max(prev - x.1);
            x.1 = prev;
            continue;
        }
        prev = x.1;
    }
    if c.len() < 2 {
        return (f64::NAN, None);
    }
    let obs = c[c.len() - 1].1;
    if obs == 0.0 || obs.is_nan() {
        return (f64::NAN, None);
    }
    let mut rank = q * obs;
    let i = c[..c.len() - 1].partition_point(|x| x.1 < rank);
    if i == c.len() - 1 {
        return (c[c.len() - 2].0, forced);
    }
    if i == 0 && c[0].0 <= 0.0 {
        return (c[0].0, forced);
    }
    let (mut start, end, mut count) = (0.0, c[i].0, c[i].1);
    if i > 0 {
        start = c[i - 1].0;
        count -= c[i - 1].1;
        rank -= c[i - 1].1;
    }
    (start + (end - start) * (rank / count), forced)
}

/// `histogram_quantile(q, v)` over classic `le` buckets.
pub(crate) fn histogram_quantile(
    ev: &mut Evaluator<'_>,
    c: &Call,
    t: i64,
) -> Result<Value, PromqlError> {
    let (Some(qa), Some(va)) = (c.args.args.first(), c.args.args.get(1)) else {
        return Err(PromqlError::Execution(
            "histogram_quantile needs 2 arguments".into(),
        ));
    };
    let q = ev.eval_scalar(qa, t)?;
    ev.check_quantile(q, "histogram_quantile", qa);
    let v = ev.eval_vector(va, t)?;
    let groups = super::functions::classic_groups(ev, v, "histogram_quantile", va);
    let mut out = Vec::with_capacity(groups.len());
    for (labels, b) in groups {
        let (v, forced) = bucket_quantile(q, b);
        if let Some(f) = forced {
            ev.info_monotonicity(labels.name(), "histogram_quantile", va, t, f);
        }
        out.push(VectorSample {
            labels,
            t,
            v,
            drop_name: true,
        });
    }
    Ok(Value::Vector(out))
}

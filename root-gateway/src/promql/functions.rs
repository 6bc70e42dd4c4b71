//! PromQL functions.

use promql_parser::label::MatchOp as PMatchOp;
use promql_parser::parser::{Call, Expr};

use super::eval::Evaluator;
use super::prepass::{self, dur_ms};
use super::value::{Point, RangeSeries, Value, VectorSample};
use super::{PromqlError, aggregate};
use crate::store::Labels;
use canopy_proto::model::METRIC_NAME;

/// Kahan-compensated `sum + inc`, as Prometheus' `kahanSumInc`.
pub(crate) fn kahan_inc(inc: f64, sum: f64, c: f64) -> (f64, f64) {
    let t = sum + inc;
    let c = if t.is_infinite() {
        0.0
    } else if sum.abs() >= inc.abs() {
        c + ((sum - t) + inc)
    } else {
        c + ((inc - t) + sum)
    };
    (t, c)
}

/// The q-quantile of `vals` (sorted in place), Prometheus' interpolation.
pub(crate) fn quantile(q: f64, vals: &mut [f64]) -> f64 {
    if vals.is_empty() || q.is_nan() {
        return f64::NAN;
    }
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    vals.sort_by(|a, b| a.total_cmp(b));
    let n = vals.len() as f64;
    let rank = q * (n - 1.0);
    let lower = rank.floor().max(0.0);
    let upper = (lower + 1.0).min(n - 1.0);
    let w = rank - rank.floor();
    vals[lower as usize] * (1.0 - w) + vals[upper as usize] * w
}

/// Variance with Kahan-compensated Welford updates.
pub(crate) fn variance(vals: impl Iterator<Item = f64>) -> f64 {
    let (mut count, mut mean, mut cmean, mut aux, mut caux) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for f in vals {
        count += 1.0;
        let delta = f - (mean + cmean);
        (mean, cmean) = kahan_inc(delta / count, mean, cmean);
        (aux, caux) = kahan_inc(delta * (f - (mean + cmean)), aux, caux);
    }
    (aux + caux) / count
}

fn linear_regression(points: &[Point], intercept_t: i64) -> (f64, f64) {
    let first = points[0].v;
    if points.iter().all(|p| p.v == first) {
        return (0.0, first);
    }
    let (mut sx, mut cx, mut sy, mut cy, mut sxy, mut cxy, mut sx2, mut cx2) =
        (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    for p in points {
        let x = (p.t - intercept_t) as f64 / 1e3;
        (sx, cx) = kahan_inc(x, sx, cx);
        (sy, cy) = kahan_inc(p.v, sy, cy);
        (sxy, cxy) = kahan_inc(x * p.v, sxy, cxy);
        (sx2, cx2) = kahan_inc(x * x, sx2, cx2);
    }
    let n = points.len() as f64;
    let (sx, sy, sxy, sx2) = (sx + cx, sy + cy, sxy + cxy, sx2 + cx2);
    let cov = sxy - sx * sy / n;
    let var = sx2 - sx * sx / n;
    let slope = cov / var;
    (slope, sy / n - slope * sx / n)
}

/// Prometheus' `extrapolatedRate` for rate, increase and delta.
fn extrapolated_rate(p: &[Point], t: i64, range: i64, counter: bool, is_rate: bool) -> Option<f64> {
    if p.len() < 2 {
        return None;
    }
    let (first, last) = (p[0], p[p.len() - 1]);
    let mut result = last.v - first.v;
    if counter {
        let mut prev = first.v;
        for c in &p[1..] {
            if c.v < prev {
                result += prev;
            }
            prev = c.v;
        }
    }
    let range_start = t - range;
    let mut to_start = (first.t - range_start) as f64 / 1e3;
    let mut to_end = (t - last.t) as f64 / 1e3;
    let sampled = (last.t - first.t) as f64 / 1e3;
    let avg = sampled / (p.len() - 1) as f64;
    let threshold = avg * 1.1;
    let mut interval = sampled;
    if to_start >= threshold {
        to_start = avg / 2.0;
    }
    // Counters cannot go below zero: stop extrapolating at the zero point.
    if counter && result > 0.0 && first.v >= 0.0 {
        let to_zero = sampled * (first.v / result);
        if to_zero < to_start {
            to_start = to_zero;
        }
    }
    interval += to_start;
    if to_end >= threshold {
        to_end = avg / 2.0;
    }
    interval += to_end;
    let mut factor = interval / sampled;
    if is_rate {
        factor /= range as f64 / 1e3;
    }
    Some(result * factor)
}

fn instant_rate(p: &[Point], is_rate: bool) -> Option<f64> {
    if p.len() < 2 {
        return None;
    }
    let (prev, last) = (p[p.len() - 2], p[p.len() - 1]);
    let mut r = if is_rate && last.v < prev.v {
        last.v
    } else {
        last.v - prev.v
    };
    let dt = last.t - prev.t;
    if dt == 0 {
        return None;
    }
    if is_rate {
        r /= dt as f64 / 1e3;
    }
    Some(r)
}

fn arg(c: &Call, i: usize) -> Result<&Expr, PromqlError> {
    c.args.args.get(i).map(|b| b.as_ref()).ok_or_else(|| {
        PromqlError::Execution(format!("{}: missing argument {}", c.func.name, i + 1))
    })
}

/// The range of a matrix argument (a selector or a subquery) in ms, the
/// end of its window (offset and `@` applied) and its `@` time (offset not).
fn matrix_range(ev: &Evaluator<'_>, e: &Expr, t: i64) -> (i64, i64, i64) {
    let (range, at, off) = match e {
        Expr::MatrixSelector(m) => (dur_ms(&m.range), &m.vs.at, &m.vs.offset),
        Expr::Subquery(s) => (dur_ms(&s.range), &s.at, &s.offset),
        Expr::Paren(p) => return matrix_range(ev, &p.expr, t),
        _ => return (0, t, t),
    };
    let end = prepass::adjust(at, off, t, ev.qstart, ev.qend);
    let at_t = prepass::adjust(at, &None, t, ev.qstart, ev.qend);
    (range, end, at_t)
}

/// Labels for `absent()`: the equality matchers of a selector argument.
fn absent_labels(e: &Expr) -> Labels {
    let vs = match e {
        Expr::VectorSelector(vs) => vs,
        Expr::MatrixSelector(ms) => &ms.vs,
        _ => return Labels::default(),
    };
    let mut out = Labels::default();
    let mut seen = std::collections::HashSet::new();
    let mut dup = std::collections::HashSet::new();
    for m in &vs.matchers.matchers {
        if m.name == METRIC_NAME {
            continue;
        }
        if !seen.insert(m.name.clone()) {
            dup.insert(m.name.clone());
        }
        if matches!(m.op, PMatchOp::Equal) {
            out.set(&m.name, &m.value);
        }
    }
    for d in dup {
        out.remove(&d);
    }
    out
}

fn unit(t: i64, v: f64) -> Value {
    Value::Vector(vec![VectorSample {
        labels: Labels::default(),
        t,
        v,
        drop_name: false,
    }])
}

fn map_vector(v: Vec<VectorSample>, f: impl Fn(f64) -> f64) -> Value {
    Value::Vector(
        v.into_iter()
            .map(|mut s| {
                s.v = f(s.v);
                s.drop_name = true;
                s
            })
            .collect(),
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
pub(crate) fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn date_part(name: &str, secs: f64) -> f64 {
    if !secs.is_finite() {
        return f64::NAN;
    }
    let s = secs.floor() as i64;
    let days = s.div_euclid(86_400);
    let sod = s.rem_euclid(86_400);
    let (y, m, d) = civil(days);
    let cum = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let doy = cum[(m - 1) as usize] + d as i64 + i64::from(m > 2 && is_leap(y));
    match name {
        "minute" => ((sod / 60) % 60) as f64,
        "hour" => (sod / 3600) as f64,
        "day_of_week" => ((days + 4).rem_euclid(7)) as f64,
        "day_of_month" => f64::from(d),
        "day_of_year" => doy as f64,
        "month" => f64::from(m),
        "year" => y as f64,
        _ => {
            let dim = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
            (dim[(m - 1) as usize] + i64::from(m == 2 && is_leap(y))) as f64
        }
    }
}

/// Evaluates a function call at `t`.
pub(crate) fn call(ev: &mut Evaluator<'_>, c: &Call, t: i64) -> Result<Value, PromqlError> {
    let name = c.func.name;
    match name {
        "time" => {
            return Ok(Value::Scalar {
                t,
                v: t as f64 / 1e3,
            });
        }
        "pi" => {
            return Ok(Value::Scalar {
                t,
                v: std::f64::consts::PI,
            });
        }
        "step" => {
            return Ok(Value::Scalar {
                t,
                v: ev.step_ms as f64 / 1e3,
            });
        }
        "range" => {
            return Ok(Value::Scalar {
                t,
                v: (ev.qend - ev.qstart) as f64 / 1e3,
            });
        }
        "start" => {
            return Ok(Value::Scalar {
                t,
                v: ev.qstart as f64 / 1e3,
            });
        }
        "end" => {
            return Ok(Value::Scalar {
                t,
                v: ev.qend as f64 / 1e3,
            });
        }
        "min_of" | "max_of" => {
            let mut acc: Option<f64> = None;
            for i in 0..c.args.args.len() {
                let x = ev.eval_scalar(arg(c, i)?, t)?;
                acc = Some(match acc {
                    None => x,
                    Some(a) if name == "min_of" => go_min(a, x),
                    Some(a) => go_max(a, x),
                });
            }
            return Ok(Value::Scalar {
                t,
                v: acc.unwrap_or(f64::NAN),
            });
        }
        "vector" => {
            let v = ev.eval_scalar(arg(c, 0)?, t)?;
            return Ok(unit(t, v));
        }
        "scalar" => {
            let v = ev.eval_vector(arg(c, 0)?, t)?;
            let x = if v.len() == 1 { v[0].v } else { f64::NAN };
            return Ok(Value::Scalar { t, v: x });
        }
        "minute" | "hour" | "day_of_week" | "day_of_month" | "day_of_year" | "days_in_month"
        | "month" | "year" => {
            if c.args.args.is_empty() {
                return Ok(unit(t, date_part(name, t as f64 / 1e3)));
            }
            let v = ev.eval_vector(arg(c, 0)?, t)?;
            return Ok(map_vector(v, |x| date_part(name, x)));
        }
        "absent" => {
            let v = ev.eval_vector(arg(c, 0)?, t)?;
            if !v.is_empty() {
                return Ok(Value::Vector(Vec::new()));
            }
            let labels = absent_labels(arg(c, 0)?);
            return Ok(Value::Vector(vec![VectorSample {
                labels,
                t,
                v: 1.0,
                drop_name: false,
            }]));
        }
        "absent_over_time" => {
            let m = ev.eval_matrix(arg(c, 0)?, t)?;
            if !m.is_empty() {
                return Ok(Value::Vector(Vec::new()));
            }
            let labels = absent_labels(arg(c, 0)?);
            return Ok(Value::Vector(vec![VectorSample {
                labels,
                t,
                v: 1.0,
                drop_name: false,
            }]));
        }
        "timestamp" => {
            let a = arg(c, 0)?;
            let mut inner = a;
            while let Expr::Paren(p) = inner {
                inner = &p.expr;
            }
            let direct = matches!(inner, Expr::VectorSelector(_));
            let v = ev.eval_vector(a, t)?;
            return Ok(Value::Vector(
                v.into_iter()
                    .map(|mut s| {
                        s.v = if direct {
                            s.t as f64 / 1e3
                        } else {
                            t as f64 / 1e3
                        };
                        s.drop_name = true;
                        s
                    })
                    .collect(),
            ));
        }
        "sort" | "sort_desc" => {
            let mut v = ev.eval_vector(arg(c, 0)?, t)?;
            let desc = name == "sort_desc";
            v.sort_by(|a, b| match (a.v.is_nan(), b.v.is_nan()) {
                (true, true) => std::cmp::Ordering::Equal,
                (true, false) => std::cmp::Ordering::Greater,
                (false, true) => std::cmp::Ordering::Less,
                _ if desc => b.v.total_cmp(&a.v),
                _ => a.v.total_cmp(&b.v),
            });
            return Ok(Value::Vector(v));
        }
        "sort_by_label" | "sort_by_label_desc" => {
            let mut v = ev.eval_vector(arg(c, 0)?, t)?;
            let mut names = Vec::new();
            for i in 1..c.args.args.len() {
                names.push(ev.eval_string(arg(c, i)?, t)?);
            }
            v.sort_by(|a, b| {
                for n in &names {
                    let o =
                        natural_cmp(a.labels.get(n).unwrap_or(""), b.labels.get(n).unwrap_or(""));
                    if o != std::cmp::Ordering::Equal {
                        return o;
                    }
                }
                a.labels.cmp(&b.labels)
            });
            if name == "sort_by_label_desc" {
                v.reverse();
            }
            return Ok(Value::Vector(v));
        }
        "label_replace" => return label_replace(ev, c, t),
        "label_join" => return label_join(ev, c, t),
        "histogram_quantile" => return aggregate::histogram_quantile(ev, c, t),
        _ => {}
    }
    if let Some(f) = math_fn(name) {
        let v = ev.eval_vector(arg(c, 0)?, t)?;
        return Ok(map_vector(v, f));
    }
    match name {
        "round" => {
            let v = ev.eval_vector(arg(c, 0)?, t)?;
            let to = if c.args.args.len() > 1 {
                ev.eval_scalar(arg(c, 1)?, t)?
            } else {
                1.0
            };
            let inv = 1.0 / to;
            return Ok(map_vector(v, |x| (x * inv + 0.5).floor() / inv));
        }
        "clamp" | "clamp_min" | "clamp_max" => {
            let v = ev.eval_vector(arg(c, 0)?, t)?;
            let (lo, hi) = match name {
                "clamp" => (
                    ev.eval_scalar(arg(c, 1)?, t)?,
                    ev.eval_scalar(arg(c, 2)?, t)?,
                ),
                "clamp_min" => (ev.eval_scalar(arg(c, 1)?, t)?, f64::NAN),
                _ => (f64::NAN, ev.eval_scalar(arg(c, 1)?, t)?),
            };
            if name == "clamp" && hi < lo {
                return Ok(Value::Vector(Vec::new()));
            }
            let (has_lo, has_hi) = (name != "clamp_max", name != "clamp_min");
            return Ok(map_vector(v, |x| {
                let mut r = x;
                if has_lo {
                    r = go_max(lo, r);
                }
                if has_hi {
                    r = go_min(hi, r);
                }
                r
            }));
        }
        _ => {}
    }
    range_fn(ev, c, t)
}

/// Natural order: runs of digits compare by number.
fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if a[i].is_ascii_digit() && b[j].is_ascii_digit() {
            let (si, sj) = (i, j);
            while i < a.len() && a[i].is_ascii_digit() {
                i += 1;
            }
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            let na = std::str::from_utf8(&a[si..i])
                .unwrap_or("")
                .trim_start_matches('0');
            let nb = std::str::from_utf8(&b[sj..j])
                .unwrap_or("")
                .trim_start_matches('0');
            let o = na.len().cmp(&nb.len()).then_with(|| na.cmp(nb));
            if o != Ordering::Equal {
                return o;
            }
        } else {
            if a[i] != b[j] {
                return a[i].cmp(&b[j]);
            }
            i += 1;
            j += 1;
        }
    }
    (a.len() - i).cmp(&(b.len() - j))
}

/// Go's math.Max: NaN wins.
pub(crate) fn go_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// Go's math.Min: NaN wins.
pub(crate) fn go_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

fn math_fn(name: &str) -> Option<fn(f64) -> f64> {
    Some(match name {
        "abs" => f64::abs,
        "ceil" => f64::ceil,
        "floor" => f64::floor,
        "exp" => f64::exp,
        "ln" => f64::ln,
        "log2" => f64::log2,
        "log10" => f64::log10,
        "sqrt" => f64::sqrt,
        "sgn" => |x: f64| {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                x
            }
        },
        "sin" => f64::sin,
        "cos" => f64::cos,
        "tan" => f64::tan,
        "asin" => f64::asin,
        "acos" => f64::acos,
        "atan" => f64::atan,
        "sinh" => f64::sinh,
        "cosh" => f64::cosh,
        "tanh" => f64::tanh,
        "asinh" => f64::asinh,
        "acosh" => f64::acosh,
        "atanh" => f64::atanh,
        "deg" => |x: f64| x * 180.0 / std::f64::consts::PI,
        "rad" => |x: f64| x * std::f64::consts::PI / 180.0,
        _ => return None,
    })
}

fn range_fn(ev: &mut Evaluator<'_>, c: &Call, t: i64) -> Result<Value, PromqlError> {
    let name = c.func.name;
    // Scalar parameters come first for quantile_over_time, after the matrix otherwise.
    let (mi, params) = match name {
        "quantile_over_time" => (1, vec![ev.eval_scalar(arg(c, 0)?, t)?]),
        "predict_linear" => (0, vec![ev.eval_scalar(arg(c, 1)?, t)?]),
        "holt_winters" | "double_exponential_smoothing" => (
            0,
            vec![
                ev.eval_scalar(arg(c, 1)?, t)?,
                ev.eval_scalar(arg(c, 2)?, t)?,
            ],
        ),
        _ => (0, Vec::new()),
    };
    let marg = arg(c, mi)?;
    let (range, end, at_t) = matrix_range(ev, marg, t);
    let m = ev.eval_matrix(marg, t)?;
    if let ("holt_winters" | "double_exponential_smoothing", [sf, tf]) = (name, params.as_slice())
        && !(*sf > 0.0 && *sf < 1.0 && *tf > 0.0 && *tf < 1.0)
    {
        return Err(PromqlError::Execution(format!(
            "invalid smoothing factor. Expected: 0 < sf < 1, got: {sf}; invalid trend factor. Expected: 0 < tf < 1, got: {tf}"
        )));
    }
    let mut out = Vec::with_capacity(m.len());
    for RangeSeries {
        labels,
        points: p,
        drop_name,
    } in m
    {
        let vals = || p.iter().map(|x| x.v);
        let r = match name {
            "rate" => extrapolated_rate(&p, end, range, true, true),
            "increase" => extrapolated_rate(&p, end, range, true, false),
            "delta" => extrapolated_rate(&p, end, range, false, false),
            "irate" => instant_rate(&p, true),
            "idelta" => instant_rate(&p, false),
            "avg_over_time" => Some(avg(vals())),
            "sum_over_time" => {
                let (s, c) = vals().fold((0.0, 0.0), |(s, c), v| kahan_inc(v, s, c));
                Some(if s.is_infinite() { s } else { s + c })
            }
            "count_over_time" => Some(p.len() as f64),
            "min_over_time" => vals().reduce(|a, v| if v < a || a.is_nan() { v } else { a }),
            "max_over_time" => vals().reduce(|a, v| if v > a || a.is_nan() { v } else { a }),
            "last_over_time" => p.last().map(|x| x.v),
            "first_over_time" => p.first().map(|x| x.v),
            "present_over_time" => Some(1.0),
            "stddev_over_time" => Some(variance(vals()).sqrt()),
            "stdvar_over_time" => Some(variance(vals())),
            "mad_over_time" => {
                let mut v: Vec<f64> = vals().collect();
                let med = quantile(0.5, &mut v);
                let mut dev: Vec<f64> = v.iter().map(|x| (x - med).abs()).collect();
                Some(quantile(0.5, &mut dev))
            }
            "quantile_over_time" => {
                let mut v: Vec<f64> = vals().collect();
                Some(quantile(params[0], &mut v))
            }
            "ts_of_last_over_time" => p.last().map(|x| x.t as f64 / 1e3),
            "ts_of_first_over_time" => p.first().map(|x| x.t as f64 / 1e3),
            "ts_of_max_over_time" => ts_of(&p, |a, b| b >= a),
            "ts_of_min_over_time" => ts_of(&p, |a, b| b <= a),
            "resets" => Some(p.windows(2).filter(|w| w[1].v < w[0].v).count() as f64),
            "changes" => Some(
                p.windows(2)
                    .filter(|w| w[1].v != w[0].v && !(w[1].v.is_nan() && w[0].v.is_nan()))
                    .count() as f64,
            ),
            "deriv" => (p.len() >= 2).then(|| linear_regression(&p, p[0].t).0),
            "predict_linear" => (p.len() >= 2).then(|| {
                let (slope, icpt) = linear_regression(&p, at_t);
                icpt + slope * params[0]
            }),
            "holt_winters" | "double_exponential_smoothing" => {
                holt_winters(&p, params[0], params[1])
            }
            other => {
                return Err(PromqlError::Execution(format!(
                    "function {other}() is not supported"
                )));
            }
        };
        if let Some(v) = r {
            let keep = matches!(name, "last_over_time" | "first_over_time");
            out.push(VectorSample {
                labels,
                t,
                v,
                drop_name: if keep { drop_name } else { true },
            });
        }
    }
    ev.hold(out.len())?;
    Ok(Value::Vector(out))
}

fn ts_of(p: &[Point], better: impl Fn(f64, f64) -> bool) -> Option<f64> {
    let mut best = *p.first()?;
    for x in &p[1..] {
        if better(best.v, x.v) || best.v.is_nan() {
            best = *x;
        }
    }
    Some(best.t as f64 / 1e3)
}

/// Mean with Kahan summation, falling back to an incremental mean on overflow.
pub(crate) fn avg(vals: impl Iterator<Item = f64>) -> f64 {
    let (mut sum, mut c, mut mean, mut cmean, mut n) = (0.0, 0.0, 0.0, 0.0, 0.0);
    let mut incremental = false;
    for v in vals {
        n += 1.0;
        if n == 1.0 {
            sum = v;
            mean = v;
            continue;
        }
        if !incremental {
            let (s2, c2) = kahan_inc(v, sum, c);
            if !s2.is_infinite() {
                (sum, c) = (s2, c2);
                continue;
            }
            incremental = true;
            mean = sum / (n - 1.0);
            cmean = c / (n - 1.0);
        }
        let q = (n - 1.0) / n;
        (mean, cmean) = kahan_inc(v / n, q * mean, q * cmean);
    }
    if incremental {
        mean + cmean
    } else {
        sum / n + c / n
    }
}

fn holt_winters(p: &[Point], sf: f64, tf: f64) -> Option<f64> {
    if p.len() < 2 {
        return None;
    }
    let (mut s0, mut s1, mut b) = (0.0, p[0].v, p[1].v - p[0].v);
    for (i, x) in p.iter().enumerate().skip(1) {
        if i > 1 {
            b = tf * (s1 - s0) + (1.0 - tf) * b;
        }
        let y = (1.0 - sf) * (s1 + b);
        s0 = s1;
        s1 = sf * x.v + y;
    }
    Some(s1)
}

fn label_replace(ev: &mut Evaluator<'_>, c: &Call, t: i64) -> Result<Value, PromqlError> {
    let v = ev.eval_vector(arg(c, 0)?, t)?;
    let dst = ev.eval_string(arg(c, 1)?, t)?;
    let repl = ev.eval_string(arg(c, 2)?, t)?;
    let src = ev.eval_string(arg(c, 3)?, t)?;
    let re_s = ev.eval_string(arg(c, 4)?, t)?;
    let m = prepass::regex_matcher(&re_s).map_err(|_| {
        PromqlError::Execution(format!(
            "invalid regular expression in label_replace(): {re_s}"
        ))
    })?;
    let PMatchOp::Re(re) = &m.op else {
        return Err(PromqlError::Execution(
            "invalid regular expression in label_replace()".into(),
        ));
    };
    if !valid_label_name(&dst) {
        return Err(PromqlError::Execution(format!(
            "invalid destination label name in label_replace(): {dst}"
        )));
    }
    let mut out = Vec::with_capacity(v.len());
    for mut s in v {
        let val = s.labels.get(&src).unwrap_or("").to_string();
        if let Some(caps) = re.captures(&val) {
            let mut res = String::new();
            caps.expand(&repl, &mut res);
            s.labels.set(&dst, &res);
            if dst == METRIC_NAME {
                s.drop_name = false;
            }
        }
        out.push(s);
    }
    check_unique(&out)?;
    Ok(Value::Vector(out))
}

fn label_join(ev: &mut Evaluator<'_>, c: &Call, t: i64) -> Result<Value, PromqlError> {
    let v = ev.eval_vector(arg(c, 0)?, t)?;
    let dst = ev.eval_string(arg(c, 1)?, t)?;
    let sep = ev.eval_string(arg(c, 2)?, t)?;
    let mut srcs = Vec::new();
    for i in 3..c.args.args.len() {
        srcs.push(ev.eval_string(arg(c, i)?, t)?);
    }
    if !valid_label_name(&dst) {
        return Err(PromqlError::Execution(format!(
            "invalid destination label name in label_join(): {dst}"
        )));
    }
    let mut out = Vec::with_capacity(v.len());
    for mut s in v {
        let joined: Vec<&str> = srcs.iter().map(|n| s.labels.get(n).unwrap_or("")).collect();
        let joined = joined.join(&sep);
        s.labels.set(&dst, &joined);
        if dst == METRIC_NAME {
            s.drop_name = false;
        }
        out.push(s);
    }
    check_unique(&out)?;
    Ok(Value::Vector(out))
}

/// Prometheus 3 accepts any non-empty UTF-8 label name.
pub(crate) fn valid_label_name(n: &str) -> bool {
    !n.is_empty()
}

fn check_unique(v: &[VectorSample]) -> Result<(), PromqlError> {
    let mut seen = std::collections::HashSet::new();
    for s in v {
        let mut l = s.labels.clone();
        if s.drop_name {
            l.remove(METRIC_NAME);
        }
        if !seen.insert(l) {
            return Err(PromqlError::Execution(
                "vector cannot contain metrics with the same labelset".into(),
            ));
        }
    }
    Ok(())
}

//! Functions over range vectors: rate family, `*_over_time`, regression.

use promql_parser::parser::{Call, Expr};

use super::super::PromqlError;
use super::super::eval::Evaluator;
use super::super::prepass::{self, Mode, dur_ms};
use super::super::value::{Point, RangeSeries, Value, VectorSample};
use super::arg;
use super::math::{avg, kahan_inc, quantile, variance};

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

/// True when a start time says the counter restarted between the previous
/// sample and this one (OTel semantics: a start time equal to the previous
/// sample's time is a reset only for delta series, whose previous start
/// time is known).
fn start_reset(prev_st: i64, prev_t: i64, cur_st: i64, cur_t: i64) -> bool {
    if cur_st == 0 || cur_st >= cur_t || cur_st < prev_t {
        return false;
    }
    if cur_st > prev_t {
        return true;
    }
    prev_st <= prev_t && prev_st != 0 && prev_st != prev_t
}

/// A start time before the previous sample's time that is not the previous
/// start time: the two samples' intervals overlap.
fn start_overlap(prev_st: i64, prev_t: i64, cur_st: i64) -> bool {
    cur_st != 0 && cur_st < prev_t && cur_st != prev_st
}

/// True when sample `i` (> 0) starts a new count: its value dropped or its
/// start time says so. `st` is empty or aligned with `p`.
fn is_reset(p: &[Point], st: &[i64], i: usize) -> bool {
    p[i].v < p[i - 1].v || (i < st.len() && start_reset(st[i - 1], p[i - 1].t, st[i], p[i].t))
}

/// True when point `i` (> 0) of `p` is a counter reset or its start time
/// overlaps the previous point's: what rate's reset scan looks for.
pub(crate) fn is_break(p: &[Point], st: &[i64], i: usize) -> bool {
    is_reset(p, st, i) || (i < st.len() && start_overlap(st[i - 1], p[i - 1].t, st[i]))
}

/// Prometheus' `extrapolatedRate` for rate, increase and delta. `st` (empty
/// or aligned with `p`) holds start times: they mark resets, and a first
/// start time inside the window replaces extrapolation to the left by a
/// zero sample at that time. Sets `overlap` when start times overlap.
/// `breaks` false: the caller knows no point of `p` is a reset or overlap.
pub(crate) fn extrapolated_rate(
    p: &[Point],
    st: &[i64],
    (t, range): (i64, i64),
    counter: bool,
    is_rate: bool,
    overlap: &mut bool,
    breaks: bool,
) -> Option<f64> {
    let (first, last) = (*p.first()?, *p.last()?);
    let mut result = last.v - first.v;
    if counter && breaks {
        for i in 1..p.len() {
            if !*overlap && i < st.len() && start_overlap(st[i - 1], p[i - 1].t, st[i]) {
                *overlap = true;
            }
            if is_reset(p, st, i) {
                result += p[i - 1].v;
            }
        }
    }
    let range_start = t - range;
    let mut to_start = (first.t - range_start) as f64 / 1e3;
    let mut to_end = (t - last.t) as f64 / 1e3;
    let mut sampled = (last.t - first.t) as f64 / 1e3;
    let avg = if p.len() > 1 {
        sampled / (p.len() - 1) as f64
    } else {
        0.0
    };
    let threshold = avg * 1.1;
    let st0 = st.first().copied().unwrap_or(0);
    if counter && st0 != 0 && st0 > range_start && st0 < first.t {
        // The counter started inside the window: count from zero at its
        // start time instead of extrapolating to the left.
        to_start = 0.0;
        sampled = (last.t - st0) as f64 / 1e3;
        result += first.v;
    } else if p.len() < 2 {
        return None;
    } else {
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
    }
    if to_end >= threshold {
        to_end = avg / 2.0;
    }
    let mut factor = if sampled != 0.0 {
        (sampled + to_start + to_end) / sampled
    } else {
        1.0
    };
    if is_rate {
        factor /= range as f64 / 1e3;
    }
    Some(result * factor)
}

fn instant_rate(p: &[Point], st: &[i64], is_rate: bool) -> Option<f64> {
    if p.len() < 2 {
        return None;
    }
    let n = p.len() - 1;
    let (prev, last) = (p[n - 1], p[n]);
    let mut r = if is_rate && is_reset(p, st, n) {
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

/// The range of a matrix argument (a selector or a subquery) in ms and the
/// end of its window (offset and `@` applied).
fn matrix_range(ev: &Evaluator<'_>, e: &Expr, t: i64) -> (i64, i64) {
    let (range, at, off) = match e {
        Expr::MatrixSelector(m) => (dur_ms(&m.range), &m.vs.at, &m.vs.offset),
        Expr::Subquery(s) => (dur_ms(&s.range), &s.at, &s.offset),
        Expr::Paren(p) => return matrix_range(ev, &p.expr, t),
        _ => return (0, t),
    };
    let end = prepass::adjust(at, off, t, ev.qstart, ev.qend);
    (range, end)
}

pub(super) fn range_fn(ev: &mut Evaluator<'_>, c: &Call, t: i64) -> Result<Value, PromqlError> {
    let name = c.func.name;
    // Scalar parameters come first for quantile_over_time, after the matrix otherwise.
    let (mi, params) = match name {
        "quantile_over_time" => {
            let q = ev.eval_scalar(arg(c, 0)?, t)?;
            ev.check_quantile(q, name, arg(c, 0)?);
            (1, vec![q])
        }
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
    let (range, end) = matrix_range(ev, marg, t);
    let mode = match marg {
        Expr::MatrixSelector(ms) => prepass::mode(&ms.vs),
        _ => Mode::Plain,
    };
    check_mode(name, mode)?;
    let m = ev.eval_matrix(marg, t)?;
    if let ("holt_winters" | "double_exponential_smoothing", [sf, tf]) = (name, params.as_slice())
        && !(*sf > 0.0 && *sf < 1.0 && *tf > 0.0 && *tf < 1.0)
    {
        return Err(PromqlError::Execution(format!(
            "invalid smoothing factor. Expected: 0 < sf < 1, got: {sf}; invalid trend factor. Expected: 0 < tf < 1, got: {tf}"
        )));
    }
    let mut out = Vec::with_capacity(m.len());
    let mut overlaps: Vec<String> = Vec::new();
    // Metrics that gave `rate`/`increase` a value under a name that might
    // not be a counter's (one info each, raised after the series).
    let mut non_counters: Vec<String> = Vec::new();
    for RangeSeries {
        labels,
        points: p,
        drop_name,
        start_ms: st,
    } in m
    {
        let mut overlap = false;
        let r = apply(
            name,
            &p,
            &st,
            (end, range, t),
            &params,
            (mode, true),
            &mut overlap,
        )?;
        if overlap {
            overlaps.push(labels.name().to_string());
        }
        if r.is_some()
            && matches!(name, "rate" | "increase")
            && super::super::annotate::might_not_be_counter(labels.name())
            && !non_counters.iter().any(|m| m == labels.name())
        {
            non_counters.push(labels.name().to_string());
        }
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
    for metric in non_counters {
        ev.info_non_counter(&metric, name, marg);
    }
    for metric in overlaps {
        let msg = format!(
            "sample has start time that overlaps with previous sample timestamp for metric {metric:?}"
        );
        ev.warn(&msg, name, marg);
    }
    ev.hold(out.len())?;
    Ok(Value::Vector(out))
}

/// The value of range function `name` over one series' window `p` (start
/// times `st`, empty or aligned) ending at `end` with length `range`,
/// evaluated at `t`; `None` where the function yields no sample.
pub(crate) fn apply(
    name: &str,
    p: &[Point],
    st: &[i64],
    (end, range, t): (i64, i64, i64),
    params: &[f64],
    (mode, breaks): (Mode, bool),
    overlap: &mut bool,
) -> Result<Option<f64>, PromqlError> {
    let vals = || p.iter().map(|x| x.v);
    Ok(match name {
        "rate" | "increase" | "delta" if mode != Mode::Plain => extended_rate(
            p,
            end - range,
            end,
            mode == Mode::Smoothed,
            name != "delta",
            name == "rate",
        ),
        "rate" => extrapolated_rate(p, st, (end, range), true, true, overlap, breaks),
        "increase" => extrapolated_rate(p, st, (end, range), true, false, overlap, breaks),
        "delta" => extrapolated_rate(p, st, (end, range), false, false, overlap, breaks),
        "irate" => instant_rate(p, st, true),
        "idelta" => instant_rate(p, st, false),
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
        "mad_over_time" if vals().any(f64::is_nan) => Some(f64::NAN),
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
        "ts_of_max_over_time" => ts_of(p, |a, b| b >= a),
        "ts_of_min_over_time" => ts_of(p, |a, b| b <= a),
        "resets" => Some((1..p.len()).filter(|&i| is_reset(p, st, i)).count() as f64),
        "changes" => Some(
            p.windows(2)
                .filter(|w| w[1].v != w[0].v && !(w[1].v.is_nan() && w[0].v.is_nan()))
                .count() as f64,
        ),
        "deriv" => (p.len() >= 2).then(|| linear_regression(p, p[0].t).0),
        "predict_linear" => (p.len() >= 2).then(|| {
            // The intercept is at the evaluation time, even under `@`.
            let (slope, icpt) = linear_regression(p, t);
            icpt + slope * params[0]
        }),
        "holt_winters" | "double_exponential_smoothing" => holt_winters(p, params[0], params[1]),
        other => {
            return Err(PromqlError::Execution(format!(
                "function {other}() is not supported"
            )));
        }
    })
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

/// Refuses `anchored`/`smoothed` ranges for functions that do not define them.
pub(super) fn check_mode(name: &str, mode: Mode) -> Result<(), PromqlError> {
    let (allowed, label): (&[&str], &str) = match mode {
        Mode::Plain => return Ok(()),
        Mode::Anchored => (
            &["changes", "delta", "increase", "rate", "resets"],
            "anchored",
        ),
        Mode::Smoothed => (&["delta", "increase", "rate"], "smoothed"),
    };
    if allowed.contains(&name) {
        return Ok(());
    }
    Err(PromqlError::Execution(format!(
        "{label} modifier can only be used with: {} - not with {name}",
        allowed.join(", ")
    )))
}

/// Linear interpolation at `t`; a counter that reset restarts from zero.
fn interpolate(a: Point, b: Point, t: i64, counter: bool) -> f64 {
    let y1 = if counter && b.v < a.v { 0.0 } else { a.v };
    y1 + (b.v - y1) * (t - a.t) as f64 / (b.t - a.t) as f64
}

/// rate/increase/delta over an `anchored` or `smoothed` window
/// `(start, end]`: `p` holds the window's samples plus the boundary samples
/// the selector added (the one at or before `start`; for `smoothed` also
/// the first after `end`). No extrapolation: the boundary values are the
/// boundary samples, interpolated to the window edges when smoothed.
fn extended_rate(
    p: &[Point],
    start: i64,
    end: i64,
    smoothed: bool,
    counter: bool,
    is_rate: bool,
) -> Option<f64> {
    let mut last = p.len().checked_sub(1)?;
    let first = p[..last]
        .iter()
        .position(|x| x.t > start)
        .unwrap_or(last)
        .saturating_sub(1);
    if smoothed {
        last = p[..last].iter().position(|x| x.t >= end).unwrap_or(last);
    }
    if p[last].t <= start || (smoothed && p[first].t > end) {
        return None;
    }
    let left = if smoothed && p[first].t < start {
        interpolate(p[first], *p.get(first + 1)?, start, counter)
    } else {
        p[first].v
    };
    let right = if smoothed && last > 0 && p[last].t > end {
        interpolate(p[last - 1], p[last], end, counter)
    } else {
        p[last].v
    };
    let mut result = right - left;
    if counter {
        let lo = first + usize::from(p[first].t <= start);
        let hi = if p[last].t >= end { last } else { last + 1 };
        let mut prev = left;
        for x in p.get(lo..hi).unwrap_or(&[]) {
            if x.v < prev {
                result += prev;
            }
            prev = x.v;
        }
        if right < prev {
            result += prev;
        }
    }
    if is_rate {
        result /= (end - start) as f64 / 1e3;
    }
    Some(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_resets_follow_otel_semantics() {
        // Unknown, invalid (after the sample) or OTel's "unknown start" (== T).
        assert!(!start_reset(0, 1000, 0, 2000));
        assert!(!start_reset(0, 1000, 2500, 2000));
        assert!(!start_reset(0, 1000, 2000, 2000));
        // A cumulative series keeps its start time: no reset.
        assert!(!start_reset(500, 1000, 500, 2000));
        // Started after the previous sample: reset.
        assert!(start_reset(500, 1000, 1500, 2000));
        // Start == previous time: a delta point only if the previous start is known.
        assert!(start_reset(500, 1000, 1000, 2000));
        assert!(!start_reset(0, 1000, 1000, 2000));
        assert!(!start_reset(1000, 1000, 1000, 2000));
        assert!(!start_reset(1500, 1000, 1000, 2000));
        assert!(start_overlap(500, 1000, 400));
        assert!(!start_overlap(500, 1000, 500));
        assert!(!start_overlap(500, 1000, 1000));
    }

    #[test]
    fn a_single_sample_with_a_start_time_has_an_increase() {
        let p = [Point { t: 60_000, v: 6.0 }];
        let mut overlap = false;
        // No start time: nothing.
        assert_eq!(
            extrapolated_rate(&p, &[], (120_000, 120_000), true, false, &mut overlap, true),
            None
        );
        // Started at 30 s, inside (0, 120 s]: 6 counted from zero at 30 s.
        let r = extrapolated_rate(
            &p,
            &[30_000],
            (120_000, 120_000),
            true,
            false,
            &mut overlap,
            true,
        );
        assert_eq!(r, Some(6.0));
        assert!(!overlap);
        let two = [Point { t: 60_000, v: 6.0 }, Point { t: 90_000, v: 9.0 }];
        let _ = extrapolated_rate(
            &two,
            &[30_000, 20_000],
            (120_000, 120_000),
            true,
            false,
            &mut overlap,
            true,
        );
        assert!(overlap, "start 20 s overlaps the previous sample at 60 s");
    }
}

//! The evaluator: one step at a time, selectors served from a per-query cache.

use std::collections::HashMap;
use std::rc::Rc;

use canopy_proto::model::is_stale_nan;
use promql_parser::parser::value::ValueType;
use promql_parser::parser::{Expr, MatrixSelector, SubqueryExpr, VectorSelector};

use super::annotate::MonotonicityInfo;
use super::prepass::{self, Mode, Windows, adjust, dur_ms};
use super::value::{Matrix, Point, RangeSeries, Value, VectorSample, finish_labels};
use super::{Cancel, EngineOpts, PromqlError, aggregate, binary, functions};
use crate::store::{Labels, Querier, Series};

/// What [`Evaluator::fetch_each`] hands each series to: the series (its
/// label set cut down) and its handle for the builder of whole label sets
/// given at the end; `Ok(false)` stops the stream.
pub(crate) type SeriesSink<'f> = dyn FnMut(&Series, usize) -> Result<bool, PromqlError> + 'f;

/// Evaluation state of one query.
pub(crate) struct Evaluator<'a> {
    pub(crate) opts: &'a EngineOpts,
    q: &'a dyn Querier,
    cancel: Cancel<'a>,
    /// Start and end of the query (for `@ start()` / `@ end()`).
    pub(crate) qstart: i64,
    pub(crate) qend: i64,
    windows: Windows,
    cache: HashMap<usize, Rc<Vec<Series>>>,
    /// Per selector and series, where the last window started: a range
    /// query's windows move forward, so the next one is found by stepping
    /// on from there instead of a binary search over the whole series.
    cursors: HashMap<usize, Vec<usize>>,
    calls: u32,
    /// Samples held during the current step, checked against the limit.
    cur_samples: usize,
    /// Step of a range query (0 for an instant query), for `step()`.
    pub(crate) step_ms: i64,
    /// The query text (after the pre-pass), for annotation positions.
    pub(crate) text: &'a str,
    /// Annotations raised so far (warnings and infos), as the HTTP API
    /// words them (deduplicated).
    pub(crate) warnings: Vec<String>,
    /// Forced-monotonicity infos of `histogram_quantile` so far, merged
    /// per metric name and position over the query's steps, worded by
    /// [`Evaluator::annotations`].
    pub(super) monotonicity: Vec<MonotonicityInfo>,
}

impl<'a> Evaluator<'a> {
    fn new(
        opts: &'a EngineOpts,
        q: &'a dyn Querier,
        cancel: Cancel<'a>,
        expr: &Expr,
        start: i64,
        end: i64,
    ) -> Self {
        let mut windows = Windows::new();
        prepass::windows(expr, start, end, start, end, opts.lookback_ms, &mut windows);
        Evaluator {
            opts,
            q,
            cancel,
            qstart: start,
            qend: end,
            windows,
            cache: HashMap::new(),
            cursors: HashMap::new(),
            calls: 0,
            cur_samples: 0,
            step_ms: 0,
            text: "",
            warnings: Vec::new(),
            monotonicity: Vec::new(),
        }
    }

    /// Accounts for `n` more samples held in this step.
    pub(crate) fn hold(&mut self, n: usize) -> Result<(), PromqlError> {
        self.cur_samples = self.cur_samples.saturating_add(n);
        if self.cur_samples > self.opts.max_samples {
            return Err(PromqlError::TooManySamples {
                limit: self.opts.max_samples,
            });
        }
        Ok(())
    }

    pub(crate) fn check_cancel(&mut self) -> Result<(), PromqlError> {
        self.calls = self.calls.wrapping_add(1);
        if self.calls.is_multiple_of(32) && (self.cancel)() {
            return Err(PromqlError::Timeout);
        }
        Ok(())
    }

    /// Evaluates `e` at time `t` (ms).
    pub(crate) fn eval(&mut self, e: &Expr, t: i64) -> Result<Value, PromqlError> {
        self.check_cancel()?;
        match e {
            Expr::NumberLiteral(n) => Ok(Value::Scalar { t, v: n.val }),
            Expr::StringLiteral(s) => Ok(Value::String {
                t,
                s: s.val.clone(),
            }),
            Expr::Paren(p) => self.eval(&p.expr, t),
            Expr::Unary(u) => match self.eval(&u.expr, t)? {
                Value::Scalar { t, v } => Ok(Value::Scalar { t, v: -v }),
                Value::Vector(mut vec) => {
                    for s in &mut vec {
                        s.v = -s.v;
                        s.drop_name = true;
                    }
                    Ok(Value::Vector(vec))
                }
                other => Err(PromqlError::Execution(format!(
                    "unary expression only allowed on scalar or vector, got {}",
                    other.type_name()
                ))),
            },
            Expr::VectorSelector(vs) => Ok(Value::Vector(self.vector_select(vs, t)?)),
            Expr::MatrixSelector(ms) => Ok(Value::Matrix(self.matrix_select(ms, t)?)),
            Expr::Subquery(sq) => Ok(Value::Matrix(self.subquery(sq, t)?)),
            Expr::Call(c) => functions::call(self, c, t),
            Expr::Aggregate(a) => aggregate::eval(self, a, t),
            Expr::Binary(b) => binary::eval(self, b, t),
            Expr::Extension(_) => Err(PromqlError::Execution(
                "extension expressions are not supported".into(),
            )),
        }
    }

    /// Evaluates `e` and requires an instant vector.
    pub(crate) fn eval_vector(
        &mut self,
        e: &Expr,
        t: i64,
    ) -> Result<Vec<VectorSample>, PromqlError> {
        match self.eval(e, t)? {
            Value::Vector(v) => Ok(v),
            other => Err(PromqlError::Execution(format!(
                "expected instant vector, got {}",
                other.type_name()
            ))),
        }
    }

    /// Evaluates `e` and requires a range vector.
    pub(crate) fn eval_matrix(&mut self, e: &Expr, t: i64) -> Result<Matrix, PromqlError> {
        match self.eval(e, t)? {
            Value::Matrix(m) => Ok(m),
            other => Err(PromqlError::Execution(format!(
                "expected range vector, got {}",
                other.type_name()
            ))),
        }
    }

    /// Evaluates `e` and requires a scalar.
    pub(crate) fn eval_scalar(&mut self, e: &Expr, t: i64) -> Result<f64, PromqlError> {
        match self.eval(e, t)? {
            Value::Scalar { v, .. } => Ok(v),
            other => Err(PromqlError::Execution(format!(
                "expected scalar, got {}",
                other.type_name()
            ))),
        }
    }

    /// Evaluates `e` and requires a string.
    pub(crate) fn eval_string(&mut self, e: &Expr, t: i64) -> Result<String, PromqlError> {
        match self.eval(e, t)? {
            Value::String { s, .. } => Ok(s),
            other => Err(PromqlError::Execution(format!(
                "expected string, got {}",
                other.type_name()
            ))),
        }
    }

    /// The time window a selector reads: the one the pre-pass planned for
    /// it over the whole query, else `range` ending at `t`.
    fn window(&self, k: usize, t: i64, range: i64) -> (i64, i64) {
        self.windows
            .get(&k)
            .copied()
            .unwrap_or((t.saturating_sub(range), t))
    }

    pub(crate) fn fetch(
        &mut self,
        vs: &VectorSelector,
        t: i64,
        range: i64,
    ) -> Result<Rc<Vec<Series>>, PromqlError> {
        let k = prepass::key(vs);
        if let Some(s) = self.cache.get(&k) {
            return Ok(Rc::clone(s));
        }
        let (lo, hi) = self.window(k, t, range);
        let matchers = prepass::matchers(vs)?;
        let series = self
            .q
            .select(&matchers, lo, hi, self.opts.max_series_per_selector)
            .map_err(series_limit)?;
        let rc = Rc::new(series);
        self.cache.insert(k, Rc::clone(&rc));
        Ok(rc)
    }

    /// Streams the series [`Evaluator::fetch`] would return, in its order,
    /// each label set cut down to the labels `keep` accepts (see
    /// [`Querier::select_each`]), to `f` until it returns `Ok(false)`;
    /// checks for cancellation as the series go by. Then, unless `f`
    /// failed, `done` may build the whole label sets of series by their
    /// handles. Not cached: for an aggregation, which needs only its
    /// grouping labels and each series once. `Ok(false)` when `f` stopped
    /// early.
    ///
    /// [`Querier::select_each`]: crate::store::Querier::select_each
    pub(crate) fn fetch_each(
        &mut self,
        vs: &VectorSelector,
        t: i64,
        range: i64,
        keep: &dyn Fn(&str) -> bool,
        f: &mut SeriesSink<'_>,
        done: &mut crate::store::WholeLabels<'_>,
    ) -> Result<bool, PromqlError> {
        let k = prepass::key(vs);
        let (lo, hi) = self.window(k, t, range);
        let matchers = prepass::matchers(vs)?;
        let (q, cancel, limit) = (self.q, self.cancel, self.opts.max_series_per_selector);
        let calls = &mut self.calls;
        let mut err = None;
        let mut stopped = false;
        let failed = std::cell::Cell::new(false);
        let mut finish = |whole: &dyn Fn(usize) -> Labels| {
            if !failed.get() {
                done(whole);
            }
        };
        let each = &mut |s: &Series, h: usize| {
            *calls = calls.wrapping_add(1);
            let r = if calls.is_multiple_of(32) && cancel() {
                Err(PromqlError::Timeout)
            } else {
                f(s, h)
            };
            match r {
                Ok(go) => {
                    stopped = !go;
                    go
                }
                Err(e) => {
                    failed.set(true);
                    err = Some(e);
                    false
                }
            }
        };
        q.select_each(&matchers, lo, hi, limit, keep, each, &mut finish)
            .map_err(series_limit)?;
        match err {
            Some(e) => Err(e),
            None => Ok(!stopped),
        }
    }

    /// Series matching `matchers` with their newest sample time in the
    /// lookback window ending at `t` (stale series left out).
    pub(crate) fn select_latest(
        &mut self,
        matchers: &[crate::store::Matcher],
        t: i64,
    ) -> Result<Vec<(Labels, i64)>, PromqlError> {
        let lookback = self.opts.lookback_ms;
        let lo = t.saturating_sub(lookback) + 1;
        let series = self
            .q
            .select(matchers, lo, t, self.opts.max_series_per_selector)
            .map_err(series_limit)?;
        let mut out = Vec::new();
        for s in series {
            let idx = s.samples.partition_point(|p| p.ts_ms <= t);
            let Some(p) = idx.checked_sub(1).and_then(|i| s.samples.get(i)) else {
                continue;
            };
            if p.ts_ms > t - lookback && !is_stale_nan(p.value) {
                out.push((s.labels, p.ts_ms));
            }
        }
        self.hold(out.len())?;
        Ok(out)
    }

    /// An instant selector at `t`: the newest sample in the lookback window,
    /// unless it is a staleness marker. `VectorSample::t` is the sample's time.
    pub(crate) fn vector_select(
        &mut self,
        vs: &VectorSelector,
        t: i64,
    ) -> Result<Vec<VectorSample>, PromqlError> {
        let tt = adjust(&vs.at, &vs.offset, t, self.qstart, self.qend);
        let lookback = self.opts.lookback_ms;
        let all = self.fetch(vs, tt, lookback)?;
        let smoothed = prepass::mode(vs) == Mode::Smoothed;
        let mut out = Vec::new();
        for s in all.iter() {
            let idx = s.samples.partition_point(|p| p.ts_ms <= tt);
            let Some(p) = idx.checked_sub(1).and_then(|i| s.samples.get(i)) else {
                continue;
            };
            if p.ts_ms <= tt - lookback || is_stale_nan(p.value) {
                continue;
            }
            let mut v = p.value;
            if smoothed
                && p.ts_ms < tt
                && let Some(n) = s.samples.get(idx)
                && n.ts_ms <= tt + lookback
                && !is_stale_nan(n.value)
            {
                let w = (tt - p.ts_ms) as f64 / (n.ts_ms - p.ts_ms) as f64;
                v = p.value + (n.value - p.value) * w;
            }
            out.push(VectorSample {
                labels: s.labels.clone(),
                t: if smoothed { tt } else { p.ts_ms },
                v,
                drop_name: false,
            });
        }
        self.hold(out.len())?;
        Ok(out)
    }

    /// `start_timestamp(selector)` at `t`: the start time (in seconds, 0
    /// where unknown) of the sample an instant selector picks.
    pub(crate) fn start_timestamps(
        &mut self,
        vs: &VectorSelector,
        t: i64,
    ) -> Result<Vec<VectorSample>, PromqlError> {
        let tt = adjust(&vs.at, &vs.offset, t, self.qstart, self.qend);
        let lookback = self.opts.lookback_ms;
        let all = self.fetch(vs, tt, lookback)?;
        let mut out = Vec::new();
        for s in all.iter() {
            let sts = s.start_ms.as_deref();
            let idx = s.samples.partition_point(|p| p.ts_ms <= tt);
            let Some(i) = idx.checked_sub(1) else {
                continue;
            };
            let p = s.samples[i];
            if p.ts_ms <= tt - lookback || is_stale_nan(p.value) {
                continue;
            }
            out.push(VectorSample {
                labels: s.labels.clone(),
                t,
                v: sts.and_then(|x| x.get(i)).copied().unwrap_or(0) as f64 / 1e3,
                drop_name: true,
            });
        }
        self.hold(out.len())?;
        Ok(out)
    }

    /// A range selector at `t`: samples in `(t - range, t]`, staleness markers left out.
    pub(crate) fn matrix_select(
        &mut self,
        ms: &MatrixSelector,
        t: i64,
    ) -> Result<Matrix, PromqlError> {
        let vs = &ms.vs;
        let tt = adjust(&vs.at, &vs.offset, t, self.qstart, self.qend);
        let range = dur_ms(&ms.range);
        let all = self.fetch(vs, tt, range)?;
        let lo = tt.saturating_sub(range);
        let mode = prepass::mode(vs);
        let lookback = self.opts.lookback_ms;
        let mut out = Vec::new();
        let mut n = 0;
        let cursors = self.cursors.entry(prepass::key(vs)).or_default();
        cursors.resize(all.len(), 0);
        for (s, cur) in all.iter().zip(cursors.iter_mut()) {
            let a = window_start(&s.samples, lo, cur);
            // A linear scan: the window's points are copied below anyway.
            let b = a + s.samples[a..].iter().take_while(|p| p.ts_ms <= tt).count();
            let live = |p: &crate::store::Sample| !is_stale_nan(p.value);
            let sts = s.start_ms.as_deref();
            let mut points: Vec<Point> = Vec::new();
            let mut start_ms: Vec<i64> = Vec::new();
            let mut take = |i: usize, points: &mut Vec<Point>| {
                let p = s.samples[i];
                points.push(Point {
                    t: p.ts_ms,
                    v: p.value,
                });
                if let Some(sts) = sts {
                    start_ms.push(sts.get(i).copied().unwrap_or(0));
                }
            };
            if mode != Mode::Plain {
                if mode == Mode::Anchored && !s.samples[a..b].iter().any(live) {
                    continue;
                }
                // The last sample at or before the window start, within lookback.
                if let Some(i) = a.checked_sub(1)
                    && s.samples[i].ts_ms > lo - lookback
                    && live(&s.samples[i])
                {
                    take(i, &mut points);
                }
            }
            for i in a..b {
                if live(&s.samples[i]) {
                    take(i, &mut points);
                }
            }
            if mode == Mode::Smoothed
                && let Some(p) = s.samples.get(b)
                && p.ts_ms <= tt + lookback
                && live(p)
            {
                take(b, &mut points);
            }
            if points.is_empty() {
                continue;
            }
            n += points.len();
            out.push(RangeSeries {
                labels: s.labels.clone(),
                points,
                drop_name: false,
                start_ms,
            });
        }
        self.hold(n)?;
        Ok(out)
    }

    /// A subquery at `t`: the inner expression at each step-aligned time in
    /// `(t - range, t]`.
    fn subquery(&mut self, sq: &SubqueryExpr, t: i64) -> Result<Matrix, PromqlError> {
        let tt = adjust(&sq.at, &sq.offset, t, self.qstart, self.qend);
        let step = sq
            .step
            .as_ref()
            .map_or(self.opts.default_subquery_step_ms, dur_ms);
        if step <= 0 {
            return Err(PromqlError::Execution(
                "subquery step must be positive".into(),
            ));
        }
        let range = dur_ms(&sq.range);
        let lo = tt.saturating_sub(range);
        let mut start = step * (lo / step);
        if start <= lo {
            start += step;
        }
        if tt >= start && (tt - start) / step >= self.opts.max_points_per_series {
            return Err(PromqlError::Execution(format!(
                "subquery would evaluate more than {} steps",
                self.opts.max_points_per_series
            )));
        }
        let mut index: HashMap<Labels, usize> = HashMap::new();
        let mut out: Matrix = Vec::new();
        let mut it = start;
        while it <= tt {
            let samples = match self.eval(&sq.expr, it)? {
                Value::Vector(v) => v,
                Value::Scalar { v, .. } => vec![VectorSample {
                    labels: Labels::default(),
                    t: it,
                    v,
                    drop_name: false,
                }],
                other => {
                    return Err(PromqlError::Execution(format!(
                        "subquery is only allowed on instant vector, got {}",
                        other.type_name()
                    )));
                }
            };
            self.hold(samples.len())?;
            for s in samples {
                let i = *index.entry(s.labels.clone()).or_insert_with(|| {
                    out.push(RangeSeries {
                        labels: s.labels.clone(),
                        points: Vec::new(),
                        drop_name: s.drop_name,
                        start_ms: Vec::new(),
                    });
                    out.len() - 1
                });
                out[i].points.push(Point { t: it, v: s.v });
            }
            it += step;
        }
        Ok(out)
    }
}

/// Index of the first sample after `lo`. `cur` is where the previous
/// window of this series started: when `lo` moved forward a little (the
/// next step of a range query) step on from there, else binary search.
fn window_start(samples: &[crate::store::Sample], lo: i64, cur: &mut usize) -> usize {
    let mut a = (*cur).min(samples.len());
    if a > 0 && samples[a - 1].ts_ms > lo {
        a = samples.partition_point(|p| p.ts_ms <= lo);
    } else {
        let mut steps = 0;
        while a < samples.len() && samples[a].ts_ms <= lo {
            a += 1;
            steps += 1;
            if steps == 64 {
                a += samples[a..].partition_point(|p| p.ts_ms <= lo);
                break;
            }
        }
    }
    *cur = a;
    a
}

/// The store's per-selection limit as the engine's typed error.
fn series_limit(e: crate::store::StoreError) -> PromqlError {
    match e {
        crate::store::StoreError::SelectLimit { limit } => PromqlError::TooManySeries { limit },
        other => PromqlError::Store(other),
    }
}

fn dup_error() -> PromqlError {
    PromqlError::Execution("vector cannot contain metrics with the same labelset".into())
}

/// Applies delayed name removal and checks for duplicates.
fn finish(v: Value, t: i64) -> Result<Value, PromqlError> {
    match v {
        Value::Vector(mut vec) => {
            let mut seen = std::collections::HashSet::new();
            for s in &mut vec {
                finish_labels(&mut s.labels, s.drop_name);
                s.drop_name = false;
                s.t = t;
                if !seen.insert(s.labels.clone()) {
                    return Err(dup_error());
                }
            }
            Ok(Value::Vector(vec))
        }
        Value::Matrix(mut m) => {
            for s in &mut m {
                finish_labels(&mut s.labels, s.drop_name);
                s.drop_name = false;
            }
            m.sort_by(|a, b| a.labels.cmp(&b.labels));
            if m.windows(2).any(|w| w[0].labels == w[1].labels) {
                return Err(dup_error());
            }
            Ok(Value::Matrix(m))
        }
        other => Ok(other),
    }
}

/// Runs an instant query; also returns its warnings.
pub(crate) fn instant(
    opts: &EngineOpts,
    q: &dyn Querier,
    (expr, text): (&Expr, &str),
    ts: i64,
    cancel: Cancel<'_>,
) -> Result<(Value, Vec<String>), PromqlError> {
    let mut ev = Evaluator::new(opts, q, cancel, expr, ts, ts);
    ev.text = text;
    ev.warn_sorts(expr, false);
    if opts.one_pass_ranges
        && let Some(v) = super::sweep::instant(&mut ev, expr, ts)?
    {
        return Ok((finish(v, ts)?, ev.annotations()));
    }
    let v = ev.eval(expr, ts)?;
    Ok((finish(v, ts)?, ev.annotations()))
}

/// Runs a range query; also returns its warnings.
pub(crate) fn range(
    opts: &EngineOpts,
    q: &dyn Querier,
    (expr, text): (&Expr, &str),
    start: i64,
    end: i64,
    step: i64,
    cancel: Cancel<'_>,
) -> Result<(Matrix, Vec<String>), PromqlError> {
    match expr.value_type() {
        ValueType::Scalar | ValueType::Vector => {}
        other => {
            return Err(PromqlError::BadRequest(format!(
                "invalid expression type \"{}\" for range query, must be Scalar or instant Vector",
                match other {
                    ValueType::Matrix => "range vector",
                    ValueType::String => "string",
                    _ => "unknown",
                }
            )));
        }
    }
    let mut ev = Evaluator::new(opts, q, cancel, expr, start, end);
    ev.step_ms = step;
    ev.text = text;
    ev.warn_sorts(expr, start != end);
    if opts.one_pass_ranges
        && let Some(m) = super::sweep::range(&mut ev, expr, (start, end, step))?
    {
        return Ok((m, ev.annotations()));
    }
    let mut index: HashMap<Labels, usize> = HashMap::new();
    let mut out: Matrix = Vec::new();
    let mut total = 0usize;
    let mut t = start;
    while t <= end {
        ev.cur_samples = 0;
        let samples = match finish(ev.eval(expr, t)?, t)? {
            Value::Scalar { v, .. } => vec![VectorSample {
                labels: Labels::default(),
                t,
                v,
                drop_name: false,
            }],
            Value::Vector(v) => v,
            other => {
                return Err(PromqlError::Execution(format!(
                    "unexpected {} in range query",
                    other.type_name()
                )));
            }
        };
        total += samples.len();
        if total > opts.max_samples {
            return Err(PromqlError::TooManySamples {
                limit: opts.max_samples,
            });
        }
        for s in samples {
            let i = *index.entry(s.labels.clone()).or_insert_with(|| {
                out.push(RangeSeries {
                    labels: s.labels.clone(),
                    points: Vec::new(),
                    drop_name: false,
                    start_ms: Vec::new(),
                });
                out.len() - 1
            });
            out[i].points.push(Point { t, v: s.v });
        }
        t = match t.checked_add(step) {
            Some(n) => n,
            None => break,
        };
    }
    out.sort_by(|a, b| a.labels.cmp(&b.labels));
    Ok((out, ev.annotations()))
}

#[cfg(test)]
mod tests {
    use super::window_start;
    use crate::store::Sample;

    #[test]
    fn window_start_steps_forward_and_falls_back_to_search() {
        let s: Vec<Sample> = (0..500)
            .map(|i| Sample {
                ts_ms: i * 1000,
                value: 0.0,
            })
            .collect();
        let mut cur = 0;
        for lo in [-5, 0, 999, 1000, 15_000, 15_500, 400_000, 499_000, 600_000] {
            let want = s.partition_point(|p| p.ts_ms <= lo);
            assert_eq!(window_start(&s, lo, &mut cur), want, "forward to {lo}");
        }
        // Backwards (an `@` or a subquery): searched again.
        for lo in [250_000, 3_000, -1] {
            let want = s.partition_point(|p| p.ts_ms <= lo);
            assert_eq!(window_start(&s, lo, &mut cur), want, "back to {lo}");
        }
        assert_eq!(window_start(&[], 5, &mut cur), 0);
    }
}

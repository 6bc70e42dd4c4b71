//! One-pass range queries: `f(selector[r])`, optionally under `sum`, `count`,
//! `min`, `max` or `group` (`by`/`without`), evaluated over all steps by
//! sliding each series' window once instead of re-evaluating step by step.
//! Gives the same results as the step-by-step evaluator (it calls the same
//! per-window functions, in the same series order); anything else is left
//! to that evaluator. Instant queries of these shapes (and `topk`/`bottomk`
//! over a range function) run as a one-step sweep.

use std::collections::HashMap;

use canopy_proto::model::{METRIC_NAME, is_stale_nan};
use promql_parser::parser::{AggregateExpr, Call, Expr, LabelModifier, MatrixSelector};

use super::eval::Evaluator;
use super::prepass::{self, Mode, adjust, dur_ms};
use super::value::{Matrix, Point, RangeSeries, Value, VectorSample, finish_labels};
use super::{PromqlError, aggregate, functions};
use crate::store::{Labels, Series};

mod batch;
mod top;
use batch::{RateBatch, Windows};
use top::select_top;

/// Range functions without scalar parameters that need only their window.
const FUNCS: &[&str] = &[
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
    "first_over_time",
    "present_over_time",
    "stddev_over_time",
    "stdvar_over_time",
    "mad_over_time",
    "ts_of_last_over_time",
    "ts_of_first_over_time",
    "ts_of_max_over_time",
    "ts_of_min_over_time",
    "resets",
    "changes",
    "deriv",
];

/// Aggregations folded across series one value at a time.
#[derive(Clone, Copy, PartialEq)]
enum Agg {
    Sum,
    Count,
    Min,
    Max,
    Group,
}

fn unparen(e: &Expr) -> &Expr {
    match e {
        Expr::Paren(p) => unparen(&p.expr),
        other => other,
    }
}

/// An optional aggregation over a range function of a matrix selector.
type Shape<'e> = (
    Option<(&'e AggregateExpr, Agg)>,
    &'e Call,
    &'e MatrixSelector,
);

/// The supported shape of `e`: an optional aggregation over a range
/// function of a plain matrix selector without `@`.
fn shape(e: &Expr) -> Option<Shape<'_>> {
    let (agg, inner) = match unparen(e) {
        Expr::Aggregate(a) if a.param.is_none() => {
            let op = match a.op.to_string().as_str() {
                "sum" => Agg::Sum,
                "count" => Agg::Count,
                "min" => Agg::Min,
                "max" => Agg::Max,
                "group" => Agg::Group,
                _ => return None,
            };
            (Some((a, op)), unparen(&a.expr))
        }
        other => (None, other),
    };
    let Expr::Call(c) = inner else { return None };
    if !FUNCS.contains(&c.func.name) || c.args.args.len() != 1 {
        return None;
    }
    let Expr::MatrixSelector(ms) = c.args.args[0].as_ref() else {
        return None;
    };
    if ms.vs.at.is_some() || prepass::mode(&ms.vs) != Mode::Plain {
        return None;
    }
    Some((agg, c, ms))
}

/// Where one output series of the query collects its points.
struct Out {
    labels: Labels,
    points: Vec<Point>,
}

/// Per-step fold state of one aggregation group.
#[derive(Clone, Copy)]
struct Acc {
    n: u32,
    s: f64,
    c: f64,
}

/// Evaluates the range query `e` in one pass per series when its shape
/// allows; `Ok(None)` leaves it to the step-by-step evaluator.
pub(crate) fn range(
    ev: &mut Evaluator<'_>,
    e: &Expr,
    window: (i64, i64, i64),
) -> Result<Option<Matrix>, PromqlError> {
    let Some(mut m) = sweep(ev, e, window, false)? else {
        return Ok(None);
    };
    m.sort_by(|a, b| a.labels.cmp(&b.labels));
    Ok(Some(m))
}

/// For `rate` and `increase`, whose "might not be a counter" info names
/// each metric that gave a value: `Some(Some(name))` when the selector
/// fixes the metric name (`foo[5m]`, `{__name__="foo"}[5m]`), `None` when
/// it does not (the sweep, which does not keep names, leaves such a query
/// to the step-by-step evaluator); `Some(None)` for other functions.
fn counter_name(call: &Call, ms: &MatrixSelector) -> Option<Option<String>> {
    if !matches!(call.func.name, "rate" | "increase") {
        return Some(None);
    }
    let vs = &ms.vs;
    vs.name
        .clone()
        .or_else(|| {
            vs.matchers
                .matchers
                .iter()
                .find(|m| m.name == METRIC_NAME && m.op == promql_parser::label::MatchOp::Equal)
                .map(|m| m.value.clone())
        })
        .map(Some)
}

/// Raises the non-counter info for a sweep of `call` that gave a value
/// (every series it read carries the name the selector fixes; a sweep
/// keeps only the series and groups that did).
fn note_counter(ev: &mut Evaluator<'_>, call: &Call, name: Option<&str>) {
    if let (Some(name), Some(arg)) = (name, call.args.args.first()) {
        ev.info_non_counter(name, call.func.name, arg);
    }
}

/// Evaluates the instant query `e` at `t` as a one-step sweep when its
/// shape allows (also `topk`/`bottomk` with a literal `k` over a range
/// function), in the order the step-by-step evaluator gives; `Ok(None)`
/// leaves it to that evaluator.
pub(crate) fn instant(
    ev: &mut Evaluator<'_>,
    e: &Expr,
    t: i64,
) -> Result<Option<Value>, PromqlError> {
    if let Expr::Aggregate(a) = unparen(e) {
        let op = a.op.to_string();
        if op == "topk" || op == "bottomk" {
            let Some(Expr::NumberLiteral(k)) = a.param.as_deref().map(unparen) else {
                return Ok(None);
            };
            let Some((None, call, ms)) = shape(&a.expr) else {
                return Ok(None);
            };
            // A plain k (no grouping, a whole number from 1 on, as
            // `select_k` takes it): the k best are found streaming.
            if a.modifier.is_none() && k.val >= 1.0 && k.val <= 1e6 && k.val.fract() == 0.0 {
                let Some(name) = counter_name(call, ms) else {
                    return Ok(None);
                };
                let top = op == "topk";
                let v = select_top(ev, call, ms, t, k.val as usize, top)?;
                if v.as_ref().is_some_and(|v| !v.is_empty()) {
                    note_counter(ev, call, name.as_deref());
                }
                return Ok(v.map(Value::Vector));
            }
            let Some(m) = sweep(ev, &a.expr, (t, t, 1), true)? else {
                return Ok(None);
            };
            let v = to_vector(m, t, drops_name(call));
            let v = aggregate::select_k(&op, k.val, v, &a.modifier)?;
            return Ok(Some(Value::Vector(v)));
        }
    }
    let Some((agg, call, _)) = shape(e) else {
        return Ok(None);
    };
    let drop_name = agg.is_none() && drops_name(call);
    Ok(sweep(ev, e, (t, t, 1), true)?.map(|m| Value::Vector(to_vector(m, t, drop_name))))
}

/// True when [`aggregate::group_pairs`] under `modifier` takes the label
/// named `n` into a group key.
fn grouping_label(modifier: &Option<LabelModifier>, n: &str) -> bool {
    match modifier {
        None => false,
        Some(LabelModifier::Include(by)) => by.labels.iter().any(|b| b == n),
        Some(LabelModifier::Exclude(wo)) => n != METRIC_NAME && !wo.labels.iter().any(|b| b == n),
    }
}

/// True when range function `call` removes the metric name (all but
/// `last_over_time` and `first_over_time`).
fn drops_name(call: &Call) -> bool {
    !matches!(call.func.name, "last_over_time" | "first_over_time")
}

/// The one-point series of a one-step sweep as an instant vector at `t`.
fn to_vector(m: Matrix, t: i64, drop_name: bool) -> Vec<VectorSample> {
    m.into_iter()
        .filter_map(|s| {
            let p = s.points.first()?;
            Some(VectorSample {
                labels: s.labels,
                t,
                v: p.v,
                drop_name,
            })
        })
        .collect()
}

/// The per-series half of a sweep: each series' windows evaluated at
/// every step, folded into its group's accumulators or pushed as points.
struct Pass<'n> {
    name: &'n str,
    agg: Option<Agg>,
    /// rate, increase and delta go straight to the rate kernel (no
    /// dispatch on the name at every step): (counter, per second).
    kernel: Option<(bool, bool)>,
    /// For rate and increase: breaks (resets, overlaps) before each point,
    /// so windows without any skip the reset scan.
    counter: bool,
    start: i64,
    step: i64,
    nsteps: usize,
    range: i64,
    /// Without `@` (see `shape`) a step's window ends `off` before it.
    off: i64,
    /// Samples held per step, as the step-by-step evaluator counts them.
    held: Vec<usize>,
    /// One fold state per group and step.
    acc: Vec<Acc>,
    /// Some series' start times overlapped (a warning).
    overlap: bool,
    pts: Vec<Point>,
    sts: Vec<i64>,
    brk: Vec<u32>,
    /// Scratch of the rate kernel's batched path.
    batch: RateBatch,
}

impl<'n> Pass<'n> {
    /// The pass of range function `name` over `(start, step, nsteps)`
    /// with windows of `range` ms ending `offset` before each step.
    fn new(
        name: &'n str,
        agg: Option<Agg>,
        (start, step, nsteps): (i64, i64, usize),
        range: i64,
        offset: &Option<promql_parser::parser::Offset>,
    ) -> Self {
        Pass {
            name,
            agg,
            kernel: match name {
                "rate" => Some((true, true)),
                "increase" => Some((true, false)),
                "delta" => Some((false, false)),
                _ => None,
            },
            counter: matches!(name, "rate" | "increase"),
            start,
            step,
            nsteps,
            range,
            off: prepass::offset_ms(offset),
            held: vec![0usize; nsteps],
            acc: Vec::new(),
            overlap: false,
            pts: Vec::new(),
            sts: Vec::new(),
            brk: Vec::new(),
            batch: RateBatch::default(),
        }
    }

    /// Evaluates series `s` at every step into group `o`'s accumulators
    /// (with an aggregation) or into `points`.
    fn series(
        &mut self,
        s: &Series,
        o: usize,
        mut points: Option<&mut Vec<Point>>,
    ) -> Result<(), PromqlError> {
        let (pts, sts, brk) = (&mut self.pts, &mut self.sts, &mut self.brk);
        pts.clear();
        sts.clear();
        brk.clear();
        if s.start_ms.is_none() && self.counter && !s.samples.iter().any(|p| is_stale_nan(p.value))
        {
            // The common case: every sample a point, and the breaks
            // (without start times, a break is a fall in value), each
            // filled by a loop of known length.
            pts.extend(s.samples.iter().map(|p| Point {
                t: p.ts_ms,
                v: p.value,
            }));
            // brk[k]: breaks at indices 1..k (k excluded).
            brk.push(0);
            if !pts.is_empty() {
                brk.push(0);
            }
            let mut n = 0u32;
            brk.extend(pts.windows(2).map(|w| {
                n += u32::from(w[1].v < w[0].v);
                n
            }));
        } else {
            self.points_and_breaks(s);
        }
        let (pts, sts, brk) = (&self.pts, &self.sts, &self.brk);
        if self.agg.is_some() && self.acc.len() < (o + 1) * self.nsteps {
            self.acc.resize(
                (o + 1) * self.nsteps,
                Acc {
                    n: 0,
                    s: 0.0,
                    c: 0.0,
                },
            );
        }
        if let Some((is_counter, is_rate)) = self.kernel
            && sts.is_empty()
        {
            self.batched(o, points, is_counter, is_rate);
            return Ok(());
        }
        let (start, step, range) = (self.start, self.step, self.range);
        let mut overlap = false;
        let windows = Windows::new(pts, (start, step, self.nsteps), self.off, range);
        for (k, tt, a, b) in windows {
            let t = start + step * k as i64;
            self.held[k] += b - a;
            let st = if sts.is_empty() { &[][..] } else { &sts[a..b] };
            let breaks = !self.counter || brk[b] - brk[a + 1] > 0;
            let r = match self.kernel {
                Some((is_counter, is_rate)) => functions::extrapolated_rate(
                    &pts[a..b],
                    st,
                    (tt, range),
                    is_counter,
                    is_rate,
                    &mut overlap,
                    breaks,
                ),
                None => functions::range_apply(
                    self.name,
                    &pts[a..b],
                    st,
                    (tt, range, t),
                    &[],
                    (Mode::Plain, breaks),
                    &mut overlap,
                )?,
            };
            let Some(v) = r else { continue };
            self.held[k] += 1;
            match self.agg {
                None => {
                    if let Some(p) = points.as_deref_mut() {
                        p.push(Point { t, v });
                    }
                }
                Some(op) => fold(&mut self.acc[o * self.nsteps + k], op, v),
            }
        }
        self.overlap |= overlap;
        Ok(())
    }
}

impl Pass<'_> {
    /// Fills `self.pts` with `s`'s points (staleness markers left out),
    /// `self.sts` with their start times when `s` has them, and for a
    /// counter function `self.brk` with the prefix counts of breaks
    /// (`brk[k]`: breaks at indices 1..k, k excluded).
    fn points_and_breaks(&mut self, s: &Series) {
        let (pts, sts, brk) = (&mut self.pts, &mut self.sts, &mut self.brk);
        for (i, p) in s.samples.iter().enumerate() {
            if is_stale_nan(p.value) {
                continue;
            }
            pts.push(Point {
                t: p.ts_ms,
                v: p.value,
            });
            if let Some(st) = s.start_ms.as_deref() {
                sts.push(st.get(i).copied().unwrap_or(0));
            }
        }
        if self.counter {
            brk.push(0);
            let mut n = 0u32;
            for g in 0..pts.len() {
                if g > 0 && functions::is_break(pts, sts, g) {
                    n += 1;
                }
                brk.push(n);
            }
        }
    }

    /// [`Pass::series`] for the rate kernel on a series without start
    /// times (`self.pts`, `self.brk` filled): windows gathered in step
    /// order, the kernel run over all of them at once, then folded or
    /// pushed in step order, as the step-by-step loop would.
    fn batched(
        &mut self,
        o: usize,
        mut points: Option<&mut Vec<Point>>,
        is_counter: bool,
        is_rate: bool,
    ) {
        let (start, step, range) = (self.start, self.step, self.range);
        let (pts, brk, batch) = (&self.pts, &self.brk, &mut self.batch);
        batch.clear();
        for (k, tt, a, b) in Windows::new(pts, (start, step, self.nsteps), self.off, range) {
            self.held[k] += b - a;
            if b - a < 2 {
                // One point and no start time: no rate.
                continue;
            }
            let w = &pts[a..b];
            if self.counter && brk[b] - brk[a + 1] > 0 {
                let mut overlap = false;
                let r = functions::extrapolated_rate(
                    w,
                    &[],
                    (tt, range),
                    is_counter,
                    is_rate,
                    &mut overlap,
                    true,
                );
                let v = r.unwrap_or(f64::NAN);
                batch.scanned.push((batch.step.len(), v));
            }
            batch.push(k, w, tt, range);
        }
        batch.run(is_counter, is_rate, range);
        let mut scanned = batch.scanned.iter().peekable();
        for (i, (&k, &v)) in batch.step.iter().zip(&batch.out).enumerate() {
            let v = match scanned.peek() {
                Some(&&(j, sv)) if j == i => {
                    scanned.next();
                    sv
                }
                _ => v,
            };
            let k = k as usize;
            self.held[k] += 1;
            match self.agg {
                None => {
                    if let Some(p) = points.as_deref_mut() {
                        p.push(Point {
                            t: start + step * k as i64,
                            v,
                        });
                    }
                }
                Some(op) => fold(&mut self.acc[o * self.nsteps + k], op, v),
            }
        }
    }
}

/// Folds `v` into one group's state at one step.
fn fold(x: &mut Acc, op: Agg, v: f64) {
    x.n += 1;
    match op {
        Agg::Sum => (x.s, x.c) = functions::kahan_inc(v, x.s, x.c),
        Agg::Min if x.n == 1 || v < x.s || x.s.is_nan() => x.s = v,
        Agg::Max if x.n == 1 || v > x.s || x.s.is_nan() => x.s = v,
        _ => {}
    }
}

/// The sweep itself: output series in order of first appearance (input
/// series order), unsorted. `raw`: without aggregation, keep the input
/// label sets as they are (name removal and the duplicate check are the
/// caller's, as for an instant query's [`VectorSample::drop_name`]).
/// With an aggregation the selection is streamed (one series at a time,
/// holding only its grouping labels): the same series in the same order
/// as the other shapes' whole selection.
fn sweep(
    ev: &mut Evaluator<'_>,
    e: &Expr,
    (start, end, step): (i64, i64, i64),
    raw: bool,
) -> Result<Option<Matrix>, PromqlError> {
    let Some((agg, call, ms)) = shape(e) else {
        return Ok(None);
    };
    let Some(counter) = counter_name(call, ms) else {
        return Ok(None);
    };
    if step <= 0 || end < start {
        return Ok(None);
    }
    let nsteps = usize::try_from((end - start) / step + 1).unwrap_or(usize::MAX);
    if nsteps > 1_000_000 {
        return Ok(None);
    }
    let name = call.func.name;
    let vs = &ms.vs;
    let range = dur_ms(&ms.range);
    let tt0 = adjust(&vs.at, &vs.offset, start, ev.qstart, ev.qend);
    // Functions that keep the metric name until the query ends.
    let keep_name = !drops_name(call);
    let mut pass = Pass::new(
        name,
        agg.map(|(_, op)| op),
        (start, step, nsteps),
        range,
        &vs.offset,
    );

    // Output series: one per group, or one per input series.
    let mut outs: Vec<Out> = Vec::new();
    match agg {
        Some((a, _)) => {
            if let Some(LabelModifier::Include(by)) = &a.modifier
                && by.labels.iter().any(|n| n == METRIC_NAME)
            {
                // Pending name removal across a group: not handled here.
                return Ok(None);
            }
            // One fold state per group and step (16 bytes): beyond 4 Mi of
            // them (many groups) the step-by-step evaluator needs less memory.
            let cap = ev.opts.max_samples.min(1 << 22);
            // Groups looked up by their label sets, which hold only the
            // grouping labels: a label set is built once per group.
            let mut index: HashMap<Labels, usize, foldhash::fast::RandomState> = HashMap::default();
            let mut bail = false;
            let mut last: Option<(Labels, usize)> = None;
            let complete = ev.fetch_each(
                vs,
                tt0,
                range,
                &|n| grouping_label(&a.modifier, n),
                &mut |s, _| {
                    // Series come in label order, so mostly a series is in
                    // the group of the one before (a shared label set, so
                    // comparing is a pointer comparison).
                    let hit = last.as_ref().filter(|(l, _)| *l == s.labels);
                    let o = match hit
                        .map(|&(_, o)| o)
                        .or_else(|| index.get(&s.labels).copied())
                    {
                        Some(o) => o,
                        None => {
                            // The store cut the label set down to the
                            // grouping labels: then it is the group's own
                            // (no allocation), else the pairs are taken out.
                            let labels =
                                if s.labels.iter().all(|(n, _)| grouping_label(&a.modifier, n)) {
                                    s.labels.clone()
                                } else {
                                    let mut key: Vec<(&str, &str)> = Vec::new();
                                    aggregate::group_pairs(&s.labels, &a.modifier, &mut key);
                                    Labels::from_pairs(key.iter().copied())
                                };
                            if labels.get(METRIC_NAME).is_some()
                                || (outs.len() + 1).saturating_mul(nsteps) > cap
                            {
                                bail = true;
                                return Ok(false);
                            }
                            outs.push(Out {
                                labels,
                                points: Vec::new(),
                            });
                            index.insert(s.labels.clone(), outs.len() - 1);
                            outs.len() - 1
                        }
                    };
                    if hit.is_none() {
                        last = Some((s.labels.clone(), o));
                    }
                    pass.series(s, o, None)?;
                    Ok(true)
                },
                &mut |_| {},
            )?;
            if bail || !complete {
                return Ok(None);
            }
        }
        None => {
            let all = ev.fetch(vs, tt0, range)?;
            let mut target: Vec<usize> = Vec::with_capacity(all.len());
            if raw {
                // The caller removes names and checks for duplicates.
                for s in all.iter() {
                    target.push(outs.len());
                    outs.push(Out {
                        labels: s.labels.clone(),
                        points: Vec::new(),
                    });
                }
            } else {
                let mut seen: HashMap<Labels, ()> = HashMap::new();
                for s in all.iter() {
                    let mut l = s.labels.clone();
                    finish_labels(&mut l, !keep_name);
                    if seen.insert(l.clone(), ()).is_some() {
                        // Possible duplicate label sets: the step-by-step
                        // evaluator reports them where they collide.
                        return Ok(None);
                    }
                    target.push(outs.len());
                    outs.push(Out {
                        labels: l,
                        points: Vec::new(),
                    });
                }
            }
            for (s, &o) in all.iter().zip(&target) {
                ev.check_cancel()?;
                pass.series(s, o, Some(&mut outs[o].points))?;
            }
        }
    }
    if pass.overlap {
        // Warnings are raised in step order there: leave it to that evaluator.
        return Ok(None);
    }
    if pass.held.iter().any(|&h| h > ev.opts.max_samples) {
        return Err(PromqlError::TooManySamples {
            limit: ev.opts.max_samples,
        });
    }
    if let Some((_, op)) = agg {
        for (o, out) in outs.iter_mut().enumerate() {
            for (k, x) in pass.acc[o * nsteps..(o + 1) * nsteps].iter().enumerate() {
                if x.n == 0 {
                    continue;
                }
                let v = match op {
                    Agg::Sum if x.s.is_infinite() => x.s,
                    Agg::Sum => x.s + x.c,
                    Agg::Count => f64::from(x.n),
                    Agg::Group => 1.0,
                    Agg::Min | Agg::Max => x.s,
                };
                out.points.push(Point {
                    t: start + step * k as i64,
                    v,
                });
            }
        }
    }
    let total: usize = outs.iter().map(|o| o.points.len()).sum();
    if total > ev.opts.max_samples {
        return Err(PromqlError::TooManySamples {
            limit: ev.opts.max_samples,
        });
    }
    let m: Matrix = outs
        .into_iter()
        .filter(|o| !o.points.is_empty())
        .map(|o| RangeSeries {
            labels: o.labels,
            points: o.points,
            drop_name: false,
            start_ms: Vec::new(),
        })
        .collect();
    if !m.is_empty() {
        note_counter(ev, call, counter.as_deref());
    }
    Ok(Some(m))
}

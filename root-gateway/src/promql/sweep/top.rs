//! `topk`/`bottomk` with a plain `k` over a range function, streamed:
//! only the series among the k best so far are kept.

use std::cell::RefCell;

use promql_parser::parser::{Call, MatrixSelector};

use super::super::PromqlError;
use super::super::eval::Evaluator;
use super::super::prepass::{adjust, dur_ms};
use super::super::value::VectorSample;
use super::{Pass, drops_name};

/// Orders candidates as `select_k` does: by value (best first, NaN last),
/// ties by position in the input.
fn cmp_top(top: bool, x: (f64, usize), y: (f64, usize)) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let by_value = match (x.0.is_nan(), y.0.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ if top => y.0.total_cmp(&x.0),
        _ => x.0.total_cmp(&y.0),
    };
    by_value.then(x.1.cmp(&y.1))
}

/// `topk(k, f(sel[r]))` / `bottomk` without grouping at `t`: the one-step
/// sweep streamed over the selection, keeping only the series that are
/// among the k best so far, whose whole label sets alone are built. The
/// same samples in the same order as `select_k` over the whole sweep's
/// vector (same order, same ties), the same limits and fallbacks.
pub(super) fn select_top(
    ev: &mut Evaluator<'_>,
    call: &Call,
    ms: &MatrixSelector,
    t: i64,
    k: usize,
    top: bool,
) -> Result<Option<Vec<VectorSample>>, PromqlError> {
    let vs = &ms.vs;
    let range = dur_ms(&ms.range);
    let tt0 = adjust(&vs.at, &vs.offset, t, ev.qstart, ev.qend);
    let mut pass = Pass::new(call.func.name, None, (t, 1, 1), range, &vs.offset);
    // Candidates (value, position, handle); beyond 2k the worst half goes.
    // Only the k best get their whole label sets, once the stream ended.
    // (Both the fold and the label builder below use it.)
    let best: RefCell<Vec<(f64, usize, usize)>> = RefCell::default();
    // The k-th best once the candidates were cut: nothing after it can
    // enter.
    let mut bar: Option<(f64, usize)> = None;
    let mut pos = 0usize;
    let mut point = Vec::with_capacity(1);
    let mut out: Vec<VectorSample> = Vec::new();
    let drop_name = drops_name(call);
    ev.fetch_each(
        vs,
        tt0,
        range,
        &|_| false,
        &mut |s, h| {
            point.clear();
            pass.series(s, 0, Some(&mut point))?;
            let Some(p) = point.first() else {
                return Ok(true);
            };
            let c = (p.v, pos);
            pos += 1;
            if bar.is_some_and(|b| cmp_top(top, c, b).is_gt()) {
                return Ok(true);
            }
            let mut best = best.borrow_mut();
            best.push((p.v, c.1, h));
            if best.len() >= 2 * k.max(8) {
                best.select_nth_unstable_by(k - 1, |x, y| cmp_top(top, (x.0, x.1), (y.0, y.1)));
                best.truncate(k);
                bar = best
                    .iter()
                    .map(|x| (x.0, x.1))
                    .max_by(|x, y| cmp_top(top, *x, *y));
            }
            Ok(true)
        },
        &mut |whole| {
            let mut best = best.borrow_mut();
            best.sort_unstable_by(|x, y| cmp_top(top, (x.0, x.1), (y.0, y.1)));
            best.truncate(k);
            out = best
                .iter()
                .map(|&(v, _, h)| VectorSample {
                    labels: whole(h),
                    t,
                    v,
                    drop_name,
                })
                .collect();
        },
    )?;
    if pass.overlap {
        return Ok(None);
    }
    let limit = ev.opts.max_samples;
    if pass.held[0] > limit || pos > limit {
        return Err(PromqlError::TooManySamples { limit });
    }
    Ok(Some(out))
}

//! The rate kernel's batched path and the window walk a sweep's passes
//! share: a series' windows, step by step, and the kernel's arithmetic run
//! over many windows at once.

use super::super::value::Point;

/// The windows of one series that the rate kernel evaluates, as a struct
/// of arrays: a series without start times has its windows' inputs
/// gathered first, then the kernel's arithmetic runs over them in one
/// branch-free loop. Its divisions chain (to the average gap, the
/// extrapolation factor, the per-second rate), so evaluated window by
/// window their latency, not the divider, set the pace; in one loop the
/// windows overlap (and the compiler vectorises it). The operations are
/// the scalar kernel's, in its order: the same bits.
#[derive(Default)]
pub(super) struct RateBatch {
    /// The step of each window.
    pub(super) step: Vec<u32>,
    /// First value, and last minus first.
    first_v: Vec<f64>,
    result: Vec<f64>,
    /// Window start to the first point, last point to the window end,
    /// first point to last, in ms (exact as f64: times fit in 2^53).
    to_start_ms: Vec<f64>,
    to_end_ms: Vec<f64>,
    sampled_ms: Vec<f64>,
    /// Points in the window, minus one.
    gaps: Vec<f64>,
    /// The kernel's answer per window.
    pub(super) out: Vec<f64>,
    /// Windows with a counter break (index into the arrays, value), taken
    /// by the scalar kernel's reset scan instead; in index order.
    pub(super) scanned: Vec<(usize, f64)>,
}

impl RateBatch {
    pub(super) fn clear(&mut self) {
        self.step.clear();
        self.first_v.clear();
        self.result.clear();
        self.to_start_ms.clear();
        self.to_end_ms.clear();
        self.sampled_ms.clear();
        self.gaps.clear();
        self.scanned.clear();
    }

    /// Adds the window `p` (at least two points, no start times) of step
    /// `k`, ending at `tt`, `range` ms long.
    pub(super) fn push(&mut self, k: usize, p: &[Point], tt: i64, range: i64) {
        let (first, last) = (p[0], p[p.len() - 1]);
        self.step.push(u32::try_from(k).unwrap_or(u32::MAX));
        self.first_v.push(first.v);
        self.result.push(last.v - first.v);
        self.to_start_ms.push((first.t - (tt - range)) as f64);
        self.to_end_ms.push((tt - last.t) as f64);
        self.sampled_ms.push((last.t - first.t) as f64);
        self.gaps.push((p.len() - 1) as f64);
    }

    /// Runs the kernel over every window pushed: what
    /// [`extrapolated_rate`](crate::promql::functions::extrapolated_rate)
    /// gives windows of two or more points, no start times and no break.
    pub(super) fn run(&mut self, counter: bool, is_rate: bool, range: i64) {
        let per = range as f64 / 1e3;
        let n = self.step.len();
        self.out.clear();
        self.out.resize(n, 0.0);
        let (fv, res) = (&self.first_v[..n], &self.result[..n]);
        let (ts, te) = (&self.to_start_ms[..n], &self.to_end_ms[..n]);
        let (sm, gaps) = (&self.sampled_ms[..n], &self.gaps[..n]);
        let out = &mut self.out[..n];
        for i in 0..n {
            let to_start = ts[i] / 1e3;
            let to_end = te[i] / 1e3;
            let sampled = sm[i] / 1e3;
            let avg = sampled / gaps[i];
            let threshold = avg * 1.1;
            let mut to_start = if to_start >= threshold {
                avg / 2.0
            } else {
                to_start
            };
            if counter {
                // Counters cannot go below zero: stop at the zero point.
                let to_zero = sampled * (fv[i] / res[i]);
                let stop = res[i] > 0.0 && fv[i] >= 0.0 && to_zero < to_start;
                to_start = if stop { to_zero } else { to_start };
            }
            let to_end = if to_end >= threshold {
                avg / 2.0
            } else {
                to_end
            };
            let mut factor = if sampled != 0.0 {
                (sampled + to_start + to_end) / sampled
            } else {
                1.0
            };
            if is_rate {
                factor /= per;
            }
            out[i] = res[i] * factor;
        }
    }
}

/// The windows of one series over a pass's steps: for each step whose
/// window holds any point, `(step, window end with the offset applied,
/// first point, past the last point)`. Both bounds only move forward.
pub(super) struct Windows<'p> {
    pts: &'p [Point],
    start: i64,
    step: i64,
    nsteps: usize,
    off: i64,
    range: i64,
    k: usize,
    a: usize,
    b: usize,
}

impl<'p> Windows<'p> {
    pub(super) fn new(
        pts: &'p [Point],
        (start, step, nsteps): (i64, i64, usize),
        off: i64,
        range: i64,
    ) -> Self {
        Windows {
            pts,
            start,
            step,
            nsteps,
            off,
            range,
            k: 0,
            a: 0,
            b: 0,
        }
    }
}

impl Iterator for Windows<'_> {
    type Item = (usize, i64, usize, usize);

    fn next(&mut self) -> Option<Self::Item> {
        let pts = self.pts;
        while self.k < self.nsteps {
            let k = self.k;
            self.k += 1;
            let tt = (self.start + self.step * k as i64).saturating_sub(self.off);
            let lo = tt.saturating_sub(self.range);
            while self.a < pts.len() && pts[self.a].t <= lo {
                self.a += 1;
            }
            self.b = self.b.max(self.a);
            while self.b < pts.len() && pts[self.b].t <= tt {
                self.b += 1;
            }
            if self.a < self.b {
                return Some((k, tt, self.a, self.b));
            }
        }
        None
    }
}

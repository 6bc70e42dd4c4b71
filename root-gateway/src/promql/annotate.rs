//! Annotations of a query, worded as Prometheus 3's HTTP API returns them
//! (`PromQL warning: … (line:col)`, `PromQL info: … (line:col)`): the
//! evaluator's warnings, `histogram_quantile`'s forced-monotonicity info
//! merged over a query's steps, `rate`/`increase`'s non-counter info, and
//! the warning for a sort in a range query.

use promql_parser::parser::Expr;

use super::eval::Evaluator;
use super::{aggregate, functions, prepass};

/// One `histogram_quantile` monotonicity info, merged over evaluations as
/// Prometheus merges it: lowest and highest bucket, largest raise, how
/// many evaluations needed it and their first and last time.
#[derive(Debug)]
pub(crate) struct MonotonicityInfo {
    metric: String,
    line: usize,
    col: usize,
    fix: aggregate::ForcedMonotonic,
    samples: usize,
    first_t: i64,
    last_t: i64,
}

impl Evaluator<'_> {
    /// Where (line, column) the sub-expression `arg` of a call to `func` is
    /// written after `func(`.
    fn arg_position(&self, func: &str, arg: &Expr) -> (usize, usize) {
        let call = self.text.find(&format!("{func}(")).unwrap_or(0);
        let shown = arg.to_string();
        let at = self.text[call..]
            .find(shown.as_str())
            .map_or(call, |k| call + k);
        line_col(self.text, at)
    }

    /// Adds annotation `a` unless it is already there (a query's
    /// annotations are a set; steps and series repeat them).
    fn note(&mut self, a: String) {
        if !self.warnings.contains(&a) {
            self.warnings.push(a);
        }
    }

    /// Records that `func` (`histogram_quantile` or `histogram_quantiles`)
    /// forced the buckets of `metric`, its argument `arg`, monotonic at
    /// `t`: one info per metric and position, merged over steps.
    pub(crate) fn info_monotonicity(
        &mut self,
        metric: &str,
        func: &str,
        arg: &Expr,
        t: i64,
        fix: aggregate::ForcedMonotonic,
    ) {
        let (line, col) = self.arg_position(func, arg);
        let held = self
            .monotonicity
            .iter_mut()
            .find(|m| m.metric == metric && m.line == line && m.col == col);
        match held {
            Some(m) => {
                m.fix.min_bucket = m.fix.min_bucket.min(fix.min_bucket);
                m.fix.max_bucket = m.fix.max_bucket.max(fix.max_bucket);
                m.fix.max_diff = m.fix.max_diff.max(fix.max_diff);
                m.samples += 1;
                m.first_t = m.first_t.min(t);
                m.last_t = m.last_t.max(t);
            }
            None => self.monotonicity.push(MonotonicityInfo {
                metric: metric.to_string(),
                line,
                col,
                fix,
                samples: 1,
                first_t: t,
                last_t: t,
            }),
        }
    }

    /// The query's annotations as the HTTP API words them: the warnings,
    /// then the infos (`PromQL info: ...`).
    pub(crate) fn annotations(mut self) -> Vec<String> {
        for m in &self.monotonicity {
            self.warnings.push(format!(
                "PromQL info: input to histogram_quantile needed to be fixed for monotonicity \
                 (see https://prometheus.io/docs/prometheus/latest/querying/functions/#histogram_quantile) \
                 for metric name {:?}, from buckets {} to {}, with a max diff of {}, \
                 over {} samples from {} to {} ({}:{})",
                m.metric,
                super::format_value(m.fix.min_bucket),
                super::format_value(m.fix.max_bucket),
                super::format_value(m.fix.max_diff),
                m.samples,
                rfc3339(m.first_t),
                rfc3339(m.last_t),
                m.line,
                m.col
            ));
        }
        self.warnings
    }

    /// Records Prometheus's info that `rate` or `increase` (`func`) ran over
    /// `metric`, whose name does not end in `_total`, `_sum`, `_count` or
    /// `_bucket`, so it might not be a counter; positioned at the range
    /// argument `arg`. Call it for a series that gave the function a value.
    pub(crate) fn info_non_counter(&mut self, metric: &str, func: &str, arg: &Expr) {
        if !might_not_be_counter(metric) {
            return;
        }
        let (line, col) = self.arg_position(func, arg);
        self.note(format!(
            "PromQL info: metric might not be a counter, name does not end in _total/_sum/_count/_bucket: {metric:?} ({line}:{col})"
        ));
    }

    /// Records a warning about the sub-expression `arg` of a call to `func`,
    /// positioned (line:column) where `arg` is written after `func(`.
    pub(crate) fn warn(&mut self, msg: &str, func: &str, arg: &Expr) {
        let (line, col) = self.arg_position(func, arg);
        self.note(format!("PromQL warning: {msg} ({line}:{col})"));
    }

    /// Warns, as Prometheus 3 does, about each `sort*` call evaluated over
    /// more than one step (anywhere in a range query, or inside a
    /// subquery): the result of such an evaluation is ordered by labels, so
    /// the call's ordering is lost. Positioned at the call's name.
    pub(super) fn warn_sorts(&mut self, root: &Expr, ranged: bool) {
        // The text is scanned only for a query that has such a call.
        let mut at: Option<Vec<usize>> = None;
        // Pre-order in source order: the k-th `sort*` call met is the k-th
        // written in the text.
        let mut k = 0usize;
        let mut stack = vec![(root, ranged)];
        while let Some((e, r)) = stack.pop() {
            if let Expr::Call(c) = e
                && SORTS.contains(&c.func.name)
            {
                let at = at.get_or_insert_with(|| call_positions(self.text, &SORTS));
                if r && let Some(&pos) = at.get(k) {
                    let (line, col) = line_col(self.text, pos);
                    self.note(format!(
                        "PromQL warning: sort is ineffective for range queries since results are always ordered by labels ({line}:{col})"
                    ));
                }
                k += 1;
            }
            let inner = r || matches!(e, Expr::Subquery(_));
            for c in prepass::children(e).into_iter().rev() {
                stack.push((c, inner));
            }
        }
    }

    /// Warns when a quantile parameter (written as `arg` in `func`) is
    /// outside [0, 1], as Prometheus does.
    pub(crate) fn check_quantile(&mut self, q: f64, func: &str, arg: &Expr) {
        if !(0.0..=1.0).contains(&q) {
            let msg = format!(
                "quantile value should be between 0 and 1, got {}",
                super::format_value(q)
            );
            self.warn(&msg, func, arg);
        }
    }
}

/// True for a metric name without `_total`, `_sum`, `_count` or `_bucket`
/// at its end: `rate` and `increase` over it raise Prometheus's "might not
/// be a counter" info.
pub(crate) fn might_not_be_counter(metric: &str) -> bool {
    !metric.is_empty()
        && !["_total", "_sum", "_count", "_bucket"]
            .iter()
            .any(|s| metric.ends_with(s))
}

/// The 1-based (line, column) of byte `at` of `text`, as annotations
/// give positions.
fn line_col(text: &str, at: usize) -> (usize, usize) {
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map_or(0, |k| k + 1) + 1;
    (line, col)
}

/// `t` (ms since the epoch) as RFC 3339 in UTC to the second, as Go's
/// `time.RFC3339` writes it (`2023-12-25T00:00:00Z`).
fn rfc3339(t: i64) -> String {
    let secs = t.div_euclid(1000);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = functions::time::civil(secs.div_euclid(86_400));
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The functions whose ordering a result ordered by labels discards.
const SORTS: [&str; 4] = ["sort", "sort_desc", "sort_by_label", "sort_by_label_desc"];

/// Byte offsets in `text` of the calls of `names` (a name, not part of a
/// longer identifier, then `(` after optional blanks), in text order;
/// string literals and `#` comments are skipped.
fn call_positions(text: &str, names: &[&str]) -> Vec<usize> {
    let b = text.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':';
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            q @ (b'"' | b'\'' | b'`') => {
                i += 1;
                while i < b.len() && b[i] != q {
                    i += if b[i] == b'\\' && q != b'`' { 2 } else { 1 };
                }
                i += 1;
            }
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            c if ident(c) => {
                let start = i;
                while i < b.len() && ident(b[i]) {
                    i += 1;
                }
                let word = &text[start..i];
                let mut j = i;
                while j < b.len() && b[j].is_ascii_whitespace() {
                    j += 1;
                }
                if b.get(j) == Some(&b'(') && names.contains(&word) {
                    out.push(start);
                }
            }
            _ => i += 1,
        }
    }
    out
}

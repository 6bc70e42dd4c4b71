//! A runner for Prometheus' PromQL `.test` scripts (`load` / `eval` / `clear`).
//!
//! Runs each eval's main query on a [`MemStore`] with the production
//! [`Engine`]. Evals that need a feature Canopy does not have yet (native
//! histograms, start timestamps, annotations, syntax the parser does not
//! know) are counted as skipped, each with its reason.

mod annotations;
mod histograms;
mod notation;
mod variants;

use std::collections::BTreeMap;

use annotations::{annotation_pattern, check_warnings};
use canopy_proto::model::is_stale_nan;
use histograms::{may_select, nhcb_series};
use notation::{Item, duration_ms, go_number, metric, values, word};

use super::aggregate::almost_equal;
use super::{Engine, EngineOpts, PromqlError, RangeSeries, Value};
use crate::store::{Labels, MemStore};

/// One failed eval.
#[derive(Clone, Debug)]
pub struct Failure {
    /// 1-based line of the eval command.
    pub line: usize,
    /// The PromQL expression.
    pub expr: String,
    /// What went wrong.
    pub message: String,
}

/// The outcome of a script.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Evals that passed.
    pub passed: usize,
    /// Evals that failed.
    pub failed: usize,
    /// Evals skipped (feature not built yet).
    pub skipped: usize,
    /// Details of each failure.
    pub failures: Vec<Failure>,
    /// Skip reasons with counts.
    pub skip_reasons: BTreeMap<String, usize>,
    /// Each skipped eval: line, expression and reason.
    pub skips: Vec<Failure>,
}

impl Report {
    fn skip(&mut self, line: usize, expr: &str, why: &str) {
        self.skips.push(Failure {
            line,
            expr: expr.to_string(),
            message: why.to_string(),
        });
        self.skipped += 1;
        *self.skip_reasons.entry(why.to_string()).or_default() += 1;
    }

    fn fail(&mut self, line: usize, expr: &str, message: String) {
        self.failed += 1;
        self.failures.push(Failure {
            line,
            expr: expr.to_string(),
            message,
        });
    }
}

#[derive(Default)]
struct Expect {
    fail: bool,
    fail_msg: Option<String>,
    fail_regex: Option<String>,
    ordered: bool,
    /// `expect info` lines or `eval_info`, as `warns`.
    infos: Vec<Option<(bool, String)>>,
    /// `expect warn` lines: exact message, regex, or anything (`None`).
    warns: Vec<Option<(bool, String)>>,
    no_warn: bool,
    no_info: bool,
    range_vector: Option<(i64, i64, i64)>,
    string: Option<String>,
    scalar: Option<f64>,
    series: Vec<(Labels, Vec<Item>)>,
    hist: bool,
    bad_line: Option<String>,
}

#[derive(Clone, Copy)]
enum Kind {
    Instant(i64),
    Range(i64, i64, i64),
}

/// Optional checks of the upstream runner.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// Also run each instant eval as a range query from `T-1m` to `T+1m`
    /// (step 1m) and check its points at `T` (Prometheus' range-mode check),
    /// and its `@ T` variants at other times.
    pub range_check: bool,
}

/// Runs a whole script and reports per-eval results, with the range-mode
/// check on (as the upstream runner does).
pub fn run_script(text: &str) -> Report {
    run_script_with(text, Options { range_check: true })
}

/// [`run_script`] with optional checks.
pub fn run_script_with(text: &str, opts: Options) -> Report {
    let lines: Vec<String> = text
        .split('\n')
        .map(|l| {
            let t = l.trim();
            if t.starts_with('#') {
                String::new()
            } else {
                t.to_string()
            }
        })
        .collect();
    let engine = Engine::new(EngineOpts {
        max_samples: 10_000,
        ..EngineOpts::default()
    });
    let mut store = MemStore::new();
    let mut report = Report::default();
    let mut unsupported_segment: Option<&'static str> = None;
    // Series loaded with native histogram samples in this segment: they
    // are not loaded, and an eval whose selectors could match one of them
    // is skipped (one that cannot match them runs as usual).
    let mut hist_series: Vec<Labels> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = &lines[i];
        if line.is_empty() {
            i += 1;
            continue;
        }
        let (cmd, rest) = word(line);
        let cmd_l = cmd.to_ascii_lowercase();
        let start = i;
        i += 1;
        let mut body = Vec::new();
        while i < lines.len() && !lines[i].is_empty() {
            body.push((i, lines[i].as_str()));
            i += 1;
        }
        if cmd_l == "clear" {
            store.clear();
            unsupported_segment = None;
            hist_series.clear();
            i = start + 1;
        } else if cmd_l.starts_with("load") {
            let nhcb = cmd_l == "load_with_nhcb";
            let interval = duration_ms(rest).unwrap_or(0);
            type Offsets = Vec<Option<i64>>;
            let mut batch: Vec<(Labels, Vec<Item>, Offsets)> = Vec::new();
            // A `…@st` line gives the start times of the next line's samples.
            let mut pending_st: Option<(Labels, Offsets)> = None;
            for (_, l) in &body {
                if l.contains("{{") {
                    match metric(l) {
                        Some((labels, _)) => {
                            batch.retain(|(b, _, _)| *b != labels);
                            if !hist_series.contains(&labels) {
                                hist_series.push(labels);
                            }
                        }
                        None => unsupported_segment = Some("native histograms"),
                    }
                    pending_st = None;
                    continue;
                }
                let Some((labels, rest)) = metric(l) else {
                    continue;
                };
                if let Some(items) = rest.trim_start().strip_prefix("@st") {
                    pending_st = notation::st_offsets(items).map(|o| (labels, o));
                    continue;
                }
                if hist_series.contains(&labels) {
                    continue;
                }
                let Some(vals) = values(rest) else { continue };
                let st = match pending_st.take() {
                    Some((l, o)) if l == labels && o.len() == vals.len() => o,
                    _ => Vec::new(),
                };
                match batch.iter_mut().find(|(b, _, _)| *b == labels) {
                    Some(slot) => (slot.1, slot.2) = (vals, st),
                    None => batch.push((labels, vals, st)),
                }
            }
            for (labels, vals, st) in batch {
                if nhcb && let Some(h) = nhcb_series(&labels) {
                    // The float series load as usual; the native histogram
                    // built from its group is not held, like any other.
                    if !hist_series.contains(&h) {
                        hist_series.push(h);
                    }
                }
                for (k, v) in vals.iter().enumerate() {
                    if let Item::Float(f) = v {
                        let ts = k as i64 * interval;
                        let start = st.get(k).copied().flatten().map(|o| ts + o);
                        let _ = store.append_with_start(&labels, ts, *f, start);
                    }
                }
            }
        } else if cmd_l.starts_with("eval") {
            // A scalar expectation ends the body; re-read what follows it.
            let mut exp = Expect::default();
            let mut consumed = 0;
            for (idx, l) in &body {
                consumed = *idx;
                if parse_expect_line(l, &mut exp) {
                    break;
                }
            }
            if exp.scalar.is_some() {
                i = consumed + 1;
            }
            run_eval(
                &engine,
                &store,
                &mut report,
                start + 1,
                &cmd_l,
                rest,
                exp,
                unsupported_segment,
                &hist_series,
                opts,
            );
        } else {
            report.fail(start + 1, line, format!("invalid command {cmd:?}"));
        }
    }
    report
}

/// Reads one body line into `exp`; true when it was a scalar (ends the body).
fn parse_expect_line(l: &str, exp: &mut Expect) -> bool {
    let (w, rest) = word(l);
    if w == "expect" {
        let (kind, tail) = word(rest);
        match kind {
            "fail" => {
                exp.fail = true;
                let t = tail.trim();
                if let Some(m) = t.strip_prefix("msg:") {
                    exp.fail_msg = Some(m.trim().to_string());
                } else if let Some(r) = t.strip_prefix("regex:") {
                    exp.fail_regex = Some(r.trim().to_string());
                }
            }
            "ordered" => exp.ordered = true,
            "info" => exp.infos.push(annotation_pattern(tail)),
            "warn" => exp.warns.push(annotation_pattern(tail)),
            "no_warn" => exp.no_warn = true,
            "no_info" => exp.no_info = true,
            "range" => {
                let parts: Vec<&str> = tail.split_whitespace().collect();
                match parts.as_slice() {
                    ["vector", "from", a, "to", b, "step", s] => {
                        match (duration_ms(a), duration_ms(b), duration_ms(s)) {
                            (Some(a), Some(b), Some(s)) => exp.range_vector = Some((a, b, s)),
                            _ => exp.bad_line = Some(l.to_string()),
                        }
                    }
                    _ => exp.bad_line = Some(l.to_string()),
                }
            }
            "string" => match notation::quoted(tail.trim()) {
                Some((s, _)) => exp.string = Some(s),
                None => exp.bad_line = Some(l.to_string()),
            },
            _ => exp.bad_line = Some(l.to_string()),
        }
        return false;
    }
    if let Some(f) = go_number(l.trim()) {
        exp.scalar = Some(f);
        return true;
    }
    if l.contains("{{") {
        exp.hist = true;
        return false;
    }
    match metric(l).and_then(|(lb, r)| values(r).map(|v| (lb, v))) {
        Some(s) => exp.series.push(s),
        None => exp.bad_line = Some(l.to_string()),
    }
    false
}

fn parse_header(cmd: &str, rest: &str) -> Option<(Kind, String)> {
    let (w, r) = word(rest);
    match w {
        "instant" => {
            let (a, r2) = word(r);
            if a == "at" {
                let (ts, expr) = word(r2);
                Some((Kind::Instant(duration_ms(ts)?), expr.to_string()))
            } else {
                Some((Kind::Instant(0), r.to_string()))
            }
        }
        "range" if !cmd.ends_with("ordered") => {
            let (f, r) = word(r);
            let (s, r) = word(r);
            let (to, r) = word(r);
            let (e, r) = word(r);
            let (st, r) = word(r);
            let (step, expr) = word(r);
            if f != "from" || to != "to" || st != "step" {
                return None;
            }
            let (s, e, step) = (duration_ms(s)?, duration_ms(e)?, duration_ms(step)?);
            if e < s {
                return None;
            }
            Some((Kind::Range(s, e, step), expr.to_string()))
        }
        _ => None,
    }
}

#[allow(clippy::too_many_arguments)]
fn run_eval(
    engine: &Engine,
    store: &MemStore,
    report: &mut Report,
    line: usize,
    cmd: &str,
    rest: &str,
    mut exp: Expect,
    unsupported: Option<&'static str>,
    hist_series: &[Labels],
    opts: Options,
) {
    let Some((kind, expr)) = parse_header(cmd, rest) else {
        report.fail(line, rest, "cannot parse eval command".into());
        return;
    };
    match cmd {
        "eval_fail" => exp.fail = true,
        "eval_ordered" => exp.ordered = true,
        "eval_warn" => exp.warns.push(None),
        "eval_info" => exp.infos.push(None),
        _ => {}
    }
    if let Some(why) = unsupported {
        return report.skip(line, &expr, why);
    }
    if exp.hist || (!hist_series.is_empty() && may_select(&expr, hist_series)) {
        return report.skip(line, &expr, "native histograms");
    }
    if let Some(b) = exp.bad_line {
        return report.fail(line, &expr, format!("cannot parse expectation line {b:?}"));
    }
    if !super::parses(&expr) {
        return report.skip(line, &expr, "syntax the parser does not support");
    }
    let result = match kind {
        Kind::Instant(t) => {
            let t = exp.range_vector.map_or(t, |(_, t2, _)| t2);
            let r = engine.instant_annotated(store, &expr, t, &|| false);
            if let Err(why) = instant_step_by_step_agrees(engine, store, &expr, t, &r) {
                return report.fail(line, &expr, why);
            }
            r
        }
        Kind::Range(s, e, step) => {
            let r = engine.range_annotated(store, &expr, (s, e, step), &|| false);
            if let Err(why) = step_by_step_agrees(engine, store, &expr, (s, e, step), &r) {
                return report.fail(line, &expr, why);
            }
            r.map(|(m, w)| (Value::Matrix(m), w))
        }
    };
    if exp.fail {
        match result {
            Err(e) => {
                let msg = e.to_string();
                if let Some(m) = &exp.fail_msg
                    && msg.trim() != m
                {
                    return report.fail(
                        line,
                        &expr,
                        format!("error {msg:?}, expected message {m:?}"),
                    );
                }
                if let Some(r) = &exp.fail_regex {
                    let ok = super::prepass::regex_matcher(&format!(".*(?:{r}).*"))
                        .map(|m| m.is_match(&msg))
                        .unwrap_or(false);
                    if !ok {
                        return report.fail(
                            line,
                            &expr,
                            format!("error {msg:?} does not match {r:?}"),
                        );
                    }
                }
                report.passed += 1;
            }
            Ok(_) => report.fail(line, &expr, "expected an error, got a result".into()),
        }
        return;
    }
    let (value, warnings) = match result {
        Ok(v) => v,
        Err(e) => return report.fail(line, &expr, format!("unexpected error: {e}")),
    };
    if let Err(m) = check_warnings(&exp, &warnings) {
        return report.fail(line, &expr, m);
    }
    let verdict = match kind {
        Kind::Instant(_) => match exp.range_vector {
            Some((a, _, s)) => compare_matrix(&value, &exp, a, s, None),
            None => compare_instant(&value, &exp),
        },
        Kind::Range(s, e, step) => compare_matrix(&value, &exp, s, step, Some(e)),
    };
    let verdict = match (verdict, kind) {
        (Ok(()), Kind::Instant(t))
            if opts.range_check
                && exp.range_vector.is_none()
                && exp.string.is_none()
                && variants::applies(&expr) =>
        {
            at_variants(engine, store, &expr, t, &exp)
        }
        (v, _) => v,
    };
    let verdict = match (verdict, kind) {
        (Ok(()), Kind::Instant(t))
            if opts.range_check
                && exp.range_vector.is_none()
                && exp.string.is_none()
                && !exp.ordered
                && !["start()", "end()", "range()", "step()"]
                    .iter()
                    .any(|f| expr.contains(f)) =>
        {
            range_mode(engine, store, &expr, t, &exp)
        }
        (v, _) => v,
    };
    match verdict {
        Ok(()) => report.passed += 1,
        Err(m) => report.fail(line, &expr, m),
    }
}

/// The `@` variants: the query pinned to `t` must give the same answer
/// when run at other times.
fn at_variants(
    engine: &Engine,
    store: &MemStore,
    expr: &str,
    t: i64,
    exp: &Expect,
) -> Result<(), String> {
    for at in variants::times(t) {
        let v = variants::run(engine, store, expr, t, at)
            .map_err(|e| format!("@ {t}ms variant at {at}ms: unexpected error: {e}"))?;
        compare_instant(&v, exp).map_err(|e| format!("@ {t}ms variant at {at}ms: {e}"))?;
    }
    Ok(())
}

/// The same range query with one-pass evaluation turned off must give the
/// same series, points (bit for bit), warnings or error as `got`.
fn step_by_step_agrees(
    engine: &Engine,
    store: &MemStore,
    expr: &str,
    window: (i64, i64, i64),
    got: &Result<(Vec<RangeSeries>, Vec<String>), PromqlError>,
) -> Result<(), String> {
    let slow = Engine::new(EngineOpts {
        one_pass_ranges: false,
        ..engine.opts().clone()
    });
    let want = slow.range_annotated(store, expr, window, &|| false);
    let same = match (got, &want) {
        (Ok((a, wa)), Ok((b, wb))) => {
            wa == wb
                && a.len() == b.len()
                && a.iter().zip(b).all(|(x, y)| {
                    x.labels == y.labels
                        && x.points.len() == y.points.len()
                        && x.points.iter().zip(&y.points).all(|(p, q)| {
                            p.t == q.t
                                && (p.v.to_bits() == q.v.to_bits() || p.v.is_nan() && q.v.is_nan())
                        })
                })
        }
        (Err(a), Err(b)) => a == b,
        _ => false,
    };
    if same {
        Ok(())
    } else {
        Err(format!(
            "one-pass range result {got:?} differs from step-by-step {want:?}"
        ))
    }
}

/// The same instant query with one-pass evaluation turned off must give
/// the same value (in the same order, bit for bit), warnings or error.
fn instant_step_by_step_agrees(
    engine: &Engine,
    store: &MemStore,
    expr: &str,
    t: i64,
    got: &Result<(Value, Vec<String>), PromqlError>,
) -> Result<(), String> {
    let slow = Engine::new(EngineOpts {
        one_pass_ranges: false,
        ..engine.opts().clone()
    });
    let want = slow.instant_annotated(store, expr, t, &|| false);
    let bits = |a: f64, b: f64| a.to_bits() == b.to_bits() || a.is_nan() && b.is_nan();
    let same = match (got, &want) {
        (Ok((Value::Vector(a), wa)), Ok((Value::Vector(b), wb))) => {
            wa == wb
                && a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|(x, y)| x.labels == y.labels && x.t == y.t && bits(x.v, y.v))
        }
        (Ok((Value::Scalar { t: ta, v: a }, wa)), Ok((Value::Scalar { t: tb, v: b }, wb))) => {
            wa == wb && ta == tb && bits(*a, *b)
        }
        (Ok((a, wa)), Ok((b, wb))) => a == b && wa == wb,
        (Err(a), Err(b)) => a == b,
        _ => false,
    };
    if same {
        Ok(())
    } else {
        Err(format!(
            "one-pass instant result {got:?} differs from step-by-step {want:?}"
        ))
    }
}

/// Prometheus' range-mode check: the instant eval as a range query around
/// `t`, its points at `t` compared with the same expectations.
fn range_mode(
    engine: &Engine,
    store: &MemStore,
    expr: &str,
    t: i64,
    exp: &Expect,
) -> Result<(), String> {
    let r = engine.range_annotated(store, expr, (t - 60_000, t + 60_000, 60_000), &|| false);
    step_by_step_agrees(engine, store, expr, (t - 60_000, t + 60_000, 60_000), &r)?;
    let (m, _) = r.map_err(|e| format!("range mode: unexpected error: {e}"))?;
    let at_t = m.iter().filter_map(|s| {
        s.points
            .iter()
            .find(|p| p.t == t)
            .map(|p| (s.labels.clone(), p.v))
    });
    let value = if exp.scalar.is_some() {
        match at_t.collect::<Vec<_>>().as_slice() {
            [(_, v)] => Value::Scalar { t, v: *v },
            other => return Err(format!("range mode: {} series for a scalar", other.len())),
        }
    } else {
        Value::Vector(
            at_t.map(|(labels, v)| super::VectorSample {
                labels,
                t,
                v,
                drop_name: false,
            })
            .collect(),
        )
    };
    compare_instant(&value, exp).map_err(|e| format!("range mode: {e}"))
}

fn feq(a: f64, b: f64) -> bool {
    if is_stale_nan(a) || is_stale_nan(b) {
        return is_stale_nan(a) && is_stale_nan(b);
    }
    almost_equal(a, b, 1e-6)
}

fn compare_instant(v: &Value, exp: &Expect) -> Result<(), String> {
    if let Some(s) = &exp.string {
        return match v {
            Value::String { s: got, .. } if got == s => Ok(()),
            other => Err(format!("expected string {s:?}, got {other:?}")),
        };
    }
    if let Some(x) = exp.scalar {
        return match v {
            Value::Scalar { v: got, .. } if feq(*got, x) => Ok(()),
            other => Err(format!("expected scalar {x}, got {}", brief(other))),
        };
    }
    let Value::Vector(got) = v else {
        return Err(format!("expected a vector, got {}", brief(v)));
    };
    let mut want = Vec::new();
    for (l, items) in &exp.series {
        let vals: Vec<f64> = items
            .iter()
            .filter_map(|i| match i {
                Item::Float(f) => Some(*f),
                Item::Omitted => None,
            })
            .collect();
        if vals.len() != 1 {
            return Err(format!("expected series {l} must have exactly one value"));
        }
        want.push((l, vals[0]));
    }
    if got.len() != want.len() {
        return Err(format!(
            "expected {} samples, got {}: {}",
            want.len(),
            got.len(),
            brief(v)
        ));
    }
    for (k, s) in got.iter().enumerate() {
        let Some(pos) = want.iter().position(|(l, _)| **l == s.labels) else {
            return Err(format!("unexpected sample {} {}", s.labels, s.v));
        };
        if exp.ordered && pos != k {
            return Err(format!(
                "sample {} at position {k}, expected at {pos}",
                s.labels
            ));
        }
        if !feq(want[pos].1, s.v) {
            return Err(format!(
                "{}: expected {}, got {}",
                s.labels, want[pos].1, s.v
            ));
        }
    }
    Ok(())
}

fn compare_matrix(
    v: &Value,
    exp: &Expect,
    start: i64,
    step: i64,
    end: Option<i64>,
) -> Result<(), String> {
    let got: &[RangeSeries] = match v {
        Value::Matrix(m) => m,
        Value::Vector(vec) if vec.is_empty() => &[],
        other => return Err(format!("expected a matrix, got {}", brief(other))),
    };
    if exp.scalar.is_some() {
        return Err("a scalar expectation for a range query".into());
    }
    if got.windows(2).any(|w| w[0].labels > w[1].labels) {
        return Err("matrix not sorted by labels".into());
    }
    if got.len() != exp.series.len() {
        return Err(format!(
            "expected {} series, got {}: {}",
            exp.series.len(),
            got.len(),
            brief(v)
        ));
    }
    for s in got {
        let Some((_, items)) = exp.series.iter().find(|(l, _)| *l == s.labels) else {
            return Err(format!("unexpected series {}", s.labels));
        };
        if let Some(e) = end
            && step > 0
            && items.len() as i64 > (e - start) / step + 1
        {
            return Err(format!("{}: more expected values than steps", s.labels));
        }
        let want: Vec<(i64, f64)> = items
            .iter()
            .enumerate()
            .filter_map(|(k, it)| match it {
                Item::Float(f) => Some((start + k as i64 * step, *f)),
                Item::Omitted => None,
            })
            .collect();
        if want.len() != s.points.len() {
            return Err(format!(
                "{}: expected {} points, got {}: {:?}",
                s.labels,
                want.len(),
                s.points.len(),
                s.points
            ));
        }
        for ((t, f), p) in want.iter().zip(&s.points) {
            if *t != p.t || !feq(*f, p.v) {
                return Err(format!(
                    "{}: expected {f}@{t}, got {}@{}",
                    s.labels, p.v, p.t
                ));
            }
        }
    }
    Ok(())
}

fn brief(v: &Value) -> String {
    let s = match v {
        Value::Vector(vec) => vec
            .iter()
            .map(|s| format!("{} {}", s.labels, s.v))
            .collect::<Vec<_>>()
            .join(", "),
        Value::Matrix(m) => m
            .iter()
            .map(|s| {
                format!(
                    "{} {:?}",
                    s.labels,
                    s.points.iter().map(|p| (p.t, p.v)).collect::<Vec<_>>()
                )
            })
            .collect::<Vec<_>>()
            .join(", "),
        other => format!("{other:?}"),
    };
    let mut s = format!("{} [{s}]", v.type_name());
    if s.len() > 400 {
        let mut cut = 400;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

/// Errors are compared by their message in scripts.
impl From<PromqlError> for Failure {
    fn from(e: PromqlError) -> Self {
        Failure {
            line: 0,
            expr: String::new(),
            message: e.to_string(),
        }
    }
}

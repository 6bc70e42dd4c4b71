//! Before evaluation: parse with limits, then find the time window each
//! selector needs so its data is fetched once per query.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use promql_parser::label::MatchOp as PMatchOp;
use promql_parser::parser::token::T_EQL_REGEX;
use promql_parser::parser::{AtModifier, Expr, Offset, VectorSelector};

use super::durexpr::MODE_LABEL;
use super::{EngineOpts, PromqlError};
use crate::store::{MatchOp, Matcher};
use canopy_proto::model::METRIC_NAME;

/// Parses `query`, refusing over-long or over-deep expressions.
pub(crate) fn parse(query: &str, opts: &EngineOpts) -> Result<Expr, PromqlError> {
    if query.len() > opts.max_query_len {
        return Err(PromqlError::Parse(format!(
            "query longer than {} bytes",
            opts.max_query_len
        )));
    }
    let mut depth = 0usize;
    for c in query.chars() {
        match c {
            '(' | '[' | '{' => {
                depth += 1;
                if depth > opts.max_depth {
                    return Err(PromqlError::Parse(format!(
                        "query nested deeper than {}",
                        opts.max_depth
                    )));
                }
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    let expr = promql_parser::parser::parse(query).map_err(PromqlError::Parse)?;
    if ast_depth(&expr) > opts.max_depth * 4 {
        return Err(PromqlError::Parse(format!(
            "expression nested deeper than {}",
            opts.max_depth * 4
        )));
    }
    Ok(expr)
}

/// The children of an expression node.
pub(crate) fn children(e: &Expr) -> Vec<&Expr> {
    match e {
        Expr::Aggregate(a) => {
            let mut v: Vec<&Expr> = a.param.iter().map(|p| p.as_ref()).collect();
            v.push(&a.expr);
            v
        }
        Expr::Unary(u) => vec![&u.expr],
        Expr::Binary(b) => vec![&b.lhs, &b.rhs],
        Expr::Paren(p) => vec![&p.expr],
        Expr::Subquery(s) => vec![&s.expr],
        Expr::Call(c) => c.args.args.iter().map(|a| a.as_ref()).collect(),
        _ => Vec::new(),
    }
}

/// Depth of the tree, computed without recursion (a hostile query may be deep).
fn ast_depth(e: &Expr) -> usize {
    let mut max = 0;
    let mut stack = vec![(e, 1usize)];
    while let Some((n, d)) = stack.pop() {
        max = max.max(d);
        for c in children(n) {
            stack.push((c, d + 1));
        }
    }
    max
}

/// Milliseconds of a std duration, saturating.
pub(crate) fn dur_ms(d: &Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
}

/// Signed milliseconds of an offset.
pub(crate) fn offset_ms(o: &Option<Offset>) -> i64 {
    match o {
        None => 0,
        Some(Offset::Pos(d)) => dur_ms(d),
        Some(Offset::Neg(d)) => -dur_ms(d),
    }
}

/// Milliseconds since the epoch of a system time (negative before it).
pub(crate) fn system_ms(t: &SystemTime) -> i64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => dur_ms(&d),
        Err(e) => -dur_ms(&e.duration()),
    }
}

/// The time a selector or subquery evaluated at `t` looks at.
pub(crate) fn adjust(
    at: &Option<AtModifier>,
    off: &Option<Offset>,
    t: i64,
    qstart: i64,
    qend: i64,
) -> i64 {
    let base = match at {
        None => t,
        Some(AtModifier::Start) => qstart,
        Some(AtModifier::End) => qend,
        Some(AtModifier::At(st)) => system_ms(st),
    };
    base.saturating_sub(offset_ms(off))
}

/// Identity of a selector node for the per-query cache.
pub(crate) fn key(vs: &VectorSelector) -> usize {
    vs as *const VectorSelector as usize
}

/// Inclusive fetch windows per selector node.
pub(crate) type Windows = HashMap<usize, (i64, i64)>;

/// Computes the fetch window of every selector under `e` evaluated over `[s, end]`.
pub(crate) fn windows(
    e: &Expr,
    s: i64,
    end: i64,
    qstart: i64,
    qend: i64,
    lookback: i64,
    out: &mut Windows,
) {
    let mut put = |k: usize, lo: i64, hi: i64| {
        let w = out.entry(k).or_insert((lo, hi));
        w.0 = w.0.min(lo);
        w.1 = w.1.max(hi);
    };
    match e {
        Expr::VectorSelector(vs) => {
            let (a, b) = (
                adjust(&vs.at, &vs.offset, s, qstart, qend),
                adjust(&vs.at, &vs.offset, end, qstart, qend),
            );
            let hi = if mode(vs) == Mode::Smoothed {
                b.saturating_add(lookback)
            } else {
                b
            };
            put(key(vs), a.saturating_sub(lookback), hi);
        }
        Expr::MatrixSelector(ms) => {
            let vs = &ms.vs;
            let (a, b) = (
                adjust(&vs.at, &vs.offset, s, qstart, qend),
                adjust(&vs.at, &vs.offset, end, qstart, qend),
            );
            let (lo, hi) = match mode(vs) {
                Mode::Plain => (a.saturating_sub(dur_ms(&ms.range)), b),
                Mode::Anchored => (a.saturating_sub(dur_ms(&ms.range) + lookback), b),
                Mode::Smoothed => (
                    a.saturating_sub(dur_ms(&ms.range) + lookback),
                    b.saturating_add(lookback),
                ),
            };
            put(key(vs), lo, hi);
        }
        Expr::Subquery(sq) => {
            let (a, b) = (
                adjust(&sq.at, &sq.offset, s, qstart, qend),
                adjust(&sq.at, &sq.offset, end, qstart, qend),
            );
            windows(
                &sq.expr,
                a.saturating_sub(dur_ms(&sq.range)),
                b,
                qstart,
                qend,
                lookback,
                out,
            );
        }
        _ => {
            for c in children(e) {
                windows(c, s, end, qstart, qend, lookback, out);
            }
        }
    }
}

/// Converts a selector's matchers to store matchers (regexes anchored,
/// `.` matching newlines as in Prometheus).
pub(crate) fn matchers(vs: &VectorSelector) -> Result<Vec<Matcher>, PromqlError> {
    if !vs.matchers.or_matchers.is_empty() {
        return Err(PromqlError::Execution(
            "'or' in label matchers is not supported".into(),
        ));
    }
    let mut out = Vec::new();
    let matchers = vs.matchers.matchers.iter().filter(|m| m.name != MODE_LABEL);
    if let Some(name) = &vs.name {
        out.push(Matcher::equal(METRIC_NAME, name));
    }
    for m in matchers {
        let op = match &m.op {
            PMatchOp::Equal => MatchOp::Equal(m.value.clone()),
            PMatchOp::NotEqual => MatchOp::NotEqual(m.value.clone()),
            PMatchOp::Re(_) => MatchOp::Regex(compile_re(&m.value)?),
            PMatchOp::NotRe(_) => MatchOp::NotRegex(compile_re(&m.value)?),
        };
        out.push(Matcher {
            name: m.name.clone(),
            op,
        });
    }
    Ok(out)
}

/// How a selector reads samples around its window (`anchored` and
/// `smoothed` are Prometheus 3 extended range selectors).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Plain selection.
    Plain,
    /// Also the last sample at or before the window start.
    Anchored,
    /// Also the samples just outside both ends, for interpolation.
    Smoothed,
}

/// The extended-selector modifier of `vs` (set by the text pre-pass).
pub(crate) fn mode(vs: &VectorSelector) -> Mode {
    match vs
        .matchers
        .matchers
        .iter()
        .find(|m| m.name == MODE_LABEL)
        .map(|m| m.value.as_str())
    {
        Some("anchored") => Mode::Anchored,
        Some("smoothed") => Mode::Smoothed,
        _ => Mode::Plain,
    }
}

/// A predicate for a fully anchored regex.
pub(crate) fn compile_re(re: &str) -> Result<crate::store::Predicate, PromqlError> {
    let m = regex_matcher(re)?;
    Ok(Arc::new(move |s: &str| m.is_match(s)))
}

/// A parser matcher holding the compiled, anchored, dot-all regex.
pub(crate) fn regex_matcher(re: &str) -> Result<promql_parser::label::Matcher, PromqlError> {
    promql_parser::label::Matcher::new_matcher(T_EQL_REGEX, String::new(), format!("(?s:{re})"))
        .map_err(|e| PromqlError::Execution(format!("invalid regular expression {re:?}: {e}")))
}

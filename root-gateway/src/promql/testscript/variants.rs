//! The upstream runner's `@`-modifier variants of an instant eval: every
//! selector and subquery without `@` is pinned to the eval time `T`, and
//! the query is run at other times, where it must give the same answer.

use std::time::{Duration, SystemTime};

use promql_parser::parser::{AtModifier, Expr};

use super::super::{Engine, PromqlError, Value, durexpr, eval, prepass};
use crate::store::MemStore;

/// Functions whose result depends on the evaluation time itself.
const NOT_STEP_INVARIANT: [&str; 15] = [
    "days_in_month",
    "day_of_month",
    "day_of_week",
    "day_of_year",
    "end",
    "hour",
    "minute",
    "month",
    "predict_linear",
    "range",
    "start",
    "step",
    "time",
    "timestamp",
    "year",
];

/// True when the variants apply to `expr`.
pub(super) fn applies(expr: &str) -> bool {
    !NOT_STEP_INVARIANT
        .iter()
        .any(|f| expr.contains(&format!("{f}(")))
}

/// The times the variants run at for eval time `t`.
pub(super) fn times(t: i64) -> Vec<i64> {
    if t == 0 {
        vec![-1000, 0, 1000]
    } else {
        vec![-10 * t, 0, t / 5, t, 10 * t]
    }
}

fn system_time(ms: i64) -> SystemTime {
    let d = Duration::from_millis(ms.unsigned_abs());
    if ms >= 0 {
        SystemTime::UNIX_EPOCH + d
    } else {
        SystemTime::UNIX_EPOCH - d
    }
}

/// Pins selectors and subqueries without `@` to `at`; the inside of a
/// subquery is left alone (it is pinned through the subquery).
fn pin(e: &mut Expr, at: &AtModifier) {
    match e {
        Expr::VectorSelector(vs) if vs.at.is_none() => vs.at = Some(at.clone()),
        Expr::MatrixSelector(ms) if ms.vs.at.is_none() => ms.vs.at = Some(at.clone()),
        Expr::Subquery(sq) if sq.at.is_none() => sq.at = Some(at.clone()),
        Expr::Aggregate(a) => {
            if let Some(p) = a.param.as_mut() {
                pin(p, at);
            }
            pin(&mut a.expr, at);
        }
        Expr::Unary(u) => pin(&mut u.expr, at),
        Expr::Binary(b) => {
            pin(&mut b.lhs, at);
            pin(&mut b.rhs, at);
        }
        Expr::Paren(p) => pin(&mut p.expr, at),
        Expr::Call(c) => {
            for a in c.args.args.iter_mut() {
                pin(a, at);
            }
        }
        _ => {}
    }
}

/// Runs `expr` pinned to `t` at evaluation time `at_time`.
pub(super) fn run(
    engine: &Engine,
    store: &MemStore,
    expr: &str,
    t: i64,
    at_time: i64,
) -> Result<Value, PromqlError> {
    let text = durexpr::rewrite(expr, durexpr::DurCtx::default())?;
    let mut parsed = prepass::parse(&text, engine.opts())?;
    pin(&mut parsed, &AtModifier::At(system_time(t)));
    eval::instant(engine.opts(), store, (&parsed, &text), at_time, &|| false).map(|(v, _)| v)
}

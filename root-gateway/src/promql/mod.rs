//! Canopy's PromQL engine (Prometheus 3.x semantics).
//!
//! Queries are parsed with `promql-parser`, checked ([`prepass`]), then
//! evaluated step by step against a [`Querier`]: each selector's data is
//! fetched once per query for the whole time window the query needs. The
//! engine reads no clock: the caller passes evaluation times and a
//! cancellation check.
//!
//! Limits (all typed errors): samples held per step and in the result,
//! series per selector, points per series of a range query, subquery steps,
//! query length and nesting depth.

mod aggregate;
mod annotate;
mod binary;
pub(crate) mod duration;
mod durexpr;
mod eval;
mod functions;
mod prepass;
mod sweep;
pub mod testscript;
mod value;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use promql_parser::parser::Expr;

use crate::store::{Querier, StoreError};

pub use duration::parse_units_ms as parse_duration_ms;
pub use value::{Matrix, Point, RangeSeries, Value, VectorSample, format_value};

/// Errors from parsing or evaluating a query.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PromqlError {
    /// The query text does not parse or is not valid PromQL.
    #[error("{0}")]
    Parse(String),
    /// A query parameter is invalid (time range, step, ...).
    #[error("{0}")]
    BadRequest(String),
    /// Evaluation failed (duplicate series, bad function argument, ...).
    #[error("{0}")]
    Execution(String),
    /// The query would hold more samples than allowed.
    #[error("query processing would load too many samples into memory in query execution")]
    TooManySamples {
        /// The configured maximum.
        limit: usize,
    },
    /// A selector matched more series than allowed.
    #[error(
        "query processing would load too many series into memory in query execution: a selector matched more than {limit} series"
    )]
    TooManySeries {
        /// The configured maximum per selector.
        limit: usize,
    },
    /// The caller's cancellation check fired.
    #[error("query timed out in query execution")]
    Timeout,
    /// The store refused the selection.
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

/// Typed engine settings.
#[derive(Clone, Debug)]
pub struct EngineOpts {
    /// How far back an instant selector looks for a sample (default 5 m).
    pub lookback_ms: i64,
    /// Step of subqueries written without one (default 1 m).
    pub default_subquery_step_ms: i64,
    /// Maximum samples held at once (default 50 000 000).
    pub max_samples: usize,
    /// Maximum series one selector may match (default 500 000).
    pub max_series_per_selector: usize,
    /// Maximum points per series in a range query (default 11 000).
    pub max_points_per_series: i64,
    /// Maximum query text length in bytes (default 64 KiB).
    pub max_query_len: usize,
    /// Maximum expression nesting depth (default 128).
    pub max_depth: usize,
    /// Evaluate range queries of the form `[agg] f(selector[r])` in one pass
    /// per series instead of step by step (default true; same results).
    pub one_pass_ranges: bool,
}

impl Default for EngineOpts {
    fn default() -> Self {
        EngineOpts {
            lookback_ms: 5 * 60 * 1000,
            default_subquery_step_ms: 60 * 1000,
            max_samples: 50_000_000,
            max_series_per_selector: 500_000,
            max_points_per_series: 11_000,
            max_query_len: 64 * 1024,
            max_depth: 128,
            one_pass_ranges: true,
        }
    }
}

/// The PromQL engine: its settings and a cache of parsed queries,
/// shareable (clones share the cache).
#[derive(Clone, Debug, Default)]
pub struct Engine {
    opts: EngineOpts,
    parsed: Arc<Mutex<Parsed>>,
}

/// Most queries [`Parsed`] keeps.
const MAX_PARSED: usize = 256;
/// Longest query text [`Parsed`] keeps, bytes.
const MAX_PARSED_LEN: usize = 4096;

/// A parsed query: the text after the pre-pass and its expression.
type ParsedQuery = Arc<(String, Expr)>;

/// Recently parsed queries by text and duration context (`step()` and
/// `range()` are rewritten before parsing). Dashboards send the same
/// queries again and again; parsing one is cheap warm, but after other
/// work has pushed the parser's code and tables out of the CPU caches it
/// was a tenth of a small query's time. Bounded, emptied when full.
#[derive(Debug, Default)]
struct Parsed {
    map: HashMap<(String, i64, i64), ParsedQuery, foldhash::fast::RandomState>,
}

/// A cancellation check: returns true when the query must stop (deadline
/// passed, client gone). Called cooperatively during evaluation.
pub type Cancel<'a> = &'a (dyn Fn() -> bool + Sync);

fn never() -> bool {
    false
}

impl Engine {
    /// An engine with the given settings.
    pub fn new(opts: EngineOpts) -> Self {
        Engine {
            opts,
            parsed: Arc::default(),
        }
    }

    /// `query` after the pre-pass under `ctx`, parsed: from the cache of
    /// recent queries when it holds it (errors are not kept).
    fn parse(&self, query: &str, ctx: durexpr::DurCtx) -> Result<ParsedQuery, PromqlError> {
        let cache = || self.parsed.lock().unwrap_or_else(PoisonError::into_inner);
        let key =
            (query.len() <= MAX_PARSED_LEN).then(|| (query.to_string(), ctx.step_ms, ctx.range_ms));
        if let Some(k) = &key
            && let Some(p) = cache().map.get(k)
        {
            return Ok(Arc::clone(p));
        }
        let text = durexpr::rewrite(query, ctx)?;
        let expr = prepass::parse(&text, &self.opts)?;
        let p = Arc::new((text, expr));
        if let Some(k) = key {
            let mut c = cache();
            if c.map.len() >= MAX_PARSED {
                c.map.clear();
            }
            c.map.insert(k, Arc::clone(&p));
        }
        Ok(p)
    }

    /// The engine's settings.
    pub fn opts(&self) -> &EngineOpts {
        &self.opts
    }

    /// Evaluates `query` at `ts_ms`.
    pub fn instant(&self, q: &dyn Querier, query: &str, ts_ms: i64) -> Result<Value, PromqlError> {
        self.instant_with_cancel(q, query, ts_ms, &never)
    }

    /// Evaluates `query` at `ts_ms`, stopping with [`PromqlError::Timeout`]
    /// when `cancel` returns true.
    pub fn instant_with_cancel(
        &self,
        q: &dyn Querier,
        query: &str,
        ts_ms: i64,
        cancel: Cancel<'_>,
    ) -> Result<Value, PromqlError> {
        self.instant_annotated(q, query, ts_ms, cancel)
            .map(|(v, _)| v)
    }

    /// [`Engine::instant_with_cancel`], also returning the query's warnings
    /// as Prometheus words them (`PromQL warning: ... (line:col)`).
    pub fn instant_annotated(
        &self,
        q: &dyn Querier,
        query: &str,
        ts_ms: i64,
        cancel: Cancel<'_>,
    ) -> Result<(Value, Vec<String>), PromqlError> {
        let p = self.parse(query, durexpr::DurCtx::default())?;
        eval::instant(&self.opts, q, (&p.1, &p.0), ts_ms, cancel)
    }

    /// Evaluates `query` at every `step_ms` from `start_ms` to `end_ms`.
    pub fn range(
        &self,
        q: &dyn Querier,
        query: &str,
        start_ms: i64,
        end_ms: i64,
        step_ms: i64,
    ) -> Result<Matrix, PromqlError> {
        self.range_with_cancel(q, query, start_ms, end_ms, step_ms, &never)
    }

    /// [`Engine::range`] with a cancellation check.
    pub fn range_with_cancel(
        &self,
        q: &dyn Querier,
        query: &str,
        start_ms: i64,
        end_ms: i64,
        step_ms: i64,
        cancel: Cancel<'_>,
    ) -> Result<Matrix, PromqlError> {
        self.range_annotated(q, query, (start_ms, end_ms, step_ms), cancel)
            .map(|(m, _)| m)
    }

    /// [`Engine::range_with_cancel`] for `(start, end, step)` in ms, also
    /// returning the query's warnings.
    pub fn range_annotated(
        &self,
        q: &dyn Querier,
        query: &str,
        (start_ms, end_ms, step_ms): (i64, i64, i64),
        cancel: Cancel<'_>,
    ) -> Result<(Matrix, Vec<String>), PromqlError> {
        if step_ms <= 0 {
            return Err(PromqlError::BadRequest(
                "zero or negative query resolution step widths are not accepted. Try a positive integer".into(),
            ));
        }
        if end_ms < start_ms {
            return Err(PromqlError::BadRequest(
                "end timestamp must not be before start time".into(),
            ));
        }
        if (end_ms - start_ms) / step_ms >= self.opts.max_points_per_series {
            return Err(PromqlError::BadRequest(format!(
                "exceeded maximum resolution of {} points per timeseries. Try decreasing the query resolution (?step=XX)",
                self.opts.max_points_per_series
            )));
        }
        let ctx = durexpr::DurCtx {
            step_ms,
            range_ms: end_ms - start_ms,
        };
        let p = self.parse(query, ctx)?;
        eval::range(
            &self.opts,
            q,
            (&p.1, &p.0),
            start_ms,
            end_ms,
            step_ms,
            cancel,
        )
    }
}

/// False when the parser cannot read `query` after the pre-pass (taking
/// `step()` and `range()` as one minute); an error of the pre-pass itself
/// (a zero range, division by zero) is left for evaluation to report.
pub fn parses(query: &str) -> bool {
    parse_outside_a_query(query).is_none_or(|e| e.is_ok())
}

/// `query` through the pre-pass (taking `step()` and `range()` as one
/// minute) and the parser, for looking at a query outside an evaluation:
/// `None` when the pre-pass itself refuses it (a zero range, division by
/// zero), else the parser's answer.
pub(crate) fn parse_outside_a_query(
    query: &str,
) -> Option<Result<promql_parser::parser::Expr, String>> {
    let ctx = durexpr::DurCtx {
        step_ms: 60_000,
        range_ms: 60_000,
    };
    let q = durexpr::rewrite(query, ctx).ok()?;
    Some(promql_parser::parser::parse(&q))
}

/// Parses a series selector (as in `match[]`) into store matchers.
pub fn parse_selector(
    s: &str,
    opts: &EngineOpts,
) -> Result<Vec<crate::store::Matcher>, PromqlError> {
    match prepass::parse(s, opts)? {
        promql_parser::parser::Expr::VectorSelector(vs) => prepass::matchers(&vs),
        _ => Err(PromqlError::Parse(format!(
            "invalid series selector {s:?}: not a vector selector"
        ))),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::store::{Appender, Labels, MemStore};

    /// A cached parse gives the same answers; the duration context is part
    /// of the key (`step()` differs per range query); errors are not kept.
    #[test]
    fn cached_parses_answer_as_fresh_ones() {
        let mut s = MemStore::new();
        for i in 0..100 {
            s.append(None, &Labels::metric("c", [("k", "a")]), i * 1000, i as f64)
                .unwrap();
        }
        let e = Engine::default();
        let q = "sum(rate(c[10s]))";
        let a = e.instant(&s, q, 50_000).unwrap();
        assert_eq!(e.parsed.lock().unwrap().map.len(), 1);
        assert_eq!(e.instant(&s, q, 50_000).unwrap(), a);
        assert_eq!(e.instant(&s, q, 60_000).unwrap(), {
            let fresh = Engine::default();
            fresh.instant(&s, q, 60_000).unwrap()
        });
        let r = "count_over_time(c[step()])";
        let (m1, m5) = (
            e.range(&s, r, 10_000, 20_000, 1_000).unwrap(),
            e.range(&s, r, 10_000, 20_000, 5_000).unwrap(),
        );
        assert_eq!(m1[0].points[0].v, 1.0);
        assert_eq!(m5[0].points[0].v, 5.0);
        assert_eq!(e.range(&s, r, 10_000, 20_000, 1_000).unwrap(), m1);
        let bad = "sum(rate(c[10s])";
        assert!(matches!(e.instant(&s, bad, 0), Err(PromqlError::Parse(_))));
        assert!(matches!(e.instant(&s, bad, 0), Err(PromqlError::Parse(_))));
        assert_eq!(e.parsed.lock().unwrap().map.len(), 3);
    }
}

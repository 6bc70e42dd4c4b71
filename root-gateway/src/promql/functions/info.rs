//! `info(v, {data matchers})`: enriches series with data labels of info
//! metrics (default `target_info`) joined on the identifying labels
//! `instance` and `job`, as of the time the first selector of `v` reads.

use std::collections::{BTreeMap, HashMap, HashSet};

use promql_parser::parser::{Call, Expr};

use super::super::PromqlError;
use super::super::eval::Evaluator;
use super::super::prepass::{self, adjust, children};
use super::super::value::{Value, VectorSample};
use super::arg;
use crate::store::{Labels, MatchOp, Matcher};
use canopy_proto::model::METRIC_NAME;

const IDENTIFYING: [&str; 2] = ["instance", "job"];

/// The time the first selector under `e` (pre-order) reads when `e` is
/// evaluated at `t`: `@` and offsets of subqueries on the way are applied.
fn info_time(ev: &Evaluator<'_>, e: &Expr, t: i64) -> Option<i64> {
    match e {
        Expr::VectorSelector(vs) => Some(adjust(&vs.at, &vs.offset, t, ev.qstart, ev.qend)),
        Expr::MatrixSelector(ms) => Some(adjust(&ms.vs.at, &ms.vs.offset, t, ev.qstart, ev.qend)),
        Expr::Subquery(sq) => info_time(
            ev,
            &sq.expr,
            adjust(&sq.at, &sq.offset, t, ev.qstart, ev.qend),
        ),
        _ => children(e).into_iter().find_map(|c| info_time(ev, c, t)),
    }
}

/// The signature an info series of metric `name` joins on.
fn signature(name: &str, l: &Labels) -> Vec<String> {
    let mut sig = vec![name.to_string()];
    for n in IDENTIFYING {
        sig.push(l.get(n).map_or_else(String::new, |v| format!("={v}")));
    }
    sig
}

/// Evaluates `info()` at `t`.
pub(super) fn info(ev: &mut Evaluator<'_>, c: &Call, t: i64) -> Result<Value, PromqlError> {
    let base_expr = arg(c, 0)?;
    let base = ev.eval_vector(base_expr, t)?;
    // Data label matchers, `__name__` ones included (they pick the info metrics).
    let mut selector: Vec<Matcher> = match c.args.args.get(1).map(|b| b.as_ref()) {
        Some(Expr::VectorSelector(vs)) => prepass::matchers(vs)?,
        Some(_) => {
            return Err(PromqlError::Execution(
                "info(): the second argument must be a label selector".into(),
            ));
        }
        None => Vec::new(),
    };
    let name_matchers: Vec<Matcher> = selector
        .iter()
        .filter(|m| m.name == METRIC_NAME)
        .cloned()
        .collect();
    let default_name = Matcher::equal(METRIC_NAME, "target_info");
    let ignore_by: Vec<Matcher> = if c.args.args.len() > 1 {
        name_matchers.clone()
    } else {
        vec![default_name.clone()]
    };
    // Series that are info series themselves pass through: those named as
    // a positive `__name__` matcher selects (and no negative one refuses).
    let positive = ignore_by
        .iter()
        .any(|m| matches!(m.op, MatchOp::Equal(_) | MatchOp::Regex(_)));
    let ignored =
        |s: &VectorSample| positive && ignore_by.iter().all(|m| m.matches(s.labels.name()));
    if name_matchers.is_empty() {
        selector.insert(0, default_name);
    } else if !positive {
        // Only negative name matchers: they narrow the set of info metrics.
        selector.push(Matcher {
            name: METRIC_NAME.to_string(),
            op: MatchOp::Regex(prepass::compile_re(".+_info")?),
        });
    }
    let data: Vec<Matcher> = selector
        .iter()
        .filter(|m| m.name != METRIC_NAME)
        .cloned()
        .collect();
    let data_names: HashSet<&str> = data.iter().map(|m| m.name.as_str()).collect();

    // Identifying label values of the series to enrich.
    let mut id_values: BTreeMap<&str, HashSet<String>> = BTreeMap::new();
    for s in base.iter().filter(|s| !ignored(s)) {
        for n in IDENTIFYING {
            if let Some(v) = s.labels.get(n).filter(|v| !v.is_empty()) {
                id_values.entry(n).or_default().insert(v.to_string());
            }
        }
    }
    // Newest info sample per signature as of the info time.
    let mut best: HashMap<Vec<String>, (i64, Labels)> = HashMap::new();
    if !id_values.is_empty() {
        let ti = info_time(ev, base_expr, t).unwrap_or(t);
        for (labels, ts) in ev.select_latest(&selector, ti)? {
            let complete = id_values
                .iter()
                .all(|(n, vals)| labels.get(n).is_some_and(|v| vals.contains(v)));
            if !complete {
                continue;
            }
            let sig = signature(labels.name(), &labels);
            match best.get(&sig) {
                Some((old, _)) if *old > ts => {}
                Some((old, other)) if *old == ts => {
                    return Err(PromqlError::Execution(format!(
                        "found duplicate series for info metric: existing {other} @ {old}, new {labels} @ {ts}"
                    )));
                }
                _ => {
                    best.insert(sig, (ts, labels));
                }
            }
        }
    }
    let info_names: HashSet<String> = best.keys().map(|k| k[0].clone()).collect();
    let all_match_empty = data.iter().all(|m| m.matches(""));
    let mut out = Vec::with_capacity(base.len());
    for mut s in base {
        if ignored(&s) {
            out.push(s);
            continue;
        }
        let mut added = Labels::default();
        let mut seen = 0;
        for name in &info_names {
            let Some((_, il)) = best.get(&signature(name, &s.labels)) else {
                continue;
            };
            seen += 1;
            for (n, v) in il.iter() {
                if n == METRIC_NAME || (!data_names.is_empty() && !data_names.contains(n)) {
                    continue;
                }
                if added.get(n).is_some_and(|x| !x.is_empty() && x != v) {
                    return Err(PromqlError::Execution(format!("conflicting label: {n}")));
                }
                if s.labels.get(n).is_some() {
                    continue;
                }
                added.set(n, v);
            }
        }
        if seen == 0 && !all_match_empty {
            continue;
        }
        for (n, v) in added.iter() {
            s.labels.set(n, v);
        }
        out.push(s);
    }
    let mut uniq = HashSet::new();
    if !out.iter().all(|s| uniq.insert(s.labels.clone())) {
        return Err(PromqlError::Execution(
            "vector cannot contain metrics with the same labelset".into(),
        ));
    }
    Ok(Value::Vector(out))
}

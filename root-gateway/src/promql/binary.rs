//! Binary operators: arithmetic, comparison, set operations, vector matching.

use std::collections::{HashMap, HashSet};

use promql_parser::parser::{BinaryExpr, LabelModifier, VectorMatchCardinality};

use super::PromqlError;
use super::eval::Evaluator;
use super::value::{Value, VectorSample};
use crate::store::Labels;
use canopy_proto::model::METRIC_NAME;

fn is_arith(op: &str) -> bool {
    matches!(op, "+" | "-" | "*" | "/" | "%" | "^" | "atan2")
}

fn is_cmp(op: &str) -> bool {
    matches!(op, "==" | "!=" | ">" | "<" | ">=" | "<=")
}

/// Applies `op` to two floats: (value, keep).
fn elem(op: &str, l: f64, r: f64) -> Result<(f64, bool), PromqlError> {
    Ok(match op {
        "+" => (l + r, true),
        "-" => (l - r, true),
        "*" => (l * r, true),
        "/" => (l / r, true),
        "%" => (l % r, true),
        "^" => (l.powf(r), true),
        "atan2" => (l.atan2(r), true),
        "==" => (l, l == r),
        "!=" => (l, l != r),
        ">" => (l, l > r),
        "<" => (l, l < r),
        ">=" => (l, l >= r),
        "<=" => (l, l <= r),
        other => {
            return Err(PromqlError::Execution(format!(
                "operator {other:?} not allowed here"
            )));
        }
    })
}

/// The matching signature of `l`: the `on` labels, or all but the
/// `ignoring` labels and the metric name.
fn signature(l: &Labels, matching: &Option<LabelModifier>) -> String {
    let mut s = String::new();
    let mut add = |n: &str, v: &str| {
        s.push_str(n);
        s.push('\u{ff}');
        s.push_str(v);
        s.push('\u{ff}');
    };
    match matching {
        Some(LabelModifier::Include(on)) => {
            for (n, v) in l.iter().filter(|(n, _)| on.labels.iter().any(|o| o == n)) {
                add(n, v);
            }
        }
        Some(LabelModifier::Exclude(ign)) => {
            for (n, v) in l
                .iter()
                .filter(|(n, _)| *n != METRIC_NAME && !ign.labels.iter().any(|o| o == n))
            {
                add(n, v);
            }
        }
        None => {
            for (n, v) in l.iter().filter(|(n, _)| *n != METRIC_NAME) {
                add(n, v);
            }
        }
    }
    s
}

fn match_labels(l: &Labels, matching: &Option<LabelModifier>) -> Labels {
    match matching {
        Some(LabelModifier::Include(on)) => {
            Labels::from_pairs(l.iter().filter(|(n, _)| on.labels.iter().any(|o| o == n)))
        }
        Some(LabelModifier::Exclude(ign)) => Labels::from_pairs(
            l.iter()
                .filter(|(n, _)| *n != METRIC_NAME && !ign.labels.iter().any(|o| o == n)),
        ),
        None => Labels::from_pairs(l.iter().filter(|(n, _)| *n != METRIC_NAME)),
    }
}

/// Evaluates a binary expression at `t`.
pub(crate) fn eval(ev: &mut Evaluator<'_>, b: &BinaryExpr, t: i64) -> Result<Value, PromqlError> {
    let op = b.op.to_string();
    let op = op.as_str();
    let return_bool = b.return_bool();
    let lhs = ev.eval(&b.lhs, t)?;
    let rhs = ev.eval(&b.rhs, t)?;
    match (lhs, rhs) {
        (Value::Scalar { v: l, .. }, Value::Scalar { v: r, .. }) => {
            let (v, keep) = elem(op, l, r)?;
            let v = if is_cmp(op) {
                f64::from(u8::from(keep))
            } else {
                v
            };
            Ok(Value::Scalar { t, v })
        }
        (Value::Vector(v), Value::Scalar { v: s, .. }) => {
            vector_scalar(op, v, s, false, return_bool)
        }
        (Value::Scalar { v: s, .. }, Value::Vector(v)) => {
            vector_scalar(op, v, s, true, return_bool)
        }
        (Value::Vector(l), Value::Vector(r)) => {
            let matching = b.modifier.as_ref().and_then(|m| m.matching.clone());
            match op {
                "and" => {
                    let sigs: HashSet<String> =
                        r.iter().map(|s| signature(&s.labels, &matching)).collect();
                    Ok(Value::Vector(
                        l.into_iter()
                            .filter(|s| sigs.contains(&signature(&s.labels, &matching)))
                            .collect(),
                    ))
                }
                "unless" => {
                    let sigs: HashSet<String> =
                        r.iter().map(|s| signature(&s.labels, &matching)).collect();
                    Ok(Value::Vector(
                        l.into_iter()
                            .filter(|s| !sigs.contains(&signature(&s.labels, &matching)))
                            .collect(),
                    ))
                }
                "or" => {
                    let sigs: HashSet<String> =
                        l.iter().map(|s| signature(&s.labels, &matching)).collect();
                    let mut out = l;
                    out.extend(
                        r.into_iter()
                            .filter(|s| !sigs.contains(&signature(&s.labels, &matching))),
                    );
                    Ok(Value::Vector(out))
                }
                _ => vector_vector(op, b, l, r, return_bool),
            }
        }
        (l, r) => Err(PromqlError::Execution(format!(
            "binary operator {op} not allowed between {} and {}",
            l.type_name(),
            r.type_name()
        ))),
    }
}

fn vector_scalar(
    op: &str,
    v: Vec<VectorSample>,
    s: f64,
    swap: bool,
    return_bool: bool,
) -> Result<Value, PromqlError> {
    let mut out = Vec::with_capacity(v.len());
    for mut x in v {
        let (l, r) = if swap { (s, x.v) } else { (x.v, s) };
        let (mut val, mut keep) = elem(op, l, r)?;
        if is_cmp(op) && swap {
            val = r;
        }
        if return_bool {
            val = f64::from(u8::from(keep));
            keep = true;
        }
        if keep {
            x.v = val;
            x.drop_name = x.drop_name || return_bool || is_arith(op);
            out.push(x);
        }
    }
    Ok(Value::Vector(out))
}

fn vector_vector(
    op: &str,
    b: &BinaryExpr,
    l: Vec<VectorSample>,
    r: Vec<VectorSample>,
    return_bool: bool,
) -> Result<Value, PromqlError> {
    let modifier = b.modifier.clone().unwrap_or_default();
    let matching = modifier.matching.clone();
    let card = modifier.card.clone();
    let fill = modifier.fill_values.clone();
    let swap = matches!(card, VectorMatchCardinality::OneToMany(_));
    let include: Vec<String> = card.labels().map(|l| l.labels.clone()).unwrap_or_default();
    let (many, one) = if swap { (r, l) } else { (l, r) };
    let mut one_sigs: HashMap<String, usize> = HashMap::new();
    for (i, s) in one.iter().enumerate() {
        let sig = signature(&s.labels, &matching);
        if let Some(&j) = one_sigs.get(&sig) {
            let side = if swap { "left" } else { "right" };
            let (mut a, mut b) = (&s.labels, &one[j].labels);
            if b < a {
                std::mem::swap(&mut a, &mut b);
            }
            return Err(PromqlError::Execution(format!(
                "found duplicate series for the match group {} on the {side} hand-side of the operation: [{}, {}];many-to-many matching not allowed: matching labels must be unique on one side",
                fmt_match(&match_labels(&s.labels, &matching)),
                fmt_match(a),
                fmt_match(b)
            )));
        }
        one_sigs.insert(sig, i);
    }
    let one_to_one = matches!(card, VectorMatchCardinality::OneToOne);
    let mut matched: HashMap<String, HashSet<Labels>> = HashMap::new();
    let mut used_one: HashSet<usize> = HashSet::new();
    let mut out = Vec::new();
    let mut emit = |ls: &VectorSample,
                    rs: Option<&VectorSample>,
                    lf: f64,
                    rf: f64,
                    sig: String|
     -> Result<(), PromqlError> {
        if one_to_one && matched.get(&sig).is_some_and(|s| !s.is_empty()) {
            return Err(PromqlError::Execution(
                "multiple matches for labels: many-to-one matching must be explicit (group_left/group_right)".into(),
            ));
        }
        let (mut val, mut keep) = elem(op, lf, rf)?;
        if return_bool {
            val = f64::from(u8::from(keep));
            keep = true;
        }
        if !keep {
            if one_to_one {
                matched.entry(sig).or_default().insert(Labels::default());
            }
            return Ok(());
        }
        let mut metric = ls.labels.clone();
        if one_to_one {
            metric = match &matching {
                Some(LabelModifier::Include(on)) => Labels::from_pairs(
                    metric
                        .iter()
                        .filter(|(n, _)| on.labels.iter().any(|o| o == n)),
                ),
                Some(LabelModifier::Exclude(ign)) => Labels::from_pairs(
                    metric
                        .iter()
                        .filter(|(n, _)| !ign.labels.iter().any(|o| o == n)),
                ),
                None => metric,
            };
        }
        for ln in &include {
            match rs.and_then(|r| r.labels.get(ln)) {
                Some(v) => metric.set(ln, v),
                None => {
                    metric.remove(ln);
                }
            }
        }
        let set = matched.entry(sig).or_default();
        if one_to_one {
            if !set.is_empty() {
                return Err(PromqlError::Execution(
                    "multiple matches for labels: many-to-one matching must be explicit (group_left/group_right)".into(),
                ));
            }
        } else if set.contains(&metric) {
            return Err(PromqlError::Execution(
                "multiple matches for labels: grouping labels must ensure unique matches".into(),
            ));
        }
        set.insert(metric.clone());
        out.push(VectorSample {
            labels: metric,
            t: ls.t,
            v: val,
            drop_name: ls.drop_name || return_bool || is_arith(op),
        });
        Ok(())
    };
    // As in Prometheus, `fill_left` fills the "many" side and `fill_right`
    // the "one" side, also under group_right (where the operands swap).
    let (fill_many, fill_one) = (fill.lhs, fill.rhs);
    for ls in &many {
        let sig = signature(&ls.labels, &matching);
        let (rs, rv) = match one_sigs.get(&sig) {
            Some(&i) => {
                used_one.insert(i);
                (Some(&one[i]), one[i].v)
            }
            None => match fill_one {
                Some(f) => (None, f),
                None => continue,
            },
        };
        let (lf, rf) = if swap { (rv, ls.v) } else { (ls.v, rv) };
        emit(ls, rs, lf, rf, sig)?;
    }
    if let Some(f) = fill_many {
        for (i, rs) in one.iter().enumerate() {
            if used_one.contains(&i) {
                continue;
            }
            let sig = signature(&rs.labels, &matching);
            let (lf, rf) = if swap { (rs.v, f) } else { (f, rs.v) };
            // The filled sample carries only the match group's labels.
            let filled = VectorSample {
                labels: match_labels(&rs.labels, &matching),
                t: rs.t,
                v: f,
                drop_name: false,
            };
            emit(&filled, Some(rs), lf, rf, sig)?;
        }
    }
    Ok(Value::Vector(out))
}

fn fmt_match(l: &Labels) -> String {
    let parts: Vec<String> = l.iter().map(|(n, v)| format!("{n}=\"{v}\"")).collect();
    format!("{{{}}}", parts.join(", "))
}

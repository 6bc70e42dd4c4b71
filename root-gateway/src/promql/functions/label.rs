//! Label functions: `label_replace`, `label_join` and helpers.

use promql_parser::label::MatchOp as PMatchOp;
use promql_parser::parser::Call;

use super::super::PromqlError;
use super::super::eval::Evaluator;
use super::super::prepass;
use super::super::value::{Value, VectorSample};
use super::arg;
use canopy_proto::model::METRIC_NAME;

/// Natural order: runs of digits compare by number.
pub(super) fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if a[i].is_ascii_digit() && b[j].is_ascii_digit() {
            let (si, sj) = (i, j);
            while i < a.len() && a[i].is_ascii_digit() {
                i += 1;
            }
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            let na = std::str::from_utf8(&a[si..i])
                .unwrap_or("")
                .trim_start_matches('0');
            let nb = std::str::from_utf8(&b[sj..j])
                .unwrap_or("")
                .trim_start_matches('0');
            let o = na.len().cmp(&nb.len()).then_with(|| na.cmp(nb));
            if o != Ordering::Equal {
                return o;
            }
        } else {
            if a[i] != b[j] {
                return a[i].cmp(&b[j]);
            }
            i += 1;
            j += 1;
        }
    }
    (a.len() - i).cmp(&(b.len() - j))
}

pub(super) fn label_replace(
    ev: &mut Evaluator<'_>,
    c: &Call,
    t: i64,
) -> Result<Value, PromqlError> {
    let v = ev.eval_vector(arg(c, 0)?, t)?;
    let dst = ev.eval_string(arg(c, 1)?, t)?;
    let repl = ev.eval_string(arg(c, 2)?, t)?;
    let src = ev.eval_string(arg(c, 3)?, t)?;
    let re_s = ev.eval_string(arg(c, 4)?, t)?;
    let m = prepass::regex_matcher(&re_s).map_err(|_| {
        PromqlError::Execution(format!(
            "invalid regular expression in label_replace(): {re_s}"
        ))
    })?;
    let PMatchOp::Re(re) = &m.op else {
        return Err(PromqlError::Execution(
            "invalid regular expression in label_replace()".into(),
        ));
    };
    if !valid_label_name(&dst) {
        return Err(PromqlError::Execution(format!(
            "invalid destination label name in label_replace(): {dst}"
        )));
    }
    let mut out = Vec::with_capacity(v.len());
    for mut s in v {
        let val = s.labels.get(&src).unwrap_or("").to_string();
        if let Some(caps) = re.captures(&val) {
            let mut res = String::new();
            caps.expand(&repl, &mut res);
            s.labels.set(&dst, &res);
            if dst == METRIC_NAME {
                s.drop_name = false;
            }
        }
        out.push(s);
    }
    check_unique(&out)?;
    Ok(Value::Vector(out))
}

pub(super) fn label_join(ev: &mut Evaluator<'_>, c: &Call, t: i64) -> Result<Value, PromqlError> {
    let v = ev.eval_vector(arg(c, 0)?, t)?;
    let dst = ev.eval_string(arg(c, 1)?, t)?;
    let sep = ev.eval_string(arg(c, 2)?, t)?;
    let mut srcs = Vec::new();
    for i in 3..c.args.args.len() {
        srcs.push(ev.eval_string(arg(c, i)?, t)?);
    }
    if !valid_label_name(&dst) {
        return Err(PromqlError::Execution(format!(
            "invalid destination label name in label_join(): {dst}"
        )));
    }
    let mut out = Vec::with_capacity(v.len());
    for mut s in v {
        let joined: Vec<&str> = srcs.iter().map(|n| s.labels.get(n).unwrap_or("")).collect();
        let joined = joined.join(&sep);
        s.labels.set(&dst, &joined);
        if dst == METRIC_NAME {
            s.drop_name = false;
        }
        out.push(s);
    }
    check_unique(&out)?;
    Ok(Value::Vector(out))
}

/// Prometheus 3 accepts any non-empty UTF-8 label name (U+FFFD stands for
/// invalid UTF-8 written as `\x` escapes).
pub(crate) fn valid_label_name(n: &str) -> bool {
    !n.is_empty() && !n.contains('\u{FFFD}')
}

fn check_unique(v: &[VectorSample]) -> Result<(), PromqlError> {
    let mut seen = std::collections::HashSet::new();
    for s in v {
        let mut l = s.labels.clone();
        if s.drop_name {
            l.remove(METRIC_NAME);
        }
        if !seen.insert(l) {
            return Err(PromqlError::Execution(
                "vector cannot contain metrics with the same labelset".into(),
            ));
        }
    }
    Ok(())
}

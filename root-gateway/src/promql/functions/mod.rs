//! PromQL functions.

use promql_parser::label::MatchOp as PMatchOp;
use promql_parser::parser::{Call, Expr};

use super::eval::Evaluator;
use super::value::{Value, VectorSample};
use super::{PromqlError, aggregate};
use crate::store::Labels;
use canopy_proto::model::METRIC_NAME;

mod histogram;
mod info;
mod label;
mod math;
mod range;
pub(crate) mod time;

pub(crate) use histogram::classic_groups;
pub(crate) use label::valid_label_name;
use label::{label_join, label_replace, natural_cmp};
use math::math_fn;
pub(crate) use math::{avg, go_max, go_min, kahan_inc, quantile, variance};
use range::range_fn;
pub(crate) use range::{apply as range_apply, extrapolated_rate, is_break};
use time::date_part;

pub(super) fn arg(c: &Call, i: usize) -> Result<&Expr, PromqlError> {
    c.args.args.get(i).map(|b| b.as_ref()).ok_or_else(|| {
        PromqlError::Execution(format!("{}: missing argument {}", c.func.name, i + 1))
    })
}

/// Labels for `absent()`: the equality matchers of a selector argument.
fn absent_labels(e: &Expr) -> Labels {
    let vs = match e {
        Expr::VectorSelector(vs) => vs,
        Expr::MatrixSelector(ms) => &ms.vs,
        _ => return Labels::default(),
    };
    let mut out = Labels::default();
    let mut seen = std::collections::HashSet::new();
    let mut dup = std::collections::HashSet::new();
    for m in &vs.matchers.matchers {
        if m.name == METRIC_NAME || m.name == super::durexpr::MODE_LABEL {
            continue;
        }
        if !seen.insert(m.name.clone()) {
            dup.insert(m.name.clone());
        }
        if matches!(m.op, PMatchOp::Equal) {
            out.set(&m.name, &m.value);
        }
    }
    for d in dup {
        out.remove(&d);
    }
    out
}

fn unit(t: i64, v: f64) -> Value {
    Value::Vector(vec![VectorSample {
        labels: Labels::default(),
        t,
        v,
        drop_name: false,
    }])
}

fn map_vector(v: Vec<VectorSample>, f: impl Fn(f64) -> f64) -> Value {
    Value::Vector(
        v.into_iter()
            .map(|mut s| {
                s.v = f(s.v);
                s.drop_name = true;
                s
            })
            .collect(),
    )
}

/// Evaluates a function call at `t`.
pub(crate) fn call(ev: &mut Evaluator<'_>, c: &Call, t: i64) -> Result<Value, PromqlError> {
    let name = c.func.name;
    match name {
        "time" => {
            return Ok(Value::Scalar {
                t,
                v: t as f64 / 1e3,
            });
        }
        "pi" => {
            return Ok(Value::Scalar {
                t,
                v: std::f64::consts::PI,
            });
        }
        "step" => {
            return Ok(Value::Scalar {
                t,
                v: ev.step_ms as f64 / 1e3,
            });
        }
        "range" => {
            return Ok(Value::Scalar {
                t,
                v: (ev.qend - ev.qstart) as f64 / 1e3,
            });
        }
        "start" => {
            return Ok(Value::Scalar {
                t,
                v: ev.qstart as f64 / 1e3,
            });
        }
        "end" => {
            return Ok(Value::Scalar {
                t,
                v: ev.qend as f64 / 1e3,
            });
        }
        "min_of" | "max_of" => {
            let mut acc: Option<f64> = None;
            for i in 0..c.args.args.len() {
                let x = ev.eval_scalar(arg(c, i)?, t)?;
                acc = Some(match acc {
                    None => x,
                    Some(a) if name == "min_of" => go_min(a, x),
                    Some(a) => go_max(a, x),
                });
            }
            return Ok(Value::Scalar {
                t,
                v: acc.unwrap_or(f64::NAN),
            });
        }
        "vector" => {
            let v = ev.eval_scalar(arg(c, 0)?, t)?;
            return Ok(unit(t, v));
        }
        "scalar" => {
            let v = ev.eval_vector(arg(c, 0)?, t)?;
            let x = if v.len() == 1 { v[0].v } else { f64::NAN };
            return Ok(Value::Scalar { t, v: x });
        }
        "minute" | "hour" | "day_of_week" | "day_of_month" | "day_of_year" | "days_in_month"
        | "month" | "year" => {
            if c.args.args.is_empty() {
                return Ok(unit(t, date_part(name, t as f64 / 1e3)));
            }
            let v = ev.eval_vector(arg(c, 0)?, t)?;
            return Ok(map_vector(v, |x| date_part(name, x)));
        }
        "absent" => {
            let v = ev.eval_vector(arg(c, 0)?, t)?;
            if !v.is_empty() {
                return Ok(Value::Vector(Vec::new()));
            }
            let labels = absent_labels(arg(c, 0)?);
            return Ok(Value::Vector(vec![VectorSample {
                labels,
                t,
                v: 1.0,
                drop_name: false,
            }]));
        }
        "absent_over_time" => {
            let m = ev.eval_matrix(arg(c, 0)?, t)?;
            if !m.is_empty() {
                return Ok(Value::Vector(Vec::new()));
            }
            let labels = absent_labels(arg(c, 0)?);
            return Ok(Value::Vector(vec![VectorSample {
                labels,
                t,
                v: 1.0,
                drop_name: false,
            }]));
        }
        "start_timestamp" => {
            let a = arg(c, 0)?;
            let mut inner = a;
            while let Expr::Paren(p) = inner {
                inner = &p.expr;
            }
            // Start times reach the function only straight from a selector.
            if let Expr::VectorSelector(vs) = inner {
                return Ok(Value::Vector(ev.start_timestamps(vs, t)?));
            }
            ev.eval_vector(a, t)?;
            return Ok(Value::Vector(Vec::new()));
        }
        "timestamp" => {
            let a = arg(c, 0)?;
            let mut inner = a;
            while let Expr::Paren(p) = inner {
                inner = &p.expr;
            }
            let direct = matches!(inner, Expr::VectorSelector(_));
            let v = ev.eval_vector(a, t)?;
            return Ok(Value::Vector(
                v.into_iter()
                    .map(|mut s| {
                        s.v = if direct {
                            s.t as f64 / 1e3
                        } else {
                            t as f64 / 1e3
                        };
                        s.drop_name = true;
                        s
                    })
                    .collect(),
            ));
        }
        "sort" | "sort_desc" => {
            let mut v = ev.eval_vector(arg(c, 0)?, t)?;
            let desc = name == "sort_desc";
            v.sort_by(|a, b| match (a.v.is_nan(), b.v.is_nan()) {
                (true, true) => std::cmp::Ordering::Equal,
                (true, false) => std::cmp::Ordering::Greater,
                (false, true) => std::cmp::Ordering::Less,
                _ if desc => b.v.total_cmp(&a.v),
                _ => a.v.total_cmp(&b.v),
            });
            return Ok(Value::Vector(v));
        }
        "sort_by_label" | "sort_by_label_desc" => {
            let mut v = ev.eval_vector(arg(c, 0)?, t)?;
            let mut names = Vec::new();
            for i in 1..c.args.args.len() {
                names.push(ev.eval_string(arg(c, i)?, t)?);
            }
            v.sort_by(|a, b| {
                for n in &names {
                    let o =
                        natural_cmp(a.labels.get(n).unwrap_or(""), b.labels.get(n).unwrap_or(""));
                    if o != std::cmp::Ordering::Equal {
                        return o;
                    }
                }
                a.labels.cmp(&b.labels)
            });
            if name == "sort_by_label_desc" {
                v.reverse();
            }
            return Ok(Value::Vector(v));
        }
        "label_replace" => return label_replace(ev, c, t),
        "info" => return info::info(ev, c, t),
        "histogram_fraction" => return histogram::histogram_fraction(ev, c, t),
        "histogram_quantiles" => return histogram::histogram_quantiles(ev, c, t),
        "label_join" => return label_join(ev, c, t),
        "histogram_quantile" => return aggregate::histogram_quantile(ev, c, t),
        _ => {}
    }
    if let Some(f) = math_fn(name) {
        let v = ev.eval_vector(arg(c, 0)?, t)?;
        return Ok(map_vector(v, f));
    }
    match name {
        "round" => {
            let v = ev.eval_vector(arg(c, 0)?, t)?;
            let to = if c.args.args.len() > 1 {
                ev.eval_scalar(arg(c, 1)?, t)?
            } else {
                1.0
            };
            let inv = 1.0 / to;
            return Ok(map_vector(v, |x| (x * inv + 0.5).floor() / inv));
        }
        "clamp" | "clamp_min" | "clamp_max" => {
            let v = ev.eval_vector(arg(c, 0)?, t)?;
            let (lo, hi) = match name {
                "clamp" => (
                    ev.eval_scalar(arg(c, 1)?, t)?,
                    ev.eval_scalar(arg(c, 2)?, t)?,
                ),
                "clamp_min" => (ev.eval_scalar(arg(c, 1)?, t)?, f64::NAN),
                _ => (f64::NAN, ev.eval_scalar(arg(c, 1)?, t)?),
            };
            if name == "clamp" && hi < lo {
                return Ok(Value::Vector(Vec::new()));
            }
            let (has_lo, has_hi) = (name != "clamp_max", name != "clamp_min");
            return Ok(map_vector(v, |x| {
                let mut r = x;
                if has_lo {
                    r = go_max(lo, r);
                }
                if has_hi {
                    r = go_min(hi, r);
                }
                r
            }));
        }
        _ => {}
    }
    range_fn(ev, c, t)
}

//! Query answers of the Prometheus HTTP API, parsed into comparable form,
//! and the check that two answers agree: the same label sets, the same
//! timestamps, values within a relative tolerance.

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// A series' labels, sorted.
pub type LabelSet = BTreeMap<String, String>;

/// A parsed `data` of a successful query: series with their points
/// (timestamp in ms, value); an instant vector has one point per series.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// `vector`, `matrix`, `scalar`...
    pub kind: String,
    /// Series sorted by labels.
    pub series: Vec<(LabelSet, Vec<(i64, f64)>)>,
}

impl Answer {
    /// Points over all series.
    pub fn points(&self) -> usize {
        self.series.iter().map(|(_, p)| p.len()).sum()
    }
}

fn point(v: &Value) -> Result<(i64, f64)> {
    let a = v.as_array().context("a point is not an array")?;
    let (Some(t), Some(x)) = (a.first(), a.get(1)) else {
        bail!("a point has fewer than two members");
    };
    let t = t.as_f64().context("point timestamp")?;
    let x = x.as_str().context("point value is not a string")?;
    let x = match x {
        "NaN" => f64::NAN,
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        s => s.parse().with_context(|| format!("point value {s:?}"))?,
    };
    Ok(((t * 1000.0).round() as i64, x))
}

/// Parses a query answer body; an error answer is an `Err` with its text.
pub fn parse(body: &[u8]) -> Result<Answer> {
    let v: Value = serde_json::from_slice(body).context("the answer is not JSON")?;
    if v["status"] != "success" {
        bail!(
            "query failed: {} {}",
            v["errorType"].as_str().unwrap_or("?"),
            v["error"].as_str().unwrap_or("?")
        );
    }
    let data = &v["data"];
    let kind = data["resultType"]
        .as_str()
        .context("no data.resultType")?
        .to_string();
    let mut series = Vec::new();
    match kind.as_str() {
        "vector" | "matrix" => {
            for s in data["result"].as_array().context("no data.result array")? {
                let labels: LabelSet = s["metric"]
                    .as_object()
                    .context("no metric object")?
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect();
                let pts = if kind == "vector" {
                    vec![point(&s["value"])?]
                } else {
                    s["values"]
                        .as_array()
                        .context("no values array")?
                        .iter()
                        .map(point)
                        .collect::<Result<_>>()?
                };
                series.push((labels, pts));
            }
        }
        "scalar" => series.push((LabelSet::new(), vec![point(&data["result"])?])),
        other => bail!("result type {other} not handled"),
    }
    series.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Answer { kind, series })
}

/// True when `a` and `b` agree within `rel` (relative to the larger
/// magnitude; NaN equals NaN, infinities must match exactly).
pub fn close(a: f64, b: f64, rel: f64) -> bool {
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    if a.is_infinite() || b.is_infinite() {
        return a == b;
    }
    (a - b).abs() <= rel * a.abs().max(b.abs())
}

/// How two answers compare.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Diff {
    /// Points compared and equal within the tolerance.
    pub agreeing: usize,
    /// Largest relative difference seen among matched points.
    pub max_rel: f64,
    /// Up to a few human-readable differences; empty when they agree.
    pub problems: Vec<String>,
    /// Number of differences in all (label sets, timestamps, values).
    pub differences: usize,
}

impl Diff {
    /// True when nothing differs.
    pub fn agree(&self) -> bool {
        self.differences == 0
    }

    fn note(&mut self, what: String) {
        self.differences += 1;
        if self.problems.len() < 5 {
            self.problems.push(what);
        }
    }
}

fn show(l: &LabelSet) -> String {
    let inner: Vec<String> = l.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{{{}}}", inner.join(", "))
}

/// Compares `ours` with `theirs` (the reference), values within `rel`.
pub fn compare(ours: &Answer, theirs: &Answer, rel: f64) -> Diff {
    let mut d = Diff::default();
    if ours.kind != theirs.kind {
        d.note(format!("result type {} vs {}", ours.kind, theirs.kind));
        return d;
    }
    let a: BTreeMap<&LabelSet, &Vec<(i64, f64)>> =
        ours.series.iter().map(|(l, p)| (l, p)).collect();
    let b: BTreeMap<&LabelSet, &Vec<(i64, f64)>> =
        theirs.series.iter().map(|(l, p)| (l, p)).collect();
    if a.len() != ours.series.len() || b.len() != theirs.series.len() {
        d.note("an answer holds the same label set twice".into());
    }
    for (l, pa) in &a {
        let Some(pb) = b.get(l) else {
            d.note(format!("series {} only in ours", show(l)));
            continue;
        };
        let tb: BTreeMap<i64, f64> = pb.iter().copied().collect();
        let ta: BTreeMap<i64, f64> = pa.iter().copied().collect();
        for (t, x) in &ta {
            match tb.get(t) {
                None => d.note(format!("{} @{t}: only in ours ({x})", show(l))),
                Some(y) => {
                    if close(*x, *y, rel) {
                        d.agreeing += 1;
                        let m = x.abs().max(y.abs());
                        if m > 0.0 && m.is_finite() {
                            d.max_rel = d.max_rel.max((x - y).abs() / m);
                        }
                    } else {
                        d.note(format!("{} @{t}: {x} vs {y}", show(l)));
                    }
                }
            }
        }
        for (t, y) in &tb {
            if !ta.contains_key(t) {
                d.note(format!("{} @{t}: only in theirs ({y})", show(l)));
            }
        }
    }
    for l in b.keys() {
        if !a.contains_key(l) {
            d.note(format!("series {} only in theirs", show(l)));
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    const VEC_A: &str = r#"{"status":"success","data":{"resultType":"vector","result":[
        {"metric":{"job_id":"2"},"value":[1700000000,"3.5"]},
        {"metric":{"job_id":"1"},"value":[1700000000,"1e3"]}]}}"#;
    const VEC_B: &str = r#"{"status":"success","data":{"resultType":"vector","result":[
        {"metric":{"job_id":"1"},"value":[1700000000,"1000.0000000001"]},
        {"metric":{"job_id":"2"},"value":[1700000000,"3.5"]}]}}"#;

    #[test]
    fn order_does_not_matter_and_tolerance_applies() {
        let a = parse(VEC_A.as_bytes()).expect("a");
        let b = parse(VEC_B.as_bytes()).expect("b");
        assert_eq!(a.points(), 2);
        let d = compare(&a, &b, 1e-9);
        assert!(d.agree(), "{d:?}");
        assert_eq!(d.agreeing, 2);
        assert!(d.max_rel > 0.0 && d.max_rel < 1e-12);
        let strict = compare(&a, &b, 1e-15);
        assert_eq!(strict.differences, 1);
        assert!(strict.problems[0].contains("job_id=\"1\""), "{strict:?}");
    }

    #[test]
    fn missing_series_points_and_kinds_are_differences() {
        let m1 = r#"{"status":"success","data":{"resultType":"matrix","result":[
            {"metric":{"a":"x"},"values":[[10,"1"],[25.5,"NaN"]]}]}}"#;
        let m2 = r#"{"status":"success","data":{"resultType":"matrix","result":[
            {"metric":{"a":"x"},"values":[[10,"1"],[25.5,"NaN"],[40,"2"]]},
            {"metric":{"a":"y"},"values":[[10,"+Inf"]]}]}}"#;
        let (a, b) = (
            parse(m1.as_bytes()).expect("m1"),
            parse(m2.as_bytes()).expect("m2"),
        );
        assert_eq!(a.series[0].1[1].0, 25_500);
        let d = compare(&a, &b, 1e-9);
        assert_eq!((d.agreeing, d.differences), (2, 2), "{d:?}");
        assert!(compare(&b, &b, 0.0).agree());
        let v = parse(VEC_A.as_bytes()).expect("vector");
        assert_eq!(compare(&a, &v, 1e-9).differences, 1);
        let err = r#"{"status":"error","errorType":"bad_data","error":"parse error"}"#;
        let e = parse(err.as_bytes()).expect_err("error answer");
        assert!(e.to_string().contains("bad_data"));
    }

    #[test]
    fn closeness() {
        assert!(close(f64::NAN, f64::NAN, 0.0));
        assert!(!close(f64::NAN, 1.0, 1.0));
        assert!(close(0.0, 0.0, 0.0));
        assert!(!close(0.0, 1e-300, 1e-9));
        assert!(close(f64::INFINITY, f64::INFINITY, 0.0));
        assert!(close(1e9, 1e9 + 0.5, 1e-9));
        assert!(!close(1e9, 1e9 + 2.0, 1e-9));
    }
}

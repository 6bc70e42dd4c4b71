//! `/federate` and `/api/v1/metadata`: the newest sample of each matched
//! series in the Prometheus text format, and metric metadata inferred from
//! Canopy's naming contract (counters end in `_total`, units are suffixes).

use std::collections::BTreeMap;

use canopy_proto::model::{METRIC_NAME, is_stale_nan};

use super::selfmetrics::MetricsText;
use crate::store::{Labels, Matcher, Querier, StoreError};

/// The newest non-stale sample at or before `now` within `lookback` of each
/// series matching any of `selectors`, as Prometheus text exposition.
pub(crate) fn federate(
    q: &dyn Querier,
    selectors: &[Vec<Matcher>],
    now: i64,
    lookback: i64,
    limit: usize,
) -> Result<String, StoreError> {
    let mut latest: BTreeMap<Labels, (i64, f64)> = BTreeMap::new();
    for m in selectors {
        for s in q.select(m, now - lookback, now, limit)? {
            if let Some(p) = s.samples.iter().rev().find(|p| p.ts_ms <= now)
                && !is_stale_nan(p.value)
            {
                latest.insert(s.labels, (p.ts_ms, p.value));
            }
        }
    }
    let mut by_name: BTreeMap<&str, Vec<(&Labels, i64, f64)>> = BTreeMap::new();
    for (l, (t, v)) in &latest {
        by_name.entry(l.name()).or_default().push((l, *t, *v));
    }
    let mut out = MetricsText::default();
    for (name, series) in by_name {
        out.0.push_str(&format!("# TYPE {name} untyped\n"));
        for (l, t, v) in series {
            let pairs: Vec<(&str, &str)> = l.iter().filter(|(k, _)| *k != METRIC_NAME).collect();
            out.sample(name, &pairs, v);
            // Federation keeps the sample's own timestamp (ms).
            out.0.pop();
            out.0.push_str(&format!(" {t}\n"));
        }
    }
    Ok(out.0)
}

/// Type, help and unit of a metric, from its name.
pub(crate) fn metadata_of(name: &str) -> (&'static str, String, &'static str) {
    if name == "up" {
        return (
            "gauge",
            "1 while the node's heartbeats arrive in time, 0 once it missed its deadline.".into(),
            "",
        );
    }
    let base = name.strip_suffix("_total");
    let kind = if base.is_some() { "counter" } else { "gauge" };
    let stem = base.unwrap_or(name);
    let unit = [
        "seconds", "bytes", "joules", "watts", "celsius", "hertz", "ratio", "volts", "amperes",
        "meters", "grams", "percent",
    ]
    .into_iter()
    .find(|u| stem.ends_with(&format!("_{u}")))
    .unwrap_or("");
    let words = stem
        .strip_prefix("canopy_")
        .unwrap_or(stem)
        .replace('_', " ");
    let help = match kind {
        "counter" => format!("Counter: {words} (use rate())."),
        _ => format!("Gauge: {words}."),
    };
    (kind, help, unit)
}

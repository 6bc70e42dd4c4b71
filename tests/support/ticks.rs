//! Checks on `canopy_synthetic_ticks_total` for the tree tests: a node's raw
//! samples at the gateway, the plan's relays, and what counts as a fault
//! (a tick missing or going back).

use std::collections::BTreeMap;

use super::{canopy, get, urlencode};

/// Raw samples `(ts_ms, value)` of one node's tick counter over `range`.
pub fn tick_samples(http: u16, node: &str, range: &str) -> Vec<(i64, f64)> {
    let q = format!("canopy_synthetic_ticks_total{{node=\"{node}\"}}[{range}]");
    let Some((200, body)) = get(http, &format!("/api/v1/query?query={}", urlencode(&q))) else {
        return Vec::new();
    };
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let Some(series) = v["data"]["result"].as_array().and_then(|r| r.first()) else {
        return Vec::new();
    };
    series["values"]
        .as_array()
        .expect("a range vector has values")
        .iter()
        .map(|p| {
            let ts = (p[0].as_f64().expect("timestamp") * 1000.0).round() as i64;
            let v: f64 = p[1].as_str().expect("value").parse().expect("number");
            (ts, v)
        })
        .collect()
}

/// Hosts that relay for at least one child in the plan `canopy plan
/// <plan_args>` makes, with their children.
pub fn relays(plan_args: &[&str]) -> BTreeMap<String, Vec<String>> {
    let mut args = vec!["plan"];
    args.extend(plan_args);
    args.extend(["--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&canopy(&args)).expect("plan JSON");
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (host, h) in v["hosts"].as_object().expect("hosts") {
        for l in h["links"].as_array().expect("links") {
            let parent = l["parent"].as_str().expect("parent");
            if parent != "gateway" {
                out.entry(parent.to_string())
                    .or_default()
                    .push(host.clone());
            }
        }
    }
    out
}

/// What is wrong with `host`'s samples `s`: fewer than 6, a first value
/// other than 1, or a step other than +1 (times relative to `killed_at`).
///
/// A repeated value is not a tick delivered twice (the store keeps one point
/// per timestamp and refuses older ones): it is the unchanged counter implied
/// at a grid slot where a starved leaf took its next tick late, as a scrape
/// at that instant would read it. A gap or a step back is a fault.
pub fn tick_faults(host: &str, s: &[(i64, f64)], killed_at: i64) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() < 6 {
        out.push(format!("{host}: only {} samples", s.len()));
        return out;
    }
    if s[0].1 != 1.0 {
        out.push(format!(
            "{host}: the first tick at the gateway is {}, not 1",
            s[0].1
        ));
    }
    let mut steps = s.to_vec();
    steps.dedup_by(|b, a| b.1 == a.1);
    for w in steps.windows(2) {
        if w[1].1 != w[0].1 + 1.0 {
            out.push(format!(
                "{host}: tick {} at {:+} ms from the kill, then {} at {:+} ms",
                w[0].1,
                w[0].0 - killed_at,
                w[1].1,
                w[1].0 - killed_at
            ));
        }
    }
    out
}

/// Wall-clock milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970");
    i64::try_from(d.as_millis()).expect("fits")
}

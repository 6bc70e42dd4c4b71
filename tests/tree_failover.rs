//! The tree loses nothing when a relaying node dies: a gateway and 16
//! `canopy node --synthetic` processes from `canopy plan --emit-configs
//! --loopback` (K = 4 subtrees, R = 2 replicas), `kill -9` of a node that
//! relays for others, then every survivor's `canopy_synthetic_ticks_total`
//! at the gateway must hold every tick exactly once (no gap, no duplicate)
//! across the kill, and the victim's `up` must drop to 0.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use support::{Procs, canopy, free_port, get, port_base, results, urlencode, value_of, wait_for};

/// Raw samples `(ts_ms, value)` of one node's tick counter over `range`.
fn tick_samples(http: u16, node: &str, range: &str) -> Vec<(i64, f64)> {
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

/// Hosts that relay for at least one child in the plan, with their children.
fn relays(plan_json: &str) -> BTreeMap<String, Vec<String>> {
    let v: serde_json::Value = serde_json::from_str(plan_json).expect("plan JSON");
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

#[test]
fn kill_9_of_a_relaying_node_loses_no_tick_of_any_survivor() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_str().expect("utf-8 path").to_string();
    let plan_args = ["--hosts", "h[01-16]", "--subtrees", "4", "--replicas", "2"];
    let base = port_base(0).to_string();
    let mut args = vec!["plan"];
    args.extend(plan_args);
    args.extend(["--emit-configs", &d, "--loopback", "--base-port", &base]);
    canopy(&args);
    let mut args = vec!["plan"];
    args.extend(plan_args);
    args.extend(["--format", "json"]);
    let relays = relays(&canopy(&args));
    // The relay with the most children makes the hardest case.
    let (victim, children) = relays
        .iter()
        .max_by_key(|(_, c)| c.len())
        .map(|(h, c)| (h.clone(), c.clone()))
        .expect("the plan has relaying hosts");

    let http = free_port();
    let mut procs = Procs::default();
    let cfg = |n: &str| format!("{d}/{n}.toml");
    procs.spawn(&[
        "gateway",
        "--config",
        &cfg("gateway"),
        "--http",
        &format!("127.0.0.1:{http}"),
    ]);
    let mut index = BTreeMap::new();
    for i in 1..=16 {
        let h = format!("h{i:02}");
        index.insert(
            h.clone(),
            procs.spawn(&["node", "--config", &cfg(&h), "--synthetic"]),
        );
    }
    wait_for("16 nodes up with ticks", Duration::from_secs(60), || {
        (results(http, "up == 1").len() == 16
            && results(http, "canopy_synthetic_ticks_total").len() == 16)
            .then_some(())
    });
    // Let a few ticks flow on both paths before the kill.
    std::thread::sleep(Duration::from_secs(3));
    procs.kill9(index[&victim]);
    let killed_at = now_ms();

    // The victim is declared down.
    wait_for(
        &format!("up{{node={victim}}} to drop to 0"),
        Duration::from_secs(30),
        || {
            let r = results(http, &format!("up{{node=\"{victim}\"}}"));
            (r.len() == 1 && value_of(&r[0]) == 0.0).then_some(())
        },
    );
    // Survivors keep arriving well past the failover window.
    std::thread::sleep(Duration::from_secs(6));

    let mut faults = Vec::new();
    for i in 1..=16 {
        let h = format!("h{i:02}");
        if h == victim {
            continue;
        }
        let s = tick_samples(http, &h, "10m");
        assert!(s.len() >= 10, "{h}: only {} samples", s.len());
        for w in s.windows(2) {
            if w[1].1 != w[0].1 + 1.0 {
                faults.push(format!(
                    "{h} (child of {victim}: {}): tick {} at {:+} ms from the kill, then {} at {:+} ms",
                    children.contains(&h),
                    w[0].1,
                    w[0].0 - killed_at,
                    w[1].1,
                    w[1].0 - killed_at
                ));
            }
        }
        let last = s.last().expect("samples").0;
        if last < killed_at + 4_000 {
            faults.push(format!(
                "{h}: last tick {} ms after the kill: it stopped arriving",
                last - killed_at
            ));
        }
    }
    assert!(
        faults.is_empty(),
        "gaps or duplicates:\n{}",
        faults.join("\n")
    );
}

fn now_ms() -> i64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970");
    i64::try_from(d.as_millis()).expect("fits")
}

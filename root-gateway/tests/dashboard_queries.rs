//! Every PromQL expression the built-in dashboard and the shipped Grafana
//! dashboard run parses and evaluates on Canopy's engine, over a small
//! cluster whose figures are known, and a few of them compute those figures.

use std::collections::BTreeMap;

use canopy_gateway::dashboard::asset;
use canopy_gateway::promql::{Engine, EngineOpts, Value, parse_selector};
use canopy_gateway::store::{Appender, Labels, MemStore};
use serde_json::Value as J;

const T0: i64 = 1_700_000_000_000;
const SECS: i64 = 20 * 60;
const END: i64 = T0 + SECS * 1000;
const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// Two nodes, a CPU job underusing on n1 and a two-node GPU job close to its
/// memory limit; counters grow at fixed rates, one sample a second.
fn cluster() -> MemStore {
    let mut s = MemStore::new();
    let mut put = |name: &str, l: &[(&str, &str)], f: &dyn Fn(f64) -> f64| {
        let labels = Labels::metric(name, l.iter().copied());
        for i in 0..=SECS {
            s.append(None, &labels, T0 + i * 1000, f(i as f64))
                .expect("in order");
        }
    };
    for (node, cpus, scale) in [("n1", 32.0, 2.0), ("n2", 16.0, 1.0)] {
        let n = [("node", node)];
        put("up", &n, &|_| 1.0);
        put("canopy_node_cpus", &n, &|_| cpus);
        put("canopy_node_memory_total_bytes", &n, &|_| 64.0 * GIB);
        put("canopy_node_memory_available_bytes", &n, &|_| 16.0 * GIB);
        for (mode, r) in [
            ("idle", 10.0),
            ("user", 4.0),
            ("system", 1.0),
            ("iowait", 1.0),
        ] {
            put(
                "canopy_node_cpu_seconds_total",
                &[("node", node), ("mode", mode)],
                &|t| 1e6 + r * scale * t,
            );
        }
    }
    let job = |id, user, account, partition, node| {
        [
            ("job_id", id),
            ("user", user),
            ("account", account),
            ("partition", partition),
            ("node", node),
        ]
    };
    let j = job("101", "alice", "physics", "cpu", "n1");
    put("canopy_job_cpus_allocated", &j, &|_| 16.0);
    put("canopy_job_cpu_seconds_total", &j, &|t| 3.0 * t);
    put("canopy_job_memory_bytes", &j, &|_| GIB);
    put("canopy_job_memory_allocated_bytes", &j, &|_| 8.0 * GIB);
    put("canopy_job_io_read_bytes_total", &j, &|t| 1000.0 * t);
    put("canopy_job_io_write_bytes_total", &j, &|t| 500.0 * t);
    for node in ["n1", "n2"] {
        let j = job("202", "dana", "ml", "gpu", node);
        put("canopy_job_cpus_allocated", &j, &|_| 8.0);
        put("canopy_job_cpu_seconds_total", &j, &|t| 7.0 * t);
        put("canopy_job_memory_bytes", &j, &|_| 30.0 * GIB);
        put("canopy_job_memory_allocated_bytes", &j, &|_| 32.0 * GIB);
        put("canopy_job_io_read_bytes_total", &j, &|t| 3000.0 * t);
        put("canopy_job_io_write_bytes_total", &j, &|t| 1000.0 * t);
        put("canopy_job_gpus_allocated", &j, &|_| 2.0);
        for (gpu, u) in [("0", 0.75), ("1", 0.25)] {
            let mut l = j.to_vec();
            l.push(("gpu", gpu));
            put("canopy_job_gpu_sm_utilization_ratio", &l, &|_| u);
        }
    }
    s
}

fn queries() -> J {
    let a = asset("queries.json").expect("queries.json is embedded");
    serde_json::from_slice(a.body).expect("queries.json is JSON")
}

/// Replaces the dashboard's `$job` / `$node` placeholders as queries.js does.
fn bind(expr: &str, job: &str, node: &str) -> String {
    expr.replace("$job", &format!("{job:?}"))
        .replace("$node", &format!("{node:?}"))
}

/// name -> labels -> value, of an instant vector.
fn vector(v: Value) -> Vec<(Labels, f64)> {
    match v {
        Value::Vector(v) => v.into_iter().map(|s| (s.labels, s.v)).collect(),
        other => panic!("expected a vector, got {other:?}"),
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn every_dashboard_query_parses_and_evaluates() {
    let store = cluster();
    let engine = Engine::new(EngineOpts::default());
    let q = queries();
    let instant = q["instant"].as_object().expect("instant map");
    let range = q["range"].as_object().expect("range map");
    assert!(instant.len() >= 10 && range.len() >= 10);
    for (name, expr) in instant {
        let expr = expr.as_str().expect("string");
        assert!(
            !expr.contains('$'),
            "{name}: instant queries take no placeholder"
        );
        let (v, notes) = engine
            .instant_annotated(&store, expr, END, &|| false)
            .unwrap_or_else(|e| panic!("instant {name}: {expr}: {e}"));
        assert!(!vector(v).is_empty(), "instant {name} is empty: {expr}");
        // A panel whose query draws a warning or info (a rate over a
        // non-counter, a sort in a range) would show it in Grafana too.
        assert!(notes.is_empty(), "instant {name}: {expr}: {notes:?}");
    }
    for (name, expr) in range {
        let expr = bind(expr.as_str().expect("string"), "202", "n1");
        let (m, notes) = engine
            .range_annotated(&store, &expr, (END - 15 * 60_000, END, 5_000), &|| false)
            .unwrap_or_else(|e| panic!("range {name}: {expr}: {e}"));
        assert!(!m.is_empty(), "range {name} is empty: {expr}");
        assert!(notes.is_empty(), "range {name}: {expr}: {notes:?}");
        assert!(
            m.iter().all(|s| s.points.len() == 181),
            "range {name}: one point per step"
        );
    }
}

#[test]
fn dashboard_queries_compute_the_expected_figures() {
    let store = cluster();
    let engine = Engine::new(EngineOpts::default());
    let q = queries();
    let by = |name: &str, label: &str| -> BTreeMap<String, f64> {
        let expr = q["instant"][name].as_str().expect(name);
        vector(engine.instant(&store, expr, END).expect(name))
            .into_iter()
            .map(|(l, v)| (l.get(label).unwrap_or("").to_string(), v))
            .collect()
    };
    let cpu = by("job_cpu_used", "job_id");
    assert!(close(cpu["101"], 3.0) && close(cpu["202"], 14.0), "{cpu:?}");
    // Seen for longer than the 1m rate window: its first sample in the
    // left-open window (END - 60 s, END] is at END - 59 s.
    let seen = by("job_observed_seconds", "job_id");
    assert!(
        close(seen["101"], 59.0) && close(seen["202"], 59.0),
        "{seen:?}"
    );
    let alloc = by("job_cpus_allocated", "user");
    assert_eq!(alloc["alice"], 16.0);
    assert_eq!(alloc["dana"], 16.0);
    assert_eq!(by("job_gpus_busy", "job_id")["202"], 2.0);
    assert_eq!(by("job_gpus_allocated", "job_id")["202"], 4.0);
    assert_eq!(by("job_memory", "job_id")["202"], 60.0 * GIB);
    let rd = by("job_io_read", "job_id");
    assert!(close(rd["202"], 6000.0), "{rd:?}");
    assert_eq!(by("job_nodes", "node").len(), 2);
    let busy = by("node_cpu_busy", "node");
    assert!(
        close(busy["n1"], 10.0) && close(busy["n2"], 5.0),
        "{busy:?}"
    );

    let share = bind(
        q["range"]["job_io_share"].as_str().expect("share"),
        "202",
        "",
    );
    let m = engine
        .range(&store, &share, END - 60_000, END, 5_000)
        .expect("share");
    let last = m[0].points.last().expect("a point").v;
    assert!(close(last, 8000.0 / 9500.0), "share {last}");
    let per_node = bind(
        q["range"]["job_cpu_used_by_node"]
            .as_str()
            .expect("by node"),
        "202",
        "",
    );
    let m = engine
        .range(&store, &per_node, END - 60_000, END, 5_000)
        .expect("by node");
    assert_eq!(m.len(), 2, "one series per node of job 202");
}

// ---- Grafana --------------------------------------------------------------

fn grafana() -> J {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/grafana/canopy.json");
    let text = std::fs::read_to_string(p).expect("deploy/grafana/canopy.json");
    serde_json::from_str(&text).expect("the Grafana dashboard is JSON")
}

/// Every panel, rows' collapsed children included.
fn panels(d: &J) -> Vec<&J> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        out.push(p);
        if let Some(inner) = p["panels"].as_array() {
            out.extend(inner);
        }
    }
    out
}

/// What Grafana substitutes before sending a query.
fn grafana_bind(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$__interval", "15s")
        .replace("${job}", "202")
        .replace("$job", "202")
        .replace("${node}", "n1")
        .replace("$node", "n1")
        .replace("$user", ".*")
}

#[test]
fn every_grafana_expr_parses_and_evaluates() {
    let store = cluster();
    let engine = Engine::new(EngineOpts::default());
    let d = grafana();
    let mut n = 0;
    for p in panels(&d) {
        let title = p["title"].as_str().unwrap_or("?");
        for t in p["targets"].as_array().into_iter().flatten() {
            let raw = t["expr"].as_str().expect("every target has an expr");
            let expr = grafana_bind(raw);
            assert!(!expr.contains('$'), "{title}: unbound variable in {raw}");
            let instant = t["instant"].as_bool().unwrap_or(false);
            let notes = if instant {
                let (v, notes) = engine
                    .instant_annotated(&store, &expr, END, &|| false)
                    .unwrap_or_else(|e| panic!("{title}: {expr}: {e}"));
                assert!(!vector(v).is_empty(), "{title}: empty: {expr}");
                notes
            } else {
                let (m, notes) = engine
                    .range_annotated(&store, &expr, (END - 15 * 60_000, END, 15_000), &|| false)
                    .unwrap_or_else(|e| panic!("{title}: {expr}: {e}"));
                assert!(!m.is_empty(), "{title}: empty: {expr}");
                notes
            };
            // Grafana would show a warning or info on the panel.
            assert!(notes.is_empty(), "{title}: {expr}: {notes:?}");
            n += 1;
        }
    }
    assert!(n >= 20, "only {n} queries");
    // Template variables: label_values(selector, label).
    for v in d["templating"]["list"].as_array().expect("variables") {
        let q = v["query"]["query"]
            .as_str()
            .or_else(|| v["query"].as_str())
            .expect("a variable query");
        let q = grafana_bind(q);
        let inner = q
            .strip_prefix("label_values(")
            .and_then(|s| s.strip_suffix(')'))
            .expect("label_values(selector, label)");
        let (sel, label) = inner.rsplit_once(',').expect("selector, label");
        let m = parse_selector(sel.trim(), &EngineOpts::default())
            .unwrap_or_else(|e| panic!("{q}: {e}"));
        assert!(!m.is_empty());
        assert!(!label.trim().is_empty());
    }
}

#[test]
fn grafana_dashboard_uses_only_the_prometheus_input() {
    let d = grafana();
    let inputs = d["__inputs"].as_array().expect("__inputs");
    assert_eq!(inputs.len(), 1);
    assert_eq!(inputs[0]["name"], "DS_PROMETHEUS");
    assert_eq!(inputs[0]["pluginId"], "prometheus");
    assert_eq!(d["refresh"], "5s");
    let ds = |x: &J, what: &str| {
        assert_eq!(x["type"], "prometheus", "{what}");
        assert_eq!(x["uid"], "${DS_PROMETHEUS}", "{what}");
    };
    for p in panels(&d) {
        let title = p["title"].as_str().unwrap_or("?");
        if p["type"] == "row" {
            continue;
        }
        ds(&p["datasource"], title);
        for t in p["targets"].as_array().expect("targets") {
            ds(&t["datasource"], title);
        }
    }
    for v in d["templating"]["list"].as_array().expect("variables") {
        ds(&v["datasource"], "variable");
    }
}

//! `canopy up` as a real process: the whole fabric (gateway, a planned tree
//! of simulated nodes, this host's real node) over QUIC on loopback,
//! queried through the Prometheus HTTP API.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::{canopy_up, get, query_json, value_of, wait_for};

fn query(port: u16, q: &str) -> serde_json::Value {
    query_json(port, q)
}

fn results(v: &serde_json::Value) -> Vec<serde_json::Value> {
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

#[test]
fn canopy_up_serves_the_fabric_over_the_prometheus_api() {
    let mut fabric = canopy_up(&["--nodes", "12", "--subtrees", "4", "--tick-ms", "500"]);
    let http = fabric.http;

    let (status, body) = wait_for("the HTTP API", Duration::from_secs(60), || {
        get(http, "/api/v1/status/buildinfo")
    });
    assert_eq!(status, 200);
    assert!(body.contains("\"version\""), "{body}");

    // Every node (12 simulated + this host) reports up=1 through the tree.
    let up = wait_for("13 nodes up", Duration::from_secs(60), || {
        let v = query(http, "up");
        let r = results(&v);
        (r.len() == 13 && r.iter().all(|x| value_of(x) == 1.0)).then_some(r)
    });
    let nodes: Vec<&str> = up
        .iter()
        .filter_map(|r| r["metric"]["node"].as_str())
        .collect();
    assert_eq!(nodes.iter().filter(|n| n.starts_with("sim")).count(), 12);

    // Node CPU counters arrive from every node, and rate() sees them move.
    let busy = wait_for("CPU rates", Duration::from_secs(30), || {
        let v = query(
            http,
            "sum by (node) (rate(canopy_node_cpu_seconds_total{mode!=\"idle\"}[5s]))",
        );
        let r = results(&v);
        (r.len() == 13).then_some(r)
    });
    assert!(busy.iter().all(|r| value_of(r) >= 0.0));
    assert!(busy.iter().any(|r| value_of(r) > 0.0), "some node is busy");

    // The real node reports this host's memory.
    let mem = query(http, "canopy_node_memory_total_bytes");
    let real: Vec<_> = results(&mem)
        .into_iter()
        .filter(|r| {
            !r["metric"]["node"]
                .as_str()
                .unwrap_or("sim")
                .starts_with("sim")
        })
        .collect();
    assert_eq!(real.len(), 1, "this host's memory total");
    assert!(value_of(&real[0]) > 1e8);

    // Simulated Slurm jobs carry their attribution labels.
    let jobs = wait_for("job series", Duration::from_secs(30), || {
        let r = results(&query(
            http,
            "count by (job_id, user, account, partition) (canopy_job_cpu_seconds_total{job_id!=\"\"})",
        ));
        (!r.is_empty()).then_some(r)
    });
    for j in &jobs {
        for l in ["job_id", "user", "account", "partition"] {
            assert!(
                j["metric"][l].as_str().is_some_and(|s| !s.is_empty()),
                "{l} in {j}"
            );
        }
    }

    // Bad input gets a Prometheus-shaped error, not a crash.
    let (status, body) = get(http, "/api/v1/query?query=sum(").expect("answered");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("bad_data"), "{body}");

    // Ctrl-C shuts down cleanly.
    let pid = fabric.procs.0[0].id().to_string();
    let _ = Command::new("kill").args(["-INT", &pid]).status();
    let t0 = Instant::now();
    let exited = loop {
        if let Ok(Some(s)) = fabric.procs.0[0].try_wait() {
            break Some(s);
        }
        if t0.elapsed() > Duration::from_secs(20) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let status = exited.expect("exits after SIGINT");
    assert!(status.success(), "clean exit: {status:?}");
}

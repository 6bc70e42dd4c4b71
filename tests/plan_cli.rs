//! `canopy plan` as users run it: JSON shape, emitted configs, and a real
//! multi-process fabric started from those configs (a gateway and 16
//! `canopy node --synthetic` processes on loopback QUIC with mutual TLS).

mod support;

use std::process::Command;
use std::time::Duration;

use support::{BIN, Procs, canopy, free_port, port_base, results, wait_for};

#[test]
fn plan_json_has_the_documented_shape() {
    let out = canopy(&[
        "plan",
        "--hosts",
        "node[001-100]",
        "--subtrees",
        "8",
        "--replicas",
        "2",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let hosts = v["hosts"].as_object().expect("hosts object");
    assert_eq!(hosts.len(), 100);
    for (name, h) in hosts {
        let links = h["links"].as_array().expect("links");
        assert_eq!(links.len(), 2, "{name}: R links");
        for l in links {
            assert!(l["subtree"].as_u64().is_some_and(|s| s < 8));
            let parent = l["parent"].as_str().expect("parent");
            let backup = l["backup"].as_str().expect("backup");
            assert_ne!(parent, name);
            assert_ne!(backup, name);
            assert!(parent == "gateway" || hosts.contains_key(parent));
            assert!(backup == "gateway" || hosts.contains_key(backup));
        }
    }
    let dot = canopy(&[
        "plan",
        "--hosts",
        "n[1-9]",
        "--subtrees",
        "2",
        "--format",
        "dot",
    ]);
    assert!(dot.starts_with("digraph"), "{dot}");
}

#[test]
fn bad_hostlist_is_a_clear_error() {
    let out = Command::new(BIN)
        .args(["plan", "--hosts", "node[5-1]"])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).is_empty());
}

#[test]
fn emitted_loopback_configs_run_a_real_multi_process_fabric() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    // A base port unlikely to clash with other tests running at the same time.
    let base = port_base(0);
    canopy(&[
        "plan",
        "--hosts",
        "h[01-16]",
        "--subtrees",
        "4",
        "--replicas",
        "2",
        "--emit-configs",
        d.to_str().expect("utf-8 path"),
        "--loopback",
        "--base-port",
        &base.to_string(),
    ]);
    for f in [
        "gateway.toml",
        "h01.toml",
        "h16.toml",
        "certs/ca.pem",
        "certs/h07.pem",
        "certs/gateway.key",
    ] {
        assert!(d.join(f).exists(), "{f} written");
    }
    let node: toml::Value =
        toml::from_str(&std::fs::read_to_string(d.join("h05.toml")).expect("read")).expect("TOML");
    assert_eq!(node["uplinks"].as_array().map(Vec::len), Some(2));

    let (http, grpc) = (free_port(), free_port());
    let mut procs = Procs::default();
    let cfg = |n: &str| d.join(n).to_str().expect("utf-8").to_string();
    procs.spawn(&[
        "gateway",
        "--config",
        &cfg("gateway.toml"),
        "--http",
        &format!("127.0.0.1:{http}"),
        "--grpc",
        &format!("127.0.0.1:{grpc}"),
    ]);
    for i in 1..=16 {
        procs.spawn(&[
            "node",
            "--config",
            &cfg(&format!("h{i:02}.toml")),
            "--synthetic",
        ]);
    }
    wait_for("16 nodes up with ticks", Duration::from_secs(60), || {
        let up = results(http, "up == 1");
        let ticks = results(http, "canopy_synthetic_ticks_total");
        (up.len() == 16 && ticks.len() == 16).then_some(())
    });
}

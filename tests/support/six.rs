//! The six-host fabric (`h[01-06]`, K = 2, R = 2, from `canopy plan
//! --emit-configs --loopback`) of the bad-input and parent-stall tests: its
//! configs, certificates and gateway, a node's own counters, and the check
//! that every tick of every host arrives at the gateway.

use std::path::Path;
use std::time::Duration;

use canopy_proto::link::Identity;

use super::ticks::{tick_faults, tick_samples};
use super::{Procs, canopy, free_port, get, port_base, results, wait_for};

/// Hosts in the plan.
pub const HOSTS: usize = 6;
/// `canopy plan` arguments of the six-host fabric.
pub const PLAN: [&str; 6] = ["--hosts", "h[01-06]", "--subtrees", "2", "--replicas", "2"];
/// How long a test waits for anything before it fails.
pub const GUARD: Duration = Duration::from_secs(60);

/// Every tick of every host in `hosts` at the gateway, once, from the first
/// (value 1) through `until`: no gap, no step back (as in tree_failover.rs:
/// a repeated value is the unchanged counter at a late grid slot).
pub fn faults(http: u16, hosts: &[String], until: i64) -> Vec<String> {
    let mut out = Vec::new();
    for h in hosts {
        let s = tick_samples(http, h, "10m");
        out.extend(tick_faults(h, &s, until));
        if s.len() < 6 {
            continue;
        }
        if s.last().map_or(0, |p| p.0) < until {
            out.push(format!("{h}: no tick after {until}: it stopped arriving"));
        }
    }
    out
}

/// Waits until every host in `hosts` has a tick newer than `ts` at the gateway.
pub fn arrived_past(http: u16, hosts: &[String], ts: i64) {
    let q = format!("timestamp(canopy_synthetic_ticks_total) * 1000 > {ts}");
    wait_for(&format!("ticks of {hosts:?} past {ts}"), GUARD, || {
        let got = results(http, &q);
        hosts
            .iter()
            .all(|h| got.iter().any(|r| r["metric"]["node"].as_str() == Some(h)))
            .then_some(())
    });
}

/// Sum of the samples of `name` on a node's `/metrics` whose line
/// contains every one of `labels` (e.g. `reason="garbage"`); 0 when absent.
pub fn metric(port: u16, name: &str, labels: &[&str]) -> Option<f64> {
    let (status, text) = get(port, "/metrics")?;
    assert_eq!(status, 200);
    Some(
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| l.split(['{', ' ']).next() == Some(name))
            .filter(|l| labels.iter().all(|x| l.contains(x)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum(),
    )
}

/// Prepends top-level `lines` to a node's TOML (before any table).
pub fn add_keys(file: &Path, lines: &str) {
    let text = std::fs::read_to_string(file).expect("node config");
    std::fs::write(file, format!("{lines}\n{text}")).expect("write config");
}

/// A top-level string of a node's TOML config.
pub fn toml_value(file: &Path, key: &str) -> String {
    let text = std::fs::read_to_string(file).expect("node config");
    let v: toml::Value = toml::from_str(&text).expect("TOML");
    v[key].as_str().expect("a string").to_string()
}

/// Writes the plan's configs and certificates into `dir`, ports from
/// `port_base(spread)`.
pub fn plan_configs(dir: &Path, spread: u32) {
    let d = dir.to_str().expect("utf-8 path");
    let base = port_base(spread).to_string();
    let mut args = vec!["plan"];
    args.extend(PLAN);
    args.extend(["--emit-configs", d, "--loopback", "--base-port", &base]);
    canopy(&args);
}

/// The certificate and key `canopy plan` made for `host`.
pub fn identity(dir: &Path, host: &str) -> Identity {
    let read = |f: String| std::fs::read_to_string(dir.join("certs").join(f)).expect("cert");
    Identity {
        ca_pem: read("ca.pem".into()),
        cert_pem: read(format!("{host}.pem")),
        key_pem: read(format!("{host}.key")),
    }
}

/// Starts the gateway (HTTP port returned) into `procs`.
pub fn spawn_gateway(procs: &mut Procs, dir: &Path) -> u16 {
    let http = free_port();
    let file = dir.join("gateway.toml");
    procs.spawn(&[
        "gateway",
        "--config",
        file.to_str().expect("utf-8"),
        "--http",
        &format!("127.0.0.1:{http}"),
        "--grpc",
        &format!("127.0.0.1:{}", free_port()),
    ]);
    http
}

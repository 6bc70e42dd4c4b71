//! Application-level acks: with one replica (R = 1) nothing covers a relay
//! that dies with records it took but had not passed on, except the child
//! keeping them until acked and replaying them to its backup. A gateway and
//! 8 `canopy node --synthetic` processes from `canopy plan --replicas 1
//! --emit-configs --loopback`; the relay with the most children gets
//! `kill -9`; every survivor's `canopy_synthetic_ticks_total` at the gateway
//! must hold every tick exactly once (no gap, no duplicate).

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use support::ticks::{now_ms, relays, tick_faults, tick_samples};
use support::{Procs, canopy, free_port, get, port_base, results, value_of, wait_for};

const PLAN: [&str; 6] = ["--hosts", "h[01-08]", "--subtrees", "2", "--replicas", "1"];

#[test]
fn kill_9_of_a_relay_with_one_replica_loses_and_doubles_no_tick() {
    let (victim, children) = relays(&PLAN)
        .into_iter()
        .max_by_key(|(_, c)| c.len())
        .expect("the plan has relaying hosts");
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_str().expect("utf-8 path").to_string();
    let base = port_base(21_000).to_string();
    let mut args = vec!["plan"];
    args.extend(PLAN);
    args.extend(["--emit-configs", &d, "--loopback", "--base-port", &base]);
    canopy(&args);
    let mut procs = Procs::default();
    let mut hosts = BTreeMap::new();
    // A child of the victim serves its own /metrics.
    let watched = children[0].clone();
    let metrics_port = free_port();
    let metrics = format!("127.0.0.1:{metrics_port}");
    for i in 1..=8 {
        let h = format!("h{i:02}");
        let file = format!("{d}/{h}.toml");
        let mut a = vec!["node", "--config", &file, "--synthetic"];
        if h == watched {
            a.extend(["--metrics", &metrics]);
        }
        hosts.insert(h, procs.spawn(&a));
    }
    let http = free_port();
    let grpc = format!("127.0.0.1:{}", free_port());
    procs.spawn(&[
        "gateway",
        "--config",
        &format!("{d}/gateway.toml"),
        "--http",
        &format!("127.0.0.1:{http}"),
        "--grpc",
        &grpc,
    ]);
    wait_for("8 nodes up with ticks", Duration::from_secs(60), || {
        (results(http, "up == 1").len() == 8
            && results(http, "canopy_synthetic_ticks_total").len() == 8)
            .then_some(())
    });
    std::thread::sleep(Duration::from_secs(3));
    procs.kill9(hosts[&victim]);
    let killed_at = now_ms();
    wait_for(
        &format!("up{{node={victim}}} to drop to 0"),
        Duration::from_secs(30),
        || {
            let r = results(http, &format!("up{{node=\"{victim}\"}}"));
            (r.len() == 1 && value_of(&r[0]) == 0.0).then_some(())
        },
    );
    let past = killed_at + 5_000;
    wait_for(
        "every survivor past the kill",
        Duration::from_secs(60),
        || {
            let q = format!("timestamp(canopy_synthetic_ticks_total) * 1000 > {past}");
            (results(http, &q).len() >= 7).then_some(())
        },
    );
    let mut faults = Vec::new();
    for h in hosts.keys().filter(|h| **h != victim) {
        faults.extend(tick_faults(h, &tick_samples(http, h, "10m"), killed_at));
    }
    if !faults.is_empty() {
        // What the children say about their uplinks, to tell why.
        let q = "{__name__=~\"canopy_fabric_(buffer_dropped_records|replayed_unacked_records|segments_replayed|acked_records|bad_acks|reconnects|failovers)_total\"}";
        let said: Vec<String> = results(http, q)
            .iter()
            .filter(|r| children.iter().any(|c| r["metric"]["node"] == c.as_str()))
            .map(|r| format!("{} {}", r["metric"], value_of(r)))
            .collect();
        let gw = get(http, "/metrics").map(|(_, t)| t).unwrap_or_default();
        let gw: Vec<&str> = gw
            .lines()
            .filter(|l| {
                !l.starts_with('#')
                    && (l.contains("reject")
                        || l.contains("dup")
                        || l.contains("held")
                        || l.contains("hole"))
            })
            .collect();
        panic!(
            "{victim} relayed for {children:?} with no second replica; gaps or duplicates:\n{}\n{}\ngateway:\n{}",
            faults.join("\n"),
            said.join("\n"),
            gw.join("\n")
        );
    }
    // The victim's child acked records, replayed its unacked tail, and
    // reports its reparent time as a histogram on its own /metrics.
    let text = wait_for("the child's /metrics", Duration::from_secs(20), || {
        let (status, text) = get(metrics_port, "/metrics")?;
        (status == 200 && text.contains("canopy_fabric_reparent_seconds_count{")).then_some(text)
    });
    let value = |prefix: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert!(value("canopy_fabric_acked_records_total{") > 0.0, "{text}");
    assert!(
        value("canopy_fabric_reparent_seconds_count{") >= 1.0,
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("canopy_fabric_reparent_seconds{")
                && l.contains("quantile=\"0.99\"")
                && l.rsplit(' ')
                    .next()
                    .and_then(|v| v.parse::<f64>().ok())
                    .is_some_and(|v| v > 0.0)),
        "a p99 reparent time:\n{text}"
    );
    assert_eq!(value("canopy_fabric_bad_acks_total{"), 0.0, "{text}");
}

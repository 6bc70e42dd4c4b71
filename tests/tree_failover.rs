//! The tree loses nothing when a relaying node or a gateway dies: gateways
//! and 16 `canopy node --synthetic` processes from `canopy plan
//! --emit-configs --loopback` (K = 4 subtrees, R = 2 replicas), a `kill -9`,
//! then every survivor's `canopy_synthetic_ticks_total` at a live gateway
//! must hold every tick exactly once (no gap, no duplicate) across the kill,
//! from the very first tick (ticks made before any parent answered wait in
//! the uplinks' replay buffers).

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use support::ticks::{now_ms, relays, tick_faults, tick_samples};
use support::{Procs, canopy, free_port, get, port_base, results, value_of, wait_for};

const PLAN: [&str; 6] = ["--hosts", "h[01-16]", "--subtrees", "4", "--replicas", "2"];

/// A running loopback fabric.
struct Fabric {
    procs: Procs,
    /// HTTP port of each gateway, and its index in `procs`.
    gateways: Vec<(u16, usize)>,
    /// Index in `procs` of each host.
    hosts: BTreeMap<String, usize>,
    /// h01's own /metrics port.
    metrics_port: u16,
    _dir: tempfile::TempDir,
}

/// Starts the nodes, then, `gateway_delay` later, the gateways.
fn start(gateways: usize, spread: u32, gateway_delay: Duration) -> Fabric {
    start_with(gateways, spread, gateway_delay, &[], Duration::ZERO)
}

/// [`start`], but the hosts in `late` start `late_delay` after the gateways.
fn start_with(
    gateways: usize,
    spread: u32,
    gateway_delay: Duration,
    late: &[&str],
    late_delay: Duration,
) -> Fabric {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_str().expect("utf-8 path").to_string();
    let base = port_base(spread).to_string();
    let n = gateways.to_string();
    let mut args = vec!["plan"];
    args.extend(PLAN);
    args.extend(["--emit-configs", &d, "--loopback", "--base-port", &base]);
    args.extend(["--gateways", &n]);
    canopy(&args);
    let mut procs = Procs::default();
    let mut hosts = BTreeMap::new();
    let metrics_port = free_port();
    let metrics = format!("127.0.0.1:{metrics_port}");
    let mut spawn_node = |procs: &mut Procs, i: usize| {
        let h = format!("h{i:02}");
        let file = format!("{d}/{h}.toml");
        let mut args = vec!["node", "--config", &file, "--synthetic"];
        if i == 1 {
            args.extend(["--metrics", &metrics]);
        }
        hosts.insert(h, procs.spawn(&args));
    };
    let is_late = |i: usize| late.contains(&format!("h{i:02}").as_str());
    for i in (1..=16).filter(|&i| !is_late(i)) {
        spawn_node(&mut procs, i);
    }
    std::thread::sleep(gateway_delay);
    let mut gws = Vec::new();
    for k in 0..gateways {
        let http = free_port();
        let file = match k {
            0 => format!("{d}/gateway.toml"),
            k => format!("{d}/gateway-{k}.toml"),
        };
        let grpc = format!("127.0.0.1:{}", free_port());
        let i = procs.spawn(&[
            "gateway",
            "--config",
            &file,
            "--http",
            &format!("127.0.0.1:{http}"),
            "--grpc",
            &grpc,
        ]);
        gws.push((http, i));
    }
    if !late.is_empty() {
        std::thread::sleep(late_delay);
        for i in (1..=16).filter(|&i| is_late(i)) {
            spawn_node(&mut procs, i);
        }
    }
    for &(http, _) in &gws {
        wait_for("16 nodes up with ticks", Duration::from_secs(60), || {
            (results(http, "up == 1").len() == 16
                && results(http, "canopy_synthetic_ticks_total").len() == 16)
                .then_some(())
        });
    }
    // Let a few ticks flow on every path before any kill.
    std::thread::sleep(Duration::from_secs(3));
    Fabric {
        procs,
        gateways: gws,
        hosts,
        metrics_port,
        _dir: dir,
    }
}

/// Every tick of every host but `except`, once, from its first (value 1)
/// through `killed_at` + 4 s.
fn faults(http: u16, except: Option<&str>, killed_at: i64) -> Vec<String> {
    let mut out = Vec::new();
    for i in 1..=16 {
        let h = format!("h{i:02}");
        if Some(h.as_str()) == except {
            continue;
        }
        let s = tick_samples(http, &h, "10m");
        out.extend(tick_faults(&h, &s, killed_at));
        if s.len() < 6 {
            continue;
        }
        let last = s.last().map_or(0, |p| p.0);
        if last < killed_at + 4_000 {
            out.push(format!(
                "{h}: last tick {} ms after the kill: it stopped arriving",
                last - killed_at
            ));
        }
    }
    out
}

/// Waits until every host but `except` has a tick newer than `ts` at the
/// gateway (well past the failover window, on a loaded machine too).
fn arrived_past(http: u16, except: Option<&str>, ts: i64) {
    let q = format!("timestamp(canopy_synthetic_ticks_total) * 1000 > {ts}");
    let want = if except.is_some() { 15 } else { 16 };
    let t0 = std::time::Instant::now();
    loop {
        let got = results(http, &q);
        if got.len() >= want {
            return;
        }
        let names: Vec<&str> = got
            .iter()
            .filter_map(|r| r["metric"]["node"].as_str())
            .collect();
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "only {names:?} have ticks past {ts} at the gateway"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn kill_9_of_a_relaying_node_loses_no_tick_of_any_survivor() {
    // The relay with the most children makes the hardest case.
    let (victim, children) = relays(&PLAN)
        .into_iter()
        .max_by_key(|(_, c)| c.len())
        .expect("the plan has relaying hosts");
    let mut f = start(1, 0, Duration::ZERO);
    let http = f.gateways[0].0;
    f.procs.kill9(f.hosts[&victim]);
    let killed_at = now_ms();
    wait_for(
        &format!("up{{node={victim}}} to drop to 0"),
        Duration::from_secs(30),
        || {
            let r = results(http, &format!("up{{node=\"{victim}\"}}"));
            (r.len() == 1 && value_of(&r[0]) == 0.0).then_some(())
        },
    );
    arrived_past(http, Some(&victim), killed_at + 5_000);
    let faults = faults(http, Some(&victim), killed_at);
    assert!(
        faults.is_empty(),
        "{victim} relayed for {children:?}; gaps or duplicates:\n{}",
        faults.join("\n")
    );
    // The children say so themselves, in series sent up the tree: they
    // failed over, and their link under the victim now runs on its backup.
    for ch in &children {
        let q = format!(
            "canopy_fabric_uplink_on_backup{{node=\"{ch}\",parent=\"{victim}\"}} == 1 \
             and on(node) canopy_fabric_failovers_total{{node=\"{ch}\",parent=\"{victim}\"}} >= 1"
        );
        wait_for(
            &format!("{ch} reports its failover"),
            Duration::from_secs(30),
            || (results(http, &q).len() == 1).then_some(()),
        );
    }
    // The gateway measures how old samples are on arrival.
    let (status, text) = get(http, "/metrics").expect("gateway /metrics answers");
    assert_eq!(status, 200);
    let count: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("canopy_gateway_freshness_seconds_count "))
        .and_then(|v| v.trim().parse().ok())
        .expect("a freshness histogram on the gateway's /metrics");
    assert!(count > 100.0, "freshness counted {count} samples");
    assert!(text.contains("canopy_gateway_freshness_p99_seconds "));
    // And on its own /metrics (h01 serves one).
    let (status, text) = get(f.metrics_port, "/metrics").expect("node /metrics answers");
    assert_eq!(status, 200);
    for name in [
        "# TYPE canopy_fabric_records_sent_total counter",
        "canopy_fabric_buffer_bytes{",
        "canopy_fabric_refused_peers_total{",
    ] {
        assert!(text.contains(name), "node /metrics lacks {name}:\n{text}");
    }
}

#[test]
fn kill_9_of_one_of_two_gateways_loses_no_tick_at_the_other() {
    let mut f = start(2, 7_000, Duration::ZERO);
    let (survivor, _) = f.gateways[1];
    f.procs.kill9(f.gateways[0].1);
    let killed_at = now_ms();
    arrived_past(survivor, None, killed_at + 5_000);
    let faults = faults(survivor, None, killed_at);
    assert!(
        faults.is_empty(),
        "gaps or duplicates at the surviving gateway:\n{}",
        faults.join("\n")
    );
    assert_eq!(
        results(survivor, "up == 1").len(),
        16,
        "all 16 nodes still up"
    );
}

#[test]
fn ticks_made_before_any_parent_answers_are_buffered_and_sent() {
    // The nodes run 5 s with no gateway at all: their uplinks buffer.
    let f = start(1, 14_000, Duration::from_secs(5));
    let http = f.gateways[0].0;
    let now = now_ms();
    arrived_past(http, None, now);
    let faults = faults(http, None, now - 4_000);
    assert!(
        faults.is_empty(),
        "ticks lost before the gateway came up:\n{}",
        faults.join("\n")
    );
}

#[test]
fn a_failover_to_the_gateway_reaches_every_gateway() {
    // Tops h01 and h02 start 5 s after the rest: their children fail over
    // to their backup, the gateway. h05 then has both paths there (its own
    // link under h01, and h10's under h02, which carries its leaf link), so
    // a gateway that the backup did not reach would miss its first ticks.
    let f = start_with(
        2,
        21_000,
        Duration::ZERO,
        &["h01", "h02"],
        Duration::from_secs(5),
    );
    let now = now_ms();
    for (k, &(http, _)) in f.gateways.iter().enumerate() {
        // The late tops have had a tick or two when the fabric is up; the
        // check wants at least six samples of every host, so wait until
        // every host has ticked 6 s past now.
        arrived_past(http, None, now + 6_000);
        let faults = faults(http, None, now - 4_000);
        assert!(
            faults.is_empty(),
            "gateway {k}: ticks lost while the tops were not up:\n{}",
            faults.join("\n")
        );
    }
}

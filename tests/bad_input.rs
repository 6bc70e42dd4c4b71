//! Bad input from a peer with a valid cluster certificate, against real
//! `canopy node` processes (6 hosts, K = 2, R = 2, from `canopy plan
//! --emit-configs --loopback`): a child that floods series, garbage,
//! truncated, replayed and oversized records, and a certified peer the plan
//! does not give to the relay it dials (parents that stall or never ack are
//! in parent_stalls.rs).
//! The offending link is closed and counted on the node's `/metrics`, the
//! warning is logged once (rate-limited), and every other node's
//! `canopy_synthetic_ticks_total` keeps arriving at the gateway exactly once.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use canopy_proto::codec::{BoundsPolicy, CodecConfig, LinkEncoder, RecordSplitter, Sender};
use canopy_proto::link::{Dialer, LinkTuning, OutboundLink};
use canopy_proto::{Labels, MetricKind};
use support::six::{
    GUARD, HOSTS, add_keys, arrived_past, faults, identity, metric, plan_configs, spawn_gateway,
    toml_value,
};
use support::ticks::now_ms;
use support::{Procs, free_port, get, results, wait_for};

/// The per-child series cap given to the attacked relay (h01).
const CAP: usize = 500;

fn rejected(port: u16, reason: &str) -> f64 {
    let r = format!("reason=\"{reason}\"");
    metric(port, "canopy_fabric_rejected_frames_total", &[&r]).expect("node /metrics answers")
}

fn rejected_total(port: u16) -> f64 {
    metric(port, "canopy_fabric_rejected_frames_total", &[]).expect("node /metrics answers")
}

/// A hostile child: a sender of its own series, encoded like a node's.
struct Intruder {
    tx: Sender,
    enc: LinkEncoder,
    src: u32,
    name: String,
    defined: usize,
}

impl Intruder {
    fn new(name: &str) -> Self {
        let mut tx = Sender::new(BoundsPolicy::default());
        let src = tx.source(name, 1000);
        Self {
            tx,
            enc: LinkEncoder::new(&CodecConfig::default()).expect("encoder"),
            src,
            name: name.to_string(),
            defined: 0,
        }
    }

    /// One frame at `ts` with `more` new series on top of those defined
    /// so far; its payload (length prefix stripped).
    fn frame(&mut self, ts: i64, more: usize) -> Vec<u8> {
        self.tx.begin_tick(ts);
        self.tx.tick_source(self.src, ts);
        self.defined += more;
        for i in 0..self.defined {
            let l = Labels::metric(
                "flood_series",
                [("node", self.name.clone()), ("i", i.to_string())],
            );
            self.tx.observe(self.src, &l, MetricKind::Gauge, i as f64);
        }
        let (table, cs) = self.tx.finish_tick();
        let mut rec = Vec::new();
        self.enc.encode(table, cs, &mut rec).expect("encode");
        self.tx.end_tick();
        let mut s = RecordSplitter::new(1 << 30);
        s.push(&rec);
        s.pop().expect("valid record").expect("one whole record")
    }
}

/// Waits (generously) until the relay closed `link`.
async fn closed_by_parent(link: &OutboundLink, what: &str) {
    tokio::time::timeout(GUARD, link.closed())
        .await
        .unwrap_or_else(|_| panic!("{what}: the relay did not close the link"));
}

/// Counts the relay's warn lines about refused children in its log.
fn refusal_warnings(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .expect("node log")
        .lines()
        .filter(|l| l.contains("WARN"))
        .filter(|l| {
            l.contains("rejected a child's frame") || l.contains("refused a child's record")
        })
        .count()
}

#[test]
fn a_flooding_or_garbling_child_is_refused_and_counted_and_the_tree_is_unaffected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    plan_configs(d, 21_000);
    let h01 = d.join("h01.toml");
    add_keys(&h01, &format!("max_series_per_child = {CAP}"));
    let relay_addr: std::net::SocketAddr = toml_value(&h01, "listen").parse().expect("listen addr");
    let metrics = free_port();
    let log: PathBuf = d.join("h01.log");
    let mut procs = Procs::default();
    let hosts: Vec<String> = (1..=HOSTS).map(|i| format!("h{i:02}")).collect();
    for h in &hosts {
        let file = d.join(format!("{h}.toml"));
        let file = file.to_str().expect("utf-8");
        if h == "h01" {
            let m = format!("127.0.0.1:{metrics}");
            procs.spawn_logged(
                &["node", "--config", file, "--synthetic", "--metrics", &m],
                &log,
            );
        } else {
            procs.spawn(&["node", "--config", file, "--synthetic"]);
        }
    }
    let http = spawn_gateway(&mut procs, d);
    wait_for("6 nodes up with ticks", GUARD, || {
        (results(http, "up == 1").len() == HOSTS
            && results(http, "canopy_synthetic_ticks_total").len() == HOSTS)
            .then_some(())
    });
    let attack_start = now_ms();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    // The intruder holds a real cluster certificate (h06's) and may send
    // records up to 64 MiB (the relay accepts 16 MiB).
    let id = identity(d, "h06");
    let dialer = rt.block_on(async {
        Dialer::new(
            "127.0.0.1:0".parse().expect("addr"),
            &id,
            LinkTuning {
                max_record: 64 << 20,
                ..LinkTuning::default()
            },
        )
        .expect("dialer")
    });
    let connect = |what: &str| {
        rt.block_on(async {
            let t0 = std::time::Instant::now();
            loop {
                match dialer.connect(relay_addr, "h01").await {
                    Ok(l) => return l,
                    Err(e) => {
                        assert!(t0.elapsed() < GUARD, "{what}: cannot connect: {e}");
                        tokio::time::sleep(Duration::from_millis(250)).await;
                    }
                }
            }
        })
    };

    // 1. One frame defining 4 x CAP series.
    let link = connect("huge frame");
    let mut a = Intruder::new("intruder-a");
    let huge = a.frame(now_ms(), 4 * CAP);
    rt.block_on(async {
        link.send_record(&huge).await.expect("sent");
        closed_by_parent(&link, "huge frame").await;
    });
    wait_for("too_many_series counted (huge frame)", GUARD, || {
        (rejected(metrics, "too_many_series") >= 1.0).then_some(())
    });

    // 2. A slow flood: CAP / 10 new series per frame; refused once past CAP.
    let link = connect("slow flood");
    let mut b = Intruder::new("intruder-b");
    let mut frames = 0;
    rt.block_on(async {
        for _ in 0..40 {
            if link.is_closed() {
                break;
            }
            let f = b.frame(now_ms(), CAP / 10);
            if link.send_record(&f).await.is_err() {
                break;
            }
            frames += 1;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        closed_by_parent(&link, "slow flood").await;
    });
    assert!(
        (10..40).contains(&frames),
        "the slow flood was cut after {frames} frames of {} series",
        CAP / 10
    );
    wait_for("too_many_series counted (slow flood)", GUARD, || {
        (rejected(metrics, "too_many_series") >= 2.0).then_some(())
    });

    // 3. Garbage: bytes that are no frame at all.
    let before = rejected_total(metrics);
    let link = connect("garbage");
    let garbage: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    rt.block_on(async {
        link.send_record(&garbage).await.expect("sent");
        closed_by_parent(&link, "garbage").await;
    });
    // 4. A valid first frame cut in half.
    let link = connect("truncated");
    let whole = Intruder::new("intruder-c").frame(now_ms(), 50);
    rt.block_on(async {
        link.send_record(&whole[..whole.len() / 2])
            .await
            .expect("sent");
        closed_by_parent(&link, "truncated").await;
    });
    // 5. A valid frame, then the same frame again (a replay).
    let link = connect("replayed");
    let mut r = Intruder::new("intruder-d");
    let first = r.frame(now_ms(), 10);
    rt.block_on(async {
        link.send_record(&first).await.expect("sent");
        link.send_record(&first).await.expect("sent");
        closed_by_parent(&link, "replayed").await;
    });
    wait_for(
        "garbage, truncated and replayed frames counted",
        GUARD,
        || (rejected_total(metrics) >= before + 3.0).then_some(()),
    );
    // 6. A record over the relay's 16 MiB limit: refused on its length prefix.
    let link = connect("oversized");
    let big = vec![0u8; 17 << 20];
    rt.block_on(async {
        // The relay may close the link before all of it is sent.
        let _ = link.send_record(&big).await;
        closed_by_parent(&link, "oversized").await;
    });
    wait_for("record_too_large counted", GUARD, || {
        (rejected(metrics, "record_too_large") >= 1.0).then_some(())
    });
    let attack_end = now_ms();
    let total = rejected_total(metrics);
    let text = get(metrics, "/metrics").expect("metrics").1;
    eprintln!(
        "refusals on h01: {}",
        text.lines()
            .filter(|l| l.starts_with("canopy_fabric_rejected_frames_total"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    assert!(total >= 6.0, "{total} refusals counted");

    // Logged at warn once a minute, not once per refusal.
    let minutes = (attack_end - attack_start) / 60_000;
    let warned = refusal_warnings(&log);
    assert!(
        warned >= 1 && warned as i64 <= 1 + minutes,
        "{warned} warn lines for {total} refusals in {} s",
        (attack_end - attack_start) / 1000
    );

    // The rest of the tree never noticed.
    arrived_past(http, &hosts, attack_end + 5_000);
    let faults = faults(http, &hosts, attack_end + 4_000);
    assert!(
        faults.is_empty(),
        "ticks lost or repeated during the attack:\n{}",
        faults.join("\n")
    );
    // (The intruders' accepted frames made sources of their own: a valid
    // certificate is a child, within its cap.)
    assert_eq!(
        results(http, "up{node=~\"h0[1-6]\"} == 1").len(),
        HOSTS,
        "all 6 nodes up"
    );
    drop(procs);
}

#[test]
fn a_certified_peer_the_plan_does_not_give_to_a_relay_is_refused_and_counted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    plan_configs(d, 28_000);
    // The plan lets only h06 connect to h05 (its one child, which has no
    // children of its own); h02 holds a valid certificate but is not
    // h05's to take.
    let h05 = d.join("h05.toml");
    let v: toml::Value =
        toml::from_str(&std::fs::read_to_string(&h05).expect("config")).expect("TOML");
    let allowed: Vec<&str> = v["allowed_peers"]
        .as_array()
        .expect("the plan lists h05's peers")
        .iter()
        .filter_map(toml::Value::as_str)
        .collect();
    assert_eq!(allowed, ["h06"]);
    let relay_addr: std::net::SocketAddr = toml_value(&h05, "listen").parse().expect("listen addr");
    let metrics = free_port();
    let log: PathBuf = d.join("h05.log");
    let mut procs = Procs::default();
    let hosts: Vec<String> = (1..=HOSTS).map(|i| format!("h{i:02}")).collect();
    for h in &hosts {
        let file = d.join(format!("{h}.toml"));
        let file = file.to_str().expect("utf-8");
        if h == "h05" {
            let m = format!("127.0.0.1:{metrics}");
            procs.spawn_logged(
                &["node", "--config", file, "--synthetic", "--metrics", &m],
                &log,
            );
        } else {
            procs.spawn(&["node", "--config", file, "--synthetic"]);
        }
    }
    let http = spawn_gateway(&mut procs, d);
    wait_for("6 nodes up with ticks", GUARD, || {
        (results(http, "up == 1").len() == HOSTS
            && results(http, "canopy_synthetic_ticks_total").len() == HOSTS)
            .then_some(())
    });
    let children = metric(metrics, "canopy_fabric_children", &[]).expect("metrics");
    let attack_start = now_ms();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let dialer = rt.block_on(async {
        Dialer::new(
            "127.0.0.1:0".parse().expect("addr"),
            &identity(d, "h02"),
            LinkTuning::default(),
        )
        .expect("dialer")
    });
    for _ in 0..3 {
        let r = rt.block_on(dialer.connect(relay_addr, "h05"));
        let e = r.expect_err("h05 refuses a peer the plan does not give it");
        assert!(
            e.to_string().contains("h02 is not a planned child"),
            "the refusal says why: {e}"
        );
    }
    let stage = ["stage=\"not_in_plan\""];
    let refused = || metric(metrics, "canopy_fabric_refused_peers_total", &stage);
    wait_for("h05 to count 3 refusals", GUARD, || {
        (refused()? >= 3.0).then_some(())
    });
    assert_eq!(refused(), Some(3.0));
    assert_eq!(
        metric(metrics, "canopy_fabric_children", &[]),
        Some(children),
        "the stranger never became a child"
    );
    // Rate-limited: one warning for the three.
    let warns = std::fs::read_to_string(&log)
        .expect("node log")
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("refused a peer the plan does not give"))
        .count();
    assert_eq!(warns, 1, "one warning a minute");
    // The gateway takes only the hosts the plan sends to it: a peer with
    // the gateway's own certificate is none of them.
    let gw_addr: std::net::SocketAddr = toml_value(&d.join("gateway.toml"), "listen")
        .parse()
        .expect("gateway addr");
    let stranger = rt.block_on(async {
        Dialer::new(
            "127.0.0.1:0".parse().expect("addr"),
            &identity(d, "gateway"),
            LinkTuning::default(),
        )
        .expect("dialer")
    });
    let r = rt.block_on(stranger.connect(gw_addr, "gateway"));
    assert!(r.is_err(), "the gateway refuses a peer outside the plan");
    let gw_refused = || metric(http, "canopy_gateway_peers_not_in_plan_total", &[]);
    wait_for("the gateway to count the refusal", GUARD, || {
        (gw_refused()? >= 1.0).then_some(())
    });
    assert_eq!(gw_refused(), Some(1.0));
    // Planned children (h06 on h05, everyone else) are unaffected: every
    // tick from the first, through 6 s after the refusals.
    let until = now_ms() + 6_000;
    arrived_past(http, &hosts, until);
    let faults = faults(http, &hosts, until - 1_000);
    assert!(
        faults.is_empty(),
        "ticks since the refusals at {attack_start}:\n{}",
        faults.join("\n")
    );
    assert_eq!(
        metric(
            metrics,
            "canopy_fabric_uplink_on_backup",
            &["parent=\"h06\""]
        ),
        Some(0.0),
        "h05's own planned links are untouched"
    );
    drop(procs);
}

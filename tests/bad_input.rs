//! Bad input from a peer with a valid cluster certificate, against real
//! `canopy node` processes (6 hosts, K = 2, R = 2, from `canopy plan
//! --emit-configs --loopback`): a child that floods series, garbage,
//! truncated, replayed and oversized records, a parent that stalls, and
//! one that reads but never acknowledges.
//! The offending link is closed and counted on the node's `/metrics`, the
//! warning is logged once (rate-limited), and every other node's
//! `canopy_synthetic_ticks_total` keeps arriving at the gateway exactly once.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use canopy_proto::codec::{BoundsPolicy, CodecConfig, LinkEncoder, RecordSplitter, Sender};
use canopy_proto::link::{Control, Dialer, Identity, LinkTuning, Listener, OutboundLink};
use canopy_proto::{Labels, MetricKind};
use support::ticks::{now_ms, tick_faults, tick_samples};
use support::{Procs, canopy, free_port, get, port_base, results, wait_for};

const HOSTS: usize = 6;
const PLAN: [&str; 6] = ["--hosts", "h[01-06]", "--subtrees", "2", "--replicas", "2"];
/// The per-child series cap given to the attacked relay (h01).
const CAP: usize = 500;
const GUARD: Duration = Duration::from_secs(60);

/// Every tick of every host in `hosts` at the gateway, once, from the first
/// (value 1) through `until`: no gap, no step back (as in tree_failover.rs:
/// a repeated value is the unchanged counter at a late grid slot).
fn faults(http: u16, hosts: &[String], until: i64) -> Vec<String> {
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
fn arrived_past(http: u16, hosts: &[String], ts: i64) {
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
fn metric(port: u16, name: &str, labels: &[&str]) -> Option<f64> {
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

fn rejected(port: u16, reason: &str) -> f64 {
    let r = format!("reason=\"{reason}\"");
    metric(port, "canopy_fabric_rejected_frames_total", &[&r]).expect("node /metrics answers")
}

fn rejected_total(port: u16) -> f64 {
    metric(port, "canopy_fabric_rejected_frames_total", &[]).expect("node /metrics answers")
}

/// Prepends top-level `lines` to a node's TOML (before any table).
fn add_keys(file: &Path, lines: &str) {
    let text = std::fs::read_to_string(file).expect("node config");
    std::fs::write(file, format!("{lines}\n{text}")).expect("write config");
}

fn toml_value(file: &Path, key: &str) -> String {
    let text = std::fs::read_to_string(file).expect("node config");
    let v: toml::Value = toml::from_str(&text).expect("TOML");
    v[key].as_str().expect("a string").to_string()
}

fn plan_configs(dir: &Path, spread: u32) {
    let d = dir.to_str().expect("utf-8 path");
    let base = port_base(spread).to_string();
    let mut args = vec!["plan"];
    args.extend(PLAN);
    args.extend(["--emit-configs", d, "--loopback", "--base-port", &base]);
    canopy(&args);
}

fn identity(dir: &Path, host: &str) -> Identity {
    let read = |f: String| std::fs::read_to_string(dir.join("certs").join(f)).expect("cert");
    Identity {
        ca_pem: read("ca.pem".into()),
        cert_pem: read(format!("{host}.pem")),
        key_pem: read(format!("{host}.key")),
    }
}

/// Starts the gateway (HTTP port returned) into `procs`.
fn spawn_gateway(procs: &mut Procs, dir: &Path) -> u16 {
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
fn a_child_leaves_a_stalled_parent_for_its_backup_with_a_bounded_buffer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    plan_configs(d, 24_000);
    // h05's interior link goes to h01 (backup: the gateway). h01 is a fake
    // here: a listener with h01's certificate and a 1 KiB receive window
    // (less than h05's first keyframe) that accepts the link and never
    // reads it.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let fake = rt.block_on(async {
        Listener::bind(
            "127.0.0.1:0".parse().expect("addr"),
            &identity(d, "h01"),
            LinkTuning {
                stream_receive_window: 1024,
                receive_window: 1024,
                ..LinkTuning::default()
            },
        )
        .expect("fake parent binds")
    });
    let fake_addr = fake.local_addr();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let held = accepted.clone();
    rt.spawn(async move {
        let mut links = Vec::new();
        while let Some(l) = fake.accept().await {
            if let Ok(l) = l {
                held.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                links.push(l); // held open, never read
            }
        }
    });
    let h05 = d.join("h05.toml");
    let text = std::fs::read_to_string(&h05).expect("config");
    let h01_addr = toml_value(&d.join("h01.toml"), "listen");
    let buffer_max: usize = 256 * 1024;
    let text = text
        .replace(
            &format!("parent_addr = \"{h01_addr}\""),
            &format!("parent_addr = \"{fake_addr}\""),
        )
        .replace(
            "buffer_bytes = 16777216",
            &format!("buffer_bytes = {buffer_max}"),
        );
    assert!(
        text.contains(&fake_addr.to_string()),
        "h05 points at the fake"
    );
    std::fs::write(&h05, text).expect("write config");
    let metrics = free_port();
    let mut procs = Procs::default();
    let m = format!("127.0.0.1:{metrics}");
    let f = h05.to_str().expect("utf-8");
    procs.spawn(&["node", "--config", f, "--synthetic", "--metrics", &m]);
    let http = spawn_gateway(&mut procs, d);
    let mut max_buffer = 0.0f64;
    let t0 = now_ms();
    let on_h01 = ["parent=\"h01\""];
    wait_for("h05 to count a stall", Duration::from_secs(120), || {
        let b = metric(metrics, "canopy_fabric_buffer_bytes", &on_h01)?;
        max_buffer = max_buffer.max(b);
        let n = metric(metrics, "canopy_fabric_stalls_total", &on_h01)?;
        if now_ms() - t0 > 100_000 {
            let text = get(metrics, "/metrics")?.1;
            let l: Vec<&str> = text.lines().filter(|l| l.contains("h01")).collect();
            eprintln!("h05 /metrics after 100 s:\n{}", l.join("\n"));
        }
        (n >= 1.0).then_some(())
    });
    let stalled_after = now_ms() - t0;
    assert!(
        accepted.load(std::sync::atomic::Ordering::Relaxed) >= 1,
        "the fake parent took the link"
    );
    // On the backup (the real gateway), h05's ticks arrive, from the first.
    let q = "canopy_fabric_uplink_on_backup{node=\"h05\",parent=\"h01\"} == 1";
    wait_for("h05 reports it runs on its backup", GUARD, || {
        (results(http, q).len() == 1).then_some(())
    });
    let now = now_ms();
    arrived_past(http, &["h05".to_string()], now);
    let hosts = ["h05".to_string()];
    let faults = faults(http, &hosts, now - 1_000);
    eprintln!("stall counted {stalled_after} ms after start; buffer peaked at {max_buffer} B");
    assert!(
        faults.is_empty(),
        "h05 via its backup:\n{}",
        faults.join("\n")
    );
    assert!(
        max_buffer <= buffer_max as f64,
        "outbox held {max_buffer} B, bound {buffer_max}"
    );
    drop(procs);
}

/// A fake h01 with h01's certificate and the default windows: it reads
/// every record of every link (counted in `read`) and discards it, without
/// an ack until `acking` is set (then it acks each record).
fn fake_parent(
    rt: &tokio::runtime::Runtime,
    d: &Path,
    read: Arc<AtomicU64>,
    acking: Arc<AtomicBool>,
) -> std::net::SocketAddr {
    let fake = rt.block_on(async {
        Listener::bind(
            "127.0.0.1:0".parse().expect("addr"),
            &identity(d, "h01"),
            LinkTuning::default(),
        )
        .expect("fake parent binds")
    });
    let addr = fake.local_addr();
    rt.spawn(async move {
        while let Some(l) = fake.accept().await {
            let Ok(l) = l else { continue };
            let (read, acking) = (read.clone(), acking.clone());
            tokio::spawn(async move {
                let mut n = 0;
                while let Ok(Some(_)) = l.recv_record().await {
                    n += 1;
                    read.fetch_add(1, Ordering::Relaxed);
                    if acking.load(Ordering::Relaxed)
                        && l.send_control(&Control::Ack(n).encode()).await.is_err()
                    {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// Points h05's interior link (parent h01) at `fake`; h05's other link's
/// parents (h06, h02) do not run in these tests, so this link carries all
/// of h05's ticks. Returns the link's planned ack timeout, ms.
fn h05_to_fake(d: &Path, fake: std::net::SocketAddr) -> i64 {
    let h05 = d.join("h05.toml");
    let text = std::fs::read_to_string(&h05).expect("config");
    let h01_addr = toml_value(&d.join("h01.toml"), "listen");
    let text = text.replace(
        &format!("parent_addr = \"{h01_addr}\""),
        &format!("parent_addr = \"{fake}\""),
    );
    std::fs::write(&h05, &text).expect("write config");
    let v: toml::Value = toml::from_str(&text).expect("TOML");
    assert_eq!(
        v["uplinks"][0]["parent_addr"].as_str(),
        Some(&*fake.to_string())
    );
    v["uplinks"][0]["ack_timeout_ms"]
        .as_integer()
        .expect("the plan gives the link an ack timeout")
}

#[test]
fn a_child_leaves_a_parent_that_never_acks_and_returns_once_it_acks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    plan_configs(d, 26_000);
    // h05's interior link goes to h01 (backup: the gateway); h01 is a fake
    // that reads and discards without an ack until told to ack.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let read = Arc::new(AtomicU64::new(0));
    let acking = Arc::new(AtomicBool::new(false));
    let fake_addr = fake_parent(&rt, d, read.clone(), acking.clone());
    let ack_timeout = h05_to_fake(d, fake_addr);
    let h05 = d.join("h05.toml");
    let metrics = free_port();
    let mut procs = Procs::default();
    let m = format!("127.0.0.1:{metrics}");
    let f = h05.to_str().expect("utf-8");
    procs.spawn(&["node", "--config", f, "--synthetic", "--metrics", &m]);
    let http = spawn_gateway(&mut procs, d);
    let on_h01 = ["parent=\"h01\"", "reason=\"no_ack\""];
    let no_ack = || metric(metrics, "canopy_fabric_stalls_total", &on_h01);
    let t0 = now_ms();
    wait_for(
        "h05 to count an ack stall",
        Duration::from_secs(120),
        || (no_ack()? >= 1.0).then_some(()),
    );
    let stalled_after = now_ms() - t0;
    assert!(
        read.load(Ordering::Relaxed) >= 3,
        "the fake parent read h05's records"
    );
    assert!(
        stalled_after >= ack_timeout,
        "left after {stalled_after} ms, before the {ack_timeout} ms ack timeout"
    );
    assert!(
        stalled_after <= ack_timeout + 60_000,
        "left after {stalled_after} ms: not bounded by the {ack_timeout} ms ack timeout"
    );
    let q = "canopy_fabric_uplink_on_backup{node=\"h05\",parent=\"h01\"} == 1";
    wait_for("h05 reports it runs on its backup", GUARD, || {
        (results(http, q).len() == 1).then_some(())
    });
    // Everything the fake discarded was replayed to the backup: every
    // tick from the first, no gap.
    let now = now_ms();
    arrived_past(http, &["h05".to_string()], now);
    let hosts = ["h05".to_string()];
    let faults = faults(http, &hosts, now - 1_000);
    assert!(
        faults.is_empty(),
        "h05 via its backup:\n{}",
        faults.join("\n")
    );
    // The primary acks again: h05 returns after its hold-down and stays.
    acking.store(true, Ordering::Relaxed);
    let back = ["parent=\"h01\""];
    wait_for("h05 back on its primary", Duration::from_secs(120), || {
        let b = metric(metrics, "canopy_fabric_uplink_on_backup", &back)?;
        let c = metric(metrics, "canopy_fabric_uplink_connected", &back)?;
        (b == 0.0 && c == 1.0).then_some(())
    });
    let acked = metric(metrics, "canopy_fabric_acked_records_total", &back).expect("metrics");
    let settle = Duration::from_millis(u64::try_from(ack_timeout).expect("positive") + 3_000);
    std::thread::sleep(settle);
    assert_eq!(no_ack(), Some(1.0), "an acking primary is not left again");
    assert_eq!(
        metric(metrics, "canopy_fabric_uplink_on_backup", &back),
        Some(0.0)
    );
    let later = metric(metrics, "canopy_fabric_acked_records_total", &back).expect("metrics");
    assert!(
        later > acked,
        "the primary's acks release records ({acked} -> {later})"
    );
    eprintln!("ack stall counted {stalled_after} ms after start (ack timeout {ack_timeout} ms)");
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

#[test]
fn a_segment_replayed_to_a_parent_that_never_acks_stays_buffered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    plan_configs(d, 29_000);
    // h05 runs before any gateway, with a fake h01 that never acks: the
    // live link stalls, its tail becomes a segment that replays to h01
    // again after the hold-down, and is not acked there either. Only then
    // does the gateway (h05's backup) start: it must get every tick.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let read = Arc::new(AtomicU64::new(0));
    let fake_addr = fake_parent(&rt, d, read.clone(), Arc::new(AtomicBool::new(false)));
    let ack_timeout = h05_to_fake(d, fake_addr);
    let h05 = d.join("h05.toml");
    let metrics = free_port();
    let mut procs = Procs::default();
    let m = format!("127.0.0.1:{metrics}");
    let f = h05.to_str().expect("utf-8");
    procs.spawn(&["node", "--config", f, "--synthetic", "--metrics", &m]);
    let on_h01 = ["parent=\"h01\"", "reason=\"no_ack\""];
    let no_ack = || metric(metrics, "canopy_fabric_stalls_total", &on_h01);
    let wait = Duration::from_millis(u64::try_from(ack_timeout).expect("positive") * 8);
    wait_for("the live link and a replay to stall on h01", wait, || {
        (no_ack()? >= 2.0).then_some(())
    });
    let replayed = metric(
        metrics,
        "canopy_fabric_segments_replayed_total",
        &["parent=\"h01\""],
    );
    assert_eq!(replayed, Some(0.0), "an unacked segment is not done");
    assert!(
        metric(metrics, "canopy_fabric_buffer_records", &["parent=\"h01\""]).unwrap_or(0.0) >= 10.0,
        "h05 still holds what h01 discarded"
    );
    let http = spawn_gateway(&mut procs, d);
    let until = now_ms() + 3_000;
    arrived_past(http, &["h05".to_string()], until);
    let faults = faults(http, &["h05".to_string()], until - 1_000);
    assert!(
        faults.is_empty(),
        "h05 after its replays:\n{}",
        faults.join("\n")
    );
    assert!(read.load(Ordering::Relaxed) >= 10, "h01 read the replay");
    drop(procs);
}

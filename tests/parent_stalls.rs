//! A parent that stalls, against real `canopy node` processes (6 hosts,
//! K = 2, R = 2): one that accepts the link and never reads it, one that
//! reads but never acknowledges, and a replayed segment that is never
//! acknowledged. The child leaves it for its backup within a bounded
//! buffer, and its `canopy_synthetic_ticks_total` reaches the gateway from
//! the first tick with no gap.

mod support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use canopy_proto::link::{Control, LinkTuning, Listener};
use support::six::{
    GUARD, arrived_past, faults, identity, metric, plan_configs, spawn_gateway, toml_value,
};
use support::ticks::now_ms;
use support::{Procs, free_port, get, results, wait_for};

/// The runtime the fake parents run on, beside the test's blocking code.
fn fake_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Starts h05 (synthetic ticks) from its config in `d`; returns the port
/// of its own `/metrics`.
fn spawn_h05(procs: &mut Procs, d: &Path) -> u16 {
    let metrics = free_port();
    let m = format!("127.0.0.1:{metrics}");
    let h05 = d.join("h05.toml");
    let f = h05.to_str().expect("utf-8");
    procs.spawn(&["node", "--config", f, "--synthetic", "--metrics", &m]);
    metrics
}

/// Waits until h05 reports it runs on its backup (the real gateway) and
/// its ticks arrive past now; returns its faults at the gateway (every
/// tick from the first, no gap).
fn h05_faults_on_backup(http: u16) -> Vec<String> {
    let q = "canopy_fabric_uplink_on_backup{node=\"h05\",parent=\"h01\"} == 1";
    wait_for("h05 reports it runs on its backup", GUARD, || {
        (results(http, q).len() == 1).then_some(())
    });
    let now = now_ms();
    arrived_past(http, &["h05".to_string()], now);
    faults(http, &["h05".to_string()], now - 1_000)
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
    let rt = fake_runtime();
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
    let mut procs = Procs::default();
    let metrics = spawn_h05(&mut procs, d);
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
    let faults = h05_faults_on_backup(http);
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
    let rt = fake_runtime();
    let read = Arc::new(AtomicU64::new(0));
    let acking = Arc::new(AtomicBool::new(false));
    let fake_addr = fake_parent(&rt, d, read.clone(), acking.clone());
    let ack_timeout = h05_to_fake(d, fake_addr);
    let mut procs = Procs::default();
    let metrics = spawn_h05(&mut procs, d);
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
    // Everything the fake discarded was replayed to the backup: every
    // tick from the first, no gap.
    let faults = h05_faults_on_backup(http);
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
fn a_segment_replayed_to_a_parent_that_never_acks_stays_buffered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    plan_configs(d, 29_000);
    // h05 runs before any gateway, with a fake h01 that never acks: the
    // live link stalls, its tail becomes a segment that replays to h01
    // again after the hold-down, and is not acked there either. Only then
    // does the gateway (h05's backup) start: it must get every tick.
    let rt = fake_runtime();
    let read = Arc::new(AtomicU64::new(0));
    let fake_addr = fake_parent(&rt, d, read.clone(), Arc::new(AtomicBool::new(false)));
    let ack_timeout = h05_to_fake(d, fake_addr);
    let mut procs = Procs::default();
    let metrics = spawn_h05(&mut procs, d);
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

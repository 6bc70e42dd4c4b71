//! Durability as users would test it: a real `canopy gateway --data-dir`
//! fed by `canopy node --synthetic` processes over loopback QUIC, killed
//! with SIGKILL, restarted on the same directory: every tick of
//! `canopy_synthetic_ticks_total` that was queryable before the kill is
//! still there afterwards. Also: standalone `canopy gateway --http` serves
//! the API with no config.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use support::{BIN, Procs, free_port, get, port_base, urlencode, wait_for};

/// Every raw sample (node, ts_ms) -> value of the synthetic tick counter
/// in the 5 minutes up to `at_ms` (a range selector: no lookback filling).
fn ticks(port: u16, at_ms: i64) -> Option<BTreeMap<(String, i64), String>> {
    let (status, body) = get(
        port,
        &format!(
            "/api/v1/query?query={}&time={}",
            urlencode("canopy_synthetic_ticks_total[5m]"),
            at_ms as f64 / 1000.0
        ),
    )?;
    if status != 200 {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    let mut out = BTreeMap::new();
    for s in v["data"]["result"].as_array()? {
        let node = s["metric"]["node"].as_str().unwrap_or("").to_string();
        for p in s["values"].as_array()? {
            let t = (p[0].as_f64()? * 1000.0).round() as i64;
            out.insert((node.clone(), t), p[1].as_str()?.to_string());
        }
    }
    Some(out)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .expect("clock after 1970")
}

/// `canopy gateway` serving HTTP on `http` with its log under `data`, from
/// the config `cfg` or standalone (no tree) without one.
fn gateway_args(cfg: Option<&Path>, http: u16, data: &Path) -> Vec<String> {
    let mut args = vec!["gateway".to_string()];
    if let Some(cfg) = cfg {
        args.extend(["--config".into(), cfg.to_str().expect("utf-8").into()]);
    }
    args.extend([
        "--http".into(),
        format!("127.0.0.1:{http}"),
        "--grpc".into(),
        format!("127.0.0.1:{}", free_port()),
        "--data-dir".into(),
        data.to_str().expect("utf-8").into(),
    ]);
    args
}

#[test]
fn kill_9_then_restart_loses_no_queryable_tick() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let base = port_base(7_919);
    let out = Command::new(BIN)
        .args([
            "plan",
            "--hosts",
            "w[1-4]",
            "--subtrees",
            "2",
            "--replicas",
            "2",
            "--emit-configs",
            d.to_str().expect("utf-8"),
            "--loopback",
            "--base-port",
            &base.to_string(),
        ])
        .output()
        .expect("canopy plan");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let data = d.join("data");
    let http = free_port();
    let gw_args = gateway_args(Some(&d.join("gateway.toml")), http, &data);
    let gw_args: Vec<&str> = gw_args.iter().map(String::as_str).collect();
    let mut procs = Procs::default();
    let gw = procs.spawn(&gw_args);
    for i in 1..=4 {
        let cfg = d.join(format!("w{i}.toml"));
        procs.spawn(&[
            "node",
            "--config",
            cfg.to_str().expect("utf-8"),
            "--synthetic",
        ]);
    }
    wait_for(
        "4 nodes with 5 stored ticks each",
        Duration::from_secs(60),
        || {
            let got = ticks(http, now_ms())?;
            let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
            for (n, _) in got.keys() {
                *per_node.entry(n.as_str()).or_default() += 1;
            }
            (per_node.len() == 4 && per_node.values().all(|&c| c >= 5)).then_some(())
        },
    );
    // What the API answered last before the kill, as raw samples up to now.
    let t_kill = now_ms();
    let before = ticks(http, t_kill).expect("query before the kill");
    procs.kill9(gw);
    let files: Vec<String> = std::fs::read_dir(&data)
        .expect("data dir exists")
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(String::from))
        .collect();
    assert!(
        files.iter().any(|n| n.starts_with("wal-")),
        "a WAL segment on disk: {files:?}"
    );
    // Restart on the same directory; the nodes keep running and reconnect.
    procs.spawn(&gw_args);
    let after = wait_for(
        "the restarted gateway answers",
        Duration::from_secs(30),
        || ticks(http, t_kill).filter(|a| !a.is_empty()),
    );
    let lost: Vec<_> = before
        .iter()
        .filter(|(k, v)| after.get(*k) != Some(*v))
        .collect();
    assert!(
        lost.is_empty(),
        "{} of {} ticks queryable before the kill are gone or changed after the restart, e.g. {:?}",
        lost.len(),
        before.len(),
        &lost[..lost.len().min(10)]
    );
    assert!(before.len() >= 20, "{} ticks compared", before.len());
    // The restarted gateway keeps ingesting from the running nodes.
    wait_for(
        "new ticks after the restart",
        Duration::from_secs(60),
        || {
            let newer = ticks(http, now_ms())?;
            newer.keys().any(|(_, t)| *t > t_kill + 2_000).then_some(())
        },
    );
}

#[test]
fn standalone_gateway_serves_the_api_without_a_config() {
    let http = free_port();
    let mut procs = Procs::default();
    procs.spawn(&[
        "gateway",
        "--http",
        &format!("127.0.0.1:{http}"),
        "--grpc",
        &format!("127.0.0.1:{}", free_port()),
    ]);
    let (status, body) = wait_for("the gateway answers", Duration::from_secs(20), || {
        get(http, "/api/v1/query?query=1%2B1")
    });
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(v["data"]["result"][1], "2");
    let (status, body) = get(http, "/api/v1/status/buildinfo").expect("buildinfo");
    assert_eq!(status, 200, "{body}");
    let body = get_text(http, "/metrics").expect("metrics");
    assert!(body.contains("\ncanopy_gateway_series 0\n"), "{body}");
    assert!(
        body.contains("# TYPE canopy_gateway_http_requests_total counter"),
        "{body}"
    );
}

/// GET `path`: the whole response (headers and body) as text.
fn get_text(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    buf.starts_with("HTTP/1.1 200").then_some(buf)
}

#[test]
fn bad_retention_and_fsync_are_clear_errors() {
    for (flag, value, expect) in [
        ("--retention", "30s", "shorter than the 1m minimum"),
        ("--retention", "2 hours", "unit must be s, m, h or d"),
        ("--retention", "h", "not a duration like 2h"),
        (
            "--fsync",
            "sometimes",
            "expected \"always\", \"tick\" or \"never\"",
        ),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = Command::new(BIN)
            .args([
                "gateway",
                "--http",
                &format!("127.0.0.1:{}", free_port()),
                "--grpc",
                &format!("127.0.0.1:{}", free_port()),
                "--data-dir",
                dir.path().to_str().expect("utf-8"),
                flag,
                value,
            ])
            .output()
            .expect("canopy gateway runs");
        assert!(!out.status.success(), "{flag} {value} refused");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expect), "{flag} {value}: {err}");
    }
}

/// `count_over_time` and `sum_over_time` of every `rw_durable` series over
/// 2 h at `at_ms`, by node (None until the gateway answers).
fn durable_counts(port: u16, at_ms: i64) -> Option<BTreeMap<String, (String, String)>> {
    let q = |expr: &str| -> Option<BTreeMap<String, String>> {
        let (status, body) = get(
            port,
            &format!(
                "/api/v1/query?query={}&time={}",
                urlencode(expr),
                at_ms as f64 / 1000.0
            ),
        )?;
        if status != 200 {
            return None;
        }
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        v["data"]["result"]
            .as_array()?
            .iter()
            .map(|s| {
                Some((
                    s["metric"]["node"].as_str()?.to_string(),
                    s["value"][1].as_str()?.to_string(),
                ))
            })
            .collect()
    };
    let counts = q("count_over_time(rw_durable[2h])")?;
    let sums = q("sum_over_time(rw_durable[2h])")?;
    Some(
        counts
            .into_iter()
            .map(|(n, c)| {
                let s = sums.get(&n).cloned().unwrap_or_default();
                (n, (c, s))
            })
            .collect(),
    )
}

/// remote_write into `canopy gateway --data-dir`, bodies small and one over
/// the receiver's 64 k-sample apply slice: every sample acknowledged with a
/// 204 before a SIGKILL is there after the restart.
#[test]
fn remote_write_acknowledged_before_kill_9_is_there_after_restart() {
    use canopy_gateway::remote_write::wire::{encode, request_of};
    use canopy_proto::model::Labels;
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let http = free_port();
    let args = gateway_args(None, http, &data);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut procs = Procs::default();
    let gw = procs.spawn(&args);
    wait_for("the gateway answers", Duration::from_secs(60), || {
        get(http, "/api/v1/status/buildinfo").filter(|(st, _)| *st == 200)
    });
    let series: Vec<Labels> = (0..20)
        .map(|i| Labels::metric("rw_durable", [("node", format!("n{i:02}").as_str())]))
        .collect();
    let t0 = now_ms() - 3_400_000;
    // Steps [from, to) of every series: value = series * 10^5 + step.
    let body = |from: i64, to: i64| {
        let samples: Vec<(&Labels, i64, f64)> = series
            .iter()
            .enumerate()
            .flat_map(|(i, l)| {
                (from..to).map(move |k| (l, t0 + k * 1000, (i as i64 * 100_000 + k) as f64))
            })
            .collect();
        encode(&request_of(samples)).expect("encode")
    };
    // 3 steps, then 3,300 (66,000 samples: two apply slices), then 1 each.
    let mut spans = vec![(0, 3), (3, 3303)];
    spans.extend((3303..3308).map(|k| (k, k + 1)));
    for &(from, to) in &spans {
        let (st, msg) = support::request(
            http,
            "POST",
            "/api/v1/write",
            &[
                ("Content-Type", "application/x-protobuf"),
                ("Content-Encoding", "snappy"),
            ],
            &body(from, to),
        )
        .expect("answered");
        assert_eq!(st, 204, "steps {from}..{to}: {msg}");
    }
    // 3,308 samples a series sealed 27 chunks each into the cold tier.
    let cold = |what: &str| {
        let body = get_text(http, "/metrics").expect("metrics");
        metric_value(&body, &format!("canopy_gateway_cold_{what}"))
    };
    assert!(cold("chunks_written_total") >= 20.0 * 27.0);
    assert_eq!(cold("write_errors_total"), 0.0);
    assert!(cold("bytes") > 0.0 && cold("files") >= 1.0);
    procs.kill9(gw);
    procs.spawn(&args);
    let at = t0 + 3308 * 1000;
    let after = wait_for(
        "the restarted gateway answers",
        Duration::from_secs(60),
        || durable_counts(http, at).filter(|m| !m.is_empty()),
    );
    assert_eq!(after.len(), 20, "{after:?}");
    // The restart wrote the loaded chunks to a fresh cold tier.
    assert!(cold("chunks_written_total") >= 20.0 * 27.0);
    let files = std::fs::read_dir(data.join("cold"))
        .expect("cold dir")
        .count();
    assert_eq!(files as f64, cold("files"));
    for (i, (node, (count, sum))) in after.iter().enumerate() {
        let want_sum: i64 = (0..3308).map(|k| i as i64 * 100_000 + k).sum();
        assert_eq!(node, &format!("n{i:02}"));
        assert_eq!(count, "3308", "{node}");
        assert_eq!(sum.parse::<f64>().ok(), Some(want_sum as f64), "{node}");
    }
}

/// The value of the unlabelled sample `name` in Prometheus text `body`.
fn metric_value(body: &str, name: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} missing from /metrics"))
}

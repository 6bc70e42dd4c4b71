//! Prometheus remote_write v1 against real TSDBs, both directions.
//!
//! Out: `canopy up --remote-write URL --remote-write URL` feeds a real
//! Prometheus 2.42 (`--web.enable-remote-write-receiver`) and a real
//! VictoriaMetrics; the same series with the same values must land there as
//! Canopy's own PromQL API answers at the same instant.
//!
//! In: `canopy gateway` standalone takes snappy-protobuf bodies (from this
//! test, and from a real Prometheus scraping itself) and answers them back
//! through PromQL; bad bodies are a 400 with a clear reason while the
//! gateway keeps serving.
//!
//! Needs `prometheus` and `victoria-metrics` on PATH: `.ci/install-tsdbs.sh`.

mod support;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use canopy_gateway::remote_write::wire::{encode, request_of};
use canopy_proto::model::Labels;
use support::{Procs, canopy_up, free_port, get, urlencode, wait_for};

/// An external server, killed and reaped on drop.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Fails with the set-up step when `prog` is not installed.
fn need(prog: &str) {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()));
    assert!(
        found,
        "`{prog}` is not installed: run .ci/install-tsdbs.sh \
         (apt-get install -y --no-install-recommends prometheus victoria-metrics)"
    );
}

fn spawn_logged(prog: &str, args: &[String], log: &Path) -> Server {
    let f = std::fs::File::create(log).expect("log file");
    let child = Command::new(prog)
        .args(args)
        .stdout(Stdio::from(f.try_clone().expect("log handle")))
        .stderr(Stdio::from(f))
        .spawn()
        .unwrap_or_else(|e| panic!("{prog} starts: {e}"));
    Server(child)
}

/// A real Prometheus on a free port with its own config and data dir.
fn prometheus(dir: &Path, config: &str) -> (Server, u16) {
    let port = free_port();
    let cfg = dir.join("prometheus.yml");
    std::fs::write(&cfg, config.replace("SELF", &port.to_string())).expect("config");
    let args = vec![
        format!("--config.file={}", cfg.display()),
        format!("--storage.tsdb.path={}", dir.join("prom-data").display()),
        format!("--web.listen-address=127.0.0.1:{port}"),
        "--web.enable-remote-write-receiver".into(),
        "--log.level=warn".into(),
    ];
    let s = spawn_logged("prometheus", &args, &dir.join("prometheus.log"));
    wait_for("Prometheus ready", Duration::from_secs(60), || {
        get(port, "/-/ready").filter(|(st, _)| *st == 200)
    });
    (s, port)
}

/// A real VictoriaMetrics on a free port with its own data dir.
fn victoria(dir: &Path) -> (Server, u16) {
    let port = free_port();
    let args = vec![
        format!("-httpListenAddr=127.0.0.1:{port}"),
        format!("-storageDataPath={}", dir.join("vm-data").display()),
        "-search.latencyOffset=0s".into(),
        "-loggerLevel=WARN".into(),
    ];
    let s = spawn_logged("victoria-metrics", &args, &dir.join("victoria.log"));
    wait_for("VictoriaMetrics ready", Duration::from_secs(60), || {
        get(port, "/health").filter(|(st, _)| *st == 200)
    });
    (s, port)
}

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64()
}

/// Instant query `q` at `t` (seconds): label set ->
/// value; None when the server does not answer (yet) or refuses.
fn try_at(port: u16, q: &str, t: f64) -> Option<BTreeMap<String, f64>> {
    let path = format!("/api/v1/query?query={}&time={t:.3}", urlencode(q));
    let (_, body) = get(port, &path).filter(|(st, _)| *st == 200)?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    let mut out = BTreeMap::new();
    for r in v["data"]["result"].as_array().cloned().unwrap_or_default() {
        let m: BTreeMap<String, String> = serde_json::from_value(r["metric"].clone()).ok()?;
        let val = r["value"][1].as_str().and_then(|s| s.parse::<f64>().ok())?;
        out.insert(format!("{m:?}"), val);
    }
    Some(out)
}

/// [`try_at`] that must succeed.
fn at(port: u16, q: &str, t: f64) -> BTreeMap<String, f64> {
    try_at(port, q, t).unwrap_or_else(|| {
        let path = format!("/api/v1/query?query={}&time={t:.3}", urlencode(q));
        panic!("{q} on port {port}: {:?}", get(port, &path))
    })
}

/// Raw samples of range selector `q` at `t`: label set -> [(ms, value)].
fn raw(port: u16, q: &str, t: f64) -> BTreeMap<String, Vec<(i64, f64)>> {
    let path = format!("/api/v1/query?query={}&time={t:.3}", urlencode(q));
    let (st, body) = get(port, &path).unwrap_or_else(|| panic!("{port} answers {q}"));
    assert_eq!(st, 200, "{q} on {port}: {body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let mut out = BTreeMap::new();
    for r in v["data"]["result"].as_array().cloned().unwrap_or_default() {
        let m: BTreeMap<String, String> =
            serde_json::from_value(r["metric"].clone()).expect("labels");
        let pts = r["values"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|p| {
                let ts = (p[0].as_f64().expect("time") * 1000.0).round() as i64;
                let v = p[1].as_str().and_then(|s| s.parse().ok()).expect("value");
                (ts, v)
            })
            .collect();
        out.insert(format!("{m:?}"), pts);
    }
    out
}

/// Asserts that `q` at `t` gives the same series and values (within a
/// relative `tol`) on both servers; returns the number of series.
fn same(q: &str, t: f64, canopy: u16, other: u16, name: &str, tol: f64) -> usize {
    let a = at(canopy, q, t);
    let b = at(other, q, t);
    assert!(!a.is_empty(), "Canopy has no {q} at {t}");
    let only_a: Vec<_> = a.keys().filter(|k| !b.contains_key(*k)).collect();
    let only_b: Vec<_> = b.keys().filter(|k| !a.contains_key(*k)).collect();
    assert!(
        only_a.is_empty() && only_b.is_empty(),
        "{q} at {t}: series only in Canopy {only_a:?}, only in {name} {only_b:?}"
    );
    for (k, x) in &a {
        let y = b[k];
        let ok = (x.is_nan() && y.is_nan()) || (x - y).abs() <= tol * x.abs().max(y.abs());
        assert!(ok, "{q}{k} at {t}: Canopy {x}, {name} {y}");
    }
    a.len()
}

#[test]
fn canopy_up_remote_writes_the_same_series_to_prometheus_and_victoriametrics() {
    need("prometheus");
    need("victoria-metrics");
    let dir = tempfile::tempdir().expect("temp dir");
    // No scrape jobs: Prometheus holds only what Canopy sends.
    let (_prom, prom) = prometheus(dir.path(), "global:\n  scrape_interval: 1h\n");
    let (_vm, vm) = victoria(dir.path());

    let (p, v) = (
        format!("http://127.0.0.1:{prom}/api/v1/write"),
        format!("http://127.0.0.1:{vm}/api/v1/write"),
    );
    let up = canopy_up(&[
        "--nodes",
        "4",
        "--subtrees",
        "2",
        "--tick-ms",
        "1000",
        "--remote-write",
        &p,
        "--remote-write",
        &v,
    ]);
    let http = up.http;
    // Every node (4 simulated + this host) up in Canopy, then in both TSDBs.
    for (port, name) in [
        (http, "Canopy"),
        (prom, "Prometheus"),
        (vm, "VictoriaMetrics"),
    ] {
        wait_for(
            &format!("5 nodes up in {name}"),
            Duration::from_secs(90),
            || {
                let r = try_at(port, "up", now_s())?;
                (r.len() == 5 && r.values().all(|v| *v == 1.0)).then_some(())
            },
        );
    }
    // Let a stretch of history accumulate, then compare an instant well
    // behind the senders (batches leave within ~1.5 s).
    std::thread::sleep(Duration::from_secs(12));
    let t = (now_s() - 4.0).floor() + 0.5;

    let cpu = "canopy_node_cpu_seconds_total";
    let n_cpu = same(cpu, t, http, prom, "Prometheus", 0.0);
    let sims: usize = at(http, cpu, t)
        .keys()
        .filter(|k| k.contains("\"sim"))
        .count();
    assert!(sims >= 4, "CPU series of the 4 simulated nodes: {sims}");
    same(cpu, t, http, vm, "VictoriaMetrics", 1e-9);
    same("up", t, http, prom, "Prometheus", 0.0);
    same("up", t, http, vm, "VictoriaMetrics", 0.0);
    // Every series Canopy holds, by metric name.
    let all = "count by (__name__) ({__name__=~\".+\"})";
    let by_name = at(http, all, t);
    same(all, t, http, prom, "Prometheus", 0.0);
    same(all, t, http, vm, "VictoriaMetrics", 0.0);
    let total: f64 = by_name.values().sum();
    // ...and every one of them, value for value.
    let every = "{__name__=~\".+\"}";
    let n_all = same(every, t, http, prom, "Prometheus", 0.0);
    same(every, t, http, vm, "VictoriaMetrics", 1e-9);
    assert_eq!(n_all as f64, total);
    // The raw samples themselves: same timestamps, same values.
    let window = format!("{cpu}[10s]");
    let (a, b) = (raw(http, &window, t), raw(prom, &window, t));
    assert_eq!(a.len(), n_cpu);
    for (k, pts) in &a {
        assert_eq!(
            Some(pts),
            b.get(k),
            "{cpu}{k} samples in Canopy vs Prometheus"
        );
    }
    // Change-only data is sent as a sample per tick: 10 s of 1 s ticks.
    let per_tick = format!("count_over_time({cpu}[10s])");
    same(&per_tick, t, http, prom, "Prometheus", 0.0);
    let counts = at(prom, &per_tick, t);
    assert!(
        counts.values().all(|c| *c >= 9.0),
        "a sample per tick in Prometheus: {counts:?}"
    );
    same(
        &format!("rate({cpu}[10s])"),
        t,
        http,
        prom,
        "Prometheus",
        1e-9,
    );
    eprintln!(
        "remote_write out: {} metric names, {total} series compared value for value at {t} in \
         Prometheus and VictoriaMetrics; {n_cpu} {cpu} series sample for sample over 10 s",
        by_name.len()
    );
}

/// POST a remote_write body to 127.0.0.1:`port`; `declared` overrides the
/// Content-Length sent. (status, body).
fn post(port: u16, body: &[u8], declared: Option<usize>) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("gateway listens");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let head = format!(
        "POST /api/v1/write HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-protobuf\r\n\
         Content-Encoding: snappy\r\nX-Prometheus-Remote-Write-Version: 0.1.0\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        declared.unwrap_or(body.len())
    );
    s.write_all(head.as_bytes()).expect("head sent");
    let _ = s.write_all(body);
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|x| x.parse().ok())
        .unwrap_or_else(|| panic!("an HTTP answer: {text:?}"));
    let body = text.split_once("\r\n\r\n").map_or("", |x| x.1).to_string();
    (status, body)
}

fn standalone_gateway(procs: &mut Procs) -> u16 {
    let http = free_port();
    let grpc = free_port();
    procs.spawn(&[
        "gateway",
        "--http",
        &format!("127.0.0.1:{http}"),
        "--grpc",
        &format!("127.0.0.1:{grpc}"),
    ]);
    wait_for("the gateway's HTTP API", Duration::from_secs(60), || {
        get(http, "/api/v1/status/buildinfo").filter(|(st, _)| *st == 200)
    });
    http
}

#[test]
fn canopy_gateway_stores_remote_write_and_refuses_bad_bodies() {
    let mut procs = Procs::default();
    let http = standalone_gateway(&mut procs);
    let now_ms = (now_s() * 1000.0) as i64;
    let series: Vec<Labels> = (0..3)
        .map(|i| {
            Labels::from_pairs([
                ("__name__", "rw_test_value".to_string()),
                ("node", format!("n{i}")),
                ("job", "rw".to_string()),
            ])
        })
        .collect();
    let samples: Vec<(&Labels, i64, f64)> = series
        .iter()
        .enumerate()
        .flat_map(|(i, l)| {
            (0..5).map(move |k| (l, now_ms - 5000 + 1000 * k, (i * 10 + k as usize) as f64))
        })
        .collect();
    let body = encode(&request_of(samples.iter().copied())).expect("encode");
    let (st, msg) = post(http, &body, None);
    assert_eq!(st, 204, "{msg}");
    let t = (now_ms - 1000) as f64 / 1000.0;
    let r = at(http, "rw_test_value", t);
    assert_eq!(r.len(), 3, "{r:?}");
    let vals: Vec<f64> = r.values().copied().collect();
    assert_eq!(vals, vec![4.0, 14.0, 24.0]);
    let r = at(http, "sum(count_over_time(rw_test_value[1m]))", t);
    assert_eq!(r.values().copied().collect::<Vec<_>>(), vec![15.0]);

    let garbage_pb = {
        // Valid snappy around bytes that are no WriteRequest.
        let mut raw = vec![0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f];
        raw.extend_from_slice(&[0xff; 32]);
        let mut out = vec![u8::try_from(raw.len()).expect("small")];
        out.push(u8::try_from(raw.len() - 1).expect("small") << 2);
        out.extend_from_slice(&raw);
        out
    };
    let cases: Vec<(&str, Vec<u8>, Option<usize>, &str)> = vec![
        (
            "corrupt snappy",
            b"\x40\x00\x01broken".to_vec(),
            None,
            "not valid snappy",
        ),
        ("garbage protobuf", garbage_pb, None, "not a valid protobuf"),
        (
            "a body claiming 4 GiB decompressed",
            vec![0xff, 0xff, 0xff, 0xff, 0x0f, 0x00],
            None,
            "over the limit of",
        ),
        (
            "a 17 MiB body",
            vec![0u8; 64],
            Some(17 << 20),
            "exceeds the limit of",
        ),
    ];
    for (what, b, declared, want) in cases {
        let (st, msg) = post(http, &b, declared);
        assert_eq!(st, 400, "{what}: {msg}");
        assert!(msg.contains(want), "{what}: {msg:?} should say {want:?}");
        // The gateway keeps serving everyone else.
        let (st, _) = get(http, "/api/v1/status/buildinfo").expect("still answering");
        assert_eq!(st, 200, "after {what}");
    }
    let l = &series[0];
    let body = encode(&request_of([(l, now_ms + 1000, 99.0)])).expect("encode");
    assert_eq!(post(http, &body, None).0, 204);
    let r = at(
        http,
        "rw_test_value{node=\"n0\"}",
        (now_ms + 1000) as f64 / 1000.0,
    );
    assert_eq!(r.values().copied().collect::<Vec<_>>(), vec![99.0]);
}

#[test]
fn a_real_prometheus_remote_writes_into_canopy_gateway() {
    need("prometheus");
    let mut procs = Procs::default();
    let http = standalone_gateway(&mut procs);
    let dir = tempfile::tempdir().expect("temp dir");
    let cfg = format!(
        "global:\n  scrape_interval: 1s\n\
         scrape_configs:\n  - job_name: prom\n    static_configs:\n      - targets: ['127.0.0.1:SELF']\n\
         remote_write:\n  - url: http://127.0.0.1:{http}/api/v1/write\n    \
         queue_config:\n      batch_send_deadline: 1s\n"
    );
    let (_prom, prom) = prometheus(dir.path(), &cfg);
    wait_for(
        "Prometheus's own up series in Canopy",
        Duration::from_secs(90),
        || {
            let r = try_at(http, "up{job=\"prom\"}", now_s())?;
            (r.len() == 1 && r.values().all(|v| *v == 1.0)).then_some(())
        },
    );
    std::thread::sleep(Duration::from_secs(8));
    let t = (now_s() - 4.0).floor() + 0.5;
    // Every series Prometheus scraped, value for value.
    let n = same("{job=\"prom\"}", t, http, prom, "Prometheus", 0.0);
    assert!(
        n > 100,
        "Prometheus exposes hundreds of series about itself: {n}"
    );
    same(
        "count_over_time(up{job=\"prom\"}[5s])",
        t,
        http,
        prom,
        "Prometheus",
        0.0,
    );
    // No request was refused along the way.
    let failed = at(
        prom,
        "sum(prometheus_remote_storage_samples_failed_total)",
        now_s(),
    );
    assert_eq!(failed.values().copied().collect::<Vec<_>>(), vec![0.0]);
    eprintln!("remote_write in: {n} series of a real Prometheus compared value for value");
}

//! `canopy up` as a real process: the whole fabric (gateway, a planned tree
//! of simulated nodes, this host's real node) over QUIC on loopback,
//! queried through the Prometheus HTTP API.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills the child on drop so a failed assertion leaves nothing behind.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// GET `path` on 127.0.0.1:`port`; (status, body).
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let status = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf.split_once("\r\n\r\n")?.1.to_string();
    // Chunked bodies: keep the JSON between the first '{' and the last '}'.
    let body = match (body.find('{'), body.rfind('}')) {
        (Some(a), Some(b)) if b >= a => body[a..=b].to_string(),
        _ => body,
    };
    Some((status, body))
}

fn query(port: u16, q: &str) -> serde_json::Value {
    let enc: String = q
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let (status, body) = get(port, &format!("/api/v1/query?query={enc}")).expect("query answered");
    assert_eq!(status, 200, "{q}: {body}");
    serde_json::from_str(&body).expect("JSON")
}

fn results(v: &serde_json::Value) -> Vec<serde_json::Value> {
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

fn value_of(r: &serde_json::Value) -> f64 {
    r["value"][1]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Polls `f` until it returns Some or the guard expires.
fn wait_for<T>(what: &str, guard: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(t0.elapsed() < guard, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn canopy_up_serves_the_fabric_over_the_prometheus_api() {
    let http = free_port();
    let grpc = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_canopy"))
        .args(["up", "--nodes", "12", "--subtrees", "4", "--tick-ms", "500"])
        .args([
            "--http",
            &format!("127.0.0.1:{http}"),
            "--grpc",
            &format!("127.0.0.1:{grpc}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("canopy up starts");
    let mut proc = Proc(child);

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
            "count by (job_id, user, account, partition) (canopy_job_cpu_seconds_total)",
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
    let pid = proc.0.id().to_string();
    let _ = Command::new("kill").args(["-INT", &pid]).status();
    let t0 = Instant::now();
    let exited = loop {
        if let Ok(Some(s)) = proc.0.try_wait() {
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

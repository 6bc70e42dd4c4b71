//! `canopy plan` as users run it: JSON shape, emitted configs, and a real
//! multi-process fabric started from those configs (a gateway and 16
//! `canopy node --synthetic` processes on loopback QUIC with mutual TLS).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_canopy");

struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn canopy(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().expect("canopy runs");
    assert!(
        out.status.success(),
        "canopy {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

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

fn get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let body = buf.split_once("\r\n\r\n")?.1;
    let (a, b) = (body.find('{')?, body.rfind('}')?);
    Some(body[a..=b].to_string())
}

fn results(port: u16, q: &str) -> Vec<serde_json::Value> {
    let enc: String = q
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b'_' {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    get(port, &format!("/api/v1/query?query={enc}"))
        .and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok())
        .and_then(|v| v["data"]["result"].as_array().cloned())
        .unwrap_or_default()
}

#[test]
fn emitted_loopback_configs_run_a_real_multi_process_fabric() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    // A base port unlikely to clash with other tests running at the same time.
    let base = 20_000 + (std::process::id() % 20_000) as u16;
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

    let http = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let mut procs = Procs(Vec::new());
    let spawn = |args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn")
    };
    let cfg = |n: &str| d.join(n).to_str().expect("utf-8").to_string();
    let grpc = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    procs.0.push(spawn(&[
        "gateway",
        "--config",
        &cfg("gateway.toml"),
        "--http",
        &format!("127.0.0.1:{http}"),
        "--grpc",
        &format!("127.0.0.1:{grpc}"),
    ]));
    for i in 1..=16 {
        procs.0.push(spawn(&[
            "node",
            "--config",
            &cfg(&format!("h{i:02}.toml")),
            "--synthetic",
        ]));
    }
    let t0 = Instant::now();
    loop {
        let up = results(http, "up == 1");
        let ticks = results(http, "canopy_synthetic_ticks_total");
        if up.len() == 16 && ticks.len() == 16 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "16 nodes up: got up={} ticks={}",
            up.len(),
            ticks.len()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

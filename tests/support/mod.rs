//! Helpers shared by the integration tests that run `canopy` as real
//! processes: spawning and reaping, free ports, and a tiny HTTP client for
//! the Prometheus API (blocking std sockets, so the tests need no runtime).
//!
//! Each test file includes this with `mod support;` and uses what it needs.
#![allow(dead_code)]

pub mod six;
pub mod ticks;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The `canopy` binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_canopy");

/// Child processes killed (SIGKILL) and reaped on drop, so a failed
/// assertion leaves nothing running. Each one's log (stderr) is kept in a
/// file; when the test panics, the drop prints every process's exit status
/// and the tail of its log, so a failure on CI says what the processes did.
#[derive(Default)]
pub struct Procs(pub Vec<Child>, Logs);

/// Where the processes of one [`Procs`] write their logs, and what each was
/// started as.
#[derive(Default)]
pub struct Logs {
    dir: Option<tempfile::TempDir>,
    files: Vec<(String, std::path::PathBuf)>,
}

/// How many lines of each process's log a failed test prints.
const LOG_TAIL_LINES: usize = 40;

impl Procs {
    /// Starts `canopy ARGS` with its log (stderr) kept; returns its index.
    ///
    /// With `CANOPY_TEST_LOGS=DIR` in the environment, the log is kept in
    /// `DIR/<test pid>-<test>/<n>-<config or role>.log` (and stays after
    /// the test), to see what each process did in any run.
    pub fn spawn(&mut self, args: &[&str]) -> usize {
        let what = args
            .iter()
            .position(|a| *a == "--config")
            .and_then(|i| args.get(i + 1))
            .and_then(|f| std::path::Path::new(f).file_stem())
            .and_then(|s| s.to_str())
            .or(args.first().copied())
            .unwrap_or("canopy");
        let name = format!("{:02}-{what}.log", self.0.len());
        let dir = if let Some(dir) = std::env::var_os("CANOPY_TEST_LOGS") {
            let test = std::thread::current().name().unwrap_or("test").to_string();
            let dir = std::path::PathBuf::from(dir).join(format!("{}-{test}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("CANOPY_TEST_LOGS directory");
            dir
        } else {
            let tmp = match self.1.dir.take() {
                Some(t) => t,
                None => tempfile::tempdir().expect("a directory for the logs"),
            };
            let dir = tmp.path().to_path_buf();
            self.1.dir = Some(tmp);
            dir
        };
        self.spawn_logged(args, &dir.join(name))
    }

    /// Starts `canopy ARGS` with its stderr (its log) written to `log`.
    pub fn spawn_logged(&mut self, args: &[&str], log: &std::path::Path) -> usize {
        let file = std::fs::File::create(log).expect("log file");
        let child = Command::new(BIN)
            .args(args)
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("canopy starts");
        self.0.push(child);
        self.1.files.push((args.join(" "), log.to_path_buf()));
        self.0.len() - 1
    }

    /// `kill -9` of the process at `i` (and reaps it).
    pub fn kill9(&mut self, i: usize) {
        let c = &mut self.0[i];
        c.kill().expect("SIGKILL delivered");
        c.wait().expect("reaped");
    }

    /// Each process's command line, exit status (or that it still runs)
    /// and the last lines of its log.
    fn report(&mut self) -> String {
        let mut out = String::new();
        for (i, c) in self.0.iter_mut().enumerate() {
            let status = match c.try_wait() {
                Ok(Some(s)) => format!("exited: {s}"),
                Ok(None) => "running".to_string(),
                Err(e) => format!("status unknown: {e}"),
            };
            let (args, log) = self
                .1
                .files
                .get(i)
                .map_or(("?", None), |(a, l)| (a.as_str(), Some(l)));
            out.push_str(&format!("--- process {i}: canopy {args} ({status})\n"));
            let text = log
                .and_then(|l| std::fs::read_to_string(l).ok())
                .unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            for l in &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..] {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("the test failed; its processes:\n{}", self.report());
        }
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A `canopy up` process on free loopback ports, killed on drop.
pub struct Up {
    /// The process (index 0).
    pub procs: Procs,
    /// Its Prometheus HTTP API port.
    pub http: u16,
    /// Its gRPC port.
    pub grpc: u16,
}

/// Starts `canopy up ARGS --http … --grpc …` on free ports.
pub fn canopy_up(args: &[&str]) -> Up {
    let (http, grpc) = (free_port(), free_port());
    let (h, g) = (format!("127.0.0.1:{http}"), format!("127.0.0.1:{grpc}"));
    let mut all = vec!["up"];
    all.extend_from_slice(args);
    all.extend(["--http", &h, "--grpc", &g]);
    let mut procs = Procs::default();
    procs.spawn(&all);
    Up { procs, http, grpc }
}

/// Runs `canopy ARGS` to completion; its stdout, or a panic with stderr.
pub fn canopy(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().expect("canopy runs");
    assert!(
        out.status.success(),
        "canopy {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// A TCP port free on 127.0.0.1 right now, for a process the test starts
/// next to listen on.
///
/// Drawn below the kernel's ephemeral range, from a counter spread by PID,
/// and checked free by a bind: a port from `bind(127.0.0.1:0)` lies in
/// that range, where the kernel also picks the source port of every
/// outgoing connection (the tests' own HTTP polls among them) and another
/// thread's `bind(0)`, so it could be taken before the process bound it.
/// The counter keeps two tests of one binary from drawing the same port.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOW: u32 = 10_000;
    let span = ephemeral_low().saturating_sub(LOW).max(1_000);
    let seed = std::process::id().wrapping_mul(7_919);
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = u16::try_from(LOW + seed.wrapping_add(n.wrapping_mul(101)) % span)
            .expect("below 65536");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free TCP port below the ephemeral range")
}

/// The first port of the kernel's ephemeral range
/// (`net.ipv4.ip_local_port_range`), 32768 when it cannot be read.
fn ephemeral_low() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768)
}

/// A base for a block of loopback QUIC ports, spread by PID so tests in
/// parallel processes rarely collide.
///
/// The block lies below the kernel's ephemeral range
/// (`net.ipv4.ip_local_port_range`): a QUIC client socket bound to port 0
/// takes a port from that range, and one did take a planned node's port
/// while that node was not started yet (a CI run failed on it).
pub fn port_base(spread: u32) -> u16 {
    const LOW: u32 = 10_000;
    let ephemeral = ephemeral_low();
    // Room for a whole block (hosts and gateways) under the range.
    let span = ephemeral.saturating_sub(LOW + 100).max(1_000);
    u16::try_from(LOW + (std::process::id() * 37 + spread) % span).expect("fits")
}

/// Percent-encodes a query parameter value.
pub fn urlencode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// GET `path` on 127.0.0.1:`port`: (status, body), or None when nothing answers.
pub fn get(port: u16, path: &str) -> Option<(u16, String)> {
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
    let (head, body) = buf.split_once("\r\n\r\n")?;
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(body)?
    } else {
        body.to_string()
    };
    Some((status, body))
}

/// Any request to 127.0.0.1:`port` with extra `headers` and a `body`:
/// (status, body), or None when nothing answers.
pub fn request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).ok()?;
    s.write_all(body).ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let status = buf.split_whitespace().nth(1)?.parse().ok()?;
    let (head, body) = buf.split_once("\r\n\r\n")?;
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(body)?
    } else {
        body.to_string()
    };
    Some((status, body))
}

/// The payload of a `Transfer-Encoding: chunked` body.
fn dechunk(mut rest: &str) -> Option<String> {
    let mut out = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n")?;
        let n = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if n == 0 {
            return Some(out);
        }
        out.push_str(after.get(..n)?);
        rest = after.get(n..)?.strip_prefix("\r\n")?;
    }
}

/// The `data.result` array of an instant query, or empty when the gateway
/// does not answer (yet) or answers with an error.
pub fn results(port: u16, q: &str) -> Vec<serde_json::Value> {
    get(port, &format!("/api/v1/query?query={}", urlencode(q)))
        .filter(|(status, _)| *status == 200)
        .and_then(|(_, b)| serde_json::from_str::<serde_json::Value>(&b).ok())
        .and_then(|v| v["data"]["result"].as_array().cloned())
        .unwrap_or_default()
}

/// An instant query that must answer 200: its whole JSON answer.
pub fn query_json(port: u16, q: &str) -> serde_json::Value {
    let (status, body) =
        get(port, &format!("/api/v1/query?query={}", urlencode(q))).expect("query answered");
    assert_eq!(status, 200, "{q}: {body}");
    serde_json::from_str(&body).expect("JSON")
}

/// The value of one instant-vector result.
pub fn value_of(r: &serde_json::Value) -> f64 {
    r["value"][1]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Polls `f` every 250 ms until it returns Some, or panics after `guard`.
pub fn wait_for<T>(what: &str, guard: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(t0.elapsed() < guard, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

//! Child processes of the real-process benchmarks: started with their
//! stderr in a log file, killed when dropped (so an error leaves nothing
//! running), and the loopback ports they need.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// Children, each with a name; all killed when this is dropped.
#[derive(Default)]
pub struct Procs(Vec<(String, Child)>);

impl Procs {
    /// Starts `cmd` (stdin closed, stderr to `log`); returns its pid.
    pub fn spawn(&mut self, name: &str, cmd: &mut Command, log: &Path) -> Result<u32> {
        let err =
            std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let child = cmd
            .stdin(Stdio::null())
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {name} ({cmd:?})"))?;
        let pid = child.id();
        self.0.push((name.to_string(), child));
        Ok(pid)
    }

    /// The stdout of the last child started, if it was piped.
    pub fn last_stdout(&mut self) -> Option<ChildStdout> {
        self.0.last_mut().and_then(|(_, c)| c.stdout.take())
    }

    /// Fails if any child has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        for (n, c) in &mut self.0 {
            if let Some(st) = c.try_wait()? {
                bail!("{n} exited early ({st}); see its log in the work directory");
            }
        }
        Ok(())
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for (_, c) in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The first of `n` consecutive UDP ports free on 127.0.0.1 (the gateway
/// and the hosts of `canopy plan --loopback --base-port`).
pub fn free_udp_run(n: u16) -> Result<u16> {
    let start = 20_000 + (std::process::id() % 20_000) as u16;
    let mut base = start;
    while base < start.saturating_add(8_000) {
        match (0..n).find(|&i| UdpSocket::bind(("127.0.0.1", base + i)).is_err()) {
            None => return Ok(base),
            Some(busy) => base += busy + 1,
        }
    }
    bail!("no {n} free consecutive UDP ports on 127.0.0.1")
}

/// A TCP address on 127.0.0.1 free a moment ago.
pub fn free_tcp() -> Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// The HTTP address `canopy gateway` prints on its stdout (`gateway: HTTP
/// API on http://ADDR, ...`), within 30 s.
pub fn read_gateway_http_addr(stdout: ChildStdout) -> Result<SocketAddr> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        while let Some(Ok(l)) = lines.next() {
            if let Some(rest) = l.strip_prefix("gateway: HTTP API on http://") {
                let addr = rest.split(',').next().unwrap_or("").trim().to_string();
                let _ = tx.send(addr);
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(30))
        .context("the gateway did not print its HTTP address within 30 s")?;
    addr.parse()
        .with_context(|| format!("gateway HTTP address {addr:?}"))
}

//! Sends pre-encoded remote_write bodies to one server from a few threads
//! and times it until every request got a 2xx.
//!
//! Sender `i` owns its nodes and sends their bodies in time order, so every
//! series arrives in order. A sender may not run more than `max_lag` time
//! slices ahead of the slowest one: Prometheus refuses samples older than
//! its newest sample minus one hour ("out of bounds"), and a lagging sender
//! must never fall that far behind.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use super::data::Body;
use super::http::Conn;

/// What one ingest took.
#[derive(Clone, Copy, Debug)]
pub struct Ingest {
    /// Wall time from the first request sent to the last 2xx.
    pub wall: Duration,
    /// Samples sent (all acknowledged).
    pub samples: u64,
    /// Requests sent.
    pub requests: usize,
}

impl Ingest {
    /// Acknowledged samples per second of wall time.
    pub fn rate(&self) -> f64 {
        self.samples as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// The headers of a remote_write 1.0 request.
pub const HEADERS: [(&str, &str); 4] = [
    ("Content-Type", "application/x-protobuf"),
    ("Content-Encoding", "snappy"),
    ("X-Prometheus-Remote-Write-Version", "0.1.0"),
    ("User-Agent", "canopy-tsdb-side-by-side"),
];

/// Sends every sender's bodies to `addr`'s `/api/v1/write`; fails on the
/// first answer that is not 2xx (with its text).
pub fn send_all(addr: SocketAddr, bodies: &[Vec<Body>], max_lag: usize) -> Result<Ingest> {
    let done: Vec<AtomicUsize> = bodies.iter().map(|_| AtomicUsize::new(0)).collect();
    let failed = AtomicBool::new(false);
    let t0 = Instant::now();
    let results: Vec<Result<()>> = std::thread::scope(|sc| {
        let hs: Vec<_> = bodies
            .iter()
            .enumerate()
            .map(|(i, list)| {
                let (done, failed) = (&done, &failed);
                sc.spawn(move || {
                    let r = one_sender(addr, list, i, done, failed, max_lag);
                    if r.is_err() {
                        failed.store(true, Ordering::Relaxed);
                    }
                    r
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| bail!("a sender thread panicked"))
            })
            .collect()
    });
    let wall = t0.elapsed();
    for r in results {
        r?;
    }
    Ok(Ingest {
        wall,
        samples: bodies.iter().flatten().map(|b| b.samples as u64).sum(),
        requests: bodies.iter().map(Vec::len).sum(),
    })
}

fn one_sender(
    addr: SocketAddr,
    list: &[Body],
    me: usize,
    done: &[AtomicUsize],
    failed: &AtomicBool,
    max_lag: usize,
) -> Result<()> {
    let mut conn = Conn::new(addr, Duration::from_secs(120));
    for (i, b) in list.iter().enumerate() {
        // Wait for the slowest sender to have finished slice `b.slice - max_lag`.
        while done
            .iter()
            .enumerate()
            .any(|(j, d)| j != me && d.load(Ordering::Acquire) + max_lag < b.slice)
        {
            if failed.load(Ordering::Relaxed) {
                bail!("another sender failed");
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        let r = conn.request("POST", "/api/v1/write", &HEADERS, &b.bytes)?;
        if !(200..300).contains(&r.status) {
            bail!(
                "{addr} answered {} to request {i} of sender {me}: {}",
                r.status,
                String::from_utf8_lossy(&r.body).trim()
            );
        }
        // Slice `b.slice` is complete once the next body is of a later slice.
        if list.get(i + 1).is_none_or(|n| n.slice > b.slice) {
            done[me].store(b.slice + 1, Ordering::Release);
        }
    }
    done[me].store(usize::MAX / 2, Ordering::Release);
    Ok(())
}

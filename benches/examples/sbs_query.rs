//! The query half of `tsdb-side-by-side`, in one process: the same data
//! (same `DataSpec` defaults, bodies cut the same way) fed through the
//! remote_write receiver's `ingest` into a memory-only store, then the
//! benchmark's three queries timed on the engine alone and through the
//! gateway's HTTP API on loopback (the API's router with the gateway's
//! default engine settings, a plain keep-alive HTTP/1.1 client), so what
//! the HTTP layer adds shows beside what the engine costs; then through
//! HTTP again with the CPU caches flushed before each query (256 MiB
//! written), as in the side-by-side, where each server's query follows
//! the two other servers' queries. `only`
//! (`sum`, `topk` or `range`) runs just that query on the engine, `runs`
//! times, for callgrind.
//!
//! ```text
//! cargo run --release -p canopy-benches --example sbs_query -- [nodes] [runs] [only]
//! ```
//!
//! `SBS_INTERVAL_S=1` samples every second instead of every 15 s (the
//! issue's "1 h at 1 s"; `tsdb-side-by-side --interval`). `SBS_BACK_S=30`
//! evaluates the queries that many seconds before the data's end (at 1 s,
//! 30 puts the 1 m window's start inside a sealed chunk).
#![allow(clippy::print_stdout)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use canopy_benches::sidebyside::data::{self, DataSpec, IO_READ};
use canopy_gateway::api::http::{ApiState, router};
use canopy_gateway::promql::{Engine, EngineOpts};
use canopy_gateway::remote_write::receiver::{ReceiverState, ingest};
use canopy_gateway::remote_write::wire::WireLimits;
use canopy_gateway::store::{LiveStore, LiveStoreConfig, SharedStore};

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// One GET on a keep-alive connection; the body's length.
fn get(c: &mut BufReader<TcpStream>, path: &str) -> anyhow::Result<usize> {
    write!(
        c.get_mut(),
        "GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: keep-alive\r\n\r\n"
    )?;
    let mut len = 0usize;
    let mut line = String::new();
    let mut status = String::new();
    loop {
        line.clear();
        c.read_line(&mut line)?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if status.is_empty() {
            status = l.to_string();
        }
        if let Some(v) = l.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse()?;
        }
    }
    let mut body = vec![0u8; len];
    c.read_exact(&mut body)?;
    anyhow::ensure!(
        status.contains(" 200 "),
        "{status}: {}",
        String::from_utf8_lossy(&body)
    );
    Ok(len)
}

/// Percent-encodes a query for a URL.
fn enc(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A benchmark query: label, text, and for a range query (start s, step s).
type Query = (&'static str, String, Option<(i64, i64)>);

/// The side-by-side's queries at `t` (s).
fn queries(t: i64) -> [Query; 3] {
    let sum = format!("sum by (job_id) (rate({IO_READ}[1m]))");
    let topk = format!("topk(10, rate({IO_READ}[1m]))");
    [
        ("sum", sum.clone(), None),
        ("topk", topk, None),
        ("range", sum, Some((t - 3600, 15))),
    ]
}

/// The API path of query `q` at `t` (s).
fn path(q: &str, range: Option<(i64, i64)>, t: i64) -> String {
    match range {
        None => format!("/api/v1/query?query={}&time={t}", enc(q)),
        Some((start, step)) => format!(
            "/api/v1/query_range?query={}&start={start}&end={t}&step={step}",
            enc(q)
        ),
    }
}

fn connect(addr: std::net::SocketAddr) -> anyhow::Result<BufReader<TcpStream>> {
    let s = TcpStream::connect(addr).context("connect")?;
    s.set_nodelay(true)?;
    Ok(BufReader::new(s))
}

/// Sends the data to the gateway at `addr`, then times each query there.
fn remote(
    addr: std::net::SocketAddr,
    spec: &DataSpec,
    bodies: &[Vec<data::Body>],
    runs: usize,
) -> anyhow::Result<()> {
    let ing = canopy_benches::sidebyside::send::send_all(addr, bodies, 10)?;
    println!(
        "sent {} samples in {:.1} s",
        ing.samples,
        ing.wall.as_secs_f64()
    );
    let t = spec.end_ms / 1000;
    let mut c = connect(addr)?;
    for (label, q, range) in queries(t) {
        let path = path(&q, range, t);
        let mut ms = Vec::new();
        for _ in 0..runs {
            let t0 = Instant::now();
            get(&mut c, &path)?;
            ms.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        println!("{label}: HTTP {:.3} ms", median(&mut ms));
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (nodes, runs) = (arg(1, 1000), arg(2, 20).max(1));
    let only = args.get(3).cloned().unwrap_or_default();
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as i64;
    let interval_s = data::interval_from_env();
    let (spec, cut) = data::set_at_interval(nodes, 65, interval_s, now_ms);
    let bodies = data::bodies(&spec, &cut)?;
    if let Ok(addr) = only.parse::<std::net::SocketAddr>() {
        return remote(addr, &spec, &bodies, runs);
    }
    let store = SharedStore::new(LiveStore::new(LiveStoreConfig::default()));
    let st = ReceiverState::new(store.clone(), None, WireLimits::default());
    for b in data::interleaved(&bodies) {
        ingest(&st, &b.bytes).map_err(|(s, m)| anyhow::anyhow!("{s}: {m}"))?;
    }
    drop(bodies);
    store.write(|s| s.maintain(spec.end_ms));
    let engine = Engine::new(EngineOpts::default());
    // As the side-by-side asks: at a whole second, the range over 1 h at 15 s.
    let back: i64 = std::env::var("SBS_BACK_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let t = spec.end_ms / 1000 - back;
    let queries = queries(t);
    println!(
        "{} series, 65 min at {interval_s} s; medians of {runs}",
        spec.series()
    );
    let mut engine_ms = Vec::new();
    for (label, q, range) in &queries {
        if !only.is_empty() && only != *label {
            continue;
        }
        let mut ms = Vec::new();
        for _ in 0..runs {
            let t0 = Instant::now();
            match range {
                None => drop(std::hint::black_box(engine.instant(&store, q, t * 1000)?)),
                Some((start, step)) => drop(std::hint::black_box(engine.range(
                    &store,
                    q,
                    start * 1000,
                    t * 1000,
                    step * 1000,
                )?)),
            }
            ms.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        engine_ms.push(median(&mut ms));
    }
    if !only.is_empty() {
        println!("engine {only}: median {:.3} ms", engine_ms[0]);
        return Ok(());
    }
    // Cold: caches flushed before each, the engine alone and the store's
    // walk alone (the selection streamed to a callback that does nothing).
    {
        let mut flush = vec![0u8; 256 << 20];
        let mut round = 0u8;
        let mut cold = |f: &mut dyn FnMut()| {
            let mut ms = Vec::new();
            for _ in 0..runs {
                flush_caches(&mut flush, &mut round);
                let t0 = Instant::now();
                f();
                ms.push(t0.elapsed().as_secs_f64() * 1e3);
            }
            median(&mut ms)
        };
        let m = [canopy_gateway::store::Matcher::equal("__name__", IO_READ)];
        let (lo, hi) = (t * 1000 - 60_000, t * 1000);
        use canopy_gateway::store::Querier as _;
        let walk = cold(&mut || {
            store
                .select_each(
                    &m,
                    lo,
                    hi,
                    usize::MAX,
                    &|_| false,
                    &mut |s, _| {
                        std::hint::black_box(s.samples.len());
                        true
                    },
                    &mut |_| {},
                )
                .ok();
        });
        let walk_labels = cold(&mut || {
            store
                .select_each(
                    &m,
                    lo,
                    hi,
                    usize::MAX,
                    &|n| n == "job_id",
                    &mut |s, _| {
                        std::hint::black_box(s.samples.len());
                        true
                    },
                    &mut |_| {},
                )
                .ok();
        });
        let (_, sum, _) = &queries[0];
        let (_, topk, _) = &queries[1];
        let e_sum = cold(&mut || drop(std::hint::black_box(engine.instant(&store, sum, t * 1000))));
        let e_topk =
            cold(&mut || drop(std::hint::black_box(engine.instant(&store, topk, t * 1000))));
        println!(
            "cold: store walk {walk:.3} ms (keeping job_id {walk_labels:.3} ms), engine sum {e_sum:.3} ms, engine topk {e_topk:.3} ms"
        );
    }
    // The same through the HTTP API on loopback.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let api = ApiState::new(Arc::new(store.clone()), Arc::new(engine));
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let addr = listener.local_addr()?;
    rt.spawn(async move { axum::serve(listener, router(api)).await });
    let mut c = connect(addr)?;
    // A buffer larger than any cache, written to evict the store's data.
    let mut flush = vec![0u8; 256 << 20];
    let mut round = 0u8;
    for ((label, q, range), e) in queries.iter().zip(engine_ms) {
        let path = path(q, *range, t);
        let bytes = get(&mut c, &path)?;
        let mut ms = Vec::new();
        for _ in 0..runs {
            let t0 = Instant::now();
            get(&mut c, &path)?;
            ms.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        let h = median(&mut ms);
        let mut cold = Vec::new();
        for _ in 0..runs {
            flush_caches(&mut flush, &mut round);
            let t0 = Instant::now();
            get(&mut c, &path)?;
            cold.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        println!(
            "{label}: engine {e:.3} ms, HTTP {h:.3} ms (+{:.3} ms, {bytes} bytes), HTTP with caches flushed {:.3} ms",
            h - e,
            median(&mut cold)
        );
    }
    Ok(())
}

/// Writes one byte of every cache line of `flush` (a new value each
/// `round`), so the next query starts with the CPU caches cold.
fn flush_caches(flush: &mut [u8], round: &mut u8) {
    *round = round.wrapping_add(1);
    for b in flush.iter_mut().step_by(64) {
        *b = *round;
    }
    std::hint::black_box(&*flush);
}

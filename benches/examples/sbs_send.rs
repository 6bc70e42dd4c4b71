//! The sending half of `tsdb-side-by-side` alone: the same data and cut,
//! sent through remote_write to a gateway already running at `addr`, so a
//! change to the gateway's memory can be measured on the real server
//! (read its `VmRSS` after this returns) without a Prometheus beside it.
//!
//! ```text
//! cargo run --release -p canopy-benches --example sbs_send -- ADDR [nodes] [minutes]
//! ```
//!
//! `SBS_INTERVAL_S=1` samples every second instead of every 15 s (the
//! issue's "1 h at 1 s"; `tsdb-side-by-side --interval`).
#![allow(clippy::print_stdout)]

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use canopy_benches::sidebyside::{data, send};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let addr = args
        .get(1)
        .context("usage: sbs_send ADDR [nodes] [minutes]")?
        .parse()?;
    let arg = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (nodes, minutes) = (arg(2, 1000), arg(3, 65));
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as i64;
    let (spec, cut) = data::set_at_interval(nodes, minutes, data::interval_from_env(), now_ms);
    let bodies = data::bodies(&spec, &cut)?;
    // As the side-by-side: a sender leads the slowest by at most 10 min.
    let max_lag = (600 / (15 * cut.steps_per_request)).max(1);
    let r = send::send_all(addr, &bodies, max_lag)?;
    println!(
        "{} series, {} samples in {} requests: {:.2} M samples/s",
        spec.series(),
        r.samples,
        r.requests,
        r.rate() / 1e6
    );
    Ok(())
}

//! One leaf's ticks without sockets, for profiling: this host's collectors
//! plus simulated Slurm jobs, fed to the codec's `Sender` and encoded for one
//! link, as `canopy node`'s sampler does, on virtual 1 s ticks.
//!
//! ```sh
//! cargo build --release -p canopy-leaf --example tick_cost
//! valgrind --tool=callgrind target/release/examples/tick_cost 121 50   # [zstd level] [window log]
//! ```
//! Instructions per tick: (count at N ticks - count at 1 tick) / (N - 1).
//! Prints the bytes encoded per tick and per keyframe on stderr. With
//! `TICK_COST_OUT=FILE` it also writes every record to FILE (to check that
//! an encoder change leaves the bytes as they were: `cmp` two runs, with
//! `TICK_COST_SIM_ONLY=1` so the host's collectors do not run).
//! With `TICK_COST_EVICT=MIB` it writes a buffer of that many MiB between
//! ticks (what other processes do to the caches while a leaf sleeps a
//! second) and prints the median time of a tick on stderr: a real leaf's
//! ticks run with cold caches, where instruction counts understate what
//! the memory a tick touches costs.
#![allow(clippy::print_stderr)]

use std::path::Path;

use canopy_leaf::collect::{Observation, Sink};
use canopy_leaf::sim::SimJobs;
use canopy_leaf::{Collector, host_collectors};
use canopy_proto::codec::{BoundsPolicy, CodecConfig, LinkDecoder, LinkEncoder, Sender};

fn main() {
    let mut args = std::env::args().skip(1);
    let ticks: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(121);
    let jobs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(50);
    let level: Option<i32> = args.next().and_then(|a| a.parse().ok());
    let window_log: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(18);
    // `TICK_COST_SIM_ONLY`: the simulated jobs alone, a stream that is the
    // same on every run (the host's is not).
    let mut collectors: Vec<Box<dyn Collector + Send>> =
        if std::env::var_os("TICK_COST_SIM_ONLY").is_some() {
            Vec::new()
        } else {
            host_collectors(
                "bench-leaf",
                Path::new("/proc"),
                Path::new("/sys/fs/cgroup"),
            )
        };
    if jobs > 0 {
        collectors.push(Box::new(SimJobs::new("bench-leaf", 0x5eed, jobs)));
    }
    let mut codec = CodecConfig {
        window_log,
        ..CodecConfig::default()
    };
    if let Some(l) = level {
        codec.zstd_level = l;
    }
    let mut sender = Sender::new(BoundsPolicy::default());
    let src = sender.source("bench-leaf", 1000);
    let Ok(mut enc) = LinkEncoder::new(&codec) else {
        eprintln!("no encoder");
        return;
    };
    let Ok(mut dec) = LinkDecoder::new(&codec) else {
        eprintln!("no decoder");
        return;
    };
    let decode = std::env::var_os("TICK_COST_DECODE").is_some();
    let mut dump = std::env::var_os("TICK_COST_OUT").map(|_| Vec::new());
    let mut obs: Vec<Observation> = Vec::new();
    let mut out = Vec::new();
    let (mut bytes, mut key_bytes, mut keys) = (0usize, 0usize, 0usize);
    let t0: i64 = 1_700_000_000_000;
    let evict_mib: usize = std::env::var("TICK_COST_EVICT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut evict = vec![0u8; evict_mib << 20];
    let mut times = Vec::with_capacity(ticks);
    for i in 0..ticks {
        if evict_mib > 0 {
            for (k, b) in evict.iter_mut().step_by(64).enumerate() {
                *b = b.wrapping_add(k as u8);
            }
            std::hint::black_box(&evict);
        }
        let started = std::time::Instant::now();
        let ts = t0 + 1000 * i as i64;
        if let Err(e) = tick(
            &mut sender,
            src,
            &mut collectors,
            &mut obs,
            &mut enc,
            ts,
            &mut out,
        ) {
            eprintln!("encode: {e}");
            return;
        }
        if let Some(d) = dump.as_mut() {
            d.extend_from_slice(&out);
        }
        if i == 0 {
            eprintln!("first frame {} B", out.len());
        } else if i % 60 == 0 {
            keys += 1;
            key_bytes += out.len();
        } else {
            bytes += out.len();
        }
        if decode {
            let Ok(Some((len, pre))) = canopy_proto::codec::record::read_prefix(&out, usize::MAX)
            else {
                eprintln!("bad record");
                return;
            };
            if let Err(e) = dec.decode(&out[pre..pre + len]) {
                eprintln!("decode: {e}");
                return;
            }
        }
        times.push(started.elapsed());
    }
    if evict_mib > 0 && ticks > 2 {
        // Steady delta ticks only (not the first, not keyframes).
        let mut t: Vec<_> = times
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 60 != 0)
            .map(|(_, d)| d.as_secs_f64() * 1e6)
            .collect();
        t.sort_by(f64::total_cmp);
        eprintln!(
            "tick time with {evict_mib} MiB written between ticks: median {:.1} us, p25 {:.1}, p75 {:.1}",
            t[t.len() / 2],
            t[t.len() / 4],
            t[t.len() * 3 / 4]
        );
    }
    if let (Some(d), Some(path)) = (dump, std::env::var_os("TICK_COST_OUT"))
        && let Err(e) = std::fs::write(&path, d)
    {
        eprintln!("writing {}: {e}", path.to_string_lossy());
    }
    let deltas = ticks - keys;
    eprintln!(
        "{ticks} ticks, {} series: {keys} keyframes, {:.0} B each; {:.1} B per delta frame",
        sender.table().iter().count(),
        key_bytes as f64 / keys.max(1) as f64,
        bytes as f64 / deltas.max(1) as f64
    );
}

/// One tick: collect, record, encode into `out` (cleared first), end the
/// tick. Out of line and named, so callgrind can count ticks alone
/// (`--toggle-collect='tick_cost::tick'`) apart from the eviction pass.
#[inline(never)]
fn tick(
    sender: &mut Sender,
    src: u32,
    collectors: &mut [Box<dyn Collector + Send>],
    obs: &mut Vec<Observation>,
    enc: &mut LinkEncoder,
    ts: i64,
    out: &mut Vec<u8>,
) -> Result<(), canopy_proto::codec::CodecError> {
    obs.clear();
    sender.begin_tick(ts);
    sender.tick_source(src, ts);
    for c in collectors.iter_mut() {
        c.set_tick_time(ts);
        let _ = c.collect_into(&mut Sink::new(sender, src, obs));
    }
    for o in obs.iter() {
        sender.observe(src, &o.labels, o.kind, o.value);
    }
    let (table, cs) = sender.finish_tick();
    out.clear();
    let r = enc.encode(table, cs, out);
    sender.end_tick();
    r
}

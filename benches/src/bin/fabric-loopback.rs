//! `fabric-loopback`: a real Canopy tree on this host, checked against
//! `fabric-sim` at the same N and metric mix in the same run.
//!
//! It plans `cn[000001-N]` with `canopy plan --loopback --emit-configs`,
//! starts one `canopy gateway` and N `canopy node --sim-node CPUS`
//! processes (each reports a simulated Slurm node plus the synthetic tick
//! counter, the mix of every `fabric-sim` node, under the same names and
//! seed), lets them warm up, and measures one window: gateway and node CPU
//! from `/proc/<pid>/stat` and `schedstat`, bytes per uplink from each
//! node's `/metrics`, freshness from the gateway's
//! `canopy_gateway_freshness_seconds`, and the tick counter of every node
//! as the gateway stored it (every step +1, one tick apart). Then it stops
//! the processes, runs `fabric-sim` in-process with the same plan, and
//! prints both side by side with their ratio.
#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use canopy_benches::fabric::{self, LinkBytes, SimConfig};
use canopy_benches::host;
use canopy_benches::loopback::{self, RealFigures};
use canopy_benches::overhead::{procfs, scrape};
use canopy_benches::procs::{self, Procs};
use clap::Parser;

#[derive(Parser)]
#[command(
    about = "A real Canopy tree on loopback, measured as fabric-sim measures it, beside fabric-sim"
)]
struct Cli {
    /// The canopy binary (default: `canopy` next to this program).
    #[arg(long)]
    canopy: Option<PathBuf>,
    /// Nodes N (processes).
    #[arg(long, default_value_t = 64)]
    nodes: usize,
    /// Subtrees K.
    #[arg(long, default_value_t = 8)]
    subtrees: usize,
    /// Replicas R.
    #[arg(long, default_value_t = 2)]
    replicas: usize,
    /// CPUs of each simulated node.
    #[arg(long, default_value_t = 64)]
    cpus: u32,
    /// Warm-up before the window, s.
    #[arg(long, default_value_t = 20)]
    warmup: u64,
    /// Length of the measured window, s.
    #[arg(long, default_value_t = 60)]
    secs: u64,
    /// Leaf ticks of the fabric-sim run.
    #[arg(long, default_value_t = 40)]
    sim_ticks: u32,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Keep the work directory (configs, logs).
    #[arg(long)]
    keep: bool,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let Some(canopy) = host::canopy_binary(cli.canopy.as_deref()) else {
        bail!(
            "no canopy binary: build it with `cargo build --release -p canopy --bin canopy` or pass --canopy"
        );
    };
    let dir = std::env::temp_dir().join(format!("canopy-fabric-loopback-{}", std::process::id()));
    let real = measure(&cli, &canopy, &dir);
    if cli.keep || real.is_err() {
        eprintln!("work directory kept: {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let real = real?;
    eprintln!("real run done; fabric-sim at the same N next");
    let sim_load0 = host::load_avg();
    let sim = fabric::run(SimConfig {
        nodes: cli.nodes,
        subtrees: cli.subtrees,
        replicas: cli.replicas,
        ticks: cli.sim_ticks,
        cpus: cli.cpus,
        ..SimConfig::default()
    })
    .context("fabric-sim")?;
    let sim_load = format!("{sim_load0}; {}", host::load_avg());
    let rows = loopback::compare(&real, &sim);
    if cli.json {
        let v = serde_json::json!({
            "real": real,
            "sim": sim,
            "sim_load": sim_load,
            "compared": rows,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "fabric-loopback: {} nodes (K={}, R={}), --sim-node {}; real window {:.0} s after {} s warm-up, load {}; fabric-sim {} ticks, load {}",
            cli.nodes,
            cli.subtrees,
            cli.replicas,
            cli.cpus,
            real.secs,
            cli.warmup,
            real.load,
            cli.sim_ticks,
            sim_load
        );
        print!("{}", loopback::table(&rows));
    }
    if real.ticks.exact_nodes != cli.nodes || !sim.exactness.ok() {
        bail!(
            "not exact: real {:?}, sim {} of {} nodes",
            real.ticks,
            sim.exactness.exact_nodes,
            sim.exactness.nodes
        );
    }
    Ok(())
}

/// One reading of every process: CPU, and the `/metrics` texts.
struct Reading {
    at: Instant,
    gateway_ticks: u64,
    node_ns: Vec<u64>,
    gateway_text: String,
    node_texts: Vec<String>,
}

fn get_text(addr: SocketAddr, path: &str) -> Result<String> {
    let body = scrape::get(addr, path, Duration::from_secs(10))?;
    Ok(String::from_utf8_lossy(&body).into_owned())
}

fn read_all(gw: (u32, SocketAddr), nodes: &[(u32, SocketAddr)]) -> Result<Reading> {
    let at = Instant::now();
    let gateway_ticks = procfs::read_cpu(gw.0)?.ticks;
    let node_ns = nodes
        .iter()
        .map(|&(p, _)| procfs::read_cpu(p).map(|c| c.sched_ns()))
        .collect::<Result<Vec<_>>>()?;
    let gateway_text = get_text(gw.1, "/metrics")?;
    let node_texts = nodes
        .iter()
        .map(|&(_, a)| get_text(a, "/metrics"))
        .collect::<Result<Vec<_>>>()?;
    Ok(Reading {
        at,
        gateway_ticks,
        node_ns,
        gateway_text,
        node_texts,
    })
}

fn measure(cli: &Cli, canopy: &Path, dir: &Path) -> Result<RealFigures> {
    let n = cli.nodes;
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    let base = procs::free_udp_run(u16::try_from(n + 1).context("too many nodes")?)?;
    let hosts = format!("cn[000001-{n:06}]");
    let out = Command::new(canopy)
        .args(["plan", "--hosts", &hosts, "--loopback"])
        .arg("--subtrees")
        .arg(cli.subtrees.to_string())
        .arg("--replicas")
        .arg(cli.replicas.to_string())
        .arg("--base-port")
        .arg(base.to_string())
        .arg("--emit-configs")
        .arg(dir)
        .output()
        .context("running canopy plan")?;
    if !out.status.success() {
        bail!(
            "canopy plan failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut ps = Procs::default();
    let gw_pid = ps.spawn(
        "gateway",
        Command::new(canopy)
            .arg("gateway")
            .arg("--config")
            .arg(dir.join("gateway.toml"))
            .args(["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
            .stdout(Stdio::piped()),
        &dir.join("gateway.log"),
    )?;
    let http = procs::read_gateway_http_addr(ps.last_stdout().context("gateway stdout")?)?;
    let mut nodes = Vec::with_capacity(n);
    for i in 0..n {
        let name = fabric::host_name(i);
        let metrics = procs::free_tcp()?;
        let pid = ps.spawn(
            &name,
            Command::new(canopy)
                .arg("node")
                .arg("--config")
                .arg(dir.join(format!("{name}.toml")))
                .arg("--sim-node")
                .arg(cli.cpus.to_string())
                .arg("--metrics")
                .arg(metrics.to_string())
                .stdout(Stdio::null()),
            &dir.join(format!("{name}.log")),
        )?;
        nodes.push((pid, metrics));
    }
    std::thread::sleep(Duration::from_secs(cli.warmup));
    ps.check_alive()?;
    let load0 = host::load_avg();
    let r0 = read_all((gw_pid, http), &nodes)?;
    std::thread::sleep(Duration::from_secs(cli.secs));
    let r1 = read_all((gw_pid, http), &nodes)?;
    let load1 = host::load_avg();
    let end_ms = unix_ms();
    ps.check_alive()?;
    let secs = r1.at.duration_since(r0.at).as_secs_f64();
    let tck = procfs::clk_tck() as f64;
    let gw_cpu_s = (r1.gateway_ticks - r0.gateway_ticks) as f64 / tck;
    let node_us: Vec<f64> = r0
        .node_ns
        .iter()
        .zip(&r1.node_ns)
        .map(|(a, b)| b.saturating_sub(*a) as f64 / 1000.0 / secs)
        .collect();
    let mut links = LinkBytes::default();
    for (a, b) in r0.node_texts.iter().zip(&r1.node_texts) {
        for bps in loopback::uplink_rates(a, b, secs) {
            links.add(bps);
        }
    }
    let delta =
        |name: &str| loopback::sum(&r1.gateway_text, name) - loopback::sum(&r0.gateway_text, name);
    let appended = delta("canopy_gateway_samples_appended_total");
    let (p50, p99, mean) = loopback::window_freshness(&r0.gateway_text, &r1.gateway_text);
    let tick_ms = 1000;
    let ticks = tick_samples(http, cli.secs, end_ms)?;
    let min_samples = usize::try_from(cli.secs.saturating_sub(2)).unwrap_or(0);
    Ok(RealFigures {
        nodes: n,
        secs,
        gateway_cpu_ms_per_s: gw_cpu_s * 1000.0 / secs,
        gateway_samples_per_s: appended / secs,
        gateway_ns_per_sample: if appended > 0.0 {
            gw_cpu_s * 1e9 / appended
        } else {
            0.0
        },
        gateway_in_bytes_per_s: delta("canopy_gateway_frame_bytes_in_total") / secs,
        node_cpu_mean_us_per_s: node_us.iter().sum::<f64>() / n.max(1) as f64,
        node_cpu_max_us_per_s: node_us.iter().copied().fold(0.0, f64::max),
        links,
        fresh_p50_ms: p50,
        fresh_p99_ms: p99,
        fresh_mean_ms: mean,
        fresh_p50_since_start_ms: loopback::sum(
            &r1.gateway_text,
            "canopy_gateway_freshness_p50_seconds",
        ) * 1000.0,
        fresh_p99_since_start_ms: loopback::sum(
            &r1.gateway_text,
            "canopy_gateway_freshness_p99_seconds",
        ) * 1000.0,
        ticks: loopback::check_ticks(&ticks, tick_ms, min_samples),
        load: format!("{load0}; {load1}"),
    })
}

fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Every raw sample of each node's tick counter in the `secs` before
/// `end_ms`, as the gateway stored them (a range selector: no lookback
/// filling), per node in time order.
fn tick_samples(
    http: SocketAddr,
    secs: u64,
    end_ms: i64,
) -> Result<BTreeMap<String, Vec<(i64, f64)>>> {
    let path = format!(
        "/api/v1/query?query=canopy_synthetic_ticks_total%5B{secs}s%5D&time={:.3}",
        end_ms as f64 / 1000.0
    );
    let body = get_text(http, &path)?;
    let v: serde_json::Value = serde_json::from_str(&body).context("gateway answer")?;
    let mut out = BTreeMap::new();
    let series = v["data"]["result"]
        .as_array()
        .with_context(|| format!("no result in {body:.200}"))?;
    for s in series {
        let node = s["metric"]["node"].as_str().unwrap_or("").to_string();
        let mut pts = Vec::new();
        for p in s["values"].as_array().into_iter().flatten() {
            let (Some(t), Some(x)) = (
                p[0].as_f64(),
                p[1].as_str().and_then(|x| x.parse::<f64>().ok()),
            ) else {
                bail!("bad point {p} for {node}");
            };
            pts.push(((t * 1000.0).round() as i64, x));
        }
        out.insert(node, pts);
    }
    Ok(out)
}

//! `leaf-overhead`: a Canopy leaf's CPU and memory next to Debian's
//! `prometheus-node-exporter`, on this host, in the same run.
//!
//! The nodes run the lean `canopy-node` binary (the node role alone, what
//! a compute node runs): the `node` profile's build
//! (`cargo build --profile node -p canopy --bin canopy-node`, in
//! `target/node/`) when there is one, else the one next to `canopy`, else
//! `canopy node` (`--node-binary full` forces the multi-role binary).
//!
//! Each run starts fresh processes: a `canopy gateway` and a `canopy node`
//! from the configs of `canopy plan --emit-configs --loopback` (the leaf
//! samples this host plus `--sim-jobs` simulated Slurm jobs of 40 series at
//! a 1 s tick and sends its frames over QUIC to the gateway), a second node
//! that samples the host only (for context), and `prometheus-node-exporter`,
//! which this program scrapes over HTTP every second. After a warm-up it
//! checks that the leaf's series reached the gateway, then measures one
//! window: CPU from the threads' `/proc/<pid>/task/*/schedstat` run time
//! (ns; utime + stime in 10 ms clock ticks beside it as a cross-check),
//! and peak RSS from VmHWM. Medians over the runs are
//! reported as a table or JSON.
#![allow(clippy::print_stdout)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use canopy_benches::host::{self, find_exe};
use canopy_benches::overhead::{self, Row, Window, procfs, scrape};
use canopy_benches::procs::{Procs, free_tcp, free_udp_run, read_gateway_http_addr};
use clap::Parser;

#[derive(Parser)]
#[command(about = "A Canopy leaf's CPU and peak RSS next to prometheus-node-exporter")]
struct Cli {
    /// The canopy binary (default: `canopy` next to this program).
    #[arg(long)]
    canopy: Option<PathBuf>,
    /// The nodes' binary: `lean` (`canopy-node` of the `node` profile,
    /// `target/node/`, else next to `canopy`, falling back to `canopy node`
    /// when both are absent), `full` (`canopy node`), or a path to a
    /// `canopy-node` binary.
    #[arg(long, default_value = "lean")]
    node_binary: String,
    /// The node exporter (default: `prometheus-node-exporter` on PATH).
    #[arg(long, default_value = "prometheus-node-exporter")]
    node_exporter: String,
    /// Runs, each with fresh processes and one measurement window.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Length of each measurement window, seconds.
    #[arg(long, default_value_t = 60)]
    secs: u64,
    /// Warm-up before each window, seconds.
    #[arg(long, default_value_t = 10)]
    warmup: u64,
    /// Simulated jobs on the leaf (40 series each).
    #[arg(long, default_value_t = 50)]
    sim_jobs: usize,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Keep the work directory (configs, logs) instead of removing it.
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
    let exporter = find_exe(&cli.node_exporter).with_context(|| {
        format!(
            "{} not found: install it with `apt-get install -y prometheus-node-exporter` or pass --node-exporter",
            cli.node_exporter
        )
    })?;
    let dir = std::env::temp_dir().join(format!("canopy-leaf-overhead-{}", std::process::id()));
    let node = node_command(&cli.node_binary, &canopy)?;
    let result = measure(&cli, &canopy, &node, &exporter, &dir);
    if cli.keep || result.is_err() {
        eprintln!("work directory kept: {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let (rows, settings) = result?;
    let v = overhead::verdict(&rows[0], &rows[1]);
    if cli.json {
        println!("{}", overhead::json(&rows, &v, &settings));
    } else {
        let node_bin = settings
            .iter()
            .find(|s| s.0 == "node_binary")
            .map_or("", |s| s.1.as_str());
        let slurm = if slurm_cgroups() {
            "Slurm cgroups present (jobs from them)"
        } else {
            "no Slurm cgroup (the leaf probes /proc for linuxproc jobs every 10 ticks)"
        };
        let header = format!(
            "leaf-overhead: nodes run `{node_bin}`; {slurm}; {} runs x {} s (after {} s warm-up), 1 s tick and 1 s scrapes, medians over runs; {} CPUs, load {}",
            cli.runs,
            cli.secs,
            cli.warmup,
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            host::load_avg()
        );
        print!("{}", overhead::table(&rows, &v, &header));
    }
    Ok(())
}

/// Whether this host has a Slurm cgroup v1 hierarchy (`slurm*` under the
/// memory or cpuacct controller), which changes what the leaf's job
/// collector reads each tick, so results say which case they measured.
fn slurm_cgroups() -> bool {
    ["memory", "cpuacct"].iter().any(|c| {
        std::fs::read_dir(Path::new("/sys/fs/cgroup").join(c)).is_ok_and(|rd| {
            rd.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("slurm"))
        })
    })
}

/// How the nodes start: a program and the arguments before `--config`.
struct NodeCmd {
    program: PathBuf,
    args: Vec<&'static str>,
}

impl NodeCmd {
    fn command(&self) -> Command {
        let mut c = Command::new(&self.program);
        c.args(&self.args);
        c
    }

    fn describe(&self) -> String {
        // The path, so a table says which build ran (target/node or release).
        let name = self.program.display().to_string();
        std::iter::once(name)
            .chain(self.args.iter().map(|a| a.to_string()))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The nodes' binary from `--node-binary` (see [`Cli`]).
fn node_command(choice: &str, canopy: &Path) -> Result<NodeCmd> {
    let full = NodeCmd {
        program: canopy.to_path_buf(),
        args: vec!["node"],
    };
    let lean = |p: PathBuf| NodeCmd {
        program: p,
        args: Vec::new(),
    };
    Ok(match choice {
        "full" => full,
        "lean" => {
            // target/release/canopy -> target/node/canopy-node first.
            let profile = canopy
                .parent()
                .and_then(Path::parent)
                .map(|t| t.join("node").join("canopy-node"));
            let sibling = canopy.with_file_name("canopy-node");
            match profile.into_iter().chain([sibling]).find(|p| p.is_file()) {
                Some(p) => lean(p),
                None => {
                    eprintln!(
                        "no canopy-node (build it with `cargo build --profile node -p canopy --bin canopy-node`): the nodes run `canopy node`"
                    );
                    full
                }
            }
        }
        path => {
            let p = PathBuf::from(path);
            if !p.is_file() {
                bail!("--node-binary {path}: not a file (lean, full or a path)");
            }
            lean(p)
        }
    })
}

/// Scrapes `addr` every second until `stop`; counts scrapes, failures and
/// the samples of the last page.
struct Scraper {
    ok: AtomicU64,
    failed: AtomicU64,
    samples: AtomicU64,
    stop: AtomicBool,
}

fn spawn_scraper(addr: SocketAddr) -> (Arc<Scraper>, std::thread::JoinHandle<()>) {
    let s = Arc::new(Scraper {
        ok: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        samples: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let t = s.clone();
    let h = std::thread::spawn(move || {
        let start = Instant::now();
        let mut k = 0u32;
        while !t.stop.load(Ordering::Relaxed) {
            match scrape::get(addr, "/metrics", Duration::from_secs(5)) {
                Ok(body) => {
                    t.ok.fetch_add(1, Ordering::Relaxed);
                    t.samples
                        .store(scrape::count_samples(&body) as u64, Ordering::Relaxed);
                }
                Err(_) => {
                    t.failed.fetch_add(1, Ordering::Relaxed);
                }
            }
            k += 1;
            let next = start + Duration::from_secs(u64::from(k));
            if let Some(d) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(d);
            }
        }
    });
    (s, h)
}

/// Series of `node` the gateway holds now.
fn gateway_series(http: SocketAddr, node: &str) -> Result<usize> {
    let path = format!("/api/v1/query?query=count(%7Bnode%3D%22{node}%22%7D)");
    let body = scrape::get(http, &path, Duration::from_secs(5))?;
    let text = String::from_utf8_lossy(&body);
    // {"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[t,"N"]}]}}
    let Some(i) = text.find("\"value\":[") else {
        return Ok(0);
    };
    let rest = &text[i..];
    let n = rest
        .split('"')
        .nth(3)
        .with_context(|| format!("gateway answer {text}"))?;
    n.parse::<f64>()
        .map(|x| x as usize)
        .with_context(|| format!("gateway answer {text}"))
}

type Measured = (Vec<Row>, Vec<(&'static str, String)>);

fn measure(
    cli: &Cli,
    canopy: &Path,
    node: &NodeCmd,
    exporter: &Path,
    dir: &Path,
) -> Result<Measured> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    // Three consecutive ports: the gateway and two nodes.
    let base = free_udp_run(3)?;
    let out = Command::new(canopy)
        .args(["plan", "--hosts", "bench-leaf,bench-bare"])
        .args(["--subtrees", "2", "--replicas", "1", "--loopback"])
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
    let tck = procfs::clk_tck();
    let names = [
        format!("leaf (this host + {} sim jobs)", cli.sim_jobs),
        "prometheus-node-exporter (1 s scrapes)".to_string(),
        "leaf (this host only), context".to_string(),
        "gateway (receiver), context".to_string(),
    ];
    let mut rows: Vec<Row> = names
        .iter()
        .enumerate()
        .map(|(i, n)| Row {
            name: n.clone(),
            series: 0,
            measured: i < 2,
            windows: Vec::new(),
        })
        .collect();
    for run in 0..cli.runs {
        let mut procs = Procs::default();
        let gw_pid = procs.spawn(
            "gateway",
            Command::new(canopy)
                .arg("gateway")
                .arg("--config")
                .arg(dir.join("gateway.toml"))
                .args(["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
                .stdout(Stdio::piped()),
            &dir.join(format!("gateway-{run}.log")),
        )?;
        let stdout = procs.last_stdout().context("gateway stdout")?;
        let http = read_gateway_http_addr(stdout)?;
        let leaf_pid = procs.spawn(
            "leaf",
            node.command()
                .arg("--config")
                .arg(dir.join("bench-leaf.toml"))
                .arg("--sim-jobs")
                .arg(cli.sim_jobs.to_string())
                .stdout(Stdio::null()),
            &dir.join(format!("leaf-{run}.log")),
        )?;
        let bare_pid = procs.spawn(
            "bare leaf",
            node.command()
                .arg("--config")
                .arg(dir.join("bench-bare.toml"))
                .stdout(Stdio::null()),
            &dir.join(format!("bare-{run}.log")),
        )?;
        let ne_addr = free_tcp()?;
        let ne_pid = procs.spawn(
            "node exporter",
            Command::new(exporter)
                .arg(format!("--web.listen-address={ne_addr}"))
                .stdout(Stdio::null()),
            &dir.join(format!("node-exporter-{run}.log")),
        )?;
        std::thread::sleep(Duration::from_millis(500));
        let (scraper, handle) = spawn_scraper(ne_addr);
        std::thread::sleep(Duration::from_secs(cli.warmup));
        procs.check_alive()?;
        let leaf_series = gateway_series(http, "bench-leaf")?;
        let want = cli.sim_jobs * canopy_leaf::sim::SERIES_PER_JOB;
        if leaf_series < want {
            bail!(
                "the gateway holds {leaf_series} series of the leaf after the warm-up, expected over {want}: its frames do not arrive"
            );
        }
        rows[0].series = leaf_series;
        rows[2].series = gateway_series(http, "bench-bare")?;
        let pids = [leaf_pid, ne_pid, bare_pid, gw_pid];
        let before: Vec<_> = pids
            .iter()
            .map(|&p| procfs::read_cpu(p))
            .collect::<Result<_>>()?;
        let (ok0, fail0) = (
            scraper.ok.load(Ordering::Relaxed),
            scraper.failed.load(Ordering::Relaxed),
        );
        let t0 = Instant::now();
        std::thread::sleep(Duration::from_secs(cli.secs));
        let after: Vec<_> = pids
            .iter()
            .map(|&p| procfs::read_cpu(p))
            .collect::<Result<_>>()?;
        let secs = t0.elapsed().as_secs_f64();
        procs.check_alive()?;
        for (i, &p) in pids.iter().enumerate() {
            let w = Window::from_readings(
                &before[i],
                &after[i],
                secs,
                tck,
                procfs::read_status_bytes(p, "VmHWM")?,
                procfs::read_status_bytes(p, "VmRSS")?,
                procfs::read_status_bytes(p, "RssAnon")?,
            );
            if w.exited_threads > 0 {
                eprintln!(
                    "run {}: {}: {} thread(s) exited in the window; its schedstat CPU misses their last run time (ticks: {:.3} %)",
                    run + 1,
                    rows[i].name,
                    w.exited_threads,
                    w.tick_pct
                );
            }
            rows[i].windows.push(w);
        }
        let scrapes = scraper.ok.load(Ordering::Relaxed) - ok0;
        let failed = scraper.failed.load(Ordering::Relaxed) - fail0;
        rows[1].series = scraper.samples.load(Ordering::Relaxed) as usize;
        scraper.stop.store(true, Ordering::Relaxed);
        let _ = handle.join();
        if failed > 0 || scrapes + 2 < cli.secs {
            bail!("node exporter scrapes: {scrapes} ok, {failed} failed in {secs:.0} s");
        }
        eprintln!(
            "run {}/{}: leaf {:.3} % ({} series at the gateway), node exporter {:.3} % ({scrapes} scrapes of {} samples)",
            run + 1,
            cli.runs,
            rows[0].windows[run].cpu_pct,
            leaf_series,
            rows[1].windows[run].cpu_pct,
            rows[1].series
        );
    }
    let settings = vec![
        ("runs", cli.runs.to_string()),
        ("window_secs", cli.secs.to_string()),
        ("warmup_secs", cli.warmup.to_string()),
        ("sim_jobs", cli.sim_jobs.to_string()),
        ("tick_secs", "1".into()),
        ("scrape_interval_secs", "1".into()),
        ("clk_tck", tck.to_string()),
        ("node_exporter", exporter.display().to_string()),
        ("node_binary", node.describe()),
        ("slurm_cgroups", slurm_cgroups().to_string()),
    ];
    Ok((rows, settings))
}

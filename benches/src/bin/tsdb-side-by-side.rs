//! `tsdb-side-by-side`: the Canopy gateway next to a real Prometheus 2.42,
//! in one run, on the same data.
//!
//! Each run generates Canopy-shaped series ending at about now (see
//! `canopy_benches::sidebyside::data`), encodes them once into remote_write
//! bodies, and starts three fresh processes: `canopy gateway` in memory,
//! `canopy gateway --data-dir` (write-ahead log, so its cost shows), and
//! `prometheus --web.enable-remote-write-receiver` on a temp TSDB. The same
//! bodies go to each in turn (the order rotates between runs) from a few
//! concurrent senders; then resident memory, and the latency of three
//! queries repeated over the same HTTP client, interleaved between servers
//! (at the data's end, or with `--spread` at times spread before it, so
//! that windows start at every place in the servers' chunks).
//! Every answer of Canopy is checked against Prometheus's before any time
//! counts. Medians over the runs are printed as a Markdown table.
#![allow(clippy::print_stdout)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use canopy_benches::host::{self, find_exe};
use canopy_benches::overhead::procfs;
use canopy_benches::procs::{Procs, free_tcp, read_gateway_http_addr};
use canopy_benches::sidebyside::answer::{self, Answer};
use canopy_benches::sidebyside::data::{self, Cut, DataSpec, IO_READ};
use canopy_benches::sidebyside::http::{Conn, urlencode};
use canopy_benches::sidebyside::report::{self, Latency, Measured};
use canopy_benches::sidebyside::send;
use clap::Parser;

#[derive(Parser)]
#[command(about = "The Canopy gateway next to Prometheus 2.42: ingest, memory, query latency")]
struct Cli {
    /// The canopy binary (default: `canopy` next to this program).
    #[arg(long)]
    canopy: Option<PathBuf>,
    /// The Prometheus binary.
    #[arg(long, default_value = "prometheus")]
    prometheus: String,
    /// Nodes.
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    /// Series per node.
    #[arg(long, default_value_t = 100)]
    series_per_node: usize,
    /// Nodes per Slurm job (the `job_id` label).
    #[arg(long, default_value_t = 8)]
    nodes_per_job: usize,
    /// Time covered, ending now, e.g. `65m` (at least 1h + 1m + one
    /// interval, so the 1 h range query has full windows).
    #[arg(long, default_value = "65m")]
    duration: String,
    /// Sample interval, whole seconds, e.g. `15s`.
    #[arg(long, default_value = "15s")]
    interval: String,
    /// Concurrent remote_write senders.
    #[arg(long, default_value_t = 4)]
    senders: usize,
    /// Nodes per request.
    #[arg(long, default_value_t = 10)]
    nodes_per_request: usize,
    /// Steps (samples per series) per request.
    #[arg(long, default_value_t = 4)]
    steps_per_request: usize,
    /// Runs, each with fresh processes and freshly generated data.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Repetitions of each query per server and run.
    #[arg(long, default_value_t = 20)]
    reps: usize,
    /// Spread the queries' evaluation times over this span before the
    /// data's end, e.g. `240s` (repetition r at end - r x span / reps,
    /// whole seconds; every time's answers are checked): a query's cost
    /// depends on where its window starts in the servers' chunks, so one
    /// time measures one alignment. Default 0: all at the end.
    #[arg(long, default_value = "0s")]
    spread: String,
    /// Seed of the data.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where the data directories and logs go (default: the temp dir);
    /// `/dev/shm` keeps disk speed out of the comparison.
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Keep the work directory (logs, data) instead of removing it.
    #[arg(long)]
    keep: bool,
}

/// Parses `90`, `15s`, `65m`, `2h` into seconds.
fn secs(what: &str, s: &str) -> Result<i64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('s') => (&s[..s.len() - 1], 1),
        Some('m') => (&s[..s.len() - 1], 60),
        Some('h') => (&s[..s.len() - 1], 3600),
        _ => (s, 1),
    };
    let n: i64 = num
        .parse()
        .with_context(|| format!("{what}: {s:?} is not a duration like 15s, 65m, 2h"))?;
    if n <= 0 {
        bail!("{what}: {s:?} must be positive");
    }
    Ok(n * mult)
}

/// A server under test.
struct Server {
    name: &'static str,
    pid: u32,
    addr: SocketAddr,
    is_prometheus: bool,
}

fn start_canopy(
    procs: &mut Procs,
    canopy: &Path,
    dir: &Path,
    name: &'static str,
    data_dir: Option<&Path>,
    retention_secs: i64,
) -> Result<Server> {
    let mut cmd = Command::new(canopy);
    cmd.args(["gateway", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
        .arg("--retention")
        .arg(format!("{retention_secs}s"))
        .stdout(Stdio::piped());
    if let Some(d) = data_dir {
        cmd.arg("--data-dir").arg(d);
    }
    let pid = procs.spawn(name, &mut cmd, &dir.join(format!("{name}.log")))?;
    let stdout = procs.last_stdout().context("gateway stdout")?;
    Ok(Server {
        name,
        pid,
        addr: read_gateway_http_addr(stdout)?,
        is_prometheus: false,
    })
}

fn start_prometheus(procs: &mut Procs, exe: &Path, dir: &Path) -> Result<Server> {
    let cfg = dir.join("prometheus.yml");
    std::fs::write(
        &cfg,
        "global:\n  evaluation_interval: 1m\n# no scrape_configs: only what remote_write brings\n",
    )?;
    let addr = free_tcp()?;
    let pid = procs.spawn(
        "prometheus",
        Command::new(exe)
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("prom-data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--web.enable-remote-write-receiver")
            .stdout(Stdio::null()),
        &dir.join("prometheus.log"),
    )?;
    let t0 = Instant::now();
    let mut c = Conn::new(addr, Duration::from_secs(5));
    while c.get("/-/ready").map(|r| r.status).ok() != Some(200) {
        procs.check_alive()?;
        if t0.elapsed() > Duration::from_secs(60) {
            bail!("prometheus on {addr} not ready within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(Server {
        name: "prometheus",
        pid,
        addr,
        is_prometheus: true,
    })
}

/// Runs `query` (instant at `time` or range) and returns the body and time.
fn timed_query(c: &mut Conn, q: &Query, t_eval: i64) -> Result<(Vec<u8>, f64)> {
    let path = match q.range {
        None => format!("/api/v1/query?query={}&time={t_eval}", urlencode(&q.expr)),
        Some((secs, step)) => format!(
            "/api/v1/query_range?query={}&start={}&end={t_eval}&step={step}",
            urlencode(&q.expr),
            t_eval - secs
        ),
    };
    let t0 = Instant::now();
    let r = c.get(&path)?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    if r.status != 200 {
        bail!(
            "{} answered {}: {}",
            q.expr,
            r.status,
            String::from_utf8_lossy(&r.body)
        );
    }
    Ok((r.body, ms))
}

struct Query {
    expr: String,
    range: Option<(i64, i64)>,
}

impl Query {
    fn label(&self) -> String {
        match self.range {
            None => self.expr.clone(),
            Some((s, step)) => format!("{} over {} min at {step} s (range)", self.expr, s / 60),
        }
    }
}

fn queries() -> Vec<Query> {
    let sum = format!("sum by (job_id) (rate({IO_READ}[1m]))");
    vec![
        Query {
            expr: sum.clone(),
            range: None,
        },
        Query {
            expr: format!("topk(10, rate({IO_READ}[1m]))"),
            range: None,
        },
        Query {
            expr: sum,
            range: Some((3600, 15)),
        },
    ]
}

/// The one value of an instant query answer, e.g. a `count(...)`.
fn scalar_of(c: &mut Conn, expr: &str, t_eval: i64) -> Result<f64> {
    let q = Query {
        expr: expr.to_string(),
        range: None,
    };
    let (body, _) = timed_query(c, &q, t_eval)?;
    let a = answer::parse(&body)?;
    a.series
        .first()
        .and_then(|(_, p)| p.first())
        .map(|p| p.1)
        .with_context(|| format!("{expr}: empty answer"))
}

fn go_heap(c: &mut Conn) -> Option<f64> {
    let r = c.get("/metrics").ok()?;
    String::from_utf8_lossy(&r.body)
        .lines()
        .find_map(|l| l.strip_prefix("go_memstats_heap_inuse_bytes "))
        .and_then(|v| v.trim().parse().ok())
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let Some(canopy) = host::canopy_binary(cli.canopy.as_deref()) else {
        bail!(
            "no canopy binary: build it with `cargo build --release -p canopy --bin canopy` or pass --canopy"
        );
    };
    let prom = find_exe(&cli.prometheus).with_context(|| {
        format!(
            "{} not found: install Prometheus 2.42 with `.ci/install-tsdbs.sh` (Debian package prometheus) or pass --prometheus",
            cli.prometheus
        )
    })?;
    let dir = cli
        .work_dir
        .clone()
        .unwrap_or_else(std::env::temp_dir)
        .join(format!("canopy-tsdb-side-by-side-{}", std::process::id()));
    let result = run_all(&cli, &canopy, &prom, &dir);
    if cli.keep || result.is_err() {
        eprintln!("work directory kept: {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

/// `--spread` in seconds (0 allowed).
fn spread_of(cli: &Cli) -> Result<i64> {
    if cli.spread.trim().trim_end_matches(['s', 'm', 'h']) == "0" {
        Ok(0)
    } else {
        secs("--spread", &cli.spread)
    }
}

/// The evaluation time of repetition `r` of `reps`: `end` less `r` of
/// `reps` equal parts of `spread`, whole seconds.
fn eval_time(end: i64, spread: i64, r: usize, reps: usize) -> i64 {
    end - spread * r as i64 / reps.max(1) as i64
}

fn run_all(cli: &Cli, canopy: &Path, prom: &Path, dir: &Path) -> Result<()> {
    let interval = secs("--interval", &cli.interval)?;
    let duration = secs("--duration", &cli.duration)?;
    if duration < 3600 + 60 + interval {
        bail!("--duration must cover the 1 h range query plus its 1 m window and one interval");
    }
    if spread_of(cli)? > duration - (3600 + 60 + interval) {
        bail!(
            "--spread leaves the 1 h range query without full windows: at most --duration - 1h - 1m - one interval"
        );
    }
    let cut = Cut {
        senders: cli.senders,
        nodes_per_request: cli.nodes_per_request,
        steps_per_request: cli.steps_per_request,
    };
    // A sender may lead the slowest by at most 10 minutes of data.
    let slice_secs = interval * cli.steps_per_request.max(1) as i64;
    let max_lag = (600 / slice_secs).max(1) as usize;
    let qs = queries();
    let load_start = host::load_avg();
    let mut per: [Vec<Measured>; 3] = Default::default();
    let mut checks = Vec::new();
    let mut spec_used = None;
    for run in 0..cli.runs {
        let now_ms = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as i64;
        let steps = (duration / interval) as usize;
        let spec = DataSpec {
            nodes: cli.nodes,
            series_per_node: cli.series_per_node,
            nodes_per_job: cli.nodes_per_job,
            interval_ms: interval * 1000,
            steps,
            end_ms: (now_ms / 1000 + 1) * 1000,
            seed: cli.seed,
        };
        spec_used = Some(spec);
        let t0 = Instant::now();
        let bodies = data::bodies(&spec, &cut)?;
        let bytes: usize = bodies.iter().flatten().map(|b| b.bytes.len()).sum();
        eprintln!(
            "run {}/{}: {} series x {} samples = {:.1} M samples in {} requests ({:.1} MiB snappy) generated in {:.1} s; load {}",
            run + 1,
            cli.runs,
            spec.series(),
            spec.steps,
            spec.samples() as f64 / 1e6,
            bodies.iter().map(Vec::len).sum::<usize>(),
            bytes as f64 / 1_048_576.0,
            t0.elapsed().as_secs_f64(),
            host::load_avg()
        );
        let run_dir = dir.join(format!("run-{run}"));
        std::fs::create_dir_all(&run_dir)?;
        let (m, c) = one_run(
            cli, canopy, prom, &run_dir, &spec, &bodies, max_lag, run, &qs,
        )?;
        for (i, x) in m.into_iter().enumerate() {
            per[i].push(x);
        }
        checks.push(c);
        let _ = std::fs::remove_dir_all(&run_dir);
    }
    let spec = spec_used.context("no runs")?;
    let med: Vec<Measured> = per.iter().map(|r| report::median_of(r)).collect();
    let pv = Command::new(prom).arg("--version").output().ok();
    let pv = pv
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_string()
        })
        .unwrap_or_default();
    println!(
        "tsdb-side-by-side: {} nodes x {} series = {} series, {} min at {} s = {:.1} M samples; {} senders, {} nodes x {} steps per request; {} runs, {} reps per query (evaluated over the last {} s of the data), medians",
        spec.nodes,
        spec.series_per_node,
        spec.series(),
        duration / 60,
        interval,
        spec.samples() as f64 / 1e6,
        cli.senders,
        cli.nodes_per_request,
        cli.steps_per_request,
        cli.runs,
        cli.reps,
        spread_of(cli)?
    );
    println!(
        "machine: {} CPUs, load {load_start} at start, {} at end; {pv}; canopy {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        host::load_avg(),
        canopy.display()
    );
    println!();
    let labels: Vec<String> = qs.iter().map(Query::label).collect();
    print!("{}", report::table(&med[0], &med[1], &med[2], &labels));
    println!();
    for c in checks.iter().take(1) {
        println!("{c}");
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn one_run(
    cli: &Cli,
    canopy: &Path,
    prom: &Path,
    dir: &Path,
    spec: &DataSpec,
    bodies: &[Vec<data::Body>],
    max_lag: usize,
    run: usize,
    qs: &[Query],
) -> Result<(Vec<Measured>, String)> {
    let tck = procfs::clk_tck() as f64;
    let mut procs = Procs::default();
    let retention = (spec.steps as i64 * spec.interval_ms / 1000 + 3600).max(7200);
    let servers = [
        start_canopy(&mut procs, canopy, dir, "canopy", None, retention)?,
        {
            let wd = dir.join("canopy-data");
            std::fs::create_dir_all(&wd)?;
            start_canopy(
                &mut procs,
                canopy,
                dir,
                "canopy --data-dir",
                Some(&wd),
                retention,
            )?
        },
        start_prometheus(&mut procs, prom, dir)?,
    ];
    std::thread::sleep(Duration::from_millis(500));
    let mut out: Vec<Measured> = servers.iter().map(|_| Measured::default()).collect();
    let mut conns: Vec<Conn> = servers
        .iter()
        .map(|s| Conn::new(s.addr, Duration::from_secs(300)))
        .collect();
    for (i, s) in servers.iter().enumerate() {
        out[i].rss_empty = procfs::read_status_bytes(s.pid, "VmRSS")? as f64;
    }
    // Rotate which server ingests first.
    let mut order: Vec<usize> = (0..servers.len()).collect();
    order.rotate_left(run % servers.len());
    let t_eval = spec.end_ms / 1000;
    for &i in &order {
        let s = &servers[i];
        let c0 = procfs::read_cpu(s.pid)?.ticks;
        let ing = send::send_all(s.addr, bodies, max_lag)
            .with_context(|| format!("remote_write to {}", s.name))?;
        let cpu = (procfs::read_cpu(s.pid)?.ticks - c0) as f64 / tck;
        std::thread::sleep(Duration::from_secs(2));
        procs.check_alive()?;
        let m = &mut out[i];
        m.ingest_rate = ing.rate();
        m.ingest_secs = ing.wall.as_secs_f64();
        m.samples = ing.samples as f64;
        m.ingest_cpu_secs = cpu;
        m.rss = procfs::read_status_bytes(s.pid, "VmRSS")? as f64;
        m.rss_anon = procfs::read_status_bytes(s.pid, "RssAnon")? as f64;
        if s.is_prometheus {
            m.go_heap = go_heap(&mut conns[i]);
        }
        m.series = scalar_of(&mut conns[i], "count({__name__=~\"canopy_.+\"})", t_eval)?;
        eprintln!(
            "  {}: {:.0} k samples/s ({:.1} s wall, {:.1} s CPU), RSS {:.0} MiB, {} series",
            s.name,
            m.ingest_rate / 1e3,
            m.ingest_secs,
            cpu,
            m.rss / 1_048_576.0,
            m.series
        );
        if m.series as usize != spec.series() {
            bail!(
                "{} holds {} series, {} were sent",
                s.name,
                m.series,
                spec.series()
            );
        }
    }
    let prom_i = servers.len() - 1;
    // Correctness first: every answer of Canopy against Prometheus's.
    let window = spec.steps as i64 * spec.interval_ms / 1000 + 60;
    let count_q = format!("sum(count_over_time({IO_READ}[{window}s]))");
    let want = (spec.nodes * spec.steps) as f64;
    let mut check = String::from("answers (Canopy vs Prometheus, values within 1e-9 relative):\n");
    for (i, s) in servers.iter().enumerate() {
        let n = scalar_of(&mut conns[i], &count_q, t_eval)?;
        if n != want {
            bail!(
                "{}: {count_q} = {n}, expected {want} (samples lost or duplicated)",
                s.name
            );
        }
    }
    let spread = spread_of(cli)?;
    let mut times: Vec<i64> = (0..cli.reps)
        .map(|r| eval_time(t_eval, spread, r, cli.reps))
        .collect();
    times.dedup();
    let mut reference: Vec<(i64, Answer)> = Vec::new();
    for &t in &times {
        for q in qs {
            let (b, _) = timed_query(&mut conns[prom_i], q, t)?;
            reference.push((
                t,
                answer::parse(&b).with_context(|| format!("prometheus: {}", q.expr))?,
            ));
        }
    }
    let mut agree: Vec<(usize, usize, f64)> = vec![(0, 0, 0.0); servers.len() * qs.len()];
    for (i, s) in servers.iter().enumerate().take(prom_i) {
        for (k, (t, r)) in reference.iter().enumerate() {
            let q = &qs[k % qs.len()];
            let (b, _) = timed_query(&mut conns[i], q, *t)?;
            let a = answer::parse(&b).with_context(|| format!("{}: {}", s.name, q.expr))?;
            let d = answer::compare(&a, r, 1e-9);
            if !d.agree() {
                bail!(
                    "{} and Prometheus disagree on {} ({} differences, {} points agree):\n  {}",
                    s.name,
                    q.label(),
                    d.differences,
                    d.agreeing,
                    d.problems.join("\n  ")
                );
            }
            let g = &mut agree[i * qs.len() + k % qs.len()];
            (g.0, g.1, g.2) = (g.0 + r.series.len(), g.1 + d.agreeing, g.2.max(d.max_rel));
        }
        for (qi, q) in qs.iter().enumerate() {
            let g = agree[i * qs.len() + qi];
            let at = if times.len() > 1 {
                format!(" (at {} times over {spread} s)", times.len())
            } else {
                String::new()
            };
            check.push_str(&format!(
                "- {}, `{}`{at}: {} series, {} points agree, largest relative difference {:.1e}\n",
                s.name,
                q.label(),
                g.0,
                g.1,
                g.2
            ));
        }
    }
    // Latency: interleaved, the same client for all.
    let mut ms: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); qs.len()]; servers.len()];
    for r in 0..cli.reps {
        let t_r = eval_time(t_eval, spread, r, cli.reps);
        for (qi, q) in qs.iter().enumerate() {
            for (i, _) in servers.iter().enumerate() {
                let (_, t) = timed_query(&mut conns[i], q, t_r)?;
                ms[i][qi].push(t);
            }
        }
    }
    procs.check_alive()?;
    for (i, s) in servers.iter().enumerate() {
        out[i].rss_queried = procfs::read_status_bytes(s.pid, "VmRSS")? as f64;
        out[i].latency = ms[i].iter().map(|x| Latency::of(x)).collect();
        let l: Vec<String> = out[i]
            .latency
            .iter()
            .map(|l| format!("{:.2}/{:.2}", l.p50_ms, l.p90_ms))
            .collect();
        eprintln!("  {} query ms p50/p90: {}", s.name, l.join("  "));
    }
    Ok((out, check))
}

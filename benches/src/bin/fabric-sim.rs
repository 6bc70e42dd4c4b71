//! `fabric-sim`: a whole Canopy tree in one process (real codec and merge
//! state machines, virtual time, no sockets); prints the figures of the run
//! as a table row, or as JSON.
#![allow(clippy::print_stdout)]

use anyhow::{Context, Result, bail};
use canopy_benches::fabric::{self, Kill, PhaseMode, Report, SimConfig};
use clap::Parser;

#[derive(Parser)]
#[command(about = "Simulate a Canopy fabric of N nodes and measure it")]
struct Cli {
    /// Nodes N.
    #[arg(long)]
    nodes: usize,
    /// Subtrees K.
    #[arg(long, default_value_t = 8)]
    subtrees: usize,
    /// Replicas R.
    #[arg(long, default_value_t = 2)]
    replicas: usize,
    /// Leaf ticks (relays run on until the tree is drained).
    #[arg(long, default_value_t = 30)]
    ticks: u32,
    /// Tick, ms.
    #[arg(long, default_value_t = 1000)]
    tick_ms: i64,
    /// One-way latency of each network link, ms.
    #[arg(long, default_value_t = 2)]
    link_latency_ms: i64,
    /// Seed of the simulated cluster and of the tick phases.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Tick phases: staggered (as `canopy node` from the planner's configs:
    /// leaves on the second plus jitter, relays just after children),
    /// random (timers start with each process), aligned (all on the second).
    #[arg(long, value_enum, default_value_t = PhaseMode::Staggered)]
    phase: PhaseMode,
    /// Step between relay levels with --phase staggered, ms.
    #[arg(long, default_value_t = canopy_aggregator::schedule::DEFAULT_STEP_MS)]
    stagger_ms: i64,
    /// Largest leaf sampling offset with --phase staggered, ms.
    #[arg(long, default_value_t = canopy_aggregator::schedule::DEFAULT_JITTER_MS)]
    jitter_ms: i64,
    /// CPUs per simulated node.
    #[arg(long, default_value_t = 64)]
    cpus: u32,
    /// Chance that a node samples its simulated host at a tick; the others
    /// repeat their last readings (quiet: only the tick counter changes).
    #[arg(long, default_value_t = 1.0)]
    change_fraction: f64,
    /// Kill this relay (host name, e.g. cn000003) at --kill-tick.
    #[arg(long)]
    kill: Option<String>,
    /// Tick at which --kill dies.
    #[arg(long, default_value_t = 10)]
    kill_tick: u32,
    /// Time for a child to notice a dead parent, ms.
    #[arg(long, default_value_t = 1500)]
    failover_ms: i64,
    /// Ticks before the steady window (default: max depth + 2).
    #[arg(long)]
    warmup: Option<u32>,
    /// zstd window of every link, log2 bytes (default: the codec's).
    #[arg(long)]
    window_log: Option<u32>,
    /// zstd level of every link (default: the codec's). It only changes
    /// keyframes and definitions (delta frames are range-coded), i.e. the
    /// warm-up, not the steady window; a low level makes big runs faster.
    #[arg(long)]
    zstd_level: Option<i32>,
    /// Threads to run the roles on (the CPU figures are per-thread CPU
    /// time, so this only changes the wall time).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Write the gateway's inputs to this file (to run the gateway alone
    /// again with --gateway-from, e.g. under a profiler).
    #[arg(long)]
    save_inbox: Option<std::path::PathBuf>,
    /// Run only the gateway, over inputs a run with the same settings saved
    /// with --save-inbox (leaf and relay figures are then 0).
    #[arg(long)]
    gateway_from: Option<std::path::PathBuf>,
    /// Print the report as JSON instead of a table row.
    #[arg(long)]
    json: bool,
    /// Print no header line.
    #[arg(long)]
    no_header: bool,
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let mut cfg = SimConfig {
        nodes: cli.nodes,
        subtrees: cli.subtrees,
        replicas: cli.replicas,
        ticks: cli.ticks,
        tick_ms: cli.tick_ms,
        link_latency_ms: cli.link_latency_ms,
        seed: cli.seed,
        phase: cli.phase,
        stagger_ms: cli.stagger_ms,
        jitter_ms: cli.jitter_ms,
        cpus: cli.cpus,
        change_fraction: cli.change_fraction,
        kill: cli.kill.map(|node| Kill {
            node,
            at_tick: cli.kill_tick,
        }),
        failover_ms: cli.failover_ms,
        warmup_ticks: cli.warmup,
        threads: cli.threads,
        save_inbox: cli.save_inbox,
        gateway_from: cli.gateway_from,
        ..SimConfig::default()
    };
    if let Some(w) = cli.window_log {
        cfg.codec.window_log = w;
    }
    if let Some(l) = cli.zstd_level {
        cfg.codec.zstd_level = l;
    }
    let report: Report = fabric::run(cfg).context("simulation failed")?;
    if cli.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        if !cli.no_header {
            println!("{}", Report::table_header());
        }
        println!("{}", report.table_row());
    }
    if !report.exactness.ok() {
        bail!(
            "not exact: {} of {} nodes exact, {} missing, {} out of sequence, {} rejected",
            report.exactness.exact_nodes,
            report.exactness.nodes,
            report.exactness.missing,
            report.exactness.out_of_sequence,
            report.exactness.rejected_records
        );
    }
    Ok(())
}

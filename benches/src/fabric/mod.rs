//! The fabric scale simulator: a whole Canopy tree in one process, no
//! sockets, virtual time, real codec and merge state machines.
//!
//! Every node runs a real leaf (`SimNode` plus the synthetic tick counter ->
//! `Sender` -> one `LinkEncoder` per output) and a real relay (`Merger` fed
//! with the bytes of its children's records, one frame per tick to its
//! parent); the gateway is a `Merger` whose sink measures freshness and
//! checks exactness. Links carry record bytes with a virtual latency; a
//! relay forwards at its next tick, so freshness grows with depth.
//!
//! Data only flows up (no acknowledgements in the sans-I/O cores) and a
//! kill is scripted, so the run is a DAG: the simulator runs each role over
//! the whole run in turn (leaves, then relays bottom-up per subtree, then
//! the gateway) and hands on the records with their arrival times. The
//! state of one relay lives only while it runs, which is what lets 100,000
//! nodes fit in memory; the result is the same as a tick-by-tick run.
//! CPU time is measured per role run (thread CPU time), see `schedule`.
//!
//! Found with it: with R = 2, after a relay dies its children's new links
//! to their backups skip one level and can deliver tick t+1 before the
//! other subtree delivers tick t; a merger that keeps only the newest
//! timestamp per series then drops tick t. The gateway's merger now holds
//! a section that leaves a hole until the slower path fills or passes it
//! (`MergeConfig::hole_wait_ms`), and the simulated gateway does the same:
//! `--nodes 64 --subtrees 4 --ticks 20 --kill cn000005 --kill-tick 8`
//! with random phases is exact (a test below keeps it so).

mod gateway;
mod inbox;
mod leaf;
mod measure;
mod relay;
mod report;
mod schedule;
mod stream;
mod timing;

use canopy_proto::codec::CodecConfig;
use canopy_topology::PlanParams;

pub use gateway::{NodeTicks, TICKS_METRIC};
pub use measure::{CpuClock, rss_bytes};
pub use report::{Exactness, Report};
pub use stream::LinkBytes;
pub use timing::Dest;

use timing::Ctx;

/// When nodes sample and relays forward, within a tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PhaseMode {
    /// Each node's leaf and relay tick at independent random offsets (what
    /// `canopy node` does with a config without staggered timers: timers
    /// start when the process starts).
    Random,
    /// Every leaf and relay ticks on the same wall-clock second.
    Aligned,
    /// Staggered timers, as `canopy node` runs them from the planner's
    /// configs (`canopy_aggregator::schedule`): leaves sample on the second
    /// plus a per-host jitter of at most `jitter_ms`; a relay at depth d in
    /// a subtree D deep forwards `(D - d + 1) * stagger_ms` after the
    /// second, just after its children.
    Staggered,
}

/// A relay killed during the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kill {
    /// Host name of the victim.
    pub node: String,
    /// It dies half a tick after this tick's start.
    pub at_tick: u32,
}

/// Settings of one simulated run.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Nodes N.
    pub nodes: usize,
    /// Subtrees K.
    pub subtrees: usize,
    /// Replicas R (each node reports into R subtrees).
    pub replicas: usize,
    /// Leaf ticks (the relays run on until the tree is drained).
    pub ticks: u32,
    /// Tick length, ms (leaves and relays).
    pub tick_ms: i64,
    /// One-way latency of every network link, ms.
    pub link_latency_ms: i64,
    /// Seed of the simulated cluster and of the phases.
    pub seed: u64,
    /// Tick phases.
    pub phase: PhaseMode,
    /// Step between relay levels in [`PhaseMode::Staggered`], ms.
    pub stagger_ms: i64,
    /// Largest leaf sampling offset in [`PhaseMode::Staggered`], ms.
    pub jitter_ms: i64,
    /// CPUs per simulated node (drives how many jobs it runs).
    pub cpus: u32,
    /// Chance that a node samples its simulated host at a tick (0..=1).
    /// Otherwise it reports the host's previous readings again, so only
    /// its tick counter changes: a quiet node. 1 (every node samples every
    /// tick) is the default; lower values cut the changes per second at a
    /// fixed N, which separates the gateway's cost per change from its cost
    /// per node.
    pub change_fraction: f64,
    /// A relay to kill, if any.
    pub kill: Option<Kill>,
    /// Time for a child to notice a dead parent and move to its backup, ms.
    pub failover_ms: i64,
    /// Ticks before the steady window (default: max depth + 2, at most
    /// half the ticks), so the first keyframes are not in it.
    pub warmup_ticks: Option<u32>,
    /// Codec settings of every link.
    pub codec: CodecConfig,
    /// Threads the roles run on (figures are per-thread CPU time, so this
    /// changes the wall time only).
    pub threads: usize,
    /// Write the gateway's inputs here (see `inbox`) before it runs.
    pub save_inbox: Option<std::path::PathBuf>,
    /// Run the gateway alone over inputs saved by an earlier run with the
    /// same settings (no leaves, no relays: their figures stay 0).
    pub gateway_from: Option<std::path::PathBuf>,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            nodes: 1000,
            subtrees: 8,
            replicas: 2,
            ticks: 30,
            tick_ms: 1000,
            link_latency_ms: 2,
            seed: 1,
            phase: PhaseMode::Staggered,
            stagger_ms: canopy_aggregator::schedule::DEFAULT_STEP_MS,
            jitter_ms: canopy_aggregator::schedule::DEFAULT_JITTER_MS,
            cpus: 64,
            change_fraction: 1.0,
            kill: None,
            failover_ms: 1500,
            warmup_ticks: None,
            codec: sim_codec(),
            threads: 1,
            save_inbox: None,
            gateway_from: None,
        }
    }
}

/// The codec defaults with the per-link caps raised: a subtree top's
/// keyframe at 100,000 nodes is larger than the default 16 MiB frame cap.
pub fn sim_codec() -> CodecConfig {
    CodecConfig {
        max_frame_bytes: 1 << 30,
        max_series: 1 << 28,
        max_sources: 1 << 24,
        ..CodecConfig::default()
    }
}

/// What can stop a simulated run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FabricError {
    /// The settings make no sense.
    #[error("bad settings: {0}")]
    Config(&'static str),
    /// The planner refused the cluster.
    #[error("plan: {0}")]
    Topology(#[from] canopy_topology::TopologyError),
    /// An encoder failed.
    #[error("codec: {0}")]
    Codec(canopy_proto::codec::CodecError),
    /// A merger could not take a child.
    #[error("merge: {0}")]
    Merge(canopy_aggregator::merge::AggregatorError),
    /// A simulated collector failed.
    #[error("leaf: {0}")]
    Leaf(canopy_leaf::LeafError),
    /// An encoder wrote a record without a valid length prefix.
    #[error("record framing")]
    Framing,
    /// A host without a home link.
    #[error("host {0} has no home link")]
    NoHomeLink(usize),
    /// The freshness histogram could not be made.
    #[error("histogram: {0}")]
    Histogram(String),
    /// A saved gateway inbox could not be written or read.
    #[error("gateway inbox: {0}")]
    Inbox(String),
    /// Records were routed to a relay that had already run (a bug).
    #[error("records for node {0} after its relay ran")]
    Order(usize),
}

/// Host name of node `i` (`cn000001` ...).
pub fn host_name(i: usize) -> String {
    format!("cn{:06}", i + 1)
}

/// Runs the whole simulation.
pub fn run(cfg: SimConfig) -> Result<Report, FabricError> {
    if cfg.nodes == 0 || cfg.ticks == 0 || cfg.tick_ms <= 0 || cfg.link_latency_ms < 0 {
        return Err(FabricError::Config(
            "nodes, ticks and tick must be positive, latency not negative",
        ));
    }
    if !(0.0..=1.0).contains(&cfg.change_fraction) {
        return Err(FabricError::Config("change fraction must be within 0..=1"));
    }
    let wall = std::time::Instant::now();
    let hosts: Vec<String> = (0..cfg.nodes).map(host_name).collect();
    let plan = canopy_topology::plan(
        &hosts,
        PlanParams {
            subtrees: cfg.subtrees,
            replicas: cfg.replicas,
            arity: 2,
        },
    )?;
    drop(hosts);
    let ctx = Ctx::new(plan, cfg);
    let clock = CpuClock::new();
    let (tally, gw_inbox) = match &ctx.cfg.gateway_from {
        Some(path) => (report::Tally::default(), inbox::load(path, &ctx.cfg)?),
        None => schedule::run_roles(&ctx, &clock, ctx.cfg.threads)?,
    };
    if let Some(path) = &ctx.cfg.save_inbox {
        inbox::save(path, &ctx.cfg, &gw_inbox)?;
    }
    let rss_before_gateway = rss_bytes().0;
    let gw = gateway::run_gateway(&ctx, &clock, &gw_inbox)?;
    let rss_with_gateway = rss_bytes().0;
    drop(gw_inbox);
    Ok(report::build(
        &ctx,
        &clock,
        tally,
        gw,
        (rss_before_gateway, rss_with_gateway),
        wall.elapsed().as_secs_f64(),
    ))
}

//! One node's leaf over the whole run: the simulated host (plus the
//! synthetic tick counter) -> `Sender` -> one `LinkEncoder` per output,
//! exactly as `canopy node` runs it (its own relay as an in-memory child,
//! plus one network uplink per leaf-only membership).

use canopy_leaf::collect::SyntheticTicks;
use canopy_leaf::{Collector, Observation, SimNode};
use canopy_proto::codec::{BoundsPolicy, Sender};
use canopy_topology::Role;

use super::FabricError;
use super::measure::CpuClock;
use super::relay::SteadyMarks;
use super::stream::{LinkKind, Segment, SimUplink};
use super::timing::Ctx;

/// What one leaf produced.
#[derive(Debug)]
pub struct LeafOut {
    /// Connections of every output, each with its delivered records.
    pub segments: Vec<Segment>,
    /// CPU time of the run, ns.
    pub cpu_ns: u64,
    /// CPU time of its ticks in the steady window, ns.
    pub steady_cpu_ns: u64,
    /// Series the leaf held at its last tick.
    pub series: usize,
    /// Quantised value updates it emitted.
    pub updates: u64,
    /// Steady bytes/s of each network output (leaf-only memberships).
    pub link_bps: Vec<f64>,
    /// Records sent to a dead parent.
    pub lost: u64,
    /// Destination changes (failovers).
    pub failovers: u64,
}

/// Runs node `i`'s leaf for every tick it is alive.
pub fn run_leaf(ctx: &Ctx, clock: &CpuClock, i: usize) -> Result<LeafOut, FabricError> {
    let host = &ctx.plan.hosts()[i];
    let name = host.name.as_str();
    let mut outs = vec![SimUplink::local(i)];
    for (o, l) in host
        .links
        .iter()
        .filter(|l| l.role == Role::Leaf)
        .enumerate()
    {
        let o = u8::try_from(o + 1).unwrap_or(u8::MAX);
        outs.push(SimUplink::planned(l, i, LinkKind::Leaf, o));
    }
    let tick_ms = u32::try_from(ctx.cfg.tick_ms).unwrap_or(u32::MAX);
    let start = clock.now_ns();
    let mut steady = SteadyMarks::default();
    let mut sim = SimNode::new(name, ctx.cfg.seed, ctx.cfg.cpus);
    let mut ticks = SyntheticTicks::new(name);
    let mut sender = Sender::new(BoundsPolicy::default());
    let src = sender.source(name, tick_ms);
    // The host's last readings (kept for the ticks it stays quiet) and the
    // tick counter's, which changes every tick.
    let mut host_obs: Vec<Observation> = Vec::new();
    let mut obs: Vec<Observation> = Vec::new();
    let mut updates = 0u64;
    for k in 0..ctx.cfg.ticks {
        steady.at_tick(ctx, clock, k);
        let ts = ctx.leaf_tick(i, k);
        if ctx.dead(i, ts) {
            break;
        }
        if ctx.samples_host(i, k) {
            host_obs.clear();
            sim.set_tick_time(ts);
            // Neither simulated collector can fail.
            sim.collect(&mut host_obs).map_err(FabricError::Leaf)?;
        }
        obs.clear();
        ticks.collect(&mut obs).map_err(FabricError::Leaf)?;
        sender.begin_tick(ts);
        sender.tick_source(src, ts);
        for o in host_obs.iter().chain(&obs) {
            sender.observe(src, &o.labels, o.kind, o.value);
        }
        let (table, cs) = sender.finish_tick();
        updates += cs.update_count() as u64;
        for o in &mut outs {
            o.send(ctx, ts, table, cs)?;
        }
        sender.end_tick();
    }
    let end = clock.now_ns();
    let mut out = LeafOut {
        segments: Vec::new(),
        cpu_ns: end.saturating_sub(start),
        steady_cpu_ns: steady.total(end),
        series: sender.table().len(),
        updates,
        link_bps: Vec::new(),
        lost: 0,
        failovers: 0,
    };
    for o in outs {
        if o.kind != LinkKind::Local {
            out.link_bps.push(o.steady_bps(ctx));
        }
        out.lost += o.lost;
        out.failovers += o.failovers;
        out.segments.extend(o.finish());
    }
    Ok(out)
}

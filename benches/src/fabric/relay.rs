//! One node's relay over the whole run, driven as `aggregator::relay` drives
//! it: records go to `Merger::on_record` as they arrive; at each relay tick,
//! `expire`, `take_changeset`, one frame on the uplink, `end_tick`.

use canopy_aggregator::merge::{MergeConfig, Merger, NullSink, Sink};

use super::FabricError;
use super::measure::CpuClock;
use super::stream::{LinkKind, Segment, SimUplink};
use super::timing::Ctx;

/// What one relay produced.
#[derive(Debug)]
pub struct RelayOut {
    /// Its uplink's connections with their delivered records.
    pub segments: Vec<Segment>,
    /// CPU time of the run (merging and encoding), ns.
    pub cpu_ns: u64,
    /// CPU time of its ticks in the steady window, ns.
    pub steady_cpu_ns: u64,
    /// Steady bytes/s of its uplink.
    pub link_bps: f64,
    /// Kind of its uplink (relay-to-relay, or top-to-gateway).
    pub kind: LinkKind,
    /// Records the merger rejected (must be 0).
    pub rejected: u64,
    /// Series in its table at the end.
    pub series: usize,
    /// Records sent to a dead parent.
    pub lost: u64,
    /// Destination changes (failovers).
    pub failovers: u64,
}

/// The merger settings of every simulated relay and of the gateway: the
/// defaults, with the caps raised to what the run needs.
pub fn merge_config(ctx: &Ctx) -> MergeConfig {
    MergeConfig {
        max_series: usize::MAX,
        max_series_per_child: usize::MAX,
        codec: ctx.cfg.codec.clone(),
        ..MergeConfig::default()
    }
}

/// Input records of several connections in arrival order: (arrival, child
/// id, record index). Ties keep connection order, then record order.
pub fn arrival_order(inputs: &[Segment]) -> Vec<(i64, u32, u32)> {
    let mut ev: Vec<(i64, u32, u32)> = inputs
        .iter()
        .enumerate()
        .flat_map(|(c, s)| {
            s.recs
                .iter()
                .enumerate()
                .map(move |(r, rec)| (rec.at_ms, c as u32, r as u32))
        })
        .collect();
    ev.sort_unstable();
    ev
}

/// Feeds one record of connection `c` (opening the child on its first
/// record); false when the merger rejected it.
pub fn feed(
    merger: &mut Merger,
    inputs: &[Segment],
    c: u32,
    r: u32,
    sink: &mut dyn Sink,
) -> Result<bool, FabricError> {
    let child = u64::from(c);
    if r == 0 {
        merger.child_connected(child).map_err(FabricError::Merge)?;
    }
    let rec = &inputs[c as usize].recs[r as usize];
    match merger.on_record(child, &rec.payload, sink) {
        Ok(_) => Ok(true),
        Err(e) => {
            tracing::warn!(child, error = %e, "simulated relay rejected a record");
            merger.child_gone(child);
            Ok(false)
        }
    }
}

/// Runs node `i`'s relay over `inputs` (its own leaf and its children, as
/// they were routed to it) until the end of the run or its death.
pub fn run_relay(
    ctx: &Ctx,
    clock: &CpuClock,
    i: usize,
    inputs: &[Segment],
) -> Result<RelayOut, FabricError> {
    let host = &ctx.plan.hosts()[i];
    let home = host.links.first().ok_or(FabricError::NoHomeLink(i))?;
    let kind = if home.parent_index.is_none() {
        LinkKind::Top
    } else {
        LinkKind::Relay
    };
    let events = arrival_order(inputs);
    let mut up = SimUplink::planned(home, i, kind, u8::MAX);
    let mut merger = Merger::new(merge_config(ctx));
    let mut sink = NullSink;
    let mut rejected = 0u64;
    let mut next = 0usize;
    let start = clock.now_ns();
    let mut steady = SteadyMarks::default();
    for k in 0..ctx.relay_ticks {
        steady.at_tick(ctx, clock, k);
        let now = ctx.relay_tick(i, k);
        if ctx.dead(i, now) {
            break;
        }
        while let Some(&(at, c, r)) = events.get(next) {
            if at > now {
                break;
            }
            next += 1;
            if !feed(&mut merger, inputs, c, r, &mut sink)? {
                rejected += 1;
            }
        }
        merger.expire(now, &mut sink);
        let (table, cs) = merger.take_changeset(now);
        up.send(ctx, now, table, cs)?;
        merger.end_tick();
    }
    let end = clock.now_ns();
    Ok(RelayOut {
        cpu_ns: end.saturating_sub(start),
        steady_cpu_ns: steady.total(end),
        link_bps: up.steady_bps(ctx),
        kind,
        rejected,
        series: merger.table().len(),
        lost: up.lost,
        failovers: up.failovers,
        segments: up.finish(),
    })
}

/// Clock readings at the start and end of a role's steady window (ticks
/// `warmup_ticks..ticks`), a couple of `/proc` reads per run.
#[derive(Debug, Default)]
pub struct SteadyMarks {
    from: Option<u64>,
    to: Option<u64>,
}

impl SteadyMarks {
    /// Call at the top of tick `k`.
    pub fn at_tick(&mut self, ctx: &Ctx, clock: &CpuClock, k: u32) {
        if k == ctx.warmup_ticks {
            self.from = Some(clock.now_ns());
        }
        if k == ctx.cfg.ticks {
            self.to = Some(clock.now_ns());
        }
    }

    /// CPU of the steady ticks; `end` closes a window cut short.
    pub fn total(&self, end: u64) -> u64 {
        self.from
            .map_or(0, |f| self.to.unwrap_or(end).saturating_sub(f))
    }
}

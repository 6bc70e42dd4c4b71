//! The gateway: a `Merger` fed by every subtree top (and by any child that
//! failed over to it), whose sink measures freshness and checks that every
//! tick of every node's `canopy_synthetic_ticks_total` arrives exactly once.

use std::collections::HashMap;

use canopy_aggregator::merge::{Merger, SeriesKey, Sink};
use canopy_proto::Labels;
use hdrhistogram::Histogram;

use super::FabricError;
use super::measure::CpuClock;
use super::relay::{arrival_order, feed, merge_config};
use super::stream::Segment;
use super::timing::Ctx;
use canopy_aggregator::merge::{HOLE_WAIT_TICKS, MergeConfig};

/// The counter every simulated node increments by one per tick.
pub const TICKS_METRIC: &str = "canopy_synthetic_ticks_total";

/// Highest age the gateway's freshness histogram tracks, ms (one hour).
const FRESHNESS_MAX_MS: u64 = 3_600_000;

/// Per node: what arrived of its tick counter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct NodeTicks {
    /// Samples that arrived.
    pub got: u32,
    /// Samples whose value was not the previous one plus one (a gap or a
    /// repeat).
    pub out_of_sequence: u32,
    /// Largest value seen (the number of the last tick that arrived).
    pub last: u32,
}

/// The gateway's sink: freshness histogram and per-node tick accounting.
#[derive(Debug)]
pub struct GatewaySink {
    now_ms: i64,
    window: (i64, i64),
    /// Plan index by the number in a `host_name` (`cnNNNNNN`): the check
    /// reads the number off the source name, no hashing, no table miss.
    by_number: Vec<Option<usize>>,
    /// Plan index by name, for names `host_number` does not read.
    index: HashMap<String, usize>,
    /// Per series handle: the generation it was looked at under and what
    /// it is ([`KEY_UNSEEN`], [`KEY_OTHER`] or a node's plan index), so a
    /// keyed sample reads 8 dense bytes, not its source name and labels.
    by_key: Vec<(u32, u32)>,
    /// Per node, in plan order.
    pub nodes: Vec<NodeTicks>,
    /// Arrival minus sample time of every sample in the steady window, ms.
    pub freshness: Histogram<u64>,
    /// Samples accepted in the steady window (by sample time).
    pub steady_samples: u64,
    /// All samples accepted.
    pub samples: u64,
    /// Staleness markers written.
    pub retired: u64,
}

/// `GatewaySink::by_key`: a handle not looked at yet.
const KEY_UNSEEN: u32 = u32::MAX;
/// `GatewaySink::by_key`: a series that is no node's tick counter.
const KEY_OTHER: u32 = u32::MAX - 1;

impl GatewaySink {
    fn new(ctx: &Ctx) -> Result<Self, FabricError> {
        let names: Vec<&str> = ctx.plan.hosts().iter().map(|h| h.name.as_str()).collect();
        Self::for_hosts(&names, ctx.steady_window())
    }

    /// A sink for nodes named `hosts` (in plan order), measuring freshness
    /// over `window`.
    fn for_hosts(hosts: &[&str], window: (i64, i64)) -> Result<Self, FabricError> {
        let mut by_number = vec![None; hosts.len()];
        let mut index = HashMap::new();
        for (i, h) in hosts.iter().enumerate() {
            match host_number(h).filter(|&j| j < by_number.len()) {
                Some(j) => by_number[j] = Some(i),
                None => {
                    index.insert((*h).to_string(), i);
                }
            }
        }
        Ok(Self {
            now_ms: 0,
            window,
            by_number,
            index,
            by_key: Vec::new(),
            nodes: vec![NodeTicks::default(); hosts.len()],
            freshness: Histogram::new_with_bounds(1, 24 * 3_600_000, 3)
                .map_err(|e| FabricError::Histogram(e.to_string()))?,
            steady_samples: 0,
            samples: 0,
            retired: 0,
        })
    }
}

impl GatewaySink {
    /// Plan index of node `source`, if it is one.
    fn node_of(&self, source: &str) -> Option<usize> {
        match host_number(source) {
            // `host_number` reads only exact `host_name` strings, one per
            // number: a number found here is this very name.
            Some(j) => self.by_number.get(j).copied().flatten(),
            None => self.index.get(source).copied(),
        }
    }
}

/// The `i` of `host_name(i)` when `name` is exactly such a name (`cn` and
/// six digits, at least `cn000001`), else `None`.
fn host_number(name: &str) -> Option<usize> {
    let digits = name.strip_prefix("cn")?.as_bytes();
    if digits.len() != 6 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits
        .iter()
        .fold(0usize, |n, d| n * 10 + usize::from(d - b'0'));
    n.checked_sub(1)
}

impl GatewaySink {
    /// The plan index of the node whose tick counter series `labels` of
    /// `source` is, if it is one.
    fn tick_node(&self, source: &str, labels: &Labels) -> Option<usize> {
        if labels.name() == TICKS_METRIC {
            self.node_of(source)
        } else {
            None
        }
    }

    /// Counts one sample: freshness, and the tick accounting of `node`
    /// when the sample is that node's tick counter.
    fn count(&mut self, node: Option<usize>, ts_ms: i64, value: f64) {
        self.samples += 1;
        if ts_ms >= self.window.0 && ts_ms < self.window.1 {
            self.steady_samples += 1;
            // As the gateway's `canopy_gateway_freshness_seconds`: arrival
            // (here the virtual time the record arrived, or a held section
            // was released) minus the sample's tick, clamped to 1 ms..1 h.
            let age = u64::try_from(self.now_ms.saturating_sub(ts_ms)).unwrap_or(0);
            self.freshness
                .saturating_record(age.clamp(1, FRESHNESS_MAX_MS));
        }
        if let Some(i) = node
            && let Some(n) = self.nodes.get_mut(i)
        {
            let v = value as u32;
            if v != n.last + 1 {
                n.out_of_sequence += 1;
            }
            n.got += 1;
            n.last = n.last.max(v);
        }
    }
}

impl Sink for GatewaySink {
    fn sample(&mut self, source: &str, labels: &Labels, ts_ms: i64, value: f64) {
        let node = self.tick_node(source, labels);
        self.count(node, ts_ms, value);
    }

    /// As `sample`, but what the series is (which node's tick counter, if
    /// any) is looked up once per handle and generation: real bookkeeping,
    /// exactly the same counts (see the test), without reading a source
    /// name and labels per sample.
    fn sample_keyed(
        &mut self,
        key: SeriesKey,
        source: &str,
        labels: &Labels,
        ts_ms: i64,
        value: f64,
    ) {
        let i = key.handle as usize;
        if self.by_key.len() <= i {
            // Bounded by the merger's table (its series cap).
            self.by_key.resize(i + 1, (0, KEY_UNSEEN));
        }
        let (epoch, what) = self.by_key[i];
        let what = if what != KEY_UNSEEN && epoch == key.epoch {
            what
        } else {
            let what = self
                .tick_node(source, labels)
                .and_then(|n| u32::try_from(n).ok())
                .filter(|&n| n < KEY_OTHER)
                .unwrap_or(KEY_OTHER);
            self.by_key[i] = (key.epoch, what);
            what
        };
        let node = (what != KEY_OTHER).then_some(what as usize);
        self.count(node, ts_ms, value);
    }

    /// Keyed samples read a series' labels once per key.
    fn reads_labels(&self) -> bool {
        false
    }

    fn heartbeat(&mut self, _: &str, _: i64, _: u32) {}

    fn retire(&mut self, _: &str, _: &Labels, _: i64) {
        self.retired += 1;
    }
}

/// What the gateway did.
#[derive(Debug)]
pub struct GatewayOut {
    /// Its sink.
    pub sink: GatewaySink,
    /// CPU time of the whole run, ns.
    pub cpu_ns: u64,
    /// CPU time of the gateway ticks in the steady window, ns.
    pub steady_cpu_ns: u64,
    /// Length of that window, ms of cluster time.
    pub steady_ms: i64,
    /// Records rejected (must be 0).
    pub rejected: u64,
    /// Updates dropped as duplicates (the R-1 other copies).
    pub duplicates: u64,
    /// Of those, in other paths' copies skipped whole (proven duplicates).
    pub copies_skipped: u64,
    /// Updates accepted.
    pub accepted: u64,
    /// Series in its table at the end.
    pub series: usize,
    /// Payload bytes received in the steady window, per second.
    pub steady_in_bps: f64,
    /// Records received in the steady window.
    pub steady_records: u64,
    /// Of those, records in zstd mode (the payload tag's low bits are 0).
    pub steady_zstd_records: u64,
}

/// The gateway's state over a run.
struct Run<'a> {
    inputs: &'a [Segment],
    events: Vec<(i64, u32, u32)>,
    next: usize,
    merger: Merger,
    sink: GatewaySink,
    window: (i64, i64),
    rejected: u64,
    steady_bytes: u64,
    steady_records: u64,
    steady_zstd_records: u64,
    steady_ticks: u32,
}

impl Run<'_> {
    /// One gateway tick at `now`: the records that arrived by then, then
    /// the tick's upkeep.
    fn tick(&mut self, now: i64) -> Result<(), FabricError> {
        let (lo, hi) = self.window;
        while let Some(&(at, c, r)) = self.events.get(self.next) {
            if at > now {
                break;
            }
            self.next += 1;
            self.sink.now_ms = at;
            if at >= lo && at < hi {
                let payload = &self.inputs[c as usize].recs[r as usize].payload;
                self.steady_bytes += payload.len() as u64;
                self.steady_records += 1;
                // The payload's LEB128 tag: its low 2 bits are the mode.
                if payload.first().is_some_and(|b| b & 3 == 0) {
                    self.steady_zstd_records += 1;
                }
            }
            if !feed(&mut self.merger, self.inputs, c, r, &mut self.sink)? {
                self.rejected += 1;
            }
        }
        self.sink.now_ms = now;
        self.merger.expire(now, &mut self.sink);
        let _ = self.merger.take_changeset(now);
        self.merger.end_tick();
        Ok(())
    }
}

/// A gateway tick in the steady window: a function of its own, so that a
/// profiler can count these alone (`valgrind --tool=callgrind
/// --toggle-collect='*steady_tick*'` with `--gateway-from`).
#[inline(never)]
fn steady_tick(run: &mut Run<'_>, now: i64) -> Result<(), FabricError> {
    // (A body unlike `other_tick`'s, so the two are not folded into one,
    // and work after the call, so it is not a tail call a profiler's stack
    // walk would miss.)
    let r = run.tick(now);
    run.steady_ticks += 1;
    r
}

/// A gateway tick outside the steady window (warm-up, drain).
#[inline(never)]
fn other_tick(run: &mut Run<'_>, now: i64) -> Result<(), FabricError> {
    run.tick(now)
}

/// Runs the gateway over every record routed to it.
pub fn run_gateway(
    ctx: &Ctx,
    clock: &CpuClock,
    inputs: &[Segment],
) -> Result<GatewayOut, FabricError> {
    let events = arrival_order(inputs);
    // As the real gateway: a section after a hole waits (at most
    // HOLE_WAIT_TICKS) for the slower path to fill it.
    let merger = Merger::new(MergeConfig {
        hole_wait_ms: i64::from(HOLE_WAIT_TICKS) * ctx.cfg.tick_ms,
        // As the real gateway: no uplink, so no changeset to build.
        forward: false,
        ..merge_config(ctx)
    });
    let (lo, hi) = ctx.steady_window();
    let mut run = Run {
        inputs,
        events,
        next: 0,
        merger,
        sink: GatewaySink::new(ctx)?,
        window: (lo, hi),
        rejected: 0,
        steady_bytes: 0,
        steady_records: 0,
        steady_zstd_records: 0,
        steady_ticks: 0,
    };
    let mut steady_cpu_ns = 0u64;
    let (mut first_steady, mut last_steady) = (None, 0i64);
    let start = clock.now_ns();
    let mut mark = start;
    for k in 0..=ctx.relay_ticks {
        let now = ctx.gateway_tick(k);
        // Gateway ticks (lo, hi]: the work on what arrived in [lo, hi).
        let steady = now > lo && now <= hi;
        if steady {
            steady_tick(&mut run, now)?;
        } else {
            other_tick(&mut run, now)?;
        }
        let t = clock.now_ns();
        if steady {
            steady_cpu_ns += t.saturating_sub(mark);
            first_steady.get_or_insert(now);
            last_steady = now;
        }
        mark = t;
    }
    let Run {
        merger,
        sink,
        rejected,
        steady_bytes,
        steady_records,
        steady_zstd_records,
        ..
    } = run;
    let cpu_ns = clock.now_ns().saturating_sub(start);
    let steady_ms = first_steady.map_or(0, |f| last_steady - f + ctx.cfg.tick_ms);
    let st = merger.stats();
    Ok(GatewayOut {
        cpu_ns,
        steady_cpu_ns,
        steady_ms,
        rejected,
        duplicates: st.duplicates_dropped,
        copies_skipped: st.copies_skipped,
        accepted: st.updates_accepted,
        series: merger.table().len(),
        steady_in_bps: steady_bytes as f64 * 1000.0 / (hi - lo).max(1) as f64,
        steady_records,
        steady_zstd_records,
        sink,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use canopy_aggregator::merge::{SeriesKey, Sink};
    use canopy_proto::Labels;
    use proptest::prelude::*;

    use super::{super::host_name, GatewaySink, TICKS_METRIC, host_number};

    proptest! {
        /// The keyed check (what a series is, looked up once per handle
        /// and generation) counts exactly what the per-sample label check
        /// counts, whatever handles and generations name the series (as
        /// the merger gives them: a key names one series), through reuse
        /// of a handle under a new generation.
        #[test]
        fn keyed_samples_count_as_labelled_ones(
            named in proptest::collection::vec((0usize..6, any::<bool>()), 4 * 3),
            feed in proptest::collection::vec((0u32..4, 0u32..3, 0i64..40, 0u32..8), 0..200),
        ) {
            let mut hosts: Vec<String> = (0..4).map(host_name).collect();
            hosts.push("gw-other".to_string());
            let names: Vec<&str> = hosts.iter().map(String::as_str).collect();
            let mut keyed = GatewaySink::for_hosts(&names, (10, 30)).unwrap();
            let mut plain = GatewaySink::for_hosts(&names, (10, 30)).unwrap();
            // Source 5 is no node's.
            let sources: Vec<String> = hosts.iter().cloned().chain(["cn000099".to_string()]).collect();
            for (h, e, ts, v) in feed {
                let (src, tick) = named[(h * 3 + e) as usize];
                let metric = if tick { TICKS_METRIC } else { "node_load1" };
                let labels = Labels::from_pairs([("__name__", metric), ("job", "x")]);
                let key = SeriesKey { handle: h, epoch: e };
                keyed.now_ms = ts + 3;
                plain.now_ms = ts + 3;
                keyed.sample_keyed(key, &sources[src], &labels, ts, f64::from(v));
                plain.sample(&sources[src], &labels, ts, f64::from(v));
            }
            prop_assert_eq!(&keyed.nodes, &plain.nodes);
            prop_assert_eq!(keyed.samples, plain.samples);
            prop_assert_eq!(keyed.steady_samples, plain.steady_samples);
            prop_assert_eq!(keyed.freshness.len(), plain.freshness.len());
            prop_assert_eq!(keyed.freshness.max(), plain.freshness.max());
        }
    }

    #[test]
    fn host_number_reads_exactly_host_names() {
        for i in [0, 1, 9, 41, 999, 9_999, 99_999, 999_998] {
            assert_eq!(host_number(&host_name(i)), Some(i));
        }
        for bad in [
            "cn000000",
            "cn00001",
            "cn0000011",
            "cn00000a",
            "xn000001",
            "cn-00001",
            "",
        ] {
            assert_eq!(host_number(bad), None, "{bad}");
        }
    }
}

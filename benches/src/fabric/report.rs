//! The figures of one run: per-role CPU, bytes per link, freshness, memory,
//! exactness; printed as a table row or as JSON.

use serde::Serialize;

use super::PhaseMode;
use super::gateway::{GatewayOut, NodeTicks};
use super::leaf::LeafOut;
use super::measure::{CpuClock, rss_bytes};
use super::relay::RelayOut;
use super::stream::{LinkBytes, LinkKind};
use super::timing::Ctx;

/// Running sums over the roles as they finish.
#[derive(Debug, Default)]
pub struct Tally {
    leaf_cpu: CpuStats,
    relay_cpu: CpuStats,
    leaf_links: LinkBytes,
    relay_links: LinkBytes,
    top_links: LinkBytes,
    series: u64,
    updates: u64,
    lost: u64,
    failovers: u64,
    rejected: u64,
    max_relay_series: usize,
}

impl Tally {
    /// Adds a finished leaf.
    pub fn leaf(&mut self, o: &LeafOut) {
        self.leaf_cpu.add(o.steady_cpu_ns, o.cpu_ns, "");
        for &b in &o.link_bps {
            self.leaf_links.add(b);
        }
        self.series += o.series as u64;
        self.updates += o.updates;
        self.lost += o.lost;
        self.failovers += o.failovers;
    }

    /// Adds node `i`'s finished relay.
    pub fn relay(&mut self, ctx: &Ctx, i: usize, o: &RelayOut) {
        self.relay_cpu
            .add(o.steady_cpu_ns, o.cpu_ns, &ctx.plan.hosts()[i].name);
        match o.kind {
            LinkKind::Top => self.top_links.add(o.link_bps),
            _ => self.relay_links.add(o.link_bps),
        }
        self.lost += o.lost;
        self.failovers += o.failovers;
        self.rejected += o.rejected;
        self.max_relay_series = self.max_relay_series.max(o.series);
    }
}

#[derive(Debug, Default)]
struct CpuStats {
    n: u64,
    steady_sum: u64,
    steady_max: u64,
    max_name: String,
    total: u64,
}

impl CpuStats {
    fn add(&mut self, steady: u64, total: u64, name: &str) {
        self.n += 1;
        self.steady_sum += steady;
        self.total += total;
        if steady > self.steady_max {
            self.steady_max = steady;
            self.max_name = name.to_string();
        }
    }
}

/// CPU of one role, per node, in microseconds per second of cluster time
/// (steady window; 10,000 us/s is 1 % of a core).
#[derive(Clone, Debug, Default, Serialize)]
pub struct RoleCpu {
    /// Mean over nodes.
    pub mean_us_per_s: f64,
    /// Largest node.
    pub max_us_per_s: f64,
    /// The largest node's name (relays: usually a subtree top).
    pub max_node: String,
    /// CPU of the whole run over all nodes (keyframes and drain included), s.
    pub total_cpu_s: f64,
}

/// The gateway's figures.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GatewayFigures {
    /// CPU per second of cluster time (steady window), ms/s.
    pub cpu_ms_per_s: f64,
    /// CPU per accepted sample (steady window), ns.
    pub ns_per_sample: f64,
    /// Accepted samples per second (steady window, by sample time).
    pub samples_per_s: f64,
    /// Record bytes in per second (steady window).
    pub in_bytes_per_s: f64,
    /// Records in per second (steady window).
    pub records_per_s: f64,
    /// Of those, records in zstd mode (a protobuf frame: a keyframe, or a
    /// delta frame carrying a definition, retirement or column), per second.
    pub zstd_records_per_s: f64,
    /// CPU of the whole run, s.
    pub total_cpu_s: f64,
    /// Updates accepted over the run.
    pub accepted: u64,
    /// Updates dropped as duplicates (other paths) over the run.
    pub duplicates: u64,
    /// Of those, in other paths' copies skipped whole (proven duplicates,
    /// not applied).
    pub copies_skipped: u64,
    /// Series in its table at the end.
    pub series: usize,
}

/// Freshness at the gateway: arrival minus the sample's tick time, ms.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Freshness {
    /// Median.
    pub p50_ms: u64,
    /// 99th percentile.
    pub p99_ms: u64,
    /// Mean.
    pub mean_ms: f64,
    /// Largest.
    pub max_ms: u64,
    /// Samples measured (steady window).
    pub samples: u64,
}

/// Bytes per second per network link, by kind, in the steady window.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Links {
    /// All network links.
    pub all: LinkBytes,
    /// Leaf-only memberships (a leaf to its parent in another subtree).
    pub leaf: LinkBytes,
    /// Relay to parent relay.
    pub relay: LinkBytes,
    /// Subtree top to gateway.
    pub top: LinkBytes,
}

/// Did every tick of every node arrive exactly once?
#[derive(Clone, Debug, Default, Serialize)]
pub struct Exactness {
    /// Nodes.
    pub nodes: usize,
    /// Nodes whose every expected tick arrived once, in order, and no more.
    pub exact_nodes: usize,
    /// Tick samples expected (a killed node: the ticks before its death).
    pub expected: u64,
    /// Tick samples that arrived.
    pub got: u64,
    /// Expected samples that never arrived.
    pub missing: u64,
    /// Arrivals out of sequence (gap or repeat).
    pub out_of_sequence: u64,
    /// Records sent to an already dead parent (lost on that path).
    pub lost_records: u64,
    /// Links that changed destination (failovers).
    pub failovers: u64,
    /// Records a merger rejected anywhere (must be 0).
    pub rejected_records: u64,
    /// Per node (plan order): expected tick samples.
    #[serde(skip)]
    pub expected_per_node: Vec<u32>,
    /// Per node (plan order): what arrived.
    #[serde(skip)]
    pub per_node: Vec<NodeTicks>,
}

impl Exactness {
    /// True when every node is exact and nothing was rejected.
    pub fn ok(&self) -> bool {
        self.exact_nodes == self.nodes && self.rejected_records == 0
    }
}

/// Everything one run measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    /// Nodes N.
    pub nodes: usize,
    /// Subtrees K.
    pub subtrees: usize,
    /// Replicas R.
    pub replicas: usize,
    /// Leaf ticks.
    pub ticks: u32,
    /// Tick, ms.
    pub tick_ms: i64,
    /// Link latency, ms.
    pub link_latency_ms: i64,
    /// Tick phases.
    pub phase: Option<PhaseMode>,
    /// Relay level step of the staggered phases, ms.
    pub stagger_ms: i64,
    /// Seed.
    pub seed: u64,
    /// Chance that a node sampled its host at a tick (else quiet).
    pub change_fraction: f64,
    /// Deepest home link (hops to the gateway).
    pub max_depth: u32,
    /// Ticks before the steady window.
    pub warmup_ticks: u32,
    /// Length of the steady window, s.
    pub steady_s: f64,
    /// `thread-cpu` or `wall`: what the CPU figures are.
    pub clock: String,
    /// Series per node (mean, at the end).
    pub series_per_node: f64,
    /// Value updates a node emits per second (mean).
    pub updates_per_node_s: f64,
    /// Gateway figures.
    pub gateway: GatewayFigures,
    /// Relay CPU per node.
    pub relay: RoleCpu,
    /// Leaf CPU per node (sampling the simulated host, quantising, encoding).
    pub leaf: RoleCpu,
    /// Most series one relay held (a subtree top).
    pub max_relay_series: usize,
    /// Bytes per link.
    pub links: Links,
    /// Freshness at the gateway.
    pub freshness: Freshness,
    /// Peak resident memory of the simulator, MiB.
    pub peak_rss_mib: f64,
    /// Resident memory growth while the gateway ran, MiB (its merger).
    pub gateway_rss_mib: f64,
    /// Exactness of the tick counters.
    pub exactness: Exactness,
    /// Wall time of the run, s.
    pub wall_s: f64,
}

fn role_cpu(c: &CpuStats, steady_s: f64) -> RoleCpu {
    let per_s = |ns: u64| ns as f64 / 1000.0 / steady_s.max(1e-9);
    RoleCpu {
        mean_us_per_s: if c.n == 0 {
            0.0
        } else {
            per_s(c.steady_sum) / c.n as f64
        },
        max_us_per_s: per_s(c.steady_max),
        max_node: c.max_name.clone(),
        total_cpu_s: c.total as f64 / 1e9,
    }
}

/// Puts the figures together.
pub fn build(
    ctx: &Ctx,
    clock: &CpuClock,
    t: Tally,
    gw: GatewayOut,
    (rss_before, rss_with): (u64, u64),
    wall_s: f64,
) -> Report {
    let cfg = &ctx.cfg;
    let n = ctx.plan.hosts().len();
    let (lo, hi) = ctx.steady_window();
    let steady_s = (hi - lo) as f64 / 1000.0;
    let gw_s = gw.steady_ms as f64 / 1000.0;
    let mut all = LinkBytes::default();
    for l in [&t.leaf_links, &t.relay_links, &t.top_links] {
        all.merge(l);
    }
    let expected: Vec<u32> = (0..n)
        .map(|i| {
            let death = ctx.death_of(i);
            (0..cfg.ticks)
                .filter(|&k| death.is_none_or(|d| ctx.leaf_tick(i, k) < d))
                .count() as u32
        })
        .collect();
    let per_node = gw.sink.nodes.clone();
    let exact_nodes = per_node
        .iter()
        .zip(&expected)
        .filter(|&(g, &e)| g.got == e && g.last == e && g.out_of_sequence == 0)
        .count();
    let exp_sum: u64 = expected.iter().map(|&e| u64::from(e)).sum();
    let got: u64 = per_node.iter().map(|g| u64::from(g.got)).sum();
    let missing: u64 = per_node
        .iter()
        .zip(&expected)
        .map(|(g, &e)| u64::from(e.saturating_sub(g.got)))
        .sum();
    let h = &gw.sink.freshness;
    let steady_samples = gw.sink.steady_samples as f64;
    Report {
        nodes: n,
        subtrees: cfg.subtrees,
        replicas: cfg.replicas,
        ticks: cfg.ticks,
        tick_ms: cfg.tick_ms,
        link_latency_ms: cfg.link_latency_ms,
        phase: Some(cfg.phase),
        stagger_ms: cfg.stagger_ms,
        seed: cfg.seed,
        change_fraction: cfg.change_fraction,
        max_depth: ctx.max_depth,
        warmup_ticks: ctx.warmup_ticks,
        steady_s,
        clock: clock.source().to_string(),
        series_per_node: t.series as f64 / n as f64,
        updates_per_node_s: t.updates as f64
            / n as f64
            / (f64::from(cfg.ticks) * cfg.tick_ms as f64 / 1000.0),
        gateway: GatewayFigures {
            cpu_ms_per_s: gw.steady_cpu_ns as f64 / 1e6 / gw_s.max(1e-9),
            ns_per_sample: if steady_samples > 0.0 {
                gw.steady_cpu_ns as f64 / steady_samples
            } else {
                0.0
            },
            samples_per_s: steady_samples / steady_s.max(1e-9),
            in_bytes_per_s: gw.steady_in_bps,
            records_per_s: gw.steady_records as f64 / steady_s.max(1e-9),
            zstd_records_per_s: gw.steady_zstd_records as f64 / steady_s.max(1e-9),
            total_cpu_s: gw.cpu_ns as f64 / 1e9,
            accepted: gw.accepted,
            duplicates: gw.duplicates,
            copies_skipped: gw.copies_skipped,
            series: gw.series,
        },
        relay: role_cpu(&t.relay_cpu, steady_s),
        leaf: role_cpu(&t.leaf_cpu, steady_s),
        max_relay_series: t.max_relay_series,
        links: Links {
            all,
            leaf: t.leaf_links,
            relay: t.relay_links,
            top: t.top_links,
        },
        freshness: Freshness {
            p50_ms: h.value_at_quantile(0.5),
            p99_ms: h.value_at_quantile(0.99),
            mean_ms: h.mean(),
            max_ms: h.max(),
            samples: h.len(),
        },
        peak_rss_mib: rss_bytes().1 as f64 / 1048576.0,
        gateway_rss_mib: rss_with.saturating_sub(rss_before) as f64 / 1048576.0,
        exactness: Exactness {
            nodes: n,
            exact_nodes,
            expected: exp_sum,
            got,
            missing,
            out_of_sequence: per_node.iter().map(|g| u64::from(g.out_of_sequence)).sum(),
            lost_records: t.lost,
            failovers: t.failovers,
            rejected_records: t.rejected + gw.rejected,
            expected_per_node: expected,
            per_node,
        },
        wall_s,
    }
}

impl Report {
    /// Header of [`Report::table_row`].
    pub fn table_header() -> String {
        format!(
            "{:>7} {:>2} {:>1} {:>5} {:>10} {:>7} {:>13} {:>9} {:>15} {:>10} {:>10} {:>13} {:>8} {:>7} {:>7}",
            "nodes",
            "K",
            "R",
            "depth",
            "gw ms/s",
            "gw ns/s",
            "relay us/s",
            "leaf us/s",
            "B/s/link mean/max",
            "gw in B/s",
            "samples/s",
            "fresh p50/p99",
            "RSS MiB",
            "exact",
            "wall s",
        )
    }

    /// One line of figures (units in the header: gateway CPU in ms per
    /// second, ns per sample, relay CPU per node mean/max in us per second).
    pub fn table_row(&self) -> String {
        let e = &self.exactness;
        format!(
            "{:>7} {:>2} {:>1} {:>5} {:>10.1} {:>7.0} {:>13} {:>9.0} {:>15} {:>10.0} {:>10.0} {:>13} {:>8.0} {:>7} {:>7.0}",
            self.nodes,
            self.subtrees,
            self.replicas,
            self.max_depth,
            self.gateway.cpu_ms_per_s,
            self.gateway.ns_per_sample,
            format!(
                "{:.0}/{:.0}",
                self.relay.mean_us_per_s, self.relay.max_us_per_s
            ),
            self.leaf.mean_us_per_s,
            format!(
                "{:.0}/{:.0}",
                self.links.all.mean_bps(),
                self.links.all.max_bps
            ),
            self.gateway.in_bytes_per_s,
            self.gateway.samples_per_s,
            format!("{}/{} ms", self.freshness.p50_ms, self.freshness.p99_ms),
            self.peak_rss_mib,
            if e.ok() {
                "yes".to_string()
            } else {
                format!("{}/{}", e.exact_nodes, e.nodes)
            },
            self.wall_s,
        )
    }
}

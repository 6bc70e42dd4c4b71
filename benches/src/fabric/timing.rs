//! Virtual time and routing: when each node samples and forwards, and where
//! each of its links sends at a given instant (failover included).
//!
//! Every node samples at `t0 + k*tick + leaf_phase` and its relay forwards
//! at `t0 + k*tick + relay_phase`; a record sent at `t` over the network
//! arrives at `t + latency`, one over the in-memory link to the node's own
//! relay at `t`. A relay forwards what arrived by its tick time, so each hop
//! costs the link latency plus the wait for the relay's next tick.

use canopy_aggregator::schedule::{leaf_jitter_ms, relay_offset_ms};
use canopy_topology::{Link, Peer, Plan, choose_uplink};

use super::{PhaseMode, SimConfig};

/// Where a record goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    /// A node's relay, by index in the plan.
    Node(usize),
    /// The gateway.
    Gateway,
}

/// The plan plus the timing and failure scenario of one run.
#[derive(Debug)]
pub struct Ctx {
    /// The forest.
    pub plan: Plan,
    /// Run settings.
    pub cfg: SimConfig,
    /// Virtual time of tick 0, ms.
    pub t0: i64,
    /// Relay ticks per node (leaf ticks plus a drain that empties the tree).
    pub relay_ticks: u32,
    /// First tick of the steady window (the first keyframes have passed).
    pub warmup_ticks: u32,
    /// Deepest home link (hops from a bottom relay to the gateway).
    pub max_depth: u32,
    leaf_phase: Vec<i64>,
    relay_phase: Vec<i64>,
    /// Node index and virtual death time of the killed relay, if any.
    victim: Option<(usize, i64)>,
}

impl Ctx {
    /// Timing tables for `plan` under `cfg`.
    pub fn new(plan: Plan, cfg: SimConfig) -> Self {
        let n = plan.hosts().len();
        let tick = cfg.tick_ms;
        let max_depth = plan
            .hosts()
            .iter()
            .filter_map(|h| h.links.first().map(|l| l.depth))
            .max()
            .unwrap_or(1);
        let (leaf_phase, relay_phase): (Vec<i64>, Vec<i64>) = (0..n)
            .map(|i| match cfg.phase {
                PhaseMode::Random => (
                    (draw(cfg.seed, i as u64, 1) % tick as u64) as i64,
                    (draw(cfg.seed, i as u64, 2) % tick as u64) as i64,
                ),
                PhaseMode::Aligned => (0, 0),
                PhaseMode::Staggered => {
                    // What `canopy plan --emit-configs` gives each node.
                    let h = &plan.hosts()[i];
                    let home = h.links.first();
                    let d = home.map_or(1, |l| l.depth);
                    let sub = home
                        .and_then(|l| plan.subtrees().get(l.subtree))
                        .map_or(max_depth, |s| s.depth);
                    (
                        leaf_jitter_ms(&h.name, cfg.jitter_ms),
                        relay_offset_ms(d, sub, cfg.stagger_ms.max(1)),
                    )
                }
            })
            .unzip();
        let hop_ticks = 1 + (cfg.link_latency_ms + tick - 1) / tick;
        let max_phase = relay_phase.iter().copied().max().unwrap_or(0);
        // Enough relay ticks after the last sample for it to reach the
        // gateway from the deepest leaf (and after a failover, if any).
        let failover_ticks = if cfg.kill.is_some() {
            cfg.failover_ms / tick + 1
        } else {
            0
        };
        let drain = i64::from(max_depth + 1) * hop_ticks
            + (max_phase + tick - 1) / tick
            + 3
            + failover_ticks;
        let relay_ticks = cfg.ticks + u32::try_from(drain).unwrap_or(u32::MAX / 2);
        let warmup_ticks = cfg
            .warmup_ticks
            .unwrap_or_else(|| (max_depth + 2).min(cfg.ticks / 2));
        let victim = cfg.kill.as_ref().and_then(|k| {
            let i = plan.index_of(&k.node)?;
            Some((i, T0 + i64::from(k.at_tick) * tick + tick / 2))
        });
        Self {
            plan,
            cfg,
            t0: T0,
            relay_ticks,
            warmup_ticks,
            max_depth,
            leaf_phase,
            relay_phase,
            victim,
        }
    }

    /// Sample time of node `i`'s leaf tick `k`.
    pub fn leaf_tick(&self, i: usize, k: u32) -> i64 {
        self.t0 + i64::from(k) * self.cfg.tick_ms + self.leaf_phase[i]
    }

    /// Forwarding time of node `i`'s relay tick `k`.
    pub fn relay_tick(&self, i: usize, k: u32) -> i64 {
        self.t0 + i64::from(k) * self.cfg.tick_ms + self.relay_phase[i]
    }

    /// Gateway tick `k` (its phase does not matter: its sink sees records
    /// as they arrive).
    pub fn gateway_tick(&self, k: u32) -> i64 {
        self.t0 + i64::from(k) * self.cfg.tick_ms
    }

    /// Start and end (exclusive) of the steady window, in sample time.
    pub fn steady_window(&self) -> (i64, i64) {
        let tick = self.cfg.tick_ms;
        (
            self.t0 + i64::from(self.warmup_ticks) * tick,
            self.t0 + i64::from(self.cfg.ticks) * tick,
        )
    }

    /// True when node `i` is dead at `t` (killed at or before `t`).
    pub fn dead(&self, i: usize, t: i64) -> bool {
        self.victim.is_some_and(|(v, at)| v == i && t >= at)
    }

    /// Virtual death time of node `i`, if it is the victim.
    pub fn death_of(&self, i: usize) -> Option<i64> {
        self.victim.and_then(|(v, at)| (v == i).then_some(at))
    }

    /// Where `link` sends at `t`: the topology's failover rule applied to
    /// what the sender believes, namely that a peer is dead only once its
    /// link timed out (`failover_ms` after the death).
    pub fn route(&self, link: &Link, t: i64) -> Dest {
        let peer = match self.victim {
            Some((v, at)) if t >= at + self.cfg.failover_ms => {
                let victim = self.plan.hosts()[v].name.as_str();
                choose_uplink(&self.plan, link, |p| p.name() != victim)
            }
            _ => &link.parent,
        };
        match peer {
            Peer::Gateway => Dest::Gateway,
            // The primary parent: its index is in the plan already.
            Peer::Host(_) if std::ptr::eq(peer, &link.parent) => {
                link.parent_index.map_or(Dest::Gateway, Dest::Node)
            }
            Peer::Host(name) => self.plan.index_of(name).map_or(Dest::Gateway, Dest::Node),
        }
    }

    /// True when a record sent to `dest` at `t` is received (a dead relay
    /// receives nothing, and the sender only learns it later).
    pub fn delivered(&self, dest: Dest, t: i64) -> bool {
        match dest {
            Dest::Gateway => true,
            Dest::Node(i) => !self.dead(i, t),
        }
    }

    /// True when node `i` samples its simulated host at leaf tick `k`
    /// (always at the first tick; then with chance `change_fraction`).
    pub fn samples_host(&self, i: usize, k: u32) -> bool {
        let f = self.cfg.change_fraction;
        if k == 0 || f >= 1.0 {
            return true;
        }
        // The top 53 bits of a draw, uniform in [0, 1).
        let u =
            (draw(self.cfg.seed, i as u64, 3 + u64::from(k)) >> 11) as f64 / (1u64 << 53) as f64;
        u < f
    }

    /// Arrival time of a record sent at `t` over the network.
    pub fn arrival(&self, t: i64) -> i64 {
        t + self.cfg.link_latency_ms
    }
}

/// Virtual Unix time of tick 0: a round number, so ticks are easy to read.
const T0: i64 = 1_800_000_000_000;

/// A deterministic draw from (seed, node, salt): splitmix64.
fn draw(seed: u64, node: u64, salt: u64) -> u64 {
    let mut z = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(node.wrapping_mul(0xBF58_476D_1CE4_E5B9))
        .wrapping_add(salt.wrapping_mul(0x94D0_49BB_1331_11EB));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

//! Which role runs when, on how many threads.
//!
//! 1. Every leaf, in any order (they depend on nothing): their records go
//!    to the inbox of their destination.
//! 2. Every subtree's relays bottom-up (descending heap slot, so children
//!    and every failover target come first). Subtrees are independent
//!    (a relay only ever sends to an ancestor in its own subtree, or to the
//!    gateway), so they run in parallel.
//! 3. The gateway, over what the tops (and any child that failed over to
//!    it) sent.
//!
//! Each role measures its own thread's CPU time, so running roles on
//! several threads changes the wall time, not the figures. Inputs are
//! sorted by sender before a role runs, so results do not depend on the
//! thread count.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use canopy_topology::Role;

use super::FabricError;
use super::leaf::run_leaf;
use super::measure::CpuClock;
use super::relay::run_relay;
use super::report::Tally;
use super::stream::Segment;
use super::timing::{Ctx, Dest};

/// Leaves handed to a thread at a time.
const LEAF_CHUNK: usize = 256;

struct Shared<'a> {
    ctx: &'a Ctx,
    clock: &'a CpuClock,
    inbox: Vec<Mutex<Vec<Segment>>>,
    gateway: Mutex<Vec<Segment>>,
    ran_relay: Vec<AtomicBool>,
    tally: Mutex<Tally>,
    error: Mutex<Option<FabricError>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared<'_> {
    fn route(&self, segs: Vec<Segment>) -> Result<(), FabricError> {
        for s in segs.into_iter().filter(|s| !s.recs.is_empty()) {
            match s.dest {
                Dest::Gateway => lock(&self.gateway).push(s),
                Dest::Node(j) if self.ran_relay[j].load(Ordering::Acquire) => {
                    return Err(FabricError::Order(j));
                }
                Dest::Node(j) => lock(&self.inbox[j]).push(s),
            }
        }
        Ok(())
    }

    fn fail(&self, e: FabricError) {
        lock(&self.error).get_or_insert(e);
    }

    fn failed(&self) -> bool {
        lock(&self.error).is_some()
    }
}

/// Sorts a role's inputs by sender, output and connection.
pub fn sort_inputs(inputs: &mut [Segment]) {
    inputs.sort_unstable_by_key(|s| (s.from, s.conn));
}

/// Runs every leaf and relay on `threads` threads; returns the tally and
/// the gateway's inputs (sorted).
pub fn run_roles(
    ctx: &Ctx,
    clock: &CpuClock,
    threads: usize,
) -> Result<(Tally, Vec<Segment>), FabricError> {
    let n = ctx.plan.hosts().len();
    let k = ctx.cfg.subtrees;
    let mut relays: Vec<Vec<(usize, usize)>> = vec![Vec::new(); k];
    for (i, h) in ctx.plan.hosts().iter().enumerate() {
        for l in h.links.iter().filter(|l| l.role == Role::Interior) {
            relays[l.subtree].push((l.slot, i));
        }
    }
    for r in &mut relays {
        r.sort_unstable_by(|a, b| b.cmp(a));
    }
    let sh = Shared {
        ctx,
        clock,
        inbox: (0..n).map(|_| Mutex::new(Vec::new())).collect(),
        gateway: Mutex::new(Vec::new()),
        ran_relay: (0..n).map(|_| AtomicBool::new(false)).collect(),
        tally: Mutex::new(Tally::default()),
        error: Mutex::new(None),
    };
    let threads = threads.max(1);

    let next_leaf = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                while !sh.failed() {
                    let from = next_leaf.fetch_add(LEAF_CHUNK, Ordering::Relaxed);
                    if from >= n {
                        break;
                    }
                    for i in from..(from + LEAF_CHUNK).min(n) {
                        let res = run_leaf(sh.ctx, sh.clock, i).and_then(|out| {
                            lock(&sh.tally).leaf(&out);
                            sh.route(out.segments)
                        });
                        if let Err(e) = res {
                            sh.fail(e);
                            return;
                        }
                    }
                }
            });
        }
    });

    tracing::info!(
        rss_mib = super::rss_bytes().0 >> 20,
        "leaves done; relays next"
    );
    let next_subtree = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                while !sh.failed() {
                    let t = next_subtree.fetch_add(1, Ordering::Relaxed);
                    let Some(order) = relays.get(t) else { break };
                    tracing::info!(subtree = t, relays = order.len(), "subtree started");
                    for &(_, i) in order {
                        let mut inputs = std::mem::take(&mut *lock(&sh.inbox[i]));
                        sort_inputs(&mut inputs);
                        let res = run_relay(sh.ctx, sh.clock, i, &inputs).and_then(|out| {
                            drop(inputs);
                            sh.ran_relay[i].store(true, Ordering::Release);
                            lock(&sh.tally).relay(sh.ctx, i, &out);
                            sh.route(out.segments)
                        });
                        if let Err(e) = res {
                            sh.fail(e);
                            return;
                        }
                    }
                }
            });
        }
    });

    if let Some(e) = sh
        .error
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner)
    {
        return Err(e);
    }
    let mut gw = sh
        .gateway
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner);
    sort_inputs(&mut gw);
    let tally = sh
        .tally
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner);
    Ok((tally, gw))
}

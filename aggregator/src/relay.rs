//! The relay shell: QUIC children in, merged frames up, once per tick.
//!
//! Thin async wiring around the pure [`Merger`](crate::merge::Merger): one
//! task per child link feeds its records to the merger; a tick task encodes
//! the merger's changeset on every uplink (a fresh encoder, hence a
//! keyframe from the merger's full state, whenever an uplink reconnects).
//! The root gateway runs the same relay with no uplinks and a store sink.
//!
//! Acknowledgements: every child link gets a cumulative count of its
//! records taken for good, at most every [`ACK_EVERY`]. A relay with
//! uplinks acks a child's record once an uplink's frame that carried it
//! (tagged with the tick) was acknowledged upstream, so a relay that dies
//! with records merged but not passed on has not acked them: the child
//! replays them to its backup. A relay without uplinks (the gateway) acks
//! once its sink took the record (after its commit, for a durable sink).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use canopy_proto::codec::CodecConfig;
use canopy_proto::link::{
    Control, InboundLink, LinkError, Listener, Uplink, UplinkEncoder, WarnLimiter, unix_now_ms,
};
use tokio::sync::{mpsc, watch};

use crate::merge::{MergeConfig, Merger, Sink};
use crate::schedule::TickSchedule;

/// Settings of a relay.
#[derive(Clone, Debug)]
pub struct RelayConfig {
    /// Uplink tick: how often merged changes go up.
    pub tick: Duration,
    /// Merger settings.
    pub merge: MergeConfig,
    /// Codec settings of the uplinks.
    pub codec: CodecConfig,
}

/// Most often an ack goes down one child link.
pub const ACK_EVERY: Duration = Duration::from_millis(100);

/// Ticks a child's records may wait for upstream acks before entries merge.
const MAX_PENDING_TICKS: usize = 64;

/// How acks are earned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AckMode {
    /// Once an uplink frame carrying the record is acked upstream.
    Upstream,
    /// Once the sink took the record.
    Sink,
    /// Once the sink committed it ([`Relay::commit_with`]).
    Commit,
}

/// Ack bookkeeping of one child link.
#[derive(Debug, Default)]
struct ChildAcks {
    /// Records of the link fed to the merger.
    fed: u64,
    /// (tick, records fed by then), oldest first, not yet safe upstream.
    pending: VecDeque<(u64, u64)>,
    /// What may be acked now (read by the link's task).
    ack: Arc<AtomicU64>,
}

struct Inner<S> {
    merger: Merger,
    sink: S,
    acks: HashMap<u64, ChildAcks>,
    mode: AckMode,
    /// Ticks emitted (the tag of their uplink frames).
    tick_no: u64,
    /// Rejected children are logged at warn once a minute (a flooding
    /// child reconnects and is refused again and again).
    rejected_warn: WarnLimiter,
}

/// A running relay: a merger, its sink, and the tasks around them.
pub struct Relay<S> {
    inner: Arc<Mutex<Inner<S>>>,
    next_child: Arc<AtomicU64>,
    cfg: RelayConfig,
}

impl<S> Clone for Relay<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            next_child: self.next_child.clone(),
            cfg: self.cfg.clone(),
        }
    }
}

impl<S: Sink + Send + 'static> Relay<S> {
    /// A relay delivering accepted data to `sink`.
    pub fn new(cfg: RelayConfig, sink: S) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                merger: Merger::new(cfg.merge.clone()),
                sink,
                acks: HashMap::new(),
                mode: AckMode::Upstream,
                tick_no: 0,
                rejected_warn: WarnLimiter::default(),
            })),
            next_child: Arc::new(AtomicU64::new(1)),
            cfg,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner<S>> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `f` on the sink (e.g. to read what it gathered).
    pub fn with_sink<R>(&self, f: impl FnOnce(&mut S) -> R) -> R {
        f(&mut self.lock().sink)
    }

    /// Runs `f` on the merger (stats, table).
    pub fn with_merger<R>(&self, f: impl FnOnce(&Merger) -> R) -> R {
        f(&self.lock().merger)
    }

    fn child_id(&self) -> u64 {
        self.next_child.fetch_add(1, Ordering::Relaxed)
    }

    /// Acks wait for the sink's commit: call [`Relay::commit_with`] after
    /// each durable flush (a gateway with a write-ahead log).
    pub fn acks_on_commit(&self) {
        self.lock().mode = AckMode::Commit;
    }

    /// Runs `f` (a flush) on the sink, then acks every record fed before,
    /// under one lock so nothing fed after the flush is acked.
    pub fn commit_with<R>(&self, f: impl FnOnce(&mut S) -> R) -> R {
        let mut g = self.lock();
        let r = f(&mut g.sink);
        if g.mode == AckMode::Commit {
            for c in g.acks.values() {
                c.ack.store(c.fed, Ordering::Release);
            }
        }
        r
    }

    /// Feeds one record of `child`; false when the child must be dropped.
    fn feed(&self, child: u64, payload: &[u8]) -> bool {
        let mut g = self.lock();
        let Inner {
            merger,
            sink,
            acks,
            mode,
            rejected_warn,
            ..
        } = &mut *g;
        match merger.on_record(child, payload, sink) {
            Ok(_) => {
                if let Some(c) = acks.get_mut(&child) {
                    c.fed += 1;
                    if *mode == AckMode::Sink {
                        c.ack.store(c.fed, Ordering::Release);
                    }
                }
                true
            }
            Err(e) => {
                if let Some(suppressed) = rejected_warn.allow() {
                    tracing::warn!(child, error = %e, suppressed, "rejected a child's frame; closing its link");
                } else {
                    tracing::debug!(child, error = %e, "rejected a child's frame; closing its link");
                }
                merger.child_gone(child);
                false
            }
        }
    }

    /// A child's link ended in error: a record the link layer refused
    /// (oversized, malformed prefix) is counted and logged like a rejected
    /// frame; anything else (the child went away) is routine.
    fn link_error(&self, peer: &str, e: &LinkError) {
        let reason = match e {
            LinkError::RecordTooLarge { .. } => "record_too_large",
            LinkError::Protocol { .. } => "protocol",
            _ => {
                tracing::info!(peer, error = %e, "child link ended");
                return;
            }
        };
        let mut g = self.lock();
        g.merger.count_rejected(reason);
        if let Some(suppressed) = g.rejected_warn.allow() {
            tracing::warn!(peer, error = %e, suppressed, "refused a child's record; closed its link");
        }
    }

    /// Accepts children on `listener` until shutdown.
    pub fn spawn_listener(&self, listener: Listener, mut shutdown: watch::Receiver<bool>) {
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                let link = tokio::select! {
                    l = listener.accept() => l,
                    _ = shutdown.changed() => break,
                };
                match link {
                    None => break,
                    Some(Err(e)) => tracing::warn!(error = %e, "a child failed to set up its link"),
                    Some(Ok(link)) => me.spawn_child(link),
                }
            }
            listener.close();
        });
    }

    fn spawn_child(&self, link: InboundLink) {
        let me = self.clone();
        let child = self.child_id();
        if let Err(e) = self.lock().merger.child_connected(child) {
            tracing::warn!(error = %e, "cannot take another child");
            return;
        }
        tracing::info!(peer = link.peer(), child, "child connected");
        let ack = Arc::new(AtomicU64::new(0));
        self.lock().acks.insert(
            child,
            ChildAcks {
                ack: ack.clone(),
                ..ChildAcks::default()
            },
        );
        tokio::spawn(async move {
            let mut acked = 0;
            let mut every = tokio::time::interval(ACK_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    r = link.recv_record() => match r {
                        Ok(Some(payload)) => {
                            if !me.feed(child, &payload) {
                                link.close().await;
                                break;
                            }
                        }
                        Ok(None) => break,
                        Err(e) => {
                            me.link_error(link.peer(), &e);
                            break;
                        }
                    },
                    _ = every.tick() => {
                        let a = ack.load(Ordering::Acquire);
                        if a > acked {
                            if let Err(e) = link.send_control(&Control::Ack(a).encode()).await {
                                tracing::info!(peer = link.peer(), error = %e, "child link ended (ack)");
                                break;
                            }
                            acked = a;
                        }
                    }
                }
            }
            let mut g = me.lock();
            g.merger.child_gone(child);
            g.acks.remove(&child);
        });
    }

    /// Feeds in-memory records (the node's own leaf) as one more child.
    pub fn spawn_local(&self, mut rx: mpsc::Receiver<Vec<u8>>) {
        let me = self.clone();
        let child = self.child_id();
        if self.lock().merger.child_connected(child).is_err() {
            return;
        }
        tokio::spawn(async move {
            while let Some(p) = rx.recv().await {
                me.feed(child, &p);
            }
        });
    }

    /// Every tick: merged changes to every uplink, and expiry of silent
    /// sources. Runs until shutdown.
    pub fn spawn_ticker(&self, uplinks: Vec<Uplink>, shutdown: watch::Receiver<bool>) {
        self.spawn_ticker_at(uplinks, None, shutdown);
    }

    /// [`Relay::spawn_ticker`] on a wall-clock schedule (staggered timers,
    /// see [`crate::schedule`]): each tick at the schedule's next firing.
    /// `None`: every `tick` from now, as `spawn_ticker`.
    pub fn spawn_ticker_at(
        &self,
        uplinks: Vec<Uplink>,
        at: Option<TickSchedule>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let me = self.clone();
        if uplinks.is_empty() {
            let mut g = self.lock();
            if g.mode == AckMode::Upstream {
                g.mode = AckMode::Sink;
            }
        }
        tokio::spawn(async move {
            let mut encs: Vec<UplinkEncoder> = uplinks
                .iter()
                .map(|_| UplinkEncoder::new(&me.cfg.codec))
                .collect();
            let mut interval = tokio::time::interval(me.cfg.tick);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                let wait = async {
                    match at {
                        Some(s) => {
                            let ms = s.wait_ms(unix_now_ms());
                            tokio::time::sleep(Duration::from_millis(ms)).await;
                        }
                        None => {
                            interval.tick().await;
                        }
                    }
                };
                tokio::select! {
                    _ = wait => {}
                    _ = shutdown.changed() => break,
                }
                let now = unix_now_ms();
                let mut g = me.lock();
                let Inner {
                    merger,
                    sink,
                    acks,
                    mode,
                    tick_no,
                    ..
                } = &mut *g;
                merger.expire(now, sink);
                let (table, cs) = merger.take_changeset(now);
                *tick_no += 1;
                // Connected or not: the uplink buffers while no parent
                // takes its records.
                for (u, enc) in uplinks.iter().zip(encs.iter_mut()) {
                    enc.emit_tagged(u, table, cs, *tick_no);
                }
                merger.end_tick();
                if *mode == AckMode::Upstream {
                    // Any one uplink holding a tick for good makes it safe.
                    let safe = uplinks.iter().map(Uplink::acked_tag).max().unwrap_or(0);
                    release_acks(acks, *tick_no, safe);
                }
            }
        });
    }
}

/// Notes what each child had fed by tick `tick`, then acks what is in a
/// tick acknowledged upstream (`safe`).
fn release_acks(acks: &mut HashMap<u64, ChildAcks>, tick: u64, safe: u64) {
    for c in acks.values_mut() {
        if c.pending
            .back()
            .map_or(c.ack.load(Ordering::Relaxed), |p| p.1)
            < c.fed
        {
            if c.pending.len() >= MAX_PENDING_TICKS {
                // Upstream is not acking (an outage): later ticks merge
                // into the newest entry, which keeps the bound.
                c.pending.pop_back();
            }
            c.pending.push_back((tick, c.fed));
        }
        while let Some(&(t, fed)) = c.pending.front() {
            if t > safe {
                break;
            }
            c.ack.store(fed, Ordering::Release);
            c.pending.pop_front();
        }
    }
}

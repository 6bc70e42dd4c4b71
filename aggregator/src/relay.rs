//! The relay shell: QUIC children in, merged frames up, once per tick.
//!
//! Thin async wiring around the pure [`Merger`](crate::merge::Merger): one
//! task per child link feeds its records to the merger; a tick task encodes
//! the merger's changeset on every uplink (a fresh encoder, hence a
//! keyframe from the merger's full state, whenever an uplink reconnects).
//! The root gateway runs the same relay with no uplinks and a store sink.
//!
//! Acknowledgements: every child link gets a cumulative count of its
//! records taken for good, as soon as it moves, at most one per
//! [`ACK_EVERY`] (faster moves coalesce into the next). A relay with
//! uplinks acks a child's record once the uplink frame that carried it
//! (tagged with the tick) was acknowledged upstream, by every live uplink
//! when there are several (a subtree top, one per gateway: see
//! [`crate::acks`]), so a relay that dies with records merged but not
//! passed on has not acked them: the child replays them to its backup.
//! Upstream acks are forwarded when they arrive (each uplink wakes the
//! relay), not on the next tick, so a deep tree does not add a tick of
//! replay-buffer hold per level. A relay without uplinks (the gateway) acks
//! once its sink took the record (after its commit, for a durable sink,
//! and never while a section of the record is held in the merger waiting
//! for a hole to fill: it is not in the sink yet).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use canopy_proto::codec::CodecConfig;
use canopy_proto::link::{
    Control, InboundLink, LinkError, Listener, Uplink, UplinkEncoder, WarnLimiter, unix_now_ms,
};
use tokio::sync::{Notify, mpsc, watch};

use crate::acks::{AckQuorum, PendingAcks, UpAck};
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

/// Most often an ack goes down one child link: an ack is sent as soon as
/// the count moves, unless one went less than this ago (then the newest
/// count goes when this has passed), so an ack storm costs one packet
/// per this per link.
pub const ACK_EVERY: Duration = Duration::from_millis(20);

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
    /// Records fed, per tick, not yet safe upstream.
    pending: PendingAcks,
    /// What may be acked now (read by the link's task).
    ack: Arc<AtomicU64>,
    /// Wakes the link's task when `ack` moved.
    wake: Arc<Notify>,
}

impl ChildAcks {
    /// `n` records may be acked: tell the link's task when that is news.
    fn raise(&self, n: u64) {
        if self.ack.fetch_max(n, Ordering::AcqRel) < n {
            self.wake.notify_one();
        }
    }
}

struct Inner<S> {
    merger: Merger,
    sink: S,
    acks: HashMap<u64, ChildAcks>,
    mode: AckMode,
    /// Ticks emitted (the tag of their uplink frames).
    tick_no: u64,
    /// Which ticks are held upstream for good (by every live uplink).
    quorum: AckQuorum,
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
                quorum: AckQuorum::default(),
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

    /// Runs `f` (a flush) on the sink and, when it says the flush is
    /// durable (true), acks every record fed before, under one lock so
    /// nothing fed after the flush is acked, except from the first record
    /// of a child with a section still held by the merger (waiting for a
    /// hole to fill): that one is not in the sink, so it is acked by the
    /// first commit after the merger released it. A failed flush acks
    /// nothing (the sink keeps its ops for the next one).
    pub fn commit_with(&self, f: impl FnOnce(&mut S) -> bool) -> bool {
        let mut g = self.lock();
        let r = f(&mut g.sink);
        if r && g.mode == AckMode::Commit {
            let held = g.merger.held_records();
            for (id, c) in &g.acks {
                let upto = held.get(id).map_or(c.fed, |&r| c.fed.min(r - 1));
                c.raise(upto);
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
                        c.raise(c.fed);
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
        let (ack, wake) = self.register_acks(child);
        tokio::spawn(async move {
            let mut acked = 0;
            // When the next ack goes (set when the count moved), and the
            // earliest it may (one per ACK_EVERY).
            let mut due: Option<tokio::time::Instant> = None;
            let mut earliest = tokio::time::Instant::now();
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
                    () = wake.notified(), if due.is_none() => {
                        due = Some(earliest.max(tokio::time::Instant::now()));
                    }
                    () = sleep_until(due), if due.is_some() => {
                        due = None;
                        let a = ack.load(Ordering::Acquire);
                        if a > acked {
                            if let Err(e) = link.send_control(&Control::Ack(a).encode()).await {
                                tracing::info!(peer = link.peer(), error = %e, "child link ended (ack)");
                                break;
                            }
                            acked = a;
                            earliest = tokio::time::Instant::now() + ACK_EVERY;
                        }
                    }
                }
            }
            let mut g = me.lock();
            g.merger.child_gone(child);
            g.acks.remove(&child);
        });
    }

    /// Starts the ack bookkeeping of a child link: what may be acked, and
    /// what wakes its task when that moves.
    fn register_acks(&self, child: u64) -> (Arc<AtomicU64>, Arc<Notify>) {
        let c = ChildAcks::default();
        let out = (c.ack.clone(), c.wake.clone());
        self.lock().acks.insert(child, c);
        out
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
        } else {
            self.spawn_upstream_acks(uplinks.clone(), shutdown.clone());
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
                    quorum,
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
                    for c in acks.values_mut() {
                        c.pending.note_tick(*tick_no, c.fed);
                    }
                    release_upstream(acks, quorum, &uplinks);
                }
            }
        });
    }

    /// Forwards upstream acks as they arrive: each uplink's ack progress
    /// (or liveness change) wakes one task that acks what every live
    /// uplink now holds. Runs until shutdown.
    fn spawn_upstream_acks(&self, uplinks: Vec<Uplink>, mut shutdown: watch::Receiver<bool>) {
        let wake = Arc::new(Notify::new());
        for u in &uplinks {
            let mut rx = u.watch();
            let (wake, mut sd) = (wake.clone(), shutdown.clone());
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        r = rx.changed() => {
                            if r.is_err() {
                                break;
                            }
                            wake.notify_one();
                        }
                        _ = sd.changed() => break,
                    }
                }
            });
        }
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = wake.notified() => {}
                    _ = shutdown.changed() => break,
                }
                let mut g = me.lock();
                if g.mode != AckMode::Upstream {
                    continue;
                }
                let Inner { acks, quorum, .. } = &mut *g;
                release_upstream(acks, quorum, &uplinks);
            }
        });
    }
}

/// Acks each child what is in ticks every live uplink holds for good.
fn release_upstream(acks: &mut HashMap<u64, ChildAcks>, quorum: &mut AckQuorum, ups: &[Uplink]) {
    let state: Vec<UpAck> = ups
        .iter()
        .map(|u| UpAck {
            live: u.is_live(),
            acked_tag: u.acked_tag(),
        })
        .collect();
    let safe = quorum.update(&state);
    for c in acks.values_mut() {
        if let Some(n) = c.pending.release(safe) {
            c.raise(n);
        }
    }
}

/// Sleeps until `due`; forever when it is `None`.
async fn sleep_until(due: Option<tokio::time::Instant>) {
    match due {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use canopy_proto::codec::{BoundsPolicy, LinkEncoder, Sender, record};
    use canopy_proto::{Labels, MetricKind};

    use super::*;

    /// A durable sink: samples wait in `pending` until the commit moves
    /// them to `stored` (as the gateway's write-ahead log does).
    #[derive(Default)]
    struct Durable {
        pending: Vec<i64>,
        stored: Vec<i64>,
    }

    impl Sink for Durable {
        fn sample(&mut self, _: &str, _: &Labels, ts_ms: i64, _: f64) {
            self.pending.push(ts_ms / 1000);
        }
        fn heartbeat(&mut self, _: &str, _: i64, _: u32) {}
        fn retire(&mut self, _: &str, _: &Labels, _: i64) {}
    }

    fn flush(s: &mut Durable) -> bool {
        let p = std::mem::take(&mut s.pending);
        s.stored.extend(p);
        true
    }

    /// One leaf with one encoder per link; `tick` gives each link's record.
    struct Leaf {
        tx: Sender,
        encs: Vec<LinkEncoder>,
    }

    impl Leaf {
        fn tick(&mut self, t: i64) -> Vec<Vec<u8>> {
            let src = self.tx.source("n1", 1000);
            self.tx.begin_tick(t * 1000);
            self.tx.tick_source(src, t * 1000);
            let l = Labels::metric("ticks_total", [("node", "n1")]);
            self.tx.observe(src, &l, MetricKind::Counter, t as f64);
            let (table, cs) = self.tx.finish_tick();
            let out = self
                .encs
                .iter_mut()
                .map(|e| {
                    let mut rec = Vec::new();
                    e.encode(table, cs, &mut rec).expect("encode");
                    let (len, pre) = record::read_prefix(&rec, usize::MAX)
                        .expect("prefix")
                        .expect("whole");
                    rec[pre..pre + len].to_vec()
                })
                .collect();
            self.tx.end_tick();
            out
        }
    }

    fn acked(r: &Relay<Durable>, child: u64) -> u64 {
        r.lock().acks[&child].ack.load(Ordering::Acquire)
    }

    /// Hole (b): a durable gateway acks a record only once all of it is in
    /// the sink and committed. Path B's relay died with tick 4; B's child
    /// failed over (child 3, a fresh link) and brings tick 5 first, which
    /// the merger holds for the hole. Acking it then, a kill -9 before the
    /// slower path A fills tick 4 would lose tick 5: acked, so never
    /// replayed, and only in the merger's memory.
    #[test]
    fn a_durable_gateway_does_not_ack_a_held_section_before_storing_it() {
        let r = Relay::new(
            RelayConfig {
                tick: Duration::from_secs(1),
                merge: MergeConfig {
                    hole_wait_ms: 8_000,
                    ..MergeConfig::default()
                },
                codec: CodecConfig::default(),
            },
            Durable::default(),
        );
        r.acks_on_commit();
        for c in [1, 2, 3] {
            r.lock().merger.child_connected(c).expect("child");
            r.register_acks(c);
        }
        let mut leaf = Leaf {
            tx: Sender::new(BoundsPolicy::default()),
            encs: (0..2)
                .map(|_| LinkEncoder::new(&CodecConfig::default()).expect("encoder"))
                .collect(),
        };
        let mut slow = Vec::new();
        for t in 1..=5 {
            if t == 5 {
                // The failed-over link: a fresh encoder, keyframe first.
                let e = LinkEncoder::new(&CodecConfig::default()).expect("encoder");
                leaf.encs.push(e);
            }
            let recs = leaf.tick(t);
            match t {
                ..=3 => {
                    assert!(r.feed(1, &recs[0]));
                    assert!(r.feed(2, &recs[1]));
                }
                4 => slow.push(recs[0].clone()), // A is slow; B died with it
                _ => {
                    slow.push(recs[0].clone());
                    assert!(r.feed(3, &recs[2]), "B's child on its backup");
                }
            }
        }
        r.commit_with(flush);
        assert_eq!(acked(&r, 1), 3);
        assert_eq!(acked(&r, 2), 3);
        assert!(
            r.with_merger(|m| m.stats().sections_held) > 0,
            "tick 5 waits for the hole"
        );
        assert!(!r.with_sink(|s| s.stored.contains(&5)));
        assert_eq!(
            acked(&r, 3),
            0,
            "tick 5 is held in the merger, not stored: not acked"
        );
        // A fills the hole: tick 4 and the held tick 5 are stored by the
        // next commit, and acked by it.
        assert!(r.feed(1, &slow[0]));
        assert_eq!(acked(&r, 3), 0, "not committed yet");
        r.commit_with(flush);
        assert_eq!(r.with_sink(|s| s.stored.clone()), vec![1, 2, 3, 4, 5]);
        assert_eq!(acked(&r, 1), 4);
        assert_eq!(acked(&r, 3), 1);
        assert!(r.feed(1, &slow[1]), "A's tick 5: a duplicate");
        r.commit_with(flush);
        assert_eq!(acked(&r, 1), 5);
    }

    /// A flush that did not reach the log (disk full, I/O error) acks
    /// nothing: the records stay with the child until a flush succeeds.
    #[test]
    fn a_failed_commit_acks_nothing() {
        let r = Relay::new(
            RelayConfig {
                tick: Duration::from_secs(1),
                merge: MergeConfig::default(),
                codec: CodecConfig::default(),
            },
            Durable::default(),
        );
        r.acks_on_commit();
        r.lock().merger.child_connected(1).expect("child");
        r.register_acks(1);
        let mut leaf = Leaf {
            tx: Sender::new(BoundsPolicy::default()),
            encs: vec![LinkEncoder::new(&CodecConfig::default()).expect("encoder")],
        };
        for t in 1..=2 {
            assert!(r.feed(1, &leaf.tick(t)[0]));
        }
        assert!(r.commit_with(flush));
        assert_eq!(acked(&r, 1), 2);
        assert!(r.feed(1, &leaf.tick(3)[0]));
        assert!(!r.commit_with(|_| false), "the log refused the batch");
        assert_eq!(acked(&r, 1), 2, "tick 3 is not durable: not acked");
        assert!(r.commit_with(flush));
        assert_eq!(acked(&r, 1), 3);
    }
}

//! One planned uplink with failover and a bounded replay buffer.
//!
//! The plan is the agreement (no election): the uplink sends to its primary
//! while it answers, moves to the backup when the primary's connection dies
//! or cannot be made, and moves back as soon as the primary accepts again
//! (probed every `probe_interval` while on the backup).
//!
//! Records wait in an [`Outbox`] (bounded by bytes and age) until a parent
//! takes them, so frames made while no parent is reachable (start-up, an
//! outage of both parents) are sent on reconnect, oldest first. The encoder
//! side ([`UplinkEncoder`]) encodes for the outbox's current *epoch* and
//! starts a fresh encoder (a keyframe) whenever the epoch moves on: when the
//! live link died, or a long outage was cut into segments.
//!
//! A parent is left for the backup when its connection dies, when it stops
//! taking records for `send_timeout` (flow control), or when it keeps the
//! link but the oldest record written to it waits longer than
//! `ack_timeout` for its acknowledgement (it reads and discards, or stopped
//! reading while the flow-control window is far from full). After such an
//! ack stall the primary is not tried again for a hold-down (doubling with
//! each stall in a row, reset once it acks), so a primary that still does
//! not ack is not revisited every probe.
//!
//! Liveness for a relay's ack rule ([`Uplink::is_live`]): an uplink is live
//! while connected and not left for an ack stall it has not recovered from
//! (no ack since). [`Uplink::watch`] wakes on every ack progress and every
//! liveness change, so a relay forwards acks as they arrive.

#[cfg(test)]
mod ack_tests;
mod encoder;
mod outbox;
mod parents;
mod rebuild;
mod shadow;
mod stall;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

pub use encoder::UplinkEncoder;
pub use outbox::{AckError, BufferLimits, Outbox, OutboxStats};
pub use shadow::{Recipe, Shadow};

use super::{Control, Dialer, OutboundLink, unix_now_ms};
use crate::codec::CodecConfig;
use parents::Parents;
use stall::{AckClock, AckHold, Answer, earliest, sleep_until_due};

/// Where one parent listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UplinkTarget {
    /// Host name of the parent (checked against its certificate).
    pub name: String,
    /// Its QUIC address.
    pub addr: SocketAddr,
}

/// An uplink's parents and tunables.
#[derive(Clone, Debug)]
pub struct UplinkConfig {
    /// Planned parent.
    pub primary: UplinkTarget,
    /// Planned backup parent, if any.
    pub backup: Option<UplinkTarget>,
    /// Parents reached together with `backup` on a failover: each record
    /// then goes to every one that answers, and counts as acknowledged
    /// once all of them acknowledged it. For a backup that is "the
    /// gateway" when there are several: the failed-over child stands in
    /// for its subtree top, which sends to every gateway. Empty: none.
    pub backup_group: Vec<UplinkTarget>,
    /// Limits of the replay buffer.
    pub buffer: BufferLimits,
    /// Pause between failed connection attempts.
    pub retry: Duration,
    /// While on the backup, how often to try the primary again.
    pub probe_interval: Duration,
    /// Longest one record may wait for the parent to take it (flow
    /// control): a parent that stops reading is left for the backup.
    pub send_timeout: Duration,
    /// Codec settings of the records (the outbox's mirror decodes them).
    pub codec: CodecConfig,
    /// Shortest wait for the parent's ack of a replayed segment before it
    /// is given up on (the wait is the larger of this and `ack_timeout`).
    /// With no ack timeout, the segment then counts as delivered.
    pub replay_ack_wait: Duration,
    /// Longest the oldest record written on the live link may wait for the
    /// parent's acknowledgement before the parent is left as stalled (an
    /// ack stall); zero: never. Must exceed the parent's ack latency (its
    /// own upstream's, for a relay).
    pub ack_timeout: Duration,
    /// Longest a record written to the parent may wait for any packet from
    /// it (its QUIC ACK comes within 25 ms plus a round trip) before the
    /// parent counts as dead and the link is left: with a record every
    /// 1 s tick, a parent that vanished is left within 1 s + this, with no
    /// keep-alive pings on the link. Zero: only QUIC's idle timeout.
    pub answer_timeout: Duration,
}

impl UplinkConfig {
    /// Defaults for a primary and an optional backup.
    pub fn new(primary: UplinkTarget, backup: Option<UplinkTarget>) -> Self {
        Self {
            primary,
            backup,
            backup_group: Vec::new(),
            buffer: BufferLimits::default(),
            retry: Duration::from_millis(250),
            probe_interval: Duration::from_secs(2),
            send_timeout: Duration::from_secs(5),
            codec: CodecConfig::default(),
            replay_ack_wait: Duration::from_secs(3),
            ack_timeout: DEFAULT_ACK_TIMEOUT,
            answer_timeout: DEFAULT_ANSWER_TIMEOUT,
        }
    }
}

/// [`UplinkConfig::answer_timeout`] by default: with the 1 s tick, a dead
/// parent is left within 2 s.
pub const DEFAULT_ANSWER_TIMEOUT: Duration = Duration::from_secs(1);

/// [`UplinkConfig::ack_timeout`] when none is planned.
pub const DEFAULT_ACK_TIMEOUT: Duration = Duration::from_secs(10);

/// Counters an operator graphs for each uplink.
#[derive(Debug, Default)]
pub struct UplinkStats {
    /// Records written to a parent.
    pub records_sent: AtomicU64,
    /// Bytes written to a parent (payloads).
    pub bytes_sent: AtomicU64,
    /// Connections established (first one included).
    pub connects: AtomicU64,
    /// Moves from the primary to the backup.
    pub failovers: AtomicU64,
    /// Failed connection attempts.
    pub connect_failures: AtomicU64,
    /// Buffered segments replayed after an outage.
    pub segments_replayed: AtomicU64,
    /// Milliseconds from losing the parent to the next link's first write,
    /// summed over reconnects (with `reconnects`, the mean reparent time).
    pub reparent_ms_total: AtomicU64,
    /// Reconnects after a lost link.
    pub reconnects: AtomicU64,
    /// Links left because the parent stopped taking records (send timeout).
    pub stalls: AtomicU64,
    /// Links left because the parent kept the link but did not acknowledge
    /// the oldest written record within the ack timeout.
    pub ack_stalls: AtomicU64,
    /// Control records from the parent that did not parse.
    pub bad_controls: AtomicU64,
    /// Reparent times (ms), for the histogram; bounded (oldest go first).
    pub reparents: Mutex<std::collections::VecDeque<u64>>,
}

/// Reparent times kept for the histogram until read.
const MAX_REPARENTS: usize = 4096;

impl UplinkStats {
    /// Takes the reparent times (ms) recorded since the last call.
    pub fn take_reparents(&self) -> Vec<u64> {
        let mut q = self
            .reparents
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        q.drain(..).collect()
    }

    fn record_reparent(&self, ms: u64) {
        let mut q = self
            .reparents
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if q.len() >= MAX_REPARENTS {
            q.pop_front();
        }
        q.push_back(ms);
    }
}

#[derive(Debug)]
struct Shared {
    outbox: Mutex<Outbox>,
    more: tokio::sync::Notify,
    restart: tokio::sync::Notify,
    connected: AtomicBool,
    on_backup: AtomicBool,
    closed: AtomicBool,
    /// Left for an ack stall, and no ack since.
    stalled: AtomicBool,
    /// Bumped on ack progress and liveness changes (see [`Uplink::watch`]).
    events: tokio::sync::watch::Sender<u64>,
    stats: UplinkStats,
    bad_ack_warn: super::WarnLimiter,
}

impl Shared {
    fn outbox(&self) -> MutexGuard<'_, Outbox> {
        self.outbox
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Wakes every [`Uplink::watch`] receiver.
    fn changed(&self) {
        self.events.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The parent took records for good: it is not stalled (any more).
    fn acked(&self) {
        self.stalled.store(false, Ordering::Release);
        self.changed();
    }

    /// Connected or not, for [`Uplink::is_live`].
    fn set_connected(&self, up: bool) {
        if self.connected.swap(up, Ordering::AcqRel) != up {
            self.changed();
        }
    }

    /// Left for an ack stall: not live until it acks again.
    fn set_stalled(&self) {
        if !self.stalled.swap(true, Ordering::AcqRel) {
            self.changed();
        }
    }
}

/// Handle to one uplink; the connection runs in its own task, which ends
/// when every handle is dropped.
#[derive(Clone, Debug)]
pub struct Uplink {
    shared: Arc<Shared>,
    _alive: Arc<Alive>,
}

/// Tells the connection task that no handle is left.
#[derive(Debug)]
struct Alive(Arc<Shared>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.closed.store(true, Ordering::Release);
        self.0.more.notify_one();
    }
}

impl Uplink {
    /// Starts the uplink's connection task on the current tokio runtime.
    pub fn spawn(dialer: Arc<Dialer>, cfg: UplinkConfig) -> Self {
        let shared = Arc::new(Shared {
            outbox: Mutex::new(Outbox::new(cfg.buffer.clone(), cfg.codec.clone())),
            more: tokio::sync::Notify::new(),
            restart: tokio::sync::Notify::new(),
            connected: AtomicBool::new(false),
            on_backup: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            stalled: AtomicBool::new(false),
            events: tokio::sync::watch::Sender::new(0),
            stats: UplinkStats::default(),
            bad_ack_warn: super::WarnLimiter::default(),
        });
        tokio::spawn(run(dialer, cfg, shared.clone()));
        Self {
            _alive: Arc::new(Alive(shared.clone())),
            shared,
        }
    }

    /// The epoch records must be encoded for now (see the module docs).
    pub fn epoch(&self) -> u64 {
        self.shared.outbox().epoch()
    }

    /// True while a parent connection is up.
    pub fn is_connected(&self) -> bool {
        self.shared.connected.load(Ordering::Acquire)
    }

    /// True while a parent connection is up and the parent has not been
    /// left for an ack stall it has not recovered from (acked nothing
    /// since). A relay with several uplinks (a subtree top, one per
    /// gateway) waits for the acks of its live uplinks only.
    pub fn is_live(&self) -> bool {
        self.is_connected() && !self.shared.stalled.load(Ordering::Acquire)
    }

    /// A receiver that sees a change on every ack progress
    /// ([`Uplink::acked_tag`] may have moved) and every change of
    /// [`Uplink::is_live`], so a relay forwards acks when they arrive.
    pub fn watch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.shared.events.subscribe()
    }

    /// True while sending to the backup parent.
    pub fn on_backup(&self) -> bool {
        self.shared.on_backup.load(Ordering::Acquire)
    }

    /// Queues a record encoded for `epoch`; false when that epoch is over
    /// (the encoder must start again). A full buffer drops its oldest
    /// segment instead (counted), so this never blocks and memory stays
    /// bounded.
    pub fn send(&self, epoch: u64, record: Vec<u8>) -> bool {
        self.send_tagged(epoch, record, 0)
    }

    /// [`Uplink::send`] with a `tag` (a relay's tick number) that
    /// [`Uplink::acked_tag`] reports once the parent took the record.
    pub fn send_tagged(&self, epoch: u64, record: Vec<u8>, tag: u64) -> bool {
        self.send_recipe(epoch, record, tag, None)
    }

    /// [`Uplink::send_tagged`] with the record's [`Recipe`], so that the
    /// acknowledged state is kept without decoding the record again.
    pub fn send_recipe(
        &self,
        epoch: u64,
        record: Vec<u8>,
        tag: u64,
        recipe: Option<Recipe>,
    ) -> bool {
        let ok = self
            .shared
            .outbox()
            .push_recipe(epoch, unix_now_ms(), record, tag, recipe);
        if ok {
            self.shared.more.notify_one();
        }
        ok
    }

    /// Highest tag of a record the parent has acknowledged (or taken whole
    /// in a replayed segment).
    pub fn acked_tag(&self) -> u64 {
        self.shared.outbox().acked_tag()
    }

    /// Drops the current connection and makes a new one (new epoch): the
    /// encoder lost a record, so the receiver's stream would not decode.
    pub fn restart(&self) {
        self.shared.restart.notify_one();
    }

    /// The uplink's counters.
    pub fn stats(&self) -> &UplinkStats {
        &self.shared.stats
    }

    /// The replay buffer's fill (bytes, records) and counters.
    pub fn buffer(&self) -> (usize, usize, OutboxStats) {
        let o = self.shared.outbox();
        (o.bytes(), o.records(), o.stats())
    }
}

async fn connect(dialer: &Dialer, t: &UplinkTarget) -> Option<OutboundLink> {
    match dialer.connect(t.addr, &t.name).await {
        Ok(l) => Some(l),
        Err(e) => {
            tracing::debug!(parent = %t.name, addr = %t.addr, error = %e, "uplink connect failed");
            None
        }
    }
}

/// Connects to `first` and every member of `also` at once; the links of
/// those that answered (none: `None`).
async fn connect_all(
    dialer: &Arc<Dialer>,
    first: &UplinkTarget,
    also: &[UplinkTarget],
) -> Option<Parents> {
    if also.is_empty() {
        return connect(dialer, first)
            .await
            .and_then(|l| Parents::new(vec![l]));
    }
    let dials: Vec<_> = std::iter::once(first)
        .chain(also)
        .map(|t| {
            let (d, t) = (dialer.clone(), t.clone());
            tokio::spawn(async move { connect(&d, &t).await })
        })
        .collect();
    let mut links = Vec::new();
    for d in dials {
        if let Ok(Some(l)) = d.await {
            links.push(l);
        }
    }
    Parents::new(links)
}

/// How one connection ended.
enum End {
    /// Every handle dropped: stop.
    Closed,
    /// The link died or must be remade.
    Lost,
    /// The primary is back while on the backup.
    Primary,
    /// The parent kept the link but did not acknowledge in time.
    AckStall,
}

async fn run(dialer: Arc<Dialer>, cfg: UplinkConfig, shared: Arc<Shared>) {
    let stats = &shared.stats;
    // Set when the primary just died: go straight to the backup (a dead
    // primary would cost a whole connect timeout) and probe it from there.
    let mut primary_lost = false;
    // When the last link was lost (for the reparent time).
    let mut lost_at: Option<i64> = None;
    let mut hold = AckHold::default();
    loop {
        if shared.closed.load(Ordering::Acquire) {
            return;
        }
        let mut on_backup = false;
        // A primary held down after ack stalls is skipped like a dead one.
        let held = !hold.allows_return(tokio::time::Instant::now());
        let mut link = if (primary_lost || held) && cfg.backup.is_some() {
            primary_lost |= held;
            None
        } else {
            connect_all(&dialer, &cfg.primary, &[]).await
        };
        if link.is_none() {
            stats
                .connect_failures
                .fetch_add(u64::from(!primary_lost), Ordering::Relaxed);
            primary_lost = false;
            if let Some(b) = &cfg.backup {
                link = connect_all(&dialer, b, &cfg.backup_group).await;
                on_backup = link.is_some();
                if let Some(l) = &link {
                    stats.failovers.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(primary = %cfg.primary.name, backup = %b.name, links = l.len(), "uplink failed over to backup parent");
                }
            }
        }
        let Some(link) = link else {
            shared.outbox().tick_disconnected(unix_now_ms());
            tokio::time::sleep(cfg.retry).await;
            continue;
        };
        let target = if on_backup {
            cfg.backup.as_ref().unwrap_or(&cfg.primary)
        } else {
            &cfg.primary
        };
        shared.on_backup.store(on_backup, Ordering::Release);
        shared.set_connected(true);
        stats.connects.fetch_add(1, Ordering::Relaxed);
        tracing::info!(parent = %target.name, on_backup, "uplink connected");
        if let Some(t) = lost_at.take() {
            let ms = u64::try_from(unix_now_ms() - t).unwrap_or(0);
            stats.reparent_ms_total.fetch_add(ms, Ordering::Relaxed);
            stats.record_reparent(ms);
            stats.reconnects.fetch_add(1, Ordering::Relaxed);
        }
        let acked_before = shared.outbox().stats().acked_records;
        let end = serve(&dialer, &cfg, &shared, link, target, on_backup, &hold).await;
        shared.set_connected(false);
        if !on_backup && shared.outbox().stats().acked_records > acked_before {
            hold.clear();
        }
        match end {
            End::Closed => return,
            End::Primary => {}
            End::Lost => {
                primary_lost = !on_backup;
                lost_at = Some(unix_now_ms());
            }
            End::AckStall => {
                shared.set_stalled();
                if !on_backup {
                    hold.strike(tokio::time::Instant::now(), cfg.ack_timeout);
                }
                primary_lost = !on_backup;
                lost_at = Some(unix_now_ms());
            }
        }
    }
}

/// Replays the backlog (each finished segment on a link of its own), then
/// streams the live segment until the link ends.
async fn serve(
    dialer: &Arc<Dialer>,
    cfg: &UplinkConfig,
    shared: &Shared,
    mut link: Parents,
    target: &UplinkTarget,
    on_backup: bool,
    hold: &AckHold,
) -> End {
    let stats = &shared.stats;
    loop {
        let backlog: Vec<Vec<u8>> = shared.outbox().backlog().map(<[u8]>::to_vec).collect();
        if backlog.is_empty() {
            break;
        }
        for rec in &backlog {
            if let Err(e) = link.send_record(rec).await {
                tracing::warn!(error = %e, "uplink lost its parent during replay");
                return End::Lost;
            }
            count_sent(stats, rec.len());
        }
        // The parent takes it all (its ack), then a fresh link (fresh
        // decoder) carries the next segment: a link that starts before the
        // parent fed the last one would race it, newer data first.
        // A segment leaves the buffer only once acknowledged (with no ack
        // timeout, once written and waited for): one the parent did not
        // take stays, to replay to whichever parent answers next.
        let wait = if cfg.ack_timeout.is_zero() {
            cfg.replay_ack_wait
        } else {
            cfg.ack_timeout.max(cfg.replay_ack_wait)
        };
        match replay_acked(&link, backlog.len() as u64, wait).await {
            Replayed::Acked => {}
            Replayed::Closed => {
                tracing::warn!(parent = %target.name, "parent went away before acknowledging a replayed segment; it stays buffered");
                return End::Lost;
            }
            Replayed::TimedOut if cfg.ack_timeout.is_zero() => {
                tracing::debug!(parent = %target.name, "no ack for a replayed segment in time");
            }
            Replayed::TimedOut => {
                stats.ack_stalls.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(parent = %target.name, on_backup, waited = ?wait, "parent does not acknowledge a replayed segment; leaving it, the segment stays buffered");
                link.close().await;
                return End::AckStall;
            }
        }
        link.close().await;
        shared.outbox().backlog_done();
        shared.acked();
        stats.segments_replayed.fetch_add(1, Ordering::Relaxed);
        let also = if on_backup {
            &cfg.backup_group[..]
        } else {
            &[]
        };
        match connect_all(dialer, target, also).await {
            Some(l) => link = l,
            None => return End::Lost,
        }
    }
    let mut probe = tokio::time::interval(cfg.probe_interval);
    probe.tick().await;
    // The epoch this link carries once its first live record is written.
    let mut streaming: Option<u64> = None;
    // The parent ended its control direction: stop reading it.
    let mut control_done = false;
    // A dial of the primary in progress while on the backup.
    let mut probing: Option<Pin<Box<dyn Future<Output = Option<OutboundLink>> + Send + '_>>> = None;
    let lost = |streaming: Option<u64>| {
        if streaming.is_some() {
            shared.outbox().link_lost();
        }
        End::Lost
    };
    // When each written, unacknowledged record of this link was written.
    let mut written = AckClock::new(cfg.ack_timeout);
    // Whether the parent answers the records written to it at all.
    let mut answer = Answer::new(cfg.answer_timeout);
    let ack_stall = |streaming: Option<u64>, waited: Duration| {
        stats.ack_stalls.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(parent = %target.name, on_backup, waited = ?waited, "parent keeps the link but does not acknowledge; leaving it");
        lost(streaming);
        End::AckStall
    };
    loop {
        if shared.closed.load(Ordering::Acquire) {
            link.close().await;
            return End::Closed;
        }
        written.sync(shared.outbox().unacked());
        if let Some(waited) = written.overdue(tokio::time::Instant::now()) {
            link.close().await;
            return ack_stall(streaming, waited);
        }
        if answer.silent(tokio::time::Instant::now(), || link.received()) {
            tracing::warn!(parent = %target.name, on_backup, waited = ?cfg.answer_timeout, "parent does not answer (no packet since a record was written); leaving it");
            return lost(streaming);
        }
        let next = shared.outbox().next_live().map(|(e, r)| (e, r.to_vec()));
        if let Some((epoch, rec)) = next {
            if streaming.is_some_and(|s| s != epoch) {
                // The encoder started over (its old stream was dropped for
                // the limits): the receiver needs a fresh decoder.
                link.close().await;
                return End::Lost;
            }
            streaming = Some(epoch);
            match tokio::time::timeout(cfg.send_timeout, link.send_record(&rec)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "uplink send failed; reconnecting");
                    return lost(streaming);
                }
                Err(_) => {
                    // The parent stopped reading (flow control held us):
                    // leave it; the link is dropped (closed) with us.
                    stats.stalls.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(parent = %target.name, after = ?cfg.send_timeout, "parent stopped taking records; leaving it");
                    return lost(streaming);
                }
            }
            shared.outbox().sent();
            let now = tokio::time::Instant::now();
            written.push(now);
            answer.wrote(now, || link.received());
            count_sent(stats, rec.len());
            continue;
        }
        let due = earliest(written.due(), answer.due());
        tokio::select! {
            () = sleep_until_due(due) => {}
            () = shared.more.notified() => {}
            () = shared.restart.notified() => {
                tracing::info!("uplink restarting its link to resynchronise");
                shared.outbox().link_lost();
                link.close().await;
                return End::Lost;
            }
            c = link.recv_control(), if !control_done => match c {
                Ok(Some(msg)) => {
                    // A single parent that sent something is alive (a
                    // group's merged acks do not say which member spoke).
                    if link.len() == 1 {
                        answer.answered();
                    }
                    on_control(shared, streaming, &msg);
                }
                Ok(None) => control_done = true,
                Err(e) => {
                    tracing::warn!(error = %e, "uplink lost its parent (control stream)");
                    return lost(streaming);
                }
            },
            e = link.closed() => {
                tracing::warn!(error = %e, "uplink lost its parent");
                return lost(streaming);
            }
            _ = probe.tick(), if on_backup && probing.is_none() && hold.allows_return(tokio::time::Instant::now()) => {
                // Dial the primary alongside: a dead one takes a whole
                // connect timeout, during which records keep flowing.
                probing = Some(Box::pin(connect(dialer, &cfg.primary)));
            }
            r = async { probing.as_mut().expect("guarded: only polled when set").await }, if probing.is_some() => {
                probing = None;
                if let Some(p) = r {
                    // Back to the primary as soon as it accepts again. The
                    // backup is alive: it gets what is queued, then a clean
                    // close delivers it all; nothing needs replaying.
                    p.close().await;
                    tracing::info!(primary = %cfg.primary.name, "primary parent is back; returning to it");
                    loop {
                        let next = shared.outbox().next_live().map(|(e, r)| (e, r.to_vec()));
                        let Some((epoch, rec)) = next else { break };
                        if streaming.is_some_and(|s| s != epoch) {
                            break;
                        }
                        streaming = Some(epoch);
                        match tokio::time::timeout(cfg.send_timeout, link.send_record(&rec)).await {
                            Ok(Ok(())) => {
                                shared.outbox().sent();
                                written.push(tokio::time::Instant::now());
                                count_sent(stats, rec.len());
                            }
                            _ => return lost(streaming),
                        }
                    }
                    link.close().await;
                    written.sync(shared.outbox().unacked());
                    if written.backup_not_acking(tokio::time::Instant::now()) {
                        // The backup is not acknowledging either: what it
                        // holds may never go up, so the primary gets it
                        // again (what arrives twice is dropped upstream).
                        shared.outbox().link_lost();
                    } else if streaming.is_some() {
                        shared.outbox().handed_over();
                        shared.changed();
                    }
                    return End::Primary;
                }
            }
        }
    }
}

/// One control record from the parent: acks release the outbox.
fn on_control(shared: &Shared, streaming: Option<u64>, msg: &[u8]) {
    let res = match (Control::decode(msg), streaming) {
        (Some(Control::Ack(n)), Some(epoch)) => {
            let r = shared.outbox().ack(epoch, n);
            if matches!(r, Ok(k) if k > 0) {
                shared.acked();
            }
            r.map(|_| ())
        }
        (Some(Control::Ack(_)), None) => Err(AckError::Stale),
        (None, _) => {
            shared.stats.bad_controls.fetch_add(1, Ordering::Relaxed);
            Err(AckError::Stale)
        }
    };
    if let Err(e) = res
        && let Some(suppressed) = shared.bad_ack_warn.allow()
    {
        tracing::warn!(error = %e, suppressed, "uplink refused a control record from its parent");
    }
}

/// How the wait for a replayed segment's ack ended.
enum Replayed {
    /// The parent acknowledged every record.
    Acked,
    /// The link ended first.
    Closed,
    /// No full ack within the wait.
    TimedOut,
}

/// Waits, at most `wait`, until the parent acks `n` records of `link`.
async fn replay_acked(link: &Parents, n: u64, wait: Duration) -> Replayed {
    let acked = async {
        loop {
            match link.recv_control().await {
                Ok(Some(msg)) => {
                    if matches!(Control::decode(&msg), Some(Control::Ack(k)) if k >= n) {
                        return Replayed::Acked;
                    }
                }
                Ok(None) | Err(_) => return Replayed::Closed,
            }
        }
    };
    tokio::time::timeout(wait, acked)
        .await
        .unwrap_or(Replayed::TimedOut)
}

fn count_sent(stats: &UplinkStats, len: usize) {
    stats.records_sent.fetch_add(1, Ordering::Relaxed);
    stats.bytes_sent.fetch_add(len as u64, Ordering::Relaxed);
}

//! One planned uplink with failover: primary parent, backup parent.
//!
//! The plan is the agreement (no election): the uplink sends to its primary
//! while it answers, moves to the backup when the primary's connection dies
//! or cannot be made, and moves back as soon as the primary accepts again
//! (probed every `probe_interval` while on the backup).
//!
//! Every established connection gets a new *generation*. The encoder side
//! ([`Uplink::generation`]) starts a fresh `LinkEncoder` (whose first frame is
//! a keyframe) whenever the generation changes, and tags each record with the
//! generation it was encoded for; records of an older generation belong to
//! a dead zstd stream and are dropped here, never sent on the new link.
//! The queue between the two is bounded (records); when full, the newest
//! record is refused and counted, so a slow parent never grows memory.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;

use super::{Dialer, OutboundLink};

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
    /// Records queued towards the connection task at most.
    pub queue_records: usize,
    /// Pause between failed connection attempts.
    pub retry: Duration,
    /// While on the backup, how often to try the primary again.
    pub probe_interval: Duration,
}

impl UplinkConfig {
    /// Defaults for a primary and an optional backup.
    pub fn new(primary: UplinkTarget, backup: Option<UplinkTarget>) -> Self {
        Self {
            primary,
            backup,
            queue_records: 256,
            retry: Duration::from_millis(250),
            probe_interval: Duration::from_secs(2),
        }
    }
}

/// Counters an operator graphs for each uplink.
#[derive(Debug, Default)]
pub struct UplinkStats {
    /// Records written to a parent.
    pub records_sent: AtomicU64,
    /// Bytes written to a parent (payloads).
    pub bytes_sent: AtomicU64,
    /// Records refused because the queue was full.
    pub queue_drops: AtomicU64,
    /// Records dropped because their link died before they were sent.
    pub stale_drops: AtomicU64,
    /// Connections established (first one included).
    pub connects: AtomicU64,
    /// Moves from the primary to the backup.
    pub failovers: AtomicU64,
    /// Failed connection attempts.
    pub connect_failures: AtomicU64,
}

#[derive(Debug)]
struct Shared {
    restart: tokio::sync::Notify,
    generation: AtomicU64,
    connected: AtomicBool,
    on_backup: AtomicBool,
    stats: UplinkStats,
}

/// Handle to one uplink; the connection runs in its own task.
#[derive(Clone, Debug)]
pub struct Uplink {
    tx: mpsc::Sender<(u64, Vec<u8>)>,
    shared: Arc<Shared>,
}

impl Uplink {
    /// Starts the uplink's connection task on the current tokio runtime.
    pub fn spawn(dialer: Arc<Dialer>, cfg: UplinkConfig) -> Self {
        let (tx, rx) = mpsc::channel(cfg.queue_records.max(1));
        let shared = Arc::new(Shared {
            restart: tokio::sync::Notify::new(),
            generation: AtomicU64::new(0),
            connected: AtomicBool::new(false),
            on_backup: AtomicBool::new(false),
            stats: UplinkStats::default(),
        });
        tokio::spawn(run(dialer, cfg, rx, shared.clone()));
        Self { tx, shared }
    }

    /// Generation of the current connection (0: never connected). Changes
    /// every time a new connection is established.
    pub fn generation(&self) -> u64 {
        self.shared.generation.load(Ordering::Acquire)
    }

    /// True while a parent connection is up.
    pub fn is_connected(&self) -> bool {
        self.shared.connected.load(Ordering::Acquire)
    }

    /// True while sending to the backup parent.
    pub fn on_backup(&self) -> bool {
        self.shared.on_backup.load(Ordering::Acquire)
    }

    /// Queues a record encoded for `generation`; false (and counted) when the
    /// queue is full or the task ended.
    pub fn send(&self, generation: u64, record: Vec<u8>) -> bool {
        match self.tx.try_send((generation, record)) {
            Ok(()) => true,
            Err(_) => {
                self.shared
                    .stats
                    .queue_drops
                    .fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Drops the current connection and makes a new one (new generation):
    /// the encoder lost a record (queue full), so the receiver's stream
    /// would no longer decode.
    pub fn restart(&self) {
        self.shared.restart.notify_one();
    }

    /// The uplink's counters.
    pub fn stats(&self) -> &UplinkStats {
        &self.shared.stats
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

async fn run(
    dialer: Arc<Dialer>,
    cfg: UplinkConfig,
    mut rx: mpsc::Receiver<(u64, Vec<u8>)>,
    shared: Arc<Shared>,
) {
    let stats = &shared.stats;
    // Set when the primary just died: go straight to the backup (a dead
    // primary would cost a whole connect timeout) and probe it from there.
    let mut primary_lost = false;
    loop {
        // Primary first; the backup only when the primary cannot be reached.
        let mut on_backup = false;
        let mut link = if primary_lost && cfg.backup.is_some() {
            None
        } else {
            connect(&dialer, &cfg.primary).await
        };
        if link.is_none() {
            stats
                .connect_failures
                .fetch_add(u64::from(!primary_lost), Ordering::Relaxed);
            primary_lost = false;
            if let Some(b) = &cfg.backup {
                link = connect(&dialer, b).await;
                on_backup = link.is_some();
                if on_backup {
                    stats.failovers.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(primary = %cfg.primary.name, backup = %b.name, "uplink failed over to backup parent");
                }
            }
        }
        let Some(link) = link else {
            if rx.is_closed() {
                return;
            }
            // Drain what was queued for dead links while we wait.
            while let Ok((_, _)) = rx.try_recv() {
                stats.stale_drops.fetch_add(1, Ordering::Relaxed);
            }
            tokio::time::sleep(cfg.retry).await;
            continue;
        };
        let generation = shared.generation.fetch_add(1, Ordering::AcqRel) + 1;
        shared.on_backup.store(on_backup, Ordering::Release);
        shared.connected.store(true, Ordering::Release);
        stats.connects.fetch_add(1, Ordering::Relaxed);
        tracing::info!(parent = %if on_backup { cfg.backup.as_ref().map_or("", |b| b.name.as_str()) } else { cfg.primary.name.as_str() }, generation, "uplink connected");
        let mut probe = tokio::time::interval(cfg.probe_interval);
        probe.tick().await;
        let ended = loop {
            tokio::select! {
                msg = rx.recv() => {
                    let Some((g, rec)) = msg else { break true };
                    if g != generation {
                        stats.stale_drops.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    if let Err(e) = link.send_record(&rec).await {
                        tracing::warn!(error = %e, "uplink send failed; reconnecting");
                        break false;
                    }
                    stats.records_sent.fetch_add(1, Ordering::Relaxed);
                    stats.bytes_sent.fetch_add(rec.len() as u64, Ordering::Relaxed);
                }
                () = shared.restart.notified() => {
                    tracing::info!("uplink restarting its link to resynchronise");
                    break false;
                }
                e = link.closed() => {
                    tracing::warn!(error = %e, "uplink lost its parent");
                    break false;
                }
                _ = probe.tick(), if on_backup => {
                    // Back to the primary as soon as it accepts again.
                    if let Some(p) = connect(&dialer, &cfg.primary).await {
                        p.close().await;
                        tracing::info!(primary = %cfg.primary.name, "primary parent is back; returning to it");
                        break false;
                    }
                }
            }
        };
        shared.connected.store(false, Ordering::Release);
        primary_lost = !on_backup && !ended;
        link.close().await;
        if ended {
            return;
        }
    }
}

//! The relay shell: QUIC children in, merged frames up, once per tick.
//!
//! Thin async wiring around the pure [`Merger`](crate::merge::Merger): one
//! task per child link feeds its records to the merger; a tick task encodes
//! the merger's changeset on every uplink (a fresh encoder, hence a
//! keyframe from the merger's full state, whenever an uplink reconnects).
//! The root gateway runs the same relay with no uplinks and a store sink.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use canopy_proto::codec::CodecConfig;
use canopy_proto::link::{InboundLink, Listener, Uplink, UplinkEncoder, unix_now_ms};
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

struct Inner<S> {
    merger: Merger,
    sink: S,
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

    /// Feeds one record of `child`; false when the child must be dropped.
    fn feed(&self, child: u64, payload: &[u8]) -> bool {
        let mut g = self.lock();
        let Inner { merger, sink } = &mut *g;
        match merger.on_record(child, payload, sink) {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(child, error = %e, "rejected a child's frame; closing its link");
                merger.child_gone(child);
                false
            }
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
        tokio::spawn(async move {
            loop {
                match link.recv_record().await {
                    Ok(Some(payload)) => {
                        if !me.feed(child, &payload) {
                            link.close().await;
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        tracing::info!(peer = link.peer(), error = %e, "child link ended");
                        break;
                    }
                }
            }
            me.lock().merger.child_gone(child);
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
                let Inner { merger, sink } = &mut *g;
                merger.expire(now, sink);
                let (table, cs) = merger.take_changeset(now);
                // Connected or not: the uplink buffers while no parent
                // takes its records.
                for (u, enc) in uplinks.iter().zip(encs.iter_mut()) {
                    enc.emit(u, table, cs);
                }
                merger.end_tick();
            }
        });
    }
}

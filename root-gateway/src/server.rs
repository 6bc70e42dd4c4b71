//! The gateway shell: subtree tops in over QUIC, the live store, the HTTP API.
//!
//! The gateway is the aggregator at the top of the tree: it runs the same
//! relay (and so the same deduplicating merge path) with no uplinks and a
//! sink that writes into the live store.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use canopy_aggregator::merge::{HOLE_WAIT_TICKS, MergeConfig, Sink};
use canopy_aggregator::relay::{Relay, RelayConfig};
use canopy_proto::codec::CodecConfig;
use canopy_proto::link::{Listener, unix_now_ms};
use canopy_proto::model::Labels;
use tokio::sync::watch;

use crate::api::http::{ApiState, router};
use crate::auth::Auth;
use crate::freshness::Freshness;
use crate::promql::{Engine, EngineOpts};
use crate::remote_write::{self, RemoteWrite, SenderConfig, Tap, TapEvent};
use crate::store::{LiveStore, LiveStoreConfig, Op, SharedStore};
use crate::stress::Thresholds;
use crate::wal::{Wal, WalConfig, WalError, WalStats};

/// Errors starting the gateway.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The HTTP address could not be bound.
    #[error("binding the HTTP API on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The gRPC API could not start.
    #[error(transparent)]
    Grpc(#[from] crate::api::grpc::GrpcError),
    /// The data directory could not be opened or recovered.
    #[error("data directory: {0}")]
    Wal(#[from] WalError),
    /// A remote_write URL is unusable.
    #[error(transparent)]
    RemoteWrite(#[from] remote_write::RemoteWriteError),
    /// The API listeners' certificate or key is unusable.
    #[error("API TLS: {reason}")]
    ApiTls {
        /// What is wrong.
        reason: String,
    },
}

/// Ops buffered by a durable [`StoreSink`] before it flushes them itself
/// (the flush task normally takes them first, every 100 ms).
const MAX_PENDING_OPS: usize = 1 << 20;

/// Writes what the merge path accepts into the live store.
///
/// With a write-ahead log the ops are buffered and [`StoreSink::flush`]ed
/// as one batch (one log write, then visible to queries); without one they
/// apply at once.
#[derive(Clone, Debug)]
pub struct StoreSink {
    store: SharedStore,
    rejected: u64,
    accepted: u64,
    pending: Vec<Op>,
    tap: Option<Tap>,
    freshness: Freshness,
}

impl StoreSink {
    /// A sink writing into `store`.
    pub fn new(store: SharedStore) -> Self {
        Self {
            store,
            rejected: 0,
            accepted: 0,
            pending: Vec::new(),
            tap: None,
            freshness: Freshness::default(),
        }
    }

    /// Also hands every accepted event to remote_write out.
    pub fn with_tap(mut self, tap: Option<Tap>) -> Self {
        self.tap = tap;
        self
    }

    /// Samples the store refused (series limit, out of order).
    pub fn rejected(&self) -> u64 {
        self.rejected
    }

    /// Samples the store accepted.
    pub fn accepted(&self) -> u64 {
        self.accepted
    }

    /// How old samples were on arrival.
    pub fn freshness(&self) -> &Freshness {
        &self.freshness
    }

    fn take_pending(&mut self) -> Vec<Op> {
        std::mem::take(&mut self.pending)
    }

    fn count(&mut self, appends: usize, rejected: usize) {
        self.accepted += (appends - rejected.min(appends)) as u64;
        self.rejected += rejected as u64;
    }

    /// Applies buffered ops now (journal first); true once they are in the
    /// log (or none were buffered), which is when the relay may ack them.
    /// Ops the journal refused (disk full, I/O error) stay buffered, ahead
    /// of newer ones, for the next flush: acked data is never only in
    /// memory. Past `MAX_PENDING_OPS` the oldest half goes (counted as
    /// rejected, logged): a log that keeps failing costs data, not memory.
    pub fn flush(&mut self) -> bool {
        if self.pending.is_empty() {
            return true;
        }
        let ops = self.take_pending();
        let appends = count_appends(&ops);
        match self.store.apply(&ops) {
            Ok(o) => {
                self.count(appends, o.rejected);
                true
            }
            Err(e) => {
                tracing::error!(error = %e, ops = ops.len(), "ops not logged; kept to retry, not acked");
                self.pending = ops;
                if self.pending.len() >= MAX_PENDING_OPS {
                    let gone: Vec<Op> = self.pending.drain(..MAX_PENDING_OPS / 2).collect();
                    self.rejected += count_appends(&gone) as u64;
                    tracing::error!(
                        ops = gone.len(),
                        "the log keeps failing: dropped the oldest buffered ops"
                    );
                }
                false
            }
        }
    }

    fn push(&mut self, op: Op) {
        if self.store.is_durable() {
            self.pending.push(op);
            if self.pending.len() >= MAX_PENDING_OPS {
                self.flush();
            }
        } else {
            let is_append = matches!(op, Op::Append { .. });
            let ok = self.store.write(|s| op.apply(s)).is_ok();
            if is_append {
                self.count(1, usize::from(!ok));
            }
        }
    }
}

fn count_appends(ops: &[Op]) -> usize {
    ops.iter()
        .filter(|o| matches!(o, Op::Append { .. }))
        .count()
}

impl Sink for StoreSink {
    fn sample(&mut self, source: &str, labels: &Labels, ts_ms: i64, value: f64) {
        self.freshness.record(unix_now_ms(), ts_ms);
        if let Some(t) = &self.tap {
            t.send(TapEvent::Sample {
                source: source.to_string(),
                labels: labels.clone(),
                ts_ms,
                value,
            });
        }
        self.push(Op::Append {
            source: Some(source.to_string()),
            labels: labels.clone(),
            ts_ms,
            value,
        });
    }

    fn heartbeat(&mut self, source: &str, ts_ms: i64, tick_ms: u32) {
        if let Some(t) = &self.tap {
            t.send(TapEvent::Heartbeat {
                source: source.to_string(),
                ts_ms,
                tick_ms,
            });
        }
        self.push(Op::Heartbeat {
            source: source.to_string(),
            ts_ms,
            tick_ms,
        });
    }

    fn retire(&mut self, source: &str, labels: &Labels, ts_ms: i64) {
        if let Some(t) = &self.tap {
            t.send(TapEvent::Retire {
                source: source.to_string(),
                labels: labels.clone(),
                ts_ms,
            });
        }
        self.push(Op::Retire {
            labels: labels.clone(),
            ts_ms,
        });
    }
}

/// How to run a gateway.
#[derive(Debug)]
pub struct GatewayOptions {
    /// HTTP API address.
    pub http: SocketAddr,
    /// QUIC listener for subtree tops (none: standalone).
    pub listener: Option<Listener>,
    /// Live window kept, ms.
    pub retention_ms: i64,
    /// Tick of the merge path and store maintenance.
    pub tick: Duration,
    /// Scheduler gRPC API address (none: not served).
    pub grpc: Option<SocketAddr>,
    /// Write-ahead log and snapshots (none: memory only, nothing survives a restart).
    pub wal: Option<WalConfig>,
    /// remote_write endpoints every sample the gateway holds is sent to.
    pub remote_write: Vec<remote_write::EndpointConfig>,
    /// Who may call the HTTP and gRPC APIs ([`Auth::open`]: everyone).
    pub auth: Auth,
    /// Where the stress verdicts draw their lines.
    pub thresholds: Thresholds,
    /// TLS for the HTTP and gRPC listeners (none: plain TCP).
    pub api_tls: Option<crate::api::tls::ApiTls>,
}

/// A running gateway.
pub struct Gateway {
    /// The live store.
    pub store: SharedStore,
    /// The receive path.
    pub relay: Relay<StoreSink>,
    /// Where the HTTP API listens.
    pub http_addr: SocketAddr,
    /// Where the gRPC API listens (when served).
    pub grpc_addr: Option<SocketAddr>,
    /// Counters of the write-ahead log (when durable).
    pub wal_stats: Option<Arc<WalStats>>,
    /// remote_write senders (when endpoints are configured).
    pub remote_write: Option<RemoteWrite>,
}

/// Starts the gateway's tasks; they run until `shutdown` turns true.
pub async fn start(
    opts: GatewayOptions,
    shutdown: watch::Receiver<bool>,
) -> Result<Gateway, ServerError> {
    let store_cfg = LiveStoreConfig {
        retention_ms: opts.retention_ms,
        ..LiveStoreConfig::default()
    };
    let (store, wal_stats) = match opts.wal.clone() {
        Some(w) => {
            let (s, wal, _) = tokio::task::spawn_blocking(move || Wal::open(w, store_cfg))
                .await
                .map_err(|e| WalError::Io {
                    what: "recovering",
                    path: std::path::PathBuf::new(),
                    source: std::io::Error::other(e.to_string()),
                })??;
            let st = wal.stats();
            (SharedStore::with_journal(s, Box::new(wal)), Some(st))
        }
        None => (SharedStore::new(LiveStore::new(store_cfg)), None),
    };
    let remote_write = if opts.remote_write.is_empty() {
        None
    } else {
        let cfg = SenderConfig {
            endpoints: opts.remote_write.clone(),
            ..SenderConfig::default()
        };
        Some(remote_write::spawn(cfg, shutdown.clone())?)
    };
    let tap = remote_write.as_ref().map(RemoteWrite::tap);
    let relay = Relay::new(
        RelayConfig {
            tick: opts.tick,
            // Every source's R paths meet here: a section after a hole
            // waits up to HOLE_WAIT_TICKS for the slower path to fill it.
            merge: MergeConfig {
                hole_wait_ms: i64::try_from(opts.tick.as_millis() * u128::from(HOLE_WAIT_TICKS))
                    .unwrap_or(8_000),
                // No uplink: accepted data goes to the store only.
                forward: false,
                ..MergeConfig::default()
            },
            codec: CodecConfig::default(),
        },
        StoreSink::new(store.clone()).with_tap(tap.clone()),
    );
    if store.is_durable() {
        // A child's record is acked once it is in the write-ahead log.
        relay.acks_on_commit();
    }
    let listener_stats = opts.listener.as_ref().map(Listener::stats_handle);
    if let Some(l) = opts.listener {
        relay.spawn_listener(l, shutdown.clone());
    }
    relay.spawn_ticker(Vec::new(), shutdown.clone());
    {
        let store = store.clone();
        let relay = relay.clone();
        let mut sd = shutdown.clone();
        let tick = opts.tick;
        tokio::spawn(async move {
            let mut iv = tokio::time::interval(tick);
            // Durable: buffered ops go to the log and the store in batches.
            let mut flush = tokio::time::interval(Duration::from_millis(100).min(tick));
            iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                let maintain = tokio::select! {
                    _ = iv.tick() => true,
                    _ = flush.tick(), if store.is_durable() => false,
                    _ = sd.changed() => break,
                };
                let (store, relay) = (store.clone(), relay.clone());
                let r = tokio::task::spawn_blocking(move || {
                    // Under the relay lock, so batches reach the log in
                    // order; what they hold is acked to the children once
                    // logged (a failed batch is retried, not acked).
                    relay.commit_with(StoreSink::flush);
                    if maintain && let Err(e) = store.tick(unix_now_ms()) {
                        tracing::error!(error = %e, "store maintenance failed");
                    }
                })
                .await;
                if let Err(e) = r {
                    tracing::error!(error = %e, "store maintenance task died");
                }
            }
            // Shutting down: what was accepted reaches the log and the disk.
            let _ = tokio::task::spawn_blocking(move || {
                relay.with_sink(StoreSink::flush);
                let _ = store.tick(unix_now_ms());
            })
            .await;
        });
    }
    let engine = Arc::new(Engine::new(EngineOpts::default()));
    let grpc_addr = match opts.grpc {
        Some(addr) => {
            let mut st = crate::api::grpc::GrpcState::new(Arc::new(store.clone()), engine.clone());
            st.auth = opts.auth.clone();
            st.thresholds = Arc::new(opts.thresholds.clone());
            Some(
                crate::api::grpc::serve(
                    addr,
                    st,
                    opts.tick,
                    opts.api_tls.clone(),
                    shutdown.clone(),
                )
                .await?,
            )
        }
        None => None,
    };
    let mut api = ApiState::new(Arc::new(store.clone()), engine);
    api.exporters = self_metrics(&store, &relay, wal_stats.clone(), listener_stats);
    api.auth = opts.auth.clone();
    api.thresholds = Arc::new(opts.thresholds.clone());
    // The API router guards its own routes; the rest (dashboard files:
    // open, remote_write in: admin) go through the same guard here.
    let rest = crate::dashboard::router()
        .merge(remote_write::router(remote_write::ReceiverState::new(
            store.clone(),
            tap,
            remote_write::wire::WireLimits::default(),
        )))
        .layer(axum::middleware::from_fn_with_state(
            opts.auth.clone(),
            crate::auth::http::guard,
        ));
    let app = router(api).merge(rest);
    let tcp = tokio::net::TcpListener::bind(opts.http)
        .await
        .map_err(|source| ServerError::Bind {
            addr: opts.http,
            source,
        })?;
    let http_addr = tcp.local_addr().map_err(|source| ServerError::Bind {
        addr: opts.http,
        source,
    })?;
    let mut sd = shutdown.clone();
    let (tls, tls_stop) = (opts.api_tls.clone(), shutdown.clone());
    tokio::spawn(async move {
        let stop = async move {
            let _ = sd.wait_for(|v| *v).await;
        };
        let r = match tls {
            Some(t) => {
                axum::serve(t.http_listener(tcp, tls_stop), app)
                    .with_graceful_shutdown(stop)
                    .await
            }
            None => axum::serve(tcp, app).with_graceful_shutdown(stop).await,
        };
        if let Err(e) = r {
            tracing::error!(error = %e, "HTTP API stopped");
        }
    });
    tracing::info!(%http_addr, tls = opts.api_tls.is_some(), "gateway HTTP API listening");
    Ok(Gateway {
        store,
        relay,
        http_addr,
        grpc_addr,
        wal_stats,
        remote_write,
    })
}

/// The gateway's own metrics for `/metrics`: ingest, store and log.
fn self_metrics(
    store: &SharedStore,
    relay: &Relay<StoreSink>,
    wal: Option<Arc<WalStats>>,
    listener: Option<Arc<canopy_proto::link::ListenerStats>>,
) -> Vec<crate::api::selfmetrics::Exporter> {
    use std::sync::atomic::Ordering::Relaxed;
    let (store, relay) = (store.clone(), relay.clone());
    vec![Arc::new(move |out| {
        let (accepted, rejected) = relay.with_sink(|s| {
            s.freshness().render(out);
            (s.accepted(), s.rejected())
        });
        let m = relay.with_merger(|m| m.stats().clone());
        let (st, cold) = store.read(|s| (s.stats(), s.cold_stats()));
        // (name, is_counter, help, value)
        let mut rows: Vec<(&str, bool, &str, u64)> = vec![
            (
                "frames_in_total",
                true,
                "Frames received from subtree tops.",
                m.frames_in,
            ),
            (
                "frame_bytes_in_total",
                true,
                "Frame bytes received (compressed).",
                m.bytes_in,
            ),
            (
                "duplicates_dropped_total",
                true,
                "Updates dropped as duplicates.",
                m.duplicates_dropped,
            ),
            (
                "samples_appended_total",
                true,
                "Samples from the tree the store accepted.",
                accepted,
            ),
            (
                "samples_rejected_total",
                true,
                "Samples from the tree the store refused.",
                rejected,
            ),
            (
                "series",
                false,
                "Series held by the live store.",
                st.series as u64,
            ),
            (
                "store_change_points",
                false,
                "Change points held.",
                st.change_points as u64,
            ),
            (
                "store_bytes",
                false,
                "Encoded bytes of the store's chunks.",
                st.chunk_bytes as u64,
            ),
            (
                "store_out_of_order_total",
                true,
                "Samples refused as out of order.",
                st.out_of_order,
            ),
            (
                "store_series_refused_total",
                true,
                "New series refused at the limit.",
                st.rejected_series,
            ),
            (
                "sources_died_total",
                true,
                "Nodes silent past their deadline.",
                st.sources_died,
            ),
        ];
        if let Some(c) = cold {
            rows.extend([
                (
                    "cold_chunks_written_total",
                    true,
                    "Sealed chunks written to the cold tier.",
                    c.chunks_written,
                ),
                (
                    "cold_bytes",
                    false,
                    "Bytes of the cold tier's files held (records written).",
                    c.bytes_held,
                ),
                ("cold_files", false, "Files of the cold tier held.", c.files),
                (
                    "cold_files_deleted_total",
                    true,
                    "Cold files deleted past retention.",
                    c.files_deleted,
                ),
                (
                    "cold_write_errors_total",
                    true,
                    "Sealed chunks the cold tier could not write (kept in memory).",
                    c.write_errors,
                ),
            ]);
        }
        if let Some(l) = &listener {
            rows.push((
                "peers_not_in_plan_total",
                true,
                "Certified peers refused: the plan does not send them here.",
                l.not_in_plan.load(Relaxed),
            ));
        }
        if let Some(w) = &wal {
            let g = |a: &std::sync::atomic::AtomicU64| a.load(Relaxed);
            rows.extend([
                (
                    "wal_bytes_written_total",
                    true,
                    "Bytes written to the log.",
                    g(&w.bytes_written),
                ),
                (
                    "wal_bytes",
                    false,
                    "Bytes of log segments on disk.",
                    g(&w.bytes_on_disk),
                ),
                (
                    "wal_fsyncs_total",
                    true,
                    "fsync calls of log and snapshots.",
                    g(&w.fsyncs),
                ),
                (
                    "wal_checkpoints_total",
                    true,
                    "Snapshots written.",
                    g(&w.checkpoints),
                ),
                (
                    "wal_errors_total",
                    true,
                    "Log write, sync or checkpoint failures.",
                    g(&w.errors),
                ),
                (
                    "wal_replayed_ops",
                    false,
                    "Ops replayed at start-up.",
                    g(&w.replayed_ops),
                ),
                (
                    "wal_bad_records",
                    false,
                    "Torn or corrupt records cut at start-up.",
                    g(&w.bad_records),
                ),
            ]);
        }
        for (name, counter, help, v) in rows {
            let name = format!("canopy_gateway_{name}");
            if counter {
                out.counter(&name, help, v as f64);
            } else {
                out.gauge(&name, help, v as f64);
            }
        }
    })]
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::store::{Journal, PendingCheckpoint, StoreError};

    /// A journal that refuses every batch while `fail` is set.
    struct Flaky(Arc<AtomicBool>);

    impl Journal for Flaky {
        fn log(&mut self, _: &[Op]) -> Result<(), StoreError> {
            if self.0.load(Ordering::Relaxed) {
                Err(StoreError::Journal {
                    reason: "disk full (test)".into(),
                })
            } else {
                Ok(())
            }
        }
        fn tick(&mut self, _: &LiveStore) -> Result<Option<PendingCheckpoint>, StoreError> {
            Ok(None)
        }
    }

    /// A batch the log refused is neither acked (flush says false) nor
    /// dropped: the next flush logs and stores it.
    #[test]
    fn a_batch_the_log_refused_is_kept_for_the_next_flush() {
        let fail = Arc::new(AtomicBool::new(true));
        let store = SharedStore::with_journal(
            LiveStore::new(LiveStoreConfig::default()),
            Box::new(Flaky(fail.clone())),
        );
        let mut sink = StoreSink::new(store);
        let l = Labels::metric("ticks_total", [("node", "n1")]);
        sink.sample("n1", &l, 1_000, 1.0);
        assert!(!sink.flush(), "the log refused the batch");
        assert_eq!(sink.accepted(), 0);
        fail.store(false, Ordering::Relaxed);
        assert!(sink.flush());
        assert_eq!(sink.accepted(), 1, "the refused sample was retried");
        assert_eq!(sink.rejected(), 0);
    }
}

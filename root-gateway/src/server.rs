//! The gateway shell: subtree tops in over QUIC, the live store, the HTTP API.
//!
//! The gateway is the aggregator at the top of the tree: it runs the same
//! relay (and so the same deduplicating merge path) with no uplinks and a
//! sink that writes into the live store.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use canopy_aggregator::merge::{MergeConfig, Sink};
use canopy_aggregator::relay::{Relay, RelayConfig};
use canopy_proto::codec::CodecConfig;
use canopy_proto::link::{Listener, unix_now_ms};
use canopy_proto::model::Labels;
use tokio::sync::watch;

use crate::api::http::{ApiState, router};
use crate::promql::{Engine, EngineOpts};
use crate::store::{Appender, LiveStore, LiveStoreConfig, SharedStore};

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
}

/// Writes what the merge path accepts into the live store.
#[derive(Clone, Debug)]
pub struct StoreSink {
    store: SharedStore,
    rejected: u64,
}

impl StoreSink {
    /// A sink writing into `store`.
    pub fn new(store: SharedStore) -> Self {
        Self { store, rejected: 0 }
    }

    /// Samples the store refused (series limit, out of order).
    pub fn rejected(&self) -> u64 {
        self.rejected
    }
}

impl Sink for StoreSink {
    fn sample(&mut self, source: &str, labels: &Labels, ts_ms: i64, value: f64) {
        if self
            .store
            .write(|s| s.append(Some(source), labels, ts_ms, value))
            .is_err()
        {
            self.rejected += 1;
        }
    }

    fn heartbeat(&mut self, source: &str, ts_ms: i64, tick_ms: u32) {
        self.store.write(|s| s.heartbeat(source, ts_ms, tick_ms));
    }

    fn retire(&mut self, _source: &str, labels: &Labels, ts_ms: i64) {
        self.store.write(|s| s.retire(labels, ts_ms));
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
}

/// A running gateway.
pub struct Gateway {
    /// The live store.
    pub store: SharedStore,
    /// The receive path.
    pub relay: Relay<StoreSink>,
    /// Where the HTTP API listens.
    pub http_addr: SocketAddr,
}

/// Starts the gateway's tasks; they run until `shutdown` turns true.
pub async fn start(
    opts: GatewayOptions,
    shutdown: watch::Receiver<bool>,
) -> Result<Gateway, ServerError> {
    let store = SharedStore::new(LiveStore::new(LiveStoreConfig {
        retention_ms: opts.retention_ms,
        ..LiveStoreConfig::default()
    }));
    let relay = Relay::new(
        RelayConfig {
            tick: opts.tick,
            merge: MergeConfig::default(),
            codec: CodecConfig::default(),
        },
        StoreSink::new(store.clone()),
    );
    if let Some(l) = opts.listener {
        relay.spawn_listener(l, shutdown.clone());
    }
    relay.spawn_ticker(Vec::new(), shutdown.clone());
    {
        let store = store.clone();
        let mut sd = shutdown.clone();
        let tick = opts.tick;
        tokio::spawn(async move {
            let mut iv = tokio::time::interval(tick);
            loop {
                tokio::select! {
                    _ = iv.tick() => store.write(|s| s.maintain(unix_now_ms())),
                    _ = sd.changed() => break,
                }
            }
        });
    }
    let engine = Arc::new(Engine::new(EngineOpts::default()));
    let app = router(ApiState::new(Arc::new(store.clone()), engine))
        .merge(crate::dashboard::router());
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
    tokio::spawn(async move {
        let r = axum::serve(tcp, app)
            .with_graceful_shutdown(async move {
                let _ = sd.wait_for(|v| *v).await;
            })
            .await;
        if let Err(e) = r {
            tracing::error!(error = %e, "HTTP API stopped");
        }
    });
    tracing::info!(%http_addr, "gateway HTTP API listening");
    Ok(Gateway {
        store,
        relay,
        http_addr,
    })
}

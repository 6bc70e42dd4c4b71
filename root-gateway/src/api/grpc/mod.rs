//! The scheduler gRPC API (tonic): `canopy.api.v1.Scheduler`, gRPC health
//! (`grpc.health.v1`) and server reflection (v1 and v1alpha), on one port.
//!
//! Thin shell: every answer is [`crate::stress`] evaluated on a blocking
//! thread, with a deadline, through the same PromQL engine and store as the
//! HTTP API. `WatchJobs` is fed by one poller per gateway ([`watch`]).

mod convert;
mod service;
pub mod watch;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use canopy_proto::api as pb;
use pb::scheduler_server::SchedulerServer;
use tokio::sync::watch as signal;
use tonic::Status;

use crate::auth::{Access, Auth};
use crate::promql::Engine;
use crate::store::Querier;
use crate::stress::{ClusterView, Evaluator, JobFilter, StressError, Thresholds};
pub use service::SchedulerService;
pub use watch::WatchHub;

/// Errors starting the gRPC API.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GrpcError {
    /// The address could not be bound.
    #[error("binding the gRPC API on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The reflection service refused the descriptor sets.
    #[error("gRPC reflection: {0}")]
    Reflection(String),
}

/// Shared state of the gRPC API.
#[derive(Clone)]
pub struct GrpcState {
    /// Where queries read (the same store as the HTTP API).
    pub querier: Arc<dyn Querier + Send + Sync>,
    /// The PromQL engine (the same as the HTTP API's).
    pub engine: Arc<Engine>,
    /// Verdict thresholds.
    pub thresholds: Arc<Thresholds>,
    /// Per-request evaluation time limit.
    pub query_timeout: Duration,
    /// Current time in ms (the shell's clock).
    pub now_ms: Arc<dyn Fn() -> i64 + Send + Sync>,
    /// `WatchJobs` subscribers.
    pub hub: Arc<WatchHub>,
    /// Who may call the scheduler service (open by default).
    pub auth: Auth,
    /// The unscoped store, kept by a user-scoped state to measure cluster
    /// I/O totals (sums only, never another job's row).
    cluster: Option<Arc<dyn Querier + Send + Sync>>,
}

impl GrpcState {
    /// State with default thresholds, a 30 s limit, 256 queued events per
    /// watch, at most 1024 watches, and the system clock.
    pub fn new(querier: Arc<dyn Querier + Send + Sync>, engine: Arc<Engine>) -> Self {
        GrpcState {
            querier,
            engine,
            thresholds: Arc::new(Thresholds::default()),
            query_timeout: Duration::from_secs(30),
            now_ms: Arc::new(canopy_proto::link::unix_now_ms),
            hub: Arc::new(WatchHub::new(256, 1024)),
            auth: Auth::open(),
            cluster: None,
        }
    }

    /// This state as `access` may see it: for a user, every query reads
    /// through a [`crate::auth::ScopedQuerier`]; I/O shares are still
    /// measured against the whole cluster's totals.
    pub fn for_access(&self, access: &Access) -> GrpcState {
        let mut st = self.clone();
        if access.user().is_some() {
            st.cluster = Some(Arc::clone(&self.querier));
            st.querier = access.querier(&self.querier);
        }
        st
    }

    /// Runs `f` on an [`Evaluator`] at the current time, off the async
    /// threads, with the deadline; returns its answer and the time used.
    async fn eval<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Evaluator<'_>) -> Result<T, StressError> + Send + 'static,
    ) -> Result<(T, i64), Status> {
        let st = self.clone();
        let now = (self.now_ms)();
        let deadline = Instant::now() + self.query_timeout;
        let r = tokio::task::spawn_blocking(move || {
            let cancel = move || Instant::now() >= deadline;
            let mut ev = Evaluator::new(
                &st.engine,
                st.querier.as_ref(),
                now,
                &cancel,
                &st.thresholds,
            );
            if let Some(all) = &st.cluster {
                let whole = Evaluator::new(&st.engine, all.as_ref(), now, &cancel, &st.thresholds);
                ev.cluster_total = Some(whole.cluster_io()?);
            }
            f(&ev)
        })
        .await
        .map_err(|e| Status::internal(format!("evaluation task: {e}")))?;
        match r {
            Ok(v) => Ok((v, now)),
            Err(e) => {
                if matches!(e, StressError::Query { .. }) {
                    tracing::warn!(error = %e, "gRPC stress query failed");
                }
                Err(e.into())
            }
        }
    }

    /// Running jobs narrowed by the identity labels of `f`.
    async fn running_view(&self, f: JobFilter) -> Result<ClusterView, Status> {
        self.eval(move |ev| ev.running(&f.scope()))
            .await
            .map(|(v, _)| v)
    }
}

/// Binds `addr` and serves the scheduler API, health and reflection until
/// `shutdown` turns true; the `WatchJobs` poller runs every `tick`.
/// Returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    state: GrpcState,
    tick: Duration,
    tls: Option<crate::api::tls::ApiTls>,
    shutdown: signal::Receiver<bool>,
) -> Result<SocketAddr, GrpcError> {
    let reflection = |b: tonic_reflection::server::Builder<'static>| {
        b.register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let refl_v1 = reflection(tonic_reflection::server::Builder::configure())
        .build_v1()
        .map_err(|e| GrpcError::Reflection(e.to_string()))?;
    let refl_v1alpha = reflection(tonic_reflection::server::Builder::configure())
        .build_v1alpha()
        .map_err(|e| GrpcError::Reflection(e.to_string()))?;
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<SchedulerServer<SchedulerService>>()
        .await;

    let tcp = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| GrpcError::Bind { addr, source })?;
    let bound = tcp
        .local_addr()
        .map_err(|source| GrpcError::Bind { addr, source })?;
    watch::spawn_poller(state.clone(), tick, shutdown.clone());
    let auth = state.auth.clone();
    // Health and reflection stay open (no data); the scheduler service
    // needs a token whenever the gateway has tokens.
    let svc = SchedulerServer::with_interceptor(
        SchedulerService::new(state),
        crate::auth::grpc::interceptor(auth),
    );
    let mut sd = shutdown.clone();
    tokio::spawn(async move {
        let router = tonic::transport::Server::builder()
            .add_service(health_service)
            .add_service(refl_v1)
            .add_service(refl_v1alpha)
            .add_service(svc);
        let stop = async move {
            let _ = sd.wait_for(|v| *v).await;
            // Keep `health` alive (and SERVING) as long as the server.
            drop(health);
        };
        let r = match tls {
            Some(t) => {
                let incoming = t.grpc_listener(tcp, shutdown).into_stream();
                router.serve_with_incoming_shutdown(incoming, stop).await
            }
            None => {
                let incoming = tokio_stream::wrappers::TcpListenerStream::new(tcp);
                router.serve_with_incoming_shutdown(incoming, stop).await
            }
        };
        if let Err(e) = r {
            tracing::error!(error = %e, "gRPC API stopped");
        }
    });
    tracing::info!(grpc_addr = %bound, "gateway gRPC API listening");
    Ok(bound)
}

//! Wiring of the node role (`canopy node`, and the lean `canopy-node`
//! binary, which builds this module alone): the leaf agent, the relay and
//! the uplinks of one host, from its config file. Composition only: the
//! logic lives in the crates.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use canopy_aggregator::merge::{MergeConfig, NullSink};
use canopy_aggregator::relay::{Relay, RelayConfig};
use canopy_aggregator::schedule::TickSchedule;
use canopy_leaf::agent::{self, AgentConfig, Output};
use canopy_leaf::collect::synthetic::SyntheticTicks;
use canopy_leaf::sim::SimJobs;
use canopy_leaf::{Collector, HostOptions, SimNode, host_collectors_with};
use canopy_proto::codec::{BoundsPolicy, CodecConfig};
use canopy_proto::link::{
    BufferLimits, DEFAULT_ACK_TIMEOUT, DEFAULT_ANSWER_TIMEOUT, Dialer, Identity, LinkTuning,
    Listener, Uplink, UplinkConfig, UplinkTarget, unix_now_ms,
};
use canopy_topology::GATEWAY_NAME;
use tokio::sync::{mpsc, watch};

use crate::config::{self, NodeFile};
use crate::selfmetrics::FabricMetrics;

/// The arguments of `canopy node` (and of `canopy-node`).
#[derive(clap::Args)]
pub struct NodeCli {
    /// Config file written by `canopy plan --emit-configs`.
    #[arg(long)]
    pub config: PathBuf,
    /// Replace the host collectors with a deterministic tick counter.
    #[arg(long)]
    pub synthetic: bool,
    /// Relay only: collect nothing (the node's own counters still go up).
    #[arg(long)]
    pub no_collect: bool,
    /// Serve the node's own counters on http://ADDR/metrics (overrides the config).
    #[arg(long)]
    pub metrics: Option<String>,
    /// Also report this many simulated Slurm jobs of 40 series each
    /// (a fixed load for measuring the leaf's cost; see benches/).
    #[arg(long, default_value_t = 0)]
    pub sim_jobs: usize,
    /// Replace the host collectors with a simulated Slurm node of this
    /// many CPUs plus the synthetic tick counter: the metric mix of every
    /// node of `fabric-sim`, to check the simulator against real processes.
    #[arg(long, value_name = "CPUS", conflicts_with_all = ["synthetic", "no_collect"])]
    pub sim_node: Option<u32>,
}

impl NodeCli {
    /// Runs the node until Ctrl-C, on its own runtime.
    pub fn run(self) -> Result<()> {
        runtime()?.block_on(node(
            &self.config,
            NodeArgs {
                synthetic: self.synthetic,
                no_collect: self.no_collect,
                metrics: self.metrics,
                sim_jobs: self.sim_jobs,
                sim_node: self.sim_node,
            },
        ))
    }
}

/// `canopy node` runs on one thread: a node's work per tick is small and
/// a second worker only costs wake-ups on every compute node (issue 3).
fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")
}

/// The tracing subscriber of every role: `RUST_LOG`, else info (quinn at
/// warn), on stderr. (`canopy-node` has a lighter one of its own.)
#[allow(dead_code)]
pub fn init_logs() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,quinn=warn")),
        )
        .with_writer(std::io::stderr)
        .init();
}

pub fn load_identity(cfg_path: &Path, tls: &config::TlsFile) -> Result<Identity> {
    let read = |p: &Path| {
        let p = config::rel(cfg_path, p);
        std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))
    };
    Ok(Identity {
        ca_pem: read(&tls.ca)?,
        cert_pem: read(&tls.cert)?,
        key_pem: read(&tls.key)?,
    })
}

/// Staggered timers of one node (see `canopy_aggregator::schedule`): when
/// its leaf samples and when its relay forwards; `None`: from the start.
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    sample: TickSchedule,
    relay: TickSchedule,
}

impl Pace {
    /// From (sample offset, relay offset) in ms.
    pub fn new(tick: Duration, (sample, relay): (u64, u64)) -> Self {
        let t = i64::try_from(tick.as_millis()).unwrap_or(1000);
        let ms = |v: u64| i64::try_from(v).unwrap_or(0);
        Self {
            sample: TickSchedule::new(t, ms(sample)),
            relay: TickSchedule::new(t, ms(relay)),
        }
    }
}

/// log2 of the zstd window of a node's own uplinks: 64 KiB. With 2,000
/// series a periodic keyframe is ~7 % larger than with 256 KiB (10.2 vs
/// 9.5 KB a minute, `tick_cost`), and the compressor's and the outbox
/// mirror's zstd contexts are smaller.
const NODE_WINDOW_LOG: u32 = 16;

/// zstd level of a node's own uplinks. zstd only sees keyframes and
/// definitions there (delta frames are range-coded); level 3 makes a
/// 2,000-series keyframe ~17 % larger than level 19 (11.1 vs 9.4 KB, once a
/// minute) but a link's first frame costs ~30x fewer instructions (1.7 G at
/// level 19 under callgrind), and its compression context is smaller.
const NODE_ZSTD_LEVEL: i32 = 3;

/// One node's uplink as the plan gives it.
pub struct PlannedUplink {
    /// Subtree index.
    pub subtree: usize,
    /// Whether it carries the relay's merged frames.
    pub interior: bool,
    /// The parent.
    pub primary: UplinkTarget,
    /// The planned backup parent.
    pub backup: Option<UplinkTarget>,
    /// Reached together with `backup` on a failover (the other gateways,
    /// when the backup is the gateway and there are several).
    pub backup_group: Vec<UplinkTarget>,
    /// Ack timeout (none: the uplink's default).
    pub ack_timeout: Option<Duration>,
    /// Answer timeout (none: the uplink's default; see
    /// `UplinkConfig::answer_timeout`).
    pub answer_timeout: Option<Duration>,
}

/// Limits `listener` to the peers the plan gives it; without a list (a
/// config written before plans listed them) every peer with a cluster
/// certificate is accepted, said once at start.
pub fn restrict_peers(listener: &Listener, peers: Option<&[String]>, file: &Path) {
    match peers {
        Some(p) => listener.allow_only(Some(p.iter().cloned().collect())),
        None => tracing::warn!(
            config = %file.display(),
            "no allowed_peers in the config: accepting any peer with a cluster certificate (re-run `canopy plan --emit-configs` to check peers against the plan)"
        ),
    }
}

/// Starts one node: its relay (listener + merger), its leaf agent and its
/// uplinks. An interior uplink carries the relay's merged frames (its
/// children plus its own leaf, fed in as an in-memory child); the others
/// carry the leaf's own frames only, encoded straight from its sampler. The
/// node's own counters travel with
/// its leaf's series and, given `metrics`, on `http://ADDR/metrics`.
#[allow(clippy::too_many_arguments)]
pub async fn spawn_node(
    host: &str,
    identity: &Identity,
    listener: Listener,
    uplinks: Vec<PlannedUplink>,
    mut collectors: Vec<Box<dyn Collector + Send>>,
    tick: Duration,
    buffer: BufferLimits,
    merge: MergeConfig,
    metrics: Option<SocketAddr>,
    pace: Option<Pace>,
    shutdown: watch::Receiver<bool>,
) -> Result<()> {
    let dialer = Arc::new(Dialer::new(
        "127.0.0.1:0".parse()?,
        identity,
        LinkTuning::default(),
    )?);
    let relay = Relay::new(
        RelayConfig {
            tick,
            merge,
            codec: CodecConfig::default(),
        },
        NullSink,
    );
    let listener_stats = listener.stats_handle();
    let mut outputs = Vec::new();
    let mut relay_uplinks = Vec::new();
    let mut counted = Vec::new();
    for u in uplinks {
        let parent = u.primary.name.clone();
        let up = Uplink::spawn(
            dialer.clone(),
            UplinkConfig {
                buffer: buffer.clone(),
                ack_timeout: u.ack_timeout.unwrap_or(DEFAULT_ACK_TIMEOUT),
                answer_timeout: u.answer_timeout.unwrap_or(DEFAULT_ANSWER_TIMEOUT),
                backup_group: u.backup_group,
                ..UplinkConfig::new(u.primary, u.backup)
            },
        );
        counted.push((u.subtree, parent, up.clone()));
        if u.interior {
            relay_uplinks.push(up);
        } else {
            outputs.push(Output::Uplink(up));
        }
    }
    let fabric = FabricMetrics::new(host, relay.clone(), listener_stats, counted);
    if let Some(addr) = metrics {
        serve_metrics(addr, fabric.clone(), shutdown.clone()).await?;
    }
    collectors.push(Box::new(fabric));
    // Only a node with an interior link feeds its own frames to its relay,
    // to be merged with its children's. Without one the relay would have
    // nowhere to send, so it does not run at all (no encode, decode, merge
    // round trip, no listener, no ticker): the leaf encodes once per uplink
    // and sends straight up. A childless interior node counts as having no
    // interior link (see where the uplinks are planned).
    if relay_uplinks.is_empty() {
        drop(listener);
        tracing::debug!(host, "no interior link: relay off, frames go straight up");
    } else {
        relay.spawn_listener(listener, shutdown.clone());
        let (tx, rx) = mpsc::channel(64);
        relay.spawn_local(rx);
        outputs.push(Output::Local(tx));
        relay.spawn_ticker_at(relay_uplinks, pace.map(|p| p.relay), shutdown.clone());
    }
    let cfg = AgentConfig {
        node: host.to_string(),
        tick,
        bounds: BoundsPolicy::default(),
        // A 64 KiB zstd window (not 1 MiB): zstd sees keyframes and
        // definitions only, and one node's keyframe is a few KiB, so the
        // previous one stays in reach; saves over 1 MiB per uplink.
        codec: CodecConfig {
            window_log: NODE_WINDOW_LOG,
            zstd_level: NODE_ZSTD_LEVEL,
            ..CodecConfig::default()
        },
    };
    tokio::spawn(async move {
        if let Some(p) = pace {
            // Start on the boundary: the agent's interval keeps the phase.
            let ms = p.sample.wait_ms(unix_now_ms());
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        agent::run(cfg, collectors, outputs, shutdown).await;
    });
    Ok(())
}

/// Serves a node's own counters as Prometheus text on `addr`: `GET` (or
/// `HEAD`) `/metrics`, HTTP/1 only. Plain hyper rather than axum: in this
/// workspace axum comes with HTTP/2 (tonic asks for it), and its server
/// would link h2 into every compute node's binary for one route (issue 3).
async fn serve_metrics(
    addr: SocketAddr,
    fabric: FabricMetrics,
    mut shutdown: watch::Receiver<bool>,
) -> Result<()> {
    let tcp = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the node's /metrics on {addr}"))?;
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                a = tcp.accept() => a,
                _ = shutdown.wait_for(|v| *v) => break,
            };
            let stream = match accepted {
                Ok((s, _)) => s,
                Err(e) => {
                    // Out of descriptors and the like: pause, do not spin.
                    tracing::warn!(error = %e, "node /metrics: accept failed");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            };
            let f = fabric.clone();
            let mut sd = shutdown.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let r = metrics_response(&f, &req);
                    async move { Ok::<_, std::convert::Infallible>(r) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc);
                let mut conn = std::pin::pin!(conn);
                let stop = async move {
                    let _ = sd.wait_for(|v| *v).await;
                };
                let r = tokio::select! {
                    r = conn.as_mut() => r,
                    () = stop => {
                        conn.as_mut().graceful_shutdown();
                        conn.await
                    }
                };
                if let Err(e) = r {
                    tracing::debug!(error = %e, "node /metrics connection");
                }
            });
        }
    });
    tracing::info!(%addr, "node self-metrics on /metrics");
    Ok(())
}

/// The answer of the node's `/metrics` server to `req`.
fn metrics_response<B>(
    fabric: &FabricMetrics,
    req: &hyper::Request<B>,
) -> hyper::Response<http_body_util::Full<bytes::Bytes>> {
    use hyper::{Method, StatusCode, header};
    let mut r = hyper::Response::new(http_body_util::Full::default());
    if req.uri().path() != "/metrics" {
        *r.status_mut() = StatusCode::NOT_FOUND;
    } else if req.method() != Method::GET && req.method() != Method::HEAD {
        *r.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
        r.headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("GET,HEAD"));
    } else {
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("text/plain; version=0.0.4"),
        );
        if req.method() == Method::GET {
            *r.body_mut() = http_body_util::Full::new(bytes::Bytes::from(fabric.render()));
        }
    }
    r
}

/// Options of `canopy node` besides its config file.
pub struct NodeArgs {
    /// Replace the host collectors with the synthetic tick counter.
    pub synthetic: bool,
    /// Relay only: collect nothing of the host.
    pub no_collect: bool,
    /// Address of the node's own `/metrics` (overrides the config).
    pub metrics: Option<String>,
    /// Simulated Slurm jobs to report besides the host (benchmarks).
    pub sim_jobs: usize,
    /// Report a simulated Slurm node of this many CPUs (plus the synthetic
    /// tick counter) instead of the host: `fabric-sim`'s mix (benchmarks).
    pub sim_node: Option<u32>,
}

/// Cluster seed of `canopy node --sim-node`: `fabric-sim`'s default
/// `--seed`, so a node named as the simulator names it (`cn000001`...)
/// reports the same simulated jobs.
const SIM_NODE_SEED: u64 = 1;

/// `canopy node --config FILE`.
pub async fn node(path: &Path, args: NodeArgs) -> Result<()> {
    let NodeArgs {
        synthetic,
        no_collect,
        metrics,
        sim_jobs,
        sim_node,
    } = args;
    let f: NodeFile = config::load(path)?;
    let id = load_identity(path, &f.tls)?;
    let listener = Listener::bind(
        config::addr("listen", &f.listen)?,
        &id,
        LinkTuning::default(),
    )?;
    restrict_peers(&listener, f.allowed_peers.as_deref(), path);
    let answer_timeout = f.answer_timeout_ms.map(Duration::from_millis);
    let mut ups = Vec::new();
    for u in &f.uplinks {
        let interior = u.role == "interior" && !f.children.is_empty();
        if u.parent == GATEWAY_NAME && !f.gateways.is_empty() {
            // Several gateways: a subtree top sends to every one of them,
            // so each answers for the whole cluster; each link stands
            // alone (the others are its redundancy).
            for g in &f.gateways {
                ups.push(PlannedUplink {
                    subtree: u.subtree,
                    interior,
                    primary: UplinkTarget {
                        name: GATEWAY_NAME.into(),
                        addr: config::addr("gateways", g)?,
                    },
                    backup: None,
                    backup_group: Vec::new(),
                    ack_timeout: u.ack_timeout_ms.map(Duration::from_millis),
                    answer_timeout,
                });
            }
            continue;
        }
        let backup_addr = config::addr("backup_addr", &u.backup_addr)?;
        // A backup that is the gateway, when there are several, is all of
        // them: the child then stands in for its subtree top, which sends
        // to every gateway, so none misses what goes up the backup.
        let mut backup_group = Vec::new();
        if u.backup == GATEWAY_NAME {
            for g in &f.gateways {
                let addr = config::addr("gateways", g)?;
                if addr != backup_addr {
                    backup_group.push(UplinkTarget {
                        name: GATEWAY_NAME.into(),
                        addr,
                    });
                }
            }
        }
        ups.push(PlannedUplink {
            subtree: u.subtree,
            interior,
            primary: UplinkTarget {
                name: u.parent.clone(),
                addr: config::addr("parent_addr", &u.parent_addr)?,
            },
            backup: Some(UplinkTarget {
                name: u.backup.clone(),
                addr: backup_addr,
            }),
            backup_group,
            ack_timeout: u.ack_timeout_ms.map(Duration::from_millis),
            answer_timeout,
        });
    }
    let mut collectors: Vec<Box<dyn Collector + Send>> = if no_collect {
        Vec::new()
    } else if synthetic {
        vec![Box::new(SyntheticTicks::new(&f.host))]
    } else if let Some(cpus) = sim_node {
        vec![
            Box::new(SimNode::new(&f.host, SIM_NODE_SEED, cpus)),
            Box::new(SyntheticTicks::new(&f.host)),
        ]
    } else {
        host_collectors_with(
            &f.host,
            Path::new("/proc"),
            Path::new("/sys/fs/cgroup"),
            &HostOptions {
                filesystem_every_ticks: f.filesystem_every_ticks,
                outside_io_every_ticks: f.outside_io_every_ticks,
            },
        )
    };
    if sim_jobs > 0 {
        collectors.push(Box::new(SimJobs::new(&f.host, 0x5eed, sim_jobs)));
    }
    let (sd_tx, sd_rx) = watch::channel(false);
    let tick = Duration::from_millis(f.tick_ms.max(100));
    let metrics = match metrics.or(f.metrics.clone()) {
        Some(a) => Some(config::addr("metrics", &a)?),
        None => None,
    };
    let buffer = BufferLimits {
        max_bytes: f.buffer_bytes,
        max_age_ms: i64::try_from(f.buffer_age_secs.saturating_mul(1000)).unwrap_or(i64::MAX),
        ..BufferLimits::default()
    };
    let pace = f
        .relay_offset_ms
        .map(|r| Pace::new(tick, (f.sample_offset_ms.unwrap_or(0), r)));
    let mut merge = MergeConfig::default();
    if let Some(cap) = f.max_series_per_child {
        merge.max_series_per_child = cap;
    }
    spawn_node(
        &f.host, &id, listener, ups, collectors, tick, buffer, merge, metrics, pace, sd_rx,
    )
    .await?;
    tracing::info!(host = %f.host, listen = %f.listen, "node running");
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    let _ = sd_tx.send(true);
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok(())
}

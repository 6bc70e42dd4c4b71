//! Wiring the crates into processes: `up`, `node`, `gateway`, and the files
//! `plan --emit-configs` and `certs` write. Composition only: every role's
//! logic lives in its crate.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use canopy_aggregator::merge::{MergeConfig, NullSink};
use canopy_aggregator::relay::{Relay, RelayConfig};
use canopy_aggregator::schedule::TickSchedule;
use canopy_gateway::auth::Auth;
use canopy_gateway::remote_write::EndpointConfig;
use canopy_gateway::server::{GatewayOptions, start};
use canopy_gateway::stress::Thresholds;
use canopy_gateway::wal::WalConfig;
use canopy_leaf::agent::{self, AgentConfig, Output};
use canopy_leaf::collect::synthetic::SyntheticTicks;
use canopy_leaf::sim::SimJobs;
use canopy_leaf::{Collector, SimNode, host_collectors};
use canopy_proto::codec::{BoundsPolicy, CodecConfig};
use canopy_proto::link::{
    BufferLimits, Ca, Dialer, Identity, LinkTuning, Listener, Uplink, UplinkConfig, UplinkTarget,
    unix_now_ms,
};
use canopy_topology::{GATEWAY_NAME, Peer, Plan, PlanParams, Role, plan};
use tokio::sync::{mpsc, watch};

use crate::config::{self, Addressing, GatewayFile, NodeFile};
use crate::selfmetrics::FabricMetrics;

/// Writes a CA and one certificate per host plus the gateway into `dir`.
pub fn write_certs(dir: &Path, hosts: &[String]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let ca = Ca::generate("canopy cluster CA")?;
    write(dir, "ca.pem", ca.cert_pem())?;
    write(dir, "ca.key", &ca.key_pem())?;
    for h in hosts.iter().map(String::as_str).chain([GATEWAY_NAME]) {
        let c = ca.issue(h, &[])?;
        write(dir, &format!("{h}.pem"), &c.cert_pem)?;
        write(dir, &format!("{h}.key"), &c.key_pem)?;
    }
    Ok(())
}

fn write(dir: &Path, name: &str, text: &str) -> Result<()> {
    let p = dir.join(name);
    std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))
}

/// `plan --emit-configs`: one config per host, the gateway's, and certs.
pub fn emit_configs(p: &Plan, dir: &Path, a: &Addressing) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let hosts: Vec<String> = p.hosts().iter().map(|h| h.name.clone()).collect();
    write_certs(&dir.join("certs"), &hosts)?;
    for h in &hosts {
        let f = config::node_file(p, h, a, 1000)?;
        write(dir, &format!("{h}.toml"), &toml::to_string_pretty(&f)?)?;
    }
    for k in 0..a.gateway_addrs(p)?.len() {
        let g = config::gateway_file(a, p, k)?;
        let name = match k {
            0 => "gateway.toml".to_string(),
            k => format!("gateway-{k}.toml"),
        };
        write(dir, &name, &toml::to_string_pretty(&g)?)?;
    }
    Ok(())
}

fn load_identity(cfg_path: &Path, tls: &config::TlsFile) -> Result<Identity> {
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
struct Pace {
    sample: TickSchedule,
    relay: TickSchedule,
}

impl Pace {
    /// From (sample offset, relay offset) in ms.
    fn new(tick: Duration, (sample, relay): (u64, u64)) -> Self {
        let t = i64::try_from(tick.as_millis()).unwrap_or(1000);
        let ms = |v: u64| i64::try_from(v).unwrap_or(0);
        Self {
            sample: TickSchedule::new(t, ms(sample)),
            relay: TickSchedule::new(t, ms(relay)),
        }
    }
}

/// log2 of the zstd window of a node's own uplinks.
const NODE_WINDOW_LOG: u32 = 18;

/// One node's uplink as the plan gives it.
struct PlannedUplink {
    subtree: usize,
    interior: bool,
    primary: UplinkTarget,
    backup: Option<UplinkTarget>,
}

/// Starts one node: its relay (listener + merger), its leaf agent and its
/// uplinks. An interior uplink carries the relay's merged frames (its
/// children plus its own leaf, fed in as an in-memory child); the others
/// carry the leaf's own frames only, encoded straight from its sampler. The
/// node's own counters travel with
/// its leaf's series and, given `metrics`, on `http://ADDR/metrics`.
#[allow(clippy::too_many_arguments)]
async fn spawn_node(
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
        // A 256 KiB zstd window (not 1 MiB): zstd sees keyframes and
        // definitions only, and one node's keyframe is a few KiB, so the
        // previous one stays in reach; saves about 1 MiB per uplink.
        codec: CodecConfig {
            window_log: NODE_WINDOW_LOG,
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

/// Serves a node's own counters as Prometheus text on `addr`.
async fn serve_metrics(
    addr: SocketAddr,
    fabric: FabricMetrics,
    mut shutdown: watch::Receiver<bool>,
) -> Result<()> {
    let tcp = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the node's /metrics on {addr}"))?;
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let f = fabric.clone();
            async move { ([("content-type", "text/plain; version=0.0.4")], f.render()) }
        }),
    );
    tokio::spawn(async move {
        let r = axum::serve(tcp, app)
            .with_graceful_shutdown(async move {
                let _ = shutdown.wait_for(|v| *v).await;
            })
            .await;
        if let Err(e) = r {
            tracing::error!(error = %e, "node /metrics stopped");
        }
    });
    tracing::info!(%addr, "node self-metrics on /metrics");
    Ok(())
}

/// Arguments of `canopy up`.
pub struct UpArgs {
    /// Simulated nodes.
    pub nodes: usize,
    /// HTTP API address.
    pub http: SocketAddr,
    /// gRPC API address.
    pub grpc: SocketAddr,
    /// Subtrees K.
    pub subtrees: usize,
    /// Tick, ms.
    pub tick_ms: u64,
    /// remote_write endpoints.
    pub remote_write: Vec<EndpointConfig>,
    /// Tokens file (none: open, allowed on loopback only unless `insecure`).
    pub tokens: Option<std::path::PathBuf>,
    /// Run open even when listening beyond loopback.
    pub insecure: bool,
}

fn this_host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty() && !s.chars().any(char::is_whitespace) && s != GATEWAY_NAME)
        .unwrap_or_else(|| "localhost".into())
}

/// `canopy up`: the whole fabric in this process, on loopback.
pub async fn up(args: UpArgs) -> Result<()> {
    let real = this_host();
    let mut hosts: Vec<String> = (1..=args.nodes).map(|i| format!("sim{i:04}")).collect();
    if hosts.contains(&real) {
        bail!("this host's name {real:?} clashes with a simulated node name");
    }
    hosts.push(real.clone());
    let p = plan(
        &hosts,
        PlanParams {
            subtrees: args.subtrees.max(1),
            replicas: 2.min(args.subtrees.max(1)),
            arity: 2,
        },
    )?;
    let tick = Duration::from_millis(args.tick_ms.max(100));
    let auth = access_control(
        &[args.http, args.grpc],
        args.tokens.as_deref(),
        args.insecure,
    )?;
    let access_line = match &args.tokens {
        Some(t) => format!("tokens from {} (admin, scheduler, user roles)", t.display()),
        None if args.insecure => "OPEN, no access control (--insecure)".to_string(),
        None => "open on loopback, no tokens (give --tokens FILE to require them)".to_string(),
    };
    let ca = Ca::generate("canopy up ephemeral CA")?;
    let (sd_tx, sd_rx) = watch::channel(false);

    let gw_listener = Listener::bind(
        "127.0.0.1:0".parse()?,
        &ca.identity(GATEWAY_NAME)?,
        LinkTuning::default(),
    )?;
    let gw_addr = gw_listener.local_addr();
    let gw = start(
        GatewayOptions {
            http: args.http,
            listener: Some(gw_listener),
            retention_ms: 2 * 3600 * 1000,
            tick,
            wal: None,
            grpc: Some(args.grpc),
            remote_write: args.remote_write.clone(),
            auth,
            thresholds: Default::default(),
        },
        sd_rx.clone(),
    )
    .await?;

    // Bind every node first so that every address is known before anyone dials.
    let mut ids = HashMap::new();
    let mut listeners = HashMap::new();
    let mut addrs: HashMap<String, SocketAddr> = HashMap::new();
    for h in &hosts {
        let id = ca.identity(h)?;
        let l = Listener::bind("127.0.0.1:0".parse()?, &id, LinkTuning::default())?;
        addrs.insert(h.clone(), l.local_addr());
        listeners.insert(h.clone(), l);
        ids.insert(h.clone(), id);
    }
    let target = |peer: &Peer| -> Option<UplinkTarget> {
        match peer {
            Peer::Gateway => Some(UplinkTarget {
                name: GATEWAY_NAME.into(),
                addr: gw_addr,
            }),
            Peer::Host(h) => addrs.get(h).map(|a| UplinkTarget {
                name: h.clone(),
                addr: *a,
            }),
        }
    };
    for (i, hp) in p.hosts().iter().enumerate() {
        let mut ups = Vec::new();
        for l in &hp.links {
            let Some(primary) = target(&l.parent) else {
                continue;
            };
            ups.push(PlannedUplink {
                subtree: l.subtree,
                // A childless interior node relays nothing: its frames go
                // straight up (backups are ancestors, never childless).
                interior: l.role == Role::Interior && !l.children.is_empty(),
                primary,
                backup: target(&l.backup),
            });
        }
        let collectors: Vec<Box<dyn Collector + Send>> = if hp.name == real {
            host_collectors(&hp.name, Path::new("/proc"), Path::new("/sys/fs/cgroup"))
        } else {
            vec![Box::new(SimNode::new(
                &hp.name,
                0x5eed,
                if i % 4 == 0 { 64 } else { 32 },
            ))]
        };
        let (Some(l), Some(id)) = (listeners.remove(&hp.name), ids.get(&hp.name)) else {
            continue;
        };
        spawn_node(
            &hp.name,
            id,
            l,
            ups,
            collectors,
            tick,
            BufferLimits::default(),
            MergeConfig::default(),
            None,
            config::stagger(&p, &hp.name).map(|s| Pace::new(tick, s)),
            sd_rx.clone(),
        )
        .await?;
    }
    let http = gw.http_addr;
    let grpc = gw
        .grpc_addr
        .map_or_else(|| "off".to_string(), |a| a.to_string());
    println!(
        "Canopy is up: a gateway, {} simulated nodes and this host ({real}) in {} subtrees, all over QUIC with mutual TLS on loopback.\n\
         \n  Dashboard:       http://{http}/\n  Prometheus API:  http://{http}/api/v1/query?query=up\n  Grafana:         add a Prometheus data source with URL http://{http}\n  gRPC scheduler API: {grpc} (canopy.api.v1.Scheduler, with health and reflection)\n  Jobs:            canopy jobs --gateway http://{http}\n  Access:          {access_line}\n\
         \nCtrl-C stops everything.",
        args.nodes,
        p.subtrees().len()
    );
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    println!("shutting down");
    let _ = sd_tx.send(true);
    tokio::time::sleep(Duration::from_millis(300)).await;
    Ok(())
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
                });
            }
            continue;
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
                addr: config::addr("backup_addr", &u.backup_addr)?,
            }),
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
        host_collectors(&f.host, Path::new("/proc"), Path::new("/sys/fs/cgroup"))
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

/// Command-line overrides of `canopy gateway`.
pub struct GatewayArgs {
    /// HTTP API address.
    pub http: Option<String>,
    /// gRPC API address.
    pub grpc: Option<String>,
    /// Data directory (write-ahead log and snapshots).
    pub data_dir: Option<std::path::PathBuf>,
    /// Live window, e.g. `2h`.
    pub retention: Option<String>,
    /// fsync policy: always, tick, never.
    pub fsync: Option<String>,
    /// remote_write endpoints (replace the config's when given).
    pub remote_write: Vec<EndpointConfig>,
    /// Tokens file (overrides the config's `tokens`).
    pub tokens: Option<std::path::PathBuf>,
    /// Run open even when listening beyond loopback.
    pub insecure: bool,
}

/// The start-up rule: tokens when given; else open, which is only allowed
/// when every API address is loopback, or with `insecure` (loudly).
pub fn access_control(addrs: &[SocketAddr], tokens: Option<&Path>, insecure: bool) -> Result<Auth> {
    if let Some(t) = tokens {
        let auth = Auth::from_file(t)?;
        tracing::info!(tokens = %t.display(), "access control: tokens required on the HTTP and gRPC APIs");
        return Ok(auth);
    }
    let wide: Vec<String> = addrs
        .iter()
        .filter(|a| !a.ip().is_loopback())
        .map(ToString::to_string)
        .collect();
    if wide.is_empty() {
        tracing::info!("no tokens: the APIs are open, on loopback only");
    } else if insecure {
        tracing::warn!(
            addrs = %wide.join(", "),
            "INSECURE: the APIs listen beyond loopback WITHOUT access control (--insecure); anyone who reaches them reads every user's jobs and may write series"
        );
    } else {
        bail!(
            "refusing to serve {} beyond loopback without tokens: anyone reaching it could read every user's jobs. \
             Give --tokens FILE (make tokens with `canopy token --role ...`; or `tokens = \"FILE\"` in gateway.toml), \
             listen on 127.0.0.1, or pass --insecure to run open anyway",
            wide.join(", ")
        );
    }
    Ok(Auth::open())
}

/// `canopy gateway [--config FILE]`.
pub async fn gateway(path: Option<&Path>, args: GatewayArgs) -> Result<()> {
    let http = args.http;
    let mut grpc_cfg = "127.0.0.1:9701".to_string();
    let mut remote_write = args.remote_write;
    let mut tokens = args.tokens;
    let mut thresholds = Thresholds::default();
    let (listener, http_cfg, retention, data_dir, fsync) = match path {
        Some(p) => {
            let f: GatewayFile = config::load(p)?;
            grpc_cfg.clone_from(&f.grpc);
            if tokens.is_none() {
                tokens = f.tokens.as_deref().map(|t| config::rel(p, t));
            }
            thresholds = f.thresholds.clone();
            if remote_write.is_empty() {
                remote_write = f
                    .remote_write
                    .iter()
                    .map(|r| r.load(p))
                    .collect::<Result<_>>()?;
            }
            let id = load_identity(p, &f.tls)?;
            let l = Listener::bind(
                config::addr("listen", &f.listen)?,
                &id,
                LinkTuning::default(),
            )?;
            let dd = f.data_dir.as_deref().map(|d| config::rel(p, d));
            (Some(l), f.http, f.retention_secs, dd, f.fsync)
        }
        None => (
            None,
            "127.0.0.1:9700".to_string(),
            7200,
            None,
            "tick".to_string(),
        ),
    };
    let retention = match args.retention.as_deref() {
        Some(r) => config::duration_secs("--retention", r)?,
        None => retention,
    };
    let wal = match args.data_dir.or(data_dir) {
        Some(dir) => {
            let mut w = WalConfig::new(dir);
            w.fsync = args
                .fsync
                .as_deref()
                .unwrap_or(&fsync)
                .parse()
                .map_err(anyhow::Error::msg)
                .context("fsync")?;
            Some(w)
        }
        None => None,
    };
    let http = config::addr("--http", http.as_deref().unwrap_or(&http_cfg))?;
    let grpc = config::addr("--grpc", args.grpc.as_deref().unwrap_or(&grpc_cfg))?;
    let auth = access_control(&[http, grpc], tokens.as_deref(), args.insecure)?;
    let (sd_tx, sd_rx) = watch::channel(false);
    let gw = start(
        GatewayOptions {
            http,
            listener,
            retention_ms: i64::try_from(retention).unwrap_or(7200) * 1000,
            tick: Duration::from_secs(1),
            wal,
            grpc: Some(grpc),
            remote_write,
            auth,
            thresholds,
        },
        sd_rx,
    )
    .await?;
    println!(
        "gateway: HTTP API on http://{0}, dashboard at http://{0}/",
        gw.http_addr
    );
    if let Some(g) = gw.grpc_addr {
        println!("gateway: gRPC scheduler API on {g}");
    }
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    let _ = sd_tx.send(true);
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok(())
}

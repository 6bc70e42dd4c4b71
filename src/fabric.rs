//! Wiring the crates into processes: `up` and `gateway` (the node role is in
//! `node.rs`), and the files
//! `plan --emit-configs` and `certs` write. Composition only: every role's
//! logic lives in its crate.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use canopy_aggregator::merge::MergeConfig;
use canopy_gateway::api::tls::ApiTls;
use canopy_gateway::auth::Auth;
use canopy_gateway::remote_write::EndpointConfig;
use canopy_gateway::server::{GatewayOptions, start};
use canopy_gateway::stress::Thresholds;
use canopy_gateway::wal::WalConfig;
use canopy_leaf::{Collector, SimNode, host_collectors};
use canopy_proto::link::{BufferLimits, Ca, LinkTuning, Listener, UplinkTarget};
use canopy_topology::{GATEWAY_NAME, Peer, Plan, PlanParams, Role, plan};
use tokio::sync::watch;

use crate::config::{self, Addressing, GatewayFile};
use crate::node::{Pace, PlannedUplink, load_identity, restrict_peers, spawn_node};

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
    let allowed = p.allowed_children();
    for h in &hosts {
        let f = config::node_file(p, &allowed, h, a, 1000)?;
        write(dir, &format!("{h}.toml"), &toml::to_string_pretty(&f)?)?;
    }
    for k in 0..a.gateway_addrs(p)?.len() {
        let g = config::gateway_file(a, p, &allowed, k)?;
        let name = match k {
            0 => "gateway.toml".to_string(),
            k => format!("gateway-{k}.toml"),
        };
        write(dir, &name, &toml::to_string_pretty(&g)?)?;
    }
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
    let allowed = p.allowed_children();
    let peers = |name: &str| allowed.get(name).cloned().unwrap_or_default();
    gw_listener.allow_only(Some(peers(GATEWAY_NAME).into_iter().collect()));
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
            api_tls: None,
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
        l.allow_only(Some(peers(h).into_iter().collect()));
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
                backup_group: Vec::new(),
                ack_timeout: Some(Duration::from_millis(config::ack_timeout_ms(
                    l.depth,
                    u64::try_from(tick.as_millis()).unwrap_or(u64::MAX),
                ))),
                answer_timeout: None,
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
    /// Keep sealed chunks in memory, not in the data directory's cold tier.
    pub no_cold_tier: bool,
    /// remote_write endpoints (replace the config's when given).
    pub remote_write: Vec<EndpointConfig>,
    /// Tokens file (overrides the config's `tokens`).
    pub tokens: Option<std::path::PathBuf>,
    /// Run open even when listening beyond loopback.
    pub insecure: bool,
    /// TLS files for the APIs (override the config's `[api_tls]`).
    pub api_tls: Option<ApiTlsFiles>,
}

/// The APIs' TLS files: certificate chain, key, and the CA of client
/// certificates when they are required.
#[derive(Clone, Debug)]
pub struct ApiTlsFiles {
    /// PEM certificate chain.
    pub cert: std::path::PathBuf,
    /// PEM private key.
    pub key: std::path::PathBuf,
    /// PEM CA of client certificates (mutual TLS), if required.
    pub client_ca: Option<std::path::PathBuf>,
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
    let mut api_tls = args.api_tls;
    let (listener, http_cfg, retention, data_dir, fsync) = match path {
        Some(p) => {
            let f: GatewayFile = config::load(p)?;
            grpc_cfg.clone_from(&f.grpc);
            if api_tls.is_none() {
                api_tls = f.api_tls.as_ref().map(|t| ApiTlsFiles {
                    cert: config::rel(p, &t.cert),
                    key: config::rel(p, &t.key),
                    client_ca: t.client_ca.as_deref().map(|c| config::rel(p, c)),
                });
            }
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
            restrict_peers(&l, f.allowed_peers.as_deref(), p);
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
            if args.no_cold_tier {
                w.cold_file_bytes = None;
            }
            Some(w)
        }
        None => None,
    };
    let http = config::addr("--http", http.as_deref().unwrap_or(&http_cfg))?;
    let grpc = config::addr("--grpc", args.grpc.as_deref().unwrap_or(&grpc_cfg))?;
    let auth = access_control(&[http, grpc], tokens.as_deref(), args.insecure)?;
    let api_tls_files = api_tls;
    let api_tls = match &api_tls_files {
        Some(f) => Some(
            ApiTls::from_pem_files(&f.cert, &f.key, f.client_ca.as_deref())
                .with_context(|| format!("API TLS from {}", f.cert.display()))?,
        ),
        None => {
            if tokens.is_some() && [http, grpc].iter().any(|a| !a.ip().is_loopback()) {
                tracing::warn!(
                    "the APIs listen beyond loopback without TLS: tokens and answers cross the network in clear text; give --api-cert/--api-key (or [api_tls] in gateway.toml) or put a TLS proxy in front"
                );
            }
            None
        }
    };
    let scheme = if api_tls.is_some() { "https" } else { "http" };
    let reload = Reload {
        auth: auth.clone(),
        tokens: tokens.clone(),
        api_tls: api_tls.clone().zip(api_tls_files.clone()),
    };
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
            api_tls,
        },
        sd_rx,
    )
    .await?;
    println!(
        "gateway: HTTP API on {scheme}://{0}, dashboard at {scheme}://{0}/",
        gw.http_addr
    );
    if let Some(g) = gw.grpc_addr {
        println!(
            "gateway: gRPC scheduler API on {g}{}",
            if scheme == "https" { " (TLS)" } else { "" }
        );
    }
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("listening for SIGHUP")?;
    loop {
        tokio::select! {
            r = tokio::signal::ctrl_c() => {
                r.context("waiting for Ctrl-C")?;
                break;
            }
            _ = hup.recv() => reload.run(),
        }
    }
    let _ = sd_tx.send(true);
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok(())
}

/// What `SIGHUP` reloads in a running gateway: the tokens file and the
/// APIs' certificate, each kept as it was when its new file is unusable.
struct Reload {
    auth: Auth,
    tokens: Option<std::path::PathBuf>,
    api_tls: Option<(ApiTls, ApiTlsFiles)>,
}

impl Reload {
    fn run(&self) {
        if let Some(path) = &self.tokens {
            match self.auth.reload_file(path) {
                Ok(n) => {
                    tracing::info!(tokens = %path.display(), count = n, "SIGHUP: tokens reloaded")
                }
                Err(e) => {
                    tracing::error!(tokens = %path.display(), error = %e, "SIGHUP: tokens NOT reloaded, the previous ones stay")
                }
            }
        }
        if let Some((tls, f)) = &self.api_tls {
            match tls.reload_pem_files(&f.cert, &f.key, f.client_ca.as_deref()) {
                Ok(()) => {
                    tracing::info!(cert = %f.cert.display(), "SIGHUP: API certificate reloaded")
                }
                Err(e) => {
                    tracing::error!(cert = %f.cert.display(), error = %e, "SIGHUP: API certificate NOT reloaded, the previous one stays")
                }
            }
        }
        if self.tokens.is_none() && self.api_tls.is_none() {
            tracing::info!("SIGHUP: nothing to reload (no tokens file, no API certificate)");
        }
    }
}

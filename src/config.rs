//! Configuration files of `canopy node` and `canopy gateway` (TOML), and
//! their generation from a plan (`canopy plan --emit-configs`).
//!
//! Raw serde structs with a default and a doc for every field (the docs are
//! the reference); `validate` turns them into typed settings.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use canopy_gateway::stress::Thresholds;
use canopy_topology::{Peer, Plan, Role};
use serde::{Deserialize, Serialize};

// Paths from this file's directory: `canopy-node` includes this file by
// path from src/bin.
#[path = "config/gateway.rs"]
pub mod gateway;
pub use gateway::GatewayFile;

/// Certificate files, relative to the config file's directory.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TlsFile {
    /// The cluster CA certificate (PEM).
    pub ca: PathBuf,
    /// This host's certificate (PEM), issued by the CA.
    pub cert: PathBuf,
    /// This host's private key (PEM).
    pub key: PathBuf,
}

/// One planned uplink of a node.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UplinkFile {
    /// Subtree id.
    pub subtree: usize,
    /// "interior" (the node relays its children here) or "leaf".
    pub role: String,
    /// Parent host name ("gateway" for a subtree top).
    pub parent: String,
    /// Parent QUIC address.
    pub parent_addr: String,
    /// Backup parent host name.
    pub backup: String,
    /// Backup parent QUIC address.
    pub backup_addr: String,
    /// Longest the oldest record written to the parent may wait for its
    /// acknowledgement before the parent is left for the backup, ms (0:
    /// never). The planner makes it grow with depth, so a node outwaits
    /// its parent's own failover. Absent: 10 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ack_timeout_ms: Option<u64>,
}

/// `canopy node --config FILE`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NodeFile {
    /// This host's name, as in the plan and in its certificate.
    pub host: String,
    /// QUIC address the node's relay listens on for its children.
    pub listen: String,
    /// Sampling tick, ms.
    #[serde(default = "default_tick_ms")]
    pub tick_ms: u64,
    /// Certificates.
    pub tls: TlsFile,
    /// Children the plan gives this node in its home subtree (informational).
    #[serde(default)]
    pub children: Vec<String>,
    /// The only hosts this node's relay accepts as children: its planned
    /// children in every subtree plus the hosts that fail over to it (whose
    /// backup it is). A peer with a valid certificate for any other host is
    /// closed and counted (`canopy_fabric_refused_peers_total{stage=
    /// "not_in_plan"}`). Absent (configs from before): any peer with a
    /// cluster certificate, with a warning at start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_peers: Option<Vec<String>>,
    /// Address of the node's own `/metrics` (Prometheus text); none: off.
    /// The same counters also travel up the tree as `canopy_fabric_*`.
    #[serde(default)]
    pub metrics: Option<String>,
    /// Replay buffer per uplink while no parent takes its frames, bytes;
    /// beyond it the oldest frames go (counted).
    #[serde(default = "default_buffer_bytes")]
    pub buffer_bytes: usize,
    /// Frames older than this are dropped from the replay buffer, seconds.
    #[serde(default = "default_buffer_age")]
    pub buffer_age_secs: u64,
    /// Most series one child link may define on this node's relay; a child
    /// that defines more has its link closed (counted as `too_many_series`).
    /// Absent: the relay's default (2^20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_series_per_child: Option<usize>,
    /// Every gateway's QUIC address. An uplink whose parent is "gateway"
    /// sends to each of them (empty: only its `parent_addr`).
    #[serde(default)]
    pub gateways: Vec<String>,
    /// One uplink per subtree the node belongs to.
    pub uplinks: Vec<UplinkFile>,
    /// Staggered timers: the relay forwards this long after each wall-clock
    /// tick boundary (the planner sets it from the node's depth, see
    /// `canopy_aggregator::schedule`). Absent: timers run from the start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relay_offset_ms: Option<u64>,
    /// With staggered timers, the leaf samples this long after each boundary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_offset_ms: Option<u64>,
    /// Longest a record written to a parent may wait for any packet from
    /// it before the parent counts as dead and is left for the backup, ms
    /// (0: only QUIC's 3 s idle timeout finds a dead parent). With a record
    /// every tick, a vanished parent is left within a tick plus this; raise
    /// it where parents may go without CPU for longer. Absent: 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_timeout_ms: Option<u64>,
    /// Filesystem usage (`statvfs` of each mount) is read every this many
    /// ticks, the last values repeated in between. Absent: 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filesystem_every_ticks: Option<u32>,
    /// `/proc` is scanned for the I/O of processes outside any job every
    /// this many ticks, the last totals repeated in between (0: no scan, no
    /// `job_id=""` I/O series). Absent: 30.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outside_io_every_ticks: Option<u32>,
}

/// Planned ack timeout of a link at `depth` (1: the parent is the
/// gateway) with ticks of `tick_ms`, ms: the top's, then
/// [`ACK_TIMEOUT_STEP_MS`] per level below the top. A parent that stops
/// acking stalls its whole subtree's acks at once; the deeper node waits
/// longer, so the child of the stalled parent fails over (and acks resume)
/// before its own children give up on it.
///
/// The top's is at least [`ACK_TIMEOUT_BASE_MS`] and outwaits the
/// gateway's hole wait plus two ticks: a durable gateway acks a section it
/// holds for a hole only once it is stored, up to
/// [`HOLE_WAIT_TICKS`](canopy_aggregator::merge::HOLE_WAIT_TICKS) later,
/// and that wait must not read as a stalled gateway.
pub fn ack_timeout_ms(depth: u32, tick_ms: u64) -> u64 {
    let hold = u64::from(canopy_aggregator::merge::HOLE_WAIT_TICKS + 2).saturating_mul(tick_ms);
    ACK_TIMEOUT_BASE_MS.max(hold) + u64::from(depth.saturating_sub(1)) * ACK_TIMEOUT_STEP_MS
}

/// Least ack timeout of a subtree top's link to the gateway, ms.
pub const ACK_TIMEOUT_BASE_MS: u64 = 8_000;
/// Added per level below the top, ms: more than one tick plus a failover
/// (idle timeout, replay and the backup's first ack).
pub const ACK_TIMEOUT_STEP_MS: u64 = 4_000;

/// Staggered timers of `host` in `plan`: (sample offset, relay offset) after
/// each tick boundary, ms; the relay's from its depth in its home subtree.
pub fn stagger(plan: &Plan, host: &str) -> Option<(u64, u64)> {
    use canopy_aggregator::schedule::{
        DEFAULT_JITTER_MS, DEFAULT_STEP_MS, leaf_jitter_ms, relay_offset_ms,
    };
    let home = plan.host(host)?.links.first()?;
    let max_depth = plan.subtrees().get(home.subtree).map_or(1, |s| s.depth);
    let relay = relay_offset_ms(home.depth, max_depth, DEFAULT_STEP_MS);
    let sample = leaf_jitter_ms(host, DEFAULT_JITTER_MS);
    Some((u64::try_from(sample).ok()?, u64::try_from(relay).ok()?))
}

fn default_tick_ms() -> u64 {
    1000
}
fn default_buffer_bytes() -> usize {
    16 << 20
}
fn default_buffer_age() -> u64 {
    600
}
fn default_http() -> String {
    "127.0.0.1:9700".into()
}
fn default_grpc() -> String {
    "127.0.0.1:9701".into()
}
fn default_retention() -> u64 {
    7200
}
fn default_fsync() -> String {
    "tick".into()
}

/// Parses a retention like `2h`, `90m` or `3600` (seconds) into seconds.
pub fn duration_secs(field: &str, s: &str) -> Result<u64> {
    let unit = s.trim_start_matches(|c: char| c.is_ascii_digit());
    let num: u64 = s[..s.len() - unit.len()]
        .parse()
        .with_context(|| format!("{field}: {s:?} is not a duration like 2h or 90m"))?;
    let mult = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => bail!("{field}: {s:?}: unit must be s, m, h or d"),
    };
    let ms = num.saturating_mul(mult).saturating_mul(1000);
    if ms < 60_000 {
        bail!("{field}: {s:?} is shorter than the 1m minimum");
    }
    Ok(ms / 1000)
}

/// Reads and parses a TOML file.
pub fn load<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// Parses a socket address, with the field name in the error.
pub fn addr(field: &str, s: &str) -> Result<SocketAddr> {
    s.parse()
        .with_context(|| format!("{field}: {s:?} is not an address like 127.0.0.1:7700"))
}

/// Resolves a path relative to the config file's directory.
pub fn rel(config: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        config.parent().unwrap_or(Path::new(".")).join(p)
    }
}

/// How `--emit-configs` addresses hosts.
pub struct Addressing {
    /// Every host a port on 127.0.0.1.
    pub loopback: bool,
    /// First gateway's QUIC port; loopback hosts get the following ports,
    /// further loopback gateways the ports after the hosts.
    pub base_port: u16,
    /// Gateway addresses for non-loopback plans (host:port), at least one.
    pub gateways: Vec<String>,
    /// With `loopback`: how many gateways.
    pub loopback_gateways: usize,
}

impl Addressing {
    /// QUIC address of every gateway, the first one first.
    pub fn gateway_addrs(&self, plan: &Plan) -> Result<Vec<String>> {
        if !self.loopback {
            if self.gateways.is_empty() {
                bail!("give at least one --gateway address");
            }
            return Ok(self.gateways.clone());
        }
        let hosts = plan.hosts().len();
        (0..self.loopback_gateways.max(1))
            .map(|k| {
                let port = match k {
                    0 => usize::from(self.base_port),
                    k => usize::from(self.base_port) + hosts + k,
                };
                if port > usize::from(u16::MAX) {
                    bail!("too many hosts for loopback ports from {}", self.base_port);
                }
                Ok(format!("127.0.0.1:{port}"))
            })
            .collect()
    }

    /// QUIC address of a plan peer; for the gateway, the first one (a node
    /// whose backup is the gateway fails over to every address in its
    /// config's `gateways`, this one first).
    pub fn of(&self, plan: &Plan, peer: &Peer) -> Result<String> {
        match peer {
            Peer::Gateway => self
                .gateway_addrs(plan)?
                .into_iter()
                .next()
                .context("no gateway address"),
            Peer::Host(h) => {
                let i = plan.index_of(h).context("peer not in plan")?;
                if self.loopback {
                    let port = usize::from(self.base_port) + 1 + i;
                    if port > usize::from(u16::MAX) {
                        bail!("too many hosts for loopback ports from {}", self.base_port);
                    }
                    Ok(format!("127.0.0.1:{port}"))
                } else {
                    Ok(format!("{h}:{}", self.base_port + 1))
                }
            }
        }
    }
}

/// Who may connect to whom in `plan` ([`Plan::allowed_children`]), the
/// lists [`node_file`] and [`gateway_file`] write.
pub type AllowedPeers = std::collections::BTreeMap<String, std::collections::BTreeSet<String>>;

/// The node config the plan gives `host`; `allowed` is
/// `plan.allowed_children()`, computed once for every host.
pub fn node_file(
    plan: &Plan,
    allowed: &AllowedPeers,
    host: &str,
    a: &Addressing,
    tick_ms: u64,
) -> Result<NodeFile> {
    let hp = plan.host(host).context("host not in plan")?;
    let me = Peer::Host(host.to_string());
    let listen = a.of(plan, &me)?;
    let listen = if a.loopback {
        listen
    } else {
        format!("0.0.0.0:{}", a.base_port + 1)
    };
    let mut uplinks = Vec::new();
    let mut children = Vec::new();
    for l in &hp.links {
        if l.role == Role::Interior {
            children.extend(l.children.iter().cloned());
        }
        uplinks.push(UplinkFile {
            subtree: l.subtree,
            role: if l.role == Role::Interior {
                "interior"
            } else {
                "leaf"
            }
            .into(),
            parent: l.parent.name().to_string(),
            parent_addr: a.of(plan, &l.parent)?,
            backup: l.backup.name().to_string(),
            backup_addr: a.of(plan, &l.backup)?,
            ack_timeout_ms: Some(ack_timeout_ms(l.depth, tick_ms)),
        });
    }
    let gateways = a.gateway_addrs(plan)?;
    Ok(NodeFile {
        host: host.to_string(),
        listen,
        tick_ms,
        metrics: None,
        buffer_bytes: default_buffer_bytes(),
        buffer_age_secs: default_buffer_age(),
        max_series_per_child: None,
        answer_timeout_ms: None,
        filesystem_every_ticks: None,
        outside_io_every_ticks: None,
        gateways: if gateways.len() > 1 {
            gateways
        } else {
            Vec::new()
        },
        tls: TlsFile {
            ca: "certs/ca.pem".into(),
            cert: format!("certs/{host}.pem").into(),
            key: format!("certs/{host}.key").into(),
        },
        children,
        allowed_peers: Some(peers_of(allowed, host)),
        uplinks,
        relay_offset_ms: stagger(plan, host).map(|s| s.1),
        sample_offset_ms: stagger(plan, host).map(|s| s.0),
    })
}

fn peers_of(allowed: &AllowedPeers, parent: &str) -> Vec<String> {
    allowed
        .get(parent)
        .map(|s| s.iter().cloned().collect())
        .unwrap_or_default()
}

/// The config of gateway `k` (0 = the first) for a plan; `allowed` as for
/// [`node_file`].
pub fn gateway_file(
    a: &Addressing,
    plan: &Plan,
    allowed: &AllowedPeers,
    k: usize,
) -> Result<GatewayFile> {
    let addrs = a.gateway_addrs(plan)?;
    let listen = addrs
        .get(k)
        .with_context(|| format!("no gateway {k} among {}", addrs.len()))?;
    let port = listen
        .rsplit_once(':')
        .map_or(a.base_port.to_string(), |(_, p)| p.to_string());
    Ok(GatewayFile {
        listen: if a.loopback {
            listen.clone()
        } else {
            format!("0.0.0.0:{port}")
        },
        http: default_http(),
        grpc: default_grpc(),
        retention_secs: default_retention(),
        data_dir: None,
        fsync: default_fsync(),
        remote_write: Vec::new(),
        tokens: None,
        thresholds: Thresholds::default(),
        allowed_peers: Some(peers_of(allowed, canopy_topology::GATEWAY_NAME)),
        api_tls: None,
        tls: TlsFile {
            ca: "certs/ca.pem".into(),
            cert: "certs/gateway.pem".into(),
            key: "certs/gateway.key".into(),
        },
    })
}

#[cfg(test)]
#[path = "config/tests.rs"]
mod tests;

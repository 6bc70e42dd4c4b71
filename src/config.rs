//! Configuration files of `canopy node` and `canopy gateway` (TOML), and
//! their generation from a plan (`canopy plan --emit-configs`).
//!
//! Raw serde structs with a default and a doc for every field (the docs are
//! the reference); `validate` turns them into typed settings.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use canopy_gateway::remote_write::{EndpointConfig, WriteAuth};
use canopy_gateway::stress::Thresholds;
use canopy_topology::{Peer, Plan, Role};
use serde::{Deserialize, Serialize};

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
    /// `job_id=""` I/O series). Absent: 10.
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

/// `canopy gateway --config FILE`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GatewayFile {
    /// QUIC address subtree tops send to.
    pub listen: String,
    /// Prometheus-compatible HTTP API address.
    #[serde(default = "default_http")]
    pub http: String,
    /// gRPC API address.
    #[serde(default = "default_grpc")]
    pub grpc: String,
    /// Live window kept in memory, seconds.
    #[serde(default = "default_retention")]
    pub retention_secs: u64,
    /// Directory of the write-ahead log and snapshots (relative to this
    /// file); absent: memory only, nothing survives a restart.
    #[serde(default)]
    pub data_dir: Option<PathBuf>,
    /// When the log is fsynced: "always" (each batch), "tick" (once per
    /// second) or "never" (the OS decides). A process crash loses nothing
    /// under any policy; a machine crash loses at most one tick under "tick".
    #[serde(default = "default_fsync")]
    pub fsync: String,
    /// Prometheus remote_write endpoints every series is sent to, e.g.
    /// `["http://victoria:8428/api/v1/write"]`; an entry may be a table with
    /// credentials and roots: `{ url = "https://…", bearer_token_file = "…",
    /// basic_auth = { username = "…", password_file = "…" }, ca_file = "…" }`.
    #[serde(default)]
    pub remote_write: Vec<RemoteWriteFile>,
    /// Tokens file (relative to this file; `canopy token` makes its lines):
    /// SHA-256 hashes with roles admin, scheduler or user. Absent: no access
    /// control, which the gateway only accepts on loopback addresses
    /// (`--insecure` overrides).
    #[serde(default)]
    pub tokens: Option<PathBuf>,
    /// Where the stress verdicts draw their lines (`[thresholds]`; any
    /// field left out keeps its default).
    #[serde(default)]
    pub thresholds: Thresholds,
    /// The only hosts accepted on `listen`: those the plan sends to the
    /// gateway (subtree tops, and their children while a top is down). Any
    /// other certified peer is closed and counted. Absent (configs from
    /// before): any peer with a cluster certificate, with a warning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_peers: Option<Vec<String>>,
    /// TLS on the HTTP and gRPC APIs (`[api_tls]`, files relative to this
    /// file); absent: plain TCP (loopback, or behind a TLS proxy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_tls: Option<ApiTlsFile>,
    /// Certificates.
    pub tls: TlsFile,
}

/// `[api_tls]` of gateway.toml: the API listeners' certificate.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ApiTlsFile {
    /// PEM certificate chain, the gateway's own certificate first.
    pub cert: PathBuf,
    /// PEM private key of that certificate.
    pub key: PathBuf,
    /// PEM CA: when set, every API client must present a certificate it
    /// signed (mutual TLS), besides any token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_ca: Option<PathBuf>,
}

/// One `remote_write` entry of gateway.toml.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum RemoteWriteFile {
    /// Just the URL (`http://` or `https://`).
    Url(String),
    /// A URL with credentials and roots.
    Endpoint(RemoteWriteEndpoint),
}

/// A remote_write endpoint with credentials; secrets live in files
/// (relative to the config file), never in the config itself.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RemoteWriteEndpoint {
    /// `http(s)://host:port/api/v1/write`.
    pub url: String,
    /// File holding a bearer token (`Authorization: Bearer …`).
    #[serde(default)]
    pub bearer_token_file: Option<PathBuf>,
    /// Basic auth: user name and a file holding the password.
    #[serde(default)]
    pub basic_auth: Option<BasicAuthFile>,
    /// PEM CA certificates to trust instead of the public and system roots.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
}

/// Basic auth of a remote_write endpoint.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BasicAuthFile {
    /// User name.
    pub username: String,
    /// File holding the password.
    pub password_file: PathBuf,
}

fn read_secret(what: &str, p: &Path) -> Result<String> {
    let s = std::fs::read_to_string(p)
        .with_context(|| format!("reading the {what} file {}", p.display()))?;
    let s = s.trim().to_string();
    if s.is_empty() {
        bail!("the {what} file {} is empty", p.display());
    }
    Ok(s)
}

impl RemoteWriteFile {
    /// The endpoint, its files read relative to `config`.
    pub fn load(&self, config: &Path) -> Result<EndpointConfig> {
        let e = match self {
            RemoteWriteFile::Url(u) => return Ok(EndpointConfig::plain(u)),
            RemoteWriteFile::Endpoint(e) => e,
        };
        let auth = match (&e.bearer_token_file, &e.basic_auth) {
            (Some(_), Some(_)) => bail!(
                "remote_write {}: bearer_token_file or basic_auth, not both",
                e.url
            ),
            (Some(f), None) => Some(WriteAuth::Bearer(read_secret(
                "bearer token",
                &rel(config, f),
            )?)),
            (None, Some(b)) => Some(WriteAuth::Basic {
                username: b.username.clone(),
                password: read_secret("password", &rel(config, &b.password_file))?,
            }),
            (None, None) => None,
        };
        let ca_pem = match &e.ca_file {
            Some(f) => {
                let p = rel(config, f);
                Some(
                    std::fs::read_to_string(&p)
                        .with_context(|| format!("reading {}", p.display()))?,
                )
            }
            None => None,
        };
        Ok(EndpointConfig {
            url: e.url.clone(),
            auth,
            ca_pem,
        })
    }
}

/// `--remote-write URL` endpoints, each with `--remote-write-bearer-file`
/// and `--remote-write-ca` when given.
pub fn cli_endpoints(
    urls: &[String],
    bearer_file: Option<&Path>,
    ca_file: Option<&Path>,
) -> Result<Vec<EndpointConfig>> {
    if urls.is_empty() && (bearer_file.is_some() || ca_file.is_some()) {
        bail!(
            "--remote-write-bearer-file and --remote-write-ca apply to --remote-write URLs; none given"
        );
    }
    let auth = bearer_file
        .map(|f| read_secret("bearer token", f))
        .transpose()?
        .map(WriteAuth::Bearer);
    let ca_pem = ca_file
        .map(|f| std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display())))
        .transpose()?;
    Ok(urls
        .iter()
        .map(|u| EndpointConfig {
            url: u.clone(),
            auth: auth.clone(),
            ca_pem: ca_pem.clone(),
        })
        .collect())
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
mod tests {
    use super::*;
    use canopy_topology::{PlanParams, plan};

    const MIN: &str = "listen = \"0.0.0.0:7700\"\n";
    const TLS: &str = "[tls]\nca = \"ca.pem\"\ncert = \"g.pem\"\nkey = \"g.key\"\n";

    #[test]
    fn gateway_thresholds_default_and_override_one_by_one() {
        let f: GatewayFile = toml::from_str(&format!("{MIN}{TLS}")).expect("minimal");
        assert_eq!(f.thresholds, Thresholds::default());
        assert_eq!(f.tokens, None);
        let f: GatewayFile = toml::from_str(&format!(
            "{MIN}tokens = \"tokens\"\n[thresholds]\ncpu_under = 0.3\nio_share_over = 0.8\n{TLS}"
        ))
        .expect("thresholds");
        assert_eq!(f.thresholds.cpu_under, 0.3);
        assert_eq!(f.thresholds.io_share_over, 0.8);
        assert_eq!(f.thresholds.mem_over, Thresholds::default().mem_over);
        assert_eq!(f.tokens.as_deref(), Some(Path::new("tokens")));
        let e = toml::from_str::<GatewayFile>(&format!("{MIN}[thresholds]\ncpu_undr = 0.3\n{TLS}"))
            .expect_err("a typo is an error");
        assert!(e.to_string().contains("cpu_undr"), "{e}");
        // remote_write: URLs and tables with credentials side by side.
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("vm.token"), "tok\n").expect("write");
        std::fs::write(dir.path().join("pw"), "pw").expect("write");
        let g: GatewayFile = toml::from_str(&format!(
            "{MIN}remote_write = [\"http://a/w\", {{ url = \"https://b/w\", bearer_token_file = \"vm.token\" }}, {{ url = \"https://c/w\", basic_auth = {{ username = \"u\", password_file = \"pw\" }} }}]\n{TLS}"
        ))
        .expect("remote_write entries");
        let cfg = dir.path().join("gateway.toml");
        let eps: Vec<EndpointConfig> = g
            .remote_write
            .iter()
            .map(|r| r.load(&cfg))
            .collect::<Result<_>>()
            .expect("load");
        assert_eq!(eps[0], EndpointConfig::plain("http://a/w"));
        assert_eq!(eps[1].auth, Some(WriteAuth::Bearer("tok".into())));
        assert_eq!(
            eps[2].auth,
            Some(WriteAuth::Basic {
                username: "u".into(),
                password: "pw".into()
            })
        );
        // What `plan --emit-configs` writes reads back the same.
        let text = toml::to_string_pretty(&f).expect("serialise");
        let back: GatewayFile = toml::from_str(&text).expect("round trip");
        assert_eq!(back, f);
    }

    #[test]
    fn a_tops_ack_timeout_outwaits_the_gateways_hole_wait() {
        for tick_ms in [100, 1_000, 5_000, 60_000] {
            let hold = u64::from(canopy_aggregator::merge::HOLE_WAIT_TICKS) * tick_ms;
            let top = ack_timeout_ms(1, tick_ms);
            assert!(top > hold + tick_ms, "tick {tick_ms}: {top} ms");
            assert!(top >= ACK_TIMEOUT_BASE_MS, "tick {tick_ms}: {top} ms");
            assert_eq!(ack_timeout_ms(3, tick_ms), top + 2 * ACK_TIMEOUT_STEP_MS);
        }
    }

    #[test]
    fn planned_configs_stagger_relays_by_depth() {
        let hosts: Vec<String> = (1..=16).map(|i| format!("h{i:02}")).collect();
        let p = plan(
            &hosts,
            PlanParams {
                subtrees: 4,
                replicas: 2,
                arity: 2,
            },
        )
        .expect("plan");
        let a = Addressing {
            loopback: true,
            base_port: 20000,
            gateways: Vec::new(),
            loopback_gateways: 1,
        };
        let offset = |h: &str| {
            let f = node_file(&p, &p.allowed_children(), h, &a, 1000).expect("node file");
            let s = f.sample_offset_ms.expect("sample offset");
            let r = f.relay_offset_ms.expect("relay offset");
            assert!(
                s < r,
                "{h} samples ({s} ms) before its relay forwards ({r} ms)"
            );
            r
        };
        let ack = |h: &str| {
            let f = node_file(&p, &p.allowed_children(), h, &a, 1000).expect("node file");
            f.uplinks[0].ack_timeout_ms.expect("a planned ack timeout")
        };
        let mut pairs = 0;
        for hp in p.hosts() {
            let home = &hp.links[0];
            if let Peer::Host(parent) = &home.parent {
                // A child outwaits its parent's own failover.
                assert!(
                    ack(&hp.name) >= ack(parent) + ACK_TIMEOUT_STEP_MS,
                    "{} waits longer for acks than {parent}",
                    hp.name
                );
                // A parent forwards after its child has forwarded.
                assert!(
                    offset(parent) > offset(&hp.name),
                    "{parent} after {}",
                    hp.name
                );
                pairs += 1;
            } else {
                assert_eq!(home.depth, 1);
            }
        }
        assert!(pairs > 0, "the plan has relays below the tops");
        // Old configs (no offsets) still load: timers then run from the start.
        let f = node_file(&p, &p.allowed_children(), "h01", &a, 1000).expect("node file");
        let mut text = toml::to_string_pretty(&f).expect("toml");
        assert!(text.contains("relay_offset_ms"));
        text = text
            .lines()
            .filter(|l| !l.contains("offset_ms"))
            .collect::<Vec<_>>()
            .join("\n");
        let old: NodeFile = toml::from_str(&text).expect("a config without offsets");
        assert_eq!(old.relay_offset_ms, None);
        // ... and without ack timeouts (the uplink's default then).
        let text: String = text
            .lines()
            .filter(|l| !l.contains("ack_timeout_ms"))
            .collect::<Vec<_>>()
            .join("\n");
        let old: NodeFile = toml::from_str(&text).expect("a config without ack timeouts");
        assert!(old.uplinks.iter().all(|u| u.ack_timeout_ms.is_none()));
        // The answer timeout is not planned (the uplink's 1 s default) and
        // may be set at the top of the file.
        assert_eq!(old.answer_timeout_ms, None);
        assert!(!text.contains("answer_timeout_ms"));
        let set: NodeFile = toml::from_str(&format!("answer_timeout_ms = 2500\n{text}"))
            .expect("a config with an answer timeout");
        assert_eq!(set.answer_timeout_ms, Some(2500));
        let back: NodeFile =
            toml::from_str(&toml::to_string_pretty(&set).expect("toml")).expect("round trip");
        assert_eq!(back, set);
        // So is the filesystem interval (absent: the collector's 10 ticks).
        assert_eq!(old.filesystem_every_ticks, None);
        let set: NodeFile = toml::from_str(&format!("filesystem_every_ticks = 1\n{text}"))
            .expect("a config with a filesystem interval");
        assert_eq!(set.filesystem_every_ticks, Some(1));
    }

    #[test]
    fn planned_configs_list_every_allowed_peer_and_old_ones_still_load() {
        let hosts: Vec<String> = (1..=16).map(|i| format!("h{i:02}")).collect();
        let p = plan(
            &hosts,
            PlanParams {
                subtrees: 4,
                replicas: 2,
                arity: 2,
            },
        )
        .expect("plan");
        let a = Addressing {
            loopback: true,
            base_port: 20000,
            gateways: Vec::new(),
            loopback_gateways: 2,
        };
        let allowed = p.allowed_children();
        let files: Vec<NodeFile> = hosts
            .iter()
            .map(|h| node_file(&p, &allowed, h, &a, 1000).expect("node file"))
            .collect();
        let peers = |f: &NodeFile| f.allowed_peers.clone().expect("a planned list");
        // Every uplink's parent and backup lets this host in.
        for f in &files {
            for u in &f.uplinks {
                for parent in [&u.parent, &u.backup] {
                    let ok = if parent == canopy_topology::GATEWAY_NAME {
                        let g = gateway_file(&a, &p, &allowed, 1).expect("gateway file");
                        g.allowed_peers.expect("a planned list").contains(&f.host)
                    } else {
                        let pf = files.iter().find(|x| &x.host == parent).expect("parent");
                        peers(pf).contains(&f.host)
                    };
                    assert!(ok, "{} may connect to {parent}", f.host);
                }
            }
            for c in &f.children {
                assert!(peers(f).contains(c), "{c} under {}", f.host);
            }
        }
        // A relay's list goes beyond its home children (backup children).
        assert!(files.iter().any(|f| peers(f).len() > f.children.len()));
        // Round trip, and a config without the list loads (accept any).
        let text = toml::to_string_pretty(&files[0]).expect("toml");
        let back: NodeFile = toml::from_str(&text).expect("round trip");
        assert_eq!(back, files[0]);
        let mut v: toml::Table = toml::from_str(&text).expect("table");
        assert!(v.remove("allowed_peers").is_some());
        let old: NodeFile = toml::from_str(&toml::to_string(&v).expect("toml")).expect("old");
        assert_eq!(old.allowed_peers, None);
        let g = gateway_file(&a, &p, &allowed, 0).expect("gateway file");
        let mut v: toml::Table =
            toml::from_str(&toml::to_string(&g).expect("toml")).expect("table");
        assert!(v.remove("allowed_peers").is_some());
        let old: GatewayFile = toml::from_str(&toml::to_string(&v).expect("toml")).expect("old");
        assert_eq!(old.allowed_peers, None);
    }
}

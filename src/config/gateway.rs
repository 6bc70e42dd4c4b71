//! `gateway.toml`: the gateway's file, its remote_write endpoints (secrets
//! read from files, never kept in the config) and the command line's.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use canopy_gateway::remote_write::{EndpointConfig, WriteAuth};
use canopy_gateway::stress::Thresholds;
use serde::{Deserialize, Serialize};

use super::{TlsFile, default_fsync, default_grpc, default_http, default_retention, rel};

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

//! A small client of a gateway's Prometheus HTTP API, for `canopy query`
//! and `canopy jobs`. HTTP/1 over plain TCP or TLS (rustls on ring; the
//! public and system roots, or a given CA file such as the cluster's
//! `certs/ca.pem`); bodies are bounded.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use canopy_gateway::store::Labels;
use canopy_gateway::stress::{Sample, Source, StressError};
use canopy_proto::link::tls::pem_roots;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use serde_json::Value as Json;

/// Largest response accepted.
const MAX_BODY: usize = 64 << 20;

/// A gateway's HTTP API.
pub struct Gateway {
    base: String,
    rt: tokio::runtime::Runtime,
    client: Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
    timeout: Duration,
    token: Option<String>,
}

/// How `canopy query` / `canopy jobs` reach an https gateway.
#[derive(Clone, Debug, Default)]
pub struct ClientTls {
    /// PEM CA the gateway's certificate is checked against (default: the
    /// public and system roots).
    pub ca: Option<std::path::PathBuf>,
    /// PEM client certificate and key, for a gateway that requires one.
    pub client: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

/// Roots for an https gateway: the certificates in `ca`, else the public
/// (webpki) and system roots; the client certificate when given.
fn tls_config(tls: &ClientTls) -> Result<rustls::ClientConfig> {
    let roots = match tls.ca.as_deref() {
        Some(path) => {
            let pem = std::fs::read(path).with_context(|| format!("CA file {}", path.display()))?;
            pem_roots(&pem, "the CA file").with_context(|| format!("CA file {}", path.display()))?
        }
        None => {
            let mut roots = rustls::RootCertStore::empty();
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            roots
        }
    };
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let b = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS versions")?
        .with_root_certificates(roots);
    Ok(match &tls.client {
        None => b.with_no_client_auth(),
        Some((cert, key)) => {
            let read = |p: &std::path::Path| {
                std::fs::read(p).with_context(|| format!("reading {}", p.display()))
            };
            let chain = CertificateDer::pem_slice_iter(&read(cert)?)
                .collect::<Result<Vec<_>, _>>()
                .with_context(|| format!("client certificate {}", cert.display()))?;
            let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(&read(key)?)
                .with_context(|| format!("client key {}", key.display()))?;
            b.with_client_auth_cert(chain, key)
                .context("client certificate and key")?
        }
    })
}

/// Percent-encodes a query-string value.
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' | b'-' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl Gateway {
    /// A client of the gateway at `base` (e.g. `http://127.0.0.1:9700`, or
    /// `https://…`), checking an https gateway's certificate against `ca`
    /// (a PEM file) when given, else the public and system roots.
    pub fn new(base: &str, tls: &ClientTls) -> Result<Self> {
        let base = base.trim_end_matches('/');
        if !base.starts_with("http://") && !base.starts_with("https://") {
            bail!("gateway URL {base:?}: give http:// or https:// (e.g. http://127.0.0.1:9700)");
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the tokio runtime")?;
        let conn = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls_config(tls)?)
            .https_or_http()
            .enable_http1()
            .build();
        let client = Client::builder(TokioExecutor::new()).build(conn);
        Ok(Gateway {
            base: base.to_string(),
            rt,
            client,
            timeout: Duration::from_secs(60),
            token: None,
        })
    }

    /// Sends `Authorization: Bearer <token>` with every request.
    pub fn with_token(mut self, token: Option<String>) -> Self {
        self.token = token.filter(|t| !t.is_empty());
        self
    }

    /// GETs `path?params` and returns the `data` of a successful answer.
    pub fn get(&self, path: &str, params: &[(&str, String)]) -> Result<Json> {
        let qs: Vec<String> = params
            .iter()
            .map(|(k, v)| format!("{k}={}", encode(v)))
            .collect();
        let url = format!("{}{path}?{}", self.base, qs.join("&"));
        let uri: hyper::Uri = url.parse().with_context(|| format!("bad URL {url:?}"))?;
        let mut req = hyper::Request::get(uri);
        if let Some(t) = &self.token {
            req = req.header(hyper::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let req = req
            .body(Empty::new())
            .context("building the request (is the token printable ASCII?)")?;
        let (status, body) = self.rt.block_on(async {
            let resp = tokio::time::timeout(self.timeout, self.client.request(req))
                .await
                .context("the gateway did not answer in time")?
                .with_context(|| format!("connecting to {}", self.base))?;
            let status = resp.status();
            let body = tokio::time::timeout(
                self.timeout,
                Limited::new(resp.into_body(), MAX_BODY).collect(),
            )
            .await
            .context("reading the answer timed out")?
            .map_err(|e| anyhow::anyhow!("reading the answer: {e}"))?
            .to_bytes();
            anyhow::Ok((status, body))
        })?;
        let j: Json = serde_json::from_slice(&body).with_context(|| {
            format!(
                "HTTP {status} from {path}: not JSON: {}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            )
        })?;
        if j["status"] != "success" {
            bail!(
                "{} ({}): {}",
                j["errorType"].as_str().unwrap_or("error"),
                status,
                j["error"].as_str().unwrap_or("no message")
            );
        }
        Ok(j["data"].clone())
    }

    /// An instant query at `time` (any Prometheus time; `None`: now).
    pub fn query(&self, q: &str, time: Option<&str>) -> Result<Json> {
        let mut p = vec![("query", q.to_string())];
        if let Some(t) = time {
            p.push(("time", t.to_string()));
        }
        self.get("/api/v1/query", &p)
    }

    /// A range query.
    pub fn query_range(&self, q: &str, start: f64, end: f64, step: &str) -> Result<Json> {
        self.get(
            "/api/v1/query_range",
            &[
                ("query", q.to_string()),
                ("start", format!("{start:.3}")),
                ("end", format!("{end:.3}")),
                ("step", step.to_string()),
            ],
        )
    }
}

/// Parses a Prometheus sample value (`"1.5"`, `"NaN"`, `"+Inf"`).
pub fn parse_value(v: &Json) -> f64 {
    match v.as_str() {
        Some("+Inf" | "Inf") => f64::INFINITY,
        Some("-Inf") => f64::NEG_INFINITY,
        Some(s) => s.parse().unwrap_or(f64::NAN),
        None => f64::NAN,
    }
}

/// Labels of a result's `metric` object.
pub fn labels(metric: &Json) -> Labels {
    Labels::from_pairs(
        metric
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string())),
    )
}

/// The gateway's API as a source of the stress core's answers, every query
/// evaluated at one time.
pub struct HttpSource<'a> {
    /// The gateway.
    pub gw: &'a Gateway,
    /// Evaluation time, unix ms.
    pub time_ms: i64,
}

impl Source for HttpSource<'_> {
    fn instant(&self, query: &str) -> Result<Vec<Sample>, StressError> {
        let t = format!("{:.3}", self.time_ms as f64 / 1000.0);
        let data = self
            .gw
            .query(query, Some(&t))
            .map_err(|e| StressError::Remote {
                query: query.to_string(),
                message: format!("{e:#}"),
            })?;
        let r = &data["result"];
        Ok(match data["resultType"].as_str() {
            Some("scalar") => vec![Sample {
                labels: Labels::default(),
                v: parse_value(&r[1]),
            }],
            _ => r
                .as_array()
                .into_iter()
                .flatten()
                .map(|s| Sample {
                    labels: labels(&s["metric"]),
                    v: parse_value(&s["value"][1]),
                })
                .collect(),
        })
    }

    fn time_ms(&self) -> i64 {
        self.time_ms
    }
}

//! One remote_write endpoint's settings: URL, credentials (bearer token or
//! Basic auth) and TLS roots, and the HTTP client they make (http:// and
//! https:// through rustls on ring).

use std::fmt;
use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use canopy_proto::link::tls::pem_roots;
use http_body_util::Full;
use hyper::header::HeaderValue;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::RemoteWriteError;

/// The client every endpoint sends with.
pub type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Credentials sent to an endpoint.
#[derive(Clone, PartialEq, Eq)]
pub enum WriteAuth {
    /// `Authorization: Bearer <token>`.
    Bearer(String),
    /// `Authorization: Basic base64(user:password)`.
    Basic {
        /// User name.
        username: String,
        /// Password.
        password: String,
    },
}

impl fmt::Debug for WriteAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Secrets stay out of logs and panics.
        match self {
            WriteAuth::Bearer(_) => f.write_str("Bearer(<redacted>)"),
            WriteAuth::Basic { username, .. } => {
                write!(
                    f,
                    "Basic {{ username: {username:?}, password: <redacted> }}"
                )
            }
        }
    }
}

/// One remote_write endpoint.
#[derive(Clone, PartialEq, Eq)]
pub struct EndpointConfig {
    /// `http://` or `https://` URL.
    pub url: String,
    /// Credentials, if the endpoint wants them.
    pub auth: Option<WriteAuth>,
    /// PEM CA certificates that replace the public and system roots for
    /// this endpoint (a cluster's own CA); `None`: webpki and system roots.
    pub ca_pem: Option<String>,
}

impl fmt::Debug for EndpointConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let auth = match &self.auth {
            None => "none",
            Some(WriteAuth::Bearer(_)) => "bearer",
            Some(WriteAuth::Basic { .. }) => "basic",
        };
        f.debug_struct("EndpointConfig")
            .field("url", &self.url)
            .field("auth", &auth)
            .field("ca", &self.ca_pem.is_some())
            .finish()
    }
}

impl EndpointConfig {
    /// An endpoint without credentials, trusting the default roots.
    pub fn plain(url: &str) -> Self {
        EndpointConfig {
            url: url.to_string(),
            auth: None,
            ca_pem: None,
        }
    }

    /// The `Authorization` value to send, marked sensitive (kept out of logs).
    pub(crate) fn authorization(&self) -> Result<Option<HeaderValue>, RemoteWriteError> {
        let text = match &self.auth {
            None => return Ok(None),
            Some(WriteAuth::Bearer(t)) => format!("Bearer {}", t.trim()),
            Some(WriteAuth::Basic { username, password }) => format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"))
            ),
        };
        let mut v = HeaderValue::from_str(&text).map_err(|_| RemoteWriteError::BadUrl {
            url: self.url.clone(),
            reason: "the credentials are not printable ASCII".into(),
        })?;
        v.set_sensitive(true);
        Ok(Some(v))
    }

    /// The client for this endpoint: plain HTTP/1 or TLS (rustls, ring).
    pub(crate) fn client(&self) -> Result<HttpClient, RemoteWriteError> {
        let tls = self.tls_config()?;
        let conn = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        Ok(Client::builder(TokioExecutor::new()).build(conn))
    }

    fn tls_config(&self) -> Result<rustls::ClientConfig, RemoteWriteError> {
        let bad = |reason: String| RemoteWriteError::Tls {
            url: self.url.clone(),
            reason,
        };
        let roots = match &self.ca_pem {
            Some(pem) => {
                pem_roots(pem.as_bytes(), "the CA file").map_err(|e| bad(e.to_string()))?
            }
            None => {
                let mut roots = rustls::RootCertStore::empty();
                roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
                if self.url.starts_with("https://") {
                    let native = rustls_native_certs::load_native_certs();
                    roots.add_parsable_certificates(native.certs);
                }
                roots
            }
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        Ok(rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| bad(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth())
    }
}

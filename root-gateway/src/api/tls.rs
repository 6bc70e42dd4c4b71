//! TLS for the gateway's own HTTP and gRPC listeners, so bearer tokens and
//! query answers do not cross the network in clear text.
//!
//! rustls on ring (as the tree's QUIC links). One certificate chain and key
//! (PEM) serve both listeners; HTTP offers ALPN `http/1.1`, gRPC `h2`.
//! Handshakes run beside the accept loop, at most [`MAX_HANDSHAKES`] at
//! once and each within [`HANDSHAKE_TIMEOUT`], so a client that connects
//! and sends nothing holds a slot for a few seconds and never the listener;
//! a failed handshake (a plain-HTTP client, a bad certificate on the other
//! side) is counted and logged at debug level.

use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use canopy_proto::link::tls::pem_roots;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::server::ServerError;

/// Most TLS handshakes in progress on one listener.
pub const MAX_HANDSHAKES: usize = 256;

/// Longest a client may take to finish its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshakes done but not yet taken by the server, per listener.
const READY_QUEUE: usize = 64;

/// One listener's TLS settings, replaced in place by a reload (clones
/// share it; a connection takes the settings current at its accept).
type Shared = Arc<RwLock<Arc<rustls::ServerConfig>>>;

fn current(c: &Shared) -> Arc<rustls::ServerConfig> {
    match c.read() {
        Ok(g) => Arc::clone(&g),
        Err(poisoned) => Arc::clone(&poisoned.into_inner()),
    }
}

fn replace(c: &Shared, v: Arc<rustls::ServerConfig>) {
    match c.write() {
        Ok(mut g) => *g = v,
        Err(poisoned) => *poisoned.into_inner() = v,
    }
}

/// The API listeners' certificate and key, loaded and checked.
#[derive(Clone, Debug)]
pub struct ApiTls {
    http: Shared,
    grpc: Shared,
    /// Handshakes that failed or timed out, both listeners.
    pub failed_handshakes: Arc<AtomicU64>,
}

impl ApiTls {
    /// Loads a PEM certificate chain (leaf first) and its PEM private key;
    /// with `client_ca` (PEM), every client must also present a
    /// certificate that CA signed (mutual TLS), besides any token.
    pub fn from_pem_files(
        cert: &Path,
        key: &Path,
        client_ca: Option<&Path>,
    ) -> Result<Self, ServerError> {
        let read = |p: &Path| {
            std::fs::read(p).map_err(|e| ServerError::ApiTls {
                reason: format!("{}: {e}", p.display()),
            })
        };
        let ca = client_ca.map(read).transpose()?;
        Self::from_pem(&read(cert)?, &read(key)?, ca.as_deref())
    }

    /// [`ApiTls::from_pem_files`] from the files' bytes.
    pub fn from_pem(
        cert_pem: &[u8],
        key_pem: &[u8],
        client_ca_pem: Option<&[u8]>,
    ) -> Result<Self, ServerError> {
        let (http, grpc) = configs(cert_pem, key_pem, client_ca_pem)?;
        Ok(Self {
            http: Arc::new(RwLock::new(http)),
            grpc: Arc::new(RwLock::new(grpc)),
            failed_handshakes: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Replaces the certificate and key for every connection accepted from
    /// now on (a renewed certificate without a restart; open connections
    /// keep theirs). On any error the ones in use stay.
    pub fn reload_pem_files(
        &self,
        cert: &Path,
        key: &Path,
        client_ca: Option<&Path>,
    ) -> Result<(), ServerError> {
        let fresh = Self::from_pem_files(cert, key, client_ca)?;
        replace(&self.http, current(&fresh.http));
        replace(&self.grpc, current(&fresh.grpc));
        Ok(())
    }

    /// Accepts TLS connections on `tcp` for the HTTP API.
    pub(crate) fn http_listener(
        &self,
        tcp: TcpListener,
        stop: watch::Receiver<bool>,
    ) -> TlsListener {
        self.listener(tcp, Arc::clone(&self.http), stop)
    }

    /// Accepts TLS connections on `tcp` for the gRPC API.
    pub(crate) fn grpc_listener(
        &self,
        tcp: TcpListener,
        stop: watch::Receiver<bool>,
    ) -> TlsListener {
        self.listener(tcp, Arc::clone(&self.grpc), stop)
    }

    fn listener(
        &self,
        tcp: TcpListener,
        config: Shared,
        mut stop: watch::Receiver<bool>,
    ) -> TlsListener {
        let local = tcp.local_addr().ok();
        let (tx, rx) = mpsc::channel(READY_QUEUE);
        let slots = Arc::new(Semaphore::new(MAX_HANDSHAKES));
        let failed = self.failed_handshakes.clone();
        tokio::spawn(async move {
            loop {
                let permit = tokio::select! {
                    p = slots.clone().acquire_owned() => match p {
                        Ok(p) => p,
                        Err(_) => return,
                    },
                    () = stopped(&mut stop) => return,
                };
                let (stream, peer) = tokio::select! {
                    r = tcp.accept() => match r {
                        Ok(c) => c,
                        Err(e) => {
                            // Out of descriptors and the like: back off.
                            tracing::warn!(error = %e, "API listener: accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    },
                    () = stopped(&mut stop) => return,
                };
                let acceptor = TlsAcceptor::from(current(&config));
                let (tx, failed) = (tx.clone(), failed.clone());
                tokio::spawn(async move {
                    let r = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await;
                    drop(permit);
                    match r {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((TlsConn(tls), peer)).await;
                        }
                        Ok(Err(e)) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                            tracing::debug!(%peer, error = %e, "API TLS handshake failed");
                        }
                        Err(_) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                            tracing::debug!(%peer, "API TLS handshake timed out");
                        }
                    }
                });
            }
        });
        TlsListener { rx, local }
    }
}

/// The HTTP and gRPC server settings of a PEM chain and key (and the CA
/// client certificates must chain to, when given).
fn configs(
    cert_pem: &[u8],
    key_pem: &[u8],
    client_ca_pem: Option<&[u8]>,
) -> Result<(Arc<rustls::ServerConfig>, Arc<rustls::ServerConfig>), ServerError> {
    let bad = |reason: String| ServerError::ApiTls { reason };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| bad(format!("certificate PEM: {e}")))?;
    if certs.is_empty() {
        return Err(bad("the certificate file holds no certificate".into()));
    }
    let key =
        PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| bad(format!("private key PEM: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = match client_ca_pem {
        None => None,
        Some(pem) => {
            let roots = pem_roots(pem, "the client CA file").map_err(|e| bad(e.to_string()))?;
            Some(
                rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    Arc::clone(&provider),
                )
                .build()
                .map_err(|e| bad(format!("client CA: {e}")))?,
            )
        }
    };
    let config = |alpn: &[u8]| -> Result<Arc<rustls::ServerConfig>, ServerError> {
        let b = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| bad(e.to_string()))?;
        let b = match &verifier {
            Some(v) => b.with_client_cert_verifier(Arc::clone(v)),
            None => b.with_no_client_auth(),
        };
        let mut c = b
            .with_single_cert(certs.clone(), key.clone_key())
            .map_err(|e| bad(format!("certificate and key: {e}")))?;
        c.alpn_protocols = vec![alpn.to_vec()];
        Ok(Arc::new(c))
    };
    Ok((config(b"http/1.1")?, config(b"h2")?))
}

/// Resolves once `stop` turns true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|v| *v).await;
}

/// A server-side TLS connection of the API listeners.
#[derive(Debug)]
pub struct TlsConn(TlsStream<TcpStream>);

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

/// tonic's per-connection info: the peer's address, as for plain TCP.
impl tonic::transport::server::Connected for TlsConn {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        tonic::transport::server::Connected::connect_info(self.0.get_ref().0)
    }
}

/// Connections whose handshake completed, in the order they did.
#[derive(Debug)]
pub struct TlsListener {
    rx: mpsc::Receiver<(TlsConn, SocketAddr)>,
    local: Option<SocketAddr>,
}

impl TlsListener {
    /// The next connection, or `None` once the listener stopped.
    pub async fn next(&mut self) -> Option<(TlsConn, SocketAddr)> {
        self.rx.recv().await
    }

    /// The connections as a stream, for tonic's `serve_with_incoming`.
    pub fn into_stream(
        self,
    ) -> impl tokio_stream::Stream<Item = Result<TlsConn, std::io::Error>> + Send + 'static {
        use tokio_stream::StreamExt;
        tokio_stream::wrappers::ReceiverStream::new(self.rx).map(|(c, _)| Ok(c))
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsConn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(c) => c,
            // The acceptor stopped (shutdown): no more connections.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.local
            .ok_or_else(|| std::io::Error::other("the API listener has no local address"))
    }
}

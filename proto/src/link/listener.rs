//! The parent's side: a QUIC endpoint that accepts children and yields links.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use quinn::{Connection, Endpoint, Incoming};
use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinHandle;

use super::quic_runtime::LinkRuntime;
use super::stream::{RecordReader, RecordWriter, read_magic, write_magic};
use super::{CloseCode, Identity, LinkError, LinkTuning, Result, WarnLimiter, runtime, tls};

/// Links ready but not yet taken by [`Listener::accept`].
const ACCEPT_QUEUE: usize = 64;

/// Counters a listener keeps about itself, for Canopy's own metrics.
#[derive(Debug, Default)]
pub struct ListenerStats {
    /// Peers whose QUIC/TLS handshake failed (no certificate, certificate
    /// from another CA, wrong ALPN, timed out).
    pub handshake_failures: AtomicU64,
    /// Peers that passed the handshake but did not set up the link stream
    /// properly (no stream, bad magic, no host name in the certificate).
    pub setup_failures: AtomicU64,
    /// Links handed out by [`Listener::accept`] (or queued for it).
    pub accepted: AtomicU64,
    /// Peers with a valid certificate refused because the plan does not
    /// give them to this node ([`Listener::allow_only`]).
    pub not_in_plan: AtomicU64,
}

/// Host names allowed to connect; `None`: any certified peer.
type Allowed = Option<Arc<HashSet<String>>>;

#[derive(Debug, Default)]
struct Shared {
    stats: Arc<ListenerStats>,
    handshake_warn: WarnLimiter,
    setup_warn: WarnLimiter,
    plan_warn: WarnLimiter,
    allowed: RwLock<Allowed>,
}

impl Shared {
    fn allowed(&self) -> Allowed {
        self.allowed
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// Accepts child links on one UDP socket (aggregators, gateways).
///
/// Handshakes run concurrently in their own tasks, so a slow or hostile
/// peer never holds up the others. Dropping the listener stops accepting;
/// links already accepted live on until they or their peer close.
#[derive(Debug)]
pub struct Listener {
    endpoint: Endpoint,
    local_addr: SocketAddr,
    links: Mutex<mpsc::Receiver<Result<InboundLink>>>,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Listener {
    /// Binds `addr` and starts accepting children that present a
    /// certificate signed by `identity`'s CA. Needs a tokio runtime.
    pub fn bind(addr: SocketAddr, identity: &Identity, tuning: LinkTuning) -> Result<Listener> {
        let rt = runtime()?;
        let config = tls::server_config(identity, &tuning)?;
        let endpoint = {
            let _guard = rt.enter();
            // `Endpoint::server` with our timer (see `quic_runtime`).
            let bind = |source| LinkError::Bind { addr, source };
            let socket = std::net::UdpSocket::bind(addr).map_err(bind)?;
            Endpoint::new(
                quinn::EndpointConfig::default(),
                Some(config),
                socket,
                LinkRuntime::shared(),
            )
            .map_err(bind)?
        };
        let local_addr = endpoint
            .local_addr()
            .map_err(|source| LinkError::Bind { addr, source })?;
        let (tx, rx) = mpsc::channel(ACCEPT_QUEUE);
        let shared = Arc::new(Shared::default());
        let task = rt.spawn(accept_loop(endpoint.clone(), tx, shared.clone(), tuning));
        tracing::info!(%local_addr, "link listener bound");
        Ok(Listener {
            endpoint,
            local_addr,
            links: Mutex::new(rx),
            shared,
            task,
        })
    }

    /// The address actually bound (useful after binding port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The next child link.
    ///
    /// `Some(Err(_))` reports one peer that got through the handshake but
    /// failed to set up its stream; keep calling. Handshake failures are
    /// only logged and counted ([`Listener::handshake_failures`]), never
    /// returned. `None` once the listener is closed.
    pub async fn accept(&self) -> Option<Result<InboundLink>> {
        self.links.lock().await.recv().await
    }

    /// Peers refused during the QUIC/TLS handshake so far.
    pub fn handshake_failures(&self) -> u64 {
        self.shared.stats.handshake_failures.load(Ordering::Relaxed)
    }

    /// All counters of this listener.
    pub fn stats(&self) -> &ListenerStats {
        &self.shared.stats
    }

    /// The counters, shared: they outlive the listener being moved into
    /// its accept task (self-telemetry reads them from elsewhere).
    pub fn stats_handle(&self) -> Arc<ListenerStats> {
        self.shared.stats.clone()
    }

    /// Accepts only peers whose certificate names one of `peers` (the
    /// plan's children of this node, in every subtree, plus the hosts that
    /// fail over to it); any other peer is closed with
    /// [`CloseCode::NotInPlan`] and counted. `None`: every peer with a
    /// certificate of the cluster CA. Applies to handshakes from now on.
    pub fn allow_only(&self, peers: Option<HashSet<String>>) {
        *self
            .shared
            .allowed
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = peers.map(Arc::new);
    }

    /// Closes every link of this endpoint at once (code [`CloseCode::Shutdown`])
    /// and stops accepting.
    pub fn close(&self) {
        self.task.abort();
        self.endpoint
            .close(CloseCode::Shutdown.varint(), b"listener shutting down");
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
        // Refuse new handshakes at the QUIC level; accepted links stay up.
        self.endpoint.set_server_config(None);
    }
}

async fn accept_loop(
    endpoint: Endpoint,
    tx: mpsc::Sender<Result<InboundLink>>,
    shared: Arc<Shared>,
    tuning: LinkTuning,
) {
    while let Some(incoming) = endpoint.accept().await {
        let tx = tx.clone();
        let shared = shared.clone();
        let tuning = tuning.clone();
        tokio::spawn(async move {
            let remote = incoming.remote_address();
            match setup(incoming, &tuning, shared.allowed()).await {
                Ok(link) => {
                    shared.stats.accepted.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(peer = %link.peer, %remote, "child link accepted");
                    let _ = tx.send(Ok(link)).await;
                }
                Err(Refusal::Handshake(e)) => {
                    shared
                        .stats
                        .handshake_failures
                        .fetch_add(1, Ordering::Relaxed);
                    if let Some(suppressed) = shared.handshake_warn.allow() {
                        tracing::warn!(%remote, error = %e, suppressed, "link handshake refused");
                    }
                }
                Err(Refusal::NotInPlan(peer)) => {
                    shared.stats.not_in_plan.fetch_add(1, Ordering::Relaxed);
                    if let Some(suppressed) = shared.plan_warn.allow() {
                        tracing::warn!(%remote, peer, suppressed, "refused a peer the plan does not give to this node");
                    }
                }
                Err(Refusal::Setup(e)) => {
                    shared.stats.setup_failures.fetch_add(1, Ordering::Relaxed);
                    if let Some(suppressed) = shared.setup_warn.allow() {
                        tracing::warn!(%remote, error = %e, suppressed, "link setup failed");
                    }
                    let _ = tx.send(Err(e)).await;
                }
            }
        });
    }
}

/// Why an incoming peer did not become a link.
enum Refusal {
    Handshake(LinkError),
    Setup(LinkError),
    /// A certified peer the plan does not allow here (its host name).
    NotInPlan(String),
}

async fn setup(
    incoming: Incoming,
    tuning: &LinkTuning,
    allowed: Allowed,
) -> Result<InboundLink, Refusal> {
    let addr = incoming.remote_address();
    let wait = tuning.connect_timeout;
    let handshake = |source| Refusal::Handshake(LinkError::Handshake { addr, source });
    let connecting = incoming.accept().map_err(handshake)?;
    let conn = tokio::time::timeout(wait, connecting)
        .await
        .map_err(|_| {
            Refusal::Handshake(LinkError::Timeout {
                what: "handshake",
                addr,
                after: wait,
            })
        })?
        .map_err(handshake)?;

    let stream = async {
        let peer = tls::peer_host(&conn).ok_or(LinkError::Protocol {
            addr,
            what: "client certificate names no host",
        })?;
        let (mut send, mut recv) = conn
            .accept_bi()
            .await
            .map_err(|e| LinkError::from_connection(addr, e))?;
        read_magic(&mut recv, addr).await?;
        write_magic(&mut send, addr).await?;
        Ok::<_, LinkError>((peer, send, recv))
    };
    if let Some(peer) = tls::peer_host(&conn)
        && allowed.is_some_and(|a| !a.contains(&peer))
    {
        conn.close(
            CloseCode::NotInPlan.varint(),
            format!("{peer} is not a planned child of this node").as_bytes(),
        );
        return Err(Refusal::NotInPlan(peer));
    }
    let (peer, send, recv) = match tokio::time::timeout(wait, stream).await {
        Ok(Ok(parts)) => parts,
        Ok(Err(e)) => {
            conn.close(CloseCode::Protocol.varint(), e.to_string().as_bytes());
            return Err(Refusal::Setup(e));
        }
        Err(_) => {
            conn.close(
                CloseCode::Protocol.varint(),
                b"link stream not opened in time",
            );
            return Err(Refusal::Setup(LinkError::Timeout {
                what: "opening the link stream",
                addr,
                after: wait,
            }));
        }
    };
    Ok(InboundLink {
        writer: Mutex::new(RecordWriter::new(send, addr, tuning.max_record)),
        reader: Mutex::new(RecordReader::new(recv, addr, tuning.max_record)),
        conn,
        peer,
        remote: addr,
        close_wait: tuning.idle_timeout,
    })
}

/// A link from one child, as the parent sees it: data records in, control records out.
///
/// Methods take `&self`: one task may receive while another sends acks.
#[derive(Debug)]
pub struct InboundLink {
    conn: Connection,
    peer: String,
    remote: SocketAddr,
    reader: Mutex<RecordReader>,
    writer: Mutex<RecordWriter>,
    close_wait: Duration,
}

impl InboundLink {
    /// The child's host name, from its verified certificate (CN, else first DNS SAN).
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// The child's UDP address.
    pub fn remote(&self) -> SocketAddr {
        self.remote
    }

    /// The next data record's payload from the child.
    ///
    /// `Ok(None)` when the child closed cleanly. A record longer than
    /// [`LinkTuning::max_record`] fails with [`LinkError::RecordTooLarge`]
    /// and closes the link with [`CloseCode::RecordTooLarge`]; a dead child
    /// fails with [`LinkError::Lost`] after the idle timeout.
    ///
    /// Cancel-safe: dropping the future loses no bytes, so it can sit in a
    /// `select!`.
    pub async fn recv_record(&self) -> Result<Option<Vec<u8>>> {
        self.reader.lock().await.recv(&self.conn).await
    }

    /// Sends one control record (ack, resync request, ...) to the child.
    /// `payload` is the bare message: the length prefix is added here.
    ///
    /// Not cancel-safe: a send dropped midway may leave half a record on
    /// the stream, after which the link must be closed.
    pub async fn send_control(&self, payload: &[u8]) -> Result<()> {
        self.writer.lock().await.send(payload).await
    }

    /// Whether the link has ended (either side closed, or the child died).
    pub fn is_closed(&self) -> bool {
        self.conn.close_reason().is_some()
    }

    /// Resolves when the link ends, with the reason ([`LinkError::Closed`]
    /// for a clean close).
    pub async fn closed(&self) -> LinkError {
        LinkError::from_connection(self.remote, self.conn.closed().await)
    }

    /// Closes cleanly: control records already sent are delivered first
    /// (waiting at most the idle timeout), then the child sees end of stream.
    pub async fn close(&self) {
        self.writer.lock().await.finish(self.close_wait).await;
        self.conn.close(CloseCode::Normal.varint(), b"bye");
    }
}

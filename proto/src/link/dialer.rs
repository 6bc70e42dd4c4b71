//! The child's side: dial a parent, send data records, read control records.

use std::net::SocketAddr;
use std::time::Duration;

use quinn::{Connection, Endpoint};
use tokio::sync::Mutex;

use super::quic_runtime::LinkRuntime;
use super::stream::{RecordReader, RecordWriter, read_magic, write_magic};
use super::{CloseCode, Identity, LinkError, LinkTuning, Result, runtime, tls};

/// One client endpoint (one UDP socket) from which any number of links are dialed.
///
/// A process dials all its parents from one `Dialer`, so 64 in-process
/// nodes cost 64 sockets at most, not one per connection attempt. Dropping
/// the dialer does not end the links it made.
#[derive(Debug)]
pub struct Dialer {
    endpoint: Endpoint,
    config: quinn::ClientConfig,
    tuning: LinkTuning,
}

impl Dialer {
    /// Binds `local_bind` (`0.0.0.0:0` or `127.0.0.1:0` usually) for dialing
    /// as `identity`. Needs a tokio runtime.
    pub fn new(local_bind: SocketAddr, identity: &Identity, tuning: LinkTuning) -> Result<Dialer> {
        let rt = runtime()?;
        let config = tls::client_config(identity, &tuning)?;
        let endpoint = {
            let _guard = rt.enter();
            // `Endpoint::client` with quinn's tokio runtime, but our timer
            // (see `quic_runtime`). An IPv6 wildcard is dual-stack by Linux's
            // default (`net.ipv6.bindv6only` = 0).
            let bind = |source| LinkError::Bind {
                addr: local_bind,
                source,
            };
            let socket = std::net::UdpSocket::bind(local_bind).map_err(bind)?;
            Endpoint::new(
                quinn::EndpointConfig::default(),
                None,
                socket,
                LinkRuntime::shared(),
            )
            .map_err(bind)?
        };
        Ok(Dialer {
            endpoint,
            config,
            tuning,
        })
    }

    /// The address the dialer's socket is bound to.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        Ok(self.endpoint.local_addr()?)
    }

    /// Dials the parent at `server`, which must present a certificate from
    /// our CA naming `server_name` (a host name, or `127.0.0.1`/`localhost`
    /// on loopback).
    ///
    /// Returns once the parent has accepted us (it checked our certificate
    /// and answered on the link stream), or fails within
    /// [`LinkTuning::connect_timeout`]. A parent that refuses our
    /// certificate, or whose certificate we refuse, yields
    /// [`LinkError::Handshake`].
    pub async fn connect(&self, server: SocketAddr, server_name: &str) -> Result<OutboundLink> {
        let addr = server;
        let connecting = self
            .endpoint
            .connect_with(self.config.clone(), addr, server_name)
            .map_err(|source| LinkError::Connect { addr, source })?;
        let handshake = |source| LinkError::Handshake { addr, source };
        let setup = async {
            let conn = connecting.await.map_err(handshake)?;
            let (mut send, mut recv) = conn.open_bi().await.map_err(handshake)?;
            write_magic(&mut send, addr).await?;
            // The parent answers only after verifying our certificate, so
            // waiting for its magic turns a refusal into a connect error.
            read_magic(&mut recv, addr).await?;
            Ok((conn, send, recv))
        };
        let wait = self.tuning.connect_timeout;
        let (conn, send, recv) = match tokio::time::timeout(wait, setup).await {
            Ok(Ok(parts)) => parts,
            Ok(Err(LinkError::Lost { addr, source })) => {
                return Err(LinkError::Handshake { addr, source });
            }
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(LinkError::Timeout {
                    what: "connect",
                    addr,
                    after: wait,
                });
            }
        };
        tracing::debug!(%addr, server_name, "parent link up");
        let max = self.tuning.max_record;
        Ok(OutboundLink {
            writer: Mutex::new(RecordWriter::new(send, addr, max)),
            reader: Mutex::new(RecordReader::new(recv, addr, max)),
            conn,
            remote: addr,
            close_wait: self.tuning.idle_timeout,
            _endpoint: self.endpoint.clone(),
        })
    }

    /// Closes every link dialed from here at once (code [`CloseCode::Shutdown`]).
    pub fn close(&self) {
        self.endpoint
            .close(CloseCode::Shutdown.varint(), b"dialer shutting down");
    }
}

/// A link to one parent, as the child sees it: data records out, control records in.
///
/// Methods take `&self`: one task may send frames while another waits for acks.
#[derive(Debug)]
pub struct OutboundLink {
    conn: Connection,
    remote: SocketAddr,
    reader: Mutex<RecordReader>,
    writer: Mutex<RecordWriter>,
    close_wait: Duration,
    /// Keeps the socket alive for a link made by [`OutboundLink::connect`].
    _endpoint: Endpoint,
}

impl OutboundLink {
    /// Dials `server` from a fresh endpoint bound to `local_bind`.
    ///
    /// Convenient for a single link; a process with many links should share
    /// one [`Dialer`]. See [`Dialer::connect`].
    pub async fn connect(
        local_bind: SocketAddr,
        server: SocketAddr,
        server_name: &str,
        identity: &Identity,
        tuning: LinkTuning,
    ) -> Result<OutboundLink> {
        Dialer::new(local_bind, identity, tuning)?
            .connect(server, server_name)
            .await
    }

    /// The parent's UDP address.
    pub fn remote(&self) -> SocketAddr {
        self.remote
    }

    /// Sends one data record. `payload` is the bare frame: the length prefix
    /// is added here. Waits for flow-control credit, so a slow parent slows
    /// the sender instead of growing a buffer. A payload over
    /// [`LinkTuning::max_record`] fails with [`LinkError::RecordTooLarge`]
    /// without touching the link.
    ///
    /// Not cancel-safe: a send dropped midway may leave half a record on
    /// the stream, after which the link must be closed.
    pub async fn send_record(&self, payload: &[u8]) -> Result<()> {
        self.writer.lock().await.send(payload).await
    }

    /// The next control record's payload from the parent; `Ok(None)` when
    /// the parent closed cleanly. Cancel-safe.
    pub async fn recv_control(&self) -> Result<Option<Vec<u8>>> {
        self.reader.lock().await.recv(&self.conn).await
    }

    /// Whether the link has ended (either side closed, or the parent died).
    pub fn is_closed(&self) -> bool {
        self.conn.close_reason().is_some()
    }

    /// Resolves when the link ends, with the reason: [`LinkError::Closed`]
    /// for a clean close, [`LinkError::Lost`] for a parent that died (after
    /// [`LinkTuning::idle_timeout`] of silence) or refused us.
    pub async fn closed(&self) -> LinkError {
        LinkError::from_connection(self.remote, self.conn.closed().await)
    }

    /// Closes cleanly: records already sent are delivered first (waiting at
    /// most the idle timeout), then the parent sees end of stream.
    pub async fn close(&self) {
        self.writer.lock().await.finish(self.close_wait).await;
        self.conn.close(CloseCode::Normal.varint(), b"bye");
    }

    /// UDP datagrams received from the parent so far (any packet: data,
    /// QUIC ACKs, pings), to tell a parent that answers from a silent one.
    pub fn datagrams_received(&self) -> u64 {
        self.conn.stats().udp_rx.datagrams
    }

    /// Smoothed round-trip time to the parent.
    pub fn rtt(&self) -> Duration {
        self.conn.rtt()
    }
}

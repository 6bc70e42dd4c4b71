//! QUIC link layer (quinn, mutual TLS): carries records between a child and its parent.
//!
//! This is the I/O shell over the pure `codec`. A child (leaf or aggregator)
//! dials its parent with an [`OutboundLink`] (usually through a shared
//! [`Dialer`]); the parent accepts it on a [`Listener`] as an [`InboundLink`].
//! Both sides hold a certificate issued by the cluster CA ([`certs`]); the
//! parent refuses any child whose certificate the CA did not sign, and learns
//! the child's host name from it ([`InboundLink::peer`]).
//!
//! # Stream layout
//!
//! One QUIC connection per child-parent pair, ALPN `canopy/4`, carrying
//! exactly one bidirectional stream, opened by the child:
//!
//! ```text
//!  child (client)                                          parent (server)
//!        |== "CNPY" | record | record | record ... (data) ==>|
//!        |<= "CNPY" | record | record ...      (control) ====|
//!
//!  record = +---------------------+------------------------+
//!           | length (LEB128 u32) | payload (length bytes) |
//!           +---------------------+------------------------+
//! ```
//!
//! Each direction starts with the 4-byte [`STREAM_MAGIC`]. The child's copy
//! opens the stream (a QUIC stream exists for the peer only once bytes flow);
//! the parent's copy is its acceptance: [`Dialer::connect`] returns only
//! after it arrives, so a successful connect means the parent verified our
//! certificate and is serving us. After the magic, each direction is a
//! sequence of records framed by [`crate::codec::record`]: data frames
//! upward, control messages (acks, resync requests) downward.
//!
//! # Liveness
//!
//! A link carrying a record every 1 s tick hears from its peer every tick
//! (the parent's QUIC ACK of each record, its acknowledgements; the
//! child's records), so it needs no keep-alive pings, each of which costs
//! both ends a wake-up or three. A parent that vanishes without a word is
//! found by the [`Uplink`]: a record written to it and followed by no
//! packet from it within [`UplinkConfig::answer_timeout`] (1 s by default)
//! leaves it, so at a 1 s tick the child is sending to its backup within
//! 2 s. QUIC's own keep-alives after [`LinkTuning::keep_alive`] of silence
//! and its idle timeout of [`LinkTuning::idle_timeout`] (1.25 s and 3 s by
//! default: longer than a tick, so a busy link never pings) keep a quiet
//! link up and end one whose peer vanished within 4.25 s (the idle timer
//! restarts at our first send after the peer's last packet, at most
//! `keep_alive` later): [`OutboundLink::closed`] resolves and sends and
//! receives fail.
//!
//! # Closing
//!
//! Either side closes with an application error code ([`CloseCode`]).
//! [`CloseCode::Normal`] is a clean goodbye: the other side's receive
//! returns `Ok(None)`. Any other code is an error carrying the code.

use std::net::SocketAddr;
use std::time::Duration;

pub mod certs;
mod control;
mod dialer;
mod listener;
mod quic_runtime;
mod stream;
pub mod tls;
mod uplink;

pub use certs::{Ca, HostCert, Identity, SubjectAltName};
pub use control::Control;
pub use dialer::{Dialer, OutboundLink};
pub use listener::{InboundLink, Listener, ListenerStats};
pub use uplink::{
    AckError, BufferLimits, DEFAULT_ACK_TIMEOUT, DEFAULT_ANSWER_TIMEOUT, Outbox, OutboxStats,
    Recipe, Shadow, Uplink, UplinkConfig, UplinkEncoder, UplinkStats, UplinkTarget,
};

/// Unix time now in ms: the one clock read the shells share (the pure cores
/// take `now` as an argument instead).
pub fn unix_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// ALPN protocol id of the Canopy link: version 4 since codec format 4
/// (multi-symbol length and histogram coding, `codec::FORMAT`), which an
/// older peer would misread; the handshake refuses such a pair instead.
pub const ALPN: &[u8] = b"canopy/4";

/// First bytes of each direction of the link stream (see the module docs).
pub const STREAM_MAGIC: [u8; 4] = *b"CNPY";

/// Result type of the link layer.
pub type Result<T, E = LinkError> = std::result::Result<T, E>;

/// How often each kind of refusal may be logged at warn.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// One warn line per minute per cause, with a count of what was held back
/// (shared with the relays, which log refused children through it).
#[derive(Debug, Default)]
pub struct WarnLimiter {
    last: std::sync::Mutex<Option<std::time::Instant>>,
    suppressed: std::sync::atomic::AtomicU64,
}

impl WarnLimiter {
    /// `Some(n)` if this event may be logged (`n` events were suppressed since the last one).
    pub fn allow(&self) -> Option<u64> {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let now = std::time::Instant::now();
        match *last {
            Some(t) if now.duration_since(t) < WARN_EVERY => {
                self.suppressed
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                None
            }
            _ => {
                *last = Some(now);
                Some(
                    self.suppressed
                        .swap(0, std::sync::atomic::Ordering::Relaxed),
                )
            }
        }
    }
}

/// Application error codes a link is closed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CloseCode {
    /// Clean goodbye; the other side sees end of stream.
    Normal,
    /// The peer sent a record longer than the receiver accepts.
    RecordTooLarge,
    /// The peer broke the stream layout (bad magic, malformed prefix, ...).
    Protocol,
    /// The process is shutting down its listener or dialer.
    Shutdown,
    /// The peer's certificate is valid but the plan does not give it to
    /// this node as a child (nor as a host that fails over to it).
    NotInPlan,
}

impl CloseCode {
    /// The code on the wire.
    pub const fn code(self) -> u32 {
        match self {
            CloseCode::Normal => 0,
            CloseCode::RecordTooLarge => 1,
            CloseCode::Protocol => 2,
            CloseCode::Shutdown => 3,
            CloseCode::NotInPlan => 4,
        }
    }

    /// The code as a QUIC variable-length integer.
    pub fn varint(self) -> quinn::VarInt {
        quinn::VarInt::from_u32(self.code())
    }
}

/// Knobs of a link, shared by both ends. [`Default`] suits a cluster LAN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkTuning {
    /// Interval between QUIC keep-alive packets when the link is otherwise quiet.
    pub keep_alive: Duration,
    /// Silence after which the peer is declared dead and the link closed.
    /// QUIC uses the smaller of both ends' values.
    pub idle_timeout: Duration,
    /// Longest a dial (handshake plus the parent's acceptance) may take; on
    /// the listener, longest an accepted peer may take to open its stream.
    pub connect_timeout: Duration,
    /// Largest record payload accepted from the peer, and sent to it.
    pub max_record: usize,
    /// Bytes the peer may send on the stream ahead of our reads.
    pub stream_receive_window: u32,
    /// Bytes the peer may send on the whole connection ahead of our reads.
    pub receive_window: u32,
    /// Bytes we buffer for sending, unacknowledged, per connection.
    pub send_window: u64,
}

impl Default for LinkTuning {
    fn default() -> Self {
        Self {
            keep_alive: Duration::from_millis(1250),
            idle_timeout: Duration::from_secs(3),
            connect_timeout: Duration::from_secs(2),
            max_record: 16 * 1024 * 1024,
            stream_receive_window: 2 * 1024 * 1024,
            receive_window: 4 * 1024 * 1024,
            send_window: 8 * 1024 * 1024,
        }
    }
}

impl LinkTuning {
    /// Checks that the knobs make sense together.
    pub fn validate(&self) -> Result<()> {
        let bad = |what| Err(LinkError::InvalidTuning(what));
        if self.keep_alive.is_zero() || self.idle_timeout.is_zero() {
            return bad("keep_alive and idle_timeout must be non-zero");
        }
        if self.keep_alive >= self.idle_timeout {
            return bad("keep_alive must be shorter than idle_timeout");
        }
        if self.connect_timeout.is_zero() {
            return bad("connect_timeout must be non-zero");
        }
        if self.max_record == 0 || self.max_record > u32::MAX as usize {
            return bad("max_record must be between 1 and u32::MAX");
        }
        if self.stream_receive_window == 0 || self.receive_window < self.stream_receive_window {
            return bad("receive_window must be at least stream_receive_window (> 0)");
        }
        if self.send_window == 0 {
            return bad("send_window must be non-zero");
        }
        Ok(())
    }
}

/// Everything that can go wrong on a link.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LinkError {
    /// Generating, issuing or parsing a certificate failed.
    #[error("certificate: {context}: {source}")]
    Cert {
        /// What was being done.
        context: &'static str,
        /// The rcgen error.
        #[source]
        source: rcgen::Error,
    },
    /// A PEM input (certificate or key) could not be read.
    #[error("bad PEM for {what}: {detail}")]
    Pem {
        /// Which input.
        what: &'static str,
        /// Why it was refused.
        detail: String,
    },
    /// Building the TLS configuration failed (bad key, bad CA, ...).
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    /// The trust anchors or TLS settings cannot make a QUIC configuration.
    #[error("TLS setup: {0}")]
    TlsSetup(String),
    /// A [`LinkTuning`] value is out of range.
    #[error("invalid link tuning: {0}")]
    InvalidTuning(&'static str),
    /// Called outside a tokio runtime.
    #[error("the link layer needs a tokio runtime")]
    NoRuntime,
    /// Binding the UDP socket failed.
    #[error("cannot bind {addr}: {source}")]
    Bind {
        /// Address we tried to bind.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The dial could not even start (bad server name, address family mismatch, ...).
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// Server address.
        addr: SocketAddr,
        /// Why quinn refused to start.
        #[source]
        source: quinn::ConnectError,
    },
    /// The QUIC/TLS handshake with `addr` failed (wrong CA, no certificate,
    /// name mismatch, peer unreachable).
    #[error("handshake with {addr} failed: {source}")]
    Handshake {
        /// Peer address.
        addr: SocketAddr,
        /// The connection error.
        #[source]
        source: quinn::ConnectionError,
    },
    /// `what` with `addr` did not finish within `after`.
    #[error("{what} with {addr} timed out after {after:?}")]
    Timeout {
        /// Which step.
        what: &'static str,
        /// Peer address.
        addr: SocketAddr,
        /// The limit.
        after: Duration,
    },
    /// A record longer than the limit (received or about to be sent).
    #[error("record of {len} bytes exceeds the {max}-byte limit")]
    RecordTooLarge {
        /// Length of the record.
        len: u64,
        /// The limit.
        max: usize,
    },
    /// The peer broke the stream layout.
    #[error("protocol violation by {addr}: {what}")]
    Protocol {
        /// Peer address.
        addr: SocketAddr,
        /// What was wrong.
        what: &'static str,
    },
    /// The connection to `addr` ended abnormally: idle timeout (dead peer),
    /// reset, or closed by the peer with an error code.
    #[error("link to {addr} lost: {source}")]
    Lost {
        /// Peer address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: quinn::ConnectionError,
    },
    /// The link was closed (locally, or cleanly by the peer) and cannot be used.
    #[error("link closed")]
    Closed,
    /// An I/O error outside QUIC.
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
}

impl LinkError {
    /// Maps the end of a connection: a clean close by either side is
    /// [`LinkError::Closed`], anything else [`LinkError::Lost`].
    pub(crate) fn from_connection(addr: SocketAddr, e: quinn::ConnectionError) -> Self {
        if is_clean_close(&e) {
            LinkError::Closed
        } else {
            LinkError::Lost { addr, source: e }
        }
    }
}

/// Whether a connection ended with a goodbye rather than a failure.
pub(crate) fn is_clean_close(e: &quinn::ConnectionError) -> bool {
    match e {
        quinn::ConnectionError::ApplicationClosed(c) => c.error_code == CloseCode::Normal.varint(),
        quinn::ConnectionError::LocallyClosed => true,
        _ => false,
    }
}

/// Checks we run inside a tokio runtime, since quinn and our tasks need one.
pub(crate) fn runtime() -> Result<tokio::runtime::Handle> {
    tokio::runtime::Handle::try_current().map_err(|_| LinkError::NoRuntime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_tuning_is_valid_and_detects_death_within_two_seconds() {
        let t = LinkTuning::default();
        t.validate().expect("defaults valid");
        // A 1 s tick writes a record a second: a dead parent is left
        // within a tick plus the answer timeout.
        let tick = Duration::from_secs(1);
        assert!(tick + DEFAULT_ANSWER_TIMEOUT <= Duration::from_secs(2));
        // Busy links do not ping: both ends hear each other every tick.
        assert!(t.keep_alive > tick);
        // A quiet link still ends when its peer is gone.
        assert!(t.idle_timeout + t.keep_alive <= Duration::from_secs(5));
    }

    #[test]
    fn bad_tuning_rejected() {
        let t = LinkTuning {
            keep_alive: Duration::from_secs(4),
            ..LinkTuning::default()
        };
        assert!(matches!(t.validate(), Err(LinkError::InvalidTuning(_))));
        let t = LinkTuning {
            max_record: 0,
            ..LinkTuning::default()
        };
        assert!(matches!(t.validate(), Err(LinkError::InvalidTuning(_))));
    }
}

//! Prometheus remote_write v1, both directions.
//!
//! In: `POST /api/v1/write` ([`receiver`]) decompresses snappy within size
//! limits checked before decompression into a reused buffer, reads the
//! protobuf in place ([`pb`]), finds each series' labels by their bytes
//! ([`resolve`]: no parse for a series seen before) and appends the samples
//! to the live store as explicit samples (labels as sent).
//!
//! Out: the store's append path feeds a [`Tap`] (a bounded channel); the
//! [`tracker`] turns change-only fabric data into the samples a Prometheus
//! scraping each node every tick would hold (implied values, `up`,
//! staleness markers), and one [`queue`] per endpoint batches them, retries
//! with backoff and drops its oldest samples when full. [`sender`] is the
//! thin async shell around both.

pub mod endpoint;
pub mod pb;
pub mod queue;
pub mod receiver;
pub mod resolve;
pub mod sender;
pub mod tracker;
pub mod wire;

pub use endpoint::{EndpointConfig, WriteAuth};
pub use receiver::{ReceiverState, router};
pub use sender::{RemoteWrite, SenderConfig, Tap, spawn};
pub use tracker::TapEvent;

/// Errors of remote_write, in and out.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteWriteError {
    /// The compressed body is larger than allowed.
    #[error("remote_write body exceeds the limit of {limit} bytes")]
    BodyTooLarge {
        /// The limit, bytes.
        limit: usize,
    },
    /// Snappy's header declares more decompressed bytes than allowed.
    #[error(
        "remote_write body declares {claimed} decompressed bytes, over the limit of {limit} bytes"
    )]
    DecodedTooLarge {
        /// What the header claims.
        claimed: usize,
        /// The limit, bytes.
        limit: usize,
    },
    /// The body is not valid snappy block format.
    #[error("remote_write body is not valid snappy (block format): {0}")]
    Snappy(String),
    /// The decompressed body is not a valid `WriteRequest`.
    #[error("remote_write body is not a valid protobuf WriteRequest: {0}")]
    Protobuf(String),
    /// A series' labels are unusable.
    #[error("remote_write series has bad labels: {0}")]
    BadLabels(String),
    /// The body could not be read from the connection.
    #[error("reading the remote_write body: {0}")]
    Read(String),
    /// The TLS settings of an endpoint are unusable.
    #[error("remote_write {url:?}: TLS: {reason}")]
    Tls {
        /// The endpoint.
        url: String,
        /// Why.
        reason: String,
    },
    /// A remote_write URL Canopy cannot send to.
    #[error("remote_write URL {url:?}: {reason}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// Why.
        reason: String,
    },
}

#[cfg(test)]
mod pb_tests;
#[cfg(test)]
mod receiver_tests;
#[cfg(test)]
mod sender_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tls_tests;

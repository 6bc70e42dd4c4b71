//! The sans-I/O frame codec: quantise, delta, frame build/parse, zstd.

pub mod record;

/// Everything that can go wrong turning bytes into frames or frames into bytes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// A record's length prefix announces more than the receiver accepts.
    #[error("record of {len} bytes exceeds the {max}-byte limit")]
    RecordTooLarge {
        /// Announced length.
        len: u64,
        /// Configured cap.
        max: usize,
    },
    /// A length prefix that never ends (more than 5 continuation bytes).
    #[error("malformed record length prefix")]
    BadRecordPrefix,
}

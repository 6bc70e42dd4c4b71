//! The sans-I/O frame codec: quantise, predict, range-code, frame build/parse, zstd.
//!
//! ```text
//! observations --Sender--> Changeset --LinkEncoder--> record bytes
//!     (quantise, retire)      |          (dictionary, deltas, zstd stream)
//!                        SeriesTable
//! record bytes --RecordSplitter--> payload --LinkDecoder--> RxFrame + state
//! ```
//! A record on the wire:
//! ```text
//! +-------------------+-------------------------------------------------+
//! | len (LEB128 u32)  | payload                                         |
//! +-------------------+-------------------------------------------------+
//! payload (compact.rs): tag (LEB128), low 2 bits the mode
//!   zstd:    tag = raw len << 2 | 0, then a zstd stream block: protobuf `Frame`
//!   compact: tag = (seq mod 32) << 2 | 1, then ts jitter, sections, packed
//!            bytes, not through zstd (delta frames of packed sections only)
//! Frame (frame.proto): seq | ts delta | keyframe | defs | sections | retired sources
//! Section, keyframe:  source | ts offset | id gaps + values vs last keyframe (columns) | retired
//! Section, delta:     source | ts offset | packed (range-coded, packed.rs) | retired
//!   packed: [sparse?] then which series of the source changed: dense, a
//!     [changed?] flag for each series the link holds for it, ascending id;
//!     sparse, [count] [first id] [id gaps] (few changed: O(changes) to read);
//!     per change ( [on step grid?] [length n and sign of the residual, one
//!     multi-symbol step (format 4)] [n-1 raw bits] )
//!   specials (NaN, inf, stale) stay in their columns, exact;
//!   retired: series that ended at the section's ts, after its updates.
//! Section, repeat (format 3): source | ts offset | repeat flag, no packed
//!   bytes: the members of the source's previous packed section changed
//!   again, each by its last increment (a quiet node's tick counter)
//! A relay may send one source in several sections (several ticks of it);
//! each is applied in order, so samples and retirements keep their place.
//! ```
//! Keyframes keep plain columns (each value as its change since the
//! previous keyframe: mostly zeros) so zstd matches them against the
//! previous keyframe in its window (zstd sees only those and definition
//! frames, so a high level is cheap); delta frames are a few hundred bits of
//! near-random residuals, which a range coder with per-series adaptive
//! statistics (rangecoder.rs, packed.rs) codes close to their information
//! content where zstd's literal coding could not (blocks too small to pay
//! for its Huffman tables).
//! Pure functions and state machines only: no sockets, no tokio, no clock.

mod compact;
pub mod decoder;
mod dense;
pub mod encoder;
mod hist;
mod idhash;
mod packed;
mod pbview;
pub mod quantise;
mod rangecoder;
pub mod record;
pub mod sender;
pub mod table;
pub mod zstream;

#[cfg(test)]
pub(crate) mod tests;

/// Codec format a keyframe announces (`Frame.format`): 4 since packed
/// sections code a bit length or a histogram bin in one multi-symbol
/// range-coder step (`rangecoder::Freqs`) instead of a binary tree; 3 let a
/// section repeat its source's previous changes with no coded bits
/// (`Section.repeat`); 2 let packed sections list their changed members
/// sparsely (format 1, unannounced, flagged every member). A receiver
/// refuses keyframes of another format.
pub const FORMAT: u32 = 4;

/// Largest scratch buffer a link keeps between frames. A link's first frame
/// (every definition) can be hundreds of KiB raw; keeping a buffer that size
/// for a link's life costs every leaf that much memory for nothing, while
/// steady frames (keyframes, definitions) stay well under this.
const SCRATCH_KEEP: usize = 256 * 1024;

/// Frees `buf` if a large frame grew it beyond [`SCRATCH_KEEP`].
fn release_oversized(buf: &mut Vec<u8>) {
    if buf.capacity() > SCRATCH_KEEP {
        *buf = Vec::new();
    }
}

pub use decoder::{LinkDecoder, RxFrame, RxSection, RxSeries, RxSource};
pub use encoder::LinkEncoder;
/// Keyed fast hashing for maps keyed by ids a peer chose (see [`idhash::ValueHashState`]).
pub use idhash::{ValueHashState as IdHashState, ValueHasher as IdHasher};
pub use quantise::{Bounds, Emit, Encoding, Quantiser};
pub use record::{RecordSplitter, write_record};
pub use sender::{BoundsPolicy, Sender, SeriesKey};
pub use table::{
    ChangeSection, Changeset, SeriesEntry, SeriesMark, SeriesTable, SourceEntry, SourceMark,
};

/// Tunables of the codec, shared by both ends of a link.
#[derive(Clone, Debug, PartialEq)]
pub struct CodecConfig {
    /// zstd compression level (zstd sees keyframes and definitions only).
    pub zstd_level: i32,
    /// zstd window of the sender, log2 bytes: how much past the stream sees.
    pub window_log: u32,
    /// Largest window a receiver accepts, log2 bytes (bounds its memory).
    pub window_log_max: u32,
    /// Interval between keyframes, ms (every new link starts with one).
    pub keyframe_interval_ms: i64,
    /// Hard cap on one frame's decompressed size, bytes.
    pub max_frame_bytes: usize,
    /// Most series one link may define.
    pub max_series: usize,
    /// Most sources one link may define.
    pub max_sources: usize,
    /// Most bytes of labels (names plus values) one series may carry.
    pub max_label_bytes: usize,
}

impl Default for CodecConfig {
    fn default() -> Self {
        Self {
            zstd_level: 19,
            window_log: 20,
            window_log_max: 23,
            keyframe_interval_ms: 60_000,
            max_frame_bytes: 16 << 20,
            max_series: 4 << 20,
            max_sources: 1 << 20,
            max_label_bytes: 4096,
        }
    }
}

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
    /// The frame decompresses to more than the cap.
    #[error("frame decompresses to more than {max} bytes")]
    FrameTooLarge {
        /// Configured cap.
        max: usize,
    },
    /// zstd refused the bytes (corrupt stream, window too large, ...).
    #[error("zstd: {0}")]
    Zstd(String),
    /// The decompressed bytes are not a valid frame.
    #[error("malformed frame: {0}")]
    Malformed(String),
    /// A frame arrived out of sequence.
    #[error("frame out of order: expected seq {expected}, got {got}")]
    OutOfOrder {
        /// Sequence number the receiver expected.
        expected: u64,
        /// Sequence number the frame carried.
        got: u64,
    },
    /// The first frame on a link was not a keyframe.
    #[error("link must start with a keyframe")]
    NeedKeyframe,
    /// An update or retirement names a series the link never defined.
    #[error("unknown series id {id}")]
    UnknownSeries {
        /// The id.
        id: u32,
    },
    /// A section or definition names a source the link never defined.
    #[error("unknown source id {id}")]
    UnknownSource {
        /// The id.
        id: u32,
    },
    /// A series or source definition is invalid.
    #[error("bad definition of id {id}: {why}")]
    BadDefinition {
        /// The id.
        id: u32,
        /// What is wrong.
        why: &'static str,
    },
    /// The link defines more series than allowed.
    #[error("more than {max} series on one link")]
    TooManySeries {
        /// Configured cap.
        max: usize,
    },
    /// The link defines more sources than allowed.
    #[error("more than {max} sources on one link")]
    TooManySources {
        /// Configured cap.
        max: usize,
    },
    /// A keyframe announces a codec format this build does not speak (a
    /// peer of another release): the link cannot carry data.
    #[error("peer speaks codec format {got}, this build speaks {want}")]
    Format {
        /// Format the keyframe announced (0: before formats were announced).
        got: u32,
        /// [`FORMAT`].
        want: u32,
    },
    /// An earlier frame was rejected; the link must be reset.
    #[error("link state lost after an earlier error; reconnect")]
    Poisoned,
}

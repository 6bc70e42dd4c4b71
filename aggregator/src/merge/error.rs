//! Errors of the merge core and the names under which they are counted.

use canopy_proto::codec::CodecError;

use super::ChildId;

/// What can go wrong feeding a child's record to the [`Merger`](super::Merger).
///
/// Every variant concerns one child link only: the caller closes that link
/// (the child reconnects and starts with a keyframe); other children are
/// unaffected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AggregatorError {
    /// The child's record could not be decoded; its decoder is now poisoned.
    #[error("child {child}: {source}")]
    Codec {
        /// The child link that sent the record.
        child: ChildId,
        /// What the decoder rejected.
        source: CodecError,
    },
    /// A record arrived for a child that is not connected (or already gone).
    #[error("no link registered for child {child}")]
    UnknownChild {
        /// The unknown child id.
        child: ChildId,
    },
}

/// Stable counter label for a codec error variant (for `rejected_frames`).
pub(crate) fn reason(e: &CodecError) -> &'static str {
    match e {
        CodecError::RecordTooLarge { .. } => "record_too_large",
        CodecError::BadRecordPrefix => "bad_record_prefix",
        CodecError::FrameTooLarge { .. } => "frame_too_large",
        CodecError::Zstd(_) => "zstd",
        CodecError::Malformed(_) => "malformed",
        CodecError::OutOfOrder { .. } => "out_of_order",
        CodecError::NeedKeyframe => "need_keyframe",
        CodecError::UnknownSeries { .. } => "unknown_series",
        CodecError::UnknownSource { .. } => "unknown_source",
        CodecError::BadDefinition { .. } => "bad_definition",
        CodecError::TooManySeries { .. } => "too_many_series",
        CodecError::TooManySources { .. } => "too_many_sources",
        CodecError::Format { .. } => "format",
        CodecError::Poisoned => "poisoned",
        _ => "other",
    }
}

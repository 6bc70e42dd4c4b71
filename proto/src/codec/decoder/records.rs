//! The records a link's decoder keeps and hands out: series
//! ([`RxSeries`]) and sources ([`RxSource`], laid out by hand in cache
//! lines, with their [`Members`]), and what one frame changed
//! ([`RxSection`], [`RxFrame`]). Apart from the decoder's state machine so
//! that the layout of the hot records reads in one place.

use std::collections::BTreeSet;

use crate::model::Labels;

use super::super::packed::{SourceCoding, WireState};
use super::super::quantise::Encoding;
#[cfg(doc)]
use super::LinkDecoder;
use super::lazy::Lazy;

/// A series as the receiver holds it.
#[derive(Clone, Debug, PartialEq)]
pub struct RxSeries {
    /// Labels, `__name__` included.
    pub labels: Labels,
    /// Source id on this link.
    pub source: u32,
    /// Wire encoding.
    pub encoding: Encoding,
    /// Current value (`NaN` until the first value arrives), as the record
    /// holds it: see [`RxSeries::value`].
    pub(super) value: f64,
    pub(super) wire: WireState,
    /// The wire value the series' last keyframe column carried (0: none;
    /// see [`WireState::apply_column`]).
    pub(super) kf: i64,
    /// The receiver's own word about this series (see
    /// [`LinkDecoder::set_tag`]); 0 until set, and again after a
    /// (re)definition.
    pub(super) tag: u64,
}

impl RxSeries {
    /// The tag [`LinkDecoder::set_tag`] gave this series (0: none).
    pub fn tag(&self) -> u64 {
        self.tag
    }

    /// The value this record holds: exact for a series handed out retired;
    /// for a series a decoder still holds, [`LinkDecoder::value`] is (a
    /// quiet source's repeats reach its record lazily, see `Lazy`).
    pub fn value(&self) -> f64 {
        self.value
    }
}

/// A source as the receiver holds it.
///
/// Laid out by hand in three aligned cache lines: what every section of the
/// source reads (its latest timestamp, the receiver's tag, the packed-section
/// state with the last changed ids inline) is in the first; what a quiet
/// source's repeat reads instead of its series' record ([`Lazy`]) in the
/// second, so such a section touches these two lines alone; its members and
/// name in the third.
#[derive(Clone, Debug, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct RxSource {
    /// Timestamp of the latest section seen for it, ms.
    pub last_ts_ms: i64,
    /// The receiver's own word about this source (see
    /// [`LinkDecoder::set_source_tag`]); 0 until set, and again after a
    /// redefinition.
    pub(super) tag: u64,
    /// Its packed-section state, which both ends keep alike (beside the
    /// source: a section finds both in one lookup, one cache line).
    pub(super) coding: SourceCoding,
    /// Sampling tick, ms.
    pub tick_ms: u32,
    /// Repeats of its one last changed series counted, not yet applied to
    /// the series' record (see [`Lazy`]).
    pub(super) lazy: Lazy,
    /// Its live series ids, ascending: the order packed sections walk
    /// (beside the source: a sparse section's member count is in the
    /// record it already reads).
    pub(super) members: Members,
    /// Node name.
    pub name: String,
}

impl RxSource {
    /// The tag [`LinkDecoder::set_source_tag`] gave this source (0: none).
    pub fn tag(&self) -> u64 {
        self.tag
    }
}

/// A source's live series ids, ascending, in one contiguous vector while
/// they are few (a dense section walks them in order, no tree to chase);
/// past [`MEMBERS_VEC_MAX`] a tree, so a peer defining a huge source in
/// descending id order costs O(log n) a definition, not O(n).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Members {
    Few(Vec<u32>),
    Many(BTreeSet<u32>),
}

/// Most members kept in the contiguous form (an insert moves at most this
/// many ids, 16 KiB).
pub(super) const MEMBERS_VEC_MAX: usize = 4096;

impl Default for Members {
    fn default() -> Self {
        Members::Few(Vec::new())
    }
}

impl Members {
    /// The lowest member.
    pub(super) fn first(&self) -> Option<u32> {
        match self {
            Members::Few(v) => v.first().copied(),
            Members::Many(t) => t.first().copied(),
        }
    }

    pub(super) fn len(&self) -> usize {
        match self {
            Members::Few(v) => v.len(),
            Members::Many(t) => t.len(),
        }
    }

    pub(super) fn insert(&mut self, id: u32) {
        match self {
            Members::Few(v) => {
                // Ids are mostly defined in ascending order: a push.
                if v.last().is_none_or(|&l| l < id) {
                    v.push(id);
                } else if let Err(at) = v.binary_search(&id) {
                    v.insert(at, id);
                }
                if v.len() > MEMBERS_VEC_MAX {
                    *self = Members::Many(v.iter().copied().collect());
                }
            }
            Members::Many(t) => {
                t.insert(id);
            }
        }
    }

    pub(super) fn remove(&mut self, id: u32) {
        match self {
            Members::Few(v) => {
                if let Ok(at) = v.binary_search(&id) {
                    v.remove(at);
                }
            }
            Members::Many(t) => {
                t.remove(&id);
            }
        }
    }

    /// Every member, ascending.
    #[cfg(test)]
    pub(super) fn ids(&self) -> Vec<u32> {
        match self {
            Members::Few(v) => v.clone(),
            Members::Many(t) => t.iter().copied().collect(),
        }
    }
}

/// One source's updates at one timestamp, decoded.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RxSection {
    /// Source id on this link.
    pub source: u32,
    /// Timestamp, ms.
    pub ts_ms: i64,
    /// (series id, value) in wire order.
    pub updates: Vec<(u32, f64)>,
    /// Series that ended at `ts_ms`, after the updates (already forgotten).
    pub retired: Vec<(u32, RxSeries)>,
}

/// What one frame changed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RxFrame {
    /// Sequence number.
    pub seq: u64,
    /// Frame timestamp, ms.
    pub ts_ms: i64,
    /// The frame carried full state.
    pub keyframe: bool,
    /// Sources defined or redefined by this frame.
    pub new_sources: Vec<u32>,
    /// Series defined or redefined by this frame.
    pub new_series: Vec<u32>,
    /// Value updates; an empty section is a heartbeat.
    pub sections: Vec<RxSection>,
    /// Series a keyframe dropped by omitting them (already forgotten); they
    /// ended at their source's latest timestamp. Explicit retirements are in
    /// [`RxSection::retired`], at their section's timestamp.
    pub retired: Vec<(u32, RxSeries)>,
    /// Sources that ended (already forgotten).
    pub retired_sources: Vec<(u32, RxSource)>,
    /// Decompressed size of the frame, bytes.
    pub raw_bytes: usize,
}

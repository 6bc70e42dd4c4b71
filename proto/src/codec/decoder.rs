//! The receiving half of one link: records in, reconstructed values out.
//!
//! A state machine over the link's frames. It checks everything a hostile or
//! broken peer could get wrong (sequence, sizes, unknown ids, bad
//! definitions) and answers with a typed [`CodecError`]; after an error the
//! link's state is no longer trustworthy (the zstd stream and the deltas
//! depend on every earlier frame), so the decoder refuses further frames
//! ([`CodecError::Poisoned`]) and the caller closes the link; the sender
//! then reconnects and starts with a keyframe. Nothing else is lost: other
//! links have their own decoders.
//!
//! This file holds the decoder itself and its entry points; the records it
//! keeps are in `records`, the lazy repeat bookkeeping in `lazy`, a whole
//! frame's application and definitions in `frame`, one section's in
//! `sections`.

use crate::model::Labels;

use super::dense::IdTable;
use super::packed::LinkModel;
use super::pbview::Columns;
use super::zstream::ZDecoder;
use super::{CodecConfig, CodecError};

mod frame;
mod lazy;
mod records;
mod sections;

use lazy::{LAZY_MAX, Lazy};
use records::Members;
pub use records::{RxFrame, RxSection, RxSeries, RxSource};

/// Decodes one link's frames.
#[derive(Debug)]
pub struct LinkDecoder {
    cfg: CodecConfig,
    z: ZDecoder,
    next_seq: u64,
    last_ts: i64,
    /// Previous frame's timestamp delta (0 after the first frame).
    last_delta: i64,
    started: bool,
    poisoned: bool,
    /// Records by the peer's ids, dense (see `dense`): a changed series
    /// is found by its id alone, no hash, no probe; ids are bounded at
    /// twice the link's series (sources) cap.
    series: IdTable<RxSeries>,
    sources: IdTable<RxSource>,
    model: LinkModel,
    raw: Vec<u8>,
    /// A zstd-mode frame's sections, as offsets into `raw`, and its other
    /// fields (see `pbview`): reused from frame to frame.
    section_at: Vec<(usize, usize)>,
    rest: Vec<u8>,
    /// The columns of the section being applied (reused).
    cols: Columns,
    /// Update vectors of sections the receiver handed back
    /// ([`LinkDecoder::recycle`]), for the next frames' sections.
    spare: Vec<Vec<(u32, f64)>>,
    spare_sections: Vec<RxSection>,
    /// Repeats are counted lazily (see [`Lazy`]); off only to test that
    /// this changes nothing.
    lazy: bool,
}

/// Sections whose records [`LinkDecoder::warm`] loads at a time, before
/// they are applied: enough misses to overlap, few enough lines to stay
/// in the closest caches until used.
const WARM_AHEAD: usize = 32;

/// Most update vectors a decoder keeps for reuse; each at most
/// [`SPARE_CAP`] long (a keyframe's big ones are freed).
const SPARE_VECS: usize = 1 << 16;
const SPARE_CAP: usize = 256;

impl LinkDecoder {
    /// A decoder for a new link.
    pub fn new(cfg: &CodecConfig) -> Result<Self, CodecError> {
        Ok(Self {
            cfg: cfg.clone(),
            z: ZDecoder::new(cfg.window_log_max)?,
            next_seq: 0,
            last_ts: 0,
            last_delta: 0,
            started: false,
            poisoned: false,
            series: IdTable::new(IdTable::<RxSeries>::limit_for(cfg.max_series)),
            sources: IdTable::new(IdTable::<RxSource>::limit_for(cfg.max_sources)),
            model: LinkModel::default(),
            raw: Vec::new(),
            section_at: Vec::new(),
            rest: Vec::new(),
            cols: Columns::default(),
            spare: Vec::new(),
            spare_sections: Vec::new(),
            lazy: true,
        })
    }

    /// The same decoder applying every repeat eagerly (the reference the
    /// tests compare the lazy one against).
    #[cfg(test)]
    pub(crate) fn eager(mut self) -> Self {
        self.lazy = false;
        self
    }

    /// The series with id `id` on this link.
    #[inline]
    pub fn series(&self, id: u32) -> Option<&RxSeries> {
        self.series.get(id)
    }

    /// Makes series `id` hold `labels` when they are equal to its own, so
    /// that one buffer serves this decoder and whoever else holds the set
    /// (the merger's table, another link's decoder). No-op otherwise.
    pub fn share_labels(&mut self, id: u32, labels: &Labels) {
        if let Some(s) = self.series.get_mut(id)
            && !s.labels.shares_buffer(labels)
            && s.labels == *labels
        {
            s.labels = labels.clone();
        }
    }

    /// Stores `tag` with series `id` (no-op when the link has no such
    /// series): a merger keeps its global handle there, found with the
    /// series the decoder just touched instead of in a map of its own.
    /// A (re)definition of `id` clears it.
    pub fn set_tag(&mut self, id: u32, tag: u64) {
        let Some(s) = self.series.get_mut(id) else {
            return;
        };
        s.tag = tag;
        let source = s.source;
        // A copy held for a quiet source's repeats follows.
        if let Some(src) = self.sources.get_mut(source)
            && src.lazy.encoding.is_some()
            && src.coding.last.first() == Some(&id)
        {
            src.lazy.tag = tag;
        }
    }

    /// Every live series on this link (ascending by id); their values are
    /// [`LinkDecoder::value`]'s, not the records'.
    pub fn series_iter(&self) -> impl Iterator<Item = (u32, &RxSeries)> {
        self.series.iter()
    }

    /// Number of live series.
    pub fn series_count(&self) -> usize {
        self.series.len()
    }

    /// The source with id `id` on this link.
    #[inline]
    pub fn source(&self, id: u32) -> Option<&RxSource> {
        self.sources.get(id)
    }

    /// Stores `tag` with source `id` (no-op when the link has no such
    /// source): a merger keeps its global handle there, found with the
    /// source the decoder just touched instead of in a map of its own.
    /// A redefinition of `id` clears it.
    pub fn set_source_tag(&mut self, id: u32, tag: u64) {
        if let Some(s) = self.sources.get_mut(id) {
            s.tag = tag;
        }
    }

    /// Every live source on this link (ascending by id).
    pub fn sources_iter(&self) -> impl Iterator<Item = (u32, &RxSource)> {
        self.sources.iter()
    }

    /// True once a frame was rejected: the link must be reset.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// Decodes one record payload (without its length prefix).
    pub fn decode(&mut self, payload: &[u8]) -> Result<RxFrame, CodecError> {
        if self.poisoned {
            return Err(CodecError::Poisoned);
        }
        let r = self.decode_inner(payload);
        if r.is_err() {
            self.poisoned = true;
            // Nothing more will be decoded here.
            self.raw = Vec::new();
        }
        r
    }

    /// Hands back a frame [`LinkDecoder::decode`] returned, once used: its
    /// sections' vectors serve the next frames' sections (a receiver of
    /// many sources allocates nothing per section per frame).
    pub fn recycle(&mut self, frame: RxFrame) {
        let mut secs = frame.sections;
        for s in secs.drain(..) {
            let mut v = s.updates;
            if v.capacity() > 0 && v.capacity() <= SPARE_CAP && self.spare.len() < SPARE_VECS {
                v.clear();
                self.spare.push(v);
            }
        }
        if secs.capacity() > self.spare_sections.capacity() {
            self.spare_sections = secs;
        }
    }
}

#[cfg(test)]
mod layout_tests;

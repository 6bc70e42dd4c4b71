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

use std::collections::BTreeSet;

use prost::Message;

use crate::model::Labels;
use crate::schema::frame as pb;

use super::compact;
use super::dense::IdTable;
use super::encoder::get_uvarint;
use super::packed::{LinkModel, SourceCoding, WireState};
use super::pbview::{self, Columns};
use super::quantise::Encoding;
use super::zstream::ZDecoder;
use super::{CodecConfig, CodecError};

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
    value: f64,
    wire: WireState,
    /// The receiver's own word about this series (see
    /// [`LinkDecoder::set_tag`]); 0 until set, and again after a
    /// (re)definition.
    tag: u64,
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
    tag: u64,
    /// Its packed-section state, which both ends keep alike (beside the
    /// source: a section finds both in one lookup, one cache line).
    coding: SourceCoding,
    /// Sampling tick, ms.
    pub tick_ms: u32,
    /// Repeats of its one last changed series counted, not yet applied to
    /// the series' record (see [`Lazy`]).
    lazy: Lazy,
    /// Its live series ids, ascending: the order packed sections walk
    /// (beside the source: a sparse section's member count is in the
    /// record it already reads).
    members: Members,
    /// Node name.
    pub name: String,
}

/// A quiet source's repeats, counted on the source's record and applied
/// to its series' record lazily.
///
/// At a gateway of 10,000 nodes a quiet node's section (a repeat of its
/// tick counter) reaches each of R decoders once a tick, and applying it
/// reads and writes the series' record, rarely in cache. So, once a repeat
/// applied eagerly leaves the source with one last changed series, the
/// source's record keeps what the next repeats need (that series' wire
/// value and increment, its encoding and tag): a repeat then counts itself
/// here and gives the value without touching the series' record. The
/// record is settled (the counted repeats applied, exactly as the eager
/// path would have, in the same order) before anything else reads or
/// writes it or the source's coding state (`LinkDecoder::settle`).
///
/// Invariant while `encoding` is `Some`: the source's `coding.last` is
/// that one series, a live, known member of the source whose record holds
/// `tag` and `encoding`, and whose wire state is the eager one but for
/// `pending` repeats; `cur` is its eager wire value, `inc` its increment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Lazy {
    /// Repeats counted and not yet applied.
    pending: u32,
    /// The series' wire value with them applied.
    cur: i64,
    /// Its last increment (what a repeat adds).
    inc: i64,
    /// Its tag ([`LinkDecoder::set_tag`]).
    tag: u64,
    /// Its encoding; `None`: nothing held (every repeat goes eagerly).
    encoding: Option<Encoding>,
}

/// Most repeats counted before one is applied eagerly (settling costs one
/// step a counted repeat).
const LAZY_MAX: u32 = 1 << 16;

/// A source's live series ids, ascending, in one contiguous vector while
/// they are few (a dense section walks them in order, no tree to chase);
/// past [`MEMBERS_VEC_MAX`] a tree, so a peer defining a huge source in
/// descending id order costs O(log n) a definition, not O(n).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Members {
    Few(Vec<u32>),
    Many(BTreeSet<u32>),
}

/// Most members kept in the contiguous form (an insert moves at most this
/// many ids, 16 KiB).
const MEMBERS_VEC_MAX: usize = 4096;

impl Default for Members {
    fn default() -> Self {
        Members::Few(Vec::new())
    }
}

impl Members {
    /// The lowest member.
    fn first(&self) -> Option<u32> {
        match self {
            Members::Few(v) => v.first().copied(),
            Members::Many(t) => t.first().copied(),
        }
    }

    fn len(&self) -> usize {
        match self {
            Members::Few(v) => v.len(),
            Members::Many(t) => t.len(),
        }
    }

    fn insert(&mut self, id: u32) {
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

    fn remove(&mut self, id: u32) {
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
    fn ids(&self) -> Vec<u32> {
        match self {
            Members::Few(v) => v.clone(),
            Members::Many(t) => t.iter().copied().collect(),
        }
    }
}

impl RxSource {
    /// The tag [`LinkDecoder::set_source_tag`] gave this source (0: none).
    pub fn tag(&self) -> u64 {
        self.tag
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

    /// The current value of series `id` (a quiet source's counted repeats
    /// included, see `Lazy`).
    #[inline]
    pub fn value(&self, id: u32) -> Option<f64> {
        let s = self.series.get(id)?;
        if let Some((cur, enc)) = self.lazy_of(s.source, id).map(|l| (l.cur, l.encoding))
            && let Some(enc) = enc
        {
            return Some(enc.from_wire(cur));
        }
        Some(s.value)
    }

    /// The tag and encoding of series `id` as an update of it in a section
    /// of `source` finds them: from the source's record while a quiet
    /// source's repeats hold the series there (its own record is not read),
    /// else from the series' record.
    #[inline]
    pub fn update_key(&self, source: u32, id: u32) -> Option<(u64, Encoding)> {
        if let Some(l) = self.lazy_of(source, id)
            && let Some(enc) = l.encoding
        {
            return Some((l.tag, enc));
        }
        self.series.get(id).map(|s| (s.tag, s.encoding))
    }

    /// The series a quiet source `source`'s repeats hold (see `Lazy`),
    /// with its tag and encoding: what [`LinkDecoder::update_key`] answers
    /// for it, asked once for a whole section.
    #[inline]
    pub fn held_key(&self, source: u32) -> Option<(u32, u64, Encoding)> {
        let src = self.sources.get(source)?;
        let enc = src.lazy.encoding?;
        Some((*src.coding.last.first()?, src.lazy.tag, enc))
    }

    /// Source `source`'s [`Lazy`] state when it holds series `id`.
    #[inline]
    fn lazy_of(&self, source: u32, id: u32) -> Option<&Lazy> {
        let src = self.sources.get(source)?;
        (src.lazy.encoding.is_some() && src.coding.last.first() == Some(&id)).then_some(&src.lazy)
    }

    /// Applies the repeats counted on source `source` to its series'
    /// record and lets go of it (see [`Lazy`]): before anything else reads
    /// or writes that record or the source's coding state.
    pub(super) fn settle(&mut self, source: u32) {
        let Some(src) = self.sources.get_mut(source) else {
            return;
        };
        if src.lazy.encoding.is_none() {
            return;
        }
        let l = std::mem::take(&mut src.lazy);
        let walk = src.coding.walks;
        let Some(&id) = src.coding.last.first() else {
            return; // invariant: a held series is the one last changed
        };
        if l.pending == 0 {
            return;
        }
        if let Some(s) = self.series.get_mut(id) {
            let counter = s.encoding.is_counter();
            // The same steps as the eager path; only the last walk's mark
            // stays, and nothing else moved the walk count meanwhile.
            for _ in 0..l.pending {
                s.wire.repeat(walk, counter);
            }
            s.value = s.encoding.from_wire(s.wire.last);
        }
    }

    /// Series `id`'s record as the eager decoder holds it: a copy with the
    /// counted repeats applied (the tests compare it with the eager one's).
    #[cfg(test)]
    pub(crate) fn settled_series(&self, id: u32) -> Option<RxSeries> {
        let mut s = self.series.get(id)?.clone();
        if let Some(l) = self.lazy_of(s.source, id)
            && let Some(src) = self.sources.get(s.source)
        {
            let counter = s.encoding.is_counter();
            for _ in 0..l.pending {
                s.wire.repeat(src.coding.walks, counter);
            }
            s.value = s.encoding.from_wire(s.wire.last);
        }
        Some(s)
    }

    /// Source `id`'s record without its [`Lazy`] part (the eager decoder
    /// never has one).
    #[cfg(test)]
    pub(crate) fn source_without_lazy(&self, id: u32) -> Option<RxSource> {
        let mut s = self.sources.get(id)?.clone();
        s.lazy = Lazy::default();
        Some(s)
    }

    /// Repeats counted and not applied, over every source.
    #[cfg(test)]
    pub(crate) fn pending_repeats(&self) -> u64 {
        self.sources
            .iter()
            .map(|(_, s)| u64::from(s.lazy.pending))
            .sum()
    }

    /// [`LinkDecoder::settle`] for the source series `id` belongs to.
    pub(super) fn settle_series(&mut self, id: u32) {
        if let Some(src) = self.series.get(id).map(|s| s.source) {
            self.settle(src);
        }
    }

    /// [`LinkDecoder::settle`] for every source (before a keyframe, which
    /// touches every series).
    fn settle_all(&mut self) {
        let held: Vec<u32> = self
            .sources
            .iter()
            .filter(|(_, s)| s.lazy.encoding.is_some())
            .map(|(id, _)| id)
            .collect();
        for id in held {
            self.settle(id);
        }
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

    fn decode_inner(&mut self, payload: &[u8]) -> Result<RxFrame, CodecError> {
        let (tag, used) =
            get_uvarint(payload).ok_or_else(|| CodecError::Malformed("bad frame header".into()))?;
        let f = match tag & 3 {
            compact::MODE_ZSTD => self.unzstd(tag >> 2, &payload[used..])?,
            compact::MODE_COMPACT => {
                let check = compact::seq_check(tag);
                if check != self.next_seq & compact::SEQ_CHECK {
                    // Only the low bits travel: report the nearest sequence
                    // number that has them.
                    let got = (self.next_seq & !compact::SEQ_CHECK) | (check & compact::SEQ_CHECK);
                    return Err(CodecError::OutOfOrder {
                        expected: self.next_seq,
                        got,
                    });
                }
                if !self.started {
                    return Err(CodecError::NeedKeyframe);
                }
                return self.apply_compact(tag, &payload[used..], payload.len());
            }
            _ => return Err(CodecError::Malformed("unknown payload mode".into())),
        };
        // The sections are read in place from the decompressed bytes.
        let raw = std::mem::take(&mut self.raw);
        let at = std::mem::take(&mut self.section_at);
        let r = self.apply_frame(f.0, f.1, &raw, &at);
        self.raw = raw;
        self.section_at = at;
        super::release_oversized(&mut self.raw);
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

    /// Applies a compact payload body (packed sections only, straight from
    /// the payload: no protobuf frame, no copies of the packed bytes).
    fn apply_compact(
        &mut self,
        tag: u64,
        body: &[u8],
        raw_bytes: usize,
    ) -> Result<RxFrame, CodecError> {
        // One vector per frame (not a copy of every section's bytes).
        let mut secs = Vec::new();
        compact::parse(tag, body, self.last_delta, &mut secs).and_then(|ts_delta| {
            let ts = self.last_ts.wrapping_add(ts_delta);
            let mut out = RxFrame {
                seq: self.next_seq,
                ts_ms: ts,
                raw_bytes,
                sections: std::mem::take(&mut self.spare_sections),
                ..RxFrame::default()
            };
            for (i, s) in secs.iter().enumerate() {
                if i % WARM_AHEAD == 0 {
                    let ahead = &secs[i..secs.len().min(i + WARM_AHEAD)];
                    self.warm(ahead.iter().map(|s| s.source));
                }
                let mut rs = self.open_section(s.source, ts.wrapping_add(s.ts_offset_ms), 0)?;
                if s.repeat {
                    self.apply_repeat(s.packed, s.source, &mut rs)?;
                } else if !s.packed.is_empty() {
                    self.apply_packed(s.packed, s.source, &mut rs)?;
                }
                out.sections.push(rs);
            }
            self.last_delta = ts_delta;
            self.next_seq += 1;
            self.last_ts = ts;
            Ok(out)
        })
    }

    /// Decompresses a zstd-mode payload of `claimed` bytes into `raw`, cuts
    /// out its sections (into `section_at`) and decodes the rest into a
    /// `Frame` without sections. Returns it and the decompressed size.
    fn unzstd(&mut self, claimed: u64, zbytes: &[u8]) -> Result<(pb::Frame, usize), CodecError> {
        if claimed > self.cfg.max_frame_bytes as u64 {
            return Err(CodecError::FrameTooLarge {
                max: self.cfg.max_frame_bytes,
            });
        }
        // zstd gets room for one byte more than the header claims (a longer
        // frame is refused without inflating further), not the whole cap:
        // the output buffer is zero-filled as it is exposed, and a steady
        // frame is a few KiB.
        let limit = usize::try_from(claimed)
            .unwrap_or(usize::MAX)
            .saturating_add(1)
            .min(self.cfg.max_frame_bytes);
        self.z.decompress_frame(zbytes, &mut self.raw, limit)?;
        if self.raw.len() as u64 != claimed {
            return Err(CodecError::Malformed(format!(
                "frame decompressed to {} bytes, header says {claimed}",
                self.raw.len()
            )));
        }
        pbview::split_frame(&self.raw, &mut self.section_at, &mut self.rest)?;
        let f = pb::Frame::decode(self.rest.as_slice())
            .map_err(|e| CodecError::Malformed(e.to_string()));
        super::release_oversized(&mut self.rest);
        f.map(|f| (f, self.raw.len()))
    }

    /// Checks and applies one parsed frame; `raw_bytes`: its decoded size;
    /// its sections are `raw[a..b]` for each `(a, b)` of `sections`.
    fn apply_frame(
        &mut self,
        f: pb::Frame,
        raw_bytes: usize,
        raw: &[u8],
        sections: &[(usize, usize)],
    ) -> Result<RxFrame, CodecError> {
        if f.seq != self.next_seq {
            return Err(CodecError::OutOfOrder {
                expected: self.next_seq,
                got: f.seq,
            });
        }
        if !self.started && !f.keyframe {
            return Err(CodecError::NeedKeyframe);
        }
        if f.keyframe && f.format != super::FORMAT {
            return Err(CodecError::Format {
                got: f.format,
                want: super::FORMAT,
            });
        }
        let ts = self.last_ts.wrapping_add(f.ts_delta_ms);
        let mut out = RxFrame {
            seq: f.seq,
            ts_ms: ts,
            keyframe: f.keyframe,
            raw_bytes,
            sections: std::mem::take(&mut self.spare_sections),
            ..RxFrame::default()
        };
        out.sections.reserve(sections.len());
        for s in f.sources {
            let id = s.id;
            self.define_source(s)?;
            out.new_sources.push(id);
        }
        for d in f.series {
            let id = d.id;
            self.define_series(d)?;
            out.new_series.push(id);
        }
        if f.keyframe {
            self.settle_all();
            for s in self.series.values_mut() {
                s.wire.known = false;
            }
        }
        let mut seen_in_keyframe: Vec<u32> = Vec::new();
        for (i, &(a, b)) in sections.iter().enumerate() {
            if i % WARM_AHEAD == 0 && !f.keyframe {
                let ahead = &sections[i..sections.len().min(i + WARM_AHEAD)];
                self.warm(
                    ahead
                        .iter()
                        .filter_map(|&(a, b)| raw.get(a..b).and_then(pbview::peek_source)),
                );
            }
            let rs = self.apply_section(&raw[a..b], ts, f.keyframe)?;
            if f.keyframe {
                seen_in_keyframe.extend(rs.updates.iter().map(|u| u.0));
            }
            out.sections.push(rs);
        }
        if f.keyframe {
            // A keyframe is the whole state: what it omits is gone.
            seen_in_keyframe.sort_unstable();
            let stale: Vec<u32> = self
                .series
                .ids()
                .filter(|k| seen_in_keyframe.binary_search(k).is_err())
                .collect();
            for id in stale {
                if let Some(s) = self.remove_series(id) {
                    out.retired.push((id, s));
                }
            }
        }
        for id in f.retired_sources {
            self.settle(id);
            let s = self
                .sources
                .remove(id)
                .ok_or(CodecError::UnknownSource { id })?;
            out.retired_sources.push((id, s));
        }
        self.last_delta = if self.started { f.ts_delta_ms } else { 0 };
        self.next_seq += 1;
        self.last_ts = ts;
        self.started = true;
        Ok(out)
    }

    fn remove_series(&mut self, id: u32) -> Option<RxSeries> {
        self.settle_series(id);
        let s = self.series.remove(id)?;
        if let Some(src) = self.sources.get_mut(s.source) {
            src.members.remove(id);
        }
        Some(s)
    }

    fn define_source(&mut self, s: pb::SourceDef) -> Result<(), CodecError> {
        if s.name.len() > self.cfg.max_label_bytes {
            return Err(CodecError::BadDefinition {
                id: s.id,
                why: "source name too long",
            });
        }
        if !self.sources.contains(s.id) && self.sources.len() >= self.cfg.max_sources {
            return Err(CodecError::TooManySources {
                max: self.cfg.max_sources,
            });
        }
        if !self.sources.in_range(s.id) {
            return Err(CodecError::BadDefinition {
                id: s.id,
                why: "source id beyond twice the link's source cap",
            });
        }
        // A redefinition keeps the source's latest timestamp, coding and
        // members.
        match self.sources.get_mut(s.id) {
            Some(x) => {
                x.name = s.name;
                x.tick_ms = s.tick_ms;
                x.tag = 0;
            }
            None => {
                let src = RxSource {
                    last_ts_ms: 0,
                    tag: 0,
                    coding: SourceCoding::default(),
                    tick_ms: s.tick_ms,
                    lazy: Lazy::default(),
                    members: Members::default(),
                    name: s.name,
                };
                // Invariant: `in_range` held just above.
                let _ = self.sources.insert(s.id, src);
            }
        }
        Ok(())
    }

    fn define_series(&mut self, d: pb::SeriesDef) -> Result<(), CodecError> {
        let id = d.id;
        let bad = |why| CodecError::BadDefinition { id, why };
        if !self.sources.contains(d.source) {
            return Err(CodecError::UnknownSource { id: d.source });
        }
        let bytes: usize = d.labels.iter().map(|l| l.name.len() + l.value.len()).sum();
        if bytes > self.cfg.max_label_bytes || d.labels.len() > 64 {
            return Err(bad("labels too large"));
        }
        let encoding = match pb::Encoding::try_from(d.encoding) {
            Ok(pb::Encoding::Gauge) if d.mantissa_bits <= 52 => Encoding::Gauge {
                mantissa_bits: d.mantissa_bits as u8,
            },
            Ok(pb::Encoding::GaugeLog) if (1..=500_000_000).contains(&d.epsilon_ppb) => {
                Encoding::LogGauge { ppb: d.epsilon_ppb }
            }
            Ok(pb::Encoding::GaugeInt) => Encoding::GaugeInt,
            Ok(pb::Encoding::CounterInt) => Encoding::CounterInt,
            Ok(pb::Encoding::CounterFloat) if d.scale > 0 => {
                Encoding::CounterFloat { scale: d.scale }
            }
            _ => return Err(bad("invalid encoding")),
        };
        if !self.series.contains(id) && self.series.len() >= self.cfg.max_series {
            return Err(CodecError::TooManySeries {
                max: self.cfg.max_series,
            });
        }
        if !self.series.in_range(id) {
            return Err(bad("series id beyond twice the link's series cap"));
        }
        let labels = if d.labels.is_empty() {
            // A new encoding for a series the link holds: labels unchanged.
            match self.series.get(id) {
                Some(s) if s.source == d.source => s.labels.clone(),
                _ => return Err(bad("redefinition without labels of an unknown series")),
            }
        } else {
            Labels::from_pairs(d.labels.into_iter().map(|l| (l.name, l.value)))
        };
        // Its source lets go of it first (the definition resets its wire
        // state and tag).
        self.settle_series(id);
        let value = self.series.get(id).map_or(f64::NAN, |s| s.value);
        if let Some(old) = self.series.get(id).map(|s| s.source)
            && let Some(src) = self.sources.get_mut(old)
        {
            src.members.remove(id);
        }
        let mut walks = 0;
        if let Some(src) = self.sources.get_mut(d.source) {
            walks = src.coding.walks;
            src.members.insert(id);
        }
        let s = RxSeries {
            labels,
            source: d.source,
            encoding,
            value,
            wire: WireState::defined(walks),
            tag: 0,
        };
        // Invariant: `in_range` held just above.
        let _ = self.series.insert(id, s);
        Ok(())
    }
}

mod sections;

#[cfg(test)]
mod layout_tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    /// A source's record is three aligned cache lines, what every
    /// section reads (timestamp, tag, coding with its inline ids) is in the
    /// first, and what a lazy repeat reads besides in the second.
    #[test]
    fn a_source_record_is_three_lines_its_hot_parts_in_the_first_two() {
        assert_eq!(std::mem::size_of::<RxSource>(), 192);
        assert_eq!(std::mem::align_of::<RxSource>(), 64);
        assert!(std::mem::offset_of!(RxSource, coding) + std::mem::size_of::<SourceCoding>() <= 64);
        let lazy = std::mem::offset_of!(RxSource, lazy);
        assert!(lazy >= 64 && lazy + std::mem::size_of::<Lazy>() <= 128);
    }

    proptest! {
        /// Members answer as an ordered set would, in the vector form and
        /// (`big`: started past its bound) the tree form.
        #[test]
        fn members_act_as_an_ordered_set(big in any::<bool>(), ops in prop::collection::vec((any::<bool>(), 0u32..6000), 0..600)) {
            let mut m = Members::default();
            let mut want = BTreeSet::new();
            if big {
                for id in 10_000..10_000 + MEMBERS_VEC_MAX as u32 + 1 {
                    m.insert(id);
                    want.insert(id);
                }
                prop_assert!(matches!(m, Members::Many(_)));
            }
            for (add, id) in ops {
                if add {
                    m.insert(id);
                    want.insert(id);
                } else {
                    m.remove(id);
                    want.remove(&id);
                }
                prop_assert_eq!(m.len(), want.len());
                prop_assert_eq!(m.first(), want.first().copied());
            }
            let got = m.ids();
            prop_assert_eq!(got, want.into_iter().collect::<Vec<_>>());
        }
    }

    /// Past the vector's bound the members become a tree, in order.
    #[test]
    fn many_members_become_a_tree() {
        let mut m = Members::default();
        // Descending: every insert lands at the front.
        for id in (0..=MEMBERS_VEC_MAX as u32).rev() {
            m.insert(id);
        }
        assert!(matches!(m, Members::Many(_)));
        assert_eq!(m.len(), MEMBERS_VEC_MAX + 1);
        assert_eq!(m.ids(), (0..=MEMBERS_VEC_MAX as u32).collect::<Vec<_>>());
    }
}

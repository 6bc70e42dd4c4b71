//! The sending half of one link: changesets in, records out.
//!
//! Per link it keeps what the receiver holds (each series' prediction state,
//! see `packed`), the shared coding statistics, the sequence number, and the
//! zstd stream. Keyframes carry absolute wire values in the id/value columns
//! (same layout every time, so zstd matches them against the previous one);
//! delta frames range-code, per source, which series changed (a flag per
//! series, or the changed ids alone when few changed) and the residual of
//! each change against its predictor (`packed`).

use std::collections::HashMap;

use prost::Message;

use crate::schema::frame as pb;

use super::compact;
use super::idhash::ValueHashState as IdHashState;
use super::packed::{LinkModel, SPARSE_COUNT, SPARSE_FIRST, SPARSE_GAP, SourceCoding, WireState};
use super::quantise::Encoding;
use super::rangecoder::RangeEncoder;
use super::record::write_record;
use super::table::{Changeset, SeriesTable};
use super::zstream::ZEncoder;
use super::{CodecConfig, CodecError};

/// Encodes one link's frames.
#[derive(Debug)]
pub struct LinkEncoder {
    cfg: CodecConfig,
    z: ZEncoder,
    seq: u64,
    last_ts: i64,
    /// Previous frame's timestamp delta (0 after the first frame).
    last_delta: i64,
    last_keyframe_ts: Option<i64>,
    force_keyframe: bool,
    state: Vec<WireState>,
    /// Per id, the wire value its last keyframe column carried (0: none;
    /// see [`WireState::encode_column`]): apart from `state`, which every
    /// delta tick walks.
    kf: Vec<i64>,
    model: LinkModel,
    scratch: Vec<u8>,
    frame: pb::Frame,
    /// Live series handles by source, rebuilt per frame (reused buffers).
    /// The series the receiver holds per source on this link, ascending:
    /// the walk of a packed section. Mirrors the decoder's lists exactly
    /// (joined by definitions, left by retirements, reset by keyframes).
    /// A sorted vector, not a tree: walked in full by every dense
    /// section, and changed only when a series joins or leaves.
    members: HashMap<u32, Vec<u32>, IdHashState>,
    /// Source of each member id, indexed by id (ids are this sender's
    /// table handles: dense and bounded by its capacity). A vector, not a
    /// map: a looked-up id per changed value, and a third of the memory.
    member_of: MemberOf,
    /// Hash of the labels each member id was last defined with, by id.
    labels_sent: Vec<Option<u64>>,
    /// Per source, the packed-section state both ends keep alike.
    coding: HashMap<u32, SourceCoding, IdHashState>,
    /// Packed sections coded so far, (dense, sparse).
    forms: (u64, u64),
    /// Repeat sections sent so far (format 3: no range-coded bits).
    repeats: u64,
    /// Scratch of a delta frame's sections (reused: no allocation per
    /// section): updates sorted by id, those in columns, those packed.
    sorted: Vec<(u32, f64)>,
    rest: Vec<(u32, f64)>,
    /// Changes coded packed: (id, wire value, is a counter).
    coded: Vec<(u32, i64, bool)>,
    /// Packed-byte buffers of the previous frame's sections, reused by the
    /// next ones (a fresh buffer grew by doubling, a few reallocations a
    /// section every tick). At most [`SPARE_PACKED`], none oversized.
    spare_packed: Vec<Vec<u8>>,
}

/// Most packed-byte buffers a link keeps for reuse.
const SPARE_PACKED: usize = 16;

/// A packed section lists its changed members sparsely when at most one in
/// this many members changed. A flag per member costs little in bits when
/// changes are regular (the age contexts learn them), so the dense form
/// stays for busy sources (the wire-cost trace: 75,637 bytes, 11 more than
/// with flags only, 0.2486 B/sample either way); the sparse form makes a
/// mostly quiet source cost its receivers O(changes) instead of O(members),
/// and costs fewer bytes there too (fabric-sim, 1 % of nodes sampling:
/// 57 -> 42 B/s per link).
const SPARSE_RATIO: usize = 8;

impl LinkEncoder {
    /// A new link: its first frame will be a keyframe with every definition.
    pub fn new(cfg: &CodecConfig) -> Result<Self, CodecError> {
        Ok(Self {
            cfg: cfg.clone(),
            z: ZEncoder::new(cfg.zstd_level, cfg.window_log)?,
            seq: 0,
            last_ts: 0,
            last_delta: 0,
            last_keyframe_ts: None,
            force_keyframe: false,
            state: Vec::new(),
            kf: Vec::new(),
            model: LinkModel::default(),
            scratch: Vec::new(),
            frame: pb::Frame::default(),
            members: HashMap::default(),
            member_of: MemberOf::default(),
            labels_sent: Vec::new(),
            coding: HashMap::default(),
            forms: (0, 0),
            repeats: 0,
            sorted: Vec::new(),
            rest: Vec::new(),
            coded: Vec::new(),
            spare_packed: Vec::new(),
        })
    }

    /// Makes the next frame a keyframe (the receiver asked to resync).
    pub fn request_keyframe(&mut self) {
        self.force_keyframe = true;
    }

    /// Packed sections this link coded so far, (dense, sparse): which form
    /// the encoder picked (self-telemetry, tests).
    pub fn packed_forms(&self) -> (u64, u64) {
        self.forms
    }

    /// Sections this link sent as repeats (the same members as the
    /// source's previous packed section, each by its last increment):
    /// self-telemetry, tests.
    pub fn repeat_sections(&self) -> u64 {
        self.repeats
    }

    /// Sequence number the next frame will carry.
    pub fn next_seq(&self) -> u64 {
        self.seq
    }

    /// Encodes one tick and appends the record (length prefix included) to
    /// `out`. `table` must already hold this tick's values.
    pub fn encode(
        &mut self,
        table: &SeriesTable,
        cs: &Changeset,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        let first = self.last_keyframe_ts.is_none();
        let keyframe = first
            || self.force_keyframe
            || self
                .last_keyframe_ts
                .is_some_and(|k| cs.ts_ms.saturating_sub(k) >= self.cfg.keyframe_interval_ms);
        if self.state.len() < table.capacity() {
            self.state.resize(table.capacity(), WireState::default());
            self.kf.resize(table.capacity(), 0);
        }
        let mut f = std::mem::take(&mut self.frame);
        for sec in &mut f.sections {
            let mut b = std::mem::take(&mut sec.packed);
            super::release_oversized(&mut b);
            if b.capacity() > 0 && self.spare_packed.len() < SPARE_PACKED {
                self.spare_packed.push(b);
            }
        }
        clear_frame(&mut f);
        f.seq = self.seq;
        f.ts_delta_ms = cs.ts_ms.wrapping_sub(self.last_ts);
        f.keyframe = keyframe;
        f.format = if keyframe { super::FORMAT } else { 0 };

        // Definitions: everything on a new link, else what changed.
        if first {
            for (h, s) in table.sources() {
                f.sources.push(source_def(h, s));
            }
            for (h, _) in table.iter() {
                f.series.push(series_def(table, h));
            }
        } else {
            for &h in &cs.new_sources {
                if let Some(s) = table.source(h) {
                    f.sources.push(source_def(h, s));
                }
            }
            for &h in &cs.defs {
                if let Some(e) = table.get(h) {
                    let mut d = series_def(table, h);
                    if self.member_of.get(h) == Some(e.source)
                        && by_id(&self.labels_sent, h) == Some(labels_hash(&e.labels))
                    {
                        // The receiver holds this series: a new encoding
                        // only (a counter turned float, a gauge left the
                        // integers). Its labels stay.
                        d.labels.clear();
                    }
                    f.series.push(d);
                }
            }
        }
        for d in &f.series {
            if !d.labels.is_empty()
                && let Some(e) = table.get(d.id)
            {
                *slot(&mut self.labels_sent, d.id) = Some(labels_hash(&e.labels));
            }
        }
        for d in &f.series {
            // A (re)definition starts the series afresh on both ends.
            let walks = self.coding.get(&d.source).map_or(0, |c| c.walks);
            self.state[d.id as usize] = WireState::defined(walks);
            self.kf[d.id as usize] = 0;
            self.join(d.id, d.source);
        }

        if keyframe {
            for st in &mut self.state {
                st.known = false;
            }
            self.keyframe_sections(table, cs, &mut f)?;
            self.last_keyframe_ts = Some(cs.ts_ms);
            self.force_keyframe = false;
        } else {
            let mut sorted = std::mem::take(&mut self.sorted);
            for sec in &cs.sections {
                // Ascending ids, each once (the usual case): as they are.
                let updates: &[(u32, f64)] = if sec.updates.windows(2).all(|w| w[0].0 < w[1].0) {
                    &sec.updates
                } else {
                    sorted.clear();
                    sorted.extend_from_slice(&sec.updates);
                    // Stable, then keep the last of duplicates: the value
                    // the table (and a later keyframe) holds.
                    sorted.sort_by_key(|u| u.0);
                    sorted.reverse();
                    sorted.dedup_by_key(|u| u.0);
                    sorted.reverse();
                    &sorted
                };
                let ps = self.packed_section(table, sec.source, sec.ts_ms - cs.ts_ms, updates);
                let mut ps = match ps {
                    Ok(ps) => ps,
                    Err(e) => {
                        self.sorted = sorted;
                        return Err(e);
                    }
                };
                for &h in &sec.retired {
                    if self.leave(h) {
                        ps.retired.push(h);
                    }
                }
                f.sections.push(ps);
            }
            self.sorted = sorted;
        }
        if !first {
            f.retired_sources.extend_from_slice(&cs.retired_sources);
            for h in &cs.retired_sources {
                self.coding.remove(h);
            }
        }

        let mut z = Vec::new();
        if compact::fits(&f) {
            // Packed sections only: range-coded bytes zstd cannot shrink.
            compact::write(&f, self.last_delta, &mut z);
        } else {
            self.scratch.clear();
            f.encode(&mut self.scratch)
                .map_err(|e| CodecError::Malformed(e.to_string()))?;
            // Payload: the frame's decompressed length, then its zstd block.
            // The receiver checks the length exactly (truncation) and against
            // its cap before decompressing (bombs).
            z.reserve(self.scratch.len() / 2 + 16);
            put_uvarint(
                &mut z,
                ((self.scratch.len() as u64) << 2) | compact::MODE_ZSTD,
            );
            self.z.compress_frame(&self.scratch, &mut z)?;
            super::release_oversized(&mut self.scratch);
        }
        write_record(out, &z);
        self.last_delta = if first { 0 } else { f.ts_delta_ms };
        self.seq += 1;
        self.last_ts = cs.ts_ms;
        self.frame = f;
        Ok(())
    }

    /// Full state: every series of the table, per source, absolute. Series
    /// the changeset retires that the keyframe still carries (a relay keeps
    /// a series retired this tick until the tick ends) are retired right
    /// after; what the keyframe omits, the receiver drops by omission.
    fn keyframe_sections(
        &mut self,
        table: &SeriesTable,
        cs: &Changeset,
        f: &mut pb::Frame,
    ) -> Result<(), CodecError> {
        self.members.clear();
        self.member_of.clear();
        let mut by_source: Vec<Vec<(u32, f64)>> = Vec::new();
        for (h, s) in table.iter() {
            let i = s.source as usize;
            if by_source.len() <= i {
                by_source.resize_with(i + 1, Vec::new);
            }
            by_source[i].push((h, s.value));
            self.join(h, s.source);
        }
        for (sh, src) in table.sources() {
            let ts = cs
                .sections
                .iter()
                .find(|s| s.source == sh)
                .map_or(src.last_ts_ms, |s| s.ts_ms);
            // Older sections of this tick (a relay's source that ticked
            // twice since its last frame) go first with their own values:
            // the full state below carries only the newest ones.
            let mut older: Vec<&super::table::ChangeSection> = cs
                .sections
                .iter()
                .filter(|s| s.source == sh && s.ts_ms < ts && !s.updates.is_empty())
                .collect();
            older.sort_by_key(|s| s.ts_ms);
            for sec in older {
                let mut ups: Vec<(u32, f64)> = sec
                    .updates
                    .iter()
                    .copied()
                    .filter(|u| table.get(u.0).is_some_and(|e| e.source == sh))
                    .collect();
                // Ascending ids, the last of duplicates kept.
                ups.reverse();
                ups.sort_by_key(|u| u.0);
                ups.dedup_by_key(|u| u.0);
                if !ups.is_empty() {
                    let ps = self.section(table, sh, sec.ts_ms - cs.ts_ms, &ups, true)?;
                    f.sections.push(ps);
                    // The receiver restarts each keyframe column afresh.
                    for &(h, _) in &ups {
                        if let Some(st) = self.state.get_mut(h as usize) {
                            st.known = false;
                        }
                    }
                }
            }
            let empty = Vec::new();
            let ups = by_source.get(sh as usize).unwrap_or(&empty);
            let mut ps = self.section(table, sh, ts - cs.ts_ms, ups, true)?;
            for sec in cs.sections.iter().filter(|s| s.source == sh) {
                for &h in &sec.retired {
                    if self.leave(h) {
                        ps.retired.push(h);
                    }
                }
            }
            f.sections.push(ps);
        }
        Ok(())
    }

    /// Series `id` of `source` is now held by the receiver.
    fn join(&mut self, id: u32, source: u32) {
        if let Some(old) = self.member_of.replace(id, source)
            && let Some(m) = self.members.get_mut(&old)
        {
            remove_sorted(m, id);
        }
        insert_sorted(self.members.entry(source).or_default(), id);
    }

    /// The receiver forgets series `id`; false when it never held it.
    fn leave(&mut self, id: u32) -> bool {
        if let Some(l) = self.labels_sent.get_mut(id as usize) {
            *l = None;
        }
        let Some(source) = self.member_of.take(id) else {
            return false;
        };
        if let Some(m) = self.members.get_mut(&source) {
            remove_sorted(m, id);
        }
        if let Some(st) = self.state.get_mut(id as usize) {
            st.known = false;
        }
        if let Some(kf) = self.kf.get_mut(id as usize) {
            *kf = 0;
        }
        true
    }

    /// A delta section: changes of the source's own series range-coded in
    /// `packed`, anything else (specials, foreign series) in the columns.
    /// `updates` ascend by id. Sparse form: O(updates); dense: O(members),
    /// only when at least 1/[`SPARSE_RATIO`] of them changed.
    fn packed_section(
        &mut self,
        table: &SeriesTable,
        source: u32,
        ts_offset_ms: i64,
        updates: &[(u32, f64)],
    ) -> Result<pb::Section, CodecError> {
        let mut rest = std::mem::take(&mut self.rest);
        let mut coded = std::mem::take(&mut self.coded);
        rest.clear();
        coded.clear();
        let r = self.packed_section_in(table, source, ts_offset_ms, updates, &mut rest, &mut coded);
        self.rest = rest;
        self.coded = coded;
        r
    }

    /// [`LinkEncoder::packed_section`] with its scratch vectors.
    fn packed_section_in(
        &mut self,
        table: &SeriesTable,
        source: u32,
        ts_offset_ms: i64,
        updates: &[(u32, f64)],
        rest: &mut Vec<(u32, f64)>,
        coded: &mut Vec<(u32, i64, bool)>,
    ) -> Result<pb::Section, CodecError> {
        for &(h, v) in updates {
            if self.member_of.get(h) != Some(source) {
                rest.push((h, v));
                continue;
            }
            let enc = table.get(h).map(|e| e.encoding);
            match enc.and_then(|e| e.to_wire(v).map(|w| (w, e.is_counter()))) {
                Some((w, counter)) => coded.push((h, w, counter)),
                None => rest.push((h, v)),
            }
        }
        let mut s = self.section(table, source, ts_offset_ms, rest, false)?;
        if coded.is_empty() {
            return Ok(s);
        }
        let coding = self.coding.entry(source).or_default();
        coding.walks = coding.walks.wrapping_add(1);
        let walk = coding.walks;
        // Format 3: the members of the source's previous packed section,
        // each changed by its last increment again (a quiet node's tick
        // counter), go as a bare repeat: no range-coded bits, and every
        // receiver applies it without reading a model.
        let state = &self.state;
        let repeat = coding.last.len() == coded.len()
            && coded
                .iter()
                .zip(&coding.last)
                .all(|(&(h, w, _), &l)| h == l && state[h as usize].repeats(w));
        if repeat {
            self.repeats += 1;
            for &(h, _, counter) in coded.iter() {
                self.state[h as usize].repeat(walk, counter);
            }
            s.repeat = true;
            return Ok(s);
        }
        coding.last.clear();
        coding.last.extend(coded.iter().map(|c| c.0));
        let members = self.members.get(&source).map_or(0, Vec::len);
        let sparse = coded.len() * SPARSE_RATIO <= members;
        let buf = self.spare_packed.pop().unwrap_or_default();
        let mut e = RangeEncoder::new(buf);
        self.model.start_section(walk);
        self.model.put_sparse(&mut e, sparse);
        if sparse {
            self.forms.1 += 1;
            self.model
                .put_sparse_u(&mut e, SPARSE_COUNT, coded.len() as u64 - 1);
            let first = coded[0].0;
            let d = i64::from(first) - i64::from(coding.first);
            coding.first = first;
            self.model.put_sparse_u(&mut e, SPARSE_FIRST, zigzag(d));
            let mut prev = None;
            for &(h, w, counter) in coded.iter() {
                if let Some(p) = prev {
                    self.model
                        .put_sparse_u(&mut e, SPARSE_GAP, u64::from(h - p - 1));
                }
                prev = Some(h);
                self.put_member_value(&mut e, h, w, counter, walk);
            }
        } else {
            self.forms.0 += 1;
            // Walked in place: no copy of the member list per section.
            // Every member gets a flag, in the table or not (a series
            // retired in this very section): the receiver walks them all.
            let members = self.members.get(&source).map_or(&[][..], Vec::as_slice);
            self.model
                .put_dense(&mut e, &mut self.state, members, coded);
        }
        s.packed = e.finish();
        debug_assert!(!s.packed.is_empty(), "a coded change is never empty");
        Ok(s)
    }

    /// What series `h` predicts from in walk `walk`: its twin's value and
    /// whether the twin changed in that walk.
    fn peer(&self, h: u32, walk: u32) -> Option<(i64, bool)> {
        self.state[h as usize]
            .twin()
            .and_then(|t| self.state.get(t as usize))
            .and_then(|t| t.as_peer(walk))
    }

    /// Codes the value of member `h` in a sparse section (no flag: listed).
    fn put_member_value(&mut self, e: &mut RangeEncoder, h: u32, w: i64, counter: bool, walk: u32) {
        let peer = self.peer(h, walk);
        let st = &mut self.state[h as usize];
        self.model.mark_changed(st);
        self.model
            .put_value(e, (h, st), w, counter, peer.map(|p| p.0));
    }

    /// A section of columns; `keyframe`: its values are a keyframe's.
    fn section(
        &mut self,
        table: &SeriesTable,
        source: u32,
        ts_offset_ms: i64,
        updates: &[(u32, f64)],
        keyframe: bool,
    ) -> Result<pb::Section, CodecError> {
        let mut s = pb::Section {
            source,
            ts_offset_ms,
            ..Default::default()
        };
        let mut prev: i64 = -1;
        for &(h, v) in updates {
            let Some(entry) = table.get(h) else {
                continue; // removed in this tick: its retirement says it all
            };
            let st = &mut self.state[h as usize];
            match entry.encoding.to_wire(v) {
                Some(w) => {
                    let gap = i64::from(h) - prev - 1;
                    prev = i64::from(h);
                    s.id_deltas.push(
                        i32::try_from(gap).map_err(|_| CodecError::TooManySeries { max: 0 })?,
                    );
                    let kf = &mut self.kf[h as usize];
                    s.value_deltas.push(st.encode_column(
                        w,
                        is_counter(entry.encoding),
                        keyframe,
                        kf,
                    ));
                }
                None => {
                    st.known = false;
                    s.special_ids.push(h);
                    s.special_bits.push(v.to_bits());
                }
            }
        }
        Ok(s)
    }
}

/// The source each member id belongs to, by id: a `u32` per id, with
/// [`MemberOf::NONE`] for "not a member" (4 bytes an id, not an
/// `Option<u32>`'s 8: looked up per changed value, issue 3). Source handles
/// are a table's slot indices, far below `u32::MAX`.
#[derive(Debug, Default)]
struct MemberOf(Vec<u32>);

impl MemberOf {
    const NONE: u32 = u32::MAX;

    /// The source of member `id`, if it is one.
    #[inline]
    fn get(&self, id: u32) -> Option<u32> {
        self.0
            .get(id as usize)
            .copied()
            .filter(|&s| s != Self::NONE)
    }

    /// Makes `id` a member of `source`; returns its previous source.
    fn replace(&mut self, id: u32, source: u32) -> Option<u32> {
        let i = id as usize;
        if self.0.len() <= i {
            self.0.resize(i + 1, Self::NONE);
        }
        let old = std::mem::replace(&mut self.0[i], source);
        (old != Self::NONE).then_some(old)
    }

    /// `id` is no member any more; returns the source it was one of.
    fn take(&mut self, id: u32) -> Option<u32> {
        let s = self.0.get_mut(id as usize)?;
        let old = std::mem::replace(s, Self::NONE);
        (old != Self::NONE).then_some(old)
    }

    /// No id is a member.
    fn clear(&mut self) {
        self.0.clear();
    }
}

/// Adds `id` to an ascending list (once); appending is the common case (a
/// keyframe joins series in id order).
fn insert_sorted(v: &mut Vec<u32>, id: u32) {
    match v.last() {
        None => v.push(id),
        Some(&l) if l < id => v.push(id),
        _ => {
            if let Err(i) = v.binary_search(&id) {
                v.insert(i, id);
            }
        }
    }
}

/// Removes `id` from an ascending list, if there.
fn remove_sorted(v: &mut Vec<u32>, id: u32) {
    if let Ok(i) = v.binary_search(&id) {
        v.remove(i);
    }
}

/// The entry of `id` in a by-id table, if any.
fn by_id<T: Copy>(v: &[Option<T>], id: u32) -> Option<T> {
    v.get(id as usize).copied().flatten()
}

/// The entry of `id` in a by-id table, the table grown to hold it.
fn slot<T>(v: &mut Vec<Option<T>>, id: u32) -> &mut Option<T> {
    let i = id as usize;
    if v.len() <= i {
        v.resize_with(i + 1, || None);
    }
    &mut v[i]
}

/// A fingerprint of a label set (64-bit SipHash with fixed keys).
fn labels_hash(l: &crate::model::Labels) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    for (n, v) in l.iter() {
        n.hash(&mut h);
        v.hash(&mut h);
    }
    h.finish()
}

/// Appends `n` as LEB128.
pub(crate) fn put_uvarint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Reads a LEB128 u64 from the front of `buf`: (value, bytes used).
pub(crate) fn get_uvarint(buf: &[u8]) -> Option<(u64, usize)> {
    let mut n: u64 = 0;
    for (i, &b) in buf.iter().enumerate().take(10) {
        n |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((n, i + 1));
        }
    }
    None
}

/// Zigzag: small magnitudes of either sign become small unsigned numbers.
fn zigzag(r: i64) -> u64 {
    super::packed::zigzag(r)
}

fn is_counter(e: Encoding) -> bool {
    e.is_counter()
}

fn clear_frame(f: &mut pb::Frame) {
    f.sources.clear();
    f.series.clear();
    f.sections.clear();
    f.retired_sources.clear();
}

fn source_def(h: u32, s: &super::table::SourceEntry) -> pb::SourceDef {
    pb::SourceDef {
        id: h,
        name: s.name.clone(),
        tick_ms: s.tick_ms,
    }
}

fn series_def(table: &SeriesTable, h: u32) -> pb::SeriesDef {
    // Callers pass only live handles.
    let Some(s) = table.get(h) else {
        return pb::SeriesDef::default();
    };
    let (encoding, mantissa_bits, scale, epsilon_ppb) = match s.encoding {
        Encoding::Gauge { mantissa_bits } => (pb::Encoding::Gauge, u32::from(mantissa_bits), 0, 0),
        Encoding::LogGauge { ppb } => (pb::Encoding::GaugeLog, 0, 0, ppb),
        Encoding::GaugeInt => (pb::Encoding::GaugeInt, 0, 0, 0),
        Encoding::CounterInt => (pb::Encoding::CounterInt, 0, 0, 0),
        Encoding::CounterFloat { scale } => (pb::Encoding::CounterFloat, 0, scale, 0),
    };
    pb::SeriesDef {
        id: h,
        source: s.source,
        labels: s
            .labels
            .iter()
            .map(|(n, v)| pb::Label {
                name: n.to_string(),
                value: v.to_string(),
            })
            .collect(),
        encoding: encoding as i32,
        mantissa_bits,
        scale,
        epsilon_ppb,
    }
}

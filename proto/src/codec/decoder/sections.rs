//! Applying one section of a frame: a source's columns from a keyframe, a
//! packed delta section (dense flags or sparse gaps, range-coded), or a
//! repeat section (codec format 3: every last changed member again by its
//! last increment, no coded bits).

use super::super::packed::SourceCoding;
use super::super::packed::{SPARSE_COUNT, SPARSE_FIRST, SPARSE_GAP, unzigzag};
use super::super::pbview::{self, SectionView};
use super::super::rangecoder::RangeDecoder;
use super::*;
use super::{LAZY_MAX, Lazy, Members, WARM_AHEAD};

/// A source whose latest packed section changed at most this many series
/// has them all loaded ahead by [`LinkDecoder::warm`] (a quiet node: its
/// tick counter); a busier one its first.
const WARM_FEW: usize = 4;

impl LinkDecoder {
    /// Loads, ahead of the work, what the sections of sources `ids` will
    /// read first: each source's record, then the series its latest packed
    /// section changed (what a repeat section changes again; else its first
    /// member). These are independent loads in tight loops, so their cache
    /// misses overlap, where the section-by-section work would wait for
    /// each in turn (a gateway of 10,000 nodes finds few of them in cache:
    /// each node's section reaches it once a tick per path). Reads only;
    /// ids that name nothing are left to the checks of the real work.
    pub(super) fn warm(&self, ids: impl Iterator<Item = u32>) {
        let mut found = [u32::MAX; WARM_AHEAD];
        let mut n = 0;
        for id in ids.take(WARM_AHEAD) {
            if let Some(src) = self.sources.get(id) {
                std::hint::black_box(src.last_ts_ms);
                found[n] = id;
                n += 1;
            }
        }
        for &id in &found[..n] {
            let Some(src) = self.sources.get(id) else {
                continue;
            };
            if src.lazy.encoding.is_some() {
                // A repeat reads the source's second line, not the series.
                std::hint::black_box(src.lazy.cur);
                continue;
            }
            // A busy source's series are walked in id order, which the
            // hardware follows by itself: its first one is enough.
            let last = &src.coding.last;
            let few = if last.len() <= WARM_FEW {
                &last[..]
            } else {
                &last[..1]
            };
            if few.is_empty()
                && let Some(x) = src.members.first().and_then(|m| self.series.get(m))
            {
                std::hint::black_box((x.value, x.wire.last));
            }
            for &m in few {
                if let Some(x) = self.series.get(m) {
                    // Every field a repeat reads or writes, and the tag
                    // the merger reads: the record spans several lines.
                    std::hint::black_box((x.value, x.wire.last, x.wire.known, x.source, x.tag));
                }
            }
        }
    }

    /// A section of `source` at `ts`, with room for `updates` (the source
    /// must be known; its latest timestamp moves up to `ts`).
    pub(super) fn open_section(
        &mut self,
        source: u32,
        ts: i64,
        updates: usize,
    ) -> Result<RxSection, CodecError> {
        let src = self
            .sources
            .get_mut(source)
            .ok_or(CodecError::UnknownSource { id: source })?;
        src.last_ts_ms = src.last_ts_ms.max(ts);
        let mut v = self.spare.pop().unwrap_or_default();
        v.reserve(updates);
        Ok(RxSection {
            source,
            ts_ms: ts,
            updates: v,
            retired: Vec::new(),
        })
    }

    /// Reads and applies one section's protobuf bytes.
    pub(super) fn apply_section(
        &mut self,
        bytes: &[u8],
        frame_ts: i64,
        keyframe: bool,
    ) -> Result<RxSection, CodecError> {
        let mut cols = std::mem::take(&mut self.cols);
        let r = pbview::read_section(bytes, &mut cols)
            .and_then(|sec| self.apply_section_cols(sec, &cols, frame_ts, keyframe));
        self.cols = cols;
        r
    }

    pub(super) fn apply_section_cols(
        &mut self,
        sec: SectionView<'_>,
        cols: &Columns,
        frame_ts: i64,
        keyframe: bool,
    ) -> Result<RxSection, CodecError> {
        if cols.id_deltas.len() != cols.value_deltas.len()
            || cols.special_ids.len() != cols.special_bits.len()
        {
            return Err(CodecError::Malformed(
                "section column lengths differ".into(),
            ));
        }
        let ts = frame_ts.wrapping_add(sec.ts_offset_ms);
        let mut rs = self.open_section(
            sec.source,
            ts,
            cols.id_deltas.len() + cols.special_ids.len(),
        )?;
        if sec.repeat {
            if keyframe {
                return Err(CodecError::Malformed("repeat section in a keyframe".into()));
            }
            self.apply_repeat(sec.packed, sec.source, &mut rs)?;
        } else if !sec.packed.is_empty() {
            self.apply_packed(sec.packed, sec.source, &mut rs)?;
        }
        let mut prev: i64 = -1;
        for (gap, d) in cols.id_deltas.iter().zip(&cols.value_deltas) {
            let id64 = prev + 1 + i64::from(*gap);
            let id = u32::try_from(id64)
                .map_err(|_| CodecError::Malformed("series id out of range".into()))?;
            prev = id64;
            self.settle_series(id);
            let s = self
                .series
                .get_mut(id)
                .ok_or(CodecError::UnknownSeries { id })?;
            let w = s
                .wire
                .apply_column(*d, s.encoding.is_counter(), keyframe, &mut s.kf);
            s.value = s.encoding.from_wire(w);
            rs.updates.push((id, s.value));
        }
        for (id, bits) in cols.special_ids.iter().zip(&cols.special_bits) {
            self.settle_series(*id);
            let s = self
                .series
                .get_mut(*id)
                .ok_or(CodecError::UnknownSeries { id: *id })?;
            s.wire.known = false;
            s.value = f64::from_bits(*bits);
            rs.updates.push((*id, s.value));
        }
        for &id in &cols.retired {
            let s = self
                .remove_series(id)
                .ok_or(CodecError::UnknownSeries { id })?;
            rs.retired.push((id, s));
        }
        Ok(rs)
    }

    /// Applies a repeat section of `source` (format 3): the members of its
    /// previous packed section change again by their last increments. No
    /// bits to read: O(those members), no model touched. Refused when it
    /// carries packed bytes, comes before any packed section of its source,
    /// or names a member that is gone, moved or holds no value.
    pub(super) fn apply_repeat(
        &mut self,
        packed: &[u8],
        source: u32,
        rs: &mut RxSection,
    ) -> Result<(), CodecError> {
        let bad = |why: &str| CodecError::Malformed(format!("repeat section: {why}"));
        if !packed.is_empty() {
            return Err(bad("carries packed bytes"));
        }
        let lazy = self.lazy;
        match self.sources.get_mut(source) {
            Some(c) if lazy && c.lazy.pending < LAZY_MAX => {
                if let (Some(enc), Some(&id)) = (c.lazy.encoding, c.coding.last.first()) {
                    // Counted on the source (see `Lazy`): the series'
                    // record is not read.
                    c.coding.walks = c.coding.walks.wrapping_add(1);
                    c.lazy.pending += 1;
                    c.lazy.cur = c.lazy.cur.wrapping_add(c.lazy.inc);
                    rs.updates.push((id, enc.from_wire(c.lazy.cur)));
                    return Ok(());
                }
            }
            Some(_) => {}
            None => return Err(CodecError::UnknownSource { id: source }),
        }
        self.settle(source);
        let src = match self.sources.get_mut(source) {
            Some(c) if !c.coding.last.is_empty() => c,
            Some(_) => return Err(bad("no earlier packed section of its source")),
            None => return Err(CodecError::UnknownSource { id: source }),
        };
        let coding = &mut src.coding;
        coding.walks = coding.walks.wrapping_add(1);
        let walk = coding.walks;
        rs.updates.reserve(coding.last.len());
        let mut held = Lazy::default();
        for &id in &coding.last {
            let s = self
                .series
                .get_mut(id)
                .ok_or(CodecError::UnknownSeries { id })?;
            if s.source != source {
                return Err(bad("a member moved to another source"));
            }
            if !s.wire.known {
                return Err(bad("a member holds no value"));
            }
            let w = s.wire.repeat(walk, s.encoding.is_counter());
            s.value = s.encoding.from_wire(w);
            rs.updates.push((id, s.value));
            held = Lazy {
                pending: 0,
                cur: w,
                inc: s.wire.inc,
                tag: s.tag,
                encoding: Some(s.encoding),
            };
        }
        if lazy && coding.last.len() == 1 {
            // The next repeats of this one series are counted here.
            src.lazy = held;
        }
        Ok(())
    }

    /// Decodes a packed section of `source`: its form, then its changes.
    pub(super) fn apply_packed(
        &mut self,
        packed: &[u8],
        source: u32,
        rs: &mut RxSection,
    ) -> Result<(), CodecError> {
        self.settle(source);
        let mut d = RangeDecoder::new(packed);
        let src = self
            .sources
            .get_mut(source)
            .ok_or(CodecError::UnknownSource { id: source })?;
        let members = src.members.len() as u64;
        src.coding.walks = src.coding.walks.wrapping_add(1);
        self.model.start_section(src.coding.walks);
        if self.model.get_sparse(&mut d) {
            // The coding state is lent out of the source for the section
            // (the twins' sources are read beside it), then put back.
            let mut coding = std::mem::take(&mut src.coding);
            let mut sp = Sparse {
                model: &mut self.model,
                series: &mut self.series,
                sources: &self.sources,
                coding: &mut coding,
            };
            let r = sp.apply(&mut d, source, members, rs);
            if let Some(c) = self.sources.get_mut(source) {
                c.coding = coding;
            }
            r?;
        } else {
            // The members are walked in place (lent out of the source for
            // the walk, no copy), then put back.
            let walk = std::mem::take(&mut src.members);
            let r = self.apply_dense(&mut d, source, &walk, rs);
            if let Some(c) = self.sources.get_mut(source) {
                c.members = walk;
                // What a repeat of this source changes next (the sparse
                // form noted it already). `rs` held no update before this
                // section.
                c.coding.last.clear();
                c.coding.last.extend(rs.updates.iter().map(|u| u.0));
            }
            r?;
        }
        d.finish().map_err(|why| CodecError::Malformed(why.into()))
    }

    /// The twin of series `id` (in a packed section of `source`), as
    /// [`WireState::as_peer`] sees it.
    pub(super) fn peer(&self, source: u32, id: u32) -> Option<(i64, bool)> {
        let t = self.series.get(id).and_then(|s| s.wire.twin())?;
        twin_as_peer(&self.series, &self.sources, source, t, self.model.walk())
    }

    /// A dense packed section: a flag for every member of its source.
    pub(super) fn apply_dense(
        &mut self,
        d: &mut RangeDecoder<'_>,
        source: u32,
        members: &Members,
        rs: &mut RxSection,
    ) -> Result<(), CodecError> {
        match members {
            Members::Few(v) => self.walk_dense(d, source, v, rs),
            Members::Many(t) => {
                let v: Vec<u32> = t.iter().copied().collect();
                self.walk_dense(d, source, &v, rs)
            }
        }
    }

    /// [`LinkDecoder::apply_dense`] over the members `walk`, ascending.
    fn walk_dense(
        &mut self,
        d: &mut RangeDecoder<'_>,
        source: u32,
        walk: &[u32],
        rs: &mut RxSection,
    ) -> Result<(), CodecError> {
        for &id in walk {
            let peer = self.peer(source, id);
            let s = self
                .series
                .get_mut(id)
                .ok_or(CodecError::UnknownSeries { id })?;
            if self.model.get_flag(d, &mut s.wire, peer.map(|p| p.1)) {
                read_value(&mut self.model, d, id, s, peer, rs)?;
            }
            if d.overrun() {
                break;
            }
        }
        Ok(())
    }
}

/// A sparse packed section being read: the decoder's parts it touches,
/// borrowed apart so the source's coding state is looked up once per
/// section and a changed member once (twice when it has a twin).
struct Sparse<'a> {
    model: &'a mut LinkModel,
    series: &'a mut IdTable<RxSeries>,
    sources: &'a IdTable<RxSource>,
    coding: &'a mut SourceCoding,
}

/// Twin `t` as [`WireState::as_peer`] sees it in walk `walk` of source
/// `current` (settled before its packed section), repeats its own source
/// counted lazily included: a series twinned in one source may be
/// redefined into another, quiet one, whose repeats it is not settled for.
fn twin_as_peer(
    series: &IdTable<RxSeries>,
    sources: &IdTable<RxSource>,
    current: u32,
    t: u32,
    walk: u32,
) -> Option<(i64, bool)> {
    let ts = series.get(t)?;
    if ts.source != current
        && let Some(src) = sources.get(ts.source)
        && src.lazy.encoding.is_some()
        && src.coding.last.first() == Some(&t)
    {
        // Known (the invariant), at `cur`, last changed in the source's
        // latest walk.
        return Some((src.lazy.cur, src.coding.walks == walk));
    }
    ts.wire.as_peer(walk)
}

impl Sparse<'_> {
    /// The changed members' ids and values only, O(changes). The ids must
    /// be live series of `source`, strictly ascending (the gaps cannot say
    /// otherwise), at most `members`, as many as it has.
    fn apply(
        &mut self,
        d: &mut RangeDecoder<'_>,
        source: u32,
        members: u64,
        rs: &mut RxSection,
    ) -> Result<(), CodecError> {
        let bad = |why: &str| CodecError::Malformed(format!("sparse section: {why}"));
        let k = self
            .model
            .get_sparse_u(d, SPARSE_COUNT)
            .and_then(|n| n.checked_add(1))
            .ok_or_else(|| bad("bad count"))?;
        if k > members {
            return Err(bad("lists more members than its source has"));
        }
        let first = self
            .model
            .get_sparse_u(d, SPARSE_FIRST)
            .ok_or_else(|| bad("bad first id"))?;
        let id = i64::from(self.coding.first) + unzigzag(first);
        let mut id = u32::try_from(id).map_err(|_| bad("id out of range"))?;
        self.coding.first = id;
        let walk = self.model.walk();
        for i in 0..k {
            if i > 0 {
                let gap = self
                    .model
                    .get_sparse_u(d, SPARSE_GAP)
                    .ok_or_else(|| bad("bad id gap"))?;
                id = u64::from(id)
                    .checked_add(gap)
                    .and_then(|x| x.checked_add(1))
                    .and_then(|x| u32::try_from(x).ok())
                    .ok_or_else(|| bad("id out of range"))?;
            }
            let s = self
                .series
                .get_mut(id)
                .ok_or(CodecError::UnknownSeries { id })?;
            if s.source != source {
                return Err(bad("id of another source"));
            }
            match s.wire.twin() {
                None => {
                    self.model.mark_changed(&mut s.wire);
                    read_value(self.model, d, id, s, None, rs)?;
                }
                Some(t) => {
                    let peer = twin_as_peer(self.series, self.sources, source, t, walk);
                    let s = self
                        .series
                        .get_mut(id)
                        .ok_or(CodecError::UnknownSeries { id })?;
                    self.model.mark_changed(&mut s.wire);
                    read_value(self.model, d, id, s, peer, rs)?;
                }
            }
            if d.overrun() {
                break;
            }
        }
        // What a repeat of this source changes next. `rs` held no update
        // before this section.
        self.coding.last.clear();
        self.coding.last.extend(rs.updates.iter().map(|u| u.0));
        Ok(())
    }
}

/// Reads changed series `id`'s value (its twin `peer` as
/// [`LinkDecoder::peer`] gives it) into `s` and the section's updates: the
/// same for a dense and a sparse section.
fn read_value(
    model: &mut LinkModel,
    d: &mut RangeDecoder<'_>,
    id: u32,
    s: &mut RxSeries,
    peer: Option<(i64, bool)>,
    rs: &mut RxSection,
) -> Result<(), CodecError> {
    let counter = s.encoding.is_counter();
    let w = model
        .get_value(d, (id, &mut s.wire), counter, peer.map(|p| p.0))
        .ok_or_else(|| CodecError::Malformed("bad packed value length".into()))?;
    s.value = s.encoding.from_wire(w);
    rs.updates.push((id, s.value));
    Ok(())
}

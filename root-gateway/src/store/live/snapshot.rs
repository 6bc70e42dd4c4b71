//! Snapshot of a [`LiveStore`]: its whole state as framed records, written
//! and read as a stream (one record per source and per series), so neither
//! side holds more than the store itself plus one record.
//!
//! ```text
//! magic  "canopy-snapshot-v6" (or "-v5" .. "-v1": read, converted)
//! header 0x01 now_ms | rejected_series | out_of_order | sources_died | n_sources | n_series
//! source 0x02 name | tick_ms | n_alive | (start | end | closed)*
//! series 0x03 labels | source+1 (0 none) | n_sealed | sealed* | open
//! sealed      first_ts | last_ts - first_ts | count | bit_len | bit_len/8 bytes (rounded up)
//! open        0 | 1 + chunk state (the open chunk, with its encoder state)
//! end    0x04 n_sources | n_series
//! ```
//!
//! v5 had no `last_ts - first_ts` (a load decodes each sealed chunk for
//! it). Up to v3 a series record held `n_chunks | chunk state*`, each chunk with
//! its encoder state; a load keeps the last as the open chunk and only the
//! bits of the others.

use std::io::{self, Read, Write};
use std::sync::Arc;

use super::{Alive, Entry, LiveStore, LiveStoreConfig, Source, StoreStats};
use crate::store::chunk::{Chunk, ChunkView, Sealed};
use crate::store::codec::{
    CodecError, Cursor, put_str, put_uvarint, put_varint, read_frame, write_frame,
};
use crate::store::cold::{ColdFiles, ColdMaps};
use crate::store::mapped::MappedBuf;

/// v6: sealed chunks as bare runs with their last timestamps, the open
/// chunk with its state, in the chunk format with folded Rice codes.
const MAGIC: &[u8] = b"canopy-snapshot-v6";
/// v5 (the release before): the same without sealed chunks' last
/// timestamps (found on load by decoding each chunk).
const MAGIC_V5: &[u8] = b"canopy-snapshot-v5";
/// v4 (the release before): the same records in the chunk format with a
/// flag bit on every sample (converted on load: `chunk::v4`).
const MAGIC_V4: &[u8] = b"canopy-snapshot-v4";
/// v3 (the release before v4): every chunk with its encoder state, in the
/// same bit format as v4's.
const MAGIC_V3: &[u8] = b"canopy-snapshot-v3";
/// v2 (the release before): the same records with the first bit-packed
/// chunk format, still read so an upgrade loads its predecessor's data dir.
const MAGIC_V2: &[u8] = b"canopy-snapshot-v2";
/// v1 (the release before v2): the same records with byte-aligned chunks,
/// still read so an upgrade loads its predecessor's data dir.
const MAGIC_V1: &[u8] = b"canopy-snapshot-v1";
#[cfg(test)]
thread_local! {
    /// Tests only: write the v5 release's snapshot (no sealed chunk's last
    /// timestamp), to make v5 snapshots to load.
    pub(crate) static WRITE_V5: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Largest record accepted when reading (one series' chunks).
const MAX_RECORD: usize = 64 << 20;
/// Most bytes [`Chunk::write_state`] writes besides the encoded bytes
/// (72: varints of 2 + 4 × 10 + 5 + 3 bytes, 17 fixed), with room: a cut's
/// open-chunk buffer is sized by it (a state past it only grows the buffer).
pub(super) const OPEN_STATE_HEAD: usize = 96;

/// A consistent cut of a store's state for a snapshot, taken under the
/// store's lock and written with no lock held.
///
/// It is held in a few flat buffers (label ids, the open chunks' state),
/// not per series: a per-series copy meant two small allocations a
/// series, and sharing the open chunks meant the store copied each one on
/// its next write while the cut was streaming. Freed after the snapshot,
/// both left holes among the live series that the allocator could not
/// give back: a checkpoint during ingest of 100,000 series raised the
/// gateway's RSS by ~600 B a series for good. A series' sealed chunks are
/// never written again, so their buffer is shared; the open chunk's state
/// is copied into one buffer (its bytes, once).
///
/// The flat buffers are [`MappedBuf`]s, unmapped when the cut is dropped:
/// from `malloc` they came from a thread's arena after the first
/// checkpoint (glibc's mmap threshold rises to the first one's size when
/// it is freed) and stayed resident: at 1 s and 30,000 series, after 4
/// checkpoints, 2 to 4 arena heaps of 4–14 MB, 500–1,760 B a series more
/// anonymous memory than memory only (median 740); 30–75 B with mappings.
#[derive(Debug)]
pub struct SnapshotCut {
    now_ms: i64,
    stats: StoreStats,
    sources: Vec<Source>,
    strings: Vec<Arc<str>>,
    /// Each series' newest cold chunk (0: none reached) and sealed chunks
    /// in memory (shared with the store), in series order.
    series: Vec<(u64, Sealed)>,
    /// The cold tier's files the cut reads (kept mapped while it lives).
    cold: Arc<ColdMaps>,
    /// The retention cutoff: no cold walk goes past it.
    cutoff: i64,
    /// Each series': source + 1 (0 none), its number of label ids, the
    /// ids; every field a little-endian u32.
    labels: MappedBuf,
    /// Each series': the length of its open chunk's [`Chunk::write_state`]
    /// (a little-endian u32, 0 when empty), then that state.
    open: MappedBuf,
}

/// One series of a [`SnapshotCut`], read from its buffers.
#[derive(Clone, Copy, Debug)]
struct CutSeries<'a> {
    source: Option<u32>,
    cold: u64,
    sealed: &'a Sealed,
    /// Label ids, little-endian u32s.
    ids: &'a [u8],
    /// The open chunk's state (empty: none).
    open: &'a [u8],
}

impl CutSeries<'_> {
    /// Number of label ids (names and values).
    fn n_ids(&self) -> usize {
        self.ids.len() / 4
    }

    /// The label ids.
    fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.ids
            .chunks_exact(4)
            .map(|b| <[u8; 4]>::try_from(b).map_or(u32::MAX, u32::from_le_bytes))
    }
}

/// The little-endian u32 at `*at` of `b`, moving `*at` past it (0 past
/// the end: the cut's own buffers always hold it).
fn take_u32(b: &[u8], at: &mut usize) -> usize {
    let v = b
        .get(*at..*at + 4)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map_or(0, u32::from_le_bytes);
    *at += 4;
    v as usize
}

/// The next `n` bytes of `b` at `*at`, moving `*at` past them.
fn take<'a>(b: &'a [u8], at: &mut usize, n: usize) -> &'a [u8] {
    let s = b.get(*at..*at + n).unwrap_or_default();
    *at += n;
    s
}

impl SnapshotCut {
    /// Series in the cut.
    pub fn series(&self) -> usize {
        self.series.len()
    }

    /// Bytes of the cut's flat buffers: label ids and open chunks
    /// (written, and mapped), for the checkpoint's log line.
    pub fn buffer_bytes(&self) -> (usize, usize) {
        (
            self.labels.len() + self.open.len(),
            self.labels.capacity() + self.open.capacity(),
        )
    }

    /// The series in order, read from the flat buffers.
    fn iter(&self) -> impl Iterator<Item = CutSeries<'_>> {
        let (mut l, mut o) = (0, 0);
        self.series.iter().map(move |(cold, sealed)| {
            let source = u32::try_from(take_u32(&self.labels, &mut l)).unwrap_or(0);
            let n = take_u32(&self.labels, &mut l);
            let ids = take(&self.labels, &mut l, 4 * n);
            let len = take_u32(&self.open, &mut o);
            CutSeries {
                source: source.checked_sub(1),
                cold: *cold,
                sealed,
                ids,
                open: take(&self.open, &mut o, len),
            }
        })
    }

    /// Streams the cut to `w` as a snapshot; returns the bytes written.
    pub fn write(&self, w: &mut impl Write) -> io::Result<u64> {
        let str_of = |id: u32| self.strings.get(id as usize).map_or("", |s| s);
        #[cfg(test)]
        let (magic, spans) = if crate::store::chunk::WRITE_V4.with(std::cell::Cell::get) {
            (MAGIC_V4, false)
        } else if WRITE_V5.with(std::cell::Cell::get) {
            (MAGIC_V5, false)
        } else {
            (MAGIC, true)
        };
        #[cfg(not(test))]
        let (magic, spans) = (MAGIC, true);
        let mut n = write_frame(w, magic)? as u64;
        let mut p = vec![0x01];
        put_varint(&mut p, self.now_ms);
        put_uvarint(&mut p, self.stats.rejected_series);
        put_uvarint(&mut p, self.stats.out_of_order);
        put_uvarint(&mut p, self.stats.sources_died);
        put_uvarint(&mut p, self.sources.len() as u64);
        put_uvarint(&mut p, self.series.len() as u64);
        n += write_frame(w, &p)? as u64;
        for s in &self.sources {
            p.clear();
            p.push(0x02);
            put_str(&mut p, &s.name);
            put_varint(&mut p, s.tick_ms);
            put_uvarint(&mut p, s.alive.len() as u64);
            for a in &s.alive {
                put_varint(&mut p, a.start);
                put_varint(&mut p, a.end);
                p.push(u8::from(a.closed));
            }
            n += write_frame(w, &p)? as u64;
        }
        // One series' cold records, and where each starts.
        let (mut cold, mut starts) = (Vec::new(), Vec::new());
        for s in self.iter() {
            p.clear();
            p.push(0x03);
            put_uvarint(&mut p, (s.n_ids() / 2) as u64);
            for id in s.ids() {
                put_str(&mut p, str_of(id));
            }
            put_uvarint(&mut p, s.source.map_or(0, |s| u64::from(s) + 1));
            // The cold chunks back to the cutoff, read without mapping
            // their pages (a checkpoint reads them all), then those in
            // memory.
            cold.clear();
            starts.clear();
            let mut r = s.cold;
            while let Some(at) = self.cold.read_into(r, &mut cold) {
                let Some(c) = cold.get(at..).and_then(crate::store::cold::parse) else {
                    break;
                };
                starts.push(at);
                let Some(prev) = c.next_back(self.cutoff) else {
                    break;
                };
                r = prev;
            }
            let cold_views = starts
                .iter()
                .rev()
                .filter_map(|&at| cold.get(at..).and_then(crate::store::cold::parse))
                .map(|c| c.view);
            put_uvarint(&mut p, (starts.len() + s.sealed.len()) as u64);
            for c in cold_views.chain(s.sealed.iter_from(0, None)) {
                put_varint(&mut p, c.first_ts());
                if spans {
                    put_uvarint(&mut p, c.last_ts().abs_diff(c.first_ts()));
                }
                put_uvarint(&mut p, c.len() as u64);
                put_uvarint(&mut p, u64::from(c.bit_len()));
                p.extend_from_slice(c.bytes());
            }
            p.push(u8::from(!s.open.is_empty()));
            p.extend_from_slice(s.open);
            n += write_frame(w, &p)? as u64;
        }
        p.clear();
        p.push(0x04);
        put_uvarint(&mut p, self.sources.len() as u64);
        put_uvarint(&mut p, self.series.len() as u64);
        n += write_frame(w, &p)? as u64;
        Ok(n)
    }
}

/// First timestamp of an open chunk (`i64::MAX` when empty).
fn head_first(head: &Chunk) -> i64 {
    if head.len() > 0 {
        head.first_ts()
    } else {
        i64::MAX
    }
}

impl LiveStore {
    /// A loaded series' sealed chunks `views` (oldest first; the open
    /// chunk begins at `head_first`): its newest cold chunk and those kept
    /// in memory (all of them without a cold tier).
    fn sealed_from<'a>(
        &mut self,
        views: impl Iterator<Item = ChunkView<'a>> + Clone,
        head_first: i64,
    ) -> (u64, Sealed) {
        let Some(cold) = self.cold.as_mut() else {
            return (0, Sealed::from_views(views));
        };
        let mut e = Entry::new(0, None);
        let mut views = views.peekable();
        while let Some(v) = views.next() {
            match views.peek().map_or(head_first, |n| n.first_ts()) {
                // The newest chunk of a series with no open one: nothing
                // succeeds it yet, so it stays in memory (its file could
                // never be let go).
                i64::MAX => e.sealed.push(v),
                next => super::seal(Some(&mut *cold), &mut e, v, next),
            }
        }
        (e.cold, e.sealed)
    }

    /// Takes a [`SnapshotCut`] of the current state (call with the store
    /// locked; write the cut after releasing the lock).
    pub fn snapshot_cut(&self) -> SnapshotCut {
        // The buffers are mapped at a bound of what they get, so they never
        // grow (a copy under the lock): the pages past what is written are
        // never touched, so never resident. The open chunks' bound reads
        // only their entries' headers.
        let open_bound: usize = self
            .entries
            .iter()
            .flatten()
            .map(|e| {
                4 + if e.head.len() > 0 {
                    OPEN_STATE_HEAD + e.head.byte_len()
                } else {
                    0
                }
            })
            .sum();
        // Every label id takes at least a byte of the arena.
        let labels_bound = 8 * self.live + 4 * self.label_ids.heap_bytes();
        let mut cut = SnapshotCut {
            now_ms: self.now_ms,
            stats: self.stats,
            sources: self.sources.clone(),
            strings: self.strings.table(),
            series: Vec::with_capacity(self.live),
            cold: self.cold.as_ref().map(ColdFiles::share).unwrap_or_default(),
            cutoff: self.now_ms.saturating_sub(self.cfg.retention_ms),
            labels: MappedBuf::with_capacity(labels_bound),
            open: MappedBuf::with_capacity(open_bound),
        };
        // One series' record of each buffer, appended whole.
        let max_state = OPEN_STATE_HEAD + crate::store::chunk::MAX_SEALED_BITS as usize / 8 + 1;
        let mut rec = Vec::with_capacity(4 + max_state);
        for e in self.entries.iter().flatten() {
            let ids = self.syms(e);
            rec.clear();
            rec.extend_from_slice(&e.source_plus_one.to_le_bytes());
            rec.extend_from_slice(&(ids.len() as u32).to_le_bytes());
            for id in &ids {
                rec.extend_from_slice(&id.to_le_bytes());
            }
            cut.labels.extend_from_slice(&rec);
            rec.clear();
            rec.extend_from_slice(&[0; 4]);
            if e.head.len() > 0 {
                e.head.write_state(&mut rec);
            }
            let len = u32::try_from(rec.len() - 4).unwrap_or(0);
            if let Some(head) = rec.get_mut(..4) {
                head.copy_from_slice(&len.to_le_bytes());
            }
            cut.open.extend_from_slice(&rec);
            // A link the store would not follow is not kept either.
            let cold = if e.first_warm_ts() <= cut.cutoff {
                0
            } else {
                e.cold
            };
            cut.series.push((cold, e.sealed.clone()));
        }
        cut
    }

    /// Streams the store's state to `w`; returns the bytes written.
    pub fn write_snapshot(&self, w: &mut impl Write) -> io::Result<u64> {
        self.snapshot_cut().write(w)
    }

    /// Rebuilds a store from a snapshot stream, with settings `cfg` (the
    /// current ones, e.g. a changed retention, apply from the next tick).
    pub fn read_snapshot(cfg: LiveStoreConfig, r: &mut impl Read) -> Result<LiveStore, CodecError> {
        Self::read_snapshot_with(cfg, None, r)
    }

    /// [`LiveStore::read_snapshot`] into a store with the cold tier `cold`:
    /// the sealed chunks read go to it as they are read, so a load holds
    /// no more of them in memory than the store would.
    pub fn read_snapshot_with(
        cfg: LiveStoreConfig,
        cold: Option<ColdFiles>,
        r: &mut impl Read,
    ) -> Result<LiveStore, CodecError> {
        let mut buf = Vec::new();
        let mut next = |buf: &mut Vec<u8>| -> Result<(), CodecError> {
            if read_frame(r, buf, MAX_RECORD)? {
                Ok(())
            } else {
                Err(CodecError::Malformed("snapshot ends before its end record"))
            }
        };
        next(&mut buf)?;
        let (v1, v2, v3) = (buf == MAGIC_V1, buf == MAGIC_V2, buf == MAGIC_V3);
        let (v4, v5) = (buf == MAGIC_V4, buf == MAGIC_V5);
        if buf != MAGIC && !v1 && !v2 && !v3 && !v4 && !v5 {
            return Err(CodecError::Malformed("not a canopy snapshot (bad magic)"));
        }
        next(&mut buf)?;
        let mut c = Cursor::new(&buf);
        if c.u8()? != 0x01 {
            return Err(CodecError::Malformed("snapshot header missing"));
        }
        let mut s = LiveStore::new(cfg);
        s.cold = cold;
        s.now_ms = c.varint()?;
        s.stats.rejected_series = c.uvarint()?;
        s.stats.out_of_order = c.uvarint()?;
        s.stats.sources_died = c.uvarint()?;
        let n_sources = c.len(usize::MAX)?;
        let n_series = c.len(usize::MAX)?;
        for _ in 0..n_sources {
            next(&mut buf)?;
            let mut c = Cursor::new(&buf);
            if c.u8()? != 0x02 {
                return Err(CodecError::Malformed("expected a source record"));
            }
            let name = c.str()?.to_string();
            let tick_ms = c.varint()?;
            let n = c.len(buf.len())?;
            let mut alive = Vec::with_capacity(n);
            for _ in 0..n {
                alive.push(Alive {
                    start: c.varint()?,
                    end: c.varint()?,
                    closed: c.u8()? != 0,
                });
            }
            s.source_ids.insert(name.clone(), s.sources.len());
            s.sources.push(Source {
                name,
                tick_ms,
                alive,
            });
        }
        for id in 0..n_series {
            next(&mut buf)?;
            let mut c = Cursor::new(&buf);
            if c.u8()? != 0x03 {
                return Err(CodecError::Malformed("expected a series record"));
            }
            let labels = c.labels()?;
            let source = match c.len(s.sources.len())? {
                0 => None,
                i => Some(
                    u32::try_from(i - 1)
                        .map_err(|_| CodecError::Malformed("source index out of range"))?,
                ),
            };
            let n = c.len(buf.len())?;
            let (sealed, head) = if v1 || v2 || v3 {
                // Every chunk with its state: the last stays open.
                let mut chunks = Vec::with_capacity(n);
                for _ in 0..n {
                    if v1 {
                        crate::store::chunk::v1::read_state(&mut c, &mut chunks)?;
                    } else if v2 {
                        crate::store::chunk::v2::read_state(&mut c, &mut chunks)?;
                    } else {
                        crate::store::chunk::v4::read_state(&mut c, &mut chunks)?;
                    }
                }
                let head = chunks.pop().unwrap_or_default();
                let first = head_first(&head);
                (s.sealed_from(chunks.iter().map(Chunk::view), first), head)
            } else {
                let mut runs = Vec::with_capacity(n);
                // v4's runs, converted to today's chunk format.
                let mut converted = Vec::new();
                let mut prev = i64::MIN;
                for i in 0..n {
                    let first_ts = c.varint()?;
                    let span = if v4 || v5 { None } else { Some(c.uvarint()?) };
                    let count = c.len(crate::store::chunk::MAX_CHUNK_SAMPLES)?;
                    let bit_len = c.len(crate::store::chunk::MAX_SEALED_BITS as usize)?;
                    let bytes = c.bytes(bit_len.div_ceil(8))?;
                    if first_ts <= prev && i > 0 {
                        return Err(CodecError::Malformed("sealed chunk out of range"));
                    }
                    prev = first_ts;
                    if v4 {
                        crate::store::chunk::v4::read_sealed(
                            bytes,
                            bit_len as u32,
                            count,
                            first_ts,
                            &mut converted,
                        )?;
                        continue;
                    }
                    let last_ts = match span {
                        Some(d) => i64::try_from(d)
                            .ok()
                            .and_then(|d| first_ts.checked_add(d))
                            .ok_or(CodecError::Malformed("sealed chunk out of range"))?,
                        // v5: decode the chunk for it.
                        None => {
                            let run =
                                ChunkView::sealed_scanned(bytes, bit_len as u32, count, first_ts)
                                    .ok_or(CodecError::Malformed("sealed chunk does not decode"))?;
                            run.last_ts()
                        }
                    };
                    if runs
                        .last()
                        .is_some_and(|r: &ChunkView<'_>| r.last_ts() > first_ts)
                    {
                        return Err(CodecError::Malformed("sealed chunks overlap"));
                    }
                    let run = ChunkView::sealed(bytes, bit_len as u32, count, first_ts, last_ts)
                        .ok_or(CodecError::Malformed("sealed chunk out of range"))?;
                    runs.push(run);
                }
                runs.extend(converted.iter().map(Chunk::view));
                // The open chunk; more than one only when its span does
                // not fit one (a snapshot of a release that did not bound
                // it): all but the last are sealed after the runs.
                let mut open = Vec::new();
                match c.u8()? {
                    0 => {}
                    1 if v4 => crate::store::chunk::v4::read_state(&mut c, &mut open)?,
                    1 => Chunk::read_state(&mut c, &mut open)?,
                    _ => return Err(CodecError::Malformed("bad open chunk flag")),
                }
                let head = open.pop().unwrap_or_default();
                let first_open = open.first().unwrap_or(&head);
                if first_open.len() > 0 && first_open.first_ts() < prev {
                    return Err(CodecError::Malformed("open chunk before a sealed one"));
                }
                let first = head_first(&head);
                let views = runs.iter().copied().chain(open.iter().map(Chunk::view));
                (s.sealed_from(views, first), head)
            };
            let id =
                u32::try_from(id).map_err(|_| CodecError::Malformed("more series than ids"))?;
            let h = s.index.hash(&labels);
            if s.find(h, &labels).is_some() {
                return Err(CodecError::Malformed("a series appears twice"));
            }
            let syms = s
                .label_ids
                .intern(&mut s.strings, &labels)
                .ok_or(CodecError::Malformed("too many label ids"))?;
            s.index.insert(h, &s.label_ids.get(syms), id);
            s.live += 1;
            s.series_epoch += 1;
            let mut e = Entry::new(syms, source);
            ((e.cold, e.sealed), e.head) = (sealed, head);
            s.entries.push(Some(e));
        }
        next(&mut buf)?;
        let mut c = Cursor::new(&buf);
        if c.u8()? != 0x04 || c.len(usize::MAX)? != n_sources || c.len(usize::MAX)? != n_series {
            return Err(CodecError::Malformed("snapshot end record does not match"));
        }
        Ok(s)
    }
}

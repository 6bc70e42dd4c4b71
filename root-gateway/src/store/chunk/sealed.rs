//! A series' sealed chunks as bare byte runs in one shared buffer.
//!
//! A sealed chunk is never written again, so it needs no encoder state:
//! its first timestamp, sample count and bit length are enough to decode
//! it (the first value is the stream's first 64 bits). Its last timestamp
//! lets a window that starts after the chunk's last sample skip it, as
//! Prometheus skips a chunk by its maximum time: without it, a 1 m window
//! whose start falls between a sealed chunk and the open one decoded the
//! whole sealed chunk (240 samples at 1 s then) for nothing. A series keeps all
//! of its sealed chunks in one allocation, an index then the runs:
//!
//! ```text
//! n (u32 LE) | n x (first_ts i64 LE, span u32 LE, count u8, bit_len u16 LE) | runs
//! ```
//!
//! `span` is the last timestamp less the first (a chunk spans less than
//! 2^32 ms: `Chunk::fits`), [`UNKNOWN_SPAN`] where it is not known (then
//! the next chunk's first timestamp bounds it). 15 bytes a chunk, where a
//! chunk of its own took a 104-byte header, a list slot and two
//! allocations. The buffer is shared (`Arc`), so a
//! snapshot cut holds it while the store moves on: sealing a chunk or
//! dropping old ones builds a new buffer (once per [`CHUNK_SAMPLES`](super::CHUNK_SAMPLES)
//! samples of a series), never writes the old one.
//!
//! The buffer is a [`ThinArc`]: its length lives in the allocation beside
//! the reference count (16 bytes, as `Arc<[u8]>`'s two counts), so the
//! series entry holds one 8-byte pointer where `Arc<[u8]>` took 16
//! (issue 5: RSS per series; the entry 96 -> 88 bytes).

use smallvec::SmallVec;
use triomphe::ThinArc;

use super::{ChunkView, MAX_CHUNK_SAMPLES};
use crate::store::cold::ColdMaps;

/// References of cold chunks a read walks, oldest first (most reads need
/// none or one or two: a short window at the open chunk's start).
pub type ColdRefs = SmallVec<[u64; 4]>;

/// Bytes of the chunk count.
const COUNT: usize = 4;
/// Bytes of a chunk's index entry.
const ENTRY: usize = 15;
/// A chunk's `span` when its last timestamp is not known.
const UNKNOWN_SPAN: u32 = u32::MAX;
/// Bytes of the [`ThinArc`]'s own header: the reference count and the
/// slice length.
const FIXED: usize = 2 * std::mem::size_of::<usize>();

/// The sealed chunks of one series, oldest first (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct Sealed(Option<ThinArc<(), u8>>);

impl Sealed {
    /// The buffer's bytes (none when there is no sealed chunk).
    #[inline]
    fn bytes(&self) -> Option<&[u8]> {
        self.0.as_ref().map(|a| &a.slice)
    }

    /// Number of sealed chunks.
    #[inline]
    pub fn len(&self) -> usize {
        match self.bytes() {
            Some(&[a, b, c, d, ..]) => u32::from_le_bytes([a, b, c, d]) as usize,
            _ => 0,
        }
    }

    /// True when there is no sealed chunk.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The index entry of chunk `i`: first timestamp, span, count, bit
    /// length.
    #[inline]
    fn entry(b: &[u8], i: usize) -> (i64, u32, u16, u32) {
        let at = COUNT + i * ENTRY;
        match b.get(at..at + ENTRY) {
            Some(e) => (
                i64::from_le_bytes(e[..8].try_into().unwrap_or_default()),
                u32::from_le_bytes(e[8..12].try_into().unwrap_or_default()),
                u16::from(e[12]),
                u32::from(u16::from_le_bytes([e[13], e[14]])),
            ),
            None => (i64::MAX, UNKNOWN_SPAN, 0, 0),
        }
    }

    /// Timestamp of chunk `i`'s last sample, `None` when not known (or
    /// past the end).
    pub fn last_ts(&self, i: usize) -> Option<i64> {
        let (first, span, ..) = Self::entry(self.bytes()?, i);
        (span != UNKNOWN_SPAN && i < self.len()).then(|| first.saturating_add(i64::from(span)))
    }

    /// Timestamp of chunk `i`'s first sample (`i64::MAX` past the end).
    pub fn first_ts(&self, i: usize) -> i64 {
        self.bytes().map_or(i64::MAX, |b| Self::entry(b, i).0)
    }

    /// Number of chunks whose first sample is at or before `t`.
    pub fn count_at_or_before(&self, t: i64) -> usize {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.first_ts(mid) <= t {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The first chunk a window that starts at `mint` reads when it needs
    /// no sample before `mint`: the last chunk that begins at or before
    /// `mint`, or the one after it when its last sample is older than
    /// `mint` ([`Sealed::len`] when no sealed chunk is read).
    pub fn first_for(&self, mint: i64) -> usize {
        let k = self.count_at_or_before(mint).saturating_sub(1);
        match self.last_ts(k) {
            Some(last) if last < mint => k + 1,
            _ => k,
        }
    }

    /// The chunks from `from` on, oldest first, then `head` (the open
    /// chunk) if given; `head`'s first timestamp (or `i64::MAX`) ends the
    /// newest sealed chunk for its estimate.
    pub fn iter_from<'a>(&'a self, from: usize, head: Option<ChunkView<'a>>) -> Runs<'a> {
        let b: &[u8] = self.bytes().unwrap_or_default();
        let n = self.len();
        let at = COUNT
            + n * ENTRY
            + (0..from.min(n))
                .map(|i| Self::entry(b, i).3.div_ceil(8) as usize)
                .sum::<usize>();
        Runs {
            cold: None,
            refs: ColdRefs::new(),
            ci: 0,
            b,
            i: from.min(n),
            n,
            at,
            head,
        }
    }

    /// A buffer holding `views`, oldest first. Views must be chunks of at
    /// most [`MAX_CHUNK_SAMPLES`] samples (their bit length then fits 16 bits).
    pub fn from_views<'a>(views: impl Iterator<Item = ChunkView<'a>> + Clone) -> Sealed {
        let (n, bytes) = views
            .clone()
            .fold((0usize, 0usize), |(n, b), v| (n + 1, b + v.bytes.len()));
        if n == 0 {
            return Sealed(None);
        }
        let mut buf = Vec::with_capacity(COUNT + n * ENTRY + bytes);
        buf.extend_from_slice(&(n as u32).to_le_bytes());
        for v in views.clone() {
            debug_assert!(v.len() <= MAX_CHUNK_SAMPLES && v.bit_len <= u32::from(u16::MAX));
            buf.extend_from_slice(&v.first_ts.to_le_bytes());
            buf.extend_from_slice(&span_of(&v).to_le_bytes());
            buf.push(v.count.min(u16::from(u8::MAX)) as u8);
            buf.extend_from_slice(&(v.bit_len.min(u32::from(u16::MAX)) as u16).to_le_bytes());
        }
        for v in views {
            buf.extend_from_slice(v.bytes);
        }
        Sealed(Some(ThinArc::from_header_and_slice((), &buf)))
    }

    /// Appends a newly sealed chunk (a new buffer; one held by a snapshot
    /// cut stays as it was).
    pub fn push(&mut self, c: ChunkView<'_>) {
        *self = Sealed::from_views(self.iter_from(0, Some(c)));
    }

    /// Drops the `k` oldest chunks.
    pub fn drop_front(&mut self, k: usize) {
        if k == 0 {
            return;
        }
        *self = Sealed::from_views(self.iter_from(k, None));
    }

    /// Heap bytes: the allocation's fixed part (reference count, length
    /// and chunk count), the index entries, and the encoded runs.
    pub fn heap_bytes(&self) -> (usize, usize, usize) {
        match self.bytes() {
            None => (0, 0, 0),
            Some(b) => {
                let idx = self.len() * ENTRY;
                (FIXED + COUNT, idx, b.len() - COUNT - idx)
            }
        }
    }

    /// The first byte of the buffer (0 when empty): reading it loads the
    /// index's first line into the cache (see [`ChunkView::touch`]).
    pub fn touch(&self) -> u8 {
        self.bytes().and_then(|b| b.first()).copied().unwrap_or(0)
    }

    /// How many holders share the buffer (0 when there is none; for tests).
    #[cfg(test)]
    pub fn holders(&self) -> usize {
        self.0.as_ref().map_or(0, ThinArc::strong_count)
    }
}

/// A view's span for the index: its last timestamp less its first, or
/// [`UNKNOWN_SPAN`] when that is not a `u32` below it.
fn span_of(v: &ChunkView<'_>) -> u32 {
    u32::try_from(i128::from(v.last_ts) - i128::from(v.first_ts))
        .ok()
        .filter(|&s| s != UNKNOWN_SPAN)
        .unwrap_or(UNKNOWN_SPAN)
}

/// The chunks of a [`Sealed`] buffer from one on, then the open chunk:
/// see [`Sealed::iter_from`].
#[derive(Clone, Debug)]
pub struct Runs<'a> {
    /// The cold tier's files, when `refs` names chunks in them.
    cold: Option<&'a ColdMaps>,
    /// Cold chunks read before the sealed buffer's, oldest first.
    refs: ColdRefs,
    /// The next of `refs`.
    ci: usize,
    b: &'a [u8],
    i: usize,
    n: usize,
    /// Where chunk `i`'s bytes start.
    at: usize,
    head: Option<ChunkView<'a>>,
}

impl<'a> Runs<'a> {
    /// These runs after the cold chunks `refs` (oldest first) of `cold`.
    pub fn after_cold(self, cold: &'a ColdMaps, refs: ColdRefs) -> Self {
        Runs {
            cold: Some(cold),
            refs,
            ci: 0,
            ..self
        }
    }

    /// Just the open chunk `head` (a window that starts inside it).
    pub fn head_only(head: Option<ChunkView<'a>>) -> Self {
        Runs {
            cold: None,
            refs: ColdRefs::new(),
            ci: 0,
            b: &[],
            i: 0,
            n: 0,
            at: 0,
            head,
        }
    }
}

impl<'a> Iterator for Runs<'a> {
    type Item = ChunkView<'a>;

    #[inline]
    fn next(&mut self) -> Option<ChunkView<'a>> {
        if let Some(cold) = self.cold {
            while let Some(&r) = self.refs.get(self.ci) {
                self.ci += 1;
                if let Some(c) = cold.get(r) {
                    return Some(c.view);
                }
            }
        }
        if self.i >= self.n {
            return self.head.take();
        }
        let (first_ts, span, count, bit_len) = Sealed::entry(self.b, self.i);
        let len = bit_len.div_ceil(8) as usize;
        let Some(bytes) = self.b.get(self.at..self.at + len) else {
            // Damaged: no more sealed chunks.
            self.i = self.n;
            return self.head.take();
        };
        self.at += len;
        self.i += 1;
        let last_ts = if span != UNKNOWN_SPAN {
            first_ts.saturating_add(i64::from(span))
        } else if self.i < self.n {
            Sealed::entry(self.b, self.i).0
        } else {
            self.head.map_or(first_ts, |h| h.first_ts())
        };
        Some(ChunkView {
            bytes,
            bit_len,
            count,
            first_ts,
            last_ts: last_ts.max(first_ts),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::{CHUNK_SAMPLES, Chunk};
    use super::*;

    fn chunk(from: i64, n: i64) -> Chunk {
        let mut c = Chunk::default();
        for k in 0..n {
            c.push((from + k) * 1000, (k * k) as f64 * 0.25);
        }
        c
    }

    #[test]
    fn sealed_runs_decode_like_their_chunks() {
        assert_eq!(
            CHUNK_SAMPLES, 120,
            "the timestamps below assume 120-sample chunks"
        );
        let cs = [chunk(0, 120), chunk(120, 120), chunk(240, 17)];
        let mut s = Sealed::default();
        assert!(s.is_empty());
        for c in &cs {
            s.push(c.view());
        }
        assert_eq!(s.len(), 3);
        assert_eq!(s.count_at_or_before(-1), 0);
        assert_eq!(s.count_at_or_before(0), 1);
        assert_eq!(s.count_at_or_before(239_999), 2);
        assert_eq!(s.count_at_or_before(240_000), 3);
        // Each chunk's last timestamp is in the index.
        let lasts: Vec<_> = (0..4).map(|i| s.last_ts(i)).collect();
        assert_eq!(lasts, [Some(119_000), Some(239_000), Some(256_000), None]);
        for (mint, first) in [
            (-5, 0),
            (119_000, 0),
            (119_001, 1),
            (120_000, 1),
            (239_500, 2),
            (256_001, 3),
        ] {
            assert_eq!(s.first_for(mint), first, "mint {mint}");
        }
        for (v, c) in s.iter_from(0, None).zip(&cs) {
            assert_eq!(v.last_ts(), c.last_ts());
        }
        for from in 0..4 {
            let got: Vec<_> = s.iter_from(from, None).collect();
            assert_eq!(got.len(), 3 - from);
            for (v, c) in got.iter().zip(&cs[from..]) {
                let (mut a, mut b) = (Vec::new(), Vec::new());
                v.decode(&mut a);
                c.decode(&mut b);
                assert_eq!(a, b);
                assert_eq!((v.first_ts(), v.len()), (c.first_ts(), c.len()));
            }
        }
        let held = s.clone();
        s.drop_front(2);
        assert_eq!(s.len(), 1);
        assert_eq!(s.first_ts(0), 240_000);
        // The clone (a snapshot cut's) is unchanged.
        assert_eq!(held.len(), 3);
        let (fixed, idx, runs) = held.heap_bytes();
        assert_eq!(idx, 3 * ENTRY);
        assert_eq!(runs, cs.iter().map(|c| c.view().byte_len()).sum::<usize>());
        assert!(fixed > 0);
        s.drop_front(1);
        assert!(s.is_empty());
        assert_eq!(s.heap_bytes(), (0, 0, 0));
    }

    #[test]
    fn estimates_use_the_next_chunk_start() {
        let mut s = Sealed::default();
        s.push(chunk(0, 120).view());
        let head = chunk(120, 5);
        let v = s.iter_from(0, Some(head.view())).next().unwrap();
        // 60 of 120 one-second samples in a minute.
        let e = v.estimate(0, 59_000);
        assert!((60..=62).contains(&e), "{e}");
    }
}

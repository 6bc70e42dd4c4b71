//! [`Entry`]: one series of the [`LiveStore`](super::LiveStore), with the
//! choice of the chunks a read of a window decodes.

use crate::store::chunk::{Chunk, ChunkView, ColdRefs, Runs, Sealed};
use crate::store::cold::ColdMaps;

/// What a read of cold chunks needs: the tier's files and the retention
/// cutoff, before which no walk goes (a file whose chunks were all
/// succeeded before it may be gone).
#[derive(Clone, Copy, Debug)]
pub(super) struct ColdRead<'a> {
    pub(super) maps: &'a ColdMaps,
    pub(super) cutoff: i64,
}

/// One series' slot in the store: its label ids' offset, its source, and
/// its chunks.
#[derive(Debug)]
pub(super) struct Entry {
    /// Offset of the interned labels in the store's label arena.
    pub(super) labels: u32,
    /// Index into `sources` plus one, 0 for none (u32: series outnumber
    /// sources by far; 4 bytes where an `Option<u32>` takes 8).
    pub(super) source_plus_one: u32,
    /// The newest of the series' chunks in the cold tier (0: none), all
    /// older than `sealed`'s: a list back through each record's `prev`.
    pub(super) cold: u64,
    /// The sealed chunks kept in memory (all of them without a cold tier),
    /// in one buffer a snapshot cut can share while the store moves on
    /// (sealed chunks are never written again); a thin pointer, 8 bytes.
    pub(super) sealed: Sealed,
    /// The open chunk (the newest), kept in the entry: one chunk header a
    /// series, read in the same cache lines as the entry.
    pub(super) head: Chunk,
}

impl Entry {
    /// A series with no samples yet.
    pub(super) fn new(labels: u32, source: Option<u32>) -> Self {
        Entry {
            labels,
            source_plus_one: source.and_then(|s| s.checked_add(1)).unwrap_or(0),
            cold: 0,
            sealed: Sealed::default(),
            head: Chunk::default(),
        }
    }

    /// The series' source (an index into `sources`), if any.
    pub(super) fn source(&self) -> Option<u32> {
        self.source_plus_one.checked_sub(1)
    }

    /// The newest sample: its timestamp and value.
    pub(super) fn last(&self) -> Option<(i64, f64)> {
        (self.head.len() > 0).then(|| (self.head.last_ts(), self.head.last_value()))
    }

    /// Number of chunks in memory, the open one included when it holds
    /// samples (cold chunks are counted by their files).
    pub(super) fn chunk_count(&self) -> usize {
        self.sealed.len() + usize::from(self.head.len() > 0)
    }

    /// Every chunk within retention, oldest first.
    pub(super) fn chunks<'a>(&'a self, cold: ColdRead<'a>) -> Runs<'a> {
        let runs = self.sealed.iter_from(0, self.head_view());
        self.with_cold(runs, cold, cold.cutoff, false)
    }

    /// The open chunk when it holds samples.
    #[inline]
    pub(super) fn head_view(&self) -> Option<ChunkView<'_>> {
        (self.head.len() > 0).then(|| self.head.view())
    }

    /// First timestamp of the first chunk held in memory (`i64::MAX`: none).
    #[inline]
    pub(super) fn first_warm_ts(&self) -> i64 {
        if !self.sealed.is_empty() {
            self.sealed.first_ts(0)
        } else if self.head.len() > 0 {
            self.head.first_ts()
        } else {
            i64::MAX
        }
    }

    /// `runs` (every chunk in memory) after the cold chunks a window from
    /// `mint` reads: back from the newest to the last that begins at or
    /// before `mint` (or the cutoff, if later); without that one when
    /// `explicit` and its last sample is older than `mint`.
    fn with_cold<'a>(
        &'a self,
        runs: Runs<'a>,
        cold: ColdRead<'a>,
        mint: i64,
        explicit: bool,
    ) -> Runs<'a> {
        let from = mint.max(cold.cutoff);
        if self.cold == 0 || self.first_warm_ts() <= from {
            return runs;
        }
        let mut refs = ColdRefs::new();
        let mut r = self.cold;
        let mut oldest_last = i64::MAX;
        while let Some(c) = cold.maps.get(r) {
            refs.push(r);
            let Some(prev) = c.next_back(from) else {
                oldest_last = c.view.last_ts();
                break;
            };
            r = prev;
        }
        if explicit && oldest_last < mint {
            refs.pop();
        }
        refs.reverse();
        runs.after_cold(cold.maps, refs)
    }

    /// The chunks a window starting at `mint` reads: from the last one
    /// that begins at or before `mint` (its points may imply samples in
    /// the window), oldest first.
    #[inline]
    pub(super) fn chunks_at<'a>(&'a self, mint: i64, cold: ColdRead<'a>) -> Runs<'a> {
        let head = self.head_view();
        if head.is_some_and(|h| h.first_ts() <= mint) {
            // The common case of a short window: the open chunk alone.
            return Runs::head_only(head);
        }
        let first = self.sealed.count_at_or_before(mint).saturating_sub(1);
        let runs = self.sealed.iter_from(first, head);
        self.with_cold(runs, cold, mint, false)
    }

    /// The chunks that hold the explicit samples at or after `mint`,
    /// oldest first: [`Entry::chunks_at`] without a first chunk whose
    /// last sample is older than `mint` (a series with no source implies
    /// no sample from an older point).
    #[inline]
    pub(super) fn chunks_in<'a>(&'a self, mint: i64, cold: ColdRead<'a>) -> Runs<'a> {
        let head = self.head_view();
        if head.is_some_and(|h| h.first_ts() <= mint) {
            return Runs::head_only(head);
        }
        let runs = self.sealed.iter_from(self.sealed.first_for(mint), head);
        self.with_cold(runs, cold, mint, true)
    }

    /// The chunks a read of the window from `mint` decodes: for a fabric
    /// series (with a source) [`Entry::chunks_at`], whose older change
    /// point implies samples in the window, else [`Entry::chunks_in`].
    #[inline]
    pub(super) fn window_chunks<'a>(&'a self, mint: i64, cold: ColdRead<'a>) -> Runs<'a> {
        if self.source_plus_one == 0 {
            self.chunks_in(mint, cold)
        } else {
            self.chunks_at(mint, cold)
        }
    }

    /// Drops the chunks wholly older than `cutoff` (the newest one always
    /// stays): from memory, and the link to the cold ones once a chunk in
    /// memory begins at or before it.
    pub(super) fn drop_before(&mut self, cutoff: i64) {
        let n = self.sealed.len();
        let next = |i: usize| {
            if i < n {
                self.sealed.first_ts(i)
            } else if self.head.len() > 0 {
                self.head.first_ts()
            } else {
                i64::MAX
            }
        };
        if next(0) <= cutoff {
            self.cold = 0;
        }
        let mut k = 0;
        while k < n && next(k + 1) <= cutoff {
            k += 1;
        }
        self.sealed.drop_front(k);
    }
}

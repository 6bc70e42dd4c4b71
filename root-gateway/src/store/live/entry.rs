//! [`Entry`]: one series of the [`LiveStore`](super::LiveStore), with the
//! choice of the chunks a read of a window decodes.

use crate::store::chunk::{Chunk, ChunkView, Runs, Sealed};

/// One series' slot in the store: its label ids' offset, its source, and
/// its chunks.
#[derive(Debug)]
pub(super) struct Entry {
    /// Offset of the interned labels in the store's label arena.
    pub(super) labels: u32,
    /// Index into `sources` plus one, 0 for none (u32: series outnumber
    /// sources by far; 4 bytes where an `Option<u32>` takes 8).
    pub(super) source_plus_one: u32,
    /// The sealed chunks, in one buffer a snapshot cut can share while
    /// the store moves on (sealed chunks are never written again); a thin
    /// pointer, 8 bytes.
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

    /// Number of chunks, the open one included when it holds samples.
    pub(super) fn chunk_count(&self) -> usize {
        self.sealed.len() + usize::from(self.head.len() > 0)
    }

    /// Every chunk, oldest first.
    pub(super) fn chunks(&self) -> Runs<'_> {
        self.sealed.iter_from(0, self.head_view())
    }

    /// The open chunk when it holds samples.
    #[inline]
    pub(super) fn head_view(&self) -> Option<ChunkView<'_>> {
        (self.head.len() > 0).then(|| self.head.view())
    }

    /// The chunks a window starting at `mint` reads: from the last one
    /// that begins at or before `mint` (its points may imply samples in
    /// the window), oldest first.
    #[inline]
    pub(super) fn chunks_at(&self, mint: i64) -> Runs<'_> {
        let head = self.head_view();
        if head.is_some_and(|h| h.first_ts() <= mint) {
            // The common case of a short window: the open chunk alone.
            return Runs::head_only(head);
        }
        let first = self.sealed.count_at_or_before(mint).saturating_sub(1);
        self.sealed.iter_from(first, head)
    }

    /// The chunks that hold the explicit samples at or after `mint`,
    /// oldest first: [`Entry::chunks_at`] without a first sealed chunk
    /// whose last sample is older than `mint` (a series with no source
    /// implies no sample from an older point).
    #[inline]
    pub(super) fn chunks_in(&self, mint: i64) -> Runs<'_> {
        let head = self.head_view();
        if head.is_some_and(|h| h.first_ts() <= mint) {
            return Runs::head_only(head);
        }
        self.sealed.iter_from(self.sealed.first_for(mint), head)
    }

    /// The chunks a read of the window from `mint` decodes: for a fabric
    /// series (with a source) [`Entry::chunks_at`], whose older change
    /// point implies samples in the window, else [`Entry::chunks_in`].
    #[inline]
    pub(super) fn window_chunks(&self, mint: i64) -> Runs<'_> {
        if self.source_plus_one == 0 {
            self.chunks_in(mint)
        } else {
            self.chunks_at(mint)
        }
    }

    /// Drops the chunks wholly older than `cutoff` (the newest one always
    /// stays).
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
        let mut k = 0;
        while k < n && next(k + 1) <= cutoff {
            k += 1;
        }
        self.sealed.drop_front(k);
    }
}

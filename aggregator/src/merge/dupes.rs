//! The other path's copy of a quiet source's section, skipped.
//!
//! Where a source's R paths meet (the gateway), each of its sections
//! arrives R times a tick. A quiet node's section carries one update (its
//! tick counter), and every copy after the first is dropped as a
//! duplicate, but only after reading the source's slot (entry and paths),
//! its name, the series' slot and its labels: at 10,000 nodes those lines
//! are rarely in cache, so the copy costs as much as the first.
//!
//! So, after applying a one-update section of a source, the merger notes
//! in a small dense array indexed by source handle ([`Recent`], 32 bytes
//! a source) the section's timestamp and the (handle, epoch) of its
//! series. A later one-update section of the same source at the same
//! timestamp whose series carries the same tag in its link's decoder is
//! a copy the full path would drop whole (the series already holds that
//! timestamp or a newer one, the source too, and nothing is held for the
//! source): it is counted as a duplicate and nothing else is read. Its one
//! effect on state, the path's newest timestamp for the source, is kept
//! in the entry and applied before the paths are next read (`flush_path`).
//! An entry is dropped when any series of its source or the source itself
//! retires, which is the only way the proof's facts (a live handle at that
//! epoch, its newest timestamp) can stop holding.

use super::*;

/// What the merger last applied of a source's one-update section (see the
/// module). `series == 0`: nothing.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Recent {
    /// The section's timestamp, ms: the series and the source hold it or
    /// a newer one.
    ts: i64,
    /// The series' tag ([`Slot::tag`]: handle + 1, epoch), as its links'
    /// decoders hold it.
    series: u64,
    /// The source handle's epoch.
    src_epoch: u32,
    /// `deferred` holds a path.
    has_deferred: bool,
    /// A skipped copy's path, whose newest timestamp for the source is
    /// still to be moved up to `ts` (see `flush_path`).
    deferred: ChildId,
}

impl Merger {
    /// The source handle of section `sec` of child `c` when it is a copy
    /// that the full path would drop whole, as a duplicate (see the
    /// module). Reads the decoder's records of the source and the series
    /// (just decoded) and one [`Recent`] entry.
    pub(super) fn proven_copy(&self, c: &Child, sec: &RxSection) -> Option<u32> {
        if !self.skip_copies || sec.updates.len() != 1 || !sec.retired.is_empty() {
            return None;
        }
        let s = Slot::from_tag(c.dec.source(sec.source)?.tag())?;
        let r = self.recent.get(s.h as usize)?;
        if r.series == 0 || r.src_epoch != s.epoch || r.ts != sec.ts_ms {
            return None;
        }
        let id = sec.updates.first()?.0;
        if c.dec.update_key(sec.source, id)?.0 != r.series {
            return None;
        }
        if !self.held.is_empty() && self.held.contains_key(&s.h) {
            return None;
        }
        Some(s.h)
    }

    /// Counts section `sec` of `child` as a duplicate without applying it
    /// when it is a proven copy (see [`Merger::proven_copy`]); true if so.
    pub(super) fn skip_copy(
        &mut self,
        child: ChildId,
        c: &Child,
        sec: &RxSection,
        sum: &mut FrameSummary,
    ) -> bool {
        let Some(src) = self.proven_copy(c, sec) else {
            return false;
        };
        if self.cfg.hole_wait_ms > 0 {
            let Some(r) = self.recent.get_mut(src as usize) else {
                return false;
            };
            if r.has_deferred && r.deferred != child {
                // Another path's note is due first: the full path does it.
                return false;
            }
            r.has_deferred = true;
            r.deferred = child;
        }
        let n = sec.updates.len();
        sum.updates += n;
        sum.duplicates += n;
        self.stats.updates_in += n as u64;
        self.stats.duplicates_dropped += n as u64;
        self.stats.copies_skipped += n as u64;
        true
    }

    /// Notes, after the full path applied a one-update section of `src`
    /// at `ts` whose series resolved to `h`, what proves its copies
    /// duplicates; only when the facts hold now (the series and the source
    /// at `ts` or newer).
    pub(super) fn note_recent(&mut self, src: u32, h: u32, ts: i64) {
        if !self.skip_copies {
            return;
        }
        let Some(m) = self.table.mark(h).filter(|m| m.last_ts >= ts && !m.dying) else {
            return;
        };
        let series = Slot { h, epoch: m.epoch }.tag();
        let Some(src_epoch) = self.table.source_mark(src).map(|m| m.epoch) else {
            return;
        };
        if self.table.source(src).is_none_or(|s| s.last_ts_ms < ts) {
            return;
        }
        // The full path noted its path just now, which applied any due
        // note; should one be due still, it goes first, not lost.
        self.flush_path(src);
        let i = src as usize;
        if self.recent.len() <= i {
            self.recent.resize(i + 1, Recent::default());
        }
        let r = &mut self.recent[i];
        *r = Recent {
            ts,
            series,
            src_epoch,
            has_deferred: false,
            deferred: 0,
        };
    }

    /// Drops what proved copies of `src` duplicates (a series of it or the
    /// source retires), applying its due path note first.
    pub(super) fn forget_recent(&mut self, src: u32) {
        self.flush_path(src);
        if let Some(r) = self.recent.get_mut(src as usize) {
            *r = Recent::default();
        }
    }

    /// Applies the path note a skipped copy of `src` left due (see
    /// `note_path`): before anything reads the source's paths.
    pub(super) fn flush_path(&mut self, src: u32) {
        let Some(r) = self.recent.get_mut(src as usize) else {
            return;
        };
        if !r.has_deferred {
            return;
        }
        r.has_deferred = false;
        let (child, ts) = (r.deferred, r.ts);
        self.note_path_now(src, child, ts);
    }

    /// Applies every due path note (before every source's paths are read).
    pub(super) fn flush_paths(&mut self) {
        for src in 0..self.recent.len() {
            self.flush_path(src as u32);
        }
    }
}

//! Lazy repeats: a quiet source's repeats counted on the source's record
//! ([`Lazy`]) and applied to its series' record only when something else
//! reads or writes it (`settle*`), with the accessors that see through the
//! count (`value`, `update_key`, `held_key`). Apart so the invariant and
//! every place that keeps it read together.

use super::super::quantise::Encoding;
use super::LinkDecoder;
#[cfg(test)]
use super::{RxSeries, RxSource};

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
pub(super) struct Lazy {
    /// Repeats counted and not yet applied.
    pub(super) pending: u32,
    /// The series' wire value with them applied.
    pub(super) cur: i64,
    /// Its last increment (what a repeat adds).
    pub(super) inc: i64,
    /// Its tag ([`LinkDecoder::set_tag`]).
    pub(super) tag: u64,
    /// Its encoding; `None`: nothing held (every repeat goes eagerly).
    pub(super) encoding: Option<Encoding>,
}

/// Most repeats counted before one is applied eagerly (settling costs one
/// step a counted repeat).
pub(super) const LAZY_MAX: u32 = 1 << 16;

impl LinkDecoder {
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
    pub(super) fn lazy_of(&self, source: u32, id: u32) -> Option<&Lazy> {
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
    pub(super) fn settle_all(&mut self) {
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
}

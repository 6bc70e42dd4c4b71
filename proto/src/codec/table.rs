//! The sender's view of its series and sources, and one tick's changes.
//!
//! A [`SeriesTable`] is shared by every link a sender has (a node with R
//! parents quantises once and sends the same values on every link); each
//! [`LinkEncoder`](super::encoder::LinkEncoder) keeps only what it last sent.
//! Handles are the wire ids: a new link learns them from its first keyframe.

use smallvec::SmallVec;

use crate::model::Labels;

use super::quantise::Encoding;

/// A series as the sender holds it.
#[derive(Clone, Debug, PartialEq)]
pub struct SeriesEntry {
    /// Labels, `__name__` included.
    pub labels: Labels,
    /// Handle of the source (node) the series belongs to.
    pub source: u32,
    /// Current wire encoding.
    pub encoding: Encoding,
    /// Current (quantised) value: what a keyframe carries.
    pub value: f64,
}

/// What the table's owner keeps beside each series handle, in the entry's
/// slot: a merger's dedup state, so that an update of a series reads and
/// writes one cache line, not one for the entry and one for a side table.
/// The codec never reads it. It outlives the entry: a removed handle keeps
/// its mark (its `epoch` above all) until the owner changes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SeriesMark {
    /// Timestamp of the latest accepted sample, ms.
    pub last_ts: i64,
    /// Generation of the handle: the owner moves it on every retirement,
    /// so that caches of an earlier occupant miss (wrapping).
    pub epoch: u32,
    /// The owner's tick of the latest accepted update (wrapping).
    pub touched_tick: u32,
    /// The owner's tick of the latest definition it sent (wrapping).
    pub def_tick: u32,
    /// Retired, but kept until the tick ends.
    pub dying: bool,
}

/// A series handle's slot: its entry and its mark, one cache line (64
/// bytes: a 40-byte entry and a 24-byte mark; aligned so no slot straddles
/// two lines).
#[derive(Clone, Debug, Default)]
#[repr(align(64))]
struct Slot {
    entry: Option<SeriesEntry>,
    mark: SeriesMark,
}

/// What the table's owner keeps beside each source handle, in the
/// entry's slot: a merger's per-source state, which every section of the
/// source reads with the entry (two adjacent cache lines, not a third one
/// in a side table). The codec never reads it; it outlives the entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceMark {
    /// Generation of the handle: the owner moves it on every retirement,
    /// so that caches of an earlier occupant miss (wrapping).
    pub epoch: u32,
    /// The links (paths) that delivered the source lately, each with the
    /// newest timestamp it delivered, ms: where a source's R paths meet,
    /// a merger holds a section that leaves a hole behind it. Inline for
    /// R = 2, no pointer to follow.
    pub paths: SmallVec<[(u64, i64); 2]>,
}

/// A source handle's slot: its entry and its mark, in one 128-byte aligned
/// pair of cache lines (88 bytes).
#[derive(Clone, Debug, Default)]
#[repr(align(128))]
struct SourceSlot {
    entry: Option<SourceEntry>,
    mark: SourceMark,
}

/// A source (node) as the sender holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceEntry {
    /// Node name.
    pub name: String,
    /// Sampling tick, ms.
    pub tick_ms: u32,
    /// Timestamp of its latest tick, ms.
    pub last_ts_ms: i64,
}

/// Every live series and source of one sender, by handle.
///
/// Handles of removed entries are reused only after [`SeriesTable::end_tick`],
/// so one frame never names the same handle for two series.
#[derive(Clone, Debug, Default)]
pub struct SeriesTable {
    series: Vec<Slot>,
    free: Vec<u32>,
    pending_free: Vec<u32>,
    sources: Vec<SourceSlot>,
    free_sources: Vec<u32>,
    pending_free_sources: Vec<u32>,
    live: usize,
}

impl SeriesTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a source, returning its handle.
    pub fn add_source(&mut self, name: &str, tick_ms: u32) -> u32 {
        let e = SourceEntry {
            name: name.to_string(),
            tick_ms,
            last_ts_ms: 0,
        };
        alloc(&mut self.sources, &mut self.free_sources, |s| {
            s.entry = Some(e);
        })
    }

    /// Removes a source (its series must be removed by the caller).
    pub fn remove_source(&mut self, h: u32) {
        if let Some(slot) = self.sources.get_mut(h as usize)
            && slot.entry.take().is_some()
        {
            self.pending_free_sources.push(h);
        }
    }

    /// The source behind handle `h`.
    pub fn source(&self, h: u32) -> Option<&SourceEntry> {
        self.sources.get(h as usize).and_then(|s| s.entry.as_ref())
    }

    /// Mutable access to a source.
    pub fn source_mut(&mut self, h: u32) -> Option<&mut SourceEntry> {
        self.sources
            .get_mut(h as usize)
            .and_then(|s| s.entry.as_mut())
    }

    /// The owner's mark of source handle `h`, live or removed (`None`:
    /// never handed out).
    pub fn source_mark(&self, h: u32) -> Option<&SourceMark> {
        self.sources.get(h as usize).map(|s| &s.mark)
    }

    /// Mutable access to the owner's mark of source handle `h`.
    pub fn source_mark_mut(&mut self, h: u32) -> Option<&mut SourceMark> {
        self.sources.get_mut(h as usize).map(|s| &mut s.mark)
    }

    /// Every source handle's mark, live or removed.
    pub fn source_marks_mut(&mut self) -> impl Iterator<Item = &mut SourceMark> {
        self.sources.iter_mut().map(|s| &mut s.mark)
    }

    /// Live sources with their handles, in handle order.
    pub fn sources(&self) -> impl Iterator<Item = (u32, &SourceEntry)> {
        self.sources
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.entry.as_ref().map(|s| (i as u32, s)))
    }

    /// Adds a series, returning its handle.
    /// A reused handle keeps its slot's [`SeriesMark`].
    pub fn insert(&mut self, entry: SeriesEntry) -> u32 {
        self.live += 1;
        alloc(&mut self.series, &mut self.free, |s| s.entry = Some(entry))
    }

    /// Removes a series; its handle is reusable after `end_tick`. Its mark
    /// stays.
    pub fn remove(&mut self, h: u32) -> Option<SeriesEntry> {
        let e = self.series.get_mut(h as usize)?.entry.take()?;
        self.live -= 1;
        self.pending_free.push(h);
        Some(e)
    }

    /// The series behind handle `h`.
    pub fn get(&self, h: u32) -> Option<&SeriesEntry> {
        self.series.get(h as usize).and_then(|s| s.entry.as_ref())
    }

    /// Mutable access to a series.
    pub fn get_mut(&mut self, h: u32) -> Option<&mut SeriesEntry> {
        self.series
            .get_mut(h as usize)
            .and_then(|s| s.entry.as_mut())
    }

    /// The owner's mark of handle `h`, live or removed (`None`: never
    /// handed out).
    pub fn mark(&self, h: u32) -> Option<&SeriesMark> {
        self.series.get(h as usize).map(|s| &s.mark)
    }

    /// Mutable access to the owner's mark of handle `h`, live or removed.
    pub fn mark_mut(&mut self, h: u32) -> Option<&mut SeriesMark> {
        self.series.get_mut(h as usize).map(|s| &mut s.mark)
    }

    /// A live series and its mark, from one slot.
    pub fn get_marked_mut(&mut self, h: u32) -> Option<(&mut SeriesEntry, &mut SeriesMark)> {
        let s = self.series.get_mut(h as usize)?;
        Some((s.entry.as_mut()?, &mut s.mark))
    }

    /// Live series with their handles, in handle order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &SeriesEntry)> {
        self.series
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.entry.as_ref().map(|s| (i as u32, s)))
    }

    /// Live series with their handles and marks, in handle order.
    pub fn iter_marked(&self) -> impl Iterator<Item = (u32, &SeriesEntry, &SeriesMark)> {
        self.series
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.entry.as_ref().map(|e| (i as u32, e, &s.mark)))
    }

    /// Number of live series.
    pub fn len(&self) -> usize {
        self.live
    }

    /// True when no series is live.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// One past the largest handle ever used (sizes per-link state).
    pub fn capacity(&self) -> usize {
        self.series.len()
    }

    /// Makes handles removed during this tick reusable. Call after every link
    /// has encoded the tick's changeset.
    pub fn end_tick(&mut self) {
        self.free.append(&mut self.pending_free);
        self.free_sources.append(&mut self.pending_free_sources);
    }
}

/// A handle: a freed one (its slot keeps its mark) or a new slot; `put`
/// fills the slot's entry.
fn alloc<S: Default>(slots: &mut Vec<S>, free: &mut Vec<u32>, put: impl FnOnce(&mut S)) -> u32 {
    // A freed handle was handed out before: its slot exists.
    if let Some(h) = free.pop()
        && let Some(slot) = slots.get_mut(h as usize)
    {
        put(slot);
        return h;
    }
    let mut slot = S::default();
    put(&mut slot);
    slots.push(slot);
    (slots.len() - 1) as u32
}

/// Updates of one source at one timestamp.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChangeSection {
    /// Source handle.
    pub source: u32,
    /// Timestamp of this tick of the source, ms.
    pub ts_ms: i64,
    /// (series handle, quantised value), in any order.
    pub updates: Vec<(u32, f64)>,
    /// Series of this source that ended at `ts_ms`, after its updates.
    pub retired: Vec<u32>,
}

/// Everything that changed in one tick, as the table's owner saw it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Changeset {
    /// Frame timestamp, ms.
    pub ts_ms: i64,
    /// Sources added since the last tick.
    pub new_sources: Vec<u32>,
    /// Series added, or whose encoding changed, since the last tick.
    pub defs: Vec<u32>,
    /// Per-source updates; a section without updates is a heartbeat.
    pub sections: Vec<ChangeSection>,
    /// Sources removed this tick.
    pub retired_sources: Vec<u32>,
}

impl Changeset {
    /// An empty changeset at `ts_ms`.
    pub fn new(ts_ms: i64) -> Self {
        Self {
            ts_ms,
            ..Self::default()
        }
    }

    /// Number of value updates across sections.
    pub fn update_count(&self) -> usize {
        self.sections.iter().map(|s| s.updates.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A series' entry and mark share one cache line.
    #[test]
    fn a_slot_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Slot>(), 64);
        assert_eq!(std::mem::align_of::<Slot>(), 64);
        assert_eq!(std::mem::size_of::<SourceSlot>(), 128);
    }

    /// A removed handle keeps its mark, and a reused one finds it again.
    #[test]
    fn marks_outlive_entries() {
        let mut t = SeriesTable::new();
        let s = t.add_source("n", 1000);
        let e = SeriesEntry {
            labels: Labels::from_pairs([("__name__", "x")]),
            source: s,
            encoding: Encoding::GaugeInt,
            value: 1.0,
        };
        let h = t.insert(e.clone());
        t.mark_mut(h).expect("handed out").epoch = 7;
        assert!(t.remove(h).is_some());
        assert_eq!(t.mark(h).map(|m| m.epoch), Some(7));
        t.end_tick();
        assert_eq!(t.insert(e), h);
        let (_, m) = t.get_marked_mut(h).expect("live again");
        assert_eq!(m.epoch, 7);
        assert_eq!(t.mark(h + 1), None);
    }
}

//! [`LiveStore`]: change-only fabric series, explicit samples, `up`, retention.
//!
//! A fabric series stores only its change points (in [`Chunk`]s). Reading
//! it re-creates what a Prometheus scraping every tick would have stored:
//! the change point, then the same value at each tick of its source while
//! the source's heartbeats cover that tick, until the next change point or
//! a retirement (a staleness-marker change point). When the source goes
//! silent past its deadline a staleness marker follows the last covered
//! tick. Deadlines are checked in [`LiveStore::maintain`], with a `now` the
//! caller passes in.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};

use canopy_proto::model::{is_stale_nan, stale_nan};

use super::chunk::ChunkView;
use super::cold::{ColdFiles, ColdMaps, ColdStats};
use super::index::SeriesIndex;
use super::intern::{Interner, LabelArena, Syms};
use super::{Appender, Labels, Sample, StoreError};

/// Typed settings of a [`LiveStore`].
#[derive(Clone, Debug)]
pub struct LiveStoreConfig {
    /// How long data is kept, in ms (default 2 h).
    pub retention_ms: i64,
    /// Maximum number of series held (default 1 000 000).
    pub max_series: usize,
    /// A source is dead after this many ticks without a heartbeat (default 3)...
    pub deadline_ticks: u32,
    /// ...or after this many ms, whichever is larger (default 5 000).
    pub min_deadline_ms: i64,
}

impl Default for LiveStoreConfig {
    fn default() -> Self {
        LiveStoreConfig {
            retention_ms: 2 * 3600 * 1000,
            max_series: 1_000_000,
            deadline_ticks: 3,
            min_deadline_ms: 5_000,
        }
    }
}

/// Granularity of the retention walk over every series, ms (see
/// [`LiveStore::maintain`]).
const RETENTION_STEP_MS: i64 = 60_000;

/// Counters the store keeps about itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Series currently held (the synthetic `up` series excluded).
    pub series: usize,
    /// Change points held.
    pub change_points: usize,
    /// Encoded bytes of all chunks.
    pub chunk_bytes: usize,
    /// New series refused because of the series limit.
    pub rejected_series: u64,
    /// Samples refused because they were out of order.
    pub out_of_order: u64,
    /// Sources declared dead by a missed deadline.
    pub sources_died: u64,
}

/// Approximate heap bytes held by each part of a [`LiveStore`] (capacity,
/// not length, so growth slack shows; allocator overhead excluded). For
/// finding where memory per series goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryBreakdown {
    /// The series table (one slot per id, freed ones included).
    pub entries: usize,
    /// Interned label ids of every series.
    pub labels: usize,
    /// The fixed part of each series' sealed-chunk buffer (reference
    /// counts and chunk count; the open chunk's header is in `entries`).
    pub chunk_lists: usize,
    /// Sealed chunks' index entries (first timestamp, span, count, bit length).
    pub chunk_headers: usize,
    /// Encoded chunk bytes in use.
    pub chunk_bytes: usize,
    /// Allocated but unused chunk bytes (open chunks' growth room).
    pub chunk_slack: usize,
    /// The label-set lookup table and postings lists.
    pub index: usize,
    /// Interned strings and their lookup table.
    pub strings: usize,
}

impl MemoryBreakdown {
    /// Sum of all parts.
    pub fn total(&self) -> usize {
        self.entries
            + self.labels
            + self.chunk_lists
            + self.chunk_headers
            + self.chunk_bytes
            + self.chunk_slack
            + self.index
            + self.strings
    }
}

/// Where an append found its series, for the next append of the same label
/// set to skip the lookup (the remote_write receiver gets one from
/// [`LiveStore::find_hint`] for each series of a request). It is used only
/// while it still names that series:
/// same store, and the series' slot not freed since (each free moves the
/// slot's generation on). Only ever pass it back with the label set it was
/// filled for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SeriesHint {
    /// The store's instance number (0: no hint).
    store: u32,
    id: u32,
    generation: u32,
}

impl SeriesHint {
    /// `(store instance, slot, slot generation)` when this is a hint (not
    /// the default). The triple names one label set for good: a slot that
    /// is freed moves its generation on, and a wrapped generation moves the
    /// store to a new instance. The write-ahead log keys its series
    /// dictionary on it, so a hinted op is logged without hashing labels.
    pub fn slot(&self) -> Option<(u32, u32, u32)> {
        (self.store != 0).then_some((self.store, self.id, self.generation))
    }
}

/// Instance numbers of stores, for [`SeriesHint`]s (0 is never one).
static NEXT_INSTANCE: AtomicU32 = AtomicU32::new(1);

/// One period during which a source's heartbeats arrived in time.
#[derive(Clone, Copy, Debug)]
struct Alive {
    start: i64,
    end: i64,
    /// The source went silent past its deadline after `end`.
    closed: bool,
}

#[derive(Clone, Debug)]
struct Source {
    name: String,
    tick_ms: i64,
    alive: Vec<Alive>,
}

impl Source {
    /// The alive period that covers or follows `ts`.
    fn period_from(&self, ts: i64) -> Option<&Alive> {
        let i = self.alive.partition_point(|a| a.end < ts);
        self.alive.get(i)
    }
}

/// The in-memory live store. See the module docs for the model.
#[derive(Debug, Default)]
pub struct LiveStore {
    cfg: LiveStoreConfig,
    entries: Vec<Option<Entry>>,
    free: Vec<usize>,
    /// Series currently held.
    live: usize,
    /// Label sets and postings of the held series.
    index: SeriesIndex,
    strings: Interner,
    /// Every series' interned label ids (an [`Entry`] keeps its offset).
    label_ids: LabelArena,
    sources: Vec<Source>,
    source_ids: HashMap<String, usize, foldhash::fast::RandomState>,
    now_ms: i64,
    stats: StoreStats,
    /// This store's number in [`SeriesHint`]s, taken when the first hint is
    /// given (0 until then, and again after a generation wrapped).
    instance: u32,
    /// Generation of each slot of `entries`, moved on when the slot is
    /// freed (missing: 0). Grows only as slots are freed.
    generations: Vec<u32>,
    /// Moved on whenever a series is added or removed: a cached selection
    /// holds only for the epoch it was made in.
    series_epoch: u64,
    /// Recent selections, in label order (see [`query::Selections`]).
    selections: std::sync::Mutex<query::Selections>,
    /// The cold tier sealed chunks go to (none: all stay in memory).
    cold: Option<ColdFiles>,
}

/// The cold tier of a store without one.
static NO_COLD: ColdMaps = ColdMaps::empty();

/// Seals `view` (its successor begins at `succeeded_at`) into `e`: into
/// the cold tier when there is one and `e` keeps no sealed chunk in memory
/// (cold chunks are all older than those), else into memory.
fn seal(cold: Option<&mut ColdFiles>, e: &mut Entry, view: ChunkView<'_>, succeeded_at: i64) {
    if e.sealed.is_empty()
        && let Some(c) = cold
        && let Some(r) = c.append(&view, e.cold, succeeded_at)
    {
        e.cold = r;
        return;
    }
    e.sealed.push(view);
}

impl LiveStore {
    /// An empty store with the given settings.
    pub fn new(cfg: LiveStoreConfig) -> Self {
        LiveStore {
            cfg,
            ..Default::default()
        }
    }

    /// Sends sealed chunks to `cold` from now on (call before adding data:
    /// with a data directory, the shell opens the tier in it).
    pub fn attach_cold(&mut self, cold: ColdFiles) {
        self.cold = Some(cold);
    }

    /// The cold tier's counters, if there is one.
    pub fn cold_stats(&self) -> Option<ColdStats> {
        self.cold.as_ref().map(ColdFiles::stats)
    }

    /// What a read of cold chunks needs now.
    #[inline]
    fn cold_read(&self) -> entry::ColdRead<'_> {
        entry::ColdRead {
            maps: self.cold.as_ref().map_or(&NO_COLD, ColdFiles::maps),
            cutoff: self.now_ms.saturating_sub(self.cfg.retention_ms),
        }
    }

    /// The newest `now` passed to [`LiveStore::maintain`], ms.
    pub fn now_ms(&self) -> i64 {
        self.now_ms
    }

    /// The store's settings.
    pub fn config(&self) -> &LiveStoreConfig {
        &self.cfg
    }

    /// The store's counters. Chunks in the cold tier are counted by the
    /// files held (those past retention too, until their file goes): a
    /// walk of every cold chunk would read them all back.
    pub fn stats(&self) -> StoreStats {
        let mut s = self.stats;
        s.series = self.live;
        s.change_points = 0;
        s.chunk_bytes = 0;
        let none = entry::ColdRead {
            maps: &NO_COLD,
            cutoff: i64::MIN,
        };
        for e in self.entries.iter().flatten() {
            for c in e.chunks(none) {
                s.change_points += c.len();
                s.chunk_bytes += c.byte_len();
            }
        }
        if let Some(c) = self.cold_stats() {
            s.change_points += c.samples_held as usize;
            s.chunk_bytes += c.bytes_held as usize;
        }
        s
    }

    /// Where the store's heap goes, by structure (a walk over every series).
    pub fn memory_breakdown(&self) -> MemoryBreakdown {
        let mut m = MemoryBreakdown {
            entries: self.entries.capacity() * std::mem::size_of::<Option<Entry>>(),
            index: self.index.heap_bytes(),
            strings: self.strings.heap_bytes(),
            labels: self.label_ids.heap_bytes(),
            ..MemoryBreakdown::default()
        };
        for e in self.entries.iter().flatten() {
            let (fixed, index, runs) = e.sealed.heap_bytes();
            m.chunk_lists += fixed;
            m.chunk_headers += index;
            m.chunk_bytes += runs + e.head.byte_len();
            m.chunk_slack += e.head.slack_bytes();
        }
        m
    }

    fn deadline(&self, src: &Source) -> i64 {
        (src.tick_ms * i64::from(self.cfg.deadline_ticks)).max(self.cfg.min_deadline_ms)
    }

    fn source_id(&mut self, name: &str) -> usize {
        if let Some(&i) = self.source_ids.get(name) {
            return i;
        }
        self.sources.push(Source {
            name: name.to_string(),
            tick_ms: 1000,
            alive: Vec::new(),
        });
        let i = self.sources.len() - 1;
        self.source_ids.insert(name.to_string(), i);
        i
    }

    /// Checks heartbeat deadlines and applies retention. Call it regularly
    /// (e.g. once per second) with the current time; nothing else reads a
    /// clock.
    pub fn maintain(&mut self, now_ms: i64) {
        let before = self.now_ms;
        self.now_ms = self.now_ms.max(now_ms);
        for i in 0..self.sources.len() {
            let dl = self.deadline(&self.sources[i]);
            let src = &mut self.sources[i];
            if let Some(last) = src.alive.last_mut()
                && !last.closed
                && now_ms - last.end > dl
            {
                last.closed = true;
                self.stats.sources_died += 1;
                tracing::info!(source = %src.name, last_heartbeat_ms = last.end, "source silent past its deadline, its series go stale");
            }
        }
        let cutoff = self.now_ms - self.cfg.retention_ms;
        // The per-series retention walk runs when the cutoff enters a new
        // `RETENTION_STEP_MS` step, not on every call: at once a second it
        // was O(series) per second for series that did not change. Queries
        // clamp to the cutoff anyway, so what it drops up to a step late is
        // never answered; the decision depends only on `now_ms` (kept in
        // snapshots), so a WAL replay takes the same steps.
        let step = |t: i64| t.div_euclid(RETENTION_STEP_MS);
        if step(before - self.cfg.retention_ms) == step(cutoff) && before != 0 {
            return;
        }
        if let Some(c) = &mut self.cold {
            c.expire(cutoff);
        }
        for src in &mut self.sources {
            let keep_from = src.alive.partition_point(|a| a.end < cutoff);
            let keep_from = keep_from.min(src.alive.len().saturating_sub(1));
            src.alive.drain(..keep_from);
        }
        let mut dead = Vec::new();
        for (id, slot) in self.entries.iter_mut().enumerate() {
            let Some(e) = slot else { continue };
            e.drop_before(cutoff);
            let Some((last_ts, last_v)) = e.last() else {
                dead.push(id);
                continue;
            };
            let live_until = if is_stale_nan(last_v) {
                last_ts
            } else {
                match e.source().and_then(|s| self.sources.get(s as usize)) {
                    Some(src) => match src.alive.last() {
                        Some(a) if !a.closed => i64::MAX,
                        Some(a) => a.end.max(last_ts),
                        None => last_ts,
                    },
                    None => last_ts,
                }
            };
            if live_until < cutoff {
                dead.push(id);
            }
        }
        let mut gone = Vec::with_capacity(dead.len());
        for id in dead {
            if let Some(e) = self.entries[id].take() {
                self.series_epoch += 1;
                gone.push((id as u32, e.labels));
                self.free.push(id);
                self.live -= 1;
                self.next_generation(id);
            }
        }
        if !gone.is_empty() {
            let held: Vec<(u32, Syms)> = gone
                .iter()
                .map(|&(id, at)| (id, self.label_ids.get(at)))
                .collect();
            let mut sets: Vec<(u32, &[u32])> =
                held.iter().map(|(id, s)| (*id, s.as_slice())).collect();
            self.index.remove_all(&mut sets, &self.strings);
            // After the index (it hashes the sets' strings): strings no
            // series holds any more are freed here.
            for (_, at) in gone {
                self.label_ids.free(&mut self.strings, at);
            }
            if self.label_ids.wants_compaction() {
                self.label_ids
                    .compact(self.entries.iter_mut().flatten().map(|e| &mut e.labels));
            }
        }
    }

    /// The interned label ids of `e`.
    #[inline]
    fn syms(&self, e: &Entry) -> Syms {
        self.label_ids.get(e.labels)
    }

    /// Voids every [`SeriesHint`] naming slot `id` (it was freed).
    fn next_generation(&mut self, id: usize) {
        if self.generations.len() <= id {
            self.generations.resize(id + 1, 0);
        }
        if let Some(g) = self.generations.get_mut(id) {
            *g = g.wrapping_add(1);
            if *g == 0 {
                // Wrapped: an old hint could name this slot again, so
                // every hint given so far is voided with a new instance.
                self.instance = 0;
            }
        }
    }

    fn generation(&self, id: usize) -> u32 {
        self.generations.get(id).copied().unwrap_or(0)
    }

    /// The series `hint` names, if it still holds the series it was filled for.
    fn hinted(&self, hint: &SeriesHint) -> Option<usize> {
        let id = hint.id as usize;
        (hint.store != 0
            && hint.store == self.instance
            && self.entries.get(id).is_some_and(Option::is_some)
            && self.generation(id) == hint.generation)
            .then_some(id)
    }

    fn hint_for(&mut self, id: usize) -> SeriesHint {
        while self.instance == 0 {
            // 0 is never an instance (skipped if the counter wraps).
            self.instance = NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed);
        }
        SeriesHint {
            store: self.instance,
            id: id as u32,
            generation: self.generation(id),
        }
    }

    /// The id of the held series `labels` whose index key is `h`.
    fn find(&self, h: u64, labels: &Labels) -> Option<usize> {
        let is_it = |i: u32| {
            self.entries
                .get(i as usize)
                .and_then(Option::as_ref)
                .is_some_and(|e| self.strings.same(&self.syms(e), labels))
        };
        self.index.find(h, is_it).map(|i| i as usize)
    }

    fn entry_id(&mut self, labels: &Labels, create: bool) -> Result<Option<usize>, StoreError> {
        // One seeded hash over the label strings, confirmed against the
        // held series' interned labels: no per-string lookups.
        let h = self.index.hash(labels);
        if let Some(id) = self.find(h, labels) {
            return Ok(Some(id));
        }
        if !create {
            return Ok(None);
        }
        if labels.name().is_empty() {
            return Err(StoreError::NoMetricName {
                labels: labels.to_string(),
            });
        }
        if self.live >= self.cfg.max_series || self.entries.len() >= u32::MAX as usize {
            self.stats.rejected_series += 1;
            tracing::warn!(
                limit = self.cfg.max_series,
                "series limit reached, new series refused"
            );
            return Err(StoreError::TooManySeries {
                limit: self.cfg.max_series,
                labels: labels.to_string(),
            });
        }
        let Some(syms) = self.label_ids.intern(&mut self.strings, labels) else {
            self.stats.rejected_series += 1;
            return Err(StoreError::TooManySeries {
                limit: self.live,
                labels: labels.to_string(),
            });
        };
        let e = Entry::new(syms, None);
        let id = match self.free.pop() {
            Some(id) => {
                self.entries[id] = Some(e);
                id
            }
            None => {
                self.entries.push(Some(e));
                self.entries.len() - 1
            }
        };
        self.live += 1;
        self.series_epoch += 1;
        if let Some(e) = &self.entries[id] {
            self.index
                .insert(h, &self.label_ids.get(e.labels), id as u32);
        }
        Ok(Some(id))
    }

    fn push_point(
        &mut self,
        id: usize,
        src: Option<usize>,
        ts: i64,
        v: f64,
    ) -> Result<(), StoreError> {
        let period_start = src
            .and_then(|s| self.sources.get(s))
            .and_then(|s| s.alive.last())
            .filter(|a| !a.closed)
            .map(|a| a.start);
        let Some(e) = self.entries.get_mut(id).and_then(Option::as_mut) else {
            return Ok(());
        };
        if src.is_some() {
            e.source_plus_one = src
                .and_then(|s| u32::try_from(s).ok())
                .and_then(|s| s.checked_add(1))
                .unwrap_or(0);
        }
        if let Some((last_ts, last_v)) = e.last() {
            let same = last_v.to_bits() == v.to_bits();
            if ts < last_ts || (ts == last_ts && !same) {
                self.stats.out_of_order += 1;
                return Err(StoreError::OutOfOrder {
                    labels: self
                        .strings
                        .labels(&self.label_ids.get(e.labels))
                        .to_string(),
                    ts_ms: ts,
                    newest_ms: last_ts,
                });
            }
            if ts == last_ts {
                return Ok(());
            }
            // Change-only: an unchanged value is implied while the source
            // has been alive since the last change point.
            if same
                && src.is_some()
                && !is_stale_nan(v)
                && period_start.is_some_and(|p| p <= last_ts)
            {
                return Ok(());
            }
        }
        if e.head.is_full() || !e.head.fits(ts) {
            // Sealed (full, or ~49 days past its first sample): its bytes
            // join the series' sealed buffer, the entry starts a new open
            // chunk.
            let next = std::mem::take(&mut e.head);
            seal(self.cold.as_mut(), e, next.view(), ts);
        }
        e.head.push(ts, v);
        Ok(())
    }

    /// Appends explicit samples of one series (oldest first), resolving the
    /// series once; each sample's result goes to `f` with its index.
    pub fn append_samples(
        &mut self,
        labels: &Labels,
        samples: &[Sample],
        f: &mut dyn FnMut(usize, Result<(), StoreError>),
    ) {
        self.append_samples_hinted(labels, samples, &mut SeriesHint::default(), f);
    }

    /// [`LiveStore::append_samples`], finding the series through `hint`
    /// when it still names it (no label-set lookup), else by its labels,
    /// and then refreshing `hint`. `hint` must be one filled by an earlier
    /// call with this same label set, or the default.
    pub fn append_samples_hinted(
        &mut self,
        labels: &Labels,
        samples: &[Sample],
        hint: &mut SeriesHint,
        f: &mut dyn FnMut(usize, Result<(), StoreError>),
    ) {
        let id = match self.hinted(hint) {
            Some(id) => {
                debug_assert!(
                    self.entries
                        .get(id)
                        .and_then(Option::as_ref)
                        .is_some_and(|e| self.strings.same(&self.syms(e), labels)),
                    "a series hint passed with another label set"
                );
                id
            }
            None => match self.entry_id(labels, true) {
                Ok(Some(id)) => {
                    *hint = self.hint_for(id);
                    id
                }
                Ok(None) => return,
                Err(e) => {
                    for i in 0..samples.len() {
                        f(i, Err(e.clone()));
                    }
                    return;
                }
            },
        };
        for (i, smp) in samples.iter().enumerate() {
            f(i, self.push_point(id, None, smp.ts_ms, smp.value));
        }
    }

    /// The hint of the held series whose (name, value) pairs, in order,
    /// are `pairs` (as bytes), found through the store's own index with no
    /// label set built: how the remote_write receiver maps a request's
    /// label bytes to a series, so nothing outside the store keeps a copy
    /// of its labels. Confirmed pair by pair against the series' interned
    /// strings, so a hash collision is a miss. `None` when no such series
    /// is held, or before the store gave its first hint (that needs `&mut`).
    pub fn find_hint<'a, I>(&self, pairs: I) -> Option<SeriesHint>
    where
        I: Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
    {
        self.find_hint_encoded(None, pairs)
    }

    /// [`Self::find_hint`] given, when the caller has it, `encoded`: the
    /// pairs' canonical remote_write encoding (a request's label fields
    /// as they came), hashed in one write instead of pair by pair.
    pub fn find_hint_encoded<'a, I>(&self, encoded: Option<&[u8]>, pairs: I) -> Option<SeriesHint>
    where
        I: Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
    {
        if self.instance == 0 {
            return None;
        }
        let h = match encoded {
            Some(b) => self.index.hash_encoded(b),
            None => self.index.hash_pairs(pairs.clone()),
        };
        let is_it = |i: u32| {
            self.entries
                .get(i as usize)
                .and_then(Option::as_ref)
                .is_some_and(|e| {
                    self.label_ids
                        .same_pairs(e.labels, &self.strings, pairs.clone())
                })
        };
        let id = self.index.find(h, is_it)? as usize;
        Some(SeriesHint {
            store: self.instance,
            id: u32::try_from(id).ok()?,
            generation: self.generation(id),
        })
    }

    /// Appends explicit samples (oldest first) to the series `hint` names,
    /// each result to `f` with its index, and returns true; returns false
    /// with nothing appended (and `f` not called) when the hint no longer
    /// names a held series (it was removed since): the caller then appends
    /// by label set.
    pub fn append_samples_at(
        &mut self,
        hint: &SeriesHint,
        samples: &[Sample],
        f: &mut impl FnMut(usize, Result<(), StoreError>),
    ) -> bool {
        let Some(id) = self.hinted(hint) else {
            return false;
        };
        for (i, smp) in samples.iter().enumerate() {
            f(i, self.push_point(id, None, smp.ts_ms, smp.value));
        }
        true
    }

    /// The label set of the series `hint` names, if it still names one
    /// (built from the interned strings: for the few callers that need a
    /// series' labels by hint, such as forwarding what was written).
    pub fn hinted_labels(&self, hint: &SeriesHint) -> Option<Labels> {
        let id = self.hinted(hint)?;
        let e = self.entries.get(id)?.as_ref()?;
        Some(self.strings.labels(&self.syms(e)))
    }
}

impl Appender for LiveStore {
    fn append(
        &mut self,
        source: Option<&str>,
        labels: &Labels,
        ts_ms: i64,
        value: f64,
    ) -> Result<(), StoreError> {
        let src = source.map(|s| self.source_id(s));
        let Some(id) = self.entry_id(labels, true)? else {
            return Ok(());
        };
        self.push_point(id, src, ts_ms, value)
    }

    fn heartbeat(&mut self, source: &str, ts_ms: i64, tick_ms: u32) {
        let id = self.source_id(source);
        let dl = self.deadline(&self.sources[id]);
        let src = &mut self.sources[id];
        src.tick_ms = i64::from(tick_ms.max(1));
        match src.alive.last_mut() {
            Some(a) if !a.closed && ts_ms - a.end <= dl => a.end = a.end.max(ts_ms),
            Some(a) if ts_ms <= a.end => {}
            last => {
                if let Some(a) = last {
                    a.closed = true;
                }
                src.alive.push(Alive {
                    start: ts_ms,
                    end: ts_ms,
                    closed: false,
                });
            }
        }
    }

    fn retire(&mut self, labels: &Labels, ts_ms: i64) {
        if let Ok(Some(id)) = self.entry_id(labels, false) {
            let already = self.entries[id]
                .as_ref()
                .and_then(Entry::last)
                .is_some_and(|(_, v)| is_stale_nan(v));
            if !already {
                let _ = self.push_point(id, None, ts_ms, stale_nan());
            }
        }
    }
}

mod entry;
use entry::Entry;
mod query;
mod read;
mod snapshot;
pub use snapshot::SnapshotCut;

#[cfg(test)]
mod cold_tests;
#[cfg(test)]
mod find_tests;
#[cfg(test)]
mod snapshot_tests;
#[cfg(test)]
mod tests;

//! [`LiveStore`] as a [`Querier`]: selections, with label sets cut down to
//! an aggregation's grouping labels and streamed one series at a time.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError};

use canopy_proto::model::METRIC_NAME;

use super::entry::ColdRead;
use super::{Entry, LiveStore};
use crate::store::intern::{Interner, Syms};
use crate::store::{Labels, MatchOp, Matcher, Querier, Series, StoreError};

impl Querier for LiveStore {
    fn select(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
        limit: usize,
    ) -> Result<Vec<Series>, StoreError> {
        self.select_labels(matchers, (mint, maxt), limit, None)
    }

    fn select_keep(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
        limit: usize,
        keep: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<Series>, StoreError> {
        self.select_labels(matchers, (mint, maxt), limit, Some(keep))
    }

    fn cardinality(&self, limit: usize) -> Option<crate::store::Cardinality> {
        let postings = self
            .index
            .posting_counts()
            .map(|(n, v, c)| (self.strings.get(n), self.strings.get(v), c));
        let mut out = crate::store::Cardinality::from_postings(postings, limit);
        out.num_series = self.live;
        for e in self.entries.iter().flatten() {
            out.chunk_count += e.chunk_count();
            let first = e.chunks(self.cold_read()).next().map(|c| c.first_ts());
            if let (Some(a), Some((b, _))) = (first, e.last()) {
                let (lo, hi) = out.time_range.get_or_insert((a, b));
                *lo = (*lo).min(a);
                *hi = (*hi).max(b);
            }
        }
        if let Some(c) = self.cold_stats() {
            out.chunk_count += c.chunks_held as usize;
        }
        Some(out)
    }

    fn select_each(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
        limit: usize,
        keep: &dyn Fn(&str) -> bool,
        f: &mut dyn FnMut(&Series, usize) -> bool,
        done: &mut crate::store::WholeLabels<'_>,
    ) -> Result<(), StoreError> {
        let up = Matcher::metric_name(matchers).is_none_or(|n| n == "up");
        if up && !self.sources.is_empty() {
            // `up` series join the selection (see `select_labels`).
            let all = self.select_labels(matchers, (mint, maxt), limit, None)?;
            crate::store::each_cut_down(all, keep, f, done);
            return Ok(());
        }
        let mint = mint.max(self.now_ms.saturating_sub(self.cfg.retention_ms));
        // Every matching series in label order (those without samples in
        // the window are skipped below: the same order as `select`'s).
        let entries = self.entries_of(&self.selection(matchers));
        let mut labels = KeptLabels::new(keep);
        // One buffer for every series' samples.
        let mut cur = Series {
            labels: Labels::default(),
            samples: Vec::new(),
            start_ms: None,
        };
        let mut n = 0usize;
        // A series' handle is its place in `entries`.
        for (i, e) in entries.iter().enumerate() {
            if i % PRELOAD_BATCH == 0 {
                let batch = &entries[i..(i + PRELOAD_BATCH).min(entries.len())];
                self.preload_chunks(batch, mint, maxt);
            }
            cur.samples.clear();
            self.materialise_into(e, mint, maxt, &mut cur.samples);
            if cur.samples.is_empty() {
                continue;
            }
            if n >= limit {
                return Err(StoreError::SelectLimit { limit });
            }
            n += 1;
            cur.labels = labels.of(&self.strings, &self.syms(e));
            if !f(&cur, i) {
                break;
            }
        }
        done(&|i| {
            entries
                .get(i)
                .map(|e| self.strings.labels(&self.syms(e)))
                .unwrap_or_default()
        });
        Ok(())
    }
}

/// Series whose chunks are loaded into the cache ahead of their decoding
/// at a time (see `LiveStore::preload_chunks`): enough for the CPU to
/// overlap their misses, few enough that what is loaded (up to ~120 lines
/// a series for an hour of 1 s samples) is still in the cache when read.
const PRELOAD_BATCH: usize = 64;

/// Most selections a store keeps in [`Selections`].
const MAX_SELECTIONS: usize = 64;
/// Most series ids the kept selections hold in all (16 MiB).
const MAX_SELECTED_IDS: usize = 1 << 22;

/// Recent selections by plain (`=`, `!=`) matchers: the ids of the series
/// each matches, in label order. Finding and ordering a selection reads
/// every candidate's label ids and many label strings, all scattered in
/// memory, and a dashboard asks the same selections again and again while
/// the set of series stays the same. Valid for one series epoch of the
/// store (a series added or removed moves it on); bounded in selections
/// and ids, emptied when full.
#[derive(Debug, Default)]
pub(super) struct Selections {
    epoch: u64,
    held: usize,
    map: HashMap<Vec<u8>, Arc<[u32]>, foldhash::fast::RandomState>,
}

impl Selections {
    /// Keeps `ids` as the selection of `key`, made at series epoch `epoch`.
    fn insert(&mut self, epoch: u64, key: Vec<u8>, ids: Arc<[u32]>) {
        if self.epoch != epoch
            || self.map.len() >= MAX_SELECTIONS
            || self.held + ids.len() > MAX_SELECTED_IDS
        {
            self.map.clear();
            self.held = 0;
            self.epoch = epoch;
        }
        if ids.len() <= MAX_SELECTED_IDS {
            self.held += ids.len();
            if let Some(old) = self.map.insert(key, ids) {
                self.held -= old.len();
            }
        }
    }
}

/// True when `s`'s cache holds the selection of `matchers` (for tests).
#[cfg(test)]
pub(super) fn cached(s: &LiveStore, matchers: &[Matcher]) -> bool {
    let c = s.selections.lock().unwrap_or_else(PoisonError::into_inner);
    c.epoch == s.series_epoch && selection_key(matchers).is_some_and(|k| c.map.contains_key(&k))
}

/// The key of `matchers` in [`Selections`] (each name and value length
/// first, so no two lists share one), or `None` when one is a regex.
fn selection_key(matchers: &[Matcher]) -> Option<Vec<u8>> {
    let mut k = Vec::new();
    for m in matchers {
        let (op, v) = match &m.op {
            MatchOp::Equal(v) => (0u8, v),
            MatchOp::NotEqual(v) => (1, v),
            _ => return None,
        };
        k.push(op);
        for s in [&m.name, v] {
            k.extend_from_slice(&(s.len() as u64).to_le_bytes());
            k.extend_from_slice(s.as_bytes());
        }
    }
    Some(k)
}

/// Label sets cut down to the labels a `keep` accepts, built once per
/// distinct cut-down set and shared by the series that have it.
struct KeptLabels<'k> {
    keep: &'k dyn Fn(&str) -> bool,
    /// Whether `keep` accepts a label name, by its interned id (a
    /// selection holds few distinct names).
    names: Vec<(u32, bool)>,
    /// The last set's label names by position, each with whether `keep`
    /// accepts it: the series of a selection mostly have the same names,
    /// so a name is mostly checked with one comparison.
    at: Vec<(u32, bool)>,
    shared: HashMap<Vec<u32>, Labels, foldhash::fast::RandomState>,
    key: Vec<u32>,
    /// The last set given out and its key: series come in label order,
    /// so the next one mostly has the same cut-down set.
    last: Option<Labels>,
    last_key: Vec<u32>,
}

impl<'k> KeptLabels<'k> {
    fn new(keep: &'k dyn Fn(&str) -> bool) -> Self {
        KeptLabels {
            keep,
            names: Vec::new(),
            at: Vec::new(),
            shared: HashMap::default(),
            key: Vec::new(),
            last: None,
            last_key: Vec::new(),
        }
    }

    /// The cut-down label set of the interned set `syms`.
    fn of(&mut self, strings: &Interner, syms: &[u32]) -> Labels {
        self.key.clear();
        for (i, p) in syms.chunks_exact(2).enumerate() {
            let kept = match self.at.get(i) {
                Some(&(n, k)) if n == p[0] => k,
                _ => {
                    let k = match self.names.iter().find(|(n, _)| *n == p[0]) {
                        Some(&(_, k)) => k,
                        None => {
                            let k = (self.keep)(strings.get(p[0]));
                            self.names.push((p[0], k));
                            k
                        }
                    };
                    self.at.truncate(i);
                    self.at.push((p[0], k));
                    k
                }
            };
            if kept {
                self.key.extend_from_slice(p);
            }
        }
        if let Some(l) = self.last.as_ref().filter(|_| self.key == self.last_key) {
            return l.clone();
        }
        let l = match self.shared.get(self.key.as_slice()) {
            Some(l) => l.clone(),
            None => {
                let l = strings.labels(&self.key);
                self.shared.insert(self.key.clone(), l.clone());
                l
            }
        };
        self.last_key.clear();
        self.last_key.extend_from_slice(&self.key);
        self.last = Some(l.clone());
        l
    }
}

impl LiveStore {
    /// The ids of the series `matchers` select, in label order (all of
    /// them, with samples in a given window or not): from the cache of
    /// recent selections while it holds them for the current series, else
    /// found through the index, every matcher checked and sorted.
    fn selection(&self, matchers: &[Matcher]) -> Arc<[u32]> {
        let key = selection_key(matchers);
        let cache = || {
            self.selections
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
        };
        if let Some(k) = &key {
            let c = cache();
            if c.epoch == self.series_epoch
                && let Some(ids) = c.map.get(k)
            {
                return Arc::clone(ids);
            }
        }
        let ids: Vec<u32> = self.matching(matchers).map(|(id, _)| id).collect();
        let mut order: Vec<u32> = (0..ids.len() as u32).collect();
        {
            let held: Vec<Syms> = self.entries_of(&ids).iter().map(|e| self.syms(e)).collect();
            let sets: Vec<&[u32]> = held.iter().map(|s| s.as_slice()).collect();
            self.strings.sort_sets(&sets, &mut order);
        }
        let sorted: Arc<[u32]> = order.iter().map(|&i| ids[i as usize]).collect();
        if let Some(k) = key {
            cache().insert(self.series_epoch, k, Arc::clone(&sorted));
        }
        sorted
    }

    /// The entries of the held series `ids`, in that order.
    fn entries_of(&self, ids: &[u32]) -> Vec<&Entry> {
        ids.iter()
            .filter_map(|&id| self.entries.get(id as usize).and_then(Option::as_ref))
            .collect()
    }

    /// The ids and entries `matchers` select, in id order.
    fn matching<'a>(
        &'a self,
        matchers: &'a [Matcher],
    ) -> Box<dyn Iterator<Item = (u32, &'a Entry)> + 'a> {
        let ids = self.index.candidates(matchers, &self.strings);
        if let Some(ids) = &ids {
            self.preload_entries(ids);
        }
        let all: Box<dyn Iterator<Item = (u32, &'a Entry)> + 'a> = match ids {
            Some(ids) => Box::new(ids.into_iter().filter_map(|id| {
                let e = self.entries.get(id as usize).and_then(Option::as_ref)?;
                Some((id, e))
            })),
            None => Box::new(
                self.entries
                    .iter()
                    .enumerate()
                    .filter_map(|(id, e)| Some((id as u32, e.as_ref()?))),
            ),
        };
        Box::new(all.filter(move |(_, e)| self.strings.all_match(matchers, &self.syms(e))))
    }

    /// Loads the entries `ids` name and their label ids into the cache,
    /// one level at a time across all of them, before the matchers walk
    /// them one by one (see [`LiveStore::preload_chunks`]).
    fn preload_entries(&self, ids: &[u32]) {
        let entry = |id: &u32| self.entries.get(*id as usize).and_then(Option::as_ref);
        let mut acc = 0usize;
        for e in ids.iter().filter_map(entry) {
            acc ^= e.labels as usize;
        }
        for e in ids.iter().filter_map(entry) {
            acc ^= usize::from(self.label_ids.touch(e.labels));
        }
        std::hint::black_box(acc);
    }

    /// Loads what decoding `entries` over `[mint, maxt]` reads (the
    /// entries with their open chunk's header, the sealed-chunk index when
    /// the window reaches past the open chunk, the chunks' bytes) into the
    /// cache, one level at a time across the whole selection. A
    /// selection's series lie scattered among all the store's, so each
    /// level is a cache miss a series; walked series by series, the misses
    /// of one series come one after another (each address is read from the
    /// last), while a loop over many series at one level has no such chain
    /// and the CPU overlaps its misses.
    ///
    /// A series' cold chunks are a list, each record naming the one before:
    /// walked series by series, every step is a miss that waits for the
    /// last. They are walked here level by level across the batch, so
    /// those misses overlap too; callers preload [`PRELOAD_BATCH`] series
    /// at a time, so what this loads is still in the cache when they are
    /// decoded.
    fn preload_chunks(&self, entries: &[&Entry], mint: i64, maxt: i64) {
        let mut acc = 0usize;
        for e in entries {
            acc ^= usize::from(self.label_ids.touch(e.labels));
            if !e.sealed.is_empty() && (e.head.len() == 0 || e.head.first_ts() > mint) {
                acc ^= usize::from(e.sealed.touch());
            }
        }
        let warm = ColdRead {
            maps: &super::NO_COLD,
            cutoff: i64::MIN,
        };
        for e in entries {
            for c in e
                .window_chunks(mint, warm)
                .take_while(|c| c.first_ts() <= maxt)
            {
                acc ^= usize::from(c.touch());
            }
        }
        let cold = self.cold_read();
        let from = mint.max(cold.cutoff);
        let mut next: Vec<u64> = entries
            .iter()
            .map(|e| if e.first_warm_ts() > from { e.cold } else { 0 })
            .collect();
        while next.iter().any(|&r| r != 0) {
            for r in &mut next {
                if *r == 0 {
                    continue;
                }
                *r = match cold.maps.get(*r) {
                    Some(c) => {
                        acc ^= usize::from(c.view.touch());
                        c.next_back(from).unwrap_or(0)
                    }
                    None => 0,
                };
            }
        }
        std::hint::black_box(acc);
    }

    /// [`Querier::select`], or with `keep` [`Querier::select_keep`]: series
    /// whose kept labels are equal share one label set, built once.
    fn select_labels(
        &self,
        matchers: &[Matcher],
        (mint, maxt): (i64, i64),
        limit: usize,
        keep: Option<&dyn Fn(&str) -> bool>,
    ) -> Result<Vec<Series>, StoreError> {
        // `up{node}` of every source, unless the selector names another metric.
        let up = Matcher::metric_name(matchers).is_none_or(|n| n == "up");
        if let Some(keep) = keep.filter(|_| up && !self.sources.is_empty()) {
            // `up` series are ordered among the others by their whole label
            // sets: cut them down after that order is known.
            let mut out = self.select_labels(matchers, (mint, maxt), limit, None)?;
            for s in &mut out {
                s.labels = Labels::from_sorted_pairs(s.labels.iter().filter(|(n, _)| keep(n)));
            }
            return Ok(out);
        }
        let mint = mint.max(self.now_ms.saturating_sub(self.cfg.retention_ms));
        // In label order (see `selection`); label sets are built only for
        // the series returned.
        let matching = self.entries_of(&self.selection(matchers));
        // Sized once: growing it by doubling means large reallocations,
        // each a walk of the allocator's free lists on a fragmented heap.
        let mut hits = Vec::with_capacity(matching.len().min(limit));
        for (k, &e) in matching.iter().enumerate() {
            if k % PRELOAD_BATCH == 0 {
                let batch = &matching[k..(k + PRELOAD_BATCH).min(matching.len())];
                self.preload_chunks(batch, mint, maxt);
            }
            let samples = self.materialise(e, mint, maxt);
            if samples.is_empty() {
                continue;
            }
            if hits.len() >= limit {
                return Err(StoreError::SelectLimit { limit });
            }
            hits.push((e, samples));
        }
        let mut out: Vec<Series> = match keep {
            None => hits
                .into_iter()
                .map(|(e, samples)| Series {
                    labels: self.strings.labels(&self.syms(e)),
                    samples,
                    start_ms: None,
                })
                .collect(),
            Some(keep) => {
                let mut labels = KeptLabels::new(keep);
                hits.into_iter()
                    .map(|(e, samples)| Series {
                        labels: labels.of(&self.strings, &self.syms(e)),
                        samples,
                        start_ms: None,
                    })
                    .collect()
            }
        };
        let mut ups = false;
        for src in self.sources.iter().filter(|_| up) {
            let labels = Labels::from_pairs([(METRIC_NAME, "up"), ("node", src.name.as_str())]);
            if !Matcher::all_match(matchers, &labels) {
                continue;
            }
            let samples = self.up_samples(src, mint, maxt);
            if samples.is_empty() {
                continue;
            }
            if out.len() >= limit {
                return Err(StoreError::SelectLimit { limit });
            }
            out.push(Series {
                labels,
                samples,
                start_ms: None,
            });
            ups = true;
        }
        if ups {
            out.sort_by(|a, b| a.labels.cmp(&b.labels));
        }
        Ok(out)
    }
}

//! [`SharedStore`]: one [`LiveStore`] shared by the ingest paths, the
//! maintenance tick and the queries, with an optional [`Journal`] (the
//! write-ahead log) that records every op before it is applied.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use super::op::{Journal, Op};
use super::{LiveStore, Matcher, Querier, Series, SeriesHint, StoreError, WholeLabels};

/// What one [`SharedStore::apply`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ApplyOutcome {
    /// Ops applied.
    pub applied: usize,
    /// Samples the store refused (series limit, out of order, no name).
    pub rejected: usize,
}

/// A [`LiveStore`] shared between the ingest paths and queries. Each query
/// `select` holds the read lock only while it copies samples out.
///
/// Durable writes go through [`SharedStore::apply`] (journal first, then
/// the store); [`SharedStore::write`] bypasses the journal (tests, tools).
#[derive(Clone, Default)]
pub struct SharedStore {
    inner: Arc<RwLock<LiveStore>>,
    journal: Option<Arc<Mutex<Box<dyn Journal>>>>,
}

impl fmt::Debug for SharedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedStore")
            .field("journal", &self.journal.is_some())
            .finish_non_exhaustive()
    }
}

impl SharedStore {
    /// Wraps a store (memory only).
    pub fn new(store: LiveStore) -> Self {
        SharedStore {
            inner: Arc::new(RwLock::new(store)),
            journal: None,
        }
    }

    /// Wraps a store whose ops are recorded in `journal` before they apply.
    pub fn with_journal(store: LiveStore, journal: Box<dyn Journal>) -> Self {
        SharedStore {
            inner: Arc::new(RwLock::new(store)),
            journal: Some(Arc::new(Mutex::new(journal))),
        }
    }

    /// True when ops are journaled (a data directory is configured).
    pub fn is_durable(&self) -> bool {
        self.journal.is_some()
    }

    /// Runs `f` with the write lock held, bypassing the journal.
    pub fn write<R>(&self, f: impl FnOnce(&mut LiveStore) -> R) -> R {
        let mut g = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        f(&mut g)
    }

    /// Runs `f` with the read lock held.
    pub fn read<R>(&self, f: impl FnOnce(&LiveStore) -> R) -> R {
        let g = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        f(&g)
    }

    fn journal(&self) -> Option<MutexGuard<'_, Box<dyn Journal>>> {
        self.journal
            .as_ref()
            .map(|j| j.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Logs `ops` in the journal (if any), then applies them in order. Once
    /// this returns, the ops are visible to queries and survive a process
    /// crash. A journal failure applies nothing and is returned.
    pub fn apply(&self, ops: &[Op]) -> Result<ApplyOutcome, StoreError> {
        self.apply_each(ops, |_, _, _| {})
    }

    /// [`SharedStore::apply`], reporting each result to `f` while the write
    /// lock is held: `(op index, sample index in the op, result)`, once per
    /// sample of an [`Op::Samples`] and once (sample index 0) per other op.
    pub fn apply_each(
        &self,
        ops: &[Op],
        f: impl FnMut(usize, usize, Result<(), StoreError>),
    ) -> Result<ApplyOutcome, StoreError> {
        self.apply_each_hinted(ops, &mut [], f)
    }

    /// [`SharedStore::apply_each`] with a [`SeriesHint`] per op (`hints[i]`
    /// for `ops[i]`; missing ones are not used): an [`Op::Samples`] finds
    /// its series through its hint when the hint still names it, and its
    /// hint is refreshed otherwise (see [`LiveStore::append_samples_hinted`]).
    pub fn apply_each_hinted(
        &self,
        ops: &[Op],
        hints: &mut [SeriesHint],
        f: impl FnMut(usize, usize, Result<(), StoreError>),
    ) -> Result<ApplyOutcome, StoreError> {
        self.apply_logged(ops, hints, f)
    }

    /// Logs the remote_write v1 `body` as one record (see
    /// [`Journal::log_raw_body`]), then calls `apply` once per slice
    /// (`0..slices`) with the write lock held, released between slices so
    /// queries go on. The journal lock is held until the last slice has the
    /// store, so nothing else is logged or applied between the slices and a
    /// replay of the body sees the store as the live apply did. Returns
    /// false, with nothing logged or applied, when the journal does not
    /// record this body (the caller then applies ops through
    /// [`SharedStore::apply_each_hinted`]); without a journal it applies.
    pub fn apply_body_slices(
        &self,
        body: &[u8],
        slices: usize,
        mut apply: impl FnMut(&mut LiveStore, usize),
    ) -> Result<bool, StoreError> {
        let mut j = self.journal();
        if let Some(j) = j.as_mut()
            && !j.log_raw_body(body)?
        {
            return Ok(false);
        }
        for k in 0..slices {
            let mut s = self.inner.write().unwrap_or_else(PoisonError::into_inner);
            if k + 1 == slices {
                // The same hand-off as `apply_logged`: the next batch may be
                // logged while the last slice applies.
                drop(j.take());
            }
            apply(&mut s, k);
        }
        Ok(true)
    }

    fn apply_logged(
        &self,
        ops: &[Op],
        hints: &mut [SeriesHint],
        mut f: impl FnMut(usize, usize, Result<(), StoreError>),
    ) -> Result<ApplyOutcome, StoreError> {
        let mut j = self.journal();
        if let Some(j) = j.as_mut() {
            j.log_hinted(ops, hints)?;
        }
        // Lock hand-off: the store lock is taken before the journal lock is
        // released, so ops apply in the order they were logged, while the
        // next batch can already be logged during this one's apply.
        let mut s = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        drop(j);
        let mut out = ApplyOutcome::default();
        for (i, op) in ops.iter().enumerate() {
            out.applied += 1;
            let mut each = |k, r: Result<(), StoreError>| {
                if r.is_err() {
                    out.rejected += 1;
                }
                f(i, k, r);
            };
            match (op, hints.get_mut(i)) {
                (Op::Samples { labels, samples }, Some(h)) => {
                    s.append_samples_hinted(labels, samples, h, &mut each);
                }
                _ => op.apply_each(&mut s, &mut each),
            }
        }
        Ok(out)
    }

    /// The maintenance tick: applies (and logs) [`Op::Maintain`], then lets
    /// the journal sync and, when due, checkpoint: the cut is taken under
    /// the locks, the snapshot is written after they are released, so
    /// ingest is not paused while it streams. Call once per tick; blocking I/O.
    pub fn tick(&self, now_ms: i64) -> Result<(), StoreError> {
        let pending = {
            let mut j = self.journal();
            let op = [Op::Maintain { now_ms }];
            if let Some(j) = j.as_mut() {
                j.log(&op)?;
            }
            self.write(|s| s.maintain(now_ms));
            match j.as_mut() {
                Some(j) => self.read(|s| j.tick(s))?,
                None => None,
            }
        };
        if let Some(checkpoint) = pending
            && let Err(e) = checkpoint()
        {
            if let Some(mut j) = self.journal() {
                j.checkpoint_failed();
            }
            return Err(e);
        }
        Ok(())
    }
}

impl Querier for SharedStore {
    fn select(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
        limit: usize,
    ) -> Result<Vec<Series>, StoreError> {
        self.read(|s| s.select(matchers, mint, maxt, limit))
    }

    fn select_keep(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
        limit: usize,
        keep: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<Series>, StoreError> {
        self.read(|s| s.select_keep(matchers, mint, maxt, limit, keep))
    }

    fn select_each(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
        limit: usize,
        keep: &dyn Fn(&str) -> bool,
        f: &mut dyn FnMut(&Series, usize) -> bool,
        done: &mut WholeLabels<'_>,
    ) -> Result<(), StoreError> {
        self.read(|s| s.select_each(matchers, mint, maxt, limit, keep, f, done))
    }

    fn cardinality(&self, limit: usize) -> Option<super::Cardinality> {
        self.read(|s| s.cardinality(limit))
    }
}

//! Hole filling at the point where a source's R paths meet (the gateway).
//!
//! Dedup keeps, per series, the newest timestamp. When one path has a hole
//! (its relay died and the child failed over to a shorter path), the
//! shorter path's newer sections arrive *before* the longer path's older
//! ones, and plain dedup would drop the older ones as stale: samples lost.
//!
//! So, when a section of a source that arrives over several paths comes
//! more than one and a half ticks after the newest one of its source, it is
//! held instead of applied. The sections that fill the hole apply normally
//! as they arrive; a held one applies as soon as it is contiguous again, or
//! once every other path has delivered that source up to its timestamp
//! without filling the hole (each path delivers a source in time order, so
//! the hole is real: the source skipped a tick), or at the latest after
//! [`MergeConfig::hole_wait_ms`](super::MergeConfig::hole_wait_ms) of data
//! time. A source seen over one path only is never held. Steady state never
//! holds anything, so freshness only pays where a hole is.

use std::collections::HashMap;

use canopy_proto::codec::Encoding;

use super::{ChildId, FrameSummary, Merger, Sink, Slot};

/// One section waiting for the hole before it to fill.
#[derive(Debug)]
pub(super) struct Held {
    pub(super) ts: i64,
    /// The path it came over.
    pub(super) from: ChildId,
    /// The number of the record of `from` that carried it (1-based).
    pub(super) rec: u64,
    /// (series, its epoch when held, value, encoding the child gave it).
    pub(super) updates: Vec<(Slot, f64, Option<Encoding>)>,
}

impl Merger {
    /// Child `child` delivered a section of `src` at `ts`: remember the
    /// path, forget paths silent for longer than the hole wait. True when
    /// `src` now arrives over several paths (see `opens_hole`).
    pub(super) fn note_path(&mut self, src: u32, child: ChildId, ts: i64) -> bool {
        if self.cfg.hole_wait_ms <= 0 {
            return false;
        }
        // A skipped copy's note first, in arrival order (see `dupes`).
        self.flush_path(src);
        self.note_path_now(src, child, ts)
    }

    /// [`Merger::note_path`] without the due notes (see `dupes`).
    pub(super) fn note_path_now(&mut self, src: u32, child: ChildId, ts: i64) -> bool {
        if self.cfg.hole_wait_ms <= 0 {
            return false;
        }
        let wait = self.cfg.hole_wait_ms;
        let Some(m) = self.table.source_mark_mut(src) else {
            return false; // invariant: `src` was just resolved
        };
        let p = &mut m.paths;
        match p.iter_mut().find(|(c, _)| *c == child) {
            Some(e) => e.1 = e.1.max(ts),
            None => p.push((child, ts)),
        }
        let newest = p.iter().map(|e| e.1).max().unwrap_or(ts);
        p.retain(|e| newest - e.1 <= wait);
        p.len() > 1
    }

    /// True when every path of `src` but `from` has delivered it up to `ts`.
    fn others_passed(&self, src: u32, from: ChildId, ts: i64) -> bool {
        self.table
            .source_mark(src)
            .is_some_and(|m| m.paths.iter().filter(|e| e.0 != from).all(|e| e.1 >= ts))
    }

    /// True when a section of `src` at `ts` leaves a hole behind the newest
    /// one and must wait; `several_paths`: what `note_path` said of `src`.
    pub(super) fn opens_hole(&self, src: u32, ts: i64, several_paths: bool) -> bool {
        if !several_paths || self.cfg.hole_wait_ms <= 0 {
            return false;
        }
        let Some(s) = self.table.source(src) else {
            return false;
        };
        let tick = i64::from(s.tick_ms.max(1));
        s.last_ts_ms != i64::MIN && ts > s.last_ts_ms + tick + tick / 2
    }

    /// Holds a section (already resolved to global handles).
    pub(super) fn hold(&mut self, src: u32, held: Held) {
        self.stats.sections_held += 1;
        let q = self.held.entry(src).or_default();
        let at = q.partition_point(|h| h.ts <= held.ts);
        q.insert(at, held);
    }

    /// Applies the held sections of `src` that are contiguous with its
    /// newest timestamp, or older than `force_before` (their wait is over).
    pub(super) fn release(&mut self, src: u32, force_before: i64, sink: &mut dyn Sink) {
        // `others_passed` reads the paths: a skipped copy's note first.
        self.flush_path(src);
        loop {
            let Some((ts, from)) = self
                .held
                .get(&src)
                .and_then(|q| q.first())
                .map(|h| (h.ts, h.from))
            else {
                self.held.remove(&src);
                return;
            };
            let Some(s) = self.table.source(src) else {
                self.held.remove(&src);
                return;
            };
            let tick = i64::from(s.tick_ms.max(1));
            let next_ok = ts <= s.last_ts_ms.saturating_add(tick + tick / 2);
            let passed = self.others_passed(src, from, ts);
            if !next_ok && !passed && ts >= force_before {
                return;
            }
            let Some(held) = self.held.get_mut(&src).map(|q| q.remove(0)) else {
                return;
            };
            if !next_ok {
                // Every path passed it, or the wait ran out: the hole is
                // real (nothing ticked there).
                self.stats.holes_unfilled += 1;
            }
            let mut sum = FrameSummary::default();
            self.heartbeat(src, held.ts, sink);
            for (slot, v, enc) in held.updates {
                if self.table.mark(slot.h).map(|m| m.epoch) != Some(slot.epoch) {
                    continue; // the series was retired meanwhile
                }
                self.accept(src, slot.h, held.ts, v, enc, sink, &mut sum);
            }
        }
    }

    /// Per child with sections held, the number of its oldest record that
    /// carried one (1-based): that record is not in the sink yet, so a
    /// durable receiver must not acknowledge it (nor any after it) yet.
    pub fn held_records(&self) -> HashMap<ChildId, u64> {
        let mut out = HashMap::new();
        for h in self.held.values().flatten() {
            out.entry(h.from)
                .and_modify(|r: &mut u64| *r = (*r).min(h.rec))
                .or_insert(h.rec);
        }
        out
    }

    /// Releases, for every source, what has waited past `now_ms - hole_wait_ms`.
    pub(super) fn release_expired(&mut self, now_ms: i64, sink: &mut dyn Sink) {
        let cutoff = now_ms.saturating_sub(self.cfg.hole_wait_ms);
        let srcs: Vec<u32> = self.held.keys().copied().collect();
        for src in srcs {
            self.release(src, cutoff, sink);
        }
    }
}

//! Hole filling at the point where a source's R paths meet (the gateway).
//!
//! Dedup keeps, per series, the newest timestamp. When one path has a hole
//! (its relay died and the child failed over to a shorter path), the
//! shorter path's newer sections arrive *before* the longer path's older
//! ones, and plain dedup would drop the older ones as stale: samples lost.
//!
//! So, when a section arrives more than one and a half ticks after the
//! newest one of its source, it is held instead of applied, for at most
//! [`MergeConfig::hole_wait_ms`](super::MergeConfig::hole_wait_ms) of data
//! time. The sections that fill the hole apply normally as they arrive;
//! held ones apply as soon as they are contiguous again, or when their wait
//! is over (the hole was real: the source did not tick). Steady state never
//! holds anything, so freshness only pays where a hole is.

use canopy_proto::codec::Encoding;

use super::{FrameSummary, Merger, Sink, Slot};

/// One section waiting for the hole before it to fill.
#[derive(Debug)]
pub(super) struct Held {
    pub(super) ts: i64,
    /// (series, its epoch when held, value, encoding the child gave it).
    pub(super) updates: Vec<(Slot, f64, Option<Encoding>)>,
}

impl Merger {
    /// True when a section of `src` at `ts` leaves a hole behind the newest
    /// one and must wait.
    pub(super) fn opens_hole(&self, src: u32, ts: i64) -> bool {
        if self.cfg.hole_wait_ms <= 0 {
            return false;
        }
        let Some(s) = self.table.source(src) else {
            return false;
        };
        let tick = i64::from(s.tick_ms.max(1));
        let waiting = self.held.get(&src).is_some_and(|h| !h.is_empty());
        s.last_ts_ms != i64::MIN && (waiting || ts > s.last_ts_ms + tick + tick / 2)
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
        loop {
            let Some(q) = self.held.get_mut(&src) else {
                return;
            };
            let Some(first) = q.first() else {
                self.held.remove(&src);
                return;
            };
            let Some(s) = self.table.source(src) else {
                self.held.remove(&src);
                return;
            };
            let tick = i64::from(s.tick_ms.max(1));
            let next_ok = first.ts <= s.last_ts_ms.saturating_add(tick + tick / 2);
            if !next_ok && first.ts >= force_before {
                return;
            }
            let held = q.remove(0);
            if !next_ok {
                // Waited long enough: the hole is real (nothing ticked).
                self.stats.holes_unfilled += 1;
            }
            let mut sum = FrameSummary::default();
            self.heartbeat(src, held.ts, sink);
            for (slot, v, enc) in held.updates {
                if self.smeta.get(slot.h as usize).map(|m| m.epoch) != Some(slot.epoch) {
                    continue; // the series was retired meanwhile
                }
                self.accept(src, slot.h, held.ts, v, enc, sink, &mut sum);
            }
        }
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

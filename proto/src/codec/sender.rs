//! The sender's front end: observations in, one changeset per tick out.
//!
//! Keeps the series index (labels -> handle) and each series' [`Quantiser`],
//! so every link a sender has carries the same quantised values. A series
//! that a source stops reporting is retired (the receiver writes a staleness
//! marker), as Prometheus does when a target stops exposing a series.
//!
//! Steady state without hashing: [`Sender::observe`] returns a
//! [`SeriesKey`]; a caller that keeps it records later values with
//! [`Sender::observe_key`] (an index and a generation check) instead of
//! hashing the full label set every tick.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use rustc_hash::FxHasher;

use crate::model::{Labels, MetricKind};

use super::quantise::{Bounds, Quantiser};
use super::table::{ChangeSection, Changeset, SeriesEntry, SeriesTable};

/// Per-metric error bounds: a default and overrides by metric name.
#[derive(Clone, Debug, Default)]
pub struct BoundsPolicy {
    /// Bounds for metrics without an override.
    pub default: Bounds,
    /// Overrides keyed by metric name.
    pub per_metric: HashMap<String, Bounds>,
}

impl BoundsPolicy {
    /// The bounds for metric `name`.
    pub fn for_metric(&self, name: &str) -> Bounds {
        self.per_metric.get(name).copied().unwrap_or(self.default)
    }
}

/// A stable reference to one series of a [`Sender`]: its handle and the
/// handle's generation, so a key outliving its series (retired, handle
/// reused) is detected instead of updating another series.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeriesKey {
    handle: u32,
    generation: u32,
}

/// What every observation of one handle touches, kept together: one
/// dense array instead of three (the generation, the tick last seen, the
/// quantiser), so a tick over 2,000 series walks one run of memory.
#[derive(Clone, Debug, Default)]
struct Slot {
    /// Bumped each time the handle is given to a new series.
    key_gen: u32,
    /// The tick generation (low 32 bits) in which the series was last
    /// observed: equal to the current one's only if observed in this tick
    /// (a handle unobserved for 2^32 ticks was retired long before).
    seen: u32,
    /// The series' quantiser while the handle is live (set in `observe`,
    /// cleared when `finish_tick` retires it).
    quant: Option<Quantiser>,
}

/// Turns observations into changesets against a [`SeriesTable`].
#[derive(Debug, Default)]
pub struct Sender {
    policy: BoundsPolicy,
    table: SeriesTable,
    /// Labels -> handle. Fx rather than SipHash: the keys come from this
    /// node's own collectors, not from the network.
    index: HashMap<Labels, u32, BuildHasherDefault<FxHasher>>,
    /// Per handle.
    slots: Vec<Slot>,
    /// The tick generation (see [`Slot::seen`]).
    generation: u32,
    /// Distinct live series observed in this tick: when it is every live
    /// series, nothing can be retired and `finish_tick` skips its scan.
    seen_now: usize,
    sources: HashMap<String, u32>,
    ticked: Vec<u32>,
    cs: Changeset,
    /// Emptied sections of earlier ticks, reused by `tick_source`.
    spare: Vec<ChangeSection>,
    /// Scratch list of the handles `finish_tick` retires.
    gone: Vec<u32>,
}

impl Sender {
    /// A sender with the given bounds.
    pub fn new(policy: BoundsPolicy) -> Self {
        Self {
            policy,
            ..Self::default()
        }
    }

    /// The table every link encodes from.
    pub fn table(&self) -> &SeriesTable {
        &self.table
    }

    /// Handle of source `name`, adding it on first use.
    pub fn source(&mut self, name: &str, tick_ms: u32) -> u32 {
        if let Some(&h) = self.sources.get(name) {
            return h;
        }
        let h = self.table.add_source(name, tick_ms);
        self.sources.insert(name.to_string(), h);
        self.cs.new_sources.push(h);
        h
    }

    /// Starts a tick at `ts_ms`. Any previous tick must have been finished.
    pub fn begin_tick(&mut self, ts_ms: i64) {
        self.generation = self.generation.wrapping_add(1);
        self.seen_now = 0;
        // Reuse the previous tick's vectors (and each section's) instead of
        // allocating them again every tick.
        let cs = &mut self.cs;
        cs.ts_ms = ts_ms;
        cs.defs.clear();
        cs.retired_sources.clear();
        self.spare.extend(cs.sections.drain(..).map(|mut s| {
            s.updates.clear();
            s.retired.clear();
            s
        }));
        self.ticked.clear();
    }

    /// Marks source `src` as sampled at `ts_ms` in this tick.
    pub fn tick_source(&mut self, src: u32, ts_ms: i64) {
        if let Some(s) = self.table.source_mut(src) {
            s.last_ts_ms = ts_ms;
        }
        if !self.ticked.contains(&src) {
            self.ticked.push(src);
            let mut sec = self.spare.pop().unwrap_or_default();
            sec.source = src;
            sec.ts_ms = ts_ms;
            self.cs.sections.push(sec);
        }
    }

    /// Records one true value of series `labels` from source `src`, and
    /// returns the series' key for [`Sender::observe_key`].
    /// Call [`Sender::tick_source`] for `src` first.
    pub fn observe(
        &mut self,
        src: u32,
        labels: &Labels,
        kind: MetricKind,
        value: f64,
    ) -> SeriesKey {
        let h = match self.index.get(labels) {
            Some(&h) => h,
            None => {
                let q = Quantiser::new(kind, self.policy.for_metric(labels.name()));
                let h = self.table.insert(SeriesEntry {
                    labels: labels.clone(),
                    source: src,
                    encoding: q.encoding(),
                    value: f64::NAN,
                });
                let i = h as usize;
                if self.slots.len() <= i {
                    self.slots.resize(i + 1, Slot::default());
                }
                let slot = &mut self.slots[i];
                slot.quant = Some(q);
                slot.key_gen = slot.key_gen.wrapping_add(1);
                // Not seen in this tick yet (`update` counts it).
                slot.seen = self.generation.wrapping_sub(1);
                self.index.insert(labels.clone(), h);
                self.cs.defs.push(h);
                h
            }
        };
        self.update(h, src, value);
        SeriesKey {
            handle: h,
            generation: self.slots[h as usize].key_gen,
        }
    }

    /// Records one true value of the series behind `key` (from
    /// [`Sender::observe`]) without hashing its labels. False when the key
    /// no longer names a live series (it was retired, e.g. after a tick
    /// without it): then observe by labels again.
    #[inline]
    pub fn observe_key(&mut self, key: SeriesKey, value: f64) -> bool {
        let h = key.handle;
        let generation = self.generation;
        // A handle has a quantiser exactly while its series is in the
        // table (both are set in `observe` and cleared in `finish_tick`).
        let Some(slot) = self.slots.get_mut(h as usize) else {
            return false;
        };
        if slot.key_gen != key.generation {
            return false;
        }
        let Some(q) = slot.quant.as_mut() else {
            return false;
        };
        if slot.seen != generation {
            slot.seen = generation;
            self.seen_now += 1;
        }
        // The source is looked up only when the value changed (most
        // observations change nothing).
        if let Some(e) = q.observe(value) {
            self.apply_change(h, e);
        }
        true
    }

    /// Writes an emitted change of live handle `h` (recorded by key) to its
    /// table entry and the tick's changeset. Out of line: what
    /// [`Sender::observe_key`] inlines into every collector stays small.
    ///
    /// The entry's encoding is written only with a redefinition: a keyed
    /// series held a value since [`Sender::observe`] (a quantiser's first
    /// value is always sent, and `update` wrote the encoding it took), and
    /// a quantiser holding a value changes its encoding only with
    /// `redefined` set.
    #[inline(never)]
    fn apply_change(&mut self, h: u32, e: super::quantise::Emit) {
        let encoding = if e.redefined || cfg!(debug_assertions) {
            self.slots
                .get(h as usize)
                .and_then(|s| s.quant.as_ref())
                .map(Quantiser::encoding)
        } else {
            None
        };
        let Some(entry) = self.table.get_mut(h) else {
            return; // invariant: a handle with a quantiser is live
        };
        entry.value = e.value;
        if let Some(encoding) = encoding {
            debug_assert!(
                e.redefined || entry.encoding == encoding,
                "a keyed series' encoding changed without a redefinition"
            );
            entry.encoding = encoding;
        }
        let src = entry.source;
        self.record_change(h, src, e);
    }

    /// Puts an emitted change of series `h` (of source `src`) in the tick's
    /// changeset.
    fn record_change(&mut self, h: u32, src: u32, e: super::quantise::Emit) {
        if e.redefined {
            self.cs.defs.push(h);
        }
        if let Some(sec) = self.cs.sections.iter_mut().rev().find(|s| s.source == src) {
            sec.updates.push((h, e.value));
        }
    }

    /// Quantises `value` for live handle `h` of source `src` and records
    /// the change, if any, in the tick's section of `src`.
    fn update(&mut self, h: u32, src: u32, value: f64) {
        let generation = self.generation;
        let Some(slot) = self.slots.get_mut(h as usize) else {
            return; // invariant: every indexed handle has a slot
        };
        if slot.seen != generation {
            slot.seen = generation;
            self.seen_now += 1;
        }
        let Some(q) = slot.quant.as_mut() else {
            return; // invariant: every indexed handle has a quantiser
        };
        if let Some(e) = q.observe(value) {
            let encoding = q.encoding();
            if let Some(entry) = self.table.get_mut(h) {
                entry.value = e.value;
                entry.encoding = encoding;
            }
            self.record_change(h, src, e);
        }
    }

    /// Ends the tick: series of the sources that ticked but were not observed
    /// are retired. Returns the table and the tick's changeset for every
    /// link to encode; call [`Sender::end_tick`] after encoding.
    pub fn finish_tick(&mut self) -> (&SeriesTable, &Changeset) {
        let generation = self.generation;
        let mut gone = std::mem::take(&mut self.gone);
        gone.clear();
        // Only handles observed in this tick count in `seen_now`, and every
        // one of them is live until this scan retires something: when it
        // is all of them, no series can be missing.
        if self.seen_now < self.table.len() {
            gone.extend(
                self.table
                    .iter()
                    .filter(|(h, s)| {
                        self.ticked.contains(&s.source)
                            && self.slots.get(*h as usize).map(|s| s.seen) != Some(generation)
                    })
                    .map(|(h, _)| h),
            );
        }
        for &h in &gone {
            if let Some(e) = self.table.remove(h) {
                self.index.remove(&e.labels);
                if let Some(slot) = self.slots.get_mut(h as usize) {
                    slot.quant = None;
                }
                // The source ticked, so its section exists: the series
                // ended at this tick.
                if let Some(sec) = self.cs.sections.iter_mut().find(|s| s.source == e.source) {
                    sec.retired.push(h);
                }
            }
        }
        self.gone = gone;
        (&self.table, &self.cs)
    }

    /// Releases retired handles after every link encoded the tick.
    pub fn end_tick(&mut self) {
        self.table.end_tick();
        self.cs.new_sources.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::super::quantise::Encoding;
    use super::*;

    /// Every observation reads its series' slot: 32 bytes, two to a cache
    /// line (48 before issue 3's cut).
    #[test]
    fn a_sender_slot_is_32_bytes() {
        assert_eq!(std::mem::size_of::<Slot>(), 32);
    }

    /// Series recorded by key whose encodings change (a gauge leaving the
    /// integers, a counter turning float, both after values were held)
    /// leave the table with each quantiser's encoding and value, and each
    /// change defined again, as recording by labels does.
    #[test]
    fn keyed_changes_keep_the_table_encoding() {
        let mut s = Sender::new(BoundsPolicy::default());
        let src = s.source("n", 1000);
        let names = ["g", "c"];
        let kinds = [MetricKind::Gauge, MetricKind::Counter];
        let mut keys = Vec::new();
        // Integers first, then fractions: both series redefine mid-run.
        let values = [1.0, 2.0, 2.0, 3.5, 3.5, 7.25, 1e6, f64::NAN, 8.0];
        for (t, &v) in values.iter().enumerate() {
            let ts = 1000 * (t as i64 + 1);
            s.begin_tick(ts);
            s.tick_source(src, ts);
            for (i, (&n, &k)) in names.iter().zip(&kinds).enumerate() {
                let v = if k == MetricKind::Counter {
                    v + t as f64
                } else {
                    v
                };
                if t == 0 {
                    keys.push(s.observe(src, &Labels::from_pairs([("__name__", n)]), k, v));
                } else {
                    assert!(s.observe_key(keys[i], v));
                }
            }
            let redefined = s.finish_tick().1.defs.len();
            for (h, e) in s.table().iter() {
                let q = s.slots[h as usize].quant.as_ref().expect("live");
                assert_eq!(e.encoding, q.encoding(), "tick {t}");
                assert_eq!(e.value.to_bits(), q.held().expect("held").to_bits());
            }
            if t == 3 {
                assert_eq!(redefined, 2, "both left the integers at 3.5");
            }
            s.end_tick();
        }
        assert!(matches!(
            s.table()
                .iter()
                .map(|(_, e)| e.encoding)
                .collect::<Vec<_>>()[..],
            [Encoding::LogGauge { .. }, Encoding::CounterFloat { .. }]
        ));
    }
}

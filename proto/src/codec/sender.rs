//! The sender's front end: observations in, one changeset per tick out.
//!
//! Keeps the series index (labels -> handle) and each series' [`Quantiser`],
//! so every link a sender has carries the same quantised values. A series
//! that a source stops reporting is retired (the receiver writes a staleness
//! marker), as Prometheus does when a target stops exposing a series.

use std::collections::HashMap;

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

/// Turns observations into changesets against a [`SeriesTable`].
#[derive(Debug, Default)]
pub struct Sender {
    policy: BoundsPolicy,
    table: SeriesTable,
    index: HashMap<Labels, u32>,
    quant: Vec<Option<Quantiser>>,
    seen: Vec<u64>,
    generation: u64,
    sources: HashMap<String, u32>,
    ticked: Vec<u32>,
    cs: Changeset,
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
        self.generation += 1;
        self.cs = Changeset {
            new_sources: std::mem::take(&mut self.cs.new_sources),
            ..Changeset::new(ts_ms)
        };
        self.ticked.clear();
    }

    /// Marks source `src` as sampled at `ts_ms` in this tick.
    pub fn tick_source(&mut self, src: u32, ts_ms: i64) {
        if let Some(s) = self.table.source_mut(src) {
            s.last_ts_ms = ts_ms;
        }
        if !self.ticked.contains(&src) {
            self.ticked.push(src);
            self.cs.sections.push(ChangeSection {
                source: src,
                ts_ms,
                ..ChangeSection::default()
            });
        }
    }

    /// Records one true value of series `labels` from source `src`.
    /// Call [`Sender::tick_source`] for `src` first.
    pub fn observe(&mut self, src: u32, labels: &Labels, kind: MetricKind, value: f64) {
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
                if self.quant.len() <= i {
                    self.quant.resize(i + 1, None);
                    self.seen.resize(i + 1, 0);
                }
                self.quant[i] = Some(q);
                self.index.insert(labels.clone(), h);
                self.cs.defs.push(h);
                h
            }
        };
        let i = h as usize;
        self.seen[i] = self.generation;
        let Some(q) = self.quant[i].as_mut() else {
            return; // invariant: every indexed handle has a quantiser
        };
        if let Some(e) = q.observe(value) {
            let encoding = q.encoding();
            if let Some(entry) = self.table.get_mut(h) {
                entry.value = e.value;
                entry.encoding = encoding;
            }
            if e.redefined {
                self.cs.defs.push(h);
            }
            if let Some(sec) = self.cs.sections.iter_mut().rev().find(|s| s.source == src) {
                sec.updates.push((h, e.value));
            }
        }
    }

    /// Ends the tick: series of the sources that ticked but were not observed
    /// are retired. Returns the table and the tick's changeset for every
    /// link to encode; call [`Sender::end_tick`] after encoding.
    pub fn finish_tick(&mut self) -> (&SeriesTable, &Changeset) {
        let generation = self.generation;
        let gone: Vec<u32> = self
            .table
            .iter()
            .filter(|(h, s)| {
                self.ticked.contains(&s.source) && self.seen[*h as usize] != generation
            })
            .map(|(h, _)| h)
            .collect();
        for h in gone {
            if let Some(e) = self.table.remove(h) {
                self.index.remove(&e.labels);
                self.quant[h as usize] = None;
                // The source ticked, so its section exists: the series
                // ended at this tick.
                if let Some(sec) = self.cs.sections.iter_mut().find(|s| s.source == e.source) {
                    sec.retired.push(h);
                }
            }
        }
        (&self.table, &self.cs)
    }

    /// Releases retired handles after every link encoded the tick.
    pub fn end_tick(&mut self) {
        self.table.end_tick();
        self.cs.new_sources.clear();
    }
}

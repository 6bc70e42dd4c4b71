//! Retirement: series and sources leaving the global table.

use std::collections::HashMap;

use tracing::debug;

use super::{Merger, Sink};

impl Merger {
    /// Retires series `h` as of `r` (the newest ts known for its source).
    ///
    /// A series updated this tick stays in the table until `end_tick`, so
    /// this tick's frame still carries its last values before the
    /// retirement (the encoder skips updates of handles the table lacks).
    pub(super) fn retire_series(&mut self, h: u32, r: i64, sink: &mut dyn Sink) {
        let tick = self.tick32();
        let Some(m) = self.table.mark_mut(h) else {
            return;
        };
        if m.dying {
            return;
        }
        let (last, late) = (m.last_ts, m.touched_tick == tick);
        let e = if late {
            m.dying = true;
            self.late_series.push(h);
            self.table.get(h).cloned()
        } else {
            self.table.remove(h)
        };
        let Some(e) = e else {
            return;
        };
        if let Some(m) = self.table.mark_mut(h) {
            m.epoch = m.epoch.wrapping_add(1);
        }
        // What proved copies of its source's sections duplicates may
        // name it.
        self.forget_recent(e.source);
        let ts = r.max(last.saturating_add(1));
        let name = self
            .table
            .source(e.source)
            .map_or(String::new(), |s| s.name.clone());
        self.series_index.remove(&(e.source, e.labels.clone()));
        sink.retire(&name, &e.labels, ts);
        self.series_tombs.insert((name, e.labels), ts);
        // Upstream, the retirement travels at its own timestamp.
        if self.cfg.forward {
            let i = self.section(e.source, ts);
            self.pending.sections[i].retired.push(h);
        }
        self.stats.retired += 1;
        debug!(series = h, ts, "series retired");
    }

    /// Forgets sources `(handle, newest known ts)` with all their series;
    /// returns how many series were retired.
    pub(super) fn retire_sources(&mut self, dead: &[(u32, i64)], sink: &mut dyn Sink) -> usize {
        let r_of: HashMap<u32, i64> = dead.iter().copied().collect();
        let victims: Vec<(u32, i64)> = self
            .table
            .iter_marked()
            .filter(|(_, _, m)| !m.dying)
            .filter_map(|(h, e, _)| r_of.get(&e.source).map(|&r| (h, r)))
            .collect();
        for &(h, r) in &victims {
            self.retire_series(h, r, sink);
        }
        for &(h, r) in dead {
            let Some(s) = self.table.source(h) else {
                continue;
            };
            if self.source_index.get(&s.name) != Some(&h) {
                continue; // already retired this tick
            }
            let name = s.name.clone();
            let ts = r.max(s.last_ts_ms);
            self.forget_recent(h);
            if let Some(m) = self.table.source_mark_mut(h) {
                m.epoch = m.epoch.wrapping_add(1);
            }
            // Removed from the table at `end_tick`, like touched series: its
            // series' last values and retirements go in this tick's frame.
            self.late_sources.push(h);
            self.source_index.remove(&name);
            self.source_tombs.insert(name, ts);
            if self.cfg.forward {
                self.pending.retired_sources.push(h);
            }
        }
        victims.len()
    }
}

//! [`MemStore`]: a plain map from label set to explicit samples.
//!
//! Used by the PromQL test-script runner; behaves like the Go test storage
//! (no out-of-order window: older samples are refused).

use std::collections::BTreeMap;

use super::{Appender, Labels, Matcher, Querier, Sample, Series, StoreError};

/// The samples of one series, with start timestamps only once one is given.
#[derive(Clone, Debug, Default)]
struct MemSeries {
    samples: Vec<Sample>,
    /// Start time per sample (0: none); `None` while no sample had one.
    st: Option<Vec<i64>>,
}

/// A plain in-memory store of explicit samples.
#[derive(Clone, Debug, Default)]
pub struct MemStore {
    series: BTreeMap<Labels, MemSeries>,
}

impl MemStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Drops everything.
    pub fn clear(&mut self) {
        self.series.clear();
    }

    /// Number of series.
    pub fn len(&self) -> usize {
        self.series.len()
    }

    /// True when no series is held.
    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }

    /// [`Appender::append`] of an explicit sample with an optional start
    /// time (ms; the time the counter started counting, as OTLP and
    /// remote_write 2 carry). Series that never get one store none.
    pub fn append_with_start(
        &mut self,
        labels: &Labels,
        ts_ms: i64,
        value: f64,
        start_ms: Option<i64>,
    ) -> Result<(), StoreError> {
        let e = self.series.entry(labels.clone()).or_default();
        if let Some(last) = e.samples.last() {
            if ts_ms < last.ts_ms
                || (ts_ms == last.ts_ms && last.value.to_bits() != value.to_bits())
            {
                return Err(StoreError::OutOfOrder {
                    labels: labels.to_string(),
                    ts_ms,
                    newest_ms: last.ts_ms,
                });
            }
            if ts_ms == last.ts_ms {
                return Ok(());
            }
        }
        e.samples.push(Sample { ts_ms, value });
        match (&mut e.st, start_ms) {
            (Some(st), s) => st.push(s.unwrap_or(0)),
            (None, Some(s)) => {
                let mut st = vec![0; e.samples.len() - 1];
                st.push(s);
                e.st = Some(st);
            }
            (None, None) => {}
        }
        Ok(())
    }
}

impl Appender for MemStore {
    fn append(
        &mut self,
        _source: Option<&str>,
        labels: &Labels,
        ts_ms: i64,
        value: f64,
    ) -> Result<(), StoreError> {
        self.append_with_start(labels, ts_ms, value, None)
    }

    fn heartbeat(&mut self, _source: &str, _ts_ms: i64, _tick_ms: u32) {}

    fn retire(&mut self, labels: &Labels, ts_ms: i64) {
        let _ = self.append(None, labels, ts_ms, canopy_proto::model::stale_nan());
    }
}

impl Querier for MemStore {
    fn select(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
        limit: usize,
    ) -> Result<Vec<Series>, StoreError> {
        let mut out = Vec::new();
        for (labels, MemSeries { samples, st }) in &self.series {
            if !Matcher::all_match(matchers, labels) {
                continue;
            }
            let lo = samples.partition_point(|s| s.ts_ms < mint);
            let hi = samples.partition_point(|s| s.ts_ms <= maxt);
            if lo >= hi {
                continue;
            }
            if out.len() >= limit {
                return Err(StoreError::SelectLimit { limit });
            }
            out.push(Series {
                labels: labels.clone(),
                samples: samples[lo..hi].to_vec(),
                start_ms: st.as_ref().and_then(|s| s.get(lo..hi)).map(<[i64]>::to_vec),
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_times_are_kept_aligned_and_only_when_given() {
        let mut m = MemStore::new();
        let a = Labels::metric("a", [("k", "1")]);
        let b = Labels::metric("b", [("k", "1")]);
        for (i, st) in [None, Some(500), None].into_iter().enumerate() {
            let t = 1000 * (i as i64 + 1);
            m.append_with_start(&a, t, i as f64, st).expect("append a");
            m.append(None, &b, t, i as f64).expect("append b");
        }
        let all = m
            .select(&[Matcher::equal("k", "1")], 2000, 3000, 10)
            .expect("select");
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].samples.len(), 2);
        assert_eq!(all[0].start_ms, Some(vec![500, 0]));
        assert_eq!(all[1].start_ms, None);
    }
}

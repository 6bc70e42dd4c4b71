//! [`MemStore`]: a plain map from label set to explicit samples.
//!
//! Used by the PromQL test-script runner; behaves like the Go test storage
//! (no out-of-order window: older samples are refused).

use std::collections::BTreeMap;

use super::{Appender, Labels, Matcher, Querier, Sample, Series, StoreError};

/// A plain in-memory store of explicit samples.
#[derive(Clone, Debug, Default)]
pub struct MemStore {
    series: BTreeMap<Labels, Vec<Sample>>,
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
}

impl Appender for MemStore {
    fn append(
        &mut self,
        _source: Option<&str>,
        labels: &Labels,
        ts_ms: i64,
        value: f64,
    ) -> Result<(), StoreError> {
        let v = self.series.entry(labels.clone()).or_default();
        if let Some(last) = v.last() {
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
        v.push(Sample { ts_ms, value });
        Ok(())
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
        for (labels, samples) in &self.series {
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
            });
        }
        Ok(out)
    }
}

//! The live store: series, change points, implied samples, retention.
//!
//! This module is a pure core (no tokio, no clock reads). Writers use the
//! [`Appender`] trait; readers (the PromQL engine, the HTTP API) see only the
//! [`Querier`] trait, like Prometheus' `storage.Querier`. Two implementations:
//! [`LiveStore`] (change-only fabric data plus explicit remote_write samples)
//! and [`MemStore`] (a plain map of explicit samples, used by the test runner).

mod bits;
mod chunk;
pub mod codec;
pub mod cold;
mod index;
mod intern;
mod live;
pub(crate) mod mapped;
mod mem;
mod op;
mod shared;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use canopy_proto::model::METRIC_NAME;

pub use canopy_proto::model::{Labels, Sample};
pub use live::{LiveStore, LiveStoreConfig, MemoryBreakdown, SeriesHint, SnapshotCut, StoreStats};
pub use mem::MemStore;
pub use op::{Journal, Op, PendingCheckpoint};
pub use shared::{ApplyOutcome, SharedStore};

/// Errors from the store.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The series limit is reached; a new series was refused.
    #[error("series limit of {limit} reached; refused new series {labels}")]
    TooManySeries {
        /// The configured maximum.
        limit: usize,
        /// The refused series.
        labels: String,
    },
    /// A sample older than the newest sample of its series.
    #[error("out-of-order sample for {labels}: {ts_ms} < newest {newest_ms}")]
    OutOfOrder {
        /// The series.
        labels: String,
        /// The refused timestamp.
        ts_ms: i64,
        /// The newest timestamp already held.
        newest_ms: i64,
    },
    /// A series without a metric name.
    #[error("series without a metric name: {labels}")]
    NoMetricName {
        /// The refused series.
        labels: String,
    },
    /// The write-ahead log could not record an op (nothing was applied).
    #[error("write-ahead log: {reason}")]
    Journal {
        /// What failed.
        reason: String,
    },
    /// A selection would return more series than allowed.
    #[error("selector matched more than {limit} series")]
    SelectLimit {
        /// The configured maximum.
        limit: usize,
    },
}

/// Ingestion interface of a store.
pub trait Appender {
    /// Records a change point of `labels` at `ts_ms`.
    ///
    /// `source` is the node that produced it for fabric (change-only) data:
    /// the value is then implied at each of the source's ticks until the next
    /// change. `None` means an explicit sample (remote_write): nothing implied.
    /// A staleness-marker value retires the series.
    fn append(
        &mut self,
        source: Option<&str>,
        labels: &Labels,
        ts_ms: i64,
        value: f64,
    ) -> Result<(), StoreError>;

    /// The source is alive at `ts_ms` and ticks every `tick_ms`.
    fn heartbeat(&mut self, source: &str, ts_ms: i64, tick_ms: u32);

    /// Ends `labels` at `ts_ms` (a staleness marker).
    fn retire(&mut self, labels: &Labels, ts_ms: i64);
}

/// A label-value predicate (a compiled, fully anchored regex).
pub type Predicate = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// How a [`Matcher`] compares a label value.
#[derive(Clone)]
#[non_exhaustive]
pub enum MatchOp {
    /// Equal to the value.
    Equal(String),
    /// Not equal to the value.
    NotEqual(String),
    /// Matches a fully anchored regex (given as a predicate).
    Regex(Predicate),
    /// Does not match a fully anchored regex.
    NotRegex(Predicate),
}

/// One label matcher; an absent label matches as the empty string.
#[derive(Clone)]
pub struct Matcher {
    /// The label name.
    pub name: String,
    /// The comparison.
    pub op: MatchOp,
}

impl fmt::Debug for Matcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.op {
            MatchOp::Equal(v) => write!(f, "{}={v:?}", self.name),
            MatchOp::NotEqual(v) => write!(f, "{}!={v:?}", self.name),
            MatchOp::Regex(_) => write!(f, "{}=~<re>", self.name),
            MatchOp::NotRegex(_) => write!(f, "{}!~<re>", self.name),
        }
    }
}

impl Matcher {
    /// An equality matcher.
    pub fn equal(name: &str, value: &str) -> Self {
        Matcher {
            name: name.to_string(),
            op: MatchOp::Equal(value.to_string()),
        }
    }

    /// True when the value `v` (empty when absent) satisfies the matcher.
    pub fn matches(&self, v: &str) -> bool {
        match &self.op {
            MatchOp::Equal(x) => x == v,
            MatchOp::NotEqual(x) => x != v,
            MatchOp::Regex(re) => re(v),
            MatchOp::NotRegex(re) => !re(v),
        }
    }

    /// True when every matcher accepts `labels`.
    pub fn all_match(matchers: &[Matcher], labels: &Labels) -> bool {
        matchers
            .iter()
            .all(|m| m.matches(labels.get(&m.name).unwrap_or("")))
    }

    /// The metric name if this is `__name__="x"`.
    pub fn metric_name(matchers: &[Matcher]) -> Option<&str> {
        matchers.iter().find_map(|m| match &m.op {
            MatchOp::Equal(v) if m.name == canopy_proto::model::METRIC_NAME => Some(v.as_str()),
            _ => None,
        })
    }
}

/// One series as a querier returns it: samples sorted by time, staleness
/// markers included (the engine interprets them).
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// The label set.
    pub labels: Labels,
    /// Samples within the requested window, oldest first.
    pub samples: Vec<Sample>,
    /// Start time of each sample (ms, 0 where unknown), aligned with
    /// `samples`; `None` when the series has no start times at all.
    pub start_ms: Option<Vec<i64>>,
}

/// Read interface the PromQL engine and the HTTP API use.
pub trait Querier {
    /// Series matching all `matchers` with their samples in `[mint, maxt]`
    /// (inclusive). Series without a sample in the window are omitted.
    /// More than `limit` matching series is an error.
    fn select(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
        limit: usize,
    ) -> Result<Vec<Series>, StoreError>;

    /// [`Querier::select`] with each returned label set cut down to the
    /// labels whose name `keep` accepts, in the same order (the order of
    /// the full label sets). Aggregations need only their grouping labels,
    /// so a store may skip building whole label sets, and may share one
    /// label set between series whose kept labels are equal.
    fn select_keep(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
        limit: usize,
        keep: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<Series>, StoreError> {
        let mut out = self.select(matchers, mint, maxt, limit)?;
        for s in &mut out {
            s.labels = Labels::from_sorted_pairs(s.labels.iter().filter(|(n, _)| keep(n)));
        }
        Ok(out)
    }

    /// [`Querier::select_keep`]'s series, in its order, handed to `f` one at
    /// a time until it returns false: a store may then decode each series
    /// into one reused buffer instead of holding the whole selection. With
    /// each series `f` gets a handle, valid only within this call; once the
    /// stream ends (stopped or not), `done` gets a function that builds the
    /// whole label set of a handle's series, for the few series a fold kept
    /// (`topk`: k label sets, not one per candidate). On an error (the
    /// limit), `f` may have seen part of the selection and `done` is not
    /// called.
    // Two callbacks (the stream and its end) besides the selection's five.
    #[allow(clippy::too_many_arguments)]
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
        each_cut_down(self.select(matchers, mint, maxt, limit)?, keep, f, done);
        Ok(())
    }

    /// Cardinality statistics of the held series, each list cut to its
    /// `limit` largest entries; `None` from a store that keeps none.
    fn cardinality(&self, _limit: usize) -> Option<Cardinality> {
        None
    }

    /// Label sets of series matching `matchers` that have data in `[mint, maxt]`.
    fn series(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
        limit: usize,
    ) -> Result<Vec<Labels>, StoreError> {
        Ok(self
            .select(matchers, mint, maxt, limit)?
            .into_iter()
            .map(|s| s.labels)
            .collect())
    }
}

/// The store's cardinality, as Prometheus's `/api/v1/status/tsdb` reports
/// its head block: what an admin reads to find the metric or label that
/// floods series.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Cardinality {
    /// Series held.
    pub num_series: usize,
    /// Distinct label name=value pairs.
    pub num_label_pairs: usize,
    /// Chunks held, open ones included.
    pub chunk_count: usize,
    /// Oldest and newest sample held, ms (`None` when there is none).
    pub time_range: Option<(i64, i64)>,
    /// Series per metric name, largest first.
    pub series_by_metric: Vec<(String, usize)>,
    /// Distinct values per label name, largest first.
    pub values_by_label: Vec<(String, usize)>,
    /// Bytes of values per label name (each value's length times the series
    /// carrying it), largest first.
    pub bytes_by_label: Vec<(String, usize)>,
    /// Series per label `name=value` pair, largest first.
    pub series_by_pair: Vec<(String, usize)>,
}

impl Cardinality {
    /// The statistics of postings `(name, value, series)`, each list cut to
    /// its `limit` largest (ties by name), with the series-level figures
    /// left to the caller.
    pub fn from_postings<'a>(
        postings: impl Iterator<Item = (&'a str, &'a str, usize)>,
        limit: usize,
    ) -> Self {
        let mut by_metric = Vec::new();
        let mut values: HashMap<&str, (usize, usize)> = HashMap::new();
        let mut pairs = Vec::new();
        let mut n_pairs = 0;
        for (name, value, n) in postings {
            n_pairs += 1;
            if name == METRIC_NAME {
                by_metric.push((value.to_string(), n));
            }
            let e = values.entry(name).or_default();
            e.0 += 1;
            e.1 += value.len() * n;
            pairs.push((name, value, n));
        }
        let top = |mut v: Vec<(String, usize)>| {
            largest(&mut v, limit, |a, b| {
                b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0))
            });
            v
        };
        // Only the pairs kept are formatted.
        largest(&mut pairs, limit, |a, b| {
            b.2.cmp(&a.2).then_with(|| (a.0, a.1).cmp(&(b.0, b.1)))
        });
        Cardinality {
            num_label_pairs: n_pairs,
            series_by_metric: top(by_metric),
            values_by_label: top(values.iter().map(|(k, v)| (k.to_string(), v.0)).collect()),
            bytes_by_label: top(values.iter().map(|(k, v)| (k.to_string(), v.1)).collect()),
            series_by_pair: pairs
                .into_iter()
                .map(|(n, v, c)| (format!("{n}={v}"), c))
                .collect(),
            ..Cardinality::default()
        }
    }
}

/// Cuts `v` to its first `n` items in the order `cmp` gives, sorted: a
/// linear selection first, so a store with millions of label pairs sorts
/// only the `n` it reports (the walk holds the store's read lock).
fn largest<T>(v: &mut Vec<T>, n: usize, mut cmp: impl FnMut(&T, &T) -> std::cmp::Ordering) {
    if n == 0 {
        v.clear();
        return;
    }
    if v.len() > n {
        v.select_nth_unstable_by(n - 1, &mut cmp);
        v.truncate(n);
    }
    v.sort_by(cmp);
}

/// What [`Querier::select_each`] hands, once its stream ended, a builder
/// of whole label sets by series handle to.
pub type WholeLabels<'f> = dyn FnMut(&dyn Fn(usize) -> Labels) + 'f;

/// Hands whole selected series to a [`Querier::select_each`] callback, each
/// with its label set cut down to the labels `keep` accepts, until the
/// callback returns false, then their whole label sets by handle (the
/// position in `series`) to `done`: the plain path of stores that do not
/// stream.
pub(crate) fn each_cut_down(
    series: Vec<Series>,
    keep: &dyn Fn(&str) -> bool,
    f: &mut dyn FnMut(&Series, usize) -> bool,
    done: &mut WholeLabels<'_>,
) {
    let mut full = Vec::with_capacity(series.len());
    for (i, mut s) in series.into_iter().enumerate() {
        let whole = std::mem::take(&mut s.labels);
        s.labels = Labels::from_sorted_pairs(whole.iter().filter(|(n, _)| keep(n)));
        full.push(whole);
        if !f(&s, i) {
            break;
        }
    }
    done(&|i| full.get(i).cloned().unwrap_or_default());
}

//! Where accepted data goes locally, and the merger's own counters.

use std::collections::BTreeMap;

use canopy_proto::Labels;

/// A global series as the merger names it to a sink: its handle in the
/// merger's table and the handle's generation. The pair names one series
/// for as long as it lives (a handle is reused only under a new
/// generation), so a sink may keep per-series state in a dense array
/// indexed by `handle` instead of reading the labels of every sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SeriesKey {
    /// The series' handle in the merger's table (dense, from 0).
    pub handle: u32,
    /// The handle's generation (wraps after 2^32 retirements of it).
    pub epoch: u32,
}

/// Receives accepted (deduplicated) data, in arrival order.
///
/// The root gateway implements it over its store; a pure relay uses
/// [`NullSink`]. Every (series, timestamp) reaches the sink at most once, and
/// per series timestamps strictly increase (a retirement included).
pub trait Sink {
    /// One accepted sample of series `labels` of `source`.
    fn sample(&mut self, source: &str, labels: &Labels, ts_ms: i64, value: f64);
    /// [`Sink::sample`], with the series' [`SeriesKey`]: what the merger
    /// calls. By default the key is dropped.
    fn sample_keyed(
        &mut self,
        key: SeriesKey,
        source: &str,
        labels: &Labels,
        ts_ms: i64,
        value: f64,
    ) {
        let _ = key;
        self.sample(source, labels, ts_ms, value);
    }
    /// True when [`Sink::sample_keyed`] reads the source name and labels of
    /// every sample (the merger then loads them ahead, with the records a
    /// batch of sections reads); a sink that keeps per-series state by
    /// [`SeriesKey`], or keeps nothing, says false and spares those loads.
    fn reads_labels(&self) -> bool {
        true
    }
    /// `source` ticked at `ts_ms` (newer than any earlier heartbeat of it).
    fn heartbeat(&mut self, source: &str, ts_ms: i64, tick_ms: u32);
    /// The series ended at `ts_ms` (strictly after its last sample): write a
    /// staleness marker.
    fn retire(&mut self, source: &str, labels: &Labels, ts_ms: i64);
}

/// A sink that drops everything (relays keep no store).
#[derive(Clone, Copy, Debug, Default)]
pub struct NullSink;

impl Sink for NullSink {
    fn sample(&mut self, _: &str, _: &Labels, _: i64, _: f64) {}
    fn reads_labels(&self) -> bool {
        false
    }
    fn heartbeat(&mut self, _: &str, _: i64, _: u32) {}
    fn retire(&mut self, _: &str, _: &Labels, _: i64) {}
}

/// The merger's self-telemetry; the shell exports these as Canopy's own
/// metrics. Counters only grow; `series`, `sources`, `children` are gauges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MergeStats {
    /// Records fed to [`Merger::on_record`](super::Merger::on_record).
    pub frames_in: u64,
    /// Payload bytes fed (compressed, as on the wire).
    pub bytes_in: u64,
    /// Value updates decoded from children.
    pub updates_in: u64,
    /// Updates accepted (new for their series) and passed to the sink.
    pub updates_accepted: u64,
    /// Updates dropped because their series already had that or a newer
    /// timestamp (redundant paths, reconnect keyframes, lagging paths).
    pub duplicates_dropped: u64,
    /// Of those, in copies of a section skipped whole (the other path's
    /// copy of a quiet source's section, proven a duplicate without being
    /// applied).
    pub copies_skipped: u64,
    /// Updates dropped because the global series cap was reached.
    pub dropped_over_cap: u64,
    /// Rejected records by reason (`CodecError` variant, or `unknown_child`).
    pub rejected_frames: BTreeMap<&'static str, u64>,
    /// Series retired globally (child retirements and TTL expiry).
    pub retired: u64,
    /// Child retirements ignored: the series was already retired, or another
    /// path carried newer data than the retiring child knew.
    pub retires_ignored: u64,
    /// Sources forgotten by TTL expiry.
    pub expired_sources: u64,
    /// Sections held because they left a hole behind them (gateway only).
    pub sections_held: u64,
    /// Held sections applied when their wait ran out, the hole unfilled.
    pub holes_unfilled: u64,
    /// Live series in the global table.
    pub series: usize,
    /// Live sources in the global table.
    pub sources: usize,
    /// Connected children.
    pub children: usize,
}

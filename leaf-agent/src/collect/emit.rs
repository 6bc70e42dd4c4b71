//! Where a collector's values go, one series at a time: built into
//! [`Observation`]s (the tick's shared buffer, and the tests), or recorded
//! by series key with the label sets kept from the previous tick.
//!
//! A node collector reports the same series in the same order tick after
//! tick (the memory fields, the devices, the mounts). Building a label set
//! per series per tick (sorting, packing, allocating) and hashing it in the
//! sender cost a host-only leaf most of its collectors' instructions; a
//! [`Recorder`] instead checks each series against the one reported at the
//! same position last tick (a few short string compares) and records the
//! value by that series' key.

use canopy_proto::codec::SeriesKey;
use canopy_proto::model::{Labels, MetricKind};

use super::{Observation, Sink};

/// A destination for one collector's series.
pub trait Emit {
    /// One value of the series `name{node, labels}` (labels with an empty
    /// value are dropped, as [`Observation::new`] does).
    fn emit(&mut self, name: &str, kind: MetricKind, node: &str, labels: &[(&str, &str)], v: f64);

    /// A counter; see [`Emit::emit`].
    fn counter(&mut self, name: &str, node: &str, labels: &[(&str, &str)], v: f64) {
        self.emit(name, MetricKind::Counter, node, labels, v);
    }

    /// A gauge; see [`Emit::emit`].
    fn gauge(&mut self, name: &str, node: &str, labels: &[(&str, &str)], v: f64) {
        self.emit(name, MetricKind::Gauge, node, labels, v);
    }
}

impl Emit for Vec<Observation> {
    fn emit(&mut self, name: &str, kind: MetricKind, node: &str, labels: &[(&str, &str)], v: f64) {
        self.push(Observation::new(name, kind, node, labels, v));
    }
}

/// One series as reported at one position: what it was built from, its
/// label set and its key in the sender.
#[derive(Debug)]
struct Cached {
    name: String,
    kind: MetricKind,
    node: String,
    /// The label pairs as given, names and values back to back.
    pairs: Vec<String>,
    labels: Labels,
    key: Option<SeriesKey>,
    /// The value recorded last ([`SeriesCache::replay`]).
    value: f64,
}

impl Cached {
    fn new(name: &str, kind: MetricKind, node: &str, labels: &[(&str, &str)]) -> Self {
        Self {
            name: name.to_owned(),
            kind,
            node: node.to_owned(),
            pairs: labels
                .iter()
                .flat_map(|&(k, v)| [k.to_owned(), v.to_owned()])
                .collect(),
            labels: Observation::new(name, kind, node, labels, 0.0).labels,
            key: None,
            value: f64::NAN,
        }
    }

    fn is(&self, name: &str, kind: MetricKind, node: &str, labels: &[(&str, &str)]) -> bool {
        self.kind == kind
            && self.name == name
            && self.node == node
            && self.pairs.len() == 2 * labels.len()
            && labels
                .iter()
                .zip(self.pairs.chunks_exact(2))
                .all(|(&(k, v), p)| p[0] == k && p[1] == v)
    }
}

/// A collector's series of the previous tick, by position (kept by the
/// collector across ticks). Holds at most as many entries as the collector
/// reported in one tick.
#[derive(Debug, Default)]
pub struct SeriesCache {
    slots: Vec<Cached>,
}

/// A clone starts empty: its keys belong to the sender the original
/// records into, and a copy may feed another.
impl Clone for SeriesCache {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl SeriesCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// A recorder of this tick's series into `sink`.
    pub fn recorder<'a, 'b>(&'a mut self, sink: &'a mut Sink<'b>) -> Recorder<'a, 'b> {
        Recorder {
            cache: self,
            sink,
            at: 0,
        }
    }

    /// Series cached (those reported in the last tick).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Records every cached series again with the value it was last
    /// recorded with: a collector that samples its source only every few
    /// ticks keeps its series alive (the sender retires a series a tick
    /// leaves out) without reading the source, by key, in series order.
    pub fn replay(&mut self, sink: &mut Sink<'_>) {
        for c in &mut self.slots {
            sink.record(&mut c.key, &c.labels, c.kind, c.value);
        }
    }
}

/// A collector's series read every few ticks and repeated by key on the
/// ticks between (no syscall then): the cache and the countdown.
#[derive(Clone, Debug, Default)]
pub struct EveryFew {
    series: SeriesCache,
    /// Ticks left that repeat the last values.
    skip: u32,
}

impl EveryFew {
    /// Nothing read yet: the first tick reads.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records this tick's series into `sink`: the last values again while
    /// the countdown runs, else what `report` emits, which the next
    /// `every - 1` ticks repeat (a failed report is tried again next tick).
    pub fn tick(
        &mut self,
        every: u32,
        sink: &mut Sink<'_>,
        report: impl FnOnce(&mut Recorder<'_, '_>) -> Result<(), crate::error::LeafError>,
    ) -> Result<(), crate::error::LeafError> {
        if self.skip > 0 && !self.series.is_empty() {
            self.skip -= 1;
            self.series.replay(sink);
            return Ok(());
        }
        let r = report(&mut self.series.recorder(sink));
        self.skip = if r.is_ok() { every.max(1) - 1 } else { 0 };
        r
    }
}

/// Records one tick's series by key (see the module documentation); when
/// dropped, forgets the cached series past the last one reported.
pub struct Recorder<'a, 'b> {
    cache: &'a mut SeriesCache,
    sink: &'a mut Sink<'b>,
    at: usize,
}

impl Emit for Recorder<'_, '_> {
    fn emit(&mut self, name: &str, kind: MetricKind, node: &str, labels: &[(&str, &str)], v: f64) {
        let i = self.at;
        self.at += 1;
        let slots = &mut self.cache.slots;
        if slots.get(i).is_none_or(|c| !c.is(name, kind, node, labels)) {
            let c = Cached::new(name, kind, node, labels);
            if i < slots.len() {
                slots[i] = c;
            } else {
                slots.push(c);
            }
        }
        let c = &mut slots[i];
        c.value = v;
        self.sink.record(&mut c.key, &c.labels, c.kind, v);
    }
}

impl Drop for Recorder<'_, '_> {
    fn drop(&mut self) {
        self.cache.slots.truncate(self.at);
    }
}

#[cfg(test)]
mod tests {
    use canopy_proto::codec::{BoundsPolicy, Sender};

    use super::*;

    /// Emits a fixed set of series, `devices` of them labelled.
    fn report(out: &mut impl Emit, devices: &[&str], v: f64) {
        out.gauge("canopy_node_memory_total_bytes", "n1", &[], v);
        for d in devices {
            out.counter(
                "canopy_node_network_receive_bytes_total",
                "n1",
                &[("device", d), ("empty", "")],
                v,
            );
        }
    }

    /// The table the sender holds after ticks reported as observations or
    /// through a recorder: (labels, value) pairs, sorted.
    fn table(sender: &Sender) -> Vec<(String, f64)> {
        let mut t: Vec<(String, f64)> = sender
            .table()
            .iter()
            .map(|(_, e)| (format!("{:?}", e.labels), e.value))
            .collect();
        t.sort_by(|a, b| a.0.cmp(&b.0));
        t
    }

    #[test]
    fn a_recorder_reports_what_observations_do() {
        let ticks: [&[&str]; 4] = [
            &["eth0", "lo"],
            &["eth0", "lo"],
            &["eth0", "ib0", "lo"],
            &["lo"],
        ];
        let (mut by_obs, mut by_key) = (
            Sender::new(BoundsPolicy::default()),
            Sender::new(BoundsPolicy::default()),
        );
        let (so, sk) = (by_obs.source("n1", 1000), by_key.source("n1", 1000));
        let mut cache = SeriesCache::new();
        for (t, devices) in ticks.iter().enumerate() {
            let ts = 1_000 * (t as i64 + 1);
            let v = 100.0 * (t as f64 + 1.0);
            by_obs.begin_tick(ts);
            by_obs.tick_source(so, ts);
            let mut obs = Vec::new();
            report(&mut obs, devices, v);
            for o in &obs {
                by_obs.observe(so, &o.labels, o.kind, o.value);
            }
            by_obs.finish_tick();
            by_obs.end_tick();

            by_key.begin_tick(ts);
            by_key.tick_source(sk, ts);
            let mut unused = Vec::new();
            let mut sink = Sink::new(&mut by_key, sk, &mut unused);
            report(&mut cache.recorder(&mut sink), devices, v);
            assert!(unused.is_empty(), "a recorder leaves the buffer alone");
            assert_eq!(cache.len(), 1 + devices.len(), "tick {t}");
            by_key.finish_tick();
            by_key.end_tick();

            assert_eq!(table(&by_key), table(&by_obs), "tick {t}");
        }
    }

    #[test]
    fn a_series_is_matched_on_every_part() {
        let c = Cached::new("m", MetricKind::Gauge, "n1", &[("a", "1")]);
        assert!(c.is("m", MetricKind::Gauge, "n1", &[("a", "1")]));
        assert!(!c.is("m", MetricKind::Counter, "n1", &[("a", "1")]));
        assert!(!c.is("x", MetricKind::Gauge, "n1", &[("a", "1")]));
        assert!(!c.is("m", MetricKind::Gauge, "n2", &[("a", "1")]));
        assert!(!c.is("m", MetricKind::Gauge, "n1", &[("a", "2")]));
        assert!(!c.is("m", MetricKind::Gauge, "n1", &[("b", "1")]));
        assert!(!c.is("m", MetricKind::Gauge, "n1", &[]));
        assert!(!c.is("m", MetricKind::Gauge, "n1", &[("a", "1"), ("b", "2")]));
    }
}

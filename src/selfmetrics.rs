//! A node's own telemetry: its relay's merge counters, its listener's
//! refusals and every uplink's traffic, failovers, reparent time and replay
//! buffer, as series sent up the tree like any other (`canopy_fabric_*`)
//! and as Prometheus text on the node's `/metrics`.
//!
//! Glue only: the counters live in the crates; this reads them.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use canopy_aggregator::merge::NullSink;
use canopy_aggregator::relay::Relay;
use canopy_leaf::collect::{Emit, SeriesCache, Sink};
use canopy_leaf::{Collector, LeafError, Observation};
use canopy_proto::MetricKind;
use canopy_proto::link::{ListenerStats, Uplink};
use hdrhistogram::Histogram;

/// Reads a node's fabric counters.
#[derive(Clone)]
pub struct FabricMetrics {
    node: String,
    relay: Relay<NullSink>,
    listener: Arc<ListenerStats>,
    /// (subtree, primary parent, uplink).
    uplinks: Vec<(usize, String, Uplink)>,
    /// Reparent times (ms) per uplink, same order; each histogram (~100 KiB
    /// at 3 significant digits) is made at its uplink's first reparent, so
    /// a node whose links never move does not carry them.
    reparent: Arc<Vec<Mutex<Option<Histogram<u64>>>>>,
    /// Label sets and keys of the last tick's series (the sampler's copy;
    /// a clone starts empty).
    series: SeriesCache,
}

/// Longest reparent time tracked exactly, ms (longer ones count at the top).
const MAX_REPARENT_MS: u64 = 3_600_000;

/// Quantiles of the reparent time exposed.
const QUANTILES: [(f64, &str); 3] = [(0.5, "0.5"), (0.99, "0.99"), (1.0, "1")];

impl FabricMetrics {
    /// Counters of `node`'s relay, listener and uplinks.
    pub fn new(
        node: &str,
        relay: Relay<NullSink>,
        listener: Arc<ListenerStats>,
        uplinks: Vec<(usize, String, Uplink)>,
    ) -> Self {
        let reparent = uplinks.iter().map(|_| Mutex::new(None)).collect();
        Self {
            node: node.to_string(),
            relay,
            listener,
            uplinks,
            reparent: Arc::new(reparent),
            series: SeriesCache::new(),
        }
    }

    /// Every counter, as observations of this node.
    pub fn observe(&self, out: &mut impl Emit) {
        let n = self.node.as_str();
        let m = self.relay.with_merger(|m| m.stats().clone());
        out.counter("canopy_fabric_frames_in_total", n, &[], m.frames_in as f64);
        out.counter("canopy_fabric_bytes_in_total", n, &[], m.bytes_in as f64);
        out.counter(
            "canopy_fabric_updates_accepted_total",
            n,
            &[],
            m.updates_accepted as f64,
        );
        out.counter(
            "canopy_fabric_duplicates_dropped_total",
            n,
            &[],
            m.duplicates_dropped as f64,
        );
        out.counter(
            "canopy_fabric_series_over_cap_total",
            n,
            &[],
            m.dropped_over_cap as f64,
        );
        for (reason, v) in &m.rejected_frames {
            out.counter(
                "canopy_fabric_rejected_frames_total",
                n,
                &[("reason", reason)],
                (*v) as f64,
            );
        }
        out.gauge("canopy_fabric_series", n, &[], m.series as f64);
        out.gauge("canopy_fabric_children", n, &[], m.children as f64);
        let l = &self.listener;
        out.counter(
            "canopy_fabric_refused_peers_total",
            n,
            &[("stage", "handshake")],
            (l.handshake_failures.load(Ordering::Relaxed)) as f64,
        );
        out.counter(
            "canopy_fabric_refused_peers_total",
            n,
            &[("stage", "setup")],
            (l.setup_failures.load(Ordering::Relaxed)) as f64,
        );
        out.counter(
            "canopy_fabric_refused_peers_total",
            n,
            &[("stage", "not_in_plan")],
            (l.not_in_plan.load(Ordering::Relaxed)) as f64,
        );
        for (i, (subtree, parent, u)) in self.uplinks.iter().enumerate() {
            let st = subtree.to_string();
            let lab: &[(&str, &str)] = &[("subtree", &st), ("parent", parent)];
            let s = u.stats();
            let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
            out.counter(
                "canopy_fabric_records_sent_total",
                n,
                lab,
                (load(&s.records_sent)) as f64,
            );
            out.counter(
                "canopy_fabric_bytes_sent_total",
                n,
                lab,
                (load(&s.bytes_sent)) as f64,
            );
            out.counter(
                "canopy_fabric_failovers_total",
                n,
                lab,
                (load(&s.failovers)) as f64,
            );
            out.counter(
                "canopy_fabric_connect_failures_total",
                n,
                lab,
                (load(&s.connect_failures)) as f64,
            );
            out.counter(
                "canopy_fabric_reconnects_total",
                n,
                lab,
                (load(&s.reconnects)) as f64,
            );
            out.counter(
                "canopy_fabric_reparent_seconds_total",
                n,
                lab,
                load(&s.reparent_ms_total) as f64 / 1000.0,
            );
            if let Some(h) = self.reparent.get(i) {
                let mut h = h.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let fresh = s.take_reparents();
                if h.is_none() && !fresh.is_empty() {
                    *h = Histogram::new_with_bounds(1, MAX_REPARENT_MS, 3).ok();
                }
                if let Some(h) = h.as_mut() {
                    for ms in fresh {
                        h.saturating_record(ms.clamp(1, MAX_REPARENT_MS));
                    }
                }
                // No histogram yet: no reparent, quantiles 0 as for an empty one.
                let h = h.as_ref().filter(|h| !h.is_empty());
                for (q, qs) in QUANTILES {
                    let v = h.map_or(0.0, |h| h.value_at_quantile(q) as f64 / 1000.0);
                    out.gauge(
                        "canopy_fabric_reparent_seconds",
                        n,
                        &[("subtree", &st), ("parent", parent), ("quantile", qs)],
                        v,
                    );
                }
                out.counter(
                    "canopy_fabric_reparent_seconds_count",
                    n,
                    lab,
                    (h.map_or(0, |h| h.len())) as f64,
                );
            }
            for (reason, v) in [("send_blocked", &s.stalls), ("no_ack", &s.ack_stalls)] {
                out.counter(
                    "canopy_fabric_stalls_total",
                    n,
                    &[("subtree", &st), ("parent", parent), ("reason", reason)],
                    (load(v)) as f64,
                );
            }
            out.counter(
                "canopy_fabric_bad_controls_total",
                n,
                lab,
                (load(&s.bad_controls)) as f64,
            );
            out.counter(
                "canopy_fabric_segments_replayed_total",
                n,
                lab,
                (load(&s.segments_replayed)) as f64,
            );
            let (bytes, records, ob) = u.buffer();
            out.gauge("canopy_fabric_buffer_bytes", n, lab, bytes as f64);
            out.gauge("canopy_fabric_buffer_records", n, lab, records as f64);
            out.counter(
                "canopy_fabric_buffer_dropped_records_total",
                n,
                lab,
                ob.dropped_records as f64,
            );
            out.counter(
                "canopy_fabric_acked_records_total",
                n,
                lab,
                ob.acked_records as f64,
            );
            out.counter("canopy_fabric_bad_acks_total", n, lab, ob.bad_acks as f64);
            out.counter(
                "canopy_fabric_replayed_unacked_records_total",
                n,
                lab,
                ob.replayed_unacked as f64,
            );
            out.counter(
                "canopy_fabric_unacked_released_records_total",
                n,
                lab,
                ob.unacked_released as f64,
            );
            out.gauge(
                "canopy_fabric_uplink_connected",
                n,
                lab,
                f64::from(u8::from(u.is_connected())),
            );
            out.gauge(
                "canopy_fabric_uplink_on_backup",
                n,
                lab,
                f64::from(u8::from(u.on_backup())),
            );
        }
    }

    /// Prometheus text exposition of [`FabricMetrics::observe`].
    pub fn render(&self) -> String {
        let mut obs = Vec::new();
        self.observe(&mut obs);
        render_text(&obs)
    }
}

impl Collector for FabricMetrics {
    fn name(&self) -> &'static str {
        "fabric_self"
    }

    fn collect(&mut self, out: &mut Vec<Observation>) -> Result<(), LeafError> {
        self.observe(out);
        Ok(())
    }

    /// By key, with the label sets kept from the previous tick.
    fn collect_into(&mut self, sink: &mut Sink<'_>) -> Result<(), LeafError> {
        let mut series = std::mem::take(&mut self.series);
        self.observe(&mut series.recorder(sink));
        self.series = series;
        Ok(())
    }
}

/// Prometheus text format (0.0.4) for a list of observations, one `# TYPE`
/// line per metric name.
pub fn render_text(obs: &[Observation]) -> String {
    let mut sorted: Vec<&Observation> = obs.iter().collect();
    sorted.sort_by(|a, b| a.labels.name().cmp(b.labels.name()));
    let mut out = String::new();
    let mut last = "";
    for o in sorted {
        let name = o.labels.name();
        if name != last {
            let kind = match o.kind {
                MetricKind::Counter => "counter",
                _ => "gauge",
            };
            let _ = writeln!(out, "# TYPE {name} {kind}");
            last = name;
        }
        let _ = writeln!(
            out,
            "{} {}",
            o.labels,
            canopy_proto::model::format_value(o.value)
        );
    }
    out
}

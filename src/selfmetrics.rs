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
        }
    }

    /// Every counter, as observations of this node.
    pub fn observe(&self, out: &mut Vec<Observation>) {
        let n = self.node.as_str();
        let c = |name: &str, labels: &[(&str, &str)], v: u64| {
            Observation::counter(name, n, labels, v as f64)
        };
        let g =
            |name: &str, labels: &[(&str, &str)], v: f64| Observation::gauge(name, n, labels, v);
        let m = self.relay.with_merger(|m| m.stats().clone());
        out.push(c("canopy_fabric_frames_in_total", &[], m.frames_in));
        out.push(c("canopy_fabric_bytes_in_total", &[], m.bytes_in));
        out.push(c(
            "canopy_fabric_updates_accepted_total",
            &[],
            m.updates_accepted,
        ));
        out.push(c(
            "canopy_fabric_duplicates_dropped_total",
            &[],
            m.duplicates_dropped,
        ));
        out.push(c(
            "canopy_fabric_series_over_cap_total",
            &[],
            m.dropped_over_cap,
        ));
        for (reason, v) in &m.rejected_frames {
            out.push(c(
                "canopy_fabric_rejected_frames_total",
                &[("reason", reason)],
                *v,
            ));
        }
        out.push(g("canopy_fabric_series", &[], m.series as f64));
        out.push(g("canopy_fabric_children", &[], m.children as f64));
        let l = &self.listener;
        out.push(c(
            "canopy_fabric_refused_peers_total",
            &[("stage", "handshake")],
            l.handshake_failures.load(Ordering::Relaxed),
        ));
        out.push(c(
            "canopy_fabric_refused_peers_total",
            &[("stage", "setup")],
            l.setup_failures.load(Ordering::Relaxed),
        ));
        out.push(c(
            "canopy_fabric_refused_peers_total",
            &[("stage", "not_in_plan")],
            l.not_in_plan.load(Ordering::Relaxed),
        ));
        for (i, (subtree, parent, u)) in self.uplinks.iter().enumerate() {
            let st = subtree.to_string();
            let lab: &[(&str, &str)] = &[("subtree", &st), ("parent", parent)];
            let s = u.stats();
            let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
            out.push(c(
                "canopy_fabric_records_sent_total",
                lab,
                load(&s.records_sent),
            ));
            out.push(c(
                "canopy_fabric_bytes_sent_total",
                lab,
                load(&s.bytes_sent),
            ));
            out.push(c("canopy_fabric_failovers_total", lab, load(&s.failovers)));
            out.push(c(
                "canopy_fabric_connect_failures_total",
                lab,
                load(&s.connect_failures),
            ));
            out.push(c(
                "canopy_fabric_reconnects_total",
                lab,
                load(&s.reconnects),
            ));
            out.push(Observation::counter(
                "canopy_fabric_reparent_seconds_total",
                n,
                lab,
                load(&s.reparent_ms_total) as f64 / 1000.0,
            ));
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
                    out.push(g(
                        "canopy_fabric_reparent_seconds",
                        &[("subtree", &st), ("parent", parent), ("quantile", qs)],
                        v,
                    ));
                }
                out.push(c(
                    "canopy_fabric_reparent_seconds_count",
                    lab,
                    h.map_or(0, |h| h.len()),
                ));
            }
            for (reason, v) in [("send_blocked", &s.stalls), ("no_ack", &s.ack_stalls)] {
                out.push(c(
                    "canopy_fabric_stalls_total",
                    &[("subtree", &st), ("parent", parent), ("reason", reason)],
                    load(v),
                ));
            }
            out.push(c(
                "canopy_fabric_bad_controls_total",
                lab,
                load(&s.bad_controls),
            ));
            out.push(c(
                "canopy_fabric_segments_replayed_total",
                lab,
                load(&s.segments_replayed),
            ));
            let (bytes, records, ob) = u.buffer();
            out.push(g("canopy_fabric_buffer_bytes", lab, bytes as f64));
            out.push(g("canopy_fabric_buffer_records", lab, records as f64));
            out.push(c(
                "canopy_fabric_buffer_dropped_records_total",
                lab,
                ob.dropped_records,
            ));
            out.push(c(
                "canopy_fabric_acked_records_total",
                lab,
                ob.acked_records,
            ));
            out.push(c("canopy_fabric_bad_acks_total", lab, ob.bad_acks));
            out.push(c(
                "canopy_fabric_replayed_unacked_records_total",
                lab,
                ob.replayed_unacked,
            ));
            out.push(c(
                "canopy_fabric_unacked_released_records_total",
                lab,
                ob.unacked_released,
            ));
            out.push(g(
                "canopy_fabric_uplink_connected",
                lab,
                f64::from(u8::from(u.is_connected())),
            ));
            out.push(g(
                "canopy_fabric_uplink_on_backup",
                lab,
                f64::from(u8::from(u.on_backup())),
            ));
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

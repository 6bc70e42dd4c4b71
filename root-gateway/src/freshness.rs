//! Freshness: how old a sample is when it reaches the gateway, from its
//! tick at the leaf to its arrival here (relay hops, their ticks, links).
//!
//! An hdrhistogram of milliseconds (3 significant digits, up to an hour;
//! older samples, e.g. replayed after an outage, count in the top bucket),
//! exposed on `/metrics` as a Prometheus histogram plus p50/p99 gauges.

use hdrhistogram::Histogram;

use crate::api::selfmetrics::MetricsText;

/// Upper bounds (seconds) of the exposed buckets.
const BUCKETS: [f64; 10] = [0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0];

/// Highest age tracked exactly, ms.
const MAX_MS: u64 = 3_600_000;

/// The gateway's freshness histogram.
#[derive(Clone, Debug)]
pub struct Freshness {
    hist: Option<Histogram<u64>>,
}

impl Default for Freshness {
    fn default() -> Self {
        Self {
            // Invariant: (1, MAX_MS, 3) are valid bounds; None only if the
            // crate refuses them, and then nothing is recorded.
            hist: Histogram::new_with_bounds(1, MAX_MS, 3).ok(),
        }
    }
}

impl Freshness {
    /// A sample stamped `ts_ms` arrived at `now_ms`.
    pub fn record(&mut self, now_ms: i64, ts_ms: i64) {
        let age = u64::try_from(now_ms.saturating_sub(ts_ms)).unwrap_or(0);
        if let Some(h) = &mut self.hist {
            h.saturating_record(age.clamp(1, MAX_MS));
        }
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.hist.as_ref().map_or(0, Histogram::len)
    }

    /// The age at quantile `q` (0..=1), seconds.
    pub fn quantile_secs(&self, q: f64) -> f64 {
        self.hist
            .as_ref()
            .map_or(0.0, |h| h.value_at_quantile(q) as f64 / 1000.0)
    }

    /// Writes `canopy_gateway_freshness_seconds` (histogram) and its
    /// p50/p99 gauges.
    pub fn render(&self, out: &mut MetricsText) {
        let Some(h) = &self.hist else { return };
        let name = "canopy_gateway_freshness_seconds";
        out.header(
            name,
            "histogram",
            "Age of samples on arrival at the gateway (leaf tick to arrival).",
        );
        for le in BUCKETS {
            let ms = (le * 1000.0) as u64;
            out.sample(
                &format!("{name}_bucket"),
                &[("le", &le.to_string())],
                h.count_between(0, ms) as f64,
            );
        }
        let n = h.len() as f64;
        out.sample(&format!("{name}_bucket"), &[("le", "+Inf")], n);
        out.sample(&format!("{name}_sum"), &[], h.mean() * n / 1000.0);
        out.sample(&format!("{name}_count"), &[], n);
        out.gauge(
            "canopy_gateway_freshness_p50_seconds",
            "Median age of samples on arrival.",
            self.quantile_secs(0.5),
        );
        out.gauge(
            "canopy_gateway_freshness_p99_seconds",
            "99th percentile age of samples on arrival.",
            self.quantile_secs(0.99),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_land_in_their_buckets_and_quantiles() {
        let mut f = Freshness::default();
        for age in [100, 200, 300, 400, 500, 600, 700, 800, 900, 2_500] {
            f.record(10_000 + age, 10_000);
        }
        // A sample from the future (clock skew) counts as fresh, not negative.
        f.record(10_000, 10_500);
        assert_eq!(f.count(), 11);
        assert!(
            (f.quantile_secs(0.5) - 0.5).abs() < 0.01,
            "{}",
            f.quantile_secs(0.5)
        );
        assert!((f.quantile_secs(0.99) - 2.5).abs() < 0.01);
        let mut out = MetricsText::default();
        f.render(&mut out);
        let text = out.0;
        assert!(text.contains("# TYPE canopy_gateway_freshness_seconds histogram"));
        assert!(
            text.contains("canopy_gateway_freshness_seconds_bucket{le=\"1\"} 10"),
            "{text}"
        );
        assert!(
            text.contains("canopy_gateway_freshness_seconds_count 11"),
            "{text}"
        );
    }
}

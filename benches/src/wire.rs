//! One sender and one receiver on one link, exactly as a node runs them:
//! what `wire-cost` measures and the criterion benches time.

use std::collections::HashMap;

use anyhow::{Context, Result};
use canopy_proto::codec::{
    BoundsPolicy, CodecConfig, LinkDecoder, LinkEncoder, RecordSplitter, Sender,
};
use canopy_proto::model::{Labels, MetricKind};

use crate::trace::Scrape;

/// Source name the trace's samples are attributed to.
pub const SOURCE: &str = "trace";

/// Encodes every scrape as one frame; returns the wire bytes (records with
/// their length prefixes, concatenated).
pub fn encode(scrapes: &[Scrape], cfg: &CodecConfig, policy: BoundsPolicy) -> Result<Vec<u8>> {
    let tick = scrape_tick_ms(scrapes);
    let mut tx = Sender::new(policy);
    let mut enc = LinkEncoder::new(cfg)?;
    let src = tx.source(SOURCE, tick);
    let mut wire = Vec::new();
    for s in scrapes {
        tx.begin_tick(s.ts_ms);
        tx.tick_source(src, s.ts_ms);
        for (l, k, v) in &s.samples {
            tx.observe(src, l, *k, *v);
        }
        let (table, cs) = tx.finish_tick();
        enc.encode(table, cs, &mut wire)?;
        tx.end_tick();
    }
    Ok(wire)
}

/// A decoded scrape: timestamp and every series present (changed or not),
/// in wire-id order.
pub type Decoded = (i64, Vec<(Labels, f64)>);

/// Runs the receiver over wire bytes; one decoded scrape per frame.
pub fn decode(wire: &[u8], cfg: &CodecConfig) -> Result<Vec<Decoded>> {
    let mut dec = LinkDecoder::new(cfg)?;
    let mut split = RecordSplitter::new(cfg.max_frame_bytes);
    split.push(wire);
    let mut out = Vec::new();
    while let Some(payload) = split.pop()? {
        let f = dec
            .decode(&payload)
            .with_context(|| format!("frame {}", out.len()))?;
        let mut series: Vec<(u32, Labels, f64)> = dec
            .series_iter()
            .map(|(id, s)| (id, s.labels.clone(), dec.value(id).unwrap_or(f64::NAN)))
            .collect();
        series.sort_unstable_by_key(|s| s.0);
        out.push((
            f.ts_ms,
            series.into_iter().map(|(_, l, v)| (l, v)).collect(),
        ));
    }
    Ok(out)
}

/// Bound violations found by [`check`].
#[derive(Debug, Default)]
pub struct CheckReport {
    /// Samples compared.
    pub samples: u64,
    /// Samples outside their error bound.
    pub violations: u64,
    /// Counter samples that decreased without a true reset.
    pub monotonic_violations: u64,
    /// Scrapes whose timestamp or series set differ.
    pub shape_mismatches: u64,
    /// First few violations, for the eye.
    pub examples: Vec<String>,
}

/// Compares a decoded trace against the original under `policy`'s bounds.
pub fn check(orig: &[Scrape], decoded: &[Decoded], policy: &BoundsPolicy) -> CheckReport {
    let mut r = CheckReport::default();
    if orig.len() != decoded.len() {
        r.shape_mismatches += 1;
    }
    let mut last: HashMap<&Labels, (f64, f64)> = HashMap::new();
    for (s, (ts, dec)) in orig.iter().zip(decoded) {
        if s.ts_ms != *ts || s.samples.len() != dec.len() {
            r.shape_mismatches += 1;
        }
        let got: HashMap<&Labels, f64> = dec.iter().map(|(l, v)| (l, *v)).collect();
        for (l, k, truth) in &s.samples {
            r.samples += 1;
            let Some(&v) = got.get(l) else {
                r.shape_mismatches += 1;
                continue;
            };
            let b = policy.for_metric(l.name());
            let ok = if truth.is_nan() {
                v.is_nan()
            } else {
                match k {
                    MetricKind::Gauge => {
                        v == *truth || (v - truth).abs() <= b.gauge_epsilon * truth.abs()
                    }
                    MetricKind::Counter => {
                        v == *truth || (v - truth).abs() <= 1.0 / f64::from(b.counter_scale)
                    }
                }
            };
            if !ok {
                r.violations += 1;
                if r.examples.len() < 5 {
                    r.examples
                        .push(format!("{} @{}: true {truth} got {v}", l, s.ts_ms));
                }
            }
            if *k == MetricKind::Counter {
                if let Some((pt, pv)) = last.get(l)
                    && v < *pv
                    && truth >= pt
                {
                    r.monotonic_violations += 1;
                }
                last.insert(l, (*truth, v));
            }
        }
    }
    r
}

/// Number of samples in a trace.
pub fn sample_count(scrapes: &[Scrape]) -> u64 {
    scrapes.iter().map(|s| s.samples.len() as u64).sum()
}

/// Median interval between scrapes, ms (1000 when unknown).
pub fn scrape_tick_ms(scrapes: &[Scrape]) -> u32 {
    let mut d: Vec<i64> = scrapes
        .windows(2)
        .map(|w| w[1].ts_ms - w[0].ts_ms)
        .collect();
    d.sort_unstable();
    d.get(d.len() / 2)
        .and_then(|&m| u32::try_from(m).ok())
        .filter(|&m| m > 0)
        .unwrap_or(1000)
}

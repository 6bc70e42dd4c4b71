//! Per-series histograms for noisy gauges.
//!
//! A gauge that is noise around a level (scrape durations, latencies) costs
//! ~10 bits a value whatever the predictor, and its distribution is rarely
//! the bell the shared length model assumes: a hard floor, a long tail,
//! often several modes. Once a gauge's residuals run to [`NOISY_LEN`] bits,
//! both ends give it a histogram of its own: 63 bins of `2^shift` wire
//! units around an anchor, the bin coded in one step of an adaptive
//! 64-symbol distribution (so the series' shape is learnt; format 4, where
//! format 3 took six binary decisions), the offset in the bin raw. Bin 0 is
//! the escape: the value is coded the usual way.
//!
//! Histograms live in the link model by series id, created identically on
//! both ends (only from state both hold), at most [`MAX_HISTS`] per link.

use std::collections::HashMap;

use super::idhash::ValueHashState;
use super::rangecoder::{Freqs, RangeDecoder, RangeEncoder};

/// Residual length (bits) from which a gauge gets a histogram.
pub(crate) const NOISY_LEN: usize = 8;
/// Most histograms per link (~270 bytes each).
const MAX_HISTS: usize = 1 << 16;
/// Bins: 64 symbols, bin 0 the escape.
const BINS: usize = 64;
const SYMBOLS: i128 = BINS as i128;
/// Bin of the anchor itself: bins cover `[-31, 32)` widths around it.
const MID: i128 = SYMBOLS / 2;
/// Bins per histogram span this many times the typical residual.
const SPAN_BITS: usize = 2;

#[derive(Clone, Debug)]
struct Hist {
    anchor: i64,
    shift: u32,
    bins: Freqs<BINS>,
}

impl Hist {
    /// The bin symbol (1..64) and offset of `w`, or `None` outside the bins.
    fn bin(&self, w: i64) -> Option<(u32, u64)> {
        let d = i128::from(w) - i128::from(self.anchor);
        let b = (d >> self.shift) + MID;
        (1..SYMBOLS).contains(&b).then(|| {
            let off = (d & ((1i128 << self.shift) - 1)) as u64;
            (b as u32, off)
        })
    }
}

/// The histograms of one link, by series id.
#[derive(Clone, Debug, Default)]
pub(crate) struct Hists {
    /// Keyed fast hashing (ids are the peer's): asked of every changed
    /// gauge on both ends of a link, where SipHash was a visible share.
    map: HashMap<u32, Box<Hist>, ValueHashState>,
}

impl Hists {
    /// Codes `w` of series `id` through its histogram: `true` when done,
    /// `false` when the series has none or `w` escaped (then the caller
    /// codes it plainly and calls [`Hists::after_plain`]).
    pub fn put(&mut self, e: &mut RangeEncoder, id: u32, w: i64) -> bool {
        let Some(h) = self.map.get_mut(&id) else {
            return false;
        };
        let (sym, off) = h.bin(w).unwrap_or((0, 0));
        e.symbol(&mut h.bins, sym as usize);
        if sym == 0 {
            return false;
        }
        e.direct(off, h.shift);
        true
    }

    /// Decodes what [`Hists::put`] coded: `Some(w)`, or `None` when the
    /// series has no histogram or the value escaped.
    pub fn get(&mut self, d: &mut RangeDecoder<'_>, id: u32) -> Option<i64> {
        let h = self.map.get_mut(&id)?;
        let sym = d.symbol(&mut h.bins) as i128;
        if sym == 0 {
            return None;
        }
        let off = i128::from(d.direct(h.shift));
        // Hostile bits give some value, never a panic: i128 cannot
        // overflow here and the cast keeps the low 64 bits.
        Some((i128::from(h.anchor) + ((sym - MID) << h.shift) + off) as i64)
    }

    /// After series `id` was coded plainly at residual length `len`: give a
    /// gauge that turned noisy a histogram around `level` (its running
    /// mean). An escaped value leaves the histogram as it is: outliers
    /// must not drag it away from where the values are.
    pub fn after_plain(&mut self, id: u32, level: i64, len: usize) {
        if (NOISY_LEN..=48).contains(&len)
            && self.map.len() < MAX_HISTS
            && !self.map.contains_key(&id)
        {
            let h = Hist {
                anchor: level,
                shift: (len - SPAN_BITS) as u32,
                bins: Freqs::default(),
            };
            self.map.insert(id, Box::new(h));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Values in and out of the bins round-trip, escapes included.
        #[test]
        fn histogram_values_round_trip(
            anchor in any::<i64>(),
            len in NOISY_LEN..=48,
            ws in prop::collection::vec(any::<i64>(), 1..100),
            near in prop::collection::vec(-5000i64..5000, 1..100),
        ) {
            let (mut tx, mut rx) = (Hists::default(), Hists::default());
            tx.after_plain(7, anchor, len);
            rx.after_plain(7, anchor, len);
            let vals: Vec<i64> = ws.iter().zip(&near).flat_map(|(&w, &n)| [w, anchor.wrapping_add(n)]).collect();
            let mut e = RangeEncoder::new(Vec::new());
            let mut done = Vec::new();
            for &w in &vals {
                let ok = tx.put(&mut e, 7, w);
                if !ok { tx.after_plain(7, w, len); }
                prop_assert!(ok || w.wrapping_sub(anchor).unsigned_abs() >> len >= 1, "near values fit the bins");
                done.push(ok);
            }
            let bytes = e.finish();
            let mut d = RangeDecoder::new(&bytes);
            for (&w, &ok) in vals.iter().zip(&done) {
                let got = rx.get(&mut d, 7);
                if ok {
                    prop_assert_eq!(got, Some(w));
                } else {
                    prop_assert_eq!(got, None);
                    rx.after_plain(7, w, len);
                }
            }
            prop_assert!(d.finish().is_ok());
        }
    }

    #[test]
    fn quiet_series_get_no_histogram() {
        let mut h = Hists::default();
        h.after_plain(1, 100, NOISY_LEN - 1);
        let mut e = RangeEncoder::new(Vec::new());
        assert!(!h.put(&mut e, 1, 100), "no histogram: coded plainly");
        h.after_plain(1, 100, NOISY_LEN);
        assert!(h.put(&mut e, 1, 100), "the anchor itself is in the bins");
    }
}

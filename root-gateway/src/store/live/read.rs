//! Reading a series back: its explicit samples, and for a fabric series
//! the change points with the same value implied at every tick of its
//! source while the source's heartbeats cover it, and `up` from the
//! source's alive periods.

use super::*;

impl LiveStore {
    /// The samples of `e` in `[mint, maxt]` in a new vector.
    pub(super) fn materialise(&self, e: &Entry, mint: i64, maxt: i64) -> Vec<Sample> {
        let mut out = Vec::new();
        self.materialise_into(e, mint, maxt, &mut out);
        out
    }

    /// The samples of `e` in `[mint, maxt]`, explicit and implied, appended
    /// to `out` (empty on entry).
    pub(super) fn materialise_into(&self, e: &Entry, mint: i64, maxt: i64, out: &mut Vec<Sample>) {
        let src = e.source().and_then(|s| self.sources.get(s as usize));
        let Some(src) = src else {
            // Explicit samples only: decode just the window.
            let chunks = e.chunks_in(mint, self.cold_read());
            let est: usize = chunks
                .clone()
                .take_while(|c| c.first_ts() <= maxt)
                .map(|c| c.estimate(mint, maxt))
                .sum();
            out.reserve(est + 1);
            for c in chunks {
                if c.first_ts() > maxt || c.decode_window(mint, maxt, out) {
                    break;
                }
            }
            if out.last().is_some_and(|s| s.ts_ms > maxt) {
                out.pop();
            }
            return;
        };
        let mut cps = Vec::new();
        for c in e.chunks_at(mint, self.cold_read()) {
            if c.first_ts() > maxt || c.decode_window(i64::MIN, maxt, &mut cps) {
                break;
            }
        }
        for (i, cp) in cps.iter().enumerate() {
            if cp.ts_ms > maxt {
                break;
            }
            let next = cps.get(i + 1).map_or(i64::MAX, |n| n.ts_ms);
            if cp.ts_ms >= mint {
                out.push(*cp);
            }
            if is_stale_nan(cp.value) || next <= mint {
                continue;
            }
            let Some(period) = src.period_from(cp.ts_ms) else {
                continue;
            };
            let tick = src.tick_ms.max(1);
            // Implied points run on the change point's grid to the end of
            // the covering alive period. Real ticks jitter by a few ms
            // around that grid, so a grid point within half a tick of the
            // next change point or of the last heartbeat *is* that tick:
            // stop short of the one and reach the other.
            let half = tick / 2;
            let k0 = ((mint - cp.ts_ms + tick - 1) / tick).max(1);
            let mut t = cp.ts_ms.saturating_add(k0.saturating_mul(tick));
            while t < next.saturating_sub(half) && t <= maxt && t <= period.end.saturating_add(half)
            {
                if t >= period.start {
                    out.push(Sample {
                        ts_ms: t,
                        value: cp.value,
                    });
                }
                t += tick;
            }
            if period.closed
                && t > period.end.saturating_add(half)
                && t < next
                && t >= mint
                && t <= maxt
            {
                out.push(Sample {
                    ts_ms: t,
                    value: stale_nan(),
                });
            }
        }
    }

    /// `up` of `src` in `[mint, maxt]`: 1 at each tick of an alive period,
    /// 0 at each tick after a closed one until the next begins.
    pub(super) fn up_samples(&self, src: &Source, mint: i64, maxt: i64) -> Vec<Sample> {
        let tick = src.tick_ms.max(1);
        let mut out = Vec::new();
        for (i, a) in src.alive.iter().enumerate() {
            let mut emit = |from: i64, to: i64, v: f64| {
                let k0 = ((mint - from + tick - 1) / tick).max(0);
                let mut t = from.saturating_add(k0.saturating_mul(tick));
                while t <= to && t <= maxt {
                    out.push(Sample { ts_ms: t, value: v });
                    t += tick;
                }
            };
            emit(a.start, a.end, 1.0);
            if a.closed {
                let to = src.alive.get(i + 1).map_or(self.now_ms, |n| n.start - 1);
                emit(a.end + tick, to, 0.0);
            }
        }
        out
    }
}

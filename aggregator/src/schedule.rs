//! Staggered timers: when a node samples and when its relay forwards, on
//! the wall clock, so that a sample climbs the tree within one tick.
//!
//! Every node samples on the tick boundary (`k * tick`, Unix time) plus a
//! small per-host jitter; a relay at depth `d` in a subtree of depth `D`
//! forwards `(D - d + 1) * step` after the boundary, so a level forwards
//! after the level below it has forwarded and its frames have arrived. A
//! sample then reaches the gateway about `D * step` after its tick instead
//! of up to one tick per hop. Pure arithmetic (the caller passes `now`);
//! `relay` and `canopy node` sleep until the times it gives, and the fabric
//! simulator uses the same functions for its phases.

/// A periodic timer pinned to the wall clock: it fires at
/// `k * tick_ms + offset_ms` (Unix ms) for every integer `k`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TickSchedule {
    tick_ms: i64,
    offset_ms: i64,
}

impl TickSchedule {
    /// Fires every `tick_ms` (at least 1), `offset_ms` after each boundary
    /// (taken modulo the tick).
    pub fn new(tick_ms: i64, offset_ms: i64) -> Self {
        let tick_ms = tick_ms.max(1);
        Self {
            tick_ms,
            offset_ms: offset_ms.rem_euclid(tick_ms),
        }
    }

    /// Tick length, ms.
    pub fn tick_ms(&self) -> i64 {
        self.tick_ms
    }

    /// Offset after each boundary, ms (below the tick).
    pub fn offset_ms(&self) -> i64 {
        self.offset_ms
    }

    /// The first firing time strictly after `now_ms`.
    pub fn next_after(&self, now_ms: i64) -> i64 {
        let k = (now_ms - self.offset_ms).div_euclid(self.tick_ms) + 1;
        k * self.tick_ms + self.offset_ms
    }

    /// Milliseconds to wait at `now_ms` for the next firing (at least 1).
    pub fn wait_ms(&self, now_ms: i64) -> u64 {
        u64::try_from(self.next_after(now_ms) - now_ms)
            .unwrap_or(1)
            .max(1)
    }
}

/// Default step between relay levels, ms: more than a link's latency plus
/// a relay's merge time on a loaded node, and 20 levels (a million nodes
/// in a binary heap) still fit in half a one-second tick.
pub const DEFAULT_STEP_MS: i64 = 20;

/// Default spread of the leaves' sampling instants, ms (below the step, so
/// a node's own relay never forwards before its leaf sampled).
pub const DEFAULT_JITTER_MS: i64 = 5;

/// How long after the tick boundary a relay at `depth` (a subtree top is 1)
/// in a subtree `max_depth` deep forwards: `(max_depth - depth + 1) * step`.
pub fn relay_offset_ms(depth: u32, max_depth: u32, step_ms: i64) -> i64 {
    i64::from(max_depth.saturating_sub(depth) + 1) * step_ms.max(0)
}

/// A host's sampling offset in `0..=jitter_ms`: a fixed function of its
/// name (FNV-1a), so restarts keep it and neighbours spread out.
pub fn leaf_jitter_ms(host: &str, jitter_ms: i64) -> i64 {
    if jitter_ms <= 0 {
        return 0;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in host.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % (jitter_ms as u64 + 1)) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_on_boundary_plus_offset() {
        let s = TickSchedule::new(1000, 40);
        assert_eq!(s.next_after(1_000_000), 1_000_040);
        assert_eq!(s.next_after(1_000_039), 1_000_040);
        // Strictly after: a firing at exactly `now` is the next one's turn.
        assert_eq!(s.next_after(1_000_040), 1_001_040);
        assert_eq!(s.wait_ms(1_000_039), 1);
        assert_eq!(s.wait_ms(1_000_040), 1000);
        // Offsets wrap into the tick; negative times work too.
        assert_eq!(TickSchedule::new(1000, 1040).offset_ms(), 40);
        assert_eq!(TickSchedule::new(1000, -960).offset_ms(), 40);
        assert_eq!(s.next_after(-5), 40);
        assert_eq!(s.next_after(-961), -960);
    }

    #[test]
    fn relays_forward_after_the_level_below() {
        // A subtree 4 deep: the bottom forwards first, the top last.
        let off: Vec<i64> = (1..=4).map(|d| relay_offset_ms(d, 4, 20)).collect();
        assert_eq!(off, vec![80, 60, 40, 20]);
        for w in off.windows(2) {
            assert!(w[0] > w[1], "a parent forwards after its children");
        }
        // Leaves sample before any relay forwards.
        for h in ["cn000001", "cn000002", "h01", "a-much-longer-host-name"] {
            let j = leaf_jitter_ms(h, DEFAULT_JITTER_MS);
            assert!((0..=DEFAULT_JITTER_MS).contains(&j));
            assert!(j < relay_offset_ms(4, 4, DEFAULT_STEP_MS));
        }
        assert_eq!(leaf_jitter_ms("h01", 0), 0);
        let spread: std::collections::HashSet<i64> = (0..64)
            .map(|i| leaf_jitter_ms(&format!("cn{i:06}"), DEFAULT_JITTER_MS))
            .collect();
        assert!(spread.len() > 3, "hosts spread over the jitter: {spread:?}");
    }
}

//! When a relay may acknowledge its children's records (sans-I/O).
//!
//! A relay tags each tick's uplink frame with the tick number; a child's
//! record is safe once a tick at or after the one that carried it is held
//! for good upstream. With one uplink that is its acked tag. A subtree top
//! has one uplink per gateway, and "for good" must mean *every* gateway:
//! a top that acked its children as soon as any one gateway had the data
//! would, dying, leave the others without it (the children no longer
//! replay it). So [`AckQuorum`] takes the lowest acked tag of the gateways
//! in its *live set*.
//!
//! The live set keeps the rule from hanging on a dead or stalled gateway:
//! an uplink that is not live (its connection is down, or it was left for
//! an ack stall and has acked nothing since) drops out, and its share waits
//! in that uplink's own bounded replay buffer until it returns. A returning
//! uplink rejoins only once it has caught up (its acked tag reached the
//! quorum's), so its replay does not hold back the children meanwhile.
//!
//! Trade-off: a child's ack waits for the slowest live gateway. A gateway
//! that keeps its link but stops acking delays every ack of the subtree by
//! up to the top's ack timeout (then it leaves the set), which the planned
//! timeouts allow for: a child's ack timeout is a level's step longer than
//! its parent's. With no live uplink at all nothing new is acked, as with
//! one uplink down.

use std::collections::VecDeque;

/// What the relay knows of one uplink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UpAck {
    /// Connected and not left for an ack stall since its last ack.
    pub live: bool,
    /// Highest tick the parent holds for good.
    pub acked_tag: u64,
}

/// The tick a relay's children may be acked up to (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct AckQuorum {
    /// Per uplink: counted in the minimum.
    members: Vec<bool>,
    /// Ticks held for good by every member so far (never decreases).
    safe: u64,
}

impl AckQuorum {
    /// The safe tick, given the uplinks' state now.
    pub fn update(&mut self, ups: &[UpAck]) -> u64 {
        self.members.resize(ups.len(), false);
        let mut low: Option<u64> = None;
        for (m, u) in self.members.iter_mut().zip(ups) {
            // A live uplink that was out rejoins once it caught up.
            *m = u.live && (*m || u.acked_tag >= self.safe);
            if *m {
                low = Some(low.map_or(u.acked_tag, |l| l.min(u.acked_tag)));
            }
        }
        if let Some(l) = low {
            self.safe = self.safe.max(l);
        }
        self.safe
    }

    /// Ticks held for good by every member so far.
    pub fn safe(&self) -> u64 {
        self.safe
    }
}

/// Ticks a child's records may wait for upstream acks before entries merge.
const MAX_PENDING_TICKS: usize = 64;

/// One child link's records fed to the merger and not yet safe upstream.
#[derive(Debug, Default)]
pub struct PendingAcks {
    /// (tick, records fed by then), oldest first, not yet safe upstream.
    pending: VecDeque<(u64, u64)>,
    /// Highest count released.
    released: u64,
}

impl PendingAcks {
    /// After tick `tick` was emitted: the `fed` records so far went up in
    /// it (or earlier).
    pub fn note_tick(&mut self, tick: u64, fed: u64) {
        if self.pending.back().map_or(self.released, |p| p.1) >= fed {
            return;
        }
        if self.pending.len() >= MAX_PENDING_TICKS {
            // Upstream is not acking (an outage): later ticks merge into
            // the newest entry, which keeps the bound.
            self.pending.pop_back();
        }
        self.pending.push_back((tick, fed));
    }

    /// Every tick up to `safe` is held for good upstream: the record count
    /// that may be acked now, when it moved.
    pub fn release(&mut self, safe: u64) -> Option<u64> {
        let before = self.released;
        while let Some(&(t, fed)) = self.pending.front() {
            if t > safe {
                break;
            }
            self.released = self.released.max(fed);
            self.pending.pop_front();
        }
        (self.released > before).then_some(self.released)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(live: bool, acked_tag: u64) -> UpAck {
        UpAck { live, acked_tag }
    }

    /// Hole (a): with two gateways, a tick one of them acked is not safe
    /// while the other, live, has not.
    #[test]
    fn every_live_gateway_must_hold_a_tick() {
        let mut q = AckQuorum::default();
        assert_eq!(q.update(&[up(true, 5), up(true, 3)]), 3);
        assert_eq!(q.update(&[up(true, 9), up(true, 3)]), 3, "B lags");
        assert_eq!(q.update(&[up(true, 9), up(true, 7)]), 7);
    }

    /// A dead or stalled gateway leaves the set; its share waits in its own
    /// uplink's buffer. It rejoins once it caught up.
    #[test]
    fn a_gateway_out_of_the_live_set_holds_nothing_back_until_it_catches_up() {
        let mut q = AckQuorum::default();
        assert_eq!(q.update(&[up(true, 4), up(true, 4)]), 4);
        assert_eq!(q.update(&[up(true, 9), up(false, 4)]), 9, "B is out");
        // B reconnects and replays: its acks climb, but it is behind.
        assert_eq!(q.update(&[up(true, 11), up(true, 6)]), 11);
        assert_eq!(q.update(&[up(true, 12), up(true, 10)]), 12);
        // Caught up: counted again.
        assert_eq!(q.update(&[up(true, 14), up(true, 12)]), 12);
        assert_eq!(q.update(&[up(true, 16), up(true, 13)]), 13);
    }

    #[test]
    fn with_no_live_uplink_nothing_new_is_safe() {
        let mut q = AckQuorum::default();
        assert_eq!(q.update(&[up(true, 4)]), 4);
        assert_eq!(q.update(&[up(false, 8)]), 4);
        assert_eq!(q.update(&[up(true, 8)]), 8, "back and counted");
        assert_eq!(q.update(&[]), 8, "never decreases");
    }

    #[test]
    fn records_are_released_by_the_tick_that_carried_them() {
        let mut p = PendingAcks::default();
        p.note_tick(1, 3);
        p.note_tick(2, 3); // nothing new: no entry
        p.note_tick(3, 5);
        assert_eq!(p.release(0), None);
        assert_eq!(p.release(2), Some(3));
        assert_eq!(p.release(2), None);
        assert_eq!(p.release(3), Some(5));
    }

    #[test]
    fn pending_ticks_are_bounded_during_an_outage() {
        let mut p = PendingAcks::default();
        for t in 1..=1000 {
            p.note_tick(t, t);
        }
        assert!(p.pending.len() <= MAX_PENDING_TICKS);
        assert_eq!(p.release(999), Some(MAX_PENDING_TICKS as u64 - 1));
        assert_eq!(p.release(1000), Some(1000));
    }
}

//! The uplink's bounded replay buffer (sans-I/O: the caller passes `now`).
//!
//! Records are held in *segments*. A segment is one encoder stream: its
//! first record is a keyframe, and a receiver can decode it only from that
//! first record on, with a fresh decoder. The encoder side learns which
//! segment to encode for from [`Outbox::epoch`]; a record for another epoch
//! is refused and the encoder starts over (a new encoder, so a keyframe).
//!
//! While a parent is connected, the newest segment streams live: records
//! leave as soon as they are written. While none is, records wait, and a
//! new segment starts every `segment_ms` so that, when the buffer is over
//! its byte or age limit, the *oldest whole segment* goes (a segment cut at
//! its start could not be decoded). On reconnect, older segments replay
//! first, oldest first, each on a link of its own.

use std::collections::VecDeque;

/// Limits of the replay buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BufferLimits {
    /// Bytes held at most (record payloads).
    pub max_bytes: usize,
    /// Records older than this are dropped, ms.
    pub max_age_ms: i64,
    /// While disconnected, a new segment (with a keyframe) starts this
    /// often, so that the oldest data can be dropped a segment at a time.
    pub segment_ms: i64,
}

impl Default for BufferLimits {
    fn default() -> Self {
        Self {
            max_bytes: 16 << 20,
            max_age_ms: 10 * 60 * 1000,
            segment_ms: 30_000,
        }
    }
}

#[derive(Debug)]
struct Segment {
    epoch: u64,
    /// When the segment's first record was pushed.
    started_ms: i64,
    /// (pushed at, payload), oldest first.
    recs: VecDeque<(i64, Vec<u8>)>,
}

/// Counters of the buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutboxStats {
    /// Records dropped because the buffer was over its byte or age limit.
    pub dropped_records: u64,
    /// Records refused because they were encoded for an older epoch.
    pub stale_records: u64,
}

/// The replay buffer of one uplink.
#[derive(Debug)]
pub struct Outbox {
    limits: BufferLimits,
    epoch: u64,
    segs: VecDeque<Segment>,
    bytes: usize,
    stats: OutboxStats,
}

impl Outbox {
    /// An empty buffer; the first epoch is 1.
    pub fn new(limits: BufferLimits) -> Self {
        Self {
            limits,
            epoch: 1,
            segs: VecDeque::new(),
            bytes: 0,
            stats: OutboxStats::default(),
        }
    }

    /// The epoch the encoder must encode for now.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Ends the current segment: the next record must start a new encoder
    /// stream. Call when the live link dies (the receiver's decoder went
    /// with it) or to cut a long disconnected segment.
    pub fn new_epoch(&mut self) -> u64 {
        self.epoch += 1;
        self.epoch
    }

    /// Queues one record encoded for `epoch` at `now_ms`. False (and
    /// counted) when `epoch` is not the current one: the encoder must start
    /// over. Makes room by dropping the oldest segments.
    pub fn push(&mut self, epoch: u64, now_ms: i64, rec: Vec<u8>) -> bool {
        if epoch != self.epoch {
            self.stats.stale_records += 1;
            return false;
        }
        if self.segs.back().is_none_or(|s| s.epoch != epoch) {
            // Only the current epoch's first record may open its segment;
            // anything older than it will never be continued.
            self.segs.push_back(Segment {
                epoch,
                started_ms: now_ms,
                recs: VecDeque::new(),
            });
        }
        self.bytes += rec.len();
        if let Some(s) = self.segs.back_mut() {
            s.recs.push_back((now_ms, rec));
        }
        self.enforce(now_ms);
        true
    }

    /// Drops what is over the limits, a whole segment at a time, oldest
    /// first: a segment goes for age once its newest record is too old.
    /// When the live segment itself must go, a new epoch starts (the
    /// encoder restarts with a keyframe).
    pub fn enforce(&mut self, now_ms: i64) {
        let cutoff = now_ms.saturating_sub(self.limits.max_age_ms);
        while let Some(front) = self.segs.front() {
            let expired = front.recs.back().is_some_and(|r| r.0 < cutoff);
            if self.bytes <= self.limits.max_bytes && !expired {
                return;
            }
            let live = front.epoch == self.epoch;
            if let Some(s) = self.segs.pop_front() {
                self.drop_segment(s);
            }
            if live {
                self.new_epoch();
            }
        }
    }

    fn drop_segment(&mut self, s: Segment) {
        let n = s.recs.len() as u64;
        self.stats.dropped_records += n;
        self.bytes -= s.recs.iter().map(|r| r.1.len()).sum::<usize>();
    }

    /// While disconnected: start a new segment when the current one is
    /// older than `segment_ms`, and apply the limits.
    pub fn tick_disconnected(&mut self, now_ms: i64) {
        if self.segs.back().is_some_and(|s| {
            s.epoch == self.epoch && now_ms - s.started_ms >= self.limits.segment_ms
        }) {
            self.new_epoch();
        }
        self.enforce(now_ms);
    }

    /// True when the oldest segment is a finished one (an older epoch) that
    /// must replay on a link of its own before the live one.
    pub fn has_backlog(&self) -> bool {
        self.segs.front().is_some_and(|s| s.epoch != self.epoch)
    }

    /// The oldest segment's records, to replay from its start.
    pub fn backlog(&self) -> impl Iterator<Item = &[u8]> {
        self.segs
            .front()
            .filter(|s| s.epoch != self.epoch)
            .into_iter()
            .flat_map(|s| s.recs.iter().map(|r| r.1.as_slice()))
    }

    /// The oldest segment was replayed whole: forget it.
    pub fn backlog_done(&mut self) {
        if self.has_backlog()
            && let Some(s) = self.segs.pop_front()
        {
            self.bytes -= s.recs.iter().map(|r| r.1.len()).sum::<usize>();
        }
    }

    /// The next record of the live (current) segment, once no backlog is
    /// left, with its epoch; it stays until [`Outbox::sent`].
    pub fn next_live(&self) -> Option<(u64, &[u8])> {
        if self.has_backlog() {
            return None;
        }
        self.segs
            .front()
            .filter(|s| s.epoch == self.epoch)
            .and_then(|s| s.recs.front().map(|r| (s.epoch, r.1.as_slice())))
    }

    /// The record [`Outbox::next_live`] returned was written.
    pub fn sent(&mut self) {
        if let Some(s) = self.segs.front_mut()
            && s.epoch == self.epoch
            && let Some((_, r)) = s.recs.pop_front()
        {
            self.bytes -= r.len();
        }
    }

    /// The live link died: what it had not written yet belongs to a stream
    /// the next link cannot continue. Drops it (counted) and starts a new
    /// epoch.
    pub fn link_lost(&mut self) {
        if let Some(s) = self.segs.back()
            && s.epoch == self.epoch
            && let Some(s) = self.segs.pop_back()
        {
            self.drop_segment(s);
        }
        self.new_epoch();
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Records held.
    pub fn records(&self) -> usize {
        self.segs.iter().map(|s| s.recs.len()).sum()
    }

    /// Counters.
    pub fn stats(&self) -> OutboxStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lim(max_bytes: usize) -> BufferLimits {
        BufferLimits {
            max_bytes,
            max_age_ms: 60_000,
            segment_ms: 10_000,
        }
    }

    #[test]
    fn live_records_leave_in_order() {
        let mut o = Outbox::new(lim(1 << 20));
        let e = o.epoch();
        assert!(o.push(e, 0, vec![1]));
        assert!(o.push(e, 1000, vec![2]));
        assert_eq!(o.next_live(), Some((e, &[1u8][..])));
        o.sent();
        assert_eq!(o.next_live(), Some((e, &[2u8][..])));
        o.sent();
        assert_eq!(o.next_live(), None);
        assert_eq!(o.bytes(), 0);
    }

    #[test]
    fn a_stale_epoch_is_refused() {
        let mut o = Outbox::new(lim(1 << 20));
        let e = o.epoch();
        o.link_lost();
        assert!(!o.push(e, 0, vec![1]));
        assert_eq!(o.stats().stale_records, 1);
        assert!(o.push(o.epoch(), 0, vec![1]));
    }

    #[test]
    fn disconnected_segments_replay_oldest_first() {
        let mut o = Outbox::new(lim(1 << 20));
        for t in 0..25 {
            let now = t * 1000;
            o.tick_disconnected(now);
            assert!(o.push(o.epoch(), now, vec![t as u8]));
        }
        // 25 s with a new segment every 10 s: two finished, one live.
        let mut replayed = Vec::new();
        while o.has_backlog() {
            replayed.push(o.backlog().map(|r| r[0]).collect::<Vec<_>>());
            o.backlog_done();
        }
        assert_eq!(replayed.len(), 2);
        assert_eq!(replayed[0], (0..10).collect::<Vec<u8>>());
        assert_eq!(replayed[1], (10..20).collect::<Vec<u8>>());
        let mut live = Vec::new();
        while let Some((_, r)) = o.next_live() {
            live.push(r[0]);
            o.sent();
        }
        assert_eq!(live, (20..25).collect::<Vec<u8>>());
    }

    #[test]
    fn over_the_byte_limit_the_oldest_segment_goes_whole() {
        let mut o = Outbox::new(lim(25));
        for t in 0..30 {
            let now = t * 1000;
            o.tick_disconnected(now);
            assert!(o.push(o.epoch(), now, vec![0; 1]));
        }
        assert!(o.bytes() <= 25, "bounded: {}", o.bytes());
        assert_eq!(o.stats().dropped_records, 10, "one whole segment dropped");
        // What is left still starts at a segment start.
        assert!(o.has_backlog());
        assert_eq!(o.backlog().count(), 10);
    }

    #[test]
    fn old_records_expire_by_age() {
        let mut o = Outbox::new(BufferLimits {
            max_bytes: 1 << 20,
            max_age_ms: 15_000,
            segment_ms: 10_000,
        });
        for t in 0..40 {
            let now = t * 1000;
            o.tick_disconnected(now);
            o.push(o.epoch(), now, vec![1]);
        }
        // Nothing older than 15 s is left except inside a segment that
        // still has younger records.
        assert!(o.records() <= 20, "{}", o.records());
        assert!(o.stats().dropped_records >= 20);
    }

    #[test]
    fn a_lost_link_drops_its_unsent_tail_and_starts_over() {
        let mut o = Outbox::new(lim(1 << 20));
        let e = o.epoch();
        o.push(e, 0, vec![1]);
        o.push(e, 1, vec![2]);
        o.link_lost();
        assert_eq!(o.records(), 0);
        assert_eq!(o.stats().dropped_records, 2);
        assert_ne!(o.epoch(), e);
    }
}

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
//!
//! Acknowledgements: a record written to the live link stays until the
//! parent acknowledges it ([`Outbox::ack`], cumulative per link). Each
//! acknowledged record also feeds a *mirror* decoder, which then holds what
//! the parent held. When the link dies, its unacknowledged tail (written or
//! not) is rebuilt from the mirror as a finished segment of its own
//! ([`super::rebuild`]) and replays, oldest first, to whichever parent
//! answers next: nothing a dead parent had not passed on is lost.

use std::collections::VecDeque;

use super::rebuild::rebuild_tail;
use super::shadow::{Recipe, Shadow, rebuild_from_shadow};
use crate::codec::{CodecConfig, LinkDecoder};

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
    /// (pushed at, payload, tag), oldest first.
    recs: VecDeque<(i64, Vec<u8>, u64)>,
    /// Records at the front written to the live link, awaiting an ack.
    sent: usize,
    /// Records released from the front by acks (the link's ack count).
    acked: u64,
    /// Beside `recs`, each record's recipe (none: the mirror decodes it).
    recipes: VecDeque<Option<Recipe>>,
    /// Approximate bytes of `recipes`.
    recipe_bytes: usize,
    /// Records come with recipes (decided by the segment's first record;
    /// off for good once one is missing or over the limit).
    recipes_on: bool,
}

impl Segment {
    fn new(epoch: u64, started_ms: i64) -> Self {
        Self {
            epoch,
            started_ms,
            recs: VecDeque::new(),
            sent: 0,
            acked: 0,
            recipes: VecDeque::new(),
            recipe_bytes: 0,
            recipes_on: true,
        }
    }

    fn bytes(&self) -> usize {
        self.recs.iter().map(|r| r.1.len()).sum()
    }

    /// Forgets every recipe: the records replay as they are, or their
    /// epoch's acknowledged state is no longer kept.
    fn drop_recipes(&mut self) {
        self.recipes.clear();
        self.recipe_bytes = 0;
    }
}

/// Why an acknowledgement was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AckError {
    /// For another epoch than the one streaming live, or behind an earlier ack.
    #[error("stale acknowledgement")]
    Stale,
    /// Acknowledges records never written to the link.
    #[error("acknowledgement of {count} records, only {written} written")]
    Beyond {
        /// The count acknowledged.
        count: u64,
        /// Records written on the link so far.
        written: u64,
    },
}

/// Counters of the buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutboxStats {
    /// Records dropped because the buffer was over its byte or age limit.
    pub dropped_records: u64,
    /// Records refused because they were encoded for an older epoch.
    pub stale_records: u64,
    /// Records released by the parent's acknowledgements.
    pub acked_records: u64,
    /// Acknowledgements refused (stale, or beyond what was written).
    pub bad_acks: u64,
    /// Unacknowledged records rebuilt to replay after a lost link.
    pub replayed_unacked: u64,
    /// Written, unacknowledged records released to stay within the byte
    /// limit (they can no longer replay if the parent dies).
    pub unacked_released: u64,
}

/// The replay buffer of one uplink.
#[derive(Debug)]
pub struct Outbox {
    limits: BufferLimits,
    codec: CodecConfig,
    epoch: u64,
    segs: VecDeque<Segment>,
    bytes: usize,
    stats: OutboxStats,
    /// Decoder fed the acknowledged records of the live epoch (its epoch),
    /// for records queued without a recipe.
    mirror: Option<(u64, LinkDecoder)>,
    /// The acknowledged state of the live epoch built from the records'
    /// recipes (its epoch): no decoding.
    shadow: Option<(u64, Shadow)>,
    /// Bytes of the recipes held, all segments.
    recipe_bytes: usize,
    /// Highest tag of a record the parent took for good.
    acked_tag: u64,
}

impl Outbox {
    /// An empty buffer; the first epoch is 1. `codec` must match the
    /// encoder's settings (the mirror decodes what it wrote).
    pub fn new(limits: BufferLimits, codec: CodecConfig) -> Self {
        Self {
            limits,
            codec,
            epoch: 1,
            segs: VecDeque::new(),
            bytes: 0,
            stats: OutboxStats::default(),
            mirror: None,
            shadow: None,
            recipe_bytes: 0,
            acked_tag: 0,
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
        self.push_tagged(epoch, now_ms, rec, 0)
    }

    /// [`Outbox::push`] with a caller's `tag` (e.g. its tick number), which
    /// [`Outbox::acked_tag`] reports once the parent took the record.
    pub fn push_tagged(&mut self, epoch: u64, now_ms: i64, rec: Vec<u8>, tag: u64) -> bool {
        self.push_recipe(epoch, now_ms, rec, tag, None)
    }

    /// [`Outbox::push_tagged`] with the record's [`Recipe`], from which the
    /// acknowledged state is kept without decoding the record again. An
    /// epoch's records come all with a recipe or all without; recipes past
    /// the byte limit are dropped (an epoch with nothing acknowledged yet
    /// then falls back on the mirror decoder, else its unacknowledged tail
    /// can no longer be rebuilt).
    pub fn push_recipe(
        &mut self,
        epoch: u64,
        now_ms: i64,
        rec: Vec<u8>,
        tag: u64,
        recipe: Option<Recipe>,
    ) -> bool {
        if epoch != self.epoch {
            self.stats.stale_records += 1;
            return false;
        }
        if self.segs.back().is_none_or(|s| s.epoch != epoch) {
            // Only the current epoch's first record may open its segment;
            // anything older than it will never be continued.
            self.segs.push_back(Segment::new(epoch, now_ms));
        }
        self.bytes += rec.len();
        let cap = self.limits.max_bytes;
        if let Some(s) = self.segs.back_mut() {
            s.recs.push_back((now_ms, rec, tag));
            let keep = recipe.filter(|r| s.recipes_on && self.recipe_bytes + r.bytes() <= cap);
            if keep.is_none() && s.recipes_on {
                // All recipes or none in an epoch.
                s.recipes_on = false;
                self.recipe_bytes -= s.recipe_bytes;
                s.drop_recipes();
                s.recipes.resize_with(s.recs.len() - 1, || None);
            }
            let n = keep.as_ref().map_or(0, Recipe::bytes);
            s.recipes.push_back(keep);
            s.recipe_bytes += n;
            self.recipe_bytes += n;
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
            if live && !expired && front.sent > 0 {
                // Written but unacknowledged: let them go as if acked (they
                // reached the parent; only their replay is given up).
                let n = front.acked + front.sent as u64;
                let k = front.sent as u64;
                if self.release(n).is_ok() {
                    self.stats.acked_records -= k;
                    self.stats.unacked_released += k;
                    continue;
                }
            }
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
        self.bytes -= s.bytes();
        self.recipe_bytes -= s.recipe_bytes;
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
            self.bytes -= s.bytes();
            self.recipe_bytes -= s.recipe_bytes;
            if let Some(t) = s.recs.iter().map(|r| r.2).max() {
                self.acked_tag = self.acked_tag.max(t);
            }
        }
    }

    /// The next unwritten record of the live (current) segment, once no
    /// backlog is left, with its epoch; it stays until acknowledged.
    pub fn next_live(&self) -> Option<(u64, &[u8])> {
        if self.has_backlog() {
            return None;
        }
        self.segs
            .front()
            .filter(|s| s.epoch == self.epoch)
            .and_then(|s| s.recs.get(s.sent).map(|r| (s.epoch, r.1.as_slice())))
    }

    /// The record [`Outbox::next_live`] returned was written.
    pub fn sent(&mut self) {
        if let Some(s) = self.segs.front_mut()
            && s.epoch == self.epoch
            && s.sent < s.recs.len()
        {
            s.sent += 1;
        }
    }

    /// The parent acknowledged the first `count` records of the link that
    /// streams `epoch` (cumulative): they leave the buffer. Stale or
    /// impossible acks are refused (counted) and change nothing.
    pub fn ack(&mut self, epoch: u64, count: u64) -> Result<usize, AckError> {
        let r = if epoch != self.epoch || self.has_backlog() {
            Err(AckError::Stale)
        } else {
            self.release(count)
        };
        if r.is_err() {
            self.stats.bad_acks += 1;
        }
        r
    }

    /// Releases the live segment's records up to link count `count`,
    /// feeding them to the mirror.
    fn release(&mut self, count: u64) -> Result<usize, AckError> {
        let Some(s) = self.segs.front_mut().filter(|s| s.epoch == self.epoch) else {
            return Err(AckError::Stale);
        };
        let written = s.acked + s.sent as u64;
        if count < s.acked {
            return Err(AckError::Stale);
        }
        if count > written {
            return Err(AckError::Beyond { count, written });
        }
        let k = usize::try_from(count - s.acked).map_err(|_| AckError::Stale)?;
        let fresh = self.mirror.as_ref().is_none_or(|m| m.0 != s.epoch)
            && self.shadow.as_ref().is_none_or(|m| m.0 != s.epoch);
        if fresh {
            // Either must start at the stream's first record: a shadow when
            // it came with a recipe, else a mirror decoder.
            self.mirror = None;
            self.shadow = None;
            if s.acked == 0 && k > 0 {
                if s.recipes.front().is_some_and(Option::is_some) {
                    self.shadow = Some((s.epoch, Shadow::default()));
                } else {
                    self.mirror = LinkDecoder::new(&self.codec).ok().map(|d| (s.epoch, d));
                }
            }
        }
        for _ in 0..k {
            let Some((_, rec, tag)) = s.recs.pop_front() else {
                break;
            };
            let recipe = s.recipes.pop_front().flatten();
            self.bytes -= rec.len();
            self.acked_tag = self.acked_tag.max(tag);
            if let Some(r) = &recipe {
                let n = r.bytes();
                s.recipe_bytes -= n;
                self.recipe_bytes -= n;
            }
            if self.shadow.as_ref().is_some_and(|m| m.0 == s.epoch) {
                // A record without its recipe leaves the shadow behind.
                match (recipe, &mut self.shadow) {
                    (Some(r), Some((_, sh))) => sh.apply(r),
                    _ => self.shadow = None,
                }
            } else if let Some((_, m)) = &mut self.mirror
                && !m.is_poisoned()
            {
                // A record the mirror cannot read leaves it poisoned: the
                // tail is then dropped, not rebuilt, if the link dies.
                let _ = m.decode(&rec);
            }
        }
        s.sent -= k;
        s.acked = count;
        self.stats.acked_records += k as u64;
        Ok(k)
    }

    /// The live link died (or was closed to switch parents). Its
    /// unacknowledged records, written or not, become a finished segment
    /// that a fresh link replays: as they are when the parent acknowledged
    /// nothing, else rebuilt from the mirror. A new epoch starts.
    pub fn link_lost(&mut self) {
        if let Some(s) = self.segs.back()
            && s.epoch == self.epoch
            && let Some(mut s) = self.segs.pop_back()
        {
            if s.acked > 0 {
                let mirror = self.mirror.take().filter(|m| m.0 == s.epoch);
                let shadow = self.shadow.take().filter(|m| m.0 == s.epoch);
                let rebuilt = if let Some((_, sh)) = shadow {
                    let tail: Option<Vec<&Recipe>> = s.recipes.iter().map(Option::as_ref).collect();
                    tail.filter(|t| t.len() == s.recs.len())
                        .and_then(|t| rebuild_from_shadow(&sh, t, &self.codec).ok())
                } else {
                    mirror.and_then(|(_, mut m)| {
                        let tail = s.recs.iter().map(|r| r.1.as_slice());
                        rebuild_tail(&mut m, tail, &self.codec).ok()
                    })
                };
                match rebuilt {
                    Some(recs) => {
                        let (at, tag) = s.recs.back().map_or((0, 0), |r| (r.0, r.2));
                        self.stats.replayed_unacked += s.recs.len() as u64;
                        self.bytes -= s.bytes();
                        s.recs = recs.into_iter().map(|r| (at, r, tag)).collect();
                        self.bytes += s.bytes();
                    }
                    None => {
                        self.drop_segment(s);
                        self.new_epoch();
                        return;
                    }
                }
            } else {
                self.stats.replayed_unacked += s.sent as u64;
            }
            // A finished segment replays as it is: no recipe needed.
            self.recipe_bytes -= s.recipe_bytes;
            s.drop_recipes();
            s.recipes_on = false;
            s.sent = 0;
            s.acked = 0;
            self.segs.push_back(s);
        }
        self.mirror = None;
        self.shadow = None;
        self.new_epoch();
    }

    /// The live link was closed cleanly after every queued record was
    /// written (a switch back to the primary while the backup lives): the
    /// backup has the whole live segment, so it goes, and a new epoch starts.
    pub fn handed_over(&mut self) {
        if let Some(s) = self.segs.back()
            && s.epoch == self.epoch
            && s.sent == s.recs.len()
            && let Some(s) = self.segs.pop_back()
        {
            self.bytes -= s.bytes();
            self.recipe_bytes -= s.recipe_bytes;
            if let Some(t) = s.recs.iter().map(|r| r.2).max() {
                self.acked_tag = self.acked_tag.max(t);
            }
        } else {
            // Something was left unwritten: replay it like a lost link.
            self.link_lost();
            return;
        }
        self.mirror = None;
        self.shadow = None;
        self.new_epoch();
    }

    /// Highest tag of the records the parent has taken for good
    /// (acknowledged, or replayed whole after an outage).
    pub fn acked_tag(&self) -> u64 {
        self.acked_tag
    }

    /// Records written on the live link and not yet acknowledged.
    pub fn unacked(&self) -> usize {
        self.segs
            .front()
            .filter(|s| s.epoch == self.epoch)
            .map_or(0, |s| s.sent)
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

    impl Outbox {
        fn new_default_codec(l: BufferLimits) -> Self {
            Self::new(l, CodecConfig::default())
        }
    }

    #[test]
    fn live_records_leave_in_order() {
        let mut o = Outbox::new_default_codec(lim(1 << 20));
        let e = o.epoch();
        assert!(o.push(e, 0, vec![1]));
        assert!(o.push(e, 1000, vec![2]));
        assert_eq!(o.next_live(), Some((e, &[1u8][..])));
        o.sent();
        assert_eq!(o.next_live(), Some((e, &[2u8][..])));
        o.sent();
        assert_eq!(o.next_live(), None);
        assert_eq!(o.ack(e, 2), Ok(2));
        assert_eq!(o.bytes(), 0);
    }

    #[test]
    fn a_stale_epoch_is_refused() {
        let mut o = Outbox::new_default_codec(lim(1 << 20));
        let e = o.epoch();
        o.link_lost();
        assert!(!o.push(e, 0, vec![1]));
        assert_eq!(o.stats().stale_records, 1);
        assert!(o.push(o.epoch(), 0, vec![1]));
    }

    #[test]
    fn disconnected_segments_replay_oldest_first() {
        let mut o = Outbox::new_default_codec(lim(1 << 20));
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
        let mut o = Outbox::new_default_codec(lim(25));
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
        let mut o = Outbox::new_default_codec(BufferLimits {
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
    fn a_lost_link_keeps_its_unsent_tail_for_a_fresh_link() {
        let mut o = Outbox::new_default_codec(lim(1 << 20));
        let e = o.epoch();
        o.push(e, 0, vec![1]);
        o.push(e, 1, vec![2]);
        o.link_lost();
        assert_eq!(o.records(), 2);
        assert!(o.has_backlog());
        assert_eq!(o.stats().dropped_records, 0);
        assert_ne!(o.epoch(), e);
    }
}

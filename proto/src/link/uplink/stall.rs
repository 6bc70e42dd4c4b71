//! Ack stalls: when the oldest record written on a link has waited too
//! long for its acknowledgement, and how long a primary left for that is
//! held down before it is tried again. The caller passes `now`.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// Longest hold-down of a primary left for not acking.
const MAX_ACK_HOLD: Duration = Duration::from_secs(300);

/// When the primary may be tried again after ack stalls.
#[derive(Debug, Default)]
pub(super) struct AckHold {
    /// Ack stalls of the primary in a row (reset once it acks).
    strikes: u32,
    /// No return to the primary before this.
    until: Option<Instant>,
}

impl AckHold {
    /// The primary was left for not acking: hold it down for `timeout`
    /// times 2^(stalls in a row - 1), at most [`MAX_ACK_HOLD`].
    pub(super) fn strike(&mut self, now: Instant, timeout: Duration) {
        let hold = timeout
            .saturating_mul(1 << self.strikes.min(16))
            .min(MAX_ACK_HOLD);
        self.strikes = self.strikes.saturating_add(1);
        self.until = Some(now + hold);
    }

    /// The primary acknowledged records: it may be returned to at once.
    pub(super) fn clear(&mut self) {
        *self = Self::default();
    }

    /// Whether the primary may be tried again at `now`.
    pub(super) fn allows_return(&self, now: Instant) -> bool {
        self.until.is_none_or(|t| now >= t)
    }
}

/// Write times of the records written on one link and not yet
/// acknowledged, oldest first, against the ack timeout.
pub(super) struct AckClock {
    timeout: Duration,
    times: VecDeque<Instant>,
}

impl AckClock {
    /// Nothing outstanding; `timeout` zero never fires.
    pub(super) fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            times: VecDeque::new(),
        }
    }

    /// One more record written at `now`.
    pub(super) fn push(&mut self, now: Instant) {
        self.times.push_back(now);
    }

    /// Keeps the newest `unacked` times: acks (and the buffer's byte
    /// limit) release records from the front.
    pub(super) fn sync(&mut self, unacked: usize) {
        while self.times.len() > unacked {
            self.times.pop_front();
        }
    }

    /// How long the oldest unacknowledged record has waited, when that is
    /// past the timeout.
    pub(super) fn overdue(&self, now: Instant) -> Option<Duration> {
        let oldest = self.times.front()?;
        let waited = now.saturating_duration_since(*oldest);
        (!self.timeout.is_zero() && waited >= self.timeout).then_some(waited)
    }

    /// On switching back from the backup: its oldest unacknowledged record
    /// has waited more than half the timeout (it is not acking either).
    pub(super) fn backup_not_acking(&self, now: Instant) -> bool {
        !self.timeout.is_zero()
            && self
                .times
                .front()
                .is_some_and(|t| now.saturating_duration_since(*t) >= self.timeout / 2)
    }

    /// When the oldest unacknowledged record becomes overdue; `None`
    /// while nothing is outstanding (or with no timeout).
    pub(super) fn due(&self) -> Option<Instant> {
        let t = self.times.front()?;
        (!self.timeout.is_zero()).then(|| *t + self.timeout)
    }
}

/// Whether the parent answers at all: a record written to it must be
/// followed, within `wait`, by some packet from it (its QUIC ACK comes
/// within the ack delay, 25 ms, plus a round trip). This finds a parent
/// that vanished without a word at the first record written after it
/// died, so a 1 s tick finds it within 1 s + `wait`, without keep-alive
/// pings on a link that carries a record every tick. The caller passes
/// `now` and the links' counts of datagrams received.
#[derive(Debug)]
pub(super) struct Answer {
    wait: Duration,
    /// Deadline and the datagram counts when the oldest record not yet
    /// answered was written.
    armed: Option<(Instant, Vec<u64>)>,
}

impl Answer {
    /// Nothing outstanding; `wait` zero never fires.
    pub(super) fn new(wait: Duration) -> Self {
        Self { wait, armed: None }
    }

    /// A record was written at `now`, the links having received `rx`
    /// datagrams so far; the oldest record not yet answered sets the
    /// deadline.
    pub(super) fn wrote(&mut self, now: Instant, rx: impl FnOnce() -> Vec<u64>) {
        if self.armed.is_none() && !self.wait.is_zero() {
            self.armed = Some((now + self.wait, rx()));
        }
    }

    /// The parent answered (a control record came): nothing outstanding.
    pub(super) fn answered(&mut self) {
        self.armed = None;
    }

    /// When to look at the links' counts next.
    pub(super) fn due(&self) -> Option<Instant> {
        self.armed.as_ref().map(|(t, _)| *t)
    }

    /// At or past the deadline, with the links' counts now: true when a
    /// link received nothing since the record was written (its parent is
    /// gone); otherwise nothing is outstanding any more.
    pub(super) fn silent(&mut self, now: Instant, rx: impl FnOnce() -> Vec<u64>) -> bool {
        let Some((due, before)) = &self.armed else {
            return false;
        };
        if now < *due {
            return false;
        }
        let after = rx();
        let silent = before.len() != after.len() || before.iter().zip(&after).any(|(b, a)| a <= b);
        self.armed = None;
        silent
    }
}

/// The earlier of two deadlines.
pub(super) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Sleeps until `due`; forever when it is `None`.
pub(super) async fn sleep_until_due(due: Option<Instant>) {
    match due {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(4);

    #[test]
    fn the_oldest_unacked_record_sets_the_deadline() {
        let t0 = Instant::now();
        let mut c = AckClock::new(T);
        assert_eq!(c.due(), None, "nothing outstanding, no deadline");
        assert_eq!(c.overdue(t0 + T * 10), None);
        c.push(t0);
        c.push(t0 + Duration::from_secs(1));
        c.push(t0 + Duration::from_secs(2));
        assert_eq!(c.due(), Some(t0 + T));
        assert_eq!(c.overdue(t0 + T - Duration::from_millis(1)), None);
        assert_eq!(c.overdue(t0 + T), Some(T));
        // An ack of the first two leaves the third as the oldest.
        c.sync(1);
        assert_eq!(c.due(), Some(t0 + Duration::from_secs(2) + T));
        assert_eq!(c.overdue(t0 + T), None);
        c.sync(0);
        assert_eq!(c.due(), None, "all acked");
    }

    #[test]
    fn a_parent_silent_after_a_write_is_found_at_the_deadline() {
        let t0 = Instant::now();
        let w = Duration::from_secs(1);
        let mut a = Answer::new(w);
        assert_eq!(a.due(), None, "nothing written");
        a.wrote(t0, || vec![5]);
        a.wrote(t0 + w / 2, || vec![6]);
        assert_eq!(a.due(), Some(t0 + w), "the oldest write sets it");
        assert!(!a.silent(t0 + w / 2, || vec![5]), "not due yet");
        assert_eq!(a.due(), Some(t0 + w), "still armed");
        assert!(a.silent(t0 + w, || vec![5]), "nothing received: gone");
        assert_eq!(a.due(), None);
        // Something arrived: alive, and nothing outstanding until the next write.
        a.wrote(t0 + w, || vec![5]);
        assert!(!a.silent(t0 + w * 2, || vec![6]));
        assert_eq!(a.due(), None);
        // A control record answers before the deadline: no wake-up needed.
        a.wrote(t0 + w * 2, || vec![6]);
        a.answered();
        assert_eq!(a.due(), None);
        assert!(!a.silent(t0 + w * 9, || vec![6]));
        // A group: every member must have answered.
        a.wrote(t0, || vec![1, 1]);
        assert!(a.silent(t0 + w, || vec![2, 1]));
        // Zero: never armed.
        let mut off = Answer::new(Duration::ZERO);
        off.wrote(t0, || vec![0]);
        assert_eq!(off.due(), None);
        assert_eq!(earliest(Some(t0 + w), Some(t0)), Some(t0));
        assert_eq!(earliest(None, Some(t0)), Some(t0));
        assert_eq!(earliest(None, None), None);
    }

    #[test]
    fn a_zero_timeout_never_fires() {
        let t0 = Instant::now();
        let mut c = AckClock::new(Duration::ZERO);
        c.push(t0);
        assert_eq!(c.due(), None);
        assert_eq!(c.overdue(t0 + Duration::from_secs(3600)), None);
        assert!(!c.backup_not_acking(t0 + Duration::from_secs(3600)));
    }

    #[test]
    fn a_backup_waiting_half_the_timeout_is_not_acking() {
        let t0 = Instant::now();
        let mut c = AckClock::new(T);
        assert!(!c.backup_not_acking(t0 + T), "nothing outstanding");
        c.push(t0);
        assert!(!c.backup_not_acking(t0 + T / 4));
        assert!(c.backup_not_acking(t0 + T / 2));
    }

    #[test]
    fn the_hold_down_doubles_per_stall_is_capped_and_clears_on_ack() {
        let t0 = Instant::now();
        let mut h = AckHold::default();
        assert!(h.allows_return(t0));
        h.strike(t0, T);
        assert!(!h.allows_return(t0 + T - Duration::from_millis(1)));
        assert!(h.allows_return(t0 + T));
        h.strike(t0, T);
        assert!(!h.allows_return(t0 + T * 2 - Duration::from_millis(1)));
        assert!(h.allows_return(t0 + T * 2));
        for _ in 0..40 {
            h.strike(t0, T);
        }
        assert!(h.allows_return(t0 + MAX_ACK_HOLD), "capped");
        h.clear();
        assert!(h.allows_return(t0));
    }
}

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

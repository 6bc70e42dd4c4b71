//! The sampler's tick: a periodic kernel timer (`timerfd`) when there is
//! one, else tokio's interval.
//!
//! Tokio's timer wheel files a deadline a second away in a level of 64 ms
//! slots and wakes at the start of its slot to move it to the 1 ms level,
//! then again at the deadline: two wake-ups a tick. A `timerfd` armed with
//! the tick as its period wakes the runtime's epoll once, at the deadline,
//! and keeps the phase it was started with. A tick missed (the runtime was
//! busy) is skipped, as the interval's `MissedTickBehavior::Skip` does.

use std::os::fd::OwnedFd;
use std::time::Duration;

use rustix::time::{
    Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec, timerfd_create,
    timerfd_settime,
};
use tokio::io::unix::AsyncFd;

/// A periodic tick; the first one is at once.
#[derive(Debug)]
pub struct Ticker {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Timerfd(AsyncFd<OwnedFd>),
    Tokio(tokio::time::Interval),
}

impl Ticker {
    /// A tick every `period` (at least 1 ms), the first at once. Needs a
    /// tokio runtime with I/O and time enabled.
    pub fn new(period: Duration) -> Self {
        let period = period.max(Duration::from_millis(1));
        match timerfd(period) {
            Ok(fd) => Self {
                inner: Inner::Timerfd(fd),
            },
            Err(e) => {
                tracing::debug!(error = %e, "no timerfd: ticking with tokio's interval");
                Self::tokio(period)
            }
        }
    }

    /// The tokio interval only (no timerfd).
    pub fn tokio(period: Duration) -> Self {
        let mut i = tokio::time::interval(period.max(Duration::from_millis(1)));
        i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        Self {
            inner: Inner::Tokio(i),
        }
    }

    /// Whether the kernel timer is in use.
    pub fn is_timerfd(&self) -> bool {
        matches!(self.inner, Inner::Timerfd(_))
    }

    /// Waits for the next tick. Cancel-safe.
    pub async fn tick(&mut self) {
        let period = match &mut self.inner {
            Inner::Tokio(i) => {
                i.tick().await;
                return;
            }
            Inner::Timerfd(fd) => match wait_timerfd(fd).await {
                Ok(()) => return,
                Err(e) => {
                    tracing::debug!(error = %e, "timerfd failed: ticking with tokio's interval");
                    timerfd_period(fd)
                }
            },
        };
        *self = Self::tokio(period);
        if let Inner::Tokio(i) = &mut self.inner {
            i.tick().await;
        }
    }
}

/// Waits until `fd` expired and consumes its count of expirations (missed
/// ticks are skipped: one tick however many passed).
async fn wait_timerfd(fd: &AsyncFd<OwnedFd>) -> std::io::Result<()> {
    loop {
        let mut ready = fd.readable().await?;
        let mut n = [0u8; 8];
        match rustix::io::read(fd.get_ref(), &mut n) {
            Ok(_) => {
                // Drained: the next expiry is the next edge.
                ready.clear_ready();
                return Ok(());
            }
            Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => ready.clear_ready(),
            Err(e) => return Err(e.into()),
        }
    }
}

/// The period `fd` was armed with (1 s if it cannot be read).
fn timerfd_period(fd: &AsyncFd<OwnedFd>) -> Duration {
    rustix::time::timerfd_gettime(fd.get_ref()).map_or(Duration::from_secs(1), |s| {
        Duration::new(
            u64::try_from(s.it_interval.tv_sec).unwrap_or(1),
            u32::try_from(s.it_interval.tv_nsec).unwrap_or(0),
        )
    })
}

/// A non-blocking monotonic timerfd expiring at once and then every
/// `period`, registered with the runtime.
fn timerfd(period: Duration) -> std::io::Result<AsyncFd<OwnedFd>> {
    let fd = timerfd_create(
        TimerfdClockId::Monotonic,
        TimerfdFlags::CLOEXEC | TimerfdFlags::NONBLOCK,
    )?;
    let spec = |d: Duration| Timespec {
        tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(d.subsec_nanos()),
    };
    timerfd_settime(
        &fd,
        TimerfdTimerFlags::empty(),
        &Itimerspec {
            it_interval: spec(period),
            // Zero would disarm it: the first expiry 1 ns from now.
            it_value: Timespec {
                tv_sec: 0,
                tv_nsec: 1,
            },
        },
    )?;
    // `AsyncFd::new` is deprecated in favour of the `unsafe` `register`
    // (Canopy forbids `unsafe`) because an arbitrary `AsRawFd` could hand
    // out another descriptor later; an `OwnedFd` owned by the `AsyncFd`
    // cannot: it stays open and the same until dropped with it.
    #[allow(deprecated)]
    AsyncFd::new(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn ticks_at_once_then_every_period_with_the_kernel_timer() {
        let period = Duration::from_millis(20);
        let mut t = Ticker::new(period);
        assert!(t.is_timerfd(), "Linux has timerfd");
        let t0 = tokio::time::Instant::now();
        t.tick().await;
        for _ in 0..3 {
            t.tick().await;
        }
        // Three periods after the first tick, never fewer (the kernel timer
        // does not fire early; an upper bound would be this machine's load).
        assert!(t0.elapsed() >= period * 3 - Duration::from_millis(1));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn missed_ticks_are_skipped_not_replayed() {
        let period = Duration::from_millis(300);
        let mut t = Ticker::new(period);
        t.tick().await;
        // Five periods pass without a wait: one tick is due, not five.
        std::thread::sleep(period * 5 + period / 10);
        t.tick().await;
        let next = tokio::time::timeout(Duration::ZERO, t.tick()).await;
        assert!(next.is_err(), "the missed ticks are not replayed");
        let mut tk = Ticker::tokio(period);
        tk.tick().await;
        assert!(!tk.is_timerfd());
    }
}

//! quinn's runtime for the links: tokio's, with a connection timer that
//! never wakes the process for a deadline that has moved later.
//!
//! A quinn connection keeps one timer for its earliest deadline (loss
//! detection, the delayed ACK, keep-alive, idle) and moves it whenever that
//! changes. tokio's `Sleep::reset` to a *later* instant leaves the entry in
//! its timer wheel at the old instant and only re-files it when that instant
//! comes: the thread wakes for a deadline that no longer exists. On a child
//! that is every tick: the loss-detection deadline set when a record is sent
//! is replaced by the keep-alive 1.25 s later once the parent's ACK arrives,
//! and the thread still woke at the old one. [`LinkTimer`] drops the old
//! entry instead (taken out of the wheel, no wake) and files a fresh one;
//! an earlier deadline is a plain reset, which tokio files exactly.

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use quinn::{AsyncTimer, AsyncUdpSocket, Runtime, TokioRuntime};
use tokio::time::Sleep;

/// tokio, as [`quinn::TokioRuntime`], with [`LinkTimer`] as the timer.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct LinkRuntime;

impl LinkRuntime {
    /// The runtime, shared by every endpoint of the process.
    pub(crate) fn shared() -> Arc<dyn Runtime> {
        Arc::new(LinkRuntime)
    }
}

impl Runtime for LinkRuntime {
    fn new_timer(&self, i: Instant) -> Pin<Box<dyn AsyncTimer>> {
        Box::pin(LinkTimer::new(i))
    }

    fn spawn(&self, future: Pin<Box<dyn Future<Output = ()> + Send>>) {
        tokio::spawn(future);
    }

    fn wrap_udp_socket(&self, t: std::net::UdpSocket) -> io::Result<Arc<dyn AsyncUdpSocket>> {
        TokioRuntime.wrap_udp_socket(t)
    }

    fn now(&self) -> Instant {
        TokioRuntime.now()
    }
}

/// A connection's timer: a tokio `Sleep` that is replaced, not extended,
/// when its deadline moves later (see the module docs).
pub(crate) struct LinkTimer {
    sleep: Pin<Box<Sleep>>,
    deadline: Instant,
}

impl LinkTimer {
    fn new(deadline: Instant) -> Self {
        Self {
            sleep: Box::pin(tokio::time::sleep_until(deadline.into())),
            deadline,
        }
    }

    /// The instant the timer expires at.
    #[cfg(test)]
    fn deadline(&self) -> Instant {
        self.deadline
    }
}

impl fmt::Debug for LinkTimer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LinkTimer")
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

impl AsyncTimer for LinkTimer {
    fn reset(self: Pin<&mut Self>, i: Instant) {
        let this = self.get_mut();
        if i > this.deadline {
            // Dropping the old `Sleep` takes it out of the wheel; the new
            // one is filed at its own instant when first polled.
            this.sleep.set(tokio::time::sleep_until(i.into()));
        } else {
            this.sleep.as_mut().reset(i.into());
        }
        this.deadline = i;
    }

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Future::poll(self.get_mut().sleep.as_mut(), cx)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn poll_once(t: &mut Pin<Box<dyn AsyncTimer>>) -> Poll<()> {
        let waker = std::task::Waker::noop();
        t.as_mut().poll(&mut Context::from_waker(waker))
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_deadline_moved_later_or_earlier_fires_at_the_new_one_only() {
        let t0 = Instant::now();
        let mut t = LinkRuntime.new_timer(t0 + Duration::from_millis(20));
        // Filed in the wheel (already due if this thread stalled 20 ms).
        let _ = poll_once(&mut t);
        // Later: the old instant passes without the timer firing.
        t.as_mut().reset(t0 + Duration::from_secs(60));
        tokio::time::sleep_until((t0 + Duration::from_millis(40)).into()).await;
        assert!(poll_once(&mut t).is_pending(), "fired at the old deadline");
        // Earlier again (an instant already passed): fires at once.
        t.as_mut().reset(t0 + Duration::from_millis(30));
        std::future::poll_fn(|cx| t.as_mut().poll(cx)).await;
        assert!(t0.elapsed() >= Duration::from_millis(30));
    }

    /// A connection timer's constructor.
    type MakeTimer = fn(Instant) -> Pin<Box<dyn AsyncTimer>>;

    /// Times the runtime's thread woke while a 50 ms sleep ran after a
    /// connection timer (if any) moved 30 ms -> 5 s. A wheel entry under
    /// 64 ms away wakes at its instant, so a stale 30 ms entry shows as one
    /// wake more than the same sleep without the timer.
    /// `None` when the thread stalled past 30 ms before the timer was
    /// filed (nothing to conclude).
    fn wakes_with(timer: Option<MakeTimer>) -> Option<usize> {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let unparks = Arc::new(AtomicUsize::new(0));
        let n = unparks.clone();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .on_thread_unpark(move || {
                n.fetch_add(1, Ordering::Relaxed);
            })
            .build()
            .expect("runtime");
        rt.block_on(async {
            let t0 = Instant::now();
            let mut keep = None;
            if let Some(make) = timer {
                let mut t = make(t0 + Duration::from_millis(30));
                if poll_once(&mut t).is_ready() {
                    return None;
                }
                t.as_mut().reset(t0 + Duration::from_secs(5));
                assert!(poll_once(&mut t).is_pending());
                keep = Some(t);
            }
            let before = unparks.load(Ordering::Relaxed);
            tokio::time::sleep_until((t0 + Duration::from_millis(50)).into()).await;
            drop(keep);
            Some(unparks.load(Ordering::Relaxed).saturating_sub(before))
        })
    }

    #[test]
    fn a_later_deadline_leaves_no_stale_entry_to_wake_for() {
        // (quinn's stock timer wakes once more here: at the old 30 ms.)
        // A run whose thread stalled past 30 ms before filing the timer
        // proves nothing, so it is repeated; one unstalled run must happen.
        for _ in 0..50 {
            if let Some(ours) = wakes_with(Some(|i| LinkRuntime.new_timer(i))) {
                let plain = wakes_with(None).expect("no timer to stall on");
                assert_eq!(ours, plain, "woke for a deadline that moved");
                return;
            }
        }
        panic!("the test thread stalled past 30 ms in 50 runs in a row");
    }

    #[test]
    fn the_timer_reports_its_deadline() {
        let t0 = Instant::now();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let mut timer = LinkTimer::new(t0 + Duration::from_millis(30));
            let mut t = Pin::new(&mut timer);
            t.as_mut().reset(t0 + Duration::from_secs(5));
            assert_eq!(t.deadline(), t0 + Duration::from_secs(5));
            t.as_mut().reset(t0 + Duration::from_millis(10));
            assert_eq!(t.deadline(), t0 + Duration::from_millis(10));
        });
    }
}

//! The `WatchJobs` shell: one poller per gateway evaluates the cluster view
//! each tick (only while someone watches) and hands each subscriber the
//! changes its filter selects, through a bounded channel. A client that
//! reads too slowly loses events (counted, and told in the next event's
//! `dropped_before`); memory stays bounded whatever it does.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use canopy_proto::api as pb;
use tokio::sync::{mpsc, watch};
use tonic::Status;

use super::{GrpcState, convert};
use crate::auth::Access;
use crate::stress::watch::{diff, snapshot};
use crate::stress::{ClusterView, JobFilter};
use std::collections::{BTreeMap, BTreeSet};

/// Default share threshold of a watch that gives none.
pub const DEFAULT_SHARE_THRESHOLD: f64 = 0.25;

/// One subscriber's sending end and its state.
struct Sub {
    /// The user a user token's watch is bound to (`None`: every job).
    scope: Option<String>,
    filter: JobFilter,
    threshold: f64,
    tx: mpsc::Sender<Result<pb::JobEvent, Status>>,
    dropped: u64,
    /// Has not had its initial snapshot yet.
    fresh: bool,
}

/// Subscribers of `WatchJobs`.
pub struct WatchHub {
    subs: Mutex<Vec<Sub>>,
    capacity: usize,
    max_subscribers: usize,
    dropped_total: AtomicU64,
    last_warn: Mutex<Option<Instant>>,
}

impl WatchHub {
    /// A hub with `capacity` queued events per subscriber and at most
    /// `max_subscribers` watches at once.
    pub fn new(capacity: usize, max_subscribers: usize) -> Self {
        WatchHub {
            subs: Mutex::new(Vec::new()),
            capacity: capacity.max(1),
            max_subscribers,
            dropped_total: AtomicU64::new(0),
            last_warn: Mutex::new(None),
        }
    }

    /// Events dropped for slow clients since start, over all watches.
    pub fn dropped_total(&self) -> u64 {
        self.dropped_total.load(Ordering::Relaxed)
    }

    /// Current watches.
    pub fn subscribers(&self) -> usize {
        self.subs.lock().map(|s| s.len()).unwrap_or(0)
    }

    /// Registers a watch; its first events (a snapshot of the running jobs)
    /// come at the next poll. A watch with a `scope` (a user token's) only
    /// ever gets events of the view computed through that user's scoped store.
    pub fn subscribe(
        &self,
        filter: JobFilter,
        threshold: f64,
        scope: Option<String>,
    ) -> Result<mpsc::Receiver<Result<pb::JobEvent, Status>>, Status> {
        let mut subs = self
            .subs
            .lock()
            .map_err(|_| Status::internal("watch registry poisoned"))?;
        if subs.len() >= self.max_subscribers {
            return Err(Status::resource_exhausted(format!(
                "at most {} concurrent watches",
                self.max_subscribers
            )));
        }
        let (tx, rx) = mpsc::channel(self.capacity);
        subs.push(Sub {
            scope,
            filter,
            threshold,
            tx,
            dropped: 0,
            fresh: true,
        });
        Ok(rx)
    }

    /// Ends every watch (their streams finish): on shutdown.
    pub fn close_all(&self) {
        if let Ok(mut s) = self.subs.lock() {
            s.clear();
        }
    }

    /// The distinct scopes of the current watches.
    pub fn scopes(&self) -> BTreeSet<Option<String>> {
        self.subs
            .lock()
            .map(|s| s.iter().map(|x| x.scope.clone()).collect())
            .unwrap_or_default()
    }

    /// Sends each subscriber of `scope` its events between `prev` and
    /// `next` (views computed for that scope).
    pub fn publish(&self, scope: Option<&str>, prev: Option<&ClusterView>, next: &ClusterView) {
        let Ok(mut subs) = self.subs.lock() else {
            return;
        };
        let mut dropped_now = 0u64;
        subs.retain_mut(|s| {
            if s.scope.as_deref() != scope {
                return !s.tx.is_closed();
            }
            let events = match (s.fresh, prev) {
                (false, Some(p)) => diff(p, next, &s.filter, s.threshold),
                _ => snapshot(next, &s.filter),
            };
            s.fresh = false;
            for e in &events {
                match s.tx.try_send(Ok(convert::event(e, s.dropped))) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(_)) => {
                        s.dropped += 1;
                        dropped_now += 1;
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => return false,
                }
            }
            !s.tx.is_closed()
        });
        drop(subs);
        if dropped_now > 0 {
            let total = self.dropped_total.fetch_add(dropped_now, Ordering::Relaxed) + dropped_now;
            self.warn_dropped(dropped_now, total);
        }
    }

    /// One warning per minute at most, however slow the clients.
    fn warn_dropped(&self, now: u64, total: u64) {
        let Ok(mut last) = self.last_warn.lock() else {
            return;
        };
        if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
            *last = Some(Instant::now());
            tracing::warn!(
                dropped = now,
                dropped_total = total,
                "WatchJobs client too slow: events dropped"
            );
        }
    }
}

/// Polls the store once per `tick` while anyone watches, and publishes.
pub fn spawn_poller(state: GrpcState, tick: Duration, mut shutdown: watch::Receiver<bool>) {
    tokio::spawn(async move {
        let mut iv = tokio::time::interval(tick);
        iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        // One view per scope being watched: the unscoped one, and one per
        // user, each computed through that user's scoped store.
        let mut prev: BTreeMap<Option<String>, ClusterView> = BTreeMap::new();
        loop {
            tokio::select! {
                _ = iv.tick() => {}
                _ = shutdown.changed() => {
                    state.hub.close_all();
                    break;
                }
            }
            let scopes = state.hub.scopes();
            prev.retain(|k, _| scopes.contains(k));
            for scope in scopes {
                let st = match &scope {
                    None => state.clone(),
                    Some(u) => state.for_access(&Access::User(u.clone())),
                };
                match st.running_view(JobFilter::default()).await {
                    Ok(view) => {
                        state.hub.publish(scope.as_deref(), prev.get(&scope), &view);
                        prev.insert(scope, view);
                    }
                    Err(e) => tracing::warn!(error = %e, "WatchJobs poll failed"),
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stress::{JobIdentity, JobStress};

    fn view(t: i64, ids: &[&str]) -> ClusterView {
        ClusterView {
            time_ms: t,
            jobs: ids
                .iter()
                .map(|id| {
                    (
                        id.to_string(),
                        JobStress {
                            job: JobIdentity {
                                job_id: id.to_string(),
                                running: true,
                                ..JobIdentity::default()
                            },
                            ..JobStress::default()
                        },
                    )
                })
                .collect(),
            total: Default::default(),
        }
    }

    #[test]
    fn slow_clients_lose_counted_events_not_memory() {
        let hub = WatchHub::new(2, 4);
        let mut rx = hub
            .subscribe(JobFilter::default(), 0.25, None)
            .expect("subscribe");
        // Snapshot of 5 jobs into a queue of 2: 3 dropped.
        let v1 = view(1, &["1", "2", "3", "4", "5"]);
        hub.publish(None, None, &v1);
        assert_eq!(hub.dropped_total(), 3);
        let a = rx.try_recv().expect("first").expect("ok");
        assert_eq!(a.kind, pb::job_event::Kind::JobRunning as i32);
        assert_eq!(a.dropped_before, 0);
        let _ = rx.try_recv().expect("second");
        assert!(rx.try_recv().is_err(), "queue bounded at 2");
        // The next event tells the client how much it lost.
        let v2 = view(2, &["1", "2", "3", "4", "5", "6"]);
        hub.publish(None, Some(&v1), &v2);
        let b = rx.try_recv().expect("started").expect("ok");
        assert_eq!(b.kind, pb::job_event::Kind::JobStarted as i32);
        assert_eq!(b.dropped_before, 3);
        assert_eq!(b.job.map(|j| j.job_id), Some("6".to_string()));
        // A closed client is forgotten at the next publish.
        drop(rx);
        hub.publish(None, Some(&v2), &v2);
        assert_eq!(hub.subscribers(), 0);
    }

    #[test]
    fn watches_are_capped() {
        let hub = WatchHub::new(4, 1);
        let _a = hub
            .subscribe(JobFilter::default(), 0.25, None)
            .expect("first");
        let e = hub
            .subscribe(JobFilter::default(), 0.25, None)
            .expect_err("second");
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
    }

    #[test]
    fn a_scoped_watch_gets_only_its_scopes_views() {
        let hub = WatchHub::new(16, 4);
        let mut all = hub
            .subscribe(JobFilter::default(), 0.25, None)
            .expect("unscoped");
        let mut alice = hub
            .subscribe(JobFilter::default(), 0.25, Some("alice".into()))
            .expect("alice");
        hub.publish(None, None, &view(1, &["1", "2"]));
        assert!(
            alice.try_recv().is_err(),
            "the unscoped view is not alice's"
        );
        assert!(all.try_recv().is_ok());
        hub.publish(Some("alice"), None, &view(1, &["2"]));
        let e = alice.try_recv().expect("alice's view").expect("ok");
        assert_eq!(e.job.map(|j| j.job_id), Some("2".to_string()));
        assert!(alice.try_recv().is_err());
        assert_eq!(
            hub.scopes().into_iter().collect::<Vec<_>>(),
            vec![None, Some("alice".to_string())]
        );
    }
}

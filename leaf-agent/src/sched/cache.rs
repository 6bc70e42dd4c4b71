//! When to ask the scheduler, and what it said: pure policy, the caller
//! passes `now` and does the asking.
//!
//! A job is asked about once when first seen, then every `refresh_ms`
//! (allocations can change; labels do not). A failed answer is retried
//! after `retry_ms`, doubling up to `refresh_ms`. At most `max_in_flight`
//! questions are outstanding, so a thousand new jobs do not become a
//! thousand concurrent calls. Jobs that ended are forgotten.

use std::collections::HashMap;

use super::JobMeta;

/// Tunables of [`MetaCache`].
#[derive(Clone, Copy, Debug)]
pub struct CachePolicy {
    /// Re-ask about a known job this often.
    pub refresh_ms: i64,
    /// First retry delay after a failed answer.
    pub retry_ms: i64,
    /// Outstanding questions at most.
    pub max_in_flight: usize,
}

impl Default for CachePolicy {
    fn default() -> Self {
        CachePolicy {
            refresh_ms: 300_000,
            retry_ms: 5_000,
            max_in_flight: 4,
        }
    }
}

#[derive(Clone, Debug)]
struct Entry {
    meta: Option<JobMeta>,
    next_ms: i64,
    in_flight: bool,
    failures: u32,
}

/// Cached job metadata with the asking schedule; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct MetaCache {
    policy: CachePolicy,
    entries: HashMap<u64, Entry>,
}

impl MetaCache {
    /// An empty cache with `policy`.
    pub fn new(policy: CachePolicy) -> Self {
        MetaCache {
            policy,
            entries: HashMap::new(),
        }
    }

    /// Given the jobs on the node now, returns the ones to ask about (and
    /// marks them outstanding); forgets jobs no longer present.
    pub fn due(&mut self, live: &[u64], now_ms: i64) -> Vec<u64> {
        self.entries.retain(|id, _| live.contains(id));
        let mut in_flight = self.entries.values().filter(|e| e.in_flight).count();
        let mut out = Vec::new();
        for &id in live {
            if in_flight >= self.policy.max_in_flight {
                break;
            }
            let e = self.entries.entry(id).or_insert(Entry {
                meta: None,
                next_ms: now_ms,
                in_flight: false,
                failures: 0,
            });
            if !e.in_flight && now_ms >= e.next_ms {
                e.in_flight = true;
                in_flight += 1;
                out.push(id);
            }
        }
        out
    }

    /// Records the answer about `job_id` (`None`: the question failed).
    pub fn answer(&mut self, job_id: u64, meta: Option<JobMeta>, now_ms: i64) {
        let Some(e) = self.entries.get_mut(&job_id) else {
            return; // the job ended meanwhile
        };
        e.in_flight = false;
        match meta {
            Some(m) => {
                e.meta = Some(m);
                e.failures = 0;
                e.next_ms = now_ms.saturating_add(self.policy.refresh_ms);
            }
            None => {
                e.failures = e.failures.saturating_add(1);
                let backoff = self
                    .policy
                    .retry_ms
                    .saturating_mul(1 << e.failures.min(16).saturating_sub(1))
                    .min(self.policy.refresh_ms);
                e.next_ms = now_ms.saturating_add(backoff);
            }
        }
    }

    /// The last good answer about `job_id`.
    pub fn get(&self, job_id: u64) -> Option<&JobMeta> {
        self.entries.get(&job_id)?.meta.as_ref()
    }

    /// Failed answers in a row for `job_id` (0 once answered).
    pub fn failures(&self, job_id: u64) -> u32 {
        self.entries.get(&job_id).map_or(0, |e| e.failures)
    }

    /// Jobs tracked.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no job is tracked.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

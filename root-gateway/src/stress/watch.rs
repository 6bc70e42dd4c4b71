//! Two successive [`ClusterView`]s -> the changes a watcher asked for.
//! Pure: the shell polls the store once per tick and calls [`diff`] per
//! subscriber with its filter and threshold.

use super::{ClusterView, Io, JobFilter, JobIdentity, JobStress, Verdict};

/// What changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// Was running when the watch began (initial snapshot).
    Running,
    /// Appeared since the previous tick.
    Started,
    /// Gone since the previous tick.
    Ended,
    /// Its verdict differs from the previous tick's.
    VerdictChanged,
    /// Its read or write byte share rose above the threshold.
    ShareOverThreshold,
}

/// One change to one job.
#[derive(Clone, Debug, PartialEq)]
pub struct JobEvent {
    /// What changed.
    pub kind: EventKind,
    /// Evaluation time of the view that showed it, unix ms.
    pub time_ms: i64,
    /// The job.
    pub job: JobIdentity,
    /// Its verdict now (unknown once ended).
    pub verdict: Verdict,
    /// Its verdict at the previous tick (unknown if it was not running).
    pub previous_verdict: Verdict,
    /// Reasons of the current verdict.
    pub reasons: Vec<String>,
    /// Its share of cluster I/O now.
    pub io_share: Io,
}

fn event(kind: EventKind, time_ms: i64, j: &JobStress, previous: Verdict) -> JobEvent {
    JobEvent {
        kind,
        time_ms,
        job: j.job.clone(),
        verdict: j.verdict,
        previous_verdict: previous,
        reasons: j.reasons.clone(),
        io_share: j.io_share,
    }
}

fn over(j: &JobStress, threshold: f64) -> bool {
    j.io_share.max_bytes() > threshold
}

/// One [`EventKind::Running`] event per job of `view` that passes `f`
/// (the state part of the filter is ignored: a watch follows running jobs).
pub fn snapshot(view: &ClusterView, f: &JobFilter) -> Vec<JobEvent> {
    let f = JobFilter {
        state: super::StateFilter::Any,
        ..f.clone()
    };
    view.jobs
        .values()
        .filter(|j| f.matches(&j.job))
        .map(|j| event(EventKind::Running, view.time_ms, j, Verdict::Unknown))
        .collect()
}

/// The changes from `prev` to `next` for jobs passing `f`: ended jobs,
/// started jobs, verdict changes, and byte shares crossing above
/// `share_threshold` (edge-triggered: reported again only after falling
/// back to or below it).
pub fn diff(
    prev: &ClusterView,
    next: &ClusterView,
    f: &JobFilter,
    share_threshold: f64,
) -> Vec<JobEvent> {
    let f = JobFilter {
        state: super::StateFilter::Any,
        ..f.clone()
    };
    let t = next.time_ms;
    let mut out = Vec::new();
    for (id, p) in &prev.jobs {
        if !next.jobs.contains_key(id) && f.matches(&p.job) {
            let mut job = p.job.clone();
            job.running = false;
            out.push(JobEvent {
                kind: EventKind::Ended,
                time_ms: t,
                job,
                verdict: Verdict::Unknown,
                previous_verdict: p.verdict,
                reasons: vec!["the job has ended".into()],
                io_share: Io::default(),
            });
        }
    }
    for (id, n) in &next.jobs {
        if !f.matches(&n.job) {
            continue;
        }
        match prev.jobs.get(id) {
            None => {
                out.push(event(EventKind::Started, t, n, Verdict::Unknown));
                if over(n, share_threshold) {
                    out.push(event(EventKind::ShareOverThreshold, t, n, Verdict::Unknown));
                }
            }
            Some(p) => {
                if p.verdict != n.verdict {
                    out.push(event(EventKind::VerdictChanged, t, n, p.verdict));
                }
                if over(n, share_threshold) && !over(p, share_threshold) {
                    out.push(event(EventKind::ShareOverThreshold, t, n, p.verdict));
                }
            }
        }
    }
    out
}

//! How stressed each job and node is, computed from PromQL answers (pure core).
//!
//! Every number comes from a PromQL expression ([`queries`]) evaluated by
//! [`crate::promql::Engine`] on the store's [`crate::store::Querier`], so the
//! gRPC API, the HTTP API and a Grafana panel built from the same
//! expressions agree: one source of truth. Nothing here reads a clock or
//! spawns: the caller passes `now_ms` and a cancellation check. [`verdict`]
//! turns usage into ok / underusing / overloading with reasons in words;
//! [`watch`] turns two successive views into change events.

mod eval;
pub mod queries;
pub mod verdict;
pub mod watch;

use std::collections::BTreeMap;

pub use eval::{EngineSource, Evaluator, Sample, Source};
pub use verdict::Thresholds;

use crate::promql::PromqlError;

/// Errors computing stress.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum StressError {
    /// No live or recent series carries this job id.
    #[error("job {0:?} not found (no live or recent series carries it)")]
    JobNotFound(String),
    /// No series comes from this node.
    #[error("node {0:?} not found (the gateway never heard of it)")]
    NodeNotFound(String),
    /// A request field is invalid.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A gateway's HTTP API (a remote [`Source`]) failed to answer.
    #[error("asking the gateway {query:?}: {message}")]
    Remote {
        /// The expression.
        query: String,
        /// Why.
        message: String,
    },
    /// A PromQL expression failed.
    #[error("evaluating {query:?}: {source}")]
    Query {
        /// The expression.
        query: String,
        /// Why.
        source: PromqlError,
    },
}

/// What Canopy makes of a job's or node's usage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Verdict {
    /// No judgement: not enough data yet, or the node is down.
    #[default]
    Unknown,
    /// Uses what it holds, within limits.
    Ok,
    /// Holds cores, GPUs or memory it does not use.
    Underusing,
    /// At or over a limit, or dominating shared I/O.
    Overloading,
}

impl Verdict {
    /// Lower-case name, as the CLI and logs print it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Unknown => "unknown",
            Verdict::Ok => "ok",
            Verdict::Underusing => "underusing",
            Verdict::Overloading => "overloading",
        }
    }
}

/// Four I/O quantities; each absent when no series reports it. Used for
/// rates (bytes/s, ops/s) and for shares of the cluster total (0..1).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Io {
    /// Read bytes per second (or share).
    pub read_bytes: Option<f64>,
    /// Written bytes per second (or share).
    pub write_bytes: Option<f64>,
    /// Read operations per second (or share).
    pub read_ops: Option<f64>,
    /// Write operations per second (or share).
    pub write_ops: Option<f64>,
}

impl Io {
    /// This rate as a fraction of `total`, field by field; absent where
    /// either side is absent or the total is not positive.
    pub fn share_of(&self, total: &Io) -> Io {
        let f = |x: Option<f64>, t: Option<f64>| match (x, t) {
            (Some(x), Some(t)) if t > 0.0 && x.is_finite() => Some((x / t).clamp(0.0, 1.0)),
            _ => None,
        };
        Io {
            read_bytes: f(self.read_bytes, total.read_bytes),
            write_bytes: f(self.write_bytes, total.write_bytes),
            read_ops: f(self.read_ops, total.read_ops),
            write_ops: f(self.write_ops, total.write_ops),
        }
    }

    /// The larger of the read and write byte values, if either is present.
    pub fn max_bytes_opt(&self) -> Option<f64> {
        match (self.read_bytes, self.write_bytes) {
            (None, None) => None,
            (r, w) => Some(r.unwrap_or(0.0).max(w.unwrap_or(0.0))),
        }
    }

    /// The larger of the read and write byte values (0 when both absent).
    pub fn max_bytes(&self) -> f64 {
        self.read_bytes
            .unwrap_or(0.0)
            .max(self.write_bytes.unwrap_or(0.0))
    }
}

/// Identity of a job, from its series' labels.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobIdentity {
    /// The scheduler's job id.
    pub job_id: String,
    /// Owner.
    pub user: String,
    /// Account charged.
    pub account: String,
    /// Partition (queue).
    pub partition: String,
    /// Nodes the job has series on, sorted.
    pub nodes: Vec<String>,
    /// Its series are live now (else: ended within the recent window).
    pub running: bool,
}

/// One job's usage against its allocation, and what Canopy makes of it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobStress {
    /// Who and where.
    pub job: JobIdentity,
    /// Cores busy over the rate window, summed over nodes.
    pub cores_used: Option<f64>,
    /// Cores allocated, summed over nodes.
    pub cores_allocated: Option<f64>,
    /// Memory in use, bytes.
    pub memory_used_bytes: Option<f64>,
    /// Memory allocated, bytes.
    pub memory_allocated_bytes: Option<f64>,
    /// Mean SM utilisation over the job's GPUs (0..1).
    pub gpu_sm_utilization: Option<f64>,
    /// GPUs allocated.
    pub gpus_allocated: Option<f64>,
    /// I/O rates.
    pub io: Io,
    /// Share of the cluster's I/O.
    pub io_share: Io,
    /// Instructions per cycle, where counted.
    pub ipc: Option<f64>,
    /// Seconds (up to the rate window) the job has been observed on all
    /// its nodes; rates of a younger job under-read.
    pub observed_secs: Option<f64>,
    /// The judgement.
    pub verdict: Verdict,
    /// Why, one finding per line.
    pub reasons: Vec<String>,
}

/// One node's load and what Canopy makes of it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeStress {
    /// Node name.
    pub node: String,
    /// Its heartbeat is on time.
    pub up: bool,
    /// CPUs of the node.
    pub cpus: Option<f64>,
    /// Cores busy (all modes but idle and iowait).
    pub cores_busy: Option<f64>,
    /// One-minute load average.
    pub load1: Option<f64>,
    /// Memory, bytes.
    pub memory_total_bytes: Option<f64>,
    /// Memory available, bytes.
    pub memory_available_bytes: Option<f64>,
    /// Block-device I/O rates.
    pub disk: Io,
    /// Network receive, bytes/s.
    pub net_rx_bytes: Option<f64>,
    /// Network transmit, bytes/s.
    pub net_tx_bytes: Option<f64>,
    /// Cores allocated to the jobs on it.
    pub cores_allocated: Option<f64>,
    /// Job ids with series on it, sorted.
    pub job_ids: Vec<String>,
    /// The judgement.
    pub verdict: Verdict,
    /// Why.
    pub reasons: Vec<String>,
}

/// Every running job at one instant, with cluster I/O totals.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterView {
    /// Evaluation time, unix ms.
    pub time_ms: i64,
    /// Running jobs by job id.
    pub jobs: BTreeMap<String, JobStress>,
    /// Sum of every job's I/O rates.
    pub total: Io,
}

/// Which jobs a caller wants; `None` fields match everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobFilter {
    /// Owner.
    pub user: Option<String>,
    /// Account.
    pub account: Option<String>,
    /// Partition.
    pub partition: Option<String>,
    /// A node the job runs on.
    pub node: Option<String>,
    /// Running, ended, or both.
    pub state: StateFilter,
}

/// Job states a filter accepts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StateFilter {
    /// Running and recently ended.
    #[default]
    Any,
    /// Running only.
    Running,
    /// Recently ended only.
    Ended,
}

impl JobFilter {
    /// True when `j` passes every set field.
    pub fn matches(&self, j: &JobIdentity) -> bool {
        let eq = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        eq(&self.user, &j.user)
            && eq(&self.account, &j.account)
            && eq(&self.partition, &j.partition)
            && self
                .node
                .as_deref()
                .is_none_or(|n| j.nodes.iter().any(|x| x == n))
            && match self.state {
                StateFilter::Any => true,
                StateFilter::Running => j.running,
                StateFilter::Ended => !j.running,
            }
    }

    /// Equality matchers that narrow job queries without changing any
    /// job's totals (identity labels are the same on every node of a job;
    /// `node` is not, so it is applied after aggregation).
    pub fn scope(&self) -> Vec<(&'static str, String)> {
        let mut s = Vec::new();
        for (k, v) in [
            ("user", &self.user),
            ("account", &self.account),
            ("partition", &self.partition),
        ] {
            if let Some(v) = v {
                s.push((k, v.clone()));
            }
        }
        s
    }
}

/// Orders job ids numerically when both are numbers, else as text.
pub fn job_id_order(a: &str, b: &str) -> std::cmp::Ordering {
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        _ => a.cmp(b),
    }
}

#[cfg(test)]
mod tests;

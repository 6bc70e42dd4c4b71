//! CPU time of everything outside any job (daemons, logins, the OS),
//! exported under an empty `job_id`, so per-job sums plus this series make
//! up the node: nothing is dropped.
//!
//! Cheap by construction: no `/proc` scan. From the tick's buffer it takes
//! the node's busy CPU time (`canopy_node_cpu_seconds_total` over every
//! mode but `idle`, `iowait` and `steal`) and every job's
//! `canopy_job_cpu_seconds_total` (Slurm jobs, Kubernetes pods), and
//! reports `busy - sum(jobs present) - sum(last value of jobs that ended)`.
//! The difference is clamped to never decrease: the two sources are read a
//! few microseconds apart, and a job first reported late (it waits for its
//! scheduler labels) takes back the CPU it had used meanwhile, which was
//! counted outside until then. CPU a job used between its last report and
//! its end stays outside. The counter starts at the node's non-job CPU
//! time since boot (jobs that ended before the agent started included).
//!
//! Memory the same way, a gauge: `canopy_job_memory_bytes{job_id=""}` is
//! the node's memory in use (`MemTotal - MemFree`: page cache, buffers and
//! the kernel's own included, as a job's `memory.usage_in_bytes` or
//! `memory.current` includes its page cache) less every present job's
//! `canopy_job_memory_bytes`, never below 0: what no job is charged for.
//!
//! Metric: `canopy_job_cpu_seconds_total` with `job_id=""` (an empty label
//! is absent, which PromQL's `{job_id=""}` matches). GPU processes outside
//! jobs are reported the same way by the GPU collectors, their I/O by
//! [`super::outside_io`].

use std::collections::HashMap;

use super::meminfo::MemShare;
use super::{Collector, Observation};
use crate::error::LeafError;

/// Modes of `canopy_node_cpu_seconds_total` that are not busy time.
const IDLE_MODES: [&str; 3] = ["idle", "iowait", "steal"];

/// The non-job CPU account; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct OutsideCpu {
    last_jobs: HashMap<String, f64>,
    ended: f64,
    total: f64,
}

impl OutsideCpu {
    /// A fresh account.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one tick: node busy CPU-seconds and each present job's
    /// CPU-seconds total. Returns the non-job total (never decreasing).
    pub fn update(&mut self, node_busy: f64, jobs: &[(String, f64)]) -> f64 {
        for (id, last) in &self.last_jobs {
            if !jobs.iter().any(|(j, _)| j == id) {
                self.ended += last.max(0.0);
            }
        }
        self.last_jobs = jobs.iter().cloned().collect();
        let in_jobs: f64 = jobs.iter().map(|(_, c)| c.max(0.0)).sum();
        let outside = node_busy - in_jobs - self.ended;
        if outside.is_finite() && outside > self.total {
            self.total = outside;
        }
        self.total
    }

    /// Reads the tick's buffer and appends the `job_id=""` CPU series for
    /// `node` (when the node's CPU series is in the buffer) and memory
    /// series (when its memory total and free are).
    /// `memory` is the node's (total, free) when its series are not in the
    /// buffer (recorded by key).
    pub fn derive(&mut self, node: &str, obs: &mut Vec<Observation>, memory: Option<(u64, u64)>) {
        let mut busy = None;
        let mut jobs: Vec<(String, f64)> = Vec::new();
        let (mut mem_total, mut mem_free, mut in_jobs) = (None, None, 0.0);
        for o in obs.iter() {
            match o.labels.name() {
                "canopy_node_memory_total_bytes" => mem_total = Some(o.value),
                "canopy_node_memory_free_bytes" => mem_free = Some(o.value),
                "canopy_job_memory_bytes"
                    if o.labels.get("job_id").is_some_and(|j| !j.is_empty()) =>
                {
                    in_jobs += o.value.max(0.0);
                }
                "canopy_node_cpu_seconds_total"
                    if !IDLE_MODES.contains(&o.labels.get("mode").unwrap_or("")) =>
                {
                    *busy.get_or_insert(0.0) += o.value;
                }
                "canopy_job_cpu_seconds_total" => {
                    if let Some(j) = o.labels.get("job_id").filter(|j| !j.is_empty()) {
                        jobs.push((j.to_string(), o.value));
                    }
                }
                _ => {}
            }
        }
        let memory = match (mem_total, mem_free) {
            (Some(t), Some(f)) => Some((t, f)),
            _ => memory.map(|(t, f)| (t as f64, f as f64)),
        };
        if let Some((total, free)) = memory {
            let outside = outside_memory(total, free, in_jobs);
            obs.push(Observation::gauge(
                "canopy_job_memory_bytes",
                node,
                &[("job_id", "")],
                outside,
            ));
        }
        let Some(busy) = busy else { return };
        let v = self.update(busy, &jobs);
        obs.push(Observation::counter(
            "canopy_job_cpu_seconds_total",
            node,
            &[("job_id", "")],
            v,
        ));
    }
}

/// Memory no job is charged for: `total - free - in_jobs`, never below 0
/// (the jobs' cgroups and `/proc/meminfo` are read microseconds apart).
pub fn outside_memory(total: f64, free: f64, in_jobs: f64) -> f64 {
    let v = total - free - in_jobs;
    if v.is_finite() { v.max(0.0) } else { 0.0 }
}

/// Runs [`OutsideCpu::derive`] over the tick's buffer; registered after
/// the node CPU and job collectors.
#[derive(Debug)]
pub struct OutsideJobsCollector {
    node: String,
    account: OutsideCpu,
    memory: Option<MemShare>,
}

impl OutsideJobsCollector {
    /// A collector for `node`.
    pub fn new(node: &str) -> Self {
        OutsideJobsCollector {
            node: node.to_string(),
            account: OutsideCpu::new(),
            memory: None,
        }
    }

    /// Reads the node's memory from `share` when its series are not in the
    /// tick's buffer.
    pub fn with_memory(mut self, share: MemShare) -> Self {
        self.memory = Some(share);
        self
    }
}

impl Collector for OutsideJobsCollector {
    fn name(&self) -> &'static str {
        "outside_jobs"
    }

    fn collect(&mut self, out: &mut Vec<Observation>) -> Result<(), LeafError> {
        let memory = self.memory.as_ref().and_then(MemShare::get);
        self.account.derive(&self.node, out, memory);
        Ok(())
    }
}

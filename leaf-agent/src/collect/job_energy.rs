//! Per-job energy: the node's measured energy split among jobs by CPU time.
//!
//! Over each tick, a job is charged
//! `node energy delta x job CPU-seconds delta / node busy CPU-seconds delta`,
//! where node energy is RAPL (`psys`, else packages + DRAM, see
//! [`super::rapl::node_energy_joules`]) and node busy time is
//! `canopy_node_cpu_seconds_total` over every mode but `idle`, `iowait` and
//! `steal`. When the jobs' CPU time exceeds the node's busy time (the two
//! are read a few microseconds apart) the jobs' sum is the denominator, so
//! the shares never add up to more than the node used. Energy spent by idle
//! cores, the OS and non-job processes stays with the node. A job is charged
//! from the first tick it is seen; its total is monotonic.
//!
//! Metric (counter, the job's labels): `canopy_job_energy_joules_total`.

use std::collections::HashMap;

use canopy_proto::model::{Labels, MetricKind};

use super::Observation;
use super::rapl::node_energy_joules;

/// Splits `node_energy_j` among jobs in proportion to their CPU seconds
/// (`jobs`: key, CPU-seconds delta) over `node_busy_s`, the node's busy
/// CPU-seconds delta. Returns joules per key, in order; all zeros when
/// nothing was used or a delta is negative (a counter reset).
pub fn split_energy<K: Clone>(
    node_energy_j: f64,
    node_busy_s: f64,
    jobs: &[(K, f64)],
) -> Vec<(K, f64)> {
    let job_sum: f64 = jobs.iter().map(|(_, c)| c.max(0.0)).sum();
    let denom = node_busy_s.max(job_sum);
    let usable =
        node_energy_j.is_finite() && node_energy_j > 0.0 && denom.is_finite() && denom > 0.0;
    jobs.iter()
        .map(|(k, c)| {
            let share = if usable { c.max(0.0) / denom } else { 0.0 };
            (k.clone(), node_energy_j.max(0.0) * share)
        })
        .collect()
}

/// Modes of `canopy_node_cpu_seconds_total` that are not busy time.
const IDLE_MODES: [&str; 3] = ["idle", "iowait", "steal"];

/// Keeps each job's energy total across ticks; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct JobEnergy {
    last_energy: Option<f64>,
    last_busy: Option<f64>,
    last_cpu: HashMap<String, f64>,
    totals: HashMap<String, f64>,
}

impl JobEnergy {
    /// A fresh account.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one tick's totals (node energy joules, node busy CPU-seconds,
    /// per-job CPU-seconds) and returns each present job's energy total.
    /// Jobs absent from `jobs` are forgotten.
    pub fn update(
        &mut self,
        node_energy: f64,
        node_busy: f64,
        jobs: &[(String, f64)],
    ) -> Vec<(String, f64)> {
        let d_energy = self.last_energy.map_or(0.0, |l| node_energy - l);
        let d_busy = self.last_busy.map_or(0.0, |l| node_busy - l);
        self.last_energy = Some(node_energy);
        self.last_busy = Some(node_busy);
        let deltas: Vec<(String, f64)> = jobs
            .iter()
            .map(|(j, cpu)| {
                let d = self.last_cpu.get(j).map_or(0.0, |l| cpu - l);
                (j.clone(), d)
            })
            .collect();
        self.last_cpu = jobs.iter().cloned().collect();
        let shares = split_energy(d_energy, d_busy, &deltas);
        let mut totals = HashMap::with_capacity(shares.len());
        for (j, e) in shares {
            let t = self.totals.get(&j).copied().unwrap_or(0.0) + e;
            totals.insert(j, t);
        }
        self.totals = totals;
        jobs.iter()
            .map(|(j, _)| (j.clone(), self.totals.get(j).copied().unwrap_or(0.0)))
            .collect()
    }

    /// Reads one tick's observations (node energy zones, node CPU modes,
    /// `canopy_job_cpu_seconds_total` per job) and appends
    /// `canopy_job_energy_joules_total` with each job's labels. Does
    /// nothing on a node without RAPL.
    pub fn derive(&mut self, obs: &mut Vec<Observation>) {
        let zones: Vec<(String, f64)> = obs
            .iter()
            .filter(|o| o.labels.name() == "canopy_node_energy_joules_total")
            .map(|o| (o.labels.get("zone").unwrap_or("").to_string(), o.value))
            .collect();
        let Some(energy) = node_energy_joules(&zones) else {
            return;
        };
        let busy: f64 = obs
            .iter()
            .filter(|o| o.labels.name() == "canopy_node_cpu_seconds_total")
            .filter(|o| !IDLE_MODES.contains(&o.labels.get("mode").unwrap_or("")))
            .map(|o| o.value)
            .sum();
        let jobs: Vec<(&Labels, String, f64)> = obs
            .iter()
            .filter(|o| o.labels.name() == "canopy_job_cpu_seconds_total")
            .filter_map(|o| Some((&o.labels, o.labels.get("job_id")?.to_string(), o.value)))
            .collect();
        let input: Vec<(String, f64)> = jobs.iter().map(|(_, j, c)| (j.clone(), *c)).collect();
        let totals = self.update(energy, busy, &input);
        let new: Vec<Observation> = jobs
            .iter()
            .zip(totals)
            .map(|((labels, _, _), (_, joules))| Observation {
                labels: Labels::from_strs(labels.iter().map(|(k, v)| {
                    if k == canopy_proto::model::METRIC_NAME {
                        (k, "canopy_job_energy_joules_total")
                    } else {
                        (k, v)
                    }
                })),
                kind: MetricKind::Counter,
                value: joules,
            })
            .collect();
        obs.extend(new);
    }
}

/// Runs [`JobEnergy::derive`] as a collector. It reads what the collectors
/// before it appended to the tick's buffer, so it must be registered after
/// the RAPL and job collectors (as [`super::host_collectors`] does).
#[derive(Debug, Default)]
pub struct JobEnergyCollector {
    account: JobEnergy,
}

impl JobEnergyCollector {
    /// A collector with a fresh account.
    pub fn new() -> Self {
        Self::default()
    }
}

impl super::Collector for JobEnergyCollector {
    fn name(&self) -> &'static str {
        "job_energy"
    }

    fn collect(&mut self, out: &mut Vec<Observation>) -> Result<(), crate::error::LeafError> {
        self.account.derive(out);
        Ok(())
    }
}

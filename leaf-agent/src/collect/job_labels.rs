//! Gives job series from device collectors (GPU, perf_event, Lustre) the
//! job's scheduler labels. Those collectors know a job only by `job_id`;
//! the Slurm job collector's `canopy_job_cpu_seconds_total` of the same tick
//! carries `user`, `account` and `partition`, which are copied over so every
//! job series has the contract's labels.

use std::collections::HashMap;

use canopy_proto::model::Labels;

use super::{Collector, Observation};
use crate::error::LeafError;

/// The labels copied from the job collector's series.
pub const JOB_LABELS: [&str; 3] = ["user", "account", "partition"];

/// Adds `user`, `account`, `partition` to every `canopy_job_*` series that
/// has a `job_id` but no `user`, from the `canopy_job_cpu_seconds_total`
/// series of the same `job_id` and `node` in `obs`. Series of jobs the job
/// collector does not know (an OSS's Lustre jobs) are left as they are.
pub fn enrich_job_labels(obs: &mut [Observation]) {
    let mut known: HashMap<(String, String), Vec<(String, String)>> = HashMap::new();
    for o in obs
        .iter()
        .filter(|o| o.labels.name() == "canopy_job_cpu_seconds_total")
    {
        let (Some(job), node) = (o.labels.get("job_id"), o.labels.get("node").unwrap_or("")) else {
            continue;
        };
        let extra: Vec<(String, String)> = JOB_LABELS
            .iter()
            .filter_map(|k| Some((k.to_string(), o.labels.get(k)?.to_string())))
            .collect();
        known.insert((job.to_string(), node.to_string()), extra);
    }
    if known.is_empty() {
        return;
    }
    for o in obs.iter_mut() {
        if !o.labels.name().starts_with("canopy_job_") || o.labels.get("user").is_some() {
            continue;
        }
        let Some(job) = o.labels.get("job_id") else {
            continue;
        };
        let key = (
            job.to_string(),
            o.labels.get("node").unwrap_or("").to_string(),
        );
        let Some(extra) = known.get(&key) else {
            continue;
        };
        let pairs = o
            .labels
            .iter()
            .chain(extra.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        o.labels = Labels::from_strs(pairs);
    }
}

/// Runs [`enrich_job_labels`] over the tick's buffer; registered after the
/// collectors whose series it completes.
#[derive(Debug, Default)]
pub struct JobLabelsCollector;

impl Collector for JobLabelsCollector {
    fn name(&self) -> &'static str {
        "job_labels"
    }

    fn collect(&mut self, out: &mut Vec<Observation>) -> Result<(), LeafError> {
        enrich_job_labels(out);
        Ok(())
    }
}

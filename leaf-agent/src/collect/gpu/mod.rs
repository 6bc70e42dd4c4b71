//! GPUs: NVIDIA through NVML (loaded at run time by `nvml-wrapper`, so the
//! agent builds and runs without a driver) and AMD through the `amdgpu`
//! sysfs files. The readers turn what the driver says into the plain types
//! below; everything after that (per-job attribution, metric names) is pure
//! and tested on recorded values.
//!
//! Node metrics (gauges, label `gpu`): `canopy_node_gpu_sm_utilization_ratio`
//! (NVIDIA: the sum of the per-process SM utilisation NVML samples, capped at
//! 1, not NVML's "GPU utilisation", which only says a kernel was running),
//! `canopy_node_gpu_busy_ratio` (AMD `gpu_busy_percent`, the only activity
//! figure amdgpu exposes), `canopy_node_gpu_memory_used_bytes`,
//! `canopy_node_gpu_memory_total_bytes`, `canopy_node_gpu_power_watts`,
//! `canopy_node_gpu_temperature_celsius`.
//!
//! Job metrics (gauges, labels `job_id`, `gpu`, and `mig` = `gi<g>/ci<c>` on
//! a MIG instance): `canopy_job_gpu_sm_utilization_ratio`,
//! `canopy_job_gpu_memory_bytes`. Processes that belong to no job are
//! summed under an empty `job_id`.

pub mod amd;
pub mod drm;
pub mod nvml;

use std::collections::{BTreeMap, HashMap};

use super::Observation;

/// One GPU's readings at one tick. `None` where the driver does not say.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuSample {
    /// The `gpu` label: the NVML index (`0`) or the DRM card (`card1`).
    pub gpu: String,
    /// SM activity, 0..=1 (NVIDIA).
    pub sm_utilization: Option<f64>,
    /// Busy fraction, 0..=1 (AMD `gpu_busy_percent`).
    pub busy: Option<f64>,
    /// Device memory in use, bytes.
    pub memory_used_bytes: Option<u64>,
    /// Device memory size, bytes.
    pub memory_total_bytes: Option<u64>,
    /// Board power, watts.
    pub power_watts: Option<f64>,
    /// Temperature (NVML GPU sensor; amdgpu `edge`), degrees Celsius.
    pub temperature_celsius: Option<f64>,
}

/// One process on one GPU, as NVML reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuProcess {
    /// The `gpu` label of the device.
    pub gpu: String,
    /// Host PID.
    pub pid: u32,
    /// SM utilisation over the last sample period, percent (absent when
    /// NVML has no sample for it, e.g. on a MIG instance).
    pub sm_percent: Option<u32>,
    /// Device memory the process holds, bytes.
    pub memory_bytes: Option<u64>,
    /// `(gpu instance, compute instance)` when the GPU is in MIG mode.
    pub mig: Option<(u32, u32)>,
}

/// One job's use of one GPU (or MIG instance).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct JobGpuUse {
    /// SM activity, 0..=1 (summed over the job's processes, capped at 1);
    /// `None` when no process of the job had a sample.
    pub sm_utilization: Option<f64>,
    /// Device memory held by the job's processes, bytes.
    pub memory_bytes: u64,
}

/// Key of [`per_job`]: `(job_id, gpu, mig label)`; `job_id` is `""` for
/// processes outside any job, `mig` is `""` outside MIG.
pub type JobGpuKey = (String, String, String);

/// Attributes GPU processes to jobs through `pid_jobs` (PID -> job id).
pub fn per_job(
    procs: &[GpuProcess],
    pid_jobs: &HashMap<u32, String>,
) -> BTreeMap<JobGpuKey, JobGpuUse> {
    let mut m: BTreeMap<JobGpuKey, JobGpuUse> = BTreeMap::new();
    for p in procs {
        let job = pid_jobs.get(&p.pid).cloned().unwrap_or_default();
        let mig = p
            .mig
            .map(|(g, c)| format!("gi{g}/ci{c}"))
            .unwrap_or_default();
        let e = m.entry((job, p.gpu.clone(), mig)).or_default();
        if let Some(sm) = p.sm_percent {
            let add = f64::from(sm.min(100)) / 100.0;
            e.sm_utilization = Some((e.sm_utilization.unwrap_or(0.0) + add).min(1.0));
        }
        e.memory_bytes = e.memory_bytes.saturating_add(p.memory_bytes.unwrap_or(0));
    }
    m
}

/// A GPU's SM activity from its processes' samples: the sum capped at 1, or
/// `None` when no process had a sample.
pub fn node_sm_utilization(procs: &[GpuProcess], gpu: &str) -> Option<f64> {
    let samples: Vec<u32> = procs
        .iter()
        .filter(|p| p.gpu == gpu)
        .filter_map(|p| p.sm_percent)
        .collect();
    if samples.is_empty() {
        return None;
    }
    let sum: u32 = samples.iter().map(|s| (*s).min(100)).sum();
    Some((f64::from(sum) / 100.0).min(1.0))
}

/// The Slurm job of a process from its `/proc/<pid>/cgroup` text: the first
/// path component `job_<digits>` (cgroup v1 `.../slurm*/uid_<u>/job_<id>/...`
/// or v2 `.../slurmstepd.scope/job_<id>/...`).
pub fn job_from_proc_cgroup(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let path = line.splitn(3, ':').nth(2)?;
        path.split('/').find_map(|c| {
            let id = c.strip_prefix("job_")?;
            (!id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())).then(|| id.to_string())
        })
    })
}

/// Appends the node series of each GPU.
pub fn node_observations(node: &str, gpus: &[GpuSample], out: &mut Vec<Observation>) {
    for g in gpus {
        let l = [("gpu", g.gpu.as_str())];
        let series = [
            ("canopy_node_gpu_sm_utilization_ratio", g.sm_utilization),
            ("canopy_node_gpu_busy_ratio", g.busy),
            (
                "canopy_node_gpu_memory_used_bytes",
                g.memory_used_bytes.map(|v| v as f64),
            ),
            (
                "canopy_node_gpu_memory_total_bytes",
                g.memory_total_bytes.map(|v| v as f64),
            ),
            ("canopy_node_gpu_power_watts", g.power_watts),
            ("canopy_node_gpu_temperature_celsius", g.temperature_celsius),
        ];
        for (name, v) in series {
            if let Some(v) = v {
                out.push(Observation::gauge(name, node, &l, v));
            }
        }
    }
}

/// Appends the per-job GPU series from [`per_job`].
pub fn job_observations(
    node: &str,
    jobs: &BTreeMap<JobGpuKey, JobGpuUse>,
    out: &mut Vec<Observation>,
) {
    for ((job, gpu, mig), u) in jobs {
        let l = [
            ("job_id", job.as_str()),
            ("gpu", gpu.as_str()),
            ("mig", mig.as_str()),
        ];
        if let Some(sm) = u.sm_utilization {
            out.push(Observation::gauge(
                "canopy_job_gpu_sm_utilization_ratio",
                node,
                &l,
                sm,
            ));
        }
        out.push(Observation::gauge(
            "canopy_job_gpu_memory_bytes",
            node,
            &l,
            u.memory_bytes as f64,
        ));
    }
}
